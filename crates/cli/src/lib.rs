//! `tickwheel`: a command-line client for tickwheel-server and beanstalkd (the library behind
//! the binary; `main.rs` only parses the arguments and calls [`run`]).
//!
//! It talks the beanstalkd protocol through `tickwheel-proto`'s sans-I/O codec
//! ([`tickwheel_proto::Command::encode`], [`tickwheel_proto::ReplyDecoder`]), so every
//! subcommand works against tickwheel-server and the real beanstalkd alike:
//!
//! ```text
//! tickwheel put --tube mail --delay 30m 'send reminder 42'
//! tickwheel put --at 2027-01-01T09:00Z --file report.bin
//! tickwheel peek ready --tube mail
//! tickwheel stats --tube mail --json
//! tickwheel top
//! tickwheel export > jobs.jsonl && tickwheel --addr other:11300 import jobs.jsonl
//! tickwheel migrate --from old:11300 --to new:11300
//! ```
//!
//! # How `export` and `migrate` find jobs
//!
//! The protocol has no "list jobs", so they walk job ids: one empty job is put into the tube
//! `tickwheel-scan-probe` and deleted at once to learn the next id (ids only grow), then
//! `stats-job <id>` and `peek <id>` are pipelined for ids from 1 upwards, stopping once as many
//! jobs were seen as `stats` counted. Nothing on the source is reserved, kicked or deleted; the
//! cost is two commands per id up to the highest live id. Reserved jobs are skipped unless
//! `--reserved ready`; buried ones are put, then `reserve-job` + `bury` on the target; a delayed
//! job keeps its remaining delay rounded up (never early). The README's "Command-line client"
//! section has the details and the export format.

#![forbid(unsafe_code)]

mod args;
mod conn;
mod jobs;
mod ops;
mod time;
mod top;

use anyhow::{Context, Result};
use clap::CommandFactory;

pub use crate::args::Cli;
use crate::args::Cmd;
use crate::ops::Ctx;

/// Runs one command line; the binary prints the error and exits with status 1.
///
/// # Errors
///
/// Whatever went wrong, as a sentence with its causes (`{:#}`): the server cannot be
/// reached, refused a command, or the input is invalid.
pub fn run(cli: Cli) -> Result<()> {
    let ctx = Ctx {
        addr: cli.addr,
        json: cli.json,
        timeout: time::parse_duration(&cli.timeout).context("--timeout")?,
    };
    match cli.command {
        Cmd::Put(args) => ops::put(&ctx, args),
        Cmd::Peek(args) => ops::peek(&ctx, args),
        Cmd::Kick(args) => ops::kick(&ctx, args),
        Cmd::Delete { ids } => ops::delete(&ctx, &ids),
        Cmd::Stats(args) => ops::stats(&ctx, args),
        Cmd::Tubes => ops::tubes(&ctx),
        Cmd::Pause { tube, duration } => ops::pause(&ctx, &tube, &duration),
        Cmd::Top(args) => top::run(&ctx, &args.interval),
        Cmd::Export(args) => ops::export(&ctx, args),
        Cmd::Import(args) => ops::import(&ctx, args),
        Cmd::Migrate(args) => ops::migrate(&ctx, args),
        Cmd::Completions { shell } => {
            clap_complete::generate(
                shell,
                &mut Cli::command(),
                "tickwheel",
                &mut std::io::stdout(),
            );
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_command_line_is_consistent() {
        use clap::CommandFactory;
        super::Cli::command().debug_assert();
    }
}
