//! `cargo xtask bench compliance [--devices N] [--rules N] [--packages N] [--changes N]
//! [--database sqlite|postgres|both]`: compliance evaluation over a seeded fleet, in this
//! process (no server), on a fresh store per backend (`breeze_store::testing`).
//!
//! Every device (10,000) reports an inventory of `--packages` (300) packages; one policy holds
//! `--rules` (20) inventory rules (packages installed, at least a version, the OS version —
//! agent rules are answered by agents and cost the server one fold per answer). Printed: wall
//! and this process's CPU time of a full pass that writes every device (the first), of a full
//! pass that finds nothing changed, and of one after 1 % of the devices' inventories changed
//! unseen (written while the policy was inactive, so the incremental path did not already
//! re-evaluate them and the pass writes the devices whose results changed); then per
//! incremental inventory change (`--changes`, 200): the inventory write with its
//! re-evaluation (`record_inventory`), and the re-evaluation alone
//! (`evaluate_device_inventory`), median and p99. PostgreSQL's backends are not counted in the
//! CPU. The build profile is printed: debug numbers are smoke numbers.

use std::{sync::Arc, time::Instant};

use breeze_agent_proto::Inventory;
use breeze_core::{ComplianceRule, DeviceId, ManualClock, OrgId, PolicyEnforcement};
use breeze_store::{
    Backend, CompliancePolicyUpdate, NewCompliancePolicy, RuleTarget, Store, testing::TestStore,
};
use futures::StreamExt;

use super::percentile;
use serde_json::json;

pub(crate) fn run(args: &[&str]) -> anyhow::Result<()> {
    let f = super::flags(
        args,
        &[
            "--devices",
            "--rules",
            "--packages",
            "--changes",
            "--database",
        ],
    )?;
    let num = |name: &str, default: u64| super::number(&f, name, default);
    let devices = num("--devices", 10_000)? as usize;
    let rules = num("--rules", 20)? as usize;
    let packages = num("--packages", 300)? as usize;
    let changes = num("--changes", 200)? as usize;
    let dbs = match f.get("--database").map_or("both", String::as_str) {
        "both" => vec![Backend::Sqlite, Backend::Postgres],
        "sqlite" => vec![Backend::Sqlite],
        "postgres" => vec![Backend::Postgres],
        other => anyhow::bail!("--database: {other:?} is not sqlite, postgres or both"),
    };
    report!(
        "bench compliance: {devices} devices x {rules} rules, {packages} packages each, \
         {changes} incremental changes ({} build)",
        if cfg!(debug_assertions) {
            "DEBUG"
        } else {
            "release"
        }
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    for db in dbs {
        rt.block_on(one_backend(db, devices, rules, packages, changes))?;
    }
    Ok(())
}

/// Process CPU time (user + system) in microseconds.
fn cpu_micros() -> anyhow::Result<u64> {
    let usage = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF)?;
    let us = |t: nix::sys::time::TimeVal| t.tv_sec() as u64 * 1_000_000 + t.tv_usec() as u64;
    Ok(us(usage.user_time()) + us(usage.system_time()))
}

/// Device `i`'s inventory: `n` packages; every tenth device has an old openssl, every
/// seventh none.
fn inventory(store: &Store, i: usize, n: usize, bump: u32) -> anyhow::Result<Inventory> {
    let mut packages: Vec<serde_json::Value> = (0..n)
        .map(|k| json!({ "name": format!("lib{k:04}"), "version": format!("1.{k}.{bump}-1") }))
        .collect();
    if !i.is_multiple_of(7) {
        let v = if i.is_multiple_of(10) {
            "3.0.2-0ubuntu1"
        } else {
            "3.0.15-1~deb12u1"
        };
        packages.push(json!({ "name": "openssl", "version": v }));
    }
    Ok(serde_json::from_value(json!({
        "collectedAt": store.clock().now(), "hostname": format!("bench-{i:05}"),
        "os": { "family": "linux", "name": "Debian GNU/Linux", "version": "12", "kernel": "6.1", "arch": "x86_64" },
        "cpu": { "model": "CPU", "physicalCores": 4, "logicalCores": 8 },
        "memoryTotalBytes": 8u64 << 30, "disks": [], "interfaces": [],
        "packages": packages,
    }))?)
}

/// `n` inventory rules over the packages the inventories hold.
fn rule_set(n: usize) -> Vec<ComplianceRule> {
    (0..n)
        .map(|k| match k % 4 {
            0 => ComplianceRule::PackageInstalled {
                name: format!("lib{:04}", k * 7),
            },
            1 => ComplianceRule::PackageMinVersion {
                name: "openssl".into(),
                min_version: "3.0.11".into(),
            },
            2 => ComplianceRule::PackageMinVersion {
                name: format!("lib{:04}", k * 3),
                min_version: "1.0".into(),
            },
            _ => ComplianceRule::OsVersion {
                name: Some("debian".into()),
                min_version: "11".into(),
            },
        })
        .collect()
}

async fn record_all(
    store: &Store,
    org: OrgId,
    ids: &[(usize, DeviceId)],
    packages: usize,
    bump: u32,
) -> anyhow::Result<()> {
    let results: Vec<anyhow::Result<()>> = futures::stream::iter(ids.iter().copied())
        .map(|(i, d)| {
            let store = store.clone();
            async move {
                let inv = inventory(&store, i, packages, bump)?;
                store.record_inventory(d, org, &inv).await?;
                Ok(())
            }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    results.into_iter().collect()
}

async fn one_backend(
    db: Backend,
    devices: usize,
    rules: usize,
    packages: usize,
    changes: usize,
) -> anyhow::Result<()> {
    let clock = ManualClock::new("2026-03-02T09:00:00Z".parse()?);
    let test = TestStore::new(db, Arc::new(clock.clone())).await;
    let store = test.store.clone();
    let name = match db {
        Backend::Sqlite => "SQLite",
        Backend::Postgres => "PostgreSQL",
    };
    report!("\n== {name} ==");
    let t = Instant::now();
    let (org, ids) = super::seed_fleet(&store, devices).await?;
    let indexed: Vec<(usize, DeviceId)> = ids.iter().copied().enumerate().collect();
    record_all(&store, org, &indexed, packages, 0).await?;
    report!(
        "seeded {devices} devices with inventories in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    let o = store.org(org);
    let policy = o
        .compliance()
        .create_compliance_policy(
            NewCompliancePolicy {
                name: "bench".into(),
                description: None,
                rules: rule_set(rules),
                target: RuleTarget::Organization,
                enforcement: PolicyEnforcement::Monitor,
                remediation_script: None,
                remediation_parameters: Default::default(),
                active: true,
                owner_actor: "system:bench".into(),
                evaluate_every_minutes: 60,
            },
            super::audit("compliance_policy.create"),
        )
        .await?;

    let pass = |label: &'static str| {
        let (o, policy) = (store.org(org), policy.clone());
        async move {
            let cpu0 = cpu_micros()?;
            let t = Instant::now();
            let r = o
                .compliance()
                .evaluate_policy_inventory(&policy, None)
                .await?;
            let wall = t.elapsed().as_secs_f64() * 1000.0;
            let cpu = (cpu_micros()? - cpu0) as f64 / 1000.0;
            report!(
                "full pass, {label:<28} wall {wall:>8.1} ms  CPU {cpu:>8.1} ms  written {:>6}  \
                 (compliant {}, non-compliant {}, unknown {})",
                r.changed,
                r.compliant,
                r.non_compliant,
                r.unknown
            );
            anyhow::Ok(())
        }
    };
    pass("first (writes every device)").await?;
    pass("nothing changed").await?;
    // 1 % of the devices report changed inventories. `record_inventory` re-evaluates an active
    // policy for the device at once (the incremental path, measured below), which would leave
    // the full pass nothing to write; the policy is inactive meanwhile, so the pass finds the
    // changes itself — what a periodic pass costs when inventories changed since the last one
    // (an incremental evaluation that failed, or a policy activated again). Deactivating and
    // activating keeps the devices' results.
    let some: Vec<(usize, DeviceId)> = indexed
        .iter()
        .copied()
        .step_by(100)
        .map(|(i, d)| (i + 3, d))
        .collect();
    let active = |on: bool| {
        let o = store.org(org);
        let id = policy.id;
        async move {
            o.compliance()
                .update_compliance_policy(
                    id,
                    CompliancePolicyUpdate {
                        active: Some(on),
                        ..CompliancePolicyUpdate::default()
                    },
                    super::audit("compliance_policy.update"),
                )
                .await
        }
    };
    active(false).await?;
    record_all(&store, org, &some, packages, 1).await?;
    active(true).await?;
    report!(
        "{} devices' inventories changed, not evaluated incrementally",
        some.len()
    );
    pass("after 1 % changed unseen").await?;

    // Incremental: one device's inventory changes at a time.
    let mut with_write = Vec::new();
    let mut alone = Vec::new();
    let mut cpu_with_write = 0.0;
    for k in 0..changes {
        let (i, d) = indexed[(k * 37) % indexed.len()];
        let inv = inventory(&store, i + k, packages, 2 + k as u32)?;
        let cpu0 = cpu_micros()?;
        let t = Instant::now();
        store.record_inventory(d, org, &inv).await?;
        with_write.push(t.elapsed().as_secs_f64() * 1000.0);
        cpu_with_write += (cpu_micros()? - cpu0) as f64 / 1000.0;
        let t = Instant::now();
        o.compliance().evaluate_device_inventory(d).await?;
        alone.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    with_write.sort_by(f64::total_cmp);
    alone.sort_by(f64::total_cmp);
    report!(
        "incremental change x{changes}: record_inventory (write + re-evaluation) median {:.2} ms, \
         p99 {:.2} ms, CPU {:.2} ms each; re-evaluation alone median {:.2} ms, p99 {:.2} ms",
        percentile(&with_write, 0.5),
        percentile(&with_write, 0.99),
        cpu_with_write / changes.max(1) as f64,
        percentile(&alone, 0.5),
        percentile(&alone, 0.99),
    );
    test.cleanup().await;
    Ok(())
}
