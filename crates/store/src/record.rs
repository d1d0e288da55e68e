//! The stored types ([`JobRecord`], [`Mutation`], …) and their byte encoding.
//!
//! # Record encoding (format version 1)
//!
//! The value stored for a job in the `resident` table (key: the id, big-endian) or the `due`
//! table (key: `until_ms` BE ++ id BE):
//!
//! | offset | size | field |
//! |-------:|-----:|-------|
//! | 0 | 1 | record layout, [`RECORD_LAYOUT`] (1) |
//! | 1 | 1 | state: 0 ready, 1 delayed, 2 buried |
//! | 2 | 8 | `until_ms` (LE; 0 unless delayed) |
//! | 10 | 4 | priority (LE) |
//! | 14 | 8 | `ttr_ms` (LE) |
//! | 22 | 8 | `created_ms` (LE) |
//! | 30 | 1 | tube length `T` (≤ [`MAX_TUBE_LEN`]) |
//! | 31 | `T` | tube name, UTF-8 |
//! | 31 + `T` | rest | body |
//!
//! The embedded engine checksums its journal and blocks; this layer only checks structure.

use bytes::Bytes;

use crate::StoreError;

/// A job id. Ids are handed out by the engine, increase, and are never reused.
pub type JobId = u64;

/// Longest tube name, in bytes (the beanstalkd limit).
pub const MAX_TUBE_LEN: usize = 200;
/// Largest job body this store accepts, in bytes (16 MiB; beanstalkd's default is 64 KiB).
pub const MAX_BODY_LEN: usize = 16 << 20;
/// Version of the per-record layout, the first byte of every record.
pub const RECORD_LAYOUT: u8 = 1;

const HEADER_LEN: usize = 31;

/// The state of a job as stored. Reserved jobs are stored as [`StoredState::Ready`]: after a
/// restart every reservation has lapsed, so they are ready again (at-least-once delivery).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoredState {
    /// Waiting for a worker.
    Ready,
    /// Becomes ready at `until_ms` (engine clock).
    Delayed {
        /// Engine-clock millisecond at which the job becomes ready.
        until_ms: u64,
    },
    /// Set aside by a worker until kicked.
    Buried,
}

/// Everything stored about one job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobRecord {
    /// The job's id.
    pub id: JobId,
    /// Its tube, at most [`MAX_TUBE_LEN`] bytes.
    pub tube: String,
    /// Priority, lower is more urgent (beanstalkd).
    pub priority: u32,
    /// Time-to-run lease length in ms.
    pub ttr_ms: u64,
    /// Stored state.
    pub state: StoredState,
    /// Engine clock ms at put.
    pub created_ms: u64,
    /// The job body, at most [`MAX_BODY_LEN`] bytes.
    pub body: Bytes,
}

/// One durable state change, emitted by the engine before it answers a client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mutation {
    /// A new job (or a full replacement of the job with this id).
    Put(JobRecord),
    /// A job changed state or priority. A no-op if the job does not exist.
    Update {
        /// The job.
        id: JobId,
        /// Its new state.
        state: StoredState,
        /// Its new priority.
        priority: u32,
    },
    /// A job is gone. A no-op if the job does not exist.
    Delete {
        /// The job.
        id: JobId,
    },
}

/// What [`Store::recover`](crate::Store::recover) returns: the state the engine starts from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recovered {
    /// Strictly greater than every id ever handed out (stored in a put or reserved with
    /// [`Store::reserve_ids`](crate::Store::reserve_ids)); ids are never reused.
    pub next_id: JobId,
    /// Every ready and buried job, and every delayed job with `until_ms < window_end_ms`,
    /// in id order.
    pub resident: Vec<JobRecord>,
    /// Per tube (sorted by name), the number of delayed jobs with `until_ms >= window_end_ms`;
    /// they stay on disk (see [`Store::delayed_between`](crate::Store::delayed_between)).
    /// Tubes with no such job are left out.
    pub far_delayed: Vec<(String, u64)>,
}

impl JobRecord {
    /// The due time if the job is delayed.
    pub fn until_ms(&self) -> Option<u64> {
        match self.state {
            StoredState::Delayed { until_ms } => Some(until_ms),
            _ => None,
        }
    }
}

impl Mutation {
    /// The job this mutation is about.
    pub fn id(&self) -> JobId {
        match self {
            Mutation::Put(r) => r.id,
            Mutation::Update { id, .. } | Mutation::Delete { id } => *id,
        }
    }
}

/// Checks the limits of every put in `batch`, so a batch is refused whole before anything
/// is written.
///
/// # Errors
///
/// [`StoreError::TooLarge`] for a tube name over [`MAX_TUBE_LEN`] or a body over [`MAX_BODY_LEN`].
pub fn validate(batch: &[Mutation]) -> Result<(), StoreError> {
    for m in batch {
        if let Mutation::Put(r) = m {
            if r.tube.len() > MAX_TUBE_LEN {
                return Err(StoreError::TooLarge {
                    what: "tube name",
                    len: r.tube.len(),
                    max: MAX_TUBE_LEN,
                });
            }
            if r.body.len() > MAX_BODY_LEN {
                return Err(StoreError::TooLarge {
                    what: "job body",
                    len: r.body.len(),
                    max: MAX_BODY_LEN,
                });
            }
        }
    }
    Ok(())
}

/// Encodes `r` (without its id, which is the key). `r` must have passed [`validate`].
pub(crate) fn encode(r: &JobRecord) -> Vec<u8> {
    let (tag, until) = match r.state {
        StoredState::Ready => (0u8, 0u64),
        StoredState::Delayed { until_ms } => (1, until_ms),
        StoredState::Buried => (2, 0),
    };
    let tube_len = u8::try_from(r.tube.len()).expect("tube length is validated to be <= 200");
    let mut v = Vec::with_capacity(HEADER_LEN + r.tube.len() + r.body.len());
    v.push(RECORD_LAYOUT);
    v.push(tag);
    v.extend_from_slice(&until.to_le_bytes());
    v.extend_from_slice(&r.priority.to_le_bytes());
    v.extend_from_slice(&r.ttr_ms.to_le_bytes());
    v.extend_from_slice(&r.created_ms.to_le_bytes());
    v.push(tube_len);
    v.extend_from_slice(r.tube.as_bytes());
    v.extend_from_slice(&r.body);
    v
}

/// Decodes a record stored under `id`. The error is a description for [`StoreError::Corrupt`].
pub(crate) fn decode(id: JobId, v: &[u8]) -> Result<JobRecord, String> {
    if v.len() < HEADER_LEN {
        return Err(format!(
            "job {id}: record of {} bytes is shorter than its header",
            v.len()
        ));
    }
    if v[0] != RECORD_LAYOUT {
        return Err(format!("job {id}: unknown record layout {}", v[0]));
    }
    let u64_at = |at: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&v[at..at + 8]);
        u64::from_le_bytes(b)
    };
    let until_ms = u64_at(2);
    let state = match v[1] {
        0 => StoredState::Ready,
        1 => StoredState::Delayed { until_ms },
        2 => StoredState::Buried,
        t => return Err(format!("job {id}: unknown state tag {t}")),
    };
    let mut p = [0u8; 4];
    p.copy_from_slice(&v[10..14]);
    let tube_len = usize::from(v[30]);
    let tube_end = HEADER_LEN + tube_len;
    if tube_len > MAX_TUBE_LEN || v.len() < tube_end {
        return Err(format!("job {id}: bad tube length {tube_len}"));
    }
    let tube = std::str::from_utf8(&v[HEADER_LEN..tube_end])
        .map_err(|e| format!("job {id}: tube name is not UTF-8: {e}"))?
        .to_owned();
    Ok(JobRecord {
        id,
        tube,
        priority: u32::from_le_bytes(p),
        ttr_ms: u64_at(14),
        state,
        created_ms: u64_at(22),
        body: Bytes::copy_from_slice(&v[tube_end..]),
    })
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

    fn rec(state: StoredState, tube: &str, body: &[u8]) -> JobRecord {
        JobRecord {
            id: 7,
            tube: tube.into(),
            priority: 1024,
            ttr_ms: 60_000,
            state,
            created_ms: 99,
            body: Bytes::copy_from_slice(body),
        }
    }

    #[test]
    fn encode_decode_roundtrip_each_state() {
        for state in [
            StoredState::Ready,
            StoredState::Buried,
            StoredState::Delayed { until_ms: u64::MAX },
        ] {
            let r = rec(state, "emails", b"hello");
            assert_eq!(decode(7, &encode(&r)), Ok(r));
        }
        let long = rec(StoredState::Ready, &"t".repeat(MAX_TUBE_LEN), b"");
        assert_eq!(decode(7, &encode(&long)), Ok(long));
    }

    #[test]
    fn decode_rejects_every_truncation_and_bad_tags() {
        let bytes = encode(&rec(StoredState::Ready, "emails", b""));
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
        bad[0] = 2;
        assert!(decode(1, &bad).expect_err("bad layout").contains("layout"));
    }

    #[test]
    fn validate_refuses_long_tube_and_body() {
        let r = rec(StoredState::Ready, &"t".repeat(MAX_TUBE_LEN + 1), b"");
        assert!(matches!(
            validate(&[Mutation::Put(r)]),
            Err(StoreError::TooLarge {
                what: "tube name",
                len: 201,
                max: MAX_TUBE_LEN
            })
        ));
        let mut r = rec(StoredState::Ready, "t", b"");
        r.body = Bytes::from(vec![0u8; MAX_BODY_LEN + 1]);
        assert!(matches!(
            validate(&[Mutation::Put(r)]),
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
