//! Buffers that devices fill and lend.
//!
//! - [`IoBuf`]: page-aligned I/O buffers, so that layers above a direct-I/O
//!   device (`O_DIRECT` needs the buffer address, offset and length aligned)
//!   can hand their own buffers straight to it, with no bounce copy in the
//!   device.
//! - `Frame` (a slice of 4 KiB-aligned `Page`s): one cached block's buffer,
//!   which the block cache's frame pool hands out and a device reads into.
//! - [`BlockRef`] / [`BlockSlice`]: reference-counted handles on a block's
//!   bytes (a cache frame, or a memory device's stripe), what
//!   [`Device::read_lent`](super::Device::read_lent) lends instead of copying.
//! - [`BufferPool`]: byte buffers a [`BlockRef`] gives back when its last
//!   handle drops, filled again without being zeroed (the file gateway's).
//!
//! They live here, beneath both the devices and the cache, so that the device
//! layer never names a type of the layer above it.

use std::ops::{Deref, DerefMut, Range};
use std::sync::{Arc, Weak};

/// The alignment every [`IoBuf`] has: a page, which satisfies every device's
/// [`super::Device::alignment`] in this crate.
pub const IO_ALIGN: usize = 4096;

/// A zero-filled byte buffer whose first byte is [`IO_ALIGN`]-aligned.
///
/// Built from a slightly larger `Vec` and an offset into it (no `unsafe`); its
/// length is fixed at creation.
pub struct IoBuf {
    storage: Vec<u8>,
    start: usize,
    len: usize,
}

impl IoBuf {
    /// A zeroed buffer of `len` bytes.
    pub fn zeroed(len: usize) -> Self {
        let storage = vec![0u8; len + IO_ALIGN];
        let start = storage.as_ptr().align_offset(IO_ALIGN);
        Self {
            storage,
            start,
            len,
        }
    }

    /// A buffer holding a copy of `data`, padded with zeroes to `len` bytes
    /// (`len` below `data.len()` is raised to it).
    pub fn copy_padded(data: &[u8], len: usize) -> Self {
        let mut buf = Self::zeroed(len.max(data.len()));
        buf[..data.len()].copy_from_slice(data);
        buf
    }

    /// Lengthens the buffer to at least `len` bytes, keeping its contents and
    /// zero-filling the rest (a reallocation only when it grows).
    pub fn grow(&mut self, len: usize) {
        if len > self.len {
            *self = Self::copy_padded(self, len);
        }
    }
}

/// An empty buffer; allocates nothing (so `std::mem::take` of a buffer is free).
impl Default for IoBuf {
    fn default() -> Self {
        Self {
            storage: Vec::new(),
            start: 0,
            len: 0,
        }
    }
}

// Not derived: a cloned `Vec` lives elsewhere and needs its own offset.
impl Clone for IoBuf {
    fn clone(&self) -> Self {
        Self::copy_padded(self, self.len)
    }
}

impl Deref for IoBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.storage[self.start..self.start + self.len]
    }
}

impl DerefMut for IoBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.storage[self.start..self.start + self.len]
    }
}

impl std::fmt::Debug for IoBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "IoBuf({} bytes)", self.len)
    }
}

/// True when `buf` can be handed to a device of alignment `align` as is.
pub fn is_aligned(buf: &[u8], align: u64) -> bool {
    (buf.as_ptr() as u64).is_multiple_of(align)
}

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
    pub(crate) fn new(pages: usize) -> Self {
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

/// A block's bytes, shared without a copy (a cache hit, or a memory device's
/// stripe): the bytes stay valid (and
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
    Pooled(Arc<Pooled>),
}

/// Byte buffers of one length, each given back by the [`BlockRef`] made of
/// it ([`BlockRef::pooled`]) when its last handle drops, and handed out
/// again as it is, not zeroed: for a reader that overwrites every byte
/// before any is read (the file gateway reads each missed block into one;
/// zeroing a fresh 1 MiB buffer per miss cost as much as the read's own
/// copy from the page cache). At most `max` idle buffers are kept; the rest
/// are freed. Lock-free: the idle buffers sit in a bounded channel
/// (`crossbeam-channel`'s array queue), taken and given back without a lock.
pub struct BufferPool {
    len: usize,
    give: crossbeam_channel::Sender<Vec<u8>>,
    take: crossbeam_channel::Receiver<Vec<u8>>,
}

impl BufferPool {
    /// A pool of `len`-byte buffers keeping at most `max` idle.
    pub fn new(len: usize, max: usize) -> Arc<Self> {
        let (give, take) = crossbeam_channel::bounded(max);
        Arc::new(Self { len, give, take })
    }

    /// The buffers' length.
    pub fn buffer_len(&self) -> usize {
        self.len
    }

    /// A buffer of the pool's length: an idle one, holding whatever its last
    /// user left there (the caller overwrites every byte before reading
    /// any), or a new zeroed one.
    pub fn take(&self) -> Vec<u8> {
        self.take.try_recv().unwrap_or_else(|_| vec![0u8; self.len])
    }

    /// Keeps `bytes` for a later [`take`](Self::take), if it is of the
    /// pool's length and fewer than `max` are idle; frees it otherwise.
    pub fn give_back(&self, bytes: Vec<u8>) {
        if bytes.len() == self.len {
            // Full: dropped here, freed.
            let _ = self.give.try_send(bytes);
        }
    }

    /// Buffers idle now.
    pub fn idle(&self) -> usize {
        self.take.len()
    }
}

/// A pooled buffer while handles on it live; its drop gives it back.
struct Pooled {
    bytes: Vec<u8>,
    home: Weak<BufferPool>,
}

impl Drop for Pooled {
    fn drop(&mut self) {
        if let Some(home) = self.home.upgrade() {
            home.give_back(std::mem::take(&mut self.bytes));
        }
    }
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
    /// stripe, or a block of the file gateway's cache (`cairn-files`).
    /// Panics if `bytes` is 4 GiB or longer.
    pub fn shared(bytes: Arc<Vec<u8>>) -> Self {
        let len = u32::try_from(bytes.len()).expect("a shared buffer under 4 GiB");
        Self {
            backing: Backing::Bytes(bytes),
            len,
        }
    }

    /// A handle on `bytes`, shared as [`shared`](Self::shared)'s are, which
    /// go back to `pool` when the last handle drops. Panics if `bytes` is
    /// 4 GiB or longer.
    pub fn pooled(bytes: Vec<u8>, pool: &Arc<BufferPool>) -> Self {
        let len = u32::try_from(bytes.len()).expect("a pooled buffer under 4 GiB");
        Self {
            backing: Backing::Pooled(Arc::new(Pooled {
                bytes,
                home: Arc::downgrade(pool),
            })),
            len,
        }
    }

    /// Whether both handles share one buffer (the same load of the block).
    pub fn same_buffer(&self, other: &BlockRef) -> bool {
        match (&self.backing, &other.backing) {
            (Backing::Frame(a), Backing::Frame(b)) => Arc::ptr_eq(a, b),
            (Backing::Bytes(a), Backing::Bytes(b)) => Arc::ptr_eq(a, b),
            (Backing::Pooled(a), Backing::Pooled(b)) => Arc::ptr_eq(a, b),
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
            Backing::Pooled(pooled) => pooled.bytes.as_slice(),
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

/// A byte range of a shared block (see [`BlockRef::slice`]); what
/// `BlockCache::read_refs` returns for a byte
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pooled_block_gives_its_buffer_back_when_its_last_handle_drops() {
        let pool = BufferPool::new(4096, 2);
        let fresh = pool.take();
        assert!(fresh.len() == 4096 && fresh.iter().all(|&x| x == 0));
        let mut bytes = fresh;
        bytes[..3].copy_from_slice(b"old");
        let ptr = bytes.as_ptr();
        let block = BlockRef::pooled(bytes, &pool);
        let other = block.clone();
        assert!(block.same_buffer(&other) && &block[..3] == b"old");
        drop(block);
        assert_eq!(pool.idle(), 0, "a handle still lives");
        drop(other);
        assert_eq!(pool.idle(), 1);
        // Handed out again as it was: the taker overwrites it.
        let again = pool.take();
        assert!(again.as_ptr() == ptr && &again[..3] == b"old");
        // At most `max` idle; a buffer of another length is not kept.
        for _ in 0..3 {
            pool.give_back(vec![0; 4096]);
        }
        pool.give_back(vec![0; 100]);
        assert_eq!(pool.idle(), 2);
        // A handle that outlives its pool frees its buffer.
        let orphan = BlockRef::pooled(again, &pool);
        drop(pool);
        assert_eq!(&orphan[..3], b"old");
        drop(orphan);
    }

    #[test]
    fn aligned_zeroed_and_sized() {
        for len in [0, 1, 511, 4096, 4097, 1 << 20] {
            let b = IoBuf::zeroed(len);
            assert_eq!(b.len(), len);
            assert!(is_aligned(&b, IO_ALIGN as u64));
            assert!(b.iter().all(|&x| x == 0));
        }
        let c = IoBuf::copy_padded(b"abc", 4096);
        assert_eq!(&c[..4], b"abc\0");
        assert_eq!(c.len(), 4096);
        // A clone is a new allocation, aligned again.
        let d = c.clone();
        assert!(IoBuf::default().is_empty());
        let mut e = IoBuf::copy_padded(b"xy", 2);
        e.grow(10_000);
        assert_eq!(e.len(), 10_000);
        assert_eq!(&e[..3], b"xy\0");
        assert!(is_aligned(&e, IO_ALIGN as u64));
        assert!(is_aligned(&d, IO_ALIGN as u64));
        assert_eq!(&d[..3], b"abc");
    }
}
