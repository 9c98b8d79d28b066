//! `fsck` and `inspect` for NTL images (library functions; the CLI wires them later).

use std::fmt;
use std::path::Path;

use super::alloc::BlockAllocator;
use super::info;
use super::lanelog;
use super::layout::{self, Geometry, INFO_LEN};
use super::map::{BlockMap, MapError};
use super::pmem::{MmapRegion, PersistenceRequest};
use super::region::Region;

/// What `fsck`/`inspect` found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// Image geometry from the info block.
    pub geometry: Geometry,
    /// Logical blocks that are mapped.
    pub mapped: u64,
    /// Free data blocks (named by no map entry).
    pub free: u64,
    /// The image has been opened for in-place (non-atomic) writes since it was
    /// formatted, so a crash may have torn a block (no check can tell which).
    pub in_place_written: bool,
    /// Format version (2: with a lane log; 1: without).
    pub version: u32,
    /// Lane log records whose map entries were not on the media yet (a crash,
    /// or a stop without a flush): the next open applies them. The counts
    /// above already include them.
    pub pending_records: u64,
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let g = &self.geometry;
        writeln!(
            f,
            "NTL image v{}: block size {} bytes",
            self.version, g.block_size
        )?;
        writeln!(f, "  logical blocks {} ({} mapped)", g.lbas, self.mapped)?;
        writeln!(f, "  data blocks {} ({} free)", g.data_blocks, self.free)?;
        if self.version >= info::VERSION {
            writeln!(
                f,
                "  lane log: {} lanes x {} slots, {} records to replay at the next open",
                layout::LANES,
                layout::SLOTS,
                self.pending_records
            )?;
        } else {
            writeln!(f, "  lane log: none (version 1: two fences per write)")?;
        }
        if self.in_place_written {
            write!(
                f,
                "  writes: in-place (non-atomic) writes used since format; a crash may have torn blocks"
            )
        } else {
            write!(f, "  writes: atomic only since format")
        }
    }
}

fn examine<R: Region + ?Sized>(region: &R) -> Result<Report, MapError> {
    let mut raw = [0u8; 64];
    region.read(0, &mut raw)?;
    let info = info::decode(&raw, region.len())?;
    let geometry = info.geometry;
    // What the next open's replay would change, without changing it.
    let replay = if info.has_log() {
        lanelog::replay(region, &geometry, false)?
    } else {
        lanelog::Replay::default()
    };
    let map = BlockMap::load(region, INFO_LEN, geometry.lbas, geometry.data_blocks)?;
    for &(lba, entry) in &replay.redo {
        map.overlay(lba, entry);
    }
    let alloc = BlockAllocator::from_used(geometry.data_blocks, map.used())?;
    strict_assert_eq!(
        alloc.free_blocks() + map.used().count() as u64,
        geometry.data_blocks,
        "free and mapped blocks do not add up"
    );
    Ok(Report {
        geometry,
        mapped: map.used().count() as u64,
        free: alloc.free_blocks(),
        in_place_written: info.flags & info::FLAG_IN_PLACE != 0,
        version: info.version,
        pending_records: replay.redo.len() as u64,
    })
}

/// Checks an image: info-block magic/version/CRC/geometry, every map entry valid, and
/// every data block mapped at most once (the rest free, so each is mapped or free
/// exactly once). Does not modify the file.
pub fn fsck(path: &Path) -> Result<Report, MapError> {
    let region = MmapRegion::open(path, 0, false, PersistenceRequest::None)?;
    examine(&region)
}

/// Describes an image (the same checks as [`fsck`]; both refuse a corrupt image).
pub fn inspect(path: &Path) -> Result<Report, MapError> {
    fsck(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::Device;
    use crate::ntl::{Btt, NtlDevice};

    #[test]
    fn records_not_yet_in_the_map_are_counted_and_replayed_at_open() {
        use crate::ntl::SimRegion;
        let geo = Geometry {
            block_size: 64,
            lbas: 8,
            data_blocks: 12,
        };
        let b = Btt::format(SimRegion::new(geo.region_len()), geo).expect("format");
        for lba in 0..3 {
            b.write_block(lba, &[lba as u8 + 1; 64]).expect("write");
        }
        // A crash: the last map entries were stored after their fences and
        // never written back, so only the lane log has them.
        let region = b.into_region();
        region.crash(1);
        let report = examine(&region).expect("examine");
        assert_eq!(report.version, info::VERSION);
        // The crash keeps a seeded-random part of the unfenced stores; the
        // entries it dropped are the records' alone.
        let pending = report.pending_records;
        assert!((1..=3).contains(&pending), "{report}");
        assert_eq!(report.mapped, 3, "pending records count as mapped");
        assert!(
            report
                .to_string()
                .contains(&format!("{pending} records to replay")),
            "{report}"
        );
        let b = Btt::open(region).expect("open replays");
        for lba in 0..3 {
            let mut buf = [0u8; 64];
            b.read_block(lba, &mut buf).expect("read");
            assert_eq!(buf, [lba as u8 + 1; 64]);
        }
        let report = examine(b.region()).expect("examine");
        assert_eq!((report.pending_records, report.mapped), (0, 3));
        // The replayed log is emptied: no record outlives its session.
        let mut log = vec![0u8; layout::LOG_LEN as usize];
        b.region().read(geo.log_base(), &mut log).expect("read log");
        assert!(log.iter().all(|&x| x == 0), "records left after replay");
        b.flush().expect("flush");
    }

    #[test]
    fn fsck_counts_and_refuses_corruption() {
        let geo = Geometry {
            block_size: 4096,
            lbas: 16,
            data_blocks: 20,
        };
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("img");
        {
            let r = MmapRegion::open(&path, geo.region_len(), true, PersistenceRequest::Auto)
                .expect("map");
            let dev = NtlDevice::new(Btt::format(r, geo).expect("format"));
            dev.write_at(&[7; 5000], 100).expect("write");
        }
        let rep = fsck(&path).expect("clean image");
        assert_eq!(rep.mapped, 2);
        assert_eq!(rep.free, 18);
        assert!(!rep.in_place_written);
        {
            let r = MmapRegion::open(&path, 0, false, PersistenceRequest::None).expect("map");
            let b = Btt::open_with(r, crate::ntl::WriteMode::InPlace).expect("open in place");
            NtlDevice::new(b).write_at(&[8; 100], 200).expect("write");
        }
        let rep = fsck(&path).expect("still clean");
        assert!(rep.in_place_written && rep.mapped == 2 && rep.free == 18);
        assert!(rep.to_string().contains("may have torn"), "{rep}");
        assert!(
            inspect(&path)
                .expect("inspect")
                .to_string()
                .contains("2 mapped")
        );
        {
            let r = MmapRegion::open(&path, 0, false, PersistenceRequest::None).expect("map");
            // Two entries naming the same data block.
            let e = r.load_u64(INFO_LEN).expect("load");
            r.store_u64(INFO_LEN + 8 * 5, e).expect("store");
        }
        assert!(matches!(fsck(&path), Err(MapError::Alloc(_))));
        {
            let r = MmapRegion::open(&path, 0, false, PersistenceRequest::None).expect("map");
            r.write(0, b"NOTANTL!").expect("write");
        }
        assert!(matches!(fsck(&path), Err(MapError::Info(_))));
    }
}
