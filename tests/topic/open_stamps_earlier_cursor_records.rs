//! The topic open that stamps cursor records of an earlier release with their
//! identity (`claim_record` in src/ledger/open.rs), with a power cut at every storage operation
//! of that open: a restart opens the topic and the cursor to the state it held.

use crate::support;

use std::sync::Arc;

use ackstore::{CursorOptions, ManagedLedger};
use support::crash::{Points, cut_everywhere_after};
use support::topic::append_n;

#[test]
fn a_power_cut_at_every_step_of_the_stamping_open() {
    let c = support::topic::config(10);
    let clean = cut_everywhere_after(
        Points::EVERY,
        |disk| {
            // An earlier release's directory: its cursors on cursor ledgers.
            let earlier = support::config::on_cursor_ledgers(c.clone());
            let t = ManagedLedger::open_with_storage(Arc::new(disk.clone()), earlier).unwrap();
            let ps = append_n(&t, 40);
            t.sync().unwrap();
            for (k, name) in ["a", "b", "c"].iter().enumerate() {
                let cur = t.open_cursor(name, CursorOptions::default()).unwrap();
                for &p in ps.iter().skip(k + 1).step_by(3) {
                    cur.ack(p).unwrap();
                }
                cur.close().unwrap();
            }
            t.close().unwrap();
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
