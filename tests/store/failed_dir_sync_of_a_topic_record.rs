//! A failed directory sync at every directory sync of a roll of one topic of a store (the
//! directory forgets the names the sync covered, the catalog's claim among them when nothing
//! made it durable since the open): no later call of the store, on that topic, another topic
//! or their cursors, nor the creation of a topic, answers `Fenced`, as no other owner exists;
//! each answers `Ok` or `PreviousIo` (reopen to recover), and a reopen of what the disk holds
//! keeps every entry a sync and every ack a flush answered `Ok` for, invents no ack, and takes
//! writes again.

use crate::support;

use std::collections::BTreeSet;
use std::sync::Arc;

use ackstore::{Error, MemStorage, Position, Storage, Store};
use support::config::store;
use support::hooked::{Fault, Hooked};
use support::topic::earliest;

const PER_LEDGER: u64 = 4;
const TOPICS: [&str; 2] = ["rolled", "other"];

/// What a topic's handle was told: the entries a sync answered `Ok` for (with their bytes),
/// every position acked, and the acks a flush answered `Ok` for.
#[derive(Debug, Default)]
struct Told {
    synced: Vec<(Position, Vec<u8>)>,
    appended: Vec<(Position, Vec<u8>)>,
    acked: BTreeSet<Position>,
    flushed: BTreeSet<Position>,
}

/// Appends `n` entries to `topic` and syncs them, recording what an `Ok` covered; returns the
/// first error.
fn append_and_sync(
    topic: &ackstore::ManagedLedger,
    told: &mut Told,
    tag: &str,
    n: usize,
) -> ackstore::Result<()> {
    for i in 0..n {
        let body = format!("{tag}-{i}-{}", told.appended.len()).into_bytes();
        let p = topic.append(&body)?;
        told.appended.push((p, body));
    }
    topic.sync()?;
    told.synced.clone_from(&told.appended);
    Ok(())
}

/// Acks every synced entry of `told` not acked yet through `cursor` and flushes.
fn ack_and_flush(cursor: &ackstore::Cursor, told: &mut Told) -> ackstore::Result<()> {
    let fresh: Vec<Position> = told
        .synced
        .iter()
        .map(|(p, _)| *p)
        .filter(|p| !told.acked.contains(p))
        .take(3)
        .collect();
    for p in fresh {
        cursor.ack(p)?;
        told.acked.insert(p);
    }
    cursor.flush()?;
    told.flushed.clone_from(&told.acked);
    Ok(())
}

#[test]
fn a_failed_directory_sync_of_a_roll_of_one_topic_fences_no_later_call_of_the_store() {
    let mut fired = 0;
    let mut refused_elsewhere = 0;
    let mut n = 1;
    loop {
        let disk = MemStorage::new();
        let hooked = Hooked::new(disk.clone());
        let storage: Arc<dyn Storage> = Arc::new(hooked.clone());
        let config = store(PER_LEDGER, 1 << 20);
        // A first owner writes both topics and closes; the owner under test only reopens
        // them (its claims are links no sync covered yet).
        {
            let first = Store::open_with_storage(storage.clone(), config.clone()).expect("open");
            for name in TOPICS {
                let topic = first.topic(name).expect("topic");
                support::topic::append_n(&topic, PER_LEDGER + 1);
                drop(topic.open_cursor("c", earliest()).expect("cursor"));
            }
            first.close().expect("close");
        }
        let owner = Store::open_with_storage(storage.clone(), config.clone()).expect("reopen");
        let topics: Vec<_> = TOPICS
            .iter()
            .map(|name| owner.topic(name).expect("topic"))
            .collect();
        let cursors: Vec<_> = topics
            .iter()
            .map(|t| t.open_cursor("c", earliest()).expect("cursor"))
            .collect();
        let mut told: Vec<Told> = TOPICS.iter().map(|_| Told::default()).collect();
        hooked.arm(Fault::Dir(n));
        // Fills the current ledger and rolls to the next.
        let first = append_and_sync(&topics[0], &mut told[0], "roll", PER_LEDGER as usize);
        if !hooked.fired(Fault::Dir(n)) {
            first.expect("the roll without a fault");
            break;
        }
        fired += 1;
        let what = format!("directory sync {n} of the roll failed");
        assert!(
            matches!(first, Err(Error::Io { .. } | Error::PreviousIo) | Ok(())),
            "{what}: the roll answered {first:?}"
        );
        let mut outcomes = Vec::new();
        for round in 0..2 {
            for k in 0..TOPICS.len() {
                let tag = format!("later-{round}");
                let synced = append_and_sync(&topics[k], &mut told[k], &tag, PER_LEDGER as usize);
                outcomes.push((format!("{} roll {round}", TOPICS[k]), synced));
                let flushed = ack_and_flush(&cursors[k], &mut told[k]);
                outcomes.push((format!("{} flush {round}", TOPICS[k]), flushed));
            }
        }
        // A new topic is a catalog write built on the claim.
        let created = owner.topic("created").map(drop);
        outcomes.push(("creation of a topic".into(), created));
        for (call, outcome) in &outcomes {
            assert!(
                matches!(outcome, Ok(()) | Err(Error::PreviousIo)),
                "{what}: {call} answered {outcome:?} with one owner"
            );
        }
        if outcomes
            .iter()
            .any(|(call, o)| call.starts_with(TOPICS[1]) && o.is_err())
        {
            refused_elsewhere += 1;
        }
        drop(cursors);
        drop(topics);
        let _ = owner.close();
        let image: Arc<dyn Storage> = Arc::new(disk.durable_image());
        let report = ackstore::check::verify(&image).expect("verify");
        assert!(report.is_sound(), "{what}: {report}");
        let reopened = Store::open_with_storage(image, config).expect("reopen the image");
        for (k, name) in TOPICS.iter().enumerate() {
            let topic = reopened.topic(name).expect("topic");
            for (p, body) in &told[k].synced {
                let entry = topic
                    .read(*p)
                    .unwrap_or_else(|e| panic!("{what}: {name} {p:?} synced, now {e}"));
                assert_eq!(&entry.payload, body, "{what}: {name} {p:?}");
            }
            let cursor = topic.open_cursor("c", earliest()).expect("cursor");
            for (p, _) in &told[k].appended {
                let acked = cursor.is_acked(*p).expect("is_acked");
                assert!(
                    !told[k].flushed.contains(p) || acked,
                    "{what}: {name} {p:?} flushed as acked, now not"
                );
                assert!(
                    told[k].acked.contains(p) || !acked,
                    "{what}: {name} {p:?} never acked, now acked"
                );
            }
            let mut after = Told::default();
            append_and_sync(&topic, &mut after, "reopened", PER_LEDGER as usize)
                .unwrap_or_else(|e| panic!("{what}: {name} after the reopen: {e}"));
            ack_and_flush(&cursor, &mut after)
                .unwrap_or_else(|e| panic!("{what}: {name} flush after the reopen: {e}"));
        }
        reopened.close().expect("close");
        n += 1;
    }
    assert!(fired > 0, "no directory sync of the roll failed");
    // The first directory sync after the open also made the catalog's claim durable: its
    // failure takes the claim back, and the store's other topic answers `PreviousIo` too.
    assert!(
        refused_elsewhere > 0,
        "no failure reached the store's other topic"
    );
}
