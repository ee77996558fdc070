//! What a broker's operators see: the metrics published through the `metrics` facade agree with
//! the stats calls, a fence is counted and logged, and a cut single-entry snapshot logs a warning.
//!
//! Metrics go to a recorder installed for the test's thread only; log records go to one logger
//! for the whole binary and are told apart by the thread that emitted them.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::ThreadId;
use std::time::Instant;

use crate::support::config::store_without_flusher;
use ackstore::Position;
use ackstore::observe;
use ackstore::{CursorConfig, OverflowPolicy, PersistMode};
use ackstore::{CursorOptions, LedgerConfig, ManagedLedger};
use ackstore::{MemStorage, Store};
use metrics::{
    Counter, Gauge, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder, SharedString, Unit,
};

/// The values one histogram series recorded.
#[derive(Default)]
struct Samples(Mutex<Vec<f64>>);

impl HistogramFn for Samples {
    fn record(&self, value: f64) {
        self.0.lock().unwrap().push(value);
    }
}

/// Keeps every counter, gauge and histogram by name and labels.
#[derive(Default)]
struct TestRecorder {
    values: Mutex<HashMap<Key, Arc<AtomicU64>>>,
    histograms: Mutex<HashMap<Key, Arc<Samples>>>,
}

impl TestRecorder {
    fn cell(&self, key: &Key) -> Arc<AtomicU64> {
        Arc::clone(self.values.lock().unwrap().entry(key.clone()).or_default())
    }

    /// The sum of the counter `name` over every label set.
    fn counter(&self, name: &str) -> u64 {
        self.values
            .lock()
            .unwrap()
            .iter()
            .filter(|(k, _)| k.name() == name)
            .map(|(_, v)| v.load(Ordering::Relaxed))
            .sum()
    }

    /// The values recorded into the histogram `name`, by series (sorted `key=value` labels).
    fn histogram(&self, name: &str) -> Vec<(Vec<String>, Vec<f64>)> {
        self.histograms
            .lock()
            .unwrap()
            .iter()
            .filter(|(k, _)| k.name() == name)
            .map(|(k, v)| {
                let mut l: Vec<_> = k
                    .labels()
                    .map(|l| format!("{}={}", l.key(), l.value()))
                    .collect();
                l.sort();
                (l, v.0.lock().unwrap().clone())
            })
            .collect()
    }
}

impl Recorder for TestRecorder {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        Counter::from_arc(self.cell(key))
    }
    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::from_arc(self.cell(key))
    }
    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        let samples = Arc::clone(
            self.histograms
                .lock()
                .unwrap()
                .entry(key.clone())
                .or_default(),
        );
        Histogram::from_arc(samples)
    }
}

/// Every record logged in this binary, with the thread that logged it.
struct TestLogger;

static RECORDS: Mutex<Vec<(ThreadId, log::Level, String, String)>> = Mutex::new(Vec::new());

impl log::Log for TestLogger {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }
    fn log(&self, record: &log::Record<'_>) {
        RECORDS.lock().unwrap().push((
            std::thread::current().id(),
            record.level(),
            record.target().to_string(),
            record.args().to_string(),
        ));
    }
    fn flush(&self) {}
}

/// Installs the logger (the first test to get here does; the others find it installed).
fn install_logger() {
    static LOGGER: TestLogger = TestLogger;
    let _ = log::set_logger(&LOGGER);
    log::set_max_level(log::LevelFilter::Trace);
}

/// The records this thread logged at `level`.
fn logged(level: log::Level) -> Vec<String> {
    let me = std::thread::current().id();
    RECORDS
        .lock()
        .unwrap()
        .iter()
        .filter(|(t, l, target, _)| *t == me && *l == level && target == observe::LOG_TARGET)
        .map(|(_, _, _, message)| message.clone())
        .collect()
}

fn open(disk: &MemStorage, cursor: CursorConfig) -> ManagedLedger {
    let config = LedgerConfig {
        cursor,
        ..LedgerConfig::default()
    };
    ManagedLedger::open_with_storage(Arc::new(disk.clone()), config).unwrap()
}

/// Appends `n` entries and acks every other one (`n / 2` holes).
fn alternating_acks(topic: &ManagedLedger, cursor: &ackstore::Cursor, n: u64) {
    let positions: Vec<Position> = (0..n)
        .map(|i| topic.append(format!("m{i}").as_bytes()).unwrap())
        .collect();
    topic.sync().unwrap();
    for p in positions.iter().skip(1).step_by(2) {
        cursor.ack(*p).unwrap();
    }
}

#[test]
fn every_flush_that_returns_ok_records_how_long_it_took_on_a_topic_and_on_a_store() {
    let recorder = TestRecorder::default();
    metrics::with_local_recorder(&recorder, || {
        let disk = MemStorage::new();
        let topic = open(&disk, CursorConfig::default());
        let cursor = topic.open_cursor("sub", CursorOptions::default()).unwrap();
        let first = topic.append(b"m0").unwrap();
        alternating_acks(&topic, &cursor, 10);
        let started = Instant::now();
        cursor.flush().unwrap();
        // A flush with nothing new to write is still a call the broker waited for.
        cursor.flush().unwrap();
        let bound = started.elapsed().as_secs_f64();
        let series = recorder.histogram(observe::FLUSH_SECONDS);
        assert_eq!(series.len(), 1, "one series per cursor");
        let (labels, seconds) = &series[0];
        assert!(labels[0].starts_with("cursor=cursor-"), "{labels:?}");
        assert_eq!(labels[1], "topic=memory", "{labels:?}");
        assert_eq!(seconds.len(), 2, "{seconds:?}");
        assert!(
            seconds.iter().all(|&s| (0.0..=bound).contains(&s)),
            "{seconds:?}"
        );

        // A flush refused (a newer owner holds the topic) records nothing.
        disk.break_lock();
        let _new = open(&disk, CursorConfig::default());
        cursor.ack(first).unwrap();
        cursor.flush().unwrap_err();
        assert_eq!(recorder.histogram(observe::FLUSH_SECONDS)[0].1.len(), 2);

        // A store's cursor: the flush waits for the journal tick, and is recorded the same way.
        let store =
            Store::open_with_storage(Arc::new(MemStorage::new()), store_without_flusher()).unwrap();
        let topic = store.topic("orders").unwrap();
        let cursor = topic.open_cursor("sub", CursorOptions::default()).unwrap();
        alternating_acks(&topic, &cursor, 4);
        cursor.flush().unwrap();
        let series = recorder.histogram(observe::FLUSH_SECONDS);
        assert_eq!(series.len(), 2, "{series:?}");
        assert_eq!(series.iter().map(|(_, s)| s.len()).sum::<usize>(), 3);
    });
}

#[test]
fn every_store_open_that_succeeds_records_how_long_it_took() {
    let recorder = TestRecorder::default();
    metrics::with_local_recorder(&recorder, || {
        let disk = MemStorage::new();
        let started = Instant::now();
        let store =
            Store::open_with_storage(Arc::new(disk.clone()), store_without_flusher()).unwrap();
        let bound = started.elapsed().as_secs_f64();
        let series = recorder.histogram(observe::STORE_OPEN_SECONDS);
        assert_eq!(series.len(), 1, "one series per store: {series:?}");
        let (labels, seconds) = &series[0];
        assert_eq!(labels, &["topic=memory"], "{labels:?}");
        assert_eq!(seconds.len(), 1, "{seconds:?}");
        assert!((0.0..=bound).contains(&seconds[0]), "{seconds:?}");

        // An open refused (the store is held) records nothing; the next owner's open does.
        let refused = Store::open_with_storage(Arc::new(disk.clone()), store_without_flusher());
        assert!(
            matches!(refused, Err(ackstore::Error::Locked { .. })),
            "{refused:?}"
        );
        assert_eq!(
            recorder.histogram(observe::STORE_OPEN_SECONDS)[0].1.len(),
            1
        );
        store.close().unwrap();
        drop(store);
        Store::open_with_storage(Arc::new(disk), store_without_flusher()).unwrap();
        assert_eq!(
            recorder.histogram(observe::STORE_OPEN_SECONDS)[0].1.len(),
            2
        );
    });
}

#[test]
fn a_cut_single_entry_snapshot_logs_a_warning_and_counts_the_ranges() {
    let config = CursorConfig {
        persist_mode: PersistMode::SingleEntry,
        max_ranges_single_entry: 5,
        on_single_entry_overflow: OverflowPolicy::Warn,
        ..CursorConfig::default()
    };
    install_logger();
    let recorder = TestRecorder::default();
    let stats = metrics::with_local_recorder(&recorder, || {
        let disk = MemStorage::new();
        let topic = open(&disk, config);
        let cursor = topic.open_cursor("sub", CursorOptions::default()).unwrap();
        alternating_acks(&topic, &cursor, 40);
        cursor.flush().unwrap();
        cursor.stats().unwrap()
    });
    assert_eq!(stats.persist.overflows, 1);
    assert_eq!(stats.persist.ranges_cut, 15);
    assert_eq!(recorder.counter(observe::SNAPSHOT_RANGES_CUT), 15);
    let warnings = logged(log::Level::Warn);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].contains("20 ack ranges do not fit in one entry")
            && warnings[0].contains("15 ranges would be left out"),
        "{}",
        warnings[0]
    );
}

/// The value of the gauge `name` of the one series that has it.
fn gauge(recorder: &TestRecorder, name: &str) -> f64 {
    let values = recorder.values.lock().unwrap();
    let cells: Vec<_> = values.iter().filter(|(k, _)| k.name() == name).collect();
    assert_eq!(cells.len(), 1, "{name}");
    f64::from_bits(cells[0].1.load(Ordering::Relaxed))
}

#[test]
fn every_flush_seek_and_rewind_publishes_the_cursors_flush_count_and_ack_memory_as_its_stats_report_them()
 {
    let recorder = TestRecorder::default();
    metrics::with_local_recorder(&recorder, || {
        let disk = MemStorage::new();
        let topic = open(&disk, CursorConfig::default());
        let cursor = topic.open_cursor("sub", CursorOptions::default()).unwrap();
        for round in 1..=3u64 {
            alternating_acks(&topic, &cursor, 40 * round);
            cursor.flush().unwrap();
            let stats = cursor.stats().unwrap();
            assert_eq!(
                recorder.counter(observe::FLUSHES),
                stats.flushes,
                "round {round}"
            );
            assert_eq!(stats.flushes, round);
            #[allow(clippy::cast_precision_loss)]
            let (resident, budget, pinned) = (
                stats.ackset.resident_bytes as f64,
                stats.ackset.budget_bytes as f64,
                stats.ackset.pinned_partitions as f64,
            );
            assert!(resident > 0.0);
            assert_eq!(gauge(&recorder, observe::RESIDENT_BYTES), resident);
            assert_eq!(gauge(&recorder, observe::BUDGET_BYTES), budget);
            assert_eq!(gauge(&recorder, observe::PINNED_PARTITIONS), pinned);
        }
        // A seek and a rewind write the cursor's state as a flush does: the metric counts them
        // as both stats do, and publishes the ack memory of the state they leave (a seek clears
        // every ack).
        cursor.rewind().unwrap();
        cursor.seek(Position::new(0, 0)).unwrap();
        let stats = cursor.stats().unwrap();
        assert_eq!((stats.flushes, stats.persist.flushes), (5, 5));
        assert_eq!(recorder.counter(observe::FLUSHES), 5);
        #[allow(clippy::cast_precision_loss)]
        let resident = stats.ackset.resident_bytes as f64;
        assert_eq!(gauge(&recorder, observe::RESIDENT_BYTES), resident);
        assert_eq!(recorder.counter(observe::STORE_FAILURES), 0);
    });
}
