//! What one configuration's replay measured.
//!
//! "Requests" here are cache accesses (one per object request in object mode,
//! one per block in block mode). Every access goes through the policy: reads
//! and writes alike look the key up and, on a miss, admit it (libCacheSim's
//! model); reads and writes are counted apart so write-heavy traces show.

use cairn_policy::{Access, Op};
use serde::{Deserialize, Serialize};

use crate::cost::CostModel;

/// Counters of one cost group.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupCounts {
    /// Accesses that hit.
    pub hits: u64,
    /// Accesses that missed.
    pub misses: u64,
    /// Bytes of the accesses that hit.
    pub hit_bytes: u64,
    /// Bytes of the accesses that missed.
    pub miss_bytes: u64,
}

/// Counters of one configuration.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Metrics {
    /// Accesses replayed.
    pub requests: u64,
    /// Accesses that hit.
    pub hits: u64,
    /// Accesses that missed.
    pub misses: u64,
    /// Bytes of all accesses.
    pub bytes: u64,
    /// Bytes of the accesses that missed.
    pub miss_bytes: u64,
    /// Read accesses.
    pub reads: u64,
    /// Write accesses.
    pub writes: u64,
    /// Read accesses that hit.
    pub read_hits: u64,
    /// Write accesses that hit.
    pub write_hits: u64,
    /// Units the policy evicted (for demand accesses and prefetches).
    pub evictions: u64,
    /// Units a prefetcher loaded (not resident when it named them).
    #[serde(default)]
    pub prefetched: u64,
    /// Demand accesses that hit a unit a prefetcher loaded, before anything
    /// else touched it (each prefetched unit counts at most once).
    #[serde(default)]
    pub prefetch_hits: u64,
    /// Counters per cost group, indexed by `Access::group`.
    pub groups: Vec<GroupCounts>,
}

impl Metrics {
    /// Records one access and its outcome.
    #[inline]
    pub fn record(&mut self, access: &Access, hit: bool, evicted: usize) {
        let size = u64::from(access.size);
        self.requests += 1;
        self.bytes += size;
        self.evictions += evicted as u64;
        let group = usize::from(access.group);
        if group >= self.groups.len() {
            self.groups.resize(group + 1, GroupCounts::default());
        }
        let counts = &mut self.groups[group];
        if hit {
            self.hits += 1;
            counts.hits += 1;
            counts.hit_bytes += size;
        } else {
            self.misses += 1;
            self.miss_bytes += size;
            counts.misses += 1;
            counts.miss_bytes += size;
        }
        match access.op {
            Op::Read => {
                self.reads += 1;
                self.read_hits += u64::from(hit);
            }
            Op::Write => {
                self.writes += 1;
                self.write_hits += u64::from(hit);
            }
        }
    }

    /// Misses over requests (0 for an empty run).
    pub fn miss_ratio(&self) -> f64 {
        ratio(self.misses, self.requests)
    }

    /// Missed bytes over requested bytes (0 for an empty run).
    pub fn byte_miss_ratio(&self) -> f64 {
        ratio(self.miss_bytes, self.bytes)
    }

    /// Modelled service time, in seconds: every group's hits at its hit cost
    /// and misses at its miss cost.
    pub fn modelled_seconds(&self, model: &CostModel) -> f64 {
        self.groups
            .iter()
            .enumerate()
            .filter_map(|(g, c)| {
                let cost = model.group(g)?;
                Some(
                    cost.hit.seconds(c.hits, c.hit_bytes)
                        + cost.miss.seconds(c.misses, c.miss_bytes),
                )
            })
            .sum()
    }
}

fn ratio(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

/// The outcome of one configuration, with the cost model applied.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// The configuration's label (its policy spec, as given).
    pub label: String,
    /// The policy's table name (`lru`, `s3fifo`).
    pub policy: String,
    /// The cache size as the user gave it (`10%`, `4096`).
    pub size: String,
    /// The resolved capacity, in `capacity_unit`.
    pub capacity: u64,
    /// `objects` or `bytes`.
    pub capacity_unit: String,
    /// Misses over requests.
    pub miss_ratio: f64,
    /// Missed bytes over requested bytes.
    pub byte_miss_ratio: f64,
    /// Modelled service time of the whole trace, seconds.
    pub modelled_seconds: f64,
    /// Requested bytes over modelled time, MB/s (10^6 bytes per second).
    pub modelled_throughput_mb_s: f64,
    /// The raw counters.
    pub metrics: Metrics,
}
