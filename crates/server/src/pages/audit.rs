//! `GET /o/{org}/audit`: the organization's audit log, newest first, filtered by action
//! (exact, or a prefix ending in `.` or `*`), actor, resource, result, request and time, 50
//! rows to a page with the store's keyset cursor; each row opens to its full record (details,
//! outcome, and a link to everything the same request did: a tool call and the changes it
//! made). Actors are named — a key by its name, a connected app by its client, a person by
//! name. MCP protocol noise (initialize, notifications, list calls, streams opened, sessions
//! ended) is hidden unless the person ticks "show protocol messages" or filters by action.
//! `GET /o/{org}/audit/export.csv` streams the same filter as CSV, at most [`EXPORT_MAX`]
//! rows. Needs `audit.read`, like `/api/v1/orgs/{org}/audit`.

use askama::Template;
use axum::{
    Router,
    extract::{Path, Query, State},
    http::StatusCode,
    response::Response,
    routing::get,
};
use breeze_core::{ActorType, AiSessionId, AuditResult, Operation, Permission, Timestamp};
use breeze_store::{AuditCursor, AuditFilter, AuditView};
use chrono::{NaiveDateTime, TimeZone, Utc};
use serde::Deserialize;

use super::{Layout, PageError, Section, SignedIn, render_status};
use crate::AppState;

const PAGE: u32 = 50;
/// The most rows one CSV export writes.
pub(crate) const EXPORT_MAX: usize = 50_000;
/// Rows fetched per query while exporting.
const EXPORT_BATCH: u32 = 500;

/// MCP protocol messages a person rarely wants to read (actions, or `LIKE` patterns).
const NOISE: &[&str] = &[
    "mcp.initialize",
    "mcp.ping",
    "mcp.notifications.%",
    "mcp.%.list",
    "mcp.stream.open",
    "mcp.session.evicted",
    "mcp.session.delete",
    "mcp.server.discover",
    "mcp.subscriptions.listen",
];

pub(super) fn router() -> Router<AppState> {
    Router::new()
        .route("/o/{org}/audit", get(show))
        .route("/o/{org}/audit/export.csv", get(export))
}

/// The filter form, as typed (every field may be empty).
#[derive(Debug, Default, Deserialize, Clone)]
#[serde(default)]
struct Q {
    action: String,
    actor_type: String,
    actor_id: String,
    /// One AI chat session's records.
    session: String,
    resource_type: String,
    resource_id: String,
    result: String,
    since: String,
    until: String,
    /// One request's records only.
    request: String,
    /// `1`: show MCP protocol messages too.
    noise: String,
    cursor: String,
}

impl Q {
    /// What the dashboard narrows beyond the filter: protocol noise hidden unless asked for
    /// (or an action is named), one request's records.
    fn view(&self) -> AuditView {
        let show_noise = self.noise == "1" || !self.action.trim().is_empty();
        AuditView {
            exclude_actions: if show_noise {
                Vec::new()
            } else {
                NOISE.to_vec()
            },
            request_id: some(&self.request),
        }
    }
}

struct Row {
    id: String,
    when: String,
    actor: String,
    actor_id: String,
    action: String,
    resource: String,
    result: String,
    error: String,
    request_id: String,
    /// `request_id` encoded for a query string.
    request_q: String,
    /// The chat session the assistant acted in, for a record of the assistant (a UUID, safe
    /// in a query string); empty otherwise.
    session: String,
    details: String,
}

struct Choice {
    value: &'static str,
    selected: bool,
}

#[derive(Template)]
#[template(path = "audit.html")]
struct AuditPage {
    l: Layout,
    q: Q,
    actor_types: Vec<Choice>,
    results: Vec<Choice>,
    rows: Vec<Row>,
    error: String,
    /// The query string of the next page, empty on the last.
    next: String,
    first_page: bool,
    /// This filter's query string without the cursor (the export link).
    this: String,
    show_noise: bool,
}

/// `2026-11-30T12:00`, `2026-11-30T12:00:05` (a `datetime-local` field, read as UTC) or
/// RFC 3339.
fn parse_time(field: &str, s: &str) -> Result<Option<Timestamp>, String> {
    let s = s.trim();
    if s.is_empty() {
        return Ok(None);
    }
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(s) {
        return Ok(Some(t.with_timezone(&Utc)));
    }
    for f in ["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M"] {
        if let Ok(n) = NaiveDateTime::parse_from_str(s, f) {
            return Ok(Some(Utc.from_utc_datetime(&n)));
        }
    }
    Err(format!(
        "{field}: {s:?} is not a time (use 2026-11-30T12:00, UTC)"
    ))
}

fn some(s: &str) -> Option<String> {
    let s = s.trim();
    (!s.is_empty()).then(|| s.to_owned())
}

fn filter_of(q: &Q) -> Result<AuditFilter, String> {
    let actor_type = match q.actor_type.trim() {
        "" => None,
        s => Some(s.parse::<ActorType>().map_err(|e| e.to_string())?),
    };
    let result = match q.result.trim() {
        "" => None,
        s => Some(s.parse::<AuditResult>().map_err(|e| e.to_string())?),
    };
    for (name, v) in [
        ("request", &q.request),
        ("action", &q.action),
        ("actor", &q.actor_id),
        ("chat session", &q.session),
        ("resource type", &q.resource_type),
        ("resource id", &q.resource_id),
    ] {
        if v.len() > 200 {
            return Err(format!("{name}: at most 200 characters"));
        }
    }
    let filter = AuditFilter {
        action: some(&q.action),
        resource_type: some(&q.resource_type),
        resource_id: some(&q.resource_id),
        actor_type,
        actor_id: some(&q.actor_id),
        result,
        since: parse_time("from", &q.since)?,
        until: parse_time("until", &q.until)?,
    };
    match q.session.trim() {
        "" => Ok(filter),
        s => {
            let session = s
                .parse::<AiSessionId>()
                .map_err(|_| format!("chat session: {s:?} is not a session id"))?;
            filter.in_chat_session(session).map_err(|e| e.to_string())
        }
    }
}

async fn show(
    State(state): State<AppState>,
    who: SignedIn,
    Path(org): Path<String>,
    q: Result<Query<Q>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, PageError> {
    let scope = who
        .scope(&state, &org, Operation::read(Permission::AuditRead))
        .await?;
    let (q, mut error) = match q {
        Ok(Query(q)) => (q, String::new()),
        Err(e) => (Q::default(), e.body_text()),
    };
    let mut rows = Vec::new();
    let mut next = String::new();
    let parsed = filter_of(&q).and_then(|f| {
        let cursor = match q.cursor.trim() {
            "" => None,
            c => Some(AuditCursor::decode(c).map_err(|e| e.to_string())?),
        };
        Ok((f, cursor))
    });
    match parsed {
        Err(e) if error.is_empty() => error = e,
        Err(_) => {}
        Ok((filter, cursor)) if error.is_empty() => {
            let page = scope
                .store(&state)
                .audit()
                .query_audit_view(&filter, &q.view(), cursor, PAGE)
                .await?;
            let names = super::names::Names::load(
                &state,
                scope.org.id,
                page.records.iter().map(|r| r.event.actor.to_string()),
            )
            .await;
            rows = page
                .records
                .into_iter()
                .map(|r| Row {
                    id: r.id.to_string(),
                    when: r.created_at.format("%Y-%m-%d %H:%M:%S").to_string(),
                    actor: names.of(&r.event.actor.to_string()),
                    actor_id: r.event.actor.to_string(),
                    session: match r.event.actor.kind {
                        ActorType::AiChat => r
                            .event
                            .actor
                            .id
                            .parse::<AiSessionId>()
                            .map(|s| s.to_string())
                            .unwrap_or_default(),
                        _ => String::new(),
                    },
                    action: r.event.action,
                    resource: match r.event.resource_id {
                        Some(id) => format!("{} {id}", r.event.resource_type),
                        None => r.event.resource_type,
                    },
                    result: r.event.result.as_str().to_owned(),
                    error: r.event.error_message.unwrap_or_default(),
                    request_q: r
                        .event
                        .request_id
                        .as_deref()
                        .map(|id| {
                            percent_encoding::utf8_percent_encode(
                                id,
                                percent_encoding::NON_ALPHANUMERIC,
                            )
                            .to_string()
                        })
                        .unwrap_or_default(),
                    request_id: r.event.request_id.unwrap_or_default(),
                    details: serde_json::to_string_pretty(&r.event.details).unwrap_or_default(),
                })
                .collect();
            if let Some(c) = page.next_cursor {
                let mut nq = q.clone();
                nq.cursor = c.encode();
                next = query_string(&nq);
            }
        }
        Ok(_) => {}
    }
    let status = if error.is_empty() {
        StatusCode::OK
    } else {
        StatusCode::BAD_REQUEST
    };
    let choices = |all: &[&'static str], current: &str| {
        all.iter()
            .map(|v| Choice {
                value: v,
                selected: *v == current,
            })
            .collect()
    };
    let actor_types: Vec<&'static str> = ActorType::ALL.iter().map(|a| a.as_str()).collect();
    let results: Vec<&'static str> = AuditResult::ALL.iter().map(|a| a.as_str()).collect();
    let l = Layout::for_user(&state, &who, Some(&scope.org), Section::Audit, "Audit log").await?;
    render_status(
        status,
        &AuditPage {
            l,
            actor_types: choices(&actor_types, q.actor_type.trim()),
            results: choices(&results, q.result.trim()),
            first_page: q.cursor.trim().is_empty(),
            this: {
                let mut t = q.clone();
                t.cursor.clear();
                query_string(&t)
            },
            show_noise: q.noise == "1",
            q,
            rows,
            error,
            next,
        },
    )
}

/// `q` as a query string, empty fields left out.
fn query_string(q: &Q) -> String {
    let pairs: Vec<(&str, &str)> = [
        ("action", &q.action),
        ("actor_type", &q.actor_type),
        ("actor_id", &q.actor_id),
        ("session", &q.session),
        ("resource_type", &q.resource_type),
        ("resource_id", &q.resource_id),
        ("result", &q.result),
        ("since", &q.since),
        ("until", &q.until),
        ("request", &q.request),
        ("noise", &q.noise),
        ("cursor", &q.cursor),
    ]
    .into_iter()
    .filter(|(_, v)| !v.trim().is_empty())
    .map(|(k, v)| (k, v.as_str()))
    .collect();
    serde_urlencoded::to_string(pairs).unwrap_or_default()
}

/// One CSV field: quoted when it holds a separator, quote or line break; a cell a spreadsheet
/// would run as a formula (`=`, `+`, `-`, `@`, tab, CR) is prefixed with `'`.
fn csv_field(out: &mut String, v: &str) {
    let v = if v.starts_with(['=', '+', '-', '@', '\t', '\r']) {
        std::borrow::Cow::Owned(format!("'{v}"))
    } else {
        std::borrow::Cow::Borrowed(v)
    };
    if v.contains([',', '"', '\n', '\r']) {
        out.push('"');
        out.push_str(&v.replace('"', "\"\""));
        out.push('"');
    } else {
        out.push_str(&v);
    }
}

pub(super) fn csv_row(out: &mut String, fields: &[&str]) {
    for (i, f) in fields.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        csv_field(out, f);
    }
    out.push_str("\r\n");
}

/// `GET /o/{org}/audit/export.csv?…`: the filtered log as CSV, newest first, streamed in
/// batches of [`EXPORT_BATCH`] through the store's cursor, at most [`EXPORT_MAX`] rows (the
/// last line says when it stopped there).
async fn export(
    State(state): State<AppState>,
    who: SignedIn,
    Path(org): Path<String>,
    q: Result<Query<Q>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, PageError> {
    use axum::response::IntoResponse;
    let scope = who
        .scope(&state, &org, Operation::read(Permission::AuditRead))
        .await?;
    let Query(q) = q.map_err(|e| PageError::bad_request(e.body_text()))?;
    let filter = filter_of(&q).map_err(PageError::bad_request)?;
    let view = q.view();
    let org_id = scope.org.id;
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<String, std::io::Error>>(4);
    tokio::spawn(async move {
        let mut out = String::new();
        csv_row(
            &mut out,
            &[
                "time_utc",
                "actor",
                "actor_name",
                "action",
                "resource_type",
                "resource_id",
                "result",
                "error",
                "request_id",
                "details",
            ],
        );
        let mut cursor = None;
        let mut written = 0usize;
        loop {
            let page = match state
                .store
                .org(org_id)
                .audit()
                .query_audit_view(&filter, &view, cursor, EXPORT_BATCH)
                .await
            {
                Ok(p) => p,
                Err(e) => {
                    tracing::warn!(error = %e, "audit export stopped");
                    let _ = tx.send(Ok(std::mem::take(&mut out))).await;
                    let _ = tx
                        .send(Err(std::io::Error::other("audit export failed")))
                        .await;
                    return;
                }
            };
            let names = super::names::Names::load(
                &state,
                org_id,
                page.records.iter().map(|r| r.event.actor.to_string()),
            )
            .await;
            for r in &page.records {
                if written == EXPORT_MAX {
                    csv_row(
                        &mut out,
                        &[&format!(
                            "# stopped at {EXPORT_MAX} rows: narrow the filter"
                        )],
                    );
                    let _ = tx.send(Ok(out)).await;
                    return;
                }
                let actor = r.event.actor.to_string();
                csv_row(
                    &mut out,
                    &[
                        &r.created_at.to_rfc3339(),
                        &actor,
                        &names.of(&actor),
                        &r.event.action,
                        &r.event.resource_type,
                        r.event.resource_id.as_deref().unwrap_or(""),
                        r.event.result.as_str(),
                        r.event.error_message.as_deref().unwrap_or(""),
                        r.event.request_id.as_deref().unwrap_or(""),
                        &serde_json::to_string(&r.event.details).unwrap_or_default(),
                    ],
                );
                written += 1;
            }
            if tx.send(Ok(std::mem::take(&mut out))).await.is_err() {
                return;
            }
            match page.next_cursor {
                Some(c) => cursor = Some(c),
                None => return,
            }
        }
    });
    let body = axum::body::Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(rx));
    let name = format!("audit-{}.csv", scope.org.slug);
    Ok((
        [
            (
                axum::http::header::CONTENT_TYPE,
                "text/csv; charset=utf-8".to_owned(),
            ),
            (
                axum::http::header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{name}\""),
            ),
        ],
        body,
    )
        .into_response())
}

#[cfg(test)]
mod tests {
    use super::csv_row;

    #[test]
    fn csv_fields_are_quoted_and_formulas_defused() {
        let mut out = String::new();
        csv_row(
            &mut out,
            &["a", "b,c", "say \"hi\"", "=SUM(A1)", "line\nbreak"],
        );
        assert_eq!(
            out,
            "a,\"b,c\",\"say \"\"hi\"\"\",'=SUM(A1),\"line\nbreak\"\r\n"
        );
    }
}
