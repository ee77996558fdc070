//! A marker's batch table when partial entries spread over more partitions than one entry
//! holds rows for: the batch table goes to batch pages (kind 6) the marker lists, the flush
//! succeeds (no cap on partial entries) and a reopen finds every partial entry. Here a 4 KiB
//! entry holds at most 127 rows; 399 partitions hold a partial entry each. The same on a store's
//! topic, whose journal markers list their batch rows inline.

use crate::support;

use std::sync::Arc;

use ackstore::{AppendMeta, CursorConfig, InitialPosition, LedgerConfig, MemStorage, Position};
use support::topic::{Host, at, config, on_each_host, open_hosted};

#[test]
fn partial_entries_in_more_partitions_than_a_marker_holds_rows_for_are_flushed_and_recovered() {
    on_each_host(partial_entries_in_many_partitions);
}

fn partial_entries_in_many_partitions(host: Host) {
    let cursor = CursorConfig {
        max_entry_size: 4096,
        ..CursorConfig::default()
    };
    let base = config(1);
    let cfg = LedgerConfig {
        cursor,
        log: ackstore::LogConfig {
            max_entry_size: 4096,
            ..base.log
        },
        ..base
    };
    let disk = MemStorage::new();
    let topic = open_hosted(host, Arc::new(disk.clone()), &cfg.clone()).unwrap();
    let positions: Vec<Position> = (0..400)
        .map(|i| {
            topic
                .append_with(
                    format!("b{i}").as_bytes(),
                    AppendMeta {
                        num_messages: 4,
                        timestamp: 1,
                    },
                )
                .unwrap()
        })
        .collect();
    topic.sync().unwrap();
    let c = topic
        .open_cursor("sub", at(InitialPosition::Earliest, false))
        .unwrap();
    for &p in &positions[1..] {
        c.ack_batch_index(p, 1, 4).unwrap();
    }
    let flushed = c.flush();
    assert!(flushed.is_ok(), "{flushed:?}");
    // Acks keep working and flushing after it.
    c.ack(positions[0]).unwrap();
    c.flush().unwrap();
    drop(c);
    drop(topic);
    let image = disk.durable_image();
    let topic = open_hosted(host, Arc::new(image), &cfg).unwrap();
    let c = topic
        .open_cursor("sub", at(InitialPosition::Earliest, false))
        .unwrap();
    for &p in &positions[1..] {
        assert!(c.is_batch_index_acked(p, 1).unwrap(), "{p}");
        assert!(!c.is_batch_index_acked(p, 2).unwrap(), "{p}");
    }
    assert_eq!(c.mark_delete_position().unwrap(), Some(positions[0]));
    topic.close().unwrap();
}

/// One entry (batch of 4) in each of `n` ledgers: `n` partitions.
fn topic_config() -> LedgerConfig {
    let base = config(1);
    LedgerConfig {
        cursor: CursorConfig {
            max_entry_size: 4096,
            index_page_rows: 8,
            ..CursorConfig::default()
        },
        log: ackstore::LogConfig {
            max_entry_size: 4096,
            ..base.log
        },
        ..base
    }
}

/// Which of messages 0..4 of each entry the cursor reports acknowledged.
fn observed(c: &ackstore::Cursor, positions: &[Position]) -> Vec<Vec<u32>> {
    positions
        .iter()
        .map(|&p| {
            (0..4)
                .filter(|&i| c.is_batch_index_acked(p, i).unwrap())
                .collect()
        })
        .collect()
}

/// A power cut at every storage step of a flush that changes a paged batch table (new partial
/// entries, grown ones, a completed one), and every byte of the unsynced tail: the reopened
/// cursor holds exactly the previous `Ok` flush's partial entries or this flush's, and this
/// flush's once it returned `Ok`.
#[test]
fn a_power_cut_during_a_flush_of_a_paged_batch_table_recovers_the_last_flushed_state() {
    on_each_host(power_cut_during_a_flush_of_many_batch_rows);
}

fn power_cut_during_a_flush_of_many_batch_rows(host: Host) {
    let cfg = topic_config();
    let n = 26;
    let clean = support::crash::cut_everywhere_after(
        support::crash::Points::EVERY,
        |disk| {
            let topic = open_hosted(host, Arc::new(disk.clone()), &cfg.clone()).unwrap();
            let meta = AppendMeta {
                num_messages: 4,
                timestamp: 1,
            };
            let p: Vec<Position> = (0..n)
                .map(|_| topic.append_with(b"b", meta).unwrap())
                .collect();
            topic.sync().unwrap();
            let c = topic
                .open_cursor("sub", at(InitialPosition::Earliest, false))
                .unwrap();
            // 20 partitions with a partial entry: three batch pages of at most 8 rows.
            for &pos in &p[1..21] {
                c.ack_batch_index(pos, 0, 4).unwrap();
            }
            c.flush().unwrap();
            let before = observed(&c, &p);
            (topic, c, p, before)
        },
        |_, (topic, c, p, before)| {
            c.ack_batch_index(p[3], 2, 4).unwrap();
            for i in 1..4 {
                c.ack_batch_index(p[5], i, 4).unwrap();
            }
            for &pos in &p[21..] {
                c.ack_batch_index(pos, 3, 4).unwrap();
            }
            let after = observed(&c, &p);
            let flushed = c.flush();
            (topic, c, p, before, after, flushed)
        },
        |disk, support::crash::Cut { n, .. }, (topic, c, p, before, after, flushed)| {
            drop(c);
            std::mem::forget(topic);
            let tail = support::crash::unsynced_tail(disk);
            let torn = (0..=tail).map(|k| (k, support::crash::torn_image(disk, |u| u.min(k))));
            for (keep, image) in std::iter::once((0, disk.durable_image())).chain(torn) {
                let what = format!("cut at {n}, {keep} tail bytes kept");
                let topic = open_hosted(host, Arc::new(image), &cfg.clone()).unwrap();
                let c = topic
                    .open_cursor("sub", at(InitialPosition::Earliest, false))
                    .unwrap();
                let got = observed(&c, &p);
                if flushed.is_ok() {
                    assert_eq!(got, after, "{what}: flushed, then lost");
                } else {
                    assert!(got == before || got == after, "{what}: {got:?}");
                }
                topic.close().unwrap();
            }
        },
    );
    assert!(clean.result.5.is_ok());
    assert!(clean.total >= 3, "the flush took {} writes", clean.total);
}
