//! [`AckBudget`]: one memory budget shared by the ack sets of many cursors (a store's
//! `ack_memory_bytes`).
//!
//! Owns: the shared total of the members' resident bytes, the order in which members are
//! asked to release memory, and the rule that brings the total back within the limit. Each
//! member ([`BudgetLink`], held by one [`RangeSetWrapper`](super::RangeSetWrapper)) publishes
//! its resident bytes (partitions, cache table and charged state such as partial entries),
//! and how many of them are *saved* (partitions whose persisted copy is current, so dropping
//! them writes nothing), after every operation; when the total is over the limit, the member
//! that just changed asks the others to release memory through their [`Release`] hook before
//! it evicts its own.
//!
//! Saved memory goes first ([`Releasable::Saved`]): the member asks the others for their saved
//! partitions, evicts its own, and only then asks for anything ([`Releasable::Any`]), which
//! makes a member write a changed partition out before dropping it, on the asking thread. So an
//! ack that needs room costs a write only when no saved partition is left in the budget (or
//! the members holding them are busy).
//!
//! Each of the two asks follows a *revolution*: the members that hold memory of that kind,
//! sorted by last use when the revolution starts, asked one after another from the least
//! recently used; when every one was asked, the next revolution is sorted from the members that
//! hold memory of that kind then. A member used after its revolution was sorted keeps its place
//! in it until the next one (an approximation of least recently used that costs no lock on the
//! ack path). Only members that held memory of the kind since the last sort are ever looked at:
//! a member enters the next revolution's candidates when its bytes of that kind go from zero to
//! nonzero (a flag, so once) or when it was asked and still holds some. So a reclaim costs
//! amortised O(log members) per member asked, whatever the number of members, and joining or
//! leaving the budget costs O(1).
//!
//! Last use is a stamp from the budget's clock, which not every ack writes: a thread moves the
//! clock once per [`TOUCHES_PER_TICK`] of its touches of members (and when it comes back from
//! another budget), and stamps each member it turns to with the clock plus its touches since, so
//! threads acking different cursors of one store do not write one shared cache line at every ack
//! (which cost two such threads a quarter more CPU per ack). A thread's own touches stay in exact
//! order; touches of different threads within one tick of the clock compare in no particular
//! order, and a member a thread keeps using is stamped again at each tick of that thread's.
//!
//! Lock order: a member asks others while its own cursor's lock is held, so a hook must never
//! block on its cursor's lock: it tries it and releases nothing when the cursor is busy (that
//! cursor is being changed, and brings the total down itself at the end of its operation).
//! The revolution's lock is never held while a hook runs.
//!
//! The bound this keeps: once every operation has ended, the total is within the limit plus
//! the hot partition of the member that changed last; while operations run, plus one
//! partition (and what it just loaded) per member being changed.
//!
//! Must never: block on a member's lock, or run a hook under the revolution's lock.

use std::cell::Cell;
use std::collections::VecDeque;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

/// What a member of an [`AckBudget`] does when another member needs memory: release up to
/// `bytes` of its resident ack state of the kind asked for without blocking (a busy member
/// releases nothing), and return how many bytes it released.
pub trait Release: Send + Sync {
    /// Releases up to `bytes` bytes of `what` (at least that many if it can), never blocking
    /// on a lock.
    fn try_release(&self, bytes: usize, what: Releasable) -> usize;
}

/// Which of its resident memory a member is asked to release.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Releasable {
    /// Partitions whose persisted copy is current: dropping them writes nothing.
    Saved,
    /// Anything, saved partitions first; a partition the store does not hold is written out
    /// before it is dropped.
    Any,
}

impl Releasable {
    /// The slot of this kind in a member's flags and the budget's revolutions.
    fn slot(self) -> usize {
        match self {
            Self::Saved => 0,
            Self::Any => 1,
        }
    }
}

/// Figures of an [`AckBudget`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AckBudgetStats {
    /// The limit.
    pub limit_bytes: usize,
    /// Resident bytes of every member together.
    pub resident_bytes: usize,
    /// The highest `resident_bytes` seen after an operation ended.
    pub peak_resident_bytes: usize,
    /// Members (cursors) sharing the budget.
    pub members: usize,
    /// Bytes members released because another needed them.
    pub released_bytes: u64,
    /// Requests to release that released nothing (the member was busy, or held only what it
    /// was using).
    pub busy: u64,
}

/// What the budget knows of one member; the member's [`BudgetLink`] holds the only strong
/// reference, so a member that left is a dead `Weak` the next sort drops.
struct Member {
    /// Unique among the members of every budget of the process (an address can be reused once
    /// a member is gone), for a thread's last touch ([`Shared::touch`]).
    id: u64,
    resident: AtomicUsize,
    /// The part of `resident` that is saved (see [`Releasable::Saved`]).
    saved: AtomicUsize,
    last_used: AtomicU64,
    /// Per [`Releasable::slot`]: whether the member is in the current revolution of that kind
    /// or among the next one's candidates. Set by the member when its bytes of the kind become
    /// nonzero, cleared by a sort or an ask that finds it holding none.
    listed: [AtomicBool; 2],
    hook: OnceLock<Weak<dyn Release>>,
}

impl Member {
    /// Bytes of `what` the member holds.
    fn holds(&self, what: Releasable) -> usize {
        match what {
            Releasable::Saved => self.saved.load(Ordering::SeqCst),
            Releasable::Any => self.resident.load(Ordering::SeqCst),
        }
    }

    /// Takes the member off the revolution of `what`, then lists it again unless it holds none
    /// of `what`; returns whether it was listed again. The flag is cleared before the check, so
    /// a member whose bytes become nonzero meanwhile lists itself (at most once, by the flag's
    /// swap).
    fn relist(&self, what: Releasable) -> bool {
        let listed = &self.listed[what.slot()];
        listed.store(false, Ordering::SeqCst);
        self.holds(what) > 0 && !listed.swap(true, Ordering::SeqCst)
    }
}

/// The order members are asked in for one [`Releasable`] (see the module docs).
#[derive(Default)]
struct Revolution {
    /// Members still to be asked in this revolution, least recently used first.
    queue: VecDeque<Arc<Member>>,
    /// Members that held memory since the queue was sorted and are not in it.
    candidates: Vec<Weak<Member>>,
}

struct Shared {
    limit: usize,
    total: AtomicUsize,
    peak: AtomicUsize,
    clock: AtomicU64,
    members: AtomicUsize,
    released: AtomicU64,
    busy: AtomicU64,
    /// One revolution per [`Releasable::slot`].
    revolution: Mutex<[Revolution; 2]>,
}

/// Touches of members of one budget a thread makes per tick of that budget's clock.
pub const TOUCHES_PER_TICK: u64 = 64;

thread_local! {
    /// This thread's last touch: the budget (its address), the member (its id) and the
    /// touches of that budget since the thread last moved its clock.
    static LAST_TOUCH: Cell<(usize, u64, u64)> = const { Cell::new((0, 0, 0)) };
}

/// The next member's id (0 is no member's).
static MEMBER_IDS: AtomicU64 = AtomicU64::new(1);

impl Shared {
    /// A touch of the member whose id is `member` by this thread: its new stamp of last use,
    /// or `None` when its stamp stands (this thread touched it last, within one tick; never
    /// when `fresh`, for a member that joins). Stamps this thread gives in one budget only
    /// grow: a tick adds [`TOUCHES_PER_TICK`] to the clock, more than the touches counted on
    /// top of it before.
    fn touch(&self, member: u64, fresh: bool) -> Option<u64> {
        let budget = std::ptr::from_ref(self) as usize;
        LAST_TOUCH.with(|last| {
            let (b, m, n) = last.get();
            let same_budget = b == budget && n + 1 < TOUCHES_PER_TICK;
            if same_budget && m == member && !fresh {
                last.set((b, m, n + 1));
                return None;
            }
            let stamp = if same_budget {
                self.clock.load(Ordering::SeqCst) + n + 1
            } else {
                self.clock.fetch_add(TOUCHES_PER_TICK, Ordering::SeqCst) + TOUCHES_PER_TICK
            };
            last.set((budget, member, if same_budget { n + 1 } else { 0 }));
            Some(stamp)
        })
    }
}

/// One ack memory budget shared by many cursors. Cheap to clone (clones share the budget);
/// two budgets are equal when they are the same budget.
#[derive(Clone)]
pub struct AckBudget(Arc<Shared>);

impl fmt::Debug for AckBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AckBudget")
            .field("stats", &self.stats())
            .finish()
    }
}

impl PartialEq for AckBudget {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for AckBudget {}

impl AckBudget {
    /// A budget of `limit_bytes` with no member.
    #[must_use]
    pub fn new(limit_bytes: usize) -> Self {
        Self(Arc::new(Shared {
            limit: limit_bytes,
            total: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
            clock: AtomicU64::new(0),
            members: AtomicUsize::new(0),
            released: AtomicU64::new(0),
            busy: AtomicU64::new(0),
            revolution: Mutex::new(Default::default()),
        }))
    }

    /// The limit.
    #[must_use]
    pub fn limit(&self) -> usize {
        self.0.limit
    }

    /// Current figures.
    #[must_use]
    pub fn stats(&self) -> AckBudgetStats {
        AckBudgetStats {
            limit_bytes: self.0.limit,
            resident_bytes: self.0.total.load(Ordering::SeqCst),
            peak_resident_bytes: self.0.peak.load(Ordering::SeqCst),
            members: self.0.members.load(Ordering::SeqCst),
            released_bytes: self.0.released.load(Ordering::SeqCst),
            busy: self.0.busy.load(Ordering::SeqCst),
        }
    }

    /// A new member, with no hook yet (it cannot be asked to release until
    /// [`BudgetLink::set_release`]).
    #[must_use]
    pub(crate) fn join(&self) -> BudgetLink {
        self.0.members.fetch_add(1, Ordering::SeqCst);
        let member = Arc::new(Member {
            id: MEMBER_IDS.fetch_add(1, Ordering::Relaxed),
            resident: AtomicUsize::new(0),
            saved: AtomicUsize::new(0),
            last_used: AtomicU64::new(0),
            listed: [AtomicBool::new(false), AtomicBool::new(false)],
            hook: OnceLock::new(),
        });
        // Joining is a use: the newest stamp of this thread.
        if let Some(stamp) = self.0.touch(member.id, true) {
            member.last_used.store(stamp, Ordering::SeqCst);
        }
        BudgetLink {
            budget: self.clone(),
            member,
        }
    }

    fn revolutions(&self) -> std::sync::MutexGuard<'_, [Revolution; 2]> {
        // Plain data; keep it after a panic elsewhere.
        self.0
            .revolution
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// One member's place in an [`AckBudget`]; leaving (dropping it) takes its bytes off the
/// total.
pub struct BudgetLink {
    budget: AckBudget,
    member: Arc<Member>,
}

impl fmt::Debug for BudgetLink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BudgetLink")
            .field("resident", &self.member.resident.load(Ordering::SeqCst))
            .finish_non_exhaustive()
    }
}

impl BudgetLink {
    /// The budget this member belongs to.
    #[must_use]
    pub(crate) fn budget(&self) -> &AckBudget {
        &self.budget
    }

    /// Sets the hook other members call to ask this one to release memory (once; a second
    /// hook is ignored).
    pub fn set_release(&self, hook: Weak<dyn Release>) {
        let _ = self.member.hook.set(hook);
    }

    /// Publishes this member's resident bytes, `saved` of them saved (at most `bytes`), and
    /// marks it most recently used.
    ///
    /// Called after every operation of the member, so it writes the budget's shared counters
    /// only when something changed: the total only when the member's bytes changed, the clock
    /// once per [`TOUCHES_PER_TICK`] touches of this thread (see the module docs), and this
    /// member's stamp when the thread turned to it from another member or moved the clock.
    pub(crate) fn publish(&self, bytes: usize, saved: usize) {
        let shared = &self.budget.0;
        let member = &self.member;
        if let Some(stamp) = shared.touch(member.id, false) {
            // A hint for the next sort, read under the revolution's lock: no ordering needed.
            member.last_used.store(stamp, Ordering::Relaxed);
        }
        if member.resident.load(Ordering::SeqCst) != bytes {
            let old = member.resident.swap(bytes, Ordering::SeqCst);
            if bytes >= old {
                shared.total.fetch_add(bytes - old, Ordering::SeqCst);
            } else {
                shared.total.fetch_sub(old - bytes, Ordering::SeqCst);
            }
        }
        if member.saved.load(Ordering::SeqCst) != saved {
            member.saved.store(saved, Ordering::SeqCst);
        }
        for (held, what) in [(bytes, Releasable::Any), (saved, Releasable::Saved)] {
            if held > 0 && !member.listed[what.slot()].load(Ordering::SeqCst) {
                self.list(what);
            }
        }
    }

    /// Makes this member a candidate of the next revolution of `what`, unless it is listed
    /// already.
    fn list(&self, what: Releasable) {
        if !self.member.listed[what.slot()].swap(true, Ordering::SeqCst) {
            self.budget.revolutions()[what.slot()]
                .candidates
                .push(Arc::downgrade(&self.member));
        }
    }

    /// Records the total after an operation ended, for the peak.
    pub(crate) fn settled(&self) {
        let shared = &self.budget.0;
        let total = shared.total.load(Ordering::SeqCst);
        // A read first: the shared line is written only when the peak rises.
        if total > shared.peak.load(Ordering::SeqCst) {
            shared.peak.fetch_max(total, Ordering::SeqCst);
        }
    }

    /// Bytes the whole budget is over its limit (0 when within).
    #[must_use]
    pub(crate) fn excess(&self) -> usize {
        let shared = &self.budget.0;
        shared
            .total
            .load(Ordering::SeqCst)
            .saturating_sub(shared.limit)
    }

    /// What this member may hold now: the limit less what the others hold.
    #[must_use]
    pub(crate) fn room(&self) -> usize {
        let shared = &self.budget.0;
        let others = shared
            .total
            .load(Ordering::SeqCst)
            .saturating_sub(self.member.resident.load(Ordering::SeqCst));
        shared.limit.saturating_sub(others)
    }

    /// Asks the other members, in the order of the revolution of `what` (least recently used
    /// first), to release memory of that kind until the total is within the limit, or until
    /// every member that held such memory when this call began was asked. Never blocks on a
    /// member (see the module docs); the revolution's lock is not held while they release.
    pub(crate) fn reclaim_from_others(&self, what: Releasable) {
        let shared = &self.budget.0;
        // At most one sort per call: a call that finds the revolution ended sorts the next
        // one, and a call never asks a member twice.
        let mut sorted = false;
        let mut asked_self = false;
        while self.excess() > 0 {
            let Some(next) = self.next_to_ask(what, &mut sorted) else {
                break;
            };
            if Arc::ptr_eq(&next, &self.member) {
                // A member never asks itself; it stays listed for the next revolution.
                if asked_self {
                    break;
                }
                asked_self = true;
                self.push_candidate(what, &next);
                continue;
            }
            // A member that holds none of `what` any more is not asked (nor counted busy).
            if next.holds(what) > 0 {
                let hook = next.hook.get().and_then(Weak::upgrade);
                let released = hook.map_or(0, |h| h.try_release(self.excess(), what));
                if released == 0 {
                    shared.busy.fetch_add(1, Ordering::SeqCst);
                }
                shared.released.fetch_add(released as u64, Ordering::SeqCst);
            }
            // Asked: a member that still holds memory of the kind is a candidate of the next
            // revolution.
            if next.relist(what) {
                self.push_candidate(what, &next);
            }
        }
    }

    /// Makes `member` a candidate of the next revolution of `what` (its flag is set already).
    fn push_candidate(&self, what: Releasable, member: &Arc<Member>) {
        self.budget.revolutions()[what.slot()]
            .candidates
            .push(Arc::downgrade(member));
    }

    /// The next member of the revolution of `what`, sorting the next revolution from the
    /// candidates when this one ended (once per call: `sorted`).
    fn next_to_ask(&self, what: Releasable, sorted: &mut bool) -> Option<Arc<Member>> {
        let mut revolutions = self.budget.revolutions();
        let revolution = &mut revolutions[what.slot()];
        if revolution.queue.is_empty() {
            if *sorted {
                return None;
            }
            *sorted = true;
            let candidates = std::mem::take(&mut revolution.candidates);
            let mut next: Vec<(u64, Arc<Member>)> = Vec::with_capacity(candidates.len());
            for weak in candidates {
                let Some(member) = weak.upgrade() else {
                    continue;
                };
                if member.relist(what) {
                    next.push((member.last_used.load(Ordering::SeqCst), member));
                }
            }
            next.sort_unstable_by_key(|(used, _)| *used);
            revolution.queue = next.into_iter().map(|(_, m)| m).collect();
        }
        revolution.queue.pop_front()
    }
}

impl Drop for BudgetLink {
    fn drop(&mut self) {
        let shared = &self.budget.0;
        self.member.saved.store(0, Ordering::SeqCst);
        let old = self.member.resident.swap(0, Ordering::SeqCst);
        shared.total.fetch_sub(old, Ordering::SeqCst);
        shared.members.fetch_sub(1, Ordering::SeqCst);
    }
}
