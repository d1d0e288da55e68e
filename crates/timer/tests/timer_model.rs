//! The timer service against a model, on random operation sequences: schedule one-shot
//! and repeating (`Skip`) callbacks, cancel (by fresh and stale handles), advance a
//! `ManualClock` and turn the driver (callbacks run inline), state queries, and a final
//! `stop`. Checks: exactly the due, uncancelled
//! callbacks fire at each turn, in deadline order, never early; `cancel` is true exactly
//! for a timer that had not fired or been cancelled; states and `pending` agree with the
//! model; `stop` returns exactly the rest, with their deadlines.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use proptest::prelude::*;
use tickwheel::{Clock, ManualClock, MissedTickBehavior, TaskState, Timer, TimerHandle};

#[derive(Debug, Clone)]
enum Op {
    Schedule { delay_ms: u64 },
    Repeat { delay_ms: u64, period_ms: u64 },
    Cancel { pick: usize },
    Advance { ms: u64 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u64..40).prop_map(|delay_ms| Op::Schedule { delay_ms }),
        1 => (0u64..40, 1u64..20).prop_map(|(delay_ms, period_ms)| Op::Repeat { delay_ms, period_ms }),
        2 => any::<usize>().prop_map(|pick| Op::Cancel { pick }),
        2 => (0u64..15).prop_map(|ms| Op::Advance { ms }),
    ]
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    Live,
    Fired,
    Cancelled,
}

fn run(ops: &[Op]) -> Result<(), TestCaseError> {
    let clock = ManualClock::new();
    let timer = Timer::builder()
        .clock(clock.clone())
        .worker_threads(0)
        .shards(1)
        .__manual_driver()
        .build()
        .expect("build");
    let start = clock.now();
    let fired: Arc<Mutex<Vec<(usize, Duration)>>> = Arc::default();
    // Per timer: handle, (next) deadline in ms from start, status, period, link order.
    let mut model: Vec<(TimerHandle, u64, Status, Option<u64>, u64)> = Vec::new();
    let mut seq = 0u64;
    let mut now_ms = 0u64;
    for op in ops {
        match *op {
            Op::Schedule { delay_ms } => {
                let id = model.len();
                let (fired, clock) = (Arc::clone(&fired), clock.clone());
                let handle = timer
                    .schedule(Duration::from_millis(delay_ms), move || {
                        fired.lock().expect("lock").push((id, clock.now() - start));
                    })
                    .expect("schedule");
                model.push((handle, now_ms + delay_ms, Status::Live, None, seq));
                seq += 1;
            }
            Op::Repeat {
                delay_ms,
                period_ms,
            } => {
                let id = model.len();
                let (fired, clock) = (Arc::clone(&fired), clock.clone());
                let handle = timer
                    .schedule_repeating(
                        Duration::from_millis(delay_ms),
                        Duration::from_millis(period_ms),
                        MissedTickBehavior::Skip,
                        move || fired.lock().expect("lock").push((id, clock.now() - start)),
                    )
                    .expect("schedule_repeating");
                model.push((
                    handle,
                    now_ms + delay_ms,
                    Status::Live,
                    Some(period_ms),
                    seq,
                ));
                seq += 1;
            }
            Op::Cancel { pick } => {
                if model.is_empty() {
                    continue;
                }
                let i = pick % model.len();
                let expected = model[i].2 == Status::Live;
                prop_assert_eq!(timer.cancel(model[i].0), expected, "cancel #{}", i);
                if expected {
                    model[i].2 = Status::Cancelled;
                }
            }
            Op::Advance { ms } => {
                now_ms += ms;
                clock.advance(Duration::from_millis(ms));
                timer.__turn();
                let got: Vec<(usize, Duration)> = std::mem::take(&mut *fired.lock().expect("lock"));
                let mut want: Vec<usize> = (0..model.len())
                    .filter(|&i| model[i].2 == Status::Live && model[i].1 <= now_ms)
                    .collect();
                // Deadline order, ties in linking order.
                want.sort_by_key(|&i| (model[i].1, model[i].4));
                let got_ids: Vec<usize> = got.iter().map(|(id, _)| *id).collect();
                prop_assert_eq!(&got_ids, &want, "fired at {} ms", now_ms);
                for (id, at) in got {
                    prop_assert!(
                        at >= Duration::from_millis(model[id].1),
                        "#{} ran early: {:?} < {} ms",
                        id,
                        at,
                        model[id].1
                    );
                    match model[id].3 {
                        None => model[id].2 = Status::Fired,
                        Some(period) => {
                            // Skip: the next grid point after now; linked after this turn.
                            let due = model[id].1;
                            model[id].1 = due + period * ((now_ms - due) / period + 1);
                            model[id].4 = seq;
                            seq += 1;
                        }
                    }
                }
            }
        }
        for (i, (handle, _, status, _, _)) in model.iter().enumerate() {
            let state = timer.state(*handle);
            let ok = match status {
                Status::Live => state == TaskState::Waiting,
                Status::Fired => matches!(state, TaskState::Done | TaskState::Unknown),
                Status::Cancelled => matches!(state, TaskState::Cancelled | TaskState::Unknown),
            };
            prop_assert!(
                ok,
                "#{} is {:?} in the model, {:?} in the timer",
                i,
                status,
                state
            );
        }
        let live = model.iter().filter(|m| m.2 == Status::Live).count();
        prop_assert_eq!(timer.pending(), live);
    }
    let left = timer.stop();
    let mut want: Vec<(Duration, Option<Duration>)> = model
        .iter()
        .filter(|m| m.2 == Status::Live)
        .map(|m| (Duration::from_millis(m.1), m.3.map(Duration::from_millis)))
        .collect();
    want.sort();
    let mut got: Vec<(Duration, Option<Duration>)> = left
        .iter()
        .map(|t| (t.deadline() - start, t.period()))
        .collect();
    got.sort();
    prop_assert_eq!(got, want, "stop returns exactly the timers that never ran");
    prop_assert!(
        fired.lock().expect("lock").is_empty(),
        "nothing ran during stop"
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    #[test]
    fn the_timer_service_matches_a_model(ops in proptest::collection::vec(op(), 0..120)) {
        run(&ops)?;
    }
}
