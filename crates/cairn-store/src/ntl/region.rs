//! The persistent-memory region abstraction every NTL structure is written against,
//! so the same code runs over a real mapping ([`super::MmapRegion`]) and over a
//! simulated crash model in tests.

use crate::device::{DeviceError, DeviceOp};

/// A byte-addressed range of (possibly) persistent memory.
///
/// Durability contract: bytes written with [`Region::write`] or
/// [`Region::store_u64`] are durable once every range holding them was passed to
/// [`Region::flush`] and a [`Region::fence`] followed. Nothing is promised about
/// unflushed or unfenced stores after a crash, except that an aligned 8-byte
/// [`Region::store_u64`] is never torn.
pub trait Region: Send + Sync {
    /// Length in bytes.
    fn len(&self) -> u64;

    /// Whether the region has no bytes.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Copies `buf.len()` bytes starting at `offset` into `buf`.
    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), DeviceError>;

    /// Copies `data` into the region at `offset` (not yet durable).
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), DeviceError>;

    /// Loads the aligned little-endian 8-byte word at `offset` atomically.
    fn load_u64(&self, offset: u64) -> Result<u64, DeviceError>;

    /// Stores `value` as one aligned, untearable little-endian 8-byte word at `offset`
    /// (not yet durable).
    fn store_u64(&self, offset: u64, value: u64) -> Result<(), DeviceError>;

    /// Starts writing back every `(offset, len)` range; durable after [`Region::fence`].
    fn flush(&self, ranges: &[(u64, u64)]) -> Result<(), DeviceError>;

    /// A hint that `offset..offset+len` will be read soon (no effect on contents;
    /// out-of-range hints are ignored). Default: nothing.
    fn prefetch(&self, offset: u64, len: u64) {
        let _ = (offset, len);
    }

    /// [`Region::store_u64`] then [`Region::flush`] of the word: durable after the
    /// next [`Region::fence`].
    fn store_u64_flushed(&self, offset: u64, value: u64) -> Result<(), DeviceError> {
        self.store_u64(offset, value)?;
        self.flush(&[(offset, 8)])
    }

    /// [`Region::write`] then [`Region::flush`] of the same range: durable after the
    /// next [`Region::fence`]. A region may do it in one pass (a mapping with
    /// cache-line persistence uses non-temporal stores, which need no write-back).
    fn write_flushed(&self, offset: u64, data: &[u8]) -> Result<(), DeviceError> {
        self.write(offset, data)?;
        self.flush(&[(offset, data.len() as u64)])
    }

    /// Orders and completes every earlier flush. Fails only on a simulated crash
    /// (the crash model), never on real memory.
    fn fence(&self) -> Result<(), DeviceError>;

    /// One-line description (path, size, persistence level).
    fn describe(&self) -> String;

    /// Whether stores persist in program order with no flush or fence (an eADR
    /// platform, or no persistence at all): then a write needs no log to be
    /// atomic, since its map entry cannot persist before its data. Default false.
    fn persists_in_order(&self) -> bool {
        false
    }

    /// Whether each [`Region::flush`] is a system call that waits for a disk
    /// (a page-cache mapping persisted with `msync`), so that a caller should
    /// gather everything it must persist into one flush rather than flush
    /// piece by piece. Default false (cache-line flushes cost per line, not
    /// per call).
    fn flush_is_sync(&self) -> bool {
        false
    }
}

/// Checks that `offset..offset+len` fits in a region of `size` bytes (the
/// devices' own check: a region's errors are device errors).
pub(crate) use crate::device::check_range as check;

/// Checks that an 8-byte word at `offset` is in range and 8-byte aligned.
pub(crate) fn check_word(op: DeviceOp, offset: u64, size: u64) -> Result<(), DeviceError> {
    check(op, offset, 8, size)?;
    if offset.is_multiple_of(8) {
        Ok(())
    } else {
        Err(DeviceError::Unaligned {
            op,
            offset,
            len: 8,
            align: 8,
        })
    }
}

/// `Arc<R>` and `Box<R>` are regions too, so a test can keep a handle on the
/// crash model while a layer owns it.
macro_rules! forward_region {
    ($($pointer:ident)::+) => {
        impl<R: Region + ?Sized> Region for $($pointer)::+<R> {
            fn len(&self) -> u64 {
                (**self).len()
            }
            fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), DeviceError> {
                (**self).read(offset, buf)
            }
            fn write(&self, offset: u64, data: &[u8]) -> Result<(), DeviceError> {
                (**self).write(offset, data)
            }
            fn load_u64(&self, offset: u64) -> Result<u64, DeviceError> {
                (**self).load_u64(offset)
            }
            fn store_u64(&self, offset: u64, value: u64) -> Result<(), DeviceError> {
                (**self).store_u64(offset, value)
            }
            fn flush(&self, ranges: &[(u64, u64)]) -> Result<(), DeviceError> {
                (**self).flush(ranges)
            }
            fn write_flushed(&self, offset: u64, data: &[u8]) -> Result<(), DeviceError> {
                (**self).write_flushed(offset, data)
            }
            fn store_u64_flushed(&self, offset: u64, value: u64) -> Result<(), DeviceError> {
                (**self).store_u64_flushed(offset, value)
            }
            fn prefetch(&self, offset: u64, len: u64) {
                (**self).prefetch(offset, len)
            }
            fn fence(&self) -> Result<(), DeviceError> {
                (**self).fence()
            }
            fn describe(&self) -> String {
                (**self).describe()
            }
            fn persists_in_order(&self) -> bool {
                (**self).persists_in_order()
            }
            fn flush_is_sync(&self) -> bool {
                (**self).flush_is_sync()
            }
        }
    };
}

forward_region!(std::sync::Arc);
forward_region!(Box);
