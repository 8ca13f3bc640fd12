//! Machine credentials: site-scoped enrollment keys and the device tokens agents hold.
//!
//! Both are `brz_` secrets of the same shape as API keys; only their SHA-256 is stored. A device
//! token authenticates as `Authorization: Bearer <token>`. Rotation is two-phase (see
//! [`breeze_store::Store::stage_device_token`]) so an agent that crashes mid-rotation keeps a
//! working credential.

use breeze_core::{AuditEvent, DeviceId, OrgId, OsFamily, SiteId, Timestamp};
use breeze_store::{
    EnrollDevice, Enrolled, EnrollmentKeyRecord, NewEnrollmentKey, ReenrollProof, StoreError,
};
use rand::rngs::OsRng;
use subtle::ConstantTimeEq;

use crate::{ApiKeySecret, AuthError, AuthService, api_key};

/// An authenticated agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DevicePrincipal {
    pub device_id: DeviceId,
    pub org_id: OrgId,
    pub site_id: SiteId,
    /// SHA-256 of the token it authenticated with: a socket opened with it closes when the
    /// device stops accepting it.
    pub token_hash: [u8; 32],
}

/// How long a re-enroll token lives unless asked otherwise (a day), and at most (a week).
pub const REENROLL_TOKEN_HOURS: i64 = 24;
pub const MAX_REENROLL_TOKEN_HOURS: i64 = 24 * 7;

/// What an administrator asks for when creating an enrollment key.
#[derive(Debug, Clone)]
pub struct CreateEnrollmentKey {
    pub org_id: OrgId,
    pub site_id: SiteId,
    pub name: String,
    pub max_uses: Option<u32>,
    pub expires_at: Timestamp,
    pub created_by: String,
}

/// What an enrolling machine reports about itself.
#[derive(Debug, Clone)]
pub struct Enrollment {
    pub hostname: String,
    pub machine_id: Option<String>,
    pub os_family: OsFamily,
    pub os_name: String,
    pub os_version: String,
    pub agent_version: String,
    /// A one-time re-enroll token an administrator issued for the device this machine is.
    pub reenroll_token: Option<String>,
    /// The token of the device this machine is (an agent re-enrolling itself).
    pub device_token: Option<String>,
}

impl AuthService {
    /// Creates a site-scoped enrollment key; returns its secret (shown once) and the record.
    pub async fn create_enrollment_key(
        &self,
        req: CreateEnrollmentKey,
        audit: AuditEvent,
    ) -> Result<(ApiKeySecret, EnrollmentKeyRecord), AuthError> {
        if req.max_uses == Some(0) {
            return Err(AuthError::Invalid("max uses must be at least 1".into()));
        }
        let secret = ApiKeySecret::generate(&mut OsRng);
        let record = self
            .store
            .org(req.org_id)
            .agents()
            .create_enrollment_key(
                NewEnrollmentKey {
                    site_id: req.site_id,
                    name: req.name,
                    key_hash: api_key::hash(secret.expose()),
                    key_prefix: secret.display_prefix(),
                    max_uses: req.max_uses,
                    expires_at: req.expires_at,
                    created_by: req.created_by,
                },
                audit,
            )
            .await?;
        Ok((secret, record))
    }

    /// Enrolls a machine with an enrollment key: the device (new, possibly flagged as a clone
    /// of a device with the same machine id, or an existing one re-enrolled on proof — see
    /// [`breeze_store::Store::enroll_device`]) and its device token, shown this once. A
    /// re-enroll token that is not valid refuses the enrollment; a device token that is not
    /// the device's is no proof, and the machine enrolls as it would without one.
    pub async fn enroll_device(
        &self,
        enrollment_key: &str,
        e: Enrollment,
    ) -> Result<(Enrolled, ApiKeySecret), AuthError> {
        let raw = enrollment_key.trim();
        if !api_key::is_well_formed(raw) {
            return Err(AuthError::InvalidEnrollmentKey);
        }
        if e.hostname.trim().is_empty() || e.hostname.len() > 255 {
            return Err(AuthError::Invalid(
                "hostname must be 1 to 255 characters".into(),
            ));
        }
        let present = |s: &Option<String>| {
            s.as_deref()
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
        };
        let proof = match (present(&e.reenroll_token), present(&e.device_token)) {
            (Some(t), _) if !api_key::is_well_formed(&t) => {
                return Err(AuthError::InvalidReenrollToken);
            }
            (Some(t), _) => Some(ReenrollProof::ReenrollToken(api_key::hash(&t))),
            (None, Some(t)) if api_key::is_well_formed(&t) => {
                Some(ReenrollProof::DeviceToken(api_key::hash(&t)))
            }
            (None, _) => None,
        };
        let token = ApiKeySecret::generate(&mut OsRng);
        let enrolled = self
            .store
            .enroll_device(
                &api_key::hash(raw),
                EnrollDevice {
                    hostname: e.hostname.trim().to_owned(),
                    machine_id: e.machine_id.filter(|m| !m.trim().is_empty()),
                    os_family: e.os_family,
                    os_name: e.os_name,
                    os_version: e.os_version,
                    agent_version: e.agent_version,
                    token_hash: api_key::hash(token.expose()),
                    proof,
                },
            )
            .await;
        match enrolled {
            Ok(enrolled) => Ok((enrolled, token)),
            Err(StoreError::Invalid(m)) if m == breeze_store::INVALID_ENROLLMENT_KEY => {
                Err(AuthError::InvalidEnrollmentKey)
            }
            Err(StoreError::Invalid(m)) if m == breeze_store::INVALID_REENROLL_TOKEN => {
                Err(AuthError::InvalidReenrollToken)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Issues a one-time re-enroll token for a device of `org` that has an agent, valid for
    /// `hours` (1 to [`MAX_REENROLL_TOKEN_HOURS`]): presented at enrollment with any enrollment
    /// key of the organization, it re-enrolls that device itself. Shown once.
    pub async fn issue_reenroll_token(
        &self,
        org: OrgId,
        device: DeviceId,
        hours: i64,
        audit: AuditEvent,
    ) -> Result<(ApiKeySecret, Timestamp), AuthError> {
        if !(1..=MAX_REENROLL_TOKEN_HOURS).contains(&hours) {
            return Err(AuthError::Invalid(format!(
                "a re-enroll token lives 1 to {MAX_REENROLL_TOKEN_HOURS} hours"
            )));
        }
        let secret = ApiKeySecret::generate(&mut OsRng);
        let expires_at = self.clock.now() + chrono::Duration::hours(hours);
        self.store
            .org(org)
            .agents()
            .issue_reenroll_token(device, &api_key::hash(secret.expose()), expires_at, audit)
            .await?;
        Ok((secret, expires_at))
    }

    /// Authenticates an `Authorization` header carrying a device token. Missing, malformed,
    /// unknown and revoked tokens are refused; the comparison is constant-time.
    pub async fn authenticate_device(
        &self,
        authorization: Option<&str>,
    ) -> Result<DevicePrincipal, AuthError> {
        let raw = authorization
            .and_then(|h| h.trim().strip_prefix("Bearer "))
            .map(str::trim)
            .ok_or(AuthError::MissingDeviceToken)?;
        if !api_key::is_well_formed(raw) {
            return Err(AuthError::InvalidDeviceToken);
        }
        let hash = api_key::hash(raw);
        let cred = self
            .store
            .find_device_credential(&hash)
            .await?
            .ok_or(AuthError::InvalidDeviceToken)?;
        let matches = bool::from(cred.token_hash.as_slice().ct_eq(&hash[..]))
            | cred
                .pending_token_hash
                .as_deref()
                .is_some_and(|p| bool::from(p.ct_eq(&hash[..])));
        if !matches || cred.revoked_at.is_some() {
            return Err(AuthError::InvalidDeviceToken);
        }
        Ok(DevicePrincipal {
            device_id: cred.device_id,
            org_id: cred.org_id,
            site_id: cred.site_id,
            token_hash: hash,
        })
    }

    /// Issues a new token for an authenticated device. The current token stays valid until the
    /// new one is first used.
    pub async fn rotate_device_token(&self, device: DeviceId) -> Result<ApiKeySecret, AuthError> {
        let token = ApiKeySecret::generate(&mut OsRng);
        self.store
            .stage_device_token(device, &api_key::hash(token.expose()))
            .await?;
        Ok(token)
    }
}
