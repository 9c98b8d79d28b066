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
