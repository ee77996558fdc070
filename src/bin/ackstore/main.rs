//! The `ackstore` command: run a realistic cursor workload (`perf`), show what a directory holds
//! (`inspect`), and check every byte of it (`verify`).
//!
//! Errors are printed as sentences on stderr; the exit code is 0 on success, 1 when `perf`
//! verification or `verify` finds a problem, and 2 when the command could not run at all.

#![warn(clippy::pedantic)]

mod dir;
mod inspect;
mod perf;
mod report;
mod verify;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Command-line entry point.
#[derive(Debug, Parser)]
#[command(
    name = "ackstore",
    version,
    about = "Persist message-broker cursors: every ack, crash-safe, in bounded memory",
    long_about = None
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a realistic workload (append, ack, flush, restart, verify) and report figures.
    Perf(perf::PerfArgs),
    /// Show the ledgers and cursors of a directory (read-only).
    Inspect(inspect::InspectArgs),
    /// Check every frame, marker, partition and metadata record of a directory (read-only).
    Verify(verify::VerifyArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let outcome = match cli.command {
        Command::Perf(args) => perf::run(&args),
        Command::Inspect(args) => inspect::run(&args),
        Command::Verify(args) => verify::run(&args),
    };
    match outcome {
        Ok(code) => code,
        Err(err) => {
            eprintln!("ackstore: {}", report::describe(&err));
            ExitCode::from(2)
        }
    }
}
