//! `GET /o/{org}/events`: live updates for an organization's pages, as Server-Sent Events.
//!
//! Each event names what changed — `approvals` (the set of pending requests), `devices` (how
//! many are online) or `metrics` (a tick every 14 s, when charts may have a new point) — and
//! carries only that name (an event with empty data is never dispatched by browsers): `app.js` tells the elements that asked for that event to reload themselves
//! through their own authorized fragment URL, so nothing reaches the browser by this stream
//! that the pages would not show. The stream's task asks the store every 2 s and ends when
//! the browser goes away.

use std::{convert::Infallible, time::Duration};

use axum::{
    extract::{Path, State},
    response::{
        IntoResponse, Response,
        sse::{Event, KeepAlive, Sse},
    },
};
use breeze_core::{DeviceStatus, Permission};
use breeze_store::DeviceFilter;
use tokio_stream::wrappers::ReceiverStream;

use super::{PageError, SignedIn};
use crate::{AppState, authz::org_scope};

const POLL: Duration = Duration::from_secs(2);
const METRICS_TICK: u32 = 15 / 2;

pub(super) async fn stream(
    State(state): State<AppState>,
    who: SignedIn,
    Path(org): Path<String>,
) -> Result<Response, PageError> {
    let scope = org_scope(&state, &who.principal(), &org, Permission::DevicesRead).await?;
    let org_id = scope.org.id;
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Event, Infallible>>(8);
    tokio::spawn(async move {
        let mut last_pending: Option<Vec<uuid::Uuid>> = None;
        let mut last_online: Option<u64> = None;
        let mut ticks = 0u32;
        loop {
            let pending = state
                .store
                .pending_approvals(&[org_id])
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
            let filter = DeviceFilter {
                status: Some(DeviceStatus::Online),
                ..DeviceFilter::default()
            };
            if let Ok(page) = state.store.org(org_id).device_page(&filter, 1, 0).await {
                let online = page.total();
                if last_online.is_some_and(|l| l != online)
                    && tx
                        .send(Ok(Event::default().event("devices").data("devices")))
                        .await
                        .is_err()
                {
                    return;
                }
                last_online = Some(online);
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
