//! One ledger file: its writer (append, group-commit sync, seal) and its reader.
//!
//! Owns: the in-memory state of one open ledger file: the offset of every entry (unsealed), the
//! frames appended but not yet handed to the file (the write buffer), the written and synced
//! lengths, the latch set by a failed write or fsync, and the memory map of a sealed ledger.
//! Must never write to a sealed or latched ledger, never retry an fsync, and never map a file
//! that may still change.
//!
//! A sealed ledger is mapped on its first read, not when it is opened or sealed: a topic of
//! many sealed ledgers holds a map (a virtual memory area, and for RADOS a copy of the object)
//! only for those it reads. A small sealed ledger (under [`LogConfig::map_sealed_from`] bytes,
//! on storage whose maps share the file's pages) is never mapped: each read takes its frame's
//! bounds from the index and the frame itself by positional reads, so a store of many small
//! topics keeps no pages of them resident (a map's first touch makes the kernel map the pages
//! around it too, and they stay counted in the process's resident set while the map lives).
//! One read of the index takes 16 words ([`IndexWindow`]), which bound the frames of the entries
//! that follow: readers at one position, or going forward, read the file once an entry.
//! Either way a sealed frame is checked whole (length, entry id, checksum) on every read.
//!
//! After the fsync that makes its footer durable, and before any map, the seal records the whole
//! file length in the header's synced-length slot: the proof that lets a later open skip the
//! ledger's fsync (see `recover`).
//!
//! Appends collect in a write buffer of [`WRITE_BUFFER`] bytes, written to the file in one call
//! when it fills, on `sync`, on `seal` and when the ledger is dropped, so small entries cost a
//! copy, not a system call, and the file sees large sequential writes. Buffered entries are read
//! from the buffer. A buffered entry is lost by a process crash, which the contract allows: an
//! entry is promised only once a `sync` covering it returns.
//!
//! After each fsync returns, the one caller that ran it records the length the fsync covered in
//! the header's synced-length slot (version 3 files; alternate copies, one positioned write, no
//! fsync of its own): the slot only ever claims bytes already durable, and the next fsync (or the
//! kernel's writeback) makes it durable, so recovery can tell damage in the last synced batch
//! from a torn tail.
//!
//! Locks: `state` (entries, buffer, written length) and `sync_running` (group-commit flag) are
//! never held together; `synced` and `failed` are atomics so `append` reads them without
//! `sync_running`.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};

use super::{LogConfig, LogStatsCounters};
use crate::error::{CorruptionKind, Error, Result};
use crate::format::Corruption;
use crate::format::ledger::{
    EntryMeta, FRAME_HEADER_LEN, LedgerHeader, SealedLayout, Trailer, decode_entry_frame,
    decode_frame_header, encode_footer, encode_frame_into,
};
use crate::position::Position;
use crate::storage::{Mapped, StorageFile};
use crate::sync::lock;

pub struct State {
    /// Offset of every entry's frame (unsealed ledgers only).
    offsets: Vec<u64>,
    /// Bytes of the file that hold whole frames (or, once sealed, the file length).
    written: u64,
    /// Whole frames appended after `written`, not yet handed to the file.
    pub buffer: Vec<u8>,
    /// Where a sealed ledger's frames are (verified by open or by the seal).
    sealed: Option<SealedLayout>,
    /// A sealed ledger's index words its last read of its index took (read by position only).
    index_window: Option<IndexWindow>,
}

impl State {
    /// End of the last appended frame, buffered or written.
    fn end(&self) -> u64 {
        self.written + self.buffer.len() as u64
    }
}

/// Bytes of appended frames collected before they are written to the file in one call.
pub(crate) const WRITE_BUFFER: usize = 64 * 1024;

/// Index words (entry offsets) a read of a sealed ledger by position takes at once.
const INDEX_WINDOW_WORDS: usize = 16;

/// Consecutive words of a sealed ledger's index from one read of it: the offsets of entries
/// `first..first + len`. A read of an entry by position takes its frame's bounds from the last
/// window its ledger read when the window holds them (its own offset and the next one's, or
/// its own and `data_end` for the last entry), and otherwise reads a new window starting at
/// the entry: readers at one position (the subscriptions of a topic after a restart) and a
/// reader going forward take one read of the file a frame, not two. The bounds are checked on
/// every use as on a read of the file, and the frame is read and checked whole, so damage to a
/// frame is found whatever the window holds; a word damaged on disk after the window took it
/// is not read again (the window's copy is used, and the frame it bounds checked). A read
/// whose bounds from the window held fail (or whose frame does) is made again from a new
/// window, so a window taken from damaged words is not kept once the file is whole again.
struct IndexWindow {
    first: u64,
    len: usize,
    words: [u64; INDEX_WINDOW_WORDS],
}

impl IndexWindow {
    /// The window of the words `bytes` (8 each, little-endian, up to [`INDEX_WINDOW_WORDS`])
    /// from entry `first`'s.
    fn of(first: u64, bytes: &[u8]) -> Self {
        let mut words = [0u64; INDEX_WINDOW_WORDS];
        let mut len = 0;
        for (word, b) in words.iter_mut().zip(bytes.chunks_exact(8)) {
            let mut w = [0u8; 8];
            w.copy_from_slice(b);
            *word = u64::from_le_bytes(w);
            len += 1;
        }
        Self { first, len, words }
    }

    /// The bounds of entry `entry_id`'s frame in the ledger of layout `layout`, unchecked, when
    /// the window holds them.
    fn bounds(&self, layout: &SealedLayout, entry_id: u64) -> Option<(u64, u64)> {
        let held = self.words.get(..self.len)?;
        let i = usize::try_from(entry_id.checked_sub(self.first)?).ok()?;
        let start = *held.get(i)?;
        let end = match held.get(i + 1) {
            Some(&end) => end,
            None if entry_id + 1 == layout.entry_count => layout.data_end,
            None => return None,
        };
        Some((start, end))
    }
}

/// One ledger file, shared by every caller of the log.
pub struct Ledger {
    id: u64,
    /// The file header: format version and the nonce that seeds every checksum.
    header: LedgerHeader,
    /// Where open found damage before the tail, and what: the ledger then holds only the whole
    /// entries before it and refuses every write.
    damaged: Option<(u64, CorruptionKind)>,
    file: Arc<dyn StorageFile>,
    state: Mutex<State>,
    /// Length known durable: every byte below it has been covered by a finished fsync.
    synced: AtomicU64,
    /// Set by a failed write or fsync; the ledger refuses writes until reopened.
    failed: AtomicBool,
    /// True while one caller runs the shared fsync.
    sync_running: Mutex<bool>,
    sync_done: Condvar,
    /// The synced-length slot copy the next record goes to (written only by the caller running
    /// the fsync, so never by two threads at once).
    next_slot: AtomicUsize,
    /// A sealed ledger's map, made on its first read.
    map: OnceLock<Mapped>,
}

impl Ledger {
    /// An unsealed ledger whose whole frames start at `offsets` and end at `written`, all durable.
    pub fn unsealed(
        header: LedgerHeader,
        file: Arc<dyn StorageFile>,
        offsets: Vec<u64>,
        written: u64,
    ) -> Self {
        Self::new(
            header,
            file,
            State {
                offsets,
                written,
                buffer: Vec::new(),
                sealed: None,
                index_window: None,
            },
        )
    }

    /// A sealed ledger of verified layout `sealed`, mapped on its first read.
    pub(crate) fn sealed(file: Arc<dyn StorageFile>, sealed: SealedLayout) -> Self {
        let written = sealed.file_len();
        Self::new(
            sealed.header,
            file,
            State {
                offsets: Vec::new(),
                written,
                buffer: Vec::new(),
                sealed: Some(sealed),
                index_window: None,
            },
        )
    }

    /// Marks the ledger damaged at `offset`: reads stop there and every write is refused.
    pub(crate) fn with_damage(mut self, offset: u64, kind: CorruptionKind) -> Self {
        self.damaged = Some((offset, kind));
        self
    }

    fn new(header: LedgerHeader, file: Arc<dyn StorageFile>, state: State) -> Self {
        let synced = state.written;
        Self {
            id: header.ledger_id,
            header,
            damaged: None,
            file,
            state: Mutex::new(state),
            synced: AtomicU64::new(synced),
            failed: AtomicBool::new(false),
            sync_running: Mutex::new(false),
            sync_done: Condvar::new(),
            next_slot: AtomicUsize::new(0),
            map: OnceLock::new(),
        }
    }

    pub fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    fn latch<T>(&self, result: Result<T>) -> Result<T> {
        if result.is_err() {
            self.failed.store(true, Ordering::SeqCst);
        }
        result
    }

    fn check_writable(&self, state: &State) -> Result<()> {
        if let Some((offset, kind)) = &self.damaged {
            return Err(Error::corrupted(self.id, *offset, kind.clone()));
        }
        if state.sealed.is_some() {
            return Err(Error::Sealed(self.id));
        }
        if self.failed.load(Ordering::SeqCst) {
            return Err(Error::PreviousIo);
        }
        Ok(())
    }

    /// Hands the buffered frames to the file. A failure latches the ledger.
    fn flush(&self, state: &mut State) -> Result<()> {
        if state.buffer.is_empty() {
            return Ok(());
        }
        self.latch(self.file.write_all_at(&state.buffer, state.written))?;
        state.written += state.buffer.len() as u64;
        state.buffer.clear();
        if state.buffer.capacity() > 2 * WRITE_BUFFER {
            state.buffer = Vec::new();
        }
        Ok(())
    }

    /// Appends one frame; returns its entry id. The caller has checked the size limit.
    pub fn append(
        &self,
        meta: EntryMeta,
        payload: &[u8],
        counters: &LogStatsCounters,
    ) -> Result<u64> {
        let mut state = self.state();
        self.check_writable(&state)?;
        let entry_id = state.offsets.len() as u64;
        let mark = self.synced.load(Ordering::SeqCst);
        let at = state.end();
        let buffered = state.buffer.len();
        encode_frame_into(
            &mut state.buffer,
            &self.header,
            entry_id,
            mark,
            meta,
            payload,
        )
        .map_err(|_| Error::EntryTooLarge {
            size: payload.len() as u64,
            max: u64::from(crate::format::ledger::MAX_PAYLOAD_LEN),
        })?;
        state.offsets.push(at);
        if state.buffer.len() >= WRITE_BUFFER
            && let Err(e) = self.flush(&mut state)
        {
            // This append fails; the entries buffered before it stay readable, and the latch
            // keeps any of them from ever being reported durable.
            state.buffer.truncate(buffered);
            state.offsets.pop();
            return Err(e);
        }
        counters.appends.fetch_add(1, Ordering::Relaxed);
        counters
            .bytes_appended
            .fetch_add(payload.len() as u64, Ordering::Relaxed);
        Ok(entry_id)
    }

    /// Makes every entry appended before the call durable, sharing fsyncs with concurrent
    /// callers: a caller whose bytes a finished fsync covered returns without its own.
    pub fn sync(&self, counters: &LogStatsCounters) -> Result<()> {
        counters.sync_calls.fetch_add(1, Ordering::Relaxed);
        let target = {
            let mut state = self.state();
            if state.sealed.is_some() {
                return Ok(());
            }
            self.check_writable(&state)?;
            self.flush(&mut state)?;
            // A synced ledger holds no write buffer: a store keeps many topics open, most of
            // them idle between syncs (a full buffer is kept for the next append instead).
            state.buffer = Vec::new();
            state.written
        };
        let mut running = lock(&self.sync_running);
        loop {
            if self.failed.load(Ordering::SeqCst) {
                return Err(Error::PreviousIo);
            }
            if self.synced.load(Ordering::SeqCst) >= target {
                return Ok(());
            }
            if *running {
                running = self
                    .sync_done
                    .wait(running)
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                continue;
            }
            *running = true;
            drop(running);
            // Every byte below `upto` was written before this fsync starts.
            let upto = self.state().written;
            let result = self.file.sync_data();
            counters.fsyncs.fetch_add(1, Ordering::Relaxed);
            if result.is_ok() {
                self.record_synced(upto);
            }
            running = lock(&self.sync_running);
            *running = false;
            match &result {
                Ok(()) => {
                    self.synced.fetch_max(upto, Ordering::SeqCst);
                }
                Err(_) => self.failed.store(true, Ordering::SeqCst),
            }
            self.sync_done.notify_all();
            result?;
        }
    }

    /// Writes `upto`, a length a finished fsync covered, into the next synced-length slot copy
    /// (version 3 files, unsealed, not latched). Called only by the caller running the fsync.
    ///
    /// The fsync's own result stands whatever this write does: the bytes below `upto` are
    /// durable. A failed write latches the ledger like any failed write; a torn one leaves at
    /// most this copy unreadable, and recovery then uses the other, older copy.
    fn record_synced(&self, upto: u64) {
        if !self.header.has_synced_slots() || self.failed.load(Ordering::SeqCst) {
            return;
        }
        // The state lock keeps a seal from finishing meanwhile: a sealed file never changes.
        let state = self.state();
        if state.sealed.is_some() {
            return;
        }
        let copy = self.next_slot.fetch_add(1, Ordering::Relaxed);
        let slot = self.header.encode_slot(copy, upto);
        let _ = self.latch(
            self.file
                .write_all_at(&slot, LedgerHeader::slot_offset(copy)),
        );
        drop(state);
    }

    /// Syncs the entries, writes the footer, syncs it, records the whole file as synced in the
    /// slot (the seal's proof), and switches reads to the map, made on the first read.
    /// Sealing a sealed ledger does nothing.
    pub(crate) fn seal(&self, counters: &LogStatsCounters) -> Result<()> {
        let mut state = self.state();
        if state.sealed.is_some() {
            return Ok(());
        }
        self.check_writable(&state)?;
        self.flush(&mut state)?;
        // The entries must be durable before the footer can be: a footer on disk promises them.
        if self.synced.load(Ordering::SeqCst) < state.written {
            counters.fsyncs.fetch_add(1, Ordering::Relaxed);
            self.latch(self.file.sync_data())?;
        }
        let footer = encode_footer(&self.header, state.written, &state.offsets);
        self.latch(self.file.write_all_at(&footer, state.written))?;
        counters.fsyncs.fetch_add(1, Ordering::Relaxed);
        self.latch(self.file.sync_data())?;
        let len = state.written + footer.len() as u64;
        // The whole file is durable now: the slot may claim it. Written before the file is read
        // back or mapped, and never again: a sealed file does not change once mapped.
        if self.header.has_synced_slots() {
            let copy = self.next_slot.fetch_add(1, Ordering::Relaxed);
            let slot = self.header.encode_slot(copy, len);
            self.latch(
                self.file
                    .write_all_at(&slot, LedgerHeader::slot_offset(copy)),
            )?;
        }
        // The layout of the footer just written (its bytes are checked when the file is next
        // opened, like any sealed ledger's).
        let sealed = SealedLayout::of(
            self.header,
            &Trailer {
                data_end: state.written,
                entry_count: state.offsets.len() as u64,
                ledger_id: self.id,
            },
        )
        .with_last_frame(state.offsets.last().copied());
        debug_assert_eq!(sealed.file_len(), len);
        state.written = len;
        self.synced.fetch_max(state.written, Ordering::SeqCst);
        state.offsets = Vec::new();
        state.sealed = Some(sealed);
        Ok(())
    }

    /// The map of a sealed ledger of layout `layout`, made on the first call.
    fn mapped(&self, layout: &SealedLayout, counters: &LogStatsCounters) -> Result<Mapped> {
        if let Some(map) = self.map.get() {
            return Ok(map.clone());
        }
        let map = self.file.map()?;
        counters.maps.fetch_add(1, Ordering::Relaxed);
        let len = (*map).as_ref().len() as u64;
        if len < layout.file_len() {
            // The file is shorter than when it was verified: synced bytes are gone. (A read-only
            // log may map a sealed file followed by a zero-filled tail it does not cut.)
            return Err(Error::corrupted(
                self.id,
                len.min(layout.file_len()),
                CorruptionKind::Truncated,
            ));
        }
        // Two first readers may both map; one map is kept, the other dropped.
        Ok(self.map.get_or_init(|| map).clone())
    }

    /// Number of entries.
    pub(crate) fn entry_count(&self) -> u64 {
        let state = self.state();
        match &state.sealed {
            Some(s) => s.entry_count,
            None => state.offsets.len() as u64,
        }
    }

    /// Number of entries every byte of which a finished fsync covered (all of them once
    /// sealed): the durable prefix readers may see. The synced length only ever takes a value
    /// of `written`, which ends a whole frame, so an entry starting below it ends at or below it.
    pub fn synced_entries(&self) -> u64 {
        let state = self.state();
        if let Some(s) = &state.sealed {
            return s.entry_count;
        }
        let synced = self.synced.load(Ordering::SeqCst);
        state.offsets.partition_point(|&o| o < synced) as u64
    }

    /// Where open found damage before the tail, if it did.
    pub(crate) fn damage(&self) -> Option<(u64, CorruptionKind)> {
        self.damaged.clone()
    }

    /// Whether the ledger is sealed.
    pub(crate) fn is_sealed(&self) -> bool {
        self.state().sealed.is_some()
    }

    /// Length of the ledger in bytes (header, whole frames, buffered ones included, and the
    /// footer once sealed).
    pub(crate) fn bytes(&self) -> u64 {
        self.state().end()
    }

    /// Where entry `entry_id` lives: a sealed map (made now if it is the first read), a small
    /// sealed ledger to read by position (see [`LogConfig::map_sealed_from`]), or a byte range
    /// of the open file.
    fn locate(&self, entry_id: u64, reads: Reads<'_>) -> Result<Located> {
        let state = self.state();
        let missing = || match &self.damaged {
            Some((offset, kind)) => Error::corrupted(self.id, *offset, kind.clone()),
            None => Error::NoSuchEntry(Position::new(self.id, entry_id)),
        };
        if let Some(sealed) = state.sealed {
            drop(state);
            if entry_id >= sealed.entry_count {
                return Err(missing());
            }
            if !self.maps(&sealed, reads.config) {
                return Ok(Located::SealedFile(sealed));
            }
            let map = self.mapped(&sealed, reads.counters)?;
            let (start, end) = sealed
                .frame_range((*map).as_ref(), entry_id)
                .ok_or_else(missing)?;
            return Ok(Located::Mapped(map, start, end));
        }
        let i = usize::try_from(entry_id).map_err(|_| missing())?;
        let start = *state.offsets.get(i).ok_or_else(missing)?;
        let end = state.offsets.get(i + 1).copied().unwrap_or(state.end());
        if start < state.written {
            return Ok(Located::File(start, end));
        }
        // A buffered frame: copy it out while the lock holds the buffer still.
        let frame = slice(&state.buffer, start - state.written, end - state.written)
            .map_err(self.corrupt(start))?;
        Ok(Located::Buffered(frame.to_vec(), start))
    }

    /// Whether reads of the sealed ledger of layout `layout` go through a map: a ledger mapped
    /// already keeps its map; otherwise one of at least `config.map_sealed_from` bytes, or on
    /// storage whose map costs no more than positional reads ([`StorageFile::map_always`]).
    fn maps(&self, layout: &SealedLayout, config: &LogConfig) -> bool {
        self.map.get().is_some()
            || layout.file_len() >= config.map_sealed_from
            || self.file.map_always()
    }

    /// Reads and checks sealed entry `entry_id` (below the entry count) by position, a small
    /// sealed ledger of layout `layout`. Its frame's bounds: the last entry's from the layout
    /// when it holds its offset ([`SealedLayout::last_frame`]); otherwise from the ledger's
    /// index window when it holds them, or else from a new window ([`Self::read_index_window`]).
    /// A read whose bounds came from the window held and that failed (its bounds, its frame) is
    /// made again from a new window: the window's words were read before, and the read fails
    /// only for the file as it is now (damage since undone is not kept by the window, nor
    /// refused again).
    fn read_sealed_entry(
        &self,
        layout: &SealedLayout,
        entry_id: u64,
    ) -> Result<(EntryMeta, Vec<u8>)> {
        let read = |bounds| self.read_sealed_frame(layout, bounds, entry_id);
        if entry_id + 1 == layout.entry_count
            && let Some(start) = layout.last_frame
        {
            // Verified with the whole index (or known at the seal): no read of the index.
            return read((start, layout.data_end));
        }
        let held = (self.state().index_window.as_ref()).and_then(|w| w.bounds(layout, entry_id));
        if let Some(bounds) = held
            && let Ok(entry) = self.checked_bounds(layout, entry_id, bounds).and_then(read)
        {
            return Ok(entry);
        }
        let bounds = self.read_index_window(layout, entry_id)?;
        read(self.checked_bounds(layout, entry_id, bounds)?)
    }

    /// Reads the window of index words from entry `entry_id`'s (below the entry count) of the
    /// sealed ledger of layout `layout` by one positional read, keeps it as the ledger's index
    /// window, and returns the entry's frame's bounds it holds, unchecked. A file cut short
    /// since open is [`CorruptionKind::Truncated`], as through a map.
    fn read_index_window(&self, layout: &SealedLayout, entry_id: u64) -> Result<(u64, u64)> {
        let at = entry_id
            .checked_mul(8)
            .and_then(|o| o.checked_add(layout.offsets_start))
            .ok_or_else(|| self.bad_index(layout.offsets_start))?;
        let left = layout.entry_count.saturating_sub(entry_id);
        let len = usize::try_from(left).map_or(INDEX_WINDOW_WORDS, |l| l.min(INDEX_WINDOW_WORDS));
        let mut bytes = [0u8; 8 * INDEX_WINDOW_WORDS];
        let bytes = &mut bytes[..8 * len];
        self.read_sealed(bytes, at, layout)?;
        let window = IndexWindow::of(entry_id, bytes);
        // A window read from the entry holds its bounds: its offset, and the next one's or
        // `data_end`.
        let bounds = window.bounds(layout, entry_id);
        self.state().index_window = Some(window);
        bounds.ok_or_else(|| self.bad_index(at))
    }

    /// `bounds` of sealed entry `entry_id`'s frame, checked: in order within the frames, or
    /// else (an index damaged since open) [`Error::Corrupted`] at the entry's index word, found
    /// before a buffer of their length is allocated.
    fn checked_bounds(
        &self,
        layout: &SealedLayout,
        entry_id: u64,
        (start, end): (u64, u64),
    ) -> Result<(u64, u64)> {
        if start < layout.header.data_start() || end > layout.data_end || end <= start {
            let at = entry_id
                .saturating_mul(8)
                .saturating_add(layout.offsets_start);
            return Err(self.bad_index(at));
        }
        Ok((start, end))
    }

    /// Damage of the sealed index at `at`.
    fn bad_index(&self, at: u64) -> Error {
        Error::corrupted(self.id, at, CorruptionKind::InvalidField("offsets"))
    }

    /// Fills `buf` from `offset` of the sealed file of layout `layout`; a read past the file's
    /// end (the file cut short since it was verified) is [`CorruptionKind::Truncated`] at the
    /// file's length.
    fn read_sealed(&self, buf: &mut [u8], offset: u64, layout: &SealedLayout) -> Result<()> {
        match self.file.read_exact_at(buf, offset) {
            Ok(()) => Ok(()),
            Err(e) => match self.file.size() {
                Ok(len) if len < layout.file_len() => {
                    Err(Error::corrupted(self.id, len, CorruptionKind::Truncated))
                }
                _ => Err(e),
            },
        }
    }

    /// Reads the whole sealed frame at `start..end` (bounds from [`Self::checked_bounds`])
    /// and checks it.
    fn read_sealed_frame(
        &self,
        layout: &SealedLayout,
        (start, end): (u64, u64),
        entry_id: u64,
    ) -> Result<(EntryMeta, Vec<u8>)> {
        let len = usize::try_from(end - start)
            .map_err(|_| Error::corrupted(self.id, start, CorruptionKind::BadLength))?;
        let mut frame = vec![0u8; len];
        self.read_sealed(&mut frame, start, layout)?;
        self.split_frame(frame, start, entry_id)
    }

    /// Names damage found in the frame that starts at `offset`. The error names the frame's
    /// start, whatever field within it failed: the offset `verify` reports and tests pin.
    fn corrupt(&self, offset: u64) -> impl Fn(Corruption) -> Error + '_ {
        move |c| Error::corrupted(self.id, offset, c.kind)
    }

    /// Reads and checks one entry; returns its metadata and payload.
    pub(crate) fn read(&self, entry_id: u64, reads: Reads<'_>) -> Result<(EntryMeta, Vec<u8>)> {
        match self.locate(entry_id, reads)? {
            Located::Mapped(map, start, end) => {
                let frame = slice((*map).as_ref(), start, end).map_err(self.corrupt(start))?;
                let (header, payload) = decode_entry_frame(&self.header, frame, entry_id)
                    .map_err(self.corrupt(start))?;
                Ok((header.meta, payload.to_vec()))
            }
            Located::File(start, end) => {
                let len = usize::try_from(end - start)
                    .map_err(|_| Error::corrupted(self.id, start, CorruptionKind::BadLength))?;
                let mut frame = vec![0u8; len];
                self.file.read_exact_at(&mut frame, start)?;
                self.split_frame(frame, start, entry_id)
            }
            Located::SealedFile(layout) => self.read_sealed_entry(&layout, entry_id),
            Located::Buffered(frame, start) => self.split_frame(frame, start, entry_id),
        }
    }

    /// Checks a whole frame read into `frame` and returns its metadata and payload.
    fn split_frame(
        &self,
        mut frame: Vec<u8>,
        start: u64,
        entry_id: u64,
    ) -> Result<(EntryMeta, Vec<u8>)> {
        let (header, _) =
            decode_entry_frame(&self.header, &frame, entry_id).map_err(self.corrupt(start))?;
        Ok((header.meta, frame.split_off(FRAME_HEADER_LEN)))
    }

    /// Reads one entry's metadata. A sealed ledger's frame is checked whole (through the map or
    /// read whole); an unsealed ledger's frame was checked when it was written or recovered, so
    /// only its header is read.
    pub fn read_meta(&self, entry_id: u64, reads: Reads<'_>) -> Result<EntryMeta> {
        match self.locate(entry_id, reads)? {
            Located::Mapped(map, start, end) => {
                let frame = slice((*map).as_ref(), start, end).map_err(self.corrupt(start))?;
                let (header, _) = decode_entry_frame(&self.header, frame, entry_id)
                    .map_err(self.corrupt(start))?;
                Ok(header.meta)
            }
            Located::File(start, end) => {
                let mut buf = [0u8; FRAME_HEADER_LEN];
                self.file.read_exact_at(&mut buf, start)?;
                let header = decode_frame_header(&buf).map_err(self.corrupt(start))?;
                if header.entry_id != entry_id || header.frame_len() != end - start {
                    return Err(Error::corrupted(
                        self.id,
                        start,
                        CorruptionKind::InvalidField("entry_id"),
                    ));
                }
                Ok(header.meta)
            }
            Located::SealedFile(layout) => Ok(self.read_sealed_entry(&layout, entry_id)?.0),
            Located::Buffered(frame, start) => Ok(self.split_frame(frame, start, entry_id)?.0),
        }
    }
}

impl Drop for Ledger {
    /// Hands buffered frames to the file, so closing the log without a sync keeps them across
    /// a process exit (not a power cut). A failure here has no one to report to and is dropped.
    fn drop(&mut self) {
        let mut state = self.state();
        if state.sealed.is_none() && self.damaged.is_none() && !self.failed.load(Ordering::SeqCst) {
            let _ = self.flush(&mut state);
        }
    }
}

/// What a read needs of its log: the counters it bumps and the configuration that says how
/// sealed ledgers are read.
#[derive(Clone, Copy)]
pub struct Reads<'a> {
    /// The log's counters.
    pub counters: &'a LogStatsCounters,
    /// The log's configuration.
    pub config: &'a LogConfig,
}

enum Located {
    /// A frame of a sealed ledger's map.
    Mapped(Mapped, u64, u64),
    /// An entry of a small sealed ledger of this layout, read by position and checked whole.
    SealedFile(SealedLayout),
    /// A frame of an unsealed ledger's file, checked when it was written or recovered.
    File(u64, u64),
    /// A copy of a frame still in the write buffer, and its offset.
    Buffered(Vec<u8>, u64),
}

fn slice(bytes: &[u8], start: u64, end: u64) -> Result<&[u8], Corruption> {
    let bad = |kind| Corruption::new(kind, 0);
    let s = usize::try_from(start).map_err(|_| bad(CorruptionKind::BadLength))?;
    let e = usize::try_from(end).map_err(|_| bad(CorruptionKind::BadLength))?;
    bytes
        .get(s..e)
        .ok_or_else(|| bad(CorruptionKind::Truncated))
}
