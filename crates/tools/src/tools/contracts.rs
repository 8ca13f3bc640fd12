//! `list_contracts`, `get_contract` and `manage_contracts`: recurring contracts.
//!
//! The reads are Tier 2 (financial data) with `contracts.read`. Drafting a contract, changing
//! or deleting a draft and managing lines are Tier 2 with `contracts.write`; the lifecycle
//! changes (activate, pause, resume, cancel) are Tier 3 with `contracts.manage`, as the
//! specification says. Billing periods turn into draft invoices when they close, by the
//! period worker, not by a tool.

use breeze_core::{BillingPeriod, ContractStatus, Money, Permission, Quantity};
use breeze_store::{
    Contract, ContractLine, ContractPeriod, ContractUpdate, NewContract, NewContractLine,
    StoreError,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::{
    args::{time_arg, uuid_or_missing},
    ledger::{self, LineArg, MoneyView, ledger_output},
};
use crate::reach::{self, Reach};
use crate::{NoActions, Pin, Registry, Rendered, Tier, Tool, ToolCx, ToolError};

pub(crate) fn register(r: &mut Registry) {
    r.register::<GetContract>();
    r.register::<ListContracts>();
    r.register::<ManageContracts>();
}

const CONTRACT_NOT_FOUND: &str = "Contract not found or access denied";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum StatusArg {
    Draft,
    Active,
    Paused,
    Cancelled,
}

impl From<StatusArg> for ContractStatus {
    fn from(s: StatusArg) -> Self {
        match s {
            StatusArg::Draft => ContractStatus::Draft,
            StatusArg::Active => ContractStatus::Active,
            StatusArg::Paused => ContractStatus::Paused,
            StatusArg::Cancelled => ContractStatus::Cancelled,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum PeriodArg {
    Monthly,
    Quarterly,
    Yearly,
}

impl From<PeriodArg> for BillingPeriod {
    fn from(p: PeriodArg) -> Self {
        match p {
            PeriodArg::Monthly => BillingPeriod::Monthly,
            PeriodArg::Quarterly => BillingPeriod::Quarterly,
            PeriodArg::Yearly => BillingPeriod::Yearly,
        }
    }
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct LineView {
    id: String,
    position: i64,
    description: String,
    quantity: String,
    unit_price: MoneyView,
    catalog_item_id: Option<String>,
}

impl From<ContractLine> for LineView {
    fn from(l: ContractLine) -> Self {
        Self {
            id: l.id.to_string(),
            position: l.position,
            quantity: Quantity(l.quantity_milli).decimal(),
            unit_price: Money::new(l.unit_price_minor, l.currency).into(),
            description: l.description,
            catalog_item_id: l.catalog_item_id.map(|i| i.to_string()),
        }
    }
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct PeriodView {
    id: String,
    starts_at: String,
    ends_at: String,
    /// The draft invoice the period opened (absent when deleted, or nothing was billed).
    invoice_id: Option<String>,
    total: MoneyView,
}

impl From<ContractPeriod> for PeriodView {
    fn from(p: ContractPeriod) -> Self {
        Self {
            id: p.id.to_string(),
            starts_at: p.starts_at.to_rfc3339(),
            ends_at: p.ends_at.to_rfc3339(),
            invoice_id: p.invoice_id.map(|i| i.to_string()),
            total: Money::new(p.total_minor, p.currency).into(),
        }
    }
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct ContractView {
    id: String,
    org_id: String,
    name: String,
    status: String,
    currency: String,
    billing_period: String,
    tax_bp: i64,
    notes: Option<String>,
    starts_at: String,
    /// The start of the next period to bill.
    next_period_at: String,
    activated_at: Option<String>,
    cancelled_at: Option<String>,
    created_by: String,
    created_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    lines: Option<Vec<LineView>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    periods: Option<Vec<PeriodView>>,
}

impl From<Contract> for ContractView {
    fn from(c: Contract) -> Self {
        Self {
            id: c.id.to_string(),
            org_id: c.org_id.to_string(),
            name: c.name,
            status: c.status.to_string(),
            currency: c.currency.to_string(),
            billing_period: c.billing_period.to_string(),
            tax_bp: c.tax_bp,
            notes: c.notes,
            starts_at: c.starts_at.to_rfc3339(),
            next_period_at: c.next_period_at.to_rfc3339(),
            activated_at: c.activated_at.map(|t| t.to_rfc3339()),
            cancelled_at: c.cancelled_at.map(|t| t.to_rfc3339()),
            created_by: c.created_by,
            created_at: c.created_at.to_rfc3339(),
            lines: None,
            periods: None,
        }
    }
}

ledger_output! {
    /// What each contract tool returns; one object with the fields that apply.
    ContractsOutput { contracts, contract: ContractView }
}

/// What "not found" means for each record a contract action names.
const MISSING: &[(&str, &str)] = &[
    ("contract", CONTRACT_NOT_FOUND),
    ("contract line", "Contract line not found on this contract"),
];

fn contract_missing(e: StoreError) -> ToolError {
    ledger::missing(e, MISSING)
}

async fn resolve<R: Reach>(cx: &ToolCx<'_, R>, raw: Option<&str>) -> Result<Contract, ToolError> {
    let id = uuid_or_missing(raw, "contractId", CONTRACT_NOT_FOUND)?;
    cx.contracts()
        .get_contract(id)
        .await
        .map_err(contract_missing)
}

async fn full_view<R: Reach>(cx: &ToolCx<'_, R>, c: Contract) -> Result<ContractView, ToolError> {
    let id = c.id;
    let mut view = ContractView::from(c);
    view.lines = Some(ledger::views(cx.contracts().lines(id).await?));
    view.periods = Some(ledger::views(cx.contracts().periods(id).await?));
    Ok(view)
}

// ---- list_contracts ---------------------------------------------------------------------------

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct ListInput {
    /// Only this organization's (it must be the key's).
    #[schemars(length(min = 36, max = 36))]
    org_id: Option<String>,
    status: Option<StatusArg>,
    /// default 25.
    #[schemars(range(min = 1, max = 100))]
    limit: Option<u32>,
    /// The last page's nextCursor.
    #[schemars(length(max = 40))]
    cursor: Option<String>,
}

pub(crate) struct ListContracts;

impl Tool for ListContracts {
    const NAME: &'static str = "list_contracts";
    const TITLE: &'static str = "List contracts";
    const DESCRIPTION: &'static str = "Recurring contracts newest first, with optional organization and status (draft, active, paused, cancelled) filters. Tier 2: financial data.";
    const TIER: Tier = Tier::T2;
    const PERMISSION: Permission = Permission::ContractsRead;
    type Actions = NoActions;
    type Input = ListInput;
    type Output = Rendered<ContractsOutput>;
    type Reach = reach::Contracts;

    async fn call(
        cx: &ToolCx<'_, Self::Reach>,
        input: Self::Input,
    ) -> Result<Self::Output, ToolError> {
        ledger::own_org(cx, input.org_id.as_deref())?;
        let page = cx
            .contracts()
            .list_contracts(
                input.status.map(Into::into),
                ledger::cursor::<Uuid>(input.cursor.as_deref())?,
                input.limit.unwrap_or(25),
            )
            .await?;
        Rendered::of(&ContractsOutput::page(
            ledger::views(page.contracts),
            page.next_before,
        ))
    }
}

// ---- get_contract -----------------------------------------------------------------------------

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct GetInput {
    #[schemars(length(min = 36, max = 36))]
    contract_id: String,
}

pub(crate) struct GetContract;

impl Tool for GetContract {
    const NAME: &'static str = "get_contract";
    const TITLE: &'static str = "Get a contract";
    const DESCRIPTION: &'static str = "Full contract view: header, lines, and billing-period history with the draft invoice each period opened. Tier 2: financial data.";
    const TIER: Tier = Tier::T2;
    const PERMISSION: Permission = Permission::ContractsRead;
    type Actions = NoActions;
    type Input = GetInput;
    type Output = Rendered<ContractsOutput>;
    type Reach = reach::Contracts;

    async fn call(
        cx: &ToolCx<'_, Self::Reach>,
        input: Self::Input,
    ) -> Result<Self::Output, ToolError> {
        let c = resolve(cx, Some(&input.contract_id)).await?;
        Rendered::of(&ContractsOutput::record(None, full_view(cx, c).await?))
    }
}

// ---- manage_contracts -------------------------------------------------------------------------

crate::actions! {
    // Drafts and lines are Tier 2; lifecycle changes are Tier 3 with contracts.manage.
    pub(crate) enum ContractAction {
        Create = "create" => (T2, Create, ContractsWrite),
        Update = "update" => (T2, Update, ContractsWrite),
        Delete = "delete" => (T2, Delete, ContractsWrite),
        AddLine = "add_line" => (T2, Create, ContractsWrite),
        RemoveLine = "remove_line" => (T2, Delete, ContractsWrite),
        Activate = "activate" => (T3, Update, ContractsManage),
        Pause = "pause" => (T3, Update, ContractsManage),
        Resume = "resume" => (T3, Update, ContractsManage),
        Cancel = "cancel" => (T3, Update, ContractsManage),
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct ManageInput {
    action: ContractAction,
    /// Every action but create.
    #[schemars(length(min = 36, max = 36))]
    contract_id: Option<String>,
    #[schemars(length(min = 1, max = 2000))]
    name: Option<String>,
    /// create: ISO 4217, e.g. USD (default: the organization's billing currency); a manual
    /// line's, default the contract's.
    #[schemars(length(min = 3, max = 3))]
    currency: Option<String>,
    /// create (default monthly), update.
    billing_period: Option<PeriodArg>,
    /// Basis points (2000 = 20 %) on every billed line; default 0.
    #[schemars(range(min = 0, max = 10000))]
    tax_bp: Option<u32>,
    #[schemars(length(min = 1, max = 2000))]
    notes: Option<String>,
    /// RFC 3339: the first period's start; create defaults to now.
    #[schemars(length(max = 40))]
    starts_at: Option<String>,
    /// add_line: a manual line's text (or give catalogItemId).
    #[schemars(length(min = 1, max = 2000))]
    description: Option<String>,
    /// add_line: a catalog item, at this organization's price.
    #[schemars(length(min = 36, max = 36))]
    catalog_item_id: Option<String>,
    /// add_line: decimal, default "1".
    #[schemars(length(min = 1, max = 24))]
    quantity: Option<String>,
    /// add_line (manual): decimal string per period, e.g. "25.00".
    #[schemars(length(min = 1, max = 24))]
    unit_price: Option<String>,
    /// remove_line.
    #[schemars(length(min = 36, max = 36))]
    line_id: Option<String>,
}

impl ManageInput {
    fn line_fields(&self) -> ledger::LineFields<'_> {
        ledger::LineFields {
            catalog_item_id: self.catalog_item_id.as_deref(),
            description: self.description.as_deref(),
            quantity: self.quantity.as_deref(),
            unit_price: self.unit_price.as_deref(),
            currency: self.currency.as_deref(),
        }
    }
}

pub(crate) struct ManageContracts;

impl Tool for ManageContracts {
    const NAME: &'static str = "manage_contracts";
    const TITLE: &'static str = "Manage contracts";
    const DESCRIPTION: &'static str = "Recurring contract lifecycle. create|update|delete (drafts)|add_line (manual or catalog item)|remove_line Tier 2; activate|pause|resume|cancel Tier 3 with contracts.manage. Each closed billing period (monthly, quarterly, yearly) opens a draft invoice of the lines.";
    const TIER: Tier = Tier::T2;
    const PERMISSION: Permission = Permission::ContractsWrite;
    type Actions = ContractAction;
    type Input = ManageInput;
    type Output = Rendered<ContractsOutput>;
    type Reach = (reach::Contracts, reach::Tenancy);

    async fn precheck(
        cx: &ToolCx<'_, Self::Reach>,
        input: &Self::Input,
    ) -> Result<Option<Pin>, ToolError> {
        let c = resolve(cx, input.contract_id.as_deref()).await?;
        lifecycle(input.action, c.status)?;
        // The approver sees, and the call is pinned to, the contract as it stands.
        Ok(Some(Pin {
            summary: format!("{} ({}, {})", c.name, c.status, c.billing_period),
            data: serde_json::json!({ "status": c.status, "updatedAt": c.updated_at }),
        }))
    }

    async fn call(
        cx: &ToolCx<'_, Self::Reach>,
        input: Self::Input,
    ) -> Result<Self::Output, ToolError> {
        let contracts = cx.contracts();
        let audit = |action: &str| ledger::audit(cx, "contract", action);
        let (message, id) = match input.action {
            ContractAction::Create => {
                let name = ledger::required(input.name.as_deref(), "name")?;
                let new = NewContract {
                    name: name.to_owned(),
                    currency: ledger::draft_currency(cx, input.currency.as_deref()).await?,
                    billing_period: input
                        .billing_period
                        .map_or(BillingPeriod::Monthly, Into::into),
                    tax_bp: input.tax_bp.unwrap_or(0),
                    notes: input.notes.clone(),
                    starts_at: time_arg("startsAt", input.starts_at.as_deref())?
                        .unwrap_or_else(|| cx.now()),
                    created_by: cx.actor.to_string(),
                };
                let c = contracts.create_draft(new, audit("create")).await?;
                ("draft contract created".to_owned(), c.id)
            }
            ContractAction::Update => {
                let c = resolve(cx, input.contract_id.as_deref()).await?;
                let update = ContractUpdate {
                    name: input.name.clone(),
                    billing_period: input.billing_period.map(Into::into),
                    tax_bp: input.tax_bp,
                    notes: input.notes.clone(),
                    starts_at: time_arg("startsAt", input.starts_at.as_deref())?,
                };
                contracts
                    .update_draft(c.id, update, audit("update"))
                    .await
                    .map_err(contract_missing)?;
                ("draft updated".to_owned(), c.id)
            }
            ContractAction::Delete => {
                let c = resolve(cx, input.contract_id.as_deref()).await?;
                contracts
                    .delete_draft(c.id, audit("delete"))
                    .await
                    .map_err(contract_missing)?;
                return Rendered::of(&ContractsOutput::said(format!("draft {} deleted", c.name)));
            }
            ContractAction::AddLine => {
                let c = resolve(cx, input.contract_id.as_deref()).await?;
                let line = match input.line_fields().line(c.currency)? {
                    LineArg::Catalog { item, quantity } => {
                        NewContractLine::Catalog { item, quantity }
                    }
                    LineArg::Manual {
                        description,
                        quantity,
                        unit_price,
                    } => NewContractLine::Manual {
                        description,
                        quantity,
                        unit_price,
                    },
                };
                contracts
                    .add_line(c.id, line, audit("add_line"))
                    .await
                    .map_err(contract_missing)?;
                ("line added".to_owned(), c.id)
            }
            ContractAction::RemoveLine => {
                let c = resolve(cx, input.contract_id.as_deref()).await?;
                let line = uuid_or_missing(
                    input.line_id.as_deref(),
                    "lineId",
                    "Contract line not found on this contract",
                )?;
                contracts
                    .remove_line(c.id, line, audit("remove_line"))
                    .await
                    .map_err(contract_missing)?;
                ("line removed".to_owned(), c.id)
            }
            ContractAction::Activate
            | ContractAction::Pause
            | ContractAction::Resume
            | ContractAction::Cancel => {
                let c = resolve(cx, input.contract_id.as_deref()).await?;
                let (name, to) = lifecycle(input.action, c.status)?;
                let c = contracts
                    .set_status(c.id, to, audit(name))
                    .await
                    .map_err(contract_missing)?;
                (format!("contract is {}", c.status), c.id)
            }
        };
        let c = contracts.get_contract(id).await?;
        Rendered::of(&ContractsOutput::record(
            Some(message),
            full_view(cx, c).await?,
        ))
    }
}

/// A lifecycle action's name and the status it moves a contract in `from` to; a conflict
/// when the contract is not in a state the action applies to (activate is for drafts,
/// resume for paused contracts), so the approver never approves a call bound to fail.
fn lifecycle(
    action: ContractAction,
    from: ContractStatus,
) -> Result<(&'static str, ContractStatus), ToolError> {
    let name = match action {
        ContractAction::Activate => "activate",
        ContractAction::Resume => "resume",
        ContractAction::Pause => "pause",
        ContractAction::Cancel => "cancel",
        // Not a lifecycle action: its own checks apply.
        _ => return Ok(("", from)),
    };
    let to = from.after(name).map_err(ledger::conflict)?;
    Ok((name, to))
}
