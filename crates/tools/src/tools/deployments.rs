//! `manage_deployments`: staged software deployments — list, get, device_status, create,
//! start, pause, resume, cancel.
//!
//! A deployment runs one payload (a library script with its parameters, or a package installed
//! through the agents' patch layer) on the devices of its
//! target (organization, site, group or device), ring after ring: rings of named devices, of a
//! group's members, or cumulative percentages of the target; devices no ring takes form a last
//! ring. The devices and rings are fixed at `create`, so a draft shows exactly what `start`
//! will touch. A ring whose failed devices exceed `maxFailurePercent` pauses the deployment at
//! once (the reason recorded); the next ring starts only when the ring's `successPercent` of
//! its counted devices (all but skipped) succeeded. `resume` goes on — accepting the ring's
//! failures, or with `retryFailed` running its failed devices again.
//!
//! Reads are Tier 1; create Tier 2 (nothing runs); start, pause, resume and cancel Tier 3 (the
//! spec's "1/2/3"). **The payload never runs on the deployment's say-so:** the server's worker
//! sends each device's run through the call pipeline as `run_script` (or `manage_patches`
//! `install`, followed through its patch job; both Tier 3), as the
//! deployment's owner — its creator, then whoever last started or resumed it — cleared by the
//! guard as that credential stands then, with approvals as for any MCP call.

use std::collections::BTreeMap;

use breeze_core::{
    AuditEvent, DeploymentStatus, DeviceGroupId, DeviceId, DeviceRunStatus, Permission,
    deployment::RingTally,
};
use breeze_store::{
    Control, Deployment, DeploymentDevice, NewDeployment, NewRing, NewRingMembers, PackageAction,
    Payload, RuleTarget, StoreError,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use super::{
    DEVICE_NOT_FOUND,
    args::{TargetArg, uuid_or_missing},
};
use crate::reach::{self, Reach};
use crate::{Pin, RateLimit, Registry, Rendered, Tier, Tool, ToolCx, ToolError, per};

pub(crate) fn register(r: &mut Registry) {
    r.register::<ManageDeployments>();
}

const DEPLOYMENT_NOT_FOUND: &str = "Deployment not found or access denied";
const WINDOW_NOT_FOUND: &str = "Maintenance window not found or access denied";

crate::actions! {
    // What `manage_deployments` does: reads are Tier 1; creating a draft Tier 2 (nothing
    // runs); everything that makes it run or stop Tier 3.
    pub(crate) enum DeploymentAction {
        List = "list" => (T1, Read, ScriptsRead),
        Get = "get" => (T1, Read, ScriptsRead),
        DeviceStatus = "device_status" => (T1, Read, ScriptsRead),
        Create = "create" => (T2, Create, ScriptsWrite),
        Start = "start" => (T3, Execute, ScriptsExecute),
        Pause = "pause" => (T3, Update, ScriptsExecute),
        Resume = "resume" => (T3, Execute, ScriptsExecute),
        Cancel = "cancel" => (T3, Update, ScriptsExecute),
    }
}

/// What runs on each device.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub(crate) enum PayloadArg {
    /// A library script (each device's run: run_script, Tier 3, as the owner).
    #[serde(rename_all = "camelCase")]
    Script {
        #[schemars(length(min = 36, max = 36))]
        script_id: String,
        parameters: Option<BTreeMap<String, String>>,
        /// Seconds before the agent stops it (5-600, default 120).
        #[schemars(range(min = 5, max = 600))]
        timeout_seconds: Option<u32>,
    },
    /// A package through the agents' package managers, as the owner, no reboot: install (each
    /// device: manage_patches install, Tier 3; the package must be offered by the device's
    /// last patch scan) or remove (manage_patches remove, Tier 3, destructive; a device where
    /// it is not installed succeeds).
    #[serde(rename_all = "camelCase")]
    Package {
        #[schemars(length(min = 1, max = 200))]
        name: String,
        /// install (default) or remove.
        action: Option<PackageActionArg>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum PackageActionArg {
    Install,
    Remove,
}

/// When a deployment's runs go out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum WhenArg {
    Now,
    MaintenanceWindow,
}

/// One ring, in order: exactly one of deviceIds, groupId, percent.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct RingArg {
    /// Default "ring N".
    #[schemars(length(min = 1, max = 255))]
    name: Option<String>,
    /// These devices (each must be in the target).
    #[schemars(length(min = 1, max = 500))]
    device_ids: Option<Vec<String>>,
    /// This group's members that are in the target.
    #[schemars(length(min = 36, max = 36))]
    group_id: Option<String>,
    /// Up to this share of the whole target, earlier rings included (1-100; 10, 50, 100 is a
    /// tenth, then up to half, then the rest).
    #[schemars(range(min = 1, max = 100))]
    percent: Option<u8>,
    /// The least share (0-100) of the ring's counted devices that must succeed before the
    /// next ring starts (default 100 - maxFailurePercent).
    #[schemars(range(min = 0, max = 100))]
    success_percent: Option<u8>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct DeploymentsInput {
    action: DeploymentAction,
    /// get, device_status, start, pause, resume, cancel.
    #[schemars(length(min = 36, max = 36))]
    deployment_id: Option<String>,
    /// create (required).
    #[schemars(length(min = 1, max = 255))]
    name: Option<String>,
    #[schemars(length(max = 2000))]
    description: Option<String>,
    /// create (required).
    payload: Option<PayloadArg>,
    /// create: whose devices (default organization).
    target: Option<TargetArg>,
    /// create: the rings in order (default one ring of every targeted device).
    #[schemars(length(max = 10))]
    rings: Option<Vec<RingArg>>,
    /// create: a ring whose failed devices exceed this share of its counted ones pauses the
    /// deployment (0-100, default 0: any failure pauses).
    #[schemars(range(min = 0, max = 100))]
    max_failure_percent: Option<u8>,
    /// create: when each device's run goes out — now (default: as its ring comes) or
    /// maintenance_window (only while a maintenance window is open for the device; outside one
    /// it is deferred and goes out when its window opens).
    when: Option<WhenArg>,
    /// create with when=maintenance_window: only this window counts (default: any enabled
    /// window covering the device — its organization's, site's, groups' or its own); ignored
    /// with when=now.
    #[schemars(length(min = 36, max = 36))]
    window_id: Option<String>,
    /// resume: run the current ring's failed devices again (default false: accept them).
    retry_failed: Option<bool>,
    /// list: only this status (draft, running, paused, completed, cancelled).
    #[schemars(length(min = 1, max = 20))]
    status: Option<String>,
    /// device_status: only this ring (1-based).
    #[schemars(range(min = 1, max = 11))]
    ring: Option<u32>,
    /// list: most deployments (default 20).
    #[schemars(range(min = 1, max = 100))]
    limit: Option<u32>,
}

/// One ring and how its devices stand.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct RingView {
    /// 1-based.
    ring: usize,
    name: String,
    success_percent: u8,
    devices: usize,
    pending: usize,
    running: usize,
    succeeded: usize,
    failed: usize,
    skipped: usize,
    /// Of the pending: held back until their maintenance window opens.
    deferred: usize,
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct DeploymentView {
    id: String,
    name: String,
    description: Option<String>,
    /// kind script (scriptId, parameters, timeoutSeconds) or package (name).
    #[schemars(with = "serde_json::Map<String, Value>")]
    payload: Value,
    target_type: String,
    target_id: Option<String>,
    /// draft, running, paused, completed, cancelled.
    status: String,
    /// The ring being rolled out (1-based).
    current_ring: i64,
    max_failure_percent: i64,
    /// Why it is paused (a person, or a ring's failures).
    pause_reason: Option<String>,
    /// The credential its runs act as.
    owner: String,
    /// now, or maintenance_window (each device's run waits for its window).
    when: String,
    /// The one window that counts (when=maintenance_window; none: any covering the device).
    window_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    rings: Option<Vec<RingView>>,
    created_at: String,
    started_at: Option<String>,
    finished_at: Option<String>,
}

impl DeploymentView {
    fn new(d: Deployment, tallies: Option<Vec<RingTally>>, deferred: &[usize]) -> Self {
        let rings = tallies.map(|t| {
            d.rings
                .iter()
                .zip(t)
                .enumerate()
                .map(|(i, (r, t))| RingView {
                    deferred: deferred.get(i).copied().unwrap_or(0),
                    ring: i + 1,
                    name: r.name.clone(),
                    success_percent: r.success_percent,
                    devices: t.counted() + t.skipped,
                    pending: t.pending,
                    running: t.running,
                    succeeded: t.succeeded,
                    failed: t.failed,
                    skipped: t.skipped,
                })
                .collect()
        });
        let target_id = d
            .target_site_id
            .map(|s| s.to_string())
            .or(d.target_group_id.map(|g| g.to_string()))
            .or(d.target_device_id.map(|x| x.to_string()));
        Self {
            id: d.id.to_string(),
            name: d.name,
            description: d.description,
            payload: serde_json::to_value(&d.payload).unwrap_or_default(),
            target_type: d.target_kind.to_string(),
            target_id,
            status: d.status.to_string(),
            current_ring: d.current_ring + 1,
            max_failure_percent: d.max_failure_percent,
            pause_reason: d.pause_reason,
            owner: d.owner_actor,
            when: if d.maintenance_window_only {
                "maintenance_window".into()
            } else {
                "now".into()
            },
            window_id: d.window_id.map(|w| w.to_string()),
            rings,
            created_at: d.created_at.to_rfc3339(),
            started_at: d.started_at.map(|t| t.to_rfc3339()),
            finished_at: d.finished_at.map(|t| t.to_rfc3339()),
        }
    }
}

/// One device's part.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct DeviceView {
    device_id: String,
    hostname: String,
    /// 1-based.
    ring: i64,
    /// pending, deferred (pending, outside its maintenance window), running, succeeded,
    /// failed, skipped.
    status: String,
    /// Why it is deferred, and when its next window opens.
    #[serde(skip_serializing_if = "Option::is_none")]
    deferred: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    next_window_at: Option<String>,
    /// The approval request its run waits or waited for.
    approval_id: Option<String>,
    command_id: Option<String>,
    exit_code: Option<i64>,
    /// The first part of the output.
    output: Option<String>,
    error: Option<String>,
    finished_at: Option<String>,
}

impl From<DeploymentDevice> for DeviceView {
    fn from(d: DeploymentDevice) -> Self {
        Self {
            device_id: d.device_id.to_string(),
            hostname: d.hostname,
            ring: d.ring + 1,
            status: if d.status == DeviceRunStatus::Pending && d.deferred_reason.is_some() {
                "deferred".into()
            } else {
                d.status.to_string()
            },
            deferred: d
                .deferred_reason
                .filter(|_| d.status == DeviceRunStatus::Pending),
            next_window_at: d
                .deferred_until
                .filter(|_| d.status == DeviceRunStatus::Pending)
                .map(|t| t.to_rfc3339()),
            approval_id: d.approval_id.map(|a| a.to_string()),
            command_id: d.command_id,
            exit_code: d.exit_code,
            output: d.output,
            error: d.error,
            finished_at: d.finished_at.map(|t| t.to_rfc3339()),
        }
    }
}

/// What each action returns; one object with the fields that apply.
#[derive(Debug, Default, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct DeploymentsOutput {
    #[serde(skip_serializing_if = "Option::is_none")]
    deployments: Option<Vec<DeploymentView>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    deployment: Option<DeploymentView>,
    /// device_status: each device's part, by ring then hostname.
    #[serde(skip_serializing_if = "Option::is_none")]
    devices: Option<Vec<DeviceView>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    showing: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
}

fn deployment_id(input: &DeploymentsInput) -> Result<Uuid, ToolError> {
    uuid_or_missing(
        input.deployment_id.as_deref(),
        "deploymentId",
        DEPLOYMENT_NOT_FOUND,
    )
}

fn missing(e: StoreError) -> ToolError {
    match e {
        StoreError::NotFound("deployment") => ToolError::not_found(DEPLOYMENT_NOT_FOUND),
        other => other.into(),
    }
}

fn audit<R: Reach>(cx: &ToolCx<'_, R>, action: &str) -> AuditEvent {
    AuditEvent::new(cx.actor.clone(), action, "deployment").request(cx.request_id.clone())
}

fn payload(arg: &PayloadArg) -> Result<Payload, ToolError> {
    Ok(match arg {
        PayloadArg::Script {
            script_id,
            parameters,
            timeout_seconds,
        } => Payload::Script {
            script_id: Uuid::parse_str(script_id)
                .map_err(|_| ToolError::not_found("Script not found or access denied"))?,
            parameters: parameters.clone().unwrap_or_default(),
            timeout_seconds: timeout_seconds.unwrap_or(120),
        },
        PayloadArg::Package { name, action } => Payload::Package {
            name: name.clone(),
            action: match action {
                Some(PackageActionArg::Remove) => PackageAction::Remove,
                _ => PackageAction::Install,
            },
        },
    })
}

fn ring(i: usize, r: &RingArg, max_failure: u8) -> Result<NewRing, ToolError> {
    let given = usize::from(r.device_ids.is_some())
        + usize::from(r.group_id.is_some())
        + usize::from(r.percent.is_some());
    if given != 1 {
        return Err(ToolError::invalid(format!(
            "rings[{i}] needs exactly one of deviceIds, groupId or percent"
        )));
    }
    let members = if let Some(ids) = &r.device_ids {
        let mut devices = Vec::new();
        for raw in ids {
            devices.push(DeviceId(
                Uuid::parse_str(raw).map_err(|_| ToolError::not_found(DEVICE_NOT_FOUND))?,
            ));
        }
        NewRingMembers::Devices(devices)
    } else if let Some(g) = &r.group_id {
        NewRingMembers::Group(DeviceGroupId(Uuid::parse_str(g).map_err(|_| {
            ToolError::not_found("device group not found or access denied")
        })?))
    } else {
        NewRingMembers::Percent(r.percent.unwrap_or(100))
    };
    Ok(NewRing {
        name: r.name.clone(),
        members,
        success_percent: r
            .success_percent
            .unwrap_or(100u8.saturating_sub(max_failure)),
    })
}

async fn view<R: Reach>(cx: &ToolCx<'_, R>, d: Deployment) -> Result<DeploymentView, ToolError> {
    let tallies = cx.deployments().deployment_tallies(&d).await?;
    let mut deferred = vec![0; d.rings.len()];
    if d.maintenance_window_only {
        for p in cx
            .deployments()
            .deployment_devices(d.id, None, Some(DeviceRunStatus::Pending))
            .await?
        {
            if let Some(n) = usize::try_from(p.ring)
                .ok()
                .filter(|_| p.deferred_reason.is_some())
                .and_then(|r| deferred.get_mut(r))
            {
                *n += 1;
            }
        }
    }
    Ok(DeploymentView::new(d, Some(tallies), &deferred))
}

/// The window a `when=maintenance_window` deployment names: this organization's and enabled
/// (as `manage_patches` install in a window asks).
async fn window<R: Reach>(
    cx: &ToolCx<'_, R>,
    input: &DeploymentsInput,
) -> Result<Option<Uuid>, ToolError> {
    // As manage_patches: a window matters only to when=maintenance_window.
    let Some(raw) = input
        .window_id
        .as_ref()
        .filter(|_| input.when == Some(WhenArg::MaintenanceWindow))
    else {
        return Ok(None);
    };
    let id = Uuid::parse_str(raw).map_err(|_| ToolError::not_found(WINDOW_NOT_FOUND))?;
    let w = cx.maintenance().get_window(id).await.map_err(|e| match e {
        StoreError::NotFound(_) => ToolError::not_found(WINDOW_NOT_FOUND),
        other => other.into(),
    })?;
    if !w.enabled {
        return Err(ToolError::invalid(format!(
            "windowId: the maintenance window {:?} is disabled",
            w.name
        ))
        .hint("manage_maintenance_windows action=update can enable it"));
    }
    Ok(Some(id))
}

async fn create<R: Reach>(
    cx: &ToolCx<'_, R>,
    input: &DeploymentsInput,
) -> Result<Deployment, ToolError> {
    let name = input
        .name
        .clone()
        .ok_or_else(|| ToolError::invalid("name is required for create"))?;
    let payload = payload(
        input
            .payload
            .as_ref()
            .ok_or_else(|| ToolError::invalid("payload is required for create"))?,
    )?;
    let max_failure = input.max_failure_percent.unwrap_or(0);
    let rings = input
        .rings
        .iter()
        .flatten()
        .enumerate()
        .map(|(i, r)| ring(i, r, max_failure))
        .collect::<Result<Vec<_>, _>>()?;
    let new = NewDeployment {
        name,
        description: input.description.clone(),
        payload,
        target: input
            .target
            .as_ref()
            .map(TargetArg::resolve)
            .transpose()?
            .unwrap_or(RuleTarget::Organization),
        rings,
        max_failure_percent: max_failure,
        owner_actor: cx.actor.to_string(),
        maintenance_window_only: input.when == Some(WhenArg::MaintenanceWindow),
        window_id: window(cx, input).await?,
    };
    cx.deployments()
        .create_deployment(new, audit(cx, "deployment.create"))
        .await
        .map_err(|e| match e {
            StoreError::NotFound("device") => ToolError::not_found(DEVICE_NOT_FOUND),
            other => other.into(),
        })
}

pub(crate) struct ManageDeployments;

impl Tool for ManageDeployments {
    const NAME: &'static str = "manage_deployments";
    const TITLE: &'static str = "Manage staged deployments";
    const DESCRIPTION: &'static str = "Staged software deployments: a payload (a library script, or a package to install through the patch layer) for a target's devices in rings (named devices, a group, or cumulative percentages of the target), with a failure ceiling (maxFailurePercent: pauses at once, reason recorded) and per-ring success thresholds (the next ring starts only when met). action=list|get|device_status read (Tier 1); create a draft (Tier 2, nothing runs; the devices and rings are fixed and shown); start|pause|resume|cancel (Tier 3). Each device's run goes through run_script's (or manage_patches install's) Tier 3 approval as the deployment's owner; offline devices are skipped (with when=maintenance_window they stay deferred and go once online inside a window). resume accepts the ring's failures, or retryFailed=true runs them again. cancel withdraws every run still waiting for approval and starts nothing more; a run already under way on a device is not interrupted, and its result is still recorded on the device.";
    const TIER: Tier = Tier::T1;
    const PERMISSION: Permission = Permission::ScriptsRead;
    const RATE_LIMIT: Option<RateLimit> = per(10, 600);
    type Actions = DeploymentAction;
    type Input = DeploymentsInput;
    type Output = Rendered<DeploymentsOutput>;
    type Reach = (
        reach::Commands,
        reach::Deployments,
        reach::Maintenance,
        reach::Security,
    );

    /// The deployment a Tier 3 action names exists in the organization (so no approval is
    /// requested for another organization's, or a missing, deployment).
    async fn precheck(
        cx: &ToolCx<'_, Self::Reach>,
        input: &Self::Input,
    ) -> Result<Option<Pin>, ToolError> {
        if matches!(
            input.action,
            DeploymentAction::Start
                | DeploymentAction::Pause
                | DeploymentAction::Resume
                | DeploymentAction::Cancel
        ) {
            cx.deployments()
                .get_deployment(deployment_id(input)?)
                .await
                .map_err(missing)?;
        }
        Ok(None)
    }

    async fn call(
        cx: &ToolCx<'_, Self::Reach>,
        input: Self::Input,
    ) -> Result<Self::Output, ToolError> {
        match input.action {
            DeploymentAction::List => {
                let status = input
                    .status
                    .as_deref()
                    .map(str::parse::<DeploymentStatus>)
                    .transpose()
                    .map_err(|e| ToolError::invalid(e.to_string()))?;
                let mut all = Vec::new();
                for d in cx
                    .deployments()
                    .list_deployments(status, input.limit.unwrap_or(20))
                    .await?
                {
                    all.push(view(cx, d).await?);
                }
                Rendered::of(&DeploymentsOutput {
                    showing: Some(all.len()),
                    deployments: Some(all),
                    ..Default::default()
                })
            }
            DeploymentAction::Get => {
                let d = cx
                    .deployments()
                    .get_deployment(deployment_id(&input)?)
                    .await
                    .map_err(missing)?;
                Rendered::of(&DeploymentsOutput {
                    deployment: Some(view(cx, d).await?),
                    ..Default::default()
                })
            }
            DeploymentAction::DeviceStatus => {
                let d = cx
                    .deployments()
                    .get_deployment(deployment_id(&input)?)
                    .await
                    .map_err(missing)?;
                let status = input
                    .status
                    .as_deref()
                    .map(str::parse::<DeviceRunStatus>)
                    .transpose()
                    .map_err(|e| ToolError::invalid(e.to_string()))?;
                let ring = input.ring.map(|r| i64::from(r) - 1);
                let devices: Vec<DeviceView> = cx
                    .deployments()
                    .deployment_devices(d.id, ring, status)
                    .await?
                    .into_iter()
                    .map(Into::into)
                    .collect();
                Rendered::of(&DeploymentsOutput {
                    showing: Some(devices.len()),
                    devices: Some(devices),
                    deployment: Some(view(cx, d).await?),
                    ..Default::default()
                })
            }
            DeploymentAction::Create => {
                let d = create(cx, &input).await?;
                let v = view(cx, d).await?;
                Rendered::of(&DeploymentsOutput {
                    message: Some(format!(
                        "created draft deployment {} for {} device(s) in {} ring(s); nothing runs until action=start (Tier 3); its runs act as {}",
                        v.name,
                        v.rings.iter().flatten().map(|r| r.devices).sum::<usize>(),
                        v.rings.as_ref().map_or(0, Vec::len),
                        v.owner
                    )),
                    deployment: Some(v),
                    ..Default::default()
                })
            }
            DeploymentAction::Start
            | DeploymentAction::Pause
            | DeploymentAction::Resume
            | DeploymentAction::Cancel => {
                let (control, verb, said) = match input.action {
                    DeploymentAction::Start => (Control::Start, "deployment.start", "started"),
                    DeploymentAction::Pause => (Control::Pause, "deployment.pause", "paused"),
                    DeploymentAction::Resume => (
                        Control::Resume {
                            retry_failed: input.retry_failed.unwrap_or(false),
                        },
                        "deployment.resume",
                        "resumed",
                    ),
                    _ => (Control::Cancel, "deployment.cancel", "cancelled"),
                };
                let d = cx
                    .deployments()
                    .control_deployment(
                        deployment_id(&input)?,
                        control,
                        &cx.actor.to_string(),
                        audit(cx, verb),
                    )
                    .await
                    .map_err(missing)?;
                let next = match d.status {
                    DeploymentStatus::Running => format!(
                        "; the worker sends ring {} as {} (run_script, Tier 3); follow it with action=get or device_status",
                        d.current_ring + 1,
                        d.owner_actor
                    ),
                    _ => String::new(),
                };
                let v = view(cx, d).await?;
                Rendered::of(&DeploymentsOutput {
                    message: Some(format!("deployment {} {said}{next}", v.name)),
                    deployment: Some(v),
                    ..Default::default()
                })
            }
        }
    }
}
