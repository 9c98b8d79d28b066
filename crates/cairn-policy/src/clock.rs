//! CLOCK (second chance), with an optional n-bit reference counter.
//!
//! Origin: F. J. Corbató, "A Paging Experiment with the Multics System" (1968),
//! the one-bit "second chance" approximation of LRU; the n-bit generalisation
//! (a small saturating counter per unit, decremented by the hand) is the
//! GCLOCK family.
//!
//! Maps to libCacheSim's `Clock` (`cache/eviction/Clock.c`, also reachable as
//! `fifo-reinsertion` / `second-chance`), parameter `n-bit-counter`, default 1:
//! - a new unit enters at the head of a FIFO queue with counter 0;
//! - a hit increments the counter, saturating at `2^bits - 1`;
//! - to evict, look at the tail: while its counter is non-zero, decrement it
//!   and move the unit to the head (the hand passing it); evict the first unit
//!   whose counter is zero.
//!
//! The queue rotation is the same thing as a hand sweeping a circular buffer.
//! In object-count mode this reproduces libCacheSim's miss ratios exactly.

use serde::{Deserialize, Serialize};

use crate::list::{Index, List, Slab};
use crate::{Access, Capacity, ConfigError, KeyMap, Policy};

/// CLOCK's configuration.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClockConfig {
    /// Width of each unit's reference counter, in bits (1..=16). Default 1:
    /// classic second chance, as libCacheSim's `Clock` (`n-bit-counter=1`).
    pub counter_bits: u8,
}

impl Default for ClockConfig {
    fn default() -> Self {
        Self { counter_bits: 1 }
    }
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    key: u64,
    charge: u64,
    /// Saturating reference counter; 0 = may be evicted when the hand comes.
    count: u16,
}

/// CLOCK replacement (second chance / n-bit GCLOCK).
#[derive(Debug)]
pub struct Clock {
    capacity: Capacity,
    used: u64,
    count_max: u16,
    map: KeyMap<Index>,
    slab: Slab<Entry>,
    /// Front = most recently inserted or passed by the hand; back = the hand.
    queue: List,
}

impl Clock {
    /// An empty CLOCK cache.
    pub fn new(capacity: Capacity, config: &ClockConfig) -> Result<Self, ConfigError> {
        if !(1..=16).contains(&config.counter_bits) {
            return Err(ConfigError::OutOfRange {
                policy: "clock",
                parameter: "counter_bits",
                value: config.counter_bits.to_string(),
                expected: "1..=16",
            });
        }
        Ok(Self {
            capacity,
            used: 0,
            count_max: ((1u32 << config.counter_bits) - 1) as u16,
            map: KeyMap::default(),
            slab: Slab::new(),
            queue: List::new(),
        })
    }

    /// Evicts one unit: sweeps the hand, giving referenced units another lap.
    fn evict_one(&mut self) -> Option<Entry> {
        loop {
            let index = self.queue.back()?;
            let entry = self.slab.get_mut(index);
            if entry.count == 0 {
                self.slab.unlink(&mut self.queue, index);
                let victim = *self.slab.remove(index);
                self.map.remove(&victim.key);
                self.used -= victim.charge;
                return Some(victim);
            }
            entry.count -= 1;
            self.slab.move_to_front(&mut self.queue, index);
        }
    }
}

impl Policy for Clock {
    fn name(&self) -> &'static str {
        "clock"
    }

    fn lookup(&mut self, access: &Access) -> bool {
        match self.map.get(&access.key) {
            Some(&index) => {
                let entry = self.slab.get_mut(index);
                if entry.count < self.count_max {
                    entry.count += 1;
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
            let Some(victim) = self.evict_one() else {
                break;
            };
            victims.push(victim.key);
        }
        let index = self.slab.insert(Entry {
            key: access.key,
            charge,
            count: 0,
        });
        self.slab.push_front(&mut self.queue, index);
        self.map.insert(access.key, index);
        self.used += charge;
        true
    }

    fn remove(&mut self, key: u64) -> bool {
        let Some(index) = self.map.remove(&key) else {
            return false;
        };
        self.slab.unlink(&mut self.queue, index);
        self.used -= self.slab.remove(index).charge;
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

    /// Naive CLOCK: a circular vector and an explicit hand position.
    struct NaiveClock {
        capacity: Capacity,
        count_max: u16,
        /// (key, charge, count) in ring order; `hand` indexes the next to check.
        ring: Vec<(u64, u64, u16)>,
        hand: usize,
    }

    impl Reference for NaiveClock {
        fn access(&mut self, access: &Access) -> (bool, Vec<u64>) {
            if let Some(item) = self.ring.iter_mut().find(|i| i.0 == access.key) {
                item.2 = (item.2 + 1).min(self.count_max);
                return (true, vec![]);
            }
            let charge = self.capacity.charge(access.size);
            let mut victims = vec![];
            if charge > self.capacity.limit() {
                return (false, victims);
            }
            while self.ring.iter().map(|i| i.1).sum::<u64>() + charge > self.capacity.limit() {
                if self.ring[self.hand].2 == 0 {
                    victims.push(self.ring.remove(self.hand).0);
                    if self.hand == self.ring.len() {
                        self.hand = 0;
                    }
                } else {
                    self.ring[self.hand].2 -= 1;
                    self.hand = (self.hand + 1) % self.ring.len();
                }
            }
            // The new unit goes just behind the hand: last in sweep order.
            self.ring.insert(self.hand, (access.key, charge, 0));
            self.hand = (self.hand + 1) % self.ring.len();
            (false, victims)
        }
    }

    fn clock(capacity: Capacity, counter_bits: u8) -> Clock {
        Clock::new(capacity, &ClockConfig { counter_bits }).unwrap()
    }

    #[test]
    fn a_referenced_unit_gets_a_second_chance() {
        let mut clock = clock(Capacity::Objects(3), 1);
        let mut victims = vec![];
        for access in testing::keys(&[1, 2, 3, 1, 4, 5]) {
            clock.access(&access, &mut victims);
        }
        // 4: the hand clears 1's bit and evicts 2; 5: evicts 3 (1 is now
        // behind 4 in the sweep, with its bit cleared).
        assert_eq!(victims, [2, 3]);
        assert!(clock.contains(1) && clock.contains(4) && clock.contains(5));
    }

    #[test]
    fn two_bit_counter_survives_two_sweeps() {
        let mut clock = clock(Capacity::Objects(2), 2);
        let mut victims = vec![];
        for access in testing::keys(&[1, 1, 1, 2, 3, 4]) {
            clock.access(&access, &mut victims);
        }
        // 1 has count 2 (saturated at 3 would need a third hit). 3 evicts 2
        // after 1 drops to 1; 4 evicts 3 after 1 drops to 0.
        assert_eq!(victims, [2, 3]);
        assert!(clock.contains(1));
    }

    #[test]
    fn rejects_a_zero_width_counter() {
        assert!(Clock::new(Capacity::Objects(4), &ClockConfig { counter_bits: 0 }).is_err());
    }

    proptest! {
        #[test]
        fn matches_naive_model(
            trace in testing::trace_strategy(40, 400, 5),
            cap in 1u64..20,
            bytes: bool,
            counter_bits in 1u8..4,
        ) {
            let capacity = if bytes { Capacity::Bytes(cap) } else { Capacity::Objects(cap) };
            let mut naive = NaiveClock {
                capacity,
                count_max: (1 << counter_bits) - 1,
                ring: vec![],
                hand: 0,
            };
            testing::assert_matches_reference(&mut clock(capacity, counter_bits), &mut naive, &trace);
            testing::replay_checked(&mut clock(capacity, counter_bits), &trace);
        }
    }
}
