//! Stripe's wire format, as its API reference documents it: requests are
//! `application/x-www-form-urlencoded` with nested keys in brackets
//! (`line_items[0][price_data][unit_amount]=1234`), authenticated by the secret key as a bearer
//! token, made safe to retry by an `Idempotency-Key` header; answers are JSON, an error being
//! `{"error": {"type", "code"?, "message", "param"?}}` with a 4xx or 5xx status.
//!
//! A payment link is a **Checkout Session** in `payment` mode (`POST /v1/checkout/sessions`)
//! with one inline price (`price_data`), so nothing has to exist at Stripe beforehand; the
//! session's `url` is the hosted payment page. Amounts are the currency's smallest unit, which
//! is Breeze's minor unit: cents for USD, yen for JPY; for the three-decimal currencies Stripe
//! takes three decimals whose last is zero, so such an amount must be a multiple of ten.
//!
//! **Webhooks** carry `Stripe-Signature: t=<unix seconds>,v1=<hex>[,v1=…][,v0=…]`, where each
//! `v1` is HMAC-SHA256, keyed by the endpoint's signing secret (`whsec_…`, used as is), of
//! `"<t>.<raw body>"`. [`verify`] accepts a body only when one `v1` matches (compared in
//! constant time) and `t` is within the tolerance of now (Stripe's libraries default to five
//! minutes); replays inside that window are caught by the event id, which the store records
//! once.

use std::time::Duration;

use breeze_core::{Currency, Money};
use breeze_sources::egress::{self, Egress};
use hmac::{Hmac, Mac};
use reqwest13 as reqwest;
use serde::Deserialize;
use sha2::Sha256;
use subtle::ConstantTimeEq;
use url::Url;

use crate::ProviderError;

/// Stripe's API.
pub const API: &str = "https://api.stripe.com";
/// How far a webhook's timestamp may be from now.
pub const TOLERANCE: Duration = Duration::from_secs(300);
/// How long one request to Stripe may take.
const TIMEOUT: Duration = Duration::from_secs(30);
/// The largest answer read from Stripe.
const MAX_ANSWER: usize = 256 * 1024;
/// The longest `Stripe-Signature` header read (a few signatures during a secret's rotation).
const MAX_HEADER: usize = 2048;

/// A payment page to ask Stripe for.
#[derive(Debug, Clone)]
pub struct CheckoutRequest<'a> {
    pub amount: Money,
    /// The line the payer sees (`Invoice INV-000042`).
    pub name: &'a str,
    /// `client_reference_id`: Breeze's id of what is paid.
    pub reference: &'a str,
    /// `metadata[…]` pairs.
    pub metadata: &'a [(&'a str, &'a str)],
    /// Where Stripe sends the payer afterwards.
    pub success_url: &'a str,
}

/// A Checkout Session as Stripe returns it (the fields Breeze reads).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct CheckoutSession {
    pub id: String,
    pub object: String,
    pub url: Option<String>,
    pub amount_total: Option<i64>,
    /// Lower case, as Stripe writes it (`usd`).
    pub currency: Option<String>,
    pub status: Option<String>,
    pub payment_status: Option<String>,
    pub client_reference_id: Option<String>,
    pub payment_intent: Option<String>,
}

impl CheckoutSession {
    /// What the session charges, when Stripe said (amount and a currency Breeze knows).
    pub fn amount(&self) -> Option<Money> {
        let currency = Currency::parse(&self.currency.as_deref()?.to_ascii_uppercase()).ok()?;
        Some(Money::new(self.amount_total?, currency))
    }
}

/// The form of a Checkout Session request, in Stripe's bracketed keys.
pub fn checkout_form(req: &CheckoutRequest<'_>) -> Result<String, ProviderError> {
    let amount = req.amount;
    if amount.minor <= 0 {
        return Err(ProviderError::Invalid(
            "a payment link asks for more than zero".into(),
        ));
    }
    if amount.currency.exponent() == 3 && amount.minor % 10 != 0 {
        return Err(ProviderError::Invalid(format!(
            "Stripe takes {} in steps of 0.010: {amount} cannot be charged",
            amount.currency
        )));
    }
    let mut pairs: Vec<(String, String)> = vec![
        ("mode".into(), "payment".into()),
        ("success_url".into(), req.success_url.into()),
        ("client_reference_id".into(), req.reference.into()),
        ("line_items[0][quantity]".into(), "1".into()),
        (
            "line_items[0][price_data][currency]".into(),
            amount.currency.code().to_ascii_lowercase(),
        ),
        (
            "line_items[0][price_data][unit_amount]".into(),
            amount.minor.to_string(),
        ),
        (
            "line_items[0][price_data][product_data][name]".into(),
            req.name.into(),
        ),
    ];
    for (k, v) in req.metadata {
        pairs.push((format!("metadata[{k}]"), (*v).to_owned()));
    }
    serde_urlencoded::to_string(&pairs).map_err(|e| ProviderError::Invalid(e.to_string()))
}

/// Creates a Checkout Session at `api` with `secret_key`; `idempotency_key` makes a retried
/// request return the first one's session instead of a second one.
pub async fn create_checkout_session(
    egress: &Egress,
    api: &Url,
    secret_key: &str,
    req: &CheckoutRequest<'_>,
    idempotency_key: &str,
) -> Result<CheckoutSession, ProviderError> {
    let url = api
        .join("/v1/checkout/sessions")
        .map_err(|e| ProviderError::Invalid(e.to_string()))?;
    let response = egress
        .client()
        .post(url)
        .bearer_auth(secret_key)
        .header("Idempotency-Key", idempotency_key)
        .header(
            reqwest::header::CONTENT_TYPE,
            "application/x-www-form-urlencoded",
        )
        .body(checkout_form(req)?)
        .timeout(TIMEOUT)
        .send()
        .await
        .map_err(|e| ProviderError::Unreachable(egress::http_error(&e).to_string()))?;
    egress::refuse_redirect(&response).map_err(|e| ProviderError::Unreachable(e.to_string()))?;
    let status = response.status();
    let body = egress::read_capped(response, MAX_ANSWER)
        .await
        .map_err(|e| ProviderError::Unreachable(e.to_string()))?;
    if !status.is_success() {
        return Err(error_of(status.as_u16(), &body));
    }
    let session: CheckoutSession = serde_json::from_slice(&body)
        .map_err(|e| ProviderError::Malformed(format!("a Checkout Session: {e}")))?;
    if session.object != "checkout.session" || session.url.is_none() {
        return Err(ProviderError::Malformed(
            "Stripe answered without a Checkout Session URL".into(),
        ));
    }
    Ok(session)
}

/// Stripe's error object.
#[derive(Debug, Deserialize)]
struct ErrorBody {
    error: ErrorObject,
}

#[derive(Debug, Deserialize)]
struct ErrorObject {
    #[serde(rename = "type")]
    kind: Option<String>,
    code: Option<String>,
    message: Option<String>,
}

/// A non-2xx answer as a [`ProviderError::Refused`], with Stripe's own words when it sent its
/// error object.
fn error_of(status: u16, body: &[u8]) -> ProviderError {
    let (kind, code, message) = match serde_json::from_slice::<ErrorBody>(body) {
        Ok(b) => (b.error.kind, b.error.code, b.error.message),
        Err(_) => (None, None, None),
    };
    ProviderError::Refused {
        status,
        kind: kind.unwrap_or_else(|| "api_error".into()),
        code,
        message: message
            .map(|m| m.chars().take(300).collect())
            .unwrap_or_else(|| format!("Stripe answered {status}")),
    }
}

/// Why a webhook was refused. Each is a 400 to Stripe; none says which secret was tried.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    #[error("no Stripe-Signature header")]
    Missing,
    #[error("the Stripe-Signature header is not t=…,v1=…")]
    Malformed,
    #[error("no v1 signature matches the body")]
    Mismatch,
    #[error("the signature's timestamp is outside the tolerance")]
    Expired,
}

/// The `v1` signature of `payload` at unix time `t` under `secret`, as hex.
pub fn signature(payload: &[u8], secret: &str, t: i64) -> String {
    // HMAC takes a key of any length.
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes())
        .unwrap_or_else(|_| unreachable!("HMAC accepts any key length"));
    mac.update(t.to_string().as_bytes());
    mac.update(b".");
    mac.update(payload);
    hex::encode(mac.finalize().into_bytes())
}

/// A `Stripe-Signature` header for `payload` at `t` (what Stripe sends; for stand-ins and
/// tests).
pub fn sign(payload: &[u8], secret: &str, t: i64) -> String {
    format!("t={t},v1={}", signature(payload, secret, t))
}

/// Checks a webhook: `header` must carry a timestamp within `tolerance` of `now` (unix
/// seconds) and a `v1` signature of `"<t>.<payload>"` under `secret`.
pub fn verify(
    payload: &[u8],
    header: Option<&str>,
    secret: &str,
    now: i64,
    tolerance: Duration,
) -> Result<(), SignatureError> {
    let header = header.ok_or(SignatureError::Missing)?;
    if header.len() > MAX_HEADER {
        return Err(SignatureError::Malformed);
    }
    let mut t = None;
    let mut signatures = Vec::new();
    for part in header.split(',') {
        let (k, v) = part
            .trim()
            .split_once('=')
            .ok_or(SignatureError::Malformed)?;
        match k {
            "t" if t.is_none() => {
                t = Some(v.parse::<i64>().map_err(|_| SignatureError::Malformed)?);
            }
            "t" => return Err(SignatureError::Malformed),
            "v1" => signatures.push(v),
            // v0 (test mode's old scheme) and future schemes are not ours to trust.
            _ => {}
        }
    }
    let t = t.ok_or(SignatureError::Malformed)?;
    if signatures.is_empty() {
        return Err(SignatureError::Malformed);
    }
    let expected = signature(payload, secret, t);
    // Every candidate is compared in full, in constant time, whatever matched before.
    let matched = signatures.iter().fold(0u8, |acc, s| {
        acc | u8::from(
            s.len() == expected.len() && bool::from(s.as_bytes().ct_eq(expected.as_bytes())),
        )
    });
    if matched == 0 {
        return Err(SignatureError::Mismatch);
    }
    let tolerance = i64::try_from(tolerance.as_secs()).unwrap_or(i64::MAX);
    if now.saturating_sub(t).abs() > tolerance {
        return Err(SignatureError::Expired);
    }
    Ok(())
}

/// A webhook event (the fields Breeze reads).
#[derive(Debug, Clone, Deserialize)]
pub struct Event {
    pub id: String,
    pub object: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub data: EventData,
}

#[derive(Debug, Clone, Deserialize)]
pub struct EventData {
    pub object: serde_json::Value,
}

/// A Charge as Stripe writes it in a `charge.refunded` event (the fields Breeze reads):
/// `amount_refunded` is how much of it is refunded in all, in its currency's minor unit.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Charge {
    pub id: String,
    pub object: String,
    pub amount: i64,
    pub amount_refunded: i64,
    /// Lower case, as Stripe writes it (`usd`).
    pub currency: String,
    pub payment_intent: Option<String>,
    #[serde(default)]
    pub refunded: bool,
}

impl Charge {
    /// How much of the charge is refunded in all, in a currency Breeze knows.
    pub fn refunded_total(&self) -> Option<Money> {
        let currency = Currency::parse(&self.currency.to_ascii_uppercase()).ok()?;
        (self.amount_refunded >= 0).then(|| Money::new(self.amount_refunded, currency))
    }
}

impl Event {
    /// The Charge a `charge.refunded` event is about.
    pub fn refunded_charge(&self) -> Option<Charge> {
        if self.kind != "charge.refunded" {
            return None;
        }
        serde_json::from_value::<Charge>(self.data.object.clone())
            .ok()
            .filter(|c| c.object == "charge")
    }

    /// The Checkout Session a `checkout.session.*` event is about.
    pub fn session(&self) -> Option<CheckoutSession> {
        if !self.kind.starts_with("checkout.session.") {
            return None;
        }
        serde_json::from_value(self.data.object.clone()).ok()
    }

    /// Whether the event says money was taken: a session completed and paid (cards), or an
    /// asynchronous payment (bank debits) that succeeded later.
    pub fn is_payment(&self) -> bool {
        matches!(
            self.kind.as_str(),
            "checkout.session.completed" | "checkout.session.async_payment_succeeded"
        ) && self
            .session()
            .is_some_and(|s| s.payment_status.as_deref() == Some("paid"))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // test code: a panic is the failure report

    use super::*;

    const SECRET: &str = "whsec_test_secret";

    #[test]
    fn signatures_follow_the_documented_scheme() {
        // HMAC-SHA256 of "<t>.<body>", hex: computed independently (openssl dgst -sha256
        // -hmac whsec_test_secret) for this body and time.
        let body = br#"{"id":"evt_1"}"#;
        let header = sign(body, SECRET, 1_700_000_000);
        assert_eq!(
            header,
            "t=1700000000,v1=248a374f50f943a28b0f6ab50faf9a7e7e29b710fa26df9fb1618b9bf8ea9c9a"
        );
        let now = 1_700_000_100;
        assert_eq!(verify(body, Some(&header), SECRET, now, TOLERANCE), Ok(()));
        // A rotated secret: any v1 may match; v0 is never trusted.
        let both = format!("{header},v1={}", "0".repeat(64));
        assert_eq!(verify(body, Some(&both), SECRET, now, TOLERANCE), Ok(()));
        let v0 = format!("t=1700000000,v0={}", signature(body, SECRET, 1_700_000_000));
        assert_eq!(
            verify(body, Some(&v0), SECRET, now, TOLERANCE),
            Err(SignatureError::Malformed)
        );
    }

    #[test]
    fn forged_altered_and_stale_webhooks_are_refused() {
        let body = br#"{"id":"evt_1","type":"checkout.session.completed"}"#;
        let t = 1_700_000_000;
        let good = sign(body, SECRET, t);
        // (body, Stripe-Signature header, secret, now, the refusal)
        type Case<'a> = (&'a [u8], Option<String>, &'a str, i64, SignatureError);
        let cases: Vec<Case<'_>> = vec![
            (body, None, SECRET, t, SignatureError::Missing),
            (
                body,
                Some("garbage".into()),
                SECRET,
                t,
                SignatureError::Malformed,
            ),
            (
                body,
                Some(format!("t=abc,v1={}", "a".repeat(64))),
                SECRET,
                t,
                SignatureError::Malformed,
            ),
            (
                body,
                Some(format!("t={t},t={t},{good}")),
                SECRET,
                t,
                SignatureError::Malformed,
            ),
            (
                body,
                Some(format!("t={t}")),
                SECRET,
                t,
                SignatureError::Malformed,
            ),
            // Another secret, an altered body, a signature moved to another time.
            (
                body,
                Some(sign(body, "whsec_other", t)),
                SECRET,
                t,
                SignatureError::Mismatch,
            ),
            (
                br#"{"id":"evt_2","type":"checkout.session.completed"}"#,
                Some(good.clone()),
                SECRET,
                t,
                SignatureError::Mismatch,
            ),
            (
                body,
                Some(good.replace(&format!("t={t}"), &format!("t={}", t + 1))),
                SECRET,
                t,
                SignatureError::Mismatch,
            ),
            (
                body,
                Some(format!("t={t},v1={}", &good[good.len() - 63..])),
                SECRET,
                t,
                SignatureError::Mismatch,
            ),
            // Older or newer than the tolerance.
            (
                body,
                Some(good.clone()),
                SECRET,
                t + 301,
                SignatureError::Expired,
            ),
            (
                body,
                Some(good.clone()),
                SECRET,
                t - 301,
                SignatureError::Expired,
            ),
            (
                body,
                Some(format!("{good},{}", "x".repeat(MAX_HEADER))),
                SECRET,
                t,
                SignatureError::Malformed,
            ),
        ];
        for (payload, header, secret, now, want) in cases {
            assert_eq!(
                verify(payload, header.as_deref(), secret, now, TOLERANCE),
                Err(want.clone()),
                "{header:?} {want:?}"
            );
        }
        assert_eq!(
            verify(body, Some(&good), SECRET, t + 300, TOLERANCE),
            Ok(())
        );
    }

    #[test]
    fn checkout_form_is_stripes_bracketed_form() {
        let usd = Currency::parse("USD").unwrap();
        let form = checkout_form(&CheckoutRequest {
            amount: Money::new(123_456, usd),
            name: "Invoice INV-000001",
            reference: "0190",
            metadata: &[("breeze_invoice", "0190")],
            success_url: "https://rmm.example/o/a/invoices/0190?paid=1",
        })
        .unwrap();
        let pairs: Vec<(String, String)> = serde_urlencoded::from_str(&form).unwrap();
        let get = |k: &str| pairs.iter().find(|(a, _)| a == k).map(|(_, v)| v.as_str());
        assert_eq!(get("mode"), Some("payment"));
        assert_eq!(get("line_items[0][price_data][currency]"), Some("usd"));
        assert_eq!(
            get("line_items[0][price_data][unit_amount]"),
            Some("123456")
        );
        assert_eq!(get("line_items[0][quantity]"), Some("1"));
        assert_eq!(get("metadata[breeze_invoice]"), Some("0190"));
        assert!(form.contains("line_items%5B0%5D%5Bprice_data%5D"), "{form}");
        let kwd = Currency::parse("KWD").unwrap();
        let bad = CheckoutRequest {
            amount: Money::new(1_005, kwd),
            ..CheckoutRequest {
                amount: Money::new(1, usd),
                name: "x",
                reference: "x",
                metadata: &[],
                success_url: "https://x",
            }
        };
        assert!(
            checkout_form(&bad).is_err(),
            "three-decimal amounts end in 0"
        );
    }
}
