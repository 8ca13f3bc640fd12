//! `run_live_query` and `list_live_queries`: a catalogue question asked of every online device
//! a target covers, at once, with the answers streamed as progress notifications and kept for
//! reading again by query id. The work is `breeze_domain::live_queries`; this is its MCP door.

use breeze_agent_proto::livequery::{self, CATALOGUE, Question, QuestionSpec};
use breeze_core::{DeviceGroupId, DeviceId, Permission, SiteId};
use breeze_domain::live_queries::{
    AskedLimits, DeviceAnswer, LiveQueries, LiveTarget, Prepared, RunLimits, TargetDevice,
};
use breeze_store::{AnswerCounts, LiveQueryRecord};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use super::device_command::safe_path;
use super::parse_uuid;
use crate::reach::{self, Reach};
use crate::{NoActions, RateLimit, Registry, Tier, Tool, ToolCx, ToolError, per};

pub(crate) fn register(r: &mut Registry) {
    r.register::<ListLiveQueries>();
    r.register::<RunLiveQuery>();
}

crate::actions! {
    // What `run_live_query` does: every action only reads (Tier 1), sending read-only
    // questions to agents at most.
    pub(crate) enum LiveAction {
        Catalogue = "catalogue" => (T1, Read, DevicesRead),
        Prepare = "prepare" => (T1, Read, DevicesRead),
        Run = "run" => (T1, Read, DevicesRead),
        Results = "results" => (T1, Read, DevicesRead),
    }
}

/// Which devices to ask.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub(crate) enum TargetInput {
    Organization,
    #[serde(rename_all = "camelCase")]
    Site {
        #[schemars(length(min = 36, max = 36))]
        site_id: String,
    },
    /// A device group, static or dynamic.
    #[serde(rename_all = "camelCase")]
    Group {
        #[schemars(length(min = 36, max = 36))]
        group_id: String,
    },
    #[serde(rename_all = "camelCase")]
    Devices {
        #[schemars(length(min = 1, max = 500))]
        device_ids: Vec<String>,
    },
}

impl TargetInput {
    fn resolve(&self) -> Result<LiveTarget, ToolError> {
        // An id that is not a UUID names nothing here, like another organization's.
        let id = |raw: &str, what: &str| {
            Uuid::parse_str(raw)
                .map_err(|_| ToolError::not_found(format!("{what} not found or access denied")))
        };
        Ok(match self {
            TargetInput::Organization => LiveTarget::Organization,
            TargetInput::Site { site_id } => LiveTarget::Site {
                site_id: SiteId(id(site_id, "Site")?),
            },
            TargetInput::Group { group_id } => LiveTarget::Group {
                group_id: DeviceGroupId(id(group_id, "Device group")?),
            },
            TargetInput::Devices { device_ids } => LiveTarget::Devices {
                device_ids: device_ids
                    .iter()
                    .map(|d| id(d, "Device").map(DeviceId))
                    .collect::<Result<_, _>>()?,
            },
        })
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct RunInput {
    action: LiveAction,
    /// prepare, run: the question and its parameters, e.g. {"question":"processes","name":"ssh"}
    /// or {"question":"files","pattern":"/opt/**/*.jar"} (action=catalogue lists them).
    #[schemars(with = "Option<serde_json::Map<String, Value>>")]
    question: Option<Value>,
    /// prepare, run: which devices (default: the organization).
    target: Option<TargetInput>,
    /// run: seconds one device may take (1-300, default 30).
    #[schemars(range(min = 1, max = 300))]
    device_timeout_secs: Option<u32>,
    /// run: seconds the whole run waits for answers (1-600, default 60).
    #[schemars(range(min = 1, max = 600))]
    timeout_secs: Option<u32>,
    /// prepare, run: rows one device answers at most (1-10000, default 1000).
    #[schemars(range(min = 1, max = 10000))]
    max_rows_per_device: Option<u32>,
    /// run: serialized row bytes one device answers at most (default 512 KiB, at most 4 MiB).
    #[schemars(range(min = 1, max = 4194304))]
    max_bytes_per_device: Option<u64>,
    /// prepare, run: rows the whole query keeps (1-1000000, default 100000).
    #[schemars(range(min = 1, max = 1000000))]
    max_rows: Option<u64>,
    /// run: serialized row bytes the whole query keeps (default 64 MiB, at most 256 MiB).
    #[schemars(range(min = 1, max = 268435456))]
    max_bytes: Option<u64>,
    /// run: days the results are kept (1-30, default 7).
    #[schemars(range(min = 1, max = 30))]
    retention_days: Option<u32>,
    /// results: the query's id (run answers it).
    #[schemars(length(min = 36, max = 36))]
    query_id: Option<String>,
    /// results: the nextCursor of the previous page.
    #[schemars(length(max = 64))]
    cursor: Option<String>,
    /// results: devices per page (1-100, default 25); run: rows shown in its answer (0-500,
    /// default 100; the rest are read with results).
    #[schemars(range(min = 0, max = 500))]
    limit: Option<u32>,
}

/// A device in a summary.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct DeviceRef {
    device_id: String,
    hostname: String,
    status: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    cap: Option<String>,
}

impl DeviceRef {
    fn of(d: &TargetDevice) -> Self {
        Self {
            device_id: d.device_id.to_string(),
            hostname: d.hostname.clone(),
            status: d.status.to_string(),
            cap: None,
        }
    }
}

/// One row with the device that answered it.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RowView {
    device_id: String,
    hostname: String,
    /// The question's columns (action=catalogue lists them).
    #[schemars(with = "serde_json::Map<String, Value>")]
    row: Value,
}

/// One device's answer in a results page.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct AnswerView {
    device_id: String,
    hostname: String,
    /// answered, failed, timed_out or offline.
    status: String,
    row_count: i64,
    /// The cap that cut this device's rows: rows, bytes, hash_bytes, walk_entries (the
    /// agent's) or query_rows, query_bytes (the query's).
    #[serde(skip_serializing_if = "Option::is_none")]
    cap: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    answered_at: String,
    #[schemars(with = "Vec<serde_json::Map<String, Value>>")]
    rows: Vec<Value>,
}

/// A query as listed.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct QueryView {
    query_id: String,
    #[schemars(with = "serde_json::Map<String, Value>")]
    question: Value,
    #[schemars(with = "serde_json::Map<String, Value>")]
    target: Value,
    /// running, finished or interrupted.
    status: String,
    created_by: String,
    created_at: String,
    expires_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    finished_at: Option<String>,
    devices_targeted: i64,
    devices_online: i64,
    answered: i64,
    failed: i64,
    timed_out: i64,
    offline: i64,
    rows: i64,
    /// The query-wide cap that stopped rows (query_rows or query_bytes), if one did.
    #[serde(skip_serializing_if = "Option::is_none")]
    query_cap: Option<String>,
}

impl QueryView {
    fn new(q: LiveQueryRecord, c: AnswerCounts, now: breeze_core::Timestamp) -> Self {
        Self {
            query_id: q.id.to_string(),
            status: q.status(now).to_owned(),
            question: q.question,
            target: q.target,
            created_by: q.created_by,
            created_at: q.created_at.to_rfc3339(),
            expires_at: q.expires_at.to_rfc3339(),
            finished_at: q.finished_at.map(|t| t.to_rfc3339()),
            devices_targeted: q.devices_targeted,
            devices_online: q.devices_online,
            answered: c.answered,
            failed: c.failed,
            timed_out: c.timed_out,
            offline: c.offline,
            rows: c.rows,
            query_cap: q.query_cap,
        }
    }
}

/// What `run_live_query` answers; which fields depend on the action.
#[derive(Debug, Default, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RunOutput {
    /// catalogue: every question with its parameters, columns and operating systems.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<Vec<serde_json::Map<String, Value>>>")]
    questions: Option<Vec<Value>>,
    /// prepare, run: the devices the target covers.
    #[serde(skip_serializing_if = "Option::is_none")]
    devices_targeted: Option<usize>,
    /// prepare, run: those online whose OS answers the question (the ones asked).
    #[serde(skip_serializing_if = "Option::is_none")]
    devices_online: Option<usize>,
    /// prepare: rows to expect.
    #[serde(skip_serializing_if = "Option::is_none")]
    estimated_rows: Option<u64>,
    /// prepare, run: devices not online, listed and not waited for.
    #[serde(skip_serializing_if = "Option::is_none")]
    offline: Option<Vec<DeviceRef>>,
    /// prepare, run: online devices whose OS does not answer the question.
    #[serde(skip_serializing_if = "Option::is_none")]
    unsupported: Option<Vec<DeviceRef>>,
    /// run, results: the query (status and counts).
    #[serde(skip_serializing_if = "Option::is_none")]
    query: Option<QueryView>,
    /// run: devices that did not answer in time.
    #[serde(skip_serializing_if = "Option::is_none")]
    timed_out: Option<Vec<DeviceRef>>,
    /// run: devices whose rows a cap cut, with the cap named.
    #[serde(skip_serializing_if = "Option::is_none")]
    caps_hit: Option<Vec<DeviceRef>>,
    /// run: milliseconds from sending to the first row and to the last answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    first_row_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    elapsed_ms: Option<u64>,
    /// run: the first rows (at most `limit`); read the rest with action=results.
    #[serde(skip_serializing_if = "Option::is_none")]
    rows: Option<Vec<RowView>>,
    /// results: a page of answers in device order.
    #[serde(skip_serializing_if = "Option::is_none")]
    answers: Option<Vec<AnswerView>>,
    /// results: pass as cursor for the next page; absent on the last.
    #[serde(skip_serializing_if = "Option::is_none")]
    next_cursor: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
}

type LiveReach = (
    reach::Commands,
    reach::Devices,
    reach::Fleet,
    reach::LiveQueries,
    reach::Tenancy,
);

fn service<'a, R: Reach>(cx: &ToolCx<'a, R>) -> LiveQueries<'a> {
    LiveQueries::new(
        cx.devices(),
        cx.tenancy(),
        cx.live_queries(),
        cx.commands(),
        *cx.fleet(),
    )
}

fn domain_error(e: breeze_domain::Error) -> ToolError {
    let breeze_domain::Error::Store(e) = e;
    match e {
        breeze_store::StoreError::NotFound(what) => {
            let what = match what {
                "device" => "Device",
                "site" => "Site",
                "device group" => "Device group",
                "live query" => "Live query",
                other => other,
            };
            ToolError::not_found(format!("{what} not found or access denied"))
        }
        other => other.into(),
    }
}

fn question(input: &RunInput) -> Result<Question, ToolError> {
    let raw = input
        .question
        .clone()
        .ok_or_else(|| ToolError::invalid("question is required for this action"))?;
    let q: Question = serde_json::from_value(raw).map_err(|e| {
        let names: Vec<&str> = CATALOGUE.iter().map(|q| q.name).collect();
        ToolError::invalid(format!(
            "question: {e} (questions: {}; action=catalogue lists their parameters)",
            names.join(", ")
        ))
    })?;
    q.validate()
        .map_err(|e| ToolError::invalid(format!("question: {e}")))?;
    if let Some(pattern) = q.path() {
        safe_path("question.pattern", pattern)?;
    }
    Ok(q)
}

fn limits(input: &RunInput) -> Result<RunLimits, ToolError> {
    RunLimits::new(AskedLimits {
        device_timeout_secs: input.device_timeout_secs,
        overall_timeout_secs: input.timeout_secs,
        device_rows: input.max_rows_per_device,
        device_bytes: input.max_bytes_per_device,
        query_rows: input.max_rows,
        query_bytes: input.max_bytes,
        retention_days: input.retention_days,
    })
    .map_err(domain_error)
}

fn catalogue_json(q: &QuestionSpec) -> Value {
    serde_json::to_value(q).unwrap_or_default()
}

async fn prepare<R: Reach>(
    cx: &ToolCx<'_, R>,
    input: &RunInput,
) -> Result<(Prepared, RunLimits), ToolError> {
    let q = question(input)?;
    let limits = limits(input)?;
    let target = input
        .target
        .as_ref()
        .map_or(Ok(LiveTarget::Organization), TargetInput::resolve)?;
    let prepared = service(cx).prepare(q, target).await.map_err(domain_error)?;
    Ok((prepared, limits))
}

/// The most of one device's rows a progress notification carries (the rest are stored).
const STREAMED_ROWS: usize = 100;

fn progress_message(a: &DeviceAnswer) -> String {
    let shown = a.rows.len().min(STREAMED_ROWS);
    serde_json::json!({
        "deviceId": a.device_id,
        "hostname": a.hostname,
        "status": a.status,
        "rowCount": a.rows.len(),
        "rows": &a.rows[..shown],
        "rowsNotShown": a.rows.len() - shown,
        "cap": a.cap,
        "error": a.error,
    })
    .to_string()
}

pub(crate) struct RunLiveQuery;

impl Tool for RunLiveQuery {
    const NAME: &'static str = "run_live_query";
    const TITLE: &'static str = "Ask the fleet a live question";
    const DESCRIPTION: &'static str = "Ask every online device of a target (organization, site, group, devices) a read-only question now: processes, listening ports, packages, users, groups, sessions, services, kernel modules, files by glob with SHA-256, scheduled tasks, interfaces, routes. action=catalogue lists questions; prepare counts targets, online devices and estimated rows; run sends at once, streams each device's rows as progress, lists offline devices without waiting, names any row or byte cap hit; results pages a stored query by queryId.";
    const TIER: Tier = Tier::T1;
    const PERMISSION: Permission = Permission::DevicesRead;
    const RATE_LIMIT: Option<RateLimit> = per(20, 300);
    type Actions = LiveAction;
    type Input = RunInput;
    type Output = RunOutput;
    type Reach = LiveReach;

    async fn call(
        cx: &ToolCx<'_, Self::Reach>,
        input: Self::Input,
    ) -> Result<Self::Output, ToolError> {
        match input.action {
            LiveAction::Catalogue => Ok(RunOutput {
                questions: Some(CATALOGUE.iter().map(catalogue_json).collect()),
                ..RunOutput::default()
            }),
            LiveAction::Prepare => {
                let (p, limits) = prepare(cx, &input).await?;
                Ok(RunOutput {
                    devices_targeted: Some(p.targeted()),
                    devices_online: Some(p.online.len()),
                    estimated_rows: Some(p.estimated_rows(&limits)),
                    offline: Some(p.offline.iter().map(DeviceRef::of).collect()),
                    unsupported: Some(p.unsupported.iter().map(DeviceRef::of).collect()),
                    message: Some(format!(
                        "Nothing was sent. action=run asks the {} online device(s) at once.",
                        p.online.len()
                    )),
                    ..RunOutput::default()
                })
            }
            LiveAction::Run => {
                let (p, limits) = prepare(cx, &input).await?;
                let show = input.limit.unwrap_or(100).min(500) as usize;
                let mut rows = Vec::new();
                let summary = service(cx)
                    .run(
                        p,
                        limits,
                        &cx.actor,
                        cx.request_id.clone(),
                        |_| {},
                        |answer, progress| {
                            cx.report(
                                progress.done as f64,
                                Some(progress.asked as f64),
                                Some(progress_message(answer)),
                            );
                            for row in &answer.rows {
                                if rows.len() >= show {
                                    break;
                                }
                                rows.push(RowView {
                                    device_id: answer.device_id.to_string(),
                                    hostname: answer.hostname.clone(),
                                    row: row.clone(),
                                });
                            }
                        },
                    )
                    .await
                    .map_err(domain_error)?;
                let caps_hit = summary
                    .caps_hit
                    .iter()
                    .map(|(d, cap)| DeviceRef {
                        cap: Some(cap.clone()),
                        ..DeviceRef::of(d)
                    })
                    .collect();
                let total_rows = summary.counts.rows;
                let message = match summary.query_cap {
                    Some(cap) => format!(
                        "The query stopped keeping rows at its {cap} cap ({total_rows} rows kept); raise maxRows or maxBytes, or narrow the question."
                    ),
                    None => format!(
                        "{total_rows} rows from {} device(s); read them all with action=results and queryId.",
                        summary.counts.answered
                    ),
                };
                Ok(RunOutput {
                    devices_targeted: Some(summary.query.devices_targeted as usize),
                    devices_online: Some(summary.query.devices_online as usize),
                    offline: Some(summary.offline.iter().map(DeviceRef::of).collect()),
                    unsupported: Some(summary.unsupported.iter().map(DeviceRef::of).collect()),
                    timed_out: Some(summary.timed_out.iter().map(DeviceRef::of).collect()),
                    caps_hit: Some(caps_hit),
                    first_row_ms: summary.first_row_after.map(|d| d.as_millis() as u64),
                    elapsed_ms: Some(summary.elapsed.as_millis() as u64),
                    rows: Some(rows),
                    query: Some(QueryView::new(summary.query, summary.counts, cx.now())),
                    message: Some(message),
                    ..RunOutput::default()
                })
            }
            LiveAction::Results => {
                let raw = input
                    .query_id
                    .as_deref()
                    .ok_or_else(|| ToolError::invalid("queryId is required for this action"))?;
                let id = Uuid::parse_str(raw)
                    .map_err(|_| ToolError::not_found("Live query not found or access denied"))?;
                let after = input
                    .cursor
                    .as_deref()
                    .map(|c| parse_uuid("cursor", c).map(DeviceId))
                    .transpose()?;
                let limit = input.limit.unwrap_or(25).clamp(1, 100);
                let svc = service(cx);
                let (q, counts) = svc.get(id).await.map_err(domain_error)?;
                let mut page = svc
                    .results(id, after, limit + 1)
                    .await
                    .map_err(domain_error)?;
                let more = page.len() > limit as usize;
                page.truncate(limit as usize);
                let next_cursor = more
                    .then(|| page.last().map(|(a, _)| a.device_id.to_string()))
                    .flatten();
                let answers = page
                    .into_iter()
                    .map(|(a, hostname)| AnswerView {
                        device_id: a.device_id.to_string(),
                        hostname,
                        status: a.status,
                        row_count: a.row_count,
                        cap: a.cap,
                        error: a.error,
                        answered_at: a.answered_at.to_rfc3339(),
                        rows: a.rows,
                    })
                    .collect();
                Ok(RunOutput {
                    query: Some(QueryView::new(q, counts, cx.now())),
                    answers: Some(answers),
                    next_cursor,
                    ..RunOutput::default()
                })
            }
        }
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct ListInput {
    /// The nextCursor of the previous page.
    #[schemars(length(max = 64))]
    cursor: Option<String>,
    /// Queries per page (1-100, default 25).
    #[schemars(range(min = 1, max = 100))]
    limit: Option<u32>,
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ListOutput {
    queries: Vec<QueryView>,
    /// Pass as cursor for the next page; absent on the last.
    #[serde(skip_serializing_if = "Option::is_none")]
    next_cursor: Option<String>,
}

pub(crate) struct ListLiveQueries;

impl Tool for ListLiveQueries {
    const NAME: &'static str = "list_live_queries";
    const TITLE: &'static str = "List live queries";
    const DESCRIPTION: &'static str = "Live queries run in this organization whose results are still kept, newest first: question, target, status (running, finished, interrupted), devices answered, failed, timed out and offline, rows and any query-wide cap hit. Read one's rows with run_live_query action=results.";
    const TIER: Tier = Tier::T1;
    const PERMISSION: Permission = Permission::DevicesRead;
    type Actions = NoActions;
    type Input = ListInput;
    type Output = ListOutput;
    type Reach = LiveReach;

    async fn call(
        cx: &ToolCx<'_, Self::Reach>,
        input: Self::Input,
    ) -> Result<Self::Output, ToolError> {
        let before = input
            .cursor
            .as_deref()
            .map(|c| parse_uuid("cursor", c))
            .transpose()?;
        let limit = input.limit.unwrap_or(25).clamp(1, 100);
        let mut page = service(cx)
            .list(before, limit + 1)
            .await
            .map_err(domain_error)?;
        let more = page.len() > limit as usize;
        page.truncate(limit as usize);
        let next_cursor = more
            .then(|| page.last().map(|(q, _)| q.id.to_string()))
            .flatten();
        let now = cx.now();
        Ok(ListOutput {
            queries: page
                .into_iter()
                .map(|(q, c)| QueryView::new(q, c, now))
                .collect(),
            next_cursor,
        })
    }
}

/// The catalogue's caps, for the docs of the limits above.
const _: () = assert!(livequery::MAX_ROWS == 10_000 && livequery::MAX_BYTES == 4 * 1024 * 1024);
