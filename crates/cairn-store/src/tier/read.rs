//! The read path: plan each block of a chunk under its shard's lock (hit:
//! the slot, pinned; miss: whether to promote), then read hits from the
//! cache device and misses from the backing device, each run of neighbours
//! in one I/O, then promote the misses the policy admits.

use cairn_policy::{Access, Op};

use super::format::WORD_DIRTY;
use super::metrics::Counters;
use super::shard::{EVICTING, Evicted, LOADING, Shard, slot_of};
use super::{CHUNK_BLOCKS, Fault, Inner, Mode};
use crate::codec::crc32c;
use crate::device::{DeviceError, DeviceOp, read_aligned, write_aligned};

/// Cached blocks a backing read may span between two misses rather than
/// split in two (64 KiB of 4 KiB blocks: a disk or network device costs more
/// per operation than that takes to transfer).
const BRIDGE_BLOCKS: usize = 16;

/// What one block of a chunk will be read from.
#[derive(Clone, Copy, Debug)]
pub(super) enum Plan {
    /// The cache device: this slot (pinned), whose data has this CRC.
    Hit { slot: u32, crc: u32 },
    /// The backing device; promoted when `promote` (the policy admitted it:
    /// it is loading), unless a write to the shard raced the read (`seen` is
    /// the shard's count of writes to the backing device at the lookup).
    Miss { promote: bool, seen: u64 },
}

impl Inner {
    /// Fills `buf` (whole blocks) with the blocks from `first` on. Returns
    /// how many were read from the backing device.
    pub(super) fn read_blocks(&self, first: u64, buf: &mut [u8]) -> Result<u64, Fault> {
        let block = self.block as usize;
        let n = buf.len() / block;
        let bypass = self.cutoff.bypass(first, first + n as u64);
        let mut missed = 0;
        self.in_chunks(first, n, |at, range, evicted| {
            missed += self.read_chunk(at, &mut buf[range], bypass, evicted)?;
            Ok(())
        })?;
        Ok(missed)
    }

    /// Reads one chunk; returns how many of its blocks were misses.
    fn read_chunk(
        &self,
        first: u64,
        buf: &mut [u8],
        bypass: bool,
        evicted: &mut Vec<Evicted>,
    ) -> Result<u64, Fault> {
        let n = buf.len() / self.block as usize;
        let mut plan = [Plan::Miss {
            promote: false,
            seen: 0,
        }; CHUNK_BLOCKS];
        let caching = !bypass && self.mode() != Mode::PassThrough;
        let planned = self.plan(first, &mut plan[..n], caching, evicted);
        // Misses first, in spans that may cover cached blocks between them;
        // then the cached blocks, over whatever the spans put there (a dirty
        // one's backing copy is stale).
        let misses = planned.and_then(|()| self.read_misses(first, buf, &plan[..n]));
        let hits = self.read_hits(first, buf, &plan[..n], misses.is_ok());
        let read = misses.and(hits);
        if let Err(e) = read {
            self.abandon(first, &plan[..n], 0);
            return Err(e);
        }
        let missed = plan[..n]
            .iter()
            .filter(|p| matches!(p, Plan::Miss { .. }))
            .count() as u64;
        if caching {
            self.promote(first, buf, &plan[..n])?;
        } else {
            Counters::add(&self.counters.bypassed_bytes, missed * self.block);
        }
        Ok(missed)
    }

    /// Looks each block up; hits are pinned (the caller unpins them). On an
    /// error the plan so far stands (its pins are the caller's to undo).
    fn plan(
        &self,
        first: u64,
        plan: &mut [Plan],
        caching: bool,
        evicted: &mut Vec<Evicted>,
    ) -> Result<(), Fault> {
        let size = self.block as u32;
        let stamp = self.stamp();
        let (mut hits, mut misses) = (0, 0);
        for (i, p) in plan.iter_mut().enumerate() {
            let b = first + i as u64;
            let mut sh = self.shard(b);
            let seen = sh.backing_writes;
            let cached = sh.map.get(&b).copied();
            if !caching {
                *p = match cached.and_then(slot_of) {
                    Some(slot) => self.hit(slot, stamp),
                    None => Plan::Miss {
                        promote: false,
                        seen,
                    },
                };
                continue;
            }
            let access = sh.access(b, size, Op::Read);
            let hit = sh.policy.lookup(&access);
            sh.record(&access, hit);
            *p = match cached {
                Some(LOADING) => {
                    // Another reader is fetching it: the policy counted a
                    // hit; this read goes to the backing device.
                    misses += 1;
                    Plan::Miss {
                        promote: false,
                        seen,
                    }
                }
                Some(v) if v & EVICTING == 0 => {
                    strict_assert!(hit, "block {b} is cached but the policy misses it");
                    hits += 1;
                    self.hit(v, stamp)
                }
                Some(v) => {
                    // Evicted, dirty, being written back: the policy takes it
                    // again (a miss to it), the data is still here.
                    let slot = v & !EVICTING;
                    let shard = &mut *sh;
                    if shard.policy.admit(&access, &mut shard.victims) {
                        shard.map.insert(b, slot);
                        let mut j = self.journal.lock();
                        self.evict_victims(shard, &mut j, evicted)
                            .map_err(Fault::Cache)?;
                    }
                    misses += 1;
                    self.hit(slot, stamp)
                }
                None => {
                    strict_assert!(!hit, "block {b} is not cached but the policy hits it");
                    misses += 1;
                    // The policy decides now, in request order (as the
                    // simulator does); the data is installed once read.
                    let promote =
                        self.admit_miss(&mut sh, &access, self.options.promote_reads, evicted)?;
                    Plan::Miss { promote, seen }
                }
            };
        }
        Counters::add(&self.counters.hits, hits);
        Counters::add(&self.counters.misses, misses);
        Ok(())
    }

    /// A miss of the block `access` names, not in the shard's map: admitted
    /// (its map entry loading, its data the caller's to install) if
    /// `allowed` and the admission filter and the policy take it, else
    /// counted refused; the policy's victims evicted either way. Whether
    /// admitted.
    pub(super) fn admit_miss(
        &self,
        shard: &mut Shard,
        access: &Access,
        allowed: bool,
        evicted: &mut Vec<Evicted>,
    ) -> Result<bool, Fault> {
        let admitted =
            allowed && shard.promote(access) && shard.policy.admit(access, &mut shard.victims);
        if admitted {
            shard.map.insert(access.key, LOADING);
        } else {
            Counters::add(&self.counters.promotions_refused, 1);
            // No admit happened: what the lookup held goes now.
            shard.policy.take_held_victims(&mut shard.victims);
        }
        if !shard.victims.is_empty() {
            let mut j = self.journal.lock();
            self.evict_victims(shard, &mut j, evicted)
                .map_err(Fault::Cache)?;
        }
        Ok(admitted)
    }

    fn hit(&self, slot: u32, stamp: u32) -> Plan {
        self.buckets.pin(slot);
        self.table.touch(slot, stamp);
        Plan::Hit {
            slot,
            crc: self.table.crc(slot),
        }
    }

    /// Reads every hit's run of neighbouring slots in one I/O, checks each
    /// block's CRC, unpins. With `go` false only unpins.
    fn read_hits(&self, first: u64, buf: &mut [u8], plan: &[Plan], go: bool) -> Result<(), Fault> {
        let block = self.block as usize;
        let mut result = Ok(());
        let mut i = 0;
        while i < plan.len() {
            let Plan::Hit { slot, .. } = plan[i] else {
                i += 1;
                continue;
            };
            let mut end = i + 1;
            while end < plan.len()
                && matches!(plan[end], Plan::Hit { slot: s, .. } if s == slot + (end - i) as u32)
            {
                end += 1;
            }
            if go && result.is_ok() {
                let range = i * block..end * block;
                result = self
                    .cache_read(&mut buf[range], slot)
                    .and_then(|()| self.check_hits(first, buf, plan, i..end));
            }
            for p in &plan[i..end] {
                if let Plan::Hit { slot, .. } = *p {
                    self.buckets.unpin(slot);
                }
            }
            i = end;
        }
        result
    }

    /// Checks the CRC of hits `range`: a clean block that fails is dropped
    /// and read from the backing device instead; a dirty one is an error.
    fn check_hits(
        &self,
        first: u64,
        buf: &mut [u8],
        plan: &[Plan],
        range: std::ops::Range<usize>,
    ) -> Result<(), Fault> {
        let block = self.block as usize;
        for i in range {
            let Plan::Hit { slot, crc } = plan[i] else {
                continue;
            };
            let data = &mut buf[i * block..(i + 1) * block];
            if crc32c(data) == crc {
                continue;
            }
            let b = first + i as u64;
            self.note_error()?;
            let word = self.table.word(slot);
            let detail = format!(
                "block {b} in slot {slot} of the cache device {} fails its CRC",
                self.cache.describe()
            );
            if word & WORD_DIRTY != 0 {
                return Err(Fault::Backing(DeviceError::Corrupt {
                    op: DeviceOp::Read,
                    offset: b * self.block,
                    len: self.block,
                    detail: format!("{detail}, and it is dirty: its data is lost"),
                }));
            }
            tracing::warn!("{detail}; read from the backing device instead");
            self.drop_corrupt(b, slot)?;
            read_aligned(&*self.backing, data, b * self.block).map_err(Fault::Backing)?;
        }
        Ok(())
    }

    /// Drops a clean block whose cached copy is corrupt.
    pub(super) fn drop_corrupt(&self, b: u64, slot: u32) -> Result<(), Fault> {
        let mut sh = self.shard(b);
        if sh.map.get(&b).is_some_and(|&v| v & !EVICTING == slot) {
            if sh.map[&b] & EVICTING == 0 {
                sh.policy.remove(b);
            }
            let mut j = self.journal.lock();
            if let Some((_, _, seq)) = self.drop_block(&mut sh, &mut j, b).map_err(Fault::Cache)? {
                sh.hazards.insert(b, seq);
            }
        }
        Ok(())
    }

    /// Reads the misses from the backing device: each span of misses whose
    /// neighbours are at most [`BRIDGE_BLOCKS`] cached blocks apart in one
    /// read (a slow device pays per operation more than per block; the
    /// cached blocks in the span are read from the cache after).
    fn read_misses(&self, first: u64, buf: &mut [u8], plan: &[Plan]) -> Result<(), Fault> {
        let block = self.block as usize;
        let miss = |i: usize| matches!(plan[i], Plan::Miss { .. });
        let mut i = 0;
        while i < plan.len() {
            if !miss(i) {
                i += 1;
                continue;
            }
            let mut last = i;
            let mut at = i + 1;
            while at < plan.len() && at - last <= BRIDGE_BLOCKS + 1 {
                if miss(at) {
                    last = at;
                }
                at += 1;
            }
            read_aligned(
                &*self.backing,
                &mut buf[i * block..(last + 1) * block],
                (first + i as u64) * self.block,
            )
            .map_err(Fault::Backing)?;
            i = last + 1;
        }
        Ok(())
    }

    /// Writes the admitted misses to the cache (runs of neighbours to runs
    /// of slots) and installs them, unless a write raced them.
    pub(super) fn promote(&self, first: u64, buf: &[u8], plan: &[Plan]) -> Result<(), Fault> {
        let block = self.block as usize;
        let mut i = 0;
        let mut appended = false;
        while i < plan.len() {
            if !matches!(plan[i], Plan::Miss { promote: true, .. }) {
                i += 1;
                continue;
            }
            let mut end = i + 1;
            while end < plan.len() && matches!(plan[end], Plan::Miss { promote: true, .. }) {
                end += 1;
            }
            while i < end {
                let (slot, count) = match self.allocate((end - i) as u32, false) {
                    Ok(run) => run,
                    // No room now: the rest stays uncached.
                    Err(Fault::Full) => {
                        self.abandon(first, plan, i);
                        return self.finish_promote(appended);
                    }
                    Err(e) => {
                        self.abandon(first, plan, i);
                        return Err(e);
                    }
                };
                let count = count as usize;
                if let Err(e) = self.cache_write(&buf[i * block..(i + count) * block], slot) {
                    for s in slot..slot + count as u32 {
                        self.buckets.release(s, 0);
                    }
                    self.abandon(first, plan, i);
                    return Err(e);
                }
                for k in 0..count {
                    let data = &buf[(i + k) * block..(i + k + 1) * block];
                    let Plan::Miss { seen, .. } = plan[i + k] else {
                        continue;
                    };
                    let b = first + (i + k) as u64;
                    appended |= self.install_promoted(b, slot + k as u32, data, seen)?;
                }
                i += count;
            }
        }
        self.finish_promote(appended)
    }

    /// Gives up the promotions of `plan[from..]`: each block still loading
    /// leaves the map and the policy.
    pub(super) fn abandon(&self, first: u64, plan: &[Plan], from: usize) {
        for (i, p) in plan.iter().enumerate().skip(from) {
            if !matches!(p, Plan::Miss { promote: true, .. }) {
                continue;
            }
            let b = first + i as u64;
            let mut sh = self.shard(b);
            if sh.map.get(&b) == Some(&LOADING) {
                sh.map.remove(&b);
                sh.policy.remove(b);
            }
        }
    }

    fn finish_promote(&self, appended: bool) -> Result<(), Fault> {
        if appended {
            self.journal.write_open().map_err(Fault::Cache)?;
        }
        Ok(())
    }

    /// Installs one promoted block (its data already in `slot`); whether a
    /// record was appended.
    fn install_promoted(&self, b: u64, slot: u32, data: &[u8], seen: u64) -> Result<bool, Fault> {
        let mut sh = self.shard(b);
        let pending = sh.pending.get(&b).copied();
        let loading = sh.map.get(&b) == Some(&LOADING);
        if !loading || sh.backing_writes != seen || pending == Some(u64::MAX) {
            // A write raced the read (or replaced the loading entry).
            if loading {
                sh.map.remove(&b);
                sh.policy.remove(b);
            }
            drop(sh);
            self.buckets.release(slot, 0);
            Counters::add(&self.counters.promotions_raced, 1);
            return Ok(false);
        }
        let shard = &mut *sh;
        // Rule 4: data the backing device may still lose is recorded dirty.
        let unflushed = pending.filter(|&e| !self.backing_flush.is_durable(e));
        let crc = crc32c(data);
        let mut j = self.journal.lock();
        self.install(shard, &mut j, (b, slot, crc), unflushed.is_some())
            .map_err(Fault::Cache)?;
        if let Some(epoch) = unflushed {
            self.table.set_state(slot, true, true);
            shard.written.push((b, slot, epoch));
        }
        Counters::add(&self.counters.promotions, 1);
        Counters::add(&self.counters.cache_block_writes, 1);
        Ok(true)
    }

    /// Reads slots `slot..` into `buf` (whole blocks), through an aligned
    /// buffer when the cache device needs one and `buf` is not.
    pub(super) fn cache_read(&self, buf: &mut [u8], slot: u32) -> Result<(), Fault> {
        let at = self.g.slot_block(slot) * self.block;
        read_aligned(&*self.cache, buf, at).map_err(Fault::Cache)
    }

    /// Writes whole blocks to slots `slot..`.
    pub(super) fn cache_write(&self, data: &[u8], slot: u32) -> Result<(), Fault> {
        let at = self.g.slot_block(slot) * self.block;
        write_aligned(&*self.cache, data, at).map_err(Fault::Cache)
    }

    /// Counts a cache-device error; past the limit, the tier falls back.
    pub(super) fn note_error(&self) -> Result<(), Fault> {
        Counters::add(&self.counters.errors, 1);
        if Counters::get(&self.counters.errors) > u64::from(self.options.error_limit) {
            return Err(Fault::Cache(DeviceError::Io {
                op: DeviceOp::Read,
                offset: 0,
                len: 0,
                device: self.cache.describe(),
                source: std::io::Error::other(format!(
                    "more than {} errors on the cache device",
                    self.options.error_limit
                )),
            }));
        }
        Ok(())
    }

    /// Reads one whole block for a read-modify-write, touching no policy:
    /// the cached copy if there is one, else the backing device's.
    pub(super) fn read_one(&self, b: u64, buf: &mut [u8]) -> Result<(), Fault> {
        let hit = {
            let sh = self.shard(b);
            sh.map.get(&b).and_then(|&v| slot_of(v)).map(|slot| {
                self.buckets.pin(slot);
                (slot, self.table.crc(slot), self.table.word(slot))
            })
        };
        let Some((slot, crc, word)) = hit else {
            return read_aligned(&*self.backing, buf, b * self.block).map_err(Fault::Backing);
        };
        let read = self.cache_read(buf, slot);
        self.buckets.unpin(slot);
        read?;
        if crc32c(buf) != crc {
            self.note_error()?;
            if word & WORD_DIRTY != 0 {
                return Err(Fault::Backing(DeviceError::Corrupt {
                    op: DeviceOp::Read,
                    offset: b * self.block,
                    len: self.block,
                    detail: format!(
                        "dirty block {b} in slot {slot} fails its CRC: its data is lost"
                    ),
                }));
            }
            self.drop_corrupt(b, slot)?;
            return read_aligned(&*self.backing, buf, b * self.block).map_err(Fault::Backing);
        }
        Ok(())
    }
}
