//! The store's write-ahead log: preallocated, overwritten segments, one `pwrite` and one
//! `fdatasync` per commit (see `docs/decisions/0014-write-ahead-log.md`). Internal: public
//! only for the fuzz target `wal_decode` ([`fuzz_check`]).
//!
//! # Why
//!
//! fjall's journal is preallocated with `set_len` (a sparse file), so every new 4 KiB block of
//! it is a block allocation that the next `fdatasync` must commit through the file system's
//! journal. On the measured disk that costs ~0.1–0.15 ms at p50 and doubles p90 against an
//! `fdatasync` of overwritten blocks. This log writes into blocks written (with zeros) and
//! synced when the segment was created, so its `fdatasync` never touches file metadata; fjall
//! is written without a sync and made durable in the background.
//!
//! # Layout
//!
//! `DIR/wal/<n>.seg`, `n` = 0, 1, …: each a file of zeros written and synced at creation,
//! then overwritten from offset 0 by records, one after the other:
//!
//! | offset | size | field |
//! |-------:|-----:|-------|
//! | 0 | 4 | `len`: payload bytes (u32 LE, ≥ 1) |
//! | 4 | 8 | `sum`: xxh3-64 of bytes 12.. of the record and of `len` (u64 LE) |
//! | 12 | 8 | `seq`: the commit's sequence number (u64 LE, ≥ 1) |
//! | 20 | `len` | payload: the batch of `Change`s ([`codec`]) |
//!
//! # Ground rules
//!
//! - Sequence numbers grow by one per logged commit across the whole log and are never reused
//!   (after a torn tail is dropped, the next number is past every record seen, see
//!   `Replay::max_seen`).
//! - fjall's `meta/wal_seq` is written in the same fjall batch as the commit's changes, so
//!   fjall always holds a prefix of the log's commits and knows which one ends it.
//! - A segment is overwritten (recycled) only once every record in it has `seq ≤` what fjall
//!   has made durable (`Database::persist(SyncAll)`; fjall syncs a journal when it rotates
//!   away from it). So a recycled segment's stale records always have `seq ≤` fjall's applied
//!   sequence, and are never replayed.
//! - Recovery replays the records with `seq >` fjall's applied sequence in sequence order,
//!   stopping at the first gap; within a segment the scan stops at the first record that
//!   does not check (torn, zeros, stale bytes cut in the middle).

pub mod apply;
pub mod codec;
pub mod recycle;

use std::fs::{self, File};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// The log's directory inside a data directory.
pub(crate) const WAL_DIR: &str = "wal";
/// Bytes before a record's payload.
pub const HEADER: usize = 20;
/// Segments the log writes into, in turn.
pub(crate) const SEGMENTS: usize = 2;

/// The checksum of a record: covers `len`, `seq` and the payload.
fn checksum(len: u32, seq_and_payload: &[u8]) -> u64 {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    h.update(&len.to_le_bytes());
    h.update(seq_and_payload);
    h.digest()
}

/// Encodes one record; `None` if `payload` is longer than a record's `len` field can say
/// (`u32::MAX` bytes). The caller commits such a batch without the log, as one larger than a
/// segment (the log's "too large" answer): a group of many large puts can reach it even
/// though each put is bounded.
pub fn encode_record(seq: u64, payload: &[u8]) -> Option<Vec<u8>> {
    u32::try_from(payload.len()).ok()?;
    encode_record_with(seq, |v| v.extend_from_slice(payload))
}

/// [`encode_record`] of the payload `payload` appends to the vector it is given (after the
/// header's room): the payload is written in place, not copied.
pub(crate) fn encode_record_with(seq: u64, payload: impl FnOnce(&mut Vec<u8>)) -> Option<Vec<u8>> {
    let mut v = vec![0; HEADER];
    payload(&mut v);
    let len = u32::try_from(v.len() - HEADER).ok()?;
    v[0..4].copy_from_slice(&len.to_le_bytes());
    v[12..20].copy_from_slice(&seq.to_le_bytes());
    let sum = checksum(len, &v[12..]);
    v[4..12].copy_from_slice(&sum.to_le_bytes());
    Some(v)
}

/// The first version of [`encode_record`], kept to check that the in-place one writes the same
/// bytes.
#[cfg(test)]
pub(crate) fn encode_record_copying(seq: u64, payload: &[u8]) -> Option<Vec<u8>> {
    let len = u32::try_from(payload.len()).ok()?;
    let mut v = Vec::with_capacity(HEADER + payload.len());
    v.extend_from_slice(&len.to_le_bytes());
    v.extend_from_slice(&[0; 8]);
    v.extend_from_slice(&seq.to_le_bytes());
    v.extend_from_slice(payload);
    let sum = checksum(len, &v[12..]);
    v[4..12].copy_from_slice(&sum.to_le_bytes());
    Some(v)
}

/// One record found by [`scan`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    /// Its sequence number.
    pub seq: u64,
    /// Where it starts in the segment.
    pub offset: u64,
    /// Its payload.
    pub payload: Vec<u8>,
}

/// The records of one segment's bytes, from offset 0 up to the first that does not check
/// (too short, a zero or oversized length, a bad checksum, sequence 0). Never panics on any
/// input (fuzzed: `fuzz/fuzz_targets/wal_decode.rs`).
pub fn scan(bytes: &[u8]) -> Vec<Found> {
    let mut out = Vec::new();
    let mut at = 0usize;
    while let Some(head) = bytes.get(at..at + HEADER) {
        let len = u32::from_le_bytes(head[0..4].try_into().expect("4 bytes"));
        let sum = u64::from_le_bytes(head[4..12].try_into().expect("8 bytes"));
        let seq = u64::from_le_bytes(head[12..20].try_into().expect("8 bytes"));
        let Some(end) = usize::try_from(len)
            .ok()
            .and_then(|l| (at + HEADER).checked_add(l))
        else {
            break;
        };
        if len == 0 || seq == 0 || end > bytes.len() {
            break;
        }
        if checksum(len, &bytes[at + 12..end]) != sum {
            break;
        }
        out.push(Found {
            seq,
            offset: at as u64,
            payload: bytes[at + HEADER..end].to_vec(),
        });
        at = end;
    }
    out
}

/// What [`Log::open`] found to replay.
#[derive(Debug, Default)]
pub(crate) struct Replay {
    /// The records after the applied sequence, in order, contiguous from `applied + 1`.
    pub(crate) records: Vec<Found>,
    /// The largest sequence number of any record that checks, in any segment (0 if none):
    /// new records must be numbered past it (a record beyond a gap is never replayed, and must
    /// never be mistaken for a later commit of the same number).
    pub(crate) max_seen: u64,
}

/// Picks the records to replay out of every segment's [`scan`]: `seq > applied`, in sequence
/// order, from `applied + 1` up to the first gap.
pub(crate) fn select(segments: Vec<Vec<Found>>, applied: u64) -> Replay {
    let mut all: Vec<Found> = segments.into_iter().flatten().collect();
    let max_seen = all.iter().map(|f| f.seq).max().unwrap_or(0);
    all.retain(|f| f.seq > applied);
    all.sort_by_key(|f| f.seq);
    let mut records = Vec::new();
    let mut next = applied + 1;
    for f in all {
        if f.seq == next {
            next += 1;
            records.push(f);
        } else if f.seq > next {
            break; // a gap: nothing after it was acknowledged after an intact predecessor
        }
        // f.seq < next: a duplicate number (only after corruption): the first one counts.
    }
    Replay { records, max_seen }
}

struct Segment {
    file: File,
    path: PathBuf,
    len: u64,
    /// The largest sequence number written into it (or found in it at open).
    last_seq: u64,
}

/// The log's files and write position. Used under the store's write lock.
pub(crate) struct Log {
    segments: Vec<Segment>,
    /// The segment written now.
    current: usize,
    /// Where the next record goes in it.
    offset: u64,
    /// Test hook: fail the next write or sync.
    #[cfg(test)]
    pub(crate) fault: Option<LogFault>,
}

/// A failure injected into the log's next append (tests).
#[cfg(test)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LogFault {
    /// The `pwrite` fails: nothing written.
    Write,
    /// The `pwrite` succeeds, the `fdatasync` fails.
    Sync,
}

impl std::fmt::Debug for Log {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Log")
            .field("segments", &self.segments.len())
            .field("current", &self.current)
            .field("offset", &self.offset)
            .finish()
    }
}

/// What [`Log::append`] needs before it can write a record.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Room {
    /// The record fits where the log is.
    Here,
    /// The record goes to the start of the next segment, which may be overwritten once fjall
    /// has made every sequence up to this one durable.
    NextSegment { needs_durable: u64 },
    /// The record is larger than a segment can hold: commit it some other way.
    TooLarge,
}

fn segment_path(dir: &Path, n: usize) -> PathBuf {
    dir.join(format!("{n}.seg"))
}

/// Syncs a directory (after creating or renaming a file in it).
pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

impl Log {
    /// Reads every segment of the log in `wal_dir` (none if it does not exist). With
    /// `create`, makes the log writable: creates the directory and any missing segment of
    /// `segment_bytes` (zeros, written and synced). Returns the log and the records after
    /// `applied`, to replay; the log then writes from the start of segment 0, so replay them
    /// (and make them durable in fjall) before the first append.
    pub(crate) fn open(
        wal_dir: &Path,
        segment_bytes: u64,
        applied: u64,
        create: bool,
    ) -> io::Result<(Option<Log>, Replay)> {
        // Segment `n` (or `None` where it is missing), as found.
        let mut found_segments: Vec<Option<Segment>> = Vec::new();
        let mut scans = Vec::new();
        let exists = wal_dir.try_exists()?;
        for n in 0..SEGMENTS {
            let path = segment_path(wal_dir, n);
            let bytes = match fs::read(&path) {
                Ok(b) => b,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    found_segments.push(None);
                    continue;
                }
                Err(e) => return Err(e),
            };
            let found = scan(&bytes);
            let last_seq = found.iter().map(|f| f.seq).max().unwrap_or(0);
            scans.push(found);
            let file = if create {
                fs::OpenOptions::new().read(true).write(true).open(&path)?
            } else {
                File::open(&path)?
            };
            found_segments.push(Some(Segment {
                file,
                path,
                len: bytes.len() as u64,
                last_seq,
            }));
        }
        let replay = select(scans, applied);
        if !create {
            return Ok((None, replay));
        }
        if !exists {
            fs::create_dir_all(wal_dir)?;
            if let Some(parent) = wal_dir.parent() {
                sync_dir(parent)?;
            }
        }
        let mut segments = Vec::with_capacity(SEGMENTS);
        for (n, seg) in found_segments.into_iter().enumerate() {
            segments.push(match seg {
                Some(seg) => seg,
                None => create_segment(wal_dir, n, segment_bytes)?,
            });
        }
        Ok((
            Some(Log {
                segments,
                current: 0,
                offset: 0,
                #[cfg(test)]
                fault: None,
            }),
            replay,
        ))
    }

    /// Where a record of `len` bytes (header included) would go.
    pub(crate) fn room(&self, len: usize) -> Room {
        let len = len as u64;
        let seg = &self.segments[self.current];
        if self.offset + len <= seg.len {
            return Room::Here;
        }
        let next = &self.segments[(self.current + 1) % self.segments.len()];
        if len > next.len {
            return Room::TooLarge;
        }
        Room::NextSegment {
            needs_durable: next.last_seq,
        }
    }

    /// Writes `record` (from [`encode_record`]) with sequence `seq` and syncs it. The caller
    /// asked [`Log::room`] first and, for [`Room::NextSegment`], made `needs_durable`
    /// durable in fjall. Returns whether the log moved to the next segment.
    ///
    /// # Errors
    ///
    /// The write's or the sync's I/O error: the record may or may not be in the log.
    pub(crate) fn append(&mut self, seq: u64, record: &[u8]) -> io::Result<bool> {
        let switched = match self.room(record.len()) {
            Room::Here => false,
            Room::NextSegment { .. } => {
                self.current = (self.current + 1) % self.segments.len();
                self.offset = 0;
                true
            }
            Room::TooLarge => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "record larger than a log segment",
                ))
            }
        };
        let seg = &mut self.segments[self.current];
        // Counted as written before the write: a failed write may have left part of it.
        seg.last_seq = seg.last_seq.max(seq);
        #[cfg(test)]
        if self.fault == Some(LogFault::Write) {
            return Err(io::Error::from_raw_os_error(5));
        }
        seg.file.write_all_at(record, self.offset)?;
        self.offset += record.len() as u64;
        #[cfg(test)]
        if self.fault == Some(LogFault::Sync) {
            return Err(io::Error::from_raw_os_error(5));
        }
        seg.file.sync_data()?;
        Ok(switched)
    }

    /// The path of the segment written now (for error messages).
    pub(crate) fn current_path(&self) -> &Path {
        &self.segments[self.current].path
    }

    /// Bytes of the log's files.
    pub(crate) fn bytes(&self) -> u64 {
        self.segments.iter().map(|s| s.len).sum()
    }

    /// The segment written now and the offset of the next record (tests).
    #[cfg(test)]
    pub(crate) fn position(&self) -> (PathBuf, u64) {
        (self.segments[self.current].path.clone(), self.offset)
    }
}

/// Creates segment `n`: `bytes` zeros written (not `set_len`: the blocks must be allocated
/// and written before any record's `fdatasync`), synced, then renamed into place.
fn create_segment(dir: &Path, n: usize, bytes: u64) -> io::Result<Segment> {
    let path = segment_path(dir, n);
    let tmp = dir.join(format!("{n}.seg.new"));
    let file = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&tmp)?;
    let chunk = vec![0u8; 1 << 20];
    let mut at = 0u64;
    while at < bytes {
        let n = chunk
            .len()
            .min(usize::try_from(bytes - at).unwrap_or(usize::MAX));
        file.write_all_at(&chunk[..n], at)?;
        at += n as u64;
    }
    file.sync_all()?;
    fs::rename(&tmp, &path)?;
    sync_dir(dir)?;
    Ok(Segment {
        file,
        path,
        len: bytes,
        last_seq: 0,
    })
}

/// The checks of the fuzz target `fuzz/fuzz_targets/wal_decode.rs`, here so its seeds also
/// run in the crate's tests. For any bytes: [`scan`] never panics, and every record it finds
/// encodes back to the bytes it was found in; [`codec::decode_changes`] of the bytes (and of
/// every found payload) never panics, and a batch it accepts encodes and decodes to itself.
///
/// # Errors
///
/// A description of the first check that failed.
pub fn fuzz_check(data: &[u8]) -> Result<(), String> {
    for found in scan(data) {
        let again = encode_record(found.seq, &found.payload)
            .ok_or_else(|| format!("record {} does not re-encode", found.seq))?;
        let at = usize::try_from(found.offset).map_err(|e| e.to_string())?;
        if data.get(at..at + again.len()) != Some(&again[..]) {
            return Err(format!("record {} at {at} does not re-encode", found.seq));
        }
        check_payload(&found.payload)?;
    }
    check_payload(data)
}

fn check_payload(bytes: &[u8]) -> Result<(), String> {
    if let Ok(batch) = codec::decode_changes(bytes) {
        let again = codec::decode_changes(&codec::encode_changes(&batch));
        if again.as_ref() != Ok(&batch) {
            return Err(format!("{batch:?} decodes back as {again:?}"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
