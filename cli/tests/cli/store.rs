//! `ackstore verify` on a store directory: the catalog, the cursor journal and every topic,
//! healthy and damaged.

use crate::support;

use std::path::Path;

use ackstore::internals::journal::segment_name;
use ackstore::{CursorOptions, Position, Store, StoreConfig};

/// A store with two topics (entries, a flushed cursor each, persisted in the store's journal).
fn sample_store(dir: &Path) {
    let store = Store::open(dir, StoreConfig::default()).unwrap();
    for name in ["persistent://t/ns/a", "b"] {
        let topic = store.topic(name).unwrap();
        for i in 0..5 {
            topic.append(format!("{name} {i}").as_bytes()).unwrap();
        }
        topic.sync().unwrap();
        let cursor = topic.open_cursor("sub", CursorOptions::default()).unwrap();
        cursor.ack(Position::new(1, 2)).unwrap();
        cursor.flush().unwrap();
    }
    store.close().unwrap();
}

#[test]
fn verify_checks_every_topic_and_the_journal_of_a_healthy_store() {
    let dir = tempfile::tempdir().unwrap();
    sample_store(dir.path());
    let out = support::cli::run(&["verify", dir.path().to_str().unwrap(), "--json"]);
    let report = support::cli::json(&out);
    assert!(out.status.success(), "{report}");
    assert_eq!(report["store"], true);
    assert_eq!(report["topics"], 2);
    assert_eq!(report["cursors"], 2);
    assert_eq!(
        report["journal_records"], 4,
        "a partition and a marker per cursor"
    );
    assert_eq!(report["damaged"], 0);
}

#[test]
fn verify_and_inspect_read_a_journal_whose_cursors_flushed_deltas() {
    let dir = tempfile::tempdir().unwrap();
    sample_store(dir.path());
    // A second flush of each cursor rewrites its one partition: a delta on its first marker.
    let store = Store::open(dir.path(), StoreConfig::default()).unwrap();
    for name in ["persistent://t/ns/a", "b"] {
        let topic = store.topic(name).unwrap();
        let cursor = topic.open_cursor("sub", CursorOptions::default()).unwrap();
        cursor.ack(Position::new(1, 4)).unwrap();
        cursor.flush().unwrap();
    }
    store.close().unwrap();
    // The directory stays locked while a handle lives.
    drop(store);
    let out = support::cli::run(&["verify", dir.path().to_str().unwrap(), "--json"]);
    let report = support::cli::json(&out);
    assert!(out.status.success(), "{report}");
    assert_eq!(report["cursors"], 2);
    assert_eq!(
        report["journal_records"], 8,
        "a partition and a marker, then a partition and a delta, per cursor"
    );
    assert_eq!(report["damaged"], 0);
    let out = support::cli::run(&["inspect", dir.path().to_str().unwrap(), "--json"]);
    let report = support::cli::json(&out);
    assert!(out.status.success(), "{report}");
    assert_eq!(report["journal"]["cursors"], 2);
    let store = Store::open(dir.path(), StoreConfig::default()).unwrap();
    for name in ["persistent://t/ns/a", "b"] {
        let cursor = store
            .topic(name)
            .unwrap()
            .open_cursor("sub", CursorOptions::default())
            .unwrap();
        for entry in 0..5 {
            let acked = cursor.is_acked(Position::new(1, entry)).unwrap();
            assert_eq!(acked, entry == 2 || entry == 4, "{name} entry {entry}");
        }
    }
}

#[test]
fn verify_names_the_topic_file_and_the_journal_segment_that_are_damaged() {
    let dir = tempfile::tempdir().unwrap();
    sample_store(dir.path());
    // A byte of the first topic's sealed ledger (in the topic's own directory), and a torn
    // tail of the journal.
    let ledger = std::fs::read_dir(dir.path().join("t1"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .find(|n| n.starts_with("ledger-"))
        .map(|n| format!("t1/{n}"))
        .expect("a ledger of topic 1");
    let path = dir.path().join(&ledger);
    let mut bytes = std::fs::read(&path).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0x55;
    std::fs::write(&path, bytes).unwrap();
    let seg = dir.path().join(segment_name(1));
    let mut bytes = std::fs::read(&seg).unwrap();
    bytes.extend_from_slice(&[7, 0, 0, 0, 1, 2]);
    std::fs::write(&seg, bytes).unwrap();

    let out = support::cli::run(&["verify", dir.path().to_str().unwrap(), "--json"]);
    let report = support::cli::json(&out);
    assert_eq!(out.status.code(), Some(1), "{report}");
    let findings = report["findings"].as_array().unwrap();
    assert!(
        findings
            .iter()
            .any(|f| f["file"] == ledger.as_str() && f["torn_tail"] == false),
        "{report}"
    );
    assert!(
        findings
            .iter()
            .any(|f| f["file"] == segment_name(1).as_str() && f["torn_tail"] == true),
        "{report}"
    );
}

#[test]
fn inspect_lists_the_topics_of_a_store_and_its_journal() {
    let dir = tempfile::tempdir().unwrap();
    sample_store(dir.path());
    let out = support::cli::run(&["inspect", dir.path().to_str().unwrap(), "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report = support::cli::json(&out);
    let topics = report["topics"].as_array().unwrap();
    let names: Vec<&str> = topics.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["persistent://t/ns/a", "b"]);
    assert!(
        topics
            .iter()
            .all(|t| t["cursors"] == 1 && t["ledgers"].as_u64() >= Some(1))
    );
    assert_eq!(report["journal"]["records"], 4);
    assert_eq!(report["journal"]["cursors"], 2);
}

#[test]
fn perf_with_topics_runs_the_store_workload_and_its_baseline_and_verifies_every_cursor() {
    let out = support::cli::run(&[
        "perf",
        "--topics",
        "3",
        "--cursors",
        "4",
        "--topic-entries",
        "40",
        "--ticks",
        "2",
        "--baseline",
        "--json",
    ]);
    let report = support::cli::json(&out);
    assert!(out.status.success(), "{report}");
    for run in [&report, &report["baseline"]] {
        assert_eq!(run["topics"], 3);
        assert_eq!(run["cursors"], 4);
        assert_eq!(run["verified"], true);
        for key in [
            "fsyncs_per_tick",
            "restart_ms",
            "restart_per_cursor_us",
            "threads",
            "ack_p99_us_during_flush",
        ] {
            assert!(run[key].is_number(), "{key} in {run}");
        }
        assert!(run["flush_tick_ms"]["median"].is_number());
        assert!(run["flush_tick_ms"]["max"].is_number());
        // Every phase of the restart has its wall and its CPU time.
        for phase in ["open", "topics", "cursors"] {
            for key in ["restart_phases_ms", "restart_phases_cpu_ms"] {
                assert!(
                    run[key][phase].as_f64() >= Some(0.0),
                    "{key}.{phase} in {run}"
                );
            }
        }
    }
    // The timed restart runs from one thread unless told otherwise.
    assert_eq!(report["restart_threads"], 1, "{report}");
    // The store's ticks sync once (a tick that starts a segment also lists it in the catalog,
    // two syncs, and syncs the segment before it); the baseline once per cursor at least.
    assert!(report["fsyncs_per_tick"].as_u64() <= Some(4));
    assert!(report["baseline"]["fsyncs_per_tick"].as_u64() >= Some(12));
    // What each of the store's two ticks had the journal do: a journal of a few kilobytes in one
    // segment of the default size (16 MiB) never rolls over. The baseline has no journal of the
    // store's.
    let ticks = report["tick_journal"].as_array().expect("tick_journal");
    assert_eq!(ticks.len(), 2, "{report}");
    for tick in ticks {
        assert_eq!(tick["rollovers"], 0, "{tick}");
        assert_eq!(tick["rebases"], 0, "{tick}");
        assert!(tick["loads"].is_u64(), "{tick}");
    }
    assert_eq!(
        report["baseline"]["tick_journal"].as_array().map(Vec::len),
        Some(0)
    );
}

/// With a budget smaller than the ack state of its cursors, the store workload runs with the
/// budget full (cursors release memory to others during the ticks) and still verifies every
/// cursor; the report splits the peak resident set into its anonymous and file-mapped parts.
#[test]
fn perf_with_topics_and_a_full_budget_releases_memory_and_verifies_every_cursor() {
    let out = support::cli::run(&[
        "perf",
        "--topics",
        "4",
        "--cursors",
        "25",
        "--topic-entries",
        "200",
        "--ticks",
        "2",
        "--ack-budget-bytes",
        "4096",
        "--json",
    ]);
    let report = support::cli::json(&out);
    assert!(out.status.success(), "{report}");
    assert_eq!(report["verified"], true, "{report}");
    assert_eq!(report["ack_memory_budget_bytes"], 4096);
    assert!(
        report["ack_released_bytes"].as_u64() > Some(0),
        "the budget was never full: {report}"
    );
    for key in [
        "peak_rss_anon_bytes",
        "peak_rss_file_bytes",
        "peak_rss_anon_per_cursor_bytes",
        "tick_bytes_median",
    ] {
        assert!(report[key].is_number(), "{key} in {report}");
    }
    assert!(report["peak_rss_anon_bytes"].as_u64() > Some(0), "{report}");
    assert!(report["tick_bytes_median"].as_f64() > Some(0.0), "{report}");
    for part in ["on_cpu", "waiting_for_cpu", "blocked"] {
        assert!(
            report["tick_thread_ms"][part].is_number(),
            "{part} in {report}"
        );
    }
}

/// With `--restart-threads`, the timed restart opens the topics and the cursors (each to its
/// first read) from that many threads, the budget full so that first reads load partitions
/// back while other threads' reads evict them, and every entry of every cursor still matches
/// what the workload acknowledged and flushed.
#[test]
fn perf_with_restart_threads_reopens_from_that_many_threads_and_verifies_every_cursor() {
    let out = support::cli::run(&[
        "perf",
        "--topics",
        "7",
        "--cursors",
        "6",
        "--topic-entries",
        "200",
        "--ticks",
        "2",
        "--ack-budget-bytes",
        "4096",
        "--restart-threads",
        "3",
        "--json",
    ]);
    let report = support::cli::json(&out);
    assert!(out.status.success(), "{report}");
    assert_eq!(report["restart_threads"], 3, "{report}");
    assert_eq!(report["verified"], true, "{report}");
    assert_eq!(report["total_cursors"], 42, "{report}");
    for phase in ["topics", "cursors"] {
        assert!(
            report["restart_phases_cpu_ms"][phase].as_f64() > Some(0.0),
            "{phase} in {report}"
        );
    }
}

/// The committed sample of the flat layout (catalog version 2: every topic's files in the store
/// directory) verifies clean and is listed by `inspect`, before and after the store opened it
/// and created a topic in a directory of its own.
#[test]
fn verify_and_inspect_read_a_store_of_the_flat_layout_and_one_upgraded_by_an_open() {
    let dir = support::samples::sample_dir("store-v2-flat");
    let path = dir.path().to_str().unwrap();
    let check = |topics: usize| {
        let out = support::cli::run(&["verify", path, "--json"]);
        let report = support::cli::json(&out);
        assert!(out.status.success(), "{report}");
        assert_eq!(report["topics"], topics, "{report}");
        assert_eq!(report["cursors"], 4, "{report}");
        let out = support::cli::run(&["inspect", path, "--json"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            support::cli::json(&out)["topics"].as_array().unwrap().len(),
            topics
        );
    };
    check(2);
    let store = Store::open(dir.path(), StoreConfig::default()).unwrap();
    let topic = store.topic("spaced").unwrap();
    topic.append(b"m").unwrap();
    topic.sync().unwrap();
    drop(topic);
    store.close().unwrap();
    drop(store);
    check(3);
}

/// A topic the catalog lists whose directory is gone is damage, named after the directory, and
/// the store's other topics are still checked.
#[test]
fn verify_reports_a_listed_topic_whose_directory_is_missing() {
    let dir = tempfile::tempdir().unwrap();
    sample_store(dir.path());
    std::fs::remove_dir_all(dir.path().join("t2")).unwrap();
    let out = support::cli::run(&["verify", dir.path().to_str().unwrap(), "--json"]);
    let report = support::cli::json(&out);
    assert_eq!(out.status.code(), Some(1), "{report}");
    let findings = report["findings"].as_array().unwrap();
    assert!(
        findings
            .iter()
            .any(|f| f["file"] == "t2/" && f["torn_tail"] == false),
        "{report}"
    );
    assert_eq!(report["cursors"], 1, "topic 1 is still checked: {report}");
    assert!(matches!(
        Store::open(dir.path(), StoreConfig::default())
            .unwrap()
            .topic("b"),
        Err(ackstore::Error::Io { .. })
    ));
}

/// A store's topic directory given alone, in its place or copied elsewhere: `verify` reports the
/// refusal the open makes (exit 1, naming the store) and `inspect` refuses it (exit 2), since
/// its cursors' state is in the store's journal.
#[test]
fn verify_and_inspect_of_a_stores_topic_directory_alone_refuse_it_as_the_open_does() {
    let dir = tempfile::tempdir().unwrap();
    sample_store(dir.path());
    let elsewhere = tempfile::tempdir().unwrap();
    let copy = elsewhere.path().join("orders");
    std::fs::create_dir(&copy).unwrap();
    for entry in std::fs::read_dir(dir.path().join("t1")).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, copy.join(path.file_name().unwrap())).unwrap();
    }
    for topic_dir in [dir.path().join("t1"), copy] {
        let topic_dir = topic_dir.to_str().unwrap();
        let out = support::cli::run(&["verify", topic_dir, "--json"]);
        let report = support::cli::json(&out);
        assert_eq!(out.status.code(), Some(1), "{topic_dir}: {report}");
        assert!(
            report["findings"]
                .as_array()
                .unwrap()
                .iter()
                .any(|f| f["problem"]
                    .as_str()
                    .unwrap()
                    .contains("belongs to the store")),
            "{topic_dir}: {report}"
        );
        let out = support::cli::run(&["inspect", topic_dir]);
        assert_eq!(out.status.code(), Some(2), "{topic_dir}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("belongs to the store"),
            "{topic_dir}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// `verify` and `inspect` of a store that another user owns and lets others read (as an
/// operator's or a monitor's account reads a broker's store): every open the command makes with
/// `O_NOATIME`, which the kernel grants the owner only, is made again without it, and the
/// answers are the owner's. Needs root to run the command as another user (`nobody`, 65534)
/// on files root owns; the CI runs as root.
#[test]
fn verify_and_inspect_of_a_store_another_user_owns_answer_as_for_its_owner() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    use std::os::unix::process::CommandExt;

    let root = tempfile::tempdir().unwrap();
    let probe = root.path().join("probe");
    std::fs::write(&probe, b"").unwrap();
    if std::fs::metadata(&probe).unwrap().uid() != 0 {
        eprintln!("not root: no file here is owned by another user than this test's");
        return;
    }
    let dir = root.path().join("store");
    sample_store(&dir);
    // Others may read (and enter) every file and directory, and run a copy of the command.
    let mut paths = vec![root.path().to_path_buf()];
    let mut i = 0;
    while i < paths.len() {
        let path = paths[i].clone();
        let mode = if path.is_dir() { 0o755 } else { 0o644 };
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        if path.is_dir() {
            paths.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
        }
        i += 1;
    }
    // The copy is written by another process (`install`), never through a descriptor of this
    // one: a command another test spawns meanwhile would inherit that descriptor until its
    // exec, and the copy's exec would fail with ETXTBSY while any process holds it open for
    // writing.
    let command = root.path().join("ackstore");
    let copied = std::process::Command::new("install")
        .arg("-m0755")
        .arg(support::cli::binary())
        .arg(&command)
        .status()
        .unwrap();
    assert!(copied.success(), "install the command's copy: {copied}");

    let dir_arg = dir.to_str().unwrap();
    for args in [
        ["verify", dir_arg, "--json"],
        ["inspect", dir_arg, "--json"],
    ] {
        let owner = support::cli::run(&args);
        let other = std::process::Command::new(&command)
            .args(args)
            .env("ACKSTORE_NO_PROGRESS", "1")
            .uid(65534)
            .gid(65534)
            .output()
            .unwrap();
        assert!(
            owner.status.success() && other.status.success(),
            "{args:?}: the owner's {:?}, another user's {:?}: {}",
            owner.status,
            other.status,
            String::from_utf8_lossy(&other.stderr)
        );
        assert_eq!(
            support::cli::json(&other),
            support::cli::json(&owner),
            "{args:?}"
        );
    }
    let report = support::cli::json(&support::cli::run(&["verify", dir_arg, "--json"]));
    assert_eq!(
        (report["topics"].clone(), report["damaged"].clone()),
        (2.into(), 0.into())
    );
}
