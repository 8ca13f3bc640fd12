//! The cluster bus on PostgreSQL: a second store on the same database (another `breeze serve`
//! instance) hears the first one's changes and applies them to its read models at once,
//! instead of serving them stale for their age limits.

use std::{sync::Arc, time::Duration};

use breeze_core::{DeviceStatus, SystemClock, UserId};
use breeze_store::{
    Backend, Signal, Store,
    testing::{TestStore, new_device},
};
use tokio::sync::broadcast;

use crate::{audit, two_orgs};

const PATIENCE: Duration = Duration::from_secs(20);

async fn heard(signals: &mut broadcast::Receiver<Signal>, expected: &Signal) {
    loop {
        let signal = tokio::time::timeout(PATIENCE, signals.recv())
            .await
            .expect("the other store hears the change")
            .expect("the bus is open");
        if &signal == expected {
            return;
        }
    }
}

#[tokio::test]
async fn another_instances_changes_reach_the_read_models() {
    let test = TestStore::new(Backend::Postgres, Arc::new(SystemClock)).await;
    let a: &Store = &test.store;
    let b = a.reopen().await.unwrap();
    b.spawn_bus_listener();
    b.bus_listening().await;
    let mut signals = b.subscribe();

    let (org, other_org) = two_orgs(a).await;
    let site = a
        .org(org)
        .tenancy()
        .create_site("HQ", "UTC", audit("site.create", "site"))
        .await
        .unwrap()
        .id;
    a.org(org)
        .devices()
        .create_device(
            new_device(site, "web-01", DeviceStatus::Online),
            audit("device.create", "device"),
        )
        .await
        .unwrap();
    heard(&mut signals, &Signal::DevicesChanged { org }).await;
    let total = |s: Store| async move {
        s.org(org)
            .devices()
            .list_devices(&Default::default(), 100, 0)
            .await
            .unwrap()
            .1
    };
    // B's snapshot is now loaded and fresh for the directory's max age (5 s) ...
    assert_eq!(total(b.clone()).await, 1);

    // ... yet A's next device shows in B's listing as soon as the signal is in.
    a.org(org)
        .devices()
        .create_device(
            new_device(site, "web-02", DeviceStatus::Online),
            audit("device.create", "device"),
        )
        .await
        .unwrap();
    heard(&mut signals, &Signal::DevicesChanged { org }).await;
    assert_eq!(total(b.clone()).await, 2);
    // The other organization's listing is untouched by either.
    assert_eq!(
        b.org(other_org)
            .devices()
            .list_devices(&Default::default(), 100, 0)
            .await
            .unwrap()
            .1,
        0
    );

    // A change to what keys authenticate as moves B's credentials generation, so B's key
    // cache reads again instead of serving for its ttl.
    let before = b.credentials_generation();
    a.sign_out_everywhere(UserId(uuid::Uuid::now_v7()), audit("user.sign_out", "user"))
        .await
        .unwrap();
    heard(&mut signals, &Signal::CredentialsChanged).await;
    assert!(b.credentials_generation() > before);

    b.close().await;
    test.cleanup().await;
}

#[tokio::test]
async fn a_store_does_not_hear_itself_and_sqlite_sends_nothing() {
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let test = TestStore::new(backend, Arc::new(SystemClock)).await;
        let s = &test.store;
        s.spawn_bus_listener();
        s.bus_listening().await;
        let mut signals = s.subscribe();
        two_orgs(s).await;
        s.sign_out_everywhere(UserId(uuid::Uuid::now_v7()), audit("user.sign_out", "user"))
            .await
            .unwrap();
        // Its own signals were applied when made; hearing them again would double the work.
        let echoed = tokio::time::timeout(Duration::from_millis(500), signals.recv()).await;
        assert!(echoed.is_err(), "{backend:?}: heard {echoed:?}");
        test.cleanup().await;
    }
}

#[tokio::test]
async fn a_periodic_job_runs_on_one_server_per_period() {
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let test = TestStore::new(backend, Arc::new(SystemClock)).await;
        let a = test.store.clone();
        let b = a.reopen().await.unwrap();
        let period = chrono::Duration::hours(1);
        // Both ask at once: one of them runs it.
        let (x, y) = tokio::join!(
            a.claim_scheduled_run("gateway.sweep", period),
            b.claim_scheduled_run("gateway.sweep", period)
        );
        assert!(x.unwrap() ^ y.unwrap(), "{backend:?}");
        // Within the period nobody does; another job is its own.
        assert!(
            !a.claim_scheduled_run("gateway.sweep", period)
                .await
                .unwrap()
        );
        assert!(
            !b.claim_scheduled_run("gateway.sweep", period)
                .await
                .unwrap()
        );
        assert!(
            b.claim_scheduled_run("gateway.prune", period)
                .await
                .unwrap()
        );
        b.close().await;
        test.cleanup().await;
    }
}

#[tokio::test]
async fn a_held_lease_stays_with_its_holder_until_it_lapses() {
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let at = chrono::DateTime::parse_from_rfc3339("2026-11-30T12:00:00Z")
            .unwrap()
            .to_utc();
        let clock = breeze_core::ManualClock::new(at);
        let test = TestStore::new(backend, Arc::new(clock.clone())).await;
        let a = test.store.clone();
        let b = a.reopen().await.unwrap();
        let ttl = chrono::Duration::seconds(90);
        // Both ask at once: one holds it.
        let (x, y) = tokio::join!(
            a.hold_lease("alerts.tick", "a", ttl),
            b.hold_lease("alerts.tick", "b", ttl)
        );
        let (x, y) = (x.unwrap(), y.unwrap());
        assert!(x ^ y, "{backend:?}: {x} {y}");
        let (holder, holder_name, other, other_name) = if x {
            (&a, "a", &b, "b")
        } else {
            (&b, "b", &a, "a")
        };
        // Renewed each time its holder asks, refused to the other meanwhile — even long
        // after the first claim, as long as the renewals keep coming.
        for _ in 0..3 {
            clock.advance(chrono::Duration::seconds(60));
            assert!(
                holder
                    .hold_lease("alerts.tick", holder_name, ttl)
                    .await
                    .unwrap()
            );
            assert!(
                !other
                    .hold_lease("alerts.tick", other_name, ttl)
                    .await
                    .unwrap()
            );
        }
        // Another lease is its own.
        assert!(
            other
                .hold_lease("other.job", other_name, ttl)
                .await
                .unwrap()
        );
        // The holder stops renewing: once the time to live passed, the other takes over, and
        // the old holder is refused when it comes back.
        clock.advance(chrono::Duration::seconds(89));
        assert!(
            !other
                .hold_lease("alerts.tick", other_name, ttl)
                .await
                .unwrap()
        );
        clock.advance(chrono::Duration::seconds(1));
        assert!(
            other
                .hold_lease("alerts.tick", other_name, ttl)
                .await
                .unwrap()
        );
        assert!(
            !holder
                .hold_lease("alerts.tick", holder_name, ttl)
                .await
                .unwrap()
        );
        // Released by its holder (a clean shutdown): free at once. Released by another: kept.
        assert!(
            !holder
                .release_lease("alerts.tick", holder_name)
                .await
                .unwrap()
        );
        assert!(
            other
                .release_lease("alerts.tick", other_name)
                .await
                .unwrap()
        );
        assert!(
            holder
                .hold_lease("alerts.tick", holder_name, ttl)
                .await
                .unwrap()
        );
        b.close().await;
        test.cleanup().await;
    }
}
