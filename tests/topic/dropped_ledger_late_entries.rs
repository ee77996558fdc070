//! A ledger the new owner's open drops as empty (rule 4: the one its former owner had just
//! created and recorded) into which that former owner, its lock broken and still running,
//! appends and syncs after the new owner read it, with the power lost after the new owner's
//! record write that drops the ledger and before the ledger's file is removed. The file then
//! holds an entry above every ledger the record lists, written by an owner fenced before it
//! wrote it: the next open deletes it as an orphan and opens the topic, with every entry
//! synced before the takeover; it is not an older topic record. On a topic opened alone, whose
//! open writes the record that drops the ledger and then removes its file, and on a store's
//! topic, which does both after its open, with its next record write.

use crate::support;

use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};

use ackstore::{MemStorage, Position};
use support::tap::{Hook, Op, Tap};
use support::topic::{Host, append_n, config, entries, on_each_host, open_hosted};

const PER_LEDGER: u64 = 4;

/// The former owner's hook: holds its first entry write into a ledger file (a write past the
/// header), whose name it keeps, until the test lets it go.
struct HoldFirstEntry {
    reached: Mutex<Sender<()>>,
    go: Mutex<Receiver<()>>,
    held: Mutex<Option<String>>,
}

impl Hook for HoldFirstEntry {
    fn write(
        &self,
        name: &str,
        buf: &[u8],
        offset: u64,
        write: &dyn Fn(&[u8], u64) -> ackstore::Result<()>,
    ) -> ackstore::Result<()> {
        let mut held = self.held.lock().unwrap();
        if held.is_none() && offset > 0 && name.contains("ledger-") && name.ends_with(".log") {
            *held = Some(name.to_owned());
            drop(held);
            self.reached.lock().unwrap().send(()).unwrap();
            self.go.lock().unwrap().recv().unwrap();
        }
        write(buf, offset)
    }
}

/// The new owner's hook: right before ledger file `name` is removed, lets the former owner
/// append and sync, waits for it, and keeps the durable image of the disk then.
struct BeforeRemoval {
    name: String,
    disk: MemStorage,
    go: Mutex<Sender<()>>,
    done: Mutex<Receiver<()>>,
    image: Mutex<Option<MemStorage>>,
}

impl Hook for BeforeRemoval {
    fn before(&self, op: Op<'_>) -> ackstore::Result<()> {
        if let Op::Remove(name) = op
            && name.ends_with(&self.name)
        {
            let mut image = self.image.lock().unwrap();
            if image.is_none() {
                self.go.lock().unwrap().send(()).unwrap();
                self.done.lock().unwrap().recv().unwrap();
                *image = Some(self.disk.durable_image());
            }
        }
        Ok(())
    }
}

#[test]
fn a_former_owners_entries_in_a_ledger_dropped_as_empty_are_no_older_record() {
    on_each_host(late_entries_in_a_dropped_ledger);
}

fn late_entries_in_a_dropped_ledger(host: Host) {
    let disk = MemStorage::new();
    let (reached_tx, reached_rx) = channel();
    let (go_tx, go_rx) = channel();
    let (done_tx, done_rx) = channel();
    let synced: Vec<Position>;
    let (name, former) = {
        let first = open_hosted(host, Arc::new(disk.clone()), &config(PER_LEDGER)).expect("open");
        synced = append_n(&first, PER_LEDGER);
        first.close().expect("close");
        let hook = Arc::new(HoldFirstEntry {
            reached: Mutex::new(reached_tx.clone()),
            go: Mutex::new(go_rx),
            held: Mutex::new(None),
        });
        let tapped = Arc::new(Tap::new(Arc::new(disk.clone()), hook.clone()));
        let former = open_hosted(host, tapped, &config(PER_LEDGER)).expect("the former opens");
        let former = Arc::new(former);
        let appending = former.clone();
        // Its next append goes to a new ledger: recorded, then held before its entry is
        // written (an append that returns unheld tells the test so).
        std::thread::spawn(move || {
            let appended = appending.append(b"late");
            let _ = appending.sync();
            let _ = reached_tx.send(());
            let _ = done_tx.send(());
            appended.is_ok()
        });
        reached_rx.recv().unwrap();
        let name = hook.held.lock().unwrap().clone();
        (name.expect("the former's append wrote no entry"), former)
    };
    disk.break_lock();
    let hook = Arc::new(BeforeRemoval {
        name: name.clone(),
        disk: disk.clone(),
        go: Mutex::new(go_tx),
        done: Mutex::new(done_rx),
        image: Mutex::new(None),
    });
    let tapped = Arc::new(Tap::new(Arc::new(disk.clone()), hook.clone()));
    let new = open_hosted(host, tapped, &config(PER_LEDGER)).expect("the new owner opens");
    // A store's topic deletes the ledger it dropped after its next record write.
    let appended = new.append(b"new").expect("the new owner appends");
    new.sync().expect("the new owner syncs");
    assert_eq!(
        entries(&new),
        ["m0", "m1", "m2", "m3", "new"],
        "{host:?}: the new owner's topic"
    );
    let image = hook
        .image
        .lock()
        .unwrap()
        .take()
        .unwrap_or_else(|| panic!("{host:?}: the new owner never removed {name}"));
    std::mem::forget((new, former));
    let reopened = open_hosted(host, Arc::new(image), &config(PER_LEDGER)).unwrap_or_else(|e| {
        panic!("{host:?}: a power cut before {name} was removed: the open refused: {e}")
    });
    for p in &synced {
        reopened
            .read(*p)
            .unwrap_or_else(|e| panic!("{host:?}: synced {p} lost: {e}"));
    }
    assert_eq!(
        entries(&reopened),
        ["m0", "m1", "m2", "m3"],
        "{host:?}: after the power cut ({appended} not yet synced then)"
    );
}
