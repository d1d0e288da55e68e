//! The command line (clap derive).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// A command-line client for tickwheel-server and beanstalkd.
///
/// Talks the beanstalkd protocol, so every subcommand also works against beanstalkd itself.
#[derive(Debug, Parser)]
#[command(name = "tickwheel", version, propagate_version = true)]
pub struct Cli {
    /// Server address.
    #[arg(
        long,
        short = 'a',
        global = true,
        env = "TICKWHEEL_ADDR",
        default_value = "127.0.0.1:11300",
        value_name = "HOST:PORT"
    )]
    pub(crate) addr: String,

    /// Print JSON (one document, or JSON lines for streams) instead of text.
    #[arg(long, global = true)]
    pub(crate) json: bool,

    /// Timeout for connecting and for each network read or write (e.g. 30s, 2m).
    #[arg(long, global = true, default_value = "30s", value_name = "DURATION")]
    pub(crate) timeout: String,

    #[command(subcommand)]
    pub(crate) command: Cmd,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Cmd {
    /// Put a job. The body comes from the argument, --file, or standard input.
    Put(PutArgs),
    /// Show a job by id, or the next ready / delayed / buried job of a tube.
    Peek(PeekArgs),
    /// Kick buried jobs of a tube (or, if none are buried, delayed ones) to ready.
    Kick(KickArgs),
    /// Delete jobs by id.
    Delete {
        /// Job ids.
        #[arg(required = true)]
        ids: Vec<u64>,
    },
    /// Server statistics, or a tube's (--tube) or a job's (--job).
    Stats(StatsArgs),
    /// List tubes with their job counts.
    Tubes,
    /// Pause a tube: no job is reserved from it for the given time.
    Pause {
        /// The tube.
        tube: String,
        /// How long (e.g. 30s, 10m, 0 to unpause).
        duration: String,
    },
    /// A live view of the server and its tubes, with rates; `q` quits.
    Top(TopArgs),
    /// Write every ready, delayed and buried job as JSON lines (the source keeps them).
    Export(ExportArgs),
    /// Put the jobs of a JSON-lines export into the server.
    Import(ImportArgs),
    /// Copy every ready, delayed and buried job of one server into another.
    Migrate(MigrateArgs),
    /// Print a shell completion script (e.g. `tickwheel completions bash > /etc/bash_completion.d/tickwheel`).
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
}

#[derive(Debug, Args)]
pub(crate) struct PutArgs {
    /// The body (UTF-8 text). Without it and without --file, standard input is read.
    pub(crate) body: Option<String>,
    /// Read the body from this file (any bytes).
    #[arg(long, short = 'f', conflicts_with = "body")]
    pub(crate) file: Option<PathBuf>,
    /// The tube.
    #[arg(long, short = 't', default_value = "default")]
    pub(crate) tube: String,
    /// Priority: 0 is the most urgent; below 1024 counts as urgent.
    #[arg(long, short = 'p', default_value_t = 1024)]
    pub(crate) pri: u32,
    /// Time to run: how long a worker may hold the job (e.g. 60, 2m).
    #[arg(long, default_value = "60s", value_name = "DURATION")]
    pub(crate) ttr: String,
    /// Make the job ready only after this long (e.g. 30m, 1h30m, 90).
    #[arg(long, short = 'd', value_name = "DURATION", conflicts_with = "at")]
    pub(crate) delay: Option<String>,
    /// Make the job ready at this time (RFC 3339 with an offset, e.g. 2027-01-01T09:00Z).
    #[arg(long, value_name = "TIME")]
    pub(crate) at: Option<String>,
}

#[derive(Debug, Args)]
pub(crate) struct PeekArgs {
    /// A job id, or `ready`, `delayed` or `buried` (the next such job of --tube).
    pub(crate) what: String,
    /// The tube for ready / delayed / buried.
    #[arg(long, short = 't', default_value = "default")]
    pub(crate) tube: String,
    /// Print only the body, as raw bytes.
    #[arg(long, conflicts_with = "json")]
    pub(crate) body_only: bool,
}

#[derive(Debug, Args)]
pub(crate) struct KickArgs {
    /// At most this many jobs (with --job: ignored).
    #[arg(default_value_t = 1, conflicts_with = "job")]
    pub(crate) bound: u64,
    /// The tube.
    #[arg(long, short = 't', default_value = "default")]
    pub(crate) tube: String,
    /// Kick this one buried or delayed job instead.
    #[arg(long)]
    pub(crate) job: Option<u64>,
}

#[derive(Debug, Args)]
pub(crate) struct StatsArgs {
    /// A tube's statistics.
    #[arg(long, short = 't', conflicts_with = "job")]
    pub(crate) tube: Option<String>,
    /// A job's statistics.
    #[arg(long, short = 'j')]
    pub(crate) job: Option<u64>,
}

#[derive(Debug, Args)]
pub(crate) struct TopArgs {
    /// Refresh interval (e.g. 1s, 500ms).
    #[arg(long, short = 'i', default_value = "1s", value_name = "DURATION")]
    pub(crate) interval: String,
}

/// What to do with jobs that are reserved on the source.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum ReservedPolicy {
    /// Leave them out and count them as skipped (the default: a worker is processing them).
    Skip,
    /// Copy them as ready jobs (a job may then be processed twice: once by the worker that
    /// holds it on the source, once from the copy).
    Ready,
}

#[derive(Debug, Args)]
pub(crate) struct ScanArgs {
    /// Only jobs of these tubes (repeatable); default: every tube.
    #[arg(long = "tube", short = 't', value_name = "TUBE")]
    pub(crate) tubes: Vec<String>,
    /// Reserved jobs: skip them, or copy them as ready.
    #[arg(long, value_enum, default_value_t = ReservedPolicy::Skip)]
    pub(crate) reserved: ReservedPolicy,
    /// Scan job ids 1..=N only, and do not probe the source for its next id (see the README:
    /// by default one empty job is put into and at once deleted from the tube
    /// `tickwheel-scan-probe` to learn the highest id).
    #[arg(long, value_name = "N")]
    pub(crate) max_id: Option<u64>,
}

#[derive(Debug, Args)]
pub(crate) struct ExportArgs {
    #[command(flatten)]
    pub(crate) scan: ScanArgs,
    /// Write to this file instead of standard output.
    #[arg(long, short = 'o')]
    pub(crate) output: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub(crate) struct ImportArgs {
    /// The JSON-lines file; `-` or nothing reads standard input.
    pub(crate) file: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub(crate) struct MigrateArgs {
    /// The source server.
    #[arg(long, value_name = "HOST:PORT")]
    pub(crate) from: String,
    /// The target server.
    #[arg(long, value_name = "HOST:PORT")]
    pub(crate) to: String,
    #[command(flatten)]
    pub(crate) scan: ScanArgs,
}
