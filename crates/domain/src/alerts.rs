//! A person's (or a tool's) handling of alerts: acknowledging, resolving and suppressing an
//! alert, and creating and editing alert rules.
//!
//! `manage_alerts` / `manage_alert_rules` and the dashboard's alerts pages both come here, so
//! each change has one audit action whoever asks (`alert.acknowledge`, `alert.resolve`,
//! `alert.suppress`, `alert_rule.create`, `alert_rule.update`) and one set of checks: the store
//! refuses an invalid condition, a target, channel or alert of another organization (as not
//! found), a move the alert's status does not allow (a conflict). A bulk action is the same
//! call per alert, each with its own record, and reports what became of each.

use breeze_core::{Actor, AuditEvent, Timestamp};
use breeze_store::{Alert, AlertRule, NewRule, OrgAlerts, RuleUpdate, StoreError};
use uuid::Uuid;

use crate::Result;

/// The most alerts one bulk action names.
pub const MAX_BULK: usize = 100;

/// What a person does to an alert.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AlertMove {
    Acknowledge,
    Resolve,
    /// Resolve, and hold the rule back on that device until then.
    Suppress {
        until: Timestamp,
    },
}

impl AlertMove {
    /// The verb, as the audit action names it (`alert.{verb}`).
    pub fn verb(self) -> &'static str {
        match self {
            AlertMove::Acknowledge => "acknowledge",
            AlertMove::Resolve => "resolve",
            AlertMove::Suppress { .. } => "suppress",
        }
    }

    /// The past tense, for messages.
    pub fn done(self) -> &'static str {
        match self {
            AlertMove::Acknowledge => "acknowledged",
            AlertMove::Resolve => "resolved",
            AlertMove::Suppress { .. } => "suppressed",
        }
    }
}

/// One organization's alerts, handled by `actor` (for the request `request_id`).
pub struct AlertDesk<'a> {
    alerts: OrgAlerts<'a>,
    actor: Actor,
    request_id: Option<String>,
}

impl<'a> AlertDesk<'a> {
    pub fn new(alerts: OrgAlerts<'a>, actor: Actor, request_id: Option<String>) -> Self {
        Self {
            alerts,
            actor,
            request_id,
        }
    }

    fn audit(&self, action: &str, resource: &str) -> AuditEvent {
        AuditEvent::new(self.actor.clone(), action, resource).request(self.request_id.clone())
    }

    /// Moves one alert, with an optional note kept in its history.
    pub async fn apply(&self, id: Uuid, m: AlertMove, note: Option<&str>) -> Result<Alert> {
        let note = note.map(str::trim).filter(|n| !n.is_empty());
        let audit = self.audit(&format!("alert.{}", m.verb()), "alert");
        let alerts = self.alerts;
        Ok(match m {
            AlertMove::Acknowledge => {
                alerts
                    .acknowledge_alert(id, &self.actor, note, audit)
                    .await?
            }
            AlertMove::Resolve => alerts.resolve_alert(id, &self.actor, note, audit).await?,
            AlertMove::Suppress { until } => {
                alerts
                    .suppress_alert(id, &self.actor, until, note, audit)
                    .await?
            }
        })
    }

    /// Moves each of `ids` (at most [`MAX_BULK`]) in turn, each its own change and record; what
    /// became of each, in order. An alert not found (or another organization's), or one its
    /// status does not let move, is reported, not fatal; a store failure stops the walk.
    pub async fn apply_many(
        &self,
        ids: &[Uuid],
        m: AlertMove,
        note: Option<&str>,
    ) -> Result<Vec<(Uuid, std::result::Result<Alert, String>)>> {
        if ids.len() > MAX_BULK {
            return Err(StoreError::Invalid(format!(
                "at most {MAX_BULK} alerts at once (asked for {})",
                ids.len()
            ))
            .into());
        }
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            let outcome = match self.apply(*id, m, note).await {
                Ok(a) => Ok(a),
                Err(crate::Error::Store(StoreError::NotFound(_))) => {
                    Err("not found or access denied".to_owned())
                }
                Err(crate::Error::Store(StoreError::Conflict(m) | StoreError::Invalid(m))) => {
                    Err(m)
                }
                Err(e) => return Err(e),
            };
            out.push((*id, outcome));
        }
        Ok(out)
    }

    /// Creates a rule.
    pub async fn create_rule(&self, new: NewRule) -> Result<AlertRule> {
        let audit = self.audit("alert_rule.create", "alert_rule");
        Ok(self.alerts.create_rule(new, audit).await?)
    }

    /// Changes a rule (`None` fields keep their value).
    pub async fn update_rule(&self, id: Uuid, update: RuleUpdate) -> Result<AlertRule> {
        let audit = self.audit("alert_rule.update", "alert_rule");
        Ok(self.alerts.update_rule(id, update, audit).await?)
    }

    /// Deletes a rule, resolving its unresolved alerts; how many it resolved.
    pub async fn delete_rule(&self, id: Uuid) -> Result<u64> {
        let audit = self.audit("alert_rule.delete", "alert_rule");
        Ok(self.alerts.delete_rule(id, &self.actor, audit).await?)
    }
}
