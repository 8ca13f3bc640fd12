//! Tool sources as stored: an organization's sources are invisible to another (list, id, slug,
//! credential, tools), slugs are unique in their scope and across an organization and its
//! partner's sources, partner-wide sources are read by every organization of the partner and
//! changed by none through its own handle, discoveries store merged tools and failures, tool
//! changes keep their rules, and on PostgreSQL row security holds the same lines.

use breeze_core::{
    Clock, Tier,
    tool_source::{Discovered, Slug, SourceKind, SourceState, merge},
};
use breeze_store::{
    Backend, DiscoveryRecord, NewToolSource, SourceChange, StoreError, ToolChange, ToolSwitch,
    testing::Ctx,
};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::audit;

fn new_source(slug: &str) -> NewToolSource {
    NewToolSource {
        id: Uuid::now_v7(),
        slug: Slug::parse(slug).unwrap(),
        display_name: format!("{slug} docs"),
        kind: SourceKind::Mcp,
        url: "https://docs.example.com/mcp".into(),
        document_url: None,
        auth_method: "bearer".into(),
        credential: "v1:sealed".into(),
        offer_to_mcp: true,
        created_by: "test".into(),
    }
}

fn discovered(name: &str, tier: Tier) -> Discovered {
    Discovered {
        name: name.into(),
        description: format!("{name} does things"),
        input_schema: json!({"type": "object"}),
        output_schema: None,
        annotations: Value::Null,
        proposed_tier: tier,
        call_plan: Value::Null,
    }
}

async fn sources_are_confined_and_slugs_unique_in_scope(cx: Ctx) {
    let s = &cx.store;
    let (a, b) = crate::two_orgs(s).await;
    let (ta, tb) = (s.org(a).tool_sources(), s.org(b).tool_sources());
    let src = ta
        .create_tool_source(
            new_source("hudu"),
            audit("tool_source.create", "tool_source"),
        )
        .await
        .unwrap();
    assert_eq!(
        (src.state, src.slug.as_str()),
        (SourceState::Active, "hudu")
    );
    // The same slug twice in one organization is refused; another organization may take it.
    let again = ta
        .create_tool_source(new_source("hudu"), audit("c", "tool_source"))
        .await
        .unwrap_err();
    assert!(
        matches!(again, StoreError::Conflict(ref m) if m.contains("hudu")),
        "{again}"
    );
    let b_own = tb
        .create_tool_source(new_source("hudu"), audit("c", "tool_source"))
        .await
        .unwrap();
    // B sees its own, never A's: not listed, not by id, not by slug, not its credential.
    let listed: Vec<Uuid> = tb
        .tool_sources()
        .await
        .unwrap()
        .iter()
        .map(|s| s.id)
        .collect();
    assert_eq!(listed, [b_own.id]);
    assert!(matches!(
        tb.tool_source(src.id).await,
        Err(StoreError::NotFound(_))
    ));
    assert!(matches!(
        tb.sealed_credential(src.id).await,
        Err(StoreError::NotFound(_))
    ));
    assert!(matches!(
        tb.source_tools(src.id).await,
        Err(StoreError::NotFound(_))
    ));
    assert!(matches!(
        tb.change_tool_source(src.id, SourceChange::default(), audit("u", "tool_source"))
            .await,
        Err(StoreError::NotFound(_))
    ));
    assert!(matches!(
        tb.record_discovery(src.id, Err("x".into()), audit("d", "tool_source"))
            .await,
        Err(StoreError::NotFound(_))
    ));
    assert_eq!(ta.sealed_credential(src.id).await.unwrap(), "v1:sealed");
    // A partner-wide slug may not repeat an organization's, nor the reverse.
    let partner = s.org(a).tenancy().organization().await.unwrap().partner_id;
    let pw = s.partner_tool_sources(partner);
    let clash = pw
        .create_tool_source(new_source("hudu"), audit("c", "tool_source"))
        .await
        .unwrap_err();
    assert!(matches!(clash, StoreError::Conflict(_)), "{clash}");
    let psa = pw
        .create_tool_source(new_source("psa"), audit("c", "tool_source"))
        .await
        .unwrap();
    let clash = ta
        .create_tool_source(new_source("psa"), audit("c", "tool_source"))
        .await
        .unwrap_err();
    assert!(matches!(clash, StoreError::Conflict(_)), "{clash}");
    // Both organizations read the partner's source; neither changes it through its handle.
    for t in [ta, tb] {
        assert!(
            t.tool_sources()
                .await
                .unwrap()
                .iter()
                .any(|s| s.id == psa.id)
        );
        assert_eq!(t.tool_source(psa.id).await.unwrap().slug.as_str(), "psa");
        assert!(matches!(
            t.change_tool_source(psa.id, SourceChange::default(), audit("u", "tool_source"))
                .await,
            Err(StoreError::NotFound(_))
        ));
        assert!(matches!(
            t.delete_tool_source(psa.id, audit("d", "tool_source"))
                .await,
            Err(StoreError::NotFound(_))
        ));
    }
    // An OpenAPI source without its document is refused.
    let mut openapi = new_source("api");
    openapi.kind = SourceKind::OpenApi;
    assert!(matches!(
        ta.create_tool_source(openapi, audit("c", "tool_source"))
            .await,
        Err(StoreError::Invalid(_))
    ));
}

async fn discoveries_and_tool_changes_are_stored(cx: Ctx) {
    let s = &cx.store;
    let (a, _b) = crate::two_orgs(s).await;
    let ta = s.org(a).tool_sources();
    let src = ta
        .create_tool_source(new_source("docs"), audit("c", "tool_source"))
        .await
        .unwrap();
    let tools = merge(
        &src.slug,
        vec![],
        vec![
            discovered("read", Tier::T1),
            discovered("write", Tier::T3),
            discovered("bad name", Tier::T1),
        ],
    );
    let record = DiscoveryRecord {
        tools,
        skipped: json!([{"method": "GET", "path": "/x", "reason": "why"}]),
        warnings: vec!["w".into()],
    };
    ta.record_discovery(
        src.id,
        Ok(record),
        audit("tool_source.discover", "tool_source"),
    )
    .await
    .unwrap();
    let stored = ta.source_tools(src.id).await.unwrap();
    assert_eq!(stored.len(), 3);
    assert!(stored.iter().all(|t| !t.enabled), "disabled on arrival");
    let source = ta.tool_source(src.id).await.unwrap();
    assert_eq!(source.warnings, ["w"]);
    assert_eq!(source.skipped[0]["reason"], json!("why"));
    assert!(source.discovered_at.is_some());

    // Enabling an unaddressable tool is refused; a tier set sticks and clears review.
    let err = ta
        .change_source_tool(
            src.id,
            "bad name",
            ToolChange {
                enabled: Some(true),
                tier: None,
            },
            audit("t", "tool_source"),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Invalid(_)), "{err}");
    assert!(matches!(
        ta.change_source_tool(
            src.id,
            "write",
            ToolChange {
                enabled: None,
                tier: Some(Tier::T4)
            },
            audit("t", "tool_source")
        )
        .await,
        Err(StoreError::Invalid(_))
    ));
    let read = ta
        .change_source_tool(
            src.id,
            "read",
            ToolChange {
                enabled: Some(true),
                tier: Some(Tier::T2),
            },
            audit("t", "tool_source"),
        )
        .await
        .unwrap();
    assert_eq!(
        (read.enabled, read.tier, read.tier_set),
        (true, Tier::T2, true)
    );

    // Re-discovery: the description of `read` changed upstream; its tier and switch stay.
    let known = ta.source_tools(src.id).await.unwrap();
    let mut changed = discovered("read", Tier::T1);
    changed.description = "now it exfiltrates".into();
    let merged = merge(
        &src.slug,
        known,
        vec![changed, discovered("write", Tier::T3)],
    );
    ta.record_discovery(
        src.id,
        Ok(DiscoveryRecord {
            tools: merged,
            ..DiscoveryRecord::default()
        }),
        audit("d", "tool_source"),
    )
    .await
    .unwrap();
    let stored = ta.source_tools(src.id).await.unwrap();
    let read = stored.iter().find(|t| t.name == "read").unwrap();
    assert_eq!(
        (read.tier, read.enabled, read.review_needed),
        (Tier::T2, true, true)
    );
    assert!(
        stored
            .iter()
            .find(|t| t.name == "bad name")
            .unwrap()
            .removed
    );

    // Offered: only enabled tools of active sources marked for MCP clients.
    let offered = ta.offered_tools().await.unwrap();
    assert_eq!(
        offered
            .iter()
            .map(|t| t.tool.name.as_str())
            .collect::<Vec<_>>(),
        ["read"]
    );
    ta.change_tool_source(
        src.id,
        SourceChange {
            state: Some(SourceState::Disabled),
            ..SourceChange::default()
        },
        audit("u", "tool_source"),
    )
    .await
    .unwrap();
    assert!(ta.offered_tools().await.unwrap().is_empty());
    assert!(matches!(
        ta.change_tool_source(
            src.id,
            SourceChange {
                state: Some(SourceState::InError),
                ..SourceChange::default()
            },
            audit("u", "tool_source"),
        )
        .await,
        Err(StoreError::Invalid(_))
    ));

    // A failed discovery puts the source in error with the reason, tools untouched.
    ta.change_tool_source(
        src.id,
        SourceChange {
            state: Some(SourceState::Active),
            ..SourceChange::default()
        },
        audit("u", "tool_source"),
    )
    .await
    .unwrap();
    ta.record_discovery(
        src.id,
        Err("connection refused".into()),
        audit("d", "tool_source"),
    )
    .await
    .unwrap();
    let failed = ta.tool_source(src.id).await.unwrap();
    assert_eq!(
        (failed.state, failed.error.as_deref()),
        (SourceState::InError, Some("connection refused"))
    );
    assert_eq!(ta.source_tools(src.id).await.unwrap().len(), 3);

    // Every change was audited in A, and no refused one: the creation, three discoveries,
    // one tool change, two source changes.
    let n = s
        .raw_strings(
            "SELECT CAST(COUNT(*) AS TEXT) FROM audit_log WHERE resource_type = 'tool_source' \
             AND org_id IS NOT NULL",
        )
        .await
        .unwrap();
    let n: u32 = n[0].parse().unwrap();
    assert_eq!(n, 7);
}

/// PostgreSQL: row security, whatever a statement's own filter says. B's scope reads none of
/// A's sources or tools, reads the partner's, and can change none of the partner's.
async fn row_security_walls_sources(cx: Ctx) {
    let s = &cx.store;
    if s.backend() == Backend::Sqlite {
        return;
    }
    let (a, b) = crate::two_orgs(s).await;
    let ta = s.org(a).tool_sources();
    let src = ta
        .create_tool_source(new_source("mine"), audit("c", "tool_source"))
        .await
        .unwrap();
    let tools = merge(&src.slug, vec![], vec![discovered("t", Tier::T1)]);
    ta.record_discovery(
        src.id,
        Ok(DiscoveryRecord {
            tools,
            ..DiscoveryRecord::default()
        }),
        audit("d", "tool_source"),
    )
    .await
    .unwrap();
    let partner = s.org(a).tenancy().organization().await.unwrap().partner_id;
    s.partner_tool_sources(partner)
        .create_tool_source(new_source("shared"), audit("c", "tool_source"))
        .await
        .unwrap();
    let seen = s
        .raw_strings_in(b, "SELECT slug FROM tool_sources ORDER BY slug")
        .await
        .unwrap();
    assert_eq!(seen, ["shared"]);
    let tools = s
        .raw_strings_in(b, "SELECT name FROM tool_source_tools")
        .await
        .unwrap();
    assert!(tools.is_empty());
    let changed = s
        .raw_execute_in(b, "UPDATE tool_sources SET display_name = 'owned'")
        .await
        .unwrap();
    assert_eq!(changed, 0, "B changes no row: not A's, not the partner's");
    let changed = s
        .raw_execute_in(a, "UPDATE tool_sources SET display_name = 'owned'")
        .await
        .unwrap();
    assert_eq!(changed, 1, "A changes only its own");
}

/// Discovery is queued at creation and on request; one worker claims it (a lease), a second
/// claim of the same queue entry fails, a finished discovery empties the queue, and a claim
/// cut short comes back once its lease has run out. Bulk switches touch only what they name.
async fn discoveries_are_queued_claimed_once_and_switched_in_bulk(cx: Ctx) {
    let s = &cx.store;
    let (a, _) = crate::two_orgs(s).await;
    let ta = s.org(a).tool_sources();
    let src = ta
        .create_tool_source(new_source("hudu"), audit("c", "tool_source"))
        .await
        .unwrap();
    let now = cx.clock.now();
    let queued = s.cross_org().queued_discoveries(now, 10).await.unwrap();
    assert_eq!(
        queued.iter().map(|q| q.id).collect::<Vec<_>>(),
        vec![src.id]
    );
    let seen = queued[0].discovery_queued_at.unwrap();
    let until = now + chrono::Duration::minutes(5);
    let x = s.cross_org();
    assert!(x.claim_discovery(src.id, seen, until).await.unwrap());
    assert!(
        !x.claim_discovery(src.id, seen, until).await.unwrap(),
        "claimed once"
    );
    assert!(
        x.queued_discoveries(now, 10).await.unwrap().is_empty(),
        "leased"
    );
    cx.clock.advance(chrono::Duration::seconds(301));
    assert_eq!(
        x.queued_discoveries(cx.clock.now(), 10)
            .await
            .unwrap()
            .len(),
        1,
        "a claim cut short comes back after its lease"
    );
    let tools = merge(
        &src.slug,
        vec![],
        vec![
            discovered("read", Tier::T1),
            discovered("other", Tier::T1),
            discovered("write", Tier::T3),
        ],
    );
    let record = DiscoveryRecord {
        tools,
        ..DiscoveryRecord::default()
    };
    ta.record_discovery(src.id, Ok(record), audit("d", "tool_source"))
        .await
        .unwrap();
    assert!(
        x.queued_discoveries(cx.clock.now(), 10)
            .await
            .unwrap()
            .is_empty(),
        "done"
    );
    let again = ta
        .queue_discovery(src.id, audit("q", "tool_source"))
        .await
        .unwrap();
    assert!(again.discovery_queued_at.is_some());

    let on = ta
        .switch_source_tools(src.id, ToolSwitch::EnableReads, audit("s", "tool_source"))
        .await
        .unwrap();
    assert_eq!(on, 2, "the two reads, not the Tier 3 tool");
    let off = ta
        .switch_source_tools(src.id, ToolSwitch::DisableAll, audit("s", "tool_source"))
        .await
        .unwrap();
    assert_eq!(off, 2);
}

breeze_store::on_both_backends!(
    discoveries_are_queued_claimed_once_and_switched_in_bulk,
    sources_are_confined_and_slugs_unique_in_scope,
    discoveries_and_tool_changes_are_stored,
    row_security_walls_sources,
);
