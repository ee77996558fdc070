//! What a broker's operators see: the names of the metrics the library publishes and the log
//! target of its events (the crate-internal helpers that record them live here too).
//!
//! Owns: the metric names (stable: a rename is a breaking change, listed in the README's
//! "Metrics" section), their labels, and the log target. The library only records, through the
//! `metrics` and `log` facades; the broker installs an exporter and a logger, and without them
//! every call here costs a few loads and does nothing.
//!
//! Invariant: a metric is recorded at the same place as the stats field it mirrors (in
//! `LogStats`, `PersistStats`, `AckSetStats`, `CursorStats::recovery_source`), with the same
//! amount, so the exported figures and the stats calls never disagree; a latency histogram
//! ([`FLUSH_SECONDS`], [`STORE_OPEN_SECONDS`]) is a distribution and mirrors no field. Labels are only the
//! topic's location and the cursor's record name (and, for recoveries, one of three sources):
//! one series per topic or per open cursor, never per ledger, entry or position.
//!
//! Log levels: `warn` for events that affect data (acks left out of a snapshot, a damaged
//! ledger, bytes cut from a tail, a fence, a failed background flush), `info` for recoveries
//! that fell back, `debug` for the rest.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// The log target of every event (`RUST_LOG=ackstore=debug` with `env_logger`, for instance).
pub const LOG_TARGET: &str = "ackstore";

/// Counter: successful flushes of a cursor's ack state (mirrors `PersistStats::flushes`).
/// Labels: `topic`, `cursor`.
pub const FLUSHES: &str = "ackstore_cursor_flushes_total";
/// Histogram, seconds: how long each `Cursor::flush` that returned `Ok` took, from the call to
/// its return (a store's cursor waits for the journal tick that syncs it; on RADOS, for the
/// cluster's acknowledgements). A distribution, so no stats field mirrors it. Labels: `topic`,
/// `cursor`.
pub const FLUSH_SECONDS: &str = "ackstore_cursor_flush_seconds";
/// Counter: ranges a single-entry snapshot left out under `OverflowPolicy::Warn` (mirrors
/// `PersistStats::ranges_cut`). Labels: `topic`, `cursor`.
pub const SNAPSHOT_RANGES_CUT: &str = "ackstore_cursor_snapshot_ranges_cut_total";
/// Gauge, bytes: the cursor's resident ack bytes at its last flush
/// (`AckSetStats::resident_bytes`). Labels: `topic`, `cursor`.
pub const RESIDENT_BYTES: &str = "ackstore_cursor_resident_ack_bytes";
/// Gauge, bytes: the cursor's resident ack budget (`AckSetStats::budget_bytes`). Labels:
/// `topic`, `cursor`.
pub const BUDGET_BYTES: &str = "ackstore_cursor_ack_budget_bytes";
/// Gauge: partitions kept resident past the budget because their store failed, at the
/// cursor's last flush (`AckSetStats::pinned_partitions`). Labels: `topic`, `cursor`.
pub const PINNED_PARTITIONS: &str = "ackstore_cursor_pinned_partitions";
/// Counter: evictions whose write to the cursor ledger failed (`AckSetStats::store_failures`,
/// published at the cursor's next flush). Labels: `topic`, `cursor`.
pub const STORE_FAILURES: &str = "ackstore_cursor_eviction_store_failures_total";
/// Counter: cursors recovered on open, by where their state came from. Labels: `topic`,
/// `cursor`, `source` (`marker`, `snapshot` or `record`).
pub const RECOVERIES: &str = "ackstore_cursor_recoveries_total";
/// Counter: background flushes that failed (the error is kept for the next `flush` or
/// `close`). Labels: `topic`, `cursor`.
pub const BACKGROUND_FLUSH_FAILURES: &str = "ackstore_cursor_background_flush_failures_total";
/// Counter: operations refused with `Error::Fenced` because a newer owner holds the topic.
/// Labels: `topic`, `scope` (`topic` or `cursor`).
pub const FENCES: &str = "ackstore_fences_total";
/// Counter: renewals of an ownership lease on RADOS that the cluster confirmed. Labels: `topic`
/// (the storage location, `rados:{pool}/{namespace}`).
pub const LEASE_RENEWALS: &str = "ackstore_lease_renewals_total";
/// Counter: renewals of an ownership lease on RADOS that failed without losing it (the cluster
/// out of reach; tried again a third of the lease later). Labels: `topic`.
pub const LEASE_RENEWAL_FAILURES: &str = "ackstore_lease_renewal_failures_total";
/// Counter: ownership leases on RADOS lost to another owner (`LeaseState::Lost`). Labels:
/// `topic`.
pub const LEASES_LOST: &str = "ackstore_leases_lost_total";
/// Counter: `fdatasync` calls on ledger files (mirrors `LogStats::fsyncs`). Labels: `topic`.
pub const FSYNCS: &str = "ackstore_log_fsyncs_total";
/// Histogram, seconds: how long each store open that succeeded took, from the call to its
/// return: the lock (with its wait, when the storage has one: `RadosStorage::with_lock_wait`),
/// the catalog's claim, the journal's scan and seal. On a fleet this is the part of a takeover
/// the library sees (the rest is the dead owner's lease running out). A distribution, so no
/// stats field mirrors it. Labels: `topic` (the store's storage location).
pub const STORE_OPEN_SECONDS: &str = "ackstore_store_open_seconds";

/// The labels of a cursor's series: its topic's location and its record name
/// (`cursor-{id}`, bounded and path-safe, unlike the client-chosen cursor name).
#[derive(Debug, Clone, Default)]
pub(crate) struct CursorLabels {
    /// The topic's storage location, shared by every cursor of the topic.
    pub topic: Arc<str>,
    /// The cursor record's name.
    pub cursor: String,
}

impl CursorLabels {
    pub(crate) fn new(topic: Arc<str>, cursor: &str) -> Self {
        CursorLabels {
            topic,
            cursor: cursor.to_string(),
        }
    }

    /// Adds `amount` to the counter `name` of this cursor.
    pub(crate) fn count(&self, name: &'static str, amount: u64) {
        if amount > 0 {
            metrics::counter!(name, "topic" => self.topic.clone(), "cursor" => self.cursor.clone())
                .increment(amount);
        }
    }

    /// Registers this cursor's flush series once: a flush then updates them without building
    /// a key (two label strings cloned per call) for each. Handles registered before a
    /// recorder is installed stay no-ops, as `metrics` documents for every handle: a broker
    /// installs its recorder before it opens topics.
    pub(crate) fn flush_series(&self) -> FlushSeries {
        let labels = [
            (
                "topic",
                metrics::SharedString::from(Arc::clone(&self.topic)),
            ),
            ("cursor", metrics::SharedString::from(self.cursor.clone())),
        ];
        FlushSeries {
            flushes: metrics::counter!(FLUSHES, &labels),
            resident_bytes: metrics::gauge!(RESIDENT_BYTES, &labels),
            budget_bytes: metrics::gauge!(BUDGET_BYTES, &labels),
            pinned_partitions: metrics::gauge!(PINNED_PARTITIONS, &labels),
            store_failures: metrics::counter!(STORE_FAILURES, &labels),
        }
    }

    /// Records `took` into the histogram `name` of this cursor, in seconds.
    pub(crate) fn time(&self, name: &'static str, took: std::time::Duration) {
        metrics::histogram!(name, "topic" => self.topic.clone(), "cursor" => self.cursor.clone())
            .record(took.as_secs_f64());
    }

    /// Counts a recovery from `source` and logs it: `info` when it fell back (to a snapshot,
    /// or to the record's mark-delete) or passed over rejected state, `debug` otherwise.
    pub(crate) fn recovered(&self, source: &'static str, detail: &str, fell_back: bool) {
        metrics::counter!(RECOVERIES, "topic" => self.topic.clone(),
            "cursor" => self.cursor.clone(), "source" => source)
        .increment(1);
        let level = if fell_back {
            ::log::Level::Info
        } else {
            ::log::Level::Debug
        };
        ::log::log!(target: LOG_TARGET, level, "{}: cursor `{}` recovered from {source}{detail}",
            self.topic, self.cursor);
    }
}

/// A cursor's series that every flush updates ([`CursorLabels::flush_series`]).
pub(crate) struct FlushSeries {
    flushes: metrics::Counter,
    resident_bytes: metrics::Gauge,
    budget_bytes: metrics::Gauge,
    pinned_partitions: metrics::Gauge,
    store_failures: metrics::Counter,
}

impl FlushSeries {
    /// One flush: the ack set's resident and budget bytes and pinned partitions as they are
    /// now, and the eviction store failures it gained since the last flush.
    #[allow(clippy::cast_precision_loss)] // Byte and partition counts far below 2^52.
    pub(crate) fn flushed(
        &self,
        resident_bytes: usize,
        budget_bytes: usize,
        pinned_partitions: usize,
        new_store_failures: u64,
    ) {
        self.flushes.increment(1);
        self.resident_bytes.set(resident_bytes as f64);
        self.budget_bytes.set(budget_bytes as f64);
        self.pinned_partitions.set(pinned_partitions as f64);
        if new_store_failures > 0 {
            self.store_failures.increment(new_store_failures);
        }
    }
}

/// Counts a fence detected in `scope` (`topic` or `cursor`) and, when `reported` was unset,
/// sets it and logs a warning (later refusals of the same handle are only counted).
pub(crate) fn fenced(topic: &str, scope: &'static str, what: &str, reported: &AtomicBool) {
    metrics::counter!(FENCES, "topic" => topic.to_string(), "scope" => scope).increment(1);
    if !reported.swap(true, Ordering::Relaxed) {
        ::log::warn!(target: LOG_TARGET,
            "{topic}: fenced: a newer owner holds {what}; this handle writes nothing more");
    }
}

/// A counter kept in the stats and published as the metric `name` labelled with the topic, in
/// one call, so the two cannot drift. Read with [`MeteredCounter::load`].
#[derive(Debug)]
pub(crate) struct MeteredCounter {
    value: AtomicU64,
    name: &'static str,
    topic: String,
}

impl MeteredCounter {
    pub(crate) fn new(name: &'static str, topic: String) -> Self {
        MeteredCounter {
            value: AtomicU64::new(0),
            name,
            topic,
        }
    }

    /// Adds `amount` to the stats counter and to the metric (same signature as
    /// [`AtomicU64::fetch_add`], which it stands in for).
    pub(crate) fn fetch_add(&self, amount: u64, order: Ordering) -> u64 {
        metrics::counter!(self.name, "topic" => self.topic.clone()).increment(amount);
        self.value.fetch_add(amount, order)
    }

    /// The stats counter.
    pub(crate) fn load(&self, order: Ordering) -> u64 {
        self.value.load(order)
    }
}
