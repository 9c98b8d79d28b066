//! The tier as a [`Device`]: bytes to blocks (a partial block is read whole
//! and, for a write, patched and written whole), and every request retried
//! through the backing device alone once a cache-device error made the tier
//! fall back.

use std::sync::PoisonError;

use super::{FAILING, Fault, Inner, Tier};
use crate::device::{Device, DeviceError, DeviceOp, IoBuf, check_range, whole_blocks};

impl Tier {
    /// Runs `op` on `arg`; on a cache-device fault, falls back and runs
    /// `failed` on it.
    fn run<A: ?Sized, T>(
        &self,
        write: bool,
        arg: &mut A,
        mut op: impl FnMut(&Inner, &mut A) -> Result<T, Fault>,
        mut failed: impl FnMut(&Inner, &mut A) -> Result<T, DeviceError>,
    ) -> Result<T, DeviceError> {
        let inner = &*self.inner;
        inner.tick();
        let health = inner.health.load(std::sync::atomic::Ordering::Acquire);
        if health == FAILING {
            // Wait for the fallback to finish before passing through.
            drop(
                inner
                    .fallback
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner),
            );
        }
        if health != super::HEALTHY {
            return failed(inner, arg);
        }
        match op(inner, arg) {
            Ok(v) => {
                // A write that raced a fallback may have landed only in the
                // cache after it was rescued: write it through again.
                if write && !inner.healthy() {
                    drop(
                        inner
                            .fallback
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner),
                    );
                    return failed(inner, arg);
                }
                Ok(v)
            }
            Err(f @ (Fault::Backing(_) | Fault::Full)) => Err(f.into()),
            Err(Fault::Cache(e)) => {
                inner.fall_back(&e);
                failed(inner, arg)
            }
        }
    }
}

impl Tier {
    /// Reads as [`Device::read_at`] does, and says whether the cache device
    /// served every block (none came from the backing device, none after a
    /// fallback). An empty read is not cached.
    pub fn read_cached(&self, buf: &mut [u8], offset: u64) -> Result<bool, DeviceError> {
        check_range(DeviceOp::Read, offset, buf.len() as u64, self.len())?;
        let b = self.inner.block;
        let len = buf.len() as u64;
        if len == 0 {
            return Ok(false);
        }
        let whole = whole_blocks(offset, len, b);
        if whole.start * b == offset && whole.end * b == offset + len {
            return self.run(
                false,
                buf,
                |i, buf| i.read_blocks(whole.start, buf).map(|missed| missed == 0),
                |i, buf| i.read_failed(whole.start, buf).map(|()| false),
            );
        }
        // Partial blocks: read the blocks covering the range, copy out
        // (aligned, so a direct cache or backing device takes it as it is).
        let first = offset / b;
        let end = (offset + len).div_ceil(b);
        let mut tmp = IoBuf::zeroed(((end - first) * b) as usize);
        let cached = self.run(
            false,
            &mut tmp,
            |i, tmp| i.read_blocks(first, tmp).map(|missed| missed == 0),
            |i, tmp| i.read_failed(first, tmp).map(|()| false),
        )?;
        let skip = (offset - first * b) as usize;
        buf.copy_from_slice(&tmp[skip..skip + buf.len()]);
        Ok(cached)
    }
}

impl Device for Tier {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<(), DeviceError> {
        self.read_cached(buf, offset).map(drop)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> Result<(), DeviceError> {
        check_range(DeviceOp::Write, offset, buf.len() as u64, self.len())?;
        let b = self.inner.block;
        let end = offset + buf.len() as u64;
        let mut at = offset;
        while at < end {
            let data = &buf[(at - offset) as usize..];
            if !at.is_multiple_of(b) || end - at < b {
                // A partial block: up to its end or the write's.
                let piece = (at / b + 1) * b;
                let piece = piece.min(end) - at;
                self.write_part(&data[..piece as usize], at)?;
                at += piece;
                continue;
            }
            let blocks = (end - at) / b;
            let data = &data[..(blocks * b) as usize];
            let first = at / b;
            self.run(
                true,
                &mut (),
                |i, ()| i.write_blocks(first, data),
                |i, ()| i.write_failed(first, data),
            )?;
            at += blocks * b;
        }
        Ok(())
    }

    fn flush(&self) -> Result<(), DeviceError> {
        self.run(
            false,
            &mut (),
            |i, ()| i.flush(),
            |i, ()| i.backing_flush.flush(&i.backing, i.backing_flush.epoch()),
        )
    }

    fn discard(&self, offset: u64, len: u64) -> Result<(), DeviceError> {
        check_range(DeviceOp::Discard, offset, len, self.len())?;
        let b = self.inner.block;
        let whole = whole_blocks(offset, len, b);
        if whole.is_empty() {
            return Ok(());
        }
        self.run(
            true,
            &mut (),
            |i, ()| i.discard_blocks(whole.start, whole.end - whole.start),
            |i, ()| {
                i.backing
                    .discard(whole.start * b, (whole.end - whole.start) * b)
            },
        )
    }

    fn len(&self) -> u64 {
        self.inner.g.backing_blocks * self.inner.block
    }

    fn alignment(&self) -> u64 {
        self.inner.block
    }

    fn describe(&self) -> String {
        let i = &self.inner;
        format!(
            "tier ({}, {} blocks of {} B in {} buckets) on {} over {}",
            i.mode(),
            i.capacity_blocks,
            i.block,
            i.g.buckets,
            i.cache.describe(),
            i.backing.describe()
        )
    }
}

impl Tier {
    /// Writes part of one block.
    fn write_part(&self, bytes: &[u8], at: u64) -> Result<(), DeviceError> {
        let b = self.inner.block;
        let block = at / b;
        let within = (at - block * b) as usize;
        self.run(
            true,
            &mut (),
            |i, ()| i.write_partial(block, within, bytes),
            |i, ()| i.write_failed_partial(block, bytes, at),
        )
    }
}

impl Inner {
    /// Drops the cached copies of whole blocks and discards them on the
    /// backing device (rule 3 first).
    pub(super) fn discard_blocks(&self, first: u64, count: u64) -> Result<(), Fault> {
        let mut at = first;
        while at < first + count {
            let n = (first + count - at).min(super::CHUNK_BLOCKS as u64);
            let stripes = self.lock_stripes(at..at + n);
            let mut need = 0;
            for b in at..at + n {
                let mut sh = self.shard(b);
                sh.backing_writes += 1;
                sh.pending.insert(b, u64::MAX);
                if let Some(&v) = sh.map.get(&b) {
                    if v & super::shard::EVICTING == 0 {
                        sh.policy.remove(b);
                    }
                    let mut j = self.journal.lock();
                    if let Some((_, word, seq)) =
                        self.drop_block(&mut sh, &mut j, b).map_err(Fault::Cache)?
                        && word & super::format::WORD_DIRTY == 0
                    {
                        need = need.max(seq);
                    }
                }
                need = need.max(self.hazard(&sh, b));
            }
            self.journal.write_open().map_err(Fault::Cache)?;
            if need > self.journal.durable() {
                self.journal.make_durable(need).map_err(Fault::Cache)?;
            }
            let done = self.backing.discard(at * self.block, n * self.block);
            let epoch = self.backing_flush.epoch();
            for b in at..at + n {
                let mut sh = self.shard(b);
                sh.backing_writes += 1;
                sh.pending.insert(b, epoch);
            }
            drop(stripes);
            done.map_err(Fault::Backing)?;
            at += n;
        }
        Ok(())
    }
}
