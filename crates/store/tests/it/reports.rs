//! Reports: definition lifecycle with audit, generation streamed into chunks (JSON and CSV,
//! several chunks for a fleet of 1,200 devices, filters applied), the history and its bound,
//! and confinement (another organization's definition, run, chunks and site are not found).

use breeze_core::{DeviceStatus, ReportFilters, ReportFormat, ReportKind, ReportStatus, Severity};
use breeze_store::{CHUNK_BYTES, NewReport, ReportRequest, ReportUpdate, StoreError, testing::Ctx};

use crate::{audit, tenancy::new_device};

fn inventory(name: &str, format: ReportFormat) -> NewReport {
    NewReport {
        name: name.into(),
        description: None,
        kind: ReportKind::DeviceInventory,
        format,
        filters: ReportFilters::default(),
        created_by: "test".into(),
    }
}

async fn download(o: &breeze_store::OrgStore<'_>, run: uuid::Uuid) -> Vec<u8> {
    let mut all = Vec::new();
    let mut seq = 0;
    while let Some(chunk) = o.reports().report_chunk(run, seq).await.unwrap() {
        assert!(chunk.len() < CHUNK_BYTES + 4096, "a chunk is bounded");
        all.extend(chunk);
        seq += 1;
    }
    all
}

async fn reports_are_defined_generated_in_chunks_and_confined(cx: Ctx) {
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
    let fleet: Vec<_> = (0..1200)
        .map(|i| {
            let status = if i % 4 == 0 {
                DeviceStatus::Offline
            } else {
                DeviceStatus::Online
            };
            let mut d = new_device(site.id, &format!("host-{i:05}"), status);
            if i == 7 {
                d.hostname = "=cmd|' /C calc'!A0".into();
            }
            d
        })
        .collect();
    oa.devices()
        .create_devices(fleet, audit("device.seed", "device"))
        .await
        .unwrap();
    ob.devices()
        .create_device(
            new_device(site_b.id, "b-only", DeviceStatus::Online),
            audit("d", "device"),
        )
        .await
        .unwrap();

    // Definitions: create, conflict, update, list.
    let def = oa
        .reports()
        .create_report(
            inventory("Fleet", ReportFormat::Json),
            audit("report.create", "report"),
        )
        .await
        .unwrap();
    let dup = oa
        .reports()
        .create_report(
            inventory("Fleet", ReportFormat::Csv),
            audit("report.create", "report"),
        )
        .await
        .unwrap_err();
    assert!(matches!(dup, StoreError::Conflict(_)), "{dup:?}");
    let mut bad = inventory("Bad", ReportFormat::Json);
    bad.filters.since_hours = Some(24);
    assert!(matches!(
        oa.reports()
            .create_report(bad, audit("report.create", "report"))
            .await
            .unwrap_err(),
        StoreError::Invalid(_)
    ));
    let mut foreign_site = inventory("Theirs", ReportFormat::Json);
    foreign_site.filters.site_id = Some(site_b.id);
    assert!(matches!(
        oa.reports()
            .create_report(foreign_site, audit("report.create", "report"))
            .await
            .unwrap_err(),
        StoreError::NotFound(_)
    ));
    let def = oa
        .reports()
        .update_report(
            def.id,
            ReportUpdate {
                description: Some("all devices".into()),
                ..Default::default()
            },
            audit("report.update", "report"),
        )
        .await
        .unwrap();
    assert_eq!(def.description.as_deref(), Some("all devices"));
    assert_eq!(oa.reports().list_reports().await.unwrap().len(), 1);

    // JSON, whole fleet: several chunks, every device of A once, none of B.
    let run = oa
        .reports()
        .generate_report(
            ReportRequest::from(&def),
            "test",
            audit("report.generate", "report"),
        )
        .await
        .unwrap();
    assert_eq!(run.status, ReportStatus::Completed);
    assert_eq!(run.row_count, 1200);
    assert!(run.chunk_count >= 2, "{run:?}");
    let body = download(&oa, run.id).await;
    assert_eq!(body.len() as i64, run.byte_count);
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&body).unwrap();
    assert_eq!(rows.len(), 1200);
    assert_eq!(rows[0]["site"], "HQ");
    assert!(rows.iter().all(|r| r["hostname"] != "b-only"));

    // CSV of the offline devices: header plus 300 rows, the formula defused.
    let csv = oa
        .reports()
        .generate_report(
            ReportRequest {
                definition_id: None,
                name: "Offline".into(),
                kind: ReportKind::DeviceInventory,
                format: ReportFormat::Csv,
                filters: ReportFilters {
                    status: Some(DeviceStatus::Offline),
                    ..Default::default()
                },
            },
            "test",
            audit("report.generate", "report"),
        )
        .await
        .unwrap();
    assert_eq!(csv.row_count, 300);
    let text = String::from_utf8(download(&oa, csv.id).await).unwrap();
    assert!(
        text.starts_with("id,hostname,site,status,osType,"),
        "{text:.80}"
    );
    assert_eq!(text.lines().count(), 301);
    assert!(text.lines().skip(1).all(|l| l.contains(",offline,")));
    let online = oa
        .reports()
        .generate_report(
            ReportRequest {
                definition_id: None,
                name: "Online csv".into(),
                kind: ReportKind::DeviceInventory,
                format: ReportFormat::Csv,
                filters: ReportFilters {
                    status: Some(DeviceStatus::Online),
                    ..Default::default()
                },
            },
            "test",
            audit("report.generate", "report"),
        )
        .await
        .unwrap();
    let text = String::from_utf8(download(&oa, online.id).await).unwrap();
    assert!(
        text.contains("\"'=cmd|' /C calc'!A0\""),
        "a formula is never a formula"
    );

    // Alert history (empty) and audit activity (the definitions' records).
    let alerts = oa
        .reports()
        .generate_report(
            ReportRequest {
                definition_id: None,
                name: "Alerts".into(),
                kind: ReportKind::AlertHistory,
                format: ReportFormat::Json,
                filters: ReportFilters {
                    severity: Some(Severity::Critical),
                    since_hours: Some(24),
                    ..Default::default()
                },
            },
            "test",
            audit("report.generate", "report"),
        )
        .await
        .unwrap();
    assert_eq!(alerts.row_count, 0);
    assert_eq!(download(&oa, alerts.id).await, b"[]\n");
    let activity = oa
        .reports()
        .generate_report(
            ReportRequest {
                definition_id: None,
                name: "Activity".into(),
                kind: ReportKind::AuditActivity,
                format: ReportFormat::Json,
                filters: ReportFilters::default(),
            },
            "test",
            audit("report.generate", "report"),
        )
        .await
        .unwrap();
    let records: Vec<serde_json::Value> =
        serde_json::from_slice(&download(&oa, activity.id).await).unwrap();
    let actions: Vec<&str> = records
        .iter()
        .filter_map(|r| r["action"].as_str())
        .collect();
    assert!(actions.contains(&"report.create"), "{actions:?}");
    assert!(actions.contains(&"report.generate"), "{actions:?}");

    // History: newest first, by definition.
    let history = oa.reports().report_runs(None, 10).await.unwrap();
    assert_eq!(history.len(), 5);
    assert_eq!(history[0].id, activity.id);
    let of_def = oa.reports().report_runs(Some(def.id), 10).await.unwrap();
    assert_eq!(of_def.len(), 1);
    assert_eq!(of_def[0].id, run.id);

    // Confinement: B sees none of it, by listing or by id.
    assert!(ob.reports().list_reports().await.unwrap().is_empty());
    assert!(ob.reports().report_runs(None, 10).await.unwrap().is_empty());
    assert!(matches!(
        ob.reports().get_report(def.id).await,
        Err(StoreError::NotFound(_))
    ));
    assert!(matches!(
        ob.reports().get_report_run(run.id).await,
        Err(StoreError::NotFound(_))
    ));
    assert_eq!(ob.reports().report_chunk(run.id, 0).await.unwrap(), None);
    assert!(matches!(
        ob.reports()
            .update_report(
                def.id,
                ReportUpdate::default(),
                audit("report.update", "report")
            )
            .await,
        Err(StoreError::NotFound(_))
    ));
    assert!(matches!(
        ob.reports()
            .delete_report(def.id, audit("report.delete", "report"))
            .await,
        Err(StoreError::NotFound(_))
    ));

    // Deleting the definition keeps its history.
    oa.reports()
        .delete_report(def.id, audit("report.delete", "report"))
        .await
        .unwrap();
    assert!(oa.reports().list_reports().await.unwrap().is_empty());
    assert_eq!(
        oa.reports().get_report_run(run.id).await.unwrap().name,
        "Fleet"
    );
}

fn adhoc(name: &str, kind: ReportKind, format: ReportFormat) -> ReportRequest {
    ReportRequest {
        definition_id: None,
        name: name.into(),
        kind,
        format,
        filters: ReportFilters::default(),
    }
}

/// The history is bounded per organization and per requester: one requester generating
/// report after report evicts only their own runs, never everyone else's; past the
/// organization's bound the oldest runs go, whoever made them.
async fn the_history_keeps_the_newest_runs(cx: Ctx) {
    let s = &cx.store;
    let (a, _) = crate::two_orgs(s).await;
    let o = s.org(a);
    let generate = |i: i64, who: &'static str| {
        let o = s.org(a);
        async move {
            o.reports()
                .generate_report(
                    adhoc(
                        &format!("r{i}"),
                        ReportKind::DeviceInventory,
                        ReportFormat::Csv,
                    ),
                    who,
                    audit("report.generate", "report"),
                )
                .await
                .unwrap()
        }
    };
    let mut alice = Vec::new();
    for i in 0..3 {
        cx.clock.advance(chrono::Duration::seconds(1));
        alice.push(generate(i, "user:alice").await.id);
    }
    // The attack: one requester runs report after report.
    let mut first = None;
    for i in 0..(breeze_store::MAX_RUNS_KEPT + 2) {
        cx.clock.advance(chrono::Duration::seconds(1));
        first.get_or_insert(generate(i, "user:mallory").await.id);
    }
    let kept = o.reports().report_runs(None, 100).await.unwrap();
    let mallory = kept
        .iter()
        .filter(|r| r.requested_by == "user:mallory")
        .count() as i64;
    assert_eq!(mallory, breeze_store::MAX_RUNS_PER_REQUESTER);
    for id in &alice {
        assert!(
            o.reports().get_report_run(*id).await.is_ok(),
            "alice's runs stay"
        );
    }
    let first = first.unwrap();
    assert!(matches!(
        o.reports().get_report_run(first).await,
        Err(StoreError::NotFound(_))
    ));
    assert_eq!(
        o.reports().report_chunk(first, 0).await.unwrap(),
        None,
        "chunks go with the run"
    );
    // Many requesters: the organization keeps its newest MAX_RUNS_KEPT.
    for n in 0..breeze_store::MAX_RUNS_KEPT / breeze_store::MAX_RUNS_PER_REQUESTER + 1 {
        let who: &'static str = Box::leak(format!("user:u{n}").into_boxed_str());
        for i in 0..breeze_store::MAX_RUNS_PER_REQUESTER {
            cx.clock.advance(chrono::Duration::seconds(1));
            generate(i, who).await;
        }
    }
    let kept = o.reports().report_runs(None, 200).await.unwrap();
    assert_eq!(kept.len() as i64, breeze_store::MAX_RUNS_KEPT);
    assert!(
        o.reports().get_report_run(alice[0]).await.is_err(),
        "the oldest went"
    );
}

/// The per-requester cap counts a person, not a credential: one person asking through several
/// keys or grants keeps their newest runs over all of them, and cannot evict anyone else's by
/// adding credentials.
async fn a_person_is_one_requester_whatever_the_credential(cx: Ctx) {
    let s = &cx.store;
    let (a, _) = crate::two_orgs(s).await;
    let o = s.org(a);
    let (mallory, alice) = (
        breeze_core::UserId(uuid::Uuid::now_v7()),
        breeze_core::UserId(uuid::Uuid::now_v7()),
    );
    let generate = |i: i64, by: String, person: breeze_core::UserId| {
        let o = s.org(a);
        async move {
            o.reports()
                .generate_report(
                    adhoc(
                        &format!("r{i}"),
                        ReportKind::DeviceInventory,
                        ReportFormat::Csv,
                    ),
                    breeze_store::Requester {
                        by: &by,
                        person: Some(person),
                    },
                    audit("report.generate", "report"),
                )
                .await
                .unwrap()
                .id
        }
    };
    cx.clock.advance(chrono::Duration::seconds(1));
    let alices = generate(0, "api_key:alice".into(), alice).await;
    let mut first = None;
    for i in 0..breeze_store::MAX_RUNS_PER_REQUESTER + 5 {
        cx.clock.advance(chrono::Duration::seconds(1));
        // A fresh credential for every run.
        let id = generate(i, format!("oauth_grant:m{i}"), mallory).await;
        first.get_or_insert(id);
    }
    let kept = o.reports().report_runs(None, 100).await.unwrap();
    let mallorys = kept
        .iter()
        .filter(|r| r.requested_by.contains(":m"))
        .count() as i64;
    assert_eq!(mallorys, breeze_store::MAX_RUNS_PER_REQUESTER);
    assert!(
        o.reports().get_report_run(first.unwrap()).await.is_err(),
        "mallory's oldest went"
    );
    assert!(
        o.reports().get_report_run(alices).await.is_ok(),
        "alice's stays"
    );
}

/// Alert-history and audit-activity reports read each page from an index in the page's own
/// order, starting at the cursor: no temporary sort (SQLite's `USE TEMP B-TREE FOR ORDER BY`,
/// PostgreSQL's `Sort`) and no re-reading of earlier rows, so a report's time is linear in its
/// rows. Read from the databases' own plans of the statements the runs use.
async fn report_pages_follow_an_index_in_their_order(cx: Ctx) {
    let s = &cx.store;
    let (a, _) = crate::two_orgs(s).await;
    let cursor = (s.clock().now() - chrono::Duration::hours(1))
        .format("%H:%M:%S")
        .to_string();
    for (kind, plan) in s.org(a).reports().explain_report_pages().await.unwrap() {
        match s.backend() {
            breeze_store::Backend::Sqlite => {
                let index = match kind {
                    ReportKind::AlertHistory => "alerts_org_time",
                    _ => "audit_log_org_time",
                };
                assert!(plan.contains(index), "{kind:?}: {plan}");
                assert!(!plan.contains("TEMP B-TREE"), "{kind:?}: {plan}");
                // The index range starts at the cursor (`…>?`), not at the window's start.
                assert!(
                    plan.contains("SEARCH") && plan.contains(">?"),
                    "{kind:?}: {plan}"
                );
            }
            breeze_store::Backend::Postgres => {
                // On each month partition the index is that partition's copy of it.
                let index = match kind {
                    ReportKind::AlertHistory => "alerts_org_time",
                    _ => "org_id_created_at_id",
                };
                assert!(plan.contains("Index Scan using"), "{kind:?}: {plan}");
                assert!(plan.contains(index), "{kind:?}: {plan}");
                assert!(!plan.contains("Sort"), "{kind:?}: {plan}");
                let cond = plan
                    .lines()
                    .find(|l| l.contains("Index Cond"))
                    .unwrap_or_default();
                assert!(
                    cond.contains(&cursor),
                    "the range starts at the cursor: {plan}"
                );
            }
        }
    }
}

/// A report stops at its row cap (and at its byte cap) and says so in its last row, in every
/// format, and the run is marked truncated.
async fn reports_stop_at_their_caps_and_say_so(cx: Ctx) {
    let s = &cx.store;
    let (a, _) = crate::two_orgs(s).await;
    let o = s.org(a);
    for i in 0..30 {
        o.audit()
            .append_audit(audit(&format!("thing.{i}"), "thing"))
            .await
            .unwrap();
    }
    let caps = breeze_store::ReportCaps {
        rows: 10,
        bytes: i64::MAX,
    };
    for format in [ReportFormat::Json, ReportFormat::Csv] {
        let run = o
            .reports()
            .generate_report_within(
                adhoc("capped", ReportKind::AuditActivity, format),
                "test",
                audit("report.generate", "report"),
                caps,
            )
            .await
            .unwrap();
        assert!(run.truncated);
        assert_eq!(run.row_count, 10);
        let text = String::from_utf8(download(&o, run.id).await).unwrap();
        assert!(
            text.contains("truncated: this report stops at 10 rows (at most 10)"),
            "{text}"
        );
        if format == ReportFormat::Json {
            let v: serde_json::Value = serde_json::from_str(&text).unwrap();
            assert_eq!(v.as_array().unwrap().len(), 11, "ten rows and the note");
            // Rows in time order.
            assert_eq!(v[0]["action"], "organization.create");
        }
    }
    let run = o
        .reports()
        .generate_report_within(
            adhoc("bytes", ReportKind::AuditActivity, ReportFormat::Csv),
            "test",
            audit("report.generate", "report"),
            breeze_store::ReportCaps {
                rows: i64::MAX,
                bytes: 2_000,
            },
        )
        .await
        .unwrap();
    assert!(run.truncated && run.row_count < 30, "{run:?}");
    let uncapped = o
        .reports()
        .generate_report(
            adhoc("all", ReportKind::AuditActivity, ReportFormat::Csv),
            "test",
            audit("report.generate", "report"),
        )
        .await
        .unwrap();
    assert!(!uncapped.truncated);
    assert!(uncapped.row_count > 30);
}

/// A PDF report: a definition in PDF is kept (the format check admits it), 1,200 devices
/// make a structurally valid PDF over several stored chunks and many pages, with every
/// hostname on it and text escaped.
async fn pdf_reports_are_valid_documents_over_chunks(cx: Ctx) {
    let s = &cx.store;
    let (a, _) = crate::two_orgs(s).await;
    let o = s.org(a);
    let site = o
        .tenancy()
        .create_site("HQ", "UTC", audit("s", "site"))
        .await
        .unwrap();
    let fleet: Vec<_> = (0..1200)
        .map(|i| {
            let mut d = new_device(site.id, &format!("host-{i:05}"), DeviceStatus::Online);
            if i == 7 {
                d.hostname = "a(b)c\\d".into();
            }
            d
        })
        .collect();
    o.devices()
        .create_devices(fleet, audit("device.seed", "device"))
        .await
        .unwrap();
    let def = o
        .reports()
        .create_report(
            inventory("Fleet PDF", ReportFormat::Pdf),
            audit("report.create", "report"),
        )
        .await
        .unwrap();
    assert_eq!(
        o.reports().get_report(def.id).await.unwrap().format,
        ReportFormat::Pdf
    );
    let run = o
        .reports()
        .generate_report(
            ReportRequest::from(&def),
            "test",
            audit("report.generate", "report"),
        )
        .await
        .unwrap();
    assert_eq!(run.status, ReportStatus::Completed);
    assert_eq!(run.format, ReportFormat::Pdf);
    assert_eq!(run.row_count, 1200);
    assert!(run.chunk_count >= 2, "{run:?}");
    let pdf = download(&o, run.id).await;
    assert_eq!(pdf.len() as i64, run.byte_count);
    let pages = breeze_store::testing::check_pdf(&pdf);
    assert!(pages >= 20, "1,200 rows over {pages} pages");
    let text = pdf_text(&pdf);
    assert!(text.contains("host-00000") && text.contains("host-01199"));
    assert!(text.contains(r"a(b)c\d"), "escaped");
    assert!(text.contains("Fleet PDF - device_inventory - "), "titled");
    // An empty report is still a document: one page that says so.
    let empty = o
        .reports()
        .generate_report(
            ReportRequest {
                definition_id: None,
                name: "None".into(),
                kind: ReportKind::AlertHistory,
                format: ReportFormat::Pdf,
                filters: ReportFilters::default(),
            },
            "test",
            audit("report.generate", "report"),
        )
        .await
        .unwrap();
    let pdf = download(&o, empty.id).await;
    assert_eq!(breeze_store::testing::check_pdf(&pdf), 1);
    assert!(pdf_text(&pdf).contains("No rows."));
}

/// The text of a PDF as poppler's `pdftotext` extracts it (what a reader searches and copies),
/// after `qpdf --check` found the file sound. CI installs both (poppler-utils, qpdf).
fn pdf_text(pdf: &[u8]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("report.pdf");
    std::fs::write(&file, pdf).unwrap();
    let check = std::process::Command::new("qpdf")
        .arg("--check")
        .arg(&file)
        .output()
        .expect("qpdf is installed (apt-get install qpdf)");
    assert!(
        check.status.success(),
        "qpdf --check: {}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
    let out = std::process::Command::new("pdftotext")
        .args(["-enc", "UTF-8"])
        .arg(&file)
        .arg("-")
        .output()
        .expect("pdftotext is installed (apt-get install poppler-utils)");
    assert!(
        out.status.success(),
        "pdftotext: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Text beyond Latin-1 (Cyrillic, Greek, Polish, Turkish, Vietnamese, symbols) is printed with
/// the embedded font and comes back out of the PDF as it went in; CJK, which DejaVu Sans
/// lacks, is drawn as its .notdef box and copies as U+FFFD.
async fn pdf_reports_print_unicode_text(cx: Ctx) {
    let s = &cx.store;
    let (a, _) = crate::two_orgs(s).await;
    let o = s.org(a);
    let site = o
        .tenancy()
        .create_site("Zürich", "UTC", audit("s", "site"))
        .await
        .unwrap();
    // Short enough for the hostname column in DejaVu Sans as well as Condensed.
    let names = [
        "сервер-1",
        "Ωμέγα-θ1",
        "Łódź-Żó",
        "İst-ğş",
        "Hà-Nội-ữ",
        "café→ï",
        "Ærø-ø",
    ];
    let fleet: Vec<_> = names
        .iter()
        .map(|n| new_device(site.id, n, DeviceStatus::Online))
        .chain([new_device(site.id, "東京-01", DeviceStatus::Online)])
        .collect();
    o.devices()
        .create_devices(fleet, audit("device.seed", "device"))
        .await
        .unwrap();
    let run = o
        .reports()
        .generate_report(
            ReportRequest {
                definition_id: None,
                name: "Парк устройств".into(),
                kind: ReportKind::DeviceInventory,
                format: ReportFormat::Pdf,
                filters: ReportFilters::default(),
            },
            "test",
            audit("report.generate", "report"),
        )
        .await
        .unwrap();
    assert_eq!((run.status, run.row_count), (ReportStatus::Completed, 8));
    let pdf = download(&o, run.id).await;
    assert_eq!(breeze_store::testing::check_pdf(&pdf), 1);
    let text = pdf_text(&pdf);
    for name in names {
        assert!(text.contains(name), "{name} round-trips:\n{text}");
    }
    assert!(text.contains("Парк устройств"), "the title:\n{text}");
    assert!(text.contains("Zürich"), "the site:\n{text}");
    assert!(!text.contains('?'), "nothing printed as '?':\n{text}");
    assert!(
        text.contains("\u{fffd}\u{fffd}-01") && !text.contains("東京"),
        "CJK is .notdef:\n{text}"
    );
    let raw = String::from_utf8_lossy(&pdf);
    assert!(raw.contains("/FontFile2") && raw.contains("/ToUnicode"));
    // The font is a subset: a page of text, not the whole font file (~340 KiB deflated).
    assert!(pdf.len() < 100 * 1024, "{} bytes", pdf.len());
}

breeze_store::on_both_backends!(
    report_pages_follow_an_index_in_their_order,
    reports_stop_at_their_caps_and_say_so,
    reports_are_defined_generated_in_chunks_and_confined,
    the_history_keeps_the_newest_runs,
    a_person_is_one_requester_whatever_the_credential,
    pdf_reports_are_valid_documents_over_chunks,
    pdf_reports_print_unicode_text
);
