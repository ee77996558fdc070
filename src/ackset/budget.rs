//! [`AckBudget`]: one memory budget shared by the ack sets of many cursors (a store's
//! `ack_memory_bytes`).
//!
//! Owns: the shared total of the members' resident bytes, their order of last use, and the
//! rule that brings the total back within the limit. Each member ([`BudgetLink`], held by one
//! [`RangeSetWrapper`](super::RangeSetWrapper)) publishes its resident bytes (partitions,
//! cache table and charged state such as partial entries) after every operation; when the total
//! is over the limit, the member that just changed asks the others to release memory, least
//! recently used first, through their [`Release`] hook, before it evicts its own.
//!
//! Lock order: a member asks others while its own cursor's lock is held, so a hook must never
//! block on its cursor's lock: it tries it and releases nothing when the cursor is busy (that
//! cursor is being changed, and brings the total down itself at the end of its operation).
//! The member list's lock is never held while a hook runs.
//!
//! The bound this keeps: once every operation has ended, the total is within the limit plus
//! the hot partition of the member that changed last; while operations run, plus one
//! partition (and what it just loaded) per member being changed.
//!
//! Must never: block on a member's lock, or run a hook under the member list's lock.

use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

/// What a member of an [`AckBudget`] does when another member needs memory: release up to
/// `bytes` of its resident ack state without blocking (a busy member releases nothing), and
/// return how many bytes it released.
pub(crate) trait Release: Send + Sync {
    /// Releases up to `bytes` bytes (at least that many if it can), never blocking on a lock.
    fn try_release(&self, bytes: usize) -> usize;
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

struct Member {
    id: u64,
    resident: Arc<AtomicUsize>,
    last_used: Arc<AtomicU64>,
    hook: Option<Weak<dyn Release>>,
}

struct Shared {
    limit: usize,
    total: AtomicUsize,
    peak: AtomicUsize,
    clock: AtomicU64,
    next_id: AtomicU64,
    released: AtomicU64,
    busy: AtomicU64,
    members: Mutex<Vec<Member>>,
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
            next_id: AtomicU64::new(0),
            released: AtomicU64::new(0),
            busy: AtomicU64::new(0),
            members: Mutex::new(Vec::new()),
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
            members: self.members().len(),
            released_bytes: self.0.released.load(Ordering::SeqCst),
            busy: self.0.busy.load(Ordering::SeqCst),
        }
    }

    /// A new member, with no hook yet (it cannot be asked to release until
    /// [`BudgetLink::set_release`]).
    #[must_use]
    pub(crate) fn join(&self) -> BudgetLink {
        let id = self.0.next_id.fetch_add(1, Ordering::SeqCst);
        let resident = Arc::new(AtomicUsize::new(0));
        let last_used = Arc::new(AtomicU64::new(self.0.clock.fetch_add(1, Ordering::SeqCst)));
        self.members().push(Member {
            id,
            resident: Arc::clone(&resident),
            last_used: Arc::clone(&last_used),
            hook: None,
        });
        BudgetLink {
            budget: self.clone(),
            id,
            resident,
            last_used,
        }
    }

    fn members(&self) -> std::sync::MutexGuard<'_, Vec<Member>> {
        // Plain data; keep it after a panic elsewhere.
        self.0
            .members
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// One member's place in an [`AckBudget`]; leaving (dropping it) takes its bytes off the
/// total.
pub(crate) struct BudgetLink {
    budget: AckBudget,
    id: u64,
    resident: Arc<AtomicUsize>,
    last_used: Arc<AtomicU64>,
}

impl fmt::Debug for BudgetLink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BudgetLink")
            .field("id", &self.id)
            .field("resident", &self.resident.load(Ordering::SeqCst))
            .finish_non_exhaustive()
    }
}

impl BudgetLink {
    /// The budget this member belongs to.
    #[must_use]
    pub(crate) fn budget(&self) -> &AckBudget {
        &self.budget
    }

    /// Sets the hook other members call to ask this one to release memory.
    pub(crate) fn set_release(&self, hook: Weak<dyn Release>) {
        if let Some(m) = self.budget.members().iter_mut().find(|m| m.id == self.id) {
            m.hook = Some(hook);
        }
    }

    /// Publishes this member's resident bytes and marks it most recently used.
    pub(crate) fn publish(&self, bytes: usize) {
        let shared = &self.budget.0;
        self.last_used.store(
            shared.clock.fetch_add(1, Ordering::SeqCst),
            Ordering::SeqCst,
        );
        let old = self.resident.swap(bytes, Ordering::SeqCst);
        if bytes >= old {
            shared.total.fetch_add(bytes - old, Ordering::SeqCst);
        } else {
            shared.total.fetch_sub(old - bytes, Ordering::SeqCst);
        }
    }

    /// Records the total after an operation ended, for the peak.
    pub(crate) fn settled(&self) {
        let shared = &self.budget.0;
        shared
            .peak
            .fetch_max(shared.total.load(Ordering::SeqCst), Ordering::SeqCst);
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
            .saturating_sub(self.resident.load(Ordering::SeqCst));
        shared.limit.saturating_sub(others)
    }

    /// Asks the other members, least recently used first, to release memory until the total
    /// is within the limit or every one was asked. Never blocks on a member (see the module
    /// docs); the member list's lock is not held while they release.
    pub(crate) fn reclaim_from_others(&self) {
        if self.excess() == 0 {
            return;
        }
        let mut others: Vec<(u64, Arc<dyn Release>)> = {
            let mut members = self.budget.members();
            members.retain(|m| m.hook.as_ref().is_none_or(|h| h.strong_count() > 0));
            members
                .iter()
                .filter(|m| m.id != self.id && m.resident.load(Ordering::SeqCst) > 0)
                .filter_map(|m| {
                    let hook = m.hook.as_ref()?.upgrade()?;
                    Some((m.last_used.load(Ordering::SeqCst), hook))
                })
                .collect()
        };
        others.sort_by_key(|(used, _)| *used);
        let shared = &self.budget.0;
        for (_, hook) in others {
            let want = self.excess();
            if want == 0 {
                break;
            }
            let released = hook.try_release(want);
            if released == 0 {
                shared.busy.fetch_add(1, Ordering::SeqCst);
            }
            shared.released.fetch_add(released as u64, Ordering::SeqCst);
        }
    }
}

impl Drop for BudgetLink {
    fn drop(&mut self) {
        let old = self.resident.swap(0, Ordering::SeqCst);
        self.budget.0.total.fetch_sub(old, Ordering::SeqCst);
        let id = self.id;
        self.budget.members().retain(|m| m.id != id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ackset::{MAX_PARTITION_BYTES, MemPartitionStore, RangeSetWrapper};
    use crate::position::Position;

    /// A member as a cursor makes one: its set behind a lock the hook only tries.
    struct Member(Mutex<RangeSetWrapper>);

    impl Release for Member {
        fn try_release(&self, bytes: usize) -> usize {
            self.0.try_lock().map_or(0, |mut w| w.release(bytes))
        }
    }

    fn member(budget: &AckBudget) -> Arc<Member> {
        let m = Arc::new(Member(Mutex::new(RangeSetWrapper::new(
            Box::new(MemPartitionStore::new()),
            usize::MAX,
        ))));
        let link = budget.join();
        let hook: Arc<dyn Release> = m.clone();
        link.set_release(Arc::downgrade(&hook));
        m.0.lock().unwrap().join_budget(link);
        m
    }

    /// Acks one entry in each of `ledgers` (one partition each).
    fn fill(m: &Member, ledgers: std::ops::Range<u64>) {
        let mut w = m.0.lock().unwrap();
        for l in ledgers {
            w.add(Position::new(l, 1)).unwrap();
        }
    }

    fn resident(m: &Member) -> usize {
        m.0.lock().unwrap().stats().resident_bytes
    }

    #[test]
    fn an_idle_member_gives_its_memory_to_another_members_growth() {
        let budget = AckBudget::new(4096);
        let a = member(&budget);
        let b = member(&budget);
        fill(&a, 1..12);
        let held = resident(&a);
        assert!(held > 2048, "{held}");
        fill(&b, 100..112);
        let s = budget.stats();
        assert!(s.resident_bytes <= 4096 + MAX_PARTITION_BYTES, "{s:?}");
        assert!(resident(&a) < held, "a kept everything: {s:?}");
        assert!(s.released_bytes > 0);
        assert_eq!(s.resident_bytes, resident(&a) + resident(&b));
        // Every ack is still there, loaded back from the store.
        let mut w = a.0.lock().unwrap();
        assert_eq!(w.ranges().unwrap().len(), 11);
    }

    #[test]
    fn a_busy_member_is_skipped_not_waited_for() {
        let budget = AckBudget::new(2048);
        let a = member(&budget);
        let b = member(&budget);
        fill(&a, 1..12);
        let held = resident(&a);
        // `a` is busy: its lock is held while `b` grows. `b` must not wait for it.
        let guard = a.0.lock().unwrap();
        fill(&b, 100..112);
        let s = budget.stats();
        assert!(s.busy > 0, "{s:?}");
        assert_eq!(guard.stats().resident_bytes, held);
        drop(guard);
        // `a`'s next operation brings the total back, asking the now idle `b`.
        fill(&a, 12..13);
        let s = budget.stats();
        assert!(s.resident_bytes <= 2048 + MAX_PARTITION_BYTES, "{s:?}");
    }

    #[test]
    fn a_member_that_leaves_takes_its_bytes_off_the_total() {
        let budget = AckBudget::new(1 << 20);
        let a = member(&budget);
        fill(&a, 1..5);
        assert!(budget.stats().resident_bytes > 0);
        drop(a);
        let s = budget.stats();
        assert_eq!((s.resident_bytes, s.members), (0, 0), "{s:?}");
    }
}
