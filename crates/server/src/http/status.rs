//! Health checks and the server statistics: `/healthz`, `/readyz`, `GET /api/v1/stats`.

use std::sync::atomic::Ordering;

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use serde::Serialize;
use utoipa::ToSchema;

use super::{ApiError, AppState};

pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/api/v1/stats", get(stats))
}

/// `{"status":"ok"}`.
#[derive(Serialize, ToSchema)]
pub(crate) struct Health {
    /// `ok`.
    status: &'static str,
}

/// Liveness: the process serves HTTP.
#[utoipa::path(get, path = "/healthz", tag = "server",
    responses((status = 200, description = "the process is up", body = Health)))]
pub(crate) async fn healthz() -> Json<Health> {
    Json(Health { status: "ok" })
}

/// Readiness: the server has recovered its jobs and serves the API.
#[utoipa::path(get, path = "/readyz", tag = "server",
    responses(
        (status = 200, description = "jobs recovered; the API answers", body = Health),
        (status = 503, description = "still recovering", body = super::ErrorBody)))]
pub(crate) async fn readyz(State(state): State<AppState>) -> Result<Json<Health>, ApiError> {
    state.shared()?;
    Ok(Json(Health { status: "ok" }))
}

/// Lateness of delayed jobs: how long after its due time each became ready (ms), estimated
/// from the lateness histogram's buckets (linear within a bucket; `max` is exact).
#[derive(Serialize, ToSchema, Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Lateness {
    /// Delayed jobs that became ready since the server started.
    pub(crate) count: u64,
    /// Median, ms.
    pub(crate) p50: f64,
    /// 90th percentile, ms.
    pub(crate) p90: f64,
    /// 99th percentile, ms.
    pub(crate) p99: f64,
    /// The largest seen, ms.
    pub(crate) max: f64,
}

/// The server statistics: beanstalkd's `stats` with snake_case names, plus `lateness_ms`.
#[derive(Serialize, ToSchema)]
#[allow(
    missing_docs,
    reason = "each field is the beanstalkd statistic of the same name"
)]
pub(crate) struct ServerStats {
    current_jobs_urgent: u64,
    current_jobs_ready: u64,
    current_jobs_reserved: u64,
    current_jobs_delayed: u64,
    current_jobs_buried: u64,
    cmd_put: u64,
    cmd_peek: u64,
    cmd_peek_ready: u64,
    cmd_peek_delayed: u64,
    cmd_peek_buried: u64,
    cmd_reserve: u64,
    cmd_reserve_with_timeout: u64,
    cmd_delete: u64,
    cmd_release: u64,
    cmd_use: u64,
    cmd_watch: u64,
    cmd_ignore: u64,
    cmd_bury: u64,
    cmd_kick: u64,
    cmd_touch: u64,
    cmd_stats: u64,
    cmd_stats_job: u64,
    cmd_stats_tube: u64,
    cmd_list_tubes: u64,
    cmd_list_tube_used: u64,
    cmd_list_tubes_watched: u64,
    cmd_pause_tube: u64,
    job_timeouts: u64,
    total_jobs: u64,
    max_job_size: u64,
    current_tubes: u64,
    current_connections: u64,
    current_producers: u64,
    current_workers: u64,
    current_waiting: u64,
    total_connections: u64,
    pid: u32,
    version: String,
    rusage_utime: f64,
    rusage_stime: f64,
    uptime: u64,
    draining: bool,
    id: String,
    hostname: String,
    /// Due-to-ready lateness of delayed jobs.
    lateness_ms: Lateness,
}

/// The server statistics (`stats`), as JSON.
#[utoipa::path(get, path = "/api/v1/stats", tag = "server",
    responses(
        (status = 200, description = "the statistics", body = ServerStats),
        (status = 503, description = "still recovering", body = super::ErrorBody)))]
pub(crate) async fn stats(State(state): State<AppState>) -> Result<Json<ServerStats>, ApiError> {
    let shared = state.shared()?;
    let now = shared.now();
    let (_, s) = shared.apply(|engine| engine.stats_at(now));
    let c = &shared.counters;
    let get = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    let with_timeout = get(&c.reserve_with_timeout);
    let (utime, stime) = crate::stats::cpu_times();
    Ok(Json(ServerStats {
        current_jobs_urgent: s.urgent,
        current_jobs_ready: s.ready,
        current_jobs_reserved: s.reserved,
        current_jobs_delayed: s.delayed,
        current_jobs_buried: s.buried,
        cmd_put: s.cmd.put,
        cmd_peek: s.cmd.peek,
        cmd_peek_ready: s.cmd.peek_ready,
        cmd_peek_delayed: s.cmd.peek_delayed,
        cmd_peek_buried: s.cmd.peek_buried,
        cmd_reserve: s.cmd.reserve.saturating_sub(with_timeout),
        cmd_reserve_with_timeout: with_timeout,
        cmd_delete: s.cmd.delete,
        cmd_release: s.cmd.release,
        cmd_use: s.cmd.use_,
        cmd_watch: s.cmd.watch,
        cmd_ignore: s.cmd.ignore,
        cmd_bury: s.cmd.bury,
        cmd_kick: s.cmd.kick,
        cmd_touch: s.cmd.touch,
        cmd_stats: get(&c.stats),
        cmd_stats_job: get(&c.stats_job),
        cmd_stats_tube: get(&c.stats_tube),
        cmd_list_tubes: get(&c.list_tubes),
        cmd_list_tube_used: get(&c.list_tube_used),
        cmd_list_tubes_watched: get(&c.list_tubes_watched),
        cmd_pause_tube: s.cmd.pause_tube,
        job_timeouts: s.job_timeouts,
        total_jobs: s.total_jobs,
        max_job_size: s.max_job_size,
        current_tubes: s.current_tubes,
        current_connections: s.current_connections,
        current_producers: s.producers,
        current_workers: s.workers,
        current_waiting: s.waiting,
        total_connections: s.total_connections,
        pid: std::process::id(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
        rusage_utime: utime,
        rusage_stime: stime,
        uptime: shared.uptime(),
        draining: s.draining,
        id: shared.instance_id.clone(),
        hostname: crate::stats::read_trimmed("/proc/sys/kernel/hostname"),
        lateness_ms: shared.metrics.lateness_summary(),
    }))
}
