//! Nanoseconds per access of every policy, on a zipf(1.0) trace over 100,000
//! objects with a cache of 10 % of them (object-count mode).
//!
//! `cargo bench -p cairn-sim --bench policies` (add `-- lru` to pick one).
//! Whole-trace speed against libCacheSim is measured by `cairn sim` itself;
//! see docs/benchmarks.md.

use cairn_policy::{Access, Capacity, PolicyConfig};
use cairn_trace::generate::ZipfConfig;
use cairn_trace::{Splitter, Unit};
use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};

const ITEMS: u64 = 100_000;
const REQUESTS: u64 = 1_000_000;

fn trace() -> Vec<Access> {
    let mut config = ZipfConfig {
        items: ITEMS,
        alpha: 1.0,
        ..ZipfConfig::default()
    };
    config.pace.requests = REQUESTS;
    config.pace.seed = 42;
    let mut splitter = Splitter::new(Unit::Object);
    let mut accesses = Vec::with_capacity(REQUESTS as usize);
    for request in config.generator().expect("valid zipf config") {
        splitter.split(&request, &mut accesses);
    }
    // OPT needs next-access times; object mode from a generator carries none.
    let mut next_seen = hashbrown::HashMap::new();
    for access in accesses.iter_mut().rev() {
        access.next = next_seen
            .insert(access.key, access.time)
            .unwrap_or(cairn_policy::NEVER);
    }
    accesses
}

fn policies(c: &mut Criterion) {
    let accesses = trace();
    let mut group = c.benchmark_group("zipf1.0_100k_objects_cache10pct");
    group.sample_size(10);
    group.throughput(Throughput::Elements(accesses.len() as u64));
    for name in PolicyConfig::NAMES {
        let config = PolicyConfig::default_for(name).expect("listed names build");
        group.bench_function(*name, |b| {
            b.iter_batched(
                || {
                    config
                        .build(Capacity::Objects(ITEMS / 10))
                        .expect("default config builds")
                },
                |mut policy| {
                    let mut victims = Vec::with_capacity(64);
                    let mut hits = 0u64;
                    for access in &accesses {
                        victims.clear();
                        hits += u64::from(policy.access(access, &mut victims));
                    }
                    hits
                },
                BatchSize::LargeInput,
            );
        });
    }
    group.finish();
}

criterion_group!(benches, policies);
criterion_main!(benches);
