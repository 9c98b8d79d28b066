//! Buffers kept for reuse by one connection: payload buffers (a fresh one
//! costs a zero-fill) and the emptied lists that hold a zero-copy READ's
//! lent blocks.

use std::sync::Mutex;

use cairn_store::cache::BlockSlice;

use super::lock::lock;
use crate::limits::{POOL_MAX_BYTES, POOLED_BUFFER_MAX_BYTES, POOLED_BUFFERS_MAX};

/// Payload buffers kept for reuse.
#[derive(Default)]
struct Pool {
    buffers: Vec<Vec<u8>>,
    /// The buffers' total capacity.
    bytes: usize,
}

#[derive(Default)]
pub(super) struct Buffers {
    pool: Mutex<Pool>,
    /// Emptied lists of lent buffers, for reuse.
    lent: Mutex<Vec<Vec<BlockSlice>>>,
}

impl Buffers {
    /// A buffer of `len` bytes: a kept one large enough if there is one.
    pub(super) fn take(&self, len: usize) -> Vec<u8> {
        let mut buffer = {
            let mut pool = lock(&self.pool);
            let index = pool.buffers.iter().position(|b| b.capacity() >= len);
            let buffer = match index {
                Some(index) => pool.buffers.swap_remove(index),
                None => pool.buffers.pop().unwrap_or_default(),
            };
            pool.bytes -= buffer.capacity();
            buffer
        };
        buffer.resize(len, 0);
        buffer
    }

    /// Keep `buffer` unless it is empty, too large, or the pool is full.
    pub(super) fn recycle(&self, buffer: Vec<u8>) {
        let capacity = buffer.capacity();
        if capacity == 0 || capacity > POOLED_BUFFER_MAX_BYTES {
            return;
        }
        let mut pool = lock(&self.pool);
        if pool.buffers.len() < POOLED_BUFFERS_MAX && pool.bytes + capacity <= POOL_MAX_BYTES {
            pool.bytes += capacity;
            pool.buffers.push(buffer);
        }
    }

    /// An empty list for a zero-copy READ's lent blocks.
    pub(super) fn take_lent(&self) -> Vec<BlockSlice> {
        lock(&self.lent).pop().unwrap_or_default()
    }

    pub(super) fn recycle_lent(&self, mut lent: Vec<BlockSlice>) {
        // Drop the handles (the blocks may be evicted now) outside the lock.
        lent.clear();
        let mut pool = lock(&self.lent);
        if pool.len() < POOLED_BUFFERS_MAX {
            pool.push(lent);
        }
    }
}
