//! Reports: definitions (what to report, in which format, with which filters), their runs, and
//! the runs' output (migration 0022).
//!
//! A run reads its rows in keyset pages of [`REPORT_PAGE`] and
//! writes them, rendered as JSON or CSV, into a buffer that is stored as one `report_chunks`
//! row whenever it holds [`CHUNK_BYTES`]; the download reads the chunks back one at a time
//! ([`crate::OrgReports::report_chunk`]). A report of any size is therefore never held in memory whole:
//! at most one page of rows and one chunk. Each page resumes where the last one stopped on an
//! index in the page's own order — devices by id; alerts by `(triggered_at, id)` on
//! `alerts_org_time`; audit records by `(created_at, id)` on `audit_log_org_time` — so a run
//! reads each row once and sorts nothing: its time is linear in its rows (a test reads the
//! query plans on both databases). A run stops at [`MAX_REPORT_ROWS`] rows or
//! [`MAX_REPORT_BYTES`] bytes, says so in its last row and is marked `truncated`.
//!
//! The output lives in the database rather than in files so that it is durable with it,
//! reachable from every instance sharing PostgreSQL, and removed with its organization. An
//! organization keeps its newest [`MAX_RUNS_KEPT`] runs and each person (or credential) their
//! newest [`MAX_RUNS_PER_REQUESTER`], so one requester cannot evict everyone else's; older
//! ones (and their chunks) are deleted when a new run completes.
//!
//! A run is recorded (`running`, with its audit record `report.generate`) before any row is
//! read; it ends `completed` with its row, byte and chunk counts, or `failed` with the error
//! and no chunks. A process that dies mid-run leaves it `running`: it cannot be downloaded.
//!
//! CSV follows RFC 4180 (fields with a comma, quote or line break are quoted, quotes doubled)
//! and, because reports are opened in spreadsheets, a field starting with `=`, `+`, `-`, `@`,
//! tab or carriage return is prefixed with `'` so that it is never evaluated as a formula
//! (hostnames and audit details come from agents and callers).

use breeze_core::{
    AuditEvent, AuditRecord, DeviceId, OrgId, ReportFilters, ReportFormat, ReportKind,
    ReportStatus, Timestamp, UserId,
};
use serde::Serialize;
use serde_json::{Value, json};
use sqlx::types::Json;
use uuid::Uuid;

use crate::{
    Result, StoreError,
    alerts::check_text,
    audit::{self, AuditRow, audit_columns},
    sql::{Arg, Sql, Tx, sql},
};

/// The most report definitions one organization may keep.
pub const MAX_REPORTS_PER_ORG: i64 = 100;
/// The runs (with their output) kept per organization.
pub const MAX_RUNS_KEPT: i64 = 50;
/// The runs kept per requester (a person, else a credential) within the organization's.
pub const MAX_RUNS_PER_REQUESTER: i64 = 10;
/// The most rows one run writes; past it the run stops and says so.
pub const MAX_REPORT_ROWS: i64 = 1_000_000;
/// The most bytes of output one run writes; past it the run stops and says so.
pub const MAX_REPORT_BYTES: i64 = 512 * 1024 * 1024;
/// A stored chunk of output holds about this many bytes (one row more at most).
pub const CHUNK_BYTES: usize = 256 * 1024;
/// Rows read per query while generating.
pub const REPORT_PAGE: i64 = 500;

/// Where a run stops: [`MAX_REPORT_ROWS`] and [`MAX_REPORT_BYTES`] unless a test asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReportCaps {
    pub rows: i64,
    pub bytes: i64,
}

impl Default for ReportCaps {
    fn default() -> Self {
        Self {
            rows: MAX_REPORT_ROWS,
            bytes: MAX_REPORT_BYTES,
        }
    }
}

/// A report definition as stored.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct ReportDefinition {
    pub id: Uuid,
    pub org_id: OrgId,
    pub name: String,
    pub description: Option<String>,
    #[sqlx(try_from = "String")]
    pub kind: ReportKind,
    #[sqlx(try_from = "String")]
    pub format: ReportFormat,
    #[sqlx(json)]
    pub filters: ReportFilters,
    pub created_by: String,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

/// A definition to create.
#[derive(Debug, Clone)]
pub struct NewReport {
    pub name: String,
    pub description: Option<String>,
    pub kind: ReportKind,
    pub format: ReportFormat,
    pub filters: ReportFilters,
    pub created_by: String,
}

/// Changes to a definition; `None` keeps the current value. Filters are replaced whole.
#[derive(Debug, Clone, Default)]
pub struct ReportUpdate {
    pub name: Option<String>,
    pub description: Option<String>,
    pub kind: Option<ReportKind>,
    pub format: Option<ReportFormat>,
    pub filters: Option<ReportFilters>,
}

/// Who asks for a run: the credential recorded as its `requested_by`, and the person that
/// credential acts for. A person's newest [`MAX_RUNS_PER_REQUESTER`] runs are kept whichever of
/// their keys, grants or sessions asked; without a person, the credential is the requester.
#[derive(Debug, Clone, Copy)]
pub struct Requester<'a> {
    pub by: &'a str,
    pub person: Option<UserId>,
}

impl<'a> From<&'a str> for Requester<'a> {
    fn from(by: &'a str) -> Self {
        Self { by, person: None }
    }
}

/// What to generate: a definition's settings (naming it) or ad hoc ones.
#[derive(Debug, Clone)]
pub struct ReportRequest {
    pub definition_id: Option<Uuid>,
    pub name: String,
    pub kind: ReportKind,
    pub format: ReportFormat,
    pub filters: ReportFilters,
}

impl From<&ReportDefinition> for ReportRequest {
    fn from(d: &ReportDefinition) -> Self {
        Self {
            definition_id: Some(d.id),
            name: d.name.clone(),
            kind: d.kind,
            format: d.format,
            filters: d.filters.clone(),
        }
    }
}

/// One generation of a report.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct ReportRun {
    pub id: Uuid,
    pub org_id: OrgId,
    pub definition_id: Option<Uuid>,
    pub name: String,
    #[sqlx(try_from = "String")]
    pub kind: ReportKind,
    #[sqlx(try_from = "String")]
    pub format: ReportFormat,
    #[sqlx(json)]
    pub filters: ReportFilters,
    #[sqlx(try_from = "String")]
    pub status: ReportStatus,
    pub row_count: i64,
    pub byte_count: i64,
    pub chunk_count: i64,
    pub error: Option<String>,
    pub requested_by: String,
    pub started_at: Timestamp,
    pub finished_at: Option<Timestamp>,
    /// The run stopped at [`MAX_REPORT_ROWS`] or [`MAX_REPORT_BYTES`] (its last row says so).
    pub truncated: bool,
}

const DEFINITION_COLUMNS: &str = "id, org_id, name, description, kind, format, filters, \
    created_by, created_at, updated_at";
const RUN_COLUMNS: &str = "id, org_id, definition_id, name, kind, format, filters, status, \
    row_count, byte_count, chunk_count, error, requested_by, started_at, finished_at, truncated";

fn check_definition(
    kind: ReportKind,
    filters: &ReportFilters,
    description: Option<&str>,
) -> Result<()> {
    filters.validate(kind).map_err(StoreError::Invalid)?;
    if description.is_some_and(|d| d.chars().count() > crate::alerts::MAX_NOTE_CHARS) {
        return Err(StoreError::Invalid(format!(
            "description is longer than {} characters",
            crate::alerts::MAX_NOTE_CHARS
        )));
    }
    Ok(())
}

/// Output being written: the current chunk and the totals.
struct Output {
    run: Uuid,
    format: ReportFormat,
    buf: Vec<u8>,
    seq: i64,
    rows: i64,
    bytes: i64,
    /// Stopped at a cap (the last row says so).
    truncated: bool,
    caps: ReportCaps,
    /// The PDF's layout and object offsets (PDF only).
    pdf: Option<crate::pdf::PdfTable>,
}

impl Output {
    fn new(
        run: Uuid,
        format: ReportFormat,
        columns: &[&str],
        title: &str,
        font: &crate::pdf_font::FontChoice,
    ) -> Self {
        let mut out = Self {
            run,
            format,
            buf: Vec::with_capacity(CHUNK_BYTES + 4096),
            seq: 0,
            rows: 0,
            bytes: 0,
            truncated: false,
            caps: ReportCaps::default(),
            pdf: None,
        };
        match format {
            ReportFormat::Json => out.buf.extend_from_slice(b"["),
            ReportFormat::Csv => {
                let header: Vec<Value> = columns.iter().map(|c| Value::from(*c)).collect();
                out.csv_line(&header);
            }
            ReportFormat::Pdf => {
                out.pdf = Some(crate::pdf::PdfTable::start(
                    &mut out.buf,
                    title,
                    columns,
                    font.font(),
                ));
            }
        }
        out
    }

    fn csv_line(&mut self, values: &[Value]) {
        for (i, v) in values.iter().enumerate() {
            if i > 0 {
                self.buf.push(b',');
            }
            match v {
                Value::Null => {}
                Value::String(s) => csv_field(&mut self.buf, s, true),
                other => csv_field(&mut self.buf, &other.to_string(), false),
            }
        }
        self.buf.extend_from_slice(b"\r\n");
    }

    /// Appends one row (`values` in `columns` order).
    fn row(&mut self, columns: &[&str], values: Vec<Value>) {
        match self.format {
            ReportFormat::Json => {
                self.buf
                    .extend_from_slice(if self.rows == 0 { b"\n{" } else { b",\n{" });
                for (i, (c, v)) in columns.iter().zip(&values).enumerate() {
                    if i > 0 {
                        self.buf.push(b',');
                    }
                    // Writing strings and JSON values into a Vec cannot fail.
                    let _ = serde_json::to_writer(&mut self.buf, c);
                    self.buf.push(b':');
                    let _ = serde_json::to_writer(&mut self.buf, v);
                }
                self.buf.push(b'}');
            }
            ReportFormat::Csv => self.csv_line(&values),
            ReportFormat::Pdf => {
                let cells: Vec<String> = values
                    .into_iter()
                    .map(|v| match v {
                        Value::Null => String::new(),
                        Value::String(s) => s,
                        other => other.to_string(),
                    })
                    .collect();
                if let Some(pdf) = self.pdf.as_mut() {
                    pdf.row(&mut self.buf, &cells);
                }
            }
        }
        self.rows += 1;
    }

    /// Whether the run reached [`MAX_REPORT_ROWS`] or [`MAX_REPORT_BYTES`]; then it writes a
    /// last row saying so (a JSON element `{"truncated": …}`, a CSV or PDF row whose first
    /// cell says it) and is marked truncated.
    fn at_cap(&mut self, columns: &[&str]) -> bool {
        let written = self.bytes + self.buf.len() as i64;
        let ReportCaps { rows, bytes } = self.caps;
        if self.rows < rows && written < bytes {
            return false;
        }
        let note = format!(
            "truncated: this report stops at {} rows (at most {rows}) and {written} bytes \
             (at most {bytes}); narrow its filters for the rest",
            self.rows
        );
        match self.format {
            ReportFormat::Json => {
                self.buf.extend_from_slice(b",\n");
                let _ = serde_json::to_writer(&mut self.buf, &json!({ "truncated": note }));
            }
            ReportFormat::Csv | ReportFormat::Pdf => {
                let mut cells = vec![Value::Null; columns.len()];
                cells[0] = Value::from(note);
                let rows = self.rows;
                self.row(columns, cells);
                self.rows = rows;
            }
        }
        self.truncated = true;
        true
    }

    fn finish(&mut self) {
        match self.format {
            ReportFormat::Json => {
                self.buf
                    .extend_from_slice(if self.rows == 0 { b"]\n" } else { b"\n]\n" });
            }
            ReportFormat::Csv => {}
            ReportFormat::Pdf => {
                if let Some(pdf) = self.pdf.take() {
                    pdf.finish(&mut self.buf, self.rows);
                }
            }
        }
    }
}

/// Writes one CSV field: quoted when it must be; text (`guard`) is never read as a formula.
fn csv_field(buf: &mut Vec<u8>, text: &str, guard: bool) {
    let formula = guard && text.starts_with(['=', '+', '-', '@', '\t', '\r']);
    let quote = formula || text.contains([',', '"', '\n', '\r']);
    if quote {
        buf.push(b'"');
    }
    if formula {
        buf.push(b'\'');
    }
    for b in text.bytes() {
        if b == b'"' {
            buf.push(b'"');
        }
        buf.push(b);
    }
    if quote {
        buf.push(b'"');
    }
}

#[derive(sqlx::FromRow)]
struct InventoryRow {
    id: DeviceId,
    hostname: String,
    site: String,
    status: String,
    os_family: String,
    os_name: String,
    os_version: String,
    agent_version: Option<String>,
    last_seen_at: Option<Timestamp>,
    tags: Json<Vec<String>>,
    created_at: Timestamp,
}

const INVENTORY_COLUMNS: &[&str] = &[
    "id",
    "hostname",
    "site",
    "status",
    "osType",
    "osName",
    "osVersion",
    "agentVersion",
    "lastSeenAt",
    "tags",
    "createdAt",
];

#[derive(sqlx::FromRow)]
struct AlertRow {
    id: Uuid,
    triggered_at: Timestamp,
    severity: String,
    status: String,
    title: String,
    message: String,
    value: Option<f64>,
    device_id: DeviceId,
    hostname: String,
    rule_id: Uuid,
    acknowledged_at: Option<Timestamp>,
    acknowledged_by: Option<String>,
    resolved_at: Option<Timestamp>,
    resolved_by: Option<String>,
}

const ALERT_COLUMNS: &[&str] = &[
    "id",
    "triggeredAt",
    "severity",
    "status",
    "title",
    "message",
    "value",
    "deviceId",
    "hostname",
    "ruleId",
    "acknowledgedAt",
    "acknowledgedBy",
    "resolvedAt",
    "resolvedBy",
];

const AUDIT_COLUMNS: &[&str] = &[
    "id",
    "createdAt",
    "actorType",
    "actorId",
    "action",
    "resourceType",
    "resourceId",
    "result",
    "errorMessage",
    "requestId",
    "details",
];

#[derive(sqlx::FromRow)]
struct PatchStatusRow {
    id: DeviceId,
    hostname: String,
    site: String,
    status: String,
    os_family: String,
    manager: Option<String>,
    scanned_at: Option<Timestamp>,
    patch_count: Option<i64>,
    security_count: Option<i64>,
    reboot_required: Option<bool>,
    error: Option<String>,
}

const PATCH_COLUMNS: &[&str] = &[
    "deviceId",
    "hostname",
    "site",
    "deviceStatus",
    "osType",
    "packageManager",
    "scannedAt",
    "availableUpdates",
    "securityUpdates",
    "rebootRequired",
    "scanError",
];

#[derive(sqlx::FromRow)]
struct ComplianceRow {
    policy_id: Uuid,
    policy_name: String,
    device_id: DeviceId,
    hostname: String,
    site: String,
    status: String,
    evaluated_at: Timestamp,
    changed_at: Timestamp,
}

const COMPLIANCE_COLUMNS: &[&str] = &[
    "policyId",
    "policyName",
    "deviceId",
    "hostname",
    "site",
    "status",
    "evaluatedAt",
    "changedAt",
];

/// Appends the device filters (`status`, `osType`, `siteId`) of a report to a query whose
/// devices table is `d`.
fn device_filters(q: &mut crate::sql::Sql, filters: &ReportFilters) {
    if let Some(status) = filters.status {
        let p = q.arg(status.as_str());
        q.push(&format!(" AND d.status = {p}"));
    }
    if let Some(os) = filters.os_type {
        let p = q.arg(os.as_str());
        q.push(&format!(" AND d.os_family = {p}"));
    }
    if let Some(site) = filters.site_id {
        let p = q.arg(site);
        q.push(&format!(" AND d.site_id = {p}"));
    }
}

fn ts(t: Option<Timestamp>) -> Value {
    t.map_or(Value::Null, |t| Value::from(t.to_rfc3339()))
}

fn columns_of(kind: ReportKind) -> &'static [&'static str] {
    match kind {
        ReportKind::DeviceInventory => INVENTORY_COLUMNS,
        ReportKind::AlertHistory => ALERT_COLUMNS,
        ReportKind::AuditActivity => AUDIT_COLUMNS,
        ReportKind::PatchStatus => PATCH_COLUMNS,
        ReportKind::ComplianceStatus => COMPLIANCE_COLUMNS,
    }
}

impl crate::OrgReports<'_> {
    // ---- definitions ------------------------------------------------------------------------

    /// Creates a definition after checking its filters against its kind (and that a site it
    /// names is this organization's).
    pub async fn create_report(
        &self,
        new: NewReport,
        audit: AuditEvent,
    ) -> Result<ReportDefinition> {
        check_text("name", &new.name, crate::alerts::MAX_NAME_CHARS)?;
        check_definition(new.kind, &new.filters, new.description.as_deref())?;
        if let Some(site) = new.filters.site_id {
            self.whole().tenancy().get_site(site).await?;
        }
        self.whole()
            .check_room(
                "report_definitions",
                MAX_REPORTS_PER_ORG,
                "report definitions",
            )
            .await?;
        let now = self.store.clock.now();
        let id = Uuid::now_v7();
        let mut tx = Tx::begin_in(self).await?;
        sql(format!(
            "INSERT INTO report_definitions ({DEFINITION_COLUMNS}) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"
        ))
        .bind(id)
        .bind(self.org)
        .bind(new.name.as_str())
        .bind(new.description.as_deref())
        .bind(new.kind.as_str())
        .bind(new.format.as_str())
        .bind(Arg::json(&new.filters))
        .bind(new.created_by.as_str())
        .bind(now)
        .bind(now)
        .execute(&mut tx)
        .await
        .map_err(|e| e.conflict_as(|| format!("a report named {:?} exists", new.name)))?;
        let audit = audit.org(self.org).resource(id).details(json!({
            "name": new.name, "kind": new.kind, "format": new.format, "filters": new.filters,
        }));
        audit::insert(&mut tx, &audit, now).await?;
        tx.commit().await?;
        self.get_report(id).await
    }

    /// One definition of this organization.
    pub async fn get_report(&self, id: Uuid) -> Result<ReportDefinition> {
        sql(format!(
            "SELECT {DEFINITION_COLUMNS} FROM report_definitions WHERE id = $1 AND org_id = $2"
        ))
        .bind(id)
        .bind(self.org)
        .fetch_optional(self)
        .await?
        .ok_or(StoreError::NotFound("report"))
    }

    /// The organization's definitions, by name.
    pub async fn list_reports(&self) -> Result<Vec<ReportDefinition>> {
        sql(format!(
            "SELECT {DEFINITION_COLUMNS} FROM report_definitions WHERE org_id = $1 \
             ORDER BY name, id"
        ))
        .bind(self.org)
        .fetch_all(self)
        .await
    }

    /// Changes a definition; the audit record names the fields changed.
    pub async fn update_report(
        &self,
        id: Uuid,
        update: ReportUpdate,
        audit: AuditEvent,
    ) -> Result<ReportDefinition> {
        let current = self.get_report(id).await?;
        if let Some(name) = &update.name {
            check_text("name", name, crate::alerts::MAX_NAME_CHARS)?;
        }
        let kind = update.kind.unwrap_or(current.kind);
        let filters = update.filters.clone().unwrap_or(current.filters.clone());
        check_definition(kind, &filters, update.description.as_deref())?;
        if let Some(site) = update.filters.as_ref().and_then(|f| f.site_id) {
            self.whole().tenancy().get_site(site).await?;
        }
        let name = update.name.clone().unwrap_or(current.name.clone());
        let now = self.store.clock.now();
        let mut tx = Tx::begin_in(self).await?;
        let n = sql(
            "UPDATE report_definitions SET name = $1, description = $2, kind = $3, format = $4, \
             filters = $5, updated_at = $6 WHERE id = $7 AND org_id = $8",
        )
        .bind(name.as_str())
        .bind(
            update
                .description
                .as_deref()
                .or(current.description.as_deref()),
        )
        .bind(kind.as_str())
        .bind(update.format.unwrap_or(current.format).as_str())
        .bind(Arg::json(&filters))
        .bind(now)
        .bind(id)
        .bind(self.org)
        .execute(&mut tx)
        .await
        .map_err(|e| e.conflict_as(|| format!("a report named {name:?} exists")))?;
        if n == 0 {
            return Err(StoreError::NotFound("report"));
        }
        let changed = audit::changed_fields([
            ("name", update.name.is_some()),
            ("description", update.description.is_some()),
            ("kind", update.kind.is_some()),
            ("format", update.format.is_some()),
            ("filters", update.filters.is_some()),
        ]);
        let audit = audit
            .org(self.org)
            .resource(id)
            .details(json!({ "changed": changed, "filters": filters }));
        audit::insert(&mut tx, &audit, now).await?;
        tx.commit().await?;
        self.get_report(id).await
    }

    /// Deletes a definition; its runs stay in the history, naming it.
    pub async fn delete_report(&self, id: Uuid, audit: AuditEvent) -> Result<ReportDefinition> {
        let current = self.get_report(id).await?;
        let now = self.store.clock.now();
        let mut tx = Tx::begin_in(self).await?;
        audit::delete_row(&mut tx, self.org, "report_definitions", id, "report").await?;
        let audit = audit
            .org(self.org)
            .resource(id)
            .details(json!({ "name": current.name }));
        audit::insert(&mut tx, &audit, now).await?;
        tx.commit().await?;
        Ok(current)
    }

    // ---- runs -------------------------------------------------------------------------------

    /// Generates a report now: records the run (audited), streams the rows into stored chunks
    /// (up to [`MAX_REPORT_ROWS`] and [`MAX_REPORT_BYTES`]), and marks it completed (or failed,
    /// keeping no output, and returns the error). Then deletes the requester's runs beyond
    /// their newest [`MAX_RUNS_PER_REQUESTER`] and the organization's beyond [`MAX_RUNS_KEPT`].
    pub async fn generate_report<'r>(
        &self,
        req: ReportRequest,
        requester: impl Into<Requester<'r>>,
        audit: AuditEvent,
    ) -> Result<ReportRun> {
        self.generate_report_within(req, requester, audit, ReportCaps::default())
            .await
    }

    /// [`OrgReports::generate_report`](crate::OrgReports::generate_report) with other caps (tests reach them with a few rows).
    pub async fn generate_report_within<'r>(
        &self,
        req: ReportRequest,
        requester: impl Into<Requester<'r>>,
        audit: AuditEvent,
        caps: ReportCaps,
    ) -> Result<ReportRun> {
        let requester = requester.into();
        check_text("name", &req.name, crate::alerts::MAX_NAME_CHARS)?;
        check_definition(req.kind, &req.filters, None)?;
        if let Some(site) = req.filters.site_id {
            self.whole().tenancy().get_site(site).await?;
        }
        let now = self.store.clock.now();
        let id = Uuid::now_v7();
        let mut tx = Tx::begin_in(self).await?;
        sql(format!(
            "INSERT INTO report_runs ({RUN_COLUMNS}, requester_user_id) VALUES ($1, $2, $3, $4, \
             $5, $6, $7, $8, 0, 0, 0, NULL, $9, $10, NULL, FALSE, $11)"
        ))
        .bind(id)
        .bind(self.org)
        .bind(req.definition_id)
        .bind(req.name.as_str())
        .bind(req.kind.as_str())
        .bind(req.format.as_str())
        .bind(Arg::json(&req.filters))
        .bind(ReportStatus::Running.as_str())
        .bind(requester.by)
        .bind(now)
        .bind(requester.person.map(|p| p.0))
        .execute(&mut tx)
        .await?;
        let audit = audit.org(self.org).resource(id).details(json!({
            "definitionId": req.definition_id, "name": req.name, "kind": req.kind,
            "format": req.format, "filters": req.filters,
        }));
        audit::insert(&mut tx, &audit, now).await?;
        tx.commit().await?;

        let title = format!(
            "{} - {} - {} UTC",
            req.name,
            req.kind,
            now.format("%Y-%m-%d %H:%M")
        );
        let mut out = Output::new(
            id,
            req.format,
            columns_of(req.kind),
            &title,
            &self.store.pdf_font,
        );
        out.caps = caps;
        let written = match self.write_rows(&req, now, &mut out).await {
            Ok(()) => {
                out.finish();
                self.flush_chunk(&mut out, true).await
            }
            Err(e) => Err(e),
        };
        let finished = self.store.clock.now();
        match written {
            Ok(()) => {
                sql(
                    "UPDATE report_runs SET status = $1, row_count = $2, byte_count = $3, \
                     chunk_count = $4, finished_at = $5, truncated = $6 \
                     WHERE id = $7 AND org_id = $8",
                )
                .bind(ReportStatus::Completed.as_str())
                .bind(out.rows)
                .bind(out.bytes)
                .bind(out.seq)
                .bind(finished)
                .bind(out.truncated)
                .bind(id)
                .bind(self.org)
                .execute(self)
                .await?;
            }
            Err(e) => {
                // Best effort: the error that stopped the run is the one to report.
                let _ = sql("DELETE FROM report_chunks WHERE run_id = $1 AND org_id = $2")
                    .bind(id)
                    .bind(self.org)
                    .execute(self)
                    .await;
                let _ = sql(
                    "UPDATE report_runs SET status = $1, error = $2, finished_at = $3 \
                             WHERE id = $4 AND org_id = $5",
                )
                .bind(ReportStatus::Failed.as_str())
                .bind(e.to_string())
                .bind(finished)
                .bind(id)
                .bind(self.org)
                .execute(self)
                .await;
                return Err(e);
            }
        }
        self.prune_report_runs(requester).await?;
        self.get_report_run(id).await
    }

    /// Keeps `requester`'s newest [`MAX_RUNS_PER_REQUESTER`] runs (the person's, over all their
    /// credentials; else the credential's), then the organization's newest [`MAX_RUNS_KEPT`]
    /// (their chunks go with them).
    async fn prune_report_runs(&self, requester: Requester<'_>) -> Result<()> {
        let mut theirs = match requester.person {
            Some(person) => sql("SELECT id FROM report_runs WHERE org_id = $1 \
                 AND requester_user_id = $2")
            .bind(self.org)
            .bind(person.0),
            None => sql("SELECT id FROM report_runs WHERE org_id = $1 \
                 AND requester_user_id IS NULL AND requested_by = $2")
            .bind(self.org)
            .bind(requester.by),
        };
        let p = theirs.arg(MAX_RUNS_PER_REQUESTER);
        theirs.push(&format!(
            " ORDER BY started_at DESC, id DESC LIMIT 1000 OFFSET {p}"
        ));
        // Built now, run after the requester's old runs are gone.
        let everyone = sql("SELECT id FROM report_runs WHERE org_id = $1 \
             ORDER BY started_at DESC, id DESC LIMIT 1000 OFFSET $2")
        .bind(self.org)
        .bind(MAX_RUNS_KEPT);
        for query in [theirs, everyone] {
            let old: Vec<(Uuid,)> = query.fetch_all(self).await?;
            for (run,) in old {
                sql("DELETE FROM report_runs WHERE id = $1 AND org_id = $2")
                    .bind(run)
                    .bind(self.org)
                    .execute(self)
                    .await?;
            }
        }
        Ok(())
    }

    /// Stores the buffered output as the next chunk once it holds [`CHUNK_BYTES`] (or, with
    /// `force`, whatever it holds).
    ///
    /// A chunk holds at most [`CHUNK_BYTES`]: what a row or a format's ending wrote beyond
    /// (a PDF's cross-reference table grows with its pages) goes on into the next.
    async fn flush_chunk(&self, out: &mut Output, force: bool) -> Result<()> {
        while !out.buf.is_empty() && (force || out.buf.len() >= CHUNK_BYTES) {
            let data = if out.buf.len() > CHUNK_BYTES {
                let rest = out.buf.split_off(CHUNK_BYTES);
                std::mem::replace(&mut out.buf, rest)
            } else {
                std::mem::replace(&mut out.buf, Vec::with_capacity(CHUNK_BYTES + 4096))
            };
            let len = data.len() as i64;
            sql("INSERT INTO report_chunks (run_id, org_id, seq, data) VALUES ($1, $2, $3, $4)")
                .bind(out.run)
                .bind(self.org)
                .bind(out.seq)
                .bind(data)
                .execute(self)
                .await?;
            out.seq += 1;
            out.bytes += len;
        }
        Ok(())
    }

    /// The page of an alert-history report after `after`, in `(triggered_at, id)` order on
    /// `alerts_org_time`.
    fn alert_page(
        &self,
        since: Timestamp,
        severity: Option<breeze_core::Severity>,
        after: Option<(Timestamp, Uuid)>,
    ) -> Sql {
        let mut q = sql(
            "SELECT a.id, a.triggered_at, a.severity, a.status, a.title, a.message, \
             a.value, a.device_id, d.hostname, a.rule_id, a.acknowledged_at, \
             a.acknowledged_by, a.resolved_at, a.resolved_by FROM alerts a \
             JOIN devices d ON d.id = a.device_id AND d.org_id = a.org_id \
             WHERE a.org_id = $1",
        )
        .bind(self.org);
        // One lower bound only, the cursor's when resuming: given two, SQLite may start the
        // index range at the other (the window's start) and read every earlier row again.
        if after.is_none() {
            let p = q.arg(since);
            q.push(&format!(" AND a.triggered_at >= {p}"));
        }
        if let Some(severity) = severity {
            let p = q.arg(severity.as_str());
            q.push(&format!(" AND a.severity = {p}"));
        }
        if let Some((t, id)) = after {
            q.push_keyset("a.triggered_at", t, "a.id", id, false);
        }
        let l = q.arg(REPORT_PAGE);
        q.push(&format!(" ORDER BY a.triggered_at, a.id LIMIT {l}"));
        q
    }

    /// The page of an audit-activity report after `after`, in `(created_at, id)` order on
    /// `audit_log_org_time`.
    fn audit_page(
        &self,
        since: Timestamp,
        now: Timestamp,
        after: Option<(Timestamp, Uuid)>,
    ) -> Sql {
        let mut q = sql(concat!(
            "SELECT ",
            audit_columns!(),
            " FROM audit_log WHERE org_id = $1 AND created_at <= $2"
        ))
        .bind(self.org)
        .bind(now);
        // One lower bound only, the cursor's when resuming (see `alert_page`).
        if after.is_none() {
            let p = q.arg(since);
            q.push(&format!(" AND created_at >= {p}"));
        }
        if let Some((t, id)) = after {
            q.push_keyset("created_at", t, "id", id, false);
        }
        let l = q.arg(REPORT_PAGE);
        q.push(&format!(" ORDER BY created_at, id LIMIT {l}"));
        q
    }

    /// The plans of a later page of the alert-history and audit-activity reports (SQLite's
    /// `EXPLAIN QUERY PLAN`, PostgreSQL's `EXPLAIN` with sequential scans discouraged, as a
    /// large table would): what a test reads to hold each page to an index in its order.
    #[cfg(feature = "testing")]
    pub async fn explain_report_pages(&self) -> Result<Vec<(ReportKind, String)>> {
        let now = self.store.clock.now();
        let since = now - chrono::Duration::hours(24);
        let after = Some((now - chrono::Duration::hours(1), Uuid::nil()));
        let mut plans = Vec::new();
        for (kind, q) in [
            (
                ReportKind::AlertHistory,
                self.alert_page(since, None, after),
            ),
            (
                ReportKind::AuditActivity,
                self.audit_page(since, now, after),
            ),
        ] {
            plans.push((kind, q.explain(self).await?));
        }
        Ok(plans)
    }

    /// Reads the report's rows page by page into `out`.
    async fn write_rows(
        &self,
        req: &ReportRequest,
        now: Timestamp,
        out: &mut Output,
    ) -> Result<()> {
        let since = now - chrono::Duration::hours(i64::from(req.filters.hours()));
        let columns = columns_of(req.kind);
        match req.kind {
            ReportKind::DeviceInventory => {
                let mut after: Option<DeviceId> = None;
                loop {
                    let mut q = sql(
                        "SELECT d.id, d.hostname, s.name AS site, d.status, d.os_family, \
                         d.os_name, d.os_version, d.agent_version, d.last_seen_at, d.tags, \
                         d.created_at FROM devices d \
                         JOIN sites s ON s.id = d.site_id AND s.org_id = d.org_id \
                         WHERE d.org_id = $1",
                    )
                    .bind(self.org);
                    device_filters(&mut q, &req.filters);
                    if let Some(id) = after {
                        let p = q.arg(id);
                        q.push(&format!(" AND d.id > {p}"));
                    }
                    let l = q.arg(REPORT_PAGE);
                    q.push(&format!(" ORDER BY d.id LIMIT {l}"));
                    let rows: Vec<InventoryRow> = q.fetch_all(self).await?;
                    let full = rows.len() as i64 == REPORT_PAGE;
                    for r in rows {
                        if out.at_cap(columns) {
                            return Ok(());
                        }
                        after = Some(r.id);
                        out.row(
                            columns,
                            vec![
                                Value::from(r.id.to_string()),
                                Value::from(r.hostname),
                                Value::from(r.site),
                                Value::from(r.status),
                                Value::from(r.os_family),
                                Value::from(r.os_name),
                                Value::from(r.os_version),
                                r.agent_version.map_or(Value::Null, Value::from),
                                ts(r.last_seen_at),
                                Value::from(r.tags.0.join(";")),
                                ts(Some(r.created_at)),
                            ],
                        );
                        self.flush_chunk(out, false).await?;
                    }
                    if !full {
                        return Ok(());
                    }
                }
            }
            ReportKind::AlertHistory => {
                let mut after: Option<(Timestamp, Uuid)> = None;
                loop {
                    let q = self.alert_page(since, req.filters.severity, after);
                    let rows: Vec<AlertRow> = q.fetch_all(self).await?;
                    let full = rows.len() as i64 == REPORT_PAGE;
                    for r in rows {
                        if out.at_cap(columns) {
                            return Ok(());
                        }
                        after = Some((r.triggered_at, r.id));
                        out.row(
                            columns,
                            vec![
                                Value::from(r.id.to_string()),
                                ts(Some(r.triggered_at)),
                                Value::from(r.severity),
                                Value::from(r.status),
                                Value::from(r.title),
                                Value::from(r.message),
                                r.value.map_or(Value::Null, Value::from),
                                Value::from(r.device_id.to_string()),
                                Value::from(r.hostname),
                                Value::from(r.rule_id.to_string()),
                                ts(r.acknowledged_at),
                                r.acknowledged_by.map_or(Value::Null, Value::from),
                                ts(r.resolved_at),
                                r.resolved_by.map_or(Value::Null, Value::from),
                            ],
                        );
                        self.flush_chunk(out, false).await?;
                    }
                    if !full {
                        return Ok(());
                    }
                }
            }
            ReportKind::PatchStatus => {
                let mut after: Option<DeviceId> = None;
                loop {
                    let mut q = sql(
                        "SELECT d.id, d.hostname, s.name AS site, d.status, d.os_family, \
                         ps.manager, ps.scanned_at, ps.patch_count, ps.security_count, \
                         ps.reboot_required, ps.error FROM devices d \
                         JOIN sites s ON s.id = d.site_id AND s.org_id = d.org_id \
                         LEFT JOIN patch_scans ps ON ps.device_id = d.id AND ps.org_id = d.org_id \
                         WHERE d.org_id = $1",
                    )
                    .bind(self.org);
                    device_filters(&mut q, &req.filters);
                    if let Some(id) = after {
                        let p = q.arg(id);
                        q.push(&format!(" AND d.id > {p}"));
                    }
                    let l = q.arg(REPORT_PAGE);
                    q.push(&format!(" ORDER BY d.id LIMIT {l}"));
                    let rows: Vec<PatchStatusRow> = q.fetch_all(self).await?;
                    let full = rows.len() as i64 == REPORT_PAGE;
                    for r in rows {
                        after = Some(r.id);
                        let scanned = r.scanned_at.is_some();
                        let count = |n: Option<i64>| {
                            if scanned {
                                Value::from(n.unwrap_or(0))
                            } else {
                                Value::Null
                            }
                        };
                        out.row(
                            columns,
                            vec![
                                Value::from(r.id.to_string()),
                                Value::from(r.hostname),
                                Value::from(r.site),
                                Value::from(r.status),
                                Value::from(r.os_family),
                                r.manager.map_or(Value::Null, Value::from),
                                ts(r.scanned_at),
                                count(r.patch_count),
                                count(r.security_count),
                                r.reboot_required
                                    .filter(|_| scanned)
                                    .map_or(Value::Null, Value::from),
                                r.error.map_or(Value::Null, Value::from),
                            ],
                        );
                        self.flush_chunk(out, false).await?;
                    }
                    if !full {
                        return Ok(());
                    }
                }
            }
            ReportKind::ComplianceStatus => {
                let mut after: Option<(Uuid, DeviceId)> = None;
                loop {
                    let mut q = sql(
                        "SELECT cs.policy_id, cp.name AS policy_name, d.id AS device_id, \
                         d.hostname, s.name AS site, cs.status, cs.evaluated_at, cs.changed_at \
                         FROM compliance_status cs \
                         JOIN compliance_policies cp ON cp.id = cs.policy_id AND cp.org_id = cs.org_id \
                         JOIN devices d ON d.id = cs.device_id AND d.org_id = cs.org_id \
                         JOIN sites s ON s.id = d.site_id AND s.org_id = d.org_id \
                         WHERE cs.org_id = $1",
                    )
                    .bind(self.org);
                    device_filters(&mut q, &req.filters);
                    if let Some((policy, device)) = after {
                        let p = q.arg(policy);
                        let d = q.arg(device);
                        q.push(&format!(
                            " AND cs.policy_id >= {p} AND (cs.policy_id > {p} OR cs.device_id > {d})"
                        ));
                    }
                    let l = q.arg(REPORT_PAGE);
                    q.push(&format!(" ORDER BY cs.policy_id, cs.device_id LIMIT {l}"));
                    let rows: Vec<ComplianceRow> = q.fetch_all(self).await?;
                    let full = rows.len() as i64 == REPORT_PAGE;
                    for r in rows {
                        after = Some((r.policy_id, r.device_id));
                        out.row(
                            columns,
                            vec![
                                Value::from(r.policy_id.to_string()),
                                Value::from(r.policy_name),
                                Value::from(r.device_id.to_string()),
                                Value::from(r.hostname),
                                Value::from(r.site),
                                Value::from(r.status),
                                ts(Some(r.evaluated_at)),
                                ts(Some(r.changed_at)),
                            ],
                        );
                        self.flush_chunk(out, false).await?;
                    }
                    if !full {
                        return Ok(());
                    }
                }
            }
            ReportKind::AuditActivity => {
                // Records still in the audit journal are part of the log.
                self.store.flush_audit().await;
                let mut after: Option<(Timestamp, Uuid)> = None;
                loop {
                    let q = self.audit_page(since, now, after);
                    let rows: Vec<AuditRow> = q.fetch_all(self).await?;
                    let full = rows.len() as i64 == REPORT_PAGE;
                    for row in rows {
                        if out.at_cap(columns) {
                            return Ok(());
                        }
                        let r = AuditRecord::try_from(row)?;
                        after = Some((r.created_at, r.id.0));
                        let e = r.event;
                        out.row(
                            columns,
                            vec![
                                Value::from(r.id.to_string()),
                                ts(Some(r.created_at)),
                                Value::from(e.actor.kind.as_str()),
                                Value::from(e.actor.id),
                                Value::from(e.action),
                                Value::from(e.resource_type),
                                e.resource_id.map_or(Value::Null, Value::from),
                                Value::from(e.result.as_str()),
                                e.error_message.map_or(Value::Null, Value::from),
                                e.request_id.map_or(Value::Null, Value::from),
                                e.details,
                            ],
                        );
                        self.flush_chunk(out, false).await?;
                    }
                    if !full {
                        return Ok(());
                    }
                }
            }
        }
    }

    /// One run of this organization.
    pub async fn get_report_run(&self, id: Uuid) -> Result<ReportRun> {
        sql(format!(
            "SELECT {RUN_COLUMNS} FROM report_runs WHERE id = $1 AND org_id = $2"
        ))
        .bind(id)
        .bind(self.org)
        .fetch_optional(self)
        .await?
        .ok_or(StoreError::NotFound("report run"))
    }

    /// The newest runs (of one definition, or all), at most `limit` (1 to 100).
    pub async fn report_runs(
        &self,
        definition: Option<Uuid>,
        limit: u32,
    ) -> Result<Vec<ReportRun>> {
        let mut q = sql(format!(
            "SELECT {RUN_COLUMNS} FROM report_runs WHERE org_id = $1"
        ))
        .bind(self.org);
        if let Some(d) = definition {
            let p = q.arg(d);
            q.push(&format!(" AND definition_id = {p}"));
        }
        let l = q.arg(i64::from(limit.clamp(1, 100)));
        q.push(&format!(" ORDER BY started_at DESC, id DESC LIMIT {l}"));
        q.fetch_all(self).await
    }

    /// The `seq`th chunk of a run's output (`None` past the last). Read one at a time so a
    /// download holds one chunk in memory.
    pub async fn report_chunk(&self, run: Uuid, seq: i64) -> Result<Option<Vec<u8>>> {
        Ok(
            sql("SELECT data FROM report_chunks WHERE run_id = $1 AND org_id = $2 AND seq = $3")
                .bind(run)
                .bind(self.org)
                .bind(seq)
                .fetch_optional::<(Vec<u8>,)>(self)
                .await?
                .map(|(d,)| d),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn csv(text: &str) -> String {
        let mut buf = Vec::new();
        csv_field(&mut buf, text, true);
        String::from_utf8(buf).unwrap_or_default()
    }

    #[test]
    fn csv_fields_are_quoted_and_never_formulas() {
        assert_eq!(csv("web-01"), "web-01");
        assert_eq!(csv("a,b"), "\"a,b\"");
        assert_eq!(csv("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(csv("two\nlines"), "\"two\nlines\"");
        assert_eq!(csv("=HYPERLINK(\"x\")"), "\"'=HYPERLINK(\"\"x\"\")\"");
        assert_eq!(csv("+1"), "\"'+1\"");
        assert_eq!(csv("-1"), "\"'-1\"");
        assert_eq!(csv("@SUM(A1)"), "\"'@SUM(A1)\"");
        let mut number = Vec::new();
        csv_field(&mut number, "-1.5", false);
        assert_eq!(number, b"-1.5", "numbers are written as they are");
    }
}
