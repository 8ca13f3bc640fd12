//! Read-only probes of the machine's security state, shared by the security scan
//! (`exec::security`) and anything else that asks "is the firewall on?" or "is the disk
//! encrypted?". Every probe works unprivileged where the OS allows and answers `None` ("cannot
//! tell") rather than guessing; the `*_state` forms also return the evidence they decided on.
//!
//! - Firewall: ufw's `ENABLED=` (`/etc/ufw/ufw.conf`), firewalld (`systemctl is-active`), the
//!   nftables ruleset (`nft list ruleset`) and iptables (`iptables -S`), in that order; when no
//!   tool can be asked and the kernel has neither nftables loaded nor any iptables table
//!   (`/sys/module/nf_tables`, `/proc/net/ip{,6}_tables_names`), no packet filter can be on.
//! - Disk encryption: the devices under `/` (and `/home`, `/var` when separate), followed
//!   through device-mapper (`/sys/dev/block/M:m/dm/uuid`, `slaves/`) down to a `CRYPT-` target
//!   (LUKS/dm-crypt, also LVM on LUKS).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// The most a probe's helper program may run.
const TOOL_TIMEOUT: Duration = Duration::from_secs(20);

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

/// What a helper program said: `None` when it is not installed.
#[derive(Debug, Clone)]
pub(crate) struct ToolRun {
    pub program: String,
    pub success: bool,
    pub stdout: String,
    pub stderr: String,
}

/// Runs the first of `names` found (as given, then under `/usr/sbin`, `/sbin`: unprivileged
/// PATHs often lack them) with `args`, at most [`TOOL_TIMEOUT`]. `None`: none is installed.
pub(crate) fn run_tool(names: &[&str], args: &[&str]) -> Option<ToolRun> {
    for name in names {
        let mut candidates: Vec<PathBuf> = Vec::new();
        if name.contains('/') {
            candidates.push(PathBuf::from(name));
        } else {
            for dir in [
                "/usr/sbin",
                "/sbin",
                "/usr/bin",
                "/bin",
                "/usr/local/sbin",
                "/usr/local/bin",
            ] {
                candidates.push(Path::new(dir).join(name));
            }
        }
        for program in candidates {
            if !program.is_file() {
                continue;
            }
            return Some(run_with_timeout(&program, args));
        }
    }
    None
}

fn run_with_timeout(program: &Path, args: &[&str]) -> ToolRun {
    let shown = program.to_string_lossy().into_owned();
    let child = Command::new(program)
        .args(args)
        .env("LC_ALL", "C")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => {
            return ToolRun {
                program: shown,
                success: false,
                stdout: String::new(),
                stderr: e.to_string(),
            };
        }
    };
    let deadline = Instant::now() + TOOL_TIMEOUT;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = child.kill();
                break;
            }
        }
    }
    match child.wait_with_output() {
        Ok(out) => ToolRun {
            program: shown,
            success: out.status.success(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        },
        Err(e) => ToolRun {
            program: shown,
            success: false,
            stdout: String::new(),
            stderr: e.to_string(),
        },
    }
}

/// A probe's answer with what it was decided on.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ProbeState {
    /// `None`: cannot tell.
    pub value: Option<bool>,
    pub evidence: Value,
}

// ---------------------------------------------------------------------------------------------
// Firewall
// ---------------------------------------------------------------------------------------------

/// Whether a host firewall filters incoming traffic (`None`: cannot tell).
#[allow(
    dead_code,
    reason = "the compliance rules' probe; the scan reads firewall_state for its evidence"
)]
pub(crate) fn firewall_enabled() -> Option<bool> {
    firewall_state().value
}

/// `ENABLED=yes|no` of ufw's configuration.
pub(crate) fn parse_ufw_conf(text: &str) -> Option<bool> {
    text.lines().find_map(|l| {
        let (k, v) = l.trim().split_once('=')?;
        (k.trim() == "ENABLED").then(|| v.trim().trim_matches('"').eq_ignore_ascii_case("yes"))
    })
}

/// Whether an `nft list ruleset` filters input: a chain hooked on `input` with policy drop or
/// reject, or holding at least one rule.
pub(crate) fn nft_filters_input(ruleset: &str) -> bool {
    let mut in_input_chain = false;
    let mut rules = 0usize;
    for line in ruleset.lines() {
        let l = line.trim();
        if l.starts_with("chain ") {
            in_input_chain = false;
            continue;
        }
        if l.starts_with("type filter hook input") || l.starts_with("type filter hook prerouting") {
            if l.contains("policy drop") || l.contains("policy reject") {
                return true;
            }
            in_input_chain = l.contains("hook input");
            continue;
        }
        if in_input_chain && !l.is_empty() && l != "}" && !l.starts_with("policy") {
            rules += 1;
        }
    }
    rules > 0
}

/// Whether `iptables -S` output filters input: a DROP/REJECT policy on INPUT or any INPUT rule.
pub(crate) fn iptables_filters_input(rules: &str) -> bool {
    rules.lines().any(|l| {
        let l = l.trim();
        (l.starts_with("-P INPUT") && (l.ends_with("DROP") || l.ends_with("REJECT")))
            || l.starts_with("-A INPUT")
    })
}

/// The kernel's packet-filter facts readable without privileges.
fn kernel_filter_facts() -> Value {
    let tables = |p: &str| -> Option<Vec<String>> {
        std::fs::read_to_string(p).ok().map(|t| {
            t.lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .map(String::from)
                .collect()
        })
    };
    json!({
        "nfTablesModuleLoaded": Path::new("/sys/module/nf_tables").exists(),
        "ipTables": tables("/proc/net/ip_tables_names"),
        "ip6Tables": tables("/proc/net/ip6_tables_names"),
    })
}

/// Whether the kernel facts rule out any packet filter: nftables not loaded and no iptables
/// table (both lists readable and empty).
fn kernel_has_no_filter(facts: &Value) -> bool {
    let empty = |k: &str| facts[k].as_array().is_some_and(Vec::is_empty);
    facts["nfTablesModuleLoaded"] == false && empty("ipTables") && empty("ip6Tables")
}

/// The firewall probe with its evidence.
pub(crate) fn firewall_state() -> ProbeState {
    let mut tools = serde_json::Map::new();
    // ufw
    if let Ok(text) = std::fs::read_to_string("/etc/ufw/ufw.conf") {
        let on = parse_ufw_conf(&text);
        tools.insert("ufw".into(), json!({ "installed": true, "enabled": on }));
        if on == Some(true) {
            return ProbeState {
                value: Some(true),
                evidence: json!({ "source": "ufw", "tools": tools }),
            };
        }
    } else {
        tools.insert("ufw".into(), json!({ "installed": false }));
    }
    // firewalld
    if Path::new("/usr/sbin/firewalld").exists() || Path::new("/usr/bin/firewalld").exists() {
        let active = run_tool(&["systemctl"], &["is-active", "firewalld"])
            .map(|r| r.stdout.trim() == "active");
        tools.insert(
            "firewalld".into(),
            json!({ "installed": true, "active": active }),
        );
        if active == Some(true) {
            return ProbeState {
                value: Some(true),
                evidence: json!({ "source": "firewalld", "tools": tools }),
            };
        }
    } else {
        tools.insert("firewalld".into(), json!({ "installed": false }));
    }
    // nftables, then iptables: the rules themselves (root, or CAP_NET_ADMIN).
    let mut readable = false;
    let mut filtering = false;
    match run_tool(&["nft"], &["list", "ruleset"]) {
        None => {
            tools.insert("nft".into(), json!({ "installed": false }));
        }
        Some(r) if r.success => {
            readable = true;
            let on = nft_filters_input(&r.stdout);
            filtering |= on;
            tools.insert(
                "nft".into(),
                json!({ "installed": true, "path": r.program, "filtersInput": on }),
            );
        }
        Some(r) => {
            tools.insert(
                "nft".into(),
                json!({ "installed": true, "error": r.stderr.trim().chars().take(200).collect::<String>() }),
            );
        }
    }
    match run_tool(&["iptables"], &["-S", "INPUT"]) {
        None => {
            tools.insert("iptables".into(), json!({ "installed": false }));
        }
        Some(r) if r.success => {
            readable = true;
            let on = iptables_filters_input(&r.stdout);
            filtering |= on;
            tools.insert(
                "iptables".into(),
                json!({ "installed": true, "path": r.program, "filtersInput": on }),
            );
        }
        Some(r) => {
            tools.insert(
                "iptables".into(),
                json!({ "installed": true, "error": r.stderr.trim().chars().take(200).collect::<String>() }),
            );
        }
    }
    let kernel = kernel_filter_facts();
    let value = if filtering {
        Some(true)
    } else if readable || kernel_has_no_filter(&kernel) {
        Some(false)
    } else {
        None
    };
    let source = if filtering || readable {
        "rules"
    } else if value.is_some() {
        "kernel"
    } else {
        "none"
    };
    ProbeState {
        value,
        evidence: json!({ "source": source, "tools": tools, "kernel": kernel }),
    }
}

// ---------------------------------------------------------------------------------------------
// Disk encryption
// ---------------------------------------------------------------------------------------------

/// Whether the root filesystem (and `/home`, `/var` when separate) sits on dm-crypt/LUKS
/// (`None`: cannot tell, e.g. an overlay or network root).
#[allow(
    dead_code,
    reason = "the compliance rules' probe; the scan reads disk_encryption_state for its evidence"
)]
pub(crate) fn disk_encrypted() -> Option<bool> {
    disk_encryption_state().value
}

/// One mount of `/proc/self/mountinfo`: mount point, `major:minor`, filesystem type, source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MountEntry {
    pub mount_point: String,
    pub dev: String,
    pub fstype: String,
    pub source: String,
}

/// Parses mountinfo lines (`id parent maj:min root mountpoint opts… - fstype source superopts`).
pub(crate) fn parse_mountinfo(text: &str) -> Vec<MountEntry> {
    text.lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let f: Vec<&str> = left.split_whitespace().collect();
            let r: Vec<&str> = right.split_whitespace().collect();
            Some(MountEntry {
                dev: (*f.get(2)?).to_owned(),
                mount_point: unescape_octal(f.get(4)?),
                fstype: (*r.first()?).to_owned(),
                source: r.get(1).map(|s| (*s).to_owned()).unwrap_or_default(),
            })
        })
        .collect()
}

/// mountinfo escapes spaces and the like as `\040`.
fn unescape_octal(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = |j: usize| b.get(j).is_some_and(|c| (b'0'..=b'7').contains(c));
        if b[i] == b'\\' && octal(i + 1) && octal(i + 2) && octal(i + 3) {
            let n = u32::from(b[i + 1] - b'0') * 64
                + u32::from(b[i + 2] - b'0') * 8
                + u32::from(b[i + 3] - b'0');
            out.push(u8::try_from(n).unwrap_or(b'?'));
            i += 4;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Where a block device sits: `Encrypted` somewhere down its device-mapper chain, `Plain` (a
/// disk or partition with nothing between), or `Unknown`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Layer {
    Encrypted,
    Plain,
    Unknown,
}

/// Follows `/sys/dev/block/<maj:min>` (under `sys`) through device-mapper targets.
pub(crate) fn block_layer(sys: &Path, dev: &str) -> Layer {
    let node = sys.join("dev/block").join(dev);
    let Ok(real) = std::fs::canonicalize(&node) else {
        return Layer::Unknown;
    };
    layer_of(&real, 0)
}

fn layer_of(dir: &Path, depth: u32) -> Layer {
    if depth > 8 {
        return Layer::Unknown;
    }
    if let Ok(uuid) = std::fs::read_to_string(dir.join("dm/uuid")) {
        if uuid.trim_start().starts_with("CRYPT-") {
            return Layer::Encrypted;
        }
        // LVM, multipath, …: encrypted when every device below is.
        let Ok(slaves) = std::fs::read_dir(dir.join("slaves")) else {
            return Layer::Unknown;
        };
        let below: Vec<Layer> = slaves
            .filter_map(Result::ok)
            .map(|e| {
                std::fs::canonicalize(e.path()).map_or(Layer::Unknown, |p| layer_of(&p, depth + 1))
            })
            .collect();
        return if below.is_empty() {
            Layer::Unknown
        } else if below.iter().all(|l| *l == Layer::Encrypted) {
            Layer::Encrypted
        } else if below.contains(&Layer::Unknown) {
            Layer::Unknown
        } else {
            Layer::Plain
        };
    }
    // md RAID: through its members too.
    if let Ok(slaves) = std::fs::read_dir(dir.join("slaves")) {
        let below: Vec<Layer> = slaves
            .filter_map(Result::ok)
            .map(|e| {
                std::fs::canonicalize(e.path()).map_or(Layer::Unknown, |p| layer_of(&p, depth + 1))
            })
            .collect();
        if !below.is_empty() {
            return if below.iter().all(|l| *l == Layer::Encrypted) {
                Layer::Encrypted
            } else if below.contains(&Layer::Unknown) {
                Layer::Unknown
            } else {
                Layer::Plain
            };
        }
    }
    if dir.join("dev").exists() {
        Layer::Plain
    } else {
        Layer::Unknown
    }
}

/// The mounts that hold the system's data: `/`, and `/home`, `/var` when separate.
const DATA_MOUNTS: &[&str] = &["/", "/home", "/var"];

/// Filesystems whose encryption a block device cannot tell.
const VIRTUAL_FS: &[&str] = &[
    "overlay", "tmpfs", "nfs", "nfs4", "cifs", "fuse", "9p", "virtiofs",
];

/// Decides from mountinfo text and a sysfs root (injectable for tests).
pub(crate) fn disk_encryption_from(mountinfo: &str, sys: &Path) -> ProbeState {
    let mounts = parse_mountinfo(mountinfo);
    let mut volumes = Vec::new();
    let mut verdicts = Vec::new();
    for want in DATA_MOUNTS {
        // The last mount on a point is the visible one.
        let Some(m) = mounts.iter().rev().find(|m| m.mount_point == *want) else {
            continue;
        };
        let layer = if VIRTUAL_FS.iter().any(|v| m.fstype.starts_with(v)) || m.fstype == "zfs" {
            Layer::Unknown
        } else {
            block_layer(sys, &m.dev)
        };
        verdicts.push(layer);
        volumes.push(json!({
            "mount": m.mount_point,
            "device": m.source,
            "fsType": m.fstype,
            "majorMinor": m.dev,
            "encrypted": match layer {
                Layer::Encrypted => Some(true),
                Layer::Plain => Some(false),
                Layer::Unknown => None,
            },
        }));
    }
    let value = if verdicts.is_empty() {
        None
    } else if verdicts.contains(&Layer::Plain) {
        Some(false)
    } else if verdicts.iter().all(|l| *l == Layer::Encrypted) {
        Some(true)
    } else {
        None
    };
    ProbeState {
        value,
        evidence: json!({ "volumes": volumes }),
    }
}

/// The disk-encryption probe with its evidence.
pub(crate) fn disk_encryption_state() -> ProbeState {
    match std::fs::read_to_string("/proc/self/mountinfo") {
        Ok(text) => disk_encryption_from(&text, Path::new("/sys")),
        Err(e) => ProbeState {
            value: None,
            evidence: json!({ "error": format!("cannot read /proc/self/mountinfo: {e}") }),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NFT_DROP: &str = "table inet filter {\n\tchain input {\n\t\ttype filter hook input priority filter; policy drop;\n\t\tct state established,related accept\n\t\tiif \"lo\" accept\n\t}\n\tchain forward {\n\t\ttype filter hook forward priority filter; policy drop;\n\t}\n}\n";
    const NFT_ACCEPT_EMPTY: &str = "table inet filter {\n\tchain input {\n\t\ttype filter hook input priority filter; policy accept;\n\t}\n\tchain output {\n\t\ttype filter hook output priority filter; policy accept;\n\t\tip daddr 10.0.0.1 drop\n\t}\n}\n";
    const NFT_ACCEPT_RULES: &str = "table inet filter {\n\tchain input {\n\t\ttype filter hook input priority filter; policy accept;\n\t\ttcp dport 23 drop\n\t}\n}\n";

    #[test]
    fn nft_rulesets_are_read() {
        assert!(nft_filters_input(NFT_DROP));
        assert!(
            !nft_filters_input(NFT_ACCEPT_EMPTY),
            "output rules do not count"
        );
        assert!(nft_filters_input(NFT_ACCEPT_RULES));
        assert!(!nft_filters_input(""));
    }

    #[test]
    fn iptables_rules_are_read() {
        assert!(!iptables_filters_input("-P INPUT ACCEPT\n"));
        assert!(iptables_filters_input("-P INPUT DROP\n"));
        assert!(iptables_filters_input(
            "-P INPUT ACCEPT\n-A INPUT -p tcp --dport 22 -j ACCEPT\n"
        ));
    }

    #[test]
    fn ufw_conf_is_read() {
        assert_eq!(
            parse_ufw_conf("# c\nENABLED=yes\nLOGLEVEL=low\n"),
            Some(true)
        );
        assert_eq!(parse_ufw_conf("ENABLED=no\n"), Some(false));
        assert_eq!(parse_ufw_conf("LOGLEVEL=low\n"), None);
    }

    #[test]
    fn kernel_facts_rule_out_a_filter_only_when_all_are_empty() {
        let none = json!({ "nfTablesModuleLoaded": false, "ipTables": [], "ip6Tables": [] });
        assert!(kernel_has_no_filter(&none));
        let nft = json!({ "nfTablesModuleLoaded": true, "ipTables": [], "ip6Tables": [] });
        assert!(!kernel_has_no_filter(&nft));
        let ipt = json!({ "nfTablesModuleLoaded": false, "ipTables": ["filter"], "ip6Tables": [] });
        assert!(!kernel_has_no_filter(&ipt));
        let unreadable =
            json!({ "nfTablesModuleLoaded": false, "ipTables": null, "ip6Tables": [] });
        assert!(!kernel_has_no_filter(&unreadable));
    }

    const MOUNTINFO: &str = "27 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n\
        30 27 253:1 / /home rw - ext4 /dev/mapper/home rw\n\
        31 27 0:25 / /run rw - tmpfs tmpfs rw\n\
        40 27 0:40 / /mnt/my\\040disk rw - ext4 /dev/sdb1 rw\n";

    #[test]
    fn mountinfo_parses() {
        let m = parse_mountinfo(MOUNTINFO);
        assert_eq!(m.len(), 4);
        assert_eq!(m[0].dev, "254:0");
        assert_eq!(m[0].mount_point, "/");
        assert_eq!(m[1].source, "/dev/mapper/home");
        assert_eq!(m[3].mount_point, "/mnt/my disk");
    }

    /// A fake sysfs: `vda` a plain disk, `dm-0` a LUKS mapping on `vdb`, `dm-1` LVM on `dm-0`,
    /// `dm-2` LVM on the plain `vdc`.
    fn fake_sys(root: &Path) {
        use std::os::unix::fs::symlink;
        let block = root.join("devices/virtual/block");
        let disks = root.join("devices/pci/block");
        for d in ["vda", "vdb", "vdc"] {
            std::fs::create_dir_all(disks.join(d)).unwrap_or_default();
            std::fs::write(disks.join(d).join("dev"), "x").unwrap_or_default();
        }
        for (dm, uuid, slave) in [
            ("dm-0", "CRYPT-LUKS2-abc-vdb_crypt", disks.join("vdb")),
            ("dm-1", "LVM-xyz", block.join("dm-0")),
            ("dm-2", "LVM-uvw", disks.join("vdc")),
        ] {
            let d = block.join(dm);
            std::fs::create_dir_all(d.join("dm")).unwrap_or_default();
            std::fs::create_dir_all(d.join("slaves")).unwrap_or_default();
            std::fs::write(d.join("dm/uuid"), uuid).unwrap_or_default();
            std::fs::write(d.join("dev"), "x").unwrap_or_default();
            symlink(&slave, d.join("slaves").join("s")).unwrap_or_default();
        }
        let devblock = root.join("dev/block");
        std::fs::create_dir_all(&devblock).unwrap_or_default();
        for (mm, target) in [
            ("254:0", disks.join("vda")),
            ("253:0", block.join("dm-0")),
            ("253:1", block.join("dm-1")),
            ("253:2", block.join("dm-2")),
        ] {
            symlink(target, devblock.join(mm)).unwrap_or_default();
        }
    }

    #[test]
    fn dm_crypt_is_followed_through_lvm() {
        let dir = tempfile::tempdir().expect("temp dir");
        fake_sys(dir.path());
        assert_eq!(block_layer(dir.path(), "254:0"), Layer::Plain);
        assert_eq!(block_layer(dir.path(), "253:0"), Layer::Encrypted);
        assert_eq!(block_layer(dir.path(), "253:1"), Layer::Encrypted);
        assert_eq!(block_layer(dir.path(), "253:2"), Layer::Plain);
        assert_eq!(block_layer(dir.path(), "9:9"), Layer::Unknown);

        let encrypted = "1 0 253:1 / / rw - ext4 /dev/mapper/vg-root rw\n";
        let s = disk_encryption_from(encrypted, dir.path());
        assert_eq!(s.value, Some(true), "{}", s.evidence);
        let mixed = "1 0 253:1 / / rw - ext4 /dev/mapper/vg-root rw\n2 1 254:0 / /home rw - ext4 /dev/vda rw\n";
        assert_eq!(disk_encryption_from(mixed, dir.path()).value, Some(false));
        let overlay = "1 0 0:50 / / rw - overlay overlay rw\n";
        assert_eq!(disk_encryption_from(overlay, dir.path()).value, None);
        assert_eq!(disk_encryption_from("", dir.path()).value, None);
    }

    /// On this machine the probes answer from the machine (whatever it is): the root mount is
    /// among the evidence, and the firewall names the tools it tried.
    #[test]
    fn the_real_machine_answers() {
        let d = disk_encryption_state();
        let volumes = d.evidence["volumes"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert!(volumes.iter().any(|v| v["mount"] == "/"), "{}", d.evidence);
        assert_eq!(disk_encrypted(), d.value);
        let f = firewall_state();
        for tool in ["ufw", "firewalld", "nft", "iptables"] {
            assert!(f.evidence["tools"].get(tool).is_some(), "{}", f.evidence);
        }
    }
}
