//! [`NtlDevice`]: the [`Device`] trait over [`Btt`], at any byte offset and length.
//! Whole blocks of a write go through [`Btt::write_blocks`] (batched persistence
//! points), a partial first or last block through [`Btt::write_bytes`]; a read
//! prefetches the first line of the blocks ahead while copying the current one.

use super::btt::Btt;
use super::region::Region;
use crate::device::{
    Device, DeviceError, DeviceOp, Extent, check_range, push_block_extents, whole_blocks,
};

/// How many blocks a multi-block read prefetches ahead of the one it copies (the
/// first line of each). 1 MiB sequential reads over a scattered 1 GiB volume, one
/// thread: 4 blocks ahead, whole blocks, 3.6–4.0 GB/s; 12–24 ahead, one to four
/// lines each, 7.3–7.8 GB/s (`cairn bench ntl`, docs/benchmarks.md).
const PREFETCH_BLOCKS: u64 = 16;

/// A byte-addressed device over the NTL. Every write is atomic per block and durable
/// when it returns (`flush` has nothing left to do). `discard` unmaps the whole
/// blocks of its range (they read as zeros and their NVM is free again; a partial
/// block at either end keeps its bytes, which the contract allows), and
/// `allocation` reports unmapped blocks as holes.
pub struct NtlDevice<R: Region> {
    btt: Btt<R>,
}

impl<R: Region> NtlDevice<R> {
    /// Wraps an opened translation layer.
    pub fn new(btt: Btt<R>) -> Self {
        Self { btt }
    }

    /// The translation layer underneath.
    pub fn btt(&self) -> &Btt<R> {
        &self.btt
    }

    /// Calls `f(block, offset within it, range of the caller's buffer)` for
    /// each block piece of `offset..offset+len`.
    fn for_each_block(
        &self,
        offset: u64,
        len: usize,
        mut f: impl FnMut(u64, u64, std::ops::Range<usize>) -> Result<(), DeviceError>,
    ) -> Result<(), DeviceError> {
        let bs = self.btt.geometry().block_size;
        let mut pos = 0usize;
        while pos < len {
            let at = offset + pos as u64;
            let within = at % bs;
            let n = ((bs - within) as usize).min(len - pos);
            strict_assert!(
                n > 0 && within + n as u64 <= bs,
                "piece {within}+{n} of a {bs}-byte block"
            );
            f(at / bs, within, pos..pos + n)?;
            pos += n;
        }
        Ok(())
    }
}

impl<R: Region> Device for NtlDevice<R> {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<(), DeviceError> {
        check_range(DeviceOp::Read, offset, buf.len() as u64, self.len())?;
        let bs = self.btt.geometry().block_size;
        let first = offset / bs;
        let last = (offset + buf.len() as u64).saturating_sub(1) / bs;
        // Keep PREFETCH_BLOCKS blocks in flight ahead of the copy: each is at its
        // own place in the region, so each costs a TLB miss and a cold first
        // line that only a software hint can overlap.
        for lba in first + 1..=last.min(first + PREFETCH_BLOCKS) {
            self.btt.prefetch(lba);
        }
        self.for_each_block(offset, buf.len(), |lba, within, range| {
            if lba + PREFETCH_BLOCKS < last {
                self.btt.prefetch(lba + PREFETCH_BLOCKS + 1);
            }
            self.btt.read_bytes(lba, within, &mut buf[range])
        })?;
        Ok(())
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> Result<(), DeviceError> {
        check_range(DeviceOp::Write, offset, buf.len() as u64, self.len())?;
        // A partial first and last block go through `write_bytes`; the whole
        // blocks between them are written in batches that share persistence points.
        let bs = self.btt.geometry().block_size;
        let end = offset + buf.len() as u64;
        let whole_start = offset.next_multiple_of(bs).min(end);
        let whole_end = (end - end % bs).max(whole_start);
        let head = (whole_start - offset) as usize;
        let body = (whole_end - whole_start) as usize;
        strict_assert!(
            head + body <= buf.len() && (body as u64).is_multiple_of(bs),
            "write split {head} + {body} of {} bytes",
            buf.len()
        );
        strict_assert!(
            body == 0 || whole_start.is_multiple_of(bs),
            "whole blocks from an unaligned {whole_start}"
        );
        self.for_each_block(offset, head, |lba, within, range| {
            self.btt.write_bytes(lba, within, &buf[range])
        })?;
        if body > 0 {
            self.btt
                .write_blocks(whole_start / bs, &buf[head..head + body])?;
        }
        self.for_each_block(whole_end, buf.len() - head - body, |lba, within, range| {
            self.btt.write_bytes(
                lba,
                within,
                &buf[head + body + range.start..head + body + range.end],
            )
        })?;
        Ok(())
    }

    fn flush(&self) -> Result<(), DeviceError> {
        // Every write is durable when it returns (data and lane log record);
        // this also puts the map entries the records cover on the media.
        self.btt.flush()
    }

    fn discard(&self, offset: u64, len: u64) -> Result<(), DeviceError> {
        check_range(DeviceOp::Discard, offset, len, self.len())?;
        let blocks = whole_blocks(offset, len, self.btt.geometry().block_size);
        if !blocks.is_empty() {
            self.btt
                .trim_blocks(blocks.start, blocks.end - blocks.start)?;
        }
        Ok(())
    }

    /// Whole blocks are unmapped (durable when this returns, like every NTL
    /// write: each batch's entries are fenced), partial blocks at either end
    /// get zero bytes written, atomically per block.
    fn zero_fast(&self, offset: u64, len: u64) -> Result<bool, DeviceError> {
        check_range(DeviceOp::Write, offset, len, self.len())?;
        let bs = self.btt.geometry().block_size;
        let end = offset + len;
        let whole = whole_blocks(offset, len, bs);
        let (first, last) = (whole.start, whole.end);
        let zeroes = [0u8; 512];
        let zero_bytes = |from: u64, to: u64| {
            let mut at = from;
            while at < to {
                let n = (to - at).min(zeroes.len() as u64);
                self.write_at(&zeroes[..n as usize], at)?;
                at += n;
            }
            Ok::<(), DeviceError>(())
        };
        if last > first {
            strict_assert!(
                offset <= first * bs && last * bs <= end,
                "trimmed blocks {first}..{last} outside {offset}..{end}"
            );
            zero_bytes(offset, first * bs)?;
            self.btt.trim_blocks(first, last - first)?;
            zero_bytes(last * bs, end)?;
        } else {
            zero_bytes(offset, end)?;
        }
        Ok(true)
    }

    fn allocation(
        &self,
        offset: u64,
        len: u64,
        out: &mut Vec<Extent>,
    ) -> Result<bool, DeviceError> {
        check_range(DeviceOp::Read, offset, len, self.len())?;
        let bs = self.btt.geometry().block_size;
        push_block_extents(out, offset, len, bs, |lba| !self.btt.is_mapped(lba));
        Ok(true)
    }

    fn len(&self) -> u64 {
        let g = self.btt.geometry();
        g.lbas * g.block_size
    }

    fn alignment(&self) -> u64 {
        crate::device::SECTOR
    }

    fn describe(&self) -> String {
        let g = self.btt.geometry();
        format!(
            "ntl ({} blocks of {} bytes) on {}",
            g.lbas,
            g.block_size,
            self.btt.region().describe()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ntl::{Geometry, MmapRegion, PersistenceRequest, SimRegion};
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    const GEO: Geometry = Geometry {
        block_size: 4096,
        lbas: 32,
        data_blocks: 40,
    };

    #[test]
    fn conformance_on_sim_and_mmap() {
        let dev =
            NtlDevice::new(Btt::format(SimRegion::new(GEO.region_len()), GEO).expect("format"));
        crate::device::conformance::check(&dev);
        let dir = tempfile::tempdir().expect("tempdir");
        let r = MmapRegion::open(
            &dir.path().join("pm"),
            GEO.region_len(),
            true,
            PersistenceRequest::Auto,
        )
        .expect("map");
        let dev = NtlDevice::new(Btt::format(r, GEO).expect("format"));
        crate::device::conformance::check(&dev);
        let r = MmapRegion::open(
            &dir.path().join("pm-in-place"),
            GEO.region_len(),
            true,
            PersistenceRequest::CacheLine,
        )
        .expect("map");
        let dev = NtlDevice::new(
            Btt::format_with(r, GEO, crate::ntl::WriteMode::InPlace).expect("format"),
        );
        crate::device::conformance::check(&dev);
    }

    #[test]
    fn zero_fast_unmaps_whole_blocks_and_zeroes_the_edges() {
        let dev =
            NtlDevice::new(Btt::format(SimRegion::new(GEO.region_len()), GEO).expect("format"));
        let a: Vec<u8> = (0..8 * 4096u32).map(|i| (i % 251) as u8 + 1).collect();
        dev.write_at(&a, 0).expect("write");
        // From the middle of block 1 to the middle of block 5: blocks 2..5 unmapped.
        assert!(dev.zero_fast(4096 + 100, 4 * 4096).expect("zero"));
        let mut want = a.clone();
        want[4096 + 100..5 * 4096 + 100].fill(0);
        let mut back = vec![0u8; a.len()];
        dev.read_at(&mut back, 0).expect("read");
        assert_eq!(back, want);
        let mut runs = Vec::new();
        assert!(dev.allocation(0, 8 * 4096, &mut runs).expect("allocation"));
        assert_eq!(
            runs,
            [
                Extent {
                    len: 2 * 4096,
                    hole: false
                },
                Extent {
                    len: 3 * 4096,
                    hole: true
                },
                Extent {
                    len: 3 * 4096,
                    hole: false
                },
            ]
        );
        // Within one block: bytes written, nothing unmapped.
        assert!(
            dev.zero_fast(7 * 4096 + 1, 10)
                .expect("zero inside a block")
        );
        want[7 * 4096 + 1..7 * 4096 + 11].fill(0);
        assert!(dev.zero_fast(0, 0).expect("empty"));
        assert!(dev.zero_fast(dev.len(), 1).is_err(), "past the end");
        // Durable when it returns: a crash keeps every zero.
        let NtlDevice { btt } = dev;
        let region = btt.into_region();
        region.crash(7);
        let dev = NtlDevice::new(Btt::open(region).expect("reopen"));
        dev.read_at(&mut back, 0).expect("read");
        assert_eq!(back, want);
    }

    #[test]
    fn byte_writes_across_blocks_keep_neighbours() {
        let dev =
            NtlDevice::new(Btt::format(SimRegion::new(GEO.region_len()), GEO).expect("format"));
        let a: Vec<u8> = (0..3 * 4096u32).map(|i| (i % 251) as u8).collect();
        dev.write_at(&a, 0).expect("write");
        dev.write_at(&[0xEE; 10], 4090).expect("straddling write");
        let mut back = vec![0u8; a.len()];
        dev.read_at(&mut back, 0).expect("read");
        let mut want = a.clone();
        want[4090..4100].fill(0xEE);
        assert_eq!(back, want);
    }

    #[test]
    fn crash_at_every_store_during_byte_writes_leaves_blocks_old_or_new() {
        const G: Geometry = Geometry {
            block_size: 64,
            lbas: 6,
            data_blocks: 9,
        };
        let size = (G.lbas * G.block_size) as usize;
        for seed in 0..6u64 {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let ops: Vec<(u64, Vec<u8>)> = (1..=12u8)
                .map(|t| {
                    let off = rng.random_range(0..size as u64 - 1);
                    let len = rng.random_range(1..=(size as u64 - off).min(150));
                    (off, vec![t; len as usize])
                })
                .collect();
            let fresh =
                || NtlDevice::new(Btt::format(SimRegion::new(G.region_len()), G).expect("format"));
            let probe = fresh();
            let start = probe.btt().region().events();
            for (off, d) in &ops {
                probe.write_at(d, *off).expect("write");
            }
            let total = probe.btt().region().events() - start;
            for point in 0..=total {
                let dev = fresh();
                dev.btt().region().crash_after(start + point);
                let mut done = vec![0u8; size];
                let mut next = done.clone();
                for (off, d) in &ops {
                    next.clone_from(&done);
                    next[*off as usize..*off as usize + d.len()].copy_from_slice(d);
                    if dev.write_at(d, *off).is_err() {
                        break;
                    }
                    done.clone_from(&next);
                }
                let NtlDevice { btt } = dev;
                let region = btt.into_region();
                region.crash(seed ^ (point << 8));
                let dev = NtlDevice::new(
                    Btt::open(region)
                        .unwrap_or_else(|e| panic!("seed {seed} point {point}: reopen: {e}")),
                );
                let mut got = vec![0u8; size];
                dev.read_at(&mut got, 0).expect("read");
                for b in 0..G.lbas as usize {
                    let r = b * 64..(b + 1) * 64;
                    assert!(
                        got[r.clone()] == done[r.clone()] || got[r.clone()] == next[r.clone()],
                        "seed {seed} point {point}: block {b} is neither old nor new: {:?}",
                        &got[r]
                    );
                }
            }
        }
    }
}
