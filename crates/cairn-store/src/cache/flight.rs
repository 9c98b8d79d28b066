//! Single-flight: the one device read every concurrent reader of a missing
//! block waits for.
//!
//! The first reader to miss a block (the leader) puts a [`Flight`] in the
//! block's slot and reads the device; readers arriving meanwhile clone the
//! flight, release the shard lock and wait on it. The leader completes the
//! flight with the buffer (every waiter gets the same one) or with a failure
//! (every waiter retries, so each sees the device's error itself).
//!
//! A write that lands while a flight is in the air *detaches* it: the slot is
//! removed so later readers start a fresh read of the new data, and the
//! leader, finding its flight no longer in the slot, does not install what it
//! read (see `BlockCache::write_at`).

use std::sync::Arc;

use super::sync::{Condvar, Mutex, lock};
use crate::device::Frame;

enum State {
    Pending,
    Ready(Arc<Frame>),
    Failed,
}

/// One block's device read in progress.
pub(crate) struct Flight {
    state: Mutex<State>,
    done: Condvar,
}

impl Flight {
    pub(crate) fn new() -> Self {
        Self {
            state: Mutex::new(State::Pending),
            done: Condvar::new(),
        }
    }

    /// Makes a finished flight pending again for reuse. Only called on a
    /// flight nobody else references.
    pub(crate) fn reset(&self) {
        *lock(&self.state) = State::Pending;
    }

    /// Ends the flight: `Some(frame)` on success, `None` on failure. Wakes
    /// every waiter.
    pub(crate) fn complete(&self, frame: Option<Arc<Frame>>) {
        let mut state = lock(&self.state);
        debug_assert!(matches!(*state, State::Pending), "a flight completes once");
        *state = frame.map_or(State::Failed, State::Ready);
        drop(state);
        self.done.notify_all();
    }

    /// Waits for the leader. `Some(frame)` on success; `None` if the read
    /// failed (the caller retries).
    pub(crate) fn wait(&self) -> Option<Arc<Frame>> {
        let mut state = lock(&self.state);
        loop {
            match &*state {
                State::Pending => {
                    state = self
                        .done
                        .wait(state)
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                }
                State::Ready(frame) => return Some(Arc::clone(frame)),
                State::Failed => return None,
            }
        }
    }
}
