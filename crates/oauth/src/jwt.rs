//! EdDSA access tokens (RFC 9068 JWTs, `typ: at+jwt`) signed with one Ed25519 key.
//!
//! Written by hand over `ring` rather than through a general JWT library, so that exactly one
//! algorithm is ever accepted: the header must say `alg: EdDSA`, `typ: at+jwt` and this key's
//! `kid`, or the token is refused before its signature is looked at — `alg: none`, HS256 keyed
//! with the public key and tokens of another key cannot be confused for ours.

use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD as B64};
use breeze_core::{GrantId, OrgId, UserId};
use ring::signature::{ED25519, Ed25519KeyPair, KeyPair, UnparsedPublicKey};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Why a token or key was refused. Deliberately coarse for tokens: the client learns only that
/// its token is invalid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JwtError {
    #[error("invalid signing key: {0}")]
    Key(String),
    #[error("invalid access token: {0}")]
    Token(&'static str),
}

/// The claims of a Breeze access token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccessClaims {
    pub iss: String,
    /// The user the token acts for.
    pub sub: UserId,
    /// The resource (RFC 8707) the token is for.
    pub aud: String,
    pub exp: i64,
    pub iat: i64,
    pub jti: String,
    pub client_id: String,
    /// Space-separated OAuth scopes.
    pub scope: String,
    /// The organization chosen at consent.
    pub org_id: OrgId,
    /// The grant whose status decides whether the token still works.
    pub grant_id: GrantId,
}

/// The Ed25519 signing key, its public half and its id.
#[derive(Clone)]
pub struct SigningKey {
    pair: std::sync::Arc<Ed25519KeyPair>,
    public: Vec<u8>,
    kid: String,
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningKey")
            .field("kid", &self.kid)
            .finish_non_exhaustive()
    }
}

#[derive(Deserialize)]
struct PrivateJwk {
    kty: String,
    crv: String,
    d: String,
    x: Option<String>,
    kid: Option<String>,
}

#[derive(Serialize, Deserialize)]
struct Header {
    alg: String,
    typ: String,
    kid: String,
}

impl SigningKey {
    /// The key of a 32-byte Ed25519 seed.
    pub fn from_seed(seed: &[u8; 32]) -> Result<Self, JwtError> {
        let pair = Ed25519KeyPair::from_seed_unchecked(seed)
            .map_err(|_| JwtError::Key("not an Ed25519 seed".into()))?;
        let public = pair.public_key().as_ref().to_vec();
        let kid = thumbprint(&public);
        Ok(Self {
            pair: std::sync::Arc::new(pair),
            public,
            kid,
        })
    }

    /// The key of an OKP/Ed25519 private JWK (`{"kty":"OKP","crv":"Ed25519","d":…,"x":…}`).
    /// An `x` that does not match `d` is refused; a `kid` is kept, else the RFC 7638
    /// thumbprint is the id.
    pub fn from_jwk(json: &str) -> Result<Self, JwtError> {
        let jwk: PrivateJwk = serde_json::from_str(json)
            .map_err(|e| JwtError::Key(format!("not a private JWK: {e}")))?;
        if jwk.kty != "OKP" || jwk.crv != "Ed25519" {
            return Err(JwtError::Key("expected kty OKP and crv Ed25519".into()));
        }
        let d = B64
            .decode(jwk.d.trim_end_matches('='))
            .map_err(|_| JwtError::Key("d is not base64url".into()))?;
        let seed: [u8; 32] = d
            .try_into()
            .map_err(|_| JwtError::Key("d must be 32 bytes".into()))?;
        let mut key = Self::from_seed(&seed)?;
        if let Some(x) = jwk.x {
            let x = B64
                .decode(x.trim_end_matches('='))
                .map_err(|_| JwtError::Key("x is not base64url".into()))?;
            if x != key.public {
                return Err(JwtError::Key("x is not the public key of d".into()));
            }
        }
        if let Some(kid) = jwk.kid.filter(|k| !k.is_empty()) {
            key.kid = kid;
        }
        Ok(key)
    }

    /// This key as a private JWK (for `OAUTH_JWKS_PRIVATE_JWK`).
    pub fn private_jwk(seed: &[u8; 32]) -> Result<String, JwtError> {
        let key = Self::from_seed(seed)?;
        Ok(serde_json::json!({
            "kty": "OKP", "crv": "Ed25519", "d": B64.encode(seed), "x": B64.encode(&key.public),
            "kid": key.kid,
        })
        .to_string())
    }

    /// The key id in token headers and the JWKS.
    pub fn kid(&self) -> &str {
        &self.kid
    }

    /// The public key as a JWK, for `/.well-known/jwks.json`.
    pub fn public_jwk(&self) -> serde_json::Value {
        serde_json::json!({
            "kty": "OKP",
            "crv": "Ed25519",
            "x": B64.encode(&self.public),
            "kid": self.kid,
            "alg": "EdDSA",
            "use": "sig",
        })
    }

    /// Whether `jwk` (a configured public JWK) is this key's public half.
    pub fn matches_public_jwk(&self, jwk: &str) -> bool {
        #[derive(Deserialize)]
        struct Public {
            x: String,
        }
        serde_json::from_str::<Public>(jwk)
            .ok()
            .and_then(|p| B64.decode(p.x.trim_end_matches('=')).ok())
            .is_some_and(|x| x == self.public)
    }

    /// Signs `claims` as a compact JWT.
    pub fn sign(&self, claims: &AccessClaims) -> String {
        let header = Header {
            alg: "EdDSA".into(),
            typ: "at+jwt".into(),
            kid: self.kid.clone(),
        };
        // Serializing these plain structs cannot fail.
        let header = serde_json::to_vec(&header).unwrap_or_default();
        let claims = serde_json::to_vec(claims).unwrap_or_default();
        let mut token = format!("{}.{}", B64.encode(header), B64.encode(claims));
        let sig = self.pair.sign(token.as_bytes());
        token.push('.');
        token.push_str(&B64.encode(sig.as_ref()));
        token
    }

    /// Verifies `token`'s header, signature, issuer, audience and lifetime at `now` (Unix
    /// seconds), allowing `leeway` seconds of clock skew, and returns its claims.
    pub fn verify(
        &self,
        token: &str,
        issuer: &str,
        audience: &str,
        now: i64,
        leeway: i64,
    ) -> Result<AccessClaims, JwtError> {
        let mut parts = token.split('.');
        let (Some(h), Some(c), Some(s), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(JwtError::Token("not a compact JWS"));
        };
        let header: Header = B64
            .decode(h)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .ok_or(JwtError::Token("unreadable header"))?;
        if header.alg != "EdDSA" {
            return Err(JwtError::Token("unexpected alg"));
        }
        let typ = header.typ.to_ascii_lowercase();
        if typ != "at+jwt" && typ != "application/at+jwt" {
            return Err(JwtError::Token("unexpected typ"));
        }
        if header.kid != self.kid {
            return Err(JwtError::Token("unknown kid"));
        }
        let sig = B64
            .decode(s)
            .map_err(|_| JwtError::Token("unreadable signature"))?;
        let signed_len = h.len() + 1 + c.len();
        UnparsedPublicKey::new(&ED25519, &self.public)
            .verify(&token.as_bytes()[..signed_len], &sig)
            .map_err(|_| JwtError::Token("bad signature"))?;
        let claims: AccessClaims = B64
            .decode(c)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .ok_or(JwtError::Token("unreadable claims"))?;
        if claims.iss != issuer {
            return Err(JwtError::Token("wrong issuer"));
        }
        if claims.aud != audience {
            return Err(JwtError::Token("wrong audience"));
        }
        if claims.exp + leeway <= now {
            return Err(JwtError::Token("expired"));
        }
        if claims.iat - leeway > now {
            return Err(JwtError::Token("issued in the future"));
        }
        Ok(claims)
    }
}

/// The RFC 7638 thumbprint of an Ed25519 public key.
fn thumbprint(public: &[u8]) -> String {
    let canonical = format!(
        r#"{{"crv":"Ed25519","kty":"OKP","x":"{}"}}"#,
        B64.encode(public)
    );
    B64.encode(Sha256::digest(canonical.as_bytes()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn claims(now: i64) -> AccessClaims {
        AccessClaims {
            iss: "https://as.example".into(),
            sub: UserId::new(),
            aud: "https://as.example/mcp".into(),
            exp: now + 1800,
            iat: now,
            jti: "j".into(),
            client_id: "c".into(),
            scope: "mcp:read".into(),
            org_id: OrgId::new(),
            grant_id: GrantId::new(),
        }
    }

    #[test]
    fn round_trips_and_refuses_tampering() {
        let key = SigningKey::from_seed(&[7; 32]).unwrap();
        let c = claims(1000);
        let t = key.sign(&c);
        let ok = key.verify(&t, &c.iss, &c.aud, 1000, 0).unwrap();
        assert_eq!(ok, c);
        // The JWK round trip gives the same key.
        let again = SigningKey::from_jwk(&SigningKey::private_jwk(&[7; 32]).unwrap()).unwrap();
        assert_eq!(again.verify(&t, &c.iss, &c.aud, 1000, 0).unwrap(), c);
        assert!(again.matches_public_jwk(&key.public_jwk().to_string()));
        // Another key's token: unknown kid.
        let other = SigningKey::from_seed(&[8; 32]).unwrap();
        assert_eq!(
            other.verify(&t, &c.iss, &c.aud, 1000, 0),
            Err(JwtError::Token("unknown kid"))
        );
        // A changed payload fails the signature.
        let mut parts: Vec<String> = t.split('.').map(str::to_owned).collect();
        let mut forged = c.clone();
        forged.scope = "mcp:execute".into();
        parts[1] = B64.encode(serde_json::to_vec(&forged).unwrap());
        assert_eq!(
            key.verify(&parts.join("."), &c.iss, &c.aud, 1000, 0),
            Err(JwtError::Token("bad signature"))
        );
        assert_eq!(
            key.verify(&t, &c.iss, &c.aud, 2800, 0),
            Err(JwtError::Token("expired"))
        );
        assert_eq!(
            key.verify(&t, &c.iss, "https://other.example/mcp", 1000, 0),
            Err(JwtError::Token("wrong audience"))
        );
        assert!(SigningKey::from_jwk(r#"{"kty":"OKP","crv":"Ed25519","d":"AAAA"}"#).is_err());
        let mismatched = format!(
            r#"{{"kty":"OKP","crv":"Ed25519","d":"{}","x":"{}"}}"#,
            B64.encode([7u8; 32]),
            B64.encode([0u8; 32])
        );
        assert!(SigningKey::from_jwk(&mismatched).is_err());
    }
}
