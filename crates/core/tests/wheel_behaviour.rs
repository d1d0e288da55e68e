//! Behaviour of `Wheel` at the edges: the end of time, huge jumps, ties across levels,
//! stale and foreign keys, and the bulk operations.

use tickwheel_core::{TimerKey, Wheel};

fn drain_at(wheel: &mut Wheel<&'static str>, now: u64) -> Vec<(u64, &'static str)> {
    let mut out = Vec::new();
    while let Some((_, v)) = wheel.poll(now) {
        out.push((wheel.now(), v));
    }
    out
}

#[test]
fn the_end_of_time_is_a_valid_deadline() {
    let mut wheel = Wheel::new();
    wheel.insert(u64::MAX, "last");
    wheel.insert(u64::MAX - 1, "second to last");
    assert_eq!(wheel.next_deadline(), Some(u64::MAX - 1));
    assert_eq!(drain_at(&mut wheel, u64::MAX - 2), []);
    assert_eq!(
        drain_at(&mut wheel, u64::MAX),
        [(u64::MAX - 1, "second to last"), (u64::MAX, "last")]
    );
    // The clock can sit at u64::MAX and still take timers: they fire at once.
    wheel.insert(5, "past");
    assert_eq!(drain_at(&mut wheel, 0), [(u64::MAX, "past")]);
}

#[test]
fn a_century_in_milliseconds_is_neither_early_nor_lost() {
    let century = 100 * 365 * 86_400_000u64;
    let mut wheel = Wheel::new();
    wheel.insert(century, "reminder");
    for step in 1..=1000u64 {
        // Jumps of a tenth of a year each: nothing fires early.
        assert_eq!(drain_at(&mut wheel, step * century / 1000 - 1), []);
    }
    assert_eq!(drain_at(&mut wheel, century), [(century, "reminder")]);
}

#[test]
fn jumping_years_over_an_empty_stretch() {
    let mut wheel = Wheel::new();
    wheel.insert(10, "soon");
    wheel.insert(10 * 365 * 86_400_000, "in ten years");
    assert_eq!(drain_at(&mut wheel, 3_000 * 86_400_000)[..], [(10, "soon")]);
    assert_eq!(wheel.next_deadline(), Some(10 * 365 * 86_400_000));
    assert_eq!(
        drain_at(&mut wheel, u64::MAX),
        [(10 * 365 * 86_400_000, "in ten years")]
    );
}

#[test]
fn equal_deadlines_keep_insertion_order_across_levels() {
    let mut wheel = Wheel::new();
    let deadline = 1_000_000;
    wheel.insert(deadline, "a: filed high up");
    assert_eq!(drain_at(&mut wheel, 990_000), []);
    wheel.insert(deadline, "b: filed lower");
    assert_eq!(drain_at(&mut wheel, 999_990), []);
    wheel.insert(deadline, "c: filed at level 0");
    let late = wheel.insert(deadline - 5, "d: reset to the same deadline");
    assert!(wheel.reset(late, deadline));
    assert_eq!(
        drain_at(&mut wheel, deadline)
            .into_iter()
            .map(|(_, v)| &v[..1])
            .collect::<String>(),
        "abcd"
    );
}

#[test]
fn timers_a_poll_leaves_queued_fire_on_time_and_in_order() {
    // A poll leaves the insert inbox unfiled while none of its timers is due (and it holds
    // fewer than 64): here while the clock passes two cascades of the slot they belong to.
    let mut wheel = Wheel::new();
    // Vacant entries first: an insert that grows the slab files its timer at once, one that
    // reuses an entry is queued.
    let spare: Vec<_> = (0..80).map(|_| wheel.insert(900_000, "spare")).collect();
    for key in spare {
        wheel.remove(key);
    }
    wheel.insert(70_000, "first");
    for _ in 0..63 {
        wheel.insert(900_000, "filler");
    }
    assert_eq!(drain_at(&mut wheel, 1), []); // 64 queued: filed, "first" on level 2
    wheel.insert(70_000, "second"); // queued from here on
    assert_eq!(drain_at(&mut wheel, 65_536), []); // "first" cascades to level 1
    assert_eq!(drain_at(&mut wheel, 69_888), []); // and to level 0
    wheel.insert(70_000, "third");
    wheel.insert(69_950, "near");
    assert_eq!(wheel.next_deadline(), Some(69_950));
    assert_eq!(drain_at(&mut wheel, 69_949), []);
    assert_eq!(drain_at(&mut wheel, 69_950), [(69_950, "near")]);
    wheel.insert(70_000, "fourth");
    assert_eq!(drain_at(&mut wheel, 69_999), []);
    assert_eq!(
        drain_at(&mut wheel, 70_000),
        [
            (70_000, "first"),
            (70_000, "second"),
            (70_000, "third"),
            (70_000, "fourth")
        ]
    );
    assert_eq!(wheel.len(), 63);
    assert_eq!(wheel.next_deadline(), Some(900_000));
}

#[test]
fn past_deadlines_fire_at_the_next_poll_in_insertion_order() {
    let mut wheel = Wheel::starting_at(500);
    wheel.insert(499, "x");
    wheel.insert(0, "y");
    wheel.insert(500, "z");
    assert_eq!(wheel.next_deadline(), Some(500));
    assert_eq!(
        drain_at(&mut wheel, 0),
        [(500, "x"), (500, "y"), (500, "z")]
    );
}

#[test]
fn timers_inserted_between_polls_of_one_round_fire_in_order() {
    let mut wheel = Wheel::new();
    wheel.insert(10, "a");
    wheel.insert(30, "c");
    assert_eq!(wheel.poll(100).map(|(_, v)| v), Some("a"));
    assert_eq!(wheel.now(), 10);
    // A callback reschedules itself between two polls: it lands in order.
    wheel.insert(20, "b");
    wheel.insert(5, "already due");
    assert_eq!(
        drain_at(&mut wheel, 100),
        [(10, "already due"), (20, "b"), (30, "c")]
    );
    assert_eq!(wheel.now(), 100);
}

#[test]
fn stale_keys_are_inert_after_reuse() {
    let mut wheel = Wheel::new();
    let old = wheel.insert(5, "old");
    assert_eq!(wheel.remove(old), Some("old"));
    let new = wheel.insert(6, "new"); // reuses the slab entry
    assert_ne!(old, new);
    assert_eq!(wheel.remove(old), None);
    assert!(!wheel.reset(old, 100));
    assert_eq!(wheel.get(old), None);
    assert_eq!(wheel.deadline(new), Some(6));
    // A fired timer's key is stale too.
    assert_eq!(wheel.poll(6), Some((new, "new")));
    assert!(!wheel.contains(new));
}

#[test]
fn keys_from_another_wheel_do_not_match() {
    let mut a = Wheel::new();
    let mut b = Wheel::new();
    let key_a = a.insert(5, "a");
    let key_b = b.insert(5, "b");
    assert_ne!(key_a, key_b, "wheels start their generations apart");
    assert_eq!(a.remove(key_b), None);
    assert_eq!(b.remove(key_a), None);
    // Forged keys: out of range, or any bits at all.
    for raw in [u64::MAX, 0, 1 << 32, 12345] {
        let forged = TimerKey::from_u64(raw);
        if forged != key_a {
            assert_eq!(a.remove(forged), None);
        }
    }
    assert_eq!(a.len(), 1);
}

#[test]
fn clear_and_drain_kill_old_keys() {
    let mut wheel = Wheel::new();
    let k1 = wheel.insert(5, "one");
    wheel.clear();
    assert!(wheel.is_empty());
    assert_eq!(wheel.next_deadline(), None);
    let k2 = wheel.insert(7, "two");
    assert!(!wheel.contains(k1));
    assert_ne!(k1, k2);
    let drained: Vec<_> = wheel.drain().collect();
    assert_eq!(drained, [(k2, 7, "two")]);
    let k3 = wheel.insert(9, "three");
    assert!(!wheel.contains(k2));
    assert_eq!(wheel.remove(k3), Some("three"));
}

#[test]
fn left_last_names_the_last_timer_to_leave_each_entry() {
    let mut wheel = Wheel::new();
    let a = wheel.insert(5, "a");
    assert!(!wheel.left_last(a), "pending");
    assert_eq!(wheel.remove(a), Some("a"));
    assert!(wheel.left_last(a), "removed");
    let b = wheel.insert(6, "b"); // reuses a's entry
    assert!(wheel.left_last(a), "b has not left yet");
    assert!(!wheel.left_last(b));
    assert_eq!(wheel.poll(6), Some((b, "b")));
    assert!(wheel.left_last(b), "fired");
    assert!(!wheel.left_last(a), "b left after a");
    // clear and drain forget every entry.
    let c = wheel.insert(7, "c");
    wheel.remove(c);
    wheel.clear();
    assert!(!wheel.left_last(c));
    let d = wheel.insert(8, "d");
    wheel.remove(d);
    drop(wheel.drain());
    assert!(!wheel.left_last(d));
    // Entries freed by shrink_to_fit and pushed again never claim an old key's leaving.
    let keys: Vec<_> = (0..1000u64).map(|i| wheel.insert(i + 10, "k")).collect();
    for &key in &keys {
        wheel.remove(key);
    }
    assert!(keys.iter().all(|&key| wheel.left_last(key)));
    wheel.shrink_to_fit();
    let fresh: Vec<_> = (0..1000u64).map(|i| wheel.insert(i + 10, "f")).collect();
    for &key in &fresh {
        wheel.remove(key);
    }
    assert!(fresh.iter().all(|&key| wheel.left_last(key)));
    assert!(keys.iter().all(|&key| !wheel.left_last(key)));
    // A key of another wheel.
    let mut other = Wheel::new();
    let e = other.insert(1, "e");
    other.remove(e);
    assert!(other.left_last(e));
    assert!(!wheel.left_last(e));
}

#[test]
fn shrink_keeps_live_keys_and_frees_the_tail() {
    let mut wheel = Wheel::new();
    let keys: Vec<_> = (0..1000u64).map(|i| wheel.insert(i * 100, i)).collect();
    for &key in &keys[10..] {
        wheel.remove(key);
    }
    wheel.shrink_to_fit();
    assert!(wheel.capacity() < 100, "capacity {}", wheel.capacity());
    for (i, &key) in keys[..10].iter().enumerate() {
        assert_eq!(wheel.get(key), Some(&(i as u64)));
    }
    for &key in &keys[10..] {
        assert!(!wheel.contains(key));
    }
    let fresh: Vec<_> = (0..990u64).map(|i| wheel.insert(i, i)).collect();
    for key in &keys[10..] {
        assert!(!fresh.contains(key), "a key issued before shrink came back");
    }
}

#[test]
fn iterators_and_collection_traits() {
    let mut wheel: Wheel<u32> = [(3, 30), (1, 10), (2, 20)].into_iter().collect();
    wheel.extend([(4, 40)]);
    assert_eq!(wheel.iter().len(), 4);
    for (_, deadline, value) in wheel.iter_mut() {
        *value += deadline as u32;
    }
    let mut seen: Vec<_> = (&wheel).into_iter().map(|(_, d, v)| (d, *v)).collect();
    seen.sort_unstable();
    assert_eq!(seen, [(1, 11), (2, 22), (3, 33), (4, 44)]);
    let copy = wheel.clone();
    assert_eq!(copy.len(), 4);
    let text = format!("{wheel:?}");
    assert!(
        text.contains("len: 4") && text.contains("next_deadline: Some(1)"),
        "{text}"
    );
    let default: Wheel<()> = Wheel::default();
    assert!(default.is_empty());
}

#[test]
fn cancelling_earliest_in_deadline_order_stays_exact() {
    // Request timeouts completed in order: each cancel removes the earliest timer of a
    // sorted higher-level slot.
    let mut wheel = Wheel::new();
    let keys: Vec<_> = (0..5000u64).map(|i| wheel.insert(30_000 + i, i)).collect();
    for (i, &key) in keys.iter().enumerate() {
        assert_eq!(wheel.next_deadline(), Some(30_000 + i as u64));
        assert_eq!(wheel.remove(key), Some(i as u64));
    }
    assert_eq!(wheel.next_deadline(), None);
}

#[test]
fn cancelling_earliest_of_an_unsorted_slot_stays_exact() {
    let mut wheel = Wheel::new();
    let mut keys: Vec<_> = (0..4000u64)
        .map(|i| {
            let deadline = 70_000 + (i * 7919) % 4000;
            (deadline, wheel.insert(deadline, i))
        })
        .collect();
    keys.sort_unstable();
    for (deadline, key) in keys {
        assert_eq!(wheel.next_deadline(), Some(deadline));
        assert!(wheel.remove(key).is_some());
    }
}

/// A long random run against a `BTreeMap` model, shaped to stress what the lazy layout adds:
/// thousands of timers crowded into a few slots (so cancels pile up garbage and trigger
/// compactions), cancels in deadline order (head skips and sorts of the front slot), resets,
/// and polls that cascade crowded slots. Every poll, `next_deadline` and `len` must agree.
#[test]
fn crowded_slots_with_garbage_match_a_model() {
    check_crowded_slots_with_garbage(Wheel::new());
}

/// The same with a wheel that reserved room: `reserve` raises the garbage it allows beyond
/// 1.5 per timer from 64 items to 4000 here, so its compactions come at other times.
#[test]
fn crowded_slots_with_garbage_match_a_model_after_reserve() {
    check_crowded_slots_with_garbage(Wheel::with_capacity(1_000));
}

fn check_crowded_slots_with_garbage(mut wheel: Wheel<u64>) {
    use std::collections::{BTreeMap, HashMap};

    let mut state = 0x5EED_u64;
    let mut rand = move |n: u64| {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((u128::from(z ^ (z >> 31)) * u128::from(n)) >> 64) as u64
    };
    let mut model: BTreeMap<(u64, u64), u64> = BTreeMap::new();
    let mut live: HashMap<u64, ((u64, u64), TimerKey)> = HashMap::new();
    let mut order: Vec<u64> = Vec::new(); // values, for picking victims
    let (mut seq, mut next_value) = (0u64, 0u64);
    for step in 0..300_000u64 {
        let now = wheel.now();
        match rand(100) {
            0..=44 => {
                // Crowd a few slots: one level-1 slot, one level-2 slot, or anywhere near.
                let deadline = match rand(3) {
                    0 => now + 300 + rand(200),
                    1 => now + 70_000 + rand(3_000),
                    _ => now + rand(5_000_000),
                };
                let value = next_value;
                next_value += 1;
                let key = wheel.insert(deadline, value);
                let slot = (deadline.max(now), seq);
                seq += 1;
                model.insert(slot, value);
                live.insert(value, (slot, key));
                order.push(value);
            }
            45..=79 if !order.is_empty() => {
                // Cancel: mostly random, sometimes the earliest (in deadline order).
                let value = if rand(4) == 0 {
                    match model.first_key_value() {
                        Some((_, &v)) => v,
                        None => continue,
                    }
                } else {
                    order.swap_remove(rand(order.len() as u64) as usize)
                };
                match live.remove(&value) {
                    Some((slot, key)) => {
                        model.remove(&slot);
                        assert_eq!(wheel.remove(key), Some(value), "step {step}");
                        assert_eq!(wheel.remove(key), None, "step {step}: removed twice");
                    }
                    None => continue,
                }
            }
            80..=87 if !order.is_empty() => {
                let value = order[rand(order.len() as u64) as usize];
                if let Some((slot, key)) = live.get(&value).copied() {
                    let deadline = now + rand(80_000);
                    assert!(wheel.reset(key, deadline), "step {step}");
                    model.remove(&slot);
                    let slot = (deadline.max(now), seq);
                    seq += 1;
                    model.insert(slot, value);
                    live.insert(value, (slot, key));
                }
            }
            _ => {
                let to = now + rand(400);
                while let Some((_, value)) = wheel.poll(to) {
                    let (&(deadline, s), &expected) =
                        model.first_key_value().expect("wheel fired, model empty");
                    assert_eq!(value, expected, "step {step}: fired out of order");
                    assert_eq!(wheel.now(), deadline, "step {step}");
                    assert!(deadline <= to, "step {step}: fired early");
                    model.remove(&(deadline, s));
                    live.remove(&value);
                }
                if let Some((&(deadline, _), _)) = model.first_key_value() {
                    assert!(
                        deadline > to,
                        "step {step}: {deadline} due at {to} not fired"
                    );
                }
            }
        }
        assert_eq!(wheel.len(), model.len(), "step {step}");
        assert_eq!(
            wheel.next_deadline(),
            model.first_key_value().map(|(&(d, _), _)| d),
            "step {step}"
        );
        if order.len() > 4 * model.len() + 64 {
            order.retain(|v| live.contains_key(v));
        }
    }
}

/// A budgeted poll hands out exactly what `poll` does, in the same order, while inserts,
/// removals and resets (inside and outside the window being cascaded) land between its
/// pauses; each call moves a bounded number of timers; and a zero budget still progresses.
#[test]
fn budgeted_polls_pause_and_agree_with_poll() {
    use tickwheel_core::Step;
    let mut rng = 0x2545_f491_u64;
    let mut next = move |below: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % below
    };
    let mut budgeted: Wheel<u64> = Wheel::new();
    let mut keys = Vec::new();
    for v in 0..20_000 {
        // Level-1 slots (ticks 256..1024) and a few level-2 timers.
        let d = if v % 10 == 0 {
            70_000 + next(1_000)
        } else {
            256 + next(768)
        };
        keys.push(budgeted.insert(d, v));
    }
    let mut plain = budgeted.clone();
    let mut plain_keys = keys.clone();
    let (mut got, mut want) = (Vec::new(), Vec::new());
    let (mut pauses, mut v) = (0, 20_000);
    let mut now = 0;
    while now < 80_000 {
        now += 1 + next(40);
        loop {
            let budget = next(50) as usize;
            let before = budgeted.next_deadline();
            match budgeted.poll_budgeted(now, budget) {
                Step::Fired(_, value) => got.push((budgeted.now(), value)),
                Step::Idle => break,
                Step::Paused => {
                    pauses += 1;
                    assert!(budgeted.now() <= now);
                    assert_eq!(budgeted.next_deadline(), before, "exact while paused");
                    assert!(before.is_some_and(|d| d >= budgeted.now()), "never early");
                    // The same operation on both wheels; `plain` fires what is due before the
                    // window being cascaded (`budgeted` handed those out already) and its
                    // clock catches up with `budgeted`'s. That clock reads the window's start
                    // (nothing due then has been handed out), or, when the window was being
                    // pre-cascaded (`prepare`), a tick before the window, everything due up
                    // to it handed out.
                    let before_window = budgeted
                        .now()
                        .min(before.map_or(u64::MAX, |d| d.saturating_sub(1)));
                    while let Some((_, value)) = plain.poll(before_window) {
                        want.push((plain.now(), value));
                    }
                    let i = next(keys.len() as u64) as usize;
                    match next(4) {
                        0 => {
                            let d = budgeted.now() + next(600);
                            keys.push(budgeted.insert(d, v));
                            plain_keys.push(plain.insert(d, v));
                            v += 1;
                        }
                        1 => assert_eq!(budgeted.remove(keys[i]), plain.remove(plain_keys[i])),
                        2 => {
                            let d = budgeted.now() + next(2_000);
                            assert_eq!(budgeted.reset(keys[i], d), plain.reset(plain_keys[i], d));
                        }
                        _ => {}
                    }
                    assert_eq!(budgeted.len(), plain.len());
                }
            }
        }
        while let Some((_, value)) = plain.poll(now) {
            want.push((plain.now(), value));
        }
        assert_eq!(got, want, "up to {now}");
        // Between two ticks: `budgeted` pre-cascades (part of) the next window, so these
        // land while that window is moving or staged.
        budgeted.prepare(next(50) as usize);
        let i = next(keys.len() as u64) as usize;
        match next(3) {
            0 => {
                let d = now + next(600);
                keys.push(budgeted.insert(d, v));
                plain_keys.push(plain.insert(d, v));
                v += 1;
            }
            1 => assert_eq!(budgeted.remove(keys[i]), plain.remove(plain_keys[i])),
            _ => {
                let d = now + next(2_000);
                assert_eq!(budgeted.reset(keys[i], d), plain.reset(plain_keys[i], d));
            }
        }
        assert_eq!(budgeted.next_deadline(), plain.next_deadline());
    }
    while let Some((_, value)) = budgeted.poll(u64::MAX) {
        got.push((budgeted.now(), value));
    }
    while let Some((_, value)) = plain.poll(u64::MAX) {
        want.push((plain.now(), value));
    }
    assert_eq!(got, want, "the rest");
    assert!(budgeted.is_empty() && plain.is_empty());
    // Fewer than before `prepare`: idle calls move most windows ahead of time.
    assert!(pauses > 20, "only {pauses} pauses");

    // A budget of 0 still moves one line per call: a long cascade ends.
    let mut wheel: Wheel<u64> = (0..1_000).map(|i| (300 + i % 7, i)).collect();
    let mut calls = 0;
    while !matches!(wheel.poll_budgeted(1_000, 0), Step::Idle) {
        calls += 1;
        assert!(calls < 2_000, "no progress");
    }
    assert!(wheel.is_empty());
}

/// Found by the fuzzer: a budget spent on one cascade must not move the clock to the start
/// of the next slot to cascade before that cascade begins (its timers would then not be
/// where their deadlines say, and removing one underflowed a counter).
#[test]
fn a_spent_budget_does_not_move_the_clock_past_an_uncascaded_slot() {
    use tickwheel_core::Step;
    let mut wheel = Wheel::new();
    // Level 2, slot 1 (ticks 65536..131072): one line, cascading to level-1 slot 273.
    let keys: Vec<_> = (0..10u64).map(|i| wheel.insert(70_000 + i, i)).collect();
    // Budget 1: the level-2 cascade spends it, and the call reaches the level-1 slot next.
    assert_eq!(wheel.poll_budgeted(200_000, 1), Step::Paused);
    assert!(wheel.now() <= 70_000);
    assert_eq!(wheel.next_deadline(), Some(70_000));
    // Removing, resetting and inserting while paused find the timers where they are.
    assert_eq!(wheel.remove(keys[3]), Some(3));
    assert!(wheel.reset(keys[4], 70_100));
    wheel.insert(70_050, 10);
    let mut fired = Vec::new();
    loop {
        match wheel.poll_budgeted(200_000, 1) {
            Step::Fired(_, v) => fired.push((wheel.now(), v)),
            Step::Paused => {}
            Step::Idle => break,
        }
    }
    assert!(wheel.is_empty());
    let mut want: Vec<(u64, u64)> = [0, 1, 2, 5, 6, 7, 8, 9]
        .iter()
        .map(|&i| (70_000 + i, i))
        .collect();
    want.push((70_050, 10));
    want.push((70_100, 4));
    assert_eq!(fired, want);
}

/// `prepare` (pre-cascading the next window) changes nothing a caller can observe: a wheel
/// that prepares with small budgets between operations hands out the same timers in the same
/// order at the same ticks as one that never does, with exact `next_deadline` and matching
/// answers to removals and resets throughout, including operations that land in a window
/// while it is moving and after it is staged.
#[test]
fn prepare_changes_nothing_observable() {
    let mut rng = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = move |below: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % below
    };
    let mut prepared: Wheel<u64> = Wheel::new();
    let mut plain: Wheel<u64> = Wheel::new();
    let mut keys = Vec::new();
    let mut v = 0;
    let (mut moved_windows, mut was_moving) = (0, false);
    for now in 0..5_000u64 {
        for _ in 0..next(40) {
            let i = next(keys.len() as u64 + 1) as usize;
            match next(8) {
                0..=3 => {
                    let d = now + next(1_500);
                    keys.push((prepared.insert(d, v), plain.insert(d, v)));
                    v += 1;
                }
                4 | 5 if i < keys.len() => {
                    assert_eq!(prepared.remove(keys[i].0), plain.remove(keys[i].1));
                }
                6 if i < keys.len() => {
                    let d = now + next(1_500);
                    assert_eq!(prepared.reset(keys[i].0, d), plain.reset(keys[i].1, d));
                }
                _ => {
                    let more = prepared.prepare(next(20) as usize);
                    if was_moving && !more {
                        moved_windows += 1;
                    }
                    was_moving = more;
                }
            }
            assert_eq!(prepared.next_deadline(), plain.next_deadline(), "at {now}");
            assert_eq!(prepared.len(), plain.len());
        }
        loop {
            let (a, b) = (prepared.poll(now), plain.poll(now));
            assert_eq!(
                a.map(|(_, v)| (prepared.now(), v)),
                b.map(|(_, v)| (plain.now(), v)),
                "at {now}"
            );
            if a.is_none() {
                break;
            }
        }
        assert_eq!(prepared.now(), plain.now());
    }
    assert!(moved_windows > 5, "only {moved_windows} windows prepared");
}

/// Cancels do not touch their slot (ADR 0013): slots whose timers were all cancelled stay
/// occupied by garbage until they are reached, compacted round-robin, or found by the
/// search for the next deadline. Checks `next_deadline` after every operation and the
/// firing order against a model, with few live timers and much garbage (so the
/// round-robin compaction runs on most inserts), at levels 0 to 3.
#[test]
fn garbage_only_slots_keep_next_deadline_exact() {
    use std::collections::BTreeMap;

    let mut wheel: Wheel<u64> = Wheel::starting_at(1_000);
    let mut model: BTreeMap<(u64, u64), TimerKey> = BTreeMap::new();
    let mut seq = 0u64;
    let check = |wheel: &Wheel<u64>, model: &BTreeMap<(u64, u64), TimerKey>, what: &str| {
        assert_eq!(
            wheel.next_deadline(),
            model.keys().next().map(|&(d, _)| d),
            "{what}"
        );
        assert_eq!(wheel.len(), model.len(), "{what}");
    };
    for round in 0..40u64 {
        let now = wheel.now();
        // Crowd one slot per level, then cancel all of them but a few survivors.
        let mut batch = Vec::new();
        for (i, offset) in [5u64, 300, 70_000, 17_000_000].iter().enumerate() {
            for j in 0..200u64 {
                let deadline = now + offset + (j * 7919 + round) % 200;
                let key = wheel.insert(deadline, seq);
                model.insert((deadline, seq), key);
                batch.push((deadline, seq, key, i, j));
                seq += 1;
            }
        }
        check(&wheel, &model, "after the batch");
        for &(deadline, value, key, level, j) in &batch {
            if j % 97 == 0 && level != round as usize % 4 {
                continue; // a survivor (and one level keeps none: a garbage-only slot)
            }
            assert_eq!(wheel.remove(key), Some(value));
            model.remove(&(deadline, value));
            check(&wheel, &model, "after a cancel");
        }
        // Poll a stretch: garbage-only slots are reached and dropped on the way.
        let until = now + 400 + round * 50_000;
        while let Some((key, value)) = wheel.poll(until) {
            let (&(deadline, v), &k) = model.iter().next().expect("fired from an empty model");
            assert_eq!((k, v), (key, value), "round {round}");
            assert!(deadline <= wheel.now());
            model.remove(&(deadline, v));
            check(&wheel, &model, "after a fire");
        }
        check(&wheel, &model, "after polling");
    }
    // Everything left fires, in order, none early.
    while let Some((key, value)) = wheel.poll(u64::MAX) {
        let (&(deadline, v), &k) = model.iter().next().expect("fired from an empty model");
        assert_eq!((k, v), (key, value));
        assert_eq!(wheel.now(), deadline);
        model.remove(&(deadline, v));
    }
    assert!(model.is_empty() && wheel.is_empty());
    assert_eq!(wheel.next_deadline(), None);
}

/// A window being pre-cascaded whose timers not moved yet are all cancelled (cancels do not
/// finish the move any more, ADR 0013), then compacted away (`shrink_to_fit` compacts every
/// slot): the timers already staged must still fire, in order.
#[test]
fn compacting_away_the_rest_of_a_moving_window_keeps_the_staged_timers() {
    let mut wheel: Wheel<u64> = Wheel::new();
    let keys: Vec<TimerKey> = (0..100u64).map(|i| wheel.insert(256 + i, i)).collect();
    assert!(wheel.prepare(1), "one line moved, the window still moving");
    // The earliest timers (filed first) are staged; cancel every other one.
    for key in &keys[15..] {
        assert!(wheel.remove(*key).is_some());
    }
    assert_eq!(wheel.next_deadline(), Some(256));
    wheel.shrink_to_fit();
    assert_eq!(wheel.next_deadline(), Some(256));
    let mut fired = Vec::new();
    while let Some((_, value)) = wheel.poll(10_000) {
        fired.push(value);
    }
    assert_eq!(fired, (0..15).collect::<Vec<_>>());
    assert!(wheel.is_empty());
}

#[test]
fn sorting_a_level_1_slot_keeps_ties_in_filing_order() {
    // 600 timers in one level-1 slot (ticks 512..768), filed out of deadline order with many
    // ties; cancelling the earliest twice makes the wheel scan, then sort that slot.
    let mut wheel = Wheel::new();
    let mut keys = Vec::new();
    for i in 0..600u64 {
        let deadline = 512 + (i * 37) % 20;
        keys.push((deadline, i, wheel.insert(deadline, i)));
    }
    let mut pending: Vec<(u64, u64)> = keys.iter().map(|&(d, i, _)| (d, i)).collect();
    pending.sort_unstable();
    for _ in 0..2 {
        let (deadline, value) = pending.remove(0);
        let key = keys.iter().find(|k| k.1 == value).map(|k| k.2);
        assert_eq!(wheel.remove(key.expect("filed")), Some(value));
        assert_eq!(
            wheel.next_deadline(),
            Some(pending[0].0),
            "after {deadline}"
        );
    }
    let mut fired = Vec::new();
    while let Some((_, value)) = wheel.poll(1_000) {
        fired.push((wheel.now(), value));
    }
    assert_eq!(fired, pending, "deadline order, ties in filing order");
}
