//! Tickets on both backends: numbers unique per partner, the transitions a PSA allows,
//! comments (own or any), alert links and tickets made from alerts, time entries with one
//! running timer per user that survives a restart, parts, moving to another organization of
//! the partner, every change audited — and confinement: every id-taking method given another
//! organization's ticket, alert, comment or device answers not found.

use breeze_core::{
    Actor, AlertCondition, Clock, Comparison, Currency, DeviceStatus, Metric, Money, OrgId,
    Quantity, Severity, TicketPriority, TicketStatus, UserId,
};
use breeze_store::{
    AuditFilter, CommentScope, NewPart, NewRule, NewTicket, NewTime, NewUser, RuleTarget, Store,
    StoreError, TicketFilter, TicketUpdate, testing::Ctx,
};
use chrono::Duration;

use crate::{audit, tenancy::new_device};

pub(crate) fn ticket(subject: &str) -> NewTicket {
    NewTicket {
        subject: subject.into(),
        description: "printer on fire".into(),
        category: None,
        priority: TicketPriority::Normal,
        device_id: None,
        submitter: Some("alice@customer.test".into()),
        assignee_id: None,
        tags: vec!["printing".into()],
        due_at: None,
        created_by: "test".into(),
    }
}

pub(crate) fn part(description: &str, quantity: Quantity, price: Money, billable: bool) -> NewPart {
    NewPart {
        description: description.into(),
        quantity,
        unit_price: price,
        billable,
        created_by: "test".into(),
    }
}

pub(crate) fn usd(amount: &str) -> Money {
    Money::parse(amount, Currency::parse("USD").unwrap()).unwrap()
}

pub(crate) fn time(user: UserId, rate: &str) -> NewTime {
    NewTime {
        user,
        actor: Actor::new(breeze_core::ActorType::User, user),
        billable: true,
        rate: usd(rate),
        note: Some("fixed it".into()),
    }
}

/// A user of the partner with `role` in each of `orgs`.
pub(crate) async fn user(s: &Store, email: &str, role: &str, orgs: &[OrgId]) -> UserId {
    let partner = s
        .org(orgs[0])
        .tenancy()
        .organization()
        .await
        .unwrap()
        .partner_id;
    let u = s
        .create_user(
            NewUser {
                partner_id: partner,
                org_id: None,
                email: email.into(),
                name: email.into(),
                password_hash: "x".into(),
            },
            audit("user.create", "user"),
        )
        .await
        .unwrap();
    let role = s.find_role(partner, role).await.unwrap();
    for org in orgs {
        s.assign_role(u.id, *org, role.id, audit("role.assign", "user"))
            .await
            .unwrap();
    }
    u.id
}

/// A device of `org` with a raised critical alert.
pub(crate) async fn raised_alert(
    s: &Store,
    org: OrgId,
) -> (breeze_core::DeviceId, breeze_store::Alert) {
    let o = s.org(org);
    let site = o
        .tenancy()
        .create_site("Alerts", "UTC", audit("s", "site"))
        .await
        .unwrap();
    let dev = o
        .devices()
        .create_device(
            new_device(site.id, "srv", DeviceStatus::Online),
            audit("d", "device"),
        )
        .await
        .unwrap();
    let rule = o
        .alerts()
        .create_rule(
            NewRule {
                name: "hot".into(),
                description: None,
                severity: Severity::Critical,
                enabled: true,
                condition: AlertCondition::Metric {
                    metric: Metric::Cpu,
                    comparison: Comparison::Above,
                    threshold: 90.0,
                    duration_minutes: 0,
                },
                target: RuleTarget::Organization,
                cooldown_minutes: 0,
                auto_resolve: false,
                channel_ids: vec![],
                created_by: "test".into(),
            },
            audit("alert_rule.create", "alert_rule"),
        )
        .await
        .unwrap();
    let alert = o
        .alerts()
        .raise_alert(&rule, dev.id, Some(99.0))
        .await
        .unwrap()
        .unwrap();
    (dev.id, alert)
}

async fn actions(s: &Store, org: OrgId) -> Vec<String> {
    let page = s
        .org(org)
        .audit()
        .query_audit(&AuditFilter::default(), None, 200)
        .await
        .unwrap();
    page.records.into_iter().map(|r| r.event.action).collect()
}

fn a(action: &str) -> breeze_core::AuditEvent {
    audit(action, "ticket")
}

async fn numbers_statuses_fields_and_comments(cx: Ctx) {
    let s = &cx.store;
    let (a_org, b_org) = crate::two_orgs(s).await;
    let (ta, tb) = (s.org(a_org).tickets(), s.org(b_org).tickets());
    let tech = user(s, "tech@p.test", "Technician", &[a_org]).await;
    let other = user(s, "other@p.test", "Technician", &[a_org]).await;
    let outsider = user(s, "out@p.test", "Technician", &[b_org]).await;

    // Numbers count per partner, across its organizations; another partner starts at 1.
    let t1 = ta
        .create_ticket(ticket("one"), a("ticket.create"))
        .await
        .unwrap();
    let t2 = tb
        .create_ticket(ticket("two"), a("ticket.create"))
        .await
        .unwrap();
    let t3 = ta
        .create_ticket(ticket("three"), a("ticket.create"))
        .await
        .unwrap();
    assert_eq!((t1.number, t2.number, t3.number), (1, 2, 3));
    assert_eq!(t3.reference(), "T-3");
    let q = s
        .create_partner("Q", "q", audit("p", "partner"))
        .await
        .unwrap();
    let q_org = s
        .create_organization(q.id, "QA", "qa", audit("o", "org"))
        .await
        .unwrap();
    let q1 = s
        .org(q_org.id)
        .tickets()
        .create_ticket(ticket("q"), a("ticket.create"))
        .await
        .unwrap();
    assert_eq!(q1.number, 1);
    assert_eq!(t1.status, TicketStatus::New);

    // Transitions: what a PSA allows, and the stamps.
    let open = ta
        .set_status(t1.id, TicketStatus::Open, a("ticket.status"))
        .await
        .unwrap();
    assert_eq!(open.status, TicketStatus::Open);
    assert!(matches!(
        ta.set_status(t1.id, TicketStatus::New, a("ticket.status"))
            .await,
        Err(StoreError::Conflict(_))
    ));
    assert!(matches!(
        ta.set_status(t1.id, TicketStatus::Open, a("ticket.status"))
            .await,
        Err(StoreError::Conflict(_))
    ));
    let resolved = ta
        .set_status(t1.id, TicketStatus::Resolved, a("ticket.status"))
        .await
        .unwrap();
    assert!(resolved.resolved_at.is_some() && resolved.closed_at.is_none());
    assert!(matches!(
        ta.set_status(t1.id, TicketStatus::Pending, a("ticket.status"))
            .await,
        Err(StoreError::Conflict(_))
    ));
    let closed = ta
        .set_status(t1.id, TicketStatus::Closed, a("ticket.status"))
        .await
        .unwrap();
    assert_eq!(closed.resolved_at, resolved.resolved_at);
    assert!(closed.closed_at.is_some());
    let reopened = ta
        .set_status(t1.id, TicketStatus::Open, a("ticket.status"))
        .await
        .unwrap();
    assert!(reopened.resolved_at.is_none() && reopened.closed_at.is_none());

    // Assign: only to someone who works in the organization.
    let assigned = ta
        .assign(t1.id, Some(tech), a("ticket.assign"))
        .await
        .unwrap();
    assert_eq!(assigned.assignee_id, Some(tech));
    assert!(matches!(
        ta.assign(t1.id, Some(outsider), a("ticket.assign")).await,
        Err(StoreError::NotFound("user"))
    ));
    assert_eq!(
        ta.assign(t1.id, None, a("ticket.assign"))
            .await
            .unwrap()
            .assignee_id,
        None
    );

    // Fields.
    let site = s
        .org(a_org)
        .tenancy()
        .create_site("HQ", "UTC", audit("s", "site"))
        .await
        .unwrap();
    let dev = s
        .org(a_org)
        .devices()
        .create_device(
            new_device(site.id, "pc-1", DeviceStatus::Online),
            audit("d", "device"),
        )
        .await
        .unwrap();
    let updated = ta
        .update_ticket(
            t1.id,
            TicketUpdate {
                subject: Some("one, renamed".into()),
                priority: Some(TicketPriority::Urgent),
                device_id: Some(dev.id),
                tags: Some(vec!["vip".into()]),
                due_at: Some(cx.clock.now() + Duration::days(1)),
                ..Default::default()
            },
            a("ticket.update"),
        )
        .await
        .unwrap();
    assert_eq!(updated.subject, "one, renamed");
    assert_eq!(updated.priority, TicketPriority::Urgent);
    assert_eq!(updated.device_id, Some(dev.id));
    assert_eq!(updated.tags, vec!["vip".to_owned()]);
    assert_eq!(
        updated.description, "printer on fire",
        "untouched fields stay"
    );
    assert!(matches!(
        ta.update_ticket(t1.id, TicketUpdate::default(), a("ticket.update"))
            .await,
        Err(StoreError::Invalid(_))
    ));
    let mut too_many = ticket("x");
    too_many.tags = (0..21).map(|i| format!("t{i}")).collect();
    assert!(matches!(
        ta.create_ticket(too_many, a("ticket.create")).await,
        Err(StoreError::Invalid(_))
    ));
    assert!(matches!(
        ta.create_ticket(ticket("  "), a("ticket.create")).await,
        Err(StoreError::Invalid(_))
    ));

    // Listing: newest first, filters, pages.
    let page = ta
        .list_tickets(&TicketFilter::default(), None, 1)
        .await
        .unwrap();
    assert_eq!(page.tickets.len(), 1);
    assert_eq!(page.tickets[0].number, 3, "newest first");
    let rest = ta
        .list_tickets(&TicketFilter::default(), page.next_before, 10)
        .await
        .unwrap();
    assert_eq!(
        rest.tickets.iter().map(|t| t.number).collect::<Vec<_>>(),
        [1]
    );
    assert!(rest.next_before.is_none());
    let by = |f: TicketFilter| async move {
        ta.list_tickets(&f, None, 100)
            .await
            .unwrap()
            .tickets
            .into_iter()
            .map(|t| t.number)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        by(TicketFilter {
            tag: Some("vip".into()),
            ..Default::default()
        })
        .await,
        [1]
    );
    assert_eq!(
        by(TicketFilter {
            device: Some(dev.id),
            ..Default::default()
        })
        .await,
        [1]
    );
    assert_eq!(
        by(TicketFilter {
            text: Some("THREE".into()),
            ..Default::default()
        })
        .await,
        [3]
    );
    assert_eq!(
        by(TicketFilter {
            text: Some("%".into()),
            ..Default::default()
        })
        .await,
        Vec::<i64>::new()
    );
    assert_eq!(
        by(TicketFilter {
            priority: Some(TicketPriority::Urgent),
            ..Default::default()
        })
        .await,
        [1]
    );
    assert_eq!(
        by(TicketFilter {
            status: Some(TicketStatus::New),
            ..Default::default()
        })
        .await,
        [3]
    );
    ta.set_status(t3.id, TicketStatus::Closed, a("ticket.status"))
        .await
        .unwrap();
    assert_eq!(
        by(TicketFilter {
            active: true,
            ..Default::default()
        })
        .await,
        [1]
    );
    assert_eq!(ta.ticket_by_number(3).await.unwrap().id, t3.id);

    // Comments: own, or any with CommentScope::Any.
    let actor = Actor::new(breeze_core::ActorType::User, tech);
    let c = ta
        .add_comment(t1.id, &actor, tech, "looking", false, a("ticket.comment"))
        .await
        .unwrap();
    let internal = ta
        .add_comment(
            t1.id,
            &actor,
            tech,
            "customer is grumpy",
            true,
            a("ticket.comment"),
        )
        .await
        .unwrap();
    assert!(internal.internal && !c.internal);
    assert!(matches!(
        ta.edit_comment(t1.id, c.id, CommentScope::Own(other), "mine now", a("x"))
            .await,
        Err(StoreError::Forbidden(_))
    ));
    assert!(matches!(
        ta.delete_comment(t1.id, c.id, CommentScope::Own(other), a("x"))
            .await,
        Err(StoreError::Forbidden(_))
    ));
    let edited = ta
        .edit_comment(
            t1.id,
            c.id,
            CommentScope::Own(tech),
            "found it",
            a("ticket.edit_comment"),
        )
        .await
        .unwrap();
    assert_eq!(edited.body, "found it");
    assert!(edited.edited_at.is_some());
    ta.delete_comment(
        t1.id,
        internal.id,
        CommentScope::Any,
        a("ticket.delete_comment"),
    )
    .await
    .unwrap();
    let comments = ta.comments(t1.id).await.unwrap();
    assert_eq!(
        comments.iter().map(|c| c.body.as_str()).collect::<Vec<_>>(),
        ["found it"]
    );
    // A comment of another ticket is not found through this one.
    assert!(matches!(
        ta.edit_comment(t3.id, c.id, CommentScope::Any, "x", a("x"))
            .await,
        Err(StoreError::NotFound("comment"))
    ));

    let log = actions(s, a_org).await;
    for action in [
        "ticket.create",
        "ticket.status",
        "ticket.assign",
        "ticket.update",
        "ticket.comment",
        "ticket.edit_comment",
        "ticket.delete_comment",
    ] {
        assert!(log.iter().any(|l| l == action), "{action} audited: {log:?}");
    }
}

async fn alerts_time_parts_and_moves(cx: Ctx) {
    let s = &cx.store;
    let (a_org, b_org) = crate::two_orgs(s).await;
    let oa = s.org(a_org);
    let ta = oa.tickets();
    let tech = user(s, "tech@p.test", "Technician", &[a_org, b_org]).await;
    let admin = user(s, "admin@p.test", "Administrator", &[a_org, b_org]).await;
    let (dev_id, alert) = raised_alert(s, a_org).await;

    // From an alert: device, severity (as priority) and message carried, and linked.
    let t = ta
        .create_from_alert(alert.id, "test", a("ticket.create_from_alert"))
        .await
        .unwrap();
    assert_eq!(t.device_id, Some(dev_id));
    assert_eq!(t.priority, TicketPriority::Urgent);
    assert_eq!(t.subject, alert.title);
    assert_eq!(t.description, alert.message);
    let links = ta.linked_alerts(t.id).await.unwrap();
    assert_eq!(links.len(), 1);
    assert_eq!(links[0].alert_id, alert.id);
    assert_eq!(ta.tickets_of_alert(alert.id).await.unwrap()[0].id, t.id);
    assert!(matches!(
        ta.link_alert(t.id, alert.id, "test", a("ticket.link_alert"))
            .await,
        Err(StoreError::Conflict(_))
    ));
    ta.unlink_alert(t.id, alert.id, a("ticket.unlink_alert"))
        .await
        .unwrap();
    assert!(matches!(
        ta.unlink_alert(t.id, alert.id, a("x")).await,
        Err(StoreError::NotFound("linked alert"))
    ));
    ta.link_alert(t.id, alert.id, "test", a("ticket.link_alert"))
        .await
        .unwrap();

    // Time: logged entries, and one running timer per user across organizations.
    let logged = ta
        .log_time(t.id, 90, time(tech, "100.00"), a("ticket.log_time"))
        .await
        .unwrap();
    assert_eq!(logged.minutes, Some(90));
    assert_eq!(logged.ended_at, Some(cx.clock.now()));
    assert!(matches!(
        ta.log_time(t.id, 0, time(tech, "100.00"), a("x")).await,
        Err(StoreError::Invalid(_))
    ));
    let timer = ta
        .start_timer(t.id, time(tech, "120.00"), a("ticket.start_timer"))
        .await
        .unwrap();
    assert!(timer.ended_at.is_none());
    let tb_ticket = s
        .org(b_org)
        .tickets()
        .create_ticket(ticket("b"), a("ticket.create"))
        .await
        .unwrap();
    assert!(
        matches!(
            s.org(b_org)
                .tickets()
                .start_timer(tb_ticket.id, time(tech, "1.00"), a("x"))
                .await,
            Err(StoreError::Conflict(_))
        ),
        "one running timer per user, whatever the organization"
    );
    // Another user may run their own.
    s.org(b_org)
        .tickets()
        .start_timer(tb_ticket.id, time(admin, "1.00"), a("ticket.start_timer"))
        .await
        .unwrap();

    // The timer survives a restart: a new process stops it.
    cx.clock.advance(Duration::seconds(25 * 60 + 31));
    let restarted = s.reopen().await.unwrap();
    let rt = restarted.org(a_org).tickets();
    assert_eq!(
        rt.running_timer(tech).await.unwrap().map(|e| e.id),
        Some(timer.id)
    );
    assert!(matches!(
        rt.stop_timer(t.id, admin, a("x")).await,
        Err(StoreError::NotFound("running timer"))
    ));
    let stopped = rt
        .stop_timer(t.id, tech, a("ticket.stop_timer"))
        .await
        .unwrap();
    assert_eq!(stopped.minutes, Some(26), "25:31 rounds to 26 minutes");
    assert!(rt.running_timer(tech).await.unwrap().is_none());
    restarted.close().await;

    // Parts.
    let ssd = ta
        .add_part(
            t.id,
            part(
                "SSD 1 TB",
                Quantity::parse("2").unwrap(),
                usd("89.99"),
                true,
            ),
            a("ticket.add_part"),
        )
        .await
        .unwrap();
    assert_eq!(ssd.quantity_milli, 2000);
    assert!(matches!(
        ta.add_part(t.id, part("free", Quantity(0), usd("1"), true), a("x"))
            .await,
        Err(StoreError::Invalid(_))
    ));

    // Moving: only within the partner, only where the mover manages tickets; the device and
    // alert links stay behind, comments and time go along.
    ta.add_comment(
        t.id,
        &Actor::system("t"),
        tech,
        "hello",
        false,
        a("ticket.comment"),
    )
    .await
    .unwrap();
    assert!(
        matches!(
            ta.move_ticket(t.id, b_org, tech, a("ticket.move")).await,
            Err(StoreError::NotFound("organization")),
        ),
        "a technician does not hold tickets.manage"
    );
    let q = s
        .create_partner("Q", "q", audit("p", "partner"))
        .await
        .unwrap();
    let q_org = s
        .create_organization(q.id, "QA", "qa", audit("o", "org"))
        .await
        .unwrap();
    assert!(matches!(
        ta.move_ticket(t.id, q_org.id, admin, a("ticket.move"))
            .await,
        Err(StoreError::NotFound("organization"))
    ));
    let moved = ta
        .move_ticket(t.id, b_org, admin, a("ticket.move"))
        .await
        .unwrap();
    assert_eq!(moved.org_id, b_org);
    assert_eq!(
        moved.number, t.number,
        "the number is the partner's, it stays"
    );
    assert_eq!(moved.device_id, None);
    assert!(matches!(
        ta.get_ticket(t.id).await,
        Err(StoreError::NotFound("ticket"))
    ));
    let tb = s.org(b_org).tickets();
    assert_eq!(tb.comments(t.id).await.unwrap().len(), 1);
    assert_eq!(tb.time_entries(t.id).await.unwrap().len(), 2);
    assert_eq!(tb.parts(t.id).await.unwrap().len(), 1);
    assert!(tb.linked_alerts(t.id).await.unwrap().is_empty());
    assert!(ta.tickets_of_alert(alert.id).await.unwrap().is_empty());
    assert!(actions(s, a_org).await.iter().any(|l| l == "ticket.move"));
    assert!(actions(s, b_org).await.iter().any(|l| l == "ticket.move"));
}

/// Every method that takes an id, given another organization's, answers not found and
/// changes nothing.
async fn another_organizations_ids_are_not_found(cx: Ctx) {
    let s = &cx.store;
    let (a_org, b_org) = crate::two_orgs(s).await;
    let tech = user(s, "tech@p.test", "Administrator", &[a_org, b_org]).await;
    let (ta, tb) = (s.org(a_org).tickets(), s.org(b_org).tickets());
    let mine = ta
        .create_ticket(ticket("mine"), a("ticket.create"))
        .await
        .unwrap();
    let theirs = tb
        .create_ticket(ticket("theirs"), a("ticket.create"))
        .await
        .unwrap();
    let actor = Actor::system("t");
    let their_comment = tb
        .add_comment(theirs.id, &actor, tech, "secret", true, a("c"))
        .await
        .unwrap();
    let site = s
        .org(b_org)
        .tenancy()
        .create_site("B", "UTC", audit("s", "site"))
        .await
        .unwrap();
    let their_device = s
        .org(b_org)
        .devices()
        .create_device(
            new_device(site.id, "b", DeviceStatus::Online),
            audit("d", "device"),
        )
        .await
        .unwrap();
    let nf = |r: Result<(), StoreError>, what: &str| {
        assert!(matches!(r, Err(StoreError::NotFound(_))), "{what}: {r:?}");
    };
    let id = theirs.id;
    nf(ta.get_ticket(id).await.map(drop), "get");
    nf(
        ta.ticket_by_number(theirs.number).await.map(drop),
        "by number",
    );
    nf(
        ta.set_status(id, TicketStatus::Open, a("x"))
            .await
            .map(drop),
        "status",
    );
    nf(ta.assign(id, None, a("x")).await.map(drop), "assign");
    nf(
        ta.update_ticket(
            id,
            TicketUpdate {
                subject: Some("x".into()),
                ..Default::default()
            },
            a("x"),
        )
        .await
        .map(drop),
        "update",
    );
    nf(
        ta.add_comment(id, &actor, tech, "x", false, a("x"))
            .await
            .map(drop),
        "comment",
    );
    nf(
        ta.edit_comment(id, their_comment.id, CommentScope::Any, "x", a("x"))
            .await
            .map(drop),
        "edit comment",
    );
    nf(
        ta.edit_comment(mine.id, their_comment.id, CommentScope::Any, "x", a("x"))
            .await
            .map(drop),
        "edit their comment through my ticket",
    );
    nf(
        ta.delete_comment(mine.id, their_comment.id, CommentScope::Any, a("x"))
            .await
            .map(drop),
        "delete their comment",
    );
    nf(
        ta.log_time(id, 5, time(tech, "1"), a("x")).await.map(drop),
        "log time",
    );
    nf(
        ta.start_timer(id, time(tech, "1"), a("x")).await.map(drop),
        "timer",
    );
    nf(ta.stop_timer(id, tech, a("x")).await.map(drop), "stop");
    nf(
        ta.add_part(id, part("x", Quantity::ONE, usd("1"), true), a("x"))
            .await
            .map(drop),
        "part",
    );
    nf(
        ta.move_ticket(id, a_org, tech, a("x")).await.map(drop),
        "move theirs to me",
    );
    let (_, their_alert) = raised_alert(s, b_org).await;
    nf(
        ta.link_alert(mine.id, their_alert.id, "t", a("x"))
            .await
            .map(drop),
        "link their alert",
    );
    nf(
        ta.create_from_alert(their_alert.id, "t", a("x"))
            .await
            .map(drop),
        "ticket from their alert",
    );
    assert!(
        ta.tickets_of_alert(their_alert.id)
            .await
            .unwrap()
            .is_empty()
    );
    nf(
        ta.update_ticket(
            mine.id,
            TicketUpdate {
                device_id: Some(their_device.id),
                ..Default::default()
            },
            a("x"),
        )
        .await
        .map(drop),
        "their device on my ticket",
    );
    let mut with_device = ticket("x");
    with_device.device_id = Some(their_device.id);
    nf(
        ta.create_ticket(with_device, a("x")).await.map(drop),
        "create with their device",
    );
    assert!(ta.comments(id).await.unwrap().is_empty());
    assert!(ta.time_entries(id).await.unwrap().is_empty());
    assert!(ta.linked_alerts(id).await.unwrap().is_empty());
    // Nothing of theirs changed.
    let after = tb.get_ticket(id).await.unwrap();
    assert_eq!(after, theirs);
    assert_eq!(tb.comments(id).await.unwrap(), vec![their_comment]);
    // And listing shows only mine.
    let listed = ta
        .list_tickets(&TicketFilter::default(), None, 100)
        .await
        .unwrap();
    assert_eq!(
        listed.tickets.iter().map(|t| t.id).collect::<Vec<_>>(),
        [mine.id]
    );
}

breeze_store::on_both_backends!(
    numbers_statuses_fields_and_comments,
    alerts_time_parts_and_moves,
    another_organizations_ids_are_not_found,
);
