//! Device context memory: active vs resolved vs expired, confined to the organization.

use breeze_core::DeviceStatus;
use breeze_store::{NewContext, StoreError, testing::Ctx};
use chrono::Duration;

use crate::{audit, tenancy::new_device};

async fn context_entries_resolve_and_expire(cx: Ctx) {
    let s = &cx.store;
    let partner = s
        .create_partner("P", "p", audit("partner.create", "partner"))
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
    let oa = s.org(a.id);
    let site = oa
        .tenancy()
        .create_site("HQ", "UTC", audit("site.create", "site"))
        .await
        .unwrap();
    let dev = oa
        .devices()
        .create_device(
            new_device(site.id, "web-01", DeviceStatus::Online),
            audit("device.create", "device"),
        )
        .await
        .unwrap();
    let new = |kind: &str, summary: &str, expires: Option<Duration>| NewContext {
        device_id: dev.id,
        context_type: kind.into(),
        summary: summary.into(),
        details: Some(serde_json::json!({ "seen": 2 })),
        created_by: "api_key:k".into(),
        expires_at: expires.map(|d| s.clock().now() + d),
    };
    let issue = oa
        .context()
        .add_context(
            new("issue", "disk fills up", None),
            audit("device_context.create", "device_context"),
        )
        .await
        .unwrap();
    oa.context()
        .add_context(
            new("followup", "check on Monday", Some(Duration::days(1))),
            audit("device_context.create", "device_context"),
        )
        .await
        .unwrap();
    assert_eq!(issue.details, Some(serde_json::json!({ "seen": 2 })));
    assert_eq!(
        oa.context()
            .device_context(dev.id, false)
            .await
            .unwrap()
            .len(),
        2
    );

    let resolved = oa
        .context()
        .resolve_context(issue.id, audit("device_context.resolve", "device_context"))
        .await
        .unwrap();
    assert_eq!(resolved.state(s.clock().now()), "resolved");
    cx.clock.advance(Duration::days(2));
    assert!(
        oa.context()
            .device_context(dev.id, false)
            .await
            .unwrap()
            .is_empty(),
        "resolved and expired leave the active context"
    );
    let history = oa.context().device_context(dev.id, true).await.unwrap();
    let states: Vec<&str> = history.iter().map(|e| e.state(s.clock().now())).collect();
    assert_eq!(states, ["expired", "resolved"]);

    // Another organization sees none of it, even by id.
    let ob = s.org(b.id);
    assert!(matches!(
        ob.context().get_context(issue.id).await,
        Err(StoreError::NotFound(_))
    ));
    assert!(matches!(
        ob.context().device_context(dev.id, true).await,
        Err(StoreError::NotFound("device"))
    ));
    assert!(matches!(
        ob.context()
            .resolve_context(issue.id, audit("x", "y"))
            .await,
        Err(StoreError::NotFound(_))
    ));
    assert!(matches!(
        oa.context().add_context(new("rumour", "?", None), audit("x", "y")).await,
        Err(StoreError::Invalid(m)) if m.contains("rumour")
    ));
}

/// A summary and details with NUL are stored (U+0000 as U+FFFD) on both backends: PostgreSQL
/// answered an internal error, SQLite stored the NUL.
async fn nul_in_context_is_stored_as_the_replacement_character(cx: Ctx) {
    let s = &cx.store;
    let partner = s
        .create_partner("P", "p", audit("partner.create", "partner"))
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
    let oa = s.org(a.id);
    let site = oa
        .tenancy()
        .create_site("HQ", "UTC", audit("site.create", "site"))
        .await
        .unwrap();
    let dev = oa
        .devices()
        .create_device(
            new_device(site.id, "web-01", DeviceStatus::Online),
            audit("device.create", "device"),
        )
        .await
        .unwrap();
    let entry = oa
        .context()
        .add_context(
            NewContext {
                device_id: dev.id,
                context_type: "quirk".into(),
                summary: "fan\0noise".into(),
                details: Some(serde_json::json!({ "note\0": "x\0y" })),
                created_by: "api_key:k\0".into(),
                expires_at: None,
            },
            audit("device_context.create", "device_context").resource("a\0b"),
        )
        .await
        .unwrap();
    let read = oa.context().get_context(entry.id).await.unwrap();
    assert_eq!(read.summary, "fan\u{FFFD}noise");
    assert_eq!(read.created_by, "api_key:k\u{FFFD}");
    assert_eq!(
        read.details,
        Some(serde_json::json!({ "note\u{FFFD}": "x\u{FFFD}y" }))
    );
}

breeze_store::on_both_backends!(
    nul_in_context_is_stored_as_the_replacement_character,
    context_entries_resolve_and_expire
);
