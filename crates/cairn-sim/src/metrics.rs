//! What one configuration's replay measured.
//!
//! "Requests" here are cache accesses (one per object request in object mode,
//! one per block in block mode). Every access goes through the policy: reads
//! and writes alike look the key up and, on a miss, admit it (libCacheSim's
//! model); reads and writes are counted apart so write-heavy traces show.

use cairn_policy::{Access, Op};
use serde::{Deserialize, Serialize};

use crate::cost::CostModel;
use crate::hierarchy::Hierarchy;

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
    /// Of `hits`, those served by the second level (two-level runs).
    #[serde(default)]
    pub l2_hits: u64,
    /// Of `hit_bytes`, those served by the second level.
    #[serde(default)]
    pub l2_hit_bytes: u64,
}

/// Counters of one configuration.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Metrics {
    /// Accesses replayed.
    pub requests: u64,
    /// Accesses that hit (in either level, in a two-level run).
    pub hits: u64,
    /// Accesses that missed (every level).
    pub misses: u64,
    /// Of `hits`, those served by the second level (two-level runs; 0
    /// otherwise). L1 hits are `hits - l2_hits`.
    #[serde(default)]
    pub l2_hits: u64,
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
    /// Units the policy evicted (for demand accesses and prefetches); in a
    /// two-level run, the units L1 evicted (demoted, when exclusive).
    pub evictions: u64,
    /// Units the second level evicted (two-level runs).
    #[serde(default)]
    pub l2_evictions: u64,
    /// Units a prefetcher loaded (not resident when it named them).
    #[serde(default)]
    pub prefetched: u64,
    /// Demand accesses that hit a unit a prefetcher loaded, before anything
    /// else touched it (each prefetched unit counts at most once).
    #[serde(default)]
    pub prefetch_hits: u64,
    /// Accesses that found their unit resident but expired (TTL): each
    /// removed the unit and counts as a miss (in `misses` too).
    #[serde(default)]
    pub expired: u64,
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

    /// Records one access of a two-level run: where it was served, and how
    /// many units L1 and L2 evicted for it.
    #[inline]
    pub fn record_levels(
        &mut self,
        access: &Access,
        served: Served,
        evicted: usize,
        l2_evicted: usize,
    ) {
        self.record(access, served != Served::Miss, evicted);
        self.l2_evictions += l2_evicted as u64;
        if served == Served::L2 {
            self.l2_hits += 1;
            // `record` sized `groups` for this access's group.
            if let Some(counts) = self.groups.get_mut(usize::from(access.group)) {
                counts.l2_hits += 1;
                counts.l2_hit_bytes += u64::from(access.size);
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

    /// Modelled service time, in seconds: every group's L1 hits at its hit
    /// cost, L2 hits at its L2 hit cost and misses at its miss cost.
    pub fn modelled_seconds(&self, model: &CostModel) -> f64 {
        self.groups
            .iter()
            .enumerate()
            .filter_map(|(g, c)| {
                let cost = model.group(g)?;
                Some(
                    cost.hit
                        .seconds(c.hits - c.l2_hits, c.hit_bytes - c.l2_hit_bytes)
                        + cost.l2_hit.seconds(c.l2_hits, c.l2_hit_bytes)
                        + cost.miss.seconds(c.misses, c.miss_bytes),
                )
            })
            .sum()
    }
}

/// Where a two-level run served an access.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Served {
    /// The first level held it.
    L1,
    /// The second level held it.
    L2,
    /// Neither: fetched from the backing store.
    Miss,
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
    /// The second level, in a two-level run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub l2: Option<Level2Report>,
}

/// The second level of a two-level run, as reported.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Level2Report {
    /// The L2 policy as given.
    pub label: String,
    /// The L2 policy's table name.
    pub policy: String,
    /// The L2 size as given.
    pub size: String,
    /// The resolved L2 capacity, in the report's `capacity_unit`.
    pub capacity: u64,
    /// `inclusive` or `exclusive`.
    pub hierarchy: Hierarchy,
}
