//! Finding every job of a server (`export`, `migrate`) and putting jobs into one (`import`,
//! `migrate`).
//!
//! # Finding jobs
//!
//! The protocol has no "list jobs": `peek-ready`/`-delayed`/`-buried` show only the head of one
//! tube, and reserving or kicking would change the source. So the scan walks job ids:
//!
//! 1. **Upper bound.** Ids are handed out in increasing order and never reused (beanstalkd and
//!    tickwheel alike), so the id of a job put now is above every existing one. The scan puts
//!    one empty job (delay 1 h) into the tube `tickwheel-scan-probe` and deletes it at once:
//!    the only change to the source (it uses one id and counts in `total-jobs`/`cmd-put`).
//!    `--max-id N` skips the probe and scans `1..=N`.
//! 2. **Expected count.** `stats` after the probe gives the live jobs (`current-jobs-ready` +
//!    `-delayed` + `-buried` + `-reserved`). Every job with an id below the bound was created
//!    before that `stats`, so once the scan has seen that many jobs it has seen them all and
//!    stops early; jobs deleted meanwhile only make it walk on to the bound.
//! 3. **Walk.** For each id, `stats-job <id>` (tube, state, priority, TTR, time left) and
//!    `peek <id>` (the body), pipelined in batches of [`SCAN_BATCH`] ids. `NOT_FOUND`
//!    (deleted, or never existed) is skipped.
//!
//! Cost: two small commands per id up to the highest live id (not per job), pipelined, so one
//! round trip per batch; a server that handed out 10 million ids costs 20 million commands
//! even if it holds 10 jobs. Nothing on the source is reserved, kicked or deleted.
//!
//! Jobs put after the probe are not copied: the result is the set of jobs at the start.
//!
//! # Remaining delay
//!
//! `stats-job` reports `time-left` in whole seconds, truncated. A delayed job is written with
//! `time-left + 1` seconds, so its copy is never ready before the original (at most about a
//! second plus the copying time later).
//!
//! # Buried jobs
//!
//! A buried job is put on the target as ready, then `reserve-job <id>` and `bury <id> <pri>`
//! at once (beanstalkd ≥ 1.12 and tickwheel have `reserve-job`). A worker reserving from the
//! same tube of the target in between could take it first: migrate into a target whose
//! workers are not yet running.

use std::io::{BufRead, Write};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use base64::Engine as _;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use tickwheel_proto::{parse_yaml_map, Command, Reply};
use tickwheel_queue::TubeName;

use crate::args::{ReservedPolicy, ScanArgs};
use crate::conn::{describe, field, number, tube_name, unexpected, Connection};

/// Ids per pipelined batch of the scan (two commands each).
pub(crate) const SCAN_BATCH: u64 = 128;
/// Jobs per pipelined batch of puts, and the most body bytes queued before a batch is sent.
const PUT_BATCH: usize = 128;
const PUT_BATCH_BYTES: usize = 1 << 20;
/// The tube of the probe job that learns the next id.
pub(crate) const PROBE_TUBE: &str = "tickwheel-scan-probe";

/// A job's state as `stats-job` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum State {
    Ready,
    Delayed,
    Reserved,
    Buried,
}

impl State {
    fn parse(word: &str) -> Result<State> {
        Ok(match word {
            "ready" => State::Ready,
            "delayed" => State::Delayed,
            "reserved" => State::Reserved,
            "buried" => State::Buried,
            other => bail!("unknown job state {other:?}"),
        })
    }
}

/// How [`JobRecord::body`] is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Encoding {
    /// The body is UTF-8 text, written as is.
    Utf8,
    /// The body has other bytes; written in standard base64 (with padding).
    Base64,
}

/// A body as JSON text: itself if it is UTF-8, else base64.
pub(crate) fn encode_body(body: &[u8]) -> (String, Encoding) {
    match std::str::from_utf8(body) {
        Ok(text) => (text.to_owned(), Encoding::Utf8),
        Err(_) => (
            base64::engine::general_purpose::STANDARD.encode(body),
            Encoding::Base64,
        ),
    }
}

/// One job of an export: one JSON object per line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct JobRecord {
    /// The id on the source (informational: the target hands out its own ids).
    pub(crate) id: u64,
    pub(crate) tube: String,
    pub(crate) priority: u32,
    /// Time to run, seconds.
    pub(crate) ttr: u32,
    /// Seconds until the job is ready, rounded up, counted from the export (0 unless delayed).
    pub(crate) delay: u32,
    pub(crate) state: State,
    pub(crate) body: String,
    pub(crate) encoding: Encoding,
}

impl JobRecord {
    /// A record of `body`, as text if it is UTF-8, else base64.
    pub(crate) fn new(
        id: u64,
        tube: String,
        priority: u32,
        ttr: u32,
        delay: u32,
        state: State,
        body: &[u8],
    ) -> JobRecord {
        let (body, encoding) = encode_body(body);
        JobRecord {
            id,
            tube,
            priority,
            ttr,
            delay,
            state,
            body,
            encoding,
        }
    }

    /// The body's bytes.
    pub(crate) fn body_bytes(&self) -> Result<Bytes> {
        match self.encoding {
            Encoding::Utf8 => Ok(Bytes::from(self.body.clone().into_bytes())),
            Encoding::Base64 => base64::engine::general_purpose::STANDARD
                .decode(&self.body)
                .map(Bytes::from)
                .with_context(|| format!("job {}: the body is not valid base64", self.id)),
        }
    }
}

/// Counts of a scan or a copy, by state.
#[derive(Debug, Default, Serialize)]
pub(crate) struct Counts {
    pub(crate) ready: u64,
    pub(crate) delayed: u64,
    pub(crate) buried: u64,
    /// Reserved jobs written as ready (`--reserved ready`).
    pub(crate) reserved_as_ready: u64,
    /// Reserved jobs left out (`--reserved skip`).
    pub(crate) skipped_reserved: u64,
    /// Jobs of other tubes than those asked for.
    pub(crate) skipped_other_tubes: u64,
    /// Jobs the target refused (import, migrate).
    pub(crate) failed: u64,
}

impl Counts {
    /// Jobs written or copied.
    pub(crate) fn total(&self) -> u64 {
        self.ready + self.delayed + self.buried + self.reserved_as_ready
    }

    fn count(&mut self, state: State) {
        match state {
            State::Ready => self.ready += 1,
            State::Delayed => self.delayed += 1,
            State::Buried => self.buried += 1,
            State::Reserved => self.reserved_as_ready += 1,
        }
    }

    pub(crate) fn summary(&self, verb: &str) -> String {
        let mut s = format!(
            "{verb} {} jobs (ready {}, delayed {}, buried {}",
            self.total(),
            self.ready,
            self.delayed,
            self.buried
        );
        if self.reserved_as_ready > 0 {
            s += &format!(", reserved copied as ready {}", self.reserved_as_ready);
        }
        s += ")";
        if self.skipped_reserved > 0 {
            s += &format!("; skipped {} reserved", self.skipped_reserved);
        }
        if self.skipped_other_tubes > 0 {
            s += &format!("; {} in other tubes not copied", self.skipped_other_tubes);
        }
        if self.failed > 0 {
            s += &format!("; {} FAILED", self.failed);
        }
        s
    }
}

/// What a scan is about to walk.
pub(crate) struct ScanPlan {
    /// Ids `1..=max_id` are walked.
    pub(crate) max_id: u64,
    /// Live jobs counted by `stats` after the bound was taken.
    pub(crate) expected: u64,
}

/// Learns the id bound (probe or `--max-id`) and the expected number of jobs.
pub(crate) fn plan(conn: &mut Connection, max_id: Option<u64>) -> Result<ScanPlan> {
    let max_id = match max_id {
        Some(n) => n,
        None => probe_next_id(conn)?.saturating_sub(1),
    };
    let stats = conn.stats()?;
    let expected = ["ready", "delayed", "buried", "reserved"]
        .iter()
        .map(|s| number(&stats, &format!("current-jobs-{s}")))
        .sum::<Result<u64>>()?;
    Ok(ScanPlan { max_id, expected })
}

/// Puts and deletes one empty job to learn the next id the server hands out.
fn probe_next_id(conn: &mut Connection) -> Result<u64> {
    conn.use_tube(&tube_name(PROBE_TUBE)?)?;
    let put = Command::Put {
        priority: u32::MAX,
        delay: 3600,
        ttr: 1,
        body: Bytes::new(),
    };
    let id = match conn.call(&put)? {
        Reply::Inserted(id) | Reply::BuriedId(id) => id,
        other => bail!(
            "{} refused the probe job that finds the highest id ({}); use --max-id N",
            conn.addr(),
            describe(&other)
        ),
    };
    match conn.call(&Command::Delete(id))? {
        Reply::Deleted => {}
        other => bail!(
            "could not delete the probe job {id} from tube {PROBE_TUBE}: {}",
            describe(&other)
        ),
    }
    conn.use_tube(&TubeName::default_tube())?;
    Ok(id)
}

/// Walks ids `1..=plan.max_id` and hands every job found (in the wanted tubes, reserved ones
/// per `policy`) to `sink`; `progress` is told the last id walked. Returns the counts.
pub(crate) fn scan(
    conn: &mut Connection,
    plan: &ScanPlan,
    args: &ScanArgs,
    mut sink: impl FnMut(JobRecord) -> Result<()>,
    mut progress: impl FnMut(u64, &Counts),
) -> Result<Counts> {
    let wanted: Vec<TubeName> = args
        .tubes
        .iter()
        .map(|t| tube_name(t))
        .collect::<Result<_>>()?;
    let mut counts = Counts::default();
    let mut seen = 0u64;
    let mut next = 1u64;
    while next <= plan.max_id && seen < plan.expected {
        let last = next.saturating_add(SCAN_BATCH - 1).min(plan.max_id);
        for id in next..=last {
            conn.send(&Command::StatsJob(id));
            conn.send(&Command::Peek(id));
        }
        for id in next..=last {
            let stats = conn.recv()?;
            let peek = conn.recv()?;
            let (yaml, body) = match (stats, peek) {
                (Reply::Ok(yaml), Reply::Found(found, body)) if found == id => (yaml, body),
                (Reply::NotFound, _) | (_, Reply::NotFound) => continue,
                (s, p) => bail!(
                    "unexpected replies to stats-job/peek {id}: {} / {}",
                    describe(&s),
                    describe(&p)
                ),
            };
            seen += 1;
            let stats = parse_yaml_map(&yaml)?;
            let job = job_record(id, &stats, &body)
                .with_context(|| format!("job {id} on {}", conn.addr()))?;
            if !wanted.is_empty() && !wanted.iter().any(|t| t.as_str() == job.tube) {
                counts.skipped_other_tubes += 1;
                continue;
            }
            if job.state == State::Reserved && args.reserved == ReservedPolicy::Skip {
                counts.skipped_reserved += 1;
                continue;
            }
            counts.count(job.state);
            sink(job)?;
        }
        progress(last, &counts);
        next = match last.checked_add(1) {
            Some(n) => n,
            None => break,
        };
    }
    Ok(counts)
}

/// A record from a job's `stats-job` dictionary and body.
fn job_record(id: u64, stats: &[(String, String)], body: &[u8]) -> Result<JobRecord> {
    let stats = stats.to_vec();
    let state = State::parse(field(&stats, "state").ok_or_else(|| anyhow!("no state"))?)?;
    let small = |key: &str| -> Result<u32> {
        u32::try_from(number(&stats, key)?).with_context(|| format!("{key} out of range"))
    };
    let delay = match state {
        // time-left is truncated to whole seconds: one more is never early.
        State::Delayed => small("time-left")?.saturating_add(1),
        _ => 0,
    };
    Ok(JobRecord::new(
        id,
        field(&stats, "tube")
            .ok_or_else(|| anyhow!("no tube"))?
            .to_owned(),
        small("pri")?,
        small("ttr")?,
        delay,
        state,
        body,
    ))
}

/// Puts records into a server in pipelined batches, burying those that were buried.
pub(crate) struct Writer<'a> {
    conn: &'a mut Connection,
    batch: Vec<(JobRecord, Bytes)>,
    batch_bytes: usize,
    used: Option<String>,
    pub(crate) counts: Counts,
    /// The first few errors, for the report.
    pub(crate) errors: Vec<String>,
}

impl<'a> Writer<'a> {
    pub(crate) fn new(conn: &'a mut Connection) -> Writer<'a> {
        Writer {
            conn,
            batch: Vec::new(),
            batch_bytes: 0,
            used: None,
            counts: Counts::default(),
            errors: Vec::new(),
        }
    }

    /// Queues one job; sends the batch when it is full.
    pub(crate) fn push(&mut self, job: JobRecord) -> Result<()> {
        tube_name(&job.tube).with_context(|| format!("job {}", job.id))?;
        let body = job.body_bytes()?;
        self.batch_bytes += body.len();
        self.batch.push((job, body));
        if self.batch.len() >= PUT_BATCH || self.batch_bytes >= PUT_BATCH_BYTES {
            self.flush()?;
        }
        Ok(())
    }

    fn fail(&mut self, message: String) {
        self.counts.failed += 1;
        if self.errors.len() < 10 {
            self.errors.push(message);
        }
    }

    /// Sends the queued jobs and waits for the server's answers.
    pub(crate) fn flush(&mut self) -> Result<()> {
        let batch = std::mem::take(&mut self.batch);
        self.batch_bytes = 0;
        if batch.is_empty() {
            return Ok(());
        }
        // Round 1: use + put, pipelined.
        let mut uses = Vec::with_capacity(batch.len());
        for (job, body) in &batch {
            let switch = self.used.as_deref() != Some(job.tube.as_str());
            if switch {
                self.conn.send(&Command::Use(tube_name(&job.tube)?));
                self.used = Some(job.tube.clone());
            }
            uses.push(switch);
            let delay = if job.state == State::Delayed {
                job.delay
            } else {
                0
            };
            self.conn.send(&Command::Put {
                priority: job.priority,
                delay,
                ttr: job.ttr,
                body: body.clone(),
            });
        }
        let mut to_bury = Vec::new();
        for ((job, _), switched) in batch.iter().zip(uses) {
            if switched {
                match self.conn.recv()? {
                    Reply::Using(_) => {}
                    other => return Err(unexpected("use", &other)),
                }
            }
            match self.conn.recv()? {
                Reply::Inserted(new_id) => {
                    if job.state == State::Buried {
                        to_bury.push((job.id, new_id, job.priority));
                    } else {
                        self.counts.count(job.state);
                    }
                }
                Reply::Draining => bail!("{} is draining: it accepts no jobs", self.conn.addr()),
                other => self.fail(format!(
                    "job {} (tube {}): the target answered {}",
                    job.id,
                    job.tube,
                    describe(&other)
                )),
            }
        }
        // Round 2: reserve-job + bury for the buried ones, pipelined.
        for &(_, new_id, priority) in &to_bury {
            self.conn.send(&Command::ReserveJob(new_id));
            self.conn.send(&Command::Bury {
                id: new_id,
                priority,
            });
        }
        for (old_id, new_id, _) in to_bury {
            let reserved = self.conn.recv()?;
            let buried = self.conn.recv()?;
            match (&reserved, &buried) {
                (Reply::Reserved(..), Reply::Buried) => self.counts.buried += 1,
                _ => self.fail(format!(
                    "job {old_id}: put as {new_id} but not buried (reserve-job: {}, bury: {})",
                    describe(&reserved),
                    describe(&buried)
                )),
            }
        }
        Ok(())
    }
}

/// Reads JSON-lines records, one per line (blank lines are skipped).
pub(crate) fn read_records(
    input: impl BufRead,
    mut each: impl FnMut(JobRecord) -> Result<()>,
) -> Result<()> {
    for (n, line) in input.lines().enumerate() {
        let line = line.with_context(|| format!("reading line {}", n + 1))?;
        if line.trim().is_empty() {
            continue;
        }
        let record: JobRecord =
            serde_json::from_str(&line).with_context(|| format!("line {}: not a job", n + 1))?;
        each(record)?;
    }
    Ok(())
}

/// Writes one record as a JSON line.
pub(crate) fn write_record(out: &mut impl Write, job: &JobRecord) -> Result<()> {
    serde_json::to_writer(&mut *out, job)?;
    out.write_all(b"\n")?;
    Ok(())
}

/// A progress bar on standard error (hidden when it is not a terminal).
pub(crate) fn progress_bar(len: u64, what: &str) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(len);
    let style = indicatif::ProgressStyle::with_template(
        "{spinner} {prefix} [{bar:30}] id {pos}/{len} {msg} ({elapsed})",
    )
    .map(|s| s.progress_chars("=> "))
    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
    bar.set_style(style);
    bar.set_prefix(what.to_owned());
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn record_json_shape() {
        let job = JobRecord::new(7, "mail".into(), 10, 60, 31, State::Delayed, b"hi");
        assert_eq!(
            serde_json::to_string(&job).expect("serializes"),
            r#"{"id":7,"tube":"mail","priority":10,"ttr":60,"delay":31,"state":"delayed","body":"hi","encoding":"utf8"}"#
        );
        let binary = JobRecord::new(8, "x".into(), 0, 1, 0, State::Buried, &[0xff, 0, 1]);
        assert_eq!(binary.encoding, Encoding::Base64);
        assert_eq!(binary.body, "/wAB");
        assert_eq!(&binary.body_bytes().expect("valid")[..], [0xff, 0, 1]);
    }

    #[test]
    fn bad_records_are_errors() {
        let bad = [
            r#"{"id":1}"#,
            r#"{"id":1,"tube":"a","priority":1,"ttr":1,"delay":0,"state":"gone","body":"","encoding":"utf8"}"#,
            r#"{"id":1,"tube":"a","priority":-1,"ttr":1,"delay":0,"state":"ready","body":"","encoding":"utf8"}"#,
            r#"{"id":1,"tube":"a","priority":1,"ttr":1,"delay":0,"state":"ready","body":"","encoding":"utf8","x":1}"#,
            "not json",
        ];
        for line in bad {
            assert!(read_records(line.as_bytes(), |_| Ok(())).is_err(), "{line}");
        }
        let job: JobRecord = serde_json::from_str(
            r#"{"id":1,"tube":"a","priority":1,"ttr":1,"delay":0,"state":"ready","body":"!!","encoding":"base64"}"#,
        )
        .expect("parses");
        assert!(job.body_bytes().is_err());
    }

    #[test]
    fn delayed_jobs_get_one_more_second() {
        let stats: Vec<(String, String)> = [
            ("id", "3"),
            ("tube", "t"),
            ("state", "delayed"),
            ("pri", "5"),
            ("ttr", "9"),
            ("time-left", "41"),
        ]
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
        let job = job_record(3, &stats, b"b").expect("valid");
        assert_eq!((job.delay, job.priority, job.ttr), (42, 5, 9));
    }

    proptest! {
        /// Any body survives the JSON line, text or base64.
        #[test]
        fn records_round_trip(
            body in proptest::collection::vec(any::<u8>(), 0..200),
            priority in any::<u32>(),
            ttr in any::<u32>(),
            delay in any::<u32>(),
            id in any::<u64>(),
        ) {
            let job = JobRecord::new(id, "tube".into(), priority, ttr, delay, State::Buried, &body);
            let mut line = Vec::new();
            write_record(&mut line, &job).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let mut back = Vec::new();
            read_records(&line[..], |r| { back.push(r); Ok(()) })
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(back.len(), 1, "one line, one record");
            prop_assert_eq!(&back[0], &job, "the record changed");
            let bytes = back[0].body_bytes().map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(&bytes[..], &body[..], "the body changed");
        }
    }
}
