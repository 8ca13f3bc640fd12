//! Repository conventions, checked by `cargo xtask tidy` and by `cargo test`.
//!
//! - Every Rust file starts with a `//!` module doc (after attributes and comments).
//! - No test is skipped with `#[ignore]`: a test that cannot run here is deleted or fixed.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

/// Runs every check and reports all failures at once.
pub(crate) fn run() -> anyhow::Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .context("workspace root")?;
    let mut problems = Vec::new();
    for file in rust_files(root)? {
        let text = std::fs::read_to_string(&file).with_context(|| file.display().to_string())?;
        let rel = file
            .strip_prefix(root)
            .unwrap_or(&file)
            .display()
            .to_string();
        problems.extend(check_file(&rel, &text));
    }
    if problems.is_empty() {
        Ok(())
    } else {
        bail!(
            "tidy found {} problem(s):\n{}",
            problems.len(),
            problems.join("\n")
        )
    }
}

fn check_file(path: &str, text: &str) -> Vec<String> {
    let mut problems = Vec::new();
    // Plain comments (licence headers) and inner attributes may precede the module doc.
    let is_preamble = |l: &str| {
        l.is_empty() || l.starts_with("#![") || (l.starts_with("//") && !l.starts_with("//!"))
    };
    let first_code = text.lines().map(str::trim).find(|l| !is_preamble(l));
    if !first_code.is_some_and(|l| l.starts_with("//!")) {
        problems.push(format!("{path}: missing a `//!` module doc at the top"));
    }
    let ignore_attr = ["#[", "ignore]"].concat();
    for (n, line) in text.lines().enumerate() {
        if line.trim_start().starts_with(&ignore_attr) {
            problems.push(format!(
                "{path}:{}: `{ignore_attr}` hides a test; fix it or delete it",
                n + 1
            ));
        }
    }
    problems
}

fn rust_files(root: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut stack = vec![root.join("crates"), root.join("xtask")];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries {
            let path = entry?.path();
            let name = path
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default();
            if path.is_dir() {
                if !matches!(name, "target" | "node_modules") && !name.starts_with('.') {
                    stack.push(path);
                }
            } else if name.ends_with(".rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tidy() {
        if let Err(e) = run() {
            panic!("{e:#}");
        }
    }

    #[test]
    fn flags_files_without_module_docs() {
        assert!(check_file("a.rs", "//! Docs.\nfn main() {}\n").is_empty());
        assert!(check_file("a.rs", "// SPDX\n#![allow(x)]\n//! Docs.\n").is_empty());
        assert_eq!(check_file("b.rs", "/// item doc\nfn f() {}\n").len(), 1);
        assert_eq!(check_file("c.rs", "").len(), 1);
        let ignored = format!("//! D.\n#[{}]\nfn t() {{}}\n", "ignore");
        assert_eq!(check_file("d.rs", &ignored).len(), 1);
    }
}
