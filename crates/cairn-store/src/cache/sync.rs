//! The synchronisation primitives the cache uses: `std`'s, or shuttle's when
//! the `shuttle` feature is on, so the randomized-scheduler tests
//! (`tests/cache_shuttle.rs`) can interleave every lock, wait and atomic of
//! the single-flight and invalidation paths.

#[cfg(feature = "shuttle")]
pub(crate) use shuttle::sync::{
    Condvar, Mutex, MutexGuard,
    atomic::{AtomicU64, AtomicUsize, Ordering},
};
#[cfg(not(feature = "shuttle"))]
pub(crate) use std::sync::{
    Condvar, Mutex, MutexGuard,
    atomic::{AtomicU64, AtomicUsize, Ordering},
};

/// Locks `mutex`, ignoring poison: every critical section in the cache leaves
/// its state consistent before anything in it can panic.
#[inline]
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A value alone on its cache lines (two, against the adjacent-line
/// prefetcher), so shards locked by different threads do not false-share.
#[repr(align(128))]
pub(crate) struct Padded<T>(pub T);

impl<T> std::ops::Deref for Padded<T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        &self.0
    }
}
