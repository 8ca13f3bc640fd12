//! Tickets as a PSA keeps them: statuses and the moves between them, priorities, readable
//! numbers, and invoice states.
//!
//! A ticket starts `new`; work moves it between `open`, `pending` (waiting on the customer) and
//! `on_hold` (waiting on something else); `resolved` says the work is done, `closed` that the
//! customer or the technician accepted it. Nothing returns to `new`. A resolved or closed
//! ticket is reopened by moving it to `open`. Moving a ticket to the status it has is refused,
//! so the audit log never records a change that changed nothing.

use crate::{Severity, string_enum};

string_enum! {
    /// Where a ticket is in its life.
    pub enum TicketStatus: "ticket status" {
        New = "new",
        Open = "open",
        Pending = "pending",
        OnHold = "on_hold",
        Resolved = "resolved",
        Closed = "closed",
    }
}

impl TicketStatus {
    /// Whether a PSA lets a ticket move from `self` to `to` (see the module docs).
    pub fn can_move_to(self, to: TicketStatus) -> bool {
        use TicketStatus::*;
        match (self, to) {
            (a, b) if a == b => false,
            (_, New) => false,
            (New | Open | Pending | OnHold, _) => true,
            (Resolved, Open | Closed) => true,
            (Closed, Open) => true,
            _ => false,
        }
    }

    /// Whether the ticket still needs work (counts as open in listings and on a device's page).
    pub fn is_active(self) -> bool {
        !matches!(self, TicketStatus::Resolved | TicketStatus::Closed)
    }
}

string_enum! {
    /// How urgent a ticket is, least to most.
    pub enum TicketPriority: "ticket priority" {
        Low = "low",
        Normal = "normal",
        High = "high",
        Urgent = "urgent",
    }
}

impl TicketPriority {
    /// The priority a ticket made from an alert of `severity` starts with.
    pub fn for_severity(severity: Severity) -> Self {
        match severity {
            Severity::Info | Severity::Low => TicketPriority::Low,
            Severity::Medium => TicketPriority::Normal,
            Severity::High => TicketPriority::High,
            Severity::Critical => TicketPriority::Urgent,
        }
    }
}

/// A ticket's number as people say it: `T-1042`. Numbers count up per partner from 1, so two
/// organizations of one partner never share one.
pub fn ticket_reference(number: i64) -> String {
    format!("T-{number}")
}

/// An issued invoice's number as printed: `INV-000042`. Numbers count up per partner from 1,
/// without gaps, assigned when the invoice is issued.
pub fn invoice_reference(number: i64) -> String {
    format!("INV-{number:06}")
}

string_enum! {
    /// Where an invoice is: a draft changes freely; an issued invoice never changes again
    /// except by payments (which make it `paid` once they cover it) or a void (which keeps its
    /// number). Corrections are a void and a new invoice.
    pub enum InvoiceStatus: "invoice status" {
        Draft = "draft",
        Issued = "issued",
        Paid = "paid",
        Void = "void",
    }
}

string_enum! {
    /// Where an invoice line came from: typed in, a ticket's time entry or part, a catalog
    /// item, a catalog bundle (one line at the bundle's price), or a contract's period.
    pub enum InvoiceLineKind: "invoice line kind" {
        Manual = "manual",
        Time = "time",
        Part = "part",
        Catalog = "catalog",
        Bundle = "bundle",
        Contract = "contract",
    }
}

string_enum! {
    /// What a catalog item is; a bundle is sold at its own price and lists its components.
    pub enum CatalogKind: "catalog item kind" {
        Hardware = "hardware",
        Software = "software",
        Service = "service",
        Bundle = "bundle",
    }
}

string_enum! {
    /// A recurring contract's state: only an active one bills its periods.
    pub enum ContractStatus: "contract status" {
        Draft = "draft",
        Active = "active",
        Paused = "paused",
        Cancelled = "cancelled",
    }
}

impl ContractStatus {
    /// The lifecycle a PSA allows: a draft is activated (or cancelled), an active contract
    /// paused or cancelled, a paused one resumed or cancelled; a cancelled one stays so.
    pub fn can_move_to(self, to: ContractStatus) -> bool {
        use ContractStatus::*;
        matches!(
            (self, to),
            (Draft, Active)
                | (Draft | Active | Paused, Cancelled)
                | (Active, Paused)
                | (Paused, Active)
        )
    }

    /// The status lifecycle action `action` (`activate`, `pause`, `resume`, `cancel`) moves a
    /// contract in this status to, or why it cannot: activate is for drafts, resume for paused
    /// contracts, and every move is one [`Self::can_move_to`] allows. The tool and the
    /// dashboard both ask this.
    pub fn after(self, action: &str) -> Result<ContractStatus, String> {
        use ContractStatus::*;
        let (needs, to) = match action {
            "activate" => (Some(Draft), Active),
            "resume" => (Some(Paused), Active),
            "pause" => (None, Paused),
            "cancel" => (None, Cancelled),
            other => return Err(format!("{other:?} is not a contract lifecycle action")),
        };
        if needs.is_some_and(|n| n != self) || !self.can_move_to(to) {
            return Err(format!("a {self} contract cannot {action}"));
        }
        Ok(to)
    }
}

string_enum! {
    /// How long a contract's billing period is.
    pub enum BillingPeriod: "billing period" {
        Monthly = "monthly",
        Quarterly = "quarterly",
        Yearly = "yearly",
    }
}

impl BillingPeriod {
    /// The period's length in calendar months.
    pub const fn months(self) -> u32 {
        match self {
            BillingPeriod::Monthly => 1,
            BillingPeriod::Quarterly => 3,
            BillingPeriod::Yearly => 12,
        }
    }

    /// The first period boundary after `after` of a contract whose periods start at
    /// `anchor`: `anchor + n` periods for the least such `n`. Counting from the anchor keeps
    /// the day of month (a contract starting on the 31st bills on the 30th in April and the
    /// 31st again in May) where chaining month by month would drift to the 28th for good.
    /// `None` past the calendar's end.
    pub fn boundary_after(
        self,
        anchor: crate::Timestamp,
        after: crate::Timestamp,
    ) -> Option<crate::Timestamp> {
        let mut n = 1u32;
        loop {
            let b =
                anchor.checked_add_months(chrono::Months::new(self.months().checked_mul(n)?))?;
            if b > after {
                return Some(b);
            }
            n = n.checked_add(1)?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transitions_are_what_a_psa_allows() {
        use TicketStatus::*;
        let allowed: Vec<(TicketStatus, TicketStatus)> = TicketStatus::ALL
            .iter()
            .flat_map(|a| TicketStatus::ALL.iter().map(move |b| (*a, *b)))
            .filter(|(a, b)| a.can_move_to(*b))
            .collect();
        // Nothing stays put or returns to new.
        assert!(allowed.iter().all(|(a, b)| a != b && *b != New));
        // Work states move anywhere else; done states only reopen (or close).
        for from in [New, Open, Pending, OnHold] {
            for to in [Open, Pending, OnHold, Resolved, Closed] {
                assert_eq!(from.can_move_to(to), from != to, "{from} → {to}");
            }
        }
        assert!(Resolved.can_move_to(Open) && Resolved.can_move_to(Closed));
        assert!(!Resolved.can_move_to(Pending) && !Resolved.can_move_to(OnHold));
        assert!(Closed.can_move_to(Open));
        assert!(!Closed.can_move_to(Resolved) && !Closed.can_move_to(Pending));
        assert_eq!(allowed.len(), 4 * 5 - 3 + 2 + 1);
        assert!(New.is_active() && OnHold.is_active() && !Resolved.is_active());
    }

    #[test]
    fn references_read_well() {
        assert_eq!(ticket_reference(1042), "T-1042");
        assert_eq!(invoice_reference(42), "INV-000042");
        assert_eq!(
            TicketPriority::for_severity(Severity::Critical),
            TicketPriority::Urgent
        );
        assert_eq!("on_hold".parse::<TicketStatus>(), Ok(TicketStatus::OnHold));
        assert!("onhold".parse::<TicketStatus>().is_err());
    }
}
