//! `GET /api/v1/timeline[?tube=NAME][&hours=N]`: delayed jobs by due time, the next minute by
//! second, the next hour by minute, the next `hours` hours (default 48, at most a week) by
//! hour. Read from the engine's per-tube due counts (`Engine::timeline`), which count far jobs
//! kept only on disk too; nothing scans jobs, so a poll costs the same with ten jobs or ten
//! million.

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use tickwheel_queue::{Timeline, MAX_TIMELINE_HOURS};
use utoipa::{IntoParams, ToSchema};

use super::tubes::tube_name;
use super::{ApiError, AppState, ErrorBody};

/// Hour buckets when the query does not say.
const DEFAULT_HOURS: usize = 48;

pub(crate) fn routes() -> Router<AppState> {
    Router::new().route("/api/v1/timeline", get(timeline))
}

/// Which delayed jobs to count.
#[derive(Deserialize, IntoParams, Debug)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct TimelineQuery {
    /// Only this tube's jobs (default: every tube).
    tube: Option<String>,
    /// Hour buckets (default 48, at most 168).
    #[param(minimum = 1, maximum = 168)]
    hours: Option<usize>,
}

/// `count` delayed jobs are due in `[start_ms, start_ms + width_ms)`.
#[derive(Serialize, ToSchema, Debug)]
pub(crate) struct Bucket {
    /// Start of the bucket, Unix time in ms.
    start_ms: u64,
    /// Delayed jobs due in it.
    count: u64,
}

/// One resolution: consecutive buckets from the current second, minute or hour.
#[derive(Serialize, ToSchema, Debug)]
pub(crate) struct Series {
    /// `second`, `minute` or `hour`.
    #[schema(example = "second")]
    resolution: &'static str,
    /// Bucket width in ms.
    width_ms: u64,
    /// Buckets, earliest first; the first holds the current instant.
    buckets: Vec<Bucket>,
}

/// Delayed jobs by due time.
#[derive(Serialize, ToSchema, Debug)]
pub(crate) struct TimelineBody {
    /// The server's clock, Unix time in ms.
    now_ms: u64,
    /// `second` (60 buckets), `minute` (60 buckets), `hour` (`hours` buckets).
    series: Vec<Series>,
    /// Delayed jobs due after the last hour bucket.
    later: u64,
    /// Delayed jobs counted, in memory and on disk.
    delayed: u64,
}

impl From<Timeline> for TimelineBody {
    fn from(t: Timeline) -> TimelineBody {
        TimelineBody {
            now_ms: t.now_ms,
            later: t.later,
            delayed: t.delayed,
            series: t
                .series
                .into_iter()
                .map(|s| {
                    let width = s.width_ms();
                    Series {
                        resolution: s.resolution.name(),
                        width_ms: width,
                        buckets: (0u64..)
                            .zip(s.counts)
                            .map(|(i, count)| Bucket {
                                start_ms: s.start_ms.saturating_add(i * width),
                                count,
                            })
                            .collect(),
                    }
                })
                .collect(),
        }
    }
}

/// Delayed jobs by due time: the next minute by second, the next hour by minute, the next
/// hours by hour; of one tube or all.
#[utoipa::path(get, path = "/api/v1/timeline", tag = "timeline",
    params(TimelineQuery),
    responses(
        (status = 200, description = "the due timeline", body = TimelineBody),
        (status = 400, description = "bad query (tube name, hours)", body = ErrorBody),
        (status = 404, description = "no such tube", body = ErrorBody),
        (status = 503, description = "still recovering", body = ErrorBody)))]
pub(crate) async fn timeline(
    State(state): State<AppState>,
    query: Result<Query<TimelineQuery>, QueryRejection>,
) -> Result<Json<TimelineBody>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::bad_request("bad_query", e.body_text()))?;
    let tube = query.tube.as_deref().map(tube_name).transpose()?;
    let hours = query.hours.unwrap_or(DEFAULT_HOURS);
    if !(1..=MAX_TIMELINE_HOURS).contains(&hours) {
        return Err(ApiError::bad_request(
            "bad_hours",
            format!("hours must be 1 to {MAX_TIMELINE_HOURS}, not {hours}"),
        ));
    }
    let shared = state.shared()?;
    let now = shared.now();
    let (_, timeline) = shared.apply(|engine| {
        engine.advance(now);
        engine.timeline(tube.as_ref(), hours)
    });
    match (timeline, tube) {
        (Some(t), _) => Ok(Json(t.into())),
        (None, Some(name)) => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "tube_not_found",
            format!("no tube {name:?} (a tube exists while it has jobs or clients)"),
        )),
        (None, None) => Err(ApiError::internal("no timeline for all tubes")),
    }
}
