//! Vulnerability exposure over real OSV records (copied from osv.dev's public data, ids kept)
//! against synthetic inventories: each ecosystem's ordering decides, exposure follows
//! inventory changes and imports incrementally, imports are idempotent, an organization's
//! upload stays its own, and one organization never sees another's exposure or devices.

use breeze_agent_proto::Inventory;
use breeze_core::{DeviceId, DeviceStatus, OrgId, advisory::OsvRecord};
use breeze_store::{NewDevice, Store, StoreError, testing::Ctx};
use serde_json::json;

use crate::{audit, two_orgs};

/// The fixture: real records of Debian, Ubuntu, Alpine, Rocky Linux and AlmaLinux.
pub(crate) fn fixture() -> Vec<OsvRecord> {
    [
        include_str!("../fixtures/osv/DSA-5532-1.json"),
        include_str!("../fixtures/osv/DEBIAN-CVE-2023-38545.json"),
        include_str!("../fixtures/osv/USN-6429-1.json"),
        include_str!("../fixtures/osv/ALPINE-CVE-2023-38545.json"),
        include_str!("../fixtures/osv/RLSA-2023-5453.json"),
        include_str!("../fixtures/osv/ALSA-2023-5453.json"),
        include_str!("../fixtures/osv/DSA-5321-1.json"),
    ]
    .into_iter()
    .map(|t| OsvRecord::parse(t).unwrap())
    .collect()
}

async fn device(s: &Store, org: OrgId, host: &str, os: (&str, &str)) -> DeviceId {
    let site = s
        .org(org)
        .tenancy()
        .create_site(&format!("site-{host}"), "UTC", audit("site.create", "site"))
        .await
        .unwrap();
    s.org(org)
        .devices()
        .create_device(
            NewDevice {
                os_name: os.0.into(),
                os_version: os.1.into(),
                ..breeze_store::testing::new_device(site.id, host, DeviceStatus::Online)
            },
            audit("device.create", "device"),
        )
        .await
        .unwrap()
        .id
}

fn inventory(s: &Store, host: &str, os: (&str, &str), packages: &[(&str, &str)]) -> Inventory {
    serde_json::from_value(json!({
        "collectedAt": s.clock().now(), "hostname": host,
        "os": { "family": "linux", "name": os.0, "version": os.1, "kernel": "6.1", "arch": "x86_64" },
        "cpu": { "model": "CPU", "physicalCores": 2, "logicalCores": 4 },
        "memoryTotalBytes": 1u64, "disks": [], "interfaces": [],
        "packages": packages.iter().map(|(n, v)| json!({ "name": n, "version": v })).collect::<Vec<_>>(),
    }))
    .unwrap()
}

/// A device with an inventory.
async fn reporting(
    s: &Store,
    org: OrgId,
    host: &str,
    os: (&str, &str),
    packages: &[(&str, &str)],
) -> DeviceId {
    let d = device(s, org, host, os).await;
    s.record_inventory(d, org, &inventory(s, host, os, packages))
        .await
        .unwrap();
    d
}

const DEBIAN: (&str, &str) = ("Debian GNU/Linux", "12");
const UBUNTU: (&str, &str) = ("Ubuntu", "22.04");
const ALPINE: (&str, &str) = ("Alpine Linux", "3.18.4");
const ROCKY: (&str, &str) = ("Rocky Linux", "9.2");
const ALMA: (&str, &str) = ("AlmaLinux", "9.2");

fn ids(findings: &[breeze_store::ExposureFinding]) -> Vec<(String, String, Option<String>)> {
    let mut v: Vec<_> = findings
        .iter()
        .map(|f| (f.advisory_id.clone(), f.package.clone(), f.fixed_in.clone()))
        .collect();
    v.sort();
    v
}

fn some(s: &str) -> Option<String> {
    Some(s.to_owned())
}

async fn real_records_match_each_ecosystems_ordering(cx: Ctx) {
    let s = &cx.store;
    let (a, b) = two_orgs(s).await;
    // Devices reporting before the import are matched by the import.
    let deb = reporting(
        s,
        a,
        "deb",
        DEBIAN,
        &[
            ("openssl", "3.0.11-1~deb12u1"),
            ("curl", "7.88.1-10+deb12u3"),
            ("sudo", "1.9.13p3-1+deb12u1"),
            ("libssl3", "3.0.11-1~deb12u1"),
        ],
    )
    .await;
    let deb_patched = reporting(
        s,
        a,
        "deb-patched",
        DEBIAN,
        &[
            ("openssl", "3.0.11-1~deb12u2"),
            ("curl", "7.88.1-10+deb12u4"),
        ],
    )
    .await;
    let out = s.import_advisories(fixture()).await.unwrap();
    assert_eq!(
        (out.added, out.replaced, out.unchanged),
        (7, 0, 0),
        "{out:?}"
    );
    assert_eq!(out.devices_recomputed, 2);
    assert_eq!(out.findings, 2);
    // Devices reporting after it are matched when they report.
    let ubuntu = reporting(s, a, "ubu", UBUNTU, &[("curl", "7.81.0-1ubuntu1.13")]).await;
    let alpine = reporting(s, a, "alp", ALPINE, &[("curl", "8.3.0-r0")]).await;
    let rocky = reporting(s, a, "rocky", ROCKY, &[("glibc", "2.34-60.el9_2.6")]).await;
    let alma = reporting(s, a, "alma", ALMA, &[("glibc", "2.34-60.el9_2.7")]).await;
    let v = s.org(a).vulnerabilities();

    assert_eq!(
        ids(&v.device_findings(deb).await.unwrap()),
        vec![
            (
                "DEBIAN-CVE-2023-38545".into(),
                "curl".into(),
                some("7.88.1-10+deb12u4")
            ),
            (
                "DSA-5532-1".into(),
                "openssl".into(),
                some("3.0.11-1~deb12u2")
            ),
        ],
        "sudo's advisory is for Debian 11; libssl3 is not the source name the record uses"
    );
    assert!(v.device_findings(deb_patched).await.unwrap().is_empty());
    assert_eq!(
        ids(&v.device_findings(ubuntu).await.unwrap()),
        vec![(
            "USN-6429-1".into(),
            "curl".into(),
            some("7.81.0-1ubuntu1.14")
        )]
    );
    assert_eq!(
        ids(&v.device_findings(alpine).await.unwrap()),
        vec![(
            "ALPINE-CVE-2023-38545".into(),
            "curl".into(),
            some("8.4.0-r0")
        )]
    );
    let rocky_found = v.device_findings(rocky).await.unwrap();
    assert_eq!(
        ids(&rocky_found),
        vec![(
            "RLSA-2023:5453".into(),
            "glibc".into(),
            some("2.34-60.el9_2.7")
        )]
    );
    assert_eq!(
        rocky_found[0].severity, "high",
        "Important, from the record's label"
    );
    assert_eq!(rocky_found[0].cve_list(), vec!["CVE-2023-4911".to_owned()]);
    assert!(v.device_findings(alma).await.unwrap().is_empty(), "fixed");

    // Devices per CVE, across the advisories naming it.
    let by_cve = v.findings_for("CVE-2023-38545", 100).await.unwrap();
    let mut hosts: Vec<_> = by_cve
        .iter()
        .map(|f| (f.hostname.as_str(), f.advisory_id.as_str()))
        .collect();
    hosts.sort();
    assert_eq!(
        hosts,
        vec![
            ("alp", "ALPINE-CVE-2023-38545"),
            ("deb", "DEBIAN-CVE-2023-38545"),
            ("ubu", "USN-6429-1")
        ]
    );
    assert!(matches!(
        v.findings_for("CVE-1999-0001", 10).await,
        Err(StoreError::NotFound(_))
    ));

    let summary = v.summary().await.unwrap();
    assert_eq!(summary.devices_exposed, 4);
    assert_eq!(summary.findings, 5);
    assert_eq!(summary.fixable_findings, 5);
    assert_eq!(summary.by_severity[0].severity, "critical");
    assert_eq!(summary.by_severity[0].devices, 2, "the CVSS 9.8 records");
    let listed = v.exposed_advisories(None, 0, 50).await.unwrap();
    assert_eq!(listed.len(), 5);
    assert_eq!(listed[0].advisory.severity, "critical");
    assert_eq!(listed[0].advisory.cvss_score, Some(9.8));

    // Organization B sees none of it, and none of A's devices.
    let vb = s.org(b).vulnerabilities();
    assert_eq!(vb.summary().await.unwrap().findings, 0);
    assert!(vb.exposed_advisories(None, 0, 50).await.unwrap().is_empty());
    assert!(
        vb.findings_for("CVE-2023-38545", 100)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(matches!(
        vb.device_findings(deb).await,
        Err(StoreError::NotFound(_))
    ));
    assert!(matches!(
        vb.recompute_device(deb).await,
        Err(StoreError::NotFound(_))
    ));
    // The operator's advisories are everyone's reference data.
    assert_eq!(
        vb.get_advisory("DSA-5532-1").await.unwrap().cves,
        vec!["CVE-2023-5363"]
    );
}

async fn imports_are_idempotent_and_newer_records_replace(cx: Ctx) {
    let s = &cx.store;
    let (a, _) = two_orgs(s).await;
    let deb = reporting(s, a, "deb", DEBIAN, &[("openssl", "3.0.11-1~deb12u1")]).await;
    s.import_advisories(fixture()).await.unwrap();
    let first_seen = s
        .org(a)
        .vulnerabilities()
        .device_findings(deb)
        .await
        .unwrap()[0]
        .found_at;

    cx.clock.advance(chrono::Duration::hours(1));
    let again = s.import_advisories(fixture()).await.unwrap();
    assert_eq!((again.added, again.replaced, again.unchanged), (0, 0, 7));
    assert_eq!(
        again.devices_recomputed, 0,
        "nothing changed, nothing recomputed"
    );

    // A newer copy of DSA-5532-1 whose fix is later: replaced, the device recomputed, the
    // finding keeps its first-seen time.
    let mut newer = fixture().remove(0);
    newer.modified = Some("2024-01-01T00:00:00Z".into());
    newer.affected[0].ranges[0].events[1].fixed = Some("3.0.11-1~deb12u3".into());
    let mut older = fixture().remove(0);
    older.modified = Some("2020-01-01T00:00:00Z".into());
    let out = s.import_advisories(vec![newer]).await.unwrap();
    assert_eq!((out.added, out.replaced), (0, 1));
    assert_eq!(out.devices_recomputed, 1);
    let found = s
        .org(a)
        .vulnerabilities()
        .device_findings(deb)
        .await
        .unwrap();
    assert_eq!(found[0].fixed_in.as_deref(), Some("3.0.11-1~deb12u3"));
    assert_eq!(found[0].found_at, first_seen);
    // An older copy changes nothing.
    let out = s.import_advisories(vec![older]).await.unwrap();
    assert_eq!(out.unchanged, 1);
    assert_eq!(
        s.org(a)
            .vulnerabilities()
            .get_advisory("DSA-5532-1")
            .await
            .unwrap()
            .advisory
            .modified,
        "2024-01-01T00:00:00Z"
            .parse::<chrono::DateTime<chrono::Utc>>()
            .unwrap()
    );

    // A record without `modified` is refused by name; the rest still load.
    let mut bad = fixture().remove(1);
    bad.id = "DEBIAN-CVE-2099-0001".into();
    bad.modified = None;
    let out = s.import_advisories(vec![bad]).await.unwrap();
    assert_eq!(out.rejected, 1);
    assert!(
        out.rejections[0].contains("modified"),
        "{:?}",
        out.rejections
    );
}

async fn exposure_follows_inventory_changes(cx: Ctx) {
    let s = &cx.store;
    let (a, _) = two_orgs(s).await;
    s.import_advisories(fixture()).await.unwrap();
    let deb = reporting(s, a, "deb", DEBIAN, &[("curl", "7.88.1-10+deb12u3")]).await;
    let v = s.org(a).vulnerabilities();
    assert_eq!(v.device_findings(deb).await.unwrap().len(), 1);
    // Upgraded: the next inventory clears it.
    cx.clock.advance(chrono::Duration::minutes(5));
    s.record_inventory(
        deb,
        a,
        &inventory(s, "deb", DEBIAN, &[("curl", "7.88.1-10+deb12u4")]),
    )
    .await
    .unwrap();
    assert!(v.device_findings(deb).await.unwrap().is_empty());
    // Reinstalled an affected openssl: found again.
    s.record_inventory(
        deb,
        a,
        &inventory(
            s,
            "deb",
            DEBIAN,
            &[("curl", "7.88.1-10+deb12u4"), ("openssl", "3.0.9-1")],
        ),
    )
    .await
    .unwrap();
    assert_eq!(
        ids(&v.device_findings(deb).await.unwrap()),
        vec![(
            "DSA-5532-1".into(),
            "openssl".into(),
            some("3.0.11-1~deb12u2")
        )]
    );
    // Upgraded to Debian 13: the Debian 12 record no longer applies.
    s.record_inventory(
        deb,
        a,
        &inventory(
            s,
            "deb",
            ("Debian GNU/Linux", "13"),
            &[("openssl", "3.0.9-1"), ("curl", "8.3.0-1")],
        ),
    )
    .await
    .unwrap();
    assert_eq!(
        ids(&v.device_findings(deb).await.unwrap()),
        vec![(
            "DEBIAN-CVE-2023-38545".into(),
            "curl".into(),
            some("8.4.0-1")
        )]
    );
}

async fn an_organizations_upload_stays_its_own(cx: Ctx) {
    let s = &cx.store;
    let (a, b) = two_orgs(s).await;
    let da = reporting(s, a, "a1", DEBIAN, &[("bash", "5.2.15-2")]).await;
    let db = reporting(s, b, "b1", DEBIAN, &[("bash", "5.2.15-2")]).await;
    let record = OsvRecord::parse(
        r#"{"id":"LOCAL-2024-0001","summary":"in-house bash advisory","modified":"2024-02-01T00:00:00Z",
            "affected":[{"package":{"ecosystem":"Debian:12","name":"bash"},
            "ranges":[{"type":"ECOSYSTEM","events":[{"introduced":"0"},{"fixed":"5.2.15-2+b7"}]}]}]}"#,
    )
    .unwrap();
    let out = s
        .org(a)
        .vulnerabilities()
        .import_advisory(record.clone(), audit("advisory.import", "advisory"))
        .await
        .unwrap();
    assert_eq!((out.added, out.devices_recomputed, out.findings), (1, 1, 1));
    assert_eq!(
        s.org(a)
            .vulnerabilities()
            .device_findings(da)
            .await
            .unwrap()
            .len(),
        1
    );
    // B neither sees the record nor is matched against it, even when its device reports.
    assert!(matches!(
        s.org(b)
            .vulnerabilities()
            .get_advisory("LOCAL-2024-0001")
            .await,
        Err(StoreError::NotFound(_))
    ));
    s.org(b)
        .vulnerabilities()
        .recompute_device(db)
        .await
        .unwrap();
    assert!(
        s.org(b)
            .vulnerabilities()
            .device_findings(db)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        s.org(b)
            .vulnerabilities()
            .list_advisories(Some("LOCAL"), None, None, 50)
            .await
            .unwrap()
            .is_empty()
    );
    // Uploading it again is a no-op; a bad record is refused naming the field.
    let out = s
        .org(a)
        .vulnerabilities()
        .import_advisory(record, audit("advisory.import", "advisory"))
        .await
        .unwrap();
    assert_eq!(out.unchanged, 1);
    let bad = OsvRecord::parse(r#"{"id":"LOCAL-2","modified":"yesterday"}"#).unwrap();
    let err = s
        .org(a)
        .vulnerabilities()
        .import_advisory(bad, audit("advisory.import", "advisory"))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("modified"), "{err}");
}

/// Debian and Ubuntu advisories name source packages: an installed binary package whose agent
/// reports its source (`libssl3` from `openssl`) is matched by it, on a device that reported
/// before the import (the import's matching) and on one reporting after (its own recompute);
/// the finding names the installed package and its version.
async fn binary_packages_are_matched_by_their_source(cx: Ctx) {
    let s = &cx.store;
    let (a, _) = two_orgs(s).await;
    let with_sources = |host: &str| {
        let mut inv = inventory(s, host, DEBIAN, &[]);
        inv.packages = Some(
            [
                ("libssl3", "3.0.11-1~deb12u1", Some("openssl")),
                ("libssl3-dev", "3.0.11-1~deb12u2", Some("openssl")),
                ("bash", "5.2.15-2+b2", None),
            ]
            .into_iter()
            .map(|(name, version, source)| breeze_agent_proto::Package {
                name: name.into(),
                version: version.into(),
                source: source.map(Into::into),
            })
            .collect(),
        );
        inv
    };
    let before = device(s, a, "before", DEBIAN).await;
    s.record_inventory(before, a, &with_sources("before"))
        .await
        .unwrap();
    s.import_advisories(fixture()).await.unwrap();
    let after = device(s, a, "after", DEBIAN).await;
    s.record_inventory(after, a, &with_sources("after"))
        .await
        .unwrap();
    let v = s.org(a).vulnerabilities();
    for d in [before, after] {
        let found = v.device_findings(d).await.unwrap();
        assert_eq!(
            ids(&found),
            vec![(
                "DSA-5532-1".into(),
                "libssl3".into(),
                some("3.0.11-1~deb12u2")
            )],
            "the patched libssl3-dev is not affected"
        );
        assert_eq!(found[0].installed, "3.0.11-1~deb12u1");
    }
}

breeze_store::on_both_backends!(
    binary_packages_are_matched_by_their_source,
    real_records_match_each_ecosystems_ordering,
    imports_are_idempotent_and_newer_records_replace,
    exposure_follows_inventory_changes,
    an_organizations_upload_stays_its_own
);
