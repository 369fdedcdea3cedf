//! The `squall` command line (docs/architecture.md#the-process). Each subcommand returns its
//! process exit code.

mod adopt;
mod canary;
mod cleanup;
mod lint;
mod run;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// squall: an operator for AIBrix's orchestration API (StormService, RoleSet, PodSet).
#[derive(Debug, Parser)]
#[command(name = "squall", version, about)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the operator: admission webhooks, certificates, controllers, admin server.
    Run(Box<run::RunArgs>),
    /// Print the CustomResourceDefinitions squall serves, as multi-document YAML.
    Crds,
    /// Validate manifests offline with the admission webhook's rules.
    ///
    /// Prints errors (with field paths) and warnings for every StormService, RoleSet and
    /// PodSet; other kinds are skipped. Exit code: 0 when every object is valid, 1 when
    /// any object has errors, 2 when a file cannot be read or parsed.
    Lint {
        /// Manifest files (multi-document YAML); `-` reads standard input.
        #[arg(short = 'f', long = "filename", required = true)]
        files: Vec<PathBuf>,
        /// The operator's analysis configuration (`squall run --analysis-config`): analysis
        /// metrics must name its endpoints.
        #[arg(long)]
        analysis_config: Option<PathBuf>,
    },
    /// Remove squall's finalizers, for uninstalls where the operator is gone.
    ///
    /// Exit code: 0 when every finalizer was removed, 1 otherwise.
    Cleanup(cleanup::CleanupArgs),
    /// Predict taking over StormServices from AIBrix's controller: which RoleSets, pods and
    /// PodSets keep running under squall's labels and which are replaced. Nothing is written.
    Adopt(adopt::AdoptArgs),
    /// Canary rollouts: status, promote, abort, retry, pause, resume.
    #[command(flatten)]
    Canary(canary::CanaryCommand),
}

impl Cli {
    /// Runs the command, printing to standard output and error.
    pub fn run(self) -> ExitCode {
        match self.command {
            Command::Crds => {
                print!("{}", crate::crds_yaml());
                ExitCode::SUCCESS
            }
            Command::Lint {
                files,
                analysis_config,
            } => lint::run(&files, analysis_config.as_deref()),
            Command::Canary(command) => canary::run(command),
            Command::Cleanup(args) => cleanup::run(&args),
            Command::Adopt(args) => adopt::run(&args),
            Command::Run(args) => match run::run(*args) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("squall run: {e:#}");
                    ExitCode::FAILURE
                }
            },
        }
    }
}
