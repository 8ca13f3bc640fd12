//! API-key and sign-in behaviour against real databases (both backends).
#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use std::sync::Arc;

use breeze_auth::{AuthError, AuthService, AuthSettings, CreateApiKey, password};
use breeze_core::{Actor, ApiKeyId, AuditEvent, Clock, OrgId, Scope, ScopeSet, SystemClock, User};
use breeze_store::{
    Decision, NewApproval, NewUser, Store, StoreOptions,
    testing::{Ctx, store_url, test_options},
};
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
        (p.api_key_id().unwrap(), p.org(), p.user()),
        (record.id, w.org, w.admin.id)
    );
    assert!(p.scopes().grants(Scope::AiWrite) && !p.scopes().grants(Scope::AiExecute));
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
        .api_keys()
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
    let rec = &w.store.org(w.org).api_keys().list_api_keys().await.unwrap()[0];
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
            .api_keys()
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
            None,
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
        let err = w.auth.login(email, pw, None, None).await.unwrap_err();
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
        .login("admin@p.test", "correct horse battery", None, None)
        .await
        .unwrap();
    cx.clock.advance(Duration::hours(12));
    assert!(matches!(
        w.auth.authenticate_session(Some(&s2.token)).await,
        Err(AuthError::NotSignedIn)
    ));
}

/// The lockout attacks: an attacker guessing `admin@` from one address cannot lock the owner
/// out from another, successes do not count, one address cannot spray many emails, and the
/// refusal reads the same whether the account exists.
async fn sign_in_is_throttled_per_email_and_address(cx: Ctx) {
    let w = world(&cx).await;
    let ip = |s: &str| Some(s.parse::<std::net::IpAddr>().unwrap());
    let (attacker, owner) = (ip("203.0.113.9"), ip("198.51.100.7"));
    let login = |email: &'static str, pw: &'static str, from| {
        let auth = w.auth.clone();
        async move { auth.login(email, pw, from, None).await }
    };
    for n in 1..=10 {
        let err = login("admin@p.test", "wrong password!!", attacker)
            .await
            .unwrap_err();
        assert!(
            matches!(err, AuthError::InvalidCredentials),
            "attempt {n}: {err}"
        );
    }
    // The 11th attempt from that address is refused before the password is even looked at,
    // right one or not.
    let err = login("ADMIN@p.test", "correct horse battery", attacker)
        .await
        .unwrap_err();
    assert!(matches!(err, AuthError::TooManyAttempts { .. }), "{err}");
    assert!(
        err.to_string()
            .starts_with("Too many sign-in attempts; try again in "),
        "{err}"
    );
    // The owner, from an address that has not failed, gets in.
    login("admin@p.test", "correct horse battery", owner)
        .await
        .unwrap();
    // An account that does not exist locks out exactly alike: nothing tells them apart.
    for _ in 1..=10 {
        assert!(matches!(
            login("nobody@p.test", "wrong password!!", attacker).await,
            Err(AuthError::InvalidCredentials)
        ));
    }
    let missing = login("nobody@p.test", "wrong password!!", attacker)
        .await
        .unwrap_err();
    assert_eq!(
        std::mem::discriminant(&missing),
        std::mem::discriminant(&err)
    );

    // Successes do not count, and a success clears the failures before it: the owner can
    // sign in every time, with typos in between.
    for _ in 0..3 {
        for _ in 0..9 {
            assert!(matches!(
                login("admin@p.test", "typo password!!", owner).await,
                Err(AuthError::InvalidCredentials)
            ));
        }
        login("admin@p.test", "correct horse battery", owner)
            .await
            .unwrap();
    }

    // One address cannot spray: failures over many emails are capped per address, whatever
    // the emails and whether they exist.
    let sprayer = ip("192.0.2.50");
    let emails: Vec<&'static str> = (0..40)
        .map(|i| &*Box::leak(format!("user{i}@p.test").into_boxed_str()))
        .collect();
    let mut refused_at = None;
    for (i, email) in emails.iter().enumerate() {
        match login(email, "Winter2026!", sprayer).await {
            Err(AuthError::InvalidCredentials) => {}
            Err(AuthError::TooManyAttempts { .. }) => {
                refused_at = Some(i);
                break;
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(refused_at, Some(30), "the 31st failure from one address");
    // ...and that address cannot get in anywhere now, while others still can.
    assert!(matches!(
        login("admin@p.test", "correct horse battery", sprayer).await,
        Err(AuthError::TooManyAttempts { .. })
    ));
    login("admin@p.test", "correct horse battery", owner)
        .await
        .unwrap();
}

// ---- The principal cache ----

/// A service over the world's store whose principal cache serves entries for `ttl`.
fn auth_with_ttl(cx: &Ctx, w: &World, ttl: Duration) -> AuthService {
    AuthService::new(
        w.store.clone(),
        Arc::new(cx.clock.clone()),
        AuthSettings {
            cache_ttl: ttl,
            ..AuthSettings::default()
        },
    )
}

/// A second store on the same database, as another process (the CLI, another instance) would
/// open it: its changes do not move the first store's credentials generation. Its revocations
/// wait `fence` for other processes' caches.
async fn another_process(cx: &Ctx, fence: std::time::Duration) -> Store {
    let options = match &cx.dir {
        Some(dir) => test_options(format!("sqlite://{}", dir.join("breeze.db").display())),
        None => {
            // The harness runs each case in a schema of its own; ask the database which.
            let rows = cx
                .store
                .raw_dump("(SELECT current_schema() AS s)")
                .await
                .unwrap();
            let row: serde_json::Value = serde_json::from_str(&rows[0]).unwrap();
            StoreOptions {
                pg_schema: Some(row["s"].as_str().unwrap().to_owned()),
                max_connections: 2,
                ..test_options(store_url())
            }
        }
    };
    let options = StoreOptions {
        credential_fence: fence,
        ..options
    };
    Store::connect(&options, Arc::new(cx.clock.clone()))
        .await
        .unwrap()
}

/// Revokes key `id` through [`another_process`] with `fence`, which is returned to be closed.
async fn revoked_by_another_process(
    cx: &Ctx,
    w: &World,
    id: ApiKeyId,
    fence: std::time::Duration,
) -> Store {
    let other = another_process(cx, fence).await;
    other
        .org(w.org)
        .api_keys()
        .revoke_api_key(id, audit("api_key.revoke"))
        .await
        .unwrap();
    other
}

fn is_invalid(r: Result<breeze_core::Caller, AuthError>) -> bool {
    matches!(r, Err(AuthError::InvalidApiKey))
}

async fn a_cached_key_revoked_through_this_store_is_refused_at_once(cx: Ctx) {
    let w = world(&cx).await;
    // A long ttl: only the credentials generation can make these refusals happen.
    let auth = auth_with_ttl(&cx, &w, Duration::hours(1));
    let (secret, rec) = auth
        .create_api_key(request(&w, &[Scope::AiExecute]), audit("api_key.create"))
        .await
        .unwrap();
    auth.authenticate_api_key(Some(secret.expose()))
        .await
        .unwrap();
    w.store
        .org(w.org)
        .api_keys()
        .revoke_api_key(rec.id, audit("api_key.revoke"))
        .await
        .unwrap();
    assert!(is_invalid(
        auth.authenticate_api_key(Some(secret.expose())).await
    ));

    // Reporting an approval request revokes the requesting key: refused at once too.
    let (reported, rec) = auth
        .create_api_key(request(&w, &[Scope::AiExecute]), audit("api_key.create"))
        .await
        .unwrap();
    auth.authenticate_api_key(Some(reported.expose()))
        .await
        .unwrap();
    let org = w.store.org(w.org);
    let approval = org
        .approvals()
        .create_approval(
            NewApproval {
                api_key_id: Some(rec.id),
                oauth_grant_id: None,
                ai_session_id: None,
                client_name: None,
                requester_user_id: w.admin.id,
                tool: "run_script".into(),
                action: None,
                tier: 3,
                arguments: serde_json::json!({}),
                arguments_hash: [1; 32],
                definition_hash: [2; 32],
                description: "run a script".into(),
                mode: "supervised".into(),
                request_id: None,
                expires_at: cx.clock.now() + Duration::minutes(5),
                pinned: None,
            },
            audit("approval.request"),
        )
        .await
        .unwrap();
    org.approvals()
        .decide_approval(
            approval.id,
            Decision::Report,
            w.admin.id,
            Some("not me"),
            audit("approval.report"),
        )
        .await
        .unwrap();
    assert!(is_invalid(
        auth.authenticate_api_key(Some(reported.expose())).await
    ));
}

async fn a_revocation_by_another_process_is_seen_within_the_ttl(cx: Ctx) {
    let w = world(&cx).await;
    let (secret, rec) = w
        .auth
        .create_api_key(request(&w, &[Scope::AiRead]), audit("api_key.create"))
        .await
        .unwrap();
    w.auth
        .authenticate_api_key(Some(secret.expose()))
        .await
        .unwrap();
    let other = revoked_by_another_process(&cx, &w, rec.id, std::time::Duration::ZERO).await;
    assert!(
        w.store
            .org(w.org)
            .api_keys()
            .get_api_key(rec.id)
            .await
            .unwrap()
            .revoked_at
            .is_some(),
        "the database says revoked"
    );
    // The default ttl is one second: still served from memory just before it runs out…
    cx.clock.advance(Duration::milliseconds(999));
    assert!(
        w.auth
            .authenticate_api_key(Some(secret.expose()))
            .await
            .is_ok(),
        "served from the cache within the ttl"
    );
    // …and read again, and refused, once it has.
    cx.clock.advance(Duration::milliseconds(1));
    assert!(is_invalid(
        w.auth.authenticate_api_key(Some(secret.expose())).await
    ));
    other.close().await;
}

/// The attack: a key revoked by another process (another instance, `breeze keys revoke`) while
/// this one serves it from memory and never hears the bus's signal. The revocation returns only
/// once this cache has let go, so nothing honours the key after it says "revoked".
async fn a_revocation_by_another_process_returns_once_no_cache_serves_it(cx: Ctx) {
    let w = world(&cx).await;
    // The serving side's cache runs on real time, as a server's does.
    let ttl = std::time::Duration::from_millis(300);
    let serving = AuthService::new(
        w.store.clone(),
        Arc::new(SystemClock),
        AuthSettings {
            cache_ttl: Duration::from_std(ttl).unwrap(),
            ..AuthSettings::default()
        },
    );
    let (secret, rec) = serving
        .create_api_key(request(&w, &[Scope::AiRead]), audit("api_key.create"))
        .await
        .unwrap();
    serving
        .authenticate_api_key(Some(secret.expose()))
        .await
        .unwrap();
    let other = revoked_by_another_process(&cx, &w, rec.id, ttl).await;
    assert!(
        is_invalid(serving.authenticate_api_key(Some(secret.expose())).await),
        "served from memory after the revocation returned"
    );
    other.close().await;
}

async fn a_role_change_through_this_store_changes_permissions_at_once(cx: Ctx) {
    let w = world(&cx).await;
    let auth = auth_with_ttl(&cx, &w, Duration::hours(1));
    let (secret, _) = auth
        .create_api_key(request(&w, &[Scope::AiRead]), audit("api_key.create"))
        .await
        .unwrap();
    let admin = w
        .store
        .find_role(w.admin.partner_id, "Administrator")
        .await
        .unwrap();
    let read_only = w
        .store
        .find_role(w.admin.partner_id, "Read Only")
        .await
        .unwrap();
    let p = auth
        .authenticate_api_key(Some(secret.expose()))
        .await
        .unwrap();
    assert_eq!(p.permissions(), Some(admin.permissions));
    w.store
        .assign_role(w.admin.id, w.org, read_only.id, audit("role.assign"))
        .await
        .unwrap();
    let p = auth
        .authenticate_api_key(Some(secret.expose()))
        .await
        .unwrap();
    assert_eq!(p.permissions(), Some(read_only.permissions));
}

async fn an_expired_key_is_refused_from_the_cache(cx: Ctx) {
    let w = world(&cx).await;
    let auth = auth_with_ttl(&cx, &w, Duration::hours(1));
    let mut req = request(&w, &[Scope::AiRead]);
    req.expires_at = Some(cx.clock.now() + Duration::milliseconds(500));
    let (secret, _) = auth
        .create_api_key(req, audit("api_key.create"))
        .await
        .unwrap();
    auth.authenticate_api_key(Some(secret.expose()))
        .await
        .unwrap();
    // Without a database, the refusal can only come from the cached expiry.
    w.store.close().await;
    cx.clock.advance(Duration::milliseconds(499));
    assert!(
        auth.authenticate_api_key(Some(secret.expose()))
            .await
            .is_ok()
    );
    cx.clock.advance(Duration::milliseconds(1));
    assert!(is_invalid(
        auth.authenticate_api_key(Some(secret.expose())).await
    ));
}

async fn a_zero_ttl_reads_the_database_every_time(cx: Ctx) {
    let w = world(&cx).await;
    let auth = auth_with_ttl(&cx, &w, Duration::zero());
    let (secret, rec) = auth
        .create_api_key(request(&w, &[Scope::AiRead]), audit("api_key.create"))
        .await
        .unwrap();
    auth.authenticate_api_key(Some(secret.expose()))
        .await
        .unwrap();
    let other = revoked_by_another_process(&cx, &w, rec.id, std::time::Duration::ZERO).await;
    assert!(is_invalid(
        auth.authenticate_api_key(Some(secret.expose())).await
    ));
    other.close().await;
}

async fn a_cached_key_needs_no_database(cx: Ctx) {
    let w = world(&cx).await;
    let (secret, rec) = w
        .auth
        .create_api_key(request(&w, &[Scope::AiRead]), audit("api_key.create"))
        .await
        .unwrap();
    let first = w
        .auth
        .authenticate_api_key(Some(secret.expose()))
        .await
        .unwrap();
    let unknown = format!("brz_{}", "z".repeat(43));
    assert!(is_invalid(
        w.auth.authenticate_api_key(Some(&unknown)).await
    ));

    // With the pool closed any query fails: a success is an answer from memory.
    w.store.close().await;
    let again = w
        .auth
        .authenticate_api_key(Some(secret.expose()))
        .await
        .unwrap();
    assert_eq!(
        (
            again.api_key_id().unwrap(),
            again.org(),
            again.user(),
            again.permissions()
        ),
        (rec.id, w.org, w.admin.id, first.permissions())
    );
    assert_eq!(again.scopes(), first.scopes());
    // A refused key was not remembered: it goes to the (closed) database again.
    let err = w
        .auth
        .authenticate_api_key(Some(&unknown))
        .await
        .unwrap_err();
    assert!(matches!(err, AuthError::Store(_)), "{err}");
    // Past the ttl the database is asked again; while it cannot answer, a key that
    // authenticated less than five minutes ago still serves (reads answered from memory keep
    // working through an outage), and past that the outage is the answer.
    cx.clock.advance(Duration::seconds(1));
    assert!(
        w.auth
            .authenticate_api_key(Some(secret.expose()))
            .await
            .is_ok()
    );
    cx.clock.advance(Duration::minutes(5));
    assert!(matches!(
        w.auth.authenticate_api_key(Some(secret.expose())).await,
        Err(AuthError::Store(_))
    ));
}

async fn last_used_is_decided_from_the_cache(cx: Ctx) {
    let w = world(&cx).await;
    let auth = auth_with_ttl(&cx, &w, Duration::hours(1));
    let (secret, rec) = auth
        .create_api_key(request(&w, &[Scope::AiRead]), audit("api_key.create"))
        .await
        .unwrap();
    let t0 = cx.clock.now();
    auth.authenticate_api_key(Some(secret.expose()))
        .await
        .unwrap();
    // A minute later the cached entry says a write is due: it happens, and the entry learns it.
    cx.clock.advance(Duration::seconds(60));
    auth.authenticate_api_key(Some(secret.expose()))
        .await
        .unwrap();
    let last_used = w
        .store
        .org(w.org)
        .api_keys()
        .get_api_key(rec.id)
        .await
        .unwrap()
        .last_used_at;
    assert_eq!(last_used, Some(t0 + Duration::seconds(60)));
    // Half a minute on, nothing is due: with the pool closed, the call still succeeds.
    w.store.close().await;
    cx.clock.advance(Duration::seconds(30));
    auth.authenticate_api_key(Some(secret.expose()))
        .await
        .unwrap();
    // Another half minute and the write is due again; it reaches for the database.
    cx.clock.advance(Duration::seconds(30));
    assert!(matches!(
        auth.authenticate_api_key(Some(secret.expose())).await,
        Err(AuthError::Store(_))
    ));
}

breeze_store::on_both_backends!(
    a_cached_key_revoked_through_this_store_is_refused_at_once,
    a_revocation_by_another_process_is_seen_within_the_ttl,
    a_revocation_by_another_process_returns_once_no_cache_serves_it,
    a_role_change_through_this_store_changes_permissions_at_once,
    an_expired_key_is_refused_from_the_cache,
    a_zero_ttl_reads_the_database_every_time,
    a_cached_key_needs_no_database,
    last_used_is_decided_from_the_cache,
    sign_in_is_throttled_per_email_and_address,
    keys_authenticate_as_their_org_and_user,
    every_refusal_has_the_documented_error,
    the_format_is_decided_before_the_database,
    only_the_hash_is_stored,
    last_used_is_written_at_most_once_a_minute,
    keys_need_a_user_with_access_and_a_future_expiry,
    sign_in_starts_a_session,
);
