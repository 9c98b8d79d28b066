//! Atomic block writes over a [`Region`] (the Linux BTT idea, reduced).
//!
//! A write of logical block `lba` goes: take a free data block, copy the new data
//! into it, flush + fence, store the new 8-byte map entry, flush + fence, then return
//! the old data block to the allocator. A crash at any store leaves the map entry
//! wholly old or wholly new (8-byte stores never tear), and the new data is durable
//! before the entry can point at it, so the block reads wholly old or wholly new.
//!
//! Deliberate difference from BTT: no per-lane flog. BTT keeps its free list in the
//! flog, so it must log {lba, old, new, seq}; here free space is rebuilt at open from
//! the map alone, so a block not referenced by the map is free and there is nothing
//! to replay. Writers and readers of one block serialise on a striped lock (no
//! global lock); the allocator is lock-free.
//!
//! Layout inside the region: `[info: 64 bytes][map: lbas × 8 bytes]`, padded to the
//! block size, then `[data: data_blocks × block_size]`.

use std::sync::{Mutex, MutexGuard, PoisonError};

use super::alloc::BlockAllocator;
use super::info::{self, INFO_LEN, InfoError};
use super::map::{BlockMap, MapError};
use super::region::Region;
use crate::device::{DeviceError, DeviceOp};

const STRIPES: usize = 256;

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
    fn data_base(&self) -> u64 {
        (INFO_LEN + self.lbas * 8).div_ceil(self.block_size) * self.block_size
    }

    /// Region bytes the image needs (saturating, so absurd geometry fails `validate`).
    pub fn region_len(&self) -> u64 {
        self.data_base()
            .saturating_add(self.data_blocks.saturating_mul(self.block_size))
    }

    /// Checks the geometry is usable in a region of `region_len` bytes.
    pub fn validate(&self, region_len: u64) -> Result<(), String> {
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
            Some(_) if self.region_len() <= region_len => Ok(()),
            _ => Err(format!(
                "image needs {} bytes, region has {region_len}",
                self.region_len()
            )),
        }
    }
}

/// The translation layer over one region.
pub struct Btt<R: Region> {
    region: R,
    geo: Geometry,
    map: BlockMap,
    alloc: BlockAllocator,
    stripes: Box<[Mutex<()>]>,
}

impl<R: Region> Btt<R> {
    /// Zeroes the map (every block reads as zeros), writes the info block last, and
    /// opens.
    pub fn format(region: R, geo: Geometry) -> Result<Self, MapError> {
        geo.validate(region.len())
            .map_err(|e| MapError::Info(InfoError::Geometry(e)))?;
        for lba in 0..geo.lbas {
            region.store_u64(INFO_LEN + lba * 8, 0)?;
        }
        region.flush(&[(INFO_LEN, geo.lbas * 8)])?;
        region.fence()?;
        region.write(0, &info::encode(&geo))?;
        region.flush(&[(0, INFO_LEN)])?;
        region.fence()?;
        Self::open(region)
    }

    /// Validates the info block, loads the map (refusing bad entries) and rebuilds
    /// free space from it.
    pub fn open(region: R) -> Result<Self, MapError> {
        let mut raw = [0u8; 64];
        region.read(0, &mut raw)?;
        let geo = info::decode(&raw, region.len())?;
        let map = BlockMap::load(&region, INFO_LEN, geo.lbas, geo.data_blocks)?;
        let alloc = BlockAllocator::from_used(geo.data_blocks, map.used())?;
        Ok(Self {
            region,
            geo,
            map,
            alloc,
            stripes: (0..STRIPES).map(|_| Mutex::new(())).collect(),
        })
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

    fn stripe(&self, lba: u64) -> MutexGuard<'_, ()> {
        self.stripes[(lba as usize) % STRIPES]
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

    /// Reads `buf.len()` bytes at byte `within` of logical block `lba`.
    pub fn read_bytes(&self, lba: u64, within: u64, buf: &mut [u8]) -> Result<(), DeviceError> {
        self.check_bytes(DeviceOp::Read, lba, within, buf.len())?;
        let _g = self.stripe(lba);
        if let Some(b) = self.map.get(lba) {
            self.region
                .read(self.geo.data_base() + b * self.geo.block_size + within, buf)
        } else {
            buf.fill(0);
            Ok(())
        }
    }

    /// Copies `len` bytes from region offset `from` (or zeros when `None`) to `to`,
    /// through a stack buffer (no heap allocation).
    fn copy(&self, from: Option<u64>, to: u64, len: u64) -> Result<(), DeviceError> {
        let mut chunk = [0u8; 512];
        let mut done = 0;
        while done < len {
            let n = (len - done).min(chunk.len() as u64) as usize;
            if let Some(f) = from {
                self.region.read(f + done, &mut chunk[..n])?;
            }
            self.region.write(to + done, &chunk[..n])?;
            done += n as u64;
        }
        Ok(())
    }

    /// Atomically replaces bytes `within..within+data.len()` of logical block `lba`:
    /// the rest of the block is copied from the old block (or zero-filled) into a free
    /// block, so the whole block flips old → new in one map store.
    pub fn write_bytes(&self, lba: u64, within: u64, data: &[u8]) -> Result<(), DeviceError> {
        self.check_bytes(DeviceOp::Write, lba, within, data.len())?;
        let bs = self.geo.block_size;
        let _g = self.stripe(lba);
        let Some(new) = self.alloc.alloc(lba) else {
            return Err(DeviceError::Io {
                op: DeviceOp::Write,
                offset: lba * bs + within,
                len: data.len() as u64,
                device: self.region.describe(),
                source: std::io::Error::other("no free NVM block"),
            });
        };
        let base = self.geo.data_base();
        let off = base + new * bs;
        let old_off = self.map.get(lba).map(|b| base + b * bs);
        let end = within + data.len() as u64;
        let staged = self
            .copy(old_off, off, within)
            .and_then(|()| self.region.write(off + within, data))
            .and_then(|()| self.copy(old_off.map(|o| o + end), off + end, bs - end))
            .and_then(|()| self.region.flush(&[(off, bs)]))
            .and_then(|()| self.region.fence());
        if let Err(e) = staged {
            self.alloc.free(new);
            return Err(e);
        }
        let old = self.map.set(&self.region, lba, new)?;
        self.region.fence()?;
        if let Some(old) = old {
            self.alloc.free(old);
        }
        Ok(())
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
        for seed in 0..8u64 {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let ops: Vec<(u64, u8)> = (1..=24u8)
                .map(|t| (rng.random_range(0..GEO.lbas), t))
                .collect();
            let probe = Btt::format(SimRegion::new(GEO.region_len()), GEO).expect("format");
            let start = probe.region().events();
            run(&probe, &ops, &mut [0; 8], &mut None);
            let total = probe.region().events() - start;
            for point in 0..=total {
                let b = Btt::format(SimRegion::new(GEO.region_len()), GEO).expect("format");
                b.region().crash_after(start + point);
                let mut done = [0u8; 8];
                let mut inflight = None;
                run(&b, &ops, &mut done, &mut inflight);
                let Btt { region, .. } = b;
                region.crash(seed ^ point);
                let b = Btt::open(region)
                    .unwrap_or_else(|e| panic!("seed {seed} point {point}: reopen: {e}"));
                for lba in 0..GEO.lbas {
                    let mut buf = [0u8; 64];
                    b.read_block(lba, &mut buf).expect("read");
                    let tag = buf[0];
                    assert!(
                        buf.iter().all(|&x| x == tag),
                        "seed {seed} point {point}: torn lba {lba}"
                    );
                    let ok = tag == done[lba as usize] || inflight == Some((lba, tag));
                    assert!(
                        ok,
                        "seed {seed} point {point}: lba {lba} has {tag}, want {} or {inflight:?}",
                        done[lba as usize]
                    );
                }
            }
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
