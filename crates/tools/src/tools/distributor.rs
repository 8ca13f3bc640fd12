//! `lookup_distributor_product`: live TD SYNNEX (EC Express) price and availability of one
//! distributor SKU or manufacturer part number.
//!
//! Tier 2 though it reads, as the specification says: each call is a billed request to the
//! distributor, so it needs `ai:write`, and `catalog.read`. It acts for the organization's
//! partner: a partner user sees the reseller cost, an organization's user gets availability
//! with the cost withheld, and a caller who is not the partner's gets an error before any
//! request is made, as does a partner with no TD SYNNEX account. What it finds can become a
//! catalog item (`manage_catalog import_distributor_product`), and from there invoice and quote
//! lines.

use breeze_billing::{Availability, ProductQuery, Warehouse};
use breeze_core::{Money, Permission};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::ledger::{self, MoneyView};
use crate::reach::{self, Reach};
use crate::{NoActions, Registry, Rendered, Tier, Tool, ToolCx, ToolError};

pub(crate) fn register(r: &mut Registry) {
    r.register::<LookupDistributorProduct>();
}

/// Exactly one of a TD SYNNEX SKU and a manufacturer part number.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct LookupInput {
    /// The TD SYNNEX SKU, e.g. 5649807.
    #[schemars(length(min = 1, max = 50))]
    sku: Option<String>,
    /// The manufacturer part number, e.g. 20VE0017US.
    #[schemars(length(min = 1, max = 50))]
    mfg_part_number: Option<String>,
}

impl LookupInput {
    pub(crate) fn query(
        sku: Option<&str>,
        mfg_part_number: Option<&str>,
    ) -> Result<ProductQuery, ToolError> {
        match (sku, mfg_part_number) {
            (Some(s), None) => Ok(ProductQuery::Sku(s.to_owned())),
            (None, Some(p)) => Ok(ProductQuery::MfgPartNumber(p.to_owned())),
            _ => Err(ToolError::invalid(
                "give exactly one of sku and mfgPartNumber",
            )),
        }
    }
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct WarehouseView {
    number: String,
    city: String,
    zip: String,
    quantity: i64,
}

impl From<Warehouse> for WarehouseView {
    fn from(w: Warehouse) -> Self {
        Self {
            number: w.number,
            city: w.city,
            zip: w.zip,
            quantity: w.quantity,
        }
    }
}

/// One product at the distributor.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ProductView {
    distributor: &'static str,
    sku: String,
    mfg_part_number: String,
    mfg_code: String,
    description: String,
    /// Active, Discontinued, …
    status: String,
    currency: String,
    /// The partner's cost; absent when redacted (an organization's caller) or not given.
    reseller_cost: Option<MoneyView>,
    /// Whether the reseller cost was withheld from this caller.
    cost_redacted: bool,
    /// Manufacturer's suggested retail price, when the distributor gives one.
    msrp: Option<MoneyView>,
    total_stock: i64,
    warehouses: Vec<WarehouseView>,
}

impl From<Availability> for ProductView {
    fn from(a: Availability) -> Self {
        Self {
            distributor: "td_synnex",
            sku: a.sku,
            mfg_part_number: a.mfg_part_number,
            mfg_code: a.mfg_code,
            description: a.description,
            status: a.status,
            currency: a.currency.to_string(),
            reseller_cost: a.reseller_cost.map(Money::into),
            cost_redacted: a.cost_redacted,
            msrp: a.msrp.map(Money::into),
            total_stock: a.total_stock,
            warehouses: ledger::views(a.warehouses),
        }
    }
}

/// What `lookup_distributor_product` returns.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct LookupOutput {
    product: ProductView,
}

/// Looks one product up for the call's organization, acting for its user.
pub(crate) async fn lookup<R: Reach>(
    cx: &ToolCx<'_, R>,
    query: &ProductQuery,
) -> Result<Availability, ToolError> {
    cx.billing()?
        .lookup_product(cx.user, query)
        .await
        .map_err(ledger::billing_err)
}

pub(crate) struct LookupDistributorProduct;

impl Tool for LookupDistributorProduct {
    const NAME: &'static str = "lookup_distributor_product";
    const TITLE: &'static str = "Look a product up at the distributor";
    const DESCRIPTION: &'static str = "Live TD SYNNEX (EC Express) price and availability for one distributor SKU or manufacturer part number not yet in the catalog: reseller cost, MSRP, currency, total stock, stock per warehouse. Partner-scoped: an organization's user gets availability with the reseller cost redacted; a caller with no partner in context gets an error and no request is made. Tier 2: each call is a billed request to the distributor.";
    const TIER: Tier = Tier::T2;
    const PERMISSION: Permission = Permission::CatalogRead;
    type Actions = NoActions;
    type Input = LookupInput;
    type Output = Rendered<LookupOutput>;
    type Reach = reach::Billing;

    async fn call(
        cx: &ToolCx<'_, Self::Reach>,
        input: Self::Input,
    ) -> Result<Self::Output, ToolError> {
        let query = LookupInput::query(input.sku.as_deref(), input.mfg_part_number.as_deref())?;
        let found = lookup(cx, &query).await?;
        Rendered::of(&LookupOutput {
            product: found.into(),
        })
    }
}
