//! The single-flight and invalidation paths under shuttle's randomized
//! scheduler: every lock, wait and atomic of the cache is a scheduling point
//! (the cache's `sync` module switches to shuttle's primitives with the
//! `shuttle` feature), and each test explores thousands of interleavings.
//! Run with `cargo test --release -p cairn-store --features shuttle --test
//! cache_shuttle` (test.sh does).
#![cfg(feature = "shuttle")]
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use cairn_store::{BlockCache, CacheConfig, Device, MemoryDevice, WriteMode};
use common::CountingDevice;
use shuttle::thread;

const BLOCK: u64 = 4096;
const ITERATIONS: usize = 3000;

fn config(mode: WriteMode, capacity_blocks: u64) -> CacheConfig {
    CacheConfig {
        block_size_bytes: BLOCK,
        capacity_bytes: capacity_blocks * BLOCK,
        shards: 1,
        write_mode: mode,
        readahead_bytes: BLOCK,
        ..CacheConfig::default()
    }
}

#[test]
fn concurrent_misses_of_one_block_read_the_device_once() {
    shuttle::check_random(
        || {
            let device = Arc::new(CountingDevice::new(
                8 * BLOCK,
                BLOCK,
                std::time::Duration::ZERO,
            ));
            device.write_at(&[3; BLOCK as usize], 0).unwrap();
            let cache = Arc::new(
                BlockCache::new(Arc::clone(&device), &config(WriteMode::Update, 8)).unwrap(),
            );
            let readers: Vec<_> = (0..3)
                .map(|_| {
                    let cache = Arc::clone(&cache);
                    thread::spawn(move || cache.get(0).unwrap())
                })
                .collect();
            let got: Vec<_> = readers.into_iter().map(|r| r.join().unwrap()).collect();
            assert_eq!(device.reads(0), 1);
            assert!(got.iter().all(|b| b.same_buffer(&got[0]) && b[0] == 3));
            assert!(!device.overlapped.load(std::sync::atomic::Ordering::SeqCst));
        },
        ITERATIONS,
    );
}

/// A reader and a writer race on one block; once the writer has returned, a
/// new read sees the new bytes, and the racing reader saw old or new whole.
#[test]
fn a_read_after_a_write_returns_sees_it_in_both_modes() {
    for mode in [WriteMode::Update, WriteMode::Invalidate] {
        shuttle::check_random(
            move || {
                let device = Arc::new(MemoryDevice::new(8 * BLOCK));
                device.write_at(&[1; BLOCK as usize], 0).unwrap();
                let cache =
                    Arc::new(BlockCache::new(Arc::clone(&device), &config(mode, 2)).unwrap());
                let reader = {
                    let cache = Arc::clone(&cache);
                    thread::spawn(move || {
                        let mut buf = vec![0u8; BLOCK as usize];
                        cache.read_at(&mut buf, 0).unwrap();
                        buf
                    })
                };
                let writer = {
                    let cache = Arc::clone(&cache);
                    thread::spawn(move || cache.write_at(&[2; 100], 50).unwrap())
                };
                writer.join().unwrap();
                let after = cache.get(0).unwrap();
                assert!(
                    after[50..150].iter().all(|&b| b == 2),
                    "{mode:?}: stale read"
                );
                let raced = reader.join().unwrap();
                assert!(raced[50..150] == [1; 100] || raced[50..150] == [2; 100]);
                // Quiescent: the cache agrees with the device.
                let mut on_device = vec![0u8; BLOCK as usize];
                device.read_at(&mut on_device, 0).unwrap();
                assert_eq!(&cache.get(0).unwrap()[..], &on_device[..]);
            },
            ITERATIONS,
        );
    }
}

/// Two writers of one block, readers of it and of a neighbour in a cache of
/// two blocks (so loads, evictions and writes interleave): when all are done
/// every block reads what the device holds.
#[test]
fn racing_writes_loads_and_evictions_leave_the_cache_equal_to_the_device() {
    for mode in [
        WriteMode::Update,
        WriteMode::Invalidate,
        WriteMode::Allocate,
    ] {
        shuttle::check_random(
            move || {
                let device = Arc::new(MemoryDevice::new(8 * BLOCK));
                let cache =
                    Arc::new(BlockCache::new(Arc::clone(&device), &config(mode, 2)).unwrap());
                let mut threads = Vec::new();
                for byte in [5u8, 6] {
                    let cache = Arc::clone(&cache);
                    threads.push(thread::spawn(move || {
                        cache.write_at(&[byte; BLOCK as usize], BLOCK).unwrap();
                    }));
                }
                for block in [1u64, 2, 1] {
                    let cache = Arc::clone(&cache);
                    threads.push(thread::spawn(move || {
                        let got = cache.get(block).unwrap();
                        assert!(got.iter().all(|&b| b == got[0]), "torn block");
                    }));
                }
                for t in threads {
                    t.join().unwrap();
                }
                for block in 0..4 {
                    let mut on_device = vec![0u8; BLOCK as usize];
                    device.read_at(&mut on_device, block * BLOCK).unwrap();
                    assert_eq!(
                        &cache.get(block).unwrap()[..],
                        &on_device[..],
                        "{mode:?}: block {block}"
                    );
                }
            },
            ITERATIONS,
        );
    }
}
