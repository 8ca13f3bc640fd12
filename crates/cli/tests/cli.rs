//! The `breeze` binary end to end: the demo on a fresh directory, settings validation,
//! and the administration commands.
#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use std::{
    io::{Read, Write},
    net::{TcpListener, TcpStream},
    path::Path,
    process::{Command, Output, Stdio},
    time::{Duration, Instant},
};

use serde_json::Value;

mod common;
use common::{
    Server, breeze, eventually, export_lines, free_port, http_get, local_device, mcp_tool,
};

fn read_demo(dir: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(dir.join("breeze-data/demo.json")).unwrap()).unwrap()
}

#[test]
fn demo_seeds_serves_and_reuses_its_keys() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let server = Server::start(dir.path(), port, "demo");

    let demo = read_demo(dir.path());
    assert_eq!(demo["base_url"], format!("http://127.0.0.1:{port}"));
    assert_eq!(
        demo["mcp_sse_url"],
        format!("http://127.0.0.1:{port}/api/v1/mcp/sse")
    );
    assert_eq!(demo["mcp_url"], format!("http://127.0.0.1:{port}/mcp"));
    assert_eq!(demo["organization"]["slug"], "acme");
    assert!(demo["admin"]["email"].as_str().unwrap().contains('@'));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.path().join("breeze-data/demo.json"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "demo.json holds secrets");
    }
    for which in ["read", "write", "execute"] {
        let key = demo["api_keys"][which].as_str().unwrap();
        let (status, body) = http_get(port, "/api/v1/orgs", Some(key)).unwrap();
        assert_eq!(status, 200, "{which} key: {body}");
        assert_eq!(body["organizations"].as_array().unwrap().len(), 1);
        assert_eq!(body["organizations"][0]["id"], demo["organization"]["id"]);
        // The second organization exists, and is invisible to the first one's keys.
        assert_eq!(
            http_get(port, "/api/v1/orgs/globex/sites", Some(key))
                .unwrap()
                .0,
            404
        );
    }
    let (status, sites) = http_get(
        port,
        "/api/v1/orgs/acme/sites",
        demo["api_keys"]["read"].as_str(),
    )
    .unwrap();
    assert_eq!(status, 200);
    assert_eq!(sites["sites"].as_array().unwrap().len(), 2);
    assert_eq!(http_get(port, "/readyz", None).unwrap().0, 200);

    // The demo enrolled this machine: its agent is online, with live metrics, and the seeded
    // scripts are in the library.
    let read = demo["api_keys"]["read"].as_str().unwrap();
    let device = local_device(port, read);
    eventually(30, "the first metrics sample", || {
        let r = mcp_tool(
            port,
            read,
            "analyze_metrics",
            serde_json::json!({ "deviceId": device }),
        );
        r["structuredContent"]["dataPoints"].as_i64().unwrap_or(0) >= 1
    });
    let write = demo["api_keys"]["write"].as_str().unwrap();
    // execute_command is Tier 3 (it waits for a person's approval): list a directory instead.
    let r = mcp_tool(
        port,
        write,
        "file_operations",
        serde_json::json!({ "deviceId": device, "action": "list", "path": "/" }),
    );
    assert_eq!(r["structuredContent"]["status"], "completed", "{r}");
    assert!(
        !r["structuredContent"]["result"]["entries"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    // A read key cannot read the demo's secrets through the agent on the same machine: its
    // keys and admin password, its database, the agent's own token.
    let data = std::fs::canonicalize(dir.path().join("breeze-data")).unwrap();
    for secret in ["demo.json", "breeze.db", "agent/agent.json"] {
        let path = data.join(secret).display().to_string();
        let r = mcp_tool(
            port,
            read,
            "file_operations",
            serde_json::json!({ "deviceId": device, "action": "read", "path": path }),
        );
        assert_eq!(r["isError"], true, "{secret} was read: {r}");
        assert!(r.to_string().contains("is protected"), "{r}");
        assert!(!r.to_string().contains("brz_"), "{r}");
    }
    let (_, scripts) = http_get(port, "/api/v1/orgs/acme/scripts", Some(read)).unwrap();
    assert!(
        scripts.to_string().contains("Disk usage report"),
        "{scripts}"
    );
    server.stop();

    // A second run reuses the data and the keys file.
    let port2 = free_port();
    let server = Server::start(dir.path(), port2, "demo");
    let again = read_demo(dir.path());
    assert_eq!(again["api_keys"], demo["api_keys"]);
    assert_eq!(again["admin"], demo["admin"]);
    assert_eq!(again["organization"], demo["organization"]);
    assert_eq!(again["base_url"], format!("http://127.0.0.1:{port2}"));
    // The same agent is reused, not enrolled again.
    let read = again["api_keys"]["read"].as_str().unwrap();
    eventually(30, "the local agent to reconnect", || {
        let r = mcp_tool(port2, read, "query_devices", serde_json::json!({}));
        r["structuredContent"]["total"] == 1
            && r["structuredContent"]["devices"][0]["lastSeenAt"].is_string()
    });
    assert_eq!(
        http_get(port2, "/api/v1/orgs", again["api_keys"]["execute"].as_str())
            .unwrap()
            .0,
        200
    );
    server.stop();
}

#[test]
fn demo_replaces_keys_that_no_longer_work() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    Server::start(dir.path(), port, "demo").stop();
    let first = read_demo(dir.path());
    // Revoke the read key from the CLI, as an admin would.
    let list = run_ok(breeze(dir.path()).args(["keys", "list", "--org", "acme"]));
    let read_prefix = &first["api_keys"]["read"].as_str().unwrap()[..8];
    let id = list
        .lines()
        .find(|l| l.contains(read_prefix))
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned();
    run_ok(breeze(dir.path()).args(["keys", "revoke", "--org", "acme", &id]));

    let port = free_port();
    let server = Server::start(dir.path(), port, "demo");
    let second = read_demo(dir.path());
    assert_ne!(second["api_keys"]["read"], first["api_keys"]["read"]);
    assert_eq!(
        http_get(port, "/api/v1/orgs", second["api_keys"]["read"].as_str())
            .unwrap()
            .0,
        200
    );
    assert_eq!(
        http_get(port, "/api/v1/orgs", first["api_keys"]["read"].as_str())
            .unwrap()
            .0,
        401
    );
    server.stop();
}

fn run_ok(cmd: &mut Command) -> String {
    let out: Output = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{:?} failed: {}",
        cmd,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn run_err(cmd: &mut Command) -> (i32, String) {
    let out = cmd.output().unwrap();
    assert!(!out.status.success(), "{cmd:?} should fail");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn bad_settings_refuse_to_start_and_name_the_setting() {
    let dir = tempfile::tempdir().unwrap();
    let (code, err) = run_err(
        breeze(dir.path())
            .arg("serve")
            .env("BREEZE_LISTN", "127.0.0.1:1"),
    );
    assert_eq!(code, 2);
    assert!(
        err.contains("unknown setting BREEZE_LISTN (did you mean BREEZE_LISTEN?)"),
        "{err}"
    );
    let (code, err) = run_err(breeze(dir.path()).arg("serve").env("BREEZE_ENV", "staging"));
    assert_eq!(code, 2);
    assert!(err.contains("invalid BREEZE_ENV"), "{err}");
    let (_, err) =
        run_err(breeze(dir.path()).args(["migrate", "--database-url", "mysql://root@localhost/x"]));
    assert!(err.contains("invalid --database-url"), "{err}");
    assert!(
        !dir.path().join("breeze-data").exists(),
        "nothing was created"
    );
}

#[test]
fn serve_refuses_a_database_that_is_not_there_unless_asked_to_create_it() {
    let dir = tempfile::tempdir().unwrap();
    let (_, err) = run_err(breeze(dir.path()).args(["serve", "--listen", "127.0.0.1:0"]));
    assert!(
        err.contains("no database at") && err.contains("breeze-data/breeze.db"),
        "names the path it looked for: {err}"
    );
    assert!(
        err.contains("breeze init") && err.contains("--create"),
        "says how to create one on purpose: {err}"
    );
    assert!(
        !dir.path().join("breeze-data").exists(),
        "nothing was created: {err}"
    );
    // `breeze init` creates it on purpose; then `serve` gets past the check.
    let out = breeze(dir.path()).arg("init").output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(dir.path().join("breeze-data").join("breeze.db").exists());
}

#[test]
fn the_agent_subcommand_is_named_as_it_was_started() {
    let dir = tempfile::tempdir().unwrap();
    let out = breeze(dir.path())
        .args(["agent", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("Usage: breeze agent"), "{help}");
    assert!(!help.contains("breeze-agent"), "{help}");
}

#[test]
fn an_admin_command_refuses_a_database_that_is_not_there() {
    let dir = tempfile::tempdir().unwrap();
    let (_, err) = run_err(breeze(dir.path()).args(["orgs", "list", "--partner", "demo-msp"]));
    let expected = dir.path().join("breeze-data").join("breeze.db");
    assert!(
        err.contains("no database at") && err.contains("breeze-data/breeze.db"),
        "names the path it looked for: {err}"
    );
    assert!(!expected.exists(), "nothing was created: {err}");
    assert!(
        !dir.path().join("breeze-data").exists(),
        "not even the directory"
    );
}

#[test]
fn the_stdio_bridge_settings_do_not_stop_other_commands() {
    let dir = tempfile::tempdir().unwrap();
    let out = run_ok(
        breeze(dir.path())
            .arg("migrate")
            .env("BREEZE_URL", "http://127.0.0.1:1")
            .env("BREEZE_API_KEY", "brz_x"),
    );
    assert!(out.contains("migrations applied"), "{out}");
}

/// SIGTERM drains: an open MCP stream ends with an SSE `retry:` hint (so its client
/// reconnects, elsewhere behind a load balancer) and the process exits 0 promptly, not at the
/// 30 s drain deadline the open stream would otherwise hold it to.
#[test]
fn sigterm_ends_streams_with_a_reconnect_hint() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let server = Server::start_with(dir.path(), port, "demo", &[("BREEZE_DEMO_AGENT", "false")]);
    let key = read_demo(dir.path())["api_keys"]["read"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        stream,
        "GET /api/v1/mcp/sse HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nX-API-Key: {key}\r\n\
         Accept: text/event-stream\r\n\r\n"
    )
    .unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&seen).contains("event: endpoint") {
        let n = stream.read(&mut buf).unwrap();
        assert!(
            n > 0,
            "stream closed early: {}",
            String::from_utf8_lossy(&seen)
        );
        seen.extend_from_slice(&buf[..n]);
    }
    let started = Instant::now();
    let reader = std::thread::spawn(move || {
        let mut rest = Vec::new();
        let _ = stream.read_to_end(&mut rest);
        String::from_utf8_lossy(&rest).into_owned()
    });
    server.stop();
    let stopped = started.elapsed();
    let rest = reader.join().unwrap();
    assert!(rest.contains("retry: 500"), "no reconnect hint in {rest:?}");
    assert!(
        stopped < Duration::from_secs(10),
        "the open stream held the shutdown for {stopped:?}"
    );
}

/// The JSON lines of a gzip audit export.
/// `breeze audit export` writes gzip JSON lines, to a file (0600) or standard output, narrowed
/// by organization and time; `breeze audit purge` stores the retention and purges; `breeze
/// audit move-journal` moves a journal's records in.
#[test]
fn audit_export_and_purge() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    run_ok(breeze(d).arg("migrate"));
    run_ok(breeze(d).args(["partners", "create", "--name", "Northwind IT"]));
    for name in ["Contoso Ltd", "Fabrikam"] {
        run_ok(breeze(d).args([
            "orgs",
            "create",
            "--partner",
            "northwind-it",
            "--name",
            name,
        ]));
    }
    let out = d.join("all.jsonl.gz");
    run_ok(breeze(d).args(["audit", "export", "--out", out.to_str().unwrap()]));
    let all = export_lines(&std::fs::read(&out).unwrap());
    assert_eq!(all.len(), 3, "partner and two organizations: {all:#?}");
    assert!(
        all.iter()
            .all(|r| r["id"].is_string() && r["created_at"].is_string())
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&out).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    // One organization, to standard output.
    let stdout = breeze(d)
        .args(["audit", "export", "--org", "fabrikam"])
        .output()
        .unwrap();
    assert!(stdout.status.success());
    let fabrikam = export_lines(&stdout.stdout);
    assert_eq!(fabrikam.len(), 1);
    assert_eq!(fabrikam[0]["action"], "organization.create");
    assert!(String::from_utf8_lossy(&stdout.stderr).contains("exported 1 audit records"));

    // Time bounds: nothing before 2000, everything since.
    let none = breeze(d)
        .args(["audit", "export", "--until", "2000-01-01", "--out", "-"])
        .output()
        .unwrap();
    assert!(export_lines(&none.stdout).is_empty());
    let since = breeze(d)
        .args(["audit", "export", "--since", "2000-01-01T00:00:00Z"])
        .output()
        .unwrap();
    assert_eq!(export_lines(&since.stdout).len(), 3);
    let (_, err) = run_err(breeze(d).args(["audit", "export", "--since", "yesterday"]));
    assert!(err.contains("--since"), "{err}");

    let kept = run_ok(
        breeze(d)
            .args(["audit", "purge"])
            .env("BREEZE_AUDIT_RETENTION_DAYS", "0"),
    );
    assert!(kept.contains("kept forever"), "{kept}");
    // The first purge settled the cluster's retention (forever); another setting does not move
    // it, and says so. Only `breeze audit retention` does.
    let other = breeze(d)
        .args(["audit", "purge"])
        .env("BREEZE_AUDIT_RETENTION_DAYS", "5")
        .output()
        .unwrap();
    assert!(other.status.success());
    let warning = String::from_utf8_lossy(&other.stderr);
    assert!(
        warning.contains("says 5 days") && warning.contains("keeps audit records forever"),
        "{warning}"
    );
    assert!(String::from_utf8_lossy(&other.stdout).contains("kept forever"));
    let shown = run_ok(breeze(d).args(["audit", "retention"]));
    assert!(shown.contains("audit retention: forever"), "{shown}");
    let set = run_ok(breeze(d).args(["audit", "retention", "--days", "90"]));
    assert!(set.contains("audit retention: 90 days"), "{set}");
    let (_, err) = run_err(breeze(d).args(["audit", "retention", "--days", "0"]));
    assert!(err.contains("--days"), "{err}");
    let purged = run_ok(breeze(d).args(["audit", "purge"]));
    assert!(
        purged.contains("0 archived"),
        "nothing is 90 days old: {purged}"
    );
    let (_, err) = run_err(
        breeze(d)
            .args(["audit", "purge"])
            .env("BREEZE_AUDIT_RETENTION_DAYS", "-1"),
    );
    assert!(err.contains("BREEZE_AUDIT_RETENTION_DAYS"), "{err}");

    // `breeze audit move-journal`: a journal segment a retired process left (here a SQLite
    // file's, beside it) goes into the database at once.
    let segment = d.join("breeze-data/breeze.db-audit-0000000000000005.jsonl");
    let line = serde_json::json!({
        "id": "019ae8a0-0000-7000-8000-000000000001",
        "at": "2026-12-04T12:00:00+00:00",
        "org": null,
        "actor_type": "system",
        "actor_id": "test",
        "action": "thing.happen",
        "resource_type": "thing",
        "resource_id": "left-by-a-retired-instance",
        "details": {},
        "result": "success",
        "error": null,
        "request_id": null,
    });
    std::fs::write(&segment, format!("{line}\n")).unwrap();
    let moved = run_ok(breeze(d).args(["audit", "move-journal"]));
    assert!(moved.contains("is in the database"), "{moved}");
    assert!(!segment.exists(), "the segment was not moved");
    let exported = breeze(d).args(["audit", "export"]).output().unwrap();
    assert!(
        export_lines(&exported.stdout)
            .iter()
            .any(|r| r["resource_id"] == "left-by-a-retired-instance"),
        "the moved record is not in the log"
    );
}

#[test]
fn administration_commands() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    assert!(run_ok(breeze(d).arg("migrate")).contains("migrations applied"));
    run_ok(breeze(d).args(["partners", "create", "--name", "Northwind IT"]));
    run_ok(breeze(d).args([
        "orgs",
        "create",
        "--partner",
        "northwind-it",
        "--name",
        "Contoso Ltd",
    ]));
    run_ok(breeze(d).args([
        "orgs",
        "create",
        "--partner",
        "northwind-it",
        "--name",
        "Fabrikam",
    ]));
    let orgs = run_ok(breeze(d).args(["orgs", "list", "--partner", "northwind-it"]));
    assert!(
        orgs.contains("contoso-ltd") && orgs.contains("fabrikam"),
        "{orgs}"
    );

    // A user with a chosen password, read from stdin.
    let mut child = breeze(d)
        .args([
            "users",
            "create",
            "--email",
            "Tech@Northwind.test",
            "--name",
            "Tech",
            "--org",
            "contoso-ltd",
            "--role",
            "Technician",
            "--password-stdin",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"a long enough password\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("with role Technician in contoso-ltd"));

    // A partner admin: the role in every organization of the partner.
    let out = run_ok(breeze(d).args([
        "users",
        "create",
        "--email",
        "boss@northwind.test",
        "--name",
        "Boss",
        "--partner",
        "northwind-it",
    ]));
    assert!(
        out.contains("with role Administrator in every organization of northwind-it"),
        "{out}"
    );
    let (_, err) =
        run_err(breeze(d).args(["users", "create", "--email", "y@n.test", "--name", "Y"]));
    assert!(err.contains("--partner") || err.contains("--org"), "{err}");

    let (_, err) = run_err(breeze(d).args([
        "users", "create", "--email", "x@n.test", "--name", "X", "--org", "nowhere",
    ]));
    assert!(
        err.contains("--org nowhere") && err.contains("organization not found"),
        "{err}"
    );

    let created = run_ok(breeze(d).args([
        "keys",
        "create",
        "--org",
        "contoso-ltd",
        "--user",
        "tech@northwind.test",
        "--name",
        "Claude",
        "--scopes",
        "ai:read,ai:write",
        "--expires-in-days",
        "30",
        "--json",
    ]));
    let key: Value = serde_json::from_str(&created).unwrap();
    let secret = key["key"].as_str().unwrap();
    assert!(secret.starts_with("brz_"));
    assert_eq!(key["scopes"], serde_json::json!(["ai:read", "ai:write"]));
    assert!(key["expires_at"].is_string());

    let (_, err) = run_err(breeze(d).args([
        "keys",
        "create",
        "--org",
        "contoso-ltd",
        "--user",
        "tech@northwind.test",
        "--name",
        "X",
        "--scopes",
        "ai:admin",
    ]));
    assert!(
        err.contains("--scopes") && err.contains("ai:admin"),
        "{err}"
    );
    let (_, err) = run_err(breeze(d).args([
        "keys",
        "create",
        "--org",
        "fabrikam",
        "--user",
        "tech@northwind.test",
        "--name",
        "X",
        "--scopes",
        "ai:read",
    ]));
    assert!(err.contains("holds no role in that organization"), "{err}");

    let list = run_ok(breeze(d).args(["keys", "list", "--org", "contoso-ltd"]));
    assert!(
        list.contains("active") && list.contains(&secret[..8]) && !list.contains(&secret[8..]),
        "{list}"
    );
    let id = key["id"].as_str().unwrap();
    assert!(
        run_ok(breeze(d).args(["keys", "revoke", "--org", "contoso-ltd", id])).contains("revoked")
    );
    assert!(run_ok(breeze(d).args(["keys", "list", "--org", "contoso-ltd"])).contains("revoked"));
    let (_, err) = run_err(breeze(d).args(["keys", "revoke", "--org", "fabrikam", id]));
    assert!(err.contains("API key not found"), "{err}");

    // Notification channels: a webhook's generated secret is printed once and never listed;
    // another organization's channel is not found.
    let added = run_ok(breeze(d).args([
        "channels",
        "add",
        "--org",
        "contoso-ltd",
        "--name",
        "ops hook",
        "--kind",
        "webhook",
        "--url",
        "https://hooks.example.com/breeze?token=t0ps3cret",
    ]));
    let secret = added
        .split("signing secret (shown once, keep it with the receiver): ")
        .nth(1)
        .unwrap()
        .trim()
        .to_owned();
    assert_eq!(secret.len(), 32, "{added}");
    run_ok(breeze(d).args([
        "channels",
        "add",
        "--org",
        "contoso-ltd",
        "--name",
        "ops mail",
        "--kind",
        "email",
        "--to",
        "ops@contoso.test",
    ]));
    let (_, err) = run_err(breeze(d).args([
        "channels",
        "add",
        "--org",
        "contoso-ltd",
        "--name",
        "bad",
        "--kind",
        "pager",
    ]));
    assert!(err.contains("--kind"), "{err}");
    let list = run_ok(breeze(d).args(["channels", "list", "--org", "contoso-ltd"]));
    assert!(
        list.contains("ops hook") && list.contains("ops@contoso.test"),
        "{list}"
    );
    assert!(
        !list.contains(&secret) && !list.contains("t0ps3cret"),
        "no secret is listed: {list}"
    );
    assert!(run_ok(breeze(d).args(["channels", "list", "--org", "fabrikam"])).is_empty());
    let (_, err) = run_err(breeze(d).args(["channels", "remove", "--org", "fabrikam", "ops hook"]));
    assert!(err.contains("no channel"), "{err}");
    assert!(
        run_ok(breeze(d).args(["channels", "remove", "--org", "contoso-ltd", "ops hook"]))
            .contains("removed channel ops hook")
    );

    // Configuration policies: a bad setting is refused naming it; a policy is created,
    // assigned, listed with its assignment, deactivated and deleted; another organization
    // neither sees nor deletes it; a partner-wide policy shows in every organization.
    let cp = |args: &[&str]| {
        let mut all = vec!["config-policies"];
        all.extend_from_slice(args);
        breeze(d).args(all).output().unwrap()
    };
    let (_, err) = run_err(breeze(d).args([
        "config-policies",
        "create",
        "--org",
        "contoso-ltd",
        "--name",
        "bad",
        "--feature",
        r#"monitoring={"metricIntervalSeconds":1}"#,
    ]));
    assert!(err.contains("monitoring.metricIntervalSeconds"), "{err}");
    let created = run_ok(breeze(d).args([
        "config-policies",
        "create",
        "--org",
        "contoso-ltd",
        "--name",
        "Fast",
        "--feature",
        r#"monitoring={"metricIntervalSeconds":15}"#,
        "--feature",
        r#"agent_log={"level":"info"}"#,
    ]));
    let id = created.split_whitespace().nth(1).unwrap().to_owned();
    let assigned = run_ok(breeze(d).args([
        "config-policies",
        "assign",
        "--org",
        "contoso-ltd",
        &id,
        "--priority",
        "5",
    ]));
    assert!(
        assigned.contains("organization") && assigned.contains("priority 5"),
        "{assigned}"
    );
    let list = run_ok(breeze(d).args(["config-policies", "list", "--org", "contoso-ltd"]));
    assert!(
        list.contains("Fast") && list.contains("priority 5"),
        "{list}"
    );
    assert!(
        !run_ok(breeze(d).args(["config-policies", "list", "--org", "fabrikam"])).contains("Fast")
    );
    assert!(!cp(&["delete", "--org", "fabrikam", &id]).status.success());
    let updated = run_ok(breeze(d).args([
        "config-policies",
        "update",
        "--org",
        "contoso-ltd",
        &id,
        "--status",
        "inactive",
    ]));
    assert!(updated.contains("inactive"), "{updated}");
    assert!(
        run_ok(breeze(d).args(["config-policies", "delete", "--org", "contoso-ltd", &id]))
            .contains("deleted Fast")
    );
    let partner = run_ok(breeze(d).args([
        "config-policies",
        "create",
        "--partner",
        "northwind-it",
        "--name",
        "Baseline",
        "--feature",
        r#"monitoring={"inventoryIntervalSeconds":3600}"#,
    ]));
    let pid = partner.split_whitespace().nth(1).unwrap().to_owned();
    run_ok(breeze(d).args([
        "config-policies",
        "assign",
        "--partner",
        "northwind-it",
        &pid,
    ]));
    assert!(
        run_ok(breeze(d).args(["config-policies", "list", "--org", "fabrikam"]))
            .contains("Baseline")
    );
}

#[test]
fn a_busy_port_fails_before_anything_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let (_, err) =
        run_err(breeze(dir.path()).args(["demo", "--listen", &format!("127.0.0.1:{port}")]));
    assert!(
        err.contains(&format!("cannot listen on 127.0.0.1:{port}")),
        "{err}"
    );
    assert!(!dir.path().join("breeze-data/demo.json").exists());
}

#[test]
fn mcp_stdio_bridges_to_a_running_server() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let server = Server::start(dir.path(), port, "demo");
    let demo = read_demo(dir.path());
    let key = demo["api_keys"]["read"].as_str().unwrap();
    let mut child = breeze(dir.path())
        .args(["mcp", "stdio"])
        .env("BREEZE_URL", format!("http://127.0.0.1:{port}"))
        .env("AUTH_TOKEN", key)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = [
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"query_devices","arguments":{}}}"#,
        r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"set_device_context","arguments":{}}}"#,
    ];
    child
        .stdin
        .take()
        .unwrap()
        .write_all((lines.join("\n") + "\n").as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut replies: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // Calls after initialize run concurrently: their answers come in whatever order they end.
    replies.sort_by_key(|r| r["id"].as_u64());
    assert_eq!(
        replies.len(),
        3,
        "one line per request, none for the notification: {replies:?}"
    );
    assert_eq!(replies[0]["result"]["serverInfo"]["name"], "breeze-rmm");
    // The demo's local agent may or may not have enrolled yet.
    assert!(replies[1]["result"]["structuredContent"]["total"].is_u64());
    assert_eq!(
        replies[2]["error"]["message"],
        "Tool \"set_device_context\" requires ai:write scope"
    );
    // Each run ends its session: more runs than the per-key session cap (5) all succeed.
    for run in 0..7 {
        let mut child = breeze(dir.path())
            .args(["mcp", "stdio"])
            .env("BREEZE_URL", format!("http://127.0.0.1:{port}"))
            .env("BREEZE_API_KEY", key)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let init = format!("{}\n", lines[0]);
        child
            .stdin
            .take()
            .unwrap()
            .write_all(init.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        let reply: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert!(
            reply["result"]["serverInfo"].is_object(),
            "run {run}: {reply}"
        );
    }
    server.stop();

    // Missing settings are named.
    let (code, err) = run_err(breeze(dir.path()).args(["mcp", "stdio"]));
    assert_eq!(code, 2);
    assert!(err.contains("BREEZE_URL is required"), "{err}");
    assert!(
        run_ok(breeze(dir.path()).args(["mcp", "stdio", "--version"]))
            .contains(env!("CARGO_PKG_VERSION"))
    );
}

/// A migrated database in `d` with partner Northwind IT and its organization `org`.
fn migrated_with_org(d: &Path, org: &str) {
    run_ok(breeze(d).arg("migrate"));
    run_ok(breeze(d).args(["partners", "create", "--name", "Northwind IT"]));
    run_ok(breeze(d).args(["orgs", "create", "--partner", "northwind-it", "--name", org]));
}

/// `breeze approvals policy --mode automatic` is accepted only for a read-only Tier 3 action;
/// anything else is refused naming the class and why, and nothing is stored.
#[test]
fn automatic_approval_policy_only_for_read_only_actions() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    migrated_with_org(d, "Fabrikam");
    let policy = |class: &str, mode: &str| {
        let mut cmd = breeze(d);
        cmd.args([
            "approvals",
            "policy",
            "--org",
            "fabrikam",
            "--class",
            class,
            "--mode",
            mode,
        ]);
        cmd
    };
    for (class, why) in [
        ("*", "default"),
        ("execute_command", "whole tool"),
        ("execute_command.kill_process", "not read-only"),
        ("execute_command.run_script", "no action"),
        ("run_script", "whole tool"),
        ("file_operations.write", "not read-only"),
    ] {
        let (_, err) = run_err(&mut policy(class, "automatic"));
        assert!(
            err.contains(&format!("cannot set approval mode automatic for {class}"))
                && err.contains(why),
            "{class}: {err}"
        );
    }
    let (_, err) = run_err(&mut policy("*", "nobody"));
    assert!(err.contains("nobody"), "{err}");
    let out = run_ok(&mut policy("execute_command.list_processes", "automatic"));
    assert!(
        out.contains("execute_command.list_processes → automatic"),
        "{out}"
    );
    let out = run_ok(&mut policy("execute_command.list_processes", "supervised"));
    assert!(out.contains("→ supervised"), "{out}");
}

/// A Tier 3 call waits for approval; the server is killed with SIGKILL; the request is
/// approved from the CLI while the server is down; the restarted server runs it — once.
#[test]
fn an_approval_granted_while_the_server_is_down_runs_once_after_restart() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let no_agent = [("BREEZE_DEMO_AGENT", "false")];
    let mut server = Server::start_with(dir.path(), port, "demo", &no_agent);
    let demo = read_demo(dir.path());
    let execute = demo["api_keys"]["execute"].as_str().unwrap().to_owned();
    let read = demo["api_keys"]["read"].as_str().unwrap().to_owned();
    let waiting = std::thread::spawn(move || {
        // The connection dies with the server; whatever it returns is irrelevant.
        let _ = std::panic::catch_unwind(|| {
            mcp_tool(
                port,
                &execute,
                "manage_groups",
                serde_json::json!({ "action": "create", "name": "Restarted" }),
            )
        });
    });
    let mut id = String::new();
    eventually(20, "the approval request", || {
        let out = run_ok(breeze(dir.path()).args(["approvals", "list", "--org", "acme"]));
        id = out.split_whitespace().next().unwrap_or_default().to_owned();
        !id.is_empty()
    });
    server.0.kill().unwrap(); // SIGKILL: no graceful anything
    server.0.wait().unwrap();
    let _ = waiting.join();

    let out = run_ok(breeze(dir.path()).args([
        "approvals",
        "approve",
        &id,
        "--user",
        "admin@breeze.local",
    ]));
    assert!(out.contains("approved"), "{out}");
    let (_, err) = run_err(breeze(dir.path()).args([
        "approvals",
        "approve",
        &id,
        "--user",
        "admin@breeze.local",
    ]));
    assert!(
        err.contains("already approved"),
        "an approval is used once: {err}"
    );

    let count = |port: u16| {
        let r = mcp_tool(
            port,
            &read,
            "manage_groups",
            serde_json::json!({ "action": "list" }),
        );
        r["structuredContent"]["groups"]
            .as_array()
            .map_or(0, |g| g.iter().filter(|g| g["name"] == "Restarted").count())
    };
    let port2 = free_port();
    let server = Server::start_with(dir.path(), port2, "demo", &no_agent);
    eventually(30, "the approved call to run after the restart", || {
        run_ok(breeze(dir.path()).args(["approvals", "show", "--org", "acme", &id]))
            .contains("\"status\": \"completed\"")
    });
    assert_eq!(count(port2), 1);
    server.stop();
    // Another restart runs nothing again.
    let port3 = free_port();
    let server = Server::start_with(dir.path(), port3, "demo", &no_agent);
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(count(port3), 1, "executed exactly once");
    server.stop();
}

/// `breeze devices seed` bulk-creates synthetic devices and refuses silly counts.
#[test]
fn devices_seed_creates_synthetic_devices() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let no_agent = [("BREEZE_DEMO_AGENT", "false")];
    Server::start_with(dir.path(), port, "demo", &no_agent).stop();
    let out =
        run_ok(breeze(dir.path()).args(["devices", "seed", "--org", "acme", "--count", "250"]));
    assert!(
        out.contains("created 250 simulated devices in acme"),
        "{out}"
    );
    let (_, err) =
        run_err(breeze(dir.path()).args(["devices", "seed", "--org", "acme", "--count", "0"]));
    assert!(
        err.contains("--count must be between 1 and 100000"),
        "{err}"
    );
    let server = Server::start_with(dir.path(), port, "demo", &no_agent);
    let read = read_demo(dir.path())["api_keys"]["read"]
        .as_str()
        .unwrap()
        .to_owned();
    let r = mcp_tool(
        port,
        &read,
        "query_devices",
        serde_json::json!({ "status": "offline", "limit": 10 }),
    );
    assert_eq!(
        r["structuredContent"]["total"], 50,
        "a fifth are offline: {r}"
    );
    assert_eq!(r["structuredContent"]["showing"], 10);
    server.stop();

    // With inventories, Linux devices also carry a patch scan the patch tools read.
    run_ok(breeze(dir.path()).args([
        "devices",
        "seed",
        "--org",
        "acme",
        "--count",
        "40",
        "--with-inventory",
    ]));
    let server = Server::start_with(dir.path(), port, "demo", &no_agent);
    let r = mcp_tool(
        port,
        &read,
        "manage_patches",
        serde_json::json!({ "action": "compliance", "limit": 1 }),
    );
    let summary = &r["structuredContent"]["summary"];
    assert!(summary["scanned"].as_u64().unwrap() > 0, "{r}");
    assert!(summary["pendingSecurity"].as_u64().unwrap() > 0, "{r}");
    assert!(summary["rebootRequired"].as_u64().unwrap() > 0, "{r}");
    server.stop();
}

/// `breeze install-skill` as a user runs it: HOME from the environment, auto-detection, the
/// refusal without `--force`, `--force`, and `--dir`; every installed file is the checked-in
/// generated skill (the binary installs what `cargo xtask docs` wrote).
#[test]
fn install_skill_finds_the_agents_under_home() {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    std::fs::create_dir(home.path().join(".openclaw")).unwrap();
    let out = run_ok(
        breeze(work.path())
            .arg("install-skill")
            .env("HOME", home.path()),
    );
    let skill = home.path().join(".openclaw/workspace/skills/breeze-rmm");
    assert!(out.contains(&skill.display().to_string()), "{out}");
    assert!(out.contains("openclaw gateway restart"), "{out}");
    assert!(!home.path().join(".claude").exists(), "{out}");
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/skill");
    for file in [
        "SKILL.md",
        "references/workflows.md",
        "references/tool-selection.md",
        "references/footguns.md",
        "references/error-recovery.md",
    ] {
        assert_eq!(
            std::fs::read_to_string(skill.join(file)).unwrap(),
            std::fs::read_to_string(repo.join(file)).unwrap(),
            "{file}"
        );
    }

    let (code, err) = run_err(
        breeze(work.path())
            .arg("install-skill")
            .env("HOME", home.path()),
    );
    assert_ne!(code, 0);
    assert!(
        err.contains(&skill.display().to_string()) && err.contains("--force"),
        "{err}"
    );
    run_ok(
        breeze(work.path())
            .args(["install-skill", "--force"])
            .env("HOME", home.path()),
    );

    // --dir needs no HOME at all.
    let out = run_ok(
        breeze(work.path())
            .args(["install-skill", "--dir"])
            .arg(work.path().join("skills")),
    );
    assert!(
        work.path().join("skills/breeze-rmm/SKILL.md").is_file(),
        "{out}"
    );
    let (code, err) = run_err(breeze(work.path()).arg("install-skill"));
    assert_ne!(code, 0);
    assert!(err.contains("HOME is not set"), "{err}");
}

/// Two grants of one user, made through the store as the token endpoint makes them.
fn seed_grants(dir: &Path, email: &str, org: &str) {
    use breeze_store::{NewOAuthCode, NewRefreshToken, Redeemed, Store, StoreOptions};
    let url = format!("sqlite://{}", dir.join("breeze-data/breeze.db").display());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let clock = std::sync::Arc::new(breeze_core::SystemClock);
        let store = Store::connect(&StoreOptions::new(url), clock.clone())
            .await
            .unwrap();
        let user = store
            .find_user_for_login(email)
            .await
            .unwrap()
            .unwrap()
            .user;
        let org = store.find_organization(org).await.unwrap();
        let now = breeze_core::Clock::now(&*clock);
        for (i, client) in ["bzcl_cli_a", "bzcl_cli_b"].into_iter().enumerate() {
            let hash = [u8::try_from(i).unwrap() + 1; 32];
            store
                .insert_oauth_code(NewOAuthCode {
                    code_hash: hash,
                    client_id: client.into(),
                    org_id: org.id,
                    user_id: user.id,
                    redirect_uri: "http://127.0.0.1/cb".into(),
                    code_challenge: "c".into(),
                    resource: "http://127.0.0.1:3000/mcp".into(),
                    scopes: vec!["mcp:read".into()],
                    expires_at: now + chrono::Duration::minutes(1),
                })
                .await
                .unwrap();
            let code = store.find_oauth_code(&hash).await.unwrap().unwrap();
            let refresh = NewRefreshToken {
                token_hash: [u8::try_from(i).unwrap() + 9; 32],
                expires_at: now + chrono::Duration::days(14),
            };
            let redeemed = store
                .redeem_oauth_code(&code, "Claude", refresh, None)
                .await
                .unwrap();
            assert!(matches!(redeemed, Redeemed::Issued(_)));
        }
        store.close().await;
    });
}

/// `users disable` revokes the user's OAuth grants and says how many; `users enable` restores
/// none of them, and says so.
#[test]
fn disabling_a_user_revokes_their_grants_and_enabling_restores_none() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    migrated_with_org(d, "Contoso Ltd");
    run_ok(breeze(d).args([
        "users",
        "create",
        "--email",
        "u@n.test",
        "--name",
        "U",
        "--org",
        "contoso-ltd",
    ]));
    seed_grants(d, "u@n.test", "contoso-ltd");

    let out = run_ok(breeze(d).args(["users", "disable", "u@n.test"]));
    assert!(
        out.contains("disabled u@n.test") && out.contains("2 OAuth grant(s) revoked"),
        "{out}"
    );
    let listed = run_ok(breeze(d).args(["grants", "list", "--user", "u@n.test"]));
    assert_eq!(listed.matches("Revoked").count(), 2, "{listed}");
    let out = run_ok(breeze(d).args(["users", "enable", "u@n.test"]));
    assert!(
        out.contains("no session or OAuth grant is restored"),
        "{out}"
    );
    let listed = run_ok(breeze(d).args(["grants", "list", "--user", "u@n.test"]));
    assert_eq!(
        listed.matches("Revoked").count(),
        2,
        "still revoked: {listed}"
    );
    let out = run_ok(breeze(d).args(["users", "disable", "u@n.test"]));
    assert!(out.contains("0 OAuth grant(s) revoked"), "{out}");
    let (_, err) = run_err(breeze(d).args(["users", "disable", "nobody@n.test"]));
    assert!(err.contains("no user with email"), "{err}");
}

#[test]
fn grants_are_listed_and_revoked_from_the_shell() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    migrated_with_org(d, "Contoso Ltd");
    run_ok(breeze(d).args([
        "users",
        "create",
        "--email",
        "g@n.test",
        "--name",
        "G",
        "--org",
        "contoso-ltd",
    ]));
    let listed = run_ok(breeze(d).args(["grants", "list", "--user", "g@n.test"]));
    assert!(listed.contains("no OAuth grants"), "{listed}");
    seed_grants(d, "g@n.test", "contoso-ltd");

    let listed = run_ok(breeze(d).args(["grants", "list", "--user", "g@n.test", "--json"]));
    let grants: Value = serde_json::from_str(&listed).unwrap();
    let grants = grants.as_array().unwrap();
    assert_eq!(grants.len(), 2, "{listed}");
    assert!(grants.iter().all(|g| g["state"] == "Connected"), "{listed}");
    let id = grants[0]["id"].as_str().unwrap();

    let out = run_ok(breeze(d).args(["grants", "revoke", "--user", "g@n.test", id]));
    assert!(out.contains("state Revoked"), "{out}");
    let listed = run_ok(breeze(d).args(["grants", "list", "--user", "g@n.test"]));
    assert_eq!(listed.matches("Connected").count(), 1, "{listed}");
    assert_eq!(listed.matches("Revoked").count(), 1, "{listed}");
    // Someone else cannot revoke it by id: the same "no such grant" as a missing one.
    let (_, err) = run_err(breeze(d).args(["grants", "revoke", "--user", "nobody@n.test", id]));
    assert!(err.contains("no user with email"), "{err}");

    let out = run_ok(breeze(d).args(["grants", "revoke", "--user", "g@n.test", "--all"]));
    assert!(out.contains("revoked 1 OAuth grant"), "{out}");
    let listed = run_ok(breeze(d).args(["grants", "list", "--user", "g@n.test", "--json"]));
    let grants: Value = serde_json::from_str(&listed).unwrap();
    assert!(
        grants
            .as_array()
            .unwrap()
            .iter()
            .all(|g| g["state"] == "Revoked"),
        "{listed}"
    );
    let (_, err) = run_err(breeze(d).args(["grants", "revoke", "--user", "g@n.test"]));
    assert!(err.contains("--all") || err.contains("<ID>"), "{err}");
}

/// The exports a stand-in collector received: content type and body of each.
type Exports = std::sync::Arc<std::sync::Mutex<Vec<(String, Vec<u8>)>>>;

/// A stand-in OpenTelemetry collector: answers every OTLP/HTTP export with 200 and keeps the
/// request bodies with their content type.
fn otlp_collector() -> (u16, Exports) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let keep = seen.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let mut raw = Vec::new();
            let mut buf = [0u8; 8192];
            let (head, body_start) = loop {
                let Ok(n) = conn.read(&mut buf) else {
                    break (String::new(), 0);
                };
                if n == 0 {
                    break (String::new(), 0);
                }
                raw.extend_from_slice(&buf[..n]);
                if let Some(at) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
                    break (String::from_utf8_lossy(&raw[..at]).to_lowercase(), at + 4);
                }
            };
            let header = |name: &str| {
                head.lines()
                    .find_map(|l| l.strip_prefix(name).map(|v| v.trim().to_owned()))
                    .unwrap_or_default()
            };
            let len: usize = header("content-length:").parse().unwrap_or(0);
            while raw.len() < body_start + len {
                match conn.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => raw.extend_from_slice(&buf[..n]),
                }
            }
            let kind = header("content-type:");
            let reply = if kind.contains("json") { "{}" } else { "" };
            let _ = write!(
                conn,
                "HTTP/1.1 200 OK\r\nContent-Type: {kind}\r\nContent-Length: {}\r\n\
                 Connection: close\r\n\r\n{reply}",
                reply.len()
            );
            let body = raw.get(body_start..).unwrap_or_default().to_vec();
            keep.lock().unwrap().push((kind, body));
        }
    });
    (port, seen)
}

/// The spans of OTLP/JSON export bodies, each with its resource's `service.name`.
fn exported_spans(bodies: &[(String, Vec<u8>)]) -> Vec<(String, Value)> {
    let mut spans = Vec::new();
    for (_, body) in bodies {
        let v: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
        for rs in v["resourceSpans"].as_array().into_iter().flatten() {
            let service = rs["resource"]["attributes"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|a| a["key"] == "service.name")
                .and_then(|a| a["value"]["stringValue"].as_str())
                .unwrap_or_default()
                .to_owned();
            for ss in rs["scopeSpans"].as_array().into_iter().flatten() {
                for s in ss["spans"].as_array().into_iter().flatten() {
                    spans.push((service.clone(), s.clone()));
                }
            }
        }
    }
    spans
}

/// A span's string attribute.
fn attr<'a>(span: &'a Value, key: &str) -> Option<&'a str> {
    span["attributes"]
        .as_array()?
        .iter()
        .find(|a| a["key"] == key)?["value"]["stringValue"]
        .as_str()
}

#[test]
fn a_tool_call_is_traced_over_otlp_through_guard_handler_store_and_agent() {
    let (collector, seen) = otlp_collector();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let endpoint = format!("http://127.0.0.1:{collector}");
    let server = Server::start_with(
        dir.path(),
        port,
        "demo",
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
            ("OTEL_SERVICE_NAME", "breeze-under-test"),
            // The SDK's own setting: export every 100 ms rather than every 5 s.
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ],
    );
    let demo = read_demo(dir.path());
    let read = demo["api_keys"]["read"].as_str().unwrap();
    let write = demo["api_keys"]["write"].as_str().unwrap();
    let device = local_device(port, read);
    // A Tier 1 call with an agent round trip.
    let r = mcp_tool(
        port,
        write,
        "file_operations",
        serde_json::json!({ "deviceId": device, "action": "list", "path": "/" }),
    );
    assert_eq!(r["structuredContent"]["status"], "completed", "{r}");

    let mut spans = Vec::new();
    let mut call = Value::Null;
    eventually(20, "the file_operations call's spans", || {
        spans = exported_spans(&seen.lock().unwrap());
        call = spans
            .iter()
            .map(|(_, s)| s)
            .find(|s| s["name"] == "tool.call" && attr(s, "tool") == Some("file_operations"))
            .cloned()
            .unwrap_or(Value::Null);
        let trace = &call["traceId"];
        let names: Vec<&Value> = spans
            .iter()
            .filter(|(_, s)| s["traceId"] == *trace)
            .map(|(_, s)| &s["name"])
            .collect();
        !call.is_null()
            && names.iter().any(|n| *n == "agent.wait")
            && names.iter().any(|n| *n == "http")
    });
    assert!(
        seen.lock()
            .unwrap()
            .iter()
            .all(|(kind, _)| kind == "application/json"),
        "http/json was asked for"
    );
    assert!(
        spans
            .iter()
            .all(|(service, _)| service == "breeze-under-test")
    );
    assert_eq!(attr(&call, "outcome"), Some("output"), "{call}");
    let trace: Vec<&Value> = spans
        .iter()
        .map(|(_, s)| s)
        .filter(|s| s["traceId"] == call["traceId"])
        .collect();
    let one = |name: &str| -> &Value {
        let found: Vec<&&Value> = trace.iter().filter(|s| s["name"] == name).collect();
        assert_eq!(
            found.len(),
            1,
            "one {name} span in the call's trace: {trace:#?}"
        );
        found[0]
    };
    // The request's span is the root; the call's steps nest under it in order.
    let http = one("http");
    assert_eq!(attr(http, "path"), Some("/mcp"));
    assert!(
        attr(http, "request_id").is_some_and(|id| !id.is_empty()),
        "the request id is on the request's span: {http}"
    );
    assert_eq!(call["parentSpanId"], http["spanId"]);
    for step in ["guard", "handler"] {
        assert_eq!(one(step)["parentSpanId"], call["spanId"], "{step}");
    }
    let handler = one("handler");
    let submit = one("agent.submit");
    assert_eq!(submit["parentSpanId"], handler["spanId"]);
    assert_eq!(attr(submit, "device"), Some(device.as_str()));
    let wait = one("agent.wait");
    assert_eq!(wait["parentSpanId"], handler["spanId"]);
    assert!(
        attr(wait, "status").is_some_and(|s| s.contains("ompleted")),
        "{wait}"
    );
    // The store's statements are events of the steps that ran them.
    let statements = trace
        .iter()
        .flat_map(|s| s["events"].as_array().into_iter().flatten())
        .filter(|e| {
            e["attributes"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|a| a["key"] == "db.statement")
        })
        .count();
    assert!(
        statements > 0,
        "no SQL statement in the call's trace: {trace:#?}"
    );

    // A caller's W3C trace context: the request joins the caller's trace, under its span.
    let (trace_id, parent) = ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7");
    let body = serde_json::json!({ "jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": { "name": "query_devices", "arguments": {} } })
    .to_string();
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        s,
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nX-API-Key: {read}\r\n\
         traceparent: 00-{trace_id}-{parent}-01\r\nContent-Type: application/json\r\n\
         Accept: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut reply = String::new();
    s.read_to_string(&mut reply).unwrap();
    assert!(reply.contains("\"result\""), "{reply}");
    let mut joined = Vec::new();
    eventually(20, "the call's spans in the caller's trace", || {
        joined = exported_spans(&seen.lock().unwrap())
            .into_iter()
            .map(|(_, s)| s)
            .filter(|s| s["traceId"] == trace_id)
            .collect();
        joined.iter().any(|s| s["name"] == "tool.call")
            && joined.iter().any(|s| s["name"] == "http")
    });
    let http = joined.iter().find(|s| s["name"] == "http").unwrap();
    assert_eq!(
        http["parentSpanId"], parent,
        "under the caller's span: {http}"
    );
    server.stop();
}
