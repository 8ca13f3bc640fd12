//! Facts about the machine: the OS, inventory, metrics samples and heartbeat contents.

pub mod heartbeat;
pub mod inventory;
pub mod metrics;
pub(crate) mod probes;

use breeze_agent_proto::OsInfo;

/// `linux`, `windows` or `macos` (or the target's own name elsewhere).
pub fn os_family() -> &'static str {
    match std::env::consts::OS {
        "macos" => "macos",
        other => other,
    }
}

/// The OS description sent at enrollment and in inventory.
pub fn os_info() -> OsInfo {
    let release = std::fs::read_to_string("/etc/os-release")
        .map(|text| parse_os_release(&text))
        .unwrap_or_default();
    let lookup = |key: &str| {
        release
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
    };
    OsInfo {
        family: os_family().to_owned(),
        name: lookup("NAME")
            .or_else(sysinfo::System::name)
            .unwrap_or_else(|| std::env::consts::OS.to_owned()),
        version: lookup("VERSION_ID")
            .or_else(sysinfo::System::os_version)
            .unwrap_or_default(),
        kernel: sysinfo::System::kernel_version().unwrap_or_default(),
        arch: std::env::consts::ARCH.to_owned(),
    }
}

/// `KEY=value` pairs of an os-release file, quotes removed.
pub fn parse_os_release(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|line| {
            let line = line.trim();
            if line.starts_with('#') {
                return None;
            }
            let (key, value) = line.split_once('=')?;
            let value = value.trim().trim_matches('"').trim_matches('\'').to_owned();
            Some((key.trim().to_owned(), value))
        })
        .collect()
}

/// The machine's hostname.
pub fn hostname() -> String {
    sysinfo::System::host_name().unwrap_or_else(|| "unknown".to_owned())
}

/// A stable machine id (`/etc/machine-id` on Linux), when there is one.
pub fn machine_id() -> Option<String> {
    ["/etc/machine-id", "/var/lib/dbus/machine-id"]
        .iter()
        .find_map(|p| std::fs::read_to_string(p).ok())
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn os_release_parses() {
        let parsed = parse_os_release(
            "PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nNAME=\"Debian GNU/Linux\"\nVERSION_ID=\"12\"\n# c\n",
        );
        assert!(parsed.contains(&("NAME".into(), "Debian GNU/Linux".into())));
        assert!(parsed.contains(&("VERSION_ID".into(), "12".into())));
        let info = os_info();
        assert!(!info.arch.is_empty());
        assert_eq!(info.family, os_family());
    }
}
