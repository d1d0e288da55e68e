//! The due timeline: delayed jobs by due time, read from per-tube counts kept as jobs change
//! state (see `due.rs`), never by scanning jobs.

use super::*;
use crate::due::{Resolution, Series, Timeline};

/// Buckets of the second and minute series: the next minute by second, the next hour by
/// minute.
pub const TIMELINE_FINE_BUCKETS: usize = 60;

/// The most hour buckets a timeline holds (a week).
pub const MAX_TIMELINE_HOURS: usize = 7 * 24;

impl Engine {
    /// Delayed jobs by due time, of one tube or (`None`) of all: 60 one-second buckets from
    /// the current second, 60 one-minute buckets from the current minute, and `hours`
    /// (at most [`MAX_TIMELINE_HOURS`]) one-hour buckets from the current hour. Far jobs (kept only in
    /// the store) are included: they are counted when put, and at start-up a server seeds the
    /// ones it recovered with [`note_far_due`](Self::note_far_due).
    ///
    /// Costs `O(tubes × (log b + buckets))` with `b` the non-empty buckets of a tube,
    /// whatever the number of jobs. `None` if `tube` names no tube.
    ///
    /// ```
    /// use bytes::Bytes;
    /// use tickwheel_queue::{ClientId, Config, Engine};
    ///
    /// let mut engine = Engine::new(Config::default(), 10_500);
    /// engine.connect(ClientId(1));
    /// for delay in [1_000, 1_200, 90_000, 7_200_000] {
    ///     engine.put(10_500, ClientId(1), 0, delay, 60_000, Bytes::new()).unwrap();
    /// }
    /// let timeline = engine.timeline(None, 24).unwrap();
    /// let [seconds, minutes, hours] = &timeline.series[..] else { panic!() };
    /// assert_eq!(seconds.start_ms, 10_000);
    /// assert_eq!(seconds.counts[1], 2); // due at 11 500 and 11 700 ms
    /// assert_eq!(minutes.counts[1], 1); // due at 100 500 ms
    /// assert_eq!(hours.counts[..3], [3, 0, 1]);
    /// assert_eq!((timeline.delayed, timeline.later), (4, 0));
    /// ```
    #[must_use]
    pub fn timeline(&self, tube: Option<&TubeName>, hours: usize) -> Option<Timeline> {
        let tubes: Vec<&Tube> = match tube {
            Some(name) => vec![self.tube(*self.tube_ids.get(name)?)],
            None => self.tubes.iter().flatten().collect(),
        };
        let now = self.now();
        let hours = hours.min(MAX_TIMELINE_HOURS);
        let mut series = Vec::with_capacity(3);
        let mut later = 0;
        for r in Resolution::ALL {
            let n = if r == Resolution::Hour {
                hours
            } else {
                TIMELINE_FINE_BUCKETS
            };
            let first = now / r.width_ms();
            let mut counts = vec![0; n];
            for t in &tubes {
                t.due.add_into(r, first, &mut counts);
                if r == Resolution::Hour {
                    later += t.due.at_or_after(r, first.saturating_add(n as u64));
                }
            }
            series.push(Series {
                resolution: r,
                start_ms: first * r.width_ms(),
                counts,
            });
        }
        Some(Timeline {
            now_ms: now,
            series,
            later,
            delayed: tubes.iter().map(|t| t.due.total()).sum(),
        })
    }

    /// Counts a far job recovered from the store (due at `until`, in `tube`) in the timeline.
    /// A server calls it once per job of the store's due index at or after the window end,
    /// right after [`recover_windowed`](Self::recover_windowed) and before any operation
    /// (those jobs are counted per tube by `recover_windowed` but their due times are not
    /// known to it). An unknown tube is ignored.
    pub fn note_far_due(&mut self, tube: &TubeName, until: Millis) {
        if let Some(&id) = self.tube_ids.get(tube) {
            self.tube_mut(id).due.add(until);
        }
    }
}
