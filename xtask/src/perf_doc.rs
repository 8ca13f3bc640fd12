//! `docs/performance.md`: each benchmark's latest result, written by the benchmark itself.
//!
//! A benchmark prints its result with `report!` instead of `println!`: the line goes to
//! stdout and is kept. When `cargo xtask bench NAME` succeeds, what it kept replaces the text
//! between `<!-- bench:NAME:begin -->` and `<!-- bench:NAME:end -->` in `docs/performance.md`
//! (a section is appended when the file has none yet), under a line naming the command, the
//! date, the commit and the machine. Progress goes to stderr and is not kept. A smoke run
//! (`BENCH_PROFILE=debug`, `--build debug`) writes nothing: its numbers mean nothing.

use std::{path::Path, process::Command, sync::Mutex};

use anyhow::{Context, bail};

/// Where the tables live, from the workspace root.
const DOC: &str = "docs/performance.md";

/// What the running benchmark reported so far.
static KEPT: Mutex<String> = Mutex::new(String::new());

/// Prints a line of a benchmark's result to stdout and keeps it for `docs/performance.md`.
macro_rules! report {
    () => {
        $crate::perf_doc::keep("")
    };
    ($($arg:tt)*) => {
        $crate::perf_doc::keep(&format!($($arg)*))
    };
}

/// Prints `line` and keeps it (see `report!`).
pub(crate) fn keep(line: &str) {
    println!("{line}");
    let mut kept = KEPT.lock().unwrap_or_else(|e| e.into_inner());
    kept.push_str(line);
    kept.push('\n');
}

/// Writes what `cargo xtask bench <bench> <args>` reported into its section of the document.
/// Nothing is written when it reported nothing (a debug xtask that re-ran itself in release:
/// the release run wrote) or for a smoke run.
pub(crate) fn write(root: &Path, bench: &str, args: &[&str]) -> anyhow::Result<()> {
    let kept = std::mem::take(&mut *KEPT.lock().unwrap_or_else(|e| e.into_inner()));
    if kept.trim().is_empty() {
        return Ok(());
    }
    #[allow(clippy::disallowed_methods)] // benchmark knob, as in `bench::profile`
    let debug_profile = std::env::var("BENCH_PROFILE").as_deref() == Ok("debug");
    if debug_profile || args.windows(2).any(|w| w == ["--build", "debug"]) {
        eprintln!("a smoke run: {DOC} left as it was");
        return Ok(());
    }
    let command = ["cargo xtask bench", bench]
        .into_iter()
        .chain(args.iter().copied())
        .collect::<Vec<_>>()
        .join(" ");
    let body = format!("{}\n\n{}", stamp(root, &command), markdown(&kept));
    let path = root.join(DOC);
    let doc = std::fs::read_to_string(&path).with_context(|| format!("reading {DOC}"))?;
    let doc = replace_section(&doc, bench, &body)?;
    std::fs::write(&path, doc).with_context(|| format!("writing {DOC}"))?;
    eprintln!("wrote the {bench} section of {DOC}");
    Ok(())
}

/// `doc` with the text between `bench`'s markers replaced by `body`; the section is appended,
/// under a heading, when `doc` has neither marker.
fn replace_section(doc: &str, bench: &str, body: &str) -> anyhow::Result<String> {
    let begin = format!("<!-- bench:{bench}:begin -->");
    let end = format!("<!-- bench:{bench}:end -->");
    let body = body.trim_end();
    match (doc.find(&begin), doc.find(&end)) {
        (Some(b), Some(e)) if b < e => Ok(format!(
            "{}\n{body}\n{}",
            &doc[..b + begin.len()],
            &doc[e..]
        )),
        (None, None) => Ok(format!(
            "{}\n\n## `cargo xtask bench {bench}`\n\n{begin}\n{body}\n{end}\n",
            doc.trim_end()
        )),
        _ => bail!("{DOC}: the markers {begin} and {end} must both be there, in that order"),
    }
}

/// A benchmark's printed lines as Markdown: tables and headings as they are, every other run of
/// lines in a `text` block, so columns printed with spaces stay aligned.
fn markdown(printed: &str) -> String {
    let mut out = String::new();
    let mut in_text = false;
    for line in printed.trim().lines() {
        let text = !(line.trim().is_empty() || line.starts_with('|') || line.starts_with('#'));
        if text != in_text {
            out.push_str(if text { "```text\n" } else { "```\n" });
            in_text = text;
        }
        out.push_str(line);
        out.push('\n');
    }
    if in_text {
        out.push_str("```\n");
    }
    out
}

/// "Written by `COMMAND` on DATE at COMMIT, on N CPUs (MODEL)." for the top of a section.
fn stamp(root: &Path, command: &str) -> String {
    #[allow(clippy::disallowed_methods)] // a date for the reader; no Breeze clock out here
    let date = chrono::Utc::now().format("%Y-%m-%d");
    let git = |args: &[&str]| {
        Command::new("git")
            .current_dir(root)
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
    };
    let commit =
        git(&["rev-parse", "--short", "HEAD"]).unwrap_or_else(|| "an unknown commit".into());
    let dirty = git(&[
        "status",
        "--porcelain",
        "--untracked-files=no",
        "--",
        ".",
        ":(exclude)docs/performance.md",
    ])
    .is_some_and(|s| !s.is_empty());
    let cpus = std::thread::available_parallelism().map_or(0, usize::from);
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find_map(|l| l.strip_prefix("model name")?.split_once(':'))
                .map(|(_, m)| m.trim().to_owned())
        })
        .unwrap_or_else(|| "model unknown".into());
    format!(
        "_Written by `{command}` on {date} at `{commit}`{}, on {cpus} CPUs ({model})._",
        if dirty {
            " with uncommitted changes"
        } else {
            ""
        }
    )
}

#[cfg(test)]
mod tests {
    use super::{markdown, replace_section};

    const DOC: &str = "# Performance\n\nHow to run.\n\n\
        <!-- bench:mcp:begin -->\nold mcp\n<!-- bench:mcp:end -->\n\n\
        <!-- bench:sizes:begin -->\nold sizes\n<!-- bench:sizes:end -->\n";

    #[test]
    fn replaces_only_its_own_section() {
        let doc = replace_section(DOC, "mcp", "new mcp\n\n| a |\n").unwrap();
        assert_eq!(
            doc,
            "# Performance\n\nHow to run.\n\n\
             <!-- bench:mcp:begin -->\nnew mcp\n\n| a |\n<!-- bench:mcp:end -->\n\n\
             <!-- bench:sizes:begin -->\nold sizes\n<!-- bench:sizes:end -->\n"
        );
        // Writing the same result again changes nothing.
        assert_eq!(
            replace_section(&doc, "mcp", "new mcp\n\n| a |").unwrap(),
            doc
        );
    }

    #[test]
    fn appends_a_section_the_document_lacks() {
        let doc = replace_section(DOC, "fleet", "agents").unwrap();
        assert!(doc.starts_with(DOC.trim_end()));
        assert!(doc.ends_with(
            "\n\n## `cargo xtask bench fleet`\n\n\
             <!-- bench:fleet:begin -->\nagents\n<!-- bench:fleet:end -->\n"
        ));
        assert_eq!(
            replace_section(&doc, "fleet", "more agents")
                .unwrap()
                .matches("bench:fleet:begin")
                .count(),
            1
        );
    }

    #[test]
    fn refuses_a_lone_or_misplaced_marker() {
        let lone = "<!-- bench:mcp:begin -->\nold\n";
        assert!(replace_section(lone, "mcp", "new").is_err());
        let reversed = "<!-- bench:mcp:end -->\n<!-- bench:mcp:begin -->\n";
        assert!(replace_section(reversed, "mcp", "new").is_err());
    }

    #[test]
    fn fences_text_and_keeps_tables() {
        let printed =
            "\n## heading\n\n| a | b |\n|---|---:|\n\ncycle  wall\n    1  2.0\n\nlast line\n";
        assert_eq!(
            markdown(printed),
            "## heading\n\n| a | b |\n|---|---:|\n\n```text\ncycle  wall\n    1  2.0\n```\n\n\
             ```text\nlast line\n```\n"
        );
    }
}
