//! A topic directory in the layout of earlier releases (one `{name}.meta` file per record,
//! records without topic or cursor identity) opens to the state it holds, and its records move
//! to the versioned layout with identities at their first write.

use crate::support;

use std::sync::Arc;

use ackstore::InitialPosition;
use ackstore::Storage;
use ackstore::internals::format::meta::{CursorRecord, TopicRecord};
use ackstore::internals::meta::{FileMetaStore, MetaStore};
use support::topic::{at, reopen};

#[test]
fn a_directory_of_an_earlier_release_opens_and_moves_to_versioned_records() {
    // An earlier release's directory (a committed sample, its cursors on cursor ledgers) in
    // the layout of the release before it.
    let sample = support::samples::ledger_sample("cursor-ledger-ahead-behind");
    let p = sample.positions();
    let disk = sample.disk();
    support::samples::to_earlier_layout(&disk);
    assert!(disk.list().unwrap().contains(&"topic.meta".to_string()));

    let topic = reopen(&disk, 4);
    assert_eq!(topic.last_position(), p.last().copied());
    let cursor = topic
        .open_cursor("behind", at(InitialPosition::Earliest, false))
        .unwrap();
    assert_eq!(cursor.mark_delete_position().unwrap(), Some(p[1]));
    assert!(cursor.is_acked(p[6]).unwrap());
    assert!(!cursor.is_acked(p[5]).unwrap());
    topic.close().unwrap();
    drop((cursor, topic));

    let files = disk.list().unwrap();
    assert!(
        files
            .iter()
            .all(|f| !f.ends_with(".meta") || f.matches('.').count() == 2),
        "no record of the earlier layout is left: {files:?}"
    );
    let meta = FileMetaStore::new(Arc::new(disk.clone()));
    let topic_id = TopicRecord::decode(&meta.get("topic").unwrap().unwrap().1)
        .unwrap()
        .topic_id;
    assert_ne!(topic_id, 0, "the topic got its identity");
    let record = CursorRecord::decode(&meta.get("cursor-0").unwrap().unwrap().1).unwrap();
    assert_eq!(
        record.identity.map(|i| (i.cursor_id, i.topic_id)),
        Some((0, topic_id))
    );
}
