//! Bounded memory measured on the heap itself (design invariant 3): a counting global allocator
//! follows every byte each test's thread allocates. The allocator is per binary, so the tests
//! that count the heap share this one: the ack set's wrapper under its budget (`ackset`), a store
//! cursor at its open after a restart (`cursor`), a store's scan of its journal at its open
//! (`journal`).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

mod ackset;
mod cursor;
#[path = "../support/fds.rs"]
#[allow(dead_code, reason = "the heap tests take only its temporary directory")]
mod fds;
mod journal;

thread_local! {
    /// Live heap bytes this thread allocated while counting was on (other threads, such as the
    /// test harness's, allocate and free on their own).
    static LIVE: Cell<isize> = const { Cell::new(0) };
    /// Bytes this thread allocated in large blocks (at least [`LARGE`] bytes) while counting
    /// was on, freed or not: each such allocation's size, each growth of a reallocation to
    /// such a size. An allocator takes blocks that large fresh from the system (glibc's maps
    /// one of 128 KiB or more, and unmaps it when freed), which clears each page at its first
    /// touch: what a block's churn costs that a small one's does not.
    static LARGE_ALLOCATED: Cell<usize> = const { Cell::new(0) };
    /// Off while the test's partition store works: its records are not resident ack state.
    pub(crate) static COUNTING: Cell<bool> = const { Cell::new(true) };
}

struct Counting;

/// Blocks of at least this many bytes are large ([`large_allocated`]).
pub(crate) const LARGE: usize = 64 << 10;

/// Counts a change of `delta` bytes that leaves a block of `size` bytes.
fn count(delta: isize, size: usize) {
    if COUNTING.try_with(Cell::get).unwrap_or(false) {
        let _ = LIVE.try_with(|live| live.set(live.get() + delta));
        if let Ok(grown) = usize::try_from(delta)
            && size >= LARGE
        {
            let _ = LARGE_ALLOCATED.try_with(|all| all.set(all.get() + grown));
        }
    }
}

pub(crate) fn signed(n: usize) -> isize {
    isize::try_from(n).expect("allocation size fits isize")
}

// SAFETY: every call is forwarded unchanged to `System`; the counter has no effect on memory.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(signed(layout.size()), layout.size());
        // SAFETY: the caller's contract for `alloc` is passed on unchanged.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        count(-signed(layout.size()), 0);
        // SAFETY: `ptr` was allocated by `System` with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(signed(new_size) - signed(layout.size()), new_size);
        // SAFETY: the caller's contract for `realloc` is passed on unchanged.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

pub(crate) fn live() -> isize {
    LIVE.with(Cell::get)
}

pub(crate) fn large_allocated() -> usize {
    LARGE_ALLOCATED.with(Cell::get)
}
