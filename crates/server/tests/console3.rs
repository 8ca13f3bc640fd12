//! The console's scripts, patches and organization pages, driven in-process on both
//! backends: the script library (add, edit, a bad parameter line named, run on a group through
//! the pipeline, executions), patches decided through `manage_patches`, deployments and
//! maintenance windows listed, groups created through `manage_groups` and a dynamic filter
//! previewed, people and roles, an enrollment key's one-line install command, protected paths.
//! Each is held to organization isolation (another organization's ids are 404), CSRF (a
//! forged post is refused) and the one permission model (a Read Only person sees no button,
//! and a post of theirs is refused).
#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod common;

use axum::http::StatusCode;
use breeze_store::testing::Ctx;
use common::browser::{admin_of, get, html, location, outcome, post_form, sign_in};
use common::{audit_records, world};

async fn scripts_are_added_edited_run_and_listed(cx: Ctx) {
    let w = world(&cx).await;
    let admin = sign_in(&w.app, "admin@p.test").await;
    let r = get(&w.app, "/o/org-a/scripts", &admin.cookie).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(html(&r).contains("id=\"new-script\""));
    assert!(
        html(&r).contains("href=\"/o/org-a/scripts\""),
        "linked from the navigation"
    );
    let r = get(&w.app, "/o/org-a/scripts/new", &admin.cookie).await;
    assert!(html(&r).contains("class=\"gutter\""));
    // A bad parameter line is named, and nothing is stored.
    let r = admin
        .post(
            &w.app,
            "/o/org-a/scripts/new",
            &[
                ("name", "Clean tmp"),
                ("language", "bash"),
                ("category", ""),
                ("description", "Frees /tmp"),
                ("body", "rm -rf /tmp/old-*\r\necho done\r\n"),
                ("parameters", "days=7\nbad name"),
            ],
        )
        .await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(html(&r).contains("line 2"), "{}", r.body);
    let r = admin
        .post(
            &w.app,
            "/o/org-a/scripts/new",
            &[
                ("name", "Clean tmp"),
                ("language", "bash"),
                ("category", ""),
                ("description", "Frees /tmp"),
                ("body", "rm -rf /tmp/old-*\r\necho done\r\n"),
                ("parameters", "days=7 # older than\nlabel!"),
            ],
        )
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    let to = location(&r).split('?').next().unwrap().to_owned();
    let s = w
        .store
        .org(w.org_a)
        .scripts()
        .find_script("Clean tmp")
        .await
        .unwrap();
    assert_eq!(s.body, "rm -rf /tmp/old-*\necho done\n");
    assert_eq!(s.category, "general");
    assert_eq!(s.parameters.len(), 2);
    assert!(s.parameters[1].required);
    assert_eq!(to, format!("/o/org-a/scripts/{}", s.id));
    let r = get(&w.app, &to, &admin.cookie).await;
    let page = html(&r);
    for needle in [
        "id=\"run-script\"",
        "days=7 # older than",
        "label!",
        "No script has run yet.",
    ] {
        assert!(page.contains(needle), "{needle}");
    }
    // Edit: saved, audited.
    let r = admin
        .post(
            &w.app,
            &to,
            &[
                ("name", "Clean temp"),
                ("language", "sh"),
                ("category", "maintenance"),
                ("description", ""),
                ("body", "echo cleaned"),
                ("parameters", ""),
            ],
        )
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    let s2 = w
        .store
        .org(w.org_a)
        .scripts()
        .get_script(s.id)
        .await
        .unwrap();
    assert_eq!(
        (s2.name.as_str(), s2.language.as_str()),
        ("Clean temp", "sh")
    );
    assert_eq!(audit_records(&w, w.org_a, "script.update").await.len(), 1);
    // Run on a group: the group's members through run_script (the agent is not connected
    // here, so the tool reports why), and the run is the tool's own call.
    let g = w
        .store
        .org(w.org_a)
        .tenancy()
        .create_group("Web", None, None, common::audit("g"))
        .await
        .unwrap();
    w.store
        .org(w.org_a)
        .tenancy()
        .add_to_group(g.id, breeze_core::DeviceId(w.a_device.parse().unwrap()))
        .await
        .unwrap();
    let sid = s.id.to_string();
    let gid = g.id.to_string();
    let back = to.clone();
    let r = admin
        .post(
            &w.app,
            "/o/org-a/devices/act",
            &[
                ("action", "run_script"),
                ("script", &sid),
                ("target_group", &gid),
                ("back", &back),
            ],
        )
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
    assert!(location(&r).starts_with(&to));
    // run_script queued the script on the group's one device (no agent answers here, so the
    // page reports it still running), and the executions list shows the run.
    let runs = w
        .store
        .org(w.org_a)
        .commands()
        .script_executions(Some(s.id), 10)
        .await
        .unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].device_id.to_string(), w.a_device);
    assert_eq!(runs[0].script_name.as_deref(), Some("Clean temp"));
    let r = get(&w.app, "/o/org-a/scripts/executions", &admin.cookie).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(html(&r).contains(&format!("id=\"run-{}\"", runs[0].id)));
    let r = get(&w.app, &to, &admin.cookie).await;
    assert!(html(&r).contains(&format!("id=\"run-{}\"", runs[0].id)));
    // Another organization's group is not found.
    let bg = w
        .store
        .org(w.org_b)
        .tenancy()
        .create_group("B", None, None, common::audit("g"))
        .await
        .unwrap()
        .id
        .to_string();
    let r = admin
        .post(
            &w.app,
            "/o/org-a/devices/act",
            &[
                ("action", "run_script"),
                ("script", &sid),
                ("target_group", &bg),
            ],
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);

    // Read Only: the library without buttons; posts refused; nothing changes.
    let viewer = sign_in(&w.app, "viewer@p.test").await;
    let r = get(&w.app, "/o/org-a/scripts", &viewer.cookie).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(!html(&r).contains("id=\"new-script\""));
    let r = get(&w.app, &to, &viewer.cookie).await;
    assert!(!html(&r).contains("id=\"run-script\""));
    assert!(!html(&r).contains("id=\"delete-script\""));
    let r = viewer
        .post(
            &w.app,
            &to,
            &[("name", "Mine"), ("language", "sh"), ("body", "x")],
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    let r = viewer.post(&w.app, &format!("{to}/delete"), &[]).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    // A forged post (no CSRF token) is refused.
    let r = post_form(
        &w.app,
        &format!("{to}/delete"),
        &admin.cookie,
        &[("x", "y")],
    )
    .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert!(
        w.store
            .org(w.org_a)
            .scripts()
            .get_script(s.id)
            .await
            .is_ok()
    );
    // Another organization: its script through A's URL, and B's pages for a person of A only.
    let b_script = w
        .store
        .org(w.org_b)
        .scripts()
        .create_script(
            breeze_store::NewScript {
                name: "B only".into(),
                description: String::new(),
                language: "sh".into(),
                category: "general".into(),
                body: "true".into(),
                parameters: vec![],
                created_by: "t".into(),
            },
            common::audit("s"),
        )
        .await
        .unwrap()
        .id;
    for uri in [
        format!("/o/org-a/scripts/{b_script}"),
        "/o/org-a/scripts/not-a-uuid".to_owned(),
    ] {
        let r = get(&w.app, &uri, &admin.cookie).await;
        assert_eq!(r.status, StatusCode::NOT_FOUND, "{uri}");
        assert!(html(&r).contains("<!doctype html"));
    }
    let r = admin
        .post(&w.app, &format!("/o/org-a/scripts/{b_script}/delete"), &[])
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    admin_of(&w, "ops@p.test", w.org_a).await;
    let ops = sign_in(&w.app, "ops@p.test").await;
    for uri in [
        "/o/org-b/scripts".to_owned(),
        format!("/o/org-b/scripts/{b_script}"),
        "/o/org-b/scripts/executions".to_owned(),
    ] {
        let r = get(&w.app, &uri, &ops.cookie).await;
        assert_eq!(r.status, StatusCode::NOT_FOUND, "{uri}");
    }
    assert!(
        w.store
            .org(w.org_b)
            .scripts()
            .get_script(b_script)
            .await
            .is_ok()
    );
}

async fn patches_deployments_and_windows(cx: Ctx) {
    let w = world(&cx).await;
    let admin = sign_in(&w.app, "admin@p.test").await;
    for uri in [
        "/o/org-a/patches",
        "/o/org-a/patches?view=device",
        "/o/org-a/deployments",
        "/o/org-a/maintenance",
    ] {
        let r = get(&w.app, uri, &admin.cookie).await;
        assert_eq!(r.status, StatusCode::OK, "{uri}");
        assert!(
            html(&r).contains("aria-label=\"Patches and deployments\""),
            "{uri}"
        );
    }
    // A decision is manage_patches approve, through the pipeline.
    let r = admin
        .post(
            &w.app,
            "/o/org-a/patches/decide",
            &[("decision", "approve"), ("package", "openssl")],
        )
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
    assert!(!outcome(&r, "done").is_empty(), "{}", location(&r));
    let decided = w
        .store
        .org(w.org_a)
        .patches()
        .list_patch_approvals()
        .await
        .unwrap();
    assert_eq!(decided.len(), 1);
    assert_eq!(decided[0].package_name, "openssl");
    // A maintenance window from the device page shows on the calendar list.
    let r = admin
        .post(
            &w.app,
            "/o/org-a/devices/act",
            &[
                ("action", "maintenance"),
                ("id", &w.a_device),
                ("hours", "2"),
            ],
        )
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
    let r = get(&w.app, "/o/org-a/maintenance", &admin.cookie).await;
    assert!(html(&r).contains("open now"), "{}", r.body);
    // Read Only: no buttons; a decision refused; a forged post refused.
    let viewer = sign_in(&w.app, "viewer@p.test").await;
    let r = viewer
        .post(
            &w.app,
            "/o/org-a/patches/decide",
            &[("decision", "decline"), ("package", "curl")],
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    let r = post_form(
        &w.app,
        "/o/org-a/patches/decide",
        &admin.cookie,
        &[("decision", "decline"), ("package", "curl")],
    )
    .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert_eq!(
        w.store
            .org(w.org_a)
            .patches()
            .list_patch_approvals()
            .await
            .unwrap()
            .len(),
        1
    );
    // A draft deployment made over MCP: its page lists each device, reloads while under way,
    // and offers Start (manage_deployments start) to whoever may.
    let script = w
        .store
        .org(w.org_a)
        .scripts()
        .create_script(
            breeze_store::NewScript {
                name: "Update agent".into(),
                description: String::new(),
                language: "sh".into(),
                category: "general".into(),
                body: "true".into(),
                parameters: vec![],
                created_by: "t".into(),
            },
            common::audit("s"),
        )
        .await
        .unwrap()
        .id
        .to_string();
    let made = common::ok(
        &w.app,
        &w.write,
        "manage_deployments",
        serde_json::json!({ "action": "create", "name": "Roll out",
            "payload": { "kind": "script", "scriptId": script } }),
    )
    .await;
    let dep = made["deployment"]["id"].as_str().unwrap().to_owned();
    let r = get(&w.app, "/o/org-a/deployments", &admin.cookie).await;
    assert!(html(&r).contains(&format!("id=\"deployment-{dep}\"")));
    assert!(html(&r).contains("Roll out") && html(&r).contains("script Update agent"));
    let page_uri = format!("/o/org-a/deployments/{dep}");
    let r = get(&w.app, &page_uri, &admin.cookie).await;
    assert_eq!(r.status, StatusCode::OK);
    let body = html(&r);
    assert!(
        body.contains(&format!("id=\"dd-{}\"", w.a_device)),
        "{body}"
    );
    assert!(body.contains(&format!("hx-get=\"{page_uri}/devices\"")));
    assert!(body.contains("value=\"start\""));
    let r = get(&w.app, &format!("{page_uri}/devices"), &admin.cookie).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(html(&r).contains(&format!("id=\"dd-{}\"", w.a_device)));
    assert!(!html(&r).contains("<nav"), "a fragment, not a page");
    let viewer = sign_in(&w.app, "viewer@p.test").await;
    let r = get(&w.app, &page_uri, &viewer.cookie).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(!html(&r).contains("value=\"start\""));
    let r = viewer
        .post(
            &w.app,
            &format!("{page_uri}/control"),
            &[("action", "start")],
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    let r = post_form(
        &w.app,
        &format!("{page_uri}/control"),
        &admin.cookie,
        &[("action", "start")],
    )
    .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert_eq!(
        w.store
            .org(w.org_a)
            .deployments()
            .get_deployment(dep.parse().unwrap())
            .await
            .unwrap()
            .status
            .as_str(),
        "draft"
    );
    // A's deployment through B's URL (the admin reaches both): not found.
    for uri in [
        format!("/o/org-b/deployments/{dep}"),
        format!("/o/org-b/deployments/{dep}/devices"),
    ] {
        let r = get(&w.app, &uri, &admin.cookie).await;
        assert_eq!(r.status, StatusCode::NOT_FOUND, "{uri}");
    }
    let r = admin
        .post(
            &w.app,
            &format!("/o/org-b/deployments/{dep}/control"),
            &[("action", "cancel")],
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    // Unknown deployments, and another organization's pages: 404.
    let id = uuid::Uuid::now_v7();
    for uri in [
        format!("/o/org-a/deployments/{id}"),
        format!("/o/org-a/deployments/{id}/devices"),
    ] {
        let r = get(&w.app, &uri, &admin.cookie).await;
        assert_eq!(r.status, StatusCode::NOT_FOUND, "{uri}");
    }
    let r = admin
        .post(
            &w.app,
            &format!("/o/org-a/deployments/{id}/control"),
            &[("action", "start")],
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    admin_of(&w, "ops@p.test", w.org_a).await;
    let ops = sign_in(&w.app, "ops@p.test").await;
    for uri in [
        "/o/org-b/patches",
        "/o/org-b/deployments",
        "/o/org-b/maintenance",
    ] {
        let r = get(&w.app, uri, &ops.cookie).await;
        assert_eq!(r.status, StatusCode::NOT_FOUND, "{uri}");
    }
    let r = ops
        .post(
            &w.app,
            "/o/org-b/patches/decide",
            &[("decision", "approve"), ("package", "zlib")],
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert!(
        w.store
            .org(w.org_b)
            .patches()
            .list_patch_approvals()
            .await
            .unwrap()
            .is_empty()
    );
}

async fn organization_groups_people_keys_and_paths(cx: Ctx) {
    let w = world(&cx).await;
    let admin = sign_in(&w.app, "admin@p.test").await;
    let r = get(&w.app, "/o/org-a/groups", &admin.cookie).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(html(&r).contains("id=\"new-group\""));
    // A dynamic filter previewed: the matching device is listed.
    let f = r#"{"match":"all","conditions":[{"field":"os","op":"eq","value":"linux"}]}"#;
    let q = serde_urlencoded::to_string([("filter", f)]).unwrap();
    let r = get(&w.app, &format!("/o/org-a/groups?{q}"), &admin.cookie).await;
    assert!(html(&r).contains("id=\"matches\""), "{}", r.body);
    assert!(html(&r).contains("web-01"));
    let r = get(&w.app, "/o/org-a/groups?filter=%7Bnope", &admin.cookie).await;
    assert!(html(&r).contains("Filter:"));
    // A dynamic group created through manage_groups create.
    let r = admin
        .post(
            &w.app,
            "/o/org-a/groups",
            &[
                ("name", "Linux"),
                ("description", "every Linux box"),
                ("filter", f),
            ],
        )
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
    assert!(!outcome(&r, "done").is_empty(), "{}", location(&r));
    let groups = w.store.org(w.org_a).tenancy().list_groups().await.unwrap();
    assert_eq!(groups.len(), 1);
    let r = get(
        &w.app,
        &format!("/o/org-a/groups/{}", groups[0].id),
        &admin.cookie,
    )
    .await;
    assert!(html(&r).contains("dynamic") && html(&r).contains("web-01"));
    // People and roles.
    let r = get(&w.app, "/o/org-a/people", &admin.cookie).await;
    assert!(html(&r).contains("admin@p.test") && html(&r).contains("viewer@p.test"));
    assert!(html(&r).contains("Read Only"));
    // An enrollment key: the one-line install command with its secret, once.
    let site = w.store.org(w.org_a).tenancy().list_sites().await.unwrap()[0]
        .id
        .to_string();
    let r = admin
        .post(
            &w.app,
            "/o/org-a/enrollment",
            &[
                ("name", "Laptops"),
                ("site", &site),
                ("max_uses", "5"),
                ("hours", "48"),
            ],
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let page = html(&r);
    assert!(
        page.contains("sudo breeze-agent enroll --server "),
        "{page}"
    );
    assert!(page.contains("--key brz_"));
    assert!(page.contains("data-copy=\"install-command\""));
    let r = get(&w.app, "/o/org-a/enrollment", &admin.cookie).await;
    assert!(html(&r).contains("Laptops") && !html(&r).contains("--key brz_"));
    let r = admin
        .post(
            &w.app,
            "/o/org-a/enrollment",
            &[("name", "x"), ("site", &site), ("hours", "9999")],
        )
        .await;
    assert!(html(&r).contains("1 to 720 hours"));
    // Protected paths.
    let r = admin
        .post(
            &w.app,
            "/o/org-a/protected-paths",
            &[("additions", "/srv/secrets\n\n/opt/app/*.key")],
        )
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
    assert_eq!(
        w.store
            .org(w.org_a)
            .commands()
            .protected_paths()
            .await
            .unwrap()
            .len(),
        2
    );
    let r = get(&w.app, "/o/org-a/protected-paths", &admin.cookie).await;
    assert!(html(&r).contains("/srv/secrets") && html(&r).contains("/etc/shadow"));
    let r = admin
        .post(
            &w.app,
            "/o/org-a/protected-paths",
            &[("additions", "relative/path")],
        )
        .await;
    assert!(!outcome(&r, "failed").is_empty());

    // Read Only: no buttons; posts refused; people hidden (users.manage).
    let viewer = sign_in(&w.app, "viewer@p.test").await;
    let r = get(&w.app, "/o/org-a/groups", &viewer.cookie).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(!html(&r).contains("id=\"new-group\""));
    for (uri, form) in [
        ("/o/org-a/groups", vec![("name", "Mine")]),
        (
            "/o/org-a/enrollment",
            vec![("name", "k"), ("site", site.as_str())],
        ),
        ("/o/org-a/protected-paths", vec![("additions", "")]),
    ] {
        let r = viewer.post(&w.app, uri, &form).await;
        assert_eq!(r.status, StatusCode::FORBIDDEN, "{uri}");
    }
    let r = get(&w.app, "/o/org-a/people", &viewer.cookie).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    // Forged posts.
    for uri in [
        "/o/org-a/groups",
        "/o/org-a/enrollment",
        "/o/org-a/protected-paths",
    ] {
        let r = post_form(
            &w.app,
            uri,
            &admin.cookie,
            &[("name", "x"), ("additions", "")],
        )
        .await;
        assert_eq!(r.status, StatusCode::FORBIDDEN, "{uri}");
    }
    assert_eq!(
        w.store
            .org(w.org_a)
            .tenancy()
            .list_groups()
            .await
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        w.store
            .org(w.org_a)
            .commands()
            .protected_paths()
            .await
            .unwrap()
            .len(),
        2
    );
    // Another organization: its group through A's URL, its site for A's key, B's pages.
    let bg = w
        .store
        .org(w.org_b)
        .tenancy()
        .create_group("B", None, None, common::audit("g"))
        .await
        .unwrap()
        .id;
    let r = get(&w.app, &format!("/o/org-a/groups/{bg}"), &admin.cookie).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    let b_site = w.store.org(w.org_b).tenancy().list_sites().await.unwrap()[0]
        .id
        .to_string();
    let r = admin
        .post(
            &w.app,
            "/o/org-a/enrollment",
            &[("name", "x"), ("site", &b_site)],
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.body);
    admin_of(&w, "ops@p.test", w.org_a).await;
    let ops = sign_in(&w.app, "ops@p.test").await;
    for uri in [
        "/o/org-b/groups".to_owned(),
        format!("/o/org-b/groups/{bg}"),
        "/o/org-b/people".to_owned(),
        "/o/org-b/enrollment".to_owned(),
        "/o/org-b/protected-paths".to_owned(),
    ] {
        let r = get(&w.app, &uri, &ops.cookie).await;
        assert_eq!(r.status, StatusCode::NOT_FOUND, "{uri}");
    }
    let r = ops
        .post(&w.app, "/o/org-b/protected-paths", &[("additions", "/x")])
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert!(
        w.store
            .org(w.org_b)
            .commands()
            .protected_paths()
            .await
            .unwrap()
            .is_empty()
    );
}

async fn policies_compliance_automations_and_reports(cx: Ctx) {
    let w = world(&cx).await;
    let admin = sign_in(&w.app, "admin@p.test").await;
    for uri in [
        "/o/org-a/policies".to_owned(),
        "/o/org-a/compliance".to_owned(),
        "/o/org-a/automations".to_owned(),
        "/o/org-a/reports".to_owned(),
        format!("/o/org-a/devices/{}/configuration", w.a_device),
    ] {
        let r = get(&w.app, &uri, &admin.cookie).await;
        assert_eq!(r.status, StatusCode::OK, "{uri}");
    }
    // A compliance policy made over MCP shows with its counts; "Evaluate now" is the tool's
    // evaluate through the pipeline.
    let made = common::ok(
        &w.app,
        &w.write,
        "manage_policies",
        serde_json::json!({ "action": "create", "name": "Has bash",
            "rules": [{ "type": "package_installed", "name": "bash" }] }),
    )
    .await;
    let pid = made["policy"]["id"]
        .as_str()
        .or_else(|| made["id"].as_str())
        .unwrap_or_else(|| panic!("{made}"))
        .to_owned();
    let r = get(&w.app, "/o/org-a/compliance", &admin.cookie).await;
    assert!(html(&r).contains("Has bash"));
    assert!(html(&r).contains("aria-label=\"Evaluate Has bash now\""));
    let r = admin
        .post(&w.app, "/o/org-a/compliance/evaluate", &[("policy", &pid)])
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
    assert!(!outcome(&r, "done").is_empty(), "{}", location(&r));
    // A report run now: a CSV the page offers to download through the REST route.
    let r = admin
        .post(
            &w.app,
            "/o/org-a/reports/run",
            &[("kind", "device_inventory"), ("format", "csv")],
        )
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
    assert!(!outcome(&r, "done").is_empty(), "{}", location(&r));
    let runs = w
        .store
        .org(w.org_a)
        .reports()
        .report_runs(None, 10)
        .await
        .unwrap();
    assert_eq!(runs.len(), 1);
    let link = format!("/api/v1/orgs/org-a/reports/{}/download", runs[0].id);
    let r = get(&w.app, "/o/org-a/reports", &admin.cookie).await;
    assert!(html(&r).contains(&link), "{}", r.body);
    let r = get(&w.app, &link, &admin.cookie).await;
    assert_eq!(r.status, StatusCode::OK);
    let r = admin
        .post(
            &w.app,
            "/o/org-a/reports/run",
            &[("kind", "weather"), ("format", "csv")],
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    // Read Only: no evaluate button, and its post refused; forged posts refused.
    let viewer = sign_in(&w.app, "viewer@p.test").await;
    let r = get(&w.app, "/o/org-a/compliance", &viewer.cookie).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(!html(&r).contains("Evaluate Has bash now"));
    let r = viewer
        .post(&w.app, "/o/org-a/compliance/evaluate", &[("policy", &pid)])
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    for (uri, form) in [
        ("/o/org-a/compliance/evaluate", [("policy", pid.as_str())]),
        ("/o/org-a/reports/run", [("kind", "device_inventory")]),
    ] {
        let r = post_form(&w.app, uri, &admin.cookie, &form).await;
        assert_eq!(r.status, StatusCode::FORBIDDEN, "{uri}");
    }
    assert_eq!(
        w.store
            .org(w.org_a)
            .reports()
            .report_runs(None, 10)
            .await
            .unwrap()
            .len(),
        1
    );
    // Another organization: its device's configuration, its policy, its report; B's pages.
    let r = get(
        &w.app,
        &format!("/o/org-a/devices/{}/configuration", w.b_device),
        &admin.cookie,
    )
    .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    let b_def = w
        .store
        .org(w.org_b)
        .reports()
        .create_report(
            breeze_store::NewReport {
                name: "B fleet".into(),
                description: None,
                kind: breeze_core::ReportKind::DeviceInventory,
                format: breeze_core::ReportFormat::Csv,
                filters: breeze_core::ReportFilters::default(),
                created_by: "test".into(),
            },
            common::audit("report.create"),
        )
        .await
        .unwrap()
        .id
        .to_string();
    let r = admin
        .post(&w.app, "/o/org-a/reports/run", &[("report", &b_def)])
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    let r = admin
        .post(
            &w.app,
            "/o/org-a/compliance/evaluate",
            &[("policy", &uuid::Uuid::now_v7().to_string())],
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    admin_of(&w, "ops@p.test", w.org_a).await;
    let ops = sign_in(&w.app, "ops@p.test").await;
    for uri in [
        "/o/org-b/policies".to_owned(),
        "/o/org-b/compliance".to_owned(),
        "/o/org-b/automations".to_owned(),
        "/o/org-b/reports".to_owned(),
        format!("/o/org-b/devices/{}/configuration", w.b_device),
    ] {
        let r = get(&w.app, &uri, &ops.cookie).await;
        assert_eq!(r.status, StatusCode::NOT_FOUND, "{uri}");
    }
    let r = ops
        .post(&w.app, "/o/org-b/reports/run", &[("report", &b_def)])
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert!(
        w.store
            .org(w.org_b)
            .reports()
            .report_runs(None, 10)
            .await
            .unwrap()
            .is_empty()
    );
}

breeze_store::on_both_backends!(
    scripts_are_added_edited_run_and_listed,
    patches_deployments_and_windows,
    organization_groups_people_keys_and_paths,
    policies_compliance_automations_and_reports,
);
