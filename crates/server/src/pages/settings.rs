//! Settings: API keys (create, shown once; list with last use; revoke), the MCP card with
//! each client's snippet, and connected apps: the person's OAuth grants (client, redirect
//! hosts, organization, scopes, created, last used, the contract's connection state) with a
//! revoke button, or "OAuth is off" while `MCP_OAUTH_ENABLED` is not set.
//!
//! API keys need `apikeys.manage` in the organization (`authz::org_scope`, like
//! `/api/v1/orgs/{org}/api-keys`); the MCP and apps pages only membership (the grants are the
//! person's own, like `/api/v1/oauth/grants`). A new key's secret
//! is in the response to the creating POST and nowhere else (the page is `no-store`).

use askama::Template;
use axum::{
    Router,
    extract::{Path, State},
    http::StatusCode,
    response::{IntoResponse, Redirect, Response},
    routing::{get, post},
};
use breeze_auth::CreateApiKey;
use breeze_core::{ApiKeyId, AuditEvent, GrantId, Operation, Permission, Scope, ScopeSet};
use chrono::Duration;

use super::{Layout, PageError, Section, SignedForm, SignedIn, render, render_status};
use crate::{ApiError, AppState, extract::RequestId};

pub(super) fn router() -> Router<AppState> {
    Router::new()
        .route("/o/{org}/settings/api-keys", get(keys).post(create_key))
        .route("/o/{org}/settings/api-keys/{id}/revoke", post(revoke_key))
        .route("/o/{org}/settings/mcp", get(mcp))
        .route("/o/{org}/settings/apps", get(apps))
        .route("/o/{org}/settings/apps/{id}/revoke", post(revoke_grant))
}

/// The scopes a key can be given, with what each allows.
const SCOPES: &[(Scope, &str)] = &[
    (Scope::AiRead, "Tier 1: read the fleet, audit and scripts"),
    (Scope::AiWrite, "Tier 2: change context, groups, alerts"),
    (
        Scope::AiExecute,
        "Tier 3: run commands and scripts (each call waits for a person's approval)",
    ),
    (
        Scope::AiExecuteAdmin,
        "Tier 3 in production (required there besides ai:execute)",
    ),
];

/// Expiry choices in days (0 = never).
const EXPIRIES: &[(u32, &str)] = &[
    (0, "Never"),
    (7, "7 days"),
    (30, "30 days"),
    (90, "90 days"),
    (365, "1 year"),
];

struct KeyView {
    id: String,
    name: String,
    prefix: String,
    scopes: String,
    created: String,
    last_used: String,
    expires: String,
    status: String,
    active: bool,
}

struct ScopeChoice {
    value: &'static str,
    help: &'static str,
    checked: bool,
}

struct ExpiryChoice {
    days: u32,
    label: &'static str,
    selected: bool,
}

#[derive(Template)]
#[template(path = "api_keys.html")]
struct KeysPage {
    l: Layout,
    keys: Vec<KeyView>,
    scopes: Vec<ScopeChoice>,
    expiries: Vec<ExpiryChoice>,
    name: String,
    error: String,
    notice: String,
    /// The new key's secret: only in the response to its creation.
    secret: String,
    mcp_url: String,
}

fn when(t: chrono::DateTime<chrono::Utc>) -> String {
    t.format("%Y-%m-%d %H:%M UTC").to_string()
}

/// What the form had, to show it again.
struct Draft {
    name: String,
    scopes: Vec<Scope>,
    days: u32,
}

impl Default for Draft {
    fn default() -> Self {
        Self {
            name: String::new(),
            scopes: vec![Scope::AiRead],
            days: 90,
        }
    }
}

/// How the keys page answers: its status, the form's values, and what to say.
struct Answer {
    status: StatusCode,
    draft: Draft,
    error: String,
    notice: String,
    secret: String,
}

impl Answer {
    fn ok() -> Self {
        Self {
            status: StatusCode::OK,
            draft: Draft::default(),
            error: String::new(),
            notice: String::new(),
            secret: String::new(),
        }
    }

    fn refused(status: StatusCode, draft: Draft, error: String) -> Self {
        Self {
            status,
            draft,
            error,
            ..Self::ok()
        }
    }
}

async fn keys_page(
    state: &AppState,
    who: &SignedIn,
    org: &str,
    answer: Answer,
) -> Result<Response, PageError> {
    let Answer {
        status,
        draft,
        error,
        notice,
        secret,
    } = answer;
    let scope = who
        .scope(state, org, Operation::write(Permission::ApikeysManage))
        .await?;
    let now = state.clock.now();
    let keys = scope
        .store(state)
        .api_keys()
        .list_api_keys()
        .await?
        .into_iter()
        .map(|k| KeyView {
            id: k.id.to_string(),
            active: k.is_active(now),
            status: if k.revoked_at.is_some() {
                "revoked".to_owned()
            } else if k.is_active(now) {
                "active".to_owned()
            } else {
                "expired".to_owned()
            },
            name: k.name,
            prefix: k.key_prefix,
            scopes: k
                .scopes
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(" "),
            created: when(k.created_at),
            last_used: k.last_used_at.map_or_else(|| "never".to_owned(), when),
            expires: k.expires_at.map_or_else(|| "never".to_owned(), when),
        })
        .collect();
    let l = Layout::for_user(state, who, Some(&scope.org), Section::ApiKeys, "API keys").await?;
    render_status(
        status,
        &KeysPage {
            l,
            keys,
            scopes: SCOPES
                .iter()
                .map(|(s, help)| ScopeChoice {
                    value: s.as_str(),
                    help,
                    checked: draft.scopes.contains(s),
                })
                .collect(),
            expiries: EXPIRIES
                .iter()
                .map(|(days, label)| ExpiryChoice {
                    days: *days,
                    label,
                    selected: *days == draft.days,
                })
                .collect(),
            name: draft.name,
            error,
            notice,
            secret,
            mcp_url: super::mcp_url(state),
        },
    )
}

async fn keys(
    State(state): State<AppState>,
    who: SignedIn,
    Path(org): Path<String>,
) -> Result<Response, PageError> {
    keys_page(&state, &who, &org, Answer::ok()).await
}

async fn create_key(
    State(state): State<AppState>,
    RequestId(request_id): RequestId,
    Path(org): Path<String>,
    f: SignedForm<Vec<(String, String)>>,
) -> Result<Response, PageError> {
    let who = f.who;
    let scope = who
        .scope(&state, &org, Operation::write(Permission::ApikeysManage))
        .await?;
    let field = |name: &str| {
        f.form
            .iter()
            .find(|(k, _)| k == name)
            .map_or("", |(_, v)| v.as_str())
    };
    let mut draft = Draft {
        name: field("name").trim().to_owned(),
        scopes: Vec::new(),
        days: 0,
    };
    let mut problems = Vec::new();
    for (k, v) in &f.form {
        if k == "scope" {
            match v.parse::<Scope>() {
                Ok(s) if SCOPES.iter().any(|(c, _)| *c == s) => draft.scopes.push(s),
                _ => problems.push(format!("Unknown scope {v:?}.")),
            }
        }
    }
    match field("expires_days").parse::<u32>() {
        Ok(d) if EXPIRIES.iter().any(|(e, _)| *e == d) => draft.days = d,
        _ => problems.push("Choose an expiry from the list.".to_owned()),
    }
    if draft.name.is_empty() {
        problems.push("Give the key a name (e.g. \"Claude Desktop on my laptop\").".to_owned());
    } else if draft.name.chars().count() > 100 {
        problems.push("The name is too long: at most 100 characters.".to_owned());
    }
    if draft.scopes.is_empty() {
        problems.push("Choose at least one scope.".to_owned());
    }
    if !problems.is_empty() {
        let answer = Answer::refused(StatusCode::BAD_REQUEST, draft, problems.join(" "));
        return keys_page(&state, &who, &org, answer).await;
    }
    let expires_at =
        (draft.days > 0).then(|| state.clock.now() + Duration::days(i64::from(draft.days)));
    let audit = AuditEvent::new(who.authenticated().actor(), "api_key.create", "api_key")
        .request(request_id);
    let created = state
        .auth
        .create_api_key(
            CreateApiKey {
                org_id: scope.org.id,
                user_id: scope.caller.user(),
                name: draft.name.clone(),
                scopes: ScopeSet::new(draft.scopes.iter().copied()),
                expires_at,
            },
            audit,
        )
        .await;
    match created {
        Ok((secret, record)) => {
            let answer = Answer {
                status: StatusCode::CREATED,
                notice: format!("Key \"{}\" created.", record.name),
                secret: secret.expose().to_owned(),
                ..Answer::ok()
            };
            keys_page(&state, &who, &org, answer).await
        }
        Err(e) => {
            let api = ApiError::from(e);
            if api.status.is_server_error() {
                return Err(api.into());
            }
            let status = api.status;
            keys_page(
                &state,
                &who,
                &org,
                Answer::refused(status, draft, api.message),
            )
            .await
        }
    }
}

#[derive(serde::Deserialize)]
struct Empty {}

async fn revoke_key(
    State(state): State<AppState>,
    RequestId(request_id): RequestId,
    Path((org, id)): Path<(String, String)>,
    f: SignedForm<Empty>,
) -> Result<Response, PageError> {
    let who = f.who;
    let scope = who
        .scope(&state, &org, Operation::write(Permission::ApikeysManage))
        .await?;
    let id: ApiKeyId = id
        .parse()
        .map_err(|_| PageError::from(ApiError::not_found("API key not found")))?;
    let audit = AuditEvent::new(who.authenticated().actor(), "api_key.revoke", "api_key")
        .request(request_id);
    scope
        .store(&state)
        .api_keys()
        .revoke_api_key(id, audit)
        .await?;
    Ok(Redirect::to(&format!("/o/{}/settings/api-keys", scope.org.slug)).into_response())
}

/// One client's setup: a title, where it goes, and the text to paste.
struct Snippet {
    id: &'static str,
    title: &'static str,
    how: String,
    text: String,
}

#[derive(Template)]
#[template(path = "mcp.html")]
struct McpPage {
    l: Layout,
    mcp_url: String,
    sse_url: String,
    snippets: Vec<Snippet>,
    oauth: bool,
}

/// The snippets for each client, filled with this server's URLs.
fn snippets(base: &str) -> Vec<Snippet> {
    let mcp = format!("{base}/mcp");
    let stdio = format!(
        "{{\n  \"mcpServers\": {{\n    \"breeze\": {{\n      \"command\": \"breeze\",\n      \
         \"args\": [\"mcp\", \"stdio\"],\n      \"env\": {{ \"BREEZE_URL\": \"{base}\", \
         \"BREEZE_API_KEY\": \"brz_…\" }}\n    }}\n  }}\n}}"
    );
    vec![
        Snippet {
            id: "claude-code",
            title: "Claude Code",
            how: "Run in a terminal:".into(),
            text: format!(
                "claude mcp add --transport http breeze {mcp} --header \"X-API-Key: brz_…\""
            ),
        },
        Snippet {
            id: "claude-desktop",
            title: "Claude Desktop",
            how: "Claude Desktop's config file launches commands only (it ignores url entries): \
                  Settings → Developer → Edit Config (claude_desktop_config.json), add the \
                  breeze launcher, then restart Claude Desktop. Or, with OAuth on and this \
                  server reachable from the internet, Settings → Connectors → Add custom \
                  connector with the MCP URL."
                .into(),
            text: stdio.clone(),
        },
        Snippet {
            id: "cursor",
            title: "Cursor",
            how: "Settings → MCP → Add new global MCP server (~/.cursor/mcp.json):".into(),
            text: format!(
                "{{\n  \"mcpServers\": {{\n    \"breeze\": {{\n      \"url\": \"{mcp}\",\n      \
                 \"headers\": {{ \"X-API-Key\": \"brz_…\" }}\n    }}\n  }}\n}}"
            ),
        },
        Snippet {
            id: "codex",
            title: "Codex CLI",
            how: "In ~/.codex/config.toml (the key is read from the environment variable \
                  BREEZE_API_KEY):"
                .into(),
            text: format!(
                "[mcp_servers.breeze]\nurl = \"{mcp}\"\nenv_http_headers = {{ \"X-API-Key\" = \
                 \"BREEZE_API_KEY\" }}"
            ),
        },
        Snippet {
            id: "chatgpt",
            title: "ChatGPT",
            how: "ChatGPT connectors authenticate with OAuth and cannot send an API key header: \
                  once OAuth is enabled on this server, add this URL as a connector (Settings → \
                  Connectors → Create):"
                .into(),
            text: mcp.clone(),
        },
        Snippet {
            id: "vscode",
            title: "VS Code",
            how: "In .vscode/mcp.json (or MCP: Open User Configuration):".into(),
            text: format!(
                "{{\n  \"servers\": {{\n    \"breeze\": {{\n      \"type\": \"http\",\n      \
                 \"url\": \"{mcp}\",\n      \"headers\": {{ \"X-API-Key\": \"brz_…\" }}\n    }}\n  \
                 }}\n}}"
            ),
        },
        Snippet {
            id: "stdio",
            title: "Any client that launches a command (stdio)",
            how: "The breeze binary bridges stdin/stdout to this server:".into(),
            text: stdio,
        },
    ]
}

async fn mcp(
    State(state): State<AppState>,
    who: SignedIn,
    Path(org): Path<String>,
) -> Result<Response, PageError> {
    let scope = who
        .scope(&state, &org, Operation::read(Permission::DevicesRead))
        .await?;
    let l = Layout::for_user(&state, &who, Some(&scope.org), Section::Mcp, "MCP").await?;
    let base = state.config.public_url.trim_end_matches('/');
    render(&McpPage {
        l,
        mcp_url: super::mcp_url(&state),
        sse_url: format!("{base}/api/v1/mcp/sse"),
        snippets: snippets(base),
        oauth: state.oauth.is_some(),
    })
}

/// One OAuth grant as the connected-apps page shows it.
struct GrantRow {
    id: String,
    client: String,
    /// The hosts the client may be redirected to (its registered redirect URIs).
    redirect_hosts: String,
    organization: String,
    scopes: String,
    created: String,
    last_used: String,
    /// The contract's connection state: `Connected` or `Revoked`.
    state: &'static str,
    /// The state as a CSS class (`s-connected`, `s-revoked`).
    state_class: String,
    active: bool,
}

#[derive(Template)]
#[template(path = "apps.html")]
struct AppsPage {
    l: Layout,
    mcp_url: String,
    oauth: bool,
    grants: Vec<GrantRow>,
}

/// The distinct hosts of a client's redirect URIs, in order.
fn redirect_hosts(uris: &[String]) -> String {
    let mut hosts: Vec<String> = Vec::new();
    for u in uris {
        let host = url::Url::parse(u)
            .ok()
            .map(|u| match (u.host_str(), u.port()) {
                (Some(h), Some(p)) => format!("{h}:{p}"),
                (Some(h), None) => h.to_owned(),
                // A private-use scheme (`com.example.app:/cb`) has no host: show the scheme.
                (None, _) => format!("{}:", u.scheme()),
            });
        if let Some(h) = host
            && !hosts.contains(&h)
        {
            hosts.push(h);
        }
    }
    hosts.join(", ")
}

/// The signed-in person's OAuth grants (every organization's: a grant belongs to the person),
/// newest first, with each client's redirect hosts and the grant's organization.
async fn grant_rows(state: &AppState, who: &SignedIn) -> Result<Vec<GrantRow>, PageError> {
    let grants = state.store.user_oauth_grants(who.user.id).await?;
    let orgs = state.store.user_organizations(who.user.id).await?;
    let mut hosts: std::collections::HashMap<String, String> = std::collections::HashMap::new();
    let mut rows = Vec::with_capacity(grants.len());
    for g in grants {
        if !hosts.contains_key(&g.client_id) {
            let h = state
                .store
                .get_oauth_client(&g.client_id)
                .await?
                .map_or_else(String::new, |c| redirect_hosts(&c.redirect_uris));
            hosts.insert(g.client_id.clone(), h);
        }
        let conn = breeze_oauth::connection_state(&g);
        rows.push(GrantRow {
            id: g.id.to_string(),
            redirect_hosts: hosts.get(&g.client_id).cloned().unwrap_or_default(),
            organization: orgs.iter().find(|(o, _)| o.id == g.org_id).map_or_else(
                || "(no longer a member)".to_owned(),
                |(o, _)| o.name.clone(),
            ),
            scopes: g.scopes.join(" "),
            created: when(g.created_at),
            last_used: g.last_used_at.map_or_else(|| "never".to_owned(), when),
            state: conn,
            state_class: conn.to_ascii_lowercase().replace(' ', "-"),
            active: g.is_active(),
            client: breeze_oauth::client::display_name(&g.client_name),
        });
    }
    Ok(rows)
}

async fn apps(
    State(state): State<AppState>,
    who: SignedIn,
    Path(org): Path<String>,
) -> Result<Response, PageError> {
    let state = &state;
    let who = &who;
    let scope = who
        .scope(state, &org, Operation::read(Permission::DevicesRead))
        .await?;
    let oauth = state.oauth.is_some();
    let grants = if oauth {
        grant_rows(state, who).await?
    } else {
        Vec::new()
    };
    let l = Layout::for_user(
        state,
        who,
        Some(&scope.org),
        Section::Apps,
        "Connected apps",
    )
    .await?;
    render(&AppsPage {
        l,
        mcp_url: super::mcp_url(state),
        oauth,
        grants,
    })
}

/// `POST /o/{org}/settings/apps/{grant}/revoke`: revokes one of the person's own grants and
/// all its tokens, like `DELETE /api/v1/oauth/grants/{id}` (another person's grant, or any
/// while OAuth is off, is 404).
async fn revoke_grant(
    State(state): State<AppState>,
    RequestId(request_id): RequestId,
    Path((org, id)): Path<(String, String)>,
    f: SignedForm<Empty>,
) -> Result<Response, PageError> {
    let who = f.who;
    let scope = who
        .scope(&state, &org, Operation::read(Permission::DevicesRead))
        .await?;
    let not_found = || PageError::from(ApiError::not_found("OAuth grant not found"));
    if state.oauth.is_none() {
        return Err(not_found());
    }
    let id: GrantId = id.parse().map_err(|_| not_found())?;
    let audit = AuditEvent::new(
        who.authenticated().actor(),
        "oauth.grant.revoke",
        "oauth_grant",
    )
    .details(serde_json::json!({ "reason": "revoked_by_user" }))
    .request(request_id);
    state
        .store
        .revoke_user_oauth_grant(who.user.id, id, audit)
        .await?;
    Ok(Redirect::to(&format!("/o/{}/settings/apps", scope.org.slug)).into_response())
}

#[cfg(test)]
mod tests {
    use super::snippets;

    /// Each JSON snippet is what its client's documentation says its file holds: Claude
    /// Desktop's `claude_desktop_config.json` launches commands only (a `url` entry there is
    /// ignored), Cursor's `mcpServers` take `url` and `headers`, VS Code's `servers` an
    /// `http` type.
    #[test]
    fn every_snippet_is_what_its_client_accepts() {
        let all = snippets("https://rmm.example.com");
        let json = |id: &str| -> serde_json::Value {
            let s = all
                .iter()
                .find(|s| s.id == id)
                .unwrap_or_else(|| panic!("{id}"));
            serde_json::from_str(&s.text).unwrap_or_else(|e| panic!("{id}: {e}: {}", s.text))
        };
        for id in ["claude-desktop", "stdio"] {
            let server = &json(id)["mcpServers"]["breeze"];
            assert_eq!(server["command"], "breeze", "{id}");
            assert_eq!(server["args"], serde_json::json!(["mcp", "stdio"]), "{id}");
            assert!(
                server.get("url").is_none() && server.get("headers").is_none(),
                "{id}"
            );
            assert_eq!(server["env"]["BREEZE_URL"], "https://rmm.example.com");
        }
        let cursor = &json("cursor")["mcpServers"]["breeze"];
        assert_eq!(cursor["url"], "https://rmm.example.com/mcp");
        assert!(cursor["headers"]["X-API-Key"].is_string());
        let vscode = &json("vscode")["servers"]["breeze"];
        assert_eq!(
            (vscode["type"].as_str(), vscode["url"].as_str()),
            (Some("http"), Some("https://rmm.example.com/mcp"))
        );
        let desktop = all
            .iter()
            .find(|s| s.id == "claude-desktop")
            .map(|s| &s.how);
        assert!(
            desktop.is_some_and(|h| h.contains("Connectors")),
            "the remote way is a connector"
        );
    }
}
