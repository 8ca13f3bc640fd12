//! The contract billing worker, one of the server's background tasks ([`crate::serve`]).
//!
//! Each [`ContractBillingWorker::tick`] bills the periods of active contracts that have closed
//! by the store's clock ([`Store::bill_closed_periods`]): one draft invoice per period, in
//! arrears. Every instance of a cluster runs the worker; the store elects who bills each
//! period as the scan schedules do, by a conditional claim (moving the contract's
//! `next_period_at` from the value read), so a period is billed once whichever instance
//! gets there first. A period missed while the server was down is billed at the next tick.

use std::{sync::Arc, time::Duration};

use breeze_store::{PeriodsBilled, Store, StoreError};

use crate::workers::Worker;

/// How often the worker looks for closed periods.
pub const CONTRACT_BILLING_TICK: Duration = Duration::from_secs(300);

/// The worker. Cheap to share (`Arc`).
pub struct ContractBillingWorker {
    store: Store,
}

impl ContractBillingWorker {
    pub fn new(store: Store) -> Self {
        Self { store }
    }
}

/// Runs every [`CONTRACT_BILLING_TICK`].
impl Worker for ContractBillingWorker {
    const NAME: &'static str = "contract billing";
    type Report = PeriodsBilled;
    type Error = StoreError;

    fn period(&self) -> Duration {
        CONTRACT_BILLING_TICK
    }

    async fn tick(self: &Arc<Self>) -> Result<PeriodsBilled, StoreError> {
        let now = self.store.clock().now();
        self.store.bill_closed_periods(now).await
    }

    fn log(&self, report: &PeriodsBilled) {
        if report.periods > 0 {
            tracing::info!(
                periods = report.periods,
                invoices = report.invoices.len(),
                "contract periods billed"
            );
        }
    }
}
