//! Ledger file names round trip, and other names are ignored.

use ackstore::internals::log::*;

#[test]
fn ledger_file_names_round_trip_and_others_are_ignored() {
    assert_eq!(ledger_file_name(7), "ledger-00000000000000000007.log");
    assert_eq!(
        parse_ledger_file_name(&ledger_file_name(u64::MAX)),
        Some(u64::MAX)
    );
    for other in [
        "topic.meta",
        "ledger-7.log",
        "ledger-0000000000000000000x.log",
        "LOCK",
    ] {
        assert_eq!(parse_ledger_file_name(other), None);
    }
    assert_eq!(
        parse_ledger_file_name("ledger-99999999999999999999.log"),
        None
    );
}
