//! The device directory: an in-memory, organization-scoped read model of the device listing.
//!
//! Listing devices (`query_devices`, `breeze://devices`, the REST listing, group members) is the
//! hottest read of the product and must not cost a database round trip. The directory keeps,
//! per organization, an immutable snapshot ([`DeviceSnapshot`]) of every device of the
//! organization with its site name and group memberships, sorted by `(hostname, id)` byte-wise
//! (SQLite's binary collation, the order the SQL listing has always had), with position lists
//! per status, OS family, site and group. A filter on one indexed field answers its total in
//! O(1) and its page in O(limit + offset); other filters scan the smallest indexed candidate
//! list.
//!
//! The database stays the source of truth; a snapshot is a cache with these freshness rules
//! (ages are measured with the store's [`Clock`](breeze_core::Clock)):
//!
//! 1. **Structural writes made through this store** — creating, enrolling or re-enrolling a
//!    device, an inventory report that changes its hostname or OS, a status transition (a
//!    heartbeat bringing an offline device online, the offline sweep), group membership added
//!    or removed, a group deleted — mark the organization's snapshot stale after their
//!    transaction commits (`Store::devices_changed`). The next reader rebuilds it before
//!    answering, so a change made in this process is seen by the very next listing.
//!    Rebuilds are single-flight: concurrent readers of a stale organization wait for the same
//!    rebuild. A rebuild remembers the generation it started from, so a write that commits
//!    while it loads leaves the new snapshot stale and the next reader rebuilds again.
//! 2. **Heartbeats** (last seen, agent version, without a status change) mark the snapshot
//!    soft-stale (`Store::presence_changed`): readers keep the current snapshot and, once it is
//!    `presence_lag` old (default 1 s), one background rebuild runs. Presence in listings lags
//!    heartbeats by about `presence_lag`, and a fleet heartbeating continuously costs at most
//!    one rebuild per `presence_lag` per organization.
//! 3. **Writes by another process** (the `breeze devices seed` CLI on the same SQLite file,
//!    another server on the same PostgreSQL) are not signalled. A snapshot older than `max_age`
//!    (default 5 s) is rebuilt in the background while readers keep using it
//!    (stale-while-revalidate); one older than `max_stale` (default 60 s, for organizations
//!    read rarely) is rebuilt before answering. No listing is older than `max_stale`, and a
//!    listing read continuously is at most about `max_age` behind other processes.
//! 4. **Memory**: a snapshot not read for `idle_ttl` (default 10 minutes) is dropped by a sweep
//!    that runs, at most every `idle_ttl / 10`, on directory use.
//!
//! At most one background rebuild per organization runs at a time, and none runs while a
//! reader rebuilds. A failed rebuild is reported to the reader that waited for it (or logged,
//! in the background) and retried by the next reader. Writes that bypass the store (raw SQL in
//! tests, manual repairs) are picked up like another process's.
//!
//! Filter semantics are those of the SQL listing: exact status, OS family, site and group;
//! `search` is a case-insensitive substring of the hostname (Unicode lower-casing, as
//! PostgreSQL's `LOWER`; hostnames are ASCII in practice); `tags` keeps devices carrying every
//! listed tag, compared exactly (the SQL `LIKE` on SQLite also folded ASCII case).

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex, MutexGuard, PoisonError,
        atomic::{AtomicI64, AtomicU64, Ordering},
    },
    time::Duration,
};

use breeze_core::{Device, DeviceGroupId, DeviceId, DeviceStatus, OrgId, OsFamily, SiteId};

use crate::{
    DeviceFilter, Result, Store, StoreError,
    devices::DEVICE_COLUMNS,
    sql::{Tx, sql},
};

/// How fresh the device directory keeps its snapshots (the `directory` module's docs say how).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirectorySettings {
    /// How long heartbeat-only changes (last seen, agent version) may take to show in listings.
    pub presence_lag: Duration,
    /// Age after which a snapshot is refreshed in the background (stale-while-revalidate), to
    /// pick up writes made by other processes.
    pub max_age: Duration,
    /// Age after which a snapshot is no longer served: the reader waits for a rebuild.
    pub max_stale: Duration,
    /// A snapshot not read for this long is dropped.
    pub idle_ttl: Duration,
}

impl Default for DirectorySettings {
    fn default() -> Self {
        Self {
            presence_lag: Duration::from_secs(1),
            max_age: Duration::from_secs(5),
            max_stale: Duration::from_secs(60),
            idle_ttl: Duration::from_secs(600),
        }
    }
}

impl DirectorySettings {
    /// Sets how long heartbeat-only changes may take to show.
    #[must_use]
    pub fn with_presence_lag(mut self, lag: Duration) -> Self {
        self.presence_lag = lag;
        self
    }

    /// Sets the age after which a snapshot is refreshed in the background.
    #[must_use]
    pub fn with_max_age(mut self, age: Duration) -> Self {
        self.max_age = age;
        self
    }

    /// Sets the age after which a snapshot is rebuilt before answering.
    #[must_use]
    pub fn with_max_stale(mut self, age: Duration) -> Self {
        self.max_stale = age;
        self
    }

    /// Sets how long an unread snapshot is kept.
    #[must_use]
    pub fn with_idle_ttl(mut self, ttl: Duration) -> Self {
        self.idle_ttl = ttl;
        self
    }
}

/// Microseconds, saturating (the clock's resolution).
fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The settings in clock microseconds.
#[derive(Debug, Clone, Copy)]
struct Limits {
    presence_lag: i64,
    max_age: i64,
    max_stale: i64,
    idle_ttl: i64,
}

/// The directory of every organization read recently. Shared by a store's clones.
pub(crate) struct DeviceDirectory {
    limits: Limits,
    slots: Mutex<HashMap<OrgId, Arc<Slot>>>,
    /// When idle snapshots were last looked for (clock microseconds).
    last_sweep: AtomicI64,
}

/// One organization's place in the directory.
struct Slot {
    state: Mutex<SlotState>,
    /// Held by whoever rebuilds the snapshot (single flight); never a std lock across `await`.
    rebuild: tokio::sync::Mutex<()>,
    /// When the snapshot was last read (clock microseconds).
    last_read: AtomicI64,
    /// How many snapshots were loaded (for tests).
    rebuilds: AtomicU64,
}

#[derive(Default)]
struct SlotState {
    snapshot: Option<Arc<DeviceSnapshot>>,
    /// Moved on by every structural write; a snapshot built from an older value is stale.
    structure: u64,
    /// Moved on by every heartbeat; a snapshot built from an older value is soft-stale.
    presence: u64,
    /// A background rebuild is scheduled or running.
    refreshing: bool,
}

/// What a reader does with the current state.
enum Plan {
    Serve(Arc<DeviceSnapshot>),
    ServeAndRefresh(Arc<DeviceSnapshot>),
    Rebuild,
}

impl DeviceDirectory {
    pub(crate) fn new(settings: DirectorySettings) -> Self {
        Self {
            limits: Limits {
                presence_lag: micros(settings.presence_lag),
                max_age: micros(settings.max_age),
                max_stale: micros(settings.max_stale),
                idle_ttl: micros(settings.idle_ttl),
            },
            slots: Mutex::new(HashMap::new()),
            last_sweep: AtomicI64::new(i64::MIN),
        }
    }

    fn existing(&self, org: OrgId) -> Option<Arc<Slot>> {
        lock(&self.slots).get(&org).cloned()
    }

    /// Marks `org`'s snapshot stale: the next reader rebuilds it before answering.
    fn structure_changed(&self, org: OrgId) {
        if let Some(slot) = self.existing(org) {
            lock(&slot.state).structure += 1;
        }
    }

    /// Marks every snapshot stale (signals from other servers may have been missed).
    fn all_changed(&self) {
        let slots: Vec<Arc<Slot>> = lock(&self.slots).values().cloned().collect();
        for slot in slots {
            lock(&slot.state).structure += 1;
        }
    }

    /// Marks `org`'s snapshot soft-stale: refreshed in the background after `presence_lag`.
    fn presence_changed(&self, org: OrgId) {
        if let Some(slot) = self.existing(org) {
            lock(&slot.state).presence += 1;
        }
    }

    /// The slot of `org` for a reader, created when missing; sweeps idle slots now and then.
    fn slot_for_read(&self, org: OrgId, now: i64) -> Arc<Slot> {
        let mut slots = lock(&self.slots);
        let last = self.last_sweep.load(Ordering::Relaxed);
        if now.saturating_sub(last) >= self.limits.idle_ttl / 10 {
            self.last_sweep.store(now, Ordering::Relaxed);
            let idle_before = now.saturating_sub(self.limits.idle_ttl);
            // A slot someone holds (a reader, a writer, a background rebuild) is in use.
            slots.retain(|_, s| {
                Arc::strong_count(s) > 1 || s.last_read.load(Ordering::Relaxed) > idle_before
            });
        }
        let slot = slots.entry(org).or_insert_with(|| {
            Arc::new(Slot {
                state: Mutex::new(SlotState::default()),
                rebuild: tokio::sync::Mutex::new(()),
                last_read: AtomicI64::new(now),
                rebuilds: AtomicU64::new(0),
            })
        });
        slot.last_read.store(now, Ordering::Relaxed);
        Arc::clone(slot)
    }

    fn plan(&self, state: &mut SlotState, now: i64) -> Plan {
        let Some(snap) = &state.snapshot else {
            return Plan::Rebuild;
        };
        if snap.structure != state.structure {
            return Plan::Rebuild;
        }
        // A clock set back makes a snapshot look young; it is still refreshed within max_age
        // of the clock catching up.
        let age = now.saturating_sub(snap.loaded_at).max(0);
        if age >= self.limits.max_stale {
            return Plan::Rebuild;
        }
        let due = age >= self.limits.max_age
            || (snap.presence != state.presence && age >= self.limits.presence_lag);
        if due && !state.refreshing {
            state.refreshing = true;
            Plan::ServeAndRefresh(Arc::clone(snap))
        } else {
            Plan::Serve(Arc::clone(snap))
        }
    }

    /// The snapshot of `org` to answer a listing from, rebuilt first when the rules say so.
    async fn snapshot(&self, store: &Store, org: OrgId) -> Result<Arc<DeviceSnapshot>> {
        let now = store.clock.now().timestamp_micros();
        let slot = self.slot_for_read(org, now);
        let first = self.plan(&mut lock(&slot.state), now);
        match first {
            Plan::Serve(snap) => return Ok(snap),
            Plan::ServeAndRefresh(snap) => {
                spawn_refresh(store, org, slot);
                return Ok(snap);
            }
            Plan::Rebuild => {}
        }
        let _flight = slot.rebuild.lock().await;
        // Whoever held the flight may have rebuilt it already.
        let now = store.clock.now().timestamp_micros();
        let second = self.plan(&mut lock(&slot.state), now);
        match second {
            Plan::Serve(snap) => Ok(snap),
            Plan::ServeAndRefresh(snap) => {
                spawn_refresh(store, org, Arc::clone(&slot));
                Ok(snap)
            }
            Plan::Rebuild => slot.rebuild_now(store, org).await,
        }
    }
}

impl Slot {
    /// Loads a new snapshot and installs it. The caller holds `self.rebuild`.
    async fn rebuild_now(&self, store: &Store, org: OrgId) -> Result<Arc<DeviceSnapshot>> {
        // Read the generations and the time before the load: a write committing during the
        // load moves them on and leaves this snapshot stale rather than lost.
        let (structure, presence) = {
            let state = lock(&self.state);
            (state.structure, state.presence)
        };
        let loaded_at = store.clock.now().timestamp_micros();
        self.rebuilds.fetch_add(1, Ordering::Relaxed);
        let snap = Arc::new(
            DeviceSnapshot::load(store, org)
                .await?
                .stamped(structure, presence, loaded_at),
        );
        lock(&self.state).snapshot = Some(Arc::clone(&snap));
        Ok(snap)
    }
}

/// Clears the slot's `refreshing` flag however the background rebuild ends.
struct RefreshDone(Arc<Slot>);

impl Drop for RefreshDone {
    fn drop(&mut self) {
        lock(&self.0.state).refreshing = false;
    }
}

/// Rebuilds `org`'s snapshot in the background (the slot is already marked `refreshing`).
fn spawn_refresh(store: &Store, org: OrgId, slot: Arc<Slot>) {
    let done = RefreshDone(slot);
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return; // no runtime to run on: the next reader tries again
    };
    let store = store.clone();
    runtime.spawn(async move {
        let slot = Arc::clone(&done.0);
        let _flight = slot.rebuild.lock().await;
        if let Err(e) = slot.rebuild_now(&store, org).await {
            tracing::warn!(org = %org, error = %e, "device directory refresh failed");
        }
        drop(done);
    });
}

impl Store {
    /// Marks `org`'s device listing stale after a committed structural write (a device
    /// created, renamed, moved between states or groups): the next listing reloads it.
    pub(crate) fn devices_changed(&self, org: OrgId) {
        self.directory.structure_changed(org);
        self.publish(crate::Signal::DevicesChanged { org });
    }

    /// Applies another server's structural change to `org` (the bus), or, with `None`, a
    /// possibly missed one to every organization.
    pub(crate) fn devices_changed_elsewhere(&self, org: Option<OrgId>) {
        match org {
            Some(org) => self.directory.structure_changed(org),
            None => self.directory.all_changed(),
        }
    }

    /// Marks `org`'s device listing soft-stale after a heartbeat: listings show it within the
    /// directory's `presence_lag`.
    pub(crate) fn presence_changed(&self, org: OrgId) {
        self.directory.presence_changed(org);
    }

    /// This store with a fresh device directory using `settings` (the pool and clock are
    /// shared with `self`; the directory is not).
    #[must_use]
    pub fn with_directory_settings(mut self, settings: DirectorySettings) -> Store {
        self.directory = Arc::new(DeviceDirectory::new(settings));
        self
    }

    /// How many organizations the device directory holds a snapshot of (for tests).
    #[cfg(feature = "testing")]
    pub fn directory_snapshots(&self) -> usize {
        lock(&self.directory.slots)
            .values()
            .filter(|s| lock(&s.state).snapshot.is_some())
            .count()
    }

    /// How many snapshots the device directory has loaded for `org` since it last dropped the
    /// organization (for tests).
    #[cfg(feature = "testing")]
    pub fn directory_rebuilds(&self, org: OrgId) -> u64 {
        self.directory
            .existing(org)
            .map_or(0, |s| s.rebuilds.load(Ordering::Relaxed))
    }
}

/// One device in a snapshot.
struct Entry {
    device: Device,
    site_name: Arc<str>,
    /// The hostname lower-cased, for `search`.
    hostname_lower: String,
}

/// An immutable snapshot of one organization's devices, sorted by `(hostname, id)` byte-wise,
/// with position lists (ascending) per indexed field.
pub(crate) struct DeviceSnapshot {
    entries: Vec<Entry>,
    by_status: HashMap<DeviceStatus, Vec<u32>>,
    by_os: HashMap<OsFamily, Vec<u32>>,
    by_site: HashMap<SiteId, Vec<u32>>,
    by_group: HashMap<DeviceGroupId, Vec<u32>>,
    structure: u64,
    presence: u64,
    loaded_at: i64,
}

impl DeviceSnapshot {
    /// Reads every device of `org` with its site name, and the organization's group
    /// memberships, in one read transaction in the organization's row-security scope.
    async fn load(store: &Store, org: OrgId) -> Result<DeviceSnapshot> {
        #[derive(sqlx::FromRow)]
        struct Row {
            #[sqlx(flatten)]
            device: Device,
            site_name: String,
        }
        let mut tx = Tx::begin_in(&store.org(org)).await?;
        let rows: Vec<Row> = sql(format!(
            "SELECT {DEVICE_COLUMNS}, s.name AS site_name \
             FROM devices d JOIN sites s ON s.id = d.site_id AND s.org_id = d.org_id \
             WHERE d.org_id = $1"
        ))
        .bind(org)
        .fetch_all(&mut tx)
        .await?;
        let members: Vec<(DeviceGroupId, DeviceId)> =
            sql("SELECT m.group_id, m.device_id FROM device_group_members m WHERE m.org_id = $1")
                .bind(org)
                .fetch_all(&mut tx)
                .await?;
        tx.commit().await?;
        Self::build(rows.into_iter().map(|r| (r.device, r.site_name)), members)
    }

    /// Sorts and indexes the devices.
    fn build(
        devices: impl Iterator<Item = (Device, String)>,
        members: Vec<(DeviceGroupId, DeviceId)>,
    ) -> Result<DeviceSnapshot> {
        let mut site_names: HashMap<String, Arc<str>> = HashMap::new();
        let mut entries: Vec<Entry> = devices
            .map(|(device, site)| {
                let site_name = Arc::clone(
                    site_names
                        .entry(site)
                        .or_insert_with_key(|name| Arc::from(name.as_str())),
                );
                Entry {
                    hostname_lower: device.hostname.to_lowercase(),
                    device,
                    site_name,
                }
            })
            .collect();
        // `String`'s order is byte-wise: SQLite's binary collation. Ids are unique.
        entries.sort_unstable_by(|a, b| {
            a.device
                .hostname
                .cmp(&b.device.hostname)
                .then_with(|| a.device.id.cmp(&b.device.id))
        });
        if u32::try_from(entries.len()).is_err() {
            return Err(StoreError::Invalid(
                "too many devices in one organization for the device directory".into(),
            ));
        }
        let mut by_status: HashMap<DeviceStatus, Vec<u32>> = HashMap::new();
        let mut by_os: HashMap<OsFamily, Vec<u32>> = HashMap::new();
        let mut by_site: HashMap<SiteId, Vec<u32>> = HashMap::new();
        let mut position: HashMap<DeviceId, u32> = HashMap::with_capacity(entries.len());
        for (pos, e) in (0u32..).zip(&entries) {
            by_status.entry(e.device.status).or_default().push(pos);
            by_os.entry(e.device.os_family).or_default().push(pos);
            by_site.entry(e.device.site_id).or_default().push(pos);
            position.insert(e.device.id, pos);
        }
        let mut by_group: HashMap<DeviceGroupId, Vec<u32>> = HashMap::new();
        for (group, device) in members {
            // A membership whose device the load did not see (written in between) is left
            // for the next rebuild, which that write has asked for.
            if let Some(&pos) = position.get(&device) {
                by_group.entry(group).or_default().push(pos);
            }
        }
        for list in by_group.values_mut() {
            list.sort_unstable();
            list.dedup();
        }
        Ok(DeviceSnapshot {
            entries,
            by_status,
            by_os,
            by_site,
            by_group,
            structure: 0,
            presence: 0,
            loaded_at: 0,
        })
    }

    fn stamped(mut self, structure: u64, presence: u64, loaded_at: i64) -> Self {
        self.structure = structure;
        self.presence = presence;
        self.loaded_at = loaded_at;
        self
    }

    /// The positions of the devices matching `filter` in `[offset, offset + limit)`, and how
    /// many match in all.
    fn select(&self, filter: &DeviceFilter, limit: u32, offset: u32) -> (Vec<u32>, u64) {
        let (limit, offset) = (limit as usize, offset as usize);
        const NONE: &[u32] = &[];
        let indexed = [
            filter
                .status
                .map(|s| self.by_status.get(&s).map_or(NONE, Vec::as_slice)),
            filter
                .os_family
                .map(|o| self.by_os.get(&o).map_or(NONE, Vec::as_slice)),
            filter
                .site_id
                .map(|s| self.by_site.get(&s).map_or(NONE, Vec::as_slice)),
            filter
                .group_id
                .map(|g| self.by_group.get(&g).map_or(NONE, Vec::as_slice)),
        ];
        let mut candidates: Option<&[u32]> = None;
        let mut indexed_count = 0;
        for list in indexed.into_iter().flatten() {
            indexed_count += 1;
            if candidates.is_none_or(|c| list.len() < c.len()) {
                candidates = Some(list);
            }
        }
        let search = filter.search.as_deref().map(str::to_lowercase);
        let residual = indexed_count > 1 || search.is_some() || !filter.tags.is_empty();
        if !residual {
            return match candidates {
                Some(list) => (window(list, offset, limit).to_vec(), list.len() as u64),
                None => {
                    let n = self.entries.len();
                    let end = offset.saturating_add(limit).min(n);
                    let page = (offset.min(n)..end)
                        .filter_map(|p| u32::try_from(p).ok())
                        .collect();
                    (page, n as u64)
                }
            };
        }
        let mut total = 0usize;
        let mut page = Vec::new();
        let mut consider = |pos: u32| {
            if self.matches(pos, filter, search.as_deref()) {
                if total >= offset && page.len() < limit {
                    page.push(pos);
                }
                total += 1;
            }
        };
        match candidates {
            Some(list) => list.iter().copied().for_each(&mut consider),
            None => (0..self.entries.len())
                .filter_map(|p| u32::try_from(p).ok())
                .for_each(&mut consider),
        }
        (page, total as u64)
    }

    /// Whether the device at `pos` passes every part of `filter` (`search` lower-cased).
    fn matches(&self, pos: u32, filter: &DeviceFilter, search: Option<&str>) -> bool {
        let Some(e) = self.entries.get(pos as usize) else {
            return false;
        };
        let d = &e.device;
        filter.status.is_none_or(|s| d.status == s)
            && filter.os_family.is_none_or(|o| d.os_family == o)
            && filter.site_id.is_none_or(|s| d.site_id == s)
            && filter.group_id.is_none_or(|g| {
                self.by_group
                    .get(&g)
                    .is_some_and(|m| m.binary_search(&pos).is_ok())
            })
            && search.is_none_or(|s| e.hostname_lower.contains(s))
            && filter.tags.iter().all(|t| d.tags.contains(t))
    }
}

/// `list[offset..offset + limit]`, clamped to the list.
fn window(list: &[u32], offset: usize, limit: usize) -> &[u32] {
    let start = offset.min(list.len());
    let end = offset.saturating_add(limit).min(list.len());
    &list[start..end]
}

/// One page of a device listing, read from the device directory: the devices (with their site
/// names) borrowed from the snapshot they were found in, and the total that match.
pub struct DevicePage {
    snapshot: Arc<DeviceSnapshot>,
    positions: Vec<u32>,
    total: u64,
}

impl std::fmt::Debug for DevicePage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DevicePage")
            .field("len", &self.positions.len())
            .field("total", &self.total)
            .finish()
    }
}

impl DevicePage {
    /// How many devices match the filter in all.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// How many devices are on this page.
    pub fn len(&self) -> usize {
        self.positions.len()
    }

    /// Whether this page is empty.
    pub fn is_empty(&self) -> bool {
        self.positions.is_empty()
    }

    /// The page's devices with their site names, in listing order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&Device, &str)> + '_ {
        self.positions.iter().map(|&p| {
            // Positions come from this snapshot's own index, so they are in range.
            let e = &self.snapshot.entries[p as usize];
            (&e.device, &*e.site_name)
        })
    }
}

impl crate::OrgDevices<'_> {
    /// Devices matching `filter` in listing order (hostname, then id, byte-wise): at most
    /// `limit` starting at `offset`, and the total that match. Answered from the device
    /// directory (see its freshness rules) without copying the devices.
    pub async fn device_page(
        &self,
        filter: &DeviceFilter,
        limit: u32,
        offset: u32,
    ) -> Result<DevicePage> {
        let snapshot = self.store.directory.snapshot(self.store, self.org).await?;
        let (positions, total) = snapshot.select(filter, limit, offset);
        Ok(DevicePage {
            snapshot,
            positions,
            total,
        })
    }
}
