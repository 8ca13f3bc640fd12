//! Discovery documents as serde types: authorization server metadata (RFC 8414, also served
//! at the OpenID configuration paths clients probe) and protected resource metadata
//! (RFC 9728).

use serde::{Deserialize, Serialize};

use crate::scope::{ALL_SCOPES, RESOURCE_SCOPES};

/// RFC 8414 authorization server metadata.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuthorizationServerMetadata {
    pub issuer: String,
    pub authorization_endpoint: String,
    pub token_endpoint: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub registration_endpoint: Option<String>,
    pub revocation_endpoint: String,
    pub introspection_endpoint: String,
    pub jwks_uri: String,
    pub scopes_supported: Vec<String>,
    pub response_types_supported: Vec<String>,
    pub response_modes_supported: Vec<String>,
    pub grant_types_supported: Vec<String>,
    pub token_endpoint_auth_methods_supported: Vec<String>,
    pub revocation_endpoint_auth_methods_supported: Vec<String>,
    pub code_challenge_methods_supported: Vec<String>,
    /// RFC 9207: `iss` is in every authorization response.
    pub authorization_response_iss_parameter_supported: bool,
    /// Clients may use an https URL naming their metadata document as `client_id`.
    pub client_id_metadata_document_supported: bool,
    pub prompt_values_supported: Vec<String>,
}

/// RFC 9728 protected resource metadata.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProtectedResourceMetadata {
    pub resource: String,
    pub authorization_servers: Vec<String>,
    pub scopes_supported: Vec<String>,
    pub bearer_methods_supported: Vec<String>,
    pub resource_name: String,
}

fn strings(s: &[&str]) -> Vec<String> {
    s.iter().map(|s| (*s).to_owned()).collect()
}

impl AuthorizationServerMetadata {
    /// The metadata of the server at `issuer` (an origin, endpoints at its root).
    pub fn new(issuer: &str, registration: bool) -> Self {
        let at = |p: &str| format!("{issuer}{p}");
        Self {
            issuer: issuer.to_owned(),
            authorization_endpoint: at("/oauth/auth"),
            token_endpoint: at("/oauth/token"),
            registration_endpoint: registration.then(|| at("/oauth/reg")),
            revocation_endpoint: at("/oauth/token/revocation"),
            introspection_endpoint: at("/oauth/token/introspection"),
            jwks_uri: at("/.well-known/jwks.json"),
            scopes_supported: strings(&ALL_SCOPES),
            response_types_supported: strings(&["code"]),
            response_modes_supported: strings(&["query"]),
            grant_types_supported: strings(&["authorization_code", "refresh_token"]),
            token_endpoint_auth_methods_supported: strings(&["none"]),
            revocation_endpoint_auth_methods_supported: strings(&["none"]),
            code_challenge_methods_supported: strings(&["S256"]),
            authorization_response_iss_parameter_supported: true,
            client_id_metadata_document_supported: true,
            prompt_values_supported: strings(&["none", "login", "consent"]),
        }
    }
}

impl ProtectedResourceMetadata {
    /// The metadata of `resource`, protected by `issuer`. `offline_access` is not listed
    /// (SEP-2207: it belongs to the authorization server alone).
    pub fn new(resource: &str, issuer: &str) -> Self {
        Self {
            resource: resource.to_owned(),
            authorization_servers: vec![issuer.to_owned()],
            scopes_supported: strings(&RESOURCE_SCOPES),
            bearer_methods_supported: strings(&["header"]),
            resource_name: "Breeze RMM".to_owned(),
        }
    }
}
