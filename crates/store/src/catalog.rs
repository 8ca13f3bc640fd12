//! The partner's product catalog: hardware, software, services and bundles of them, with
//! per-organization price overrides.
//!
//! Items belong to the partner of the calling organization (every organization of a partner
//! sells from one catalog), so each query here is bound to that partner; an item of another
//! partner is "not found". A price override is this organization's own row. An item's price
//! for the organization is its override if there is one, else its list price, always in the
//! item's currency. Archiving keeps the item (invoice lines and contracts name it) but it can
//! no longer be sold or put in a bundle.

use breeze_core::{
    AuditEvent, CatalogKind, Currency, InvoiceLineKind, Money, PartnerId, Quantity, Timestamp,
};
use serde::Serialize;
use serde_json::json;
use uuid::Uuid;

use crate::{
    Result, StoreError,
    alerts::check_text,
    invoices::{LineRow, LineSource},
    ledger,
    sql::{Sql, Tx, escape_like, sql},
};

/// The longest name or SKU.
const MAX_NAME: usize = 255;
/// The longest description.
const MAX_DESCRIPTION: usize = 5000;
/// The most items one search returns.
pub const MAX_CATALOG_PAGE: u32 = 100;
/// The most components one bundle lists.
const MAX_COMPONENTS: i64 = 50;

/// An item of the catalog.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct CatalogItem {
    pub id: Uuid,
    pub partner_id: PartnerId,
    pub sku: Option<String>,
    pub name: String,
    #[sqlx(try_from = "String")]
    pub kind: CatalogKind,
    pub description: String,
    pub unit_price_minor: i64,
    #[sqlx(try_from = "String")]
    pub currency: Currency,
    /// Basis points: 2000 = 20 %.
    pub tax_bp: i64,
    pub archived_at: Option<Timestamp>,
    pub created_by: String,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

impl CatalogItem {
    /// The list price (before any organization's override).
    pub fn list_price(&self) -> Money {
        Money::new(self.unit_price_minor, self.currency)
    }
}

const ITEM_COLUMNS: &str = "id, partner_id, sku, name, kind, description, unit_price_minor, \
    currency, tax_bp, archived_at, created_by, created_at, updated_at";

/// One component of a bundle, with the item it names.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct CatalogComponent {
    pub component_id: Uuid,
    pub name: String,
    pub sku: Option<String>,
    #[sqlx(try_from = "String")]
    pub kind: CatalogKind,
    pub quantity_milli: i64,
}

/// This organization's price for one item.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct PriceOverride {
    pub item_id: Uuid,
    pub unit_price_minor: i64,
    #[sqlx(try_from = "String")]
    pub currency: Currency,
    pub set_by: String,
    pub set_at: Timestamp,
}

/// An item to add to the catalog.
#[derive(Debug, Clone)]
pub struct NewCatalogItem {
    pub sku: Option<String>,
    pub name: String,
    pub kind: CatalogKind,
    pub description: String,
    pub unit_price: Money,
    pub tax_bp: u32,
    pub created_by: String,
}

/// Changes to an item; `None` keeps the current value. The currency follows the price.
#[derive(Debug, Clone, Default)]
pub struct CatalogUpdate {
    pub sku: Option<String>,
    pub name: Option<String>,
    pub description: Option<String>,
    pub unit_price: Option<Money>,
    pub tax_bp: Option<u32>,
}

/// Which items a search returns; every field narrows it.
#[derive(Debug, Clone, Default)]
pub struct CatalogFilter {
    /// In the name, SKU or description, case ignored.
    pub text: Option<String>,
    pub kind: Option<CatalogKind>,
    pub include_archived: bool,
}

fn check_price(price: Money) -> Result<()> {
    if price.minor < 0 {
        return Err(StoreError::Invalid("a price cannot be negative".into()));
    }
    Ok(())
}

impl crate::OrgCatalog<'_> {
    async fn partner(&self) -> Result<PartnerId> {
        self.whole().tenancy().partner_id().await
    }

    fn audit(&self, audit: AuditEvent, item: Uuid, details: serde_json::Value) -> AuditEvent {
        audit.org(self.org).resource(item).details(details)
    }

    /// Items of the partner's catalog by name, `limit` of them (at most
    /// [`MAX_CATALOG_PAGE`]).
    pub async fn search(&self, filter: &CatalogFilter, limit: u32) -> Result<Vec<CatalogItem>> {
        let partner = self.partner().await?;
        let mut q: Sql = sql(format!(
            "SELECT {ITEM_COLUMNS} FROM catalog_items WHERE partner_id = $1"
        ))
        .bind(partner);
        if !filter.include_archived {
            q.push(" AND archived_at IS NULL");
        }
        if let Some(k) = filter.kind {
            let p = q.arg(k.as_str());
            q.push(&format!(" AND kind = {p}"));
        }
        if let Some(text) = &filter.text {
            let p = q.arg(format!("%{}%", escape_like(&text.to_lowercase())));
            q.push(&format!(
                " AND (LOWER(name) LIKE {p} ESCAPE '\\' OR LOWER(COALESCE(sku, '')) LIKE {p} \
                 ESCAPE '\\' OR LOWER(description) LIKE {p} ESCAPE '\\')"
            ));
        }
        let p = q.arg(i64::from(limit.clamp(1, MAX_CATALOG_PAGE)));
        q.push(&format!(" ORDER BY name, id LIMIT {p}"));
        q.fetch_all(self).await
    }

    /// One item of the partner's catalog, archived or not.
    pub async fn get_item(&self, id: Uuid) -> Result<CatalogItem> {
        let partner = self.partner().await?;
        sql(format!(
            "SELECT {ITEM_COLUMNS} FROM catalog_items WHERE id = $1 AND partner_id = $2"
        ))
        .bind(id)
        .bind(partner)
        .fetch_optional(self)
        .await?
        .ok_or(StoreError::NotFound("catalog item"))
    }

    /// An item that can still be sold.
    pub async fn sellable(&self, id: Uuid) -> Result<CatalogItem> {
        let item = self.get_item(id).await?;
        if item.archived_at.is_some() {
            return Err(StoreError::Conflict(format!(
                "{} is archived: it is no longer sold",
                item.name
            )));
        }
        Ok(item)
    }

    /// A bundle's components, by name.
    pub async fn components(&self, bundle: Uuid) -> Result<Vec<CatalogComponent>> {
        sql(
            "SELECT c.component_id, i.name, i.sku, i.kind, c.quantity_milli \
             FROM catalog_components c JOIN catalog_items i ON i.id = c.component_id \
             WHERE c.bundle_id = $1 ORDER BY i.name, i.id",
        )
        .bind(bundle)
        .fetch_all(self)
        .await
    }

    /// This organization's override of the item's price, if any.
    pub async fn price_override(&self, item: Uuid) -> Result<Option<PriceOverride>> {
        sql(
            "SELECT item_id, unit_price_minor, currency, set_by, set_at \
             FROM catalog_price_overrides WHERE item_id = $1 AND org_id = $2",
        )
        .bind(item)
        .bind(self.org)
        .fetch_optional(self)
        .await
    }

    /// What this organization pays for the item: its override, else the list price.
    pub async fn price(&self, item: &CatalogItem) -> Result<Money> {
        Ok(match self.price_override(item.id).await? {
            Some(o) => Money::new(o.unit_price_minor, o.currency),
            None => item.list_price(),
        })
    }

    /// A document line (invoice or quote) for `quantity` of a sellable item at this
    /// organization's price and the item's tax rate; a bundle is one line at the bundle's
    /// price, its components named. The price must be in `currency`, the document's:
    /// currencies are never mixed.
    pub(crate) async fn line(
        &self,
        item: Uuid,
        quantity: Quantity,
        currency: Currency,
    ) -> Result<LineRow> {
        let it = self.sellable(item).await?;
        let price = self.price(&it).await?;
        if price.currency != currency {
            return Err(StoreError::Invalid(format!(
                "the document is in {currency}; {} is priced in {} for this organization",
                it.name, price.currency
            )));
        }
        if quantity.0 <= 0 {
            return Err(StoreError::Invalid("a line's quantity is positive".into()));
        }
        let (kind, description) = if it.kind == CatalogKind::Bundle {
            let parts: Vec<String> = self
                .components(item)
                .await?
                .iter()
                .map(|c| format!("{} × {}", Quantity(c.quantity_milli).decimal(), c.name))
                .collect();
            let description = if parts.is_empty() {
                it.name.clone()
            } else {
                format!("{} ({})", it.name, parts.join(", "))
            };
            (InvoiceLineKind::Bundle, description)
        } else {
            (InvoiceLineKind::Catalog, it.name.clone())
        };
        let tax_bp =
            u32::try_from(it.tax_bp).map_err(|_| StoreError::Corrupt("tax rate".into()))?;
        LineRow::priced(
            kind,
            description.chars().take(MAX_DESCRIPTION).collect(),
            quantity,
            price,
            tax_bp,
            LineSource {
                catalog_item: Some(item),
                ..LineSource::default()
            },
        )
    }

    /// Adds an item to the partner's catalog; a SKU is unique in it.
    pub async fn create_item(&self, new: NewCatalogItem, audit: AuditEvent) -> Result<CatalogItem> {
        check_text("name", &new.name, MAX_NAME)?;
        ledger::check_optional("sku", new.sku.as_deref(), MAX_NAME)?;
        if new.description.chars().count() > MAX_DESCRIPTION {
            return Err(StoreError::Invalid(format!(
                "description is longer than {MAX_DESCRIPTION} characters"
            )));
        }
        check_price(new.unit_price)?;
        ledger::check_tax(new.tax_bp)?;
        let partner = self.partner().await?;
        let now = self.store.clock.now();
        let id = Uuid::now_v7();
        let mut tx = Tx::begin_in(self).await?;
        sql(format!(
            "INSERT INTO catalog_items ({ITEM_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, \
             $9, $10, $11, $12, $13)"
        ))
        .bind(id)
        .bind(partner)
        .bind(new.sku.as_deref())
        .bind(new.name.as_str())
        .bind(new.kind.as_str())
        .bind(new.description.as_str())
        .bind(new.unit_price.minor)
        .bind(new.unit_price.currency.code())
        .bind(i64::from(new.tax_bp))
        .bind(None::<Timestamp>)
        .bind(new.created_by.as_str())
        .bind(now)
        .bind(now)
        .execute(&mut tx)
        .await
        .map_err(|e| e.conflict_as(|| "an item with this SKU is in the catalog already".into()))?;
        let details = json!({ "name": new.name, "kind": new.kind, "sku": new.sku,
                              "price": new.unit_price });
        ledger::commit(tx, &self.audit(audit, id, details), now).await?;
        self.get_item(id).await
    }

    /// Changes an item; the audit record names the fields changed.
    pub async fn update_item(
        &self,
        id: Uuid,
        update: CatalogUpdate,
        audit: AuditEvent,
    ) -> Result<CatalogItem> {
        if let Some(n) = &update.name {
            check_text("name", n, MAX_NAME)?;
        }
        ledger::check_optional("sku", update.sku.as_deref(), MAX_NAME)?;
        if let Some(d) = &update.description
            && d.chars().count() > MAX_DESCRIPTION
        {
            return Err(StoreError::Invalid(format!(
                "description is longer than {MAX_DESCRIPTION} characters"
            )));
        }
        if let Some(p) = update.unit_price {
            check_price(p)?;
        }
        if let Some(t) = update.tax_bp {
            ledger::check_tax(t)?;
        }
        let current = self.get_item(id).await?;
        let changed = crate::audit::changed_fields([
            ("sku", update.sku.is_some()),
            ("name", update.name.is_some()),
            ("description", update.description.is_some()),
            ("price", update.unit_price.is_some()),
            ("taxBp", update.tax_bp.is_some()),
        ]);
        if changed.is_empty() {
            return Err(StoreError::Invalid("no field to change was given".into()));
        }
        let price = update.unit_price.unwrap_or(current.list_price());
        let now = self.store.clock.now();
        let mut tx = Tx::begin_in(self).await?;
        sql(
            "UPDATE catalog_items SET sku = $1, name = $2, description = $3, \
             unit_price_minor = $4, currency = $5, tax_bp = $6, updated_at = $7 \
             WHERE id = $8 AND partner_id = $9",
        )
        .bind(update.sku.as_deref().or(current.sku.as_deref()))
        .bind(update.name.as_deref().unwrap_or(&current.name))
        .bind(
            update
                .description
                .as_deref()
                .unwrap_or(&current.description),
        )
        .bind(price.minor)
        .bind(price.currency.code())
        .bind(update.tax_bp.map_or(current.tax_bp, i64::from))
        .bind(now)
        .bind(id)
        .bind(current.partner_id)
        .execute(&mut tx)
        .await
        .map_err(|e| e.conflict_as(|| "an item with this SKU is in the catalog already".into()))?;
        ledger::commit(
            tx,
            &self.audit(audit, id, json!({ "changed": changed })),
            now,
        )
        .await?;
        self.get_item(id).await
    }

    /// Archives an item: it stays for what names it, but is no longer sold.
    pub async fn archive_item(&self, id: Uuid, audit: AuditEvent) -> Result<CatalogItem> {
        let current = self.get_item(id).await?;
        let now = self.store.clock.now();
        let mut tx = Tx::begin_in(self).await?;
        let n = sql(
            "UPDATE catalog_items SET archived_at = $1, updated_at = $1 WHERE id = $2 \
             AND partner_id = $3 AND archived_at IS NULL",
        )
        .bind(now)
        .bind(id)
        .bind(current.partner_id)
        .execute(&mut tx)
        .await?;
        ledger::changed(n, "the item is archived already")?;
        ledger::commit(
            tx,
            &self.audit(audit, id, json!({ "name": current.name })),
            now,
        )
        .await?;
        self.get_item(id).await
    }

    /// Puts `quantity` of `component` in a bundle (or changes its quantity). A bundle holds
    /// items that are sold, never another bundle.
    pub async fn set_component(
        &self,
        bundle: Uuid,
        component: Uuid,
        quantity: Quantity,
        audit: AuditEvent,
    ) -> Result<Vec<CatalogComponent>> {
        let b = self.get_item(bundle).await?;
        if b.kind != CatalogKind::Bundle {
            return Err(StoreError::Invalid(format!("{} is not a bundle", b.name)));
        }
        let c = self.sellable(component).await?;
        if c.kind == CatalogKind::Bundle {
            return Err(StoreError::Invalid(
                "a bundle holds items, not other bundles".into(),
            ));
        }
        if quantity.0 <= 0 {
            return Err(StoreError::Invalid(
                "a component's quantity is positive".into(),
            ));
        }
        let count: i64 = sql("SELECT COUNT(*) FROM catalog_components WHERE bundle_id = $1")
            .bind(bundle)
            .fetch_scalar(self)
            .await?;
        if count >= MAX_COMPONENTS {
            return Err(StoreError::Invalid(format!(
                "a bundle holds at most {MAX_COMPONENTS} components"
            )));
        }
        let now = self.store.clock.now();
        let mut tx = Tx::begin_in(self).await?;
        sql(
            "INSERT INTO catalog_components (bundle_id, component_id, quantity_milli) \
             VALUES ($1, $2, $3) ON CONFLICT (bundle_id, component_id) \
             DO UPDATE SET quantity_milli = excluded.quantity_milli",
        )
        .bind(bundle)
        .bind(component)
        .bind(quantity.0)
        .execute(&mut tx)
        .await?;
        let details = json!({ "component": component, "name": c.name,
                              "quantity": quantity.decimal() });
        ledger::commit(tx, &self.audit(audit, bundle, details), now).await?;
        self.components(bundle).await
    }

    /// Takes a component out of a bundle.
    pub async fn remove_component(
        &self,
        bundle: Uuid,
        component: Uuid,
        audit: AuditEvent,
    ) -> Result<Vec<CatalogComponent>> {
        self.get_item(bundle).await?;
        let now = self.store.clock.now();
        let mut tx = Tx::begin_in(self).await?;
        let n = sql("DELETE FROM catalog_components WHERE bundle_id = $1 AND component_id = $2")
            .bind(bundle)
            .bind(component)
            .execute(&mut tx)
            .await?;
        if n == 0 {
            return Err(StoreError::NotFound("bundle component"));
        }
        ledger::commit(
            tx,
            &self.audit(audit, bundle, json!({ "component": component })),
            now,
        )
        .await?;
        self.components(bundle).await
    }

    /// Sets this organization's price for an item (in any currency: the organization may be
    /// billed in its own).
    pub async fn set_override(
        &self,
        item: Uuid,
        price: Money,
        by: &str,
        audit: AuditEvent,
    ) -> Result<PriceOverride> {
        check_price(price)?;
        let current = self.get_item(item).await?;
        let now = self.store.clock.now();
        let mut tx = Tx::begin_in(self).await?;
        sql(
            "INSERT INTO catalog_price_overrides (item_id, org_id, unit_price_minor, currency, \
             set_by, set_at) VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (item_id, org_id) \
             DO UPDATE SET unit_price_minor = excluded.unit_price_minor, \
             currency = excluded.currency, set_by = excluded.set_by, set_at = excluded.set_at",
        )
        .bind(item)
        .bind(self.org)
        .bind(price.minor)
        .bind(price.currency.code())
        .bind(by)
        .bind(now)
        .execute(&mut tx)
        .await?;
        let details = json!({ "name": current.name, "price": price, "list": current.list_price() });
        ledger::commit(tx, &self.audit(audit, item, details), now).await?;
        self.price_override(item)
            .await?
            .ok_or(StoreError::NotFound("price override"))
    }

    /// Removes this organization's price for an item: it pays the list price again.
    pub async fn remove_override(&self, item: Uuid, audit: AuditEvent) -> Result<()> {
        self.get_item(item).await?;
        let now = self.store.clock.now();
        let mut tx = Tx::begin_in(self).await?;
        let n = sql("DELETE FROM catalog_price_overrides WHERE item_id = $1 AND org_id = $2")
            .bind(item)
            .bind(self.org)
            .execute(&mut tx)
            .await?;
        if n == 0 {
            return Err(StoreError::NotFound("price override"));
        }
        ledger::commit(tx, &self.audit(audit, item, json!({})), now).await
    }
}
