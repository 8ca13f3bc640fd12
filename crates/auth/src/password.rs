//! Password hashing with argon2id (the crate's defaults: 19 MiB, 2 passes) in PHC string form.

use std::sync::OnceLock;

use argon2::{
    Argon2, PasswordHash, PasswordHasher, PasswordVerifier,
    password_hash::{SaltString, rand_core::OsRng},
};

use crate::AuthError;

/// The shortest password accepted.
pub const MIN_PASSWORD_LEN: usize = 12;

/// Hashes a password, refusing ones shorter than [`MIN_PASSWORD_LEN`].
pub fn hash(password: &str) -> Result<String, AuthError> {
    if password.chars().count() < MIN_PASSWORD_LEN {
        return Err(AuthError::Invalid(format!(
            "the password must be at least {MIN_PASSWORD_LEN} characters long"
        )));
    }
    hash_unchecked(password)
}

fn hash_unchecked(password: &str) -> Result<String, AuthError> {
    let salt = SaltString::generate(&mut OsRng);
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| AuthError::Invalid(format!("cannot hash the password: {e}")))
}

/// Whether `password` matches the PHC string `stored`. A malformed hash never matches.
pub fn verify(password: &str, stored: &str) -> bool {
    PasswordHash::new(stored).is_ok_and(|h| {
        Argon2::default()
            .verify_password(password.as_bytes(), &h)
            .is_ok()
    })
}

/// Does the work of one [`verify`] against a throwaway hash, so that an unknown email takes as
/// long to refuse as a wrong password.
pub fn burn_equivalent_time(password: &str) {
    static DUMMY: OnceLock<String> = OnceLock::new();
    let dummy = DUMMY.get_or_init(|| hash_unchecked("breeze-timing-equaliser").unwrap_or_default());
    let _ = verify(password, dummy);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_verify_and_are_salted() {
        let h1 = hash("correct horse battery").unwrap();
        let h2 = hash("correct horse battery").unwrap();
        assert!(h1.starts_with("$argon2id$"));
        assert_ne!(h1, h2, "a fresh salt each time");
        assert!(verify("correct horse battery", &h1));
        assert!(!verify("correct horse batterY", &h1));
        assert!(!verify("anything", "not a phc string"));
    }

    #[test]
    fn refuses_short_passwords() {
        let err = hash("short").unwrap_err();
        assert!(err.to_string().contains("at least 12 characters"));
    }
}
