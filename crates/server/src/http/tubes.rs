//! Tubes: `GET /api/v1/tubes`, `GET /api/v1/tubes/{tube}`, pause and resume.

use axum::extract::rejection::{JsonRejection, PathRejection};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use tickwheel_queue::{TubeName, TubeStats};
use utoipa::ToSchema;

use super::{ApiError, AppState, ErrorBody};

pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/v1/tubes", get(list))
        .route("/api/v1/tubes/{tube}", get(one))
        .route("/api/v1/tubes/{tube}/pause", post(pause))
        .route("/api/v1/tubes/{tube}/resume", post(resume))
}

/// One tube: its jobs by state and its counters since the server started.
#[derive(Serialize, ToSchema, Debug)]
pub(crate) struct Tube {
    /// The tube's name.
    name: String,
    /// Ready jobs.
    ready: u64,
    /// Delayed jobs (in memory and on disk).
    delayed: u64,
    /// Reserved jobs.
    reserved: u64,
    /// Buried jobs.
    buried: u64,
    /// Ready jobs with priority below 1024.
    urgent: u64,
    /// Jobs put in this tube since the server started.
    total_jobs: u64,
    /// Paused: no job is reserved from it until the pause ends.
    paused: bool,
    /// Whole seconds until the pause ends, truncated (0 if not paused).
    pause_time_left_s: u64,
    /// Jobs put (the same as `total_jobs`).
    puts: u64,
    /// Reservations of this tube's jobs.
    reserves: u64,
    /// Deletes of this tube's jobs.
    deletes: u64,
    /// Reservations that ran out (TTR).
    timeouts: u64,
}

impl From<TubeStats> for Tube {
    fn from(s: TubeStats) -> Tube {
        Tube {
            name: s.name.to_string(),
            ready: s.ready,
            delayed: s.delayed,
            reserved: s.reserved,
            buried: s.buried,
            urgent: s.urgent,
            total_jobs: s.total_jobs,
            paused: s.pause_time_left > 0,
            // Whole seconds, truncated as beanstalkd prints them.
            pause_time_left_s: s.pause_time_left / 1000,
            puts: s.total_jobs,
            reserves: s.reserves,
            deletes: s.cmd_delete,
            timeouts: s.timeouts,
        }
    }
}

pub(crate) fn tube_name(name: &str) -> Result<TubeName, ApiError> {
    TubeName::new(name).map_err(|e| ApiError::bad_request("bad_tube_name", e.to_string()))
}

fn tube_not_found(name: &TubeName) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "tube_not_found",
        format!("no tube {name:?} (a tube exists while it has jobs or clients)"),
    )
}

/// Every tube with its counts.
#[utoipa::path(get, path = "/api/v1/tubes", tag = "tubes",
    responses(
        (status = 200, description = "every tube", body = Vec<Tube>),
        (status = 503, description = "still recovering", body = ErrorBody)))]
pub(crate) async fn list(State(state): State<AppState>) -> Result<Json<Vec<Tube>>, ApiError> {
    let shared = state.shared()?;
    let now = shared.now();
    let (_, tubes) = shared.apply(|engine| {
        engine.advance(now);
        let mut names = engine.tube_names();
        names.sort();
        names
            .iter()
            .filter_map(|name| engine.tube_stats(name))
            .map(Tube::from)
            .collect::<Vec<_>>()
    });
    Ok(Json(tubes))
}

/// One tube with its counts.
#[utoipa::path(get, path = "/api/v1/tubes/{tube}", tag = "tubes",
    params(("tube" = String, Path, description = "tube name", pattern = r"^[A-Za-z0-9+/;.$_()][A-Za-z0-9+/;.$_()-]{0,199}$")),
    responses(
        (status = 200, description = "the tube", body = Tube),
        (status = 400, description = "not a tube name", body = ErrorBody),
        (status = 404, description = "no such tube", body = ErrorBody)))]
pub(crate) async fn one(
    State(state): State<AppState>,
    tube: Result<Path<String>, PathRejection>,
) -> Result<Json<Tube>, ApiError> {
    let Path(tube) = tube?;
    let name = tube_name(&tube)?;
    let shared = state.shared()?;
    let now = shared.now();
    let (_, stats) = shared.apply(|engine| {
        engine.advance(now);
        engine.tube_stats(&name)
    });
    stats
        .map(|s| Json(Tube::from(s)))
        .ok_or_else(|| tube_not_found(&name))
}

/// How long to pause a tube.
#[derive(Deserialize, ToSchema, Debug)]
#[serde(deny_unknown_fields)]
pub(crate) struct Pause {
    /// Seconds (0 lifts a pause, at most 2^32 - 1 as in beanstalkd's `pause-tube`).
    #[schema(minimum = 0, maximum = 4_294_967_295_u64)]
    seconds: u32,
}

/// Pauses a tube: no job is reserved from it for `seconds` (`pause-tube`).
#[utoipa::path(post, path = "/api/v1/tubes/{tube}/pause", tag = "tubes",
    params(("tube" = String, Path, description = "tube name", pattern = r"^[A-Za-z0-9+/;.$_()][A-Za-z0-9+/;.$_()-]{0,199}$")),
    request_body = Pause,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "paused", body = Tube),
        (status = 400, description = "bad input", body = ErrorBody),
        (status = 401, description = "no or wrong token", body = ErrorBody),
        (status = 404, description = "no such tube", body = ErrorBody)))]
pub(crate) async fn pause(
    State(state): State<AppState>,
    tube: Result<Path<String>, PathRejection>,
    body: Result<Json<Pause>, JsonRejection>,
) -> Result<Json<Tube>, ApiError> {
    let Path(tube) = tube?;
    let name = tube_name(&tube)?;
    let Json(body) = body?;
    set_pause(&state, &name, body.seconds).await
}

/// Lifts a tube's pause (`pause-tube` with 0).
#[utoipa::path(post, path = "/api/v1/tubes/{tube}/resume", tag = "tubes",
    params(("tube" = String, Path, description = "tube name", pattern = r"^[A-Za-z0-9+/;.$_()][A-Za-z0-9+/;.$_()-]{0,199}$")),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "resumed", body = Tube),
        (status = 400, description = "bad input", body = ErrorBody),
        (status = 401, description = "no or wrong token", body = ErrorBody),
        (status = 404, description = "no such tube", body = ErrorBody)))]
pub(crate) async fn resume(
    State(state): State<AppState>,
    tube: Result<Path<String>, PathRejection>,
) -> Result<Json<Tube>, ApiError> {
    let Path(tube) = tube?;
    let name = tube_name(&tube)?;
    set_pause(&state, &name, 0).await
}

async fn set_pause(
    state: &AppState,
    name: &TubeName,
    seconds: u32,
) -> Result<Json<Tube>, ApiError> {
    let shared = state.shared()?;
    let (now, past_the_ms) = shared.clock_reading();
    // As the protocol's pause-tube: rounded up so the pause never ends early.
    let ms = match seconds {
        0 => 0,
        s => u64::from(s) * 1000 + u64::from(past_the_ms),
    };
    let (_, stats) = shared.apply(|engine| {
        engine
            .pause_tube(now, name, ms)
            .ok()
            .and_then(|()| engine.tube_stats(name))
    });
    stats
        .map(|s| Json(Tube::from(s)))
        .ok_or_else(|| tube_not_found(name))
}
