//! A `BTreeMap<(deadline, seq), id>` timer: the handle is the key, cancel is a removal.

use std::collections::BTreeMap;

use super::TimerImpl;

pub(crate) struct BTreeTimer {
    map: BTreeMap<(u64, u64), u64>,
    seq: u64,
}

impl TimerImpl for BTreeTimer {
    type Handle = (u64, u64);
    const NAME: &'static str = "BTreeMap";
    const PEEK: &'static str = "first_key_value(): exact";

    fn create(_capacity: usize) -> Self {
        BTreeTimer {
            map: BTreeMap::new(),
            seq: 0,
        }
    }

    #[inline(always)]
    fn insert(&mut self, deadline: u64, id: u64) -> (u64, u64) {
        self.seq += 1;
        let key = (deadline, self.seq);
        self.map.insert(key, id);
        key
    }

    #[inline(always)]
    fn cancel(&mut self, handle: (u64, u64)) -> Option<u64> {
        self.map.remove(&handle)
    }

    #[inline]
    fn poll_until(&mut self, now: u64, out: &mut Vec<u64>) {
        while let Some(entry) = self.map.first_entry() {
            if entry.key().0 > now {
                break;
            }
            out.push(entry.remove());
        }
    }

    fn next_deadline(&mut self) -> Option<u64> {
        self.map
            .first_key_value()
            .map(|(&(deadline, _), _)| deadline)
    }

    fn len(&self) -> usize {
        self.map.len()
    }
}
