//! The per-shard pool of page-aligned frames (the frames themselves, and the
//! reference-counted [`BlockRef`] a hit returns instead of a copy, are buffer
//! types of the device layer: `device/iobuf.rs`).
//!
//! A frame is an `Arc<Frame>`. The cache holds one reference while the block
//! is resident; each [`BlockRef`] holds another. Eviction drops only the
//! cache's reference and hands the frame back to the pool, which reuses it once
//! it is unique again (`Arc::get_mut` succeeds), so a handle stays valid for as
//! long as its holder keeps it, and no frame is written while anyone can read
//! it. Frames are 4 KiB-aligned (a slice of [`Page`]s), so a device opened with
//! `O_DIRECT` can read into them.

use std::collections::VecDeque;
use std::sync::Arc;

use crate::device::{Frame, PAGE};

/// How many returned frames [`FramePool::take`] examines before it allocates.
const RETURNED_SCAN: usize = 8;

/// One shard's frames: `free` are unique and ready; `returned` were evicted
/// or replaced while a [`BlockRef`] may still hold them.
pub(crate) struct FramePool {
    free: Vec<Arc<Frame>>,
    returned: VecDeque<Arc<Frame>>,
    pages: usize,
    /// Frames this pool owns or has handed out (resident, loading, free,
    /// returned).
    frames: usize,
    /// How many frames the pool keeps; beyond it a unique frame given back is
    /// released to the allocator.
    target: usize,
    /// Frames allocated after construction (the pool ran dry).
    pub(crate) grown: u64,
}

impl FramePool {
    /// A pool of `count` preallocated frames of `block_size` bytes.
    pub(crate) fn new(count: usize, block_size: usize) -> Self {
        let pages = block_size.div_ceil(PAGE);
        Self {
            free: (0..count).map(|_| Arc::new(Frame::new(pages))).collect(),
            returned: VecDeque::with_capacity(count),
            pages,
            frames: count,
            target: count,
            grown: 0,
        }
    }

    /// A frame nobody else references.
    pub(crate) fn take(&mut self) -> Arc<Frame> {
        if let Some(frame) = self.free.pop() {
            return frame;
        }
        for _ in 0..self.returned.len().min(RETURNED_SCAN) {
            let Some(frame) = self.returned.pop_front() else {
                break;
            };
            if Arc::strong_count(&frame) == 1 {
                return frame;
            }
            self.returned.push_back(frame);
        }
        self.grown += 1;
        self.frames += 1;
        Arc::new(Frame::new(self.pages))
    }

    /// Takes back a frame the cache no longer references; others may.
    pub(crate) fn give(&mut self, frame: Arc<Frame>) {
        if Arc::strong_count(&frame) == 1 {
            if self.frames > self.target {
                self.frames -= 1;
                return;
            }
            self.free.push(frame);
        } else {
            self.returned.push_back(frame);
        }
    }

    /// Frames the pool owns or has handed out.
    pub(crate) fn frames(&self) -> usize {
        self.frames
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::BlockRef;

    #[test]
    fn frames_are_page_aligned_and_a_held_frame_is_not_reused() {
        let mut pool = FramePool::new(1, 8192);
        let mut frame = pool.take();
        assert_eq!(frame.bytes().len(), 8192);
        assert_eq!(frame.bytes().as_ptr() as usize % PAGE, 0);
        Arc::get_mut(&mut frame).unwrap().bytes_mut()[0] = 7;
        let handle = BlockRef::new(Arc::clone(&frame), 8192);
        pool.give(frame);
        // The only frame is still held by `handle`: the pool must allocate.
        let other = pool.take();
        assert!(!handle.same_buffer(&BlockRef::new(Arc::clone(&other), 8192)));
        assert_eq!(pool.grown, 1);
        assert_eq!(handle[0], 7);
        pool.give(other);
        drop(handle);
        // Now unique again: reused, not allocated.
        let again = pool.take();
        assert_eq!(again.bytes()[0], 7);
        assert_eq!(pool.grown, 1);
    }

    #[test]
    fn a_pool_past_its_target_releases_unique_frames() {
        let mut pool = FramePool::new(1, 4096);
        let a = pool.take();
        let b = pool.take();
        assert_eq!(pool.frames(), 2);
        pool.give(a);
        assert_eq!(pool.frames(), 1);
        pool.give(b);
        assert_eq!(pool.frames(), 1);
    }
}
