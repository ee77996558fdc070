//! The partition table a marker commits, and how it is split into index pages.
//!
//! Owns: deciding which index pages a flush must rewrite. A table small enough to fit in the
//! marker is written inline. A larger one is split into pages by key range: page `i` holds
//! exactly the rows whose key is at least its first key and below the next page's first key
//! (page 0 also holds every smaller key). A flush rewrites only the pages whose rows changed,
//! splitting a page that grew past the maximum and dropping one that became empty, so a flush
//! after one ack costs one page, not the whole table.
//!
//! Pure planning; must never do I/O (the persister writes what the plan says).

use crate::ackset::PartitionKey;
use crate::format::cursor::{PageRef, PartitionRow, PersistedState};

/// Below or equal to every key: where page 0 starts.
const LOWEST_KEY: PartitionKey = PartitionKey {
    ledger_id: 0,
    chunk: 0,
};

/// The partition a table row describes; rows and pages sort by it.
pub(crate) fn row_key(row: &PartitionRow) -> PartitionKey {
    PartitionKey {
        ledger_id: row.ledger_id,
        chunk: row.chunk,
    }
}

/// The key of a page's first row (a page holds keys from it up to the next page's first).
pub(crate) fn page_key(page: &PageRef) -> PartitionKey {
    let (ledger_id, chunk) = page.first;
    PartitionKey { ledger_id, chunk }
}

/// The rows and pages of the last committed marker.
#[derive(Debug, Clone, Default)]
pub(crate) struct CommittedTable {
    /// Every row the marker references, ascending by key.
    pub rows: Vec<PartitionRow>,
    /// Its index pages, ascending; empty when the table was inline.
    pub pages: Vec<PageRef>,
    /// The cursor state it committed (`None` when unknown, or when the state is a snapshot).
    pub state: Option<PersistedState>,
}

/// What to do with one page of the new table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PagePlan {
    /// Unchanged: reference the existing page entry again.
    Keep(PageRef),
    /// Write these rows (ascending, non-empty) as a new page entry.
    Write(Vec<PartitionRow>),
}

/// Plans the pages of `new` (ascending by key) given the committed table, with at most
/// `max_rows` rows per page.
///
/// With no committed pages, the rows are cut into pages half full so they can grow in place.
pub(crate) fn plan_pages(
    committed: &CommittedTable,
    new: &[PartitionRow],
    max_rows: usize,
) -> Vec<PagePlan> {
    let max_rows = max_rows.max(2);
    if committed.pages.is_empty() {
        return new
            .chunks(max_rows / 2)
            .map(|c| PagePlan::Write(c.to_vec()))
            .collect();
    }
    let mut plan = Vec::with_capacity(committed.pages.len());
    for (i, page) in committed.pages.iter().enumerate() {
        let lo = if i == 0 { LOWEST_KEY } else { page_key(page) };
        let hi = committed.pages.get(i + 1).map(page_key);
        let rows = in_range(new, lo, hi);
        if in_range(&committed.rows, lo, hi) == rows {
            plan.push(PagePlan::Keep(*page));
            continue;
        }
        if rows.len() <= max_rows {
            if !rows.is_empty() {
                plan.push(PagePlan::Write(rows.to_vec()));
            }
        } else {
            plan.extend(
                rows.chunks(max_rows / 2)
                    .map(|c| PagePlan::Write(c.to_vec())),
            );
        }
    }
    plan
}

/// The rows of `rows` (ascending) with `lo <= key < hi`.
pub(crate) fn in_range(
    rows: &[PartitionRow],
    lo: PartitionKey,
    hi: Option<PartitionKey>,
) -> &[PartitionRow] {
    let start = rows.partition_point(|r| row_key(r) < lo);
    let end = hi.map_or(rows.len(), |h| rows.partition_point(|r| row_key(r) < h));
    rows.get(start..end.max(start)).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(ledger: u64, chunk: u64, entry: u64) -> PartitionRow {
        PartitionRow {
            ledger_id: ledger,
            chunk,
            entry_id: entry,
            crc: 0,
            cardinality: 1,
        }
    }

    use std::collections::BTreeMap;

    fn key(ledger_id: u64, chunk: u64) -> PartitionKey {
        PartitionKey { ledger_id, chunk }
    }

    fn table(rows: impl IntoIterator<Item = PartitionRow>) -> BTreeMap<PartitionKey, PartitionRow> {
        rows.into_iter().map(|r| (row_key(&r), r)).collect()
    }

    fn sorted(rows: &BTreeMap<PartitionKey, PartitionRow>) -> Vec<PartitionRow> {
        rows.values().copied().collect()
    }

    /// Commits a plan as the persister would, giving page `n` entry id `1000 + n`.
    fn commit(plan: &[PagePlan], rows: &BTreeMap<PartitionKey, PartitionRow>) -> CommittedTable {
        let pages = plan
            .iter()
            .enumerate()
            .map(|(n, p)| match p {
                PagePlan::Keep(r) => *r,
                PagePlan::Write(rows) => PageRef {
                    first: rows[0].key(),
                    entry_id: 1000 + n as u64,
                    crc: 0,
                    rows: u32::try_from(rows.len()).unwrap(),
                },
            })
            .collect();
        CommittedTable {
            rows: sorted(rows),
            pages,
            state: None,
        }
    }

    fn written(plan: &[PagePlan]) -> usize {
        plan.iter()
            .filter(|p| matches!(p, PagePlan::Write(_)))
            .count()
    }

    #[test]
    fn first_paging_writes_half_full_pages() {
        let new = table((0..10).map(|c| row(1, c, c)));
        let plan = plan_pages(&CommittedTable::default(), &sorted(&new), 4);
        assert_eq!(plan.len(), 5);
        assert_eq!(written(&plan), 5);
    }

    #[test]
    fn one_changed_row_rewrites_one_page() {
        let new = table((0..100).map(|c| row(1, c, c)));
        let plan = plan_pages(&CommittedTable::default(), &sorted(&new), 20);
        let committed = commit(&plan, &new);
        let mut next = new.clone();
        next.insert(key(1, 55), row(1, 55, 999));
        let plan = plan_pages(&committed, &sorted(&next), 20);
        assert_eq!(written(&plan), 1);
        assert_eq!(plan.len(), committed.pages.len());
    }

    #[test]
    fn pages_split_when_full_and_vanish_when_empty() {
        let new = table((0..8).map(|c| row(1, c * 10, c)));
        let committed = commit(
            &plan_pages(&CommittedTable::default(), &sorted(&new), 4),
            &new,
        );
        assert_eq!(committed.pages.len(), 4);
        // Grow the second page (keys 20..40) past the maximum.
        let mut grown = new.clone();
        for c in 21..29 {
            grown.insert(key(1, c), row(1, c, c));
        }
        let plan = plan_pages(&committed, &sorted(&grown), 4);
        assert_eq!(plan.len(), 3 + 5);
        // Empty the first page.
        let mut shrunk = new.clone();
        shrunk.remove(&key(1, 0));
        shrunk.remove(&key(1, 10));
        let plan = plan_pages(&committed, &sorted(&shrunk), 4);
        assert_eq!(plan.len(), 3);
        assert_eq!(written(&plan), 0);
    }

    #[test]
    fn every_row_lands_in_exactly_one_page_in_order() {
        let new = table((0..50).map(|c| row(c % 3, c, c)));
        let mut committed = commit(
            &plan_pages(&CommittedTable::default(), &sorted(&new), 6),
            &new,
        );
        let mut current = new;
        for step in 0..40u64 {
            let mut next = current.clone();
            next.remove(&key(step % 3, step * 7 % 50));
            next.insert(key(step % 5, 100 + step), row(step % 5, 100 + step, step));
            next.insert(key(0, step), row(0, step, step + 500));
            let plan = plan_pages(&committed, &sorted(&next), 6);
            // Expand the plan into rows: kept pages carry the committed rows of their range.
            let mut rows = Vec::new();
            let mut firsts = Vec::new();
            for p in &plan {
                let page_rows: Vec<PartitionRow> = match p {
                    PagePlan::Write(r) => r.clone(),
                    PagePlan::Keep(r) => {
                        let i = committed.pages.iter().position(|x| x == r).unwrap();
                        let lo = if i == 0 { LOWEST_KEY } else { page_key(r) };
                        let hi = committed.pages.get(i + 1).map(page_key);
                        in_range(&committed.rows, lo, hi).to_vec()
                    }
                };
                assert!(!page_rows.is_empty() && page_rows.len() <= 6);
                firsts.push(page_rows[0].key());
                rows.extend(page_rows);
            }
            assert_eq!(rows, next.values().copied().collect::<Vec<_>>());
            assert!(firsts.windows(2).all(|w| w[0] < w[1]));
            committed = commit(&plan, &next);
            current = next;
        }
    }
}
