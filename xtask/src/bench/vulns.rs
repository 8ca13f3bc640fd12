//! `cargo xtask bench vulns [--devices N] [--records N] [--packages N] [--changes N]
//! [--database sqlite|postgres|both]`: vulnerability exposure over a seeded fleet, in this
//! process (no server), on a fresh store per backend (`breeze_store::testing`).
//!
//! Every device (10,000, Debian 12) reports an inventory of `--packages` (400) packages. Then
//! one ecosystem's archive is imported: a GENERATED `all.zip` in osv.dev's layout and schema
//! (`--records` records, 20,000, for `Debian:12`, one in 50 naming a package the inventories
//! hold, the rest packages nobody has — real archives are mostly that — each with an
//! `ECOSYSTEM` range, a CVSS vector on half of them), read with the domain's archive reader
//! and loaded with `Store::import_advisories`. Printed: the archive's size, the read, and the
//! import's wall and CPU time with the devices recomputed and findings written (the issue's
//! aim: under 30 s for 10,000 devices); then per incremental inventory change (`--changes`,
//! 200): `record_inventory` (write, compliance and exposure recompute) and the exposure
//! recompute alone (`recompute_device`; aim: under 50 ms), median and p99. PostgreSQL's
//! backends are not counted in the CPU. The build profile is printed: debug numbers are smoke
//! numbers.

use std::{io::Write as _, sync::Arc, time::Instant};

use breeze_agent_proto::Inventory;
use breeze_core::ManualClock;
use breeze_store::{Backend, Store, testing::TestStore};
use futures::StreamExt;

use super::percentile;
use serde_json::json;

pub(crate) fn run(args: &[&str]) -> anyhow::Result<()> {
    let f = super::flags(
        args,
        &[
            "--devices",
            "--records",
            "--packages",
            "--changes",
            "--database",
        ],
    )?;
    let num = |name: &str, default: u64| super::number(&f, name, default);
    let devices = num("--devices", 10_000)? as usize;
    let records = num("--records", 20_000)? as usize;
    let packages = num("--packages", 400)? as usize;
    let changes = num("--changes", 200)? as usize;
    let dbs = match f.get("--database").map_or("both", String::as_str) {
        "both" => vec![Backend::Sqlite, Backend::Postgres],
        "sqlite" => vec![Backend::Sqlite],
        "postgres" => vec![Backend::Postgres],
        other => anyhow::bail!("--database: {other:?} is not sqlite, postgres or both"),
    };
    report!(
        "bench vulns: {devices} devices x {packages} packages, a generated Debian:12 archive of \
         {records} records, {changes} incremental changes ({} build)",
        if cfg!(debug_assertions) {
            "DEBUG"
        } else {
            "release"
        }
    );
    let archive = archive(records, packages)?;
    report!(
        "generated archive: {:.1} MB, {records} records",
        archive.len() as f64 / 1e6
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    for db in dbs {
        rt.block_on(one_backend(db, devices, &archive, packages, changes))?;
    }
    Ok(())
}

/// Process CPU time (user + system) in microseconds.
fn cpu_micros() -> anyhow::Result<u64> {
    let usage = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF)?;
    let us = |t: nix::sys::time::TimeVal| t.tv_sec() as u64 * 1_000_000 + t.tv_usec() as u64;
    Ok(us(usage.user_time()) + us(usage.system_time()))
}

/// A generated archive: record `r` names package `pkg{r % (50 * packages)}` (one record in 50
/// names a package every device has, the rest packages nobody has, as in a real archive), fixed
/// above what devices have (two in three) or below, with a CVSS vector on even records.
fn archive(records: usize, packages: usize) -> anyhow::Result<Vec<u8>> {
    let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let opts = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated);
    for r in 0..records {
        let k = r % (50 * packages.max(1));
        let fixed = if r % 3 == 0 {
            format!("1.{k}.0-1")
        } else {
            format!("1.{k}.9-1")
        };
        let mut severity = Vec::new();
        if r % 2 == 0 {
            severity.push(
                json!({"type": "CVSS_V3", "score": "CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:N/A:N"}),
            );
        }
        let record = json!({
            "id": format!("DEBIAN-CVE-2099-{r:06}"),
            "upstream": [format!("CVE-2099-{r:06}")],
            "summary": format!("pkg{k:04}: generated advisory {r}"),
            "details": "Generated for the benchmark in the schema osv.dev publishes.",
            "published": "2099-01-01T00:00:00Z",
            "modified": "2099-01-02T00:00:00Z",
            "severity": severity,
            "affected": [{
                "package": {"ecosystem": "Debian:12", "name": format!("pkg{k:04}")},
                "ranges": [{"type": "ECOSYSTEM", "events": [{"introduced": "0"}, {"fixed": fixed}]}],
                "ecosystem_specific": {"urgency": "medium"},
            }],
        });
        w.start_file(format!("DEBIAN-CVE-2099-{r:06}.json"), opts)?;
        w.write_all(record.to_string().as_bytes())?;
    }
    Ok(w.finish()?.into_inner())
}

/// Device `i`'s inventory: `n` packages `pkg0000…` at `1.k.bump-1`.
fn inventory(store: &Store, i: usize, n: usize, bump: u32) -> anyhow::Result<Inventory> {
    let packages: Vec<serde_json::Value> = (0..n)
        .map(|k| json!({ "name": format!("pkg{k:04}"), "version": format!("1.{k}.{bump}-1") }))
        .collect();
    Ok(serde_json::from_value(json!({
        "collectedAt": store.clock().now(), "hostname": format!("bench-{i:05}"),
        "os": { "family": "linux", "name": "Debian GNU/Linux", "version": "12", "kernel": "6.1", "arch": "x86_64" },
        "cpu": { "model": "CPU", "physicalCores": 4, "logicalCores": 8 },
        "memoryTotalBytes": 8u64 << 30, "disks": [], "interfaces": [],
        "packages": packages,
    }))?)
}

async fn one_backend(
    db: Backend,
    devices: usize,
    archive: &[u8],
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
    let results: Vec<anyhow::Result<()>> = futures::stream::iter(ids.iter().copied().enumerate())
        .map(|(i, d)| {
            let store = store.clone();
            async move {
                store
                    .record_inventory(d, org, &inventory(&store, i, packages, 5)?)
                    .await?;
                Ok(())
            }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    results.into_iter().collect::<anyhow::Result<()>>()?;
    report!(
        "seeded {devices} devices with inventories in {:.1} s (no advisory loaded yet)",
        t.elapsed().as_secs_f64()
    );

    let t = Instant::now();
    let read = breeze_domain::vulnerabilities::read_archive(archive)?;
    report!(
        "archive read: {} records in {:.2} s",
        read.records.len(),
        t.elapsed().as_secs_f64()
    );
    let cpu0 = cpu_micros()?;
    let t = Instant::now();
    let out = breeze_domain::vulnerabilities::import(&store, read).await?;
    let wall = t.elapsed().as_secs_f64();
    let cpu = (cpu_micros()? - cpu0) as f64 / 1e6;
    report!(
        "import + recompute: wall {wall:.2} s, CPU {cpu:.2} s; added {}, devices recomputed {}, \
         findings written {} (aim: 10,000 devices under 30 s)",
        out.added,
        out.devices_recomputed,
        out.findings
    );
    let t = Instant::now();
    let read = breeze_domain::vulnerabilities::read_archive(archive)?;
    let t2 = Instant::now();
    let out = breeze_domain::vulnerabilities::import(&store, read).await?;
    report!(
        "the same archive again: {} unchanged, {} devices recomputed, {:.2} s ({:.2} s with the read)",
        out.unchanged,
        out.devices_recomputed,
        t2.elapsed().as_secs_f64(),
        t.elapsed().as_secs_f64()
    );

    let o = store.org(org);
    let (mut with_write, mut alone) = (Vec::new(), Vec::new());
    for k in 0..changes {
        let (i, d) = (k * 37 % ids.len(), ids[k * 37 % ids.len()]);
        let inv = inventory(&store, i, packages, (k % 9) as u32)?;
        let t = Instant::now();
        store.record_inventory(d, org, &inv).await?;
        with_write.push(t.elapsed().as_secs_f64() * 1000.0);
        let t = Instant::now();
        o.vulnerabilities().recompute_device(d).await?;
        alone.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    with_write.sort_by(f64::total_cmp);
    alone.sort_by(f64::total_cmp);
    report!(
        "incremental change x{changes}: record_inventory (write + compliance + exposure) median \
         {:.2} ms, p99 {:.2} ms; exposure recompute alone median {:.2} ms, p99 {:.2} ms \
         (aim: under 50 ms)",
        percentile(&with_write, 0.5),
        percentile(&with_write, 0.99),
        percentile(&alone, 0.5),
        percentile(&alone, 0.99),
    );
    test.cleanup().await;
    Ok(())
}
