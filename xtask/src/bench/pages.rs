//! `cargo xtask bench pages [--devices N] [--audit N] [--rounds R]
//! [--database sqlite|postgres|both] [--build release|debug]`: each dashboard page's HTML bytes
//! and time to the last byte for an organization of N devices with inventories (default
//! 10,000) and N audit records (default 1,000,000).
//!
//! Runs `breeze demo` (no local agent) on a scratch database, seeds the devices with
//! `breeze devices seed --with-inventory` and the audit log as `bench tools` does, signs the
//! demo admin in through `/login` like a browser (the `breeze_login` double-submit cookie, our
//! `Origin`), then fetches every page R times (default 20, after 3 unmeasured) one request at a
//! time over loopback: the time is the server's time to answer plus one loopback round trip.
//! Prints a Markdown table per database (bytes, median and slowest milliseconds) and the aims —
//! every page under 100 ms, the device and audit pages under 50 ms — met or not (like every
//! benchmark it reports the number and does not fail on it; it fails only when a page does not
//! answer 200). `--build debug` is a smoke run.

use std::{
    path::PathBuf,
    time::{Duration, Instant},
};

use anyhow::{Context, bail};
use reqwest::{
    Client, StatusCode,
    header::{COOKIE, HeaderMap, ORIGIN, SET_COOKIE},
    redirect::Policy,
};

use super::{
    build_breeze,
    instance::{Db, Instance},
    median, run as sh, workspace_root,
};

/// Every page must answer faster than this at 10,000 devices (release build).
const PAGE_BUDGET_MS: f64 = 100.0;

/// The pages that show what the read tools answer (a device, the audit log) must answer
/// faster than this at 10,000 devices and a million audit records.
const READ_PAGE_BUDGET_MS: f64 = 50.0;

/// The organization's list pages, under `/o/{org}/`, measured as they open.
const LIST_PAGES: &[&str] = &[
    "devices",
    "overview/fleet",
    "overview/patches",
    "alerts",
    "alerts/rules",
    "approvals",
    "scripts",
    "scripts/executions",
    "patches",
    "deployments",
    "maintenance",
    "policies",
    "compliance",
    "reports",
    "groups",
    "people",
    "enrollment",
    "channels",
    "tickets",
    "invoices",
    "quotes",
    "contracts",
    "vulnerabilities",
    "live-queries",
    "chat",
    "ai/tool-sources",
    "settings/api-keys",
    "settings/mcp",
    "settings/apps",
];

/// `name=value` of the `Set-Cookie` named `name` in `headers`.
fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers.get_all(SET_COOKIE).iter().find_map(|v| {
        let first = v.to_str().ok()?.split(';').next()?.trim().to_owned();
        first
            .strip_prefix(&format!("{name}="))
            .is_some()
            .then_some(first)
    })
}

/// The `value` of the hidden input `name` in `page`.
fn hidden(page: &str, name: &str) -> Option<String> {
    let marker = format!("name=\"{name}\" value=\"");
    let rest = &page[page.find(&marker)? + marker.len()..];
    Some(rest[..rest.find('"')?].to_owned())
}

/// Signs `email` in at `base` and returns the session cookie (`breeze_session=…`).
pub(super) async fn sign_in(
    http: &Client,
    base: &str,
    email: &str,
    password: &str,
) -> anyhow::Result<String> {
    let r = http.get(format!("{base}/login")).send().await?;
    let pre = cookie(r.headers(), "breeze_login").context("/login set no breeze_login cookie")?;
    let page = r.text().await?;
    let csrf = hidden(&page, "csrf").context("/login has no csrf field")?;
    let r = http
        .post(format!("{base}/login"))
        .header(COOKIE, pre)
        .header(ORIGIN, base)
        .form(&[
            ("csrf", csrf.as_str()),
            ("next", "/"),
            ("email", email),
            ("password", password),
        ])
        .send()
        .await?;
    if r.status() != StatusCode::SEE_OTHER {
        bail!("sign-in answered {}", r.status());
    }
    cookie(r.headers(), "breeze_session").context("sign-in set no session cookie")
}

struct Measured {
    name: String,
    path: String,
    status: u16,
    bytes: usize,
    median_ms: f64,
    max_ms: f64,
}

/// Fetches `path` 3 times unmeasured, then `rounds` times measured.
async fn measure(
    http: &Client,
    base: &str,
    session: &str,
    name: &str,
    path: &str,
    rounds: usize,
) -> anyhow::Result<Measured> {
    let mut times = Vec::with_capacity(rounds);
    let (mut status, mut bytes) = (0, 0);
    for i in 0..rounds + 3 {
        let started = Instant::now();
        let mut req = http.get(format!("{base}{path}"));
        if !session.is_empty() {
            req = req.header(COOKIE, session);
        }
        let r = req.send().await?;
        status = r.status().as_u16();
        let body = r.bytes().await?;
        let ms = started.elapsed().as_secs_f64() * 1000.0;
        bytes = body.len();
        if i >= 3 {
            times.push(ms);
        }
    }
    Ok(Measured {
        name: name.to_owned(),
        path: path.to_owned(),
        status,
        bytes,
        median_ms: median(&times).unwrap_or(0.0),
        max_ms: times.iter().copied().fold(0.0, f64::max),
    })
}

/// The path of the first device link (`/o/{org}/devices/{id}`) on a devices list page.
fn first_device(page: &str, org: &str) -> Option<String> {
    let marker = format!("href=\"/o/{org}/devices/");
    let rest = &page[page.find(&marker)? + "href=\"".len()..];
    Some(rest[..rest.find('"')?].to_owned())
}

pub(crate) fn run(args: &[&str]) -> anyhow::Result<()> {
    let f = super::flags(
        args,
        &["--devices", "--audit", "--rounds", "--database", "--build"],
    )?;
    let num = |name: &str, default: u64| super::number(&f, name, default);
    let devices = num("--devices", 10_000)?;
    let audit = num("--audit", 1_000_000)? as i64;
    let rounds = num("--rounds", 20)?.max(1) as usize;
    let dbs = match f.get("--database").map_or("sqlite", String::as_str) {
        "both" => vec![Db::Sqlite, Db::Postgres],
        other => vec![Db::parse(other)?],
    };
    let release = match f.get("--build").map_or("release", String::as_str) {
        "release" => true,
        "debug" => false,
        other => bail!("--build: {other:?} is neither release nor debug"),
    };
    let root = workspace_root()?;
    let bin: PathBuf = if release {
        eprintln!("building breeze (release)…");
        build_breeze(&root)?
    } else {
        eprintln!("building breeze (debug)…");
        sh(std::process::Command::new("cargo")
            .current_dir(&root)
            .args(["build", "-q", "-p", "breeze-cli"]))?;
        root.join("target/debug/breeze")
    };
    let build = if release { "release" } else { "debug" };
    let mut measured = Vec::new();
    for db in dbs {
        let rows = measure_all(&root, &bin, db, devices, audit, rounds)?;
        report!();
        report!(
            "## dashboard pages, {build} build, {} ({devices} devices, {audit} audit records), \
             {rounds} rounds each",
            db.name()
        );
        report!();
        report!("| page | path | status | HTML bytes | median ms | slowest ms |");
        report!("|---|---|---:|---:|---:|---:|");
        for r in &rows {
            report!(
                "| {} | `{}` | {} | {} | {:.1} | {:.1} |",
                r.name,
                r.path,
                r.status,
                r.bytes,
                r.median_ms,
                r.max_ms
            );
        }
        if let Some(bad) = rows.iter().find(|r| r.status != 200) {
            bail!("{} answered {}", bad.path, bad.status);
        }
        measured.push((db, rows));
    }
    report!();
    for (db, rows) in &measured {
        let slowest = rows
            .iter()
            .max_by(|a, b| a.median_ms.total_cmp(&b.median_ms))
            .context("no page measured")?;
        report!(
            "{}",
            super::verdict(
                slowest.median_ms < PAGE_BUDGET_MS,
                &format!(
                    "aim on {}: every page in < {PAGE_BUDGET_MS} ms; the slowest, {}, {:.1} ms median",
                    db.name(),
                    slowest.name,
                    slowest.median_ms
                )
            )
        );
        for name in ["device", "audit log"] {
            let r = rows
                .iter()
                .find(|r| r.name == name)
                .with_context(|| format!("no {name} row"))?;
            report!(
                "{}",
                super::verdict(
                    r.median_ms < READ_PAGE_BUDGET_MS,
                    &format!(
                        "aim on {}: the {name} page in < {READ_PAGE_BUDGET_MS} ms; {:.1} ms median",
                        db.name(),
                        r.median_ms
                    )
                )
            );
        }
    }
    Ok(())
}

/// Starts a scratch Breeze on `db`, seeds it and measures every page.
fn measure_all(
    root: &std::path::Path,
    bin: &std::path::Path,
    db: Db,
    devices: u64,
    audit: i64,
    rounds: usize,
) -> anyhow::Result<Vec<Measured>> {
    let inst = Instance::start(root, bin, db, 0, &[])?;
    let org = inst.demo["organization"]["slug"]
        .as_str()
        .context("demo.json has no organization")?
        .to_owned();
    eprintln!(
        "seeding {devices} devices and {audit} audit records into {org} on {}…",
        db.name()
    );
    inst.cli(&[
        "devices",
        "seed",
        "--org",
        &org,
        "--count",
        &devices.to_string(),
        "--with-inventory",
    ])?;
    inst.seed_audit(audit)?;
    inst.analyze()?;
    let email = inst.demo["admin"]["email"]
        .as_str()
        .context("demo.json has no admin")?
        .to_owned();
    let password = inst.demo["admin"]["password"]
        .as_str()
        .context("demo.json has no admin password")?
        .to_owned();
    let base = inst.base_url.clone();

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let http = Client::builder()
            .redirect(Policy::none())
            .timeout(Duration::from_secs(60))
            .build()?;
        let session = sign_in(&http, &base, &email, &password).await?;
        let list = http
            .get(format!("{base}/o/{org}/devices"))
            .header(COOKIE, &session)
            .send()
            .await?
            .text()
            .await?;
        let device = first_device(&list, &org).context("the devices list links no device")?;
        let o = format!("/o/{org}");
        let mut pages: Vec<(&str, String)> = vec![
            ("sign-in", "/login".to_owned()),
            ("devices, page 100", format!("{o}/devices?page=100")),
            ("devices, offline", format!("{o}/devices?status=offline")),
            ("devices, search", format!("{o}/devices?search=sim-09")),
            ("devices, live rows", format!("{o}/devices/rows?page=1")),
            ("device", device.clone()),
            ("device, week", format!("{device}?window=week")),
            ("audit log", format!("{o}/audit")),
            ("audit log, all", format!("{o}/audit?noise=1")),
            ("overview", o.clone()),
        ];
        // Every other list page by its path's last segment.
        pages.extend(LIST_PAGES.iter().map(|p| (*p, format!("{o}/{p}"))));
        let mut rows = Vec::new();
        for (name, path) in pages {
            // The sign-in page is measured signed out, as people see it.
            let who = if name == "sign-in" { "" } else { &session };
            rows.push(measure(&http, &base, who, name, &path, rounds).await?);
        }
        anyhow::Ok(rows)
    })
}
