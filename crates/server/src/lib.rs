//! Breeze's HTTP edge: the axum application and how it is served.
//!
//! [`app`] builds the whole router from an [`AppState`], so tests drive it with `oneshot` and no
//! socket. Handlers are thin: extract, authorize through [`authz`], call the store or auth
//! service, return JSON. Every failure becomes an [`ApiError`], mapped once to
//! `{"error":{"code","message"}}`.

mod authz;
mod error;
mod extract;
mod routes;

use std::{sync::Arc, time::Duration};

use axum::{Router, extract::DefaultBodyLimit, http::HeaderName};
use breeze_auth::AuthService;
use breeze_core::Clock;
use breeze_store::Store;
use tokio::net::TcpListener;
use tower_http::{
    request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer},
    trace::TraceLayer,
};

pub use error::ApiError;

/// The header carrying a request's id, set when the client sent none.
pub const REQUEST_ID_HEADER: &str = "x-request-id";

/// The name of the dashboard session cookie.
pub const SESSION_COOKIE: &str = "breeze_session";

/// Largest REST request body accepted.
pub const MAX_REST_BODY_BYTES: usize = 1024 * 1024;

/// Settings the HTTP layer needs.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Where clients reach this server, e.g. `https://rmm.example.com`.
    pub public_url: String,
    /// Production hardening (secure cookies always; later: fail-closed limits, allowlists).
    pub production: bool,
}

impl ServerConfig {
    /// Whether cookies get the `Secure` attribute: in production, or whenever served over https.
    pub fn secure_cookies(&self) -> bool {
        self.production || self.public_url.starts_with("https://")
    }
}

/// Everything a handler can reach. Cheap to clone.
#[derive(Clone)]
pub struct AppState {
    pub store: Store,
    pub auth: AuthService,
    pub clock: Arc<dyn Clock>,
    pub config: Arc<ServerConfig>,
}

/// The whole application.
pub fn app(state: AppState) -> Router {
    let request_id = HeaderName::from_static(REQUEST_ID_HEADER);
    Router::new()
        .merge(routes::health::router())
        .nest("/api/v1", routes::api_router())
        .fallback(routes::not_found)
        .method_not_allowed_fallback(routes::method_not_allowed)
        .layer(DefaultBodyLimit::max(MAX_REST_BODY_BYTES))
        .layer(
            TraceLayer::new_for_http().make_span_with(|req: &axum::http::Request<_>| {
                let id = req
                    .headers()
                    .get(REQUEST_ID_HEADER)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default();
                tracing::info_span!("http", method = %req.method(), path = %req.uri().path(), request_id = %id)
            }),
        )
        .layer(PropagateRequestIdLayer::new(request_id.clone()))
        .layer(SetRequestIdLayer::new(request_id, MakeRequestUuid))
        .with_state(state)
}

/// Serves `app` on `listener` until `shutdown` resolves, then lets in-flight requests finish
/// (for at most 30 seconds).
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let server = axum::serve(listener, app(state)).with_graceful_shutdown(async move {
        shutdown.await;
        let _ = tx.send(());
    });
    let drain_deadline = async {
        let _ = rx.await;
        tokio::time::sleep(Duration::from_secs(30)).await;
    };
    tokio::select! {
        r = server => r,
        () = drain_deadline => {
            tracing::warn!("in-flight requests did not finish within 30 s; stopping anyway");
            Ok(())
        }
    }
}
