//! `GET /o/{org}/events`: live updates for an organization's pages, as Server-Sent Events.
//!
//! Each event names what changed — `approvals` (the set of pending requests), `devices` (how
//! many devices are in each status: one came online, went offline, was added or removed) or
//! `metrics` (a tick every 14 s, when charts may have a new point) — and carries only that
//! name as its data (an event with empty data is never dispatched by browsers). `app.js` tells
//! the elements that asked for that event (`data-refresh-on`) to reload themselves through
//! their own authorized fragment URL — the pending approvals, the device list's rows, a
//! device's status badge, its charts — so nothing reaches the browser by this stream that the
//! pages would not show. The stream's task asks the store every 2 s (the device counts come
//! from the in-memory device directory) and ends when the browser goes away.

use std::{convert::Infallible, time::Duration};

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

pub(super) async fn stream(
    State(state): State<AppState>,
    who: SignedIn,
    Path(org): Path<String>,
) -> Result<Response, PageError> {
    let scope = who
        .scope(&state, &org, Operation::read(Permission::DevicesRead))
        .await?;
    let org_id = scope.org.id;
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Event, Infallible>>(8);
    tokio::spawn(async move {
        let mut last_pending: Option<Vec<uuid::Uuid>> = None;
        let mut last_counts: Option<Vec<u64>> = None;
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
