//! The short-ledger check of a topic's open (a committed mark-delete at or past the end of the
//! ledger being appended to) against sequences that leave a healthy directory: a kill and a new
//! owner that acknowledges everything it found, a former owner that keeps appending, syncing,
//! acknowledging and flushing after the new owner's claim, and every cursor move that can reach
//! the end of the topic while appended entries wait for a sync; each followed by a power cut.
//! Each image opens, and `verify` finds no damage in it, on a topic alone and on a store's
//! topic.

use crate::support;

use std::collections::BTreeMap;
use std::sync::Arc;

use ackstore::PersistMode::{MultiEntry, SingleEntry};
use ackstore::{Cursor, CursorOptions, InitialPosition, LedgerConfig, MemStorage, Position};
use support::topic::{Host, append_n, append_unsynced, at, on_each_host, open_hosted};

fn config() -> LedgerConfig {
    support::topic::config(1000)
}

/// `verify` finds no damage on `disk` (a torn tail is not damage).
fn sound(disk: &MemStorage, what: &str) {
    let storage: Arc<dyn ackstore::Storage> = Arc::new(disk.clone());
    let report = ackstore::check::verify(&storage).expect("verify");
    let damage: Vec<String> = (report.findings.iter())
        .filter(|f| !f.torn_tail)
        .map(ToString::to_string)
        .collect();
    assert!(damage.is_empty(), "{what}: {damage:?}");
}

/// The topic `host` keeps on `disk` opens, and its cursor `sub` has mark-delete `mark`.
fn opens_with(host: Host, disk: MemStorage, mark: Option<Position>, what: &str) {
    disk.break_lock();
    sound(&disk, &format!("{host:?} {what}"));
    let topic = open_hosted(host, Arc::new(disk), &config())
        .unwrap_or_else(|e| panic!("{host:?} {what}: {e}"));
    let c = topic
        .open_cursor("sub", at(InitialPosition::Earliest, false))
        .unwrap();
    assert_eq!(c.mark_delete_position().unwrap(), mark, "{host:?} {what}");
}

/// A kill (the lock broken, the handle kept) with entries appended but not synced: the new
/// owner reads all it found, acknowledges it, flushes, and the power goes.
#[test]
fn a_new_owner_acknowledging_all_it_found_after_a_kill_survives_a_power_cut() {
    on_each_host(|host| {
        let (kept, unsynced, last) =
            acknowledged_all_after_a_kill(host, |former| append_unsynced(former, 5));
        // What the former owner's write buffer had handed over when it stopped.
        assert!(kept[9] <= last && last <= unsynced[4], "{host:?}: {last}");
    });
}

/// A topic of `host` with 10 entries synced, then those `unsynced` appends without a sync,
/// then killed (the lock broken, the handle kept); a new owner acknowledges all it found and
/// flushes, and the power goes: the durable image opens with that mark-delete. Returns the
/// synced entries, those `unsynced` appended, and the new owner's last entry.
fn acknowledged_all_after_a_kill(
    host: Host,
    unsynced: impl FnOnce(&ackstore::ManagedLedger) -> Vec<Position>,
) -> (Vec<Position>, Vec<Position>, Position) {
    let disk = MemStorage::new();
    let former = open_hosted(host, Arc::new(disk.clone()), &config()).unwrap();
    let kept = append_n(&former, 10);
    let appended = unsynced(&former);
    disk.break_lock();
    let new = open_hosted(host, Arc::new(disk.clone()), &config()).unwrap();
    let c = new
        .open_cursor("sub", at(InitialPosition::Earliest, false))
        .unwrap();
    let last = new.last_position().unwrap();
    c.ack_cumulative(last).unwrap();
    c.flush().unwrap();
    opens_with(host, disk.durable_image(), Some(last), "power cut");
    (kept, appended, last)
}

/// The former owner appends, syncs, acknowledges cumulatively and flushes after the new
/// owner's open; the new owner acknowledges all it found and flushes; the power goes (or not).
#[test]
fn a_former_owner_acknowledging_after_the_claim_leaves_a_directory_that_opens() {
    on_each_host(|host| {
        let disk = MemStorage::new();
        let former = open_hosted(host, Arc::new(disk.clone()), &config()).unwrap();
        let kept = append_n(&former, 10);
        let fc = former
            .open_cursor("sub", at(InitialPosition::Earliest, false))
            .unwrap();
        disk.break_lock();
        let new = open_hosted(host, Arc::new(disk.clone()), &config()).unwrap();
        let late = append_unsynced(&former, 5);
        // The former owner is fenced somewhere along here; what it answers does not matter.
        let _ = former.sync();
        let _ = fc.ack_cumulative(late[4]);
        let _ = fc.flush();
        let c = new
            .open_cursor("sub", at(InitialPosition::Earliest, false))
            .unwrap();
        c.ack_cumulative(kept[9]).unwrap();
        c.flush().unwrap();
        opens_with(host, disk.durable_image(), Some(kept[9]), "power cut");
        opens_with(host, disk, Some(kept[9]), "no power cut");
    });
}

type Move = fn(&Cursor, &[Position], &[Position]);

/// Every move that can take a cursor's mark-delete to the end of the topic, or try to take it
/// past (an error is fine): with `kept` synced and `unsynced` appended after them.
const MOVES: &[(&str, Move)] = &[
    ("skip_entries", |c, _, _| {
        let _ = c.skip_entries(100);
    }),
    ("seek past every ledger", |c, _, _| {
        let _ = c.seek(Position::new(u64::MAX, u64::MAX));
    }),
    ("seek to an unsynced entry", |c, _, u| {
        let _ = c.seek(u[3]);
    }),
    ("seek_by_index past the end", |c, _, _| {
        let _ = c.seek_by_index(1_000_000);
    }),
    ("seek_by_timestamp past the end", |c, _, _| {
        let _ = c.seek_by_timestamp(u64::MAX);
    }),
    ("ack_cumulative of an unsynced entry", |c, _, u| {
        let _ = c.ack_cumulative(u[3]);
    }),
    ("ack of an unsynced entry", |c, _, u| {
        let _ = c.ack(u[0]);
    }),
    ("ack of every synced entry", |c, k, _| {
        for &p in k {
            let _ = c.ack(p);
        }
    }),
    (
        "mark_delete_with_properties on an unsynced entry",
        |c, _, u| {
            let _ = c.mark_delete_with_properties(u[2], BTreeMap::new());
        },
    ),
    ("ack_many of every entry", |c, k, u| {
        let all: Vec<Position> = k.iter().chain(u).copied().collect();
        let _ = c.ack_many(&all);
    }),
    ("ack_batch_index of every entry", |c, k, u| {
        for &p in k.iter().chain(u) {
            let _ = c.ack_batch_index(p, 0, 1);
        }
    }),
];

/// Each move from each initial position (in the single-entry form and in the multi-entry
/// form, by turns), flushed, then a power cut that takes the unsynced
/// entries: the topic opens.
#[test]
fn moves_to_the_end_with_entries_waiting_for_a_sync_survive_a_power_cut() {
    let initial: [CursorOptions; 4] = [
        at(InitialPosition::Earliest, false),
        at(InitialPosition::Latest, false),
        at(InitialPosition::Latest, true),
        at(InitialPosition::At(Position::new(u64::MAX, 0)), true),
    ];
    on_each_host(|host| {
        for (what, apply) in MOVES {
            for (&options, mode) in initial.iter().zip([SingleEntry, MultiEntry].iter().cycle()) {
                let config = support::config::topic(1000, *mode, 1 << 20);
                let disk = MemStorage::new();
                let topic = open_hosted(host, Arc::new(disk.clone()), &config).unwrap();
                let kept = append_n(&topic, 10);
                let unsynced = append_unsynced(&topic, 5);
                let c = topic.open_cursor("sub", options).unwrap();
                apply(&c, &kept, &unsynced);
                let mark = c.mark_delete_position().unwrap();
                assert!(mark <= Some(kept[9]), "{host:?} {what}: {mark:?}");
                c.flush().unwrap();
                let image = disk.durable_image();
                sound(&image, &format!("{host:?} {what}"));
                let reopened = open_hosted(host, Arc::new(image), &config);
                assert!(reopened.is_ok(), "{host:?} {what}: {:?}", reopened.err());
            }
        }
    });
}

/// A kill after entries too large for the write buffer were appended but not synced (the
/// buffer wrote them to the file): the new owner reads what it found, acknowledges it all,
/// flushes, and the power goes.
#[test]
fn a_new_owner_acknowledging_unsynced_entries_it_found_after_a_kill_survives_a_power_cut() {
    on_each_host(|host| {
        let big = vec![7u8; 30 * 1024];
        let (kept, _, last) = acknowledged_all_after_a_kill(host, |former| {
            (0..5).map(|_| former.append(&big).unwrap()).collect()
        });
        assert!(kept[9] < last, "{host:?}: {last}");
    });
}
