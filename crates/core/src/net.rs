//! Which network addresses are public: the one judgement the egress guards (OAuth metadata
//! documents, tool sources) make on every address they would connect to. Pure: no lookups.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Whether `ip` is a public unicast address: not loopback, private, link-local, CGNAT,
/// unspecified, multicast, broadcast, documentation, benchmarking or reserved — for IPv6 also
/// unique-local, and the IPv4 address inside mapped, compatible, NAT64 and 6to4 forms judged as
/// IPv4.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(a) => public_v4(a),
        IpAddr::V6(a) => public_v6(a),
    }
}

fn public_v4(a: Ipv4Addr) -> bool {
    let [o0, o1, o2, _] = a.octets();
    !(a.is_unspecified()
        || a.is_loopback()
        || a.is_private()
        || a.is_link_local()
        || a.is_broadcast()
        || a.is_multicast()
        || a.is_documentation()
        || o0 == 0
        || (o0 == 100 && (64..128).contains(&o1)) // CGNAT 100.64/10
        || (o0 == 192 && o1 == 0 && o2 == 0) // IETF protocol assignments
        || (o0 == 198 && (o1 == 18 || o1 == 19)) // benchmarking
        || o0 >= 240) // reserved
}

fn public_v6(a: Ipv6Addr) -> bool {
    let s = a.segments();
    if let Some(v4) = a.to_ipv4_mapped() {
        return public_v4(v4);
    }
    let embedded =
        |hi: u16, lo: u16| Ipv4Addr::new((hi >> 8) as u8, hi as u8, (lo >> 8) as u8, lo as u8);
    // IPv4-compatible ::a.b.c.d (deprecated, still routed by some stacks).
    if s[..6] == [0; 6] {
        return !a.is_unspecified() && !a.is_loopback() && public_v4(embedded(s[6], s[7]));
    }
    // NAT64 64:ff9b::/96.
    if s[0] == 0x64 && s[1] == 0xff9b && s[2..6] == [0; 4] {
        return public_v4(embedded(s[6], s[7]));
    }
    // 6to4 2002::/16 carries an IPv4 address in bits 16..48.
    if s[0] == 0x2002 {
        return public_v4(embedded(s[1], s[2]));
    }
    !(a.is_multicast()
        || (s[0] & 0xfe00) == 0xfc00 // unique local
        || (s[0] & 0xffc0) == 0xfe80 // link local
        || (s[0] & 0xffc0) == 0xfec0 // site local (deprecated)
        || (s[0] == 0x2001 && s[1] == 0x0db8) // documentation
        || (s[0] == 0x2001 && s[1] == 0) // Teredo
        || s[0] == 0x0100 && s[1..4] == [0; 3]) // discard-only
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_and_special_addresses_are_refused() {
        for bad in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "255.255.255.255",
            "224.0.0.1",
            "192.0.2.1",
            "198.18.0.1",
            "240.0.0.1",
            "::1",
            "::",
            "fc00::1",
            "fd12::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "::ffff:169.254.169.254",
            "64:ff9b::a00:1",
            "2002:7f00:1::",
            "2001:db8::1",
            "ff02::1",
            "::127.0.0.1",
        ] {
            assert!(
                !is_public(bad.parse().unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST))),
                "{bad}"
            );
        }
        for ok in [
            "1.1.1.1",
            "160.79.104.10",
            "2606:4700:4700::1111",
            "::ffff:8.8.8.8",
        ] {
            assert!(
                is_public(ok.parse().unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST))),
                "{ok}"
            );
        }
    }
}
