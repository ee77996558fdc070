//! The calls that move mark-delete over a range (`ack_cumulative`, `skip_entries`,
//! `mark_delete_with_properties`, and an ack of the entry after mark-delete that absorbs the
//! acknowledged entries after it) with a read failing at each step in turn, under a budget that
//! keeps only the partition in use resident, so the acknowledged entries they pass are on the
//! disk: a call answers `Ok` with the model's state, or fails having changed nothing (the ack
//! at the floor: at most a part of the call, never mark-delete over an ack it kept); the same
//! call again then completes it, and a flush and reopen keep exactly the model (a part applied
//! by a failed call is flushed too, although the call again answers that nothing changed).

use crate::support;

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::failing_loads::{FIRST, SPAN, reopened, small_topic};
use ackstore::{Cursor, MemStorage, Position};
use support::tap::FailOne;
use support::workload::EntryModel as Model;

/// What the cursor of [`small_topic`] acknowledged and flushed besides mark-delete at #4: two
/// entries in the third partition, so that a run after mark-delete crosses partitions.
const ACKED: [usize; 5] = [6, SPAN + 5, 2 * SPAN + 7, 2 * SPAN + 9, FIRST + 3];

/// `m` in a few words: mark-delete, how many entries are acknowledged individually, and how
/// many of those are at or right after mark-delete (never any).
fn describe(m: &Model) -> String {
    let floor = m.floor();
    let wrong = m.acked.iter().filter(|&&i| i <= floor).count();
    format!(
        "mark {:?}, {} acked after it, {wrong} of them at or right after it",
        m.mark,
        m.acked.len()
    )
}

/// The cursor holds `want`.
fn holds(c: &Cursor, ps: &[Position], want: &Model, what: &str) {
    let got = Model::of(c, ps);
    assert!(
        got == *want,
        "{what}: {}, not {}",
        describe(&got),
        describe(want)
    );
}

/// A call that moves mark-delete, what it runs after (more acks, flushed), and the model's
/// state after it.
struct Call {
    name: &'static str,
    setup: fn(&Cursor, &[Position], &mut Model),
    /// Whether a failure must change nothing (else it may apply a part of the call).
    strict: bool,
    run: fn(&Cursor, &[Position]) -> ackstore::Result<()>,
    want: fn(&Model) -> Model,
}

fn calls() -> Vec<Call> {
    vec![
        Call {
            name: "ack_cumulative into the partition of #2*SPAN+7",
            setup: |_, _, _| {},
            strict: true,
            run: |c, ps| c.ack_cumulative(ps[2 * SPAN + 8]).map(drop),
            want: |m| {
                let mut m = m.clone();
                m.ack_cumulative(2 * SPAN + 8);
                m
            },
        },
        Call {
            name: "ack_cumulative onto the entry before #FIRST+3",
            setup: |_, _, _| {},
            strict: true,
            run: |c, ps| c.ack_cumulative(ps[FIRST + 2]).map(drop),
            want: |m| {
                let mut m = m.clone();
                m.ack_cumulative(FIRST + 2);
                m
            },
        },
        Call {
            name: "skip_entries onto the entry before #2*SPAN+9",
            setup: |_, _, _| {},
            strict: true,
            // From #5 to #2*SPAN+8, less the three acknowledged entries stepped over.
            run: |c, _| c.skip_entries(2 * SPAN as u64 + 1).map(drop),
            want: |m| {
                let mut m = m.clone();
                m.ack_cumulative(2 * SPAN + 8);
                m
            },
        },
        Call {
            name: "mark_delete_with_properties into the partition of #SPAN+5",
            setup: |_, _, _| {},
            strict: true,
            run: |c, ps| {
                c.mark_delete_with_properties(ps[SPAN + 4], BTreeMap::from([("k".into(), 1)]))
                    .map(drop)
            },
            want: |m| {
                let mut m = m.clone();
                m.ack_cumulative(SPAN + 4);
                m
            },
        },
        Call {
            name: "ack of the entry after mark-delete, #6 to the end of its partition acknowledged",
            // The range ends at its partition's last entry: telling where it ends loads the
            // next partition (#SPAN+5), which evicts the range's own.
            setup: |c, ps, m| {
                let group: Vec<usize> = (7..SPAN).collect();
                let positions: Vec<Position> = group.iter().map(|&i| ps[i]).collect();
                c.ack_many(&positions).unwrap();
                m.ack_many(&group);
                c.flush().unwrap();
            },
            // Past the entry it fills, an ack may stop part of the way.
            strict: false,
            run: |c, ps| c.ack(ps[5]).map(drop),
            want: |m| {
                let mut m = m.clone();
                m.ack(5);
                m
            },
        },
    ]
}

#[test]
fn a_failure_at_each_step_of_a_cumulative_ack_changes_nothing_and_the_call_again_completes_it() {
    let mut broken = Vec::new();
    for call in calls() {
        let mut failures = 0;
        for at in 1.. {
            let disk = MemStorage::new();
            let hook = Arc::new(FailOne::default());
            let (topic, ps, c, mut before) = small_topic(&disk, hook.clone(), &ACKED, false);
            (call.setup)(&c, &ps, &mut before);
            let full = (call.want)(&before);
            hook.arm(at);
            let answer = (call.run)(&c, &ps);
            hook.arm(0);
            let failed = hook.failed.lock().unwrap().take();
            let what = format!(
                "{}, failure at {at} ({failed:?}), answered {answer:?}",
                call.name
            );
            let after = Model::of(&c, &ps);
            match answer {
                Ok(()) => holds(&c, &ps, &full, &what),
                Err(_) => {
                    failures += 1;
                    let valid = if call.strict {
                        after == before
                    } else {
                        before.within(&after)
                            && after.within(&full)
                            && after.acked.iter().all(|&i| i > after.floor())
                    };
                    if !valid {
                        broken.push(format!(
                            "{what}: {}, not {}",
                            describe(&after),
                            describe(&before)
                        ));
                    }
                    (call.run)(&c, &ps).unwrap_or_else(|e| panic!("{what}: again: {e}"));
                    holds(&c, &ps, &full, &format!("{what}: again"));
                }
            }
            c.flush().unwrap();
            drop(c);
            topic.close().unwrap();
            let (_topic, c) = reopened(&disk);
            holds(&c, &ps, &full, &format!("{what}: reopened"));
            if failed.is_none() {
                break;
            }
        }
        assert!(failures > 0, "{}: no read failed", call.name);
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}
