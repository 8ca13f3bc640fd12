//! Alerts: the inbox, one alert, and the alert rules.
//!
//! `GET /o/{org}/alerts` lists alerts newest first, filtered by status (active — open or
//! acknowledged — by default), severity, device and rule, 50 to a page with the store's keyset
//! cursor; `…/alerts/rows?…` is the list alone, which htmx reloads on the live `alerts` event.
//! `GET /o/{org}/alerts/{id}` shows one alert with its history and its tickets, with a button
//! opening a ticket from it (`super::billing`). `POST /o/{org}/alerts/act` acknowledges,
//! resolves or suppresses the alerts it names (one, or a selection of at most
//! [`MAX_BULK`]), each through `breeze_domain::alerts::AlertDesk` exactly as `manage_alerts`
//! does, with its own audit record.
//!
//! Rules: `GET /o/{org}/alerts/rules` lists them; `…/rules/new` and `POST …/rules` create one;
//! `GET /o/{org}/alerts/rules/{id}` and `POST` there edit one — through the same `AlertDesk`
//! calls as `manage_alert_rules`.
//!
//! Reading needs what the tools' read actions declare (`alerts.read`); every change what the
//! tool action doing it declares ([`super::tool_operation`]): a person whose role lacks it sees
//! no button, and a post is refused all the same.

use askama::Template;
use axum::{
    Router,
    extract::{Path, Query, State},
    http::StatusCode,
    response::{IntoResponse, Redirect, Response},
    routing::{get, post},
};
use breeze_core::{
    AlertCondition, AlertStatus, Comparison, DeviceId, EventCondition, Metric, Severity,
};
use breeze_domain::alerts::{AlertDesk, AlertMove, MAX_BULK};
use breeze_store::{
    AlertCursor, AlertFilter, AlertRule, NewRule, OrgStore, RuleTarget, RuleUpdate, StoreError,
};
use serde::Deserialize;
use uuid::Uuid;

use super::{
    Layout, PageError, Section, SignedForm, SignedIn, allowed, render_status, tool_operation,
};
use crate::{ApiError, AppState, authz::OrgScope, extract::RequestId};

/// Alerts per page.
const PAGE: u32 = 50;

pub(super) fn router() -> Router<AppState> {
    Router::new()
        .route("/o/{org}/alerts", get(inbox))
        .route("/o/{org}/alerts/rows", get(rows_fragment))
        .route("/o/{org}/alerts/act", post(act))
        .route("/o/{org}/alerts/rules", get(rules).post(create_rule))
        .route("/o/{org}/alerts/rules/new", get(new_rule))
        .route(
            "/o/{org}/alerts/rules/{id}",
            get(edit_rule).post(update_rule),
        )
        .route("/o/{org}/alerts/{id}", get(show))
}

fn read_op(state: &AppState) -> breeze_core::Operation {
    tool_operation(state, "manage_alerts", "list")
}

async fn read_scope(state: &AppState, who: &SignedIn, org: &str) -> Result<OrgScope, PageError> {
    Ok(who.scope(state, org, read_op(state)).await?)
}

fn alert_not_found() -> PageError {
    PageError::from(ApiError::not_found("Alert not found"))
}

fn rule_not_found() -> PageError {
    PageError::from(ApiError::not_found("Alert rule not found"))
}

fn when(t: breeze_core::Timestamp) -> String {
    t.format("%Y-%m-%d %H:%M UTC").to_string()
}

// ---- the inbox -------------------------------------------------------------------------------

#[derive(Debug, Default, Deserialize, Clone)]
#[serde(default)]
struct InboxQuery {
    status: String,
    severity: String,
    device: String,
    rule: String,
    cursor: String,
}

struct AlertRow {
    id: String,
    severity: &'static str,
    status: &'static str,
    title: String,
    message: String,
    device_id: String,
    device: String,
    triggered: String,
}

struct Choice {
    value: String,
    label: String,
    selected: bool,
}

fn choices(all: Vec<(String, String)>, current: &str) -> Vec<Choice> {
    all.into_iter()
        .map(|(value, label)| Choice {
            selected: value == current,
            value,
            label,
        })
        .collect()
}

/// The part of the inbox that live updates reload: rows, the bulk form and the pager.
struct Results {
    org_slug: String,
    csrf: String,
    /// The page's own query string (reloads show the same page), empty when it is invalid.
    query: String,
    rows: Vec<AlertRow>,
    can_manage: bool,
    next: String,
    first_page: bool,
}

#[derive(Template)]
#[template(path = "alerts.html")]
struct InboxPage {
    l: Layout,
    statuses: Vec<Choice>,
    severities: Vec<Choice>,
    rules: Vec<Choice>,
    device: String,
    device_name: String,
    r: Results,
    error: String,
    notice: String,
}

#[derive(Template)]
#[template(path = "alerts_rows.html")]
struct RowsFragment {
    r: Results,
}

/// An inbox request read: the filter, or what is wrong with it.
fn filter_of(q: &InboxQuery) -> Result<(AlertFilter, Option<AlertCursor>), String> {
    let mut f = AlertFilter::default();
    match q.status.trim() {
        "" | "active" => f.unresolved = true,
        "all" => {}
        s => f.status = Some(s.parse::<AlertStatus>().map_err(|e| e.to_string())?),
    }
    match q.severity.trim() {
        "" => {}
        s => f.severity = Some(s.parse::<Severity>().map_err(|e| e.to_string())?),
    }
    // Another organization's device or rule matches nothing here: the store filters by org.
    match q.device.trim() {
        "" => {}
        s => {
            f.device = Some(DeviceId(
                Uuid::parse_str(s).map_err(|_| format!("device {s:?} is not a device id"))?,
            ));
        }
    }
    match q.rule.trim() {
        "" => {}
        s => f.rule = Some(Uuid::parse_str(s).map_err(|_| format!("rule {s:?} is not a rule id"))?),
    }
    let cursor = match q.cursor.trim() {
        "" => None,
        c => Some(AlertCursor::decode(c).map_err(|_| "the page link is not valid".to_owned())?),
    };
    Ok((f, cursor))
}

fn query_string(q: &InboxQuery) -> String {
    let pairs: Vec<(&str, &str)> = [
        ("status", &q.status),
        ("severity", &q.severity),
        ("device", &q.device),
        ("rule", &q.rule),
        ("cursor", &q.cursor),
    ]
    .into_iter()
    .filter(|(_, v)| !v.trim().is_empty())
    .map(|(k, v)| (k, v.trim()))
    .collect();
    serde_urlencoded::to_string(pairs).unwrap_or_default()
}

/// One page of the inbox for `q`; the problem with `q`, if any (then no rows).
async fn results(
    state: &AppState,
    who: &SignedIn,
    scope: &OrgScope,
    q: &InboxQuery,
) -> Result<(Results, String), PageError> {
    let store = scope.store(state);
    let can_manage = allowed(
        state,
        scope,
        tool_operation(state, "manage_alerts", "acknowledge"),
    );
    let mut r = Results {
        org_slug: scope.org.slug.clone(),
        csrf: who.csrf.clone(),
        query: String::new(),
        rows: Vec::new(),
        can_manage,
        next: String::new(),
        first_page: q.cursor.trim().is_empty(),
    };
    let (filter, cursor) = match filter_of(q) {
        Ok(f) => f,
        Err(e) => return Ok((r, e)),
    };
    let page = store.alerts().list_alerts(&filter, cursor, PAGE).await?;
    let ids: Vec<DeviceId> = page.alerts.iter().map(|a| a.device_id).collect();
    let names = store.devices().hostnames(&ids).await?;
    r.rows = page
        .alerts
        .into_iter()
        .map(|a| AlertRow {
            id: a.id.to_string(),
            severity: a.severity.as_str(),
            status: a.status.as_str(),
            device: names.get(&a.device_id).cloned().unwrap_or_default(),
            device_id: a.device_id.to_string(),
            title: a.title,
            message: a.message,
            triggered: when(a.triggered_at),
        })
        .collect();
    r.query = query_string(q);
    if let Some(c) = page.next_cursor {
        let mut nq = q.clone();
        nq.cursor = c.encode();
        r.next = query_string(&nq);
    }
    Ok((r, String::new()))
}

async fn rule_choices(store: OrgStore<'_>, current: &str) -> Result<Vec<Choice>, PageError> {
    let rules = store.alerts().list_rules().await?;
    Ok(choices(
        rules
            .into_iter()
            .map(|r| (r.id.to_string(), r.name))
            .collect(),
        current,
    ))
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Notice {
    done: String,
}

async fn inbox_page(
    state: &AppState,
    who: &SignedIn,
    org: &str,
    q: InboxQuery,
    status: StatusCode,
    notice: String,
    error: String,
) -> Result<Response, PageError> {
    let scope = read_scope(state, who, org).await?;
    let store = scope.store(state);
    let (r, problem) = results(state, who, &scope, &q).await?;
    let error = if error.is_empty() { problem } else { error };
    let device_name = match q.device.trim().parse::<Uuid>() {
        Ok(d) => store
            .devices()
            .hostnames(&[DeviceId(d)])
            .await?
            .remove(&DeviceId(d))
            .unwrap_or_default(),
        Err(_) => String::new(),
    };
    let status = if error.is_empty() || status != StatusCode::OK {
        status
    } else {
        StatusCode::BAD_REQUEST
    };
    let statuses = choices(
        [
            ("active", "active (open or acknowledged)"),
            ("open", "open"),
            ("acknowledged", "acknowledged"),
            ("resolved", "resolved"),
            ("all", "all"),
        ]
        .into_iter()
        .map(|(v, l)| (v.to_owned(), l.to_owned()))
        .collect(),
        match q.status.trim() {
            "" => "active",
            s => s,
        },
    );
    let severities = choices(
        Severity::ALL
            .iter()
            .rev()
            .map(|s| (s.as_str().to_owned(), s.as_str().to_owned()))
            .collect(),
        q.severity.trim(),
    );
    let rules = rule_choices(store, q.rule.trim()).await?;
    let l = Layout::for_user(state, who, Some(&scope.org), Section::Alerts, "Alerts").await?;
    render_status(
        status,
        &InboxPage {
            l,
            statuses,
            severities,
            rules,
            device: q.device.trim().to_owned(),
            device_name,
            r,
            error,
            notice,
        },
    )
}

async fn inbox(
    State(state): State<AppState>,
    who: SignedIn,
    Path(org): Path<String>,
    q: Result<Query<InboxQuery>, axum::extract::rejection::QueryRejection>,
    Query(n): Query<Notice>,
) -> Result<Response, PageError> {
    let (q, error) = match q {
        Ok(Query(q)) => (q, String::new()),
        Err(e) => (InboxQuery::default(), e.body_text()),
    };
    let notice = n.done.chars().take(300).collect();
    inbox_page(&state, &who, &org, q, StatusCode::OK, notice, error).await
}

async fn rows_fragment(
    State(state): State<AppState>,
    who: SignedIn,
    Path(org): Path<String>,
    Query(q): Query<InboxQuery>,
) -> Result<Response, PageError> {
    let scope = read_scope(&state, &who, &org).await?;
    let (r, problem) = results(&state, &who, &scope, &q).await?;
    let status = if problem.is_empty() {
        StatusCode::OK
    } else {
        StatusCode::BAD_REQUEST
    };
    render_status(status, &RowsFragment { r })
}

// ---- acting on alerts ------------------------------------------------------------------------

/// `POST /o/{org}/alerts/act`: `action` (acknowledge | resolve | suppress) with one `id` field
/// per alert, or `one` = `action:id` (a row's button); an optional `note`, `hours` for a
/// suppression, and `back` (where to return to).
async fn act(
    State(state): State<AppState>,
    RequestId(request_id): RequestId,
    Path(org): Path<String>,
    f: SignedForm<Vec<(String, String)>>,
) -> Result<Response, PageError> {
    let who = f.who;
    let field = |name: &str| {
        f.form
            .iter()
            .find(|(k, _)| k == name)
            .map_or("", |(_, v)| v.as_str())
            .trim()
            .to_owned()
    };
    // A row's own button names its action and alert (`one` = `resolve:<id>`); otherwise the
    // bulk buttons act on the ticked `id`s.
    let one = field("one");
    let (action, ids): (String, Vec<String>) = match one.split_once(':') {
        Some((a, id)) => (a.to_owned(), vec![id.to_owned()]),
        None => (
            field("action"),
            f.form
                .iter()
                .filter(|(k, _)| k == "id")
                .map(|(_, v)| v.trim().to_owned())
                .collect(),
        ),
    };
    // Judged by the tool action's own declaration; an unknown action is never allowed.
    let op = tool_operation(&state, "manage_alerts", &action);
    let scope = who.scope(&state, &org, op).await?;
    // Only a path on this site (as sign-in's `next`), else the inbox.
    let back = match super::safe_next(&field("back")) {
        "/" => format!("/o/{}/alerts", scope.org.slug),
        ok => ok.to_owned(),
    };
    let refuse = |msg: String| async {
        let q = InboxQuery::default();
        inbox_page(
            &state,
            &who,
            &org,
            q,
            StatusCode::BAD_REQUEST,
            String::new(),
            msg,
        )
        .await
    };
    if ids.is_empty() {
        return refuse("Select at least one alert.".to_owned()).await;
    }
    if ids.len() > MAX_BULK {
        return refuse(format!("At most {MAX_BULK} alerts at once.")).await;
    }
    let mut parsed = Vec::with_capacity(ids.len());
    for id in &ids {
        // Not an id of this organization's: the same answer as one that is not there.
        parsed.push(Uuid::parse_str(id).map_err(|_| alert_not_found())?);
    }
    let note = field("note");
    if note.chars().count() > breeze_store::MAX_NOTE_CHARS {
        return refuse(format!(
            "The note is too long: at most {} characters.",
            breeze_store::MAX_NOTE_CHARS
        ))
        .await;
    }
    let m = match alert_move(&action, &field("hours"), state.clock.now()) {
        Ok(m) => m,
        Err(e) => return refuse(e).await,
    };
    let desk = AlertDesk::new(
        scope.store(&state).alerts(),
        scope.caller.actor(),
        request_id,
    );
    let outcomes = desk
        .apply_many(&parsed, m, (!note.is_empty()).then_some(note.as_str()))
        .await
        .map_err(|breeze_domain::Error::Store(e)| PageError::from(e))?;
    // A single alert that is not this organization's (or not there) is a 404, as on its page.
    if parsed.len() == 1
        && outcomes
            .first()
            .is_some_and(|(_, o)| o.as_ref().is_err_and(|e| e.starts_with("not found")))
    {
        return Err(alert_not_found());
    }
    let message = outcome_message(m, &outcomes);
    let sep = if back.contains('?') { '&' } else { '?' };
    let to = format!(
        "{back}{sep}{}",
        serde_urlencoded::to_string([("done", message.as_str())]).unwrap_or_default()
    );
    Ok(Redirect::to(&to).into_response())
}

/// The move a form asks for: `action`, and for a suppression `hours` (default 4).
fn alert_move(action: &str, hours: &str, now: breeze_core::Timestamp) -> Result<AlertMove, String> {
    Ok(match action {
        "acknowledge" => AlertMove::Acknowledge,
        "resolve" => AlertMove::Resolve,
        "suppress" => {
            let most = breeze_store::MAX_SUPPRESS_MINUTES / 60;
            let hours: u32 = match hours {
                "" => 4,
                h => h
                    .parse()
                    .ok()
                    .filter(|n| (1..=most).contains(n))
                    .ok_or_else(|| format!("Suppress for 1 to {most} hours."))?,
            };
            AlertMove::Suppress {
                until: now + chrono::Duration::hours(i64::from(hours)),
            }
        }
        // `tool_operation` refused anything else already; kept for the match.
        other => return Err(format!("Unknown action {other:?}.")),
    })
}

/// What became of the alerts, in one sentence: how many moved, and why the others did not.
fn outcome_message(
    m: AlertMove,
    outcomes: &[(Uuid, Result<breeze_store::Alert, String>)],
) -> String {
    let done = outcomes.iter().filter(|(_, o)| o.is_ok()).count();
    let mut failed: Vec<&str> = outcomes
        .iter()
        .filter_map(|(_, o)| o.as_ref().err().map(String::as_str))
        .collect();
    let mut message = format!(
        "{done} alert{} {}.",
        if done == 1 { "" } else { "s" },
        m.done()
    );
    if !failed.is_empty() {
        let n = failed.len();
        failed.sort_unstable();
        failed.dedup();
        message.push_str(&format!(" {n} not changed: {}.", failed.join("; ")));
    }
    message
}

// ---- one alert -------------------------------------------------------------------------------

struct HistoryRow {
    at: String,
    kind: String,
    actor: String,
    note: String,
}

#[derive(Template)]
#[template(path = "alert.html")]
struct AlertPage {
    l: Layout,
    id: String,
    title: String,
    message: String,
    severity: &'static str,
    status: &'static str,
    device_id: String,
    device: String,
    rule_id: String,
    rule: String,
    triggered: String,
    suppressed_until: String,
    value: String,
    history: Vec<HistoryRow>,
    can_manage: bool,
    back: String,
    /// Its tickets, when the person may list tickets.
    tickets: Option<super::kit::Table>,
    /// The person may open a ticket from it.
    can_ticket: bool,
}

async fn show(
    State(state): State<AppState>,
    who: SignedIn,
    Path((org, id)): Path<(String, String)>,
) -> Result<Response, PageError> {
    let scope = read_scope(&state, &who, &org).await?;
    let id = Uuid::parse_str(&id).map_err(|_| alert_not_found())?;
    let store = scope.store(&state);
    let alert = match store.alerts().get_alert(id).await {
        Ok(a) => a,
        Err(StoreError::NotFound(_)) => return Err(alert_not_found()),
        Err(e) => return Err(e.into()),
    };
    let events = store.alerts().alert_events(id).await?;
    let names =
        super::names::Names::load(&state, scope.org.id, events.iter().map(|e| e.actor.clone()))
            .await;
    let history = events
        .into_iter()
        .map(|e| HistoryRow {
            at: when(e.at),
            kind: e.kind,
            actor: names.of(&e.actor),
            note: e.note.unwrap_or_default(),
        })
        .collect();
    let device = store
        .devices()
        .hostnames(&[alert.device_id])
        .await?
        .remove(&alert.device_id)
        .unwrap_or_default();
    let rule = match store.alerts().get_rule(alert.rule_id).await {
        Ok(r) => r.name,
        Err(StoreError::NotFound(_)) => "(deleted rule)".to_owned(),
        Err(e) => return Err(e.into()),
    };
    let can_manage = alert.status != AlertStatus::Resolved
        && allowed(
            &state,
            &scope,
            tool_operation(&state, "manage_alerts", "acknowledge"),
        );
    let tickets =
        super::billing::linked_tickets(&state, &scope, super::billing::TicketsOf::Alert(id))
            .await?;
    let can_ticket = super::billing::may_ticket_alert(&state, &scope);
    let mut l = Layout::for_user(
        &state,
        &who,
        Some(&scope.org),
        Section::Alerts,
        &alert.title,
    )
    .await?;
    // The assistant link opens the chat about this alert.
    l.chat_about(&format!("alert={}", alert.id));
    render_status(
        StatusCode::OK,
        &AlertPage {
            back: format!("/o/{}/alerts/{}", scope.org.slug, alert.id),
            l,
            id: alert.id.to_string(),
            severity: alert.severity.as_str(),
            status: alert.status.as_str(),
            device_id: alert.device_id.to_string(),
            device,
            rule_id: alert.rule_id.to_string(),
            rule,
            triggered: when(alert.triggered_at),
            suppressed_until: alert.suppressed_until.map(when).unwrap_or_default(),
            value: alert.value.map(|v| format!("{v:.1}")).unwrap_or_default(),
            title: alert.title,
            message: alert.message,
            history,
            can_manage,
            tickets,
            can_ticket,
        },
    )
}

// ---- rules -----------------------------------------------------------------------------------

struct RuleRow {
    id: String,
    name: String,
    severity: &'static str,
    enabled: bool,
    condition: String,
    target: String,
}

#[derive(Template)]
#[template(path = "alert_rules.html")]
struct RulesPage {
    l: Layout,
    rules: Vec<RuleRow>,
    can_create: bool,
    notice: String,
}

/// Names for a rule's target: sites and groups by name, a device by hostname.
async fn target_label(store: OrgStore<'_>, rule: &AlertRule) -> String {
    super::kit::target_name(store, rule.target().ok()).await
}

async fn rules(
    State(state): State<AppState>,
    who: SignedIn,
    Path(org): Path<String>,
    Query(n): Query<Notice>,
) -> Result<Response, PageError> {
    let scope = who
        .scope(
            &state,
            &org,
            tool_operation(&state, "manage_alert_rules", "list"),
        )
        .await?;
    let store = scope.store(&state);
    let list = store.alerts().list_rules().await?;
    let mut rows = Vec::with_capacity(list.len());
    // At most the organization's rule cap (200); a target is named only when it is not the
    // whole organization.
    for r in list {
        rows.push(RuleRow {
            id: r.id.to_string(),
            severity: r.severity.as_str(),
            enabled: r.enabled,
            condition: r.condition.describe(),
            target: target_label(store, &r).await,
            name: r.name,
        });
    }
    let can_create = allowed(
        &state,
        &scope,
        tool_operation(&state, "manage_alert_rules", "create"),
    );
    let l = Layout::for_user(
        &state,
        &who,
        Some(&scope.org),
        Section::Alerts,
        "Alert rules",
    )
    .await?;
    render_status(
        StatusCode::OK,
        &RulesPage {
            l,
            rules: rows,
            can_create,
            notice: n.done.chars().take(300).collect(),
        },
    )
}

/// The rule form, as typed: every field a string, so a refused form is shown again as it was.
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
struct RuleForm {
    name: String,
    description: String,
    severity: String,
    enabled: String,
    kind: String,
    metric: String,
    comparison: String,
    threshold: String,
    duration: String,
    offline_minutes: String,
    event_source: String,
    event_kind: String,
    event_min_severity: String,
    event_contains: String,
    event_count: String,
    event_window: String,
    target_kind: String,
    target_site: String,
    target_group: String,
    target_device: String,
    cooldown: String,
    auto_resolve: String,
    channel: Vec<String>,
}

impl Default for RuleForm {
    fn default() -> Self {
        Self {
            name: String::new(),
            description: String::new(),
            severity: "medium".into(),
            enabled: "on".into(),
            kind: "metric".into(),
            metric: "cpu".into(),
            comparison: "above".into(),
            threshold: "90".into(),
            duration: "5".into(),
            offline_minutes: "15".into(),
            event_source: String::new(),
            event_kind: String::new(),
            event_min_severity: "info".into(),
            event_contains: String::new(),
            event_count: "1".into(),
            event_window: "15".into(),
            target_kind: "organization".into(),
            target_site: String::new(),
            target_group: String::new(),
            target_device: String::new(),
            cooldown: "15".into(),
            auto_resolve: "on".into(),
            channel: Vec::new(),
        }
    }
}

impl RuleForm {
    /// The form of a stored rule.
    fn of(r: &AlertRule) -> Self {
        let mut f = RuleForm {
            name: r.name.clone(),
            description: r.description.clone().unwrap_or_default(),
            severity: r.severity.as_str().to_owned(),
            enabled: if r.enabled {
                "on".into()
            } else {
                String::new()
            },
            cooldown: r.cooldown_minutes.to_string(),
            auto_resolve: if r.auto_resolve {
                "on".into()
            } else {
                String::new()
            },
            channel: r.channel_ids.iter().map(Uuid::to_string).collect(),
            ..RuleForm::default()
        };
        match &r.condition {
            AlertCondition::Metric {
                metric,
                comparison,
                threshold,
                duration_minutes,
            } => {
                f.kind = "metric".into();
                f.metric = enum_text(metric);
                f.comparison = enum_text(comparison);
                f.threshold = threshold.to_string();
                f.duration = duration_minutes.to_string();
            }
            AlertCondition::Offline { minutes } => {
                f.kind = "offline".into();
                f.offline_minutes = minutes.to_string();
            }
            AlertCondition::Event(e) => {
                f.kind = "event".into();
                f.event_source = e.source.clone().unwrap_or_default();
                f.event_kind = e.event_kind.clone().unwrap_or_default();
                f.event_min_severity = e.min_severity.as_str().to_owned();
                f.event_contains = e.message_contains.clone().unwrap_or_default();
                f.event_count = e.count.to_string();
                f.event_window = e.window_minutes.to_string();
            }
        }
        match r.target() {
            Ok(RuleTarget::Organization) | Err(_) => f.target_kind = "organization".into(),
            Ok(RuleTarget::Site(s)) => {
                f.target_kind = "site".into();
                f.target_site = s.to_string();
            }
            Ok(RuleTarget::Group(g)) => {
                f.target_kind = "group".into();
                f.target_group = g.to_string();
            }
            Ok(RuleTarget::Device(d)) => {
                f.target_kind = "device".into();
                f.target_device = d.to_string();
            }
        }
        f
    }

    fn number<T: std::str::FromStr>(field: &str, v: &str) -> Result<T, String> {
        v.trim()
            .parse()
            .map_err(|_| format!("{field}: {:?} is not a number", v.trim()))
    }

    fn opt(v: &str) -> Option<String> {
        let v = v.trim();
        (!v.is_empty()).then(|| v.to_owned())
    }

    /// The condition the form describes (the store validates its ranges).
    fn condition(&self) -> Result<AlertCondition, String> {
        Ok(match self.kind.as_str() {
            "metric" => AlertCondition::Metric {
                metric: enum_parse::<Metric>("metric", &self.metric)?,
                comparison: enum_parse::<Comparison>("comparison", &self.comparison)?,
                threshold: Self::number("threshold", &self.threshold)?,
                duration_minutes: Self::number("duration", &self.duration)?,
            },
            "offline" => AlertCondition::Offline {
                minutes: Self::number("offline minutes", &self.offline_minutes)?,
            },
            "event" => AlertCondition::Event(EventCondition {
                source: Self::opt(&self.event_source),
                event_kind: Self::opt(&self.event_kind),
                min_severity: self
                    .event_min_severity
                    .trim()
                    .parse::<Severity>()
                    .map_err(|e| e.to_string())?,
                message_contains: Self::opt(&self.event_contains),
                count: Self::number("event count", &self.event_count)?,
                window_minutes: Self::number("event window", &self.event_window)?,
            }),
            other => {
                return Err(format!(
                    "condition: {other:?} is not metric, offline or event"
                ));
            }
        })
    }

    fn target(&self) -> Result<RuleTarget, String> {
        let id = |field: &str, v: &str| {
            Uuid::parse_str(v.trim()).map_err(|_| format!("{field}: choose one"))
        };
        Ok(match self.target_kind.as_str() {
            "organization" | "" => RuleTarget::Organization,
            "site" => RuleTarget::Site(breeze_core::SiteId(id("site", &self.target_site)?)),
            "group" => {
                RuleTarget::Group(breeze_core::DeviceGroupId(id("group", &self.target_group)?))
            }
            "device" => RuleTarget::Device(DeviceId(id("device", &self.target_device)?)),
            other => return Err(format!("target: {other:?} is not a kind of target")),
        })
    }

    fn channels(&self) -> Result<Vec<Uuid>, String> {
        self.channel
            .iter()
            .map(|c| Uuid::parse_str(c.trim()).map_err(|_| "channel: not a channel".to_owned()))
            .collect()
    }

    /// Everything the form sets, as `manage_alert_rules` create takes it.
    fn new_rule(&self, created_by: String) -> Result<NewRule, String> {
        Ok(NewRule {
            name: self.name.trim().to_owned(),
            description: Self::opt(&self.description),
            severity: self
                .severity
                .trim()
                .parse()
                .map_err(|e: breeze_core::ParseError| e.to_string())?,
            enabled: self.enabled == "on",
            condition: self.condition()?,
            target: self.target()?,
            cooldown_minutes: Self::number("cooldown", &self.cooldown)?,
            auto_resolve: self.auto_resolve == "on",
            channel_ids: self.channels()?,
            created_by,
        })
    }

    /// The same, as an update of every field.
    fn update(&self) -> Result<RuleUpdate, String> {
        let n = self.new_rule(String::new())?;
        Ok(RuleUpdate {
            name: Some(n.name),
            description: Some(n.description.unwrap_or_default()),
            severity: Some(n.severity),
            enabled: Some(n.enabled),
            condition: Some(n.condition),
            target: Some(n.target),
            cooldown_minutes: Some(n.cooldown_minutes),
            auto_resolve: Some(n.auto_resolve),
            channel_ids: Some(n.channel_ids),
        })
    }
}

/// A snake_case serde enum's text.
fn enum_text<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_value(v)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

fn enum_parse<T: serde::de::DeserializeOwned>(field: &str, v: &str) -> Result<T, String> {
    serde_json::from_value(serde_json::Value::String(v.trim().to_owned()))
        .map_err(|_| format!("{field}: {:?} is not one of the choices", v.trim()))
}

struct ChannelChoice {
    id: String,
    label: String,
    checked: bool,
}

#[derive(Template)]
#[template(path = "alert_rule_form.html")]
struct RuleFormPage {
    l: Layout,
    /// Empty for a new rule.
    id: String,
    f: RuleForm,
    severities: Vec<Choice>,
    metrics: Vec<Choice>,
    sites: Vec<Choice>,
    groups: Vec<Choice>,
    channels: Vec<ChannelChoice>,
    can_save: bool,
    error: String,
}

async fn form_page(
    state: &AppState,
    who: &SignedIn,
    scope: &OrgScope,
    id: Option<Uuid>,
    f: RuleForm,
    status: StatusCode,
    error: String,
) -> Result<Response, PageError> {
    let store = scope.store(state);
    let action = if id.is_some() { "update" } else { "create" };
    let can_save = allowed(
        state,
        scope,
        tool_operation(state, "manage_alert_rules", action),
    );
    let sites = store
        .tenancy()
        .list_sites()
        .await?
        .into_iter()
        .map(|s| (s.id.to_string(), s.name))
        .collect();
    let groups = store
        .tenancy()
        .list_groups()
        .await?
        .into_iter()
        .map(|g| (g.id.to_string(), g.name))
        .collect();
    let channels = store
        .alerts()
        .list_channels()
        .await?
        .into_iter()
        .map(|c| ChannelChoice {
            checked: f.channel.contains(&c.id.to_string()),
            id: c.id.to_string(),
            label: format!("{} ({})", c.name, c.kind),
        })
        .collect();
    let metrics = [
        ("cpu", "CPU %"),
        ("memory", "memory %"),
        ("disk", "disk used %"),
        ("disk_free", "disk free %"),
        ("network_in", "network in (bytes/s)"),
        ("network_out", "network out (bytes/s)"),
    ]
    .into_iter()
    .map(|(v, l)| (v.to_owned(), l.to_owned()))
    .collect();
    let severity_list: Vec<(String, String)> = Severity::ALL
        .iter()
        .map(|s| (s.as_str().to_owned(), s.as_str().to_owned()))
        .collect();
    let title = if id.is_some() {
        "Edit alert rule"
    } else {
        "New alert rule"
    };
    let l = Layout::for_user(state, who, Some(&scope.org), Section::Alerts, title).await?;
    render_status(
        status,
        &RuleFormPage {
            l,
            id: id.map(|i| i.to_string()).unwrap_or_default(),
            severities: choices(severity_list, f.severity.trim()),
            metrics: choices(metrics, f.metric.trim()),
            sites: choices(sites, f.target_site.trim()),
            groups: choices(groups, f.target_group.trim()),
            channels,
            f,
            can_save,
            error,
        },
    )
}

async fn new_rule(
    State(state): State<AppState>,
    who: SignedIn,
    Path(org): Path<String>,
) -> Result<Response, PageError> {
    let scope = who
        .scope(
            &state,
            &org,
            tool_operation(&state, "manage_alert_rules", "list"),
        )
        .await?;
    form_page(
        &state,
        &who,
        &scope,
        None,
        RuleForm::default(),
        StatusCode::OK,
        String::new(),
    )
    .await
}

async fn edit_rule(
    State(state): State<AppState>,
    who: SignedIn,
    Path((org, id)): Path<(String, String)>,
) -> Result<Response, PageError> {
    let scope = who
        .scope(
            &state,
            &org,
            tool_operation(&state, "manage_alert_rules", "get"),
        )
        .await?;
    let id = Uuid::parse_str(&id).map_err(|_| rule_not_found())?;
    let rule = match scope.store(&state).alerts().get_rule(id).await {
        Ok(r) => r,
        Err(StoreError::NotFound(_)) => return Err(rule_not_found()),
        Err(e) => return Err(e.into()),
    };
    form_page(
        &state,
        &who,
        &scope,
        Some(id),
        RuleForm::of(&rule),
        StatusCode::OK,
        String::new(),
    )
    .await
}

/// Reads the posted rule form (repeated `channel` fields included).
fn rule_form(pairs: &[(String, String)]) -> Result<RuleForm, PageError> {
    let channel: Vec<String> = pairs
        .iter()
        .filter(|(k, _)| k == "channel")
        .map(|(_, v)| v.clone())
        .collect();
    let single: Vec<(&str, &str)> = pairs
        .iter()
        .filter(|(k, _)| k != "channel" && k != "csrf")
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let encoded = serde_urlencoded::to_string(&single).unwrap_or_default();
    let mut f: RuleForm = serde_urlencoded::from_str(&encoded)
        .map_err(|e| PageError::bad_request(format!("Invalid form: {e}")))?;
    f.enabled = if pairs.iter().any(|(k, v)| k == "enabled" && v == "on") {
        "on".into()
    } else {
        String::new()
    };
    f.auto_resolve = if pairs.iter().any(|(k, v)| k == "auto_resolve" && v == "on") {
        "on".into()
    } else {
        String::new()
    };
    f.channel = channel;
    Ok(f)
}

/// Back to the rules list, saying what was done.
fn to_rules(scope: &OrgScope, done: &str) -> Response {
    let q = serde_urlencoded::to_string([("done", done)]).unwrap_or_default();
    Redirect::to(&format!("/o/{}/alerts/rules?{q}", scope.org.slug)).into_response()
}

/// A store refusal worded for the form (not found → 404 for the rule itself only).
fn refusal(e: StoreError) -> Result<String, PageError> {
    match e {
        StoreError::Invalid(m) | StoreError::Conflict(m) => Ok(m),
        StoreError::NotFound(what) if what != "alert rule" => {
            Ok(format!("That {what} is not in this organization."))
        }
        other => Err(other.into()),
    }
}

async fn create_rule(
    State(state): State<AppState>,
    RequestId(request_id): RequestId,
    Path(org): Path<String>,
    f: SignedForm<Vec<(String, String)>>,
) -> Result<Response, PageError> {
    let who = f.who;
    let scope = who
        .scope(
            &state,
            &org,
            tool_operation(&state, "manage_alert_rules", "create"),
        )
        .await?;
    let form = rule_form(&f.form)?;
    let actor = scope.caller.actor();
    let new = match form.new_rule(actor.to_string()) {
        Ok(n) => n,
        Err(e) => {
            return form_page(&state, &who, &scope, None, form, StatusCode::BAD_REQUEST, e).await;
        }
    };
    let desk = AlertDesk::new(scope.store(&state).alerts(), actor, request_id);
    match desk.create_rule(new).await {
        Ok(rule) => Ok(to_rules(&scope, &format!("Created rule {}.", rule.name))),
        Err(breeze_domain::Error::Store(e)) => {
            let msg = refusal(e)?;
            form_page(
                &state,
                &who,
                &scope,
                None,
                form,
                StatusCode::BAD_REQUEST,
                msg,
            )
            .await
        }
    }
}

async fn update_rule(
    State(state): State<AppState>,
    RequestId(request_id): RequestId,
    Path((org, id)): Path<(String, String)>,
    f: SignedForm<Vec<(String, String)>>,
) -> Result<Response, PageError> {
    let who = f.who;
    let scope = who
        .scope(
            &state,
            &org,
            tool_operation(&state, "manage_alert_rules", "update"),
        )
        .await?;
    let id = Uuid::parse_str(&id).map_err(|_| rule_not_found())?;
    let form = rule_form(&f.form)?;
    let update = match form.update() {
        Ok(u) => u,
        Err(e) => {
            return form_page(
                &state,
                &who,
                &scope,
                Some(id),
                form,
                StatusCode::BAD_REQUEST,
                e,
            )
            .await;
        }
    };
    let desk = AlertDesk::new(
        scope.store(&state).alerts(),
        scope.caller.actor(),
        request_id,
    );
    match desk.update_rule(id, update).await {
        Ok(rule) => Ok(to_rules(&scope, &format!("Saved rule {}.", rule.name))),
        Err(breeze_domain::Error::Store(StoreError::NotFound("alert rule"))) => {
            Err(rule_not_found())
        }
        Err(breeze_domain::Error::Store(e)) => {
            let msg = refusal(e)?;
            form_page(
                &state,
                &who,
                &scope,
                Some(id),
                form,
                StatusCode::BAD_REQUEST,
                msg,
            )
            .await
        }
    }
}
