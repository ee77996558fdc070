//! Mutations of a whole store directory, for the mutation test: a directory read into memory
//! (a [`Tree`]), damage chosen by a seeded source ([`Mutation::pick`]) and applied to a copy,
//! and the offline check (`ackstore verify`) run on the result.
//!
//! A mutation is damage an operator's disk or a careless hand can do: bit flips,
//! truncations, zeroed ranges, deleted, swapped and older copies of journal segments, and
//! edits of metadata records (the store catalog, topic and cursor records) and journal records
//! whose checksums are recomputed, so only the meaning of the bytes is wrong.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;

use ackstore::internals::format::journal::{
    Record, RecordKind, SEGMENT_HEADER_LEN, decode_record, decode_segment_header_version,
    encode_record, records_start,
};
use ackstore::internals::format::meta::{CursorRecord, TopicRecord, decode_stored, encode_stored};
use ackstore::internals::format::store::{CATALOG_VERSION_V4, Catalog, chunk_record};

use super::workload::Rng;

/// Every file of a directory (and its subdirectories, one level deep as a store has them), by
/// path relative to it, with the subdirectories themselves (a topic's directory may be empty).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tree {
    /// File contents by relative path.
    pub files: BTreeMap<PathBuf, Vec<u8>>,
    /// Relative paths of the subdirectories.
    pub dirs: BTreeSet<PathBuf>,
}

impl Tree {
    /// Reads every file under `dir`.
    pub fn read(dir: &Path) -> Self {
        let mut tree = Self::default();
        tree.read_into(dir, Path::new(""));
        tree
    }

    fn read_into(&mut self, root: &Path, rel: &Path) {
        for entry in std::fs::read_dir(root.join(rel)).expect("list") {
            let entry = entry.expect("entry");
            let path = rel.join(entry.file_name());
            if entry.file_type().expect("type").is_dir() {
                self.dirs.insert(path.clone());
                self.read_into(root, &path);
            } else {
                let bytes = std::fs::read(root.join(&path)).expect("read");
                self.files.insert(path, bytes);
            }
        }
    }

    /// Writes the tree into the empty directory `dir`.
    pub fn write(&self, dir: &Path) {
        for d in &self.dirs {
            std::fs::create_dir_all(dir.join(d)).expect("mkdir");
        }
        for (path, bytes) in &self.files {
            std::fs::write(dir.join(path), bytes).expect("write");
        }
    }

    /// The journal segments, ascending.
    pub fn segments(&self) -> Vec<PathBuf> {
        self.files
            .keys()
            .filter(|p| is_segment(p))
            .cloned()
            .collect()
    }

    /// Rewrites the store catalog's record with `edit`, its checksum recomputed; `None` (and
    /// nothing written) when there is no catalog that decodes or `edit` does not apply.
    pub fn edit_catalog(&mut self, edit: impl FnOnce(&mut Catalog) -> Option<()>) -> Option<()> {
        let path = self.record("", "store")?;
        let (version, payload) = decode_stored(&self.files[&path]).ok()?;
        let mut catalog = Catalog::decode(&payload).ok()?;
        // The pinned chunks' topics, then the tail the catalog holds inline.
        let tail = std::mem::take(&mut catalog.topics);
        for k in 0..catalog.chunks.len() {
            let chunk = self.record("", &chunk_record(k, catalog.chunks[k].made_at))?;
            let (_, bytes) = decode_stored(&self.files[&chunk]).ok()?;
            catalog.add_chunk(k, &bytes).ok()?;
        }
        catalog.topics.extend(tail);
        let topics = catalog.topics.clone();
        edit(&mut catalog)?;
        // Edited topics are written inline, as version 4 (an earlier build's layout): the
        // chunk records stay, pinned no more.
        let bytes = if catalog.topics == topics {
            catalog.encode()
        } else {
            catalog.encode_version(CATALOG_VERSION_V4)
        };
        self.files.insert(path, encode_stored(version, &bytes));
        Some(())
    }

    /// The current version of metadata record `name` under `dir` (`""` for the store's own).
    pub fn record(&self, dir: &str, name: &str) -> Option<PathBuf> {
        let prefix = format!("{name}.");
        self.files
            .keys()
            .filter(|p| p.parent() == Some(Path::new(dir)))
            .filter(|p| {
                let f = file_name(p);
                f.starts_with(&prefix)
                    && f.ends_with(".meta")
                    && f[prefix.len()..f.len() - 5]
                        .bytes()
                        .all(|b| b.is_ascii_digit())
            })
            .max()
            .cloned()
    }

    /// Every current metadata record of a topic directory: (topic directory, record name).
    fn records(&self, starting: &str) -> Vec<(String, String)> {
        let mut out = BTreeSet::new();
        for p in self.files.keys() {
            let f = file_name(p);
            let Some(dir) = p.parent().and_then(Path::to_str) else {
                continue;
            };
            if dir.is_empty() || !f.starts_with(starting) || !f.ends_with(".meta") {
                continue;
            }
            if let Some((name, _)) = f.split_once('.') {
                out.insert((dir.to_owned(), name.to_owned()));
            }
        }
        out.into_iter().collect()
    }
}

fn file_name(p: &Path) -> &str {
    p.file_name().and_then(|f| f.to_str()).unwrap_or_default()
}

/// Whether `p` names a journal segment.
pub fn is_segment(p: &Path) -> bool {
    let f = file_name(p);
    p.parent() == Some(Path::new("")) && f.starts_with("journal-") && f.ends_with(".seg")
}

/// One record of a segment as it lies in the file.
#[derive(Debug, Clone)]
pub struct RecordAt {
    /// Byte offset of its frame.
    pub offset: usize,
    /// Length of its frame.
    pub len: usize,
    /// Its kind.
    pub kind: RecordKind,
    /// Its topic's catalog id.
    pub topic: u64,
    /// Its cursor's id in the topic.
    pub cursor: u64,
}

/// The records of a segment that verify, in order, up to the end marker or the first that
/// does not.
pub fn records_of(segment: &[u8]) -> Vec<RecordAt> {
    let mut out = Vec::new();
    let mut at = decode_segment_header_version(segment)
        .map_or(SEGMENT_HEADER_LEN, |(_, version)| records_start(version));
    while let Some(rest) = segment.get(at..) {
        let Ok(Some((r, len))) = decode_record(rest) else {
            break;
        };
        out.push(RecordAt {
            offset: at,
            len,
            kind: r.kind,
            topic: r.topic,
            cursor: r.cursor,
        });
        at += len;
    }
    out
}

/// Where a segment's records end (its header's end when it holds none).
pub fn data_end(segment: &[u8]) -> usize {
    records_of(segment)
        .last()
        .map_or(SEGMENT_HEADER_LEN.min(segment.len()), |r| r.offset + r.len)
        .max(
            decode_segment_header_version(segment)
                .map_or(0, |(_, version)| records_start(version))
                .min(segment.len()),
        )
}

/// An edit of a journal record whose frame checksum is then recomputed.
#[derive(Debug, Clone, Copy)]
pub enum RecordEdit {
    /// The record is given to another cursor of the same topic.
    Cursor(u64),
    /// The record is given to the same cursor id of another topic.
    Topic(u64),
    /// The record's kind changes.
    Kind(RecordKind),
    /// One bit of the payload flips.
    PayloadBit(usize),
}

/// An edit of the store catalog, written back with its envelope's checksum recomputed.
#[derive(Debug, Clone, Copy)]
pub enum CatalogEdit {
    /// The listed segment at this place in the list is no longer listed (its file stays).
    Unlist(usize),
    /// A segment that has no file is listed after the last one.
    ListMissing,
    /// The catalog lists no segments (every segment file counts, as in catalog version 2).
    NoList,
    /// Every seal is dropped.
    NoSeals,
    /// The seal at this place keeps only the segment's header.
    ShortSeal(usize),
    /// The topic at this place is no longer listed.
    DropTopic(usize),
}

/// An edit of a topic's record or of one of its cursor records.
#[derive(Debug, Clone, Copy)]
pub enum TopicEdit {
    /// The cursor at this place of the table is dropped.
    DropCursor(usize),
    /// Two cursors of the table swap ids (so each name points to the other's record and state).
    SwapCursorIds(usize, usize),
    /// A cursor record's epoch goes up by one.
    CursorEpoch(usize),
    /// A cursor record names a cursor ledger.
    CursorLedger(usize),
}

/// One mutation of a store directory.
#[derive(Debug, Clone)]
pub enum Mutation {
    /// One bit of a file flips.
    FlipBit {
        /// The file.
        file: PathBuf,
        /// Byte offset.
        offset: usize,
        /// Bit in that byte.
        bit: u8,
    },
    /// A file is cut to `len` bytes.
    Truncate {
        /// The file.
        file: PathBuf,
        /// What is kept.
        len: usize,
    },
    /// `len` bytes from `offset` become zeros.
    Zero {
        /// The file.
        file: PathBuf,
        /// First byte zeroed.
        offset: usize,
        /// Bytes zeroed.
        len: usize,
    },
    /// A file is deleted.
    Delete {
        /// The file.
        file: PathBuf,
    },
    /// Two segments swap contents (each keeps its name).
    Swap {
        /// One segment.
        a: PathBuf,
        /// Its sibling.
        b: PathBuf,
    },
    /// A segment is replaced by a copy taken earlier in the workload.
    Older {
        /// The segment.
        file: PathBuf,
        /// Whether it is the newest segment.
        newest: bool,
        /// Its length now.
        now: usize,
        /// The copy's length.
        then: usize,
        /// The copy's contents.
        bytes: Vec<u8>,
    },
    /// A journal record is edited and its frame checksum recomputed.
    Record {
        /// The segment.
        file: PathBuf,
        /// The record's frame offset.
        offset: usize,
        /// What changes.
        edit: RecordEdit,
    },
    /// The store catalog is edited.
    Catalog(CatalogEdit),
    /// A topic's record or a cursor record is edited.
    Topic {
        /// The topic's directory.
        dir: String,
        /// What changes.
        edit: TopicEdit,
    },
}

impl fmt::Display for Mutation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::FlipBit { file, offset, bit } => {
                write!(f, "flip bit {bit} of byte {offset} of {}", file.display())
            }
            Self::Truncate { file, len } => write!(f, "truncate {} to {len} bytes", file.display()),
            Self::Zero { file, offset, len } => {
                write!(f, "zero {len} bytes at {offset} of {}", file.display())
            }
            Self::Delete { file } => write!(f, "delete {}", file.display()),
            Self::Swap { a, b } => write!(f, "swap {} with {}", a.display(), b.display()),
            Self::Older {
                file,
                newest,
                now,
                then,
                ..
            } => write!(
                f,
                "replace {}{} ({now} bytes) by an older copy ({then} bytes)",
                if *newest { "the newest segment " } else { "" },
                file.display()
            ),
            Self::Record { file, offset, edit } => write!(
                f,
                "edit the record at {offset} of {} ({edit:?}), frame CRC recomputed",
                file.display()
            ),
            Self::Catalog(edit) => write!(f, "edit the catalog ({edit:?}), CRC recomputed"),
            Self::Topic { dir, edit } => {
                write!(f, "edit a record of {dir} ({edit:?}), CRC recomputed")
            }
        }
    }
}

impl Mutation {
    /// A short name of the mutation's class, to group findings.
    pub fn class(&self) -> String {
        let target = |p: &Path| {
            if is_segment(p) {
                "segment"
            } else if file_name(p).ends_with(".meta") {
                "record"
            } else {
                "file"
            }
        };
        match self {
            Self::FlipBit { file, .. } => format!("bit flip in a {}", target(file)),
            Self::Truncate { file, .. } => format!("truncated {}", target(file)),
            Self::Zero { file, .. } => format!("zeroed range in a {}", target(file)),
            Self::Delete { file } => format!("deleted {}", target(file)),
            Self::Swap { .. } => "swapped segments".into(),
            Self::Older { newest: true, .. } => "older copy of the newest segment".into(),
            Self::Older { .. } => "older copy of an older segment".into(),
            Self::Record { edit, .. } => format!("journal record edit {edit:?}")
                .split('(')
                .next()
                .unwrap_or_default()
                .to_owned(),
            Self::Catalog(edit) => format!("catalog edit {edit:?}")
                .split('(')
                .next()
                .unwrap_or_default()
                .to_owned(),
            Self::Topic { edit, .. } => format!("topic record edit {edit:?}")
                .split('(')
                .next()
                .unwrap_or_default()
                .to_owned(),
        }
    }

    /// Picks a mutation of `tree`; `older` holds earlier copies of segments (by name, each
    /// different from the segment's final bytes). `None` when the pick does not apply to this
    /// tree (the caller picks again).
    pub fn pick(
        rng: &mut Rng,
        tree: &Tree,
        older: &BTreeMap<PathBuf, Vec<Vec<u8>>>,
    ) -> Option<Self> {
        let segments = tree.segments();
        let seg = segments.get(rng.index(segments.len().max(1)))?.clone();
        let bytes = &tree.files[&seg];
        let end = data_end(bytes);
        let files: Vec<&PathBuf> = tree.files.keys().filter(|p| !p.ends_with("LOCK")).collect();
        Some(match rng.below(100) {
            // Segments, inside what their records hold (where damage must be noticed).
            0..=19 => Self::FlipBit {
                offset: rng.index(end.max(1)),
                bit: u8::try_from(rng.below(8)).expect("bit"),
                file: seg,
            },
            20..=29 => {
                let recs = records_of(bytes);
                let len = if recs.is_empty() || rng.chance(50) {
                    rng.index(bytes.len().max(1))
                } else {
                    recs[rng.index(recs.len())].offset
                };
                Self::Truncate { file: seg, len }
            }
            30..=37 => {
                let offset = rng.index(end.max(1));
                Self::Zero {
                    file: seg,
                    offset,
                    len: 1 + rng.index(256),
                }
            }
            38..=43 => Self::Delete { file: seg },
            44..=47 => {
                let i = segments.iter().position(|s| *s == seg).expect("listed");
                let b = segments
                    .get(i + 1)
                    .or(i.checked_sub(1).and_then(|j| segments.get(j)))?;
                Self::Swap {
                    a: seg.clone(),
                    b: b.clone(),
                }
            }
            48..=59 => {
                // The newest segment first: it is the one whose older copies stay consistent.
                let file = if rng.chance(60) {
                    segments.last()?.clone()
                } else {
                    seg
                };
                let copies = older.get(&file)?;
                let copy = copies[rng.index(copies.len())].clone();
                Self::Older {
                    newest: segments.last() == Some(&file),
                    now: tree.files[&file].len(),
                    then: copy.len(),
                    bytes: copy,
                    file,
                }
            }
            60..=71 => {
                let recs = records_of(bytes);
                let r = recs.get(rng.index(recs.len().max(1)))?.clone();
                let others: Vec<&RecordAt> = recs
                    .iter()
                    .filter(|o| o.topic != r.topic || o.cursor != r.cursor)
                    .collect();
                let edit = match rng.below(4) {
                    0 => {
                        let o = others.iter().find(|o| o.topic == r.topic)?;
                        RecordEdit::Cursor(o.cursor)
                    }
                    1 => {
                        let o = others.iter().find(|o| o.topic != r.topic)?;
                        RecordEdit::Topic(o.topic)
                    }
                    2 => RecordEdit::Kind(match r.kind {
                        RecordKind::Partition => RecordKind::Batch,
                        RecordKind::Batch => RecordKind::Partition,
                        RecordKind::Marker => RecordKind::Delta,
                        RecordKind::Delta => RecordKind::Snapshot,
                        RecordKind::Snapshot => RecordKind::Marker,
                        RecordKind::Forget => return None,
                    }),
                    _ => {
                        let payload = r.len.checked_sub(25).filter(|&n| n > 0)?;
                        RecordEdit::PayloadBit(rng.index(payload * 8))
                    }
                };
                Self::Record {
                    file: seg,
                    offset: r.offset,
                    edit,
                }
            }
            72..=83 => Self::Catalog(match rng.below(6) {
                0 => CatalogEdit::Unlist(rng.index(segments.len().max(1))),
                1 => CatalogEdit::ListMissing,
                2 => CatalogEdit::NoList,
                3 => CatalogEdit::NoSeals,
                4 => CatalogEdit::ShortSeal(rng.index(4)),
                _ => CatalogEdit::DropTopic(rng.index(2)),
            }),
            84..=91 => {
                let topics = tree.records("topic");
                let (dir, _) = topics.get(rng.index(topics.len().max(1)))?.clone();
                let i = rng.index(4);
                let edit = match rng.below(4) {
                    0 => TopicEdit::DropCursor(i),
                    1 => TopicEdit::SwapCursorIds(i, (i + 1) % 4),
                    2 => TopicEdit::CursorEpoch(i),
                    _ => TopicEdit::CursorLedger(i),
                };
                Self::Topic { dir, edit }
            }
            // Any other file of the store: metadata records, data ledgers.
            92..=95 => {
                let file = files[rng.index(files.len())].clone();
                let len = tree.files[&file].len();
                Self::FlipBit {
                    offset: rng.index(len.max(1)),
                    bit: u8::try_from(rng.below(8)).expect("bit"),
                    file,
                }
            }
            _ => Self::Delete {
                file: files[rng.index(files.len())].clone(),
            },
        })
    }

    /// Applies the mutation to `tree`. `None` when it does not apply (nothing to edit).
    pub fn apply(&self, tree: &mut Tree) -> Option<()> {
        match self {
            Self::FlipBit { file, offset, bit } => {
                *tree.files.get_mut(file)?.get_mut(*offset)? ^= 1 << bit;
            }
            Self::Truncate { file, len } => tree.files.get_mut(file)?.truncate(*len),
            Self::Zero { file, offset, len } => {
                let bytes = tree.files.get_mut(file)?;
                let end = (offset + len).min(bytes.len());
                bytes.get_mut(*offset..end)?.fill(0);
            }
            Self::Delete { file } => {
                tree.files.remove(file)?;
            }
            Self::Swap { a, b } => {
                let x = tree.files.remove(a)?;
                let y = tree.files.insert(b.clone(), x)?;
                tree.files.insert(a.clone(), y);
            }
            Self::Older { file, bytes, .. } => {
                *tree.files.get_mut(file)? = bytes.clone();
            }
            Self::Record { file, offset, edit } => {
                let seg = tree.files.get_mut(file)?;
                let (r, len) = decode_record(seg.get(*offset..)?).ok()??;
                let mut payload = r.payload.to_vec();
                let mut rec = Record {
                    kind: r.kind,
                    topic: r.topic,
                    cursor: r.cursor,
                    payload: &[],
                };
                match *edit {
                    RecordEdit::Cursor(c) => rec.cursor = c,
                    RecordEdit::Topic(t) => rec.topic = t,
                    RecordEdit::Kind(k) => rec.kind = k,
                    RecordEdit::PayloadBit(b) => *payload.get_mut(b / 8)? ^= 1 << (b % 8),
                }
                rec.payload = &payload;
                let mut out = Vec::new();
                encode_record(&mut out, &rec).ok()?;
                if out.len() != len {
                    return None;
                }
                seg.get_mut(*offset..offset + len)?.copy_from_slice(&out);
            }
            Self::Catalog(edit) => tree.edit_catalog(|catalog| {
                match *edit {
                    CatalogEdit::Unlist(i) => {
                        let list = catalog.segments.as_mut()?;
                        let i = i.min(list.len().checked_sub(1)?);
                        list.remove(i);
                    }
                    CatalogEdit::ListMissing => {
                        let list = catalog.segments.as_mut()?;
                        list.push(list.last()? + 1);
                    }
                    CatalogEdit::NoList => catalog.segments = None,
                    CatalogEdit::NoSeals => {
                        if catalog.seals.is_empty() {
                            return None;
                        }
                        catalog.seals.clear();
                    }
                    CatalogEdit::ShortSeal(i) => {
                        let seal = catalog.seals.get_mut(i)?;
                        seal.len = SEGMENT_HEADER_LEN as u64;
                    }
                    CatalogEdit::DropTopic(i) => {
                        if i >= catalog.topics.len() {
                            return None;
                        }
                        catalog.topics.remove(i);
                    }
                }
                Some(())
            })?,
            Self::Topic { dir, edit } => {
                let path = tree.record(dir, "topic")?;
                let (version, payload) = decode_stored(&tree.files[&path]).ok()?;
                let mut topic = TopicRecord::decode(&payload).ok()?;
                match *edit {
                    TopicEdit::DropCursor(i) => {
                        let table = topic.cursors.tail_mut();
                        table.get(i)?;
                        table.remove(i);
                    }
                    TopicEdit::SwapCursorIds(i, j) => {
                        let table = topic.cursors.tail_mut();
                        let a = table.get(i)?.id;
                        let b = table.get(j)?.id;
                        if a == b {
                            return None;
                        }
                        table[i].id = b;
                        table[j].id = a;
                    }
                    TopicEdit::CursorEpoch(i) | TopicEdit::CursorLedger(i) => {
                        let id = topic.cursors.tail().get(i)?.id;
                        let cpath = tree.record(dir, &format!("cursor-{id}"))?;
                        let (cversion, cpayload) = decode_stored(&tree.files[&cpath]).ok()?;
                        let mut record = CursorRecord::decode(&cpayload).ok()?;
                        if matches!(edit, TopicEdit::CursorEpoch(_)) {
                            record.epoch += 1;
                        } else {
                            record.cursor_ledger = Some(topic.next_ledger_id);
                        }
                        tree.files
                            .insert(cpath, encode_stored(cversion, &record.encode()));
                        return Some(());
                    }
                }
                let bytes = encode_stored(version, &topic.encode());
                tree.files.insert(path, bytes);
            }
        }
        Some(())
    }
}

/// What `ackstore verify DIR` said: its exit code and the first lines it printed.
#[derive(Debug, Clone)]
pub struct Verdict {
    /// The exit code (`None`: killed by a signal).
    pub code: Option<i32>,
    /// The first lines of its output (standard output, then standard error).
    pub said: String,
}

/// Runs the built `ackstore verify` on `dir`.
pub fn verify(binary: &str, dir: &Path) -> Verdict {
    let out = Command::new(binary)
        .arg("verify")
        .arg(dir)
        .env("ACKSTORE_NO_PROGRESS", "1")
        .output()
        .expect("ackstore verify runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    verdict(out.status.code(), &text)
}

/// [`verify`] through the check API the command prints (`ackstore::check::verify`), for test
/// crates that do not build the command: the exit code it would give and what it would say.
pub fn verify_checked(dir: &Path) -> Verdict {
    let storage: std::sync::Arc<dyn ackstore::Storage> =
        std::sync::Arc::new(ackstore::FileStorage::open(dir, false).expect("the directory opens"));
    let (code, text) = match ackstore::check::verify(&storage) {
        Ok(report) => (i32::from(!report.is_sound()), report.to_string()),
        Err(e) => (2, format!("ackstore: {e}")),
    };
    verdict(Some(code), &text)
}

/// The verdict of a run that exited `code` having printed `text`.
fn verdict(code: Option<i32>, text: &str) -> Verdict {
    let said: Vec<&str> = text
        .lines()
        .map(|l| {
            l.split_once(": ")
                .filter(|_| l.starts_with("checked the store in "))
                .map_or(l, |(_, rest)| rest)
        })
        .filter(|l| {
            let l = l.to_ascii_lowercase();
            l.contains("damage")
                || l.contains("torn")
                || l.contains("error")
                || l.contains("corrupt")
                || l.contains("missing")
        })
        .take(3)
        .collect();
    Verdict {
        code,
        said: said.join(" | "),
    }
}

/// Each way of damaging a file whose bytes are `whole` in place, named: deleted (`None`),
/// truncated to half, emptied, zeroed, and a bit flipped at its first byte, a third, its middle and its
/// last byte.
pub fn damages(whole: &[u8]) -> Vec<(String, Option<Vec<u8>>)> {
    let mut out = vec![
        ("deleted".to_owned(), None),
        (
            "truncated".to_owned(),
            Some(whole[..whole.len() / 2].to_vec()),
        ),
        // A metadata record's empty version is what a deletion links (a tombstone): for a
        // record that is never deleted, this damage must not read as one.
        ("emptied".to_owned(), Some(Vec::new())),
        ("zeroed".to_owned(), Some(vec![0; whole.len()])),
    ];
    for at in [
        0,
        whole.len() / 3,
        whole.len() / 2,
        whole.len().saturating_sub(1),
    ] {
        let mut flipped = whole.to_vec();
        if let Some(byte) = flipped.get_mut(at) {
            *byte ^= 0x04;
            out.push((format!("bit flip at {at}"), Some(flipped)));
        }
    }
    out
}
