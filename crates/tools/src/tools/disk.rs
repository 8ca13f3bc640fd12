//! `analyze_disk_usage` and `disk_cleanup`. A scan is a `disk_scan` command; its stored result
//! is the snapshot both tools read. Cleanup deletes only paths the latest snapshot listed as
//! cleanup candidates, so a caller cannot turn it into a general delete.

use std::collections::HashSet;

use breeze_agent_proto::CommandKind;
use breeze_core::{Device, Permission};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{
    device_command::{CommandView, RunOptions, online_device, require_completed, run, safe_path},
    devices::find_device,
};
use crate::reach::{self, Reach};
use crate::{NoActions, Pin, RateLimit, Registry, Tier, Tool, ToolCx, ToolError, per};

pub(crate) fn register(r: &mut Registry) {
    r.register::<AnalyzeDiskUsage>();
    r.register::<DiskCleanup>();
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct AnalyzeInput {
    #[schemars(length(min = 36, max = 36))]
    device_id: String,
    /// Run a fresh scan now (the device must be online); otherwise the latest snapshot is used
    /// when there is one.
    refresh: Option<bool>,
    /// Where to scan (default `/`).
    #[schemars(length(min = 1, max = 4096))]
    path: Option<String>,
    /// How many of the largest files and directories to list (1-500, default 20).
    #[schemars(range(min = 1, max = 500))]
    top_files: Option<u32>,
    /// Files at least this large (MiB) count as large-file candidates (default 500).
    #[schemars(range(min = 1, max = 1_048_576))]
    large_file_mb: Option<u64>,
}

/// A disk snapshot: the scan's result and when it was taken.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Snapshot {
    device_id: String,
    hostname: String,
    /// The scan command's id.
    snapshot_id: String,
    captured_at: Option<String>,
    /// mounts, largestFiles, largestDirectories, cleanupCandidates.
    #[schemars(with = "serde_json::Map<String, Value>")]
    analysis: Value,
    /// Total bytes of the cleanup candidates.
    estimated_reclaimable_bytes: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
}

fn candidates(analysis: &Value) -> Vec<&Value> {
    analysis
        .get("cleanupCandidates")
        .and_then(Value::as_array)
        .map(|a| a.iter().collect())
        .unwrap_or_default()
}

fn size_of(candidate: &Value) -> u64 {
    candidate
        .get("sizeBytes")
        .and_then(Value::as_u64)
        .unwrap_or(0)
}

async fn latest_snapshot<R: Reach>(
    cx: &ToolCx<'_, R>,
    device: &Device,
) -> Result<Option<(String, Option<String>, Value)>, ToolError> {
    Ok(cx
        .commands()
        .latest_completed_command(device.id, "disk_scan")
        .await?
        .and_then(|c| {
            let at = c.completed_at.map(|t| t.to_rfc3339());
            c.result.map(|r| (c.id.to_string(), at, r))
        }))
}

fn snapshot(device: &Device, id: String, at: Option<String>, analysis: Value) -> Snapshot {
    let estimated = candidates(&analysis).iter().map(|c| size_of(c)).sum();
    Snapshot {
        device_id: device.id.to_string(),
        hostname: device.hostname.clone(),
        snapshot_id: id,
        captured_at: at,
        analysis,
        estimated_reclaimable_bytes: estimated,
        message: None,
    }
}

pub(crate) struct AnalyzeDiskUsage;

impl Tool for AnalyzeDiskUsage {
    const NAME: &'static str = "analyze_disk_usage";
    const TITLE: &'static str = "Analyze disk usage";
    const DESCRIPTION: &'static str = "Where a device's disk space goes: usage per mount, the largest files and directories, and cleanup candidates with sizes. Uses the latest snapshot, or scans now with refresh=true (device online; waits up to 90 seconds).";
    const TIER: Tier = Tier::T1;
    const PERMISSION: Permission = Permission::DevicesRead;
    const RATE_LIMIT: Option<RateLimit> = per(10, 300);
    type Actions = NoActions;
    type Input = AnalyzeInput;
    type Output = Snapshot;
    type Reach = (reach::Commands, reach::Devices, reach::Fleet);

    async fn call(
        cx: &ToolCx<'_, Self::Reach>,
        input: Self::Input,
    ) -> Result<Self::Output, ToolError> {
        let device = find_device(cx, &input.device_id).await?;
        if !input.refresh.unwrap_or(false)
            && let Some((id, at, analysis)) = latest_snapshot(cx, &device).await?
        {
            return Ok(snapshot(&device, id, at, analysis));
        }
        let path = input.path.clone().unwrap_or_else(|| "/".into());
        safe_path("path", &path)?;
        let device = online_device(cx, &input.device_id).await?;
        let kind = CommandKind::DiskScan {
            path,
            top_n: input.top_files.unwrap_or(20),
            large_file_bytes: input.large_file_mb.unwrap_or(500) * 1024 * 1024,
        };
        let mut opts = RunOptions::new(85, 90);
        opts.audit_action = "device.disk_scan";
        let view = require_completed(run(cx, &device, kind, opts).await?)?;
        match view.result {
            Some(analysis) if view.completed() => Ok(snapshot(
                &device,
                view.command_id,
                Some(cx.now().to_rfc3339()),
                analysis,
            )),
            _ => Ok(Snapshot {
                device_id: device.id.to_string(),
                hostname: device.hostname.clone(),
                snapshot_id: view.command_id,
                captured_at: None,
                analysis: Value::Object(Default::default()),
                estimated_reclaimable_bytes: 0,
                message: view.message,
            }),
        }
    }
}

crate::actions! {
    // What `disk_cleanup` does: previewing is Tier 1, deleting Tier 3.
    pub(crate) enum CleanupAction {
        Preview = "preview" => (T1, Read, DevicesRead),
        Execute = "execute" => (T3, Delete, DevicesExecute),
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct CleanupInput {
    #[schemars(length(min = 36, max = 36))]
    device_id: String,
    action: CleanupAction,
    /// execute: the candidate paths to delete (1-200), taken from the preview.
    #[schemars(length(min = 1, max = 200))]
    paths: Option<Vec<String>>,
    /// preview: only these categories (temp, cache, old_logs, large_file).
    #[schemars(length(max = 10))]
    categories: Option<Vec<String>>,
    /// preview: how many candidates to list (1-200, default 100).
    #[schemars(range(min = 1, max = 200))]
    max_candidates: Option<u32>,
}

#[derive(Debug, Default, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CleanupOutput {
    device_id: String,
    snapshot_id: Option<String>,
    /// preview: the candidates, largest first.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<Vec<serde_json::Map<String, Value>>>")]
    candidates: Option<Vec<Value>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    estimated_bytes: Option<u64>,
    /// execute: the agent's report (deleted, skipped, bytesFreed).
    #[serde(skip_serializing_if = "Option::is_none")]
    execution: Option<CommandView>,
    /// execute: requested paths that were not candidates of the latest snapshot.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    rejected: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
}

const NO_SNAPSHOT: &str =
    "No disk analysis snapshot available. Run analyze_disk_usage with refresh=true first.";

pub(crate) struct DiskCleanup;

impl Tool for DiskCleanup {
    const NAME: &'static str = "disk_cleanup";
    const TITLE: &'static str = "Disk cleanup";
    const DESCRIPTION: &'static str = "Free disk space from the latest analyze_disk_usage snapshot: preview lists the cleanup candidates (Tier 1); execute deletes selected candidate paths (Tier 3). Only paths the snapshot listed as candidates can be deleted.";
    const TIER: Tier = Tier::T1;
    const PERMISSION: Permission = Permission::DevicesRead;
    const RATE_LIMIT: Option<RateLimit> = per(3, 600);
    type Actions = CleanupAction;
    type Input = CleanupInput;
    type Output = CleanupOutput;
    type Reach = (reach::Commands, reach::Devices, reach::Fleet);

    /// An execute names the caller's device, online, and paths among the latest snapshot's
    /// candidates; the run is pinned to that snapshot (a newer scan changes what may be deleted).
    async fn precheck(
        cx: &ToolCx<'_, Self::Reach>,
        input: &Self::Input,
    ) -> Result<Option<Pin>, ToolError> {
        if input.action != CleanupAction::Execute {
            return Ok(None);
        }
        let device = find_device(cx, &input.device_id).await?;
        let Some((snapshot_id, _, analysis)) = latest_snapshot(cx, &device).await? else {
            return Err(ToolError::invalid(NO_SNAPSHOT));
        };
        let requested = input
            .paths
            .as_ref()
            .ok_or_else(|| ToolError::invalid("paths is required for execute"))?;
        let all = candidates(&analysis);
        let known: HashSet<&str> = all
            .iter()
            .filter_map(|c| c.get("path").and_then(Value::as_str))
            .collect();
        if !requested
            .iter()
            .any(|p| known.contains(p.as_str()) && safe_path("paths", p).is_ok())
        {
            return Err(ToolError::invalid(
                "No valid cleanup candidates selected from the latest preview set",
            ));
        }
        online_device(cx, &input.device_id).await?;
        Ok(Some(Pin {
            summary: format!("disk snapshot {snapshot_id}"),
            data: serde_json::json!({ "diskSnapshotId": snapshot_id }),
        }))
    }

    async fn call(
        cx: &ToolCx<'_, Self::Reach>,
        input: Self::Input,
    ) -> Result<Self::Output, ToolError> {
        let device = find_device(cx, &input.device_id).await?;
        let Some((snapshot_id, _, analysis)) = latest_snapshot(cx, &device).await? else {
            return Ok(CleanupOutput {
                device_id: device.id.to_string(),
                message: Some(NO_SNAPSHOT.into()),
                ..Default::default()
            });
        };
        let all = candidates(&analysis);
        match input.action {
            CleanupAction::Preview => {
                let wanted = input.categories.clone().unwrap_or_default();
                let mut list: Vec<Value> = all
                    .into_iter()
                    .filter(|c| {
                        wanted.is_empty()
                            || c.get("category")
                                .and_then(Value::as_str)
                                .is_some_and(|k| wanted.iter().any(|w| w == k))
                    })
                    .cloned()
                    .collect();
                list.sort_by_key(|c| std::cmp::Reverse(size_of(c)));
                let estimated = list.iter().map(size_of).sum();
                list.truncate(input.max_candidates.unwrap_or(100) as usize);
                Ok(CleanupOutput {
                    device_id: device.id.to_string(),
                    snapshot_id: Some(snapshot_id),
                    candidates: Some(list),
                    estimated_bytes: Some(estimated),
                    ..Default::default()
                })
            }
            CleanupAction::Execute => {
                let requested = input
                    .paths
                    .clone()
                    .ok_or_else(|| ToolError::invalid("paths is required for execute"))?;
                let known: HashSet<&str> = all
                    .iter()
                    .filter_map(|c| c.get("path").and_then(Value::as_str))
                    .collect();
                let (selected, rejected): (Vec<String>, Vec<String>) = requested
                    .into_iter()
                    .partition(|p| known.contains(p.as_str()) && safe_path("paths", p).is_ok());
                if selected.is_empty() {
                    return Err(ToolError::invalid(
                        "No valid cleanup candidates selected from the latest preview set",
                    ));
                }
                let device = online_device(cx, &input.device_id).await?;
                let mut opts = RunOptions::new(60, 70);
                opts.audit_action = "device.disk_cleanup";
                let view = run(
                    cx,
                    &device,
                    CommandKind::DiskCleanup { paths: selected },
                    opts,
                )
                .await?;
                Ok(CleanupOutput {
                    device_id: device.id.to_string(),
                    snapshot_id: Some(snapshot_id),
                    execution: Some(require_completed(view)?),
                    rejected,
                    ..Default::default()
                })
            }
        }
    }
}
