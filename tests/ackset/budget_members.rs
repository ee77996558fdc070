//! The shared budget's members: who is asked to release memory, in which order, and what leaving does.

use ackstore::internals::ackset::budget::*;
use ackstore::internals::ackset::{
    MAX_PARTITION_BYTES, MemPartitionStore, PartitionKey, RangeSetWrapper,
};
use ackstore::internals::position::Position;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::mpsc;

/// A member as a cursor makes one: its set behind a lock the hook only tries.
struct Member(Mutex<RangeSetWrapper>);

impl Release for Member {
    fn try_release(&self, bytes: usize, what: Releasable) -> usize {
        self.0.try_lock().map_or(0, |mut w| w.release(bytes, what))
    }
}

fn member(budget: &AckBudget) -> Arc<Member> {
    let m = Arc::new(Member(Mutex::new(RangeSetWrapper::new(
        Box::new(MemPartitionStore::new()),
        usize::MAX,
    ))));
    let link = ackstore::internals::steps::join_budget(budget);
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
fn the_least_recently_used_member_is_asked_first() {
    // What a member holding four partitions holds, measured on a budget of its own.
    let probe = member(&AckBudget::new(1 << 20));
    fill(&probe, 0..4);
    let each = resident(&probe);
    // Four such members fill the budget exactly, used in the order 0, 1, 2, 3.
    let budget = AckBudget::new(4 * each);
    let members: Vec<_> = (0..4).map(|_| member(&budget)).collect();
    for (i, m) in members.iter().enumerate() {
        let base = 100 * i as u64;
        fill(m, base..base + 4);
    }
    assert_eq!(budget.stats().resident_bytes, 4 * each);
    // A fifth member grows by one partition, less than the first member holds: only the
    // first is asked.
    let grower = member(&budget);
    fill(&grower, 1000..1001);
    let after: Vec<usize> = members.iter().map(|m| resident(m)).collect();
    assert!(after[0] < each, "{each} -> {after:?}");
    assert_eq!(&after[1..], &[each; 3], "{each} -> {after:?}");
}

/// Members used from other threads after an idle one are more recent than it, whatever those
/// threads did meanwhile: a thread's stamps of last use come from the budget's clock, which
/// it moves only once per `TOUCHES_PER_TICK` touches (so threads acking different cursors do not
/// write one shared line at every ack), and a member a thread keeps using is stamped again at
/// every such tick.
#[test]
fn members_used_from_other_threads_stay_after_an_idle_one() {
    let probe = member(&AckBudget::new(1 << 20));
    fill(&probe, 0..4);
    let each = resident(&probe);
    // The idle member joins last and is used first: its place comes from its use, not its
    // joining.
    let budget = AckBudget::new(4 * each);
    let busy: Vec<_> = (0..3).map(|_| member(&budget)).collect();
    let idle = member(&budget);
    fill(&idle, 900..904);
    // Three threads each use their own member, partition by partition and then over and
    // over (a partition already acked is a touch that changes nothing), past several ticks.
    std::thread::scope(|s| {
        for (i, m) in busy.iter().enumerate() {
            s.spawn(move || {
                let base = 100 * i as u64;
                fill(m, base..base + 4);
                for _ in 0..TOUCHES_PER_TICK * 3 {
                    fill(m, base + 3..base + 4);
                }
            });
        }
    });
    assert_eq!(budget.stats().resident_bytes, 4 * each);
    let grower = member(&budget);
    fill(&grower, 1000..1001);
    assert!(resident(&idle) < each, "the idle member kept {each} bytes");
    let after: Vec<usize> = busy.iter().map(|m| resident(m)).collect();
    assert_eq!(
        after, [each; 3],
        "a busy member was asked before the idle one: {after:?}"
    );
}

/// A thread of its own that runs the jobs given to it one at a time, each to its end before
/// [`Worker::run`] returns: what the thread keeps of its last touch of a budget lasts from job
/// to job.
struct Worker {
    jobs: Option<mpsc::Sender<Box<dyn FnOnce() + Send>>>,
    done: mpsc::Receiver<()>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Worker {
    fn new() -> Self {
        let (jobs, inbox) = mpsc::channel::<Box<dyn FnOnce() + Send>>();
        let (finished, done) = mpsc::channel();
        let thread = std::thread::spawn(move || {
            for job in inbox {
                job();
                finished.send(()).unwrap();
            }
        });
        Self {
            jobs: Some(jobs),
            done,
            thread: Some(thread),
        }
    }

    fn run(&self, job: impl FnOnce() + Send + 'static) {
        self.jobs.as_ref().unwrap().send(Box::new(job)).unwrap();
        self.done.recv().unwrap();
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        drop(self.jobs.take());
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
    }
}

/// Resident bytes of a member holding one partition of each of `ledgers`, measured on a
/// budget of its own.
fn holding(ledgers: std::ops::Range<u64>) -> usize {
    let probe = member(&AckBudget::new(1 << 20));
    fill(&probe, ledgers);
    resident(&probe)
}

/// A member touched once, at any point of its thread's tick (after `before` touches of another
/// member by that thread), then idle, is asked before members that threads already running
/// kept using afterwards for a tick of theirs: their stamps come from a tick of the clock,
/// above any its thread gave within the tick before.
#[test]
fn a_member_used_last_late_in_a_tick_is_asked_before_members_used_for_a_tick_after() {
    let (each, one, two) = (holding(0..4), holding(0..1), holding(0..2));
    assert!(two <= 2 * one, "{one} {two}");
    for before in 0..2 * TOUCHES_PER_TICK {
        // Room for three busy members, the idle one and the member its thread counts on.
        let budget = AckBudget::new(3 * each + 2 * one);
        let workers: Vec<Worker> = (0..4).map(|_| Worker::new()).collect();
        let busy: Vec<_> = (0..3).map(|_| member(&budget)).collect();
        for (i, (w, m)) in workers[1..].iter().zip(&busy).enumerate() {
            let (m, base) = (m.clone(), 100 * i as u64);
            w.run(move || fill(&m, base..base + 4));
        }
        let (counted, idle) = (member(&budget), member(&budget));
        let (c, m) = (counted.clone(), idle.clone());
        workers[0].run(move || {
            for _ in 0..before {
                fill(&c, 500..501);
            }
            fill(&m, 900..901);
        });
        drop(counted);
        for (i, (w, m)) in workers[1..].iter().zip(&busy).enumerate() {
            let (m, base) = (m.clone(), 100 * i as u64);
            w.run(move || {
                for _ in 0..TOUCHES_PER_TICK {
                    fill(&m, base + 3..base + 4);
                }
            });
        }
        assert_eq!(budget.stats().resident_bytes, 3 * each + one);
        let grower = member(&budget);
        fill(&grower, 1000..1002);
        let after: Vec<usize> = busy.iter().map(|m| resident(m)).collect();
        let what = format!(
            "{before} touches before: idle {}, busy {after:?}",
            resident(&idle)
        );
        assert!(resident(&idle) < one, "{what}");
        assert_eq!(after, [each; 3], "{what}");
    }
}

/// One thread using the members of two budgets in turn: in each budget, its members are asked
/// in the order of its uses of them, whatever it did in the other budget in between (`again`
/// more touches of each member after each use, so that its ticks fall anywhere).
#[test]
fn one_thread_using_two_budgets_in_turn_keeps_each_ones_order() {
    let each = holding(0..4);
    for again in 0..2 * TOUCHES_PER_TICK {
        let budgets = [AckBudget::new(3 * each), AckBudget::new(3 * each)];
        let members: Vec<Vec<_>> = budgets
            .iter()
            .map(|b| (0..3).map(|_| member(b)).collect())
            .collect();
        // Used 0, 1, 2, then 0 again, each use of a member of one budget followed by one of
        // the other's.
        for i in [0, 1, 2, 0] {
            for (b, ms) in members.iter().enumerate() {
                let base = 1000 * b as u64 + 100 * i as u64;
                fill(&ms[i], base..base + 4);
                for _ in 0..again {
                    fill(&ms[i], base + 3..base + 4);
                }
            }
        }
        for (b, (budget, ms)) in budgets.iter().zip(&members).enumerate() {
            assert_eq!(budget.stats().resident_bytes, 3 * each);
            let grower = member(budget);
            fill(&grower, 5000..5001);
            let after: Vec<usize> = ms.iter().map(|m| resident(m)).collect();
            let what = format!("{again} touches again, budget {b}: {after:?}");
            assert!(after[1] < each, "{what}");
            assert_eq!([after[0], after[2]], [each; 2], "{what}");
        }
    }
}

#[test]
fn members_that_left_or_hold_nothing_are_never_asked() {
    let budget = AckBudget::new(4096);
    let gone = member(&budget);
    fill(&gone, 1..12);
    drop(gone);
    let idle: Vec<_> = (0..100).map(|_| member(&budget)).collect();
    let a = member(&budget);
    fill(&a, 1..12);
    let b = member(&budget);
    fill(&b, 100..112);
    let s = budget.stats();
    assert_eq!(s.members, idle.len() + 2, "{s:?}");
    assert_eq!(s.busy, 0, "a member with nothing was asked: {s:?}");
    assert!(s.released_bytes > 0, "{s:?}");
    assert!(s.resident_bytes <= 4096 + MAX_PARTITION_BYTES, "{s:?}");
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

/// A member publishes as saved only what it could drop: after `add_many` changed a saved
/// partition that was not the one in use (it becomes unsaved and grows), the member holds no
/// saved partition, and another member's growth asks it for saved memory never, so no request
/// comes back empty.
#[test]
fn add_many_on_a_saved_partition_leaves_no_saved_bytes_published() {
    let budget = AckBudget::new(4096);
    let a = member(&budget);
    {
        let mut w = a.0.lock().unwrap();
        // Two partitions of one ledger, both persisted: chunk 0 in the saved list, chunk 1 in
        // use.
        for chunk in [0u64, 1] {
            w.add(Position::new(1, chunk << 16)).unwrap();
            w.mark_persisted(PartitionKey::of(Position::new(1, chunk << 16)));
        }
        // One group: many new values in chunk 0 (its array grows), one in chunk 1.
        let group = (1..60u64)
            .map(|e| Position::new(1, e))
            .chain([Position::new(1, (1 << 16) + 1)]);
        assert_eq!(w.add_many(group).unwrap(), 60);
    }
    // Another member needs all the room: `a` holds no saved memory to drop.
    let b = member(&budget);
    fill(&b, 100..120);
    let s = budget.stats();
    assert_eq!(
        s.busy, 0,
        "a member was asked for saved memory it did not hold: {s:?}"
    );
    assert!(s.released_bytes > 0, "{s:?}");
    assert!(s.resident_bytes <= 4096 + MAX_PARTITION_BYTES, "{s:?}");
}
