//! Hostile bytes in a journal of full markers and deltas: records re-framed with a valid frame
//! CRC after random changes of their payload (bytes flipped, a delta's base pointed at another
//! record of the same or another cursor with that record's CRC, removed keys forged), one
//! record at a time, with the segment's slots as written (the forgery below the synced length:
//! mostly refused as corruption) and as a power cut that lost every slot write leaves them
//! (past it: walked back). The journal opens or refuses without a panic, every partition the recovered state
//! lists loads (or fails with an error, never a panic), a recovered cursor holds no ack the
//! workload never made, and the journal goes on: a tick of new deltas on the recovered chains
//! reopens to exactly the state the journal held in memory.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use ackstore::internals::ackset::{PARTITION_SPAN, RangeSetWrapper};
use ackstore::internals::format::cursor::PersistedState;
use ackstore::internals::format::journal::{
    JournalLoc, NAME_TAG_LEN, Record, RecordKind, SEGMENT_HEADER_V3_LEN, SLOT_COPIES, SLOT_LEN,
    SLOTS_AT, decode_record, encode_record, encode_slot,
};
use ackstore::internals::journal::index::CursorId;
use ackstore::internals::journal::{
    CursorFlush, Journal, JournalConfig, JournalPartitions, Seal, segment_name,
};
use ackstore::{MemStorage, Position};

fn id(i: u64) -> CursorId {
    CursorId {
        topic: 7,
        cursor: i,
    }
}

fn open(disk: &MemStorage) -> ackstore::Result<Arc<Journal>> {
    Ok(Arc::new(Journal::open(
        Arc::new(disk.clone()),
        JournalConfig::default(),
        Seal::default(),
    )?))
}

fn set_of(journal: &Arc<Journal>, c: CursorId) -> RangeSetWrapper {
    let rows = journal.committed(c).map(|(_, r)| r).unwrap_or_default();
    RangeSetWrapper::with_index(
        Box::new(JournalPartitions::new(journal.clone(), c)),
        usize::MAX,
        rows,
    )
}

fn acks(set: &mut RangeSetWrapper) -> ackstore::Result<BTreeSet<Position>> {
    let mut out = BTreeSet::new();
    for (key, _) in set.partitions() {
        let Some(b) = set.bitmap(key)? else { continue };
        out.extend(
            b.iter()
                .map(|o| Position::new(key.ledger_id, key.first_entry() + u64::from(o))),
        );
    }
    Ok(out)
}

fn flush(journal: &Journal, sets: &mut BTreeMap<CursorId, RangeSetWrapper>, epoch: u64) {
    let mut out = Vec::new();
    for (c, set) in sets.iter_mut() {
        let live: Vec<_> = set.partitions().into_iter().map(|(k, _)| k).collect();
        let mut written = Vec::new();
        for &key in &live {
            let current = journal
                .stored_cardinality(*c, key)
                .is_some_and(|card| set.stored_copy_current(key, card));
            if !current {
                written.push((key, set.bitmap(key).unwrap().unwrap()));
            }
        }
        out.push(CursorFlush {
            name: 0,
            cursor: *c,
            state: PersistedState {
                epoch,
                ..PersistedState::default()
            },
            written,
            live,
        });
    }
    journal.commit(&out).unwrap();
    for set in sets.values_mut() {
        for key in set.dirty_keys() {
            set.mark_persisted(key);
        }
    }
}

/// Three cursors, each a full marker then deltas (with removals), one segment.
fn build() -> (MemStorage, BTreeMap<CursorId, BTreeSet<Position>>) {
    let disk = MemStorage::new();
    let journal = open(&disk).unwrap();
    let mut sets: BTreeMap<CursorId, RangeSetWrapper> =
        (0..3).map(|i| (id(i), set_of(&journal, id(i)))).collect();
    let mut truth: BTreeMap<CursorId, BTreeSet<Position>> = BTreeMap::new();
    for round in 0..8u64 {
        for (c, set) in sets.iter_mut() {
            for k in 0..3 {
                let pos = Position::new(
                    1 + (round + k) % 2,
                    ((round * 5 + k * 3 + c.cursor) % 12) * PARTITION_SPAN + round,
                );
                set.add(pos).unwrap();
                truth.entry(*c).or_default().insert(pos);
            }
            if round == 5 {
                let md = Position::new(1, 3 * PARTITION_SPAN);
                set.remove_at_most(md).unwrap();
                // Acks removed by a mark-delete stay acked (below it); none is invented.
            }
        }
        flush(&journal, &mut sets, round + 1);
    }
    assert!(journal.stats().deltas >= 10, "{:?}", journal.stats());
    drop(sets);
    drop(journal);
    (disk, truth)
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

#[test]
fn forged_records_never_panic_invent_acks_or_break_the_next_delta() {
    let (disk, truth) = build();
    let name = segment_name(1);
    let bytes = disk.live_bytes(&name).unwrap();
    let mut records = Vec::new();
    let mut at = SEGMENT_HEADER_V3_LEN;
    while let Ok(Some((rec, len))) = decode_record(&bytes[at..]) {
        records.push((
            at,
            len,
            rec.kind,
            rec.cursor,
            ackstore::internals::format::cursor::payload_crc(rec.payload),
        ));
        at += len;
    }
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut cases = 0;
    for &(at, len, kind, _, _) in &records {
        for trial in 0..12 {
            let (rec, _) = decode_record(&bytes[at..]).unwrap().unwrap();
            let mut payload = rec.payload.to_vec();
            if payload.is_empty() {
                continue;
            }
            match (kind, trial % 4) {
                (RecordKind::Delta, 0) => {
                    // Base: another record (any cursor's), with its real payload CRC.
                    let (oat, _, _, _, ocrc) = records[rng.below(records.len() as u64) as usize];
                    let loc = JournalLoc {
                        segment: 1,
                        offset: oat as u64,
                    }
                    .pack()
                    .unwrap();
                    // A delta's payload starts after the name tag it binds.
                    let d = &mut payload[NAME_TAG_LEN..];
                    d[0..8].copy_from_slice(&loc.to_le_bytes());
                    d[8..12].copy_from_slice(&ocrc.to_le_bytes());
                }
                (RecordKind::Delta, 1) => {
                    let d = &mut payload[NAME_TAG_LEN..];
                    let n = u32::from_le_bytes(d[12..16].try_into().unwrap()) as usize;
                    if n > 0 {
                        let k = 16 + 16 * rng.below(n as u64) as usize;
                        let v = rng.next();
                        d[k..k + 8].copy_from_slice(&(v % 3).to_le_bytes());
                        d[k + 8..k + 16].copy_from_slice(&(v % 13).to_le_bytes());
                    } else {
                        d[12..16].copy_from_slice(&(rng.next() as u32).to_le_bytes());
                    }
                }
                _ => {
                    for _ in 0..1 + rng.below(3) {
                        let i = rng.below(payload.len() as u64) as usize;
                        payload[i] ^= 1 << rng.below(8);
                    }
                }
            }
            let mut framed = Vec::new();
            encode_record(
                &mut framed,
                &Record {
                    payload: &payload,
                    ..rec
                },
            )
            .expect("the record encodes");
            assert_eq!(framed.len(), len);
            for never_promised in [false, true] {
                let image = disk.durable_image();
                let mut damaged = bytes.clone();
                damaged[at..at + len].copy_from_slice(&framed);
                if never_promised {
                    // The slots as a power cut that lost every slot write leaves them: the forged
                    // record lies past the synced length, where a walk back is allowed.
                    for copy in 0..SLOT_COPIES {
                        let from = SLOTS_AT + copy * SLOT_LEN;
                        let slot = encode_slot(1, copy, SEGMENT_HEADER_V3_LEN as u64);
                        damaged[from..from + SLOT_LEN].copy_from_slice(&slot);
                    }
                }
                image.set_bytes(&name, damaged).unwrap();
                let what =
                    format!("{kind:?} at {at}, trial {trial}, never promised {never_promised}");
                cases += 1;
                let Ok(journal) = open(&image) else { continue };
                let mut sets = BTreeMap::new();
                let mut expected = BTreeMap::new();
                for i in 0..3 {
                    let c = id(i);
                    let mut set = set_of(&journal, c);
                    let Ok(got) = acks(&mut set) else { continue };
                    let extra: Vec<_> = got.difference(&truth[&c]).collect();
                    assert!(
                        extra.is_empty(),
                        "{what}: {c:?} recovered acks never made: {extra:?}"
                    );
                    let pos = Position::new(2, 11 * PARTITION_SPAN + 77);
                    set.add(pos).unwrap();
                    let mut want = got.clone();
                    want.insert(pos);
                    expected.insert(c, want);
                    sets.insert(c, set);
                }
                flush(&journal, &mut sets, 100);
                drop(sets);
                drop(journal);
                let again =
                    open(&image.durable_image()).unwrap_or_else(|e| panic!("{what}: reopen: {e}"));
                for (c, want) in expected {
                    let mut set = set_of(&again, c);
                    let got = acks(&mut set).unwrap_or_else(|e| panic!("{what}: {c:?}: {e}"));
                    assert_eq!(
                        got, want,
                        "{what}: {c:?} after a tick on the recovered chain"
                    );
                }
            }
        }
    }
    assert!(cases > 100, "{cases}");
}
