//! The byte encoding of the queue's [`JobRecord`]s, and what [`Store::recover`] returns.
//!
//! The store speaks the engine's vocabulary ([`tickwheel_queue::Change`],
//! [`tickwheel_queue::JobRecord`], [`TubeName`]); this module only maps it to bytes.
//!
//! # Record encoding (layouts 1, 2 and 3)
//!
//! The value stored for a job in the `resident` table (key: the id, big-endian) or the `due`
//! table (key: `until` BE ++ id BE):
//!
//! | offset | size | field |
//! |-------:|-----:|-------|
//! | 0 | 1 | record layout: 1, or [`RECORD_LAYOUT`] (2) for a job with an idempotency key |
//! | 1 | 1 | state: 0 ready, 1 delayed, 2 buried |
//! | 2 | 8 | `until` (LE, engine-clock ms; 0 unless delayed) |
//! | 10 | 4 | priority (LE) |
//! | 14 | 8 | `ttr` (LE, ms) |
//! | 22 | 8 | `created` (LE, engine-clock ms) |
//! | 30 | 1 | tube length `T` (≤ [`MAX_TUBE_NAME`]) |
//! | 31 | `T` | tube name: a valid [`TubeName`], or the record is corrupt |
//! | 31 + `T` | rest | body (layout 1) |
//!
//! Layout 2 (a job put with an idempotency key, HTTP API) inserts the key before the body:
//!
//! | offset | size | field |
//! |-------:|-----:|-------|
//! | 31 + `T` | 1 | key length `K` (1 ..= [`MAX_IDEMPOTENCY_KEY`]) |
//! | 32 + `T` | `K` | key, UTF-8 |
//! | 32 + `T` + `K` | rest | body |
//!
//! Layout 3 adds the job's [`JobHistory`] (what `stats-job` shows of its past: the delay
//! last given and five counters) after the tube name, and always has a key length byte:
//!
//! | offset | size | field |
//! |-------:|-----:|-------|
//! | 31 + `T` | 8 | delay given at put or at the last release (LE, ms) |
//! | 39 + `T` | 4 × 5 | reserves, timeouts, releases, buries, kicks (each u32 LE) |
//! | 59 + `T` | 1 | key length `K` (0: no key, else 1 ..= [`MAX_IDEMPOTENCY_KEY`]) |
//! | 60 + `T` | `K` | key, UTF-8 |
//! | 60 + `T` + `K` | rest | body |
//!
//! A record whose history is the one layouts 1 and 2 imply (every counter 0, and a delay of
//! `until − created` for a delayed job, 0 otherwise: [`implied_history`]) is still written in
//! layout 1 or 2, byte for byte as before: every job as it was put, so data directories
//! written before keys or histories existed open unchanged, and a store whose jobs were never
//! reserved, released, buried or kicked still opens in an older server. Reading layout 1 or 2
//! gives that implied history. Delays were stored in milliseconds from the start (`until`),
//! so millisecond delays needed no new field.
//!
//! The embedded engine checksums its journal and blocks; this layer only checks structure.
//!
//! [`Store::recover`]: crate::Store::recover

use bytes::Bytes;
use tickwheel_queue::{
    Change, DurableState, JobHistory, JobId, JobRecord, TubeName, MAX_IDEMPOTENCY_KEY,
    MAX_TUBE_NAME,
};

use crate::StoreError;

/// Largest job body this store accepts, in bytes (16 MiB; beanstalkd's default is 64 KiB).
pub const MAX_BODY_LEN: usize = 16 << 20;
/// The newest per-record layout, the first byte of a record (layouts 1 and 2 are still
/// written for jobs whose history they imply, and read).
pub const RECORD_LAYOUT: u8 = 3;
const LAYOUT_V1: u8 = 1;
const LAYOUT_KEYED: u8 = 2;

const HEADER_LEN: usize = 31;
/// A history's bytes (in layout 3 and in a log's `Update`): the delay (u64) and the five
/// counters (u32 each), little-endian.
pub(crate) const HISTORY_LEN: usize = 8 + 4 * 5;

/// Appends `h`'s [`HISTORY_LEN`] bytes to `v`.
pub(crate) fn encode_history(h: &JobHistory, v: &mut Vec<u8>) {
    v.extend_from_slice(&h.delay.to_le_bytes());
    for n in h.counters() {
        v.extend_from_slice(&n.to_le_bytes());
    }
}

/// The history in `bytes`; `None` unless they are [`HISTORY_LEN`] long.
pub(crate) fn decode_history(bytes: &[u8]) -> Option<JobHistory> {
    let (delay, counters) = bytes.split_first_chunk::<8>()?;
    if counters.len() != HISTORY_LEN - 8 {
        return None;
    }
    let mut words = counters
        .chunks_exact(4)
        .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]));
    Some(JobHistory::from_counters(
        u64::from_le_bytes(*delay),
        std::array::from_fn(|_| words.next().unwrap_or(0)),
    ))
}

/// The history a record in layout 1 or 2 stands for: no counters, and the delay its put
/// gave (`until − created` for a delayed job).
#[must_use]
pub fn implied_history(state: DurableState, created: u64) -> JobHistory {
    JobHistory {
        delay: match state {
            DurableState::Delayed { until } => until.saturating_sub(created),
            DurableState::Ready | DurableState::Buried => 0,
        },
        ..JobHistory::default()
    }
}

/// What [`Store::recover`](crate::Store::recover) returns: the state the engine starts from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recovered {
    /// Strictly greater than every id ever handed out (stored in a put or reserved with
    /// [`Change::ReserveIds`]); ids are never reused.
    pub next_id: JobId,
    /// Every ready and buried job, and every delayed job with `until < window_end_ms`,
    /// in id order.
    pub resident: Vec<JobRecord>,
    /// Per tube (sorted by name), the number of delayed jobs with `until >= window_end_ms`;
    /// they stay on disk (see [`Store::delayed_between`](crate::Store::delayed_between)).
    /// Tubes with no such job are left out.
    pub far_delayed: Vec<(TubeName, u64)>,
}

/// The due time of a record, if it is delayed.
pub(crate) fn until(r: &JobRecord) -> Option<u64> {
    match r.state {
        DurableState::Delayed { until } => Some(until),
        DurableState::Ready | DurableState::Buried => None,
    }
}

/// The job a change is about; `None` for [`Change::ReserveIds`].
pub(crate) fn change_id(c: &Change) -> Option<JobId> {
    match c {
        Change::Put(r) => Some(r.id),
        Change::Update { id, .. } | Change::Delete { id } => Some(*id),
        Change::ReserveIds { .. } => None,
    }
}

/// The largest id reservation in a batch.
pub(crate) fn ids_reserved(batch: &[Change]) -> Option<JobId> {
    batch
        .iter()
        .filter_map(|c| match c {
            Change::ReserveIds { end } => Some(*end),
            _ => None,
        })
        .max()
}

/// Checks the limits of every put in `batch`, so a batch is refused whole before anything
/// is written.
///
/// # Errors
///
/// [`StoreError::TooLarge`] for a body over [`MAX_BODY_LEN`], or an idempotency key empty or
/// over [`MAX_IDEMPOTENCY_KEY`] bytes. (A tube name is a [`TubeName`], valid by construction.)
pub fn validate(batch: &[Change]) -> Result<(), StoreError> {
    for c in batch {
        if let Change::Put(r) = c {
            if r.body.len() > MAX_BODY_LEN {
                return Err(StoreError::TooLarge {
                    what: "job body",
                    len: r.body.len(),
                    max: MAX_BODY_LEN,
                });
            }
            if let Some(key) = &r.idempotency_key {
                if key.is_empty() || key.len() > MAX_IDEMPOTENCY_KEY {
                    return Err(StoreError::TooLarge {
                        what: "idempotency key (1 to 200 bytes)",
                        len: key.len(),
                        max: MAX_IDEMPOTENCY_KEY,
                    });
                }
            }
        }
    }
    Ok(())
}

/// Encodes `r` (without its id, which is the key). `r` must have passed [`validate`].
pub(crate) fn encode(r: &JobRecord) -> Vec<u8> {
    let mut v = Vec::new();
    encode_into(r, &mut v);
    v
}

/// [`encode`], appended to `v`.
pub(crate) fn encode_into(r: &JobRecord, v: &mut Vec<u8>) {
    let (tag, until) = match r.state {
        DurableState::Ready => (0u8, 0u64),
        DurableState::Delayed { until } => (1, until),
        DurableState::Buried => (2, 0),
    };
    let tube = r.tube.as_str();
    let tube_len = u8::try_from(tube.len()).expect("a TubeName is at most 200 bytes");
    let key = r.idempotency_key.as_deref();
    let layout = if r.history != implied_history(r.state, r.created) {
        RECORD_LAYOUT
    } else if key.is_some() {
        LAYOUT_KEYED
    } else {
        LAYOUT_V1
    };
    v.reserve(HEADER_LEN + tube.len() + HISTORY_LEN + 1 + key.map_or(0, str::len) + r.body.len());
    v.push(layout);
    v.push(tag);
    v.extend_from_slice(&until.to_le_bytes());
    v.extend_from_slice(&r.priority.to_le_bytes());
    v.extend_from_slice(&r.ttr.to_le_bytes());
    v.extend_from_slice(&r.created.to_le_bytes());
    v.push(tube_len);
    v.extend_from_slice(tube.as_bytes());
    if layout == RECORD_LAYOUT {
        encode_history(&r.history, v);
    }
    if layout != LAYOUT_V1 {
        let key = key.unwrap_or("");
        let key_len = u8::try_from(key.len()).expect("validate() bounds the key to 200 bytes");
        v.push(key_len);
        v.extend_from_slice(key.as_bytes());
    }
    v.extend_from_slice(&r.body);
}

/// Decodes a record stored under `id`. The error is a description for [`StoreError::Corrupt`].
pub(crate) fn decode(id: JobId, v: &[u8]) -> Result<JobRecord, String> {
    if v.len() < HEADER_LEN {
        return Err(format!(
            "job {id}: record of {} bytes is shorter than its header",
            v.len()
        ));
    }
    let layout = v[0];
    if !matches!(layout, LAYOUT_V1 | LAYOUT_KEYED | RECORD_LAYOUT) {
        return Err(format!("job {id}: unknown record layout {layout}"));
    }
    let u64_at = |at: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&v[at..at + 8]);
        u64::from_le_bytes(b)
    };
    let until = u64_at(2);
    let state = match v[1] {
        0 => DurableState::Ready,
        1 => DurableState::Delayed { until },
        2 => DurableState::Buried,
        t => return Err(format!("job {id}: unknown state tag {t}")),
    };
    let mut p = [0u8; 4];
    p.copy_from_slice(&v[10..14]);
    let tube_len = usize::from(v[30]);
    let tube_end = HEADER_LEN + tube_len;
    if tube_len > MAX_TUBE_NAME || v.len() < tube_end {
        return Err(format!("job {id}: bad tube length {tube_len}"));
    }
    let tube = std::str::from_utf8(&v[HEADER_LEN..tube_end])
        .map_err(|e| format!("job {id}: tube name is not UTF-8: {e}"))?;
    let tube = tube_name(tube).map_err(|e| format!("job {id}: {e}"))?;
    let created = u64_at(22);
    let (history, key_at) = if layout == RECORD_LAYOUT {
        let end = tube_end + HISTORY_LEN;
        let history = v
            .get(tube_end..end)
            .and_then(decode_history)
            .ok_or_else(|| format!("job {id}: record ends before its history"))?;
        (history, end)
    } else {
        (implied_history(state, created), tube_end)
    };
    let (idempotency_key, body_at) = if layout == LAYOUT_V1 {
        (None, key_at)
    } else {
        let key_len = usize::from(
            *v.get(key_at)
                .ok_or_else(|| format!("job {id}: record ends before its key length"))?,
        );
        let key_end = key_at + 1 + key_len;
        // Layout 2 exists for keys: its key is never empty; layout 3 says "none" with 0.
        let empty_ok = layout == RECORD_LAYOUT;
        if (key_len == 0 && !empty_ok) || key_len > MAX_IDEMPOTENCY_KEY || v.len() < key_end {
            return Err(format!("job {id}: bad idempotency key length {key_len}"));
        }
        let key = std::str::from_utf8(&v[key_at + 1..key_end])
            .map_err(|e| format!("job {id}: idempotency key is not UTF-8: {e}"))?;
        ((key_len > 0).then(|| key.to_owned()), key_end)
    };
    Ok(JobRecord {
        id,
        tube,
        priority: u32::from_le_bytes(p),
        ttr: u64_at(14),
        state,
        created,
        body: Bytes::copy_from_slice(&v[body_at..]),
        idempotency_key,
        history,
    })
}

/// A stored tube name, checked: an invalid one is corruption, never renamed.
pub(crate) fn tube_name(name: &str) -> Result<TubeName, String> {
    TubeName::new(name).map_err(|_| format!("stored tube name {name:?} is not a valid tube name"))
}

/// First byte of a locator (the value in the `jobs` table) for a ready or buried job, whose
/// record is in `resident`.
const LOCATOR_RESIDENT: u8 = b'R';
/// First byte of a locator for a delayed job; `until_ms` (u64 LE) follows, and the record is in
/// `due` under `(until_ms, id)`.
const LOCATOR_DUE: u8 = b'D';

/// The `jobs` table value: where the job's record is.
pub(crate) fn encode_locator(until_ms: Option<u64>) -> Vec<u8> {
    match until_ms {
        None => vec![LOCATOR_RESIDENT],
        Some(u) => {
            let mut v = vec![LOCATOR_DUE];
            v.extend_from_slice(&u.to_le_bytes());
            v
        }
    }
}

/// `Some(None)`: in `resident`; `Some(Some(until_ms))`: in `due`; `None`: not a locator.
pub(crate) fn decode_locator(v: &[u8]) -> Option<Option<u64>> {
    match v {
        [LOCATOR_RESIDENT] => Some(None),
        [LOCATOR_DUE, rest @ ..] => Some(Some(u64::from_le_bytes(rest.try_into().ok()?))),
        _ => None,
    }
}

/// Key of a job in the `jobs` and `resident` tables: the id, big-endian, so keys sort by id.
pub(crate) fn id_key(id: JobId) -> [u8; 8] {
    id.to_be_bytes()
}

/// Key of a delayed job in the `due` index: `until_ms` BE then id BE, so keys sort by
/// (due time, id).
pub(crate) fn due_key(until_ms: u64, id: JobId) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(&until_ms.to_be_bytes());
    k[8..].copy_from_slice(&id.to_be_bytes());
    k
}

/// Splits a `due` key; `None` if it is not 16 bytes.
pub(crate) fn split_due_key(k: &[u8]) -> Option<(u64, JobId)> {
    let until: [u8; 8] = k.get(..8)?.try_into().ok()?;
    let id: [u8; 8] = k.get(8..16)?.try_into().ok()?;
    (k.len() == 16).then(|| (u64::from_be_bytes(until), u64::from_be_bytes(id)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(state: DurableState, tube: &str, body: &[u8]) -> JobRecord {
        JobRecord {
            id: 7,
            tube: TubeName::new(tube).expect("valid tube name"),
            priority: 1024,
            ttr: 60_000,
            state,
            created: 99,
            body: Bytes::copy_from_slice(body),
            idempotency_key: None,
            history: implied_history(state, 99),
        }
    }

    fn keyed(key: &str) -> JobRecord {
        JobRecord {
            idempotency_key: Some(key.to_owned()),
            ..rec(DurableState::Delayed { until: 1_500 }, "emails", b"body")
        }
    }

    mod prop {
        use super::*;
        use proptest::prelude::*;

        fn record() -> impl Strategy<Value = JobRecord> {
            (
                any::<u64>(),
                "[a-z][a-z0-9.()-]{0,30}",
                any::<u32>(),
                any::<u64>(),
                prop_oneof![
                    Just(DurableState::Ready),
                    Just(DurableState::Buried),
                    any::<u64>().prop_map(|until| DurableState::Delayed { until }),
                ],
                any::<u64>(),
                proptest::collection::vec(any::<u8>(), 0..64),
                proptest::option::of("[^\\x00-\\x1f]{1,50}"),
                // Half the records keep the history their state implies (layouts 1 and 2).
                proptest::option::of((any::<u64>(), any::<[u32; 5]>())),
            )
                .prop_map(
                    |(id, tube, priority, ttr, state, created, body, key, history)| {
                        let history = match history {
                            Some((delay, counters)) => JobHistory::from_counters(delay, counters),
                            None => implied_history(state, created),
                        };
                        JobRecord {
                            id,
                            tube: TubeName::new(&tube).expect("the regex makes valid names"),
                            priority,
                            ttr,
                            state,
                            created,
                            body: Bytes::from(body),
                            idempotency_key: key,
                            history,
                        }
                    },
                )
        }

        proptest! {
            #[test]
            fn every_record_roundtrips(r in record()) {
                prop_assert_eq!(decode(r.id, &encode(&r)), Ok(r));
            }

            /// The decoder is handed bytes from disk: any bytes give a record or an error,
            /// never a panic; and a record it accepts survives an encode and decode unchanged
            /// (not byte for byte: `until` of a non-delayed record is not kept).
            #[test]
            fn any_bytes_decode_or_fail_cleanly(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
                if let Ok(r) = decode(1, &bytes) {
                    prop_assert_eq!(decode(1, &encode(&r)), Ok(r));
                }
            }

            /// Mutating one byte of a valid keyed record never panics the decoder.
            #[test]
            fn a_flipped_byte_never_panics(r in record(), at in any::<usize>(), to in any::<u8>()) {
                let mut bytes = encode(&r);
                let at = at % bytes.len();
                bytes[at] = to;
                let _ = decode(r.id, &bytes);
            }
        }
    }

    #[test]
    fn a_keyless_record_keeps_layout_1_byte_for_byte() {
        let bytes = encode(&rec(DurableState::Ready, "emails", b"hi"));
        assert_eq!(bytes[0], 1);
        assert_eq!(bytes.len(), HEADER_LEN + "emails".len() + 2);
        assert_eq!(&bytes[HEADER_LEN + 6..], b"hi");
    }

    #[test]
    fn a_keyed_record_roundtrips_in_layout_2() {
        for key in ["k", "order-42/retry:1 é", &"x".repeat(MAX_IDEMPOTENCY_KEY)] {
            let r = keyed(key);
            let bytes = encode(&r);
            assert_eq!(bytes[0], LAYOUT_KEYED);
            assert_eq!(decode(7, &bytes), Ok(r));
        }
        // Every truncation of a keyed record is refused, as for layout 1.
        let bytes = encode(&keyed("abc"));
        for len in 0..HEADER_LEN + "emails".len() + 4 {
            assert!(
                decode(7, &bytes[..len]).is_err(),
                "prefix of {len} bytes decoded"
            );
        }
    }

    /// A job that was reserved, released, buried or kicked, or whose delay is not its put's,
    /// is written in layout 3; with or without a key it reads back whole, and every
    /// truncation is refused.
    #[test]
    fn a_record_with_a_history_roundtrips_in_layout_3() {
        let history = JobHistory {
            delay: 5_000,
            reserves: 7,
            timeouts: 1,
            releases: 6,
            buries: 2,
            kicks: u32::MAX,
        };
        for r in [
            JobRecord {
                history,
                ..rec(DurableState::Buried, "emails", b"body")
            },
            JobRecord {
                history,
                ..keyed("order-42")
            },
        ] {
            let bytes = encode(&r);
            assert_eq!(bytes[0], RECORD_LAYOUT);
            assert_eq!(decode(7, &bytes), Ok(r));
            for len in 0..bytes.len() - 4 {
                assert!(
                    decode(7, &bytes[..len]).is_err(),
                    "prefix of {len} bytes decoded"
                );
            }
        }
        // A delayed job released with a new delay: the delay is not the one `until` implies.
        let released = JobRecord {
            history: JobHistory {
                delay: 10,
                releases: 1,
                reserves: 1,
                ..JobHistory::default()
            },
            ..rec(DurableState::Delayed { until: 5_000 }, "t", b"")
        };
        assert_eq!(encode(&released)[0], RECORD_LAYOUT);
        assert_eq!(decode(7, &encode(&released)), Ok(released));
        // As put: the history layouts 1 and 2 imply, so layout 1.
        let put = rec(DurableState::Delayed { until: 5_099 }, "t", b"");
        assert_eq!(put.history.delay, 5_000);
        assert_eq!(encode(&put)[0], LAYOUT_V1);
    }

    #[test]
    fn a_bad_key_is_corruption_or_refused() {
        let mut bytes = encode(&keyed("abc"));
        let at = HEADER_LEN + "emails".len();
        bytes[at] = 0;
        assert!(decode(7, &bytes)
            .expect_err("empty key")
            .contains("key length"));
        let mut bytes = encode(&keyed("abc"));
        bytes[at + 1] = 0xff;
        assert!(decode(7, &bytes).expect_err("bad utf-8").contains("UTF-8"));
        for key in [String::new(), "k".repeat(MAX_IDEMPOTENCY_KEY + 1)] {
            let r = JobRecord {
                idempotency_key: Some(key),
                ..rec(DurableState::Ready, "t", b"")
            };
            assert!(validate(&[Change::Put(r)]).is_err());
        }
    }

    #[test]
    fn encode_decode_roundtrip_each_state() {
        for state in [
            DurableState::Ready,
            DurableState::Buried,
            DurableState::Delayed { until: u64::MAX },
        ] {
            let r = rec(state, "emails", b"hello");
            assert_eq!(decode(7, &encode(&r)), Ok(r));
        }
        let long = rec(DurableState::Ready, &"t".repeat(MAX_TUBE_NAME), b"");
        assert_eq!(decode(7, &encode(&long)), Ok(long));
    }

    #[test]
    fn decode_rejects_every_truncation_and_bad_tags() {
        let bytes = encode(&rec(DurableState::Ready, "emails", b""));
        for len in 0..bytes.len() {
            assert!(
                decode(1, &bytes[..len]).is_err(),
                "prefix of {len} bytes decoded"
            );
        }
        let mut bad = bytes.clone();
        bad[1] = 9;
        assert!(decode(1, &bad).expect_err("bad tag").contains("state tag"));
        let mut bad = bytes;
        bad[0] = 4;
        assert!(decode(1, &bad).expect_err("bad layout").contains("layout"));
    }

    #[test]
    fn an_invalid_stored_tube_name_is_corruption() {
        let mut bytes = encode(&rec(DurableState::Ready, "emails", b"x"));
        bytes[HEADER_LEN] = b'-'; // "-mails": not a tube name
        let err = decode(7, &bytes).expect_err("invalid tube name decoded");
        assert!(err.contains("not a valid tube name"), "{err}");
    }

    #[test]
    fn validate_refuses_a_long_body() {
        let mut r = rec(DurableState::Ready, "t", b"");
        r.body = Bytes::from(vec![0u8; MAX_BODY_LEN + 1]);
        assert!(matches!(
            validate(&[Change::Put(r)]),
            Err(StoreError::TooLarge {
                what: "job body",
                ..
            })
        ));
    }

    #[test]
    fn locators_roundtrip_and_reject_garbage() {
        assert_eq!(decode_locator(&encode_locator(None)), Some(None));
        assert_eq!(
            decode_locator(&encode_locator(Some(u64::MAX))),
            Some(Some(u64::MAX))
        );
        assert_eq!(decode_locator(b""), None);
        assert_eq!(decode_locator(b"D1234"), None);
        assert_eq!(decode_locator(b"X"), None);
    }

    #[test]
    fn due_keys_sort_by_time_then_id() {
        assert!(due_key(1, u64::MAX) < due_key(2, 0));
        assert!(due_key(5, 1) < due_key(5, 2));
        assert_eq!(split_due_key(&due_key(5, 9)), Some((5, 9)));
        assert_eq!(split_due_key(&[0u8; 15]), None);
    }
}
