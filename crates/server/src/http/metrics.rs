//! Prometheus metrics (`GET /metrics`, OpenMetrics text), with the `prometheus-client` crate:
//! see `docs/decisions/0007-http-api-and-metrics.md` for the choice.
//!
//! Two kinds of figures:
//! - measured as things happen, in [`Metrics`] (held by the server's `Shared`): store commit
//!   batch sizes and durations (a [`MeteredStore`] wraps the store under the group commit),
//!   the due-to-ready lateness of delayed jobs, window loads, the recovery time;
//! - read from the engine at scrape time: jobs by tube and state, per-tube counters,
//!   connections. The engine keeps these counts anyway; copying them into metric objects on
//!   every change would cost the hot path for nothing.
//!
//! Each scrape builds a fresh [`Registry`] holding clones of the measured metrics (they share
//! their values) and the engine figures of that instant. No global state: two servers in one
//! process (the tests) keep their own metrics.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use tickwheel_queue::{Change, JobId, JobRecord, Millis};
use tickwheel_store::{Recovered, Store, StoreError};

use super::status::Lateness;
use super::{ApiError, AppState};
use crate::shared::Shared;

/// Lateness bucket bounds in ms. The engine sees whole milliseconds, so 0 is its own bucket
/// (ready in the millisecond it was due).
const LATENESS_MS: [u64; 16] = [
    0, 1, 2, 5, 10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 60_000, 300_000,
];

/// What the server measures as it runs.
pub(crate) struct Metrics {
    commit_batch: Histogram,
    commit_seconds: Histogram,
    lateness_seconds: Histogram,
    window_loads: Counter,
    window_jobs_loaded: Counter,
    recovery_seconds: Gauge<f64, AtomicU64>,
    /// The lateness histogram again, with integer ms buckets we can read back for the
    /// quantiles of `GET /api/v1/stats` (prometheus-client does not expose its buckets).
    lateness_buckets: [AtomicU64; LATENESS_MS.len() + 1],
    lateness_max: AtomicU64,
}

impl Metrics {
    pub(crate) fn new() -> Metrics {
        Metrics {
            commit_batch: Histogram::new([
                1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0,
            ]),
            commit_seconds: Histogram::new([
                0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                0.5, 1.0,
            ]),
            lateness_seconds: Histogram::new(LATENESS_MS.iter().map(|&ms| ms as f64 / 1000.0)),
            window_loads: Counter::default(),
            window_jobs_loaded: Counter::default(),
            recovery_seconds: Gauge::default(),
            lateness_buckets: Default::default(),
            lateness_max: AtomicU64::new(0),
        }
    }

    /// A delayed job became ready `ms` after its due time.
    pub(crate) fn observe_lateness(&self, ms: Millis) {
        self.lateness_seconds.observe(ms as f64 / 1000.0);
        let bucket = LATENESS_MS
            .iter()
            .position(|&bound| ms <= bound)
            .unwrap_or(LATENESS_MS.len());
        self.lateness_buckets[bucket].fetch_add(1, Ordering::Relaxed);
        self.lateness_max.fetch_max(ms, Ordering::Relaxed);
    }

    pub(crate) fn window_loaded(&self, jobs: usize) {
        self.window_loads.inc();
        self.window_jobs_loaded.inc_by(jobs as u64);
    }

    pub(crate) fn set_recovery_seconds(&self, seconds: f64) {
        self.recovery_seconds.set(seconds);
    }

    /// Count, p50, p90, p99 and max of the lateness, from the buckets.
    pub(crate) fn lateness_summary(&self) -> Lateness {
        let counts: Vec<u64> = self
            .lateness_buckets
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .collect();
        let max = self.lateness_max.load(Ordering::Relaxed);
        summarize(&counts, max)
    }
}

/// Quantiles from bucket counts (`counts[i]` holds values in `(LATENESS_MS[i-1],
/// LATENESS_MS[i]]`, the last one those above every bound), interpolating linearly within a
/// bucket and never past the exact `max`.
fn summarize(counts: &[u64], max: u64) -> Lateness {
    let total: u64 = counts.iter().sum();
    if total == 0 {
        return Lateness::default();
    }
    let quantile = |q: f64| -> f64 {
        let rank = q * total as f64;
        let mut below = 0u64;
        for (i, &n) in counts.iter().enumerate() {
            if n > 0 && (below + n) as f64 >= rank {
                let lower = if i == 0 { 0 } else { LATENESS_MS[i - 1] } as f64;
                let upper = LATENESS_MS.get(i).map_or(max as f64, |&b| b as f64);
                let within = ((rank - below as f64) / n as f64).clamp(0.0, 1.0);
                return (lower + (upper - lower) * within).min(max as f64);
            }
            below += n;
        }
        max as f64
    };
    Lateness {
        count: total,
        p50: quantile(0.5),
        p90: quantile(0.9),
        p99: quantile(0.99),
        max: max as f64,
    }
}

/// A [`Store`] that times its commits and counts their changes: under the group commit, one
/// commit is one batch (everything queued while the last one ran) and, with `Sync`
/// durability, one fsync; its duration is the write plus the fsync.
pub(crate) struct MeteredStore {
    inner: Arc<dyn Store>,
    batch: Histogram,
    seconds: Histogram,
}

impl MeteredStore {
    pub(crate) fn new(inner: Arc<dyn Store>, metrics: &Metrics) -> MeteredStore {
        MeteredStore {
            inner,
            batch: metrics.commit_batch.clone(),
            seconds: metrics.commit_seconds.clone(),
        }
    }
}

impl MeteredStore {
    /// Runs one store commit of `batch`, timed and counted.
    fn metered(
        &self,
        batch: &[Change],
        commit: impl FnOnce() -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        let started = Instant::now();
        let result = commit();
        self.seconds.observe(started.elapsed().as_secs_f64());
        self.batch.observe(batch.len() as f64);
        result
    }
}

impl Store for MeteredStore {
    fn commit(&self, batch: &[Change]) -> Result<(), StoreError> {
        self.metered(batch, || self.inner.commit(batch))
    }
    fn commit_deferred(&self, batch: &[Change]) -> Result<(), StoreError> {
        self.metered(batch, || self.inner.commit_deferred(batch))
    }
    fn after_commit(&self) {
        self.inner.after_commit();
    }
    fn writable(&self, bytes: u64) -> Result<(), StoreError> {
        self.inner.writable(bytes)
    }
    fn recover(&self, window_end_ms: u64) -> Result<Recovered, StoreError> {
        self.inner.recover(window_end_ms)
    }
    fn get(&self, id: JobId) -> Result<Option<JobRecord>, StoreError> {
        self.inner.get(id)
    }
    fn delayed_between(
        &self,
        from_ms: u64,
        to_ms: u64,
        limit: usize,
    ) -> Result<Vec<JobRecord>, StoreError> {
        self.inner.delayed_between(from_ms, to_ms, limit)
    }
}

pub(crate) fn routes() -> Router<AppState> {
    Router::new().route("/metrics", get(metrics))
}

type Labels = Vec<(&'static str, String)>;

/// The metrics, in the OpenMetrics text format.
#[utoipa::path(get, path = "/metrics", tag = "server",
    responses(
        (status = 200, description = "OpenMetrics text", content_type = "application/openmetrics-text", body = String),
        (status = 503, description = "still recovering", body = super::ErrorBody)))]
pub(crate) async fn metrics(State(state): State<AppState>) -> Result<impl IntoResponse, ApiError> {
    let shared = state.shared()?;
    let text = render(shared).map_err(|_| ApiError::internal("cannot encode the metrics"))?;
    Ok((
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        text,
    ))
}

fn render(shared: &Shared) -> Result<String, std::fmt::Error> {
    let m = &shared.metrics;
    let jobs = Family::<Labels, Gauge>::default();
    let puts = Family::<Labels, Counter>::default();
    let reserves = Family::<Labels, Counter>::default();
    let deletes = Family::<Labels, Counter>::default();
    let timeouts = Family::<Labels, Counter>::default();
    let paused = Family::<Labels, Gauge>::default();
    let now = shared.now();
    let (_, stats) = shared.apply(|engine| {
        engine.advance(now);
        let tubes: Vec<_> = engine
            .tube_names()
            .iter()
            .filter_map(|name| engine.tube_stats(name))
            .collect();
        (tubes, engine.stats())
    });
    let (tubes, server) = stats;
    for t in &tubes {
        let tube = || vec![("tube", t.name.to_string())];
        for (state, n) in [
            ("ready", t.ready),
            ("delayed", t.delayed),
            ("reserved", t.reserved),
            ("buried", t.buried),
        ] {
            let labels = vec![("tube", t.name.to_string()), ("state", state.to_owned())];
            jobs.get_or_create(&labels).set(n as i64);
        }
        puts.get_or_create(&tube()).inc_by(t.total_jobs);
        reserves.get_or_create(&tube()).inc_by(t.reserves);
        deletes.get_or_create(&tube()).inc_by(t.cmd_delete);
        timeouts.get_or_create(&tube()).inc_by(t.timeouts);
        paused
            .get_or_create(&tube())
            .set(i64::from(t.pause_time_left > 0));
    }
    let connections = Gauge::<i64>::default();
    connections.set(server.current_connections as i64);
    let connections_total = Counter::<u64>::default();
    connections_total.inc_by(server.total_connections);

    let mut r = Registry::with_prefix("tickwheel");
    r.register(
        "jobs",
        "Jobs by tube and state (delayed includes those on disk only)",
        jobs,
    );
    r.register(
        "tube_puts",
        "Jobs put, per tube, since the server started",
        puts,
    );
    r.register("tube_reserves", "Reservations, per tube", reserves);
    r.register("tube_deletes", "Deletes, per tube", deletes);
    r.register(
        "tube_timeouts",
        "Reservations that ran out (TTR), per tube",
        timeouts,
    );
    r.register("tube_paused", "1 while the tube is paused", paused);
    r.register(
        "connections",
        "Open beanstalkd-protocol connections",
        connections,
    );
    r.register(
        "connections_opened",
        "beanstalkd-protocol connections accepted",
        connections_total,
    );
    r.register(
        "commit_batch_changes",
        "Changes per store commit (one group commit, one fsync with Sync durability)",
        m.commit_batch.clone(),
    );
    r.register(
        "commit_duration_seconds",
        "Time per store commit: the journal write and its fsync",
        m.commit_seconds.clone(),
    );
    r.register(
        "lateness_seconds",
        "How long after its due time a delayed job became ready",
        m.lateness_seconds.clone(),
    );
    r.register(
        "window_loads",
        "Loads of far-future delayed jobs from disk into memory",
        m.window_loads.clone(),
    );
    r.register(
        "window_loaded_jobs",
        "Jobs loaded from disk by window loads",
        m.window_jobs_loaded.clone(),
    );
    r.register(
        "recovery_duration_seconds",
        "Time the last start took to recover the stored jobs",
        m.recovery_seconds.clone(),
    );
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &r)?;
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(values: &[u64]) -> (Vec<u64>, u64) {
        let m = Metrics::new();
        for &v in values {
            m.observe_lateness(v);
        }
        let c = m
            .lateness_buckets
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .collect();
        (c, m.lateness_max.load(Ordering::Relaxed))
    }

    #[test]
    fn all_on_time_is_zero() {
        let (c, max) = counts(&[0; 100]);
        let s = summarize(&c, max);
        assert_eq!((s.count, s.p50, s.p99, s.max), (100, 0.0, 0.0, 0.0));
    }

    #[test]
    fn quantiles_fall_in_their_buckets_and_never_past_max() {
        // 90 jobs 0 ms late, 9 jobs 7 ms (bucket 5..10), one 4000 ms (bucket 2500..5000).
        let mut v = vec![0; 90];
        v.extend([7; 9]);
        v.push(4_000);
        let (c, max) = counts(&v);
        let s = summarize(&c, max);
        assert_eq!(s.count, 100);
        assert_eq!(s.p50, 0.0);
        assert!(s.p90 <= 10.0, "{s:?}");
        assert!((5.0..=10.0).contains(&s.p99), "{s:?}");
        assert_eq!(s.max, 4_000.0);
        // Above the last bound: between it and the exact max.
        let (c, max) = counts(&[1_000_000]);
        let s = summarize(&c, max);
        assert!((300_000.0..=1_000_000.0).contains(&s.p99), "{s:?}");
        assert_eq!(s.max, 1_000_000.0);
    }

    #[test]
    fn empty_is_zeroes() {
        assert_eq!(summarize(&[0; 17], 0), Lateness::default());
    }
}
