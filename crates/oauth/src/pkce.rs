//! PKCE (RFC 7636), S256 only: `plain`, an omitted method (which means `plain`) and unknown
//! methods are refused at the authorization endpoint, and the verifier is checked against the
//! stored challenge in constant time at the token endpoint.

use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD as B64};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// Whether `s` is 43–128 characters of `[A-Za-z0-9-._~]` (a verifier, and an S256 challenge).
fn well_formed(s: &str) -> bool {
    (43..=128).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~'))
}

/// Checks the authorization request's challenge and method. Returns the refusal's text.
pub fn check_challenge(challenge: Option<&str>, method: Option<&str>) -> Result<(), &'static str> {
    let challenge = challenge.ok_or("code_challenge is required (PKCE with S256)")?;
    match method {
        Some("S256") => {}
        None => return Err("code_challenge_method is required and must be S256"),
        Some(_) => return Err("code_challenge_method must be S256"),
    }
    // An S256 challenge is the unpadded base64url of 32 bytes.
    if challenge.len() != 43 || !well_formed(challenge) {
        return Err("code_challenge is not an S256 challenge");
    }
    Ok(())
}

/// The S256 challenge of `verifier`.
pub fn challenge_of(verifier: &str) -> String {
    B64.encode(Sha256::digest(verifier.as_bytes()))
}

/// Whether `verifier` is well formed and hashes to `challenge` (compared in constant time).
pub fn verify(verifier: &str, challenge: &str) -> bool {
    well_formed(verifier)
        && bool::from(
            challenge_of(verifier)
                .as_bytes()
                .ct_eq(challenge.as_bytes()),
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn s256_only() {
        let v = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk";
        let c = challenge_of(v);
        assert_eq!(c, "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM");
        assert!(check_challenge(Some(&c), Some("S256")).is_ok());
        assert!(check_challenge(Some(&c), Some("plain")).is_err());
        assert!(check_challenge(Some(&c), None).is_err());
        assert!(check_challenge(Some(&c), Some("s256")).is_err());
        assert!(check_challenge(None, Some("S256")).is_err());
        assert!(check_challenge(Some(v), Some("S256")).is_err() || v.len() == 43);
        assert!(verify(v, &c));
        assert!(!verify("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXj", &c));
        // The verifier itself as "challenge" (plain) does not pass.
        assert!(!verify(v, v));
        assert!(!verify("short", &challenge_of("short")));
    }
}
