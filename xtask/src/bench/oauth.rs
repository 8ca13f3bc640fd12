//! An OAuth access token for the benchmark's Bearer run, obtained the way an MCP client does
//! against a demo started with OAuth and anonymous registration: register (DCR), sign in as the
//! demo admin, load the consent page, approve it, exchange the code (PKCE S256).

use std::time::Duration;

use anyhow::Context;
use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD as B64};
use rand::{Rng, distributions::Alphanumeric};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// The settings a `breeze demo` needs for [`access_token`] to work.
pub(super) const DEMO_ENV: [(&str, &str); 3] = [
    ("MCP_OAUTH_ENABLED", "true"),
    ("OAUTH_DCR_ENABLED", "true"),
    ("OAUTH_DCR_ALLOW_ANONYMOUS", "true"),
];

const REDIRECT: &str = "http://127.0.0.1:9/callback";

/// The first `name=value` of the response's `Set-Cookie`s for `name`.
fn cookie(resp: &reqwest::Response, name: &str) -> Option<String> {
    resp.headers()
        .get_all(reqwest::header::SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with(&format!("{name}=")))
        .and_then(|v| v.split(';').next())
        .map(str::to_owned)
}

/// The value of the consent page's hidden field `name`, or its first organization option.
fn field(html: &str, marker: &str) -> anyhow::Result<String> {
    let start = html
        .find(marker)
        .with_context(|| format!("no {marker} on the consent page"))?
        + marker.len();
    let end = html[start..].find('"').context("unterminated attribute")?;
    Ok(html[start..start + end].replace("&amp;", "&"))
}

/// An access token (`mcp:read`) of the demo admin in the demo's organization, from the server
/// at `base` (its MCP endpoint `mcp_url`).
pub(super) fn access_token(base: &str, mcp_url: &str, demo: &Value) -> anyhow::Result<String> {
    let email = demo["admin"]["email"]
        .as_str()
        .context("demo admin email")?;
    let password = demo["admin"]["password"]
        .as_str()
        .context("demo admin password")?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .redirect(reqwest::redirect::Policy::none())
            .build()?;
        let reg: Value = http
            .post(format!("{base}/oauth/reg"))
            .json(
                &json!({ "client_name": "breeze bench", "redirect_uris": [REDIRECT],
                           "token_endpoint_auth_method": "none" }),
            )
            .send()
            .await?
            .error_for_status()
            .context("registration (is the demo started with OAuth?)")?
            .json()
            .await?;
        let client_id = reg["client_id"].as_str().context("client_id")?.to_owned();
        let login = http
            .post(format!("{base}/api/v1/auth/login"))
            .json(&json!({ "email": email, "password": password }))
            .send()
            .await?
            .error_for_status()
            .context("sign-in")?;
        let session = cookie(&login, "breeze_session").context("session cookie")?;
        let verifier: String = rand::thread_rng()
            .sample_iter(&Alphanumeric)
            .take(64)
            .map(char::from)
            .collect();
        let challenge = B64.encode(Sha256::digest(verifier.as_bytes()));
        let params = [
            ("response_type", "code"),
            ("client_id", client_id.as_str()),
            ("redirect_uri", REDIRECT),
            ("code_challenge", challenge.as_str()),
            ("code_challenge_method", "S256"),
            ("resource", mcp_url),
            ("scope", "mcp:read"),
            ("state", "bench"),
        ];
        let page = http
            .get(format!("{base}/oauth/auth"))
            .query(&params)
            .header("cookie", &session)
            .send()
            .await?
            .error_for_status()
            .context("consent page")?;
        let consent = cookie(&page, "breeze_consent")
            .or_else(|| cookie(&page, "__Host-breeze_consent"))
            .context("consent cookie")?;
        let html = page.text().await?;
        let mut form: Vec<(&str, String)> =
            params.iter().map(|(k, v)| (*k, (*v).to_owned())).collect();
        form.push(("csrf", field(&html, "name=\"csrf\" value=\"")?));
        form.push((
            "consent_token",
            field(&html, "name=\"consent_token\" value=\"")?,
        ));
        form.push(("org_id", field(&html, "<option value=\"")?));
        form.push(("decision", "approve".to_owned()));
        let approved = http
            .post(format!("{base}/oauth/auth"))
            .header("cookie", format!("{session}; {consent}"))
            .form(&form)
            .send()
            .await?;
        let location = approved
            .headers()
            .get(reqwest::header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .with_context(|| format!("consent answered {}", approved.status()))?;
        let code = url_param(location, "code").context("no code in the redirect")?;
        let token: Value = http
            .post(format!("{base}/oauth/token"))
            .form(&[
                ("grant_type", "authorization_code"),
                ("client_id", client_id.as_str()),
                ("code", code.as_str()),
                ("redirect_uri", REDIRECT),
                ("code_verifier", verifier.as_str()),
                ("resource", mcp_url),
            ])
            .send()
            .await?
            .error_for_status()
            .context("token exchange")?
            .json()
            .await?;
        Ok(token["access_token"]
            .as_str()
            .context("access_token")?
            .to_owned())
    })
}

/// Query parameter `name` of `location`.
fn url_param(location: &str, name: &str) -> Option<String> {
    let query = location.split_once('?')?.1;
    query.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=')?;
        (k == name).then(|| {
            v.replace("%2F", "/")
                .replace("%2B", "+")
                .replace("%3D", "=")
        })
    })
}
