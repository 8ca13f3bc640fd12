//! `POST /api/v1/webhooks/stripe/{partner}`: the endpoint a partner registers at Stripe for
//! its payment links' events.
//!
//! No session or key: the body's `Stripe-Signature` is the authentication, verified under the
//! partner's own signing secret with a tolerance on its timestamp
//! (`breeze_billing::stripe::verify`); an event is acted on once, however often it arrives
//! (`breeze_billing::Billing::take_stripe_webhook`). A forged, altered, expired or unsigned
//! body, an unknown partner and a partner without Stripe all answer the same 400, so the
//! endpoint tells nothing about who is set up. A store failure answers 503, so Stripe
//! delivers again later.

use axum::{
    Json, Router,
    body::Bytes,
    extract::{Path, State},
    http::{HeaderMap, StatusCode},
    response::{IntoResponse, Response},
    routing::post,
};
use breeze_billing::{WebhookError, WebhookOutcome};
use breeze_core::PartnerId;
use serde_json::json;

use crate::{ApiError, AppState};

/// The largest event body read (Stripe's events are a few kilobytes).
const MAX_EVENT_BYTES: usize = 256 * 1024;

pub(crate) fn router() -> Router<AppState> {
    crate::body_limit(
        Router::new().route("/webhooks/stripe/{partner}", post(stripe_webhook)),
        MAX_EVENT_BYTES,
    )
}

async fn stripe_webhook(
    State(state): State<AppState>,
    Path(partner): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let refused = || {
        ApiError::bad_request("the webhook's signature does not verify for this endpoint")
            .into_response()
    };
    let (Some(billing), Ok(partner)) = (state.billing.as_ref(), partner.parse::<uuid::Uuid>())
    else {
        return refused();
    };
    let signature = headers
        .get("stripe-signature")
        .and_then(|v| v.to_str().ok());
    match billing
        .take_stripe_webhook(PartnerId(partner), &body, signature)
        .await
    {
        Ok(outcome) => {
            let what = match outcome {
                WebhookOutcome::Recorded { .. } => "recorded",
                WebhookOutcome::QuotePaid { .. } => "quote_paid",
                WebhookOutcome::Refunded { .. } => "refunded",
                WebhookOutcome::Duplicate => "duplicate",
                WebhookOutcome::Unmatched(_) => "unmatched",
                WebhookOutcome::Ignored => "ignored",
            };
            (
                StatusCode::OK,
                Json(json!({ "received": true, "result": what })),
            )
                .into_response()
        }
        Err(WebhookError::Signature(e)) => {
            tracing::info!(error = %e, "a Stripe webhook was refused");
            refused()
        }
        Err(WebhookError::NotAnEvent) => {
            ApiError::bad_request("the body is not a Stripe event").into_response()
        }
        Err(WebhookError::Store(e)) => ApiError::from(e).into_response(),
    }
}
