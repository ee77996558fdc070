//! Storage names that could escape the directory are refused.

use ackstore::internals::storage::*;

#[test]
fn names_that_could_escape_the_directory_are_refused() {
    for bad in [
        "",
        ".",
        "..",
        "../x",
        "a/b",
        "a\0b",
        ".hidden",
        "é",
        &"x".repeat(129),
    ] {
        assert!(validate_name(bad).is_err(), "{bad:?} accepted");
    }
    for good in [
        "ledger-00000001.log",
        "topic.meta",
        "cursor_7.meta.tmp",
        &"x".repeat(128),
    ] {
        validate_name(good).unwrap();
    }
}
