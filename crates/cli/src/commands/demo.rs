//! `breeze demo`: a ready-to-try installation in one command.
//!
//! On an empty database it seeds a demo partner with two organizations (so isolation can be
//! seen), sites and device groups, an admin user, and three API keys for the first organization
//! (read; read+write; read+write+execute). It writes everything a newcomer needs to
//! `<data dir>/demo.json` (mode 0600), prints it, and serves. Re-running reuses the data and the
//! keys file; keys or a password that no longer work are replaced.

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
    run_server(&settings, listener, app).await
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
        .create_site(
            "Headquarters",
            "America/New_York",
            demo_audit("site.create", "site"),
        )
        .await?;
    s.org(acme.id)
        .create_site(
            "Branch Office",
            "America/Chicago",
            demo_audit("site.create", "site"),
        )
        .await?;
    s.org(globex.id)
        .create_site(
            "Main Office",
            "Europe/London",
            demo_audit("site.create", "site"),
        )
        .await?;
    s.org(acme.id)
        .create_group(
            "Servers",
            Some(hq.id),
            Some("Production servers"),
            demo_audit("device_group.create", "device_group"),
        )
        .await?;
    s.org(acme.id)
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
    println!(
        "  Dashboard     {} / {}",
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
