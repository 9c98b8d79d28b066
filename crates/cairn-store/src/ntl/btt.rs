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

use std::sync::atomic::{AtomicU64, Ordering, fence};
use std::sync::{Mutex, MutexGuard, PoisonError};

use super::alloc::BlockAllocator;
use super::info::{self, INFO_LEN, InfoError};
use super::lanelog::{self, DataCrc, LOG_LEN, Record};
use super::map::{self as entries, BlockMap, MapError};
use super::region::Region;
use crate::device::{DeviceError, DeviceOp};

const STRIPES: usize = lanelog::LANES as usize;

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

/// Sizes of an NTL image.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// Bytes per block.
    pub block_size: u64,
    /// Logical blocks exposed.
    pub lbas: u64,
    /// Physical data blocks (≥ `lbas` + one spare per concurrent writer).
    pub data_blocks: u64,
}

impl Geometry {
    pub(crate) fn data_base(&self) -> u64 {
        (INFO_LEN + self.lbas * 8).div_ceil(self.block_size) * self.block_size
    }

    /// Where the lane log starts (image version 2): right after the data blocks.
    pub(crate) fn log_base(&self) -> u64 {
        self.data_base()
            .saturating_add(self.data_blocks.saturating_mul(self.block_size))
    }

    /// Region bytes the image needs, lane log included (saturating, so absurd
    /// geometry fails `validate`).
    pub fn region_len(&self) -> u64 {
        self.log_base().saturating_add(LOG_LEN)
    }

    /// Checks the geometry is usable in a region of `region_len` bytes.
    pub fn validate(&self, region_len: u64) -> Result<(), String> {
        self.validate_version(region_len, true)
    }

    /// [`Geometry::validate`] for an image with or without (version 1) a lane log.
    pub(crate) fn validate_version(&self, region_len: u64, log: bool) -> Result<(), String> {
        let needs = if log {
            self.region_len()
        } else {
            self.log_base()
        };
        if self.block_size < 64 || !self.block_size.is_power_of_two() {
            return Err(format!(
                "block size {} is not a power of two >= 64",
                self.block_size
            ));
        }
        if self.lbas == 0 || self.data_blocks <= self.lbas || self.data_blocks >= 1 << 48 {
            return Err(format!(
                "{} data blocks for {} logical blocks (need more data blocks than logical, < 2^48)",
                self.data_blocks, self.lbas
            ));
        }
        let need = self
            .lbas
            .checked_mul(8)
            .and_then(|m| m.checked_add(INFO_LEN + self.block_size))
            .and_then(|m| {
                self.data_blocks
                    .checked_mul(self.block_size)?
                    .checked_add(m)
            });
        match need {
            Some(_) if needs <= region_len => Ok(()),
            _ => Err(format!(
                "image needs {needs} bytes, region has {region_len}"
            )),
        }
    }
}

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
        if mode == WriteMode::InPlace && flags & info::FLAG_IN_PLACE == 0 {
            flags |= info::FLAG_IN_PLACE;
            region.write(0, &info::encode(&geo, flags, info.version))?;
            region.flush(&[(0, INFO_LEN)])?;
            region.fence()?;
        }
        Ok(Self {
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
        })
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

    /// Replaces bytes `within..within+data.len()` of logical block `lba`, durably.
    ///
    /// Atomic mode: the rest of the block is copied from the old block (or
    /// zero-filled) into a free block, so the whole block flips old → new in one map
    /// store. In-place mode, block already mapped: only the given bytes are copied
    /// over the old ones, then flushed and fenced (a crash may tear the block).
    pub fn write_bytes(&self, lba: u64, within: u64, data: &[u8]) -> Result<(), DeviceError> {
        self.check_bytes(DeviceOp::Write, lba, within, data.len())?;
        let bs = self.geo.block_size;
        let mut lane = self.stripe(lba);
        if self.mode == WriteMode::InPlace
            && let Some(block) = self.map.get(lba)
        {
            let at = self.geo.data_base() + block * bs + within;
            self.region.write_flushed(at, data)?;
            return self.region.fence();
        }
        let Some(new) = self.take_block(&mut lane, None) else {
            return Err(self.no_space(lba, data.len() as u64));
        };
        let base = self.geo.data_base();
        let off = base + new * bs;
        let old_block = self.map.get(lba);
        let old_off = old_block.map(|b| base + b * bs);
        // Start the map entry line's read-for-ownership under the data copy
        // (see `write_batch`).
        self.region.prefetch(self.map.entry_offset(lba), 8);
        let end = within + data.len() as u64;
        let mut crc = self.logged().then(DataCrc::new);
        let staged = self
            .copy(old_off, off, within, &mut crc)
            .and_then(|()| {
                // Checksummed after the streaming stores are issued, so the
                // CRC runs while they drain.
                self.region.write_flushed(off + within, data)?;
                if let Some(crc) = &mut crc {
                    crc.update(data);
                }
                Ok(())
            })
            .and_then(|()| self.copy(old_off.map(|o| o + end), off + end, bs - end, &mut crc))
            .and_then(|()| match &crc {
                Some(crc) => self.log_record(&mut lane, lba, old_block, Some(new), crc.finish()),
                None => Ok(()),
            })
            .and_then(|()| self.region.fence());
        if let Err(e) = staged {
            self.retire_block(&mut lane, new);
            return Err(e);
        }
        let old = if self.logged() {
            // Durable through the record; written back by the lane's next write.
            lane.unflushed = Some(lba);
            self.map.set_unflushed(&self.region, lba, new)?
        } else {
            let old = self.map.set(&self.region, lba, new)?;
            self.region.fence()?;
            old
        };
        if let Some(old) = old {
            self.freeing(lba);
            self.retire_block(&mut lane, old);
        }
        Ok(())
    }

    /// A free data block for a write in `lane`'s stripe: its spare, else one
    /// from the bitmap searched from `cursor` (a batch searches from its first
    /// stripe's cursor), or from `lane`'s own cursor when that is `None`.
    fn take_block(&self, lane: &mut Lane, cursor: Option<&mut u64>) -> Option<u64> {
        if let Some(block) = lane.spare.take() {
            return Some(block);
        }
        let cursor = cursor.unwrap_or(&mut lane.cursor);
        let block = self.alloc.alloc(*cursor)?;
        *cursor = block + 1;
        Some(block)
    }

    /// Gives back a data block nothing maps any more (the caller holds
    /// `lane`'s stripe lock, and any map entry that pointed at it has been
    /// replaced durably): kept as the stripe's spare when there is room,
    /// else freed on the bitmap.
    fn retire_block(&self, lane: &mut Lane, block: u64) {
        if self.keep_spares && lane.spare.is_none() {
            lane.spare = Some(block);
        } else {
            self.alloc.free(block);
        }
    }

    /// Whether atomic writes go through the lane log: a version 2 image opened
    /// for atomic writes on a region whose stores need fences to persist in
    /// order. (In-place mode changes mapped blocks under their records, whose
    /// data CRCs would then fail, so its map flips of unmapped blocks are fenced
    /// as in version 1; where stores persist in program order, the version 1
    /// steps cost no fence at all.) A session logs all its writes and trims or
    /// none.
    fn logged(&self) -> bool {
        self.log.is_some() && self.mode == WriteMode::Atomic && !self.region.persists_in_order()
    }

    /// Lane log steps of an atomic write of `lba` (see `lanelog`), or with
    /// `new` = `None` of a trim: its record in
    /// the lane's next slot, and a write-back of the entry the lane stored last,
    /// both flushed for the caller's one fence. The caller holds `lane`'s lock.
    fn log_record(
        &self,
        lane: &mut Lane,
        lba: u64,
        old: Option<u64>,
        new: Option<u64>,
        data_crc: u32,
    ) -> Result<(), DeviceError> {
        let Some(log_base) = self.log.filter(|_| self.logged()) else {
            return Ok(());
        };
        lane.seq += 1;
        let record = Record {
            seq: lane.seq,
            lba,
            old: old.map_or(0, entries::encode),
            new: new.unwrap_or(lanelog::TRIMMED),
            data_crc,
        };
        let slot = lanelog::slot_offset(log_base, lba % lanelog::LANES, lane.seq);
        self.region.write_flushed(slot, &record.encode())?;
        // The record this one replaces in two writes' time covers that entry
        // until then; after this fence the entry no longer needs it.
        if let Some(earlier) = lane.unflushed.take() {
            self.map.flush_entries(&self.region, earlier, 1)?;
        }
        Ok(())
    }

    /// Writes back every map entry still covered only by its lane's record,
    /// then fences. Not needed for durability (records are replayed at open);
    /// it leaves the map current on the media, as at a clean stop.
    pub fn flush(&self) -> Result<(), DeviceError> {
        if self.log.is_none() {
            return Ok(());
        }
        let mut any = false;
        for stripe in &self.stripes {
            let mut lane = stripe.lock.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(lba) = lane.unflushed.take() {
                self.map.flush_entries(&self.region, lba, 1)?;
                any = true;
            }
        }
        if any {
            self.region.fence()?;
        }
        Ok(())
    }

    fn no_space(&self, lba: u64, len: u64) -> DeviceError {
        DeviceError::Io {
            op: DeviceOp::Write,
            offset: lba * self.geo.block_size,
            len,
            device: self.region.describe(),
            source: std::io::Error::other("no free NVM block"),
        }
    }

    /// Replaces whole logical blocks `first..first + data.len() / block_size`, each
    /// atomically (in atomic mode), in batches of up to [`BATCH`] blocks that share
    /// their persistence points: every block's data is copied to a free block, one
    /// fence, every map entry flips, one fence. A crash leaves each block wholly old
    /// or wholly new (different blocks of one call may differ), exactly as a
    /// sequence of [`Btt::write_block`] calls would, with two fences per batch
    /// instead of two per block. The batch's stripe locks are taken in ascending
    /// stripe order, so concurrent batches cannot deadlock.
    pub fn write_blocks(&self, first: u64, data: &[u8]) -> Result<(), DeviceError> {
        let bs = self.geo.block_size;
        let count = data.len() as u64 / bs;
        if !(data.len() as u64).is_multiple_of(bs)
            || first
                .checked_add(count)
                .is_none_or(|end| end > self.geo.lbas)
        {
            return Err(DeviceError::OutOfRange {
                op: DeviceOp::Write,
                offset: first.saturating_mul(bs),
                len: data.len() as u64,
                size: self.geo.lbas * bs,
            });
        }
        if count == 1 {
            // One block: the same steps without a batch's per-block arrays.
            return self.write_bytes(first, 0, data);
        }
        for (i, chunk) in data.chunks(BATCH * bs as usize).enumerate() {
            self.write_batch(first + (i * BATCH) as u64, chunk)?;
        }
        Ok(())
    }

    fn write_batch(&self, first: u64, data: &[u8]) -> Result<(), DeviceError> {
        let bs = self.geo.block_size;
        let n = data.len() / bs as usize;
        let mut guards = self.lock_batch(first, n);
        let base = self.geo.data_base();
        // Per block: the data block written, and whether the map must flip to it.
        let mut target = [0u64; BATCH];
        let mut flip = [false; BATCH];
        // On failure, the blocks taken so far go back to their stripes.
        let release = |guards: &mut [Option<MutexGuard<'_, Lane>>; BATCH],
                       target: &[u64; BATCH],
                       flip: &[bool; BATCH],
                       upto: usize| {
            for i in 0..upto {
                if flip[i]
                    && let Some(lane) = guards[i].as_deref_mut()
                {
                    self.retire_block(lane, target[i]);
                }
            }
        };
        for i in 0..n {
            let lba = first + i as u64;
            match self.map.get(lba) {
                Some(block) if self.mode == WriteMode::InPlace => target[i] = block,
                _ => {
                    // Block i's stripe spare, else the bitmap searched from the
                    // batch's first stripe's cursor.
                    let taken = if i == 0 {
                        guards[0]
                            .as_deref_mut()
                            .and_then(|lane| self.take_block(lane, None))
                    } else {
                        let (head, rest) = guards.split_at_mut(1);
                        match (rest[i - 1].as_deref_mut(), head[0].as_deref_mut()) {
                            (Some(lane), first) => {
                                self.take_block(lane, first.map(|l| &mut l.cursor))
                            }
                            (None, _) => None,
                        }
                    };
                    let Some(new) = taken else {
                        release(&mut guards, &target, &flip, i);
                        return Err(self.no_space(lba, bs));
                    };
                    target[i] = new;
                    flip[i] = true;
                }
            }
        }
        if flip[..n].contains(&true) {
            // The map entries' line is stored to right after the data's fence:
            // start its read-for-ownership now, under the data copy, instead of
            // then (a cache miss on the 8-byte-per-block table).
            self.region
                .prefetch(self.map.entry_offset(first), n as u64 * 8);
        }
        let staged = (0..n)
            .try_for_each(|i| {
                let from = &data[i * bs as usize..(i + 1) * bs as usize];
                self.region.write_flushed(base + target[i] * bs, from)?;
                if self.logged()
                    && flip[i]
                    && let Some(lane) = guards[i].as_deref_mut()
                {
                    let mut crc = DataCrc::new();
                    crc.update(from);
                    let lba = first + i as u64;
                    self.log_record(lane, lba, self.map.get(lba), Some(target[i]), crc.finish())?;
                }
                Ok(())
            })
            .and_then(|()| self.region.fence());
        if let Err(e) = staged {
            release(&mut guards, &target, &flip, n);
            return Err(e);
        }
        if !flip[..n].contains(&true) {
            return Ok(());
        }
        let mut old = [None; BATCH];
        for i in 0..n {
            if flip[i] {
                old[i] = self
                    .map
                    .set_unflushed(&self.region, first + i as u64, target[i])?;
                if self.logged()
                    && let Some(lane) = guards[i].as_deref_mut()
                {
                    lane.unflushed = Some(first + i as u64);
                }
            }
        }
        if !self.logged() {
            self.map.flush_entries(&self.region, first, n as u64)?;
            self.region.fence()?;
        }
        for (i, block) in old[..n].iter().enumerate() {
            if let Some(block) = *block
                && let Some(lane) = guards[i].as_deref_mut()
            {
                self.freeing(first + i as u64);
                self.retire_block(lane, block);
            }
        }
        drop(guards);
        Ok(())
    }

    /// Tells lock-free readers of `lba`'s stripe that a data block it mapped is
    /// about to be freed. The caller holds the stripe lock (so a load and a
    /// store, no locked instruction), and `lba`'s new map entry is already
    /// durable and visible.
    fn freeing(&self, lba: u64) {
        let freed = &self.stripes[(lba as usize) % STRIPES].freed;
        freed.store(
            freed.load(Ordering::Relaxed).wrapping_add(1),
            Ordering::Release,
        );
    }

    /// The stripe locks of blocks `first..first + n` (`n` ≤ [`BATCH`], so the
    /// stripes are distinct), `guards[i]` for block `first + i`, taken in
    /// ascending stripe order so concurrent batches cannot deadlock.
    fn lock_batch(&self, first: u64, n: usize) -> [Option<MutexGuard<'_, Lane>>; BATCH] {
        const { assert!(BATCH <= STRIPES, "a batch's stripes must be distinct") };
        debug_assert!(n <= BATCH);
        // Start at the block whose stripe index is lowest.
        let start = (0..n)
            .min_by_key(|&i| (first as usize + i) % STRIPES)
            .unwrap_or(0);
        let mut guards: [Option<MutexGuard<'_, Lane>>; BATCH] = std::array::from_fn(|_| None);
        for k in 0..n {
            let i = (start + k) % n;
            guards[i] = Some(self.stripe(first + i as u64));
        }
        guards
    }

    /// Unmaps logical blocks `first..first + count`: each then reads as zeros and
    /// its data block is free for reuse. In batches of up to [`BATCH`] blocks:
    /// every mapped entry is stored as unmapped, one fence, then the old data
    /// blocks are freed (never before the fence, or a crash could leave an entry
    /// pointing at a block already rewritten for another). A crash leaves each
    /// block either unmapped or with its old data, never torn. Returns how many
    /// blocks were freed.
    pub fn trim_blocks(&self, first: u64, count: u64) -> Result<u64, DeviceError> {
        let bs = self.geo.block_size;
        if first
            .checked_add(count)
            .is_none_or(|end| end > self.geo.lbas)
        {
            return Err(DeviceError::OutOfRange {
                op: DeviceOp::Discard,
                offset: first.saturating_mul(bs),
                len: count.saturating_mul(bs),
                size: self.geo.lbas * bs,
            });
        }
        let mut freed = 0;
        let mut at = first;
        while at < first + count {
            let n = (first + count - at).min(BATCH as u64) as usize;
            // Skip whole batches of unmapped blocks without taking locks.
            if (at..at + n as u64).all(|lba| self.map.get(lba).is_none()) {
                at += n as u64;
                continue;
            }
            let mut guards = self.lock_batch(at, n);
            let mut old = [None; BATCH];
            for (i, slot) in old[..n].iter_mut().enumerate() {
                let lba = at + i as u64;
                if let Some(block) = self.map.get(lba) {
                    // A trim record, so that replay never redoes an older
                    // record of this block over the trim (one from unmapped
                    // to mapped would match the unmapped entry again).
                    if let Some(lane) = guards[i].as_deref_mut() {
                        self.log_record(lane, lba, Some(block), None, 0)?;
                    }
                    *slot = self.map.clear(&self.region, lba)?;
                }
            }
            self.region.fence()?;
            for (i, block) in old[..n].iter().enumerate() {
                if let Some(block) = block {
                    self.freeing(at + i as u64);
                    self.alloc.free(*block);
                    freed += 1;
                }
            }
            drop(guards);
            at += n as u64;
        }
        Ok(freed)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ntl::SimRegion;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    const GEO: Geometry = Geometry {
        block_size: 64,
        lbas: 8,
        data_blocks: 12,
    };

    /// Block contents: every byte is the write's tag, so a torn block is visible.
    fn run(
        r: &Btt<SimRegion>,
        ops: &[(u64, u8)],
        done: &mut [u8],
        inflight: &mut Option<(u64, u8)>,
    ) {
        for &(lba, tag) in ops {
            *inflight = Some((lba, tag));
            if r.write_block(lba, &[tag; 64]).is_err() {
                return;
            }
            done[lba as usize] = tag;
            *inflight = None;
        }
    }

    #[test]
    fn crash_at_every_store_leaves_blocks_old_or_new() {
        // Version 2 (lane log, one fence per write) and version 1 (two).
        for (seed, version) in
            (0..8u64).flat_map(|s| [(s, info::VERSION), (s, info::VERSION_NO_LOG)])
        {
            let format = || {
                let b = Btt::format(SimRegion::new(GEO.region_len()), GEO).expect("format");
                if version == info::VERSION_NO_LOG {
                    let region = b.into_region();
                    region
                        .write(0, &info::encode(&GEO, 0, version))
                        .expect("info");
                    region.flush(&[(0, INFO_LEN)]).expect("flush");
                    region.fence().expect("fence");
                    let b = Btt::open(region).expect("open v1");
                    assert!(b.log.is_none(), "a version 1 image has no lane log");
                    b
                } else {
                    assert!(b.log.is_some());
                    b
                }
            };
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let ops: Vec<(u64, u8)> = (1..=24u8)
                .map(|t| (rng.random_range(0..GEO.lbas), t))
                .collect();
            let lbas: Vec<u64> = (0..GEO.lbas).collect();
            at_every_crash_point(
                &|| (format(), vec![0; 8]),
                &ops,
                seed,
                &mut |b, done, inflight, point| {
                    assert_old_or_new(
                        b,
                        &lbas,
                        done,
                        inflight,
                        &format!("v{version} seed {seed} point {point}"),
                    );
                },
            );
        }
    }

    /// What a crash-point test checks after recovery: the reopened layer, the
    /// tags of the completed writes, the write in flight, the crash point.
    type CrashCheck<'a> = dyn FnMut(&Btt<SimRegion>, &[u8], Option<(u64, u8)>, u64) + 'a;

    /// Runs `ops` on `fresh()` once to count its stores and fences, then once
    /// per crash point: crash after that many, lose a seeded part of what was
    /// not fenced, reopen, and hand the reopened layer to `check` with the
    /// tags of the writes that completed (`done`, from `fresh`'s) and of the
    /// one in flight.
    fn at_every_crash_point(
        fresh: &dyn Fn() -> (Btt<SimRegion>, Vec<u8>),
        ops: &[(u64, u8)],
        seed: u64,
        check: &mut CrashCheck<'_>,
    ) {
        let (probe, mut scratch) = fresh();
        let start = probe.region().events();
        run(&probe, ops, &mut scratch, &mut None);
        let total = probe.region().events() - start;
        for point in 0..=total {
            let (b, mut done) = fresh();
            b.region().crash_after(start + point);
            let mut inflight = None;
            run(&b, ops, &mut done, &mut inflight);
            let region = b.into_region();
            region.crash(seed ^ (point << 16));
            let b = Btt::open(region)
                .unwrap_or_else(|e| panic!("seed {seed} point {point}: reopen: {e}"));
            check(&b, &done, inflight, point);
        }
    }

    /// Every block of `lbas` reads wholly one tag: the last completed write's,
    /// or the one in flight at the crash.
    fn assert_old_or_new(
        b: &Btt<SimRegion>,
        lbas: &[u64],
        done: &[u8],
        inflight: Option<(u64, u8)>,
        what: &str,
    ) {
        for &lba in lbas {
            let mut buf = [0u8; 64];
            b.read_block(lba, &mut buf).expect("read");
            let tag = buf[0];
            assert!(buf.iter().all(|&x| x == tag), "{what}: torn lba {lba}");
            assert!(
                tag == done[lba as usize] || inflight == Some((lba, tag)),
                "{what}: lba {lba} has {tag}, want {} or {inflight:?}",
                done[lba as usize]
            );
        }
    }

    /// Blocks handed out: the bitmap's free blocks plus the stripes' spares are
    /// exactly the blocks the map does not reference.
    fn assert_free_space_adds_up(b: &Btt<SimRegion>, what: &str) {
        let spares = b
            .stripes
            .iter()
            .filter(|s| s.lock.lock().expect("lock").spare.is_some())
            .count() as u64;
        let mapped = b.map.used().count() as u64;
        assert_eq!(
            b.alloc.free_blocks() + spares,
            b.geo.data_blocks - mapped,
            "{what}: free blocks and spares do not add up"
        );
    }

    #[test]
    fn crash_at_every_store_with_stripe_spares_leaves_blocks_old_or_new() {
        // Pairs of blocks share a stripe, so a block one overwrite replaces is
        // the target of the next write to the other: reuse must wait until
        // the map entry that left it is durable.
        let geo = Geometry {
            block_size: 64,
            lbas: 260,
            data_blocks: 260 + STRIPES as u64,
        };
        let used = [0u64, 256, 1, 257, 2, 258];
        for seed in 0..6u64 {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let ops: Vec<(u64, u8)> = (1..=20u8)
                .map(|t| (used[rng.random_range(0..used.len())], t))
                .collect();
            let format = || Btt::format(SimRegion::new(geo.region_len()), geo).expect("format");
            let probe = format();
            assert!(probe.keep_spares);
            run(&probe, &ops, &mut [0; 260], &mut None);
            assert_free_space_adds_up(&probe, "after the workload");
            at_every_crash_point(
                &|| (format(), vec![0; 260]),
                &ops,
                seed,
                &mut |b, done, inflight, point| {
                    assert_old_or_new(
                        b,
                        &used,
                        done,
                        inflight,
                        &format!("seed {seed} point {point}"),
                    );
                },
            );
        }
    }

    #[test]
    fn stripe_spares_never_strand_the_last_free_blocks() {
        // Exactly STRIPES blocks beyond the logical ones (spares on), and one
        // fewer and BATCH (spares off; a batch takes all its blocks before it
        // flips any, so it needs BATCH free): overwriting every block in
        // random order, single and batched, never runs out, and free space
        // adds up.
        for extra in [STRIPES as u64, STRIPES as u64 - 1, BATCH as u64] {
            let geo = Geometry {
                block_size: 64,
                lbas: 600,
                data_blocks: 600 + extra,
            };
            let b = Btt::format(SimRegion::new(geo.region_len()), geo).expect("format");
            assert_eq!(b.keep_spares, extra >= STRIPES as u64);
            b.write_blocks(0, &vec![1u8; 600 * 64]).expect("fill");
            let mut rng = ChaCha8Rng::seed_from_u64(extra);
            for t in 0..3000u32 {
                let lba = rng.random_range(0..geo.lbas);
                b.write_block(lba, &[t as u8; 64])
                    .unwrap_or_else(|e| panic!("extra {extra}: write {t} of lba {lba}: {e}"));
            }
            assert_free_space_adds_up(&b, &format!("extra {extra}, single writes"));
            b.write_blocks(7, &vec![2u8; 300 * 64])
                .unwrap_or_else(|e| panic!("extra {extra}: batched rewrite: {e}"));
            assert_free_space_adds_up(&b, &format!("extra {extra}, batched writes"));
            assert_eq!(b.trim_blocks(0, 600).expect("trim"), 600);
            assert_free_space_adds_up(&b, &format!("extra {extra}, trimmed"));
        }
    }

    /// Crashes at every store and fence of a seeded overwrite workload in `mode`;
    /// returns how many (crash point, block) pairs came back torn. Checks in both
    /// modes that every block holds only tags it was ever written with, and every
    /// write completed before the crash (each ends with a fence) is present or
    /// overwritten by the in-flight one.
    fn torn_blocks(mode: WriteMode, seed: u64) -> usize {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let ops: Vec<(u64, u8)> = (1..=16u8)
            .map(|t| (rng.random_range(0..GEO.lbas), t))
            .collect();
        // Every block mapped first, so in-place writes really go in place.
        let fill: Vec<(u64, u8)> = (0..GEO.lbas).map(|l| (l, 100 + l as u8)).collect();
        let fresh = || {
            let b = Btt::format_with(SimRegion::new(GEO.region_len()), GEO, mode).expect("format");
            let mut done = vec![0u8; 8];
            run(&b, &fill, &mut done, &mut None);
            (b, done)
        };
        let mut torn = 0;
        at_every_crash_point(&fresh, &ops, seed, &mut |b, done, inflight, point| {
            assert_eq!(b.in_place_written(), mode == WriteMode::InPlace);
            for lba in 0..GEO.lbas {
                let mut buf = [0u8; 64];
                b.read_block(lba, &mut buf).expect("read");
                let want = done[lba as usize];
                let new = inflight.filter(|&(l, _)| l == lba).map(|(_, t)| t);
                for &x in &buf {
                    assert!(
                        x == want || Some(x) == new,
                        "{mode} seed {seed} point {point}: lba {lba} byte {x}, want {want} or {new:?}"
                    );
                }
                if buf.iter().any(|&x| x != buf[0]) {
                    torn += 1;
                }
            }
        });
        torn
    }

    #[test]
    fn in_place_mode_can_tear_where_atomic_mode_cannot() {
        let (mut atomic, mut in_place) = (0, 0);
        for seed in 0..4 {
            atomic += torn_blocks(WriteMode::Atomic, seed);
            in_place += torn_blocks(WriteMode::InPlace, seed);
        }
        assert_eq!(atomic, 0, "an atomic write tore a block");
        assert!(
            in_place > 0,
            "the crash model never tore an in-place write: the comparison proves nothing"
        );
    }

    #[test]
    fn in_place_writes_round_trip_and_flag_the_image() {
        let b = Btt::format_with(SimRegion::new(GEO.region_len()), GEO, WriteMode::InPlace)
            .expect("format");
        assert_eq!(b.mode(), WriteMode::InPlace);
        assert!(b.in_place_written());
        b.write_block(2, &[5; 64])
            .expect("first write maps the block");
        let mapped = b.map.get(2);
        b.write_bytes(2, 10, &[9; 20]).expect("in-place byte write");
        b.write_block(3, &[7; 64]).expect("write");
        assert_eq!(b.map.get(2), mapped, "an in-place write keeps the mapping");
        let free = b.alloc.free_blocks();
        b.write_block(3, &[8; 64]).expect("overwrite");
        assert_eq!(b.alloc.free_blocks(), free, "no allocation in place");
        let region = b.into_region();
        region.crash(0);
        let b = Btt::open(region).expect("reopen atomic");
        assert!(b.in_place_written(), "the flag is sticky");
        let mut buf = [0u8; 64];
        b.read_block(2, &mut buf).expect("read");
        let mut want = [5u8; 64];
        want[10..30].fill(9);
        assert_eq!(buf, want);
        b.read_block(3, &mut buf).expect("read");
        assert_eq!(buf, [8; 64]);
        let b = Btt::format(b.into_region(), GEO).expect("reformat");
        assert!(!b.in_place_written(), "format clears the flag");
    }

    #[test]
    fn batched_writes_span_batches_wrap_stripes_and_do_not_deadlock() {
        let geo = Geometry {
            block_size: 64,
            lbas: 600,
            data_blocks: 700,
        };
        for mode in [WriteMode::Atomic, WriteMode::InPlace] {
            let b = Btt::format_with(SimRegion::new(geo.region_len()), geo, mode).expect("format");
            // 150 blocks from 200: three batches, crossing stripe 0 (lba 256).
            let data: Vec<u8> = (0..150 * 64u32).map(|i| (i / 64) as u8).collect();
            b.write_blocks(200, &data).expect("write");
            assert!(b.write_blocks(599, &[0; 128]).is_err(), "past the end");
            assert!(b.write_blocks(0, &[0; 65]).is_err(), "not whole blocks");
            std::thread::scope(|s| {
                for t in 0..2u8 {
                    let b = &b;
                    s.spawn(move || {
                        for round in 0..50u64 {
                            let first = (round * 37 + u64::from(t) * 101) % 400;
                            b.write_blocks(first, &[t; 64 * 130])
                                .expect("concurrent write");
                        }
                    });
                }
            });
            b.write_blocks(200, &data).expect("rewrite");
            let mut buf = [0u8; 64];
            for i in 0..150 {
                b.read_block(200 + i, &mut buf).expect("read");
                assert_eq!(buf, [i as u8; 64], "{mode} block {i}");
            }
            let region = b.into_region();
            region.crash(1);
            let b = Btt::open(region).expect("reopen");
            b.read_block(349, &mut buf).expect("read");
            assert_eq!(buf, [149; 64], "{mode}");
            assert_eq!(b.alloc.free_blocks(), 700 - b.map.used().count() as u64);
        }
    }

    /// A write of `tag` to one block, or a trim of `count` blocks.
    #[derive(Clone, Copy, Debug)]
    enum Op {
        Write(u64, u8),
        Trim(u64, u64),
    }

    #[test]
    fn crash_at_every_store_of_writes_and_trims_leaves_blocks_old_or_new() {
        // Few spare blocks, so blocks freed by a trim are soon reused by a write
        // to another block: freeing before the unmap is durable would let a
        // crash show that write's data under the trimmed block.
        let geo = Geometry {
            block_size: 64,
            lbas: 8,
            data_blocks: 10,
        };
        for seed in 0..12u64 {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let ops: Vec<Op> = (1..=24u8)
                .map(|t| {
                    if rng.random_range(0..3) == 0 {
                        let first = rng.random_range(0..geo.lbas);
                        Op::Trim(first, rng.random_range(1..=geo.lbas - first))
                    } else {
                        Op::Write(rng.random_range(0..geo.lbas), t)
                    }
                })
                .collect();
            let run = |b: &Btt<SimRegion>, done: &mut [u8; 8], next: &mut [u8; 8]| {
                for &op in &ops {
                    next.clone_from(done);
                    let result = match op {
                        Op::Write(lba, tag) => {
                            next[lba as usize] = tag;
                            b.write_block(lba, &[tag; 64])
                        }
                        Op::Trim(first, count) => {
                            next[first as usize..(first + count) as usize].fill(0);
                            b.trim_blocks(first, count).map(|_| ())
                        }
                    };
                    if result.is_err() {
                        return;
                    }
                    done.clone_from(next);
                }
            };
            let probe = Btt::format(SimRegion::new(geo.region_len()), geo).expect("format");
            let start = probe.region().events();
            run(&probe, &mut [0; 8], &mut [0; 8]);
            let total = probe.region().events() - start;
            let mut trimmed = 0;
            for point in 0..=total {
                let b = Btt::format(SimRegion::new(geo.region_len()), geo).expect("format");
                b.region().crash_after(start + point);
                let (mut done, mut next) = ([0u8; 8], [0u8; 8]);
                run(&b, &mut done, &mut next);
                let region = b.into_region();
                region.crash(seed ^ (point << 16));
                let b = Btt::open(region)
                    .unwrap_or_else(|e| panic!("seed {seed} point {point}: reopen: {e}"));
                for lba in 0..geo.lbas {
                    let mut buf = [0u8; 64];
                    b.read_block(lba, &mut buf).expect("read");
                    let tag = buf[0];
                    assert!(
                        buf.iter().all(|&x| x == tag),
                        "seed {seed} point {point}: torn lba {lba}: {buf:?}"
                    );
                    let (old, new) = (done[lba as usize], next[lba as usize]);
                    assert!(
                        tag == old || tag == new,
                        "seed {seed} point {point}: lba {lba} holds {tag}, want {old} or {new}"
                    );
                    trimmed += usize::from(tag == 0 && !b.is_mapped(lba));
                }
                assert_eq!(
                    b.alloc.free_blocks(),
                    geo.data_blocks - b.map.used().count() as u64,
                    "seed {seed} point {point}: free space rebuilt from the map"
                );
            }
            assert!(trimmed > 0, "seed {seed}: no crash point saw a trim");
        }
    }

    #[test]
    fn trim_unmaps_frees_and_reads_zero() {
        let b = Btt::format(SimRegion::new(GEO.region_len()), GEO).expect("format");
        for lba in 0..GEO.lbas {
            b.write_block(lba, &[lba as u8 + 1; 64]).expect("write");
        }
        let free = b.alloc.free_blocks();
        assert_eq!(b.trim_blocks(2, 3).expect("trim"), 3);
        assert_eq!(
            b.trim_blocks(2, 3).expect("trim again"),
            0,
            "nothing left to free"
        );
        assert_eq!(b.alloc.free_blocks(), free + 3);
        assert!(b.trim_blocks(7, 2).is_err(), "past the end");
        assert!(b.trim_blocks(u64::MAX, 2).is_err(), "overflow");
        let mut buf = [9u8; 64];
        b.read_block(3, &mut buf).expect("read");
        assert_eq!(buf, [0; 64]);
        let region = b.into_region();
        region.crash(3);
        let b = Btt::open(region).expect("reopen");
        for lba in 0..GEO.lbas {
            b.read_block(lba, &mut buf).expect("read");
            let want = if (2..5).contains(&lba) {
                0
            } else {
                lba as u8 + 1
            };
            assert_eq!(buf, [want; 64], "lba {lba} after reopen");
            assert_eq!(b.is_mapped(lba), want != 0);
        }
        assert_eq!(b.alloc.free_blocks(), free + 3);
    }

    /// Lock-free reads never return a torn or foreign block: two writers keep
    /// rewriting 8 blocks (each block all one tag) with 2 spare data blocks, so a
    /// freed block is reused almost at once, while two readers check every block
    /// they read is one tag that was written to that block.
    #[test]
    fn lock_free_reads_never_see_a_reused_block() {
        // Without stripe spares (blocks freed to the bitmap and taken by any
        // stripe), and with them (a block replaced by an overwrite is reused
        // by the next write of its stripe: blocks 0..4 share stripes with
        // 256..260).
        let small = Geometry {
            block_size: 4096,
            lbas: 8,
            data_blocks: 10,
        };
        let spares = Geometry {
            block_size: 4096,
            lbas: 264,
            data_blocks: 264 + STRIPES as u64,
        };
        for (geo, lbas) in [
            (small, (0..8).collect::<Vec<u64>>()),
            (spares, vec![0, 1, 2, 3, 256, 257, 258, 259]),
        ] {
            reads_race_writes(geo, &lbas);
        }
    }

    fn reads_race_writes(geo: Geometry, lbas: &[u64]) {
        let dir = tempfile::tempdir().expect("tempdir");
        for persistence in [
            crate::ntl::PersistenceRequest::None,
            crate::ntl::PersistenceRequest::CacheLine,
        ] {
            let region = crate::ntl::MmapRegion::open(
                &dir.path().join(format!("{persistence:?}")),
                geo.region_len(),
                true,
                persistence,
            )
            .expect("map");
            let b = Btt::format(region, geo).expect("format");
            assert_eq!(b.keep_spares, geo.data_blocks - geo.lbas >= STRIPES as u64);
            // Block `lbas[i]` only ever holds tags `i * 16 + 1 ..= i * 16 + 15`.
            for (i, &lba) in lbas.iter().enumerate() {
                b.write_block(lba, &[i as u8 * 16 + 1; 4096]).expect("fill");
            }
            let stop = std::sync::atomic::AtomicBool::new(false);
            let reads = std::sync::atomic::AtomicU64::new(0);
            std::thread::scope(|s| {
                for w in 0..2u64 {
                    let (b, stop, reads) = (&b, &stop, &reads);
                    s.spawn(move || {
                        // Stops the readers however this writer ends (a failed
                        // write panics: the readers must not spin forever).
                        struct Stop<'a>(&'a std::sync::atomic::AtomicBool);
                        impl Drop for Stop<'_> {
                            fn drop(&mut self) {
                                self.0.store(true, Ordering::Relaxed);
                            }
                        }
                        let _stop = Stop(stop);
                        let mut rng = ChaCha8Rng::seed_from_u64(w);
                        // At least 40,000 writes each, and on until the readers
                        // have raced them enough (a loaded machine can starve
                        // the readers while the writers finish), within 20 s.
                        let started = std::time::Instant::now();
                        let mut writes = 0u32;
                        while writes < 40_000
                            || (reads.load(Ordering::Relaxed) < 2000
                                && started.elapsed().as_secs() < 20)
                        {
                            let i = rng.random_range(0..lbas.len());
                            let tag = i as u8 * 16 + rng.random_range(1..16u8);
                            b.write_block(lbas[i], &[tag; 4096]).expect("write");
                            writes += 1;
                        }
                    });
                }
                for r in 0..2u64 {
                    let (b, stop, reads) = (&b, &stop, &reads);
                    s.spawn(move || {
                        let mut rng = ChaCha8Rng::seed_from_u64(100 + r);
                        let mut buf = vec![0u8; 4096];
                        while !stop.load(Ordering::Relaxed) {
                            let i = rng.random_range(0..lbas.len());
                            let lba = lbas[i];
                            b.read_block(lba, &mut buf).expect("read");
                            let tag = buf[0];
                            assert_eq!(tag / 16, i as u8, "lba {lba} read another block's data");
                            assert!(
                                buf.iter().all(|&x| x == tag),
                                "lba {lba}: torn read ({tag} and others)"
                            );
                            reads.fetch_add(1, Ordering::Relaxed);
                        }
                    });
                }
            });
            assert!(
                reads.load(Ordering::Relaxed) > 1000,
                "the readers hardly ran"
            );
        }
    }

    #[test]
    fn bad_sizes_and_full_device_are_errors() {
        let b = Btt::format(SimRegion::new(GEO.region_len()), GEO).expect("format");
        assert!(b.write_block(8, &[0; 64]).is_err());
        assert!(b.write_block(0, &[0; 63]).is_err());
        let mut buf = [1u8; 64];
        b.read_block(3, &mut buf).expect("read");
        assert_eq!(buf, [0; 64], "unwritten blocks read as zeros");
        assert!(Btt::open(SimRegion::new(64)).is_err());
        // A flipped info byte or an out-of-range map entry refuses the image.
        let Btt { region, .. } = b;
        region.write(20, &[0xff]).expect("corrupt");
        assert!(matches!(
            Btt::open(region),
            Err(MapError::Info(InfoError::Checksum { .. }))
        ));
        let region = SimRegion::new(GEO.region_len());
        let region = Btt::format(region, GEO).expect("format").into_region();
        region
            .store_u64(INFO_LEN + 8, crate::ntl::map::encode(GEO.data_blocks))
            .expect("store");
        assert!(matches!(
            Btt::open(region),
            Err(MapError::BadEntry { lba: 1, .. })
        ));
    }
}
