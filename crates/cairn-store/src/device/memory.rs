//! A device in DRAM: the fastest tier, the base of tests, and the model the
//! faulty device keeps its live state in.

use std::sync::RwLock;

use super::{Device, DeviceError, DeviceOp, check_range};

/// Bytes per lock stripe. I/O to different stripes never contends.
const STRIPE: u64 = 1 << 20;

/// A zero-filled device held in memory, striped into 1 MiB chunks each behind its
/// own lock so concurrent I/O to different regions does not contend. Not durable:
/// `flush` is a no-op. `discard` zeroes the range.
pub struct MemoryDevice {
    stripes: Vec<RwLock<Box<[u8]>>>,
    len: u64,
}

impl MemoryDevice {
    /// A device of `len` zero bytes.
    pub fn new(len: u64) -> Self {
        let mut stripes = Vec::with_capacity(len.div_ceil(STRIPE) as usize);
        let mut left = len;
        while left > 0 {
            let n = left.min(STRIPE);
            stripes.push(RwLock::new(vec![0u8; n as usize].into_boxed_slice()));
            left -= n;
        }
        Self { stripes, len }
    }

    /// Apply `f(stripe bytes, range within stripe, range within the caller's buffer)`
    /// to every stripe `offset..offset+len` touches.
    fn for_each_stripe(
        &self,
        offset: u64,
        len: u64,
        mut f: impl FnMut(&RwLock<Box<[u8]>>, std::ops::Range<usize>, std::ops::Range<usize>),
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
}

impl Device for MemoryDevice {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<(), DeviceError> {
        check_range(DeviceOp::Read, offset, buf.len() as u64, self.len)?;
        self.for_each_stripe(offset, buf.len() as u64, |stripe, src, dst| {
            let guard = stripe
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            buf[dst].copy_from_slice(&guard[src]);
        });
        Ok(())
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> Result<(), DeviceError> {
        check_range(DeviceOp::Write, offset, buf.len() as u64, self.len)?;
        self.for_each_stripe(offset, buf.len() as u64, |stripe, dst, src| {
            let mut guard = stripe
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            guard[dst].copy_from_slice(&buf[src]);
        });
        Ok(())
    }

    fn flush(&self) -> Result<(), DeviceError> {
        Ok(())
    }

    fn discard(&self, offset: u64, len: u64) -> Result<(), DeviceError> {
        check_range(DeviceOp::Discard, offset, len, self.len)?;
        self.for_each_stripe(offset, len, |stripe, dst, _| {
            let mut guard = stripe
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            guard[dst].fill(0);
        });
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
    fn empty_device_refuses_everything() {
        let dev = MemoryDevice::new(0);
        assert!(dev.is_empty());
        assert!(dev.read_at(&mut [0u8; 1], 0).is_err());
        dev.read_at(&mut [], 0).unwrap();
    }
}
