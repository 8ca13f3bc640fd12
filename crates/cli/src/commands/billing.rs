//! `breeze billing …`: a partner's outside billing accounts — Stripe (payment links, webhooks)
//! and TD SYNNEX EC Express (distributor lookups) — set, cleared and shown.
//!
//! The secrets are read from the environment (`BREEZE_STRIPE_SECRET_KEY`,
//! `BREEZE_STRIPE_WEBHOOK_SECRET`, `BREEZE_SYNNEX_PASSWORD`), never from flags other users
//! could see in the process list, and sealed under the credential key before they reach the
//! database; `show` says only which accounts are set and where Stripe must send webhooks.
//! Like the other admin commands these act as the system with the database's authority.

use anyhow::Context;
use breeze_billing::{Billing, BillingConfig, SynnexAccount};
use breeze_core::{Actor, AuditEvent};
use breeze_sources::egress::Egress;
use clap::Subcommand;

use super::App;
use crate::config::Settings;

fn cli_audit(action: &str) -> AuditEvent {
    AuditEvent::new(Actor::system("cli"), action, "partner")
}

#[derive(Debug, Subcommand)]
pub(crate) enum BillingCommand {
    /// Set the partner's Stripe account: BREEZE_STRIPE_SECRET_KEY (sk_… or a restricted rk_…)
    /// and BREEZE_STRIPE_WEBHOOK_SECRET (whsec_…, the endpoint's signing secret).
    Stripe {
        /// The partner (slug or id).
        #[arg(long)]
        partner: String,
        /// The secret key (`sk_…`, or a restricted `rk_…` allowed to create Checkout Sessions).
        #[arg(long, env = "BREEZE_STRIPE_SECRET_KEY", hide_env_values = true)]
        secret_key: String,
        /// The signing secret (`whsec_…`) of the webhook endpoint registered for the partner.
        #[arg(long, env = "BREEZE_STRIPE_WEBHOOK_SECRET", hide_env_values = true)]
        webhook_secret: String,
    },
    /// Set the partner's TD SYNNEX EC Express account (password from BREEZE_SYNNEX_PASSWORD).
    Synnex {
        /// The partner (slug or id).
        #[arg(long)]
        partner: String,
        /// The TD SYNNEX customer (account) number.
        #[arg(long)]
        customer_no: String,
        /// The EC Express user name.
        #[arg(long)]
        user_name: String,
        /// The EC Express password.
        #[arg(long, env = "BREEZE_SYNNEX_PASSWORD", hide_env_values = true)]
        password: String,
        /// `us` or `ca`.
        #[arg(long, default_value = "us")]
        region: String,
    },
    /// Remove the partner's Stripe or TD SYNNEX account (`stripe`, `synnex`).
    Clear {
        /// The partner (slug or id).
        #[arg(long)]
        partner: String,
        /// `stripe` or `synnex`.
        service: String,
    },
    /// Set an organization's billing currency (ISO 4217, e.g. EUR; `none` clears it): what its
    /// invoices, quotes and contracts are drafted in when they name none.
    Currency {
        /// The organization (slug or id).
        #[arg(long)]
        org: String,
        /// An ISO 4217 code (EUR, USD, JPY, …), or `none`.
        code: String,
    },
    /// Which accounts the partner has, and its Stripe webhook endpoint.
    Show {
        /// The partner (slug or id).
        #[arg(long)]
        partner: String,
    },
}

impl BillingCommand {
    pub(crate) async fn run(self, app: &App, settings: &Settings) -> anyhow::Result<()> {
        let billing = Billing::new(
            app.store.clone(),
            Egress::new(&settings.tool_sources.egress)?,
            settings.tool_sources.key.clone(),
            BillingConfig::new(&settings.public_url),
            app.clock.clone(),
        );
        let partner_of = |p: String| async move {
            app.store
                .find_partner(&p)
                .await
                .with_context(|| format!("partner {p:?}"))
        };
        match self {
            BillingCommand::Stripe {
                partner,
                secret_key,
                webhook_secret,
            } => {
                let p = partner_of(partner).await?;
                billing
                    .set_stripe(
                        p.id,
                        Some((&secret_key, &webhook_secret)),
                        cli_audit("billing.stripe_set"),
                    )
                    .await?;
                println!(
                    "Stripe set for {}; register this webhook endpoint at Stripe (events \
                     checkout.session.completed, checkout.session.async_payment_succeeded): \
                     {}/api/v1/webhooks/stripe/{}",
                    p.slug,
                    settings.public_url.trim_end_matches('/'),
                    p.id
                );
            }
            BillingCommand::Synnex {
                partner,
                customer_no,
                user_name,
                password,
                region,
            } => {
                let p = partner_of(partner).await?;
                let account = SynnexAccount {
                    customer_no,
                    user_name,
                    password,
                };
                billing
                    .set_synnex(
                        p.id,
                        Some((&account, &region)),
                        cli_audit("billing.synnex_set"),
                    )
                    .await?;
                println!("TD SYNNEX ({region}) set for {}", p.slug);
            }
            BillingCommand::Clear { partner, service } => {
                let p = partner_of(partner).await?;
                match service.as_str() {
                    "stripe" => {
                        billing
                            .set_stripe(p.id, None, cli_audit("billing.stripe_clear"))
                            .await?;
                    }
                    "synnex" => {
                        billing
                            .set_synnex(p.id, None, cli_audit("billing.synnex_clear"))
                            .await?;
                    }
                    other => anyhow::bail!("unknown service {other:?} (stripe or synnex)"),
                }
                println!("{service} cleared for {}", p.slug);
            }
            BillingCommand::Currency { org, code } => {
                let o = app.store.find_organization(&org).await.context("--org")?;
                let currency = match code.as_str() {
                    "none" => None,
                    c => Some(breeze_core::Currency::parse(c)?),
                };
                app.store
                    .set_billing_currency(o.id, currency, cli_audit("billing.currency_set"))
                    .await?;
                println!(
                    "{}: billing currency {}",
                    o.slug,
                    currency.map_or("none".to_owned(), |c| c.to_string())
                );
            }
            BillingCommand::Show { partner } => {
                let p = partner_of(partner).await?;
                let row = app.store.partner_billing(p.id).await?;
                let set = |v: Option<&String>| if v.is_some() { "set" } else { "not set" };
                let row = row.as_ref();
                println!(
                    "stripe: {}\nstripe webhook endpoint: {}/api/v1/webhooks/stripe/{}\n\
                     synnex: {} ({})",
                    set(row.and_then(|r| r.stripe_secret_key.as_ref())),
                    settings.public_url.trim_end_matches('/'),
                    p.id,
                    set(row.and_then(|r| r.synnex_account.as_ref())),
                    row.and_then(|r| r.synnex_region.as_deref()).unwrap_or("us"),
                );
            }
        }
        Ok(())
    }
}
