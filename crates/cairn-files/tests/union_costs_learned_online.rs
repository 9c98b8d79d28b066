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

/// docs/benchmarks.md's measurement (ignored by default, ~15 s): a union of
/// a fast directory (page-cached, not slowed) and a slow one (2 ms a read at
/// 50 MB/s), objects of 2 blocks equally popular on both, skewed popularity,
/// a cache of a quarter of the data; the same requests under `lru` and
/// `cost`. Prints the mean request time, each member's reads and read time.
/// `cargo test --profile ci -p cairn-files --test union_costs_learned_online -- --ignored --nocapture`
#[test]
#[ignore = "a measurement (~15 s); docs/benchmarks.md"]
fn measure_cost_against_lru_on_a_fast_and_a_slow_directory() {
    const OBJECTS_PER_DIR: usize = 32;
    const BLOCKS: u64 = 2;
    const REQUESTS: usize = 1500;
    let root = tempfile::tempdir().expect("tempdir");
    for (dir, byte) in [("fast", 1u8), ("slow", 2u8)] {
        std::fs::create_dir(root.path().join(dir)).expect("mkdir");
        for i in 0..OBJECTS_PER_DIR {
            let path = root.path().join(dir).join(format!("{dir}{i}"));
            std::fs::write(path, vec![byte; (BLOCKS * BLOCK) as usize]).expect("write");
        }
    }
    let slow = Throttle {
        op_us: 2000.0,
        seek_us: 0.0,
        bandwidth_mb_s: 50.0,
    };
    let mut lines: Vec<String> = Vec::new();
    let mut totals = Vec::new();
    for policy in ["lru", "cost"] {
        let members: Vec<Arc<dyn Backend>> = vec![
            Arc::new(cairn_files::DirBackend::open(&root.path().join("fast")).expect("fast")),
            Arc::new(ThrottledBackend::new(
                cairn_files::DirBackend::open(&root.path().join("slow")).expect("slow"),
                slow,
            )),
        ];
        let backend: Arc<dyn Backend> = Arc::new(UnionBackend::new(members).expect("union"));
        let config = FileCacheConfig {
            block_size_bytes: BLOCK,
            // A quarter of the 128 blocks.
            capacity_bytes: BLOCK * BLOCKS * OBJECTS_PER_DIR as u64 / 2,
            policy: cairn_policy::PolicyConfig::default_for(policy).expect("policy"),
            shards: 1,
            ..FileCacheConfig::default()
        };
        let cache = FileCache::new(backend, &config).expect("cache");
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let start = std::time::Instant::now();
        for _ in 0..REQUESTS {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Skewed: rank r with probability ∝ the square's density.
            let u = (x >> 11) as f64 / (1u64 << 53) as f64;
            let rank = ((u * u) * (2 * OBJECTS_PER_DIR) as f64) as usize;
            let (dir, i) = if rank.is_multiple_of(2) {
                ("fast", rank / 2)
            } else {
                ("slow", rank / 2)
            };
            let key = format!("{dir}{i}");
            let object = cache.open(&key).expect("open");
            for index in 0..BLOCKS {
                cache.block(&key, &object, index).expect("block");
            }
        }
        let elapsed = start.elapsed();
        let groups = cache.backend_groups();
        let value = |name: &str| {
            let (backend, metric) = name.split_once('/').expect("BACKEND/METRIC");
            groups
                .iter()
                .find(|g| g.name == backend)
                .and_then(|g| g.metrics.iter().find(|m| m.name == metric))
                .map_or(0.0, |m| m.value.as_f64())
        };
        let stats = cache.stats();
        lines.push(format!(
            "{policy:>4}: mean request {:.2} ms, total {:.2} s; misses {} of {}; fast reads {} ({:.0} ms), slow reads {} ({:.0} ms); costs {:?}",
            elapsed.as_secs_f64() * 1e3 / REQUESTS as f64,
            elapsed.as_secs_f64(),
            stats.misses,
            stats.misses + stats.hits,
            value("0/reads"),
            value("0/read_ns") / 1e6,
            value("1/reads"),
            value("1/read_ns") / 1e6,
            cache
                .backend_costs()
                .map(|c| (c * 10.0).round() / 10.0)
                .collect::<Vec<_>>(),
        ));
        eprintln!("{}", lines.last().expect("a line"));
        totals.push((elapsed.as_secs_f64(), value("1/reads")));
    }
    eprintln!(
        "cost / lru: mean request time {:.2}×, slow-directory reads {:.2}×",
        totals[1].0 / totals[0].0,
        totals[1].1 / totals[0].1
    );
    assert!(
        totals[1].1 < totals[0].1,
        "cost reads the slow directory less"
    );
}
