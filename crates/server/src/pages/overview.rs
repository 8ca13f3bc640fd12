//! `GET /o/{org}`: an organization's overview — what needs a person now, and the fleet at a
//! glance.

use askama::Template;
use axum::{
    Router,
    extract::{Path, State},
    response::Response,
    routing::get,
};
use breeze_core::{DeviceStatus, Operation, Permission};
use breeze_store::DeviceFilter;

use super::{Layout, PageError, Section, SignedIn, render};
use crate::AppState;

pub(super) fn router() -> Router<AppState> {
    Router::new().route("/o/{org}", get(show))
}

#[derive(Template)]
#[template(path = "overview.html")]
struct Overview {
    l: Layout,
    devices: u64,
    online: u64,
    offline: u64,
    pending: usize,
    mcp_url: String,
}

async fn show(
    State(state): State<AppState>,
    who: SignedIn,
    Path(org): Path<String>,
) -> Result<Response, PageError> {
    let scope = who
        .scope(&state, &org, Operation::read(Permission::DevicesRead))
        .await?;
    let store = scope.store(&state);
    let count = |status: Option<DeviceStatus>| {
        let filter = DeviceFilter {
            status,
            ..DeviceFilter::default()
        };
        async move {
            store
                .devices()
                .device_page(&filter, 1, 0)
                .await
                .map(|p| p.total())
        }
    };
    let devices = count(None).await?;
    let online = count(Some(DeviceStatus::Online)).await?;
    let offline = count(Some(DeviceStatus::Offline)).await?;
    let pending = state
        .store
        .org(scope.org.id)
        .approvals()
        .pending_approvals()
        .await?
        .len();
    let mut l = Layout::for_user(
        &state,
        &who,
        Some(&scope.org),
        Section::Home,
        &scope.org.name,
    )
    .await?;
    l.chat_about("context=overview");
    render(&Overview {
        l,
        devices,
        online,
        offline,
        pending,
        mcp_url: super::mcp_url(&state),
    })
}
