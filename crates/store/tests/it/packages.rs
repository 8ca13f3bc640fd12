//! A device's installed packages, paged: ordered by name, filtered case-insensitively, walked
//! with a cursor that ends, refusing a forged cursor, never reaching another organization's
//! device, and saying when the agent has listed none.

use breeze_agent_proto::Inventory;
use breeze_core::{DeviceId, DeviceStatus, OrgId};
use breeze_store::{Store, StoreError, testing::Ctx};
use serde_json::json;

use crate::audit;

async fn device(s: &Store, org: OrgId) -> DeviceId {
    let site = s
        .org(org)
        .tenancy()
        .create_site("HQ", "UTC", audit("site.create", "site"))
        .await
        .unwrap();
    s.org(org)
        .devices()
        .create_device(
            breeze_store::testing::new_device(site.id, "web-01", DeviceStatus::Online),
            audit("device.create", "device"),
        )
        .await
        .unwrap()
        .id
}

fn inventory(s: &Store, packages: Option<Vec<(&str, &str)>>) -> Inventory {
    let mut v = json!({
        "collectedAt": s.clock().now(), "hostname": "web-01",
        "os": { "family": "linux", "name": "Debian", "version": "12", "kernel": "6.1", "arch": "x86_64" },
        "cpu": { "model": "CPU", "physicalCores": 2, "logicalCores": 4 },
        "memoryTotalBytes": 1u64, "disks": [], "interfaces": [],
    });
    if let Some(p) = packages {
        v["packages"] = p
            .iter()
            .map(|(n, ver)| json!({ "name": n, "version": ver }))
            .collect();
    }
    serde_json::from_value(v).unwrap()
}

async fn packages_page_filter_and_refuse_bad_cursors(cx: Ctx) {
    let s = &cx.store;
    let p = s
        .create_partner("P", "p", audit("partner.create", "partner"))
        .await
        .unwrap();
    let a = s
        .create_organization(p.id, "A", "a", audit("o", "organization"))
        .await
        .unwrap()
        .id;
    let b = s
        .create_organization(p.id, "B", "b", audit("o", "organization"))
        .await
        .unwrap()
        .id;
    let dev = device(s, a).await;
    let o = s.org(a);

    // Before any inventory: nothing listed, and it says so.
    let page = o
        .devices()
        .device_packages(dev, None, None, 50)
        .await
        .unwrap();
    assert!(!page.listed && page.packages.is_empty() && page.total == 0);
    s.record_inventory(dev, a, &inventory(s, None))
        .await
        .unwrap();
    assert!(
        !o.devices()
            .device_packages(dev, None, None, 50)
            .await
            .unwrap()
            .listed
    );

    let mut many: Vec<(String, String)> = (0..25)
        .map(|i| (format!("lib{i:02}"), "1.0".to_owned()))
        .collect();
    many.push(("OpenSSL".into(), "3.0.11".into()));
    many.push(("openssh-server".into(), "9.2".into()));
    many.push(("zlib".into(), "1.2.13".into()));
    let refs: Vec<(&str, &str)> = many.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
    s.record_inventory(dev, a, &inventory(s, Some(refs)))
        .await
        .unwrap();

    // Paging walks every package once, in name order, and ends.
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let page = o
            .devices()
            .device_packages(dev, None, cursor.as_deref(), 10)
            .await
            .unwrap();
        assert!(page.listed);
        assert_eq!(page.total, 28);
        assert!(page.packages.len() <= 10);
        seen.extend(page.packages.into_iter().map(|p| p.name));
        pages += 1;
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    assert_eq!(pages, 3);
    assert_eq!(seen.len(), 28);
    let mut sorted = seen.clone();
    sorted.sort_by_key(|n| n.to_lowercase());
    assert_eq!(seen, sorted, "ordered by name, case-insensitively");
    assert_eq!(seen.last().map(String::as_str), Some("zlib"));

    // A case-insensitive substring filter; total counts the matches.
    let page = o
        .devices()
        .device_packages(dev, Some("OPENS"), None, 50)
        .await
        .unwrap();
    let names: Vec<&str> = page.packages.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["openssh-server", "OpenSSL"]);
    assert_eq!(page.total, 2);
    assert_eq!(page.packages[1].version, "3.0.11");
    assert_eq!(page.next_cursor, None);

    // A limit above the maximum is capped.
    let page = o
        .devices()
        .device_packages(dev, None, None, 10_000)
        .await
        .unwrap();
    assert_eq!(page.packages.len(), 28);

    // A cursor that is not one of ours is refused, naming it.
    for bad in ["not base64!", "bm9wZQ", ""] {
        let err = o
            .devices()
            .device_packages(dev, None, Some(bad), 10)
            .await
            .unwrap_err();
        assert!(
            matches!(&err, StoreError::Invalid(m) if m.contains("cursor")),
            "{bad:?}: {err}"
        );
    }

    // Another organization cannot reach the device.
    assert!(matches!(
        s.org(b)
            .devices()
            .device_packages(dev, None, None, 10)
            .await,
        Err(StoreError::NotFound(_))
    ));
}

/// Inventories are parsed once per report and cached per server: a report written here is read
/// at once, and one written by another server on the same database (with a cache of its own)
/// replaces what this server had cached, since it carries a new stamp.
async fn packages_follow_reports_from_every_server(cx: Ctx) {
    let s = &cx.store;
    let p = s
        .create_partner("P", "p", audit("p", "partner"))
        .await
        .unwrap();
    let a = s
        .create_organization(p.id, "A", "a", audit("o", "organization"))
        .await
        .unwrap()
        .id;
    let dev = device(s, a).await;
    let other = s.reopen().await.unwrap();
    let names = |page: breeze_store::PackagePage| -> Vec<String> {
        page.packages.into_iter().map(|p| p.name).collect()
    };
    let read = |store: &Store| {
        let store = store.clone();
        async move {
            store
                .org(a)
                .devices()
                .device_packages(dev, None, None, 50)
                .await
                .unwrap()
        }
    };

    s.record_inventory(dev, a, &inventory(s, Some(vec![("bash", "5.2")])))
        .await
        .unwrap();
    assert_eq!(names(read(s).await), ["bash"]);
    assert_eq!(
        names(read(&other).await),
        ["bash"],
        "cached on both servers now"
    );

    // The same instant (a clock that does not move): this server forgets its copy.
    s.record_inventory(dev, a, &inventory(s, Some(vec![("curl", "8.5")])))
        .await
        .unwrap();
    assert_eq!(names(read(s).await), ["curl"]);

    // The other server reports later; this one sees it although it never heard of it.
    cx.clock.advance(chrono::Duration::seconds(1));
    other
        .record_inventory(
            dev,
            a,
            &inventory(s, Some(vec![("zsh", "5.9"), ("vim", "9.1")])),
        )
        .await
        .unwrap();
    assert_eq!(names(read(s).await), ["vim", "zsh"]);

    // The details document counts from the same parsed copy.
    let inv = s.org(a).agents().inventory(dev).await.unwrap().unwrap();
    assert_eq!(inv.package_count(), Some(2));
    assert_eq!(
        inv.inventory.as_ref().map(|i| i.hostname.as_str()),
        Some("web-01")
    );
    assert!(
        inv.inventory.as_ref().is_some_and(|i| i.packages.is_none()),
        "kept once, sorted"
    );
}

breeze_store::on_both_backends!(
    packages_page_filter_and_refuse_bad_cursors,
    packages_follow_reports_from_every_server
);
