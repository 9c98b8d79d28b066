//! SIEVE: a FIFO queue with a visited bit and a hand that does not move
//! survivors.
//!
//! Origin: Y. Zhang, J. Yang, Y. Yue, Y. Vigfusson, K. V. Rashmi, "SIEVE is
//! Simpler than LRU: an Efficient Turn-Key Eviction Algorithm for Web Caches",
//! NSDI 2024.
//!
//! Maps to libCacheSim's `Sieve` (`cache/eviction/Sieve.c`), which has no
//! parameters:
//! - a new unit enters at the head, unvisited; a hit sets the visited bit;
//! - the hand starts at the tail (oldest) and moves towards the head; a
//!   visited unit has its bit cleared and stays where it is; the first
//!   unvisited unit is evicted, and the hand rests on its newer neighbour;
//! - when the hand falls off the head it restarts from the tail;
//! - removing the unit under the hand moves the hand to its newer neighbour.
//!
//! In object-count mode this reproduces libCacheSim's miss ratios exactly.

use serde::{Deserialize, Serialize};

use crate::index::{KeyIndex, Keyed};
use crate::list::{Index, List, NIL, Slab};
use crate::{Access, Ahead, Capacity, ConfigError, Policy};

/// SIEVE has no knobs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SieveConfig {}

#[derive(Clone, Copy, Debug)]
struct Entry {
    key: u64,
    /// A size in bytes or 1: at most `u32::MAX` (sizes are `u32`). 16-byte
    /// entries keep a 76 K-unit cache's nodes at 1.8 MiB.
    charge: u32,
    visited: bool,
}

impl Keyed for Entry {
    fn key(&self) -> u64 {
        self.key
    }
}

/// SIEVE replacement.
#[derive(Debug)]
pub struct Sieve {
    capacity: Capacity,
    used: u64,
    map: KeyIndex,
    slab: Slab<Entry>,
    /// Front = newest, back = oldest.
    queue: List,
    /// Where the next eviction starts looking; [`NIL`] = at the back.
    hand: Index,
}

impl Sieve {
    /// An empty SIEVE cache.
    pub fn new(capacity: Capacity, _config: &SieveConfig) -> Result<Self, ConfigError> {
        Ok(Self {
            capacity,
            used: 0,
            map: KeyIndex::default(),
            slab: Slab::new(),
            queue: List::new(),
            hand: NIL,
        })
    }

    /// The hand's start when it is parked at "no node": the oldest unit.
    fn hand_or_back(&self) -> Option<Index> {
        if self.hand == NIL {
            self.queue.back()
        } else {
            Some(self.hand)
        }
    }

    fn evict_one(&mut self) -> Option<Entry> {
        let mut index = self.hand_or_back()?;
        loop {
            let entry = self.slab.get_mut(index);
            if !entry.visited {
                break;
            }
            entry.visited = false;
            index = match self.slab.prev(index) {
                Some(newer) => newer,
                None => self.queue.back()?,
            };
        }
        self.hand = self.slab.prev(index).unwrap_or(NIL);
        self.slab.unlink(&mut self.queue, index);
        let victim = *self.slab.get(index);
        self.map.remove(victim.key, &self.slab);
        self.slab.remove(index);
        self.used -= u64::from(victim.charge);
        // Warm where the hand goes next: its node's successor and its slots.
        if let Some(hand) = self.hand_or_back() {
            self.map.prefetch_slots(self.slab.get(hand).key);
            if let Some(prev) = self.slab.prev(hand) {
                self.slab.prefetch(prev);
            }
        }
        Some(victim)
    }
}

impl Policy for Sieve {
    fn name(&self) -> &'static str {
        "sieve"
    }

    fn prefetch(&self, key: u64, ahead: Ahead) {
        self.map.prefetch_stage(key, &self.slab, ahead, false);
    }

    fn lookup(&mut self, access: &Access) -> bool {
        match self.map.get(access.key, &self.slab) {
            Some(index) => {
                self.slab.get_mut(index).visited = true;
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
            let Some(victim) = self.evict_one() else {
                break;
            };
            victims.push(victim.key);
        }
        let index = self.slab.insert(Entry {
            key: access.key,
            charge: charge as u32, // ≤ u32::MAX: a size or 1
            visited: false,
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
        if self.hand == index {
            self.hand = self.slab.prev(index).unwrap_or(NIL);
        }
        self.slab.unlink(&mut self.queue, index);
        self.used -= u64::from(self.slab.remove(index).charge);
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

    /// Naive SIEVE: a vector ordered oldest first and the hand as a position
    /// (`None` = start from the oldest).
    struct NaiveSieve {
        capacity: Capacity,
        /// (key, charge, visited), oldest first.
        items: Vec<(u64, u64, bool)>,
        hand: Option<usize>,
    }

    impl Reference for NaiveSieve {
        fn access(&mut self, access: &Access) -> (bool, Vec<u64>) {
            if let Some(item) = self.items.iter_mut().find(|i| i.0 == access.key) {
                item.2 = true;
                return (true, vec![]);
            }
            let charge = self.capacity.charge(access.size);
            let mut victims = vec![];
            if charge > self.capacity.limit() {
                return (false, victims);
            }
            while self.items.iter().map(|i| i.1).sum::<u64>() + charge > self.capacity.limit() {
                let mut at = self.hand.unwrap_or(0);
                while self.items[at].2 {
                    self.items[at].2 = false;
                    at = (at + 1) % self.items.len();
                }
                victims.push(self.items.remove(at).0);
                // The newer neighbour now sits at `at`, if there is one.
                self.hand = (at < self.items.len()).then_some(at);
            }
            self.items.push((access.key, charge, false));
            (false, victims)
        }
    }

    #[test]
    fn survivors_stay_in_place() {
        let mut sieve = Sieve::new(Capacity::Objects(3), &SieveConfig::default()).unwrap();
        let mut victims = vec![];
        for access in testing::keys(&[1, 2, 3, 1, 4, 2, 5]) {
            sieve.access(&access, &mut victims);
        }
        // 4: the hand clears 1 (which stays the oldest) and evicts 2, resting
        // on 3. 2 misses: 3 is unvisited and goes; the hand rests on 4, which
        // goes for 5, while 1 survives although it is the oldest.
        assert_eq!(victims, [2, 3, 4]);
        assert!(sieve.contains(1) && sieve.contains(2) && sieve.contains(5));
    }

    proptest! {
        #[test]
        fn matches_naive_model(trace in testing::trace_strategy(40, 400, 5), cap in 1u64..20, bytes: bool) {
            let capacity = if bytes { Capacity::Bytes(cap) } else { Capacity::Objects(cap) };
            let mut sieve = Sieve::new(capacity, &SieveConfig::default()).unwrap();
            let mut naive = NaiveSieve { capacity, items: vec![], hand: None };
            testing::assert_matches_reference(&mut sieve, &mut naive, &trace);
            testing::replay_checked(&mut Sieve::new(capacity, &SieveConfig::default()).unwrap(), &trace);
        }
    }
}
