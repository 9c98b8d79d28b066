//! Devices made of devices: [`ConcatDevice`] (one after another) and
//! [`StripedDevice`] (round robin in fixed-size stripes, RAID-0 style). A
//! volume built on several devices of different speeds is one of these.

use std::sync::Arc;

use super::{Device, DeviceError, DeviceOp, check_range};

/// A shared device of any kind.
pub type SharedDevice = Arc<dyn Device>;

/// The strictest alignment of `parts`.
fn parts_alignment(parts: &[SharedDevice]) -> u64 {
    parts
        .iter()
        .map(Device::alignment)
        .max()
        .unwrap_or(super::SECTOR)
}

/// `parts` described one after another.
fn parts_describe(parts: &[SharedDevice]) -> String {
    parts
        .iter()
        .map(Device::describe)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Devices laid end to end: bytes `0..len(d0)` are device 0, the next
/// `len(d1)` bytes device 1, and so on.
pub struct ConcatDevice {
    parts: Vec<SharedDevice>,
    /// Start of each part, plus the total length at the end.
    starts: Vec<u64>,
}

impl ConcatDevice {
    /// Concatenates `parts` (at least one).
    pub fn new(parts: Vec<SharedDevice>) -> Result<Self, String> {
        if parts.is_empty() {
            return Err("a concatenated device needs at least one part".into());
        }
        let mut starts = Vec::with_capacity(parts.len() + 1);
        let mut at = 0u64;
        for part in &parts {
            starts.push(at);
            at = at
                .checked_add(part.len())
                .ok_or("the parts' lengths overflow 64 bits")?;
        }
        starts.push(at);
        Ok(Self { parts, starts })
    }

    /// Number of parts.
    pub fn parts(&self) -> usize {
        self.parts.len()
    }

    /// Part `index`.
    pub fn part(&self, index: usize) -> &SharedDevice {
        &self.parts[index]
    }

    /// Which part holds byte `offset` (which must be in range).
    pub(crate) fn part_of(&self, offset: u64) -> usize {
        self.starts.partition_point(|&s| s <= offset) - 1
    }

    /// Calls `f(part, offset in part, range in the caller's buffer)` for each
    /// piece of `offset..offset+len`.
    fn pieces(
        &self,
        offset: u64,
        len: u64,
        mut f: impl FnMut(&SharedDevice, u64, std::ops::Range<usize>) -> Result<(), DeviceError>,
    ) -> Result<(), DeviceError> {
        let mut pos = offset;
        let end = offset + len;
        while pos < end {
            let i = self.part_of(pos);
            let n = (end - pos).min(self.starts[i + 1] - pos);
            let done = (pos - offset) as usize;
            f(
                &self.parts[i],
                pos - self.starts[i],
                done..done + n as usize,
            )?;
            pos += n;
        }
        Ok(())
    }
}

impl Device for ConcatDevice {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<(), DeviceError> {
        check_range(DeviceOp::Read, offset, buf.len() as u64, self.len())?;
        self.pieces(offset, buf.len() as u64, |d, at, r| {
            d.read_at(&mut buf[r], at)
        })
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> Result<(), DeviceError> {
        check_range(DeviceOp::Write, offset, buf.len() as u64, self.len())?;
        self.pieces(offset, buf.len() as u64, |d, at, r| d.write_at(&buf[r], at))
    }

    fn flush(&self) -> Result<(), DeviceError> {
        self.parts.iter().try_for_each(Device::flush)
    }

    fn discard(&self, offset: u64, len: u64) -> Result<(), DeviceError> {
        check_range(DeviceOp::Discard, offset, len, self.len())?;
        self.pieces(offset, len, |d, at, r| d.discard(at, r.len() as u64))
    }

    fn len(&self) -> u64 {
        self.starts[self.parts.len()]
    }

    fn alignment(&self) -> u64 {
        parts_alignment(&self.parts)
    }

    fn describe(&self) -> String {
        format!("concat [{}]", parts_describe(&self.parts))
    }
}

/// Devices striped round robin: stripe `k` (of `stripe` bytes) lives on device
/// `k mod n` at offset `(k div n) × stripe`. Every device contributes as many
/// whole stripes as the smallest holds.
pub struct StripedDevice {
    parts: Vec<SharedDevice>,
    stripe: u64,
    len: u64,
}

impl StripedDevice {
    /// Stripes `parts` (at least one) in stripes of `stripe` bytes (> 0).
    pub fn new(parts: Vec<SharedDevice>, stripe: u64) -> Result<Self, String> {
        if parts.is_empty() || stripe == 0 {
            return Err(
                "a striped device needs at least one part and a stripe of at least 1 byte".into(),
            );
        }
        let per_part = parts.iter().map(|d| d.len() / stripe).min().unwrap_or(0);
        let len = per_part
            .checked_mul(stripe)
            .and_then(|b| b.checked_mul(parts.len() as u64))
            .ok_or("the striped length overflows 64 bits")?;
        Ok(Self { parts, stripe, len })
    }

    /// Number of parts.
    pub fn parts(&self) -> usize {
        self.parts.len()
    }

    /// Part `index`.
    pub fn part(&self, index: usize) -> &SharedDevice {
        &self.parts[index]
    }

    /// Stripe size in bytes.
    pub fn stripe(&self) -> u64 {
        self.stripe
    }

    fn pieces(
        &self,
        offset: u64,
        len: u64,
        mut f: impl FnMut(&SharedDevice, u64, std::ops::Range<usize>) -> Result<(), DeviceError>,
    ) -> Result<(), DeviceError> {
        let n = self.parts.len() as u64;
        let mut pos = offset;
        let end = offset + len;
        while pos < end {
            let k = pos / self.stripe;
            let within = pos % self.stripe;
            let take = (end - pos).min(self.stripe - within);
            let device = &self.parts[(k % n) as usize];
            let at = (k / n) * self.stripe + within;
            let done = (pos - offset) as usize;
            f(device, at, done..done + take as usize)?;
            pos += take;
        }
        Ok(())
    }
}

impl Device for StripedDevice {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<(), DeviceError> {
        check_range(DeviceOp::Read, offset, buf.len() as u64, self.len)?;
        self.pieces(offset, buf.len() as u64, |d, at, r| {
            d.read_at(&mut buf[r], at)
        })
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> Result<(), DeviceError> {
        check_range(DeviceOp::Write, offset, buf.len() as u64, self.len)?;
        self.pieces(offset, buf.len() as u64, |d, at, r| d.write_at(&buf[r], at))
    }

    fn flush(&self) -> Result<(), DeviceError> {
        self.parts.iter().try_for_each(Device::flush)
    }

    fn discard(&self, offset: u64, len: u64) -> Result<(), DeviceError> {
        check_range(DeviceOp::Discard, offset, len, self.len)?;
        self.pieces(offset, len, |d, at, r| d.discard(at, r.len() as u64))
    }

    fn len(&self) -> u64 {
        self.len
    }

    fn alignment(&self) -> u64 {
        parts_alignment(&self.parts)
    }

    fn describe(&self) -> String {
        format!(
            "striped {} B [{}]",
            self.stripe,
            parts_describe(&self.parts)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::MemoryDevice;

    fn memory(len: u64) -> SharedDevice {
        Arc::new(MemoryDevice::new(len))
    }

    #[test]
    fn concat_conforms_and_splits_io_at_part_boundaries() {
        let (a, b) = (memory(40_000), memory(60_000));
        let dev = ConcatDevice::new(vec![Arc::clone(&a), Arc::clone(&b)]).unwrap();
        assert_eq!(dev.len(), 100_000);
        super::super::conformance::check(&dev);
        let data: Vec<u8> = (0..1000u32).map(|i| (i % 253) as u8).collect();
        dev.write_at(&data, 39_500).unwrap();
        let mut tail = vec![0u8; 500];
        a.read_at(&mut tail, 39_500).unwrap();
        assert_eq!(tail[..], data[..500]);
        b.read_at(&mut tail, 0).unwrap();
        assert_eq!(tail[..], data[500..]);
        assert!(ConcatDevice::new(vec![]).is_err());
    }

    #[test]
    fn striped_conforms_and_places_stripes_round_robin() {
        let parts: Vec<SharedDevice> = (0..3).map(|_| memory(50_000)).collect();
        let dev = StripedDevice::new(parts.clone(), 4096).unwrap();
        // 12 whole stripes per part.
        assert_eq!(dev.len(), 3 * 12 * 4096);
        super::super::conformance::check(&dev);
        // Stripe 4 = device 1, its second stripe.
        dev.write_at(&[7; 4096], 4 * 4096).unwrap();
        let mut back = [0u8; 4096];
        parts[1].read_at(&mut back, 4096).unwrap();
        assert_eq!(back, [7; 4096]);
        // A write across stripes 5 and 6 lands on devices 2 and 0.
        dev.write_at(&[9; 200], 6 * 4096 - 100).unwrap();
        let mut piece = [0u8; 100];
        parts[2].read_at(&mut piece, 4096 + 3996).unwrap();
        assert_eq!(piece, [9; 100]);
        parts[0].read_at(&mut piece, 2 * 4096).unwrap();
        assert_eq!(piece, [9; 100]);
        assert!(StripedDevice::new(parts, 0).is_err());
    }
}
