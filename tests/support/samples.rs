//! The committed sample directories under `tests/data/`, copied before a test opens them (an
//! open may repair a torn tail, and a sample must stay as it was committed), and what the
//! samples of the compact partition table (`tests/data/cursor-v2-*`) and the topic directories
//! with cursor ledgers (`tests/data/cursor-ledger-*`, [`LedgerSample`]) hold; and a directory's
//! records rewritten as an earlier release stored them.

use std::collections::BTreeSet;
use std::path::Path;

use ackstore::internals::ackset::PartitionKey;
use ackstore::internals::format::cursor::PersistedState;
use ackstore::internals::format::journal::name_tag;
use ackstore::internals::format::meta::{CursorRecord, TopicRecord, encode_stored};
use ackstore::internals::journal::index::CursorId;
use ackstore::internals::journal::{BatchStage, Journal};
use ackstore::internals::meta::{FileMetaStore, MetaStore, record_of_file};
use ackstore::{Position, Storage};

/// The topic of the cursor every journal sample (`tests/data/journal-v*`) binds its state to.
pub const JOURNAL_SAMPLE_TOPIC: &str = "t";
/// The name of that cursor.
pub const JOURNAL_SAMPLE_CURSOR: &str = "sub";
/// Its ids in the journal's records.
pub const JOURNAL_SAMPLE_ID: CursorId = CursorId {
    topic: 1,
    cursor: 1,
};

/// Commits one tick of `journal` staging the sample cursor ([`JOURNAL_SAMPLE_ID`]) with
/// `state`, no acks added, `live` its live partitions and the batch records of `stage`.
pub fn commit_sample_tick(
    journal: &Journal,
    state: PersistedState,
    live: &[PartitionKey],
    stage: &BatchStage,
) {
    let name = name_tag(JOURNAL_SAMPLE_TOPIC, JOURNAL_SAMPLE_CURSOR);
    let mut tick = journal.begin_tick();
    tick.stage_with_batch((JOURNAL_SAMPLE_ID, name), state, (&[], live), stage)
        .expect("stage");
    tick.commit().expect("tick");
}

/// The committed samples' directory, `tests/data` of the repository.
pub fn data_dir() -> std::path::PathBuf {
    // The packages that compile this file sit under the repository root (`tests/`,
    // `tests/optimised/`, and the command's `cli/`): the first ancestor holding `tests/data`.
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .map(|dir| dir.join("tests/data"))
        .find(|data| data.is_dir())
        .expect("the repository's tests/data")
}

/// A copy of sample directory `name` in a temporary directory.
pub fn sample_dir(name: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for file in std::fs::read_dir(data_dir().join(name)).unwrap() {
        let file = file.unwrap();
        std::fs::copy(file.path(), dir.path().join(file.file_name())).unwrap();
    }
    dir
}

/// Copies the files of sample directory `name` onto `disk`, each written and synced, the
/// directory synced: what the disk of the release that wrote the sample held after its close.
pub fn load_sample(disk: &ackstore::MemStorage, name: &str) {
    for file in std::fs::read_dir(data_dir().join(name)).unwrap() {
        let file = file.unwrap();
        let bytes = std::fs::read(file.path()).unwrap();
        let copy = disk.create(&file.file_name().to_string_lossy()).unwrap();
        copy.write_all_at(&bytes, 0).unwrap();
        copy.sync_data().unwrap();
    }
    disk.sync_dir().unwrap();
}

/// A copy of sample directory `name` and the bytes of its file `file`, which this build writes
/// as `written`: with `ACKSTORE_WRITE_SAMPLES` set, `written` first replaces the committed
/// sample (to renew a sample after a deliberate format change).
pub fn written_sample(name: &str, file: &str, written: &[u8]) -> (tempfile::TempDir, Vec<u8>) {
    if std::env::var_os("ACKSTORE_WRITE_SAMPLES").is_some() {
        let dir = data_dir().join(name);
        std::fs::create_dir_all(&dir).expect("sample directory");
        std::fs::write(dir.join(file), written).expect("write sample");
    }
    let dir = sample_dir(name);
    let sample = std::fs::read(dir.path().join(file)).expect("sample");
    (dir, sample)
}

/// Entries `first..first + count` of `ledger` that a fixed xorshift generator seeded with
/// `seed` keeps: each one whose next draw `x` has `keep(x)`.
fn drawn(ledger: u64, first: u64, count: u64, seed: u64, keep: fn(u64) -> bool) -> Vec<Position> {
    let mut x = seed;
    (first..first + count)
        .filter(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            keep(x)
        })
        .map(|e| Position::new(ledger, e))
        .collect()
}

/// Ledger 4's partition 0 in the samples: about 40% of its first 6,000 entries acked, chosen by
/// a fixed generator, so its record (a dense bitmap body, over 700 bytes) is too large to go
/// inline with the pages of `cursor-v2-paged-torn-marker` and goes inline in `cursor-v2-multi`.
pub fn scattered() -> Vec<Position> {
    drawn(4, 0, 6_000, 0x2545_f491, |x| x % 5 < 2)
}

/// Ledger 4's partition 1 in `cursor-v2-multi`: a random half of 60,000 entries, whose record
/// (a dense bitmap body of 7.5 KiB) goes into an entry of its own.
pub fn dense() -> Vec<Position> {
    drawn(4, 1 << 16, 60_000, 0x9e37_79b9, |x| x & 1 == 0)
}

/// The acks of the first flush of every v2 sample (mark-delete 3:0, epoch 2, property x = 7):
/// ledger 3's entries 1, 3, 5 and 70,000 to 70,010, [`scattered`], one entry in each of
/// `extra` further partitions of ledger 5.
pub fn first_flush(extra: u64) -> BTreeSet<Position> {
    let mut acks: BTreeSet<_> = [1, 3, 5].map(|e| Position::new(3, e)).into();
    acks.extend((70_000..=70_010).map(|e| Position::new(3, e)));
    acks.extend(scattered());
    acks.extend((0..extra).map(|c| Position::new(5, c << 16)));
    acks
}

/// Rewrites every record of `disk` as an earlier release stored it.
pub fn to_earlier_layout(disk: &ackstore::MemStorage) {
    let meta = FileMetaStore::new(std::sync::Arc::new(disk.clone()));
    for name in meta.list().unwrap() {
        let (version, bytes) = meta.get(&name).unwrap().unwrap();
        let bytes = if name == "topic" {
            let mut r = TopicRecord::decode(&bytes).unwrap();
            r.topic_id = 0;
            r.encode()
        } else {
            let mut r = CursorRecord::decode(&bytes).unwrap();
            r.identity = None;
            r.encode()
        };
        for file in disk.list().unwrap() {
            if record_of_file(&file) == Some(name.as_str()) {
                disk.remove(&file).unwrap();
            }
        }
        let legacy = disk.create(&format!("{name}.meta")).unwrap();
        legacy
            .write_all_at(&encode_stored(version, &bytes), 0)
            .unwrap();
        legacy.sync_data().unwrap();
    }
    disk.sync_dir().unwrap();
}

/// A copy of sample `name` (a cursor ledger and its record `cursor-1`, not a topic directory)
/// on an in-memory disk, made the cursor of a topic: data ledgers `data` (id and number of
/// single-message entries each, ids ascending and above the sample's ledger) are written and
/// sealed around it, and a topic record of an earlier release lists them and the cursor under
/// its record's name (returned).
pub fn sample_as_topic(name: &str, data: &[(u64, u64)]) -> (ackstore::MemStorage, String) {
    use ackstore::internals::format::ledger::EntryMeta;
    use ackstore::internals::format::meta::{CursorEntry, LedgerRecord};
    use ackstore::internals::log::{EntryLog, LogConfig};

    let disk = ackstore::MemStorage::new();
    load_sample(&disk, name);
    let storage: std::sync::Arc<dyn Storage> = std::sync::Arc::new(disk.clone());
    let meta = FileMetaStore::new(storage.clone());
    let (_, bytes) = meta.get("cursor-1").unwrap().expect("the sample's record");
    let cursor = CursorRecord::decode(&bytes).unwrap().name;
    let log = EntryLog::open(storage, LogConfig::default()).unwrap();
    let (first, last) = (data[0].0, data[data.len() - 1].0);
    log.reserve_ids(first, last + 1, None);
    let mut index = 0;
    let mut ledgers = Vec::new();
    for &(id, entries) in data {
        assert_eq!(
            log.create_ledger().unwrap(),
            id,
            "ids ascending and contiguous"
        );
        let first_index = index;
        for _ in 0..entries {
            let meta = EntryMeta {
                index,
                num_messages: 1,
                timestamp: 1000 + index,
            };
            log.append(id, meta, b"m").unwrap();
            index += 1;
        }
        log.sync(id).unwrap();
        log.seal(id).unwrap();
        ledgers.push(LedgerRecord {
            id,
            entries,
            first_index,
            first_timestamp: 1000 + first_index,
            last_timestamp: 1000 + index - 1,
        });
    }
    drop(log);
    let record = TopicRecord {
        next_ledger_id: last + 1,
        ledgers: ledgers.into(),
        cursors: vec![CursorEntry {
            name: cursor.as_str().into(),
            id: 1,
        }]
        .into(),
        next_cursor_id: 2,
        topic_id: 0,
        journal: None,
        store_id: 0,
    };
    meta.put("topic", None, &record.encode()).unwrap();
    (disk, cursor)
}

/// Ack memory the samples with cold partitions were written with: about one partition resident.
pub const COLD_LRU: usize = 256;

/// The messages a [`LedgerSample`]'s cursor `sub` acknowledged in part, after its whole
/// entries, the topic reopened for it.
#[derive(Debug, Clone, Copy)]
pub struct Partial {
    /// Every `step`-th entry from entry `from` that `sub` has not acknowledged whole...
    pub every: (usize, usize),
    /// ...has these messages acknowledged...
    pub indexes: &'static [u32],
    /// ...of a batch of this many.
    pub batch: u32,
    /// The ack memory of the reopened topic's cursor (`None`: the default).
    pub lru: Option<usize>,
}

/// The partial entries of `-cold`: messages 0 and 2 of 4 in the sixth entry of each data ledger
/// of 40, written with [`COLD_LRU`] bytes of ack memory (partitions and partial entries cold).
const COLD: Partial = Partial {
    every: (5, 40),
    indexes: &[0, 2],
    batch: 4,
    lru: Some(COLD_LRU),
};

/// The partial entries of `-batch`: messages 0 and 3 of 8 in every fifth entry from the first.
const BATCH: Partial = Partial {
    every: (0, 5),
    indexes: &[0, 3],
    batch: 8,
    lru: None,
};

/// How a cursor of a [`LedgerSample`] acknowledged, by index into the sample's entries.
#[derive(Debug, Clone, Copy)]
pub struct SampleCursor {
    /// The cursor's name.
    pub name: &'static str,
    /// Acknowledged cumulatively up to this entry (`ack_cumulative`), first.
    pub mark_delete: Option<usize>,
    /// Then acknowledged one by one: every `step`-th entry from entry `from` (`step` 0: none).
    pub every: (usize, usize),
    /// And these entries one by one.
    pub extra: &'static [usize],
}

impl SampleCursor {
    /// The cursor's name and the indexes it acknowledged one by one (mark-delete apart).
    fn acks(&self, entries: usize) -> BTreeSet<usize> {
        let (from, step) = self.every;
        let mut out: BTreeSet<usize> = if step == 0 {
            BTreeSet::new()
        } else {
            (from..entries).step_by(step).collect()
        };
        out.extend(self.extra);
        out
    }
}

/// A committed topic directory (`tests/data/cursor-ledger-*`) whose cursors persist in cursor
/// ledgers, as the cursor-ledger writer of an earlier release left it after a clean close (the
/// commit that wrote each is named in `docs/format.md`). Its known answer is this description:
/// `entries` synced single-message entries (payload `m{i}`, timestamp `1000 + i`) in data
/// ledgers of `per_ledger` (see [`Self::positions`]; on a store, topic `t`'s, written by the
/// store, the topic then opened alone for its cursors), then each cursor of `cursors` opened
/// at the earliest entry (`mode`), acknowledging as [`SampleCursor`] says, closed; with
/// `partial`, the topic then reopened and cursor `sub` acknowledging messages as [`Partial`]
/// says, closed.
#[derive(Debug, Clone)]
pub struct LedgerSample {
    /// The directory under `tests/data`.
    pub name: String,
    /// Who wrote the topic.
    pub host: super::topic::Host,
    /// Entries, and entries per data ledger.
    pub shape: (u64, u64),
    /// The persist mode the cursors were written in.
    pub mode: ackstore::PersistMode,
    /// The cursors, in the order they were opened.
    pub cursors: &'static [SampleCursor],
    /// The messages `sub` acknowledged in part, if any.
    pub partial: Option<Partial>,
}

/// `sub`, every third entry from the second.
const SUB: SampleCursor = SampleCursor {
    name: "sub",
    mark_delete: None,
    every: (1, 3),
    extra: &[],
};

/// [`SUB`] and `other`, every fifth entry from the third.
const SUB_AND_OTHER: &[SampleCursor] = &[
    SUB,
    SampleCursor {
        name: "other",
        mark_delete: None,
        every: (2, 5),
        extra: &[],
    },
];

/// Every committed sample of a topic directory with cursor ledgers.
pub fn ledger_samples() -> Vec<LedgerSample> {
    use super::topic::Host::{Alone, Store};
    use ackstore::PersistMode::{MultiEntry, SingleEntry};
    let sample = |name: String, host, shape, mode, cursors| LedgerSample {
        name,
        host,
        shape,
        mode,
        cursors,
        partial: None,
    };
    let sub: &'static [SampleCursor] = &[SUB];
    let mut samples = Vec::new();
    for (host, on) in [(Alone, "alone"), (Store, "store")] {
        let name = |what: &str| format!("cursor-ledger-{on}{what}");
        samples.extend([
            sample(name(""), host, (120, 40), MultiEntry, sub),
            sample(name("-single"), host, (120, 40), SingleEntry, sub),
            sample(name("-two"), host, (120, 40), MultiEntry, SUB_AND_OTHER),
            LedgerSample {
                partial: Some(COLD),
                ..sample(name("-cold"), host, (400, 40), MultiEntry, sub)
            },
            LedgerSample {
                partial: Some(BATCH),
                ..sample(name("-batch"), host, (160, 8), MultiEntry, sub)
            },
        ]);
    }
    let name = |name: &str| name.to_string();
    samples.extend([
        sample(
            name("cursor-ledger-store-50"),
            Store,
            (120, 50),
            MultiEntry,
            sub,
        ),
        sample(
            name("cursor-ledger-store-300"),
            Store,
            (300, 50),
            MultiEntry,
            sub,
        ),
        sample(
            name("cursor-ledger-three"),
            Alone,
            (40, 10),
            MultiEntry,
            THREE,
        ),
        sample(
            name("cursor-ledger-ahead-behind"),
            Alone,
            (12, 4),
            MultiEntry,
            AHEAD_BEHIND,
        ),
        sample(
            name("cursor-ledger-inspect"),
            Alone,
            (35, 10),
            MultiEntry,
            INSPECT,
        ),
    ]);
    samples
}

/// `a`, `b` and `c`: every third entry from the second, the third and the fourth.
const THREE: &[SampleCursor] = &[
    SampleCursor {
        name: "a",
        mark_delete: None,
        every: (1, 3),
        extra: &[],
    },
    SampleCursor {
        name: "b",
        mark_delete: None,
        every: (2, 3),
        extra: &[],
    },
    SampleCursor {
        name: "c",
        mark_delete: None,
        every: (3, 3),
        extra: &[],
    },
];

/// `ahead`, cumulatively to the ninth entry and the eleventh; `behind`, cumulatively to the
/// second and the seventh.
const AHEAD_BEHIND: &[SampleCursor] = &[
    SampleCursor {
        name: "ahead",
        mark_delete: Some(8),
        every: (0, 0),
        extra: &[10],
    },
    SampleCursor {
        name: "behind",
        mark_delete: Some(1),
        every: (0, 0),
        extra: &[6],
    },
];

/// `sub/../x` (a name that is no path), every third entry from the second.
const INSPECT: &[SampleCursor] = &[SampleCursor {
    name: "sub/../x",
    ..SUB
}];

/// The committed sample `cursor-ledger-{alone|store}{what}` of [`ledger_samples`], the topic
/// `host` keeps.
pub fn ledger_sample_on(host: super::topic::Host, what: &str) -> LedgerSample {
    let host = match host {
        super::topic::Host::Alone => "alone",
        super::topic::Host::Store => "store",
    };
    ledger_sample(&format!("cursor-ledger-{host}{what}"))
}

/// The committed sample `name` of [`ledger_samples`].
pub fn ledger_sample(name: &str) -> LedgerSample {
    ledger_samples()
        .into_iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no sample {name}"))
}

impl LedgerSample {
    /// The positions of the sample's entries, by index: data ledger `1 + i / per_ledger`,
    /// entry `i % per_ledger`.
    pub fn positions(&self) -> Vec<Position> {
        let (n, per_ledger) = self.shape;
        (0..n)
            .map(|i| Position::new(1 + i / per_ledger, i % per_ledger))
            .collect()
    }

    /// The cursor `cursor` of the sample.
    fn cursor(&self, cursor: &str) -> &SampleCursor {
        self.cursors
            .iter()
            .find(|c| c.name == cursor)
            .unwrap_or_else(|| panic!("{}: no cursor {cursor}", self.name))
    }

    /// The entries cursor `cursor` acknowledged one by one (mark-delete apart).
    pub fn acks(&self, cursor: &str) -> BTreeSet<Position> {
        let positions = self.positions();
        self.cursor(cursor)
            .acks(positions.len())
            .into_iter()
            .map(|i| positions[i])
            .collect()
    }

    /// Cursor `cursor`'s mark-delete position, if it acknowledged cumulatively.
    pub fn mark_delete(&self, cursor: &str) -> Option<Position> {
        let m = self.cursor(cursor).mark_delete?;
        Some(self.positions()[m])
    }

    /// The entries cursor `cursor` counts as acknowledged: at or before its mark-delete, or
    /// acknowledged one by one (the batch acks of [`Self::batch`] apart).
    pub fn done(&self, cursor: &str) -> BTreeSet<Position> {
        let mark = self.mark_delete(cursor);
        let mut out = self.acks(cursor);
        out.extend(
            self.positions()
                .into_iter()
                .filter(|p| mark.is_some_and(|m| *p <= m)),
        );
        out
    }

    /// The entries `sub` acknowledged in part (see [`Partial`]; empty without `partial`).
    pub fn batch(&self) -> Vec<Position> {
        let Some(partial) = self.partial else {
            return Vec::new();
        };
        let acks = self.acks("sub");
        let (from, step) = partial.every;
        let positions = self.positions();
        (from..positions.len())
            .step_by(step)
            .map(|i| positions[i])
            .filter(|p| !acks.contains(p))
            .collect()
    }

    /// A copy of the sample on `disk`.
    pub fn load(&self, disk: &ackstore::MemStorage) {
        load_sample(disk, &self.name);
    }

    /// A copy of the sample on a fresh in-memory disk.
    pub fn disk(&self) -> ackstore::MemStorage {
        let disk = ackstore::MemStorage::new();
        self.load(&disk);
        disk
    }
}
