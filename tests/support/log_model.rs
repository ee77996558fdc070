//! The entry-log tests' workload vocabulary: deterministic entries ([`meta`], [`payload`]) and
//! a [`Model`] of what a workload was told (appended, synced, sealed, deleted), which a log
//! reopened after a power cut is checked against.

use std::collections::BTreeMap;

use ackstore::internals::log::{EntryLog, EntryMeta};

/// The metadata of entry `i` of any ledger.
pub fn meta(i: u64) -> EntryMeta {
    EntryMeta {
        index: i * 10 + 9,
        num_messages: u32::try_from(i % 7).unwrap() + 1,
        timestamp: 1_000 + i,
    }
}

/// The payload of entry `i` of `ledger`: 0 to 299 bytes that differ between entries.
pub fn payload(ledger: u64, i: u64) -> Vec<u8> {
    let len = (i * 37 + ledger * 11) % 300;
    (0..len)
        .map(|j| u8::try_from((j ^ i ^ (ledger << 3)) & 0xff).unwrap())
        .collect()
}

/// What the workload knows about one ledger.
#[derive(Debug, Default, Clone)]
pub struct LedgerModel {
    /// Every entry whose append returned `Ok`, in order.
    pub appended: Vec<(EntryMeta, Vec<u8>)>,
    /// How many of them a returned `sync` (or `seal`) made durable.
    pub synced: usize,
    pub seal_started: bool,
    pub sealed: bool,
    pub delete_started: bool,
    pub deleted: bool,
}

/// What the workload knows about the whole log.
#[derive(Debug, Default, Clone)]
pub struct Model {
    pub ledgers: BTreeMap<u64, LedgerModel>,
}

impl Model {
    /// Creates a ledger through `log` and records it.
    pub fn create(&mut self, log: &EntryLog) -> ackstore::Result<u64> {
        let id = log.create_ledger()?;
        self.ledgers.insert(id, LedgerModel::default());
        Ok(id)
    }

    /// Appends the next entry of `id` and records it.
    pub fn append(&mut self, log: &EntryLog, id: u64) -> ackstore::Result<()> {
        let l = self.ledgers.get_mut(&id).unwrap();
        let i = l.appended.len() as u64;
        let (m, p) = (meta(i), payload(id, i));
        assert_eq!(log.append(id, m, &p)?, i);
        l.appended.push((m, p));
        Ok(())
    }

    /// Syncs `id` and records what became durable.
    pub fn sync(&mut self, log: &EntryLog, id: u64) -> ackstore::Result<()> {
        let l = self.ledgers.get_mut(&id).unwrap();
        let n = l.appended.len();
        log.sync(id)?;
        l.synced = n;
        Ok(())
    }

    /// Seals `id` and records it.
    pub fn seal(&mut self, log: &EntryLog, id: u64) -> ackstore::Result<()> {
        let l = self.ledgers.get_mut(&id).unwrap();
        l.seal_started = true;
        log.seal(id)?;
        l.sealed = true;
        l.synced = l.appended.len();
        Ok(())
    }

    /// Deletes `id` and records it.
    pub fn delete(&mut self, log: &EntryLog, id: u64) -> ackstore::Result<()> {
        let l = self.ledgers.get_mut(&id).unwrap();
        l.delete_started = true;
        log.delete_ledger(id)?;
        l.deleted = true;
        Ok(())
    }

    /// Checks a log reopened after a power cut: every synced entry is there, possibly some
    /// later whole entries, each exactly as appended; nothing else.
    pub fn check_recovered(&self, log: &EntryLog) {
        let ids = log.ledger_ids();
        for id in &ids {
            if !self.ledgers.contains_key(id) {
                // A create that never returned may leave an empty ledger behind.
                assert_eq!(log.entry_count(*id).unwrap(), 0, "unknown ledger {id}");
            }
        }
        for (id, l) in &self.ledgers {
            let exists = ids.contains(id);
            if l.deleted {
                assert!(!exists, "deleted ledger {id} came back");
                continue;
            }
            if !l.delete_started {
                assert!(exists, "ledger {id} was lost");
            }
            if !exists {
                continue;
            }
            let info = log.ledger_info(*id).unwrap();
            let count = usize::try_from(info.entries).unwrap();
            assert!(
                count >= l.synced && count <= l.appended.len(),
                "ledger {id}: {count} entries, synced {}, appended {}",
                l.synced,
                l.appended.len()
            );
            if l.sealed {
                assert!(info.sealed, "sealed ledger {id} came back unsealed");
            }
            if !l.seal_started {
                assert!(!info.sealed, "ledger {id} sealed by itself");
            }
            for (i, (m, p)) in l.appended.iter().take(count).enumerate() {
                let e = log.read(*id, i as u64).unwrap();
                assert_eq!((&e.meta, &e.payload), (m, p), "ledger {id} entry {i}");
            }
        }
    }
}
