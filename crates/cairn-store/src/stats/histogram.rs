//! A latency histogram of relaxed atomic buckets: lock-free and
//! allocation-free to record, HDR-style log-linear buckets to read.
//!
//! Values (nanoseconds) below 16 have a bucket each; above, every power of
//! two is split into [`SUB_BUCKETS`] equal buckets, so a bucket's width is at
//! most 1/16 of its lower bound: a percentile read from the buckets is
//! within 6.25 % of the true value (HDR Histogram with one significant
//! figure and a bit). Values from 2^[`TOP_EXPONENT`] ns (about 137 s) up
//! share the last bucket. Recording is one `fetch_add` on the bucket, one
//! on the sum, and a `fetch_max` only when the value is a new maximum.
//!
//! Two ways to share one: the front end keeps a [`Histogram`] per
//! connection (only that connection's threads touch it; `cairn-control`'s
//! `io`), and a layer of a stack, which every connection's threads call,
//! keeps a [`StripedHistogram`]: [`STRIPES`] histograms, each thread
//! recording into the one it was given at its first record, so threads on
//! different cores seldom write the same cache line.
//!
//! It lives here, in the store, because the layers record into it and the
//! control plane (`cairn-control`, which depends on the store) reads it:
//! one implementation for both.
//!
//! Why not the `hdrhistogram` crate: its `Histogram` records through
//! `&mut self` (one writer), and its concurrent `SyncHistogram` funnels
//! recorders through channels that a reader must refresh — a lock or an
//! allocation on the I/O path either way. This is 60 lines.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use serde::{Deserialize, Serialize};

/// Buckets per power of two (and the count of exact buckets below 16).
pub const SUB_BUCKETS: usize = 16;
const SUB_BITS: u32 = SUB_BUCKETS.trailing_zeros();
/// Values of `2^TOP_EXPONENT` ns and more share the last bucket.
pub const TOP_EXPONENT: u32 = 37;
/// Buckets in all.
pub const BUCKETS: usize = SUB_BUCKETS * (TOP_EXPONENT - SUB_BITS + 1) as usize;

const _: () = assert!(SUB_BUCKETS.is_power_of_two() && TOP_EXPONENT > SUB_BITS);

/// The bucket of `value`.
#[inline]
pub fn bucket_of(value: u64) -> usize {
    if value < SUB_BUCKETS as u64 {
        return value as usize;
    }
    let exponent = value.ilog2();
    if exponent >= TOP_EXPONENT {
        return BUCKETS - 1;
    }
    let sub = (value >> (exponent - SUB_BITS)) as usize & (SUB_BUCKETS - 1);
    (exponent - SUB_BITS + 1) as usize * SUB_BUCKETS + sub
}

/// The largest value of bucket `index` (the last bucket: `u64::MAX`).
pub fn bucket_upper(index: usize) -> u64 {
    if index < SUB_BUCKETS {
        return index as u64;
    }
    if index >= BUCKETS - 1 {
        return u64::MAX;
    }
    let exponent = (index / SUB_BUCKETS) as u32 + SUB_BITS - 1;
    let sub = (index % SUB_BUCKETS) as u64;
    let width = 1u64 << (exponent - SUB_BITS);
    ((SUB_BUCKETS as u64 + sub) << (exponent - SUB_BITS)) + width - 1
}

/// A histogram of nanoseconds, recorded through `&self` from any thread.
pub struct Histogram {
    buckets: Box<[AtomicU64; BUCKETS]>,
    sum_ns: AtomicU64,
    max_ns: AtomicU64,
}

impl Default for Histogram {
    fn default() -> Self {
        Self {
            buckets: Box::new(std::array::from_fn(|_| AtomicU64::new(0))),
            sum_ns: AtomicU64::new(0),
            max_ns: AtomicU64::new(0),
        }
    }
}

impl Histogram {
    /// Counts one value.
    #[inline]
    pub fn record(&self, ns: u64) {
        self.buckets[bucket_of(ns)].fetch_add(1, Ordering::Relaxed);
        self.sum_ns.fetch_add(ns, Ordering::Relaxed);
        // A load first: the maximum seldom changes, and a read leaves the
        // line shared where a `fetch_max` (a compare-and-swap loop) would
        // take it exclusive every time.
        if ns > self.max_ns.load(Ordering::Relaxed) {
            self.max_ns.fetch_max(ns, Ordering::Relaxed);
        }
    }

    /// Adds this histogram's counts into `into` (a sum over connections).
    pub fn add_to(&self, into: &mut Counts) {
        for (total, bucket) in into.buckets.iter_mut().zip(self.buckets.iter()) {
            *total += bucket.load(Ordering::Relaxed);
        }
        into.sum_ns += self.sum_ns.load(Ordering::Relaxed);
        into.max_ns = into.max_ns.max(self.max_ns.load(Ordering::Relaxed));
    }
}

/// Copies of a histogram per thread stripe, on their own cache lines.
pub const STRIPES: usize = 8;

const _: () = assert!(STRIPES.is_power_of_two());

/// A [`Histogram`] on cache lines of its own (its `sum` and `max` are
/// inline; the buckets are a separate allocation).
#[derive(Default)]
#[repr(align(128))]
struct Padded(Histogram);

/// A histogram that many threads record into at once: [`STRIPES`]
/// [`Histogram`]s, a thread's records going to the stripe it was given at
/// its first record (round robin over the threads of the process). About
/// 35 KiB. Reading sums the stripes.
pub struct StripedHistogram {
    stripes: Box<[Padded; STRIPES]>,
}

impl Default for StripedHistogram {
    fn default() -> Self {
        Self {
            stripes: Box::new(std::array::from_fn(|_| Padded::default())),
        }
    }
}

impl StripedHistogram {
    /// Counts one value, in this thread's stripe.
    #[inline]
    pub fn record(&self, ns: u64) {
        self.stripes[stripe()].0.record(ns);
    }

    /// Adds every stripe's counts into `into`.
    pub fn add_to(&self, into: &mut Counts) {
        for stripe in self.stripes.iter() {
            stripe.0.add_to(into);
        }
    }

    /// The counts, summed over the stripes.
    pub fn counts(&self) -> Counts {
        let mut counts = Counts::default();
        self.add_to(&mut counts);
        counts
    }
}

/// This thread's stripe: given at its first call, round robin.
#[inline]
fn stripe() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static STRIPE: usize = NEXT.fetch_add(1, Ordering::Relaxed) & (STRIPES - 1);
    }
    STRIPE.with(|s| *s)
}

/// A histogram's counts, plain (summed over connections, kept for closed
/// ones).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Counts {
    /// Per bucket.
    pub buckets: Vec<u64>,
    /// Sum of the values.
    pub sum_ns: u64,
    /// The largest value.
    pub max_ns: u64,
}

impl Default for Counts {
    fn default() -> Self {
        Self {
            buckets: vec![0; BUCKETS],
            sum_ns: 0,
            max_ns: 0,
        }
    }
}

impl Counts {
    /// Adds `other` in.
    pub fn add(&mut self, other: &Counts) {
        for (a, b) in self.buckets.iter_mut().zip(&other.buckets) {
            *a += b;
        }
        self.sum_ns += other.sum_ns;
        self.max_ns = self.max_ns.max(other.max_ns);
    }

    /// Values counted.
    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }

    /// The value at `quantile` (0..=1): the upper end of the bucket that
    /// holds it, never above the largest value seen; 0 when empty.
    pub fn quantile(&self, quantile: f64) -> u64 {
        let count = self.count();
        if count == 0 {
            return 0;
        }
        // The rank of the value, 1-based: at least 1, at most count.
        let rank = ((quantile * count as f64).ceil() as u64).clamp(1, count);
        let mut seen = 0;
        for (index, &n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return bucket_upper(index).min(self.max_ns);
            }
        }
        self.max_ns
    }

    /// The summary `cairn stats` shows and sends.
    pub fn summary(&self) -> Latency {
        let count = self.count();
        Latency {
            count,
            sum_ns: self.sum_ns,
            mean_ns: self.sum_ns.checked_div(count).unwrap_or(0),
            p50_ns: self.quantile(0.50),
            p99_ns: self.quantile(0.99),
            p999_ns: self.quantile(0.999),
            max_ns: self.max_ns,
            buckets: self
                .buckets
                .iter()
                .enumerate()
                .filter(|&(_, &n)| n > 0)
                .map(|(index, &n)| Bucket {
                    le_ns: bucket_upper(index),
                    count: n,
                })
                .collect(),
        }
    }
}

/// One non-empty bucket: `count` values at most `le_ns` (and above the
/// previous bucket's bound).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bucket {
    /// The bucket's largest value, ns.
    pub le_ns: u64,
    /// Values in it.
    pub count: u64,
}

/// A latency distribution as the control socket sends it: count, sum,
/// percentiles, and the non-empty buckets (enough for an exporter to build
/// cumulative buckets at any bounds it likes).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Latency {
    /// Requests timed.
    pub count: u64,
    /// Their total time, ns.
    pub sum_ns: u64,
    /// Mean, ns.
    pub mean_ns: u64,
    /// Median, ns (the upper end of its bucket).
    pub p50_ns: u64,
    /// 99th percentile, ns.
    pub p99_ns: u64,
    /// 99.9th percentile, ns.
    pub p999_ns: u64,
    /// Slowest, ns.
    pub max_ns: u64,
    /// Non-empty buckets, in order.
    pub buckets: Vec<Bucket>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_value_lands_in_a_bucket_whose_bounds_hold_it() {
        let mut lower = 0;
        for index in 0..BUCKETS - 1 {
            let upper = bucket_upper(index);
            assert!(upper >= lower, "bucket {index}");
            assert_eq!(bucket_of(lower), index, "lower end of bucket {index}");
            assert_eq!(bucket_of(upper), index, "upper end of bucket {index}");
            // Width at most 1/16 of the lower bound (exact below 16).
            assert!(
                upper - lower <= lower / SUB_BUCKETS as u64,
                "bucket {index}"
            );
            lower = upper + 1;
        }
        assert_eq!(bucket_of(lower), BUCKETS - 1);
        assert_eq!(bucket_of(u64::MAX), BUCKETS - 1);
        assert_eq!(bucket_of((1 << TOP_EXPONENT) - 1), BUCKETS - 1);
    }

    #[test]
    fn quantiles_are_within_a_sixteenth_of_the_truth() {
        let h = Histogram::default();
        // 1..=100_000 ns, once each: the p-th quantile is p × 100_000.
        for ns in 1..=100_000 {
            h.record(ns);
        }
        let mut counts = Counts::default();
        h.add_to(&mut counts);
        assert_eq!(counts.count(), 100_000);
        assert_eq!(counts.sum_ns, 100_000 * 100_001 / 2);
        for (q, truth) in [(0.5, 50_000.0), (0.99, 99_000.0), (0.999, 99_900.0)] {
            let got = counts.quantile(q) as f64;
            assert!(
                got >= truth && got <= truth * 1.0625,
                "q{q}: {got} vs {truth}"
            );
        }
        assert_eq!(counts.quantile(1.0), 100_000);
        let summary = counts.summary();
        assert_eq!(
            summary.buckets.iter().map(|b| b.count).sum::<u64>(),
            100_000
        );
        assert_eq!(summary.max_ns, 100_000);
    }

    #[test]
    fn a_striped_histogram_counts_every_thread_once() {
        let h = StripedHistogram::default();
        std::thread::scope(|scope| {
            for thread in 0..(STRIPES as u64 + 3) {
                let h = &h;
                scope.spawn(move || {
                    for ns in 1..=1000 {
                        h.record(ns * (thread + 1));
                    }
                });
            }
        });
        let counts = h.counts();
        let threads = STRIPES as u64 + 3;
        assert_eq!(counts.count(), 1000 * threads);
        // Sum of ns × (t + 1) over ns in 1..=1000 and t in 0..threads.
        assert_eq!(counts.sum_ns, 500_500 * threads * (threads + 1) / 2);
        assert_eq!(counts.max_ns, 1000 * threads);
    }

    #[test]
    fn an_empty_histogram_reads_zero() {
        let counts = Counts::default();
        assert_eq!(counts.quantile(0.99), 0);
        assert_eq!(counts.summary().mean_ns, 0);
    }
}
