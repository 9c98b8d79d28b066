//! PG, the probability graph: load the units that usually come soon after
//! this one.
//!
//! Reference: J. Griffioen and R. Appleton, "Reducing File System Latency
//! using a Predictive Approach", USENIX Summer 1994; as libCacheSim has it
//! (`cache/prefetch/PG.c`, Juncheng Yang 2016, Zhelong 2024).
//!
//! The graph has a node per unit and an arc `a → b` counting how often `b`
//! was accessed within the `lookahead_range` accesses after `a`. Each access
//! closes the window of the access `lookahead_range` ago: its node's total
//! grows by the window's length and its arcs to every unit in the window by
//! one. After an access to `u`, every `b` with `count(u → b) / total(u)`
//! above `prefetch_threshold` is loaded, the most likely last (so it is the
//! most recently inserted).
//!
//! Memory is bounded as libCacheSim bounds it: a node or an arc costs 32
//! bytes of a budget of `max_metadata_fraction` × the cache's capacity in
//! bytes (a capacity in objects counts `unit_bytes` per object, libCacheSim's
//! `block-size`); once spent, no new node or arc is recorded, while existing
//! ones keep counting.
//!
//! libCacheSim's default `block-size` is 1, so a cache of n objects gets a
//! budget of n / 10 bytes and its graph stops growing after a few hundred
//! arcs; ours defaults to 4096 (a block); `unit_bytes = 1` gives
//! libCacheSim's.
//!
//! Differences from libCacheSim (aa0fc40): it pops candidates from a heap
//! whose raised priorities are never sifted up (`pri++` before
//! `pqueue_change_priority`), so it loads fewer units than are above the
//! threshold; this loads all of them, as the paper defines. It also reads a
//! stack byte uninitialised at its first requests. With those two mended,
//! libCacheSim's miss counts equal ours (`libcachesim_agreement.rs`). Ties
//! between equally likely units are loaded in key order; unit 0 is a unit
//! (libCacheSim's window uses 0 for "empty"); a prefetched unit takes the
//! triggering access's size (libCacheSim looks up the size last seen).

use serde::{Deserialize, Serialize};

use super::Prefetcher;
use crate::{Capacity, ConfigError, KeyMap};

/// What a node or an arc costs of the metadata budget, in bytes
/// (libCacheSim's `8 + 8 * 3`).
const ENTRY_BYTES: u64 = 32;

/// PG's parameters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PgConfig {
    /// How many following accesses count as "soon after". 1 ..= 100; default
    /// 20.
    pub lookahead_range: u32,
    /// The graph's budget as a fraction of the cache's capacity in bytes
    /// (each node and arc costs 32 bytes of it). (0, 1); default 0.1.
    pub max_metadata_fraction: f64,
    /// Bytes an object counts for in that budget when the capacity is in
    /// objects (libCacheSim's `block-size`). 1 ..= 2^30; default 4096.
    pub unit_bytes: u64,
    /// The least `count(u → b) / total(u)` (exclusive) that loads `b`. (0,
    /// 1); default 0.05.
    pub prefetch_threshold: f64,
}

impl Default for PgConfig {
    fn default() -> Self {
        Self {
            lookahead_range: 20,
            max_metadata_fraction: 0.1,
            unit_bytes: 4096,
            prefetch_threshold: 0.05,
        }
    }
}

impl PgConfig {
    /// Checks every value's range.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let out = |parameter, value: String, expected| {
            Err(ConfigError::OutOfRange {
                policy: "pg",
                parameter,
                value,
                expected,
            })
        };
        if !(1..=100).contains(&self.lookahead_range) {
            return out(
                "lookahead_range",
                self.lookahead_range.to_string(),
                "in 1..=100",
            );
        }
        if !(1..=1 << 30).contains(&self.unit_bytes) {
            return out("unit_bytes", self.unit_bytes.to_string(), "in 1..=2^30");
        }
        let open = |x: f64| x > 0.0 && x < 1.0;
        if !open(self.max_metadata_fraction) {
            return out(
                "max_metadata_fraction",
                self.max_metadata_fraction.to_string(),
                "in (0, 1)",
            );
        }
        if !open(self.prefetch_threshold) {
            return out(
                "prefetch_threshold",
                self.prefetch_threshold.to_string(),
                "in (0, 1)",
            );
        }
        Ok(())
    }
}

/// The least count `c` with `c / total > threshold` in `f64`, as libCacheSim
/// tests each arc (so rounding decides exactly as there), found from
/// `threshold × total` in at most a few steps; one per access instead of a
/// division per arc.
fn least_count(total: u64, threshold: f64) -> u64 {
    let likely = |count: u64| count as f64 / total as f64 > threshold;
    let mut count = (threshold * total as f64).floor() as u64;
    while count > 0 && likely(count - 1) {
        count -= 1;
    }
    while !likely(count) {
        count += 1;
    }
    count
}

/// A capacity in bytes, counting `unit_bytes` an object.
fn capacity_bytes(capacity: Capacity, unit_bytes: u64) -> u64 {
    match capacity {
        Capacity::Bytes(bytes) => bytes,
        Capacity::Objects(objects) => objects.saturating_mul(unit_bytes),
    }
}

#[derive(Debug, Default)]
struct Node {
    /// Window slots this node's windows held (the denominator).
    total: u64,
    /// The largest count of `arcs`: when even it is not likely enough, the
    /// arcs need no scan.
    max: u64,
    /// (successor, how many of those slots it filled), dense, so a scan for
    /// the likely ones reads one array.
    arcs: Vec<(u64, u64)>,
    /// Successor → its place in `arcs`.
    places: KeyMap<u32>,
}

/// The PG prefetcher. See the module docs.
#[derive(Debug)]
pub struct Pg {
    window: Box<[u64]>,
    /// How many of `window`'s slots hold an access (it fills once).
    filled: usize,
    /// The slot the next access overwrites: the oldest.
    next: usize,
    graph: KeyMap<Node>,
    threshold: f64,
    budget: u64,
    spent: u64,
    recording: bool,
    /// Candidates of one access, reused: (count, key).
    candidates: Vec<(u64, u64)>,
}

impl Pg {
    /// A PG prefetcher for a cache of `capacity`.
    pub fn new(capacity: Capacity, config: &PgConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        Ok(Self {
            window: vec![0; config.lookahead_range as usize].into_boxed_slice(),
            filled: 0,
            next: 0,
            graph: KeyMap::default(),
            threshold: config.prefetch_threshold,
            budget: (capacity_bytes(capacity, config.unit_bytes) as f64
                * config.max_metadata_fraction) as u64,
            spent: 0,
            recording: true,
            candidates: Vec::new(),
        })
    }

    /// Bytes of the budget spent on nodes and arcs.
    pub fn metadata_bytes(&self) -> u64 {
        self.spent
    }

    /// Closes the window of the oldest access (if the window is full) with
    /// `key` as its newest unit.
    fn record(&mut self, key: u64) {
        let full = self.filled == self.window.len();
        let closing = self.window[self.next];
        self.window[self.next] = key;
        self.next = (self.next + 1) % self.window.len();
        if !full {
            self.filled += 1;
            return;
        }
        let node = match self.graph.get_mut(&closing) {
            Some(node) => node,
            None if self.recording => {
                self.spent += ENTRY_BYTES;
                self.graph.entry(closing).or_default()
            }
            None => return,
        };
        for &successor in &*self.window {
            node.total += 1;
            if let Some(&place) = node.places.get(&successor) {
                let count = &mut node.arcs[place as usize].1;
                *count += 1;
                node.max = node.max.max(*count);
            } else if self.recording {
                node.places.insert(successor, node.arcs.len() as u32);
                node.arcs.push((successor, 1));
                node.max = node.max.max(1);
                self.spent += ENTRY_BYTES;
            } else {
                // libCacheSim stops at the first arc it has no room for.
                return;
            }
        }
        if self.spent >= self.budget {
            self.recording = false;
        }
    }
}

impl Prefetcher for Pg {
    fn name(&self) -> &'static str {
        "pg"
    }

    fn access(&mut self, key: u64, _hit: bool, out: &mut Vec<u64>) {
        self.record(key);
        let Some(node) = self.graph.get(&key) else {
            return;
        };
        let least = least_count(node.total, self.threshold);
        if node.max < least {
            return;
        }
        self.candidates.clear();
        self.candidates.extend(
            node.arcs
                .iter()
                .filter(|&&(_, count)| count >= least)
                .map(|&(successor, count)| (count, successor)),
        );
        // Least likely first, so the most likely enters the cache last.
        self.candidates.sort_unstable();
        out.extend(self.candidates.iter().map(|&(_, successor)| successor));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pg(range: u32, threshold: f64) -> Pg {
        Pg::new(
            Capacity::Objects(1 << 20),
            &PgConfig {
                lookahead_range: range,
                prefetch_threshold: threshold,
                ..PgConfig::default()
            },
        )
        .unwrap()
    }

    /// The definition, on the whole history: arcs from each access closed
    /// (followed by a full window) to the window's units.
    fn naive(history: &[u64], range: usize, threshold: f64, key: u64) -> Vec<u64> {
        let mut total = 0u64;
        let mut counts = std::collections::BTreeMap::<u64, u64>::new();
        for at in 0..history.len().saturating_sub(range) {
            if history[at] != key {
                continue;
            }
            for &successor in &history[at + 1..=at + range] {
                total += 1;
                *counts.entry(successor).or_default() += 1;
            }
        }
        let mut chosen: Vec<(u64, u64)> = counts
            .into_iter()
            .filter(|&(_, c)| total > 0 && c as f64 / total as f64 > threshold)
            .map(|(k, c)| (c, k))
            .collect();
        chosen.sort_unstable();
        chosen.into_iter().map(|(_, k)| k).collect()
    }

    #[test]
    fn a_unit_that_always_follows_is_loaded() {
        let mut pg = pg(1, 0.5);
        let mut out = Vec::new();
        for _ in 0..3 {
            pg.access(7, false, &mut out);
            pg.access(8, false, &mut out);
        }
        out.clear();
        pg.access(7, true, &mut out);
        assert_eq!(out, [8]);
    }

    #[test]
    fn a_likelihood_equal_to_the_threshold_is_not_enough() {
        // 1 → 2 and 1 → 3 each fill half of 1's window.
        for (threshold, expected) in [(0.5, vec![]), (0.49, vec![2, 3])] {
            let mut pg = pg(2, threshold);
            let mut out = Vec::new();
            for key in [1, 2, 3] {
                pg.access(key, false, &mut out);
            }
            out.clear();
            pg.access(1, true, &mut out);
            assert_eq!(out, expected, "threshold {threshold}");
        }
    }

    #[test]
    fn the_least_count_decides_as_a_division_per_arc_does() {
        for total in 1..2000u64 {
            for threshold in [0.05, 0.01, 0.1, 1.0 / 3.0, 0.5, 0.999, 1e-9] {
                let least = least_count(total, threshold);
                for count in least.saturating_sub(3)..least + 3 {
                    assert_eq!(
                        count >= least,
                        count as f64 / total as f64 > threshold,
                        "total {total} threshold {threshold} count {count}"
                    );
                }
            }
        }
    }

    #[test]
    fn out_of_range_values_are_errors() {
        for (config, message) in [
            (
                PgConfig {
                    lookahead_range: 0,
                    ..PgConfig::default()
                },
                "pg: `lookahead_range` = 0 is out of range: in 1..=100",
            ),
            (
                PgConfig {
                    prefetch_threshold: 1.0,
                    ..PgConfig::default()
                },
                "pg: `prefetch_threshold` = 1 is out of range: in (0, 1)",
            ),
            (
                PgConfig {
                    max_metadata_fraction: 0.0,
                    ..PgConfig::default()
                },
                "pg: `max_metadata_fraction` = 0 is out of range: in (0, 1)",
            ),
        ] {
            let error = Pg::new(Capacity::Objects(10), &config).unwrap_err();
            assert_eq!(error.to_string(), message);
        }
    }

    #[test]
    fn the_budget_stops_new_nodes_and_arcs_but_not_counting() {
        // 10 objects of 1 byte × 0.1 = 1 byte: the first node spends it all.
        let mut pg = Pg::new(
            Capacity::Objects(10),
            &PgConfig {
                lookahead_range: 1,
                max_metadata_fraction: 0.1,
                unit_bytes: 1,
                prefetch_threshold: 0.01,
            },
        )
        .unwrap();
        let mut out = Vec::new();
        for key in [1, 2, 1, 2, 3, 4, 3, 4] {
            pg.access(key, false, &mut out);
        }
        assert_eq!(
            pg.metadata_bytes(),
            2 * ENTRY_BYTES,
            "node 1 and its arc to 2"
        );
        out.clear();
        pg.access(1, true, &mut out);
        assert_eq!(out, [2]);
        out.clear();
        pg.access(3, true, &mut out);
        assert!(out.is_empty(), "3 came after the budget ran out");
    }

    proptest::proptest! {
        #[test]
        fn loads_what_the_definition_says(
            range in 1usize..5,
            history in proptest::collection::vec(0u64..8, 0..120),
            threshold in 0.01f64..0.9,
        ) {
            let mut pg = pg(range as u32, threshold);
            for (at, &key) in history.iter().enumerate() {
                let mut out = Vec::new();
                pg.access(key, false, &mut out);
                let expected = naive(&history[..=at], range, threshold, key);
                proptest::prop_assert_eq!(out, expected, "access {}", at);
            }
        }
    }
}
