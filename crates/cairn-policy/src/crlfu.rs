//! CR-LFU: churn-resistant LFU, Cacheus's second expert on its own.
//!
//! Origin: L. V. Rodriguez, F. Yusuf, S. Lyons, E. Paz, R. Rangaswami,
//! J. Liu, M. Zhao, G. Narasimhan, "Learning Cache Replacement with
//! CACHEUS", FAST 2021 (section 4.2).
//!
//! Least frequently used, and among the least frequent the unit that reached
//! that frequency *last* (most recently used among equals). Under churn (a
//! working set larger than the cache, accessed round-robin) plain LFU with an
//! LRU tie-break evicts every unit before its next use; CR-LFU keeps the
//! older ones and sacrifices the newcomers.
//!
//! Maps to libCacheSim's `CR_LFU` (`CR_LFU.c`) run on its own (as
//! `CR_LFU_init`; `aa0fc40`'s `cachesim` has no name for it): a new unit
//! enters with frequency 1 at the back of the frequency-1 bucket, a hit
//! moves the unit to the back of the next bucket, and eviction takes the
//! back of the lowest bucket. Standalone, frequencies are not remembered
//! after eviction (inside Cacheus a unit back from SR-LRU's history regains
//! its old frequency plus one; see [`crate::cacheus`]). It has no knobs.
//! Equals libCacheSim `aa0fc40` exactly (see `docs/policies.md`).

use serde::{Deserialize, Serialize};

use crate::freq::FreqBuckets;
use crate::index::{KeyIndex, Keyed};
use crate::list::{Index, NIL, Slab};
use crate::{Access, Ahead, Capacity, ConfigError, Policy};

/// CR-LFU has no knobs (libCacheSim's has none either).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CrLfuConfig {}

#[derive(Clone, Copy, Debug)]
struct Entry {
    key: u64,
    charge: u64,
    /// The unit's node in the frequency buckets.
    node: Index,
}

impl Keyed for Entry {
    fn key(&self) -> u64 {
        self.key
    }
}

/// CR-LFU replacement.
#[derive(Debug)]
pub struct CrLfu {
    capacity: Capacity,
    used: u64,
    map: KeyIndex,
    slab: Slab<Entry>,
    freq: FreqBuckets,
}

impl CrLfu {
    /// An empty CR-LFU cache.
    pub fn new(capacity: Capacity, _config: &CrLfuConfig) -> Result<Self, ConfigError> {
        Ok(Self {
            capacity,
            used: 0,
            map: KeyIndex::default(),
            slab: Slab::new(),
            freq: FreqBuckets::default(),
        })
    }

    fn unlink(&mut self, index: Index) -> Entry {
        let entry = *self.slab.get(index);
        self.freq.remove(entry.node);
        self.map.remove(entry.key, &self.slab);
        self.slab.remove(index);
        self.used -= entry.charge;
        entry
    }
}

impl Policy for CrLfu {
    fn name(&self) -> &'static str {
        "cr-lfu"
    }

    fn prefetch(&self, key: u64, ahead: Ahead) {
        self.map.prefetch_stage(key, &self.slab, ahead, false);
    }

    fn lookup(&mut self, access: &Access) -> bool {
        match self.map.get(access.key, &self.slab) {
            Some(index) => {
                self.freq.bump(self.slab.get(index).node);
                true
            }
            None => false,
        }
    }

    fn admit(&mut self, access: &Access, victims: &mut Vec<u64>) -> bool {
        let charge = self.capacity.charge(access.size);
        if charge > self.capacity.limit() {
            return false;
        }
        if self.map.get(access.key, &self.slab).is_some() {
            return true; // `admit` without its `lookup`, of a resident key
        }
        while self.used + charge > self.capacity.limit() {
            let Some(victim) = self.freq.newest_of_least() else {
                break;
            };
            victims.push(self.unlink(victim).key);
        }
        let index = self.slab.insert(Entry {
            key: access.key,
            charge,
            node: NIL,
        });
        self.slab.get_mut(index).node = self.freq.insert(index, 1);
        self.map.insert(access.key, index, &self.slab);
        self.used += charge;
        true
    }

    fn remove(&mut self, key: u64) -> bool {
        match self.map.get(key, &self.slab) {
            Some(index) => {
                self.unlink(index);
                true
            }
            None => false,
        }
    }

    fn contains(&self, key: u64) -> bool {
        self.map.get(key, &self.slab).is_some()
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

    /// Naive CR-LFU: (key, charge, frequency, when it reached it), scanned.
    struct NaiveCrLfu {
        capacity: Capacity,
        units: Vec<(u64, u64, u64, u64)>,
        tick: u64,
    }

    impl Reference for NaiveCrLfu {
        fn access(&mut self, access: &Access) -> (bool, Vec<u64>) {
            self.tick += 1;
            if let Some(unit) = self.units.iter_mut().find(|u| u.0 == access.key) {
                unit.2 += 1;
                unit.3 = self.tick;
                return (true, vec![]);
            }
            let charge = self.capacity.charge(access.size);
            let limit = self.capacity.limit();
            let mut victims = vec![];
            if charge > limit {
                return (false, victims);
            }
            while self.units.iter().map(|u| u.1).sum::<u64>() + charge > limit {
                // Least frequent; among those, the latest to get there.
                let at = (0..self.units.len())
                    .min_by_key(|&i| (self.units[i].2, std::cmp::Reverse(self.units[i].3)))
                    .unwrap();
                victims.push(self.units.remove(at).0);
            }
            self.units.push((access.key, charge, 1, self.tick));
            (false, victims)
        }
    }

    fn crlfu(capacity: Capacity) -> CrLfu {
        CrLfu::new(capacity, &CrLfuConfig::default()).unwrap()
    }

    #[test]
    fn a_newcomer_goes_before_an_older_unit_of_its_frequency() {
        let mut c = crlfu(Capacity::Objects(3));
        let mut victims = vec![];
        // 1 is hit (frequency 2); 2 and 3 have frequency 1, 3 the newest.
        for access in testing::keys(&[1, 1, 2, 3, 4]) {
            c.access(&access, &mut victims);
        }
        assert_eq!(victims, [3], "the newest of the least frequent goes");
        // 4 is now the newest at frequency 1; 5 evicts it, not 2.
        c.access(&testing::keys(&[5])[0], &mut victims);
        assert_eq!(victims, [3, 4]);
        assert!(c.contains(1) && c.contains(2) && c.contains(5));
    }

    #[test]
    fn churn_keeps_the_old_units() {
        // A loop of 6 keys through 4 slots: LRU (and LFU with an LRU
        // tie-break) misses every time; CR-LFU keeps 3 of the loop.
        let mut c = crlfu(Capacity::Objects(4));
        let keys: Vec<u64> = (0..60).map(|i| i % 6).collect();
        let hits = testing::replay_checked(&mut c, &testing::keys(&keys));
        assert_eq!(hits, 27, "keys 0, 1, 2 hit on each of the 9 later passes");
    }

    #[test]
    fn too_large_a_unit_is_refused() {
        let mut c = crlfu(Capacity::Bytes(10));
        let mut victims = vec![];
        assert!(!c.access(&Access::read(1, 11, 0), &mut victims));
        assert!(!c.contains(1));
    }

    proptest! {
        #[test]
        fn matches_naive_model(trace in testing::trace_strategy(40, 400, 5), cap in 1u64..20, bytes: bool) {
            let capacity = if bytes { Capacity::Bytes(cap) } else { Capacity::Objects(cap) };
            let mut naive = NaiveCrLfu { capacity, units: vec![], tick: 0 };
            testing::assert_matches_reference(&mut crlfu(capacity), &mut naive, &trace);
            testing::replay_checked(&mut crlfu(capacity), &trace);
        }
    }
}
