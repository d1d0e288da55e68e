//! `GET /openapi.json`: the OpenAPI 3 document, generated from the handlers' annotations and
//! the request and response types (`utoipa`), never written by hand.

use axum::routing::get;
use axum::{Json, Router};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use super::{jobs, metrics, status, timeline, tubes, AppState};

/// The API's OpenAPI document.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "tickwheel HTTP API",
        description = "Jobs, tubes and server state of a tickwheel server. Mutating calls need \
                       `Authorization: Bearer <token>` when the server has a token \
                       (`--http-token`). Errors are `{\"error\":{\"code\",\"message\"}}`."
    ),
    paths(
        status::healthz,
        status::readyz,
        status::stats,
        metrics::metrics,
        tubes::list,
        tubes::one,
        tubes::pause,
        tubes::resume,
        jobs::put,
        jobs::one,
        jobs::delete,
        jobs::kick,
        jobs::bury,
        jobs::one_by_key,
        jobs::delete_by_key,
        timeline::timeline,
    ),
    modifiers(&BearerAuth)
)]
pub(crate) struct ApiDoc;

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

pub(crate) fn routes() -> Router<AppState> {
    Router::new().route("/openapi.json", get(openapi))
}

async fn openapi() -> Json<utoipa::openapi::OpenApi> {
    Json(ApiDoc::openapi())
}
