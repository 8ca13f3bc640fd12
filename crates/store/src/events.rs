//! Events agents report (migration 0028): what a device's agent observed — a watched log
//! line matched, a command failed, the agent started — kept per device so alert rules with an
//! event condition can count them over a window.
//!
//! Retention is bounded twice, so a chatty agent cannot grow the table without limit: every
//! insert keeps at most the newest [`MAX_EVENTS_PER_DEVICE`] of its device, and the gateway's
//! hourly sweep deletes events older than [`EVENT_RETENTION`] ([`Store::prune_device_events`]).
//! What an agent sends is trimmed to the wire contract's limits (message, attributes) rather
//! than refused; a source or kind outside the event-name alphabet refuses the batch, naming
//! the event. An event's time is the agent's, but never later than its arrival, so a device
//! clock running ahead cannot keep a rule breaching.

use std::collections::BTreeMap;

use breeze_agent_proto::{
    AgentEvent, MAX_EVENT_ATTRIBUTE_NAME_CHARS, MAX_EVENT_ATTRIBUTE_VALUE_CHARS,
    MAX_EVENT_ATTRIBUTES, MAX_EVENT_MESSAGE_CHARS,
};
use breeze_core::{DeviceId, EventCondition, OrgId, Severity, Timestamp, is_event_name};
use chrono::Duration;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::{
    Result, Store, StoreError,
    sql::{Arg, Sql, Tx, sql},
};

/// The most events kept per device; an insert past it deletes the oldest.
pub const MAX_EVENTS_PER_DEVICE: i64 = 1000;

/// How long events are kept (rules look back at most a day).
pub const EVENT_RETENTION: Duration = Duration::days(7);

/// The most triggering events an alert keeps (the newest).
pub const MAX_TRIGGER_EVENTS: i64 = 10;

/// One stored event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, sqlx::FromRow)]
#[serde(rename_all = "camelCase")]
pub struct DeviceEvent {
    pub id: Uuid,
    pub device_id: DeviceId,
    /// When it happened on the device (never after `received_at`).
    pub at: Timestamp,
    pub received_at: Timestamp,
    pub source: String,
    pub kind: String,
    #[sqlx(try_from = "String")]
    pub severity: Severity,
    pub message: String,
    #[sqlx(json)]
    pub attributes: BTreeMap<String, String>,
}

pub(crate) const EVENT_COLUMNS: &str =
    "id, device_id, at, received_at, source, kind, severity, message, attributes";

/// A severity's place, least (0) to most.
pub(crate) fn severity_rank(s: Severity) -> i64 {
    Severity::ALL.iter().position(|x| *x == s).unwrap_or(0) as i64
}

/// `text` cut to `max` characters, marked with `…` when cut.
fn cut(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut out: String = text.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// The attributes kept: the first [`MAX_EVENT_ATTRIBUTES`] by name whose names fit, values
/// cut to their limit.
fn trim_attributes(attributes: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    attributes
        .iter()
        .filter(|(k, _)| !k.is_empty() && k.chars().count() <= MAX_EVENT_ATTRIBUTE_NAME_CHARS)
        .take(MAX_EVENT_ATTRIBUTES)
        .map(|(k, v)| (k.clone(), cut(v, MAX_EVENT_ATTRIBUTE_VALUE_CHARS)))
        .collect()
}

/// `s` as a `LIKE` pattern matching it anywhere, lowercased, with `\` escaping.
fn contains_pattern(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('%');
    for c in s.to_ascii_lowercase().chars() {
        if matches!(c, '%' | '_' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('%');
    out
}

/// Appends the condition's match (window `(from, now]`, source, kind, severity, message) to a
/// statement over `device_events` whose `$1` is the organization.
pub(crate) fn push_event_match(q: &mut Sql, c: &EventCondition, from: Timestamp, now: Timestamp) {
    let f = q.arg(from);
    let t = q.arg(now);
    q.push(&format!(" AND at > {f} AND at <= {t}"));
    if let Some(source) = &c.source {
        let p = q.arg(source.as_str());
        q.push(&format!(" AND source = {p}"));
    }
    if let Some(kind) = &c.event_kind {
        let p = q.arg(kind.as_str());
        q.push(&format!(" AND kind = {p}"));
    }
    if c.min_severity != Severity::Info {
        let p = q.arg(severity_rank(c.min_severity));
        q.push(&format!(" AND severity_rank >= {p}"));
    }
    if let Some(m) = &c.message_contains {
        let p = q.arg(contains_pattern(m));
        q.push(&format!(" AND LOWER(message) LIKE {p} ESCAPE '\\'"));
    }
}

impl Store {
    /// Stores events a device's agent reported; returns how many. A source or kind that is
    /// not an event name refuses the batch (nothing is written). Messages and attributes are
    /// trimmed to the wire limits, and the device keeps its newest
    /// [`MAX_EVENTS_PER_DEVICE`].
    pub async fn insert_device_events(
        &self,
        device: DeviceId,
        org: OrgId,
        events: &[AgentEvent],
    ) -> Result<u64> {
        for (i, e) in events.iter().enumerate() {
            for (field, value) in [("source", &e.source), ("kind", &e.kind)] {
                if !is_event_name(value) {
                    return Err(StoreError::Invalid(format!(
                        "events[{i}].{field} {value:?} is not an event name (1-64 ASCII \
                         letters, digits, '_', '-', '.', ':')"
                    )));
                }
            }
        }
        if events.is_empty() {
            return Ok(0);
        }
        let now = self.clock.now();
        let mut tx = Tx::begin(&self.pool).await?;
        for e in events {
            let severity: Severity = e
                .severity
                .as_str()
                .parse()
                .map_err(|e: breeze_core::ParseError| StoreError::Invalid(e.to_string()))?;
            sql(format!(
                "INSERT INTO device_events (id, org_id, {}, severity_rank) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
                EVENT_COLUMNS.trim_start_matches("id, ")
            ))
            .bind(Uuid::now_v7())
            .bind(org)
            .bind(device)
            .bind(e.at.min(now))
            .bind(now)
            .bind(e.source.as_str())
            .bind(e.kind.as_str())
            .bind(severity.as_str())
            .bind(cut(&e.message, MAX_EVENT_MESSAGE_CHARS))
            .bind(Arg::json(&trim_attributes(&e.attributes)))
            .bind(severity_rank(severity))
            .execute(&mut tx)
            .await?;
        }
        // Past the cap, the oldest go (rows sharing the boundary's instant stay).
        sql(format!(
            "DELETE FROM device_events WHERE org_id = $1 AND device_id = $2 AND at < \
             (SELECT at FROM device_events WHERE org_id = $1 AND device_id = $2 \
              ORDER BY at DESC, id DESC LIMIT 1 OFFSET {})",
            MAX_EVENTS_PER_DEVICE - 1
        ))
        .bind(org)
        .bind(device)
        .execute(&mut tx)
        .await?;
        tx.commit().await?;
        Ok(events.len() as u64)
    }

    /// Deletes events older than `before` (the gateway's hourly sweep, with
    /// [`EVENT_RETENTION`]).
    pub async fn prune_device_events(&self, before: Timestamp) -> Result<u64> {
        sql("DELETE FROM device_events WHERE at < $1")
            .bind(before)
            .execute(self)
            .await
    }
}

impl crate::OrgTelemetry<'_> {
    /// A device's events, newest first, at most `limit` (1–200).
    pub async fn device_events(&self, device: DeviceId, limit: u32) -> Result<Vec<DeviceEvent>> {
        let limit = i64::from(limit.clamp(1, 200));
        sql(format!(
            "SELECT {EVENT_COLUMNS} FROM device_events WHERE org_id = $1 AND device_id = $2 \
             ORDER BY at DESC, id DESC LIMIT $3"
        ))
        .bind(self.org)
        .bind(device)
        .bind(limit)
        .fetch_all(self)
        .await
    }

    /// The events of `device` that `condition` counts now, newest first, at most
    /// [`MAX_TRIGGER_EVENTS`]: what an alert of the rule is raised on.
    pub async fn matching_events(
        &self,
        condition: &EventCondition,
        device: DeviceId,
    ) -> Result<Vec<DeviceEvent>> {
        let now = self.store.clock.now();
        let from = now - Duration::minutes(i64::from(condition.window_minutes));
        let mut q = sql(format!(
            "SELECT {EVENT_COLUMNS} FROM device_events WHERE org_id = $1"
        ))
        .bind(self.org);
        let d = q.arg(device);
        q.push(&format!(" AND device_id = {d}"));
        push_event_match(&mut q, condition, from, now);
        let l = q.arg(MAX_TRIGGER_EVENTS);
        q.push(&format!(" ORDER BY at DESC, id DESC LIMIT {l}"));
        q.fetch_all(self).await
    }

    /// The events an alert was raised on (empty for alerts of other conditions).
    pub async fn alert_trigger_events(&self, alert: Uuid) -> Result<Vec<DeviceEvent>> {
        #[derive(sqlx::FromRow)]
        struct Row {
            #[sqlx(json(nullable))]
            trigger_events: Option<Vec<DeviceEvent>>,
        }
        let row: Option<Row> =
            sql("SELECT trigger_events FROM alerts WHERE id = $1 AND org_id = $2")
                .bind(alert)
                .bind(self.org)
                .fetch_optional(self)
                .await?;
        Ok(row
            .ok_or(StoreError::NotFound("alert"))?
            .trigger_events
            .unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_escape_like_wildcards() {
        assert_eq!(contains_pattern("Disk 100%_x\\"), "%disk 100\\%\\_x\\\\%");
    }

    #[test]
    fn long_text_is_cut_and_marked() {
        assert_eq!(cut("abcdef", 4), "abc…");
        assert_eq!(cut("abc", 4), "abc");
        let many: BTreeMap<String, String> = (0..40)
            .map(|i| (format!("k{i:02}"), "v".repeat(400)))
            .collect();
        let kept = trim_attributes(&many);
        assert_eq!(kept.len(), MAX_EVENT_ATTRIBUTES);
        assert!(
            kept.values()
                .all(|v| v.chars().count() == MAX_EVENT_ATTRIBUTE_VALUE_CHARS)
        );
    }
}
