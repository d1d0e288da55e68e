//! The `tickwheel` binary: see the `tickwheel_cli` library for everything it does.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    match tickwheel_cli::run(tickwheel_cli::Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tickwheel: {e:#}");
            ExitCode::FAILURE
        }
    }
}
