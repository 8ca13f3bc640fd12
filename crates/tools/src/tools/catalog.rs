//! `search_catalog`, `get_catalog_item` and `manage_catalog`: the partner's product catalog.
//!
//! All Tier 2 as the specification says (the reads too: prices are financial data, so they
//! need `ai:write`); reading needs `catalog.read`, maintenance `catalog.write`. Prices are
//! shown as this organization pays them (its override, else the list price) beside the list
//! price. Items of another partner are "not found", like missing ones.

use breeze_core::{CatalogKind, Money, Permission};
use breeze_store::{
    CatalogComponent, CatalogFilter, CatalogItem, CatalogUpdate, NewCatalogItem, PriceOverride,
    StoreError,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::{
    args::uuid_or_missing,
    distributor::{self, LookupInput},
    ledger::{self, MoneyView},
};
use crate::reach::{self, Reach};
use crate::{NoActions, Registry, Rendered, Tier, Tool, ToolCx, ToolError};

pub(crate) fn register(r: &mut Registry) {
    r.register::<GetCatalogItem>();
    super::distributor::register(r);
    r.register::<ManageCatalog>();
    r.register::<SearchCatalog>();
}

use ledger::CATALOG_ITEM_NOT_FOUND as ITEM_NOT_FOUND;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum KindArg {
    Hardware,
    Software,
    Service,
    Bundle,
}

impl From<KindArg> for CatalogKind {
    fn from(k: KindArg) -> Self {
        match k {
            KindArg::Hardware => CatalogKind::Hardware,
            KindArg::Software => CatalogKind::Software,
            KindArg::Service => CatalogKind::Service,
            KindArg::Bundle => CatalogKind::Bundle,
        }
    }
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct ComponentView {
    item_id: String,
    name: String,
    sku: Option<String>,
    kind: String,
    quantity: String,
}

impl From<CatalogComponent> for ComponentView {
    fn from(c: CatalogComponent) -> Self {
        Self {
            item_id: c.component_id.to_string(),
            quantity: breeze_core::Quantity(c.quantity_milli).decimal(),
            name: c.name,
            sku: c.sku,
            kind: c.kind.to_string(),
        }
    }
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct OverrideView {
    price: MoneyView,
    set_by: String,
    set_at: String,
}

impl From<PriceOverride> for OverrideView {
    fn from(o: PriceOverride) -> Self {
        Self {
            price: Money::new(o.unit_price_minor, o.currency).into(),
            set_by: o.set_by,
            set_at: o.set_at.to_rfc3339(),
        }
    }
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct ItemView {
    id: String,
    sku: Option<String>,
    name: String,
    kind: String,
    description: String,
    list_price: MoneyView,
    /// Basis points: 2000 = 20 %.
    tax_bp: i64,
    archived: bool,
    created_at: String,
    updated_at: String,
    /// What this organization pays (get_catalog_item): its override, else the list price.
    #[serde(skip_serializing_if = "Option::is_none")]
    price: Option<MoneyView>,
    #[serde(skip_serializing_if = "Option::is_none")]
    price_override: Option<OverrideView>,
    #[serde(skip_serializing_if = "Option::is_none")]
    components: Option<Vec<ComponentView>>,
}

impl From<CatalogItem> for ItemView {
    fn from(i: CatalogItem) -> Self {
        Self {
            id: i.id.to_string(),
            list_price: i.list_price().into(),
            sku: i.sku,
            name: i.name,
            kind: i.kind.to_string(),
            description: i.description,
            tax_bp: i.tax_bp,
            archived: i.archived_at.is_some(),
            created_at: i.created_at.to_rfc3339(),
            updated_at: i.updated_at.to_rfc3339(),
            price: None,
            price_override: None,
            components: None,
        }
    }
}

/// What each catalog tool returns; one object with the fields that apply.
#[derive(Debug, Default, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CatalogOutput {
    #[serde(skip_serializing_if = "Option::is_none")]
    items: Option<Vec<ItemView>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    item: Option<ItemView>,
    #[serde(skip_serializing_if = "Option::is_none")]
    showing: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
}

fn catalog_missing(e: StoreError) -> ToolError {
    ledger::missing(
        e,
        &[
            (
                "bundle component",
                "That item is not a component of this bundle",
            ),
            (
                "price override",
                "This organization has no price override for the item",
            ),
        ],
    )
}

fn item_id(raw: Option<&str>, field: &str) -> Result<Uuid, ToolError> {
    uuid_or_missing(raw, field, ITEM_NOT_FOUND)
}

/// The item with its price for this organization, its override and its components.
async fn full_view<R: Reach>(cx: &ToolCx<'_, R>, item: CatalogItem) -> Result<ItemView, ToolError> {
    let catalog = cx.catalog();
    let (id, bundle) = (item.id, item.kind == CatalogKind::Bundle);
    let price = catalog.price(&item).await?;
    let mut view = ItemView::from(item);
    view.price = Some(price.into());
    view.price_override = catalog.price_override(id).await?.map(Into::into);
    if bundle {
        view.components = Some(ledger::views(catalog.components(id).await?));
    }
    Ok(view)
}

// ---- search_catalog ---------------------------------------------------------------------------

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct SearchInput {
    /// In the name, SKU or description.
    #[schemars(length(min = 1, max = 200))]
    query: Option<String>,
    kind: Option<KindArg>,
    /// Archived items too; default false.
    include_archived: Option<bool>,
    /// default 25.
    #[schemars(range(min = 1, max = 100))]
    limit: Option<u32>,
}

pub(crate) struct SearchCatalog;

impl Tool for SearchCatalog {
    const NAME: &'static str = "search_catalog";
    const TITLE: &'static str = "Search the catalog";
    const DESCRIPTION: &'static str = "Search the partner product catalog (hardware, software, services, bundles) by name, SKU or type, with list prices. Tier 2: financial data.";
    const TIER: Tier = Tier::T2;
    const PERMISSION: Permission = Permission::CatalogRead;
    type Actions = NoActions;
    type Input = SearchInput;
    type Output = Rendered<CatalogOutput>;
    type Reach = reach::Catalog;

    async fn call(
        cx: &ToolCx<'_, Self::Reach>,
        input: Self::Input,
    ) -> Result<Self::Output, ToolError> {
        let filter = CatalogFilter {
            text: input.query,
            kind: input.kind.map(Into::into),
            include_archived: input.include_archived.unwrap_or(false),
        };
        let items: Vec<ItemView> = ledger::views(
            cx.catalog()
                .search(&filter, input.limit.unwrap_or(25))
                .await?,
        );
        Rendered::of(&CatalogOutput {
            showing: Some(items.len()),
            items: Some(items),
            ..Default::default()
        })
    }
}

// ---- get_catalog_item -------------------------------------------------------------------------

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct GetInput {
    #[schemars(length(min = 36, max = 36))]
    item_id: String,
}

pub(crate) struct GetCatalogItem;

impl Tool for GetCatalogItem {
    const NAME: &'static str = "get_catalog_item";
    const TITLE: &'static str = "Get a catalog item";
    const DESCRIPTION: &'static str = "Full detail for one catalog item: list price, this organization's price and override, and a bundle's components. Tier 2: financial data.";
    const TIER: Tier = Tier::T2;
    const PERMISSION: Permission = Permission::CatalogRead;
    type Actions = NoActions;
    type Input = GetInput;
    type Output = Rendered<CatalogOutput>;
    type Reach = reach::Catalog;

    async fn call(
        cx: &ToolCx<'_, Self::Reach>,
        input: Self::Input,
    ) -> Result<Self::Output, ToolError> {
        let id = item_id(Some(&input.item_id), "itemId")?;
        let item = cx.catalog().get_item(id).await.map_err(catalog_missing)?;
        Rendered::of(&CatalogOutput {
            item: Some(full_view(cx, item).await?),
            ..Default::default()
        })
    }
}

// ---- manage_catalog ---------------------------------------------------------------------------

crate::actions! {
    // Every action is Tier 2, as the specification says.
    pub(crate) enum CatalogAction {
        Create = "create" => (T2, Create, CatalogWrite),
        Update = "update" => (T2, Update, CatalogWrite),
        Archive = "archive" => (T2, Update, CatalogWrite),
        SetComponent = "set_component" => (T2, Update, CatalogWrite),
        RemoveComponent = "remove_component" => (T2, Update, CatalogWrite),
        SetPriceOverride = "set_price_override" => (T2, Update, CatalogWrite),
        RemovePriceOverride = "remove_price_override" => (T2, Update, CatalogWrite),
        ImportDistributorProduct = "import_distributor_product" => (T2, Create, CatalogWrite),
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct ManageInput {
    action: CatalogAction,
    /// Every action but create; for set_component and remove_component, the bundle.
    #[schemars(length(min = 36, max = 36))]
    item_id: Option<String>,
    /// set_component, remove_component: the item in the bundle.
    #[schemars(length(min = 36, max = 36))]
    component_id: Option<String>,
    #[schemars(length(min = 1, max = 255))]
    name: Option<String>,
    #[schemars(length(min = 1, max = 255))]
    sku: Option<String>,
    /// create.
    kind: Option<KindArg>,
    #[schemars(length(max = 5000))]
    description: Option<String>,
    /// create, update, set_price_override: decimal string, e.g. "49.00".
    #[schemars(length(min = 1, max = 24))]
    unit_price: Option<String>,
    /// ISO 4217, with unitPrice (update and set_price_override default to the item's).
    #[schemars(length(min = 3, max = 3))]
    currency: Option<String>,
    /// Basis points (2000 = 20 %); create defaults to 0.
    #[schemars(range(min = 0, max = 10000))]
    tax_bp: Option<u32>,
    /// set_component: decimal, default "1".
    #[schemars(length(min = 1, max = 24))]
    quantity: Option<String>,
    /// import_distributor_product: the TD SYNNEX SKU (or give mfgPartNumber).
    #[schemars(length(min = 1, max = 50))]
    distributor_sku: Option<String>,
    /// import_distributor_product: the manufacturer part number.
    #[schemars(length(min = 1, max = 50))]
    mfg_part_number: Option<String>,
    /// import_distributor_product: list price = reseller cost + this markup in basis points
    /// (2500 = 25 %); without it, the MSRP.
    #[schemars(range(min = 0, max = 100000))]
    markup_bp: Option<u32>,
}

pub(crate) struct ManageCatalog;

impl Tool for ManageCatalog {
    const NAME: &'static str = "manage_catalog";
    const TITLE: &'static str = "Manage the catalog";
    const DESCRIPTION: &'static str = "Catalog maintenance: create|update|archive items (hardware, software, service, bundle); set_component|remove_component of a bundle; set_price_override|remove_price_override for this organization; import_distributor_product (a TD SYNNEX product priced at its MSRP or at cost + markupBp). All Tier 2. Prices: decimal string + ISO 4217 currency.";
    const TIER: Tier = Tier::T2;
    const PERMISSION: Permission = Permission::CatalogWrite;
    type Actions = CatalogAction;
    type Input = ManageInput;
    type Output = Rendered<CatalogOutput>;
    type Reach = (reach::Catalog, reach::Billing);

    async fn call(
        cx: &ToolCx<'_, Self::Reach>,
        input: Self::Input,
    ) -> Result<Self::Output, ToolError> {
        let catalog = cx.catalog();
        let audit = |action: &str| ledger::audit(cx, "catalog", action);
        let by = cx.actor.to_string();
        let item = || item_id(input.item_id.as_deref(), "itemId");
        let (message, current) = match input.action {
            CatalogAction::Create => {
                let name = ledger::required(input.name.as_deref(), "name")?;
                let kind = *ledger::required(input.kind.as_ref(), "kind")?;
                let currency = ledger::currency_arg(input.currency.as_deref())?;
                let new = NewCatalogItem {
                    sku: input.sku.clone(),
                    name: name.to_owned(),
                    kind: kind.into(),
                    description: input.description.clone().unwrap_or_default(),
                    unit_price: ledger::money_arg(
                        input.unit_price.as_deref(),
                        "unitPrice",
                        currency,
                    )?,
                    tax_bp: input.tax_bp.unwrap_or(0),
                    created_by: by,
                };
                let it = catalog.create_item(new, audit("create")).await?;
                ("item created", it)
            }
            CatalogAction::ImportDistributorProduct => {
                let query = LookupInput::query(
                    input.distributor_sku.as_deref(),
                    input.mfg_part_number.as_deref(),
                )?;
                let found = distributor::lookup(cx, &query).await?;
                let new = NewCatalogItem {
                    // The item's SKU: the one given, else the manufacturer part number.
                    sku: input.sku.clone().or_else(|| {
                        Some(if found.mfg_part_number.is_empty() {
                            found.sku.clone()
                        } else {
                            found.mfg_part_number.clone()
                        })
                    }),
                    name: found.description.chars().take(255).collect(),
                    kind: input.kind.map_or(CatalogKind::Hardware, Into::into),
                    description: format!(
                        "TD SYNNEX {} ({} {})",
                        found.sku, found.mfg_code, found.mfg_part_number
                    ),
                    unit_price: import_price(&found, input.markup_bp)?,
                    tax_bp: input.tax_bp.unwrap_or(0),
                    created_by: by,
                };
                let it = catalog
                    .create_item(new, audit("import_distributor_product"))
                    .await?;
                ("item imported from TD SYNNEX", it)
            }
            CatalogAction::Update => {
                let current = catalog.get_item(item()?).await.map_err(catalog_missing)?;
                let unit_price = match input.unit_price.as_deref() {
                    Some(p) => Some(ledger::money_arg(
                        Some(p),
                        "unitPrice",
                        ledger::currency_or(input.currency.as_deref(), current.currency)?,
                    )?),
                    None => None,
                };
                let update = CatalogUpdate {
                    sku: input.sku.clone(),
                    name: input.name.clone(),
                    description: input.description.clone(),
                    unit_price,
                    tax_bp: input.tax_bp,
                };
                let it = catalog
                    .update_item(current.id, update, audit("update"))
                    .await
                    .map_err(catalog_missing)?;
                ("item updated", it)
            }
            CatalogAction::Archive => {
                let it = catalog
                    .archive_item(item()?, audit("archive"))
                    .await
                    .map_err(catalog_missing)?;
                ("item archived", it)
            }
            CatalogAction::SetComponent | CatalogAction::RemoveComponent => {
                let bundle = item()?;
                let component = item_id(input.component_id.as_deref(), "componentId")?;
                if input.action == CatalogAction::SetComponent {
                    let quantity = ledger::quantity_arg(input.quantity.as_deref())?;
                    catalog
                        .set_component(bundle, component, quantity, audit("set_component"))
                        .await
                } else {
                    catalog
                        .remove_component(bundle, component, audit("remove_component"))
                        .await
                }
                .map_err(catalog_missing)?;
                let it = catalog.get_item(bundle).await.map_err(catalog_missing)?;
                ("bundle components changed", it)
            }
            CatalogAction::SetPriceOverride => {
                let current = catalog.get_item(item()?).await.map_err(catalog_missing)?;
                let price = ledger::money_arg(
                    input.unit_price.as_deref(),
                    "unitPrice",
                    ledger::currency_or(input.currency.as_deref(), current.currency)?,
                )?;
                catalog
                    .set_override(current.id, price, &by, audit("set_price_override"))
                    .await
                    .map_err(catalog_missing)?;
                ("price override set for this organization", current)
            }
            CatalogAction::RemovePriceOverride => {
                let id = item()?;
                catalog
                    .remove_override(id, audit("remove_price_override"))
                    .await
                    .map_err(catalog_missing)?;
                let it = catalog.get_item(id).await.map_err(catalog_missing)?;
                ("price override removed", it)
            }
        };
        Rendered::of(&CatalogOutput {
            message: Some(message.to_owned()),
            item: Some(full_view(cx, current).await?),
            ..Default::default()
        })
    }
}

/// The list price of an imported product: the reseller cost plus `markup_bp` (rounded once,
/// half away from zero), or without a markup the MSRP (else the cost). A markup needs the
/// cost, which an organization's user does not see.
fn import_price(
    found: &breeze_billing::Availability,
    markup_bp: Option<u32>,
) -> Result<Money, ToolError> {
    let cost = found.reseller_cost;
    match (markup_bp, cost, found.msrp) {
        (Some(bp), Some(cost), _) => breeze_core::money::tax_amount(cost, bp)
            .and_then(|m| cost.checked_add(m))
            .map_err(|e| ToolError::invalid(e.to_string())),
        (Some(_), None, _) => Err(ToolError::new(
            crate::ErrorCode::Forbidden,
            "a markup is on the reseller cost, which is withheld from an organization's user; \
             import at the MSRP (no markupBp)",
        )),
        (None, _, Some(msrp)) => Ok(msrp),
        (None, Some(cost), None) => Ok(cost),
        (None, None, None) => Err(ToolError::invalid(
            "the distributor gives no MSRP and the cost is withheld: no price to import at",
        )),
    }
}
