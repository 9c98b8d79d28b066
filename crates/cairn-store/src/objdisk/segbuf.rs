//! Segment buffers: the open segment's bytes, laid out as the object they
//! become, and reused.
//!
//! A [`SegBuf`] is one page-aligned buffer with `room` bytes kept in front
//! for the segment header (the header of a full segment without trims;
//! headers are whole blocks), then the blocks as they are written. Sealing
//! writes the header into the room, just before the blocks, and the object
//! is the buffer from there on ([`ObjectBuf`]): no copy of the blocks, and
//! with 4 KiB blocks the object is page-aligned, so the local segment cache
//! can write it with `O_DIRECT` as it is. A header that does not fit (many
//! trims) costs one copy into a fresh buffer.
//!
//! When a sealed object is dropped (uploaded, installed, read no more) its
//! buffer goes back to the [`BufPool`], which keeps a few: a steady stream
//! of segments reuses the same pages instead of faulting fresh zeroed ones
//! in for every 8 MiB.

use std::ops::Deref;
use std::sync::{Arc, Mutex, PoisonError};

use crate::device::IoBuf;

/// Free segment buffers (module docs).
#[derive(Debug)]
pub(crate) struct BufPool {
    free: Mutex<Vec<IoBuf>>,
    /// Bytes kept in front of the blocks for the header.
    room: usize,
    /// Bytes of a full segment's blocks.
    data: usize,
    /// Buffers kept at most.
    keep: usize,
}

impl BufPool {
    /// A pool of buffers for `data` bytes of blocks after `room` bytes of
    /// header, keeping up to `keep` free ones.
    pub(crate) fn new(room: usize, data: usize, keep: usize) -> Arc<Self> {
        Arc::new(Self {
            free: Mutex::new(Vec::new()),
            room,
            data,
            keep,
        })
    }

    fn free(&self) -> std::sync::MutexGuard<'_, Vec<IoBuf>> {
        self.free.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn take(&self) -> IoBuf {
        self.free()
            .pop()
            .unwrap_or_else(|| IoBuf::zeroed(self.room + self.data))
    }

    fn give(&self, buf: IoBuf) {
        if buf.len() == self.room + self.data {
            let mut free = self.free();
            if free.len() < self.keep {
                free.push(buf);
            }
        }
    }

    /// Free buffers held now.
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.free().len()
    }
}

/// The open segment's blocks, behind room for its header (module docs).
#[derive(Debug)]
pub(crate) struct SegBuf {
    /// Empty until the first block (an open segment nothing was written
    /// to holds no buffer).
    buf: IoBuf,
    len: usize,
    pool: Arc<BufPool>,
}

impl SegBuf {
    pub(crate) fn new(pool: &Arc<BufPool>) -> Self {
        Self {
            buf: IoBuf::default(),
            len: 0,
            pool: Arc::clone(pool),
        }
    }

    /// Bytes of blocks written.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The blocks written.
    pub(crate) fn data(&self) -> &[u8] {
        let room = self.pool.room;
        self.buf.get(room..room + self.len).unwrap_or_default()
    }

    /// The blocks written, to overwrite one in place.
    pub(crate) fn data_mut(&mut self) -> &mut [u8] {
        let room = self.pool.room;
        self.buf.get_mut(room..room + self.len).unwrap_or_default()
    }

    /// Keeps the first `len` bytes of the blocks written.
    pub(crate) fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    /// Appends `bytes` after the blocks written.
    pub(crate) fn push(&mut self, bytes: &[u8]) {
        let room = self.pool.room;
        if self.buf.is_empty() {
            self.buf = self.pool.take();
        }
        let end = room + self.len + bytes.len();
        if end > self.buf.len() {
            // More than a full segment (not done by the disk): grow.
            self.buf.grow(end.max(2 * self.buf.len()));
        }
        self.buf[room + self.len..end].copy_from_slice(bytes);
        self.len += bytes.len();
    }

    /// The segment object: `header` then the blocks.
    pub(crate) fn seal(mut self, header: &[u8]) -> ObjectBuf {
        let room = self.pool.room;
        let buf = std::mem::take(&mut self.buf);
        if header.len() <= room && !buf.is_empty() {
            let start = room - header.len();
            let mut buf = buf;
            buf[start..room].copy_from_slice(header);
            return ObjectBuf {
                buf,
                start,
                len: header.len() + self.len,
                pool: Some(Arc::clone(&self.pool)),
            };
        }
        let mut object = IoBuf::zeroed(header.len() + self.len);
        object[..header.len()].copy_from_slice(header);
        object[header.len()..].copy_from_slice(buf.get(room..room + self.len).unwrap_or_default());
        if !buf.is_empty() {
            self.pool.give(buf);
        }
        ObjectBuf {
            len: object.len(),
            buf: object,
            start: 0,
            pool: None,
        }
    }
}

impl Drop for SegBuf {
    fn drop(&mut self) {
        let buf = std::mem::take(&mut self.buf);
        if !buf.is_empty() {
            self.pool.give(buf);
        }
    }
}

/// A sealed segment object's bytes (module docs); its buffer goes back to
/// the pool when it is dropped.
pub(crate) struct ObjectBuf {
    buf: IoBuf,
    start: usize,
    len: usize,
    pool: Option<Arc<BufPool>>,
}

impl Deref for ObjectBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.buf[self.start..self.start + self.len]
    }
}

impl std::fmt::Debug for ObjectBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ObjectBuf({} bytes)", self.len)
    }
}

impl Drop for ObjectBuf {
    fn drop(&mut self) {
        if let Some(pool) = self.pool.take() {
            pool.give(std::mem::take(&mut self.buf));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::IO_ALIGN;

    #[test]
    fn a_sealed_object_is_the_header_then_the_blocks_in_place_and_aligned() {
        let pool = BufPool::new(8192, 4 * 4096, 2);
        let mut s = SegBuf::new(&pool);
        for b in 1..=3u8 {
            s.push(&[b; 4096]);
        }
        s.data_mut()[4096..8192].fill(9);
        assert_eq!(s.len(), 3 * 4096);
        let o = s.seal(&[7; 4096]);
        assert_eq!(o.len(), 4 * 4096);
        assert!(o[..4096].iter().all(|&x| x == 7));
        assert!(o[4096..8192].iter().all(|&x| x == 1));
        assert!(o[8192..12288].iter().all(|&x| x == 9));
        assert!(o[12288..].iter().all(|&x| x == 3));
        assert_eq!(o.as_ptr() as usize % IO_ALIGN, 0);
        assert_eq!(pool.held(), 0);
        drop(o);
        // Its buffer is reused by the next segment.
        assert_eq!(pool.held(), 1);
        let mut s = SegBuf::new(&pool);
        s.push(&[5; 4096]);
        assert_eq!(pool.held(), 0);
        assert_eq!(s.data(), &[5; 4096][..]);
    }

    #[test]
    fn a_header_larger_than_the_room_is_copied_and_nothing_is_lost() {
        let pool = BufPool::new(4096, 2 * 4096, 1);
        let mut s = SegBuf::new(&pool);
        s.push(&[1; 4096]);
        let o = s.seal(&[7; 8192]);
        assert_eq!(o.len(), 3 * 4096);
        assert!(o[..8192].iter().all(|&x| x == 7));
        assert!(o[8192..].iter().all(|&x| x == 1));
        // The open segment's buffer went back; the copy is not pooled.
        assert_eq!(pool.held(), 1);
        drop(o);
        assert_eq!(pool.held(), 1);
        // An empty segment seals to its header alone.
        let o = SegBuf::new(&pool).seal(&[3; 4096]);
        assert_eq!(&o[..], &[3; 4096][..]);
        // More than a full segment grows the buffer.
        let mut s = SegBuf::new(&pool);
        for b in 0..5u8 {
            s.push(&[b; 4096]);
        }
        assert_eq!(s.data()[4 * 4096], 4);
    }
}
