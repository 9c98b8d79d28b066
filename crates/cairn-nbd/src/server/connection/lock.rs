//! Taking a lock whatever a panicking thread left behind: every value these
//! locks guard stays consistent between statements, so a poisoned lock is
//! used as it is.

use std::sync::{Mutex, MutexGuard, PoisonError};

pub(super) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
