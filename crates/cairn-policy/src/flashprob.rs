//! `FlashProb`: a DRAM LRU in front of a flash FIFO, where a unit leaving DRAM
//! is written to flash only with a probability, to spare flash writes.
//!
//! Source: libCacheSim's own (`cache/eviction/other/flashProb.c`, `flashProb`
//! in `cachesim`, `FlashProb` in the `libcachesim` 0.3.5 Python release),
//! the probabilistic flash admission baseline of libCacheSim's flash-cache
//! studies; random admission to flash is the simplest of the write-limiting
//! policies in Eisenman et al., "Flashield: a hybrid key-value cache that
//! controls flash write amplification", NSDI 2019. No paper of its own.
//!
//! As libCacheSim has it, with its default tiers (an LRU "RAM", a FIFO
//! "disk"; libCacheSim can also put ARC, LHD, CLOCK and others in front,
//! which are not offered here):
//!
//! - The disk FIFO holds at most capacity − ⌊capacity × `ram_size_ratio`⌋
//!   (0.05); the RAM LRU has no limit of its own, only the cache's.
//! - A hit in RAM moves the unit to RAM's head; a hit on disk changes
//!   nothing. A miss enters RAM's head, once there is room: while the unit
//!   does not fit in the whole cache, RAM's tail leaves RAM (or, with RAM
//!   empty, the disk's tail is evicted). A unit leaving RAM is written to
//!   the disk when libCacheSim's `next_rand()` is a multiple of ⌊1 /
//!   `disk_admit_probability`⌋ (0.2: one draw in 5), evicting the disk's
//!   oldest units to make room there; otherwise (or if larger than the
//!   disk) it is evicted.
//!
//! Random numbers are libCacheSim's generator ([`crate::rng`]), one draw per
//! unit leaving RAM, so with the same version and seed the writes are
//! libCacheSim's. A fresh Python process (or, at aa0fc40, a fresh `cachesim`
//! run) starts where our default (unset) `seed` does.

use serde::{Deserialize, Serialize};

use crate::index::{KeyIndex, Keyed};
use crate::libcachesim::{LcsRng, Version, check_seed, lcs_rng};
use crate::list::{Index, List, Slab};
use crate::{Access, Ahead, Capacity, ConfigError, Policy};

/// `FlashProb` parameters; the defaults are libCacheSim's.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FlashProbConfig {
    /// The RAM's share of the capacity, in `[0, 1)`: the disk FIFO gets the
    /// rest. Default 0.05 (libCacheSim `ram-size-ratio`).
    pub ram_size_ratio: f64,
    /// Chance that a unit leaving RAM is written to the disk, in `(0, 1]`;
    /// it is written on one draw in ⌊1 / p⌋. Default 0.2 (libCacheSim
    /// `disk-admit-prob`).
    pub disk_admit_probability: f64,
    /// Whose generator: "0.3.5" (default, Lehmer64) or "aa0fc40" (MMIX).
    pub version: Version,
    /// The generator's starting state (non-zero for 0.3.5). Default unset:
    /// a fresh libCacheSim thread's.
    pub seed: Option<u64>,
}

impl Default for FlashProbConfig {
    fn default() -> Self {
        Self {
            ram_size_ratio: 0.05,
            disk_admit_probability: 0.2,
            version: Version::default(),
            seed: None,
        }
    }
}

impl FlashProbConfig {
    /// Checks the knobs; returns libCacheSim's `inv_prob`, `(int)(1.0 / p)`.
    fn validate(&self) -> Result<u64, ConfigError> {
        let out_of_range = |parameter, value: f64, expected| ConfigError::OutOfRange {
            policy: "flashprob",
            parameter,
            value: value.to_string(),
            expected,
        };
        if !(0.0..1.0).contains(&self.ram_size_ratio) {
            return Err(out_of_range(
                "ram_size_ratio",
                self.ram_size_ratio,
                "a fraction in [0, 1)",
            ));
        }
        let p = self.disk_admit_probability;
        if !(p > 0.0 && p <= 1.0) {
            return Err(out_of_range(
                "disk_admit_probability",
                p,
                "a probability in (0, 1]",
            ));
        }
        let inverse = (1.0 / p) as u64;
        if inverse > i32::MAX as u64 {
            return Err(out_of_range(
                "disk_admit_probability",
                p,
                "at least 1 / 2^31 (libCacheSim keeps 1 / p in a C int)",
            ));
        }
        check_seed("flashprob", self.version, self.seed)?;
        Ok(inverse)
    }
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    key: u64,
    /// A size or 1, so at most `u32::MAX`.
    charge: u32,
    on_disk: bool,
}

impl Keyed for Entry {
    fn key(&self) -> u64 {
        self.key
    }
}

/// `FlashProb`: DRAM LRU, flash FIFO, probabilistic flash admission.
#[derive(Debug)]
pub struct FlashProb {
    capacity: Capacity,
    disk_limit: u64,
    /// A unit leaving RAM is written to disk when the draw is a multiple of this.
    inverse: u64,
    rng: LcsRng,
    ram_used: u64,
    disk_used: u64,
    map: KeyIndex,
    slab: Slab<Entry>,
    ram: List,
    disk: List,
}

impl FlashProb {
    /// An empty `FlashProb` cache.
    pub fn new(capacity: Capacity, config: &FlashProbConfig) -> Result<Self, ConfigError> {
        let inverse = config.validate()?;
        // flashProb_init: `(int64_t)cache_size * ram_size_ratio`, truncated.
        let ram_limit = (capacity.limit() as f64 * config.ram_size_ratio) as u64;
        Ok(Self {
            capacity,
            disk_limit: capacity.limit() - ram_limit,
            inverse,
            rng: lcs_rng(config.version, config.seed),
            ram_used: 0,
            disk_used: 0,
            map: KeyIndex::default(),
            slab: Slab::new(),
            ram: List::new(),
            disk: List::new(),
        })
    }

    fn evict(&mut self, index: Index, victims: &mut Vec<u64>) {
        let key = self.slab.get(index).key;
        self.map.remove(key, &self.slab);
        self.slab.remove(index);
        victims.push(key);
    }

    /// Makes room by moving RAM's tail out (to disk, with the probability),
    /// or, with RAM empty, evicting the disk's tail.
    fn make_room(&mut self, victims: &mut Vec<u64>) {
        let Some(index) = self.slab.pop_back(&mut self.ram) else {
            if let Some(index) = self.slab.pop_back(&mut self.disk) {
                self.disk_used -= u64::from(self.slab.get(index).charge);
                self.evict(index, victims);
            }
            return;
        };
        let charge = u64::from(self.slab.get(index).charge);
        self.ram_used -= charge;
        if !self.rng.next_u64().is_multiple_of(self.inverse) || charge > self.disk_limit {
            self.evict(index, victims);
            return;
        }
        while self.disk_used + charge > self.disk_limit {
            let Some(oldest) = self.slab.pop_back(&mut self.disk) else {
                break;
            };
            self.disk_used -= u64::from(self.slab.get(oldest).charge);
            self.evict(oldest, victims);
        }
        self.slab.get_mut(index).on_disk = true;
        self.disk_used += charge;
        self.slab.push_front(&mut self.disk, index);
    }
}

impl Policy for FlashProb {
    fn name(&self) -> &'static str {
        "flashprob"
    }

    fn prefetch(&self, key: u64, ahead: Ahead) {
        self.map.prefetch_stage(key, &self.slab, ahead, true);
    }

    fn lookup(&mut self, access: &Access) -> bool {
        let Some(index) = self.map.get(access.key, &self.slab) else {
            return false;
        };
        if !self.slab.get(index).on_disk {
            self.slab.move_to_front(&mut self.ram, index);
        }
        true
    }

    fn admit(&mut self, access: &Access, victims: &mut Vec<u64>) -> bool {
        let charge = self.capacity.charge(access.size);
        if charge > self.capacity.limit() {
            return false;
        }
        while self.ram_used + self.disk_used + charge > self.capacity.limit() {
            self.make_room(victims);
        }
        let index = self.slab.insert(Entry {
            key: access.key,
            charge: charge as u32, // a size or 1
            on_disk: false,
        });
        self.slab.push_front(&mut self.ram, index);
        self.map.insert(access.key, index, &self.slab);
        self.ram_used += charge;
        true
    }

    fn remove(&mut self, key: u64) -> bool {
        let Some(index) = self.map.remove(key, &self.slab) else {
            return false;
        };
        let entry = *self.slab.get(index);
        if entry.on_disk {
            self.slab.unlink(&mut self.disk, index);
            self.disk_used -= u64::from(entry.charge);
        } else {
            self.slab.unlink(&mut self.ram, index);
            self.ram_used -= u64::from(entry.charge);
        }
        self.slab.remove(index);
        true
    }

    fn contains(&self, key: u64) -> bool {
        self.map.get(key, &self.slab).is_some()
    }

    fn len(&self) -> usize {
        self.map.len()
    }

    fn used(&self) -> u64 {
        self.ram_used + self.disk_used
    }

    fn capacity(&self) -> Capacity {
        self.capacity
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::{Generator, Rng};
    use crate::testing::{self, Reference};
    use proptest::prelude::*;
    use std::collections::VecDeque;

    /// Naive `FlashProb`: two deques of `(key, charge)`, newest at the front,
    /// and its own copy of the generator.
    struct NaiveFlashProb {
        capacity: Capacity,
        disk_limit: u64,
        every: u64,
        rng: Rng,
        ram: VecDeque<(u64, u64)>,
        disk: VecDeque<(u64, u64)>,
    }

    fn sum(q: &VecDeque<(u64, u64)>) -> u64 {
        q.iter().map(|e| e.1).sum()
    }

    impl Reference for NaiveFlashProb {
        fn access(&mut self, access: &Access) -> (bool, Vec<u64>) {
            let key = access.key;
            if let Some(at) = self.ram.iter().position(|e| e.0 == key) {
                let e = self.ram.remove(at).unwrap();
                self.ram.push_front(e);
                return (true, vec![]);
            }
            if self.disk.iter().any(|e| e.0 == key) {
                return (true, vec![]);
            }
            let charge = self.capacity.charge(access.size);
            let limit = self.capacity.limit();
            let mut victims = vec![];
            if charge > limit {
                return (false, victims);
            }
            while sum(&self.ram) + sum(&self.disk) + charge > limit {
                let Some(out) = self.ram.pop_back() else {
                    victims.push(self.disk.pop_back().unwrap().0);
                    continue;
                };
                if self.rng.next_u64().is_multiple_of(self.every) && out.1 <= self.disk_limit {
                    while sum(&self.disk) + out.1 > self.disk_limit {
                        victims.push(self.disk.pop_back().unwrap().0);
                    }
                    self.disk.push_front(out);
                } else {
                    victims.push(out.0);
                }
            }
            self.ram.push_front((key, charge));
            (false, victims)
        }
    }

    #[test]
    fn units_leaving_ram_go_to_disk_on_one_draw_in_five() {
        // Lehmer64 from 0xdeadbeef: the first draw is 3189820697, 2 mod 5;
        // among the first 40 draws, find those that are multiples of 5.
        let mut rng = Rng::new(Generator::Lehmer64, Generator::Lehmer64.default_seed());
        let writes: Vec<bool> = (0..40).map(|_| rng.next_u64().is_multiple_of(5)).collect();
        assert!(!writes[0]);
        // 20 objects: disk 19. Fill with 1..=20, then 40 more misses push
        // RAM's tails out, key k with the k-th draw (a unit written to disk
        // frees nothing, so a miss may push out several).
        let mut cache = FlashProb::new(Capacity::Objects(20), &FlashProbConfig::default()).unwrap();
        let mut victims = vec![];
        for access in &testing::keys(&(1..=60).collect::<Vec<_>>()) {
            cache.access(access, &mut victims);
        }
        let written: Vec<u64> = (0..40)
            .filter(|&i| writes[i])
            .map(|i| i as u64 + 1)
            .collect();
        assert!(
            written.len() >= 3,
            "the first 40 draws write {written:?}; a test needs some"
        );
        for key in 1..=40 {
            assert_eq!(cache.contains(key), written.contains(&key), "key {key}");
        }
        assert_eq!(cache.used(), 20);
        assert!(cache.access(&testing::keys(&[written[0]])[0], &mut victims));
    }

    #[test]
    fn bad_knobs_are_refused() {
        for config in [
            FlashProbConfig {
                ram_size_ratio: 1.0,
                ..FlashProbConfig::default()
            },
            FlashProbConfig {
                disk_admit_probability: 0.0,
                ..FlashProbConfig::default()
            },
            FlashProbConfig {
                disk_admit_probability: f64::NAN,
                ..FlashProbConfig::default()
            },
            FlashProbConfig {
                seed: Some(0),
                ..FlashProbConfig::default()
            },
        ] {
            assert!(
                matches!(
                    FlashProb::new(Capacity::Objects(100), &config),
                    Err(ConfigError::OutOfRange { .. })
                ),
                "{config:?}"
            );
        }
    }

    proptest! {
        #[test]
        fn matches_naive_model(
            trace in testing::trace_strategy(40, 400, 5),
            cap in 1u64..40,
            bytes: bool,
            every in 1u64..4,
            ram_size_ratio in prop::sample::select(vec![0.0, 0.05, 0.5]),
            aa0fc40: bool,
        ) {
            let capacity = if bytes { Capacity::Bytes(cap) } else { Capacity::Objects(cap) };
            let config = FlashProbConfig {
                ram_size_ratio,
                disk_admit_probability: 1.0 / every as f64,
                version: if aa0fc40 { Version::Aa0fc40 } else { Version::V0_3_5 },
                seed: None,
            };
            let generator = if aa0fc40 { Generator::Mmix } else { Generator::Lehmer64 };
            let mut naive = NaiveFlashProb {
                capacity,
                disk_limit: cap - (cap as f64 * ram_size_ratio) as u64,
                every,
                rng: Rng::new(generator, generator.default_seed()),
                ram: VecDeque::new(),
                disk: VecDeque::new(),
            };
            let mut cache = FlashProb::new(capacity, &config).unwrap();
            testing::assert_matches_reference(&mut cache, &mut naive, &trace);
            testing::replay_checked(&mut FlashProb::new(capacity, &config).unwrap(), &trace);
        }
    }
}
