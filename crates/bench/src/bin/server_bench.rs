//! `server_bench`: a beanstalkd-protocol load generator that starts `tickwheel-server` and
//! `beanstalkd` itself (free loopback port, fresh temp data dir), runs one workload, stops
//! the server, and prints medians over several runs. Loopback only; every loop is bounded in
//! count and in time. See `crates/bench/SERVER_RESULTS.md`.
//!
//! Workloads:
//! - `throughput`: N connections doing put/reserve/delete cycles, then puts alone;
//! - `lateness`: jobs put at a steady rate with 1–3 s delays, workers reserving; lateness of
//!   each delivery against the put's ack time + delay, early deliveries against its send time;
//! - `idle`: thousands of idle connections; the server's resident-set growth;
//! - `sync`: one connection, one put at a time: the put round trip, beside the disk's own
//!   `fdatasync` latency probed in the same run (4 KiB writes in the same file system as the
//!   servers' data directories, into three files: blocks written beforehand, a sparse
//!   `set_len` file as fjall's journal, and `fallocate`d extents);
//! - `pipelined`: N connections keeping D puts in flight each: the distribution of ack
//!   latencies (put sent → `INSERTED` received) and puts/s.

#[path = "../bench_stats.rs"]
mod bench_stats;
use bench_stats::{median, percentile};

use std::collections::HashMap;
use std::net::{SocketAddr, TcpListener as StdListener};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _};
use clap::{Parser, ValueEnum};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;

/// Load generator for beanstalkd-protocol servers (tickwheel-server vs beanstalkd).
#[derive(Parser, Debug)]
struct Cli {
    /// Which workload.
    #[arg(long, value_enum)]
    workload: Workload,
    /// Servers to run (comma-separated). Default depends on the workload.
    #[arg(long, value_enum, value_delimiter = ',')]
    targets: Vec<Target>,
    /// Repetitions (targets interleaved within each run); medians are reported.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Path of tickwheel-server (default: next to this binary).
    #[arg(long)]
    tickwheel: Option<PathBuf>,
    /// Path of a second tickwheel-server build, run as target `tw-base-sync` (or `tw-base-mem`,
    /// `tw-base-pg`): before/after
    /// comparisons in one run, interleaved with the other targets (the disk and the load here
    /// change from minute to minute, so separate runs do not compare).
    #[arg(long)]
    baseline: Option<PathBuf>,
    /// Path of beanstalkd.
    #[arg(long, default_value = "beanstalkd")]
    beanstalkd: PathBuf,
    /// Throughput: concurrent connections.
    #[arg(long, default_value_t = 50)]
    conns: usize,
    /// Throughput: put/reserve/delete cycles per connection (and puts per connection in the
    /// puts-only phase).
    #[arg(long, default_value_t = 400)]
    per_conn: usize,
    /// Job body size in bytes.
    #[arg(long, default_value_t = 100)]
    body: usize,
    /// Lateness: puts per second (the steady-state due rate is the same).
    #[arg(long, default_value_t = 10_000)]
    rate: usize,
    /// Lateness: seconds of putting.
    #[arg(long, default_value_t = 5)]
    put_secs: u64,
    /// Lateness: producer connections.
    #[arg(long, default_value_t = 50)]
    producers: usize,
    /// Lateness: worker connections.
    #[arg(long, default_value_t = 20)]
    workers: usize,
    /// Idle: connections to open.
    #[arg(long, default_value_t = 10_000)]
    idle_conns: usize,
    /// Time limit of one phase, seconds (a phase that hits it reports what it did).
    #[arg(long, default_value_t = 90)]
    phase_limit: u64,
    /// Sync: puts on the one connection (and fdatasync calls of the disk probe).
    #[arg(long, default_value_t = 2000)]
    sync_puts: usize,
    /// Pipelined: puts in flight per connection.
    #[arg(long, default_value_t = 16)]
    depth: usize,
    /// Throughput and pipelined: start tickwheel targets with `--http` and report, per phase, their store
    /// commits (per cycle or put) and how much of the phase the committer spent in them
    /// (from `/metrics`: `tickwheel_commit_duration_seconds`).
    #[arg(long)]
    commit_stats: bool,
    /// Extra arguments for the `--tickwheel` build's targets (not the `--baseline` build's),
    /// split on whitespace: e.g. `--tickwheel-args "--io-threads 1"` with the same binary as
    /// `--baseline` compares a server option against its default in one run.
    #[arg(long, value_name = "ARGS", allow_hyphen_values = true)]
    tickwheel_args: Option<String>,
    /// Extra arguments for the `--baseline` build's targets, split on whitespace: e.g. the
    /// same `--postgres-claim-commit async` for both builds, to compare two builds under a
    /// non-default option.
    #[arg(long, value_name = "ARGS", allow_hyphen_values = true)]
    baseline_args: Option<String>,
    /// Throughput, sync and pipelined: report, per phase, the server's CPU time per operation
    /// (all its threads, from `/proc/PID/task/*/schedstat`, split by thread name), its minor
    /// page faults per operation and how often its threads were put on a CPU (from
    /// `/proc/PID/stat`): measures that do not depend on how busy the machine is.
    #[arg(long)]
    cpu: bool,
}

#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
enum Workload {
    Throughput,
    Lateness,
    Idle,
    Sync,
    Pipelined,
}

/// A server configuration.
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq, Hash)]
enum Target {
    /// tickwheel-server -b DIR (fsync before every ack, group commit).
    TwSync,
    /// The `--baseline` build of tickwheel-server, -b DIR.
    TwBaseSync,
    /// tickwheel-server -b DIR -f 50.
    TwF50,
    /// tickwheel-server -b DIR -F.
    TwNofsync,
    /// tickwheel-server --in-memory.
    TwMem,
    /// The `--baseline` build of tickwheel-server, --in-memory.
    TwBaseMem,
    /// beanstalkd -b DIR (default -f 50).
    BsF50,
    /// beanstalkd -b DIR -f 0 (fsync every write).
    BsF0,
    /// beanstalkd -b DIR -F.
    BsNofsync,
    /// beanstalkd without -b.
    BsMem,
    /// tickwheel-server --postgres URL: a fresh database on a throw-away PostgreSQL cluster
    /// (Debian's postgresql, same machine, loopback; default settings, fsync on).
    TwPg,
    /// The `--baseline` build of tickwheel-server, --postgres URL (as `tw-pg`).
    TwBasePg,
    /// 1 node of tickwheel-server --postgres URL --postgres-mode active-active.
    TwPgAa1,
    /// 2 active-active nodes on one fresh database; the throughput and lateness workloads
    /// spread the connections over them (other workloads use the first node).
    TwPgAa2,
    /// 3 active-active nodes on one fresh database (as tw-pg-aa2).
    TwPgAa3,
    /// The `--baseline` build as tw-pg-aa1 (before/after of the active-active mode in one run).
    TwBasePgAa1,
    /// The `--baseline` build as tw-pg-aa3.
    TwBasePgAa3,
}

impl Target {
    fn name(self) -> &'static str {
        match self {
            Target::TwSync => "tickwheel (fsync before ack)",
            Target::TwBaseSync => "baseline tickwheel (fsync before ack)",
            Target::TwF50 => "tickwheel -f 50",
            Target::TwNofsync => "tickwheel -F",
            Target::TwMem => "tickwheel --in-memory",
            Target::TwBaseMem => "baseline tickwheel --in-memory",
            Target::BsF50 => "beanstalkd -b (-f 50)",
            Target::BsF0 => "beanstalkd -b -f 0",
            Target::BsNofsync => "beanstalkd -b -F",
            Target::BsMem => "beanstalkd (in memory)",
            Target::TwPg => "tickwheel --postgres (1 node)",
            Target::TwBasePg => "baseline tickwheel --postgres",
            Target::TwPgAa1 => "tickwheel pg active-active, 1 node",
            Target::TwPgAa2 => "tickwheel pg active-active, 2 nodes",
            Target::TwPgAa3 => "tickwheel pg active-active, 3 nodes",
            Target::TwBasePgAa1 => "baseline pg active-active, 1 node",
            Target::TwBasePgAa3 => "baseline pg active-active, 3 nodes",
        }
    }

    /// Server processes the target runs.
    fn nodes(self) -> usize {
        match self {
            Target::TwPgAa2 => 2,
            Target::TwPgAa3 | Target::TwBasePgAa3 => 3,
            _ => 1,
        }
    }

    /// A target of the `--baseline` build.
    fn is_baseline(self) -> bool {
        matches!(
            self,
            Target::TwBaseSync
                | Target::TwBaseMem
                | Target::TwBasePg
                | Target::TwBasePgAa1
                | Target::TwBasePgAa3
        )
    }

    fn is_tickwheel(self) -> bool {
        matches!(
            self,
            Target::TwSync
                | Target::TwBaseSync
                | Target::TwF50
                | Target::TwNofsync
                | Target::TwMem
                | Target::TwBaseMem
                | Target::TwPg
                | Target::TwBasePg
                | Target::TwPgAa1
                | Target::TwPgAa2
                | Target::TwPgAa3
                | Target::TwBasePgAa1
                | Target::TwBasePgAa3
        )
    }
}

/// A running server, killed and its directory removed on drop.
struct Server {
    child: Child,
    addr: SocketAddr,
    /// The HTTP address of a tickwheel target started for `--commit-stats`.
    http: Option<SocketAddr>,
    /// Every node's address (`addr` first); more than one for the multi-node targets.
    addrs: Vec<SocketAddr>,
    /// The other nodes' processes.
    others: Vec<Server>,
    _dir: tempfile::TempDir,
    log: PathBuf,
}

impl Server {
    async fn start(cli: &Cli, target: Target) -> anyhow::Result<Server> {
        let dir = tempfile::Builder::new().prefix("sbench-").tempdir()?;
        let port = free_port()?;
        let pg_url = match target {
            Target::TwPg
            | Target::TwBasePg
            | Target::TwPgAa1
            | Target::TwPgAa2
            | Target::TwPgAa3
            | Target::TwBasePgAa1
            | Target::TwBasePgAa3 => pg_database()?,
            _ => String::new(),
        };
        let mut server = Server::start_one(cli, target, dir, port, &pg_url).await?;
        for _ in 1..target.nodes() {
            let dir = tempfile::Builder::new().prefix("sbench-").tempdir()?;
            let other = Server::start_one(cli, target, dir, free_port()?, &pg_url).await?;
            server.addrs.push(other.addr);
            server.others.push(other);
        }
        Ok(server)
    }

    async fn start_one(
        cli: &Cli,
        target: Target,
        dir: tempfile::TempDir,
        port: u16,
        pg_url: &str,
    ) -> anyhow::Result<Server> {
        let data = dir.path().join("data");
        std::fs::create_dir_all(&data)?;
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        let d = data.display().to_string();
        let p = port.to_string();
        let (program, args): (PathBuf, Vec<&str>) = match target {
            Target::TwSync => (tickwheel_path(cli)?, vec!["-b", &d]),
            Target::TwBaseSync => (baseline_path(cli, target)?, vec!["-b", &d]),
            Target::TwF50 => (tickwheel_path(cli)?, vec!["-b", &d, "-f", "50"]),
            Target::TwNofsync => (tickwheel_path(cli)?, vec!["-b", &d, "-F"]),
            Target::TwMem => (tickwheel_path(cli)?, vec!["--in-memory"]),
            Target::TwBaseMem => (baseline_path(cli, target)?, vec!["--in-memory"]),
            Target::BsF50 => (cli.beanstalkd.clone(), vec!["-b", &d]),
            Target::BsF0 => (cli.beanstalkd.clone(), vec!["-b", &d, "-f", "0"]),
            Target::BsNofsync => (cli.beanstalkd.clone(), vec!["-b", &d, "-F"]),
            Target::BsMem => (cli.beanstalkd.clone(), vec![]),
            Target::TwPg => (tickwheel_path(cli)?, vec!["--postgres", pg_url]),
            Target::TwBasePg => (baseline_path(cli, target)?, vec!["--postgres", pg_url]),
            Target::TwPgAa1 | Target::TwPgAa2 | Target::TwPgAa3 => (
                tickwheel_path(cli)?,
                vec!["--postgres", pg_url, "--postgres-mode", "active-active"],
            ),
            Target::TwBasePgAa1 | Target::TwBasePgAa3 => (
                baseline_path(cli, target)?,
                vec!["--postgres", pg_url, "--postgres-mode", "active-active"],
            ),
        };
        let log = dir.path().join("server.log");
        let logf = std::fs::File::create(&log)?;
        let mut cmd = Command::new(&program);
        let http = if cli.commit_stats && target.is_tickwheel() {
            let http: SocketAddr = ([127, 0, 0, 1], free_port()?).into();
            cmd.args(["--http", &http.to_string(), "--http-rate", "100000"]);
            Some(http)
        } else {
            None
        };
        if target.is_tickwheel() {
            let extra = if target.is_baseline() {
                &cli.baseline_args
            } else {
                &cli.tickwheel_args
            };
            if let Some(extra) = extra {
                cmd.args(extra.split_whitespace());
            }
        }
        cmd.args(["-l", "127.0.0.1", "-p", &p])
            .args(&args)
            .stdin(Stdio::null())
            .stdout(logf.try_clone()?)
            .stderr(logf);
        if target.is_tickwheel() {
            cmd.env("RUST_LOG", "warn");
        }
        let child = cmd
            .spawn()
            .with_context(|| format!("cannot start {}", program.display()))?;
        let mut server = Server {
            child,
            addr,
            http,
            addrs: vec![addr],
            others: Vec::new(),
            _dir: dir,
            log,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if TcpStream::connect(addr).await.is_ok() {
                return Ok(server);
            }
            if let Some(status) = server.child.try_wait()? {
                bail!("{} exited: {status}: {}", target.name(), server.log_tail());
            }
            if Instant::now() > deadline {
                bail!("{} did not listen within 20 s", target.name());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn log_tail(&self) -> String {
        let s = std::fs::read_to_string(&self.log).unwrap_or_default();
        let start = s.len().saturating_sub(2000);
        s.get(start..).unwrap_or_default().to_owned()
    }

    fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The `--baseline` build, which the `tw-base-*` target `target` runs.
fn baseline_path(cli: &Cli, target: Target) -> anyhow::Result<PathBuf> {
    cli.baseline.clone().ok_or_else(|| {
        let name = target
            .to_possible_value()
            .map_or_else(String::new, |v| v.get_name().to_owned());
        anyhow!("target {name} needs --baseline PATH")
    })
}

fn tickwheel_path(cli: &Cli) -> anyhow::Result<PathBuf> {
    if let Some(p) = &cli.tickwheel {
        return Ok(p.clone());
    }
    let exe = std::env::current_exe()?;
    let p = exe
        .parent()
        .ok_or_else(|| anyhow!("no parent dir"))?
        .join("tickwheel-server");
    if !p.exists() {
        bail!(
            "{} missing: build it with `cargo build --release -p tickwheel-server` \
             (same CARGO_TARGET_DIR) or pass --tickwheel",
            p.display()
        );
    }
    Ok(p)
}

/// The throw-away PostgreSQL cluster of this run (started on first use, stopped at exit).
static PG: Mutex<Option<tickwheel_testkit::pg::Cluster>> = Mutex::new(None);

/// A fresh database on the run's PostgreSQL cluster (one per server start: no state carries
/// over between runs).
fn pg_database() -> anyhow::Result<String> {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let mut pg = PG.lock().unwrap_or_else(|p| p.into_inner());
    if pg.is_none() {
        let cluster = tickwheel_testkit::pg::Cluster::start()
            .map_err(|e| anyhow!(e))?
            .ok_or_else(|| anyhow!("PostgreSQL is not installed (bash ci/postgres.sh)"))?;
        *pg = Some(cluster);
    }
    let cluster = pg.as_ref().ok_or_else(|| anyhow!("no cluster"))?;
    let name = format!("bench{}", NEXT.fetch_add(1, Ordering::Relaxed));
    cluster.create_db(&name).map_err(|e| anyhow!(e))
}

fn free_port() -> anyhow::Result<u16> {
    let l = StdListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}

/// Resident set of a process, bytes.
fn rss_bytes(pid: u32) -> anyhow::Result<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    for line in s.lines() {
        if let Some(rest) = line.strip_prefix("VmRSS:") {
            let kb: u64 = rest
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse()
                .context("VmRSS")?;
            return Ok(kb * 1024);
        }
    }
    bail!("no VmRSS for {pid}")
}

/// One client connection speaking the beanstalkd protocol, one request at a time.
struct Conn {
    r: BufReader<OwnedReadHalf>,
    w: OwnedWriteHalf,
    line: Vec<u8>,
    out: Vec<u8>,
}

/// The reply to a reserve.
enum Reserved {
    Job { id: u64, body: Vec<u8> },
    TimedOut,
    DeadlineSoon,
}

impl Conn {
    async fn connect(addr: SocketAddr) -> anyhow::Result<Conn> {
        let s = TcpStream::connect(addr).await?;
        s.set_nodelay(true)?;
        let (r, w) = s.into_split();
        Ok(Conn {
            r: BufReader::with_capacity(16 * 1024, r),
            w,
            line: Vec::with_capacity(128),
            out: Vec::with_capacity(512),
        })
    }

    async fn read_line(&mut self) -> anyhow::Result<&str> {
        self.line.clear();
        let n = self.r.read_until(b'\n', &mut self.line).await?;
        if n == 0 {
            bail!("server closed the connection");
        }
        let l = self
            .line
            .strip_suffix(b"\r\n")
            .ok_or_else(|| anyhow!("reply without CRLF: {:?}", self.line))?;
        Ok(std::str::from_utf8(l)?)
    }

    async fn put(&mut self, pri: u32, delay: u32, ttr: u32, body: &[u8]) -> anyhow::Result<u64> {
        self.out.clear();
        self.out
            .extend_from_slice(format!("put {pri} {delay} {ttr} {}\r\n", body.len()).as_bytes());
        self.out.extend_from_slice(body);
        self.out.extend_from_slice(b"\r\n");
        self.w.write_all(&self.out).await?;
        let l = self.read_line().await?;
        match l.strip_prefix("INSERTED ") {
            Some(id) => Ok(id.parse()?),
            None => bail!("put: {l}"),
        }
    }

    async fn reserve(&mut self, timeout: Option<u32>) -> anyhow::Result<Reserved> {
        match timeout {
            Some(t) => {
                self.w
                    .write_all(format!("reserve-with-timeout {t}\r\n").as_bytes())
                    .await?
            }
            None => self.w.write_all(b"reserve\r\n").await?,
        }
        let l = self.read_line().await?;
        if l == "TIMED_OUT" {
            return Ok(Reserved::TimedOut);
        }
        if l == "DEADLINE_SOON" {
            return Ok(Reserved::DeadlineSoon);
        }
        let mut it = l.split(' ');
        let (Some("RESERVED"), Some(id), Some(len)) = (it.next(), it.next(), it.next()) else {
            bail!("reserve: {l}");
        };
        let id: u64 = id.parse()?;
        let len: usize = len.parse()?;
        let mut body = vec![0; len + 2];
        self.r.read_exact(&mut body).await?;
        body.truncate(len);
        Ok(Reserved::Job { id, body })
    }

    async fn delete(&mut self, id: u64) -> anyhow::Result<()> {
        self.w
            .write_all(format!("delete {id}\r\n").as_bytes())
            .await?;
        let l = self.read_line().await?;
        if l != "DELETED" {
            bail!("delete {id}: {l}");
        }
        Ok(())
    }

    async fn simple(&mut self, cmd: &str) -> anyhow::Result<String> {
        self.w.write_all(cmd.as_bytes()).await?;
        Ok(self.read_line().await?.to_owned())
    }
}

fn fmt_all(v: &[f64], prec: usize) -> String {
    v.iter()
        .map(|x| format!("{x:.prec$}"))
        .collect::<Vec<_>>()
        .join(" / ")
}

// ----- throughput -----

/// Store commits so far and the seconds spent in them, from a tickwheel server's `/metrics`.
async fn commit_totals(http: SocketAddr) -> anyhow::Result<(f64, f64)> {
    let mut s = TcpStream::connect(http).await?;
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .await?;
    let mut text = String::new();
    s.read_to_string(&mut text).await?;
    let value = |name: &str| -> anyhow::Result<f64> {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .ok_or_else(|| anyhow!("no {name} in /metrics"))?
            .trim()
            .parse::<f64>()
            .map_err(|e| anyhow!("{name}: {e}"))
    };
    Ok((
        value("tickwheel_commit_duration_seconds_count")?,
        value("tickwheel_commit_duration_seconds_sum")?,
    ))
}

/// What `--commit-stats` prints for one phase: commits per operation and the share of the
/// phase's wall time the committer spent committing.
async fn commit_report(
    server: &Server,
    before: Option<(f64, f64)>,
    ops: usize,
    rate: f64,
) -> anyhow::Result<String> {
    let (Some(http), Some((c0, s0))) = (server.http, before) else {
        return Ok(String::new());
    };
    let (c1, s1) = commit_totals(http).await?;
    let (commits, secs) = (c1 - c0, s1 - s0);
    let wall = ops as f64 / rate;
    Ok(format!(
        " [{commits:.0} commits, {:.2}/op, {:.2} ms each, committer busy {:.0} %]",
        commits / ops as f64,
        secs * 1000.0 / commits.max(1.0),
        100.0 * secs / wall
    ))
}

/// A snapshot of a server process's CPU use: per thread name (digits dropped, so tokio's
/// numbered workers add up), nanoseconds on a CPU and times scheduled onto one; and the
/// process's minor page faults (of live and exited threads).
#[derive(Default)]
struct CpuSnap {
    threads: HashMap<String, (u64, u64)>,
    minflt: u64,
}

impl CpuSnap {
    fn take(pid: u32) -> CpuSnap {
        let mut snap = CpuSnap::default();
        if let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            // Fields after the command name, which ends at the last ')': minflt is field 10.
            if let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) {
                snap.minflt = rest
                    .split_whitespace()
                    .nth(7)
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0);
            }
        }
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            return snap;
        };
        for task in tasks.flatten() {
            let path = task.path();
            let name = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
            let name: String = name
                .trim()
                .chars()
                .filter(|c| !c.is_ascii_digit())
                .collect();
            let sched = std::fs::read_to_string(path.join("schedstat")).unwrap_or_default();
            let mut f = sched
                .split_whitespace()
                .map(|v| v.parse::<u64>().unwrap_or(0));
            let (run, _wait, slices) = (
                f.next().unwrap_or(0),
                f.next().unwrap_or(0),
                f.next().unwrap_or(0),
            );
            let e = snap.threads.entry(name).or_default();
            e.0 += run;
            e.1 += slices;
        }
        snap
    }

    /// What the process used between `self` and `later`, per operation: CPU µs in total and
    /// per thread name (the largest first, as `name µs/times on a CPU`), times on a CPU,
    /// minor faults.
    fn report(&self, later: &CpuSnap, ops: usize) -> String {
        let ops = ops.max(1) as f64;
        let mut per: Vec<(String, f64, f64)> = later
            .threads
            .iter()
            .map(|(name, &(run, slices))| {
                let (r0, s0) = self.threads.get(name).copied().unwrap_or((0, 0));
                (
                    name.clone(),
                    run.saturating_sub(r0) as f64 / 1000.0 / ops,
                    slices.saturating_sub(s0) as f64 / ops,
                )
            })
            .collect();
        per.sort_by(|a, b| b.1.total_cmp(&a.1));
        let total: f64 = per.iter().map(|p| p.1).sum();
        let slices: f64 = per.iter().map(|p| p.2).sum();
        let parts: Vec<String> = per
            .iter()
            .filter(|p| p.1 >= 0.05)
            .take(4)
            .map(|p| format!("{} {:.1}/{:.2}", p.0, p.1, p.2))
            .collect();
        format!(
            " [cpu {total:.1} µs/op ({}), on-cpu {slices:.2}/op, minflt {:.2}/op]",
            parts.join(", "),
            later.minflt.saturating_sub(self.minflt) as f64 / ops
        )
    }
}

/// Runs `per_conn` iterations of `op` on each of `conns` connections (spread over `addrs` in
/// turn); ops/s over all of them.
async fn phase<F, Fut>(
    addrs: &[SocketAddr],
    conns: usize,
    per_conn: usize,
    limit: Duration,
    op: F,
) -> anyhow::Result<(f64, usize)>
where
    F: Fn(Conn, usize, Instant) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<usize>> + 'static,
{
    let mut cs = Vec::with_capacity(conns);
    for i in 0..conns {
        cs.push(Conn::connect(addrs[i % addrs.len()]).await?);
    }
    let start = Instant::now();
    let deadline = start + limit;
    let set = tokio::task::LocalSet::new();
    let mut handles = Vec::new();
    for c in cs {
        handles.push(set.spawn_local(op(c, per_conn, deadline)));
    }
    let done = set
        .run_until(async {
            let mut total = 0;
            for h in handles {
                total += h.await??;
            }
            anyhow::Ok(total)
        })
        .await?;
    let secs = start.elapsed().as_secs_f64();
    Ok((done as f64 / secs, done))
}

async fn throughput(cli: &Cli) -> anyhow::Result<()> {
    let targets = if cli.targets.is_empty() {
        vec![
            Target::TwSync,
            Target::TwF50,
            Target::TwNofsync,
            Target::BsF50,
            Target::BsNofsync,
            Target::BsMem,
        ]
    } else {
        cli.targets.clone()
    };
    let body = Arc::new(vec![b'x'; cli.body]);
    let limit = Duration::from_secs(cli.phase_limit);
    let mut cycles: HashMap<Target, Vec<f64>> = HashMap::new();
    let mut puts: HashMap<Target, Vec<f64>> = HashMap::new();
    for run in 0..cli.runs {
        for &t in &targets {
            let server = Server::start(cli, t).await?;
            let totals = match server.http {
                Some(http) => Some(commit_totals(http).await?),
                None => None,
            };
            let cpu0 = cli.cpu.then(|| CpuSnap::take(server.pid()));
            let b = body.clone();
            let (cyc, ncyc) = phase(
                &server.addrs,
                cli.conns,
                cli.per_conn,
                limit,
                move |mut c, n, dl| {
                    let b = b.clone();
                    async move {
                        let mut done = 0;
                        while done < n && Instant::now() < dl {
                            c.put(0, 0, 60, &b).await?;
                            match c.reserve(None).await? {
                                Reserved::Job { id, .. } => c.delete(id).await?,
                                _ => bail!("reserve without a job"),
                            }
                            done += 1;
                        }
                        Ok(done)
                    }
                },
            )
            .await
            .with_context(|| format!("{} cycles", t.name()))?;
            let mut cycle_commits = commit_report(&server, totals, ncyc, cyc).await?;
            if let Some(c0) = &cpu0 {
                cycle_commits += &c0.report(&CpuSnap::take(server.pid()), ncyc);
            }
            let totals = match server.http {
                Some(http) => Some(commit_totals(http).await?),
                None => None,
            };
            let cpu0 = cli.cpu.then(|| CpuSnap::take(server.pid()));
            let b = body.clone();
            let (pps, nput) = phase(
                &server.addrs,
                cli.conns,
                cli.per_conn,
                limit,
                move |mut c, n, dl| {
                    let b = b.clone();
                    async move {
                        let mut done = 0;
                        while done < n && Instant::now() < dl {
                            c.put(0, 0, 60, &b).await?;
                            done += 1;
                        }
                        Ok(done)
                    }
                },
            )
            .await
            .with_context(|| format!("{} puts", t.name()))?;
            let mut put_commits = commit_report(&server, totals, nput, pps).await?;
            if let Some(c0) = &cpu0 {
                put_commits += &c0.report(&CpuSnap::take(server.pid()), nput);
            }
            println!(
                "run {run} {:<30} cycles/s {cyc:>9.0} ({ncyc} cycles, {:>9.0} ops/s){cycle_commits}  puts/s {pps:>9.0} ({nput}){put_commits}",
                t.name(),
                cyc * 3.0
            );
            cycles.entry(t).or_default().push(cyc);
            puts.entry(t).or_default().push(pps);
        }
    }
    let base = Target::BsF50;
    println!(
        "\n## throughput: {} connections, {} B bodies, {} cycles + {} puts per connection, medians of {} runs",
        cli.conns, cli.body, cli.per_conn, cli.per_conn, cli.runs
    );
    println!("| server | put/reserve/delete cycles/s | ops/s (3 per cycle) | vs beanstalkd -b (-f 50) | puts alone/s | vs beanstalkd -b (-f 50) | runs (cycles/s) | runs (puts/s) |");
    println!("|---|---:|---:|---:|---:|---:|---|---|");
    for &t in &targets {
        let c = cycles.get(&t).cloned().unwrap_or_default();
        let p = puts.get(&t).cloned().unwrap_or_default();
        let ratio = |mine: &[f64], base: Option<&Vec<f64>>| -> String {
            match base {
                Some(b) if b.len() == mine.len() => {
                    let mut r: Vec<f64> = mine.iter().zip(b).map(|(m, b)| m / b).collect();
                    format!("{:.2}×", median(&mut r))
                }
                _ => "–".into(),
            }
        };
        let rc = ratio(&c, cycles.get(&base));
        let rp = ratio(&p, puts.get(&base));
        let (mut c2, mut p2) = (c.clone(), p.clone());
        println!(
            "| {} | {:.0} | {:.0} | {rc} | {:.0} | {rp} | {} | {} |",
            t.name(),
            median(&mut c2),
            median(&mut c2) * 3.0,
            median(&mut p2),
            fmt_all(&c, 0),
            fmt_all(&p, 0)
        );
    }
    Ok(())
}

// ----- lateness -----

struct LateResult {
    p50: f64,
    p99: f64,
    p999: f64,
    max: f64,
    early: usize,
    received: usize,
    expected: usize,
    put_lag_max: f64,
    worst_early: f64,
}

/// Milliseconds since `t0`.
fn ms(t0: Instant) -> f64 {
    t0.elapsed().as_secs_f64() * 1000.0
}

async fn lateness_once(cli: &Cli, t: Target) -> anyhow::Result<LateResult> {
    let server = Server::start(cli, t).await?;
    let total = cli.rate * cli.put_secs as usize;
    // Per job: (put sent ms, put acked ms, delay ms); NaN until known.
    let sent = Arc::new(Mutex::new(vec![(f64::NAN, f64::NAN, 0.0); total]));
    let received = Arc::new(Mutex::new(Vec::<(usize, f64)>::with_capacity(total)));
    let got = Arc::new(AtomicUsize::new(0));
    // Multi-node targets: producers and workers round-robin over the nodes.
    let nodes = server.addrs.clone();
    let mut prods = Vec::new();
    for i in 0..cli.producers {
        prods.push(Conn::connect(nodes[i % nodes.len()]).await?);
    }
    let mut works = Vec::new();
    for i in 0..cli.workers {
        let mut c = Conn::connect(nodes[i % nodes.len()]).await?;
        c.simple("watch default\r\n").await?;
        works.push(c);
    }
    let t0 = Instant::now();
    let end = t0 + Duration::from_secs(cli.put_secs + 3 + 20);
    let set = tokio::task::LocalSet::new();
    let mut handles = Vec::new();
    let body_len = cli.body.max(12);
    let lag = Arc::new(Mutex::new(0.0f64));
    for (p, mut c) in prods.into_iter().enumerate() {
        let sent = sent.clone();
        let lag = lag.clone();
        let (producers, rate) = (cli.producers, cli.rate);
        handles.push(set.spawn_local(async move {
            let mut body = vec![b'.'; body_len];
            let mut k = p;
            while k < total {
                // Job k is scheduled at k / rate seconds.
                let at = t0 + Duration::from_secs_f64(k as f64 / rate as f64);
                let now = Instant::now();
                if at > now {
                    tokio::time::sleep_until(at.into()).await;
                } else {
                    let behind = (now - at).as_secs_f64() * 1000.0;
                    let mut l = lag.lock().map_err(|_| anyhow!("poisoned"))?;
                    *l = l.max(behind);
                }
                if Instant::now() > end {
                    break;
                }
                let delay_s = 1 + (k % 3) as u32;
                let tag = format!("{k:012}");
                body[..12].copy_from_slice(tag.as_bytes());
                let s = ms(t0);
                c.put(0, delay_s, 600, &body).await?;
                let a = ms(t0);
                sent.lock().map_err(|_| anyhow!("poisoned"))?[k] = (s, a, delay_s as f64 * 1000.0);
                k += producers;
            }
            anyhow::Ok(None)
        }));
    }
    for mut c in works {
        let received = received.clone();
        let got = got.clone();
        handles.push(set.spawn_local(async move {
            // Reserve only (no delete): each job stays reserved with a 600 s TTR, so the
            // workers' path has no durable write and delivery alone is measured.
            while got.load(Ordering::Relaxed) < total && Instant::now() < end {
                match c.reserve(Some(1)).await? {
                    Reserved::Job { body, .. } => {
                        let at = ms(t0);
                        let k: usize = std::str::from_utf8(&body[..12])?.parse()?;
                        received
                            .lock()
                            .map_err(|_| anyhow!("poisoned"))?
                            .push((k, at));
                        got.fetch_add(1, Ordering::Relaxed);
                    }
                    Reserved::TimedOut => {}
                    Reserved::DeadlineSoon => bail!("DEADLINE_SOON with a 600 s TTR"),
                }
            }
            // Keep the connection open until every worker is done: closing it would return
            // its reserved jobs to ready and hand them out again.
            anyhow::Ok(Some(c))
        }));
    }
    let kept = set
        .run_until(async {
            let mut kept = Vec::new();
            for h in handles {
                kept.extend(h.await??);
            }
            anyhow::Ok(kept)
        })
        .await
        .with_context(|| format!("lateness on {}", t.name()))?;
    drop(kept);
    drop(server);
    let sent = sent.lock().map_err(|_| anyhow!("poisoned"))?;
    let received = received.lock().map_err(|_| anyhow!("poisoned"))?;
    let mut late = Vec::with_capacity(received.len());
    let mut early = 0;
    let mut worst_early = 0.0f64;
    let mut first = vec![false; total];
    let mut duplicates = 0;
    for &(k, at) in received.iter() {
        if std::mem::replace(&mut first[k], true) {
            duplicates += 1;
            continue;
        }
        let (s, a, d) = sent[k];
        if at < s + d {
            early += 1;
            worst_early = worst_early.max(s + d - at);
        }
        late.push(at - (a + d));
    }
    if std::env::var_os("SBENCH_DEBUG").is_some() {
        let mut seen = HashMap::new();
        for &(k, at) in received.iter() {
            seen.entry(k).or_insert_with(Vec::new).push(at);
        }
        let mut shown = 0;
        for (k, ats) in &seen {
            let (s, a, d) = sent[*k];
            if ats.len() > 1 && shown < 15 {
                eprintln!("job {k}: sent {s:.2} acked {a:.2} delay {d} received at {ats:?}");
                shown += 1;
            }
        }
        eprintln!("distinct {} of {} received", seen.len(), received.len());
    }
    late.sort_by(f64::total_cmp);
    let put_lag_max = *lag.lock().map_err(|_| anyhow!("poisoned"))?;
    Ok(LateResult {
        p50: percentile(&late, 0.5),
        p99: percentile(&late, 0.99),
        p999: percentile(&late, 0.999),
        max: late.last().copied().unwrap_or(f64::NAN),
        early,
        received: received.len() - duplicates,
        expected: total,
        put_lag_max,
        worst_early,
    })
}

async fn lateness(cli: &Cli) -> anyhow::Result<()> {
    let targets = if cli.targets.is_empty() {
        vec![Target::TwSync, Target::BsF50]
    } else {
        cli.targets.clone()
    };
    let mut res: HashMap<Target, Vec<LateResult>> = HashMap::new();
    for run in 0..cli.runs {
        for &t in &targets {
            let r = lateness_once(cli, t).await?;
            println!(
                "run {run} {:<30} p50 {:>7.2} ms  p99 {:>7.2} ms  p99.9 {:>7.2} ms  max {:>7.2} ms  early {} (worst {:.2} ms)  received {}/{}  producer lag max {:.1} ms",
                t.name(), r.p50, r.p99, r.p999, r.max, r.early, r.worst_early, r.received, r.expected, r.put_lag_max
            );
            res.entry(t).or_default().push(r);
        }
    }
    println!(
        "\n## lateness: {} puts/s for {} s, delays 1/2/3 s round-robin, {} producers, {} workers (reserve only), medians of {} runs",
        cli.rate, cli.put_secs, cli.producers, cli.workers, cli.runs
    );
    println!("lateness = reserve reply received − (put ack received + delay); early = reserve reply received < put sent + delay");
    println!(
        "| server | p50 ms | p99 ms | p99.9 ms | max ms | early (sum) | received | runs p99 ms |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---|");
    for &t in &targets {
        let rs = res.get(&t).map(Vec::as_slice).unwrap_or_default();
        let m = |f: &dyn Fn(&LateResult) -> f64| median(&mut rs.iter().map(f).collect::<Vec<_>>());
        let p99s: Vec<f64> = rs.iter().map(|r| r.p99).collect();
        println!(
            "| {} | {:.2} | {:.2} | {:.2} | {:.2} | {} | {} | {} |",
            t.name(),
            m(&|r| r.p50),
            m(&|r| r.p99),
            m(&|r| r.p999),
            m(&|r| r.max),
            rs.iter().map(|r| r.early).sum::<usize>(),
            rs.iter()
                .map(|r| format!("{}/{}", r.received, r.expected))
                .collect::<Vec<_>>()
                .join(", "),
            fmt_all(&p99s, 2)
        );
    }
    Ok(())
}

// ----- idle connections -----

async fn idle_once(cli: &Cli, t: Target) -> anyhow::Result<(f64, f64, usize)> {
    let mut server = Server::start(cli, t).await?;
    // Baseline with one connection that has done a round trip.
    let mut first = Conn::connect(server.addr).await?;
    first.simple("list-tube-used\r\n").await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = rss_bytes(server.pid())?;
    let deadline = Instant::now() + Duration::from_secs(cli.phase_limit);
    let mut conns = Vec::with_capacity(cli.idle_conns);
    while conns.len() < cli.idle_conns && Instant::now() < deadline {
        let batch = (cli.idle_conns - conns.len()).min(200);
        let mut js = tokio::task::JoinSet::new();
        for _ in 0..batch {
            let addr = server.addr;
            js.spawn(async move { TcpStream::connect(addr).await });
        }
        while let Some(r) = js.join_next().await {
            conns.push(r??);
        }
    }
    // Let the server accept and set up every connection, then check it still answers.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let reply = first.simple("list-tube-used\r\n").await?;
    if !reply.starts_with("USING") && !reply.starts_with("OK") {
        bail!("{}: {reply}", t.name());
    }
    let after = rss_bytes(server.pid())?;
    // Then make each connection do one round trip (buffers touched), still idle after.
    let mut touched = 0;
    let mut split: Vec<Conn> = Vec::with_capacity(conns.len());
    for s in conns {
        let (r, w) = s.into_split();
        split.push(Conn {
            r: BufReader::with_capacity(256, r),
            w,
            line: Vec::new(),
            out: Vec::new(),
        });
    }
    for chunk in split.chunks_mut(500) {
        let futs = chunk.iter_mut().map(|c| c.simple("list-tube-used\r\n"));
        for r in futures_join_all(futs).await {
            r?;
            touched += 1;
        }
        if Instant::now() > deadline {
            break;
        }
    }
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let after_touch = rss_bytes(server.pid())?;
    if !server.alive() {
        bail!("{} died: {}", t.name(), server.log_tail());
    }
    let n = split.len() as f64;
    println!(
        "{:<30} conns {} base {:.1} MB  +{:.1} MB idle ({:.0} B/conn)  +{:.1} MB after one round trip each ({touched} touched, {:.0} B/conn)",
        t.name(),
        split.len(),
        before as f64 / 1e6,
        (after as f64 - before as f64) / 1e6,
        (after as f64 - before as f64) / n,
        (after_touch as f64 - before as f64) / 1e6,
        (after_touch as f64 - before as f64) / n,
    );
    Ok((
        (after as f64 - before as f64) / 1e6,
        (after_touch as f64 - before as f64) / 1e6,
        split.len(),
    ))
}

/// Awaits all futures concurrently (no extra crate).
async fn futures_join_all<F, T>(futs: impl Iterator<Item = F>) -> Vec<T>
where
    F: std::future::Future<Output = T>,
{
    let futs: Vec<_> = futs.map(Box::pin).collect();
    let mut out = Vec::with_capacity(futs.len());
    let mut pending: Vec<Option<std::pin::Pin<Box<F>>>> = futs.into_iter().map(Some).collect();
    let mut results: Vec<Option<T>> = (0..pending.len()).map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut all = true;
        for (i, slot) in pending.iter_mut().enumerate() {
            if let Some(f) = slot {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => {
                        results[i] = Some(v);
                        *slot = None;
                    }
                    std::task::Poll::Pending => all = false,
                }
            }
        }
        if all {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await;
    out.extend(results.into_iter().flatten());
    out
}

async fn idle(cli: &Cli) -> anyhow::Result<()> {
    let targets = if cli.targets.is_empty() {
        vec![Target::TwSync, Target::BsF50]
    } else {
        cli.targets.clone()
    };
    let mut res: HashMap<Target, Vec<(f64, f64, usize)>> = HashMap::new();
    for _ in 0..cli.runs {
        for &t in &targets {
            let r = idle_once(cli, t).await?;
            res.entry(t).or_default().push(r);
        }
    }
    println!(
        "\n## idle connections: {} connections, server VmRSS growth, medians of {} runs",
        cli.idle_conns, cli.runs
    );
    println!("| server | connections | RSS growth idle (MB) | per connection (B) | after one round trip each (MB) | runs idle MB |");
    println!("|---|---:|---:|---:|---:|---|");
    for &t in &targets {
        let rs = res.get(&t).map(Vec::as_slice).unwrap_or_default();
        let idle: Vec<f64> = rs.iter().map(|r| r.0).collect();
        let n = rs.first().map_or(0, |r| r.2);
        let mi = median(&mut idle.clone());
        println!(
            "| {} | {n} | {mi:.1} | {:.0} | {:.1} | {} |",
            t.name(),
            mi * 1e6 / n.max(1) as f64,
            median(&mut rs.iter().map(|r| r.1).collect::<Vec<_>>()),
            fmt_all(&idle, 1)
        );
    }
    Ok(())
}

// ----- sync: one connection, one put at a time -----

/// Latency percentiles of a sample, in ms: (p50, p99, p99.9, max).
fn dist(v: &mut [f64]) -> (f64, f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    (
        percentile(v, 0.5),
        percentile(v, 0.99),
        percentile(v, 0.999),
        v.last().copied().unwrap_or(f64::NAN),
    )
}

/// Latency samples (ms) of [`fsync_probe`], one per way of preparing the file.
struct Probe {
    /// Overwriting blocks written and synced beforehand: no metadata to sync, the floor.
    overwrite: Vec<f64>,
    /// Appending into a file made long with `set_len` only (sparse, as the storage engine
    /// preallocates its journal): a sync also commits block allocations.
    sparse: Vec<f64>,
    /// Writing into `fallocate`d, never-written extents: a sync also commits the conversion
    /// of unwritten extents.
    fallocated: Vec<f64>,
}

/// The disk's floor, in a temp dir beside the servers' data directories: `n` times, write
/// 4 KiB and `fdatasync`, into three files prepared differently (see [`Probe`]).
fn fsync_probe(n: usize) -> anyhow::Result<Probe> {
    use std::io::{Seek, SeekFrom, Write};
    let dir = tempfile::Builder::new().prefix("sbench-probe-").tempdir()?;
    let block = [0x5au8; 4096];
    let timed = |f: &mut std::fs::File| -> anyhow::Result<Vec<f64>> {
        let mut lat = Vec::with_capacity(n);
        for _ in 0..n {
            f.write_all(&block)?;
            let t = Instant::now();
            f.sync_data()?;
            lat.push(t.elapsed().as_secs_f64() * 1000.0);
        }
        Ok(lat)
    };
    let mut f = std::fs::File::create(dir.path().join("written"))?;
    for _ in 0..n {
        f.write_all(&block)?;
    }
    f.sync_all()?;
    f.seek(SeekFrom::Start(0))?;
    let overwrite = timed(&mut f)?;
    let mut f = std::fs::File::create(dir.path().join("sparse"))?;
    f.set_len((n * block.len()) as u64)?;
    f.sync_all()?;
    let sparse = timed(&mut f)?;
    let mut f = std::fs::File::create(dir.path().join("fallocated"))?;
    rustix::fs::fallocate(
        &f,
        rustix::fs::FallocateFlags::empty(),
        0,
        (n * block.len()) as u64,
    )?;
    f.sync_all()?;
    let fallocated = timed(&mut f)?;
    Ok(Probe {
        overwrite,
        sparse,
        fallocated,
    })
}

async fn sync(cli: &Cli) -> anyhow::Result<()> {
    let targets = if cli.targets.is_empty() {
        vec![Target::TwSync, Target::BsF0, Target::BsF50]
    } else {
        cli.targets.clone()
    };
    let body = vec![b'x'; cli.body];
    let mut p50s: HashMap<Target, Vec<f64>> = HashMap::new();
    let mut probe50 = Vec::new();
    let mut sparse50 = Vec::new();
    let mut falloc50 = Vec::new();
    for run in 0..cli.runs {
        let Probe {
            overwrite: mut probe,
            mut sparse,
            mut fallocated,
        } = tokio::task::spawn_blocking({
            let n = cli.sync_puts.min(1000);
            move || fsync_probe(n)
        })
        .await??;
        let (p50, p99, _, max) = dist(&mut probe);
        println!(
            "run {run} {:<30} p50 {p50:>7.3} ms  p99 {p99:>7.3} ms  max {max:>7.3} ms",
            "disk fdatasync (overwrite)"
        );
        probe50.push(p50);
        let (s50, s99, _, smax) = dist(&mut sparse);
        println!(
            "run {run} {:<30} p50 {s50:>7.3} ms  p99 {s99:>7.3} ms  max {smax:>7.3} ms",
            "disk fdatasync (sparse append)"
        );
        sparse50.push(s50);
        let (f50, f99, _, fmax) = dist(&mut fallocated);
        println!(
            "run {run} {:<30} p50 {f50:>7.3} ms  p99 {f99:>7.3} ms  max {fmax:>7.3} ms",
            "disk fdatasync (fallocated)"
        );
        falloc50.push(f50);
        for &t in &targets {
            let server = Server::start(cli, t).await?;
            let mut c = Conn::connect(server.addr).await?;
            let mut lat = Vec::with_capacity(cli.sync_puts);
            let cpu0 = cli.cpu.then(|| CpuSnap::take(server.pid()));
            let deadline = Instant::now() + Duration::from_secs(cli.phase_limit);
            for _ in 0..cli.sync_puts {
                let s = Instant::now();
                c.put(0, 0, 60, &body).await?;
                lat.push(s.elapsed().as_secs_f64() * 1000.0);
                if Instant::now() > deadline {
                    break;
                }
            }
            let cpu = cpu0.map_or(String::new(), |c0| {
                c0.report(&CpuSnap::take(server.pid()), lat.len())
            });
            let (p50, p99, _, max) = dist(&mut lat);
            println!(
                "run {run} {:<30} p50 {p50:>7.3} ms  p99 {p99:>7.3} ms  max {max:>7.3} ms  ({} puts){cpu}",
                t.name(),
                lat.len()
            );
            p50s.entry(t).or_default().push(p50);
        }
    }
    println!(
        "\n## sync: one connection, one {} B put at a time, {} puts; median of {} runs of each run's p50",
        cli.body, cli.sync_puts, cli.runs
    );
    println!("| what | put round trip p50 ms | vs disk fdatasync p50 (same run) | runs p50 ms |");
    println!("|---|---:|---:|---|");
    println!(
        "| disk fdatasync, 4 KiB overwrite | {:.3} | 1.00× | {} |",
        median(&mut probe50.clone()),
        fmt_all(&probe50, 3)
    );
    let mut r: Vec<f64> = sparse50.iter().zip(&probe50).map(|(a, b)| a / b).collect();
    println!(
        "| disk fdatasync, 4 KiB into a sparse (set_len) file | {:.3} | {:.2}× | {} |",
        median(&mut sparse50.clone()),
        median(&mut r),
        fmt_all(&sparse50, 3)
    );
    let mut r: Vec<f64> = falloc50.iter().zip(&probe50).map(|(a, b)| a / b).collect();
    println!(
        "| disk fdatasync, 4 KiB into fallocated (unwritten) extents | {:.3} | {:.2}× | {} |",
        median(&mut falloc50.clone()),
        median(&mut r),
        fmt_all(&falloc50, 3)
    );
    for &t in &targets {
        let v = p50s.get(&t).cloned().unwrap_or_default();
        let mut r: Vec<f64> = v.iter().zip(&probe50).map(|(a, b)| a / b).collect();
        println!(
            "| {} | {:.3} | {:.2}× | {} |",
            t.name(),
            median(&mut v.clone()),
            median(&mut r),
            fmt_all(&v, 3)
        );
    }
    Ok(())
}

// ----- pipelined: many connections, many puts in flight each -----

/// Keeps `depth` puts in flight on one connection until `n` are acknowledged; returns each
/// put's ack latency (ms).
async fn pipelined_conn(
    mut c: Conn,
    n: usize,
    depth: usize,
    body: Arc<Vec<u8>>,
    deadline: Instant,
) -> anyhow::Result<Vec<f64>> {
    let mut frame = format!("put 0 0 60 {}\r\n", body.len()).into_bytes();
    frame.extend_from_slice(&body);
    frame.extend_from_slice(b"\r\n");
    let mut sent = std::collections::VecDeque::with_capacity(depth);
    let mut lat = Vec::with_capacity(n);
    let mut out = Vec::with_capacity(frame.len() * depth);
    let mut issued = 0;
    while lat.len() < n {
        out.clear();
        while sent.len() < depth && issued < n && Instant::now() < deadline {
            out.extend_from_slice(&frame);
            sent.push_back(Instant::now());
            issued += 1;
        }
        if !out.is_empty() {
            c.w.write_all(&out).await?;
        }
        let Some(t) = sent.pop_front() else { break };
        let l = c.read_line().await?;
        if !l.starts_with("INSERTED ") {
            bail!("put: {l}");
        }
        lat.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    Ok(lat)
}

async fn pipelined(cli: &Cli) -> anyhow::Result<()> {
    let targets = if cli.targets.is_empty() {
        vec![Target::TwSync, Target::BsF50]
    } else {
        cli.targets.clone()
    };
    let body = Arc::new(vec![b'x'; cli.body]);
    // Per run: (puts/s, ack p50, p99, p99.9, max).
    type Run = (f64, f64, f64, f64, f64);
    let mut res: HashMap<Target, Vec<Run>> = HashMap::new();
    for run in 0..cli.runs {
        for &t in &targets {
            let server = Server::start(cli, t).await?;
            let mut cs = Vec::with_capacity(cli.conns);
            for _ in 0..cli.conns {
                cs.push(Conn::connect(server.addr).await?);
            }
            let totals = match server.http {
                Some(http) => Some(commit_totals(http).await?),
                None => None,
            };
            let cpu0 = cli.cpu.then(|| CpuSnap::take(server.pid()));
            let deadline = Instant::now() + Duration::from_secs(cli.phase_limit);
            let start = Instant::now();
            let set = tokio::task::LocalSet::new();
            let handles: Vec<_> = cs
                .into_iter()
                .map(|c| {
                    set.spawn_local(pipelined_conn(
                        c,
                        cli.per_conn,
                        cli.depth,
                        body.clone(),
                        deadline,
                    ))
                })
                .collect();
            let mut lat = set
                .run_until(async {
                    let mut all = Vec::new();
                    for h in handles {
                        all.extend(h.await??);
                    }
                    anyhow::Ok(all)
                })
                .await
                .with_context(|| format!("pipelined on {}", t.name()))?;
            let rate = lat.len() as f64 / start.elapsed().as_secs_f64();
            let mut commits = commit_report(&server, totals, lat.len(), rate).await?;
            if let Some(c0) = &cpu0 {
                commits += &c0.report(&CpuSnap::take(server.pid()), lat.len());
            }
            let (p50, p99, p999, max) = dist(&mut lat);
            println!(
                "run {run} {:<30} puts/s {rate:>9.0}  ack p50 {p50:>7.2} ms  p99 {p99:>7.2} ms  p99.9 {p999:>7.2} ms  max {max:>7.2} ms  ({} puts){commits}",
                t.name(),
                lat.len()
            );
            res.entry(t).or_default().push((rate, p50, p99, p999, max));
        }
    }
    println!(
        "\n## pipelined: {} connections × {} puts in flight, {} B bodies, {} puts per connection, medians of {} runs",
        cli.conns, cli.depth, cli.body, cli.per_conn, cli.runs
    );
    println!("| server | puts/s | ack p50 ms | p99 ms | p99.9 ms | max ms | runs max ms |");
    println!("|---|---:|---:|---:|---:|---:|---|");
    for &t in &targets {
        let rs = res.get(&t).map(Vec::as_slice).unwrap_or_default();
        let m = |f: &dyn Fn(&Run) -> f64| median(&mut rs.iter().map(f).collect::<Vec<_>>());
        let maxes: Vec<f64> = rs.iter().map(|r| r.4).collect();
        println!(
            "| {} | {:.0} | {:.2} | {:.2} | {:.2} | {:.2} | {} |",
            t.name(),
            m(&|r| r.0),
            m(&|r| r.1),
            m(&|r| r.2),
            m(&|r| r.3),
            m(&|r| r.4),
            fmt_all(&maxes, 1)
        );
    }
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    // Room for 10k client sockets here and 10k in the server (it inherits the limit).
    let (_, hard) = rlimit::Resource::NOFILE.get()?;
    rlimit::Resource::NOFILE.set(hard, hard)?;
    if cli.workload == Workload::Idle && hard < cli.idle_conns as u64 + 100 {
        eprintln!(
            "warning: RLIMIT_NOFILE hard limit {hard} < {} connections",
            cli.idle_conns
        );
    }
    // One client thread: the other core is left to the server under test.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let result = rt.block_on(async {
        match cli.workload {
            Workload::Throughput => throughput(&cli).await,
            Workload::Lateness => lateness(&cli).await,
            Workload::Idle => idle(&cli).await,
            Workload::Sync => sync(&cli).await,
            Workload::Pipelined => pipelined(&cli).await,
        }
    });
    // Stops the PostgreSQL cluster, if one was started.
    drop(PG.lock().unwrap_or_else(|p| p.into_inner()).take());
    result
}
