//! Stamps the build with its git revision (`BREEZE_REVISION`), shown in MCP `serverInfo`.
//! A build outside a git checkout (or with `BREEZE_REVISION` already set) keeps what it has.

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=BREEZE_REVISION");
    println!("cargo:rerun-if-changed=../../.git/HEAD");
    println!("cargo:rerun-if-changed=../../.git/refs/heads");
    #[allow(clippy::disallowed_methods)] // build script: reads the build's own environment
    if std::env::var("BREEZE_REVISION").is_ok() {
        return;
    }
    let revision = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty());
    if let Some(r) = revision {
        println!("cargo:rustc-env=BREEZE_REVISION={r}");
    }
}
