//! A power cut in the middle of a seek backwards, followed by a trim before the cursor is
//! opened again, never deletes entries the recovered cursor still has to deliver; and the state a
//! seek committed is never walked back past. On a topic opened alone and on a store's topic.

use crate::support;

use ackstore::InitialPosition;
use support::crash::{Cut, Points, cut_everywhere_after};
use support::topic::{Host, append_n, at, on_each_host, read_positions, reopen_hosted};

#[test]
fn a_trim_after_a_crash_mid_seek_keeps_every_entry_the_cursor_will_redeliver() {
    on_each_host(trim_after_a_crash_mid_seek);
}

fn trim_after_a_crash_mid_seek(host: Host) {
    let clean = cut_everywhere_after(
        Points { from: 1, step: 1 },
        |disk| {
            let topic = reopen_hosted(host, disk, 3);
            let p = append_n(&topic, 9);
            topic.sync().unwrap();
            let c = topic
                .open_cursor("sub", at(InitialPosition::Earliest, false))
                .unwrap();
            c.ack_cumulative(p[5]).unwrap();
            c.close().unwrap();
            let c = topic
                .open_cursor("sub", at(InitialPosition::Earliest, false))
                .unwrap();
            (topic, c, p)
        },
        |_, (topic, c, p)| {
            let seek = c.seek(p[0]);
            (topic, c, p, seek)
        },
        |disk, Cut { n: k, .. }, (topic, c, p, _seek)| {
            let image = disk.durable_image();
            drop(c);
            // The process is gone: nothing of this handle may run again (no close, no flush).
            std::mem::forget(topic);

            let t2 = reopen_hosted(host, &image, 3);
            t2.trim_consumed().unwrap();
            let c2 = t2
                .open_cursor("sub", at(InitialPosition::Earliest, false))
                .unwrap();
            let expected_first = match c2.mark_delete_position().unwrap() {
                None => p[0],
                Some(md) => {
                    assert_eq!(
                        md, p[5],
                        "cut after {k} writes: mark-delete is the old one or none"
                    );
                    p[6]
                }
            };
            let reads = read_positions(&c2, 20);
            assert_eq!(reads.first(), Some(&expected_first), "cut after {k} writes");
        },
    );
    assert!(clean.result.3.is_ok());
    // A seek appends one journal record and syncs it (on a topic alone, in a segment listed
    // first: the open sealed the one before).
    let least = 3;
    let cut_points = clean.total;
    assert!(
        cut_points >= least,
        "the seek took only {cut_points} writes"
    );
}
