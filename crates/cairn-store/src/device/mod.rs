//! The `Device` trait: a fixed-size byte-addressed store with explicit durability.
//!
//! Contract (every implementation upholds it, every layer relies on it):
//!
//! - `read_at`/`write_at` transfer exactly `buf.len()` bytes at `offset` or fail;
//!   a range past [`Device::len`] is [`DeviceError::OutOfRange`], never a short
//!   transfer.
//! - A completed `write_at` is visible to every later `read_at` (from any thread),
//!   but is *durable* only after a later [`Device::flush`] returns `Ok`. A crash
//!   may lose or tear (at [`SECTOR`] granularity) any write not yet flushed.
//! - `discard` says the range's contents are no longer needed; afterwards the
//!   range reads back as zeroes or as its old contents (devices document which).
//! - Methods take `&self`: devices are `Send + Sync` and do their own locking, so
//!   many threads can issue I/O concurrently with no lock above them.

mod align;
mod claim;
mod compose;
mod faulty;
mod file;
mod iobuf;
mod memory;
pub mod probe;
mod throttled;
mod uring;

pub use align::AligningDevice;
pub use claim::{Claim, DirClaim, Holder, claim, holder};
pub use compose::{ConcatDevice, SharedDevice, StripedDevice};
pub use faulty::{Counts, CrashMode, FaultyDevice, Power};
pub use file::{DirectAlignment, FileDevice, FileOptions};
pub use iobuf::{BlockRef, BlockSlice, BufferPool, IO_ALIGN, IoBuf, is_aligned};
pub(crate) use iobuf::{Frame, PAGE};
pub use memory::MemoryDevice;
pub use throttled::{Pace, Throttle, ThrottledDevice};

use std::io;

/// The sector size: the unit a crash may tear a write at, and the smallest
/// alignment any device reports.
pub const SECTOR: u64 = 512;

/// Which device operation failed (for error messages and fault injection).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeviceOp {
    /// `read_at`
    Read,
    /// `write_at`
    Write,
    /// `flush`
    Flush,
    /// `discard`
    Discard,
}

impl std::fmt::Display for DeviceOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Read => "read",
            Self::Write => "write",
            Self::Flush => "flush",
            Self::Discard => "discard",
        })
    }
}

/// Why a device operation failed.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    /// The range `offset..offset+len` does not fit in a device of `size` bytes.
    #[error("{op} of {len} bytes at offset {offset} is out of range (device is {size} bytes)")]
    OutOfRange {
        /// The operation.
        op: DeviceOp,
        /// First byte of the range.
        offset: u64,
        /// Length of the range.
        len: u64,
        /// Device size in bytes.
        size: u64,
    },
    /// The operating system reported an error.
    #[error("{op} of {len} bytes at offset {offset} on {device}: {source}")]
    Io {
        /// The operation.
        op: DeviceOp,
        /// First byte of the range (0 for flush).
        offset: u64,
        /// Length of the range (0 for flush).
        len: u64,
        /// Which device (its path or kind).
        device: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// An injected fault (the faulty device's EIO).
    #[error("{op} of {len} bytes at offset {offset}: injected I/O error")]
    Injected {
        /// The operation.
        op: DeviceOp,
        /// First byte of the range.
        offset: u64,
        /// Length of the range.
        len: u64,
    },
    /// The device has crashed (fault injection) and refuses I/O until recovered.
    #[error("{op} refused: the device has crashed")]
    Crashed {
        /// The operation.
        op: DeviceOp,
    },
    /// The device was opened read-only.
    #[error("{op} refused: the device is read-only")]
    ReadOnly {
        /// The operation.
        op: DeviceOp,
    },
    /// The data failed its checksum (corrupted on the medium); it is never
    /// served.
    #[error("{op} of {len} bytes at offset {offset}: {detail}")]
    Corrupt {
        /// The operation.
        op: DeviceOp,
        /// First byte of the range.
        offset: u64,
        /// Length of the range.
        len: u64,
        /// What failed, and where.
        detail: String,
    },
    /// The file could not be opened or claimed for exclusive use (see
    /// [`Claim`]): it is in use by another process, or cannot be locked. The
    /// message names the file and the holder.
    #[error("{0}")]
    Open(#[source] io::Error),
    /// Direct I/O needs aligned buffers, offsets and lengths.
    #[error("{op} of {len} bytes at offset {offset} is not aligned to {align} bytes (direct I/O)")]
    Unaligned {
        /// The operation.
        op: DeviceOp,
        /// First byte of the range.
        offset: u64,
        /// Length of the range.
        len: u64,
        /// Required alignment.
        align: u64,
    },
}

/// [`Device::read_at`] into a buffer of any address: where the device needs
/// aligned memory (`O_DIRECT`) and `buf` is not, through an [`IoBuf`] and a
/// copy; otherwise straight into `buf`. The offset and length are the
/// caller's to align.
pub fn read_aligned(dev: &dyn Device, buf: &mut [u8], offset: u64) -> Result<(), DeviceError> {
    let align = dev.alignment();
    if align > SECTOR && !is_aligned(buf, align) {
        let mut bounce = IoBuf::zeroed(buf.len());
        dev.read_at(&mut bounce, offset)?;
        buf.copy_from_slice(&bounce);
        return Ok(());
    }
    dev.read_at(buf, offset)
}

/// [`Device::write_at`] from a buffer of any address, as [`read_aligned`]
/// reads.
pub fn write_aligned(dev: &dyn Device, data: &[u8], offset: u64) -> Result<(), DeviceError> {
    let align = dev.alignment();
    if align > SECTOR && !is_aligned(data, align) {
        return dev.write_at(&IoBuf::copy_padded(data, data.len()), offset);
    }
    dev.write_at(data, offset)
}

/// [`Device::read_vectored_at`] as one [`Device::read_at`] per buffer, in
/// turn: the default, and the way of a device that cannot take a vectored
/// read of some shapes.
pub fn read_each<D: Device + ?Sized>(
    dev: &D,
    bufs: &mut [&mut [u8]],
    offset: u64,
) -> Result<(), DeviceError> {
    let mut at = offset;
    for buf in bufs {
        dev.read_at(buf, at)?;
        at += buf.len() as u64;
    }
    Ok(())
}

/// A fixed-size, byte-addressed store with explicit durability. See the module docs
/// for the contract.
pub trait Device: Send + Sync {
    /// Fill `buf` with the bytes at `offset..offset + buf.len()`.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<(), DeviceError>;
    /// Write `buf` at `offset`. Visible at once, durable after the next `flush`.
    fn write_at(&self, buf: &[u8], offset: u64) -> Result<(), DeviceError>;
    /// Write `buf` at `offset`, as [`Device::write_at`], where the device may
    /// keep `buf`'s allocation instead of copying from it and leave another
    /// buffer in its place, contents and length unspecified (a memory device
    /// takes a write of one whole stripe this way). The caller reuses or
    /// drops whatever `buf` holds afterwards, on error too. The default
    /// copies and leaves `buf` as it was.
    fn write_swap(&self, buf: &mut Vec<u8>, offset: u64) -> Result<(), DeviceError> {
        self.write_at(buf, offset)
    }
    /// Fill `bufs`, one after another, with the bytes starting at `offset`:
    /// one read of `offset..offset + total length` into several buffers (the
    /// block cache reads a run of blocks into their frames this way). The
    /// default reads each buffer in turn; a device where one large operation
    /// is cheaper than several (a disk) overrides it.
    fn read_vectored_at(&self, bufs: &mut [&mut [u8]], offset: u64) -> Result<(), DeviceError> {
        read_each(self, bufs, offset)
    }
    /// Fill each `(offset, buf)` of `reads` from its offset: many independent
    /// reads, which a device that takes many at once (a file, through
    /// `io_uring`) issues together — one submission, the whole batch in
    /// flight — and returns when all are done. `Ok(false)` when the device
    /// has no such path (nothing was read; read them with `read_at`, on
    /// several threads where they should overlap). An empty batch asks
    /// only that: `Ok(true)` if this device batches. On an error, every
    /// read's buffer may have been written; none is written after the call.
    /// The default batches nothing.
    fn read_batch(&self, reads: &mut [(u64, &mut [u8])]) -> Result<bool, DeviceError> {
        let _ = reads;
        Ok(false)
    }
    /// A read with no copy, where the device keeps the bytes in buffers it
    /// can lend (the block cache): appends handles to the bytes of
    /// `offset..offset + len`, in order, to `out` and returns `Ok(true)`.
    /// The default lends nothing and returns `Ok(false)` (use `read_at`). The
    /// NBD server sends lent buffers to the socket as they are.
    fn read_lent(
        &self,
        offset: u64,
        len: u64,
        out: &mut Vec<BlockSlice>,
    ) -> Result<bool, DeviceError> {
        let _ = (offset, len, out);
        Ok(false)
    }
    /// Which parts of `offset..offset + len` hold data: appends runs that
    /// cover the range exactly, in order, to `out` and returns `Ok(true)`. A
    /// run with `hole` set holds no data and reads as zeroes (never written,
    /// or trimmed). The default cannot tell and returns `Ok(false)`: every
    /// byte is data. The NBD server answers `BLOCK_STATUS` with it.
    fn allocation(
        &self,
        offset: u64,
        len: u64,
        out: &mut Vec<Extent>,
    ) -> Result<bool, DeviceError> {
        let _ = (offset, len, out);
        Ok(false)
    }
    /// Zeroes `offset..offset + len` without writing zero bytes through the
    /// device, with the durability of a write of zeroes there (once flushed, or
    /// at once on a device whose writes are durable, it survives a crash and
    /// never reads back older data). It may leave holes. `Ok(true)` when done;
    /// `Ok(false)` when the device has no such path, and then the caller
    /// writes zeroes. NBD's `WRITE_ZEROES` uses it unless the client forbade
    /// holes, and answers `FAST_ZERO` requests with `ENOTSUP` when it returns
    /// false. The default returns false. (A trim is no substitute where it is
    /// advisory across a crash, as on the log disk.)
    fn zero_fast(&self, offset: u64, len: u64) -> Result<bool, DeviceError> {
        let _ = (offset, len);
        Ok(false)
    }
    /// A hint that `offset..offset + len` will be read soon (NBD's `CACHE`):
    /// a device that caches loads it now. The default does nothing.
    fn prefetch(&self, offset: u64, len: u64) -> Result<(), DeviceError> {
        let _ = (offset, len);
        Ok(())
    }
    /// Make every write completed before this call durable.
    fn flush(&self) -> Result<(), DeviceError>;
    /// The range's contents are no longer needed.
    fn discard(&self, offset: u64, len: u64) -> Result<(), DeviceError>;
    /// Size in bytes.
    fn len(&self) -> u64;
    /// True when the device has no bytes.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Preferred I/O alignment in bytes (a power of two, at least [`SECTOR`]).
    fn alignment(&self) -> u64 {
        SECTOR
    }
    /// A short human-readable description (kind and path), for errors and `inspect`.
    fn describe(&self) -> String;
    /// The device's busy time so far, nanoseconds, when the device accounts
    /// for it itself (as a disk's `io_ticks` in `/proc/diskstats`): a
    /// throttled device's modelled time. `None` (the default) when it does
    /// not. The block cache times its device reads with this clock where a
    /// device has one and with the wall clock where not.
    fn busy_ns(&self) -> Option<u64> {
        None
    }
}

/// A run of bytes in [`Device::allocation`]'s answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extent {
    /// Bytes in the run.
    pub len: u64,
    /// No data: reads as zeroes.
    pub hole: bool,
}

/// Appends a run to `out`, merging it into the last run when both agree.
pub fn push_extent(out: &mut Vec<Extent>, len: u64, hole: bool) {
    if len == 0 {
        return;
    }
    match out.last_mut() {
        Some(last) if last.hole == hole => last.len += len,
        _ => out.push(Extent { len, hole }),
    }
}

/// The blocks of `block` bytes that `offset..offset + len` covers wholly, as a
/// range of block numbers (empty when it covers none): what a trim or a fast
/// zero may unmap; the partial blocks at either end keep their bytes.
pub fn whole_blocks(offset: u64, len: u64, block: u64) -> std::ops::Range<u64> {
    let first = offset.div_ceil(block);
    let end = (offset + len) / block;
    first..end.max(first)
}

/// Appends the extents of `offset..offset + len` block by block to `out`
/// (merged by [`push_extent`]): block `n` is a hole where `hole(n)`, and a
/// partial block at either end takes its block's state.
pub fn push_block_extents(
    out: &mut Vec<Extent>,
    offset: u64,
    len: u64,
    block: u64,
    mut hole: impl FnMut(u64) -> bool,
) {
    let end = offset + len;
    let mut at = offset;
    while at < end {
        let n = at / block;
        let run = ((n + 1) * block).min(end) - at;
        push_extent(out, run, hole(n));
        at += run;
    }
}

/// Check that `offset..offset+len` lies within a device of `size` bytes.
pub fn check_range(op: DeviceOp, offset: u64, len: u64, size: u64) -> Result<(), DeviceError> {
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        _ => Err(DeviceError::OutOfRange {
            op,
            offset,
            len,
            size,
        }),
    }
}

/// `Arc<D>` and `Box<D>` are devices too, so layers can own or share theirs.
macro_rules! forward_device {
    ($($pointer:ident)::+) => {
        impl<D: Device + ?Sized> Device for $($pointer)::+<D> {
            fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<(), DeviceError> {
                (**self).read_at(buf, offset)
            }
            fn read_vectored_at(&self, bufs: &mut [&mut [u8]], offset: u64) -> Result<(), DeviceError> {
                (**self).read_vectored_at(bufs, offset)
            }
            fn read_batch(&self, reads: &mut [(u64, &mut [u8])]) -> Result<bool, DeviceError> {
                (**self).read_batch(reads)
            }
            fn read_lent(
                &self,
                offset: u64,
                len: u64,
                out: &mut Vec<BlockSlice>,
            ) -> Result<bool, DeviceError> {
                (**self).read_lent(offset, len, out)
            }
            fn allocation(
                &self,
                offset: u64,
                len: u64,
                out: &mut Vec<Extent>,
            ) -> Result<bool, DeviceError> {
                (**self).allocation(offset, len, out)
            }
            fn prefetch(&self, offset: u64, len: u64) -> Result<(), DeviceError> {
                (**self).prefetch(offset, len)
            }
            fn zero_fast(&self, offset: u64, len: u64) -> Result<bool, DeviceError> {
                (**self).zero_fast(offset, len)
            }
            fn write_at(&self, buf: &[u8], offset: u64) -> Result<(), DeviceError> {
                (**self).write_at(buf, offset)
            }
            fn write_swap(&self, buf: &mut Vec<u8>, offset: u64) -> Result<(), DeviceError> {
                (**self).write_swap(buf, offset)
            }
            fn flush(&self) -> Result<(), DeviceError> {
                (**self).flush()
            }
            fn discard(&self, offset: u64, len: u64) -> Result<(), DeviceError> {
                (**self).discard(offset, len)
            }
            fn len(&self) -> u64 {
                (**self).len()
            }
            fn alignment(&self) -> u64 {
                (**self).alignment()
            }
            fn describe(&self) -> String {
                (**self).describe()
            }
            fn busy_ns(&self) -> Option<u64> {
                (**self).busy_ns()
            }
        }
    };
}

forward_device!(std::sync::Arc);
forward_device!(Box);

#[cfg(test)]
pub(crate) mod conformance {
    //! Checks every `Device` implementation must pass; each device's tests call
    //! [`check`].
    use super::{Device, DeviceError};

    /// Round trips, range errors, flush and discard on a device of at least 64 KiB
    /// whose contents start as zeroes.
    pub fn check(dev: &dyn Device) {
        let len = dev.len();
        assert!(len >= 65536, "conformance needs 64 KiB");
        let mut buf = vec![0xAAu8; 4096];
        dev.read_at(&mut buf, 0).unwrap();
        assert!(buf.iter().all(|&b| b == 0), "fresh device reads zeroes");
        let pattern: Vec<u8> = (0..8192u32).map(|i| (i * 7 + 3) as u8).collect();
        dev.write_at(&pattern, 4096).unwrap();
        let mut back = vec![0u8; 8192];
        dev.read_at(&mut back, 4096).unwrap();
        assert_eq!(back, pattern);
        // Unaligned byte ranges inside what was written.
        let mut mid = vec![0u8; 100];
        dev.read_at(&mut mid, 4096 + 1000).unwrap();
        assert_eq!(mid[..], pattern[1000..1100]);
        // The last byte is reachable; one past it is not.
        dev.write_at(&[9], len - 1).unwrap();
        let mut one = [0u8];
        dev.read_at(&mut one, len - 1).unwrap();
        assert_eq!(one, [9]);
        assert!(matches!(
            dev.read_at(&mut one, len),
            Err(DeviceError::OutOfRange { .. })
        ));
        assert!(matches!(
            dev.write_at(&[1, 2], len - 1),
            Err(DeviceError::OutOfRange { .. })
        ));
        assert!(matches!(
            dev.read_at(&mut one, u64::MAX),
            Err(DeviceError::OutOfRange { .. })
        ));
        dev.flush().unwrap();
        dev.discard(4096, 4096).unwrap();
        assert!(dev.discard(len, 1).is_err());
        // After discard the rest of the write is intact.
        let mut tail = vec![0u8; 4096];
        dev.read_at(&mut tail, 8192).unwrap();
        assert_eq!(tail[..], pattern[4096..]);
        // `write_swap` writes what `write_at` would.
        let mut swap = vec![0x5Au8; 16384];
        dev.write_swap(&mut swap, 16384).unwrap();
        let mut back = vec![0u8; 16384];
        dev.read_at(&mut back, 16384).unwrap();
        assert!(back.iter().all(|&b| b == 0x5A));
        // A lent read, where the device lends, holds what a copy would.
        let mut lent = Vec::new();
        if dev.read_lent(4096, 32768, &mut lent).unwrap() {
            let mut copy = vec![0u8; 32768];
            dev.read_at(&mut copy, 4096).unwrap();
            let joined: Vec<u8> = lent.iter().flat_map(|s| s.iter().copied()).collect();
            assert_eq!(joined, copy);
        }
        // A batch, where the device batches, reads what `read_at` does
        // (byte ranges too), and checks every range before reading any.
        if dev.read_batch(&mut []).unwrap() {
            let ranges = [
                (4096u64, 4096usize),
                (0, 512),
                (4096 + 1000, 100),
                (len - 1, 1),
            ];
            let mut bufs: Vec<Vec<u8>> = ranges.iter().map(|&(_, n)| vec![0xEE; n]).collect();
            let mut reads: Vec<(u64, &mut [u8])> = ranges
                .iter()
                .zip(bufs.iter_mut())
                .map(|(&(at, _), b)| (at, b.as_mut_slice()))
                .collect();
            assert!(dev.read_batch(&mut reads).unwrap());
            for (&(at, n), got) in ranges.iter().zip(&bufs) {
                let mut want = vec![0u8; n];
                dev.read_at(&mut want, at).unwrap();
                assert_eq!(got, &want, "batched read of {n} bytes at {at}");
            }
            let mut a = [0u8; 1];
            let mut b = [0u8; 2];
            assert!(matches!(
                dev.read_batch(&mut [(0, &mut a[..]), (len - 1, &mut b[..])]),
                Err(DeviceError::OutOfRange { .. })
            ));
        }
        assert!(!dev.describe().is_empty());
    }
}

#[cfg(test)]
mod block_tests {
    use super::{Extent, push_block_extents, whole_blocks};

    #[test]
    fn whole_blocks_leave_out_partial_ends() {
        assert_eq!(whole_blocks(0, 8192, 4096), 0..2);
        assert_eq!(whole_blocks(100, 8192, 4096), 1..2);
        assert_eq!(whole_blocks(100, 4000, 4096), 1..1, "inside one block");
        assert!(whole_blocks(4095, 2, 4096).is_empty());
        assert_eq!(whole_blocks(4096, 0, 4096), 1..1);
    }

    #[test]
    fn block_extents_merge_runs_and_clip_partial_ends() {
        let mut out = Vec::new();
        // Blocks 1 and 2 are holes; the range starts inside block 0 and ends inside block 3.
        push_block_extents(&mut out, 100, 3 * 4096, 4096, |n| n == 1 || n == 2);
        assert_eq!(
            out,
            [
                Extent {
                    len: 3996,
                    hole: false
                },
                Extent {
                    len: 8192,
                    hole: true
                },
                Extent {
                    len: 100,
                    hole: false
                },
            ]
        );
    }
}
