//! The committed sample directories under `tests/data/`, copied before a test opens them (an
//! open may repair a torn tail, and a sample must stay as it was committed), and what the
//! samples of the compact partition table (`tests/data/cursor-v2-*`) hold; and a directory's
//! records rewritten as an earlier release stored them.

use std::collections::BTreeSet;
use std::path::Path;

use ackstore::internals::format::meta::{CursorRecord, TopicRecord, encode_stored};
use ackstore::internals::journal::index::CursorId;
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

/// A copy of sample directory `name` in a temporary directory.
pub fn sample_dir(name: &str) -> tempfile::TempDir {
    // The samples are the library's (`tests/data`); the command's tests (package
    // `ackstore-cli`, in `cli/`) reach them from its directory.
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let data = if manifest.join("tests/data").is_dir() {
        manifest.join("tests/data")
    } else {
        manifest.join("../tests/data")
    };
    let from = data.join(name);
    let dir = tempfile::tempdir().unwrap();
    for file in std::fs::read_dir(&from).unwrap() {
        let file = file.unwrap();
        std::fs::copy(file.path(), dir.path().join(file.file_name())).unwrap();
    }
    dir
}

/// A copy of sample directory `name` and the bytes of its file `file`, which this build writes
/// as `written`: with `ACKSTORE_WRITE_SAMPLES` set, `written` first replaces the committed
/// sample (to renew a sample after a deliberate format change).
pub fn written_sample(name: &str, file: &str, written: &[u8]) -> (tempfile::TempDir, Vec<u8>) {
    if std::env::var_os("ACKSTORE_WRITE_SAMPLES").is_some() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data")
            .join(name);
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

    let dir = sample_dir(name);
    let disk = ackstore::MemStorage::new();
    for file in std::fs::read_dir(dir.path()).unwrap() {
        let file = file.unwrap();
        let bytes = std::fs::read(file.path()).unwrap();
        let copy = disk.create(&file.file_name().to_string_lossy()).unwrap();
        copy.write_all_at(&bytes, 0).unwrap();
        copy.sync_data().unwrap();
    }
    disk.sync_dir().unwrap();
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
        ledgers,
        cursors: vec![CursorEntry {
            name: cursor.as_str().into(),
            id: 1,
        }],
        next_cursor_id: 2,
        topic_id: 0,
        journal: None,
    };
    meta.put("topic", None, &record.encode()).unwrap();
    (disk, cursor)
}
