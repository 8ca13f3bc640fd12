//! Patch management end to end with the real `breeze-agent` binary on this machine.
//!
//! The agent's package manager is a fake `apt-get` (a shell script in a temporary directory)
//! that records every invocation: for a simulation (`-s`, read-only) it passes the call to
//! this machine's real `apt-get` — so the scan shows this machine's real upgradable packages,
//! however many there are — and adds one fake security update, `breeze-fake-pkg`; an install
//! or downgrade only flips a marker file. Nothing here changes this machine's packages; the
//! reboot command is a fake too, and the "reboot required" file lives in the temporary
//! directory.
//!
//! The agent's own first scan arrives by itself; then through the pipeline: scan now, list,
//! approve the fake package, install (Tier 3, approved by the admin) with reboot if_needed,
//! the job's result, rollback to the recorded version; and a `patch` policy's scan interval
//! that the agent reports as applied.
#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod common;

use std::{
    path::Path,
    sync::Arc,
    time::{Duration, Instant},
};

use breeze_core::SystemClock;
use breeze_store::{Backend, testing::TestStore};
use common::{Fleet, agent, audit, enroll, eventually, server};
use serde_json::{Value, json};
use tokio::process::Child;

/// Calls a tool through the whole pipeline with the admin's `*` key; the admin approves each
/// Tier 3 request as it appears.
async fn call(f: &Fleet, tool: &str, args: Value) -> Result<Value, String> {
    common::call(f, f.org, tool, args).await
}

/// The fake `apt-get` and reboot command, recording into `dir/apt.log` and `dir/reboot.log`.
fn fakes(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let d = dir.display();
    let apt = dir.join("fake-apt-get");
    std::fs::write(
        &apt,
        format!(
            r#"#!/bin/sh
echo "$*" >> "{d}/apt.log"
case " $* " in
  *" -s "*)
    if [ -x /usr/bin/apt-get ]; then /usr/bin/apt-get "$@" 2>/dev/null | grep '^Inst ' || true; fi
    [ -f "{d}/installed" ] || echo "Inst breeze-fake-pkg [1.0-1] (1.0-2 Debian-Security:12/stable-security [amd64])"
    exit 0 ;;
  *" install "*)
    case " $* " in
      *" --allow-downgrades "*) rm -f "{d}/installed" ;;
      *) touch "{d}/installed" ;;
    esac
    echo "Setting up breeze-fake-pkg"
    exit 0 ;;
  *) echo "unexpected: $*" >&2; exit 2 ;;
esac
"#
        ),
    )
    .unwrap();
    let reboot = dir.join("fake-reboot");
    std::fs::write(
        &reboot,
        format!("#!/bin/sh\necho \"$*\" >> \"{d}/reboot.log\"\n"),
    )
    .unwrap();
    for f in [&apt, &reboot] {
        std::fs::set_permissions(f, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    (apt, reboot)
}

fn fake_in(list: &Value) -> Option<&Value> {
    list["patches"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "breeze-fake-pkg")
}

/// Waits (reading the store: the tool has a per-user limit) until the job is final, then
/// answers the tool's `results` for it.
async fn job_done(f: &Fleet, job: &str) -> Value {
    let id: uuid::Uuid = job.parse().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (j, _) = f
            .store
            .org(f.org)
            .patches()
            .get_patch_job(id)
            .await
            .unwrap();
        if !matches!(j.status.as_str(), "running" | "scheduled") {
            break;
        }
        assert!(Instant::now() < deadline, "the job did not finish: {j:?}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    call(
        f,
        "manage_patches",
        json!({ "action": "results", "jobId": job }),
    )
    .await
    .unwrap()
}

async fn patch_run(backend: Backend) {
    let test = TestStore::new(backend, Arc::new(SystemClock)).await;
    let f = server(test.store.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("agent.json");
    enroll(&f, &config).await;
    let (apt, reboot) = fakes(dir.path());
    let required = dir.path().join("reboot-required");
    std::fs::write(&required, "*** System restart required ***\n").unwrap();
    let mut file: Value = serde_json::from_slice(&std::fs::read(&config).unwrap()).unwrap();
    file["patching"] = json!({
        "manager": "apt", "executable": apt, "rebootCommand": [reboot],
        "rebootRequiredFile": required,
    });
    std::fs::write(&config, serde_json::to_vec_pretty(&file).unwrap()).unwrap();
    let device = file["deviceId"].as_str().unwrap().to_owned();
    let device_id: breeze_core::DeviceId = device.parse().unwrap();
    let _running: Child = agent(&["run"], &config).spawn().unwrap();
    eventually(20, "the agent's socket", || async {
        f.state.gateway.is_connected(device_id)
    })
    .await;

    // The agent's own first scan arrives with an inventory, unasked.
    eventually(60, "the agent's scheduled scan", || async {
        f.store
            .org(f.org)
            .patches()
            .patch_scans()
            .await
            .unwrap()
            .iter()
            .any(|s| s.device_id == device_id && s.scanned_at.is_some())
    })
    .await;

    // Scan now, through the pipeline: this machine's real upgradable packages and the fake.
    let scan = call(
        &f,
        "manage_patches",
        json!({ "action": "scan", "deviceIds": [device] }),
    )
    .await
    .unwrap();
    assert_eq!(scan["scans"][0]["status"], "completed", "{scan}");
    let list = call(
        &f,
        "manage_patches",
        json!({ "action": "list", "deviceId": device, "limit": 500 }),
    )
    .await
    .unwrap();
    let fake = fake_in(&list).unwrap_or_else(|| panic!("{list}"));
    assert_eq!(fake["installedVersion"], "1.0-1");
    assert_eq!(fake["availableVersion"], "1.0-2");
    assert_eq!(fake["security"], true);
    assert_eq!(fake["decision"], "pending");
    // This machine's real upgradable packages (apt-get -s dist-upgrade), however many.
    assert!(list["showing"].as_u64().unwrap() >= 1, "{list}");
    let c = call(
        &f,
        "manage_patches",
        json!({ "action": "compliance", "deviceId": device }),
    )
    .await
    .unwrap();
    assert_eq!(c["devices"][0]["manager"], "apt", "{c}");
    assert_eq!(c["devices"][0]["rebootRequired"], true, "{c}");
    assert!(c["devices"][0]["pendingSecurity"].as_u64().unwrap() >= 1);

    // Approve only the fake; install every approved update, reboot if needed.
    let r = call(
        &f,
        "manage_patches",
        json!({ "action": "approve", "packageName": "breeze-fake-pkg" }),
    )
    .await
    .unwrap();
    assert_eq!(r["approvals"][0]["decision"], "approved", "{r}");
    let r = call(
        &f,
        "manage_patches",
        json!({ "action": "install", "deviceIds": [device], "rebootPolicy": "if_needed" }),
    )
    .await
    .unwrap();
    assert_eq!(
        r["job"]["devices"][0]["packages"],
        json!(["breeze-fake-pkg"]),
        "{r}"
    );
    let job = r["job"]["id"].as_str().unwrap().to_owned();
    let done = job_done(&f, &job).await;
    assert_eq!(done["job"]["status"], "succeeded", "{done}");
    let part = &done["job"]["devices"][0];
    assert_eq!(part["results"][0]["status"], "installed", "{done}");
    assert_eq!(part["results"][0]["fromVersion"], "1.0-1");
    assert_eq!(part["results"][0]["toVersion"], "1.0-2");
    let log = std::fs::read_to_string(dir.path().join("apt.log")).unwrap();
    let installs: Vec<&str> = log.lines().filter(|l| l.starts_with("install")).collect();
    assert_eq!(installs.len(), 1, "{log}");
    assert!(
        installs[0].starts_with("install -y --only-upgrade")
            && installs[0].ends_with(" breeze-fake-pkg"),
        "only the approved package, through the fake: {log}"
    );
    // The reboot: scheduled through the fake command, or deferred for logged-in users.
    match part["reboot"].as_str().unwrap() {
        "scheduled" => {
            let rebooted = std::fs::read_to_string(dir.path().join("reboot.log")).unwrap();
            assert_eq!(rebooted.trim(), "+5", "{rebooted}");
        }
        "deferred_users_logged_in" => {
            assert!(!dir.path().join("reboot.log").exists());
            assert!(part["rebootDetail"].as_str().unwrap().contains("logged in"));
        }
        other => panic!("unexpected reboot outcome {other}: {done}"),
    }
    let list = call(
        &f,
        "manage_patches",
        json!({ "action": "list", "deviceId": device, "limit": 500 }),
    )
    .await
    .unwrap();
    assert!(fake_in(&list).is_none(), "installed: no longer offered");

    // Roll it back to the version before the install.
    let r = call(
        &f,
        "manage_patches",
        json!({ "action": "rollback", "deviceIds": [device], "packageNames": ["breeze-fake-pkg"] }),
    )
    .await
    .unwrap();
    let job = r["job"]["id"].as_str().unwrap().to_owned();
    let done = job_done(&f, &job).await;
    assert_eq!(done["job"]["status"], "succeeded", "{done}");
    assert_eq!(
        done["job"]["devices"][0]["results"][0]["status"],
        "rolled_back"
    );
    let log = std::fs::read_to_string(dir.path().join("apt.log")).unwrap();
    assert!(
        log.lines()
            .any(|l| l.starts_with("install -y --allow-downgrades")
                && l.ends_with(" breeze-fake-pkg=1.0-1")),
        "{log}"
    );
    let list = call(
        &f,
        "manage_patches",
        json!({ "action": "list", "deviceId": device, "limit": 500 }),
    )
    .await
    .unwrap();
    assert_eq!(fake_in(&list).unwrap()["installedVersion"], "1.0-1");

    // The patch policy's scan interval reaches the agent, which reports it as applied.
    let policy = f
        .store
        .org(f.org)
        .config_policies()
        .create_config_policy(
            breeze_store::NewConfigPolicy {
                name: "patch ring".into(),
                description: None,
                status: breeze_core::PolicyStatus::Active,
                settings: vec![(
                    breeze_core::FeatureType::Patch,
                    json!({ "scanIntervalMinutes": 30 }),
                )],
                created_by: "test".into(),
            },
            audit("config_policy.create"),
        )
        .await
        .unwrap();
    call(
        &f,
        "apply_configuration_policy",
        json!({ "configPolicyId": policy.id.to_string(), "level": "organization",
                "targetId": f.org.to_string() }),
    )
    .await
    .unwrap();
    eventually(30, "the agent to apply the scan interval", || async {
        f.store
            .org(f.org)
            .config_policies()
            .config_report(device_id)
            .await
            .unwrap()
            .is_some_and(|r| r.applied["patchScanIntervalMinutes"] == 30)
    })
    .await;
    // What the agent applied matches the effective configuration: no drift on the setting.
    let effective = call(
        &f,
        "get_effective_configuration",
        json!({ "deviceId": device }),
    )
    .await
    .unwrap();
    assert_eq!(
        effective["effective"]["patch"]["scanIntervalMinutes"]["value"], 30,
        "{effective}"
    );
    assert_eq!(
        effective["applied"]["values"]["patchScanIntervalMinutes"], 30,
        "{effective}"
    );
    assert_eq!(effective["drift"], json!([]), "{effective}");
    f.stop.cancel();
    test.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn patches_through_the_real_agent_on_sqlite() {
    patch_run(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn patches_through_the_real_agent_on_postgres() {
    patch_run(Backend::Postgres).await;
}
