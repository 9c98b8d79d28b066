//! A victim cache's two moves, for a backing device whose data never
//! changes (the file gateway's spill: every object version has its own span
//! of a virtual device): [`Tier::fill`] puts blocks the level above dropped
//! into the cache as clean copies, under the policy as a promoted read miss
//! would be, without reading the backing device; [`Tier::evict`] drops
//! clean copies the level above has taken, without the backing device or a
//! journal flush. A crash may bring an evicted copy back (its `Drop` record
//! was not yet durable), which is then still right, since the backing data
//! it copies never changed.

use cairn_policy::Op;

use super::metrics::Counters;
use super::read::Plan;
use super::shard::{EVICTING, Evicted, slot_of};
use super::{CHUNK_BLOCKS, Fault, Inner, Tier};
use crate::device::{Device, DeviceError, DeviceOp, check_range};

impl Tier {
    /// Puts `data` (whole blocks at a block-aligned `offset`) into the cache
    /// as clean copies of the backing device's blocks there, each the
    /// policy admits (it may evict others); blocks already cached, or being
    /// read, are left as they are. The backing device is not read or
    /// written, so `data` must be what it holds. Nothing in pass-through
    /// mode or after a fallback.
    pub fn fill(&self, offset: u64, data: &[u8]) -> Result<(), DeviceError> {
        let b = self.inner.block;
        let len = data.len() as u64;
        check_range(DeviceOp::Write, offset, len, self.len())?;
        if !offset.is_multiple_of(b) || !len.is_multiple_of(b) {
            return Err(DeviceError::Io {
                op: DeviceOp::Write,
                offset,
                len,
                device: self.describe(),
                source: std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    format!("a fill takes whole {b}-byte blocks"),
                ),
            });
        }
        let inner = &*self.inner;
        if len == 0 || !inner.healthy() || inner.mode() == super::Mode::PassThrough {
            return Ok(());
        }
        inner
            .in_chunks(offset / b, (len / b) as usize, |at, range, evicted| {
                inner.fill_chunk(at, &data[range], evicted)
            })
            .map_err(|f| inner.handle(f))
    }

    /// Drops the clean cached copies of the whole blocks in the `len` bytes
    /// at `offset` (a dirty copy stays: it is the only one), touching neither
    /// the backing device nor the journal's durability. Only for a backing
    /// device whose data never changes (see the module docs).
    pub fn evict(&self, offset: u64, len: u64) -> Result<(), DeviceError> {
        check_range(DeviceOp::Discard, offset, len, self.len())?;
        let b = self.inner.block;
        let whole = crate::device::whole_blocks(offset, len, b);
        let inner = &*self.inner;
        if whole.is_empty() || !inner.healthy() {
            return Ok(());
        }
        inner
            .evict_blocks(whole.start, whole.end)
            .map_err(|f| inner.handle(f))
    }
}

impl Inner {
    /// One chunk of a fill: admit each block not held, then write and
    /// install the admitted ones as a read's promotion does.
    fn fill_chunk(&self, first: u64, data: &[u8], evicted: &mut Vec<Evicted>) -> Result<(), Fault> {
        let n = data.len() / self.block as usize;
        let size = self.block as u32;
        let mut plan = [Plan::Miss {
            promote: false,
            seen: 0,
        }; CHUNK_BLOCKS];
        for (i, p) in plan[..n].iter_mut().enumerate() {
            let b = first + i as u64;
            let mut sh = self.shard(b);
            if sh.map.contains_key(&b) {
                // Cached, loading or being written back: already here.
                continue;
            }
            let seen = sh.backing_writes;
            let access = sh.access(b, size, Op::Read);
            let hit = sh.policy.lookup(&access);
            strict_assert!(!hit, "block {b} is not cached but the policy hits it");
            match self.admit_miss(&mut sh, &access, true, evicted) {
                Ok(promote) => *p = Plan::Miss { promote, seen },
                Err(e) => {
                    // This block's admission stands if it was made: its
                    // entry is loading, and the abandon below undoes it.
                    *p = Plan::Miss {
                        promote: sh.map.get(&b) == Some(&super::shard::LOADING),
                        seen,
                    };
                    drop(sh);
                    self.abandon(first, &plan[..n], 0);
                    return Err(e);
                }
            }
        }
        self.promote(first, data, &plan[..n])
    }

    /// Drops the clean copies of blocks `first..end`.
    fn evict_blocks(&self, first: u64, end: u64) -> Result<(), Fault> {
        let mut taken = 0;
        for b in first..end {
            let mut sh = self.shard(b);
            let Some(&v) = sh.map.get(&b) else {
                continue;
            };
            let Some(slot) = slot_of(v) else {
                // Being read: its install is the reader's.
                continue;
            };
            if v & EVICTING != 0 || self.table.word(slot) & super::format::WORD_DIRTY != 0 {
                continue;
            }
            sh.policy.remove(b);
            let mut j = self.journal.lock();
            self.drop_block(&mut sh, &mut j, b).map_err(Fault::Cache)?;
            taken += 1;
        }
        Counters::add(&self.counters.taken, taken);
        Ok(())
    }
}
