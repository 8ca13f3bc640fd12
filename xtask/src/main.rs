//! `cargo xtask`: project automation that is not part of Breeze itself.
//!
//! - `cargo xtask tidy` checks repository conventions (also run by `cargo test`).
//! - `cargo xtask docs` rewrites the documents generated from the tool registry
//!   (`docs/tools.md`, `docs/skill/`); a `breeze-tools` test fails while they are stale.
//! - `cargo xtask bench mcp` measures the MCP server side by side with peer servers.
//! - `cargo xtask bench sizes` prints the byte size of `tools/list` per key and catalog mode,
//!   and the execute key's full listing per tool and part (no load).
//! - `cargo xtask bench fleet [--agents N] [--duration SECS] [--database sqlite|postgres]`
//!   drives the device gateway with simulated agents.
//! - `cargo xtask bench devices [--devices N] [--concurrency C] [--duration SECS]
//!   [--database sqlite|postgres|both] [--audit-commit sync|async|both]` measures
//!   `query_devices` over a seeded fleet against the rmcp peer (on PostgreSQL with the audit
//!   log's synchronous commit, its asynchronous opt-out, or both).
//! - `cargo xtask bench alerts [--devices N] [--rules N] [--cycles N]
//!   [--database sqlite|postgres|both]` measures the alert engine's evaluation cycle, alert
//!   latency and a 10,000-device report's time and peak memory, in process.
//! - `cargo xtask bench compliance [--devices N] [--rules N] [--packages N] [--changes N]
//!   [--database sqlite|postgres|both]` measures compliance evaluation (a full pass and an
//!   incremental inventory change) over a seeded fleet, in process.
//! - `cargo xtask bench pages [--devices N] [--rounds R] [--database sqlite|postgres]
//!   [--build release|debug]` prints each dashboard page's bytes and time for an
//!   organization of N devices (default 10,000), and whether the devices list met its
//!   100 ms aim.
//! - `cargo xtask bench livequery [--agents N] [--rounds R] [--database sqlite|postgres]` times
//!   `run_live_query` over N simulated agents: first row, each answer (p50, p99), last answer,
//!   the server's CPU.
//! - `cargo xtask bench vulns [--devices N] [--records N] [--packages N] [--changes N]
//!   [--database …]` times importing a generated Debian archive against N inventories (the
//!   exposure recompute) and the per-inventory incremental recompute.
//! - `cargo xtask bench billing [--tickets N] [--invoices N] [--database sqlite|postgres|both]`
//!   measures `list_invoices` and `manage_tickets list` over 100,000 tickets and 10,000
//!   invoices beside the rmcp peer.
//!
//! Every benchmark writes what it printed into its own section of `docs/performance.md`
//! ([`perf_doc`]).
#![allow(clippy::print_stdout, clippy::print_stderr)] // a command-line tool prints by design

#[macro_use]
mod perf_doc; // first: the benchmarks use its `report!`
mod bench;
mod docs;
mod tidy;

const USAGE: &str = "usage: cargo xtask tidy
       cargo xtask docs
       cargo xtask bench mcp
       cargo xtask bench sizes
       cargo xtask bench fleet [--agents N] [--duration SECS] [--database sqlite|postgres]
                               [--enroll-concurrency N] [--connect-concurrency N]
                               [--cmd-users N] [--samples-per-batch N]
       cargo xtask bench devices [--devices N] [--concurrency N] [--duration SECS]
                                 [--database sqlite|postgres|both]
                                 [--audit-commit sync|async|both]
       cargo xtask bench alerts [--devices N] [--rules N] [--cycles N]
                                [--database sqlite|postgres|both]
       cargo xtask bench compliance [--devices N] [--rules N] [--packages N] [--changes N]
                                    [--database sqlite|postgres|both]
       cargo xtask bench livequery [--agents N] [--rounds N] [--database sqlite|postgres]
       cargo xtask bench cluster [--agents N] [--calls N] [--duration SECS]
       cargo xtask bench pages [--devices N] [--audit N] [--rounds N]
                               [--database sqlite|postgres|both]
                               [--build release|debug]
       cargo xtask bench row-security [--calls N] [--devices N]
       cargo xtask bench reports [--rows N] [--database sqlite|postgres|both]
       cargo xtask bench tools [--devices N] [--audit-rows N] [--concurrency N]
                               [--duration SECS] [--database sqlite|postgres|both]
                               [--only NAME]
       cargo xtask bench vulns [--devices N] [--records N] [--packages N] [--changes N]
                               [--database sqlite|postgres|both]
       cargo xtask bench billing [--tickets N] [--invoices N] [--concurrency N]
                               [--duration SECS] [--database sqlite|postgres|both]
       cargo xtask bench chat [--turns N] [--streams N] [--duration SECS] [--pace-ms MS]
                              [--database sqlite|postgres]
       cargo xtask bench sources [--calls N] [--operations N] [--database sqlite|postgres]";

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["tidy"] => tidy::run(),
        ["docs"] => docs::run(),
        ["bench", name, rest @ ..] => {
            run_bench(name, rest)?;
            perf_doc::write(&bench::workspace_root()?, name, rest)
        }
        _ => anyhow::bail!("{USAGE}"),
    }
}

fn run_bench(name: &str, rest: &[&str]) -> anyhow::Result<()> {
    match (name, rest) {
        ("mcp", []) => bench::mcp(),
        ("sizes", []) => bench::sizes::run_sizes(),
        ("fleet", rest) => bench::fleet::run(rest),
        ("livequery", rest) => bench::livequery::run(rest),
        ("cluster", rest) => bench::cluster::run_bench(rest),
        ("devices", rest) => bench::devices::run(rest),
        ("pages", rest) => bench::pages::run(rest),
        ("alerts", rest) => bench::alerts::run(rest),
        ("compliance", rest) => bench::compliance::run(rest),
        ("row-security", rest) => bench::row_security::run(rest),
        ("reports", rest) => bench::reports::run(rest),
        ("tools", rest) => bench::tools::run(rest),
        ("vulns", rest) => bench::vulns::run(rest),
        ("billing", rest) => bench::billing::run(rest),
        ("chat", rest) => bench::chat::run(rest),
        ("sources", rest) => bench::sources::run(rest),
        _ => anyhow::bail!("{USAGE}"),
    }
}
