//! MRU: evict the most recently used unit.
//!
//! The classical policy for cyclic and sequential scans larger than the cache,
//! where the unit just used is the one needed last (Chou & DeWitt, "An
//! Evaluation of Buffer Management Strategies for Relational Database
//! Systems", VLDB 1985). Matches libCacheSim's `MRU` (aa0fc40,
//! `cache/eviction/MRU.c`): a hit moves the unit to the head, a miss evicts
//! from the head until the new unit fits and then inserts it at the head, so
//! the victim is the unit touched last before the miss.

use serde::{Deserialize, Serialize};

use crate::index::{KeyIndex, Keyed};
use crate::list::{List, Slab};
use crate::{Access, Ahead, Capacity, ConfigError, Policy};

/// MRU has no knobs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MruConfig {}

#[derive(Clone, Copy, Debug)]
struct Entry {
    key: u64,
    charge: u64,
}

impl Keyed for Entry {
    fn key(&self) -> u64 {
        self.key
    }
}

/// Most-recently-used replacement.
#[derive(Debug)]
pub struct Mru {
    capacity: Capacity,
    used: u64,
    map: KeyIndex,
    slab: Slab<Entry>,
    /// Most recently used first.
    queue: List,
}

impl Mru {
    /// An empty MRU cache.
    pub fn new(capacity: Capacity, _config: &MruConfig) -> Result<Self, ConfigError> {
        Ok(Self {
            capacity,
            used: 0,
            map: KeyIndex::default(),
            slab: Slab::new(),
            queue: List::new(),
        })
    }
}

impl Policy for Mru {
    fn name(&self) -> &'static str {
        "mru"
    }

    fn prefetch(&self, key: u64, ahead: Ahead) {
        self.map.prefetch_stage(key, &self.slab, ahead, true);
    }

    fn lookup(&mut self, access: &Access) -> bool {
        match self.map.get(access.key, &self.slab) {
            Some(index) => {
                self.slab.move_to_front(&mut self.queue, index);
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
        while self.used + charge > self.capacity.limit() {
            let Some(index) = self.slab.pop_front(&mut self.queue) else {
                break;
            };
            let victim = *self.slab.get(index);
            self.map.remove(victim.key, &self.slab);
            self.slab.remove(index);
            self.used -= victim.charge;
            victims.push(victim.key);
        }
        let index = self.slab.insert(Entry {
            key: access.key,
            charge,
        });
        self.slab.push_front(&mut self.queue, index);
        self.map.insert(access.key, index, &self.slab);
        self.used += charge;
        true
    }

    fn remove(&mut self, key: u64) -> bool {
        let Some(index) = self.map.remove(key, &self.slab) else {
            return false;
        };
        self.slab.unlink(&mut self.queue, index);
        self.used -= self.slab.remove(index).charge;
        true
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

    /// Naive MRU: a vector ordered least recently used first.
    struct NaiveMru {
        capacity: Capacity,
        items: Vec<(u64, u64)>,
    }

    impl Reference for NaiveMru {
        fn access(&mut self, access: &Access) -> (bool, Vec<u64>) {
            if let Some(at) = self.items.iter().position(|&(k, _)| k == access.key) {
                let item = self.items.remove(at);
                self.items.push(item);
                return (true, vec![]);
            }
            let charge = self.capacity.charge(access.size);
            let mut victims = vec![];
            if charge <= self.capacity.limit() {
                while self.items.iter().map(|i| i.1).sum::<u64>() + charge > self.capacity.limit() {
                    victims.push(self.items.pop().expect("over the limit, so not empty").0);
                }
                self.items.push((access.key, charge));
            }
            (false, victims)
        }
    }

    #[test]
    fn evicts_most_recently_used() {
        let mut mru = Mru::new(Capacity::Objects(3), &MruConfig::default()).unwrap();
        let mut victims = vec![];
        for access in testing::keys(&[1, 2, 3, 1, 4, 5]) {
            mru.access(&access, &mut victims);
        }
        assert_eq!(
            victims,
            [1, 4],
            "1 was touched last before 4's miss, then 4"
        );
        assert!(mru.contains(2) && mru.contains(3) && mru.contains(5));
    }

    #[test]
    fn a_scan_larger_than_the_cache_keeps_its_start() {
        let mut mru = Mru::new(Capacity::Objects(3), &MruConfig::default()).unwrap();
        let mut victims = vec![];
        let keys: Vec<u64> = (0..2).flat_map(|_| 1..=5).collect();
        let hits = testing::keys(&keys)
            .iter()
            .filter(|a| mru.access(a, &mut victims))
            .count();
        assert_eq!(
            hits, 3,
            "1, 2 and 5 survive the first pass and hit in the second"
        );
    }

    #[test]
    fn byte_capacity_evicts_until_the_new_unit_fits() {
        let mut mru = Mru::new(Capacity::Bytes(10), &MruConfig::default()).unwrap();
        let mut victims = vec![];
        for access in testing::accesses(&[(1, 4), (2, 4), (3, 2), (4, 5), (5, 11)]) {
            mru.access(&access, &mut victims);
        }
        assert_eq!(
            victims,
            [3, 2],
            "5 bytes need 3 and 2 out; 11 bytes never fit"
        );
        assert_eq!((mru.used(), mru.len()), (9, 2));
    }

    proptest! {
        #[test]
        fn matches_naive_model(trace in testing::trace_strategy(40, 400, 5), cap in 1u64..20, bytes: bool) {
            let capacity = if bytes { Capacity::Bytes(cap) } else { Capacity::Objects(cap) };
            let mut mru = Mru::new(capacity, &MruConfig::default()).unwrap();
            let mut naive = NaiveMru { capacity, items: vec![] };
            testing::assert_matches_reference(&mut mru, &mut naive, &trace);
            testing::replay_checked(&mut Mru::new(capacity, &MruConfig::default()).unwrap(), &trace);
        }
    }
}
