//! A device error or a full disk fails the operation it hits and loses
//! nothing acknowledged: a background segment write that fails (EIO) fails the
//! disk's later device operations, so no device flush retires the NV slots of a
//! segment that never reached the disk; a cleaner read that fails in a batch
//! fails the one write that collects the pass; a disk too full to clean refuses
//! a write with `NoSpace`. Every write acknowledged before reads back, after a
//! reopen where there is one.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use cairn_store::logdisk::{CleanerPolicy, Geometry, LogDisk, LogDiskError, Options};
use cairn_store::ntl::{Region, SimRegion};
use cairn_store::{Device, FaultyDevice, MemoryDevice};
use common::logdisk::{B, Reads, image_len, options, pattern, small, version_of};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// A background segment write that fails (EIO) fails the disk's later
/// device operations — no device flush may retire the NV slots of a segment
/// that never reached the disk — and loses no acknowledged write: reopened,
/// the disk recovers them from the NV cache.
#[test]
fn a_failed_background_write_fails_later_device_operations_and_loses_nothing() {
    use cairn_store::device::DeviceOp;
    let g = small();
    for after in [0u64, 1, 3, 6] {
        let dev = Arc::new(FaultyDevice::new(image_len(&g), 9));
        let region = Arc::new(SimRegion::new(12 * 1024));
        let nv_box = || Some(Box::new(region.clone()) as Box<dyn Region>);
        let opts = Options {
            background_destage: true,
            ..options(CleanerPolicy::Greedy)
        };
        let disk = LogDisk::format(dev.clone(), g, nv_box(), opts).unwrap();
        dev.fail(DeviceOp::Write, after);
        // Some(version) acknowledged; None: a failed write, either version.
        let mut model: BTreeMap<u64, Option<u64>> = BTreeMap::new();
        let mut errors = 0;
        for version in 1..=300u64 {
            let l = version * 7 % g.logical_blocks;
            let ok = disk.write_blocks(l, &pattern(l, version)).is_ok();
            model.insert(l, ok.then_some(version));
            errors += u32::from(!ok);
        }
        assert!(
            errors > 0,
            "after {after}: the injected failure never surfaced"
        );
        let e = disk.sync_checkpoint().unwrap_err();
        assert!(e.to_string().contains("reopen"), "after {after}: {e}");
        drop(disk);
        let disk = LogDisk::open(dev, nv_box(), opts).unwrap();
        assert_acknowledged_read_back(&disk, &model, &format!("after {after}"));
    }
}

/// Every block of `model` reads back: `Some(version)`, a write that was
/// acknowledged, exactly; `None`, a write that failed, as anything readable.
fn assert_acknowledged_read_back<D: Device + 'static>(
    disk: &LogDisk<D>,
    model: &BTreeMap<u64, Option<u64>>,
    context: &str,
) {
    let mut buf = vec![0u8; B];
    for (&l, &version) in model {
        disk.read_block(l, &mut buf)
            .unwrap_or_else(|e| panic!("{context}: block {l}: {e}"));
        if let Some(version) = version {
            assert_eq!(version_of(l, &buf), Some(version), "{context}: block {l}");
        }
    }
}

/// A device that takes reads in batches ([`Device::read_batch`]), as a file
/// device does through `io_uring`, by reading each in turn from a faulty
/// device; it counts the batches.
struct Batching {
    inner: Arc<FaultyDevice>,
    batches: std::sync::atomic::AtomicU64,
}

impl Device for Batching {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<(), cairn_store::DeviceError> {
        self.inner.read_at(buf, offset)
    }
    fn read_batch(&self, reads: &mut [(u64, &mut [u8])]) -> Result<bool, cairn_store::DeviceError> {
        if !reads.is_empty() {
            self.batches
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        for (offset, buf) in reads.iter_mut() {
            self.inner.read_at(buf, *offset)?;
        }
        Ok(true)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> Result<(), cairn_store::DeviceError> {
        self.inner.write_at(buf, offset)
    }
    fn flush(&self) -> Result<(), cairn_store::DeviceError> {
        self.inner.flush()
    }
    fn discard(&self, offset: u64, len: u64) -> Result<(), cairn_store::DeviceError> {
        self.inner.discard(offset, len)
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn describe(&self) -> String {
        "batching".into()
    }
}

/// On a device that batches reads, the background cleaner issues each
/// pass's reads as one batch (and the synchronous cleaner its reads); a
/// read that fails in a batch fails the write that collects the pass, and
/// nothing acknowledged is lost: every block reads back after a reopen.
#[test]
fn a_failed_batched_cleaner_read_fails_the_pass_and_loses_nothing() {
    use cairn_store::device::DeviceOp;
    let g = small();
    for (after, background_clean) in [(0u64, true), (5, true), (2, false)] {
        let faulty = Arc::new(FaultyDevice::new(image_len(&g), 11));
        let dev = Arc::new(Batching {
            inner: faulty.clone(),
            batches: std::sync::atomic::AtomicU64::new(0),
        });
        let region = Arc::new(SimRegion::new(12 * 1024));
        let nv_box = || Some(Box::new(region.clone()) as Box<dyn Region>);
        let opts = Options {
            background_destage: true,
            background_clean,
            ..Reads::LiveOnly { gap: 1, threads: 4 }.apply(options(CleanerPolicy::Greedy))
        };
        let disk = LogDisk::format(dev.clone(), g, nv_box(), opts).unwrap();
        let context = format!("after {after}, background_clean={background_clean}");
        // Some(version) acknowledged; None: a failed write, either version.
        let mut model: BTreeMap<u64, Option<u64>> = BTreeMap::new();
        let mut errors = 0;
        let mut rng = ChaCha8Rng::seed_from_u64(after);
        for version in 1..=600u64 {
            if version == 200 {
                faulty.fail(DeviceOp::Read, after);
            }
            let l = rng.random_range(0..g.logical_blocks);
            let result = disk.write_blocks(l, &pattern(l, version));
            if let Err(e) = &result {
                assert!(e.to_string().contains("injected"), "{context}: {e}");
            }
            model.insert(l, result.is_ok().then_some(version));
            errors += u32::from(result.is_err());
        }
        assert!(
            dev.batches.load(std::sync::atomic::Ordering::Relaxed) > 0,
            "{context}: no batch; {:?}",
            disk.metrics()
        );
        assert_eq!(errors, 1, "{context}: the injected failure surfaced once");
        drop(disk);
        let disk = LogDisk::open(dev, nv_box(), opts).unwrap();
        assert_acknowledged_read_back(&disk, &model, &context);
    }
}

#[test]
fn a_full_disk_says_no_space_and_loses_nothing() {
    // 45 live blocks in 7 segments of 7 data slots: too full to clean.
    let g = Geometry {
        block_size: B as u32,
        segment_blocks: 8,
        segments: 7,
        logical_blocks: 45,
    };
    let disk = LogDisk::format(
        MemoryDevice::new(image_len(&g)),
        g,
        None,
        Options::default(),
    )
    .unwrap();
    let mut last = BTreeMap::new();
    let mut refused = None;
    'rounds: for round in 1..50u64 {
        for l in 0..g.logical_blocks {
            match disk
                .write_blocks(l, &pattern(l, round))
                .and_then(|()| disk.flush())
            {
                Ok(()) => {
                    last.insert(l, round);
                }
                Err(LogDiskError::NoSpace) => {
                    refused = Some((l, round));
                    break 'rounds;
                }
                Err(e) => panic!("{e}"),
            }
        }
    }
    let (refused_block, refused_version) = refused.expect("the disk fills up");
    // Every acknowledged write reads back; the refused one may or may not.
    let mut buf = vec![0u8; B];
    for (&l, &v) in &last {
        disk.read_block(l, &mut buf).unwrap();
        let got = version_of(l, &buf).unwrap();
        assert!(
            got == v || (l == refused_block && got == refused_version),
            "block {l}: {got}, acknowledged {v}"
        );
    }
}
