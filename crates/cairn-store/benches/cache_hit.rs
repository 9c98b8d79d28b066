//! The block cache's hit path (issue 5's hit-path bar): 4 KiB gets on a warm
//! cache from 1 and 2 threads, against foyer's in-memory cache
//! (`foyer-memory`, what `foyer::Cache` is) and `moka::sync::Cache`, in the
//! same run.
//!
//! Every cache holds the same working set of [`WORKING_SET`] 4 KiB blocks, all
//! resident (the capacity is twice the working set, so nothing is evicted),
//! and each is read once before timing starts. Keys come from one
//! precomputed uniform-random array; the timed loop only indexes it. What a
//! get returns is each cache's zero-copy handle: Cairn's `BlockRef` (one
//! `Arc` clone of the cached frame), foyer's `CacheEntry` (a handle on the
//! cached record), moka's clone of the `Arc<[u8]>` value. All three run LRU
//! or their default (moka: `TinyLFU`); all are warm, so no policy evicts.
//!
//! An iteration is one get. With 2 threads each thread does half of the
//! iterations, so the time per iteration is the aggregate time per get (the
//! inverse of the throughput of both threads together).
//!
//! After the criterion groups the bench runs the same gets interleaved (each
//! cache in turn, 31 rounds) and prints the median ns/get of each and the
//! median ratio of Cairn to the faster peer: on a shared machine whose load
//! changes from one criterion group to the next, that ratio is the number to
//! read.
//!
//! `cargo bench -p cairn-store --bench cache_hit -- --warm-up-time 1 --measurement-time 3`.
//! Results: docs/benchmarks.md, "Block cache hit path against foyer and moka".

#![allow(clippy::unwrap_used)]

use std::cell::RefCell;
use std::hint::black_box;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use cairn_store::device::BlockSlice;
use cairn_store::device::MemoryDevice;
use cairn_store::{BlockCache, CacheConfig};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Bytes per block.
const BLOCK: u64 = 4096;
/// Distinct blocks read (32 MiB).
const WORKING_SET: u64 = 8192;
/// Rounds of the interleaved comparison after the criterion groups.
const PAIRED_ROUNDS: usize = 31;
/// Gets per cache per round.
const PAIRED_GETS: u64 = 200_000;
/// Keys in the precomputed access sequence (a power of two).
const KEYS: usize = 1 << 16;

thread_local! {
    static OUT: RefCell<Vec<BlockSlice>> = RefCell::new(Vec::with_capacity(4));
}

fn keys(seed: u64) -> Vec<u64> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..KEYS)
        .map(|_| rng.random_range(0..WORKING_SET))
        .collect()
}

/// `iters` gets split over `threads` threads, each starting at its own place
/// in the key array; the wall time from a common start to the last finish.
fn run_threads(threads: usize, iters: u64, keys: &[u64], get: &(impl Fn(u64) + Sync)) -> Duration {
    if threads == 1 {
        let start = Instant::now();
        let mut i = 0usize;
        for _ in 0..iters {
            get(keys[i]);
            i = (i + 1) & (KEYS - 1);
        }
        return start.elapsed();
    }
    let barrier = Barrier::new(threads);
    let per_thread = iters.div_ceil(threads as u64);
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let barrier = &barrier;
                scope.spawn(move || {
                    let mut i = t * (KEYS / threads);
                    barrier.wait();
                    let start = Instant::now();
                    for _ in 0..per_thread {
                        get(keys[i]);
                        i = (i + 1) & (KEYS - 1);
                    }
                    start.elapsed()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .max()
            .unwrap()
    })
}

fn hits(c: &mut Criterion) {
    let keys = keys(5);

    let cairn = BlockCache::new(
        MemoryDevice::new(WORKING_SET * BLOCK),
        &CacheConfig {
            block_size_bytes: BLOCK,
            capacity_bytes: 2 * WORKING_SET * BLOCK,
            ..CacheConfig::default()
        },
    )
    .unwrap();
    let foyer: foyer_memory::Cache<u64, Arc<[u8]>> =
        foyer_memory::CacheBuilder::new(2 * WORKING_SET as usize).build();
    let moka: moka::sync::Cache<u64, Arc<[u8]>> = moka::sync::Cache::new(2 * WORKING_SET);
    for block in 0..WORKING_SET {
        let value: Arc<[u8]> = vec![block as u8; BLOCK as usize].into();
        foyer.insert(block, Arc::clone(&value));
        moka.insert(block, value);
        black_box(cairn.get(block).unwrap());
    }
    moka.run_pending_tasks();
    for &block in &keys {
        assert_eq!(cairn.get(block).unwrap().len(), BLOCK as usize);
        assert!(foyer.get(&block).is_some());
        assert!(moka.get(&block).is_some());
    }
    let warm = cairn.metrics();
    assert_eq!(
        warm.resident_blocks, WORKING_SET,
        "the working set is resident"
    );

    let mut group = c.benchmark_group("cache_hit_4k");
    group.throughput(Throughput::Elements(1));
    for threads in [1usize, 2] {
        group.bench_function(BenchmarkId::new("cairn_get", threads), |b| {
            b.iter_custom(|iters| {
                run_threads(threads, iters, &keys, &|k| {
                    black_box(cairn.get(k).unwrap());
                })
            });
        });
        group.bench_function(BenchmarkId::new("cairn_read_refs", threads), |b| {
            b.iter_custom(|iters| {
                run_threads(threads, iters, &keys, &|k| {
                    // A server's reply vector, reused from request to request.
                    OUT.with_borrow_mut(|out| {
                        out.clear();
                        cairn.read_refs(k * BLOCK, BLOCK, out).unwrap();
                        black_box(&out[0][..]);
                    });
                })
            });
        });
        group.bench_function(BenchmarkId::new("foyer", threads), |b| {
            b.iter_custom(|iters| {
                run_threads(threads, iters, &keys, &|k| {
                    black_box(foyer.get(&k).unwrap());
                })
            });
        });
        group.bench_function(BenchmarkId::new("moka", threads), |b| {
            b.iter_custom(|iters| {
                run_threads(threads, iters, &keys, &|k| {
                    black_box(moka.get(&k).unwrap());
                })
            });
        });
    }
    group.finish();

    // The same gets again, interleaved: round by round each cache runs
    // `PAIRED_GETS` gets in turn, so load from other processes on this
    // shared machine hits all of them alike; the median over rounds of each
    // cache's ns/get and of Cairn's ratio to the faster peer.
    for threads in [1usize, 2] {
        let mut rounds: Vec<[f64; 4]> = Vec::with_capacity(PAIRED_ROUNDS);
        for _ in 0..PAIRED_ROUNDS {
            let ns = |d: Duration| d.as_nanos() as f64 / PAIRED_GETS as f64;
            let get = ns(run_threads(threads, PAIRED_GETS, &keys, &|k| {
                black_box(cairn.get(k).unwrap());
            }));
            let refs = ns(run_threads(threads, PAIRED_GETS, &keys, &|k| {
                OUT.with_borrow_mut(|out| {
                    out.clear();
                    cairn.read_refs(k * BLOCK, BLOCK, out).unwrap();
                    black_box(&out[0][..]);
                });
            }));
            let foyer = ns(run_threads(threads, PAIRED_GETS, &keys, &|k| {
                black_box(foyer.get(&k).unwrap());
            }));
            let moka = ns(run_threads(threads, PAIRED_GETS, &keys, &|k| {
                black_box(moka.get(&k).unwrap());
            }));
            rounds.push([get, refs, foyer, moka]);
        }
        let median = |f: &dyn Fn(&[f64; 4]) -> f64| {
            let mut v: Vec<f64> = rounds.iter().map(f).collect();
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        println!(
            "paired, {threads} thread(s), median of {PAIRED_ROUNDS} rounds of {PAIRED_GETS} gets: \
             cairn get {:.1} ns, cairn read_refs {:.1} ns, foyer {:.1} ns, moka {:.1} ns; \
             cairn get / best peer {:.2}, cairn read_refs / best peer {:.2}",
            median(&|r| r[0]),
            median(&|r| r[1]),
            median(&|r| r[2]),
            median(&|r| r[3]),
            median(&|r| r[0] / r[2].min(r[3])),
            median(&|r| r[1] / r[2].min(r[3])),
        );
    }

    let after = cairn.metrics();
    assert_eq!(after.misses(), warm.misses(), "every timed get was a hit");
}

criterion_group!(benches, hits);
criterion_main!(benches);
