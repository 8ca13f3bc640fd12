//! Configuration policies: lifecycle with audit and typed settings (errors name the field),
//! assignments confined to the organization (another's policy, site, group or device is not
//! found; a partner's policy is assigned by the partner), resolution through device > group >
//! site > organization > partner with priorities, agents' applied reports, and — over random
//! hierarchies and assignment sequences — a preview made in memory equals the store after
//! applying it.

use breeze_core::{
    ConfigLevel, DeviceGroupId, DeviceId, DeviceStatus, FeatureType, PolicyStatus,
    config_policy::{Candidate, Effective, resolve_for},
};
use breeze_store::{
    AuditFilter, ConfigPolicyUpdate, NewAssignment, NewConfigPolicy, OrgStore, StoreError,
    testing::Ctx,
};
use serde_json::json;
use uuid::Uuid;

use crate::{audit, tenancy::new_device};

pub(crate) fn monitoring(name: &str, metric: u32) -> NewConfigPolicy {
    NewConfigPolicy {
        name: name.into(),
        description: None,
        status: PolicyStatus::Active,
        settings: vec![(
            FeatureType::Monitoring,
            json!({ "metricIntervalSeconds": metric }),
        )],
        created_by: "test".into(),
    }
}

fn assign(policy: Uuid, level: ConfigLevel, target: Uuid, priority: i64) -> NewAssignment {
    NewAssignment {
        policy_id: policy,
        level,
        target_id: target,
        priority,
        created_by: "test".into(),
    }
}

fn metric(e: &Effective) -> Option<(serde_json::Value, String)> {
    e.get(&FeatureType::Monitoring)
        .and_then(|m| m.get("metricIntervalSeconds"))
        .map(|v| (v.value.clone(), v.source.policy_name.clone()))
}

async fn policies_assignments_resolution_and_confinement(cx: Ctx) {
    let s = &cx.store;
    let (a, b) = crate::two_orgs(s).await;
    let (oa, ob) = (s.org(a), s.org(b));
    let site = oa
        .tenancy()
        .create_site("HQ", "UTC", audit("s", "site"))
        .await
        .unwrap();
    let site_b = ob
        .tenancy()
        .create_site("B", "UTC", audit("s", "site"))
        .await
        .unwrap();
    let dev = oa
        .devices()
        .create_device(
            new_device(site.id, "web", DeviceStatus::Online),
            audit("d", "device"),
        )
        .await
        .unwrap();
    let other = oa
        .devices()
        .create_device(
            new_device(site.id, "db", DeviceStatus::Online),
            audit("d", "device"),
        )
        .await
        .unwrap();
    let dev_b = ob
        .devices()
        .create_device(
            new_device(site_b.id, "b", DeviceStatus::Online),
            audit("d", "device"),
        )
        .await
        .unwrap();
    let group = oa
        .tenancy()
        .create_group("G", None, None, audit("g", "group"))
        .await
        .unwrap();
    let group_b = ob
        .tenancy()
        .create_group("GB", None, None, audit("g", "group"))
        .await
        .unwrap();
    oa.tenancy().add_to_group(group.id, dev.id).await.unwrap();

    // Typed settings: the error names the field.
    let bad = oa
        .config_policies()
        .create_config_policy(
            NewConfigPolicy {
                settings: vec![(
                    FeatureType::Monitoring,
                    json!({ "metricIntervalSeconds": 1 }),
                )],
                ..monitoring("bad", 1)
            },
            audit("config_policy.create", "config_policy"),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&bad, StoreError::Invalid(m) if m.starts_with("monitoring.metricIntervalSeconds:")),
        "{bad}"
    );
    let bad = oa
        .config_policies()
        .create_config_policy(
            NewConfigPolicy {
                settings: vec![],
                ..monitoring("empty", 10)
            },
            audit("config_policy.create", "config_policy"),
        )
        .await
        .unwrap_err();
    assert!(matches!(bad, StoreError::Invalid(_)));

    let mk = |name: &'static str, m: u32| {
        let oa = s.org(a);
        async move {
            oa.config_policies()
                .create_config_policy(
                    monitoring(name, m),
                    audit("config_policy.create", "config_policy"),
                )
                .await
                .unwrap()
        }
    };
    let org_p = mk("org", 60).await;
    let site_p = mk("site", 50).await;
    let group_p = mk("group", 40).await;
    let dev_p = mk("device", 30).await;
    let dev_hi = mk("device-high", 20).await;
    let dup = oa
        .config_policies()
        .create_config_policy(monitoring("org", 60), audit("c", "config_policy"))
        .await
        .unwrap_err();
    assert!(matches!(dup, StoreError::Conflict(_)), "{dup}");
    let b_policy = ob
        .config_policies()
        .create_config_policy(monitoring("b", 99), audit("c", "config_policy"))
        .await
        .unwrap();

    // Partner-wide, lowest precedence.
    let partner = oa.tenancy().organization().await.unwrap().partner_id;
    let pp = s
        .create_partner_config_policy(
            partner,
            monitoring("partner", 70),
            audit("c", "config_policy"),
        )
        .await
        .unwrap();
    s.assign_partner_config_policy(partner, pp.id, 0, "test", audit("a", "config_policy"))
        .await
        .unwrap();
    assert_eq!(
        metric(
            &oa.config_policies()
                .effective_configuration(dev.id)
                .await
                .unwrap()
        ),
        Some((json!(70), "partner".into()))
    );
    // An organization cannot assign (nor change) the partner's policy.
    let e = oa
        .config_policies()
        .assign_config_policy(
            assign(pp.id, ConfigLevel::Organization, a.0, 0),
            audit("a", "x"),
        )
        .await
        .unwrap_err();
    assert!(matches!(e, StoreError::Invalid(_)), "{e}");
    assert!(matches!(
        oa.config_policies()
            .update_config_policy(pp.id, ConfigPolicyUpdate::default(), audit("u", "x"))
            .await,
        Err(StoreError::Invalid(_))
    ));

    let steps = [
        (org_p.id, ConfigLevel::Organization, a.0, 0, 60, "org"),
        (site_p.id, ConfigLevel::Site, site.id.0, 0, 50, "site"),
        (
            group_p.id,
            ConfigLevel::DeviceGroup,
            group.id.0,
            0,
            40,
            "group",
        ),
        (dev_p.id, ConfigLevel::Device, dev.id.0, 0, 30, "device"),
        (
            dev_hi.id,
            ConfigLevel::Device,
            dev.id.0,
            5,
            20,
            "device-high",
        ),
    ];
    let mut ids = Vec::new();
    for (policy, level, target, priority, want, name) in steps {
        let made = oa
            .config_policies()
            .assign_config_policy(
                assign(policy, level, target, priority),
                audit("config_policy.assign", "x"),
            )
            .await
            .unwrap();
        ids.push(made.id);
        let e = oa
            .config_policies()
            .effective_configuration(dev.id)
            .await
            .unwrap();
        assert_eq!(metric(&e), Some((json!(want), name.into())), "after {name}");
        let src = &e[&FeatureType::Monitoring]["metricIntervalSeconds"].source;
        assert_eq!(
            (src.level.as_str(), src.priority),
            (level.as_str(), priority as i32)
        );
    }
    // The other device is only under the site.
    assert_eq!(
        metric(
            &oa.config_policies()
                .effective_configuration(other.id)
                .await
                .unwrap()
        ),
        Some((json!(50), "site".into()))
    );
    // A duplicate assignment and a priority out of range are refused.
    assert!(matches!(
        oa.config_policies()
            .assign_config_policy(
                assign(org_p.id, ConfigLevel::Organization, a.0, 0),
                audit("a", "x")
            )
            .await,
        Err(StoreError::Conflict(_))
    ));
    assert!(matches!(
        oa.config_policies()
            .assign_config_policy(
                assign(org_p.id, ConfigLevel::Site, site.id.0, 1001),
                audit("a", "x")
            )
            .await,
        Err(StoreError::Invalid(_))
    ));
    // Another organization's policy, site, group, device or organization is not found.
    for (policy, level, target) in [
        (b_policy.id, ConfigLevel::Organization, a.0),
        (org_p.id, ConfigLevel::Site, site_b.id.0),
        (org_p.id, ConfigLevel::DeviceGroup, group_b.id.0),
        (org_p.id, ConfigLevel::Device, dev_b.id.0),
        (org_p.id, ConfigLevel::Organization, b.0),
    ] {
        let e = oa
            .config_policies()
            .assign_config_policy(assign(policy, level, target, 0), audit("a", "x"))
            .await
            .unwrap_err();
        assert!(matches!(e, StoreError::NotFound(_)), "{level}: {e}");
    }
    assert!(matches!(
        oa.config_policies().get_config_policy(b_policy.id).await,
        Err(StoreError::NotFound(_))
    ));
    assert!(matches!(
        ob.config_policies().get_config_assignment(ids[0]).await,
        Err(StoreError::NotFound(_))
    ));
    assert!(matches!(
        ob.config_policies()
            .remove_config_assignment(ids[0], audit("r", "x"))
            .await,
        Err(StoreError::NotFound(_))
    ));
    assert!(matches!(
        ob.config_policies().effective_configuration(dev.id).await,
        Err(StoreError::NotFound(_))
    ));
    assert!(matches!(
        ob.config_policies()
            .delete_config_policy(org_p.id, audit("d", "x"))
            .await,
        Err(StoreError::NotFound(_))
    ));
    // B sees its own policy and the partner's, none of A's.
    let names: Vec<String> = ob
        .config_policies()
        .list_config_policies(None)
        .await
        .unwrap()
        .into_iter()
        .map(|p| p.name)
        .collect();
    assert_eq!(names, ["b", "partner"]);

    // Removing the nearest assignments falls back level by level; an inactive policy resolves
    // nowhere.
    oa.config_policies()
        .remove_config_assignment(ids[4], audit("config_policy.unassign", "x"))
        .await
        .unwrap();
    assert_eq!(
        metric(
            &oa.config_policies()
                .effective_configuration(dev.id)
                .await
                .unwrap()
        )
        .unwrap()
        .0,
        json!(30)
    );
    oa.config_policies()
        .update_config_policy(
            dev_p.id,
            ConfigPolicyUpdate {
                status: Some(PolicyStatus::Inactive),
                ..Default::default()
            },
            audit("config_policy.update", "x"),
        )
        .await
        .unwrap();
    assert_eq!(
        metric(
            &oa.config_policies()
                .effective_configuration(dev.id)
                .await
                .unwrap()
        )
        .unwrap()
        .0,
        json!(40)
    );
    oa.config_policies()
        .delete_config_policy(group_p.id, audit("config_policy.delete", "x"))
        .await
        .unwrap();
    assert_eq!(
        metric(
            &oa.config_policies()
                .effective_configuration(dev.id)
                .await
                .unwrap()
        )
        .unwrap()
        .0,
        json!(50)
    );
    assert!(
        oa.config_policies()
            .list_config_assignments()
            .await
            .unwrap()
            .iter()
            .all(|x| x.policy_id != group_p.id)
    );

    // Per-setting resolution: a nearer policy setting another field leaves this one alone.
    let log = oa
        .config_policies()
        .create_config_policy(
            NewConfigPolicy {
                settings: vec![(FeatureType::AgentLog, json!({ "level": "debug" }))],
                ..monitoring("log", 10)
            },
            audit("c", "x"),
        )
        .await
        .unwrap();
    oa.config_policies()
        .assign_config_policy(
            assign(log.id, ConfigLevel::Device, dev.id.0, 0),
            audit("a", "x"),
        )
        .await
        .unwrap();
    let e = oa
        .config_policies()
        .effective_configuration(dev.id)
        .await
        .unwrap();
    assert_eq!(metric(&e).unwrap().0, json!(50));
    assert_eq!(e[&FeatureType::AgentLog]["level"].value, json!("debug"));

    // Every change was audited in A.
    let page = oa
        .audit()
        .query_audit(
            &AuditFilter {
                action: Some("config_policy.".into()),
                ..Default::default()
            },
            None,
            100,
        )
        .await
        .unwrap();
    assert!(page.records.len() >= 10, "{}", page.records.len());

    // Applied reports: recorded, unchanged ones write nothing, confined to the organization.
    s.record_config_report(dev.id, a, Some("r1"), &json!({ "metricsIntervalSecs": 50 }))
        .await
        .unwrap();
    let r = oa
        .config_policies()
        .config_report(dev.id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (r.revision.as_deref(), &r.applied),
        (Some("r1"), &json!({ "metricsIntervalSecs": 50 }))
    );
    cx.clock.advance(chrono::Duration::seconds(5));
    s.record_config_report(dev.id, a, Some("r1"), &json!({ "metricsIntervalSecs": 50 }))
        .await
        .unwrap();
    assert_eq!(
        oa.config_policies()
            .config_report(dev.id)
            .await
            .unwrap()
            .unwrap()
            .reported_at,
        r.reported_at
    );
    assert!(
        ob.config_policies()
            .config_report(dev.id)
            .await
            .unwrap()
            .is_none()
    );
    // A report naming another organization's device is not stored.
    assert!(
        s.record_config_report(dev_b.id, a, None, &json!({}))
            .await
            .is_err()
    );
    let _ = DeviceId(dev.id.0);
}

/// A small deterministic generator (xorshift), so a failure replays.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Values and sources without the assignment id (a preview's new assignment has its own).
fn comparable(e: &Effective) -> Vec<(String, String, serde_json::Value, Uuid, String, i32)> {
    e.iter()
        .flat_map(|(f, m)| {
            m.iter().map(move |(k, v)| {
                (
                    f.to_string(),
                    k.clone(),
                    v.value.clone(),
                    v.source.policy_id,
                    v.source.level.clone(),
                    v.source.priority,
                )
            })
        })
        .collect()
}

async fn all_effective(o: &OrgStore<'_>, cands: &[Candidate]) -> Vec<Effective> {
    o.config_policies()
        .device_places(None)
        .await
        .unwrap()
        .iter()
        .map(|p| resolve_for(p, cands))
        .collect()
}

async fn preview_equals_apply_over_random_hierarchies(cx: Ctx) {
    let s = &cx.store;
    let (a, _) = crate::two_orgs(s).await;
    let o = s.org(a);
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut sites = Vec::new();
    for i in 0..3 {
        sites.push(
            o.tenancy()
                .create_site(&format!("s{i}"), "UTC", audit("s", "site"))
                .await
                .unwrap()
                .id,
        );
    }
    let mut groups: Vec<DeviceGroupId> = Vec::new();
    for i in 0..3 {
        groups.push(
            o.tenancy()
                .create_group(&format!("g{i}"), None, None, audit("g", "g"))
                .await
                .unwrap()
                .id,
        );
    }
    let mut devices = Vec::new();
    for i in 0..6 {
        let site = sites[rng.below(sites.len())];
        let d = o
            .devices()
            .create_device(
                new_device(site, &format!("d{i}"), DeviceStatus::Online),
                audit("d", "d"),
            )
            .await
            .unwrap();
        for g in &groups {
            if rng.below(2) == 0 {
                o.tenancy().add_to_group(*g, d.id).await.unwrap();
            }
        }
        devices.push(d.id);
    }
    let mut policies = Vec::new();
    for i in 0..6 {
        let mut settings = vec![];
        if rng.below(3) > 0 {
            settings.push((
                FeatureType::Monitoring,
                json!({ "metricIntervalSeconds": 5 + rng.below(100) }),
            ));
        }
        if settings.is_empty() || rng.below(2) == 0 {
            let level = ["debug", "info", "warn"][rng.below(3)];
            settings.push((FeatureType::AgentLog, json!({ "level": level })));
        }
        let p = o
            .config_policies()
            .create_config_policy(
                NewConfigPolicy {
                    settings,
                    ..monitoring(&format!("p{i}"), 5)
                },
                audit("c", "c"),
            )
            .await
            .unwrap();
        policies.push(p.id);
    }
    let mut live: Vec<Uuid> = Vec::new();
    for step in 0..24 {
        let before = o.config_policies().config_candidates().await.unwrap();
        if !live.is_empty() && rng.below(3) == 0 {
            // Remove one: preview without it, then remove.
            let gone = live.remove(rng.below(live.len()));
            let without: Vec<Candidate> = before
                .iter()
                .filter(|c| c.assignment_id != gone)
                .cloned()
                .collect();
            let preview = all_effective(&o, &without).await;
            o.config_policies()
                .remove_config_assignment(gone, audit("r", "r"))
                .await
                .unwrap();
            let applied =
                all_effective(&o, &o.config_policies().config_candidates().await.unwrap()).await;
            assert_eq!(
                preview.iter().map(comparable).collect::<Vec<_>>(),
                applied.iter().map(comparable).collect::<Vec<_>>(),
                "step {step}: removal"
            );
            continue;
        }
        let level = ConfigLevel::ALL[1 + rng.below(4)];
        let target = match level {
            ConfigLevel::Organization => a.0,
            ConfigLevel::Site => sites[rng.below(sites.len())].0,
            ConfigLevel::DeviceGroup => groups[rng.below(groups.len())].0,
            _ => devices[rng.below(devices.len())].0,
        };
        let new = assign(
            policies[rng.below(policies.len())],
            level,
            target,
            rng.below(3) as i64,
        );
        let Ok(policy) = o.config_policies().check_new_assignment(&new).await else {
            continue; // already assigned there
        };
        let mut with = before.clone();
        with.push(Candidate {
            assignment_id: Uuid::now_v7(),
            policy_id: policy.id,
            policy_name: policy.name.clone(),
            level,
            target_id: target,
            priority: new.priority as i32,
            settings: std::sync::Arc::new(policy.settings.clone()),
        });
        let preview = all_effective(&o, &with).await;
        live.push(
            o.config_policies()
                .assign_config_policy(new, audit("a", "a"))
                .await
                .unwrap()
                .id,
        );
        let applied: Vec<Effective> = {
            let mut v = Vec::new();
            for d in &devices {
                v.push(
                    o.config_policies()
                        .effective_configuration(*d)
                        .await
                        .unwrap(),
                );
            }
            v
        };
        assert_eq!(
            preview.iter().map(comparable).collect::<Vec<_>>(),
            applied.iter().map(comparable).collect::<Vec<_>>(),
            "step {step}: addition"
        );
    }
}

breeze_store::on_both_backends!(
    policies_assignments_resolution_and_confinement,
    preview_equals_apply_over_random_hierarchies
);
