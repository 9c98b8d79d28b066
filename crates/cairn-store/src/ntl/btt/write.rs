//! Writes of the [`Btt`]: whole blocks, byte ranges, batches and trims, the
//! free blocks they take and retire, and the lane-log records that make each
//! one atomic (see the module doc of `btt`).

use std::sync::atomic::Ordering;
use std::sync::{MutexGuard, PoisonError};

use super::{BATCH, Btt, Lane, STRIPES, WriteMode};
use crate::device::{DeviceError, DeviceOp};
use crate::ntl::lanelog::{self, DataCrc, Record};
use crate::ntl::layout::LANES;
use crate::ntl::map as entries;
use crate::ntl::region::Region;

impl<R: Region> Btt<R> {
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
        strict_assert!(
            old_block != Some(new),
            "block {new} taken for lba {lba}, which maps it"
        );
        let old_off = old_block.map(|b| base + b * bs);
        let end = within + data.len() as u64;
        strict_assert!(end <= bs, "bytes {within}..{end} of a {bs}-byte block");
        // Start the map entry line's read-for-ownership under the data copy
        // (see `write_batch`).
        self.region.prefetch(self.map.entry_offset(lba), 8);
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
            // `log_record` wrote back the lane's previous entry in this epoch.
            strict_assert!(lane.unflushed.is_none(), "lane with two unflushed entries");
            lane.unflushed = Some(lba);
            self.map.set_unflushed(&self.region, lba, new)?
        } else {
            let old = self.map.set(&self.region, lba, new)?;
            self.region.fence()?;
            old
        };
        strict_assert_eq!(
            old,
            old_block,
            "lba {lba}'s entry changed under its stripe lock"
        );
        strict_assert_eq!(self.map.get(lba), Some(new), "lba {lba} not flipped");
        if let Some(old) = old {
            self.freeing(lba);
            self.retire_block(&mut lane, old);
        }
        Ok(())
    }

    /// A free data block for a write in `lane`'s stripe: its spare, else one
    /// from the bitmap searched from `cursor` (a batch searches from its first
    /// stripe's cursor), or from `lane`'s own cursor when that is `None`.
    pub(super) fn take_block(&self, lane: &mut Lane, cursor: Option<&mut u64>) -> Option<u64> {
        if let Some(block) = lane.spare.take() {
            strict_assert!(self.keep_spares, "a spare kept with spares off");
            strict_assert!(
                block < self.geo.data_blocks && !self.alloc.is_free(block),
                "spare block {block} is free or out of range"
            );
            return Some(block);
        }
        let cursor = cursor.unwrap_or(&mut lane.cursor);
        let block = self.alloc.alloc(*cursor)?;
        strict_assert!(block < self.geo.data_blocks, "allocated block {block}");
        *cursor = block + 1;
        Some(block)
    }

    /// Gives back a data block nothing maps any more (the caller holds
    /// `lane`'s stripe lock, and any map entry that pointed at it has been
    /// replaced durably): kept as the stripe's spare when there is room,
    /// else freed on the bitmap.
    pub(super) fn retire_block(&self, lane: &mut Lane, block: u64) {
        strict_assert!(block < self.geo.data_blocks, "retired block {block}");
        strict_assert!(
            !self.alloc.is_free(block),
            "block {block} retired while free"
        );
        if self.keep_spares && lane.spare.is_none() {
            lane.spare = Some(block);
        } else {
            let freed = self.alloc.free(block);
            strict_assert!(freed, "block {block} freed twice");
        }
    }

    /// Whether atomic writes go through the lane log: a version 2 image opened
    /// for atomic writes on a region whose stores need fences to persist in
    /// order. (In-place mode changes mapped blocks under their records, whose
    /// data CRCs would then fail, so its map flips of unmapped blocks are fenced
    /// as in version 1; where stores persist in program order, the version 1
    /// steps cost no fence at all.) A session logs all its writes and trims or
    /// none.
    pub(super) fn logged(&self) -> bool {
        self.log.is_some() && self.mode == WriteMode::Atomic && !self.region.persists_in_order()
    }

    /// Lane log steps of an atomic write of `lba` (see `lanelog`), or with
    /// `new` = `None` of a trim: its record in
    /// the lane's next slot, and a write-back of the entry the lane stored last,
    /// both flushed for the caller's one fence. The caller holds `lane`'s lock.
    pub(super) fn log_record(
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
        strict_assert!(lba < self.geo.lbas, "record of lba {lba}");
        strict_assert!(
            new.is_none_or(|b| b < self.geo.data_blocks)
                && old.is_none_or(|b| b < self.geo.data_blocks),
            "record of blocks {old:?} -> {new:?}"
        );
        strict_assert!(
            new.is_some() || data_crc == 0,
            "a trim record with a data CRC"
        );
        strict_assert!(new != old, "a record that changes nothing");
        lane.seq += 1;
        let record = Record {
            seq: lane.seq,
            lba,
            old: old.map_or(0, entries::encode),
            new: new.unwrap_or(lanelog::TRIMMED),
            data_crc,
        };
        let slot = lanelog::slot_offset(log_base, lba % LANES, lane.seq);
        strict_assert!(
            slot >= self.geo.log_base() && slot + 64 <= self.geo.region_len(),
            "record slot at {slot} outside the lane log"
        );
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
        for (i, stripe) in self.stripes.iter().enumerate() {
            let mut lane = stripe.lock.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(lba) = lane.unflushed.take() {
                strict_assert!(
                    lba < self.geo.lbas && lba as usize % STRIPES == i,
                    "lane {i} holds lba {lba}'s entry"
                );
                self.map.flush_entries(&self.region, lba, 1)?;
                any = true;
            }
        }
        if any {
            self.region.fence()?;
        }
        Ok(())
    }

    pub(super) fn no_space(&self, lba: u64, len: u64) -> DeviceError {
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

    pub(super) fn write_batch(&self, first: u64, data: &[u8]) -> Result<(), DeviceError> {
        let bs = self.geo.block_size;
        let n = data.len() / bs as usize;
        assert!((1..=BATCH).contains(&n), "a batch of {n} blocks");
        strict_assert!(
            (data.len() as u64).is_multiple_of(bs) && first + n as u64 <= self.geo.lbas,
            "batch of {} bytes at lba {first}",
            data.len()
        );
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
        strict_assert!(
            (0..n).all(|i| !flip[i] || (0..i).all(|j| !flip[j] || target[j] != target[i])),
            "one data block taken twice in a batch"
        );
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
        self.flip_batch(first, &mut guards, &target[..n], &flip[..n])?;
        drop(guards);
        Ok(())
    }

    /// The second half of [`Btt::write_batch`], once the batch's data (and
    /// records) are durable: flips the map entries of the blocks marked in
    /// `flip` to their `target`s (and, without a lane log, writes them back
    /// and fences), then retires the blocks they replaced.
    fn flip_batch(
        &self,
        first: u64,
        guards: &mut [Option<MutexGuard<'_, Lane>>; BATCH],
        target: &[u64],
        flip: &[bool],
    ) -> Result<(), DeviceError> {
        let n = target.len();
        strict_assert_eq!(flip.len(), n, "one flip flag per target");
        let mut old = [None; BATCH];
        for i in 0..n {
            if flip[i] {
                old[i] = self
                    .map
                    .set_unflushed(&self.region, first + i as u64, target[i])?;
                if self.logged()
                    && let Some(lane) = guards[i].as_deref_mut()
                {
                    strict_assert!(lane.unflushed.is_none(), "lane with two unflushed entries");
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
        Ok(())
    }

    /// Tells lock-free readers of `lba`'s stripe that a data block it mapped is
    /// about to be freed. The caller holds the stripe lock (so a load and a
    /// store, no locked instruction), and `lba`'s new map entry is already
    /// durable and visible.
    pub(super) fn freeing(&self, lba: u64) {
        let freed = &self.stripes[(lba as usize) % STRIPES].freed;
        freed.store(
            freed.load(Ordering::Relaxed).wrapping_add(1),
            Ordering::Release,
        );
    }

    /// The stripe locks of blocks `first..first + n` (`n` ≤ [`BATCH`], so the
    /// stripes are distinct), `guards[i]` for block `first + i`, taken in
    /// ascending stripe order so concurrent batches cannot deadlock.
    pub(super) fn lock_batch(&self, first: u64, n: usize) -> [Option<MutexGuard<'_, Lane>>; BATCH] {
        const { assert!(BATCH <= STRIPES, "a batch's stripes must be distinct") };
        debug_assert!(n <= BATCH);
        // Start at the block whose stripe index is lowest.
        let start = (0..n)
            .min_by_key(|&i| (first as usize + i) % STRIPES)
            .unwrap_or(0);
        let mut guards: [Option<MutexGuard<'_, Lane>>; BATCH] = std::array::from_fn(|_| None);
        let mut last = None;
        for k in 0..n {
            let i = (start + k) % n;
            let stripe = (first as usize + i) % STRIPES;
            strict_assert!(last < Some(stripe), "stripe locks out of order");
            last = Some(stripe);
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
                    strict_assert_eq!(*slot, Some(block), "lba {lba} remapped under its lock");
                    strict_assert!(self.map.get(lba).is_none(), "lba {lba} still mapped");
                }
            }
            self.region.fence()?;
            for (i, block) in old[..n].iter().enumerate() {
                if let Some(block) = block {
                    self.freeing(at + i as u64);
                    let was_used = self.alloc.free(*block);
                    strict_assert!(was_used, "trimmed block {block} was already free");
                    freed += 1;
                }
            }
            drop(guards);
            at += n as u64;
        }
        Ok(freed)
    }
}
