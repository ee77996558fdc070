//! Cursor properties: what `set_property` accepts is what every later flush can save, refused
//! ones change nothing, and `remove_property` removes durably; on a topic opened alone and on a
//! store's topic.

use crate::support;

use std::collections::BTreeMap;
use std::sync::Arc;

use ackstore::Error;
use ackstore::MemStorage;
use ackstore::internals::format::cursor::{MAX_PROPERTIES, MAX_PROPERTY_NAME};
use ackstore::{CursorConfig, PersistMode};
use ackstore::{CursorOptions, LedgerConfig};
use support::topic::{Host, Hosted, append_n, config, on_each_backend_and_host, on_each_host};

fn open(host: Host, disk: &MemStorage, config: LedgerConfig) -> Hosted {
    support::topic::open_hosted(host, Arc::new(disk.clone()), &config).expect("open topic")
}

/// After a refused `set_property`, the cursor still flushes, seeks, rewinds and closes, and a
/// reopen finds every ack and property it had.
fn check_cursor_still_persists(
    host: Host,
    disk: &MemStorage,
    config: &LedgerConfig,
    expected: usize,
) {
    let topic = open(host, disk, config.clone());
    let positions = append_n(&topic, 10);
    let c = topic
        .open_cursor("sub", CursorOptions::default())
        .expect("cursor");
    c.ack(positions[3]).expect("ack");
    c.flush().expect("flush after a refused property");
    c.rewind().expect("rewind after a refused property");
    c.ack(positions[5]).expect("ack");
    let props = c.properties().expect("properties");
    assert_eq!(props.len(), expected);
    c.close().expect("close after a refused property");
    topic.close().expect("close the topic");
    let topic = open(host, disk, config.clone());
    let c = topic
        .open_cursor("sub", CursorOptions::default())
        .expect("reopen");
    assert!(c.is_acked(positions[3]).unwrap() && c.is_acked(positions[5]).unwrap());
    assert_eq!(c.properties().unwrap(), props);
    c.seek(positions[1]).expect("seek after a refused property");
}

#[test]
fn set_property_refuses_a_name_longer_than_the_limit_and_changes_nothing() {
    on_each_host(|host| {
        let disk = MemStorage::new();
        let cfg = config(100);
        {
            let topic = open(host, &disk, cfg.clone());
            let c = topic
                .open_cursor("sub", CursorOptions::default())
                .expect("cursor");
            c.set_property(&"n".repeat(MAX_PROPERTY_NAME), 1)
                .expect("a name at the limit is accepted");
            let err = c
                .set_property(&"x".repeat(2_000), 7)
                .expect_err("a 2,000-byte name");
            assert!(matches!(err, Error::InvalidArgument { .. }), "{err}");
            assert!(err.to_string().contains("1024"), "{err}");
            assert_eq!(c.properties().unwrap().len(), 1);
            c.close().expect("close");
            topic.close().expect("close the topic");
        }
        check_cursor_still_persists(host, &disk, &cfg, 1);
    });
}

#[test]
fn set_property_refuses_a_property_past_the_count_limit_but_replaces_existing_ones() {
    on_each_host(|host| {
        let disk = MemStorage::new();
        let cfg = config(100);
        {
            let topic = open(host, &disk, cfg.clone());
            let c = topic
                .open_cursor("sub", CursorOptions::default())
                .expect("cursor");
            for i in 0..MAX_PROPERTIES {
                c.set_property(&format!("p{i}"), i as i64).expect("set");
            }
            let err = c
                .set_property("one-too-many", 0)
                .expect_err("the 4,097th property");
            assert!(matches!(err, Error::LimitExceeded { .. }), "{err}");
            c.set_property("p7", -7)
                .expect("replacing a property adds none");
            assert_eq!(c.properties().unwrap().len(), MAX_PROPERTIES);
            c.close().expect("close");
            topic.close().expect("close the topic");
        }
        check_cursor_still_persists(host, &disk, &cfg, MAX_PROPERTIES);
    });
}

#[test]
fn set_property_refuses_properties_that_would_not_fit_in_one_cursor_ledger_entry() {
    on_each_host(properties_that_would_not_fit_are_refused);
}

fn properties_that_would_not_fit_are_refused(host: Host) {
    for mode in [PersistMode::MultiEntry, PersistMode::SingleEntry] {
        let disk = MemStorage::new();
        let cfg = LedgerConfig {
            cursor: CursorConfig {
                persist_mode: mode,
                max_entry_size: 16 << 10,
                index_page_rows: 16,
                ..CursorConfig::default()
            },
            ..config(100)
        };
        let accepted;
        {
            let topic = open(host, &disk, cfg.clone());
            append_n(&topic, 1);
            let c = topic
                .open_cursor("sub", CursorOptions::default())
                .expect("cursor");
            let mut i = 0;
            let err = loop {
                match c.set_property(&format!("{i:04}{}", "k".repeat(1_000)), i) {
                    Ok(()) => {
                        c.flush()
                            .expect("every accepted property set can be flushed");
                        i += 1;
                    }
                    Err(e) => break e,
                }
                assert!(i < 100, "16 KiB entries cannot hold 100 KiB of names");
            };
            assert!(
                matches!(err, Error::LimitExceeded { .. }),
                "{mode:?}: {err}"
            );
            accepted = usize::try_from(i).unwrap();
            assert!(accepted >= 8, "{mode:?}: only {accepted} accepted");
            c.close().expect("close");
            topic.close().expect("close the topic");
        }
        check_cursor_still_persists(host, &disk, &cfg, accepted);
    }
}

#[test]
fn remove_property_removes_it_durably() {
    on_each_host(|host| {
        let disk = MemStorage::new();
        let cfg = config(100);
        {
            let topic = open(host, &disk, cfg.clone());
            let c = topic
                .open_cursor("sub", CursorOptions::default())
                .expect("cursor");
            c.set_property("a", 1).unwrap();
            c.set_property("b", 2).unwrap();
            c.flush().unwrap();
            assert_eq!(c.remove_property("a").unwrap(), Some(1));
            assert_eq!(c.remove_property("a").unwrap(), None);
            assert_eq!(c.remove_property(&"z".repeat(5_000)).unwrap(), None);
            c.flush().unwrap();
            c.close().unwrap();
            topic.close().unwrap();
        }
        let topic = open(host, &disk, cfg);
        let c = topic
            .open_cursor("sub", CursorOptions::default())
            .expect("reopen");
        assert_eq!(
            c.properties().unwrap(),
            BTreeMap::from([("b".to_owned(), 2)])
        );
    });
}

#[test]
fn removing_a_property_frees_room_for_another_at_the_count_limit() {
    on_each_backend_and_host(100, |topic| {
        let c = topic
            .open_cursor("sub", CursorOptions::default())
            .expect("cursor");
        for i in 0..MAX_PROPERTIES {
            c.set_property(&format!("p{i}"), 0).unwrap();
        }
        assert!(c.set_property("new", 0).is_err());
        c.remove_property("p0").unwrap();
        c.set_property("new", 0).expect("room again");
        c.flush().unwrap();
    });
}

/// Properties as large as `set_property` accepts and a partition table as large as a marker
/// holds inline leave room for the batch table: flushes with 1 to 20 partitions holding
/// partial entries (inline up to 16 rows, batch pages past that) all succeed, and a reopen
/// finds every property and partial entry.
#[test]
fn properties_filling_their_room_leave_space_for_the_batch_table() {
    on_each_host(properties_filling_their_room);
}

fn properties_filling_their_room(host: Host) {
    let base = config(4);
    let rows = 16;
    let cfg = LedgerConfig {
        cursor: CursorConfig {
            max_entry_size: 4096,
            index_page_rows: rows,
            ..CursorConfig::default()
        },
        log: ackstore::LogConfig {
            max_entry_size: 4096,
            ..base.log
        },
        ..base
    };
    let disk = MemStorage::new();
    let topic = open(host, &disk, cfg.clone());
    let partial_ledgers = 20;
    let p = append_n(&topic, 4 * (rows + partial_ledgers) as u64);
    topic.sync().unwrap();
    let c = topic
        .open_cursor("sub", CursorOptions::default())
        .expect("cursor");
    // One hole in each of `rows` ledgers: the marker's inline table is full.
    for l in 0..rows {
        c.ack(p[4 * l + 2]).unwrap();
    }
    let mut k = 0;
    while c
        .set_property(&format!("property-{k:04}"), i64::MAX)
        .is_ok()
    {
        k += 1;
    }
    assert!(k > 10, "{k} properties");
    c.flush().unwrap();
    let partial: Vec<_> = (rows..rows + partial_ledgers)
        .map(|l| p[4 * l + 1])
        .collect();
    for &pos in &partial {
        c.ack_batch_index(pos, 0, 3).unwrap();
        let flushed = c.flush();
        assert!(flushed.is_ok(), "{flushed:?}");
    }
    let properties = c.properties().unwrap();
    drop(c);
    std::mem::forget(topic);
    let topic = open(host, &disk.durable_image(), cfg);
    let c = topic
        .open_cursor("sub", CursorOptions::default())
        .expect("cursor");
    assert_eq!(c.properties().unwrap(), properties);
    for &pos in &partial {
        assert!(c.is_batch_index_acked(pos, 0).unwrap(), "{pos}");
        assert!(!c.is_batch_index_acked(pos, 1).unwrap(), "{pos}");
    }
    topic.close().unwrap();
}
