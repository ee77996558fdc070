//! A record write whose temporary file the directory lost before its link (a failed directory
//! sync elsewhere in the directory may take back the names it covered, as the in-memory disk
//! models it): with one owner, no other writer removed it (a sweep removes only the temporary
//! files of versions the record has reached), so the write fails as an I/O failure, never as
//! `Fenced`, which would tell the broker it lost the topic. On a topic alone and on a store's
//! topic: the roll that writes the record answers an error that is not `Fenced`, no later call
//! answers `Fenced`, and a reopen serves every entry a sync answered `Ok` for.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use ackstore::{Error, MemStorage, Position, Storage};
use support::tap::{Hook, Op, Tap};
use support::topic::{Host, config, on_each_host, open_hosted};

const PER_LEDGER: u64 = 4;

/// Removes the temporary file of the next topic record write, once armed, right before its
/// link: the name the directory lost.
struct LoseTemp {
    disk: MemStorage,
    armed: AtomicBool,
}

impl Hook for LoseTemp {
    fn before(&self, op: Op<'_>) -> ackstore::Result<()> {
        if let Op::Link(from, to) = op
            && from.ends_with(".meta.tmp")
            && to.contains("topic.")
            && self.armed.swap(false, Ordering::SeqCst)
        {
            self.disk.remove(from).expect("remove the temporary file");
        }
        Ok(())
    }
}

#[test]
fn a_lost_temporary_record_file_fails_the_write_without_fencing_its_owner() {
    on_each_host(|host: Host| {
        let disk = MemStorage::new();
        let hook = Arc::new(LoseTemp {
            disk: disk.clone(),
            armed: AtomicBool::new(false),
        });
        let storage: Arc<dyn Storage> = Arc::new(Tap::new(Arc::new(disk.clone()), hook.clone()));
        let topic = open_hosted(host, storage, &config(PER_LEDGER)).expect("open");
        let mut synced: Vec<Position> = support::topic::append_n(&topic, PER_LEDGER - 1);
        hook.armed.store(true, Ordering::SeqCst);
        // Filling the ledger rolls to the next: a topic record write, whose temporary file
        // goes before its link.
        let mut answers = Vec::new();
        for _ in 0..2 * PER_LEDGER {
            let appended = topic.append(b"next").and_then(|p| topic.sync().map(|()| p));
            match appended {
                Ok(p) => synced.push(p),
                Err(e) => answers.push(e),
            }
        }
        assert!(
            !hook.armed.load(Ordering::SeqCst),
            "{host:?}: no record write ran"
        );
        assert!(
            answers.iter().all(|e| !matches!(e, Error::Fenced { .. })),
            "{host:?}: the only owner was told it is fenced: {answers:?}"
        );
        drop(topic);
        let reopened =
            open_hosted(host, Arc::new(disk.clone()), &config(PER_LEDGER)).expect("reopen");
        for &p in &synced {
            reopened
                .read(p)
                .unwrap_or_else(|e| panic!("{host:?}: entry {p:?}, synced with Ok: {e}"));
        }
        reopened.close().expect("close");
    });
}
