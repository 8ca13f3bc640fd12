//! A generated report's download: `GET /api/v1/orgs/{org}/reports/{run}/download`.
//!
//! Authorized like `generate_report`'s reads (`audit.read`; an API key needs `ai:read`). The
//! body streams the run's stored chunks one at a time (each read when the client is ready for
//! it), so a download of any size holds one chunk (~256 KiB) in memory. Another
//! organization's run, a run still running or one that failed answer 404 like a missing one.

use axum::{
    Router,
    body::Body,
    extract::{Path, State},
    http::{HeaderValue, header},
    response::{IntoResponse, Response},
    routing::get,
};
use breeze_core::{ReportFormat, ReportStatus};
use breeze_store::{Store, StoreError};
use uuid::Uuid;

use crate::{ApiError, AppState, authz::OrgScope};

pub(crate) fn router() -> Router<AppState> {
    Router::new().route("/orgs/{org}/reports/{run}/download", get(download))
}

fn run_not_found() -> ApiError {
    ApiError::not_found("report run not found")
}

async fn download(
    State(state): State<AppState>,
    scope: OrgScope,
    Path((_, run)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let run = Uuid::parse_str(&run).map_err(|_| run_not_found())?;
    let record = match scope.store(&state).reports().get_report_run(run).await {
        Ok(r) => r,
        Err(StoreError::NotFound(_)) => return Err(run_not_found()),
        Err(e) => return Err(e.into()),
    };
    if record.status != ReportStatus::Completed {
        return Err(run_not_found());
    }
    let (content_type, ext) = match record.format {
        ReportFormat::Json => ("application/json", "json"),
        ReportFormat::Csv => ("text/csv; charset=utf-8", "csv"),
        ReportFormat::Pdf => ("application/pdf", "pdf"),
    };
    let org_id = scope.org.id;
    let store: Store = state.store.clone();
    let chunks = record.chunk_count;
    let body = futures::stream::unfold(0i64, move |seq| {
        let store = store.clone();
        async move {
            if seq >= chunks {
                return None;
            }
            match store.org(org_id).reports().report_chunk(run, seq).await {
                Ok(Some(data)) => Some((Ok::<_, StoreError>(data), seq + 1)),
                // A run pruned while it was being downloaded: the body ends short.
                Ok(None) => None,
                Err(e) => Some((Err(e), chunks)),
            }
        }
    });
    let disposition = format!("attachment; filename=\"report-{run}.{ext}\"");
    let mut response = Body::from_stream(body).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(
        header::CONTENT_LENGTH,
        HeaderValue::from(record.byte_count.max(0) as u64),
    );
    if let Ok(v) = HeaderValue::from_str(&disposition) {
        headers.insert(header::CONTENT_DISPOSITION, v);
    }
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(response)
}
