//! The read path: segment buffer → NV cache → a queued cleaner write's
//! buffer → block address table → device, every block read from the
//! device checked against the CRC32C in the table.

use super::disk::{LogDisk, State};
use super::error::LogDiskError;
use super::format::{self, UNMAPPED};
use crate::device::{Device, read_aligned};

impl<D: Device + 'static> LogDisk<D> {
    /// Reads logical block `logical` into `buf` (one block).
    pub fn read_block(&self, logical: u64, buf: &mut [u8]) -> Result<(), LogDiskError> {
        self.check_block(logical, buf.len())?;
        let st = self.read_state();
        self.read_locked(&st, logical, buf)
    }

    /// Reads one block under the lock `st` is held by.
    pub(super) fn read_locked(
        &self,
        st: &State,
        logical: u64,
        buf: &mut [u8],
    ) -> Result<(), LogDiskError> {
        let b = self.geo.block_size as usize;
        strict_assert_eq!(buf.len(), b, "one block");
        if let Some(block) = st.buffer.get(logical) {
            buf.copy_from_slice(block);
            return Ok(());
        }
        if let Some(nv) = &st.core.nv
            && let Some(&slot) = nv.of.get(&logical)
        {
            strict_assert_eq!(
                nv.meta[slot as usize].logical,
                logical,
                "nv_index invariant 2"
            );
            nv.cache.read(slot, buf)?;
            return Ok(());
        }
        let e = st.core.table.map[logical as usize];
        if e.physical == UNMAPPED {
            buf.fill(0);
            return Ok(());
        }
        if let Some(m) = st
            .core
            .queue
            .moving
            .iter()
            .find(|m| (m.first..m.first + m.count).contains(&e.physical))
        {
            // Moved by a cleaner write still queued: from its buffer.
            let at = m.at + (e.physical - m.first) as usize * b;
            assert!(
                at + b <= m.buf.len(),
                "a moving block past its write's buffer"
            );
            buf.copy_from_slice(&m.buf[at..at + b]);
            return Ok(());
        }
        // A direct-I/O device and a caller's unaligned buffer: bounced.
        read_aligned(&*self.dev, buf, e.physical * b as u64)?;
        let crc = format::crc32c(buf);
        if crc != e.crc {
            return Err(LogDiskError::Corrupt(format!(
                "logical block {logical} at physical block {}: data checksum {crc:#010x}, expected {:#010x}",
                e.physical, e.crc
            )));
        }
        Ok(())
    }

    /// Whether `logical` holds data (buffered, in the NV cache or mapped):
    /// otherwise it reads as zeroes.
    pub(super) fn holds_data(st: &State, logical: u64) -> bool {
        st.buffer.contains(logical)
            || st
                .core
                .nv
                .as_ref()
                .is_some_and(|nv| nv.of.contains_key(&logical))
            || st.core.table.map[logical as usize].physical != UNMAPPED
    }

    /// `Err` unless blocks `first..first + count` exist.
    pub(super) fn check_blocks(&self, first: u64, count: u64) -> Result<(), LogDiskError> {
        if first
            .checked_add(count)
            .is_none_or(|end| end > self.geo.logical_blocks)
        {
            return Err(LogDiskError::Invalid(format!(
                "blocks {first}..+{count} are past the end ({} blocks)",
                self.geo.logical_blocks
            )));
        }
        Ok(())
    }

    /// `Err` unless block `logical` exists and `len` is a block.
    fn check_block(&self, logical: u64, len: usize) -> Result<(), LogDiskError> {
        if logical >= self.geo.logical_blocks {
            return Err(LogDiskError::Invalid(format!(
                "logical block {logical} is past the end ({} blocks)",
                self.geo.logical_blocks
            )));
        }
        if len != self.geo.block_size as usize {
            return Err(LogDiskError::Invalid(format!(
                "a block buffer is {} bytes, not {len}",
                self.geo.block_size
            )));
        }
        Ok(())
    }
}
