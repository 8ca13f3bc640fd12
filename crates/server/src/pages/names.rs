//! Readable names for the actors pages show: an API key by its name, a connected app (OAuth
//! grant) by its client's name, a person by name, the AI assistant, the system's workers —
//! instead of `kind:uuid`. Looked up once per page for the distinct actors on it: the
//! organization's keys in one query, each distinct person or grant once.

use std::collections::{HashMap, HashSet};

use breeze_core::{ApiKeyId, GrantId, OrgId, UserId};

use crate::AppState;

/// The names of a page's actors (`kind:id` → what a person reads).
#[derive(Default)]
pub(crate) struct Names {
    map: HashMap<String, String>,
    /// People's addresses, for the pages that show who exactly (approvals).
    emails: HashMap<UserId, String>,
}

/// The most distinct people or grants one page looks up (a page shows at most a few dozen
/// rows; past this, the id is shown).
const MAX_LOOKUPS: usize = 100;

impl Names {
    /// Names for `actors` (each `kind:id`), as seen from organization `org`: a key or grant of
    /// another organization keeps its id.
    pub(crate) async fn load(
        state: &AppState,
        org: OrgId,
        actors: impl IntoIterator<Item = String>,
    ) -> Self {
        let distinct: HashSet<String> = actors.into_iter().collect();
        let mut map = HashMap::new();
        let mut emails = HashMap::new();
        if distinct.iter().any(|a| a.starts_with("api_key:"))
            && let Ok(keys) = state.store.org(org).api_keys().list_api_keys().await
        {
            for k in keys {
                map.insert(format!("api_key:{}", k.id), format!("key “{}”", k.name));
            }
        }
        let mut lookups = 0;
        for a in &distinct {
            let Some((kind, id)) = a.split_once(':') else {
                continue;
            };
            let Ok(uuid) = id.parse::<uuid::Uuid>() else {
                continue;
            };
            if !matches!(kind, "user" | "oauth_grant") || lookups >= MAX_LOOKUPS {
                continue;
            }
            lookups += 1;
            match kind {
                "user" => {
                    if let Ok(u) = state.store.get_user(UserId(uuid)).await {
                        map.insert(a.clone(), u.name);
                        emails.insert(u.id, u.email);
                    }
                }
                _ => {
                    if let Ok(Some((g, _))) = state.store.find_oauth_grant(GrantId(uuid)).await
                        && g.org_id == org
                    {
                        map.insert(a.clone(), format!("app “{}”", g.client_name));
                    }
                }
            }
        }
        Self { map, emails }
    }

    /// What a person reads for `raw` (`kind:id`).
    pub(crate) fn of(&self, raw: &str) -> String {
        if let Some(n) = self.map.get(raw) {
            return n.clone();
        }
        match raw.split_once(':') {
            Some(("system", what)) => format!("system ({})", what.replace(['-', '_'], " ")),
            Some(("ai_chat", _)) => "Breeze assistant".to_owned(),
            _ => raw.to_owned(),
        }
    }

    /// A person as `Name <email>` (their id when unknown).
    pub(crate) fn person(&self, id: UserId) -> String {
        match (self.map.get(&format!("user:{id}")), self.emails.get(&id)) {
            (Some(name), Some(email)) => format!("{name} <{email}>"),
            _ => id.to_string(),
        }
    }

    /// The name of API key `id` (its id when unknown).
    pub(crate) fn key(&self, id: ApiKeyId) -> String {
        self.of(&format!("api_key:{id}"))
    }
}
