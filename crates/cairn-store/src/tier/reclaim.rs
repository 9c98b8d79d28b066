//! Reclaiming a bucket: the emptiest sealed one is read whole, its live
//! blocks are written together to the open bucket and re-recorded there
//! (`Map` records), and the bucket is free once the last one moved (reused
//! once those records are durable, rule 2). The policy is not consulted:
//! reclaiming changes where blocks live, never which blocks are cached.

use super::format::{WORD_DIRTY, WORD_VALID};
use super::metrics::Counters;
use super::shard::{EVICTING, slot_of};
use super::slots::{BLOCK_BITS, WORD_WRITTEN, word_block};
use super::{Fault, Inner};
use crate::codec::crc32c;
use crate::device::IoBuf;

/// A live block of the bucket being reclaimed.
struct Live {
    block: u64,
    slot: u32,
    crc: u32,
    stamp: u32,
}

impl Inner {
    /// Frees one bucket by moving its live blocks out: the emptiest sealed
    /// one, or (when a block in it cannot move yet: being evicted, or
    /// superseded and waiting for a backing flush) the next emptiest, a few
    /// tries. `false` when none was freed.
    pub(super) fn reclaim_one(&self) -> Result<bool, Fault> {
        let mut tried = [u32::MAX; 4];
        for attempt in 0..tried.len() {
            let Some(victim) = self.buckets.pick_victim(&tried) else {
                return Ok(false);
            };
            tried[attempt] = victim;
            // Moving some of a bucket that cannot be freed would spend the
            // reclaimer's room for nothing: check first.
            if !self.movable(victim) {
                self.buckets.unreclaim(victim);
                continue;
            }
            let result = self.reclaim(victim);
            // Still live: sealed again, to be picked another time.
            self.buckets.unreclaim(victim);
            match result {
                Ok(()) | Err(Fault::Full) => {}
                Err(e) => return Err(e),
            }
            if self.buckets.live(victim) == 0 {
                Counters::add(&self.counters.reclaimed, 1);
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Whether every live block of `bucket` can move now: each is mapped to
    /// its slot (being evicted too: the evictor follows the map), none is a
    /// superseded copy waiting for its drop or a slot allocated for a
    /// request in flight.
    fn movable(&self, bucket: u32) -> bool {
        let n = self.buckets.bucket_blocks();
        let mut valid = 0;
        for slot in bucket * n..(bucket + 1) * n {
            let word = self.table.word(slot);
            if word & WORD_VALID == 0 {
                continue;
            }
            valid += 1;
            let b = word_block(word);
            if self.shard(b).map.get(&b).and_then(|&v| slot_of(v)) != Some(slot) {
                return false;
            }
        }
        valid == self.buckets.live(bucket)
    }

    fn reclaim(&self, victim: u32) -> Result<(), Fault> {
        self.reclaim_with(victim, || {})
    }

    /// [`Inner::reclaim`], running `between` after the look at the table
    /// and before the data is read (a test's window for a client's write).
    pub(super) fn reclaim_with(&self, victim: u32, between: impl FnOnce()) -> Result<(), Fault> {
        let n = self.buckets.bucket_blocks();
        let block = self.block as usize;
        let first = victim * n;
        // The table first, then the data: a slot valid now holds its data
        // already (data is written before it is installed) and keeps it
        // (the bucket is not reopened while it is being reclaimed); a slot
        // installed after this look is left for another reclaim.
        let words: Vec<(u64, u32)> = (first..first + n)
            .map(|slot| self.table.snapshot(slot).unwrap_or((0, 0)))
            .collect();
        between();
        let mut data = IoBuf::zeroed(n as usize * block);
        self.cache_read(&mut data, first)?;
        // The live blocks are gathered at the front of `data` (each moves
        // down or stays: the k-th live block comes from slot k or later).
        let mut live = Vec::new();
        for (k, &(word, crc)) in (0..n).zip(&words) {
            let slot = first + k;
            if word & WORD_VALID == 0 {
                continue;
            }
            let from = k as usize * block;
            if crc32c(&data[from..from + block]) != crc {
                self.corrupt_in_reclaim(word_block(word), slot, word, crc)?;
                continue;
            }
            data.copy_within(from..from + block, live.len() * block);
            live.push(Live {
                block: word_block(word),
                slot,
                crc,
                stamp: self.table.stamp(slot),
            });
        }
        let mut i = 0;
        while i < live.len() {
            let (to, count) = self.allocate((live.len() - i) as u32, true)?;
            let count = count as usize;
            self.cache_write(&data[i * block..(i + count) * block], to)?;
            for (k, l) in live[i..i + count].iter().enumerate() {
                self.relocate(l, to + k as u32)?;
            }
            i += count;
        }
        if !live.is_empty() {
            self.journal.write_open().map_err(Fault::Cache)?;
        }
        Ok(())
    }

    /// Moves one block to `to` (its data written there) if it is still
    /// where it was; otherwise gives `to` back.
    fn relocate(&self, l: &Live, to: u32) -> Result<(), Fault> {
        let mut sh = self.shard(l.block);
        // The dirty and written bits may have changed since (under this
        // lock they do not): take them now.
        let word = self.table.word(l.slot);
        let mapped = sh.map.get(&l.block).copied();
        let here = mapped.and_then(slot_of) == Some(l.slot)
            && word & WORD_VALID != 0
            && word_block(word) == l.block;
        if !here {
            drop(sh);
            self.buckets.release(to, 0);
            return Ok(());
        }
        let dirty = word & WORD_DIRTY != 0;
        let mut j = self.journal.lock();
        let seq = j
            .append(
                &super::format::Record::Map {
                    slot: to,
                    block: l.block,
                    crc: l.crc,
                    dirty,
                },
                &self.table,
            )
            .map_err(Fault::Cache)?;
        self.table.set(to, l.block, dirty, l.crc, l.stamp);
        if word & WORD_WRITTEN != 0 {
            self.table.set_state(to, true, true);
            for w in &mut sh.written {
                if w.0 == l.block && w.1 == l.slot {
                    w.1 = to;
                }
            }
        }
        self.table.clear(l.slot);
        // An evicted block stays evicting: its evictor follows the map.
        let flag = mapped.unwrap_or(0) & EVICTING;
        sh.map.insert(l.block, to | flag);
        drop(j);
        self.buckets.release(l.slot, seq);
        Counters::add(&self.counters.relocated, 1);
        Counters::add(&self.counters.cache_block_writes, 1);
        Ok(())
    }

    /// A block of the bucket being reclaimed fails its CRC: a clean one is
    /// dropped; a dirty one means the cache device lost acknowledged data.
    /// Unless it is no longer there: a client's write (or a drop) since the
    /// look at the table left the slot dead, and what a dead slot holds
    /// is nobody's data (it is not moved, and nothing is counted).
    fn corrupt_in_reclaim(&self, b: u64, slot: u32, word: u64, crc: u32) -> Result<(), Fault> {
        let sh = self.shard(b);
        let mapped = sh.map.get(&b).copied();
        let still = mapped.is_some_and(|v| v & !EVICTING == slot)
            && self
                .table
                .snapshot(slot)
                .is_some_and(|(w, c)| (w ^ word) & (WORD_VALID | BLOCK_BITS) == 0 && c == crc);
        drop(sh);
        if !still {
            return Ok(());
        }
        let evicting = mapped.is_some_and(|v| v & EVICTING != 0);
        if word & WORD_DIRTY != 0 || evicting {
            return Err(Fault::Cache(crate::device::DeviceError::Corrupt {
                op: crate::DeviceOp::Read,
                offset: self.g.slot_block(slot) * self.block,
                len: self.block,
                detail: format!(
                    "dirty block {b} in slot {slot} of the cache device {} fails its CRC",
                    self.cache.describe()
                ),
            }));
        }
        self.note_error()?;
        self.drop_corrupt(b, slot)
    }
}
