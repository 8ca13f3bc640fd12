//! Hardware and software inventory: CPU, memory, disks, interfaces, OS, boot time, packages.
//! Collection blocks (sysinfo, `dpkg-query`): call it from a blocking task.

use std::process::{Command, Stdio};

use breeze_agent_proto::{CpuInfo, DiskInfo, Inventory, NetworkInterface, Package};
use breeze_core::Clock;
use chrono::{DateTime, Utc};
use sysinfo::{CpuRefreshKind, Disks, MemoryRefreshKind, Networks, RefreshKind, System};

/// Filesystems that are not real storage and are left out of inventory and metrics.
const PSEUDO_FILESYSTEMS: &[&str] = &[
    "proc",
    "sysfs",
    "tmpfs",
    "devtmpfs",
    "devpts",
    "cgroup",
    "cgroup2",
    "securityfs",
    "pstore",
    "debugfs",
    "tracefs",
    "ramfs",
    "autofs",
    "mqueue",
    "hugetlbfs",
    "fusectl",
    "configfs",
    "binfmt_misc",
    "nsfs",
    "efivarfs",
    "bpf",
    "rpc_pipefs",
    "fuse.lxcfs",
    "fuse.snapfuse",
    "squashfs",
    "overlayfs-meta",
    "none",
];

/// Whether a filesystem type is a pseudo filesystem.
pub fn is_pseudo_filesystem(fs: &str) -> bool {
    PSEUDO_FILESYSTEMS.contains(&fs)
}

/// Collects the inventory now (blocking; runs `dpkg-query` or `rpm`).
pub fn collect(clock: &dyn Clock) -> Inventory {
    let system = System::new_with_specifics(
        RefreshKind::nothing()
            .with_cpu(CpuRefreshKind::nothing())
            .with_memory(MemoryRefreshKind::nothing().with_ram()),
    );
    let cpus = system.cpus();
    let model = cpus
        .first()
        .map(|c| c.brand().trim().to_owned())
        .filter(|b| !b.is_empty())
        .unwrap_or_else(|| "unknown".to_owned());
    let logical = u32::try_from(cpus.len()).unwrap_or(u32::MAX);
    let physical = System::physical_core_count()
        .and_then(|n| u32::try_from(n).ok())
        .unwrap_or(logical);
    Inventory {
        collected_at: clock.now(),
        hostname: super::hostname(),
        os: super::os_info(),
        cpu: CpuInfo {
            model,
            physical_cores: physical,
            logical_cores: logical,
        },
        memory_total_bytes: system.total_memory(),
        disks: disks(),
        interfaces: interfaces(),
        packages: packages(),
        boot_time: DateTime::<Utc>::from_timestamp(
            i64::try_from(System::boot_time()).unwrap_or(0),
            0,
        )
        .filter(|t| t.timestamp() > 0),
        patches: None,
    }
}

/// Real (non-pseudo) filesystems, one per mount point.
pub fn disks() -> Vec<DiskInfo> {
    let disks = Disks::new_with_refreshed_list();
    let mut out: Vec<DiskInfo> = Vec::new();
    for disk in disks.list() {
        let fs = disk.file_system().to_string_lossy().into_owned();
        if is_pseudo_filesystem(&fs) || disk.total_space() == 0 {
            continue;
        }
        let mount = disk.mount_point().to_string_lossy().into_owned();
        if out.iter().any(|d| d.mount == mount) {
            continue;
        }
        out.push(DiskInfo {
            mount,
            filesystem: fs,
            total_bytes: disk.total_space(),
            available_bytes: disk.available_space(),
        });
    }
    out.sort_by(|a, b| a.mount.cmp(&b.mount));
    out
}

/// Network interfaces with their MAC and addresses in CIDR form.
pub fn interfaces() -> Vec<NetworkInterface> {
    let networks = Networks::new_with_refreshed_list();
    let mut out: Vec<NetworkInterface> = networks
        .list()
        .iter()
        .map(|(name, data)| {
            let mac = data.mac_address();
            NetworkInterface {
                name: name.clone(),
                mac: (!mac.is_unspecified()).then(|| mac.to_string()),
                addresses: data
                    .ip_networks()
                    .iter()
                    .map(|n| format!("{}/{}", n.addr, n.prefix))
                    .collect(),
            }
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// Installed packages from dpkg or rpm; `None` when neither is there.
pub fn packages() -> Option<Vec<Package>> {
    let attempts: [(&str, &[&str]); 2] = [
        ("dpkg-query", &["-W", "-f", "${Package}\t${Version}\n"]),
        ("rpm", &["-qa", "--qf", "%{NAME}\t%{VERSION}-%{RELEASE}\n"]),
    ];
    for (program, args) in attempts {
        let Ok(output) = Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output()
        else {
            continue;
        };
        if !output.status.success() {
            continue;
        }
        return Some(parse_packages(&String::from_utf8_lossy(&output.stdout)));
    }
    None
}

/// `name<TAB>version` lines.
pub fn parse_packages(text: &str) -> Vec<Package> {
    let mut out: Vec<Package> = text
        .lines()
        .filter_map(|line| {
            let (name, version) = line.split_once('\t')?;
            let name = name.trim();
            (!name.is_empty()).then(|| Package {
                name: name.to_owned(),
                version: version.trim().to_owned(),
            })
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use breeze_core::SystemClock;

    #[test]
    fn collects_this_machine() {
        let inv = collect(&SystemClock);
        assert!(inv.cpu.logical_cores >= 1);
        assert!(inv.memory_total_bytes > 0);
        assert!(!inv.hostname.is_empty());
        assert!(
            inv.disks
                .iter()
                .all(|d| !is_pseudo_filesystem(&d.filesystem))
        );
        assert!(
            inv.interfaces
                .iter()
                .flat_map(|i| &i.addresses)
                .all(|a| a.contains('/'))
        );
        let json = serde_json::to_value(&inv).unwrap();
        assert!(json.get("memoryTotalBytes").is_some());
    }

    #[test]
    fn package_lines() {
        let pkgs = parse_packages("zlib1g\t1:1.2.13\nbash\t5.2-1\n\nbroken\n");
        assert_eq!(pkgs.len(), 2);
        assert_eq!(pkgs[0].name, "bash");
    }
}
