//! The crate's one way to take a plain mutex: [`lock`], which ignores a panicking holder's poison.
//!
//! Owns: that lock helper. Must never: call into the crate (this is the bottom layer, std only),
//! or do I/O.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks `m`, keeping its data if a panicking thread poisoned it: every state the crate keeps
/// under a mutex is left consistent by its writers between any two of their statements, so a
/// panic elsewhere does not make it wrong, and one thread's panic does not cascade into every
/// later caller.
pub fn lock<T: ?Sized>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
