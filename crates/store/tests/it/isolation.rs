//! Organization isolation: with organization A's handle, nothing of organization B is visible
//! or changeable, not even by id.

use breeze_core::{DeviceStatus, Scope, ScopeSet};
use breeze_store::{AuditFilter, DeviceFilter, NewApiKey, NewUser, StoreError};

use crate::{audit, tenancy::new_device};
use breeze_store::testing::Ctx;

async fn org_handles_never_reach_another_organization(cx: Ctx) {
    let s = &cx.store;
    let partner = s
        .create_partner("P", "p", audit("partner.create", "partner"))
        .await
        .unwrap();
    let a = s
        .create_organization(
            partner.id,
            "A",
            "org-a",
            audit("organization.create", "organization"),
        )
        .await
        .unwrap();
    let b = s
        .create_organization(
            partner.id,
            "B",
            "org-b",
            audit("organization.create", "organization"),
        )
        .await
        .unwrap();
    let user = s
        .create_user(
            NewUser {
                partner_id: partner.id,
                org_id: None,
                email: "tech@p.test".into(),
                name: "T".into(),
                password_hash: "x".into(),
            },
            audit("user.create", "user"),
        )
        .await
        .unwrap();

    // Give both organizations the same shape of data.
    let mut ids = Vec::new();
    for org in [&a, &b] {
        let o = s.org(org.id);
        let site = o
            .tenancy()
            .create_site("HQ", "UTC", audit("site.create", "site"))
            .await
            .unwrap();
        let dev = o
            .devices()
            .create_device(
                new_device(site.id, "web-01", DeviceStatus::Online),
                audit("device.create", "device"),
            )
            .await
            .unwrap();
        let group = o
            .tenancy()
            .create_group("Servers", None, None, audit("group.create", "device_group"))
            .await
            .unwrap();
        o.tenancy().add_to_group(group.id, dev.id).await.unwrap();
        let key = s
            .insert_api_key(
                NewApiKey {
                    org_id: org.id,
                    user_id: user.id,
                    name: format!("key of {}", org.slug),
                    key_hash: *[
                        uuid::Uuid::now_v7().into_bytes(),
                        uuid::Uuid::now_v7().into_bytes(),
                    ]
                    .concat()
                    .first_chunk()
                    .unwrap(),
                    key_prefix: "brz_abcd".into(),
                    scopes: ScopeSet::new([Scope::AiRead]),
                    expires_at: None,
                },
                audit("api_key.create", "api_key"),
            )
            .await
            .unwrap();
        ids.push((site, dev, group, key));
    }
    let (a_site, a_dev, a_group, a_key) = &ids[0];
    let (b_site, b_dev, b_group, b_key) = &ids[1];
    let oa = s.org(a.id);

    // Listings hold only A's rows.
    assert_eq!(oa.tenancy().organization().await.unwrap().id, a.id);
    assert_eq!(
        oa.tenancy().list_sites().await.unwrap(),
        vec![a_site.clone()]
    );
    let (devices, total) = oa
        .devices()
        .list_devices(&DeviceFilter::default(), 100, 0)
        .await
        .unwrap();
    assert_eq!((devices, total), (vec![a_dev.clone()], 1));
    assert_eq!(
        oa.tenancy().list_groups().await.unwrap(),
        vec![a_group.clone()]
    );
    assert_eq!(
        oa.api_keys().list_api_keys().await.unwrap(),
        vec![a_key.clone()]
    );
    let audit_page = oa
        .audit()
        .query_audit(&AuditFilter::default(), None, 500)
        .await
        .unwrap();
    assert!(!audit_page.records.is_empty());
    assert!(
        audit_page
            .records
            .iter()
            .all(|r| r.event.org_id == Some(a.id))
    );

    // Lookups by B's ids answer "not found", exactly as for ids that do not exist.
    assert!(matches!(
        oa.tenancy().get_site(b_site.id).await,
        Err(StoreError::NotFound("site"))
    ));
    assert!(matches!(
        oa.devices().get_device(b_dev.id).await,
        Err(StoreError::NotFound("device"))
    ));
    assert!(matches!(
        oa.tenancy().get_group(b_group.id).await,
        Err(StoreError::NotFound("device group"))
    ));
    assert!(matches!(
        oa.devices().group_members(b_group.id).await,
        Err(StoreError::NotFound("device group"))
    ));
    assert!(matches!(
        oa.api_keys().get_api_key(b_key.id).await,
        Err(StoreError::NotFound("API key"))
    ));
    let by_site = DeviceFilter {
        site_id: Some(b_site.id),
        ..Default::default()
    };
    assert_eq!(
        oa.devices().list_devices(&by_site, 100, 0).await.unwrap().1,
        0
    );
    let by_group = DeviceFilter {
        group_id: Some(b_group.id),
        ..Default::default()
    };
    assert_eq!(
        oa.devices()
            .list_devices(&by_group, 100, 0)
            .await
            .unwrap()
            .1,
        0
    );
    let b_resource = AuditFilter {
        resource_id: Some(b_dev.id.to_string()),
        ..Default::default()
    };
    assert!(
        oa.audit()
            .query_audit(&b_resource, None, 500)
            .await
            .unwrap()
            .records
            .is_empty()
    );

    // Changes aimed at B's rows through A's handle are refused and change nothing.
    assert!(matches!(
        oa.api_keys()
            .revoke_api_key(b_key.id, audit("api_key.revoke", "api_key"))
            .await,
        Err(StoreError::NotFound(_))
    ));
    assert_eq!(
        s.org(b.id)
            .api_keys()
            .get_api_key(b_key.id)
            .await
            .unwrap()
            .revoked_at,
        None
    );
    assert!(matches!(
        oa.tenancy().add_to_group(a_group.id, b_dev.id).await,
        Err(StoreError::NotFound("device"))
    ));
    assert!(matches!(
        oa.tenancy().add_to_group(b_group.id, a_dev.id).await,
        Err(StoreError::NotFound("device group"))
    ));
    assert!(
        !oa.tenancy()
            .remove_from_group(b_group.id, b_dev.id)
            .await
            .unwrap()
    );
    assert_eq!(
        s.org(b.id)
            .devices()
            .group_members(b_group.id)
            .await
            .unwrap()
            .len(),
        1
    );
    let into_b_site = oa
        .devices()
        .create_device(
            new_device(b_site.id, "sneaky", DeviceStatus::Online),
            audit("device.create", "device"),
        )
        .await;
    assert!(matches!(into_b_site, Err(StoreError::NotFound("site"))));
    let group_in_b_site = oa
        .tenancy()
        .create_group(
            "X",
            Some(b_site.id),
            None,
            audit("group.create", "device_group"),
        )
        .await;
    assert!(matches!(group_in_b_site, Err(StoreError::NotFound("site"))));
    assert_eq!(
        s.org(b.id)
            .devices()
            .list_devices(&DeviceFilter::default(), 100, 0)
            .await
            .unwrap()
            .1,
        1
    );
}

async fn the_schema_itself_rejects_cross_organization_links(cx: Ctx) {
    // Even a statement that bypasses OrgStore cannot put a device of A into a site of B:
    // the composite foreign keys (site_id, org_id) forbid it.
    let s = &cx.store;
    let partner = s
        .create_partner("P", "p", audit("partner.create", "partner"))
        .await
        .unwrap();
    let a = s
        .create_organization(
            partner.id,
            "A",
            "org-a",
            audit("organization.create", "organization"),
        )
        .await
        .unwrap();
    let b = s
        .create_organization(
            partner.id,
            "B",
            "org-b",
            audit("organization.create", "organization"),
        )
        .await
        .unwrap();
    let a_site = s
        .org(a.id)
        .tenancy()
        .create_site("HQ", "UTC", audit("site.create", "site"))
        .await
        .unwrap();
    let b_site = s
        .org(b.id)
        .tenancy()
        .create_site("HQ", "UTC", audit("site.create", "site"))
        .await
        .unwrap();
    let a_dev = s
        .org(a.id)
        .devices()
        .create_device(
            new_device(a_site.id, "d", DeviceStatus::Online),
            audit("device.create", "device"),
        )
        .await
        .unwrap();
    let hex = |u: uuid::Uuid| u.simple().to_string();
    let (site_lit, org_lit, dev_lit) = match s.backend() {
        breeze_store::Backend::Sqlite => (
            format!("x'{}'", hex(b_site.id.0)),
            format!("x'{}'", hex(a.id.0)),
            format!("x'{}'", hex(a_dev.id.0)),
        ),
        breeze_store::Backend::Postgres => (
            format!("'{}'", b_site.id),
            format!("'{}'", a.id),
            format!("'{}'", a_dev.id),
        ),
    };
    let err = s
        .raw_execute(&format!(
            "UPDATE devices SET site_id = {site_lit} WHERE id = {dev_lit} AND org_id = {org_lit}"
        ))
        .await
        .unwrap_err();
    assert!(
        err.to_string().to_lowercase().contains("foreign key"),
        "{err}"
    );
}

breeze_store::on_both_backends!(
    org_handles_never_reach_another_organization,
    the_schema_itself_rejects_cross_organization_links
);
