//! File and record names: their numbers written as `format!` writes them, without it.

use ackstore::internals::format::{numbered_name, push_number};
use ackstore::internals::log::ledger_file_name;
use proptest::prelude::*;

/// Numbers at every digit count, and both ends of `u64`.
fn edges() -> Vec<u64> {
    let mut n: Vec<u64> = (0..20).map(|k| 10u64.pow(k)).collect();
    n.extend((1..20).map(|k| 10u64.pow(k) - 1));
    n.extend([u64::MAX, u64::MAX - 1, 12_345]);
    n
}

#[test]
fn a_number_is_written_as_format_writes_it_at_every_width_and_digit_count() {
    for n in edges() {
        for width in 0..=24 {
            let mut out = String::from("x.");
            push_number(&mut out, n, width);
            assert_eq!(out, format!("x.{n:0width$}"), "{n} at width {width}");
        }
    }
}

#[test]
fn names_of_this_release_keep_their_spelling() {
    assert_eq!(ledger_file_name(7), "ledger-00000000000000000007.log");
    assert_eq!(
        ledger_file_name(u64::MAX),
        format!("ledger-{}.log", u64::MAX)
    );
    assert_eq!(numbered_name("cursor-", 42, 0, ""), "cursor-42");
    assert_eq!(numbered_name("t", 0, 0, "-"), "t0-");
    assert_eq!(
        numbered_name("journal-", 3, 16, ".seg"),
        "journal-0000000000000003.seg"
    );
}

proptest! {
    #[test]
    fn any_number_and_width_match_format(
        n in any::<u64>(),
        width in 0usize..32,
        prefix in prop::sample::select(&["", "t", "cursor-", "ledger-", "name."][..]),
        suffix in prop::sample::select(&["", "-", ".log", ".meta"][..]),
    ) {
        let want = format!("{prefix}{n:0width$}{suffix}");
        prop_assert_eq!(numbered_name(prefix, n, width, suffix), want);
    }
}
