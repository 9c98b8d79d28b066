//! A write never lets a later read see stale data. The race this guards: a
//! reader misses a block and reads the device (old data); a write lands and
//! finishes; the reader then installs what it read — and every later read
//! would be served the old bytes from the cache. The cache detaches a load a
//! write overtakes, so its data is never installed.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use cairn_policy::PolicyConfig;
use cairn_store::{BlockCache, CacheConfig, Device, WriteMode};
use common::GatedDevice;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const BLOCK: u64 = 4096;

fn cache_over<D: Device>(device: D, mode: WriteMode, capacity_blocks: u64) -> BlockCache<D> {
    BlockCache::new(
        device,
        &CacheConfig {
            block_size_bytes: BLOCK,
            capacity_bytes: capacity_blocks * BLOCK,
            write_mode: mode,
            shards: 1,
            ..CacheConfig::default()
        },
    )
    .unwrap()
}

#[test]
fn a_write_landing_during_a_miss_is_not_undone_by_the_miss() {
    for mode in [WriteMode::Update, WriteMode::Invalidate] {
        for whole_block in [true, false] {
            let device = Arc::new(GatedDevice::new(64 * BLOCK));
            device
                .inner
                .write_at(&[1; BLOCK as usize], 5 * BLOCK)
                .unwrap();
            let cache = Arc::new(cache_over(Arc::clone(&device), mode, 16));
            device.arm();
            let reader = {
                let cache = Arc::clone(&cache);
                std::thread::spawn(move || cache.get(5).unwrap())
            };
            // The reader has read the old bytes and is stopped before
            // installing them.
            device.wait_captured();
            let (data, at) = if whole_block {
                (vec![2u8; BLOCK as usize], 5 * BLOCK)
            } else {
                (vec![2u8; 100], 5 * BLOCK + 10)
            };
            cache.write_at(&data, at).unwrap();
            // A read after the write, while the old load is still stopped.
            let mut after = vec![0u8; data.len()];
            cache.read_at(&mut after, at).unwrap();
            assert_eq!(after, data, "{mode:?}: read after the write");
            device.release();
            let racing = reader.join().unwrap();
            assert!(
                racing.iter().all(|&b| b == 1),
                "the racing reader got the old block whole"
            );
            let mut later = vec![0u8; data.len()];
            cache.read_at(&mut later, at).unwrap();
            assert_eq!(
                later, data,
                "{mode:?}, whole {whole_block}: read after the stale load ended"
            );
            assert_eq!(cache.metrics().detached_loads, 1);
        }
    }
}

#[test]
fn a_discard_during_a_miss_is_not_undone_by_the_miss() {
    let device = Arc::new(GatedDevice::new(64 * BLOCK));
    device
        .inner
        .write_at(&[9; BLOCK as usize], 3 * BLOCK)
        .unwrap();
    let cache = Arc::new(cache_over(Arc::clone(&device), WriteMode::Update, 16));
    device.arm();
    let reader = {
        let cache = Arc::clone(&cache);
        std::thread::spawn(move || cache.get(3).unwrap())
    };
    device.wait_captured();
    cache.discard(3 * BLOCK, BLOCK).unwrap();
    device.release();
    reader.join().unwrap();
    assert!(cache.get(3).unwrap().iter().all(|&b| b == 0));
}

/// Writers stamp blocks with increasing versions and publish each version
/// once its write returned; readers check that a block never reads older than
/// the version published before the read began (each block has one writer,
/// so its versions reach the device in order). Small cache (evictions),
/// both modes, several policies, 8 threads for about a second each.
#[test]
fn no_read_returns_a_version_older_than_a_finished_write() {
    let blocks = 48u64;
    for (mode, policy) in [
        (WriteMode::Update, "lru"),
        (WriteMode::Invalidate, "ons"),
        (WriteMode::Update, "s3fifo"),
    ] {
        let device = Arc::new(cairn_store::MemoryDevice::new(blocks * BLOCK));
        let cache = Arc::new(
            BlockCache::new(
                device,
                &CacheConfig {
                    block_size_bytes: BLOCK,
                    capacity_bytes: 16 * BLOCK,
                    write_mode: mode,
                    policy: PolicyConfig::default_for(policy).unwrap(),
                    shards: 2,
                    ..CacheConfig::default()
                },
            )
            .unwrap(),
        );
        let published: Arc<Vec<AtomicU64>> =
            Arc::new((0..blocks).map(|_| AtomicU64::new(0)).collect());
        let next_version = Arc::new(AtomicU64::new(1));
        let seed = common::seed();
        println!("{mode:?} {policy}: seed {seed} (CAIRN_SEED={seed} replays it)");
        let deadline = Instant::now() + Duration::from_millis(700);
        let threads: Vec<_> = (0..8u64)
            .map(|t| {
                let (cache, published, next_version) = (
                    Arc::clone(&cache),
                    Arc::clone(&published),
                    Arc::clone(&next_version),
                );
                std::thread::spawn(move || {
                    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ t);
                    let mut checked = 0u64;
                    while Instant::now() < deadline {
                        let block = rng.random_range(0..blocks);
                        if t < 2 {
                            // Writer t owns the blocks ≡ t (mod 2), so one
                            // block's versions reach the device in order.
                            let block = block - block % 2 + t;
                            let version = next_version.fetch_add(1, Ordering::SeqCst);
                            let mut data = vec![0u8; BLOCK as usize];
                            for chunk in data.chunks_mut(8) {
                                chunk.copy_from_slice(&version.to_le_bytes());
                            }
                            // Sometimes a partial write (copy-on-write path).
                            let skip = if rng.random_bool(0.3) { 0 } else { 8 };
                            if skip == 0 {
                                cache.write_at(&data, block * BLOCK).unwrap();
                            } else {
                                // The first 8 bytes last, so a reader that
                                // sees the new stamp sees the whole block.
                                cache.write_at(&data[8..], block * BLOCK + 8).unwrap();
                                cache.write_at(&data[..8], block * BLOCK).unwrap();
                            }
                            published[block as usize].fetch_max(version, Ordering::SeqCst);
                        } else {
                            let floor = published[block as usize].load(Ordering::SeqCst);
                            let got = cache.get(block).unwrap();
                            let version = u64::from_le_bytes(got[..8].try_into().unwrap());
                            assert!(
                                version >= floor,
                                "block {block}: read version {version} after {floor} was published"
                            );
                            checked += 1;
                        }
                    }
                    checked
                })
            })
            .collect();
        let checked: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
        assert!(checked > 1000, "{checked}");
        // Quiescent: every block in the cache matches the device.
        for block in 0..blocks {
            let cached = cache.get(block).unwrap();
            let mut on_device = vec![0u8; BLOCK as usize];
            cache
                .device()
                .read_at(&mut on_device, block * BLOCK)
                .unwrap();
            assert_eq!(
                &cached[..],
                &on_device[..],
                "{mode:?} {policy}: block {block}"
            );
        }
    }
}
