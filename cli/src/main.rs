//! The `ackstore` command: run a realistic cursor workload (`perf`), show what a directory holds
//! (`inspect`), and check every byte of it (`verify`).
//!
//! Errors are printed as sentences on stderr. The exit codes are the three below and no other
//! (a panic would be 101: no input, output or argument may cause one):
//!
//! - 0: success;
//! - 1: `perf` verification or `verify` found a problem;
//! - 2: the command could not run (bad arguments, a missing or foreign directory), or its output
//!   could not be written (a full device).
//!
//! Output owns one rule: every `print!`/`println!`/`eprint!`/`eprintln!` of the subcommands goes
//! through the macros below, which shadow std's in every module declared after them. std's
//! macros panic when a write fails; these never do. A reader that closed the pipe (`ackstore
//! verify DIR | head -1`) ends the output quietly and the exit code is still the command's own;
//! any other failed write of stdout (`> /dev/full`) drops the rest of the output and makes the
//! exit code 2 with a sentence on stderr. A failed write of stderr is ignored.

#![warn(clippy::pedantic)]

/// `print!` that never panics: see the module docs and [`report::print_out`].
macro_rules! print {
    ($($arg:tt)*) => {
        $crate::report::print_out(format_args!($($arg)*))
    };
}

/// `println!` that never panics: see the module docs and [`report::print_out`].
macro_rules! println {
    () => {
        $crate::report::print_out(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::report::print_out(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `eprint!` that never panics: see [`report::print_err`].
#[allow(
    unused_macros,
    reason = "kept with the others so no std print macro is reachable"
)]
macro_rules! eprint {
    ($($arg:tt)*) => {
        $crate::report::print_err(format_args!($($arg)*))
    };
}

/// `eprintln!` that never panics: see [`report::print_err`].
macro_rules! eprintln {
    () => {
        $crate::report::print_err(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::report::print_err(format_args!("{}\n", format_args!($($arg)*)))
    };
}

mod dir;
mod inspect;
mod perf;
mod perf_batch;
mod perf_store;
mod perf_workload;
mod report;
mod target;
mod verify;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// The exit codes, as `--help` prints them.
const EXIT_CODES: &str = "Exit codes:
  0  success
  1  `perf` verification or `verify` found a problem
  2  the command could not run, or its output could not be written (a closed pipe is not an error)";

/// Command-line entry point.
#[derive(Debug, Parser)]
#[command(
    name = "ackstore",
    version,
    about = "Persist message-broker cursors: every ack, crash-safe, in bounded memory",
    long_about = None,
    after_help = EXIT_CODES
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
    let code = match outcome {
        Ok(code) => code,
        Err(err) => {
            eprintln!("ackstore: {}", report::describe(&err));
            ExitCode::from(2)
        }
    };
    match report::finish_output() {
        Ok(()) => code,
        Err(err) => {
            eprintln!("ackstore: cannot write the output: {err}");
            ExitCode::from(2)
        }
    }
}
