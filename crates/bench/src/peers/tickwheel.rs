//! Adapter for `tickwheel_core::Wheel<u64>`: ticks are the wheel's own ticks.

use tickwheel_core::{TimerKey, Wheel};

use super::TimerImpl;

pub(crate) struct TickwheelTimer(Wheel<u64>);

impl TimerImpl for TickwheelTimer {
    type Handle = TimerKey;
    const NAME: &'static str = "tickwheel";
    const PEEK: &'static str = "next_deadline(): exact";

    fn create(capacity: usize) -> Self {
        TickwheelTimer(Wheel::with_capacity(capacity))
    }

    #[inline(always)]
    fn insert(&mut self, deadline: u64, id: u64) -> TimerKey {
        self.0.insert(deadline, id)
    }

    #[inline(always)]
    fn cancel(&mut self, handle: TimerKey) -> Option<u64> {
        self.0.remove(handle)
    }

    #[inline]
    fn poll_until(&mut self, now: u64, out: &mut Vec<u64>) {
        while let Some((_, id)) = self.0.poll(now) {
            out.push(id);
        }
    }

    fn next_deadline(&mut self) -> Option<u64> {
        self.0.next_deadline()
    }

    fn len(&self) -> usize {
        self.0.len()
    }
}
