//! Power cuts: after every storage operation of an append/sync/seal/delete workload, at every
//! byte of the unsynced tail, on the in-memory disk and on real files. The reopened log must
//! hold every synced entry, possibly some later whole entries, never a partial or altered one.

use crate::support;

use std::sync::Arc;

use ackstore::Error;
use ackstore::internals::format::ledger::{FRAME_HEADER_LEN, HEADER_V3_LEN, SLOTS_AT};
use ackstore::internals::log::{EntryLog, LogConfig, ledger_file_name};
use ackstore::{FileStorage, MemStorage, Storage};
use support::crash::{Clean, Cut, Points, cut_everywhere_after, torn_image, unsynced_tail};
use support::log_model::{Model, meta, payload};

/// Creates, appends with syncs now and then, seals one ledger, creates and deletes another.
/// Stops at the first error (the power went off), leaving in `model` what it was told.
fn workload(log: &EntryLog, model: &mut Model) -> ackstore::Result<()> {
    let a = model.create(log)?;
    let b = model.create(log)?;
    for i in 0..10 {
        model.append(log, a)?;
        if i % 3 != 1 {
            model.append(log, b)?;
        }
        if i % 4 == 3 {
            model.sync(log, a)?;
        }
        if i % 5 == 4 {
            model.sync(log, b)?;
        }
    }
    model.seal(log, a)?;
    model.append(log, b)?;
    model.sync(log, b)?;
    let c = model.create(log)?;
    model.append(log, c)?;
    model.sync(log, c)?;
    model.delete(log, c)?;
    model.append(log, b)?;
    Ok(())
}

fn open(disk: &MemStorage) -> EntryLog {
    EntryLog::open(Arc::new(disk.clone()), LogConfig::default()).unwrap()
}

/// What a log workload left when the power went off: the log (still open: it goes with the
/// process, after the check), what the workload was told, and its result.
type Cutoff = (EntryLog, Model, ackstore::Result<()>);

/// Runs `workload` on a log opened on a fresh in-memory disk, with the power cut after each
/// storage operation in turn, and hands `check` each cut disk and what the workload left.
fn cut_log_everywhere(
    mut workload: impl FnMut(&EntryLog, &mut Model) -> ackstore::Result<()>,
    check: impl FnMut(&MemStorage, Cut, Cutoff),
) -> Clean<Cutoff> {
    cut_everywhere_after(
        Points::EVERY,
        open,
        |_, log| {
            let mut model = Model::default();
            let result = workload(&log, &mut model);
            (log, model, result)
        },
        check,
    )
}

/// After recovering, the log takes new writes and they, and the repair, survive another cut.
fn check_writable_after_recovery(image: &MemStorage, model: &Model) {
    let log = open(image);
    model.check_recovered(&log);
    let open_ledger = log
        .ledger_ids()
        .into_iter()
        .find(|id| !log.ledger_info(*id).unwrap().sealed);
    let Some(id) = open_ledger else { return };
    let n = log.entry_count(id).unwrap();
    log.append(id, meta(n), &payload(id, n)).unwrap();
    log.sync(id).unwrap();
    let before: Vec<_> = (0..=n).map(|i| log.read(id, i).unwrap()).collect();
    drop(log);
    let again = open(&image.durable_image());
    assert!(again.recovery_report().is_empty());
    let after: Vec<_> = (0..=n).map(|i| again.read(id, i).unwrap()).collect();
    assert_eq!(before, after);
}

#[test]
fn power_cut_after_every_operation_keeps_synced_entries_and_only_whole_ones() {
    let clean = cut_log_everywhere(workload, |disk, cut, (_log, model, result)| {
        let (n, total) = (cut.n, cut.total);
        assert_eq!(result.is_ok(), n == total, "cut after {n} of {total}");
        disk.fail_after(None);
        for k in 0..=unsynced_tail(disk) {
            check_writable_after_recovery(&torn_image(disk, |_| k), &model);
        }
    });
    clean.result.2.unwrap();
    let total = clean.total;
    assert!(
        total > 25,
        "the workload should exercise many operations ({total})"
    );
}

#[test]
fn power_cut_while_the_write_buffer_spills_keeps_synced_entries() {
    // About 130 KiB of entries: the write buffer spills to the file twice between syncs.
    fn spilling(log: &EntryLog, model: &mut Model) -> ackstore::Result<()> {
        let a = model.create(log)?;
        for i in 0..700 {
            model.append(log, a)?;
            if i % 250 == 249 {
                model.sync(log, a)?;
            }
        }
        Ok(())
    }
    let clean = cut_log_everywhere(spilling, |disk, cut, (_log, model, result)| {
        assert_eq!(result.is_ok(), cut.n == cut.total);
        disk.fail_after(None);
        for k in (0..200_000).step_by(997) {
            model.check_recovered(&open(&torn_image(disk, |_| k)));
        }
    });
    clean.result.2.unwrap();
}

/// Offsets at which each of `payload_lens`' frames ends.
fn frame_ends(payload_lens: &[usize]) -> Vec<usize> {
    let mut end = HEADER_V3_LEN;
    payload_lens
        .iter()
        .map(|len| {
            end += FRAME_HEADER_LEN + len;
            end
        })
        .collect()
}

/// Writes `bytes` as ledger `id`'s file in `dir` (replacing it) and opens the log there.
fn reopen_file(dir: &std::path::Path, id: u64, bytes: &[u8]) -> EntryLog {
    std::fs::write(dir.join(ledger_file_name(id)), bytes).unwrap();
    let storage = FileStorage::open(dir, false).unwrap();
    EntryLog::open(Arc::new(storage), LogConfig::default()).unwrap()
}

/// A log on real files in `dir` with one ledger of `synced` synced then `unsynced` entries.
fn real_file_ledger(dir: &std::path::Path, synced: u64, unsynced: u64) -> (EntryLog, Model, u64) {
    let storage = FileStorage::open(dir, false).unwrap();
    let log = EntryLog::open(Arc::new(storage), LogConfig::default()).unwrap();
    let mut model = Model::default();
    let id = model.create(&log).unwrap();
    for _ in 0..synced {
        model.append(&log, id).unwrap();
    }
    model.sync(&log, id).unwrap();
    for _ in 0..unsynced {
        model.append(&log, id).unwrap();
    }
    (log, model, id)
}

#[test]
fn real_file_cut_at_every_tail_length_recovers_the_whole_entries() {
    let src = tempfile::tempdir().unwrap();
    let (log, model, id) = real_file_ledger(src.path(), 3, 4);
    drop(log);
    let full = std::fs::read(src.path().join(ledger_file_name(id))).unwrap();
    let lens: Vec<usize> = model.ledgers[&id]
        .appended
        .iter()
        .map(|e| e.1.len())
        .collect();
    let ends = frame_ends(&lens);
    assert_eq!(*ends.last().unwrap(), full.len());

    let dst = tempfile::tempdir().unwrap();
    for len in ends[2]..=full.len() {
        let log = reopen_file(dst.path(), id, &full[..len]);
        let whole = ends.iter().filter(|e| **e <= len).count() as u64;
        assert_eq!(log.entry_count(id).unwrap(), whole, "cut at {len}");
        model.check_recovered(&log);
        let cut = log
            .recovery_report()
            .iter()
            .map(|r| r.dropped_bytes)
            .sum::<u64>();
        assert_eq!(
            cut,
            (len - ends[usize::try_from(whole).unwrap() - 1]) as u64
        );
        drop(log);
        // The repair was written to the file itself.
        let repaired = std::fs::read(dst.path().join(ledger_file_name(id))).unwrap();
        assert_eq!(repaired, full[..ends[usize::try_from(whole).unwrap() - 1]]);
    }
    // A zero-filled tail (the file grew but the data never reached the disk) is the end.
    for zeros in [1, FRAME_HEADER_LEN - 1, FRAME_HEADER_LEN, 4096] {
        let mut bytes = full.clone();
        bytes.resize(full.len() + zeros, 0);
        let log = reopen_file(dst.path(), id, &bytes);
        assert_eq!(log.entry_count(id).unwrap(), 7);
        assert_eq!(log.recovery_report()[0].reason, "zero-filled tail");
    }
}

#[test]
fn real_file_interrupted_seal_reopens_unsealed_with_every_entry() {
    let src = tempfile::tempdir().unwrap();
    let (log, mut model, id) = real_file_ledger(src.path(), 5, 0);
    let data_end = usize::try_from(log.ledger_info(id).unwrap().bytes).unwrap();
    log.sync(id).unwrap();
    let before = std::fs::read(src.path().join(ledger_file_name(id))).unwrap();
    model.seal(&log, id).unwrap();
    drop(log);
    // The cuts below model a crash during the seal, before it returned: before the seal's last
    // step, the slot claiming the sealed file, so the slots hold what they held before it.
    model.ledgers.get_mut(&id).unwrap().sealed = false;
    let mut full = std::fs::read(src.path().join(ledger_file_name(id))).unwrap();
    full[SLOTS_AT..HEADER_V3_LEN].copy_from_slice(&before[SLOTS_AT..HEADER_V3_LEN]);

    let dst = tempfile::tempdir().unwrap();
    for len in data_end..=full.len() {
        let log = reopen_file(dst.path(), id, &full[..len]);
        model.check_recovered(&log);
        assert_eq!(log.entry_count(id).unwrap(), 5);
        let sealed = log.ledger_info(id).unwrap().sealed;
        assert_eq!(sealed, len == full.len(), "cut at {len}");
        assert_eq!(log.recovery_report().is_empty(), len == data_end || sealed);
        if !sealed {
            log.seal(id).unwrap();
            assert!(log.ledger_info(id).unwrap().sealed);
        }
    }
}

const PAGE: usize = 4096;

/// The durable bytes plus the 4 KiB pages of the unsynced tail that `keep(page)` chooses
/// (numbered from the first page the tail touches); a page not kept reads as zeros, and the
/// file ends with the last kept page. Page writeback does not follow write order, so any subset
/// may reach the disk. `written_back` decides, apart from them, whether the durable pages the
/// writer overwrote in place since its last fsync (the header's synced-length slot) reach the
/// disk too.
fn keep_pages(
    durable: &[u8],
    live: &[u8],
    keep: impl Fn(usize) -> bool,
    written_back: bool,
) -> Vec<u8> {
    let mut out = durable.to_vec();
    if written_back {
        let common = durable.len().min(live.len());
        for page in 0..common.div_ceil(PAGE) {
            let range = page * PAGE..((page + 1) * PAGE).min(common);
            out[range.clone()].copy_from_slice(&live[range]);
        }
    }
    if live.len() <= durable.len() {
        return out;
    }
    let first = durable.len() / PAGE;
    for page in first..live.len().div_ceil(PAGE) {
        if keep(page - first) {
            let (start, end) = (
                (page * PAGE).max(durable.len()),
                ((page + 1) * PAGE).min(live.len()),
            );
            out.resize(start, 0);
            out.extend_from_slice(&live[start..end]);
        }
    }
    out
}

/// Page choices for a tail of `pages` pages: every subset of a short tail; for a longer one,
/// each page alone, each page missing, and alternating pages.
fn page_choices(pages: usize) -> Vec<Arc<dyn Fn(usize) -> bool>> {
    let mut out: Vec<Arc<dyn Fn(usize) -> bool>> = Vec::new();
    if pages <= 4 {
        for mask in 0..1usize << pages {
            out.push(Arc::new(move |p| mask >> p & 1 == 1));
        }
        return out;
    }
    for q in 0..pages {
        out.push(Arc::new(move |p| p == q));
        out.push(Arc::new(move |p| p != q));
    }
    out.push(Arc::new(|p| p % 2 == 0));
    out.push(Arc::new(|p| p % 2 == 1));
    out
}

#[test]
fn power_cut_keeping_any_pages_of_the_unsynced_tail_keeps_synced_entries() {
    // Enough entries that the write buffer spills and the seal's footer spans several pages.
    fn paged(log: &EntryLog, model: &mut Model) -> ackstore::Result<()> {
        let a = model.create(log)?;
        for i in 0..700 {
            model.append(log, a)?;
            if i % 300 == 299 {
                model.sync(log, a)?;
            }
        }
        model.seal(log, a)?;
        let b = model.create(log)?;
        for _ in 0..60 {
            model.append(log, b)?;
        }
        model.sync(log, b)?;
        Ok(())
    }
    let strict = LogConfig {
        recovery: ackstore::RecoveryMode::Strict,
        ..LogConfig::default()
    };
    let mut footer_holes = 0;
    let clean = cut_log_everywhere(paged, |disk, cut, (_log, model, result)| {
        let n = cut.n;
        assert_eq!(result.is_ok(), n == cut.total);
        disk.fail_after(None);
        let durable_disk = disk.durable_image();
        let tail_pages = model
            .ledgers
            .keys()
            .map(|id| {
                let name = ledger_file_name(*id);
                let live = disk.live_bytes(&name).unwrap_or_default().len();
                let durable = durable_disk.live_bytes(&name).unwrap_or_default().len();
                live.div_ceil(PAGE).saturating_sub(durable / PAGE)
            })
            .max()
            .unwrap_or(0);
        let Some((id, l)) = model.ledgers.first_key_value() else {
            return;
        };
        let name = ledger_file_name(*id);
        let lens: Vec<usize> = l.appended.iter().map(|e| e.1.len()).collect();
        let data_end = frame_ends(&lens).last().copied().unwrap_or(HEADER_V3_LEN);
        let durable = durable_disk.live_bytes(&name).unwrap_or_default();
        let live = disk.live_bytes(&name).unwrap_or_default();
        // A seal cut short with only footer bytes unsynced: it holds no entry.
        let footer_only =
            l.seal_started && !l.sealed && durable.len() == data_end && live.len() > data_end;
        for (keep, back) in page_choices(tail_pages)
            .into_iter()
            .flat_map(|keep| [false, true].map(|back| (Arc::clone(&keep), back)))
        {
            let image = disk.crash_image(|_, d, l| keep_pages(d, l, &*keep, back));
            let kept = image.live_bytes(&name).unwrap_or_default();
            // Whatever pages survived, a tolerant open succeeds and keeps every synced entry.
            let log = open(&image);
            model.check_recovered(&log);
            drop(log);
            if footer_only {
                // Even the strict mode repairs it when the trailer reached the disk, whichever
                // of the index pages did; without the trailer or the index magic the bytes
                // are a torn tail to it.
                let trailer_kept = kept.len() == live.len();
                footer_holes += usize::from(trailer_kept && kept != live);
                let fresh = disk.crash_image(|_, d, l| keep_pages(d, l, &*keep, back));
                match EntryLog::open(Arc::new(fresh), strict) {
                    Ok(_) => {}
                    Err(Error::TornTail { .. }) if !trailer_kept => {}
                    Err(e) => panic!("cut after {n}: {e}"),
                }
            }
        }
    });
    clean.result.2.unwrap();
    assert!(
        footer_holes > 0,
        "no image kept a trailer without its index"
    );
}

/// Writes every file of `image` into the empty directory `dir` and opens it there.
fn open_on_files(
    image: &MemStorage,
    dir: &std::path::Path,
    config: LogConfig,
) -> ackstore::Result<EntryLog> {
    for entry in std::fs::read_dir(dir).unwrap() {
        std::fs::remove_file(entry.unwrap().path()).unwrap();
    }
    for name in image.list().unwrap() {
        std::fs::write(dir.join(&name), image.live_bytes(&name).unwrap()).unwrap();
    }
    EntryLog::open(Arc::new(FileStorage::open(dir, false).unwrap()), config)
}

#[test]
fn any_pages_of_an_unsynced_batch_reaching_the_disk_make_a_torn_tail_never_damage() {
    // Batches of entries spanning several pages, each synced, then one more unsynced batch.
    fn batches(log: &EntryLog, model: &mut Model) -> ackstore::Result<()> {
        let a = model.create(log)?;
        for i in 0..240 {
            model.append(log, a)?;
            if i % 80 == 79 {
                model.sync(log, a)?;
            }
        }
        Ok(())
    }
    let strict = LogConfig {
        recovery: ackstore::RecoveryMode::Strict,
        ..LogConfig::default()
    };
    let files = tempfile::tempdir().unwrap();
    let mut lost_page_before_kept_frames = 0;
    let clean = cut_log_everywhere(batches, |disk, Cut { n, .. }, (log, model, _)| {
        disk.fail_after(None);
        // The unsynced tail is the live image past the durable one; drop the log only now so
        // its buffered frames reach the live image too (a process exit before the power cut).
        drop(log);
        let durable_disk = disk.durable_image();
        let Some(id) = model.ledgers.keys().next().copied() else {
            return;
        };
        let name = ledger_file_name(id);
        let live = disk.live_bytes(&name).unwrap_or_default().len();
        let durable = durable_disk.live_bytes(&name).unwrap_or_default().len();
        let pages = live.div_ceil(PAGE).saturating_sub(durable / PAGE);
        for (keep, back) in page_choices(pages)
            .into_iter()
            .flat_map(|keep| [false, true].map(|back| (Arc::clone(&keep), back)))
        {
            let image = disk.crash_image(|_, d, l| keep_pages(d, l, &*keep, back));
            let kept = image.live_bytes(&name).unwrap_or_default();
            lost_page_before_kept_frames += usize::from(kept.len() > durable + PAGE && !keep(0));
            let log = open(&image);
            model.check_recovered(&log);
            assert!(
                log.damaged_ledgers().is_empty(),
                "cut after {n}: an unsynced batch opened as damage: {:?}",
                log.damaged_ledgers()
            );
            drop(log);
            let fresh = disk.crash_image(|_, d, l| keep_pages(d, l, &*keep, back));
            match EntryLog::open(Arc::new(fresh.clone()), strict) {
                Ok(_) | Err(Error::TornTail { .. }) => {}
                Err(e) => panic!("cut after {n}: strict open: {e}"),
            }
            let problems = ackstore::internals::log::verify_ledger(&fresh, id).unwrap();
            assert!(
                problems.iter().all(|p| p.torn_tail),
                "cut after {n}: {problems:?}"
            );
            // The same bytes on real files.
            let log = open_on_files(&fresh, files.path(), LogConfig::default()).unwrap();
            model.check_recovered(&log);
            assert!(
                log.damaged_ledgers().is_empty(),
                "cut after {n}, real files"
            );
        }
    });
    clean.result.2.unwrap();
    assert!(
        lost_page_before_kept_frames > 0,
        "no image lost an unsynced page and kept a later one"
    );
}
