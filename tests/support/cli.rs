//! The `ackstore` command, run by the tests of its behaviour (feature `cli`, which builds it).

use std::process::{Command, Output};

/// The command with `args`, its progress display off.
pub fn command(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ackstore"));
    command.args(args).env("ACKSTORE_NO_PROGRESS", "1");
    command
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
