//! Clients: Dynamic Client Registration (RFC 7591) requests and client ID metadata documents,
//! both validated into one [`ClientInfo`].
//!
//! Every client is public: a registration asking for `client_secret_post` (Claude's does) or
//! any other method is answered `201` with `token_endpoint_auth_method: none` and no secret —
//! the method is overridden, never refused (RFC 7591 §3.2.1 lets the server choose). A
//! registration naming a `software_id` or `software_statement` is refused, as are unsafe
//! redirect URIs and grant or response types other than the code flow's. A metadata document
//! must name itself as `client_id`, carry no secret, and allow `none` (a `private_key_jwt`
//! document that also lists `none` is negotiated down to it).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::{OAuthError, OAuthErrorCode, redirect};

/// The most redirect URIs one client may register.
pub const MAX_REDIRECT_URIS: usize = 10;
/// The longest client name kept.
pub const MAX_CLIENT_NAME: usize = 200;

/// A client as the authorization endpoint needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientInfo {
    pub client_id: String,
    pub client_name: String,
    pub redirect_uris: Vec<String>,
}

impl ClientInfo {
    /// The registered redirect URI `requested` matches, if any.
    pub fn redirect_for(&self, requested: &str) -> Option<&str> {
        self.redirect_uris
            .iter()
            .find(|r| redirect::matches(r, requested))
            .map(String::as_str)
    }
}

/// An RFC 7591 registration request; unknown members are kept and ignored.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct RegistrationRequest {
    #[serde(default)]
    pub redirect_uris: Vec<String>,
    pub token_endpoint_auth_method: Option<String>,
    pub grant_types: Option<Vec<String>>,
    pub response_types: Option<Vec<String>>,
    pub client_name: Option<String>,
    pub client_uri: Option<String>,
    pub scope: Option<String>,
    pub software_id: Option<String>,
    pub software_statement: Option<String>,
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

/// The registration response (RFC 7591 §3.2.1): always a public client.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegistrationResponse {
    pub client_id: String,
    pub client_id_issued_at: i64,
    pub client_name: String,
    pub redirect_uris: Vec<String>,
    pub grant_types: Vec<String>,
    pub response_types: Vec<String>,
    pub token_endpoint_auth_method: String,
}

fn metadata_error(code: OAuthErrorCode, msg: impl Into<String>) -> OAuthError {
    OAuthError::protocol(code, msg)
}

fn check_redirects(uris: &[String]) -> Result<(), OAuthError> {
    if uris.is_empty() {
        return Err(metadata_error(
            OAuthErrorCode::InvalidRedirectUri,
            "redirect_uris is required and may not be empty",
        ));
    }
    if uris.len() > MAX_REDIRECT_URIS {
        return Err(metadata_error(
            OAuthErrorCode::InvalidRedirectUri,
            format!("at most {MAX_REDIRECT_URIS} redirect_uris"),
        ));
    }
    for u in uris {
        redirect::validate(u).map_err(|m| metadata_error(OAuthErrorCode::InvalidRedirectUri, m))?;
    }
    Ok(())
}

fn client_name(name: Option<&str>) -> Result<String, OAuthError> {
    let name = name.map(str::trim).unwrap_or_default();
    if name.chars().count() > MAX_CLIENT_NAME {
        return Err(metadata_error(
            OAuthErrorCode::InvalidClientMetadata,
            format!("client_name longer than {MAX_CLIENT_NAME} characters"),
        ));
    }
    if name.chars().any(|c| c.is_control() || is_bidi_control(c)) {
        return Err(metadata_error(
            OAuthErrorCode::InvalidClientMetadata,
            "client_name may not contain control or bidirectional formatting characters",
        ));
    }
    Ok(name.to_owned())
}

/// Whether `c` reorders, breaks or hides text around it: the bidirectional embeddings,
/// overrides and isolates (U+202A–U+202E, U+2066–U+2069), the marks (U+200E, U+200F, U+061C),
/// the line and paragraph separators (U+2028, U+2029: not control characters, yet they break a
/// line), and the invisible joiners, separators and operators a name could hide behind
/// (U+180E, U+200B–U+200D, U+2060–U+2064, U+FEFF).
pub fn is_bidi_control(c: char) -> bool {
    matches!(
        c,
        '\u{061C}'
            | '\u{180E}'
            | '\u{200B}'..='\u{200F}'
            | '\u{2028}'..='\u{202E}'
            | '\u{2060}'..='\u{2064}'
            | '\u{2066}'..='\u{2069}'
            | '\u{FEFF}'
    )
}

/// A client name as a person may be shown it: without bidirectional controls or invisible
/// characters (a name stored before they were refused, or from elsewhere), and without control
/// characters. The page still isolates it (`<bdi>`), so even right-to-left text in it cannot
/// reorder what follows.
pub fn display_name(name: &str) -> String {
    name.chars()
        .filter(|c| !c.is_control() && !is_bidi_control(*c))
        .collect()
}
/// The setting that lets a registration carrying `software_id` through (the field ignored).
pub const IGNORE_SOFTWARE_ID_SETTING: &str = "OAUTH_DCR_IGNORE_SOFTWARE_ID";

/// Validates a registration request into the client to store (its id chosen by the caller).
///
/// A `software_id` is refused unless `ignore_software_id`: it cannot be verified, so accepting
/// it silently would let any client claim to be another. With `ignore_software_id` the field is
/// dropped (never stored, never shown). A `software_statement` is always refused: it is a
/// signed claim this server does not check.
pub fn validate_registration(
    req: &RegistrationRequest,
    ignore_software_id: bool,
) -> Result<(String, Vec<String>), OAuthError> {
    if req.software_statement.is_some() {
        return Err(metadata_error(
            OAuthErrorCode::InvalidClientMetadata,
            "software_statement is not accepted: this server does not verify signed statements",
        ));
    }
    if req.software_id.is_some() && !ignore_software_id {
        return Err(metadata_error(
            OAuthErrorCode::InvalidClientMetadata,
            format!(
                "software_id is not accepted: this server cannot verify it, so it refuses \
                 registrations naming one (mcp-remote sends one by default). An administrator \
                 can set {IGNORE_SOFTWARE_ID_SETTING}=true to accept such registrations with \
                 the field ignored"
            ),
        ));
    }
    check_redirects(&req.redirect_uris)?;
    if let Some(g) = &req.grant_types
        && let Some(bad) = g
            .iter()
            .find(|g| !matches!(g.as_str(), "authorization_code" | "refresh_token"))
    {
        return Err(metadata_error(
            OAuthErrorCode::InvalidClientMetadata,
            format!("grant type {bad:?} is not supported (authorization_code, refresh_token)"),
        ));
    }
    if let Some(r) = &req.response_types
        && r.iter().any(|r| r != "code")
    {
        return Err(metadata_error(
            OAuthErrorCode::InvalidClientMetadata,
            "only the code response type is supported",
        ));
    }
    let name = client_name(req.client_name.as_deref())?;
    Ok((name, req.redirect_uris.clone()))
}

/// Validates a fetched client ID metadata document for `client_id` (its URL).
pub fn validate_document(client_id: &str, body: &[u8]) -> Result<ClientInfo, OAuthError> {
    let invalid = |m: &str| {
        metadata_error(
            OAuthErrorCode::InvalidClient,
            format!("client metadata document: {m}"),
        )
    };
    if body.len() > crate::egress::MAX_DOCUMENT_BYTES {
        return Err(invalid("larger than 5 KB"));
    }
    let doc: Map<String, Value> =
        serde_json::from_slice(body).map_err(|_| invalid("not a JSON object"))?;
    if doc.get("client_id").and_then(Value::as_str) != Some(client_id) {
        return Err(invalid("its client_id is not the URL it was fetched from"));
    }
    if doc.contains_key("client_secret") || doc.contains_key("client_secret_expires_at") {
        return Err(invalid("a metadata document may not carry a client secret"));
    }
    let method = doc
        .get("token_endpoint_auth_method")
        .and_then(Value::as_str)
        .unwrap_or("none");
    if method != "none" {
        let also_none = doc
            .get("token_endpoint_auth_methods_supported")
            .and_then(Value::as_array)
            .is_some_and(|m| m.iter().any(|v| v.as_str() == Some("none")));
        if !also_none {
            return Err(invalid(&format!(
                "token_endpoint_auth_method {method} is not supported; only public clients (none)"
            )));
        }
    }
    let redirect_uris: Vec<String> = doc
        .get("redirect_uris")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    check_redirects(&redirect_uris).map_err(|e| invalid(&e.to_string()))?;
    if let Some(g) = doc.get("grant_types").and_then(Value::as_array)
        && !g.iter().any(|g| g.as_str() == Some("authorization_code"))
    {
        return Err(invalid("grant_types must include authorization_code"));
    }
    let name = client_name(doc.get("client_name").and_then(Value::as_str))
        .map_err(|e| invalid(&e.to_string()))?;
    Ok(ClientInfo {
        client_id: client_id.to_owned(),
        client_name: name,
        redirect_uris,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_reorder_break_or_hide_text_are_refused_and_never_shown() {
        for c in [
            '\u{061C}', '\u{180E}', '\u{200B}', '\u{200F}', '\u{2028}', '\u{2029}', '\u{202E}',
            '\u{2061}', '\u{2064}', '\u{2066}', '\u{FEFF}', '\u{7}',
        ] {
            let name = format!("Claude{c}Desktop");
            assert!(client_name(Some(&name)).is_err(), "U+{:04X}", c as u32);
            assert_eq!(display_name(&name), "ClaudeDesktop", "U+{:04X}", c as u32);
        }
        assert_eq!(
            client_name(Some("Claude Desktop (Mac)")).unwrap(),
            "Claude Desktop (Mac)"
        );
        assert_eq!(client_name(Some("Клод 日本")).unwrap(), "Клод 日本");
    }
}
