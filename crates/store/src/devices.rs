//! Devices and device-group membership, always within one organization. Listings are answered
//! from the in-memory device directory (`directory.rs`); every write here that changes what a
//! listing shows marks it stale once committed.

use breeze_core::{
    AuditEvent, Device, DeviceGroupId, DeviceId, DeviceStatus, OsFamily, SiteId, Timestamp,
};
use serde::Deserialize;

#[cfg(feature = "testing")]
use crate::sql::{Sql, escape_like};
use crate::{
    Result, StoreError, audit,
    sql::{Arg, Tx, sql},
};

pub(crate) const DEVICE_COLUMNS: &str = "d.id, d.org_id, d.site_id, d.hostname, d.os_family, d.os_name, \
    d.os_version, d.status, d.agent_version, d.last_seen_at, d.tags, d.created_at, \
    d.suspected_clone_of";

/// A device to register.
#[derive(Debug, Clone)]
pub struct NewDevice {
    pub site_id: SiteId,
    pub hostname: String,
    pub os_family: OsFamily,
    pub os_name: String,
    pub os_version: String,
    pub status: DeviceStatus,
    pub agent_version: Option<String>,
    pub last_seen_at: Option<Timestamp>,
    pub tags: Vec<String>,
}

/// Narrows a device listing. Every field is optional.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct DeviceFilter {
    pub status: Option<DeviceStatus>,
    pub os_family: Option<OsFamily>,
    pub site_id: Option<SiteId>,
    pub group_id: Option<DeviceGroupId>,
    /// Case-insensitive substring of the hostname.
    pub search: Option<String>,
    /// Devices carrying every one of these tags.
    #[serde(default)]
    pub tags: Vec<String>,
}

/// The SQL form of a filter, kept for the oracle the device directory is tested against; the
/// directory implements the same semantics in memory.
#[cfg(feature = "testing")]
impl DeviceFilter {
    fn apply(&self, q: &mut Sql) {
        if let Some(status) = self.status {
            let p = q.arg(status.as_str());
            q.push(&format!(" AND d.status = {p}"));
        }
        if let Some(os) = self.os_family {
            let p = q.arg(os.as_str());
            q.push(&format!(" AND d.os_family = {p}"));
        }
        if let Some(site) = self.site_id {
            let p = q.arg(site);
            q.push(&format!(" AND d.site_id = {p}"));
        }
        if let Some(group) = self.group_id {
            let p = q.arg(group);
            q.push(&format!(
                " AND EXISTS (SELECT 1 FROM device_group_members m \
                 WHERE m.device_id = d.id AND m.org_id = d.org_id AND m.group_id = {p})"
            ));
        }
        if let Some(search) = &self.search {
            let p = q.arg(format!("%{}%", escape_like(&search.to_lowercase())));
            q.push(&format!(" AND LOWER(d.hostname) LIKE {p} ESCAPE '\\'"));
        }
        for tag in &self.tags {
            // Tags are a JSON array of strings; match the quoted element.
            let quoted = serde_json::to_string(tag).unwrap_or_default();
            let p = q.arg(format!("%{}%", escape_like(&quoted)));
            q.push(&format!(" AND CAST(d.tags AS TEXT) LIKE {p} ESCAPE '\\'"));
        }
    }
}

impl crate::OrgDevices<'_> {
    /// Registers a device in a site of this organization.
    pub async fn create_device(&self, new: NewDevice, audit: AuditEvent) -> Result<Device> {
        self.whole().tenancy().get_site(new.site_id).await?;
        let now = self.store.clock.now();
        let device = Device {
            id: DeviceId::new(),
            org_id: self.org,
            site_id: new.site_id,
            hostname: new.hostname,
            os_family: new.os_family,
            os_name: new.os_name,
            os_version: new.os_version,
            status: new.status,
            agent_version: new.agent_version,
            last_seen_at: new.last_seen_at,
            tags: new.tags,
            created_at: now,
            suspected_clone_of: None,
        };
        let mut tx = Tx::begin_in(self).await?;
        sql(
            "INSERT INTO devices (id, org_id, site_id, hostname, os_family, os_name, os_version, \
             status, agent_version, last_seen_at, tags, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
        )
        .bind(device.id)
        .bind(self.org)
        .bind(device.site_id)
        .bind(&device.hostname)
        .bind(device.os_family.as_str())
        .bind(&device.os_name)
        .bind(&device.os_version)
        .bind(device.status.as_str())
        .bind(device.agent_version.clone())
        .bind(device.last_seen_at)
        .bind(Arg::json(&device.tags))
        .bind(now)
        .execute(&mut tx)
        .await?;
        audit::insert(&mut tx, &audit.org(self.org).resource(device.id), now).await?;
        let committed = tx.commit().await;
        self.store.devices_changed(self.org);
        committed?;
        Ok(device)
    }

    /// Registers many devices in one transaction with one audit record (`details.count`):
    /// for imports and benchmark seeding. Returns how many were created.
    pub async fn create_devices(&self, devices: Vec<NewDevice>, audit: AuditEvent) -> Result<u64> {
        let now = self.store.clock.now();
        let mut sites = std::collections::HashSet::new();
        for d in &devices {
            if sites.insert(d.site_id) {
                self.whole().tenancy().get_site(d.site_id).await?;
            }
        }
        let mut tx = Tx::begin_in(self).await?;
        for d in &devices {
            sql("INSERT INTO devices (id, org_id, site_id, hostname, os_family, os_name, os_version, \
                 status, agent_version, last_seen_at, tags, created_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)")
            .bind(DeviceId::new())
            .bind(self.org)
            .bind(d.site_id)
            .bind(&d.hostname)
            .bind(d.os_family.as_str())
            .bind(&d.os_name)
            .bind(&d.os_version)
            .bind(d.status.as_str())
            .bind(d.agent_version.clone())
            .bind(d.last_seen_at)
            .bind(Arg::json(&d.tags))
            .bind(now)
            .execute(&mut tx)
            .await?;
        }
        let count = devices.len() as u64;
        let audit = audit
            .org(self.org)
            .details(serde_json::json!({ "count": count }));
        audit::insert(&mut tx, &audit, now).await?;
        let committed = tx.commit().await;
        self.store.devices_changed(self.org);
        committed?;
        // A bulk load changes the table's statistics at once; refresh them so the planner uses
        // the organization indexes (the device directory's loader among them) now rather than
        // after autovacuum gets round to it.
        sql("ANALYZE devices").execute(self).await?;
        Ok(count)
    }

    /// One device of this organization.
    pub async fn get_device(&self, id: DeviceId) -> Result<Device> {
        sql(format!(
            "SELECT {DEVICE_COLUMNS} FROM devices d WHERE d.id = $1 AND d.org_id = $2"
        ))
        .bind(id)
        .bind(self.org)
        .fetch_optional(self)
        .await?
        .ok_or(StoreError::NotFound("device"))
    }

    /// Devices matching `filter`, by hostname: at most `limit` starting at `offset`, plus the
    /// total number that match. Answered from the device directory (see
    /// [`crate::OrgDevices::device_page`]).
    pub async fn list_devices(
        &self,
        filter: &DeviceFilter,
        limit: u32,
        offset: u32,
    ) -> Result<(Vec<Device>, u64)> {
        let page = self.device_page(filter, limit, offset).await?;
        Ok((page.iter().map(|(d, _)| d.clone()).collect(), page.total()))
    }

    /// [`crate::OrgDevices::list_devices`] with each device's site name.
    pub async fn list_devices_with_sites(
        &self,
        filter: &DeviceFilter,
        limit: u32,
        offset: u32,
    ) -> Result<(Vec<(Device, String)>, u64)> {
        let page = self.device_page(filter, limit, offset).await?;
        Ok((
            page.iter()
                .map(|(d, site)| (d.clone(), site.to_owned()))
                .collect(),
            page.total(),
        ))
    }

    /// The listing as the database computes it, bypassing the device directory: the oracle
    /// the directory is tested against (same filters, same order, same total). Ordered by
    /// hostname byte-wise on both backends (`COLLATE "C"` on PostgreSQL), as the directory is.
    #[cfg(feature = "testing")]
    pub async fn list_devices_from_database(
        &self,
        filter: &DeviceFilter,
        limit: u32,
        offset: u32,
    ) -> Result<(Vec<Device>, u64)> {
        let mut q = sql(format!(
            "SELECT {DEVICE_COLUMNS} FROM devices d \
             JOIN sites s ON s.id = d.site_id AND s.org_id = d.org_id WHERE d.org_id = $1"
        ))
        .bind(self.org);
        filter.apply(&mut q);
        let l = q.arg(i64::from(limit));
        let o = q.arg(i64::from(offset));
        let hostname = match self.store.backend() {
            crate::Backend::Sqlite => "d.hostname",
            crate::Backend::Postgres => "d.hostname COLLATE \"C\"",
        };
        q.push(&format!(" ORDER BY {hostname}, d.id LIMIT {l} OFFSET {o}"));
        let rows: Vec<Device> = q.fetch_all(self).await?;
        let mut count = sql("SELECT COUNT(*) FROM devices d WHERE d.org_id = $1").bind(self.org);
        filter.apply(&mut count);
        let total = u64::try_from(count.fetch_scalar::<i64>(self).await?).unwrap_or(0);
        Ok((rows, total))
    }

    /// The hostnames of `ids` (those of this organization; others are simply absent), in one
    /// query: what a page naming a few devices (alerts, approvals) shows.
    pub async fn hostnames(
        &self,
        ids: &[DeviceId],
    ) -> Result<std::collections::HashMap<DeviceId, String>> {
        let mut ids = ids.to_vec();
        ids.sort_unstable();
        ids.dedup();
        let mut out = std::collections::HashMap::new();
        // Bounded statements, whatever the caller passes.
        for chunk in ids.chunks(200) {
            let mut q = sql("SELECT id, hostname FROM devices WHERE org_id = $1").bind(self.org);
            let list: Vec<String> = chunk.iter().map(|d| q.arg(*d)).collect();
            q.push(&format!(" AND id IN ({})", list.join(", ")));
            let rows: Vec<(DeviceId, String)> = q.fetch_all(self).await?;
            out.extend(rows);
        }
        Ok(out)
    }

    /// The `limit` offline devices silent longest (never seen first), with when each was last
    /// seen.
    pub async fn offline_longest(&self, limit: u32) -> Result<Vec<Device>> {
        sql(format!(
            "SELECT {DEVICE_COLUMNS} FROM devices d WHERE d.org_id = $1 AND d.status = $2 \
             ORDER BY CASE WHEN d.last_seen_at IS NULL THEN 0 ELSE 1 END, d.last_seen_at, d.id \
             LIMIT $3"
        ))
        .bind(self.org)
        .bind(breeze_core::DeviceStatus::Offline.as_str())
        .bind(i64::from(limit))
        .fetch_all(self)
        .await
    }

    /// The members of a device group of this organization.
    pub async fn group_members(&self, group: DeviceGroupId) -> Result<Vec<Device>> {
        self.whole().tenancy().get_group(group).await?;
        let filter = DeviceFilter {
            group_id: Some(group),
            ..DeviceFilter::default()
        };
        Ok(self.list_devices(&filter, u32::MAX / 2, 0).await?.0)
    }
}
