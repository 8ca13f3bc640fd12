//! `breeze sources …` end to end on both backends, against a local https MCP server (the test
//! CA of `breeze_sources::testing`, reached through `TOOL_SOURCES_ALLOW_PRIVATE_EGRESS` and
//! `TOOL_SOURCES_EXTRA_ROOTS` as a deployment's tests would): add, discover, the tools listed
//! disabled with their proposed tiers, "enable all reads", setting the tier of several tools,
//! "disable all", editing (the credential rule included), another organization seeing
//! nothing, and deleting.
#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use std::{
    path::Path,
    process::{Command, Stdio},
};

use breeze_sources::testing::{McpServer, TestCa, tool};

mod common;
use common::breeze;

/// `breeze` in `dir` with the backend's settings and the egress that reaches the test server.
fn cli(dir: &Path, env: &[(&str, String)]) -> Command {
    let mut c = breeze(dir);
    for (k, v) in env {
        c.env(k, v);
    }
    c
}

fn ok(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn refused(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    assert!(!out.status.success(), "{cmd:?} should fail");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The line of `tool` in `breeze sources tools` output.
fn line<'a>(listing: &'a str, tool: &str) -> &'a str {
    listing
        .lines()
        .find(|l| l.starts_with(&format!("docs__{tool} ")))
        .unwrap_or_else(|| panic!("{tool} not listed: {listing}"))
}

fn scenario(dir: &Path, backend: &[(&str, String)]) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let ca = TestCa::new();
    let upstream = McpServer::new(vec![
        tool("search", "Search the docs", true),
        tool("lookup", "Look up one page", true),
        tool("wipe", "Delete every page", false),
    ]);
    let addr = rt.block_on(ca.serve(upstream.router(), true));
    let roots = dir.join("test-ca.pem");
    std::fs::write(&roots, &ca.ca_pem).unwrap();
    let mut env = backend.to_vec();
    env.push(("TOOL_SOURCES_ALLOW_PRIVATE_EGRESS", "true".to_owned()));
    env.push(("TOOL_SOURCES_EXTRA_ROOTS", roots.display().to_string()));
    let run = |args: &[&str]| ok(cli(dir, &env).args(args));
    let fail = |args: &[&str]| refused(cli(dir, &env).args(args));

    run(&["migrate"]);
    run(&["partners", "create", "--name", "Northwind IT"]);
    for org in ["Fabrikam", "Contoso"] {
        run(&["orgs", "create", "--partner", "northwind-it", "--name", org]);
    }
    let url = format!("https://127.0.0.1:{}/mcp", addr.port());
    let added = run(&[
        "sources", "add", "--org", "fabrikam", "--name", "Docs", "--url", &url,
    ]);
    assert!(
        added.contains("added docs  Docs (mcp, this organization)"),
        "{added}"
    );
    let found = run(&["sources", "discover", "--org", "fabrikam", "docs"]);
    assert!(found.contains("docs: 3 tools, 0 skipped"), "{found}");

    // Disabled on arrival, each with the tier its annotations propose.
    let tools = run(&["sources", "tools", "--org", "fabrikam", "docs"]);
    assert!(
        line(&tools, "search").contains("tier 1 (proposed 1) disabled"),
        "{tools}"
    );
    assert!(
        line(&tools, "wipe").contains("tier 3 (proposed 3) disabled"),
        "{tools}"
    );

    let on = run(&["sources", "enable-reads", "--org", "fabrikam", "docs"]);
    assert!(on.contains("docs: 2 tools enabled"), "{on}");
    let tools = run(&["sources", "tools", "--org", "fabrikam", "docs"]);
    for t in ["search", "lookup"] {
        assert!(
            line(&tools, t).contains("tier 1 (proposed 1) enabled"),
            "{tools}"
        );
    }
    assert!(line(&tools, "wipe").contains("disabled"), "{tools}");
    // Once more: nothing left to enable.
    let again = run(&["sources", "enable-reads", "--org", "fabrikam", "docs"]);
    assert!(again.contains("docs: 0 tools enabled"), "{again}");

    // The tier of several tools at once.
    let set = run(&[
        "sources", "set", "--org", "fabrikam", "docs", "search", "lookup", "--tier", "2",
    ]);
    assert!(
        set.contains("docs__search: tier 2, enabled")
            && set.contains("docs__lookup: tier 2, enabled"),
        "{set}"
    );
    let err = fail(&[
        "sources", "set", "--org", "fabrikam", "docs", "wipe", "--tier", "4",
    ]);
    assert!(err.contains("1, 2 or 3"), "{err}");
    let err = fail(&[
        "sources", "set", "--org", "fabrikam", "docs", "nothing", "--enable",
    ]);
    assert!(err.contains("docs__nothing"), "{err}");

    let off = run(&["sources", "disable-all", "--org", "fabrikam", "docs"]);
    assert!(off.contains("docs: 2 tools disabled"), "{off}");
    let tools = run(&["sources", "tools", "--org", "fabrikam", "docs"]);
    assert!(!tools.contains(" enabled"), "{tools}");
    // The tier chosen sticks through "disable all".
    assert!(
        line(&tools, "search").contains("tier 2 (proposed 1)"),
        "{tools}"
    );

    // Editing: name and state; the credential rule.
    let edited = run(&[
        "sources",
        "edit",
        "--org",
        "fabrikam",
        "docs",
        "--name",
        "Team docs",
        "--disable",
    ]);
    assert!(
        edited.contains("changed docs  Team docs") && edited.contains("[disabled"),
        "{edited}"
    );
    let err = fail(&[
        "sources",
        "edit",
        "--org",
        "fabrikam",
        "docs",
        "--auth-method",
        "bearer",
    ]);
    assert!(err.contains("needs the new credential"), "{err}");
    let err = fail(&[
        "sources",
        "edit",
        "--org",
        "fabrikam",
        "docs",
        "--auth-method",
        "basic",
        "--credential",
        r#"{"method":"bearer","token":"t0ken"}"#,
    ]);
    assert!(
        err.contains("the credential given is bearer, not basic"),
        "{err}"
    );
    let edited = run(&[
        "sources",
        "edit",
        "--org",
        "fabrikam",
        "docs",
        "--enable",
        "--auth-method",
        "bearer",
        "--credential",
        r#"{"method":"bearer","token":"t0ken"}"#,
    ]);
    assert!(edited.contains("[active"), "{edited}");
    assert!(
        !edited.contains("t0ken"),
        "a credential is never printed: {edited}"
    );
    let listed = run(&["sources", "list", "--org", "fabrikam"]);
    assert!(listed.contains("docs  Team docs"), "{listed}");

    // Another organization sees, changes and deletes nothing of it.
    for args in [
        &["sources", "tools", "--org", "contoso", "docs"][..],
        &["sources", "enable-reads", "--org", "contoso", "docs"],
        &["sources", "disable-all", "--org", "contoso", "docs"],
        &[
            "sources", "edit", "--org", "contoso", "docs", "--name", "Mine",
        ],
        &["sources", "delete", "--org", "contoso", "docs"],
    ] {
        let err = fail(args);
        assert!(err.contains("no tool source \"docs\""), "{args:?}: {err}");
    }
    assert_eq!(run(&["sources", "list", "--org", "contoso"]), "");

    let gone = run(&["sources", "delete", "--org", "fabrikam", "docs"]);
    assert!(gone.contains("deleted docs"), "{gone}");
    assert_eq!(run(&["sources", "list", "--org", "fabrikam"]), "");
    let err = fail(&["sources", "tools", "--org", "fabrikam", "docs"]);
    assert!(err.contains("no tool source"), "{err}");
}

#[test]
fn sources_commands_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    scenario(dir.path(), &[]);
}

/// Runs `sql` on the machine's PostgreSQL as `postgres`; whether it succeeded.
fn psql(sql: &str) -> bool {
    Command::new("psql")
        .args([
            "-q",
            "-h",
            "127.0.0.1",
            "-U",
            "postgres",
            "-d",
            "postgres",
            "-c",
            sql,
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("psql (PostgreSQL's client) on PATH")
        .success()
}

/// A database of this test's own (owned by a role that cannot bypass row security, as a
/// deployment connects), dropped at the end.
struct Database(String);

impl Drop for Database {
    fn drop(&mut self) {
        psql(&format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.0));
    }
}

#[test]
fn sources_commands_on_postgres() {
    const ROLE: &str = "breeze_ci";
    let db = Database(format!("breeze_cli_sources_{}", std::process::id()));
    psql(&format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", db.0));
    psql(&format!(
        "DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{ROLE}') THEN \
         CREATE ROLE {ROLE} LOGIN NOSUPERUSER NOBYPASSRLS; END IF; \
         EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$"
    ));
    assert!(psql(&format!("CREATE DATABASE {} OWNER {ROLE}", db.0)));
    let dir = tempfile::tempdir().unwrap();
    let url = format!("postgres://{ROLE}@127.0.0.1:5432/{}", db.0);
    scenario(dir.path(), &[("DATABASE_URL", url)]);
}
