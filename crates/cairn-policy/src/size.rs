//! SIZE: evict the largest unit.
//!
//! Source: S. Williams, M. Abrams, C. R. Standridge, G. Abdulla, E. A. Fox,
//! "Removal policies in network caches for World-Wide Web documents",
//! SIGCOMM 1996 (the SIZE policy). Maps to libCacheSim's `Size`
//! (`cache/eviction/Size.c`), which has no parameters.
//!
//! Residents sit in a max-heap keyed by size. A miss evicts the top until
//! the new unit fits, then inserts it; a hit sets the unit's key in the
//! heap to the size the access carries (as libCacheSim does; the charge
//! counted against the capacity stays the one admitted).
//!
//! Ties decide almost everything here (in object mode every size is 1), so
//! the heap is libCacheSim's own ([`PQueue`], a replica of `pqueue.c`):
//! among equal sizes nothing moves, and a pop puts the last entry on top.
//! In object mode that means every eviction after the first takes the unit
//! inserted most recently. The same miss counts as libCacheSim 0.3.5 and
//! aa0fc40 on `cloudPhysicsIO`, both modes
//! (`crates/cairn-sim/tests/libcachesim_agreement.rs`).

use serde::{Deserialize, Serialize};

use crate::libcachesim::{PQueue, PqHandle};
use crate::{Access, Capacity, ConfigError, KeyMap, Policy};

/// SIZE has no knobs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SizeConfig {}

#[derive(Clone, Copy, Debug)]
struct Entry {
    key: u64,
    charge: u64,
}

/// SIZE replacement.
#[derive(Debug)]
pub struct Size {
    capacity: Capacity,
    used: u64,
    map: KeyMap<PqHandle>,
    /// Priority: the size of the unit's last access, in the capacity's unit.
    heap: PQueue<u64, Entry>,
}

impl Size {
    /// An empty SIZE cache.
    pub fn new(capacity: Capacity, _config: &SizeConfig) -> Result<Self, ConfigError> {
        Ok(Self {
            capacity,
            used: 0,
            map: KeyMap::default(),
            heap: PQueue::new(),
        })
    }
}

impl Policy for Size {
    fn name(&self) -> &'static str {
        "size"
    }

    fn lookup(&mut self, access: &Access) -> bool {
        let Some(&handle) = self.map.get(&access.key) else {
            return false;
        };
        self.heap
            .set_priority(handle, self.capacity.charge(access.size));
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
        while self.used + charge > self.capacity.limit() {
            let (_, victim) = self.heap.pop().expect("used > 0 means residents");
            self.map.remove(&victim.key);
            self.used -= victim.charge;
            victims.push(victim.key);
        }
        let handle = self.heap.push(
            charge,
            Entry {
                key: access.key,
                charge,
            },
        );
        self.map.insert(access.key, handle);
        self.used += charge;
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

    /// Naive SIZE with `pqueue.c`'s tie order spelt out: a plain vector as
    /// the 1-based heap array, each step written from the C source.
    struct NaiveSize {
        capacity: Capacity,
        /// `heap[0]` unused; `(key, charge, priority)`.
        heap: Vec<(u64, u64, u64)>,
    }

    impl NaiveSize {
        fn up(&mut self, mut i: usize) {
            while i > 1 && self.heap[i / 2].2 < self.heap[i].2 {
                self.heap.swap(i, i / 2);
                i /= 2;
            }
        }

        fn down(&mut self, mut i: usize) {
            loop {
                let (l, r) = (2 * i, 2 * i + 1);
                if l >= self.heap.len() {
                    return;
                }
                let c = if r < self.heap.len() && self.heap[l].2 < self.heap[r].2 {
                    r
                } else {
                    l
                };
                if self.heap[i].2 >= self.heap[c].2 {
                    return;
                }
                self.heap.swap(i, c);
                i = c;
            }
        }
    }

    impl Reference for NaiveSize {
        fn access(&mut self, access: &Access) -> (bool, Vec<u64>) {
            let charge = self.capacity.charge(access.size);
            if let Some(i) = self.heap.iter().skip(1).position(|e| e.0 == access.key) {
                let i = i + 1;
                let old = self.heap[i].2;
                self.heap[i].2 = charge;
                if old < charge {
                    self.up(i);
                } else {
                    self.down(i);
                }
                return (true, vec![]);
            }
            let mut victims = vec![];
            if charge > self.capacity.limit() {
                return (false, victims);
            }
            while self.heap.iter().skip(1).map(|e| e.1).sum::<u64>() + charge
                > self.capacity.limit()
            {
                let last = self.heap.pop().unwrap();
                let top = if self.heap.len() > 1 {
                    std::mem::replace(&mut self.heap[1], last)
                } else {
                    last
                };
                self.down(1);
                victims.push(top.0);
            }
            self.heap.push((access.key, charge, charge));
            let at = self.heap.len() - 1;
            self.up(at);
            (false, victims)
        }
    }

    fn size(capacity: Capacity) -> Size {
        Size::new(capacity, &SizeConfig::default()).unwrap()
    }

    #[test]
    fn evicts_the_largest_unit() {
        let mut cache = size(Capacity::Bytes(10));
        let mut victims = vec![];
        for access in testing::accesses(&[(1, 2), (2, 5), (3, 3), (4, 4)]) {
            cache.access(&access, &mut victims);
        }
        assert_eq!(victims, [2], "5 bytes is the largest");
        cache.access(&testing::accesses(&[(5, 6)])[0], &mut victims);
        assert_eq!(victims, [2, 4, 3], "4 then 3 bytes leave for 6");
        assert!(cache.contains(1) && cache.contains(5));
    }

    #[test]
    fn among_equals_each_eviction_takes_the_newest_after_the_first() {
        // pqueue.c: the first pop takes the first inserted and moves the
        // last inserted to the top; each later pop takes the previous
        // newcomer, which the one before put on top.
        let mut cache = size(Capacity::Objects(3));
        let mut victims = vec![];
        for access in testing::keys(&[1, 2, 3, 4, 5, 6, 1]) {
            cache.access(&access, &mut victims);
        }
        assert_eq!(victims, [1, 3, 4, 5]);
        assert!(cache.contains(2) && cache.contains(6) && cache.contains(1));
    }

    #[test]
    fn a_unit_larger_than_the_cache_is_refused_and_remove_frees_its_charge() {
        let mut cache = size(Capacity::Bytes(4));
        let mut victims = vec![];
        let trace = testing::accesses(&[(1, 3), (2, 5)]);
        assert!(cache.admit(&trace[0], &mut victims));
        assert!(!cache.admit(&trace[1], &mut victims));
        assert!(cache.remove(1) && !cache.remove(1));
        assert_eq!((cache.used(), cache.len()), (0, 0));
    }

    proptest! {
        #[test]
        fn matches_naive_model(trace in testing::trace_strategy(40, 400, 5), cap in 1u64..20, bytes: bool) {
            let capacity = if bytes { Capacity::Bytes(cap) } else { Capacity::Objects(cap) };
            let mut naive = NaiveSize { capacity, heap: vec![(0, 0, 0)] };
            testing::assert_matches_reference(&mut size(capacity), &mut naive, &trace);
            testing::replay_checked(&mut size(capacity), &trace);
        }
    }
}
