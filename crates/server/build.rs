//! Stamps the build with its git revision (`BREEZE_REVISION`), shown in MCP `serverInfo`.
//! A build outside a git checkout (or with `BREEZE_REVISION` already set) keeps what it has.
//!
//! It reruns when this checkout's HEAD moves: the HEAD file and the one branch ref it names,
//! resolved by git itself so that a worktree watches its own. Watching all of `refs/heads`
//! would rebuild the server (and relink every test binary) whenever any other worktree commits.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    Command::new("git")
        .args(args)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
}

fn main() {
    println!("cargo:rerun-if-env-changed=BREEZE_REVISION");
    #[allow(clippy::disallowed_methods)] // build script: reads the build's own environment
    if std::env::var("BREEZE_REVISION").is_ok() {
        return;
    }
    let mut watched = vec!["HEAD".to_owned(), "packed-refs".to_owned()];
    watched.extend(git(&["symbolic-ref", "-q", "HEAD"]));
    for name in watched {
        // A missing file would make cargo rerun the script on every build.
        let path = git(&["rev-parse", "--path-format=absolute", "--git-path", &name]);
        if let Some(path) = path.filter(|p| std::path::Path::new(p).exists()) {
            println!("cargo:rerun-if-changed={path}");
        }
    }
    if let Some(r) = git(&["rev-parse", "--short=12", "HEAD"]) {
        println!("cargo:rustc-env=BREEZE_REVISION={r}");
    }
}
