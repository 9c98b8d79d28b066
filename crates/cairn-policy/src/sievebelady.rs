//! SIEVE-Belady: SIEVE's hand, with "due back soon" in place of the visited
//! bit, and new units admitted only if due back.
//!
//! libCacheSim's own oracle experiment (`cache/eviction/belady/Sieve_Belady.c`
//! in commit aa0fc40, no paper): SIEVE (Zhang et al., NSDI 2024) told the
//! future (Belady, IBM Systems Journal 5(2), 1966). It reads the trace's
//! next-access times ([`Access::next`]), so it is a simulator bound; without
//! them nothing is ever due back and it admits nothing.
//!
//! - Every request counts, and every miss once the request is done (the
//!   `Horizon` `lru-belady` uses). A unit is *due back* when its next
//!   access is at most `capacity / miss ratio` requests away, the miss ratio
//!   taken before the current miss.
//! - A hit records the unit's next access; nothing moves. (libCacheSim also
//!   sets and decrements a SIEVE counter that nothing reads.)
//! - To make room, the hand (at the tail when parked) walks towards the head
//!   past units due back and evicts the first that is not; past the head it
//!   starts again at the tail. It rests on the victim's newer neighbour.
//! - When every resident is due back, libCacheSim evicts the unit under the
//!   hand, or, with the hand parked, dereferences a null pointer (`cachesim`
//!   crashes in byte mode on the sample trace). We evict the unit under the
//!   hand, the tail when it is parked.
//! - After the evictions the new unit is inserted at the head only if it is
//!   due back itself; otherwise the miss is not admitted (its evictions stay
//!   done). The first miss is never admitted: no miss before it, an infinite
//!   horizon that C's conversion makes `i64::MIN`.
//!
//! No knobs.

use serde::{Deserialize, Serialize};

use crate::index::{KeyIndex, Keyed};
use crate::list::{Index, List, NIL, Slab};
use crate::lrubelady::Horizon;
use crate::{Access, Ahead, Capacity, ConfigError, Policy};

/// SIEVE-Belady has no knobs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SieveBeladyConfig {}

#[derive(Clone, Copy, Debug)]
struct Entry {
    key: u64,
    charge: u64,
    /// Logical time of the unit's next access, as of its last access.
    next: u64,
}

impl Keyed for Entry {
    fn key(&self) -> u64 {
        self.key
    }
}

/// SIEVE whose hand passes over units due back soon.
#[derive(Debug)]
pub struct SieveBelady {
    capacity: Capacity,
    used: u64,
    map: KeyIndex,
    slab: Slab<Entry>,
    /// Front = newest, back = oldest.
    queue: List,
    /// Where the next eviction starts looking; [`NIL`] = at the back.
    hand: Index,
    horizon: Horizon,
}

impl SieveBelady {
    /// An empty SIEVE-Belady cache.
    pub fn new(capacity: Capacity, _config: &SieveBeladyConfig) -> Result<Self, ConfigError> {
        Ok(Self {
            capacity,
            used: 0,
            map: KeyIndex::default(),
            slab: Slab::new(),
            queue: List::new(),
            hand: NIL,
            horizon: Horizon::default(),
        })
    }

    /// The first unit not due back from `from` towards the head, stopping
    /// before `end` ([`NIL`]: past the head).
    fn first_not_due(&self, from: Index, end: Index, now: u64, threshold: i64) -> Option<Index> {
        let mut at = from;
        while at != end {
            if !Horizon::due(self.slab.get(at).next, now, threshold) {
                return Some(at);
            }
            at = self.slab.prev(at).unwrap_or(NIL);
        }
        None
    }

    /// Evicts one unit (the cache is not empty).
    fn evict_one(&mut self, now: u64, threshold: i64) -> Entry {
        let back = self.queue.back().expect("evict from a non-empty cache");
        let start = if self.hand == NIL { back } else { self.hand };
        // libCacheSim's second walk starts again at the tail and goes to the
        // head; from `start` on it would find what the first walk did not.
        let victim = self
            .first_not_due(start, NIL, now, threshold)
            .or_else(|| (start != back).then(|| self.first_not_due(back, start, now, threshold))?)
            .unwrap_or(start);
        self.hand = self.slab.prev(victim).unwrap_or(NIL);
        self.slab.unlink(&mut self.queue, victim);
        let entry = *self.slab.get(victim);
        self.map.remove(entry.key, &self.slab);
        self.slab.remove(victim);
        self.used -= entry.charge;
        entry
    }
}

impl Policy for SieveBelady {
    fn name(&self) -> &'static str {
        "sieve-belady"
    }

    fn prefetch(&self, key: u64, ahead: Ahead) {
        self.map.prefetch_stage(key, &self.slab, ahead, false);
    }

    fn lookup(&mut self, access: &Access) -> bool {
        let found = self.map.get(access.key, &self.slab);
        self.horizon.count(found.is_some());
        let Some(index) = found else {
            return false;
        };
        self.slab.get_mut(index).next = access.next;
        true
    }

    fn admit(&mut self, access: &Access, victims: &mut Vec<u64>) -> bool {
        let charge = self.capacity.charge(access.size);
        if charge > self.capacity.limit() {
            return false;
        }
        let threshold = self.horizon.threshold(self.capacity.limit());
        while self.used + charge > self.capacity.limit() && !self.queue.is_empty() {
            victims.push(self.evict_one(access.time, threshold).key);
        }
        if !Horizon::due(access.next, access.time, threshold) {
            return false;
        }
        let index = self.slab.insert(Entry {
            key: access.key,
            charge,
            next: access.next,
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
    use crate::NEVER;
    use crate::testing::{self, Reference};
    use proptest::prelude::*;

    /// Naive SIEVE-Belady: `(key, charge, next)` oldest first, the hand as a
    /// position (`None` = the oldest), and libCacheSim's two walks written
    /// out.
    struct NaiveSieveBelady {
        capacity: Capacity,
        items: Vec<(u64, u64, u64)>,
        hand: Option<usize>,
        requests: u64,
        misses: u64,
    }

    impl Reference for NaiveSieveBelady {
        fn access(&mut self, access: &Access) -> (bool, Vec<u64>) {
            self.requests += 1;
            if let Some(item) = self.items.iter_mut().find(|i| i.0 == access.key) {
                item.2 = access.next;
                return (true, vec![]);
            }
            let limit = self.capacity.limit();
            let charge = self.capacity.charge(access.size);
            let mut victims = vec![];
            if charge <= limit {
                let threshold = if self.misses == 0 {
                    i64::MIN
                } else {
                    (limit as f64 / (self.misses as f64 / self.requests as f64)) as i64
                };
                let due =
                    |next: u64| next != NEVER && next as i64 - access.time as i64 <= threshold;
                while self.items.iter().map(|i| i.1).sum::<u64>() + charge > limit {
                    let start = self.hand.unwrap_or(0);
                    let victim = (start..self.items.len())
                        .find(|&at| !due(self.items[at].2))
                        .or_else(|| (0..self.items.len()).find(|&at| !due(self.items[at].2)))
                        .unwrap_or(start);
                    victims.push(self.items.remove(victim).0);
                    self.hand = (victim < self.items.len()).then_some(victim);
                }
                if due(access.next) {
                    self.items.push((access.key, charge, access.next));
                }
            }
            self.misses += 1;
            (false, victims)
        }
    }

    fn sieve_belady(capacity: Capacity) -> SieveBelady {
        SieveBelady::new(capacity, &SieveBeladyConfig::default()).unwrap()
    }

    #[test]
    fn only_units_due_back_are_admitted_and_the_first_never() {
        // Keys 1, 2, 1, 3, 9, 3 at times 0 to 5, capacity 5. 1 (back at 2)
        // misses first: no miss before it, nothing is due; refused. 2 never
        // comes back: refused. 1 again (never again): refused. 3 at time 3
        // comes back at 5, within 5 / (3/4): admitted, and hit at 5.
        let mut cache = sieve_belady(Capacity::Objects(5));
        let mut victims = vec![];
        let hits: Vec<bool> = testing::keys(&[1, 2, 1, 3, 9, 3])
            .iter()
            .map(|a| cache.access(a, &mut victims))
            .collect();
        assert_eq!(hits, [false, false, false, false, false, true]);
        assert!(victims.is_empty() && cache.len() == 1 && cache.contains(3));
    }

    #[test]
    fn when_every_resident_is_due_with_the_hand_parked_the_tail_goes() {
        // Capacity 2; keys 0, 1, 2, 9, 1, 2 at times 0 to 5. 0 is refused
        // (the first miss). 1 (back at 4) and 2 (back at 5) are admitted.
        // When 9 misses at time 3 the horizon is 2 / (3/4) = 2 requests and
        // both are due: libCacheSim, its hand parked, would dereference a
        // null pointer; the tail, 1, goes. 9 and 1 (never again) are refused.
        let mut cache = sieve_belady(Capacity::Objects(2));
        let mut victims = vec![];
        let hits: Vec<bool> = testing::keys(&[0, 1, 2, 9, 1, 2])
            .iter()
            .map(|a| cache.access(a, &mut victims))
            .collect();
        assert_eq!(hits, [false, false, false, false, false, true]);
        assert_eq!(victims, [1]);
    }

    #[test]
    fn the_hand_walks_past_due_units_and_when_all_are_due_its_unit_goes() {
        // Capacity 3; keys 0, 0, 1, 1, 2, 3, 4, 0, 2, 3 at times 0 to 9.
        // Resident after time 4: 0 (back at 7), 1 (never again), 2 (back at
        // 8), oldest first. 3 misses at time 5 (horizon 3 / (4/6) = 4): the
        // hand passes 0, due, and evicts 1; it rests on 2, and 3 (back at 9)
        // is admitted. 4 misses at time 6 (horizon 3 / (5/7) = 4): from the
        // hand 2 and 3 are due, from the tail 0 too; the unit under the hand,
        // 2, goes, not the tail 0, which hits at 7.
        let mut cache = sieve_belady(Capacity::Objects(3));
        let mut victims = vec![];
        let hits: Vec<bool> = testing::keys(&[0, 0, 1, 1, 2, 3, 4, 0, 2, 3])
            .iter()
            .map(|a| cache.access(a, &mut victims))
            .collect();
        let expected = [
            false, false, false, true, false, false, false, true, false, true,
        ];
        assert_eq!(hits, expected);
        assert_eq!(victims, [1, 2]);
        assert_eq!(cache.name(), "sieve-belady");
    }

    proptest! {
        #[test]
        fn matches_naive_model(trace in testing::trace_strategy(40, 400, 5), cap in 1u64..20, bytes: bool) {
            let capacity = if bytes { Capacity::Bytes(cap) } else { Capacity::Objects(cap) };
            let mut naive = NaiveSieveBelady { capacity, items: vec![], hand: None, requests: 0, misses: 0 };
            testing::assert_matches_reference(&mut sieve_belady(capacity), &mut naive, &trace);
            testing::replay_checked(&mut sieve_belady(capacity), &trace);
        }
    }
}
