//! What is decided about a package: `approve`, `decline`, `defer` and `bulk_approve`.

use super::*;

pub(super) async fn decide<R: Reach>(
    cx: &ToolCx<'_, R>,
    input: &PatchesInput,
) -> Result<PatchesOutput, ToolError> {
    let (decision, verb) = match input.action {
        PatchAction::Approve => (PatchDecision::Approved, "approve"),
        PatchAction::Decline => (PatchDecision::Declined, "decline"),
        _ => (PatchDecision::Deferred, "defer"),
    };
    let name = required(&input.package_name, "packageName", verb)?;
    let defer_until = match (&input.defer_until, decision) {
        (Some(raw), PatchDecision::Deferred) => Some(
            chrono::DateTime::parse_from_rfc3339(raw)
                .map_err(|_| {
                    ToolError::invalid(format!(
                        "deferUntil: {raw:?} is not an RFC 3339 date and time"
                    ))
                })?
                .with_timezone(&chrono::Utc),
        ),
        (None, PatchDecision::Deferred) => {
            return Err(ToolError::invalid("deferUntil is required for defer"));
        }
        // Fields of other actions are ignored, as everywhere.
        (_, _) => None,
    };
    let a = cx
        .patches()
        .decide_patch(
            NewPatchDecision {
                package_name: name.clone(),
                version: input.version.clone(),
                policy_id: policy_id(input)?,
                decision,
                defer_until,
                note: input.note.clone(),
                decided_by: cx.actor.to_string(),
            },
            audit(cx, &format!("patch.{verb}"), "patch_approval"),
        )
        .await
        .map_err(store_error)?;
    Ok(PatchesOutput {
        message: Some(format!(
            "{} {}{}",
            name,
            a.decision.as_str(),
            a.policy_id
                .map(|p| format!(" for the devices of policy {p}"))
                .unwrap_or_else(|| " organization-wide".into())
        )),
        approvals: Some(vec![a.into()]),
        ..Default::default()
    })
}

pub(super) async fn bulk_approve<R: Reach>(
    cx: &ToolCx<'_, R>,
    input: &PatchesInput,
) -> Result<PatchesOutput, ToolError> {
    let names: Vec<String> = match package_names(input)? {
        Some(n) if !n.is_empty() => n,
        Some(_) => {
            return Err(ToolError::invalid(
                "packageNames: name at least one package",
            ));
        }
        None => {
            if input.security_only != Some(true) && input.severity.is_none() {
                return Err(ToolError::invalid(
                    "bulk_approve needs packageNames, or securityOnly=true or a severity to \
                     approve every available update that matches",
                ));
            }
            // One past the cap is enough to refuse a selection that is too large.
            let names = cx
                .patches()
                .available_package_names(
                    &PatchFilter {
                        security_only: input.security_only.unwrap_or(false),
                        severity: input.severity.map(|s| s.as_str().to_owned()),
                        ..Default::default()
                    },
                    breeze_store::MAX_PATCH_PACKAGES + 1,
                )
                .await?;
            if names.is_empty() {
                return Err(ToolError::invalid(
                    "no available update matches; scan first, or name packageNames",
                ));
            }
            names
        }
    };
    if names.len() > breeze_store::MAX_PATCH_PACKAGES {
        return Err(ToolError::invalid(format!(
            "at most {} packages at once",
            breeze_store::MAX_PATCH_PACKAGES
        )));
    }
    let policy = policy_id(input)?;
    let mut approvals = Vec::new();
    for n in &names {
        let a = cx
            .patches()
            .decide_patch(
                NewPatchDecision {
                    package_name: n.clone(),
                    version: None,
                    policy_id: policy,
                    decision: PatchDecision::Approved,
                    defer_until: None,
                    note: input.note.clone(),
                    decided_by: cx.actor.to_string(),
                },
                audit(cx, "patch.approve", "patch_approval"),
            )
            .await
            .map_err(store_error)?;
        approvals.push(ApprovalView::from(a));
    }
    Ok(PatchesOutput {
        message: Some(format!("{} packages approved", approvals.len())),
        showing: Some(approvals.len()),
        approvals: Some(approvals),
        ..Default::default()
    })
}
