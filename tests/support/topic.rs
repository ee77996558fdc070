//! Shared setup for the managed-ledger and cursor tests: topics on an in-memory disk or on each
//! storage backend in turn, appends, cursor options.

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
