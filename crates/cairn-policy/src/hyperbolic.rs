//! Hyperbolic caching: evict the sampled unit with the lowest hit rate since
//! it entered the cache.
//!
//! Source: A. Blankstein, S. Sen, M. J. Freedman, "Hyperbolic Caching:
//! Flexible Caching for Web Applications", USENIX ATC 2017. A unit's
//! priority is `n / t`, its hits (counting the miss that brought it in) over
//! the time it has spent in the cache; the priority of every unit decays
//! over time at its own rate, which no heap can keep ordered, so eviction
//! samples residents at random and evicts the lowest of the sample.
//!
//! Maps to libCacheSim's `Hyperbolic` (`cache/eviction/Hyperbolic.c`):
//! - time is the cache's request count (`n_req`, counted here by `lookup`);
//!   a unit enters with `freq = 1` at the current count and each hit adds 1;
//! - each eviction draws `n_sample` (64) units, repeats allowed, and evicts
//!   the first with the lowest `10⁸ × freq / age`; whose draws is the
//!   `version` knob, as for [`random`](crate::random): Cairn's uniform ones
//!   (default; all `n_sample` nodes are loaded at once) or libCacheSim's
//!   sampler ([`ChainedTable::sample`](crate::libcachesim::ChainedTable::sample));
//! - like libCacheSim, the score is not divided by the unit's size (the
//!   paper's size-aware variant divides by it), and `freq` is kept in 24
//!   signed bits as in libCacheSim's object metadata (it wraps past
//!   8,388,607 hits);
//! - a miss evicts until the new unit fits, then inserts it.
//!
//! Knobs: `n_sample` (64, libCacheSim's `n-sample`), and `version`
//! ("cairn"), `seed` (unset) and `hash_power` (unset) as for
//! [`random`](crate::random): with a libCacheSim version and the same seed
//! and table size the victims are libCacheSim's, one by one.

use serde::{Deserialize, Serialize};

use crate::residents::{SampledTable, SamplerVersion};
use crate::{Access, Ahead, Capacity, ConfigError, Policy};

/// Hyperbolic caching parameters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HyperbolicConfig {
    /// Residents sampled per eviction, 1..=1024. Default 64 (libCacheSim).
    pub n_sample: u32,
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

impl Default for HyperbolicConfig {
    fn default() -> Self {
        Self {
            n_sample: 64,
            version: SamplerVersion::default(),
            seed: None,
            hash_power: None,
        }
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct Entry {
    charge: u64,
    /// Hits, the admitting miss included; scored as a 24-bit signed number.
    freq: u32,
    /// `n_req` when the unit entered.
    entered: u64,
}

impl Entry {
    /// libCacheSim's `1e8 × freq / age`, `freq` read back from its 24-bit
    /// field.
    fn score(&self, now: u64) -> f64 {
        let freq = (i64::from(self.freq) << 40) >> 40;
        1.0e8 * freq as f64 / (now - self.entered) as f64
    }
}

/// Hyperbolic caching.
#[derive(Debug)]
pub struct Hyperbolic {
    capacity: Capacity,
    used: u64,
    /// Requests seen (`lookup` calls).
    n_req: u64,
    table: SampledTable<Entry>,
    /// The draws of one eviction, `n_sample` long.
    samples: Box<[u32]>,
}

impl Hyperbolic {
    /// An empty Hyperbolic cache.
    pub fn new(capacity: Capacity, config: &HyperbolicConfig) -> Result<Self, ConfigError> {
        if !(1..=1024).contains(&config.n_sample) {
            return Err(ConfigError::OutOfRange {
                policy: "hyperbolic",
                parameter: "n_sample",
                value: config.n_sample.to_string(),
                expected: "1 to 1024",
            });
        }
        Ok(Self {
            capacity,
            used: 0,
            n_req: 0,
            table: SampledTable::new("hyperbolic", config.version, config.seed, config.hash_power)?,
            samples: vec![0; config.n_sample as usize].into_boxed_slice(),
        })
    }

    /// The slot of the lowest score among `n_sample` draws (the first among
    /// equals). libCacheSim starts from a bar of 10¹⁶ and evicts nothing if
    /// no sample is below it; here the first sample is taken then.
    fn victim(&mut self) -> u32 {
        assert!(!self.table.is_empty(), "used > 0 means residents");
        self.table.sample_into(&mut self.samples);
        let mut best = None;
        let mut best_score = 1.0e16;
        for &slot in &self.samples {
            let score = self.table.value(slot).score(self.n_req);
            if best_score > score {
                best = Some(slot);
                best_score = score;
            }
            best = best.or(Some(slot));
        }
        best.expect("n_sample >= 1")
    }
}

impl Policy for Hyperbolic {
    fn name(&self) -> &'static str {
        "hyperbolic"
    }

    fn prefetch(&self, key: u64, ahead: Ahead) {
        self.table.prefetch(key, ahead);
    }

    fn lookup(&mut self, access: &Access) -> bool {
        self.n_req += 1;
        let Some(slot) = self.table.get(access.key) else {
            return false;
        };
        let entry = self.table.value_mut(slot);
        entry.freq = entry.freq.wrapping_add(1);
        true
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
            let slot = self.victim();
            let (key, victim) = self.table.remove(slot);
            self.used -= victim.charge;
            victims.push(key);
        }
        self.table.insert(
            access.key,
            Entry {
                charge,
                freq: 1,
                entered: self.n_req,
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
    use crate::libcachesim::{NaiveChains, lcs_rng};
    use crate::testing::{self, Reference};
    use proptest::prelude::*;

    /// Naive Hyperbolic over a vector of chains of `(charge, hits, entered)`.
    struct NaiveHyperbolic {
        capacity: Capacity,
        n_sample: u32,
        now: u64,
        table: NaiveChains<(u64, u64, u64)>,
    }

    impl Reference for NaiveHyperbolic {
        fn access(&mut self, access: &Access) -> (bool, Vec<u64>) {
            self.now += 1;
            if let Some(entry) = self.table.find(access.key) {
                entry.1 += 1;
                return (true, vec![]);
            }
            let charge = self.capacity.charge(access.size);
            let mut victims = vec![];
            if charge > self.capacity.limit() {
                return (false, victims);
            }
            let used = |t: &NaiveChains<(u64, u64, u64)>| {
                t.chains.iter().flatten().map(|e| e.1.0).sum::<u64>()
            };
            while used(&self.table) + charge > self.capacity.limit() {
                let mut best: Option<(f64, u64)> = None;
                for _ in 0..self.n_sample {
                    let (key, (_, hits, entered)) = self.table.sample();
                    let score = 1e8 * hits as f64 / (self.now - entered) as f64;
                    if best.is_none_or(|b| score < b.0) {
                        best = Some((score, key));
                    }
                }
                let key = best.unwrap().1;
                self.table.remove(key);
                victims.push(key);
            }
            self.table.insert(access.key, (charge, 1, self.now));
            (false, victims)
        }
    }

    fn hyperbolic(
        capacity: Capacity,
        n_sample: u32,
        version: SamplerVersion,
        seed: u64,
        hash_power: u32,
    ) -> Hyperbolic {
        let config = HyperbolicConfig {
            n_sample,
            version,
            seed: Some(seed),
            hash_power: version.libcachesim().map(|_| hash_power),
        };
        Hyperbolic::new(capacity, &config).unwrap()
    }

    #[test]
    fn an_old_hot_unit_loses_to_a_young_one_with_a_higher_rate() {
        // 1 is hit 10 times at requests 1..10, then idles; 2 enters at 11;
        // at 12, 1's rate is 10/11 and 2's is 1/1: 1 goes (LFU would evict 2).
        let mut keys = vec![1; 10];
        keys.extend([2, 3]);
        let mut cache =
            Hyperbolic::new(Capacity::Objects(2), &HyperbolicConfig::default()).unwrap();
        let mut victims = vec![];
        for access in testing::keys(&keys) {
            cache.access(&access, &mut victims);
        }
        assert_eq!(victims, [1]);
        // A unit hit more often than it ages stays: 3 (2 hits in 2) over 2.
        victims.clear();
        for access in testing::keys(&[3, 4]) {
            cache.access(&access, &mut victims);
        }
        assert_eq!(victims, [2]);
    }

    #[test]
    fn knobs_are_checked() {
        let bad = |n_sample, version, hash_power| {
            let config = HyperbolicConfig {
                n_sample,
                version,
                hash_power,
                ..HyperbolicConfig::default()
            };
            Hyperbolic::new(Capacity::Objects(1), &config).is_err()
        };
        let lcs = SamplerVersion::V0_3_5;
        assert!(bad(0, lcs, None) && bad(1025, lcs, None) && bad(64, lcs, Some(0)));
        assert!(!bad(1, lcs, Some(1)) && !bad(1, SamplerVersion::Cairn, None));
        assert!(
            bad(64, SamplerVersion::Cairn, Some(16)),
            "hash_power sizes libCacheSim's table only"
        );
    }

    #[test]
    fn the_frequency_wraps_at_24_bits_like_libcachesim() {
        let entry = Entry {
            charge: 1,
            freq: 1 << 23,
            entered: 0,
        };
        assert!(entry.score(1) < 0.0, "2^23 reads back as -2^23");
    }

    proptest! {
        #[test]
        fn matches_naive_model(trace in testing::trace_strategy(40, 400, 5), cap in 1u64..20, bytes: bool, seed in 1u64.., power in 1u32..8, n_sample in 1u32..8, old: bool) {
            let capacity = if bytes { Capacity::Bytes(cap) } else { Capacity::Objects(cap) };
            let version = if old { SamplerVersion::Aa0fc40 } else { SamplerVersion::V0_3_5 };
            let lcs = version.libcachesim().unwrap();
            let table = NaiveChains::new(power, lcs, lcs_rng(lcs, Some(seed)));
            let mut naive = NaiveHyperbolic { capacity, n_sample, now: 0, table };
            testing::assert_matches_reference(&mut hyperbolic(capacity, n_sample, version, seed, power), &mut naive, &trace);
            testing::replay_checked(&mut hyperbolic(capacity, n_sample, version, seed, power), &trace);
            testing::replay_checked(&mut hyperbolic(capacity, n_sample, SamplerVersion::Cairn, seed, power), &trace);
        }
    }
}
