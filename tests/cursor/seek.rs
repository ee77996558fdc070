//! Seeks: by position, by message index (PIP-101, into a batch too) and by timestamp; the epoch;
//! and the finder's bound on entry-header reads. The cursor tests run on a topic opened alone
//! and on a store's topic.

use crate::support;

use ackstore::{AppendMeta, InitialPosition, ManagedLedger};
use ackstore::{Error, Position};
use support::topic::{
    Host, append_n, at, mem_hosted, mem_topic, on_each_backend, on_each_backend_and_host,
    on_each_host, read_positions, reopen_hosted,
};

/// Appends entries carrying `batches[i]` messages and timestamp `timestamps[i]`, and syncs them
/// (readers see synced entries only).
fn append_batches(topic: &ManagedLedger, batches: &[u32], timestamps: &[u64]) -> Vec<Position> {
    let positions = batches
        .iter()
        .zip(timestamps)
        .map(|(&num_messages, &timestamp)| {
            topic
                .append_with(
                    b"batch",
                    AppendMeta {
                        num_messages,
                        timestamp,
                    },
                )
                .unwrap()
        })
        .collect();
    topic.sync().unwrap();
    positions
}

#[test]
fn seek_resets_acks_and_moves_to_the_next_valid_position_or_latest() {
    on_each_backend_and_host(3, |topic| {
        let p = append_n(&topic, 9);
        let c = topic
            .open_cursor("sub", at(InitialPosition::Earliest, false))
            .unwrap();
        for i in [1, 4, 7] {
            c.ack(p[i]).unwrap();
        }
        c.ack_cumulative(p[2]).unwrap();

        // Backwards: entries from the target on are unacknowledged again.
        c.seek(p[1]).unwrap();
        assert_eq!(c.mark_delete_position().unwrap(), Some(p[0]));
        assert!(c.acked_ranges().unwrap().is_empty());
        assert_eq!(c.backlog().unwrap(), 8);
        assert_eq!(read_positions(&c, 2), vec![p[1], p[2]]);

        // Forwards: entries before the target count as acknowledged.
        c.ack(p[7]).unwrap();
        c.seek(p[5]).unwrap();
        assert_eq!(c.mark_delete_position().unwrap(), Some(p[4]));
        assert!(c.acked_ranges().unwrap().is_empty());
        assert_eq!(read_positions(&c, 10), p[5..].to_vec());

        // A position that does not exist: the next one that does.
        c.seek(Position::new(p[0].ledger_id, 10)).unwrap();
        assert_eq!(c.read_position().unwrap(), p[3]);
        assert_eq!(c.mark_delete_position().unwrap(), Some(p[2]));
        // Past the end: latest.
        c.seek(Position::new(p[8].ledger_id + 9, 0)).unwrap();
        assert_eq!(c.mark_delete_position().unwrap(), Some(p[8]));
        assert_eq!(c.backlog().unwrap(), 0);
        assert!(read_positions(&c, 10).is_empty());
        // Before the first entry: earliest.
        c.seek(Position::new(0, 0)).unwrap();
        assert_eq!(c.mark_delete_position().unwrap(), None);
        assert_eq!(read_positions(&c, 1), vec![p[0]]);
    });
}

#[test]
fn the_epoch_increases_on_every_seek_and_rewind_but_not_on_acks_reads_or_reopen() {
    on_each_backend_and_host(4, |topic| {
        let p = append_n(&topic, 8);
        let c = topic
            .open_cursor("sub", at(InitialPosition::Earliest, false))
            .unwrap();
        assert_eq!(c.epoch().unwrap(), 0);
        c.ack(p[0]).unwrap();
        c.ack_cumulative(p[2]).unwrap();
        c.read_entries(3).unwrap();
        assert_eq!(c.epoch().unwrap(), 0);
        c.seek(p[1]).unwrap();
        c.seek_by_index(3).unwrap();
        c.seek_by_timestamp(1003).unwrap();
        c.rewind().unwrap();
        assert_eq!(c.epoch().unwrap(), 4);
        let (epoch, entries) = c.read_entries_at_epoch(1).unwrap();
        assert_eq!((epoch, entries.len()), (4, 1));
        c.close().unwrap();
        let again = topic
            .open_cursor("sub", at(InitialPosition::Earliest, false))
            .unwrap();
        assert_eq!(again.epoch().unwrap(), 4);
    });
}

#[test]
fn seek_by_index_resolves_indexes_inside_batches_and_at_both_boundaries() {
    // Entries carry 3, 1, 4, 2 messages: indexes 0..=2 | 3 | 4..=7 | 8..=9, so B = 10.
    on_each_backend_and_host(2, |topic| {
        let p = append_batches(&topic, &[3, 1, 4, 2], &[10, 20, 30, 40]);
        let indexes: Vec<u64> = p.iter().map(|&q| topic.read(q).unwrap().index).collect();
        assert_eq!(indexes, vec![2, 3, 7, 9]);
        assert_eq!(topic.next_index(), 10);

        let expect = [
            (0, 0),
            (1, 0),
            (2, 0),
            (3, 1),
            (4, 2),
            (6, 2),
            (7, 2),
            (8, 3),
            (9, 3),
        ];
        for (index, entry) in expect {
            assert_eq!(
                topic.find_by_index(index).unwrap(),
                Some(p[entry]),
                "index {index}"
            );
            let c = topic
                .open_cursor(&format!("i{index}"), at(InitialPosition::Earliest, false))
                .unwrap();
            c.seek_by_index(index).unwrap();
            assert_eq!(
                read_positions(&c, 100),
                p[entry..].to_vec(),
                "seek_by_index({index})"
            );
        }
        // X >= B: latest.
        for index in [10, 11, u64::MAX] {
            assert_eq!(topic.find_by_index(index).unwrap(), None);
            let c = topic
                .open_cursor(
                    &format!("late{index}"),
                    at(InitialPosition::Earliest, false),
                )
                .unwrap();
            c.seek_by_index(index).unwrap();
            assert_eq!(c.backlog().unwrap(), 0);
            assert!(read_positions(&c, 100).is_empty());
        }

        // X < A after a trim: earliest retained.
        let holder = topic
            .open_cursor("holder", at(InitialPosition::Earliest, false))
            .unwrap();
        holder.ack_cumulative(p[1]).unwrap();
        for name in topic.cursor_names() {
            if name != "holder" {
                topic.delete_cursor(&name).unwrap();
            }
        }
        assert_eq!(topic.trim_consumed().unwrap(), vec![p[0].ledger_id]);
        for index in [0, 3] {
            assert_eq!(topic.find_by_index(index).unwrap(), Some(p[2]));
            holder.seek_by_index(index).unwrap();
            assert_eq!(read_positions(&holder, 100), p[2..].to_vec());
        }
        // A (the first retained index) itself, and B - 1.
        holder.seek_by_index(4).unwrap();
        assert_eq!(read_positions(&holder, 1), vec![p[2]]);
        holder.seek_by_index(9).unwrap();
        assert_eq!(read_positions(&holder, 9), vec![p[3]]);
    });
}

#[test]
fn seek_by_timestamp_reads_after_the_last_entry_at_or_before_it_with_equal_timestamps() {
    // Timestamps 5 5 5 | 7 7 7 | 9 9, three entries per ledger.
    on_each_backend_and_host(3, |topic| {
        let ts = [5, 5, 5, 7, 7, 7, 9, 9];
        let p = append_batches(&topic, &[1; 8], &ts);
        // find_by_timestamp: the last entry with a timestamp <= t.
        for (t, want) in [
            (4, None),
            (5, Some(2)),
            (6, Some(2)),
            (7, Some(5)),
            (8, Some(5)),
            (9, Some(7)),
            (100, Some(7)),
        ] {
            assert_eq!(
                topic.find_by_timestamp(t).unwrap(),
                want.map(|i| p[i]),
                "t={t}"
            );
        }
        let c = topic
            .open_cursor("sub", at(InitialPosition::Latest, false))
            .unwrap();
        for (t, first_read) in [
            (4, Some(0)),
            (5, Some(3)),
            (6, Some(3)),
            (7, Some(6)),
            (8, Some(6)),
            (9, None),
        ] {
            c.seek_by_timestamp(t).unwrap();
            let want = first_read.map_or(vec![], |i| p[i..].to_vec());
            assert_eq!(read_positions(&c, 100), want, "seek_by_timestamp({t})");
        }
    });
}

#[test]
fn timestamps_never_go_backwards() {
    on_each_backend(2, |topic| {
        let p = append_batches(&topic, &[1; 5], &[10, 30, 20, 5, 40]);
        let stamps: Vec<u64> = p
            .iter()
            .map(|&q| topic.read(q).unwrap().timestamp)
            .collect();
        assert_eq!(stamps, vec![10, 30, 30, 30, 40]);
        assert_eq!(topic.find_by_timestamp(29).unwrap(), Some(p[0]));
    });
}

/// `ceil(log2 n)`, 0 for n = 1.
fn ceil_log2(n: u64) -> u64 {
    u64::from(u64::BITS - (n - 1).leading_zeros())
}

#[test]
fn finding_reads_at_most_ceil_log2_n_plus_2_headers_for_every_n_up_to_2000() {
    let (disk, topic) = mem_topic(2000);
    let log = topic.entry_log().unwrap();
    let reads = || log.stats().header_reads;
    let mut batches = Vec::new();
    for n in 1..=2000u64 {
        // Batches of 1 to 3 messages; timestamps advance by 0 or 1.
        let num = u32::try_from(n % 3 + 1).unwrap();
        topic
            .append_with(
                b"x",
                AppendMeta {
                    num_messages: num,
                    timestamp: n / 2,
                },
            )
            .unwrap();
        topic.sync().unwrap();
        batches.push(num);
        let bound = ceil_log2(n) + 2;
        let b = topic.next_index();
        for index in [0, 1, b / 3, b / 2, b - 2, b.saturating_sub(1), n * 7 % b] {
            let before = reads();
            let found = topic.find_by_index(index).unwrap().unwrap();
            assert!(reads() - before <= bound, "n={n} index={index}");
            let e = topic.read(found).unwrap();
            assert!(
                e.first_index() <= index && index <= e.index,
                "n={n} index={index}"
            );
        }
        for t in [0, n / 4, n / 2, n / 2 + 1] {
            let before = reads();
            let found = topic.find_by_timestamp(t).unwrap();
            assert!(reads() - before <= bound, "n={n} t={t}");
            let e = topic.read(found.unwrap()).unwrap();
            assert!(e.timestamp <= t);
        }
    }
    // The same ledger, sealed: every index.
    drop(log);
    topic.close().unwrap();
    let topic = support::topic::reopen(&disk, 2000);
    let log = topic.entry_log().unwrap();
    let bound = ceil_log2(2000) + 2;
    for index in 0..topic.next_index() {
        let before = log.stats().header_reads;
        let found = topic.find_by_index(index).unwrap().unwrap();
        assert!(log.stats().header_reads - before <= bound);
        let e = topic.read(found).unwrap();
        assert!(e.first_index() <= index && index <= e.index);
    }
}

#[test]
fn a_seek_and_its_epoch_survive_a_crash_without_a_flush() {
    on_each_host(a_seek_and_its_epoch_survive_a_crash);
}

fn a_seek_and_its_epoch_survive_a_crash(host: Host) {
    let (disk, topic) = mem_hosted(host, 3);
    let p = append_n(&topic, 6);
    topic.sync().unwrap();
    let c = topic
        .open_cursor("sub", at(InitialPosition::Earliest, false))
        .unwrap();
    c.ack_cumulative(p[4]).unwrap();
    c.flush().unwrap();
    c.seek(p[2]).unwrap();
    c.rewind().unwrap();
    // The power goes off with the topic still open.
    let image = disk.durable_image();
    let after = reopen_hosted(host, &image, 3);
    let c = after
        .open_cursor("sub", at(InitialPosition::Latest, false))
        .unwrap();
    assert_eq!(c.epoch().unwrap(), 2);
    assert_eq!(c.mark_delete_position().unwrap(), Some(p[1]));
    assert_eq!(read_positions(&c, 10), p[2..].to_vec());
}

#[test]
fn a_seek_whose_record_write_fails_changes_nothing() {
    on_each_host(a_seek_whose_write_fails);
}

fn a_seek_whose_write_fails(host: Host) {
    let (disk, topic) = mem_hosted(host, 3);
    let p = append_n(&topic, 6);
    let c = topic
        .open_cursor("sub", at(InitialPosition::Earliest, false))
        .unwrap();
    c.ack_cumulative(p[3]).unwrap();
    c.ack(p[5]).unwrap();
    // The power goes off after one more write: the ownership checks (reads) pass, the seek
    // fails writing its cursor ledger (or the store's journal), the rewind writing the record.
    disk.fail_after(Some(1));
    assert!(c.seek(p[1]).is_err());
    disk.fail_after(Some(1));
    assert!(c.rewind().is_err());
    disk.fail_after(None);
    assert_eq!(c.epoch().unwrap(), 0);
    assert_eq!(c.mark_delete_position().unwrap(), Some(p[3]));
    assert_eq!(c.acked_ranges().unwrap(), vec![(p[5], p[5])]);
    // A record write whose outcome is unknown latches the cursor's persistence until reopen.
    assert!(matches!(c.seek(p[1]), Err(Error::PreviousIo)));
    assert!(topic.close().is_err());
    let topic = reopen_hosted(host, &disk, 3);
    let c = topic
        .open_cursor("sub", at(InitialPosition::Earliest, false))
        .unwrap();
    c.seek(p[1]).unwrap();
    assert_eq!(
        (c.epoch().unwrap(), c.mark_delete_position().unwrap()),
        (1, Some(p[0]))
    );
}

#[test]
fn finds_across_many_ledgers_match_a_linear_scan_within_the_header_read_bound() {
    // Ledgers of 7 entries; batches of 1 to 5 messages; timestamps repeat across ledger
    // boundaries (five entries per tick).
    on_each_backend(7, |topic| {
        let mut appended = Vec::new();
        for i in 0..500u64 {
            let meta = AppendMeta {
                num_messages: u32::try_from(i % 5).unwrap() + 1,
                timestamp: i / 5,
            };
            let pos = topic.append_with(b"x", meta).unwrap();
            topic.sync().unwrap();
            appended.push((pos, topic.read(pos).unwrap()));
        }
        let log = topic.entry_log().unwrap();
        let bound = ceil_log2(7) + 2;
        for index in 0..topic.next_index() + 2 {
            let before = log.stats().header_reads;
            let found = topic.find_by_index(index).unwrap();
            assert!(log.stats().header_reads - before <= bound, "index {index}");
            let want = appended
                .iter()
                .find(|(_, e)| e.index >= index)
                .map(|(p, _)| *p);
            assert_eq!(found, want, "index {index}");
        }
        for t in 0..=101 {
            let before = log.stats().header_reads;
            let found = topic.find_by_timestamp(t).unwrap();
            assert!(log.stats().header_reads - before <= bound, "timestamp {t}");
            let want = appended
                .iter()
                .rev()
                .find(|(_, e)| e.timestamp <= t)
                .map(|(p, _)| *p);
            assert_eq!(found, want, "timestamp {t}");
        }
    });
}

/// `seek_by_index` into a batch leaves the messages before the index acknowledged at batch-index
/// level: delivered with the entry, kept by a power cut right after the seek (which commits
/// them), and completed into a whole-entry ack by acknowledging the rest.
#[test]
fn seek_by_index_into_a_batch_commits_its_partial_entry() {
    on_each_host(|host| {
        let (disk, topic) = mem_hosted(host, 2);
        // Indexes 0..=2 | 3..=6 | 7.
        let p = append_batches(&topic, &[3, 4, 1], &[10, 20, 30]);
        let c = topic
            .open_cursor("sub", at(InitialPosition::Earliest, false))
            .unwrap();
        c.ack(p[2]).unwrap();
        c.seek_by_index(5).unwrap();
        let acked = |c: &ackstore::Cursor| -> Vec<u32> {
            (0..4)
                .filter(|&i| c.is_batch_index_acked(p[1], i).unwrap())
                .collect()
        };
        assert_eq!(c.mark_delete_position().unwrap(), Some(p[0]));
        assert_eq!(acked(&c), [0, 1]);
        assert!(!c.is_acked(p[2]).unwrap(), "a seek clears later acks");
        let entries = c.read_entries(10).unwrap();
        assert_eq!(entries.len(), 2);
        let skipped: Vec<u32> = entries[0].acked_batch_indexes.iter().flatten().collect();
        assert_eq!((entries[0].position, skipped), (p[1], vec![0, 1]));

        // The power goes off with the topic still open: the seek is durable.
        let image = disk.durable_image();
        let after = reopen_hosted(host, &image, 2);
        let c = after
            .open_cursor("sub", at(InitialPosition::Latest, false))
            .unwrap();
        assert_eq!(c.mark_delete_position().unwrap(), Some(p[0]));
        assert_eq!(acked(&c), [0, 1]);
        assert_eq!(c.backlog().unwrap(), 2);
        c.ack_batch_index(p[1], 2, 4).unwrap();
        c.ack_batch_index(p[1], 3, 4).unwrap();
        assert_eq!(c.mark_delete_position().unwrap(), Some(p[1]));
        assert_eq!(read_positions(&c, 10), vec![p[2]]);
    });
}
