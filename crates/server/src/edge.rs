//! The edge: what every request and response passes through, as one tower layer.
//!
//! In: a client's `X-Request-Id` is kept when it is fit to land in log lines and audit records
//! (at most [`MAX_REQUEST_ID_BYTES`] of letters, digits and `-_.:/@+=`); otherwise, or when
//! there is none, the request gets a new one (a UUID). Out: the response carries the request's
//! id (unless the handler set one), `X-Content-Type-Options: nosniff`, `Cache-Control: no-store`
//! unless the handler chose a policy (API responses carry sessions, keys and tenant data), and
//! is counted in the metrics by route, method and status. A server error (5xx) is logged at
//! error level with the request's id, route and method, whether or not the trace layer runs.
//!
//! Written as one service with a future of its own, not as a stack of middleware, because
//! axum wraps every route in the layer it is given: each axum middleware (`from_fn`,
//! `map_request`) boxes the rest of the request's future and clones its inner service into a
//! box of its own, on every request. This layer allocates nothing but the id it makes.

use std::{
    future::Future,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll, ready},
};

use axum::{
    extract::{MatchedPath, Request},
    http::{HeaderValue, Method, Response, StatusCode, header},
};
use pin_project_lite::pin_project;
use tower::{Layer, Service};

use crate::{REQUEST_ID_HEADER, metrics::Metrics};

/// The longest client-sent request id kept.
pub(crate) const MAX_REQUEST_ID_BYTES: usize = 128;

/// Whether a client's request id is kept as it is.
fn fit(id: &HeaderValue) -> bool {
    let b = id.as_bytes();
    !b.is_empty()
        && b.len() <= MAX_REQUEST_ID_BYTES
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || b"-_.:/@+=".contains(c))
}

/// A new request id: a random UUID, hyphenated.
fn new_id() -> HeaderValue {
    let mut buf = [0u8; uuid::fmt::Hyphenated::LENGTH];
    let id = uuid::Uuid::new_v4().hyphenated().encode_lower(&mut buf);
    HeaderValue::from_str(id).unwrap_or_else(|_| HeaderValue::from_static("invalid"))
}

/// The edge layer (see the module docs).
#[derive(Clone)]
pub(crate) struct EdgeLayer {
    metrics: Arc<Metrics>,
}

impl EdgeLayer {
    pub(crate) fn new(metrics: Arc<Metrics>) -> Self {
        Self { metrics }
    }
}

impl<S> Layer<S> for EdgeLayer {
    type Service = Edge<S>;

    fn layer(&self, inner: S) -> Edge<S> {
        Edge {
            inner,
            metrics: self.metrics.clone(),
        }
    }
}

/// The edge service around one route.
#[derive(Clone)]
pub(crate) struct Edge<S> {
    inner: S,
    metrics: Arc<Metrics>,
}

impl<S, B> Service<Request> for Edge<S>
where
    S: Service<Request, Response = Response<B>>,
{
    type Response = Response<B>;
    type Error = S::Error;
    type Future = EdgeFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request) -> Self::Future {
        let id = match req.headers().get(REQUEST_ID_HEADER) {
            Some(id) if fit(id) => id.clone(),
            _ => {
                let id = new_id();
                req.headers_mut().insert(REQUEST_ID_HEADER, id.clone());
                id
            }
        };
        let route = req.extensions().get::<MatchedPath>().cloned();
        let method = req.method().clone();
        EdgeFuture {
            inner: self.inner.call(req),
            done: Some(Done {
                id,
                route,
                method,
                metrics: self.metrics.clone(),
            }),
        }
    }
}

/// What the response needs from its request.
struct Done {
    id: HeaderValue,
    route: Option<MatchedPath>,
    method: Method,
    metrics: Arc<Metrics>,
}

pin_project! {
    /// The route's future, finishing its response as the module docs say.
    pub(crate) struct EdgeFuture<F> {
        #[pin]
        inner: F,
        done: Option<Done>,
    }
}

impl<F, B, E> Future for EdgeFuture<F>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<Response<B>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let mut response = ready!(this.inner.poll(cx))?;
        if let Some(done) = this.done.take() {
            let status = response.status();
            let headers = response.headers_mut();
            headers.entry(REQUEST_ID_HEADER).or_insert(done.id);
            headers.insert(
                header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            );
            headers
                .entry(header::CACHE_CONTROL)
                .or_insert(HeaderValue::from_static("no-store"));
            if matches!(
                status,
                StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE
            ) {
                // Every "come back later" says when, whichever layer refused (a rate limiter
                // Redis could not reach, a drain, a full cap): a client without it retries at
                // once or gives up. A refusal that knows better has set its own.
                headers
                    .entry(header::RETRY_AFTER)
                    .or_insert(HeaderValue::from_static("1"));
            }
            if status.is_server_error() {
                // The id the client sees, which the handler may have set itself.
                let id = headers.get(REQUEST_ID_HEADER).and_then(|v| v.to_str().ok());
                tracing::error!(
                    status = status.as_u16(),
                    method = %done.method,
                    route = done.route.as_ref().map(MatchedPath::as_str),
                    request_id = id,
                    "response failed"
                );
            }
            done.metrics
                .http_response(done.route.as_ref(), &done.method, status);
        }
        Poll::Ready(Ok(response))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fit_id_is_kept_and_anything_else_is_not() {
        assert!(fit(&HeaderValue::from_static("abc-123_x.y:z/@+=")));
        assert!(fit(&HeaderValue::from_str(
            &"a".repeat(MAX_REQUEST_ID_BYTES)
        )
        .unwrap()));
        assert!(!fit(&HeaderValue::from_str(
            &"a".repeat(MAX_REQUEST_ID_BYTES + 1)
        )
        .unwrap()));
        assert!(!fit(&HeaderValue::from_static("")));
        assert!(!fit(&HeaderValue::from_static("a b")));
        assert!(!fit(&HeaderValue::from_static("a\"b")));
    }

    /// Log lines written while `f` runs on this thread, at `filter`.
    fn logged(filter: &str, f: impl FnOnce()) -> String {
        #[derive(Clone, Default)]
        struct Sink(Arc<std::sync::Mutex<Vec<u8>>>);
        impl std::io::Write for Sink {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(buf);
                Ok(buf.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let sink = Sink::default();
        let writer = sink.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, f);
        let bytes = sink.0.lock().unwrap().clone();
        String::from_utf8(bytes).unwrap()
    }

    /// The edge around a service that answers `status`, called once (request id `req-42`).
    fn answer(status: u16) -> Response<()> {
        let inner = tower::service_fn(move |_: Request| async move {
            Ok::<_, std::convert::Infallible>(Response::builder().status(status).body(()).unwrap())
        });
        let mut edge = EdgeLayer::new(Arc::new(Metrics::new([]))).layer(inner);
        let req = Request::builder()
            .uri("/api/v1/devices")
            .header(REQUEST_ID_HEADER, "req-42")
            .body(axum::body::Body::empty())
            .unwrap();
        let future = edge.call(req);
        futures::executor::block_on(future).unwrap()
    }

    #[test]
    fn server_errors_are_logged_with_their_request_id_and_nothing_else_is() {
        let log = logged("warn", || {
            assert_eq!(answer(500).status(), 500);
            assert_eq!(answer(503).status(), 503);
            assert_eq!(answer(200).status(), 200);
            assert_eq!(answer(404).status(), 404);
        });
        assert_eq!(log.matches("response failed").count(), 2, "{log}");
        assert!(log.contains("ERROR"), "{log}");
        assert!(
            log.contains("status=500") && log.contains("status=503"),
            "{log}"
        );
        assert!(log.contains("request_id=\"req-42\""), "{log}");
    }

    #[test]
    fn every_429_and_503_says_when_to_retry() {
        for status in [429, 503] {
            let r = answer(status);
            assert_eq!(r.headers()[header::RETRY_AFTER], "1", "{status}");
        }
        for status in [200, 404, 500] {
            assert!(!answer(status).headers().contains_key(header::RETRY_AFTER));
        }
        // A refusal's own answer stands.
        let inner = tower::service_fn(|_: Request| async {
            Ok::<_, std::convert::Infallible>(
                Response::builder()
                    .status(429)
                    .header(header::RETRY_AFTER, "30")
                    .body(())
                    .unwrap(),
            )
        });
        let mut edge = EdgeLayer::new(Arc::new(Metrics::new([]))).layer(inner);
        let req = Request::builder()
            .uri("/mcp")
            .body(axum::body::Body::empty())
            .unwrap();
        let r = futures::executor::block_on(edge.call(req)).unwrap();
        assert_eq!(r.headers()[header::RETRY_AFTER], "30");
    }

    #[test]
    fn a_new_id_is_a_uuid() {
        let id = new_id();
        let id = id.to_str().unwrap();
        assert!(uuid::Uuid::parse_str(id).is_ok(), "{id}");
    }
}
