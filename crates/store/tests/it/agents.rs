//! Agents in the store: enrollment keys and their limits, device credentials and rotation,
//! heartbeats and sessions, the command lifecycle, metrics rollups, scripts.

use breeze_agent_proto::{
    CommandKind, CommandOutcome, CommandResult, DiskUsageSample, Heartbeat, MetricSample,
    NetworkSample, ProcessSort, UserSession,
};
use breeze_core::{CommandStatus, Device, DeviceStatus, OrgId, OsFamily, SiteId};
use breeze_store::{
    Aggregation, EnrollDevice, INVALID_ENROLLMENT_KEY, INVALID_REENROLL_TOKEN, NewCommand,
    NewContext, NewEnrollmentKey, NewScript, ReenrollProof, Store, StoreError, testing::Ctx,
};
use chrono::Duration;

use crate::audit;

async fn world(s: &Store) -> (OrgId, SiteId, OrgId) {
    let partner = s
        .create_partner("P", "p", audit("partner.create", "partner"))
        .await
        .unwrap();
    let a = s
        .create_organization(
            partner.id,
            "A",
            "a",
            audit("organization.create", "organization"),
        )
        .await
        .unwrap();
    let b = s
        .create_organization(
            partner.id,
            "B",
            "b",
            audit("organization.create", "organization"),
        )
        .await
        .unwrap();
    let site = s
        .org(a.id)
        .tenancy()
        .create_site("HQ", "UTC", audit("site.create", "site"))
        .await
        .unwrap();
    (a.id, site.id, b.id)
}

/// An unlimited enrollment key whose hash is `[1; 32]`, valid for an hour.
async fn open_key(s: &Store, org: OrgId, site: SiteId) {
    s.org(org)
        .agents()
        .create_enrollment_key(
            NewEnrollmentKey {
                site_id: site,
                name: "k".into(),
                key_hash: [1; 32],
                key_prefix: "p".into(),
                max_uses: None,
                expires_at: s.clock().now() + Duration::hours(1),
                created_by: "t".into(),
            },
            audit("enrollment_key.create", "enrollment_key"),
        )
        .await
        .unwrap();
}

/// The world with an open enrollment key and one device enrolled with `token`: its
/// organization, the other one, the device.
async fn one_device(s: &Store, token: u8) -> (OrgId, OrgId, Device) {
    let (org, site, other) = world(s).await;
    open_key(s, org, site).await;
    let dev = s
        .enroll_device(&[1; 32], machine(token, None))
        .await
        .unwrap()
        .device;
    (org, other, dev)
}

fn machine(token: u8, machine_id: Option<&str>) -> EnrollDevice {
    EnrollDevice {
        hostname: "host-1".into(),
        machine_id: machine_id.map(str::to_owned),
        os_family: OsFamily::Linux,
        os_name: "Debian GNU/Linux".into(),
        os_version: "12".into(),
        agent_version: "0.1.0".into(),
        token_hash: [token; 32],
        proof: None,
    }
}

async fn enrollment_keys_count_expire_and_revoke(cx: Ctx) {
    let s = &cx.store;
    let (org, site, _) = world(s).await;
    let o = s.org(org);
    let key = o
        .agents()
        .create_enrollment_key(
            NewEnrollmentKey {
                site_id: site,
                name: "rollout".into(),
                key_hash: [1; 32],
                key_prefix: "brz_abcd".into(),
                max_uses: Some(2),
                expires_at: s.clock().now() + Duration::hours(1),
                created_by: "user:u".into(),
            },
            audit("enrollment_key.create", "enrollment_key"),
        )
        .await
        .unwrap();
    let first = s
        .enroll_device(&[1; 32], machine(10, Some("m-1")))
        .await
        .unwrap();
    let d1 = first.device;
    assert_eq!(first.key_id, key.id);
    assert_eq!(d1.site_id, site);
    assert_eq!(d1.status, DeviceStatus::Online);
    assert_eq!((first.reenrolled, first.suspected_clone_of), (false, None));

    // The same machine id again, with no proof of being that device: a new device, flagged;
    // the first device keeps its token (see `enrollment_never_rebinds_a_device`).
    let again = s
        .enroll_device(&[1; 32], machine(11, Some("m-1")))
        .await
        .unwrap();
    assert_ne!(again.device.id, d1.id);
    assert_eq!(again.suspected_clone_of, Some(d1.id));
    assert_eq!(
        s.find_device_credential(&[10; 32])
            .await
            .unwrap()
            .unwrap()
            .device_id,
        d1.id
    );

    // Two uses spent: the third is refused with the one message every refusal shares.
    let err = s
        .enroll_device(&[1; 32], machine(12, None))
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::Invalid(ref m) if m == INVALID_ENROLLMENT_KEY),
        "{err}"
    );
    assert_eq!(o.agents().get_enrollment_key(key.id).await.unwrap().uses, 2);

    // Unknown, expired and revoked keys read the same.
    let err = s
        .enroll_device(&[9; 32], machine(13, None))
        .await
        .unwrap_err();
    assert!(err.to_string().contains(INVALID_ENROLLMENT_KEY));
    let open = o
        .agents()
        .create_enrollment_key(
            NewEnrollmentKey {
                site_id: site,
                name: "open".into(),
                key_hash: [2; 32],
                key_prefix: "brz_efgh".into(),
                max_uses: None,
                expires_at: s.clock().now() + Duration::minutes(5),
                created_by: "user:u".into(),
            },
            audit("enrollment_key.create", "enrollment_key"),
        )
        .await
        .unwrap();
    s.enroll_device(&[2; 32], machine(14, None)).await.unwrap();
    cx.clock.advance(Duration::minutes(6));
    assert!(s.enroll_device(&[2; 32], machine(15, None)).await.is_err());
    cx.clock.advance(Duration::minutes(-6));
    o.agents()
        .revoke_enrollment_key(open.id, audit("enrollment_key.revoke", "enrollment_key"))
        .await
        .unwrap();
    assert!(s.enroll_device(&[2; 32], machine(16, None)).await.is_err());
}

/// The takeover attack: any enrollment key of the organization (here one of another site)
/// with the victim's machine id. It gets a new device flagged as a possible clone, never the
/// victim's; only a one-time re-enroll token or the device's own token re-enrolls the device.
async fn enrollment_never_rebinds_a_device(cx: Ctx) {
    let s = &cx.store;
    let (org, hq, other) = world(s).await;
    let o = s.org(org);
    let branch = o
        .tenancy()
        .create_site("Branch Office", "UTC", audit("site.create", "site"))
        .await
        .unwrap();
    let key = |hash: u8, site: SiteId, org: OrgId| async move {
        s.org(org)
            .agents()
            .create_enrollment_key(
                NewEnrollmentKey {
                    site_id: site,
                    name: format!("k{hash}"),
                    key_hash: [hash; 32],
                    key_prefix: "p".into(),
                    max_uses: None,
                    expires_at: s.clock().now() + Duration::hours(1),
                    created_by: "t".into(),
                },
                audit("enrollment_key.create", "enrollment_key"),
            )
            .await
            .unwrap()
    };
    key(1, hq, org).await;
    key(2, branch.id, org).await;
    let victim = s
        .enroll_device(&[1; 32], machine(60, Some("victim-machine")))
        .await
        .unwrap()
        .device;
    let mut signals = s.subscribe();

    // The attacker: the Branch Office key and the victim's (world-readable) machine id.
    let attacker = s
        .enroll_device(&[2; 32], machine(61, Some("victim-machine")))
        .await
        .unwrap();
    assert_ne!(attacker.device.id, victim.id);
    assert!(!attacker.reenrolled);
    assert_eq!(attacker.suspected_clone_of, Some(victim.id));
    assert_eq!(attacker.device.suspected_clone_of, Some(victim.id));
    assert_eq!(attacker.device.site_id, branch.id);
    // The victim keeps its token and its identity; the attacker's token is its own device's.
    let cred = |h: u8| async move { s.find_device_credential(&[h; 32]).await.unwrap().unwrap() };
    assert_eq!(cred(60).await.device_id, victim.id);
    assert_eq!(cred(61).await.device_id, attacker.device.id);
    assert!(signals.try_recv().is_err(), "no credential changed");
    // Flagged where people look: the device listing, an alert, the device's events, audit.
    let listed = o.devices().get_device(attacker.device.id).await.unwrap();
    assert_eq!(listed.suspected_clone_of, Some(victim.id));
    let alerts = o
        .alerts()
        .list_alerts(
            &breeze_store::AlertFilter {
                device: Some(attacker.device.id),
                ..Default::default()
            },
            None,
            10,
        )
        .await
        .unwrap()
        .alerts;
    assert_eq!(alerts.len(), 1);
    assert!(
        alerts[0]
            .title
            .starts_with(breeze_store::SUSPECTED_CLONE_RULE),
        "{}",
        alerts[0].title
    );
    let events = o
        .telemetry()
        .device_events(attacker.device.id, 10)
        .await
        .unwrap();
    assert_eq!(events[0].kind, breeze_store::CLONE_EVENT_KIND);
    assert!(events[0].message.contains(&victim.id.to_string()));
    // A cloned VM enrolling a third time is flagged against the original, not the clone.
    let third = s
        .enroll_device(&[2; 32], machine(62, Some("victim-machine")))
        .await
        .unwrap();
    assert_eq!(third.suspected_clone_of, Some(victim.id));
    assert_eq!(
        o.alerts()
            .list_alerts(&breeze_store::AlertFilter::default(), None, 10)
            .await
            .unwrap()
            .alerts
            .len(),
        2
    );

    // A made-up re-enroll token is refused outright.
    let with = |token: u8, proof| EnrollDevice {
        proof: Some(proof),
        ..machine(token, Some("victim-machine"))
    };
    let err = s
        .enroll_device(&[1; 32], with(63, ReenrollProof::ReenrollToken([99; 32])))
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::Invalid(ref m) if m == INVALID_REENROLL_TOKEN),
        "{err}"
    );

    // The administrator's one-time re-enroll token re-enrolls the victim device itself.
    o.agents()
        .issue_reenroll_token(
            victim.id,
            &[70; 32],
            s.clock().now() + Duration::hours(1),
            audit("device.reenroll_token.issue", "device"),
        )
        .await
        .unwrap();
    // Another organization's enrollment key cannot spend it.
    let b_site = s
        .org(other)
        .tenancy()
        .create_site("B HQ", "UTC", audit("site.create", "site"))
        .await
        .unwrap();
    key(3, b_site.id, other).await;
    assert!(
        s.enroll_device(&[3; 32], with(64, ReenrollProof::ReenrollToken([70; 32])))
            .await
            .is_err()
    );
    let back = s
        .enroll_device(&[2; 32], with(65, ReenrollProof::ReenrollToken([70; 32])))
        .await
        .unwrap();
    assert_eq!(back.device.id, victim.id);
    assert!(back.reenrolled);
    assert_eq!(back.suspected_clone_of, None);
    // The device stays in its site; the old token is dead; every instance hears of it.
    assert_eq!(back.device.site_id, hq);
    assert!(s.find_device_credential(&[60; 32]).await.unwrap().is_none());
    assert_eq!(cred(65).await.device_id, victim.id);
    assert_eq!(
        signals.try_recv().unwrap(),
        breeze_store::Signal::DeviceCredentialChanged { device: victim.id }
    );
    // One use only.
    assert!(
        s.enroll_device(&[2; 32], with(66, ReenrollProof::ReenrollToken([70; 32])))
            .await
            .is_err()
    );
    // An expired one is refused too.
    o.agents()
        .issue_reenroll_token(
            victim.id,
            &[71; 32],
            s.clock().now() + Duration::minutes(5),
            audit("device.reenroll_token.issue", "device"),
        )
        .await
        .unwrap();
    cx.clock.advance(Duration::minutes(6));
    assert!(
        s.enroll_device(&[1; 32], with(67, ReenrollProof::ReenrollToken([71; 32])))
            .await
            .is_err()
    );

    // The device's current token re-enrolls it as well (an agent re-enrolling itself)...
    let own = s
        .enroll_device(&[1; 32], with(68, ReenrollProof::DeviceToken([65; 32])))
        .await
        .unwrap();
    assert_eq!((own.device.id, own.reenrolled), (victim.id, true));
    // ...while a token that is not the device's is no proof: a flagged new device.
    let stale = s
        .enroll_device(&[1; 32], with(69, ReenrollProof::DeviceToken([65; 32])))
        .await
        .unwrap();
    assert_eq!(stale.suspected_clone_of, Some(victim.id));
    assert_eq!(cred(68).await.device_id, victim.id);
}

async fn token_rotation_is_two_phase(cx: Ctx) {
    let s = &cx.store;
    let (_, _, dev) = one_device(s, 20).await;
    s.stage_device_token(dev.id, &[21; 32]).await.unwrap();
    // Both work until the new one is used...
    assert!(s.find_device_credential(&[20; 32]).await.unwrap().is_some());
    let promoted = s.find_device_credential(&[21; 32]).await.unwrap().unwrap();
    assert_eq!(promoted.token_hash, vec![21; 32]);
    // ...then only the new one does.
    assert!(s.find_device_credential(&[20; 32]).await.unwrap().is_none());
    assert!(s.find_device_credential(&[21; 32]).await.unwrap().is_some());
}

async fn heartbeats_track_status_and_sessions(cx: Ctx) {
    let s = &cx.store;
    let (org, other, dev) = one_device(s, 30).await;
    let alice = UserSession {
        username: "alice".into(),
        terminal: Some("pts/0".into()),
        host: Some("10.0.0.9".into()),
        login_at: Some(s.clock().now()),
        login_duration_secs: Some(4.5),
        idle_secs: None,
    };
    let hb = |users: Vec<UserSession>| Heartbeat {
        agent_version: "0.2.0".into(),
        uptime_secs: 3600,
        pending_reboot: true,
        logged_in_users: users,
        running_commands: vec![],
        applied_policy: None,
    };
    s.record_heartbeat(dev.id, org, &hb(vec![alice.clone()]))
        .await
        .unwrap();
    s.record_heartbeat(dev.id, org, &hb(vec![alice.clone()]))
        .await
        .unwrap();
    let state = s
        .org(org)
        .agents()
        .device_state(dev.id)
        .await
        .unwrap()
        .unwrap();
    assert!(state.pending_reboot);
    assert_eq!(state.logged_in_users, vec![alice.clone()]);
    let signed_in = s.org(org).agents().signed_in(None, 10).await.unwrap();
    let plan = s.org(org).agents().explain_signed_in().await.unwrap();
    assert!(
        plan.contains("device_state_signed_in"),
        "the fleet-wide listing reads the partial index, not every state row: {plan}"
    );
    let plan = s
        .org(org)
        .agents()
        .explain_user_sessions(s.clock().now() - Duration::days(30))
        .await
        .unwrap();
    assert!(
        plan.contains("device_user_sessions_recent"),
        "the fleet-wide sessions walk their index newest first, not a sort of all: {plan}"
    );
    let plan = s
        .org(org)
        .tenancy()
        .explain_groups_of_device(dev.id)
        .await
        .unwrap();
    assert!(
        plan.contains("device_group_members_device"),
        "a device's groups are found by device, not by reading every membership: {plan}"
    );
    assert_eq!(signed_in.len(), 1);
    assert_eq!(signed_in[0].device_id, dev.id);
    assert_eq!(signed_in[0].logged_in_users, vec![alice.clone()]);
    assert!(
        s.org(other)
            .agents()
            .signed_in(None, 10)
            .await
            .unwrap()
            .is_empty(),
        "another organization sees nobody"
    );
    let since = s.clock().now() - Duration::days(1);
    let sessions = s
        .org(org)
        .agents()
        .user_sessions(None, None, since, 10)
        .await
        .unwrap();
    assert_eq!(
        sessions.len(),
        1,
        "one session, however many heartbeats list it"
    );
    assert!(sessions[0].logout_at.is_none());

    cx.clock.advance(Duration::minutes(10));
    s.record_heartbeat(dev.id, org, &hb(vec![])).await.unwrap();
    let agents = s.org(org).agents();
    assert!(
        agents.signed_in(None, 10).await.unwrap().is_empty(),
        "nobody left"
    );
    let one = agents.signed_in(Some(dev.id), 10).await.unwrap();
    assert_eq!(one.len(), 1, "one device is listed signed in or not");
    assert!(one[0].logged_in_users.is_empty());
    let sessions = s
        .org(org)
        .agents()
        .user_sessions(None, Some("alice"), since, 10)
        .await
        .unwrap();
    assert_eq!(sessions[0].logout_at, Some(s.clock().now()));
    // Another organization sees none of it.
    assert!(
        s.org(other)
            .agents()
            .user_sessions(None, None, since, 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(matches!(
        s.org(other).agents().device_state(dev.id).await,
        Err(StoreError::NotFound(_))
    ));

    // Missed heartbeats take the device offline.
    cx.clock.advance(Duration::minutes(5));
    let stale = s
        .cross_org()
        .mark_stale_devices_offline(Duration::minutes(3))
        .await
        .unwrap();
    assert_eq!(stale, vec![dev.id]);
    assert_eq!(
        s.org(org)
            .devices()
            .get_device(dev.id)
            .await
            .unwrap()
            .status,
        DeviceStatus::Offline
    );
    s.record_heartbeat(dev.id, org, &hb(vec![])).await.unwrap();
    assert_eq!(
        s.org(org)
            .devices()
            .get_device(dev.id)
            .await
            .unwrap()
            .status,
        DeviceStatus::Online
    );
}

async fn commands_move_forward_only(cx: Ctx) {
    let s = &cx.store;
    let (org, other, dev) = one_device(s, 40).await;
    let o = s.org(org);
    let new = || NewCommand {
        device_id: dev.id,
        kind: CommandKind::ListProcesses {
            sort_by: ProcessSort::Cpu,
            limit: 5,
        },
        timeout_secs: 30,
        output_cap_bytes: 1024,
        queue_ttl: Duration::seconds(60),
        script: None,
        created_by: "api_key:k".into(),
    };
    let cmd = o
        .commands()
        .create_command(new(), audit("command.create", "command"))
        .await
        .unwrap();
    assert_eq!(cmd.status, CommandStatus::Pending);
    assert_eq!(cmd.kind, "list_processes");
    assert_eq!(cmd.to_wire().unwrap().kind, new().kind);
    // Another organization can neither see nor queue for the device.
    assert!(s.org(other).commands().get_command(cmd.id).await.is_err());
    assert!(
        s.org(other)
            .commands()
            .create_command(new(), audit("command.create", "command"))
            .await
            .is_err()
    );

    let claimed = s.claim_pending_commands(dev.id).await.unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!(
        s.claim_pending_commands(dev.id).await.unwrap().len(),
        1,
        "handed out again until the agent says it started (it runs an id once)"
    );
    assert!(s.mark_command_running(dev.id, cmd.id).await.unwrap());
    assert!(
        s.claim_pending_commands(dev.id).await.unwrap().is_empty(),
        "not once running"
    );

    let result = |stdout: &str| CommandResult {
        command_id: cmd.id,
        status: CommandOutcome::Completed,
        exit_code: Some(0),
        stdout: stdout.into(),
        stderr: String::new(),
        stdout_truncated: false,
        stderr_truncated: false,
        result: Some(serde_json::json!({ "processes": [] })),
        error: None,
        started_at: s.clock().now(),
        finished_at: s.clock().now(),
    };
    // A result for the command from another device is ignored.
    let stranger = breeze_core::DeviceId::new();
    assert!(
        s.complete_command(stranger, result("x"))
            .await
            .unwrap()
            .is_none()
    );
    let done = s
        .complete_command(dev.id, result("first"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(done.status, CommandStatus::Completed);
    assert!(
        s.complete_command(dev.id, result("second"))
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(
        o.commands()
            .get_command(cmd.id)
            .await
            .unwrap()
            .stdout
            .as_deref(),
        Some("first")
    );

    // A command nobody picks up times out at its deadline, with a reason.
    let late = o
        .commands()
        .create_command(new(), audit("command.create", "command"))
        .await
        .unwrap();
    assert!(s.cross_org().time_out_commands().await.unwrap().is_empty());
    cx.clock.advance(Duration::seconds(91));
    let timed = s.cross_org().time_out_commands().await.unwrap();
    assert_eq!(timed.len(), 1);
    assert_eq!(timed[0].id, late.id);
    assert_eq!(timed[0].status, CommandStatus::TimedOut);
    assert!(timed[0].error.as_deref().unwrap().contains("did not pick"));
    // Output beyond the server's ceiling is cut and flagged.
    let big = o
        .commands()
        .create_command(new(), audit("command.create", "command"))
        .await
        .unwrap();
    let mut r = result(&"é".repeat(breeze_store::MAX_STORED_OUTPUT_BYTES));
    r.command_id = big.id;
    let stored = s.complete_command(dev.id, r).await.unwrap().unwrap();
    assert!(stored.stdout_truncated);
    assert!(stored.stdout.unwrap().len() <= breeze_store::MAX_STORED_OUTPUT_BYTES);
}

/// An agent's report with NUL in its output is stored (U+0000 as U+FFFD) and readable, on
/// both backends: PostgreSQL refused it, and the command waited until it timed out.
async fn a_result_with_nul_output_is_stored(cx: Ctx) {
    let s = &cx.store;
    let (org, _, dev) = one_device(s, 41).await;
    let cmd = s
        .org(org)
        .commands()
        .create_command(
            NewCommand {
                device_id: dev.id,
                kind: CommandKind::ListProcesses {
                    sort_by: ProcessSort::Cpu,
                    limit: 5,
                },
                timeout_secs: 30,
                output_cap_bytes: 1024,
                queue_ttl: Duration::seconds(60),
                script: None,
                created_by: "api_key:k".into(),
            },
            audit("command.create", "command"),
        )
        .await
        .unwrap();
    let result = CommandResult {
        command_id: cmd.id,
        status: CommandOutcome::Failed,
        exit_code: Some(1),
        stdout: "bin\0ary".into(),
        stderr: "\0".into(),
        stdout_truncated: false,
        stderr_truncated: false,
        result: Some(serde_json::json!({ "processes": [{ "name": "a\0b" }], "k\0": 1 })),
        error: Some("err\0or".into()),
        started_at: s.clock().now(),
        finished_at: s.clock().now(),
    };
    let stored = s.complete_command(dev.id, result).await.unwrap().unwrap();
    assert_eq!(stored.status, CommandStatus::Failed);
    let read = s.org(org).commands().get_command(cmd.id).await.unwrap();
    assert_eq!(read.stdout.as_deref(), Some("bin\u{FFFD}ary"));
    assert_eq!(read.stderr.as_deref(), Some("\u{FFFD}"));
    assert_eq!(read.error.as_deref(), Some("err\u{FFFD}or"));
    assert_eq!(
        read.result,
        Some(serde_json::json!({ "processes": [{ "name": "a\u{FFFD}b" }], "k\u{FFFD}": 1 }))
    );
}

async fn metrics_roll_up_and_ignore_resends(cx: Ctx) {
    let s = &cx.store;
    let (org, other, dev) = one_device(s, 50).await;
    let t0 = s.clock().now();
    let sample = |mins: i64, cpu: f64| MetricSample {
        at: t0 + Duration::minutes(mins),
        cpu_percent: cpu,
        ram_percent: 50.0,
        ram_used_bytes: 1 << 30,
        disks: vec![
            DiskUsageSample {
                mount: "/".into(),
                used_percent: 40.0,
            },
            DiskUsageSample {
                mount: "/var".into(),
                used_percent: 80.0,
            },
        ],
        network: vec![NetworkSample {
            interface: "eth0".into(),
            rx_bytes: 100,
            tx_bytes: 10,
        }],
        process_count: 100,
    };
    assert_eq!(
        s.org(org).telemetry().latest_metric(dev.id).await.unwrap(),
        None,
        "no sample yet"
    );
    let batch = vec![sample(0, 10.0), sample(30, 30.0), sample(70, 50.0)];
    assert_eq!(s.insert_metrics(dev.id, org, &batch).await.unwrap(), 3);
    assert_eq!(
        s.insert_metrics(dev.id, org, &batch).await.unwrap(),
        0,
        "re-sent batch"
    );

    let o = s.org(org);
    let until = t0 + Duration::hours(3);
    let raw = o
        .telemetry()
        .query_metrics(&dev, t0, until, Aggregation::Raw)
        .await
        .unwrap();
    assert_eq!(raw.len(), 3);
    assert_eq!(raw[2].disk_max, 80.0, "disk % is the fullest mount");
    assert_eq!(
        o.telemetry().latest_metric(dev.id).await.unwrap().as_ref(),
        Some(&raw[2]),
        "the newest sample"
    );
    assert!(
        s.org(other)
            .telemetry()
            .latest_metric(dev.id)
            .await
            .is_err(),
        "another organization's device"
    );
    let hourly = o
        .telemetry()
        .query_metrics(&dev, t0, until, Aggregation::Hourly)
        .await
        .unwrap();
    assert_eq!(hourly.len(), 2);
    assert_eq!(hourly[0].samples, 2);
    assert_eq!(hourly[0].cpu_avg, 20.0);
    assert_eq!(hourly[0].cpu_max, 30.0);
    assert_eq!(hourly[0].net_rx_bytes, 200);
    let daily = o
        .telemetry()
        .query_metrics(&dev, t0, until, Aggregation::Daily)
        .await
        .unwrap();
    assert_eq!(daily.len(), 1);
    assert_eq!(daily[0].samples, 3);
    assert_eq!(daily[0].cpu_avg, 30.0);
    assert!(
        s.org(other)
            .telemetry()
            .query_metrics(&dev, t0, until, Aggregation::Raw)
            .await
            .unwrap()
            .is_empty(),
        "another organization's device has no points there"
    );

    let plan = o
        .telemetry()
        .explain_metrics_series(dev.id, t0, until)
        .await
        .unwrap();
    match s.backend() {
        breeze_store::Backend::Sqlite => assert!(
            plan.contains("COVERING INDEX device_metrics_series"),
            "a series is read from its index alone, not from the wide rows: {plan}"
        ),
        breeze_store::Backend::Postgres => assert!(
            plan.contains("Index") && plan.contains("device_metrics"),
            "a series is read by index: {plan}"
        ),
    }
    // The summary of a series is counted in the database and only its newest points are read.
    for aggregation in [Aggregation::Raw, Aggregation::Hourly] {
        let all = o
            .telemetry()
            .query_metrics(&dev, t0, until, aggregation)
            .await
            .unwrap();
        let (totals, tail) = o
            .telemetry()
            .query_metrics_tail(&dev, t0, until, aggregation, 2)
            .await
            .unwrap();
        let totals = totals.expect("points in range");
        assert_eq!(tail, all[all.len() - 2..], "the newest two, oldest first");
        assert_eq!(totals.points, all.len() as i64);
        assert_eq!(totals.samples, 3);
        assert_eq!(
            totals.cpu_weighted, 90.0,
            "10 + 30 + 50, weighted by samples"
        );
        assert_eq!(totals.cpu_min, all[0].cpu_avg);
        assert_eq!(totals.cpu_max, 50.0);
        assert_eq!(totals.disk_max, 80.0);
        assert_eq!(totals.net_rx_bytes, 300);
        assert_eq!(totals.net_tx_bytes, 30);
    }
    let (none, tail) = o
        .telemetry()
        .query_metrics_tail(
            &dev,
            until,
            until + Duration::hours(1),
            Aggregation::Raw,
            10,
        )
        .await
        .unwrap();
    assert!(none.is_none() && tail.is_empty(), "no points in range");
    let (foreign, tail) = s
        .org(other)
        .telemetry()
        .query_metrics_tail(&dev, t0, until, Aggregation::Raw, 10)
        .await
        .unwrap();
    assert!(
        foreign.is_none() && tail.is_empty(),
        "another organization's device has no points there"
    );

    // Retention drops raw points first.
    cx.clock.advance(Duration::days(8));
    s.prune_metrics(Default::default()).await.unwrap();
    let since = t0 - Duration::days(1);
    let far = t0 + Duration::days(30);
    assert!(
        o.telemetry()
            .query_metrics(&dev, since, far, Aggregation::Raw)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        o.telemetry()
            .query_metrics(&dev, since, far, Aggregation::Hourly)
            .await
            .unwrap()
            .len(),
        2
    );
}

async fn scripts_are_validated_and_confined(cx: Ctx) {
    let s = &cx.store;
    let (org, _, other) = world(s).await;
    let new = |name: &str, language: &str, body: &str| NewScript {
        name: name.into(),
        description: "Clears the temp dir".into(),
        language: language.into(),
        category: "maintenance".into(),
        body: body.into(),
        parameters: vec![],
        created_by: "user:u".into(),
    };
    let o = s.org(org);
    let script = o
        .scripts()
        .create_script(
            new("Clean temp", "bash", "rm -rf /tmp/x"),
            audit("script.create", "script"),
        )
        .await
        .unwrap();
    assert_eq!(
        o.scripts().find_script("Clean temp").await.unwrap().id,
        script.id
    );
    assert_eq!(
        o.scripts()
            .find_script(&script.id.to_string())
            .await
            .unwrap()
            .name,
        "Clean temp"
    );
    let dup = o
        .scripts()
        .create_script(
            new("Clean temp", "sh", "true"),
            audit("script.create", "script"),
        )
        .await
        .unwrap_err();
    assert!(dup.to_string().contains("already exists"), "{dup}");
    let bad = o
        .scripts()
        .create_script(
            new("x", "perl", "print 1"),
            audit("script.create", "script"),
        )
        .await
        .unwrap_err();
    assert!(
        bad.to_string().contains("unknown script language \"perl\""),
        "{bad}"
    );
    assert!(
        s.org(other)
            .scripts()
            .find_script("Clean temp")
            .await
            .is_err()
    );
    assert!(s.org(other).scripts().get_script(script.id).await.is_err());
    assert_eq!(
        o.scripts()
            .list_scripts(Some("maintenance"), Some("TEMP"))
            .await
            .unwrap()
            .len(),
        1
    );
    // Edited in place: validated like a new one, a name taken by another refused, another
    // organization's id not found.
    let other_script = o
        .scripts()
        .create_script(new("Other", "sh", "true"), audit("script.create", "script"))
        .await
        .unwrap();
    let edited = o
        .scripts()
        .update_script(
            script.id,
            new("Clean temp dir", "sh", "rm -rf /tmp/y"),
            audit("script.update", "script"),
        )
        .await
        .unwrap();
    assert_eq!(
        (
            edited.name.as_str(),
            edited.language.as_str(),
            edited.body.as_str()
        ),
        ("Clean temp dir", "sh", "rm -rf /tmp/y")
    );
    assert!(edited.updated_at >= script.updated_at);
    let taken = o
        .scripts()
        .update_script(
            script.id,
            new("Other", "sh", "true"),
            audit("script.update", "script"),
        )
        .await
        .unwrap_err();
    assert!(taken.to_string().contains("already exists"), "{taken}");
    let bad = o
        .scripts()
        .update_script(
            script.id,
            new("x", "perl", "1"),
            audit("script.update", "script"),
        )
        .await
        .unwrap_err();
    assert!(bad.to_string().contains("perl"), "{bad}");
    assert!(matches!(
        s.org(other)
            .scripts()
            .update_script(
                script.id,
                new("Mine", "sh", "true"),
                audit("script.update", "script")
            )
            .await,
        Err(StoreError::NotFound(_))
    ));
    assert_eq!(
        o.scripts().get_script(script.id).await.unwrap().name,
        "Clean temp dir"
    );
    o.scripts()
        .delete_script(other_script.id, audit("script.delete", "script"))
        .await
        .unwrap();
    o.scripts()
        .delete_script(script.id, audit("script.delete", "script"))
        .await
        .unwrap();
    assert!(
        o.scripts()
            .list_scripts(None, None)
            .await
            .unwrap()
            .is_empty()
    );
}

/// An organization's protected-path additions: validated, replaced as a whole with an audit
/// record of before and after, confined to the organization, and copied onto each file or
/// disk command queued afterwards (and only onto those), so the agent gets them with it.
async fn protected_path_additions_travel_with_file_commands(cx: Ctx) {
    let s = &cx.store;
    let (org, other, dev) = one_device(s, 41).await;
    let o = s.org(org);
    assert!(o.commands().protected_paths().await.unwrap().is_empty());
    for bad in [
        vec!["relative".to_owned()],
        vec!["/a/../b".to_owned()],
        vec!["/".to_owned()],
    ] {
        let e = o
            .commands()
            .set_protected_paths(&bad, audit("org.protected_paths.set", "organization"))
            .await
            .unwrap_err();
        assert!(matches!(e, StoreError::Invalid(_)), "{bad:?}: {e}");
    }
    let set = o
        .commands()
        .set_protected_paths(
            &[
                "/srv/vault".into(),
                " /srv/vault ".into(),
                "~/.secrets".into(),
            ],
            audit("org.protected_paths.set", "organization"),
        )
        .await
        .unwrap();
    assert_eq!(set, vec!["/srv/vault".to_owned(), "~/.secrets".to_owned()]);
    assert_eq!(o.commands().protected_paths().await.unwrap(), set);
    assert!(
        s.org(other)
            .commands()
            .protected_paths()
            .await
            .unwrap()
            .is_empty()
    );
    let page = o
        .audit()
        .query_audit(
            &breeze_store::AuditFilter {
                action: Some("org.protected_paths.set".into()),
                ..Default::default()
            },
            None,
            10,
        )
        .await
        .unwrap();
    assert_eq!(
        page.records.len(),
        1,
        "only the change that happened is audited"
    );
    assert_eq!(
        page.records[0].event.details["after"],
        serde_json::json!(["/srv/vault", "~/.secrets"])
    );
    assert_eq!(
        page.records[0].event.details["before"],
        serde_json::json!([])
    );

    let queue = |kind: CommandKind| NewCommand {
        device_id: dev.id,
        kind,
        timeout_secs: 30,
        output_cap_bytes: 1024,
        queue_ttl: Duration::seconds(60),
        script: None,
        created_by: "t".into(),
    };
    let read = o
        .commands()
        .create_command(
            queue(CommandKind::FileRead {
                path: "/srv/x".into(),
                max_bytes: 10,
            }),
            audit("command.create", "command"),
        )
        .await
        .unwrap();
    assert_eq!(read.to_wire().unwrap().protected_paths, set);
    let ps = o
        .commands()
        .create_command(
            queue(CommandKind::ListProcesses {
                sort_by: ProcessSort::Cpu,
                limit: 1,
            }),
            audit("command.create", "command"),
        )
        .await
        .unwrap();
    assert!(ps.to_wire().unwrap().protected_paths.is_empty());
    // A command keeps the list of its moment; clearing the list does not touch the built-ins
    // (they are not data) and applies to later commands.
    o.commands()
        .set_protected_paths(&[], audit("org.protected_paths.set", "organization"))
        .await
        .unwrap();
    assert_eq!(
        o.commands()
            .get_command(read.id)
            .await
            .unwrap()
            .protected_paths,
        set
    );
    let later = o
        .commands()
        .create_command(
            queue(CommandKind::FileList {
                path: "/srv".into(),
            }),
            audit("command.create", "command"),
        )
        .await
        .unwrap();
    assert!(later.to_wire().unwrap().protected_paths.is_empty());
}

/// A device at a glance in one read: nothing but the row before its agent reports, then its
/// site, latest heartbeat, active context and newest sample; another organization's device
/// is not found.
async fn overview_reads_the_device_at_a_glance(cx: Ctx) {
    let s = &cx.store;
    let (org, other, dev) = one_device(s, 60).await;
    let o = s.org(org);
    let bare = o.devices().overview(dev.id).await.unwrap();
    assert_eq!(bare.device, o.devices().get_device(dev.id).await.unwrap());
    assert_eq!(bare.site_name.as_deref(), Some("HQ"));
    assert_eq!(
        (bare.state, bare.active_context, bare.latest_metric),
        (None, 0, None)
    );

    let hb = Heartbeat {
        agent_version: "0.2.0".into(),
        uptime_secs: 7200,
        pending_reboot: true,
        logged_in_users: vec![],
        running_commands: vec![],
        applied_policy: None,
    };
    s.record_heartbeat(dev.id, org, &hb).await.unwrap();
    let t0 = s.clock().now();
    let sample = |mins: i64, cpu: f64| MetricSample {
        at: t0 + Duration::minutes(mins),
        cpu_percent: cpu,
        ram_percent: 50.0,
        ram_used_bytes: 1 << 30,
        disks: vec![],
        network: vec![],
        process_count: 120,
    };
    let samples = [sample(-2, 10.0), sample(-1, 20.0)];
    s.insert_metrics(dev.id, org, &samples).await.unwrap();
    let ctx = |summary: &str, expires_at| NewContext {
        device_id: dev.id,
        context_type: "issue".into(),
        summary: summary.into(),
        details: None,
        created_by: "api_key:k".into(),
        expires_at,
    };
    let context = o.context();
    let mut added = Vec::new();
    for entry in [
        ctx("open", None),
        ctx("expired", Some(t0 + Duration::seconds(1))),
        ctx("resolved", None),
    ] {
        let create = audit("device_context.create", "device_context");
        added.push(context.add_context(entry, create).await.unwrap());
    }
    context
        .resolve_context(
            added[2].id,
            audit("device_context.resolve", "device_context"),
        )
        .await
        .unwrap();
    cx.clock.advance(Duration::seconds(2));

    let seen = o.devices().overview(dev.id).await.unwrap();
    assert_eq!(seen.state, o.agents().device_state(dev.id).await.unwrap());
    assert!(seen.state.as_ref().is_some_and(|st| st.pending_reboot));
    assert_eq!(
        seen.active_context, 1,
        "resolved and expired entries are not active"
    );
    assert_eq!(
        seen.latest_metric,
        o.telemetry().latest_metric(dev.id).await.unwrap(),
        "the newest sample, as latest_metric reads it"
    );
    assert_eq!(seen.latest_metric.map(|m| m.cpu_avg), Some(20.0));
    let plan = o.devices().explain_overview(dev.id).await.unwrap();
    if s.backend() == breeze_store::Backend::Postgres {
        // Run once for the bound device (an InitPlan), not per joined row (a SubPlan), whose
        // place in the join condition had PostgreSQL hash every sample of the device.
        assert!(
            plan.contains("InitPlan")
                && !plan
                    .lines()
                    .any(|l| l.contains("SubPlan") && l.contains("m.at")),
            "the newest sample's time is looked up once: {plan}"
        );
    }
    assert!(
        !plan.contains("SCAN m") && !plan.contains("Seq Scan on device_metrics"),
        "the newest sample is read by key: {plan}"
    );
    assert!(matches!(
        s.org(other).devices().overview(dev.id).await,
        Err(StoreError::NotFound(_))
    ));
}

breeze_store::on_both_backends!(
    protected_path_additions_travel_with_file_commands,
    overview_reads_the_device_at_a_glance,
    enrollment_keys_count_expire_and_revoke,
    token_rotation_is_two_phase,
    enrollment_never_rebinds_a_device,
    heartbeats_track_status_and_sessions,
    commands_move_forward_only,
    a_result_with_nul_output_is_stored,
    metrics_roll_up_and_ignore_resends,
    scripts_are_validated_and_confined,
);
