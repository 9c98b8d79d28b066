//! `RandomTwo`: draw two residents at random, evict the less recently used.
//!
//! Random sampling with the power of two choices (M. Mitzenmacher, "The Power
//! of Two Choices in Randomized Load Balancing", IEEE TPDS 12(10), 2001;
//! Psounis & Prabhakar, "A Randomized Web-Cache Replacement Scheme",
//! INFOCOM 2001, for caches). Maps to libCacheSim aa0fc40's `RandomTwo`
//! (`cache/eviction/RandomTwo.c`): every request advances a clock; a hit
//! and an insert stamp the unit with it; an eviction draws two residents
//! (possibly the same one) and evicts the first if its stamp is strictly
//! older, else the second. A miss evicts until the new unit fits.
//!
//! Knobs, as [`random`](crate::random)'s:
//! - `version` ("cairn"): "cairn" draws uniformly over the residents;
//!   "aa0fc40" replicates libCacheSim's table and generator, victim for
//!   victim ([`SampledTable`]). "0.3.5" is refused: that release has no
//!   `RandomTwo`.
//! - `seed` (unset): the generator's starting state (see `random`).
//! - `hash_power` (unset = 16; "aa0fc40" only): libCacheSim's table starts
//!   with `2^hash_power` buckets (`RandomTwo_init` takes 8 off the cache's
//!   24).

use serde::{Deserialize, Serialize};

use crate::residents::{SampledTable, SamplerVersion};
use crate::{Access, Ahead, Capacity, ConfigError, Policy};

/// `RandomTwo` parameters.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RandomTwoConfig {
    /// Whose table and generator: "cairn" (default) or "aa0fc40".
    pub version: SamplerVersion,
    /// The generator's starting state (non-zero for "cairn"). Default
    /// unset: `0xdeadbeef`, or a fresh libCacheSim thread's.
    pub seed: Option<u64>,
    /// libCacheSim's table starts with `2^hash_power` buckets, 1..=31.
    /// Default unset: 16; refused with version "cairn".
    pub hash_power: Option<u32>,
}

/// A resident's charge and the clock at its last access.
#[derive(Clone, Copy, Debug, Default)]
struct Entry {
    charge: u64,
    stamp: u64,
}

/// Two random choices, the less recently used evicted. The body of
/// [`RandomLru`](crate::randomlru::RandomLru) too, which draws more.
#[derive(Debug)]
pub struct RandomTwo {
    name: &'static str,
    capacity: Capacity,
    used: u64,
    /// Requests seen (libCacheSim's `n_req`).
    clock: u64,
    table: SampledTable<Entry>,
    /// One eviction's draws; its length is the number drawn.
    drawn: Box<[u32]>,
}

impl RandomTwo {
    /// An empty `RandomTwo` cache.
    pub fn new(capacity: Capacity, config: &RandomTwoConfig) -> Result<Self, ConfigError> {
        Self::sampling(
            "random-two",
            capacity,
            2,
            config.version,
            config.seed,
            config.hash_power,
        )
    }

    /// The shared body: `samples` draws an eviction (at least 1), the
    /// least recently used of them evicted. libCacheSim has neither policy
    /// in 0.3.5, so that version is refused.
    pub(crate) fn sampling(
        name: &'static str,
        capacity: Capacity,
        samples: usize,
        version: SamplerVersion,
        seed: Option<u64>,
        hash_power: Option<u32>,
    ) -> Result<Self, ConfigError> {
        if version == SamplerVersion::V0_3_5 {
            return Err(ConfigError::OutOfRange {
                policy: name,
                parameter: "version",
                value: "0.3.5".into(),
                expected: "cairn or aa0fc40 (libCacheSim 0.3.5 does not have it)",
            });
        }
        debug_assert!(samples >= 1, "the caller checks the sample count");
        Ok(Self {
            name,
            capacity,
            used: 0,
            clock: 0,
            table: SampledTable::new(name, version, seed, hash_power)?,
            drawn: vec![0; samples].into_boxed_slice(),
        })
    }
}

impl Policy for RandomTwo {
    fn name(&self) -> &'static str {
        self.name
    }

    fn prefetch(&self, key: u64, ahead: Ahead) {
        self.table.prefetch(key, ahead);
    }

    fn lookup(&mut self, access: &Access) -> bool {
        self.clock += 1;
        match self.table.get(access.key) {
            Some(slot) => {
                self.table.value_mut(slot).stamp = self.clock;
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
        debug_assert!(
            self.table.get(access.key).is_none(),
            "admit of a resident key"
        );
        while self.used + charge > self.capacity.limit() {
            debug_assert!(!self.table.is_empty(), "used > 0 means residents");
            self.table.sample_into(&mut self.drawn);
            // The oldest drawn; of equal stamps (a unit drawn twice) the
            // later draw, as libCacheSim's RandomTwo keeps the first of two
            // only if strictly older.
            let mut slot = self.drawn[0];
            for &other in &self.drawn[1..] {
                if self.table.value(other).stamp <= self.table.value(slot).stamp {
                    slot = other;
                }
            }
            let (key, victim) = self.table.remove(slot);
            self.used -= victim.charge;
            victims.push(key);
        }
        self.table.insert(
            access.key,
            Entry {
                charge,
                stamp: self.clock,
            },
        );
        self.used += charge;
        true
    }

    fn remove(&mut self, key: u64) -> bool {
        let Some(slot) = self.table.get(key) else {
            return false;
        };
        self.used -= self.table.remove(slot).1.charge;
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
    use crate::libcachesim::{NaiveChains, Version, lcs_rng};
    use crate::testing::{self, Reference};
    use proptest::prelude::*;

    /// Naive `RandomTwo` over a vector of chains: (charge, stamp) per key.
    struct NaiveRandomTwo {
        capacity: Capacity,
        clock: u64,
        table: NaiveChains<(u64, u64)>,
    }

    impl Reference for NaiveRandomTwo {
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
                let a = self.table.sample();
                let b = self.table.sample();
                let key = if a.1.1 < b.1.1 { a.0 } else { b.0 };
                self.table.remove(key);
                victims.push(key);
            }
            self.table.insert(access.key, (charge, self.clock));
            (false, victims)
        }
    }

    fn random_two(capacity: Capacity, version: SamplerVersion, seed: u64, power: u32) -> RandomTwo {
        let config = RandomTwoConfig {
            version,
            seed: Some(seed),
            hash_power: version.libcachesim().map(|_| power),
        };
        RandomTwo::new(capacity, &config).unwrap()
    }

    #[test]
    fn a_hot_unit_survives_more_than_under_random() {
        // Key 0 on every other access, a scan of new keys in between. Random
        // evicts 0 on about 1/10 of the misses; here 0 goes only when both
        // draws pick it, about 1/100.
        let keys: Vec<u64> = (1..2000).flat_map(|k| [0, k]).collect();
        let mut cache = RandomTwo::new(Capacity::Objects(10), &RandomTwoConfig::default()).unwrap();
        let mut victims = vec![];
        for access in testing::keys(&keys) {
            cache.access(&access, &mut victims);
        }
        let dropped = victims.iter().filter(|&&k| k == 0).count();
        assert!((1..60).contains(&dropped), "0 evicted {dropped} times");
    }

    #[test]
    fn bad_knobs_are_refused() {
        let bad = |version, hash_power, seed| {
            let config = RandomTwoConfig {
                version,
                seed,
                hash_power,
            };
            RandomTwo::new(Capacity::Objects(1), &config).is_err()
        };
        assert!(bad(SamplerVersion::V0_3_5, None, None));
        assert!(bad(SamplerVersion::Cairn, Some(16), None));
        assert!(bad(SamplerVersion::Cairn, None, Some(0)));
        assert!(bad(SamplerVersion::Aa0fc40, Some(32), None));
        assert!(!bad(SamplerVersion::Aa0fc40, Some(16), Some(0)));
        assert!(!bad(SamplerVersion::Cairn, None, Some(1)));
    }

    proptest! {
        #[test]
        fn matches_naive_model(trace in testing::trace_strategy(40, 400, 5), cap in 1u64..20, bytes: bool, seed in 1u64.., power in 1u32..8) {
            let capacity = if bytes { Capacity::Bytes(cap) } else { Capacity::Objects(cap) };
            let version = SamplerVersion::Aa0fc40;
            let table = NaiveChains::new(power, Version::Aa0fc40, lcs_rng(Version::Aa0fc40, Some(seed)));
            let mut naive = NaiveRandomTwo { capacity, clock: 0, table };
            testing::assert_matches_reference(&mut random_two(capacity, version, seed, power), &mut naive, &trace);
            testing::replay_checked(&mut random_two(capacity, version, seed, power), &trace);
            testing::replay_checked(&mut random_two(capacity, SamplerVersion::Cairn, seed, power), &trace);
        }
    }
}
