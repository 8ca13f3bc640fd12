//! API-key secrets: `brz_` followed by 32 random bytes in URL-safe base64 (43 characters).
//!
//! Only the SHA-256 of a secret is stored. A secret is high-entropy, so a fast hash is the right
//! tool (a password hash would only slow every request down).

use base64::{Engine as _, engine::general_purpose::URL_SAFE_NO_PAD};
use rand::{CryptoRng, RngCore};
use sha2::{Digest, Sha256};

/// Every Breeze API key starts with this.
pub const API_KEY_PREFIX: &str = "brz_";

/// Random bytes in a key.
const SECRET_BYTES: usize = 32;
/// Length of the encoded random part: 32 bytes → 43 base64url characters.
const SECRET_CHARS: usize = 43;

/// A freshly generated key. `Debug` hides it; [`ApiKeySecret::expose`] is the one way out.
pub struct ApiKeySecret(String);

impl std::fmt::Debug for ApiKeySecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ApiKeySecret({}…)", self.display_prefix())
    }
}

impl ApiKeySecret {
    /// A new secret from `rng`.
    pub fn generate(rng: &mut (impl RngCore + CryptoRng)) -> Self {
        Self(format!("{API_KEY_PREFIX}{}", random_token(rng)))
    }

    /// The plaintext, to show the user once.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// The first characters (`brz_` and 4 more), stored to recognise the key in a list.
    pub fn display_prefix(&self) -> String {
        self.0.chars().take(API_KEY_PREFIX.len() + 4).collect()
    }
}

/// 32 random bytes, URL-safe base64 without padding.
pub fn random_token(rng: &mut (impl RngCore + CryptoRng)) -> String {
    let mut bytes = [0u8; SECRET_BYTES];
    rng.fill_bytes(&mut bytes);
    URL_SAFE_NO_PAD.encode(bytes)
}

/// Whether `raw` has the shape of a Breeze key. Decided without any lookup.
pub fn is_well_formed(raw: &str) -> bool {
    raw.strip_prefix(API_KEY_PREFIX).is_some_and(|rest| {
        rest.len() == SECRET_CHARS
            && rest
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    })
}

/// SHA-256 of a secret: what the store keeps.
pub fn hash(secret: &str) -> [u8; 32] {
    Sha256::digest(secret.as_bytes()).into()
}

#[cfg(test)]
mod tests {
    use rand::{SeedableRng, rngs::StdRng};

    use super::*;

    #[test]
    fn generated_keys_are_well_formed_and_distinct() {
        let mut rng = StdRng::seed_from_u64(7);
        let a = ApiKeySecret::generate(&mut rng);
        let b = ApiKeySecret::generate(&mut rng);
        assert_ne!(a.expose(), b.expose());
        assert_eq!(a.expose().len(), 4 + 43);
        assert!(is_well_formed(a.expose()));
        assert_eq!(a.display_prefix(), &a.expose()[..8]);
        assert!(
            !format!("{a:?}").contains(a.expose()),
            "Debug must not print the secret"
        );
    }

    #[test]
    fn format_check() {
        let good = format!("brz_{}", "A".repeat(43));
        assert!(is_well_formed(&good));
        for bad in [
            String::new(),
            "brz_".into(),
            format!("sk_{}", "A".repeat(43)),
            format!("BRZ_{}", "A".repeat(43)),
            format!("brz_{}", "A".repeat(42)),
            format!("brz_{}", "A".repeat(44)),
            format!("brz_{}+", "A".repeat(42)),
            format!("brz_{}=", "A".repeat(42)),
        ] {
            assert!(!is_well_formed(&bad), "{bad:?}");
        }
    }

    #[test]
    fn hash_is_sha256() {
        // SHA-256("abc"), from FIPS 180-2.
        let h = hash("abc");
        assert_eq!(h[..4], [0xba, 0x78, 0x16, 0xbf]);
    }
}
