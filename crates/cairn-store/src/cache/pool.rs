//! Buffers: page-aligned frames from a per-shard pool, and the reference-
//! counted [`BlockRef`] a hit returns instead of a copy.
//!
//! A frame is an `Arc<Frame>`. The cache holds one reference while the block
//! is resident; each [`BlockRef`] holds another. Eviction drops only the
//! cache's reference and hands the frame back to the pool, which reuses it once
//! it is unique again (`Arc::get_mut` succeeds), so a handle stays valid for as
//! long as its holder keeps it, and no frame is written while anyone can read
//! it. Frames are 4 KiB-aligned (a slice of [`Page`]s), so a device opened with
//! `O_DIRECT` can read into them.

use std::collections::VecDeque;
use std::ops::{Deref, Range};
use std::sync::Arc;

/// The unit frames are made of: 4 KiB, aligned to 4 KiB.
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C, align(4096))]
pub(crate) struct Page([u8; PAGE]);

/// Bytes in a [`Page`].
pub(crate) const PAGE: usize = 4096;

/// One block's buffer.
pub(crate) struct Frame {
    pages: Box<[Page]>,
}

impl Frame {
    fn new(pages: usize) -> Self {
        Self {
            pages: bytemuck::zeroed_slice_box(pages),
        }
    }

    #[inline]
    pub(crate) fn bytes(&self) -> &[u8] {
        bytemuck::cast_slice(&self.pages)
    }

    #[inline]
    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        bytemuck::cast_slice_mut(&mut self.pages)
    }
}

/// A cached block, shared without a copy: the bytes stay valid (and
/// unchanged) for as long as the handle lives, even after the block is
/// evicted, invalidated or overwritten in the cache. Cloning is one atomic
/// increment.
#[derive(Clone)]
pub struct BlockRef {
    backing: Backing,
    len: u32,
}

/// What a [`BlockRef`] keeps alive: a cache frame, or a memory device's
/// stripe (see `MemoryDevice`'s `read_lent`).
#[derive(Clone)]
enum Backing {
    Frame(Arc<Frame>),
    Bytes(Arc<Vec<u8>>),
}

impl BlockRef {
    pub(crate) fn new(frame: Arc<Frame>, len: u32) -> Self {
        debug_assert!(len as usize <= frame.bytes().len());
        Self {
            backing: Backing::Frame(frame),
            len,
        }
    }

    /// A handle on shared bytes that are never written while shared (a
    /// writer that finds them shared copies them first): a memory device's
    /// stripe.
    pub(crate) fn shared(bytes: Arc<Vec<u8>>) -> Self {
        let len = u32::try_from(bytes.len()).expect("a shared buffer under 4 GiB");
        Self {
            backing: Backing::Bytes(bytes),
            len,
        }
    }

    /// Whether both handles share one buffer (the same load of the block).
    pub fn same_buffer(&self, other: &BlockRef) -> bool {
        match (&self.backing, &other.backing) {
            (Backing::Frame(a), Backing::Frame(b)) => Arc::ptr_eq(a, b),
            (Backing::Bytes(a), Backing::Bytes(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }

    /// A part of the block, still without a copy.
    pub fn slice(&self, range: Range<usize>) -> BlockSlice {
        self.clone().into_slice(range)
    }

    /// A part of the block, taking this handle (no reference-count traffic).
    pub fn into_slice(self, range: Range<usize>) -> BlockSlice {
        assert!(
            range.start <= range.end && range.end <= self.len as usize,
            "slice {range:?} of a {}-byte block",
            self.len
        );
        BlockSlice { block: self, range }
    }
}

impl Deref for BlockRef {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        let bytes = match &self.backing {
            Backing::Frame(frame) => frame.bytes(),
            Backing::Bytes(bytes) => bytes.as_slice(),
        };
        &bytes[..self.len as usize]
    }
}

impl AsRef<[u8]> for BlockRef {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl std::fmt::Debug for BlockRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "BlockRef({} bytes)", self.len)
    }
}

/// A byte range of a cached block (see [`BlockRef::slice`]); what
/// [`BlockCache::read_refs`](super::BlockCache::read_refs) returns for a byte
/// range that does not start or end on a block boundary.
#[derive(Clone, Debug)]
pub struct BlockSlice {
    block: BlockRef,
    range: Range<usize>,
}

impl BlockSlice {
    /// The block this slice is part of.
    pub fn block(&self) -> &BlockRef {
        &self.block
    }
}

impl Deref for BlockSlice {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        &self.block[self.range.clone()]
    }
}

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
