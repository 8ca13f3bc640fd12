//! `breeze demo`: a ready-to-try installation in one command.
//!
//! On an empty database it seeds a demo partner with two organizations (so isolation can be
//! seen), sites and device groups, an admin user, and three API keys for the first organization
//! (read; read+write; read+write+execute). It writes everything a newcomer needs to
//! `<data dir>/demo.json` (mode 0600), prints it, and serves. Re-running reuses the data and the
//! keys file; keys or a password that no longer work are replaced.
//!
//! It also seeds a few library scripts and — unless `BREEZE_DEMO_AGENT=false` — enrolls this
//! machine into the first site and runs its agent as a child process (`breeze agent run`, the
//! same code as the `breeze-agent` binary), so the first `query_devices` shows a real machine
//! with live metrics. The agent's config lives in `<data dir>/agent/agent.json` and is reused.

use std::path::Path;

use anyhow::Context;
use breeze_auth::{CreateApiKey, password};
use breeze_core::{Actor, AuditEvent, Organization, Scope, ScopeSet, User};
use breeze_store::{NewUser, StoreError};
use serde::{Deserialize, Serialize};

use super::{App, admin::generate_password, bind, run_server};
use crate::config::Settings;

const PARTNER_SLUG: &str = "demo-msp";
const ORG_SLUG: &str = "acme";
const ADMIN_EMAIL: &str = "admin@breeze.local";

/// The contents of `demo.json`.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct DemoFile {
    base_url: String,
    mcp_sse_url: String,
    mcp_url: String,
    organization: DemoOrg,
    api_keys: DemoKeys,
    admin: DemoAdmin,
}

#[derive(Debug, Serialize, Deserialize)]
struct DemoOrg {
    id: String,
    slug: String,
    name: String,
}

#[derive(Debug, Serialize, Deserialize)]
struct DemoKeys {
    read: String,
    write: String,
    execute: String,
}

#[derive(Debug, Serialize, Deserialize)]
struct DemoAdmin {
    email: String,
    password: String,
}

/// Library scripts the demo starts with: (name, language, category, description, body).
const DEMO_SCRIPTS: &[(&str, &str, &str, &str, &str)] = &[
    (
        "Disk usage report",
        "sh",
        "diagnostics",
        "Free space per filesystem, largest first.",
        "df -hP | sort -k5 -r\n",
    ),
    (
        "Top processes",
        "bash",
        "diagnostics",
        "The ten processes using the most CPU.",
        "ps -eo pid,user,pcpu,pmem,comm --sort=-pcpu | head -n 11\n",
    ),
    (
        "System summary",
        "python",
        "diagnostics",
        "Hostname, OS, uptime and load in one JSON line.",
        "import json, os, platform\nload = os.getloadavg()\nprint(json.dumps({\"host\": platform.node(), \"os\": platform.platform(), \"load\": load}))\n",
    ),
    (
        "Clear old temp files",
        "bash",
        "maintenance",
        "Deletes regular files in /tmp not accessed for 7 days and prints how many.",
        "find /tmp -xdev -type f -atime +7 -print -delete 2>/dev/null | wc -l\n",
    ),
];

fn demo_audit(action: &str, resource: &str) -> AuditEvent {
    AuditEvent::new(Actor::system("demo"), action, resource)
}

/// Runs the demo: seed or reuse, write and print `demo.json`, serve.
pub(crate) async fn run(settings: Settings) -> anyhow::Result<()> {
    let listener = bind(&settings).await?;
    let app = super::open(&settings).await?;
    let path = settings.data_dir.join("demo.json");
    let demo = prepare(&app, &settings.public_url, &path).await?;
    print_summary(&demo, &path);
    let agent = settings.demo_agent.then(|| {
        tokio::spawn(local_agent(
            app.clone(),
            settings.public_url.clone(),
            settings.data_dir.join("agent"),
        ))
    });
    let served = run_server(&settings, listener, app).await;
    if let Some(task) = agent {
        task.abort();
    }
    served
}

/// Enrolls this machine (once) and keeps its agent running as a child process while the
/// server runs. Failures are logged; the demo serves regardless.
async fn local_agent(app: App, base_url: String, dir: std::path::PathBuf) {
    let config = dir.join("agent.json");
    if let Err(e) = enroll_local_agent(&app, &base_url, &config).await {
        tracing::warn!(error = %format!("{e:#}"), "the demo's local agent could not enroll; continuing without it");
        return;
    }
    let exe = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => {
            tracing::warn!(error = %e, "cannot find the breeze binary to start the local agent");
            return;
        }
    };
    // The agent runs as this user and can see the data directory: its file tools must not
    // reach demo.json (keys, the admin password), the database or its own token.
    let data_dir =
        std::path::absolute(dir.parent().unwrap_or(&dir)).unwrap_or_else(|_| dir.clone());
    let child = tokio::process::Command::new(exe)
        .args(["agent", "run", "--config"])
        .arg(&config)
        .arg("--protect")
        .arg(&data_dir)
        .env("BREEZE_AGENT_LOG", "warn")
        .env(crate::EXIT_WITH_PARENT, "1")
        .stdin(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn();
    match child {
        Ok(mut child) => {
            tracing::info!(pid = child.id(), "local agent started");
            // `wait` closes the child's stdin; hold it open here so the agent keeps running.
            let _lifeline = child.stdin.take();
            match child.wait().await {
                Ok(status) => tracing::warn!(%status, "the local agent stopped"),
                Err(e) => tracing::warn!(error = %e, "lost the local agent"),
            }
        }
        Err(e) => tracing::warn!(error = %e, "cannot start the local agent"),
    }
}

async fn enroll_local_agent(app: &App, base_url: &str, config: &Path) -> anyhow::Result<()> {
    let org = app.store.find_organization(ORG_SLUG).await?;
    if let Ok(file) = breeze_agent::config::AgentFile::load(config) {
        let device = breeze_core::DeviceId(file.device_id);
        if file.org_id == org.id.0
            && app
                .store
                .org(org.id)
                .devices()
                .get_device(device)
                .await
                .is_ok()
        {
            return Ok(());
        }
    }
    let site = app
        .store
        .org(org.id)
        .tenancy()
        .list_sites()
        .await?
        .into_iter()
        .find(|s| s.name == "Headquarters")
        .context("the demo site is missing")?;
    let (secret, _) = app
        .auth
        .create_enrollment_key(
            breeze_auth::CreateEnrollmentKey {
                org_id: org.id,
                site_id: site.id,
                name: "Demo local agent".into(),
                max_uses: Some(1),
                expires_at: app.clock.now() + chrono::Duration::minutes(10),
                created_by: "system:demo".into(),
            },
            demo_audit("enrollment_key.create", "enrollment_key"),
        )
        .await?;
    // The server starts serving right after this task is spawned; give it a moment.
    let mut last = None;
    for _ in 0..40 {
        match breeze_agent::enroll::enroll(
            base_url,
            secret.expose(),
            config,
            app.clock.as_ref(),
            None,
        )
        .await
        {
            Ok(file) => {
                tracing::info!(device_id = %file.device_id, "this machine is enrolled as a demo device");
                return Ok(());
            }
            Err(e @ breeze_agent::AgentError::Server { .. }) => return Err(e.into()),
            Err(e) => last = Some(e),
        }
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
    Err(last.map_or_else(|| anyhow::anyhow!("enrollment timed out"), Into::into))
}

/// Seeds the tenant when missing, reuses what still works from an existing `demo.json`,
/// replaces the rest, and writes the file.
pub(crate) async fn prepare(app: &App, base_url: &str, path: &Path) -> anyhow::Result<DemoFile> {
    let (org, admin, fresh_password) = match app.store.find_partner(PARTNER_SLUG).await {
        Ok(_) => {
            let org = app
                .store
                .find_organization(ORG_SLUG)
                .await
                .context("the demo organization is missing")?;
            let admin = app
                .store
                .find_user_for_login(ADMIN_EMAIL)
                .await?
                .context("the demo admin user is missing")?;
            (org, admin.user, None)
        }
        Err(StoreError::NotFound(_)) => {
            let (org, admin, password) = seed(app).await?;
            (org, admin, Some(password))
        }
        Err(e) => return Err(e.into()),
    };
    let previous: Option<DemoFile> = std::fs::read(path)
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok());
    let previous = previous.filter(|p| p.organization.id == org.id.to_string());

    let password = match (fresh_password, &previous) {
        (Some(p), _) => p,
        (None, Some(prev)) if still_valid_password(app, &prev.admin.password).await? => {
            prev.admin.password.clone()
        }
        (None, _) => {
            let p = generate_password();
            app.store
                .set_password_hash(
                    admin.id,
                    &password::hash(&p)?,
                    demo_audit("user.password.reset", "user"),
                )
                .await?;
            p
        }
    };

    let keys = match &previous {
        Some(prev) if keys_still_work(app, &prev.api_keys).await => DemoKeys {
            read: prev.api_keys.read.clone(),
            write: prev.api_keys.write.clone(),
            execute: prev.api_keys.execute.clone(),
        },
        _ => DemoKeys {
            read: new_key(app, &org, &admin, "Demo read", &[Scope::AiRead]).await?,
            write: new_key(
                app,
                &org,
                &admin,
                "Demo write",
                &[Scope::AiRead, Scope::AiWrite],
            )
            .await?,
            execute: new_key(
                app,
                &org,
                &admin,
                "Demo execute",
                &[Scope::AiRead, Scope::AiWrite, Scope::AiExecute],
            )
            .await?,
        },
    };

    let demo = DemoFile {
        base_url: base_url.to_owned(),
        mcp_sse_url: format!("{base_url}/api/v1/mcp/sse"),
        mcp_url: format!("{base_url}/mcp"),
        organization: DemoOrg {
            id: org.id.to_string(),
            slug: org.slug.clone(),
            name: org.name.clone(),
        },
        api_keys: keys,
        admin: DemoAdmin {
            email: ADMIN_EMAIL.into(),
            password,
        },
    };
    write_private(path, &serde_json::to_vec_pretty(&demo)?)
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(demo)
}

async fn seed(app: &App) -> anyhow::Result<(Organization, User, String)> {
    let s = &app.store;
    let partner = s
        .create_partner(
            "Demo MSP",
            PARTNER_SLUG,
            demo_audit("partner.create", "partner"),
        )
        .await?;
    let acme = s
        .create_organization(
            partner.id,
            "Acme Corp",
            ORG_SLUG,
            demo_audit("organization.create", "organization"),
        )
        .await?;
    let globex = s
        .create_organization(
            partner.id,
            "Globex",
            "globex",
            demo_audit("organization.create", "organization"),
        )
        .await?;
    let hq = s
        .org(acme.id)
        .tenancy()
        .create_site(
            "Headquarters",
            "America/New_York",
            demo_audit("site.create", "site"),
        )
        .await?;
    s.org(acme.id)
        .tenancy()
        .create_site(
            "Branch Office",
            "America/Chicago",
            demo_audit("site.create", "site"),
        )
        .await?;
    s.org(globex.id)
        .tenancy()
        .create_site(
            "Main Office",
            "Europe/London",
            demo_audit("site.create", "site"),
        )
        .await?;
    s.org(acme.id)
        .tenancy()
        .create_group(
            "Servers",
            Some(hq.id),
            Some("Production servers"),
            demo_audit("device_group.create", "device_group"),
        )
        .await?;
    s.org(acme.id)
        .tenancy()
        .create_group(
            "Workstations",
            None,
            Some("Staff laptops and desktops"),
            demo_audit("device_group.create", "device_group"),
        )
        .await?;
    let password = generate_password();
    let admin = s
        .create_user(
            NewUser {
                partner_id: partner.id,
                org_id: None,
                email: ADMIN_EMAIL.into(),
                name: "Demo Admin".into(),
                password_hash: password::hash(&password)?,
            },
            demo_audit("user.create", "user"),
        )
        .await?;
    for (name, language, category, description, body) in DEMO_SCRIPTS {
        s.org(acme.id)
            .scripts()
            .create_script(
                breeze_store::NewScript {
                    name: (*name).into(),
                    description: (*description).into(),
                    language: (*language).into(),
                    category: (*category).into(),
                    body: (*body).into(),
                    parameters: Vec::new(),
                    created_by: "system:demo".into(),
                },
                demo_audit("script.create", "script"),
            )
            .await?;
    }
    let role = s.find_role(partner.id, "Administrator").await?;
    for org in [&acme, &globex] {
        s.assign_role(
            admin.id,
            org.id,
            role.id,
            demo_audit("user.role.assign", "user"),
        )
        .await?;
    }
    Ok((acme, admin, password))
}

async fn still_valid_password(app: &App, candidate: &str) -> anyhow::Result<bool> {
    Ok(app
        .store
        .find_user_for_login(ADMIN_EMAIL)
        .await?
        .is_some_and(|u| password::verify(candidate, &u.password_hash)))
}

async fn keys_still_work(app: &App, keys: &DemoKeys) -> bool {
    for key in [&keys.read, &keys.write, &keys.execute] {
        if app.auth.authenticate_api_key(Some(key)).await.is_err() {
            return false;
        }
    }
    true
}

async fn new_key(
    app: &App,
    org: &Organization,
    admin: &User,
    name: &str,
    scopes: &[Scope],
) -> anyhow::Result<String> {
    let (secret, _) = app
        .auth
        .create_api_key(
            CreateApiKey {
                org_id: org.id,
                user_id: admin.id,
                name: name.into(),
                scopes: ScopeSet::new(scopes.iter().copied()),
                expires_at: None,
            },
            demo_audit("api_key.create", "api_key"),
        )
        .await?;
    Ok(secret.expose().to_owned())
}

/// Writes `bytes` to `path` readable by the owner only.
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension("json.tmp");
    {
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create(true).truncate(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let mut f = options.open(&tmp)?;
        std::io::Write::write_all(&mut f, bytes)?;
        f.sync_all()?;
    }
    #[cfg(unix)]
    std::fs::set_permissions(&tmp, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
    std::fs::rename(&tmp, path)
}

fn print_summary(demo: &DemoFile, path: &Path) {
    println!();
    println!(
        "  Breeze demo is ready — {} ({})",
        demo.organization.name, demo.organization.slug
    );
    println!();
    println!("  Server        {}", demo.base_url);
    println!("  MCP (SSE)     {}", demo.mcp_sse_url);
    println!("  MCP (HTTP)    {}", demo.mcp_url);
    println!();
    println!("  API keys (X-API-Key header)");
    println!("    read        {}", demo.api_keys.read);
    println!("    write       {}", demo.api_keys.write);
    println!("    execute     {}", demo.api_keys.execute);
    println!();
    // There is no dashboard yet: these sign in to the REST API (a session cookie) and decide
    // approvals there or with `breeze approvals`.
    println!(
        "  Admin sign-in {} / {}  (POST /api/v1/auth/login: REST session, approvals)",
        demo.admin.email, demo.admin.password
    );
    println!();
    println!(
        "  Try it:  curl -H 'X-API-Key: {}' {}/api/v1/orgs/{}/devices",
        demo.api_keys.read, demo.base_url, demo.organization.slug
    );
    println!(
        "  All of this is saved in {} (readable by you only).",
        path.display()
    );
    println!();
}
