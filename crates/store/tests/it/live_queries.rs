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
    assert_eq!(oa.live_queries().list_queries(10).await.unwrap().len(), 1);

    // Past the retention the query is gone, and the purge deletes it with its answers.
    cx.clock.advance(Duration::hours(25));
    assert!(matches!(
        oa.live_queries().get_query(q.id).await,
        Err(StoreError::NotFound(_))
    ));
    assert!(oa.live_queries().list_queries(10).await.unwrap().is_empty());
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
    assert!(ob.live_queries().list_queries(10).await.unwrap().is_empty());
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

breeze_store::on_both_backends!(
    answers_are_kept_paged_once_and_expire,
    another_organization_sees_none_of_it
);
