//! A subscription: one ackstore cursor, the consumers attached to it, and the dispatcher thread
//! that reads the cursor and hands entries to consumers as their flow permits allow.
//!
//! Owns the subscription's delivery state: consumers and their permits, the entries each
//! consumer holds unacknowledged (`pending`) and the entries to deliver again (`redeliver`).
//! Invariants:
//! - what is acknowledged is only ever what a client acknowledged: acks go to the cursor as
//!   given (individual, cumulative, batch index), never inferred from delivery;
//! - an entry read from the cursor is either sent to a consumer (and recorded in `pending`) or
//!   queued in `redeliver`: a read and what is done with its entries hold `reading`, which
//!   every seek and rewind takes first, so no read straddles a move of the cursor (lock order:
//!   `reading`, then `state`); the one read that waits for entries runs without `reading`, and
//!   its entries go to `redeliver` when the cursor's epoch moved meanwhile;
//! - an entry dispatched carries the ack set of its acknowledged batch indexes, so a client
//!   never receives a message the cursor holds acknowledged.
//! - nothing is dispatched to a consumer whose connection holds [`CONNECTION_BACKLOG`] bytes
//!   or more of messages unwritten (its [`Backlog`]), whatever its permits, beyond the dispatch
//!   round that crossed the bound;
//! - Key_Shared is Shared with the consumer chosen by the entry's key hash
//!   ([`crate::keyshared`]) instead of round robin: an entry whose consumer cannot take it now
//!   waits in `redeliver`, and an entry read later with the same hash waits behind it, so one
//!   consumer receives a key's entries in order while the consumers are unchanged.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::time::Duration;

use ackstore::{Cursor, Entry, Error, InitialPosition, ManagedLedger, Position};
use prost::Message as _;
use pulsar::message::{Message, Payload};
use pulsar::proto::{self, BaseCommand, MessageIdData, base_command::Type};
use tokio::sync::mpsc::UnboundedSender;

use crate::ids::{
    Target, acked_indexes, decode_entry, dispatch_ack_set, message_id, no_message_id, target,
};
use crate::keyshared::{Ranges, entry_key, key_hash};

/// How consumers share a subscription.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// One consumer; a second is refused.
    Exclusive,
    /// Every consumer gets a share of the entries.
    Shared,
    /// One active consumer (the first attached); the others take over in turn.
    Failover,
    /// Every consumer gets the entries of the keys whose hashes it owns (AUTO_SPLIT ranges).
    KeyShared,
}

impl Kind {
    /// The kind a `SUBSCRIBE` asks for.
    pub fn from_proto(t: proto::command_subscribe::SubType) -> Self {
        use proto::command_subscribe::SubType;
        match t {
            SubType::Exclusive => Self::Exclusive,
            SubType::Shared => Self::Shared,
            SubType::Failover => Self::Failover,
            SubType::KeyShared => Self::KeyShared,
        }
    }

    /// Whether consumers share the entries (Shared, Key_Shared): each holds its own, given
    /// back entry by entry, never by rewinding the cursor.
    fn shares(self) -> bool {
        matches!(self, Self::Shared | Self::KeyShared)
    }
}

/// Where a seek moves the subscription.
#[derive(Debug, Clone, Copy)]
pub enum SeekTo {
    /// A message id (the next message delivered is that message).
    Id(Target),
    /// A publish time in ms: the next message delivered is the first published at or after it.
    Time(u64),
}

/// Bytes of messages a connection may hold queued and unwritten before the dispatchers hand its
/// consumers nothing more (whatever their permits): a client that does not read holds at most
/// this much of the broker's memory, plus one dispatch round.
pub const CONNECTION_BACKLOG: usize = 1 << 20;

/// The message bytes a connection has queued and not yet written. Dispatchers hold back from
/// its consumers while it is at or above [`CONNECTION_BACKLOG`]; the connection's writer wakes
/// them when it drains below.
#[derive(Default)]
pub struct Backlog {
    bytes: AtomicUsize,
    waiters: Mutex<Vec<Weak<Subscription>>>,
}

impl Backlog {
    fn full(&self) -> bool {
        self.bytes.load(Ordering::SeqCst) >= CONNECTION_BACKLOG
    }

    /// Wakes `sub`'s dispatcher whenever this connection drains below the bound.
    pub fn watch(&self, sub: &Arc<Subscription>) {
        let mut w = self
            .waiters
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        w.retain(|s| s.strong_count() > 0);
        w.push(Arc::downgrade(sub));
    }

    /// `n` bytes of messages (as [`backlog_size`] counts them) were written to the socket.
    pub fn written(&self, n: usize) {
        if n == 0 {
            return;
        }
        let before = self.bytes.fetch_sub(n, Ordering::SeqCst);
        if before >= CONNECTION_BACKLOG && before - n < CONNECTION_BACKLOG {
            let subs: Vec<Arc<Subscription>> = self
                .waiters
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .iter()
                .filter_map(Weak::upgrade)
                .collect();
            for sub in subs {
                sub.wake();
            }
        }
    }
}

/// The bytes a message counts for in a [`Backlog`]: a `MESSAGE`'s payload.
pub fn backlog_size(m: &Message) -> usize {
    if m.command.r#type == Type::Message as i32 {
        m.payload.as_ref().map_or(0, |p| p.data.len())
    } else {
        0
    }
}

/// A consumer attached to the subscription.
struct Slot {
    /// Broker-wide unique key of this attachment.
    key: u64,
    /// The client's id of the consumer on its connection.
    consumer_id: u64,
    /// The connection's outbound queue.
    out: UnboundedSender<Message>,
    /// What that queue holds unwritten.
    backlog: Arc<Backlog>,
    /// Messages the consumer may still receive (may go below zero by one batch).
    permits: i64,
    /// The consumer epoch of its last redelivery request, stamped on what it receives.
    epoch: Option<u64>,
    /// Key_Shared, in order: the last entry read before it joined while entries up to it were
    /// unacknowledged. Until none is, it receives no entry after it (a key it took over could
    /// otherwise overtake messages of that key another consumer holds).
    held_until: Option<Position>,
}

#[derive(Default)]
struct State {
    consumers: Vec<Slot>,
    /// Entries a consumer holds unacknowledged, by the key of that consumer, with the
    /// entry's message count.
    pending: HashMap<Position, (u64, u32)>,
    /// Entries to deliver again before reading on.
    redeliver: BTreeSet<Position>,
    /// How many times a consumer gave each entry back for redelivery (a nack, a redelivery
    /// request) on a Shared subscription: the redelivery count its next deliveries carry, which
    /// a client's dead-letter policy reads. In memory, as a Pulsar broker keeps it; an entry
    /// leaves it when acknowledged whole, and every entry when the cursor moves.
    redeliveries: HashMap<Position, u32>,
    /// Round-robin start among Shared consumers.
    next: usize,
    /// Key_Shared: which consumer owns each key hash.
    ranges: Ranges,
    /// Key_Shared: the key hash of each entry pending or to deliver again.
    hashes: HashMap<Position, u32>,
    /// Messages per entry of the last entry dispatched (sizes the next read).
    last_batch: u32,
    closed: bool,
}

impl State {
    /// Entry `pos` is acknowledged whole.
    fn acked(&mut self, pos: Position) {
        self.pending.remove(&pos);
        self.redeliveries.remove(&pos);
        self.hashes.remove(&pos);
    }

    /// Forgets what was pending and to be delivered again (the cursor moved).
    fn reset(&mut self) {
        self.pending.clear();
        self.redeliver.clear();
        self.redeliveries.clear();
        self.hashes.clear();
        for c in &mut self.consumers {
            c.held_until = None;
        }
    }

    /// Key_Shared: releases each consumer held back on joining once no entry up to its hold is
    /// unacknowledged (pending or to deliver again).
    fn release_holds(&mut self) {
        if self.consumers.iter().all(|c| c.held_until.is_none()) {
            return;
        }
        let oldest = self
            .pending
            .keys()
            .chain(self.redeliver.first())
            .min()
            .copied();
        for c in &mut self.consumers {
            if c.held_until.is_some_and(|h| oldest.is_none_or(|o| o > h)) {
                c.held_until = None;
            }
        }
    }

    /// Key_Shared: whether the entry at `pos` with key hash `hash` may go to its consumer now
    /// (index into `consumers`); `None` when it must wait. A consumer held back on joining
    /// receives an entry read before it joined only once no other consumer holds an entry of
    /// that hash unacknowledged (the key's earlier entries, from before the ranges moved).
    fn key_owner(&self, pos: Position, hash: u32) -> Option<usize> {
        let owner = self.ranges.owner(hash)?;
        let i = self.consumers.iter().position(|c| c.key == owner)?;
        let c = &self.consumers[i];
        let may = c.permits > 0 && !c.backlog.full() && c.held_until.is_none_or(|h| pos <= h);
        let earlier_elsewhere = || {
            self.pending
                .iter()
                .any(|(p, (k, _))| *k != owner && self.hashes.get(p) == Some(&hash))
        };
        (may && (c.held_until.is_none() || !earlier_elsewhere())).then_some(i)
    }

    /// Key_Shared: whether the entry at `pos`, to deliver again, may go to a consumer now (one
    /// of unknown hash is tried: dispatching it records its hash).
    fn redeliverable(&self, pos: Position) -> bool {
        self.hashes
            .get(&pos)
            .is_none_or(|&h| self.key_owner(pos, h).is_some())
    }
}

/// Entries read from the cursor at most per dispatch round.
const MAX_READ: usize = 32;

/// Key_Shared: entries waiting for their key's consumer (no permits, a full connection, held
/// back on joining) beyond which no new entry is read until one of them can go.
const MAX_WAITING: usize = 1000;

/// How long a dispatcher's read waits for entries before it looks at its state again.
const READ_WAIT: Duration = Duration::from_millis(100);

/// One subscription of a topic.
pub struct Subscription {
    /// The subscription's name.
    pub name: String,
    /// How consumers share it.
    pub kind: Kind,
    /// A reader's subscription (a non-durable cursor, gone with its last consumer).
    pub reader: bool,
    topic: Arc<ManagedLedger>,
    cursor: Cursor,
    /// Held across a dispatch round's read and its hand-out, and across seeks and rewinds.
    reading: Mutex<()>,
    /// Callers waiting for `reading` other than the dispatcher, which lets them in first
    /// (a mutex is not fair: a dispatcher re-locking at once could starve them).
    movers: AtomicUsize,
    /// An ack refused (by the cursor as unsupported, or a cumulative ack on a shared
    /// subscription) has been logged (once per subscription).
    refused_logged: AtomicBool,
    state: Mutex<State>,
    wake: Condvar,
    /// The dispatcher thread, until [`Self::close_and_wait`] joins it.
    dispatcher: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Subscription {
    /// A subscription over `cursor`, with its dispatcher thread started.
    pub fn start(
        name: String,
        kind: Kind,
        reader: bool,
        topic: Arc<ManagedLedger>,
        cursor: Cursor,
    ) -> std::io::Result<Arc<Self>> {
        let sub = Arc::new(Self {
            name,
            kind,
            reader,
            topic,
            cursor,
            reading: Mutex::new(()),
            movers: AtomicUsize::new(0),
            refused_logged: AtomicBool::new(false),
            state: Mutex::new(State {
                last_batch: 1,
                ..State::default()
            }),
            wake: Condvar::new(),
            dispatcher: Mutex::new(None),
        });
        let dispatcher = sub.clone();
        let handle = std::thread::Builder::new()
            .name(format!("dispatch-{}", sub.name))
            .spawn(move || dispatcher.dispatch_loop())?;
        *sub.dispatcher
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(handle);
        Ok(sub)
    }

    /// Takes `reading` for a seek, rewind or change of consumers.
    fn reading(&self) -> MutexGuard<'_, ()> {
        self.movers.fetch_add(1, Ordering::SeqCst);
        let guard = self
            .reading
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        self.movers.fetch_sub(1, Ordering::SeqCst);
        guard
    }

    /// Takes `reading` for a dispatch round, after any other caller waiting for it.
    fn reading_for_dispatch(&self) -> MutexGuard<'_, ()> {
        while self.movers.load(Ordering::SeqCst) > 0 {
            std::thread::sleep(Duration::from_micros(200));
        }
        self.reading
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Attaches a consumer. `success` (the `SUBSCRIBE`'s answer) is queued first, then the
    /// consumer's Failover status; refused (nothing queued) when an Exclusive subscription
    /// already has its consumer, or the subscription is closed.
    pub fn attach(
        &self,
        key: u64,
        consumer_id: u64,
        out: &UnboundedSender<Message>,
        backlog: &Arc<Backlog>,
        in_order: bool,
        success: Message,
    ) -> Result<(), String> {
        let mut st = self.state();
        if st.closed {
            return Err(format!("subscription {} is closed", self.name));
        }
        if self.kind == Kind::Exclusive && !st.consumers.is_empty() {
            return Err(format!(
                "exclusive subscription {} already has a consumer",
                self.name
            ));
        }
        let _ = out.send(success);
        let held_until = if self.kind == Kind::KeyShared && in_order {
            st.pending.keys().chain(st.redeliver.last()).max().copied()
        } else {
            None
        };
        if self.kind == Kind::KeyShared {
            st.ranges.add(key);
        }
        st.consumers.push(Slot {
            key,
            consumer_id,
            out: out.clone(),
            backlog: backlog.clone(),
            permits: 0,
            epoch: None,
            held_until,
        });
        if self.kind == Kind::Failover {
            let active = st.consumers.first().map(|c| c.key);
            let _ = out.send(active_change(consumer_id, active == Some(key)));
        }
        Ok(())
    }

    /// Detaches a consumer: a Shared consumer's unacknowledged entries go to the others; the
    /// active consumer of an Exclusive or Failover subscription leaving rewinds the cursor, so
    /// the next active one receives everything unacknowledged. Returns whether consumers
    /// remain.
    pub fn detach(&self, key: u64) -> bool {
        let _reading = self.reading();
        let mut st = self.state();
        let Some(at) = st.consumers.iter().position(|c| c.key == key) else {
            return !st.consumers.is_empty();
        };
        st.consumers.remove(at);
        st.ranges.remove(key);
        match self.kind {
            Kind::Shared | Kind::KeyShared => {
                let mine: Vec<Position> = st
                    .pending
                    .iter()
                    .filter(|(_, (k, _))| *k == key)
                    .map(|(p, _)| *p)
                    .collect();
                for p in mine {
                    st.pending.remove(&p);
                    st.redeliver.insert(p);
                }
            }
            Kind::Exclusive | Kind::Failover => {
                if at == 0 {
                    self.rewind_locked(&mut st);
                    if self.kind == Kind::Failover {
                        let active = st.consumers.first().map(|c| c.key);
                        for c in &st.consumers {
                            let _ = c
                                .out
                                .send(active_change(c.consumer_id, Some(c.key) == active));
                        }
                    }
                }
            }
        }
        self.wake.notify_all();
        !st.consumers.is_empty()
    }

    /// Rewinds the cursor; the caller holds `reading` and `state`.
    fn rewind_locked(&self, st: &mut State) {
        st.reset();
        if let Err(e) = self.cursor.rewind() {
            log::warn!("subscription {}: rewind failed: {e}", self.name);
        }
    }

    /// Whether a consumer is attached.
    pub fn has_consumers(&self) -> bool {
        !self.state().consumers.is_empty()
    }

    /// Adds flow permits to a consumer.
    pub fn flow(&self, key: u64, permits: u32) {
        let mut st = self.state();
        if let Some(c) = st.consumers.iter_mut().find(|c| c.key == key) {
            c.permits += i64::from(permits);
        }
        self.wake.notify_all();
    }

    /// Applies a consumer's `ACK`. Acks of what does not exist or is already acknowledged
    /// change nothing (the client is not told, as Pulsar does not). The ids are applied in
    /// their order; each run of consecutive individual ids without an ack set (what a client's
    /// ack grouping sends) goes to the cursor as one [`Cursor::ack_many`], with the outcome of
    /// applying them one by one (see [`Self::ack_entries`]).
    pub fn ack(&self, key: u64, cmd: &proto::CommandAck) {
        let cumulative = cmd.ack_type() == proto::command_ack::AckType::Cumulative;
        if cumulative && self.kind.shares() {
            // As a Pulsar broker: entries before it may be another consumer's, unacknowledged.
            if !self.refused_logged.swap(true, Ordering::Relaxed) {
                log::warn!(
                    "subscription {}: cumulative ack on a shared subscription ignored",
                    self.name
                );
            }
            return;
        }
        let mut entries = Vec::new();
        for id in &cmd.message_id {
            let Target::At(pos, _) = target(id) else {
                continue;
            };
            if !cumulative && id.ack_set.is_empty() {
                entries.push(pos);
                continue;
            }
            self.ack_entries(&entries);
            entries.clear();
            let outcome = if id.ack_set.is_empty() {
                self.cursor.ack_cumulative(pos).map(|_| ())
            } else {
                self.ack_batch(id, pos, cumulative)
            };
            self.ack_outcome(pos, outcome);
            let mut st = self.state();
            if cumulative && id.ack_set.is_empty() {
                st.pending.retain(|p, (k, _)| *p > pos || *k != key);
                st.redeliveries.retain(|p, _| *p > pos);
                st.hashes.retain(|p, _| *p > pos);
            } else if self.cursor.is_acked(pos).unwrap_or(false) {
                st.acked(pos);
            }
        }
        self.ack_entries(&entries);
        if self.kind == Kind::KeyShared {
            // A consumer held back on joining may be released.
            self.wake();
        }
    }

    /// Acknowledges whole entries individually, as `Cursor::ack` of each in turn would, an
    /// entry that is not retained ignored, and takes what is acknowledged out of `pending`.
    /// More than one entry: one [`Cursor::ack_many`] under `state` (lock order `state`, then
    /// the cursor's), so no seek or rewind comes between the ack and `pending`, and on `Ok`
    /// every entry named is acknowledged (newly, already, or at or before mark-delete): one
    /// cursor lock for the run. `ack_many` refuses the whole call on an entry that is not
    /// retained (changing nothing) where the single acks would apply the others: then each
    /// entry is acknowledged alone.
    fn ack_entries(&self, entries: &[Position]) {
        if entries.len() > 1 {
            let mut st = self.state();
            if self.cursor.ack_many(entries).is_ok() {
                for &pos in entries {
                    st.acked(pos);
                }
                return;
            }
        }
        for &pos in entries {
            let outcome = self.cursor.ack(pos).map(|_| ());
            self.ack_outcome(pos, outcome);
            let mut st = self.state();
            if self.cursor.is_acked(pos).unwrap_or(false) {
                st.acked(pos);
            }
        }
    }

    /// Logs an ack the cursor refused: an unsupported one once per subscription, others at
    /// debug level (the client is not told).
    fn ack_outcome(&self, pos: Position, outcome: Result<(), Error>) {
        match outcome {
            Err(e @ Error::Unsupported { .. }) => {
                if !self.refused_logged.swap(true, Ordering::Relaxed) {
                    log::warn!("subscription {}: ack of {pos:?} refused: {e}", self.name);
                }
            }
            Err(e) => log::debug!("subscription {}: ack of {pos:?} ignored: {e}", self.name),
            Ok(()) => {}
        }
    }

    /// An ack carrying an ack set: the messages of entry `pos` whose bit is clear. The set is
    /// read over the entry's own message count; an ack whose `batch_size` names another count
    /// is about some other entry and is refused before anything changes.
    fn ack_batch(&self, id: &MessageIdData, pos: Position, cumulative: bool) -> Result<(), Error> {
        let known = self.state().pending.get(&pos).map(|(_, n)| *n);
        // The message count, and for a cumulative ack (only) the entry's first message index:
        // an individual ack of an entry not pending (given back for redelivery, say) covers
        // no entry before it.
        let (size, first) = match (known, cumulative) {
            (Some(n), false) => (n, None),
            (None, false) => (self.topic.read(pos)?.num_messages, None),
            (_, true) => {
                let entry = self.topic.read(pos)?;
                (entry.num_messages, Some(entry.first_index()))
            }
        };
        if let Some(claimed) = id.batch_size
            && u32::try_from(claimed).ok() != Some(size)
        {
            return Err(Error::InvalidArgument {
                reason: format!(
                    "ack set over a batch of {claimed} messages; {pos} holds {size}; \
                     nothing was changed"
                ),
            });
        }
        if let Some(first) = first.filter(|f| *f > 0) {
            // Everything up to the entry before this one (found by message index, so the last
            // entry of an earlier ledger when this one opens its ledger), then the messages of
            // this one the set names.
            match self.topic.find_by_index(first - 1) {
                Ok(Some(before)) => {
                    if let Err(e) = self.cursor.ack_cumulative(before) {
                        log::debug!(
                            "subscription {}: cumulative ack of {before:?}: {e}",
                            self.name
                        );
                    }
                }
                Ok(None) => {}
                Err(e) => log::debug!("subscription {}: no entry before {pos:?}: {e}", self.name),
            }
        }
        for i in acked_indexes(&id.ack_set, size) {
            self.cursor.ack_batch_index(pos, i, size)?;
        }
        Ok(())
    }

    /// A `REDELIVER_UNACKNOWLEDGED_MESSAGES`: the entries named (all the consumer holds when
    /// none is named) are delivered again; on Exclusive and Failover, naming none rewinds the
    /// cursor.
    pub fn redeliver(&self, key: u64, ids: &[MessageIdData], epoch: Option<u64>) {
        let _reading = self.reading();
        let mut st = self.state();
        if let Some(c) = st.consumers.iter_mut().find(|c| c.key == key)
            && epoch.is_some()
        {
            c.epoch = epoch;
        }
        if ids.is_empty() {
            if self.kind.shares() {
                let mine: Vec<Position> = st
                    .pending
                    .iter()
                    .filter(|(_, (k, _))| *k == key)
                    .map(|(p, _)| *p)
                    .collect();
                for p in mine {
                    st.pending.remove(&p);
                    st.redeliver.insert(p);
                    *st.redeliveries.entry(p).or_default() += 1;
                }
            } else {
                self.rewind_locked(&mut st);
            }
        } else {
            for id in ids {
                if let Target::At(pos, _) = target(id)
                    && st.pending.get(&pos).is_some_and(|(k, _)| *k == key)
                {
                    st.pending.remove(&pos);
                    st.redeliver.insert(pos);
                    if self.kind.shares() {
                        *st.redeliveries.entry(pos).or_default() += 1;
                    }
                }
            }
        }
        self.wake.notify_all();
    }

    /// Moves the cursor (the reset survives a crash: the cursor writes its record), closes
    /// every consumer on the client side (`CLOSE_CONSUMER`), so each comes back with fresh
    /// permits and an empty receive queue, then calls `answered` (which queues the `SEEK`'s
    /// answer): as a Pulsar broker, whose clients complete a seek once the consumer they
    /// find disconnected at the answer has subscribed again. A reader's subscription ends
    /// there (its cursor closed, its dispatcher stopped): it returns where the seek left the
    /// cursor (the entry after its mark-delete position, which no read moves), where the
    /// reader's next `SUBSCRIBE` starts a new one (a client whose reader is closed meanwhile
    /// sends nothing, so nothing may stay open for it).
    pub fn seek_then(
        &self,
        to: SeekTo,
        answered: impl FnOnce(),
    ) -> Result<Option<InitialPosition>, Error> {
        let _reading = self.reading();
        let mut st = self.state();
        st.reset();
        match to {
            SeekTo::Time(ts) => self.cursor.seek_by_timestamp(ts.saturating_sub(1))?,
            SeekTo::Id(Target::Earliest) => self.cursor.seek(Position::new(0, 0))?,
            SeekTo::Id(Target::Latest) => self
                .cursor
                .seek(Position::new(i64::MAX as u64, i64::MAX as u64))?,
            SeekTo::Id(Target::At(pos, Some(index))) if index > 0 => {
                let entry = self.topic.read(pos)?;
                // The id names a message of this entry: an index past its last message means
                // the entry's end (the next entry, whole), never a message of a later one.
                let index = index.min(entry.num_messages);
                match self
                    .cursor
                    .seek_by_index(entry.first_index() + u64::from(index))
                {
                    // A cursor that cannot hold batch-index acks starts at the whole entry.
                    Err(Error::Unsupported { .. }) => self.cursor.seek(pos)?,
                    other => other?,
                }
            }
            SeekTo::Id(Target::At(pos, _)) => self.cursor.seek(pos)?,
        }
        st.ranges.clear();
        // Not the read position: a dispatcher's read waiting for entries (without `reading`)
        // may already have moved it past entries it will only queue for redelivery.
        let resume = if self.reader {
            Some(match self.cursor.mark_delete_position()? {
                Some(mark) => InitialPosition::At(mark),
                None => InitialPosition::Earliest,
            })
        } else {
            None
        };
        for c in st.consumers.drain(..) {
            let _ = c.out.send(command(BaseCommand {
                r#type: Type::CloseConsumer as i32,
                close_consumer: Some(proto::CommandCloseConsumer {
                    consumer_id: c.consumer_id,
                    request_id: 0,
                }),
                ..Default::default()
            }));
        }
        answered();
        if self.reader {
            st.closed = true;
            let _ = self.cursor.close();
        }
        self.wake.notify_all();
        Ok(resume)
    }

    /// The last message id of the topic (what `hasMessageAvailable` compares with) and this
    /// subscription's mark-delete position.
    pub fn last_message_id(&self) -> Result<(MessageIdData, Option<MessageIdData>), Error> {
        let last = match self.topic.last_position() {
            None => no_message_id(),
            Some(pos) => {
                let entry = self.topic.read(pos)?;
                let batched = decode_entry(&entry.payload)
                    .and_then(|e| proto::MessageMetadata::decode(e.metadata).ok())
                    .is_some_and(|m| m.num_messages_in_batch.is_some());
                message_id(pos, batched.then(|| entry.num_messages.saturating_sub(1)))
            }
        };
        // Nothing acknowledged: as a Pulsar cursor, the position just before the first entry
        // (entry -1 of its ledger), which a client compares with the last message after a seek
        // by publish time; with none it answers that no message is available.
        let mark = match self.cursor.mark_delete_position()? {
            Some(p) => Some(p),
            None => self
                .topic
                .first_position()
                .map(|f| Position::new(f.ledger_id, f.entry_id.wrapping_sub(1))),
        };
        Ok((last, mark.map(|p| message_id(p, None))))
    }

    /// Deletes the subscription's cursor (`UNSUBSCRIBE`), refused while another consumer than
    /// `key` is attached.
    pub fn unsubscribe(&self, key: u64) -> Result<(), String> {
        let mut st = self.state();
        if st.consumers.iter().any(|c| c.key != key) {
            return Err(format!("subscription {} has other consumers", self.name));
        }
        st.consumers.clear();
        st.ranges.clear();
        st.closed = true;
        self.wake.notify_all();
        drop(st);
        if self.reader {
            let _ = self.cursor.close();
            Ok(())
        } else {
            self.topic
                .delete_cursor(&self.name)
                .or_else(|e| match e {
                    // A subscription kept only in memory has no stored cursor.
                    Error::NoSuchCursor { .. } => self.cursor.close(),
                    e => Err(e),
                })
                .map_err(|e| e.to_string())
        }
    }

    /// Stops the dispatcher; a reader's cursor is closed.
    pub fn close(&self) {
        self.state().closed = true;
        self.wake.notify_all();
        if self.reader {
            let _ = self.cursor.close();
        }
    }

    /// Stops the dispatcher as [`Self::close`] and waits until its thread has ended: no read
    /// of this subscription moves the cursor afterwards.
    pub fn close_and_wait(&self) {
        self.close();
        let handle = self
            .dispatcher
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(handle) = handle {
            let _ = handle.join();
        }
    }

    /// Moves the cursor back to its first unacknowledged entry (a subscription taking over a
    /// cursor another subscription read from).
    pub fn rewind(&self) -> Result<(), Error> {
        let _reading = self.reading();
        let mut st = self.state();
        st.reset();
        self.cursor.rewind()
    }

    fn dispatch_loop(self: Arc<Self>) {
        loop {
            let max = {
                let mut st = self.state();
                loop {
                    if st.closed {
                        return;
                    }
                    if self.kind == Kind::KeyShared {
                        st.release_holds();
                    }
                    let permits = self.permits(&st);
                    if permits > 0 {
                        let per_entry = i64::from(st.last_batch.max(1));
                        break usize::try_from(permits.div_euclid(per_entry))
                            .unwrap_or(0)
                            .clamp(1, MAX_READ);
                    }
                    st = self
                        .wake
                        .wait(st)
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                }
            };
            let epoch = {
                let _reading = self.reading_for_dispatch();
                let (again, waiting) = {
                    let mut st = self.state();
                    let again: Vec<Position> = if self.kind == Kind::KeyShared {
                        let st = &*st;
                        st.redeliver
                            .iter()
                            .filter(|p| st.redeliverable(**p))
                            .take(max)
                            .copied()
                            .collect()
                    } else {
                        st.redeliver.iter().take(max).copied().collect()
                    };
                    for p in &again {
                        st.redeliver.remove(p);
                    }
                    (again, st.redeliver.len())
                };
                if again.is_empty() && self.kind == Kind::KeyShared && waiting >= MAX_WAITING {
                    // Consumers changed since the permits were counted: wait again.
                    continue;
                }
                let entries = if again.is_empty() {
                    match self.cursor.read_entries(max) {
                        Ok(e) => e,
                        Err(e) => {
                            if !self.read_failed(&e) {
                                return;
                            }
                            continue;
                        }
                    }
                } else {
                    let entries: Vec<Entry> =
                        again.iter().filter_map(|p| self.reread(*p)).collect();
                    let mut st = self.state();
                    for p in &again {
                        if !entries.iter().any(|e| e.position == *p) {
                            st.hashes.remove(p);
                        }
                    }
                    for entry in entries {
                        self.dispatch(&mut st, entry, false);
                    }
                    continue;
                };
                if !entries.is_empty() {
                    let mut st = self.state();
                    for entry in entries {
                        self.dispatch(&mut st, entry, true);
                    }
                    continue;
                }
                match self.cursor.epoch() {
                    Ok(e) => e,
                    Err(e) => {
                        if !self.read_failed(&e) {
                            return;
                        }
                        continue;
                    }
                }
            };
            // Nothing to read: wait for entries without `reading`, so seeks and consumer
            // changes are not held up by the wait.
            let entries = match self.cursor.read_entries_or_wait(max, READ_WAIT) {
                Ok(e) => e,
                Err(e) => {
                    if !self.read_failed(&e) {
                        return;
                    }
                    continue;
                }
            };
            if entries.is_empty() {
                continue;
            }
            let _reading = self.reading_for_dispatch();
            let mut st = self.state();
            if self.cursor.epoch().ok() == Some(epoch) {
                for entry in entries {
                    self.dispatch(&mut st, entry, true);
                }
            } else {
                // A seek or rewind came while the read waited: whether the read saw the
                // cursor before or after it moved is unknown, so its entries are delivered
                // from the redelivery set (at least once) unless acknowledged.
                for entry in entries {
                    if !self.cursor.is_acked(entry.position).unwrap_or(true) {
                        st.redeliver.insert(entry.position);
                    }
                }
            }
        }
    }

    /// Logs a failed read and waits a little; `false` when the cursor is closed for good.
    fn read_failed(&self, e: &Error) -> bool {
        if matches!(e, Error::Closed) {
            return false;
        }
        log::warn!("subscription {}: read failed: {e}", self.name);
        let st = self.state();
        let _ = self.wake.wait_timeout(st, Duration::from_secs(1));
        true
    }

    /// Messages the consumers that may receive now can take (none for a consumer whose
    /// connection's backlog is full). Key_Shared: none while [`MAX_WAITING`] entries wait for
    /// their consumers and none of them can go.
    fn permits(&self, st: &State) -> i64 {
        let open = |c: &Slot| if c.backlog.full() { 0 } else { c.permits };
        match self.kind {
            Kind::Shared => st.consumers.iter().map(|c| open(c).max(0)).sum(),
            Kind::KeyShared => {
                let permits = st.consumers.iter().map(|c| open(c).max(0)).sum();
                let stuck = st.redeliver.len() >= MAX_WAITING
                    && !st.redeliver.iter().any(|p| st.redeliverable(*p));
                if stuck { 0 } else { permits }
            }
            Kind::Exclusive | Kind::Failover => st.consumers.first().map_or(0, open),
        }
    }

    /// Wakes the dispatcher to look at its consumers again.
    fn wake(&self) {
        let _st = self.state();
        self.wake.notify_all();
    }

    /// An entry to deliver again, with the batch indexes the cursor holds acknowledged; `None`
    /// when it is acknowledged whole or gone.
    fn reread(&self, pos: Position) -> Option<Entry> {
        if self.cursor.is_acked(pos).unwrap_or(true) {
            return None;
        }
        let mut entry = self.topic.read(pos).ok()?;
        if entry.num_messages > 1 {
            let mut acked = roaring::RoaringBitmap::new();
            for i in 0..entry.num_messages {
                if self.cursor.is_batch_index_acked(pos, i).unwrap_or(false) {
                    acked.insert(i);
                }
            }
            if !acked.is_empty() {
                entry.acked_batch_indexes = Some(acked);
            }
        }
        Some(entry)
    }

    /// Sends `entry` to a consumer, or queues it to deliver again when none may take it now.
    /// `fresh`: read from the cursor now (not delivered before); a fresh Key_Shared entry
    /// waits behind every entry of its key hash waiting to be delivered again.
    fn dispatch(&self, st: &mut State, entry: Entry, fresh: bool) {
        let pos = entry.position;
        let Some(stored) = decode_entry(&entry.payload) else {
            log::warn!(
                "subscription {}: entry {pos:?} is not a message; skipped",
                self.name
            );
            return;
        };
        let Ok(metadata) = proto::MessageMetadata::decode(stored.metadata) else {
            log::warn!(
                "subscription {}: entry {pos:?} has bad metadata; skipped",
                self.name
            );
            return;
        };
        let size = entry.num_messages;
        let acked = |i: u32| {
            entry
                .acked_batch_indexes
                .as_ref()
                .is_some_and(|a| a.contains(i))
        };
        let unacked = (0..size).filter(|i| !acked(*i)).count() as i64;
        let ack_set = if entry.acked_batch_indexes.is_some() {
            dispatch_ack_set(size, acked)
        } else {
            Vec::new()
        };
        let chosen = match self.kind {
            Kind::Exclusive | Kind::Failover => st.consumers.first().map(|_| 0),
            Kind::Shared => {
                let n = st.consumers.len();
                (0..n)
                    .map(|k| (st.next + k) % n)
                    .find(|&i| st.consumers[i].permits > 0 && !st.consumers[i].backlog.full())
            }
            Kind::KeyShared => {
                let hash = key_hash(&entry_key(&metadata, stored.payload));
                st.hashes.insert(pos, hash);
                let behind = fresh && st.redeliver.iter().any(|p| st.hashes.get(p) == Some(&hash));
                if behind {
                    None
                } else {
                    st.key_owner(pos, hash)
                }
            }
        };
        let Some(i) = chosen else {
            st.redeliver.insert(pos);
            return;
        };
        st.next = i + 1;
        st.last_batch = size;
        let c = &mut st.consumers[i];
        c.permits -= unacked;
        let message = Message {
            command: BaseCommand {
                r#type: Type::Message as i32,
                message: Some(proto::CommandMessage {
                    consumer_id: c.consumer_id,
                    message_id: message_id(pos, None),
                    redelivery_count: st.redeliveries.get(&pos).copied(),
                    ack_set,
                    consumer_epoch: c.epoch,
                }),
                ..Default::default()
            },
            payload: Some(Payload {
                metadata,
                data: stored.payload.to_vec(),
            }),
        };
        let key = c.key;
        let queued = backlog_size(&message);
        c.backlog.bytes.fetch_add(queued, Ordering::SeqCst);
        if c.out.send(message).is_ok() {
            st.pending.insert(pos, (key, size));
        } else {
            st.redeliver.insert(pos);
        }
    }
}

/// A command without payload.
pub fn command(command: BaseCommand) -> Message {
    Message {
        command,
        payload: None,
    }
}

fn active_change(consumer_id: u64, is_active: bool) -> Message {
    command(BaseCommand {
        r#type: Type::ActiveConsumerChange as i32,
        active_consumer_change: Some(proto::CommandActiveConsumerChange {
            consumer_id,
            is_active: Some(is_active),
        }),
        ..Default::default()
    })
}
