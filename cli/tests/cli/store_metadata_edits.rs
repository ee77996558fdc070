//! Edits of a store's metadata with their checksums recomputed, each of which would hand a
//! cursor's state to another cursor or let state go unreported: two cursor ids swapped in a
//! topic record, a cursor dropped from its topic's table, a topic dropped from the catalog, the
//! oldest journal segment dropped from the catalog's list, an older copy of the newest segment
//! of a cleanly closed store, an older version of a topic's record (the newest deleted, or an
//! older copy put back). `Store::open` (or the open of the
//! topic or cursor concerned) refuses each as damage and `ackstore verify` exits 1; the states
//! a crash leaves between the steps that legitimately make the same change (a deletion of a
//! cursor, a rollover) open, and verify exits 0.

use crate::support;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use ackstore::{CorruptionPlace, CursorOptions, Error, ManagedLedger, Position, Store};
use support::mutate::{CatalogEdit, Mutation, TopicEdit, Tree, verify};

/// A store of two topics: `a` (directory `t1`) with cursors `x` and `y`, which acked different
/// entries, and `b` (`t2`) with cursor `z`, every ack flushed through a
/// journal of more than one segment; then closed. Returns what `x` and `y` acked.
fn store(dir: &Path) -> (Vec<Position>, Vec<Position>) {
    let store = Store::open(dir, support::config::store_journal(1024)).expect("open");
    let a = store.topic("a").expect("a");
    let b = store.topic("b").expect("b");
    let ps: Vec<Position> = (0..400u32)
        .map(|i| a.append(&i.to_le_bytes()).expect("append"))
        .collect();
    a.sync().expect("sync");
    let q = b.append(b"q").expect("append");
    b.sync().expect("sync");
    let x = a.open_cursor("x", CursorOptions::default()).expect("x");
    let y = a.open_cursor("y", CursorOptions::default()).expect("y");
    let z = b.open_cursor("z", CursorOptions::default()).expect("z");
    let (mut xs, mut ys) = (Vec::new(), Vec::new());
    for (i, p) in ps.iter().enumerate() {
        let (cursor, acked) = if i % 3 == 0 {
            (&x, &mut xs)
        } else {
            (&y, &mut ys)
        };
        cursor.ack(*p).expect("ack");
        acked.push(*p);
        z.ack(q).expect("ack");
        if i % 10 == 9 {
            store.flush_all().expect("flush");
        }
    }
    assert!(
        store.journal_stats().segments >= 2,
        "segments: {:?}",
        store.journal_stats()
    );
    drop((x, y, z, a, b));
    store.close().expect("close");
    (xs, ys)
}

/// `tree` written to a new directory.
fn copy(tree: &Tree) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    tree.write(dir.path());
    dir
}

fn edited(base: &Tree, mutation: &Mutation) -> tempfile::TempDir {
    let mut tree = base.clone();
    mutation.apply(&mut tree).expect("the edit applies");
    copy(&tree)
}

fn verify_code(dir: &Path) -> (Option<i32>, String) {
    let v = verify(env!("CARGO_BIN_EXE_ackstore"), dir);
    (v.code, v.said)
}

fn is_corrupted(e: &Error) -> bool {
    matches!(e, Error::Corrupted { .. })
}

#[test]
fn cursor_ids_swapped_in_a_topic_record_never_hand_one_cursors_acks_to_the_other() {
    let dir = tempfile::tempdir().expect("tempdir");
    store(dir.path());
    let base = Tree::read(dir.path());
    let swapped = edited(
        &base,
        &Mutation::Topic {
            dir: "t1".into(),
            edit: TopicEdit::SwapCursorIds(0, 1),
        },
    );
    let (code, said) = verify_code(swapped.path());
    assert_eq!(code, Some(1), "{said}");
    assert!(said.contains("belongs to another cursor"), "{said}");
    let store =
        Store::open(swapped.path(), support::config::store_journal(1024)).expect("the store opens");
    let a = store.topic("a").expect("the topic opens");
    for name in ["x", "y"] {
        match a.open_cursor(name, CursorOptions::default()) {
            Err(e @ Error::Corrupted { .. }) => assert!(
                matches!(
                    e,
                    Error::Corrupted {
                        place: CorruptionPlace::Journal { .. },
                        ..
                    }
                ),
                "{name}: {e}"
            ),
            Err(e) => panic!("{name}: not damage: {e}"),
            Ok(c) => panic!(
                "{name} opened with another cursor's state (mark-delete {:?})",
                c.mark_delete_position()
            ),
        }
    }
    // The untouched topic and cursor still open.
    let b = store.topic("b").expect("b");
    b.open_cursor("z", CursorOptions::default()).expect("z");
}

#[test]
fn a_cursor_dropped_from_its_topic_record_is_damage_and_a_deletion_cut_short_is_finished() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_, ys) = store(dir.path());
    let base = Tree::read(dir.path());
    let drop_x = Mutation::Topic {
        dir: "t1".into(),
        edit: TopicEdit::DropCursor(0),
    };
    let dropped = edited(&base, &drop_x);
    let (code, said) = verify_code(dropped.path());
    assert_eq!(code, Some(1), "{said}");
    let store =
        Store::open(dropped.path(), support::config::store_journal(1024)).expect("the store opens");
    match store.topic("a") {
        Err(Error::Corrupted {
            place: CorruptionPlace::Record(r),
            ..
        }) if r == "topic" => {}
        other => panic!("the topic whose table lost x: {other:?}"),
    }
    drop(store);

    // What a deletion leaves when it is cut short after the table dropped the cursor: its
    // record went first. The topic opens, the cursor is gone, and its journal state with it.
    let mut tree = base.clone();
    drop_x.apply(&mut tree).expect("edit");
    let records: Vec<PathBuf> = tree
        .files
        .keys()
        .filter(|p| {
            p.parent() == Some(Path::new("t1"))
                && p.file_name()
                    .and_then(|f| f.to_str())
                    .is_some_and(|f| f.starts_with("cursor-0."))
        })
        .cloned()
        .collect();
    assert!(!records.is_empty(), "x is cursor 0");
    for r in records {
        tree.files.remove(&r);
    }
    let cut = copy(&tree);
    let (code, said) = verify_code(cut.path());
    assert_eq!(code, Some(0), "{said}");
    let store = Store::open(cut.path(), support::config::store_journal(1024)).expect("open");
    let held = store.journal().cursors().len();
    let a = store.topic("a").expect("the deletion is finished");
    assert_eq!(a.cursor_names(), ["y"]);
    assert_eq!(
        store.journal().cursors().len(),
        held - 1,
        "x's state forgotten"
    );
    let y = a.open_cursor("y", CursorOptions::default()).expect("y");
    for p in &ys {
        assert!(y.is_acked(*p).expect("read"), "{p}");
    }
    let x = a
        .open_cursor("x", CursorOptions::default())
        .expect("x anew");
    assert_eq!(x.mark_delete_position().expect("md"), None, "a new cursor");
}

#[test]
fn a_topic_dropped_from_the_catalog_is_damage_with_or_without_cursor_state() {
    let dir = tempfile::tempdir().expect("tempdir");
    store(dir.path());
    // Topic `c` holds entries but no cursor: only its directory tells it existed.
    {
        let store = Store::open(dir.path(), support::config::store_journal(1024)).expect("open");
        let c = store.topic("c").expect("c");
        c.append(b"m").expect("append");
        c.sync().expect("sync");
        drop(c);
        store.close().expect("close");
    }
    let base = Tree::read(dir.path());
    for (i, topic) in [(1, "b"), (2, "c")] {
        let dropped = edited(&base, &Mutation::Catalog(CatalogEdit::DropTopic(i)));
        let (code, said) = verify_code(dropped.path());
        assert_eq!(code, Some(1), "{topic}: {said}");
        match Store::open(dropped.path(), support::config::store_journal(1024)) {
            Err(Error::Corrupted {
                place: CorruptionPlace::Record(r),
                ..
            }) if r == "store" => {}
            other => panic!("{topic} dropped: {other:?}"),
        }
    }
}

#[test]
fn the_oldest_segment_dropped_from_the_list_is_damage_unless_a_rollover_retired_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    store(dir.path());
    let base = Tree::read(dir.path());
    let oldest = base.segments()[0].clone();
    let dropped = edited(&base, &Mutation::Catalog(CatalogEdit::Unlist(0)));
    let (code, said) = verify_code(dropped.path());
    assert_eq!(code, Some(1), "{said}");
    match Store::open(dropped.path(), support::config::store_journal(1024)) {
        Err(e) if is_corrupted(&e) => assert!(
            matches!(e, Error::Corrupted { place: CorruptionPlace::Journal { segment, .. }, .. }
                if oldest.to_string_lossy().contains(&format!("{segment:016}"))),
            "names the dropped segment: {e}"
        ),
        other => panic!("the oldest segment dropped from the list: {other:?}"),
    }

    // A rollover drops the oldest segment and records it as retired in one catalog write,
    // then deletes its file: a crash in between leaves the file, which the next open removes.
    let mut tree = base.clone();
    tree.edit_catalog(|c| {
        let list = c.segments.as_mut()?;
        c.retired_through = list.remove(0);
        Some(())
    })
    .expect("a listed catalog");
    let retired = copy(&tree);
    let (code, said) = verify_code(retired.path());
    assert_eq!(code, Some(0), "{said}");
    let store = Store::open(retired.path(), support::config::store_journal(1024))
        .expect("a retired segment is no damage");
    store.close().expect("close");
    assert!(
        !retired.path().join(&oldest).exists(),
        "the open removed it"
    );
}

#[test]
fn an_older_copy_of_the_newest_segment_of_a_cleanly_closed_store_is_damage() {
    let dir = tempfile::tempdir().expect("tempdir");
    store(dir.path());
    // One session: a tick, a copy of the newest segment, a second tick into the same segment,
    // a clean close.
    let (newest, older) = {
        let store = Store::open(dir.path(), support::config::store_journal(1024)).expect("open");
        let a = store.topic("a").expect("a");
        let x = a.open_cursor("x", CursorOptions::default()).expect("x");
        let mut copy_of_newest = None;
        for round in 0..2 {
            let p = a.append(b"more").expect("append");
            a.sync().expect("sync");
            x.ack(p).expect("ack");
            store.flush_all().expect("flush");
            let newest = Tree::read(dir.path()).segments().pop().expect("a segment");
            if round == 0 {
                let bytes = std::fs::read(dir.path().join(&newest)).expect("read");
                copy_of_newest = Some((newest, bytes));
            } else {
                assert_eq!(Some(&newest), copy_of_newest.as_ref().map(|(n, _)| n));
            }
        }
        drop((x, a));
        store.close().expect("close");
        copy_of_newest.expect("copied")
    };
    let base = Tree::read(dir.path());
    assert!(base.files[&newest].len() > older.len(), "the segment grew");
    let mut tree = base.clone();
    tree.files.insert(newest.clone(), older);
    let restored = copy(&tree);
    let (code, said) = verify_code(restored.path());
    assert_eq!(code, Some(1), "{said}");
    match Store::open(restored.path(), support::config::store_journal(1024)) {
        Err(Error::Corrupted {
            place: CorruptionPlace::Journal { .. },
            ..
        }) => {}
        other => panic!("an older copy of the newest segment: {other:?}"),
    }

    // After a crash (no clean close since the last one), the recorded length still holds: the
    // segment is only appended to, or left for a new one.
    let store = Store::open(dir.path(), support::config::store_journal(1024)).expect("open");
    let a = store.topic("a").expect("a");
    let x = a.open_cursor("x", CursorOptions::default()).expect("x");
    let p = a.append(b"after").expect("append");
    a.sync().expect("sync");
    x.ack(p).expect("ack");
    store.flush_all().expect("flush");
    let crashed = copy(&Tree::read(dir.path()));
    let (code, said) = verify_code(crashed.path());
    assert_eq!(code, Some(0), "{said}");
    let again = Store::open(crashed.path(), support::config::store_journal(1024))
        .expect("opens after the crash");
    let x = again
        .topic("a")
        .expect("a")
        .open_cursor("x", CursorOptions::default())
        .expect("x");
    assert!(x.is_acked(p).expect("read"));
}

#[test]
fn a_cursor_with_nothing_flushed_dropped_from_its_topic_record_is_damage_too() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let store = Store::open(dir.path(), support::config::store_journal(1024)).expect("open");
        let a = store.topic("a").expect("a");
        a.append(b"m").expect("append");
        a.sync().expect("sync");
        // Created (listed, its record written), nothing acked or flushed: the journal holds
        // nothing of it.
        drop(a.open_cursor("w", CursorOptions::default()).expect("w"));
        drop(a);
        store.close().expect("close");
    }
    let dropped = edited(
        &Tree::read(dir.path()),
        &Mutation::Topic {
            dir: "t1".into(),
            edit: TopicEdit::DropCursor(0),
        },
    );
    let (code, said) = verify_code(dropped.path());
    assert_eq!(code, Some(1), "{said}");
    let store =
        Store::open(dropped.path(), support::config::store_journal(1024)).expect("the store opens");
    assert!(
        matches!(store.topic("a"), Err(Error::Corrupted { .. })),
        "a subscription the table lost is not dropped silently"
    );
}

#[test]
fn topic_names_swapped_in_the_catalog_never_hand_one_topics_cursors_to_the_other() {
    let dir = tempfile::tempdir().expect("tempdir");
    store(dir.path());
    let mut tree = Tree::read(dir.path());
    tree.edit_catalog(|c| {
        let (a, b) = (c.topics[0].name.clone(), c.topics[1].name.clone());
        c.topics[0].name = b;
        c.topics[1].name = a;
        Some(())
    })
    .expect("a catalog");
    let swapped = copy(&tree);
    let (code, said) = verify_code(swapped.path());
    assert_eq!(code, Some(1), "{said}");
    let store =
        Store::open(swapped.path(), support::config::store_journal(1024)).expect("the store opens");
    for (topic, cursors) in [("a", vec!["z"]), ("b", vec!["x", "y"])] {
        let t = store.topic(topic).expect("the topic opens");
        assert_eq!(t.cursor_names(), cursors, "{topic} holds the other's table");
        for name in cursors {
            assert!(
                matches!(
                    t.open_cursor(name, CursorOptions::default()),
                    Err(Error::Corrupted {
                        place: CorruptionPlace::Journal { .. },
                        ..
                    })
                ),
                "{topic}/{name} opened with another topic's cursor state"
            );
        }
    }
}

/// The files of topic directory `t1` holding its topic record's versions.
fn topic_record_files(tree: &Tree) -> Vec<PathBuf> {
    record_files_in(tree, Path::new("t1"), "topic")
}

/// The files of directory `dir` of `tree` holding the versions of record `record`.
fn record_files_in(tree: &Tree, dir: &Path, record: &str) -> Vec<PathBuf> {
    let prefix = format!("{record}.");
    tree.files
        .keys()
        .filter(|p| {
            p.parent() == Some(dir)
                && p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(&prefix) && n.ends_with(".meta"))
        })
        .cloned()
        .collect()
}

/// `tree` (a store whose topic `a` has an older version of its record) is refused by verify
/// (exit 1) and by the topic's open (`Corrupted` naming the topic record) alike.
fn assert_older_record_refused(tree: &Tree, what: &str) {
    let rolled_back = copy(tree);
    let (code, said) = verify_code(rolled_back.path());
    assert_eq!(code, Some(1), "{what}: {said}");
    assert!(
        said.contains("an older version of the topic record"),
        "{what}: {said}"
    );
    let opened = Store::open(rolled_back.path(), support::config::store_journal(1024))
        .and_then(|store| store.topic("a").map(|_| ()));
    match opened {
        Err(Error::Corrupted {
            place: CorruptionPlace::Record(record),
            ..
        }) if record == "topic" => {}
        other => panic!("{what} opened: {other:?}"),
    }
}

/// `tree` with the versions of topic `a`'s record replaced by those `older` held.
fn with_older_record(tree: &Tree, older: &Tree) -> Tree {
    with_older_record_in(tree, older, Path::new("t1"))
}

/// `tree` with the versions of the topic record in `dir` replaced by those `older` held.
fn with_older_record_in(tree: &Tree, older: &Tree, dir: &Path) -> Tree {
    with_older_files(tree, older, |t| record_files_in(t, dir, "topic"))
}

/// `tree` with the files `files` picks replaced by those it picks in `older`.
fn with_older_files(tree: &Tree, older: &Tree, files: impl Fn(&Tree) -> Vec<PathBuf>) -> Tree {
    let kept = files(older);
    assert!(!kept.is_empty(), "the older record's files");
    let mut tree = tree.clone();
    for p in files(&tree) {
        tree.files.remove(&p);
    }
    for p in &kept {
        tree.files.insert(p.clone(), older.files[p].clone());
    }
    tree
}

#[test]
fn an_older_version_of_a_store_topics_record_is_damage_whether_the_newest_was_deleted_or_replaced()
{
    let dir = tempfile::tempdir().expect("tempdir");
    // Three sessions, each appending to a ledger of its own (a block of ids of its own) and
    // acking through `x`; the topic record's files are copied after each.
    let mut sessions: Vec<(Tree, Vec<Position>)> = Vec::new();
    let mut entries = Vec::new();
    for session in 0..3u32 {
        let store = Store::open(dir.path(), support::config::store_journal(1024)).expect("open");
        let a = store.topic("a").expect("a");
        let x = a.open_cursor("x", CursorOptions::default()).expect("x");
        for i in 0..5u32 {
            let p = a.append(&(session * 10 + i).to_le_bytes()).expect("append");
            entries.push(p);
        }
        a.sync().expect("sync");
        x.ack(entries[entries.len() - 5]).expect("ack");
        drop((x, a));
        store.close().expect("close");
        sessions.push((Tree::read(dir.path()), entries.clone()));
    }
    let (last, _) = sessions.last().expect("sessions");
    let newest = topic_record_files(last);
    assert!(!newest.is_empty(), "the topic record's files");
    let (code, said) = verify_code(dir.path());
    assert_eq!(code, Some(0), "{said}");

    for (n, (older, older_entries)) in sessions[..2].iter().enumerate() {
        // The newest versions deleted and an older one left (as a power cut can bring back a
        // version whose removal was not durable yet), or an older copy put back: the same
        // files either way.
        let tree = with_older_record(last, older);
        let what = format!(
            "session {n}'s record ({} of {} entries)",
            older_entries.len(),
            entries.len()
        );
        assert_older_record_refused(&tree, &what);
    }

    // Untouched, every entry reads and verify finds nothing.
    let store = Store::open(dir.path(), support::config::store_journal(1024)).expect("open");
    let a = store.topic("a").expect("a");
    for (i, p) in entries.iter().enumerate() {
        let i = u32::try_from(i).expect("small");
        let want = (i / 5 * 10 + i % 5).to_le_bytes();
        assert_eq!(a.read(*p).expect("read").payload, want);
    }
    drop(a);
    store.close().expect("close");
}

/// A second session that only creates a cursor and flushes its acks changes nothing of the
/// topic's ledger ids: the first session's record, put back, lists every ledger file. The
/// journal's state of the new cursor (an id at or above that record's next cursor id) still
/// shows the record is older than the newest written: refused by verify and open alike, not
/// taken for a deletion cut short whose state (and record) the open would drop.
#[test]
fn an_older_topic_record_that_lacks_a_flushed_cursor_is_damage_not_a_deletion_cut_short() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = || support::config::store_journal(1024);
    let store = Store::open(dir.path(), config()).expect("open");
    let a = store.topic("a").expect("a");
    let ps: Vec<Position> = (0..6u32)
        .map(|i| a.append(&i.to_le_bytes()).expect("append"))
        .collect();
    a.sync().expect("sync");
    let x = a.open_cursor("x", CursorOptions::default()).expect("x");
    x.ack(ps[0]).expect("ack");
    drop((x, a));
    store.close().expect("close");
    drop(store);
    let first = Tree::read(dir.path());

    let store = Store::open(dir.path(), config()).expect("open");
    let a = store.topic("a").expect("a");
    let y = a.open_cursor("y", CursorOptions::default()).expect("y");
    y.ack(ps[3]).expect("ack");
    y.flush().expect("flush");
    drop((y, a));
    store.close().expect("close");
    drop(store);
    let second = Tree::read(dir.path());
    let (code, said) = verify_code(dir.path());
    assert_eq!(code, Some(0), "{said}");

    let ledgers = |t: &Tree| -> Vec<PathBuf> {
        let mut files: Vec<PathBuf> = t
            .files
            .keys()
            .filter(|p| p.extension().is_some_and(|e| e == "log"))
            .cloned()
            .collect();
        files.sort();
        files
    };
    assert_eq!(ledgers(&first), ledgers(&second), "no ledger created");
    assert_older_record_refused(
        &with_older_record(&second, &first),
        "the first session's record",
    );

    // Untouched, both cursors open with their acks.
    let store = Store::open(dir.path(), config()).expect("open");
    let a = store.topic("a").expect("a");
    let y = a.open_cursor("y", CursorOptions::default()).expect("y");
    assert!(y.is_acked(ps[3]).expect("is_acked"));
    let x = a.open_cursor("x", CursorOptions::default()).expect("x");
    assert!(x.is_acked(ps[0]).expect("is_acked"));
    drop((x, y, a));
    store.close().expect("close");
}

/// One session whose topic rolls its ledgers (every ledger in the one block of ids its open
/// reserved): the topic record's files are copied after the second ledger, then more ledgers
/// are filled and synced. That record put back lists every ledger file below its next ledger
/// id, and lacks the newer ledgers, which hold synced entries: refused by verify and open
/// alike, not opened with those ledgers (and their entries) deleted as orphans.
#[test]
fn an_older_topic_record_of_the_same_session_that_lacks_ledgers_holding_entries_is_damage() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = || support::config::store(4, 1024);
    let store = Store::open(dir.path(), config()).expect("open");
    let a = store.topic("a").expect("a");
    let x = a.open_cursor("x", CursorOptions::default()).expect("x");
    let mut ps = append_numbered(&a, 0..6);
    x.ack(ps[0]).expect("ack");
    x.flush().expect("flush");
    let mid = Tree::read(dir.path());
    ps.extend(append_numbered(&a, 6..15));
    x.ack(ps[12]).expect("ack");
    x.flush().expect("flush");
    drop((x, a));
    store.close().expect("close");
    drop(store);
    let last = Tree::read(dir.path());
    let (code, said) = verify_code(dir.path());
    assert_eq!(code, Some(0), "{said}");
    let ledgers = |t: &Tree| t.files.keys().filter(|p| is_ledger(p)).count();
    assert!(
        ledgers(&last) >= ledgers(&mid) + 2,
        "the session rolled on after the copy"
    );
    assert_older_record_refused(
        &with_older_record(&last, &mid),
        "the record of the same session's second ledger",
    );

    // Untouched, every entry reads.
    assert_reads_numbered(dir.path(), &ps);
}

/// The same on a topic opened alone: its record from earlier in the same open put back lacks
/// the newer ledgers holding entries, and is refused by verify and open alike.
#[test]
fn an_older_record_of_a_topic_alone_that_lacks_ledgers_holding_entries_is_damage() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = || support::topic::config(4);
    let topic = ManagedLedger::open(dir.path(), config()).expect("open");
    let mut ps = append_numbered(&topic, 0..6);
    let mid = Tree::read(dir.path());
    ps.extend(append_numbered(&topic, 6..15));
    topic.close().expect("close");
    drop(topic);
    let last = Tree::read(dir.path());
    let (code, said) = verify_code(dir.path());
    assert_eq!(code, Some(0), "{said}");
    let rolled_back = copy(&with_older_record_in(&last, &mid, Path::new("")));
    let (code, said) = verify_code(rolled_back.path());
    assert_eq!(code, Some(1), "{said}");
    assert!(
        said.contains("an older version of the topic record"),
        "{said}"
    );
    match ManagedLedger::open(rolled_back.path(), config()) {
        Err(Error::Corrupted {
            place: CorruptionPlace::Record(record),
            ..
        }) if record == "topic" => {}
        other => panic!("the older record opened: {other:?}"),
    }
    let topic = ManagedLedger::open(dir.path(), config()).expect("open");
    for (i, p) in ps.iter().enumerate() {
        let i = u32::try_from(i).expect("small");
        assert_eq!(topic.read(*p).expect("read").payload, i.to_le_bytes());
    }
}

/// The store catalog's record from before a restart put back (the newest version removed): the
/// restart started a journal segment that the older list does not name, and its ticks hold
/// acks flushed since. Refused by verify and open alike (a segment is listed before anything is
/// written after its header), not opened with that segment removed as a stray.
#[test]
fn an_older_catalog_record_that_lacks_a_segment_holding_ticks_is_damage() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = || support::config::store(1_000, 1 << 20);
    let session = |ps: &mut Vec<Position>, acked: std::ops::Range<usize>| {
        let store = Store::open(dir.path(), config()).expect("open");
        let a = store.topic("a").expect("a");
        if ps.is_empty() {
            *ps = append_numbered(&a, 0..100);
        }
        let x = a.open_cursor("x", CursorOptions::default()).expect("x");
        for p in &ps[acked] {
            x.ack(*p).expect("ack");
        }
        x.flush().expect("flush");
        drop((x, a));
        store.close().expect("close");
    };
    let mut ps = Vec::new();
    session(&mut ps, 0..10);
    let first = Tree::read(dir.path());
    session(&mut ps, 10..50);
    let last = Tree::read(dir.path());
    let segments = |t: &Tree| {
        t.files
            .keys()
            .filter(|p| p.extension().is_some_and(|e| e == "seg"))
            .count()
    };
    assert!(
        segments(&last) > segments(&first),
        "the restart started a segment"
    );
    let catalog = |t: &Tree| record_files_in(t, Path::new(""), "store");
    let rolled_back = copy(&with_older_files(&last, &first, catalog));
    let (code, said) = verify_code(rolled_back.path());
    assert_eq!(code, Some(1), "{said}");
    let opened = Store::open(rolled_back.path(), config()).and_then(|store| {
        let x = store
            .topic("a")?
            .open_cursor("x", CursorOptions::default())?;
        Ok(ps
            .iter()
            .filter(|p| x.is_acked(**p).unwrap_or(false))
            .count())
    });
    assert!(
        matches!(opened, Err(Error::Corrupted { .. })),
        "the older catalog opened: {opened:?}"
    );
}

/// A ledger file that topic `a`'s record does not list, above every ledger it lists (in its
/// block of ids): one holding a data entry shows an older record (no power cut leaves a data
/// ledger holding entries unrecorded, and a trim keeps the last one that holds entries), and is
/// refused by open and verify alike; one whose entry reads as a cursor ledger's (an earlier
/// release's, its deletion cut short) is an orphan that the open deletes.
#[test]
fn an_unlisted_ledger_above_the_records_ledgers_is_damage_unless_it_is_a_cursor_ledger() {
    use ackstore::internals::format::cursor::{EntryKind, PersistedState, TableRef, encode_marker};
    use ackstore::internals::log::{EntryLog, EntryMeta, LogConfig, ledger_file_name};
    use ackstore::{FileStorage, Storage};

    let dir = tempfile::tempdir().expect("tempdir");
    let config = || support::config::store(4, 1024);
    let store = Store::open(dir.path(), config()).expect("open");
    let a = store.topic("a").expect("a");
    let ps = append_numbered(&a, 0..6);
    drop(a);
    store.close().expect("close");
    drop(store);
    let base = Tree::read(dir.path());
    let newest = ps.last().expect("entries").ledger_id;
    // An id of the block the session reserved, above every ledger the record lists.
    let id = newest + 3;
    let ledger_holding = |payload: &[u8], meta: EntryMeta| -> Vec<u8> {
        let scratch = tempfile::tempdir().expect("tempdir");
        let storage: Arc<dyn Storage> =
            Arc::new(FileStorage::open(scratch.path(), false).expect("storage"));
        let log = EntryLog::open(storage, LogConfig::default()).expect("log");
        log.reserve_ids(id, id + 1, None);
        assert_eq!(log.create_ledger().expect("create"), id);
        log.append(id, meta, payload).expect("append");
        log.sync(id).expect("sync");
        drop(log);
        std::fs::read(scratch.path().join(ledger_file_name(id))).expect("the ledger file")
    };
    let with_file = |bytes: Vec<u8>| -> Tree {
        let mut tree = base.clone();
        tree.files
            .insert(Path::new("t1").join(ledger_file_name(id)), bytes);
        tree
    };

    assert_older_record_refused(
        &with_file(ledger_holding(b"a producer's entry", EntryMeta::default())),
        "an unlisted data ledger holding an entry",
    );

    let marker = encode_marker(&PersistedState::default(), TableRef::Inline(&[])).expect("marker");
    // An earlier release wrote a cursor-ledger entry with its kind in the frame header.
    let kind_meta = EntryMeta {
        index: 0,
        num_messages: u32::from(EntryKind::Marker.code()),
        timestamp: 0,
    };
    let leftover = copy(&with_file(ledger_holding(&marker, kind_meta)));
    let (code, said) = verify_code(leftover.path());
    assert_ne!(code, Some(1), "{said}");
    assert_reads_numbered(leftover.path(), &ps);
    let left = leftover.path().join("t1").join(ledger_file_name(id));
    assert!(!left.exists(), "the cursor ledger left over is deleted");
}

/// Appends the numbers of `range` to `topic`, each an entry, and syncs.
fn append_numbered(topic: &ManagedLedger, range: std::ops::Range<u32>) -> Vec<Position> {
    let ps = range
        .map(|i| topic.append(&i.to_le_bytes()).expect("append"))
        .collect();
    topic.sync().expect("sync");
    ps
}

/// The store in `dir` opens, and its topic `a` reads entry `i` of `ps` as number `i`.
fn assert_reads_numbered(dir: &Path, ps: &[Position]) {
    let store = Store::open(dir, support::config::store(4, 1024)).expect("open");
    let a = store.topic("a").expect("the topic opens");
    for (i, p) in ps.iter().enumerate() {
        let i = u32::try_from(i).expect("small");
        assert_eq!(a.read(*p).expect("read").payload, i.to_le_bytes());
    }
    drop(a);
    store.close().expect("close");
}

fn is_ledger(p: &Path) -> bool {
    p.extension().is_some_and(|e| e == "log")
}

/// The ledger a store's topic was appending to when its process died (recorded with no
/// entries, counted by the next open) replaced by an older copy of itself: a cursor had
/// acknowledged, and flushed, entries past that copy's end (a cursor acknowledges only synced
/// entries), so the open refuses the ledger and verify reports it, rather than open the topic
/// with those synced entries gone. The image as the process left it opens, and so does the
/// older copy when no cursor's mark-delete lies past it (nothing then tells it apart).
#[test]
fn an_older_copy_of_the_ledger_being_appended_to_is_damage_once_a_cursor_acked_past_it() {
    let run = |topic_alone: bool| {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = support::config::store(1_000, 1 << 20);
        let store = (!topic_alone).then(|| Store::open(dir.path(), config.clone()).expect("open"));
        let topic = match &store {
            Some(store) => store.topic("a").expect("a"),
            None => Arc::new(ManagedLedger::open(dir.path(), config.ledger.clone()).expect("open")),
        };
        let x = topic.open_cursor("x", CursorOptions::default()).expect("x");
        let mut ps = append_numbered(&topic, 0..20);
        let early = Tree::read(dir.path());
        ps.extend(append_numbered(&topic, 20..40));
        x.ack_cumulative(ps[9]).expect("ack");
        x.flush().expect("flush");
        let short_of_mark = Tree::read(dir.path());
        x.ack_cumulative(ps[29]).expect("ack");
        x.flush().expect("flush");
        // What a kill leaves: nothing closed, the ledger recorded with no entries.
        let killed = Tree::read(dir.path());
        drop((x, topic, store));
        let ledger = killed
            .files
            .keys()
            .filter(|p| is_ledger(p))
            .max()
            .expect("the ledger")
            .clone();
        let older = |newer: &Tree| {
            let mut tree = newer.clone();
            tree.files
                .insert(ledger.clone(), early.files[&ledger].clone());
            tree
        };
        let opens = |tree: &Tree| {
            let image = copy(tree);
            let (code, said) = verify_code(image.path());
            let opened = if topic_alone {
                ManagedLedger::open(image.path(), config.ledger.clone()).map(drop)
            } else {
                Store::open(image.path(), config.clone())
                    .and_then(|store| store.topic("a").map(drop))
            };
            (code, said, opened)
        };
        let what = if topic_alone { "alone" } else { "in a store" };
        for (tree, case) in [
            (&killed, "as killed"),
            (&older(&short_of_mark), "mark before the copy's end"),
        ] {
            let (code, said, opened) = opens(tree);
            assert_eq!(code, Some(0), "{what}, {case}: {said}");
            assert!(opened.is_ok(), "{what}, {case}: {opened:?}");
        }
        let (code, said, opened) = opens(&older(&killed));
        assert_eq!(code, Some(1), "{what}: {said}");
        assert!(
            said.contains("fewer than a cursor's committed mark-delete"),
            "{what}: {said}"
        );
        assert!(
            matches!(
                opened,
                Err(Error::Corrupted {
                    place: CorruptionPlace::Ledger { .. },
                    ..
                })
            ),
            "{what}: the older copy opened: {opened:?}"
        );
    };
    run(false);
    run(true);
}

/// The end of a version 3 ledger header and its synced-length slots.
const SLOTS_END: usize = 68;

/// An append cut short (by a full disk or a crash) leaves the bytes of a partial entry at the
/// end of a store topic's ledger, which a store's topic never cuts: verify reports a torn tail,
/// not damage, after every open, without promising that the next open cuts it back.
#[test]
fn a_torn_tail_a_stores_topic_keeps_is_reported_without_a_promise_to_cut_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = || support::config::store(1_000, 1 << 20);
    let store = Store::open(dir.path(), config()).expect("open");
    let a = store.topic("a").expect("a");
    let ps = append_numbered(&a, 0..5);
    let synced = Tree::read(dir.path());
    a.append(&[7u8; 200]).expect("append");
    a.sync().expect("sync");
    let mut cut = Tree::read(dir.path());
    drop((a, store));
    let ledger = (cut.files.keys())
        .filter(|p| is_ledger(p))
        .max()
        .expect("the ledger")
        .clone();
    // The file as the write that met the full disk left it: its header's synced length still
    // that of the five entries, and the sixth entry's first 100 bytes after them.
    let before = &synced.files[&ledger];
    let bytes = cut.files.get_mut(&ledger).expect("its bytes");
    bytes.truncate(before.len() + 100);
    bytes[..SLOTS_END].copy_from_slice(&before[..SLOTS_END]);
    let image = copy(&cut);
    for open in 0..3 {
        let (code, said) = verify_code(image.path());
        assert_eq!(code, Some(0), "after {open} opens: {said}");
        assert!(said.contains("torn tail"), "after {open} opens: {said}");
        assert!(!said.contains("cuts it back"), "after {open} opens: {said}");
        assert_reads_numbered(image.path(), &ps);
    }
}
