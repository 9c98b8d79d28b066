//! LRU-Prob: LRU whose hits move a unit to the head only with a probability,
//! so most hits cost no list update.
//!
//! Source: libCacheSim's own (`cache/eviction/LRUProb.c`, `LRU_Prob` in
//! `cachesim` as `lru-prob`, `LRUProb` in the `libcachesim` 0.3.5 Python
//! release); no paper. Probabilistic promotion is the idea behind
//! memcached's and Linux's lazy LRU bumps; libCacheSim uses it as a baseline
//! for lazy promotion (Yang et al., "FIFO can be better than LRU: the power
//! of lazy promotion and quick demotion", Hot Topics in Operating Systems 2023).
//!
//! A miss inserts at the head after evicting from the tail until the unit
//! fits; a unit larger than the cache is refused. A hit draws libCacheSim's
//! `next_rand()` and moves the unit to the head when the number is a
//! multiple of ⌊1 / p⌋, where p is `promotion_probability` read as a C
//! `float` (`strtof`), as libCacheSim computes it: the probability is
//! 1 / ⌊1 / p⌋ (0.5 → every other number, 0.3 → one in 3).
//!
//! Random numbers are libCacheSim's generator ([`crate::rng`]), one draw per
//! hit in trace order, so with the same version and seed the promotions are
//! libCacheSim's. Its generator is per thread and the wheel never reseeds
//! it: a fresh Python process (or, at aa0fc40, a fresh `cachesim` run)
//! starts where our default (unset) `seed` does.

use serde::{Deserialize, Serialize};

use crate::index::{KeyIndex, Keyed};
use crate::libcachesim::{LcsRng, Version, check_seed, lcs_rng};
use crate::list::{List, Slab};
use crate::{Access, Ahead, Capacity, ConfigError, Policy};

/// LRU-Prob parameters; the defaults are libCacheSim's.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LruProbConfig {
    /// Chance that a hit moves the unit to the head, in `(0, 1]`; promotion
    /// happens on one draw in ⌊1 / p⌋. Default 0.5 (libCacheSim `prob`).
    pub promotion_probability: f64,
    /// Whose generator: "0.3.5" (default, Lehmer64) or "aa0fc40" (MMIX).
    pub version: Version,
    /// The generator's starting state (non-zero for 0.3.5). Default unset:
    /// a fresh libCacheSim thread's.
    pub seed: Option<u64>,
}

impl Default for LruProbConfig {
    fn default() -> Self {
        Self {
            promotion_probability: 0.5,
            version: Version::default(),
            seed: None,
        }
    }
}

impl LruProbConfig {
    /// libCacheSim's `threshold`: `(int)1.0 / prob` with `prob` parsed by
    /// `strtof`.
    fn threshold(&self) -> Result<u64, ConfigError> {
        let p = self.promotion_probability;
        if !(p > 0.0 && p <= 1.0) {
            return Err(ConfigError::OutOfRange {
                policy: "lru-prob",
                parameter: "promotion_probability",
                value: p.to_string(),
                expected: "a probability in (0, 1]",
            });
        }
        let threshold = (1.0 / f64::from(p as f32)) as u64;
        if threshold == 0 || threshold > i32::MAX as u64 {
            return Err(ConfigError::OutOfRange {
                policy: "lru-prob",
                parameter: "promotion_probability",
                value: p.to_string(),
                expected: "at least 1 / 2^31 (libCacheSim keeps 1 / p in a C int)",
            });
        }
        check_seed("lru-prob", self.version, self.seed)?;
        Ok(threshold)
    }
}

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

/// LRU with probabilistic promotion.
#[derive(Debug)]
pub struct LruProb {
    capacity: Capacity,
    used: u64,
    /// A hit promotes when the draw is a multiple of this.
    threshold: u64,
    rng: LcsRng,
    map: KeyIndex,
    slab: Slab<Entry>,
    queue: List,
}

impl LruProb {
    /// An empty LRU-Prob cache.
    pub fn new(capacity: Capacity, config: &LruProbConfig) -> Result<Self, ConfigError> {
        Ok(Self {
            capacity,
            used: 0,
            threshold: config.threshold()?,
            rng: lcs_rng(config.version, config.seed),
            map: KeyIndex::default(),
            slab: Slab::new(),
            queue: List::new(),
        })
    }
}

impl Policy for LruProb {
    fn name(&self) -> &'static str {
        "lru-prob"
    }

    fn prefetch(&self, key: u64, ahead: Ahead) {
        self.map.prefetch_stage(key, &self.slab, ahead, true);
    }

    fn lookup(&mut self, access: &Access) -> bool {
        let Some(index) = self.map.get(access.key, &self.slab) else {
            return false;
        };
        if self.rng.next_u64().is_multiple_of(self.threshold) {
            self.slab.move_to_front(&mut self.queue, index);
        }
        true
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
    use crate::rng::{Generator, Rng};
    use crate::testing::{self, Reference};
    use proptest::prelude::*;
    use std::collections::VecDeque;

    /// Naive LRU-Prob: a deque of `(key, charge)`, newest at the front, and
    /// its own copy of the generator.
    struct NaiveLruProb {
        capacity: Capacity,
        every: u64,
        rng: Rng,
        queue: VecDeque<(u64, u64)>,
    }

    impl Reference for NaiveLruProb {
        fn access(&mut self, access: &Access) -> (bool, Vec<u64>) {
            if let Some(at) = self.queue.iter().position(|e| e.0 == access.key) {
                if self.rng.next_u64().is_multiple_of(self.every) {
                    let e = self.queue.remove(at).unwrap();
                    self.queue.push_front(e);
                }
                return (true, vec![]);
            }
            let charge = self.capacity.charge(access.size);
            let limit = self.capacity.limit();
            if charge > limit {
                return (false, vec![]);
            }
            let mut victims = vec![];
            while self.queue.iter().map(|e| e.1).sum::<u64>() + charge > limit {
                victims.push(self.queue.pop_back().unwrap().0);
            }
            self.queue.push_front((access.key, charge));
            (false, victims)
        }
    }

    #[test]
    fn a_hit_promotes_exactly_when_the_draw_is_a_multiple_of_the_threshold() {
        // Lehmer64 from 0xdeadbeef draws 3189820697 (odd: no promotion),
        // then 6199708794445739982 (even: promotion).
        let mut cache = LruProb::new(Capacity::Objects(3), &LruProbConfig::default()).unwrap();
        let mut victims = vec![];
        for access in &testing::keys(&[1, 2, 3, 1]) {
            cache.access(access, &mut victims);
        }
        cache.access(&testing::keys(&[4])[0], &mut victims);
        assert_eq!(victims, [1], "the first hit on 1 did not promote it");
        victims.clear();
        for access in &testing::keys(&[2, 5]) {
            cache.access(access, &mut victims);
        }
        assert_eq!(victims, [3], "the second hit promoted 2");
    }

    #[test]
    fn the_threshold_is_libcachesims_integer_inverse_of_a_float() {
        let threshold = |p| {
            LruProbConfig {
                promotion_probability: p,
                ..LruProbConfig::default()
            }
            .threshold()
        };
        assert_eq!(threshold(0.5), Ok(2));
        assert_eq!(threshold(1.0), Ok(1));
        assert_eq!(threshold(0.3), Ok(3));
        assert_eq!(threshold(0.26), Ok(3));
        // 0.1 as a float is 0.100000001..., so 1 / p is 9.99999...
        assert_eq!(threshold(0.1), Ok(9));
        for bad in [0.0, -0.5, 1.5, f64::NAN, 1e-12] {
            assert!(
                matches!(threshold(bad), Err(ConfigError::OutOfRange { .. })),
                "{bad}"
            );
        }
        let zero_seed = LruProbConfig {
            seed: Some(0),
            ..LruProbConfig::default()
        };
        assert!(LruProb::new(Capacity::Objects(10), &zero_seed).is_err());
    }

    proptest! {
        #[test]
        fn matches_naive_model(
            trace in testing::trace_strategy(40, 400, 5),
            cap in 1u64..40,
            bytes: bool,
            (p, every) in prop::sample::select(vec![(1.0, 1), (0.5, 2), (0.3, 3)]),
            aa0fc40: bool,
        ) {
            let capacity = if bytes { Capacity::Bytes(cap) } else { Capacity::Objects(cap) };
            let config = LruProbConfig {
                promotion_probability: p,
                version: if aa0fc40 { Version::Aa0fc40 } else { Version::V0_3_5 },
                seed: None,
            };
            let generator = if aa0fc40 { Generator::Mmix } else { Generator::Lehmer64 };
            let mut naive = NaiveLruProb {
                capacity,
                every,
                rng: Rng::new(generator, generator.default_seed()),
                queue: VecDeque::new(),
            };
            let mut cache = LruProb::new(capacity, &config).unwrap();
            testing::assert_matches_reference(&mut cache, &mut naive, &trace);
            testing::replay_checked(&mut LruProb::new(capacity, &config).unwrap(), &trace);
        }
    }
}
