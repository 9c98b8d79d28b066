//! A device in DRAM: the fastest tier, the base of tests, and the model the
//! faulty device keeps its live state in.
//!
//! Large I/O moves no bytes in user space where it can help it. A read of at
//! least half a stripe lends the stripes themselves ([`Device::read_lent`]):
//! each is an `Arc`, a reader holds a reference instead of a copy, and a writer
//! that finds its stripe shared copies it first (copy on write), so lent bytes
//! never change and a client slow to take its reply never holds a lock. A
//! write of one whole stripe ([`Device::write_swap`]) takes the writer's
//! buffer as the stripe and hands the old stripe back to be reused.

use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use super::{BlockRef, BlockSlice};
use super::{Device, DeviceError, DeviceOp, check_range};

/// Bytes per lock stripe. I/O to different stripes never contends.
const STRIPE: u64 = 1 << 20;

/// The shortest read [`MemoryDevice`] lends its stripes to rather than copy:
/// half a stripe, so the stripes a reply keeps alive (which a concurrent
/// writer must then copy) are at most five times the bytes it sends.
const LEND_MIN: u64 = STRIPE / 2;

type Stripe = RwLock<Arc<Vec<u8>>>;

/// A zero-filled device held in memory, striped into 1 MiB chunks each behind its
/// own lock so concurrent I/O to different regions does not contend. Not durable:
/// `flush` is a no-op. `discard` zeroes the range.
pub struct MemoryDevice {
    stripes: Vec<Stripe>,
    len: u64,
}

impl MemoryDevice {
    /// A device of `len` zero bytes.
    pub fn new(len: u64) -> Self {
        let mut stripes = Vec::with_capacity(len.div_ceil(STRIPE) as usize);
        let mut left = len;
        while left > 0 {
            let n = left.min(STRIPE);
            stripes.push(RwLock::new(Arc::new(vec![0u8; n as usize])));
            left -= n;
        }
        Self { stripes, len }
    }

    /// Apply `f(stripe, range within stripe, range within the caller's buffer)`
    /// to every stripe `offset..offset+len` touches.
    fn for_each_stripe(
        &self,
        offset: u64,
        len: u64,
        mut f: impl FnMut(&Stripe, std::ops::Range<usize>, std::ops::Range<usize>),
    ) {
        let mut pos = offset;
        let end = offset + len;
        while pos < end {
            let idx = (pos / STRIPE) as usize;
            let within = (pos % STRIPE) as usize;
            let n = (end - pos).min(STRIPE - within as u64) as usize;
            let done = (pos - offset) as usize;
            f(&self.stripes[idx], within..within + n, done..done + n);
            pos += n as u64;
        }
    }

    /// Zero `range` of every stripe `offset..offset+len` touches.
    fn zero(&self, offset: u64, len: u64) {
        self.for_each_stripe(offset, len, |stripe, dst, _| {
            writable(&mut write(stripe))[dst].fill(0);
        });
    }
}

fn read(stripe: &Stripe) -> RwLockReadGuard<'_, Arc<Vec<u8>>> {
    stripe
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn write(stripe: &Stripe) -> RwLockWriteGuard<'_, Arc<Vec<u8>>> {
    stripe
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The stripe's bytes to write into: copied first if a lent read still
/// holds them (so what it sends never changes under it).
fn writable(stripe: &mut Arc<Vec<u8>>) -> &mut Vec<u8> {
    Arc::make_mut(stripe)
}

impl Device for MemoryDevice {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<(), DeviceError> {
        check_range(DeviceOp::Read, offset, buf.len() as u64, self.len)?;
        self.for_each_stripe(offset, buf.len() as u64, |stripe, src, dst| {
            buf[dst].copy_from_slice(&read(stripe)[src]);
        });
        Ok(())
    }

    /// Reads of at least half a stripe (512 KiB) lend the stripes (one reference
    /// count each); shorter ones are cheaper to copy.
    fn read_lent(
        &self,
        offset: u64,
        len: u64,
        out: &mut Vec<BlockSlice>,
    ) -> Result<bool, DeviceError> {
        check_range(DeviceOp::Read, offset, len, self.len)?;
        if len < LEND_MIN {
            return Ok(false);
        }
        self.for_each_stripe(offset, len, |stripe, src, _| {
            let shared = Arc::clone(&read(stripe));
            out.push(BlockRef::shared(shared).into_slice(src));
        });
        Ok(true)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> Result<(), DeviceError> {
        check_range(DeviceOp::Write, offset, buf.len() as u64, self.len)?;
        self.for_each_stripe(offset, buf.len() as u64, |stripe, dst, src| {
            writable(&mut write(stripe))[dst].copy_from_slice(&buf[src]);
        });
        Ok(())
    }

    /// A write of exactly one whole stripe swaps `buf` in (when its capacity
    /// is its length, so no stripe keeps spare memory); any other copies.
    fn write_swap(&self, buf: &mut Vec<u8>, offset: u64) -> Result<(), DeviceError> {
        check_range(DeviceOp::Write, offset, buf.len() as u64, self.len)?;
        let index = (offset / STRIPE) as usize;
        // In range and one stripe long from a stripe boundary: a whole,
        // full-length stripe.
        let whole = offset.is_multiple_of(STRIPE)
            && buf.len() as u64 == STRIPE
            && buf.capacity() == buf.len();
        if !whole {
            return self.write_at(buf, offset);
        }
        let mut stripe = write(&self.stripes[index]);
        match Arc::get_mut(&mut stripe) {
            Some(bytes) => std::mem::swap(bytes, buf),
            // A lent read holds the old bytes: it keeps them; the caller
            // gets an empty buffer back.
            None => *stripe = Arc::new(std::mem::take(buf)),
        }
        Ok(())
    }

    fn flush(&self) -> Result<(), DeviceError> {
        Ok(())
    }

    fn discard(&self, offset: u64, len: u64) -> Result<(), DeviceError> {
        check_range(DeviceOp::Discard, offset, len, self.len)?;
        self.zero(offset, len);
        Ok(())
    }

    /// Zeroing memory needs no payload: the same as `discard` here.
    fn zero_fast(&self, offset: u64, len: u64) -> Result<bool, DeviceError> {
        self.discard(offset, len)?;
        Ok(true)
    }

    fn len(&self) -> u64 {
        self.len
    }

    fn describe(&self) -> String {
        format!("memory ({} bytes)", self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conforms() {
        super::super::conformance::check(&MemoryDevice::new(3 * STRIPE + 4096));
    }

    #[test]
    fn io_across_stripes_round_trips() {
        let dev = MemoryDevice::new(3 * STRIPE);
        let data: Vec<u8> = (0..(STRIPE as usize + 10))
            .map(|i| (i % 251) as u8)
            .collect();
        dev.write_at(&data, STRIPE - 5).unwrap();
        let mut back = vec![0u8; data.len()];
        dev.read_at(&mut back, STRIPE - 5).unwrap();
        assert_eq!(back, data);
        dev.discard(STRIPE - 5, 10).unwrap();
        dev.read_at(&mut back[..10], STRIPE - 5).unwrap();
        assert_eq!(back[..10], [0u8; 10]);
    }

    #[test]
    fn a_whole_stripe_write_swaps_buffers_and_others_copy() {
        let dev = MemoryDevice::new(2 * STRIPE + 4096);
        let mut buf = vec![7u8; STRIPE as usize];
        let given = buf.as_ptr();
        dev.write_swap(&mut buf, STRIPE).unwrap();
        // The caller holds the old stripe (zeroes) now; the device holds
        // the caller's allocation.
        assert_ne!(buf.as_ptr(), given);
        assert_eq!(buf.len(), STRIPE as usize);
        assert!(buf.iter().all(|&b| b == 0));
        let mut back = vec![0u8; STRIPE as usize];
        dev.read_at(&mut back, STRIPE).unwrap();
        assert!(back.iter().all(|&b| b == 7));
        // Unaligned, short or spare capacity: copied, the buffer unchanged.
        for (offset, len, spare) in [(4096, STRIPE, 0), (0, STRIPE - 1, 0), (0, STRIPE, 1)] {
            let mut buf = Vec::with_capacity((len + spare) as usize);
            buf.resize(len as usize, 9u8);
            let given = buf.as_ptr();
            dev.write_swap(&mut buf, offset).unwrap();
            assert_eq!(buf.as_ptr(), given);
            let mut back = vec![0u8; len as usize];
            dev.read_at(&mut back, offset).unwrap();
            assert!(back.iter().all(|&b| b == 9));
        }
        // Past the end: an error, nothing taken.
        let mut buf = vec![1u8; STRIPE as usize];
        assert!(dev.write_swap(&mut buf, 2 * STRIPE).is_err());
        assert!(buf.iter().all(|&b| b == 1));
    }

    #[test]
    fn lent_stripes_never_change_under_their_reader() {
        let dev = MemoryDevice::new(3 * STRIPE);
        dev.write_at(&vec![1u8; 3 * STRIPE as usize], 0).unwrap();
        let mut lent = Vec::new();
        // Short reads are copied, not lent.
        assert!(!dev.read_lent(0, LEND_MIN - 1, &mut lent).unwrap());
        assert!(dev.read_lent(STRIPE - 10, STRIPE + 20, &mut lent).unwrap());
        assert_eq!(
            lent.iter().map(|s| s.len()).collect::<Vec<_>>(),
            [10, STRIPE as usize, 10]
        );
        // A write into a lent stripe, a whole-stripe swap and a discard: the
        // device changes, the lent bytes do not.
        dev.write_at(&[2u8; 50], STRIPE - 50).unwrap();
        let mut whole = vec![3u8; STRIPE as usize];
        dev.write_swap(&mut whole, STRIPE).unwrap();
        assert!(whole.is_empty(), "a shared stripe is replaced, not swapped");
        dev.discard(2 * STRIPE, 4096).unwrap();
        assert!(lent.iter().all(|s| s.iter().all(|&b| b == 1)));
        let mut back = vec![0u8; STRIPE as usize + 20];
        dev.read_at(&mut back, STRIPE - 10).unwrap();
        assert!(back[..10].iter().all(|&b| b == 2));
        assert!(back[10..10 + STRIPE as usize].iter().all(|&b| b == 3));
        assert!(back[10 + STRIPE as usize..].iter().all(|&b| b == 0));
        assert!(dev.read_lent(3 * STRIPE - 1, 2, &mut lent).is_err());
    }

    #[test]
    fn empty_device_refuses_everything() {
        let dev = MemoryDevice::new(0);
        assert!(dev.is_empty());
        assert!(dev.read_at(&mut [0u8; 1], 0).is_err());
        dev.read_at(&mut [], 0).unwrap();
    }
}
