//! `tickwheel-server`: command line, logging and signals; the server itself is the library.

use std::path::PathBuf;

use anyhow::Context as _;
use clap::{CommandFactory as _, FromArgMatches as _};
use tickwheel_server::{Config, Listener, PgOptions, SchemaName, Server, SystemClock};
use tickwheel_store::Durability;
use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio_util::sync::CancellationToken;

/// How the nodes of one PostgreSQL schema share the work (`--postgres-mode`).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum PgMode {
    /// One node serves; the others wait as hot standbys.
    Standby,
    /// Every node serves; jobs are claimed in the database.
    ActiveActive,
}

/// When a claim tells its client `RESERVED` (`--postgres-claim-commit`).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum ClaimCommit {
    /// Once the claim is on the database's disk.
    Sync,
    /// Once the claim is committed, before its WAL flush.
    Async,
}

/// A durable delayed-job server that speaks the beanstalkd protocol.
///
/// Flags mean what they mean to beanstalkd: without `-b` jobs live in memory only, as in
/// beanstalkd. With `-b DIR` jobs are stored in DIR and, unlike beanstalkd, every change is
/// fsynced before it is acknowledged; `-f MS` acknowledges before the fsync (fsync at most every
/// MS ms, as beanstalkd's default -f 50) and `-F` never fsyncs.
#[derive(clap::Parser, Debug)]
// `args_override_self`: a flag given twice means its last value, as beanstalkd's option loop
// reads it (`-p 1 -p 11300` listens on 11300); clap would refuse the repeat otherwise.
#[command(
    name = "tickwheel-server",
    disable_version_flag = true,
    args_override_self = true
)]
struct Args {
    /// Listen on ADDR (an IP address or host name), or on a Unix socket with unix:PATH.
    #[arg(
        short = 'l',
        value_name = "ADDR",
        default_value = "0.0.0.0",
        allow_hyphen_values = true
    )]
    listen: String,
    /// Listen on PORT: a number or a service name from /etc/services, resolved as
    /// beanstalkd resolves it (getaddrinfo).
    #[arg(
        short = 'p',
        value_name = "PORT",
        default_value = "11300",
        allow_hyphen_values = true
    )]
    port: String,
    /// Store jobs in DIR (created if missing; one server per directory). Without -b, jobs
    /// live in memory only and a restart loses them, as in beanstalkd.
    #[arg(short = 'b', value_name = "DIR", allow_hyphen_values = true)]
    data_dir: Option<PathBuf>,
    /// Acknowledge writes before they are fsynced, fsyncing at most every MS milliseconds
    /// (a power cut may lose up to MS ms of acknowledged writes; a crash of the process loses
    /// nothing).
    #[arg(short = 'f', value_name = "MS", value_parser = c_size, allow_hyphen_values = true)]
    fsync_every: Option<u64>,
    /// Never fsync (survives a crash of the process, not of the machine).
    #[arg(short = 'F')]
    no_fsync: bool,
    /// Keep jobs in memory only: a restart loses them all (the default without -b).
    #[arg(long, conflicts_with = "data_dir")]
    in_memory: bool,
    /// Keep delayed jobs due within this many seconds in memory; later ones stay on disk until
    /// their time nears (0: keep every job in memory).
    #[arg(long, value_name = "SECONDS", default_value_t = tickwheel_server::DEFAULT_WINDOW_MS / 1000)]
    window_secs: u64,
    /// Keep at least BYTES free on the data directory's file system: while less would remain,
    /// commands that change jobs answer INTERNAL_ERROR and change nothing, reads keep working,
    /// and writes resume by themselves once space is freed. The default (64 MiB) is room for
    /// the store's own flushes and compactions; 0 turns the guard off.
    #[arg(long, value_name = "BYTES", default_value_t = tickwheel_store::DEFAULT_MIN_FREE_BYTES)]
    min_free_space: u64,
    /// Store jobs in PostgreSQL at URL (e.g. postgres://app@db/jobs) instead of a data
    /// directory. The server creates and migrates its schema itself. Several nodes may point at
    /// one database: one serves, the others wait as standbys and take over when it dies.
    #[arg(long, value_name = "URL", conflicts_with_all = ["data_dir", "in_memory"])]
    postgres: Option<String>,
    /// The PostgreSQL schema holding tickwheel's tables and SQL functions.
    #[arg(
        long,
        value_name = "NAME",
        default_value = "tickwheel",
        requires = "postgres"
    )]
    postgres_schema: String,
    /// With --postgres: how long a commit keeps retrying while the database is unreachable
    /// (new writes answer INTERNAL_ERROR meanwhile) before the node gives up on writes until it
    /// is restarted.
    #[arg(
        long,
        value_name = "SECONDS",
        default_value_t = 30,
        requires = "postgres"
    )]
    postgres_retry_secs: u64,
    /// With --postgres: `standby` (one node serves, the others wait and take over when it
    /// dies) or `active-active` (every node serves; jobs are claimed in the database, by its
    /// clock). All nodes of a schema must use the same mode.
    #[arg(
        long,
        value_name = "MODE",
        value_enum,
        default_value_t = PgMode::Standby,
        requires = "postgres"
    )]
    postgres_mode: PgMode,
    /// With --postgres-mode active-active: `sync` (RESERVED once the claim is on the
    /// database's disk) or `async` (once it is committed, without waiting for the WAL flush:
    /// reserves wait less, but jobs reserved in the last moments before a crash of PostgreSQL
    /// itself, up to 3 × wal_writer_delay, can be handed out again after its restart, as
    /// beanstalkd hands out again every reserved job after its own restart). Every other
    /// write stays synchronous.
    #[arg(
        long,
        value_name = "COMMIT",
        value_enum,
        default_value_t = ClaimCommit::Sync,
        requires = "postgres"
    )]
    postgres_claim_commit: ClaimCommit,
    /// With --postgres-mode active-active: jobs a node may claim ahead of its reservers (0,
    /// the default: each job is claimed as a client reserves it, one database round trip per
    /// reserve). With N > 0, a reserve's claim also takes up to N more ready jobs of its tube
    /// for the node, which later reserves hand out at once. Meanwhile those jobs count as
    /// ready everywhere but only their node hands them out or deletes them; one not handed
    /// out within 0.5 s goes back to ready, and if the node is killed they return after their
    /// TTR plus 1 s, as reserved jobs do.
    #[arg(long, value_name = "N", default_value_t = 0, requires = "postgres")]
    postgres_claim_ahead: u16,
    /// Maximum job size in bytes (at most 1073741824: larger values are lowered to it, as
    /// beanstalkd does).
    #[arg(short = 'z', value_name = "BYTES", default_value_t = 65_535, value_parser = c_size, allow_hyphen_values = true)]
    max_job_size: u64,
    /// Accepted for compatibility with beanstalkd (binlog file size) and shown as `stats`'
    /// `binlog-max-size`; the store manages its own files.
    #[arg(short = 's', value_name = "BYTES", value_parser = c_size, allow_hyphen_values = true)]
    binlog_size: Option<u64>,
    /// Removed from beanstalkd (its binlog is always compacted): accepted and ignored, with
    /// beanstalkd's warning.
    #[arg(short = 'c', hide = true)]
    compact: bool,
    /// Removed from beanstalkd (its binlog is always compacted): accepted and ignored, with
    /// beanstalkd's warning.
    #[arg(short = 'n', hide = true)]
    no_compact: bool,
    /// Become USER once the listening sockets are bound (so a port below 1024 works when
    /// started as root) and before DIR is opened (so its files belong to USER), as beanstalkd
    /// does. USER's own supplementary groups replace the starting user's (beanstalkd keeps
    /// root's). Exits with 33 if there is no such user, 34 if the switch is refused.
    #[arg(short = 'u', value_name = "USER", allow_hyphen_values = true)]
    user: Option<String>,
    /// Serve the HTTP/JSON API, /metrics and health checks on ADDR (host:port, e.g.
    /// 127.0.0.1:11380). Off by default. A non-loopback ADDR needs --http-token.
    #[arg(long, value_name = "ADDR")]
    http: Option<String>,
    /// Read the HTTP API's bearer token from FILE (surrounding whitespace ignored): calls that
    /// change jobs or tubes then need `Authorization: Bearer <token>`.
    #[arg(long, value_name = "FILE", requires = "http")]
    http_token: Option<PathBuf>,
    /// HTTP requests per second allowed per client IP, on average (bursts of twice that);
    /// 0: no limit.
    #[arg(long, value_name = "N", default_value_t = 200)]
    http_rate: u32,
    /// Threads that serve the connections (the async runtime's workers). Default: one per
    /// core. Fewer cost less CPU per request on a small machine (the store's committer and
    /// applier threads run beside them); see docs/decisions/0020-io-threads-and-the-ack-hand-off.md.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    io_threads: Option<u16>,
    /// Print the version and exit.
    #[arg(short = 'v', long = "version")]
    version: bool,
    /// More logging (repeatable); RUST_LOG overrides.
    #[arg(short = 'V', action = clap::ArgAction::Count)]
    verbose: u8,
}

/// The largest `-z` (1 GiB, beanstalkd's `JOB_DATA_SIZE_LIMIT_MAX`).
const MAX_JOB_SIZE_LIMIT: usize = 1_073_741_824;

/// A size or a number of milliseconds as beanstalkd reads them (`sscanf("%zu%c")`): leading
/// white space and a sign allowed, nothing after the digits; a negative number wraps around
/// (`-1` is the largest value), and one too large for 64 bits is the largest value.
///
/// # Errors
///
/// Anything else (`12k`, `1.5`, an empty string): beanstalkd exits with 5 on it, as
/// `tickwheel-server` does on every bad command line.
fn c_size(text: &str) -> Result<u64, String> {
    let invalid = || format!("invalid size: {text}");
    let trimmed = text.trim_start_matches([' ', '\t', '\n', '\x0b', '\x0c', '\r']);
    let (negative, digits) = match trimmed.as_bytes().first() {
        Some(b'-') => (true, &trimmed[1..]),
        Some(b'+') => (false, &trimmed[1..]),
        _ => (false, trimmed),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(invalid());
    }
    Ok(match digits.parse::<u64>() {
        Ok(magnitude) if negative => magnitude.wrapping_neg(),
        Ok(magnitude) => magnitude,
        Err(_) => u64::MAX, // too large, either sign (strtoul's ERANGE)
    })
}

/// Exit statuses shared with beanstalkd, so that scripts and service managers that act on
/// them see the same failure: a bad command line, a socket that cannot be listened on, a data
/// directory that cannot be taken (held by another server, not creatable, its lock file not
/// writable). Any other start-up failure exits with 1.
const USAGE_STATUS: i32 = 5;
const LISTEN_STATUS: i32 = 111;
const DATA_DIR_STATUS: i32 = 10;

/// A start-up failure and its exit status.
struct Failure {
    status: i32,
    error: anyhow::Error,
}

impl From<anyhow::Error> for Failure {
    fn from(error: anyhow::Error) -> Self {
        Failure { status: 1, error }
    }
}

impl Failure {
    fn listen(error: anyhow::Error) -> Self {
        Failure {
            status: LISTEN_STATUS,
            error,
        }
    }

    /// Opening the store failed. The directory could not be taken (created, its lock file
    /// opened, or locked: another server holds it) exits with beanstalkd's 10, the rest with 1.
    fn open(error: anyhow::Error) -> Self {
        use tickwheel_store::{beanstalkd::BEANSTALKD_LOCK_FILE, StoreError, LOCK_FILE};
        let not_taken = error
            .downcast_ref::<tickwheel_server::DataDirUnusable>()
            .is_some()
            || error
                .chain()
                .any(|cause| match cause.downcast_ref::<StoreError>() {
                    Some(StoreError::InUse { .. }) => true,
                    Some(StoreError::Io { path, .. }) => {
                        path.ends_with(LOCK_FILE) || path.ends_with(BEANSTALKD_LOCK_FILE)
                    }
                    _ => false,
                });
        Failure {
            status: if not_taken { DATA_DIR_STATUS } else { 1 },
            error,
        }
    }
}

/// Parses the command line, or exits: `--help` prints to stdout and succeeds, a usage error
/// exits with beanstalkd's 5.
fn parse_args() -> (Args, Durability) {
    match parse_from(std::env::args_os()) {
        Ok(parsed) => parsed,
        Err(e) => {
            let status = if e.use_stderr() { USAGE_STATUS } else { 0 };
            let _ = e.print();
            std::process::exit(status);
        }
    }
}

/// The flags of the command line `argv` (program name first) and the fsync policy they ask
/// for.
fn parse_from<I, T>(argv: I) -> Result<(Args, Durability), clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let matches = Args::command().try_get_matches_from(argv)?;
    let args = Args::from_arg_matches(&matches)?;
    let durability = durability(&args, &matches);
    Ok((args, durability))
}

/// The fsync policy `-f` and `-F` ask for. As in beanstalkd, where each sets the same switch,
/// the later of the two wins: `-F -f 5` syncs every 5 ms, `-f 5 -F` never. A negative `-f`
/// (beanstalkd reads it as a huge unsigned number, then as a negative interval) syncs every
/// write there, as `-f 0` does.
fn durability(args: &Args, matches: &clap::ArgMatches) -> Durability {
    let f_index = matches.index_of("fsync_every");
    let big_f_last = args.no_fsync
        && f_index.is_none_or(|f| matches.index_of("no_fsync").is_some_and(|big_f| big_f > f));
    match args.fsync_every {
        _ if big_f_last => Durability::None,
        Some(ms) if i64::try_from(ms).is_ok_and(|ms| ms > 0) => {
            Durability::Periodic { interval_ms: ms }
        }
        _ => Durability::Sync,
    }
}

fn main() -> anyhow::Result<()> {
    let (args, durability) = parse_args();
    if args.version {
        println!(
            "tickwheel-server {} (commit {})",
            env!("CARGO_PKG_VERSION"),
            env!("TICKWHEEL_GIT_COMMIT")
        );
        return Ok(());
    }
    let level = match args.verbose {
        0 => "info",
        1 => "debug",
        _ => "trace",
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level)),
        )
        .with_writer(std::io::stderr)
        // Colours only on a terminal: not in log files, journald or docker logs.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    for (given, flag) in [(args.compact, 'c'), (args.no_compact, 'n')] {
        if given {
            tracing::warn!("-{flag} flag was removed. binlog is always compacted.");
        }
    }
    if args.postgres_claim_commit == ClaimCommit::Async
        && args.postgres_mode != PgMode::ActiveActive
    {
        // A standby-mode node claims nothing in the database: the flag would do nothing.
        anyhow::bail!("--postgres-claim-commit async needs --postgres-mode active-active");
    }
    if args.postgres_claim_ahead > 0 && args.postgres_mode != PgMode::ActiveActive {
        anyhow::bail!("--postgres-claim-ahead needs --postgres-mode active-active");
    }
    let postgres = match &args.postgres {
        Some(url) => Some(PgOptions {
            url: url.clone(),
            schema: SchemaName::new(&args.postgres_schema)?,
            retry: std::time::Duration::from_secs(args.postgres_retry_secs),
            active_active: args.postgres_mode == PgMode::ActiveActive,
            async_claims: args.postgres_claim_commit == ClaimCommit::Async,
            claim_ahead: usize::from(args.postgres_claim_ahead),
        }),
        None => None,
    };
    let max_job_size = match usize::try_from(args.max_job_size) {
        Ok(size) if size <= MAX_JOB_SIZE_LIMIT => size,
        _ => {
            tracing::warn!("maximum job size was set to {MAX_JOB_SIZE_LIMIT}");
            MAX_JOB_SIZE_LIMIT
        }
    };
    let config = Config {
        data_dir: if args.in_memory { None } else { args.data_dir },
        durability,
        max_job_size,
        window: (args.window_secs > 0).then(|| args.window_secs.saturating_mul(1000)),
        clock: std::sync::Arc::new(SystemClock),
        min_free_bytes: args.min_free_space,
        postgres,
        binlog_max_size: args
            .binlog_size
            .unwrap_or(tickwheel_server::DEFAULT_BINLOG_MAX_SIZE),
    };
    let http = match args.http {
        Some(addr) => {
            let token = match &args.http_token {
                Some(file) => Some(
                    std::fs::read_to_string(file)
                        .with_context(|| {
                            format!("cannot read the HTTP token from {}", file.display())
                        })?
                        .trim()
                        .to_owned(),
                ),
                None => None,
            };
            let options = tickwheel_server::HttpOptions {
                token,
                // A body in base64 takes 4/3 of its size, plus the JSON around it.
                max_body: max_job_size.saturating_mul(4) / 3 + 16 * 1024,
                rate_per_sec: args.http_rate,
                rate_burst: args.http_rate.saturating_mul(2),
            };
            Some((addr, options))
        }
        None => None,
    };
    // Before any thread starts: taking the sockets clears LISTEN_FDS/LISTEN_PID from the
    // environment.
    let inherited = inherited_listener()?;
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if let Some(threads) = args.io_threads {
        runtime.worker_threads(usize::from(threads));
    }
    let runtime = runtime
        .enable_all()
        .thread_name("tickwheel-io")
        .build()
        .context("cannot start the async runtime")?;
    let served = runtime.block_on(serve(
        args.listen,
        args.port,
        inherited,
        args.user,
        config,
        http,
    ));
    if let Err(failure) = served {
        eprintln!("Error: {:#}", failure.error);
        std::process::exit(failure.status);
    }
    Ok(())
}

/// A listening socket passed by the service manager.
enum Inherited {
    Tcp(std::net::TcpListener),
    Unix(std::os::unix::net::UnixListener),
}

/// The first socket passed by systemd socket activation (`LISTEN_FDS`, for this process by
/// `LISTEN_PID`), used instead of `-l`/`-p` as beanstalkd does; further ones are ignored
/// with a warning, as there.
///
/// # Errors
///
/// The first passed descriptor is not a listening TCP or Unix stream socket.
fn inherited_listener() -> anyhow::Result<Option<Inherited>> {
    let mut fds = listenfd::ListenFd::from_env();
    if fds.len() == 0 {
        return Ok(None);
    }
    if fds.len() > 1 {
        tracing::warn!(
            passed = fds.len(),
            "inherited more than one listening socket; using the first only"
        );
    }
    if let Ok(Some(tcp)) = fds.take_tcp_listener(0) {
        return Ok(Some(Inherited::Tcp(tcp)));
    }
    match fds.take_unix_listener(0) {
        Ok(Some(unix)) => Ok(Some(Inherited::Unix(unix))),
        Ok(None) => Ok(None),
        Err(e) => Err(anyhow::anyhow!(
            "the socket passed by the service manager (LISTEN_FDS) is not a TCP or Unix stream socket: {e}"
        )),
    }
}

impl Inherited {
    /// The socket as the server's listener (inside the runtime).
    fn into_listener(self) -> anyhow::Result<Listener> {
        Ok(match self {
            Inherited::Tcp(l) => {
                l.set_nonblocking(true)?;
                Listener::Tcp(tokio::net::TcpListener::from_std(l)?)
            }
            Inherited::Unix(l) => {
                l.set_nonblocking(true)?;
                Listener::Unix(tokio::net::UnixListener::from_std(l)?)
            }
        })
    }
}

/// Switches the process to user `name`: its supplementary groups (when we may set them,
/// i.e. as root), its primary group, then its user id. glibc applies each to every thread of
/// the process.
/// Fails with beanstalkd's exit status: 32 the lookup failed, 33 no such user, 34 refused.
fn become_user(name: &str) -> Result<(), Failure> {
    use nix::unistd::{initgroups, setgid, setuid, Uid, User};
    let fail = |status, message: String| Failure {
        status,
        error: anyhow::anyhow!(message),
    };
    let user = match User::from_name(name) {
        Ok(Some(user)) => user,
        Ok(None) => return Err(fail(33, format!("-u {name}: no such user"))),
        Err(e) => return Err(fail(32, format!("-u {name}: cannot look the user up: {e}"))),
    };
    if Uid::effective().is_root() {
        let cname = std::ffi::CString::new(name)
            .map_err(|_| fail(33, format!("-u {name}: no such user")))?;
        initgroups(&cname, user.gid)
            .map_err(|e| fail(34, format!("-u {name}: cannot take the user's groups: {e}")))?;
    }
    setgid(user.gid).map_err(|e| {
        fail(
            34,
            format!("-u {name}: cannot become group {}: {e}", user.gid),
        )
    })?;
    setuid(user.uid).map_err(|e| {
        fail(
            34,
            format!("-u {name}: cannot become user {}: {e}", user.uid),
        )
    })?;
    Ok(())
}

async fn serve(
    listen: String,
    port: String,
    inherited: Option<Inherited>,
    user: Option<String>,
    config: Config,
    http: Option<(String, tickwheel_server::HttpOptions)>,
) -> Result<(), Failure> {
    let bind = || async {
        if listen.starts_with("unix:") {
            Listener::bind(&listen).await
        } else {
            Listener::bind_service(&listen, &port).await
        }
    };
    // Signal handlers first: a SIGTERM that arrives once we listen must stop us gracefully,
    // not kill us with the default action.
    let stop_signals = StopSignals::register()?;
    let drain_signal = signal(SignalKind::user_defined1()).ok();
    if let Some(pg) = &config.postgres {
        tracing::info!(
            schema = pg.schema.as_str(),
            "jobs are stored in PostgreSQL; this node serves once it holds the schema's active lock"
        );
    } else if config.data_dir.is_none() {
        tracing::info!("jobs are kept in memory only and a restart loses them; to keep them, start with -b DIR");
    }
    let shutdown = CancellationToken::new();
    // The HTTP listener first: /healthz answers and /readyz says 503 during a long recovery.
    let http = match http {
        Some((http_addr, options)) => {
            let http = tickwheel_server::HttpServer::bind(&http_addr, options)
                .await
                .map_err(Failure::listen)?;
            let bound = http.local_addr().map_err(|e| Failure::listen(e.into()))?;
            tracing::info!(addr = %bound, "HTTP API listening");
            let handle = http.handle();
            Some((handle, tokio::spawn(http.run(shutdown.clone()))))
        }
        None => None,
    };
    // With -u the listener is bound before the switch, as beanstalkd binds before it drops
    // root; without, after the recovery, so that a client connects only once it is served.
    // A socket passed by the service manager is bound already.
    let early = match inherited {
        Some(inherited) => {
            let listener = inherited.into_listener().map_err(Failure::listen)?;
            tracing::info!("listening on the socket passed by the service manager (LISTEN_FDS); -l and -p do not apply");
            Some(listener)
        }
        None if user.is_some() => Some(bind().await.map_err(Failure::listen)?),
        None => None,
    };
    if let Some(name) = &user {
        become_user(name)?;
        tracing::info!(user = %name, "switched user");
    }
    let server = Server::open(&config).map_err(Failure::open)?;
    let http_task = http.map(|(handle, task)| {
        server.attach_http(&handle);
        task
    });
    let listener = match early {
        Some(listener) => listener,
        None => bind().await.map_err(Failure::listen)?,
    };
    // The bound address (an inherited socket's, or the port -p 0 picked).
    let addr = listener.local_addr().map_or(listen, |a| a.to_string());
    tracing::info!(
        %addr,
        data_dir = ?config.data_dir,
        postgres = config.postgres.is_some(),
        durability = ?config.durability,
        recovered_jobs = server.recovered_jobs(),
        "tickwheel-server listening"
    );
    let signals = shutdown.clone();
    tokio::spawn(async move {
        stop_signals.wait().await;
        tracing::info!("shutting down: no new connections, finishing in-flight writes");
        signals.cancel();
    });
    if let Some(mut usr1) = drain_signal {
        let handle = server.handle();
        tokio::spawn(async move {
            while usr1.recv().await.is_some() {
                tracing::info!("SIGUSR1: entering drain mode");
                handle.set_draining(true);
            }
        });
    }
    server.run(listener, shutdown).await;
    if let Some(task) = http_task {
        let _ = task.await;
    }
    tracing::info!("stopped");
    Ok(())
}

/// SIGTERM and SIGINT, registered up front.
struct StopSignals {
    terminate: Signal,
    interrupt: Signal,
}

impl StopSignals {
    fn register() -> anyhow::Result<StopSignals> {
        Ok(StopSignals {
            terminate: signal(SignalKind::terminate()).context("cannot handle SIGTERM")?,
            interrupt: signal(SignalKind::interrupt()).context("cannot handle SIGINT")?,
        })
    }

    async fn wait(mut self) {
        tokio::select! {
            _ = self.terminate.recv() => {}
            _ = self.interrupt.recv() => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{c_size, parse_from, Durability};

    fn parse(line: &str) -> (super::Args, Durability) {
        let argv = std::iter::once("tickwheel-server").chain(line.split_whitespace());
        parse_from(argv).unwrap_or_else(|e| panic!("{line:?}: {e}"))
    }

    /// beanstalkd's option loop assigns each flag as it meets it: a flag given twice means
    /// its last value, and `-f`/`-F` set one switch, so the later of the two decides
    /// (checked against beanstalkd 1.12: `-p 1 -p N` listens on N, `-z 10 -z 20` shows
    /// `max-job-size: 20`; `-F -f 0` fsyncs every write, `-f 0 -F` none, under strace).
    #[test]
    fn a_flag_given_twice_means_its_last_value_as_in_beanstalkd() {
        let (args, _) = parse(
            "-p 1 -l 10.0.0.1 -z 10 -s 5 -b /a -u x -p 11300 -l 127.0.0.1 -z 20 -s 7 -b /b -u y",
        );
        assert_eq!(args.port, "11300");
        assert_eq!(args.listen, "127.0.0.1");
        assert_eq!(args.max_job_size, 20);
        assert_eq!(args.binlog_size, Some(7));
        assert_eq!(args.data_dir.as_deref(), Some(std::path::Path::new("/b")));
        assert_eq!(args.user.as_deref(), Some("y"));
        assert_eq!(parse("-p11300 -p11301").0.port, "11301");
        assert!(parse("-F -F -c -c -n -n").0.no_fsync);
        assert_eq!(parse("-V -V").0.verbose, 2, "-V still counts");
        assert_eq!(parse("-VVV").0.verbose, 3);
    }

    #[test]
    fn the_later_of_f_and_big_f_decides_as_in_beanstalkd() {
        let periodic = |ms| Durability::Periodic { interval_ms: ms };
        for (line, want) in [
            ("", Durability::Sync),
            ("-F", Durability::None),
            ("-f 5", periodic(5)),
            ("-f0", Durability::Sync),
            ("-f -5", Durability::Sync),
            ("-F -f 5", periodic(5)),
            ("-f 5 -F", Durability::None),
            ("-F -f 0", Durability::Sync),
            ("-f 0 -F", Durability::None),
            ("-f 5 -F -f 9", periodic(9)),
            ("-F -f 5 -F", Durability::None),
            ("-Ff 5", periodic(5)),
            ("-f5 -Fp 1", Durability::None),
        ] {
            assert_eq!(parse(line).1, want, "{line:?}");
        }
    }

    /// As glibc's `sscanf("%zu%c")` reads them (checked against beanstalkd 1.12: `-s -1` shows
    /// `binlog-max-size: -1`, `-s ' 7'` 7, `-s +9` 9; `12k`, `1.5` and `5 ` exit with 5).
    #[test]
    fn sizes_read_as_beanstalkd_reads_them() {
        assert_eq!(c_size("65535"), Ok(65_535));
        assert_eq!(c_size(" \t7"), Ok(7));
        assert_eq!(c_size("+9"), Ok(9));
        assert_eq!(c_size("-1"), Ok(u64::MAX));
        assert_eq!(c_size("-5"), Ok(u64::MAX - 4));
        assert_eq!(c_size("-0"), Ok(0));
        assert_eq!(c_size("99999999999999999999999"), Ok(u64::MAX));
        assert_eq!(c_size("-18446744073709551615"), Ok(1));
        for bad in ["", " ", "-", "+", "12k", "1.5", "5 ", "0x10", "--1", "abc"] {
            assert_eq!(
                c_size(bad),
                Err(format!("invalid size: {bad}")),
                "{bad:?} is refused"
            );
        }
    }
}
