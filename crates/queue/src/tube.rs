//! A tube: its ready queue, delayed and buried jobs, waiting clients and counters.

use std::collections::{BTreeMap, BTreeSet};

use rustc_hash::FxHashMap;

use tickwheel_core::TimerKey;

use crate::due::DueCounts;
use crate::types::{ClientId, JobId, Millis, TubeName, URGENT_PRIORITY};

/// Index of a tube in the engine's tube table.
pub(crate) type TubeId = u32;

pub(crate) struct Tube {
    pub(crate) name: TubeName,
    /// Ready jobs by `(priority, id)`: the first is the next to reserve (beanstalkd order).
    pub(crate) ready: BTreeSet<(u32, JobId)>,
    /// Ready jobs with priority below [`URGENT_PRIORITY`].
    pub(crate) urgent: u64,
    /// Delayed jobs by `(until, id)`: for `peek-delayed` and `kick`, earliest first.
    pub(crate) delayed: BTreeSet<(Millis, JobId)>,
    /// Buried jobs in bury order (a FIFO keyed by a sequence number).
    pub(crate) buried: BTreeMap<u64, JobId>,
    /// Delayed jobs of this tube that are not in memory (see `Engine::window_load`).
    pub(crate) far_delayed: u64,
    /// All delayed jobs of this tube (in memory and far) counted by due time: the timeline.
    pub(crate) due: DueCounts,
    pub(crate) reserved: u64,
    pub(crate) using: u64,
    pub(crate) watching: u64,
    /// Clients waiting in `reserve` while watching this tube, as beanstalkd keeps them: an
    /// array a waiter is appended to and swap-removed from (the last one takes its place).
    pub(crate) waiters: Vec<ClientId>,
    /// Each waiter's index in `waiters`, so that a waiter leaves in O(1) however many wait
    /// (beanstalkd searches the array).
    waiter_at: FxHashMap<ClientId, usize>,
    /// Where the next waiter is taken from (beanstalkd's `Ms.last`): a cursor that moves on
    /// past each waiter taken, so waiters are served round the array, not first come first
    /// served.
    pub(crate) take_at: usize,
    pub(crate) total_jobs: u64,
    /// Jobs of this tube reserved, and reservations that ran out (this process).
    pub(crate) reserves: u64,
    pub(crate) timeouts: u64,
    pub(crate) cmd_delete: u64,
    pub(crate) cmd_pause_tube: u64,
    /// The last `pause-tube` delay, and the pause in force.
    pub(crate) pause: Millis,
    pub(crate) paused: Option<Pause>,
}

#[derive(Clone, Copy)]
pub(crate) struct Pause {
    pub(crate) until: Millis,
    pub(crate) timer: TimerKey,
}

impl Tube {
    pub(crate) fn new(name: TubeName) -> Tube {
        Tube {
            name,
            ready: BTreeSet::new(),
            urgent: 0,
            delayed: BTreeSet::new(),
            buried: BTreeMap::new(),
            far_delayed: 0,
            due: DueCounts::default(),
            reserved: 0,
            using: 0,
            watching: 0,
            waiters: Vec::new(),
            waiter_at: FxHashMap::default(),
            take_at: 0,
            total_jobs: 0,
            reserves: 0,
            timeouts: 0,
            cmd_delete: 0,
            cmd_pause_tube: 0,
            pause: 0,
            paused: None,
        }
    }

    pub(crate) fn add_ready(&mut self, priority: u32, id: JobId) {
        self.ready.insert((priority, id));
        if priority < URGENT_PRIORITY {
            self.urgent += 1;
        }
    }

    pub(crate) fn remove_ready(&mut self, priority: u32, id: JobId) {
        if self.ready.remove(&(priority, id)) && priority < URGENT_PRIORITY {
            self.urgent -= 1;
        }
    }

    pub(crate) fn add_waiter(&mut self, client: ClientId) {
        if let std::collections::hash_map::Entry::Vacant(at) = self.waiter_at.entry(client) {
            at.insert(self.waiters.len());
            self.waiters.push(client);
        }
    }

    pub(crate) fn remove_waiter(&mut self, client: ClientId) {
        if let Some(i) = self.waiter_at.remove(&client) {
            self.waiters.swap_remove(i);
            if let Some(&moved) = self.waiters.get(i) {
                self.waiter_at.insert(moved, i);
            }
        }
    }

    /// The waiter the next ready job of this tube goes to (beanstalkd's `ms_take`).
    pub(crate) fn take_waiter(&mut self) -> Option<ClientId> {
        if self.waiters.is_empty() {
            return None;
        }
        let i = self.take_at % self.waiters.len();
        self.take_at = i + 1;
        let client = self.waiters[i];
        self.remove_waiter(client);
        Some(client)
    }

    /// No job of any kind and nobody referring to it: the tube can go.
    pub(crate) fn is_unused(&self) -> bool {
        self.ready.is_empty()
            && self.delayed.is_empty()
            && self.buried.is_empty()
            && self.far_delayed == 0
            && self.reserved == 0
            && self.using == 0
            && self.watching == 0
            && self.waiters.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// beanstalkd's `Ms` as it is written: an array searched linearly, swap-removal, and a
    /// cursor for `ms_take`.
    #[derive(Default)]
    struct Ms {
        items: Vec<ClientId>,
        last: usize,
    }

    impl Ms {
        fn remove(&mut self, c: ClientId) {
            if let Some(i) = self.items.iter().position(|&x| x == c) {
                self.items.swap_remove(i);
            }
        }

        fn take(&mut self) -> Option<ClientId> {
            if self.items.is_empty() {
                return None;
            }
            self.last %= self.items.len();
            let c = self.items.swap_remove(self.last);
            self.last += 1;
            Some(c)
        }
    }

    proptest! {
        /// The tube's waiters (with their index map) stay the array beanstalkd would have,
        /// and hand out the same waiter at every take.
        #[test]
        fn waiters_follow_beanstalkds_array(ops in prop::collection::vec((0u8..3, 0u64..12), 0..300)) {
            let mut tube = Tube::new(TubeName::default_tube());
            let mut ms = Ms::default();
            for (op, client) in ops {
                let client = ClientId(client);
                match op {
                    0 => {
                        tube.add_waiter(client);
                        if !ms.items.contains(&client) {
                            ms.items.push(client);
                        }
                    }
                    1 => {
                        tube.remove_waiter(client);
                        ms.remove(client);
                    }
                    _ => prop_assert_eq!(tube.take_waiter(), ms.take()),
                }
                prop_assert_eq!(&tube.waiters, &ms.items);
                for (i, c) in tube.waiters.iter().enumerate() {
                    prop_assert_eq!(tube.waiter_at.get(c), Some(&i));
                }
                prop_assert_eq!(tube.waiter_at.len(), tube.waiters.len());
            }
        }
    }
}
