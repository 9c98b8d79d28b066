use std::sync::{Arc, Barrier};
use std::time::{Duration, SystemTime};

use cairn_policy::PolicyConfig;

use super::*;
use crate::backend::MemoryBackend;

const MIB: u64 = 1 << 20;

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 12) as u8)
        .collect()
}

fn cache(capacity: u64, policy: &str) -> FileCache<Arc<MemoryBackend>> {
    let backend = Arc::new(MemoryBackend::new());
    let config = FileCacheConfig {
        block_size_bytes: 256 << 10,
        capacity_bytes: capacity,
        policy: PolicyConfig::default_for(policy).expect("a policy"),
        shards: 1,
        ..FileCacheConfig::default()
    };
    FileCache::new(backend, &config).expect("cache")
}

#[test]
fn the_default_is_ons_with_one_mib_blocks() {
    let cache = FileCache::new(MemoryBackend::new(), &FileCacheConfig::default()).expect("cache");
    assert_eq!(cache.policy_name(), "ons");
    assert_eq!(cache.block_size(), MIB);
}

#[test]
fn block_sizes_and_unservable_policies_are_refused() {
    for (size, ok) in [
        (128 << 10, false),
        (256 << 10, true),
        (3 * MIB, false),
        (4 * MIB, true),
        (8 * MIB, false),
    ] {
        let config = FileCacheConfig {
            block_size_bytes: size,
            capacity_bytes: 64 * MIB,
            ..FileCacheConfig::default()
        };
        assert_eq!(config.validate().is_ok(), ok, "{size}");
    }
    let opt = FileCacheConfig {
        policy: PolicyConfig::default_for("opt").expect("opt"),
        ..FileCacheConfig::default()
    };
    let error = opt.validate().expect_err("opt").to_string();
    assert!(error.contains("ons or lru"), "{error}");
    let dual = FileCacheConfig {
        policy: PolicyConfig::default_for("dual").expect("dual"),
        ..FileCacheConfig::default()
    };
    assert_eq!(
        dual.validate().expect("dual serves"),
        1,
        "one shard: the preface formula sees every file"
    );
    let tiny = FileCacheConfig {
        capacity_bytes: MIB,
        shards: 2,
        ..FileCacheConfig::default()
    };
    assert!(matches!(
        tiny.validate(),
        Err(FileCacheError::Capacity { .. })
    ));
}

#[test]
fn blocks_hold_the_objects_bytes_and_hits_share_the_buffer() {
    let cache = cache(16 * MIB, "ons");
    let bytes = pattern(600 << 10, 3);
    cache
        .backend()
        .put("a", bytes.clone(), SystemTime::UNIX_EPOCH);
    let object = cache.open("a").expect("open");
    let mut whole = Vec::new();
    for index in 0..3 {
        whole.extend_from_slice(&cache.block("a", &object, index).expect("block"));
    }
    assert_eq!(
        whole, bytes,
        "the last block holds only the remaining bytes"
    );
    let again = cache.block("a", &object, 1).expect("hit");
    assert!(again.same_buffer(&cache.block("a", &object, 1).expect("hit")));
    assert!(cache.block("a", &object, 3).is_err(), "past the end");
    let stats = cache.stats();
    assert_eq!((stats.misses, stats.hits), (3, 2));
    assert_eq!(stats.bytes_from_backend, 600 << 10);
    assert_eq!(stats.bytes_from_cache, 2 * (256 << 10));
    assert_eq!(cache.backend().reads(), 3);
}

#[test]
fn concurrent_readers_of_a_cold_block_cause_one_backend_read() {
    let cache = Arc::new(cache(16 * MIB, "ons"));
    cache
        .backend()
        .put("big", pattern(MIB as usize, 9), SystemTime::UNIX_EPOCH);
    cache.backend().set_delay(Duration::from_millis(200));
    let readers = 24;
    let barrier = Arc::new(Barrier::new(readers));
    let handles: Vec<_> = (0..readers)
        .map(|_| {
            let cache = Arc::clone(&cache);
            let barrier = Arc::clone(&barrier);
            std::thread::spawn(move || {
                let object = cache.open("big").expect("open");
                barrier.wait();
                cache.block("big", &object, 2).expect("block")
            })
        })
        .collect();
    let blocks: Vec<_> = handles
        .into_iter()
        .map(|h| h.join().expect("join"))
        .collect();
    assert_eq!(
        cache.backend().reads(),
        1,
        "one backend read for {readers} readers"
    );
    assert!(blocks.iter().all(|b| b.same_buffer(&blocks[0])));
    assert_eq!(
        &blocks[0][..],
        &pattern(MIB as usize, 9)[512 << 10..768 << 10]
    );
    let stats = cache.stats();
    assert_eq!(stats.misses, 1);
    assert_eq!(stats.coalesced + stats.hits, readers as u64 - 1);
}

#[test]
fn a_failed_read_is_shared_by_its_waiters_and_never_cached() {
    let cache = Arc::new(cache(16 * MIB, "lru"));
    cache
        .backend()
        .put("f", pattern(300 << 10, 1), SystemTime::UNIX_EPOCH);
    cache.backend().set_delay(Duration::from_millis(100));
    cache.backend().fail_next_read(BackendErrorKind::Timeout);
    let object = cache.open("f").expect("open");
    let waiters: Vec<_> = (0..4)
        .map(|_| {
            let cache = Arc::clone(&cache);
            std::thread::spawn(move || cache.block("f", &object, 0).map(|_| ()))
        })
        .collect();
    for waiter in waiters {
        let result = waiter.join().expect("join");
        assert_eq!(result.expect_err("failed").kind, BackendErrorKind::Timeout);
    }
    assert_eq!(cache.backend().reads(), 1);
    cache.backend().set_delay(Duration::ZERO);
    let block = cache
        .block("f", &object, 0)
        .expect("the next reader retries");
    assert_eq!(&block[..], &pattern(300 << 10, 1)[..256 << 10]);
    let stats = cache.stats();
    assert_eq!(
        (
            stats.backend_errors.timeout,
            stats.misses,
            stats.resident_blocks
        ),
        (1, 1, 1)
    );
}

#[test]
fn a_changed_object_is_read_anew() {
    let cache = cache(16 * MIB, "ons");
    cache
        .backend()
        .put("v", vec![1; 1000], SystemTime::UNIX_EPOCH);
    let old = cache.open("v").expect("open");
    assert_eq!(cache.block("v", &old, 0).expect("block")[0], 1);
    cache.backend().put(
        "v",
        vec![2; 1000],
        SystemTime::UNIX_EPOCH + Duration::from_secs(5),
    );
    let new = cache.open("v").expect("open");
    assert_ne!(old, new);
    assert_eq!(cache.block("v", &new, 0).expect("block")[0], 2);
    assert_eq!(
        cache.open("v").expect("open"),
        new,
        "same version, same number"
    );
}

#[test]
fn every_servable_policy_keeps_the_cache_within_capacity() {
    let mut built = 0;
    for &name in PolicyConfig::NAMES {
        let policy = PolicyConfig::default_for(name).expect(name);
        let config = FileCacheConfig {
            block_size_bytes: 256 << 10,
            capacity_bytes: 2 * MIB,
            policy,
            shards: 1,
            ..FileCacheConfig::default()
        };
        let Ok(cache) = FileCache::new(MemoryBackend::new(), &config) else {
            assert!(
                config.validate().is_err(),
                "{name} validated but did not build"
            );
            continue;
        };
        cache
            .backend()
            .put("x", pattern(4 * MIB as usize, 5), SystemTime::UNIX_EPOCH);
        let object = cache.open("x").expect("open");
        for round in 0..3 {
            for index in [0, 1, 2, 3, 0, 1, 9, 10, 11, 12, 13, 14, 15, 0] {
                let block = cache.block("x", &object, index).expect(name);
                let start = (index * (256 << 10)) as usize;
                assert_eq!(
                    block[7],
                    pattern(4 * MIB as usize, 5)[start + 7],
                    "{name} round {round}"
                );
            }
        }
        let stats = cache.stats();
        assert!(
            stats.resident_blocks <= 8,
            "{name}: {} resident",
            stats.resident_blocks
        );
        assert_eq!(stats.misses + stats.hits, 42, "{name}");
        built += 1;
    }
    assert!(built >= 40, "only {built} policies serve");
}

#[test]
fn readers_who_waited_count_as_accesses_for_the_policy() {
    // LFU over 2 blocks: block 0 read by 10 readers at once (1 load + 9
    // waits), block 1 by one reader then 3 hits. Loading block 2 must evict
    // block 1 (4 accesses), not block 0 (10) — only if the waits counted.
    let cache = Arc::new(cache(512 << 10, "lfu"));
    cache
        .backend()
        .put("f", pattern(MIB as usize, 3), SystemTime::UNIX_EPOCH);
    cache.backend().set_delay(Duration::from_millis(150));
    let object = cache.open("f").expect("open");
    let barrier = Arc::new(Barrier::new(10));
    let readers: Vec<_> = (0..10)
        .map(|_| {
            let (cache, barrier) = (Arc::clone(&cache), Arc::clone(&barrier));
            std::thread::spawn(move || {
                barrier.wait();
                cache.block("f", &object, 0).map(|_| ())
            })
        })
        .collect();
    for reader in readers {
        reader.join().expect("join").expect("block 0");
    }
    assert!(cache.stats().coalesced >= 5, "{:?}", cache.stats());
    cache.backend().set_delay(Duration::ZERO);
    for _ in 0..4 {
        cache.block("f", &object, 1).expect("block 1");
    }
    cache.block("f", &object, 2).expect("block 2");
    let reads = cache.backend().reads();
    cache.block("f", &object, 0).expect("block 0 again");
    assert_eq!(
        cache.backend().reads(),
        reads,
        "block 0 was evicted: the waits did not count"
    );
    cache.block("f", &object, 1).expect("block 1 again");
    assert_eq!(
        cache.backend().reads(),
        reads + 1,
        "block 1 should have been the victim"
    );
}

/// A dual cache of 40 blocks of 256 KiB (an FPC of 4) with the preface
/// pinned at `preface` blocks.
fn dual_cache(preface: u64) -> FileCache<Arc<MemoryBackend>> {
    let backend = Arc::new(MemoryBackend::new());
    let dual = cairn_policy::dual::DualConfig {
        preface_min_blocks: preface,
        preface_max_blocks: preface,
        ..cairn_policy::dual::DualConfig::default()
    };
    let config = FileCacheConfig {
        block_size_bytes: 256 << 10,
        capacity_bytes: 10 * MIB,
        policy: PolicyConfig::Dual(dual),
        shards: 0,
        ..FileCacheConfig::default()
    };
    let cache = FileCache::new(backend, &config).expect("dual");
    assert_eq!((cache.policy_name(), cache.shards()), ("dual", 1));
    cache
}

/// Reads `indices` of `key`; returns how many went to the backend.
fn read_blocks(
    cache: &FileCache<Arc<MemoryBackend>>,
    key: &str,
    indices: impl IntoIterator<Item = u64>,
) -> u64 {
    let before = cache.backend().reads();
    let object = cache.open(key).expect("open");
    for index in indices {
        cache.block(key, &object, index).expect("block");
    }
    cache.backend().reads() - before
}

#[test]
fn dual_keeps_a_preface_while_the_residual_part_churns() {
    let dual = dual_cache(2);
    let backend = dual.backend();
    backend.put("movie", pattern(8 << 20, 1), SystemTime::UNIX_EPOCH);
    backend.put("stream", pattern(64 << 20, 2), SystemTime::UNIX_EPOCH);
    assert_eq!(read_blocks(&dual, "movie", 0..4), 4);
    // 200 blocks of another file's residual part through a 36-block RPC.
    assert_eq!(read_blocks(&dual, "stream", 2..202), 200);
    assert_eq!(
        read_blocks(&dual, "movie", 0..2),
        0,
        "the preface stayed in the FPC"
    );
    assert_eq!(
        read_blocks(&dual, "movie", 2..4),
        2,
        "the rest of the file churned out of the RPC"
    );
    assert_eq!(read_blocks(&dual, "stream", 2..3), 1);
    // The same reads through one LRU cache of the same size lose the preface.
    let lru = cache(10 * MIB, "lru");
    lru.backend()
        .put("movie", pattern(8 << 20, 1), SystemTime::UNIX_EPOCH);
    lru.backend()
        .put("stream", pattern(64 << 20, 2), SystemTime::UNIX_EPOCH);
    read_blocks(&lru, "movie", 0..4);
    read_blocks(&lru, "stream", 2..202);
    assert_eq!(read_blocks(&lru, "movie", 0..2), 2);
}

#[test]
fn stats_read_the_levels_and_name_them() {
    let lru = cache(MIB, "lru");
    lru.backend()
        .put("a", pattern(300 << 10, 1), SystemTime::UNIX_EPOCH);
    assert_eq!(read_blocks(&lru, "a", 0..2), 2);
    assert_eq!(read_blocks(&lru, "a", 1..2), 0);
    let stats = lru.stats();
    // A whole block and the 44 KiB tail.
    assert_eq!(
        (stats.resident_blocks, stats.resident_bytes),
        (2, 300 << 10)
    );
    assert_eq!((stats.hits, stats.misses), (1, 2));
    assert_eq!(stats.bytes_from_cache, 44 << 10, "the tail block's bytes");
    assert_eq!(stats.capacity_bytes, MIB);
    assert_eq!(stats.files, None, "lru keeps no files");
    let named = |stats: &FileCacheStats| -> Vec<(String, u64)> {
        stats
            .metrics()
            .into_iter()
            .map(|m| (m.name, m.value.as_f64() as u64))
            .collect()
    };
    let metrics = named(&stats);
    assert!(metrics.contains(&("hits".into(), 1)), "{metrics:?}");
    assert!(metrics.contains(&("resident_bytes".into(), 300 << 10)));
    assert!(!metrics.iter().any(|(name, _)| name.starts_with("dual_")));
    let dual = dual_cache(2);
    dual.backend()
        .put("a", pattern(2 << 20, 1), SystemTime::UNIX_EPOCH);
    dual.backend()
        .put("b", pattern(2 << 20, 2), SystemTime::UNIX_EPOCH);
    read_blocks(&dual, "a", 0..3);
    read_blocks(&dual, "b", 0..1);
    let state = dual.stats().files.expect("dual keeps files");
    assert_eq!((state.preface_blocks, state.active_files), (2, 2));
    let metrics = named(&dual.stats());
    assert!(
        metrics.contains(&("dual_preface_blocks".into(), 2)),
        "{metrics:?}"
    );
    assert!(
        metrics.contains(&("dual_active_files".into(), 2)),
        "{metrics:?}"
    );
}

#[test]
fn dual_evicts_the_least_recent_files_whole_preface() {
    // FPC: 4 blocks; prefaces of 2.
    let dual = dual_cache(2);
    for (key, seed) in [("a", 1), ("b", 2), ("c", 3)] {
        dual.backend()
            .put(key, pattern(2 << 20, seed), SystemTime::UNIX_EPOCH);
    }
    assert_eq!(read_blocks(&dual, "a", 0..2), 2);
    assert_eq!(read_blocks(&dual, "b", 0..2), 2);
    assert_eq!(dual.stats().resident_blocks, 4);
    // c's preface needs room: all of a's (the least recent file) leaves.
    assert_eq!(read_blocks(&dual, "c", 0..1), 1);
    assert_eq!(dual.stats().resident_blocks, 3, "both of a's blocks left");
    assert_eq!(read_blocks(&dual, "b", 0..2), 0, "b's preface stays");
    assert_eq!(read_blocks(&dual, "a", 1..2), 1, "a's block 1 left too");
}

#[test]
fn revalidate_trusts_the_backends_answer_for_its_duration() {
    let backend = Arc::new(MemoryBackend::new());
    let later = SystemTime::UNIX_EPOCH + Duration::from_secs(1);
    backend.put("v", vec![1; 1000], SystemTime::UNIX_EPOCH);
    // Zero: every open asks the backend.
    let every = FileCache::new(Arc::clone(&backend), &FileCacheConfig::default()).expect("cache");
    for _ in 0..5 {
        every.open("v").expect("open");
    }
    assert_eq!(backend.stats(), 5);

    let ttl = Duration::from_millis(300);
    let config = FileCacheConfig {
        revalidate: ttl,
        ..FileCacheConfig::default()
    };
    let trusting = FileCache::new(Arc::clone(&backend), &config).expect("cache");
    let start = std::time::Instant::now();
    let first = trusting.open("v").expect("open");
    for _ in 0..5 {
        assert_eq!(trusting.open("v").expect("open").number, first.number);
    }
    // A change within the duration is not seen yet...
    backend.put("v", vec![2; 2000], later);
    let stale = trusting.open("v").expect("open");
    if start.elapsed() < ttl {
        assert_eq!((stale.number, stale.info.size), (first.number, 1000));
        assert_eq!(backend.stats(), 6, "one stat for seven opens");
    }
    // ...and is after it, as a new version.
    std::thread::sleep(ttl);
    let fresh = trusting.open("v").expect("open");
    assert_ne!(fresh.number, first.number);
    assert_eq!(fresh.info.size, 2000);
    // A missing object is asked about every time (no negative caching).
    let stats = backend.stats();
    for _ in 0..3 {
        assert!(trusting.open("missing").is_err());
    }
    assert_eq!(backend.stats(), stats + 3);
}

/// A cache of `window` blocks of readahead over `servers` memory backends
/// striped in 256 KiB stripes, each throttled to `op_ms` per read, one at a
/// time; `files` written striped.
fn striped_cache(
    servers: usize,
    op_ms: f64,
    window: u64,
    capacity: u64,
    policy: &str,
    files: &[(&str, &[u8])],
) -> FileCache<crate::backend::StripedBackend<crate::backend::ThrottledBackend<MemoryBackend>>> {
    let unit = 256usize << 10;
    let throttle = cairn_store::Throttle {
        op_us: op_ms * 1000.0,
        seek_us: 0.0,
        bandwidth_mb_s: 1e6,
    };
    let parts: Vec<_> = (0..servers)
        .map(|server| {
            let memory = MemoryBackend::new();
            for &(key, bytes) in files {
                let part: Vec<u8> = bytes
                    .chunks(unit)
                    .enumerate()
                    .filter(|(stripe, _)| stripe % servers == server)
                    .flat_map(|(_, chunk)| chunk.iter().copied())
                    .collect();
                memory.put(key, part, SystemTime::UNIX_EPOCH);
            }
            crate::backend::ThrottledBackend::new(memory, throttle)
        })
        .collect();
    let backend = crate::backend::StripedBackend::new(parts, unit as u64).expect("striped");
    let config = FileCacheConfig {
        block_size_bytes: unit as u64,
        capacity_bytes: capacity,
        policy: PolicyConfig::default_for(policy).expect("a policy"),
        shards: 1,
        prefetch_window_blocks: window,
        ..FileCacheConfig::default()
    };
    FileCache::new(backend, &config).expect("cache")
}

/// Reads every block of `key` in order; returns the time taken.
fn read_through<B: Backend>(cache: &FileCache<B>, key: &str, bytes: &[u8]) -> Duration {
    let start = std::time::Instant::now();
    let object = cache.open(key).expect("open");
    let mut whole = Vec::new();
    for index in 0..(bytes.len() as u64).div_ceil(256 << 10) {
        whole.extend_from_slice(&cache.block(key, &object, index).expect("block"));
    }
    assert!(whole == bytes, "{key}: the bytes read are the object's");
    start.elapsed()
}

#[test]
fn a_sequential_reader_finds_the_blocks_read_ahead_on_every_server() {
    let bytes = pattern(32 * (256 << 10) - 1000, 5);
    let files = [("movie", &bytes[..])];
    let without = striped_cache(4, 15.0, 0, 64 * MIB, "lru", &files);
    let slow = read_through(&without, "movie", &bytes);
    let stats = without.stats();
    assert_eq!(
        (stats.misses, stats.hits, stats.prefetch_issued),
        (32, 0, 0)
    );

    // 2 stripes × 4 servers.
    let with = striped_cache(4, 15.0, 8, 64 * MIB, "lru", &files);
    let fast = read_through(&with, "movie", &bytes);
    with.wait_for_prefetches();
    let stats = with.stats();
    println!("without readahead {slow:?}, with {fast:?}; {stats:?}");
    assert_eq!(stats.misses, 1, "only block 0 is a demand read");
    assert_eq!(stats.hits + stats.coalesced, 31);
    assert_eq!(
        (
            stats.prefetch_issued,
            stats.prefetch_used,
            stats.prefetch_wasted,
            stats.prefetch_dropped
        ),
        (31, 31, 0, 0),
        "the window stops at the object's last block"
    );
    assert_eq!(stats.bytes_from_backend, bytes.len() as u64);
    // 32 reads of 15 ms one after another, against 8 per server in parallel.
    assert!(
        fast.as_secs_f64() < 0.6 * slow.as_secs_f64(),
        "{fast:?} vs {slow:?}"
    );
    let servers = with.backend().servers();
    assert!(
        servers.iter().all(|s| s.inner().reads() == 8),
        "each block read once, 8 on each server"
    );
}

#[test]
fn read_ahead_blocks_left_unread_count_as_wasted_when_evicted() {
    let a = pattern(40 * (256 << 10), 1);
    let b = pattern(40 * (256 << 10), 2);
    // 8 blocks of cache, a window of 6: reading 2 blocks of each file then
    // jumping leaves most of each window unread, and evicted.
    let cache = striped_cache(2, 0.0, 6, 2 * MIB, "lru", &[("a", &a), ("b", &b)]);
    for key in ["a", "b", "a", "b"] {
        let object = cache.open(key).expect("open");
        for index in [0, 1, 30] {
            cache.block(key, &object, index).expect("block");
            cache.wait_for_prefetches();
        }
    }
    let stats = cache.stats();
    println!("{stats:?}");
    assert!(stats.prefetch_issued >= 8, "{stats:?}");
    assert!(stats.prefetch_used >= 2, "{stats:?}");
    assert!(stats.prefetch_wasted >= 4, "{stats:?}");
    assert!(
        stats.prefetch_used + stats.prefetch_wasted <= stats.prefetch_issued,
        "{stats:?}"
    );
    assert!(stats.resident_blocks <= 8);
}

#[test]
fn readahead_under_concurrent_readers_never_returns_wrong_bytes() {
    let files: Vec<(String, Vec<u8>)> = (0..6)
        .map(|i| {
            let len = (5 + 7 * i) * (256 << 10) + 333 * i;
            (format!("f{i}"), pattern(len, i as u8))
        })
        .collect();
    let refs: Vec<(&str, &[u8])> = files.iter().map(|(k, b)| (&k[..], &b[..])).collect();
    for policy in ["lru", "dual", "ons"] {
        // 12 blocks of cache: windows are evicted while they are read.
        let cache = Arc::new(striped_cache(4, 1.0, 8, 3 * MIB, policy, &refs));
        let readers: Vec<_> = (0..8u64)
            .map(|reader| {
                let cache = Arc::clone(&cache);
                let files = files.clone();
                std::thread::spawn(move || {
                    let mut state = reader * 0x9e37_79b9 + 1;
                    for _ in 0..60 {
                        state ^= state << 13;
                        state ^= state >> 7;
                        state ^= state << 17;
                        let (key, bytes) = &files[(state % 6) as usize];
                        let object = cache.open(key).expect("open");
                        let blocks = (bytes.len() as u64).div_ceil(256 << 10);
                        // A sequential run from the start or from anywhere.
                        let first = if state % 3 == 0 {
                            0
                        } else {
                            (state >> 8) % blocks
                        };
                        for index in first..blocks.min(first + 6) {
                            let block = cache.block(key, &object, index).expect("block");
                            let at = (index << 18) as usize;
                            assert!(
                                block[..] == bytes[at..(at + (256 << 10)).min(bytes.len())],
                                "{key} block {index}"
                            );
                        }
                    }
                })
            })
            .collect();
        for reader in readers {
            reader.join().expect("a reader");
        }
        cache.wait_for_prefetches();
        let stats = cache.stats();
        println!("{policy}: {stats:?}");
        assert!(
            stats.prefetch_issued > 0 && stats.prefetch_used > 0,
            "{policy}"
        );
        assert!(stats.resident_blocks <= 12, "{policy}");
        assert_eq!(stats.backend_errors.total(), 0);
    }
}

#[test]
fn a_failed_read_ahead_leaves_nothing_behind() {
    let bytes = pattern(10 * (256 << 10), 4);
    let backend = Arc::new(MemoryBackend::new());
    backend.put("f", bytes.clone(), SystemTime::UNIX_EPOCH);
    let config = FileCacheConfig {
        block_size_bytes: 256 << 10,
        capacity_bytes: 16 * MIB,
        policy: PolicyConfig::default_for("lru").expect("lru"),
        shards: 1,
        prefetch_window_blocks: 1,
        ..FileCacheConfig::default()
    };
    let cache = FileCache::new(Arc::clone(&backend), &config).expect("cache");
    let object = cache.open("f").expect("open");
    cache.block("f", &object, 0).expect("block 0");
    cache.wait_for_prefetches();
    // Block 1 was read ahead; block 2's read ahead (after block 1) fails.
    backend.fail_next_read(BackendErrorKind::Retryable);
    assert_eq!(
        &cache.block("f", &object, 1).expect("1")[..],
        &bytes[256 << 10..512 << 10]
    );
    cache.wait_for_prefetches();
    let stats = cache.stats();
    assert_eq!(
        (stats.prefetch_issued, stats.backend_errors.total()),
        (2, 1)
    );
    // The demand read of block 2 reads it again and gets the bytes.
    assert_eq!(
        &cache.block("f", &object, 2).expect("2")[..],
        &bytes[512 << 10..768 << 10]
    );
    let stats = cache.stats();
    assert_eq!((stats.misses, stats.hits), (2, 1));
    assert!(
        FileCacheConfig {
            prefetch_window_blocks: PREFETCH_WINDOW_MAX + 1,
            ..FileCacheConfig::default()
        }
        .validate()
        .is_err()
    );
}

#[test]
fn a_let_go_blocks_buffer_is_read_into_again_and_never_shows_its_old_bytes() {
    // 1 MiB of LRU (4 blocks) over two 2 MiB objects: every block read past
    // the fourth evicts one, whose buffer the next read reuses.
    let cache = cache(MIB, "lru");
    let (a, b) = (
        pattern((2 * MIB) as usize, 1),
        pattern((2 * MIB) as usize, 2),
    );
    cache.backend().put("a", a.clone(), SystemTime::UNIX_EPOCH);
    cache.backend().put("b", b.clone(), SystemTime::UNIX_EPOCH);
    let block = 256usize << 10;
    let mut used = std::collections::HashSet::new();
    let object = cache.open("a").expect("open");
    for i in 0..8u64 {
        let got = cache.block("a", &object, i).expect("a");
        assert!(got[..] == a[i as usize * block..][..block], "a block {i}");
        used.insert(got.as_ptr() as usize);
    }
    assert!(
        cache.buffers.idle() >= 1,
        "evicted blocks gave their buffers back"
    );
    // A failed read gives its buffer back too; none of its bytes are served.
    let object = cache.open("b").expect("open");
    cache.backend().fail_next_read(BackendErrorKind::Timeout);
    cache.block("b", &object, 0).expect_err("failed");
    let mut reused = 0;
    for i in 0..8u64 {
        let got = cache.block("b", &object, i).expect("b");
        assert!(got[..] == b[i as usize * block..][..block], "b block {i}");
        reused += usize::from(used.contains(&(got.as_ptr() as usize)));
    }
    assert!(
        reused >= 4,
        "{reused} of b's 8 blocks were read into a's buffers"
    );
    assert!(cache.buffers.idle() <= crate::limits::IDLE_BUFFERS);
}
