//! The exact miss-ratio curve is a claim about LRU: at every cache size it must
//! equal, to the last access, what simulating LRU at that size gives. Guards
//! the Fenwick-tree stack distances and their compaction (the trace is long
//! enough to compact many times). SHARDS is checked to be close, not equal.

// Helpers outside #[test] functions panic on failure too; that is the report.
#![allow(clippy::unwrap_used)]

mod common;

use cairn_policy::{Access, Capacity, PolicyConfig};
use cairn_sim::CapacityUnit;
use cairn_sim::mrc::{MrcTracker, mean_absolute_error};

fn lru_misses(trace: &[Access], capacity: Capacity) -> u64 {
    let mut lru = PolicyConfig::default_for("lru")
        .unwrap()
        .build(capacity)
        .unwrap();
    let mut victims = vec![];
    trace
        .iter()
        .filter(|a| !lru.access(a, &mut victims))
        .count() as u64
}

fn exact(trace: &[Access], unit: CapacityUnit) -> cairn_sim::mrc::ReuseHistogram {
    let mut tracker = MrcTracker::exact(unit);
    for a in trace {
        tracker.observe(a);
    }
    tracker.finish()
}

#[test]
fn object_mode_curve_equals_lru_simulation_at_every_size() {
    let trace = common::skewed(1, 50_000, 3_000, 1..=1);
    let histogram = exact(&trace, CapacityUnit::Objects);
    let sizes = [1, 2, 3, 10, 64, 100, 500, 1_000, 2_999, 3_000, 10_000];
    let curve = histogram.miss_ratios(&sizes);
    for (&size, &miss_ratio) in sizes.iter().zip(&curve) {
        let misses = lru_misses(&trace, Capacity::Objects(size));
        let want = misses as f64 / trace.len() as f64;
        assert_eq!(
            miss_ratio.to_bits(),
            want.to_bits(),
            "size {size}: {miss_ratio} vs {want}"
        );
    }
}

#[test]
fn byte_mode_curve_equals_byte_lru_when_every_unit_fits() {
    let trace = common::skewed(2, 30_000, 2_000, 512..=4096);
    let histogram = exact(&trace, CapacityUnit::Bytes);
    let sizes = [4_096, 10_000, 100_000, 1_000_000, 5_000_000];
    let curve = histogram.miss_ratios(&sizes);
    for (&size, &miss_ratio) in sizes.iter().zip(&curve) {
        let misses = lru_misses(&trace, Capacity::Bytes(size));
        let want = misses as f64 / trace.len() as f64;
        assert_eq!(
            miss_ratio.to_bits(),
            want.to_bits(),
            "size {size}: {miss_ratio} vs {want}"
        );
    }
}

#[test]
fn shards_approximates_the_exact_curve() {
    let trace = common::skewed(3, 200_000, 20_000, 1..=1);
    let sizes: Vec<u64> = (1..=20).map(|i| i * 1_000).collect();
    let exact = exact(&trace, CapacityUnit::Objects).miss_ratios(&sizes);
    let mut fixed_rate = MrcTracker::shards(CapacityUnit::Objects, 0.1);
    let mut fixed_size = MrcTracker::shards_fixed_size(CapacityUnit::Objects, 2_000);
    for a in &trace {
        fixed_rate.observe(a);
        fixed_size.observe(a);
    }
    let rate_error = mean_absolute_error(&exact, &fixed_rate.finish().miss_ratios(&sizes));
    let size_error = mean_absolute_error(&exact, &fixed_size.finish().miss_ratios(&sizes));
    assert!(rate_error < 0.02, "fixed-rate SHARDS error {rate_error}");
    assert!(size_error < 0.03, "fixed-size SHARDS error {size_error}");
}
