//! The managed ledger: appends with message metadata, rollover, reads, the directory layout,
//! ownership, reopen, and trimming with several cursors.

use crate::support;

use std::collections::BTreeSet;

use ackstore::{AppendMeta, InitialPosition, LedgerConfig, ManagedLedger};
use ackstore::{Error, Position};
use support::topic::{append_n, at, config, mem_topic, on_each_backend, read_positions, reopen};

#[test]
fn indexes_count_messages_and_batches_advance_by_their_size() {
    on_each_backend(100, |topic| {
        assert_eq!(topic.next_index(), 0);
        let single = topic.append(b"a").unwrap();
        let batch = topic
            .append_with(
                b"b",
                AppendMeta {
                    num_messages: 5,
                    timestamp: 0,
                },
            )
            .unwrap();
        let after = topic.append(b"c").unwrap();
        topic.sync().unwrap();
        let [a, b, c] = [single, batch, after].map(|p| topic.read(p).unwrap());
        assert_eq!((a.index, a.num_messages), (0, 1));
        assert_eq!((b.index, b.num_messages, b.first_index()), (5, 5, 1));
        assert_eq!(c.index, 6);
        assert_eq!(topic.next_index(), 7);
        assert_eq!(b.payload, b"b");
        assert!(b.timestamp >= a.timestamp && c.timestamp >= b.timestamp);
    });
}

#[test]
fn bad_appends_are_refused_and_write_nothing() {
    let disk = ackstore::MemStorage::new();
    let mut cfg = config(10);
    cfg.log.max_entry_size = 16;
    let topic = ManagedLedger::open_with_storage(std::sync::Arc::new(disk), cfg).unwrap();
    let zero = topic.append_with(
        b"x",
        AppendMeta {
            num_messages: 0,
            timestamp: 1,
        },
    );
    assert!(matches!(zero, Err(Error::InvalidArgument { .. })));
    assert!(matches!(
        topic.append(&[0; 17]),
        Err(Error::EntryTooLarge { .. })
    ));
    assert_eq!(topic.last_position(), None);
    assert!(
        topic.ledgers().is_empty(),
        "no ledger is created for a refused append"
    );
    let first = topic.append(&[0; 16]).unwrap();
    topic.sync().unwrap();
    assert_eq!(first, topic.first_position().unwrap());
    assert!(matches!(
        topic.read(Position::new(1, 5)),
        Err(Error::NoSuchEntry(_))
    ));
}

#[test]
fn data_ledgers_roll_over_at_the_entry_limit_and_at_the_byte_limit() {
    on_each_backend(3, |topic| {
        let p = append_n(&topic, 7);
        let ledgers = topic.ledgers();
        assert_eq!(
            ledgers.iter().map(|l| l.entries).collect::<Vec<_>>(),
            vec![3, 3, 1]
        );
        assert_eq!(
            ledgers.iter().map(|l| l.first_index).collect::<Vec<_>>(),
            vec![0, 3, 6]
        );
        assert_eq!(
            ledgers
                .iter()
                .map(|l| (l.first_timestamp, l.last_timestamp))
                .collect::<Vec<_>>(),
            vec![(1000, 1002), (1003, 1005), (1006, 1006)]
        );
        assert_eq!(p[3], Position::new(ledgers[1].id, 0));
        let log = topic.entry_log().unwrap();
        assert!(log.ledger_info(ledgers[0].id).unwrap().sealed);
        assert!(!log.ledger_info(ledgers[2].id).unwrap().sealed);

        let cfg = LedgerConfig {
            max_ledger_bytes: 10,
            ..LedgerConfig::default()
        };
        let topic =
            ManagedLedger::open_with_storage(std::sync::Arc::new(ackstore::MemStorage::new()), cfg)
                .unwrap();
        for payload in [&[1u8; 4][..], &[2; 4], &[3; 4], &[4; 20], &[5; 1]] {
            topic.append(payload).unwrap();
        }
        let entries: Vec<u64> = topic.ledgers().iter().map(|l| l.entries).collect();
        assert_eq!(entries, vec![3, 1, 1]);
    });
}

#[test]
fn a_second_owner_of_a_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let topic = ManagedLedger::open(dir.path(), LedgerConfig::default()).unwrap();
    assert!(matches!(
        ManagedLedger::open(dir.path(), LedgerConfig::default()),
        Err(Error::Locked { .. })
    ));
    topic.close().unwrap();
    assert!(matches!(topic.append(b"x"), Err(Error::Closed)));
    ManagedLedger::open(dir.path(), LedgerConfig::default()).unwrap();
}

#[test]
fn reopen_on_real_files_keeps_entries_cursors_and_continues_indexes() {
    let dir = tempfile::tempdir().unwrap();
    let topic = ManagedLedger::open(dir.path(), config(4)).unwrap();
    let p = append_n(&topic, 10);
    let c = topic
        .open_cursor("sub", at(InitialPosition::Earliest, false))
        .unwrap();
    c.ack_cumulative(p[6]).unwrap();
    c.ack(p[8]).unwrap();
    topic.close().unwrap();

    let topic = ManagedLedger::open(dir.path(), config(4)).unwrap();
    assert_eq!(topic.first_position(), Some(p[0]));
    assert_eq!(topic.last_position(), Some(p[9]));
    assert_eq!(topic.read(p[5]).unwrap().payload, b"m5");
    let c = topic
        .open_cursor("sub", at(InitialPosition::Latest, false))
        .unwrap();
    assert_eq!(c.mark_delete_position().unwrap(), Some(p[6]));
    // Close flushed the individual ack of entry 8: it is not delivered again.
    assert_eq!(c.acked_ranges().unwrap(), vec![(p[8], p[8])]);
    assert_eq!(read_positions(&c, 10), vec![p[7], p[9]]);
    let next = topic.append(b"next").unwrap();
    assert!(
        next.ledger_id > p[9].ledger_id,
        "appends after open go to a new ledger"
    );
    topic.sync().unwrap();
    assert_eq!(topic.read(next).unwrap().index, 10);
}

#[test]
fn cursor_names_never_become_file_names() {
    let parent = tempfile::tempdir().unwrap();
    let dir = parent.path().join("topic");
    let hostile: Vec<String> = [
        "../../escape",
        "a/b/c",
        "..",
        ".",
        "",
        "nul\0byte",
        "/absolute",
        "topic",
        "cursor-0",
        "LOCK",
        "ledger-00000000000000000001.log",
        "名前 with spaces",
    ]
    .into_iter()
    .map(String::from)
    .chain([("x".repeat(5000)), "../".repeat(300)])
    .collect();
    let topic = ManagedLedger::open(&dir, config(2)).unwrap();
    let p = append_n(&topic, 5);
    for (i, name) in hostile.iter().enumerate() {
        let c = topic
            .open_cursor(name, at(InitialPosition::Earliest, false))
            .unwrap();
        c.ack_cumulative(p[i % 5]).unwrap();
    }
    topic.close().unwrap();

    let topic = ManagedLedger::open(&dir, config(2)).unwrap();
    let names: BTreeSet<String> = topic.cursor_names().into_iter().collect();
    assert_eq!(names, hostile.iter().cloned().collect());
    for (i, name) in hostile.iter().enumerate() {
        let c = topic
            .open_cursor(name, at(InitialPosition::Latest, false))
            .unwrap();
        assert_eq!(
            c.mark_delete_position().unwrap(),
            Some(p[i % 5]),
            "{name:?}"
        );
    }
    topic.delete_cursor("../../escape").unwrap();
    topic.close().unwrap();

    let outside: Vec<_> = std::fs::read_dir(parent.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        outside,
        vec![std::ffi::OsString::from("topic")],
        "nothing outside the directory"
    );
    for entry in std::fs::read_dir(&dir).unwrap() {
        let entry = entry.unwrap();
        assert!(entry.file_type().unwrap().is_file());
        let name = entry.file_name().into_string().unwrap();
        let numeric = |s: &str, prefix: &str, suffix: &str| {
            s.strip_prefix(prefix)
                .and_then(|r| r.strip_suffix(suffix))
                .is_some_and(|id| !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()))
        };
        assert!(
            name == "LOCK"
                || ackstore::internals::meta::record_of_file(&name)
                    .is_some_and(|r| r == "topic" || numeric(r, "cursor-", ""))
                || numeric(&name, "ledger-", ".log")
                || numeric(&name, "journal-", ".seg"),
            "unexpected file {name:?}"
        );
    }
}

#[test]
fn trim_deletes_only_ledgers_every_cursor_has_consumed() {
    let (disk, topic) = mem_topic(2);
    let p = append_n(&topic, 10);
    let ids: Vec<u64> = topic.ledgers().iter().map(|l| l.id).collect();
    let fast = topic
        .open_cursor("fast", at(InitialPosition::Earliest, false))
        .unwrap();
    let slow = topic
        .open_cursor("slow", at(InitialPosition::Earliest, false))
        .unwrap();
    let idle = topic
        .open_cursor("idle", at(InitialPosition::Earliest, false))
        .unwrap();
    fast.ack_cumulative(p[9]).unwrap();
    slow.ack_cumulative(p[4]).unwrap();
    assert!(
        topic.trim_consumed().unwrap().is_empty(),
        "`idle` has consumed nothing"
    );

    idle.ack_cumulative(p[6]).unwrap();
    idle.close().unwrap();
    // `slow` (at 4) holds ledger 2 (entries 4 and 5); the closed `idle` cursor counts too.
    assert_eq!(topic.trim_consumed().unwrap(), ids[..2].to_vec());
    assert_eq!(topic.first_position(), Some(p[4]));
    assert!(matches!(topic.read(p[0]), Err(Error::NoSuchEntry(_))));
    slow.ack(p[5]).unwrap();
    assert_eq!(topic.trim_consumed().unwrap(), vec![ids[2]]);
    let log = topic.entry_log().unwrap();
    assert!(ids[..3].iter().all(|id| !log.ledger_ids().contains(id)));
    drop(log);

    // Deleting the laggards lets everything but the last ledger go.
    topic.delete_cursor("slow").unwrap();
    topic.delete_cursor("idle").unwrap();
    assert!(matches!(slow.backlog(), Err(Error::Closed)));
    assert_eq!(topic.trim_consumed().unwrap(), vec![ids[3]]);
    assert_eq!(
        topic.ledgers().len(),
        1,
        "the ledger holding the last entry is kept"
    );
    assert_eq!(fast.backlog().unwrap(), 0);
    topic.close().unwrap();

    let topic = reopen(&disk, 2);
    assert_eq!(topic.first_position(), Some(p[8]));
    assert_eq!(topic.cursor_names(), vec!["fast".to_owned()]);
    // Ids are never reused (cursor ledgers take ids from the same counter).
    assert!(topic.append(b"x").unwrap().ledger_id > ids[4]);
}
