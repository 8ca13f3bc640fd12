//! A scratch Breeze for benchmarks: `breeze demo` (no local agent) on a free port with its own
//! data directory under `target/bench` and its own database — the SQLite file in that
//! directory, or a fresh PostgreSQL database created here and dropped when the instance is.
//!
//! The admin CLI (`breeze enrollment-keys …`, `breeze devices seed …`) runs against the same
//! database through the same settings while the server runs.

use std::{
    fs::File,
    net::TcpListener,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
};

use anyhow::{Context, bail};
use serde_json::Value;

use super::{pinned, run, wait_for_json, wait_for_port};

/// The database behind the scratch instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Db {
    Sqlite,
    Postgres,
}

impl Db {
    pub(super) fn parse(s: &str) -> anyhow::Result<Db> {
        match s {
            "sqlite" => Ok(Db::Sqlite),
            "postgres" | "postgresql" => Ok(Db::Postgres),
            other => bail!("--database: {other:?} is neither sqlite nor postgres"),
        }
    }

    pub(super) fn name(self) -> &'static str {
        match self {
            Db::Sqlite => "sqlite",
            Db::Postgres => "postgres",
        }
    }
}

/// Where a fresh PostgreSQL database is created (`BENCH_POSTGRES_URL`, trust authentication).
fn postgres_admin_url() -> String {
    #[allow(clippy::disallowed_methods)] // benchmark knob, not a Breeze setting
    std::env::var("BENCH_POSTGRES_URL").unwrap_or_else(|_| "postgres://127.0.0.1:5432/test".into())
}

/// The role Breeze connects to a bench database as: by default `breeze_bench` (created when
/// missing), which owns the database but cannot bypass row security, as a deployment that
/// follows the README runs; with `BENCH_POSTGRES_ROLE=admin`, the admin URL's own user
/// (usually a superuser, which passes through the row-security policies) for comparison.
fn bench_role(admin: &str) -> anyhow::Result<String> {
    #[allow(clippy::disallowed_methods)] // benchmark knob, not a Breeze setting
    if std::env::var("BENCH_POSTGRES_ROLE").is_ok_and(|r| r == "admin") {
        return Ok(run(Command::new("psql")
            .arg(admin)
            .args(["-Atc", "SELECT current_user"]))
        .context("PostgreSQL is not reachable (psql)")?
        .trim()
        .to_owned());
    }
    run(Command::new("psql").arg(admin).args([
        "-qc",
        "DO $$ BEGIN \
           IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'breeze_bench') THEN \
             CREATE ROLE breeze_bench LOGIN NOSUPERUSER NOBYPASSRLS; \
           END IF; \
         EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$",
    ]))
    .context("PostgreSQL is not reachable (psql)")?;
    Ok("breeze_bench".to_owned())
}

/// A port nobody listens on right now.
pub(super) fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// A second server on a scratch Breeze's database ([`Instance::start_peer`]); killed on drop.
pub(super) struct Peer {
    child: Child,
    pub(super) base_url: String,
}

impl Peer {
    pub(super) fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A running scratch Breeze; killed (and its PostgreSQL database dropped) on drop.
pub(super) struct Instance {
    child: Child,
    bin: PathBuf,
    pub(super) db: Db,
    pub(super) base_url: String,
    /// Settings shared by the server and the admin CLI.
    env: Vec<(String, String)>,
    /// The server's stderr (warnings and errors at `BREEZE_LOG=warn`).
    pub(super) log: PathBuf,
    data_dir: PathBuf,
    pg_db: Option<String>,
    pub(super) demo: Value,
    _dir: tempfile::TempDir,
}

impl Instance {
    /// Starts `breeze demo` on CPU `cpu` (when pinning is possible) with `server_env` on top of
    /// the shared settings, and waits for it to answer and for `demo.json`.
    pub(super) fn start(
        root: &Path,
        bin: &Path,
        db: Db,
        cpu: u32,
        server_env: &[(&str, &str)],
    ) -> anyhow::Result<Instance> {
        let work = root.join("target/bench");
        std::fs::create_dir_all(&work)?;
        let dir = tempfile::Builder::new()
            .prefix(&format!("breeze-{}-", db.name()))
            .tempdir_in(&work)?;
        let data_dir = dir.path().join("data");
        std::fs::create_dir_all(&data_dir)?;
        let mut env = vec![
            ("BREEZE_DATA_DIR".to_owned(), data_dir.display().to_string()),
            ("BREEZE_LOG".to_owned(), "warn".to_owned()),
            ("BREEZE_LOG_FORMAT".to_owned(), "json".to_owned()),
        ];
        let mut pg_db = None;
        if db == Db::Postgres {
            let admin = postgres_admin_url();
            let user = bench_role(&admin)?;
            let name = format!(
                "breeze_bench_{}_{}",
                std::process::id(),
                super::sim::now().timestamp_millis()
            );
            run(Command::new("psql")
                .arg(&admin)
                .args(["-qc", &format!("CREATE DATABASE {name} OWNER {user}")]))?;
            pg_db = Some(name.clone());
            let (base, _) = admin
                .rsplit_once('/')
                .context("BENCH_POSTGRES_URL has no database path")?;
            let base = base.replacen("postgres://", &format!("postgres://{user}@"), 1);
            env.push(("DATABASE_URL".to_owned(), format!("{base}/{name}")));
        }
        let port = free_port()?;
        let log = dir.path().join("server.log");
        let mut cmd = pinned(cpu);
        cmd.arg(bin)
            .args(["demo", "--listen", &format!("127.0.0.1:{port}")])
            .current_dir(dir.path())
            .env("BREEZE_DEMO_AGENT", "false")
            .stdout(Stdio::null())
            .stderr(Stdio::from(File::create(&log)?));
        for (k, v) in &env {
            cmd.env(k, v);
        }
        for (k, v) in server_env {
            cmd.env(k, v);
        }
        let child = cmd.spawn().context("starting breeze demo")?;
        let mut me = Instance {
            child,
            bin: bin.to_owned(),
            db,
            base_url: format!("http://127.0.0.1:{port}"),
            env,
            log,
            data_dir,
            pg_db,
            demo: Value::Null,
            _dir: dir,
        };
        if let Err(e) = wait_for_port(port, &mut me.child) {
            let log = std::fs::read_to_string(&me.log).unwrap_or_default();
            bail!("{e}\nserver log:\n{log}");
        }
        me.demo = wait_for_json(&me.data_dir.join("demo.json"), &mut me.child)?;
        Ok(me)
    }

    pub(super) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// A second server on this instance's database: `breeze serve` on CPU `cpu` with the shared
    /// settings and `server_env` (which should name the same `REDIS_URL` as the first).
    pub(super) fn start_peer(&self, cpu: u32, server_env: &[(&str, &str)]) -> anyhow::Result<Peer> {
        let port = free_port()?;
        let dir = self.log.with_file_name("peer");
        std::fs::create_dir_all(&dir)?;
        let log = dir.join("server.log");
        let mut cmd = pinned(cpu);
        cmd.arg(&self.bin)
            .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
            .current_dir(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::from(File::create(&log)?));
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        for (k, v) in server_env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().context("starting breeze serve")?;
        if let Err(e) = wait_for_port(port, &mut child) {
            let _ = child.kill();
            let _ = child.wait();
            let log = std::fs::read_to_string(&log).unwrap_or_default();
            bail!("{e}\nserver log:\n{log}");
        }
        Ok(Peer {
            child,
            base_url: format!("http://127.0.0.1:{port}"),
        })
    }

    /// One of the demo's API keys: `read`, `write` or `execute`.
    pub(super) fn api_key(&self, which: &str) -> anyhow::Result<String> {
        self.demo["api_keys"][which]
            .as_str()
            .map(str::to_owned)
            .with_context(|| format!("demo.json has no {which} API key"))
    }

    /// Runs the admin CLI against this instance's database; returns its stdout.
    pub(super) fn cli(&self, args: &[&str]) -> anyhow::Result<String> {
        self.cli_with(&[], args)
    }

    /// [`Instance::cli`] with `extra` settings on top of the shared ones.
    pub(super) fn cli_with(&self, extra: &[(&str, &str)], args: &[&str]) -> anyhow::Result<String> {
        let mut cmd = Command::new(&self.bin);
        cmd.args(args).stdin(Stdio::null());
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        for (k, v) in extra {
            cmd.env(k, v);
        }
        run(&mut cmd)
    }

    /// A new enrollment key for the demo's first site, good for `uses` agents for two hours.
    pub(super) fn enrollment_key(&self, uses: usize) -> anyhow::Result<String> {
        let out = self.cli(&[
            "enrollment-keys",
            "create",
            "--org",
            "acme",
            "--site",
            "Headquarters",
            "--max-uses",
            &uses.to_string(),
            "--expires-in-hours",
            "2",
            "--json",
        ])?;
        let v: Value = serde_json::from_str(&out).context("enrollment-keys create --json")?;
        v["key"]
            .as_str()
            .map(str::to_owned)
            .context("enrollment-keys create: no key")
    }

    /// Adds `rows` tool-call records to the demo organization's audit log, spread over the
    /// time before now (a million cover 20 days), in steps of 250,000 so neither database holds
    /// one huge statement.
    pub(super) fn seed_audit(&self, rows: i64) -> anyhow::Result<()> {
        let org: uuid::Uuid = self.demo["organization"]["id"]
            .as_str()
            .context("demo.json names no organization")?
            .parse()?;
        let base = super::sim::now() - chrono::Duration::milliseconds(1_728 * rows);
        let step = 250_000;
        let mut from = 0;
        while from < rows {
            let to = (from + step).min(rows);
            self.sql(&super::reports::audit_seed_sql(
                self.db == Db::Sqlite,
                org,
                base,
                from,
                to,
            ))?;
            from = to;
        }
        Ok(())
    }

    /// After a bulk seed, what PostgreSQL's autovacuum does to a database that grew to this
    /// size over time: `ANALYZE`, so that plans are made for the rows there are. Measured right
    /// after a bulk load, the planner still believes the tables near empty (a sort of every
    /// row of an organization for a first page of 25). SQLite keeps no statistics unless asked
    /// (Breeze never asks), so there is nothing to do.
    pub(super) fn analyze(&self) -> anyhow::Result<()> {
        if self.db == Db::Postgres {
            self.sql("ANALYZE")?;
        }
        Ok(())
    }

    /// The single number a `SELECT count(*) …` answers, asked with the backend's own shell.
    pub(super) fn count(&self, sql: &str) -> anyhow::Result<u64> {
        let out = self.sql(sql)?;
        out.trim()
            .parse()
            .with_context(|| format!("{sql:?} answered {out:?}"))
    }

    /// Runs `sql` on this instance's database as the system (outside any organization's
    /// row-security scope) through `sqlite3` or `psql`; returns what it printed.
    pub(super) fn sql(&self, sql: &str) -> anyhow::Result<String> {
        Ok(match self.db {
            Db::Sqlite => run(Command::new("sqlite3")
                .arg("-cmd")
                .arg(".timeout 5000")
                .arg(self.data_dir.join("breeze.db"))
                .arg(sql))?,
            Db::Postgres => {
                let url = self
                    .env
                    .iter()
                    .find(|(k, _)| k == "DATABASE_URL")
                    .map(|(_, v)| v.as_str())
                    .context("no DATABASE_URL")?;
                // Breeze's own role sees no row without a row-security scope.
                run(Command::new("psql")
                    .arg(url)
                    .env("PGOPTIONS", "-c breeze.scope=system")
                    .args(["-Atc", sql]))?
            }
        })
    }

    /// The PostgreSQL backend processes serving this instance's database (empty on SQLite,
    /// whose work is done inside the server process).
    pub(super) fn db_backend_pids(&self) -> Vec<u32> {
        let Some(url) = self
            .env
            .iter()
            .find(|(k, _)| k == "DATABASE_URL")
            .map(|(_, v)| v.as_str())
        else {
            return Vec::new();
        };
        run(Command::new("psql").arg(url).args([
            "-Atc",
            "SELECT pid FROM pg_stat_activity \
             WHERE datname = current_database() AND pid <> pg_backend_pid()",
        ]))
        .map(|out| out.lines().filter_map(|l| l.trim().parse().ok()).collect())
        .unwrap_or_default()
    }

    /// Whether the server process is still running.
    pub(super) fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Warning and error lines the server logged (JSON format), grouped by level and message,
    /// most frequent first.
    pub(super) fn log_summary(&self, top: usize) -> Vec<(usize, String)> {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let mut counts: std::collections::BTreeMap<String, usize> = Default::default();
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let key = match serde_json::from_str::<Value>(line) {
                Ok(v) => {
                    let mut k = format!(
                        "{} {}",
                        v["level"].as_str().unwrap_or("?"),
                        v["fields"]["message"].as_str().unwrap_or("")
                    );
                    for field in ["error", "summary"] {
                        if let Some(e) = v["fields"][field].as_str() {
                            k.push_str(": ");
                            k.push_str(e);
                        }
                    }
                    k
                }
                Err(_) => line.to_owned(),
            };
            // Ids differ per line; group on the first 160 characters.
            let key: String = key.chars().take(160).collect();
            *counts.entry(key).or_default() += 1;
        }
        let mut v: Vec<(usize, String)> = counts.into_iter().map(|(k, n)| (n, k)).collect();
        v.sort_by_key(|e| std::cmp::Reverse(e.0));
        v.truncate(top);
        v
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(name) = &self.pg_db {
            let _ = Command::new("psql")
                .arg(postgres_admin_url())
                .args([
                    "-qc",
                    &format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
                ])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }
}
