//! The store operations themselves, unguarded: [`Store`](crate::Store) for [`DiskStore`] wraps
//! each in [`DiskStore::guarded`]. See the module docs of [`super`] for the tables and the
//! ground rules.

use std::collections::BTreeMap;

use fjall::PersistMode;

use super::{be_u64, DiskStore, META_DELAYED, META_NEXT_ID, META_WAL_SEQ};
use crate::wal::apply::{Job, Stopped};
use crate::wal::codec::encode_changes_into;
use crate::wal::{encode_record_with, Room};
use tickwheel_queue::{Change, JobId, JobRecord, TubeName};

use crate::plan::{plan, Prior};
use crate::record::{decode, due_key, encode, encode_locator, id_key, tube_name, until, validate};
use crate::{Recovered, StoreError};

/// The operations, unguarded: [`Store`] for [`DiskStore`] wraps each in [`DiskStore::guarded`].
impl DiskStore {
    pub(super) fn commit_unguarded(&self, batch: &[Change]) -> Result<(), StoreError> {
        self.apply(batch, None)
    }

    /// Commits `batch`: through the log if the store has one (one record, synced, then the
    /// tables without a sync), else to the tables with the store's durability. `replay` is the
    /// sequence number of a log record being replayed at open: the tables only.
    pub(crate) fn apply(&self, batch: &[Change], replay: Option<u64>) -> Result<(), StoreError> {
        validate(batch)?;
        let s = &*self.inner;
        let mut ws = s.lock_writes();
        if let Some(p) = s.poisoned() {
            return Err(p);
        }
        if batch.is_empty() {
            return Ok(());
        }
        let next_id = match ws.next_id {
            Some(n) => n,
            None => *ws.next_id.insert(s.next_id()?),
        };
        let jobs_end = match ws.jobs_end {
            Some(n) => n,
            None => *ws.jobs_end.insert(s.jobs_end()?),
        };
        let p = plan(
            batch,
            |id| {
                // A commit settled but not yet applied holds the job's latest state; else
                // fjall does.
                if let Some(latest) = s.handoff.lookup(id) {
                    Ok(latest)
                } else if id >= jobs_end {
                    Ok(None)
                } else {
                    s.job(id)
                }
            },
            |id| {
                // As `lookup`, but only where the job is: known from a recent commit, else its
                // locator, not its record (the record too for a delayed job, whose tube's
                // count changes).
                if let Some(known) = ws.recent.get(id) {
                    Ok(known)
                } else if let Some(latest) =
                    s.handoff.lookup_with(id, |r| r.as_ref().map(Prior::of))
                {
                    Ok(latest)
                } else if id >= jobs_end {
                    Ok(None)
                } else {
                    s.locate(id)
                }
            },
        )?;
        // With the log (not replaying it), the log record is encoded first: each put's record
        // is encoded once, into it, and the tables get those bytes (`put_at`). `None` inside:
        // too large for a record.
        let mut puts: Vec<(usize, std::ops::Range<usize>)> = Vec::new();
        let log_record = (replay.is_none() && ws.log.is_some()).then(|| {
            encode_record_with(ws.log_seq + 1, |v| {
                encode_changes_into(batch, v, |i, at| puts.push((i, at)));
            })
        });
        let mut b = s.db.batch();
        // Bytes of the records written, for the free-space backstop; keys and framing are
        // added per item below.
        let mut record_bytes: u64 = 0;
        let mut delayed_delta: BTreeMap<&str, i64> = BTreeMap::new();
        for (&id, c) in &p.changes {
            let key = id_key(id);
            let old_due = c.old.as_ref().and_then(Prior::until);
            let new_due = c.new.as_ref().and_then(until);
            if let Some(Prior::Due { tube, .. }) = &c.old {
                *delayed_delta.entry(tube.as_str()).or_default() -= 1;
            }
            // Remove the old record unless the new one overwrites the same key (a remove and an
            // insert of one key in one batch would share a sequence number).
            match (&c.old, old_due) {
                (Some(_), Some(u)) if new_due != Some(u) => b.remove(&s.due, due_key(u, id)),
                (Some(_), None) if c.new.is_none() || new_due.is_some() => {
                    b.remove(&s.resident, key)
                }
                _ => {}
            }
            match &c.new {
                Some(r) => {
                    let logged = c.put_at.and_then(|i| {
                        let logged = log_record.as_ref()?.as_deref()?;
                        let k = puts.binary_search_by_key(&i, |(j, _)| *j).ok()?;
                        logged.get(puts[k].1.clone())
                    });
                    let record = match logged {
                        Some(bytes) => fjall::UserValue::from(bytes),
                        None => fjall::UserValue::from(encode(r)),
                    };
                    record_bytes += record.len() as u64;
                    match new_due {
                        Some(u) => {
                            *delayed_delta.entry(r.tube.as_str()).or_default() += 1;
                            b.insert(&s.due, due_key(u, id), record);
                        }
                        None => b.insert(&s.resident, key, record),
                    }
                    if c.old.is_none() || old_due != new_due {
                        b.insert(&s.jobs, key, encode_locator(new_due));
                    }
                }
                None if c.old.is_some() => b.remove(&s.jobs, key),
                None => {}
            }
        }
        let mut new_counts = Vec::new();
        for (tube, delta) in delayed_delta {
            if delta == 0 {
                continue;
            }
            let key = [META_DELAYED, tube.as_bytes()].concat();
            let old = match ws.delayed.get(tube) {
                Some(&n) => n,
                None => s.delayed_count(tube)?,
            };
            let count = old.saturating_add_signed(delta);
            if count == 0 {
                b.remove(&s.meta, key);
            } else {
                b.insert(&s.meta, key, count.to_be_bytes());
            }
            new_counts.push((tube, count));
        }
        let new_next = p.id_end.filter(|&end| end > next_id);
        if let Some(end) = new_next {
            b.insert(&s.meta, META_NEXT_ID, end.to_be_bytes());
        }
        // Keys (at most 16 bytes), partition name and journal framing: 64 bytes an item.
        let bytes = record_bytes + 64 * b.len() as u64;
        let ws = &mut *ws;
        match (replay, ws.log.as_mut()) {
            (Some(seq), _) => {
                b.insert(&s.meta, META_WAL_SEQ, seq.to_be_bytes());
                s.write_unchecked(b, PersistMode::Buffer)?;
                ws.log_seq = seq;
            }
            (None, Some(log)) => {
                let seq = ws.log_seq + 1;
                b.insert(&s.meta, META_WAL_SEQ, seq.to_be_bytes());
                let record = log_record.flatten();
                let room = record
                    .as_ref()
                    .map_or(Room::TooLarge, |r| log.room(r.len()));
                let record = match (room, record) {
                    (Room::TooLarge, _) | (_, None) => {
                        // Larger than a segment: fjall's journal, synced, carries it (and
                        // every earlier commit with it, once the applier has written them).
                        s.drain()?;
                        s.write(b, bytes)?;
                        s.log_durable.cover(seq);
                        ws.log_seq = seq;
                        return Self::written(ws, &p, jobs_end, new_counts, new_next);
                    }
                    (Room::NextSegment { needs_durable }, Some(record))
                        if !s.log_durable.may_overwrite(needs_durable) =>
                    {
                        // The background sync of fjall has not covered the segment to be
                        // overwritten yet: sync here, once the applier has written that
                        // segment's records to fjall (not every later one: the applier may
                        // lag behind a stall of fjall's, and only this segment matters). The
                        // sync covers what was applied before it.
                        s.wait_applied(needs_durable)?;
                        let applied = s.handoff.applied_seq();
                        s.persist_all()?;
                        s.log_durable.cover(applied);
                        record
                    }
                    (Room::NextSegment { .. } | Room::Here, Some(record)) => record,
                };
                s.admit(bytes)?;
                let switched = match log.append(seq, &record) {
                    Ok(switched) => switched,
                    Err(e) => {
                        let err = StoreError::io(log.current_path(), e);
                        s.set_poison(&err);
                        return Err(err);
                    }
                };
                // Settled: the log holds the commit. The applier writes it to fjall behind
                // us; until then the overlay answers the next commits' plans for its jobs.
                s.space.spent(bytes);
                let keys: Vec<JobId> = p.changes.keys().copied().collect();
                let values = p.changes.values().map(|c| c.new.clone());
                let job = Job {
                    seq,
                    batch: b,
                    keys,
                    // Covers the segment just left, so it can be overwritten next time.
                    then_persist: switched.then(|| seq - 1),
                    cost: bytes,
                };
                ws.log_seq = seq;
                // Quietly: the applier is woken by `after_commit` (after the group is
                // acknowledged), or by whoever waits for it first.
                s.handoff.push_quiet(job, values).map_err(|Stopped| {
                    s.poisoned().unwrap_or_else(|| {
                        StoreError::io(&s.dir, std::io::Error::other("the applier stopped"))
                            .into_poisoned()
                    })
                })?;
            }
            (None, None) => s.write(b, bytes)?,
        }
        Self::written(ws, &p, jobs_end, new_counts, new_next)
    }

    /// After a batch is written: the caches follow.
    fn written(
        ws: &mut super::WriteState,
        p: &crate::plan::Plan,
        jobs_end: JobId,
        new_counts: Vec<(&str, u64)>,
        new_next: Option<JobId>,
    ) -> Result<(), StoreError> {
        for (tube, count) in new_counts {
            ws.delayed.insert(tube.to_owned(), count);
        }
        ws.recent.record(p);
        if let Some(end) = new_next {
            ws.next_id = Some(end);
        }
        if let Some(end) = p.put_end {
            ws.jobs_end = Some(jobs_end.max(end));
        }
        Ok(())
    }

    pub(super) fn recover_unguarded(&self, window_end_ms: u64) -> Result<Recovered, StoreError> {
        let s = &*self.inner;
        s.drain()?;
        let read = |e| s.engine_error(e);
        let mut resident = Vec::new();
        for kv in s.resident.iter() {
            let (k, v) = kv.into_inner().map_err(read)?;
            let id = be_u64(&k)
                .ok_or_else(|| s.corrupt(&s.resident, format!("key of {} bytes", k.len())))?;
            resident.push(decode(id, &v).map_err(|d| s.corrupt(&s.resident, d))?);
        }
        let mut in_window: BTreeMap<TubeName, u64> = BTreeMap::new();
        for kv in s.due.range(..due_key(window_end_ms, 0)) {
            let (k, v) = kv.into_inner().map_err(read)?;
            let r = s.due_record(&k, &v)?;
            *in_window.entry(r.tube.clone()).or_default() += 1;
            resident.push(r);
        }
        resident.sort_unstable_by_key(|r| r.id);
        let mut far_delayed = Vec::new();
        for kv in s.meta.prefix(META_DELAYED) {
            let (k, v) = kv.into_inner().map_err(read)?;
            let tube = std::str::from_utf8(&k[META_DELAYED.len()..])
                .map_err(|_| s.corrupt(&s.meta, "a delayed counter's tube is not UTF-8".into()))?;
            let tube = tube_name(tube).map_err(|d| s.corrupt(&s.meta, d))?;
            let total = be_u64(&v).ok_or_else(|| {
                s.corrupt(&s.meta, format!("counter for {tube:?} is not 8 bytes"))
            })?;
            let near = in_window.get(&tube).copied().unwrap_or(0);
            let far = total.checked_sub(near).ok_or_else(|| {
                s.corrupt(&s.meta, format!("tube {tube:?} counts {total} delayed jobs but {near} are due in the window"))
            })?;
            if far > 0 {
                far_delayed.push((tube, far));
            }
        }
        Ok(Recovered {
            next_id: s.next_id()?,
            resident,
            far_delayed,
        })
    }

    pub(super) fn get_unguarded(&self, id: JobId) -> Result<Option<JobRecord>, StoreError> {
        self.inner.drain()?;
        self.inner.job(id)
    }

    pub(super) fn delayed_between_unguarded(
        &self,
        from_ms: u64,
        to_ms: u64,
        limit: usize,
    ) -> Result<Vec<JobRecord>, StoreError> {
        let s = &*self.inner;
        if from_ms >= to_ms || limit == 0 {
            return Ok(Vec::new());
        }
        s.drain()?;
        let mut out = Vec::new();
        for kv in s
            .due
            .range(due_key(from_ms, 0)..due_key(to_ms, 0))
            .take(limit)
        {
            let (k, v) = kv.into_inner().map_err(|e| s.engine_error(e))?;
            out.push(s.due_record(&k, &v)?);
        }
        Ok(out)
    }
}
