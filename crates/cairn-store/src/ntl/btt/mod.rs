//! Atomic block writes over a [`Region`] (the Linux BTT idea, reduced).
//!
//! A write of logical block `lba` (image version 2) goes: take a free data block
//! (its stripe's spare, else one from the allocator), stream the new data into it,
//! write a lane log record naming it with the data's CRC32C (and write back the
//! lane's previous map entry), one fence, then store the new 8-byte map entry and
//! give the old data block back (it becomes the stripe's spare, else is freed). A
//! crash leaves the map entry wholly old or wholly new (8-byte stores never tear);
//! if the record is durable and the entry is not, the replay at open sets the
//! entry when the data's CRC matches, so the block reads wholly old or wholly new
//! (see `lanelog`). A version 1 image has no lane log: data, fence, map entry,
//! fence.
//!
//! Differences from BTT: the lane log holds only the last two writes per lane and
//! no free list; free space is rebuilt at open from the (replayed) map, so a block
//! not referenced by the map is free. Writers of one block serialise on a striped
//! lock (no global lock); readers in atomic mode take none (they retry a copy if a
//! block of the stripe was freed meanwhile: see `Stripe`); the allocator is
//! lock-free, and an overwrite does not use it (see `Lane::spare`, BTT's per-lane
//! free block kept in DRAM only).
//!
//! A trim unmaps: a trim record and one 8-byte store of the unmapped entry per
//! block, fence, then the old data block is freed, so a crash leaves the block
//! wholly old or unmapped.
//!
//! Layout inside the region: `[info: 64 bytes][map: lbas × 8 bytes]`, padded to the
//! block size, then `[data: data_blocks × block_size]`.
//!
//! [`WriteMode::InPlace`] is the non-atomic mode, which exists to measure what
//! atomicity costs: a write to a mapped block copies the new bytes over the old
//! ones in place, then flush + fence (the same persistence work as the data copy of
//! an atomic write), with no allocation and no map store. It is **not torn-write
//! safe**: a crash in the middle of the copy leaves the block part old, part new.
//! Opening an image in this mode sets [`info::FLAG_IN_PLACE`] in its info block
//! (sticky until the next format), so `fsck` can say the image may hold torn
//! blocks.
//!
//! # Invariants
//!
//! Of the BTT as a whole, at rest (no write in flight), checked by
//! [`Btt::verify`] in this order, with these numbers in its messages. It runs
//! after every open (in debug builds and under the `strict-assertions`
//! feature) and in the tests.
//!
//! 1. The info block satisfies its invariants (`info`: 1 to 6) and states this
//!    layer's geometry and flags, and a lane log exactly when the layer has one.
//! 2. The map satisfies its invariants (`map`: 1 to 4).
//! 3. The lane log, in an image with one, satisfies its invariants (`lanelog`:
//!    1 to 5).
//! 4. A lane that logged a write in this session has its newest record in the
//!    log, with the lane's sequence number.
//! 5. No mapped data block is free in the allocator.
//! 6. A stripe's spare is a data block neither mapped nor free in the
//!    allocator, held by no other stripe, and only kept when spares are on.
//! 7. Every data block is exactly one of: mapped, a stripe's spare, free
//!    (`free + spares + mapped == data_blocks`).

use std::sync::atomic::{AtomicU64, Ordering, fence};
use std::sync::{Mutex, MutexGuard, PoisonError};

use super::alloc::BlockAllocator;
use super::info::{self, InfoError};
use super::lanelog::{self, DataCrc};
use super::layout::{Geometry, INFO_LEN, LANES};
use super::map::{BlockMap, MapError};
use super::region::Region;
use crate::device::{DeviceError, DeviceOp};

const STRIPES: usize = LANES as usize;

/// Bytes [`Btt::prefetch`] asks for: one cache line.
const CACHE_LINE: u64 = 64;

/// Most blocks [`Btt::write_blocks`] persists together (256 KiB of 4 KiB blocks).
pub const BATCH: usize = 64;

/// One stripe lock on its own cache line (unpadded, eight locks shared a line and
/// two writers of unrelated blocks bounced it between cores). It guards the
/// stripe's [`Lane`].
///
/// `freed` makes reads lock-free in atomic mode (a seqlock without the odd
/// state): a writer holding the lock bumps it after its map entries are
/// durable and before it frees the stripe's old data blocks, and a reader
/// retries a copy during which it moved, since the block it copied from may
/// have been freed and rewritten for another logical block meanwhile. Nothing
/// else can change a mapped block in atomic mode.
#[repr(align(64))]
struct Stripe {
    lock: Mutex<Lane>,
    freed: AtomicU64,
}

/// What a stripe's writers share, under its lock.
struct Lane {
    /// Where the stripe's next free-block search starts, just past its last
    /// allocation. (Searching from the logical block number instead made a
    /// sequential writer plough through the free blocks ahead of it: each
    /// allocation scanned past everything the previous ones had taken.)
    cursor: u64,
    /// A free data block the stripe keeps for its next write: the block its
    /// last overwrite replaced (BTT's per-lane free block). An overwrite then
    /// takes its target from here and leaves the block it replaced here, with
    /// no compare-and-swap on the shared bitmap (those were a fifth of a 4 KiB
    /// atomic write, and their cache lines bounced between writers). Kept only
    /// when [`Btt`] has at least [`STRIPES`] blocks beyond its logical ones, so
    /// the bitmap always has a block for a stripe with none (see
    /// `Btt::keep_spares`); lost at close, since free space is rebuilt from the
    /// map.
    spare: Option<u64>,
    /// Writes made through this lane's log (image version 2): the last
    /// record's sequence number.
    seq: u64,
    /// The logical block whose map entry this lane stored last and has not
    /// written back yet (its record still covers it); the lane's next write
    /// writes it back in its own fence epoch, [`Btt::flush`] sooner.
    unflushed: Option<u64>,
}

/// Lock-free read attempts before a reader takes the stripe lock.
const OPTIMISTIC_READS: usize = 4;

/// How a write reaches a block that is already mapped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WriteMode {
    /// Copy to a free block, flush + fence, flip the map entry, flush + fence: a
    /// crash leaves every block wholly old or wholly new.
    #[default]
    Atomic,
    /// Overwrite the mapped block in place, flush + fence. **Not torn-write safe**;
    /// for measuring the price of atomicity. A write to an unmapped block still
    /// goes through allocation and a map flip (there is no block to overwrite).
    InPlace,
}

impl std::fmt::Display for WriteMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Atomic => "atomic",
            Self::InPlace => "in-place (not torn-write safe)",
        })
    }
}

/// The translation layer over one region.
pub struct Btt<R: Region> {
    region: R,
    geo: Geometry,
    flags: u32,
    mode: WriteMode,
    map: BlockMap,
    alloc: BlockAllocator,
    stripes: Box<[Stripe]>,
    /// Stripes keep a spare block ([`Lane::spare`]). Safe when the data blocks
    /// exceed the logical ones by at least [`STRIPES`]: a stripe needing a
    /// block holds none, each other stripe holds at most one (its spare or
    /// the block its write in flight took), and at most `lbas` blocks are
    /// mapped, so the bitmap has at least `data_blocks - lbas - (STRIPES - 1)`
    /// ≥ 1 free. With fewer, spares could strand the last free blocks in idle
    /// stripes, so overwrites free to the bitmap as before.
    keep_spares: bool,
    /// The image's lane log (version 2): where it starts. `None` for a version
    /// 1 image, written with two fences per block.
    log: Option<u64>,
}

impl<R: Region> Btt<R> {
    /// Zeroes the map (every block reads as zeros), writes the info block last, and
    /// opens with atomic writes.
    pub fn format(region: R, geo: Geometry) -> Result<Self, MapError> {
        Self::format_with(region, geo, WriteMode::Atomic)
    }

    /// [`Btt::format`], then open in `mode`.
    pub fn format_with(region: R, geo: Geometry, mode: WriteMode) -> Result<Self, MapError> {
        geo.validate(region.len())
            .map_err(|e| MapError::Info(InfoError::Geometry(e)))?;
        for lba in 0..geo.lbas {
            region.store_u64(INFO_LEN + lba * 8, 0)?;
        }
        region.flush(&[(INFO_LEN, geo.lbas * 8)])?;
        lanelog::clear(&region, &geo)?;
        region.write(0, &info::encode(&geo, 0, info::VERSION))?;
        region.flush(&[(0, INFO_LEN)])?;
        region.fence()?;
        Self::open_with(region, mode)
    }

    /// Validates the info block, loads the map (refusing bad entries) and rebuilds
    /// free space from it; writes are atomic.
    pub fn open(region: R) -> Result<Self, MapError> {
        Self::open_with(region, WriteMode::Atomic)
    }

    /// Opens an image for reading only: nothing is written to `region` (map
    /// it read-only: [`super::MmapRegion::open_read_only`]); the lane log's
    /// records stay for the next read-write open to empty. An image whose
    /// records would still change its map — writes a crash interrupted —
    /// needs them replayed, which writes: that is refused with
    /// [`DeviceError::ReadOnly`]; open it read-write once.
    pub fn open_read_only(region: R) -> Result<Self, MapError> {
        Self::open_inner(region, WriteMode::Atomic, true)
    }

    /// [`Btt::open`] with writes in `mode`. [`WriteMode::InPlace`] first records
    /// [`info::FLAG_IN_PLACE`] durably in the info block.
    pub fn open_with(region: R, mode: WriteMode) -> Result<Self, MapError> {
        Self::open_inner(region, mode, false)
    }

    fn open_inner(region: R, mode: WriteMode, read_only: bool) -> Result<Self, MapError> {
        let mut raw = [0u8; 64];
        region.read(0, &mut raw)?;
        let info = info::decode(&raw, region.len())?;
        let (geo, mut flags) = (info.geometry, info.flags);
        // Version 2: the lane log's records complete the map before it loads;
        // then the log is emptied, so a record never outlives the session that
        // wrote it (a session that does not log could otherwise bring a block
        // back to a record's `old` and have a stale record redone).
        if read_only {
            if info.has_log() && !lanelog::replay(&region, &geo, false)?.redo.is_empty() {
                return Err(MapError::Region(DeviceError::ReadOnly {
                    op: crate::device::DeviceOp::Write,
                }));
            }
        } else if info.has_log() && lanelog::replay(&region, &geo, true)?.records > 0 {
            lanelog::clear(&region, &geo)?;
        }
        let map = BlockMap::load(&region, INFO_LEN, geo.lbas, geo.data_blocks)?;
        let alloc = BlockAllocator::from_used(geo.data_blocks, map.used())?;
        strict_assert_eq!(
            alloc.free_blocks() + map.used().count() as u64,
            geo.data_blocks,
            "free space rebuilt from the map does not add up"
        );
        if mode == WriteMode::InPlace && flags & info::FLAG_IN_PLACE == 0 {
            flags |= info::FLAG_IN_PLACE;
            region.write(0, &info::encode(&geo, flags, info.version))?;
            region.flush(&[(0, INFO_LEN)])?;
            region.fence()?;
        }
        let btt = Self {
            region,
            geo,
            flags,
            mode,
            map,
            alloc,
            stripes: (0..STRIPES as u64)
                .map(|i| Stripe {
                    lock: Mutex::new(Lane {
                        cursor: i * geo.data_blocks / STRIPES as u64,
                        spare: None,
                        seq: 0,
                        unflushed: None,
                    }),
                    freed: AtomicU64::new(0),
                })
                .collect(),
            keep_spares: geo.data_blocks - geo.lbas >= STRIPES as u64,
            log: info.has_log().then(|| geo.log_base()),
        };
        if cfg!(any(debug_assertions, feature = "strict-assertions"))
            && let Err(broken) = btt.verify()
        {
            panic!("after open: {broken}");
        }
        Ok(btt)
    }

    /// The write mode this layer was opened with.
    pub fn mode(&self) -> WriteMode {
        self.mode
    }

    /// Whether the image has ever been opened for in-place writes since it was
    /// formatted (so it may hold a block torn by a crash).
    pub fn in_place_written(&self) -> bool {
        self.flags & info::FLAG_IN_PLACE != 0
    }

    /// Closes the layer and hands back the region (nothing is cached in DRAM that the
    /// region does not already hold durably).
    pub fn into_region(self) -> R {
        self.region
    }

    /// The region underneath.
    pub fn region(&self) -> &R {
        &self.region
    }

    fn stripe(&self, lba: u64) -> MutexGuard<'_, Lane> {
        self.stripes[(lba as usize) % STRIPES]
            .lock
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn check(&self, op: DeviceOp, lba: u64, len: usize) -> Result<(), DeviceError> {
        if lba >= self.geo.lbas || len as u64 != self.geo.block_size {
            return Err(DeviceError::OutOfRange {
                op,
                offset: lba.saturating_mul(self.geo.block_size),
                len: len as u64,
                size: self.geo.lbas * self.geo.block_size,
            });
        }
        Ok(())
    }

    /// Checks the layer against the invariants at the head of this file, in
    /// their order: the first broken one is named by its number. Call it at
    /// rest (no write in flight): it reads the whole map and lane log.
    pub fn verify(&self) -> Result<(), String> {
        let mut raw = [0u8; 64];
        self.region.read(0, &mut raw).map_err(|e| e.to_string())?;
        let found = info::verify(&raw, self.region.len())
            .map_err(|e| format!("NTL BTT invariant 1 broken: {e}"))?;
        if found.geometry != self.geo
            || found.flags != self.flags
            || found.has_log() != self.log.is_some()
        {
            return Err(format!(
                "NTL BTT invariant 1 broken: the info block says {found:?}, the layer has {:?}, flags {:#x}, log {:?}",
                self.geo, self.flags, self.log
            ));
        }
        self.map
            .verify(&self.region)
            .map_err(|e| format!("NTL BTT invariant 2 broken: {e}"))?;
        let newest = match self.log {
            Some(_) => lanelog::verify(&self.region, &self.geo)
                .map_err(|e| format!("NTL BTT invariant 3 broken: {e}"))?,
            None => vec![0; STRIPES],
        };
        let lanes: Vec<(u64, Option<u64>)> = self
            .stripes
            .iter()
            .map(|s| {
                let lane = s.lock.lock().unwrap_or_else(PoisonError::into_inner);
                (lane.seq, lane.spare)
            })
            .collect();
        for (i, &(seq, _)) in lanes.iter().enumerate() {
            if seq > 0 && newest[i] != seq {
                return Err(format!(
                    "NTL BTT invariant 4 broken: lane {i} wrote record {seq}, the log's newest is {}",
                    newest[i]
                ));
            }
        }
        let used: hashbrown::HashSet<u64> = self.map.used().collect();
        let mapped = used.len() as u64;
        for &block in &used {
            if self.alloc.is_free(block) {
                return Err(format!(
                    "NTL BTT invariant 5 broken: mapped block {block} is free in the allocator"
                ));
            }
        }
        let mut spares = hashbrown::HashSet::new();
        for (i, &(_, spare)) in lanes.iter().enumerate() {
            let Some(block) = spare else { continue };
            if !self.keep_spares
                || block >= self.geo.data_blocks
                || self.alloc.is_free(block)
                || used.contains(&block)
                || !spares.insert(block)
            {
                return Err(format!(
                    "NTL BTT invariant 6 broken: stripe {i}'s spare block {block} (spares kept: {})",
                    self.keep_spares
                ));
            }
        }
        let free = self.alloc.free_blocks();
        if free + spares.len() as u64 + mapped != self.geo.data_blocks {
            return Err(format!(
                "NTL BTT invariant 7 broken: {free} free + {} spares + {mapped} mapped != {} data blocks",
                spares.len(),
                self.geo.data_blocks
            ));
        }
        Ok(())
    }

    /// Reads logical block `lba` into `buf` (exactly one block).
    pub fn read_block(&self, lba: u64, buf: &mut [u8]) -> Result<(), DeviceError> {
        self.check(DeviceOp::Read, lba, buf.len())?;
        self.read_bytes(lba, 0, buf)
    }

    /// Atomically replaces logical block `lba` with `data` (exactly one block).
    pub fn write_block(&self, lba: u64, data: &[u8]) -> Result<(), DeviceError> {
        self.check(DeviceOp::Write, lba, data.len())?;
        self.write_bytes(lba, 0, data)
    }

    fn check_bytes(
        &self,
        op: DeviceOp,
        lba: u64,
        within: u64,
        len: usize,
    ) -> Result<(), DeviceError> {
        if lba >= self.geo.lbas || within.saturating_add(len as u64) > self.geo.block_size {
            return Err(DeviceError::OutOfRange {
                op,
                offset: lba
                    .saturating_mul(self.geo.block_size)
                    .saturating_add(within),
                len: len as u64,
                size: self.geo.lbas * self.geo.block_size,
            });
        }
        Ok(())
    }

    /// Reads `buf.len()` bytes at byte `within` of logical block `lba`. In atomic
    /// mode without a lock (see `Stripe`): the copy is kept when no data block
    /// of the stripe was freed while it ran, else retried, and after
    /// `OPTIMISTIC_READS` tries made under the stripe lock. In-place writes
    /// change mapped blocks, so in that mode reads always take the lock.
    pub fn read_bytes(&self, lba: u64, within: u64, buf: &mut [u8]) -> Result<(), DeviceError> {
        self.check_bytes(DeviceOp::Read, lba, within, buf.len())?;
        if self.mode == WriteMode::Atomic {
            let freed = &self.stripes[(lba as usize) % STRIPES].freed;
            for _ in 0..OPTIMISTIC_READS {
                let before = freed.load(Ordering::Acquire);
                let Some(b) = self.map.get(lba) else {
                    // Unmapped at this moment: zeros is what a read then returns.
                    buf.fill(0);
                    return Ok(());
                };
                // A block freed during this copy may be rewritten under it; the
                // check below throws such a copy away (it is never returned).
                self.region
                    .read(self.geo.data_base() + b * self.geo.block_size + within, buf)?;
                fence(Ordering::Acquire);
                if freed.load(Ordering::Relaxed) == before {
                    return Ok(());
                }
            }
        }
        let _g = self.stripe(lba);
        if let Some(b) = self.map.get(lba) {
            self.region
                .read(self.geo.data_base() + b * self.geo.block_size + within, buf)
        } else {
            buf.fill(0);
            Ok(())
        }
    }

    /// Hints that logical block `lba` is about to be read: the first line of its
    /// data block is prefetched. Mapped blocks are scattered, so each block of a
    /// multi-block read is a TLB miss and a cold page the hardware prefetcher
    /// cannot foresee; one line is enough to have the page walk done and the
    /// first miss under way, and the prefetcher streams the rest of the block
    /// once the copy reaches it. (Prefetching every line of the block instead
    /// floods the line-fill buffers: 1 MiB sequential reads ran at half the
    /// speed.) Takes no lock: a stale mapping only wastes the hint.
    pub fn prefetch(&self, lba: u64) {
        if let Some(b) = self.map.get(lba) {
            let bs = self.geo.block_size;
            self.region
                .prefetch(self.geo.data_base() + b * bs, bs.min(CACHE_LINE));
        }
    }

    /// Copies `len` bytes from region offset `from` (or zeros when `None`) to `to`,
    /// through a stack buffer (no heap allocation), flushed (the caller fences),
    /// adding them to `crc` when there is one.
    fn copy(
        &self,
        from: Option<u64>,
        to: u64,
        len: u64,
        crc: &mut Option<DataCrc>,
    ) -> Result<(), DeviceError> {
        if len == 0 {
            return Ok(());
        }
        let data = self.geo.data_base()..self.geo.log_base();
        strict_assert!(
            data.start <= to && to + len <= data.end,
            "copy to {to}+{len} outside the data blocks"
        );
        strict_assert!(
            from.is_none_or(|f| data.start <= f && f + len <= data.end),
            "copy from {from:?} outside the data blocks"
        );
        let mut chunk = [0u8; 512];
        let mut done = 0;
        while done < len {
            let n = (len - done).min(chunk.len() as u64) as usize;
            if let Some(f) = from {
                self.region.read(f + done, &mut chunk[..n])?;
            }
            if let Some(crc) = crc {
                crc.update(&chunk[..n]);
            }
            self.region.write_flushed(to + done, &chunk[..n])?;
            done += n as u64;
        }
        Ok(())
    }

    /// Whether logical block `lba` is mapped (holds data); unmapped blocks read
    /// as zeros.
    pub fn is_mapped(&self, lba: u64) -> bool {
        self.map.get(lba).is_some()
    }

    /// Geometry of the image.
    pub fn geometry(&self) -> Geometry {
        self.geo
    }
}

mod write;

#[cfg(test)]
mod tests;
