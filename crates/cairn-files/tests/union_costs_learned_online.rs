//! papers/004 across backends: a union of a fast and a slow (throttled)
//! backend learns each one's cost online from its reads, and with the
//! `cost` policy keeps the slow backend's blocks resident more than LRU
//! does on the same accesses.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use cairn_files::{
    Backend, FileCache, FileCacheConfig, MemoryBackend, ThrottledBackend, UnionBackend,
};
use cairn_store::device::Throttle;

const BLOCK: u64 = 256 << 10;
/// Objects per backend, one block each; the cache holds half of all.
const OBJECTS: usize = 8;

/// `MB/s` only: the model's time is the length over the bandwidth.
fn throttle(bandwidth_mb_s: f64) -> Throttle {
    Throttle {
        op_us: 0.0,
        seek_us: 0.0,
        bandwidth_mb_s,
    }
}

/// A union of a fast (1000 MB/s) and a slow (100 MB/s) backend, and the
/// slow one's inner store (to count its reads).
fn union() -> (Arc<dyn Backend>, Arc<MemoryBackend>) {
    let (fast, slow) = (
        Arc::new(MemoryBackend::new()),
        Arc::new(MemoryBackend::new()),
    );
    let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1);
    for i in 0..OBJECTS {
        fast.put(&format!("fast/{i}"), vec![1; BLOCK as usize], t);
        slow.put(&format!("slow/{i}"), vec![2; BLOCK as usize], t);
    }
    let members: Vec<Arc<dyn Backend>> = vec![
        Arc::new(ThrottledBackend::new(Arc::clone(&fast), throttle(1000.0))),
        Arc::new(ThrottledBackend::new(Arc::clone(&slow), throttle(100.0))),
    ];
    (Arc::new(UnionBackend::new(members).expect("union")), slow)
}

/// Runs the same uniform accesses over every object under `policy`; returns
/// the slow backend's reads and the learned costs.
fn run(policy: &str) -> (u64, Vec<f64>) {
    let (backend, slow) = union();
    let config = FileCacheConfig {
        block_size_bytes: BLOCK,
        capacity_bytes: BLOCK * OBJECTS as u64,
        policy: cairn_policy::PolicyConfig::default_for(policy).expect("policy"),
        shards: 1,
        cost_smoothing: 0.5,
        ..FileCacheConfig::default()
    };
    let cache = FileCache::new(backend, &config).expect("cache");
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    for _ in 0..600 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let i = (x % (2 * OBJECTS as u64)) as usize;
        let key = if i < OBJECTS {
            format!("fast/{i}")
        } else {
            format!("slow/{}", i - OBJECTS)
        };
        let object = cache.open(&key).expect("open");
        assert_eq!(usize::from(object.backend()), usize::from(i >= OBJECTS));
        let block = cache.block(&key, &object, 0).expect("block");
        assert_eq!(block[0], if i < OBJECTS { 1 } else { 2 });
    }
    (slow.reads(), cache.backend_costs().collect())
}

#[test]
fn the_slow_backend_costs_more_and_cost_keeps_its_blocks() {
    let (lru_slow_reads, lru_costs) = run("lru");
    let (cost_slow_reads, costs) = run("cost");
    // Learned under any policy: the slow backend ~10× the fast one (the
    // throttles' bandwidth ratio, by their modelled clocks).
    for costs in [&lru_costs, &costs] {
        assert_eq!(costs.len(), 2);
        assert!((costs[0] - 1.0).abs() < 1e-9, "fast is the unit: {costs:?}");
        assert!((8.0..12.0).contains(&costs[1]), "slow ≈ 10: {costs:?}");
    }
    // Same accesses: cost misses the slow backend far less than LRU.
    assert!(
        cost_slow_reads * 2 < lru_slow_reads,
        "slow-backend reads: cost {cost_slow_reads}, lru {lru_slow_reads}"
    );
    eprintln!("slow-backend reads: lru {lru_slow_reads}, cost {cost_slow_reads}; costs {costs:?}");
}
