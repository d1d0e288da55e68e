//! Jobs: put (with millisecond delays, absolute due times and idempotency keys), get,
//! delete, kick, bury; get and delete by idempotency key.

use axum::extract::rejection::{JsonRejection, PathRejection};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use base64::Engine as _;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use tickwheel_queue::{
    ClientId, Engine, Error as EngineError, JobDetail, JobId, JobState, Millis, NewJob,
    MAX_IDEMPOTENCY_KEY,
};
use utoipa::ToSchema;

use super::tubes::tube_name;
use super::{durable, with_loads, writable, ApiError, AppState, ErrorBody};

/// The engine client HTTP calls act as: never connected, so it holds no reservation and is
/// never counted as a connection. A protocol client's ids count up from 1 and never reach it.
const HTTP_CLIENT: ClientId = ClientId(u64::MAX);

/// How much of a body `GET` shows.
const PREVIEW_BYTES: usize = 256;

pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/v1/jobs", post(put))
        .route("/api/v1/jobs/{id}", get(one).delete(delete))
        .route("/api/v1/jobs/{id}/kick", post(kick))
        .route("/api/v1/jobs/{id}/bury", post(bury))
        .route(
            "/api/v1/jobs/by-key/{tube}/{key}",
            get(one_by_key).delete(delete_by_key),
        )
}

fn default_tube() -> String {
    "default".to_owned()
}

fn default_priority() -> u32 {
    1024
}

fn default_ttr() -> u32 {
    60
}

/// A new job. Give the body as `body` (text) or `body_base64` (bytes), and at most one of
/// `delay_ms` and `due_at_ms`.
#[derive(Deserialize, ToSchema, Debug)]
#[serde(deny_unknown_fields)]
pub(crate) struct PutJob {
    /// The tube (created if needed; default `default`).
    #[serde(default = "default_tube")]
    #[schema(
        default = "default",
        pattern = r"^[A-Za-z0-9+/;.$_()][A-Za-z0-9+/;.$_()-]{0,199}$"
    )]
    tube: String,
    /// The body as text (UTF-8).
    body: Option<String>,
    /// The body as base64 (standard alphabet, padded).
    #[schema(pattern = r"^([A-Za-z0-9+/]{4})*([A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$")]
    body_base64: Option<String>,
    /// Lower is more urgent (default 1024).
    #[serde(default = "default_priority")]
    #[schema(default = 1024, minimum = 0, maximum = 4_294_967_295_u64)]
    priority: u32,
    /// Time to run, seconds (default 60; below 1 counts as 1).
    #[serde(default = "default_ttr")]
    #[schema(default = 60, minimum = 0, maximum = 4_294_967_295_u64)]
    ttr_s: u32,
    /// Ready after this many milliseconds (never earlier).
    #[schema(minimum = 0)]
    delay_ms: Option<u64>,
    /// Ready at this time (Unix ms, never earlier); a past time is ready at once.
    #[schema(minimum = 0)]
    due_at_ms: Option<u64>,
    /// A second put with the same key in the same tube, while the first job exists,
    /// returns the first job's id and changes nothing (1 to 200 bytes, no control
    /// characters).
    #[schema(min_length = 1, max_length = 200)]
    idempotency_key: Option<String>,
}

/// The job put, or the live job that already had the idempotency key.
#[derive(Serialize, ToSchema, Debug)]
pub(crate) struct PutAnswer {
    /// The job id.
    id: JobId,
    /// `false` when a live job of the tube already had the key (nothing changed).
    created: bool,
}

/// A job as `GET` shows it.
#[derive(Serialize, ToSchema, Debug)]
pub(crate) struct Job {
    /// The job id.
    id: JobId,
    /// Its tube.
    tube: String,
    /// `ready`, `delayed`, `reserved` or `buried`.
    #[schema(example = "delayed")]
    state: &'static str,
    /// Priority (lower is more urgent).
    priority: u32,
    /// Time to run, seconds.
    ttr_s: u64,
    /// Seconds since it was put.
    age_s: u64,
    /// When a delayed job is due (Unix ms); `null` in other states.
    due_at_ms: Option<u64>,
    /// Until a delayed job is due or a reservation ends, ms (0 otherwise).
    time_left_ms: u64,
    /// Times reserved.
    reserves: u32,
    /// Reservations that ran out.
    timeouts: u32,
    /// Times released.
    releases: u32,
    /// Times buried.
    buries: u32,
    /// Times kicked.
    kicks: u32,
    /// Body size, bytes.
    body_len: usize,
    /// The first 256 bytes of the body as text (invalid UTF-8 replaced).
    body_preview: String,
    /// The same bytes in base64.
    body_base64_preview: String,
    /// The idempotency key given at put.
    idempotency_key: Option<String>,
}

impl From<JobDetail> for Job {
    fn from(d: JobDetail) -> Job {
        let s = d.stats;
        let preview = &d.body[..d.body.len().min(PREVIEW_BYTES)];
        Job {
            id: s.id,
            tube: s.tube.to_string(),
            state: s.state.as_str(),
            priority: s.priority,
            ttr_s: s.ttr / 1000,
            age_s: s.age / 1000,
            due_at_ms: d.due_at,
            time_left_ms: s.time_left,
            reserves: s.reserves,
            timeouts: s.timeouts,
            releases: s.releases,
            buries: s.buries,
            kicks: s.kicks,
            body_len: d.body.len(),
            body_preview: String::from_utf8_lossy(preview).into_owned(),
            body_base64_preview: base64::engine::general_purpose::STANDARD.encode(preview),
            idempotency_key: d.idempotency_key,
        }
    }
}

/// An idempotency key: 1 to 200 bytes, no control characters.
pub(crate) fn check_key(key: &str) -> Result<(), ApiError> {
    if key.is_empty() || key.len() > MAX_IDEMPOTENCY_KEY || key.chars().any(char::is_control) {
        return Err(ApiError::bad_request(
            "bad_idempotency_key",
            "an idempotency key is 1 to 200 bytes without control characters",
        ));
    }
    Ok(())
}

/// Puts a job.
#[utoipa::path(post, path = "/api/v1/jobs", tag = "jobs",
    request_body = PutJob,
    security(("bearer" = [])),
    responses(
        (status = 201, description = "created", body = PutAnswer),
        (status = 200, description = "a live job of the tube already had the idempotency key; nothing changed", body = PutAnswer),
        (status = 400, description = "bad input", body = ErrorBody),
        (status = 401, description = "no or wrong token", body = ErrorBody),
        (status = 413, description = "body too large", body = ErrorBody),
        (status = 503, description = "draining, or still recovering", body = ErrorBody)))]
pub(crate) async fn put(
    State(state): State<AppState>,
    body: Result<Json<PutJob>, JsonRejection>,
) -> Result<(StatusCode, Json<PutAnswer>), ApiError> {
    let Json(req) = body?;
    let tube = tube_name(&req.tube)?;
    let job_body = match (req.body, req.body_base64) {
        (Some(text), None) => Bytes::from(text),
        (None, Some(b64)) => Bytes::from(
            base64::engine::general_purpose::STANDARD
                .decode(b64.as_bytes())
                .map_err(|e| ApiError::bad_request("bad_base64", format!("body_base64: {e}")))?,
        ),
        (None, None) => {
            return Err(ApiError::bad_request(
                "missing_body",
                "give the body as `body` (text) or `body_base64`",
            ))
        }
        (Some(_), Some(_)) => {
            return Err(ApiError::bad_request(
                "conflicting_fields",
                "give `body` or `body_base64`, not both",
            ))
        }
    };
    if req.delay_ms.is_some() && req.due_at_ms.is_some() {
        return Err(ApiError::bad_request(
            "conflicting_fields",
            "give `delay_ms` or `due_at_ms`, not both",
        ));
    }
    if let Some(key) = &req.idempotency_key {
        check_key(key)?;
    }
    let shared = state.shared()?;
    let bytes =
        256 + job_body.len() as u64 + req.idempotency_key.as_ref().map_or(0, |k| k.len() as u64);
    writable(shared, bytes)?;
    let (ticket, (id, created)) = with_loads(shared, |engine, now, past_the_ms| {
        // Never early: a delay from a clock past its ms starts at the next ms; a due time is
        // reached when the clock (rounded down) reaches it.
        let delay = match (req.delay_ms, req.due_at_ms) {
            (Some(0), _) | (None, None) => 0,
            (Some(ms), _) => ms.saturating_add(u64::from(past_the_ms)),
            (None, Some(at)) => at.saturating_sub(now),
        };
        engine.put_job(
            now,
            NewJob {
                tube: tube.clone(),
                priority: req.priority,
                delay,
                ttr: u64::from(req.ttr_s) * 1000,
                body: job_body.clone(),
                idempotency_key: req.idempotency_key.clone(),
            },
        )
    })
    .await?;
    // Also for an existing key: the job it names must be durable before we point at it.
    durable(shared, &ticket).await?;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(PutAnswer { id, created })))
}

fn id_param(id: Result<Path<String>, PathRejection>) -> Result<JobId, ApiError> {
    let Path(id) = id?;
    id.parse::<JobId>()
        .map_err(|_| ApiError::bad_request("bad_job_id", format!("{id:?} is not a job id")))
}

async fn detail(state: &AppState, id: JobId) -> Result<Json<Job>, ApiError> {
    let shared = state.shared()?;
    let (_, detail) = with_loads(shared, |engine, now, _| engine.job_detail(now, id))
        .await
        .map_err(|e| not_found_as(e, id))?;
    Ok(Json(Job::from(detail)))
}

fn not_found_as(e: ApiError, id: JobId) -> ApiError {
    if e.code == "job_not_found" {
        ApiError::job_not_found(id)
    } else {
        e
    }
}

/// A job by id.
#[utoipa::path(get, path = "/api/v1/jobs/{id}", tag = "jobs",
    params(("id" = u64, Path, description = "job id")),
    responses(
        (status = 200, description = "the job", body = Job),
        (status = 400, description = "not a job id", body = ErrorBody),
        (status = 404, description = "no such job", body = ErrorBody)))]
pub(crate) async fn one(
    State(state): State<AppState>,
    id: Result<Path<String>, PathRejection>,
) -> Result<Json<Job>, ApiError> {
    let id = id_param(id)?;
    detail(&state, id).await
}

/// A state conflict (409) rather than 404 when the job exists but is in the wrong state.
fn refine(engine: &Engine, id: JobId, r: Result<(), EngineError>) -> Result<(), EngineError> {
    match (r, engine.job_state(id)) {
        (Err(EngineError::NotFound), Some(JobState::Reserved)) => Err(EngineError::Reserved),
        (r, _) => r,
    }
}

fn conflict(engine_state: Option<JobState>, action: &str) -> ApiError {
    match engine_state {
        Some(s) => ApiError::new(
            StatusCode::CONFLICT,
            "job_state_conflict",
            format!("cannot {action} a {} job", s.as_str()),
        ),
        None => ApiError::new(StatusCode::NOT_FOUND, "job_not_found", "no such job"),
    }
}

async fn delete_id(state: &AppState, id: JobId) -> Result<StatusCode, ApiError> {
    let shared = state.shared()?;
    writable(shared, 256)?;
    let (ticket, ()) = with_loads(shared, |engine, now, _| {
        let r = engine.delete(now, HTTP_CLIENT, id);
        refine(engine, id, r)
    })
    .await
    .map_err(|e| not_found_as(e, id))?;
    durable(shared, &ticket).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Deletes (cancels) a job that is ready, delayed or buried. A reserved job belongs to its
/// worker: 409 `job_reserved`.
#[utoipa::path(delete, path = "/api/v1/jobs/{id}", tag = "jobs",
    params(("id" = u64, Path, description = "job id")),
    security(("bearer" = [])),
    responses(
        (status = 204, description = "deleted"),
        (status = 400, description = "not a job id", body = ErrorBody),
        (status = 401, description = "no or wrong token", body = ErrorBody),
        (status = 404, description = "no such job", body = ErrorBody),
        (status = 409, description = "reserved by a worker", body = ErrorBody)))]
pub(crate) async fn delete(
    State(state): State<AppState>,
    id: Result<Path<String>, PathRejection>,
) -> Result<StatusCode, ApiError> {
    let id = id_param(id)?;
    delete_id(&state, id).await
}

/// Kicks a job: a buried job, or a delayed one ("run now"), becomes ready.
#[utoipa::path(post, path = "/api/v1/jobs/{id}/kick", tag = "jobs",
    params(("id" = u64, Path, description = "job id")),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "kicked: the job now", body = Job),
        (status = 400, description = "not a job id", body = ErrorBody),
        (status = 401, description = "no or wrong token", body = ErrorBody),
        (status = 404, description = "no such job", body = ErrorBody),
        (status = 409, description = "ready or reserved: nothing to kick", body = ErrorBody)))]
pub(crate) async fn kick(
    State(state): State<AppState>,
    id: Result<Path<String>, PathRejection>,
) -> Result<Json<Job>, ApiError> {
    change_state(&state, id_param(id)?, "kick", Engine::kick_job).await
}

/// Buries a ready or delayed job (an operator's dead-lettering; beanstalkd's `bury` is the
/// worker's, for a job it holds). A reserved job stays with its worker: 409.
#[utoipa::path(post, path = "/api/v1/jobs/{id}/bury", tag = "jobs",
    params(("id" = u64, Path, description = "job id")),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "buried: the job now", body = Job),
        (status = 400, description = "not a job id", body = ErrorBody),
        (status = 401, description = "no or wrong token", body = ErrorBody),
        (status = 404, description = "no such job", body = ErrorBody),
        (status = 409, description = "reserved or already buried", body = ErrorBody)))]
pub(crate) async fn bury(
    State(state): State<AppState>,
    id: Result<Path<String>, PathRejection>,
) -> Result<Json<Job>, ApiError> {
    change_state(&state, id_param(id)?, "bury", Engine::bury_job).await
}

/// An operator's state change of one job (kick, bury): durable before the answer, which is
/// the job as it now is; a job in a state the change does not apply to is a 409.
async fn change_state(
    state: &AppState,
    id: JobId,
    verb: &'static str,
    op: fn(&mut Engine, Millis, JobId) -> Result<(), EngineError>,
) -> Result<Json<Job>, ApiError> {
    let shared = state.shared()?;
    writable(shared, 256)?;
    let (ticket, outcome) = with_loads(shared, |engine, now, _| {
        Ok(match op(engine, now, id) {
            Ok(()) => Ok(()),
            Err(EngineError::NeedsLoad(l)) => return Err(EngineError::NeedsLoad(l)),
            Err(_) => Err(engine.job_state(id)),
        })
    })
    .await?;
    outcome.map_err(|state| conflict(state, verb))?;
    durable(shared, &ticket).await?;
    detail(state, id).await
}

fn key_params(
    params: Result<Path<(String, String)>, PathRejection>,
) -> Result<(tickwheel_queue::TubeName, String), ApiError> {
    let Path((tube, key)) = params?;
    let tube = tube_name(&tube)?;
    check_key(&key)?;
    Ok((tube, key))
}

async fn id_by_key(
    state: &AppState,
    tube: &tickwheel_queue::TubeName,
    key: &str,
) -> Result<JobId, ApiError> {
    let shared = state.shared()?;
    shared
        .read(|engine| engine.job_by_key(tube, key))
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "job_not_found",
                format!("no live job in tube {tube:?} with that idempotency key"),
            )
        })
}

/// The live job of a tube put with an idempotency key.
#[utoipa::path(get, path = "/api/v1/jobs/by-key/{tube}/{key}", tag = "jobs",
    params(("tube" = String, Path, description = "tube name", pattern = r"^[A-Za-z0-9+/;.$_()][A-Za-z0-9+/;.$_()-]{0,199}$"),
           ("key" = String, Path, description = "idempotency key")),
    responses(
        (status = 200, description = "the job", body = Job),
        (status = 400, description = "bad tube name or key", body = ErrorBody),
        (status = 404, description = "no live job with that key", body = ErrorBody)))]
pub(crate) async fn one_by_key(
    State(state): State<AppState>,
    params: Result<Path<(String, String)>, PathRejection>,
) -> Result<Json<Job>, ApiError> {
    let (tube, key) = key_params(params)?;
    let id = id_by_key(&state, &tube, &key).await?;
    detail(&state, id).await
}

/// Deletes the live job of a tube put with an idempotency key.
#[utoipa::path(delete, path = "/api/v1/jobs/by-key/{tube}/{key}", tag = "jobs",
    params(("tube" = String, Path, description = "tube name", pattern = r"^[A-Za-z0-9+/;.$_()][A-Za-z0-9+/;.$_()-]{0,199}$"),
           ("key" = String, Path, description = "idempotency key")),
    security(("bearer" = [])),
    responses(
        (status = 204, description = "deleted"),
        (status = 400, description = "bad tube name or key", body = ErrorBody),
        (status = 401, description = "no or wrong token", body = ErrorBody),
        (status = 404, description = "no live job with that key", body = ErrorBody),
        (status = 409, description = "reserved by a worker", body = ErrorBody)))]
pub(crate) async fn delete_by_key(
    State(state): State<AppState>,
    params: Result<Path<(String, String)>, PathRejection>,
) -> Result<StatusCode, ApiError> {
    let (tube, key) = key_params(params)?;
    let id = id_by_key(&state, &tube, &key).await?;
    delete_id(&state, id).await
}
