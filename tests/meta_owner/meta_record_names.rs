//! Only generated record names are accepted.

use ackstore::internals::error::Error;
use ackstore::internals::meta::*;

#[test]
fn only_generated_record_names_are_accepted() {
    for good in ["topic", "cursor-17", "cursor_0", "a", &"a".repeat(64)] {
        validate_record_name(good).unwrap();
    }
    for bad in [
        "",
        "Topic",
        "17-cursor",
        "-x",
        "topic.meta",
        "topic.meta.tmp",
        "../topic",
        "a/b",
        "a\0b",
        "é",
        &"a".repeat(65),
    ] {
        assert!(
            matches!(
                validate_record_name(bad),
                Err(Error::InvalidArgument { .. })
            ),
            "{bad:?} accepted"
        );
    }
}
