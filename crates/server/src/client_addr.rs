//! The address of the client behind a request: the connection's peer, or, when that peer is a
//! proxy the operator trusts (`BREEZE_TRUSTED_PROXIES`), the address the proxy says it received
//! the request from. Per-address limits (sign-in, enrollment, client registration and metadata
//! fetches) count by it; without it every client behind a load balancer would share one count.
//!
//! `X-Forwarded-For` is read from the right. Each proxy appends the address it received the
//! request from, so the rightmost entry that is not itself a trusted proxy is the first address
//! no trusted party vouched past; whatever a client wrote into the header sits to its left and
//! is never believed. A peer that is not trusted, or a header that is missing or malformed,
//! leaves the peer's own address.

use std::net::IpAddr;

use ipnet::IpNet;

/// The proxies whose `X-Forwarded-For` is believed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TrustedProxies(Vec<IpNet>);

impl TrustedProxies {
    /// A comma-separated list of addresses and networks (`10.0.0.0/8, 127.0.0.1, ::1`); empty
    /// trusts none. The error names the entry that is neither.
    pub fn parse(list: &str) -> Result<Self, String> {
        list.split(',')
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .map(|e| {
                e.parse::<IpNet>()
                    .or_else(|_| e.parse::<IpAddr>().map(IpNet::from))
                    .map_err(|_| format!("{e:?} is not an IP address or network (CIDR)"))
            })
            .collect::<Result<_, _>>()
            .map(Self)
    }

    fn trusts(&self, ip: IpAddr) -> bool {
        self.0.iter().any(|net| net.contains(&ip))
    }

    /// The client's address for a connection from `peer` carrying the `X-Forwarded-For`
    /// header lines `forwarded` (in the order received).
    pub fn client<'a>(&self, peer: IpAddr, forwarded: impl Iterator<Item = &'a str>) -> IpAddr {
        let peer = peer.to_canonical();
        if !self.trusts(peer) {
            return peer;
        }
        let hops: Vec<&str> = forwarded.flat_map(|line| line.split(',')).collect();
        let mut client = peer;
        for hop in hops.iter().rev() {
            let Ok(ip) = hop.trim().parse::<IpAddr>().map(|ip| ip.to_canonical()) else {
                // A hop a trusted proxy did not write: believe nothing further left.
                return client;
            };
            client = ip;
            if !self.trusts(ip) {
                return ip;
            }
        }
        client
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn only_what_trusted_proxies_vouch_for_is_believed() {
        let trusted = TrustedProxies::parse("10.0.0.0/8, 192.0.2.1, ::1").unwrap();
        let client = |peer: &str, lines: &[&str]| trusted.client(ip(peer), lines.iter().copied());
        // No proxy in front: the header is the client's own claim.
        assert_eq!(client("203.0.113.9", &["198.51.100.1"]), ip("203.0.113.9"));
        // One trusted proxy: the address it appended.
        assert_eq!(client("10.0.0.5", &["198.51.100.1"]), ip("198.51.100.1"));
        // A client that wrote its own entry first is still counted by what the proxy saw.
        assert_eq!(
            client("10.0.0.5", &["1.2.3.4, 198.51.100.1"]),
            ip("198.51.100.1")
        );
        // Two trusted proxies (two header lines), then the client.
        assert_eq!(
            client("10.0.0.5", &["1.2.3.4, 198.51.100.1", "192.0.2.1"]),
            ip("198.51.100.1")
        );
        // Garbage where the client wrote: the nearest address a trusted proxy vouched for.
        assert_eq!(
            client("10.0.0.5", &["not-an-ip, 192.0.2.1"]),
            ip("192.0.2.1")
        );
        // A trusted peer without the header is the client (a health check from the balancer).
        assert_eq!(client("10.0.0.5", &[]), ip("10.0.0.5"));
        // IPv4 mapped into IPv6 (a dual-stack listener) is read as IPv4.
        assert_eq!(
            client("::ffff:10.0.0.5", &["2001:db8::7"]),
            ip("2001:db8::7")
        );
        assert_eq!(
            TrustedProxies::parse("10.0.0.0/8, proxy.local").unwrap_err(),
            "\"proxy.local\" is not an IP address or network (CIDR)"
        );
        assert_eq!(
            TrustedProxies::parse(" ").unwrap(),
            TrustedProxies::default()
        );
    }
}
