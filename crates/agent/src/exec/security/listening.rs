//! The listening-services check: TCP and UDP listeners from `/proc/net`, their owning
//! processes, and the ones on ports that should not face a network.

use super::*;

/// A listening socket from `/proc/net`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Listener {
    pub protocol: &'static str,
    pub address: String,
    pub port: u16,
    pub uid: u32,
    pub inode: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub process: Option<String>,
}

impl Listener {
    /// Whether the socket is bound beyond loopback.
    pub fn exposed(&self) -> bool {
        !(self.address.starts_with("127.")
            || self.address == "::1"
            || self.address.starts_with("::ffff:127."))
    }
}

/// The address of `/proc/net` hex (`0100007F` is 127.0.0.1; IPv6 is four host-order words).
fn parse_hex_addr(hex: &str) -> Option<String> {
    match hex.len() {
        8 => {
            let n = u32::from_str_radix(hex, 16).ok()?;
            Some(std::net::Ipv4Addr::from(n.to_le_bytes()).to_string())
        }
        32 => {
            let mut bytes = [0u8; 16];
            for w in 0..4 {
                let word = u32::from_str_radix(&hex[w * 8..w * 8 + 8], 16).ok()?;
                bytes[w * 4..w * 4 + 4].copy_from_slice(&word.to_le_bytes());
            }
            Some(std::net::Ipv6Addr::from(bytes).to_string())
        }
        _ => None,
    }
}

/// Listening sockets of one `/proc/net/{tcp,tcp6,udp,udp6}` table: TCP in state `0A`
/// (LISTEN), UDP in state `07` bound with no peer.
pub fn parse_proc_net(text: &str, protocol: &'static str) -> Vec<Listener> {
    let udp = protocol.starts_with("udp");
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 10 {
                return None;
            }
            let (addr, port) = f[1].split_once(':')?;
            let remote_port = f[2].split_once(':').map(|(_, p)| p).unwrap_or("");
            let listening = if udp {
                f[3] == "07" && remote_port == "0000"
            } else {
                f[3] == "0A"
            };
            if !listening {
                return None;
            }
            Some(Listener {
                protocol,
                address: parse_hex_addr(addr)?,
                port: u16::from_str_radix(port, 16).ok()?,
                uid: f[7].parse().ok()?,
                inode: f[9].parse().ok()?,
                process: None,
            })
        })
        .collect()
}

/// Socket inode → process name, from `/proc/<pid>/fd` (all processes as root, one's own
/// otherwise), at most 5000 processes.
fn socket_owners(proc: &Path, wanted: &HashSet<u64>) -> HashMap<u64, String> {
    let mut out = HashMap::new();
    let Ok(entries) = std::fs::read_dir(proc) else {
        return out;
    };
    for entry in entries.filter_map(Result::ok).take(5000) {
        let name = entry.file_name();
        if !name.to_string_lossy().bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(fds) = std::fs::read_dir(entry.path().join("fd")) else {
            continue;
        };
        let comm = std::fs::read_to_string(entry.path().join("comm"))
            .map(|c| c.trim().to_owned())
            .unwrap_or_default();
        for fd in fds.filter_map(Result::ok) {
            if let Ok(target) = std::fs::read_link(fd.path()) {
                let t = target.to_string_lossy();
                if let Some(inode) = t
                    .strip_prefix("socket:[")
                    .and_then(|r| r.strip_suffix(']'))
                    .and_then(|n| n.parse::<u64>().ok())
                    && wanted.contains(&inode)
                {
                    out.entry(inode).or_insert_with(|| comm.clone());
                }
            }
        }
    }
    out
}

/// The listening-services finding from the parsed listeners.
pub fn listening_finding(listeners: &[Listener], tables_read: usize) -> Check {
    let exposed: Vec<&Listener> = listeners.iter().filter(|l| l.exposed()).collect();
    let risky: Vec<Value> = exposed
        .iter()
        .filter_map(|l| {
            RISKY_PORTS
                .iter()
                .find(|(p, _)| *p == l.port)
                .map(|(_, svc)| json!({ "protocol": l.protocol, "address": l.address, "port": l.port, "service": svc, "process": l.process }))
        })
        .collect();
    let evidence = json!({
        "listeners": listeners,
        "exposedCount": exposed.len(),
        "riskyExposed": risky,
        "tablesRead": tables_read,
    });
    if tables_read == 0 {
        return check(
            "listening_services",
            "unknown",
            "low",
            "Could not read /proc/net",
            evidence,
        );
    }
    if risky.is_empty() {
        check(
            "listening_services",
            "pass",
            "info",
            format!(
                "{} listening socket(s), {} beyond loopback, none on a risky port",
                listeners.len(),
                exposed.len()
            ),
            evidence,
        )
    } else {
        let telnet = risky.iter().any(|r| r["port"] == 23);
        check(
            "listening_services",
            "fail",
            if telnet { "high" } else { "medium" },
            format!("{} risky service(s) listening beyond loopback", risky.len()),
            evidence,
        )
    }
}

pub(super) fn listening_check() -> Check {
    let mut all = Vec::new();
    let mut read = 0;
    for (file, proto) in [
        ("tcp", "tcp"),
        ("tcp6", "tcp6"),
        ("udp", "udp"),
        ("udp6", "udp6"),
    ] {
        if let Ok(text) = std::fs::read_to_string(Path::new("/proc/net").join(file)) {
            read += 1;
            all.extend(parse_proc_net(&text, proto));
        }
    }
    let wanted: HashSet<u64> = all.iter().map(|l| l.inode).collect();
    let owners = socket_owners(Path::new("/proc"), &wanted);
    for l in &mut all {
        l.process = owners.get(&l.inode).cloned();
    }
    all.sort_by(|a, b| (a.port, a.protocol, &a.address).cmp(&(b.port, b.protocol, &b.address)));
    all.dedup_by(|a, b| a.port == b.port && a.protocol == b.protocol && a.address == b.address);
    listening_finding(&all, read)
}
