//! 2Q: a FIFO for first-time units (A1in), a ghost FIFO of units evicted
//! from it (A1out), and an LRU (Am) for units re-referenced after leaving
//! A1in.
//!
//! Origin: T. Johnson, D. Shasha, "2Q: A Low Overhead High Performance Buffer
//! Management Replacement Algorithm", VLDB 1994 (the "full version", with
//! Kin = 25 % and Kout = 50 % of the cache as the paper recommends).
//!
//! Maps to libCacheSim's `TwoQ` (`cache/eviction/TwoQ.c`), defaults
//! `Ain-size-ratio=0.25,Aout-size-ratio=0.5`:
//! - **sizes**: A1in gets `floor(capacity * 0.25)`, A1out (ghost, in the same
//!   unit as the capacity) `floor(capacity * 0.5)`, Am the rest,
//!   `capacity - A1in`. A1in may run over its size; only the total is hard.
//! - **hit in A1in**: nothing changes (it is a FIFO). **Hit in Am**: move to
//!   its MRU end.
//! - **hit in A1out** (a ghost): the ghost is dropped and the access counts
//!   as a miss; the unit is then admitted into Am.
//! - **admission**: a unit larger than A1in's size is refused (libCacheSim's
//!   `TwoQ_can_insert`, applied to every miss).
//! - **making room** (until the new unit fits in the total): if A1in holds
//!   more than its size, its oldest unit is evicted and remembered at the
//!   head of A1out (whose oldest ghosts are forgotten to make room);
//!   otherwise Am's LRU unit is evicted, with no ghost.
//! - **insertion**: a ghost hit goes to Am's MRU end (first evicting Am's LRU
//!   units while Am alone is over its size), any other miss to A1in's head.
//!
//! In object-count mode this reproduces libCacheSim's miss ratios exactly.
//!
//! [`Policy::remove`] of a key that only has a ghost forgets the ghost and
//! returns `false` (it was not resident); libCacheSim's `TwoQ_remove`
//! returns `true` in that case.

use serde::{Deserialize, Serialize};

use crate::list::{Index, List, Slab};
use crate::{Access, Capacity, ConfigError, KeyMap, Policy};

/// 2Q's configuration.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TwoQConfig {
    /// A1in's share of the capacity, in (0, 1). Default 0.25 (the paper's
    /// Kin; libCacheSim's `Ain-size-ratio`).
    pub in_fraction: f64,
    /// A1out's (ghost) size as a share of the capacity, in [0, 10]. Default
    /// 0.5 (the paper's Kout; libCacheSim's `Aout-size-ratio`).
    pub out_fraction: f64,
}

impl Default for TwoQConfig {
    fn default() -> Self {
        Self {
            in_fraction: 0.25,
            out_fraction: 0.5,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Queue {
    In,
    Main,
    /// A ghost: key and size only.
    Out,
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    key: u64,
    charge: u64,
    queue: Queue,
}

/// One of 2Q's three queues: front = newest / most recently used.
#[derive(Clone, Copy, Debug, Default)]
struct Queued {
    list: List,
    used: u64,
    limit: u64,
}

/// The 2Q policy.
#[derive(Debug)]
pub struct TwoQ {
    capacity: Capacity,
    /// Every key in any of the three queues.
    map: KeyMap<Index>,
    slab: Slab<Entry>,
    a_in: Queued,
    a_main: Queued,
    a_out: Queued,
    /// The key whose ghost the last `lookup` consumed.
    ghost_hit: Option<u64>,
}

impl TwoQ {
    /// An empty 2Q cache. Fails if a fraction is out of range or A1in would
    /// get no capacity.
    pub fn new(capacity: Capacity, config: &TwoQConfig) -> Result<Self, ConfigError> {
        if !(config.in_fraction > 0.0 && config.in_fraction < 1.0) {
            return Err(ConfigError::OutOfRange {
                policy: "twoq",
                parameter: "in_fraction",
                value: config.in_fraction.to_string(),
                expected: "strictly between 0 and 1",
            });
        }
        if !(0.0..=10.0).contains(&config.out_fraction) {
            return Err(ConfigError::OutOfRange {
                policy: "twoq",
                parameter: "out_fraction",
                value: config.out_fraction.to_string(),
                expected: "0 to 10",
            });
        }
        let limit = capacity.limit();
        // Truncating products, as libCacheSim's `int64 = uint64 * double`.
        let in_limit = (limit as f64 * config.in_fraction) as u64;
        let out_limit = (limit as f64 * config.out_fraction) as u64;
        if in_limit == 0 {
            return Err(ConfigError::CapacityTooSmall {
                policy: "twoq",
                capacity: limit,
                reason: "A1in would get no capacity",
            });
        }
        let queue = |limit| Queued {
            list: List::new(),
            used: 0,
            limit,
        };
        Ok(Self {
            capacity,
            map: KeyMap::default(),
            slab: Slab::new(),
            a_in: queue(in_limit),
            a_main: queue(limit - in_limit),
            a_out: queue(out_limit),
            ghost_hit: None,
        })
    }

    fn queue_mut(&mut self, queue: Queue) -> &mut Queued {
        match queue {
            Queue::In => &mut self.a_in,
            Queue::Main => &mut self.a_main,
            Queue::Out => &mut self.a_out,
        }
    }

    /// Unlinks node `index` from its queue and frees it and its key.
    fn drop_node(&mut self, index: Index) -> Entry {
        let entry = *self.slab.get(index);
        let queue = self.queue_mut(entry.queue);
        let mut list = queue.list;
        queue.used -= entry.charge;
        self.slab.unlink(&mut list, index);
        self.queue_mut(entry.queue).list = list;
        self.slab.remove(index);
        self.map.remove(&entry.key);
        entry
    }

    /// Evicts A1in's oldest unit into A1out, or Am's LRU unit.
    fn evict_one(&mut self, victims: &mut Vec<u64>) -> bool {
        if self.a_in.used > self.a_in.limit {
            let Some(index) = self.slab.pop_back(&mut self.a_in.list) else {
                return false;
            };
            let entry = *self.slab.get(index);
            self.a_in.used -= entry.charge;
            victims.push(entry.key);
            if entry.charge > self.a_out.limit {
                self.slab.remove(index);
                self.map.remove(&entry.key);
                return true;
            }
            while self.a_out.used + entry.charge > self.a_out.limit {
                let Some(oldest) = self.a_out.list.back() else {
                    break;
                };
                self.drop_node(oldest);
            }
            // The node becomes the ghost; its key stays in the map.
            self.slab.get_mut(index).queue = Queue::Out;
            self.slab.push_front(&mut self.a_out.list, index);
            self.a_out.used += entry.charge;
            return true;
        }
        let Some(index) = self.a_main.list.back() else {
            return false;
        };
        victims.push(self.drop_node(index).key);
        true
    }

    fn insert(&mut self, key: u64, charge: u64, queue: Queue) {
        let index = self.slab.insert(Entry { key, charge, queue });
        let queued = self.queue_mut(queue);
        let mut list = queued.list;
        queued.used += charge;
        self.slab.push_front(&mut list, index);
        self.queue_mut(queue).list = list;
        self.map.insert(key, index);
    }
}

impl Policy for TwoQ {
    fn name(&self) -> &'static str {
        "twoq"
    }

    fn lookup(&mut self, access: &Access) -> bool {
        self.ghost_hit = None;
        let Some(&index) = self.map.get(&access.key) else {
            return false;
        };
        match self.slab.get(index).queue {
            Queue::In => true,
            Queue::Main => {
                self.slab.move_to_front(&mut self.a_main.list, index);
                true
            }
            Queue::Out => {
                self.drop_node(index);
                self.ghost_hit = Some(access.key);
                false
            }
        }
    }

    fn admit(&mut self, access: &Access, victims: &mut Vec<u64>) -> bool {
        let ghost_hit = self.ghost_hit.take() == Some(access.key);
        let charge = self.capacity.charge(access.size);
        if charge > self.a_in.limit {
            return false;
        }
        while self.a_in.used + self.a_main.used + charge > self.capacity.limit() {
            if !self.evict_one(victims) {
                break;
            }
        }
        if ghost_hit {
            while self.a_main.used + charge > self.a_main.limit {
                let Some(index) = self.a_main.list.back() else {
                    break;
                };
                victims.push(self.drop_node(index).key);
            }
            self.insert(access.key, charge, Queue::Main);
        } else {
            self.insert(access.key, charge, Queue::In);
        }
        true
    }

    /// Removes a resident key; a ghost of `key` is forgotten too (returning
    /// `false`, as it was not resident).
    fn remove(&mut self, key: u64) -> bool {
        let Some(&index) = self.map.get(&key) else {
            return false;
        };
        self.drop_node(index).queue != Queue::Out
    }

    fn contains(&self, key: u64) -> bool {
        self.map
            .get(&key)
            .is_some_and(|&index| self.slab.get(index).queue != Queue::Out)
    }

    fn len(&self) -> usize {
        self.a_in.list.len() + self.a_main.list.len()
    }

    fn used(&self) -> u64 {
        self.a_in.used + self.a_main.used
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

    /// Naive 2Q: three vectors, newest first, transcribing libCacheSim's
    /// `TwoQ.c` with its FIFO and LRU sub-caches.
    struct NaiveTwoQ {
        capacity: Capacity,
        limits: [u64; 3],
        /// A1in, Am, A1out: (key, charge), newest first.
        queues: [Vec<(u64, u64)>; 3],
    }

    fn used(queue: &[(u64, u64)]) -> u64 {
        queue.iter().map(|i| i.1).sum()
    }

    impl Reference for NaiveTwoQ {
        fn access(&mut self, access: &Access) -> (bool, Vec<u64>) {
            let [a_in, a_main, a_out] = &mut self.queues;
            let [in_limit, main_limit, out_limit] = self.limits;
            if a_in.iter().any(|i| i.0 == access.key) {
                return (true, vec![]);
            }
            if let Some(at) = a_main.iter().position(|i| i.0 == access.key) {
                let item = a_main.remove(at);
                a_main.insert(0, item);
                return (true, vec![]);
            }
            let ghost = a_out.iter().position(|i| i.0 == access.key);
            if let Some(at) = ghost {
                a_out.remove(at);
            }
            let charge = self.capacity.charge(access.size);
            let mut victims = vec![];
            if charge > in_limit {
                return (false, victims);
            }
            while used(a_in) + used(a_main) + charge > self.capacity.limit() {
                if used(a_in) > in_limit {
                    let item = a_in.pop().unwrap();
                    victims.push(item.0);
                    if item.1 <= out_limit {
                        while used(a_out) + item.1 > out_limit {
                            a_out.pop();
                        }
                        a_out.insert(0, item);
                    }
                } else {
                    victims.push(a_main.pop().unwrap().0);
                }
            }
            if ghost.is_some() {
                while used(a_main) + charge > main_limit {
                    victims.push(a_main.pop().unwrap().0);
                }
                a_main.insert(0, (access.key, charge));
            } else {
                a_in.insert(0, (access.key, charge));
            }
            (false, victims)
        }
    }

    fn twoq(capacity: Capacity) -> TwoQ {
        TwoQ::new(capacity, &TwoQConfig::default()).unwrap()
    }

    #[test]
    fn sizes_truncate_like_libcachesim() {
        let q = twoq(Capacity::Objects(489));
        assert_eq!(
            (q.a_in.limit, q.a_out.limit, q.a_main.limit),
            (122, 244, 367)
        );
        assert!(TwoQ::new(Capacity::Objects(3), &TwoQConfig::default()).is_err());
    }

    #[test]
    fn a_ghost_hit_promotes_to_am() {
        // A1in 1, Am 3, A1out 2.
        let mut q = twoq(Capacity::Objects(4));
        let mut victims = vec![];
        let hits: Vec<bool> = testing::keys(&[1, 2, 3, 4, 1, 5, 1, 5])
            .iter()
            .map(|a| q.access(a, &mut victims))
            .collect();
        // 1..4 fill A1in (over its size of 1, which only the total bounds).
        // The second 1 is a hit in A1in: nothing moves. 5 evicts A1in's
        // oldest, 1, into A1out; the third 1 is a ghost hit, a miss, that
        // evicts 2 (A1in still over) and enters Am. 5 is still in A1in.
        assert_eq!(hits, [false, false, false, false, true, false, false, true]);
        assert_eq!(victims, [1, 2]);
        assert_eq!(q.slab.get(q.map[&1]).queue, Queue::Main);
        assert_eq!(q.slab.get(q.map[&2]).queue, Queue::Out);
    }

    proptest! {
        #[test]
        fn matches_naive_model(trace in testing::trace_strategy(40, 400, 5), cap in 4u64..30, bytes: bool) {
            let capacity = if bytes { Capacity::Bytes(cap) } else { Capacity::Objects(cap) };
            let mut q = twoq(capacity);
            let limits = [q.a_in.limit, q.a_main.limit, q.a_out.limit];
            let mut naive = NaiveTwoQ { capacity, limits, queues: Default::default() };
            testing::assert_matches_reference(&mut q, &mut naive, &trace);
            testing::replay_checked(&mut twoq(capacity), &trace);
        }
    }
}
