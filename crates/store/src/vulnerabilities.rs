//! Vulnerability exposure: OSV advisories, and which devices they affect.
//!
//! Advisories are reference data, not an organization's: those the operator loads
//! ([`Store::import_advisories`]: the CLI, the scheduled refresh) have the origin `""` and every
//! organization sees them; one uploaded through the tool
//! ([`crate::OrgVulnerabilities::import_advisory`]) has its organization's id as origin and only
//! that organization sees it, so no tenant can plant an advisory in another's view. Each record
//! is stored whole, with one `advisory_packages` row per (release, package) it names holding
//! just those affected entries: a device's packages find their candidates by index.
//!
//! Exposure is stored (`device_vulnerabilities`, organization-scoped) and kept current
//! incrementally, never computed per question:
//!
//! - when a device's inventory is stored, that device alone is recomputed
//!   ([`crate::OrgVulnerabilities::recompute_device`]): one lookup of its packages' candidates;
//! - when advisories are imported, only the records that changed (new, or a newer `modified`)
//!   are matched, and only against devices on a release they name (or named before), from
//!   the records in memory, a batch of inventories at a time.
//!
//! Matching is by the installed (binary) package's name and by its source package's, which
//! agents report where it differs (`libssl3` from `openssl`): Debian and Ubuntu advisories name
//! source packages. A finding names the installed package; its installed version is compared
//! with the advisory's ranges. An inventory from an agent that reports no sources matches by
//! binary names alone.

use std::collections::{HashMap, HashSet};

use breeze_core::{
    DeviceId, OrgId, Timestamp,
    advisory::{OsvAffected, OsvRecord, device_release, entries_affect, release_key},
    pkgversion::VersionOrder,
};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::{
    Result, Store, StoreError, audit,
    sql::{Arg, Tx, sql},
};

/// The origin of advisories the operator loaded, which every organization sees.
pub const OPERATOR_ORIGIN: &str = "";

/// Most rejected records an import names (the count covers them all).
const MAX_REJECTIONS_NAMED: usize = 20;

/// Devices whose inventories are read and matched per transaction when an import recomputes.
const DEVICE_BATCH: usize = 200;

/// What an import did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ImportOutcome {
    /// Records not loaded before.
    pub added: u64,
    /// Records replaced by a newer `modified`.
    pub replaced: u64,
    /// Records already loaded with the same or a newer `modified` (nothing written).
    pub unchanged: u64,
    /// Records refused, counted; the first few named with the reason in `rejections`.
    pub rejected: u64,
    pub rejections: Vec<String>,
    /// Devices whose exposure was recomputed.
    pub devices_recomputed: u64,
    /// Exposure rows (device, advisory, package) written by the recompute.
    pub findings: u64,
}

impl ImportOutcome {
    fn reject(&mut self, why: String) {
        self.rejected += 1;
        if self.rejections.len() < MAX_REJECTIONS_NAMED {
            self.rejections.push(why);
        }
    }

    fn merge(&mut self, other: ImportOutcome) {
        self.added += other.added;
        self.replaced += other.replaced;
        self.unchanged += other.unchanged;
        self.rejected += other.rejected;
        for r in other.rejections {
            if self.rejections.len() < MAX_REJECTIONS_NAMED {
                self.rejections.push(r);
            }
        }
        self.devices_recomputed += other.devices_recomputed;
        self.findings += other.findings;
    }
}

/// An advisory as listed.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
#[serde(rename_all = "camelCase")]
pub struct AdvisoryRow {
    pub id: String,
    pub summary: String,
    /// `critical`, `high`, `medium`, `low` or `unknown`.
    pub severity: String,
    pub cvss_score: Option<f64>,
    pub cvss_vector: Option<String>,
    /// The CVE ids, space-separated as stored (see [`AdvisoryRow::cve_list`]).
    #[serde(skip)]
    pub cves: String,
    pub published: Option<Timestamp>,
    pub modified: Timestamp,
    /// `operator` (loaded for every organization) or `organization` (uploaded by this one).
    #[sqlx(skip)]
    pub loaded_by: String,
    #[serde(skip)]
    pub origin: String,
}

impl AdvisoryRow {
    /// The CVE ids the advisory is about.
    pub fn cve_list(&self) -> Vec<String> {
        self.cves.split_whitespace().map(str::to_owned).collect()
    }

    fn finish(mut self) -> AdvisoryRow {
        self.loaded_by = if self.origin == OPERATOR_ORIGIN {
            "operator".into()
        } else {
            "organization".into()
        };
        self
    }
}

const ADVISORY_COLUMNS: &str = "a.id, a.summary, a.severity, a.cvss_score, a.cvss_vector, a.cves, \
    a.published, a.modified, a.origin";

/// One advisory with its whole record.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AdvisoryDetail {
    #[serde(flatten)]
    pub advisory: AdvisoryRow,
    pub cves: Vec<String>,
    pub record: OsvRecord,
}

/// Exposure counted for one severity.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SeverityCount {
    pub severity: String,
    /// Devices with at least one advisory of this severity.
    pub devices: i64,
    /// Advisories of this severity affecting at least one device.
    pub advisories: i64,
    /// (device, advisory, package) findings.
    pub findings: i64,
}

/// The organization's exposure summed up.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ExposureSummary {
    /// Most severe first; severities without findings are left out.
    pub by_severity: Vec<SeverityCount>,
    pub devices_exposed: i64,
    pub advisories: i64,
    pub findings: i64,
    /// Findings the advisory names a fixed version for.
    pub fixable_findings: i64,
}

/// An advisory affecting the organization, with how many devices it affects.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ExposedAdvisory {
    #[serde(flatten)]
    pub advisory: AdvisoryRow,
    pub cves: Vec<String>,
    pub devices: i64,
    /// Devices where a fixed version is named.
    pub fixable_devices: i64,
}

/// One finding: an advisory affecting one installed package of one device.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
#[serde(rename_all = "camelCase")]
pub struct ExposureFinding {
    pub device_id: DeviceId,
    pub hostname: String,
    pub advisory_id: String,
    pub package: String,
    pub installed: String,
    /// The lowest version that fixes it, when the advisory names one.
    pub fixed_in: Option<String>,
    pub severity: String,
    pub cvss_score: Option<f64>,
    pub summary: String,
    #[serde(skip)]
    pub cves: String,
    /// When the finding was first recorded.
    pub found_at: Timestamp,
}

impl ExposureFinding {
    /// The CVE ids of the finding's advisory.
    pub fn cve_list(&self) -> Vec<String> {
        self.cves.split_whitespace().map(str::to_owned).collect()
    }
}

const FINDING_COLUMNS: &str = "v.device_id, d.hostname, v.advisory_id, v.package, v.installed, \
    v.fixed_in, v.severity, v.cvss_score, a.summary, a.cves, v.found_at";

/// Orders severities most severe first in SQL (`column` is the severity column).
fn severity_rank(column: &str) -> String {
    format!(
        "CASE {column} WHEN 'critical' THEN 4 WHEN 'high' THEN 3 \
         WHEN 'medium' THEN 2 WHEN 'low' THEN 1 ELSE 0 END"
    )
}

/// Severities most severe first.
pub const SEVERITIES: [&str; 5] = ["critical", "high", "medium", "low", "unknown"];

/// The severity of a record as stored.
fn severity_text(r: &OsvRecord) -> &'static str {
    use breeze_core::advisory::Severity;
    match r.severity() {
        Severity::Critical => "critical",
        Severity::High => "high",
        Severity::Medium => "medium",
        Severity::Low => "low",
        Severity::Unknown => "unknown",
    }
}

/// A record's affected entries grouped by the (release, package) they name; entries for
/// ecosystems Breeze does not match are left out.
fn keyed_entries(r: &OsvRecord) -> HashMap<(String, String), Vec<OsvAffected>> {
    let mut out: HashMap<(String, String), Vec<OsvAffected>> = HashMap::new();
    for a in &r.affected {
        let Some(p) = &a.package else { continue };
        let Some(release) = release_key(&p.ecosystem) else {
            continue;
        };
        out.entry((release, p.name.clone()))
            .or_default()
            .push(a.clone());
    }
    out
}

fn parse_time(field: &str, id: &str, text: &str) -> std::result::Result<Timestamp, String> {
    chrono::DateTime::parse_from_rfc3339(text)
        .map(|t| t.with_timezone(&chrono::Utc))
        .map_err(|_| format!("{id}: {field} {text:?} is not an RFC 3339 time"))
}

/// A record checked for storing.
struct Checked {
    record: OsvRecord,
    modified: Timestamp,
    published: Option<Timestamp>,
}

fn check(record: OsvRecord) -> std::result::Result<Checked, String> {
    let id = record.id.trim().to_owned();
    if id.is_empty() || id.len() > 200 {
        return Err("id: must be 1 to 200 characters".into());
    }
    let modified = match record.modified.as_deref() {
        Some(m) => parse_time("modified", &id, m)?,
        None => return Err(format!("{id}: modified is missing")),
    };
    let published = record
        .published
        .as_deref()
        .map(|p| parse_time("published", &id, p))
        .transpose()?;
    Ok(Checked {
        record,
        modified,
        published,
    })
}

/// The candidate releases of a device: its release and, for a record naming no release, the
/// distribution (`Debian:12` and `Debian`).
fn candidate_releases(release: &str) -> [String; 2] {
    let base = release.split(':').next().unwrap_or(release);
    [release.to_owned(), base.to_owned()]
}

/// The packages of a stored inventory document, without parsing the rest.
#[derive(Deserialize)]
struct PackagesOnly {
    #[serde(default)]
    packages: Option<Vec<breeze_agent_proto::Package>>,
}

/// One exposure row to write.
struct NewExposure {
    origin: String,
    advisory: String,
    package: String,
    installed: String,
    fixed_in: Option<String>,
    severity: String,
    cvss: Option<f64>,
}

/// The entries of the records naming one (release, package): (record index, its entries).
type Keyed = HashMap<(String, String), Vec<(usize, Vec<OsvAffected>)>>;

/// Records changed by an import, indexed by (release, package) for matching.
struct ChangedIndex {
    /// (release, package) → (record index, its entries there).
    by_key: Keyed,
    records: Vec<(String, &'static str, Option<f64>)>,
}

impl ChangedIndex {
    fn new(records: &[OsvRecord]) -> ChangedIndex {
        let mut by_key: Keyed = HashMap::new();
        let mut meta = Vec::with_capacity(records.len());
        for (at, r) in records.iter().enumerate() {
            if r.withdrawn.is_none() {
                for (key, entries) in keyed_entries(r) {
                    by_key.entry(key).or_default().push((at, entries));
                }
            }
            meta.push((r.id.clone(), severity_text(r), r.cvss_score()));
        }
        ChangedIndex {
            by_key,
            records: meta,
        }
    }

    fn findings(
        &self,
        origin: &str,
        release: &str,
        packages: &[breeze_agent_proto::Package],
    ) -> Vec<NewExposure> {
        let Some(order) = VersionOrder::for_ecosystem(release) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for p in packages {
            let names = std::iter::once(&p.name).chain(p.source.as_ref());
            for (r, name) in names.flat_map(|n| candidate_releases(release).map(|r| (r, n))) {
                let Some(hits) = self.by_key.get(&(r, name.clone())) else {
                    continue;
                };
                for (at, entries) in hits {
                    if let Some(hit) = entries_affect(entries, order, &p.version) {
                        let (id, severity, cvss) = &self.records[*at];
                        out.push(NewExposure {
                            origin: origin.to_owned(),
                            advisory: id.clone(),
                            package: p.name.clone(),
                            installed: p.version.clone(),
                            fixed_in: hit.fixed_in,
                            severity: (*severity).to_owned(),
                            cvss: *cvss,
                        });
                    }
                }
            }
        }
        dedup_findings(out)
    }
}

/// One finding per (origin, advisory, package): a package listed twice, or a record naming
/// both the release and the bare distribution, keeps the lowest fix.
fn dedup_findings(mut out: Vec<NewExposure>) -> Vec<NewExposure> {
    out.sort_by(|a, b| {
        (&a.origin, &a.advisory, &a.package, a.fixed_in.is_none()).cmp(&(
            &b.origin,
            &b.advisory,
            &b.package,
            b.fixed_in.is_none(),
        ))
    });
    out.dedup_by(|a, b| a.origin == b.origin && a.advisory == b.advisory && a.package == b.package);
    out
}

/// Inserts `rows` for `device` in `org`, keeping the first-seen time of rows that were there.
async fn insert_findings(
    tx: &mut Tx,
    org: OrgId,
    device: DeviceId,
    rows: &[NewExposure],
    seen: &HashMap<(String, String, String), Timestamp>,
    now: Timestamp,
) -> Result<()> {
    for chunk in rows.chunks(300) {
        let mut q = sql(
            "INSERT INTO device_vulnerabilities (org_id, device_id, origin, advisory_id, package, \
             installed, fixed_in, severity, cvss_score, found_at) VALUES ",
        );
        for (i, f) in chunk.iter().enumerate() {
            if i > 0 {
                q.push(", ");
            }
            let found = seen
                .get(&(f.origin.clone(), f.advisory.clone(), f.package.clone()))
                .copied()
                .unwrap_or(now);
            q.push_row([
                Arg::from(org),
                Arg::from(device),
                Arg::from(f.origin.as_str()),
                Arg::from(f.advisory.as_str()),
                Arg::from(f.package.as_str()),
                Arg::from(f.installed.as_str()),
                Arg::from(f.fixed_in.as_deref()),
                Arg::from(f.severity.as_str()),
                Arg::from(f.cvss),
                Arg::from(found),
            ]);
        }
        q.execute(&mut *tx).await?;
    }
    Ok(())
}

impl Store {
    /// Imports advisories the operator loaded (every organization sees them): new records are
    /// added, a record with a newer `modified` replaces the stored one, the same or an older
    /// one changes nothing. Then the exposure of devices on the releases the changed records
    /// name is recomputed for those records alone. A record that cannot be stored is counted
    /// and named, and the rest are imported.
    pub async fn import_advisories(&self, records: Vec<OsvRecord>) -> Result<ImportOutcome> {
        let mut outcome = ImportOutcome::default();
        // Bounded memory for whole archives: the changed records of a slice are matched and
        // dropped before the next slice is read in.
        let mut records = records;
        while !records.is_empty() {
            let rest = records.split_off(records.len().min(20_000));
            let slice = std::mem::replace(&mut records, rest);
            outcome.merge(self.import_slice(OPERATOR_ORIGIN, None, slice).await?);
        }
        Ok(outcome)
    }

    /// Imports one slice for `origin`, recomputing `only_org`'s devices (or every
    /// organization's, for the operator's advisories).
    async fn import_slice(
        &self,
        origin: &str,
        only_org: Option<OrgId>,
        records: Vec<OsvRecord>,
    ) -> Result<ImportOutcome> {
        let mut outcome = ImportOutcome::default();
        let mut checked: Vec<Checked> = Vec::with_capacity(records.len());
        let mut ids = HashSet::new();
        for r in records {
            match check(r) {
                // The last copy of an id in one import wins, as importing them in turn would.
                Ok(c) => {
                    if !ids.insert(c.record.id.clone()) {
                        checked.retain(|k| k.record.id != c.record.id);
                    }
                    checked.push(c);
                }
                Err(why) => outcome.reject(why),
            }
        }
        // What is stored already, by id.
        let mut stored: HashMap<String, Timestamp> = HashMap::new();
        for chunk in checked.chunks(500) {
            let mut q = sql("SELECT id, modified FROM advisories WHERE origin = $1 AND id IN (");
            q = q.bind(origin);
            for (i, c) in chunk.iter().enumerate() {
                let at = q.arg(c.record.id.as_str());
                q.push(if i == 0 { "" } else { ", " });
                q.push(&at);
            }
            q.push(")");
            let rows: Vec<(String, Timestamp)> = q.fetch_all(self).await?;
            stored.extend(rows);
        }
        let mut changed: Vec<Checked> = Vec::new();
        let mut replaced_ids: Vec<String> = Vec::new();
        for c in checked {
            match stored.get(&c.record.id) {
                Some(m) if *m >= c.modified => outcome.unchanged += 1,
                Some(_) => {
                    outcome.replaced += 1;
                    replaced_ids.push(c.record.id.clone());
                    changed.push(c);
                }
                None => {
                    outcome.added += 1;
                    changed.push(c);
                }
            }
        }
        if changed.is_empty() {
            return Ok(outcome);
        }
        // The releases whose devices are recomputed: those the new records name, and those
        // the replaced copies named.
        let mut releases: HashSet<String> = HashSet::new();
        for chunk in replaced_ids.chunks(500) {
            let mut q = sql(
                "SELECT DISTINCT release FROM advisory_packages WHERE origin = $1 AND advisory_id IN (",
            );
            q = q.bind(origin);
            for (i, id) in chunk.iter().enumerate() {
                let at = q.arg(id.as_str());
                q.push(if i == 0 { "" } else { ", " });
                q.push(&at);
            }
            q.push(")");
            let rows: Vec<(String,)> = q.fetch_all(self).await?;
            releases.extend(rows.into_iter().map(|r| r.0));
        }
        let batch = Uuid::now_v7().to_string();
        let now = self.clock.now();
        for chunk in changed.chunks(200) {
            let mut tx = Tx::begin(&self.pool).await?;
            for c in chunk {
                let r = &c.record;
                sql("DELETE FROM advisory_packages WHERE origin = $1 AND advisory_id = $2")
                    .bind(origin)
                    .bind(r.id.as_str())
                    .execute(&mut tx)
                    .await?;
                let cves = r.cve_ids().join(" ");
                sql(
                    "INSERT INTO advisories (origin, id, modified, published, summary, severity, \
                     cvss_score, cvss_vector, cves, record, imported_at, batch) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) \
                     ON CONFLICT (origin, id) DO UPDATE SET modified = excluded.modified, \
                     published = excluded.published, summary = excluded.summary, \
                     severity = excluded.severity, cvss_score = excluded.cvss_score, \
                     cvss_vector = excluded.cvss_vector, cves = excluded.cves, \
                     record = excluded.record, imported_at = excluded.imported_at, \
                     batch = excluded.batch",
                )
                .bind(origin)
                .bind(r.id.as_str())
                .bind(c.modified)
                .bind(c.published)
                .bind(
                    r.summary
                        .clone()
                        .or_else(|| r.details.as_deref().map(|d| d.chars().take(200).collect()))
                        .unwrap_or_default(),
                )
                .bind(severity_text(r))
                .bind(r.cvss_score())
                .bind(r.cvss_vector())
                .bind(if cves.is_empty() {
                    String::new()
                } else {
                    format!(" {cves} ")
                })
                .bind(Arg::json(r))
                .bind(now)
                .bind(batch.as_str())
                .execute(&mut tx)
                .await?;
                let keyed = if r.withdrawn.is_some() {
                    HashMap::new()
                } else {
                    keyed_entries(r)
                };
                for ((release, package), entries) in keyed {
                    releases.insert(release.clone());
                    sql("INSERT INTO advisory_packages (release, package, origin, advisory_id, affected) \
                         VALUES ($1, $2, $3, $4, $5)")
                    .bind(release)
                    .bind(package)
                    .bind(origin)
                    .bind(r.id.as_str())
                    .bind(Arg::json(&entries))
                    .execute(&mut tx)
                    .await?;
                }
            }
            tx.commit().await?;
        }
        let records: Vec<OsvRecord> = changed.into_iter().map(|c| c.record).collect();
        let index = ChangedIndex::new(&records);
        drop(records);
        let (devices, findings) = self
            .recompute_for_import(origin, only_org, &batch, &releases, &index)
            .await?;
        outcome.devices_recomputed = devices;
        outcome.findings = findings;
        Ok(outcome)
    }

    /// Rewrites the exposure to the records of import `batch` for every device on one of
    /// `releases` (of `only_org`, or of every organization).
    async fn recompute_for_import(
        &self,
        origin: &str,
        only_org: Option<OrgId>,
        batch: &str,
        releases: &HashSet<String>,
        index: &ChangedIndex,
    ) -> Result<(u64, u64)> {
        if releases.is_empty() {
            return Ok((0, 0));
        }
        let mut q = sql("SELECT id, org_id, os_name, os_version FROM devices");
        if let Some(org) = only_org {
            let at = q.arg(org);
            q.push(&format!(" WHERE org_id = {at}"));
        }
        let devices: Vec<(DeviceId, OrgId, String, String)> = match only_org {
            Some(org) => q.fetch_all(&self.org(org)).await?,
            None => q.fetch_all(self).await?,
        };
        let wanted: Vec<(DeviceId, OrgId, String)> = devices
            .into_iter()
            .filter_map(|(id, org, name, version)| {
                let release = device_release(&name, &version)?;
                candidate_releases(&release)
                    .iter()
                    .any(|r| releases.contains(r))
                    .then_some((id, org, release))
            })
            .collect();
        let now = self.clock.now();
        let (mut recomputed, mut written) = (0u64, 0u64);
        for chunk in wanted.chunks(DEVICE_BATCH) {
            let mut q = sql("SELECT device_id, inventory FROM device_state WHERE device_id IN (");
            for (i, (id, _, _)) in chunk.iter().enumerate() {
                let at = q.arg(*id);
                q.push(if i == 0 { "" } else { ", " });
                q.push(&at);
            }
            q.push(")");
            let docs: Vec<(DeviceId, sqlx::types::Json<PackagesOnly>)> = match only_org {
                Some(org) => q.fetch_all(&self.org(org)).await?,
                None => q.fetch_all(self).await?,
            };
            let docs: HashMap<DeviceId, Vec<breeze_agent_proto::Package>> = docs
                .into_iter()
                .map(|(id, doc)| (id, doc.0.packages.unwrap_or_default()))
                .collect();
            // First-seen times of this chunk's rows for the batch's advisories.
            let mut q = sql(
                "SELECT v.device_id, v.origin, v.advisory_id, v.package, v.found_at \
                 FROM device_vulnerabilities v JOIN advisories a \
                 ON a.origin = v.origin AND a.id = v.advisory_id \
                 WHERE a.batch = $1 AND v.device_id IN (",
            );
            q = q.bind(batch);
            for (i, (id, _, _)) in chunk.iter().enumerate() {
                let at = q.arg(*id);
                q.push(if i == 0 { "" } else { ", " });
                q.push(&at);
            }
            q.push(")");
            let old: Vec<(DeviceId, String, String, String, Timestamp)> = match only_org {
                Some(org) => q.fetch_all(&self.org(org)).await?,
                None => q.fetch_all(self).await?,
            };
            let mut seen: HashMap<DeviceId, HashMap<(String, String, String), Timestamp>> =
                HashMap::new();
            for (d, o, a, p, t) in old {
                seen.entry(d).or_default().insert((o, a, p), t);
            }
            let mut tx = match only_org {
                Some(org) => Tx::begin_in(&self.org(org)).await?,
                None => Tx::begin(&self.pool).await?,
            };
            let empty = HashMap::new();
            for (device, org, release) in chunk {
                let packages = docs.get(device).map(Vec::as_slice).unwrap_or_default();
                let rows = index.findings(origin, release, packages);
                let device_seen = seen.get(device).unwrap_or(&empty);
                if !device_seen.is_empty() {
                    sql(
                        "DELETE FROM device_vulnerabilities WHERE device_id = $1 AND org_id = $2 \
                         AND origin = $3 AND advisory_id IN \
                         (SELECT id FROM advisories WHERE origin = $3 AND batch = $4)",
                    )
                    .bind(*device)
                    .bind(*org)
                    .bind(origin)
                    .bind(batch)
                    .execute(&mut tx)
                    .await?;
                }
                insert_findings(&mut tx, *org, *device, &rows, device_seen, now).await?;
                recomputed += 1;
                written += rows.len() as u64;
            }
            tx.commit().await?;
        }
        Ok((recomputed, written))
    }

    /// Recomputes a device's exposure after its inventory was stored; a failure is logged
    /// (the next report or import recomputes it again).
    pub(crate) async fn vulnerabilities_inventory_changed(&self, org: OrgId, device: DeviceId) {
        if let Err(e) = self
            .org(org)
            .vulnerabilities()
            .recompute_device(device)
            .await
        {
            tracing::warn!(device = %device, error = %e, "vulnerability recompute failed");
        }
    }
}

impl crate::OrgVulnerabilities<'_> {
    /// This organization's origin for advisories it uploads.
    fn own_origin(&self) -> String {
        self.org.0.to_string()
    }

    /// Imports one advisory uploaded by this organization (only it sees the record), audited,
    /// and recomputes its devices' exposure to it. Same id and `modified` as the stored copy
    /// changes nothing; a newer one replaces it.
    pub async fn import_advisory(
        &self,
        record: OsvRecord,
        audit_event: breeze_core::AuditEvent,
    ) -> Result<ImportOutcome> {
        let id = record.id.clone();
        // Refused with its reason, rather than counted as an import's rejection.
        check(record.clone()).map_err(StoreError::Invalid)?;
        let outcome = self
            .store
            .import_slice(&self.own_origin(), Some(self.org), vec![record])
            .await?;
        let mut tx = Tx::begin_in(self).await?;
        let event = audit_event
            .org(self.org)
            .details(serde_json::json!({ "advisoryId": id, "outcome": outcome }));
        audit::insert(&mut tx, &event, self.store.clock.now()).await?;
        tx.commit().await?;
        Ok(outcome)
    }

    /// Advisories this organization sees, by id order after `after`, whose id, CVE or summary
    /// contains `query` (case-insensitive) and that name `release` when given; at most `limit`
    /// (1–200).
    pub async fn list_advisories(
        &self,
        query: Option<&str>,
        severity: Option<&str>,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<AdvisoryRow>> {
        let mut q = sql(format!(
            "SELECT {ADVISORY_COLUMNS} FROM advisories a WHERE a.origin IN ('', $1)"
        ))
        .bind(self.own_origin());
        if let Some(text) = query.filter(|t| !t.trim().is_empty()) {
            let pattern = format!("%{}%", crate::sql::escape_like(&text.trim().to_lowercase()));
            let at = q.arg(pattern);
            q.push(&format!(
                " AND (LOWER(a.id) LIKE {at} ESCAPE '\\' OR LOWER(a.cves) LIKE {at} ESCAPE '\\' \
                 OR LOWER(a.summary) LIKE {at} ESCAPE '\\')"
            ));
        }
        if let Some(s) = severity {
            let at = q.arg(s);
            q.push(&format!(" AND a.severity = {at}"));
        }
        if let Some(after) = after {
            let at = q.arg(after);
            q.push(&format!(" AND a.id > {at}"));
        }
        let limit = q.arg(i64::from(limit.clamp(1, 200)));
        q.push(&format!(" ORDER BY a.id, a.origin LIMIT {limit}"));
        let rows: Vec<AdvisoryRow> = q.fetch_all(self).await?;
        Ok(rows.into_iter().map(AdvisoryRow::finish).collect())
    }

    /// One advisory this organization sees, with its record; this organization's own upload
    /// first when both exist.
    pub async fn get_advisory(&self, id: &str) -> Result<AdvisoryDetail> {
        #[derive(sqlx::FromRow)]
        struct Row {
            #[sqlx(flatten)]
            advisory: AdvisoryRow,
            #[sqlx(json)]
            record: OsvRecord,
        }
        let row: Option<Row> = sql(format!(
            "SELECT {ADVISORY_COLUMNS}, a.record FROM advisories a \
             WHERE a.id = $1 AND a.origin IN ('', $2) ORDER BY a.origin DESC LIMIT 1"
        ))
        .bind(id)
        .bind(self.own_origin())
        .fetch_optional(self)
        .await?;
        let row = row.ok_or(StoreError::NotFound("advisory"))?;
        let advisory = row.advisory.finish();
        Ok(AdvisoryDetail {
            cves: advisory.cve_list(),
            advisory,
            record: row.record,
        })
    }

    /// Recomputes one device's exposure from its latest inventory and the advisories this
    /// organization sees: one indexed lookup of its packages' candidates. Another
    /// organization's device is not found.
    pub async fn recompute_device(&self, device: DeviceId) -> Result<usize> {
        let (name, version): (String, String) =
            sql("SELECT os_name, os_version FROM devices WHERE id = $1 AND org_id = $2")
                .bind(device)
                .bind(self.org)
                .fetch_optional(self)
                .await?
                .ok_or(StoreError::NotFound("device"))?;
        let inventory = self.whole().agents().inventory(device).await?;
        let packages = inventory
            .as_deref()
            .and_then(|i| i.packages())
            .unwrap_or_default();
        let release = device_release(&name, &version);
        let mut rows: Vec<NewExposure> = Vec::new();
        if let (Some(release), false) = (&release, packages.is_empty())
            && let Some(order) = VersionOrder::for_ecosystem(release)
        {
            // Each installed package under its own name and its source package's.
            let by_name: HashMap<&str, Vec<&breeze_agent_proto::Package>> =
                packages.iter().fold(HashMap::new(), |mut m, p| {
                    m.entry(p.name.as_str()).or_default().push(p);
                    if let Some(source) = p.source.as_deref() {
                        m.entry(source).or_default().push(p);
                    }
                    m
                });
            let names: Vec<&str> = by_name.keys().copied().collect();
            let [rel, base] = candidate_releases(release);
            for chunk in names.chunks(500) {
                let mut q = sql(
                    "SELECT p.origin, p.advisory_id, p.package, p.affected, a.severity, a.cvss_score \
                     FROM advisory_packages p JOIN advisories a \
                     ON a.origin = p.origin AND a.id = p.advisory_id \
                     WHERE p.release IN ($1, $2) AND p.origin IN ('', $3) AND p.package IN (",
                )
                .bind(rel.as_str())
                .bind(base.as_str())
                .bind(self.own_origin());
                for (i, n) in chunk.iter().enumerate() {
                    let at = q.arg(*n);
                    q.push(if i == 0 { "" } else { ", " });
                    q.push(&at);
                }
                q.push(")");
                type Candidate = (
                    String,
                    String,
                    String,
                    sqlx::types::Json<Vec<OsvAffected>>,
                    String,
                    Option<f64>,
                );
                let candidates: Vec<Candidate> = q.fetch_all(self).await?;
                for (origin, advisory, package, entries, severity, cvss) in candidates {
                    for p in by_name.get(package.as_str()).into_iter().flatten() {
                        if let Some(hit) = entries_affect(entries.0.iter(), order, &p.version) {
                            rows.push(NewExposure {
                                origin: origin.clone(),
                                advisory: advisory.clone(),
                                package: p.name.clone(),
                                installed: p.version.clone(),
                                fixed_in: hit.fixed_in,
                                severity: severity.clone(),
                                cvss,
                            });
                        }
                    }
                }
            }
        }
        let rows = dedup_findings(rows);
        let old: Vec<(String, String, String, Timestamp)> = sql(
            "SELECT origin, advisory_id, package, found_at FROM device_vulnerabilities \
             WHERE device_id = $1 AND org_id = $2",
        )
        .bind(device)
        .bind(self.org)
        .fetch_all(self)
        .await?;
        let seen: HashMap<(String, String, String), Timestamp> =
            old.into_iter().map(|(o, a, p, t)| ((o, a, p), t)).collect();
        let mut tx = Tx::begin_in(self).await?;
        sql("DELETE FROM device_vulnerabilities WHERE device_id = $1 AND org_id = $2")
            .bind(device)
            .bind(self.org)
            .execute(&mut tx)
            .await?;
        insert_findings(
            &mut tx,
            self.org,
            device,
            &rows,
            &seen,
            self.store.clock.now(),
        )
        .await?;
        tx.commit().await?;
        Ok(rows.len())
    }

    /// The organization's exposure summed up by severity.
    pub async fn summary(&self) -> Result<ExposureSummary> {
        let rows: Vec<(String, i64, i64, i64)> =
            sql("SELECT v.severity, COUNT(DISTINCT v.device_id), \
             COUNT(DISTINCT v.origin || ' ' || v.advisory_id), COUNT(*) \
             FROM device_vulnerabilities v WHERE v.org_id = $1 GROUP BY v.severity")
            .bind(self.org)
            .fetch_all(self)
            .await?;
        let totals: (i64, i64, i64, i64) = sql(
            "SELECT COUNT(DISTINCT v.device_id), COUNT(DISTINCT v.origin || ' ' || v.advisory_id), \
             COUNT(*), COUNT(v.fixed_in) FROM device_vulnerabilities v WHERE v.org_id = $1",
        )
        .bind(self.org)
        .fetch_optional(self)
        .await?
        .unwrap_or_default();
        let mut by_severity: Vec<SeverityCount> = rows
            .into_iter()
            .map(|(severity, devices, advisories, findings)| SeverityCount {
                severity,
                devices,
                advisories,
                findings,
            })
            .collect();
        by_severity.sort_by_key(|c| {
            SEVERITIES
                .iter()
                .position(|s| *s == c.severity)
                .unwrap_or(SEVERITIES.len())
        });
        Ok(ExposureSummary {
            by_severity,
            devices_exposed: totals.0,
            advisories: totals.1,
            findings: totals.2,
            fixable_findings: totals.3,
        })
    }

    /// Advisories affecting this organization's devices, most severe first, then by the
    /// devices affected; of `severity` when given; `offset` rows skipped, at most `limit`
    /// (1–200).
    pub async fn exposed_advisories(
        &self,
        severity: Option<&str>,
        offset: u32,
        limit: u32,
    ) -> Result<Vec<ExposedAdvisory>> {
        #[derive(sqlx::FromRow)]
        struct Row {
            #[sqlx(flatten)]
            advisory: AdvisoryRow,
            devices: i64,
            fixable_devices: i64,
        }
        let mut q = sql(format!(
            "SELECT {ADVISORY_COLUMNS}, COUNT(DISTINCT v.device_id) AS devices, \
             COUNT(DISTINCT CASE WHEN v.fixed_in IS NOT NULL THEN v.device_id END) AS fixable_devices \
             FROM device_vulnerabilities v JOIN advisories a \
             ON a.origin = v.origin AND a.id = v.advisory_id WHERE v.org_id = $1"
        ))
        .bind(self.org);
        if let Some(s) = severity {
            let at = q.arg(s);
            q.push(&format!(" AND a.severity = {at}"));
        }
        let (limit, offset) = (
            q.arg(i64::from(limit.clamp(1, 200))),
            q.arg(i64::from(offset)),
        );
        q.push(&format!(
            " GROUP BY {ADVISORY_COLUMNS} ORDER BY {} DESC, devices DESC, a.id \
             LIMIT {limit} OFFSET {offset}",
            severity_rank("a.severity")
        ));
        let rows: Vec<Row> = q.fetch_all(self).await?;
        Ok(rows
            .into_iter()
            .map(|r| {
                let advisory = r.advisory.finish();
                ExposedAdvisory {
                    cves: advisory.cve_list(),
                    advisory,
                    devices: r.devices,
                    fixable_devices: r.fixable_devices,
                }
            })
            .collect())
    }

    /// The findings of the advisories named `id_or_cve` (an advisory id, or a CVE id any
    /// advisory names) on this organization's devices, by hostname; `NotFound` when this
    /// organization sees no such advisory. At most `limit` (1–1000).
    pub async fn findings_for(&self, id_or_cve: &str, limit: u32) -> Result<Vec<ExposureFinding>> {
        let key = id_or_cve.trim();
        let known: i64 = sql("SELECT COUNT(*) FROM advisories WHERE origin IN ('', $1) \
             AND (id = $2 OR cves LIKE $3 ESCAPE '\\')")
        .bind(self.own_origin())
        .bind(key)
        .bind(format!("% {} %", crate::sql::escape_like(key)))
        .fetch_scalar(self)
        .await?;
        if known == 0 {
            return Err(StoreError::NotFound("advisory"));
        }
        let limit = i64::from(limit.clamp(1, 1000));
        sql(format!(
            "SELECT {FINDING_COLUMNS} FROM device_vulnerabilities v \
             JOIN advisories a ON a.origin = v.origin AND a.id = v.advisory_id \
             JOIN devices d ON d.id = v.device_id AND d.org_id = v.org_id \
             WHERE v.org_id = $1 AND (a.id = $2 OR a.cves LIKE $3 ESCAPE '\\') \
             ORDER BY d.hostname, v.device_id, v.advisory_id, v.package LIMIT $4"
        ))
        .bind(self.org)
        .bind(key)
        .bind(format!("% {} %", crate::sql::escape_like(key)))
        .bind(limit)
        .fetch_all(self)
        .await
    }

    /// A device's findings, most severe first; another organization's device is not found.
    pub async fn device_findings(&self, device: DeviceId) -> Result<Vec<ExposureFinding>> {
        let exists: Option<(DeviceId,)> =
            sql("SELECT id FROM devices WHERE id = $1 AND org_id = $2")
                .bind(device)
                .bind(self.org)
                .fetch_optional(self)
                .await?;
        if exists.is_none() {
            return Err(StoreError::NotFound("device"));
        }
        sql(format!(
            "SELECT {FINDING_COLUMNS} FROM device_vulnerabilities v \
             JOIN advisories a ON a.origin = v.origin AND a.id = v.advisory_id \
             JOIN devices d ON d.id = v.device_id AND d.org_id = v.org_id \
             WHERE v.org_id = $1 AND v.device_id = $2 \
             ORDER BY {} DESC, v.cvss_score DESC, v.advisory_id, v.package",
            severity_rank("v.severity")
        ))
        .bind(self.org)
        .bind(device)
        .fetch_all(self)
        .await
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn releases_key_devices_and_records_alike() {
        assert_eq!(release_key("Debian:12").as_deref(), Some("Debian:12"));
        assert_eq!(
            device_release("Debian GNU/Linux", "12").as_deref(),
            Some("Debian:12")
        );
        assert_eq!(
            release_key("Ubuntu:22.04:LTS").as_deref(),
            device_release("Ubuntu", "22.04").as_deref()
        );
        assert_eq!(release_key("Ubuntu:Pro:22.04:LTS"), None);
        assert_eq!(
            release_key("Alpine:v3.19").as_deref(),
            device_release("Alpine Linux", "3.19.1").as_deref()
        );
        assert_eq!(
            release_key("Red Hat:enterprise_linux:9::baseos").as_deref(),
            device_release("Red Hat Enterprise Linux", "9.3").as_deref()
        );
        assert_eq!(
            release_key("Rocky Linux:9").as_deref(),
            device_release("Rocky Linux", "9.3").as_deref()
        );
        assert_eq!(
            release_key("AlmaLinux:8").as_deref(),
            device_release("AlmaLinux", "8.9").as_deref()
        );
        assert_eq!(release_key("PyPI"), None);
        assert_eq!(device_release("Windows", "11"), None);
        assert_eq!(candidate_releases("Debian:12"), ["Debian:12", "Debian"]);
    }
}
