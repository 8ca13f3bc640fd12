//! Hardware and software inventory: CPU, memory, disks, interfaces, OS, boot time, packages.
//! Collection blocks (sysinfo, `dpkg-query`): call it from a blocking task.

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

/// Collects the inventory now (blocking; runs `dpkg-query` or `rpm`, or reads apk's database).
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

/// Installed packages from dpkg, rpm or apk, read as the `packages` live query reads them
/// (installed only, rpm versions with their epoch, each with its source package); `None` when
/// there is no package manager.
pub fn packages() -> Option<Vec<Package>> {
    crate::exec::livequery::installed_packages()
        .ok()
        .map(inventory_packages)
}

/// The inventory's view of installed packages: sorted by name, one entry per name and version
/// (several architectures of one package are one), the source kept only when it names another
/// package.
fn inventory_packages(list: Vec<crate::exec::livequery::InstalledPackage>) -> Vec<Package> {
    let mut out: Vec<Package> = list
        .into_iter()
        .map(|p| Package {
            source: p.source_package.filter(|s| *s != p.name),
            name: p.name,
            version: p.version,
        })
        .collect();
    out.sort_by(|a, b| (&a.name, &a.version).cmp(&(&b.name, &b.version)));
    out.dedup_by(|a, b| a.name == b.name && a.version == b.version);
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
    fn installed_packages_with_their_sources() {
        use crate::exec::livequery::{parse_dpkg, parse_rpm};
        let dpkg = inventory_packages(parse_dpkg(
            "ii \tlibssl3\t3.0.11-1~deb12u2\tamd64\topenssl\n\
             ii \tbash\t5.2.15-2+b2\tamd64\tbash\n\
             rc \told-kernel\t6.1.0-9\tamd64\tlinux-signed-amd64\n\
             ii \tlibc6\t2.36-9\tamd64\tglibc\n\
             ii \tlibc6\t2.36-9\ti386\tglibc\n",
        ));
        let names: Vec<_> = dpkg
            .iter()
            .map(|p| (p.name.as_str(), p.source.as_deref()))
            .collect();
        assert_eq!(
            names,
            [
                ("bash", None),
                ("libc6", Some("glibc")),
                ("libssl3", Some("openssl"))
            ],
            "installed only, one per architecture, a source only when it differs"
        );
        let rpm = inventory_packages(parse_rpm(
            "openssl-libs\t1:3.0.7-27.el9\tx86_64\topenssl-3.0.7-27.el9.src.rpm\n\
             python3-libs\t3.9.18-3.el9\tx86_64\tpython3.9-3.9.18-3.el9.src.rpm\n",
        ));
        assert_eq!(rpm[0].source.as_deref(), Some("openssl"));
        assert_eq!(rpm[0].version, "1:3.0.7-27.el9", "with its epoch");
        assert_eq!(rpm[1].source.as_deref(), Some("python3.9"));
    }
}
