//! Attacks on what a failed directory sync latches (the directory forgets the names the sync
//! covered, as the in-memory disk models it), with what the single-threaded test of a roll
//! (`failed_dir_sync_of_a_topic_record.rs`) does not try: a failed directory sync of the
//! catalog at every step of a topic's creation, and a power cut at every step after a failed
//! directory sync. No call of the only owner answers `Fenced`; every `Ok` survives a reopen
//! of what the disk holds.

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use ackstore::{Cursor, Error, ManagedLedger, MemStorage, Position, Storage, Store, StoreConfig};
use support::config::store;
use support::hooked::{Fault, Hooked};
use support::topic::earliest;

const PER_LEDGER: u64 = 4;
const SEGMENT_BYTES: u64 = 16 << 10;

/// What the application was told about one topic and its cursor `c`: the entries appended
/// (with their bytes) and how many of them, from the first, a sync answered `Ok` for; every
/// ack tried, the acks answered `Ok`, and those a flush answered `Ok` for; whether a trim ran.
#[derive(Debug, Default, Clone)]
struct Told {
    appended: Vec<(Position, Vec<u8>)>,
    synced: usize,
    tried: BTreeSet<Position>,
    acked: BTreeSet<Position>,
    flushed: BTreeSet<Position>,
    trimmed: bool,
}

impl Told {
    fn append_and_sync(&mut self, topic: &ManagedLedger, n: usize, tag: &str) -> Result<(), Error> {
        for _ in 0..n {
            let body = format!("{tag}-{}", self.appended.len()).into_bytes();
            let p = topic.append(&body)?;
            self.appended.push((p, body));
        }
        let covered = self.appended.len();
        topic.sync()?;
        self.synced = self.synced.max(covered);
        Ok(())
    }

    /// Acks up to `n` synced entries not tried yet, every other one (holes), through `cursor`.
    fn ack_some(&mut self, cursor: &Cursor, n: usize) -> Result<(), Error> {
        let fresh: Vec<Position> = self.appended[..self.synced]
            .iter()
            .map(|(p, _)| *p)
            .filter(|p| !self.tried.contains(p))
            .step_by(2)
            .take(n)
            .collect();
        for p in fresh {
            self.tried.insert(p);
            cursor.ack(p)?;
            self.acked.insert(p);
        }
        Ok(())
    }

    fn flush(&mut self, cursor: &Cursor) -> Result<(), Error> {
        let covered = self.acked.clone();
        cursor.flush()?;
        self.flushed.extend(covered);
        Ok(())
    }

    fn trim(&mut self, topic: &ManagedLedger) -> Result<(), Error> {
        self.trimmed = true;
        topic.trim_consumed().map(drop)
    }
}

/// Calls and what they answered.
type Outcomes = Vec<(String, Result<(), Error>)>;

/// `Err(message)` unless `holds`.
macro_rules! ensure {
    ($holds:expr, $($message:tt)+) => {
        if !$holds {
            return Err(format!($($message)+));
        }
    };
}

/// `Err` unless every call answered `Ok`, `PreviousIo` or the injected error of the failed
/// directory sync itself: never `Fenced`, with one owner.
fn never_fenced(outcomes: &Outcomes, what: &str) -> Result<(), String> {
    for (call, outcome) in outcomes {
        let fine = match outcome {
            Ok(()) | Err(Error::PreviousIo) => true,
            Err(Error::Io { op, .. }) => *op == "fsync directory",
            Err(_) => false,
        };
        ensure!(fine, "{what}: {call} answered {outcome:?} with one owner");
    }
    Ok(())
}

fn assert_never_fenced(outcomes: &Outcomes, what: &str) {
    never_fenced(outcomes, what).unwrap_or_else(|e| panic!("{e}"));
}

/// Checks what `disk` holds after a power cut now: `verify` finds no damage, the store opens,
/// every topic of `told` holds every entry a sync answered `Ok` for, its cursor `c` keeps every
/// ack a flush answered `Ok` for and holds no ack never tried, and both take writes again.
fn durable_holds(
    disk: &MemStorage,
    config: &StoreConfig,
    told: &BTreeMap<String, Told>,
    what: &str,
) -> Result<(), String> {
    let image: Arc<dyn Storage> = Arc::new(disk.durable_image());
    let report = ackstore::check::verify(&image).map_err(|e| format!("{what}: verify: {e}"))?;
    ensure!(report.is_sound(), "{what}: verify: {report}");
    let reopened = Store::open_with_storage(image, config.clone())
        .map_err(|e| format!("{what}: the reopen of the image failed: {e}"))?;
    for (name, told) in told {
        let topic = reopened
            .topic(name)
            .map_err(|e| format!("{what}: topic {name} after the reopen: {e}"))?;
        let cursor = topic
            .open_cursor("c", earliest())
            .map_err(|e| format!("{what}: cursor c of {name} after the reopen: {e}"))?;
        for (p, body) in &told.appended[..told.synced] {
            match topic.read(*p) {
                Ok(entry) => ensure!(&entry.payload == body, "{what}: {name} {p} changed"),
                // A trim removes ledgers whose entries every cursor acknowledged.
                Err(Error::NoSuchEntry(_)) if told.trimmed && told.tried.contains(p) => continue,
                Err(e) => return Err(format!("{what}: {name} {p} was synced, now {e}")),
            }
            let acked = cursor
                .is_acked(*p)
                .map_err(|e| format!("{what}: is_acked {name} {p}: {e}"))?;
            ensure!(
                !told.flushed.contains(p) || acked,
                "{what}: {name} {p} flushed as acked, now not"
            );
            ensure!(
                told.tried.contains(p) || !acked,
                "{what}: {name} {p} never acked, now acked"
            );
        }
        let mut after = Told::default();
        after
            .append_and_sync(&topic, PER_LEDGER as usize + 1, "reopened")
            .map_err(|e| format!("{what}: {name} after the reopen: {e}"))?;
        after
            .ack_some(&cursor, 2)
            .and_then(|()| after.flush(&cursor))
            .map_err(|e| format!("{what}: {name} flush after the reopen: {e}"))?;
    }
    reopened
        .close()
        .map_err(|e| format!("{what}: close after the reopen: {e}"))
}

fn check_durable(
    disk: &MemStorage,
    config: &StoreConfig,
    told: &BTreeMap<String, Told>,
    what: &str,
) {
    durable_holds(disk, config, told, what).unwrap_or_else(|e| panic!("{e}"));
}

/// Opens a store on `storage` with topics `a` and `b` (an entry synced and a flushed ack each)
/// written by a first owner that closed, and reopens it: the owner returned holds claims (the
/// catalog's, by a link) that no directory sync covered yet.
fn reopened_store(
    storage: &Arc<dyn Storage>,
    config: &StoreConfig,
) -> (Store, BTreeMap<String, Told>) {
    let mut told = BTreeMap::new();
    {
        let first = Store::open_with_storage(storage.clone(), config.clone()).expect("open");
        for name in ["a", "b"] {
            let topic = first.topic(name).expect("topic");
            let cursor = topic.open_cursor("c", earliest()).expect("cursor");
            let mut t = Told::default();
            t.append_and_sync(&topic, PER_LEDGER as usize + 1, name)
                .expect("append");
            t.ack_some(&cursor, 1)
                .and_then(|()| t.flush(&cursor))
                .expect("flush");
            told.insert(name.to_string(), t);
        }
        first.close().expect("close");
    }
    let owner = Store::open_with_storage(storage.clone(), config.clone()).expect("reopen");
    (owner, told)
}

/// After the creation of topic `created` was answered (whatever it answered): every call on
/// every topic and cursor, a cursor's creation, a trim and another topic's creation.
fn later_calls(owner: &Store, told: &mut BTreeMap<String, Told>, outcomes: &mut Outcomes) {
    for name in ["a", "b", "created"] {
        let t = told.entry(name.to_string()).or_default();
        let topic = match owner.topic(name) {
            Ok(topic) => topic,
            Err(e) => {
                outcomes.push((format!("open of {name}"), Err(e)));
                continue;
            }
        };
        let cursor = match topic.open_cursor("c", earliest()) {
            Ok(c) => c,
            Err(e) => {
                outcomes.push((format!("cursor c of {name}"), Err(e)));
                continue;
            }
        };
        let r = t.append_and_sync(&topic, PER_LEDGER as usize + 1, "later");
        outcomes.push((format!("{name} append and sync"), r));
        let r = t.ack_some(&cursor, 2).and_then(|()| t.flush(&cursor));
        outcomes.push((format!("{name} ack and flush"), r));
        let r = topic.open_cursor("other", earliest()).map(drop);
        outcomes.push((format!("{name} new cursor"), r));
        let r = t.trim(&topic);
        outcomes.push((format!("{name} trim"), r));
    }
    let r = owner.topic("created-after").map(drop);
    outcomes.push(("creation of another topic".into(), r));
    let r = owner.flush_all().map(drop);
    outcomes.push(("flush_all".into(), r));
}

/// A failed directory sync at every directory sync of a topic's creation (the catalog's
/// write, the topic's first files), on a store just created (its claim made durable by its
/// creation) and on a store reopened (its catalog claim a link no sync covered yet): no later
/// call answers `Fenced`, and a reopen keeps every `Ok`.
#[test]
fn a_failed_directory_sync_at_every_step_of_a_topic_creation_fences_no_later_call() {
    for reopened in [false, true] {
        let mut fired = 0;
        let mut n = 1;
        loop {
            let disk = MemStorage::new();
            let hooked = Hooked::new(disk.clone());
            let storage: Arc<dyn Storage> = Arc::new(hooked.clone());
            let config = store(PER_LEDGER, SEGMENT_BYTES);
            let (owner, mut told) = if reopened {
                reopened_store(&storage, &config)
            } else {
                (
                    Store::open_with_storage(storage.clone(), config.clone()).expect("open"),
                    BTreeMap::new(),
                )
            };
            hooked.arm(Fault::Dir(n));
            let created = owner.topic("created").map(drop);
            if !hooked.fired(Fault::Dir(n)) {
                created.expect("the creation without a fault");
                break;
            }
            fired += 1;
            let what = format!(
                "directory sync {n} of a topic's creation failed ({} store)",
                if reopened { "reopened" } else { "new" }
            );
            let mut outcomes = vec![("the creation".to_string(), created)];
            later_calls(&owner, &mut told, &mut outcomes);
            assert_never_fenced(&outcomes, &what);
            let _ = owner.close();
            check_durable(&disk, &config, &told, &what);
            n += 1;
        }
        assert!(fired > 0, "no directory sync of the creation failed");
    }
}

/// A failed directory sync at every directory sync of a roll of a reopened store's topic, then
/// a power cut after every storage operation of the calls that follow (every topic and
/// cursor): what the disk holds opens, `verify` finds no damage, and every `Ok` given before
/// the cut is kept.
#[test]
fn a_failed_directory_sync_then_a_power_cut_at_every_later_step_keeps_every_ok() {
    let mut cuts = 0;
    let mut n = 1;
    loop {
        let run = |cut: Option<u64>| {
            let disk = MemStorage::new();
            let hooked = Hooked::new(disk.clone());
            let storage: Arc<dyn Storage> = Arc::new(hooked.clone());
            let config = store(PER_LEDGER, SEGMENT_BYTES);
            let (owner, mut told) = reopened_store(&storage, &config);
            let a = owner.topic("a").expect("a");
            hooked.arm(Fault::Dir(n));
            let t = told.get_mut("a").expect("a");
            let rolled = t.append_and_sync(&a, PER_LEDGER as usize, "roll");
            if !hooked.fired(Fault::Dir(n)) {
                rolled.expect("the roll without a fault");
                return None;
            }
            drop(a);
            let armed = disk.mutations();
            disk.fail_after(cut);
            let mut outcomes = vec![("the roll".to_string(), rolled)];
            later_calls(&owner, &mut told, &mut outcomes);
            let made = disk.mutations() - armed;
            if cut.is_none() {
                assert_never_fenced(&outcomes, &format!("directory sync {n} of a roll failed"));
            }
            let _ = owner.close();
            Some((disk, config, told, made))
        };
        let Some((disk, config, told, total)) = run(None) else {
            break;
        };
        check_durable(&disk, &config, &told, &format!("directory sync {n} failed"));
        for cut in 0..total {
            let (disk, config, told, _) = run(Some(cut)).expect("the same run");
            let what = format!("directory sync {n} of a roll failed, power cut after {cut}");
            check_durable(&disk, &config, &told, &what);
            cuts += 1;
        }
        n += 1;
    }
    assert!(cuts > 20, "{cuts} power cuts");
}
