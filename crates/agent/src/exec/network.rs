//! `NetworkDiscovery`: a sweep of an IPv4 range (at most /22), the ARP table, or both plus
//! the common open ports of the hosts found.
//!
//! "Ping" needs no raw sockets: a host is alive when a TCP connection to one of a few common
//! ports is accepted or actively refused; otherwise `ping -c1 -W1` is tried when it exists.
//! Hosts are probed 64 at a time and progress is reported as they complete.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use breeze_agent_proto::{CommandProgress, DiscoveryMode};
use futures::StreamExt;
use serde_json::{Value, json};
use uuid::Uuid;

use super::{Progress, Typed};

/// Smallest prefix (largest range) a sweep accepts.
pub const MIN_PREFIX: u8 = 22;
/// Ports probed to decide a host is alive.
const LIVENESS_PORTS: &[u16] = &[80, 443, 22, 445, 139, 3389];
/// Ports reported open in `full` mode.
pub const COMMON_PORTS: &[u16] = &[
    21, 22, 23, 25, 53, 80, 110, 135, 139, 143, 443, 445, 3306, 3389, 5432, 5900, 8080, 8443,
];
const CONCURRENCY: usize = 64;
const CONNECT_TIMEOUT: Duration = Duration::from_millis(600);

/// Parses `a.b.c.d/n` (IPv4, `n` ≥ 22) into the hosts to probe: every address but the network
/// and broadcast addresses (all of them for /31 and /32).
pub fn parse_cidr(cidr: &str) -> Result<Vec<Ipv4Addr>, String> {
    let (addr, prefix) = cidr
        .trim()
        .split_once('/')
        .ok_or_else(|| format!("{cidr:?} is not in CIDR form (a.b.c.d/n)"))?;
    let addr: Ipv4Addr = addr
        .parse()
        .map_err(|_| format!("{cidr:?}: only IPv4 ranges can be swept"))?;
    let prefix: u8 = prefix
        .parse()
        .ok()
        .filter(|p| *p <= 32)
        .ok_or_else(|| format!("{cidr:?}: the prefix length must be 0–32"))?;
    if prefix < MIN_PREFIX {
        return Err(format!(
            "{cidr} is too large to sweep: at most /{MIN_PREFIX} (1024 addresses)"
        ));
    }
    let mask = if prefix == 0 {
        0
    } else {
        u32::MAX << (32 - prefix)
    };
    let network = u32::from(addr) & mask;
    let size = 1u32 << (32 - prefix);
    let hosts = if prefix >= 31 {
        (0..size).map(|i| Ipv4Addr::from(network + i)).collect()
    } else {
        (1..size - 1).map(|i| Ipv4Addr::from(network + i)).collect()
    };
    Ok(hosts)
}

/// An ARP table row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArpEntry {
    pub ip: Ipv4Addr,
    pub mac: String,
    pub device: String,
}

/// Parses `/proc/net/arp`, keeping complete entries only.
pub fn parse_arp(text: &str) -> Vec<ArpEntry> {
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let cols: Vec<&str> = line.split_whitespace().collect();
            if cols.len() < 6 {
                return None;
            }
            let ip: Ipv4Addr = cols[0].parse().ok()?;
            let flags = u32::from_str_radix(cols[2].trim_start_matches("0x"), 16).ok()?;
            let mac = cols[3].to_lowercase();
            if flags & 0x2 == 0 || mac == "00:00:00:00:00:00" {
                return None;
            }
            Some(ArpEntry {
                ip,
                mac,
                device: cols[5].to_owned(),
            })
        })
        .collect()
}

fn read_arp() -> Vec<ArpEntry> {
    std::fs::read_to_string("/proc/net/arp")
        .map(|t| parse_arp(&t))
        .unwrap_or_default()
}

/// The primary interface's IPv4 network, narrowed to the /24 around the address when larger
/// than /22.
pub fn primary_network() -> Option<String> {
    let interfaces = crate::system::inventory::interfaces();
    let skip = [
        "lo", "docker", "veth", "br-", "virbr", "cni", "flannel", "tun", "tap",
    ];
    interfaces
        .iter()
        .filter(|i| !skip.iter().any(|s| i.name.starts_with(s)))
        .flat_map(|i| i.addresses.iter())
        .find_map(|a| {
            let (ip, prefix) = a.split_once('/')?;
            let ip: Ipv4Addr = ip.parse().ok()?;
            let prefix: u8 = prefix.parse().ok()?;
            if ip.is_loopback() || ip.is_link_local() || prefix == 0 {
                return None;
            }
            let prefix = if prefix < MIN_PREFIX { 24 } else { prefix };
            Some(format!("{ip}/{prefix}"))
        })
}

async fn connect(ip: Ipv4Addr, port: u16) -> Option<bool> {
    let addr = SocketAddr::new(IpAddr::V4(ip), port);
    match tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::TcpStream::connect(addr)).await {
        Ok(Ok(_)) => Some(true),
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => Some(false),
        _ => None,
    }
}

async fn alive(ip: Ipv4Addr, ping_exists: &AtomicBool) -> bool {
    let probes = LIVENESS_PORTS.iter().map(|p| connect(ip, *p));
    if futures::future::join_all(probes)
        .await
        .iter()
        .any(Option::is_some)
    {
        return true;
    }
    if !ping_exists.load(Ordering::Relaxed) {
        return false;
    }
    let run = tokio::process::Command::new("ping")
        .args(["-c1", "-W1", &ip.to_string()])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .status()
        .await;
    match run {
        Ok(status) => status.success(),
        Err(e) => {
            if e.kind() == std::io::ErrorKind::NotFound {
                ping_exists.store(false, Ordering::Relaxed);
            }
            false
        }
    }
}

async fn open_ports(ip: Ipv4Addr) -> Vec<u16> {
    let probes = COMMON_PORTS
        .iter()
        .map(|p| async move { (*p, connect(ip, *p).await) });
    futures::future::join_all(probes)
        .await
        .into_iter()
        .filter_map(|(p, r)| (r == Some(true)).then_some(p))
        .collect()
}

async fn reverse_name(ip: Ipv4Addr) -> Option<String> {
    let out = tokio::time::timeout(
        Duration::from_secs(2),
        tokio::process::Command::new("getent")
            .args(["hosts", &ip.to_string()])
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .ok()?
    .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.split_whitespace().nth(1).map(str::to_owned)
}

#[derive(Debug, Default)]
struct Host {
    mac: Option<String>,
    alive: Option<bool>,
    open_ports: Vec<u16>,
}

/// Runs a discovery; `progress` hears about each batch of hosts completed.
pub async fn discover(
    id: Uuid,
    mode: DiscoveryMode,
    cidr: Option<&str>,
    progress: Progress,
) -> Typed {
    let cidr = match cidr {
        Some(c) => c.to_owned(),
        None if mode == DiscoveryMode::Arp => String::new(),
        None => primary_network()
            .ok_or("no cidr given and no primary IPv4 network was found on this machine")?,
    };
    let targets = if cidr.is_empty() {
        Vec::new()
    } else {
        parse_cidr(&cidr)?
    };
    let mut hosts: BTreeMap<Ipv4Addr, Host> = BTreeMap::new();
    if matches!(mode, DiscoveryMode::Arp | DiscoveryMode::Full) {
        for entry in read_arp() {
            if mode == DiscoveryMode::Full && !targets.contains(&entry.ip) {
                continue;
            }
            let host = hosts.entry(entry.ip).or_default();
            host.mac = Some(entry.mac);
            host.alive = Some(true);
        }
    }
    if matches!(mode, DiscoveryMode::Ping | DiscoveryMode::Full) {
        let total = targets.len();
        let done = Arc::new(AtomicUsize::new(0));
        let ping_exists = Arc::new(AtomicBool::new(true));
        let results: Vec<(Ipv4Addr, bool)> = futures::stream::iter(targets.iter().copied())
            .map(|ip| {
                let done = done.clone();
                let ping_exists = ping_exists.clone();
                let progress = progress.clone();
                async move {
                    let up = alive(ip, &ping_exists).await;
                    let n = done.fetch_add(1, Ordering::Relaxed) + 1;
                    if n.is_multiple_of(16) || n == total {
                        progress(CommandProgress {
                            command_id: id,
                            progress: n as f64,
                            total: Some(total as f64),
                            message: Some(format!("{n} of {total} hosts probed")),
                        });
                    }
                    (ip, up)
                }
            })
            .buffer_unordered(CONCURRENCY)
            .collect()
            .await;
        for (ip, up) in results {
            if up {
                hosts.entry(ip).or_default().alive = Some(true);
            }
        }
    }
    if mode == DiscoveryMode::Full {
        let alive_ips: Vec<Ipv4Addr> = hosts
            .iter()
            .filter(|(_, h)| h.alive == Some(true))
            .map(|(ip, _)| *ip)
            .collect();
        let scanned: Vec<(Ipv4Addr, Vec<u16>)> = futures::stream::iter(alive_ips)
            .map(|ip| async move { (ip, open_ports(ip).await) })
            .buffer_unordered(8)
            .collect()
            .await;
        for (ip, ports) in scanned {
            if let Some(host) = hosts.get_mut(&ip) {
                host.open_ports = ports;
            }
        }
    }
    let mut out: Vec<Value> = Vec::new();
    for (ip, host) in hosts {
        out.push(json!({
            "ip": ip.to_string(),
            "mac": host.mac,
            "hostname": reverse_name(ip).await,
            "alive": host.alive.unwrap_or(false),
            "openPorts": host.open_ports,
        }));
    }
    Ok(
        json!({ "cidr": if cidr.is_empty() { Value::Null } else { json!(cidr) }, "mode": mode, "hosts": out }),
    )
}
