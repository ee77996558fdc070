//! Cursors whose ack sets live in a store's cursor journal, driven directly (no topic), and
//! the model their recovery is checked against.
//!
//! A [`Fleet`] holds several cursors on several topics, each a `RangeSetWrapper` backed by the
//! journal (so evictions append partitions), and commits them all in one journal tick, the
//! way the store's flusher does. The model keeps, per cursor, every ack made (the truth) and
//! the acks of the last tick that returned `Ok` (the durable floor).
//!
//! On a disk that holds a store's catalog, a fleet is that store's journal: it reads the
//! segments the catalog lists and lists the segments it creates there (by compare-and-set on
//! the catalog version it read, so once another owner claims the store its next new segment is
//! refused), as the store's own journal does.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use ackstore::MemStorage;
use ackstore::Position;
use ackstore::internals::ackset::{PartitionKey, RangeSetWrapper};
use ackstore::internals::format::cursor::PersistedState;
use ackstore::internals::format::store::Catalog;
use ackstore::internals::journal::index::CursorId;
use ackstore::internals::journal::{
    CursorFlush, Journal, JournalConfig, JournalPartitions, Seal, SegmentHooks,
};
use ackstore::internals::meta::{FileMetaStore, MetaStore};

use super::workload::Rng;

/// Cursors per fleet and topics they spread over.
pub const CURSORS: u64 = 6;
/// Data ledgers each cursor acks entries of.
pub const LEDGERS: u64 = 2;
/// Entry ids acked lie below this: three partitions per ledger.
pub const ENTRIES: u64 = 3 << 16;

/// A journal opened with the default settings and no seal on a fresh disk whose segment 1 holds
/// exactly `bytes` (synced): what a damage test opens after changing a sample's bytes.
///
/// # Errors
/// Those of `Journal::open`.
pub fn open_segment_bytes(bytes: &[u8]) -> ackstore::Result<Journal> {
    let image = MemStorage::new();
    let f = ackstore::Storage::create(&image, &ackstore::internals::journal::segment_name(1))
        .expect("create");
    f.write_all_at(bytes, 0).expect("write");
    f.sync_data().expect("sync");
    Journal::open(Arc::new(image), JournalConfig::default(), Seal::default())
}

/// A journal opened on `disk` with the default settings and no seal, and an ack set of
/// `cursor` over it without a memory limit: what the sample tests write a sample with.
pub fn journal_and_acks(disk: &MemStorage, cursor: CursorId) -> (Arc<Journal>, RangeSetWrapper) {
    let journal = Arc::new(
        Journal::open(
            Arc::new(disk.clone()),
            JournalConfig::default(),
            Seal::default(),
        )
        .expect("open"),
    );
    let acks = RangeSetWrapper::new(
        Box::new(JournalPartitions::new(journal.clone(), cursor)),
        usize::MAX,
    );
    (journal, acks)
}

/// Where the batch records of segment `bytes` are: (offset, frame length), in log order.
pub fn batch_records(bytes: &[u8]) -> Vec<(usize, usize)> {
    use ackstore::internals::format::journal::{RecordKind, SEGMENT_HEADER_V3_LEN, decode_record};
    let mut out = Vec::new();
    let mut at = SEGMENT_HEADER_V3_LEN;
    while let Ok(Some((rec, len))) = decode_record(&bytes[at..]) {
        if rec.kind == RecordKind::Batch {
            out.push((at, len));
        }
        at += len;
    }
    out
}

/// The cursor ids of a fleet: `CURSORS` cursors over three topics.
pub fn cursor_ids() -> Vec<CursorId> {
    (0..CURSORS)
        .map(|i| CursorId {
            topic: 1 + i % 3,
            cursor: 10 + i,
        })
        .collect()
}

/// What each cursor acked, as positions.
pub type Acks = BTreeMap<CursorId, BTreeSet<Position>>;

/// Hooks that list a fleet's segments in the store catalog by compare-and-set from `version`.
fn catalog_hooks(meta: Arc<dyn MetaStore>, version: u64) -> SegmentHooks {
    let held = Arc::new(std::sync::Mutex::new(version));
    let change = move |edit: fn(&mut Catalog, u64)| {
        let (meta, held) = (meta.clone(), held.clone());
        Arc::new(move |seq: u64| -> ackstore::Result<()> {
            let mut version = held.lock().expect("version");
            let (_, bytes) = meta.get("store")?.expect("the store's catalog");
            let mut catalog = Catalog::decode(&bytes).map_err(|c| c.in_record("store"))?;
            edit(&mut catalog, seq);
            catalog.seals.retain(|s| s.segment != seq);
            *version = meta.put("store", Some(*version), &catalog.encode())?;
            Ok(())
        })
    };
    SegmentHooks {
        created: change(|catalog, seq| {
            let list = catalog.segments.get_or_insert_with(Vec::new);
            list.push(seq);
            list.sort_unstable();
        }),
        // As a rollover does: the oldest leaves the list and is recorded as retired.
        deleted: change(|catalog, seq| {
            catalog
                .segments
                .get_or_insert_with(Vec::new)
                .retain(|&s| s != seq);
            catalog.retired_through = catalog.retired_through.max(seq);
        }),
        listed: Arc::new(|_| Ok(None)),
    }
}

/// Cursors backed by one journal.
pub struct Fleet {
    /// The journal.
    pub journal: Arc<Journal>,
    /// Each cursor's ack set and the epoch its state carries.
    pub cursors: BTreeMap<CursorId, (RangeSetWrapper, u64)>,
}

impl Fleet {
    /// Opens the journal on `disk` and every cursor of [`cursor_ids`] from what it committed.
    pub fn open(disk: &MemStorage, config: JournalConfig, budget: usize) -> ackstore::Result<Self> {
        Self::open_sealed(disk, config, budget, &[])
    }

    /// [`Fleet::open`] of a journal whose owner holds `seals` (see `Journal::open_sealed`).
    pub fn open_sealed(
        disk: &MemStorage,
        config: JournalConfig,
        budget: usize,
        seals: &[Seal],
    ) -> ackstore::Result<Self> {
        let storage: Arc<dyn ackstore::Storage> = Arc::new(disk.clone());
        let meta: Arc<dyn MetaStore> = Arc::new(FileMetaStore::new(storage.clone()));
        let catalog = meta
            .get("store")?
            .map(|(v, bytes)| Catalog::decode(&bytes).map(|c| (v, c)))
            .transpose()
            .map_err(|c| c.in_record("store"))?;
        let journal = Arc::new(Journal::open_listed(
            storage,
            config,
            seals,
            catalog
                .as_ref()
                .and_then(|(_, c)| ackstore::internals::store::journal_listing(c)),
        )?);
        if let Some((version, _)) = catalog {
            journal.set_segment_hooks(catalog_hooks(meta, version));
        }
        let cursors = cursor_ids()
            .into_iter()
            .map(|id| {
                let (epoch, index) = journal
                    .committed(id)
                    .map_or((0, Vec::new()), |(s, rows)| (s.epoch, rows));
                let store = Box::new(JournalPartitions::new(journal.clone(), id));
                (
                    id,
                    (RangeSetWrapper::with_index(store, budget, index), epoch),
                )
            })
            .collect();
        Ok(Self { journal, cursors })
    }

    /// Acks `pos` on `cursor`.
    pub fn ack(&mut self, cursor: CursorId, pos: Position) -> ackstore::Result<bool> {
        let (set, _) = self.cursors.get_mut(&cursor).expect("cursor of the fleet");
        set.add(pos)
    }

    /// One tick: every cursor with a dirty partition is committed (its epoch raised, so the
    /// state changes too), with one journal commit.
    pub fn tick(&mut self) -> ackstore::Result<u64> {
        let mut flushes = Vec::new();
        for (id, (set, epoch)) in &mut self.cursors {
            let dirty = set.dirty_keys();
            if dirty.is_empty() {
                continue;
            }
            let mut written = Vec::new();
            for key in dirty {
                if set.is_resident(key) {
                    written.push((key, set.bitmap(key)?.expect("live partition")));
                }
            }
            flushes.push(CursorFlush {
                name: 0,
                cursor: *id,
                state: PersistedState {
                    mark_delete: Position::new(0, 0),
                    epoch: *epoch + 1,
                    properties: BTreeMap::new(),
                },
                written,
                live: set.partitions().into_iter().map(|(k, _)| k).collect(),
            });
        }
        let stats = self.journal.commit(&flushes)?;
        for f in &flushes {
            let (set, epoch) = self.cursors.get_mut(&f.cursor).expect("cursor");
            *epoch = f.state.epoch;
            for key in set.dirty_keys() {
                set.mark_persisted(key);
            }
        }
        Ok(stats.syncs)
    }

    /// Every ack of every cursor (loads what is not resident).
    pub fn acks(&mut self) -> ackstore::Result<Acks> {
        let mut out = Acks::new();
        for (id, (set, _)) in &mut self.cursors {
            let mut acked = BTreeSet::new();
            for (key, _) in set.partitions() {
                let bitmap = set.bitmap(key)?.expect("live partition");
                acked.extend(
                    bitmap
                        .iter()
                        .map(|o| Position::new(key.ledger_id, key.first_entry() + u64::from(o))),
                );
            }
            out.insert(*id, acked);
        }
        Ok(out)
    }
}

/// What a workload did: every ack made, and the acks as of the last tick that returned `Ok`.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// Every ack made before the workload stopped.
    pub truth: Acks,
    /// Acks committed by the last `Ok` tick.
    pub durable: Acks,
    /// Ticks that returned `Ok`.
    pub ticks: u64,
}

/// Opens a fleet on `disk`, acks `acks` entries chosen by `seed` (cursor `i` picked with a
/// Zipf-like weight `1/(i+1)`), committing a tick every `every` acks and at the end. Stops at
/// the first error, as a process that lost its disk would.
pub fn run(
    disk: &MemStorage,
    config: JournalConfig,
    budget: usize,
    seed: u64,
    acks: u64,
    every: u64,
) -> Outcome {
    let mut out = Outcome::default();
    let ids = cursor_ids();
    let weights: Vec<u64> = (1..=ids.len() as u64).map(|i| 600 / i).collect();
    let total: u64 = weights.iter().sum();
    let mut rng = Rng::new(seed);
    let Ok(mut fleet) = Fleet::open(disk, config, budget) else {
        return out;
    };
    for i in 1..=acks {
        let mut pick = rng.below(total);
        let mut c = 0;
        while pick >= weights[c] {
            pick -= weights[c];
            c += 1;
        }
        let pos = Position::new(1 + rng.below(LEDGERS), rng.below(ENTRIES));
        out.truth.entry(ids[c]).or_default().insert(pos);
        if fleet.ack(ids[c], pos).is_err() {
            return out;
        }
        if i % every == 0 || i == acks {
            if fleet.tick().is_err() {
                return out;
            }
            out.durable = out.truth.clone();
            out.ticks += 1;
        }
    }
    out
}

/// Reopens the journal on `image` and checks every cursor: nothing acked that the workload did
/// not ack, nothing lost that a tick returning `Ok` committed.
pub fn check(image: &MemStorage, config: JournalConfig, outcome: &Outcome, what: &str) {
    let mut fleet =
        Fleet::open(image, config, usize::MAX).unwrap_or_else(|e| panic!("{what}: reopen: {e}"));
    let recovered = fleet.acks().unwrap_or_else(|e| panic!("{what}: load: {e}"));
    for id in cursor_ids() {
        let got = recovered.get(&id).cloned().unwrap_or_default();
        let truth = outcome.truth.get(&id).cloned().unwrap_or_default();
        let floor = outcome.durable.get(&id).cloned().unwrap_or_default();
        if let Some(p) = got.difference(&truth).next() {
            panic!("{what}: cursor {id:?} recovered ack {p} it never made");
        }
        if let Some(p) = floor.difference(&got).next() {
            panic!("{what}: cursor {id:?} lost ack {p} of a tick that returned Ok");
        }
    }
}

/// The keys a fleet's acks touch, for budget checks.
pub fn partition_of(pos: Position) -> PartitionKey {
    PartitionKey::of(pos)
}
