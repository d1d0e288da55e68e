//! Once a wheel has room for its live timers, inserting, cancelling, resetting and firing
//! allocate nothing: entries are recycled through the slab's free list.

use tickwheel_core::Wheel;

#[test]
fn warm_wheel_does_not_allocate() {
    let live = 10_000u64;
    let mut wheel: Wheel<u64> = Wheel::with_capacity(live as usize);
    let mut keys: Vec<_> = (0..live)
        .map(|i| wheel.insert(1 + i * 7 % 60_000, i))
        .collect();
    let mut fired = Vec::with_capacity(live as usize);

    let mut now = 0;
    let mut churn = |rounds: std::ops::Range<u64>| {
        for round in rounds {
            let victim = (round * 7919 % live) as usize;
            if let Some(value) = wheel.remove(keys[victim]) {
                keys[victim] = wheel.insert(now + 1 + round % 60_000, value);
            }
            if round % 10 == 0 {
                let k = keys[(round * 31 % live) as usize];
                wheel.reset(k, now + 5 + round % 1_000);
            }
            if round % 100 == 0 {
                now += 1;
                while let Some((_, value)) = wheel.poll(now) {
                    fired.push(value);
                }
                // Put the fired timers back so the wheel stays full.
                for value in fired.drain(..) {
                    keys[value as usize] = wheel.insert(now + 30_000, value);
                }
            }
        }
    };
    let counts = allocation_counter::measure(|| churn(0..100_000));
    assert_eq!(wheel.len() as u64, live);
    assert_eq!(
        counts.count_total, 0,
        "allocations in the warm loop: {counts:?}"
    );
}

#[test]
fn slab_grows_to_the_live_count_only() {
    let mut wheel: Wheel<u64> = Wheel::new();
    let keys: Vec<_> = (0..1000).map(|i| wheel.insert(i, i)).collect();
    let capacity = wheel.capacity();
    for round in 0..100_000u64 {
        let key = keys[(round % 1000) as usize];
        let value = wheel.remove(key);
        assert!(value.is_some() || round >= 1000);
        wheel.insert(round, round);
        if wheel.len() > 1000 {
            wheel.poll(round);
        }
    }
    assert!(
        wheel.capacity() <= capacity.max(2048),
        "capacity grew to {}",
        wheel.capacity()
    );
}
