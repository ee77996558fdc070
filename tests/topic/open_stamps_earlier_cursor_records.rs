//! The topic open that stamps cursor records of an earlier release with their
//! identity (`claim_record` in src/ledger/open.rs), with a power cut at every storage operation
//! of that open: a restart opens the topic and the cursor to the state it held.

use crate::support;

use std::sync::Arc;

use ackstore::{CursorOptions, ManagedLedger};
use support::crash::{Points, cut_everywhere_after};

#[test]
fn a_power_cut_at_every_step_of_the_stamping_open() {
    let c = support::topic::config(10);
    let clean = cut_everywhere_after(
        Points::EVERY,
        |disk| {
            // An earlier release's directory (a committed sample: cursors `a`, `b` and `c` on
            // cursor ledgers, acking every third entry from the second, third and fourth).
            let sample = support::samples::ledger_sample("cursor-ledger-three");
            sample.load(disk);
            let ps = sample.positions();
            support::samples::to_earlier_layout(disk);
            ps
        },
        |disk, ps| {
            let opened = ManagedLedger::open_with_storage(Arc::new(disk.clone()), c.clone())
                .and_then(|t| {
                    let cur = t.open_cursor("b", CursorOptions::default())?;
                    cur.ack(ps[0])?;
                    cur.close()?;
                    t.close()
                });
            (ps, opened.is_ok())
        },
        |disk, cut, (ps, ok)| {
            for round in 0..2 {
                let image = disk.durable_image();
                let t = ManagedLedger::open_with_storage(Arc::new(image.clone()), c.clone())
                    .unwrap_or_else(|e| {
                        panic!("cut {}/{} round {round}: open: {e}", cut.n, cut.total)
                    });
                for (k, name) in ["a", "b", "c"].iter().enumerate() {
                    let cur = t
                        .open_cursor(name, CursorOptions::default())
                        .unwrap_or_else(|e| {
                            panic!("cut {}/{}: cursor {name}: {e}", cut.n, cut.total)
                        });
                    for (i, &p) in ps.iter().enumerate() {
                        let want = i > k && (i - k - 1) % 3 == 0;
                        let got = cur.is_acked(p).unwrap();
                        if *name == "b" && i == 0 {
                            if ok {
                                assert!(got, "cut {}/{}: close Ok, lost", cut.n, cut.total);
                            }
                            continue;
                        }
                        assert_eq!(
                            got, want,
                            "cut {}/{}: cursor {name} at {i}",
                            cut.n, cut.total
                        );
                    }
                }
                t.close().unwrap();
            }
        },
    );
    assert!(clean.result.1);
    eprintln!("{} operations", clean.total);
}
