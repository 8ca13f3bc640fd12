//! A staged deployment end to end with the real `breeze-agent` binary on this machine.
//!
//! A harmless library script (it prints a line; it exits 3 while a marker file in a temporary
//! directory exists — the injected failure) is deployed to two rings: `canary`, this machine's
//! enrolled agent plus a seeded device, and a last ring of another seeded device. The seeded
//! devices have no agent (offline): they are skipped, counting neither way. Created and
//! started through the pipeline with the admin's `*` key (start is Tier 3, approved), the
//! server's own deployment worker sends the canary run through `run_script` as that key (Tier
//! 3 again, approved by the admin as it appears). With the marker present the real agent's run
//! fails: the deployment pauses by itself, the reason recorded. The marker removed, `resume`
//! with `retryFailed` runs the canary again, it succeeds, the next ring starts, and the
//! deployment completes.
//!
//! Then a package removal deployment through the same real agent, whose package manager is a
//! fake `apt-get` (a shell script in the temporary directory that records every invocation
//! and answers apt's simulation) — never this machine's packages: `breeze-fake-pkg` is
//! removed (the device succeeds, the fake saw exactly `remove -y breeze-fake-pkg`), while
//! `breeze-fake-lib`, whose removal would also take `breeze-fake-app`, is refused by the agent
//! before anything runs: the device fails and the deployment pauses.
//!
//! And the same with a fake `dnf` through `manage_patches` `remove`: the agent reads dnf's
//! `remove --assumeno` transaction summary first and refuses a removal that would take a
//! dependent; each removal lands in the device's patch history.
#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod common;

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use breeze_core::{DeviceStatus, SystemClock};
use breeze_store::{AuditFilter, Backend, NewScript, testing::TestStore};
use common::{Fleet, agent, approve_everything, audit, enroll, eventually, server};
use serde_json::{Value, json};
use tokio::process::Child;

const TOOL: &str = "manage_deployments";

async fn call(f: &Fleet, args: Value) -> Value {
    common::call(f, f.org, TOOL, args).await.unwrap()
}

async fn status(f: &Fleet, id: &str) -> Value {
    call(f, json!({ "action": "device_status", "deploymentId": id })).await
}

/// A device of the organization with no agent behind it.
async fn seeded(f: &Fleet, hostname: &str) -> String {
    let o = f.store.org(f.org);
    let site = o.tenancy().list_sites().await.unwrap()[0].id;
    o.devices()
        .create_device(
            breeze_store::testing::new_device(site, hostname, DeviceStatus::Offline),
            audit("device.create"),
        )
        .await
        .unwrap()
        .id
        .to_string()
}

/// The deployment's device status (one tool call: the tool allows 10 in 10 minutes) once the
/// store shows it `want` (at most two minutes).
async fn until(f: &Fleet, id: &str, want: &str) -> Value {
    let deployment: uuid::Uuid = id.parse().unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let d = f
            .store
            .org(f.org)
            .deployments()
            .get_deployment(deployment)
            .await
            .unwrap();
        if d.status.as_str() == want {
            return status(f, id).await;
        }
        assert!(
            Instant::now() < deadline,
            "the deployment is not {want}: {d:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn device<'a>(s: &'a Value, id: &str) -> &'a Value {
    s["devices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["deviceId"] == id)
        .unwrap_or_else(|| panic!("{id} in {s}"))
}

async fn deployment_run(backend: Backend) {
    let test = TestStore::new(backend, Arc::new(SystemClock)).await;
    let f = server(test.store.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("agent.json");
    enroll(&f, &config).await;
    let file: Value = serde_json::from_slice(&std::fs::read(&config).unwrap()).unwrap();
    let real = file["deviceId"].as_str().unwrap().to_owned();
    let real_id: breeze_core::DeviceId = real.parse().unwrap();
    let _running: Child = agent(&["run"], &config).spawn().unwrap();
    eventually(20, "the agent's socket", || async {
        f.state.gateway.is_connected(real_id)
    })
    .await;
    eventually(20, "the device online", || async {
        f.store
            .org(f.org)
            .devices()
            .get_device(real_id)
            .await
            .unwrap()
            .status
            == DeviceStatus::Online
    })
    .await;
    let canary_seed = seeded(&f, "seeded-canary").await;
    let last_seed = seeded(&f, "seeded-last").await;

    let marker = dir.path().join("fail-now");
    std::fs::write(&marker, "injected").unwrap();
    let script = f
        .store
        .org(f.org)
        .scripts()
        .create_script(
            NewScript {
                name: "harmless".into(),
                description: "prints a line; fails while the marker exists".into(),
                language: "sh".into(),
                category: "general".into(),
                body: format!(
                    "if [ -e '{}' ]; then echo 'injected failure' >&2; exit 3; fi\n\
                     echo deployed-by-breeze\n",
                    marker.display()
                ),
                parameters: vec![],
                created_by: "test".into(),
            },
            audit("script.create"),
        )
        .await
        .unwrap();

    let created = call(
        &f,
        json!({ "action": "create", "name": "harmless-rollout",
                "payload": { "kind": "script", "scriptId": script.id.to_string(),
                             "timeoutSeconds": 30 },
                "rings": [ { "name": "canary", "deviceIds": [real, canary_seed] },
                           { "name": "rest", "deviceIds": [last_seed] } ] }),
    )
    .await;
    let id = created["deployment"]["id"].as_str().unwrap().to_owned();
    assert_eq!(created["deployment"]["status"], "draft", "{created}");
    let started = call(&f, json!({ "action": "start", "deploymentId": id })).await;
    assert_eq!(started["deployment"]["status"], "running", "{started}");

    // The worker's run_script as the key waits for a person: the admin approves as it appears.
    let approver = approve_everything(&f, f.org);
    let last = until(&f, &id, "paused").await;
    let reason = last["deployment"]["pauseReason"].as_str().unwrap();
    assert!(reason.contains("ring 1 (canary): 1 of 1"), "{last}");
    let mine = device(&last, &real);
    assert_eq!(mine["status"], "failed", "{last}");
    assert_eq!(mine["exitCode"], 3, "{last}");
    assert!(
        mine["error"]
            .as_str()
            .unwrap_or_default()
            .contains("injected failure"),
        "{last}"
    );
    assert_eq!(device(&last, &canary_seed)["status"], "skipped", "{last}");
    assert_eq!(device(&last, &last_seed)["status"], "pending", "{last}");

    // Fixed, resumed with a retry: the canary runs again and succeeds, the next ring's seeded
    // device is skipped, and the deployment completes.
    std::fs::remove_file(&marker).unwrap();
    let resumed = call(
        &f,
        json!({ "action": "resume", "deploymentId": id, "retryFailed": true }),
    )
    .await;
    assert_eq!(resumed["deployment"]["status"], "running", "{resumed}");
    let last = until(&f, &id, "completed").await;
    approver.abort();
    let mine = device(&last, &real);
    assert_eq!(mine["status"], "succeeded", "{last}");
    assert!(
        mine["output"]
            .as_str()
            .unwrap_or_default()
            .contains("deployed-by-breeze"),
        "{last}"
    );
    assert_eq!(device(&last, &last_seed)["status"], "skipped", "{last}");

    // On record: the automatic pause with its reason, the resume, the rings, the end.
    let page = f
        .store
        .org(f.org)
        .audit()
        .query_audit(
            &AuditFilter {
                resource_id: Some(id.clone()),
                ..AuditFilter::default()
            },
            None,
            100,
        )
        .await
        .unwrap();
    let actions: Vec<&str> = page
        .records
        .iter()
        .map(|r| r.event.action.as_str())
        .collect();
    for want in [
        "deployment.start",
        "deployment.pause.auto",
        "deployment.resume",
        "deployment.ring.advance",
        "deployment.complete",
    ] {
        assert!(actions.contains(&want), "{want} in {actions:?}");
    }
    test.cleanup().await;
}

/// The fake `apt-get`: records each invocation in `dir/apt.log`; its simulation of
/// `remove breeze-fake-pkg` lists it (until removed), of `remove breeze-fake-lib` lists it and
/// its dependent `breeze-fake-app`; `remove -y breeze-fake-pkg` marks it removed. Anything
/// else is answered with nothing to do.
fn fake_apt(dir: &std::path::Path) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let d = dir.display();
    let apt = dir.join("fake-apt-get");
    std::fs::write(
        &apt,
        format!(
            r#"#!/bin/sh
echo "$*" >> "{d}/apt.log"
case " $* " in
  *" -s "*" remove breeze-fake-pkg "*)
    [ -f "{d}/removed" ] && echo "Package 'breeze-fake-pkg' is not installed, so not removed"       || echo "Remv breeze-fake-pkg [1.0-2]"
    exit 0 ;;
  *" -s "*" remove breeze-fake-lib "*)
    echo "Remv breeze-fake-app [2.0-1]"; echo "Remv breeze-fake-lib [1.0-1]"; exit 0 ;;
  *" remove -y breeze-fake-pkg "*)
    touch "{d}/removed"; echo "Removing breeze-fake-pkg (1.0-2) ..."; exit 0 ;;
  *" remove "*) echo "E: unexpected removal: $*" >&2; exit 100 ;;
  *) exit 0 ;;
esac
"#
        ),
    )
    .unwrap();
    std::fs::set_permissions(&apt, std::fs::Permissions::from_mode(0o755)).unwrap();
    apt
}

async fn removal_run(backend: Backend) {
    let test = TestStore::new(backend, Arc::new(SystemClock)).await;
    let f = server(test.store.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("agent.json");
    enroll(&f, &config).await;
    let apt = fake_apt(dir.path());
    let mut file: Value = serde_json::from_slice(&std::fs::read(&config).unwrap()).unwrap();
    file["patching"] = json!({ "manager": "apt", "executable": apt });
    std::fs::write(&config, serde_json::to_vec_pretty(&file).unwrap()).unwrap();
    let real = file["deviceId"].as_str().unwrap().to_owned();
    let real_id: breeze_core::DeviceId = real.parse().unwrap();
    let _running: Child = agent(&["run"], &config).spawn().unwrap();
    eventually(20, "the agent's socket", || async {
        f.state.gateway.is_connected(real_id)
    })
    .await;
    eventually(20, "the device online", || async {
        f.store
            .org(f.org)
            .devices()
            .get_device(real_id)
            .await
            .unwrap()
            .status
            == DeviceStatus::Online
    })
    .await;
    let approver = approve_everything(&f, f.org);
    let log = || std::fs::read_to_string(dir.path().join("apt.log")).unwrap_or_default();

    // Removing the package: the agent simulates, removes, checks; the device succeeds.
    let created = call(
        &f,
        json!({ "action": "create", "name": "remove-fake",
                "payload": { "kind": "package", "name": "breeze-fake-pkg", "action": "remove" },
                "target": { "type": "device", "deviceId": real } }),
    )
    .await;
    let id = created["deployment"]["id"].as_str().unwrap().to_owned();
    let started = call(&f, json!({ "action": "start", "deploymentId": id })).await;
    assert_eq!(started["deployment"]["status"], "running", "{started}");
    let last = until(&f, &id, "completed").await;
    let mine = device(&last, &real);
    assert_eq!(mine["status"], "succeeded", "{last}");
    let output = mine["output"].as_str().unwrap_or_default();
    assert!(
        output.contains("\"removed\"") && output.contains("1.0-2"),
        "{last}"
    );
    let removals: Vec<String> = log()
        .lines()
        .filter(|l| l.starts_with("remove "))
        .map(str::to_owned)
        .collect();
    assert_eq!(removals, ["remove -y breeze-fake-pkg"], "{}", log());
    assert!(dir.path().join("removed").exists());

    // A removal that would take a package not named is refused on the device: it fails
    // (the dependent named) and the deployment pauses; nothing was removed.
    let created = call(
        &f,
        json!({ "action": "create", "name": "remove-lib",
                "payload": { "kind": "package", "name": "breeze-fake-lib", "action": "remove" },
                "target": { "type": "device", "deviceId": real } }),
    )
    .await;
    let id = created["deployment"]["id"].as_str().unwrap().to_owned();
    call(&f, json!({ "action": "start", "deploymentId": id })).await;
    let last = until(&f, &id, "paused").await;
    approver.abort();
    let mine = device(&last, &real);
    assert_eq!(mine["status"], "failed", "{last}");
    assert!(
        mine["error"]
            .as_str()
            .unwrap_or_default()
            .contains("breeze-fake-app"),
        "{last}"
    );
    assert!(
        !log().contains("remove -y breeze-fake-lib"),
        "nothing removed: {}",
        log()
    );
    // Each removal is audited as the key that owns the deployment.
    let page = f
        .store
        .org(f.org)
        .audit()
        .query_audit(
            &AuditFilter {
                action: Some("patch.remove".into()),
                ..AuditFilter::default()
            },
            None,
            10,
        )
        .await
        .unwrap();
    assert_eq!(page.records.len(), 2, "{page:?}");
    test.cleanup().await;
}

/// The fake `dnf`: records each invocation in `dir/dnf.log`; `list --installed` lists
/// `breeze-fake-pkg` (until removed) and `breeze-fake-lib`; the `remove --assumeno` summary of
/// `breeze-fake-pkg` takes only it, of `breeze-fake-lib` also its dependent `breeze-fake-app`
/// (and, like dnf, answers "Operation aborted" with exit 1); `remove -y breeze-fake-pkg` marks
/// it removed. Any other removal is an error; anything else has nothing to do.
fn fake_dnf(dir: &std::path::Path) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let d = dir.display();
    let dnf = dir.join("fake-dnf");
    std::fs::write(
        &dnf,
        format!(
            r#"#!/bin/sh
echo "$*" >> "{d}/dnf.log"
head='Dependencies resolved.\n======\n Package          Arch    Version     Repository   Size\n======\n'
case " $* " in
  *" list --installed "*)
    for p in "$@"; do
      case "$p" in
        breeze-fake-pkg) [ -f "{d}/removed" ] || echo "breeze-fake-pkg.x86_64   1.0-2.el9   @appstream" ;;
        breeze-fake-lib) echo "breeze-fake-lib.x86_64   1.0-1.el9   @appstream" ;;
      esac
    done
    exit 0 ;;
  *" remove --assumeno "*" breeze-fake-pkg "*)
    printf "$head"'Removing:\n breeze-fake-pkg  x86_64  1.0-2.el9   @appstream   10 k\n\nTransaction Summary\n======\nRemove  1 Package\n\nOperation aborted.\n'
    exit 1 ;;
  *" remove --assumeno "*" breeze-fake-lib "*)
    printf "$head"'Removing:\n breeze-fake-lib  x86_64  1.0-1.el9   @appstream   10 k\nRemoving dependent packages:\n breeze-fake-app  x86_64  2.0-1.el9   @appstream    5 k\n\nTransaction Summary\n======\nRemove  2 Packages\n\nOperation aborted.\n'
    exit 1 ;;
  *" remove -y "*" breeze-fake-pkg "*)
    touch "{d}/removed"; echo "Removed: breeze-fake-pkg-1.0-2.el9.x86_64"; exit 0 ;;
  *" remove "*) echo "Error: unexpected removal: $*" >&2; exit 1 ;;
  *) exit 0 ;;
esac
"#
        ),
    )
    .unwrap();
    std::fs::set_permissions(&dnf, std::fs::Permissions::from_mode(0o755)).unwrap();
    dnf
}

/// `manage_patches` `remove` through the real agent driving a fake `dnf`: a removal whose
/// `--assumeno` summary takes only the named package goes ahead; one that would also take a
/// dependent is refused before anything is removed. Both are in the device's patch history.
async fn dnf_removal_run(backend: Backend) {
    let test = TestStore::new(backend, Arc::new(SystemClock)).await;
    let f = server(test.store.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("agent.json");
    enroll(&f, &config).await;
    let dnf = fake_dnf(dir.path());
    let mut file: Value = serde_json::from_slice(&std::fs::read(&config).unwrap()).unwrap();
    file["patching"] = json!({ "manager": "dnf", "executable": dnf });
    std::fs::write(&config, serde_json::to_vec_pretty(&file).unwrap()).unwrap();
    let real = file["deviceId"].as_str().unwrap().to_owned();
    let real_id: breeze_core::DeviceId = real.parse().unwrap();
    let _running: Child = agent(&["run"], &config).spawn().unwrap();
    eventually(20, "the agent's socket", || async {
        f.state.gateway.is_connected(real_id)
    })
    .await;
    eventually(20, "the device online", || async {
        f.store
            .org(f.org)
            .devices()
            .get_device(real_id)
            .await
            .unwrap()
            .status
            == DeviceStatus::Online
    })
    .await;
    let log = || std::fs::read_to_string(dir.path().join("dnf.log")).unwrap_or_default();
    let removals = || -> Vec<String> {
        log()
            .lines()
            .filter(|l| l.starts_with("remove "))
            .map(str::to_owned)
            .collect()
    };
    let patches = |args: Value| common::call(&f, f.org, "manage_patches", args);

    // Only what was named: checked, then removed, both without dnf's unused-dependency clean-up.
    let r = patches(json!({ "action": "remove", "deviceIds": [real],
                            "packageNames": ["breeze-fake-pkg"] }))
    .await
    .unwrap();
    let removal = &r["removals"][0];
    assert_eq!(removal["status"], "succeeded", "{r}");
    assert_eq!(removal["manager"], "dnf", "{r}");
    assert_eq!(removal["packages"][0]["status"], "removed", "{r}");
    assert_eq!(removal["packages"][0]["fromVersion"], "1.0-2.el9", "{r}");
    assert_eq!(
        removals(),
        [
            "remove --assumeno --setopt=clean_requirements_on_remove=False breeze-fake-pkg",
            "remove -y --setopt=clean_requirements_on_remove=False breeze-fake-pkg",
        ],
        "{}",
        log()
    );
    assert!(dir.path().join("removed").exists());

    // A removal that would take a dependent is refused on the device, nothing removed.
    let r = patches(json!({ "action": "remove", "deviceIds": [real],
                            "packageNames": ["breeze-fake-lib"] }))
    .await
    .unwrap();
    let removal = &r["removals"][0];
    assert_eq!(removal["status"], "failed", "{r}");
    assert_eq!(removal["packages"][0]["status"], "failed", "{r}");
    assert!(
        removal["error"]
            .as_str()
            .unwrap_or_default()
            .contains("breeze-fake-app"),
        "{r}"
    );
    assert!(
        !removals()
            .iter()
            .any(|l| l.starts_with("remove -y") && l.contains("breeze-fake-lib")),
        "nothing removed: {}",
        log()
    );

    // Both are the device's patch history (newest first), as manage_patches results shows.
    let h = patches(json!({ "action": "results", "deviceId": real }))
        .await
        .unwrap();
    let history = h["history"].as_array().unwrap();
    let entries: Vec<(&str, &str, &str)> = history
        .iter()
        .map(|e| {
            (
                e["packageName"].as_str().unwrap(),
                e["action"].as_str().unwrap(),
                e["status"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        entries,
        [
            ("breeze-fake-lib", "remove", "failed"),
            ("breeze-fake-pkg", "remove", "removed")
        ],
        "{h}"
    );
    assert!(
        history[0]["error"]
            .as_str()
            .unwrap_or_default()
            .contains("breeze-fake-app"),
        "{h}"
    );
    test.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dnf_removal_through_the_real_agent_on_sqlite() {
    dnf_removal_run(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dnf_removal_through_the_real_agent_on_postgres() {
    dnf_removal_run(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_package_removal_deployment_through_the_real_agent_on_sqlite() {
    removal_run(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_package_removal_deployment_through_the_real_agent_on_postgres() {
    removal_run(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_staged_deployment_through_the_real_agent_on_sqlite() {
    deployment_run(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_staged_deployment_through_the_real_agent_on_postgres() {
    deployment_run(Backend::Postgres).await;
}
