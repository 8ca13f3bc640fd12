//! The script library: named scripts per organization, with language, category, body and
//! declared parameters. Executions are device commands that carry the script's id and name.

use breeze_core::{AuditEvent, Timestamp};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::{
    Result, StoreError, audit,
    sql::{Arg, Tx, escape_like, sql},
};

/// Languages a script can be written in.
pub const SCRIPT_LANGUAGES: [&str; 4] = ["bash", "sh", "python", "powershell"];

/// Largest script body accepted (256 KiB).
pub const MAX_SCRIPT_BYTES: usize = 256 * 1024;

const COLUMNS: &str = "id, org_id, name, description, language, category, body, parameters, \
    created_by, created_at, updated_at";

/// A parameter a script declares; callers pass values as arguments in declaration order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScriptParameter {
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub required: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<String>,
}

/// A stored script.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
#[serde(rename_all = "camelCase")]
pub struct Script {
    pub id: Uuid,
    pub org_id: breeze_core::OrgId,
    pub name: String,
    pub description: String,
    pub language: String,
    pub category: String,
    pub body: String,
    #[sqlx(json)]
    pub parameters: Vec<ScriptParameter>,
    pub created_by: String,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

/// A script to add.
#[derive(Debug, Clone)]
pub struct NewScript {
    pub name: String,
    pub description: String,
    pub language: String,
    pub category: String,
    pub body: String,
    pub parameters: Vec<ScriptParameter>,
    pub created_by: String,
}

fn validate(new: &NewScript) -> Result<()> {
    let name = new.name.trim();
    if name.is_empty() || name.len() > 200 {
        return Err(StoreError::Invalid(
            "a script needs a name of 1 to 200 characters".into(),
        ));
    }
    if !SCRIPT_LANGUAGES.contains(&new.language.as_str()) {
        return Err(StoreError::Invalid(format!(
            "unknown script language {:?} (expected one of {})",
            new.language,
            SCRIPT_LANGUAGES.join(", ")
        )));
    }
    if new.body.trim().is_empty() {
        return Err(StoreError::Invalid("the script body is empty".into()));
    }
    if new.body.len() > MAX_SCRIPT_BYTES {
        return Err(StoreError::Invalid(format!(
            "the script body is {} bytes; the limit is {MAX_SCRIPT_BYTES}",
            new.body.len()
        )));
    }
    let mut seen = std::collections::HashSet::new();
    for p in &new.parameters {
        if p.name.trim().is_empty() || !seen.insert(p.name.as_str()) {
            return Err(StoreError::Invalid(format!(
                "parameter names must be non-empty and unique ({:?})",
                p.name
            )));
        }
    }
    Ok(())
}

impl crate::OrgScripts<'_> {
    /// Adds a script to this organization's library, audited.
    pub async fn create_script(&self, new: NewScript, audit: AuditEvent) -> Result<Script> {
        validate(&new)?;
        let now = self.store.clock.now();
        let id = Uuid::now_v7();
        let name = new.name.trim().to_owned();
        let mut tx = Tx::begin_in(self).await?;
        sql(format!(
            "INSERT INTO scripts ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $10)"
        ))
        .bind(id)
        .bind(self.org)
        .bind(&name)
        .bind(&new.description)
        .bind(&new.language)
        .bind(&new.category)
        .bind(&new.body)
        .bind(Arg::json(&new.parameters))
        .bind(&new.created_by)
        .bind(now)
        .execute(&mut tx)
        .await
        .map_err(|e| e.conflict_as(|| format!("a script named {name:?} already exists")))?;
        let audit = audit.org(self.org).resource(id).details(serde_json::json!({
            "name": name, "language": new.language, "category": new.category,
            "bytes": new.body.len(),
        }));
        audit::insert(&mut tx, &audit, now).await?;
        tx.commit().await?;
        self.get_script(id).await
    }

    /// Replaces a script's name, description, language, category, body and parameters,
    /// audited (with the body's size before and after). Past executions keep the name they
    /// ran under; a run waiting for approval is pinned to the body it was asked with.
    pub async fn update_script(
        &self,
        id: Uuid,
        new: NewScript,
        audit: AuditEvent,
    ) -> Result<Script> {
        validate(&new)?;
        let before = self.get_script(id).await?;
        let now = self.store.clock.now();
        let name = new.name.trim().to_owned();
        let mut tx = Tx::begin_in(self).await?;
        sql(
            "UPDATE scripts SET name = $1, description = $2, language = $3, category = $4, \
             body = $5, parameters = $6, updated_at = $7 WHERE id = $8 AND org_id = $9",
        )
        .bind(&name)
        .bind(&new.description)
        .bind(&new.language)
        .bind(&new.category)
        .bind(&new.body)
        .bind(Arg::json(&new.parameters))
        .bind(now)
        .bind(id)
        .bind(self.org)
        .execute(&mut tx)
        .await
        .map_err(|e| e.conflict_as(|| format!("a script named {name:?} already exists")))?;
        let audit = audit.org(self.org).resource(id).details(serde_json::json!({
            "name": name, "previousName": before.name, "language": new.language,
            "category": new.category, "bytes": new.body.len(), "previousBytes": before.body.len(),
        }));
        audit::insert(&mut tx, &audit, now).await?;
        tx.commit().await?;
        self.get_script(id).await
    }

    /// One script of this organization.
    pub async fn get_script(&self, id: Uuid) -> Result<Script> {
        sql(format!(
            "SELECT {COLUMNS} FROM scripts WHERE id = $1 AND org_id = $2"
        ))
        .bind(id)
        .bind(self.org)
        .fetch_optional(self)
        .await?
        .ok_or(StoreError::NotFound("script"))
    }

    /// A script of this organization by id or exact name.
    pub async fn find_script(&self, id_or_name: &str) -> Result<Script> {
        if let Ok(id) = Uuid::parse_str(id_or_name) {
            return self.get_script(id).await;
        }
        sql(format!(
            "SELECT {COLUMNS} FROM scripts WHERE name = $1 AND org_id = $2"
        ))
        .bind(id_or_name)
        .bind(self.org)
        .fetch_optional(self)
        .await?
        .ok_or(StoreError::NotFound("script"))
    }

    /// This organization's scripts by name, optionally in one category or matching a search.
    pub async fn list_scripts(
        &self,
        category: Option<&str>,
        search: Option<&str>,
    ) -> Result<Vec<Script>> {
        let mut q = sql(format!("SELECT {COLUMNS} FROM scripts WHERE org_id = $1")).bind(self.org);
        if let Some(c) = category {
            let p = q.arg(c);
            q.push(&format!(" AND category = {p}"));
        }
        if let Some(s) = search {
            let p = q.arg(format!("%{}%", escape_like(&s.to_lowercase())));
            q.push(&format!(
                " AND (LOWER(name) LIKE {p} ESCAPE '\\' OR LOWER(description) LIKE {p} ESCAPE '\\')"
            ));
        }
        q.push(" ORDER BY name");
        q.fetch_all(self).await
    }

    /// Removes a script; past executions keep its name.
    pub async fn delete_script(&self, id: Uuid, audit: AuditEvent) -> Result<()> {
        let script = self.get_script(id).await?;
        let now = self.store.clock.now();
        let mut tx = Tx::begin_in(self).await?;
        sql("DELETE FROM scripts WHERE id = $1 AND org_id = $2")
            .bind(id)
            .bind(self.org)
            .execute(&mut tx)
            .await?;
        let audit = audit
            .org(self.org)
            .resource(id)
            .details(serde_json::json!({ "name": script.name }));
        audit::insert(&mut tx, &audit, now).await?;
        tx.commit().await
    }
}
