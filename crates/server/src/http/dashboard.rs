//! The web dashboard at `/`: one HTML page, a stylesheet and a script, embedded in the binary
//! (`include_str!`, no build step). The page polls the JSON API (`/api/v1/tubes`,
//! `/api/v1/stats`, `/api/v1/timeline`) and draws its charts as plain SVG; actions go through
//! the same API with the bearer token the user types in (kept in `sessionStorage`). It loads
//! nothing from the network but this server.

use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;

use super::AppState;

const INDEX: &str = include_str!("../../assets/dashboard.html");
const STYLE: &str = include_str!("../../assets/dashboard.css");
const SCRIPT: &str = include_str!("../../assets/dashboard.js");

/// Nothing is cached across server upgrades: the assets are small and change with the binary.
const NO_CACHE: (header::HeaderName, &str) = (header::CACHE_CONTROL, "no-cache");

pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/", get(index))
        .route("/assets/dashboard.css", get(style))
        .route("/assets/dashboard.js", get(script))
}

async fn index() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            NO_CACHE,
            // The page talks only to this server and runs only its own script.
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; \
                 frame-ancestors 'none'",
            ),
        ],
        INDEX,
    )
}

async fn style() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8"), NO_CACHE],
        STYLE,
    )
}

async fn script() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/javascript; charset=utf-8"),
            NO_CACHE,
        ],
        SCRIPT,
    )
}
