//! Page-aligned I/O buffers, so that layers above a direct-I/O device
//! (`O_DIRECT` needs the buffer address, offset and length aligned) can hand
//! their own buffers straight to it, with no bounce copy in the device.

use std::ops::{Deref, DerefMut};

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

#[cfg(test)]
mod tests {
    use super::*;

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
