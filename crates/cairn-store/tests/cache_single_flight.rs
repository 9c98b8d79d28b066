//! Single-flight: when many readers want a block that is not cached, the
//! device is read once and every reader gets the same buffer. Without it a
//! streaming server reading one hot file from 50 clients reads every block 50
//! times (papers/000's motivation for sharing one cached buffer).
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::{Arc, Barrier};
use std::time::Duration;

use cairn_policy::PolicyConfig;
use cairn_store::{BlockCache, CacheConfig, Device};
use common::CountingDevice;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const BLOCK: u64 = 64 << 10;
const READERS: usize = 50;

fn pattern(block: u64) -> u8 {
    (block * 31 + 7) as u8
}

fn filled(blocks: u64, delay: Duration) -> Arc<CountingDevice> {
    let device = Arc::new(CountingDevice::new(blocks * BLOCK, BLOCK, delay));
    for block in 0..blocks {
        device
            .write_at(&vec![pattern(block); BLOCK as usize], block * BLOCK)
            .unwrap();
    }
    device
}

#[test]
fn fifty_readers_of_one_missing_block_cause_one_device_read_and_share_its_buffer() {
    let device = filled(4, Duration::from_millis(20));
    let cache = Arc::new(
        BlockCache::new(
            Arc::clone(&device),
            &CacheConfig {
                block_size_bytes: BLOCK,
                capacity_bytes: 16 * BLOCK,
                ..CacheConfig::default()
            },
        )
        .unwrap(),
    );
    let barrier = Arc::new(Barrier::new(READERS));
    let handles: Vec<_> = (0..READERS)
        .map(|_| {
            let (cache, barrier) = (Arc::clone(&cache), Arc::clone(&barrier));
            std::thread::spawn(move || {
                barrier.wait();
                cache.get(2).unwrap()
            })
        })
        .collect();
    let got: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(device.reads(2), 1);
    assert!(got.iter().all(|b| b.same_buffer(&got[0])));
    assert!(got[0].iter().all(|&b| b == pattern(2)));
    let m = cache.metrics();
    assert_eq!(m.misses(), 1);
    assert_eq!(m.hits() + m.coalesced(), READERS as u64 - 1, "{m:?}");
}

/// Every policy the streaming experiment compares, with readahead and
/// request runs: each of 50 threads reads the whole file in 1 MiB requests in
/// its own seeded order; the cache holds the file (with room to spare: a
/// shard holds only its share), so each block leaves the device exactly once.
#[test]
fn each_block_leaves_the_device_once_under_fifty_concurrent_readers() {
    let blocks = 64;
    for policy in ["lru", "lfu", "ons", "cost"] {
        let device = filled(blocks, Duration::from_millis(1));
        let cache = Arc::new(
            BlockCache::new(
                Arc::clone(&device),
                &CacheConfig {
                    block_size_bytes: BLOCK,
                    capacity_bytes: 2 * blocks * BLOCK,
                    policy: PolicyConfig::default_for(policy).unwrap(),
                    shards: 4,
                    ..CacheConfig::default()
                },
            )
            .unwrap(),
        );
        let seed = common::seed();
        println!("{policy}: seed {seed} (CAIRN_SEED={seed} replays it)");
        let threads: Vec<_> = (0..READERS)
            .map(|t| {
                let cache = Arc::clone(&cache);
                std::thread::spawn(move || {
                    let mut rng = ChaCha8Rng::seed_from_u64(seed + t as u64);
                    let per_request = (1 << 20) / BLOCK;
                    let mut requests: Vec<u64> = (0..blocks / per_request).collect();
                    if t % 2 == 1 {
                        requests.shuffle(&mut rng);
                    }
                    let mut buf = vec![0u8; 1 << 20];
                    for request in requests {
                        let first = request * per_request;
                        cache.read_at(&mut buf, first * BLOCK).unwrap();
                        for (i, chunk) in buf.chunks(BLOCK as usize).enumerate() {
                            let want = pattern(first + i as u64);
                            assert!(
                                chunk.iter().all(|&b| b == want),
                                "block {}",
                                first + i as u64
                            );
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let m = cache.metrics();
        assert_eq!(m.resident_blocks, blocks, "{policy}: nothing was evicted");
        for block in 0..blocks {
            assert_eq!(device.reads(block), 1, "{policy}: block {block}: {m:?}");
        }
        assert!(!device.overlapped.load(std::sync::atomic::Ordering::SeqCst));
    }
}

/// With a cache smaller than the working set blocks are evicted and read
/// again, but never twice at once: a block's reads never overlap.
#[test]
fn a_block_is_never_read_twice_at_once_when_the_cache_is_too_small() {
    let blocks = 256;
    let device = filled(blocks, Duration::from_micros(200));
    let cache = Arc::new(
        BlockCache::new(
            Arc::clone(&device),
            &CacheConfig {
                block_size_bytes: BLOCK,
                capacity_bytes: 32 * BLOCK,
                policy: PolicyConfig::default_for("ons").unwrap(),
                shards: 2,
                readahead_bytes: 0,
                ..CacheConfig::default()
            },
        )
        .unwrap(),
    );
    let seed = common::seed();
    println!("seed {seed} (CAIRN_SEED={seed} replays it)");
    let threads: Vec<_> = (0..16)
        .map(|t| {
            let cache = Arc::clone(&cache);
            std::thread::spawn(move || {
                let mut rng = ChaCha8Rng::seed_from_u64(seed + t);
                for _ in 0..400 {
                    // Skewed: most accesses go to the first 48 blocks.
                    let block = if rng.random_bool(0.8) {
                        rng.random_range(0..48)
                    } else {
                        rng.random_range(0..blocks)
                    };
                    let got = cache.get(block).unwrap();
                    assert!(got.iter().all(|&b| b == pattern(block)));
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert!(!device.overlapped.load(std::sync::atomic::Ordering::SeqCst));
    let m = cache.metrics();
    assert_eq!(
        device.total_reads(),
        m.misses(),
        "one device read per miss: {m:?}"
    );
    assert!(m.hits() > 0 && m.misses() > 32);
}
