//! The text `ackstore inspect` prints for an [`Inspection`]: plain tables, one row per ledger,
//! cursor, topic or journal cursor; and the two text helpers those tables use ([`table`],
//! [`bytes`]), which the command prints its own reports with too.

use std::fmt;

use super::{Inspection, StoreInspection, TopicInspection};

impl fmt::Display for Inspection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Inspection::Topic(topic) => topic.fmt(f),
            Inspection::Store(store) => store.fmt(f),
        }
    }
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map_or_else(|| "-".into(), |v| v.to_string())
}

impl fmt::Display for TopicInspection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let rows: Vec<Vec<String>> = self
            .view
            .ledgers
            .iter()
            .map(|l| {
                vec![
                    l.id.to_string(),
                    l.role.into(),
                    l.entries.to_string(),
                    bytes(l.bytes),
                    if l.sealed { "sealed" } else { "open" }.into(),
                    format!("{}..{}", opt(l.first_index), opt(l.last_index)),
                    format!("{}..{}", opt(l.first_timestamp), opt(l.last_timestamp)),
                ]
            })
            .collect();
        writeln!(f, "ledgers")?;
        f.write_str(&table(
            &["id", "role", "entries", "bytes", "state", "index", "time"],
            &rows,
        ))?;
        let rows: Vec<Vec<String>> = self
            .view
            .cursors
            .iter()
            .map(|c| {
                vec![
                    format!("{:?}", c.name),
                    opt(c.mark_delete),
                    c.acked_ranges.to_string(),
                    c.acked_entries.to_string(),
                    format!("{}/{}", c.partial_entries, c.acked_batch_indexes),
                    opt(c.cursor_ledger),
                    c.state_source.clone(),
                    bytes(c.persisted_bytes),
                    format!(
                        "{} inline/{} own/{} pages",
                        c.partitions_inline, c.partitions_separate, c.index_pages
                    ),
                    c.epoch.to_string(),
                ]
            })
            .collect();
        writeln!(f, "\ncursors")?;
        f.write_str(&table(
            &[
                "name",
                "mark-delete",
                "ranges",
                "acked",
                "partial/msgs",
                "cursor ledger",
                "state from",
                "persisted",
                "partitions",
                "epoch",
            ],
            &rows,
        ))?;
        for cursor in &self.journal {
            writeln!(f, "journal state: {cursor}")?;
        }
        for p in &self.problems {
            writeln!(f, "problem: {p}")?;
        }
        Ok(())
    }
}

impl fmt::Display for StoreInspection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "store {:016x}: {} topics",
            self.store_id,
            self.topics.len()
        )?;
        writeln!(
            f,
            "{:>8}  {:>8}  {:>8}  name",
            "topic", "ledgers", "cursors"
        )?;
        for t in &self.topics {
            writeln!(
                f,
                "{:>8}  {:>8}  {:>8}  {}",
                t.id,
                t.ledgers,
                t.cursors,
                t.name.escape_debug()
            )?;
        }
        let j = &self.journal;
        writeln!(
            f,
            "cursor journal: {} segments, {} records, {} cursors committed \
             ({} partial entries in {} batch records){}",
            j.segments,
            j.records,
            j.cursors,
            j.partial_entries,
            j.batch_partitions,
            if j.torn_tail {
                ", a torn tail the next open cuts back"
            } else {
                ""
            }
        )?;
        if self.cursors.is_empty() {
            return Ok(());
        }
        let name = |n: &Option<String>, id: u64| {
            n.as_ref()
                .map_or_else(|| format!("#{id}"), |n| format!("{n:?}"))
        };
        let rows: Vec<Vec<String>> = self
            .cursors
            .iter()
            .map(|c| {
                vec![
                    name(&c.topic, c.topic_id),
                    name(&c.cursor, c.cursor_id),
                    opt(c.mark_delete),
                    c.acked_ranges
                        .map_or_else(|| "?".to_owned(), |n| n.to_string()),
                    c.acked_entries.to_string(),
                    c.partitions.to_string(),
                    format!("{}/{}", c.partial_entries, c.batch_records),
                    format!("{}@{}", c.marker_segment, c.marker_offset),
                    c.epoch.to_string(),
                ]
            })
            .collect();
        writeln!(f, "\njournal cursors")?;
        f.write_str(&table(
            &[
                "topic",
                "cursor",
                "mark-delete",
                "ranges",
                "acked",
                "partitions",
                "partial/batch records",
                "marker segment@byte",
                "epoch",
            ],
            &rows,
        ))
    }
}

/// A plain text table: a header row, then rows, columns padded to their widest cell. Padding is
/// written out rather than through a format width, so a cell of any length (a cursor name may be
/// longer than the 65,535 a width allows) is printed whole.
#[must_use]
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(cell.chars().count());
            }
        }
    }
    let mut out = String::new();
    let line = |out: &mut String, cells: &mut dyn Iterator<Item = &str>| {
        let mut first = true;
        for (cell, w) in cells.zip(&widths) {
            if !first {
                out.push_str("  ");
            }
            first = false;
            out.push_str(cell);
            out.extend(std::iter::repeat_n(
                ' ',
                w.saturating_sub(cell.chars().count()),
            ));
        }
        let trimmed = out.trim_end().len();
        out.truncate(trimmed);
        out.push('\n');
    };
    line(&mut out, &mut header.iter().copied());
    for row in rows {
        line(&mut out, &mut row.iter().map(String::as_str));
    }
    out
}

/// A byte count for people: `512 B`, `1.5 KiB`, `3.2 MiB`.
#[expect(clippy::cast_precision_loss, reason = "display only")]
#[must_use]
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut value = n as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}
