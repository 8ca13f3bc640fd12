//! The device directory: listings answered from memory equal the database's answer, and the
//! freshness rules hold (local writes at once, heartbeats after `presence_lag`, other
//! processes' writes after `max_age`, idle snapshots dropped, organizations never mixed).

use std::{future::Future, time::Duration as StdDuration};

use breeze_agent_proto::{Heartbeat, Inventory};
use breeze_core::{
    Device, DeviceGroupId, DeviceId, DeviceStatus, OrgId, OsFamily, SiteId, Timestamp,
};
use breeze_store::{
    Backend, DeviceFilter, DirectorySettings, EnrollDevice, NewDevice, NewEnrollmentKey,
    ReenrollProof, Store, StoreOptions, testing::Ctx,
};
use chrono::Duration;

use crate::audit;

async fn org(s: &Store, slug: &str) -> OrgId {
    let partner = match s.find_partner("p").await {
        Ok(p) => p,
        Err(_) => s
            .create_partner("P", "p", audit("partner.create", "partner"))
            .await
            .unwrap(),
    };
    s.create_organization(
        partner.id,
        slug,
        slug,
        audit("organization.create", "organization"),
    )
    .await
    .unwrap()
    .id
}

async fn site(s: &Store, org: OrgId, name: &str) -> SiteId {
    s.org(org)
        .tenancy()
        .create_site(name, "UTC", audit("site.create", "site"))
        .await
        .unwrap()
        .id
}

async fn group(s: &Store, org: OrgId, name: &str) -> DeviceGroupId {
    s.org(org)
        .tenancy()
        .create_group(name, None, None, audit("group.create", "device_group"))
        .await
        .unwrap()
        .id
}

fn device(site: SiteId, hostname: &str) -> NewDevice {
    NewDevice {
        os_name: "Debian GNU/Linux".into(),
        agent_version: Some("0.1.0".into()),
        ..breeze_store::testing::new_device(site, hostname, DeviceStatus::Online)
    }
}

async fn create(s: &Store, org: OrgId, new: NewDevice) -> Device {
    s.org(org)
        .devices()
        .create_device(new, audit("device.create", "device"))
        .await
        .unwrap()
}

async fn hostnames(s: &Store, org: OrgId, filter: &DeviceFilter) -> Vec<String> {
    s.org(org)
        .devices()
        .list_devices(filter, 1000, 0)
        .await
        .unwrap()
        .0
        .into_iter()
        .map(|d| d.hostname)
        .collect()
}

async fn all_hostnames(s: &Store, org: OrgId) -> Vec<String> {
    hostnames(s, org, &DeviceFilter::default()).await
}

/// Polls `check` (each call reads, which is what schedules a background refresh) for up to
/// five seconds of real time.
async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    for _ in 0..500 {
        if check().await {
            return;
        }
        tokio::time::sleep(StdDuration::from_millis(10)).await;
    }
    panic!("timed out waiting for {what}");
}

/// A SQL literal for an id on `backend`.
fn id_literal(backend: Backend, id: uuid::Uuid) -> String {
    match backend {
        Backend::Sqlite => format!("x'{}'", id.simple()),
        Backend::Postgres => format!("'{id}'"),
    }
}

// --- the directory equals the database -----------------------------------------------------

/// A deterministic generator, so the fleet and the filter combinations are the same every run.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, n: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((self.0 >> 33) as usize) % n
    }
}

const HOSTNAMES: &[&str] = &[
    "alpha",
    "Alpha",
    "ALPHA-2",
    "alpha",
    "beta_01",
    "beta%02",
    "Beta-03",
    "gamma",
    "GAMMA",
    "-dash",
    "_under",
    "1host",
    "zulu",
    "Zulu",
    "web-01",
    "web-02",
    "WEB-03",
    "db-01",
    "DB-01",
    "db_01",
    "back\\slash",
    "mail",
    "Mail-Relay",
    "x",
    "xx",
    "xxx",
];
const TAGS: &[&str] = &["prod", "web_tier", "web", "staff", "50%", "a_b", "db"];
const STATUSES: &[DeviceStatus] = &[
    DeviceStatus::Online,
    DeviceStatus::Offline,
    DeviceStatus::Maintenance,
];
const OSES: &[OsFamily] = &[
    OsFamily::Linux,
    OsFamily::Windows,
    OsFamily::Macos,
    OsFamily::Other,
];
const SEARCHES: &[&str] = &[
    "al", "ALPHA", "a-", "_", "%", "\\", "", "zz-none", "01", "B", "x", "-0",
];

async fn the_directory_answers_as_the_database_does(cx: Ctx) {
    let s = &cx.store;
    let a = org(s, "org-a").await;
    let b = org(s, "org-b").await;
    let hq = site(s, a, "HQ").await;
    let branch = site(s, a, "Branch").await;
    let empty_site = site(s, a, "Empty").await;
    let b_site = site(s, b, "HQ").await;
    let sites = [hq, branch];

    let mut rng = Lcg(7);
    let mut fleet = Vec::new();
    for i in 0..150 {
        let mut new = device(
            sites[rng.next(2)],
            &format!("{}{}", HOSTNAMES[i % HOSTNAMES.len()], ["", "-x"][i % 2]),
        );
        if i % 7 == 0 {
            // Exact duplicates of a hostname: the id breaks the tie.
            new.hostname = "dup".into();
        }
        new.status = STATUSES[rng.next(3)];
        new.os_family = OSES[rng.next(4)];
        new.tags = (0..rng.next(4))
            .map(|_| TAGS[rng.next(TAGS.len())].to_owned())
            .collect();
        new.tags.dedup();
        fleet.push(new);
    }
    s.org(a)
        .devices()
        .create_devices(fleet, audit("device.import", "device"))
        .await
        .unwrap();
    // Organization B has the same hostnames, and a group with members.
    let b_group = group(s, b, "Servers").await;
    for h in ["alpha", "web-01", "dup"] {
        let d = create(s, b, device(b_site, h)).await;
        s.org(b)
            .tenancy()
            .add_to_group(b_group, d.id)
            .await
            .unwrap();
    }

    let (everything, _) = s
        .org(a)
        .devices()
        .list_devices_from_database(&DeviceFilter::default(), 1000, 0)
        .await
        .unwrap();
    assert_eq!(everything.len(), 150);
    let big = group(s, a, "Big").await;
    let small = group(s, a, "Small").await;
    let empty_group = group(s, a, "Empty").await;
    for (i, d) in everything.iter().enumerate() {
        if i % 2 == 0 {
            s.org(a).tenancy().add_to_group(big, d.id).await.unwrap();
        }
        if i % 11 == 0 {
            s.org(a).tenancy().add_to_group(small, d.id).await.unwrap();
        }
    }

    let mut filters = vec![DeviceFilter::default()];
    let one = |f: fn(&mut DeviceFilter)| {
        let mut d = DeviceFilter::default();
        f(&mut d);
        d
    };
    for &st in STATUSES {
        filters.push(DeviceFilter {
            status: Some(st),
            ..Default::default()
        });
    }
    for &os in OSES {
        filters.push(DeviceFilter {
            os_family: Some(os),
            ..Default::default()
        });
    }
    for site in [hq, branch, empty_site, b_site, SiteId::new()] {
        filters.push(DeviceFilter {
            site_id: Some(site),
            ..Default::default()
        });
    }
    for g in [big, small, empty_group, b_group, DeviceGroupId::new()] {
        filters.push(DeviceFilter {
            group_id: Some(g),
            ..Default::default()
        });
    }
    for q in SEARCHES {
        filters.push(DeviceFilter {
            search: Some((*q).into()),
            ..Default::default()
        });
    }
    for tags in [
        vec!["prod"],
        vec!["prod", "web_tier"],
        vec!["web"],
        vec!["50%"],
        vec!["a_b"],
        vec!["staff", "prod"],
        vec!["nope"],
    ] {
        filters.push(DeviceFilter {
            tags: tags.into_iter().map(str::to_owned).collect(),
            ..Default::default()
        });
    }
    filters.push(one(|f| f.search = Some("web".into())));
    // Random combinations of everything (each part present about a third of the time).
    let group_choices = [Some(big), Some(small), Some(b_group)];
    let site_choices = [Some(hq), Some(branch), Some(b_site)];
    for _ in 0..120 {
        let maybe = |rng: &mut Lcg, n: usize| (rng.next(3) == 0).then(|| rng.next(n));
        filters.push(DeviceFilter {
            status: maybe(&mut rng, 3).map(|i| STATUSES[i]),
            os_family: maybe(&mut rng, 4).map(|i| OSES[i]),
            site_id: maybe(&mut rng, 3).and_then(|i| site_choices[i]),
            group_id: maybe(&mut rng, 3).and_then(|i| group_choices[i]),
            search: maybe(&mut rng, SEARCHES.len()).map(|i| SEARCHES[i].to_owned()),
            tags: maybe(&mut rng, TAGS.len())
                .map(|i| TAGS[i].to_owned())
                .into_iter()
                .collect(),
        });
    }

    let mut non_empty = 0;
    for f in &filters {
        let (_, total) = s
            .org(a)
            .devices()
            .list_devices_from_database(f, 1000, 0)
            .await
            .unwrap();
        let total32 = u32::try_from(total).unwrap();
        if total > 0 {
            non_empty += 1;
        }
        let pages = [
            (25, 0),
            (5, 0),
            (5, 5),
            (7, 3),
            (100, 0),
            (1000, 0),
            (10, 1000),
            (0, 0),
            (3, total32),
            (3, total32.saturating_sub(1)),
            (total32.max(1), 0),
        ];
        for (limit, offset) in pages {
            let (want, want_total) = s
                .org(a)
                .devices()
                .list_devices_from_database(f, limit, offset)
                .await
                .unwrap();
            let (got, got_total) = s
                .org(a)
                .devices()
                .list_devices_with_sites(f, limit, offset)
                .await
                .unwrap();
            let ids = |v: &[Device]| v.iter().map(|d| d.id).collect::<Vec<_>>();
            let got_devices: Vec<Device> = got.iter().map(|(d, _)| d.clone()).collect();
            assert_eq!(
                ids(&got_devices),
                ids(&want),
                "{f:?} limit {limit} offset {offset}"
            );
            assert_eq!(got_devices, want, "{f:?}: whole rows");
            assert_eq!(got_total, want_total, "{f:?} limit {limit} offset {offset}");
            for (d, site_name) in &got {
                let expected = if d.site_id == hq { "HQ" } else { "Branch" };
                assert_eq!(site_name, expected);
            }
            let page = s
                .org(a)
                .devices()
                .device_page(f, limit, offset)
                .await
                .unwrap();
            assert_eq!(page.total(), want_total);
            assert_eq!(page.len(), want.len());
            assert!(page.iter().map(|(d, _)| d.id).eq(want.iter().map(|d| d.id)));
        }
    }
    assert!(
        non_empty > filters.len() / 2,
        "the table exercises real matches ({non_empty} of {})",
        filters.len()
    );

    // Group members come from the directory too.
    let members = s.org(a).devices().group_members(small).await.unwrap();
    let (want, _) = s
        .org(a)
        .devices()
        .list_devices_from_database(
            &DeviceFilter {
                group_id: Some(small),
                ..Default::default()
            },
            1000,
            0,
        )
        .await
        .unwrap();
    assert_eq!(members, want);

    // Tags compare exactly (SQLite's LIKE would also have folded ASCII case).
    assert_eq!(
        s.org(a)
            .devices()
            .list_devices(
                &DeviceFilter {
                    tags: vec!["PROD".into()],
                    ..Default::default()
                },
                10,
                0
            )
            .await
            .unwrap()
            .1,
        0
    );
}

async fn listings_are_answered_without_the_database(cx: Ctx) {
    let s = &cx.store;
    let a = org(s, "org-a").await;
    let hq = site(s, a, "HQ").await;
    for h in ["b", "a", "c"] {
        let mut new = device(hq, h);
        new.status = DeviceStatus::Offline;
        create(s, a, new).await;
    }
    let filter = DeviceFilter {
        status: Some(DeviceStatus::Offline),
        ..Default::default()
    };
    assert_eq!(hostnames(s, a, &filter).await, ["a", "b", "c"]);
    // With the pool closed, only the directory can answer.
    s.close().await;
    let page = s
        .org(a)
        .devices()
        .device_page(&filter, 25, 0)
        .await
        .unwrap();
    assert_eq!(page.total(), 3);
    assert_eq!(
        page.iter()
            .map(|(d, site)| (d.hostname.as_str(), site))
            .collect::<Vec<_>>(),
        [("a", "HQ"), ("b", "HQ"), ("c", "HQ")]
    );
}

// --- freshness -----------------------------------------------------------------------------

async fn writes_through_the_store_are_listed_at_once(cx: Ctx) {
    let s = &cx.store;
    let a = org(s, "org-a").await;
    let hq = site(s, a, "HQ").await;
    let web = create(s, a, device(hq, "web")).await;
    assert_eq!(all_hostnames(s, a).await, ["web"]);

    // Created: listed by the very next query.
    let db = create(s, a, device(hq, "db")).await;
    assert_eq!(all_hostnames(s, a).await, ["db", "web"]);
    s.org(a)
        .devices()
        .create_devices(
            vec![device(hq, "bulk-1"), device(hq, "bulk-2")],
            audit("device.import", "device"),
        )
        .await
        .unwrap();
    assert_eq!(all_hostnames(s, a).await, ["bulk-1", "bulk-2", "db", "web"]);

    // Group membership, both ways, and a deleted group.
    let g = group(s, a, "Servers").await;
    let in_g = DeviceFilter {
        group_id: Some(g),
        ..Default::default()
    };
    assert!(hostnames(s, a, &in_g).await.is_empty());
    s.org(a).tenancy().add_to_group(g, web.id).await.unwrap();
    assert_eq!(hostnames(s, a, &in_g).await, ["web"]);
    s.org(a).tenancy().add_to_group(g, db.id).await.unwrap();
    assert_eq!(hostnames(s, a, &in_g).await, ["db", "web"]);
    assert!(
        s.org(a)
            .tenancy()
            .remove_from_group(g, web.id)
            .await
            .unwrap()
    );
    assert_eq!(hostnames(s, a, &in_g).await, ["db"]);
    assert_eq!(
        s.org(a)
            .devices()
            .group_members(g)
            .await
            .unwrap()
            .iter()
            .map(|d| d.id)
            .collect::<Vec<_>>(),
        [db.id]
    );
    s.org(a)
        .tenancy()
        .delete_group(g, audit("group.delete", "device_group"))
        .await
        .unwrap();
    assert!(hostnames(s, a, &in_g).await.is_empty());

    // Enrollment and re-enrollment.
    s.org(a)
        .agents()
        .create_enrollment_key(
            NewEnrollmentKey {
                site_id: hq,
                name: "k".into(),
                key_hash: [1; 32],
                key_prefix: "p".into(),
                max_uses: None,
                expires_at: s.clock().now() + Duration::hours(1),
                created_by: "t".into(),
            },
            audit("enrollment_key.create", "enrollment_key"),
        )
        .await
        .unwrap();
    let enroll = |hostname: &str, token: u8| EnrollDevice {
        hostname: hostname.into(),
        machine_id: Some("m-1".into()),
        os_family: OsFamily::Linux,
        os_name: "Debian GNU/Linux".into(),
        os_version: "12".into(),
        agent_version: "0.1.0".into(),
        token_hash: [token; 32],
        proof: None,
    };
    let agent = s
        .enroll_device(&[1; 32], enroll("agent", 2))
        .await
        .unwrap()
        .device;
    assert_eq!(
        all_hostnames(s, a).await,
        ["agent", "bulk-1", "bulk-2", "db", "web"]
    );
    // Re-enrolled by the agent that proves it is the device (its token).
    s.enroll_device(
        &[1; 32],
        EnrollDevice {
            proof: Some(ReenrollProof::DeviceToken([2; 32])),
            ..enroll("zz-agent", 3)
        },
    )
    .await
    .unwrap();
    assert_eq!(
        all_hostnames(s, a).await,
        ["bulk-1", "bulk-2", "db", "web", "zz-agent"]
    );

    // An inventory report that renames the device or changes its OS.
    let mut inv: Inventory = serde_json::from_value(serde_json::json!({
        "collectedAt": s.clock().now(), "hostname": "renamed",
        "os": { "family": "windows", "name": "Windows 11", "version": "24H2", "kernel": "", "arch": "x86_64" },
        "cpu": { "model": "CPU", "physicalCores": 2, "logicalCores": 4 },
        "memoryTotalBytes": 1u64, "disks": [], "interfaces": [],
    }))
    .unwrap();
    s.record_inventory(agent.id, a, &inv).await.unwrap();
    let windows = DeviceFilter {
        os_family: Some(OsFamily::Windows),
        ..Default::default()
    };
    assert_eq!(hostnames(s, a, &windows).await, ["renamed"]);
    inv.os.version = "25H2".into();
    s.record_inventory(agent.id, a, &inv).await.unwrap();
    let listed = s
        .org(a)
        .devices()
        .list_devices(&windows, 10, 0)
        .await
        .unwrap()
        .0;
    assert_eq!(listed[0].os_version, "25H2");

    // Status transitions: the offline sweep, and a heartbeat bringing the device back.
    let offline = DeviceFilter {
        status: Some(DeviceStatus::Offline),
        ..Default::default()
    };
    assert!(hostnames(s, a, &offline).await.is_empty());
    cx.clock.advance(Duration::minutes(10));
    let swept = s
        .cross_org()
        .mark_stale_devices_offline(Duration::minutes(5))
        .await
        .unwrap();
    assert_eq!(swept, [agent.id]);
    assert_eq!(hostnames(s, a, &offline).await, ["renamed"]);
    s.record_heartbeat(agent.id, a, &heartbeat("0.1.0"))
        .await
        .unwrap();
    assert!(hostnames(s, a, &offline).await.is_empty());
    let online = s
        .org(a)
        .devices()
        .list_devices(
            &DeviceFilter {
                status: Some(DeviceStatus::Online),
                search: Some("renamed".into()),
                ..Default::default()
            },
            10,
            0,
        )
        .await
        .unwrap()
        .0;
    assert_eq!(online[0].last_seen_at, Some(s.clock().now()));
}

fn heartbeat(agent_version: &str) -> Heartbeat {
    Heartbeat {
        agent_version: agent_version.into(),
        uptime_secs: 60,
        pending_reboot: false,
        logged_in_users: vec![],
        running_commands: vec![],
        applied_policy: None,
    }
}

async fn heartbeats_show_after_the_presence_lag(cx: Ctx) {
    let s = &cx.store;
    let a = org(s, "org-a").await;
    let hq = site(s, a, "HQ").await;
    let dev = create(s, a, device(hq, "web")).await;
    let mut maint = device(hq, "maint");
    maint.status = DeviceStatus::Maintenance;
    let maint = create(s, a, maint).await;
    let listed = |id: DeviceId| async move {
        s.org(a)
            .devices()
            .list_devices(&DeviceFilter::default(), 10, 0)
            .await
            .unwrap()
            .0
            .into_iter()
            .find(|d| d.id == id)
            .unwrap()
    };
    assert_eq!(listed(dev.id).await.last_seen_at, None);

    cx.clock.advance(Duration::milliseconds(300));
    let beat_at: Timestamp = s.clock().now();
    s.record_heartbeat(dev.id, a, &heartbeat("0.2.0"))
        .await
        .unwrap();
    s.record_heartbeat(maint.id, a, &heartbeat("0.2.0"))
        .await
        .unwrap();
    // Within the lag the snapshot is served as it is, without a rebuild.
    let before = listed(dev.id).await;
    assert_eq!(
        (before.last_seen_at, before.agent_version.as_deref()),
        (None, Some("0.1.0"))
    );
    // Past it, a read schedules a rebuild and a later read shows the heartbeat.
    cx.clock.advance(Duration::seconds(1));
    eventually("the heartbeat to show", || async {
        listed(dev.id).await.last_seen_at == Some(beat_at)
    })
    .await;
    let after = listed(dev.id).await;
    assert_eq!(after.agent_version.as_deref(), Some("0.2.0"));
    assert_eq!(after.status, DeviceStatus::Online);
    let maint = listed(maint.id).await;
    assert_eq!(
        (maint.status, maint.last_seen_at),
        (DeviceStatus::Maintenance, Some(beat_at)),
        "a heartbeat leaves maintenance alone"
    );
}

async fn other_processes_writes_show_within_max_age(cx: Ctx) {
    let s = &cx.store;
    let a = org(s, "org-a").await;
    let hq = site(s, a, "HQ").await;
    let branch = site(s, a, "Branch").await;
    create(s, a, device(hq, "d1")).await;
    assert_eq!(all_hostnames(s, a).await, ["d1"]);

    // Stand-ins for another process: the same database through a store with its own
    // directory, and on SQLite a second connection pool on the same file.
    let mut others = vec![
        s.clone()
            .with_directory_settings(DirectorySettings::default()),
    ];
    if let Some(dir) = &cx.dir {
        let url = format!("sqlite://{}", dir.join("breeze.db").display());
        others.push(
            Store::connect(&StoreOptions::new(url), s.clock().clone())
                .await
                .unwrap(),
        );
    }
    for (i, other) in others.iter().enumerate() {
        let name = format!("d{}", i + 2);
        create(other, a, device(branch, &name)).await;
        assert!(
            all_hostnames(other, a).await.contains(&name),
            "the writer sees its own write"
        );
        // Not signalled: within max_age the snapshot is served as it is.
        assert!(!all_hostnames(s, a).await.contains(&name));
        cx.clock.advance(Duration::seconds(4));
        assert!(!all_hostnames(s, a).await.contains(&name));
        // Past max_age, a read schedules a rebuild; a later read lists the device.
        cx.clock.advance(Duration::seconds(2));
        eventually("the other process's device", || async {
            all_hostnames(s, a).await.contains(&name)
        })
        .await;
    }

    // A site renamed behind the store's back (by hand, or another process) shows the same way.
    let named = || async move {
        s.org(a)
            .devices()
            .list_devices_with_sites(&DeviceFilter::default(), 10, 0)
            .await
            .unwrap()
            .0
            .into_iter()
            .map(|(d, site)| format!("{}@{site}", d.hostname))
            .collect::<Vec<_>>()
    };
    let mut want = vec!["d1@HQ".to_owned(), "d2@Branch".to_owned()];
    if others.len() > 1 {
        want.push("d3@Branch".into());
    }
    assert_eq!(named().await, want);
    s.raw_execute(&format!(
        "UPDATE sites SET name = 'Annex' WHERE id = {}",
        id_literal(s.backend(), branch.0)
    ))
    .await
    .unwrap();
    assert_eq!(named().await, want, "within max_age");
    cx.clock.advance(Duration::seconds(6));
    let renamed: Vec<String> = want.iter().map(|w| w.replace("Branch", "Annex")).collect();
    eventually("the renamed site", || async { named().await == renamed }).await;

    // A snapshot older than max_stale is not served at all: the reader waits for a rebuild.
    create(&others[0], a, device(hq, "d9")).await;
    cx.clock.advance(Duration::seconds(61));
    assert!(all_hostnames(s, a).await.contains(&"d9".to_owned()));
    for other in others.into_iter().skip(1) {
        other.close().await;
    }
}

async fn idle_snapshots_are_dropped(cx: Ctx) {
    let s = &cx.store;
    let a = org(s, "org-a").await;
    let b = org(s, "org-b").await;
    for o in [a, b] {
        let hq = site(s, o, "HQ").await;
        create(s, o, device(hq, "web")).await;
        assert_eq!(all_hostnames(s, o).await, ["web"]);
    }
    assert_eq!(s.directory_snapshots(), 2);
    cx.clock.advance(Duration::minutes(5));
    all_hostnames(s, b).await;
    cx.clock.advance(Duration::minutes(6));
    // A was last read 11 minutes ago, B 6 minutes ago.
    all_hostnames(s, b).await;
    assert_eq!(s.directory_snapshots(), 1);
    // A dropped snapshot is simply rebuilt by its next reader.
    assert_eq!(all_hostnames(s, a).await, ["web"]);
    assert_eq!(s.directory_snapshots(), 2);
}

async fn organizations_never_mix(cx: Ctx) {
    let s = &cx.store;
    let a = org(s, "org-a").await;
    let b = org(s, "org-b").await;
    let a_site = site(s, a, "HQ").await;
    let b_site = site(s, b, "HQ").await;
    let a_group = group(s, a, "Servers").await;
    let b_group = group(s, b, "Servers").await;
    let mut ids = std::collections::HashMap::new();
    for (o, site, g) in [(a, a_site, a_group), (b, b_site, b_group)] {
        for h in ["web-01", "db-01"] {
            let mut new = device(site, h);
            new.tags = vec!["prod".into()];
            let d = create(s, o, new).await;
            s.org(o).tenancy().add_to_group(g, d.id).await.unwrap();
            ids.entry(o).or_insert_with(Vec::new).push(d.id);
        }
    }
    let listed_ids = |o: OrgId, f: DeviceFilter| async move {
        s.org(o)
            .devices()
            .list_devices(&f, 100, 0)
            .await
            .unwrap()
            .0
            .into_iter()
            .map(|d| d.id)
            .collect::<Vec<_>>()
    };
    for (o, other, other_site, other_group) in [(a, b, b_site, b_group), (b, a, a_site, a_group)] {
        let mine = listed_ids(o, DeviceFilter::default()).await;
        assert_eq!(mine.len(), 2);
        assert!(mine.iter().all(|id| ids[&o].contains(id)), "{mine:?}");
        assert!(mine.iter().all(|id| !ids[&other].contains(id)));
        // Another organization's site or group finds nothing, alone or combined.
        for f in [
            DeviceFilter {
                site_id: Some(other_site),
                ..Default::default()
            },
            DeviceFilter {
                group_id: Some(other_group),
                ..Default::default()
            },
            DeviceFilter {
                group_id: Some(other_group),
                status: Some(DeviceStatus::Online),
                tags: vec!["prod".into()],
                search: Some("web".into()),
                ..Default::default()
            },
        ] {
            assert_eq!(
                listed_ids(o, f.clone()).await,
                Vec::<DeviceId>::new(),
                "{f:?}"
            );
            assert_eq!(
                s.org(o).devices().list_devices(&f, 10, 0).await.unwrap().1,
                0
            );
        }
    }
    // A write in B leaves A's listing alone, and is listed in B at once.
    create(s, b, device(b_site, "new-in-b")).await;
    assert_eq!(listed_ids(a, DeviceFilter::default()).await.len(), 2);
    assert_eq!(listed_ids(b, DeviceFilter::default()).await.len(), 3);
    // A device of A cannot be put in B's group, and B's group lists none of A's devices.
    assert!(
        s.org(b)
            .tenancy()
            .add_to_group(b_group, ids[&a][0])
            .await
            .is_err()
    );
    assert_eq!(
        s.org(b)
            .devices()
            .group_members(b_group)
            .await
            .unwrap()
            .len(),
        2
    );
    assert!(s.org(a).devices().group_members(b_group).await.is_err());
}

async fn rebuilds_are_single_flight_and_rate_limited(cx: Ctx) {
    let s = &cx.store;
    let a = org(s, "org-a").await;
    let hq = site(s, a, "HQ").await;
    let dev = create(s, a, device(hq, "web")).await;
    assert_eq!(all_hostnames(s, a).await, ["web"]);
    assert_eq!(s.directory_rebuilds(a), 1);

    // Concurrent readers of a stale organization wait for one and the same rebuild.
    create(s, a, device(hq, "db")).await;
    let read = || all_hostnames(s, a);
    let (r1, r2, r3, r4) = tokio::join!(read(), read(), read(), read());
    for r in [r1, r2, r3, r4] {
        assert_eq!(r, ["db", "web"]);
    }
    assert_eq!(s.directory_rebuilds(a), 2);

    // A heartbeat storm costs no rebuild within the presence lag...
    for _ in 0..20 {
        s.record_heartbeat(dev.id, a, &heartbeat("0.2.0"))
            .await
            .unwrap();
        read().await;
    }
    assert_eq!(s.directory_rebuilds(a), 2);
    // ...and one (in the background) once the snapshot is older than it.
    cx.clock.advance(Duration::seconds(1));
    for _ in 0..20 {
        s.record_heartbeat(dev.id, a, &heartbeat("0.3.0"))
            .await
            .unwrap();
        read().await;
    }
    eventually("the background rebuild", || async {
        s.directory_rebuilds(a) == 3
    })
    .await;
    for _ in 0..5 {
        read().await;
        tokio::time::sleep(StdDuration::from_millis(10)).await;
    }
    assert_eq!(s.directory_rebuilds(a), 3);
}

breeze_store::on_both_backends!(
    the_directory_answers_as_the_database_does,
    listings_are_answered_without_the_database,
    writes_through_the_store_are_listed_at_once,
    heartbeats_show_after_the_presence_lag,
    other_processes_writes_show_within_max_age,
    idle_snapshots_are_dropped,
    organizations_never_mix,
    rebuilds_are_single_flight_and_rate_limited,
);
