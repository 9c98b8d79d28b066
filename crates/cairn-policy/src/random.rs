//! RANDOM: evict a resident unit chosen at random.
//!
//! The oldest baseline of cache replacement (L. A. Belady, "A study of
//! replacement algorithms for a virtual storage computer", IBM Systems
//! Journal 5(2), 1966, measures RAND against MIN). Maps to libCacheSim's
//! `Random` (`cache/eviction/Random.c`).
//!
//! A hit changes nothing. A miss evicts random units until the new one
//! fits, then inserts it. Whose "random" is the `version` knob:
//!
//! - "cairn" (default): uniform over the residents, one draw an eviction
//!   ([`Residents`](crate::residents::Residents): a dense array of the
//!   residents beside the key index).
//! - "0.3.5" / "aa0fc40": libCacheSim's `hashtable_rand_obj` over its own
//!   hash table with its own generator, replicated ([`ChainedTable`], [`LcsRng`];
//!   see [`crate::libcachesim`]): at aa0fc40 the head of a random non-empty
//!   bucket (a unit behind another in its chain is not picked while it stays
//!   behind), in 0.3.5 a random entry of that chain, the table halving when
//!   samples keep finding empty buckets. With the same version, seed and
//!   table size the victims are libCacheSim's, one by one. Sampling draws
//!   about `buckets / residents` numbers per eviction, as libCacheSim does
//!   (aa0fc40: 134 for 489 residents in 65,536 buckets).
//!
//! Knobs:
//! - `version` ("cairn"): whose table and generator.
//! - `seed` (unset): the generator's starting state; unset, `0xdeadbeef`
//!   for "cairn", else the state of a fresh libCacheSim thread. The wheel
//!   never reseeds, so its first run in a process starts there and later
//!   runs continue where earlier ones left it; `cachesim` resets it to 0
//!   before every run.
//! - `hash_power` (unset = 16; libCacheSim's tables only): the table starts
//!   with `2^hash_power` buckets. libCacheSim's `Random` uses
//!   `max(12, hashpower − 8)` of the cache's `hashpower`, 24 in the wheel.
//!
//! [`ChainedTable`]: crate::libcachesim::ChainedTable
//! [`LcsRng`]: crate::libcachesim::LcsRng

use serde::{Deserialize, Serialize};

use crate::residents::{SampledTable, SamplerVersion};
use crate::{Access, Ahead, Capacity, ConfigError, Policy};

/// Random-eviction parameters.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RandomConfig {
    /// Whose table and generator: "cairn" (default), "0.3.5" or "aa0fc40".
    pub version: SamplerVersion,
    /// The generator's starting state (non-zero for "cairn" and "0.3.5").
    /// Default unset: `0xdeadbeef`, or a fresh libCacheSim thread's.
    pub seed: Option<u64>,
    /// libCacheSim's table starts with `2^hash_power` buckets, 1..=31.
    /// Default unset: 16 (libCacheSim: `max(12, 24 − 8)`); refused with
    /// version "cairn".
    pub hash_power: Option<u32>,
}

/// Random replacement.
#[derive(Debug)]
pub struct Random {
    capacity: Capacity,
    used: u64,
    /// Residents and their charges.
    table: SampledTable<u64>,
}

impl Random {
    /// An empty random cache.
    pub fn new(capacity: Capacity, config: &RandomConfig) -> Result<Self, ConfigError> {
        Ok(Self {
            capacity,
            used: 0,
            table: SampledTable::new("random", config.version, config.seed, config.hash_power)?,
        })
    }
}

impl Policy for Random {
    fn name(&self) -> &'static str {
        "random"
    }

    fn prefetch(&self, key: u64, ahead: Ahead) {
        self.table.prefetch(key, ahead);
    }

    fn lookup(&mut self, access: &Access) -> bool {
        self.table.get(access.key).is_some()
    }

    fn admit(&mut self, access: &Access, victims: &mut Vec<u64>) -> bool {
        let charge = self.capacity.charge(access.size);
        if charge > self.capacity.limit() {
            return false;
        }
        debug_assert!(
            self.table.get(access.key).is_none(),
            "admit of a resident key"
        );
        while self.used + charge > self.capacity.limit() {
            let slot = self.table.sample().expect("used > 0 means residents");
            let (key, victim_charge) = self.table.remove(slot);
            self.used -= victim_charge;
            victims.push(key);
        }
        self.table.insert(access.key, charge);
        self.used += charge;
        true
    }

    fn remove(&mut self, key: u64) -> bool {
        let Some(slot) = self.table.get(key) else {
            return false;
        };
        self.used -= self.table.remove(slot).1;
        true
    }

    fn contains(&self, key: u64) -> bool {
        self.table.get(key).is_some()
    }

    fn len(&self) -> usize {
        self.table.len()
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
    use crate::libcachesim::{NaiveChains, lcs_rng};
    use crate::testing::{self, Reference};
    use proptest::prelude::*;

    /// Naive random eviction over a vector of chains.
    struct NaiveRandom {
        capacity: Capacity,
        table: NaiveChains<u64>,
    }

    impl Reference for NaiveRandom {
        fn access(&mut self, access: &Access) -> (bool, Vec<u64>) {
            if self.table.find(access.key).is_some() {
                return (true, vec![]);
            }
            let charge = self.capacity.charge(access.size);
            let mut victims = vec![];
            if charge > self.capacity.limit() {
                return (false, victims);
            }
            let used = |t: &NaiveChains<u64>| t.chains.iter().flatten().map(|e| e.1).sum::<u64>();
            while used(&self.table) + charge > self.capacity.limit() {
                let (key, _) = self.table.sample();
                self.table.remove(key);
                victims.push(key);
            }
            self.table.insert(access.key, charge);
            (false, victims)
        }
    }

    fn random(capacity: Capacity, version: SamplerVersion, seed: u64, hash_power: u32) -> Random {
        let config = RandomConfig {
            version,
            seed: Some(seed),
            hash_power: version.libcachesim().map(|_| hash_power),
        };
        Random::new(capacity, &config).unwrap()
    }

    fn version(old: bool) -> SamplerVersion {
        if old {
            SamplerVersion::Aa0fc40
        } else {
            SamplerVersion::V0_3_5
        }
    }

    #[test]
    fn a_hot_unit_is_evicted_like_any_other() {
        // Key 0 on every other access, a scan of new keys in between: LRU
        // keeps 0 for ever; random eviction drops it now and then.
        let keys: Vec<u64> = (1..2000).flat_map(|k| [0, k]).collect();
        let mut cache = Random::new(Capacity::Objects(10), &RandomConfig::default()).unwrap();
        let mut victims = vec![];
        for access in testing::keys(&keys) {
            cache.access(&access, &mut victims);
        }
        let dropped = victims.iter().filter(|&&k| k == 0).count();
        // Each miss evicts 0 with probability about 1/10, and 0 comes back
        // at once: about 1/10 of ~2000 evictions.
        assert!((100..300).contains(&dropped), "0 evicted {dropped} times");
    }

    #[test]
    fn the_seed_decides_the_victims() {
        let trace = testing::keys(&(0..500).map(|i| i * 7 % 97).collect::<Vec<_>>());
        let run = |version, seed| {
            let mut cache = random(Capacity::Objects(20), version, seed, 4);
            let mut victims = vec![];
            for access in &trace {
                cache.access(access, &mut victims);
            }
            victims
        };
        for version in [SamplerVersion::Cairn, SamplerVersion::V0_3_5] {
            assert_eq!(run(version, 1), run(version, 1));
            assert_ne!(run(version, 1), run(version, 2));
        }
        let bad = |version, hash_power, seed| {
            let config = RandomConfig {
                version,
                seed,
                hash_power,
            };
            Random::new(Capacity::Objects(1), &config).is_err()
        };
        let lcs = SamplerVersion::V0_3_5;
        assert!(bad(lcs, Some(0), None) && bad(lcs, Some(32), None));
        assert!(bad(lcs, None, Some(0)) && !bad(lcs, Some(16), Some(1)));
        let cairn = SamplerVersion::Cairn;
        assert!(bad(cairn, Some(16), None) && bad(cairn, None, Some(0)));
        assert!(!bad(cairn, None, Some(1)) && !bad(SamplerVersion::Aa0fc40, None, Some(0)));
    }

    proptest! {
        #[test]
        fn matches_naive_model(trace in testing::trace_strategy(40, 400, 5), cap in 1u64..20, bytes: bool, seed in 1u64.., power in 1u32..8, old: bool) {
            let capacity = if bytes { Capacity::Bytes(cap) } else { Capacity::Objects(cap) };
            let version = version(old);
            let lcs = version.libcachesim().unwrap();
            let table = NaiveChains::new(power, lcs, lcs_rng(lcs, Some(seed)));
            let mut naive = NaiveRandom { capacity, table };
            testing::assert_matches_reference(&mut random(capacity, version, seed, power), &mut naive, &trace);
            testing::replay_checked(&mut random(capacity, version, seed, power), &trace);
            testing::replay_checked(&mut random(capacity, SamplerVersion::Cairn, seed, power), &trace);
        }
    }
}
