//! `cargo xtask bench row-security [--calls N] [--devices N]`: what PostgreSQL's row-level
//! security costs an organization's statement, in this process on a fresh schema of the test
//! PostgreSQL (`breeze_store::testing`), connected as a role the `org_wall` policies hold.
//!
//! One point read (`SELECT COUNT(*) FROM devices WHERE id = $1`) is timed the two ways a
//! statement reaches PostgreSQL: on the system pool (one round trip; the policy is evaluated,
//! its scope `system`) and on the tenant pool as an `OrgStore` statement (the organization's
//! scope set first: one more round trip, and the policy compares the row's organization).
//! Each at 1 and at 16 concurrent callers; the store's real `OrgStore::get_device` is timed
//! beside them. The build profile is printed: debug numbers are smoke numbers.

use std::{sync::Arc, time::Instant};

use breeze_core::{DeviceStatus, ManualClock, OrgId, OsFamily};
use breeze_store::{Backend, NewDevice, Store, testing::TestStore};

const POINT_READ: &str = "SELECT COUNT(*) FROM devices WHERE id = $1";

pub(crate) fn run(args: &[&str]) -> anyhow::Result<()> {
    let f = super::flags(args, &["--calls", "--devices"])?;
    let num = |name: &str, default: u64| super::number(&f, name, default);
    let calls = num("--calls", 5_000)? as usize;
    let devices = num("--devices", 1_000)? as usize;
    report!(
        "bench row-security: {devices} devices, {calls} calls per case ({} build)",
        if cfg!(debug_assertions) {
            "DEBUG"
        } else {
            "release"
        }
    );
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?
        .block_on(bench(calls, devices))
}

async fn bench(calls: usize, devices: usize) -> anyhow::Result<()> {
    let clock = ManualClock::new(super::sim::now());
    let test = TestStore::new(Backend::Postgres, Arc::new(clock)).await;
    let store = test.store.clone();
    report!(
        "row security for the bench's role: {:?}",
        store.row_security().await?
    );
    let partner = store
        .create_partner("P", "p", super::audit("partner"))
        .await?;
    let org = store
        .create_organization(partner.id, "A", "a", super::audit("org"))
        .await?
        .id;
    let o = store.org(org);
    let site = o
        .tenancy()
        .create_site("HQ", "UTC", super::audit("site"))
        .await?;
    let mut ids = Vec::with_capacity(devices);
    for i in 0..devices {
        let dev = o
            .devices()
            .create_device(
                NewDevice {
                    site_id: site.id,
                    hostname: format!("host-{i:05}"),
                    os_family: OsFamily::Linux,
                    os_name: "Debian GNU/Linux".into(),
                    os_version: "12".into(),
                    status: DeviceStatus::Online,
                    agent_version: None,
                    last_seen_at: None,
                    tags: vec![],
                },
                super::audit("device"),
            )
            .await?;
        ids.push(dev.id);
    }
    let ids = Arc::new(ids);
    report!(
        "{:<44} {:>10} {:>12} {:>12}",
        "case",
        "callers",
        "calls/s",
        "µs per call"
    );
    for callers in [1usize, 16] {
        let system = time(&store, &ids, calls, callers, None).await?;
        let tenant = time(&store, &ids, calls, callers, Some(org)).await?;
        let real = time_get_device(&store, org, &ids, calls, callers).await?;
        for (name, rate) in [
            ("point read, system pool (one round trip)", system),
            ("point read, as the organization (scope set)", tenant),
            ("OrgStore::get_device", real),
        ] {
            report!(
                "{name:<44} {callers:>10} {rate:>12.0} {:>12.1}",
                1e6 * callers as f64 / rate
            );
        }
        report!(
            "{:<44} {callers:>10} {:>12} {:>12.1}",
            "  the organization's scope costs",
            "",
            1e6 * callers as f64 / tenant - 1e6 * callers as f64 / system
        );
    }
    test.cleanup().await;
    Ok(())
}

/// Calls per second of [`POINT_READ`] over `ids`, `callers` at a time, on the system pool
/// (`org` None) or in `org`'s scope.
async fn time(
    store: &Store,
    ids: &Arc<Vec<breeze_core::DeviceId>>,
    calls: usize,
    callers: usize,
    org: Option<OrgId>,
) -> anyhow::Result<f64> {
    let (store, ids) = (store.clone(), ids.clone());
    run_callers(calls, callers, move |i| {
        let (store, ids) = (store.clone(), ids.clone());
        async move {
            store
                .raw_scalar(org, POINT_READ, ids[i % ids.len()].0)
                .await?;
            Ok(())
        }
    })
    .await
}

async fn time_get_device(
    store: &Store,
    org: OrgId,
    ids: &Arc<Vec<breeze_core::DeviceId>>,
    calls: usize,
    callers: usize,
) -> anyhow::Result<f64> {
    let (store, ids) = (store.clone(), ids.clone());
    run_callers(calls, callers, move |i| {
        let (store, ids) = (store.clone(), ids.clone());
        async move {
            store
                .org(org)
                .devices()
                .get_device(ids[i % ids.len()])
                .await?;
            Ok(())
        }
    })
    .await
}

/// Runs `call(i)` for `i` in `0..calls` on `callers` tasks; returns calls per second.
async fn run_callers<F, Fut>(calls: usize, callers: usize, call: F) -> anyhow::Result<f64>
where
    F: Fn(usize) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = anyhow::Result<()>> + Send,
{
    let started = Instant::now();
    let tasks: Vec<_> = (0..callers)
        .map(|c| {
            let call = call.clone();
            tokio::spawn(async move {
                let mut i = c;
                while i < calls {
                    call(i).await?;
                    i += callers;
                }
                anyhow::Ok(())
            })
        })
        .collect();
    for t in tasks {
        t.await??;
    }
    Ok(calls as f64 / started.elapsed().as_secs_f64())
}
