//! Approvals: the organization's pending Tier 3 requests, decided by a person.
//!
//! `GET /o/{org}/approvals` lists the pending requests — a readable headline (the tool's title,
//! the action, the devices named, linked), the description, who asked and through what (the
//! API key by name, the connected app, the Breeze assistant), the arguments one click away,
//! pinned data, tier, time left — and the latest decided ones with their outcome; `GET /o/{org}/approvals/pending` is the list alone, which htmx reloads on a timer
//! and on the live `approvals` event. `POST /o/{org}/approvals/{id}` decides one (`decision` =
//! approve | deny | report, optional `reason`) through `breeze_pipeline::approvals::decide`,
//! exactly like the REST route: the approver's permission and four-eyes are enforced there.
//! `GET /approvals/{id}` sends a link (the approval webhook's) to the request's organization.

use askama::Template;
use axum::{
    Router,
    extract::{Path, Query, State},
    http::StatusCode,
    response::{IntoResponse, Redirect, Response},
    routing::get,
};
use breeze_core::{ApprovalStatus, Operation, Permission, Timestamp};
use breeze_pipeline::approvals::{DecideError, DecisionRequest, decide, find_for};
use breeze_store::{ApprovalRecord, Decision};
use serde::Deserialize;
use uuid::Uuid;

use super::{Layout, PageError, Section, SignedForm, SignedIn, names::Names, render_status};
use crate::{ApiError, AppState, extract::RequestId};

pub(super) fn router() -> Router<AppState> {
    Router::new()
        .route("/o/{org}/approvals", get(show))
        .route("/o/{org}/approvals/pending", get(pending_fragment))
        .route("/o/{org}/approvals/{id}", axum::routing::post(decide_one))
        .route("/approvals/{id}", get(find))
}

/// A pending request as the page shows it.
pub(crate) struct PendingView {
    id: String,
    headline: String,
    /// The devices the call names, linked.
    devices: Vec<(String, String)>,
    /// Which credential asked: a key, a connected app, the assistant.
    via: String,
    /// The AI client, as it named itself (empty when unknown).
    client: String,
    description: String,
    tool: String,
    tier: i64,
    arguments: String,
    pinned: String,
    requester: String,
    mode: String,
    /// Four-eyes and the viewer is the requester: they may deny or report, not approve.
    own_four_eyes: bool,
    time_left: String,
    created: String,
}

/// A decided request.
struct DecidedView {
    id: String,
    tool: String,
    description: String,
    status: ApprovalStatus,
    decided_by: String,
    reason: String,
    when: String,
    outcome: String,
}

/// The pending list (the page's live part).
#[derive(Template)]
#[template(path = "approvals_pending.html")]
struct PendingFragment {
    org_slug: String,
    csrf: String,
    pending: Vec<PendingView>,
    failed_id: String,
    reason: String,
}

#[derive(Template)]
#[template(path = "approvals.html")]
struct ApprovalsPage {
    l: Layout,
    org_slug: String,
    csrf: String,
    pending: Vec<PendingView>,
    decided: Vec<DecidedView>,
    notice: String,
    error: String,
    failed_id: String,
    reason: String,
}

/// "4 min 12 s", "1 h 3 min", or "expired".
fn time_left(now: Timestamp, until: Timestamp) -> String {
    let secs = (until - now).num_seconds();
    if secs <= 0 {
        return "expired".to_owned();
    }
    let (h, m, s) = (secs / 3600, secs % 3600 / 60, secs % 60);
    if h > 0 {
        format!("{h} h {m} min")
    } else if m > 0 {
        format!("{m} min {s} s")
    } else {
        format!("{s} s")
    }
}

fn when(t: Timestamp) -> String {
    t.format("%Y-%m-%d %H:%M:%S UTC").to_string()
}

fn tool_name(r: &ApprovalRecord) -> String {
    match &r.action {
        Some(a) => format!("{}.{a}", r.tool),
        None => r.tool.clone(),
    }
}

fn pretty(v: &serde_json::Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_default()
}

/// The actors a request names for the page: the credential that asked, the requester, the
/// decider.
fn actors(r: &ApprovalRecord) -> impl Iterator<Item = String> + '_ {
    r.api_key_id
        .map(|k| format!("api_key:{k}"))
        .into_iter()
        .chain(r.oauth_grant_id.map(|g| format!("oauth_grant:{g}")))
        .chain(std::iter::once(format!("user:{}", r.requester_user_id)))
        .chain(r.decided_by.map(|u| format!("user:{u}")))
}

/// The device ids a call's arguments name (`deviceId`, `deviceIds`, a target's device).
fn named_devices(args: &serde_json::Value) -> Vec<breeze_core::DeviceId> {
    let mut out = Vec::new();
    let mut push = |v: &serde_json::Value| {
        if let Some(id) = v.as_str().and_then(|s| Uuid::parse_str(s).ok()) {
            out.push(breeze_core::DeviceId(id));
        }
    };
    if let Some(v) = args.get("deviceId") {
        push(v);
    }
    if let Some(list) = args.get("deviceIds").and_then(|v| v.as_array()) {
        list.iter().take(20).for_each(&mut push);
    }
    if let Some(t) = args.get("target")
        && t.get("kind").and_then(|k| k.as_str()) == Some("device")
        && let Some(v) = t.get("id")
    {
        push(v);
    }
    out
}

/// "Run script: run on web-01" — the tool's title, the action (when it has one), the devices.
fn headline(state: &AppState, r: &ApprovalRecord, hosts: &[(String, String)]) -> String {
    let title = state
        .pipeline
        .registry()
        .get(&r.tool)
        .map_or(r.tool.as_str(), |s| s.title);
    let mut h = title.to_owned();
    if let Some(a) = &r.action {
        h.push_str(&format!(": {}", a.replace('_', " ")));
    }
    match hosts {
        [] => {}
        [(_, one)] => h.push_str(&format!(" on {one}")),
        [(_, first), rest @ ..] => h.push_str(&format!(" on {first} and {} more", rest.len())),
    }
    h
}

/// Who asked, through what: a key by name, a connected app, the assistant, or the person.
fn via(r: &ApprovalRecord, names: &Names) -> String {
    if let Some(k) = r.api_key_id {
        format!("API {}", names.key(k))
    } else if let Some(g) = r.oauth_grant_id {
        format!("connected {}", names.of(&format!("oauth_grant:{g}")))
    } else if r.ai_session_id.is_some() {
        "the Breeze assistant (a chat)".to_owned()
    } else {
        "the dashboard".to_owned()
    }
}

async fn pending_views(
    state: &AppState,
    who: &SignedIn,
    org: breeze_core::OrgId,
    pending: Vec<ApprovalRecord>,
    names: &Names,
) -> Result<Vec<PendingView>, PageError> {
    let now = state.clock.now();
    let mut out = Vec::new();
    let ids: Vec<breeze_core::DeviceId> = pending
        .iter()
        .flat_map(|r| named_devices(&r.arguments))
        .collect();
    let hostnames = state.store.org(org).devices().hostnames(&ids).await?;
    for r in pending {
        let devices: Vec<(String, String)> = named_devices(&r.arguments)
            .into_iter()
            .filter_map(|d| hostnames.get(&d).map(|h| (d.to_string(), h.clone())))
            .collect();
        out.push(PendingView {
            id: r.id.to_string(),
            headline: headline(state, &r, &devices),
            via: via(&r, names),
            client: r.client_name.clone().unwrap_or_default(),
            devices,
            description: r.description.clone(),
            tool: tool_name(&r),
            tier: r.tier,
            arguments: pretty(&r.arguments),
            pinned: r.pinned.as_ref().map(pretty).unwrap_or_default(),
            requester: names.person(r.requester_user_id),
            mode: r.mode.clone(),
            own_four_eyes: r.mode == "four_eyes" && r.requester_user_id == who.user.id,
            time_left: time_left(now, r.expires_at),
            created: when(r.created_at),
        });
    }
    Ok(out)
}

fn outcome(r: &ApprovalRecord) -> String {
    match (r.status, &r.result, r.result_is_error) {
        (ApprovalStatus::Completed, Some(_), false) => "ran: succeeded".to_owned(),
        (ApprovalStatus::Completed, Some(res), true) => {
            let msg = res
                .pointer("/error/message")
                .or_else(|| res.get("message"))
                .and_then(|m| m.as_str())
                .unwrap_or("tool error");
            format!("ran: failed — {msg}")
        }
        (ApprovalStatus::Approved, ..) => "approved; running or about to run".to_owned(),
        (s, ..) => s.to_string(),
    }
}

/// What the page shows after a decision or for a failed one.
#[derive(Default)]
struct Banner {
    notice: String,
    error: String,
    failed_id: String,
    reason: String,
}

async fn page(
    state: &AppState,
    who: &SignedIn,
    org: &str,
    status: StatusCode,
    banner: Banner,
) -> Result<Response, PageError> {
    let scope = who
        .scope(state, org, Operation::read(Permission::DevicesRead))
        .await?;
    let approvals = scope.store(state).approvals();
    let pending = approvals.pending_approvals().await?;
    // Still pending past its time means expired: shown with the decided ones.
    let now = state.clock.now();
    let decided: Vec<ApprovalRecord> = approvals
        .list_approvals(false, 60)
        .await?
        .into_iter()
        .filter(|r| r.status != ApprovalStatus::Pending || r.expires_at <= now)
        .take(25)
        .collect();
    let names = Names::load(
        state,
        scope.org.id,
        pending.iter().chain(&decided).flat_map(actors),
    )
    .await;
    let pending = pending_views(state, who, scope.org.id, pending, &names).await?;
    let mut decided_views = Vec::new();
    for r in decided {
        let decided_by = match r.decided_by {
            Some(u) => names.person(u),
            None if r.mode == "automatic" => "policy".to_owned(),
            None => String::new(),
        };
        decided_views.push(DecidedView {
            id: r.id.to_string(),
            tool: tool_name(&r),
            description: r.description.clone(),
            // Still pending here means its time ran out.
            status: match r.status {
                ApprovalStatus::Pending => ApprovalStatus::Expired,
                other => other,
            },
            decided_by,
            reason: r.reason.clone().unwrap_or_default(),
            when: when(r.decided_at.unwrap_or(r.created_at)),
            outcome: outcome(&r),
        });
    }
    let l = Layout::for_user(
        state,
        who,
        Some(&scope.org),
        Section::Approvals,
        "Approvals",
    )
    .await?;
    render_status(
        status,
        &ApprovalsPage {
            org_slug: scope.org.slug.clone(),
            csrf: who.csrf.clone(),
            l,
            pending,
            decided: decided_views,
            notice: banner.notice,
            error: banner.error,
            failed_id: banner.failed_id,
            reason: banner.reason,
        },
    )
}

#[derive(Deserialize)]
struct ShowQuery {
    decided: Option<String>,
}

async fn show(
    State(state): State<AppState>,
    who: SignedIn,
    Path(org): Path<String>,
    Query(q): Query<ShowQuery>,
) -> Result<Response, PageError> {
    let mut banner = Banner::default();
    if let Some(id) = q.decided.as_deref().and_then(|s| Uuid::parse_str(s).ok())
        && let Ok(r) = find_for(&state.store, who.user.id, id).await
    {
        banner.notice = format!("Request {} ({}) is now {}.", r.id, tool_name(&r), r.status);
    }
    page(&state, &who, &org, StatusCode::OK, banner).await
}

async fn pending_fragment(
    State(state): State<AppState>,
    who: SignedIn,
    Path(org): Path<String>,
) -> Result<Response, PageError> {
    let scope = who
        .scope(&state, &org, Operation::read(Permission::DevicesRead))
        .await?;
    let pending = scope.store(&state).approvals().pending_approvals().await?;
    let names = Names::load(&state, scope.org.id, pending.iter().flat_map(actors)).await;
    let pending = pending_views(&state, &who, scope.org.id, pending, &names).await?;
    render_status(
        StatusCode::OK,
        &PendingFragment {
            org_slug: scope.org.slug,
            csrf: who.csrf,
            pending,
            failed_id: String::new(),
            reason: String::new(),
        },
    )
}

#[derive(Deserialize)]
struct DecisionForm {
    #[serde(default)]
    decision: String,
    #[serde(default)]
    reason: String,
}

async fn decide_one(
    State(state): State<AppState>,
    RequestId(request_id): RequestId,
    Path((org, id)): Path<(String, String)>,
    f: SignedForm<DecisionForm>,
) -> Result<Response, PageError> {
    let who = f.who;
    let scope = who
        .scope(&state, &org, Operation::read(Permission::DevicesRead))
        .await?;
    let not_found = || PageError::from(ApiError::not_found("approval request not found"));
    let id = Uuid::parse_str(&id).map_err(|_| not_found())?;
    let reason = f.form.reason.trim().to_owned();
    let failed = |error: String| Banner {
        notice: String::new(),
        error,
        failed_id: id.to_string(),
        reason: reason.clone(),
    };
    let Ok(decision) = f.form.decision.parse::<Decision>() else {
        let msg = format!(
            "Unknown decision {:?}: choose approve, deny or report.",
            f.form.decision
        );
        return page(&state, &who, &org, StatusCode::BAD_REQUEST, failed(msg)).await;
    };
    if reason.chars().count() > 1000 {
        let msg = "The reason is too long: at most 1000 characters.".to_owned();
        return page(&state, &who, &org, StatusCode::BAD_REQUEST, failed(msg)).await;
    }
    // The request must be this organization's (and one the person can reach at all).
    match find_for(&state.store, who.user.id, id).await {
        Ok(r) if r.org_id == scope.org.id => {}
        Ok(_) | Err(DecideError::NotFound) => return Err(not_found()),
        Err(e) => return Err(ApiError::from(e).into()),
    }
    let result = decide(
        &state.store,
        state.pipeline.registry(),
        &who.user,
        who.authenticated().actor(),
        DecisionRequest {
            id,
            decision,
            reason: (!reason.is_empty()).then(|| reason.clone()),
            request_id,
        },
    )
    .await;
    match result {
        Ok(record) => {
            state.pipeline.approvals().notify_decided();
            Ok(Redirect::to(&format!(
                "/o/{}/approvals?decided={}",
                scope.org.slug, record.id
            ))
            .into_response())
        }
        Err(e) => {
            let api = ApiError::from(e);
            if api.status.is_server_error() || api.status == StatusCode::NOT_FOUND {
                return Err(api.into());
            }
            let status = api.status;
            page(&state, &who, &org, status, failed(api.message)).await
        }
    }
}

/// `GET /approvals/{id}`: the page of the request's organization.
async fn find(
    State(state): State<AppState>,
    who: SignedIn,
    Path(id): Path<String>,
) -> Result<Response, PageError> {
    let not_found = || PageError::from(ApiError::not_found("approval request not found"));
    let id = Uuid::parse_str(&id).map_err(|_| not_found())?;
    let record = match find_for(&state.store, who.user.id, id).await {
        Ok(r) => r,
        Err(DecideError::NotFound) => return Err(not_found()),
        Err(e) => return Err(ApiError::from(e).into()),
    };
    let org = state
        .store
        .org(record.org_id)
        .tenancy()
        .organization()
        .await?;
    Ok(Redirect::to(&format!("/o/{}/approvals#a-{}", org.slug, record.id)).into_response())
}
