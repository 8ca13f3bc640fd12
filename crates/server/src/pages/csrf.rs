//! CSRF tokens for the dashboard's forms.
//!
//! A signed-in page's token is derived from its session: SHA-256 of a fixed label and the
//! session token (a secret the browser holds only in an HttpOnly cookie), so it needs no
//! storage, changes with every session and cannot be turned back into the cookie. Forms carry
//! it as the hidden field `csrf`; htmx requests as the `X-CSRF-Token` header (`app.js` copies
//! it from the page's `<meta name="csrf-token">`). Every state-changing page request checks it
//! in constant time, besides the same-origin check every cookie request passes.
//!
//! Sign-in has no session yet: `GET /login` sets a random `breeze_login` cookie (HttpOnly,
//! SameSite=Strict) and puts the same value in the form (double submit).

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// The form field carrying the token.
pub(crate) const FIELD: &str = "csrf";
/// The header carrying the token on htmx requests.
pub(crate) const HEADER: &str = "x-csrf-token";
/// The pre-session cookie of the sign-in form.
pub(crate) const LOGIN_COOKIE: &str = "breeze_login";

/// The CSRF token of the session whose cookie value is `session_token`.
pub(crate) fn token_for(session_token: &str) -> String {
    let mut h = Sha256::new();
    h.update(b"breeze-csrf-v1\0");
    h.update(session_token.as_bytes());
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether `presented` (a form field or header) is `expected`, compared in constant time. An
/// empty expectation never matches.
pub(crate) fn matches(expected: &str, presented: Option<&str>) -> bool {
    match presented {
        Some(p) if !expected.is_empty() => bool::from(expected.as_bytes().ct_eq(p.as_bytes())),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_differ_per_session_and_only_the_right_one_matches() {
        let a = token_for("session-a");
        let b = token_for("session-b");
        assert_ne!(a, b);
        assert_eq!(a.len(), 64);
        assert!(matches(&a, Some(&a)));
        assert!(!matches(&a, Some(&b)));
        assert!(!matches(&a, Some("")));
        assert!(!matches(&a, None));
        assert!(!matches("", Some("")));
        assert!(!matches(&a, Some(&a[..63])));
    }
}
