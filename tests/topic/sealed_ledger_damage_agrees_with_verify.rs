//! `verify` and the first use of a sealed ledger agree (design invariant 8): one ledger file of a
//! topic alone and of a store's topic, each topic holding several sealed ledgers and an open one,
//! the file sealed with a footer (a ledger between others, or the newest holding entries, sealed by
//! the topic's close, whose last entry the topic's open reads), or sealed in the record only (the
//! ledger a former owner was appending to when a new owner took over and counted it) and holding
//! the fenced former owner's entries past its recorded count, damaged in every way a file is
//! damaged (deleted; cut at every offset; zeroed whole, by region and by 8-byte windows; a bit
//! flipped at every byte; zeros or other bytes appended; swapped with a sibling; replaced by each
//! older copy of itself), on a disk where the header's slot claims the last synced length and on
//! one where a power cut lost that claim. For each, `verify`'s verdict is compared with what the
//! product does, its sealed ledgers read by position and through a map: the open, then every use of
//! the entries (a read of each, each search by message index and by time, the cursor's recovery and
//! its reads, a new cursor seeking into the ledger by index and by time, a trim). Verify reports
//! damage exactly when the open or some use refuses it (`Corrupted`, `LedgerMismatch`,
//! `MissingLedger`), no use ever hands out bytes other than those appended, and a torn tail is
//! reported only where a crash can leave one. Damage no use relies on (at or past the recorded
//! count: a footer that does not verify, bytes after it, a fenced former owner's entries), where
//! the file proves those bytes synced, is served and reported as a warning, not as damage. Every
//! disagreement is collected, then printed with the table of damages, verdicts and answers (run
//! with `--nocapture` to see it).

use std::collections::BTreeMap;
use std::sync::Arc;

use ackstore::internals::log::ledger_file_name;
use ackstore::{Error, ManagedLedger, MemStorage, Position, Storage};

use crate::support;
use crate::support::topic::Host;

/// Entries of a data ledger (a small file, so every byte of it is tried).
const PER_LEDGER: u64 = 4;
/// Entries appended: four sealed ledgers and two entries in the open one.
const ENTRIES: u64 = 4 * PER_LEDGER + 2;
/// Which data ledger (in order) is damaged when it is neither the first nor the newest.
const DAMAGED: usize = 1;

/// What was appended: each entry's position, payload and timestamp (its message index is its
/// number: one message per entry).
struct Appended {
    positions: Vec<Position>,
}

impl Appended {
    fn payload(i: usize) -> Vec<u8> {
        format!("m{i}").into_bytes()
    }

    fn timestamp(i: usize) -> u64 {
        1000 + i as u64
    }
}

/// What a disk holds after the topic stopped: every byte written (the kernel wrote the page
/// cache back, the header slot's claim of the last fsync included: a seal's claims the whole
/// file), or what a power cut kept (that claim, written after the fsync, lost).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Image {
    WrittenBack,
    PowerCut,
}

/// A topic of `host` after every entry was synced and a cursor `sub` acknowledged the first
/// entry and flushed, in each [`Image`]; with the damaged ledger's file name on the disk, its
/// sibling's, and every older copy of that file.
struct Template {
    host: Host,
    images: Vec<(Image, MemStorage)>,
    appended: Appended,
    /// An entry of the damaged ledger, not its first, that the seeks probe.
    probe: usize,
    /// Whether the damaged ledger's file ends with a footer.
    sealed: bool,
    /// The damaged ledger's file and its sibling's, as the disk names them.
    file: String,
    sibling: String,
    /// Each distinct earlier version of the damaged ledger's file, oldest first.
    older: Vec<Vec<u8>>,
}

/// Appends entry `i` (payload, timestamp and message index its number) and syncs it.
fn append(topic: &ManagedLedger, i: usize) -> Position {
    let meta = ackstore::AppendMeta {
        num_messages: 1,
        timestamp: Appended::timestamp(i),
    };
    let p = topic
        .append_with(&Appended::payload(i), meta)
        .expect("append");
    topic.sync().expect("sync");
    p
}

/// Appends entries `from..to` to `topic` (whose disk is `disk`), and pushes each version of
/// the damaged ledger's file (the `damaged`th ledger) that differs from the last one to
/// `versions`; returns the positions and the file's name.
fn append_watching(
    (host, disk, topic): (Host, &MemStorage, &ManagedLedger),
    (from, to, damaged): (usize, usize, usize),
    versions: &mut Vec<Vec<u8>>,
) -> (Vec<Position>, Option<String>) {
    let mut file = None;
    let positions = (from..to)
        .map(|i| {
            let p = append(topic, i);
            if let Some(l) = topic.ledgers().get(damaged) {
                let name = file_on_disk(host, disk, l.id);
                let bytes = disk.live_bytes(&name).expect("the ledger's file");
                if versions.last() != Some(&bytes) {
                    versions.push(bytes);
                }
                file = Some(name);
            }
            p
        })
        .collect();
    (positions, file)
}

/// Creates cursor `sub` on `topic`, acknowledges `first` and flushes.
fn flushed_cursor(topic: &ManagedLedger, first: Position) {
    let cursor = topic
        .open_cursor("sub", support::topic::earliest())
        .expect("cursor");
    cursor.ack(first).expect("ack");
    cursor.flush().expect("flush");
}

/// The disk's two [`Image`]s, `edit`ed.
fn images(disk: &MemStorage, edit: impl Fn(Image, &MemStorage)) -> Vec<(Image, MemStorage)> {
    let out = vec![
        (Image::WrittenBack, copy(disk)),
        (Image::PowerCut, disk.durable_image()),
    ];
    for (image, disk) in &out {
        edit(*image, disk);
    }
    out
}

/// A topic of [`ENTRIES`] entries whose damaged ledger is sealed: the [`DAMAGED`]th, the topic
/// still open (its newest ledger unsealed; `newest` false), or the newest ledger, sealed by the
/// topic's close, whose last entry the topic's open reads for the next message index (`newest`).
fn sealed_template(host: Host, newest: bool) -> Template {
    let damaged = if newest {
        (ENTRIES / PER_LEDGER) as usize
    } else {
        DAMAGED
    };
    let (disk, topic) = support::topic::mem_hosted(host, PER_LEDGER);
    let mut older = Vec::new();
    let (positions, file) = append_watching(
        (host, &disk, &topic),
        (0, ENTRIES as usize, damaged),
        &mut older,
    );
    let file = file.expect("the ledgers rolled over");
    let sibling = file_on_disk(host, &disk, topic.ledgers()[damaged - 1].id);
    flushed_cursor(&topic, positions[0]);
    let images = if newest {
        topic.close().expect("close");
        images(&disk, |_, _| ())
    } else {
        let images = images(&disk, |_, _| ());
        topic.close().expect("close");
        older.pop().expect("the sealed version");
        images
    };
    let sealed = images[0].1.live_bytes(&file).expect("the sealed file");
    assert!(
        older.iter().all(|o| o.len() < sealed.len()),
        "the older copies are unsealed"
    );
    Template {
        host,
        images,
        appended: Appended { positions },
        probe: damaged * PER_LEDGER as usize + 1,
        sealed: true,
        file,
        sibling,
        older,
    }
}

/// Entries of the damaged ledger its former owner had synced when a new owner took over and
/// counted them (sealing it in the record only); the probed entry is one of them.
const COUNTED: usize = 2;
/// Entries the fenced former owner appended to it after that, filling it (a ledger is sealed
/// by the append after the one that fills it).
const PAST_COUNT: usize = PER_LEDGER as usize - COUNTED;

/// A topic whose [`DAMAGED`]th ledger was the one its former owner was appending to when a new
/// owner took over: the new owner counted its [`COUNTED`] entries in the record (no footer is
/// written into it), appended ledgers of its own and flushed a cursor, while the fenced former
/// owner appended [`PAST_COUNT`] more entries to it and synced them. The file holds entries and
/// synced bytes past the recorded count, which no read reaches.
fn past_count_template(host: Host) -> Template {
    let (disk, former) = support::topic::mem_hosted(host, PER_LEDGER);
    let counted = PER_LEDGER as usize + COUNTED;
    let mut older = Vec::new();
    let (mut positions, _) =
        append_watching((host, &disk, &former), (0, counted, DAMAGED), &mut older);
    let taken = copy(&disk);
    let (_, file) = append_watching(
        (host, &disk, &former),
        (counted, counted + PAST_COUNT, DAMAGED),
        &mut older,
    );
    let file = file.expect("the damaged ledger");
    let fenced = (
        disk.live_bytes(&file).expect("file"),
        disk.durable_image().live_bytes(&file).expect("file"),
    );
    assert_eq!(older.pop().as_ref(), Some(&fenced.0));
    drop(former);
    let topic = support::topic::reopen_hosted(host, &taken, PER_LEDGER);
    let mut none = Vec::new();
    let (ours, _) = append_watching(
        (host, &taken, &topic),
        (counted, ENTRIES as usize, DAMAGED),
        &mut none,
    );
    positions.extend(ours);
    let sibling = file_on_disk(host, &taken, topic.ledgers()[DAMAGED + 1].id);
    flushed_cursor(&topic, positions[0]);
    let images = images(&taken, |image, disk| {
        let bytes = match image {
            Image::WrittenBack => fenced.0.clone(),
            Image::PowerCut => fenced.1.clone(),
        };
        set(disk, &file, bytes);
    });
    topic.close().expect("close");
    Template {
        host,
        images,
        appended: Appended { positions },
        probe: DAMAGED * PER_LEDGER as usize + 1,
        sealed: false,
        file,
        sibling,
        older,
    }
}

/// The name of ledger `id`'s file on `disk` (a store names it in its topic's place).
fn file_on_disk(host: Host, disk: &MemStorage, id: u64) -> String {
    let name = ledger_file_name(id);
    match host {
        Host::Alone => name,
        Host::Store => {
            let storage: Arc<dyn Storage> = Arc::new(disk.clone());
            let catalog = ackstore::internals::store::read_catalog(storage.clone())
                .expect("catalog")
                .expect("a catalog");
            let t = catalog.topics.iter().find(|t| t.name == "t").expect("t").id;
            ackstore::internals::store::topic_file(&storage, &catalog, t, &name)
        }
    }
}

/// One way of damaging the file: its name (the family first), the first byte it changes, and
/// what it does to the disk.
struct Damage {
    family: &'static str,
    name: String,
    from: usize,
    apply: Apply,
}

/// What a damage does to the disk of a template.
type Apply = Box<dyn Fn(&Template, &MemStorage)>;

fn set(disk: &MemStorage, file: &str, bytes: Vec<u8>) {
    disk.set_bytes(file, bytes).expect("damage the file");
}

/// The regions of the ledger file `whole` (`sealed`: it ends with a footer), each with its
/// start and end: the header, the slots, each frame header and payload, and the index, its
/// checksum and the trailer.
fn regions(whole: &[u8], sealed: bool) -> Vec<(&'static str, usize, usize)> {
    let word = |at: usize| u64::from_le_bytes(whole[at..at + 8].try_into().expect("8 bytes"));
    let (header, slots_end) = (44, 68);
    let trailer = whole.len() - 36;
    let data_end = if sealed {
        usize::try_from(word(trailer)).expect("data end")
    } else {
        whole.len()
    };
    let mut out = vec![("header", 0, header), ("slots", header, slots_end)];
    let mut at = slots_end;
    while at < data_end {
        let len = u32::from_le_bytes(whole[at + 4..at + 8].try_into().expect("4 bytes"));
        let end = at + 44 + len as usize;
        out.push(("frame header", at, at + 44));
        out.push(("payload", at + 44, end));
        at = end;
    }
    if sealed {
        out.push(("index", data_end, trailer - 4));
        out.push(("index checksum", trailer - 4, trailer));
        out.push(("trailer", trailer, whole.len()));
    }
    out
}

/// The length the header's synced-length slots of ledger file `whole` claim: the larger copy
/// whose checksum (seeded with the file's nonce, then the copy's number) holds.
fn claimed_synced(whole: &[u8]) -> usize {
    let nonce = &whole[32..40];
    (0..2u8)
        .filter_map(|copy| {
            let slot = &whole[44 + 12 * usize::from(copy)..56 + 12 * usize::from(copy)];
            let mut crc = crc32fast::Hasher::new();
            crc.update(nonce);
            crc.update(&[copy]);
            crc.update(&slot[..8]);
            let stored = u32::from_le_bytes(slot[8..].try_into().expect("4 bytes"));
            (crc.finalize() == stored)
                .then(|| u64::from_le_bytes(slot[..8].try_into().expect("8 bytes")))
        })
        .max()
        .map_or(0, |len| usize::try_from(len).expect("a length"))
}

/// The damage that replaces the file's bytes with `bytes`.
fn replaced(family: &'static str, name: String, from: usize, bytes: Vec<u8>) -> Damage {
    Damage {
        family,
        name,
        from,
        apply: Box::new(move |t, disk| set(disk, &t.file, bytes.clone())),
    }
}

/// Every damage to the file `whole`.
fn damages(t: &Template, whole: &[u8]) -> Vec<Damage> {
    let len = whole.len();
    let mut out = vec![Damage {
        family: "deleted",
        name: "deleted".into(),
        from: 0,
        apply: Box::new(|t, disk| disk.remove(&t.file).expect("delete")),
    }];
    for cut in 0..len {
        let bytes = whole[..cut].to_vec();
        out.push(replaced(
            "truncated",
            format!("truncated to {cut} of {len} bytes"),
            cut,
            bytes,
        ));
    }
    let regions = regions(whole, t.sealed);
    let mut zeroed: Vec<(String, usize, usize)> = vec![("wholly".into(), 0, len)];
    zeroed.extend(
        regions
            .iter()
            .map(|&(what, from, to)| (format!("the {what} at {from}..{to}"), from, to)),
    );
    zeroed.extend((0..len).step_by(8).map(|from| {
        let to = (from + 8).min(len);
        (format!("bytes {from}..{to}"), from, to)
    }));
    for (what, from, to) in zeroed {
        let mut bytes = whole.to_vec();
        bytes[from..to].fill(0);
        out.push(replaced("zeroed", format!("zeroed {what}"), from, bytes));
    }
    for at in 0..len {
        let mut bytes = whole.to_vec();
        let bit = at % 8;
        bytes[at] ^= 1 << bit;
        out.push(replaced(
            "bit flipped",
            format!("bit {bit} flipped at byte {at} of {len}"),
            at,
            bytes,
        ));
    }
    // Bytes past the end: zeros (a file grown whose new bytes never reached the disk) and
    // others (a frame's bytes again, one byte).
    let frame = regions
        .iter()
        .find(|r| r.0 == "frame header")
        .map(|r| whole[r.1..r.2 + 2].to_vec())
        .expect("a frame");
    for (family, extra) in [
        ("zeros appended", vec![0; 1]),
        ("zeros appended", vec![0; 8]),
        ("zeros appended", vec![0; 100]),
        ("bytes appended", vec![0xff]),
        ("bytes appended", frame),
    ] {
        let mut bytes = whole.to_vec();
        bytes.extend_from_slice(&extra);
        out.push(replaced(
            family,
            format!("{family}: {} bytes", extra.len()),
            len,
            bytes,
        ));
    }
    for both in [false, true] {
        out.push(Damage {
            family: "swapped with a sibling",
            name: if both {
                "swapped with the sibling".into()
            } else {
                "its bytes replaced by the sibling's".into()
            },
            from: 0,
            apply: Box::new(move |t, disk| {
                let mine = disk.live_bytes(&t.file).expect("file");
                let sibling = disk.live_bytes(&t.sibling).expect("sibling");
                set(disk, &t.file, sibling);
                if both {
                    set(disk, &t.sibling, mine);
                }
            }),
        });
    }
    for (k, older) in t.older.iter().enumerate() {
        let older = older.clone();
        out.push(replaced(
            "an older copy",
            format!("older copy {k} ({} bytes, unsealed)", older.len()),
            0,
            older,
        ));
    }
    out
}

/// `verify`'s verdict on a disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Verdict {
    Sound,
    TornTail,
    Damage,
}

/// `verify`'s verdict on a disk, whether it warned, and its report.
fn verdict(disk: &MemStorage) -> (Verdict, bool, String) {
    let storage: Arc<dyn Storage> = Arc::new(disk.clone());
    let report = ackstore::check::verify(&storage).expect("verify runs");
    let v = if report.damaged() > 0 {
        Verdict::Damage
    } else if report.torn_tails() > 0 {
        Verdict::TornTail
    } else {
        Verdict::Sound
    };
    (v, !report.unused.is_empty(), report.to_string())
}

/// What the product did: every refusal (`Corrupted`, `LedgerMismatch`, `MissingLedger`) by
/// the step that met it, and every answer that differs from what was appended.
#[derive(Default)]
struct Answer {
    refused: Vec<String>,
    wrong: Vec<String>,
}

impl Answer {
    /// Records `result` of `step`: a refusal, or (by `check`) a wrong answer; returns whether
    /// the step answered. Any other error is a failure of the test.
    fn note<T>(
        &mut self,
        step: &str,
        result: ackstore::Result<T>,
        check: impl FnOnce(T) -> bool,
    ) -> bool {
        match result {
            Ok(v) => {
                if !check(v) {
                    self.wrong.push(step.to_owned());
                }
                true
            }
            Err(
                e @ (Error::Corrupted { .. }
                | Error::LedgerMismatch { .. }
                | Error::MissingLedger { .. }),
            ) => {
                self.refused.push(format!("{step}: {e}"));
                false
            }
            Err(e) => panic!("{step}: an error other than a refusal of damage: {e:?}"),
        }
    }

    fn summary(&self) -> &'static str {
        match (self.refused.is_empty(), self.wrong.is_empty()) {
            (_, false) => "WRONG BYTES SERVED",
            (true, true) => "served",
            (false, true) if self.refused[0].starts_with("open") => "open refused",
            (false, true) => "a use refused",
        }
    }
}

fn entry_is(appended: &Appended, i: usize, e: &ackstore::Entry) -> bool {
    e.position == appended.positions[i]
        && e.payload == Appended::payload(i)
        && e.timestamp == Appended::timestamp(i)
        && e.index == i as u64
        && e.num_messages == 1
}

/// Every use of the entries of the topic kept on `disk`.
fn product(t: &Template, disk: &MemStorage, reads: Reads) -> Answer {
    let mut answer = Answer::default();
    let mut config = support::topic::config(PER_LEDGER);
    if reads == Reads::Mapped {
        config.log.map_sealed_from = 0;
    }
    let opened = support::topic::open_hosted(t.host, Arc::new(disk.clone()), &config);
    let Some(topic) = ({
        let mut topic = None;
        answer.note("open", opened, |o| {
            topic = Some(o);
            true
        });
        topic
    }) else {
        return answer;
    };
    let a = &t.appended;
    for (i, p) in a.positions.iter().enumerate() {
        answer.note(&format!("read of entry {i}"), topic.read(*p), |e| {
            entry_is(a, i, &e)
        });
        answer.note(
            &format!("search by index {i}"),
            topic.find_by_index(i as u64),
            |found| found == Some(*p),
        );
        answer.note(
            &format!("search by time {}", Appended::timestamp(i)),
            topic.find_by_timestamp(Appended::timestamp(i)),
            |found| found == Some(*p),
        );
    }
    // The cursor's recovery, then its reads from the entry after its mark-delete on.
    let mut last_read = None;
    match topic.open_cursor("sub", support::topic::earliest()) {
        Ok(cursor) => {
            let mut next = 1;
            while next < a.positions.len() {
                let mut read = Vec::new();
                answer.note("the cursor's read", cursor.read_entries(3), |es| {
                    read = es;
                    true
                });
                if read.is_empty() {
                    break;
                }
                for e in read {
                    if next >= a.positions.len() || !entry_is(a, next, &e) {
                        answer
                            .wrong
                            .push(format!("the cursor's read of entry {next}"));
                    }
                    last_read = Some(e.position);
                    next += 1;
                }
            }
            if let Some(p) = last_read {
                answer.note("the cursor's ack", cursor.ack_cumulative(p), |_| true);
            }
            // A reader seeking into the damaged ledger, by index and by time.
            let probe = t.probe;
            let reader = topic
                .open_cursor("reader", support::topic::earliest())
                .expect("a new cursor");
            // After a seek that answered, the next read is the probed entry (or refused).
            if answer.note("seek by index", reader.seek_by_index(probe as u64), |()| {
                true
            }) {
                answer.note(
                    "read after the seek by index",
                    reader.read_entries(1),
                    |es| es.first().is_some_and(|e| entry_is(a, probe, e)),
                );
            }
            // The entry after the last one at most this old: the probed one.
            let seek = reader.seek_by_timestamp(Appended::timestamp(probe - 1));
            if answer.note("seek by time", seek, |()| true) {
                answer.note(
                    "read after the seek by time",
                    reader.read_entries(1),
                    |es| es.first().is_some_and(|e| entry_is(a, probe, e)),
                );
            }
            drop(reader);
            topic.delete_cursor("reader").expect("delete the reader");
            answer.note("trim", topic.trim_consumed(), |_| true);
        }
        Err(e) => {
            answer.note::<()>("the cursor's recovery", Err(e), |()| true);
        }
    }
    drop(topic);
    answer
}

/// How sealed ledgers are read: by positional reads (a small ledger, by default) or through a
/// map of the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reads {
    Positional,
    Mapped,
}

/// A row of the table: how often a family of damage met a verdict (with a warning or not) and
/// an answer (read by position; read through a map, the answers are the same or a
/// disagreement), by image.
type Table = BTreeMap<(Image, &'static str, Verdict, bool, &'static str), usize>;

fn print_table(host: Host, table: &Table) {
    eprintln!("host {host:?}: image | damage | verify | warned | product | cases");
    for ((image, family, verdict, warned, answer), n) in table {
        eprintln!("  {image:?} | {family} | {verdict:?} | {warned} | {answer} | {n}");
    }
}

/// The slots' bytes in a ledger file: a copy failing its checksum is no claim, never damage.
const SLOTS: std::ops::Range<usize> = 44..68;

/// A copy of `disk` of its own: the files it lists now, with their bytes.
fn copy(disk: &MemStorage) -> MemStorage {
    let to = MemStorage::new();
    support::crash::copy_into(disk, &to);
    to
}

fn agree_on(t: &Template) {
    let host = t.host;
    let mut table = Table::new();
    let mut disagreements = Vec::new();
    for (image, disk) in &t.images {
        let (v, warned, report) = verdict(disk);
        assert_eq!(
            (v, warned),
            (Verdict::Sound, false),
            "the undamaged topic, {image:?}: {report}"
        );
        for reads in [Reads::Positional, Reads::Mapped] {
            let undamaged = product(t, &copy(disk), reads);
            assert!(
                undamaged.refused.is_empty() && undamaged.wrong.is_empty(),
                "the undamaged topic, {image:?}, {reads:?}: {:?} {:?}",
                undamaged.refused,
                undamaged.wrong
            );
        }
        let whole = disk.live_bytes(&t.file).expect("the damaged ledger's file");
        let synced = claimed_synced(&whole);
        for damage in damages(t, &whole) {
            let disk = copy(disk);
            (damage.apply)(t, &disk);
            let (v, warned, report) = verdict(&disk);
            // Bytes the file proves synced changed (below the slots' claim, outside the slots; or
            // bytes after a footer the claim covers), not as a crash leaves them: verify reports
            // them, as damage when a use refuses, else as a warning.
            let changed = disk.live_bytes(&t.file).as_ref() != Some(&whole);
            let proven = (damage.from < synced && !SLOTS.contains(&damage.from))
                || (t.sealed && damage.family == "bytes appended" && synced >= whole.len());
            let reported =
                changed && proven && !["an older copy", "zeros appended"].contains(&damage.family);
            for reads in [Reads::Positional, Reads::Mapped] {
                let answer = product(t, &copy(&disk), reads);
                if reads == Reads::Positional {
                    *table
                        .entry((*image, damage.family, v, warned, answer.summary()))
                        .or_default() += 1;
                }
                let refused = !answer.refused.is_empty();
                let unwarned = reported && !refused && !warned;
                if !answer.wrong.is_empty() || (v == Verdict::Damage) != refused || unwarned {
                    disagreements.push(format!(
                        "{image:?}, {reads:?}, {}: verify {v:?}, warned {warned} ({}), product \
                         refused {:?}, wrong {:?}",
                        damage.name,
                        report.trim().replace('\n', " / "),
                        answer.refused.first(),
                        answer.wrong
                    ));
                }
            }
            // A torn tail is what a crash leaves: an older copy of the file, zeros past its end,
            // or damage to bytes no finished fsync is known to cover (past the slots' claim: a
            // seal's footer that never fully reached the disk, counted by the next open, or a
            // frame of the last synced batch whose claim a power cut lost).
            let crash_leaves = ["an older copy", "zeros appended"].contains(&damage.family)
                || damage.from >= synced;
            if v == Verdict::TornTail && !crash_leaves {
                disagreements.push(format!(
                    "{image:?}, {}: a torn tail verdict for damage no crash leaves ({})",
                    damage.name,
                    report.trim().replace('\n', " / ")
                ));
            }
        }
    }
    print_table(host, &table);
    assert!(
        disagreements.is_empty(),
        "{} disagreements on {host:?}:\n{}",
        disagreements.len(),
        disagreements.join("\n")
    );
}

#[test]
fn verify_reports_damage_to_a_sealed_ledger_iff_a_use_refuses_it() {
    support::topic::on_each_host(|host| agree_on(&sealed_template(host, false)));
}

#[test]
fn verify_reports_damage_to_the_newest_sealed_ledger_iff_the_open_or_a_use_refuses_it() {
    support::topic::on_each_host(|host| agree_on(&sealed_template(host, true)));
}

#[test]
fn verify_reports_damage_past_a_ledgers_recorded_count_iff_a_use_refuses_it() {
    support::topic::on_each_host(|host| agree_on(&past_count_template(host)));
}
