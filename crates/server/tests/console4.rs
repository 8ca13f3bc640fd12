//! The console's organization and patch actions added for issue #54, driven in-process on both
//! backends: revoking an enrollment key (the REST `DELETE`'s operation and store call), editing
//! a group (`manage_groups update`), giving a person a role here (never beyond the giver's own
//! rights, never over a partner-wide role), and installing a device's
//! approved updates now (`manage_patches install`), configuration policies created, edited,
//! assigned and unassigned, scheduled-script automations created, disabled and enabled, and
//! notification channels listed, added and deleted.
//! Each is held to organization isolation
//! (another organization's ids are 404), CSRF (a forged post is refused) and the one
//! permission model (a person without the right sees no button, and a post of theirs is
//! refused).
#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod common;

use axum::http::StatusCode;
use breeze_agent_proto::{AvailablePatch, PatchScanReport};
use breeze_core::{DeviceId, OrgId};
use breeze_store::testing::Ctx;
use common::browser::{
    admin_of, get, html, location, outcome, person, post_form, role_of, sign_in,
};
use common::{World, audit_records, world};

async fn enrollment_key(w: &World, org: OrgId, name: &str) -> uuid::Uuid {
    let site = w.store.org(org).tenancy().list_sites().await.unwrap()[0].id;
    let (_, record) = w
        .state
        .auth
        .create_enrollment_key(
            breeze_auth::CreateEnrollmentKey {
                org_id: org,
                site_id: site,
                name: name.into(),
                max_uses: None,
                expires_at: w.state.clock.now() + chrono::Duration::hours(24),
                created_by: "test".into(),
            },
            common::audit("enrollment_key.create"),
        )
        .await
        .unwrap();
    record.id
}

async fn revoked(w: &World, org: OrgId, id: uuid::Uuid) -> bool {
    w.store
        .org(org)
        .agents()
        .get_enrollment_key(id)
        .await
        .unwrap()
        .revoked_at
        .is_some()
}

async fn enrollment_keys_are_revoked(cx: Ctx) {
    let w = world(&cx).await;
    let admin = sign_in(&w.app, "admin@p.test").await;
    let key = enrollment_key(&w, w.org_a, "Laptops").await;
    let r = get(&w.app, "/o/org-a/enrollment", &admin.cookie).await;
    assert_eq!(r.status, StatusCode::OK);
    let revoke = format!("/o/org-a/enrollment/{key}/revoke");
    assert!(
        html(&r).contains(&format!("action=\"{revoke}\"")),
        "{}",
        r.body
    );
    assert!(html(&r).contains("aria-label=\"Revoke the key Laptops\""));

    // Read Only (no devices.write): the page itself is refused, and so is the post.
    let viewer = sign_in(&w.app, "viewer@p.test").await;
    let r = get(&w.app, "/o/org-a/enrollment", &viewer.cookie).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    let r = viewer.post(&w.app, &revoke, &[]).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    // A forged post (no CSRF token) is refused.
    let r = post_form(&w.app, &revoke, &admin.cookie, &[("x", "y")]).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert!(!revoked(&w, w.org_a, key).await);

    // Another organization's key through A's URL, and B's URL for a person of A only.
    let b_key = enrollment_key(&w, w.org_b, "B keys").await;
    for uri in [
        format!("/o/org-a/enrollment/{b_key}/revoke"),
        "/o/org-a/enrollment/not-a-uuid/revoke".to_owned(),
    ] {
        let r = admin.post(&w.app, &uri, &[]).await;
        assert_eq!(r.status, StatusCode::NOT_FOUND, "{uri}");
        assert!(html(&r).contains("<!doctype html"));
    }
    admin_of(&w, "ops@p.test", w.org_a).await;
    let ops = sign_in(&w.app, "ops@p.test").await;
    let r = ops
        .post(&w.app, &format!("/o/org-b/enrollment/{b_key}/revoke"), &[])
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert!(!revoked(&w, w.org_b, b_key).await);

    // A technician (devices.write) revokes: stored, audited once, no button afterwards.
    let (_, tech) = person(&w, "tech@p.test", "Technician").await;
    let r = tech.post(&w.app, &revoke, &[]).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    assert!(outcome(&r, "done").contains("Laptops"), "{}", location(&r));
    assert!(revoked(&w, w.org_a, key).await);
    assert_eq!(
        audit_records(&w, w.org_a, "enrollment_key.revoke")
            .await
            .len(),
        1
    );
    let r = get(&w.app, "/o/org-a/enrollment", &tech.cookie).await;
    assert!(!html(&r).contains(&format!("action=\"{revoke}\"")));
    assert!(html(&r).contains("revoked"));
    // B's key is untouched throughout.
    assert!(!revoked(&w, w.org_b, b_key).await);
}

async fn groups_are_edited(cx: Ctx) {
    let w = world(&cx).await;
    let admin = sign_in(&w.app, "admin@p.test").await;
    let g = w
        .store
        .org(w.org_a)
        .tenancy()
        .create_group("Web", None, Some("web servers"), common::audit("g"))
        .await
        .unwrap();
    let uri = format!("/o/org-a/groups/{}", g.id);
    let r = get(&w.app, &uri, &admin.cookie).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(html(&r).contains("id=\"edit-group\""));
    // The filter is previewed on the groups page, by the existing preview.
    assert!(html(&r).contains("id=\"edit-preview\""));
    assert!(html(&r).contains("action=\"/o/org-a/groups\""));
    // A filter that is not JSON is named, and nothing changes.
    let r = admin
        .post(
            &w.app,
            &uri,
            &[("name", "Web"), ("description", ""), ("filter", "{nope")],
        )
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
    assert!(outcome(&r, "failed").starts_with("Filter:"));
    // Renamed and made dynamic through manage_groups update.
    let f = r#"{"match":"all","conditions":[{"field":"os","op":"eq","value":"linux"}]}"#;
    let r = admin
        .post(
            &w.app,
            &uri,
            &[
                ("name", "Linux web"),
                ("description", "every Linux box"),
                ("filter", f),
            ],
        )
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
    assert!(!outcome(&r, "done").is_empty(), "{}", location(&r));
    let store = w.store.org(w.org_a);
    let g2 = store.tenancy().get_group(g.id).await.unwrap();
    assert_eq!(g2.name, "Linux web");
    assert_eq!(g2.description.as_deref(), Some("every Linux box"));
    assert!(
        store
            .dynamic_groups()
            .group_filter(g.id)
            .await
            .unwrap()
            .is_some()
    );
    assert_eq!(
        audit_records(&w, w.org_a, "device_group.update")
            .await
            .len(),
        1
    );
    let r = get(&w.app, &uri, &admin.cookie).await;
    assert!(html(&r).contains("dynamic") && html(&r).contains("web-01"));
    // The edit form starts from the stored filter.
    let page = html(&r).replace("&#34;", "\"").replace("&quot;", "\"");
    assert!(page.contains("\"value\": \"linux\""), "{page}");

    // Read Only: the page without the form; a post refused; a forged post refused.
    let viewer = sign_in(&w.app, "viewer@p.test").await;
    let r = get(&w.app, &uri, &viewer.cookie).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(!html(&r).contains("id=\"edit-group\""));
    let r = viewer.post(&w.app, &uri, &[("name", "Mine")]).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    let r = post_form(&w.app, &uri, &admin.cookie, &[("name", "Forged")]).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert_eq!(
        store.tenancy().get_group(g.id).await.unwrap().name,
        "Linux web"
    );

    // Another organization's group through A's URL, and B's URL for a person of A only.
    let bg = w
        .store
        .org(w.org_b)
        .tenancy()
        .create_group("B", None, None, common::audit("g"))
        .await
        .unwrap();
    let r = admin
        .post(
            &w.app,
            &format!("/o/org-a/groups/{}", bg.id),
            &[("name", "Taken")],
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    admin_of(&w, "ops@p.test", w.org_a).await;
    let ops = sign_in(&w.app, "ops@p.test").await;
    let b_uri = format!("/o/org-b/groups/{}", bg.id);
    let r = get(&w.app, &b_uri, &ops.cookie).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    let r = ops.post(&w.app, &b_uri, &[("name", "Taken")]).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert_eq!(
        w.store
            .org(w.org_b)
            .tenancy()
            .get_group(bg.id)
            .await
            .unwrap()
            .name,
        "B"
    );
}

async fn roles_are_assigned(cx: Ctx) {
    let w = world(&cx).await;
    let partner = w.store.find_partner("p").await.unwrap();
    let technician = w.store.find_role(partner.id, "Technician").await.unwrap();
    let read_only = w.store.find_role(partner.id, "Read Only").await.unwrap();
    let admin = sign_in(&w.app, "admin@p.test").await;
    let (tech_id, tech) = person(&w, "tech@p.test", "Technician").await;
    let viewer_id = w
        .store
        .find_user_for_login("viewer@p.test")
        .await
        .unwrap()
        .unwrap()
        .user
        .id;
    let r = get(&w.app, "/o/org-a/people", &admin.cookie).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(html(&r).contains("id=\"assign-role\""));
    assert!(html(&r).contains(&format!("value=\"{viewer_id}\"")));
    let (v, t) = (viewer_id.to_string(), technician.id.to_string());
    let r = admin
        .post(
            &w.app,
            "/o/org-a/people/role",
            &[("user", &v), ("role", &t)],
        )
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    assert!(
        outcome(&r, "done").contains("Technician"),
        "{}",
        location(&r)
    );
    assert_eq!(role_of(&w, viewer_id, w.org_a).await, technician.id);
    assert_eq!(
        audit_records(&w, w.org_a, "user.role.assign").await.len(),
        1
    );

    // A technician (no users.manage): no page, no post.
    let r = get(&w.app, "/o/org-a/people", &tech.cookie).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    let ro = read_only.id.to_string();
    let r = tech
        .post(
            &w.app,
            "/o/org-a/people/role",
            &[("user", &v), ("role", &ro)],
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    // A forged post is refused.
    let r = post_form(
        &w.app,
        "/o/org-a/people/role",
        &admin.cookie,
        &[("user", &v), ("role", &ro)],
    )
    .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert_eq!(role_of(&w, viewer_id, w.org_a).await, technician.id);
    assert_eq!(role_of(&w, tech_id, w.org_a).await, technician.id);

    // Isolation: a person who does not reach A, and a role id of nobody, are not found; a
    // person of A only cannot give roles in B.
    admin_of(&w, "bonly@p.test", w.org_b).await;
    let b_only = w
        .store
        .find_user_for_login("bonly@p.test")
        .await
        .unwrap()
        .unwrap()
        .user
        .id;
    let b = b_only.to_string();
    let r = admin
        .post(
            &w.app,
            "/o/org-a/people/role",
            &[("user", &b), ("role", &t)],
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert!(w.store.org_access(b_only, w.org_a).await.unwrap().is_none());
    let nobody = uuid::Uuid::new_v4().to_string();
    let r = admin
        .post(
            &w.app,
            "/o/org-a/people/role",
            &[("user", &v), ("role", &nobody)],
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    admin_of(&w, "ops@p.test", w.org_a).await;
    let ops = sign_in(&w.app, "ops@p.test").await;
    let r = get(&w.app, "/o/org-b/people", &ops.cookie).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    let r = ops
        .post(
            &w.app,
            "/o/org-b/people/role",
            &[("user", &b), ("role", &ro)],
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert_ne!(role_of(&w, b_only, w.org_b).await, read_only.id);

    // Someone who reaches A through a partner-wide role keeps it: the partner changes it.
    let pw = w
        .store
        .create_user(
            breeze_store::NewUser {
                partner_id: partner.id,
                org_id: None,
                email: "pw@p.test".into(),
                name: "Partner wide".into(),
                password_hash: "x".into(),
            },
            common::audit("u"),
        )
        .await
        .unwrap();
    w.store
        .assign_partner_role(pw.id, technician.id, common::audit("r"))
        .await
        .unwrap();
    let r = get(&w.app, "/o/org-a/people", &admin.cookie).await;
    assert!(html(&r).contains("pw@p.test"));
    assert!(
        !html(&r).contains(&format!("value=\"{}\"", pw.id)),
        "not offered"
    );
    let p = pw.id.to_string();
    let r = admin
        .post(
            &w.app,
            "/o/org-a/people/role",
            &[("user", &p), ("role", &ro)],
        )
        .await;
    assert!(
        outcome(&r, "failed").contains("partner-wide"),
        "{}",
        location(&r)
    );
    assert_eq!(role_of(&w, pw.id, w.org_a).await, technician.id);
}

async fn seed_scan(w: &World, org: OrgId, device: &str) {
    let d: DeviceId = device.parse().unwrap();
    w.store
        .record_patch_scan(
            d,
            org,
            &PatchScanReport {
                manager: "apt".into(),
                scanned_at: w.state.clock.now(),
                patches: vec![AvailablePatch {
                    name: "openssl".into(),
                    installed_version: Some("3.0.1".into()),
                    available_version: "3.0.2".into(),
                    arch: None,
                    source: None,
                    security: true,
                    severity: Some("important".into()),
                    advisory: None,
                }],
                reboot_required: false,
                logged_in_users: vec![],
            },
        )
        .await
        .unwrap();
}

async fn approved_patches_are_installed_now(cx: Ctx) {
    let w = world(&cx).await;
    seed_scan(&w, w.org_a, &w.a_device).await;
    seed_scan(&w, w.org_b, &w.b_device).await;
    let admin = sign_in(&w.app, "admin@p.test").await;
    // Nothing approved yet: nothing to install.
    let r = get(&w.app, "/o/org-a/patches?view=device", &admin.cookie).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(!html(&r).contains("id=\"installable\""));
    let r = admin
        .post(
            &w.app,
            "/o/org-a/patches/decide",
            &[("decision", "approve"), ("package", "openssl")],
        )
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
    let r = get(&w.app, "/o/org-a/patches?view=device", &admin.cookie).await;
    assert!(html(&r).contains("id=\"installable\""), "{}", r.body);
    assert!(html(&r).contains(&format!("id=\"install-{}\"", w.a_device)));
    assert!(html(&r).contains("Install now"));

    // Read Only: the list without the button; a post refused; a forged post refused.
    let viewer = sign_in(&w.app, "viewer@p.test").await;
    let r = get(&w.app, "/o/org-a/patches?view=device", &viewer.cookie).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(html(&r).contains("id=\"installable\""));
    assert!(!html(&r).contains("Install now"));
    let r = viewer
        .post(
            &w.app,
            "/o/org-a/patches/install",
            &[("device", &w.a_device)],
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    let r = post_form(
        &w.app,
        "/o/org-a/patches/install",
        &admin.cookie,
        &[("device", &w.a_device)],
    )
    .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    // Another organization's device through A's URL, and B's URL for a person of A only.
    let r = admin
        .post(
            &w.app,
            "/o/org-a/patches/install",
            &[("device", &w.b_device)],
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    admin_of(&w, "ops@p.test", w.org_a).await;
    let ops = sign_in(&w.app, "ops@p.test").await;
    let r = ops
        .post(
            &w.app,
            "/o/org-b/patches/install",
            &[("device", &w.b_device)],
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    for org in [w.org_a, w.org_b] {
        let jobs = w
            .store
            .org(org)
            .patches()
            .list_patch_jobs(10)
            .await
            .unwrap();
        assert!(jobs.is_empty());
    }

    // Install now: manage_patches install through the pipeline, one job for the device.
    let r = admin
        .post(
            &w.app,
            "/o/org-a/patches/install",
            &[("device", &w.a_device)],
        )
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
    assert!(
        location(&r).starts_with("/o/org-a/patches?view=device"),
        "{}",
        location(&r)
    );
    assert!(!outcome(&r, "done").is_empty(), "{}", location(&r));
    let store = w.store.org(w.org_a);
    let jobs = store.patches().list_patch_jobs(10).await.unwrap();
    assert_eq!(jobs.len(), 1);
    let (_, devices) = store.patches().get_patch_job(jobs[0].id).await.unwrap();
    assert_eq!(devices.len(), 1);
    assert_eq!(devices[0].device_id.to_string(), w.a_device);
    assert_eq!(devices[0].packages, serde_json::json!(["openssl"]));
}

fn b_policy(name: &str) -> breeze_store::NewConfigPolicy {
    breeze_store::NewConfigPolicy {
        name: name.into(),
        description: None,
        status: breeze_core::PolicyStatus::Active,
        settings: vec![(
            breeze_core::FeatureType::Monitoring,
            serde_json::json!({ "metricIntervalSeconds": 30 }),
        )],
        created_by: "test".into(),
    }
}

async fn configuration_policies_are_created_edited_and_assigned(cx: Ctx) {
    let w = world(&cx).await;
    let admin = sign_in(&w.app, "admin@p.test").await;
    let r = get(&w.app, "/o/org-a/policies", &admin.cookie).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(html(&r).contains("id=\"new-policy\""));
    // A feature that does not exist is named; nothing is stored.
    let r = admin
        .post(
            &w.app,
            "/o/org-a/policies",
            &[
                ("name", "Fast"),
                ("status", "active"),
                ("settings", r#"{"nope": {}}"#),
            ],
        )
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
    assert!(
        outcome(&r, "failed").starts_with("Settings:"),
        "{}",
        location(&r)
    );
    let r = admin
        .post(
            &w.app,
            "/o/org-a/policies",
            &[
                ("name", "Fast metrics"),
                ("description", ""),
                ("status", "active"),
                (
                    "settings",
                    r#"{"monitoring": {"metricIntervalSeconds": 30}}"#,
                ),
            ],
        )
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    assert!(!outcome(&r, "done").is_empty(), "{}", location(&r));
    let store = w.store.org(w.org_a);
    let list = store
        .config_policies()
        .list_config_policies(None)
        .await
        .unwrap();
    assert_eq!(list.len(), 1);
    let id = list[0].id;
    assert_eq!(
        audit_records(&w, w.org_a, "config_policy.create")
            .await
            .len(),
        1
    );
    // Edited on its page: a value the store refuses is named, then a good one is saved.
    let uri = format!("/o/org-a/policies/{id}");
    let r = get(&w.app, &uri, &admin.cookie).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(html(&r).contains("id=\"edit-policy\""));
    let r = admin
        .post(
            &w.app,
            &uri,
            &[
                ("name", "Fast metrics"),
                ("status", "active"),
                (
                    "settings",
                    r#"{"monitoring": {"metricIntervalSeconds": 1}}"#,
                ),
            ],
        )
        .await;
    assert!(!outcome(&r, "failed").is_empty(), "{}", location(&r));
    let r = admin
        .post(
            &w.app,
            &uri,
            &[
                ("name", "Slow metrics"),
                ("status", "inactive"),
                (
                    "settings",
                    r#"{"monitoring": {"metricIntervalSeconds": 120}}"#,
                ),
            ],
        )
        .await;
    assert!(!outcome(&r, "done").is_empty(), "{}", location(&r));
    let p = store
        .config_policies()
        .list_config_policies(None)
        .await
        .unwrap();
    assert_eq!(p[0].name, "Slow metrics");
    assert_eq!(p[0].status.as_str(), "inactive");
    assert_eq!(
        audit_records(&w, w.org_a, "config_policy.update")
            .await
            .len(),
        1
    );
    // Assigned to the organization (apply_configuration_policy), and to the device from its
    // configuration page; each removed again.
    let pid = id.to_string();
    let org_target = format!("organization:{}", w.org_a);
    let r = admin
        .post(
            &w.app,
            "/o/org-a/policies/assign",
            &[("policy", &pid), ("target", &org_target), ("priority", "5")],
        )
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
    assert!(!outcome(&r, "done").is_empty(), "{}", location(&r));
    let conf = format!("/o/org-a/devices/{}/configuration", w.a_device);
    let r = get(&w.app, &conf, &admin.cookie).await;
    assert!(html(&r).contains("id=\"assign-policy\""));
    let dev_target = format!("device:{}", w.a_device);
    let r = admin
        .post(
            &w.app,
            "/o/org-a/policies/assign",
            &[("policy", &pid), ("target", &dev_target), ("back", &conf)],
        )
        .await;
    assert!(location(&r).starts_with(&conf), "{}", location(&r));
    assert!(!outcome(&r, "done").is_empty(), "{}", location(&r));
    let assignments = store
        .config_policies()
        .list_config_assignments()
        .await
        .unwrap();
    assert_eq!(assignments.len(), 2);
    let r = get(&w.app, "/o/org-a/policies", &admin.cookie).await;
    let remove = format!("/o/org-a/policies/assignments/{}/remove", assignments[0].id);
    assert!(html(&r).contains(&format!("action=\"{remove}\"")));
    let r = admin.post(&w.app, &remove, &[]).await;
    assert!(!outcome(&r, "done").is_empty(), "{}", location(&r));
    assert_eq!(
        store
            .config_policies()
            .list_config_assignments()
            .await
            .unwrap()
            .len(),
        1
    );

    // Read Only: no forms; every post refused; forged posts refused.
    let viewer = sign_in(&w.app, "viewer@p.test").await;
    let r = get(&w.app, "/o/org-a/policies", &viewer.cookie).await;
    assert_eq!(r.status, StatusCode::OK);
    for id in ["new-policy", "assign-policy", "/remove\""] {
        assert!(!html(&r).contains(id), "{id}");
    }
    let r = get(&w.app, &uri, &viewer.cookie).await;
    assert!(!html(&r).contains("id=\"edit-policy\""));
    let last = store
        .config_policies()
        .list_config_assignments()
        .await
        .unwrap()[0]
        .id;
    let last_remove = format!("/o/org-a/policies/assignments/{last}/remove");
    let posts: [(&str, Vec<(&str, &str)>); 4] = [
        (
            "/o/org-a/policies",
            vec![("name", "Mine"), ("status", "active")],
        ),
        (uri.as_str(), vec![("name", "Mine"), ("status", "active")]),
        (
            "/o/org-a/policies/assign",
            vec![("policy", pid.as_str()), ("target", org_target.as_str())],
        ),
        (last_remove.as_str(), vec![]),
    ];
    for (u, form) in &posts {
        let r = viewer.post(&w.app, u, form).await;
        assert_eq!(r.status, StatusCode::FORBIDDEN, "{u}");
        let r = post_form(&w.app, u, &admin.cookie, form).await;
        assert_eq!(r.status, StatusCode::FORBIDDEN, "forged {u}");
    }
    assert_eq!(
        store
            .config_policies()
            .list_config_policies(None)
            .await
            .unwrap()[0]
            .name,
        "Slow metrics"
    );
    assert_eq!(
        store
            .config_policies()
            .list_config_assignments()
            .await
            .unwrap()
            .len(),
        1
    );

    // Another organization: its policy, assignment, device and group through A's URLs.
    let ob = w.store.org(w.org_b);
    let bp = ob
        .config_policies()
        .create_config_policy(b_policy("B policy"), common::audit("c"))
        .await
        .unwrap();
    let b_assign = common::ok(
        &w.app,
        &common::api_key(
            &w,
            w.org_b,
            w.admin,
            &[breeze_core::Scope::AiRead, breeze_core::Scope::AiWrite],
        )
        .await,
        "apply_configuration_policy",
        serde_json::json!({ "configPolicyId": bp.id.to_string(), "level": "organization",
            "targetId": w.org_b.to_string() }),
    )
    .await;
    let b_assignment = b_assign["assignment"]["id"].as_str().unwrap().to_owned();
    let bg = ob
        .tenancy()
        .create_group("B", None, None, common::audit("g"))
        .await
        .unwrap();
    let bpid = bp.id.to_string();
    let b_dev = format!("device:{}", w.b_device);
    let b_group = format!("group:{}", bg.id);
    let b_org = format!("organization:{}", w.org_b);
    for (u, form) in [
        (
            format!("/o/org-a/policies/{bpid}"),
            vec![("name", "x"), ("status", "active")],
        ),
        (
            "/o/org-a/policies/assign".to_owned(),
            vec![("policy", bpid.as_str()), ("target", org_target.as_str())],
        ),
        (
            "/o/org-a/policies/assign".to_owned(),
            vec![("policy", pid.as_str()), ("target", b_dev.as_str())],
        ),
        (
            "/o/org-a/policies/assign".to_owned(),
            vec![("policy", pid.as_str()), ("target", b_group.as_str())],
        ),
        (
            "/o/org-a/policies/assign".to_owned(),
            vec![("policy", pid.as_str()), ("target", b_org.as_str())],
        ),
        (
            format!("/o/org-a/policies/assignments/{b_assignment}/remove"),
            vec![],
        ),
    ] {
        let r = admin.post(&w.app, &u, &form).await;
        assert_eq!(r.status, StatusCode::NOT_FOUND, "{u} {form:?}");
    }
    let r = get(&w.app, &format!("/o/org-a/policies/{bpid}"), &admin.cookie).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    admin_of(&w, "ops@p.test", w.org_a).await;
    let ops = sign_in(&w.app, "ops@p.test").await;
    let r = get(&w.app, &format!("/o/org-b/policies/{bpid}"), &ops.cookie).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    let r = ops
        .post(
            &w.app,
            &format!("/o/org-b/policies/assignments/{b_assignment}/remove"),
            &[],
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert_eq!(
        ob.config_policies()
            .list_config_assignments()
            .await
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        store
            .config_policies()
            .list_config_assignments()
            .await
            .unwrap()
            .len(),
        1
    );
}

async fn automations_are_created_and_switched(cx: Ctx) {
    let w = world(&cx).await;
    let admin = sign_in(&w.app, "admin@p.test").await;
    let new_script = |name: &str| breeze_store::NewScript {
        name: name.into(),
        description: String::new(),
        language: "sh".into(),
        category: "general".into(),
        body: "true".into(),
        parameters: vec![],
        created_by: "t".into(),
    };
    let script = w
        .store
        .org(w.org_a)
        .scripts()
        .create_script(new_script("Clean"), common::audit("s"))
        .await
        .unwrap()
        .id
        .to_string();
    let r = get(&w.app, "/o/org-a/automations", &admin.cookie).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(html(&r).contains("id=\"new-automation\""));
    let r = admin
        .post(
            &w.app,
            "/o/org-a/automations",
            &[
                ("name", "Nightly clean"),
                ("script", &script),
                ("target", "organization"),
                ("cron", "0 3 * * *"),
                ("time_zone", "Europe/Paris"),
            ],
        )
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
    assert!(!outcome(&r, "done").is_empty(), "{}", location(&r));
    let store = w.store.org(w.org_a);
    let list = store.automations().list_automations().await.unwrap();
    assert_eq!(list.len(), 1);
    assert!(list[0].enabled);
    assert_eq!(list[0].time_zone, "Europe/Paris");
    let a = list[0].id;
    // A cron the tool refuses is reported, and nothing more is stored.
    let r = admin
        .post(
            &w.app,
            "/o/org-a/automations",
            &[
                ("name", "Bad"),
                ("script", &script),
                ("target", "organization"),
                ("cron", "every night"),
            ],
        )
        .await;
    assert!(!outcome(&r, "failed").is_empty(), "{}", location(&r));
    assert_eq!(
        store.automations().list_automations().await.unwrap().len(),
        1
    );
    // Disabled, then enabled again.
    let switch = format!("/o/org-a/automations/{a}/switch");
    let r = get(&w.app, "/o/org-a/automations", &admin.cookie).await;
    assert!(html(&r).contains("aria-label=\"Disable Nightly clean\""));
    let r = admin.post(&w.app, &switch, &[("to", "disable")]).await;
    assert!(!outcome(&r, "done").is_empty(), "{}", location(&r));
    assert!(!store.automations().get_automation(a).await.unwrap().enabled);
    let r = get(&w.app, "/o/org-a/automations", &admin.cookie).await;
    assert!(html(&r).contains("aria-label=\"Enable Nightly clean\""));
    let r = admin.post(&w.app, &switch, &[("to", "enable")]).await;
    assert!(!outcome(&r, "done").is_empty(), "{}", location(&r));
    assert!(store.automations().get_automation(a).await.unwrap().enabled);

    // Read Only: no form, no buttons; posts refused; forged posts refused.
    let viewer = sign_in(&w.app, "viewer@p.test").await;
    let r = get(&w.app, "/o/org-a/automations", &viewer.cookie).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(!html(&r).contains("id=\"new-automation\""));
    assert!(!html(&r).contains("/switch\""));
    for (u, form) in [
        (
            "/o/org-a/automations",
            vec![
                ("name", "Mine"),
                ("script", script.as_str()),
                ("target", "organization"),
                ("cron", "0 3 * * *"),
            ],
        ),
        (switch.as_str(), vec![("to", "disable")]),
    ] {
        let r = viewer.post(&w.app, u, &form).await;
        assert_eq!(r.status, StatusCode::FORBIDDEN, "{u}");
        let r = post_form(&w.app, u, &admin.cookie, &form).await;
        assert_eq!(r.status, StatusCode::FORBIDDEN, "forged {u}");
    }
    assert!(store.automations().get_automation(a).await.unwrap().enabled);
    assert_eq!(
        store.automations().list_automations().await.unwrap().len(),
        1
    );

    // Another organization: its script, group and automation through A's URLs.
    let ob = w.store.org(w.org_b);
    let b_script = ob
        .scripts()
        .create_script(new_script("B"), common::audit("s"))
        .await
        .unwrap()
        .id
        .to_string();
    let bg = ob
        .tenancy()
        .create_group("B", None, None, common::audit("g"))
        .await
        .unwrap();
    let b_key = common::api_key(
        &w,
        w.org_b,
        w.admin,
        &[breeze_core::Scope::AiRead, breeze_core::Scope::AiWrite],
    )
    .await;
    let made = common::ok(
        &w.app,
        &b_key,
        "manage_automations",
        serde_json::json!({ "action": "create", "name": "B nightly",
            "trigger": { "kind": "schedule", "cron": "0 3 * * *" },
            "task": { "kind": "run_script", "scriptId": b_script } }),
    )
    .await;
    let b_auto = made["automation"]["id"].as_str().unwrap().to_owned();
    let b_group = format!("group:{}", bg.id);
    for (u, form) in [
        (
            "/o/org-a/automations".to_owned(),
            vec![
                ("name", "x"),
                ("script", b_script.as_str()),
                ("target", "organization"),
                ("cron", "0 3 * * *"),
            ],
        ),
        (
            "/o/org-a/automations".to_owned(),
            vec![
                ("name", "x"),
                ("script", script.as_str()),
                ("target", b_group.as_str()),
                ("cron", "0 3 * * *"),
            ],
        ),
        (
            format!("/o/org-a/automations/{b_auto}/switch"),
            vec![("to", "disable")],
        ),
    ] {
        let r = admin.post(&w.app, &u, &form).await;
        assert_eq!(r.status, StatusCode::NOT_FOUND, "{u} {form:?}");
    }
    admin_of(&w, "ops@p.test", w.org_a).await;
    let ops = sign_in(&w.app, "ops@p.test").await;
    let r = ops
        .post(
            &w.app,
            &format!("/o/org-b/automations/{b_auto}/switch"),
            &[("to", "disable")],
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    let b_list = ob.automations().list_automations().await.unwrap();
    assert_eq!(b_list.len(), 1);
    assert!(b_list[0].enabled);
    assert_eq!(
        store.automations().list_automations().await.unwrap().len(),
        1
    );
}

async fn notification_channels_are_listed_added_and_deleted(cx: Ctx) {
    let w = world(&cx).await;
    let admin = sign_in(&w.app, "admin@p.test").await;
    let r = get(&w.app, "/o/org-a/channels", &admin.cookie).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(html(&r).contains("id=\"new-channel\""));
    assert!(html(&r).contains("href=\"/o/org-a/channels\""), "a tab");
    // A bad address is named by the store; nothing is stored.
    let r = admin
        .post(
            &w.app,
            "/o/org-a/channels",
            &[("name", "Ops mail"), ("kind", "email"), ("to", "nobody")],
        )
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
    assert!(
        outcome(&r, "failed").contains("not an email address"),
        "{}",
        location(&r)
    );
    let r = admin
        .post(
            &w.app,
            "/o/org-a/channels",
            &[
                ("name", "Ops mail"),
                ("kind", "email"),
                ("to", "ops@example.com, oncall@example.com"),
            ],
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert!(!html(&r).contains("id=\"signing-secret\""));
    // A webhook: its signing secret made by the server, shown once.
    let r = admin
        .post(
            &w.app,
            "/o/org-a/channels",
            &[
                ("name", "PSA hook"),
                ("kind", "webhook"),
                ("url", "https://psa.example.com/hook"),
            ],
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert!(html(&r).contains("id=\"signing-secret\""));
    let store = w.store.org(w.org_a);
    let list = store.alerts().list_channels().await.unwrap();
    assert_eq!(list.len(), 2);
    let hook = list.iter().find(|c| c.name == "PSA hook").unwrap();
    let secret = hook.secret.clone().unwrap();
    assert!(secret.len() >= 16);
    assert!(html(&r).contains(&secret));
    assert_eq!(
        audit_records(&w, w.org_a, "notification_channel.create")
            .await
            .len(),
        2
    );
    let r = get(&w.app, "/o/org-a/channels", &admin.cookie).await;
    assert!(html(&r).contains("oncall@example.com"));
    assert!(html(&r).contains("https://psa.example.com/hook"));
    assert!(!html(&r).contains(&secret), "the secret is shown only once");
    let delete = format!("/o/org-a/channels/{}/delete", hook.id);
    assert!(html(&r).contains(&format!("action=\"{delete}\"")));

    // Read Only: the list without the form or buttons; posts refused; forged posts refused.
    let viewer = sign_in(&w.app, "viewer@p.test").await;
    let r = get(&w.app, "/o/org-a/channels", &viewer.cookie).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(html(&r).contains("PSA hook"));
    assert!(!html(&r).contains("id=\"new-channel\""));
    assert!(!html(&r).contains("/delete\""));
    let add = [("name", "Mine"), ("kind", "in_app")];
    for (u, form) in [("/o/org-a/channels", &add[..]), (delete.as_str(), &[][..])] {
        let r = viewer.post(&w.app, u, form).await;
        assert_eq!(r.status, StatusCode::FORBIDDEN, "{u}");
        let r = post_form(&w.app, u, &admin.cookie, form).await;
        assert_eq!(r.status, StatusCode::FORBIDDEN, "forged {u}");
    }
    assert_eq!(store.alerts().list_channels().await.unwrap().len(), 2);

    // Another organization's channel through A's URL, and B's URLs for a person of A only.
    let b = w
        .store
        .org(w.org_b)
        .alerts()
        .create_channel(
            breeze_store::NewChannel {
                name: "B inbox".into(),
                kind: breeze_core::ChannelKind::InApp,
                config: serde_json::json!({}),
                secret: None,
            },
            common::audit("c"),
        )
        .await
        .unwrap();
    for uri in [
        format!("/o/org-a/channels/{}/delete", b.id),
        "/o/org-a/channels/not-a-uuid/delete".to_owned(),
    ] {
        let r = admin.post(&w.app, &uri, &[]).await;
        assert_eq!(r.status, StatusCode::NOT_FOUND, "{uri}");
    }
    admin_of(&w, "ops@p.test", w.org_a).await;
    let ops = sign_in(&w.app, "ops@p.test").await;
    let r = get(&w.app, "/o/org-b/channels", &ops.cookie).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    let r = ops
        .post(&w.app, &format!("/o/org-b/channels/{}/delete", b.id), &[])
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert_eq!(
        w.store
            .org(w.org_b)
            .alerts()
            .list_channels()
            .await
            .unwrap()
            .len(),
        1
    );

    // Deleted by the administrator.
    let r = admin.post(&w.app, &delete, &[]).await;
    assert!(outcome(&r, "done").contains("PSA hook"), "{}", location(&r));
    assert_eq!(store.alerts().list_channels().await.unwrap().len(), 1);
    assert_eq!(
        audit_records(&w, w.org_a, "notification_channel.delete")
            .await
            .len(),
        1
    );
}

breeze_store::on_both_backends!(
    enrollment_keys_are_revoked,
    groups_are_edited,
    roles_are_assigned,
    approved_patches_are_installed_now,
    configuration_policies_are_created_edited_and_assigned,
    automations_are_created_and_switched,
    notification_channels_are_listed_added_and_deleted,
);
