//! Security facts about the machine that compliance checks (and security scans) ask about:
//! whether a host firewall is on, whether the root filesystem is encrypted, whether a systemd
//! unit is active. Each answers `None` when it cannot tell (no systemd, a container's overlay
//! root, another OS) rather than guessing. Read-only: files under `/etc`, `/proc`, `/sys` and
//! `systemctl is-active`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Whether systemd unit `name` is active: `None` without systemd or systemctl.
pub(crate) fn unit_active(name: &str) -> Option<bool> {
    if !(cfg!(target_os = "linux") && Path::new("/run/systemd/system").is_dir()) {
        return None;
    }
    if !crate::exec::services::valid_unit_name(name) {
        return None;
    }
    let out = Command::new("systemctl")
        .args(["is-active", "--", name])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    Some(String::from_utf8_lossy(&out.stdout).trim() == "active")
}

/// `ENABLED=yes` in ufw's configuration: `Some(true|false)`, `None` without ufw.
fn ufw_enabled(conf: &Path) -> Option<bool> {
    let text = std::fs::read_to_string(conf).ok()?;
    let value = text.lines().rev().find_map(|l| {
        let l = l.trim();
        let v = l.strip_prefix("ENABLED=")?;
        Some(
            v.trim_matches(|c| c == '"' || c == '\'')
                .eq_ignore_ascii_case("yes"),
        )
    })?;
    Some(value)
}

/// Whether a host firewall is on: ufw enabled, or the firewalld or nftables service active.
/// `Some(false)` when none is and systemd could be asked; `None` when nothing can tell.
pub(crate) fn firewall_enabled() -> Option<bool> {
    if !cfg!(target_os = "linux") {
        return None;
    }
    let ufw = ufw_enabled(Path::new("/etc/ufw/ufw.conf"));
    if ufw == Some(true) && unit_active("ufw.service") != Some(false) {
        return Some(true);
    }
    let units = ["firewalld.service", "nftables.service", "iptables.service"];
    let mut asked = false;
    for u in units {
        match unit_active(u) {
            Some(true) => return Some(true),
            Some(false) => asked = true,
            None => {}
        }
    }
    (asked || ufw.is_some()).then_some(false)
}

/// The block device the root filesystem is mounted from, per `/proc/self/mounts`.
fn root_source(mounts: &str) -> Option<String> {
    mounts
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (source, target, fstype) = (f.next()?, f.next()?, f.next()?);
            (target == "/").then(|| (source.to_owned(), fstype.to_owned()))
        })
        .next_back()
        .and_then(|(source, fstype)| {
            (source.starts_with("/dev/") && fstype != "overlay").then_some(source)
        })
}

/// Whether the block device `name` (as under `/sys/class/block`) is dm-crypt or sits on one,
/// following `slaves/` down at most a few levels (LVM on LUKS).
fn dm_crypt_below(sys: &Path, name: &str, depth: u32) -> bool {
    let dir = sys.join(name);
    let uuid = std::fs::read_to_string(dir.join("dm/uuid")).unwrap_or_default();
    if uuid.starts_with("CRYPT-") {
        return true;
    }
    if depth == 0 {
        return false;
    }
    let Ok(slaves) = std::fs::read_dir(dir.join("slaves")) else {
        return false;
    };
    slaves
        .flatten()
        .any(|s| dm_crypt_below(sys, &s.file_name().to_string_lossy(), depth - 1))
}

/// Whether the root filesystem is on dm-crypt (directly, or through LVM): `None` when the
/// root is not a block device (containers) or the OS is not Linux.
pub(crate) fn disk_encrypted() -> Option<bool> {
    if !cfg!(target_os = "linux") {
        return None;
    }
    let mounts = std::fs::read_to_string("/proc/self/mounts").ok()?;
    let source = root_source(&mounts)?;
    let dev: PathBuf = std::fs::canonicalize(&source).ok()?;
    let name = dev.file_name()?.to_string_lossy().into_owned();
    let sys = Path::new("/sys/class/block");
    if !sys.join(&name).exists() {
        return None;
    }
    Some(dm_crypt_below(sys, &name, 4))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_source_skips_overlays() {
        let host = "sysfs /sys sysfs rw 0 0\n/dev/mapper/vg-root / ext4 rw 0 0\n";
        assert_eq!(root_source(host).as_deref(), Some("/dev/mapper/vg-root"));
        let container = "overlay / overlay rw,lowerdir=/x 0 0\n";
        assert_eq!(root_source(container), None);
    }

    #[test]
    fn ufw_conf_is_read() {
        let tmp = tempfile::tempdir().expect("temp dir");
        let dir = tmp.path();
        let conf = dir.join("ufw.conf");
        std::fs::write(&conf, "# comment\nENABLED=yes\nLOGLEVEL=low\n").expect("write");
        assert_eq!(ufw_enabled(&conf), Some(true));
        std::fs::write(&conf, "ENABLED=no\n").expect("write");
        assert_eq!(ufw_enabled(&conf), Some(false));
        assert_eq!(ufw_enabled(&dir.join("missing")), None);
    }

    #[test]
    fn dm_crypt_is_found_below_lvm() {
        let tmp = tempfile::tempdir().expect("temp dir");
        let sys = tmp.path();
        for (dev, uuid) in [("dm-1", "LVM-abc"), ("dm-0", "CRYPT-LUKS2-xyz")] {
            std::fs::create_dir_all(sys.join(dev).join("dm")).expect("dir");
            std::fs::write(sys.join(dev).join("dm/uuid"), uuid).expect("write");
        }
        std::fs::create_dir_all(sys.join("dm-1/slaves/dm-0")).expect("dir");
        std::fs::create_dir_all(sys.join("sda1")).expect("dir");
        assert!(dm_crypt_below(sys, "dm-1", 4));
        assert!(!dm_crypt_below(sys, "sda1", 4));
    }
}
