//! The write path, holding the stripe locks of the chunk's blocks:
//! write-back and write-through write to fresh slots and install them dirty
//! (write-through also writes the backing device, after making durable the
//! records that supersede clean copies: rule 3); write-around, pass-through
//! and bypassed writes drop cached copies and write the backing device.

use cairn_policy::Op;

use super::metrics::Counters;
use super::shard::{EVICTING, Evicted, slot_of};
use super::{CHUNK_BLOCKS, Fault, Inner, Mode};
use crate::codec::crc32c;
use crate::device::write_aligned;

impl Inner {
    /// Writes whole blocks `data` from block `first` on.
    pub(super) fn write_blocks(&self, first: u64, data: &[u8]) -> Result<(), Fault> {
        let block = self.block as usize;
        let n = data.len() / block;
        let bypass = self.cutoff.bypass(first, first + n as u64);
        self.in_chunks(first, n, |at, range, evicted| {
            let count = (range.len() / block) as u64;
            let _stripes = self.lock_stripes(at..at + count);
            self.write_chunk(at, &data[range], bypass, evicted)
        })
    }

    /// Writes part of one block: read it, patch it, write it whole.
    pub(super) fn write_partial(&self, b: u64, within: usize, bytes: &[u8]) -> Result<(), Fault> {
        // Aligned: the cache device's read and write need no bounce buffer.
        let mut whole = crate::device::IoBuf::zeroed(self.block as usize);
        let mut evicted = Vec::new();
        let stripes = self.lock_stripes(std::iter::once(b));
        let mut result = self.read_one(b, &mut whole);
        if result.is_ok() {
            whole[within..within + bytes.len()].copy_from_slice(bytes);
            let bypass = self.cutoff.bypass(b, b + 1);
            result = self.write_chunk(b, &whole, bypass, &mut evicted);
        }
        drop(stripes);
        let written = self.write_back_evicted(&evicted);
        result.and(written)
    }

    /// One chunk, its stripes held.
    fn write_chunk(
        &self,
        first: u64,
        data: &[u8],
        bypass: bool,
        evicted: &mut Vec<Evicted>,
    ) -> Result<(), Fault> {
        let n = (data.len() / self.block as usize) as u64;
        Counters::add(&self.counters.writes, n);
        match self.mode() {
            Mode::WriteBack if !bypass => self.write_cached(first, data, false, evicted),
            Mode::WriteThrough if !bypass => self.write_cached(first, data, true, evicted),
            _ => self.write_around(first, data),
        }
    }

    /// Write-back (and, with `through`, write-through): fresh slots, installed
    /// dirty; with `through` the backing device too, after rule 3.
    fn write_cached(
        &self,
        first: u64,
        data: &[u8],
        through: bool,
        evicted: &mut Vec<Evicted>,
    ) -> Result<(), Fault> {
        let block = self.block as usize;
        let n = data.len() / block;
        let mut slots = [0u32; CHUNK_BLOCKS];
        let mut i = 0;
        while i < n {
            let (slot, count) = match self.allocate((n - i) as u32, false) {
                Ok(run) => run,
                Err(Fault::Full) => {
                    // No room now: this chunk goes around the cache.
                    for &s in &slots[..i] {
                        self.buckets.release(s, 0);
                    }
                    return self.write_around(first, data);
                }
                Err(e) => {
                    for &s in &slots[..i] {
                        self.buckets.release(s, 0);
                    }
                    return Err(e);
                }
            };
            let count = count as usize;
            if let Err(e) = self.cache_write(&data[i * block..(i + count) * block], slot) {
                for s in slot..slot + count as u32 {
                    self.buckets.release(s, 0);
                }
                for &s in &slots[..i] {
                    self.buckets.release(s, 0);
                }
                return Err(e);
            }
            for (k, s) in slots[i..i + count].iter_mut().enumerate() {
                *s = slot + k as u32;
            }
            i += count;
        }
        let mut need = 0;
        let mut refused = [false; CHUNK_BLOCKS];
        for i in 0..n {
            let b = first + i as u64;
            let bytes = &data[i * block..(i + 1) * block];
            match self.install_written(b, slots[i], crc32c(bytes), through, evicted) {
                Ok(Some(seq)) => need = need.max(seq),
                Ok(None) => refused[i] = true,
                Err(e) => {
                    for &s in &slots[i + 1..n] {
                        self.buckets.release(s, 0);
                    }
                    return Err(e);
                }
            }
        }
        Counters::add(&self.counters.cache_block_writes, n as u64);
        self.journal.write_open().map_err(Fault::Cache)?;
        // Blocks the policy would not take (an admission policy inside it)
        // go around the cache.
        for i in (0..n).filter(|&i| refused[i]) {
            let b = first + i as u64;
            self.write_around(b, &data[i * block..(i + 1) * block])?;
        }
        if !through {
            return Ok(());
        }
        if need > self.journal.durable() {
            self.journal.make_durable(need).map_err(Fault::Cache)?;
        }
        self.backing
            .write_at(data, first * self.block)
            .map_err(Fault::Backing)?;
        let epoch = self.backing_flush.epoch();
        for i in (0..n).filter(|&i| !refused[i]) {
            let b = first + i as u64;
            let mut sh = self.shard(b);
            if sh.map.get(&b).is_some_and(|&v| v & !EVICTING == slots[i]) {
                self.table.set_state(slots[i], true, true);
                sh.written.push((b, slots[i], epoch));
            }
        }
        Ok(())
    }

    /// Installs one block written to `slot`, dirty. Returns the journal
    /// sequence a write-through's backing write must wait for (0 for none),
    /// or `None` when the policy refused the block (the slot is released).
    fn install_written(
        &self,
        b: u64,
        slot: u32,
        crc: u32,
        through: bool,
        evicted: &mut Vec<Evicted>,
    ) -> Result<Option<u64>, Fault> {
        let mut sh = self.shard(b);
        let access = sh.access(b, self.block as u32, Op::Write);
        let shard = &mut *sh;
        let hit = shard.policy.lookup(&access);
        shard.record(&access, hit);
        Counters::add(
            if hit {
                &self.counters.write_hits
            } else {
                &self.counters.write_misses
            },
            1,
        );
        if !hit && !shard.policy.admit(&access, &mut shard.victims) {
            shard.victims.clear();
            drop(sh);
            self.buckets.release(slot, 0);
            return Ok(None);
        }
        let mut j = self.journal.lock();
        let (seq, was_clean) = self
            .install(shard, &mut j, (b, slot, crc), true)
            .map_err(Fault::Cache)?;
        self.evict_victims(shard, &mut j, evicted)
            .map_err(Fault::Cache)?;
        let mut need = 0;
        if through {
            if was_clean {
                need = seq;
            }
            need = need.max(self.hazard(shard, b));
        }
        Ok(Some(need))
    }

    /// Write-around, pass-through, bypass: drop cached copies, then write
    /// the backing device. A clean copy's drop is made durable first (rule
    /// 3); a dirty copy leaves the map at once but its drop is recorded only
    /// once this write is durable on the backing device (until then a crash
    /// brings the old dirty copy back, which the unflushed write allows).
    pub(super) fn write_around(&self, first: u64, data: &[u8]) -> Result<(), Fault> {
        let n = (data.len() / self.block as usize) as u64;
        let mut need = 0;
        let mut dropped = false;
        let mut superseded = [(0u64, u32::MAX); CHUNK_BLOCKS];
        for (i, b) in (first..first + n).enumerate() {
            let mut sh = self.shard(b);
            sh.backing_writes += 1;
            sh.pending.insert(b, u64::MAX);
            if let Some(&v) = sh.map.get(&b) {
                if v & EVICTING == 0 {
                    sh.policy.remove(b);
                }
                let Some(slot) = slot_of(v) else {
                    // Loading: the reader will not install it.
                    sh.map.remove(&b);
                    need = need.max(self.hazard(&sh, b));
                    continue;
                };
                if self.table.word(slot) & super::format::WORD_DIRTY != 0 {
                    sh.map.remove(&b);
                    superseded[i] = (b, slot);
                } else {
                    let mut j = self.journal.lock();
                    if let Some((_, _, seq)) =
                        self.drop_block(&mut sh, &mut j, b).map_err(Fault::Cache)?
                    {
                        dropped = true;
                        need = need.max(seq);
                    }
                }
            }
            need = need.max(self.hazard(&sh, b));
        }
        if dropped {
            self.journal.write_open().map_err(Fault::Cache)?;
        }
        if need > self.journal.durable() {
            self.journal.make_durable(need).map_err(Fault::Cache)?;
        }
        let written = write_aligned(&*self.backing, data, first * self.block);
        let epoch = self.backing_flush.epoch();
        for (i, b) in (first..first + n).enumerate() {
            let mut sh = self.shard(b);
            sh.backing_writes += 1;
            sh.pending.insert(b, epoch);
            if superseded[i].1 != u32::MAX {
                sh.dropping.push((b, superseded[i].1, epoch));
            }
        }
        written.map_err(Fault::Backing)?;
        Counters::add(&self.counters.bypassed_bytes, data.len() as u64);
        Ok(())
    }
}
