//! `cargo xtask`: project automation that is not part of Breeze itself.
//!
//! - `cargo xtask tidy` checks repository conventions (also run by `cargo test`).
//! - `cargo xtask bench mcp` measures the MCP server side by side with peer servers.
#![allow(clippy::print_stdout, clippy::print_stderr)] // a command-line tool prints by design

mod bench;
mod tidy;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["tidy"] => tidy::run(),
        ["bench", "mcp"] => bench::mcp(),
        _ => anyhow::bail!("usage: cargo xtask tidy | cargo xtask bench mcp"),
    }
}
