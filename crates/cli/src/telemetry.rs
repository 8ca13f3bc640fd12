//! Logs and traces: the process's one `tracing` subscriber.
//!
//! Logs go to stderr (pretty or JSON) under `BREEZE_LOG`. Traces go over OTLP/HTTP to a
//! collector when `OTEL_EXPORTER_OTLP_ENDPOINT` (or `…_TRACES_ENDPOINT`) is set, and nowhere
//! otherwise. The two are separate layers with their own filters: the spans a trace is made of
//! (`tool.call`, `guard`, `handler`, `approval.wait`, `agent.submit`, `agent.wait`, and the
//! store's SQL statements as span events) are `debug` spans of Breeze's crates, so with no
//! exporter they are disabled where they are written and the hot path pays nothing for them.
//!
//! Exporting happens on the SDK's own thread (a batch every `OTEL_BSP_SCHEDULE_DELAY` ms, 5 s by
//! default); a collector that is down costs dropped spans, never a request.

use std::time::Duration;

use anyhow::Context;
use opentelemetry::{KeyValue, trace::TracerProvider as _};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::{
    Resource,
    trace::{Sampler, SdkTracerProvider},
};
use tracing::level_filters::LevelFilter;
use tracing_subscriber::{Layer, filter::Targets, layer::SubscriberExt, util::SubscriberInitExt};

use crate::{
    config::{LogFormat, Settings},
    trace_settings::TraceSettings,
};

/// What must outlive the process's work: the tracer provider, flushed on drop.
pub(crate) struct Telemetry(Option<SdkTracerProvider>);

impl Drop for Telemetry {
    fn drop(&mut self) {
        if let Some(provider) = self.0.take()
            && let Err(e) = provider.shutdown()
        {
            eprintln!("breeze: flushing traces: {e}");
        }
    }
}

/// Installs the subscriber: logs always, traces when configured. A tracer that cannot be built
/// is reported and left out; Breeze runs without it.
pub(crate) fn init(settings: &Settings) -> Telemetry {
    let filter = tracing_subscriber::EnvFilter::new(&settings.log_filter);
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let logs = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(ansi);
    let logs = match settings.log_format {
        LogFormat::Json => logs.json().with_filter(filter).boxed(),
        LogFormat::Pretty => logs.with_filter(filter).boxed(),
    };
    let (traces, provider) = match settings.traces.as_ref().map(provider) {
        None => (None, None),
        Some(Ok(provider)) => {
            let tracer = provider.tracer("breeze");
            let layer = tracing_opentelemetry::layer()
                .with_tracer(tracer)
                .with_filter(trace_filter());
            (Some(layer), Some(provider))
        }
        Some(Err(e)) => {
            eprintln!("breeze: traces are off: {e:#}");
            (None, None)
        }
    };
    tracing_subscriber::registry()
        .with(logs)
        .with(traces)
        .init();
    Telemetry(provider)
}

/// Links a request's span to the W3C trace context (`traceparent`, `tracestate`) its client
/// sent, so Breeze's spans join the caller's trace; a missing or malformed header leaves the
/// request its own trace.
pub(crate) fn span_parent() -> breeze_server::SpanParent {
    use opentelemetry::propagation::{Extractor, TextMapPropagator};
    use tracing_opentelemetry::OpenTelemetrySpanExt;

    struct Headers<'a>(&'a axum::http::HeaderMap);
    impl Extractor for Headers<'_> {
        fn get(&self, key: &str) -> Option<&str> {
            self.0.get(key).and_then(|v| v.to_str().ok())
        }
        fn keys(&self) -> Vec<&str> {
            self.0.keys().map(axum::http::HeaderName::as_str).collect()
        }
    }
    let propagator = opentelemetry_sdk::propagation::TraceContextPropagator::new();
    breeze_server::SpanParent(std::sync::Arc::new(move |headers, span| {
        if headers.contains_key("traceparent") {
            let cx = propagator.extract(&Headers(headers));
            // Only a span the tracing layer records can take a parent; others ignore it.
            let _ = span.set_parent(cx);
        }
    }))
}

/// What a trace is made of: Breeze's spans (the request's `http` span at `info`, the steps of a
/// call at `debug`) and the store's statements (sqlx logs each at `debug`), nothing else.
fn trace_filter() -> Targets {
    Targets::new()
        .with_target("breeze", LevelFilter::DEBUG)
        .with_target("sqlx::query", LevelFilter::DEBUG)
}

fn provider(t: &TraceSettings) -> anyhow::Result<SdkTracerProvider> {
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_endpoint(&t.endpoint)
        .with_protocol(if t.json {
            Protocol::HttpJson
        } else {
            Protocol::HttpBinary
        })
        .with_timeout(Duration::from_secs(10))
        .with_headers(t.headers.iter().cloned().collect())
        .build()
        .context("building the OTLP exporter")?;
    Ok(SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
            t.ratio,
        ))))
        .with_resource(
            Resource::builder()
                .with_service_name(t.service_name.clone())
                .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
                .build(),
        )
        .build())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(vars: &[(&str, &str)]) -> anyhow::Result<Option<TraceSettings>> {
        TraceSettings::load(
            &vars
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        )
    }

    #[test]
    fn off_unless_an_endpoint_is_set() {
        assert_eq!(load(&[("OTEL_SERVICE_NAME", "x")]).unwrap(), None);
    }

    #[test]
    fn the_base_endpoint_gets_the_traces_path_and_the_signal_one_wins() {
        let t = load(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/")])
            .unwrap()
            .unwrap();
        assert_eq!(t.endpoint, "http://collector:4318/v1/traces");
        assert!(!t.json);
        assert_eq!(t.service_name, "breeze");
        assert!((t.ratio - 1.0).abs() < f64::EPSILON);
        let t = load(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"),
            (
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "https://t.example/otlp",
            ),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "x-api-key=s3cr=t, x-team=ops"),
            ("OTEL_TRACES_SAMPLER_ARG", "0.25"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(t.endpoint, "https://t.example/otlp");
        assert!(t.json);
        assert_eq!(
            t.headers,
            [
                ("x-api-key".to_owned(), "s3cr=t".to_owned()),
                ("x-team".to_owned(), "ops".to_owned())
            ]
        );
        assert!((t.ratio - 0.25).abs() < f64::EPSILON);
    }

    #[test]
    fn bad_values_name_their_variable() {
        for (vars, names) in [
            (
                &[("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318")][..],
                "OTEL_EXPORTER_OTLP_ENDPOINT",
            ),
            (
                &[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://")][..],
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            ),
            (
                &[
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
                    ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
                ][..],
                "OTEL_EXPORTER_OTLP_PROTOCOL: grpc is not supported",
            ),
            (
                &[
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
                    ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "thrift"),
                ][..],
                "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
            ),
            (
                &[
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
                    ("OTEL_EXPORTER_OTLP_HEADERS", "authorization: Bearer abc"),
                ][..],
                "OTEL_EXPORTER_OTLP_HEADERS: entry \"authorization\"",
            ),
            (
                &[
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
                    ("OTEL_TRACES_SAMPLER_ARG", "2"),
                ][..],
                "OTEL_TRACES_SAMPLER_ARG",
            ),
        ] {
            let e = load(vars).unwrap_err().to_string();
            assert!(e.contains(names), "{vars:?}: {e}");
            assert!(!e.contains("abc"), "a header's value is never echoed: {e}");
        }
    }
}
