//! Counts of delayed jobs by due time, kept as jobs change state: what the due timeline
//! (`Engine::timeline`) reads instead of scanning jobs.
//!
//! A [`DueCounts`] holds, for each [`Resolution`], a map from bucket number (`until / width`)
//! to the number of delayed jobs due in that bucket; empty buckets are removed. Adding or
//! removing a job touches one entry per resolution (three `BTreeMap` updates); reading `n`
//! consecutive buckets is one range walk over at most `n` entries, whatever the number of
//! jobs. A tube's counts cover all its delayed jobs, the ones in memory and the far ones that
//! live only in the store (counted when put, or seeded at start-up from the store's due
//! index with `Engine::note_far_due`).

use std::collections::BTreeMap;

use crate::types::Millis;

/// The width of a timeline bucket.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Resolution {
    /// One second (1 000 ms).
    Second,
    /// One minute (60 000 ms).
    Minute,
    /// One hour (3 600 000 ms).
    Hour,
}

impl Resolution {
    /// All resolutions, finest first.
    pub const ALL: [Resolution; 3] = [Resolution::Second, Resolution::Minute, Resolution::Hour];

    /// The bucket width in milliseconds.
    #[must_use]
    pub const fn width_ms(self) -> Millis {
        match self {
            Resolution::Second => 1_000,
            Resolution::Minute => 60_000,
            Resolution::Hour => 3_600_000,
        }
    }

    /// The lower-case name (`"second"`, `"minute"`, `"hour"`).
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Resolution::Second => "second",
            Resolution::Minute => "minute",
            Resolution::Hour => "hour",
        }
    }

    const fn index(self) -> usize {
        match self {
            Resolution::Second => 0,
            Resolution::Minute => 1,
            Resolution::Hour => 2,
        }
    }
}

/// Delayed jobs counted by due bucket, at each [`Resolution`].
#[derive(Debug, Default, Clone)]
pub(crate) struct DueCounts {
    levels: [BTreeMap<u64, u64>; 3],
    total: u64,
}

impl DueCounts {
    /// Counts one more job due at `until`.
    pub(crate) fn add(&mut self, until: Millis) {
        for r in Resolution::ALL {
            *self.levels[r.index()]
                .entry(until / r.width_ms())
                .or_insert(0) += 1;
        }
        self.total += 1;
    }

    /// Counts one job due at `until` less. A time never counted (no job in its second) is
    /// ignored, so a slip elsewhere cannot panic or underflow; tests check counts stay exact.
    pub(crate) fn remove(&mut self, until: Millis) {
        if !self.levels[0].contains_key(&(until / Resolution::Second.width_ms())) {
            return;
        }
        for r in Resolution::ALL {
            let map = &mut self.levels[r.index()];
            let bucket = until / r.width_ms();
            if let Some(n) = map.get_mut(&bucket) {
                *n -= 1;
                if *n == 0 {
                    map.remove(&bucket);
                }
            }
        }
        self.total -= 1;
    }

    /// Adds to `out[i]` the jobs due in bucket `first + i` of resolution `r`.
    pub(crate) fn add_into(&self, r: Resolution, first: u64, out: &mut [u64]) {
        let end = first.saturating_add(out.len() as u64);
        for (&bucket, &n) in self.levels[r.index()].range(first..end) {
            out[(bucket - first) as usize] += n;
        }
    }

    /// Jobs due in buckets `>= end` of resolution `r` (the total minus those before it: the
    /// walk covers only buckets before `end`, a few past ones and the ones a timeline shows).
    pub(crate) fn at_or_after(&self, r: Resolution, end: u64) -> u64 {
        let before: u64 = self.levels[r.index()].range(..end).map(|(_, n)| n).sum();
        self.total.saturating_sub(before)
    }

    /// Number of jobs counted.
    pub(crate) fn total(&self) -> u64 {
        self.total
    }
}

/// One resolution of a [`Timeline`]: `counts[i]` delayed jobs are due in
/// `[start_ms + i * width_ms, start_ms + (i + 1) * width_ms)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Series {
    /// The bucket width.
    pub resolution: Resolution,
    /// Start of the first bucket: the clock rounded down to the bucket width.
    pub start_ms: Millis,
    /// Jobs per bucket.
    pub counts: Vec<u64>,
}

impl Series {
    /// Bucket width in milliseconds.
    #[must_use]
    pub fn width_ms(&self) -> Millis {
        self.resolution.width_ms()
    }
}

/// Delayed jobs by due time, from [`Engine::timeline`](crate::Engine::timeline): the next
/// minute by second, the next hour by minute, the next hours by hour.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Timeline {
    /// The engine's clock when it was taken.
    pub now_ms: Millis,
    /// One series per [`Resolution`], finest first.
    pub series: Vec<Series>,
    /// Delayed jobs due after the last hour bucket.
    pub later: u64,
    /// All delayed jobs counted (in memory and far).
    pub delayed: u64,
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;

    /// The model: due times in a sorted multiset, counted by scanning.
    fn model_counts(
        model: &BTreeMap<Millis, u64>,
        r: Resolution,
        first: u64,
        n: usize,
    ) -> Vec<u64> {
        let mut out = vec![0; n];
        for (&t, &c) in model {
            let bucket = t / r.width_ms();
            if bucket >= first && bucket - first < n as u64 {
                out[(bucket - first) as usize] += c;
            }
        }
        out
    }

    #[derive(Debug, Clone)]
    enum Op {
        Add(Millis),
        /// Remove the `i % len`-th counted due time, if any.
        Remove(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        let time = prop_oneof![
            0u64..5_000,
            0u64..400_000,
            0u64..30_000_000,
            Just(u64::MAX),
            (u64::MAX - 10_000_000)..=u64::MAX,
        ];
        prop_oneof![time.prop_map(Op::Add), any::<usize>().prop_map(Op::Remove)]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn counts_match_a_scan_of_the_due_times(
            ops in proptest::collection::vec(op(), 0..200),
            first_ms in prop_oneof![0u64..20_000_000, (u64::MAX - 20_000_000)..=u64::MAX],
            n in 0usize..80,
        ) {
            let mut due = DueCounts::default();
            let mut model: BTreeMap<Millis, u64> = BTreeMap::new();
            for op in ops {
                match op {
                    Op::Add(t) => {
                        due.add(t);
                        *model.entry(t).or_default() += 1;
                    }
                    Op::Remove(i) => {
                        let flat: Vec<Millis> =
                            model.iter().flat_map(|(&t, &c)| std::iter::repeat_n(t, c as usize)).collect();
                        if !flat.is_empty() {
                            let t = flat[i % flat.len()];
                            due.remove(t);
                            let c = model.get_mut(&t).expect("counted in the model");
                            *c -= 1;
                            if *c == 0 {
                                model.remove(&t);
                            }
                        }
                    }
                }
            }
            let total: u64 = model.values().sum();
            prop_assert_eq!(due.total(), total);
            for r in Resolution::ALL {
                let first = first_ms / r.width_ms();
                let mut out = vec![0; n];
                due.add_into(r, first, &mut out);
                prop_assert_eq!(&out, &model_counts(&model, r, first, n));
                let end = first.saturating_add(n as u64);
                let after: u64 = model
                    .iter()
                    .filter(|(&t, _)| t / r.width_ms() >= end)
                    .map(|(_, c)| c)
                    .sum();
                prop_assert_eq!(due.at_or_after(r, end), after);
                // No empty bucket is kept: memory follows the jobs.
                prop_assert!(due.levels[r.index()].values().all(|&c| c > 0));
            }
        }
    }

    #[test]
    fn removing_an_uncounted_time_changes_nothing_else() {
        let mut due = DueCounts::default();
        due.add(1_500);
        due.remove(7_000_000);
        let mut out = [0; 2];
        due.add_into(Resolution::Second, 0, &mut out);
        assert_eq!(out, [0, 1]);
        assert_eq!(due.total(), 1);
    }
}
