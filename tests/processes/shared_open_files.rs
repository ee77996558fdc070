//! Storages of one process sharing its descriptor cache (`OpenFiles::process`) under a soft
//! limit of open files far below their files: topics opened alone, stores and a group's member
//! stores, each driven against a model of what its cursors flushed while the others' files
//! evict its descriptors.
//!
//! Each test re-runs this binary as a child at a low soft limit (`open_files_limit::run`). The
//! child appends, acknowledges and flushes, deletes cursors and creates them again under the
//! same names, closes and reopens a store (or a whole group), removes a topic alone's
//! directory and creates the topic again at the same path, from one thread or four; after
//! every step the descriptors under its directory are at most the process's bound plus the
//! lock files held (and, while other threads run, the descriptors the cache's module documents
//! outside it). Once every storage is closed the child reopens each one and compares every
//! cursor with its model; the parent then runs `verify` on every directory, which must find
//! nothing damaged. A topic alone damaged file by file and opened again at one path beside a
//! live store: `verify` compared with the open and the reads.
//!
//! Failed syncs and removed names across storages: a closing sync that fails as another
//! storage's files evict a written descriptor is latched into that file's next syncs (a raw
//! file's, and a topic alone's `sync`); a handle of a file whose name a second storage on the
//! same directory removed and created again never reaches the new file once the cache evicted
//! its descriptor.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Barrier};

use ackstore::storage::{FileStorage, OpenFiles, StorageFile};
use ackstore::{
    Cursor, GroupConfig, ManagedLedger, Position, Storage, Store, StoreConfig, StoreGroup,
};

use super::open_files_limit::run;
use crate::support;
use crate::support::workload::Rng;

/// Cursors of every topic, deleted and created again in turn.
const CURSORS: [&str; 3] = ["c0", "c1", "c2"];

/// A store's config: data ledgers of a few entries, so each topic has several ledger files, no
/// flusher (the test's flushes are the only file operations besides its own).
fn store_config() -> StoreConfig {
    support::config::store(3, 4096)
}

fn ledger_config() -> ackstore::LedgerConfig {
    support::topic::config(3)
}

/// One topic's model: its entries (position and payload) in order, and each cursor's
/// acknowledged entries (indices into `entries`) as of its last flush.
struct Model {
    /// Distinguishes the payloads of this topic and of each of its incarnations.
    tag: String,
    entries: Vec<(Position, Vec<u8>)>,
    acked: BTreeMap<String, BTreeSet<usize>>,
}

impl Model {
    fn new(tag: String) -> Self {
        Self {
            tag,
            entries: Vec::new(),
            acked: CURSORS
                .iter()
                .map(|c| ((*c).to_owned(), BTreeSet::new()))
                .collect(),
        }
    }

    /// The payloads cursor `name` has not acknowledged, in order: what a reopened cursor reads.
    fn unacked(&self, name: &str) -> Vec<Vec<u8>> {
        let acked = &self.acked[name];
        self.entries
            .iter()
            .enumerate()
            .filter(|(i, _)| !acked.contains(i))
            .map(|(_, (_, p))| p.clone())
            .collect()
    }
}

/// A topic open (alone or in a store) with a handle on each cursor of its model.
struct Live {
    topic: Arc<ManagedLedger>,
    cursors: BTreeMap<String, Cursor>,
}

impl Live {
    fn open(topic: Arc<ManagedLedger>, model: &Model, what: &str) -> Self {
        let cursors = model
            .acked
            .keys()
            .map(|name| {
                let cursor = topic
                    .open_cursor(name, support::topic::earliest())
                    .unwrap_or_else(|e| panic!("{what}: open cursor {name}: {e}"));
                (name.clone(), cursor)
            })
            .collect();
        Self { topic, cursors }
    }

    /// Closes the cursors' handles, then the topic.
    fn close(self, what: &str) {
        for (name, cursor) in self.cursors {
            cursor
                .close()
                .unwrap_or_else(|e| panic!("{what}: close cursor {name}: {e}"));
        }
        self.topic
            .close()
            .unwrap_or_else(|e| panic!("{what}: close: {e}"));
    }

    /// Appends one to four entries and syncs them, then has every cursor acknowledge up to two
    /// of the entries it has not and flush; the model follows each answer.
    fn step(&self, model: &mut Model, rng: &mut Rng, what: &str) {
        for _ in 0..=rng.below(3) {
            let payload = format!("{}/{}", model.tag, model.entries.len()).into_bytes();
            let pos = self
                .topic
                .append(&payload)
                .unwrap_or_else(|e| panic!("{what}: append: {e}"));
            model.entries.push((pos, payload));
        }
        self.topic
            .sync()
            .unwrap_or_else(|e| panic!("{what}: sync: {e}"));
        for (name, cursor) in &self.cursors {
            let acked = model.acked.get_mut(name).expect("a cursor of the model");
            for _ in 0..2 {
                let unacked: Vec<usize> = (0..model.entries.len())
                    .filter(|i| !acked.contains(i))
                    .collect();
                if unacked.is_empty() {
                    break;
                }
                let i = unacked[rng.index(unacked.len())];
                cursor
                    .ack(model.entries[i].0)
                    .unwrap_or_else(|e| panic!("{what}: cursor {name} ack {i}: {e}"));
                acked.insert(i);
            }
            cursor
                .flush()
                .unwrap_or_else(|e| panic!("{what}: cursor {name} flush: {e}"));
        }
    }

    /// Deletes cursor `name` and creates it again under the same name: it starts with nothing
    /// acknowledged.
    fn recreate_cursor(&mut self, model: &mut Model, name: &str, what: &str) {
        let cursor = self.cursors.remove(name).expect("an open cursor");
        cursor
            .close()
            .unwrap_or_else(|e| panic!("{what}: close cursor {name}: {e}"));
        self.topic
            .delete_cursor(name)
            .unwrap_or_else(|e| panic!("{what}: delete cursor {name}: {e}"));
        let cursor = self
            .topic
            .open_cursor(name, support::topic::earliest())
            .unwrap_or_else(|e| panic!("{what}: create cursor {name} again: {e}"));
        cursor
            .flush()
            .unwrap_or_else(|e| panic!("{what}: flush cursor {name} created again: {e}"));
        model.acked.insert(name.to_owned(), BTreeSet::new());
        self.cursors.insert(name.to_owned(), cursor);
    }
}

/// A reopened `topic` holds the model: the same cursors, each reading exactly the entries it
/// has not acknowledged.
fn check_topic(topic: &ManagedLedger, model: &Model, what: &str) {
    let mut names = topic.cursor_names();
    names.sort();
    let expected: Vec<String> = model.acked.keys().cloned().collect();
    assert_eq!(names, expected, "{what}: cursors");
    for name in &expected {
        let cursor = topic
            .open_cursor(name, support::topic::earliest())
            .unwrap_or_else(|e| panic!("{what}: reopen cursor {name}: {e}"));
        let read: Vec<Vec<u8>> = cursor
            .read_entries(10_000)
            .unwrap_or_else(|e| panic!("{what}: cursor {name} read: {e}"))
            .into_iter()
            .map(|e| e.payload)
            .collect();
        assert_eq!(read, model.unacked(name), "{what}: cursor {name}");
    }
}

/// `check_topic` of every topic of the store in `dir`, reopened.
fn check_store(dir: &Path, models: &BTreeMap<String, Model>, what: &str) {
    let store = Store::open(dir, store_config()).unwrap_or_else(|e| panic!("{what}: reopen: {e}"));
    let mut names = store.topic_names();
    names.sort();
    assert_eq!(
        names,
        models.keys().cloned().collect::<Vec<_>>(),
        "{what}: topics"
    );
    for (name, model) in models {
        let topic = store
            .topic(name)
            .unwrap_or_else(|e| panic!("{what}: reopen topic {name}: {e}"));
        check_topic(&topic, model, &format!("{what} topic {name}"));
    }
    store
        .close()
        .unwrap_or_else(|e| panic!("{what}: close: {e}"));
}

/// `check_topic` of the topic alone in `dir`, reopened.
fn check_alone(dir: &Path, model: &Model, what: &str) {
    let topic =
        ManagedLedger::open(dir, ledger_config()).unwrap_or_else(|e| panic!("{what}: reopen: {e}"));
    check_topic(&topic, model, what);
    topic
        .close()
        .unwrap_or_else(|e| panic!("{what}: close: {e}"));
}

/// `check_store` of every store `store-{s}` under `dir` by its models, and `check_alone` of
/// every topic alone `alone-{t}`.
fn check_all(dir: &Path, stores: &[BTreeMap<String, Model>], alone: &[Model]) {
    for (s, models) in stores.iter().enumerate() {
        check_store(&store_dir(dir, s), models, &format!("store {s}"));
    }
    for (t, model) in alone.iter().enumerate() {
        check_alone(&alone_dir(dir, t), model, &format!("topic {t} alone"));
    }
}

/// `verify` finds nothing damaged in any store or topic directory under `dir`: the parent's
/// part, on what the child left, and the child's own between steps, its storages open.
fn verify_all(dir: &Path) {
    let mut checked = 0;
    for entry in std::fs::read_dir(dir).expect("list the directory") {
        let path = entry.expect("an entry").path();
        let storage: Arc<dyn Storage> =
            Arc::new(FileStorage::open(&path, false).expect("the directory opens"));
        let report = ackstore::check::verify(&storage).expect("verify runs");
        assert!(report.is_sound(), "{}: {report}", path.display());
        checked += 1;
    }
    assert!(checked > 0, "the child left no directory");
}

/// At most `bound` plus `outside` descriptors point under `dir`.
fn assert_bounded(dir: &Path, bound: usize, outside: usize, after: &str) {
    let open = support::fds::open_under(dir);
    assert!(
        open <= bound + outside,
        "{open} descriptors under the directory after {after} (bound {bound} + {outside} outside \
         the cache)"
    );
}

fn alone_dir(dir: &Path, t: usize) -> PathBuf {
    dir.join(format!("alone-{t}"))
}

fn store_dir(dir: &Path, s: usize) -> PathBuf {
    dir.join(format!("store-{s}"))
}

fn topic_name(t: usize) -> String {
    format!("persistent://t/ns/shared-{t}")
}

const ALONE: usize = 6;
const STORE_TOPICS: usize = 8;
const ROUNDS: usize = 12;

/// A store's open topics by name, each with its model.
struct LiveStore {
    store: Store,
    topics: BTreeMap<String, Live>,
}

impl LiveStore {
    fn open(dir: &Path, models: &BTreeMap<String, Model>, what: &str) -> Self {
        let store =
            Store::open(dir, store_config()).unwrap_or_else(|e| panic!("{what}: open: {e}"));
        Self::adopt(store, models, what)
    }

    /// `store` with every topic of `models` open, and every cursor of each.
    fn adopt(store: Store, models: &BTreeMap<String, Model>, what: &str) -> Self {
        let topics = models
            .iter()
            .map(|(name, model)| {
                let topic = store
                    .topic(name)
                    .unwrap_or_else(|e| panic!("{what}: topic {name}: {e}"));
                let live = Live::open(topic, model, &format!("{what} topic {name}"));
                (name.clone(), live)
            })
            .collect();
        Self { store, topics }
    }

    fn close(self, what: &str) {
        for (name, live) in self.topics {
            live.close(&format!("{what} topic {name}"));
        }
        self.store
            .close()
            .unwrap_or_else(|e| panic!("{what}: close: {e}"));
    }
}

fn store_models(s: usize, topics: usize) -> BTreeMap<String, Model> {
    (0..topics)
        .map(|t| (topic_name(t), Model::new(format!("s{s}t{t}"))))
        .collect()
}

/// The child of [`topics_alone_and_stores_delete_and_recreate_under_one_low_limit`]: topics
/// alone and two stores in one thread. Every round steps every topic; deletes and creates again
/// one cursor of each topic alone and of one topic of each store; removes one topic alone's
/// directory and creates the topic again at the same path while the rest stay open; and closes
/// store 1 and reopens it, while the other storages' files keep evicting its descriptors; and
/// runs `verify` on every directory, all open.
fn child_one_thread(dir: &Path) {
    let bound = OpenFiles::process().limit();
    let mut rng = Rng::new(0x5a4e_d0f5);
    let mut alone_models: Vec<Model> = (0..ALONE).map(|t| Model::new(format!("a{t}.0"))).collect();
    let mut alone: Vec<Option<Live>> = (0..ALONE)
        .map(|t| {
            let topic = ManagedLedger::open(alone_dir(dir, t), ledger_config())
                .unwrap_or_else(|e| panic!("open topic {t} alone: {e}"));
            Some(Live::open(
                Arc::new(topic),
                &alone_models[t],
                &format!("topic {t} alone"),
            ))
        })
        .collect();
    let mut models: Vec<BTreeMap<String, Model>> =
        (0..2).map(|s| store_models(s, STORE_TOPICS)).collect();
    let mut stores: Vec<Option<LiveStore>> = (0..2)
        .map(|s| {
            Some(LiveStore::open(
                &store_dir(dir, s),
                &models[s],
                &format!("store {s}"),
            ))
        })
        .collect();
    // A lock file for each topic alone and each store, all open throughout but for a moment.
    let locks = ALONE + 2;
    assert_bounded(dir, bound, locks, "the opens");
    for round in 0..ROUNDS {
        for (t, live) in alone.iter().enumerate() {
            let what = format!("round {round} topic {t} alone");
            live.as_ref()
                .expect("open")
                .step(&mut alone_models[t], &mut rng, &what);
            assert_bounded(dir, bound, locks, &what);
        }
        for s in 0..2 {
            let live = stores[s].as_ref().expect("open");
            for (name, topic) in &live.topics {
                let what = format!("round {round} store {s} topic {name}");
                topic.step(models[s].get_mut(name).expect("modelled"), &mut rng, &what);
                assert_bounded(dir, bound, locks, &what);
            }
            let what = format!("round {round} store {s} flush all");
            live.store
                .flush_all()
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_bounded(dir, bound, locks, &what);
        }
        let cursor = CURSORS[round % CURSORS.len()];
        for (t, live) in alone.iter_mut().enumerate() {
            let what = format!("round {round} topic {t} alone cursor {cursor} again");
            live.as_mut()
                .expect("open")
                .recreate_cursor(&mut alone_models[t], cursor, &what);
            assert_bounded(dir, bound, locks, &what);
        }
        for s in 0..2 {
            let name = topic_name(round % STORE_TOPICS);
            let what = format!("round {round} store {s} topic {name} cursor {cursor} again");
            let live = stores[s].as_mut().expect("open");
            live.topics.get_mut(&name).expect("open").recreate_cursor(
                models[s].get_mut(&name).expect("modelled"),
                cursor,
                &what,
            );
            assert_bounded(dir, bound, locks, &what);
        }
        // A topic alone removed and created again at the same path.
        let t = round % ALONE;
        let what = format!("round {round} topic {t} alone removed and created again");
        alone[t].take().expect("open").close(&what);
        std::fs::remove_dir_all(alone_dir(dir, t)).expect("remove the topic's directory");
        alone_models[t] = Model::new(format!("a{t}.{}", round + 1));
        let topic = ManagedLedger::open(alone_dir(dir, t), ledger_config())
            .unwrap_or_else(|e| panic!("{what}: open: {e}"));
        alone[t] = Some(Live::open(Arc::new(topic), &alone_models[t], &what));
        alone[t]
            .as_ref()
            .expect("open")
            .step(&mut alone_models[t], &mut rng, &what);
        assert_bounded(dir, bound, locks, &what);
        // Store 1 closed and reopened, its cursors reopened from what they flushed.
        let what = format!("round {round} store 1 closed and reopened");
        stores[1].take().expect("open").close(&what);
        stores[1] = Some(LiveStore::open(&store_dir(dir, 1), &models[1], &what));
        assert_bounded(dir, bound, locks, &what);
        // Every directory checked while its storage is open and flushed: the check's reads
        // share the cache with the storages it checks, and evict their descriptors.
        let what = format!("round {round} verify");
        verify_all(dir);
        assert_bounded(dir, bound, locks, &what);
    }
    for (s, live) in stores.into_iter().enumerate() {
        live.expect("open").close(&format!("store {s}"));
    }
    for (t, live) in alone.into_iter().enumerate() {
        live.expect("open").close(&format!("topic {t} alone"));
    }
    check_all(dir, &models, &alone_models);
}

#[test]
fn topics_alone_and_stores_delete_and_recreate_under_one_low_limit() {
    run(
        module_path!(),
        "topics_alone_and_stores_delete_and_recreate_under_one_low_limit",
        32,
        child_one_thread,
        verify_all,
    );
}

const THREADS: usize = 4;
const THREAD_ROUNDS: usize = 16;
/// Topics alone of each of the two threads that keep topics alone.
const THREAD_ALONE: usize = 3;
/// Topics of each of the two threads' stores.
const THREAD_STORE_TOPICS: usize = 5;

/// What a thread of [`child_threads`] leaves: the models of its store's topics, or of its
/// topics alone by directory.
enum Left {
    Store(usize, BTreeMap<String, Model>),
    Alone(Vec<(PathBuf, Model)>),
}

/// Thread `s` (0 or 1) of [`child_threads`]: store `s`, every round each topic stepped, one
/// cursor deleted and created again, and (store 0) the store closed and reopened.
fn store_thread(dir: &Path, s: usize, start: &Barrier, bounded: &dyn Fn(&str)) -> Left {
    start.wait();
    let mut rng = Rng::new(0x7e57 + s as u64);
    let mut models = store_models(s, THREAD_STORE_TOPICS);
    let path = store_dir(dir, s);
    let mut live = LiveStore::open(&path, &models, &format!("store {s}"));
    for round in 0..THREAD_ROUNDS {
        for (name, topic) in &live.topics {
            let what = format!("round {round} store {s} topic {name}");
            topic.step(models.get_mut(name).expect("modelled"), &mut rng, &what);
            bounded(&what);
        }
        let name = topic_name(round % THREAD_STORE_TOPICS);
        let cursor = CURSORS[round % CURSORS.len()];
        let what = format!("round {round} store {s} topic {name} cursor {cursor} again");
        live.topics.get_mut(&name).expect("open").recreate_cursor(
            models.get_mut(&name).expect("modelled"),
            cursor,
            &what,
        );
        bounded(&what);
        if s == 0 {
            let what = format!("round {round} store {s} closed and reopened");
            live.close(&what);
            live = LiveStore::open(&path, &models, &what);
            bounded(&what);
        } else {
            let what = format!("round {round} store {s} flush all");
            live.store
                .flush_all()
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            bounded(&what);
        }
    }
    live.close(&format!("store {s}"));
    Left::Store(s, models)
}

/// Thread `a` (0 or 1) of [`child_threads`]: its topics alone, every round each stepped, one
/// cursor of each deleted and created again, and one topic's directory removed and the topic
/// created again at the same path.
fn alone_thread(dir: &Path, a: usize, start: &Barrier, bounded: &dyn Fn(&str)) -> Left {
    start.wait();
    let mut rng = Rng::new(0xa10e + a as u64);
    let paths: Vec<PathBuf> = (0..THREAD_ALONE)
        .map(|t| alone_dir(dir, a * THREAD_ALONE + t))
        .collect();
    let open = |t: usize, model: &Model, what: &str| {
        let topic = ManagedLedger::open(&paths[t], ledger_config())
            .unwrap_or_else(|e| panic!("{what}: open: {e}"));
        Live::open(Arc::new(topic), model, what)
    };
    let mut models: Vec<Model> = (0..THREAD_ALONE)
        .map(|t| Model::new(format!("thread {a} a{t}.0")))
        .collect();
    let mut live: Vec<Option<Live>> = (0..THREAD_ALONE)
        .map(|t| Some(open(t, &models[t], &format!("thread {a} topic {t} alone"))))
        .collect();
    for round in 0..THREAD_ROUNDS {
        let cursor = CURSORS[round % CURSORS.len()];
        for t in 0..THREAD_ALONE {
            let what = format!("round {round} thread {a} topic {t} alone");
            let topic = live[t].as_mut().expect("open");
            topic.step(&mut models[t], &mut rng, &what);
            bounded(&what);
            let what = format!("{what} cursor {cursor} again");
            topic.recreate_cursor(&mut models[t], cursor, &what);
            bounded(&what);
        }
        let t = round % THREAD_ALONE;
        let what = format!("round {round} thread {a} topic {t} alone removed and created again");
        live[t].take().expect("open").close(&what);
        std::fs::remove_dir_all(&paths[t]).expect("remove the topic's directory");
        models[t] = Model::new(format!("thread {a} a{t}.{}", round + 1));
        live[t] = Some(open(t, &models[t], &what));
        bounded(&what);
    }
    for (t, live) in live.into_iter().enumerate() {
        live.expect("open")
            .close(&format!("thread {a} topic {t} alone"));
    }
    Left::Alone(paths.into_iter().zip(models).collect())
}

/// The child of [`four_threads_each_on_its_own_storage_share_the_process_bound`]: two threads
/// each on a store of its own (one closing and reopening it every round) and two each on topics
/// alone of its own (one topic's directory removed and the topic created again every round),
/// started together (once only: a thread that fails must not leave the others waiting). After every step of any thread the descriptors under `dir`
/// are at most the process's bound plus every lock file and, per thread, the three the cache's
/// module documents outside it (a directory's while a listing or a directory sync runs, two
/// inside a file operation), and two directories a removal of a topic's directory holds open.
fn child_threads(dir: &Path) {
    let bound = OpenFiles::process().limit();
    let locks = 2 + 2 * THREAD_ALONE;
    let outside = locks + THREADS * 3 + 2 * 2;
    let bounded = |what: &str| assert_bounded(dir, bound, outside, what);
    let start = Barrier::new(THREADS);
    let left: Vec<Left> = std::thread::scope(|scope| {
        let threads: Vec<_> = (0..THREADS)
            .map(|i| {
                let (start, bounded) = (&start, &bounded);
                scope.spawn(move || {
                    if i < 2 {
                        store_thread(dir, i, start, bounded)
                    } else {
                        alone_thread(dir, i - 2, start, bounded)
                    }
                })
            })
            .collect();
        threads
            .into_iter()
            .map(|t| t.join().expect("a thread panicked"))
            .collect()
    });
    for left in left {
        match left {
            Left::Store(s, models) => {
                check_store(&store_dir(dir, s), &models, &format!("store {s}"))
            }
            Left::Alone(topics) => {
                for (path, model) in topics {
                    check_alone(&path, &model, &path.display().to_string());
                }
            }
        }
    }
}

#[test]
fn four_threads_each_on_its_own_storage_share_the_process_bound() {
    run(
        module_path!(),
        "four_threads_each_on_its_own_storage_share_the_process_bound",
        48,
        child_threads,
        verify_all,
    );
}

/// Files `n` of storage `s` created, written and synced, their handles returned: while they
/// live each keeps its entry in the process's cache, so their uses evict the least recently
/// used descriptors of every storage sharing it.
fn churn(s: &FileStorage, round: usize, n: usize) -> Vec<Arc<dyn StorageFile>> {
    (0..n)
        .map(|i| {
            let f = s
                .create(&format!("churn-{round}-{i}"))
                .expect("create a churn file");
            f.write_all_at(b"churn", 0).expect("write a churn file");
            f.sync_data().expect("sync a churn file");
            f
        })
        .collect()
}

/// The child of [`a_handle_whose_name_another_storage_removed_never_reaches_the_new_file`]:
/// storages on the process's cache, at a soft limit of 32 (a bound of 16). A handle of file `f`
/// of a storage on directory `x`, its descriptor evicted by a third storage's files; a second
/// storage on `x` removes `f` and creates it again: the old handle never reads, writes,
/// truncates or syncs the new file (ext4 and xfs give the new file the old one's inode, so
/// only the mark the removal leaves on every live handle of the name, across the storages of
/// the cache, tells them apart). Then a file written and not synced, whose descriptor the
/// third storage's files evict while closing syncs fail: its next syncs fail.
fn child_removed_name(dir: &Path) {
    let bound = OpenFiles::process().limit();
    let x = dir.join("x");
    let other = FileStorage::open(dir.join("other"), true).expect("open the other storage");
    let first = FileStorage::open(&x, true).expect("open x");
    let old = first.create("f").expect("create f");
    old.write_all_at(b"first", 0).expect("write f");
    old.sync_data().expect("sync f");
    let _kept = churn(&other, 0, 2 * bound);
    assert_bounded(dir, bound, 0, "the first churn");
    let second = FileStorage::open(&x, false).expect("open x a second time");
    second.remove("f").expect("remove f");
    let new = second.create("f").expect("create f again");
    new.write_all_at(b"SECOND", 0).expect("write the new f");
    new.sync_data().expect("sync the new f");
    let _kept_too = churn(&other, 1, 2 * bound);
    assert_bounded(dir, bound, 0, "the second churn");
    let mut buf = [0; 5];
    let read = old.read_exact_at(&mut buf, 0);
    assert!(
        read.is_err(),
        "a handle of the removed file read {:?} from the file created again under its name",
        String::from_utf8_lossy(&buf)
    );
    assert!(old.write_all_at(b"xx", 0).is_err(), "the old handle wrote");
    assert!(old.set_len(1).is_err(), "the old handle truncated");
    assert!(old.sync_data().is_err(), "the old handle synced");
    assert_eq!(std::fs::read(x.join("f")).expect("read f"), b"SECOND");
    let mut buf = [0; 6];
    new.read_exact_at(&mut buf, 0).expect("read the new f");
    assert_eq!(&buf, b"SECOND");

    // A written file evicted by `other`'s files while closing syncs fail.
    let unsynced = second.create("unsynced").expect("create");
    unsynced.write_all_at(b"unsynced", 0).expect("write");
    let _evicting = evict_failing_closing_syncs(&other, 2 * bound);
    assert_bounded(dir, bound, 0, "the evicting files");
    let mut buf = [0; 8];
    unsynced.read_exact_at(&mut buf, 0).expect("read back");
    assert_eq!(&buf, b"unsynced");
    assert!(
        unsynced.sync_data().is_err(),
        "a sync after the failed closing sync answered Ok"
    );
    assert!(
        unsynced.sync_data().is_err(),
        "a second sync after the failed closing sync answered Ok"
    );
}

/// `n` files of `other` created (and returned, so that they keep their places in the cache)
/// while the syncs that close written descriptors fail, for every storage of the process's
/// cache: the written descriptors they evict latch the failure into their files' next syncs.
/// Never written, their own closes do not sync.
fn evict_failing_closing_syncs(other: &FileStorage, n: usize) -> Vec<Arc<dyn StorageFile>> {
    other.fail_closing_syncs(true);
    let evicting = (0..n)
        .map(|i| {
            other
                .create(&format!("evict-{i}"))
                .expect("create an evicting file")
        })
        .collect();
    other.fail_closing_syncs(false);
    evicting
}

/// Nothing for the parent to check: the child's assertions are the test.
fn nothing(_: &Path) {}

#[test]
fn a_handle_whose_name_another_storage_removed_never_reaches_the_new_file() {
    run(
        module_path!(),
        "a_handle_whose_name_another_storage_removed_never_reaches_the_new_file",
        32,
        child_removed_name,
        nothing,
    );
}

const GROUP_ROUNDS: usize = 8;

/// A group sharing the process's cache (no limit of its own, no flusher threads).
fn group() -> StoreGroup {
    StoreGroup::new(&GroupConfig {
        flusher_threads: 0,
        ack_memory_bytes: None,
        open_files: None,
    })
}

/// The child of [`a_group_a_store_and_topics_alone_share_the_process_bound`]: a group of two
/// member stores (`store-0`, `store-1`), a store of its own (`store-2`) and topics alone, all
/// on the process's cache at a soft limit of 32. Every round steps every topic, deletes and
/// creates again a cursor of a member's topic, closes member 1 and opens it again through the
/// group, and every other round closes the whole group and opens a new one with both members;
/// after every step the descriptors are within the bound plus the lock files.
fn child_group(dir: &Path) {
    let bound = OpenFiles::process().limit();
    let mut rng = Rng::new(0x6e09);
    let mut models: Vec<BTreeMap<String, Model>> =
        (0..3).map(|s| store_models(s, STORE_TOPICS / 2)).collect();
    let mut group_handle = group();
    let open_member =
        |group: &StoreGroup, s: usize, models: &BTreeMap<String, Model>, what: &str| {
            let store = group
                .open(store_dir(dir, s), store_config())
                .unwrap_or_else(|e| panic!("{what}: open member {s}: {e}"));
            LiveStore::adopt(store, models, what)
        };
    let mut stores: Vec<Option<LiveStore>> = (0..2)
        .map(|s| {
            Some(open_member(
                &group_handle,
                s,
                &models[s],
                &format!("member {s}"),
            ))
        })
        .collect();
    stores.push(Some(LiveStore::open(
        &store_dir(dir, 2),
        &models[2],
        "store 2",
    )));
    let mut alone_models: Vec<Model> = (0..3).map(|t| Model::new(format!("g{t}"))).collect();
    let alone: Vec<Live> = (0..3)
        .map(|t| {
            let topic = ManagedLedger::open(alone_dir(dir, t), ledger_config())
                .unwrap_or_else(|e| panic!("open topic {t} alone: {e}"));
            Live::open(
                Arc::new(topic),
                &alone_models[t],
                &format!("topic {t} alone"),
            )
        })
        .collect();
    let locks = 3 + 3;
    assert_bounded(dir, bound, locks, "the opens");
    for round in 0..GROUP_ROUNDS {
        for (t, live) in alone.iter().enumerate() {
            let what = format!("round {round} topic {t} alone");
            live.step(&mut alone_models[t], &mut rng, &what);
            assert_bounded(dir, bound, locks, &what);
        }
        for (s, live) in stores.iter().enumerate() {
            let live = live.as_ref().expect("open");
            for (name, topic) in &live.topics {
                let what = format!("round {round} store {s} topic {name}");
                topic.step(models[s].get_mut(name).expect("modelled"), &mut rng, &what);
                assert_bounded(dir, bound, locks, &what);
            }
        }
        let name = topic_name(round % (STORE_TOPICS / 2));
        let cursor = CURSORS[round % CURSORS.len()];
        let what = format!("round {round} member 0 topic {name} cursor {cursor} again");
        stores[0]
            .as_mut()
            .expect("open")
            .topics
            .get_mut(&name)
            .expect("open")
            .recreate_cursor(models[0].get_mut(&name).expect("modelled"), cursor, &what);
        assert_bounded(dir, bound, locks, &what);
        let what = format!("round {round} member 1 closed and opened again");
        stores[1].take().expect("open").close(&what);
        stores[1] = Some(open_member(&group_handle, 1, &models[1], &what));
        assert_bounded(dir, bound, locks, &what);
        if round % 2 == 1 {
            let what = format!("round {round} group closed and opened again");
            for member in &mut stores[..2] {
                member.take().expect("open").close(&what);
            }
            group_handle
                .close()
                .unwrap_or_else(|e| panic!("{what}: close the group: {e}"));
            group_handle = group();
            for s in 0..2 {
                stores[s] = Some(open_member(&group_handle, s, &models[s], &what));
            }
            assert_bounded(dir, bound, locks, &what);
        }
    }
    for (s, live) in stores.into_iter().enumerate() {
        live.expect("open").close(&format!("store {s}"));
    }
    group_handle.close().expect("close the group");
    for (t, live) in alone.into_iter().enumerate() {
        live.close(&format!("topic {t} alone"));
    }
    check_all(dir, &models, &alone_models);
}

#[test]
fn a_group_a_store_and_topics_alone_share_the_process_bound() {
    run(
        module_path!(),
        "a_group_a_store_and_topics_alone_share_the_process_bound",
        32,
        child_group,
        verify_all,
    );
}

/// The child of [`a_failed_closing_sync_of_a_topic_alone_fails_its_next_sync`]: a topic alone
/// appends an entry its write buffer cannot hold (written to its data file) without syncing;
/// another storage of the process's cache (soft limit 32) creates
/// files that evict the topic's descriptors while closing syncs fail: the topic's next syncs
/// fail, never answering `Ok` for the appended entries, and the entries synced before are kept.
fn child_topic_latch(dir: &Path) {
    let bound = OpenFiles::process().limit();
    let topic = ManagedLedger::open(alone_dir(dir, 0), ledger_config()).expect("open the topic");
    support::topic::append_n(&topic, 2);
    // Larger than the topic's write buffer: written to the data file at once, not synced.
    topic
        .append(&vec![7; 80 * 1024])
        .expect("append an entry larger than the write buffer");
    let other = FileStorage::open(dir.join("other"), true).expect("open the other storage");
    let _evicting = evict_failing_closing_syncs(&other, 2 * bound);
    assert_bounded(dir, bound, 1, "the evicting files");
    assert!(
        topic.sync().is_err(),
        "the topic's sync answered Ok after its data file's closing sync failed"
    );
    assert!(
        topic.sync().is_err(),
        "a second sync of the topic answered Ok after its data file's closing sync failed"
    );
    // Its close may answer the same failure; the entries synced before it are kept.
    let _ = topic.close();
    drop(topic);
    let topic = ManagedLedger::open(alone_dir(dir, 0), ledger_config()).expect("reopen");
    let cursor = topic
        .open_cursor("after", support::topic::earliest())
        .expect("cursor");
    let read = cursor.read_entries(10).expect("read");
    assert!(
        read.len() >= 2 && read[0].payload == b"m0" && read[1].payload == b"m1",
        "the synced entries are not kept: {:?}",
        read.iter().map(|e| e.payload.len()).collect::<Vec<_>>()
    );
    topic.close().expect("close");
}

#[test]
fn a_failed_closing_sync_of_a_topic_alone_fails_its_next_sync() {
    run(
        module_path!(),
        "a_failed_closing_sync_of_a_topic_alone_fails_its_next_sync",
        32,
        child_topic_latch,
        nothing,
    );
}

/// The child of [`a_damaged_topic_alone_opened_again_at_one_path_beside_a_live_store`]: at a
/// soft limit of 32, a store stays open and steps between the cases while a topic alone, its
/// cursors flushed, is written again and again at one path, each time with one file damaged
/// (deleted, truncated, zeroed, a bit flipped, or an older copy of the same file), checked
/// with `verify` and opened. Bad bytes are errors, never panics; `verify` finds damage exactly
/// when the open, or a read of every entry after it (a sealed ledger opens without a scan),
/// fails; an open that succeeds never has a cursor acknowledge an entry its model did not
/// (every entry the topic still holds that the model leaves unacknowledged is read); the store
/// reopens as its model.
fn child_damaged_alone(dir: &Path) {
    let bound = OpenFiles::process().limit();
    let mut rng = Rng::new(0xda3a);
    let mut store_models = store_models(0, STORE_TOPICS / 2);
    let store = LiveStore::open(&store_dir(dir, 0), &store_models, "store 0");
    // The topic alone, an older image of it, and its final image.
    let source = dir.join("source");
    let mut model = Model::new("source".into());
    let live = Live::open(
        Arc::new(ManagedLedger::open(&source, ledger_config()).expect("open the source")),
        &model,
        "source",
    );
    for round in 0..3 {
        live.step(&mut model, &mut rng, &format!("source round {round}"));
    }
    let older = support::mutate::Tree::read(&source);
    for round in 3..6 {
        live.step(&mut model, &mut rng, &format!("source round {round}"));
    }
    live.close("source");
    let whole = support::mutate::Tree::read(&source);
    std::fs::remove_dir_all(&source).expect("remove the source");
    let mut cases: Vec<(String, PathBuf, Option<Vec<u8>>)> = Vec::new();
    for (file, bytes) in &whole.files {
        if file.as_os_str() == "LOCK" {
            continue;
        }
        for (what, damage) in support::mutate::damages(bytes) {
            cases.push((what, file.clone(), damage));
        }
        if let Some(old) = older.files.get(file).filter(|old| *old != bytes) {
            cases.push(("older copy".into(), file.clone(), Some(old.clone())));
        }
    }
    assert!(cases.len() > 20, "{} cases", cases.len());
    let case_dir = alone_dir(dir, 0);
    for (k, (what, file, damage)) in cases.iter().enumerate() {
        let what = format!("case {k}: {} {what}", file.display());
        std::fs::create_dir(&case_dir).expect("create the case's directory");
        whole.write(&case_dir);
        match damage {
            Some(bytes) => std::fs::write(case_dir.join(file), bytes).expect("damage"),
            None => std::fs::remove_file(case_dir.join(file)).expect("delete"),
        }
        let storage: Arc<dyn Storage> =
            Arc::new(FileStorage::open(&case_dir, false).expect("the directory opens"));
        let sound = ackstore::check::verify(&storage).map(|report| report.is_sound());
        drop(storage);
        // The data log opens on first use: its open is part of the topic's.
        let opened = ManagedLedger::open(&case_dir, ledger_config())
            .and_then(|topic| topic.log_stats().map(|_| topic));
        match opened {
            Ok(topic) => {
                // A sealed ledger opens without a scan: damage the open accepted must be found
                // when read, as an error.
                let probe = topic
                    .open_cursor("probe", support::topic::earliest())
                    .and_then(|probe| probe.read_entries(10_000));
                match probe {
                    Ok(entries) => {
                        // Bad bytes are never data: every entry read is one the topic was given.
                        for e in &entries {
                            assert!(
                                model.entries.iter().any(|(_, p)| *p == e.payload),
                                "{what}: read {:?}, which was never appended",
                                String::from_utf8_lossy(&e.payload)
                            );
                        }
                        // Verify may report damage the reads never meet (such as a sealed
                        // ledger's last byte); the entries read are then every one appended.
                        let read: Vec<&[u8]> = entries.iter().map(|e| &e.payload[..]).collect();
                        let appended: Vec<&[u8]> =
                            model.entries.iter().map(|(_, p)| &p[..]).collect();
                        assert!(
                            matches!(sound, Ok(true)) || read == appended,
                            "{what}: verify found damage, the open accepted it and read {} \
                             entries of the {} appended",
                            read.len(),
                            appended.len()
                        );
                        let held = entries.into_iter().map(|e| e.payload).collect();
                        check_not_more_acked(&topic, &model, &held, &what);
                    }
                    Err(e) => assert!(
                        !matches!(sound, Ok(true)),
                        "{what}: verify found nothing damaged, a read failed: {e}"
                    ),
                }
                let _ = topic.close();
            }
            Err(e) => assert!(
                !matches!(sound, Ok(true)),
                "{what}: verify found nothing damaged, the open failed: {e}"
            ),
        }
        assert_bounded(dir, bound, 1, &what);
        // The case's topic removed, the next written at the same path, while the store steps.
        std::fs::remove_dir_all(&case_dir).expect("remove the case");
        for (name, topic) in &store.topics {
            let step = format!("{what}: store topic {name}");
            topic.step(
                store_models.get_mut(name).expect("modelled"),
                &mut rng,
                &step,
            );
        }
        assert_bounded(dir, bound, 1, &what);
    }
    store.close("store 0");
    check_store(&store_dir(dir, 0), &store_models, "store 0");
}

/// Every cursor of `model` that `topic` (opened from a damaged image) has reads every entry
/// the topic still holds (`held`, the payloads a new cursor read) that the model leaves
/// unacknowledged: none is acknowledged beyond what its flushes said.
fn check_not_more_acked(
    topic: &ManagedLedger,
    model: &Model,
    held: &BTreeSet<Vec<u8>>,
    what: &str,
) {
    for name in topic.cursor_names() {
        let Some(acked) = model.acked.get(&name) else {
            continue;
        };
        let cursor = topic
            .open_cursor(&name, support::topic::earliest())
            .unwrap_or_else(|e| panic!("{what}: open cursor {name}: {e}"));
        let read = cursor
            .read_entries(10_000)
            .unwrap_or_else(|e| panic!("{what}: cursor {name} read what a new cursor read: {e}"));
        let read: BTreeSet<Vec<u8>> = read.into_iter().map(|e| e.payload).collect();
        for (i, (_, payload)) in model.entries.iter().enumerate() {
            assert!(
                acked.contains(&i) || !held.contains(payload) || read.contains(payload),
                "{what}: cursor {name} skips entry {i}, which it never acknowledged"
            );
        }
    }
}

#[test]
fn a_damaged_topic_alone_opened_again_at_one_path_beside_a_live_store() {
    run(
        module_path!(),
        "a_damaged_topic_alone_opened_again_at_one_path_beside_a_live_store",
        32,
        child_damaged_alone,
        verify_all,
    );
}
