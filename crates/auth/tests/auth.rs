//! API-key and sign-in behaviour against real databases (both backends).
#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use std::sync::Arc;

use breeze_auth::{AuthError, AuthService, AuthSettings, CreateApiKey, password};
use breeze_core::{Actor, AuditEvent, Clock, OrgId, Scope, ScopeSet, User};
use breeze_store::{NewUser, Store, testing::Ctx};
use chrono::Duration;

fn audit(action: &str) -> AuditEvent {
    AuditEvent::new(Actor::system("test"), action, "test")
}

struct World {
    auth: AuthService,
    store: Store,
    org: OrgId,
    other_org: OrgId,
    admin: User,
}

async fn world(cx: &Ctx) -> World {
    let s = cx.store.clone();
    let p = s
        .create_partner("P", "p", audit("partner.create"))
        .await
        .unwrap();
    let org = s
        .create_organization(p.id, "A", "a", audit("organization.create"))
        .await
        .unwrap();
    let other = s
        .create_organization(p.id, "B", "b", audit("organization.create"))
        .await
        .unwrap();
    let admin = s
        .create_user(
            NewUser {
                partner_id: p.id,
                org_id: None,
                email: "admin@p.test".into(),
                name: "Admin".into(),
                password_hash: password::hash("correct horse battery").unwrap(),
            },
            audit("user.create"),
        )
        .await
        .unwrap();
    let role = s.find_role(p.id, "Administrator").await.unwrap();
    s.assign_role(admin.id, org.id, role.id, audit("role.assign"))
        .await
        .unwrap();
    let auth = AuthService::new(
        s.clone(),
        Arc::new(cx.clock.clone()),
        AuthSettings::default(),
    );
    World {
        auth,
        store: s,
        org: org.id,
        other_org: other.id,
        admin,
    }
}

fn request(w: &World, scopes: &[Scope]) -> CreateApiKey {
    CreateApiKey {
        org_id: w.org,
        user_id: w.admin.id,
        name: "Claude Desktop".into(),
        scopes: ScopeSet::new(scopes.iter().copied()),
        expires_at: None,
    }
}

async fn keys_authenticate_as_their_org_and_user(cx: Ctx) {
    let w = world(&cx).await;
    let (secret, record) = w
        .auth
        .create_api_key(
            request(&w, &[Scope::AiRead, Scope::AiWrite]),
            audit("api_key.create"),
        )
        .await
        .unwrap();
    assert!(secret.expose().starts_with("brz_"));
    let p = w
        .auth
        .authenticate_api_key(Some(secret.expose()))
        .await
        .unwrap();
    assert_eq!(
        (p.key_id, p.org_id, p.user_id),
        (record.id, w.org, w.admin.id)
    );
    assert!(p.scopes.grants(Scope::AiWrite) && !p.scopes.grants(Scope::AiExecute));
    // Surrounding whitespace from a pasted header is forgiven.
    assert!(
        w.auth
            .authenticate_api_key(Some(&format!(" {} ", secret.expose())))
            .await
            .is_ok()
    );
}

async fn every_refusal_has_the_documented_error(cx: Ctx) {
    let w = world(&cx).await;
    let msg = |r: Result<_, AuthError>| r.unwrap_err().to_string();
    assert_eq!(
        msg(w.auth.authenticate_api_key(None).await),
        "Missing X-API-Key header"
    );
    assert_eq!(
        msg(w.auth.authenticate_api_key(Some("")).await),
        "Missing X-API-Key header"
    );
    assert_eq!(
        msg(w.auth.authenticate_api_key(Some("sk_live_abc")).await),
        "Invalid API key format"
    );
    assert_eq!(
        msg(w.auth.authenticate_api_key(Some("brz_short")).await),
        "Invalid API key format"
    );

    // Unknown, revoked and expired keys are refused with one and the same message.
    let unknown = format!("brz_{}", "x".repeat(43));
    assert_eq!(
        msg(w.auth.authenticate_api_key(Some(&unknown)).await),
        "Invalid API key"
    );

    let (revoked, rec) = w
        .auth
        .create_api_key(request(&w, &[Scope::AiRead]), audit("api_key.create"))
        .await
        .unwrap();
    w.store
        .org(w.org)
        .revoke_api_key(rec.id, audit("api_key.revoke"))
        .await
        .unwrap();
    assert_eq!(
        msg(w.auth.authenticate_api_key(Some(revoked.expose())).await),
        "Invalid API key"
    );

    let mut req = request(&w, &[Scope::AiRead]);
    req.expires_at = Some(cx.clock.now() + Duration::hours(1));
    let (expiring, _) = w
        .auth
        .create_api_key(req, audit("api_key.create"))
        .await
        .unwrap();
    assert!(
        w.auth
            .authenticate_api_key(Some(expiring.expose()))
            .await
            .is_ok()
    );
    cx.clock.advance(Duration::hours(1));
    assert_eq!(
        msg(w.auth.authenticate_api_key(Some(expiring.expose())).await),
        "Invalid API key"
    );
}

async fn the_format_is_decided_before_the_database(cx: Ctx) {
    let w = world(&cx).await;
    // With the pool closed any query fails; a malformed key must still get its own error.
    w.store.close().await;
    let err = w
        .auth
        .authenticate_api_key(Some("Bearer abc"))
        .await
        .unwrap_err();
    assert!(matches!(err, AuthError::InvalidApiKeyFormat), "{err}");
    let err = w.auth.authenticate_api_key(None).await.unwrap_err();
    assert!(matches!(err, AuthError::MissingApiKey), "{err}");
    let well_formed = format!("brz_{}", "y".repeat(43));
    let err = w
        .auth
        .authenticate_api_key(Some(&well_formed))
        .await
        .unwrap_err();
    assert!(
        matches!(err, AuthError::Store(_)),
        "a well-formed key does reach the database: {err}"
    );
}

async fn only_the_hash_is_stored(cx: Ctx) {
    let w = world(&cx).await;
    let (secret, _) = w
        .auth
        .create_api_key(request(&w, &[Scope::AiRead]), audit("api_key.create"))
        .await
        .unwrap();
    let plaintext = secret.expose();
    let random_part = &plaintext[4..];
    for table in w.store.raw_tables().await.unwrap() {
        for row in w.store.raw_dump(&table).await.unwrap() {
            assert!(
                !row.contains(random_part),
                "the key's secret appears in table {table}: {row}"
            );
        }
    }
    // On SQLite, look at the bytes on disk too (database file and write-ahead log).
    if let Some(dir) = &cx.dir {
        for entry in std::fs::read_dir(dir).unwrap() {
            let bytes = std::fs::read(entry.unwrap().path()).unwrap();
            assert!(
                !bytes
                    .windows(random_part.len())
                    .any(|w| w == random_part.as_bytes())
            );
        }
    }
    // The hash is what is stored, and the display prefix is all that is shown.
    let rec = &w.store.org(w.org).list_api_keys().await.unwrap()[0];
    assert_eq!(rec.key_hash, breeze_auth::api_key::hash(plaintext).to_vec());
    assert_eq!(rec.key_prefix, &plaintext[..8]);
}

async fn last_used_is_written_at_most_once_a_minute(cx: Ctx) {
    let w = world(&cx).await;
    let (secret, rec) = w
        .auth
        .create_api_key(request(&w, &[Scope::AiRead]), audit("api_key.create"))
        .await
        .unwrap();
    let last_used = || async {
        w.store
            .org(w.org)
            .get_api_key(rec.id)
            .await
            .unwrap()
            .last_used_at
    };
    assert_eq!(last_used().await, None);
    let t0 = cx.clock.now();
    w.auth
        .authenticate_api_key(Some(secret.expose()))
        .await
        .unwrap();
    assert_eq!(last_used().await, Some(t0));
    cx.clock.advance(Duration::seconds(30));
    w.auth
        .authenticate_api_key(Some(secret.expose()))
        .await
        .unwrap();
    cx.clock.advance(Duration::seconds(29));
    w.auth
        .authenticate_api_key(Some(secret.expose()))
        .await
        .unwrap();
    assert_eq!(last_used().await, Some(t0), "no write within the minute");
    cx.clock.advance(Duration::seconds(1));
    w.auth
        .authenticate_api_key(Some(secret.expose()))
        .await
        .unwrap();
    assert_eq!(last_used().await, Some(t0 + Duration::seconds(60)));
}

async fn keys_need_a_user_with_access_and_a_future_expiry(cx: Ctx) {
    let w = world(&cx).await;
    let mut req = request(&w, &[Scope::AiRead]);
    req.org_id = w.other_org;
    assert!(matches!(
        w.auth.create_api_key(req, audit("api_key.create")).await,
        Err(AuthError::Forbidden(_))
    ));
    let mut req = request(&w, &[Scope::AiRead]);
    req.expires_at = Some(cx.clock.now());
    assert!(matches!(
        w.auth.create_api_key(req, audit("api_key.create")).await,
        Err(AuthError::Invalid(_))
    ));
    assert!(matches!(
        w.auth
            .create_api_key(request(&w, &[]), audit("api_key.create"))
            .await,
        Err(AuthError::Invalid(_))
    ));
}

async fn sign_in_starts_a_session(cx: Ctx) {
    let w = world(&cx).await;
    let s = w
        .auth
        .login(
            "ADMIN@p.test",
            "correct horse battery",
            Some("req-1".into()),
        )
        .await
        .unwrap();
    assert_eq!(s.user.id, w.admin.id);
    assert_eq!(
        w.auth
            .authenticate_session(Some(&s.token))
            .await
            .unwrap()
            .id,
        w.admin.id
    );
    assert!(
        w.store
            .get_user(w.admin.id)
            .await
            .unwrap()
            .last_login_at
            .is_some()
    );

    for (email, pw) in [
        ("admin@p.test", "wrong password!"),
        ("nobody@p.test", "correct horse battery"),
    ] {
        let err = w.auth.login(email, pw, None).await.unwrap_err();
        assert_eq!(err.to_string(), "Invalid email or password");
    }
    // Sign-in events carry no organization; count them through a raw dump of the log.
    let rows = w.store.raw_dump("audit_log").await.unwrap();
    assert_eq!(
        rows.iter()
            .filter(|r| r.contains("auth.login") && r.contains("failure"))
            .count(),
        2
    );

    w.auth.logout(&s.token).await.unwrap();
    assert!(matches!(
        w.auth.authenticate_session(Some(&s.token)).await,
        Err(AuthError::NotSignedIn)
    ));
    let s2 = w
        .auth
        .login("admin@p.test", "correct horse battery", None)
        .await
        .unwrap();
    cx.clock.advance(Duration::hours(12));
    assert!(matches!(
        w.auth.authenticate_session(Some(&s2.token)).await,
        Err(AuthError::NotSignedIn)
    ));
}

async fn sign_in_attempts_are_throttled_per_email(cx: Ctx) {
    let w = world(&cx).await;
    for n in 1..=10 {
        let err = w
            .auth
            .login("admin@p.test", "wrong password!!", None)
            .await
            .unwrap_err();
        assert!(
            matches!(err, AuthError::InvalidCredentials),
            "attempt {n}: {err}"
        );
    }
    // The 11th attempt is refused before the password is even looked at, right one or not.
    let err = w
        .auth
        .login("ADMIN@p.test", "correct horse battery", None)
        .await
        .unwrap_err();
    assert!(matches!(err, AuthError::TooManyAttempts { .. }), "{err}");
    assert!(
        err.to_string()
            .starts_with("Too many sign-in attempts; try again in "),
        "{err}"
    );
    // Another email is not affected.
    let err = w
        .auth
        .login("someone@p.test", "whatever password", None)
        .await
        .unwrap_err();
    assert!(matches!(err, AuthError::InvalidCredentials));
}

breeze_store::on_both_backends!(
    sign_in_attempts_are_throttled_per_email,
    keys_authenticate_as_their_org_and_user,
    every_refusal_has_the_documented_error,
    the_format_is_decided_before_the_database,
    only_the_hash_is_stored,
    last_used_is_written_at_most_once_a_minute,
    keys_need_a_user_with_access_and_a_future_expiry,
    sign_in_starts_a_session,
);
