//! A device's identity with the real `breeze-agent` binary on this machine: the takeover
//! attack of an enrollment-key holder, and the administrator's re-enrollment.
//!
//! The real agent enrolls with the HQ key and runs. An attacker holding another site's key
//! enrolls with this machine's id (world-readable `/etc/machine-id`) and opens a socket: it
//! gets a new device flagged as a possible clone — in `query_devices` and as an alert — and
//! the real device's commands still reach the real agent, never the attacker. Then an
//! administrator issues a re-enroll token and the machine is enrolled again with it (a
//! rebuilt machine, a new config file): the device keeps its id, the running agent's socket
//! closes at once, and that agent, refused, stops with exit status 78 instead of retrying.
#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod common;

use std::{sync::Arc, time::Duration};

use breeze_auth::CreateEnrollmentKey;
use breeze_core::{DeviceId, OrgId, SiteId, SystemClock};
use breeze_store::{Backend, testing::TestStore};
use common::{Fleet, agent, audit, call, enroll, eventually};
use futures::StreamExt;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

async fn key(f: &Fleet, org: OrgId, site: SiteId) -> String {
    let (secret, _) = f
        .state
        .auth
        .create_enrollment_key(
            CreateEnrollmentKey {
                org_id: org,
                site_id: site,
                name: "identity".into(),
                max_uses: None,
                expires_at: f.state.clock.now() + chrono::Duration::minutes(10),
                created_by: "test".into(),
            },
            audit("enrollment_key.create"),
        )
        .await
        .unwrap();
    secret.expose().to_owned()
}

async fn run(backend: Backend) {
    let test = TestStore::new(backend, Arc::new(SystemClock)).await;
    let f = common::server(test.store.clone()).await;
    let o = f.store.org(f.org);
    let hq = o.tenancy().list_sites().await.unwrap()[0].id;
    let branch = o
        .tenancy()
        .create_site("Branch Office", "UTC", audit("site.create"))
        .await
        .unwrap()
        .id;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("agent.json");
    enroll(&f, &config).await;
    let file: Value = serde_json::from_slice(&std::fs::read(&config).unwrap()).unwrap();
    let victim: DeviceId = file["deviceId"].as_str().unwrap().parse().unwrap();
    let mut running = agent(&["run"], &config)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    eventually(20, "the agent's socket", || async {
        f.state.gateway.is_connected(victim)
    })
    .await;

    // The attack: the Branch Office key and exactly what the real agent sends about this
    // machine, its id included.
    let attack = breeze_agent::enroll::enroll_request(&key(&f, f.org, branch).await);
    assert!(
        attack.machine_id.is_some(),
        "this machine has a machine id (/etc/machine-id)"
    );
    let http = reqwest::Client::new();
    let enrolled: Value = http
        .post(format!("{}/api/v1/agents/enroll", f.base_url))
        .json(&attack)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let impostor = enrolled["deviceId"].as_str().unwrap().to_owned();
    assert_ne!(impostor, victim.to_string(), "{enrolled}");
    assert_eq!(enrolled["possibleClone"], json!(true), "{enrolled}");
    assert!(
        !enrolled.to_string().contains(&victim.to_string()),
        "the victim's id is not told to the key holder: {enrolled}"
    );
    assert_eq!(enrolled["reenrolled"], json!(false));
    let mut ws = breeze_agent::api::ws_url(&f.base_url)
        .unwrap()
        .into_client_request()
        .unwrap();
    ws.headers_mut().insert(
        "authorization",
        format!("Bearer {}", enrolled["token"].as_str().unwrap())
            .parse()
            .unwrap(),
    );
    let (mut attacker_socket, _) = tokio_tungstenite::connect_async(ws).await.unwrap();
    assert!(
        f.state.gateway.is_connected(victim),
        "the real agent keeps its socket"
    );

    // The victim device's file read is answered by the real agent, on this machine.
    let work = tempfile::tempdir().unwrap();
    let path = work.path().join("hostname");
    std::fs::write(&path, "the real machine\n").unwrap();
    let read = call(
        &f,
        f.org,
        "file_operations",
        json!({ "deviceId": victim.to_string(), "action": "read",
                "path": path.display().to_string() }),
    )
    .await
    .unwrap();
    assert_eq!(read["result"]["content"], "the real machine\n");
    // Nothing of the victim's reached the attacker's socket: its frames are its own welcome
    // and policy.
    while let Ok(Some(Ok(frame))) =
        tokio::time::timeout(Duration::from_millis(500), attacker_socket.next()).await
    {
        let text = frame.into_text().unwrap_or_default();
        assert!(!text.contains(&victim.to_string()), "{text}");
        assert!(!text.contains("\"command\""), "{text}");
    }

    // Flagged where people look: query_devices and an alert on the impostor.
    let listed = f.mcp("query_devices", json!({ "limit": 100 })).await;
    let devices = &listed["structuredContent"]["devices"];
    let flagged: Vec<&Value> = devices
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["suspectedCloneOf"] == json!(victim.to_string()))
        .collect();
    assert_eq!(flagged.len(), 1, "{listed}");
    assert_eq!(flagged[0]["id"], json!(impostor));
    let alerts = f
        .mcp(
            "manage_alerts",
            json!({ "action": "list", "deviceId": impostor }),
        )
        .await;
    assert!(
        alerts
            .to_string()
            .contains(breeze_store::SUSPECTED_CLONE_RULE),
        "{alerts}"
    );

    // The administrator re-enrolls the device: a one-time token, used by `breeze-agent
    // enroll --reenroll-token` with a fresh config file (a rebuilt machine).
    let (token, _) = f
        .state
        .auth
        .issue_reenroll_token(f.org, victim, 1, audit("device.reenroll_token.issue"))
        .await
        .unwrap();
    let rebuilt = dir.path().join("rebuilt.json");
    let status = agent(
        &[
            "enroll",
            "--server",
            &f.base_url,
            "--key",
            &key(&f, f.org, hq).await,
            "--reenroll-token",
            token.expose(),
        ],
        &rebuilt,
    )
    .status()
    .await
    .unwrap();
    assert!(status.success());
    let file: Value = serde_json::from_slice(&std::fs::read(&rebuilt).unwrap()).unwrap();
    assert_eq!(file["deviceId"], json!(victim.to_string()));

    // The running agent's socket (its token is the old one) closed at once; refused, the
    // agent stops with its own exit status and says why.
    let status = tokio::time::timeout(Duration::from_secs(40), running.wait())
        .await
        .expect("the refused agent stops instead of retrying")
        .unwrap();
    assert_eq!(
        status.code(),
        Some(i32::from(breeze_agent::EXIT_TOKEN_REFUSED))
    );
    let mut stderr = String::new();
    tokio::io::AsyncReadExt::read_to_string(running.stderr.as_mut().unwrap(), &mut stderr)
        .await
        .unwrap();
    assert!(stderr.contains("refuses this device's token"), "{stderr}");

    // The same machine enrolling again with its config file in place proves itself with its
    // token: the same device, no new one.
    let before = f
        .store
        .org(f.org)
        .devices()
        .list_devices(&Default::default(), 100, 0)
        .await
        .unwrap()
        .1;
    let status = agent(
        &[
            "enroll",
            "--server",
            &f.base_url,
            "--key",
            &key(&f, f.org, hq).await,
        ],
        &rebuilt,
    )
    .status()
    .await
    .unwrap();
    assert!(status.success());
    let file: Value = serde_json::from_slice(&std::fs::read(&rebuilt).unwrap()).unwrap();
    assert_eq!(file["deviceId"], json!(victim.to_string()));
    let after = f
        .store
        .org(f.org)
        .devices()
        .list_devices(&Default::default(), 100, 0)
        .await
        .unwrap()
        .1;
    assert_eq!(before, after);

    drop(attacker_socket);
    f.stop.cancel();
    test.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_enrollment_key_cannot_take_over_the_real_agents_device_on_sqlite() {
    run(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_enrollment_key_cannot_take_over_the_real_agents_device_on_postgres() {
    run(Backend::Postgres).await;
}
