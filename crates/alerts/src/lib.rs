//! Breeze's alert engine: a background worker that evaluates alert rules over the stored
//! metrics and device states, raises and auto-resolves alerts, and notifies channels.
//!
//! Each [`AlertEngine::tick`] walks at most `rules_per_tick` enabled rules (continuing where
//! the last tick stopped, so every rule comes round however many there are) and, for each,
//! asks the store what its condition looks like on the targeted devices
//! (`breeze_store::OrgAlerts::observe_rule`, read-only). A breaching device without an unresolved alert of the
//! rule gets one (`raise_alert` refuses duplicates by a unique index and honours the cooldown);
//! an unresolved alert whose device is clear again is resolved when the rule auto-resolves. A
//! device the store cannot judge (no recent samples) changes nothing. A breach on a device under
//! an open maintenance window that suppresses alerts raises nothing: it is recorded as a
//! suppression of the rule (`breeze_store::OrgMaintenance::record_suppression`, audited) and raised once the window
//! is over, if the condition still holds. Every raise and
//! resolution is told to the rule's channels in tasks of their own ([`notify`]), so no channel
//! delays evaluation; the engine reads the time only through the store's `Clock`.
//!
//! Incremental evaluation: once [`AlertEngine::enable_incremental`] is called (the server does,
//! wiring the gateway's stored reports to [`AlertEngine::devices_reported`]), a device's metric
//! batch evaluates the organization's metric rules for that device at once, and an events batch
//! its event rules — an alert is raised when the report that meets the condition arrives, not
//! at the next tick. The tick then keeps what only time changes (offline rules, event rules'
//! windows running out) and sweeps metric rules every [`FULL_SWEEP_EVERY`]th tick only, as a
//! safety net for reports the listener missed. Both paths judge a (rule, device) pair the same
//! way and change it only through the store's conditional writes (the unique index on
//! unresolved alerts, forward-only transitions), and within one process a rule is evaluated by
//! one path at a time (a lock per rule, sharded), so a breach is raised — and notified — once.
//!
//! Several instances on one database: each evaluates the reports its own agents send (a report
//! arrives at one instance), but the tick runs on one instance of the cluster at a time — the
//! holder of the held lease [`LEASE`] (`Store::hold_lease`), renewed at every tick and taken
//! over by another instance once it went unrenewed for [`LEASE_TICKS`] ticks; the others'
//! ticks stand by ([`TickReport::standby`]). Paths of different instances can still judge the
//! same (rule, device) at the same moment (one's arrival, the other's sweep), so what makes a
//! raise and its notification single is the store, not the lease: the alert is inserted under
//! the unique index of unresolved alerts and only the instance whose insert won notifies;
//! resolving is a conditional update and only the instance whose update changed the row
//! notifies; a suppression is recorded once per window occurrence. The lease saves the
//! duplicated work (every instance sweeping every rule) and keeps the walk through the rules
//! on one cursor.

pub mod notify;
#[cfg(feature = "testing")]
pub mod testing;

use std::{
    collections::HashMap,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use breeze_core::{AlertCondition, DeviceId, OrgId, TelemetryKind};
use breeze_store::{AlertRule, Observation, Observed, Store, StoreError};
use tokio::sync::Mutex;
use tokio_util::task::TaskTracker;
use uuid::Uuid;

pub use notify::{
    AlertNews, ChannelMessage, NotifyConfig, SmtpConfig, SmtpSecurity, is_public, sign,
};

/// With incremental evaluation on, the tick evaluates metric rules only every this many ticks
/// (a safety net for reports the incremental path missed).
pub const FULL_SWEEP_EVERY: u64 = 10;

/// The held lease of the periodic tick in `scheduled_runs`: one instance of a cluster ticks.
pub const LEASE: &str = "alerts.tick";

/// The tick's lease lapses after this many tick periods without a renewal (its holder died or
/// lost the database), and another instance takes the ticking over.
pub const LEASE_TICKS: u32 = 3;

/// How long the incremental path reuses an organization's rule list.
pub const RULE_CACHE_TTL: Duration = Duration::from_secs(5);

/// The most devices one incremental observation of a rule names.
pub const MAX_DEVICES_PER_EVALUATION: usize = 500;

/// Rule locks: a rule is evaluated by one path at a time within a process.
const RULE_LOCK_SHARDS: usize = 64;

/// The engine's pace and its notifications.
#[derive(Debug, Clone)]
pub struct AlertEngineConfig {
    /// How often a tick runs.
    pub tick: Duration,
    /// The most rules one tick evaluates.
    pub rules_per_tick: u32,
    pub notify: NotifyConfig,
}

impl Default for AlertEngineConfig {
    fn default() -> Self {
        Self {
            tick: Duration::from_secs(30),
            rules_per_tick: 500,
            notify: NotifyConfig::default(),
        }
    }
}

/// What one tick did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TickReport {
    pub rules: usize,
    pub raised: Vec<Uuid>,
    pub resolved: Vec<Uuid>,
    /// Breaches not raised because their device was under an open maintenance window (each
    /// recorded once per rule, device, window and occurrence).
    pub suppressed: usize,
    /// Rules whose evaluation failed (logged; the others went on).
    pub failed: usize,
    /// The tick did nothing: another instance of the cluster holds the tick's lease.
    pub standby: bool,
}

/// The alert engine. Cheap to share (`Arc`).
pub struct AlertEngine {
    store: Store,
    config: AlertEngineConfig,
    /// This engine's name as a lease holder (unique per process start).
    instance: String,
    notifier: notify::Notifier,
    /// The last rule evaluated: the next tick starts after it.
    cursor: Mutex<Option<Uuid>>,
    deliveries: TaskTracker,
    /// Metric rules are evaluated as reports arrive (the tick sweeps them rarely).
    incremental: AtomicBool,
    ticks: AtomicU64,
    rule_locks: Vec<Mutex<()>>,
    /// Enabled rules per organization for the incremental path, with when they were read.
    rule_cache: std::sync::Mutex<HashMap<OrgId, CachedRules>>,
}

/// An organization's enabled rules and when they were read.
type CachedRules = (Instant, Arc<Vec<AlertRule>>);

fn is_metric_rule(rule: &AlertRule) -> bool {
    matches!(rule.condition, AlertCondition::Metric { .. })
}

impl AlertEngine {
    pub fn new(store: Store, config: AlertEngineConfig) -> Self {
        Self {
            store,
            notifier: notify::Notifier {
                config: config.notify.clone(),
            },
            config,
            instance: Uuid::now_v7().to_string(),
            cursor: Mutex::new(None),
            deliveries: TaskTracker::new(),
            incremental: AtomicBool::new(false),
            ticks: AtomicU64::new(0),
            rule_locks: (0..RULE_LOCK_SHARDS).map(|_| Mutex::new(())).collect(),
            rule_cache: std::sync::Mutex::new(HashMap::new()),
        }
    }

    /// Turns on incremental evaluation: the caller delivers every stored metrics and events
    /// report to [`AlertEngine::devices_reported`]; the tick then leaves metric rules to it
    /// (sweeping them every [`FULL_SWEEP_EVERY`]th tick).
    pub fn enable_incremental(&self) {
        self.incremental.store(true, Ordering::Relaxed);
    }

    fn rule_lock(&self, rule: Uuid) -> &Mutex<()> {
        let shard = (rule.as_u128() % RULE_LOCK_SHARDS as u128) as usize;
        &self.rule_locks[shard]
    }

    /// The organization's enabled rules, read at most [`RULE_CACHE_TTL`] ago.
    async fn org_rules(&self, org: OrgId) -> Result<Arc<Vec<AlertRule>>, StoreError> {
        if let Some((at, rules)) = self
            .rule_cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&org)
            && at.elapsed() < RULE_CACHE_TTL
        {
            return Ok(rules.clone());
        }
        let rules: Arc<Vec<AlertRule>> = Arc::new(
            self.store
                .org(org)
                .alerts()
                .list_rules()
                .await?
                .into_iter()
                .filter(|r| r.enabled)
                .collect(),
        );
        self.rule_cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(org, (Instant::now(), rules.clone()));
        Ok(rules)
    }

    /// Evaluates, for devices of one organization that just reported, the rules their reports
    /// can change: metrics batches the organization's metric rules, events batches its event
    /// rules — one query per rule for up to [`MAX_DEVICES_PER_EVALUATION`] devices. A rule
    /// that fails is logged and counted; the others go on.
    pub async fn devices_reported(
        &self,
        org: OrgId,
        devices: &[DeviceId],
        kind: TelemetryKind,
    ) -> Result<TickReport, StoreError> {
        let rules = self.org_rules(org).await?;
        let mut report = TickReport::default();
        for rule in rules.iter().filter(|r| match kind {
            TelemetryKind::Metrics => is_metric_rule(r),
            TelemetryKind::Events => matches!(r.condition, AlertCondition::Event(_)),
        }) {
            report.rules += 1;
            let _held = self.rule_lock(rule.id).lock().await;
            for chunk in devices.chunks(MAX_DEVICES_PER_EVALUATION) {
                let outcome = async {
                    let observations = self
                        .store
                        .org(org)
                        .alerts()
                        .observe_rule_for(rule, chunk)
                        .await?;
                    self.apply(rule, &observations, &mut report).await
                }
                .await;
                if let Err(e) = outcome {
                    report.failed += 1;
                    tracing::warn!(rule = %rule.id, error = %e, "incremental alert evaluation failed");
                }
            }
        }
        Ok(report)
    }

    /// This engine's name as the holder of the tick's lease.
    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// How long the tick's lease lasts unrenewed.
    fn lease_ttl(&self) -> chrono::Duration {
        chrono::Duration::from_std(self.config.tick.saturating_mul(LEASE_TICKS))
            .unwrap_or(chrono::Duration::minutes(5))
    }

    /// Evaluates the next slice of rules if this instance holds (or now takes) the tick's
    /// lease; otherwise does nothing and says so ([`TickReport::standby`]). A rule that fails
    /// is logged and skipped; only a failure to take the lease or list the rules fails the
    /// tick.
    pub async fn tick(&self) -> Result<TickReport, StoreError> {
        // Renewed at every tick, so it lapses only when this instance stops ticking. A tick
        // slower than the lease's time to live may overlap another instance's: the store's
        // conditional writes keep that correct, the lease only keeps it rare.
        if !self
            .store
            .hold_lease(LEASE, &self.instance, self.lease_ttl())
            .await?
        {
            return Ok(TickReport {
                standby: true,
                ..TickReport::default()
            });
        }
        let mut cursor = self.cursor.lock().await;
        let mut rules = self
            .store
            .cross_org()
            .alert_rules_after(*cursor, self.config.rules_per_tick)
            .await?;
        if rules.is_empty() && cursor.is_some() {
            // The walk reached the end: start over.
            rules = self
                .store
                .cross_org()
                .alert_rules_after(None, self.config.rules_per_tick)
                .await?;
        }
        *cursor = if rules.len() < self.config.rules_per_tick as usize {
            None
        } else {
            rules.last().map(|r| r.id)
        };
        drop(cursor);
        // With incremental evaluation, metric rules are swept only now and then.
        let n = self.ticks.fetch_add(1, Ordering::Relaxed);
        let sweep_metrics =
            !self.incremental.load(Ordering::Relaxed) || n.is_multiple_of(FULL_SWEEP_EVERY);
        let rules: Vec<AlertRule> = rules
            .into_iter()
            .filter(|r| sweep_metrics || !is_metric_rule(r))
            .collect();
        let mut report = TickReport {
            rules: rules.len(),
            ..TickReport::default()
        };
        for rule in rules {
            if let Err(e) = self.evaluate(&rule, &mut report).await {
                report.failed += 1;
                tracing::warn!(rule = %rule.id, error = %e, "alert rule evaluation failed");
            }
        }
        Ok(report)
    }

    async fn evaluate(&self, rule: &AlertRule, report: &mut TickReport) -> Result<(), StoreError> {
        let _held = self.rule_lock(rule.id).lock().await;
        let observations = self
            .store
            .org(rule.org_id)
            .alerts()
            .observe_rule(rule)
            .await?;
        self.apply(rule, &observations, report).await
    }

    /// Raises and resolves as `observations` say (the caller holds the rule's lock).
    async fn apply(
        &self,
        rule: &AlertRule,
        observations: &[Observation],
        report: &mut TickReport,
    ) -> Result<(), StoreError> {
        if observations.is_empty() {
            return Ok(());
        }
        let org = self.store.org(rule.org_id);
        let unresolved = org.alerts().unresolved_alerts_of_rule(rule.id).await?;
        let open_alert = |d| unresolved.iter().find(|a| a.device_id == d);
        // Breaches that would raise: those under an open maintenance window are held back
        // and recorded instead.
        let would_raise: Vec<_> = observations
            .iter()
            .filter(|o| o.state == Observed::Breaching && open_alert(o.device_id).is_none())
            .map(|o| o.device_id)
            .collect();
        let in_maintenance = org
            .maintenance()
            .maintenance_covering(&would_raise, self.store.clock().now())
            .await?;
        for obs in observations {
            let open = open_alert(obs.device_id);
            match (obs.state, open) {
                (Observed::Breaching, None) => {
                    if let Some((window, occurrence)) = in_maintenance.get(&obs.device_id) {
                        // Recorded (and audited) once per occurrence, whichever path or
                        // instance gets there first; counted in every report that held it back.
                        org.maintenance()
                            .record_suppression(
                                rule.id,
                                obs.device_id,
                                window,
                                *occurrence,
                                obs.value,
                            )
                            .await?;
                        report.suppressed += 1;
                        continue;
                    }
                    // An event rule's alert keeps the events it was raised on.
                    let trigger = match &rule.condition {
                        AlertCondition::Event(c) => {
                            org.telemetry().matching_events(c, obs.device_id).await?
                        }
                        _ => Vec::new(),
                    };
                    // `None` when another path or instance raised it first (the unique index):
                    // that one notifies.
                    if let Some(alert) = org
                        .alerts()
                        .raise_alert_on(rule, obs.device_id, obs.value, &trigger)
                        .await?
                    {
                        report.raised.push(alert.id);
                        self.notify(rule, alert, AlertNews::Raised);
                    }
                }
                (Observed::Clear, Some(alert)) if rule.auto_resolve => {
                    let changed = org.alerts().auto_resolve_alert(alert.id, obs.value).await?;
                    if changed {
                        report.resolved.push(alert.id);
                        let alert = org.alerts().get_alert(alert.id).await?;
                        self.notify(rule, alert, AlertNews::Resolved);
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Starts a delivery task per channel of the rule.
    fn notify(&self, rule: &AlertRule, alert: breeze_store::Alert, news: AlertNews) {
        if rule.channel_ids.is_empty() {
            return;
        }
        let (store, notifier, rule) = (self.store.clone(), self.notifier.clone(), rule.clone());
        let tracker = self.deliveries.clone();
        self.deliveries.spawn(async move {
            let org = store.org(alert.org_id);
            for id in &rule.channel_ids {
                let channel = match org.alerts().get_channel(*id).await {
                    Ok(c) => c,
                    Err(e) => {
                        tracing::warn!(channel = %id, error = %e, "alert channel unavailable");
                        continue;
                    }
                };
                let (store, notifier, rule, alert) =
                    (store.clone(), notifier.clone(), rule.clone(), alert.clone());
                // Channels deliver side by side: a slow one does not hold up the next.
                tracker.spawn(async move {
                    notifier
                        .deliver(&store, &rule, &alert, &channel, news)
                        .await;
                });
            }
        });
    }

    /// Waits until every delivery started so far has finished and been recorded (tests, and
    /// shutdown).
    pub async fn settle(&self) {
        self.deliveries.close();
        self.deliveries.wait().await;
        self.deliveries.reopen();
    }

    /// How often [`AlertEngine::tick`] is meant to run (the server's workers run it).
    pub fn period(&self) -> Duration {
        self.config.tick
    }

    /// Gives the tick's lease up, for a stopping instance: another instance takes the ticking
    /// over at its next tick instead of after the lease lapses. Whether this engine held it.
    pub async fn release_lease(&self) -> Result<bool, StoreError> {
        self.store.release_lease(LEASE, &self.instance).await
    }
}
