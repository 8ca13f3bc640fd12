//! The egress guard for fetching client ID metadata documents: which URLs may be fetched and
//! which addresses may be connected to (SSRF). The fetch itself is the server's
//! ([`crate::MetadataFetcher`]); it must resolve the host, refuse unless every address is
//! public by [`is_public`], connect to the address it checked, follow no redirect, and stop at
//! [`MAX_DOCUMENT_BYTES`] and [`FETCH_TIMEOUT`].

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use url::{Host, Url};

/// The largest client ID metadata document accepted.
pub const MAX_DOCUMENT_BYTES: usize = 5 * 1024;

/// How long a fetch may take.
pub const FETCH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Checks a `client_id` that names a metadata document: https, a host name or public
/// address, no userinfo, fragment or dot segments, and a path. Returns the parsed URL.
pub fn check_document_url(client_id: &str) -> Result<Url, String> {
    if client_id.len() > 2048 {
        return Err("client_id URL too long".into());
    }
    let url = Url::parse(client_id).map_err(|e| format!("client_id is not a URL: {e}"))?;
    if url.scheme() != "https" {
        return Err("a client_id URL must be https".into());
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err("a client_id URL may not carry credentials".into());
    }
    if url.fragment().is_some() || client_id.contains('#') {
        return Err("a client_id URL may not have a fragment".into());
    }
    let raw_path = client_id
        .strip_prefix("https://")
        .and_then(|r| r.find('/').map(|i| &r[i..]))
        .unwrap_or("");
    if raw_path.is_empty() || raw_path == "/" {
        return Err("a client_id URL must have a path".into());
    }
    if raw_path.split(['/', '?']).any(|seg| {
        seg == "."
            || seg == ".."
            || seg.eq_ignore_ascii_case("%2e")
            || seg.eq_ignore_ascii_case("%2e%2e")
    }) {
        return Err("a client_id URL may not have dot segments".into());
    }
    // The URL must be written in its normal form, so that the document's client_id can be
    // compared with it as text.
    if url.as_str() != client_id {
        return Err(
            "a client_id URL must be in normal form (lowercase host, no default port)".into(),
        );
    }
    match url.host() {
        Some(Host::Domain(d))
            if d.eq_ignore_ascii_case("localhost") || d.ends_with(".localhost") =>
        {
            Err("a client_id URL may not name localhost".into())
        }
        Some(Host::Domain(_)) => Ok(url),
        Some(Host::Ipv4(a)) if is_public(IpAddr::V4(a)) => Ok(url),
        Some(Host::Ipv6(a)) if is_public(IpAddr::V6(a)) => Ok(url),
        Some(_) => Err("a client_id URL may not name a private address".into()),
        None => Err("a client_id URL needs a host".into()),
    }
}

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

    #[test]
    fn document_urls() {
        assert!(check_document_url("https://chatgpt.com/oauth/abc/client.json").is_ok());
        assert!(check_document_url("https://claude.ai/oauth/claude-code-client-metadata").is_ok());
        for bad in [
            "http://chatgpt.com/oauth/client.json",
            "https://chatgpt.com",
            "https://chatgpt.com/",
            "https://u:p@chatgpt.com/c.json",
            "https://chatgpt.com/c.json#x",
            "https://chatgpt.com/a/../c.json",
            "https://chatgpt.com/a/%2e%2e/c.json",
            "https://127.0.0.1/c.json",
            "https://[::1]/c.json",
            "https://10.0.0.1/c.json",
            "https://localhost/c.json",
            "https://ChatGPT.com/c.json",
            "https://chatgpt.com:443/c.json",
        ] {
            assert!(check_document_url(bad).is_err(), "{bad}");
        }
    }
}
