//! `tickwheel-server`: a durable delayed-job server speaking the beanstalkd protocol.
//!
//! Any beanstalkd client works unchanged, and the same command line means the same thing:
//! without a data directory (`-b`) jobs live in memory only. With one, unlike beanstalkd, every
//! reply that reports a change (`INSERTED`, `DELETED`, `RELEASED`, …) is sent only once the
//! change is on disk (fsynced, shared by concurrent clients: group commit); `-f MS` and `-F`
//! trade that for speed as beanstalkd does. One process at a time may use a data directory.
//!
//! The layers: [`tickwheel_proto`] decodes commands, [`tickwheel_queue::Engine`] runs them
//! (a deterministic state machine on a timing wheel), [`tickwheel_store`] makes them durable.
//! This crate wires them to sockets and a clock; commits go through the store's group commit.
//!
//! The clock is [`Config::clock`], a [`tickwheel`] timer crate [`Clock`]: every reading of the
//! time (the engine's wall-clock milliseconds, `uptime`, the timer driver's sleeps) goes
//! through it. The binary uses the [`SystemClock`]; a test hands in a [`ManualClock`] and
//! moves the whole server's time by hand (`tests/manual_clock.rs`).
//!
//! ```no_run
//! use tickwheel_server::{Config, Listener, Server};
//!
//! # async fn demo() -> anyhow::Result<()> {
//! let config = Config { data_dir: Some("jobs".into()), ..Config::default() };
//! let server = Server::open(&config)?;
//! let listener = Listener::bind("127.0.0.1:11300").await?;
//! server.run(listener, tokio_util::sync::CancellationToken::new()).await;
//! # Ok(())
//! # }
//! ```

#![forbid(unsafe_code)]

mod cluster;
mod conn;
mod http;
mod shared;
mod stats;

pub use http::{HttpHandle, HttpOptions, HttpServer};

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
pub use tickwheel::{Clock, ManualClock, SystemClock};
use tickwheel_pg::{ActiveLock, PgStore};
pub use tickwheel_pg::{PgOptions, SchemaName};
use tickwheel_queue::{DurableState, Engine, JobId};
use tickwheel_store::{DiskOptions, DiskStore, Durability, MemStore, Store};
use tokio::net::{TcpListener, UnixListener};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::shared::Shared;

/// The default memory window: ten minutes of delayed jobs in memory.
pub const DEFAULT_WINDOW_MS: u64 = 10 * 60 * 1000;

/// Server settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// Where jobs are stored; `None` (the default, as beanstalkd without `-b`) keeps them in
    /// memory only. A directory is locked while the server runs: opening one that another
    /// server holds fails, naming its pid.
    pub data_dir: Option<PathBuf>,
    /// When a write is acknowledged.
    pub durability: Durability,
    /// The largest job body accepted (beanstalkd's `-z`).
    pub max_job_size: usize,
    /// Keep in memory only delayed jobs due within this many ms; later ones stay on disk
    /// until their time nears. `None` keeps every job in memory.
    pub window: Option<u64>,
    /// Where the server reads the time: [`SystemClock`] (the default), or a [`ManualClock`]
    /// in a deterministic test. Job deadlines are its time of day
    /// ([`Clock::system_time`]) in milliseconds, stored as such, so delays survive restarts;
    /// the timer driver waits by its monotonic time.
    pub clock: Arc<dyn Clock>,
    /// Free bytes to keep on the data directory's file system: while less would remain, commands
    /// that change jobs answer `INTERNAL_ERROR` without changing anything, reads keep working,
    /// and writes resume by themselves once space is freed. 0 turns the guard off. See
    /// [`DiskOptions::min_free_bytes`].
    pub min_free_bytes: u64,
    /// Store jobs in PostgreSQL instead (`--postgres URL`; `data_dir`, `durability` and
    /// `min_free_bytes` are then unused): the node serves while it holds the schema's
    /// active-node lock and waits for it as a standby otherwise. See
    /// `docs/decisions/0008-postgresql-backend.md`.
    pub postgres: Option<PgOptions>,
    /// beanstalkd's `-s` (its binlog file size): tickwheel's store manages its own files, so
    /// this is only shown, as `stats`' `binlog-max-size` (as beanstalkd shows it: a C `int`).
    pub binlog_max_size: u64,
}

/// beanstalkd's default binlog file size (`-s`), shown as `binlog-max-size` without `-s`.
pub const DEFAULT_BINLOG_MAX_SIZE: u64 = 10_485_760;

impl Default for Config {
    fn default() -> Self {
        Config {
            data_dir: None,
            durability: Durability::Sync,
            max_job_size: 65_535,
            window: Some(DEFAULT_WINDOW_MS),
            clock: Arc::new(SystemClock),
            min_free_bytes: tickwheel_store::DEFAULT_MIN_FREE_BYTES,
            postgres: None,
            binlog_max_size: DEFAULT_BINLOG_MAX_SIZE,
        }
    }
}

/// The data directory (`-b DIR`) could not be created: the context of that error, so that the
/// caller can tell it apart (beanstalkd exits with 10 when it cannot take its directory).
#[derive(Debug)]
pub struct DataDirUnusable(pub PathBuf);

impl std::fmt::Display for DataDirUnusable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cannot create data directory {}", self.0.display())
    }
}

/// Where the server listens.
pub enum Listener {
    /// TCP.
    Tcp(TcpListener),
    /// A Unix domain socket.
    Unix(UnixListener),
}

impl Listener {
    /// Binds `addr`: `host:port`, or `unix:PATH` for a Unix socket (a stale socket file is
    /// replaced).
    ///
    /// # Errors
    ///
    /// The bind error, with the address (e.g. the port is in use).
    pub async fn bind(addr: &str) -> anyhow::Result<Listener> {
        if let Some(path) = addr.strip_prefix("unix:") {
            let _ = std::fs::remove_file(path);
            let listener = UnixListener::bind(path)
                .with_context(|| format!("cannot listen on unix socket {path}"))?;
            return Ok(Listener::Unix(listener));
        }
        let listener = TcpListener::bind(addr)
            .await
            .with_context(|| format!("cannot listen on {addr}"))?;
        Ok(Listener::Tcp(listener))
    }

    /// Binds TCP `host` and `service` as beanstalkd's `-l` and `-p` do: the system resolver
    /// (`getaddrinfo`, passive, stream sockets) turns both into addresses, and the first
    /// address that binds is kept. So `service` may be a name from `/etc/services` (`http` is
    /// port 80), an empty one picks a free port, and a number is read as the C library reads
    /// it (glibc takes 99999 modulo 65536).
    ///
    /// # Errors
    ///
    /// The resolver does not know the host or the service (e.g. `-p abc`), or no address
    /// binds (e.g. the port is in use); the message names `host` and `service`.
    pub async fn bind_service(host: &str, service: &str) -> anyhow::Result<Listener> {
        use nix::libc::{AI_PASSIVE, SOCK_STREAM};
        let label = if host.contains(':') {
            format!("[{host}]:{service}") // a bare IPv6 address
        } else {
            format!("{host}:{service}")
        };
        let hints = dns_lookup::AddrInfoHints {
            flags: AI_PASSIVE,
            address: 0,
            socktype: SOCK_STREAM,
            protocol: 0,
        };
        let addrs: Vec<std::net::SocketAddr> =
            dns_lookup::getaddrinfo(Some(host), Some(service), Some(hints))
                .map_err(std::io::Error::from)
                .and_then(|found| found.map(|a| a.map(|a| a.sockaddr)).collect())
                .with_context(|| format!("cannot listen on {label}: getaddrinfo()"))?;
        let listener = TcpListener::bind(addrs.as_slice())
            .await
            .with_context(|| format!("cannot listen on {label}"))?;
        Ok(Listener::Tcp(listener))
    }

    /// The bound TCP address, if TCP.
    #[must_use]
    pub fn local_addr(&self) -> Option<std::net::SocketAddr> {
        match self {
            Listener::Tcp(l) => l.local_addr().ok(),
            Listener::Unix(_) => None,
        }
    }
}

/// A PostgreSQL node's parts the watcher thread takes at `run`: the store, the active-node
/// lock, and the foreign ids already in the engine.
type PgNode = (Arc<PgStore>, Option<ActiveLock>, HashSet<JobId>);

/// A server with its jobs recovered, ready to [`run`](Server::run).
pub struct Server {
    shared: Arc<Shared>,
    max_job_size: usize,
    recovered_jobs: usize,
    /// On PostgreSQL: what the watcher thread needs once the server runs.
    postgres: Option<PgNode>,
    /// With a data directory: beanstalkd's lock on it, held while the server runs.
    beanstalkd_lock: Option<tickwheel_store::beanstalkd::BeanstalkdLock>,
}

/// A data directory beanstalkd used: takes its lock (refused while a beanstalkd runs on it)
/// and the jobs of its binlog, if any, into `store` (`tickwheel_store::beanstalkd`).
fn take_over_from_beanstalkd(
    store: &DiskStore,
    dir: &std::path::Path,
) -> anyhow::Result<tickwheel_store::beanstalkd::BeanstalkdLock> {
    use tickwheel_store::beanstalkd::{self, BeanstalkdLock, BEANSTALKD_LOCK_FILE};
    let lock = BeanstalkdLock::acquire(dir).with_context(|| {
        format!(
            "{} is held: a beanstalkd (or another tickwheel-server) uses {}",
            dir.join(BEANSTALKD_LOCK_FILE).display(),
            dir.display()
        )
    })?;
    let imported = beanstalkd::import(store, dir).with_context(|| {
        format!(
            "cannot take over beanstalkd's binlog in {} (move its binlog.N files elsewhere to \
             start without them)",
            dir.display()
        )
    })?;
    if let Some(i) = imported {
        tracing::info!(
            jobs = i.jobs,
            already_here = i.present,
            files = i.files,
            moved_to = %i.moved_to.display(),
            "took over the jobs of beanstalkd's binlog; its files were moved so that no beanstalkd replays them again"
        );
    }
    Ok(lock)
}

impl Server {
    /// Opens the store (creating the data directory if needed), recovers every job and starts
    /// the store's committer thread (on disk and on PostgreSQL; in memory each commit is made
    /// by the command that caused it). A data directory beanstalkd wrote is taken over first:
    /// the jobs of its binlog are committed and its files moved aside
    /// ([`tickwheel_store::beanstalkd`]).
    ///
    /// # Errors
    ///
    /// The data directory cannot be created or opened, another process uses it ("DIR is in
    /// use by pid N", or a beanstalkd holds `DIR/lock`), or its contents are corrupt (the error
    /// names the file and offset where the store can tell; a beanstalkd binlog that does not
    /// read stops the start too).
    pub fn open(config: &Config) -> anyhow::Result<Server> {
        let started = std::time::Instant::now();
        if let Some(options) = &config.postgres {
            return Server::open_postgres(config, options);
        }
        let mut beanstalkd_lock = None;
        let store: Arc<dyn Store> = match &config.data_dir {
            Some(dir) => {
                std::fs::create_dir_all(dir).with_context(|| DataDirUnusable(dir.clone()))?;
                let store = DiskStore::open(
                    dir,
                    DiskOptions::with_durability(config.durability)
                        .min_free_bytes(config.min_free_bytes),
                )
                .with_context(|| format!("cannot open data directory {}", dir.display()))?;
                beanstalkd_lock = Some(take_over_from_beanstalkd(&store, dir)?);
                Arc::new(store)
            }
            None => Arc::new(MemStore::new()),
        };
        let (now, _) = shared::wall_millis(config.clock.system_time());
        let engine_config = tickwheel_queue::Config {
            max_job_size: config.max_job_size,
            window: config.window,
            write_reserve_job: false,
        };
        // Only jobs due within the window are loaded; the rest stay on disk, counted.
        let recovered = store
            .recover(engine_config.window_end_at(now))
            .context("cannot recover the stored jobs")?;
        let (engine, recovered_jobs) = start_engine(&*store, recovered, engine_config, now)?;
        let mut server = Server::assemble(config, engine, store, recovered_jobs, started, None)?;
        server.beanstalkd_lock = beanstalkd_lock;
        Ok(server)
    }

    /// The server around a recovered engine: the commit and timer threads started, the
    /// recovery time in the metrics.
    fn assemble(
        config: &Config,
        engine: Engine,
        store: Arc<dyn Store>,
        recovered_jobs: usize,
        started: std::time::Instant,
        postgres: Option<PgNode>,
    ) -> anyhow::Result<Server> {
        // Only the in-memory store commits on the submitter's thread: see `Shared::new`.
        let inline_commits = config.data_dir.is_none() && postgres.is_none();
        let mut shared = Shared::new(engine, store, config.clock.clone(), inline_commits)
            .context("cannot start the commit and timer threads")?;
        shared.binlog_max_size = config.binlog_max_size;
        shared
            .metrics
            .set_recovery_seconds(started.elapsed().as_secs_f64());
        Ok(Server {
            shared: Arc::new(shared),
            max_job_size: config.max_job_size,
            recovered_jobs,
            postgres,
            beanstalkd_lock: None,
        })
    }

    /// [`Server::open`] on PostgreSQL: waits to become the schema's active node, then
    /// recovers from the database.
    fn open_postgres(config: &Config, options: &PgOptions) -> anyhow::Result<Server> {
        let started = std::time::Instant::now();
        let (now, _) = shared::wall_millis(config.clock.system_time());
        // Nodes serving side by side claim a `reserve-job` in the database whatever the
        // job's state there (`Node::claim_job`), so the engine writes nothing for it.
        let engine_config = tickwheel_queue::Config {
            max_job_size: config.max_job_size,
            window: config.window,
            write_reserve_job: false,
        };
        let opened = cluster::open(options, engine_config.window_end_at(now), &config.clock)?;
        // The clock again: waiting as a standby may have taken hours.
        let (now, _) = shared::wall_millis(config.clock.system_time());
        let recovered = opened.recovered;
        let adopted = cluster::foreign_ids(&recovered);
        let store: Arc<dyn Store> = opened.store.clone();
        // The PostgreSQL client blocks on its own runtime: read the far jobs' keys and due
        // times on a plain thread, as `cluster::open` does, never on a caller's runtime.
        let (mut engine, recovered_jobs) = std::thread::scope(|scope| {
            scope
                .spawn(|| start_engine(&*store, recovered, engine_config, now))
                .join()
                .unwrap_or_else(|_| Err(anyhow::anyhow!("the PostgreSQL start-up thread panicked")))
        })?;
        if let Some(node) = &opened.node {
            // Its own block of ids: other nodes' jobs, above or below, must not move them.
            engine.continue_ids_at(node.ids().start);
        }
        let postgres = Some((opened.store.clone(), opened.lock, adopted));
        let server = Server::assemble(config, engine, store, recovered_jobs, started, postgres)?;
        if let Some(node) = opened.node {
            let active = cluster::active::Active::new(node, opened.store)
                .context("cannot start the node's batching threads")?;
            let _ = server.shared.active.set(Arc::new(active));
        }
        Ok(server)
    }

    /// Lets `http` serve this server's API (until then it answers `503 not_ready`, and
    /// `/readyz` says so).
    pub fn attach_http(&self, http: &HttpHandle) {
        http.attach(self.shared.clone());
    }

    /// Number of jobs recovered from the store.
    #[must_use]
    pub fn recovered_jobs(&self) -> usize {
        self.recovered_jobs
    }

    /// A handle for controlling the running server from elsewhere (e.g. a signal handler).
    #[must_use]
    pub fn handle(&self) -> Handle {
        Handle {
            shared: self.shared.clone(),
        }
    }

    /// Serves connections until `shutdown` is cancelled; then stops accepting, lets the
    /// connections finish the command in hand, and returns once everything acknowledged is
    /// durable.
    pub async fn run(mut self, listener: Listener, shutdown: CancellationToken) {
        let watcher = match self.postgres.take() {
            Some((store, lock, adopted)) => {
                match cluster::Watcher::start(self.shared.clone(), store, lock, adopted) {
                    Ok(watcher) => Some(watcher),
                    Err(error) => {
                        tracing::error!(%error, "cannot start the PostgreSQL watcher thread");
                        return;
                    }
                }
            }
            None => None,
        };
        let tracker = TaskTracker::new();
        tracker.spawn(shared::drive_timers(self.shared.clone(), shutdown.clone()));
        loop {
            let accepted = tokio::select! {
                () = shutdown.cancelled() => break,
                accepted = accept(&listener) => accepted,
            };
            let stream = match accepted {
                Ok(stream) => stream,
                Err(error) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            };
            // The connection is counted here, in accept order, before its task runs: as in
            // beanstalkd, a connection accepted earlier shows in `total-connections` and
            // `current-connections` before a later one's first command is answered (two
            // connections waiting in the backlog used to race for that).
            let client = self.shared.next_client_id();
            self.shared.apply(|engine| engine.connect(client));
            let shared = self.shared.clone();
            let (max, stop) = (self.max_job_size, shutdown.clone());
            match stream {
                Stream::Tcp(stream) => {
                    let _ = stream.set_nodelay(true);
                    let (reader, writer) = stream.into_split();
                    tracker.spawn(conn::serve(shared, client, reader, writer, max, stop));
                }
                Stream::Unix(stream) => {
                    let (reader, writer) = stream.into_split();
                    tracker.spawn(conn::serve(shared, client, reader, writer, max, stop));
                }
            }
        }
        tracker.close();
        tracker.wait().await;
        // Every connection has finished; wait for the commits they queued.
        let last = self.shared.last_ticket();
        if let Err(error) = last.durable().await {
            tracing::error!(%error, "the last writes could not be made durable");
        }
        // PostgreSQL: the watcher (and with it the active lock) ends before `run` returns, so
        // whoever stops the database next, or starts the next node, finds this node gone.
        if let Some(watcher) = watcher {
            watcher.stop().await;
        }
    }
}

/// Controls a running [`Server`].
#[derive(Clone)]
pub struct Handle {
    shared: Arc<Shared>,
}

impl Handle {
    /// Puts the server in drain mode (`put` answers `DRAINING`), as beanstalkd on `SIGUSR1`.
    pub fn set_draining(&self, draining: bool) {
        self.shared.apply(|engine| engine.set_draining(draining));
    }

    /// Active-active on PostgreSQL: how many of this node's claims the database refused
    /// because the job was not due yet by its clock (the node woke early for it; the job is
    /// read again at the database's due time). `None` in other modes.
    #[must_use]
    pub fn claims_lost_not_due(&self) -> Option<u64> {
        self.shared.active.get().map(|a| a.not_due_losses())
    }

    /// Active-active on PostgreSQL: how many rows this node has read from the database to adopt
    /// them (other nodes' announced and deferred jobs, orphans after a resync). `None` in other
    /// modes.
    #[must_use]
    pub fn rows_read_to_adopt(&self) -> Option<u64> {
        self.shared.active.get().map(|a| a.rows_read())
    }

    /// Active-active on PostgreSQL: how many hung-up clients' jobs this node has released in
    /// the database (one statement each; only for clients that had sent a claim). `None` in
    /// other modes.
    #[must_use]
    pub fn releases_on_hang_up(&self) -> Option<u64> {
        self.shared.active.get().map(|a| a.releases())
    }

    /// Jobs ready in this server's engine. On a node sharing a PostgreSQL schema that is its
    /// cache, which `stats` no longer shows (its job counts are the cluster's): a test hook.
    #[doc(hidden)]
    #[must_use]
    pub fn cached_ready_jobs(&self) -> u64 {
        let now = self.shared.now();
        self.shared.apply(|engine| engine.stats_at(now)).1.ready
    }

    /// Active-active on PostgreSQL with `--postgres-claim-ahead`: how many reserves this node
    /// answered with a job it had claimed ahead (no claim round trip). `None` in other modes.
    #[must_use]
    pub fn stock_handouts(&self) -> Option<u64> {
        self.shared.active.get().map(|a| a.stock_handouts())
    }
}

/// The engine a server starts from, and how many jobs it recovered: the stored jobs due within
/// the window in memory, the far ones counted, and the idempotency keys of the far ones read
/// from the store (the same for every backend).
fn start_engine(
    store: &dyn Store,
    recovered: tickwheel_store::Recovered,
    engine_config: tickwheel_queue::Config,
    now: u64,
) -> anyhow::Result<(Engine, usize)> {
    let far_jobs: u64 = recovered.far_delayed.iter().map(|(_, n)| n).sum();
    let recovered_jobs = recovered.resident.len() + far_jobs as usize;
    let window_end = engine_config.window_end_at(now);
    let mut engine = Engine::recover_windowed(
        engine_config,
        now,
        recovered.next_id,
        recovered.resident,
        recovered.far_delayed,
    );
    if far_jobs > 0 {
        // One paged read of the far jobs, which stay on disk: their due times go into the
        // timeline, their idempotency keys into the engine's `(tube, key) → id` map (so a put
        // finds a job due next month by its key without a store read).
        let mut keys = Vec::new();
        store
            .for_each_due(window_end, &mut |r| {
                if let DurableState::Delayed { until } = r.state {
                    engine.note_far_due(&r.tube, until);
                }
                if let Some(key) = &r.idempotency_key {
                    keys.push((r.tube.clone(), key.clone(), r.id));
                }
            })
            .context("cannot read the far-future jobs' due times and idempotency keys")?;
        engine.add_far_keys(keys);
    }
    Ok((engine, recovered_jobs))
}

enum Stream {
    Tcp(tokio::net::TcpStream),
    Unix(tokio::net::UnixStream),
}

async fn accept(listener: &Listener) -> std::io::Result<Stream> {
    match listener {
        Listener::Tcp(l) => l.accept().await.map(|(s, _)| Stream::Tcp(s)),
        Listener::Unix(l) => l.accept().await.map(|(s, _)| Stream::Unix(s)),
    }
}
