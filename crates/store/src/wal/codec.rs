//! The payload of a log record: a batch of [`Change`]s, one after the other. All integers
//! little-endian; a job record is the store's record encoding (`record.rs`, described in
//! `docs/storage-format.md`).
//!
//! | change | bytes |
//! |--------|-------|
//! | `Put` | `1`, id u64, record length u32, record |
//! | `Update` | `5`, id u64, state tag u8 (0 ready, 1 delayed, 2 buried), `until` u64, priority u32, delay u64, reserves, timeouts, releases, buries, kicks (u32 each) |
//! | `Delete` | `3`, id u64 |
//! | `ReserveIds` | `4`, end u64 |
//!
//! Tag `2`, an update without the history (id, state tag, `until`, priority), is what logs
//! written before histories were stored hold. It is still read, with an empty history (no
//! counters, delay 0): such a log is replayed once, by the first start of a newer build after
//! a crash of an older one, and the older build kept no counters to lose.

use tickwheel_queue::{Change, DurableState, JobHistory};

use crate::record::{decode, decode_history, encode_history, encode_into, HISTORY_LEN};

const PUT: u8 = 1;
/// An update from a log written before histories were stored.
const UPDATE_NO_HISTORY: u8 = 2;
const UPDATE: u8 = 5;
const DELETE: u8 = 3;
const RESERVE: u8 = 4;

/// Encodes a batch (which passed [`crate::validate`]).
pub fn encode_changes(batch: &[Change]) -> Vec<u8> {
    let mut v = Vec::new();
    encode_changes_into(batch, &mut v, |_, _| {});
    v
}

/// [`encode_changes`], appended to `v`; `put(i, range)` is told where in `v` the record of
/// `batch[i]`, a put, is (the store writes those same bytes to its tables).
pub(crate) fn encode_changes_into(
    batch: &[Change],
    v: &mut Vec<u8>,
    mut put: impl FnMut(usize, std::ops::Range<usize>),
) {
    v.reserve(64 * batch.len());
    for (i, c) in batch.iter().enumerate() {
        match c {
            Change::Put(r) => {
                v.push(PUT);
                v.extend_from_slice(&r.id.to_le_bytes());
                let at = v.len();
                v.extend_from_slice(&[0; 4]);
                let start = v.len();
                encode_into(r, v);
                let len =
                    u32::try_from(v.len() - start).expect("validate() bounds a record to 16 MiB");
                v[at..start].copy_from_slice(&len.to_le_bytes());
                put(i, start..v.len());
            }
            Change::Update {
                id,
                state,
                priority,
                history,
            } => {
                let (tag, until) = match *state {
                    DurableState::Ready => (0u8, 0u64),
                    DurableState::Delayed { until } => (1, until),
                    DurableState::Buried => (2, 0),
                };
                v.push(UPDATE);
                v.extend_from_slice(&id.to_le_bytes());
                v.push(tag);
                v.extend_from_slice(&until.to_le_bytes());
                v.extend_from_slice(&priority.to_le_bytes());
                encode_history(history, v);
            }
            Change::Delete { id } => {
                v.push(DELETE);
                v.extend_from_slice(&id.to_le_bytes());
            }
            Change::ReserveIds { end } => {
                v.push(RESERVE);
                v.extend_from_slice(&end.to_le_bytes());
            }
        }
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&e| e <= self.bytes.len())
            .ok_or_else(|| format!("change at byte {} is cut off", self.at))?;
        let s = &self.bytes[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }
    fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }
}

/// Decodes a payload; the error describes the first byte that does not decode. Never panics
/// on any input.
///
/// # Errors
///
/// A description of what does not decode (for [`crate::StoreError::Corrupt`]).
pub fn decode_changes(bytes: &[u8]) -> Result<Vec<Change>, String> {
    let mut r = Reader { bytes, at: 0 };
    let mut out = Vec::new();
    while r.at < bytes.len() {
        let start = r.at;
        let change = match r.u8()? {
            PUT => {
                let id = r.u64()?;
                let len = r.u32()?;
                let len = usize::try_from(len).map_err(|_| "record length overflows")?;
                let rec = decode(id, r.take(len)?)?;
                Change::Put(rec)
            }
            tag @ (UPDATE | UPDATE_NO_HISTORY) => {
                let id = r.u64()?;
                let state_tag = r.u8()?;
                let until = r.u64()?;
                let priority = r.u32()?;
                let state = match state_tag {
                    0 => DurableState::Ready,
                    1 => DurableState::Delayed { until },
                    2 => DurableState::Buried,
                    t => return Err(format!("update of job {id}: unknown state tag {t}")),
                };
                let history = if tag == UPDATE {
                    decode_history(r.take(HISTORY_LEN)?).unwrap_or_default()
                } else {
                    JobHistory::default()
                };
                Change::Update {
                    id,
                    state,
                    priority,
                    history,
                }
            }
            DELETE => Change::Delete { id: r.u64()? },
            RESERVE => Change::ReserveIds { end: r.u64()? },
            t => return Err(format!("unknown change tag {t} at byte {start}")),
        };
        out.push(change);
    }
    Ok(out)
}
