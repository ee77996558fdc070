//! The `ackstore` command, run by the tests of its behaviour (the tests of package
//! `ackstore-cli`, which builds it; elsewhere these panic, and the check API is called instead).

use std::process::{Command, Output};

/// The command with `args`, its progress display off.
pub fn command(args: &[&str]) -> Command {
    let mut command = Command::new(binary());
    command.args(args).env("ACKSTORE_NO_PROGRESS", "1");
    command
}

/// The command's binary, as cargo built it for these tests.
#[allow(
    clippy::option_env_unwrap,
    reason = "only the tests of package ackstore-cli run the command, and cargo builds it for them"
)]
pub fn binary() -> &'static str {
    option_env!("CARGO_BIN_EXE_ackstore")
        .expect("the command is built for the tests of package ackstore-cli only")
}

/// Runs the command with `args` (progress display off) to its end.
pub fn run(args: &[&str]) -> Output {
    command(args).output().expect("the binary runs")
}

/// What the command printed on stdout, as JSON; fails the test with the text when it is not.
pub fn json(out: &Output) -> serde_json::Value {
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}
