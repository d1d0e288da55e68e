//! `tickwheel`: a command-line client for tickwheel-server and beanstalkd.
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
//! How `export` and `migrate` find every job without changing the source, and what they cost,
//! is in the `jobs` module; the README's "Command-line client" section has the user's view.

mod args;
mod conn;
mod jobs;
mod ops;
mod time;
mod top;

use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{CommandFactory, Parser};

use crate::args::{Cli, Cmd};
use crate::ops::Ctx;

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tickwheel: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<()> {
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
