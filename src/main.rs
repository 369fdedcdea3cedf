//! The `squall` binary: parses the command line and runs the chosen command.
#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    squall::cli::Cli::parse().run()
}
