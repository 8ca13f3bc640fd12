//! Evaluating a rule: what its condition looks like on the devices it targets, read-only.

use super::*;

impl crate::OrgAlerts<'_> {
    // ---- evaluation ------------------------------------------------------------------------

    /// What `rule`'s condition looks like now on each targeted device that has something to
    /// say (devices without samples in the duration are left out of metric rules). Reads only.
    pub async fn observe_rule(&self, rule: &AlertRule) -> Result<Vec<Observation>> {
        self.observe(rule, None).await
    }

    /// [`crate::OrgAlerts::observe_rule`] for some devices only (those the rule does not target, or
    /// that have nothing to say, are left out): the engine's incremental path, when devices
    /// reported. An empty list observes nothing.
    pub async fn observe_rule_for(
        &self,
        rule: &AlertRule,
        devices: &[DeviceId],
    ) -> Result<Vec<Observation>> {
        if devices.is_empty() {
            return Ok(Vec::new());
        }
        self.observe(rule, Some(devices)).await
    }

    async fn observe(
        &self,
        rule: &AlertRule,
        only: Option<&[DeviceId]>,
    ) -> Result<Vec<Observation>> {
        let now = self.store.clock.now();
        let target = rule.target()?;
        match &rule.condition {
            AlertCondition::Event(c) => {
                let mut q = sql("SELECT id FROM devices WHERE org_id = $1").bind(self.org);
                push_target(&mut q, "id", target);
                push_only(&mut q, "id", only);
                q.push(" ORDER BY id");
                let devices: Vec<(DeviceId,)> = q.fetch_all(self).await?;
                let from = now - Duration::minutes(i64::from(c.window_minutes));
                let mut q = sql("SELECT device_id, COUNT(*) FROM device_events WHERE org_id = $1")
                    .bind(self.org);
                crate::events::push_event_match(&mut q, c, from, now);
                push_target(&mut q, "device_id", target);
                push_only(&mut q, "device_id", only);
                q.push(" GROUP BY device_id");
                let counts: std::collections::HashMap<DeviceId, i64> = q
                    .fetch_all::<(DeviceId, i64)>(self)
                    .await?
                    .into_iter()
                    .collect();
                Ok(devices
                    .into_iter()
                    .map(|(device_id,)| {
                        let n = counts.get(&device_id).copied().unwrap_or(0);
                        Observation {
                            device_id,
                            state: if n >= i64::from(c.count) {
                                Observed::Breaching
                            } else {
                                Observed::Clear
                            },
                            value: Some(n as f64),
                            samples: n,
                        }
                    })
                    .collect())
            }
            AlertCondition::Offline { minutes } => {
                let mut q = sql("SELECT id, status, last_seen_at FROM devices WHERE org_id = $1")
                    .bind(self.org);
                push_target(&mut q, "id", target);
                push_only(&mut q, "id", only);
                q.push(" ORDER BY id");
                let rows: Vec<PresenceRow> = q.fetch_all(self).await?;
                let cutoff = now - Duration::minutes(i64::from(*minutes));
                Ok(rows
                    .into_iter()
                    .map(|r| {
                        let away = r
                            .last_seen_at
                            .map(|t| (now - t).num_seconds() as f64 / 60.0);
                        let state = match r.status {
                            breeze_core::DeviceStatus::Online => Observed::Clear,
                            breeze_core::DeviceStatus::Maintenance => Observed::Unknown,
                            breeze_core::DeviceStatus::Offline => {
                                if r.last_seen_at.is_none_or(|t| t <= cutoff) {
                                    Observed::Breaching
                                } else {
                                    Observed::Unknown
                                }
                            }
                        };
                        Observation {
                            device_id: r.id,
                            state,
                            value: away,
                            samples: 0,
                        }
                    })
                    .collect())
            }
            &AlertCondition::Metric {
                metric,
                comparison,
                threshold,
                duration_minutes,
            } => {
                let duration = Duration::minutes(i64::from(duration_minutes));
                let from = now - duration;
                let expr = level_expr(metric);
                let op = match comparison {
                    Comparison::Above => ">",
                    Comparison::Below => "<",
                };
                if metric.is_rate() {
                    let mut q = sql(format!(
                        "SELECT device_id, COUNT(*) AS samples, MIN(at) AS first_at, \
                         CAST(SUM({expr}) AS DOUBLE PRECISION) AS total \
                         FROM device_metrics WHERE org_id = $1 AND at > $2 AND at <= $3"
                    ))
                    .bind(self.org)
                    .bind(from)
                    .bind(now);
                    push_target(&mut q, "device_id", target);
                    push_only(&mut q, "device_id", only);
                    q.push(" GROUP BY device_id ORDER BY device_id");
                    let rows: Vec<RateRow> = q.fetch_all(self).await?;
                    let seconds = duration.num_seconds().max(1) as f64;
                    Ok(rows
                        .into_iter()
                        .map(|r| {
                            let rate = r.total / seconds;
                            // Samples that begin within one gap of the window's start cover it.
                            let state = if r.first_at > from + SAMPLE_GAP {
                                Observed::Unknown
                            } else if comparison.breaches(rate, threshold) {
                                Observed::Breaching
                            } else {
                                Observed::Clear
                            };
                            Observation {
                                device_id: r.device_id,
                                state,
                                value: Some(rate),
                                samples: r.samples,
                            }
                        })
                        .collect())
                } else {
                    // Samples from one gap before the duration: the breach must have begun at
                    // or before its start (`breach_start`), with no clear sample since
                    // (`last_ok`), and the newest sample must be recent.
                    let mut q = sql(format!(
                        "SELECT device_id, COUNT(*) AS samples, \
                         MAX(CASE WHEN {expr} {op} $4 AND at <= $5 THEN at END) AS breach_start, \
                         MAX(CASE WHEN NOT ({expr} {op} $4) THEN at END) AS last_ok, \
                         MAX(at) AS newest, \
                         CAST(AVG({expr}) AS DOUBLE PRECISION) AS average \
                         FROM device_metrics WHERE org_id = $1 AND at > $2 AND at <= $3"
                    ))
                    .bind(self.org)
                    .bind(from - SAMPLE_GAP)
                    .bind(now)
                    .bind(threshold)
                    .bind(from);
                    push_target(&mut q, "device_id", target);
                    push_only(&mut q, "device_id", only);
                    q.push(" GROUP BY device_id ORDER BY device_id");
                    let rows: Vec<LevelRow> = q.fetch_all(self).await?;
                    let recent = now - SAMPLE_GAP;
                    Ok(rows
                        .into_iter()
                        .map(|r| {
                            let state = if r.newest <= recent {
                                Observed::Unknown
                            } else if r.last_ok == Some(r.newest) {
                                Observed::Clear
                            } else if r
                                .breach_start
                                .is_some_and(|b| r.last_ok.is_none_or(|ok| ok < b))
                            {
                                Observed::Breaching
                            } else {
                                Observed::Unknown
                            };
                            Observation {
                                device_id: r.device_id,
                                state,
                                value: Some(r.average),
                                samples: r.samples,
                            }
                        })
                        .collect())
                }
            }
        }
    }
}
