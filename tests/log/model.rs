//! Random sequences of log operations, clean reopens and power cuts (with any part of the
//! unsynced tail kept), checked against a plain model of what each call was told.

use crate::support;

use std::sync::Arc;

use ackstore::MemStorage;
use ackstore::internals::log::{EntryLog, LogConfig};
use proptest::prelude::*;
use support::crash::torn_image;
use support::log_model::Model;

#[derive(Debug, Clone)]
enum Op {
    Create,
    Append(usize),
    Sync(usize),
    Seal(usize),
    Delete(usize),
    Reopen,
    /// Power cut keeping this many bytes of each file's unsynced tail.
    Crash(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        1 => Just(Op::Create),
        8 => (0..4usize).prop_map(Op::Append),
        3 => (0..4usize).prop_map(Op::Sync),
        1 => (0..4usize).prop_map(Op::Seal),
        1 => (0..4usize).prop_map(Op::Delete),
        1 => Just(Op::Reopen),
        2 => (0..600usize).prop_map(Op::Crash),
    ]
}

fn open(disk: &MemStorage) -> EntryLog {
    EntryLog::open(Arc::new(disk.clone()), LogConfig::default()).unwrap()
}

/// After a reopen, the model becomes what the log now holds (all of it durable).
fn adopt(model: &mut Model, log: &EntryLog) {
    model.check_recovered(log);
    let ids = log.ledger_ids();
    model.ledgers.retain(|id, _| ids.contains(id));
    for id in ids {
        let info = log.ledger_info(id).unwrap();
        let l = model.ledgers.entry(id).or_default();
        l.appended.truncate(usize::try_from(info.entries).unwrap());
        l.synced = l.appended.len();
        l.sealed = info.sealed;
        l.seal_started = info.sealed;
    }
}

/// The `i`-th (modulo) ledger of the model that was not deleted, if any.
fn pick(model: &Model, i: usize) -> Option<u64> {
    let live: Vec<u64> = model
        .ledgers
        .iter()
        .filter(|(_, l)| !l.deleted)
        .map(|(id, _)| *id)
        .collect();
    (!live.is_empty()).then(|| live[i % live.len()])
}

proptest! {
    #![proptest_config(support::harness::proptest_config(200))]

    #[test]
    fn random_operations_and_power_cuts_match_the_model(ops in prop::collection::vec(op(), 1..60)) {
        let mut disk = MemStorage::new();
        let mut log = open(&disk);
        let mut model = Model::default();
        for op in ops {
            match op {
                Op::Create => {
                    model.create(&log).unwrap();
                }
                Op::Append(i) => {
                    if let Some(id) = pick(&model, i) {
                        if model.ledgers[&id].sealed {
                            prop_assert!(log.append(id, support::log_model::meta(0), b"").is_err());
                        } else {
                            model.append(&log, id).unwrap();
                        }
                    }
                }
                Op::Sync(i) => {
                    if let Some(id) = pick(&model, i) {
                        model.sync(&log, id).unwrap();
                    }
                }
                Op::Seal(i) => {
                    if let Some(id) = pick(&model, i) {
                        model.seal(&log, id).unwrap();
                    }
                }
                Op::Delete(i) => {
                    if let Some(id) = pick(&model, i) {
                        model.delete(&log, id).unwrap();
                    }
                }
                Op::Reopen => {
                    drop(log);
                    log = open(&disk);
                    prop_assert!(log.recovery_report().is_empty());
                    adopt(&mut model, &log);
                }
                Op::Crash(k) => {
                    drop(log);
                    disk = torn_image(&disk, |_| k);
                    log = open(&disk);
                    adopt(&mut model, &log);
                }
            }
        }
    }
}
