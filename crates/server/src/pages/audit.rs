//! `GET /o/{org}/audit`: the organization's audit log, newest first, filtered by action
//! (exact, or a prefix ending in `.` or `*`), actor, resource, result and time, 50 rows to a
//! page with the store's keyset cursor; each row opens to its full record. Needs `audit.read`,
//! like `/api/v1/orgs/{org}/audit`.

use askama::Template;
use axum::{
    Router,
    extract::{Path, Query, State},
    http::StatusCode,
    response::Response,
    routing::get,
};
use breeze_core::{ActorType, AuditResult, Operation, Permission, Timestamp};
use breeze_store::{AuditCursor, AuditFilter};
use chrono::{NaiveDateTime, TimeZone, Utc};
use serde::Deserialize;

use super::{Layout, PageError, Section, SignedIn, render_status};
use crate::AppState;

const PAGE: u32 = 50;

pub(super) fn router() -> Router<AppState> {
    Router::new().route("/o/{org}/audit", get(show))
}

/// The filter form, as typed (every field may be empty).
#[derive(Debug, Default, Deserialize, Clone)]
#[serde(default)]
struct Q {
    action: String,
    actor_type: String,
    actor_id: String,
    resource_type: String,
    resource_id: String,
    result: String,
    since: String,
    until: String,
    cursor: String,
}

struct Row {
    id: String,
    when: String,
    actor: String,
    action: String,
    resource: String,
    result: String,
    error: String,
    request_id: String,
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
        ("action", &q.action),
        ("actor", &q.actor_id),
        ("resource type", &q.resource_type),
        ("resource id", &q.resource_id),
    ] {
        if v.len() > 200 {
            return Err(format!("{name}: at most 200 characters"));
        }
    }
    Ok(AuditFilter {
        action: some(&q.action),
        resource_type: some(&q.resource_type),
        resource_id: some(&q.resource_id),
        actor_type,
        actor_id: some(&q.actor_id),
        result,
        since: parse_time("from", &q.since)?,
        until: parse_time("until", &q.until)?,
    })
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
                .query_audit(&filter, cursor, PAGE)
                .await?;
            rows = page
                .records
                .into_iter()
                .map(|r| Row {
                    id: r.id.to_string(),
                    when: r.created_at.format("%Y-%m-%d %H:%M:%S").to_string(),
                    actor: format!("{}:{}", r.event.actor.kind.as_str(), r.event.actor.id),
                    action: r.event.action,
                    resource: match r.event.resource_id {
                        Some(id) => format!("{} {id}", r.event.resource_type),
                        None => r.event.resource_type,
                    },
                    result: r.event.result.as_str().to_owned(),
                    error: r.event.error_message.unwrap_or_default(),
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
        ("resource_type", &q.resource_type),
        ("resource_id", &q.resource_id),
        ("result", &q.result),
        ("since", &q.since),
        ("until", &q.until),
        ("cursor", &q.cursor),
    ]
    .into_iter()
    .filter(|(_, v)| !v.trim().is_empty())
    .map(|(k, v)| (k, v.as_str()))
    .collect();
    serde_urlencoded::to_string(pairs).unwrap_or_default()
}
