//! From a stored [`Credential`] to the headers a request to the source carries.
//!
//! Headers are made only for a URL on the source's base origin ([`Authorizer::headers_for`]):
//! a document or token endpoint elsewhere gets none. OAuth2 client credentials fetch a token
//! from the configured token URL (through the same egress guard, no redirects), cache it
//! until shortly before it expires (time from the injected [`Clock`]) and fetch again after.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use base64::{Engine, engine::general_purpose::STANDARD as B64};
use breeze_core::Clock;
use chrono::{DateTime, Utc};
use reqwest13::header::{AUTHORIZATION, HeaderName, HeaderValue};
use url::Url;

use crate::{
    egress::{self, Egress, EgressError},
    vault::Credential,
};

/// Why no headers could be made.
#[derive(Debug, Clone, thiserror::Error)]
pub enum AuthError {
    #[error("the API key header name {0:?} is not a valid header name")]
    BadHeaderName(String),
    #[error("the credential holds characters a header cannot carry")]
    BadHeaderValue,
    #[error("the OAuth2 token endpoint: {0}")]
    Token(String),
    #[error(transparent)]
    Egress(#[from] EgressError),
}

/// Headers a request carries.
pub type Headers = Vec<(HeaderName, HeaderValue)>;

#[derive(Debug, Clone)]
struct Token {
    value: String,
    expires: DateTime<Utc>,
}

/// Makes a source's authentication headers; caches OAuth2 tokens per source. Cheap to clone.
#[derive(Clone)]
pub struct Authorizer {
    egress: Egress,
    clock: Arc<dyn Clock>,
    tokens: Arc<Mutex<HashMap<String, Token>>>,
}

impl std::fmt::Debug for Authorizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Authorizer")
    }
}

fn value(text: &str) -> Result<HeaderValue, AuthError> {
    let mut v = HeaderValue::from_str(text).map_err(|_| AuthError::BadHeaderValue)?;
    v.set_sensitive(true);
    Ok(v)
}

impl Authorizer {
    pub fn new(egress: Egress, clock: Arc<dyn Clock>) -> Self {
        Self {
            egress,
            clock,
            tokens: Arc::default(),
        }
    }

    /// The headers for a request to `target` of the source `source_id` whose base URL is
    /// `base`: none unless `target` is on the base's origin.
    pub async fn headers_for(
        &self,
        source_id: &str,
        base: &Url,
        target: &Url,
        credential: &Credential,
    ) -> Result<Headers, AuthError> {
        if !egress::same_origin(base, target) {
            return Ok(Vec::new());
        }
        Ok(match credential {
            Credential::None => Vec::new(),
            Credential::Bearer { token } => {
                vec![(AUTHORIZATION, value(&format!("Bearer {token}"))?)]
            }
            Credential::ApiKeyHeader { header, value: v } => {
                let name = HeaderName::from_bytes(header.as_bytes())
                    .map_err(|_| AuthError::BadHeaderName(header.clone()))?;
                vec![(name, value(v)?)]
            }
            Credential::Basic { username, password } => {
                let basic = B64.encode(format!("{username}:{password}"));
                vec![(AUTHORIZATION, value(&format!("Basic {basic}"))?)]
            }
            Credential::OAuth2ClientCredentials { .. } => {
                let token = self.token(source_id, credential).await?;
                vec![(AUTHORIZATION, value(&format!("Bearer {token}"))?)]
            }
        })
    }

    /// Forgets a source's cached token (its credential changed, or the source refused it).
    pub fn forget(&self, source_id: &str) {
        if let Ok(mut t) = self.tokens.lock() {
            t.remove(source_id);
        }
    }

    async fn token(&self, source_id: &str, credential: &Credential) -> Result<String, AuthError> {
        let Credential::OAuth2ClientCredentials {
            token_url,
            client_id,
            client_secret,
            scope,
        } = credential
        else {
            return Err(AuthError::Token("not an OAuth2 credential".into()));
        };
        let now = self.clock.now();
        if let Ok(t) = self.tokens.lock()
            && let Some(t) = t.get(source_id)
            && t.expires > now
        {
            return Ok(t.value.clone());
        }
        let url = self.egress.check_url(token_url)?;
        let mut form = vec![("grant_type", "client_credentials")];
        if let Some(s) = scope {
            form.push(("scope", s));
        }
        let body = form
            .iter()
            .map(|(k, v)| {
                format!(
                    "{k}={}",
                    url::form_urlencoded::byte_serialize(v.as_bytes()).collect::<String>()
                )
            })
            .collect::<Vec<_>>()
            .join("&");
        let basic = B64.encode(format!("{client_id}:{client_secret}"));
        let response = self
            .egress
            .client()
            .post(url)
            .header(AUTHORIZATION, value(&format!("Basic {basic}"))?)
            .header("content-type", "application/x-www-form-urlencoded")
            .header("accept", "application/json")
            .body(body)
            .timeout(egress::CALL_TIMEOUT)
            .send()
            .await
            .map_err(|e| egress::http_error(&e))?;
        egress::refuse_redirect(&response)?;
        let status = response.status();
        let body = egress::read_capped(response, 64 * 1024).await?;
        if !status.is_success() {
            return Err(AuthError::Token(format!("answered {status}")));
        }
        let answer: serde_json::Value = serde_json::from_slice(&body)
            .map_err(|_| AuthError::Token("the answer is not JSON".into()))?;
        let Some(access) = answer["access_token"].as_str() else {
            return Err(AuthError::Token("the answer has no access_token".into()));
        };
        // Refreshed a little before the server says it expires, so no call carries a token
        // that dies in flight; one without `expires_in` is kept for five minutes.
        let lifetime = answer["expires_in"]
            .as_i64()
            .unwrap_or(300)
            .clamp(0, 86_400);
        let expires = now + chrono::Duration::seconds((lifetime - 30).max(0));
        if let Ok(mut t) = self.tokens.lock() {
            t.insert(
                source_id.to_owned(),
                Token {
                    value: access.to_owned(),
                    expires,
                },
            );
        }
        Ok(access.to_owned())
    }
}
