//! LP-2Q: 2Q with lazy promotion: Am is a CLOCK instead of an LRU list, so
//! a hit in Am sets a reference bit instead of moving the unit.
//!
//! Source: Juncheng Yang, Ziyue Qiu, Yazhuo Zhang, Yao Yue, K. V. Rashmi,
//! "FIFO can be Better than LRU: the Power of Lazy Promotion and Quick
//! Demotion", HotOS 2023 (lazy promotion applied to 2Q; Johnson & Shasha,
//! VLDB 1994, for 2Q itself). This module matches libCacheSim commit
//! aa0fc40's `cache/eviction/fifo/LP_TwoQ.c` (`cachesim ... lp-twoq`, named
//! `LP-TwoQ-Clock`), defaults `Ain-size-ratio=0.25,Aout-size-ratio=0.5`. As
//! [`twoq`](crate::twoq), except:
//!
//! - **hit in Am**: set the unit's reference bit; nothing moves.
//! - **evicting from Am** (when A1in is within its size, or to make room in
//!   Am for a ghost hit): CLOCK: Am's tail with the bit set is cleared and
//!   moved to the head, the first with the bit clear goes.
//!
//! Otherwise 2Q's: A1in gets ⌊capacity × `in_fraction`⌋, A1out (ghost)
//! ⌊capacity × `out_fraction`⌋, Am the rest; a unit larger than A1in is
//! refused; a ghost hit is a miss admitted into Am, any other miss enters
//! A1in; making room evicts A1in's oldest into A1out while A1in is over its
//! size, else from Am.
//!
//! Difference: [`Policy::remove`] of a key that only has a ghost forgets the
//! ghost and returns `false` (libCacheSim's `LP_TwoQ_remove` returns `true`).

use serde::{Deserialize, Serialize};

use crate::index::{KeyIndex, Keyed};
use crate::list::{Index, List, Slab};
use crate::{Access, Ahead, Capacity, ConfigError, Policy};

/// LP-2Q's configuration; the defaults are libCacheSim's (and the 2Q paper's).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LpTwoQConfig {
    /// A1in's share of the capacity, in (0, 0.5]. Default 0.25 (libCacheSim
    /// `Ain-size-ratio`). Above one half, room could be needed with Am
    /// empty and A1in within its share, where libCacheSim's `LP_TwoQ` evicts
    /// from an empty CLOCK and crashes.
    pub in_fraction: f64,
    /// A1out's (ghost) size as a share of the capacity, in [0, 10]. Default
    /// 0.5 (libCacheSim `Aout-size-ratio`).
    pub out_fraction: f64,
}

impl Default for LpTwoQConfig {
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
    charge: u32,
    queue: Queue,
    /// Am's reference bit.
    referenced: bool,
}

impl Keyed for Entry {
    fn key(&self) -> u64 {
        self.key
    }
}

/// One of the three queues: front = newest.
#[derive(Clone, Copy, Debug, Default)]
struct Queued {
    list: List,
    used: u64,
    limit: u64,
}

/// 2Q with a CLOCK Am.
#[derive(Debug)]
pub struct LpTwoQ {
    capacity: Capacity,
    /// Every key in any of the three queues.
    map: KeyIndex,
    slab: Slab<Entry>,
    a_in: Queued,
    a_main: Queued,
    a_out: Queued,
    /// The key whose ghost the last `lookup` consumed.
    ghost_hit: Option<u64>,
}

impl LpTwoQ {
    /// An empty LP-2Q cache. Fails if a fraction is out of range or A1in would
    /// get no capacity.
    pub fn new(capacity: Capacity, config: &LpTwoQConfig) -> Result<Self, ConfigError> {
        if !(config.in_fraction > 0.0 && config.in_fraction <= 0.5) {
            return Err(ConfigError::OutOfRange {
                policy: "lp-twoq",
                parameter: "in_fraction",
                value: config.in_fraction.to_string(),
                expected: "above 0, at most 0.5",
            });
        }
        if !(0.0..=10.0).contains(&config.out_fraction) {
            return Err(ConfigError::OutOfRange {
                policy: "lp-twoq",
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
                policy: "lp-twoq",
                capacity: limit,
                reason: "A1in would get no capacity",
            });
        }
        let queue = |limit| Queued {
            limit,
            ..Queued::default()
        };
        Ok(Self {
            capacity,
            map: KeyIndex::default(),
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
        queue.used -= u64::from(entry.charge);
        self.slab.unlink(&mut list, index);
        self.queue_mut(entry.queue).list = list;
        self.map.remove(entry.key, &self.slab);
        self.slab.remove(index);
        entry
    }

    /// CLOCK eviction from Am. Returns whether a unit was evicted.
    fn evict_main(&mut self, victims: &mut Vec<u64>) -> bool {
        loop {
            let Some(index) = self.a_main.list.back() else {
                return false;
            };
            let entry = self.slab.get_mut(index);
            if !entry.referenced {
                victims.push(self.drop_node(index).key);
                return true;
            }
            entry.referenced = false;
            self.slab.move_to_front(&mut self.a_main.list, index);
        }
    }

    /// Evicts A1in's oldest unit into A1out, or from Am.
    fn evict_one(&mut self, victims: &mut Vec<u64>) -> bool {
        if self.a_in.used <= self.a_in.limit {
            return self.evict_main(victims);
        }
        let Some(index) = self.slab.pop_back(&mut self.a_in.list) else {
            return false;
        };
        let entry = *self.slab.get(index);
        let charge = u64::from(entry.charge);
        self.a_in.used -= charge;
        victims.push(entry.key);
        if charge > self.a_out.limit {
            self.map.remove(entry.key, &self.slab);
            self.slab.remove(index);
            return true;
        }
        while self.a_out.used + charge > self.a_out.limit {
            let Some(oldest) = self.a_out.list.back() else {
                break;
            };
            self.drop_node(oldest);
        }
        // The node becomes the ghost; its key stays in the map.
        self.slab.get_mut(index).queue = Queue::Out;
        self.slab.push_front(&mut self.a_out.list, index);
        self.a_out.used += charge;
        true
    }

    fn insert(&mut self, key: u64, charge: u64, queue: Queue) {
        let index = self.slab.insert(Entry {
            key,
            charge: charge as u32, // ≤ A1in's size, from a u32 size
            queue,
            referenced: false,
        });
        let queued = self.queue_mut(queue);
        let mut list = queued.list;
        queued.used += charge;
        self.slab.push_front(&mut list, index);
        self.queue_mut(queue).list = list;
        self.map.insert(key, index, &self.slab);
    }
}

impl Policy for LpTwoQ {
    fn name(&self) -> &'static str {
        "lp-twoq"
    }

    fn prefetch(&self, key: u64, ahead: Ahead) {
        self.map.prefetch_stage(key, &self.slab, ahead, false);
    }

    fn lookup(&mut self, access: &Access) -> bool {
        self.ghost_hit = None;
        let Some(index) = self.map.get(access.key, &self.slab) else {
            return false;
        };
        match self.slab.get(index).queue {
            Queue::In => true,
            Queue::Main => {
                self.slab.get_mut(index).referenced = true;
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
            return false; // LP_TwoQ_can_insert
        }
        while self.a_in.used + self.a_main.used + charge > self.capacity.limit() {
            if !self.evict_one(victims) {
                break;
            }
        }
        if ghost_hit {
            // Am->get: Am's own admission check, then room within its size.
            if charge > self.a_main.limit {
                return false;
            }
            while self.a_main.used + charge > self.a_main.limit {
                if !self.evict_main(victims) {
                    break;
                }
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
        let Some(index) = self.map.get(key, &self.slab) else {
            return false;
        };
        self.drop_node(index).queue != Queue::Out
    }

    fn contains(&self, key: u64) -> bool {
        self.map
            .get(key, &self.slab)
            .is_some_and(|index| self.slab.get(index).queue != Queue::Out)
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

    /// Naive LP-2Q: three vectors of `(key, charge, referenced)`, newest
    /// first, transcribing `LP_TwoQ.c` with its FIFO and Clock sub-caches.
    struct NaiveLpTwoQ {
        capacity: Capacity,
        limits: [u64; 3],
        /// A1in, Am, A1out.
        queues: [Vec<(u64, u64, bool)>; 3],
    }

    fn used(queue: &[(u64, u64, bool)]) -> u64 {
        queue.iter().map(|i| i.1).sum()
    }

    fn clock_evict(a_main: &mut Vec<(u64, u64, bool)>, victims: &mut Vec<u64>) {
        loop {
            let item = a_main.pop().unwrap();
            if item.2 {
                a_main.insert(0, (item.0, item.1, false));
            } else {
                victims.push(item.0);
                return;
            }
        }
    }

    impl Reference for NaiveLpTwoQ {
        fn access(&mut self, access: &Access) -> (bool, Vec<u64>) {
            let [a_in, a_main, a_out] = &mut self.queues;
            let [in_limit, main_limit, out_limit] = self.limits;
            if a_in.iter().any(|i| i.0 == access.key) {
                return (true, vec![]);
            }
            let ghost = a_out.iter().position(|i| i.0 == access.key);
            if let Some(at) = ghost {
                a_out.remove(at);
            }
            if let Some(item) = a_main.iter_mut().find(|i| i.0 == access.key) {
                item.2 = true;
                return (true, vec![]);
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
                    clock_evict(a_main, &mut victims);
                }
            }
            if ghost.is_some() {
                if charge <= main_limit {
                    while used(a_main) + charge > main_limit {
                        clock_evict(a_main, &mut victims);
                    }
                    a_main.insert(0, (access.key, charge, false));
                }
            } else {
                a_in.insert(0, (access.key, charge, false));
            }
            (false, victims)
        }
    }

    fn lptwoq(capacity: Capacity, config: &LpTwoQConfig) -> LpTwoQ {
        LpTwoQ::new(capacity, config).unwrap()
    }

    #[test]
    fn a_hit_in_am_sets_a_bit_and_the_hand_passes_it_once() {
        // A1in 1, Am 3, A1out 2.
        let mut q = lptwoq(Capacity::Objects(4), &LpTwoQConfig::default());
        let mut victims = vec![];
        // 1, 2, 3 pass through A1in into A1out and come back into Am.
        for access in testing::keys(&[1, 2, 3, 4, 5, 6, 1]) {
            q.access(&access, &mut victims);
        }
        let queue = |q: &LpTwoQ, k| q.slab.get(q.map.get(k, &q.slab).unwrap()).queue;
        assert_eq!(queue(&q, 1), Queue::Main);
        for access in testing::keys(&[5, 2, 6, 3]) {
            q.access(&access, &mut victims);
        }
        assert_eq!([1, 2, 3].map(|k| queue(&q, k)), [Queue::Main; 3]);
        // Hit 1 (Am's oldest): only its bit is set. The next Am eviction
        // clears it, moves 1 to the head and takes 2.
        assert!(q.access(&testing::keys(&[1])[0], &mut victims));
        victims.clear();
        assert!(q.evict_main(&mut victims));
        assert_eq!(victims, [2]);
        assert!(!q.slab.get(q.map.get(1, &q.slab).unwrap()).referenced);
        victims.clear();
        assert!(q.evict_main(&mut victims));
        assert_eq!(victims, [3], "1 was passed to the head, so 3 is next");
    }

    #[test]
    fn rejects_bad_fractions_and_tiny_caches() {
        for config in [
            LpTwoQConfig {
                in_fraction: 0.0,
                ..LpTwoQConfig::default()
            },
            LpTwoQConfig {
                in_fraction: 0.6,
                ..LpTwoQConfig::default()
            },
            LpTwoQConfig {
                out_fraction: 11.0,
                ..LpTwoQConfig::default()
            },
        ] {
            assert!(matches!(
                LpTwoQ::new(Capacity::Objects(100), &config).unwrap_err(),
                ConfigError::OutOfRange {
                    policy: "lp-twoq",
                    ..
                }
            ));
        }
        assert!(LpTwoQ::new(Capacity::Objects(3), &LpTwoQConfig::default()).is_err());
    }

    proptest! {
        #[test]
        fn matches_naive_model(
            trace in testing::trace_strategy(40, 400, 5),
            cap in 4u64..30,
            bytes: bool,
            in_fraction in 0.1f64..=0.5,
            out_fraction in 0.0f64..1.5,
        ) {
            let capacity = if bytes { Capacity::Bytes(cap) } else { Capacity::Objects(cap) };
            let config = LpTwoQConfig { in_fraction, out_fraction };
            let Ok(mut q) = LpTwoQ::new(capacity, &config) else {
                return Ok(());
            };
            let in_limit = (cap as f64 * in_fraction) as u64;
            let limits = [in_limit, cap - in_limit, (cap as f64 * out_fraction) as u64];
            let mut naive = NaiveLpTwoQ { capacity, limits, queues: Default::default() };
            testing::assert_matches_reference(&mut q, &mut naive, &trace);
            testing::replay_checked(&mut lptwoq(capacity, &config), &trace);
        }
    }
}
