//! Live queries and their answers: kept for the retention, paged in device order, a device
//! answering once, and confined to the organization (another's query is not found, by id,
//! listing, answers or recording).

use breeze_core::DeviceStatus;
use breeze_store::{NewLiveAnswer, NewLiveQuery, StoreError, testing::Ctx};
use chrono::Duration;
use serde_json::json;

use crate::{audit, tenancy::new_device, two_orgs};

fn query(targeted: i64) -> NewLiveQuery {
    NewLiveQuery {
        question: json!({ "question": "processes", "name": "sshd" }),
        target: json!({ "organization": true }),
        created_by: "api_key:k".into(),
        retention: Duration::hours(24),
        devices_targeted: targeted,
        devices_online: targeted,
        run_for: Duration::seconds(60),
    }
}

fn answer(device: breeze_core::DeviceId, rows: usize) -> NewLiveAnswer {
    NewLiveAnswer {
        device_id: device,
        status: "answered".into(),
        rows: (0..rows).map(|i| json!({ "pid": i })).collect(),
        cap: None,
        error: None,
    }
}

async fn answers_are_kept_paged_once_and_expire(cx: Ctx) {
    let s = &cx.store;
    let (a, _) = two_orgs(s).await;
    let oa = s.org(a);
    let site = oa
        .tenancy()
        .create_site("HQ", "UTC", audit("site.create", "site"))
        .await
        .unwrap();
    let mut devices = Vec::new();
    for i in 0..3 {
        let d = oa
            .devices()
            .create_device(
                new_device(site.id, &format!("web-{i}"), DeviceStatus::Online),
                audit("device.create", "device"),
            )
            .await
            .unwrap();
        devices.push(d.id);
    }
    devices.sort();
    let q = oa
        .live_queries()
        .create_query(query(3), audit("live_query.run", "live_query"))
        .await
        .unwrap();
    assert_eq!(q.question["question"], "processes");
    assert!(
        oa.live_queries()
            .record_answer(q.id, answer(devices[0], 2))
            .await
            .unwrap()
    );
    // A second answer from the same device changes nothing.
    assert!(
        !oa.live_queries()
            .record_answer(q.id, answer(devices[0], 9))
            .await
            .unwrap()
    );
    let mut failed = answer(devices[2], 0);
    failed.status = "timed_out".into();
    failed.error = Some("no answer within 10 s".into());
    assert!(oa.live_queries().record_answer(q.id, failed).await.unwrap());
    let mut bad = answer(devices[1], 0);
    bad.status = "maybe".into();
    assert!(matches!(
        oa.live_queries().record_answer(q.id, bad).await,
        Err(StoreError::Invalid(_))
    ));

    let page = oa.live_queries().answers(q.id, None, 1).await.unwrap();
    assert_eq!(page.len(), 1);
    assert_eq!(page[0].device_id, devices[0]);
    assert_eq!(page[0].row_count, 2);
    assert_eq!(page[0].rows[1]["pid"], 1);
    let rest = oa
        .live_queries()
        .answers(q.id, Some(page[0].device_id), 10)
        .await
        .unwrap();
    assert_eq!(rest.len(), 1);
    assert_eq!(rest[0].status, "timed_out");
    assert_eq!(
        oa.live_queries()
            .list_queries(None, 10)
            .await
            .unwrap()
            .len(),
        1
    );

    // Past the retention the query is gone, and the purge deletes it with its answers.
    cx.clock.advance(Duration::hours(25));
    assert!(matches!(
        oa.live_queries().get_query(q.id).await,
        Err(StoreError::NotFound(_))
    ));
    assert!(
        oa.live_queries()
            .list_queries(None, 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(s.purge_expired_live_queries().await.unwrap(), 1);
}

async fn another_organization_sees_none_of_it(cx: Ctx) {
    let s = &cx.store;
    let (a, b) = two_orgs(s).await;
    let (oa, ob) = (s.org(a), s.org(b));
    let site_a = oa
        .tenancy()
        .create_site("HQ", "UTC", audit("site.create", "site"))
        .await
        .unwrap();
    let site_b = ob
        .tenancy()
        .create_site("HQ", "UTC", audit("site.create", "site"))
        .await
        .unwrap();
    let dev_a = oa
        .devices()
        .create_device(
            new_device(site_a.id, "a-01", DeviceStatus::Online),
            audit("device.create", "device"),
        )
        .await
        .unwrap();
    let dev_b = ob
        .devices()
        .create_device(
            new_device(site_b.id, "b-01", DeviceStatus::Online),
            audit("device.create", "device"),
        )
        .await
        .unwrap();
    let q = oa
        .live_queries()
        .create_query(query(1), audit("live_query.run", "live_query"))
        .await
        .unwrap();
    oa.live_queries()
        .record_answer(q.id, answer(dev_a.id, 3))
        .await
        .unwrap();
    let not_found = |r: Result<_, StoreError>| matches!(r, Err(StoreError::NotFound(_)));
    assert!(not_found(
        ob.live_queries().get_query(q.id).await.map(|_| ())
    ));
    assert!(not_found(
        ob.live_queries().answers(q.id, None, 10).await.map(|_| ())
    ));
    assert!(not_found(
        ob.live_queries()
            .record_answer(q.id, answer(dev_b.id, 1))
            .await
            .map(|_| ())
    ));
    assert!(
        ob.live_queries()
            .list_queries(None, 10)
            .await
            .unwrap()
            .is_empty()
    );
    // A's query cannot take B's device's answer either.
    assert!(not_found(
        oa.live_queries()
            .record_answer(q.id, answer(dev_b.id, 1))
            .await
            .map(|_| ())
    ));
    assert_eq!(
        oa.live_queries()
            .answers(q.id, None, 10)
            .await
            .unwrap()
            .len(),
        1
    );
}

/// A run's batch: answers stored together (a repeat and another organization's device
/// skipped), counted per status, the query finished once with its cap, listings paged by id.
async fn runs_are_batched_counted_finished_and_paged(cx: Ctx) {
    let s = &cx.store;
    let (a, b) = two_orgs(s).await;
    let (oa, ob) = (s.org(a), s.org(b));
    let site = oa
        .tenancy()
        .create_site("HQ", "UTC", audit("site.create", "site"))
        .await
        .unwrap();
    let site_b = ob
        .tenancy()
        .create_site("HQ", "UTC", audit("site.create", "site"))
        .await
        .unwrap();
    let dev_b = ob
        .devices()
        .create_device(
            new_device(site_b.id, "b-01", DeviceStatus::Online),
            audit("device.create", "device"),
        )
        .await
        .unwrap();
    let mut devices = Vec::new();
    for i in 0..3 {
        let d = oa
            .devices()
            .create_device(
                new_device(site.id, &format!("web-{i}"), DeviceStatus::Online),
                audit("device.create", "device"),
            )
            .await
            .unwrap();
        devices.push(d.id);
    }
    let q = oa
        .live_queries()
        .create_query(query(3), audit("live_query.run", "live_query"))
        .await
        .unwrap();
    assert_eq!(q.status(breeze_core::Clock::now(&cx.clock)), "running");
    let mut offline = answer(devices[2], 0);
    offline.status = "offline".into();
    let stored = oa
        .live_queries()
        .record_answers(
            q.id,
            vec![
                answer(devices[0], 3),
                answer(devices[0], 5),
                answer(dev_b.id, 1),
                offline,
            ],
        )
        .await
        .unwrap();
    assert_eq!(stored, 2, "the repeat and B's device are skipped");
    let counts = oa.live_queries().answer_counts(&[q.id]).await.unwrap();
    let c = counts[&q.id];
    assert_eq!((c.answered, c.offline, c.rows, c.total()), (1, 1, 3, 2));
    assert!(
        ob.live_queries()
            .answer_counts(&[q.id])
            .await
            .unwrap()
            .is_empty(),
        "B counts none of A's answers"
    );
    let mut bad = answer(devices[1], 0);
    bad.status = "maybe".into();
    assert!(matches!(
        oa.live_queries().record_answers(q.id, vec![bad]).await,
        Err(StoreError::Invalid(_))
    ));
    assert!(matches!(
        ob.live_queries()
            .record_answers(q.id, vec![answer(dev_b.id, 1)])
            .await,
        Err(StoreError::NotFound(_))
    ));
    assert!(!ob.live_queries().finish_query(q.id, None).await.unwrap());
    assert!(
        oa.live_queries()
            .finish_query(q.id, Some("query_rows"))
            .await
            .unwrap()
    );
    assert!(!oa.live_queries().finish_query(q.id, None).await.unwrap());
    let q = oa.live_queries().get_query(q.id).await.unwrap();
    assert_eq!(q.status(breeze_core::Clock::now(&cx.clock)), "finished");
    assert_eq!(q.query_cap.as_deref(), Some("query_rows"));

    // A run never finished is interrupted once well past its deadline.
    let q2 = oa
        .live_queries()
        .create_query(query(1), audit("live_query.run", "live_query"))
        .await
        .unwrap();
    cx.clock.advance(Duration::minutes(5));
    assert_eq!(q2.status(breeze_core::Clock::now(&cx.clock)), "interrupted");
    let first = oa.live_queries().list_queries(None, 1).await.unwrap();
    assert_eq!(first[0].id, q2.id, "newest first");
    let next = oa
        .live_queries()
        .list_queries(Some(first[0].id), 10)
        .await
        .unwrap();
    assert_eq!(next.len(), 1);
    assert_eq!(next[0].id, q.id);
}

/// Commands queued as one batch (one audit record), read back once final, cancelled while
/// open; another organization's devices cannot be in A's batch.
async fn command_batches(cx: Ctx) {
    use breeze_agent_proto::{CommandKind, livequery::Question};
    let s = &cx.store;
    let (a, b) = two_orgs(s).await;
    let (oa, ob) = (s.org(a), s.org(b));
    let site = oa
        .tenancy()
        .create_site("HQ", "UTC", audit("site.create", "site"))
        .await
        .unwrap();
    let site_b = ob
        .tenancy()
        .create_site("HQ", "UTC", audit("site.create", "site"))
        .await
        .unwrap();
    let dev_b = ob
        .devices()
        .create_device(
            new_device(site_b.id, "b-01", DeviceStatus::Online),
            audit("device.create", "device"),
        )
        .await
        .unwrap();
    let mut devices = Vec::new();
    for i in 0..3 {
        let d = oa
            .devices()
            .create_device(
                new_device(site.id, &format!("web-{i}"), DeviceStatus::Online),
                audit("device.create", "device"),
            )
            .await
            .unwrap();
        devices.push(d.id);
    }
    let new = |d| breeze_store::NewCommand {
        device_id: d,
        kind: CommandKind::LiveQuery {
            question: Question::Sessions,
            max_rows: 0,
            max_bytes: 0,
        },
        timeout_secs: 5,
        output_cap_bytes: 1024,
        queue_ttl: Duration::seconds(10),
        script: None,
        created_by: "test".into(),
    };
    let cmds = oa
        .commands()
        .create_commands(
            devices.iter().map(|d| new(*d)).collect(),
            audit("live_query.send", "device_command"),
        )
        .await
        .unwrap();
    assert_eq!(cmds.len(), 3);
    assert!(cmds.iter().zip(&devices).all(|(c, d)| c.device_id == *d));
    let ids: Vec<_> = cmds.iter().map(|c| c.id).collect();
    assert_eq!(s.mark_commands_sent(&ids).await.unwrap().len(), 3);
    assert!(
        s.mark_commands_sent(&ids).await.unwrap().is_empty(),
        "sent once"
    );
    assert!(
        oa.commands()
            .finished_commands(&ids)
            .await
            .unwrap()
            .is_empty()
    );
    let cancelled = oa
        .commands()
        .cancel_commands(&ids[..2], "enough")
        .await
        .unwrap();
    assert_eq!(cancelled.len(), 2);
    assert!(
        ob.commands()
            .cancel_commands(&ids, "not yours")
            .await
            .unwrap()
            .is_empty(),
        "B cancels none of A's"
    );
    let done = oa.commands().finished_commands(&ids).await.unwrap();
    assert_eq!(done.len(), 2);
    assert!(
        ob.commands()
            .finished_commands(&ids)
            .await
            .unwrap()
            .is_empty()
    );
    // A's batch naming B's device is refused whole.
    assert!(
        oa.commands()
            .create_commands(
                vec![new(devices[0]), new(dev_b.id)],
                audit("live_query.send", "device_command"),
            )
            .await
            .is_err()
    );
}

breeze_store::on_both_backends!(
    answers_are_kept_paged_once_and_expire,
    another_organization_sees_none_of_it,
    runs_are_batched_counted_finished_and_paged,
    command_batches
);
