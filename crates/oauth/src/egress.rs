//! The egress guard for fetching client ID metadata documents: which URLs may be fetched and
//! which addresses may be connected to (SSRF). The fetch itself is the server's
//! ([`crate::MetadataFetcher`]); it must resolve the host, refuse unless every address is
//! public by [`is_public`], connect to the address it checked, follow no redirect, and stop at
//! [`MAX_DOCUMENT_BYTES`] and [`FETCH_TIMEOUT`].

use std::net::IpAddr;

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

pub use breeze_core::net::is_public;

#[cfg(test)]
mod tests {
    use super::*;

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
