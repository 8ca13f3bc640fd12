//! Notification channels: where raised and resolved alerts are told (email, webhook,
//! in-app).

use super::*;

impl crate::OrgAlerts<'_> {
    // ---- notification channels -------------------------------------------------------------

    /// Creates a notification channel. Email needs `{"to": [addresses]}` (1–20), a webhook
    /// `{"url": "http(s)://..."}` and a secret of at least 16 characters; in-app nothing.
    pub async fn create_channel(
        &self,
        new: NewChannel,
        audit: AuditEvent,
    ) -> Result<NotificationChannel> {
        check_text("name", &new.name, MAX_NAME_CHARS)?;
        match new.kind {
            ChannelKind::Email => {
                let to = new
                    .config
                    .get("to")
                    .and_then(Value::as_array)
                    .ok_or_else(|| StoreError::Invalid("an email channel needs \"to\"".into()))?;
                if to.is_empty() || to.len() > 20 {
                    return Err(StoreError::Invalid(
                        "an email channel needs 1-20 recipients".into(),
                    ));
                }
                for addr in to {
                    let ok = addr.as_str().is_some_and(|a| {
                        a.len() <= 254
                            && a.split_once('@').is_some_and(|(l, d)| {
                                !l.is_empty() && d.contains('.') && !a.contains(['\r', '\n', ' '])
                            })
                    });
                    if !ok {
                        return Err(StoreError::Invalid(format!(
                            "{addr} is not an email address"
                        )));
                    }
                }
            }
            ChannelKind::Webhook => {
                let url = new.config.get("url").and_then(Value::as_str).unwrap_or("");
                if !(url.starts_with("https://") || url.starts_with("http://")) || url.len() > 2048
                {
                    return Err(StoreError::Invalid(
                        "a webhook channel needs an http(s) \"url\" of at most 2048 characters"
                            .into(),
                    ));
                }
                if new.secret.as_deref().is_none_or(|s| s.len() < 16) {
                    return Err(StoreError::Invalid(
                        "a webhook channel needs a signing secret of at least 16 characters".into(),
                    ));
                }
            }
            ChannelKind::InApp => {}
        }
        let now = self.store.clock.now();
        let id = Uuid::now_v7();
        let mut tx = Tx::begin_in(self).await?;
        sql(format!(
            "INSERT INTO notification_channels ({CHANNEL_COLUMNS}) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)"
        ))
        .bind(id)
        .bind(self.org)
        .bind(new.name.as_str())
        .bind(new.kind.as_str())
        .bind(Arg::json(&new.config))
        .bind(new.secret.as_deref())
        .bind(true)
        .bind(now)
        .execute(&mut tx)
        .await
        .map_err(|e| e.conflict_as(|| format!("a channel named {:?} already exists", new.name)))?;
        let audit = audit
            .org(self.org)
            .resource(id)
            .details(serde_json::json!({ "name": new.name, "kind": new.kind }));
        audit::insert(&mut tx, &audit, now).await?;
        tx.commit().await?;
        self.get_channel(id).await
    }

    /// One notification channel of this organization.
    pub async fn get_channel(&self, id: Uuid) -> Result<NotificationChannel> {
        sql(format!(
            "SELECT {CHANNEL_COLUMNS} FROM notification_channels WHERE id = $1 AND org_id = $2"
        ))
        .bind(id)
        .bind(self.org)
        .fetch_optional(self)
        .await?
        .ok_or(StoreError::NotFound("notification channel"))
    }

    /// The notification channels, by name.
    pub async fn list_channels(&self) -> Result<Vec<NotificationChannel>> {
        sql(format!(
            "SELECT {CHANNEL_COLUMNS} FROM notification_channels WHERE org_id = $1 ORDER BY name, id"
        ))
        .bind(self.org)
        .fetch_all(self)
        .await
    }

    /// Deletes a notification channel. A channel a rule in use still names is a conflict:
    /// change those rules first.
    pub async fn delete_channel(&self, id: Uuid, audit: AuditEvent) -> Result<NotificationChannel> {
        let channel = self.get_channel(id).await?;
        let users: Vec<String> = self
            .list_rules()
            .await?
            .into_iter()
            .filter(|r| r.channel_ids.contains(&id))
            .map(|r| r.name)
            .collect();
        if !users.is_empty() {
            return Err(StoreError::Conflict(format!(
                "the channel is used by alert rule(s) {}",
                users.join(", ")
            )));
        }
        let now = self.store.clock.now();
        let mut tx = Tx::begin_in(self).await?;
        sql("DELETE FROM notification_channels WHERE id = $1 AND org_id = $2")
            .bind(id)
            .bind(self.org)
            .execute(&mut tx)
            .await?;
        let audit = audit
            .org(self.org)
            .resource(id)
            .details(serde_json::json!({ "name": channel.name, "kind": channel.kind }));
        audit::insert(&mut tx, &audit, now).await?;
        tx.commit().await?;
        Ok(channel)
    }
}
