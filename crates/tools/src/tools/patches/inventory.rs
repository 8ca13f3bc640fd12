//! What the devices can update: `list`, `compliance` and `scan`.

use super::*;

pub(super) async fn list<R: Reach>(
    cx: &ToolCx<'_, R>,
    input: &PatchesInput,
) -> Result<PatchesOutput, ToolError> {
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
    let limit = input.limit.unwrap_or(100).clamp(1, MAX_PATCH_PAGE);
    let filter = PatchFilter {
        device,
        security_only: input.security_only.unwrap_or(false),
        severity: input.severity.map(|s| s.as_str().to_owned()),
        search: input.search.clone(),
        after: input.cursor.as_deref().map(parse_cursor).transpose()?,
        limit: limit + 1,
        ..Default::default()
    };
    let mut rows = cx.patches().list_device_patches(&filter).await?;
    let more = rows.len() > limit as usize;
    rows.truncate(limit as usize);
    let ids: Vec<DeviceId> = {
        let mut v: Vec<DeviceId> = rows.iter().map(|p| p.device_id).collect();
        v.dedup();
        v
    };
    let decisions = Decisions::load(
        cx.config_policies(),
        cx.patches(),
        Some(&ids),
        cx.clock.now(),
    )
    .await?;
    let hostnames = cx.devices().hostnames(&ids).await?;
    let next_cursor = more.then(|| rows.last().map(cursor_of)).flatten();
    let patches: Vec<PatchView> = rows
        .into_iter()
        .map(|p| {
            let (decision, until) = decisions.decide(&p);
            PatchView {
                device_id: p.device_id.to_string(),
                hostname: hostnames.get(&p.device_id).cloned().unwrap_or_default(),
                decision: decision.into(),
                defer_until: until.map(|t| t.to_rfc3339()),
                scanned_at: p.scanned_at.to_rfc3339(),
                name: p.name,
                installed_version: p.installed_version,
                available_version: p.available_version,
                arch: p.arch,
                source: p.source,
                security: p.security,
                severity: p.severity,
                advisory: p.advisory,
            }
        })
        .collect();
    Ok(PatchesOutput {
        showing: Some(patches.len()),
        patches: Some(patches),
        next_cursor,
        ..Default::default()
    })
}

pub(super) async fn compliance<R: Reach>(
    cx: &ToolCx<'_, R>,
    input: &PatchesInput,
) -> Result<PatchesOutput, ToolError> {
    let Compliance {
        devices: mut views,
        summary,
        approvals,
    } = compliance_of(
        cx.devices(),
        cx.patches(),
        cx.config_policies(),
        cx.clock.now(),
        input.device_id.as_deref(),
    )
    .await?;
    views.truncate(input.limit.unwrap_or(500) as usize);
    Ok(PatchesOutput {
        showing: Some(views.len()),
        devices: Some(views),
        summary: Some(summary),
        approvals: Some(approvals.into_iter().take(100).map(Into::into).collect()),
        ..Default::default()
    })
}

/// What [`compliance_of`] finds.
pub(super) struct Compliance {
    /// Each device's compliance (the one device's, when one was named).
    pub(super) devices: Vec<DeviceCompliance>,
    pub(super) summary: ComplianceSummary,
    /// The decisions it judged by, as the store lists them.
    pub(super) approvals: Vec<breeze_store::PatchApproval>,
}

/// Each device's patch compliance (one device's, when `device` names it) and the summary:
/// what `compliance` answers, and what the dashboard's overview shows (see
/// [`super::fleet_patch_compliance`]).
pub(super) async fn compliance_of(
    devices_handle: breeze_store::OrgDevices<'_>,
    patches: OrgPatches<'_>,
    policies: OrgConfigPolicies<'_>,
    now: Timestamp,
    device: Option<&str>,
) -> Result<Compliance, ToolError> {
    let devices = match device {
        Some(d) => vec![
            devices_handle
                .get_device(device_id(d)?)
                .await
                .map_err(store_error)?,
        ],
        None => {
            devices_handle
                .list_devices(&DeviceFilter::default(), 10_000, 0)
                .await?
                .0
        }
    };
    let one = match device {
        Some(_) => devices.first().map(|d| d.id),
        None => None,
    };
    let only: Option<Vec<DeviceId>> = one.map(|d| vec![d]);
    let decisions = Decisions::load(policies, patches, only.as_deref(), now).await?;
    let scans: HashMap<DeviceId, breeze_store::PatchScan> = patches
        .patch_scans()
        .await?
        .into_iter()
        .map(|s| (s.device_id, s))
        .collect();
    // Only a patch some decision names can be decided otherwise than by its device's policy:
    // those are read and decided one by one, as `list` decides them; every other patch is
    // pending or auto-approved by its severity, which the scan's tallies count.
    let named = decisions.named_packages();
    let mut decided: HashMap<DeviceId, Vec<DevicePatch>> = HashMap::new();
    for names in named.chunks(200) {
        let filter = PatchFilter {
            device: one,
            names: names.to_vec(),
            ..Default::default()
        };
        for p in patches.every_device_patch(&filter).await? {
            decided.entry(p.device_id).or_default().push(p);
        }
    }
    let mut top: HashMap<String, usize> = HashMap::new();
    // Devices whose policy approves some undecided patches, by the severities it approves:
    // which packages those are is read once per group, for the most-missing list.
    let mut auto: HashMap<Option<Vec<String>>, Vec<DeviceId>> = HashMap::new();
    let mut views = Vec::new();
    for d in &devices {
        let scan = scans.get(&d.id);
        let tallies = scan.map(|s| s.tallies.as_slice()).unwrap_or_default();
        let count = |f: &dyn Fn(&breeze_store::PatchTally) -> bool| -> usize {
            tallies
                .iter()
                .filter(|t| f(t))
                .map(|t| t.count as usize)
                .sum()
        };
        let mut v = DeviceCompliance {
            device_id: d.id.to_string(),
            hostname: d.hostname.clone(),
            scanned: scan.is_some_and(|s| s.scanned_at.is_some()),
            last_scan_at: scan.and_then(|s| s.scanned_at).map(|t| t.to_rfc3339()),
            manager: scan.and_then(|s| s.manager.clone()),
            available: count(&|_| true),
            security: count(&|t| t.security),
            critical: count(&|t| t.severity.as_deref() == Some("critical")),
            important: count(&|t| t.severity.as_deref() == Some("important")),
            missing_approved: 0,
            pending_security: 0,
            compliant: false,
            reboot_required: scan.is_some_and(|s| s.reboot_required),
            logged_in_users: scan.map(|s| s.logged_in_users.clone()).unwrap_or_default(),
            scan_pending: scan.and_then(|s| s.command_id).map(|c| c.to_string()),
            scan_error: scan.and_then(|s| s.error.clone()),
        };
        // What the policy decides: the tallies less the patches a decision names.
        let mut undecided: HashMap<(Option<&str>, bool), usize> = HashMap::new();
        for t in tallies {
            *undecided
                .entry((t.severity.as_deref(), t.security))
                .or_default() += t.count as usize;
        }
        for p in decided.get(&d.id).into_iter().flatten() {
            if let Some(n) = undecided.get_mut(&(p.severity.as_deref(), p.security)) {
                *n = n.saturating_sub(1);
            }
            let decision = decisions.decide(p).0;
            if approved(decision) {
                v.missing_approved += 1;
                *top.entry(p.name.clone()).or_default() += 1;
            } else if p.security && decision == "pending" {
                v.pending_security += 1;
            }
        }
        let policy = decisions.policy(d.id);
        let mut auto_approved = 0;
        for ((severity, security), n) in undecided {
            if policy.is_some_and(|p| p.auto_approves(severity)) {
                auto_approved += n;
            } else if security {
                v.pending_security += n;
            }
        }
        if let Some(p) = policy.filter(|_| auto_approved > 0) {
            auto.entry(p.auto_severities.clone())
                .or_default()
                .push(d.id);
        }
        v.missing_approved += auto_approved;
        v.compliant = v.scanned && v.missing_approved == 0 && v.pending_security == 0;
        views.push(v);
    }
    let with_patches = scans.values().filter(|s| !s.tallies.is_empty()).count();
    for (severities, ids) in auto {
        // Every device with patches: one statement over the organization, not a list of ids.
        let scope = (ids.len() < with_patches).then_some(ids.as_slice());
        for ((name, severity), n) in patches.available_by_name(scope).await? {
            let approves = match &severities {
                None => true,
                Some(list) => severity.is_some_and(|s| list.contains(&s)),
            };
            if approves && named.binary_search(&name).is_err() {
                *top.entry(name).or_default() += n as usize;
            }
        }
    }
    let scanned = views.iter().filter(|v| v.scanned).count();
    let compliant = views.iter().filter(|v| v.compliant).count();
    let mut top: Vec<(String, usize)> = top.into_iter().collect();
    top.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    top.truncate(10);
    let summary = ComplianceSummary {
        devices: views.len(),
        scanned,
        never_scanned: views.len() - scanned,
        compliant,
        compliance_percent: if scanned == 0 {
            0.0
        } else {
            (compliant as f64 * 1000.0 / scanned as f64).round() / 10.0
        },
        missing_approved: views.iter().map(|v| v.missing_approved).sum(),
        pending_security: views.iter().map(|v| v.pending_security).sum(),
        reboot_required: views.iter().filter(|v| v.reboot_required).count(),
        top_missing: top.into_iter().collect(),
    };
    Ok(Compliance {
        devices: views,
        summary,
        approvals: decisions.approvals,
    })
}

pub(super) async fn scan<R: Reach>(
    cx: &ToolCx<'_, R>,
    input: &PatchesInput,
) -> Result<PatchesOutput, ToolError> {
    let devices = match &input.device_ids {
        Some(ids) => named_devices(cx, ids).await?,
        None => {
            cx.devices()
                .list_devices(
                    &DeviceFilter {
                        status: Some(DeviceStatus::Online),
                        ..Default::default()
                    },
                    MAX_DEVICES as u32,
                    0,
                )
                .await?
                .0
        }
    };
    let mut views = Vec::new();
    let mut waiting = Vec::new();
    for d in &devices {
        if d.status != DeviceStatus::Online && input.device_ids.is_none() {
            continue;
        }
        let submitted = cx
            .fleet()
            .submit(
                NewCommand {
                    device_id: d.id,
                    kind: CommandKind::PatchScan,
                    timeout_secs: SCAN_TIMEOUT_SECS,
                    output_cap_bytes: breeze_agent_proto::DEFAULT_OUTPUT_CAP_BYTES,
                    queue_ttl: chrono::Duration::minutes(15),
                    script: None,
                    created_by: cx.actor.to_string(),
                },
                audit(cx, "device.command", "device_command"),
            )
            .await;
        match submitted {
            Ok(cmd) => {
                cx.patches()
                    .request_patch_scan(
                        d.id,
                        cmd.id,
                        &cx.actor.to_string(),
                        audit(cx, "patch.scan", "device"),
                    )
                    .await
                    .map_err(store_error)?;
                // Only a command pushed to a connected agent is worth waiting for.
                let pushed = cx
                    .commands()
                    .get_command(cmd.id)
                    .await
                    .is_ok_and(|c| c.status != breeze_core::CommandStatus::Pending);
                if pushed {
                    waiting.push((views.len(), cmd.id));
                }
                views.push(ScanView {
                    device_id: d.id.to_string(),
                    hostname: d.hostname.clone(),
                    command_id: Some(cmd.id.to_string()),
                    status: "queued".into(),
                    patches: None,
                    security: None,
                    error: None,
                });
            }
            Err(e) => views.push(ScanView {
                device_id: d.id.to_string(),
                hostname: d.hostname.clone(),
                command_id: None,
                status: "failed".into(),
                patches: None,
                security: None,
                error: Some(gateway_error(e).message),
            }),
        }
    }
    if views.is_empty() {
        return Err(ToolError::invalid("no online device to scan")
            .hint("name deviceIds to queue scans for devices that are offline"));
    }
    // Wait a bounded time for the answers; the rest are recorded when they arrive.
    let waits = waiting
        .iter()
        .map(|(_, id)| cx.fleet().wait(*id, SCAN_WAIT, |_| {}));
    let done = futures::future::join_all(waits).await;
    let scans: HashMap<DeviceId, breeze_store::PatchScan> = cx
        .patches()
        .patch_scans()
        .await?
        .into_iter()
        .map(|s| (s.device_id, s))
        .collect();
    for ((i, _), cmd) in waiting.iter().zip(done) {
        let Ok(cmd) = cmd else { continue };
        let v = &mut views[*i];
        if !cmd.is_terminal() {
            continue;
        }
        if cmd.status == breeze_core::CommandStatus::Completed {
            v.status = "completed".into();
            if let Some(s) = scans.get(&cmd.device_id) {
                v.patches = Some(s.patch_count);
                v.security = Some(s.security_count);
            }
        } else {
            v.status = "failed".into();
            v.error = cmd
                .error
                .or_else(|| Some(format!("the scan {}", cmd.status)));
        }
    }
    let completed = views.iter().filter(|v| v.status == "completed").count();
    Ok(PatchesOutput {
        message: Some(format!(
            "{completed} of {} scans answered; the others are recorded when their agents answer (list and compliance show them)",
            views.len()
        )),
        showing: Some(views.len()),
        scans: Some(views),
        ..Default::default()
    })
}
