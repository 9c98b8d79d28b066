//! The volatile segment buffer ([`SegmentBuffer`]): without an NV cache
//! (the paper's baseline) a write is buffered here until a full segment
//! (or a flush's partial one) is written; reads of buffered blocks are
//! served from it.

use hashbrown::HashMap;

use super::format::{self, SummaryEntry};
use crate::device::IoBuf;

/// Blocks buffered for the next segment write, data at `(i + 1)·B` of
/// `buffer` (block 0 is the summary's place).
pub(super) struct SegmentBuffer {
    pub entries: Vec<SummaryEntry>,
    pub buffer: IoBuf,
    of: HashMap<u64, u32>,
    block_size: usize,
}

impl SegmentBuffer {
    /// An empty buffer for segments of `segment_blocks` blocks of
    /// `block_size` bytes.
    pub fn new(segment_blocks: usize, block_size: usize) -> Self {
        Self {
            entries: Vec::with_capacity(segment_blocks),
            buffer: IoBuf::zeroed(2 * segment_blocks * block_size),
            of: HashMap::new(),
            block_size,
        }
    }

    /// Buffers `block` as `logical` (replacing a buffered copy); returns
    /// the number of blocks buffered.
    pub fn put(&mut self, logical: u64, block: &[u8]) -> usize {
        let b = self.block_size;
        assert_eq!(block.len(), b, "one block");
        let crc = format::crc32c(block);
        let i = if let Some(&i) = self.of.get(&logical) {
            self.entries[i as usize].crc = crc;
            i as usize
        } else {
            let i = self.entries.len();
            self.entries.push(SummaryEntry { logical, crc });
            self.of.insert(logical, i as u32);
            i
        };
        self.buffer[(i + 1) * b..(i + 2) * b].copy_from_slice(block);
        strict_assert_eq!(
            self.of.len(),
            self.entries.len(),
            "one entry per buffered block"
        );
        self.entries.len()
    }

    /// The buffered copy of `logical`, if any.
    pub fn get(&self, logical: u64) -> Option<&[u8]> {
        let b = self.block_size;
        let &i = self.of.get(&logical)?;
        let at = (i as usize + 1) * b;
        Some(&self.buffer[at..at + b])
    }

    /// Whether `logical` is buffered.
    pub fn contains(&self, logical: u64) -> bool {
        self.of.contains_key(&logical)
    }

    /// Drops `logical` from the buffer (a trim): the last buffered block
    /// takes its place.
    pub fn remove(&mut self, logical: u64) {
        let b = self.block_size;
        let Some(i) = self.of.remove(&logical) else {
            return;
        };
        let i = i as usize;
        let last = self.entries.len() - 1;
        if i != last {
            self.entries[i] = self.entries[last];
            self.buffer
                .copy_within((last + 1) * b..(last + 2) * b, (i + 1) * b);
            let moved = self.entries[i].logical;
            self.of.insert(moved, i as u32);
        }
        self.entries.pop();
        strict_assert!(
            !self.of.contains_key(&logical),
            "a removed block still indexed"
        );
        strict_assert_eq!(
            self.of.len(),
            self.entries.len(),
            "one entry per buffered block"
        );
    }

    /// The buffered blocks were written.
    pub fn clear(&mut self) {
        self.entries.clear();
        self.of.clear();
    }
}
