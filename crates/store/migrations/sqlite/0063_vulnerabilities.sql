-- Vulnerability exposure: OSV advisories (reference data, not an organization's), the
-- (release, package) pairs each names so a device's packages find theirs by index, and each
-- device's exposure, recomputed when its inventory changes or advisories are imported.
-- `origin` is '' for advisories the operator loaded (CLI, scheduled refresh), which every
-- organization sees, or the id of the organization that uploaded one through the tool, which
-- only that organization sees. `batch` names the import that last wrote a record, so the
-- exposure of that import's records is recomputed together.
-- Kept in lockstep with migrations/postgres/0063_vulnerabilities.sql.
CREATE TABLE advisories (
    origin      TEXT NOT NULL,
    id          TEXT NOT NULL,
    modified    TEXT NOT NULL,
    published   TEXT,
    summary     TEXT NOT NULL,
    severity    TEXT NOT NULL,
    cvss_score  REAL,
    cvss_vector TEXT,
    cves        TEXT NOT NULL,
    record      TEXT NOT NULL,
    imported_at TEXT NOT NULL,
    batch       TEXT NOT NULL,
    PRIMARY KEY (origin, id)
);
CREATE INDEX advisories_id ON advisories (id);
CREATE INDEX advisories_batch ON advisories (batch);

CREATE TABLE advisory_packages (
    release     TEXT NOT NULL,
    package     TEXT NOT NULL,
    origin      TEXT NOT NULL,
    advisory_id TEXT NOT NULL,
    affected    TEXT NOT NULL,
    PRIMARY KEY (release, package, origin, advisory_id),
    FOREIGN KEY (origin, advisory_id) REFERENCES advisories (origin, id) ON DELETE CASCADE
);
CREATE INDEX advisory_packages_advisory ON advisory_packages (origin, advisory_id);

CREATE TABLE device_vulnerabilities (
    org_id      BLOB NOT NULL,
    device_id   BLOB NOT NULL,
    origin      TEXT NOT NULL,
    advisory_id TEXT NOT NULL,
    package     TEXT NOT NULL,
    installed   TEXT NOT NULL,
    fixed_in    TEXT,
    severity    TEXT NOT NULL,
    cvss_score  REAL,
    found_at    TEXT NOT NULL,
    PRIMARY KEY (device_id, origin, advisory_id, package),
    FOREIGN KEY (device_id, org_id) REFERENCES devices (id, org_id) ON DELETE CASCADE,
    FOREIGN KEY (origin, advisory_id) REFERENCES advisories (origin, id) ON DELETE CASCADE
);
CREATE INDEX device_vulnerabilities_org ON device_vulnerabilities (org_id, advisory_id);
CREATE INDEX device_vulnerabilities_advisory ON device_vulnerabilities (origin, advisory_id);
