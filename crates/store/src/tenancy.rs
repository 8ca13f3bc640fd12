//! Partners, organizations, sites and device groups.

use breeze_core::{
    AuditEvent, DeviceGroup, DeviceGroupId, DeviceId, OrgId, Organization, Partner, PartnerId,
    Site, SiteId, tenancy::validate_slug,
};

use crate::{
    Result, Store, StoreError, audit,
    sql::{Tx, sql},
};

const ORG_COLUMNS: &str = "id, partner_id, name, slug, created_at";
const SITE_COLUMNS: &str = "id, org_id, name, timezone, created_at";
const GROUP_COLUMNS: &str = "id, org_id, site_id, name, description, created_at";

fn check_slug(slug: &str) -> Result<()> {
    validate_slug(slug).map_err(|e| StoreError::Invalid(e.to_string()))
}

impl Store {
    /// Creates a partner and its built-in roles.
    pub async fn create_partner(
        &self,
        name: &str,
        slug: &str,
        audit: AuditEvent,
    ) -> Result<Partner> {
        check_slug(slug)?;
        let now = self.clock.now();
        let partner = Partner {
            id: PartnerId::new(),
            name: name.to_owned(),
            slug: slug.to_owned(),
            created_at: now,
        };
        let mut tx = Tx::begin(&self.pool).await?;
        sql("INSERT INTO partners (id, name, slug, created_at) VALUES ($1, $2, $3, $4)")
            .bind(partner.id)
            .bind(name)
            .bind(slug)
            .bind(now)
            .execute(&mut tx)
            .await
            .map_err(|e| {
                e.conflict_as(|| format!("a partner with slug {slug:?} already exists"))
            })?;
        crate::users::insert_builtin_roles(&mut tx, partner.id).await?;
        audit::insert(&mut tx, &audit.resource(partner.id), now).await?;
        tx.commit().await?;
        Ok(partner)
    }

    /// The partner with `id_or_slug`.
    pub async fn find_partner(&self, id_or_slug: &str) -> Result<Partner> {
        let by_id = id_or_slug.parse::<uuid::Uuid>().ok();
        sql("SELECT id, name, slug, created_at FROM partners WHERE id = $1 OR slug = $2")
            .bind(by_id)
            .bind(id_or_slug)
            .fetch_optional(self)
            .await?
            .ok_or(StoreError::NotFound("partner"))
    }

    /// Every partner, oldest first.
    pub async fn list_partners(&self) -> Result<Vec<Partner>> {
        sql("SELECT id, name, slug, created_at FROM partners ORDER BY created_at, id")
            .fetch_all(self)
            .await
    }

    /// Creates an organization under `partner`.
    pub async fn create_organization(
        &self,
        partner: PartnerId,
        name: &str,
        slug: &str,
        audit: AuditEvent,
    ) -> Result<Organization> {
        check_slug(slug)?;
        let now = self.clock.now();
        let org = Organization {
            id: OrgId::new(),
            partner_id: partner,
            name: name.to_owned(),
            slug: slug.to_owned(),
            created_at: now,
        };
        let mut tx = Tx::begin(&self.pool).await?;
        sql("INSERT INTO organizations (id, partner_id, name, slug, created_at) VALUES ($1, $2, $3, $4, $5)")
            .bind(org.id)
            .bind(partner)
            .bind(name)
            .bind(slug)
            .bind(now)
            .execute(&mut tx)
            .await
            .map_err(|e| e.conflict_as(|| format!("an organization with slug {slug:?} already exists")))?;
        audit::insert(&mut tx, &audit.org(org.id).resource(org.id), now).await?;
        tx.commit().await?;
        Ok(org)
    }

    /// The organization with id or slug `id_or_slug`.
    pub async fn find_organization(&self, id_or_slug: &str) -> Result<Organization> {
        let by_id = id_or_slug.parse::<uuid::Uuid>().ok();
        sql(format!(
            "SELECT {ORG_COLUMNS} FROM organizations WHERE id = $1 OR slug = $2"
        ))
        .bind(by_id)
        .bind(id_or_slug)
        .fetch_optional(self)
        .await?
        .ok_or(StoreError::NotFound("organization"))
    }

    /// The organizations of `partner`, by name.
    pub async fn list_organizations(&self, partner: PartnerId) -> Result<Vec<Organization>> {
        sql(format!(
            "SELECT {ORG_COLUMNS} FROM organizations WHERE partner_id = $1 ORDER BY name, id"
        ))
        .bind(partner)
        .fetch_all(self)
        .await
    }
}

/// Organization → partner, filled as organizations are first asked for.
///
/// Caching without expiry is sound because the pair never changes: an organization is created
/// under its partner, is never moved to another and is never deleted. Read-path tools ask for
/// the partner on every call (partner-wide policies, catalog, tickets), and the lookup was a
/// statement of its own each time.
#[derive(Debug, Default)]
pub(crate) struct PartnerOf(std::sync::RwLock<std::collections::HashMap<OrgId, PartnerId>>);

impl PartnerOf {
    fn get(&self, org: OrgId) -> Option<PartnerId> {
        self.0.read().ok()?.get(&org).copied()
    }

    fn remember(&self, org: OrgId, partner: PartnerId) {
        if let Ok(mut map) = self.0.write() {
            map.insert(org, partner);
        }
    }
}

impl crate::OrgTenancy<'_> {
    /// The partner this organization belongs to: read once, then from memory (an
    /// organization never moves between partners and is never deleted, so the memo cannot go
    /// stale).
    pub async fn partner_id(&self) -> Result<PartnerId> {
        if let Some(partner) = self.store.partners.get(self.org) {
            return Ok(partner);
        }
        let partner = self.organization().await?.partner_id;
        self.store.partners.remember(self.org, partner);
        Ok(partner)
    }

    /// This organization.
    pub async fn organization(&self) -> Result<Organization> {
        sql(format!(
            "SELECT {ORG_COLUMNS} FROM organizations WHERE id = $1"
        ))
        .bind(self.org)
        .fetch_optional(self)
        .await?
        .ok_or(StoreError::NotFound("organization"))
    }

    /// The organization's billing currency: what its drafts are in when they name none.
    pub async fn billing_currency(&self) -> Result<Option<breeze_core::Currency>> {
        let code: Option<(Option<String>,)> =
            sql("SELECT billing_currency FROM organizations WHERE id = $1")
                .bind(self.org)
                .fetch_optional(self)
                .await?;
        code.and_then(|(c,)| c)
            .map(|c| {
                breeze_core::Currency::parse(&c).map_err(|e| StoreError::Corrupt(e.to_string()))
            })
            .transpose()
    }

    /// Creates a site.
    pub async fn create_site(&self, name: &str, timezone: &str, audit: AuditEvent) -> Result<Site> {
        let now = self.store.clock.now();
        let site = Site {
            id: SiteId::new(),
            org_id: self.org,
            name: name.to_owned(),
            timezone: timezone.to_owned(),
            created_at: now,
        };
        let mut tx = Tx::begin_in(self).await?;
        sql("INSERT INTO sites (id, org_id, name, timezone, created_at) VALUES ($1, $2, $3, $4, $5)")
            .bind(site.id)
            .bind(self.org)
            .bind(name)
            .bind(timezone)
            .bind(now)
            .execute(&mut tx)
            .await
            .map_err(|e| e.conflict_as(|| format!("a site named {name:?} already exists")))?;
        audit::insert(&mut tx, &audit.org(self.org).resource(site.id), now).await?;
        tx.commit().await?;
        Ok(site)
    }

    /// The sites, by name.
    pub async fn list_sites(&self) -> Result<Vec<Site>> {
        sql(format!(
            "SELECT {SITE_COLUMNS} FROM sites WHERE org_id = $1 ORDER BY name, id"
        ))
        .bind(self.org)
        .fetch_all(self)
        .await
    }

    /// One site.
    pub async fn get_site(&self, id: SiteId) -> Result<Site> {
        sql(format!(
            "SELECT {SITE_COLUMNS} FROM sites WHERE id = $1 AND org_id = $2"
        ))
        .bind(id)
        .bind(self.org)
        .fetch_optional(self)
        .await?
        .ok_or(StoreError::NotFound("site"))
    }

    /// Creates a device group, optionally tied to a site of this organization.
    pub async fn create_group(
        &self,
        name: &str,
        site: Option<SiteId>,
        description: Option<&str>,
        audit: AuditEvent,
    ) -> Result<DeviceGroup> {
        if let Some(site) = site {
            self.get_site(site).await?;
        }
        let now = self.store.clock.now();
        let group = DeviceGroup {
            id: DeviceGroupId::new(),
            org_id: self.org,
            site_id: site,
            name: name.to_owned(),
            description: description.map(str::to_owned),
            created_at: now,
        };
        let mut tx = Tx::begin_in(self).await?;
        sql(
            "INSERT INTO device_groups (id, org_id, site_id, name, description, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(group.id)
        .bind(self.org)
        .bind(site)
        .bind(name)
        .bind(description)
        .bind(now)
        .execute(&mut tx)
        .await
        .map_err(|e| e.conflict_as(|| format!("a device group named {name:?} already exists")))?;
        audit::insert(&mut tx, &audit.org(self.org).resource(group.id), now).await?;
        tx.commit().await?;
        Ok(group)
    }

    /// The device groups, by name.
    pub async fn list_groups(&self) -> Result<Vec<DeviceGroup>> {
        sql(format!(
            "SELECT {GROUP_COLUMNS} FROM device_groups WHERE org_id = $1 ORDER BY name, id"
        ))
        .bind(self.org)
        .fetch_all(self)
        .await
    }

    /// One device group.
    pub async fn get_group(&self, id: DeviceGroupId) -> Result<DeviceGroup> {
        sql(format!(
            "SELECT {GROUP_COLUMNS} FROM device_groups WHERE id = $1 AND org_id = $2"
        ))
        .bind(id)
        .bind(self.org)
        .fetch_optional(self)
        .await?
        .ok_or(StoreError::NotFound("device group"))
    }

    /// Renames a group or changes its description (`None` keeps the current value).
    pub async fn update_group(
        &self,
        id: DeviceGroupId,
        name: Option<&str>,
        description: Option<&str>,
        audit: AuditEvent,
    ) -> Result<DeviceGroup> {
        let current = self.get_group(id).await?;
        let name = name.unwrap_or(&current.name);
        let description = description.or(current.description.as_deref());
        let now = self.store.clock.now();
        let mut tx = Tx::begin_in(self).await?;
        sql("UPDATE device_groups SET name = $1, description = $2 WHERE id = $3 AND org_id = $4")
            .bind(name)
            .bind(description)
            .bind(id)
            .bind(self.org)
            .execute(&mut tx)
            .await
            .map_err(|e| {
                e.conflict_as(|| format!("a device group named {name:?} already exists"))
            })?;
        audit::insert(&mut tx, &audit.org(self.org).resource(id), now).await?;
        tx.commit().await?;
        self.get_group(id).await
    }

    /// Deletes a group (its memberships go with it; the devices stay).
    pub async fn delete_group(&self, id: DeviceGroupId, audit: AuditEvent) -> Result<()> {
        let now = self.store.clock.now();
        let mut tx = Tx::begin_in(self).await?;
        audit::delete_row(&mut tx, self.org, "device_groups", id, "device group").await?;
        audit::insert(&mut tx, &audit.org(self.org).resource(id), now).await?;
        let committed = tx.commit().await;
        // Its memberships went with it.
        self.store.devices_changed(self.org);
        committed
    }

    /// The groups a device of this organization belongs to, by name.
    pub async fn groups_of_device(&self, device: DeviceId) -> Result<Vec<DeviceGroup>> {
        self.groups_of_device_query(device).fetch_all(self).await
    }

    fn groups_of_device_query(&self, device: DeviceId) -> crate::sql::Sql {
        sql(format!(
            "SELECT {GROUP_COLUMNS} FROM device_groups WHERE org_id = $1 AND id IN \
             (SELECT group_id FROM device_group_members WHERE org_id = $1 AND device_id = $2) \
             ORDER BY name, id"
        ))
        .bind(self.org)
        .bind(device)
    }

    /// The plan of [`Self::groups_of_device`], for a test to hold it to the memberships' index
    /// by device.
    #[cfg(feature = "testing")]
    pub async fn explain_groups_of_device(&self, device: DeviceId) -> Result<String> {
        self.groups_of_device_query(device).explain(self).await
    }

    /// Adds a device to a group; both must belong to this organization. Adding twice is a no-op.
    pub async fn add_to_group(&self, group: DeviceGroupId, device: DeviceId) -> Result<()> {
        self.get_group(group).await?;
        self.whole().devices().get_device(device).await?;
        let added = sql(
            "INSERT INTO device_group_members (group_id, device_id, org_id) VALUES ($1, $2, $3) \
             ON CONFLICT (group_id, device_id) DO NOTHING",
        )
        .bind(group)
        .bind(device)
        .bind(self.org)
        .execute(self)
        .await;
        if !matches!(added, Ok(0)) {
            self.store.devices_changed(self.org);
        }
        added.map(drop)
    }

    /// Removes a device from a group. Returns whether it was a member.
    pub async fn remove_from_group(&self, group: DeviceGroupId, device: DeviceId) -> Result<bool> {
        let n = sql("DELETE FROM device_group_members WHERE group_id = $1 AND device_id = $2 AND org_id = $3")
            .bind(group)
            .bind(device)
            .bind(self.org)
            .execute(self)
            .await;
        if !matches!(n, Ok(0)) {
            self.store.devices_changed(self.org);
        }
        Ok(n? > 0)
    }
}
