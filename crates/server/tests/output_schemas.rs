//! Every result of every tool matches the `outputSchema` the tool lists, checked with a real
//! JSON Schema validator (the official SDKs validate `structuredContent` and throw on a
//! mismatch, so a result that fails its own schema never reaches the model).
//!
//! Generated over the registry, so a new tool is covered without a new row: for every tool
//! listed to an `ai:execute` key, and every action of its action table, arguments are generated
//! from the input schema (required fields first, then every field; ids come from the fixture by
//! field name) and must give a successful result — a tool the generator cannot satisfy fails
//! the test. Then the same call through every error path: invalid arguments, unknown ids (not
//! found), an offline device, a command the agent reports timed out, the per-tool rate limit, a
//! key without the scope, and (for tools that can need approval) the pending-approval answer;
//! and every call as a batch of one item: preview, commit, and rejected.
//! Tier 3 calls go through the real approval flow: a person approves them over REST. A scripted
//! agent on a real WebSocket answers every command.
#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod common;

use std::{
    collections::BTreeMap,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering},
    },
    time::Duration,
};

use axum::{
    Router,
    body::Body,
    http::{Request, StatusCode, header},
};
use breeze_agent_proto::{AgentFrame, CommandKind, CommandOutcome, CommandResult, ServerFrame};
use breeze_auth::{CreateApiKey, CreateEnrollmentKey};
use breeze_core::{Scope, ScopeSet};
use breeze_limits::{LimiterError, RateDecision, RateLimiter};
use breeze_server::{AppState, Breeze, app};
use breeze_store::{NewContext, NewScript, testing::Ctx};
use breeze_tools::Tier;
use common::{Reply, World, audit, send, world};
use futures::{
    SinkExt, StreamExt,
    future::{BoxFuture, FutureExt},
};
use serde_json::{Map, Value, json};
use tokio_tungstenite::tungstenite::{self, client::IntoClientRequest};

/// A limiter that allows everything, or refuses the per-tool limits when told to.
#[derive(Default)]
struct Switch {
    refuse_tools: AtomicBool,
}

impl RateLimiter for Switch {
    fn check<'a>(
        &'a self,
        key: &'a str,
        limit: u32,
        _: Duration,
    ) -> BoxFuture<'a, Result<RateDecision, LimiterError>> {
        let refuse = key.starts_with("tool:") && self.refuse_tools.load(Ordering::SeqCst);
        async move {
            Ok(RateDecision {
                allowed: !refuse,
                retry_after: Duration::from_secs(if refuse { 60 } else { 0 }),
                remaining: if refuse { 0 } else { limit },
            })
        }
        .boxed()
    }

    fn backend(&self) -> &'static str {
        "switch"
    }
}

/// How the scripted agent answers.
const COMPLETE: u8 = 0;
const TIME_OUT: u8 = 1;

/// The agent's answer to `kind`: a disk scan finds one cleanup candidate.
fn answer(kind: &CommandKind) -> Value {
    match kind {
        CommandKind::DiskScan { .. } => json!({
            "mounts": [], "largestFiles": [], "largestDirectories": [],
            "cleanupCandidates": [{ "path": "/tmp/cand.log", "sizeBytes": 4096, "category": "temp" }],
        }),
        CommandKind::QuarantineFile { path, delete, .. } => json!({
            "quarantineId": uuid::Uuid::now_v7(), "originalPath": path, "sha256": "c".repeat(64),
            "mode": "0644", "uid": 0, "gid": 0, "sizeBytes": 1,
            "state": if *delete { "removed" } else { "quarantined" },
        }),
        CommandKind::LiveQuery { question, .. } => json!({
            "question": question.name(), "rows": [{ "user": "root", "terminal": "pts/0" }],
            "bytes": 35,
        }),
        _ => json!({}),
    }
}

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn send_frame(ws: &mut Socket, frame: &AgentFrame) {
    ws.send(tungstenite::Message::Text(
        serde_json::to_string(frame).unwrap().into(),
    ))
    .await
    .unwrap();
}

/// Enrolls a device and connects a scripted agent for it; returns the device id.
async fn scripted_agent(w: &World, state: &AppState, mode: Arc<AtomicU8>) -> String {
    let site = w.store.org(w.org_a).tenancy().list_sites().await.unwrap()[0].id;
    let (secret, _) = w
        .state
        .auth
        .create_enrollment_key(
            CreateEnrollmentKey {
                org_id: w.org_a,
                site_id: site,
                name: "schemas".into(),
                max_uses: None,
                expires_at: w.state.clock.now() + chrono::Duration::hours(1),
                created_by: "test".into(),
            },
            audit("enrollment_key.create"),
        )
        .await
        .unwrap();
    let body = json!({
        "enrollmentKey": secret.expose(), "hostname": "agent-host", "machineId": "machine-schemas",
        "os": { "family": "linux", "name": "Debian GNU/Linux", "version": "12",
                "kernel": "6.1", "arch": "x86_64" },
        "agentVersion": "0.1.0",
    });
    let r = send(
        &w.app,
        Request::post("/api/v1/agents/enroll")
            .header("content-type", "application/json")
            .body(Body::from(body.to_string()))
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    let device = r.body["deviceId"].as_str().unwrap().to_owned();
    let token = r.body["token"].as_str().unwrap().to_owned();

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(breeze_server::serve(
        listener,
        Breeze::new(state.clone()),
        std::future::pending(),
    ));
    let mut req = format!("ws://{addr}/api/v1/agents/ws")
        .into_client_request()
        .unwrap();
    req.headers_mut()
        .insert("authorization", format!("Bearer {token}").parse().unwrap());
    let (mut ws, _) = tokio_tungstenite::connect_async(req).await.unwrap();
    let clock = state.clock.clone();
    tokio::spawn(async move {
        while let Some(Ok(msg)) = ws.next().await {
            let tungstenite::Message::Text(t) = msg else {
                continue;
            };
            let Ok(ServerFrame::Command(cmd)) = serde_json::from_str(t.as_str()) else {
                continue;
            };
            send_frame(&mut ws, &AgentFrame::CommandStarted { command_id: cmd.id }).await;
            let timed_out = mode.load(Ordering::SeqCst) == TIME_OUT;
            let result = CommandResult {
                command_id: cmd.id,
                status: if timed_out {
                    CommandOutcome::TimedOut
                } else {
                    CommandOutcome::Completed
                },
                exit_code: (!timed_out).then_some(0),
                stdout: "ok".into(),
                stderr: String::new(),
                stdout_truncated: timed_out,
                stderr_truncated: false,
                result: (!timed_out).then(|| answer(&cmd.kind)),
                error: timed_out.then(|| "timed out after 25 s".into()),
                started_at: clock.now(),
                finished_at: clock.now(),
            };
            send_frame(&mut ws, &AgentFrame::CommandResult(result)).await;
        }
    });
    for _ in 0..200 {
        if state.gateway.is_connected(device.parse().unwrap()) {
            return device;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("the scripted agent did not connect")
}

fn tools_call(key: &str, tool: &str, args: &Value) -> Request<Body> {
    Request::post("/mcp")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("x-api-key", key)
        .body(Body::from(
            json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/call",
                    "params": { "name": tool, "arguments": args } })
            .to_string(),
        ))
        .unwrap()
}

/// The JSON-RPC message of a reply that may be SSE-framed.
fn message_of(reply: &Reply) -> Value {
    if let Value::String(text) = &reply.body {
        text.lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .find(|v| v.get("result").is_some() || v.get("error").is_some())
            .unwrap_or_else(|| panic!("no answer in {text}"))
    } else {
        reply.body.clone()
    }
}

struct Suite {
    app: Router,
    /// The same server with a response budget of one byte: every read is too large, every
    /// write's payload is omitted.
    budget_app: Router,
    /// The same server, with Tier 3 calls answering "pending" at once.
    pending_app: Router,
    w: World,
    limiter: Arc<Switch>,
    mode: Arc<AtomicU8>,
    exec: String,
    cookie: String,
    device: String,
    script: String,
    /// Per tool, the listed and the full output schema's validators.
    validators: BTreeMap<String, Vec<(&'static str, jsonschema::Validator)>>,
    input_schemas: BTreeMap<String, Value>,
    counter: AtomicUsize,
}

/// Fields whose values the generator takes from the fixture rather than from the schema.
const ID_FIELDS: &[&str] = &[
    "deviceId",
    "deviceIds",
    "siteId",
    "groupId",
    "scriptId",
    "contextId",
    "approvalId",
    "alertId",
    "ruleId",
    "channelIds",
    "windowId",
    "automationId",
    "deploymentId",
    "channelId",
    "reportId",
    "runId",
    "configPolicyId",
    "scheduleId",
    "assignmentId",
    "targetId",
    "ticketId",
    "invoiceId",
    "commentId",
    "lineId",
    "paymentId",
    "itemId",
    "componentId",
    "catalogItemId",
    "contractId",
    "quoteId",
    "blockId",
    "targetOrgId",
];

const UNKNOWN_ID: &str = "0190c0de-0000-7000-8000-000000000000";

impl Suite {
    /// A call through the whole pipeline; a Tier 3 call is approved by a person while it waits.
    async fn call(&self, app: &Router, key: &str, tool: &str, args: &Value) -> Value {
        let (app2, req) = (app.clone(), tools_call(key, tool, args));
        let call = tokio::spawn(async move { send(&app2, req).await });
        let org = self.w.store.org(self.w.org_a);
        while !call.is_finished() {
            for pending in org.approvals().list_approvals(true, 50).await.unwrap() {
                let r = send(
                    &self.app,
                    Request::post(format!("/api/v1/approvals/{}/approve", pending.id))
                        .header("content-type", "application/json")
                        .header(header::COOKIE, &self.cookie)
                        .body(Body::empty())
                        .unwrap(),
                )
                .await;
                assert!(
                    r.status == StatusCode::OK || r.status == StatusCode::CONFLICT,
                    "approve: {}",
                    r.body
                );
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        message_of(&call.await.unwrap())
    }

    /// Checks one answer: a JSON-RPC error carries no result; a result carries structured
    /// content that the tool's listed `outputSchema` and its full one accept. Returns the result, if any.
    fn check(&self, tool: &str, case: &str, args: &Value, message: &Value) -> Option<Value> {
        if let Some(error) = message.get("error") {
            // A refusal answered as a JSON-RPC error carries the structured error in `data`.
            let data = &error["data"];
            assert!(
                data["code"].is_string()
                    && data["message"] == error["message"]
                    && data["retryable"].is_boolean()
                    && data["hint"].is_string(),
                "{tool} ({case}): a JSON-RPC refusal carries the structured error in data: {error}"
            );
            return None;
        }
        let result = &message["result"];
        let content = result
            .get("structuredContent")
            .unwrap_or_else(|| panic!("{tool} ({case}): no structuredContent in {result}"));
        for (which, validator) in &self.validators[tool] {
            let errors: Vec<String> = validator
                .iter_errors(content)
                .map(|e| format!("{} at {}", e, e.instance_path()))
                .collect();
            assert!(
                errors.is_empty(),
                "{tool} ({case}) with {args}: structuredContent does not match the {which} outputSchema: {errors:?}\n{content:#}"
            );
        }
        // A batch's answer (isError when nothing ran or no item succeeded) has items, not an
        // error envelope.
        if result["isError"] == true && content["outcome"].is_null() {
            let error = &content["error"];
            assert!(
                error["code"].is_string()
                    && error["message"].is_string()
                    && error["retryable"].is_boolean()
                    && error["hint"].is_string(),
                "{tool} ({case}): an error result carries code, message, retryable and hint: {content}"
            );
            let text: Value = result["content"][0]["text"]
                .as_str()
                .and_then(|t| serde_json::from_str(t).ok())
                .unwrap_or_else(|| {
                    panic!("{tool} ({case}): the text content is not JSON: {result}")
                });
            assert_eq!(
                &text, content,
                "{tool} ({case}): the text content carries the same structured error"
            );
        }
        Some(result.clone())
    }

    /// The fixture value of an id-like field, read from the store when the call is made.
    async fn hint(&self, field: &str) -> Option<Value> {
        let org = self.w.store.org(self.w.org_a);
        Some(match field {
            "deviceId" => json!(self.device),
            "deviceIds" => json!([self.device]),
            "siteId" => json!(org.tenancy().list_sites().await.unwrap()[0].id.to_string()),
            "groupId" => json!(
                org.tenancy()
                    .list_groups()
                    .await
                    .unwrap()
                    .first()
                    .map_or(UNKNOWN_ID.to_owned(), |g| g.id.to_string())
            ),
            "scriptId" => json!(self.script),
            "contextId" => {
                let entries = org
                    .context()
                    .device_context(self.device.parse().unwrap(), true)
                    .await
                    .unwrap();
                json!(
                    entries
                        .first()
                        .map_or(UNKNOWN_ID.to_owned(), |c| c.id.to_string())
                )
            }
            "approvalId" => json!(
                org.approvals()
                    .list_approvals(false, 1)
                    .await
                    .unwrap()
                    .first()
                    .map_or(UNKNOWN_ID.to_owned(), |a| a.id.to_string())
            ),
            // A fresh alert (an open one for acknowledge and resolve) of a fresh rule.
            "alertId" => {
                let rule = self.fresh_rule().await;
                let device = breeze_core::DeviceId(self.device.parse().unwrap());
                let alert = org
                    .alerts()
                    .raise_alert(&rule, device, Some(1.0))
                    .await
                    .unwrap();
                json!(alert.unwrap().id.to_string())
            }
            "ruleId" => json!(self.fresh_rule().await.id.to_string()),
            "windowId" => json!(self.fresh_window().await.id.to_string()),
            "automationId" => json!(self.fresh_automation().await.id.to_string()),
            "channelId" => json!(self.fresh_channel().await.id.to_string()),
            "cron" => json!("0 * * * *"),
            "reportId" => json!(self.fresh_report().await.id.to_string()),
            "runId" => {
                let def = self.fresh_report().await;
                let run = org
                    .reports()
                    .generate_report(
                        breeze_store::ReportRequest::from(&def),
                        "fixture",
                        audit("report.generate"),
                    )
                    .await
                    .unwrap();
                json!(run.id.to_string())
            }
            // Filters that fit every kind: none.
            "filters" => json!({}),
            "reportType" => json!("device_inventory"),
            "configPolicyId" => json!(self.fresh_policy().await.to_string()),
            "policyId" => json!(self.fresh_compliance_policy().await.to_string()),
            "remediationScriptId" => json!(self.script),
            "rules" => json!([{ "type": "package_installed", "name": "breeze-absent-package" }]),
            "level" => json!("organization"),
            "targetId" => json!(self.w.org_a.to_string()),
            "assignmentId" => json!(self.fresh_assignment().await.to_string()),
            "remove" => json!([self.fresh_assignment().await.to_string()]),
            "timeZone" => json!("UTC"),
            "channelIds" => json!([]),
            "cursor" => json!(
                breeze_store::AlertCursor {
                    triggered_at: self.w.state.clock.now(),
                    id: uuid::Uuid::now_v7(),
                }
                .encode()
            ),
            "path" => json!("/tmp/breeze-schemas"),
            "newPath" => json!("/tmp/breeze-schemas-renamed"),
            "paths" => json!(["/tmp/cand.log"]),
            "subnet" => json!("10.0.0.0/24"),
            "scanId" => json!(self.fresh_scan().await.0.to_string()),
            "flaggedFileId" => json!(self.fresh_scan().await.1.to_string()),
            "quarantineId" => json!(self.fresh_quarantine().await.to_string()),
            "scheduleId" => json!(self.fresh_scan_schedule().await.to_string()),
            "extraRoots" => json!(["/tmp"]),
            "indicatorPaths" => json!(["/tmp/breeze-indicator"]),
            "startTime" => {
                json!((self.w.state.clock.now() - chrono::Duration::hours(1)).to_rfc3339())
            }
            "endTime" => json!(self.w.state.clock.now().to_rfc3339()),
            // manage_patches: a deferral date, a job, and a package the fixture device's last
            // scan offers (its scripted agent answers scans with nothing, so it stays).
            "deferUntil" => {
                json!((self.w.state.clock.now() + chrono::Duration::days(7)).to_rfc3339())
            }
            "jobId" => json!(self.fresh_patch_job().await.to_string()),
            "packageNames" => {
                self.offer_patch().await;
                json!(["openssl"])
            }
            _ => return None,
        })
    }

    /// A completed security scan of the fixture's device with one flagged file: (scan, file).
    async fn fresh_scan(&self) -> (uuid::Uuid, uuid::Uuid) {
        let org = self.w.store.org(self.w.org_a);
        let device = breeze_core::DeviceId(self.device.parse().unwrap());
        let scan = org
            .security()
            .create_security_scan(device, uuid::Uuid::now_v7(), "fixture", audit("s"))
            .await
            .unwrap();
        let outcome = breeze_store::ScanOutcome {
            status: breeze_core::security::ScanStatus::Completed,
            error: None,
            privileged: Some(true),
            findings: Vec::new(),
            flagged: vec![breeze_store::NewFlagged {
                path: "/tmp/breeze-flagged".into(),
                reason: "fixture".into(),
                check: "indicators".into(),
                severity: breeze_core::security::FindingSeverity::High,
                sha256: Some("c".repeat(64)),
                mode: "0644".into(),
                uid: 0,
                gid: 0,
                size_bytes: 1,
            }],
            posture: None,
        };
        org.security()
            .record_scan_result(scan.id, outcome)
            .await
            .unwrap();
        let flagged = org.security().scan_flagged_files(scan.id).await.unwrap()[0].id;
        (scan.id, flagged)
    }

    /// A new scan schedule of the fixture's organization (each unschedule consumes one).
    async fn fresh_scan_schedule(&self) -> uuid::Uuid {
        let n = self.counter.fetch_add(1, Ordering::SeqCst);
        self.w
            .store
            .org(self.w.org_a)
            .security()
            .create_scan_schedule(
                breeze_store::NewScanSchedule {
                    name: format!("fixture schedule {n}"),
                    arguments: json!({ "deviceIds": [self.device] }),
                    cadence: breeze_store::ScanCadence::Interval(60),
                    owner_actor: "system:fixture".into(),
                },
                audit("security.schedule.create"),
            )
            .await
            .unwrap()
            .id
    }

    /// A quarantined file of the fixture's device (each restore or remove consumes one).
    async fn fresh_quarantine(&self) -> uuid::Uuid {
        let org = self.w.store.org(self.w.org_a);
        org.security()
            .record_quarantine(
                breeze_store::NewQuarantine {
                    device_id: breeze_core::DeviceId(self.device.parse().unwrap()),
                    flagged_id: None,
                    agent_ref: uuid::Uuid::now_v7().to_string(),
                    original_path: "/tmp/breeze-flagged".into(),
                    sha256: "c".repeat(64),
                    mode: "0644".into(),
                    uid: 0,
                    gid: 0,
                    size_bytes: 1,
                    state: breeze_core::security::QuarantineState::Quarantined,
                    created_by: "fixture".into(),
                },
                audit("q"),
            )
            .await
            .unwrap()
            .id
    }

    /// A new alert rule of the fixture's organization (each delete consumes one).
    async fn fresh_rule(&self) -> breeze_store::AlertRule {
        let n = self.counter.fetch_add(1, Ordering::SeqCst);
        self.w
            .store
            .org(self.w.org_a)
            .alerts()
            .create_rule(
                breeze_store::NewRule {
                    name: format!("fixture rule {n}"),
                    description: None,
                    severity: breeze_core::Severity::High,
                    enabled: true,
                    condition: breeze_core::AlertCondition::Offline { minutes: 10 },
                    target: breeze_store::RuleTarget::Organization,
                    cooldown_minutes: 0,
                    auto_resolve: true,
                    channel_ids: vec![],
                    created_by: "fixture".into(),
                },
                audit("alert_rule.create"),
            )
            .await
            .unwrap()
    }

    /// A new in-app channel of the fixture's organization.
    async fn fresh_channel(&self) -> breeze_store::NotificationChannel {
        let n = self.counter.fetch_add(1, Ordering::SeqCst);
        self.w
            .store
            .org(self.w.org_a)
            .alerts()
            .create_channel(
                breeze_store::NewChannel {
                    name: format!("fixture channel {n}"),
                    kind: breeze_core::ChannelKind::InApp,
                    config: json!({}),
                    secret: None,
                },
                audit("notification_channel.create"),
            )
            .await
            .unwrap()
    }

    /// A new deployment of the fixture's organization in the state `action` applies to:
    /// running for pause, paused for resume, else a draft.
    async fn fresh_deployment(&self, action: Option<&str>) -> uuid::Uuid {
        let n = self.counter.fetch_add(1, Ordering::SeqCst);
        let org = self.w.store.org(self.w.org_a);
        let d = org
            .deployments()
            .create_deployment(
                breeze_store::NewDeployment {
                    name: format!("fixture deployment {n}"),
                    description: None,
                    payload: breeze_store::Payload::Script {
                        script_id: self.script.parse().unwrap(),
                        parameters: Default::default(),
                        timeout_seconds: 30,
                    },
                    target: breeze_store::RuleTarget::Organization,
                    rings: vec![],
                    max_failure_percent: 0,
                    owner_actor: "system:fixture".into(),
                    maintenance_window_only: false,
                    window_id: None,
                },
                audit("deployment.create"),
            )
            .await
            .unwrap();
        let mut controls = Vec::new();
        if matches!(action, Some("pause" | "resume")) {
            controls.push(breeze_store::Control::Start);
        }
        if action == Some("resume") {
            controls.push(breeze_store::Control::Pause);
        }
        for c in controls {
            org.deployments()
                .control_deployment(d.id, c, "system:fixture", audit("deployment.control"))
                .await
                .unwrap();
        }
        d.id
    }

    /// A new manual automation of the fixture's organization (each delete consumes one).
    async fn fresh_automation(&self) -> breeze_store::Automation {
        let n = self.counter.fetch_add(1, Ordering::SeqCst);
        let channel = self.fresh_channel().await;
        self.w
            .store
            .org(self.w.org_a)
            .automations()
            .create_automation(
                breeze_store::NewAutomation {
                    name: format!("fixture automation {n}"),
                    description: None,
                    enabled: true,
                    trigger: breeze_store::TriggerSpec::Manual,
                    action: breeze_store::ActionSpec::Notify {
                        channel: channel.id,
                        message: None,
                    },
                    target: breeze_store::RuleTarget::Organization,
                    owner_actor: "system:fixture".into(),
                },
                audit("automation.create"),
            )
            .await
            .unwrap()
    }

    /// A new compliance policy with a remediation script, on which the fixture's device is
    /// non-compliant (a package it lacks), so `remediate` has work (each delete consumes one).
    async fn fresh_compliance_policy(&self) -> uuid::Uuid {
        let n = self.counter.fetch_add(1, Ordering::SeqCst);
        let org = self.w.store.org(self.w.org_a);
        let device = breeze_core::DeviceId(self.device.parse().unwrap());
        let inventory: breeze_agent_proto::Inventory = serde_json::from_value(json!({
            "collectedAt": self.w.state.clock.now(), "hostname": "fixture",
            "os": { "family": "linux", "name": "Debian GNU/Linux", "version": "12", "kernel": "6.1", "arch": "x86_64" },
            "cpu": { "model": "CPU", "physicalCores": 1, "logicalCores": 1 },
            "memoryTotalBytes": 1u64, "disks": [], "interfaces": [],
            "packages": [{ "name": "bash", "version": "5.2" }],
        }))
        .unwrap();
        self.w
            .store
            .record_inventory(device, self.w.org_a, &inventory)
            .await
            .unwrap();
        let policy = org
            .compliance()
            .create_compliance_policy(
                breeze_store::NewCompliancePolicy {
                    name: format!("fixture compliance {n}"),
                    description: None,
                    rules: vec![breeze_core::ComplianceRule::PackageInstalled {
                        name: "breeze-absent-package".into(),
                    }],
                    target: breeze_store::RuleTarget::Device(device),
                    enforcement: breeze_core::PolicyEnforcement::Monitor,
                    remediation_script: Some(self.script.parse().unwrap()),
                    remediation_parameters: BTreeMap::new(),
                    active: true,
                    owner_actor: "system:fixture".into(),
                    evaluate_every_minutes: 60,
                },
                audit("compliance_policy.create"),
            )
            .await
            .unwrap();
        org.compliance()
            .evaluate_policy_inventory(&policy, None)
            .await
            .unwrap();
        policy.id
    }

    /// A new report definition of the fixture's organization (each delete consumes one).
    async fn fresh_report(&self) -> breeze_store::ReportDefinition {
        let n = self.counter.fetch_add(1, Ordering::SeqCst);
        self.w
            .store
            .org(self.w.org_a)
            .reports()
            .create_report(
                breeze_store::NewReport {
                    name: format!("fixture report {n}"),
                    description: None,
                    kind: breeze_core::ReportKind::DeviceInventory,
                    format: breeze_core::ReportFormat::Csv,
                    filters: breeze_core::ReportFilters::default(),
                    created_by: "fixture".into(),
                },
                audit("report.create"),
            )
            .await
            .unwrap()
    }

    /// The fixture device's last patch scan offers `openssl`.
    async fn offer_patch(&self) {
        let report = breeze_agent_proto::PatchScanReport {
            manager: "apt".into(),
            scanned_at: self.w.state.clock.now(),
            patches: vec![breeze_agent_proto::AvailablePatch {
                name: "openssl".into(),
                installed_version: Some("3.0.14".into()),
                available_version: "3.0.15".into(),
                arch: None,
                source: None,
                security: true,
                severity: None,
                advisory: None,
            }],
            reboot_required: false,
            logged_in_users: Vec::new(),
        };
        self.w
            .store
            .record_patch_scan(self.device.parse().unwrap(), self.w.org_a, &report)
            .await
            .unwrap();
    }

    /// A new patch job of the fixture's organization.
    async fn fresh_patch_job(&self) -> uuid::Uuid {
        self.w
            .store
            .org(self.w.org_a)
            .patches()
            .create_patch_job(
                breeze_store::NewPatchJob {
                    kind: breeze_store::PatchJobKind::Install,
                    reboot_policy: "never".into(),
                    reboot_with_users: false,
                    window: None,
                    devices: vec![(self.device.parse().unwrap(), json!(["openssl"]))],
                    requested_by: "fixture".into(),
                },
                audit("patch.install"),
            )
            .await
            .unwrap()
            .id
    }

    /// A new configuration policy of the fixture's organization (each assignment uses one).
    async fn fresh_policy(&self) -> uuid::Uuid {
        let n = self.counter.fetch_add(1, Ordering::SeqCst);
        self.w
            .store
            .org(self.w.org_a)
            .config_policies()
            .create_config_policy(
                breeze_store::NewConfigPolicy {
                    name: format!("fixture policy {n}"),
                    description: None,
                    status: breeze_core::PolicyStatus::Active,
                    settings: vec![(
                        breeze_core::FeatureType::Monitoring,
                        json!({ "metricIntervalSeconds": 60 }),
                    )],
                    created_by: "fixture".into(),
                },
                audit("config_policy.create"),
            )
            .await
            .unwrap()
            .id
    }

    /// A new assignment of a new policy to the organization (each removal consumes one).
    async fn fresh_assignment(&self) -> uuid::Uuid {
        let policy = self.fresh_policy().await;
        self.w
            .store
            .org(self.w.org_a)
            .config_policies()
            .assign_config_policy(
                breeze_store::NewAssignment {
                    policy_id: policy,
                    level: breeze_core::ConfigLevel::Organization,
                    target_id: self.w.org_a.0,
                    priority: 0,
                    created_by: "fixture".into(),
                },
                audit("config_policy.assign"),
            )
            .await
            .unwrap()
            .id
    }

    /// A new maintenance window of the fixture's organization (each delete consumes one).
    async fn fresh_window(&self) -> breeze_store::MaintenanceWindow {
        let n = self.counter.fetch_add(1, Ordering::SeqCst);
        let now = self.w.state.clock.now();
        self.w
            .store
            .org(self.w.org_a)
            .maintenance()
            .create_window(
                breeze_store::NewWindow {
                    name: format!("fixture window {n}"),
                    description: None,
                    target: breeze_store::RuleTarget::Organization,
                    time_zone: "UTC".into(),
                    schedule: breeze_core::MaintenanceSchedule::Once {
                        starts_at: now,
                        ends_at: now + chrono::Duration::hours(1),
                    },
                    suppress_alerts: true,
                    enabled: true,
                    created_by: "fixture".into(),
                },
                audit("maintenance_window.create"),
            )
            .await
            .unwrap()
    }

    /// Arguments for `tool`: the required fields (every field when `full`), the action set.
    async fn arguments(&self, tool: &str, action: Option<(&str, &str)>, full: bool) -> Value {
        let schema = &self.input_schemas[tool];
        let mut hints = Map::new();
        for field in collect_fields(schema) {
            // `level` is a hierarchy level only for the configuration policy tools.
            if field == "level" && !tool.contains("configuration") {
                continue;
            }
            if let Some(v) = self.hint(&field).await {
                hints.insert(field, v);
            }
        }
        if tool == "manage_deployments" {
            // A deployment in the state the action applies to; one ring of the fixture's
            // device (exactly one of deviceIds, groupId, percent); status filters that exist.
            let action = action.map(|(_, a)| a);
            let deployment = self.fresh_deployment(action).await;
            hints.insert("deploymentId".into(), json!(deployment.to_string()));
            hints.insert("rings".into(), json!([{ "deviceIds": [self.device] }]));
            let status = if action == Some("device_status") {
                "pending"
            } else {
                "draft"
            };
            hints.insert("status".into(), json!(status));
        }
        if tool == "manage_tickets" {
            self.ticket_hints(action.map(|(_, a)| a), &mut hints).await;
        }
        if tool.ends_with("_invoice") || tool.ends_with("_invoices") {
            self.invoice_hints(tool, action.map(|(_, a)| a), &mut hints)
                .await;
        }
        if tool.ends_with("live_query") || tool.ends_with("live_queries") {
            // A question the fixture's Linux device answers, a kept query, a device cursor.
            hints.insert("question".into(), json!({ "question": "sessions" }));
            hints.insert("target".into(), json!({ "type": "organization" }));
            hints.insert("cursor".into(), json!(uuid::Uuid::max().to_string()));
            let q = self
                .w
                .store
                .org(self.w.org_a)
                .live_queries()
                .create_query(
                    breeze_store::NewLiveQuery {
                        question: json!({ "question": "sessions" }),
                        target: json!({ "type": "organization" }),
                        created_by: "fixture".into(),
                        retention: chrono::Duration::days(1),
                        devices_targeted: 1,
                        devices_online: 1,
                        run_for: chrono::Duration::seconds(30),
                    },
                    audit("live_query.run"),
                )
                .await
                .unwrap();
            hints.insert("queryId".into(), json!(q.id.to_string()));
        }
        if tool == "get_vulnerability_exposure" || tool == "manage_advisories" {
            // A real advisory affecting the fixture's Debian 12 device, named by id and CVE.
            self.vulnerability_hints(tool, &mut hints).await;
        }
        if tool.contains("catalog") || tool.contains("contract") || tool == "manage_quotes" {
            self.billing_hints(tool, action.map(|(_, a)| a), &mut hints)
                .await;
        }
        let generator = Gen {
            root: schema,
            counter: &self.counter,
            hints: &hints,
            full,
        };
        let mut args = generator.value(tool, "", schema);
        if let Some((key, name)) = action {
            args[key] = json!(name);
        }
        // A distributor product is named by exactly one of its SKU and part number.
        let import = action.map(|(_, a)| a) == Some("import_distributor_product");
        if tool == "lookup_distributor_product" || import {
            let field = if import { "distributorSku" } else { "sku" };
            args[field] = json!(breeze_billing::testing::SKU);
            if let Some(m) = args.as_object_mut() {
                m.remove("mfgPartNumber");
            }
        }
        args
    }
}

impl Suite {
    /// Loads a real OSV record and reports an inventory it affects on the fixture's device.
    async fn vulnerability_hints(&self, tool: &str, hints: &mut Map<String, Value>) {
        let text = include_str!("../../store/tests/fixtures/osv/DEBIAN-CVE-2023-38545.json");
        let record = breeze_core::advisory::OsvRecord::parse(text).unwrap();
        self.w.store.import_advisories(vec![record]).await.unwrap();
        let device = breeze_core::DeviceId(self.device.parse().unwrap());
        let inventory: breeze_agent_proto::Inventory = serde_json::from_value(json!({
            "collectedAt": self.w.store.clock().now(), "hostname": "web-01",
            "os": { "family": "linux", "name": "Debian", "version": "12", "kernel": "6.1", "arch": "x86_64" },
            "cpu": { "model": "CPU", "physicalCores": 2, "logicalCores": 4 },
            "memoryTotalBytes": 1u64, "disks": [], "interfaces": [],
            "packages": [{ "name": "curl", "version": "7.88.1-10+deb12u3" }],
        }))
        .unwrap();
        self.w
            .store
            .record_inventory(device, self.w.org_a, &inventory)
            .await
            .unwrap();
        let id = if tool == "manage_advisories" {
            "DEBIAN-CVE-2023-38545"
        } else {
            "CVE-2023-38545"
        };
        hints.insert("id".into(), json!(id));
        hints.insert("query".into(), json!("curl"));
        hints.insert("severity".into(), json!("critical"));
        hints.insert("offset".into(), json!(0));
        hints.insert(
            "record".into(),
            json!({
                "id": "LOCAL-2026-0001", "modified": "2026-01-01T00:00:00Z",
                "affected": [{ "package": { "ecosystem": "Debian:12", "name": "curl" },
                    "ranges": [{ "type": "ECOSYSTEM", "events": [{ "introduced": "0" }] }] }]
            }),
        );
    }

    /// A fresh ticket of organization A, in the state `action` needs: a comment of the exec
    /// key's user to edit or delete, a linked alert to unlink, the user's timer running on it
    /// to stop (and none elsewhere, to start one); with values for the money fields.
    async fn ticket_hints(&self, action: Option<&str>, hints: &mut Map<String, Value>) {
        let tickets = self.w.store.org(self.w.org_a).tickets();
        let t = tickets
            .create_ticket(
                breeze_store::NewTicket {
                    subject: "fixture".into(),
                    description: String::new(),
                    category: None,
                    priority: breeze_core::TicketPriority::Normal,
                    device_id: None,
                    submitter: None,
                    assignee_id: None,
                    tags: vec![],
                    due_at: None,
                    created_by: "fixture".into(),
                },
                audit("ticket.create"),
            )
            .await
            .unwrap();
        hints.insert("ticketId".into(), json!(t.id.to_string()));
        hints.insert("assigneeId".into(), json!(self.w.admin.to_string()));
        hints.insert("targetOrgId".into(), json!(self.w.org_b.to_string()));
        hints.insert("rate".into(), json!("10.00"));
        hints.insert("unitPrice".into(), json!("1.50"));
        hints.insert("quantity".into(), json!("2"));
        hints.insert("currency".into(), json!("USD"));
        hints.insert("minutes".into(), json!(5));
        hints.insert("cursor".into(), json!(t.number.to_string()));
        hints.insert(
            "dueDate".into(),
            json!((self.w.state.clock.now() + chrono::Duration::days(1)).to_rfc3339()),
        );
        let status = match action {
            Some("list") => "active",
            _ => "open",
        };
        hints.insert("status".into(), json!(status));
        let actor = breeze_core::Actor::system("fixture");
        match action {
            Some(a) if a.contains("comment") && a != "comment" => {
                let c = tickets
                    .add_comment(t.id, &actor, self.w.admin, "c", false, audit("c"))
                    .await
                    .unwrap();
                hints.insert("commentId".into(), json!(c.id.to_string()));
            }
            Some("unlink_alert") => {
                let alert = self.hint("alertId").await.unwrap();
                let id = alert.as_str().unwrap().parse().unwrap();
                tickets
                    .link_alert(t.id, id, "fixture", audit("l"))
                    .await
                    .unwrap();
                hints.insert("alertId".into(), alert);
            }
            Some("start_timer" | "stop_timer") => {
                if let Some(running) = tickets.running_timer(self.w.admin).await.unwrap() {
                    tickets
                        .stop_timer(running.ticket_id, self.w.admin, audit("t"))
                        .await
                        .unwrap();
                }
                if action == Some("stop_timer") {
                    let usd = breeze_core::Currency::parse("USD").unwrap();
                    tickets
                        .start_timer(
                            t.id,
                            breeze_store::NewTime {
                                user: self.w.admin,
                                actor,
                                billable: true,
                                rate: breeze_core::Money::new(1000, usd),
                                note: None,
                            },
                            audit("t"),
                        )
                        .await
                        .unwrap();
                }
            }
            _ => {}
        }
    }

    /// A fresh invoice of organization A in the state `action` needs (a draft with a line; an
    /// issued one to void or pay; one with a payment to void), a ticket with billable time to
    /// assemble from, and money values.
    async fn invoice_hints(
        &self,
        tool: &str,
        action: Option<&str>,
        hints: &mut Map<String, Value>,
    ) {
        let org = self.w.store.org(self.w.org_a);
        let (invoices, usd) = (org.invoices(), breeze_core::Currency::parse("USD").unwrap());
        let draft = invoices
            .create_draft(usd, None, None, "fixture", audit("invoice.create"))
            .await
            .unwrap();
        let line = breeze_store::NewLine {
            description: "fixture".into(),
            quantity: breeze_core::Quantity::ONE,
            unit_price: breeze_core::Money::new(1000, usd),
            tax_bp: 0,
        };
        let with_line = invoices.add_line(draft.id, line, audit("l")).await.unwrap();
        let line_id = invoices.lines(draft.id).await.unwrap()[0].id;
        hints.insert("lineId".into(), json!(line_id.to_string()));
        hints.insert("orgId".into(), json!(self.w.org_a.to_string()));
        hints.insert("currency".into(), json!("USD"));
        hints.insert("unitPrice".into(), json!("2.50"));
        hints.insert("quantity".into(), json!("1"));
        hints.insert("amount".into(), json!("1.00"));
        hints.insert("cursor".into(), json!(uuid::Uuid::max().to_string()));
        hints.insert(
            "dueDate".into(),
            json!((self.w.state.clock.now() + chrono::Duration::days(30)).to_rfc3339()),
        );
        if tool == "list_invoices" {
            hints.insert("status".into(), json!("draft"));
        }
        let mut id = with_line.id;
        if matches!(
            action,
            Some("void" | "record_payment" | "void_payment" | "create_payment_link")
        ) {
            id = invoices.issue(draft.id, audit("i")).await.unwrap().id;
        }
        if action == Some("void_payment") {
            let p = invoices
                .record_payment(
                    id,
                    breeze_core::Money::new(100, usd),
                    "card",
                    None,
                    "fixture",
                    audit("p"),
                )
                .await
                .unwrap();
            hints.insert("paymentId".into(), json!(p.id.to_string()));
        }
        hints.insert("invoiceId".into(), json!(id.to_string()));
        let item = self.fresh_item(breeze_core::CatalogKind::Service).await;
        hints.insert("catalogItemId".into(), json!(item.to_string()));
        let now = self.w.state.clock.now();
        hints.insert(
            "periodStart".into(),
            json!((now - chrono::Duration::days(1)).to_rfc3339()),
        );
        hints.insert(
            "periodEnd".into(),
            json!((now + chrono::Duration::days(1)).to_rfc3339()),
        );
        if action == Some("add_contract_lines") {
            let contracts = org.contracts();
            let c = contracts
                .create_draft(
                    breeze_store::NewContract {
                        name: format!("fixture {}", uuid::Uuid::now_v7()),
                        currency: usd,
                        billing_period: breeze_core::BillingPeriod::Monthly,
                        tax_bp: 0,
                        notes: None,
                        starts_at: now,
                        created_by: "fixture".into(),
                    },
                    audit("c"),
                )
                .await
                .unwrap();
            contracts
                .add_line(
                    c.id,
                    breeze_store::NewContractLine::Manual {
                        description: "seat".into(),
                        quantity: breeze_core::Quantity::ONE,
                        unit_price: breeze_core::Money::new(500, usd),
                    },
                    audit("l"),
                )
                .await
                .unwrap();
            hints.insert("contractId".into(), json!(c.id.to_string()));
        }
        if matches!(
            action,
            Some("assemble_from_ticket" | "assemble_from_period")
        ) {
            let mut t = Map::new();
            self.ticket_hints(Some("log_time"), &mut t).await;
            let ticket = t["ticketId"].as_str().unwrap().parse().unwrap();
            let user = breeze_core::Actor::system("fixture");
            org.tickets()
                .log_time(
                    ticket,
                    30,
                    breeze_store::NewTime {
                        user: self.w.admin,
                        actor: user,
                        billable: true,
                        rate: breeze_core::Money::new(6000, usd),
                        note: None,
                    },
                    audit("t"),
                )
                .await
                .unwrap();
            hints.insert("ticketId".into(), t["ticketId"].clone());
        }
    }
}

impl Suite {
    /// A fresh sellable USD item of organization A's partner (with a unique SKU).
    async fn fresh_item(&self, kind: breeze_core::CatalogKind) -> uuid::Uuid {
        let usd = breeze_core::Currency::parse("USD").unwrap();
        self.w
            .store
            .org(self.w.org_a)
            .catalog()
            .create_item(
                breeze_store::NewCatalogItem {
                    sku: Some(format!("FX-{}", uuid::Uuid::now_v7().simple())),
                    name: "fixture".into(),
                    kind,
                    description: String::new(),
                    unit_price: breeze_core::Money::new(1000, usd),
                    tax_bp: 0,
                    created_by: "fixture".into(),
                },
                audit("catalog.create"),
            )
            .await
            .unwrap()
            .id
    }

    /// For the catalog, contract and quote tools: fresh records in the state `action` needs
    /// (a bundle with a component and an override; a contract draft with a line, or active,
    /// or paused; a draft quote with a block and a line), and money values.
    async fn billing_hints(
        &self,
        tool: &str,
        action: Option<&str>,
        hints: &mut Map<String, Value>,
    ) {
        use breeze_core::{CatalogKind, ContractStatus, Money, Quantity};
        let org = self.w.store.org(self.w.org_a);
        let usd = breeze_core::Currency::parse("USD").unwrap();
        let now = self.w.state.clock.now();
        hints.insert("orgId".into(), json!(self.w.org_a.to_string()));
        hints.insert("currency".into(), json!("USD"));
        hints.insert("unitPrice".into(), json!("2.50"));
        hints.insert("quantity".into(), json!("1"));
        hints.insert(
            "sku".into(),
            json!(format!("G-{}", uuid::Uuid::now_v7().simple())),
        );
        hints.insert("startsAt".into(), json!(now.to_rfc3339()));
        hints.insert(
            "validUntil".into(),
            json!((now + chrono::Duration::days(30)).to_rfc3339()),
        );
        let item = self.fresh_item(CatalogKind::Hardware).await;
        hints.insert("catalogItemId".into(), json!(item.to_string()));
        if tool.contains("catalog") {
            let bundle = self.fresh_item(CatalogKind::Bundle).await;
            let catalog = org.catalog();
            catalog
                .set_component(bundle, item, Quantity::ONE, audit("c"))
                .await
                .unwrap();
            catalog
                .set_override(bundle, Money::new(900, usd), "fixture", audit("o"))
                .await
                .unwrap();
            hints.insert("itemId".into(), json!(bundle.to_string()));
            hints.insert("componentId".into(), json!(item.to_string()));
        } else if tool.contains("contract") {
            let contracts = org.contracts();
            let c = contracts
                .create_draft(
                    breeze_store::NewContract {
                        name: "fixture".into(),
                        currency: usd,
                        billing_period: breeze_core::BillingPeriod::Monthly,
                        tax_bp: 0,
                        notes: None,
                        starts_at: now,
                        created_by: "fixture".into(),
                    },
                    audit("k"),
                )
                .await
                .unwrap();
            let lines = contracts
                .add_line(
                    c.id,
                    breeze_store::NewContractLine::Catalog {
                        item,
                        quantity: Quantity::ONE,
                    },
                    audit("l"),
                )
                .await
                .unwrap();
            hints.insert("lineId".into(), json!(lines[0].id.to_string()));
            if matches!(action, Some("pause" | "cancel" | "resume")) {
                contracts
                    .set_status(c.id, ContractStatus::Active, audit("a"))
                    .await
                    .unwrap();
            }
            if action == Some("resume") {
                contracts
                    .set_status(c.id, ContractStatus::Paused, audit("p"))
                    .await
                    .unwrap();
            }
            hints.insert("contractId".into(), json!(c.id.to_string()));
            hints.insert("cursor".into(), json!(uuid::Uuid::max().to_string()));
            hints.insert("status".into(), json!("draft"));
        } else {
            let quotes = org.quotes();
            let q = quotes
                .create_draft("fixture", usd, None, "fixture", audit("q"))
                .await
                .unwrap();
            let blocks = quotes
                .add_block(q.id, true, "fixture", audit("b"))
                .await
                .unwrap();
            quotes
                .add_line(
                    q.id,
                    breeze_store::NewQuoteLine::Catalog {
                        item,
                        quantity: Quantity::ONE,
                    },
                    audit("l"),
                )
                .await
                .unwrap();
            let line = quotes.lines(q.id).await.unwrap()[0].id;
            // A payment link is for a sent quote.
            if action == Some("create_payment_link") {
                quotes.send(q.id, audit("s")).await.unwrap();
            }
            hints.insert("quoteId".into(), json!(q.id.to_string()));
            hints.insert("blockId".into(), json!(blocks[0].id.to_string()));
            hints.insert("lineId".into(), json!(line.to_string()));
            hints.insert("cursor".into(), json!("999999"));
        }
    }
}

/// A listed input schema: the tool's own arguments, which the generator fills in, with its
/// required fields at the top level. Fails when the batch envelope (described once, in the
/// server's instructions) is listed again.
fn own_arguments(listed: &Value) -> Value {
    for key in ["items", "mode", "atomicity"] {
        assert!(
            listed["properties"].get(key).is_none(),
            "{key} is advertised: {listed}"
        );
    }
    for key in ["if", "else"] {
        assert!(
            listed.get(key).is_none(),
            "{key} at the top level: {listed}"
        );
    }
    listed.clone()
}

/// `args` as a batch of one item.
fn batch_of(mode: &str, args: &Value) -> Value {
    json!({ "mode": mode, "items": [{ "clientRef": "one", "input": args }] })
}

/// Every property name anywhere in a schema.
fn collect_fields(schema: &Value) -> Vec<String> {
    let mut out = Vec::new();
    fn walk(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Object(m) => {
                if let Some(Value::Object(props)) = m.get("properties") {
                    out.extend(props.keys().cloned());
                }
                m.values().for_each(|v| walk(v, out));
            }
            Value::Array(a) => a.iter().for_each(|v| walk(v, out)),
            _ => {}
        }
    }
    walk(schema, &mut out);
    out.sort();
    out.dedup();
    out
}

/// Values from a JSON Schema: the first enum value, the shortest string, the minimum number.
struct Gen<'a> {
    root: &'a Value,
    counter: &'a AtomicUsize,
    hints: &'a Map<String, Value>,
    full: bool,
}

impl Gen<'_> {
    fn resolve<'s>(&'s self, schema: &'s Value) -> &'s Value {
        match schema.get("$ref").and_then(Value::as_str) {
            Some(r) => {
                let path = r.strip_prefix('#').unwrap();
                let target = self
                    .root
                    .pointer(path)
                    .unwrap_or_else(|| panic!("unresolvable $ref {r}"));
                self.resolve(target)
            }
            None => schema,
        }
    }

    fn value(&self, tool: &str, field: &str, schema: &Value) -> Value {
        if let Some(v) = self.hints.get(field) {
            return v.clone();
        }
        let schema = self.resolve(schema);
        if let Some(c) = schema.get("const") {
            return c.clone();
        }
        if let Some(first) = schema
            .get("enum")
            .and_then(Value::as_array)
            .and_then(|e| e.iter().find(|v| !v.is_null()))
        {
            return first.clone();
        }
        for key in ["anyOf", "oneOf"] {
            if let Some(branches) = schema.get(key).and_then(Value::as_array) {
                let branch = branches
                    .iter()
                    .find(|b| self.resolve(b).get("type") != Some(&json!("null")))
                    .unwrap_or_else(|| panic!("{tool}.{field}: no usable branch in {schema}"));
                return self.value(tool, field, branch);
            }
        }
        let ty = match schema.get("type") {
            Some(Value::String(t)) => t.as_str(),
            Some(Value::Array(types)) => types
                .iter()
                .filter_map(Value::as_str)
                .find(|t| *t != "null")
                .unwrap_or("null"),
            _ => panic!("{tool}.{field}: the generator cannot make a value for {schema}"),
        };
        let number = |k: &str| schema.get(k).and_then(Value::as_u64);
        match ty {
            "object" => {
                let required: Vec<&str> = schema
                    .get("required")
                    .and_then(Value::as_array)
                    .map(|r| r.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                let mut out = Map::new();
                if let Some(Value::Object(props)) = schema.get("properties") {
                    // The idempotency key is set by the replay case alone: generated calls
                    // repeat their arguments and must run each time.
                    for (name, s) in props.iter().filter(|(n, _)| *n != "requestId") {
                        if self.full || required.contains(&name.as_str()) {
                            out.insert(name.clone(), self.value(tool, name, s));
                        }
                    }
                }
                Value::Object(out)
            }
            // An id the listing names as a UUID and nothing harvested: one that names nothing.
            "string" if schema.get("format").and_then(Value::as_str) == Some("uuid") => {
                json!(uuid::Uuid::now_v7().to_string())
            }
            "string" => {
                // Distinct strings, so names that must be unique are.
                let n = self.counter.fetch_add(1, Ordering::SeqCst);
                let min = number("minLength").unwrap_or(1).max(1) as usize;
                let max = number("maxLength").unwrap_or(u64::MAX) as usize;
                let mut v = format!("x{n}");
                if v.len() > max {
                    v = "x".repeat(min);
                }
                while v.len() < min {
                    v.push('x');
                }
                json!(v)
            }
            "integer" | "number" => json!(number("minimum").unwrap_or(1).max(1)),
            "boolean" => json!(false),
            "array" => {
                let items = schema.get("items").unwrap_or(&Value::Null);
                let n = number("minItems").unwrap_or(1).max(1);
                Value::Array((0..n).map(|_| self.value(tool, field, items)).collect())
            }
            other => panic!("{tool}.{field}: the generator cannot make a {other}"),
        }
    }
}

async fn exec_key(w: &World) -> String {
    let (secret, _) = w
        .state
        .auth
        .create_api_key(
            CreateApiKey {
                org_id: w.org_a,
                user_id: w.admin,
                name: "exec".into(),
                scopes: ScopeSet::new([Scope::AiRead, Scope::AiWrite, Scope::AiExecute]),
                expires_at: None,
            },
            audit("api_key.create"),
        )
        .await
        .unwrap();
    secret.expose().to_owned()
}

/// Stripe and TD SYNNEX stand-ins, and the partner's accounts at them: the settings every
/// server of the suite runs with, so the payment-link and distributor tools succeed.
async fn billing_services(w: &World) -> impl Fn(&mut breeze_server::ServerConfig) + Clone + use<> {
    use breeze_billing::{Billing, BillingConfig, SynnexAccount, testing};
    let ca = breeze_sources::testing::TestCa::new();
    let stripe = testing::StripeStandIn::start(&ca, "sk_test_suite").await;
    let account = SynnexAccount {
        customer_no: "1".into(),
        user_name: "suite".into(),
        password: "suite".into(),
    };
    let synnex = testing::SynnexStandIn::start(&ca, account.clone()).await;
    let vault = breeze_sources::vault::Vault::from_setting(
        &breeze_sources::vault::Vault::generate_key().unwrap(),
    )
    .unwrap();
    let mut billing = BillingConfig::new("http://127.0.0.1:3000");
    billing.stripe_api = stripe.url.clone();
    billing.synnex_api = Some(synnex.url.clone());
    let partner = w
        .store
        .org(w.org_a)
        .tenancy()
        .organization()
        .await
        .unwrap()
        .partner_id;
    let accounts = Billing::new(
        w.store.clone(),
        ca.egress(),
        Some(vault.clone()),
        billing.clone(),
        w.state.clock.clone(),
    );
    accounts
        .set_stripe(partner, Some(("sk_test_suite", "whsec_suite")), audit("b"))
        .await
        .unwrap();
    accounts
        .set_synnex(partner, Some((&account, "us")), audit("b"))
        .await
        .unwrap();
    let egress = ca.config(true);
    move |c: &mut breeze_server::ServerConfig| {
        c.tool_sources = breeze_server::ToolSourcesConfig {
            key: Some(vault.clone()),
            egress: egress.clone(),
        };
        c.billing = billing.clone();
    }
}

async fn suite(cx: &Ctx) -> Suite {
    let w = world(cx).await;
    let services = billing_services(&w).await;
    let limiter = Arc::new(Switch::default());
    let mut config = (*w.state.config).clone();
    services(&mut config);
    let state = AppState::new(
        w.store.clone(),
        w.state.auth.clone(),
        w.state.clock.clone(),
        config,
        limiter.clone(),
    );
    let app = app(Breeze::new(state.clone()));
    // No per-tool limits here: every Tier 3 action of a tool is asked for once (security_scan
    // has six actions and a limit of three).
    let pending_app = common::build(
        &w,
        |c| {
            services(c);
            c.approvals.wait = Duration::ZERO;
        },
        Arc::new(Switch::default()),
    );
    // The budget server calls every tool again, more than a minute's message rate allows;
    // rate limits have their own tests.
    let budget_app = common::build(
        &w,
        |c| {
            services(c);
            c.max_response_bytes = 1;
        },
        Arc::new(Switch::default()),
    );
    let mode = Arc::new(AtomicU8::new(COMPLETE));
    let device = scripted_agent(&w, &state, mode.clone()).await;
    let exec = exec_key(&w).await;
    let r = send(
        &app,
        Request::post("/api/v1/auth/login")
            .header("content-type", "application/json")
            .body(Body::from(
                json!({ "email": "admin@p.test", "password": common::PASSWORD }).to_string(),
            ))
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let cookie = r.headers.get(header::SET_COOKIE).unwrap().to_str().unwrap();
    let cookie = cookie.split(';').next().unwrap().to_owned();

    // Fixture rows the id fields point at.
    let org = w.store.org(w.org_a);
    let script = org
        .scripts()
        .create_script(
            NewScript {
                name: "Uptime".into(),
                description: "Prints the uptime".into(),
                language: "bash".into(),
                category: "diagnostics".into(),
                body: "uptime".into(),
                parameters: vec![],
                created_by: "test".into(),
            },
            audit("script.create"),
        )
        .await
        .unwrap();
    org.tenancy()
        .create_group("Servers", None, None, audit("group.create"))
        .await
        .unwrap();
    org.context()
        .add_context(
            NewContext {
                device_id: device.parse().unwrap(),
                context_type: "issue".into(),
                summary: "Disk fills up on Mondays".into(),
                details: None,
                created_by: "test".into(),
                expires_at: None,
            },
            audit("context.add"),
        )
        .await
        .unwrap();
    // An inventory with packages (same hostname and OS as enrolled), so the device tools
    // answer with data: get_device_software's success path lists packages.
    let inventory: breeze_agent_proto::Inventory = serde_json::from_value(json!({
        "collectedAt": w.state.clock.now(), "hostname": "agent-host",
        "os": { "family": "linux", "name": "Debian GNU/Linux", "version": "12", "kernel": "6.1", "arch": "x86_64" },
        "cpu": { "model": "CPU", "physicalCores": 2, "logicalCores": 4 },
        "memoryTotalBytes": 1u64 << 30,
        "disks": [{ "mount": "/", "filesystem": "ext4", "totalBytes": 1000, "availableBytes": 250 }],
        "interfaces": [],
        "packages": [{ "name": "libc6", "version": "2.36" }, { "name": "openssl", "version": "3.0.11" }],
    }))
    .unwrap();
    w.store
        .record_inventory(device.parse().unwrap(), w.org_a, &inventory)
        .await
        .unwrap();

    // The catalogue as the client sees it: every registered tool, each with its schemas.
    let list = send(
        &app,
        Request::post("/mcp")
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("x-api-key", &exec)
            .body(Body::from(
                json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/list" }).to_string(),
            ))
            .unwrap(),
    )
    .await;
    let tools = message_of(&list)["result"]["tools"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(
        tools.len(),
        breeze_tools::all().len(),
        "every tool is listed"
    );
    let registry = breeze_tools::all();
    let mut validators = BTreeMap::new();
    let mut input_schemas = BTreeMap::new();
    for t in &tools {
        let name = t["name"].as_str().unwrap().to_owned();
        let out = &t["outputSchema"];
        assert_eq!(out["type"], "object", "{name}: MCP wants an object schema");
        let listed = jsonschema::validator_for(out)
            .unwrap_or_else(|e| panic!("{name}: the outputSchema does not compile: {e}"));
        // The listing's is the top level of the full one (`breeze_describe`'s): both must
        // accept every answer.
        let full = jsonschema::validator_for(&registry.get(&name).unwrap().output_schema)
            .unwrap_or_else(|e| panic!("{name}: the full outputSchema does not compile: {e}"));
        validators.insert(name.clone(), vec![("listed", listed), ("full", full)]);
        input_schemas.insert(name, own_arguments(&t["inputSchema"]));
    }
    Suite {
        app,
        budget_app,
        pending_app,
        w,
        limiter,
        mode,
        exec,
        cookie,
        device,
        script: script.id.to_string(),
        validators,
        input_schemas,
        counter: AtomicUsize::new(0),
    }
}

async fn every_result_matches_its_output_schema(cx: Ctx) {
    let s = suite(&cx).await;
    let registry = breeze_tools::all();
    let mut checked = 0usize;
    for spec in registry.iter() {
        let actions: Vec<Option<&str>> = if spec.actions.is_empty() {
            vec![None]
        } else {
            spec.actions.iter().map(|a| Some(a.name)).collect()
        };
        for action in actions {
            let tool = spec.name;
            let at = action.map(|a| (spec.action_key, a));
            let case = |what: &str| {
                format!(
                    "{}{what}",
                    action.map_or(String::new(), |a| format!("{a}: "))
                )
            };

            // Success: the required fields, else every field; a tool nothing satisfies fails.
            let mut args = s.arguments(tool, at, false).await;
            let mut answer = s.call(&s.app, &s.exec, tool, &args).await;
            let mut result = s.check(tool, &case("required fields"), &args, &answer);
            if result.as_ref().is_none_or(|r| r["isError"] == true) {
                args = s.arguments(tool, at, true).await;
                answer = s.call(&s.app, &s.exec, tool, &args).await;
                result = s.check(tool, &case("every field"), &args, &answer);
            }
            if result.is_none_or(|r| r["isError"] == true) {
                panic!(
                    "{tool} {action:?}: the generated arguments {args} never succeed; teach the generator this tool's fields: {answer}"
                );
            }
            checked += 1;
            let full = s.arguments(tool, at, true).await;

            if spec.is_write(&args) {
                // A replay: the same call with the same requestId answers the stored result,
                // marked replayed, and it matches the outputSchema.
                let mut keyed = args.clone();
                keyed["requestId"] = json!(format!("replay-{tool}-{}", action.unwrap_or("")));
                let first = s.call(&s.app, &s.exec, tool, &keyed).await;
                let first = s.check(tool, &case("requestId"), &keyed, &first).unwrap();
                let again = s.call(&s.app, &s.exec, tool, &keyed).await;
                let again = s.check(tool, &case("replayed"), &keyed, &again).unwrap();
                // A retryable failure (a busy database, an agent that did not answer) released
                // its requestId, so the second call ran again instead of replaying.
                if first["structuredContent"]["error"]["retryable"] != true {
                    assert_eq!(
                        again["structuredContent"]["replayed"], true,
                        "{tool}: the replay is marked: {again} (first: {first})"
                    );
                    assert_eq!(first["isError"], again["isError"], "{tool}: {again}");
                }

                // Over the response budget a write answers payloadOmitted, never an error.
                if spec.effective_tier(&args) != Tier::T3 {
                    let answer = s.call(&s.budget_app, &s.exec, tool, &args).await;
                    let r = s.check(tool, &case("budget"), &args, &answer).unwrap();
                    if r["isError"] != true {
                        assert_eq!(
                            r["structuredContent"]["payloadOmitted"], true,
                            "{tool}: {r}"
                        );
                    }
                }
            } else if spec.effective_tier(&args) != Tier::T3 {
                // Over the response budget a read fails with RESPONSE_TOO_LARGE. (Tier 3 is
                // left out: the budget server learns of approvals only by polling.)
                let answer = s.call(&s.budget_app, &s.exec, tool, &args).await;
                let r = s.check(tool, &case("budget"), &args, &answer).unwrap();
                assert_eq!(
                    r["structuredContent"]["error"]["code"], "RESPONSE_TOO_LARGE",
                    "{tool}: {r}"
                );
            }
            // Batches: a preview, a commit (a Tier 3 one approved like any call), and a batch
            // rejected for an invalid item, all answering in the listed outputSchema.
            for mode in ["preview", "commit"] {
                let batch = batch_of(mode, &args);
                let answer = s.call(&s.app, &s.exec, tool, &batch).await;
                let r = s.check(tool, &case(&format!("batch {mode}")), &batch, &answer);
                let r = r.unwrap_or_else(|| panic!("{tool}: batch {mode}: {answer}"));
                assert_eq!(r["structuredContent"]["mode"], mode, "{tool}: {r}");
            }
            let mut bad = batch_of("commit", &args);
            bad["items"][0]["input"]["noSuchField"] = json!(1);
            let answer = s.call(&s.app, &s.exec, tool, &bad).await;
            let r = s
                .check(tool, &case("batch rejected"), &bad, &answer)
                .unwrap();
            assert_eq!(r["structuredContent"]["outcome"], "rejected", "{tool}: {r}");

            // Invalid arguments: one field of the wrong type (or an unknown action).
            let mut invalid = full.clone();
            let field = full
                .as_object()
                .unwrap()
                .keys()
                .find(|k| *k != spec.action_key)
                .cloned();
            match field {
                Some(f) => {
                    invalid[&f] = if full[&f].is_object() {
                        json!(17)
                    } else {
                        json!({ "not": ["a", "valid", "value"] })
                    };
                }
                None => invalid[spec.action_key] = json!("no_such_action"),
            }
            let answer = s.call(&s.app, &s.exec, tool, &invalid).await;
            let r = s.check(tool, &case("invalid"), &invalid, &answer).unwrap();
            assert_eq!(r["isError"], true, "{tool}: {invalid} accepted");
            assert_eq!(r["structuredContent"]["error"]["code"], "INVALID_ARGUMENT");

            // Unknown ids: not found (or an empty answer).
            let mut unknown = full.clone();
            let mut any_id = false;
            for f in ID_FIELDS {
                if let Some(v) = unknown.get_mut(*f) {
                    *v = if v.is_array() {
                        json!([UNKNOWN_ID])
                    } else {
                        json!(UNKNOWN_ID)
                    };
                    any_id = true;
                }
            }
            if any_id {
                let answer = s.call(&s.app, &s.exec, tool, &unknown).await;
                s.check(tool, &case("unknown ids"), &unknown, &answer);
            }

            if args.get("deviceId").is_some() || args.get("deviceIds").is_some() {
                // An offline device.
                let set = |status: &str| {
                    format!("UPDATE devices SET status = '{status}' WHERE hostname = 'agent-host'")
                };
                s.w.store.raw_execute(&set("offline")).await.unwrap();
                let answer = s.call(&s.app, &s.exec, tool, &args).await;
                s.w.store.raw_execute(&set("online")).await.unwrap();
                s.check(tool, &case("offline device"), &args, &answer);

                // The agent reports the command timed out.
                s.mode.store(TIME_OUT, Ordering::SeqCst);
                let answer = s.call(&s.app, &s.exec, tool, &args).await;
                s.mode.store(COMPLETE, Ordering::SeqCst);
                s.check(tool, &case("timed out"), &args, &answer);
            }

            // The per-tool rate limit.
            s.limiter.refuse_tools.store(true, Ordering::SeqCst);
            let answer = s.call(&s.app, &s.exec, tool, &args).await;
            s.limiter.refuse_tools.store(false, Ordering::SeqCst);
            let r = s.check(tool, &case("rate limited"), &args, &answer);
            if spec.rate_limit.is_some() {
                assert!(
                    r.is_none_or(|r| r["isError"] == true),
                    "{tool}: the rate limit was not applied: {answer}"
                );
            }

            // A key without the scope for the call (refused), or one that has it (answered).
            let answer = s.call(&s.app, &s.w.read, tool, &args).await;
            s.check(tool, &case("read-only key"), &args, &answer);
        }
    }
    assert!(checked >= registry.len(), "{checked} calls succeeded");

    // Pending approval: every tool that can need it, for each of its Tier 3 actions. (Last,
    // so these requests stay pending and nothing above approves them.)
    for spec in registry.iter() {
        let tier3: Vec<Option<&str>> = if spec.actions.is_empty() {
            if spec.tier == Tier::T3 {
                vec![None]
            } else {
                vec![]
            }
        } else {
            spec.actions
                .iter()
                .filter(|a| a.tier == Tier::T3)
                .map(|a| Some(a.name))
                .collect()
        };
        for action in tier3 {
            let at = action.map(|a| (spec.action_key, a));
            let args = s.arguments(spec.name, at, true).await;
            let reply = send(&s.pending_app, tools_call(&s.exec, spec.name, &args)).await;
            let answer = message_of(&reply);
            let r = s
                .check(spec.name, "pending approval", &args, &answer)
                .unwrap();
            assert_eq!(
                r["structuredContent"]["status"], "pending_approval",
                "{}: {r}",
                spec.name
            );
        }
    }
}

/// The bug as it was: an `ai:write` key listed processes through `execute_command`. The
/// specification's table gives every command type Tier 3.
async fn execute_command_is_tier_3_for_every_command_type(cx: Ctx) {
    let w = world(&cx).await;
    let registry = breeze_tools::all();
    let spec = registry.get("execute_command").unwrap();
    for a in spec.actions {
        assert_eq!(a.tier, Tier::T3, "execute_command {}", a.name);
        let args = json!({ "deviceId": w.a_device, "commandType": a.name });
        let r = send(&w.app, tools_call(&w.write, "execute_command", &args)).await;
        let answer = message_of(&r);
        assert!(
            answer["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("requires ai:execute")),
            "{}: {answer}",
            a.name
        );
    }
    // Not listed to a key that cannot call it.
    let list = send(
        &w.app,
        Request::post("/mcp")
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("x-api-key", &w.write)
            .body(Body::from(
                json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/list" }).to_string(),
            ))
            .unwrap(),
    )
    .await;
    let names: Vec<Value> = message_of(&list)["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].clone())
        .collect();
    assert!(!names.contains(&json!("execute_command")), "{names:?}");
}

breeze_store::on_both_backends!(
    every_result_matches_its_output_schema,
    execute_command_is_tier_3_for_every_command_type,
);
