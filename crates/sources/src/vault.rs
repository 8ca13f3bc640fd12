//! Credentials of tool sources, encrypted at rest.
//!
//! A [`Credential`] is sealed with ChaCha20-Poly1305 (`ring`'s AEAD, the crypto the workspace
//! already links) under a 32-byte key from the `TOOL_SOURCES_KEY` setting, with a fresh
//! random nonce per seal and the source's id as associated data: a sealed credential copied
//! onto another source's row does not open. The stored form is `v1:` + base64 of
//! nonce ‖ ciphertext ‖ tag. A credential never serializes in the clear and its `Debug` names
//! only the method, so neither an API answer nor a log line can carry it.

use base64::{Engine, engine::general_purpose::STANDARD as B64};
use ring::{
    aead::{self, CHACHA20_POLY1305, LessSafeKey, Nonce, UnboundKey},
    rand::{SecureRandom, SystemRandom},
};
use serde::{Deserialize, Serialize};

/// How Breeze authenticates to a source. The secret fields are never shown again once saved.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "method", rename_all = "snake_case")]
pub enum Credential {
    None,
    Bearer {
        token: String,
    },
    ApiKeyHeader {
        header: String,
        value: String,
    },
    Basic {
        username: String,
        password: String,
    },
    /// OAuth2 client credentials: a token is fetched from `token_url` (same egress rules).
    OAuth2ClientCredentials {
        token_url: String,
        client_id: String,
        client_secret: String,
        #[serde(default)]
        scope: Option<String>,
    },
}

impl Credential {
    /// The method's name, the one thing about a credential any answer may show.
    pub fn method(&self) -> &'static str {
        match self {
            Credential::None => "none",
            Credential::Bearer { .. } => "bearer",
            Credential::ApiKeyHeader { .. } => "api_key_header",
            Credential::Basic { .. } => "basic",
            Credential::OAuth2ClientCredentials { .. } => "oauth2_client_credentials",
        }
    }
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Credential({}, redacted)", self.method())
    }
}

/// Why the vault cannot do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum VaultError {
    #[error("TOOL_SOURCES_KEY must be 32 bytes in base64 (44 characters); {0}")]
    BadKey(String),
    /// Wrong key, another source's row, or tampered text: nothing more is said.
    #[error("a stored credential could not be opened (wrong TOOL_SOURCES_KEY, or it was altered)")]
    Open,
    #[error("the system random number generator failed")]
    Random,
}

const PREFIX: &str = "v1:";
const NONCE: usize = 12;

/// The key credentials are sealed under. Cheap to clone.
#[derive(Clone)]
pub struct Vault {
    key: std::sync::Arc<LessSafeKey>,
}

impl std::fmt::Debug for Vault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Vault(redacted)")
    }
}

impl Vault {
    /// The vault for a key written as the setting holds it (base64 of 32 bytes).
    pub fn from_setting(text: &str) -> Result<Self, VaultError> {
        let bytes = B64
            .decode(text.trim())
            .map_err(|e| VaultError::BadKey(e.to_string()))?;
        Self::from_bytes(&bytes)
    }

    pub fn from_bytes(bytes: &[u8]) -> Result<Self, VaultError> {
        if bytes.len() != 32 {
            return Err(VaultError::BadKey(format!("got {} bytes", bytes.len())));
        }
        let key = UnboundKey::new(&CHACHA20_POLY1305, bytes)
            .map_err(|_| VaultError::BadKey("not a key".into()))?;
        Ok(Self {
            key: std::sync::Arc::new(LessSafeKey::new(key)),
        })
    }

    /// A new random key in the setting's form (the demo writes one into its data directory).
    pub fn generate_key() -> Result<String, VaultError> {
        let mut key = [0u8; 32];
        SystemRandom::new()
            .fill(&mut key)
            .map_err(|_| VaultError::Random)?;
        Ok(B64.encode(key))
    }

    /// Seals `credential` for the source `source_id`.
    pub fn seal(&self, credential: &Credential, source_id: &str) -> Result<String, VaultError> {
        let mut nonce = [0u8; NONCE];
        SystemRandom::new()
            .fill(&mut nonce)
            .map_err(|_| VaultError::Random)?;
        // Serializing an enum of strings cannot fail.
        let mut data = serde_json::to_vec(credential).map_err(|_| VaultError::Open)?;
        self.key
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                aead::Aad::from(source_id.as_bytes()),
                &mut data,
            )
            .map_err(|_| VaultError::Open)?;
        let mut out = nonce.to_vec();
        out.extend_from_slice(&data);
        Ok(format!("{PREFIX}{}", B64.encode(out)))
    }

    /// Opens what [`seal`](Self::seal) made for the same source.
    pub fn open(&self, sealed: &str, source_id: &str) -> Result<Credential, VaultError> {
        let raw = sealed
            .strip_prefix(PREFIX)
            .and_then(|b| B64.decode(b).ok())
            .ok_or(VaultError::Open)?;
        if raw.len() < NONCE + CHACHA20_POLY1305.tag_len() {
            return Err(VaultError::Open);
        }
        let (nonce, rest) = raw.split_at(NONCE);
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| VaultError::Open)?;
        let mut data = rest.to_vec();
        let plain = self
            .key
            .open_in_place(nonce, aead::Aad::from(source_id.as_bytes()), &mut data)
            .map_err(|_| VaultError::Open)?;
        serde_json::from_slice(plain).map_err(|_| VaultError::Open)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vault() -> Vault {
        let key = Vault::generate_key().unwrap_or_else(|e| panic!("{e}"));
        Vault::from_setting(&key).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn a_sealed_credential_opens_only_for_its_source_and_key() {
        let v = vault();
        let c = Credential::Basic {
            username: "svc".into(),
            password: "hunter2-secret".into(),
        };
        let sealed = v.seal(&c, "src-a").unwrap_or_else(|e| panic!("{e}"));
        assert!(!sealed.contains("hunter2"), "sealed text carries no secret");
        assert_eq!(v.open(&sealed, "src-a").ok(), Some(c.clone()));
        // Another source's row, another key, a flipped bit: all refused.
        assert!(matches!(v.open(&sealed, "src-b"), Err(VaultError::Open)));
        assert!(matches!(
            vault().open(&sealed, "src-a"),
            Err(VaultError::Open)
        ));
        let mut bytes = B64
            .decode(&sealed[PREFIX.len()..])
            .unwrap_or_else(|e| panic!("{e}"));
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        let tampered = format!("{PREFIX}{}", B64.encode(bytes));
        assert!(matches!(v.open(&tampered, "src-a"), Err(VaultError::Open)));
        for junk in ["", "v1:", "v1:AAAA", "v2:xyz", "plain"] {
            assert!(v.open(junk, "src-a").is_err(), "{junk:?}");
        }
        // Two seals of the same credential differ (fresh nonces).
        assert_ne!(sealed, v.seal(&c, "src-a").unwrap_or_default());
    }

    #[test]
    fn debug_never_shows_a_secret_and_bad_keys_are_refused() {
        let c = Credential::Bearer {
            token: "tok-secret".into(),
        };
        assert_eq!(format!("{c:?}"), "Credential(bearer, redacted)");
        assert!(!format!("{:?}", vault()).contains('='));
        for bad in ["", "c2hvcnQ=", "not base64!"] {
            assert!(Vault::from_setting(bad).is_err(), "{bad:?}");
        }
    }
}
