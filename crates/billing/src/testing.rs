//! Stand-ins for tests (feature `testing`), on local https ports with a test CA
//! (`breeze_sources::testing::TestCa`), speaking each service's wire format as its public
//! documentation shows it:
//!
//! - [`StripeStandIn`]: `POST /v1/checkout/sessions`, form-encoded, bearer-authenticated,
//!   idempotency keys (the same key and body replay the first answer; the same key with other
//!   parameters is an `idempotency_error`), Stripe's error objects (401 for a wrong key, 400
//!   `parameter_missing`), and the signed `checkout.session.completed` event a payment sends.
//! - [`SynnexStandIn`]: `POST /SynnexXML/PriceAvailability` with a `priceRequest`, answered
//!   with a `priceResponse` (a product, `Not found`, or an `errorDetail` for a wrong login).
//!
//! Each counts the requests it received, so a test can show that none was made.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
};

use axum::{
    Router,
    body::Bytes,
    extract::State,
    http::{HeaderMap, StatusCode, header},
    response::{IntoResponse, Response},
    routing::post,
};
use breeze_sources::testing::TestCa;
use serde_json::{Value, json};
use url::Url;

use crate::{stripe, xml};

/// A Stripe API on a local port.
pub struct StripeStandIn {
    pub url: Url,
    state: Arc<StripeState>,
}

struct StripeState {
    secret_key: String,
    requests: AtomicUsize,
    /// Sessions made, by id: (amount, currency).
    sessions: Mutex<HashMap<String, (i64, String)>>,
    /// Idempotency key → (body, answer).
    replays: Mutex<HashMap<String, (Bytes, Value)>>,
}

fn stripe_error(status: StatusCode, kind: &str, code: Option<&str>, message: &str) -> Response {
    let mut error = json!({ "type": kind, "message": message });
    if let Some(c) = code {
        error["code"] = json!(c);
    }
    (status, axum::Json(json!({ "error": error }))).into_response()
}

async fn create_session(
    State(s): State<Arc<StripeState>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    s.requests.fetch_add(1, Ordering::SeqCst);
    let auth = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if auth != format!("Bearer {}", s.secret_key) {
        return stripe_error(
            StatusCode::UNAUTHORIZED,
            "invalid_request_error",
            None,
            "Invalid API Key provided: sk_test_****",
        );
    }
    let form_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"));
    if !form_type {
        return stripe_error(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            None,
            "Invalid request: the body must be application/x-www-form-urlencoded",
        );
    }
    let key = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    if let Some(k) = &key
        && let Some((first, answer)) = s.replays.lock().expect("lock").get(k).cloned()
    {
        if first != body {
            return stripe_error(
                StatusCode::BAD_REQUEST,
                "idempotency_error",
                None,
                "Keys for idempotent requests can only be used with the same parameters they \
                 were first used with.",
            );
        }
        return (StatusCode::OK, axum::Json(answer)).into_response();
    }
    let Ok(pairs) = serde_urlencoded::from_bytes::<Vec<(String, String)>>(&body) else {
        return stripe_error(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            None,
            "Invalid form body",
        );
    };
    let get = |k: &str| pairs.iter().find(|(a, _)| a == k).map(|(_, v)| v.clone());
    for required in [
        "mode",
        "success_url",
        "line_items[0][quantity]",
        "line_items[0][price_data][currency]",
        "line_items[0][price_data][unit_amount]",
        "line_items[0][price_data][product_data][name]",
    ] {
        if get(required).is_none() {
            return stripe_error(
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                Some("parameter_missing"),
                &format!("Missing required param: {required}."),
            );
        }
    }
    let amount: i64 = get("line_items[0][price_data][unit_amount]")
        .and_then(|a| a.parse().ok())
        .unwrap_or(-1);
    let quantity: i64 = get("line_items[0][quantity]")
        .and_then(|a| a.parse().ok())
        .unwrap_or(0);
    if amount <= 0 || quantity <= 0 {
        return stripe_error(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            Some("parameter_invalid_integer"),
            "Invalid integer: unit_amount",
        );
    }
    let currency = get("line_items[0][price_data][currency]").unwrap_or_default();
    let n = s.sessions.lock().expect("lock").len() + 1;
    let id = format!("cs_test_{n:04}{}", uuid::Uuid::new_v4().simple());
    let metadata: serde_json::Map<String, Value> = pairs
        .iter()
        .filter_map(|(k, v)| {
            k.strip_prefix("metadata[")
                .and_then(|r| r.strip_suffix(']'))
                .map(|k| (k.to_owned(), json!(v)))
        })
        .collect();
    let session = json!({
        "id": id,
        "object": "checkout.session",
        "amount_subtotal": amount * quantity,
        "amount_total": amount * quantity,
        "client_reference_id": get("client_reference_id"),
        "currency": currency,
        "livemode": false,
        "metadata": metadata,
        "mode": "payment",
        "payment_intent": null,
        "payment_status": "unpaid",
        "status": "open",
        "success_url": get("success_url"),
        "url": format!("https://checkout.stripe.com/c/pay/{id}"),
    });
    s.sessions
        .lock()
        .expect("lock")
        .insert(id, (amount * quantity, currency));
    if let Some(k) = key {
        s.replays
            .lock()
            .expect("lock")
            .insert(k, (body, session.clone()));
    }
    (StatusCode::OK, axum::Json(session)).into_response()
}

impl StripeStandIn {
    /// A Stripe API accepting `secret_key`, served with `ca`'s certificate.
    pub async fn start(ca: &TestCa, secret_key: &str) -> Self {
        let state = Arc::new(StripeState {
            secret_key: secret_key.to_owned(),
            requests: AtomicUsize::new(0),
            sessions: Mutex::default(),
            replays: Mutex::default(),
        });
        let router = Router::new()
            .route("/v1/checkout/sessions", post(create_session))
            .with_state(state.clone());
        let addr = ca.serve(router, true).await;
        Self {
            url: Url::parse(&format!("https://localhost:{}", addr.port())).expect("url"),
            state,
        }
    }

    /// How many requests reached it.
    pub fn requests(&self) -> usize {
        self.state.requests.load(Ordering::SeqCst)
    }

    /// How many sessions it made.
    pub fn sessions(&self) -> usize {
        self.state.sessions.lock().expect("lock").len()
    }

    /// The event Stripe sends when session `id` is paid: its body, `event_id`, and the
    /// `Stripe-Signature` header signed with `webhook_secret` at unix time `t`.
    pub fn paid_event(
        &self,
        id: &str,
        event_id: &str,
        webhook_secret: &str,
        t: i64,
    ) -> (String, String) {
        let (amount, currency) = self
            .state
            .sessions
            .lock()
            .expect("lock")
            .get(id)
            .cloned()
            .unwrap_or((0, "usd".into()));
        let body = paid_event_body(
            id,
            event_id,
            amount,
            &currency,
            "checkout.session.completed",
        );
        let header = stripe::sign(body.as_bytes(), webhook_secret, t);
        (body, header)
    }
}

/// A `checkout.session.*` event for session `id`, paid, of `amount` in `currency` (lower
/// case), as Stripe writes it.
pub fn paid_event_body(
    id: &str,
    event_id: &str,
    amount: i64,
    currency: &str,
    kind: &str,
) -> String {
    json!({
        "id": event_id,
        "object": "event",
        "api_version": "2024-06-20",
        "created": 1_700_000_000,
        "livemode": false,
        "pending_webhooks": 1,
        "type": kind,
        "data": { "object": {
            "id": id,
            "object": "checkout.session",
            "amount_total": amount,
            "currency": currency,
            "mode": "payment",
            "payment_intent": format!("pi_{event_id}"),
            "payment_status": "paid",
            "status": "complete",
        } },
    })
    .to_string()
}

/// A `charge.refunded` event for charge `charge` of PaymentIntent `payment_intent`: `amount`
/// charged, `amount_refunded` of it refunded in all (lower-case `currency`), as Stripe writes
/// it (an Event whose `data.object` is the Charge).
pub fn refund_event_body(
    charge: &str,
    payment_intent: &str,
    event_id: &str,
    [amount, amount_refunded]: [i64; 2],
    currency: &str,
) -> String {
    json!({
        "id": event_id,
        "object": "event",
        "api_version": "2024-06-20",
        "created": 1_700_000_000,
        "livemode": false,
        "pending_webhooks": 1,
        "type": "charge.refunded",
        "data": {
            "object": {
                "id": charge,
                "object": "charge",
                "amount": amount,
                "amount_captured": amount,
                "amount_refunded": amount_refunded,
                "captured": true,
                "currency": currency,
                "paid": true,
                "payment_intent": payment_intent,
                "refunded": amount_refunded == amount,
                "status": "succeeded",
            },
            "previous_attributes": { "amount_refunded": 0 },
        },
    })
    .to_string()
}

/// A TD SYNNEX EC Express price-and-availability endpoint on a local port.
pub struct SynnexStandIn {
    pub url: Url,
    state: Arc<SynnexState>,
}

struct SynnexState {
    account: crate::SynnexAccount,
    requests: AtomicUsize,
}

/// The product the stand-in knows: SKU 5649807, part number `20VE0017US`.
pub const SKU: &str = "5649807";
pub const MFG_PN: &str = "20VE0017US";

async fn price_availability(State(s): State<Arc<SynnexState>>, body: Bytes) -> Response {
    s.requests.fetch_add(1, Ordering::SeqCst);
    let xml_answer = |doc: String| {
        (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/xml")],
            format!("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n{doc}"),
        )
            .into_response()
    };
    let Some(req) = std::str::from_utf8(&body)
        .ok()
        .and_then(|t| xml::parse(t).ok())
        .filter(|r| r.name == "priceRequest")
    else {
        return xml_answer(
            "<priceResponse><errorDetail>Invalid XML request</errorDetail></priceResponse>".into(),
        );
    };
    let a = &s.account;
    if req.text_of("customerNo") != Some(a.customer_no.as_str())
        || req.text_of("userName") != Some(a.user_name.as_str())
        || req.text_of("password") != Some(a.password.as_str())
    {
        return xml_answer(
            "<priceResponse><errorDetail>Invalid login credential</errorDetail></priceResponse>"
                .into(),
        );
    }
    let mut items = String::new();
    for line in req.all("skuList") {
        let n = line.text_of("lineNumber").unwrap_or("1");
        let known = line.text_of("synnexSKU") == Some(SKU) || line.text_of("mfgPN") == Some(MFG_PN);
        if known {
            items.push_str(&format!(
                "<PriceAvailabilityList><synnexSKU>{SKU}</synnexSKU><mfgPN>{MFG_PN}</mfgPN>\
                 <mfgCode>12345</mfgCode><status>Active</status>\
                 <description>ThinkPad X13 Gen 1 i5 16GB 512GB</description>\
                 <GlobalProductStatusCode>Active</GlobalProductStatusCode>\
                 <price>1049.50</price><msrp>1399.00</msrp><totalQuantity>17</totalQuantity>\
                 <AvailabilityByWarehouse><warehouseInfo><number>3</number>\
                 <zipcode>94538</zipcode><city>Fremont, CA</city><addr>44201 Nobel Dr</addr>\
                 </warehouseInfo><qty>12</qty></AvailabilityByWarehouse>\
                 <AvailabilityByWarehouse><warehouseInfo><number>6</number>\
                 <zipcode>60446</zipcode><city>Romeoville, IL</city>\
                 <addr>1180 Remington Blvd</addr></warehouseInfo><qty>5</qty>\
                 </AvailabilityByWarehouse><lineNumber>{n}</lineNumber>\
                 </PriceAvailabilityList>"
            ));
        } else {
            let asked = line
                .text_of("synnexSKU")
                .or_else(|| line.text_of("mfgPN"))
                .unwrap_or("");
            items.push_str(&format!(
                "<PriceAvailabilityList><synnexSKU>{}</synnexSKU><status>Not found</status>\
                 <lineNumber>{}</lineNumber></PriceAvailabilityList>",
                xml::escape(asked),
                xml::escape(n)
            ));
        }
    }
    xml_answer(format!(
        "<priceResponse><customerNo>{}</customerNo><userName>{}</userName>{items}</priceResponse>",
        xml::escape(&a.customer_no),
        xml::escape(&a.user_name)
    ))
}

impl SynnexStandIn {
    /// An EC Express endpoint accepting `account`, served with `ca`'s certificate.
    pub async fn start(ca: &TestCa, account: crate::SynnexAccount) -> Self {
        let state = Arc::new(SynnexState {
            account,
            requests: AtomicUsize::new(0),
        });
        let router = Router::new()
            .route("/SynnexXML/PriceAvailability", post(price_availability))
            .with_state(state.clone());
        let addr = ca.serve(router, true).await;
        Self {
            url: Url::parse(&format!("https://localhost:{}", addr.port())).expect("url"),
            state,
        }
    }

    /// How many requests reached it.
    pub fn requests(&self) -> usize {
        self.state.requests.load(Ordering::SeqCst)
    }
}
