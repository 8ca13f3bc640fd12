//! Redirect URIs: which may be registered, and when a requested one matches.
//!
//! Registered URIs are https (no userinfo, fragment or wildcard) or http on a loopback host
//! (RFC 8252 §7.3); `javascript:`, `data:`, custom schemes and plain http elsewhere are refused.
//! A requested URI matches a registered one exactly — byte for byte, so a trailing slash or a
//! case change does not match — except that on a loopback host any port matches (native
//! clients listen on an ephemeral port).

use url::{Host, Url};

/// The longest redirect URI accepted.
pub const MAX_REDIRECT_URI_LEN: usize = 2000;

fn is_loopback(url: &Url) -> bool {
    match url.host() {
        Some(Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
        Some(Host::Ipv4(a)) => a.is_loopback(),
        Some(Host::Ipv6(a)) => a.is_loopback(),
        None => false,
    }
}

/// Checks a redirect URI a client wants to register. Returns the refusal's text.
pub fn validate(uri: &str) -> Result<(), String> {
    if uri.len() > MAX_REDIRECT_URI_LEN {
        return Err(format!(
            "redirect URI longer than {MAX_REDIRECT_URI_LEN} characters"
        ));
    }
    if uri.contains('*') {
        return Err(format!("{uri}: wildcards are not allowed"));
    }
    let url = Url::parse(uri).map_err(|e| format!("{uri}: not an absolute URI ({e})"))?;
    // The parser is forgiving: `https:///cb`, `https:/cb` and `https:\\cb` all parse with the
    // host `cb`. The host must be written where it belongs, right after `scheme://`.
    let written = uri
        .get(url.scheme().len()..)
        .and_then(|rest| rest.strip_prefix("://"));
    if !written.is_some_and(|rest| rest.starts_with(|c: char| !matches!(c, '/' | '\\' | '?' | '#')))
        || uri.contains('\\')
    {
        return Err(format!("{uri}: the host must follow scheme:// as written"));
    }
    if url.fragment().is_some() {
        return Err(format!("{uri}: a redirect URI may not have a fragment"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(format!("{uri}: a redirect URI may not carry credentials"));
    }
    match url.scheme() {
        "https" if url.host().is_some() => Ok(()),
        "http" if is_loopback(&url) => Ok(()),
        "http" => Err(format!(
            "{uri}: plain http is allowed only on a loopback host (127.0.0.1, [::1], localhost)"
        )),
        other => Err(format!(
            "{uri}: scheme {other} is not allowed (https, or http on loopback)"
        )),
    }
}

/// Whether `requested` matches `registered`: exactly, or on a loopback host with only the port
/// differing.
pub fn matches(registered: &str, requested: &str) -> bool {
    if registered == requested {
        return true;
    }
    let (Ok(reg), Ok(req)) = (Url::parse(registered), Url::parse(requested)) else {
        return false;
    };
    if reg.scheme() != "http" || !is_loopback(&reg) || !is_loopback(&req) {
        return false;
    }
    // The texts without their ports must be equal as written, so that the URL parser's
    // normalisation (case, dot segments, percent-encoding) cannot make two texts match.
    matches!((without_port(registered), without_port(requested)), (Some(a), Some(b)) if a == b)
}

/// `http://host[:port]rest` as `http://hostrest`; `None` when the port is not digits.
fn without_port(s: &str) -> Option<String> {
    let rest = s.strip_prefix("http://")?;
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let (host, port) = match authority.strip_prefix('[') {
        Some(v6) => {
            let (h, after) = v6.split_once(']')?;
            (format!("[{h}]"), after.strip_prefix(':'))
        }
        None => match authority.split_once(':') {
            Some((h, p)) => (h.to_owned(), Some(p)),
            None => (authority.to_owned(), None),
        },
    };
    if port.is_some_and(|p| p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit())) {
        return None;
    }
    Some(format!("http://{host}{tail}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registration_refuses_unsafe_uris() {
        for ok in [
            "https://claude.ai/api/mcp/auth_callback",
            "http://127.0.0.1/callback",
            "http://localhost:8080/cb",
            "http://[::1]/cb",
        ] {
            assert!(validate(ok).is_ok(), "{ok}");
        }
        for bad in [
            "javascript:alert(1)",
            "data:text/html,hi",
            "http://example.com/cb",
            "https://*.example.com/cb",
            "https://example.com/cb#frag",
            "https://user:pw@example.com/cb",
            "cursor://callback",
            "/relative",
            "https:///cb",
            "https:/cb",
            "https:cb",
            "https://\\cb",
            "https:\\\\evil.example/cb",
            "https://?x@evil.example/cb",
        ] {
            assert!(validate(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn exact_match_except_the_loopback_port() {
        let reg = "https://claude.ai/api/mcp/auth_callback";
        assert!(matches(reg, reg));
        assert!(!matches(reg, "https://claude.ai/api/mcp/auth_callback/"));
        assert!(!matches(reg, "https://Claude.ai/api/mcp/auth_callback"));
        assert!(!matches(
            reg,
            "https://claude.ai:8443/api/mcp/auth_callback"
        ));
        assert!(!matches(reg, "https://claude.ai/api/mcp/auth_callback?x=1"));
        let lo = "http://localhost/callback";
        assert!(matches(lo, "http://localhost:53682/callback"));
        assert!(matches(
            "http://127.0.0.1:1/callback",
            "http://127.0.0.1:2/callback"
        ));
        assert!(matches("http://[::1]/cb", "http://[::1]:9/cb"));
        assert!(!matches(lo, "http://localhost:53682/callback/"));
        assert!(!matches(lo, "http://localhost:53682/Callback"));
        assert!(!matches(lo, "http://127.0.0.1:53682/callback"));
        assert!(!matches(lo, "http://localhost:1/./callback"));
        assert!(!matches(
            "http://example.com/cb",
            "http://example.com:81/cb"
        ));
    }
}
