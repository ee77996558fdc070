//! The partition table a marker commits, and how it is split into index pages.
//!
//! Owns: the committed table of one cursor ([`CommittedTable`]: each live partition's
//! [`Location`], the compact index pages) and deciding which pages a flush must rewrite. A
//! table small enough is written inline in the marker. A larger one is split into pages by key
//! range: page `i` holds exactly the rows whose key is at least its first key and below the
//! next page's first key (page 0 also holds every smaller key). Pages are bounded by rows and
//! by bytes (a row carrying a partition inline weighs its inline form). A flush rewrites only
//! the pages whose rows changed, splitting a page that grew past either bound into half-full
//! pages and dropping one that became empty, so a flush after one ack costs one page, not the
//! whole table.
//!
//! Pure planning; must never do I/O (the persister writes what the plan says).

use std::ops::Range;

use crate::ackset::PartitionKey;
use crate::format::cursor::{CRC_LEN, ENTRY_CRC_LEN, HEADER_LEN, PersistedState, key_len};
use crate::format::varint_len;

use super::store::Location;

/// Below or equal to every key: where page 0 starts.
const LOWEST_KEY: PartitionKey = PartitionKey {
    ledger_id: 0,
    chunk: 0,
};

/// One live partition of a committed table and where its record is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Row {
    /// The partition.
    pub key: PartitionKey,
    /// Its record: its own entry, or inline in a page or the marker.
    pub location: Location,
}

/// One compact index page of a committed table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Page {
    /// The key of its first row (it holds keys from here to the next page's first).
    pub first: PartitionKey,
    /// The cursor-ledger entry holding it.
    pub entry_id: u64,
    /// CRC32 of that entry's payload.
    pub crc: u32,
    /// Rows it holds (at least 1).
    pub rows: u32,
    /// Bytes of its payload.
    pub len: u64,
}

/// The rows and pages of the last committed marker.
#[derive(Debug, Clone, Default)]
pub(crate) struct CommittedTable {
    /// Every row the marker references, ascending by key.
    pub rows: Vec<Row>,
    /// Its compact index pages, ascending; empty when the table was inline, or when the marker
    /// is of an earlier kind (its pages are not reused: the next flush pages the table afresh).
    pub pages: Vec<Page>,
    /// The cursor state it committed (`None` when unknown, or when the state is a snapshot).
    pub state: Option<PersistedState>,
}

/// What a row of the table a flush writes carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Body {
    /// The record is where this says (unchanged since it was written there).
    Stored(Location),
    /// The record's inline form, to be written in this flush's table.
    Inline(Vec<u8>),
}

/// One row of the table a flush writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NewRow {
    /// The partition.
    pub key: PartitionKey,
    /// Acked entries in it.
    pub cardinality: u64,
    /// Where its record is, or its inline form.
    pub body: Body,
}

impl NewRow {
    /// The bytes this row takes in a page or marker, at most: its key is counted as if it were
    /// the first of its list (a delta-coded key is never longer).
    pub(crate) fn max_len(&self) -> usize {
        let form = match &self.body {
            Body::Inline(bytes) => varint_len(bytes.len() as u64) + bytes.len(),
            Body::Stored(l) => match l.inline_at {
                Some(_) => varint_len(l.len) + usize::try_from(l.len).unwrap_or(usize::MAX),
                None => 1 + varint_len(l.entry_id) + ENTRY_CRC_LEN,
            },
        };
        key_len(None, (self.key.ledger_id, self.key.chunk)) + varint_len(self.cardinality) + form
    }

    /// Whether this row is `old`, unchanged: same key, and its record where `old` says.
    fn is(&self, old: &Row) -> bool {
        self.key == old.key && self.body == Body::Stored(old.location)
    }
}

/// Most rows and bytes a page, or a marker's inline table, holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limits {
    /// Rows.
    pub rows: usize,
    /// Bytes of the page's payload (frame, count and rows) or of the marker's rows.
    pub bytes: usize,
}

impl Limits {
    /// Bytes a page of `rows` rows adds around them, at most: frame, count varint, CRC.
    fn page_overhead(rows: usize) -> usize {
        HEADER_LEN + varint_len(rows as u64) + CRC_LEN
    }

    /// Whether `rows` fit one page.
    pub(crate) fn fit_page(&self, rows: &[NewRow]) -> bool {
        rows.len() <= self.rows
            && Self::page_overhead(rows.len()) + rows.iter().map(NewRow::max_len).sum::<usize>()
                <= self.bytes
    }

    /// Whether `rows` fit inline in a marker: the bounds of one page, for the rows alone.
    pub(crate) fn fit_inline(&self, rows: &[NewRow]) -> bool {
        rows.len() <= self.rows && rows.iter().map(NewRow::max_len).sum::<usize>() <= self.bytes
    }
}

/// What to do with one page of the new table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PagePlan {
    /// Unchanged: reference the existing page entry again.
    Keep(Page),
    /// Write these rows (a non-empty range of the new table) as a new page entry.
    Write(Range<usize>),
}

/// Plans the pages of `new` (ascending by key) given the committed table, within `limits`.
///
/// With no committed pages, the rows are cut into pages half full (by rows and by bytes) so
/// they can grow in place.
pub(crate) fn plan_pages(
    committed: &CommittedTable,
    new: &[NewRow],
    limits: Limits,
) -> Vec<PagePlan> {
    let half = Limits {
        rows: (limits.rows / 2).max(1),
        bytes: limits.bytes / 2,
    };
    if committed.pages.is_empty() {
        return chunks(new, 0..new.len(), half);
    }
    let mut plan = Vec::with_capacity(committed.pages.len());
    for (i, page) in committed.pages.iter().enumerate() {
        let lo = if i == 0 { LOWEST_KEY } else { page.first };
        let hi = committed.pages.get(i + 1).map(|p| p.first);
        let range = key_range(new, |r| r.key, lo, hi);
        let rows = new.get(range.clone()).unwrap_or_default();
        let old = committed
            .rows
            .get(key_range(&committed.rows, |r| r.key, lo, hi))
            .unwrap_or_default();
        if rows.len() == old.len() && rows.iter().zip(old).all(|(n, o)| n.is(o)) {
            plan.push(PagePlan::Keep(*page));
        } else if rows.is_empty() {
            // An emptied page is dropped.
        } else if limits.fit_page(rows) {
            plan.push(PagePlan::Write(range));
        } else {
            plan.extend(chunks(new, range, half));
        }
    }
    plan
}

/// Cuts `new[range]` into consecutive pages, each as full as `limits` allow (at least one row).
fn chunks(new: &[NewRow], range: Range<usize>, limits: Limits) -> Vec<PagePlan> {
    let mut plan = Vec::new();
    let mut start = range.start;
    let mut bytes = 0;
    for i in range.clone() {
        let len = new.get(i).map_or(0, NewRow::max_len);
        let rows = i - start;
        let over =
            rows + 1 > limits.rows || Limits::page_overhead(rows + 1) + bytes + len > limits.bytes;
        if rows > 0 && over {
            plan.push(PagePlan::Write(start..i));
            start = i;
            bytes = 0;
        }
        bytes += len;
    }
    if start < range.end {
        plan.push(PagePlan::Write(start..range.end));
    }
    plan
}

/// The indexes of the items of `items` (ascending by `key`) with `lo <= key < hi`.
pub(crate) fn key_range<T>(
    items: &[T],
    key: impl Fn(&T) -> PartitionKey,
    lo: PartitionKey,
    hi: Option<PartitionKey>,
) -> Range<usize> {
    let start = items.partition_point(|r| key(r) < lo);
    let end = hi.map_or(items.len(), |h| items.partition_point(|r| key(r) < h));
    start..end.max(start)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn key(ledger_id: u64, chunk: u64) -> PartitionKey {
        PartitionKey { ledger_id, chunk }
    }

    /// A row whose record is in entry `entry` (a stored copy, unchanged while `entry` is).
    fn stored(ledger: u64, chunk: u64, entry: u64) -> NewRow {
        NewRow {
            key: key(ledger, chunk),
            cardinality: 1,
            body: Body::Stored(Location {
                entry_id: entry,
                crc: 0,
                cardinality: 1,
                len: 20,
                inline_at: None,
            }),
        }
    }

    /// A row carrying a fresh inline form of `len` bytes.
    fn fresh(ledger: u64, chunk: u64, len: usize) -> NewRow {
        NewRow {
            key: key(ledger, chunk),
            cardinality: 1,
            body: Body::Inline(vec![2; len]),
        }
    }

    fn table(rows: impl IntoIterator<Item = NewRow>) -> BTreeMap<PartitionKey, NewRow> {
        rows.into_iter().map(|r| (r.key, r)).collect()
    }

    fn sorted(rows: &BTreeMap<PartitionKey, NewRow>) -> Vec<NewRow> {
        rows.values().cloned().collect()
    }

    fn limits(rows: usize) -> Limits {
        Limits {
            rows,
            bytes: 1 << 20,
        }
    }

    /// Commits a plan as the persister would: page `n` goes to entry `1000 + n`, and every row
    /// of a written page becomes stored inline in it.
    fn commit(plan: &[PagePlan], new: &[NewRow], before: &CommittedTable) -> CommittedTable {
        let mut rows = Vec::new();
        let mut pages = Vec::new();
        for (n, p) in plan.iter().enumerate() {
            match p {
                PagePlan::Keep(page) => {
                    let i = before.pages.iter().position(|x| x == page).unwrap();
                    let lo = if i == 0 { LOWEST_KEY } else { page.first };
                    let hi = before.pages.get(i + 1).map(|p| p.first);
                    rows.extend_from_slice(
                        &before.rows[key_range(&before.rows, |r| r.key, lo, hi)],
                    );
                    pages.push(*page);
                }
                PagePlan::Write(range) => {
                    let entry_id = 1000 + n as u64;
                    for (at, r) in new[range.clone()].iter().enumerate() {
                        let location = match &r.body {
                            Body::Stored(l) => *l,
                            Body::Inline(b) => Location {
                                entry_id,
                                crc: 0,
                                cardinality: r.cardinality,
                                len: b.len() as u64,
                                inline_at: Some(u32::try_from(at).unwrap()),
                            },
                        };
                        rows.push(Row {
                            key: r.key,
                            location,
                        });
                    }
                    pages.push(Page {
                        first: new[range.start].key,
                        entry_id,
                        crc: 0,
                        rows: u32::try_from(range.len()).unwrap(),
                        len: 0,
                    });
                }
            }
        }
        CommittedTable {
            rows,
            pages,
            state: None,
        }
    }

    /// The new table as the next flush sees it after `committed`: every row stored where the
    /// committed table says.
    fn unchanged(committed: &CommittedTable) -> BTreeMap<PartitionKey, NewRow> {
        table(committed.rows.iter().map(|r| NewRow {
            key: r.key,
            cardinality: r.location.cardinality,
            body: Body::Stored(r.location),
        }))
    }

    fn written(plan: &[PagePlan]) -> usize {
        plan.iter()
            .filter(|p| matches!(p, PagePlan::Write(_)))
            .count()
    }

    #[test]
    fn first_paging_writes_half_full_pages() {
        let new = sorted(&table((0..10).map(|c| stored(1, c, c))));
        let plan = plan_pages(&CommittedTable::default(), &new, limits(4));
        assert_eq!(plan.len(), 5);
        assert_eq!(written(&plan), 5);
    }

    #[test]
    fn pages_are_cut_by_bytes_as_well_as_rows() {
        // Rows of 305 bytes: pages of at most 1,000 bytes are cut half full, one row each; pages
        // of 1,300, two rows each.
        let new = sorted(&table((0..9).map(|c| fresh(1, c, 300))));
        let bytes = Limits {
            rows: 100,
            bytes: 1000,
        };
        let plan = plan_pages(&CommittedTable::default(), &new, bytes);
        assert_eq!(plan.len(), 9);
        let wide = Limits {
            rows: 100,
            bytes: 1300,
        };
        let plan = plan_pages(&CommittedTable::default(), &new, wide);
        assert_eq!(plan.len(), 5, "{plan:?}");
        for p in &plan {
            let PagePlan::Write(range) = p else {
                panic!("a first paging writes every page")
            };
            assert!(Limits::page_overhead(range.len()) + range.len() * 305 <= 650);
        }
        // A single row larger than half a page still gets a page of its own.
        let big = vec![fresh(1, 0, 900), fresh(1, 1, 900)];
        assert_eq!(plan_pages(&CommittedTable::default(), &big, bytes).len(), 2);
    }

    #[test]
    fn one_changed_row_rewrites_one_page() {
        let new = sorted(&table((0..100).map(|c| fresh(1, c, 10))));
        let committed = commit(
            &plan_pages(&CommittedTable::default(), &new, limits(20)),
            &new,
            &CommittedTable::default(),
        );
        let mut next = unchanged(&committed);
        assert_eq!(
            written(&plan_pages(&committed, &sorted(&next), limits(20))),
            0,
            "an unchanged table rewrites nothing"
        );
        next.insert(key(1, 55), fresh(1, 55, 12));
        let plan = plan_pages(&committed, &sorted(&next), limits(20));
        assert_eq!(written(&plan), 1);
        assert_eq!(plan.len(), committed.pages.len());
    }

    #[test]
    fn a_page_that_grows_past_its_bytes_is_split() {
        let bytes = Limits {
            rows: 100,
            bytes: 1000,
        };
        let new = sorted(&table((0..6).map(|c| fresh(1, c * 10, 100))));
        let committed = commit(
            &plan_pages(&CommittedTable::default(), &new, bytes),
            &new,
            &CommittedTable::default(),
        );
        assert_eq!(committed.pages.len(), 2);
        // Three rows of the first page (four rows) grow to 400 bytes: it no longer fits and
        // splits into half-full pages (one row each, as two rows take more than 500 bytes); the
        // second page stays.
        let mut grown = unchanged(&committed);
        for c in [0, 10, 20] {
            grown.insert(key(1, c), fresh(1, c, 400));
        }
        let plan = plan_pages(&committed, &sorted(&grown), bytes);
        assert_eq!(written(&plan), 4, "{plan:?}");
        assert_eq!(plan.len(), 5);
        assert_eq!(plan[4], PagePlan::Keep(committed.pages[1]));
    }

    #[test]
    fn pages_split_when_full_and_vanish_when_empty() {
        let new = sorted(&table((0..8).map(|c| stored(1, c * 10, c))));
        let committed = commit(
            &plan_pages(&CommittedTable::default(), &new, limits(4)),
            &new,
            &CommittedTable::default(),
        );
        assert_eq!(committed.pages.len(), 4);
        // Grow the second page (keys 20..40) past the maximum.
        let mut grown = unchanged(&committed);
        for c in 21..29 {
            grown.insert(key(1, c), stored(1, c, c));
        }
        let plan = plan_pages(&committed, &sorted(&grown), limits(4));
        assert_eq!(plan.len(), 3 + 5);
        // Empty the first page.
        let mut shrunk = unchanged(&committed);
        shrunk.remove(&key(1, 0));
        shrunk.remove(&key(1, 10));
        let plan = plan_pages(&committed, &sorted(&shrunk), limits(4));
        assert_eq!(plan.len(), 3);
        assert_eq!(written(&plan), 0);
    }

    #[test]
    fn every_row_lands_in_exactly_one_page_in_order() {
        let new =
            sorted(&table((0..50).map(|c| {
                fresh(c % 3, c, 5 + usize::try_from(c % 40).unwrap())
            })));
        let bytes = Limits {
            rows: 6,
            bytes: 200,
        };
        let mut committed = commit(
            &plan_pages(&CommittedTable::default(), &new, bytes),
            &new,
            &CommittedTable::default(),
        );
        for step in 0..40u64 {
            let mut next = unchanged(&committed);
            next.remove(&key(step % 3, step * 7 % 50));
            next.insert(key(step % 5, 100 + step), fresh(step % 5, 100 + step, 30));
            next.insert(key(0, step), stored(0, step, step + 500));
            let rows = sorted(&next);
            let plan = plan_pages(&committed, &rows, bytes);
            let after = commit(&plan, &rows, &committed);
            // Every row of the new table is in exactly one page, in order, within the bounds.
            let keys: Vec<_> = after.rows.iter().map(|r| r.key).collect();
            assert_eq!(keys, next.keys().copied().collect::<Vec<_>>());
            assert!(after.pages.windows(2).all(|w| w[0].first < w[1].first));
            for (i, page) in after.pages.iter().enumerate() {
                let lo = if i == 0 { LOWEST_KEY } else { page.first };
                let hi = after.pages.get(i + 1).map(|p| p.first);
                let range = key_range(&after.rows, |r| r.key, lo, hi);
                assert!(!range.is_empty() && range.len() <= 6);
                assert_eq!(after.rows[range.start].key, page.first);
            }
            committed = after;
        }
    }
}
