//! Live queries across the fleet: one catalogue question (`breeze_agent_proto::livequery`)
//! asked of every online device a target covers at once, over the agent command channel.
//!
//! [`LiveQueries::prepare`] answers, before anything is sent, how many devices the target
//! covers, how many are online (and answer the question on their OS), and the rows to expect.
//! [`LiveQueries::run`] records the query (audited), records the offline and unsupported
//! devices' parts at once (listed, never waited for), queues one `live_query` command per
//! online device in one transaction and pushes them together, then collects each answer as it
//! arrives — handed to the caller's observer at once (the MCP tool streams it as a progress
//! notification) and stored in small batches — until every device answered or the run's time
//! is up; devices still silent then are recorded as timed out and their commands cancelled.
//!
//! Limits: each device answers at most its row and byte caps (the agent clamps and names the
//! cap it hit; the server holds it to the same caps), and the whole query keeps at most its
//! query-wide rows and bytes (`query_rows`, `query_bytes` named on the answers cut and on the
//! query). Every door (tool, REST, page) runs queries through here.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use breeze_agent_proto::livequery::{self, LiveAnswer, Question};
use breeze_agent_proto::{CommandKind, DEFAULT_OUTPUT_CAP_BYTES};
use breeze_core::{
    Actor, AuditEvent, CommandStatus, Device, DeviceGroupId, DeviceId, DeviceStatus, OsFamily,
    SiteId,
};
use breeze_gateway::{Finished, OrgFleet};
use breeze_store::{
    AnswerCounts, CommandRecord, DeviceFilter, LiveAnswerRecord, LiveQueryRecord, NewCommand,
    NewLiveAnswer, NewLiveQuery, OrgCommands, OrgDevices, OrgLiveQueries, OrgTenancy, StoreError,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use crate::Result;

/// How long results are kept by default.
pub const DEFAULT_RETENTION_DAYS: u32 = 7;
/// The longest results may be kept.
pub const MAX_RETENTION_DAYS: u32 = 30;
/// How long one device may take to answer, by default and at most.
pub const DEFAULT_DEVICE_TIMEOUT_SECS: u32 = 30;
pub const MAX_DEVICE_TIMEOUT_SECS: u32 = 300;
/// How long the whole run waits for answers, by default and at most.
pub const DEFAULT_OVERALL_TIMEOUT_SECS: u32 = 60;
pub const MAX_OVERALL_TIMEOUT_SECS: u32 = 600;
/// Rows and serialized row bytes the whole query keeps, by default and at most.
pub const DEFAULT_QUERY_ROWS: u64 = 100_000;
pub const MAX_QUERY_ROWS: u64 = 1_000_000;
pub const DEFAULT_QUERY_BYTES: u64 = 64 * 1024 * 1024;
pub const MAX_QUERY_BYTES: u64 = 256 * 1024 * 1024;
/// The most devices a target may name one by one.
pub const MAX_TARGET_DEVICES: usize = 500;
/// How long a command may wait for an online agent that is reconnecting.
const QUEUE_TTL_SECS: u32 = 10;
/// How often the run reads its open commands back (results stored on another instance).
const POLL: Duration = Duration::from_secs(2);
/// Answers stored together at most, and the longest an answer waits to be stored.
const FLUSH_ROWS: usize = 256;
const FLUSH_AFTER: Duration = Duration::from_millis(50);

/// Which devices a query asks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(
    tag = "type",
    rename_all = "snake_case",
    rename_all_fields = "camelCase"
)]
pub enum LiveTarget {
    /// Every device of the organization.
    Organization,
    /// The devices of one site.
    Site { site_id: SiteId },
    /// The members of one device group (static or dynamic).
    Group { group_id: DeviceGroupId },
    /// Devices named one by one.
    Devices { device_ids: Vec<DeviceId> },
}

/// One device a query covers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TargetDevice {
    pub device_id: DeviceId,
    pub hostname: String,
    pub status: DeviceStatus,
    pub os_family: OsFamily,
}

impl From<&Device> for TargetDevice {
    fn from(d: &Device) -> Self {
        Self {
            device_id: d.id,
            hostname: d.hostname.clone(),
            status: d.status,
            os_family: d.os_family,
        }
    }
}

/// What a query would do, before anything is sent.
#[derive(Debug, Clone)]
pub struct Prepared {
    pub question: Question,
    pub target: LiveTarget,
    /// Online devices whose OS answers the question: the ones asked.
    pub online: Vec<TargetDevice>,
    /// Devices not online: listed, not waited for.
    pub offline: Vec<TargetDevice>,
    /// Online devices whose OS does not answer the question.
    pub unsupported: Vec<TargetDevice>,
}

impl Prepared {
    /// Every device the target covers.
    pub fn targeted(&self) -> usize {
        self.online.len() + self.offline.len() + self.unsupported.len()
    }

    /// Rows to expect: the question's typical rows per device, within the device cap, for
    /// each device asked, within the query cap.
    pub fn estimated_rows(&self, limits: &RunLimits) -> u64 {
        let per_device = u64::from(self.question.spec().typical_rows.min(limits.device_rows));
        (per_device * self.online.len() as u64).min(limits.query_rows)
    }
}

/// A run's bounds. [`RunLimits::new`] checks them; [`Default`] is every default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunLimits {
    pub device_timeout_secs: u32,
    pub overall_timeout_secs: u32,
    pub device_rows: u32,
    pub device_bytes: u64,
    pub query_rows: u64,
    pub query_bytes: u64,
    pub retention_days: u32,
}

impl Default for RunLimits {
    fn default() -> Self {
        Self {
            device_timeout_secs: DEFAULT_DEVICE_TIMEOUT_SECS,
            overall_timeout_secs: DEFAULT_OVERALL_TIMEOUT_SECS,
            device_rows: livequery::DEFAULT_ROWS,
            device_bytes: livequery::DEFAULT_BYTES,
            query_rows: DEFAULT_QUERY_ROWS,
            query_bytes: DEFAULT_QUERY_BYTES,
            retention_days: DEFAULT_RETENTION_DAYS,
        }
    }
}

/// Limits a caller may ask for; `None` is the default.
#[derive(Debug, Clone, Copy, Default)]
pub struct AskedLimits {
    pub device_timeout_secs: Option<u32>,
    pub overall_timeout_secs: Option<u32>,
    pub device_rows: Option<u32>,
    pub device_bytes: Option<u64>,
    pub query_rows: Option<u64>,
    pub query_bytes: Option<u64>,
    pub retention_days: Option<u32>,
}

fn within<T: PartialOrd + Copy + std::fmt::Display>(
    name: &str,
    v: Option<T>,
    min: T,
    max: T,
    default: T,
) -> Result<T> {
    match v {
        None => Ok(default),
        Some(v) if v >= min && v <= max => Ok(v),
        Some(v) => Err(invalid(format!(
            "{name} must be between {min} and {max} (got {v})"
        ))),
    }
}

fn invalid(m: impl Into<String>) -> crate::Error {
    crate::Error::Store(StoreError::Invalid(m.into()))
}

impl RunLimits {
    /// The asked limits, each checked against its range (the error names the one out of it).
    pub fn new(a: AskedLimits) -> Result<Self> {
        let d = RunLimits::default();
        Ok(Self {
            device_timeout_secs: within(
                "deviceTimeoutSecs",
                a.device_timeout_secs,
                1,
                MAX_DEVICE_TIMEOUT_SECS,
                d.device_timeout_secs,
            )?,
            overall_timeout_secs: within(
                "timeoutSecs",
                a.overall_timeout_secs,
                1,
                MAX_OVERALL_TIMEOUT_SECS,
                d.overall_timeout_secs,
            )?,
            device_rows: within(
                "maxRowsPerDevice",
                a.device_rows,
                1,
                livequery::MAX_ROWS,
                d.device_rows,
            )?,
            device_bytes: within(
                "maxBytesPerDevice",
                a.device_bytes,
                1,
                livequery::MAX_BYTES,
                d.device_bytes,
            )?,
            query_rows: within("maxRows", a.query_rows, 1, MAX_QUERY_ROWS, d.query_rows)?,
            query_bytes: within("maxBytes", a.query_bytes, 1, MAX_QUERY_BYTES, d.query_bytes)?,
            retention_days: within(
                "retentionDays",
                a.retention_days,
                1,
                MAX_RETENTION_DAYS,
                d.retention_days,
            )?,
        })
    }

    /// How long the run waits for answers: the overall timeout, or less when every device's
    /// own timeout (and its delivery) ends sooner.
    fn wait(&self) -> Duration {
        let per_device = u64::from(self.device_timeout_secs + QUEUE_TTL_SECS) + 2;
        Duration::from_secs(per_device.min(u64::from(self.overall_timeout_secs)))
    }
}

/// One device's part of a run, as it is recorded.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceAnswer {
    pub device_id: DeviceId,
    pub hostname: String,
    /// `answered`, `failed`, `timed_out` or `offline`.
    pub status: &'static str,
    pub rows: Vec<Value>,
    /// The cap that cut this device's rows: the agent's (`rows`, `bytes`, `hash_bytes`,
    /// `walk_entries`) or the query's (`query_rows`, `query_bytes`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cap: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// How a run went.
#[derive(Debug, Clone)]
pub struct RunSummary {
    pub query: LiveQueryRecord,
    pub counts: AnswerCounts,
    /// The query-wide cap that stopped rows, if one did.
    pub query_cap: Option<&'static str>,
    /// Devices whose rows a cap cut, with the cap.
    pub caps_hit: Vec<(TargetDevice, String)>,
    pub offline: Vec<TargetDevice>,
    pub unsupported: Vec<TargetDevice>,
    pub timed_out: Vec<TargetDevice>,
    /// From sending to the first row, and to the last answer.
    pub first_row_after: Option<Duration>,
    pub elapsed: Duration,
}

/// One organization's live queries: its devices, sites and groups (targets), its queries and
/// answers, its commands and its agents.
pub struct LiveQueries<'a> {
    devices: OrgDevices<'a>,
    tenancy: OrgTenancy<'a>,
    queries: OrgLiveQueries<'a>,
    commands: OrgCommands<'a>,
    fleet: OrgFleet<'a>,
}

/// Which statuses' answers and how far the run has got, for an observer.
#[derive(Debug, Clone, Copy)]
pub struct RunProgress {
    /// Online devices whose answer (or timeout) is in.
    pub done: usize,
    /// Online devices asked.
    pub asked: usize,
}

impl<'a> LiveQueries<'a> {
    pub fn new(
        devices: OrgDevices<'a>,
        tenancy: OrgTenancy<'a>,
        queries: OrgLiveQueries<'a>,
        commands: OrgCommands<'a>,
        fleet: OrgFleet<'a>,
    ) -> Self {
        Self {
            devices,
            tenancy,
            queries,
            commands,
            fleet,
        }
    }

    /// The devices `target` covers, split by whether they will be asked. Another
    /// organization's site, group or device is not found, like a missing one.
    pub async fn prepare(&self, question: Question, target: LiveTarget) -> Result<Prepared> {
        question.validate().map_err(invalid)?;
        let devices: Vec<Device> = match &target {
            LiveTarget::Organization => self.listing(DeviceFilter::default()).await?,
            LiveTarget::Site { site_id } => {
                self.tenancy.get_site(*site_id).await?;
                self.listing(DeviceFilter {
                    site_id: Some(*site_id),
                    ..DeviceFilter::default()
                })
                .await?
            }
            LiveTarget::Group { group_id } => self.devices.group_members(*group_id).await?,
            LiveTarget::Devices { device_ids } => {
                if device_ids.is_empty() || device_ids.len() > MAX_TARGET_DEVICES {
                    return Err(invalid(format!(
                        "deviceIds must name 1 to {MAX_TARGET_DEVICES} devices"
                    )));
                }
                let mut seen = HashSet::new();
                let mut out = Vec::new();
                for id in device_ids {
                    if seen.insert(*id) {
                        out.push(self.devices.get_device(*id).await?);
                    }
                }
                out
            }
        };
        let os = question.spec().os;
        let (mut online, mut offline, mut unsupported) = (Vec::new(), Vec::new(), Vec::new());
        for d in &devices {
            if d.status != DeviceStatus::Online {
                offline.push(TargetDevice::from(d));
            } else if !os.contains(&d.os_family.as_str()) {
                unsupported.push(TargetDevice::from(d));
            } else {
                online.push(TargetDevice::from(d));
            }
        }
        Ok(Prepared {
            question,
            target,
            online,
            offline,
            unsupported,
        })
    }

    async fn listing(&self, filter: DeviceFilter) -> Result<Vec<Device>> {
        Ok(self.devices.list_devices(&filter, u32::MAX / 2, 0).await?.0)
    }

    /// Runs a prepared query (see the module docs), calling `started` once the query is
    /// recorded (before anything is sent) and `observe` with each online device's answer as it
    /// arrives. Audited as `live_query.run` by `actor`.
    pub async fn run(
        &self,
        prepared: Prepared,
        limits: RunLimits,
        actor: &Actor,
        request_id: Option<String>,
        started_with: impl FnOnce(&LiveQueryRecord),
        mut observe: impl FnMut(&DeviceAnswer, RunProgress),
    ) -> Result<RunSummary> {
        let started = tokio::time::Instant::now();
        let question_json = serde_json::to_value(&prepared.question)
            .map_err(|e| invalid(format!("unencodable question: {e}")))?;
        let target_json = serde_json::to_value(&prepared.target)
            .map_err(|e| invalid(format!("unencodable target: {e}")))?;
        let query = self
            .queries
            .create_query(
                NewLiveQuery {
                    question: question_json,
                    target: target_json,
                    created_by: actor.to_string(),
                    retention: chrono::Duration::days(i64::from(limits.retention_days)),
                    devices_targeted: prepared.targeted() as i64,
                    devices_online: prepared.online.len() as i64,
                    run_for: chrono::Duration::from_std(limits.wait())
                        .unwrap_or(chrono::Duration::minutes(10)),
                },
                AuditEvent::new(actor.clone(), "live_query.run", "live_query")
                    .request(request_id.clone()),
            )
            .await?;
        started_with(&query);
        let not_asked = prepared
            .offline
            .iter()
            .map(|d| NewLiveAnswer {
                device_id: d.device_id,
                status: "offline".into(),
                rows: Vec::new(),
                cap: None,
                error: Some(format!("the device is {}; it was not asked", d.status)),
            })
            .chain(prepared.unsupported.iter().map(|d| NewLiveAnswer {
                device_id: d.device_id,
                status: "failed".into(),
                rows: Vec::new(),
                cap: None,
                error: Some(format!(
                    "the question {} is not answered on {}",
                    prepared.question.name(),
                    d.os_family
                )),
            }))
            .collect::<Vec<_>>();
        if !not_asked.is_empty() {
            self.queries.record_answers(query.id, not_asked).await?;
        }
        let mut run = Collector {
            limits,
            devices: prepared
                .online
                .iter()
                .map(|d| (d.device_id, d.clone()))
                .collect(),
            open: HashMap::new(),
            rows: 0,
            bytes: 0,
            query_cap: None,
            caps_hit: Vec::new(),
            timed_out: Vec::new(),
            buffer: Vec::new(),
            first_row: None,
            started,
            asked: prepared.online.len(),
            done: 0,
        };
        if !prepared.online.is_empty() {
            let news = prepared
                .online
                .iter()
                .map(|d| NewCommand {
                    device_id: d.device_id,
                    kind: CommandKind::LiveQuery {
                        question: prepared.question.clone(),
                        max_rows: limits.device_rows,
                        max_bytes: limits.device_bytes,
                    },
                    timeout_secs: limits.device_timeout_secs,
                    output_cap_bytes: DEFAULT_OUTPUT_CAP_BYTES,
                    queue_ttl: chrono::Duration::seconds(i64::from(QUEUE_TTL_SECS)),
                    script: None,
                    created_by: actor.to_string(),
                })
                .collect();
            let audit = AuditEvent::new(actor.clone(), "live_query.send", "device_command")
                .request(request_id);
            let (cmds, mut watch) = self.fleet.submit_many(news, audit).await?;
            run.open = cmds.iter().map(|c| (c.id, c.device_id)).collect();
            let deadline = started + limits.wait();
            let mut next_poll = tokio::time::Instant::now() + POLL;
            let mut flush_at: Option<tokio::time::Instant> = None;
            let mut listening = true;
            while !run.open.is_empty() {
                let flush = flush_at.unwrap_or(deadline);
                tokio::select! {
                    heard = watch.recv(), if listening => match heard {
                        Some(Finished::Stored(cmd)) => run.take(&cmd, &mut observe),
                        Some(Finished::Changed(id)) if run.open.contains_key(&id) => {
                            let cmd = self.commands.get_command(id).await?;
                            if cmd.is_terminal() {
                                run.take(&cmd, &mut observe);
                            }
                        }
                        Some(Finished::Changed(_)) => {}
                        // Nothing left to hear: the poll reads the rest.
                        None => listening = false,
                    },
                    () = tokio::time::sleep_until(next_poll) => {
                        let open: Vec<Uuid> = run.open.keys().copied().collect();
                        for cmd in self.commands.finished_commands(&open).await? {
                            run.take(&cmd, &mut observe);
                        }
                        next_poll = tokio::time::Instant::now() + POLL;
                    }
                    () = tokio::time::sleep_until(flush) => {}
                    () = tokio::time::sleep_until(deadline) => break,
                }
                if run.buffer.len() >= FLUSH_ROWS
                    || flush_at.is_some_and(|f| tokio::time::Instant::now() >= f)
                {
                    self.flush(query.id, &mut run).await?;
                    flush_at = None;
                } else if flush_at.is_none() && !run.buffer.is_empty() {
                    flush_at = Some(tokio::time::Instant::now() + FLUSH_AFTER);
                }
            }
            drop(watch);
            if !run.open.is_empty() {
                let open: Vec<Uuid> = run.open.keys().copied().collect();
                let reason = format!(
                    "no answer within the live query's {} s",
                    limits.wait().as_secs()
                );
                self.fleet.cancel_many(&open, &reason).await?;
                // Those that finished meanwhile keep their answer; the rest timed out.
                for cmd in self.commands.finished_commands(&open).await? {
                    if cmd.status != CommandStatus::Cancelled {
                        run.take(&cmd, &mut observe);
                    }
                }
                let silent: Vec<(Uuid, DeviceId)> = run.open.drain().collect();
                for (_, device) in silent {
                    run.answer(
                        device,
                        "timed_out",
                        Vec::new(),
                        None,
                        Some(reason.clone()),
                        &mut observe,
                    );
                }
            }
            self.flush(query.id, &mut run).await?;
        }
        self.queries.finish_query(query.id, run.query_cap).await?;
        let query = self.queries.get_query(query.id).await?;
        let counts = self
            .queries
            .answer_counts(&[query.id])
            .await?
            .remove(&query.id)
            .unwrap_or_default();
        Ok(RunSummary {
            query,
            counts,
            query_cap: run.query_cap,
            caps_hit: run.caps_hit,
            offline: prepared.offline,
            unsupported: prepared.unsupported,
            timed_out: run.timed_out,
            first_row_after: run.first_row,
            elapsed: started.elapsed(),
        })
    }

    async fn flush(&self, query: Uuid, run: &mut Collector) -> Result<()> {
        if run.buffer.is_empty() {
            return Ok(());
        }
        let batch = std::mem::take(&mut run.buffer);
        self.queries.record_answers(query, batch).await?;
        Ok(())
    }

    /// One kept query of this organization.
    pub async fn get(&self, id: Uuid) -> Result<(LiveQueryRecord, AnswerCounts)> {
        let q = self.queries.get_query(id).await?;
        let counts = self
            .queries
            .answer_counts(&[id])
            .await?
            .remove(&id)
            .unwrap_or_default();
        Ok((q, counts))
    }

    /// A page of a kept query's answers in device order (after device `after`, at most
    /// `limit`), each with its device's hostname.
    pub async fn results(
        &self,
        id: Uuid,
        after: Option<DeviceId>,
        limit: u32,
    ) -> Result<Vec<(LiveAnswerRecord, String)>> {
        let answers = self.queries.answers(id, after, limit).await?;
        let ids: Vec<DeviceId> = answers.iter().map(|a| a.device_id).collect();
        let names = self.devices.hostnames(&ids).await?;
        Ok(answers
            .into_iter()
            .map(|a| {
                let name = names.get(&a.device_id).cloned().unwrap_or_default();
                (a, name)
            })
            .collect())
    }

    /// The organization's kept queries, newest first, older than `before` when given, with
    /// their answers counted.
    pub async fn list(
        &self,
        before: Option<Uuid>,
        limit: u32,
    ) -> Result<Vec<(LiveQueryRecord, AnswerCounts)>> {
        let queries = self.queries.list_queries(before, limit).await?;
        let ids: Vec<Uuid> = queries.iter().map(|q| q.id).collect();
        let mut counts = self.queries.answer_counts(&ids).await?;
        Ok(queries
            .into_iter()
            .map(|q| {
                let c = counts.remove(&q.id).unwrap_or_default();
                (q, c)
            })
            .collect())
    }
}

/// A run's state while answers arrive.
struct Collector {
    limits: RunLimits,
    devices: HashMap<DeviceId, TargetDevice>,
    /// Commands not answered yet, and their devices.
    open: HashMap<Uuid, DeviceId>,
    rows: u64,
    bytes: u64,
    query_cap: Option<&'static str>,
    caps_hit: Vec<(TargetDevice, String)>,
    timed_out: Vec<TargetDevice>,
    buffer: Vec<NewLiveAnswer>,
    first_row: Option<Duration>,
    started: tokio::time::Instant,
    asked: usize,
    done: usize,
}

impl Collector {
    /// Takes a final command of the run (once; a repeat is ignored).
    fn take(&mut self, cmd: &CommandRecord, observe: &mut impl FnMut(&DeviceAnswer, RunProgress)) {
        if self.open.remove(&cmd.id).is_none() {
            return;
        }
        let device = cmd.device_id;
        match cmd.status {
            CommandStatus::Completed => {
                match cmd.result.clone().map(serde_json::from_value::<LiveAnswer>) {
                    Some(Ok(a)) => {
                        let cap = a.cap.map(|c| cap_name(&c));
                        self.answer(device, "answered", a.rows, cap, None, observe);
                    }
                    Some(Err(e)) => self.answer(
                        device,
                        "failed",
                        Vec::new(),
                        None,
                        Some(format!("the agent's answer was unreadable: {e}")),
                        observe,
                    ),
                    None => self.answer(
                        device,
                        "failed",
                        Vec::new(),
                        None,
                        Some("the agent answered without rows".into()),
                        observe,
                    ),
                }
            }
            CommandStatus::TimedOut | CommandStatus::Cancelled => {
                let why = cmd
                    .error
                    .clone()
                    .unwrap_or_else(|| "the device did not answer in time".into());
                self.answer(device, "timed_out", Vec::new(), None, Some(why), observe);
            }
            _ => {
                let why = cmd
                    .error
                    .clone()
                    .or_else(|| cmd.stderr.clone().filter(|s| !s.is_empty()))
                    .unwrap_or_else(|| format!("the command ended {}", cmd.status));
                self.answer(device, "failed", Vec::new(), None, Some(why), observe);
            }
        }
    }

    /// Records one device's part: its rows held to the device and query caps.
    fn answer(
        &mut self,
        device: DeviceId,
        status: &'static str,
        mut rows: Vec<Value>,
        mut cap: Option<String>,
        error: Option<String>,
        observe: &mut impl FnMut(&DeviceAnswer, RunProgress),
    ) {
        // The agent clamps; an agent that did not is held to the same caps here.
        if rows.len() > self.limits.device_rows as usize {
            rows.truncate(self.limits.device_rows as usize);
            cap = Some("rows".into());
        }
        let mut kept = 0usize;
        let mut device_bytes = 0u64;
        for row in &rows {
            let size = row.to_string().len() as u64;
            if device_bytes + size > self.limits.device_bytes {
                cap = Some("bytes".into());
                break;
            }
            if self.rows >= self.limits.query_rows {
                self.query_cap = Some("query_rows");
                cap = Some("query_rows".into());
                break;
            }
            if self.bytes + size > self.limits.query_bytes {
                self.query_cap = Some("query_bytes");
                cap = Some("query_bytes".into());
                break;
            }
            self.rows += 1;
            self.bytes += size;
            device_bytes += size;
            kept += 1;
        }
        rows.truncate(kept);
        if kept > 0 && self.first_row.is_none() {
            self.first_row = Some(self.started.elapsed());
        }
        let target = self.devices.get(&device).cloned().unwrap_or(TargetDevice {
            device_id: device,
            hostname: String::new(),
            status: DeviceStatus::Online,
            os_family: OsFamily::Linux,
        });
        if let Some(c) = &cap {
            self.caps_hit.push((target.clone(), c.clone()));
        }
        if status == "timed_out" {
            self.timed_out.push(target.clone());
        }
        self.done += 1;
        let answer = DeviceAnswer {
            device_id: device,
            hostname: target.hostname,
            status,
            rows,
            cap,
            error,
        };
        observe(
            &answer,
            RunProgress {
                done: self.done,
                asked: self.asked,
            },
        );
        self.buffer.push(NewLiveAnswer {
            device_id: answer.device_id,
            status: answer.status.into(),
            rows: answer.rows,
            cap: answer.cap,
            error: answer.error,
        });
    }
}

/// A device cap's wire name (`rows`, `bytes`, `hash_bytes`, `walk_entries`).
fn cap_name(c: &livequery::Cap) -> String {
    serde_json::to_value(c)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_else(|| format!("{c:?}"))
}
