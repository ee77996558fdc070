//! A store's cursors share their topic's settings and location label and their registry's name,
//! index a few partitions in a vector, and make their partial entries' recency cache at the
//! first resident partition: two topics with cursors of the same names, batch-index acks,
//! whole acks, `ack_many` and cumulative acks spread over many ledgers (past the index's vector)
//! under a budget that evicts partial entries, cursors deleted and recreated under the same
//! name, reads from a moved read position, resets (`seek`), topics closed and reopened, and
//! store restarts, each cursor checked against a model of its acknowledged messages.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;

use ackstore::{
    AppendMeta, Cursor, CursorConfig, CursorOptions, InitialPosition, LedgerConfig, ManagedLedger,
    Position, Store, StoreConfig,
};

/// Acknowledged messages: (entry, index).
type Messages = BTreeSet<(Position, u32)>;

const TOPICS: [&str; 2] = ["persistent://t/ns/a", "persistent://t/ns/b"];
const NAMES: [&str; 3] = ["sub-0", "sub-1", "sub-2"];
const ENTRIES: usize = 120;
const BATCH: u32 = 4;

fn config() -> StoreConfig {
    StoreConfig {
        ledger: LedgerConfig {
            max_entries_per_ledger: 4,
            cursor: CursorConfig {
                lru_capacity_bytes: 256,
                ..CursorConfig::default()
            },
            ..LedgerConfig::default()
        },
        flusher_threads: 0,
        ..StoreConfig::default()
    }
}

fn earliest() -> CursorOptions {
    CursorOptions {
        initial_position: InitialPosition::Earliest,
        inclusive: false,
    }
}

/// A small deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33) as usize % n
    }
}

/// Every message `c` reports acknowledged.
fn observed(c: &Cursor, entries: &[Position]) -> Messages {
    let mut out = Messages::new();
    for &pos in entries {
        for i in 0..BATCH {
            if c.is_batch_index_acked(pos, i).expect("is acked") {
                out.insert((pos, i));
            }
        }
    }
    out
}

/// What four reads from `from` deliver: the entries not acknowledged whole, each with its
/// acknowledged messages (`None` for none).
fn delivered(
    model: &Messages,
    entries: &[Position],
    from: Position,
) -> Vec<(Position, Option<Vec<u32>>)> {
    entries
        .iter()
        .filter(|p| **p >= from)
        .map(|&p| {
            let acked: Vec<u32> = (0..BATCH).filter(|i| model.contains(&(p, *i))).collect();
            (p, acked)
        })
        .filter(|(_, acked)| acked.len() < BATCH as usize)
        .take(4)
        .map(|(p, acked)| (p, (!acked.is_empty()).then_some(acked)))
        .collect()
}

fn whole(model: &mut Messages, pos: Position) {
    model.extend((0..BATCH).map(|i| (pos, i)));
}

struct World {
    store: Store,
    topics: Vec<Arc<ManagedLedger>>,
    cursors: BTreeMap<(usize, usize), Cursor>,
    models: BTreeMap<(usize, usize), Messages>,
    entries: Vec<Vec<Position>>,
    /// The most partial-entry evictions and ack set partitions any cursor reached.
    reached: (u64, usize),
}

impl World {
    fn open(dir: &Path) -> (Store, Vec<Arc<ManagedLedger>>) {
        let store = Store::open(dir, config()).expect("open the store");
        let topics = TOPICS
            .iter()
            .map(|t| store.topic(t).expect("topic"))
            .collect();
        (store, topics)
    }

    fn new(dir: &Path) -> Self {
        let (store, topics) = Self::open(dir);
        let entries = topics
            .iter()
            .map(|t| {
                let e = (0..ENTRIES)
                    .map(|i| {
                        let meta = AppendMeta {
                            num_messages: BATCH,
                            timestamp: 1000 + i as u64,
                        };
                        t.append_with(b"batch", meta).expect("append")
                    })
                    .collect();
                t.sync().expect("sync");
                e
            })
            .collect();
        let mut w = Self {
            store,
            topics,
            cursors: BTreeMap::new(),
            models: BTreeMap::new(),
            entries,
            reached: (0, 0),
        };
        w.open_cursors();
        for key in w.cursors.keys() {
            w.models.insert(*key, Messages::new());
        }
        w
    }

    fn open_cursors(&mut self) {
        for (t, topic) in self.topics.iter().enumerate() {
            for (n, name) in NAMES.iter().enumerate() {
                let c = topic.open_cursor(name, earliest()).expect("cursor");
                self.cursors.insert((t, n), c);
            }
        }
    }

    fn restart(&mut self, dir: &Path) {
        self.cursors.clear();
        for t in &self.topics {
            t.close().expect("close a topic");
        }
        self.store.close().expect("close the store");
        let (store, topics) = Self::open(dir);
        self.store = store;
        self.topics = topics;
        self.open_cursors();
    }

    fn check(&mut self, seed: u64, step: usize) {
        for (key, c) in &self.cursors {
            let stats = c.stats().expect("stats");
            self.reached.0 = self.reached.0.max(stats.batch_evictions);
            self.reached.1 = self.reached.1.max(stats.ackset.partitions);
            let got = observed(c, &self.entries[key.0]);
            let want = &self.models[key];
            let missing: Vec<_> = want.difference(&got).collect();
            let extra: Vec<_> = got.difference(want).collect();
            assert!(
                missing.is_empty() && extra.is_empty(),
                "seed {seed} step {step}: topic {} cursor {}: acked messages missing {missing:?}, \
                 never acked {extra:?}",
                TOPICS[key.0],
                NAMES[key.1]
            );
        }
    }

    /// One operation on a random cursor.
    fn step(&mut self, rng: &mut Rng, dir: &Path) {
        let key = (rng.below(TOPICS.len()), rng.below(NAMES.len()));
        let entries = &self.entries[key.0];
        let pos = entries[rng.below(ENTRIES)];
        let c = &self.cursors[&key];
        let model = self.models.get_mut(&key).expect("model");
        match rng.below(21) {
            0..=9 => {
                let i = rng.below(BATCH as usize) as u32;
                c.ack_batch_index(pos, i, BATCH).expect("ack a message");
                model.insert((pos, i));
            }
            10..=11 => {
                c.ack(pos).expect("ack");
                whole(model, pos);
            }
            12..=13 => {
                let many: Vec<Position> = (0..3).map(|_| entries[rng.below(ENTRIES)]).collect();
                c.ack_many(&many).expect("ack many");
                for p in many {
                    whole(model, p);
                }
            }
            14 => {
                let upto = entries[rng.below(ENTRIES / 8)];
                let mark = c.mark_delete_position().expect("mark-delete");
                if mark.is_some_and(|m| m >= upto) {
                    return;
                }
                c.ack_cumulative(upto).expect("ack cumulative");
                for &p in entries.iter().filter(|p| **p <= upto) {
                    whole(model, p);
                }
            }
            15 => c.flush().expect("flush"),
            16 => {
                c.seek_read_position(pos).expect("seek the read position");
                let read = c.read_entries(4).expect("read");
                let got: Vec<_> = read
                    .iter()
                    .map(|e| {
                        let acked = e.acked_batch_indexes.as_ref();
                        (e.position, acked.map(|b| b.iter().collect::<Vec<u32>>()))
                    })
                    .collect();
                assert_eq!(got, delivered(model, entries, pos), "a read after a seek");
            }
            17 => {
                self.cursors.remove(&key);
                self.topics[key.0]
                    .delete_cursor(NAMES[key.1])
                    .expect("delete");
                let c = self.topics[key.0]
                    .open_cursor(NAMES[key.1], earliest())
                    .expect("recreate");
                self.cursors.insert(key, c);
                model.clear();
            }
            18 => {
                for c in self.cursors.values() {
                    c.flush().expect("flush");
                }
                self.restart(dir);
            }
            19 => {
                // A reset: every entry before `to` acknowledged, none from it on.
                let to = entries[rng.below(ENTRIES / 4)];
                c.seek(to).expect("seek");
                model.clear();
                for &p in entries.iter().filter(|p| **p < to) {
                    whole(model, p);
                }
            }
            _ => self.reopen_topic(key.0),
        }
    }

    /// Closes topic `t` (its cursors flushed first) and opens it again in the same store.
    fn reopen_topic(&mut self, t: usize) {
        for n in 0..NAMES.len() {
            let c = self.cursors.remove(&(t, n)).expect("cursor");
            c.flush().expect("flush");
        }
        self.topics[t].close().expect("close the topic");
        self.topics[t] = self.store.topic(TOPICS[t]).expect("reopen the topic");
        for (n, name) in NAMES.iter().enumerate() {
            let c = self.topics[t]
                .open_cursor(name, earliest())
                .expect("cursor");
            self.cursors.insert((t, n), c);
        }
    }
}

fn run(seed: u64) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut w = World::new(dir.path());
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    for step in 0..500 {
        w.step(&mut rng, dir.path());
        w.check(seed, step);
    }
    for c in w.cursors.values() {
        c.flush().expect("flush");
    }
    w.restart(dir.path());
    w.check(seed, usize::MAX);
    let (evictions, partitions) = w.reached;
    assert!(evictions > 0, "seed {seed}: no partial entry was evicted");
    assert!(
        partitions > 8,
        "seed {seed}: at most {partitions} partitions"
    );
}

#[test]
fn cursors_of_the_same_names_on_two_topics_keep_their_own_acks() {
    for seed in 1..=6 {
        run(seed);
    }
}

/// Per-cursor options stay the cursor's: a cursor opened at the latest entry on one topic and
/// one of the same name at the earliest on another read from where each was opened.
#[test]
fn a_cursor_s_initial_position_is_its_own() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, topics) = World::open(dir.path());
    let mut firsts = Vec::new();
    for t in &topics {
        let a = t.append(b"one").expect("append");
        t.append(b"two").expect("append");
        t.sync().expect("sync");
        firsts.push(a);
    }
    let latest = CursorOptions {
        initial_position: InitialPosition::Latest,
        inclusive: false,
    };
    let b = topics[1].open_cursor("sub", latest).expect("latest");
    let a = topics[0].open_cursor("sub", earliest()).expect("earliest");
    let read = a.read_entries(10).expect("read");
    assert_eq!(read.len(), 2, "the earliest cursor reads both entries");
    assert_eq!(read[0].position, firsts[0]);
    assert!(b.read_entries(10).expect("read").is_empty());
    drop((a, b));
    for t in &topics {
        t.close().expect("close a topic");
    }
    store.close().expect("close the store");
}

/// Polls `cond` until it holds; panics after a minute (a hang guard, not a timing check).
fn until(mut cond: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !cond() {
        assert!(
            std::time::Instant::now() < deadline,
            "the background flusher never got there"
        );
        std::thread::yield_now();
    }
}

/// A background flush's failure is kept by the cursor it failed for and returned once, by its
/// next flush; another cursor of the topic never sees it (its flush meets the journal's latch,
/// [`ackstore::Error::PreviousIo`], as every write does until the topic is reopened), and after
/// a reopen each cursor holds what it persisted.
#[test]
fn a_background_flush_error_goes_to_its_own_cursor_once() {
    let disk = ackstore::MemStorage::new();
    let config = LedgerConfig {
        max_entries_per_ledger: 10,
        cursor: CursorConfig {
            flush_interval: Some(std::time::Duration::from_millis(2)),
            ..CursorConfig::default()
        },
        ..LedgerConfig::default()
    };
    let topic = ManagedLedger::open_with_storage(Arc::new(disk.clone()), config.clone())
        .expect("open the topic");
    let p: Vec<Position> = (0..30u32)
        .map(|i| topic.append(&i.to_le_bytes()).expect("append"))
        .collect();
    topic.sync().expect("sync");
    let a = topic.open_cursor("a", earliest()).expect("cursor a");
    let b = topic.open_cursor("b", earliest()).expect("cursor b");
    b.ack(p[1]).expect("ack on b");
    a.flush().expect("flush a");
    b.flush().expect("flush b");
    disk.fail_after(Some(0));
    a.ack(p[13]).expect("ack on a");
    until(|| a.stats().expect("stats").background_error.is_some());
    assert_eq!(b.stats().expect("stats").background_error, None, "b's");
    disk.fail_after(None);
    let on_b = b.flush().expect_err("the journal is latched");
    assert!(matches!(on_b, ackstore::Error::PreviousIo), "b: {on_b}");
    let on_a = a.flush().expect_err("a's kept error");
    assert!(matches!(on_a, ackstore::Error::Io { .. }), "a: {on_a}");
    assert_eq!(a.stats().expect("stats").background_error, None, "once");
    let again = a.flush().expect_err("the journal is latched");
    assert!(
        matches!(again, ackstore::Error::PreviousIo),
        "a again: {again}"
    );
    drop((a, b));
    let _ = topic.close();
    drop(topic);
    let topic = ManagedLedger::open_with_storage(Arc::new(disk), config).expect("reopen");
    let a = topic.open_cursor("a", earliest()).expect("cursor a");
    let b = topic.open_cursor("b", earliest()).expect("cursor b");
    assert!(!a.is_acked(p[13]).expect("a") && !a.is_acked(p[1]).expect("a"));
    assert!(b.is_acked(p[1]).expect("b") && !b.is_acked(p[13]).expect("b"));
    drop((a, b));
    topic.close().expect("close the topic");
}

/// Counts every counter by its key; gauges and histograms are dropped.
#[derive(Default)]
struct Counters(std::sync::Mutex<BTreeMap<String, Arc<std::sync::atomic::AtomicU64>>>);

impl Counters {
    /// The value of every series of counter `name`, by its labels.
    fn series(&self, name: &str) -> BTreeMap<Vec<String>, u64> {
        let all = self.0.lock().expect("counters");
        all.iter()
            .filter_map(|(k, v)| {
                let (n, labels) = k.split_once('|')?;
                (n == name).then(|| {
                    let labels = labels.split('|').map(str::to_owned).collect();
                    (labels, v.load(std::sync::atomic::Ordering::SeqCst))
                })
            })
            .collect()
    }
}

impl metrics::Recorder for Counters {
    fn describe_counter(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }
    fn describe_gauge(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }
    fn describe_histogram(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }
    fn register_counter(&self, key: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Counter {
        let mut labels: Vec<String> = key
            .labels()
            .map(|l| format!("{}={}", l.key(), l.value()))
            .collect();
        labels.sort();
        let name = format!("{}|{}", key.name(), labels.join("|"));
        let mut all = self.0.lock().expect("counters");
        metrics::Counter::from_arc(Arc::clone(all.entry(name).or_default()))
    }
    fn register_gauge(&self, _: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Gauge {
        metrics::Gauge::noop()
    }
    fn register_histogram(
        &self,
        _: &metrics::Key,
        _: &metrics::Metadata<'_>,
    ) -> metrics::Histogram {
        metrics::Histogram::noop()
    }
}

/// Two topics of a store with a cursor of the same name each: each cursor's flushes are
/// counted under its own topic's label, and a cursor deleted and recreated under the same
/// name counts its flushes without touching the other topic's series.
#[test]
fn flush_counts_go_to_each_topic_s_own_cursor_series() {
    let recorder = Counters::default();
    metrics::with_local_recorder(&recorder, || {
        let dir = tempfile::tempdir().expect("tempdir");
        let (store, topics) = World::open(dir.path());
        let mut cursors = Vec::new();
        for t in &topics {
            let p: Vec<Position> = (0..8u32)
                .map(|i| t.append(&i.to_le_bytes()).expect("append"))
                .collect();
            t.sync().expect("sync");
            cursors.push((t.open_cursor("sub", earliest()).expect("cursor"), p));
        }
        for (n, (c, p)) in cursors.iter().enumerate() {
            // Topic a's cursor flushes three changes, b's one.
            for i in 0..(3 - 2 * n) {
                c.ack(p[2 * i + 1]).expect("ack");
                c.flush().expect("flush");
            }
        }
        let series = recorder.series(ackstore::observe::FLUSHES);
        let mut counts: Vec<u64> = series.values().copied().collect();
        counts.sort_unstable();
        assert_eq!(counts, [1, 3], "{series:?}");
        let topic_labels: BTreeSet<&String> = series.keys().map(|l| &l[1]).collect();
        assert_eq!(topic_labels.len(), 2, "{series:?}");
        let (a, p) = cursors.remove(0);
        drop(a);
        topics[0].delete_cursor("sub").expect("delete");
        let a = topics[0].open_cursor("sub", earliest()).expect("recreate");
        a.ack(p[0]).expect("ack");
        a.flush().expect("flush");
        let after = recorder.series(ackstore::observe::FLUSHES);
        let b_label = series.iter().find(|(_, v)| **v == 1).expect("b's").0;
        assert_eq!(after[b_label], 1, "b's series untouched: {after:?}");
        assert_eq!(after.values().sum::<u64>(), 5, "{after:?}");
        let a_label = series.iter().find(|(_, v)| **v == 3).expect("a's").0;
        assert_eq!(after[a_label], 3, "the former cursor's series: {after:?}");
        assert_eq!(
            after.len(),
            3,
            "the recreated cursor's own series: {after:?}"
        );
        drop((a, cursors));
        for t in &topics {
            t.close().expect("close a topic");
        }
        store.close().expect("close the store");
    });
}
