//! `ackstore verify` agrees with `Store::open` on stores of both layouts and on the
//! states a crash leaves between the new steps (a topic directory made, its catalog write not;
//! a listed topic whose first open never wrote its record; an unlisted journal segment).

mod support;

use std::path::Path;
use std::process::{Command, Output};

use ackstore::{CursorOptions, Position, Store, StoreConfig};

fn verify(dir: &Path) -> (Option<i32>, serde_json::Value) {
    let out: Output = Command::new(env!("CARGO_BIN_EXE_ackstore"))
        .args(["verify", dir.to_str().unwrap(), "--json"])
        .env("ACKSTORE_NO_PROGRESS", "1")
        .output()
        .expect("runs");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let v = serde_json::from_str(text.trim())
        .unwrap_or_else(|e| panic!("{e}: {text} {:?}", out.stderr));
    (out.status.code(), v)
}

fn opens(dir: &Path) -> ackstore::Result<()> {
    let store = Store::open(dir, StoreConfig::default())?;
    for name in store.topic_names() {
        let t = store.topic(&name)?;
        for c in t.cursor_names() {
            t.open_cursor(&c, CursorOptions::default())?
                .read_entries(1)?;
        }
    }
    store.close()
}

#[test]
fn verify_agrees_with_open_on_a_flat_store_after_the_upgrade() {
    let dir = support::samples::sample_dir("store-v2-flat");
    let (code, report) = verify(dir.path());
    assert_eq!(code, Some(0), "v2 as committed: {report}");
    {
        let store = Store::open(dir.path(), StoreConfig::default()).expect("open");
        let t = store.topic("new").expect("new topic");
        let p = t.append(b"n").expect("append");
        t.sync().expect("sync");
        let c = t
            .open_cursor("s", CursorOptions::default())
            .expect("cursor");
        c.ack(p).expect("ack");
        c.flush().expect("flush");
        let old = store
            .topic("persistent://tenant/ns/orders")
            .expect("flat topic");
        old.append(b"more").expect("append");
        old.sync().expect("sync");
        drop((c, t, old));
        store.close().expect("close");
    }
    let (code, report) = verify(dir.path());
    assert_eq!(code, Some(0), "after the upgrade: {report}");
    assert_eq!(report["topics"], 3, "{report}");
    opens(dir.path()).expect("opens");
}

#[test]
fn verify_agrees_with_open_on_a_listed_topic_whose_directory_is_empty() {
    // A topic the catalog lists whose first open was cut before its record was written: the
    // store opens it as a new, empty topic.
    let dir = tempfile::tempdir().unwrap();
    {
        let store = Store::open(dir.path(), StoreConfig::default()).unwrap();
        store.topic("a").unwrap();
        store.close().unwrap();
    }
    for f in std::fs::read_dir(dir.path().join("t1")).unwrap() {
        std::fs::remove_file(f.unwrap().path()).unwrap();
    }
    let (code, report) = verify(dir.path());
    let opened = opens(dir.path());
    assert_eq!(
        opened.is_ok(),
        code == Some(0),
        "open {opened:?} vs verify {report}"
    );
}

#[test]
fn verify_agrees_with_open_on_a_stray_topic_directory_and_an_unlisted_segment() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = Store::open(dir.path(), StoreConfig::default()).unwrap();
        let t = store.topic("a").unwrap();
        let p = t.append(b"x").unwrap();
        t.sync().unwrap();
        let c = t.open_cursor("s", CursorOptions::default()).unwrap();
        c.ack(p).unwrap();
        c.flush().unwrap();
        drop((c, t));
        store.close().unwrap();
    }
    // A crash after `mkdir t2`, before the catalog write that lists topic 2; and a segment
    // file whose listing never happened.
    std::fs::create_dir(dir.path().join("t2")).unwrap();
    let segs: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with("journal-"))
        .collect();
    let last = segs.iter().max().unwrap().clone();
    let n: u64 = last["journal-".len()..last.len() - 4].parse().unwrap();
    let stray = dir.path().join(format!("journal-{:016}.seg", n + 1));
    std::fs::copy(dir.path().join(&last), &stray).unwrap();
    let (code, report) = verify(dir.path());
    assert_eq!(code, Some(0), "{report}");
    let store = Store::open(dir.path(), StoreConfig::default()).unwrap();
    let t = store.topic("a").unwrap();
    let c = t.open_cursor("s", CursorOptions::default()).unwrap();
    assert!(c.is_acked(Position::new(1, 0)).unwrap());
    let b = store.topic("b").expect("topic b reuses t2");
    b.append(b"y").unwrap();
    b.sync().unwrap();
    drop((c, t, b));
    store.close().unwrap();
    let (code, report) = verify(dir.path());
    assert_eq!(code, Some(0), "{report}");
}
