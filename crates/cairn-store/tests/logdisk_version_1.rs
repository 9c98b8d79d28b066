//! A log disk of format version 1 (summaries without the volume id), as
//! the code before version 2 wrote it: opened, recovered after the crash it
//! was left in, written, and kept at version 1 (a binary of that code can
//! still open it). The image, `fixtures/logdisk-v1-crashed.img`, was made
//! by that code (commit badbd5c): 512-byte blocks, 12 segments of 8, 40
//! logical blocks; blocks 0..20 written at version 1, each flushed on its
//! own, a clean close; blocks 10..30 at version 2 the same way, then a crash
//! (dropped without a close).

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use cairn_store::logdisk::{LogDisk, Options, format};
use cairn_store::{Device, MemoryDevice};

const B: usize = 512;

fn block(logical: u64, version: u8) -> Vec<u8> {
    let mut v = vec![version; B];
    v[..8].copy_from_slice(&logical.to_le_bytes());
    v
}

fn volatile() -> Options {
    Options {
        background_destage: false,
        background_clean: false,
        ..Options::default()
    }
}

fn fixture() -> Arc<MemoryDevice> {
    let image = include_bytes!("fixtures/logdisk-v1-crashed.img");
    let dev = Arc::new(MemoryDevice::new(image.len() as u64));
    dev.write_at(image, 0).unwrap();
    dev
}

/// Every summary on the device (any slot that holds one) is of `version`,
/// and so is the superblock.
fn all_of_version(dev: &MemoryDevice, version: u32) -> usize {
    let mut first = vec![0u8; B];
    dev.read_at(&mut first, 0).unwrap();
    let sb = format::decode_superblock(&first).unwrap();
    assert_eq!(sb.version, version, "superblock");
    let g = sb.geometry;
    let mut summaries = 0;
    let mut b = vec![0u8; B];
    for at in g.segment_start(0)..g.image_blocks() {
        dev.read_at(&mut b, at * B as u64).unwrap();
        if b[..8] == format::SUMMARY_MAGIC {
            assert_eq!(
                u32::from_le_bytes(b[8..12].try_into().unwrap()),
                version,
                "block {at}"
            );
            summaries += 1;
        }
    }
    summaries
}

fn reads_back(disk: &LogDisk<Arc<MemoryDevice>>, extra: std::ops::Range<u64>) {
    let mut buf = vec![0u8; B];
    for l in 0..40 {
        disk.read_block(l, &mut buf).unwrap();
        let want = match l {
            _ if extra.contains(&l) => block(l, 3),
            0..10 => block(l, 1),
            10..30 => block(l, 2),
            _ => vec![0; B],
        };
        assert_eq!(buf, want, "block {l}");
    }
    disk.verify().unwrap();
}

#[test]
fn a_version_1_disk_recovers_takes_writes_and_stays_version_1() {
    let dev = fixture();
    let before = all_of_version(&dev, 1);
    assert!(before >= 20, "{before} summaries in the fixture");
    let report = cairn_store::logdisk::check::examine(&*dev).unwrap();
    assert!(report.is_clean(), "{:?}", report.problems);
    assert_eq!(report.version, 1);
    assert_eq!(report.replayed, 20, "the writes after the last checkpoint");

    let disk = LogDisk::open(Arc::clone(&dev), None, volatile()).unwrap();
    assert_eq!(
        disk.recovered().segment_writes,
        20,
        "{:?}",
        disk.recovered()
    );
    reads_back(&disk, 0..0);
    // More writes, flushed one by one, then a crash again.
    for l in 30..35 {
        disk.write_blocks(l, &block(l, 3)).unwrap();
        disk.flush().unwrap();
    }
    drop(disk);
    let disk = LogDisk::open(Arc::clone(&dev), None, volatile()).unwrap();
    assert_eq!(disk.recovered().segment_writes, 5, "{:?}", disk.recovered());
    reads_back(&disk, 30..35);
    disk.close().unwrap();
    drop(disk);
    let disk = LogDisk::open(Arc::clone(&dev), None, volatile()).unwrap();
    assert_eq!(disk.recovered().segments_read, 0, "a clean close");
    reads_back(&disk, 30..35);
    drop(disk);
    // What this binary wrote is in version 1's layout too.
    assert!(all_of_version(&dev, 1) >= 5);
    let report = cairn_store::logdisk::check::examine(&*dev).unwrap();
    assert!(report.is_clean(), "{:?}", report.problems);
    assert!(report.to_string().starts_with("log disk v1 "), "{report}");
}
