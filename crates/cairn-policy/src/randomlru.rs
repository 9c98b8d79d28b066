//! `RandomLRU`: draw `n_sample` residents at random, evict the least recently
//! used of them.
//!
//! Sampled LRU, as Redis approximates LRU ("Using Redis as an LRU cache",
//! `maxmemory-samples`) and as Psounis & Prabhakar's randomized replacement
//! (INFOCOM 2001) samples N units and evicts the least useful. Maps to
//! libCacheSim aa0fc40's `RandomLRU` (`cache/eviction/RandomLRU.c`): every
//! request advances a clock, a hit or an insert stamps the unit with it, and
//! an eviction draws 64 residents (repeats allowed) and evicts the one with
//! the oldest stamp. aa0fc40 parses an `n-samples` parameter (default 16,
//! printed in the cache's name) but its eviction always draws 64; our
//! `n_sample` defaults to the 64 it draws. The body is
//! [`RandomTwo`]'s with more draws.
//!
//! Knobs:
//! - `n_sample` (64): residents drawn per eviction, 1..=1024.
//! - `version`, `seed`, `hash_power`: as [`random-two`](crate::randomtwo)'s
//!   ("cairn" by default, "aa0fc40" for libCacheSim's victims, "0.3.5"
//!   refused).

use serde::{Deserialize, Serialize};

use crate::error::Knobs;
use crate::randomtwo::RandomTwo;
use crate::residents::SamplerVersion;
use crate::{Capacity, ConfigError};

/// `RandomLRU` parameters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RandomLruConfig {
    /// Residents drawn per eviction, 1..=1024. Default 64 (what aa0fc40
    /// draws).
    pub n_sample: u32,
    /// Whose table and generator: "cairn" (default) or "aa0fc40".
    pub version: SamplerVersion,
    /// The generator's starting state (non-zero for "cairn"). Default
    /// unset: `0xdeadbeef`, or a fresh libCacheSim thread's.
    pub seed: Option<u64>,
    /// libCacheSim's table starts with `2^hash_power` buckets, 1..=31.
    /// Default unset: 16; refused with version "cairn".
    pub hash_power: Option<u32>,
}

impl Default for RandomLruConfig {
    fn default() -> Self {
        Self {
            n_sample: 64,
            version: SamplerVersion::default(),
            seed: None,
            hash_power: None,
        }
    }
}

/// Sampled LRU.
pub type RandomLru = RandomTwo;

/// An empty `RandomLRU` cache.
pub fn new(capacity: Capacity, config: &RandomLruConfig) -> Result<RandomLru, ConfigError> {
    Knobs("random-lru").one_to("n_sample", config.n_sample, 1024, "1 to 1024")?;
    RandomTwo::sampling(
        "random-lru",
        capacity,
        config.n_sample as usize,
        config.version,
        config.seed,
        config.hash_power,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::libcachesim::{NaiveChains, Version, lcs_rng};
    use crate::testing::{self, Reference};
    use crate::{Access, Policy};
    use proptest::prelude::*;

    /// Naive `RandomLRU` over a vector of chains: (charge, stamp) per key.
    struct NaiveRandomLru {
        capacity: Capacity,
        n_sample: u32,
        clock: u64,
        table: NaiveChains<(u64, u64)>,
    }

    impl Reference for NaiveRandomLru {
        fn access(&mut self, access: &Access) -> (bool, Vec<u64>) {
            self.clock += 1;
            if let Some(entry) = self.table.find(access.key) {
                entry.1 = self.clock;
                return (true, vec![]);
            }
            let charge = self.capacity.charge(access.size);
            let mut victims = vec![];
            if charge > self.capacity.limit() {
                return (false, victims);
            }
            let used =
                |t: &NaiveChains<(u64, u64)>| t.chains.iter().flatten().map(|e| e.1.0).sum::<u64>();
            while used(&self.table) + charge > self.capacity.limit() {
                let drawn: Vec<(u64, (u64, u64))> =
                    (0..self.n_sample).map(|_| self.table.sample()).collect();
                let oldest = drawn.iter().map(|d| d.1.1).min().unwrap();
                let key = drawn.iter().find(|d| d.1.1 == oldest).unwrap().0;
                self.table.remove(key);
                victims.push(key);
            }
            self.table.insert(access.key, (charge, self.clock));
            (false, victims)
        }
    }

    fn random_lru(
        capacity: Capacity,
        version: SamplerVersion,
        n_sample: u32,
        seed: u64,
        power: u32,
    ) -> RandomLru {
        let config = RandomLruConfig {
            n_sample,
            version,
            seed: Some(seed),
            hash_power: version.libcachesim().map(|_| power),
        };
        new(capacity, &config).unwrap()
    }

    #[test]
    fn many_draws_approach_lru() {
        // 64 draws from 10 residents miss the least recently used one with
        // probability (9/10)^64 ≈ 0.1 %: on a cyclic trace of 11 keys nearly
        // every access misses, as under LRU.
        let keys: Vec<u64> = (0..2000).map(|i| i % 11).collect();
        let mut cache = new(Capacity::Objects(10), &RandomLruConfig::default()).unwrap();
        let mut victims = vec![];
        let hits = testing::keys(&keys)
            .iter()
            .filter(|a| cache.access(a, &mut victims))
            .count();
        assert!(hits < 40, "{hits} hits; LRU has none");
        assert_eq!(cache.name(), "random-lru");
    }

    #[test]
    fn bad_knobs_are_refused() {
        let bad = |n_sample, version| {
            let config = RandomLruConfig {
                n_sample,
                version,
                ..RandomLruConfig::default()
            };
            new(Capacity::Objects(1), &config).is_err()
        };
        assert!(bad(0, SamplerVersion::Cairn) && bad(1025, SamplerVersion::Cairn));
        assert!(bad(64, SamplerVersion::V0_3_5));
        assert!(!bad(1, SamplerVersion::Cairn) && !bad(1024, SamplerVersion::Aa0fc40));
    }

    proptest! {
        #[test]
        fn matches_naive_model(trace in testing::trace_strategy(40, 400, 5), cap in 1u64..20, bytes: bool, seed in 1u64.., power in 1u32..8, n_sample in 1u32..70) {
            let capacity = if bytes { Capacity::Bytes(cap) } else { Capacity::Objects(cap) };
            let version = SamplerVersion::Aa0fc40;
            let table = NaiveChains::new(power, Version::Aa0fc40, lcs_rng(Version::Aa0fc40, Some(seed)));
            let mut naive = NaiveRandomLru { capacity, n_sample, clock: 0, table };
            testing::assert_matches_reference(&mut random_lru(capacity, version, n_sample, seed, power), &mut naive, &trace);
            testing::replay_checked(&mut random_lru(capacity, version, n_sample, seed, power), &trace);
            testing::replay_checked(&mut random_lru(capacity, SamplerVersion::Cairn, n_sample, seed, power), &trace);
        }
    }
}
