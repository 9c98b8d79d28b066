//! Writing dirty blocks back: the cleaner's batches (in backing-address
//! order), the policy's dirty victims, and the fallback after cache-device
//! errors. A block written back turns clean (or, evicted, is dropped) only
//! after the backing device was flushed (rule 5).

use std::sync::PoisonError;
use std::sync::atomic::Ordering;

use super::format::{WORD_DIRTY, WORD_VALID};
use super::metrics::{Counters, Metrics};
use super::shard::{EVICTING, Evicted, LOADING, slot_of};
use super::slots::{WORD_WRITTEN, word_block};
use super::{CHUNK_BLOCKS, FAILED, FAILING, Fault, HEALTHY, Inner};
use crate::codec::crc32c;
use crate::device::{DeviceError, DeviceOp, IoBuf, read_aligned, write_aligned};

impl Inner {
    /// Writes the blocks of `list` (block, slot) that still need it back to
    /// the backing device, in block order, neighbours in one write; marks
    /// them written (clean at the next backing flush). Returns how many were
    /// written. Each run of neighbouring blocks holds its own stripes only
    /// while it is read and written, so a client write waits for at most one
    /// backing write (not the whole batch's: 137 ms at the worst in `cairn
    /// bench tier --part clean` when a batch held them all).
    pub(super) fn write_back(&self, list: &mut Vec<(u64, u32)>) -> Result<usize, Fault> {
        if list.is_empty() {
            return Ok(0);
        }
        // Rule 3: the records making these blocks dirty supersede any clean
        // copy; durable before the backing device sees the new data.
        self.journal.make_all_durable().map_err(Fault::Cache)?;
        list.sort_unstable();
        list.dedup_by_key(|e| e.0);
        let mut count = 0;
        let mut run = Vec::with_capacity(list.len());
        let mut i = 0;
        while i < list.len() {
            let mut end = i + 1;
            while end < list.len() && list[end].0 == list[end - 1].0 + 1 {
                end += 1;
            }
            run.clear();
            run.extend_from_slice(&list[i..end]);
            count += self.write_back_run(&mut run)?;
            i = end;
        }
        Counters::add(&self.counters.cleaned, count as u64);
        Ok(count)
    }

    /// [`Inner::write_back`] of one run of neighbouring blocks, its stripes
    /// held throughout.
    fn write_back_run(&self, list: &mut Vec<(u64, u32)>) -> Result<usize, Fault> {
        let stripes = self.lock_stripes(list.iter().map(|&(b, _)| b));
        // Each kept slot is pinned (its bucket is not reused) and its CRC
        // noted under the shard lock: a reclaim may move the block and
        // forget the slot before it is read, and the pinned data is then
        // still the block's, but the table no longer has its CRC.
        let mut crcs = Vec::with_capacity(list.len());
        list.retain(|&(b, slot)| {
            let sh = self.shard(b);
            let current = sh.map.get(&b).is_some_and(|&v| v & !EVICTING == slot);
            let word = self.table.word(slot);
            let keep = current && Self::needs_writeback(word) && word_block(word) == b;
            if keep {
                self.buckets.pin(slot);
                crcs.push(self.table.crc(slot));
            }
            keep
        });
        let block = self.block as usize;
        let mut data = IoBuf::zeroed(list.len() * block);
        let read = self.read_slots(list, &crcs, &mut data);
        let written = read.and_then(|()| self.write_runs(list, &data));
        for &(_, slot) in list.iter() {
            self.buckets.unpin(slot);
        }
        written?;
        let epoch = self.backing_flush.epoch();
        let mut count = 0;
        for &(b, slot) in list.iter() {
            let mut sh = self.shard(b);
            let word = self.table.word(slot);
            if sh.map.get(&b).is_some_and(|&v| v & !EVICTING == slot)
                && Self::needs_writeback(word)
                && word_block(word) == b
            {
                self.table.set_state(slot, true, true);
                sh.written.push((b, slot, epoch));
                count += 1;
            }
        }
        drop(stripes);
        Ok(count)
    }

    /// Reads the slots of `list` into `data`, neighbouring slots in one
    /// read, and checks each against its CRC in `crcs`.
    fn read_slots(&self, list: &[(u64, u32)], crcs: &[u32], data: &mut [u8]) -> Result<(), Fault> {
        let block = self.block as usize;
        let mut i = 0;
        while i < list.len() {
            let mut end = i + 1;
            while end < list.len() && list[end].1 == list[end - 1].1 + 1 {
                end += 1;
            }
            self.cache_read(&mut data[i * block..end * block], list[i].1)?;
            i = end;
        }
        for (i, (&(b, slot), &crc)) in list.iter().zip(crcs).enumerate() {
            if crc32c(&data[i * block..(i + 1) * block]) != crc {
                Counters::add(&self.counters.errors, 1);
                return Err(Fault::Cache(DeviceError::Corrupt {
                    op: DeviceOp::Read,
                    offset: self.g.slot_block(slot) * self.block,
                    len: self.block,
                    detail: format!(
                        "dirty block {b} in slot {slot} of the cache device {} fails its CRC",
                        self.cache.describe()
                    ),
                }));
            }
        }
        Ok(())
    }

    /// Writes `data` (one block per entry of `list`, sorted by block) to the
    /// backing device, each run of neighbouring blocks in one write.
    fn write_runs(&self, list: &[(u64, u32)], data: &[u8]) -> Result<(), Fault> {
        let block = self.block as usize;
        let mut i = 0;
        while i < list.len() {
            let mut end = i + 1;
            while end < list.len() && list[end].0 == list[end - 1].0 + 1 {
                end += 1;
            }
            write_aligned(
                &*self.backing,
                &data[i * block..end * block],
                list[i].0 * self.block,
            )
            .map_err(Fault::Backing)?;
            i = end;
        }
        Ok(())
    }

    /// Runs `each` over the chunks of a request of `blocks` blocks from
    /// `first` on (the block, the chunk's byte range in the request's
    /// buffer, the victims it evicts). Dirty victims hold their slots until
    /// written back: a chunk's go before the next chunk needs room, and
    /// they are written back even when a chunk failed.
    pub(super) fn in_chunks(
        &self,
        first: u64,
        blocks: usize,
        mut each: impl FnMut(u64, std::ops::Range<usize>, &mut Vec<Evicted>) -> Result<(), Fault>,
    ) -> Result<(), Fault> {
        let block = self.block as usize;
        let mut evicted = Vec::new();
        let mut result = Ok(());
        for start in (0..blocks).step_by(CHUNK_BLOCKS) {
            let end = (start + CHUNK_BLOCKS).min(blocks);
            result = each(
                first + start as u64,
                start * block..end * block,
                &mut evicted,
            );
            if result.is_err() {
                break;
            }
            result = self.write_back_evicted(&evicted);
            evicted.clear();
            if result.is_err() {
                break;
            }
        }
        let written = self.write_back_evicted(&evicted);
        result.and(written)
    }

    /// The policy's dirty victims: written back, the backing device flushed,
    /// then dropped (or marked clean, if the policy took one back meanwhile).
    pub(super) fn write_back_evicted(&self, evicted: &[(u64, u32)]) -> Result<(), Fault> {
        if evicted.is_empty() {
            return Ok(());
        }
        // A few rounds: a reclaim may move one between the look at the map
        // and the write-back, which then skips it (it moved); the next
        // round finds it where it went. One the policy took back is the
        // cleaner's; one still evicting after the rounds is too.
        for _ in 0..4 {
            let mut list: Vec<(u64, u32)> = evicted
                .iter()
                .filter_map(|&(b, _)| {
                    let v = *self.shard(b).map.get(&b)?;
                    (v != LOADING && v & EVICTING != 0).then_some((b, v & !EVICTING))
                })
                .collect();
            if list.is_empty() {
                break;
            }
            self.write_back(&mut list)?;
            self.backing_flush
                .flush(&self.backing, self.backing_flush.epoch())
                .map_err(Fault::Backing)?;
            self.settle_written()?;
        }
        Ok(())
    }

    /// After a backing flush: blocks written back up to a durable epoch turn
    /// clean (evicted ones are dropped); pending writes and hazards that are
    /// durable are forgotten.
    pub(super) fn settle_written(&self) -> Result<(), Fault> {
        let mut appended = false;
        for shard in &self.shards {
            let mut sh = shard.0.lock().unwrap_or_else(PoisonError::into_inner);
            let durable_seq = self.journal.durable();
            sh.hazards.retain(|_, seq| *seq > durable_seq);
            sh.pending.retain(|_, e| !self.backing_flush.is_durable(*e));
            // A burst (a fill evicting a block per read) leaves these
            // tables large; give the memory back once it has passed.
            shrink(&mut sh.hazards);
            shrink(&mut sh.pending);
            if sh.written.is_empty() && sh.dropping.is_empty() {
                continue;
            }
            if !sh.dropping.is_empty() {
                let mut j = self.journal.lock();
                let mut dropping = std::mem::take(&mut sh.dropping);
                let mut result = Ok(());
                dropping.retain(|&(b, slot, epoch)| {
                    if result.is_err() || !self.backing_flush.is_durable(epoch) {
                        return true;
                    }
                    appended = true;
                    result = self.drop_slot(&mut j, b, slot);
                    result.is_err()
                });
                drop(j);
                dropping.append(&mut sh.dropping);
                sh.dropping = dropping;
                result.map_err(Fault::Cache)?;
            }
            let mut written = std::mem::take(&mut sh.written);
            let mut j = self.journal.lock();
            let mut result = Ok(());
            written.retain(|&(b, slot, epoch)| {
                if result.is_err() || !self.backing_flush.is_durable(epoch) {
                    return true;
                }
                let Some(&v) = sh.map.get(&b) else {
                    return false;
                };
                let word = self.table.word(slot);
                let still = v & !EVICTING == slot
                    && word & (WORD_VALID | WORD_DIRTY | WORD_WRITTEN)
                        == WORD_VALID | WORD_DIRTY | WORD_WRITTEN
                    && word_block(word) == b;
                if !still {
                    return false;
                }
                appended = true;
                result = if v & EVICTING != 0 {
                    self.drop_block(&mut sh, &mut j, b).map(|_| ())
                } else {
                    self.mark_clean(&mut j, b, slot)
                };
                result.is_err()
            });
            drop(j);
            let mut newer = std::mem::replace(&mut sh.written, written);
            sh.written.append(&mut newer);
            result.map_err(Fault::Cache)?;
        }
        if appended {
            self.journal.write_open().map_err(Fault::Cache)?;
        }
        Ok(())
    }

    /// Dirty blocks not yet written back, from block `cursor` on, the
    /// lowest `max` of them, sorted.
    fn dirty_from(&self, cursor: u64, max: usize) -> Vec<(u64, u32)> {
        let mut found = Vec::new();
        for slot in 0..self.table.len() as u32 {
            let word = self.table.word(slot);
            if Self::needs_writeback(word) && word_block(word) >= cursor {
                found.push((word_block(word), slot));
            }
        }
        if found.len() > max {
            found.select_nth_unstable(max);
            found.truncate(max);
        }
        found.sort_unstable();
        found
    }

    /// One cleaner batch of at most `max` blocks, from `cursor` on (and
    /// round to the start once past the last): written back, flushed,
    /// settled. Returns how many blocks it wrote back.
    pub(super) fn clean_batch(&self, cursor: &mut u64, max: usize) -> Result<usize, Fault> {
        let mut list = self.dirty_from(*cursor, max);
        if list.is_empty() && *cursor > 0 {
            *cursor = 0;
            list = self.dirty_from(0, max);
        }
        let Some(&(last, _)) = list.last() else {
            return Ok(0);
        };
        *cursor = last + 1;
        let count = self.write_back(&mut list)?;
        self.backing_flush
            .flush(&self.backing, self.backing_flush.epoch())
            .map_err(Fault::Backing)?;
        self.settle_written()?;
        Ok(count)
    }

    /// Writes every dirty block back and flushes the backing device.
    pub(super) fn clean_all(&self) -> Result<(), Fault> {
        self.signal.drain.store(true, Ordering::Release);
        let mut cursor = 0;
        let result = loop {
            match self.clean_batch(&mut cursor, CHUNK_BLOCKS) {
                Ok(0) => break Ok(()),
                Ok(_) => {}
                Err(e) => break Err(e),
            }
        };
        self.signal.drain.store(false, Ordering::Release);
        result?;
        self.backing_flush
            .flush(&self.backing, self.backing_flush.epoch())
            .map_err(Fault::Backing)?;
        self.settle_written()
    }

    /// A fault from inside the tier as the client's error: a cache-device
    /// fault first makes the tier fall back to pass-through.
    pub(super) fn handle(&self, f: Fault) -> DeviceError {
        match f {
            Fault::Backing(_) | Fault::Full => f.into(),
            Fault::Cache(e) => {
                self.fall_back(&e);
                e
            }
        }
    }

    /// The cache device failed: write back every dirty block it still
    /// gives, flush, record the cache as stale (on the device if it still
    /// takes it, and in the marker file), and pass everything through.
    /// Dirty blocks that could not be read are remembered as lost: reading
    /// one fails until it is rewritten.
    pub(super) fn fall_back(&self, cause: &DeviceError) {
        let _one = self.fallback.lock().unwrap_or_else(PoisonError::into_inner);
        if self.health.load(Ordering::Acquire) != HEALTHY {
            return;
        }
        self.health.store(FAILING, Ordering::Release);
        Counters::add(&self.counters.errors, 1);
        *self.failure.lock().unwrap_or_else(PoisonError::into_inner) = Some(cause.to_string());
        tracing::error!(
            "tier over {}: the cache device {} failed ({cause}); writing dirty blocks back and \
             passing every request through to the backing device from now on",
            self.backing.describe(),
            self.cache.describe()
        );
        let lost = self.rescue();
        if let Err(e) = self
            .backing_flush
            .flush(&self.backing, self.backing_flush.epoch())
        {
            tracing::error!("tier: flushing the backing device after the fallback: {e}");
        }
        if let Err(e) = self.journal.close(&self.table, true) {
            tracing::warn!(
                "tier: could not mark the cache device detached ({e}); the marker file says so"
            );
        }
        if let Some(marker) = &self.marker {
            let text = format!(
                "cairn tier {:016x} failed over to pass-through: {cause}; {} dirty blocks lost\n",
                self.cache_id,
                lost.len()
            );
            if let Err(e) = std::fs::write(marker, text) {
                tracing::error!("tier: writing {}: {e}", marker.display());
            }
        }
        if !lost.is_empty() {
            tracing::error!(
                "tier: {} dirty blocks could not be read from the failed cache device; reading them \
                 fails until they are written again",
                lost.len()
            );
        }
        self.lost
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend(lost);
        self.clear_cached();
        self.health.store(FAILED, Ordering::Release);
    }

    /// Writes back every dirty block it can, block by block; returns the
    /// blocks it could not.
    fn rescue(&self) -> Vec<u64> {
        let mut lost = Vec::new();
        let block = self.block as usize;
        let mut data = IoBuf::zeroed(block);
        // The maps' dirty blocks (a superseded dirty copy still in the table
        // must not be written back over newer data).
        let mut dirty = Vec::new();
        for shard in &self.shards {
            let sh = shard.0.lock().unwrap_or_else(PoisonError::into_inner);
            for (&b, &v) in &sh.map {
                if let Some(slot) = slot_of(v)
                    && self.table.word(slot) & WORD_DIRTY != 0
                {
                    dirty.push((b, slot));
                }
            }
        }
        for (b, slot) in dirty {
            let _stripe = self.lock_stripes(std::iter::once(b));
            // The CRC noted and the slot pinned under the shard lock, as the
            // cleaner does: a reclaim may still move the block meanwhile
            // (and clear the slot's CRC), not reuse the slot.
            let crc = {
                let sh = self.shard(b);
                let word = self.table.word(slot);
                let current = sh.map.get(&b).is_some_and(|&v| v & !EVICTING == slot);
                if !current || word & (WORD_VALID | WORD_DIRTY) != WORD_VALID | WORD_DIRTY {
                    continue;
                }
                self.buckets.pin(slot);
                self.table.crc(slot)
            };
            let read = self.cache_read(&mut data, slot);
            self.buckets.unpin(slot);
            let ok = read.is_ok()
                && crc32c(&data) == crc
                && write_aligned(&*self.backing, &data, b * self.block).is_ok();
            if ok {
                Counters::add(&self.counters.cleaned, 1);
            } else {
                lost.push(b);
            }
        }
        lost
    }

    /// Forgets every cached block (after a fallback or a detach): the maps
    /// and the policies are emptied; the device is not written.
    pub(super) fn clear_cached(&self) {
        for shard in &self.shards {
            let mut sh = shard.0.lock().unwrap_or_else(PoisonError::into_inner);
            let blocks: Vec<u64> = sh.map.keys().copied().collect();
            for b in blocks {
                if sh.map.remove(&b).is_some_and(|v| v & EVICTING == 0) {
                    sh.policy.remove(b);
                }
            }
            sh.written.clear();
            sh.dropping.clear();
            sh.hazards.clear();
            sh.pending.clear();
        }
        self.counters.cached.store(0, Ordering::Relaxed);
        self.counters.dirty.store(0, Ordering::Relaxed);
    }

    /// After a fallback: reads from the backing device, except lost blocks.
    pub(super) fn read_failed(&self, first: u64, buf: &mut [u8]) -> Result<(), DeviceError> {
        {
            let lost = self.lost.lock().unwrap_or_else(PoisonError::into_inner);
            let n = buf.len() as u64 / self.block;
            if let Some(b) = (first..first + n).find(|b| lost.contains(b)) {
                return Err(DeviceError::Corrupt {
                    op: DeviceOp::Read,
                    offset: b * self.block,
                    len: self.block,
                    detail: format!(
                        "block {b} was dirty in the cache device {}, which failed before it was \
                         written back: its data is lost (write it again to use it)",
                        self.cache.describe()
                    ),
                });
            }
        }
        Counters::add(&self.counters.bypassed_bytes, buf.len() as u64);
        read_aligned(&*self.backing, buf, first * self.block)
    }

    /// After a fallback: writes go to the backing device; a lost block
    /// written whole is lost no more.
    pub(super) fn write_failed(&self, first: u64, data: &[u8]) -> Result<(), DeviceError> {
        write_aligned(&*self.backing, data, first * self.block)?;
        let n = data.len() as u64 / self.block;
        let mut lost = self.lost.lock().unwrap_or_else(PoisonError::into_inner);
        if !lost.is_empty() {
            for b in first..first + n {
                lost.remove(&b);
            }
        }
        Counters::add(&self.counters.bypassed_bytes, data.len() as u64);
        Ok(())
    }

    /// After a fallback: a partial write of a block; a lost block stays lost
    /// (the rest of it is gone).
    pub(super) fn write_failed_partial(
        &self,
        b: u64,
        bytes: &[u8],
        at: u64,
    ) -> Result<(), DeviceError> {
        let _ = b;
        write_aligned(&*self.backing, bytes, at)?;
        Counters::add(&self.counters.bypassed_bytes, bytes.len() as u64);
        Ok(())
    }

    /// A snapshot of the counters.
    pub(super) fn metrics(&self) -> Metrics {
        let c = &self.counters;
        let (journal_writes, journal_records, checkpoints) = self.journal.counts();
        let mut maps = 0u64;
        for shard in &self.shards {
            let sh = shard.0.lock().unwrap_or_else(PoisonError::into_inner);
            maps += (sh.map.allocation_size()
                + sh.hazards.allocation_size()
                + sh.pending.allocation_size()
                + (sh.written.capacity() + sh.dropping.capacity()) * 24) as u64;
        }
        Metrics {
            hits: Counters::get(&c.hits),
            misses: Counters::get(&c.misses),
            writes: Counters::get(&c.writes),
            write_hits: Counters::get(&c.write_hits),
            write_misses: Counters::get(&c.write_misses),
            promotions: Counters::get(&c.promotions),
            promotions_refused: Counters::get(&c.promotions_refused),
            promotions_raced: Counters::get(&c.promotions_raced),
            taken_blocks: Counters::get(&c.taken),
            bypassed_bytes: Counters::get(&c.bypassed_bytes),
            dirty_blocks: Counters::get(&c.dirty),
            cached_blocks: Counters::get(&c.cached),
            cleaned_blocks: Counters::get(&c.cleaned),
            dirty_evictions: Counters::get(&c.dirty_evictions),
            clean_evictions: Counters::get(&c.clean_evictions),
            relocated_blocks: Counters::get(&c.relocated),
            reclaimed_buckets: Counters::get(&c.reclaimed),
            cache_block_writes: Counters::get(&c.cache_block_writes),
            journal_writes,
            journal_records,
            checkpoints,
            errors: Counters::get(&c.errors),
            failed: matches!(self.health.load(Ordering::Acquire), FAILING | FAILED),
            dram_bytes: self.table.dram_bytes() + maps,
        }
    }

    /// Checks every invariant: the buckets against the table, each shard's
    /// map against its policy, and the maps against the table.
    pub(super) fn verify(&self) -> Result<(), String> {
        self.buckets
            .verify(&self.table, true)
            .map_err(|e| format!("{e}; buckets: {}", self.buckets.debug()))?;
        let mut mapped = 0usize;
        for (i, shard) in self.shards.iter().enumerate() {
            let sh = shard.0.lock().unwrap_or_else(PoisonError::into_inner);
            sh.verify().map_err(|e| format!("shard {i}: {e}"))?;
            for (&b, &v) in &sh.map {
                if v == LOADING || v & EVICTING != 0 {
                    return Err(format!(
                        "shard {i}: block {b} is {} with no request in flight",
                        if v == LOADING {
                            "loading"
                        } else {
                            "being evicted"
                        }
                    ));
                }
                let slot = v & !EVICTING;
                let word = self.table.word(slot);
                if word & WORD_VALID == 0 || word_block(word) != b {
                    return Err(format!(
                        "shard {i}: block {b} maps to slot {slot}, whose table word is {word:#x}"
                    ));
                }
                mapped += 1;
            }
            mapped += sh
                .dropping
                .iter()
                .filter(|&&(b, slot, _)| {
                    let word = self.table.word(slot);
                    word & WORD_VALID != 0 && word_block(word) == b
                })
                .count();
        }
        let mut seen = hashbrown::HashSet::new();
        let mut valid = 0usize;
        let mut cached = IoBuf::zeroed(self.block as usize);
        let mut backing = IoBuf::zeroed(self.block as usize);
        for s in 0..self.table.len() as u32 {
            let word = self.table.word(s);
            if word & WORD_VALID == 0 {
                continue;
            }
            valid += 1;
            if word & WORD_DIRTY == 0 {
                // Rule 5's consequence: a clean copy is what the backing
                // device holds.
                let b = word_block(word);
                let read = self
                    .cache_read(&mut cached, s)
                    .map_err(|f| format!("slot {s}: {:?}", DeviceError::from(f)))
                    .and_then(|()| {
                        read_aligned(&*self.backing, &mut backing, b * self.block)
                            .map_err(|e| format!("backing block {b}: {e}"))
                    });
                read?;
                if cached[..] != backing[..] {
                    return Err(format!(
                        "block {b} is clean in slot {s} but the backing device holds other data"
                    ));
                }
            }
            if !seen.insert(word_block(word)) {
                return Err(format!(
                    "block {} is held by two slots (the second is {s})",
                    word_block(word)
                ));
            }
        }
        if valid != mapped {
            return Err(format!(
                "the table holds {valid} valid slots, the maps {mapped} blocks"
            ));
        }
        Ok(())
    }
}

/// Gives back most of a table's memory when it is mostly empty.
fn shrink<V>(table: &mut hashbrown::HashMap<u64, V>) {
    if table.capacity() > 4 * table.len() + 1024 {
        table.shrink_to(2 * table.len());
    }
}
