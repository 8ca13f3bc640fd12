//! The dashboard's static files, embedded in the binary and served under content-hashed names.
//!
//! Each file in `crates/server/assets/` is compiled in with `include_bytes!` and answered at
//! `/assets/<stem>.<hash>.<ext>`, where `<hash>` is the first 10 hex digits of its SHA-256:
//! a new build with a changed file gets a new URL, so every asset is cacheable for a year
//! (`immutable`). Templates never spell an asset's URL; they take it from [`url`](fn@url).

use std::sync::LazyLock;

use axum::{
    extract::Path,
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use sha2::{Digest, Sha256};

/// One embedded file.
struct Asset {
    /// The file's name in `crates/server/assets/`.
    name: &'static str,
    content_type: &'static str,
    bytes: &'static [u8],
}

const FILES: &[Asset] = &[
    Asset {
        name: "htmx.min.js",
        content_type: "text/javascript; charset=utf-8",
        bytes: include_bytes!("../../assets/htmx.min.js"),
    },
    Asset {
        name: "app.js",
        content_type: "text/javascript; charset=utf-8",
        bytes: include_bytes!("../../assets/app.js"),
    },
    Asset {
        name: "sources.js",
        content_type: "text/javascript; charset=utf-8",
        bytes: include_bytes!("../../assets/sources.js"),
    },
    Asset {
        name: "app.css",
        content_type: "text/css; charset=utf-8",
        bytes: include_bytes!("../../assets/app.css"),
    },
    Asset {
        name: "chat.js",
        content_type: "text/javascript; charset=utf-8",
        bytes: include_bytes!("../../assets/chat.js"),
    },
    Asset {
        name: "chat.css",
        content_type: "text/css; charset=utf-8",
        bytes: include_bytes!("../../assets/chat.css"),
    },
    Asset {
        name: "favicon.svg",
        content_type: "image/svg+xml",
        bytes: include_bytes!("../../assets/favicon.svg"),
    },
];

/// An asset with its served name (`app.1a2b3c4d5e.css`).
struct Hashed {
    asset: &'static Asset,
    url: String,
    etag: HeaderValue,
}

static HASHED: LazyLock<Vec<Hashed>> = LazyLock::new(|| {
    FILES
        .iter()
        .map(|asset| {
            let digest = Sha256::digest(asset.bytes);
            let hash: String = digest[..5].iter().map(|b| format!("{b:02x}")).collect();
            let (stem, ext) = asset.name.rsplit_once('.').unwrap_or((asset.name, ""));
            Hashed {
                asset,
                url: format!("/assets/{stem}.{hash}.{ext}"),
                etag: HeaderValue::from_str(&format!("\"{hash}\""))
                    .unwrap_or(HeaderValue::from_static("\"\"")),
            }
        })
        .collect()
});

/// The URL under which the embedded file `name` is served. An unknown name is a programming
/// error caught by the tests (every page renders in them); it yields a URL that answers 404.
pub(crate) fn url(name: &str) -> &'static str {
    HASHED
        .iter()
        .find(|h| h.asset.name == name)
        .map_or("/assets/missing", |h| h.url.as_str())
}

/// `GET /assets/{file}`: the asset whose hashed name is `file`, cacheable forever.
pub(crate) async fn serve(Path(file): Path<String>) -> Response {
    let path = format!("/assets/{file}");
    let Some(found) = HASHED.iter().find(|h| h.url == path) else {
        return (StatusCode::NOT_FOUND, "no such asset").into_response();
    };
    (
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static(found.asset.content_type),
            ),
            (
                header::CACHE_CONTROL,
                HeaderValue::from_static("public, max-age=31536000, immutable"),
            ),
            (header::ETAG, found.etag.clone()),
        ],
        found.asset.bytes,
    )
        .into_response()
}
