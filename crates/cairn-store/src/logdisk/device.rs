//! [`LogDisk`] as a [`Device`]: byte ranges to blocks.

use super::disk::LogDisk;
use super::error::to_device_error;
use crate::device::{
    Device, DeviceError, DeviceOp, Extent, IoBuf, check_range, push_block_extents, whole_blocks,
};

/// The log disk is a `Device`: byte ranges are split into blocks, and a
/// partial block is read, patched and written whole. `discard` is accepted and
/// does nothing (ranges read back their old contents).
impl<D: Device + 'static> Device for LogDisk<D> {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<(), DeviceError> {
        check_range(DeviceOp::Read, offset, buf.len() as u64, self.len())?;
        let b = u64::from(self.geo.block_size);
        let st = self.read_state();
        // A scratch block only when a partial block is read.
        let mut block = IoBuf::default();
        let mut done = 0usize;
        while done < buf.len() {
            let at = offset + done as u64;
            let logical = at / b;
            let within = (at % b) as usize;
            let n = (b as usize - within).min(buf.len() - done);
            if within == 0 && n == b as usize {
                self.read_locked(&st, logical, &mut buf[done..done + n])
            } else {
                if block.is_empty() {
                    block = IoBuf::zeroed(b as usize);
                }
                self.read_locked(&st, logical, &mut block).map(|()| {
                    buf[done..done + n].copy_from_slice(&block[within..within + n]);
                })
            }
            .map_err(|e| to_device_error(e, DeviceOp::Read, at, n as u64))?;
            strict_assert!(
                n > 0 && done + n <= buf.len(),
                "a read step past the buffer"
            );
            done += n;
        }
        Ok(())
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> Result<(), DeviceError> {
        check_range(DeviceOp::Write, offset, buf.len() as u64, self.len())?;
        let b = u64::from(self.geo.block_size);
        let bs = b as usize;
        let map = |e| to_device_error(e, DeviceOp::Write, offset, buf.len() as u64);
        let mut done = 0usize;
        while done < buf.len() {
            let at = offset + done as u64;
            let within = (at % b) as usize;
            if within == 0 && buf.len() - done >= bs {
                let whole = (buf.len() - done) / bs * bs;
                self.write_blocks(at / b, &buf[done..done + whole])
                    .map_err(map)?;
                done += whole;
            } else {
                let n = (bs - within).min(buf.len() - done);
                self.write_partial(at / b, within, &buf[done..done + n])
                    .map_err(map)?;
                done += n;
            }
        }
        Ok(())
    }

    fn flush(&self) -> Result<(), DeviceError> {
        LogDisk::flush(self).map_err(|e| to_device_error(e, DeviceOp::Flush, 0, 0))
    }

    fn discard(&self, offset: u64, len: u64) -> Result<(), DeviceError> {
        check_range(DeviceOp::Discard, offset, len, self.len())?;
        // Whole blocks only: a partial block at either end keeps its bytes.
        let blocks = whole_blocks(offset, len, u64::from(self.geo.block_size));
        if !blocks.is_empty() {
            self.trim_blocks(blocks.start, blocks.end - blocks.start)
                .map_err(|e| to_device_error(e, DeviceOp::Discard, offset, len))?;
        }
        Ok(())
    }

    fn allocation(
        &self,
        offset: u64,
        len: u64,
        out: &mut Vec<Extent>,
    ) -> Result<bool, DeviceError> {
        check_range(DeviceOp::Read, offset, len, self.len())?;
        let st = self.read_state();
        push_block_extents(
            out,
            offset,
            len,
            u64::from(self.geo.block_size),
            |logical| !Self::holds_data(&st, logical),
        );
        Ok(true)
    }

    fn len(&self) -> u64 {
        self.geo.logical_blocks * u64::from(self.geo.block_size)
    }

    fn alignment(&self) -> u64 {
        u64::from(self.geo.block_size)
    }

    fn describe(&self) -> String {
        format!(
            "log disk ({} segments of {} × {} B{}) on {}",
            self.geo.segments,
            self.geo.segment_blocks,
            self.geo.block_size,
            self.read_state()
                .core
                .nv
                .as_ref()
                .map(|nv| format!(", NV cache {}", nv.cache.describe()))
                .unwrap_or_default(),
            self.dev.describe()
        )
    }
}
