//! GDSF: Greedy-Dual-Size-Frequency.
//!
//! Source: Ludmila Cherkasova, "Improving WWW proxies performance with
//! Greedy-Dual-Size-Frequency caching policy", HP Labs HPL-98-69, 1998.
//! Each resident unit has priority `H = L + freq × cost / size`; the unit
//! with the lowest `H` is evicted and `L` ("inflation", initially 0) becomes
//! its `H`, so units that stop being hit age out. A hit increments `freq`
//! and recomputes `H` with the current `L`.
//!
//! - `size` is the unit's charge: its bytes in byte mode, 1 in object mode
//!   (libCacheSim's `ignore_obj_size` makes every size 1 the same way).
//! - `cost` comes from the access's cost group (`Access::group`) through
//!   `group_costs`; groups past the end of the table, and the default empty
//!   table, cost 1.
//! - As in libCacheSim's `cpp/GDSF.cpp`, the cost term is scaled by 10⁶
//!   (`freq × 1e6 / size`), and ties in `H` go to the unit touched least
//!   recently (its `(priority, last request)` ordered set), so the two give
//!   the same results.
//! - The order of a miss, in two versions. By default, as libCacheSim's
//!   current `cpp/GDSF.cpp` (the `libcachesim` 0.3.5 release): the new unit
//!   is inserted with `H = L + cost / size` first, then the lowest `H` is
//!   evicted until the cache fits, so the new unit is a candidate itself and
//!   may leave at once (then it counts as not admitted). With
//!   `new_unit_competes = false`, as the paper's Greedy-Dual and libCacheSim
//!   commit aa0fc40: evict until the new unit fits, then insert it with the
//!   `L` those evictions raised.
//!
//! Checked on `cloudPhysicsIO` by `crates/cairn-sim/tests/libcachesim_agreement.rs`:
//! the same miss counts as libCacheSim 0.3.5 at 1, 5, 10 and 20 % of the
//! distinct objects and of the bytes, and with `new_unit_competes = false`
//! as commit aa0fc40 in object mode.
//!
//! Residents sit in an [`IndexedHeap`]; nothing allocates per access once the
//! heap and map have grown to the cache's size.

use serde::{Deserialize, Serialize};

use crate::heap::{Handle, IndexedHeap};
use crate::{Access, Capacity, ConfigError, KeyMap, Policy};

/// The scale of the cost term, as in libCacheSim.
const COST_SCALE: f64 = 1.0e6;

/// GDSF parameters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GdsfConfig {
    /// Miss cost per cost group (index = `Access::group`), each finite and
    /// positive; unlisted groups cost 1. Default: empty (every miss costs 1,
    /// plain GDSF as in libCacheSim).
    pub group_costs: Vec<f64>,
    /// Insert a missed unit before evicting, so that it competes for its
    /// place (libCacheSim's current GDSF). Default true; false evicts first
    /// (Greedy-Dual as published, libCacheSim aa0fc40).
    pub new_unit_competes: bool,
}

impl Default for GdsfConfig {
    fn default() -> Self {
        Self {
            group_costs: Vec::new(),
            new_unit_competes: true,
        }
    }
}

/// A priority `H` with the logical time of the unit's last touch as the
/// tie-breaker (older first).
#[derive(Clone, Copy, Debug)]
struct Priority {
    value: f64,
    seq: u64,
}

impl PartialEq for Priority {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other).is_eq()
    }
}

impl Eq for Priority {}

impl PartialOrd for Priority {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Priority {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.value
            .total_cmp(&other.value)
            .then(self.seq.cmp(&other.seq))
    }
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    key: u64,
    charge: u64,
    freq: u64,
}

/// Greedy-Dual-Size-Frequency replacement.
#[derive(Debug)]
pub struct Gdsf {
    capacity: Capacity,
    group_costs: Vec<f64>,
    /// See [`GdsfConfig::new_unit_competes`].
    new_unit_competes: bool,
    used: u64,
    /// `L`: the priority of the last unit evicted.
    inflation: f64,
    /// Logical clock for tie-breaking.
    seq: u64,
    map: KeyMap<Handle>,
    heap: IndexedHeap<Priority, Entry>,
}

impl Gdsf {
    /// An empty GDSF cache.
    pub fn new(capacity: Capacity, config: &GdsfConfig) -> Result<Self, ConfigError> {
        if let Some(bad) = config
            .group_costs
            .iter()
            .find(|c| !(c.is_finite() && **c > 0.0))
        {
            return Err(ConfigError::OutOfRange {
                policy: "gdsf",
                parameter: "group_costs",
                value: bad.to_string(),
                expected: "finite positive costs",
            });
        }
        Ok(Self {
            capacity,
            group_costs: config.group_costs.clone(),
            new_unit_competes: config.new_unit_competes,
            used: 0,
            inflation: 0.0,
            seq: 0,
            map: KeyMap::default(),
            heap: IndexedHeap::new(),
        })
    }

    /// Evicts the lowest `H` until at most `limit` is used, raising `L`.
    fn evict_until(&mut self, limit: u64, victims: &mut Vec<u64>) {
        while self.used > limit {
            let Some((priority, victim)) = self.heap.pop() else {
                break;
            };
            self.inflation = priority.value;
            self.used -= victim.charge;
            self.map.remove(&victim.key);
            victims.push(victim.key);
        }
    }

    fn priority(&mut self, access: &Access, freq: u64, charge: u64) -> Priority {
        let cost = self
            .group_costs
            .get(usize::from(access.group))
            .copied()
            .unwrap_or(1.0);
        self.seq += 1;
        Priority {
            value: self.inflation + freq as f64 * (cost * COST_SCALE) / charge as f64,
            seq: self.seq,
        }
    }
}

impl Policy for Gdsf {
    fn name(&self) -> &'static str {
        "gdsf"
    }

    fn lookup(&mut self, access: &Access) -> bool {
        let Some(&handle) = self.map.get(&access.key) else {
            return false;
        };
        let entry = self.heap.value_mut(handle);
        entry.freq += 1;
        let (freq, charge) = (entry.freq, entry.charge);
        let priority = self.priority(access, freq, charge);
        self.heap.set_priority(handle, priority);
        true
    }

    fn admit(&mut self, access: &Access, victims: &mut Vec<u64>) -> bool {
        let charge = self.capacity.charge(access.size);
        if charge > self.capacity.limit() {
            return false;
        }
        debug_assert!(
            !self.map.contains_key(&access.key),
            "admit of a resident key"
        );
        if !self.new_unit_competes {
            self.evict_until(self.capacity.limit() - charge, victims);
        }
        let priority = self.priority(access, 1, charge);
        let handle = self.heap.push(
            priority,
            Entry {
                key: access.key,
                charge,
                freq: 1,
            },
        );
        self.map.insert(access.key, handle);
        self.used += charge;
        if self.new_unit_competes {
            self.evict_until(self.capacity.limit(), victims);
            if !self.map.contains_key(&access.key) {
                // It had the lowest H: evicted on arrival, so never resident.
                victims.pop();
                return false;
            }
        }
        true
    }

    fn remove(&mut self, key: u64) -> bool {
        let Some(handle) = self.map.remove(&key) else {
            return false;
        };
        self.used -= self.heap.remove(handle).1.charge;
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

    /// Naive GDSF: a vector of `(key, charge, freq, H, seq)`, linear minimum.
    struct NaiveGdsf {
        capacity: Capacity,
        costs: Vec<f64>,
        inflation: f64,
        seq: u64,
        items: Vec<(u64, u64, u64, f64, u64)>,
        competes: bool,
    }

    impl NaiveGdsf {
        /// Evicts the lowest `(H, seq)` while more than `limit` is used.
        fn evict_until(&mut self, limit: u64, victims: &mut Vec<u64>) {
            while self.items.iter().map(|i| i.1).sum::<u64>() > limit {
                let at = (0..self.items.len())
                    .min_by(|&a, &b| {
                        let (x, y) = (self.items[a], self.items[b]);
                        x.3.total_cmp(&y.3).then(x.4.cmp(&y.4))
                    })
                    .unwrap();
                let victim = self.items.remove(at);
                self.inflation = victim.3;
                victims.push(victim.0);
            }
        }

        fn h(&mut self, access: &Access, freq: u64, charge: u64) -> (f64, u64) {
            let cost = self
                .costs
                .get(access.group as usize)
                .copied()
                .unwrap_or(1.0);
            self.seq += 1;
            (
                self.inflation + freq as f64 * (cost * 1e6) / charge as f64,
                self.seq,
            )
        }
    }

    impl Reference for NaiveGdsf {
        fn access(&mut self, access: &Access) -> (bool, Vec<u64>) {
            if let Some(at) = self.items.iter().position(|i| i.0 == access.key) {
                let (_, charge, freq, ..) = self.items[at];
                let (h, seq) = self.h(access, freq + 1, charge);
                self.items[at] = (access.key, charge, freq + 1, h, seq);
                return (true, vec![]);
            }
            let charge = self.capacity.charge(access.size);
            let mut victims = vec![];
            if charge > self.capacity.limit() {
                return (false, victims);
            }
            if !self.competes {
                self.evict_until(self.capacity.limit() - charge, &mut victims);
            }
            let (h, seq) = self.h(access, 1, charge);
            self.items.push((access.key, charge, 1, h, seq));
            if self.competes {
                self.evict_until(self.capacity.limit(), &mut victims);
                if victims.last() == Some(&access.key) {
                    victims.pop();
                }
            }
            (false, victims)
        }
    }

    /// Greedy-Dual as published: evict first, then insert.
    fn evicting_first() -> GdsfConfig {
        GdsfConfig {
            new_unit_competes: false,
            ..GdsfConfig::default()
        }
    }

    #[test]
    fn frequency_protects_and_inflation_ages() {
        let mut cache = Gdsf::new(Capacity::Objects(2), &evicting_first()).unwrap();
        let mut victims = vec![];
        // 1 is hit twice (H = 3e6); 2 (H = 1e6) is evicted for 3, L = 1e6.
        // 3 enters with H = L + 1e6 = 2e6 and is the next victim, for 4.
        for access in testing::keys(&[1, 1, 1, 2, 3, 4]) {
            cache.access(&access, &mut victims);
        }
        assert_eq!(victims, [2, 3]);
        assert!((cache.inflation - 2e6).abs() < 1.0);
        // 4 has H = 3e6 too, but 1 was touched longer ago: 1 goes.
        victims.clear();
        cache.access(&testing::keys(&[9])[0], &mut victims);
        assert_eq!(victims, [1]);
    }

    #[test]
    fn costly_groups_and_small_units_are_kept() {
        let config = GdsfConfig {
            group_costs: vec![1.0, 4.0],
            ..evicting_first()
        };
        let mut cache = Gdsf::new(Capacity::Bytes(10), &config).unwrap();
        let mut trace = testing::accesses(&[(1, 4), (2, 4), (3, 4)]);
        trace[0].group = 1; // 1 is expensive: H = 4e6 / 4
        let mut victims = vec![];
        for access in &trace {
            cache.access(access, &mut victims);
        }
        assert_eq!(victims, [2], "2 and 3 cost 1; 2 is older");
        assert!(
            Gdsf::new(
                Capacity::Bytes(1),
                &GdsfConfig {
                    group_costs: vec![0.0],
                    ..GdsfConfig::default()
                }
            )
            .is_err()
        );
    }

    #[test]
    fn a_new_unit_with_the_lowest_priority_leaves_on_arrival() {
        // Bytes(8): 1 (4 bytes) is hit once, H = 2 × 1e6 / 4 = 5e5. 2 (4
        // bytes) has H = 1e6 / 4 = 2.5e5. 3 (8 bytes) arrives with
        // H = 1e6 / 8 = 1.25e5, the lowest: inserted first, it competes and
        // goes, so 1 and 2 stay and L becomes its H.
        let trace = testing::accesses(&[(1, 4), (1, 4), (2, 4), (3, 8)]);
        let mut cache = Gdsf::new(Capacity::Bytes(8), &GdsfConfig::default()).unwrap();
        let mut victims = vec![];
        let admitted: Vec<bool> = trace
            .iter()
            .map(|access| {
                let hit = cache.lookup(access);
                hit || cache.admit(access, &mut victims)
            })
            .collect();
        assert_eq!(admitted, [true, true, true, false], "3 is not admitted");
        assert!(victims.is_empty(), "nobody resident left: {victims:?}");
        assert!(cache.contains(1) && cache.contains(2) && !cache.contains(3));
        assert!((cache.inflation - 1.25e5).abs() < 1.0);
        // Evicting first, 3 takes the place of both.
        let mut classic = Gdsf::new(Capacity::Bytes(8), &evicting_first()).unwrap();
        victims.clear();
        for access in &trace {
            classic.access(access, &mut victims);
        }
        assert_eq!(victims, [2, 1]);
        assert!(classic.contains(3));
    }

    proptest! {
        #[test]
        fn matches_naive_model(trace in testing::trace_strategy(40, 400, 5), cap in 1u64..20, bytes: bool, competes: bool, groups in prop::collection::vec(0u16..3, 400)) {
            let capacity = if bytes { Capacity::Bytes(cap) } else { Capacity::Objects(cap) };
            let trace: Vec<Access> = trace.into_iter().zip(groups).map(|(mut a, g)| { a.group = g; a }).collect();
            let config = GdsfConfig { group_costs: vec![1.0, 2.5], new_unit_competes: competes };
            let mut naive = NaiveGdsf { capacity, costs: config.group_costs.clone(), inflation: 0.0, seq: 0, items: vec![], competes };
            testing::assert_matches_reference(&mut Gdsf::new(capacity, &config).unwrap(), &mut naive, &trace);
            testing::replay_checked(&mut Gdsf::new(capacity, &config).unwrap(), &trace);
        }
    }
}
