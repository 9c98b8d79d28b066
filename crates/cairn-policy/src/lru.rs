//! LRU: evict the least recently used unit.
//!
//! The baseline of every paper here. Matches libCacheSim's `LRU` (a hit moves
//! the object to the head; a miss inserts at the head after evicting from the
//! tail until the new object fits).

use serde::{Deserialize, Serialize};

use crate::index::{KeyIndex, Keyed};
use crate::list::{List, Slab};
use crate::{Access, Ahead, Capacity, ConfigError, Policy};

/// LRU has no knobs; the struct exists so every policy is configured alike.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LruConfig {}

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

/// Least-recently-used replacement.
#[derive(Debug)]
pub struct Lru {
    name: &'static str,
    /// False turns LRU into FIFO: a hit leaves the unit where it is.
    promote_on_hit: bool,
    capacity: Capacity,
    used: u64,
    map: KeyIndex,
    slab: Slab<Entry>,
    queue: List,
}

impl Lru {
    /// An empty LRU cache.
    pub fn new(capacity: Capacity, _config: &LruConfig) -> Result<Self, ConfigError> {
        Ok(Self::with_promotion("lru", capacity, true))
    }

    /// The shared body of LRU and FIFO, which differ only in what a hit does.
    pub(crate) fn with_promotion(
        name: &'static str,
        capacity: Capacity,
        promote_on_hit: bool,
    ) -> Self {
        Self {
            name,
            promote_on_hit,
            capacity,
            used: 0,
            map: KeyIndex::default(),
            slab: Slab::new(),
            queue: List::new(),
        }
    }
}

impl Policy for Lru {
    fn name(&self) -> &'static str {
        self.name
    }

    fn prefetch(&self, key: u64, ahead: Ahead) {
        self.map
            .prefetch_stage(key, &self.slab, ahead, self.promote_on_hit);
    }

    fn lookup(&mut self, access: &Access) -> bool {
        match self.map.get(access.key, &self.slab) {
            Some(index) => {
                if self.promote_on_hit {
                    self.slab.move_to_front(&mut self.queue, index);
                }
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
            let Some(index) = self.slab.pop_back(&mut self.queue) else {
                break;
            };
            let victim = *self.slab.get(index);
            self.map.remove(victim.key, &self.slab);
            self.slab.remove(index);
            self.used -= victim.charge;
            victims.push(victim.key);
            // Warm the next eviction: the new back's index slots (its node was
            // warmed one eviction ago) and the node after it.
            if let Some(back) = self.queue.back() {
                self.map.prefetch_slots(self.slab.get(back).key);
                if let Some(prev) = self.slab.prev(back) {
                    self.slab.prefetch(prev);
                }
            }
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

    /// Naive LRU: a vector ordered oldest first.
    struct NaiveLru {
        capacity: Capacity,
        items: Vec<(u64, u64)>,
    }

    impl Reference for NaiveLru {
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
                    victims.push(self.items.remove(0).0);
                }
                self.items.push((access.key, charge));
            }
            (false, victims)
        }
    }

    #[test]
    fn evicts_least_recently_used() {
        let mut lru = Lru::new(Capacity::Objects(3), &LruConfig::default()).unwrap();
        let mut victims = vec![];
        for access in testing::keys(&[1, 2, 3, 1, 4]) {
            lru.access(&access, &mut victims);
        }
        assert_eq!(victims, [2], "1 was touched after 2, so 2 is the LRU");
        assert!(lru.contains(1) && lru.contains(3) && lru.contains(4));
    }

    #[test]
    fn byte_capacity_evicts_until_the_new_unit_fits() {
        let mut lru = Lru::new(Capacity::Bytes(10), &LruConfig::default()).unwrap();
        let mut victims = vec![];
        for access in testing::accesses(&[(1, 4), (2, 4), (3, 2), (4, 7), (5, 11)]) {
            lru.access(&access, &mut victims);
        }
        assert_eq!(
            victims,
            [1, 2],
            "7 bytes need 1 and 2 out; 11 bytes never fit"
        );
        assert_eq!((lru.used(), lru.len()), (9, 2));
    }

    proptest! {
        #[test]
        fn matches_naive_model(trace in testing::trace_strategy(40, 400, 5), cap in 1u64..20, bytes: bool) {
            let capacity = if bytes { Capacity::Bytes(cap) } else { Capacity::Objects(cap) };
            let mut lru = Lru::new(capacity, &LruConfig::default()).unwrap();
            let mut naive = NaiveLru { capacity, items: vec![] };
            testing::assert_matches_reference(&mut lru, &mut naive, &trace);
            testing::replay_checked(&mut Lru::new(capacity, &LruConfig::default()).unwrap(), &trace);
        }
    }
}
