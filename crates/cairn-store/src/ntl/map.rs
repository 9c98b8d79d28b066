//! The block map: logical block address → NVM data block.
//!
//! Persistent form: a flat table of 8-byte little-endian entries at `base` in the
//! region, entry `i` for logical block `i`, each updated with one aligned untearable
//! 8-byte store (so a crash leaves an entry wholly old or wholly new):
//!
//! ```text
//! bit 63      mapped (1) / unmapped (0: the block reads as zeros)
//! bits 48..62 reserved, must be zero
//! bits 0..47  NVM data block number (must be < number of data blocks)
//! ```
//!
//! # Invariants
//!
//! Checked by [`BlockMap::verify`], in this order, with these numbers in its
//! messages:
//!
//! 1. Every persistent entry is 0 (unmapped) or has the mapped bit set and its
//!    reserved bits 48..62 clear.
//! 2. Every mapped entry names a data block below `data_blocks`.
//! 3. No two entries name the same data block.
//! 4. The DRAM mirror equals the persistent table, entry for entry.
//!
//! Every store checks its entry against 1 and 2 before it reaches the region
//! (`strict_assert!`), and [`encode`] refuses a block number that does not fit
//! the entry's 48 bits.
//!
//! DRAM index: a flat `AtomicU64` mirror of the table, rebuilt at open: a lookup is
//! one load. It was measured against the paper's radix tree (64-way, like the
//! kernel's `radix_tree`; `benches/ntl_index.rs`): random lookups over 1 Mi blocks
//! took 23 ns flat against 62 ns radix, over 16 Mi blocks 43 ns against 169 ns
//! (each radix level is a dependent cache miss), so the flat table stays
//! (docs/benchmarks.md).

use std::sync::atomic::{AtomicU64, Ordering};

use super::region::Region;
use crate::device::DeviceError;

const MAPPED: u64 = 1 << 63;
const BLOCK_MASK: u64 = (1 << 48) - 1;

/// Encodes a map entry pointing at `data_block`.
pub fn encode(data_block: u64) -> u64 {
    assert!(
        data_block <= BLOCK_MASK,
        "data block {data_block} does not fit a map entry"
    );
    MAPPED | (data_block & BLOCK_MASK)
}

/// A map entry with reserved bits set or pointing outside the data area.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("invalid map entry")]
pub struct InvalidEntry;

/// Decodes an entry: `Ok(None)` unmapped, `Ok(Some(block))` mapped, `Err` when
/// reserved bits are set or the block is not below `data_blocks`.
pub fn decode(entry: u64, data_blocks: u64) -> Result<Option<u64>, InvalidEntry> {
    if entry == 0 {
        return Ok(None);
    }
    if entry & MAPPED == 0 || entry & !(MAPPED | BLOCK_MASK) != 0 {
        return Err(InvalidEntry);
    }
    let block = entry & BLOCK_MASK;
    if block < data_blocks {
        Ok(Some(block))
    } else {
        Err(InvalidEntry)
    }
}

/// Why a persistent map could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum MapError {
    /// An entry is malformed or points outside the data area.
    #[error("map entry for block {lba} is invalid ({entry:#018x}; {data_blocks} data blocks)")]
    BadEntry {
        /// Logical block.
        lba: u64,
        /// Raw entry.
        entry: u64,
        /// Number of data blocks.
        data_blocks: u64,
    },
    /// The info block was refused.
    #[error(transparent)]
    Info(#[from] super::info::InfoError),
    /// Two entries name one data block (or the used set is otherwise inconsistent).
    #[error(transparent)]
    Alloc(#[from] super::alloc::AllocError),
    /// Reading the region failed.
    #[error(transparent)]
    Region(#[from] DeviceError),
}

/// The block map: persistent table location plus its DRAM mirror.
pub struct BlockMap {
    base: u64,
    data_blocks: u64,
    mirror: Box<[AtomicU64]>,
}

impl BlockMap {
    /// Loads `lbas` entries from `region` at `base`, validating each.
    pub fn load<R: Region + ?Sized>(
        region: &R,
        base: u64,
        lbas: u64,
        data_blocks: u64,
    ) -> Result<Self, MapError> {
        assert!(
            base.is_multiple_of(8),
            "map at {base}: entries need 8-byte alignment"
        );
        let mut mirror = Vec::with_capacity(lbas as usize);
        for lba in 0..lbas {
            let entry = region.load_u64(base + lba * 8)?;
            decode(entry, data_blocks).map_err(|InvalidEntry| MapError::BadEntry {
                lba,
                entry,
                data_blocks,
            })?;
            mirror.push(AtomicU64::new(entry));
        }
        Ok(Self {
            base,
            data_blocks,
            mirror: mirror.into_boxed_slice(),
        })
    }

    /// Number of logical blocks.
    pub fn lbas(&self) -> u64 {
        self.mirror.len() as u64
    }

    /// Byte offset of `lba`'s persistent entry.
    pub fn entry_offset(&self, lba: u64) -> u64 {
        strict_assert!(lba < self.lbas(), "entry of lba {lba} of {}", self.lbas());
        self.base + lba * 8
    }

    /// Current data block of `lba` (DRAM lookup); `None` if unmapped or out of range.
    pub fn get(&self, lba: u64) -> Option<u64> {
        let entry = self.mirror.get(lba as usize)?.load(Ordering::Acquire);
        decode(entry, self.data_blocks).ok().flatten()
    }

    /// Sets `lba`'s DRAM entry only (a checker's view of a replay it does not
    /// write: the entry must be valid).
    pub(crate) fn overlay(&self, lba: u64, entry: u64) {
        strict_assert!(
            decode(entry, self.data_blocks).is_ok(),
            "overlay of an invalid entry {entry:#x}"
        );
        if let Some(slot) = self.mirror.get(lba as usize) {
            slot.store(entry, Ordering::Relaxed);
        }
    }

    /// Every data block the map references (for rebuilding the allocator).
    pub fn used(&self) -> impl Iterator<Item = u64> + '_ {
        (0..self.lbas()).filter_map(|l| self.get(l))
    }

    /// Points `lba` at `data_block`: one 8-byte store to the persistent entry,
    /// flushed (the caller fences), then the DRAM mirror. Returns the previous block.
    /// The caller serialises writers of one entry (readers may run alongside).
    pub fn set<R: Region + ?Sized>(
        &self,
        region: &R,
        lba: u64,
        data_block: u64,
    ) -> Result<Option<u64>, DeviceError> {
        self.store(region, lba, encode(data_block), true)
    }

    /// [`Self::set`] without the flush: for a batch of entries, whose lines the
    /// caller then flushes once each with [`Self::flush_entries`] (eight entries
    /// share a cache line) before its fence.
    pub fn set_unflushed<R: Region + ?Sized>(
        &self,
        region: &R,
        lba: u64,
        data_block: u64,
    ) -> Result<Option<u64>, DeviceError> {
        self.store(region, lba, encode(data_block), false)
    }

    /// Flushes the persistent entries of `first..first + count` (the caller
    /// fences).
    pub fn flush_entries<R: Region + ?Sized>(
        &self,
        region: &R,
        first: u64,
        count: u64,
    ) -> Result<(), DeviceError> {
        strict_assert!(
            first
                .checked_add(count)
                .is_some_and(|end| end <= self.lbas()),
            "flush of entries {first}+{count} of {}",
            self.lbas()
        );
        region.flush(&[(self.entry_offset(first), count * 8)])
    }

    /// Unmaps `lba` (it reads as zeros): one 8-byte store of zero, flushed (the
    /// caller fences before freeing the returned block), then the DRAM mirror.
    /// Returns the block it pointed at.
    pub fn clear<R: Region + ?Sized>(
        &self,
        region: &R,
        lba: u64,
    ) -> Result<Option<u64>, DeviceError> {
        self.store(region, lba, 0, true)
    }

    fn store<R: Region + ?Sized>(
        &self,
        region: &R,
        lba: u64,
        entry: u64,
        flushed: bool,
    ) -> Result<Option<u64>, DeviceError> {
        let Some(slot) = self.mirror.get(lba as usize) else {
            return Err(DeviceError::OutOfRange {
                op: crate::device::DeviceOp::Write,
                offset: lba,
                len: 1,
                size: self.lbas(),
            });
        };
        strict_assert!(
            decode(entry, self.data_blocks).is_ok(),
            "map store of an invalid entry {entry:#x} ({} data blocks)",
            self.data_blocks
        );
        let off = self.entry_offset(lba);
        if flushed {
            region.store_u64_flushed(off, entry)?;
        } else {
            region.store_u64(off, entry)?;
        }
        // Writers of one entry are serialised by the caller (`Btt` holds the
        // block's stripe lock), so a load and a store replace `swap`: a locked
        // `xchg` is a full barrier on x86 and would wait here for the entry's
        // non-temporal store to drain, once per block of a batch, where the
        // caller's single fence after the batch waits once (perf: 10 % of a
        // `cairn bench ntl` run was this `xchg`).
        let old = slot.load(Ordering::Relaxed);
        slot.store(entry, Ordering::Release);
        Ok(decode(old, self.data_blocks).ok().flatten())
    }

    /// Checks the map against the invariants at the head of this file, in
    /// their order, reading the persistent table from `region`: the first
    /// broken one is named by its number.
    pub fn verify<R: Region + ?Sized>(&self, region: &R) -> Result<(), String> {
        let mut owner = hashbrown::HashMap::new();
        for lba in 0..self.lbas() {
            let entry = region
                .load_u64(self.entry_offset(lba))
                .map_err(|e| e.to_string())?;
            if entry != 0 && (entry & MAPPED == 0 || entry & !(MAPPED | BLOCK_MASK) != 0) {
                return Err(format!(
                    "NTL map invariant 1 broken: entry {lba} is {entry:#018x} (reserved bits or no mapped bit)"
                ));
            }
            let block = entry & BLOCK_MASK;
            if entry != 0 && block >= self.data_blocks {
                return Err(format!(
                    "NTL map invariant 2 broken: entry {lba} names block {block} of {}",
                    self.data_blocks
                ));
            }
            if entry != 0
                && let Some(other) = owner.insert(block, lba)
            {
                return Err(format!(
                    "NTL map invariant 3 broken: entries {other} and {lba} both name block {block}"
                ));
            }
        }
        for lba in 0..self.lbas() {
            let entry = region
                .load_u64(self.entry_offset(lba))
                .map_err(|e| e.to_string())?;
            let mirrored = self.mirror[lba as usize].load(Ordering::Acquire);
            if entry != mirrored {
                return Err(format!(
                    "NTL map invariant 4 broken: entry {lba} is {entry:#x} on the media, {mirrored:#x} in DRAM"
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ntl::SimRegion;

    #[test]
    fn entries_round_trip_and_reject_garbage() {
        assert_eq!(decode(encode(5), 10), Ok(Some(5)));
        assert_eq!(decode(0, 10), Ok(None));
        assert_eq!(decode(encode(10), 10), Err(InvalidEntry));
        assert_eq!(decode(5, 10), Err(InvalidEntry), "missing mapped bit");
        assert_eq!(
            decode(encode(1) | 1 << 50, 10),
            Err(InvalidEntry),
            "reserved bits"
        );
    }

    #[test]
    fn set_persists_and_reload_sees_it_after_fence() {
        let r = SimRegion::new(4096);
        let m = BlockMap::load(&r, 64, 16, 32).expect("load zeroed");
        assert_eq!(m.get(3), None);
        assert_eq!(m.set(&r, 3, 7).expect("set"), None);
        assert_eq!(m.set(&r, 3, 9).expect("set"), Some(7));
        r.fence().expect("fence");
        r.crash(1);
        let m = BlockMap::load(&r, 64, 16, 32).expect("reload");
        assert_eq!(m.get(3), Some(9));
        assert_eq!(m.used().collect::<Vec<_>>(), vec![9]);
        assert!(m.set(&r, 16, 1).is_err());
        assert_eq!(m.clear(&r, 3).expect("clear"), Some(9));
        assert_eq!(m.clear(&r, 3).expect("clear again"), None);
        r.fence().expect("fence");
        r.crash(2);
        let m = BlockMap::load(&r, 64, 16, 32).expect("reload");
        assert_eq!(m.get(3), None, "the cleared entry stays cleared");
        assert!(m.clear(&r, 16).is_err());
    }

    #[test]
    fn out_of_range_entry_is_refused_at_load() {
        let r = SimRegion::new(4096);
        r.store_u64(64 + 2 * 8, encode(40)).expect("store");
        match BlockMap::load(&r, 64, 16, 32) {
            Err(MapError::BadEntry { lba: 2, .. }) => {}
            other => panic!("expected BadEntry for lba 2, got {:?}", other.err()),
        }
    }

    #[test]
    fn verify_names_the_broken_invariant() {
        let r = SimRegion::new(4096);
        let map = BlockMap::load(&r, 0, 4, 10).expect("load");
        map.set(&r, 0, 5).expect("set");
        map.set(&r, 1, 6).expect("set");
        assert_eq!(map.verify(&r), Ok(()));
        let broken = |lba: u64, entry: u64| {
            let old = r.load_u64(lba * 8).expect("load");
            r.store_u64(lba * 8, entry).expect("store");
            let got = map.verify(&r).expect_err("broken");
            r.store_u64(lba * 8, old).expect("store");
            got
        };
        assert!(broken(2, encode(3) | 1 << 50).contains("invariant 1 "));
        assert!(broken(2, 3).contains("invariant 1 "), "no mapped bit");
        assert!(broken(2, encode(10)).contains("invariant 2 "));
        assert!(
            broken(2, encode(5)).contains("invariant 3 "),
            "block 5 twice"
        );
        assert!(
            broken(2, encode(7)).contains("invariant 4 "),
            "media ahead of DRAM"
        );
        assert_eq!(map.verify(&r), Ok(()));
    }
}
