//! Reading the due-time index in pages: what a server needs at start-up about the far-future
//! jobs (which stay on disk): their due times for the timeline, their idempotency keys.

use tickwheel_queue::{DurableState, JobId, JobRecord};

use crate::{Store, StoreError};

/// Records read per [`Store::delayed_between`] call.
pub(crate) const PAGE: usize = 4096;

/// See [`Store::for_each_due`]. `page` is the first page size (doubled when a whole page
/// shares one due time already passed).
pub(crate) fn for_each_due<S: Store + ?Sized>(
    store: &S,
    from_ms: u64,
    f: &mut dyn FnMut(&JobRecord),
    page: usize,
) -> Result<(), StoreError> {
    let mut from = from_ms;
    let mut limit = page.max(1);
    // The last (due time, id) handed to `f`: a page starting at its due time repeats it.
    let mut last: Option<(u64, JobId)> = None;
    loop {
        let records = store.delayed_between(from, u64::MAX, limit)?;
        let full = records.len() >= limit;
        let mut fresh = 0;
        for r in &records {
            let DurableState::Delayed { until } = r.state else {
                continue;
            };
            if last.is_some_and(|l| (until, r.id) <= l) {
                continue;
            }
            f(r);
            last = Some((until, r.id));
            fresh += 1;
        }
        if !full {
            return Ok(());
        }
        match last {
            // More jobs share the page's first due time than a page holds: read more at once.
            _ if fresh == 0 => limit = limit.saturating_mul(2),
            Some((until, _)) => from = until,
            None => return Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use proptest::prelude::*;
    use tickwheel_queue::{Change, TubeName};

    use super::*;
    use crate::MemStore;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Paged, every delayed job at or after `from` is seen once, in (due, id) order, even
        /// when many share a due time across page boundaries.
        #[test]
        fn pages_visit_every_due_job_once(
            dues in proptest::collection::vec(prop_oneof![0u64..5, 0u64..1_000], 0..120),
            from in 0u64..6,
            page in 1usize..8,
        ) {
            let store = MemStore::new();
            let tube = TubeName::new("t").expect("valid");
            let batch: Vec<Change> = dues
                .iter()
                .enumerate()
                .map(|(i, &until)| {
                    Change::Put(JobRecord {
                        id: i as u64 + 1,
                        tube: tube.clone(),
                        priority: 0,
                        ttr: 1000,
                        state: DurableState::Delayed { until },
                        created: 0,
                        body: Bytes::new(),
                        // Every third job keyed: keys come whole with their records.
                        idempotency_key: (i % 3 == 0).then(|| format!("k{i}")),
                        history: Default::default(),
                    })
                })
                .collect();
            store.commit(&batch).expect("commit");
            let mut seen = Vec::new();
            for_each_due(
                &store,
                from,
                &mut |r| {
                    let DurableState::Delayed { until } = r.state else { unreachable!() };
                    seen.push((until, r.id, r.idempotency_key.clone()));
                },
                page,
            )
            .expect("read");
            let mut want: Vec<(u64, JobId, Option<String>)> = dues
                .iter()
                .enumerate()
                .filter(|&(_, &d)| d >= from)
                .map(|(i, &d)| (d, i as u64 + 1, (i % 3 == 0).then(|| format!("k{i}"))))
                .collect();
            want.sort_unstable();
            prop_assert_eq!(seen, want);
        }
    }
}
