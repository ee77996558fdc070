//! The committed sample cursor ledgers (`tests/data/cursor-*`, written by earlier releases) as
//! entry payloads, for the decoders' tests: this build writes none of the kinds 4, 6, 7
//! and 8, so their tests decode these bytes.

use std::path::PathBuf;

use ackstore::internals::format::cursor::{EntryKind, peek_kind};
use ackstore::internals::format::ledger::{decode_frame, decode_header};

/// Every entry of ledger `ledger` of sample directory `sample` whose frame checks, with its
/// id, in entry order (a torn tail, which some samples end with, ends the list).
pub(crate) fn entries(sample: &str, ledger: u64) -> Vec<(u64, Vec<u8>)> {
    let path: PathBuf = [
        env!("CARGO_MANIFEST_DIR"),
        "data",
        sample,
        &format!("ledger-{ledger:020}.log"),
    ]
    .iter()
    .collect();
    let file = std::fs::read(&path).unwrap();
    let header = decode_header(&file).unwrap();
    let mut at = usize::try_from(header.data_start()).unwrap();
    let mut out = Vec::new();
    while let Some(rest) = file.get(at..).filter(|r| !r.is_empty()) {
        let Ok((frame, payload)) = decode_frame(&header, rest) else {
            break;
        };
        out.push((frame.entry_id, payload.to_vec()));
        at += usize::try_from(frame.frame_len()).unwrap();
    }
    out
}

/// The payloads of the entries of kind `kind` among [`entries`]; at least one.
pub(crate) fn payloads(sample: &str, ledger: u64, kind: EntryKind) -> Vec<Vec<u8>> {
    let out: Vec<_> = entries(sample, ledger)
        .into_iter()
        .filter(|(_, p)| peek_kind(p) == Ok(kind))
        .map(|(_, p)| p)
        .collect();
    assert!(!out.is_empty(), "{sample}: no entry of kind {kind:?}");
    out
}
