//! beanstalkd's data directory: its jobs are taken over, and beanstalkd is kept out while
//! tickwheel runs.
//!
//! A user swaps the beanstalkd binary for `tickwheel-server` and keeps `-b DIR`. DIR then
//! holds beanstalkd's binlog (`binlog.N` files) with every job beanstalkd acknowledged;
//! starting without them would lose those jobs silently. [`import`] reads the binlog as
//! beanstalkd 1.10–1.13 replays it at start-up, commits every live job into the store under its
//! own id (reserved jobs come back ready, as in beanstalkd), keeps new ids above them, and then
//! moves the files into a subdirectory, where no beanstalkd started on DIR later replays them
//! again (it would bring back jobs deleted since).
//!
//! [`BeanstalkdLock`] takes the lock beanstalkd takes on `DIR/lock` (a POSIX `fcntl` lock on
//! the whole file): a data directory a running beanstalkd uses is refused (exit status 10 in
//! the server, as beanstalkd's own), and a beanstalkd started on DIR while tickwheel runs exits
//! with 10 too.
//!
//! # The binlog (format 7)
//!
//! Each file starts with the format version (`i32`, 7). Then records, until the file ends or
//! a record's job id is 0 (beanstalkd preallocates files with zeros):
//!
//! | size | field |
//! |-----:|-------|
//! | 4 | tube name length `T` (`i32`, < 201; 0 in a short record) |
//! | `T` | tube name |
//! | 80 | the job (`Jobrec`, native layout of x86-64 and other LP64 targets: little-endian, padded) |
//! | `body_size` | body with its CRLF (only after a tube name: a *full* record) |
//!
//! `Jobrec`: id `u64` @0, pri `u32` @8, delay `i64` @16 (ns), ttr `i64` @24 (ns), body size
//! `i32` @32, created `i64` @40 (ns since the epoch), deadline `i64` @48 (ns since the epoch),
//! five counters `u32` @56..76 (reserves, timeouts, releases, buries, kicks), state `u8` @76
//! (0 deleted, 1 ready, 2 reserved, 3 buried, 4 delayed). A short record for a job no earlier
//! record created is skipped; a deleted state drops the job. Like beanstalkd, a full record of
//! a deleted job carries no body. Each record, full or short, replaces the job's state,
//! priority, delay and counters, which the import keeps (the job's [`JobHistory`]), so
//! `stats-job` answers after the takeover as beanstalkd's did after a restart.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use tickwheel_queue::{Change, DurableState, JobHistory, JobId, JobRecord, TubeName};

use crate::{Store, StoreError, MAX_BODY_LEN};

/// The binlog format beanstalkd 1.10 to 1.13 write.
pub const BINLOG_VERSION: i32 = 7;
/// Where [`import`] moves the binlog files it read (inside the data directory).
pub const IMPORTED_DIR: &str = "beanstalkd-binlog-imported";
/// beanstalkd's lock file in its data directory.
pub const BEANSTALKD_LOCK_FILE: &str = "lock";

const JOBREC_LEN: usize = 80;
const MAX_TUBE_NAME_LEN: usize = 201; // beanstalkd's, with its terminating NUL

/// Jobs replayed from binlog files, in file order.
#[derive(Debug, Default)]
pub struct Replay {
    jobs: BTreeMap<JobId, JobRecord>,
    max_id: JobId,
}

impl Replay {
    /// Replays one file (its whole content, version included) as beanstalkd does at start-up.
    ///
    /// # Errors
    ///
    /// The byte offset and what is wrong: an unsupported format version, a truncated record,
    /// a bad tube name, state or size. Never panics, whatever the bytes.
    pub fn file(&mut self, bytes: &[u8]) -> Result<(), (usize, String)> {
        if bytes.len() < 4 {
            return Ok(()); // an empty file, as beanstalkd leaves one it just created
        }
        let version = i32::from_le_bytes(word(bytes, 0));
        if version != BINLOG_VERSION {
            return Err((
                0,
                format!(
                    "binlog format version {version}; this build reads version {BINLOG_VERSION} (beanstalkd 1.10 to 1.13)"
                ),
            ));
        }
        let mut at = 4;
        while at + 4 <= bytes.len() {
            let start = at;
            let name_len = i32::from_le_bytes(word(bytes, at));
            at += 4;
            let name_len = usize::try_from(name_len)
                .ok()
                .filter(|&n| n < MAX_TUBE_NAME_LEN)
                .ok_or_else(|| (start, format!("tube name length {name_len}")))?;
            let name = bytes
                .get(at..at + name_len)
                .ok_or((start, "truncated tube name".to_owned()))?;
            at += name_len;
            let Some(rec) = bytes.get(at..at + JOBREC_LEN) else {
                if bytes[start..].iter().all(|&b| b == 0) {
                    break; // the preallocated tail
                }
                return Err((start, "truncated job record".to_owned()));
            };
            at += JOBREC_LEN;
            let id = u64::from_le_bytes(long(rec, 0));
            if id == 0 {
                break; // trailing zeros: the end of what was written
            }
            if id == u64::MAX {
                // No id could follow it: not one beanstalkd hands out in practice.
                return Err((start, format!("job id {id} leaves no id for later jobs")));
            }
            let state = rec[76];
            let full = name_len > 0;
            if !full && !self.jobs.contains_key(&id) {
                continue; // a later write of a job deleted before (beanstalkd skips it too)
            }
            let durable = match state {
                0 => {
                    self.jobs.remove(&id);
                    continue;
                }
                1 | 2 => DurableState::Ready, // reserved jobs come back ready
                3 => DurableState::Buried,
                4 => DurableState::Delayed {
                    until: ns_to_ms_up(i64::from_le_bytes(long(rec, 48)))
                        .ok_or((start, format!("job {id}: negative deadline")))?,
                },
                other => return Err((start, format!("job {id}: unknown state {other}"))),
            };
            let priority = u32::from_le_bytes(word(rec, 8));
            let history = JobHistory::from_counters(
                ns_to_ms_up(i64::from_le_bytes(long(rec, 16)))
                    .ok_or_else(|| (start, format!("job {id}: negative delay")))?,
                std::array::from_fn(|n| u32::from_le_bytes(word(rec, 56 + 4 * n))),
            );
            if full {
                let body_size = i32::from_le_bytes(word(rec, 32));
                let body_len = usize::try_from(body_size)
                    .ok()
                    .filter(|&n| n >= 2)
                    .ok_or_else(|| (start, format!("job {id}: body size {body_size}")))?;
                if body_len - 2 > MAX_BODY_LEN {
                    return Err((
                        start,
                        format!(
                            "job {id}: a body of {} bytes, more than this store's {MAX_BODY_LEN}",
                            body_len - 2
                        ),
                    ));
                }
                let body = bytes
                    .get(at..at + body_len)
                    .ok_or((start, format!("job {id}: truncated body")))?;
                at += body_len;
                if !body.ends_with(b"\r\n") {
                    return Err((start, format!("job {id}: the body does not end with CRLF")));
                }
                let tube = std::str::from_utf8(name)
                    .ok()
                    .and_then(|n| TubeName::new(n).ok())
                    .ok_or_else(|| (start, format!("job {id}: invalid tube name {name:?}")))?;
                let ns = |offset| i64::from_le_bytes(long(rec, offset));
                let ttr = ns_to_ms_up(ns(24))
                    .ok_or_else(|| (start, format!("job {id}: negative ttr")))?;
                let created = ns_to_ms_up(ns(40)).unwrap_or(0);
                self.max_id = self.max_id.max(id);
                self.jobs.insert(
                    id,
                    JobRecord {
                        id,
                        tube,
                        priority,
                        ttr,
                        state: durable,
                        created,
                        body: Bytes::copy_from_slice(&body[..body_len - 2]),
                        idempotency_key: None,
                        history,
                    },
                );
            } else if let Some(job) = self.jobs.get_mut(&id) {
                job.update(durable, priority, history);
            }
        }
        Ok(())
    }

    /// The live jobs, by id, and the largest id any full record named (0 if none).
    #[must_use]
    pub fn into_jobs(self) -> (Vec<JobRecord>, JobId) {
        (self.jobs.into_values().collect(), self.max_id)
    }
}

fn word(bytes: &[u8], at: usize) -> [u8; 4] {
    let mut w = [0; 4];
    w.copy_from_slice(&bytes[at..at + 4]);
    w
}

fn long(bytes: &[u8], at: usize) -> [u8; 8] {
    let mut w = [0; 8];
    w.copy_from_slice(&bytes[at..at + 8]);
    w
}

/// Nanoseconds to milliseconds, rounded up (a deadline read from the binlog is never moved
/// earlier); `None` if negative.
fn ns_to_ms_up(ns: i64) -> Option<u64> {
    u64::try_from(ns).ok().map(|ns| ns.div_ceil(1_000_000))
}

/// What [`import`] took over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Imported {
    /// Live jobs committed into the store.
    pub jobs: usize,
    /// Live jobs whose id the store held already (an import interrupted after its commit and
    /// done again): left as the store has them.
    pub present: usize,
    /// Binlog files read (and moved).
    pub files: usize,
    /// Where they were moved.
    pub moved_to: PathBuf,
}

/// The `binlog.N` files of `dir`, by `N`.
fn binlog_files(dir: &Path) -> Result<Vec<PathBuf>, StoreError> {
    let io = |e| StoreError::io(dir, e);
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let entry = entry.map_err(io)?;
        let name = entry.file_name();
        let Some(n) = name
            .to_str()
            .and_then(|n| n.strip_prefix("binlog."))
            .and_then(|n| n.parse::<u64>().ok())
        else {
            continue;
        };
        if entry.file_type().map_err(io)?.is_file() {
            files.push((n, entry.path()));
        }
    }
    files.sort_unstable();
    Ok(files.into_iter().map(|(_, p)| p).collect())
}

/// Takes over the jobs of a beanstalkd binlog in `dir` (see the [module docs](self)): commits
/// every live job into `store` under its id, keeps later ids above them, then moves the files
/// to `dir/`[`IMPORTED_DIR`]. `Ok(None)` if `dir` holds no binlog. Safe to run again after a
/// crash at any point: jobs already in the store are left as they are.
///
/// # Errors
///
/// [`StoreError::Corrupt`] (naming the file and offset) if a binlog file does not read as
/// beanstalkd 1.10–1.13 wrote it; nothing is committed then, and the files stay. A failed
/// commit or move.
pub fn import(store: &dyn Store, dir: &Path) -> Result<Option<Imported>, StoreError> {
    let files = binlog_files(dir)?;
    if files.is_empty() {
        return Ok(None);
    }
    let mut replay = Replay::default();
    for file in &files {
        let bytes = std::fs::read(file).map_err(|e| StoreError::io(file, e))?;
        replay
            .file(&bytes)
            .map_err(|(offset, detail)| StoreError::Corrupt {
                file: file.clone(),
                offset: offset as u64,
                detail,
            })?;
    }
    let (jobs, max_id) = replay.into_jobs();
    let mut present = 0;
    let mut batch = vec![Change::ReserveIds {
        end: max_id.saturating_add(1),
    }];
    let mut batch_bytes = 0;
    let mut imported = 0;
    for job in jobs {
        if store.get(job.id)?.is_some() {
            present += 1;
            continue;
        }
        batch_bytes += job.body.len();
        batch.push(Change::Put(job));
        imported += 1;
        if batch.len() >= 1024 || batch_bytes >= 16 << 20 {
            store.commit(&batch)?;
            batch.clear();
            batch_bytes = 0;
        }
    }
    if !batch.is_empty() {
        store.commit(&batch)?;
    }
    let moved_to = dir.join(IMPORTED_DIR);
    std::fs::create_dir_all(&moved_to).map_err(|e| StoreError::io(&moved_to, e))?;
    for file in &files {
        let mut to = moved_to.join(file.file_name().unwrap_or_default());
        let mut n = 1;
        while to.exists() {
            // A binlog.N moved by an earlier import: keep both.
            to = moved_to.join(format!(
                "{}.{n}",
                file.file_name().unwrap_or_default().to_string_lossy()
            ));
            n += 1;
        }
        std::fs::rename(file, &to).map_err(|e| StoreError::io(file, e))?;
    }
    for d in [&moved_to, &dir.to_path_buf()] {
        File::open(d)
            .and_then(|f| f.sync_all())
            .map_err(|e| StoreError::io(d, e))?;
    }
    Ok(Some(Imported {
        jobs: imported,
        present,
        files: files.len(),
        moved_to,
    }))
}

/// beanstalkd's lock on its data directory (`DIR/lock`, a POSIX `fcntl` write lock on the
/// whole file), held by tickwheel while it runs; released when dropped (or when the process
/// ends, however it ends).
#[derive(Debug)]
pub struct BeanstalkdLock {
    _file: File,
}

impl BeanstalkdLock {
    /// Takes the lock, creating `dir/lock` if needed.
    ///
    /// # Errors
    ///
    /// [`StoreError::Io`] on `dir/lock`: a beanstalkd (or another tickwheel) holds the lock
    /// (`EAGAIN`), or the file cannot be created.
    pub fn acquire(dir: &Path) -> Result<BeanstalkdLock, StoreError> {
        let path = dir.join(BEANSTALKD_LOCK_FILE);
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| StoreError::io(&path, e))?;
        match rustix::fs::fcntl_lock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => Ok(BeanstalkdLock { _file: file }),
            Err(e) => Err(StoreError::io(&path, e.into())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A binlog record as beanstalkd 1.12 writes it (layout checked against a file it wrote:
    /// `tests/e2e/test_dropin.py` reads real ones).
    fn rec(tube: &str, id: u64, state: u8, body: Option<&[u8]>) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&i32::try_from(tube.len()).expect("short name").to_le_bytes());
        out.extend_from_slice(tube.as_bytes());
        let mut jr = [0u8; JOBREC_LEN];
        jr[0..8].copy_from_slice(&id.to_le_bytes());
        jr[8..12].copy_from_slice(&7u32.to_le_bytes());
        jr[24..32].copy_from_slice(&60_000_000_000i64.to_le_bytes());
        let size = body.map_or(0, |b| b.len() + 2);
        jr[32..36].copy_from_slice(&i32::try_from(size).expect("small body").to_le_bytes());
        jr[40..48].copy_from_slice(&1_700_000_000_000_000_001i64.to_le_bytes());
        jr[48..56].copy_from_slice(&1_800_000_000_000_000_001i64.to_le_bytes());
        jr[76] = state;
        out.extend_from_slice(&jr);
        if let Some(b) = body {
            out.extend_from_slice(b);
            out.extend_from_slice(b"\r\n");
        }
        out
    }

    /// `record` (from [`rec`], no tube name before it: a short one) with a delay and counters.
    fn with_history(mut record: Vec<u8>, delay_ns: i64, counts: [u32; 5]) -> Vec<u8> {
        let jr = record.len() - JOBREC_LEN;
        record[jr + 16..jr + 24].copy_from_slice(&delay_ns.to_le_bytes());
        for (i, n) in counts.iter().enumerate() {
            record[jr + 56 + 4 * i..jr + 60 + 4 * i].copy_from_slice(&n.to_le_bytes());
        }
        record
    }

    fn file(records: &[Vec<u8>]) -> Vec<u8> {
        let mut out = BINLOG_VERSION.to_le_bytes().to_vec();
        for r in records {
            out.extend_from_slice(r);
        }
        out.extend_from_slice(&[0u8; 300]); // the preallocated tail
        out
    }

    #[test]
    fn a_replay_keeps_live_jobs_with_their_last_state() {
        let mut r = Replay::default();
        r.file(&file(&[
            rec("default", 1, 1, Some(b"a")),
            rec("other", 2, 4, Some(b"b")),
            rec("default", 3, 1, Some(b"c")),
            rec("", 1, 2, None), // reserved: ready again
            rec("", 3, 0, None), // deleted
            rec("", 3, 1, None), // a short record of a deleted job: skipped
            rec("", 9, 3, None), // never created: skipped
        ]))
        .expect("replays");
        // Buried, in the next file; the short record carries the job's delay and counters.
        r.file(&file(&[with_history(
            rec("", 2, 3, None),
            1_500_000_001,
            [3, 1, 2, 1, 0],
        )]))
        .expect("replays");
        let (jobs, max) = r.into_jobs();
        assert_eq!(max, 3);
        assert_eq!(jobs.len(), 2);
        assert_eq!((jobs[0].id, &*jobs[0].body), (1, &b"a"[..]));
        assert_eq!(jobs[0].state, DurableState::Ready);
        assert_eq!(jobs[0].ttr, 60_000);
        assert_eq!(jobs[0].priority, 7);
        assert_eq!(jobs[0].created, 1_700_000_000_001);
        assert_eq!((jobs[1].id, jobs[1].tube.as_str()), (2, "other"));
        assert_eq!(jobs[1].state, DurableState::Buried);
        assert_eq!(
            jobs[1].history,
            JobHistory {
                delay: 1_501, // rounded up, as every time read from the binlog
                reserves: 3,
                timeouts: 1,
                releases: 2,
                buries: 1,
                kicks: 0,
            }
        );
        assert_eq!(jobs[0].history, JobHistory::default());
    }

    #[test]
    fn a_delayed_deadline_is_rounded_up_never_early() {
        let mut r = Replay::default();
        r.file(&file(&[rec("t", 5, 4, Some(b"x"))]))
            .expect("replays");
        let (jobs, _) = r.into_jobs();
        assert_eq!(
            jobs[0].state,
            DurableState::Delayed {
                until: 1_800_000_000_001
            }
        );
    }

    #[test]
    fn bad_binlogs_are_refused_with_their_offset() {
        let mut other_version = file(&[]);
        other_version[0] = 5;
        let cases: Vec<(Vec<u8>, usize, &str)> = vec![
            (other_version, 0, "version 5"),
            (
                file(&[rec("bad name!", 1, 1, Some(b"x"))]),
                4,
                "invalid tube name",
            ),
            (file(&[rec("t", 1, 9, Some(b"x"))]), 4, "unknown state 9"),
            (
                file(&[
                    rec("t", 1, 1, Some(b"x")),
                    with_history(rec("", 1, 1, None), -1, [0; 5]),
                ]),
                4 + 4 + 1 + JOBREC_LEN + 3,
                "negative delay",
            ),
            (
                {
                    let mut f = BINLOG_VERSION.to_le_bytes().to_vec();
                    f.extend_from_slice(&rec("t", 1, 1, Some(b"xyz"))[..40]);
                    f
                },
                4,
                "truncated job record",
            ),
        ];
        for (bytes, offset, what) in cases {
            let err = Replay::default().file(&bytes).expect_err("refused");
            assert_eq!(err.0, offset, "{what}: {err:?}");
            assert!(err.1.contains(what), "{what}: {err:?}");
        }
    }

    /// The seed of the `binlog_replay` fuzz target is a file beanstalkd 1.12 wrote: puts of
    /// jobs 1 and 2 (`default`, 2 delayed 500 s), 3 and 4 (`t2`), then `delete 4`.
    #[test]
    fn a_binlog_beanstalkd_wrote_replays_as_it_replays_it() {
        let seed = std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../fuzz/seeds/binlog_replay/beanstalkd-1.12-four-jobs"
        ))
        .expect("the seed is in the repository");
        let mut r = Replay::default();
        r.file(&seed[1..]).expect("replays"); // the fuzz target's first byte is its own
        let (jobs, max) = r.into_jobs();
        assert_eq!(max, 4);
        let got: Vec<_> = jobs
            .iter()
            .map(|j| (j.id, j.tube.as_str(), j.priority, j.ttr, &j.body[..]))
            .collect();
        assert_eq!(
            got,
            [
                (1, "default", 1, 60_000, &b"hello"[..]),
                (2, "default", 1, 60_000, &b"bye"[..]),
                (3, "t2", 7, 30_000, &b"bury"[..]),
            ]
        );
        assert!(
            matches!(jobs[1].state, DurableState::Delayed { until } if until > jobs[1].created + 499_000)
        );
        assert_eq!(jobs[1].history.delay, 500_000);
    }

    #[test]
    fn the_largest_id_is_refused_not_an_overflow() {
        let err = Replay::default()
            .file(&file(&[rec("t", u64::MAX, 1, Some(b"x"))]))
            .expect_err("refused");
        assert_eq!(err.0, 4);
        assert!(err.1.contains("leaves no id"), "{err:?}");
    }

    /// The import commits the live jobs, keeps later ids above them, moves the files, and a
    /// second start (files gone) imports nothing; a damaged file is refused and stays.
    #[test]
    fn an_import_commits_reserves_ids_and_moves_the_files() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = crate::MemStore::new();
        std::fs::write(
            dir.path().join("binlog.2"),
            file(&[
                rec("t", 4, 1, Some(b"x")),
                rec("t", 9, 3, Some(b"y")),
                rec("", 4, 0, None),
            ]),
        )
        .expect("write");
        std::fs::write(dir.path().join("binlog.txt"), b"not a binlog").expect("write");
        let done = import(&store, dir.path())
            .expect("imports")
            .expect("a binlog");
        assert_eq!((done.jobs, done.present, done.files), (1, 0, 1));
        assert!(
            store.get(4).expect("get").is_none(),
            "deleted in the binlog"
        );
        let job = store.get(9).expect("get").expect("imported");
        assert_eq!((job.state, &*job.body), (DurableState::Buried, &b"y"[..]));
        assert!(store.recover(0).expect("recover").next_id >= 10);
        assert!(!dir.path().join("binlog.2").exists());
        assert!(done.moved_to.join("binlog.2").exists());
        assert!(
            dir.path().join("binlog.txt").exists(),
            "not a binlog.N name"
        );
        assert_eq!(import(&store, dir.path()).expect("again"), None);

        std::fs::write(dir.path().join("binlog.3"), [7, 0, 0, 0, 5, 0, 0, 0]).expect("write");
        assert!(matches!(
            import(&store, dir.path()),
            Err(StoreError::Corrupt { offset: 4, .. })
        ));
        assert!(dir.path().join("binlog.3").exists(), "a refused file stays");
    }

    mod prop {
        use super::super::Replay;
        use proptest::prelude::*;

        proptest! {
            #[test]
            fn any_bytes_replay_or_fail_cleanly(
                mut bytes in proptest::collection::vec(any::<u8>(), 0..600),
                version in any::<bool>(),
            ) {
                if version && bytes.len() >= 4 {
                    bytes[..4].copy_from_slice(&super::BINLOG_VERSION.to_le_bytes());
                }
                let _ = Replay::default().file(&bytes);
            }
        }
    }
}
