//! The NTL's DRAM lookup index: the flat table it keeps (`ntl::BlockMap`, one
//! `AtomicU64` per logical block) against the paper's radix tree (a 64-way tree
//! like the Linux kernel's `radix_tree`, 6 bits of the block number per level),
//! on random and sequential lookups over 1 Mi and 16 Mi logical blocks (4 GiB and
//! 64 GiB volumes of 4 KiB blocks), every block mapped to a random data block.
//!
//! `cargo bench -p cairn-store --bench ntl_index`. The faster one is what
//! `ntl::BlockMap` uses; the other lives here so the measurement can be rerun.
//! Results: docs/benchmarks.md.

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};

use cairn_store::ntl::{BlockMap, MmapRegion, PersistenceRequest};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const LOOKUPS: u64 = 1 << 16;
const FANOUT_BITS: u32 = 6;
const FANOUT: usize = 1 << FANOUT_BITS;

/// The paper's index: a radix tree over the block number. Inner slots hold a
/// child's node number + 1 (0 = empty), leaf slots the same 8-byte entry as the
/// flat map. Nodes live in one arena; a lookup is `height` dependent loads.
struct Radix {
    height: u32,
    nodes: Vec<[AtomicU64; FANOUT]>,
}

impl Radix {
    fn new(lbas: u64) -> Self {
        let bits = 64 - (lbas - 1).leading_zeros();
        Self {
            height: bits.div_ceil(FANOUT_BITS).max(1),
            nodes: vec![std::array::from_fn(|_| AtomicU64::new(0))],
        }
    }

    fn insert(&mut self, lba: u64, entry: u64) {
        let mut node = 0usize;
        for level in (1..self.height).rev() {
            let slot = ((lba >> (level * FANOUT_BITS)) as usize) & (FANOUT - 1);
            let child = self.nodes[node][slot].load(Ordering::Relaxed);
            node = if child == 0 {
                self.nodes.push(std::array::from_fn(|_| AtomicU64::new(0)));
                let new = self.nodes.len() - 1;
                self.nodes[node][slot].store(new as u64 + 1, Ordering::Release);
                new
            } else {
                child as usize - 1
            };
        }
        self.nodes[node][(lba as usize) & (FANOUT - 1)].store(entry, Ordering::Release);
    }

    #[inline]
    fn get(&self, lba: u64) -> Option<u64> {
        let mut node = 0usize;
        for level in (1..self.height).rev() {
            let slot = ((lba >> (level * FANOUT_BITS)) as usize) & (FANOUT - 1);
            let child = self.nodes[node][slot].load(Ordering::Acquire);
            if child == 0 {
                return None;
            }
            node = child as usize - 1;
        }
        let entry = self.nodes[node][(lba as usize) & (FANOUT - 1)].load(Ordering::Acquire);
        (entry >> 63 == 1).then_some(entry & ((1 << 48) - 1))
    }
}

/// xorshift64*: cheap enough that the lookups, not the generator, are measured.
#[inline]
fn next(state: &mut u64) -> u64 {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    state.wrapping_mul(0x2545_f491_4f6c_dd1d)
}

fn index(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut group = c.benchmark_group("ntl_index");
    group.throughput(Throughput::Elements(LOOKUPS));
    for lbas in [1u64 << 20, 1 << 24] {
        let data_blocks = lbas + 1024;
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let mut blocks: Vec<u64> = (0..data_blocks).collect();
        blocks.shuffle(&mut rng);
        let path = dir.path().join(format!("map-{lbas}"));
        let region = MmapRegion::open(&path, 64 + lbas * 8, true, PersistenceRequest::None)
            .expect("map the table");
        let flat = BlockMap::load(&region, 64, lbas, data_blocks).expect("empty map");
        let mut radix = Radix::new(lbas);
        for lba in 0..lbas {
            flat.set(&region, lba, blocks[lba as usize]).expect("set");
            radix.insert(lba, (1 << 63) | blocks[lba as usize]);
        }
        for _ in 0..1000 {
            let lba = rng.random_range(0..lbas);
            assert_eq!(flat.get(lba), radix.get(lba), "lba {lba}");
        }
        let name = format!("{}Mi", lbas >> 20);
        group.bench_function(BenchmarkId::new("flat/random", &name), |b| {
            let mut state = 0x9e37_79b9_7f4a_7c15u64;
            b.iter(|| {
                let mut sum = 0u64;
                for _ in 0..LOOKUPS {
                    sum = sum.wrapping_add(flat.get(next(&mut state) % lbas).unwrap_or(0));
                }
                black_box(sum)
            });
        });
        group.bench_function(BenchmarkId::new("radix/random", &name), |b| {
            let mut state = 0x9e37_79b9_7f4a_7c15u64;
            b.iter(|| {
                let mut sum = 0u64;
                for _ in 0..LOOKUPS {
                    sum = sum.wrapping_add(radix.get(next(&mut state) % lbas).unwrap_or(0));
                }
                black_box(sum)
            });
        });
        group.bench_function(BenchmarkId::new("flat/sequential", &name), |b| {
            let mut lba = 0u64;
            b.iter(|| {
                let mut sum = 0u64;
                for _ in 0..LOOKUPS {
                    lba = (lba + 1) % lbas;
                    sum = sum.wrapping_add(flat.get(lba).unwrap_or(0));
                }
                black_box(sum)
            });
        });
        group.bench_function(BenchmarkId::new("radix/sequential", &name), |b| {
            let mut lba = 0u64;
            b.iter(|| {
                let mut sum = 0u64;
                for _ in 0..LOOKUPS {
                    lba = (lba + 1) % lbas;
                    sum = sum.wrapping_add(radix.get(lba).unwrap_or(0));
                }
                black_box(sum)
            });
        });
    }
    group.finish();
}

criterion_group!(benches, index);
criterion_main!(benches);
