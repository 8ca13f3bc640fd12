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
    Ok(Package {
        name,
        version,
        source: None,
    })
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
        let inventory = self.whole().agents().inventory(device).await?;
        let Some((packages, lowered)) = inventory
            .as_deref()
            .and_then(|i| Some((i.packages()?, i.lowered_names())))
        else {
            return Ok(PackagePage {
                packages: Vec::new(),
                total: 0,
                next_cursor: None,
                listed: false,
            });
        };
        // The cached list is sorted by `key` already; a filter keeps that order.
        let needle = name.map(str::to_lowercase);
        let matching = packages
            .iter()
            .zip(lowered)
            .filter(|(_, l)| needle.as_deref().is_none_or(|n| l.contains(n)));
        let after = after.as_ref().map(key);
        let mut total = 0;
        let mut page = Vec::with_capacity(limit + 1);
        for (p, l) in matching {
            total += 1;
            let on_earlier_page = after.as_ref().is_some_and(|(cl, cn, cv)| {
                (l.as_str(), p.name.as_str(), p.version.as_str()) <= (cl.as_str(), *cn, *cv)
            });
            if !on_earlier_page && page.len() <= limit {
                page.push(p.clone());
            }
        }
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
