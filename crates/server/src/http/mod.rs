//! The HTTP edge: a JSON API, `/metrics` and health checks on the engine the beanstalkd
//! listener serves (`--http ADDR`). Another adapter over the same [`Shared`] engine, never a
//! second engine: an HTTP `put` and a protocol `put` are the same operation, acknowledged
//! only once durable.
//!
//! # Ground rules
//!
//! - Every handler reaches the engine through [`AppState::shared`], which answers
//!   `503 not_ready` until the server has recovered its jobs and attached itself
//!   ([`crate::Server::attach_http`]): the listener is up (and `/healthz` answers) during a
//!   long recovery.
//! - Every error is a [`ApiError`]: a 4xx (or 503 / 507) with
//!   `{"error":{"code":"<stable_snake_case>","message":"…"}}`. Extractor rejections (bad JSON,
//!   bad path parameters, a body over the limit) are mapped to it too; nothing a client sends
//!   makes a 500.
//! - Mutating calls (`POST`, `PUT`, `PATCH`, `DELETE`) need `Authorization: Bearer <token>`
//!   when a token is configured; a listener on a non-loopback address refuses to start
//!   without one ([`HttpServer::bind`]).
//! - Requests are limited per client IP (a token bucket, [`governor`]) and in body size.
//!
//! Module map: `mod.rs` (router, state, auth, limits, errors), `status.rs` (health and
//! server stats), `tubes.rs`, `jobs.rs`, `metrics.rs` (Prometheus), `openapi.rs`.

pub(crate) mod dashboard;
pub(crate) mod jobs;
pub(crate) mod metrics;
pub(crate) mod openapi;
pub(crate) mod status;
pub(crate) mod timeline;
pub(crate) mod tubes;

use std::net::{IpAddr, SocketAddr};
use std::num::NonZeroU32;
use std::sync::{Arc, OnceLock};

use anyhow::Context as _;
use axum::extract::rejection::{JsonRejection, PathRejection};
use axum::extract::{ConnectInfo, DefaultBodyLimit, Request, State};
use axum::http::{header, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use serde::Serialize;
use tickwheel_queue::{Engine, Error as EngineError, Millis};
use tickwheel_store::Ticket;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use utoipa::ToSchema;

use crate::shared::Shared;

/// Store reads one request may ask for before it runs on what is in memory (as a protocol
/// command: see `conn.rs`).
const MAX_LOADS: usize = 64;

/// Settings of the HTTP listener.
#[derive(Clone, Debug)]
pub struct HttpOptions {
    /// The bearer token mutating calls must carry (`--http-token FILE`); `None`: no token
    /// (allowed on a loopback address only).
    pub token: Option<String>,
    /// Largest request body, in bytes (a job body in base64 is 4/3 of its size).
    pub max_body: usize,
    /// Requests per second one client IP may make on average (0: no limit)...
    pub rate_per_sec: u32,
    /// ...and in a burst.
    pub rate_burst: u32,
}

impl Default for HttpOptions {
    fn default() -> Self {
        HttpOptions {
            token: None,
            max_body: 128 * 1024,
            rate_per_sec: 200,
            rate_burst: 400,
        }
    }
}

/// The HTTP listener, bound and serving health checks; the API answers once a [`Server`]
/// is attached ([`crate::Server::attach_http`]).
///
/// [`Server`]: crate::Server
pub struct HttpServer {
    listener: TcpListener,
    state: AppState,
}

impl HttpServer {
    /// Binds `addr` (`host:port`).
    ///
    /// # Errors
    ///
    /// The address is not loopback and `options.token` is `None` (an open, unauthenticated
    /// API on the network is refused), the token is empty, or the bind fails.
    pub async fn bind(addr: &str, options: HttpOptions) -> anyhow::Result<HttpServer> {
        if options.token.as_deref().is_some_and(str::is_empty) {
            anyhow::bail!("the HTTP token is empty");
        }
        // Checked before binding, so a refused address is never opened, even briefly.
        let resolved: Vec<SocketAddr> = tokio::net::lookup_host(addr)
            .await
            .with_context(|| format!("cannot resolve the HTTP address {addr}"))?
            .collect();
        if options.token.is_none() && !resolved.iter().all(|a| a.ip().is_loopback()) {
            anyhow::bail!(
                "refusing to serve HTTP on {addr}, which is not a loopback address, without \
                 a token: give --http-token FILE (mutating calls then need \
                 `Authorization: Bearer <token>`), or listen on 127.0.0.1"
            );
        }
        let listener = TcpListener::bind(&resolved[..])
            .await
            .with_context(|| format!("cannot listen for HTTP on {addr}"))?;
        let limiter = NonZeroU32::new(options.rate_per_sec).map(|per_sec| {
            let burst = NonZeroU32::new(options.rate_burst).unwrap_or(per_sec);
            Arc::new(RateLimiter::keyed(
                Quota::per_second(per_sec).allow_burst(burst),
            ))
        });
        Ok(HttpServer {
            listener,
            state: AppState {
                inner: Arc::new(Inner {
                    shared: OnceLock::new(),
                    token: options.token.clone(),
                    limiter,
                }),
                max_body: options.max_body,
            },
        })
    }

    /// The bound address.
    ///
    /// # Errors
    ///
    /// As [`TcpListener::local_addr`].
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// A handle to attach the server with once it has recovered
    /// ([`crate::Server::attach_http`]), while [`run`](Self::run) already serves.
    #[must_use]
    pub fn handle(&self) -> HttpHandle {
        HttpHandle {
            state: self.state.clone(),
        }
    }

    /// Serves requests until `shutdown` is cancelled, then finishes the requests in flight.
    pub async fn run(self, shutdown: CancellationToken) {
        let app = router(self.state);
        let served = axum::serve(
            self.listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await;
        if let Err(error) = served {
            tracing::error!(%error, "the HTTP listener failed");
        }
    }
}

/// Attaches a recovered server to a running [`HttpServer`].
#[derive(Clone)]
pub struct HttpHandle {
    state: AppState,
}

impl HttpHandle {
    pub(crate) fn attach(&self, shared: Arc<Shared>) {
        let _ = self.state.inner.shared.set(shared);
    }
}

/// What every handler gets.
#[derive(Clone)]
pub(crate) struct AppState {
    inner: Arc<Inner>,
    pub(crate) max_body: usize,
}

struct Inner {
    shared: OnceLock<Arc<Shared>>,
    token: Option<String>,
    limiter: Option<Arc<DefaultKeyedRateLimiter<IpAddr>>>,
}

impl AppState {
    /// The server, once it has recovered its jobs.
    pub(crate) fn shared(&self) -> Result<&Arc<Shared>, ApiError> {
        self.inner.shared.get().ok_or_else(|| {
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "not_ready",
                "the server is still recovering its jobs",
            )
        })
    }
}

/// The whole HTTP application: API, health, metrics, OpenAPI document.
pub(crate) fn router(state: AppState) -> Router {
    let max_body = state.max_body;
    Router::new()
        .merge(status::routes())
        .merge(tubes::routes())
        .merge(jobs::routes())
        .merge(metrics::routes())
        .merge(openapi::routes())
        .merge(timeline::routes().merge(dashboard::routes()))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(axum::middleware::from_fn_with_state(state.clone(), auth))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            rate_limit,
        ))
        .layer(DefaultBodyLimit::max(max_body))
        .with_state(state)
}

async fn not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such path")
}

async fn method_not_allowed() -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        "this path does not take that method",
    )
}

/// Mutating methods need the bearer token, when there is one.
async fn auth(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let mutating = !matches!(
        *request.method(),
        Method::GET | Method::HEAD | Method::OPTIONS
    );
    if let (true, Some(token)) = (mutating, &state.inner.token) {
        let given = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        if !given.is_some_and(|g| same_secret(g.trim().as_bytes(), token.as_bytes())) {
            let mut response = ApiError::new(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "this call changes jobs and needs `Authorization: Bearer <token>`",
            )
            .into_response();
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Bearer"),
            );
            return response;
        }
    }
    next.run(request).await
}

/// Compares without stopping at the first difference, so the time taken does not tell how
/// much of a guess was right.
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// A token bucket per client IP.
async fn rate_limit(
    State(state): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    request: Request,
    next: Next,
) -> Response {
    if let Some(limiter) = &state.inner.limiter {
        if limiter.check_key(&peer.ip()).is_err() {
            return ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limited",
                "too many requests from this address; slow down",
            )
            .into_response();
        }
        if limiter.len() > 10_000 {
            limiter.retain_recent();
        }
    }
    next.run(request).await
}

/// The JSON body of every error.
#[derive(Serialize, ToSchema)]
pub(crate) struct ErrorBody {
    error: ErrorDetail,
}

/// What went wrong.
#[derive(Serialize, ToSchema)]
pub(crate) struct ErrorDetail {
    /// A stable, snake_case code to match on (`not_found`, `bad_request`, `unauthorized`,
    /// `job_too_big`, `rate_limited`, …).
    code: String,
    /// A sentence for people.
    message: String,
}

/// An error answer: status, stable code, message.
#[derive(Debug)]
pub(crate) struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
        }
    }

    pub(crate) fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, code, message)
    }

    pub(crate) fn job_not_found(id: u64) -> Self {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "job_not_found",
            format!("no job {id}"),
        )
    }

    pub(crate) fn internal(message: impl Into<String>) -> Self {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "store_unavailable",
            message,
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code.to_owned(),
                message: self.message,
            },
        };
        (self.status, Json(body)).into_response()
    }
}

impl From<JsonRejection> for ApiError {
    fn from(rejection: JsonRejection) -> Self {
        let status = rejection.status();
        let code = match status {
            StatusCode::PAYLOAD_TOO_LARGE => "body_too_large",
            StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
            _ => "bad_json",
        };
        // Keep 4xx statuses as they are (413, 415, 422); anything else is the client's JSON.
        let status = if status.is_client_error() {
            status
        } else {
            StatusCode::BAD_REQUEST
        };
        ApiError::new(status, code, rejection.body_text())
    }
}

impl From<PathRejection> for ApiError {
    fn from(rejection: PathRejection) -> Self {
        ApiError::bad_request("bad_path", rejection.body_text())
    }
}

/// Runs `op` on the engine at the clock's time; when the engine answers that it needs jobs
/// from the store first, reads them and runs `op` again (as `conn.rs` does for a command).
/// `op` gets the engine, the clock in ms (rounded down) and whether the clock is past that
/// ms (a delay from it must add one ms, so that nothing is due early).
pub(crate) async fn with_loads<R>(
    shared: &Shared,
    op: impl Fn(&mut Engine, Millis, bool) -> Result<R, EngineError>,
) -> Result<(Ticket, R), ApiError> {
    for attempt in 0.. {
        let (now, past_the_ms) = shared.clock_reading();
        let (ticket, result) = shared.apply(|engine| op(engine, now, past_the_ms));
        match result {
            Err(EngineError::NeedsLoad(load)) => {
                if attempt < MAX_LOADS {
                    if let Err(error) = shared.load(load).await {
                        tracing::error!(%error, "cannot read jobs from the store");
                        return Err(ApiError::internal("cannot read jobs from the store"));
                    }
                } else if attempt < MAX_LOADS + 4 {
                    shared.apply(|engine| engine.skip_load(load));
                } else {
                    return Err(ApiError::internal("the store read did not settle"));
                }
            }
            Err(error) => return Err(engine_error(error)),
            Ok(r) => return Ok((ticket, r)),
        }
    }
    unreachable!("the loop returns")
}

/// Waits until what `ticket` stands for is durable: an answer promises durability.
pub(crate) async fn durable(shared: &Shared, ticket: &Ticket) -> Result<(), ApiError> {
    ticket.durable().await.map_err(|error| {
        shared.log_commit_failure(&error);
        ApiError::internal(format!("the change could not be made durable: {error}"))
    })
}

/// Refuses a write up front when the store would not take it (the disk is nearly full).
pub(crate) fn writable(shared: &Shared, bytes: u64) -> Result<(), ApiError> {
    if shared.writable(bytes) {
        Ok(())
    } else {
        Err(ApiError::new(
            StatusCode::INSUFFICIENT_STORAGE,
            "store_refuses_writes",
            "the store refuses writes (low disk space or a failed commit); see the server log",
        ))
    }
}

pub(crate) fn engine_error(error: EngineError) -> ApiError {
    match error {
        EngineError::NotFound => ApiError::new(
            StatusCode::NOT_FOUND,
            "job_not_found",
            "no such job, or not in a state that allows this",
        ),
        EngineError::Reserved => ApiError::new(
            StatusCode::CONFLICT,
            "job_reserved",
            "the job is reserved by a worker",
        ),
        EngineError::Draining => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "draining",
            "the server is draining and accepts no new jobs",
        ),
        EngineError::JobTooBig => ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "job_too_big",
            "the job body is larger than the maximum job size (-z)",
        ),
        other => ApiError::internal(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_non_loopback_address_needs_a_token() {
        // Refused before anything is bound: 0.0.0.0 is never opened here.
        let refused = HttpServer::bind("0.0.0.0:0", HttpOptions::default()).await;
        let message = refused.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(message.contains("without a token"), "{message}");
        let empty = HttpOptions {
            token: Some(String::new()),
            ..HttpOptions::default()
        };
        assert!(HttpServer::bind("127.0.0.1:0", empty).await.is_err());
        let ok = HttpServer::bind("127.0.0.1:0", HttpOptions::default()).await;
        assert!(ok.is_ok_and(|s| s.local_addr().is_ok_and(|a| a.ip().is_loopback())));
    }

    #[test]
    fn secrets_compare_whole() {
        assert!(same_secret(b"s3cret", b"s3cret"));
        assert!(!same_secret(b"s3cret", b"s3cres"));
        assert!(!same_secret(b"s3cre", b"s3cret"));
        assert!(!same_secret(b"", b"x"));
    }
}
