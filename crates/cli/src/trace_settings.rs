//! Trace export settings, read from the OpenTelemetry SDK's own `OTEL_*` variables: part of the
//! configuration (`crate::config`), used by the subscriber (`crate::telemetry`). Apart from both
//! so that neither depends on the other for it.

use std::collections::BTreeMap;

use anyhow::{Context, bail};

/// Where and how traces are exported (`OTEL_*`, the OpenTelemetry SDK's own variable names).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TraceSettings {
    /// The traces URL (`…/v1/traces`).
    pub(crate) endpoint: String,
    pub(crate) json: bool,
    /// `OTEL_EXPORTER_OTLP_HEADERS`: sent with every export (a collector's API key).
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) service_name: String,
    /// `OTEL_TRACES_SAMPLER_ARG`: the share of traces kept (parent-based: a kept trace keeps
    /// all of its spans).
    pub(crate) ratio: f64,
}

impl TraceSettings {
    /// `None` when no endpoint is set (tracing off); an error naming the variable when a value
    /// is not usable.
    pub(crate) fn load(env: &BTreeMap<String, String>) -> anyhow::Result<Option<Self>> {
        let get = |k: &str| env.get(k).map(|v| v.trim()).filter(|v| !v.is_empty());
        let endpoint = match (
            get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
            get("OTEL_EXPORTER_OTLP_ENDPOINT"),
        ) {
            (Some(url), _) => (url.to_owned(), "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
            // The base endpoint gets the signal's path, as the OTLP specification says.
            (None, Some(base)) => (
                format!("{}/v1/traces", base.trim_end_matches('/')),
                "OTEL_EXPORTER_OTLP_ENDPOINT",
            ),
            (None, None) => return Ok(None),
        };
        let (endpoint, origin) = endpoint;
        let rest = endpoint
            .strip_prefix("http://")
            .or_else(|| endpoint.strip_prefix("https://"));
        if rest
            .is_none_or(|r| r.is_empty() || r.starts_with('/') || r.contains(char::is_whitespace))
        {
            bail!("invalid {origin}: {endpoint:?} (expected http(s)://host[:port][/path])");
        }
        let protocol = get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
            .map(|v| (v, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"))
            .or_else(|| {
                get("OTEL_EXPORTER_OTLP_PROTOCOL").map(|v| (v, "OTEL_EXPORTER_OTLP_PROTOCOL"))
            });
        let json = match protocol {
            None | Some(("http/protobuf", _)) => false,
            Some(("http/json", _)) => true,
            Some(("grpc", origin)) => bail!(
                "invalid {origin}: grpc is not supported; use http/protobuf (the default) or http/json"
            ),
            Some((v, origin)) => {
                bail!("invalid {origin}: {v:?} (expected http/protobuf or http/json)")
            }
        };
        let headers = match get("OTEL_EXPORTER_OTLP_HEADERS") {
            None => Vec::new(),
            Some(v) => v
                .split(',')
                .filter(|h| !h.trim().is_empty())
                .map(|h| {
                    let (k, v) = h.split_once('=').with_context(|| {
                        // The value may be a secret: name the entry by its key side only.
                        format!(
                            "invalid OTEL_EXPORTER_OTLP_HEADERS: entry {:?} is not key=value",
                            h.split(':').next().unwrap_or_default().trim()
                        )
                    })?;
                    Ok((k.trim().to_owned(), v.trim().to_owned()))
                })
                .collect::<anyhow::Result<_>>()?,
        };
        let ratio = match get("OTEL_TRACES_SAMPLER_ARG") {
            None => 1.0,
            Some(v) => match v.parse::<f64>() {
                Ok(r) if (0.0..=1.0).contains(&r) => r,
                _ => bail!("invalid OTEL_TRACES_SAMPLER_ARG: {v:?} (expected 0.0 to 1.0)"),
            },
        };
        Ok(Some(TraceSettings {
            endpoint,
            json,
            headers,
            service_name: get("OTEL_SERVICE_NAME").unwrap_or("breeze").to_owned(),
            ratio,
        }))
    }
}
