//! Eviction-cost groups: one LRU queue per cost group, evict the cheapest tail
//! (papers/004, "A Cache Management Technique Based on Eviction Cost
//! Estimation for Heterogeneous Storage", §3 and its algorithm listing).
//!
//! Every block belongs to a cost group ([`Access::group`]: device × access
//! pattern). A group's eviction cost is inversely proportional to its
//! throughput, the fastest group costing 1 (paper Table 1; its experiments use
//! SSD = 1, HDD = 3). Each group keeps its own LRU queue; the tails of the
//! queues form the eviction list, and the victim is the tail that ranks lowest:
//!
//! - [`CostMode::Timestamp`] (the paper): rank by `timestamp × cost`, evict
//!   the smallest. The timestamp is the paper's `g_timestamp`, a counter this
//!   policy advances on every hit and every admission (it starts at 1, not 0,
//!   so the first block's product is not 0 whatever its cost).
//! - [`CostMode::Age`] (ours): rank by `(now − timestamp) / cost`, evict the
//!   largest. `timestamp × cost` drifts: the protection a costly block gets is
//!   `(cost − 1) × timestamp` ticks, which grows with the absolute time, so
//!   late in a long run a block of cost 3 outlives cheap blocks hit thousands
//!   of accesses after it, and early in a run costs barely matter. Dividing
//!   the age by the cost makes a block of cost `c` survive `c` times as long
//!   as a cheap one of the same recency, at any time.
//!
//! Within one queue the tail has the smallest timestamp, so comparing tails is
//! the same as comparing every block; an eviction costs O(number of groups),
//! a hit or admission O(1). Ties go to the lowest group index.
//!
//! # Costs
//! Costs come from a [`CostTable`]: lock-free, shareable (`Arc`), updatable at
//! run time so the engine can feed online estimates from measured service
//! times. [`Cost::new`] builds a private table from [`CostConfig::costs`];
//! [`Cost::with_table`] shares one. A group the table does not cover costs 1.
//!
//! A hit moves the block to the queue of the hit's group, so a block whose
//! access pattern changes (random → sequential) is re-classified; the paper
//! classifies on insertion and is silent on hits.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

use crate::list::{Index, List, Slab};
use crate::{Access, Capacity, ConfigError, KeyMap, Policy};

/// How [`Cost`] ranks the tails of its queues.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CostMode {
    /// Evict the smallest `timestamp × cost` (papers/004).
    #[default]
    Timestamp,
    /// Evict the largest `(now − timestamp) / cost` (drift-free; ours).
    Age,
}

/// Configuration of [`Cost`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CostConfig {
    /// Eviction cost of each group, indexed by [`Access::group`]; each finite
    /// and > 0. Default empty: every group costs 1 (plain LRU). A group past
    /// the end costs 1. Paper: fastest group 1, others throughput ratio
    /// (SSD 150 MB/s = 1, HDD 50 MB/s = 3).
    pub costs: Vec<f64>,
    /// How tails are ranked. Default `"timestamp"` (the paper).
    pub mode: CostMode,
}

/// Per-group eviction costs, readable and writable from any thread without
/// locks (each cost is an `f64` stored as bits in an `AtomicU64`).
#[derive(Debug)]
pub struct CostTable {
    costs: Vec<AtomicU64>,
}

impl CostTable {
    /// A table of `groups` groups, each costing 1.
    pub fn new(groups: usize) -> Self {
        Self {
            costs: (0..groups)
                .map(|_| AtomicU64::new(1.0f64.to_bits()))
                .collect(),
        }
    }

    /// A table holding `costs`, each finite and > 0.
    pub fn from_costs(costs: &[f64]) -> Result<Self, ConfigError> {
        let table = Self::new(costs.len());
        for (group, &cost) in costs.iter().enumerate() {
            table.set(group as u16, cost)?;
        }
        Ok(table)
    }

    /// Number of groups the table covers.
    pub fn groups(&self) -> usize {
        self.costs.len()
    }

    /// The cost of `group`; 1 for a group the table does not cover.
    #[inline]
    pub fn get(&self, group: u16) -> f64 {
        self.costs
            .get(usize::from(group))
            .map_or(1.0, |c| f64::from_bits(c.load(Ordering::Relaxed)))
    }

    /// Sets the cost of `group`. The cost must be finite and > 0, and the
    /// group covered by the table.
    pub fn set(&self, group: u16, cost: f64) -> Result<(), ConfigError> {
        if !(cost.is_finite() && cost > 0.0) {
            return Err(ConfigError::OutOfRange {
                policy: "cost",
                parameter: "costs",
                value: cost.to_string(),
                expected: "a finite cost > 0",
            });
        }
        let slot = self
            .costs
            .get(usize::from(group))
            .ok_or_else(|| ConfigError::OutOfRange {
                policy: "cost",
                parameter: "group",
                value: group.to_string(),
                expected: "a group the cost table covers",
            })?;
        slot.store(cost.to_bits(), Ordering::Relaxed);
        Ok(())
    }
}

impl CostTable {
    /// A table of `groups` groups holding `config.costs` where they cover a
    /// group (1 elsewhere); the costs are checked even past `groups`.
    pub fn for_config(groups: usize, config: &CostConfig) -> Result<Self, ConfigError> {
        Self::from_costs(&config.costs)?;
        let table = Self::new(groups);
        for (group, &cost) in config.costs.iter().enumerate().take(groups) {
            table.set(group as u16, cost)?;
        }
        Ok(table)
    }
}

/// Eviction costs learned online (papers/004's costs measured rather than
/// configured): each group's miss service time, in nanoseconds per byte,
/// smoothed by an exponentially weighted moving average; after each sample
/// every measured group's cost in the [`CostTable`] becomes its average
/// over the fastest measured group's (so the fastest costs 1). A group not
/// measured yet keeps its cost. Lock-free: any thread records.
///
/// The block cache (`cairn-store`, group = device × 2 + random) and the file
/// gateway (`cairn-files`, group = backend × 2) feed it the reads they time.
#[derive(Debug)]
pub struct CostEstimator {
    /// Smoothed service time per byte, ns, as `f64` bits; 0 = not measured.
    estimate_ns: Box<[AtomicU64]>,
    reads: Box<[AtomicU64]>,
    bytes: Box<[AtomicU64]>,
    ns: Box<[AtomicU64]>,
    table: Arc<CostTable>,
    /// Weight of a new sample in the average; 0 disables estimation.
    smoothing: f64,
}

/// One group's reads as a [`CostEstimator`] counted them.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct GroupReads {
    /// Reads recorded.
    pub reads: u64,
    /// Bytes they read.
    pub bytes: u64,
    /// Nanoseconds they took.
    pub ns: u64,
    /// The smoothed estimate, ns per byte (0: not measured).
    pub ns_per_byte: f64,
}

impl CostEstimator {
    /// An estimator of `groups` groups writing costs into `table`; a new
    /// sample weighs `smoothing` (in 0–1; 0 only counts).
    pub fn new(groups: usize, table: Arc<CostTable>, smoothing: f64) -> Self {
        let zeros = || (0..groups).map(|_| AtomicU64::new(0)).collect();
        Self {
            estimate_ns: zeros(),
            reads: zeros(),
            bytes: zeros(),
            ns: zeros(),
            table,
            smoothing,
        }
    }

    /// Number of groups it counts.
    pub fn groups(&self) -> usize {
        self.reads.len()
    }

    /// The table it writes.
    pub fn table(&self) -> &Arc<CostTable> {
        &self.table
    }

    /// Records a read for `group` of `bytes` bytes taking `ns`; `sample`:
    /// whether it updates the estimate (a read whose time cannot be
    /// attributed to the group only counts). A group past
    /// [`groups`](Self::groups) is ignored.
    pub fn record(&self, group: u16, bytes: u64, ns: u64, sample: bool) {
        let g = usize::from(group);
        let Some(estimate) = self.estimate_ns.get(g) else {
            return;
        };
        self.reads[g].fetch_add(1, Ordering::Relaxed);
        self.bytes[g].fetch_add(bytes, Ordering::Relaxed);
        self.ns[g].fetch_add(ns, Ordering::Relaxed);
        if self.smoothing <= 0.0 || !sample || bytes == 0 || ns == 0 {
            return;
        }
        let sample = ns as f64 / bytes as f64;
        let alpha = self.smoothing;
        let _ = estimate.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
            let old = f64::from_bits(bits);
            let new = if old > 0.0 {
                old + alpha * (sample - old)
            } else {
                sample
            };
            Some(new.to_bits())
        });
        self.publish();
    }

    /// Sets every measured group's cost to its estimate over the fastest's.
    fn publish(&self) {
        let estimates = self
            .estimate_ns
            .iter()
            .map(|e| f64::from_bits(e.load(Ordering::Relaxed)));
        let fastest = estimates.filter(|&e| e > 0.0).fold(f64::INFINITY, f64::min);
        if !fastest.is_finite() {
            return;
        }
        for (group, estimate) in self.estimate_ns.iter().enumerate() {
            let estimate = f64::from_bits(estimate.load(Ordering::Relaxed));
            if estimate > 0.0 && group < self.table.groups() {
                // Finite and ≥ 1 by construction, so `set` cannot refuse it.
                let _ = self.table.set(group as u16, estimate / fastest);
            }
        }
    }

    /// What `group` has recorded (zeros for a group past the end).
    pub fn snapshot(&self, group: usize) -> GroupReads {
        if group >= self.groups() {
            return GroupReads::default();
        }
        GroupReads {
            reads: self.reads[group].load(Ordering::Relaxed),
            bytes: self.bytes[group].load(Ordering::Relaxed),
            ns: self.ns[group].load(Ordering::Relaxed),
            ns_per_byte: f64::from_bits(self.estimate_ns[group].load(Ordering::Relaxed)),
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    key: u64,
    charge: u64,
    stamp: u64,
    group: u16,
}

/// Eviction-cost-aware replacement over per-group LRU queues.
#[derive(Debug)]
pub struct Cost {
    capacity: Capacity,
    mode: CostMode,
    table: Arc<CostTable>,
    clock: u64,
    used: u64,
    map: KeyMap<Index>,
    slab: Slab<Entry>,
    /// One LRU queue per group seen so far, indexed by group.
    queues: Vec<List>,
}

impl Cost {
    /// An empty cache with a private cost table built from `config.costs`.
    pub fn new(capacity: Capacity, config: &CostConfig) -> Result<Self, ConfigError> {
        let table = Arc::new(CostTable::from_costs(&config.costs)?);
        Ok(Self::with_table(capacity, config, table))
    }

    /// An empty cache reading its costs from a shared `table`, which others
    /// may update at run time; `config.costs` is ignored.
    pub fn with_table(capacity: Capacity, config: &CostConfig, table: Arc<CostTable>) -> Self {
        Self {
            capacity,
            mode: config.mode,
            table,
            clock: 0,
            used: 0,
            map: KeyMap::default(),
            slab: Slab::new(),
            queues: Vec::new(),
        }
    }

    /// The cost table this policy reads.
    pub fn table(&self) -> &Arc<CostTable> {
        &self.table
    }

    fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    /// The index of `group`'s queue, creating the queue on first sight (the
    /// only allocation outside growth in resident keys).
    fn queue_of(&mut self, group: u16) -> usize {
        let at = usize::from(group);
        if at >= self.queues.len() {
            self.queues.resize(at + 1, List::new());
        }
        at
    }

    /// The queue whose tail ranks as the victim, if any block is resident.
    fn victim_group(&self) -> Option<usize> {
        let now = self.clock + 1;
        let mut best: Option<(usize, f64)> = None;
        for (group, queue) in self.queues.iter().enumerate() {
            let Some(tail) = queue.back() else { continue };
            let stamp = self.slab.get(tail).stamp;
            let cost = self.table.get(group as u16);
            let rank = match self.mode {
                CostMode::Timestamp => stamp as f64 * cost,
                // Negated so that, as for timestamps, the least rank goes.
                CostMode::Age => -((now - stamp) as f64 / cost),
            };
            if best.is_none_or(|(_, b)| rank < b) {
                best = Some((group, rank));
            }
        }
        best.map(|(group, _)| group)
    }
}

impl Policy for Cost {
    fn name(&self) -> &'static str {
        "cost"
    }

    fn lookup(&mut self, access: &Access) -> bool {
        let Some(&index) = self.map.get(&access.key) else {
            return false;
        };
        let stamp = self.tick();
        let old_group = self.slab.get(index).group;
        self.slab
            .unlink(&mut self.queues[usize::from(old_group)], index);
        let entry = self.slab.get_mut(index);
        entry.stamp = stamp;
        entry.group = access.group;
        let queue = self.queue_of(access.group);
        self.slab.push_front(&mut self.queues[queue], index);
        true
    }

    fn admit(&mut self, access: &Access, victims: &mut Vec<u64>) -> bool {
        let charge = self.capacity.charge(access.size);
        if charge > self.capacity.limit() {
            return false;
        }
        while self.used + charge > self.capacity.limit() {
            let Some(group) = self.victim_group() else {
                break;
            };
            let Some(index) = self.slab.pop_back(&mut self.queues[group]) else {
                break;
            };
            let victim = *self.slab.remove(index);
            self.map.remove(&victim.key);
            self.used -= victim.charge;
            victims.push(victim.key);
        }
        let stamp = self.tick();
        let index = self.slab.insert(Entry {
            key: access.key,
            charge,
            stamp,
            group: access.group,
        });
        let queue = self.queue_of(access.group);
        self.slab.push_front(&mut self.queues[queue], index);
        self.map.insert(access.key, index);
        self.used += charge;
        true
    }

    fn remove(&mut self, key: u64) -> bool {
        let Some(index) = self.map.remove(&key) else {
            return false;
        };
        let group = usize::from(self.slab.get(index).group);
        self.slab.unlink(&mut self.queues[group], index);
        self.used -= self.slab.remove(index).charge;
        true
    }

    fn contains(&self, key: u64) -> bool {
        self.map.contains_key(&key)
    }

    fn len(&self) -> usize {
        self.map.len()
    }

    fn used(&self) -> u64 {
        self.used
    }

    fn capacity(&self) -> Capacity {
        self.capacity
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{self, Reference};
    use proptest::prelude::*;

    #[test]
    fn the_estimator_normalises_to_the_fastest_and_ignores_unknown_groups() {
        let table = Arc::new(CostTable::new(2));
        let estimator = CostEstimator::new(2, Arc::clone(&table), 0.5);
        estimator.record(1, 100, 1000, true);
        assert!(
            (table.get(1) - 1.0).abs() < 1e-12,
            "the only measured group is the fastest"
        );
        estimator.record(0, 100, 100, true);
        assert!((table.get(1) - 10.0).abs() < 1e-12, "{}", table.get(1));
        // Half way to the new sample: (10 + 30) / 2 = 20 ns a byte.
        estimator.record(1, 100, 3000, true);
        assert!((table.get(1) - 20.0).abs() < 1e-12, "{}", table.get(1));
        estimator.record(1, 100, 1_000_000, false);
        assert!((table.get(1) - 20.0).abs() < 1e-12, "not a sample");
        estimator.record(9, 100, 1, true);
        assert_eq!(estimator.snapshot(9), GroupReads::default());
        let one = estimator.snapshot(1);
        assert_eq!((one.reads, one.bytes, one.ns), (3, 300, 1_004_000));
        assert!((one.ns_per_byte - 20.0).abs() < 1e-12);
    }

    #[test]
    fn a_cost_table_for_a_config_takes_its_costs_and_checks_them() {
        let config = CostConfig {
            costs: vec![1.0, 3.0, 5.0],
            ..CostConfig::default()
        };
        let table = CostTable::for_config(2, &config).expect("valid");
        assert_eq!(table.groups(), 2);
        assert!((table.get(1) - 3.0).abs() < 1e-12 && (table.get(2) - 1.0).abs() < 1e-12);
        let bad = CostConfig {
            costs: vec![1.0, 1.0, -1.0],
            ..CostConfig::default()
        };
        assert!(
            CostTable::for_config(2, &bad).is_err(),
            "checked past the end"
        );
    }

    /// Naive eviction-cost model: one vector, the victim found by ranking
    /// every block (not only the queue tails).
    struct NaiveCost {
        capacity: Capacity,
        costs: Vec<f64>,
        mode: CostMode,
        clock: u64,
        /// (key, charge, group, stamp)
        items: Vec<(u64, u64, u16, u64)>,
    }

    impl NaiveCost {
        fn cost(&self, group: u16) -> f64 {
            self.costs.get(usize::from(group)).copied().unwrap_or(1.0)
        }
    }

    impl Reference for NaiveCost {
        fn access(&mut self, access: &Access) -> (bool, Vec<u64>) {
            if let Some(item) = self.items.iter_mut().find(|i| i.0 == access.key) {
                self.clock += 1;
                item.2 = access.group;
                item.3 = self.clock;
                return (true, vec![]);
            }
            let charge = self.capacity.charge(access.size);
            let mut victims = vec![];
            if charge <= self.capacity.limit() {
                while self.items.iter().map(|i| i.1).sum::<u64>() + charge > self.capacity.limit() {
                    let now = self.clock + 1;
                    let rank = |i: &(u64, u64, u16, u64)| match self.mode {
                        CostMode::Timestamp => i.3 as f64 * self.cost(i.2),
                        CostMode::Age => -((now - i.3) as f64 / self.cost(i.2)),
                    };
                    let at = (0..self.items.len())
                        .min_by(|&a, &b| {
                            let (x, y) = (&self.items[a], &self.items[b]);
                            rank(x).total_cmp(&rank(y)).then(x.2.cmp(&y.2))
                        })
                        .unwrap();
                    victims.push(self.items.remove(at).0);
                }
                self.clock += 1;
                self.items
                    .push((access.key, charge, access.group, self.clock));
            }
            (false, victims)
        }
    }

    /// Unit-size accesses of `(key, group)`.
    fn grouped(items: &[(u64, u16)]) -> Vec<Access> {
        let keys: Vec<u64> = items.iter().map(|i| i.0).collect();
        let mut trace = testing::keys(&keys);
        for (access, item) in trace.iter_mut().zip(items) {
            access.group = item.1;
        }
        trace
    }

    fn cost(capacity: u64, costs: &[f64], mode: CostMode) -> Cost {
        let config = CostConfig {
            costs: costs.to_vec(),
            mode,
        };
        Cost::new(Capacity::Objects(capacity), &config).unwrap()
    }

    fn run(policy: &mut Cost, trace: &[Access]) -> Vec<u64> {
        let mut victims = vec![];
        for access in trace {
            policy.access(access, &mut victims);
        }
        victims
    }

    #[test]
    fn cheap_block_goes_before_a_costly_one_of_similar_recency() {
        for mode in [CostMode::Timestamp, CostMode::Age] {
            // 1 (HDD, cost 3) at time 1, then 2 (SSD, cost 1) at time 2.
            let trace = grouped(&[(1, 1), (2, 0), (3, 0)]);
            let mut policy = cost(2, &[1.0, 3.0], mode);
            assert_eq!(run(&mut policy, &trace), [2], "{mode:?}: 3×1 > 1×2");
            let mut lru = cost(2, &[], mode);
            assert_eq!(run(&mut lru, &trace), [1], "{mode:?}: all costs 1 is LRU");
        }
    }

    /// Cache of 2: cheap key 1 is hit `ticks_before` times, costly key 2
    /// enters, key 1 is hit 10 more times, cheap key 3 needs room.
    fn drift_scenario(mode: CostMode, ticks_before: usize) -> Vec<u64> {
        let mut items = vec![(1, 0); ticks_before + 1];
        items.push((2, 1));
        items.extend([(1, 0); 10]);
        items.push((3, 0));
        run(&mut cost(2, &[1.0, 3.0], mode), &grouped(&items))
    }

    #[test]
    fn timestamp_ranking_drifts_with_absolute_time_and_age_does_not() {
        // Early: costly 2 has stamp 2 (product 6), cheap 1 stamp 12 (12).
        assert_eq!(drift_scenario(CostMode::Timestamp, 0), [2]);
        // Late: the same pattern 1000 ticks on. Costly 2 has stamp 1001
        // (product 3003), 1 was hit 10 ticks later (1011): 1 goes, though it
        // is the most recent block and 2 has not been touched for 10 ticks.
        assert_eq!(drift_scenario(CostMode::Timestamp, 999), [1]);
        // Age: 2 is 11 ticks old / 3 > 1 tick / 1, at any absolute time.
        assert_eq!(drift_scenario(CostMode::Age, 0), [2]);
        assert_eq!(drift_scenario(CostMode::Age, 999), [2]);
    }

    #[test]
    fn age_mode_keeps_a_costly_block_cost_times_longer() {
        // Costly 1 (cost 3) then cheap 2..: 1 survives while its age / 3 is
        // below the cheap tail's age.
        let mut policy = cost(3, &[1.0, 3.0], CostMode::Age);
        let trace = grouped(&[(1, 1), (2, 0), (3, 0), (4, 0), (5, 0), (6, 0), (7, 0)]);
        // At 4: ages 1→3/3=1, 2→2; 2 goes. At 5: 1→4/3, 3→2; 3 goes.
        // At 6: 1→5/3, 4→2; 4 goes. At 7: 1→6/3=2, 5→2: tie, lower group 0.
        assert_eq!(run(&mut policy, &trace), [2, 3, 4, 5]);
        assert!(policy.contains(1));
    }

    #[test]
    #[allow(
        clippy::float_cmp,
        reason = "costs are stored and read back bit-exactly"
    )]
    fn shared_table_updates_change_the_victim() {
        let table = Arc::new(CostTable::new(2));
        let mut policy = Cost::with_table(
            Capacity::Objects(2),
            &CostConfig::default(),
            Arc::clone(&table),
        );
        let trace = grouped(&[(1, 1), (2, 0), (3, 0)]);
        let mut victims = vec![];
        policy.access(&trace[0], &mut victims);
        policy.access(&trace[1], &mut victims);
        table.set(1, 3.0).unwrap();
        policy.access(&trace[2], &mut victims);
        assert_eq!(victims, [2], "the estimate set at run time protects 1");
        assert_eq!(policy.table().get(1), 3.0);
        assert_eq!(table.get(7), 1.0, "an uncovered group costs 1");
        assert!(table.set(7, 2.0).is_err());
        assert!(table.set(0, 0.0).is_err());
        assert!(table.set(0, f64::INFINITY).is_err());
    }

    #[test]
    fn rejects_non_positive_costs() {
        let config = CostConfig {
            costs: vec![1.0, -2.0],
            mode: CostMode::Age,
        };
        assert!(Cost::new(Capacity::Objects(4), &config).is_err());
    }

    proptest! {
        #[test]
        fn matches_naive_model(
            trace in testing::trace_strategy(40, 400, 5),
            cap in 1u64..20,
            bytes: bool,
            age: bool,
            regroup: bool,
        ) {
            // Groups 0..4; group 3 is not in the table (cost 1). With
            // `regroup`, a key's group changes between accesses.
            let trace: Vec<Access> = trace
                .into_iter()
                .map(|mut a| {
                    let salt = if regroup { a.time / 7 } else { 0 };
                    a.group = ((a.key + salt) % 4) as u16;
                    a
                })
                .collect();
            let capacity = if bytes { Capacity::Bytes(cap) } else { Capacity::Objects(cap) };
            let mode = if age { CostMode::Age } else { CostMode::Timestamp };
            let config = CostConfig { costs: vec![1.0, 3.0, 2.0], mode };
            let mut policy = Cost::new(capacity, &config).unwrap();
            let mut naive = NaiveCost { capacity, costs: config.costs.clone(), mode, clock: 0, items: vec![] };
            testing::assert_matches_reference(&mut policy, &mut naive, &trace);
            testing::replay_checked(&mut Cost::new(capacity, &config).unwrap(), &trace);
        }
    }
}
