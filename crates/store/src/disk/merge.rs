//! A commit's table writes as data ([`Writes`]), so the applier can write several settled
//! commits as one fjall batch ([`merge`], ADR 0026): each key's last write only, and no
//! removal of a key that fjall never held.
//!
//! # Ground rules
//!
//! - Applying the merged writes of commits `a..=b` to fjall leaves every key as applying the
//!   commits one after the other would: the last write of a key wins (a commit never writes
//!   one key twice, see `ops.rs`).
//! - A removal is dropped only for a key of a job whose id is at or above the first commit's
//!   [`Writes::fresh_from`]: no such job existed before commit `a` (ids only grow, and
//!   `fresh_from` is one past every id stored or put before it), so none of its keys is in
//!   fjall, and removing it again is a no-op. Its inserts inside the range are overwritten or
//!   removed by later writes of the same key, so a job created and deleted inside the range
//!   never reaches fjall.
//! - `meta/wal_seq` is a key like the others: the merged batch carries the last commit's,
//!   so fjall still holds a prefix of the log's commits and knows which one ends it.

use std::collections::hash_map::Entry;
use std::collections::HashMap;

use fjall::Slice;
use tickwheel_queue::JobId;

/// The table a write goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Table {
    Jobs,
    Resident,
    Due,
    Meta,
}

/// One write: `value` `None` removes the key.
#[derive(Debug)]
pub(crate) struct Write {
    pub(crate) table: Table,
    pub(crate) key: Slice,
    pub(crate) value: Option<Slice>,
    /// The job the key belongs to (`None`: a `meta` key).
    pub(crate) id: Option<JobId>,
}

/// The writes of one commit.
#[derive(Debug, Default)]
pub(crate) struct Writes {
    pub(crate) items: Vec<Write>,
    /// Ids at or above this were never stored before this commit (the store's `jobs_end`
    /// when the commit was planned).
    pub(crate) fresh_from: JobId,
}

impl Writes {
    pub(crate) fn new(fresh_from: JobId) -> Writes {
        Writes {
            items: Vec::new(),
            fresh_from,
        }
    }

    pub(crate) fn insert(
        &mut self,
        table: Table,
        key: impl Into<Slice>,
        value: impl Into<Slice>,
        id: Option<JobId>,
    ) {
        self.items.push(Write {
            table,
            key: key.into(),
            value: Some(value.into()),
            id,
        });
    }

    pub(crate) fn remove(&mut self, table: Table, key: impl Into<Slice>, id: Option<JobId>) {
        self.items.push(Write {
            table,
            key: key.into(),
            value: None,
            id,
        });
    }

    pub(crate) fn len(&self) -> usize {
        self.items.len()
    }
}

/// The writes of consecutive commits (in sequence order) as one set: each key's last write,
/// without the removals of keys fjall never held (see the module docs). Returns them and
/// how many writes the commits held in all.
pub(crate) fn merge(commits: Vec<Writes>) -> (Vec<Write>, usize) {
    let total: usize = commits.iter().map(Writes::len).sum();
    let Some(fresh) = commits.first().map(|w| w.fresh_from) else {
        return (Vec::new(), 0);
    };
    if commits.len() == 1 {
        // One commit: its own writes, nothing to merge (a job it creates and deletes has no
        // writes at all, see `plan`).
        let mut commits = commits;
        return (commits.pop().map(|w| w.items).unwrap_or_default(), total);
    }
    let mut index: HashMap<(Table, Slice), usize> = HashMap::with_capacity(total);
    let mut out: Vec<Write> = Vec::with_capacity(total);
    for w in commits.into_iter().flat_map(|c| c.items) {
        match index.entry((w.table, w.key.clone())) {
            Entry::Occupied(e) => out[*e.get()] = w,
            Entry::Vacant(e) => {
                e.insert(out.len());
                out.push(w);
            }
        }
    }
    out.retain(|w| w.value.is_some() || w.id.is_none_or(|id| id < fresh));
    (out, total)
}

#[cfg(test)]
mod tests {
    #![expect(clippy::unwrap_used, reason = "tests")]

    use super::*;

    fn put(w: &mut Writes, id: JobId, v: u8) {
        w.insert(Table::Resident, id.to_be_bytes(), [v], Some(id));
        w.insert(Table::Jobs, id.to_be_bytes(), [0u8], Some(id));
    }

    fn delete(w: &mut Writes, id: JobId) {
        w.remove(Table::Resident, id.to_be_bytes(), Some(id));
        w.remove(Table::Jobs, id.to_be_bytes(), Some(id));
    }

    fn seq(w: &mut Writes, s: u64) {
        w.insert(Table::Meta, &b"wal_seq"[..], s.to_be_bytes(), None);
    }

    fn show(out: &[Write]) -> Vec<(Table, Vec<u8>, Option<Vec<u8>>)> {
        out.iter()
            .map(|w| {
                (
                    w.table,
                    w.key.to_vec(),
                    w.value.as_ref().map(|v| v.to_vec()),
                )
            })
            .collect()
    }

    #[test]
    fn a_job_created_and_deleted_in_the_range_is_not_written_one_kept_is() {
        // fjall may hold ids below 10: job 5 existed before the range, 10 and 11 are new.
        let mut a = Writes::new(10);
        put(&mut a, 10, 1);
        put(&mut a, 11, 1);
        seq(&mut a, 1);
        let mut b = Writes::new(12);
        delete(&mut b, 10);
        delete(&mut b, 5);
        put(&mut b, 11, 2);
        seq(&mut b, 2);
        let (out, total) = merge(vec![a, b]);
        assert_eq!(total, 4 + 1 + 2 + 2 + 2 + 1);
        let shown = show(&out);
        // Job 10: nothing. Job 11: its last value. Job 5: removed. wal_seq: the last one.
        assert!(!shown.iter().any(|(_, k, _)| k == &10u64.to_be_bytes()));
        assert!(shown.contains(&(Table::Resident, 11u64.to_be_bytes().to_vec(), Some(vec![2]))));
        assert!(shown.contains(&(Table::Resident, 5u64.to_be_bytes().to_vec(), None)));
        assert!(shown.contains(&(Table::Jobs, 5u64.to_be_bytes().to_vec(), None)));
        assert!(shown.contains(&(
            Table::Meta,
            b"wal_seq".to_vec(),
            Some(2u64.to_be_bytes().to_vec())
        )));
        assert_eq!(shown.len(), 2 + 2 + 1);
    }

    #[test]
    fn one_commit_is_written_as_it_is() {
        let mut a = Writes::new(10);
        delete(&mut a, 3);
        seq(&mut a, 1);
        let (out, total) = merge(vec![a]);
        assert_eq!((out.len(), total), (3, 3));
        assert_eq!(merge(Vec::new()).1, 0);
        assert!(out.first().unwrap().value.is_none());
    }
}
