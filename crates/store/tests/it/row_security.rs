//! PostgreSQL's row security, the second wall: a statement run for organization A that forgot
//! its `org_id` filter, or names B's rows, still reaches only A's. The harness connects as a
//! role that cannot bypass row security (`testing::TEST_ROLE`), so these tests see the wall
//! as a deployment does.

use breeze_core::DeviceStatus;
use breeze_store::{Backend, NewUser, RowSecurity, testing::Ctx};
use sqlx::Connection;

use crate::{audit, tenancy::new_device, two_orgs};

/// Organizations A and B, each with a site and a device named after it.
async fn seeded(cx: &Ctx) -> (breeze_core::OrgId, breeze_core::OrgId) {
    let s = &cx.store;
    let (a, b) = two_orgs(s).await;
    for (org, name) in [(a, "a"), (b, "b")] {
        let o = s.org(org);
        let site = o
            .tenancy()
            .create_site(name, "UTC", audit("site.create", "site"))
            .await
            .unwrap();
        o.devices()
            .create_device(
                new_device(site.id, &format!("{name}-01"), DeviceStatus::Online),
                audit("device.create", "device"),
            )
            .await
            .unwrap();
    }
    (a, b)
}

async fn unfiltered_statements_reach_only_their_organization(cx: Ctx) {
    let s = &cx.store;
    let (a, b) = seeded(&cx).await;
    if s.backend() == Backend::Sqlite {
        assert_eq!(s.row_security().await.unwrap(), RowSecurity::NotAvailable);
        return;
    }
    assert_eq!(s.row_security().await.unwrap(), RowSecurity::Enforced);

    // Reads without a filter: only A's rows, on the pool and in a transaction alike.
    let hostnames = "SELECT hostname FROM devices ORDER BY hostname";
    assert_eq!(s.raw_strings_in(a, hostnames).await.unwrap(), ["a-01"]);
    assert_eq!(s.raw_strings_in(b, hostnames).await.unwrap(), ["b-01"]);
    assert_eq!(
        s.raw_strings(hostnames).await.unwrap(),
        ["a-01", "b-01"],
        "the system scope sees every organization"
    );
    let b_site: String = s
        .raw_strings_in(b, "SELECT CAST(id AS TEXT) FROM sites")
        .await
        .unwrap()
        .remove(0);
    assert!(
        s.raw_strings_in(a, &format!("SELECT name FROM sites WHERE id = '{b_site}'"))
            .await
            .unwrap()
            .is_empty(),
        "B's site is invisible to A even by id"
    );

    // Writes without a filter change only A's rows.
    let renamed = s
        .raw_execute_in(a, "UPDATE devices SET hostname = hostname || '-x'")
        .await
        .unwrap();
    assert_eq!(renamed, 1);
    assert_eq!(s.raw_strings(hostnames).await.unwrap(), ["a-01-x", "b-01"]);
    assert_eq!(
        s.raw_execute_in(a, &format!("DELETE FROM sites WHERE id = '{b_site}'"))
            .await
            .unwrap(),
        0
    );

    // A row written for B from A's scope is refused outright.
    let err = s
        .raw_execute_in(
            a,
            &format!(
                "INSERT INTO sites (id, org_id, name, timezone, created_at) \
                 VALUES ('{}', '{}', 'planted', 'UTC', now())",
                uuid::Uuid::now_v7(),
                b.0
            ),
        )
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("row-level security"),
        "unexpected error: {err}"
    );

    // A partner's configuration policy is inherited: readable in A's scope, never writable;
    // a partner-wide user is not readable at all.
    let partner = s.org(a).tenancy().organization().await.unwrap().partner_id;
    s.create_partner_config_policy(
        partner,
        crate::config_policies::monitoring("partner-wide", 70),
        audit("config_policy.create", "config_policy"),
    )
    .await
    .unwrap();
    s.create_user(
        NewUser {
            partner_id: partner,
            org_id: None,
            email: "tech@p.test".into(),
            name: "T".into(),
            password_hash: "x".into(),
        },
        audit("user.create", "user"),
    )
    .await
    .unwrap();
    assert_eq!(
        s.raw_strings_in(a, "SELECT name FROM config_policies")
            .await
            .unwrap(),
        ["partner-wide"]
    );
    assert_eq!(
        s.raw_execute_in(a, "UPDATE config_policies SET name = 'taken'")
            .await
            .unwrap(),
        0
    );
    assert!(
        s.raw_strings_in(a, "SELECT email FROM users")
            .await
            .unwrap()
            .is_empty()
    );

    // A connection that never set a scope sees nothing at all: the wall fails closed.
    let schema = s
        .raw_strings("SELECT CAST(current_schema() AS TEXT)")
        .await
        .unwrap()
        .remove(0);
    let mut bare = sqlx::PgConnection::connect(&breeze_store::testing::store_url())
        .await
        .unwrap();
    sqlx::query(&format!("SET search_path = {schema}"))
        .execute(&mut bare)
        .await
        .unwrap();
    let seen: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM devices")
        .fetch_one(&mut bare)
        .await
        .unwrap();
    assert_eq!(seen, 0);
    // Nor once a transaction's scope has ended (the setting then reads as empty, not unset).
    sqlx::raw_sql(&format!("BEGIN; SET LOCAL breeze.scope = '{a}'; COMMIT"))
        .execute(&mut bare)
        .await
        .unwrap();
    let seen: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM devices")
        .fetch_one(&mut bare)
        .await
        .unwrap();
    assert_eq!(seen, 0, "an ended scope is no scope");
    bare.close().await.unwrap();
}

/// The wall leaves the planner its statistics: a statement of organization A is estimated at
/// A's share of the rows. (Stated as `scope IN ('system', org_id::text)`, every policy cut
/// every estimate to 1% of the real rows, and plans were built for a fleet a hundredth the size.)
async fn the_wall_leaves_the_planner_its_estimates(cx: Ctx) {
    let s = &cx.store;
    let (a, _) = seeded(&cx).await;
    if s.backend() == Backend::Sqlite {
        return;
    }
    s.raw_execute(
        "INSERT INTO devices (id, org_id, site_id, hostname, os_family, os_name, os_version, \
         status, created_at) SELECT gen_random_uuid(), org_id, site_id, 'bulk-' || g, \
         os_family, os_name, os_version, status, created_at \
         FROM devices, generate_series(1, 499) g WHERE hostname = 'a-01'",
    )
    .await
    .unwrap();
    s.raw_execute("ANALYZE devices").await.unwrap();
    let plan = s
        .raw_strings_in(
            a,
            &format!("EXPLAIN SELECT hostname FROM devices WHERE org_id = '{a}'"),
        )
        .await
        .unwrap()
        .join("\n");
    let estimate: u64 = plan
        .split("rows=")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no estimate in {plan}"));
    assert!(
        (250..=1000).contains(&estimate),
        "500 rows are estimated as {estimate}: {plan}"
    );
}

/// Every table's `org_wall` says the same thing, in the form the planner can estimate
/// (migration 0070): a table a later migration adds with the old form fails here.
async fn every_wall_is_one_policy(cx: Ctx) {
    let s = &cx.store;
    if s.backend() == Backend::Sqlite {
        return;
    }
    let walls = s
        .raw_strings(
            "SELECT DISTINCT pg_get_expr(p.polqual, p.polrelid) FROM pg_policy p \
             JOIN pg_class c ON c.oid = p.polrelid AND p.polname = 'org_wall' \
             WHERE c.relnamespace = CAST(current_schema() AS regnamespace)",
        )
        .await
        .unwrap();
    assert_eq!(walls.len(), 1, "the walls differ: {walls:#?}");
    assert!(
        walls[0].starts_with("((org_id = (NULLIF(NULLIF(current_setting('breeze.scope'"),
        "{}",
        walls[0]
    );
}

/// Every table with an `org_id` column has row security enabled and forced and the
/// `org_wall` policy: a table added by a later migration without one fails here.
async fn row_security_covers_every_tenant_table(cx: Ctx) {
    let s = &cx.store;
    if s.backend() == Backend::Sqlite {
        return;
    }
    let uncovered = s
        .raw_strings(
            "SELECT CAST(c.relname AS TEXT) FROM pg_class c \
             JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'org_id' \
               AND NOT a.attisdropped \
             WHERE c.relnamespace = CAST(current_schema() AS regnamespace) \
               AND c.relkind IN ('r', 'p') AND NOT c.relispartition \
               AND NOT (c.relrowsecurity AND c.relforcerowsecurity AND EXISTS ( \
                 SELECT FROM pg_policy p WHERE p.polrelid = c.oid AND p.polname = 'org_wall')) \
             ORDER BY 1",
        )
        .await
        .unwrap();
    assert!(
        uncovered.is_empty(),
        "tenant tables without row security: {uncovered:?}"
    );
    let covered = s
        .raw_strings(
            "SELECT CAST(c.relname AS TEXT) FROM pg_class c \
             JOIN pg_policy p ON p.polrelid = c.oid AND p.polname = 'org_wall' \
             WHERE c.relnamespace = CAST(current_schema() AS regnamespace)",
        )
        .await
        .unwrap();
    for table in [
        "devices",
        "sites",
        "audit_log",
        "api_keys",
        "device_commands",
    ] {
        assert!(covered.iter().any(|t| t == table), "{table} has no policy");
    }
}

breeze_store::on_both_backends!(
    unfiltered_statements_reach_only_their_organization,
    row_security_covers_every_tenant_table,
    the_wall_leaves_the_planner_its_estimates,
    every_wall_is_one_policy,
);
