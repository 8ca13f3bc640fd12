//! An alert's life: raised (once per rule and device, after the cooldown), acknowledged,
//! resolved by a person or by the engine, and each notification recorded.

use super::*;

impl crate::OrgAlerts<'_> {
    /// The rule's unresolved alerts.
    pub async fn unresolved_alerts_of_rule(&self, rule: Uuid) -> Result<Vec<Alert>> {
        sql(format!(
            "SELECT {ALERT_COLUMNS} FROM alerts WHERE org_id = $1 AND rule_id = $2 \
             AND status <> 'resolved' ORDER BY id"
        ))
        .bind(self.org)
        .bind(rule)
        .fetch_all(self)
        .await
    }

    /// Raises an alert of `rule` on `device`, unless one is unresolved already or the rule's
    /// cooldown since the last one resolved there has not passed. Returns the new alert.
    pub async fn raise_alert(
        &self,
        rule: &AlertRule,
        device: DeviceId,
        value: Option<f64>,
    ) -> Result<Option<Alert>> {
        self.raise_alert_on(rule, device, value, &[]).await
    }

    /// [`crate::OrgAlerts::raise_alert`], keeping with the alert the events it was raised on (an
    /// event rule's newest matching events; see [`crate::OrgTelemetry::alert_trigger_events`]).
    pub async fn raise_alert_on(
        &self,
        rule: &AlertRule,
        device: DeviceId,
        value: Option<f64>,
        trigger: &[crate::DeviceEvent],
    ) -> Result<Option<Alert>> {
        let now = self.store.clock.now();
        // The rule's cooldown since it last resolved here, and a person's suppression.
        let (last, held): (Option<Timestamp>, Option<Timestamp>) = sql(
            "SELECT MAX(resolved_at), MAX(suppressed_until) FROM alerts WHERE org_id = $1 \
             AND rule_id = $2 AND device_id = $3 AND status = 'resolved'",
        )
        .bind(self.org)
        .bind(rule.id)
        .bind(device)
        .fetch_optional(self)
        .await?
        .unwrap_or((None, None));
        if rule.cooldown_minutes > 0
            && last.is_some_and(|t| t + Duration::minutes(rule.cooldown_minutes) > now)
        {
            return Ok(None);
        }
        if held.is_some_and(|t| t > now) {
            return Ok(None);
        }
        let hostname = self.whole().devices().get_device(device).await?.hostname;
        let title = format!("{}: {}", rule.name, hostname);
        let value_text = value
            .map(|v| format!(" (observed {v:.1})"))
            .unwrap_or_default();
        let message = format!("{}{value_text}", rule.condition.describe());
        let id = Uuid::now_v7();
        let actor = engine_actor();
        let mut tx = Tx::begin_in(self).await?;
        let n = sql(format!(
            "INSERT INTO alerts ({ALERT_COLUMNS}, trigger_events) VALUES ($1, $2, $3, $4, $5, \
             $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16) ON CONFLICT DO NOTHING"
        ))
        .bind(id)
        .bind(self.org)
        .bind(rule.id)
        .bind(device)
        .bind(rule.severity.as_str())
        .bind(AlertStatus::Open.as_str())
        .bind(title.as_str())
        .bind(message.as_str())
        .bind(value)
        .bind(now)
        .bind(None::<Timestamp>)
        .bind(None::<String>)
        .bind(None::<Timestamp>)
        .bind(None::<String>)
        .bind(None::<Timestamp>)
        .bind(if trigger.is_empty() {
            Arg::Json(None)
        } else {
            Arg::json(&trigger)
        })
        .execute(&mut tx)
        .await?;
        if n == 0 {
            drop(tx);
            return Ok(None);
        }
        let mut details =
            serde_json::json!({ "ruleId": rule.id, "deviceId": device, "value": value });
        if !trigger.is_empty() {
            details["events"] = Value::from(trigger.len());
        }
        insert_event(
            &mut tx,
            self.org,
            id,
            now,
            "raised",
            &actor,
            None,
            Some(&details),
        )
        .await?;
        let audit = AuditEvent::new(actor, "alert.raise", "alert")
            .org(self.org)
            .resource(id)
            .details(details);
        audit::insert(&mut tx, &audit, now).await?;
        tx.commit().await?;
        self.get_alert(id).await.map(Some)
    }

    /// Resolves an unresolved alert because its condition cleared. Returns whether it changed.
    pub async fn auto_resolve_alert(&self, id: Uuid, value: Option<f64>) -> Result<bool> {
        let details = serde_json::json!({ "value": value });
        self.transition(
            id,
            Move::Resolve,
            &engine_actor(),
            Some("the condition cleared"),
            "auto_resolved",
            AuditEvent::new(engine_actor(), "alert.auto_resolve", "alert").details(details),
        )
        .await
    }

    /// Acknowledges an open alert, with an optional note. Acknowledging one that is not open
    /// is a conflict.
    pub async fn acknowledge_alert(
        &self,
        id: Uuid,
        actor: &Actor,
        note: Option<&str>,
        audit: AuditEvent,
    ) -> Result<Alert> {
        check_note(note)?;
        if !self
            .transition(id, Move::Acknowledge, actor, note, "acknowledged", audit)
            .await?
        {
            let alert = self.get_alert(id).await?;
            return Err(StoreError::Conflict(format!(
                "the alert is {}, not open",
                alert.status
            )));
        }
        self.get_alert(id).await
    }

    /// Resolves an open or acknowledged alert, with an optional note. Resolving a resolved one
    /// is a conflict.
    pub async fn resolve_alert(
        &self,
        id: Uuid,
        actor: &Actor,
        note: Option<&str>,
        audit: AuditEvent,
    ) -> Result<Alert> {
        check_note(note)?;
        if !self
            .transition(id, Move::Resolve, actor, note, "resolved", audit)
            .await?
        {
            self.get_alert(id).await?;
            return Err(StoreError::Conflict("the alert is already resolved".into()));
        }
        self.get_alert(id).await
    }

    /// Suppresses an open or acknowledged alert until `until`: it is resolved, and its rule
    /// raises nothing more on the device before then (whatever the rule's cooldown). A
    /// resolved alert is a conflict.
    pub async fn suppress_alert(
        &self,
        id: Uuid,
        actor: &Actor,
        until: Timestamp,
        note: Option<&str>,
        audit: AuditEvent,
    ) -> Result<Alert> {
        check_note(note)?;
        let now = self.store.clock.now();
        if until <= now || until > now + Duration::minutes(i64::from(MAX_SUPPRESS_MINUTES)) {
            return Err(StoreError::Invalid(format!(
                "an alert is suppressed for between a minute and {} days",
                MAX_SUPPRESS_MINUTES / 1440
            )));
        }
        let mut audit = audit;
        audit.details = match audit.details {
            Value::Object(mut m) => {
                m.insert("until".into(), Value::String(until.to_rfc3339()));
                Value::Object(m)
            }
            _ => serde_json::json!({ "until": until.to_rfc3339() }),
        };
        if !self
            .transition(id, Move::Suppress(until), actor, note, "suppressed", audit)
            .await?
        {
            self.get_alert(id).await?;
            return Err(StoreError::Conflict("the alert is already resolved".into()));
        }
        self.get_alert(id).await
    }

    /// Moves an alert forward (open → acknowledged → resolved, or straight to resolved) with a
    /// history entry and the audit record, in one transaction; `false` when it was not in a
    /// state that moves there.
    async fn transition(
        &self,
        id: Uuid,
        to: Move,
        actor: &Actor,
        note: Option<&str>,
        event: &str,
        audit: AuditEvent,
    ) -> Result<bool> {
        let now = self.store.clock.now();
        let mut tx = Tx::begin_in(self).await?;
        let statement = match to {
            Move::Acknowledge => {
                "UPDATE alerts SET status = 'acknowledged', acknowledged_at = $1, \
                 acknowledged_by = $2 WHERE id = $3 AND org_id = $4 AND status = 'open'"
            }
            Move::Resolve => {
                "UPDATE alerts SET status = 'resolved', resolved_at = $1, resolved_by = $2 \
                 WHERE id = $3 AND org_id = $4 AND status <> 'resolved'"
            }
            Move::Suppress(_) => {
                "UPDATE alerts SET status = 'resolved', resolved_at = $1, resolved_by = $2, \
                 suppressed_until = $5 WHERE id = $3 AND org_id = $4 AND status <> 'resolved'"
            }
        };
        let mut q = sql(statement)
            .bind(now)
            .bind(actor.to_string())
            .bind(id)
            .bind(self.org);
        if let Move::Suppress(until) = to {
            q = q.bind(until);
        }
        let n = q.execute(&mut tx).await?;
        if n == 0 {
            drop(tx);
            return Ok(false);
        }
        insert_event(&mut tx, self.org, id, now, event, actor, note, None).await?;
        let mut audit = audit.org(self.org).resource(id);
        if let Some(note) = note {
            audit.details = merge_note(audit.details, note);
        }
        audit::insert(&mut tx, &audit, now).await?;
        tx.commit().await?;
        Ok(true)
    }

    /// Records a notification's outcome on an alert (`notified` or `notify_failed`), audited.
    pub async fn record_notification(
        &self,
        alert: Uuid,
        channel: &NotificationChannel,
        outcome: std::result::Result<String, String>,
    ) -> Result<()> {
        let now = self.store.clock.now();
        let actor = engine_actor();
        let (kind, detail, result) = match &outcome {
            Ok(d) => ("notified", d.as_str(), breeze_core::AuditResult::Success),
            Err(e) => (
                "notify_failed",
                e.as_str(),
                breeze_core::AuditResult::Failure,
            ),
        };
        let details = serde_json::json!({
            "channelId": channel.id, "channel": channel.name, "kind": channel.kind,
            "detail": detail,
        });
        let mut tx = Tx::begin_in(self).await?;
        insert_event(
            &mut tx,
            self.org,
            alert,
            now,
            kind,
            &actor,
            None,
            Some(&details),
        )
        .await?;
        let mut audit = AuditEvent::new(actor, "alert.notify", "alert")
            .org(self.org)
            .resource(alert)
            .details(details);
        audit.result = result;
        if let Err(e) = &outcome {
            audit.error_message = Some(e.clone());
        }
        audit::insert(&mut tx, &audit, now).await?;
        tx.commit().await
    }
}

/// Where [`crate::OrgAlerts`]'s transition moves an alert.
#[derive(Debug, Clone, Copy)]
enum Move {
    Acknowledge,
    Resolve,
    /// Resolve, and hold the rule back on the device until then.
    Suppress(Timestamp),
}
