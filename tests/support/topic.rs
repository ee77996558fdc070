//! Shared setup for the managed-ledger and cursor tests: topics on an in-memory disk or on each
//! storage backend in turn, appends, cursor options.

use std::collections::BTreeSet;
use std::sync::Arc;

use ackstore::MemStorage;
use ackstore::Position;
use ackstore::{AppendMeta, CursorOptions, InitialPosition, LedgerConfig, ManagedLedger};

/// A config whose data ledgers hold `per_ledger` entries.
pub fn config(per_ledger: u64) -> LedgerConfig {
    LedgerConfig {
        max_entries_per_ledger: per_ledger,
        ..LedgerConfig::default()
    }
}

/// A topic on a fresh in-memory disk.
pub fn mem_topic(per_ledger: u64) -> (MemStorage, ManagedLedger) {
    let disk = MemStorage::new();
    let topic = ManagedLedger::open_with_storage(Arc::new(disk.clone()), config(per_ledger))
        .expect("open topic");
    (disk, topic)
}

/// Reopens the topic kept on `disk` (after the previous owner closed or lost it).
pub fn reopen(disk: &MemStorage, per_ledger: u64) -> ManagedLedger {
    ManagedLedger::open_with_storage(Arc::new(disk.clone()), config(per_ledger)).expect("reopen")
}

/// Appends `n` single-message entries with timestamps 1000, 1001, ..., then syncs them (what a
/// broker does before it dispatches: readers see synced entries only); returns their positions.
pub fn append_n(topic: &ManagedLedger, n: u64) -> Vec<Position> {
    let positions = append_unsynced(topic, n);
    topic.sync().expect("sync");
    positions
}

/// Appends `n` single-message entries as [`append_n`], without syncing them (readers do not see
/// them until a sync).
pub fn append_unsynced(topic: &ManagedLedger, n: u64) -> Vec<Position> {
    (0..n)
        .map(|i| {
            topic
                .append_with(
                    format!("m{i}").as_bytes(),
                    AppendMeta {
                        num_messages: 1,
                        timestamp: 1000 + i,
                    },
                )
                .expect("append")
        })
        .collect()
}

/// Options for a cursor at `initial_position`.
pub fn at(initial_position: InitialPosition, inclusive: bool) -> CursorOptions {
    CursorOptions {
        initial_position,
        inclusive,
    }
}

/// Options for a cursor at the earliest entry, exclusive: it reads from the first entry.
pub fn earliest() -> CursorOptions {
    at(InitialPosition::Earliest, false)
}

/// Positions of what `read_entries(max)` returns.
pub fn read_positions(cursor: &ackstore::Cursor, max: usize) -> Vec<Position> {
    cursor
        .read_entries(max)
        .expect("read")
        .into_iter()
        .map(|e| e.position)
        .collect()
}

/// Runs `test` on a fresh topic whose data ledgers hold `per_ledger` entries, once on each
/// storage backend: the in-memory disk, then real files in a temporary directory. The backend
/// is named on stderr before each run, so a failure says which one it was.
pub fn on_each_backend(per_ledger: u64, mut test: impl FnMut(ManagedLedger)) {
    eprintln!("backend: in-memory disk");
    test(mem_topic(per_ledger).1);
    let dir = tempfile::tempdir().expect("temporary directory");
    eprintln!("backend: real files in {}", dir.path().display());
    test(ManagedLedger::open(dir.path(), config(per_ledger)).expect("open topic on files"));
    #[cfg(feature = "rados")]
    {
        let storage = super::rados::fresh_storage("topic");
        eprintln!("backend: RADOS {}", ackstore::Storage::location(&storage));
        test(
            ManagedLedger::open_with_storage(Arc::new(storage), config(per_ledger))
                .expect("open topic on RADOS"),
        );
    }
}

/// A store in `storage` (opened with `config`) holding topic `t` with `entries` synced entries
/// and a cursor `sub` that acknowledged the first one and flushed, closed cleanly; returns the
/// entries' positions.
pub fn store_topic_with_a_flushed_cursor(
    storage: Arc<dyn ackstore::Storage>,
    config: ackstore::StoreConfig,
    entries: usize,
) -> Vec<Position> {
    let store = ackstore::Store::open_with_storage(storage, config).expect("open");
    let topic = store.topic("t").expect("topic");
    let ps: Vec<Position> = (0..entries)
        .map(|_| topic.append(b"p").expect("append"))
        .collect();
    topic.sync().expect("sync");
    let cursor = topic
        .open_cursor("sub", CursorOptions::default())
        .expect("cursor");
    cursor.ack(ps[0]).expect("ack");
    cursor.flush().expect("flush");
    drop((cursor, topic));
    store.close().expect("close");
    ps
}

/// The cursor [`topic_with_an_acker`] creates first, which acknowledges and flushes.
pub const ACKER: &str = "acker";

/// A closed topic of `host` on a fresh disk, its data ledgers of `per_ledger` entries: 5
/// entries appended, [`ACKER`] with the first 3 acknowledged and flushed, then the cursors
/// `names`, created at `Earliest`. Returns the disk and the acker's mark-delete.
pub fn topic_with_an_acker(
    host: Host,
    per_ledger: u64,
    names: impl IntoIterator<Item = String>,
) -> (MemStorage, Position) {
    let disk = MemStorage::new();
    let topic = reopen_hosted(host, &disk, per_ledger);
    let entries = append_n(&topic, 5);
    let acker = topic.open_cursor(ACKER, earliest()).expect("acker");
    for &p in &entries[..3] {
        acker.ack(p).expect("ack");
    }
    acker.flush().expect("flush");
    for name in names {
        topic.open_cursor(&name, earliest()).expect("create");
    }
    topic.close().expect("close");
    (disk, entries[2])
}

/// A store config whose topics' data ledgers hold `per_ledger` entries (no flush interval: only
/// the test's own flushes write cursor state).
pub fn store_config(per_ledger: u64) -> ackstore::StoreConfig {
    ackstore::StoreConfig {
        ledger: config(per_ledger),
        ..ackstore::StoreConfig::default()
    }
}

/// Who hosts a topic: the topic alone in its directory (`ManagedLedger::open`), or a store
/// (`Store::topic`), whose cursors persist through the store's shared journal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Host {
    /// A topic opened alone.
    Alone,
    /// Topic `t` of a store.
    Store,
}

/// A topic and, on a store, the store that hosts it (kept open as long as the topic is used).
pub struct Hosted {
    /// The store, for [`Host::Store`].
    pub store: Option<ackstore::Store>,
    /// The topic.
    pub topic: Arc<ManagedLedger>,
}

impl std::ops::Deref for Hosted {
    type Target = ManagedLedger;
    fn deref(&self) -> &ManagedLedger {
        &self.topic
    }
}

impl Hosted {
    /// Closes the topic (and the store hosting it), which persists every open cursor's state.
    pub fn close(self) -> ackstore::Result<()> {
        match self.store {
            Some(store) => {
                drop(self.topic);
                store.close()
            }
            None => self.topic.close(),
        }
    }
}

/// Opens the topic that `host` keeps on `storage`, its data ledgers (and cursors) set by
/// `config`; a store's flush ticks run only on request.
pub fn open_hosted(
    host: Host,
    storage: Arc<dyn ackstore::Storage>,
    config: &LedgerConfig,
) -> ackstore::Result<Hosted> {
    match host {
        Host::Alone => Ok(Hosted {
            store: None,
            topic: Arc::new(ManagedLedger::open_with_storage(storage, config.clone())?),
        }),
        Host::Store => {
            let store = ackstore::Store::open_with_storage(
                storage,
                ackstore::StoreConfig {
                    ledger: config.clone(),
                    flusher_threads: 0,
                    ..ackstore::StoreConfig::default()
                },
            )?;
            let topic = store.topic("t")?;
            Ok(Hosted {
                store: Some(store),
                topic,
            })
        }
    }
}

/// [`open_hosted`] with the cursors' state flushed in the background every
/// `config.cursor.flush_interval`: by each cursor's own thread on a topic alone, by a pool of
/// `flusher_threads` threads on a store.
pub fn open_hosted_flushed(
    host: Host,
    storage: Arc<dyn ackstore::Storage>,
    config: &LedgerConfig,
    flusher_threads: usize,
) -> ackstore::Result<Hosted> {
    if host == Host::Alone {
        return open_hosted(host, storage, config);
    }
    let store = ackstore::Store::open_with_storage(
        storage,
        ackstore::StoreConfig {
            ledger: config.clone(),
            flusher_threads,
            ..ackstore::StoreConfig::default()
        },
    )?;
    let topic = store.topic("t")?;
    Ok(Hosted {
        store: Some(store),
        topic,
    })
}

/// Runs `test` once with each host of a topic (alone, then in a store), naming the host on
/// stderr first, so a failure says which one it was.
pub fn on_each_host(mut test: impl FnMut(Host)) {
    for host in [Host::Alone, Host::Store] {
        eprintln!("host: {host:?}");
        test(host);
    }
}

/// A fresh in-memory disk and the topic `host` keeps on it, whose data ledgers hold
/// `per_ledger` entries.
pub fn mem_hosted(host: Host, per_ledger: u64) -> (MemStorage, Hosted) {
    let disk = MemStorage::new();
    let topic = reopen_hosted(host, &disk, per_ledger);
    (disk, topic)
}

/// Opens the topic `host` keeps on `disk` (after the previous owner closed or lost it).
pub fn reopen_hosted(host: Host, disk: &MemStorage, per_ledger: u64) -> Hosted {
    open_hosted(host, Arc::new(disk.clone()), &config(per_ledger)).expect("open topic")
}

/// [`on_each_backend`], then the same on a store's topic: on the in-memory disk and on real
/// files (the store stays open while the test runs).
pub fn on_each_backend_and_host(per_ledger: u64, mut test: impl FnMut(Arc<ManagedLedger>)) {
    on_each_backend(per_ledger, |topic| test(Arc::new(topic)));
    eprintln!("backend: a store on the in-memory disk");
    let (_disk, hosted) = mem_hosted(Host::Store, per_ledger);
    test(hosted.topic.clone());
    let dir = tempfile::tempdir().expect("temporary directory");
    eprintln!("backend: a store on real files in {}", dir.path().display());
    let files = ackstore::FileStorage::open(dir.path(), true).expect("storage");
    let hosted = open_hosted(Host::Store, Arc::new(files), &config(per_ledger));
    let hosted = hosted.expect("open store topic");
    test(hosted.topic.clone());
}

/// The storage of the topic `host` keeps on `disk` (on a store, its topic `t`'s).
pub fn topic_storage(host: Host, disk: &MemStorage) -> Arc<dyn ackstore::Storage> {
    let storage: Arc<dyn ackstore::Storage> = Arc::new(disk.clone());
    match host {
        Host::Alone => storage,
        Host::Store => {
            let catalog = ackstore::internals::store::read_catalog(storage.clone())
                .expect("catalog")
                .expect("a catalog");
            let id = catalog.topics.iter().find(|t| t.name == "t").expect("t").id;
            ackstore::internals::store::topic_storage(&storage, &catalog, id)
                .expect("the topic's storage")
        }
    }
}

/// The bytes of file `file` of `storage`.
pub fn file_bytes(storage: &Arc<dyn ackstore::Storage>, file: &str) -> Vec<u8> {
    let f = storage.open(file).expect("open");
    let mut buf = vec![0; usize::try_from(f.size().expect("size")).expect("size")];
    f.read_exact_at(&mut buf, 0).expect("read");
    buf
}

/// Damages the chunk records `first` and `sibling` (files of the topic `host` keeps on `disk`,
/// whose data ledgers hold `per_ledger` entries), each on a copy of the disk's durable image:
/// each deleted, cut in half, zeroed or bit-flipped, each replaced by the other, and `first`
/// replaced by `older_first`, the bytes an older copy of it held. Each time the topic's open
/// is refused as `Corrupted` naming that chunk record, and `verify` reports damage naming the
/// same.
pub fn chunk_damage_is_refused(
    host: Host,
    disk: &MemStorage,
    (first, sibling): (&str, &str),
    older_first: Vec<u8>,
    per_ledger: u64,
) {
    let storage = topic_storage(host, disk);
    let mut targets: Vec<(&str, &str, Option<Vec<u8>>)> = vec![
        ("sibling", first, Some(file_bytes(&storage, sibling))),
        ("sibling", sibling, Some(file_bytes(&storage, first))),
        ("older copy", first, Some(older_first)),
    ];
    for file in [first, sibling] {
        let whole = file_bytes(&storage, file);
        let mut flipped = whole.clone();
        flipped[whole.len() / 2] ^= 0x10;
        targets.extend([
            ("deleted", file, None),
            ("truncated", file, Some(whole[..whole.len() / 2].to_vec())),
            ("zeroed", file, Some(vec![0; whole.len()])),
            ("bit flip", file, Some(flipped)),
        ]);
    }
    for (what, file, damage) in targets {
        let image = disk.durable_image();
        let damaged = topic_storage(host, &image);
        match damage {
            None => damaged.remove(file).expect("remove"),
            Some(b) => {
                let f = damaged.open(file).expect("open");
                f.set_len(0).expect("cut");
                f.write_all_at(&b, 0).expect("write");
                f.sync_data().expect("sync");
            }
        }
        let record = file.split_once('.').expect("a record file").0;
        let storage: Arc<dyn ackstore::Storage> = Arc::new(image.clone());
        let report = ackstore::check::verify(&storage).expect("verify");
        assert!(
            !report.is_sound() && report.findings.iter().any(|f| f.file.contains(record)),
            "{host:?} {what} {file}: {report}"
        );
        let opened = open_hosted(host, storage, &config(per_ledger));
        assert!(
            matches!(&opened, Err(ackstore::Error::Corrupted {
                place: ackstore::CorruptionPlace::Record(r), ..
            }) if r == record),
            "{host:?} {what} {file}: {:?}",
            opened.err()
        );
    }
}

/// The topic record of the topic `host` keeps on `disk`: its format version and the record
/// (its tables' pins and tails, no chunk read).
pub fn record_of(
    host: Host,
    disk: &MemStorage,
) -> (u16, ackstore::internals::format::meta::TopicRecord) {
    use ackstore::internals::meta::MetaStore;
    let meta = ackstore::internals::meta::FileMetaStore::new(topic_storage(host, disk));
    let (_, bytes) = meta.get("topic").expect("get").expect("a topic record");
    let version = u16::from_le_bytes([bytes[10], bytes[11]]);
    let record = ackstore::internals::format::meta::TopicRecord::decode(&bytes).expect("decode");
    (version, record)
}

/// The files of the chunk records named `prefix...` of the topic `host` keeps on `disk`.
pub fn chunk_files(host: Host, disk: &MemStorage, prefix: &str) -> Vec<String> {
    topic_storage(host, disk).list_prefix(prefix).expect("list")
}

/// The topic record of the closed topic `host` keeps on `disk` rewritten as an earlier build
/// wrote it: every cursor and every ledger inline (version 1, 2 or 3), its chunk records
/// removed.
pub fn as_earlier_version(host: Host, disk: &MemStorage) {
    use ackstore::internals::format::meta::{
        CURSOR_CHUNK_PREFIX, ChunkEntry, ChunkTable, LEDGER_CHUNK_PREFIX, TOPIC_STORE_VERSION,
    };
    use ackstore::internals::meta::{FileMetaStore, MetaStore};
    fn inline<E: ChunkEntry>(meta: &FileMetaStore, table: &mut ChunkTable<E>) {
        let pinned: Vec<Option<String>> = table.pinned_records().collect();
        for (k, name) in pinned.iter().enumerate() {
            let name = name.as_deref().expect("no chunk emptied");
            let (_, bytes) = meta.get(name).expect("get").expect("chunk");
            table.add_chunk(k, &bytes).expect("chunk");
        }
        *table = table.iter().cloned().collect::<Vec<_>>().into();
    }
    let storage = topic_storage(host, disk);
    let meta = FileMetaStore::new(storage.clone());
    let (version, _) = meta.get("topic").expect("get").expect("a record");
    let (_, mut record) = record_of(host, disk);
    inline(&meta, &mut record.cursors);
    inline(&meta, &mut record.ledgers);
    let bytes = record.encode();
    assert!(u16::from_le_bytes([bytes[10], bytes[11]]) <= TOPIC_STORE_VERSION);
    meta.put("topic", Some(version), &bytes).expect("write");
    for prefix in [CURSOR_CHUNK_PREFIX, LEDGER_CHUNK_PREFIX] {
        for file in chunk_files(host, disk, prefix) {
            storage.remove(&file).expect("remove");
        }
    }
    storage.sync_dir().expect("sync dir");
}

/// A power cut at every storage step of `change`, made on the topic `host` keeps on a copy of
/// `template`, opened with `config` (the open is not cut): `check` gets every image a cut
/// leaves that it was not given before with the same answer, a description of the cut, and
/// whether the change had answered `Ok` when the power went off. The cut disks come from one
/// recorded run ([`super::crash::cut_everywhere_recorded_after`]); at one cut point in
/// `rerun_every` (seeded by `ACKSTORE_CRASH_SEED`) the change runs again with the power cut
/// there, so what it answers once the disk fails is checked too. The change must succeed
/// without a cut.
pub fn cut_change_everywhere(
    (host, template, config): (Host, &MemStorage, &LedgerConfig),
    rerun_every: usize,
    change: impl Fn(&Hosted) -> ackstore::Result<()>,
    mut check: impl FnMut(&Arc<dyn ackstore::Storage>, &str, bool),
) {
    use super::crash::{Points, Seen, Shown, copy_into, cut_everywhere_recorded_after};
    let seed = super::workload::seed_from_env("ACKSTORE_CRASH_SEED");
    let mut seen = Seen::new();
    let clean = cut_everywhere_recorded_after(
        Points::one_in(rerun_every, seed),
        |disk, storage| {
            copy_into(template, disk);
            open_hosted(host, storage, config).expect("open topic")
        },
        |topic, answered: &Shown<bool>| {
            let done = change(&topic);
            answered.update(|a| *a = done.is_ok());
            done
        },
        |disk, cut, &answered| {
            let what = format!("{host:?} {cut:?} (ACKSTORE_CRASH_SEED={seed})");
            for image in super::crash::unseen_images(&mut seen, disk, cut, &answered) {
                check(&image, &what, answered);
            }
        },
    );
    clean.result.expect("the change without a cut");
}

/// `step` on the topic `host` keeps on a copy of `template` (opened with `config`), its `k`-th
/// storage operation failing with an I/O error, for every `k`: the step (run by `run`, which
/// keeps what the workload was told current from `told`) answers `Ok` or an I/O error, never
/// `Fenced`; the steps `after` from the same handle are never `Fenced` and succeed, and so does
/// the close, unless the failed operation was a sync or a write of a ledger (either may latch
/// the handle until the topic is reopened: `PreviousIo`); the durable image is sound by `verify`, and `holds` checks it against what the
/// workload was told. Reports every refused later step at the end.
pub fn later_steps_after_a_failed_operation<S: Clone, T: std::fmt::Debug>(
    (host, template, config): (Host, &MemStorage, &LedgerConfig),
    told: &S,
    (step, after): (&T, &[T]),
    run: impl Fn(&Hosted, &T, &super::crash::Shown<S>) -> ackstore::Result<()>,
    holds: impl Fn(&Arc<dyn ackstore::Storage>, &S, &str),
) {
    use super::crash::{Shown, copy_into};
    use super::tap::{FailOne, Tap};
    use std::sync::atomic::Ordering;
    let attempt = |k: u64| {
        let disk = MemStorage::new();
        copy_into(template, &disk);
        let hook = Arc::new(FailOne::default());
        let storage: Arc<dyn ackstore::Storage> =
            Arc::new(Tap::new(Arc::new(disk.clone()), hook.clone()));
        let topic = open_hosted(host, storage, config).expect("open");
        let told = Shown::new(told.clone());
        hook.arm(k);
        let first = run(&topic, step, &told);
        let failed = hook.failed.lock().expect("lock").clone();
        let ops = hook.seen.load(Ordering::SeqCst);
        hook.arm(0);
        (disk, topic, told, first, failed, ops)
    };
    let steps = {
        let (_, topic, _, first, _, ops) = attempt(0);
        first.expect("the step without a fault");
        drop(topic);
        ops
    };
    assert!(steps > 0);
    let mut missed = Vec::new();
    for k in 1..=steps {
        let (disk, topic, told, first, failed, _) = attempt(k);
        let what = format!("{host:?} {step:?}, operation {k} of {steps} failed ({failed:?})");
        assert!(
            matches!(
                first,
                Ok(()) | Err(ackstore::Error::Io { .. } | ackstore::Error::PreviousIo)
            ),
            "{what}: the step returned {first:?}"
        );
        let latches = failed.as_deref().is_some_and(|f| {
            f.starts_with("sync") || (f.starts_with("write") && f.ends_with(".log"))
        });
        for later in after {
            let outcome = run(&topic, later, &told);
            let fenced = matches!(outcome, Err(ackstore::Error::Fenced { .. }));
            if fenced || (!latches && outcome.is_err()) {
                missed.push(format!("{what}: {later:?} after it: {outcome:?}"));
            }
            if outcome.is_err() {
                // What a failed later step did is unknown too: it is checked no further.
                break;
            }
        }
        let closed = topic.close();
        if !latches && closed.is_err() {
            missed.push(format!("{what}: close: {closed:?}"));
        }
        let image: Arc<dyn ackstore::Storage> = Arc::new(disk.durable_image());
        let report = ackstore::check::verify(&image).expect("verify");
        assert!(report.is_sound(), "{what}: {report}");
        holds(&image, &told.get(), &what);
    }
    assert!(missed.is_empty(), "{}", missed.join("\n"));
}

/// A former owner and a new one on a copy of `template`: the former opens the topic `host`
/// keeps there (with `config`), then the lock is broken and `new_owner` claims it through a
/// storage that runs `former` (given the former's topic) right after its `n`-th storage
/// operation (after `new_owner` returns, when it made fewer). Returns the disk, the former's
/// handle (still open), what `new_owner` returned and what `former` did.
pub fn former_at_step_of_new_owner<N, F: Send + 'static>(
    (host, template, config): (Host, &MemStorage, &LedgerConfig),
    n: u64,
    former: impl FnOnce(&ManagedLedger) -> F + Send + 'static,
    new_owner: impl FnOnce(Arc<dyn ackstore::Storage>) -> N,
) -> (MemStorage, Hosted, N, F) {
    let disk = MemStorage::new();
    super::crash::copy_into(template, &disk);
    let owner = open_hosted(host, Arc::new(disk.clone()), config).expect("open");
    let hooked = super::takeover::Disk::new(Arc::new(disk.clone()));
    let slot = {
        let topic = owner.topic.clone();
        hooked.arm_takeover(n, move || former(&topic))
    };
    disk.break_lock();
    let made = new_owner(hooked.storage.clone());
    hooked.hook.run_if_pending();
    let did = slot.lock().expect("slot").take().expect("the former ran");
    (disk, owner, made, did)
}

/// Every entry of `topic` as text, read from its start by a non-durable cursor.
pub fn entries(topic: &ManagedLedger) -> Vec<String> {
    let cursor = topic
        .open_non_durable_cursor(
            InitialPosition::Earliest,
            ackstore::NonDurableOptions {
                inclusive: false,
                name: "check".into(),
            },
        )
        .expect("reader");
    let mut read = Vec::new();
    loop {
        let batch = cursor.read_entries(100).expect("read");
        if batch.is_empty() {
            return read;
        }
        read.extend(
            batch
                .into_iter()
                .map(|e| String::from_utf8_lossy(&e.payload).into_owned()),
        );
    }
}

/// Every message `c` reports acknowledged among `entries` (each with its number of messages;
/// an entry acknowledged whole as all its messages).
///
/// # Errors
/// The first error of `Cursor::is_batch_index_acked`.
pub fn acked_messages(
    c: &ackstore::Cursor,
    entries: impl IntoIterator<Item = (Position, u32)>,
) -> ackstore::Result<BTreeSet<(Position, u32)>> {
    let mut out = BTreeSet::new();
    for (pos, size) in entries {
        for i in 0..size {
            if c.is_batch_index_acked(pos, i)? {
                out.insert((pos, i));
            }
        }
    }
    Ok(out)
}
