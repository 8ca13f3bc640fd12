//! Two gateways on one PostgreSQL database, as two `breeze serve` instances behind a load
//! balancer: the agent's socket is held by one, the tool call that runs a command lands on the
//! other. The command must reach the agent, its result must wake the caller, and a
//! cancellation must reach the agent — through the cluster bus, not a poll: the waiters' poll
//! interval here is far longer than the test's patience.
#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use std::{sync::Arc, time::Duration};

use breeze_agent_proto::{AgentFrame, CommandKind, CommandOutcome, CommandResult, ServerFrame};
use breeze_core::{Actor, AuditEvent, Clock, DeviceId, DeviceStatus, OrgId, OsFamily, SystemClock};
use breeze_gateway::{Gateway, GatewayConfig, Registration};
use breeze_store::{
    Backend, EnrollDevice, NewCommand, NewEnrollmentKey, ReenrollProof, Store, testing::TestStore,
};
use tokio_util::sync::CancellationToken;

/// Longer than any wait below: a waiter woken in time was woken by a signal.
const POLL: Duration = Duration::from_secs(600);
const PATIENCE: Duration = Duration::from_secs(20);

fn audit(action: &str) -> AuditEvent {
    AuditEvent::new(Actor::system("test"), action, "test")
}

fn gateway(store: &Store, stop: &CancellationToken) -> Gateway {
    let gw = Gateway::new(
        store.clone(),
        GatewayConfig {
            poll_interval: POLL,
            ..GatewayConfig::default()
        },
    );
    store.spawn_bus_listener();
    gw.spawn_bus_follower(stop.clone());
    gw
}

async fn device(store: &Store) -> (OrgId, DeviceId) {
    let p = store.create_partner("P", "p", audit("p")).await.unwrap();
    let org = store
        .create_organization(p.id, "Org", "org", audit("o"))
        .await
        .unwrap()
        .id;
    let site = store
        .org(org)
        .tenancy()
        .create_site("HQ", "UTC", audit("s"))
        .await
        .unwrap();
    let d = store
        .org(org)
        .devices()
        .create_device(
            breeze_store::testing::new_device(site.id, "web-01", DeviceStatus::Online),
            audit("d"),
        )
        .await
        .unwrap();
    (org, d.id)
}

fn command(device: DeviceId) -> NewCommand {
    NewCommand {
        device_id: device,
        kind: CommandKind::ListServices,
        timeout_secs: 600,
        output_cap_bytes: 1024,
        queue_ttl: chrono::Duration::minutes(10),
        script: None,
        created_by: "test".into(),
    }
}

/// The next command or cancellation frame the agent's socket receives.
async fn next_frame(reg: &mut Registration) -> ServerFrame {
    loop {
        let frame = tokio::time::timeout(PATIENCE, reg.outbox.recv())
            .await
            .expect("a frame reaches the agent's socket on the other instance")
            .expect("the socket is open");
        if matches!(frame, ServerFrame::Command(_) | ServerFrame::Cancel { .. }) {
            return frame;
        }
    }
}

#[tokio::test]
async fn commands_cross_instances_both_ways() {
    let test = TestStore::new(Backend::Postgres, Arc::new(SystemClock)).await;
    let store_a = test.store.clone();
    let store_b = store_a.reopen().await.unwrap();
    let stop = CancellationToken::new();
    let (a, b) = (gateway(&store_a, &stop), gateway(&store_b, &stop));
    store_a.bus_listening().await;
    store_b.bus_listening().await;
    let (org, dev) = device(&store_a).await;

    // The agent's socket is on A; the call lands on B.
    let mut socket = a.connect(dev, org, [0; 32]).await.unwrap();
    assert!(!b.is_connected(dev));
    let queued = b
        .org(org)
        .submit(command(dev), audit("command"))
        .await
        .unwrap();
    let waiter = {
        let b = b.clone();
        tokio::spawn(async move { b.org(org).wait(queued.id, PATIENCE, |_| {}).await })
    };
    let ServerFrame::Command(wire) = next_frame(&mut socket).await else {
        panic!("expected the command");
    };
    assert_eq!(wire.id, queued.id);

    // The agent answers A; B's waiter wakes with the result.
    let now = SystemClock.now();
    a.handle(
        dev,
        org,
        AgentFrame::CommandResult(CommandResult {
            command_id: queued.id,
            status: CommandOutcome::Completed,
            exit_code: Some(0),
            stdout: "sshd running".into(),
            stderr: String::new(),
            stdout_truncated: false,
            stderr_truncated: false,
            result: None,
            error: None,
            started_at: now,
            finished_at: now,
        }),
    )
    .await
    .unwrap();
    let done = waiter.await.unwrap().unwrap();
    assert!(done.is_terminal(), "the waiter on B saw {:?}", done.status);
    assert_eq!(done.stdout.as_deref(), Some("sshd running"));

    // A cancellation decided on B reaches the agent on A.
    let second = b
        .org(org)
        .submit(command(dev), audit("command"))
        .await
        .unwrap();
    let ServerFrame::Command(wire) = next_frame(&mut socket).await else {
        panic!("expected the second command");
    };
    assert_eq!(wire.id, second.id);
    assert!(
        b.org(org)
            .cancel(second.id, "changed my mind")
            .await
            .unwrap()
    );
    match next_frame(&mut socket).await {
        ServerFrame::Cancel { command_id } => assert_eq!(command_id, second.id),
        other => panic!("expected the cancellation, got {other:?}"),
    }

    // Exactly once: each command was claimed by one instance, and nothing is left pending.
    let stored = store_a
        .org(org)
        .commands()
        .get_command(queued.id)
        .await
        .unwrap();
    assert!(stored.is_terminal());
    assert!(
        store_b
            .claim_pending_commands(dev)
            .await
            .unwrap()
            .is_empty()
    );

    stop.cancel();
    drop(socket);
    store_b.close().await;
    test.cleanup().await;
}

/// Waits until the socket's outbox closes (the gateway dropped the connection); frames queued
/// before that (the welcome, the policy) are skipped.
async fn closed(reg: &mut Registration) -> bool {
    tokio::time::timeout(PATIENCE, async {
        while reg.outbox.recv().await.is_some() {}
    })
    .await
    .is_ok()
}

/// A device re-enrolled (or its token rotated) through one instance: every socket opened with
/// the old token closes at once, on every instance — the bus, not a poll — while a socket
/// opened with the token the device still accepts stays open.
#[tokio::test]
async fn a_changed_credential_closes_old_sockets_on_every_instance() {
    let test = TestStore::new(Backend::Postgres, Arc::new(SystemClock)).await;
    let store_a = test.store.clone();
    let store_b = store_a.reopen().await.unwrap();
    let stop = CancellationToken::new();
    let (a, b) = (gateway(&store_a, &stop), gateway(&store_b, &stop));
    store_a.bus_listening().await;
    store_b.bus_listening().await;
    let (org, _) = device(&store_a).await;
    let site = store_a.org(org).tenancy().list_sites().await.unwrap()[0].id;
    store_a
        .org(org)
        .agents()
        .create_enrollment_key(
            NewEnrollmentKey {
                site_id: site,
                name: "k".into(),
                key_hash: [1; 32],
                key_prefix: "p".into(),
                max_uses: None,
                expires_at: SystemClock.now() + chrono::Duration::hours(1),
                created_by: "t".into(),
            },
            audit("enrollment_key.create"),
        )
        .await
        .unwrap();
    let machine = |token: u8, proof| EnrollDevice {
        hostname: "web-02".into(),
        machine_id: Some("m-1".into()),
        os_family: OsFamily::Linux,
        os_name: "Debian".into(),
        os_version: "12".into(),
        agent_version: "0.1.0".into(),
        token_hash: [token; 32],
        proof,
    };
    let dev = store_a
        .enroll_device(&[1; 32], machine(10, None))
        .await
        .unwrap()
        .device
        .id;

    // The agent's socket, opened with token 10, is on A.
    let mut on_a = a.connect(dev, org, [10; 32]).await.unwrap();
    // A machine with the same id but no proof: a new device; the socket stays.
    let clone = store_b
        .enroll_device(&[1; 32], machine(11, None))
        .await
        .unwrap();
    assert_eq!(clone.suspected_clone_of, Some(dev));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(a.is_connected(dev));

    // Re-enrolled through B with the device's token as proof: A's socket closes at once.
    store_b
        .enroll_device(
            &[1; 32],
            machine(12, Some(ReenrollProof::DeviceToken([10; 32]))),
        )
        .await
        .unwrap();
    assert!(
        closed(&mut on_a).await,
        "A's socket with the old token closed"
    );
    assert!(!a.is_connected(dev));

    // A rotation completed through A (the new token's first use): B's socket, opened with the
    // old token, closes.
    let mut old = b.connect(dev, org, [12; 32]).await.unwrap();
    store_a.stage_device_token(dev, &[13; 32]).await.unwrap();
    assert!(
        store_a
            .find_device_credential(&[13; 32])
            .await
            .unwrap()
            .is_some()
    );
    assert!(
        closed(&mut old).await,
        "B's socket with the rotated-out token closed"
    );

    stop.cancel();
    store_b.close().await;
    test.cleanup().await;
}
