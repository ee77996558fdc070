//! The `ackstore` binary when its output cannot be written (a reader that closed the pipe, a full
//! device) and on cursor names wider than any format width: only the documented exit codes (0, 1,
//! 2), never a panic (101).

use std::fs::File;
use std::path::Path;
use std::process::{Output, Stdio};

use ackstore::{CursorOptions, LedgerConfig, ManagedLedger};

use crate::support;

/// Runs the command with its stdout the write end of a pipe whose read end is already closed,
/// as `ackstore verify DIR | head -1` is once `head` has its line.
fn into_closed_pipe(args: &[&str]) -> Output {
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    support::cli::command(args)
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .expect("the binary runs")
}

/// Runs the command with its stdout (or stderr) on `/dev/full`: every write fails with ENOSPC.
fn into_full_device(args: &[&str], stream: &str) -> Output {
    let full = || {
        File::options()
            .write(true)
            .open("/dev/full")
            .expect("/dev/full")
    };
    let mut cmd = support::cli::command(args);
    match stream {
        "stdout" => cmd.stdout(full()).stderr(Stdio::piped()),
        _ => cmd.stdout(Stdio::piped()).stderr(full()),
    };
    cmd.output().expect("the binary runs")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A small healthy topic with one cursor named `name` that acked one entry.
fn topic_with_cursor(dir: &Path, name: &str) {
    let ml = ManagedLedger::open(dir, LedgerConfig::default()).unwrap();
    let first = ml.append(b"one").unwrap();
    ml.append(b"two").unwrap();
    ml.sync().unwrap();
    let cursor = ml.open_cursor(name, CursorOptions::default()).unwrap();
    cursor.ack(first).unwrap();
    cursor.close().unwrap();
    ml.close().unwrap();
}

/// A topic whose first ledger has a flipped byte in the middle: `verify` reports damage.
fn damaged_topic(dir: &Path) {
    let config = LedgerConfig {
        max_entries_per_ledger: 10,
        ..LedgerConfig::default()
    };
    let ml = ManagedLedger::open(dir, config).unwrap();
    for i in 0..25 {
        ml.append(format!("entry {i}").as_bytes()).unwrap();
    }
    ml.close().unwrap();
    let mut ledgers: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    ledgers.sort();
    let mut bytes = std::fs::read(&ledgers[0]).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x40;
    std::fs::write(&ledgers[0], bytes).unwrap();
}

fn assert_no_panic(out: &Output, what: &str) {
    assert_ne!(
        out.status.code(),
        Some(101),
        "{what} panicked: {}",
        stderr(out)
    );
    assert!(
        !stderr(out).contains("panicked"),
        "{what} panicked: {}",
        stderr(out)
    );
}

#[test]
fn a_closed_pipe_ends_the_output_quietly_and_keeps_the_commands_exit_code() {
    let healthy = tempfile::tempdir().unwrap();
    topic_with_cursor(healthy.path(), "sub");
    let damaged = tempfile::tempdir().unwrap();
    damaged_topic(damaged.path());
    let healthy = healthy.path().to_str().unwrap();
    let damaged = damaged.path().to_str().unwrap();
    for (args, code) in [
        (vec!["verify", healthy], 0),
        (vec!["verify", healthy, "--json"], 0),
        (vec!["verify", damaged], 1),
        (vec!["verify", damaged, "--json"], 1),
        (vec!["inspect", healthy], 0),
        (vec!["inspect", healthy, "--json"], 0),
        (vec!["perf", "--entries", "300"], 0),
        (vec!["perf", "--entries", "300", "--json"], 0),
    ] {
        let out = into_closed_pipe(&args);
        assert_no_panic(&out, &args.join(" "));
        assert_eq!(out.status.code(), Some(code), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).is_empty(), "{args:?}: {}", stderr(&out));
    }
}

#[test]
fn a_full_device_on_stdout_is_exit_code_2_with_a_sentence() {
    let healthy = tempfile::tempdir().unwrap();
    topic_with_cursor(healthy.path(), "sub");
    let damaged = tempfile::tempdir().unwrap();
    damaged_topic(damaged.path());
    let healthy = healthy.path().to_str().unwrap();
    let damaged = damaged.path().to_str().unwrap();
    for args in [
        vec!["verify", healthy],
        vec!["verify", damaged, "--json"],
        vec!["inspect", healthy],
        vec!["inspect", healthy, "--json"],
        vec!["perf", "--entries", "300"],
        vec!["perf", "--entries", "300", "--json"],
    ] {
        let out = into_full_device(&args, "stdout");
        assert_no_panic(&out, &args.join(" "));
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("cannot write the output"),
            "{args:?}: {}",
            stderr(&out)
        );
    }
}

#[test]
fn a_full_device_on_stderr_keeps_the_exit_code() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing");
    let out = into_full_device(&["verify", missing.to_str().unwrap()], "stderr");
    assert_eq!(out.status.code(), Some(2));
    let out = into_full_device(&["verify", dir.path().to_str().unwrap()], "stderr");
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn help_and_usage_errors_into_a_full_device_keep_claps_exit_codes() {
    for (args, code) in [
        (vec!["--help"], 0),
        (vec!["verify", "--help"], 0),
        (vec!["--version"], 0),
        (vec!["frobnicate"], 2),
    ] {
        for stream in ["stdout", "stderr"] {
            let out = into_full_device(&args, stream);
            assert_eq!(out.status.code(), Some(code), "{args:?} {stream}");
        }
        let out = into_closed_pipe(&args);
        assert_eq!(out.status.code(), Some(code), "{args:?} closed pipe");
    }
}

#[test]
fn help_lists_the_exit_codes() {
    let out = support::cli::command(&["--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("Exit codes"), "{help}");
    for code in ["0", "1", "2"] {
        assert!(
            help.lines().any(|l| l.trim_start().starts_with(code)),
            "exit code {code} is not listed: {help}"
        );
    }
}

#[test]
fn inspect_prints_a_cursor_name_longer_than_any_format_width() {
    let dir = tempfile::tempdir().unwrap();
    let name = "n".repeat(70_000);
    topic_with_cursor(dir.path(), &name);
    let out = support::cli::command(&["inspect", dir.path().to_str().unwrap()])
        .output()
        .unwrap();
    assert_no_panic(&out, "inspect");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(&format!("{name:?}")), "the name is missing");
    // The columns after the name follow it, padded as for a short name.
    let row = text
        .lines()
        .find(|l| l.starts_with(&format!("{name:?}")))
        .expect("the cursor row");
    assert!(
        row.ends_with(" 0"),
        "the row ends with the epoch: {}",
        &row[row.len() - 80..]
    );
    let out = support::cli::command(&["verify", dir.path().to_str().unwrap()])
        .output()
        .unwrap();
    assert_no_panic(&out, "verify");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

/// Every numeric argument and pattern of `perf` outside its documented bounds (or not a number)
/// is refused with exit code 2 and a sentence naming the argument, before the workload starts:
/// no panic, no directory filled.
#[test]
fn perf_refuses_every_hostile_argument_with_exit_code_2() {
    const MAX: &str = "18446744073709551615";
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    let work = work.to_str().unwrap();
    let table: &[(&[&str], &str)] = &[
        (&["--entries", "0"], "--entries"),
        (&["--entries", "1000000001"], "--entries"),
        (&["--entries", MAX], "--entries"),
        (&["--entries", "-1"], "--entries"),
        (&["--entries", "x"], "--entries"),
        (&["--payload-bytes", "5242881"], "--payload-bytes"),
        (&["--payload-bytes", MAX], "--payload-bytes"),
        (
            &["--entries", "1000000000", "--payload-bytes", "5242880"],
            "--entries",
        ),
        (&["--extra-acks", MAX], "--extra-acks"),
        (&["--lru-bytes", MAX], "--lru-bytes"),
        (&["--entries-per-ledger", "0"], "--entries-per-ledger"),
        (&["--entries-per-ledger", MAX], "--entries-per-ledger"),
        (&["--seed", "-1"], "--seed"),
        (&["--batch-size", "0"], "--batch-size"),
        (&["--batch-size", "1048577"], "--batch-size"),
        (&["--batch-size", "4294967295"], "--batch-size"),
        (&["--batch-size", MAX], "--batch-size"),
        (&["--pattern", &format!("holes:{MAX}")], "holes:K"),
        (&["--pattern", "holes:1000000001"], "holes:K"),
        (&["--pattern", "holes:0"], "holes:K"),
        (&["--pattern", "holes:1"], "holes:K"),
        (&["--pattern", "holes:-3"], "holes:K"),
        (&["--pattern", "random:0"], "fraction"),
        (&["--pattern", "random:NaN"], "fraction"),
        (&["--pattern", "random:inf"], "fraction"),
        (&["--pattern", "random:1.5"], "fraction"),
        (&["--pattern", "sparse:-0"], "fraction"),
        (&["--pattern", "sparse:"], "number"),
        (&["--pattern", "bogus:1"], "pattern"),
        (&["--topics", "0"], "--topics"),
        (&["--topics", "1000001"], "--topics"),
        (&["--topics", MAX], "--topics"),
        (&["--topics", "1", "--cursors", "0"], "--cursors"),
        (&["--topics", "1", "--cursors", MAX], "--cursors"),
        (&["--topics", "1000", "--cursors", "1000"], "--topics"),
        (
            &[
                "--topics",
                "100000",
                "--cursors",
                "1",
                "--topic-entries",
                "1001",
            ],
            "--topic-entries",
        ),
        (
            &["--topics", "1", "--topic-entries", "1"],
            "--topic-entries",
        ),
        (
            &["--topics", "1", "--topic-entries", MAX],
            "--topic-entries",
        ),
        (&["--topics", "1", "--ticks", "0"], "--ticks"),
        (&["--topics", "1", "--ticks", MAX], "--ticks"),
        (
            &["--topics", "1", "--restart-threads", "0"],
            "--restart-threads",
        ),
        (
            &["--topics", "1", "--restart-threads", "257"],
            "--restart-threads",
        ),
        (
            &["--topics", "1", "--restart-threads", "-1"],
            "--restart-threads",
        ),
        (
            &["--topics", "1", "--restart-threads", MAX],
            "--restart-threads",
        ),
        (&["--sweep", "10"], "--sweep"),
        (&["--sweep", "0,10"], "--sweep"),
        (&["--sweep", "10,1000001"], "--sweep"),
        (&["--sweep", "10,18446744073709551615"], "--sweep"),
        (&["--sweep", "30,10"], "--sweep"),
        (&["--sweep", "1,2,3,4,5,6,7,8,9"], "--sweep"),
        (&["--sweep", "10,15", "--cursors", "10"], "--sweep"),
        (
            &[
                "--sweep",
                "10,100000",
                "--cursors",
                "10",
                "--topic-entries",
                "1001",
            ],
            "--sweep",
        ),
        (&["--sweep", "10,20", "--topics", "1"], "--sweep"),
        (&["--ack-budget-bytes", "1023"], "--ack-budget-bytes"),
        (
            &["--ack-budget-bytes", "1099511627777"],
            "--ack-budget-bytes",
        ),
        (&["--storage", "tape"], "--storage"),
        (&["--mode", "both"], "--mode"),
        (&["--batch-pattern", "odd"], "--batch-pattern"),
    ];
    for (args, names) in table {
        let mut all = vec!["perf", "--dir", work];
        all.extend_from_slice(args);
        let out = support::cli::command(&all).output().unwrap();
        assert_no_panic(&out, &all.join(" "));
        assert_eq!(out.status.code(), Some(2), "{all:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains(names),
            "{all:?} does not name {names}: {}",
            stderr(&out)
        );
        assert!(
            !Path::new(work).exists(),
            "{all:?} created {work} before refusing"
        );
    }
}

/// Values at the edges of the bounds run (small workloads), without a panic.
#[test]
fn perf_runs_at_the_edges_of_its_bounds() {
    for args in [
        &["--entries", "1", "--pattern", "holes:1000000000"][..],
        &["--entries", "3", "--pattern", "sparse:1e-300"],
        &["--entries", "3", "--pattern", "random:5e-324"],
        &[
            "--entries",
            "3",
            "--pattern",
            "holes:2",
            "--extra-acks",
            "1000000000",
        ],
        &["--entries", "2", "--payload-bytes", "0", "--lru-bytes", "0"],
        &[
            "--entries",
            "3",
            "--entries-per-ledger",
            "1",
            "--seed",
            "18446744073709551615",
        ],
        &["--entries", "2", "--batch-size", "1048576"],
        &[
            "--topics",
            "1",
            "--cursors",
            "1",
            "--topic-entries",
            "2",
            "--ticks",
            "1",
        ],
    ] {
        let mut all = vec!["perf", "--json"];
        all.extend_from_slice(args);
        let out = support::cli::command(&all).output().unwrap();
        assert_no_panic(&out, &all.join(" "));
        assert_eq!(out.status.code(), Some(0), "{all:?}: {}", stderr(&out));
    }
}

/// The bounds of `perf`'s numeric arguments are in its `--help`.
#[test]
fn perf_help_states_the_bounds_of_every_numeric_argument() {
    let out = support::cli::command(&["perf", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    for (arg, bound) in [
        ("--entries", "1,000,000,000"),
        ("--payload-bytes", "5,242,880"),
        ("--extra-acks", "1,000,000,000"),
        ("--lru-bytes", "1 TiB"),
        ("--entries-per-ledger", "1,000,000,000"),
        ("--batch-size", "1,048,576"),
        ("--topics", "1,000,000"),
        ("--cursors", "1,000,000"),
        ("--topic-entries", "1,000,000"),
        ("--ticks", "1,000"),
        ("--restart-threads", "1 to 256"),
        ("--sweep", "1,000,000"),
        ("--ack-budget-bytes", "1,099,511,627,776"),
        ("--pattern", "2 to 1,000,000,000"),
    ] {
        let text = help
            .split(&format!("      {arg} "))
            .nth(1)
            .unwrap_or_else(|| panic!("{arg} is not in the help: {help}"));
        let text = text.split("\n      --").next().unwrap_or(text);
        assert!(text.contains(bound), "{arg} does not state {bound}: {text}");
    }
}
