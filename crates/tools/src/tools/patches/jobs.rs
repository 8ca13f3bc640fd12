//! Install and rollback jobs: the plan an approver sees, sending each device's part (now, or
//! when the server's dispatcher finds the job's window open), `install`/`rollback`, and
//! `results`.

use super::*;

pub(super) async fn plan<R: Reach>(
    cx: &ToolCx<'_, R>,
    input: &PatchesInput,
) -> Result<Plan, ToolError> {
    let rollback = input.action == PatchAction::Rollback;
    let action = if rollback { "rollback" } else { "install" };
    let ids = required(&input.device_ids, "deviceIds", action)?;
    if ids.is_empty() {
        return Err(ToolError::invalid(format!(
            "deviceIds: name at least one device to {action}"
        )));
    }
    let devices = named_devices(cx, ids).await?;
    let names = package_names(input)?;
    if let Some(v) = &input.version {
        breeze_store::check_package_text("version", v)?;
    }
    let window = match (input.when.unwrap_or(WhenArg::Now), &input.window_id) {
        (WhenArg::Now, _) => None,
        (WhenArg::MaintenanceWindow, None) => {
            return Err(
                ToolError::invalid("windowId is required for when=maintenance_window")
                    .hint("manage_maintenance_windows action=list shows the windows"),
            );
        }
        (WhenArg::MaintenanceWindow, Some(w)) => {
            let id = Uuid::parse_str(w).map_err(|_| ToolError::not_found(WINDOW_NOT_FOUND))?;
            let w = cx.maintenance().get_window(id).await.map_err(store_error)?;
            if !w.enabled {
                return Err(ToolError::invalid(format!(
                    "windowId: the maintenance window {:?} is disabled",
                    w.name
                )));
            }
            Some((w.id, w.name))
        }
    };
    let only: Vec<DeviceId> = devices.iter().map(|d| d.id).collect();
    let decisions = Decisions::load(
        cx.config_policies(),
        cx.patches(),
        Some(&only),
        cx.clock.now(),
    )
    .await?;
    let mut out = Plan {
        kind: action,
        reboot_policy: input.reboot_policy.unwrap_or(RebootArg::Never).as_str(),
        reboot_with_users: input.reboot_with_users.unwrap_or(false),
        window,
        devices: Vec::new(),
        skipped: Vec::new(),
    };
    for device in &devices {
        let delay = decisions
            .devices
            .get(&device.id)
            .and_then(|p| p.reboot_delay_minutes)
            .unwrap_or(5);
        let packages: Vec<Value> = if rollback {
            let names = names
                .as_ref()
                .ok_or_else(|| ToolError::invalid("packageNames is required for rollback"))?;
            if input.version.is_some() && names.len() != 1 {
                return Err(ToolError::invalid(
                    "version: give it with exactly one package in packageNames",
                ));
            }
            let previous = cx.patches().previous_versions(device.id, names).await?;
            let mut list = Vec::new();
            for n in names {
                match input.version.clone().or_else(|| previous.get(n).cloned()) {
                    Some(v) => list.push(json!({ "name": n, "version": v })),
                    None => out.skipped.push(format!(
                        "{} on {}: no earlier version is recorded (give version)",
                        n, device.hostname
                    )),
                }
            }
            list
        } else {
            let available = cx
                .patches()
                .every_device_patch(&PatchFilter {
                    device: Some(device.id),
                    ..Default::default()
                })
                .await?;
            let mut list = Vec::new();
            match &names {
                Some(names) => {
                    for n in names {
                        match available.iter().find(|p| &p.name == n) {
                            None => out.skipped.push(format!(
                                "{n} on {}: no update offered in its last scan",
                                device.hostname
                            )),
                            Some(p) => match decisions.decide(p) {
                                ("declined", _) => out
                                    .skipped
                                    .push(format!("{n} on {}: declined", device.hostname)),
                                ("deferred", until) => out.skipped.push(format!(
                                    "{n} on {}: deferred until {}",
                                    device.hostname,
                                    until.map(|t| t.to_rfc3339()).unwrap_or_default()
                                )),
                                _ => list.push(Value::String(n.clone())),
                            },
                        }
                    }
                }
                None => {
                    for p in &available {
                        if approved(decisions.decide(p).0) {
                            list.push(Value::String(p.name.clone()));
                        }
                    }
                    if list.is_empty() {
                        out.skipped.push(format!(
                            "{}: no approved update is available",
                            device.hostname
                        ));
                    }
                }
            }
            list
        };
        if !packages.is_empty() {
            out.devices.push(PlanDevice {
                device_id: device.id,
                hostname: device.hostname.clone(),
                packages: Value::Array(packages),
                reboot_delay_minutes: delay,
            });
        }
    }
    if out.devices.is_empty() {
        let why = out.skipped.join("; ");
        return Err(ToolError::invalid(format!("nothing to {action}: {why}"))
            .hint("scan, then approve what should be installed (or name packages)"));
    }
    Ok(out)
}

/// Queues a job's command for one device part and records it on the part.
async fn send_part(
    patches: OrgPatches<'_>,
    fleet: &breeze_gateway::OrgFleet<'_>,
    job: &PatchJob,
    device: DeviceId,
    packages: &Value,
    delay: u32,
    audit: AuditEvent,
) -> Result<Option<Uuid>, ToolError> {
    let reboot = reboot_mode(&job.reboot_policy);
    let kind = if job.kind == PatchJobKind::Rollback {
        let packages: Vec<PackageVersion> =
            serde_json::from_value(packages.clone()).map_err(|e| {
                ToolError::new(crate::ErrorCode::Internal, format!("rollback plan: {e}"))
            })?;
        CommandKind::PatchRollback {
            packages,
            reboot,
            reboot_with_users: job.reboot_with_users,
            reboot_delay_minutes: delay,
        }
    } else {
        let packages: Vec<String> = serde_json::from_value(packages.clone()).map_err(|e| {
            ToolError::new(crate::ErrorCode::Internal, format!("install plan: {e}"))
        })?;
        CommandKind::PatchInstall {
            packages,
            reboot,
            reboot_with_users: job.reboot_with_users,
            reboot_delay_minutes: delay,
        }
    };
    let sent = fleet
        .submit(
            NewCommand {
                device_id: device,
                kind,
                timeout_secs: INSTALL_TIMEOUT_SECS,
                output_cap_bytes: breeze_agent_proto::DEFAULT_OUTPUT_CAP_BYTES,
                queue_ttl: chrono::Duration::minutes(QUEUE_TTL_MINUTES),
                script: None,
                created_by: job.requested_by.clone(),
            },
            audit,
        )
        .await;
    match sent {
        Ok(cmd) => {
            patches.patch_part_sent(job.id, device, Ok(cmd.id)).await?;
            Ok(Some(cmd.id))
        }
        Err(e) => {
            let message = gateway_error(e).message;
            patches
                .patch_part_sent(job.id, device, Err(message))
                .await?;
            Ok(None)
        }
    }
}

/// Sends every still-scheduled part of one organization's job (its maintenance window is
/// open): each device's command is queued as whoever asked for the job (the install was
/// approved then). The server's patch-job dispatcher calls it for each due job.
pub async fn start_scheduled_patch_job(
    patches: OrgPatches<'_>,
    fleet: &breeze_gateway::OrgFleet<'_>,
    org_id: OrgId,
    job: &PatchJob,
) -> Result<(), ToolError> {
    let (_, parts) = patches.get_patch_job(job.id).await?;
    for part in parts
        .into_iter()
        .filter(|p| p.status == breeze_core::PatchPartStatus::Scheduled)
    {
        let audit = AuditEvent::new(
            breeze_core::Actor::system("patches"),
            "patch.job.dispatch",
            "patch_job",
        )
        .org(org_id)
        .resource(job.id);
        send_part(
            patches,
            fleet,
            job,
            part.device_id,
            &part.packages,
            5,
            audit,
        )
        .await?;
    }
    Ok(())
}

pub(super) async fn results<R: Reach>(
    cx: &ToolCx<'_, R>,
    input: &PatchesInput,
) -> Result<PatchesOutput, ToolError> {
    if let Some(raw) = &input.job_id {
        let id = Uuid::parse_str(raw).map_err(|_| ToolError::not_found(JOB_NOT_FOUND))?;
        let (job, parts) = cx.patches().get_patch_job(id).await.map_err(store_error)?;
        return Ok(PatchesOutput {
            job: Some(JobView::new(job, Some(parts))),
            ..Default::default()
        });
    }
    let device = match &input.device_id {
        Some(d) => Some(
            cx.devices()
                .get_device(device_id(d)?)
                .await
                .map_err(store_error)?
                .id,
        ),
        None => None,
    };
    let jobs: Vec<JobView> = cx
        .patches()
        .list_patch_jobs(input.limit.unwrap_or(20).min(100))
        .await?
        .into_iter()
        .map(|j| JobView::new(j, None))
        .collect();
    let history = match device {
        Some(d) => Some(
            cx.patches()
                .patch_history(Some(d), None, 100)
                .await?
                .into_iter()
                .map(|h| HistoryView {
                    device_id: h.device_id.to_string(),
                    job_id: h.job_id.map(|j| j.to_string()),
                    package_name: h.package_name,
                    action: h.action,
                    from_version: h.from_version,
                    to_version: h.to_version,
                    status: h.status.to_string(),
                    error: h.error,
                    at: h.at.to_rfc3339(),
                })
                .collect(),
        ),
        None => None,
    };
    Ok(PatchesOutput {
        showing: Some(jobs.len()),
        jobs: Some(jobs),
        history,
        ..Default::default()
    })
}

pub(super) async fn install<R: Reach>(
    cx: &ToolCx<'_, R>,
    input: &PatchesInput,
) -> Result<PatchesOutput, ToolError> {
    let plan = plan(cx, input).await?;
    let kind = if input.action == PatchAction::Rollback {
        PatchJobKind::Rollback
    } else {
        PatchJobKind::Install
    };
    let job = cx
        .patches()
        .create_patch_job(
            NewPatchJob {
                kind,
                reboot_policy: plan.reboot_policy.to_owned(),
                reboot_with_users: plan.reboot_with_users,
                window: plan.window.clone(),
                devices: plan
                    .devices
                    .iter()
                    .map(|d| (d.device_id, d.packages.clone()))
                    .collect(),
                requested_by: cx.actor.to_string(),
            },
            audit(cx, &format!("patch.{}", kind.as_str()), "patch_job"),
        )
        .await
        .map_err(store_error)?;
    let message = if plan.window.is_some() {
        format!(
            "{} job {} waits for maintenance window {:?}; follow it with action=results",
            kind.as_str(),
            job.id,
            plan.window
                .as_ref()
                .map(|w| w.1.clone())
                .unwrap_or_default()
        )
    } else {
        for d in &plan.devices {
            send_part(
                cx.patches(),
                cx.fleet(),
                &job,
                d.device_id,
                &d.packages,
                d.reboot_delay_minutes,
                audit(cx, "device.command", "device_command"),
            )
            .await?;
        }
        format!(
            "{} job {} sent to {} device(s); follow it with action=results jobId={}",
            kind.as_str(),
            job.id,
            plan.devices.len(),
            job.id
        )
    };
    let (job, parts) = cx.patches().get_patch_job(job.id).await?;
    Ok(PatchesOutput {
        message: Some(message),
        job: Some(JobView::new(job, Some(parts))),
        skipped: (!plan.skipped.is_empty()).then_some(plan.skipped),
        ..Default::default()
    })
}
