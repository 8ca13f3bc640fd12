//! Breeze's outside billing services, and the operations every door runs through them.
//!
//! - [`stripe`]: Stripe's wire format — Checkout Sessions as payment links (form-encoded
//!   requests, JSON answers, idempotency keys, error objects) and webhook signatures
//!   (`Stripe-Signature: t=…,v1=…`, HMAC-SHA256, constant-time comparison, a tolerance).
//! - [`synnex`]: TD SYNNEX EC Express price and availability (`priceRequest` /
//!   `priceResponse` XML), read by the small strict reader in `xml`.
//! - [`Billing`]: the partner's accounts, sealed with the credential vault under associated data
//!   naming the partner and the purpose (a sealed value copied to another partner or another
//!   field does not open), never returned; and the operations: a payment link for an issued
//!   invoice ([`OrgBilling::invoice_link`]) or a sent quote's total
//!   ([`OrgBilling::quote_link`]), a Stripe webhook taken exactly once
//!   ([`Billing::take_stripe_webhook`]), a distributor lookup ([`OrgBilling::lookup_product`]).
//!
//! Every request leaves through `breeze_sources::egress` (https only, public addresses unless
//! allowed, no redirects, no proxy, bounded answers). Nothing here checks authorization: a door
//! makes an [`OrgBilling`] only for an organization it authorized the caller in.
//! `testing` (feature) holds stand-ins for both services.

use std::sync::Arc;

use breeze_core::{Clock, OrgId, PartnerId};
use breeze_sources::{
    egress::Egress,
    vault::{Credential, Vault},
};
use breeze_store::{OrgStore, Store, StoreError};
use url::Url;

mod payments;
pub mod stripe;
pub mod synnex;
#[cfg(feature = "testing")]
pub mod testing;
mod xml;

pub use payments::{WebhookError, WebhookOutcome};
pub use synnex::{Availability, ProductQuery, SynnexAccount, Warehouse};

/// Where the services are and how this server is reached.
#[derive(Debug, Clone)]
pub struct BillingConfig {
    /// Stripe's API (`BREEZE_STRIPE_API_URL`, default [`stripe::API`]).
    pub stripe_api: Url,
    /// TD SYNNEX EC Express for every region (`BREEZE_SYNNEX_API_URL`); `None`: each region's
    /// own ([`synnex::endpoint`]).
    pub synnex_api: Option<Url>,
    /// This server's public URL: where a payer returns after paying.
    pub public_url: String,
}

impl BillingConfig {
    /// The real services, for a server at `public_url`.
    pub fn new(public_url: &str) -> Self {
        Self {
            stripe_api: Url::parse(stripe::API).unwrap_or_else(|_| unreachable!("a URL")),
            synnex_api: None,
            public_url: public_url.to_owned(),
        }
    }
}

/// Why an outside service did not do what was asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProviderError {
    /// The request cannot be made as asked.
    #[error("{0}")]
    Invalid(String),
    /// The service could not be reached, or the egress rules refused it.
    #[error("the service could not be reached: {0}")]
    Unreachable(String),
    /// The service answered with an error of its own.
    #[error("the service refused ({status} {kind}{}): {message}", code.as_deref().map(|c| format!(", {c}")).unwrap_or_default())]
    Refused {
        status: u16,
        kind: String,
        code: Option<String>,
        message: String,
    },
    /// The answer is not in the documented format.
    #[error("the service's answer was not understood: {0}")]
    Malformed(String),
}

/// Why a billing operation failed.
#[derive(Debug, thiserror::Error)]
pub enum BillingError {
    /// The store refused or failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The partner has no such account set up (or no credential key is configured); no
    /// request was made.
    #[error("{0}")]
    NotConfigured(String),
    /// The caller acts for no partner this organization belongs to; no request was made.
    #[error("no partner in context: distributor lookups act for the organization's partner")]
    NoPartner,
    /// The service failed or refused.
    #[error(transparent)]
    Provider(#[from] ProviderError),
}

/// The crate's result.
pub type Result<T, E = BillingError> = std::result::Result<T, E>;

/// The partner's accounts and the services. Cheap to clone. Its store is every organization's:
/// only [`Billing::org`] (one organization) and the partner-level operations use it.
#[derive(Clone)]
pub struct Billing {
    store: Store,
    egress: Egress,
    vault: Option<Vault>,
    config: Arc<BillingConfig>,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for Billing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Billing")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// What a sealed value is for: the associated data it is sealed under, with the partner.
#[derive(Debug, Clone, Copy)]
enum Purpose {
    StripeKey,
    StripeWebhook,
    Synnex,
}

impl Purpose {
    fn aad(self, partner: PartnerId) -> String {
        let what = match self {
            Purpose::StripeKey => "stripe-secret-key",
            Purpose::StripeWebhook => "stripe-webhook-secret",
            Purpose::Synnex => "synnex-account",
        };
        format!("billing:{what}:{partner}")
    }
}

impl Billing {
    /// The services over `egress`, credentials sealed with `vault` (`None`: accounts can be
    /// neither set nor used).
    pub fn new(
        store: Store,
        egress: Egress,
        vault: Option<Vault>,
        config: BillingConfig,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            store,
            egress,
            vault,
            config: Arc::new(config),
            clock,
        }
    }

    /// The operations for one organization (the door authorized the caller there).
    pub fn org<'a>(&'a self, org: OrgStore<'a>) -> OrgBilling<'a> {
        OrgBilling { billing: self, org }
    }

    /// The operations for organization `org`.
    pub fn for_org(&self, org: OrgId) -> OrgBilling<'_> {
        self.org(self.store.org(org))
    }

    fn vault(&self) -> Result<&Vault> {
        self.vault.as_ref().ok_or_else(|| {
            BillingError::NotConfigured(
                "no credential key is configured (TOOL_SOURCES_KEY): billing accounts cannot be \
                 stored or used"
                    .into(),
            )
        })
    }

    fn seal(&self, purpose: Purpose, partner: PartnerId, secret: &str) -> Result<String> {
        self.vault()?
            .seal(
                &Credential::Bearer {
                    token: secret.to_owned(),
                },
                &purpose.aad(partner),
            )
            .map_err(|e| BillingError::NotConfigured(e.to_string()))
    }

    fn open(&self, purpose: Purpose, partner: PartnerId, sealed: &str) -> Result<String> {
        match self.vault()?.open(sealed, &purpose.aad(partner)) {
            Ok(Credential::Bearer { token }) => Ok(token),
            Ok(_) | Err(_) => Err(BillingError::NotConfigured(
                "the partner's stored account could not be opened (another credential key?); \
                 set it again"
                    .into(),
            )),
        }
    }

    /// Sets the partner's Stripe account: the secret key (`sk_…` or a restricted `rk_…`) and
    /// the webhook endpoint's signing secret (`whsec_…`); `None` clears both.
    pub async fn set_stripe(
        &self,
        partner: PartnerId,
        keys: Option<(&str, &str)>,
        audit: breeze_core::AuditEvent,
    ) -> Result<()> {
        let sealed = match keys {
            Some((key, webhook)) => {
                if key.trim().is_empty() || webhook.trim().is_empty() {
                    return Err(BillingError::Store(StoreError::Invalid(
                        "a Stripe secret key and a webhook signing secret are both required".into(),
                    )));
                }
                Some((
                    self.seal(Purpose::StripeKey, partner, key.trim())?,
                    self.seal(Purpose::StripeWebhook, partner, webhook.trim())?,
                ))
            }
            None => None,
        };
        self.store
            .set_stripe_account(
                partner,
                sealed.as_ref().map(|s| s.0.as_str()),
                sealed.as_ref().map(|s| s.1.as_str()),
                audit,
            )
            .await?;
        Ok(())
    }

    /// Sets the partner's TD SYNNEX account and its region (`us`, `ca`); `None` clears it.
    pub async fn set_synnex(
        &self,
        partner: PartnerId,
        account: Option<(&SynnexAccount, &str)>,
        audit: breeze_core::AuditEvent,
    ) -> Result<()> {
        let sealed = match account {
            Some((a, region)) => {
                a.check()?;
                let text = serde_json::to_string(a)
                    .map_err(|e| BillingError::NotConfigured(e.to_string()))?;
                Some((self.seal(Purpose::Synnex, partner, &text)?, region))
            }
            None => None,
        };
        self.store
            .set_synnex_account(
                partner,
                sealed.as_ref().map(|s| s.0.as_str()),
                sealed.as_ref().map(|s| s.1),
                audit,
            )
            .await?;
        Ok(())
    }

    /// The partner's Stripe secret key, opened.
    async fn stripe_key(&self, partner: PartnerId) -> Result<String> {
        let row = self.store.partner_billing(partner).await?;
        let sealed = row.and_then(|r| r.stripe_secret_key).ok_or_else(|| {
            BillingError::NotConfigured(
                "Stripe is not set up for this partner: no payment link can be made".into(),
            )
        })?;
        self.open(Purpose::StripeKey, partner, &sealed)
    }
}

/// The billing operations of one organization.
pub struct OrgBilling<'a> {
    billing: &'a Billing,
    org: OrgStore<'a>,
}
