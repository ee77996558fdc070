//! The child of `sigkill_ack_partitions`: two threads, each on topics of its own, acking
//! with `ack_many` groups, `ack`, cumulative acks, seeks next to partition boundaries and
//! batch-index acks, flushing and closing, and logging it all, until the parent kills it.

use std::path::Path;
use std::sync::{Arc, Mutex};

use ackstore::internals::ackset::PARTITION_SPAN;
use ackstore::{AppendMeta, Cursor, CursorOptions, ManagedLedger, Position, Store};

use super::sigkill_ack_many::{CURSORS, THREADS, cursor_name, open as open_store};
use super::sigkill_ack_partitions::Shape;
use super::sigkill_ack_partitions_model::Entries;
use super::sigkill_child::Log;
use crate::support;
use support::workload::{Rng, before};

/// Partial entries a cursor of the child remembers, to ack them again, whole or by message.
const REMEMBERED_PARTIAL: usize = 32;

/// Picks synced entries of a topic: those with an index in `from..to` (all of them, or the
/// synced ones of one ledger).
#[derive(Clone, Copy)]
struct Picker<'a> {
    entries: &'a Entries,
    from: u64,
    to: u64,
}

impl<'a> Picker<'a> {
    /// Every synced entry; `None` when there is none.
    fn topic(entries: &'a Entries) -> Option<Self> {
        (entries.synced > 0).then_some(Self {
            entries,
            from: 0,
            to: entries.synced,
        })
    }

    /// The synced entries of the ledger of a random one of these.
    fn one_ledger(self, rng: &mut Rng) -> Self {
        let p = self.any(rng);
        let from = self.entries.through(before(Position::new(p.ledger_id, 0)));
        let to = (from + self.entries.count(p.ledger_id)).min(self.entries.synced);
        Self { from, to, ..self }
    }

    /// Those of these at or before `mark`; `None` when there is none.
    fn through(self, mark: Option<Position>) -> Option<Self> {
        let to = self.entries.through(mark).min(self.to);
        (to > self.from).then_some(Self { to, ..self })
    }

    fn holds(&self, p: Position) -> bool {
        let i = self.entries.through(Some(p));
        self.entries.count(p.ledger_id) > p.entry_id && i > self.from && i <= self.to
    }

    fn any(&self, rng: &mut Rng) -> Position {
        self.entries
            .position(self.from + rng.below(self.to - self.from))
    }

    /// One of the last 24.
    fn recent(&self, rng: &mut Rng) -> Position {
        let window = (self.to - self.from).min(24);
        self.entries.position(self.to - 1 - rng.below(window))
    }

    /// Within 3 entries of a partition boundary (entry 65,536 or 131,072 of a ledger) or of a
    /// ledger's first or last synced entry: a random entry's ledger, a random boundary of it.
    fn near_boundary(&self, rng: &mut Rng) -> Position {
        let p = self.any(rng);
        let start = self.entries.through(before(Position::new(p.ledger_id, 0)));
        let synced = (self.entries.count(p.ledger_id)).min(self.to - start);
        let boundary = [0, PARTITION_SPAN, 2 * PARTITION_SPAN, synced][rng.index(4)];
        let entry_id = (boundary + rng.below(7)).saturating_sub(3).min(synced - 1);
        Position::new(p.ledger_id, entry_id)
    }

    /// The index of the entry at a partition boundary (entry 65,536 or 131,072 of a ledger,
    /// four times in five when the ledger of a random entry has one) or just past that
    /// ledger's synced entries (the first of the next ledger, or none yet).
    fn boundary(&self, rng: &mut Rng) -> u64 {
        let p = self.any(rng);
        let start = self.entries.through(before(Position::new(p.ledger_id, 0)));
        let synced = (self.entries.count(p.ledger_id)).min(self.to - start);
        let inside: Vec<u64> = [PARTITION_SPAN, 2 * PARTITION_SPAN]
            .into_iter()
            .filter(|&b| b < synced)
            .collect();
        start
            + match rng.pick(&inside) {
                Some(b) if rng.chance(80) => b,
                _ => synced,
            }
    }

    /// The first synced entry after `mark`, if it is one of these.
    fn after(&self, mark: Option<Position>) -> Option<Position> {
        let i = self.entries.through(mark);
        (self.from..self.to)
            .contains(&i)
            .then(|| self.entries.position(i))
    }
}

/// A cursor of the child and the partial entries it made lately.
struct Held {
    k: usize,
    cursor: Cursor,
    partial: Vec<Position>,
}

/// A topic a thread of the child works on.
struct Owned {
    t: usize,
    entries: Entries,
    cursors: Vec<Held>,
}

pub(super) fn child(shape: Shape, dir: &Path, log_path: &Path, seed: u64) -> ! {
    let log = Mutex::new(Log::open(log_path));
    let fail =
        |what: &str, e: &ackstore::Error| -> ! { log.lock().expect("the log").fail(what, e) };
    let (store, topics) = open_store(dir, shape.per_ledger()).unwrap_or_else(|e| fail("open", &e));
    let mut parts: Vec<(Rng, Vec<Owned>)> = (0..THREADS)
        .map(|i| (Rng::new(seed.wrapping_add(i as u64)), Vec::new()))
        .collect();
    for (t, topic) in topics.iter().enumerate() {
        let cursors = (t * CURSORS..(t + 1) * CURSORS)
            .map(|k| Held {
                k,
                cursor: topic
                    .open_cursor(&cursor_name(k), CursorOptions::default())
                    .unwrap_or_else(|e| fail("open_cursor", &e)),
                partial: Vec::new(),
            })
            .collect();
        parts[t % THREADS].1.push(Owned {
            t,
            entries: Entries::of(topic),
            cursors,
        });
    }
    log.lock().expect("the log").line("O");
    std::thread::scope(|scope| {
        for (mut rng, mut owned) in parts {
            let (store, topics, log) = (&store, &topics, &log);
            scope.spawn(move || run_thread(shape, &mut rng, &mut owned, store, topics, log));
        }
    });
    unreachable!("the workload runs until the process is killed")
}

/// One thread of the child, on the topics `owned`, until the kill.
fn run_thread(
    shape: Shape,
    rng: &mut Rng,
    owned: &mut [Owned],
    store: &Store,
    topics: &[Arc<ManagedLedger>],
    log: &Mutex<Log>,
) -> ! {
    let mine: Vec<usize> = owned
        .iter()
        .flat_map(|o| o.cursors.iter().map(|h| h.k))
        .collect();
    loop {
        let o = rng.index(owned.len());
        let Owned {
            t,
            entries,
            cursors,
        } = &mut owned[o];
        let c = rng.index(cursors.len());
        let mut step = Step {
            shape,
            rng: &mut *rng,
            log,
            t: *t,
            topic: &topics[*t],
            entries,
            held: &mut cursors[c],
        };
        // Cursor 0 of a topic seeks next to boundaries and creeps over them, and makes no
        // batch-index ack.
        let first = step.held.k.is_multiple_of(CURSORS);
        match step.rng.below(100) {
            0..14 => step.append(),
            14..44 => step.ack_many(),
            44..52 => step.ack(),
            52..56 => step.creep(),
            56..64 if first => step.seek_across(),
            64..76 if first => step.creep(),
            56..76 if shape.batches() => step.ack_messages(),
            56..76 => step.ack_many(),
            76..88 => step.flush(),
            88..94 => {
                store
                    .flush_all()
                    .unwrap_or_else(|e| step.fail("flush_all", &e));
                for k in &mine {
                    step.line(&format!("F {k}"));
                }
            }
            _ => step.reopen(),
        }
    }
}

/// One operation of a thread of the child on one cursor.
struct Step<'a> {
    shape: Shape,
    rng: &'a mut Rng,
    log: &'a Mutex<Log>,
    t: usize,
    topic: &'a ManagedLedger,
    entries: &'a mut Entries,
    held: &'a mut Held,
}

impl Step<'_> {
    fn line(&self, text: &str) {
        self.log.lock().expect("the log").line(text);
    }

    fn fail(&self, what: &str, e: &ackstore::Error) -> ! {
        self.log.lock().expect("the log").fail(what, e)
    }

    /// Ends the child with a failure the parent reports (an answer that contradicts a call
    /// that returned `Ok`).
    fn broken(&self, what: &str) -> ! {
        self.line(&format!("E {what}"));
        std::process::exit(3)
    }

    fn mark(&self) -> Option<Position> {
        self.held
            .cursor
            .mark_delete_position()
            .unwrap_or_else(|e| self.fail("mark_delete_position", &e))
    }

    /// Up to 7 entries (half of them batches, with batches), then a sync, sometimes.
    fn append(&mut self) {
        for _ in 0..=self.rng.below(6) {
            let num_messages = if self.shape.batches() && self.rng.chance(50) {
                2 + u32::try_from(self.rng.below(4)).expect("small")
            } else {
                1
            };
            let meta = AppendMeta {
                num_messages,
                timestamp: 0,
            };
            let p = self
                .topic
                .append_with(b"entry", meta)
                .unwrap_or_else(|e| self.fail("append", &e));
            self.entries.appended(p);
            self.line(&format!("A {} {p}", self.t));
        }
        if self.rng.chance(40) {
            self.topic.sync().unwrap_or_else(|e| self.fail("sync", &e));
            self.entries.synced = self.entries.len();
            self.line(&format!("Y {}", self.t));
        }
    }

    fn ack_many(&mut self) {
        let Some(picker) = Picker::topic(self.entries) else {
            return;
        };
        let mark = self.mark();
        let group = ack_many_group(self.rng, picker, mark, &self.held.partial);
        self.ack_group(&group);
    }

    fn ack_group(&mut self, group: &[Position]) {
        let text: Vec<String> = group.iter().map(ToString::to_string).collect();
        self.line(&format!("M {} {}", self.held.k, text.join(" ")));
        self.held
            .cursor
            .ack_many(group)
            .unwrap_or_else(|e| self.fail("ack_many", &e));
    }

    /// The entry after mark-delete, a partial entry, one next to a boundary, or any.
    fn ack(&mut self) {
        let Some(picker) = Picker::topic(self.entries) else {
            return;
        };
        let next = picker.after(self.mark());
        let p = match self.rng.below(8) {
            0 | 1 if next.is_some() => next.expect("checked"),
            2 if !self.held.partial.is_empty() => {
                self.held.partial[self.rng.index(self.held.partial.len())]
            }
            3 | 4 => picker.near_boundary(self.rng),
            _ => picker.any(self.rng),
        };
        self.ack_one(p);
    }

    fn ack_one(&mut self, p: Position) {
        self.line(&format!("K {} {p}", self.held.k));
        self.held
            .cursor
            .ack(p)
            .unwrap_or_else(|e| self.fail(&format!("ack {p}"), &e));
    }

    /// A cumulative ack a little past mark-delete: mark-delete creeps on, the holes stay many
    /// (and after a seek next to a boundary, it crosses that boundary).
    fn creep(&mut self) {
        let from = self.entries.through(self.mark());
        if from < self.entries.synced {
            let reach = (self.entries.synced - from).min(4);
            let p = self.entries.position(from + self.rng.below(reach));
            self.ack_cumulative(p);
        }
    }

    fn ack_cumulative(&mut self, p: Position) {
        self.line(&format!("C {} {p}", self.held.k));
        self.held
            .cursor
            .ack_cumulative(p)
            .unwrap_or_else(|e| self.fail(&format!("ack_cumulative {p}"), &e));
    }

    /// A seek to at most 3 entries before a partition boundary or a ledger's end (so
    /// mark-delete lands on the entry before the boundary one time in four, and the entry
    /// after it is the first of a partition or ledger), then, mostly, acks that move
    /// mark-delete across the boundary: a cumulative ack past it; an `ack_many` of every entry
    /// from the one after mark-delete to a few past the boundary; or an `ack_many` of a few
    /// entries past the boundary, then an `ack` of each entry from the one after mark-delete
    /// to the boundary's, the last of which moves mark-delete over those.
    fn seek_across(&mut self) {
        let Some(picker) = Picker::topic(self.entries) else {
            return;
        };
        let synced = self.entries.synced;
        let boundary = picker.boundary(self.rng);
        let target = boundary.saturating_sub(self.rng.below(4)).min(synced - 1);
        let p = self.entries.position(target);
        let k = self.held.k;
        self.line(&format!("S {k} {p}"));
        self.held
            .cursor
            .seek(p)
            .unwrap_or_else(|e| self.fail(&format!("seek {p}"), &e));
        self.line(&format!("s {k}"));
        let past = (boundary + 1 + self.rng.below(3)).min(synced);
        match self.rng.below(4) {
            0 => self.ack_cumulative(self.entries.position(past - 1)),
            1 => self.ack_indexes(&(target..past).rev().collect::<Vec<_>>()),
            2 => {
                self.ack_indexes(&(boundary + 1..past).collect::<Vec<_>>());
                for i in target..=boundary.min(synced - 1) {
                    self.ack_one(self.entries.position(i));
                }
            }
            _ => {}
        }
    }

    /// An `ack_many` of the entries at `indexes` (none: no call).
    fn ack_indexes(&mut self, indexes: &[u64]) {
        if indexes.is_empty() {
            return;
        }
        let group: Vec<Position> = indexes.iter().map(|&i| self.entries.position(i)).collect();
        self.ack_group(&group);
    }

    /// Batch-index acks of one entry (one the cursor acked messages of lately, one next to a
    /// boundary, or any; a batch mostly): of one message it does not answer acknowledged, or
    /// of every message one by one; after each, sometimes, asks whether the message is
    /// acknowledged (it must be).
    fn ack_messages(&mut self) {
        let Some(picker) = Picker::topic(self.entries) else {
            return;
        };
        let remembered = &self.held.partial;
        let mut p = if !remembered.is_empty() && self.rng.chance(40) {
            remembered[self.rng.index(remembered.len())]
        } else if self.rng.chance(50) {
            picker.near_boundary(self.rng)
        } else {
            picker.any(self.rng)
        };
        let mut size = self.messages(p);
        for _ in 0..4 {
            if size > 1 {
                break;
            }
            p = if self.rng.chance(50) {
                picker.recent(self.rng)
            } else {
                picker.any(self.rng)
            };
            size = self.messages(p);
        }
        let indexes: Vec<u32> = if self.rng.chance(25) {
            (0..size).collect()
        } else {
            vec![self.unacked_message(p, size)]
        };
        let k = self.held.k;
        for i in indexes {
            self.line(&format!("B {k} {p} {i} {size}"));
            self.held
                .cursor
                .ack_batch_index(p, i, size)
                .unwrap_or_else(|e| self.fail(&format!("ack_batch_index {p} {i}"), &e));
            if self.rng.chance(30) {
                let acked = self
                    .held
                    .cursor
                    .is_batch_index_acked(p, i)
                    .unwrap_or_else(|e| self.fail(&format!("is_batch_index_acked {p} {i}"), &e));
                if !acked {
                    self.broken(&format!(
                        "cursor {k}: message {i} of {p} was acked (Ok) and is not acked"
                    ));
                }
            }
        }
        let partial = &mut self.held.partial;
        if !partial.contains(&p) {
            if partial.len() == REMEMBERED_PARTIAL {
                partial.remove(0);
            }
            partial.push(p);
        }
    }

    /// A message of the entry at `p` (of `size` messages) that the cursor does not answer
    /// acknowledged, the first from a random one on (a random one when all are).
    fn unacked_message(&mut self, p: Position, size: u32) -> u32 {
        let from = u32::try_from(self.rng.below(u64::from(size))).expect("small");
        (0..size)
            .map(|i| (from + i) % size)
            .find(|&i| {
                !self
                    .held
                    .cursor
                    .is_batch_index_acked(p, i)
                    .unwrap_or_else(|e| self.fail(&format!("is_batch_index_acked {p} {i}"), &e))
            })
            .unwrap_or(from)
    }

    /// The messages of the entry at `p`, from the entry, as a consumer has it.
    fn messages(&self, p: Position) -> u32 {
        self.topic
            .read(p)
            .unwrap_or_else(|e| self.fail(&format!("read {p}"), &e))
            .num_messages
    }

    fn flush(&mut self) {
        self.held
            .cursor
            .flush()
            .unwrap_or_else(|e| self.fail("flush", &e));
        self.line(&format!("F {}", self.held.k));
    }

    /// Closes the cursor and opens it again.
    fn reopen(&mut self) {
        let k = self.held.k;
        self.held
            .cursor
            .close()
            .unwrap_or_else(|e| self.fail("close", &e));
        self.line(&format!("F {k}"));
        self.held.cursor = self
            .topic
            .open_cursor(&cursor_name(k), CursorOptions::default())
            .unwrap_or_else(|e| self.fail("reopen cursor", &e));
    }
}

/// An `ack_many` group over the synced entries of `picker` (three groups in four within one
/// ledger, which `add_many` orders by partition): up to 200 positions (over three of
/// `add_many`'s groups of 64), random, next to partition boundaries and ledger ends, recent,
/// duplicates, some at or before mark-delete, in some groups one of `partial` (the cursor's
/// partial entries) and the entry right after mark-delete (which moves mark-delete over the
/// acked entries that follow, so not in most: the holes stay many).
fn ack_many_group(
    rng: &mut Rng,
    picker: Picker<'_>,
    mark: Option<Position>,
    partial: &[Position],
) -> Vec<Position> {
    let picker = if rng.chance(75) {
        picker.one_ledger(rng)
    } else {
        picker
    };
    let acked = picker.through(mark);
    let partial: Vec<Position> = partial
        .iter()
        .copied()
        .filter(|p| picker.holds(*p))
        .collect();
    let len = 1 + rng.index(200);
    let mut group: Vec<Position> = Vec::with_capacity(len + 1);
    while group.len() < len {
        let p = match rng.below(12) {
            0 if !group.is_empty() => group[rng.index(group.len())],
            1 if acked.is_some() => acked.expect("checked").any(rng),
            2..5 => picker.near_boundary(rng),
            5..7 => picker.recent(rng),
            _ => picker.any(rng),
        };
        group.push(p);
    }
    // One partial entry in some groups: most stay partial a while.
    if let Some(p) = rng.pick(&partial)
        && rng.chance(30)
    {
        let at = rng.index(group.len() + 1);
        group.insert(at, p);
    }
    if let Some(next) = picker.after(mark)
        && rng.chance(30)
    {
        let at = rng.index(group.len() + 1);
        group.insert(at, next);
    }
    group
}
