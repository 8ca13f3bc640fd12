//! Partners, organizations, sites, groups and devices.

use breeze_core::{DeviceStatus, OsFamily};
use breeze_store::{DeviceFilter, NewDevice, StoreError};

use crate::audit;
use breeze_store::testing::Ctx;

pub(crate) fn new_device(
    site: breeze_core::SiteId,
    hostname: &str,
    status: DeviceStatus,
) -> NewDevice {
    NewDevice {
        site_id: site,
        hostname: hostname.into(),
        os_family: OsFamily::Linux,
        os_name: "Debian GNU/Linux".into(),
        os_version: "12".into(),
        status,
        agent_version: Some("0.1.0".into()),
        last_seen_at: None,
        tags: vec!["prod".into(), "web_tier".into()],
    }
}

async fn hierarchy_round_trips(cx: Ctx) {
    let s = &cx.store;
    let partner = s
        .create_partner("Acme MSP", "acme-msp", audit("partner.create", "partner"))
        .await
        .unwrap();
    assert_eq!(
        s.list_roles(partner.id).await.unwrap().len(),
        3,
        "built-in roles are created"
    );
    let org = s
        .create_organization(
            partner.id,
            "Contoso",
            "contoso",
            audit("organization.create", "organization"),
        )
        .await
        .unwrap();
    assert_eq!(s.find_organization("contoso").await.unwrap(), org);
    assert_eq!(s.find_organization(&org.id.to_string()).await.unwrap(), org);
    assert!(matches!(
        s.find_organization("nope").await,
        Err(StoreError::NotFound("organization"))
    ));

    let dup = s
        .create_organization(
            partner.id,
            "Contoso 2",
            "contoso",
            audit("organization.create", "organization"),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&dup, StoreError::Conflict(m) if m.contains("\"contoso\"")),
        "{dup}"
    );
    let bad = s
        .create_organization(
            partner.id,
            "Bad",
            "Bad Slug",
            audit("organization.create", "organization"),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&bad, StoreError::Invalid(m) if m.contains("slug")),
        "{bad}"
    );

    let o = s.org(org.id);
    let hq = o
        .tenancy()
        .create_site("HQ", "Europe/Berlin", audit("site.create", "site"))
        .await
        .unwrap();
    let branch = o
        .tenancy()
        .create_site("Branch", "UTC", audit("site.create", "site"))
        .await
        .unwrap();
    assert_eq!(
        o.tenancy().list_sites().await.unwrap(),
        vec![branch.clone(), hq.clone()]
    );

    let web = o
        .devices()
        .create_device(
            new_device(hq.id, "web-01", DeviceStatus::Online),
            audit("device.create", "device"),
        )
        .await
        .unwrap();
    let db = o
        .devices()
        .create_device(
            new_device(hq.id, "DB-01", DeviceStatus::Offline),
            audit("device.create", "device"),
        )
        .await
        .unwrap();
    let mut laptop = new_device(branch.id, "laptop-7", DeviceStatus::Maintenance);
    laptop.os_family = OsFamily::Windows;
    laptop.tags = vec!["staff".into()];
    let laptop = o
        .devices()
        .create_device(laptop, audit("device.create", "device"))
        .await
        .unwrap();
    assert_eq!(o.devices().get_device(web.id).await.unwrap(), web);

    let all = o
        .devices()
        .list_devices(&DeviceFilter::default(), 50, 0)
        .await
        .unwrap();
    assert_eq!(all.1, 3);
    assert_eq!(
        all.0
            .iter()
            .map(|d| d.hostname.as_str())
            .collect::<Vec<_>>(),
        ["DB-01", "laptop-7", "web-01"]
    );
    let past_the_end = o
        .devices()
        .list_devices(&DeviceFilter::default(), 10, 50)
        .await
        .unwrap();
    assert_eq!(
        (past_the_end.0.len(), past_the_end.1),
        (0, 3),
        "the total is known past the last page"
    );
    let (named, _) = o
        .devices()
        .list_devices_with_sites(&DeviceFilter::default(), 10, 0)
        .await
        .unwrap();
    assert_eq!(
        named
            .iter()
            .map(|(_, site)| site.as_str())
            .collect::<Vec<_>>(),
        ["HQ", "Branch", "HQ"]
    );
    let page = o
        .devices()
        .list_devices(&DeviceFilter::default(), 2, 2)
        .await
        .unwrap();
    assert_eq!((page.0.len(), page.1), (1, 3));

    let check = |f: DeviceFilter, want: Vec<&'static str>| async move {
        let got = o.devices().list_devices(&f, 50, 0).await.unwrap().0;
        assert_eq!(
            got.iter().map(|d| d.hostname.as_str()).collect::<Vec<_>>(),
            want,
            "{f:?}"
        );
    };
    check(
        DeviceFilter {
            status: Some(DeviceStatus::Offline),
            ..Default::default()
        },
        vec!["DB-01"],
    )
    .await;
    check(
        DeviceFilter {
            os_family: Some(OsFamily::Windows),
            ..Default::default()
        },
        vec!["laptop-7"],
    )
    .await;
    check(
        DeviceFilter {
            site_id: Some(branch.id),
            ..Default::default()
        },
        vec!["laptop-7"],
    )
    .await;
    check(
        DeviceFilter {
            search: Some("db".into()),
            ..Default::default()
        },
        vec!["DB-01"],
    )
    .await;
    check(
        DeviceFilter {
            search: Some("%".into()),
            ..Default::default()
        },
        vec![],
    )
    .await;
    check(
        DeviceFilter {
            tags: vec!["web_tier".into()],
            ..Default::default()
        },
        vec!["DB-01", "web-01"],
    )
    .await;
    check(
        DeviceFilter {
            tags: vec!["web".into()],
            ..Default::default()
        },
        vec![],
    )
    .await;
    check(
        DeviceFilter {
            tags: vec!["web_tier".into(), "prod".into()],
            ..Default::default()
        },
        vec!["DB-01", "web-01"],
    )
    .await;
    check(
        DeviceFilter {
            tags: vec!["web_tier".into(), "staff".into()],
            ..Default::default()
        },
        vec![],
    )
    .await;

    let group = o
        .tenancy()
        .create_group(
            "Servers",
            Some(hq.id),
            Some("all servers"),
            audit("group.create", "device_group"),
        )
        .await
        .unwrap();
    o.tenancy().add_to_group(group.id, web.id).await.unwrap();
    o.tenancy().add_to_group(group.id, db.id).await.unwrap();
    o.tenancy().add_to_group(group.id, db.id).await.unwrap(); // idempotent
    let members = o.devices().group_members(group.id).await.unwrap();
    assert_eq!(
        members.iter().map(|d| d.id).collect::<Vec<_>>(),
        vec![db.id, web.id]
    );
    check(
        DeviceFilter {
            group_id: Some(group.id),
            status: Some(DeviceStatus::Online),
            ..Default::default()
        },
        vec!["web-01"],
    )
    .await;
    assert!(
        o.tenancy()
            .remove_from_group(group.id, db.id)
            .await
            .unwrap()
    );
    assert!(
        !o.tenancy()
            .remove_from_group(group.id, db.id)
            .await
            .unwrap()
    );
    assert!(
        !o.tenancy()
            .remove_from_group(group.id, laptop.id)
            .await
            .unwrap()
    );
    assert_eq!(o.devices().group_members(group.id).await.unwrap().len(), 1);
}

async fn a_failed_change_writes_no_audit_record(cx: Ctx) {
    let s = &cx.store;
    let partner = s
        .create_partner("P", "p", audit("partner.create", "partner"))
        .await
        .unwrap();
    let org = s
        .create_organization(
            partner.id,
            "O",
            "o",
            audit("organization.create", "organization"),
        )
        .await
        .unwrap();
    let o = s.org(org.id);
    o.tenancy()
        .create_site("HQ", "UTC", audit("site.create", "site"))
        .await
        .unwrap();
    let err = o
        .tenancy()
        .create_site("HQ", "UTC", audit("site.create", "site"))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, StoreError::Conflict(m) if m.contains("HQ")),
        "{err}"
    );
    let filter = breeze_store::AuditFilter {
        action: Some("site.create".into()),
        ..Default::default()
    };
    let page = o.audit().query_audit(&filter, None, 50).await.unwrap();
    assert_eq!(
        page.records.len(),
        1,
        "the rolled-back insert left no audit record"
    );
}

breeze_store::on_both_backends!(
    hierarchy_round_trips,
    a_failed_change_writes_no_audit_record
);
