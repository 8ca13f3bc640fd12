//! Device inventories as readers use them: parsed once per report and shared.
//!
//! An agent's inventory is one JSON document per device (hundreds of packages, tens of
//! kilobytes), written when the agent reports it (daily, or when something changes) and read by
//! every "tell me about this device" call. Parsing it on each read cost more than the rest of a
//! tool call together, so readers go through a cache of parsed inventories, keyed by device and
//! validated against the row's `inventory_at`:
//!
//! - a read asks the database only for `inventory_at` (a few bytes, organization-scoped like
//!   every `OrgStore` statement) and answers from the cache when the cached copy was parsed from
//!   the report stamped with that instant; otherwise it reads and parses the document, and
//!   caches it under the stamp the same statement returned;
//! - a report written through this store drops the device's entry after it commits, so even a
//!   clock that does not move (tests) never serves an old copy here; another server's report
//!   carries a new stamp (the writer's clock at the time of the report), which misses;
//! - a hit needs the organization-scoped lookup of the stamp first, so the cache (keyed by a
//!   globally unique device id) never answers for a device of another organization;
//! - memory is bounded by the number of packages held ([`MAX_CACHED_PACKAGES`]); the oldest
//!   entries are dropped first.
//!
//! Packages are kept sorted the way every reader pages them (case-insensitive name, then name,
//! then version) and deduplicated, with their lower-cased names beside them for filtering.

use std::{
    collections::{HashMap, VecDeque},
    sync::{Arc, Mutex, MutexGuard, PoisonError},
};

use breeze_agent_proto::{Inventory, Package};
use breeze_core::{DeviceId, Timestamp};
use serde_json::Value;

use crate::{Result, StoreError, sql::sql};

/// Most packages (summed over cached inventories) held in memory: about 30 MB at the ~100
/// bytes a package takes here, a few hundred devices of a typical Linux server's ~900.
pub const MAX_CACHED_PACKAGES: usize = 262_144;

/// A device's latest inventory, parsed.
#[derive(Debug)]
pub struct DeviceInventory {
    /// When the report was stored (the server's clock).
    pub reported_at: Timestamp,
    /// The inventory without its package list (see [`DeviceInventory::packages`]); `None`
    /// when the stored document no longer parses (an older agent's shape).
    pub inventory: Option<Inventory>,
    /// The stored document when it does not parse as an inventory, to show as it is.
    pub unparsed: Option<Value>,
    /// Installed packages, sorted by case-insensitive name, then name, then version, without
    /// duplicates; `None` when the agent's platform cannot list them (or the list does not
    /// parse).
    packages: Option<Box<[Package]>>,
    /// The lower-cased name of each package, in the same order.
    lowered: Box<[String]>,
}

impl DeviceInventory {
    /// Parses a stored inventory document.
    pub(crate) fn parse(reported_at: Timestamp, doc: Value) -> DeviceInventory {
        use serde::Deserialize as _;
        // The package list is parsed on its own, so a document whose other parts an older
        // agent shaped differently still lists its packages (and the other way round).
        let packages: Option<Vec<Package>> = doc
            .get("packages")
            .and_then(|v| Vec::<Package>::deserialize(v).ok());
        let (inventory, unparsed) = match Inventory::deserialize(&doc) {
            // The sorted copy below is the one kept.
            Ok(inv) => (
                Some(Inventory {
                    packages: None,
                    ..inv
                }),
                None,
            ),
            Err(_) => (None, Some(doc)),
        };
        let listed = packages.is_some();
        let mut keyed: Vec<(String, Package)> = packages
            .unwrap_or_default()
            .into_iter()
            .map(|p| (p.name.to_lowercase(), p))
            .collect();
        keyed.sort_by(|(la, a), (lb, b)| (la, &a.name, &a.version).cmp(&(lb, &b.name, &b.version)));
        keyed.dedup_by(|(_, a), (_, b)| a == b);
        let (lowered, sorted): (Vec<String>, Vec<Package>) = keyed.into_iter().unzip();
        DeviceInventory {
            reported_at,
            inventory,
            unparsed,
            packages: listed.then(|| sorted.into_boxed_slice()),
            lowered: lowered.into_boxed_slice(),
        }
    }

    /// The installed packages (sorted, deduplicated), or `None` when not listed.
    pub fn packages(&self) -> Option<&[Package]> {
        self.packages.as_deref()
    }

    /// How many packages are listed (`None` when not listed).
    pub fn package_count(&self) -> Option<usize> {
        self.packages.as_ref().map(|p| p.len())
    }

    /// The lower-cased names, parallel to [`DeviceInventory::packages`].
    pub(crate) fn lowered_names(&self) -> &[String] {
        &self.lowered
    }

    fn weight(&self) -> usize {
        // An entry without packages still costs something.
        self.lowered.len().max(1)
    }
}

/// The cache of parsed inventories, shared by a store's clones.
#[derive(Debug, Default)]
pub(crate) struct InventoryCache {
    inner: Mutex<Cached>,
}

#[derive(Debug, Default)]
struct Cached {
    by_device: HashMap<DeviceId, Arc<DeviceInventory>>,
    /// Insertion order, for eviction (an id may appear again after a refresh; stale positions
    /// are skipped).
    order: VecDeque<(DeviceId, Timestamp)>,
    packages: usize,
}

impl InventoryCache {
    fn lock(&self) -> MutexGuard<'_, Cached> {
        // The map stays consistent at every await-free step, so a poisoned lock is usable.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn get(&self, device: DeviceId, reported_at: Timestamp) -> Option<Arc<DeviceInventory>> {
        self.lock()
            .by_device
            .get(&device)
            .filter(|i| i.reported_at == reported_at)
            .cloned()
    }

    fn put(&self, device: DeviceId, inv: Arc<DeviceInventory>) {
        let mut c = self.lock();
        if let Some(old) = c.by_device.insert(device, inv.clone()) {
            c.packages -= old.weight();
        }
        c.packages += inv.weight();
        c.order.push_back((device, inv.reported_at));
        while c.packages > MAX_CACHED_PACKAGES {
            let Some((id, at)) = c.order.pop_front() else {
                break;
            };
            // Only the position of the entry's current version evicts it.
            if c.by_device.get(&id).is_some_and(|i| i.reported_at == at)
                && let Some(gone) = c.by_device.remove(&id)
            {
                c.packages -= gone.weight();
            }
        }
        // Positions of replaced versions pile up while nothing is evicted; keep them bounded.
        if c.order.len() > 4 * c.by_device.len() + 64 {
            let Cached {
                by_device, order, ..
            } = &mut *c;
            order.retain(|(id, at)| by_device.get(id).is_some_and(|i| i.reported_at == *at));
        }
    }

    /// Forgets `device`'s entry (after a report through this store).
    pub(crate) fn forget(&self, device: DeviceId) {
        let mut c = self.lock();
        if let Some(gone) = c.by_device.remove(&device) {
            c.packages -= gone.weight();
        }
    }
}

impl crate::OrgAgents<'_> {
    /// `device`'s latest inventory, parsed (from the cache when the stored report has not
    /// changed since it was parsed); `None` before the agent's first inventory. A device of
    /// another organization is not found.
    pub async fn inventory(&self, device: DeviceId) -> Result<Option<Arc<DeviceInventory>>> {
        // The device row tells "not in this organization" from "no inventory yet".
        let stamp: Option<(Option<Timestamp>,)> = sql(
            "SELECT s.inventory_at FROM devices d LEFT JOIN device_state s \
             ON s.device_id = d.id AND s.org_id = d.org_id WHERE d.id = $1 AND d.org_id = $2",
        )
        .bind(device)
        .bind(self.org)
        .fetch_optional(self)
        .await?;
        self.inventory_as_of(device, stamp.ok_or(StoreError::NotFound("device"))?.0)
            .await
    }

    /// `device`'s inventory as reported at `stamp` (its `inventory_at`, from a read that has
    /// already found the device in this organization, such as [`crate::OrgDevices::overview`]):
    /// no statement at all when that report is cached. `None` when there is no report.
    pub async fn inventory_as_of(
        &self,
        device: DeviceId,
        stamp: Option<Timestamp>,
    ) -> Result<Option<Arc<DeviceInventory>>> {
        let Some(stamp) = stamp else {
            return Ok(None);
        };
        let cache = &self.store.inventories;
        if let Some(hit) = cache.get(device, stamp) {
            return Ok(Some(hit));
        }
        let row: Option<(Option<sqlx::types::Json<Value>>, Option<Timestamp>)> = sql(
            "SELECT inventory, inventory_at FROM device_state WHERE device_id = $1 AND org_id = $2",
        )
        .bind(device)
        .bind(self.org)
        .fetch_optional(self)
        .await?;
        let Some((Some(doc), Some(at))) = row else {
            return Ok(None);
        };
        let parsed = Arc::new(DeviceInventory::parse(at, doc.0));
        cache.put(device, parsed.clone());
        Ok(Some(parsed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pkg(name: &str, version: &str) -> Value {
        serde_json::json!({ "name": name, "version": version })
    }

    fn at(secs: i64) -> Timestamp {
        chrono::DateTime::from_timestamp(secs, 0).unwrap_or_default()
    }

    #[test]
    fn packages_are_sorted_case_insensitively_and_deduplicated() {
        let doc = serde_json::json!({
            "packages": [pkg("zlib", "1"), pkg("Bash", "5"), pkg("bash", "4"), pkg("zlib", "1")]
        });
        let inv = DeviceInventory::parse(at(1), doc);
        let names: Vec<_> = inv
            .packages()
            .unwrap_or_default()
            .iter()
            .map(|p| format!("{}@{}", p.name, p.version))
            .collect();
        assert_eq!(names, ["Bash@5", "bash@4", "zlib@1"]);
        assert_eq!(inv.lowered_names(), ["bash", "bash", "zlib"]);
        assert!(inv.inventory.is_none(), "not a whole inventory");
    }

    #[test]
    fn a_document_without_packages_lists_none() {
        let inv = DeviceInventory::parse(at(1), serde_json::json!({ "hostname": "x" }));
        assert_eq!(inv.package_count(), None);
    }

    #[test]
    fn eviction_keeps_the_package_budget() {
        let cache = InventoryCache::default();
        let many: Vec<Value> = (0..100_000).map(|i| pkg(&format!("p{i}"), "1")).collect();
        let ids: Vec<DeviceId> = (0..5).map(|_| DeviceId(uuid::Uuid::now_v7())).collect();
        for id in &ids {
            let doc = serde_json::json!({ "packages": many });
            cache.put(*id, Arc::new(DeviceInventory::parse(at(1), doc)));
        }
        let c = cache.lock();
        assert!(
            c.packages <= MAX_CACHED_PACKAGES,
            "{} packages held",
            c.packages
        );
        assert!(!c.by_device.contains_key(&ids[0]), "the oldest went first");
        assert!(c.by_device.contains_key(&ids[4]), "the newest stays");
    }

    #[test]
    fn a_newer_report_misses_and_forget_drops() {
        let cache = InventoryCache::default();
        let id = DeviceId(uuid::Uuid::now_v7());
        let doc = serde_json::json!({ "packages": [pkg("a", "1")] });
        cache.put(id, Arc::new(DeviceInventory::parse(at(1), doc)));
        assert!(cache.get(id, at(1)).is_some());
        assert!(cache.get(id, at(2)).is_none(), "another report's stamp");
        cache.forget(id);
        assert!(cache.get(id, at(1)).is_none());
    }
}
