//! A topic opened (alone, or by a store) while its former owner (its lock broken, still
//! running) appends and rolls ledgers, at every storage operation of the new owner's open.
//! Appends that land while the new owner reads the ledger the former writes grow the file and
//! its synced-length claim: the new owner takes the file's size after that claim, so it never
//! reports the bytes past its first size as cut short. A roll writes the topic record: one that
//! lands between the new owner's read of the record and its claim refuses the claim. A store's
//! topic reads and claims again (the store's claim fenced the former first); a topic opened
//! alone answers `Fenced` (two opens racing: the one that claims last owns the topic, and an
//! open does not take it back from a newer one), and its caller's next open succeeds. Then
//! the former's next roll answers `Fenced`; the topic, and the reopened one, serve every entry
//! the former owner's completed roll appended and the acker's flushed acks.

use crate::support;

use std::sync::Arc;

use ackstore::{Error, ManagedLedger, MemStorage, Position};
use support::takeover::Disk;
use support::topic::{
    ACKER, Host, config, earliest, on_each_host, open_hosted, topic_with_an_acker,
};

const PER_LEDGER: u64 = 4;

/// The acker's flushed acks are there, and every one of `entries` reads back.
fn serves(topic: &ManagedLedger, entries: &[Position], acked: Position, what: &str) {
    let acker = topic.open_cursor(ACKER, earliest()).expect("acker");
    for &p in entries.iter().filter(|p| **p <= acked) {
        assert!(acker.is_acked(p).expect("is_acked"), "{what}: {p:?} lost");
    }
    for &p in entries {
        topic
            .read(p)
            .unwrap_or_else(|e| panic!("{what}: entry {p:?} unreadable: {e}"));
    }
}

#[test]
fn a_topic_opened_while_its_former_owner_rolls_opens_at_every_step() {
    on_each_host(opens_at_every_step);
}

fn opens_at_every_step(host: Host) {
    let (template, acked) = topic_with_an_acker(host, PER_LEDGER, []);
    // Storage operations of an open of the closed topic, where the former's roll can land.
    let steps = {
        let disk = MemStorage::new();
        support::crash::copy_into(&template, &disk);
        let counted = Disk::new(Arc::new(disk));
        let topic = open_hosted(host, counted.storage.clone(), &config(PER_LEDGER)).expect("open");
        let steps = counted.hook.count();
        topic.close().expect("close");
        steps
    };
    assert!(steps > 10, "{host:?}: {steps} operations");
    let (mut refused, mut raced) = (0, 0);
    for at in 1..=steps {
        let what = format!("{host:?}: the former's roll after operation {at} of the open");
        let disk = MemStorage::new();
        support::crash::copy_into(&template, &disk);
        let former = Arc::new(
            open_hosted(host, Arc::new(disk.clone()), &config(PER_LEDGER))
                .expect("the former owner opens"),
        );
        let mut entries = support::topic::append_n(&former, 1);
        disk.break_lock();
        let counted = Disk::new(Arc::new(disk.clone()));
        let rolled = counted.arm_takeover(at, {
            let former = former.clone();
            // Enough entries to fill the ledger and start the next: a record write or two.
            move || {
                (0..PER_LEDGER)
                    .map(|_| {
                        former
                            .append(b"former")
                            .and_then(|p| former.sync().map(|()| p))
                    })
                    .collect::<ackstore::Result<Vec<Position>>>()
            }
        });
        let topic = match open_hosted(host, counted.storage.clone(), &config(PER_LEDGER)) {
            Ok(topic) => topic,
            Err(Error::Fenced { .. }) if host == Host::Alone => {
                raced += 1;
                open_hosted(host, counted.storage.clone(), &config(PER_LEDGER))
                    .unwrap_or_else(|e| panic!("{what}: the new owner's second open: {e}"))
            }
            Err(e) => panic!("{what}: the new owner's open: {e}"),
        };
        counted.hook.run_if_pending();
        match rolled.lock().unwrap().take().expect("the roll ran") {
            Ok(more) => entries.extend(more),
            Err(Error::Fenced { .. }) => refused += 1,
            Err(e) => panic!("{what}: the former's roll answered {e}"),
        }
        // Whatever the former did, its next roll comes after the claim.
        let next: ackstore::Result<Vec<Position>> = (0..PER_LEDGER + 1)
            .map(|_| {
                former
                    .append(b"late")
                    .and_then(|p| former.sync().map(|()| p))
            })
            .collect();
        assert!(
            matches!(next, Err(Error::Fenced { .. })),
            "{what}: the former's roll after the claim answered {next:?}"
        );
        serves(&topic, &entries, acked, &what);
        topic.close().expect("close");
        drop(former);
        let reopened =
            open_hosted(host, Arc::new(disk.clone()), &config(PER_LEDGER)).expect("reopen");
        serves(&reopened, &entries, acked, &what);
        reopened.close().expect("close");
    }
    assert!(refused > 0, "{host:?}: the former's roll was never refused");
    assert!(
        host == Host::Alone || raced == 0,
        "{host:?}: a store's topic's open answered Fenced"
    );
}
