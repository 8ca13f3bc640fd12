//! An organization's additions to the protected paths (patterns no file or disk command may
//! reach on its devices; see `breeze_agent_proto::paths`). The built-in list is code, so
//! nothing here can remove from it; an organization replaces its own additions as a whole,
//! audited. Every file or disk command is queued with the additions of that moment
//! ([`crate::OrgCommands::create_command`]).

use breeze_agent_proto::paths::validate_additions;
use breeze_core::AuditEvent;

use crate::sql::{Target, sql};
use crate::{Result, StoreError, audit, sql::Arg, sql::Tx};

#[derive(sqlx::FromRow)]
struct PatternsRow {
    #[sqlx(json)]
    patterns: Vec<String>,
}

/// The additions of `org` read on `target` (a transaction when a command is being queued).
pub(crate) async fn load<'a>(
    target: impl Into<Target<'a>>,
    org: breeze_core::OrgId,
) -> Result<Vec<String>> {
    Ok(
        sql("SELECT patterns FROM org_protected_paths WHERE org_id = $1")
            .bind(org)
            .fetch_optional::<PatternsRow>(target)
            .await?
            .map(|r| r.patterns)
            .unwrap_or_default(),
    )
}

impl crate::OrgCommands<'_> {
    /// The organization's additions to the protected paths, in the order they were set.
    pub async fn protected_paths(&self) -> Result<Vec<String>> {
        load(self, self.org).await
    }

    /// Replaces the organization's additions with `patterns` (validated: absolute, no `.` or
    /// `..`, at most 64; duplicates dropped), audited with the list before and after. Answers
    /// the stored list.
    pub async fn set_protected_paths(
        &self,
        patterns: &[String],
        audit: AuditEvent,
    ) -> Result<Vec<String>> {
        let patterns = validate_additions(patterns).map_err(StoreError::Invalid)?;
        let now = self.store.clock.now();
        let mut tx = Tx::begin_in(self).await?;
        let before = load(&mut tx, self.org).await?;
        sql(
            "INSERT INTO org_protected_paths (org_id, patterns, updated_at) VALUES ($1, $2, $3) \
             ON CONFLICT (org_id) DO UPDATE SET patterns = excluded.patterns, \
             updated_at = excluded.updated_at",
        )
        .bind(self.org)
        .bind(Arg::json(&patterns))
        .bind(now)
        .execute(&mut tx)
        .await?;
        let audit = audit
            .org(self.org)
            .details(serde_json::json!({ "before": before, "after": patterns }));
        audit::insert(&mut tx, &audit, now).await?;
        tx.commit().await?;
        Ok(patterns)
    }
}
