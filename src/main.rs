//! The `squall` binary: parses the command line and runs the chosen command.
#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::Parser;

/// jemalloc: a rollout frees and allocates thousands of small cached objects from several
/// threads, which glibc's per-thread arenas hold on to; jemalloc's size classes keep less
/// per allocation and return freed pages (configured in `.cargo/config.toml`).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    squall::cli::Cli::parse().run()
}
