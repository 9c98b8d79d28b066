//! The in-flight budget of one connection: the reader takes from it before
//! it reads a request, a reply gives it back once it is sent.

use std::sync::{Condvar, Mutex, PoisonError};

use super::lock::lock;
use crate::limits::{INFLIGHT_MAX_BYTES, INFLIGHT_MAX_REQUESTS};

/// Requests and payload bytes in flight on one connection (read, not yet
/// replied to), bounded by [`INFLIGHT_MAX_REQUESTS`] and
/// [`INFLIGHT_MAX_BYTES`].
#[derive(Default)]
pub(super) struct Budget {
    used: Mutex<Used>,
    freed: Condvar,
}

#[derive(Default)]
struct Used {
    bytes: u64,
    requests: usize,
    /// A reader waits in [`Budget::acquire`] (so a release must wake it).
    waiting: bool,
}

impl Budget {
    /// Wait until one more request and `bytes` fit (a request alone always
    /// fits), then take them.
    pub(super) fn acquire(&self, bytes: u64) -> u64 {
        let mut used = lock(&self.used);
        while used.requests >= INFLIGHT_MAX_REQUESTS
            || (used.bytes > 0 && used.bytes + bytes > INFLIGHT_MAX_BYTES)
        {
            used.waiting = true;
            used = self
                .freed
                .wait(used)
                .unwrap_or_else(PoisonError::into_inner);
        }
        used.requests += 1;
        used.bytes += bytes;
        bytes
    }

    /// Whether one more request and `bytes` would fit now, without waiting.
    pub(super) fn fits(&self, bytes: u64) -> bool {
        let used = lock(&self.used);
        used.requests < INFLIGHT_MAX_REQUESTS
            && (used.bytes == 0 || used.bytes + bytes <= INFLIGHT_MAX_BYTES)
    }

    /// Give back one request and its `bytes`.
    pub(super) fn release(&self, bytes: u64) {
        let mut used = lock(&self.used);
        used.requests -= 1;
        used.bytes -= bytes;
        if used.waiting {
            used.waiting = false;
            self.freed.notify_all();
        }
    }
}
