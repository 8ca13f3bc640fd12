//! What `breeze devices seed --with-inventory` adds to synthetic devices so they read like
//! real ones: an agent inventory (operating system, CPU, disks, interfaces and about 870
//! installed packages, the size of a typical Linux server's), a heartbeat for each online one
//! (a third with people signed in, the third device among them), a patch scan for each Linux
//! one (0 to 24 available updates drawn from its packages, a third of them security updates,
//! every tenth device asking for a reboot), a week of per-minute metrics for the first ten,
//! and three context notes for each of the first thousand. Written through the store's own write paths,
//! as agents and technicians would, so every reader (tools, pages, reports) sees the shapes
//! it sees in production; the read benchmarks run on it.

use breeze_agent_proto::{
    AvailablePatch, CpuInfo, DiskInfo, DiskUsageSample, Heartbeat, Inventory, MetricSample,
    NetworkInterface, NetworkSample, OsInfo, Package, PatchScanReport, UserSession,
};
use breeze_core::{Actor, AuditEvent, Device, DeviceStatus, OrgId, OsFamily};
use breeze_store::NewContext;
use chrono::Duration;

use super::App;

/// Packages in each seeded inventory.
const PACKAGES: usize = 870;
/// Devices that get a week of metrics.
const METRIC_DEVICES: usize = 10;
/// Devices that get context notes.
const NOTED_DEVICES: usize = 1_000;

/// Name stems of installed packages, combined with suffixes into a realistic list.
const STEMS: &[&str] = &[
    "lib",
    "python3",
    "perl",
    "gir1.2",
    "fonts",
    "linux",
    "systemd",
    "x11",
    "gnome",
    "openssl",
    "curl",
    "gcc",
    "libc6",
    "libgtk",
    "libqt5",
    "node",
    "ruby",
    "golang",
    "postgresql",
    "nginx",
    "apache2",
    "docker",
    "containerd",
    "snapd",
    "cloud",
    "grub",
    "ubuntu",
    "xserver",
    "mesa",
    "vim",
];
const SUFFIXES: &[&str] = &[
    "",
    "-common",
    "-dev",
    "-data",
    "-utils",
    "-bin",
    "-doc",
    "-core",
    "-base",
    "-tools",
    "-runtime",
    "-minimal",
    "-extra",
    "-modules",
    "-plugins",
    "-client",
    "-server",
    "-dbg",
    "-l10n",
    "-headers",
    "-examples",
    "-legacy",
    "-gtk3",
    "-cli",
    "-daemon",
    "-schemas",
    "-locale",
    "-policy",
    "-static",
    "-doc-html",
];

fn audit(action: &str, resource: &str) -> AuditEvent {
    AuditEvent::new(Actor::system("cli"), action, resource)
}

fn packages(seed: usize) -> Vec<Package> {
    (0..PACKAGES)
        .map(|i| {
            let stem = STEMS[i % STEMS.len()];
            let suffix = SUFFIXES[(i / STEMS.len()) % SUFFIXES.len()];
            Package {
                source: None,
                name: format!("{stem}{suffix}"),
                // Versions differ a little per device, as fleets drift.
                version: format!(
                    "{}.{}.{}-{}ubuntu1",
                    1 + i % 7,
                    (i + seed) % 23,
                    i % 11,
                    seed % 4
                ),
            }
        })
        .collect()
}

fn inventory(device: &Device, index: usize, now: chrono::DateTime<chrono::Utc>) -> Inventory {
    let gib = 1024 * 1024 * 1024;
    Inventory {
        collected_at: now,
        hostname: device.hostname.clone(),
        os: OsInfo {
            family: device.os_family.as_str().into(),
            name: device.os_name.clone(),
            version: device.os_version.clone(),
            kernel: "6.8.0-49-generic".into(),
            arch: "x86_64".into(),
        },
        cpu: CpuInfo {
            model: "Intel(R) Xeon(R) Silver 4314 CPU @ 2.40GHz".into(),
            physical_cores: 8,
            logical_cores: 16,
        },
        memory_total_bytes: 32 * gib,
        disks: vec![
            DiskInfo {
                mount: "/".into(),
                filesystem: "ext4".into(),
                total_bytes: 256 * gib,
                available_bytes: (40 + (index as u64 % 150)) * gib,
            },
            DiskInfo {
                mount: "/var".into(),
                filesystem: "xfs".into(),
                total_bytes: 1024 * gib,
                available_bytes: (100 + (index as u64 % 700)) * gib,
            },
        ],
        interfaces: vec![
            NetworkInterface {
                name: "eth0".into(),
                mac: Some(format!(
                    "52:54:00:{:02x}:{:02x}:{:02x}",
                    index >> 16 & 0xff,
                    index >> 8 & 0xff,
                    index & 0xff
                )),
                addresses: vec![
                    format!(
                        "10.{}.{}.{}/16",
                        index >> 16 & 0xff,
                        index >> 8 & 0xff,
                        index & 0xff
                    ),
                    "fe80::5054:ff:fe12:3456/64".into(),
                ],
            },
            NetworkInterface {
                name: "lo".into(),
                mac: None,
                addresses: vec!["127.0.0.1/8".into(), "::1/128".into()],
            },
        ],
        packages: (device.os_family == OsFamily::Linux).then(|| packages(index)),
        boot_time: Some(now - Duration::days(3 + index as i64 % 40)),
        patches: None,
    }
}

/// Device `index`'s patch scan: `index % 25` of its packages have a newer version, every third
/// of them from the security suite with a severity.
fn patch_scan(index: usize, now: chrono::DateTime<chrono::Utc>) -> PatchScanReport {
    const SEVERITIES: [&str; 4] = ["critical", "important", "moderate", "low"];
    let patches = packages(index)
        .into_iter()
        .step_by(7)
        .take(index % 25)
        .enumerate()
        .map(|(k, p)| {
            let security = k % 3 == 0;
            AvailablePatch {
                available_version: format!("{}+deb12u1", p.version),
                installed_version: Some(p.version),
                name: p.name,
                arch: Some("amd64".into()),
                source: Some(
                    if security {
                        "bookworm-security"
                    } else {
                        "bookworm-updates"
                    }
                    .into(),
                ),
                security,
                severity: security.then(|| SEVERITIES[(index + k) % 4].to_owned()),
                advisory: security.then(|| format!("DSA-{}-1", 5000 + (index + k) % 900)),
            }
        })
        .collect();
    PatchScanReport {
        manager: "apt".into(),
        scanned_at: now - Duration::minutes(index as i64 % 1440),
        patches,
        reboot_required: index.is_multiple_of(10),
        logged_in_users: users(index, now).into_iter().map(|u| u.username).collect(),
    }
}

fn users(index: usize, now: chrono::DateTime<chrono::Utc>) -> Vec<UserSession> {
    if index % 3 != 2 {
        return Vec::new();
    }
    let person = |name: &str, terminal: &str, minutes: i64, idle: Option<u64>| UserSession {
        username: name.into(),
        terminal: Some(terminal.into()),
        host: None,
        login_at: Some(now - Duration::minutes(minutes)),
        login_duration_secs: Some(4.5),
        idle_secs: idle,
    };
    let mut v = vec![person("alice", "tty1", 95, Some(30))];
    if index.is_multiple_of(2) {
        v.push(person("bob", "pts/0", 20, Some(3_600)));
    }
    v
}

fn sample(at: chrono::DateTime<chrono::Utc>, minute: i64) -> MetricSample {
    let wave = ((minute % 1440) as f64 / 1440.0 * std::f64::consts::TAU).sin();
    MetricSample {
        at,
        cpu_percent: (35.0 + 25.0 * wave).clamp(0.0, 100.0),
        ram_percent: 61.5,
        ram_used_bytes: 20 * 1024 * 1024 * 1024,
        disks: vec![DiskUsageSample {
            mount: "/".into(),
            used_percent: 72.0,
        }],
        network: vec![NetworkSample {
            interface: "eth0".into(),
            rx_bytes: 1_000_000 + minute as u64 * 1_500,
            tx_bytes: 400_000 + minute as u64 * 700,
        }],
        process_count: 240,
    }
}

/// Adds inventories, heartbeats, metrics and notes to `devices` (see the module docs).
pub(crate) async fn seed(app: &App, org: OrgId, devices: &[Device]) -> anyhow::Result<()> {
    let now = app.clock.now();
    for (i, d) in devices.iter().enumerate() {
        app.store
            .record_inventory(d.id, org, &inventory(d, i, now))
            .await?;
        if d.os_family == OsFamily::Linux {
            app.store
                .record_patch_scan(d.id, org, &patch_scan(i, now))
                .await?;
        }
        // A heartbeat brings a device online; offline ones keep their status.
        if d.status != DeviceStatus::Offline {
            let hb = Heartbeat {
                agent_version: "0.1.0".into(),
                uptime_secs: 3 * 86_400 + i as u64 % 40 * 86_400,
                pending_reboot: i % 10 == 0,
                logged_in_users: users(i, now),
                running_commands: Vec::new(),
                applied_policy: None,
            };
            app.store.record_heartbeat(d.id, org, &hb).await?;
        }
    }
    for d in devices.iter().take(METRIC_DEVICES) {
        // A week of one sample a minute, inserted a day at a time.
        for day in (0..7).rev() {
            let batch: Vec<MetricSample> = (0..1440)
                .map(|m| {
                    let minute = day * 1440 + m;
                    sample(now - Duration::minutes(minute), minute)
                })
                .collect();
            app.store.insert_metrics(d.id, org, &batch).await?;
        }
    }
    let notes = app.store.org(org).context();
    for d in devices.iter().take(NOTED_DEVICES) {
        for (kind, summary) in [
            ("quirk", "Backups run at 02:00; expect high disk I/O then"),
            ("preference", "Reboot only in the Sunday window"),
            ("issue", "Intermittent DNS timeouts reported by the user"),
        ] {
            notes
                .add_context(
                    NewContext {
                        device_id: d.id,
                        context_type: kind.into(),
                        summary: summary.into(),
                        details: None,
                        created_by: "seed".into(),
                        expires_at: None,
                    },
                    audit("context.add", "device"),
                )
                .await?;
        }
    }
    Ok(())
}
