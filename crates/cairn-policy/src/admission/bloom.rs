//! `bloom`: admit a unit on its second miss, remembering missed keys in a
//! Bloom filter ("cache on second hit").
//!
//! Source: Maggs & Sitaraman, "Algorithmic nuggets in content delivery",
//! SIGCOMM CCR 2015 (Akamai's edge caches: three quarters of the objects
//! were requested once, and a Bloom filter of recently requested keys kept
//! them out); libCacheSim's `cache/admission/bloomfilter.c` has the same rule
//! with an exact, unbounded table of every key ever missed.
//!
//! - The first miss of a key records it and refuses it; any later miss of a
//!   recorded key admits it (and re-records it, so a hot key stays known).
//!   A key stays recorded after it is admitted and evicted, as in
//!   libCacheSim: its next miss brings it straight back.
//! - Memory is bounded: two generations of `keys_per_unit` × the cache's
//!   units keys each (at least 64), each a Bloom filter with
//!   `false_positive_rate`. New keys go into the current generation; when it
//!   has taken its share, the older one is cleared and becomes the current.
//!   So a key is remembered for between one and two generations of other
//!   keys, and a first miss is admitted by mistake with about the false
//!   positive rate.
//! - With a generation larger than the trace's distinct keys and a tiny
//!   false positive rate the filter is libCacheSim's exact table
//!   (`crates/cairn-sim/tests/libcachesim_agreement.rs` checks the counts).
//! - Hashing is fixed (splitmix64 finalisers, double hashing), so runs are
//!   reproducible. The two bit arrays are allocated once; nothing per access.

use serde::{Deserialize, Serialize};

use super::{Admission, Occupancy, expected_units};
use crate::{Access, Capacity, ConfigError, mix64};

/// The most keys one generation may be sized for (2^32).
pub const MAX_KEYS: u64 = 1 << 32;

/// The largest generation, in bits (2^33: 1 GiB; two generations are kept).
pub const MAX_BITS: u64 = 1 << 33;

/// `bloom` parameters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BloomConfig {
    /// Keys a generation remembers per cache unit, in `(0, 4096]`. Default 8:
    /// a key missed again within about eight cache-fulls of other missed keys
    /// is admitted.
    pub keys_per_unit: f64,
    /// Each generation's false positive rate, in `(0, 0.5]`. Default 0.01
    /// (9.6 bits a key).
    pub false_positive_rate: f64,
    /// In byte mode, the average unit size used to count the cache's units,
    /// at least 1. Default 4096.
    pub average_unit_bytes: u64,
}

impl Default for BloomConfig {
    fn default() -> Self {
        Self {
            keys_per_unit: 8.0,
            false_positive_rate: 0.01,
            average_unit_bytes: 4096,
        }
    }
}

impl BloomConfig {
    /// Checks every value's range.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let error = |parameter, value: String, expected| {
            Err(ConfigError::OutOfRange {
                policy: "bloom",
                parameter,
                value,
                expected,
            })
        };
        if !(self.keys_per_unit > 0.0 && self.keys_per_unit <= 4096.0) {
            return error(
                "keys_per_unit",
                self.keys_per_unit.to_string(),
                "in (0, 4096]",
            );
        }
        if !(self.false_positive_rate > 0.0 && self.false_positive_rate <= 0.5) {
            return error(
                "false_positive_rate",
                self.false_positive_rate.to_string(),
                "in (0, 0.5]",
            );
        }
        if self.average_unit_bytes == 0 {
            return error("average_unit_bytes", "0".into(), "at least 1");
        }
        Ok(())
    }
}

/// One generation: a bit array and the keys put in it.
#[derive(Clone, Debug)]
struct Generation {
    words: Box<[u64]>,
    inserted: u64,
}

/// The `bloom` filter.
#[derive(Clone, Debug)]
pub struct Bloom {
    current: Generation,
    previous: Generation,
    /// Bits in each generation.
    bits: u64,
    /// Bits set (and tested) per key.
    hashes: u32,
    /// Keys a generation takes before the older one is cleared.
    keys: u64,
}

impl Generation {
    fn new(words: usize) -> Self {
        Self {
            words: vec![0; words].into_boxed_slice(),
            inserted: 0,
        }
    }

    fn bit(&self, at: u64) -> bool {
        self.words[(at / 64) as usize] & (1 << (at % 64)) != 0
    }

    fn set(&mut self, at: u64) {
        self.words[(at / 64) as usize] |= 1 << (at % 64);
    }
}

impl Bloom {
    /// A filter for a cache of `capacity`.
    pub fn new(capacity: Capacity, config: &BloomConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        let units = expected_units(capacity, config.average_unit_bytes).max(1);
        let keys = ((units as f64 * config.keys_per_unit).ceil() as u64).clamp(64, MAX_KEYS);
        let ln2 = std::f64::consts::LN_2;
        let bits = (-(keys as f64) * config.false_positive_rate.ln() / (ln2 * ln2)).ceil() as u64;
        if bits > MAX_BITS {
            return Err(ConfigError::OutOfRange {
                policy: "bloom",
                parameter: "keys_per_unit",
                value: config.keys_per_unit.to_string(),
                expected: "few enough keys for this cache that a generation fits in 1 GiB \
                           (lower keys_per_unit, raise false_positive_rate, or raise \
                           average_unit_bytes in byte mode)",
            });
        }
        let words = bits.div_ceil(64).max(1);
        let bits = words * 64;
        let hashes = ((bits as f64 / keys as f64) * ln2).round().clamp(1.0, 32.0) as u32;
        Ok(Self {
            current: Generation::new(words as usize),
            previous: Generation::new(words as usize),
            bits,
            hashes,
            keys,
        })
    }

    /// The `hashes` bit positions of `key` (double hashing).
    fn positions(&self, key: u64) -> impl Iterator<Item = u64> + use<> {
        let h1 = mix64(key ^ 0x243f_6a88_85a3_08d3);
        let h2 = mix64(key ^ 0x1319_8a2e_0370_7344) | 1;
        let bits = self.bits;
        (0..u64::from(self.hashes)).map(move |i| h1.wrapping_add(i.wrapping_mul(h2)) % bits)
    }

    fn in_generation(&self, generation: &Generation, key: u64) -> bool {
        self.positions(key).all(|at| generation.bit(at))
    }

    /// Records `key`, not in the current generation, there, rotating first
    /// when it is full.
    fn record_key(&mut self, key: u64) {
        if self.current.inserted >= self.keys {
            std::mem::swap(&mut self.current, &mut self.previous);
            self.current.words.fill(0);
            self.current.inserted = 0;
        }
        for at in self.positions(key) {
            self.current.set(at);
        }
        self.current.inserted += 1;
    }
}

impl Admission for Bloom {
    fn name(&self) -> &'static str {
        "bloom"
    }

    fn admit(&mut self, access: &Access, _occupancy: Occupancy) -> bool {
        if self.in_generation(&self.current, access.key) {
            return true;
        }
        let seen = self.in_generation(&self.previous, access.key);
        self.record_key(access.key);
        seen
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    const EMPTY: Occupancy = Occupancy { used: 0, limit: 1 };

    #[test]
    fn with_room_for_every_key_it_is_an_exact_second_miss_rule() {
        let config = BloomConfig {
            keys_per_unit: 4096.0,
            false_positive_rate: 1e-9,
            ..BloomConfig::default()
        };
        let mut filter = Bloom::new(Capacity::Objects(10), &config).unwrap();
        let mut seen = HashSet::new();
        let mut state = 88_172_645_463_325_252_u64;
        for time in 0..50_000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let key = state % 30_000;
            let expected = !seen.insert(key);
            assert_eq!(
                filter.admit(&Access::read(key, 1, time), EMPTY),
                expected,
                "key {key} at {time}"
            );
        }
    }

    #[test]
    fn keys_are_forgotten_after_two_generations_of_others() {
        // 64 keys a generation (the minimum).
        let config = BloomConfig {
            keys_per_unit: 1.0,
            false_positive_rate: 1e-6,
            ..BloomConfig::default()
        };
        let mut filter = Bloom::new(Capacity::Objects(1), &config).unwrap();
        assert_eq!(filter.keys, 64);
        let miss = |filter: &mut Bloom, key| filter.admit(&Access::read(key, 1, 0), EMPTY);
        assert!(!miss(&mut filter, 1));
        for key in 100..163 {
            miss(&mut filter, key); // fills the first generation (64 keys)
        }
        assert!(miss(&mut filter, 1), "still in the current generation");
        for key in 200..264 {
            miss(&mut filter, key); // a second generation: 1 is in the previous
        }
        assert!(
            miss(&mut filter, 1),
            "in the previous generation, and re-recorded"
        );
        for key in 300..428 {
            miss(&mut filter, key); // two more generations of others
        }
        assert!(!miss(&mut filter, 1), "forgotten");
    }

    #[test]
    fn the_false_positive_rate_is_about_what_was_asked() {
        let config = BloomConfig {
            keys_per_unit: 1.0,
            false_positive_rate: 0.01,
            ..BloomConfig::default()
        };
        let mut filter = Bloom::new(Capacity::Objects(20_000), &config).unwrap();
        for key in 0..20_000 {
            filter.admit(&Access::read(key, 1, 0), EMPTY);
        }
        // Keys never seen: the share admitted is the false positive rate.
        let wrong = (1_000_000..1_100_000)
            .filter(|&key| filter.in_generation(&filter.current, key))
            .count();
        assert!((500..2_000).contains(&wrong), "{wrong} of 100,000");
        assert!(
            Bloom::new(
                Capacity::Objects(1),
                &BloomConfig {
                    false_positive_rate: 0.0,
                    ..config
                }
            )
            .is_err()
        );
        // 2^40 bytes in 1-byte units at 4096 keys each: refused, not 23 GB.
        let huge = BloomConfig {
            keys_per_unit: 4096.0,
            average_unit_bytes: 1,
            ..BloomConfig::default()
        };
        assert!(Bloom::new(Capacity::Bytes(1 << 40), &huge).is_err());
    }
}
