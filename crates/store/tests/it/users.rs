//! Users, roles per organization, the permission check, sessions and stored API keys.

use breeze_core::{Permission, Scope, ScopeSet, UserKind};
use breeze_store::{NewApiKey, NewUser, StoreError};
use chrono::Duration;

use crate::audit;
use breeze_store::testing::Ctx;

fn new_user(
    partner: breeze_core::PartnerId,
    org: Option<breeze_core::OrgId>,
    email: &str,
) -> NewUser {
    NewUser {
        partner_id: partner,
        org_id: org,
        email: email.into(),
        name: "Someone".into(),
        password_hash: "$argon2id$fake".into(),
    }
}

async fn roles_decide_access_per_organization(cx: Ctx) {
    let s = &cx.store;
    let partner = s
        .create_partner("P", "p", audit("partner.create", "partner"))
        .await
        .unwrap();
    let other_partner = s
        .create_partner("Q", "q", audit("partner.create", "partner"))
        .await
        .unwrap();
    let a = s
        .create_organization(
            partner.id,
            "A",
            "a",
            audit("organization.create", "organization"),
        )
        .await
        .unwrap();
    let b = s
        .create_organization(
            partner.id,
            "B",
            "b",
            audit("organization.create", "organization"),
        )
        .await
        .unwrap();
    let c = s
        .create_organization(
            partner.id,
            "C",
            "c",
            audit("organization.create", "organization"),
        )
        .await
        .unwrap();
    let foreign = s
        .create_organization(
            other_partner.id,
            "F",
            "f",
            audit("organization.create", "organization"),
        )
        .await
        .unwrap();

    let tech = s
        .create_user(
            new_user(partner.id, None, " Tech@P.Test "),
            audit("user.create", "user"),
        )
        .await
        .unwrap();
    assert_eq!(tech.email, "tech@p.test");
    assert_eq!(tech.kind, UserKind::Partner);
    let dup = s
        .create_user(
            new_user(partner.id, None, "TECH@p.test"),
            audit("user.create", "user"),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&dup, StoreError::Conflict(m) if m.contains("tech@p.test")),
        "{dup}"
    );
    assert!(matches!(
        s.create_user(
            new_user(partner.id, None, "not-an-email"),
            audit("user.create", "user")
        )
        .await,
        Err(StoreError::Invalid(_))
    ));

    let admin_role = s.find_role(partner.id, "administrator").await.unwrap();
    let ro_role = s.find_role(partner.id, "Read Only").await.unwrap();
    s.assign_role(tech.id, a.id, admin_role.id, audit("role.assign", "user"))
        .await
        .unwrap();
    s.assign_role(tech.id, b.id, ro_role.id, audit("role.assign", "user"))
        .await
        .unwrap();

    let in_a = s.org_access(tech.id, a.id).await.unwrap().unwrap();
    let in_b = s.org_access(tech.id, b.id).await.unwrap().unwrap();
    assert!(in_a.require(Permission::ScriptsExecute).is_ok());
    assert!(in_b.require(Permission::DevicesRead).is_ok());
    let denied = in_b.require(Permission::ScriptsExecute).unwrap_err();
    assert_eq!(
        denied.to_string(),
        "permission denied: requires scripts.execute"
    );
    assert_eq!(
        s.org_access(tech.id, c.id).await.unwrap(),
        None,
        "no role in C, no access"
    );
    let orgs: Vec<_> = s
        .user_organizations(tech.id)
        .await
        .unwrap()
        .into_iter()
        .map(|(o, r)| (o.slug, r))
        .collect();
    assert_eq!(
        orgs,
        vec![
            ("a".into(), "Administrator".into()),
            ("b".into(), "Read Only".into())
        ]
    );

    // Reassigning replaces the role.
    s.assign_role(tech.id, b.id, admin_role.id, audit("role.assign", "user"))
        .await
        .unwrap();
    assert!(
        s.org_access(tech.id, b.id)
            .await
            .unwrap()
            .unwrap()
            .require(Permission::ScriptsExecute)
            .is_ok()
    );

    // Another partner's organization or role cannot be assigned.
    assert!(matches!(
        s.assign_role(
            tech.id,
            foreign.id,
            admin_role.id,
            audit("role.assign", "user")
        )
        .await,
        Err(StoreError::NotFound("organization"))
    ));
    let foreign_role = s
        .find_role(other_partner.id, "Administrator")
        .await
        .unwrap();
    assert!(matches!(
        s.assign_role(tech.id, c.id, foreign_role.id, audit("role.assign", "user"))
            .await,
        Err(StoreError::NotFound("role"))
    ));

    // An organization-level user lives in one organization.
    let local = s
        .create_user(
            new_user(partner.id, Some(a.id), "local@a.test"),
            audit("user.create", "user"),
        )
        .await
        .unwrap();
    assert_eq!(local.kind, UserKind::Organization { org_id: a.id });
    assert!(matches!(
        s.assign_role(local.id, b.id, ro_role.id, audit("role.assign", "user"))
            .await,
        Err(StoreError::Invalid(_))
    ));
    assert!(matches!(
        s.create_user(
            new_user(partner.id, Some(foreign.id), "x@f.test"),
            audit("user.create", "user")
        )
        .await,
        Err(StoreError::NotFound("organization"))
    ));
}

async fn sessions_expire(cx: Ctx) {
    let s = &cx.store;
    let partner = s
        .create_partner("P", "p", audit("partner.create", "partner"))
        .await
        .unwrap();
    let user = s
        .create_user(
            new_user(partner.id, None, "u@p.test"),
            audit("user.create", "user"),
        )
        .await
        .unwrap();
    let token_hash = [7u8; 32];
    s.create_session(user.id, &token_hash, s.clock().now() + Duration::hours(12))
        .await
        .unwrap();
    let (_, stored_hash, found) = s.find_session(&token_hash).await.unwrap().unwrap();
    assert_eq!(
        (found.id, stored_hash.as_slice()),
        (user.id, &token_hash[..])
    );
    assert!(s.find_session(&[8u8; 32]).await.unwrap().is_none());
    cx.clock.advance(Duration::hours(12));
    assert!(
        s.find_session(&token_hash).await.unwrap().is_none(),
        "expired sessions do not authenticate"
    );
    assert_eq!(s.purge_expired_sessions().await.unwrap(), 1);
    assert!(!s.delete_session(&token_hash).await.unwrap());
}

async fn api_key_rows_track_use_and_revocation(cx: Ctx) {
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
    let user = s
        .create_user(
            new_user(partner.id, None, "u@p.test"),
            audit("user.create", "user"),
        )
        .await
        .unwrap();
    let hash = [42u8; 32];
    let key = s
        .insert_api_key(
            NewApiKey {
                org_id: org.id,
                user_id: user.id,
                name: "  Claude Desktop ".into(),
                key_hash: hash,
                key_prefix: "brz_Ab12".into(),
                scopes: ScopeSet::new([Scope::AiWrite, Scope::AiRead]),
                expires_at: Some(s.clock().now() + Duration::days(30)),
            },
            audit("api_key.create", "api_key"),
        )
        .await
        .unwrap();
    assert_eq!(key.name, "Claude Desktop");
    assert_eq!(key.scopes.to_string(), "ai:read,ai:write");
    let (found, permissions) = s.find_api_key_by_hash(&hash).await.unwrap().unwrap();
    assert_eq!(found, key);
    assert_eq!(
        permissions, None,
        "the user holds no role in the key's organization"
    );
    let role = s.find_role(partner.id, "Read Only").await.unwrap();
    s.assign_role(user.id, org.id, role.id, audit("role.assign", "user"))
        .await
        .unwrap();
    let (_, permissions) = s.find_api_key_by_hash(&hash).await.unwrap().unwrap();
    assert_eq!(
        permissions,
        Some(role.permissions),
        "the key acts with its user's role"
    );
    assert!(s.find_api_key_by_hash(&[0u8; 32]).await.unwrap().is_none());
    assert!(key.is_active(s.clock().now()));
    assert!(
        !key.is_active(s.clock().now() + Duration::days(30)),
        "expired at its expiry instant"
    );

    let minute = Duration::seconds(60);
    let now = s.clock().now();
    assert!(s.touch_api_key(key.id, now, minute).await.unwrap());
    assert!(
        !s.touch_api_key(key.id, now + Duration::seconds(59), minute)
            .await
            .unwrap()
    );
    assert!(
        s.touch_api_key(key.id, now + Duration::seconds(60), minute)
            .await
            .unwrap()
    );
    let o = s.org(org.id);
    assert_eq!(
        o.api_keys().get_api_key(key.id).await.unwrap().last_used_at,
        Some(now + Duration::seconds(60))
    );

    let revoked = o
        .api_keys()
        .revoke_api_key(key.id, audit("api_key.revoke", "api_key"))
        .await
        .unwrap();
    assert!(revoked.revoked_at.is_some() && !revoked.is_active(s.clock().now()));
    cx.clock.advance(Duration::seconds(5));
    let again = o
        .api_keys()
        .revoke_api_key(key.id, audit("api_key.revoke", "api_key"))
        .await
        .unwrap();
    assert_eq!(
        again.revoked_at, revoked.revoked_at,
        "revoking twice keeps the first time"
    );
    let f = breeze_store::AuditFilter {
        action: Some("api_key.revoke".into()),
        ..Default::default()
    };
    assert_eq!(
        o.audit()
            .query_audit(&f, None, 10)
            .await
            .unwrap()
            .records
            .len(),
        1
    );

    let bad = s
        .insert_api_key(
            NewApiKey {
                org_id: org.id,
                user_id: user.id,
                name: " ".into(),
                key_hash: [1; 32],
                key_prefix: "brz_x".into(),
                scopes: ScopeSet::new([Scope::AiRead]),
                expires_at: None,
            },
            audit("api_key.create", "api_key"),
        )
        .await
        .unwrap_err();
    assert!(matches!(bad, StoreError::Invalid(_)));
}

async fn partner_wide_roles_reach_every_organization_of_the_partner(cx: Ctx) {
    let s = &cx.store;
    let org = |p, name: &'static str| {
        s.create_organization(p, name, name, audit("organization.create", "organization"))
    };
    let partner = s
        .create_partner("P", "p", audit("partner.create", "partner"))
        .await
        .unwrap();
    let other = s
        .create_partner("Q", "q", audit("partner.create", "partner"))
        .await
        .unwrap();
    let a = org(partner.id, "a").await.unwrap();
    let foreign = org(other.id, "f").await.unwrap();
    let admin = s.find_role(partner.id, "Administrator").await.unwrap();
    let read_only = s.find_role(partner.id, "Read Only").await.unwrap();
    let foreign_role = s.find_role(other.id, "Administrator").await.unwrap();
    let boss = s
        .create_user(
            new_user(partner.id, None, "boss@p.test"),
            audit("user.create", "user"),
        )
        .await
        .unwrap();
    let local = s
        .create_user(
            new_user(partner.id, Some(a.id), "local@p.test"),
            audit("user.create", "user"),
        )
        .await
        .unwrap();

    // Only a partner-level user, only with its own partner's role.
    assert!(matches!(
        s.assign_partner_role(local.id, admin.id, audit("r", "user"))
            .await,
        Err(StoreError::Invalid(_))
    ));
    assert!(matches!(
        s.assign_partner_role(boss.id, foreign_role.id, audit("r", "user"))
            .await,
        Err(StoreError::NotFound("role"))
    ));
    assert_eq!(s.org_access(boss.id, a.id).await.unwrap(), None);
    assert!(s.user_organizations(boss.id).await.unwrap().is_empty());

    s.assign_partner_role(boss.id, read_only.id, audit("r", "user"))
        .await
        .unwrap();
    // Reassigning replaces it.
    s.assign_partner_role(boss.id, admin.id, audit("r", "user"))
        .await
        .unwrap();
    // Every organization of the partner, including one created afterwards; none of another's.
    let b = org(partner.id, "b").await.unwrap();
    for o in [a.id, b.id] {
        let access = s.org_access(boss.id, o).await.unwrap().unwrap();
        assert_eq!(access.role_id, admin.id);
        assert!(access.require(Permission::ScriptsExecute).is_ok());
    }
    assert_eq!(s.org_access(boss.id, foreign.id).await.unwrap(), None);
    let names = |v: Vec<(breeze_core::Organization, String)>| {
        v.into_iter().map(|(o, r)| (o.slug, r)).collect::<Vec<_>>()
    };
    assert_eq!(
        names(s.user_organizations(boss.id).await.unwrap()),
        vec![
            ("a".into(), "Administrator".into()),
            ("b".into(), "Administrator".into())
        ]
    );
    // A role in one organization wins there.
    s.assign_role(boss.id, b.id, read_only.id, audit("r", "user"))
        .await
        .unwrap();
    let in_b = s.org_access(boss.id, b.id).await.unwrap().unwrap();
    assert!(in_b.require(Permission::ScriptsExecute).is_err());
    // Removing the partner-wide role leaves the organization's.
    assert!(
        s.remove_partner_role(boss.id, audit("r", "user"))
            .await
            .unwrap()
    );
    assert!(
        !s.remove_partner_role(boss.id, audit("r", "user"))
            .await
            .unwrap()
    );
    assert_eq!(s.org_access(boss.id, a.id).await.unwrap(), None);
    assert_eq!(
        names(s.user_organizations(boss.id).await.unwrap()),
        vec![("b".into(), "Read Only".into())]
    );
}

breeze_store::on_both_backends!(
    partner_wide_roles_reach_every_organization_of_the_partner,
    roles_decide_access_per_organization,
    sessions_expire,
    api_key_rows_track_use_and_revocation
);
