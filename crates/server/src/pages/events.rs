//! `GET /o/{org}/events`: live updates for an organization's pages, as Server-Sent Events.
//!
//! Each event names what changed — `approvals` (the set of pending requests), `alerts` (an
//! alert raised, acknowledged, resolved or suppressed: the unresolved alerts' counts by status
//! and newest id moved), `devices` (how
//! many devices are in each status: one came online, went offline, was added or removed) or
//! `metrics` (a tick every 14 s, when charts may have a new point), `livequeries` (answers to
//! a live query were stored, or one started or ended) — and carries only that
//! name as its data (an event with empty data is never dispatched by browsers). `app.js` tells
//! the elements that asked for that event (`data-refresh-on`) to reload themselves through
//! their own authorized fragment URL — the pending approvals, the device list's rows, a
//! device's status badge, its charts — so nothing reaches the browser by this stream that the
//! pages would not show. The stream's task asks the store every 2 s (the device counts come
//! from the in-memory device directory) and ends when the browser goes away.
//!
//! Each stream is a task and a poll, so a person holds at most [`PER_USER`] at once and an
//! organization [`PER_ORG`] (per instance; [`StreamSlots`]): past that the stream is refused
//! with 429 and the page simply stops updating itself.

use std::{
    collections::HashMap,
    convert::Infallible,
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use axum::{
    extract::{Path, State},
    response::{
        IntoResponse, Response,
        sse::{Event, KeepAlive, Sse},
    },
};
use breeze_core::{DeviceStatus, Operation, Permission};
use breeze_store::DeviceFilter;
use tokio_stream::wrappers::ReceiverStream;

use super::{PageError, SignedIn};
use crate::AppState;

const POLL: Duration = Duration::from_secs(2);
const METRICS_TICK: u32 = 15 / 2;

/// Live streams one person may hold at once (a few tabs).
pub(crate) const PER_USER: usize = 8;
/// Live streams one organization's people may hold at once.
pub(crate) const PER_ORG: usize = 64;

/// Who holds how many live streams in this process.
#[derive(Default)]
pub(crate) struct StreamSlots {
    held: Mutex<HashMap<Holder, usize>>,
}

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum Holder {
    User(breeze_core::UserId),
    Org(breeze_core::OrgId),
}

/// One stream's place under the caps, given back when the stream ends.
struct Slot {
    slots: Arc<StreamSlots>,
    holders: [Holder; 2],
}

impl StreamSlots {
    /// A place for one more stream of `user` in `org`, or why not.
    fn take(
        self: &Arc<Self>,
        user: breeze_core::UserId,
        org: breeze_core::OrgId,
    ) -> Result<Slot, &'static str> {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        let count = |h: &Holder| held.get(h).copied().unwrap_or(0);
        let holders = [Holder::User(user), Holder::Org(org)];
        if count(&holders[0]) >= PER_USER {
            return Err("Too many live dashboard updates open for this person");
        }
        if count(&holders[1]) >= PER_ORG {
            return Err("Too many live dashboard updates open for this organization");
        }
        for h in holders {
            *held.entry(h).or_default() += 1;
        }
        Ok(Slot {
            slots: self.clone(),
            holders,
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut held = self
            .slots
            .held
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for h in &self.holders {
            if let Some(n) = held.get_mut(h) {
                *n -= 1;
                if *n == 0 {
                    held.remove(h);
                }
            }
        }
    }
}

pub(super) async fn stream(
    State(state): State<AppState>,
    who: SignedIn,
    Path(org): Path<String>,
) -> Result<Response, PageError> {
    let scope = who
        .scope(&state, &org, Operation::read(Permission::DevicesRead))
        .await?;
    let org_id = scope.org.id;
    let slot = state
        .dashboard_streams
        .take(who.user.id, org_id)
        .map_err(|m| {
            crate::ApiError::new(axum::http::StatusCode::TOO_MANY_REQUESTS, "rate_limited", m)
                .retry_after(60)
        })?;
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Event, Infallible>>(8);
    tokio::spawn(async move {
        // Held as long as the stream's task runs.
        let _slot = slot;
        let mut last_pending: Option<Vec<uuid::Uuid>> = None;
        let mut last_counts: Option<Vec<u64>> = None;
        let mut last_alerts = None;
        let mut last_live = None;
        let mut ticks = 0u32;
        loop {
            let pending = state
                .store
                .org(org_id)
                .approvals()
                .pending_approvals()
                .await
                .map(|v| v.into_iter().map(|r| r.id).collect::<Vec<_>>());
            if let Ok(ids) = pending {
                if last_pending.as_ref().is_some_and(|l| *l != ids)
                    && tx
                        .send(Ok(Event::default().event("approvals").data("approvals")))
                        .await
                        .is_err()
                {
                    return;
                }
                last_pending = Some(ids);
            }
            if let Ok(sig) = state
                .store
                .org(org_id)
                .alerts()
                .unresolved_signature()
                .await
            {
                if last_alerts.as_ref().is_some_and(|l| *l != sig)
                    && tx
                        .send(Ok(Event::default().event("alerts").data("alerts")))
                        .await
                        .is_err()
                {
                    return;
                }
                last_alerts = Some(sig);
            }
            if let Ok(live) = state.store.org(org_id).live_queries().activity().await {
                if last_live.is_some_and(|l| l != live)
                    && tx
                        .send(Ok(Event::default()
                            .event("livequeries")
                            .data("livequeries")))
                        .await
                        .is_err()
                {
                    return;
                }
                last_live = Some(live);
            }
            if let Ok(counts) = status_counts(&state, org_id).await {
                if last_counts.as_ref().is_some_and(|l| *l != counts)
                    && tx
                        .send(Ok(Event::default().event("devices").data("devices")))
                        .await
                        .is_err()
                {
                    return;
                }
                last_counts = Some(counts);
            }
            ticks += 1;
            if ticks.is_multiple_of(METRICS_TICK)
                && tx
                    .send(Ok(Event::default().event("metrics").data("metrics")))
                    .await
                    .is_err()
            {
                return;
            }
            tokio::select! {
                () = tokio::time::sleep(POLL) => {}
                () = tx.closed() => return,
            }
        }
    });
    Ok(Sse::new(ReceiverStream::new(rx))
        .keep_alive(KeepAlive::default())
        .into_response())
}

/// How many of the organization's devices are in each status (the directory answers each in
/// O(1)): any change in status shows in these counts, except two devices swapping statuses
/// within one poll.
async fn status_counts(state: &AppState, org: breeze_core::OrgId) -> Result<Vec<u64>, PageError> {
    let store = state.store.org(org);
    let mut counts = Vec::with_capacity(DeviceStatus::ALL.len());
    for status in DeviceStatus::ALL {
        let filter = DeviceFilter {
            status: Some(*status),
            ..DeviceFilter::default()
        };
        counts.push(store.devices().device_page(&filter, 0, 0).await?.total());
    }
    Ok(counts)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An organization's people together hold at most [`PER_ORG`] streams; each person at
    /// most [`PER_USER`]; a stream ended gives both places back.
    #[test]
    fn streams_are_capped_per_person_and_organization() {
        let slots = Arc::new(StreamSlots::default());
        let org = breeze_core::OrgId::new();
        let mut held = Vec::new();
        for _ in 0..PER_ORG / PER_USER {
            let user = breeze_core::UserId::new();
            for _ in 0..PER_USER {
                held.push(slots.take(user, org).unwrap());
            }
            assert!(slots.take(user, org).is_err(), "per person");
        }
        let newcomer = breeze_core::UserId::new();
        let e = slots.take(newcomer, org).err().unwrap();
        assert!(e.contains("organization"), "{e}");
        // Another organization is not affected.
        slots.take(newcomer, breeze_core::OrgId::new()).unwrap();
        held.pop();
        assert!(slots.take(newcomer, org).is_ok());
        drop(held);
        assert!(
            slots.held.lock().unwrap().is_empty(),
            "every place given back"
        );
    }
}
