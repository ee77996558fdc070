//! `ackstore verify` and `inspect` on a store whose cursor journal rolled over many segments and
//! holds forget records of deleted cursors and cursors recreated under the same name.

use std::process::Command;

use ackstore::{CursorOptions, JournalConfig, Store, StoreConfig};

use crate::support;

fn churned_store(dir: &std::path::Path) {
    let config = StoreConfig {
        journal: JournalConfig { segment_bytes: 512 },
        flusher_threads: 0,
        ..StoreConfig::default()
    };
    let store = Store::open(dir, config).expect("open");
    let topic = store.topic("persistent://t/ns/churn").expect("topic");
    let ps: Vec<_> = (0..200)
        .map(|i| topic.append(format!("{i}").as_bytes()).expect("append"))
        .collect();
    topic.sync().expect("sync");
    for round in 0..12 {
        for c in 0..3 {
            let cursor = topic
                .open_cursor(&format!("sub-{c}"), CursorOptions::default())
                .expect("cursor");
            for p in ps.iter().skip(round + c).step_by(5) {
                cursor.ack(*p).expect("ack");
            }
            store.flush_all().expect("flush_all");
        }
        if round % 3 == 1 {
            topic.delete_cursor("sub-1").expect("delete");
        }
    }
    store.close().expect("close");
}

#[test]
fn verify_finds_a_store_with_rolled_segments_and_deleted_cursors_healthy() {
    let dir = tempfile::tempdir().expect("dir");
    churned_store(dir.path());
    let out = support::cli::run(&["verify", dir.path().to_str().expect("utf-8"), "--json"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_str(text.trim()).expect("json");
    assert_eq!(report["damaged"], 0, "{report}");
    assert_eq!(report["cursors"], 3, "{report}");
    let out = support::cli::run(&["inspect", dir.path().to_str().expect("utf-8"), "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("inspect prints JSON");
    assert_eq!(report["journal"]["cursors"], 3, "{report}");
    // The store still opens with its three cursors after both commands.
    let store = Store::open(dir.path(), StoreConfig::default()).expect("reopen");
    let topic = store.topic("persistent://t/ns/churn").expect("topic");
    assert_eq!(topic.cursor_names().len(), 3);
}

/// A second process opening a store directory another process holds is refused, and its
/// attempt leaves the holder's flushes and the store intact.
#[test]
fn a_second_process_is_refused_a_store_directory_the_first_holds() {
    if let Ok(dir) = std::env::var("RT_SEAM_CHILD_DIR") {
        let code = match Store::open(std::path::Path::new(&dir), StoreConfig::default()) {
            Ok(store) => {
                // Try to write through it too: a tick, then a cursor flush.
                let topic = store.topic("persistent://t/ns/churn");
                let wrote = topic.is_ok_and(|t| {
                    t.open_cursor("intruder", CursorOptions::default())
                        .is_ok_and(|c| c.flush().is_ok())
                });
                if wrote { 2 } else { 4 }
            }
            Err(_) => 3,
        };
        std::process::exit(code);
    }
    let dir = tempfile::tempdir().expect("dir");
    churned_store(dir.path());
    // The lock is a `flock` on an open file: a child another test of this binary is spawning
    // holds a copy of every descriptor between its fork and its exec, so the closed store's
    // lock can outlive it for that moment. Try again briefly before calling it held.
    let mut tries = 0;
    let store = loop {
        match Store::open(dir.path(), StoreConfig::default()) {
            Err(ackstore::Error::Locked { .. }) if tries < 50 => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            opened => break opened.expect("open"),
        }
    };
    let topic = store.topic("persistent://t/ns/churn").expect("topic");
    let cursor = topic
        .open_cursor("sub-0", CursorOptions::default())
        .expect("cursor");
    let status = Command::new(std::env::current_exe().expect("exe"))
        .args([
            "--exact",
            support::harness::test_path(
                module_path!(),
                "a_second_process_is_refused_a_store_directory_the_first_holds",
            )
            .as_str(),
            "--nocapture",
        ])
        .env("RT_SEAM_CHILD_DIR", dir.path())
        .status()
        .expect("child runs");
    assert_eq!(status.code(), Some(3), "the second process was not refused");
    cursor
        .ack(topic.last_position().expect("entries"))
        .expect("ack");
    store.flush_all().expect("the holder still flushes");
    store.close().expect("close");
}
