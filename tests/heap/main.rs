//! Bounded memory measured on the heap itself (design invariant 3): a counting global allocator
//! follows every byte each test's thread allocates. The allocator is per binary, so the tests
//! that count the heap share this one: the ack set's wrapper under its budget (`ackset`), a store
//! cursor at its open after a restart (`cursor`).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

mod ackset;
mod cursor;

thread_local! {
    /// Live heap bytes this thread allocated while counting was on (other threads, such as the
    /// test harness's, allocate and free on their own).
    static LIVE: Cell<isize> = const { Cell::new(0) };
    /// Off while the test's partition store works: its records are not resident ack state.
    pub(crate) static COUNTING: Cell<bool> = const { Cell::new(true) };
}

struct Counting;

fn count(delta: isize) {
    if COUNTING.try_with(Cell::get).unwrap_or(false) {
        let _ = LIVE.try_with(|live| live.set(live.get() + delta));
    }
}

pub(crate) fn signed(n: usize) -> isize {
    isize::try_from(n).expect("allocation size fits isize")
}

// SAFETY: every call is forwarded unchanged to `System`; the counter has no effect on memory.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(signed(layout.size()));
        // SAFETY: the caller's contract for `alloc` is passed on unchanged.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        count(-signed(layout.size()));
        // SAFETY: `ptr` was allocated by `System` with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(signed(new_size) - signed(layout.size()));
        // SAFETY: the caller's contract for `realloc` is passed on unchanged.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

pub(crate) fn live() -> isize {
    LIVE.with(Cell::get)
}
