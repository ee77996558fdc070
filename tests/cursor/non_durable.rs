//! Non-durable cursors (Pulsar readers): nothing of them is written, they do not hold back
//! trimming, they vanish on close and restart, and while open they behave as a durable cursor.

use crate::support;

use std::collections::BTreeSet;
use std::path::Path;

use ackstore::{
    Cursor, Error, InitialPosition, ManagedLedger, MemStorage, NonDurableOptions, Position, Storage,
};
use support::topic::{append_n, at, config, mem_topic, on_each_backend, read_positions, reopen};
use support::workload::{Rng, seed_from_env};

fn reader(topic: &ManagedLedger, start: InitialPosition) -> Cursor {
    topic
        .open_non_durable_cursor(
            start,
            NonDurableOptions {
                inclusive: false,
                name: "reader-1".into(),
            },
        )
        .expect("open reader")
}

/// Every file of `dir` and below, with its length.
fn files_of(dir: &Path) -> BTreeSet<(String, u64)> {
    let mut out = BTreeSet::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let meta = entry.metadata().unwrap();
        if meta.is_dir() {
            out.extend(files_of(&entry.path()));
        } else {
            out.insert((entry.path().display().to_string(), meta.len()));
        }
    }
    out
}

fn mem_files(disk: &MemStorage) -> BTreeSet<(String, usize)> {
    disk.list()
        .unwrap()
        .into_iter()
        .map(|name| {
            let len = disk.live_bytes(&name).map_or(0, |b| b.len());
            (name, len)
        })
        .collect()
}

fn exercise(c: &Cursor, p: &[Position]) {
    assert_eq!(read_positions(c, 3), p[..3].to_vec());
    c.ack(p[1]).unwrap();
    c.ack_cumulative(p[2]).unwrap();
    c.set_property("k", 7).unwrap();
    c.flush().unwrap();
    c.seek(p[4]).unwrap();
    c.rewind().unwrap();
    c.skip_entries(1).unwrap();
    c.flush().unwrap();
    c.close().unwrap();
}

#[test]
fn a_non_durable_cursor_leaves_no_file_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    let topic = ManagedLedger::open(dir.path(), config(4)).unwrap();
    let p = append_n(&topic, 10);
    topic.sync().unwrap();
    let before = files_of(dir.path());
    let c = reader(&topic, InitialPosition::Earliest);
    exercise(&c, &p);
    assert_eq!(files_of(dir.path()), before, "no file written or changed");
    topic.close().unwrap();
    let topic = ManagedLedger::open(dir.path(), config(4)).unwrap();
    assert!(topic.cursor_names().is_empty());
}

#[test]
fn a_non_durable_cursor_leaves_no_file_on_the_in_memory_disk() {
    let (disk, topic) = mem_topic(4);
    let p = append_n(&topic, 10);
    topic.sync().unwrap();
    let before = mem_files(&disk);
    let mutations = disk.mutations();
    let c = reader(&topic, InitialPosition::Earliest);
    exercise(&c, &p);
    assert_eq!(mem_files(&disk), before);
    assert_eq!(disk.mutations(), mutations, "no storage operation at all");
}

#[test]
fn a_non_durable_cursor_does_not_hold_back_trimming() {
    on_each_backend(3, |topic| {
        let p = append_n(&topic, 9);
        let r = reader(&topic, InitialPosition::Earliest);
        r.ack(p[1]).unwrap();
        let durable = topic
            .open_cursor("sub", at(InitialPosition::Earliest, false))
            .unwrap();
        durable.ack_cumulative(p[5]).unwrap();
        let trimmed = topic.trim_consumed().unwrap();
        assert_eq!(trimmed, vec![p[0].ledger_id, p[3].ledger_id]);
        // The reader reads on from the first retained entry; its acks of trimmed entries are
        // gone with them.
        assert_eq!(r.mark_delete_position().unwrap(), None);
        assert_eq!(r.first_unacked().unwrap(), Some(p[6]));
        assert_eq!(r.backlog().unwrap(), 3);
        assert!(r.acked_ranges().unwrap().is_empty());
        assert_eq!(read_positions(&r, 10), p[6..].to_vec());
        // With only readers, nothing holds trimming back but the last ledger.
        topic.delete_cursor("sub").unwrap();
        let more = append_n(&topic, 3);
        assert_eq!(topic.trim_consumed().unwrap(), vec![p[6].ledger_id]);
        assert_eq!(read_positions(&r, 10), more);
        topic.close().unwrap();
    });
}

#[test]
fn a_non_durable_cursor_is_gone_on_close_and_after_a_restart() {
    let (disk, topic) = mem_topic(4);
    let p = append_n(&topic, 6);
    let r = reader(&topic, InitialPosition::Earliest);
    r.ack(p[0]).unwrap();
    r.close().unwrap();
    assert!(matches!(r.read_entries(1), Err(Error::Closed)));
    assert!(matches!(r.ack(p[1]), Err(Error::Closed)));
    let r2 = reader(&topic, InitialPosition::Earliest);
    let r3 = r2.clone();
    assert_eq!(r2.mark_delete_position().unwrap(), None, "a new reader");
    topic.close().unwrap();
    assert!(matches!(r3.read_entries(1), Err(Error::Closed)));
    assert!(matches!(
        topic.open_non_durable_cursor(InitialPosition::Earliest, NonDurableOptions::default()),
        Err(Error::Closed)
    ));
    let topic = reopen(&disk, 4);
    assert!(topic.cursor_names().is_empty());
    let r = reader(&topic, InitialPosition::Earliest);
    assert_eq!(read_positions(&r, 10), p);
}

#[test]
fn a_non_durable_cursor_starts_where_it_is_told() {
    let (_disk, topic) = mem_topic(4);
    let p = append_n(&topic, 6);
    let latest = reader(&topic, InitialPosition::Latest);
    assert!(latest.read_entries(5).unwrap().is_empty());
    let inclusive = topic
        .open_non_durable_cursor(
            InitialPosition::At(p[3]),
            NonDurableOptions {
                inclusive: true,
                name: String::new(),
            },
        )
        .unwrap();
    assert_eq!(read_positions(&inclusive, 10), p[3..].to_vec());
    let exclusive = reader(&topic, InitialPosition::At(p[3]));
    assert_eq!(read_positions(&exclusive, 10), p[4..].to_vec());
    let q = append_n(&topic, 1);
    assert_eq!(read_positions(&latest, 10), q);
}

/// The same random operations on a durable and a non-durable cursor of one topic give the same
/// answers, and both agree with a model of the acknowledged set.
#[test]
fn a_non_durable_cursor_answers_as_a_durable_one_and_the_model() {
    let seed = seed_from_env("NON_DURABLE_SEED");
    eprintln!("NON_DURABLE_SEED={seed}");
    on_each_backend(5, |topic| {
        let mut rng = Rng::new(seed);
        let mut p = append_n(&topic, 40);
        let d = topic
            .open_cursor("sub", at(InitialPosition::Earliest, false))
            .unwrap();
        let r = reader(&topic, InitialPosition::Earliest);
        let mut model: BTreeSet<Position> = BTreeSet::new();
        for step in 0..600 {
            let pos = p[rng.index(p.len())];
            match rng.below(9) {
                0 | 1 => {
                    assert_eq!(d.ack(pos).unwrap(), r.ack(pos).unwrap(), "step {step}");
                    model.insert(pos);
                }
                2 => {
                    let mark = d.mark_delete_position().unwrap();
                    if mark.is_none_or(|m| pos >= m) {
                        assert_eq!(
                            d.ack_cumulative(pos).unwrap(),
                            r.ack_cumulative(pos).unwrap()
                        );
                        model.extend(p.iter().copied().filter(|&q| q <= pos));
                    }
                }
                3 => {
                    let n = rng.below(6) as usize;
                    let read = read_positions(&d, n);
                    assert_eq!(read, read_positions(&r, n), "step {step}");
                    assert!(read.iter().all(|q| !model.contains(q)));
                }
                4 => {
                    let many: Vec<_> = (0..4).map(|_| p[rng.index(p.len())]).collect();
                    assert_eq!(d.ack_many(&many).unwrap(), r.ack_many(&many).unwrap());
                    model.extend(many);
                }
                5 => {
                    let n = rng.below(4);
                    assert_eq!(d.skip_entries(n).unwrap(), r.skip_entries(n).unwrap());
                    let mark = d.mark_delete_position().unwrap();
                    model.extend(p.iter().copied().filter(|&q| mark.is_some_and(|m| q <= m)));
                }
                6 => {
                    d.seek_read_position(pos).unwrap();
                    r.seek_read_position(pos).unwrap();
                }
                7 => {
                    if rng.chance(20) {
                        d.seek(pos).unwrap();
                        r.seek(pos).unwrap();
                        model = p.iter().copied().filter(|&q| q < pos).collect();
                    } else {
                        d.rewind().unwrap();
                        r.rewind().unwrap();
                    }
                }
                _ => {
                    p.extend(append_n(&topic, 1));
                }
            }
            assert_eq!(
                d.mark_delete_position().unwrap(),
                r.mark_delete_position().unwrap()
            );
            assert_eq!(d.acked_ranges().unwrap(), r.acked_ranges().unwrap());
            assert_eq!(d.read_position().unwrap(), r.read_position().unwrap());
            let unacked = p.iter().filter(|q| !model.contains(q)).count() as u64;
            assert_eq!(r.backlog().unwrap(), unacked, "step {step}");
            assert_eq!(
                r.first_unacked().unwrap(),
                p.iter().copied().find(|q| !model.contains(q))
            );
            assert_eq!(d.epoch().unwrap(), r.epoch().unwrap());
        }
        topic.close().unwrap();
    });
}
