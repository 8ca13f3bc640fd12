//! Installed packages of a device, paged: read from the agent's latest inventory (one JSON
//! document per device), filtered by name and walked with an opaque keyset cursor, so a client
//! pages through thousands of packages without any of them being dumped at once.

use base64::Engine as _;
use breeze_agent_proto::Package;
use breeze_core::DeviceId;
use serde::Serialize;

use crate::{Result, StoreError};

/// The largest page [`crate::OrgDevices::device_packages`] returns.
pub const MAX_PACKAGE_PAGE: u32 = 200;

/// One page of a device's installed packages, ordered by name (case-insensitive), then version.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PackagePage {
    pub packages: Vec<Package>,
    /// How many packages match the filter, over every page.
    pub total: usize,
    /// Where the next page starts, when more follow (opaque).
    pub next_cursor: Option<String>,
    /// False when the agent has not reported an inventory yet or its platform cannot list
    /// packages (then `packages` is empty and `total` 0).
    pub listed: bool,
}

/// The sort key of a package; a cursor carries the last one of its page.
fn key(p: &Package) -> (String, &str, &str) {
    (p.name.to_lowercase(), p.name.as_str(), p.version.as_str())
}

fn encode_cursor(p: &Package) -> String {
    let raw = serde_json::json!([p.name, p.version]).to_string();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw)
}

fn decode_cursor(s: &str) -> Result<Package> {
    let bad = || StoreError::Invalid(format!("invalid cursor {s:?}: pass a nextCursor unchanged"));
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(s)
        .map_err(|_| bad())?;
    let (name, version): (String, String) = serde_json::from_slice(&raw).map_err(|_| bad())?;
    Ok(Package { name, version })
}

impl crate::OrgDevices<'_> {
    /// A page of `device`'s installed packages from its latest inventory: those whose name
    /// contains `name` (case-insensitive), after `cursor` (a previous page's `next_cursor`),
    /// at most `limit` (1 to [`MAX_PACKAGE_PAGE`]). A device of another organization is not
    /// found; a cursor that is not one of ours is invalid.
    pub async fn device_packages(
        &self,
        device: DeviceId,
        name: Option<&str>,
        cursor: Option<&str>,
        limit: u32,
    ) -> Result<PackagePage> {
        let after = cursor.map(decode_cursor).transpose()?;
        let limit = limit.clamp(1, MAX_PACKAGE_PAGE) as usize;
        let state = self.whole().agents().device_state(device).await?;
        // An inventory that no longer parses (an older agent's shape) lists nothing.
        let packages: Option<Vec<Package>> = state
            .and_then(|s| s.inventory)
            .and_then(|mut v| v.get_mut("packages").map(serde_json::Value::take))
            .and_then(|v| serde_json::from_value(v).ok());
        let Some(mut packages) = packages else {
            return Ok(PackagePage {
                packages: Vec::new(),
                total: 0,
                next_cursor: None,
                listed: false,
            });
        };
        if let Some(needle) = name.map(str::to_lowercase) {
            packages.retain(|p| p.name.to_lowercase().contains(&needle));
        }
        packages.sort_by(|a, b| key(a).cmp(&key(b)));
        packages.dedup();
        let total = packages.len();
        let start = after.as_ref().map_or(0, |c| {
            let c = key(c);
            packages.partition_point(|p| key(p) <= c)
        });
        let mut page: Vec<Package> = packages.into_iter().skip(start).collect();
        let more = page.len() > limit;
        page.truncate(limit);
        Ok(PackagePage {
            next_cursor: if more {
                page.last().map(encode_cursor)
            } else {
                None
            },
            packages: page,
            total,
            listed: true,
        })
    }
}
