//! What is written reads back, with no crash in between: in both modes (volatile
//! segment buffers and the NV cache) under every cleaner policy while the
//! cleaner runs, through byte-granular `Device` I/O at unaligned offsets, after
//! a clean close or a plain drop and a reopen, and over an `O_DIRECT` file
//! with cleaning and a reopen. The baseline the crash tests build on.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use cairn_store::logdisk::{CleanerPolicy, Geometry, LogDisk, Options};
use cairn_store::ntl::{Region, SimRegion};
use cairn_store::{Device, MemoryDevice};
use common::logdisk::{B, image_len, options, pattern, small, version_of};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

#[test]
fn round_trip_in_both_modes_with_cleaning() {
    for nv in [false, true] {
        for cleaner in CleanerPolicy::ALL {
            let g = small();
            let dev = MemoryDevice::new(image_len(&g));
            let region: Option<Box<dyn Region>> =
                nv.then(|| Box::new(SimRegion::new(16 * 1024)) as Box<dyn Region>);
            let disk = LogDisk::format(dev, g, region, options(cleaner)).unwrap();
            let mut model = BTreeMap::new();
            let mut rng = ChaCha8Rng::seed_from_u64(7);
            for version in 1..=3000u64 {
                let l = if rng.random_bool(0.7) {
                    rng.random_range(0..8)
                } else {
                    rng.random_range(0..g.logical_blocks)
                };
                disk.write_blocks(l, &pattern(l, version)).unwrap();
                model.insert(l, version);
                if version % 97 == 0 {
                    disk.flush().unwrap();
                }
            }
            let mut buf = vec![0u8; B];
            for l in 0..g.logical_blocks {
                disk.read_block(l, &mut buf).unwrap();
                assert_eq!(
                    version_of(l, &buf),
                    Some(model.get(&l).copied().unwrap_or(0)),
                    "block {l} nv={nv} {cleaner:?}"
                );
            }
            let m = disk.metrics();
            assert!(
                m.cleaner_segment_reads > 0,
                "{cleaner:?} never cleaned: {m:?}"
            );
            assert!(m.write_amplification().unwrap() >= 1.0);
            if nv {
                assert!(m.nv_write_hits > 0);
                assert_eq!(
                    m.partial_segments, 0,
                    "NV mode never writes partial segments"
                );
            } else {
                assert!(m.partial_segments > 0);
            }
        }
    }
}

#[test]
fn byte_granular_device_io_round_trips() {
    let g = small();
    let disk = LogDisk::format(
        MemoryDevice::new(image_len(&g)),
        g,
        None,
        Options::default(),
    )
    .unwrap();
    let data: Vec<u8> = (0..3000u32).map(|i| (i * 13 + 1) as u8).collect();
    disk.write_at(&data, 700).unwrap();
    let mut back = vec![0u8; 3000];
    disk.read_at(&mut back, 700).unwrap();
    assert_eq!(back, data);
    let mut around = vec![0xffu8; 100];
    disk.read_at(&mut around, 650).unwrap();
    assert!(around[..50].iter().all(|&b| b == 0));
    assert_eq!(around[50..], data[..50]);
    assert!(disk.write_at(&[1], disk.len()).is_err());
}

#[test]
fn reopen_after_close_and_after_plain_drop() {
    for close in [true, false] {
        let g = small();
        let dev = Arc::new(MemoryDevice::new(image_len(&g)));
        let disk = LogDisk::format(dev.clone(), g, None, Options::default()).unwrap();
        for l in 0..g.logical_blocks {
            disk.write_blocks(l, &pattern(l, l + 100)).unwrap();
        }
        disk.flush().unwrap();
        if close {
            disk.close().unwrap();
        }
        drop(disk);
        let disk = LogDisk::open(dev, None, Options::default()).unwrap();
        let mut buf = vec![0u8; B];
        for l in 0..g.logical_blocks {
            disk.read_block(l, &mut buf).unwrap();
            assert_eq!(version_of(l, &buf), Some(l + 100));
        }
    }
}

/// The log disk over an `O_DIRECT` file: its own buffers are page-aligned, so
/// segment writes, cleaning, checkpoints and recovery go straight to the
/// device; a caller's unaligned buffer is bounced, never refused.
#[test]
fn direct_io_file_device_with_cleaning_and_reopen() {
    use cairn_store::device::{FileDevice, FileOptions};
    let g = Geometry {
        block_size: 4096,
        segment_blocks: 16,
        segments: 24,
        logical_blocks: 200,
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("direct.img");
    let open = |create: bool| {
        FileDevice::open(
            &path,
            &FileOptions {
                create_len: create.then_some(image_len(&g)),
                direct: true,
                read_only: false,
                ..FileOptions::default()
            },
        )
    };
    let dev = match open(true) {
        Ok(dev) => dev,
        Err(e) => {
            eprintln!("skipped: this file system refuses O_DIRECT ({e})");
            return;
        }
    };
    let disk = LogDisk::format(dev, g, None, options(CleanerPolicy::CostBenefit)).unwrap();
    let mut model = vec![0u64; 200];
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let mut block = cairn_store::device::IoBuf::zeroed(4096);
    for version in 1..=2000u64 {
        let l = rng.random_range(0..200u64);
        block.fill((version % 251) as u8);
        block[..8].copy_from_slice(&version.to_le_bytes());
        disk.write_blocks(l, &block).unwrap();
        model[l as usize] = version;
        if version % 97 == 0 {
            disk.flush().unwrap();
        }
    }
    assert!(disk.metrics().cleaner_segment_reads > 0, "the cleaner ran");
    disk.close().unwrap();
    drop(disk);
    let disk = LogDisk::open(open(false).unwrap(), None, Options::default()).unwrap();
    // An unaligned caller buffer (offset 1 in a Vec) is bounced.
    let mut raw = vec![0u8; 4097];
    for (l, &version) in model.iter().enumerate() {
        let buf = &mut raw[1..];
        disk.read_block(l as u64, buf).unwrap();
        if version == 0 {
            assert!(buf.iter().all(|&b| b == 0));
        } else {
            assert_eq!(u64::from_le_bytes(buf[..8].try_into().unwrap()), version);
            assert!(buf[8..].iter().all(|&b| b == (version % 251) as u8));
        }
    }
}
