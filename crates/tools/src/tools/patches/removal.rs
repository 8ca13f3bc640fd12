//! `remove`: taking named installed packages off named devices, answered per device.

use super::*;

/// The most packages one removal names.
const MAX_REMOVE_PACKAGES: usize = 20;
/// How long a removal may run on the agent, and how long the call waits for it.
const REMOVE_TIMEOUT_SECS: u32 = 900;

/// What one device's `PackageRemove` came to.
fn removal_view(view: CommandView) -> RemovalView {
    let report: Option<breeze_agent_proto::PatchInstallReport> = view
        .result
        .clone()
        .and_then(|r| serde_json::from_value(r).ok());
    let packages: Option<Vec<RemovedPackage>> = report.as_ref().map(|r| {
        r.packages
            .iter()
            .map(|p| RemovedPackage {
                name: p.name.clone(),
                status: p.status.to_string(),
                from_version: p.from_version.clone(),
                error: p.error.clone(),
            })
            .collect()
    });
    let status = match (&view.status, &packages) {
        (s, _) if !s.is_terminal() => "running",
        (breeze_core::CommandStatus::Completed, Some(ps))
            if ps
                .iter()
                .all(|p| matches!(p.status.as_str(), "removed" | "not_installed")) =>
        {
            "succeeded"
        }
        _ => "failed",
    };
    let error = match status {
        "failed" => packages
            .iter()
            .flatten()
            .find_map(|p| p.error.clone())
            .or(view.error.clone())
            .or(view.stderr.clone())
            .or_else(|| Some(format!("the removal ended {}", view.status))),
        "running" => view.message.clone(),
        _ => None,
    };
    RemovalView {
        device_id: view.device_id,
        hostname: view.hostname,
        status: status.into(),
        command_id: Some(view.command_id),
        manager: report.map(|r| r.manager),
        packages,
        error,
    }
}

/// A removal's devices (this organization's) and packages (names, never options), checked.
pub(super) async fn removal<R: Reach>(
    cx: &ToolCx<'_, R>,
    input: &PatchesInput,
) -> Result<(Vec<breeze_core::Device>, Vec<String>), ToolError> {
    let ids = input
        .device_ids
        .as_ref()
        .filter(|d| !d.is_empty())
        .ok_or_else(|| ToolError::invalid("deviceIds is required for remove"))?;
    let packages = input
        .package_names
        .clone()
        .filter(|p| !p.is_empty())
        .ok_or_else(|| ToolError::invalid("packageNames is required for remove"))?;
    if packages.len() > MAX_REMOVE_PACKAGES {
        return Err(ToolError::invalid(format!(
            "packageNames: a removal names at most {MAX_REMOVE_PACKAGES} packages"
        )));
    }
    if let Some(bad) = packages.iter().find(|p| !package_name_ok(p)) {
        return Err(ToolError::invalid(format!(
            "packageNames: {bad:?} is not a package name (letters, digits and .+-_:~, not starting with -)"
        )));
    }
    let mut devices = Vec::new();
    for raw in ids {
        devices.push(
            cx.devices()
                .get_device(device_id(raw)?)
                .await
                .map_err(store_error)?,
        );
    }
    Ok((devices, packages))
}

/// `remove`: the named installed packages off the named devices, through each agent's package
/// manager; waits for every device's answer (they run side by side).
pub(super) async fn remove<R: Reach>(
    cx: &ToolCx<'_, R>,
    input: &PatchesInput,
) -> Result<PatchesOutput, ToolError> {
    let (devices, packages) = removal(cx, input).await?;
    let opts = || RunOptions {
        audit_action: "patch.remove",
        ..RunOptions::new(REMOVE_TIMEOUT_SECS, u64::from(REMOVE_TIMEOUT_SECS))
    };
    let runs = devices.iter().map(|d| {
        let kind = CommandKind::PackageRemove {
            packages: packages.clone(),
        };
        async move {
            if d.status != DeviceStatus::Online {
                return RemovalView {
                    device_id: d.id.to_string(),
                    hostname: d.hostname.clone(),
                    status: "offline".into(),
                    command_id: None,
                    manager: None,
                    packages: None,
                    error: Some(format!("{} is {}; nothing was sent", d.hostname, d.status)),
                };
            }
            match run(cx, d, kind, opts()).await {
                Ok(view) => removal_view(view),
                Err(e) => RemovalView {
                    device_id: d.id.to_string(),
                    hostname: d.hostname.clone(),
                    status: "failed".into(),
                    command_id: None,
                    manager: None,
                    packages: None,
                    error: Some(e.message),
                },
            }
        }
    });
    let removals = futures::future::join_all(runs).await;
    let ok = removals.iter().filter(|r| r.status == "succeeded").count();
    Ok(PatchesOutput {
        message: Some(format!(
            "removal of {} finished on {ok} of {} device(s)",
            packages.join(", "),
            removals.len()
        )),
        showing: Some(removals.len()),
        removals: Some(removals),
        ..Default::default()
    })
}

/// A package name an agent takes as an argument: 1–200 of letters, digits and `.+-_:~`, not
/// starting with `-` (never an option).
fn package_name_ok(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 200
        && !s.starts_with('-')
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || ".+-_:~".contains(c))
}
