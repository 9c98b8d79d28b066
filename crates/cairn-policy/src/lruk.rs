//! LRU-K: evict the unit whose K-th most recent access is the oldest.
//!
//! Source: Elizabeth J. O'Neil, Patrick E. O'Neil, Gerhard Weikum, "The
//! LRU-K page replacement algorithm for database disk buffering", ACM
//! SIGMOD 1993. A unit's backward K-distance is how long ago its K-th most
//! recent access was; LRU-K evicts the largest. Units seen fewer than K
//! times have an infinite distance and go first. K = 1 is LRU.
//!
//! Maps to libCacheSim's `LRU_K` (`cache/eviction/cpp/LRU_K.cpp`, in the
//! `libcachesim` 0.3.5 release as `LRUK`; the file is empty at commit
//! `aa0fc40`), and follows it exactly:
//! - a resident unit remembers the times of its last K accesses (time =
//!   the number of lookups so far, libCacheSim's `n_req`);
//! - units with fewer than K accesses wait in a FIFO queue in order of
//!   entry (a hit that leaves them below K does not move them); eviction
//!   takes that queue's oldest while it is not empty;
//! - at its K-th access a unit leaves the queue for a priority queue keyed
//!   by its K-th most recent access time, and each later hit re-keys it;
//!   when the FIFO queue is empty, the lowest key is evicted;
//! - history dies with the unit: no retained information about evicted
//!   units and no correlated-reference period, the two refinements of the
//!   paper that libCacheSim leaves out.
//!
//! Knob: `k` (default 2, libCacheSim's default), 1 to 64. In object mode a
//! unit's charge is 1, in byte mode its size.
//!
//! Checked on `cloudPhysicsIO` by `crates/cairn-sim/tests/libcachesim_agreement.rs`:
//! the same miss counts as libCacheSim 0.3.5 at 1, 5, 10 and 20 % of the
//! distinct objects and of the bytes.
//!
//! The queue is a [`List`] in the entry [`Slab`], the priority queue an
//! [`IndexedHeap`], and the access times one flat vector of K slots per slab
//! node used as rings: nothing allocates per access once they have grown to
//! the cache's size.

use serde::{Deserialize, Serialize};

use crate::heap::{Handle, IndexedHeap};
use crate::list::{Index, List, Slab};
use crate::{Access, Capacity, ConfigError, KeyMap, Policy};

/// The largest `k` accepted: each resident unit keeps `k` times.
const MAX_K: u32 = 64;

/// LRU-K parameters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LruKConfig {
    /// How many recent accesses each unit remembers; the unit's rank is the
    /// oldest of them. 1 to 64; default 2 (LRU-2, libCacheSim's default).
    pub k: u32,
}

impl Default for LruKConfig {
    fn default() -> Self {
        Self { k: 2 }
    }
}

/// "In the FIFO queue, not in the heap".
const IN_QUEUE: Handle = Handle::MAX;

#[derive(Clone, Copy, Debug)]
struct Entry {
    key: u64,
    charge: u64,
    /// Accesses remembered, at most K.
    seen: u32,
    /// Where in the unit's ring the next access time goes.
    next: u32,
    /// Its heap handle once it has K accesses, else [`IN_QUEUE`].
    handle: Handle,
}

/// LRU-K replacement, as libCacheSim's `LRU_K`.
#[derive(Debug)]
pub struct LruK {
    capacity: Capacity,
    k: u32,
    used: u64,
    /// Lookups so far: the time of the current access.
    clock: u64,
    map: KeyMap<Index>,
    entries: Slab<Entry>,
    /// Units with fewer than K accesses, front = newest.
    queue: List,
    /// Units with K accesses by their K-th most recent access time.
    heap: IndexedHeap<u64, Index>,
    /// K access times per slab node, a ring each.
    times: Vec<u64>,
}

impl LruK {
    /// An empty LRU-K cache.
    pub fn new(capacity: Capacity, config: &LruKConfig) -> Result<Self, ConfigError> {
        if !(1..=MAX_K).contains(&config.k) {
            return Err(ConfigError::OutOfRange {
                policy: "lruk",
                parameter: "k",
                value: config.k.to_string(),
                expected: "1 to 64",
            });
        }
        Ok(Self {
            capacity,
            k: config.k,
            used: 0,
            clock: 0,
            map: KeyMap::default(),
            entries: Slab::new(),
            queue: List::new(),
            heap: IndexedHeap::new(),
            times: Vec::new(),
        })
    }

    /// Records an access at the current time to entry `index`, and files it
    /// in the heap once it has K accesses (re-keying it if already there).
    fn record(&mut self, index: Index) {
        let k = self.k as usize;
        let ring = index as usize * k;
        let entry = *self.entries.get(index);
        self.times[ring + entry.next as usize] = self.clock;
        let next = (entry.next + 1) % self.k;
        let seen = (entry.seen + 1).min(self.k);
        let entry = self.entries.get_mut(index);
        entry.next = next;
        entry.seen = seen;
        if seen < self.k {
            return;
        }
        // Full ring: the oldest time is where the next one will go.
        let kth = self.times[ring + next as usize];
        if entry.handle == IN_QUEUE {
            self.entries.unlink(&mut self.queue, index);
            let handle = self.heap.push(kth, index);
            self.entries.get_mut(index).handle = handle;
        } else {
            self.heap.set_priority(entry.handle, kth);
        }
    }

    /// Unlinks entry `index` from the queue or the heap and frees it.
    fn drop_entry(&mut self, index: Index) -> Entry {
        let entry = *self.entries.get(index);
        if entry.handle == IN_QUEUE {
            self.entries.unlink(&mut self.queue, index);
        } else {
            self.heap.remove(entry.handle);
        }
        self.entries.remove(index);
        self.map.remove(&entry.key);
        self.used -= entry.charge;
        entry
    }

    fn evict_one(&mut self) -> Option<Entry> {
        let index = match self.queue.back() {
            Some(index) => index,
            None => self.heap.peek()?.2,
        };
        Some(self.drop_entry(index))
    }
}

impl Policy for LruK {
    fn name(&self) -> &'static str {
        "lruk"
    }

    fn lookup(&mut self, access: &Access) -> bool {
        self.clock += 1;
        let Some(&index) = self.map.get(&access.key) else {
            return false;
        };
        self.record(index);
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
            let Some(victim) = self.evict_one() else {
                break;
            };
            victims.push(victim.key);
        }
        let index = self.entries.insert(Entry {
            key: access.key,
            charge,
            seen: 0,
            next: 0,
            handle: IN_QUEUE,
        });
        let end = (index as usize + 1) * self.k as usize;
        if self.times.len() < end {
            self.times.resize(end, 0);
        }
        self.entries.push_front(&mut self.queue, index);
        self.record(index);
        self.map.insert(access.key, index);
        self.used += charge;
        true
    }

    fn remove(&mut self, key: u64) -> bool {
        match self.map.get(&key) {
            Some(&index) => {
                self.drop_entry(index);
                true
            }
            None => false,
        }
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

    /// Naive LRU-K: each unit's full access-time list; evict the first
    /// entered of those with fewer than K accesses, else the oldest K-th most
    /// recent access.
    struct NaiveLruK {
        capacity: Capacity,
        k: usize,
        clock: u64,
        /// (key, charge, entry time, access times)
        items: Vec<(u64, u64, u64, Vec<u64>)>,
    }

    impl Reference for NaiveLruK {
        fn access(&mut self, access: &Access) -> (bool, Vec<u64>) {
            self.clock += 1;
            if let Some(item) = self.items.iter_mut().find(|i| i.0 == access.key) {
                item.3.push(self.clock);
                return (true, vec![]);
            }
            let charge = self.capacity.charge(access.size);
            let mut victims = vec![];
            if charge > self.capacity.limit() {
                return (false, victims);
            }
            let k = self.k;
            while self.items.iter().map(|i| i.1).sum::<u64>() + charge > self.capacity.limit() {
                let rank = |i: &(u64, u64, u64, Vec<u64>)| {
                    if i.3.len() < k {
                        (0, i.2)
                    } else {
                        (1, i.3[i.3.len() - k])
                    }
                };
                let at = (0..self.items.len())
                    .min_by_key(|&at| rank(&self.items[at]))
                    .unwrap();
                victims.push(self.items.remove(at).0);
            }
            self.items
                .push((access.key, charge, self.clock, vec![self.clock]));
            (false, victims)
        }
    }

    fn lru_k(capacity: Capacity, k: u32) -> LruK {
        LruK::new(capacity, &LruKConfig { k }).unwrap()
    }

    #[test]
    fn units_seen_once_go_first_in_entry_order() {
        let mut cache = lru_k(Capacity::Objects(3), 2);
        let mut victims = vec![];
        // 1 reaches K = 2 accesses and leaves the queue; 2 and 3 are seen once.
        for access in testing::keys(&[1, 2, 1, 3, 4, 5]) {
            cache.access(&access, &mut victims);
        }
        // 4 evicts 2 (seen once, first in); 5 evicts 3 (seen once), not 1.
        assert_eq!(victims, [2, 3]);
        assert!(cache.contains(1));
    }

    #[test]
    fn the_oldest_second_to_last_access_goes() {
        let mut cache = lru_k(Capacity::Objects(2), 2);
        let mut victims = vec![];
        for access in testing::keys(&[1, 2, 1, 2, 2, 1, 3]) {
            cache.access(&access, &mut victims);
        }
        // Times 1@1,3,6; 2@2,4,5. Last access: 1@6 is newer, so LRU evicts 2;
        // K-th most recent: 1 → 3, 2 → 4: LRU-2 evicts 1.
        assert_eq!(victims, [1]);
    }

    #[test]
    fn k_one_is_lru_and_k_is_checked() {
        let trace = testing::keys(&[1, 2, 3, 1, 4, 2, 5, 1, 3]);
        let mut lruk = lru_k(Capacity::Objects(3), 1);
        let mut lru =
            crate::lru::Lru::new(Capacity::Objects(3), &crate::lru::LruConfig {}).unwrap();
        let (mut a, mut b) = (vec![], vec![]);
        for access in &trace {
            assert_eq!(lruk.access(access, &mut a), lru.access(access, &mut b));
        }
        assert_eq!(a, b);
        for k in [0, 65] {
            assert!(LruK::new(Capacity::Objects(3), &LruKConfig { k }).is_err());
        }
    }

    #[test]
    fn remove_from_queue_and_heap() {
        let mut cache = lru_k(Capacity::Bytes(10), 2);
        let mut victims = vec![];
        for access in testing::accesses(&[(1, 4), (1, 4), (2, 4), (3, 2)]) {
            cache.access(&access, &mut victims);
        }
        assert!(cache.remove(1) && cache.remove(2) && !cache.remove(2));
        assert_eq!((cache.len(), cache.used()), (1, 2));
        for access in testing::accesses(&[(4, 8), (5, 2)]) {
            cache.access(&access, &mut victims);
        }
        assert_eq!(victims, [3]);
        testing::check_invariants(&cache);
    }

    proptest! {
        #[test]
        fn matches_naive_model(trace in testing::trace_strategy(40, 400, 5), cap in 1u64..20, bytes: bool, k in 1u32..5) {
            let capacity = if bytes { Capacity::Bytes(cap) } else { Capacity::Objects(cap) };
            let mut naive = NaiveLruK { capacity, k: k as usize, clock: 0, items: vec![] };
            testing::assert_matches_reference(&mut lru_k(capacity, k), &mut naive, &trace);
            testing::replay_checked(&mut lru_k(capacity, k), &trace);
        }
    }
}
