//! One device at a glance, in one statement: the device row with its site's name, the agent's
//! latest heartbeat, how many context entries are active and the newest metrics sample.
//!
//! `get_device_details` is the read an AI client makes most after listing devices. Asked piece
//! by piece it took nine statements (each reader first proving the device is in the
//! organization); here the device row is that proof once, and everything else joins onto it.
//! The groups (a list) and the parsed inventory (cached per report, see `inventory.rs`) are
//! read separately.

use breeze_agent_proto::UserSession;
use breeze_core::{Device, DeviceId, OrgId, Timestamp};

use crate::{
    DeviceState, MetricPoint, Result, StoreError,
    devices::DEVICE_COLUMNS,
    sql::{Sql, sql},
};

/// A device with what is known about it now; see the module docs.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceOverview {
    pub device: Device,
    /// `None` when the site is gone (a device keeps its site id).
    pub site_name: Option<String>,
    /// The latest heartbeat; `None` before the agent's first report.
    pub state: Option<DeviceState>,
    /// Context entries neither resolved nor expired.
    pub active_context: u64,
    /// The newest raw metrics sample, whatever its age.
    pub latest_metric: Option<MetricPoint>,
}

#[derive(sqlx::FromRow)]
struct OverviewRow {
    #[sqlx(flatten)]
    device: Device,
    site_name: Option<String>,
    state_of: Option<DeviceId>,
    heartbeat_at: Option<Timestamp>,
    uptime_secs: Option<i64>,
    pending_reboot: Option<bool>,
    #[sqlx(json(nullable))]
    logged_in_users: Option<Vec<UserSession>>,
    inventory_at: Option<Timestamp>,
    active_context: i64,
    m_at: Option<Timestamp>,
    m_cpu: Option<f64>,
    m_ram: Option<f64>,
    m_disk: Option<f64>,
    m_rx: Option<i64>,
    m_tx: Option<i64>,
    m_processes: Option<f64>,
}

impl OverviewRow {
    fn into_overview(self) -> DeviceOverview {
        let state = self.state_of.map(|device_id| DeviceState {
            device_id,
            heartbeat_at: self.heartbeat_at,
            uptime_secs: self.uptime_secs,
            pending_reboot: self.pending_reboot.unwrap_or(false),
            logged_in_users: self.logged_in_users.unwrap_or_default(),
            inventory_at: self.inventory_at,
        });
        // A raw sample is a bucket of one: its average and maximum are the sample.
        let latest_metric = self.m_at.map(|at| {
            let (cpu, ram, disk) = (
                self.m_cpu.unwrap_or_default(),
                self.m_ram.unwrap_or_default(),
                self.m_disk.unwrap_or_default(),
            );
            MetricPoint {
                at,
                samples: 1,
                cpu_avg: cpu,
                cpu_max: cpu,
                ram_avg: ram,
                ram_max: ram,
                disk_avg: disk,
                disk_max: disk,
                net_rx_bytes: self.m_rx.unwrap_or_default(),
                net_tx_bytes: self.m_tx.unwrap_or_default(),
                process_avg: self.m_processes.unwrap_or_default(),
            }
        });
        DeviceOverview {
            device: self.device,
            site_name: self.site_name,
            state,
            active_context: u64::try_from(self.active_context).unwrap_or(0),
            latest_metric,
        }
    }
}

impl crate::OrgDevices<'_> {
    /// `device` at a glance (see the module docs); a device of another organization is not
    /// found.
    pub async fn overview(&self, device: DeviceId) -> Result<DeviceOverview> {
        let now = self.store.clock.now();
        // The newest sample's time is found first, through the (device_id, at) primary key, by
        // a subquery on the device's id as bound (not the joined row's): PostgreSQL runs it
        // once, then joins the one sample by key. Correlated with `d.id`, it sat in the join
        // condition and PostgreSQL hashed the device's whole week of samples to find it.
        let row: Option<OverviewRow> = Self::overview_query(device, self.org, now)
            .fetch_optional(self)
            .await?;
        row.map(OverviewRow::into_overview)
            .ok_or(StoreError::NotFound("device"))
    }

    /// The plan of [`Self::overview`], for a test to hold its newest-sample lookup to one
    /// key read.
    #[cfg(feature = "testing")]
    pub async fn explain_overview(&self, device: DeviceId) -> Result<String> {
        Self::overview_query(device, self.org, self.store.clock.now())
            .explain(self)
            .await
    }

    fn overview_query(device: DeviceId, org: OrgId, now: Timestamp) -> Sql {
        sql(format!(
            "SELECT {DEVICE_COLUMNS}, si.name AS site_name, s.device_id AS state_of, \
             s.heartbeat_at, s.uptime_secs, s.pending_reboot, s.logged_in_users, s.inventory_at, \
             (SELECT COUNT(*) FROM device_context c WHERE c.org_id = d.org_id \
              AND c.device_id = d.id AND c.resolved_at IS NULL \
              AND (c.expires_at IS NULL OR c.expires_at > $3)) AS active_context, \
             m.at AS m_at, m.cpu_percent AS m_cpu, m.ram_percent AS m_ram, \
             m.disk_percent AS m_disk, m.net_rx_bytes AS m_rx, m.net_tx_bytes AS m_tx, \
             CAST(m.process_count AS DOUBLE PRECISION) AS m_processes \
             FROM devices d \
             LEFT JOIN sites si ON si.id = d.site_id AND si.org_id = d.org_id \
             LEFT JOIN device_state s ON s.device_id = d.id AND s.org_id = d.org_id \
             LEFT JOIN device_metrics m ON m.device_id = d.id AND m.org_id = d.org_id \
              AND m.at = (SELECT MAX(x.at) FROM device_metrics x WHERE x.device_id = $1) \
             WHERE d.id = $1 AND d.org_id = $2"
        ))
        .bind(device)
        .bind(org)
        .bind(now)
    }
}
