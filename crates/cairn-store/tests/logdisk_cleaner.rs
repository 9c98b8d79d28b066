//! How the cleaner reads its victims changes what it reads, never what it
//! cleans: reading live blocks only (in runs bridging dead blocks, on several
//! threads, or one by one) picks the same victims, copies the same blocks and
//! keeps the same data as whole-segment reads, while reading a fraction of the
//! bytes; and after a crash every flushed write reads back.

#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use cairn_store::logdisk::{CleanerPolicy, Geometry, LogDisk};
use cairn_store::ntl::{Region, SimRegion};
use cairn_store::{CrashMode, FaultyDevice};
use common::logdisk::{B, Reads, image_len, options, pattern, version_of};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Sparse victims read live blocks only (in runs, on several threads, or
/// one by one) clean exactly as whole-segment reads do — same victims, same
/// blocks copied, same data — while reading a fraction of the bytes; and
/// after a crash every flushed write reads back.
#[test]
fn sparse_victims_read_live_only_clean_as_whole_reads_do() {
    let g = Geometry {
        block_size: B as u32,
        segment_blocks: 29,
        segments: 40,
        logical_blocks: 448, // utilisation 0.4
    };
    for nv in [false, true] {
        let mut results = Vec::new();
        for reads in [
            Reads::Whole,
            Reads::LiveOnly { gap: 0, threads: 1 },
            Reads::LiveOnly { gap: 2, threads: 4 },
        ] {
            let opts = reads.apply(options(CleanerPolicy::Greedy));
            let dev = Arc::new(FaultyDevice::new(image_len(&g), 3));
            let region = Arc::new(SimRegion::new(24 * 1024));
            let nv_box = || nv.then(|| Box::new(region.clone()) as Box<dyn Region>);
            let disk = LogDisk::format(dev.clone(), g, nv_box(), opts).unwrap();
            let mut model = vec![0u64; g.logical_blocks as usize];
            let mut rng = ChaCha8Rng::seed_from_u64(11);
            for version in 1..=6000u64 {
                let l = rng.random_range(0..g.logical_blocks);
                disk.write_blocks(l, &pattern(l, version)).unwrap();
                model[l as usize] = version;
                if version % 250 == 0 {
                    disk.flush().unwrap();
                }
            }
            disk.flush().unwrap();
            let m = disk.metrics();
            let whole = m.cleaner_segment_reads * u64::from(g.segment_blocks * g.block_size);
            assert!(m.cleaner_segment_reads > 20, "{reads:?}: {m:?}");
            match reads {
                Reads::Whole => {
                    assert_eq!(m.cleaner_read_ios, m.cleaner_segment_reads);
                }
                Reads::LiveOnly { .. } => {
                    assert!(m.cleaner_read_ios > m.cleaner_segment_reads, "{m:?}");
                    assert!(m.cleaner_read_bytes < whole / 2, "{reads:?}: {m:?}");
                }
            }
            let mut buf = vec![0u8; B];
            for (l, &version) in model.iter().enumerate() {
                disk.read_block(l as u64, &mut buf).unwrap();
                assert_eq!(
                    version_of(l as u64, &buf),
                    Some(version),
                    "{reads:?} block {l}"
                );
            }
            drop(disk);
            dev.crash_now(CrashMode::DropUnflushed);
            region.crash(5);
            let disk = LogDisk::open(dev, nv_box(), opts).unwrap();
            for (l, &version) in model.iter().enumerate() {
                disk.read_block(l as u64, &mut buf).unwrap();
                assert_eq!(
                    version_of(l as u64, &buf),
                    Some(version),
                    "{reads:?} block {l} after the crash"
                );
            }
            results.push((
                m.cleaner_segment_reads,
                m.cleaner_blocks_written,
                m.cleaner_segment_writes,
            ));
        }
        assert!(
            results.windows(2).all(|w| w[0] == w[1]),
            "nv={nv}: the read strategy changed what was cleaned: {results:?}"
        );
    }
}
