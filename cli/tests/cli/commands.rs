//! The `ackstore` binary end to end: `perf`, `inspect` and `verify` on real directories,
//! healthy, damaged, torn, missing and foreign.

use std::path::Path;
use std::process::Output;

use ackstore::internals::log::{ledger_file_name, parse_ledger_file_name};

use crate::support;

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A copy of the committed sample of a topic with 3 sealed ledgers of 10 entries and an open
/// one with 5, and a cursor `sub/../x` on a cursor ledger (what inspect's per-cursor columns
/// of a cursor ledger show; a journal cursor's state is in its journal rows) that acked every
/// third entry from the second.
fn sample_topic() -> tempfile::TempDir {
    support::samples::sample_dir("cursor-ledger-inspect")
}

fn ledger_files(dir: &Path) -> Vec<(u64, std::path::PathBuf)> {
    let mut out: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let e = e.unwrap();
            let id = parse_ledger_file_name(e.file_name().to_str()?)?;
            Some((id, e.path()))
        })
        .collect();
    out.sort();
    out
}

#[test]
fn perf_json_report_has_every_key_with_sane_values() {
    let out = support::cli::run(&["perf", "--entries", "20000", "--json"]);
    assert!(out.status.success(), "perf failed: {}", stderr(&out));
    let r = support::cli::json(&out);
    for key in [
        "entries",
        "acked",
        "ranges",
        "append_mb_per_s",
        "acks_per_s",
        "flush_ms",
        "persisted_bytes",
        "bytes_per_range",
        "pulsar_range_bytes",
        "first_flush_after_restart_bytes",
        "incremental_flush_bytes",
        "recover_first_read_ms",
        "recover_full_ms",
        "resident_ack_bytes",
        "peak_rss_bytes",
        "verified",
    ] {
        assert!(!r[key].is_null(), "key {key} missing in {r}");
    }
    assert_eq!(r["entries"], 20_000);
    // Alternating: entries 1, 3, 5, ... are acked, each its own range.
    assert_eq!(r["acked"], 10_000);
    assert_eq!(r["ranges"], 10_000);
    assert_eq!(r["verified"], true);
    let persisted = r["persisted_bytes"].as_u64().unwrap();
    let pulsar = r["pulsar_range_bytes"].as_u64().unwrap();
    // One 8 KiB roaring container holds all 20,000 entries here; larger runs do far better.
    assert!(
        persisted > 0 && persisted * 10 < pulsar,
        "persisted {persisted} vs pulsar {pulsar}"
    );
    assert!(r["incremental_flush_bytes"].as_u64().unwrap() > 0);
    // The first write after the restart moves the whole state to a fresh cursor ledger (the
    // claim): at least what the full flush persisted.
    assert!(r["first_flush_after_restart_bytes"].as_u64().unwrap() >= persisted);
    assert!(r["peak_rss_bytes"].as_u64().unwrap() > 0);
    assert!(r["acks_per_s"].as_f64().unwrap() > 0.0);
}

#[test]
fn perf_runs_every_pattern_and_mode_and_verifies() {
    for (pattern, mode) in [
        ("sequential", "multi"),
        ("random:0.3", "multi"),
        ("sparse:0.01", "single"),
        ("alternating", "single"),
    ] {
        let out = support::cli::run(&[
            "perf",
            "--entries",
            "3000",
            "--pattern",
            pattern,
            "--mode",
            mode,
            "--json",
        ]);
        assert!(out.status.success(), "{pattern}/{mode}: {}", stderr(&out));
        assert_eq!(
            support::cli::json(&out)["verified"],
            true,
            "{pattern}/{mode}"
        );
    }
}

#[test]
fn perf_in_a_store_verifies_and_counts_what_the_journal_appended() {
    for pattern in ["alternating", "random:0.3"] {
        let out = support::cli::run(&[
            "perf",
            "--entries",
            "3000",
            "--pattern",
            pattern,
            "--in-store",
            "--json",
        ]);
        assert!(out.status.success(), "{pattern}: {}", stderr(&out));
        let r = support::cli::json(&out);
        assert_eq!(r["verified"], true, "{pattern}");
        assert_eq!(r["in_store"], true, "{pattern}");
        let persisted = r["persisted_bytes"].as_u64().unwrap();
        let incremental = r["incremental_flush_bytes"].as_u64().unwrap();
        assert!(persisted > 0 && incremental > 0, "{pattern}: {r}");
        // The restart's store open is part of the time to the first answer.
        let store_open = r["store_open_ms"].as_f64().unwrap();
        let to_first = r["open_to_first_answer_ms"].as_f64().unwrap();
        assert!(store_open > 0.0 && to_first >= store_open, "{pattern}: {r}");
    }
    // Batches: the acks are batch-index acks, persisted as batch records in the journal.
    let out = support::cli::run(&[
        "perf",
        "--entries",
        "3000",
        "--pattern",
        "random:0.3",
        "--batch-size",
        "4",
        "--in-store",
        "--json",
    ]);
    assert!(out.status.success(), "batches: {}", stderr(&out));
    assert_eq!(support::cli::json(&out)["verified"], true, "batches");
}

/// `perf --dir` on a directory an earlier run filled is refused before anything is written (its
/// entries and acknowledgements are not this run's truth), for every workload; the earlier run's
/// directory is left as it was, and a refusal never reads as a failed verification.
#[test]
fn perf_refuses_a_directory_an_earlier_run_filled() {
    for (name, workload) in [
        ("topic", &["--entries", "300"][..]),
        ("in-store", &["--entries", "300", "--in-store"]),
        (
            "store",
            &[
                "--topics",
                "2",
                "--cursors",
                "2",
                "--topic-entries",
                "20",
                "--ticks",
                "1",
            ],
        ),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let work = tmp.path().join("run");
        let work = work.to_str().unwrap();
        let mut args = vec!["perf", "--json", "--dir", work];
        args.extend_from_slice(workload);
        let first = support::cli::run(&args);
        assert!(
            first.status.success(),
            "{name}: first run: {}",
            stderr(&first)
        );
        assert_eq!(support::cli::json(&first)["verified"], true, "{name}");
        let before = tree(Path::new(work));
        assert!(
            !before.is_empty(),
            "{name}: the first run kept nothing in {work}"
        );

        let second = support::cli::run(&args);
        assert_eq!(second.status.code(), Some(2), "{name}: {}", stderr(&second));
        let text = stderr(&second);
        assert!(text.contains("is not empty"), "{name}: {text}");
        assert!(!text.contains("FAILED"), "{name}: {text}");
        assert_eq!(
            tree(Path::new(work)),
            before,
            "{name}: the refusal changed {work}"
        );
    }
    // An empty directory given by the caller is fresh.
    let tmp = tempfile::tempdir().unwrap();
    let out = support::cli::run(&[
        "perf",
        "--json",
        "--entries",
        "300",
        "--dir",
        tmp.path().to_str().unwrap(),
    ]);
    assert!(out.status.success(), "empty directory: {}", stderr(&out));
    assert_eq!(
        support::cli::json(&out)["verified"],
        true,
        "empty directory"
    );
}

/// `perf --dir` on what is not a fresh directory is refused with the usage exit code before
/// anything is written: a regular file, a directory holding only a hidden file, and a symbolic
/// link to such a directory (followed, as every later open would). None reads as a failed
/// verification, and each is left as it was.
#[test]
fn perf_refuses_a_file_a_hidden_file_and_a_link_to_a_used_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("file");
    std::fs::write(&file, b"not a directory").unwrap();
    let hidden = tmp.path().join("hidden");
    std::fs::create_dir(&hidden).unwrap();
    std::fs::write(hidden.join(".keep"), b"").unwrap();
    let link = tmp.path().join("link");
    std::os::unix::fs::symlink(&hidden, &link).unwrap();
    let before = tree(tmp.path());
    for (dir, says) in [
        (&file, "read directory"),
        (&hidden, "is not empty"),
        (&link, "is not empty"),
    ] {
        let out = support::cli::run(&["perf", "--entries", "300", "--dir", dir.to_str().unwrap()]);
        let text = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{}: {text}", dir.display());
        assert!(text.contains(says), "{}: {text}", dir.display());
        assert!(!text.contains("FAILED"), "{}: {text}", dir.display());
    }
    assert_eq!(
        tree(tmp.path()),
        before,
        "a refusal changed what it was given"
    );
}

/// `perf --dir` on a symbolic link to nothing is refused with the usage exit code and a
/// sentence that names the link and its missing target; nothing is created where it points.
#[test]
fn perf_refuses_a_link_to_nothing_and_says_so() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("missing");
    let link = tmp.path().join("link");
    std::os::unix::fs::symlink(&missing, &link).unwrap();
    let out = support::cli::run(&["perf", "--entries", "300", "--dir", link.to_str().unwrap()]);
    let text = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(
        text.contains("is a symbolic link to") && text.contains("which does not exist"),
        "{text}"
    );
    assert!(!text.contains("File exists"), "{text}");
    assert!(!missing.exists(), "a refusal created the link's target");
    assert!(std::fs::symlink_metadata(&link).unwrap().is_symlink());
}

/// Every file under `dir` with its bytes.
fn tree(dir: &Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let path = e.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                out.push((path.clone(), std::fs::read(&path).unwrap()));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn perf_refuses_an_unknown_pattern_with_a_sentence() {
    let out = support::cli::run(&["perf", "--pattern", "zigzag"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("unknown pattern `zigzag`"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn inspect_shows_ledgers_and_cursor_state_without_changing_the_directory() {
    let dir = sample_topic();
    let before: Vec<_> = ledger_files(dir.path())
        .into_iter()
        .map(|(_, p)| std::fs::read(p).unwrap())
        .collect();
    let out = support::cli::run(&["inspect", dir.path().to_str().unwrap(), "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let r = support::cli::json(&out);
    let data: Vec<_> = r["ledgers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l["role"] == "data")
        .collect();
    assert_eq!(data.len(), 4);
    assert_eq!(
        data.iter()
            .map(|l| l["entries"].as_u64().unwrap())
            .sum::<u64>(),
        35
    );
    assert_eq!(data[0]["first_index"], 0);
    assert_eq!(data[3]["last_index"], 34);
    let cursors = r["cursors"].as_array().unwrap();
    assert_eq!(cursors.len(), 1);
    assert_eq!(cursors[0]["name"], "sub/../x");
    // Entries 1, 4, ..., 34: 12 acked entries, none adjacent.
    assert_eq!(cursors[0]["acked_entries"], 12);
    assert_eq!(cursors[0]["acked_ranges"], 12);
    // Acks in the four data ledgers: four small partitions, inline in the marker.
    assert_eq!(
        (
            &cursors[0]["partitions_inline"],
            &cursors[0]["partitions_separate"],
            &cursors[0]["index_pages"]
        ),
        (&4.into(), &0.into(), &0.into())
    );
    let after: Vec<_> = ledger_files(dir.path())
        .into_iter()
        .map(|(_, p)| std::fs::read(p).unwrap())
        .collect();
    assert_eq!(before, after, "inspect changed a ledger file");
    // The table form names the cursor too, and its table's shape.
    let out = support::cli::run(&["inspect", dir.path().to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("sub/../x"), "{text}");
    assert!(text.contains("4 inline/0 own/0 pages"), "{text}");
}

#[test]
fn verify_passes_a_healthy_directory() {
    let dir = sample_topic();
    let out = support::cli::run(&["verify", dir.path().to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        stderr(&out)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("0 damaged"));
}

#[test]
fn verify_names_the_ledger_and_offset_of_a_flipped_byte_in_a_sealed_ledger() {
    let dir = sample_topic();
    let (id, path) = ledger_files(dir.path()).into_iter().next().unwrap();
    let mut bytes = std::fs::read(&path).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x40;
    std::fs::write(&path, bytes).unwrap();
    let out = support::cli::run(&["verify", dir.path().to_str().unwrap(), "--json"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let r = support::cli::json(&out);
    assert_eq!(r["ok"], false);
    let findings = r["findings"].as_array().unwrap();
    assert!(
        findings
            .iter()
            .any(|f| f["file"] == ledger_file_name(id).as_str()
                && f["torn_tail"] == false
                && f["place"]
                    .as_str()
                    .unwrap()
                    .contains(&format!("ledger {id}"))),
        "{r}"
    );
}

#[test]
fn verify_reports_a_torn_tail_as_such_and_not_as_damage() {
    let dir = sample_topic();
    let data_ledgers: Vec<_> = ledger_files(dir.path());
    // Closing a topic seals its data ledgers; the cursor ledger stays open. Tear its tail.
    let out = support::cli::run(&["inspect", dir.path().to_str().unwrap(), "--json"]);
    let r = support::cli::json(&out);
    let open_id = r["ledgers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l["sealed"] == false)
        .map(|l| l["id"].as_u64().unwrap())
        .next()
        .expect("an open ledger");
    let path = &data_ledgers
        .iter()
        .find(|(id, _)| *id == open_id)
        .unwrap()
        .1;
    let mut bytes = std::fs::read(path).unwrap();
    bytes.extend_from_slice(&[0x2a; 21]);
    std::fs::write(path, bytes).unwrap();
    let out = support::cli::run(&["verify", dir.path().to_str().unwrap(), "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let r = support::cli::json(&out);
    assert_eq!(r["damaged"], 0, "{r}");
    assert_eq!(r["torn_tails"], 1, "{r}");
}

#[test]
fn a_missing_directory_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope");
    for cmd in ["inspect", "verify"] {
        let out = support::cli::run(&[cmd, missing.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2));
        let err = stderr(&out);
        assert!(err.contains("nope") && !err.contains("panicked"), "{err}");
    }
}

#[test]
fn a_directory_that_is_not_ackstore_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.txt"), "hello").unwrap();
    for cmd in ["inspect", "verify"] {
        let out = support::cli::run(&[cmd, dir.path().to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2));
        assert!(
            stderr(&out).contains("is not an ackstore directory"),
            "{}",
            stderr(&out)
        );
    }
}
