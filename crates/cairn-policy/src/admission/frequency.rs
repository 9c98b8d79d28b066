//! `frequency`: admit a unit once its estimated recent frequency reaches a
//! threshold (`TinyLFU`-style admission).
//!
//! Source: Gil Einziger, Roy Friedman and Ben Manes, "`TinyLFU`: a highly
//! efficient cache admission policy", ACM `ToS` 13(4), 2017. `TinyLFU` admits a
//! candidate when its frequency beats the victim's; a filter in front of an
//! arbitrary policy does not know the victim, so this one compares with a
//! fixed threshold instead (as Ceph's and several CDNs' "admit after k
//! recent accesses" do).
//!
//! - **Sketch**: the same count-min sketch as the `tinylfu` policy
//!   ([`FrequencySketch`], unchanged): 4-bit counters in 4 rows, 16 counters
//!   per cache unit rounded up to a power of two (8 bytes per unit; units
//!   clamped to 16..=2^28, so at most 2 GiB), saturating at 15. Every access
//!   is recorded, hits too ([`Admission::record`]), so a unit's estimate is
//!   its recent accesses, this one included.
//! - **Aging**: once `sample_multiplier` × the cache's units (W) records have
//!   been counted, every counter is halved and the count of records halved
//!   too (`TinyLFU`'s reset, as Caffeine does it: the first halving after W
//!   records, then one every W/2).
//! - **Trigger** `trigger` = 0.8, as `nhit`'s (Open CAS's): below that fill
//!   every miss is admitted. Refusing a miss into free space only loses the
//!   hits it would have had (on the sample trace, a `CloudPhysics` one, LRU
//!   at 20 % of the working set missed 0.7672 behind this filter with no
//!   trigger, more than its 0.7249 with no filter: the cache seldom filled).
//! - **Threshold** `threshold` = 2: admit a unit on a miss if it was accessed
//!   at least once before within the aging window. One-hit wonders and single
//!   scans stay out; count-min only over-estimates, so a unit at or above the
//!   threshold is always admitted and a colliding cold unit may be too.
//! - A **doorkeeper** (a Bloom filter of 256 bits per unit, two bits per
//!   key, cleared at each halving) absorbs first accesses, and its bit counts
//!   one towards the estimate. On by default here, unlike the `tinylfu`
//!   policy: against a fixed threshold the sketch's noise matters (in a
//!   `TinyLFU` comparison it largely cancels). Each record raises 4 counters,
//!   so after W records a counter holds 4 × 10 / 16 = 2.5 foreign counts on
//!   average, and a key never seen before often estimates 2. Measured with
//!   300 hot keys among a scan five times as long (`1000` units): without
//!   the doorkeeper 15,406 of 60,000 scan keys were admitted, with it 43,
//!   every hot key admitted either way.
//!
//! Memory is the sketch, allocated once; nothing is allocated per access.

use serde::{Deserialize, Serialize};

use super::{Admission, Occupancy, expected_units};
use crate::tinylfu::FrequencySketch;
use crate::{Access, Capacity, ConfigError};

/// The largest threshold: a 4-bit counter saturates at 15.
pub const MAX_THRESHOLD: u64 = 15;

/// `frequency` parameters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FrequencyConfig {
    /// Admit when the key's estimated recent accesses (this one included)
    /// reach this, in `1..=15`. Default 2.
    pub threshold: u64,
    /// Admit every miss while the cache is less than this fraction full, in
    /// `[0, 1]`. Default 0.8 (as `nhit`).
    pub trigger: f64,
    /// Halve the counters after this many records per cache unit, at least
    /// 1. Default 10 (`TinyLFU`'s and Caffeine's sample size).
    pub sample_multiplier: u64,
    /// Put a doorkeeper Bloom filter in front of the sketch (32 bytes per
    /// unit). Default true (see the module doc).
    pub doorkeeper: bool,
    /// In byte mode, the average unit size used to size the sketch, in
    /// bytes, at least 1. Default 4096 (one block).
    pub average_unit_bytes: u64,
}

impl Default for FrequencyConfig {
    fn default() -> Self {
        Self {
            threshold: 2,
            trigger: 0.8,
            sample_multiplier: 10,
            doorkeeper: true,
            average_unit_bytes: 4096,
        }
    }
}

impl FrequencyConfig {
    /// Checks every value's range.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let error = |parameter, value: String, expected| {
            Err(ConfigError::OutOfRange {
                policy: "frequency",
                parameter,
                value,
                expected,
            })
        };
        if !(1..=MAX_THRESHOLD).contains(&self.threshold) {
            return error("threshold", self.threshold.to_string(), "in 1..=15");
        }
        if !(0.0..=1.0).contains(&self.trigger) {
            return error("trigger", self.trigger.to_string(), "a fraction in [0, 1]");
        }
        if self.sample_multiplier == 0 {
            return error("sample_multiplier", "0".into(), "at least 1");
        }
        if self.average_unit_bytes == 0 {
            return error("average_unit_bytes", "0".into(), "at least 1");
        }
        Ok(())
    }
}

/// The `frequency` filter.
#[derive(Clone, Debug)]
pub struct Frequency {
    sketch: FrequencySketch,
    threshold: u64,
    trigger: f64,
}

impl Frequency {
    /// A filter for a cache of `capacity`.
    pub fn new(capacity: Capacity, config: &FrequencyConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        let units = expected_units(capacity, config.average_unit_bytes);
        let sample_size = units.max(1).saturating_mul(config.sample_multiplier);
        Ok(Self {
            sketch: FrequencySketch::new(units, sample_size, config.doorkeeper),
            threshold: config.threshold,
            trigger: config.trigger,
        })
    }

    /// The estimated recent accesses of `key`.
    pub fn estimate(&self, key: u64) -> u64 {
        self.sketch.estimate(key)
    }
}

impl Admission for Frequency {
    fn name(&self) -> &'static str {
        "frequency"
    }

    #[inline]
    fn record(&mut self, access: &Access, _hit: bool) {
        self.sketch.increment(access.key);
    }

    fn admit(&mut self, access: &Access, occupancy: Occupancy) -> bool {
        occupancy.below(self.trigger) || self.sketch.estimate(access.key) >= self.threshold
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FULL: Occupancy = Occupancy {
        used: 1000,
        limit: 1000,
    };

    fn frequency(units: u64, threshold: u64, doorkeeper: bool) -> Frequency {
        Frequency::new(
            Capacity::Objects(units),
            &FrequencyConfig {
                threshold,
                doorkeeper,
                trigger: 0.0,
                ..FrequencyConfig::default()
            },
        )
        .unwrap()
    }

    /// Records an access and, as a cache would on a miss, asks.
    fn miss(filter: &mut Frequency, key: u64) -> bool {
        let access = Access::read(key, 4096, 0);
        filter.record(&access, false);
        filter.admit(&access, FULL)
    }

    #[test]
    fn admits_frequent_keys_and_refuses_the_one_hit_wonders_of_a_scan() {
        let mut filter =
            Frequency::new(Capacity::Objects(1000), &FrequencyConfig::default()).unwrap();
        let (mut scan_admitted, mut scan_key) = (0, 1_000_000);
        for round in 0..20 {
            for hot in 0..100 {
                // A hot key's first access ever is refused, every later one
                // admitted.
                assert_eq!(
                    miss(&mut filter, hot),
                    round > 0,
                    "hot {hot}, round {round}"
                );
                for _ in 0..5 {
                    scan_admitted += usize::from(miss(&mut filter, scan_key));
                    scan_key += 1;
                }
            }
        }
        // 10,000 scan keys, each seen once: count-min may over-estimate a
        // few through collisions, no more.
        assert!(
            scan_admitted <= 50,
            "{scan_admitted} of 10000 scan keys admitted"
        );
    }

    #[test]
    fn the_threshold_counts_this_access() {
        for threshold in 1..=MAX_THRESHOLD {
            for doorkeeper in [false, true] {
                let mut filter = frequency(1000, threshold, doorkeeper);
                for n in 1..=threshold {
                    assert_eq!(
                        miss(&mut filter, 42),
                        n == threshold,
                        "threshold {threshold}, access {n}"
                    );
                }
            }
        }
    }

    #[test]
    fn aging_forgets_old_frequency() {
        // 64 units, W = 640 records; the sketch alone.
        let mut filter = frequency(64, 2, false);
        filter.record(&Access::read(7, 1, 0), true);
        assert!(miss(&mut filter, 7), "two accesses");
        for key in 1000..1000 + 640 {
            filter.record(&Access::read(key, 1, 0), false);
        }
        assert_eq!(filter.estimate(7), 1, "halved");
        assert!(miss(&mut filter, 7), "1 + this access");
        for key in 2000..2000 + 2 * 640 {
            filter.record(&Access::read(key, 1, 0), false);
        }
        assert_eq!(filter.estimate(7), 0, "halved again and again");
        assert!(!miss(&mut filter, 7), "stale frequency no longer admits");
    }

    #[test]
    fn out_of_range_values_are_refused() {
        let build = |config: FrequencyConfig| Frequency::new(Capacity::Bytes(1 << 20), &config);
        let base = FrequencyConfig::default();
        for bad in [
            FrequencyConfig {
                threshold: 0,
                ..base.clone()
            },
            FrequencyConfig {
                threshold: 16,
                ..base.clone()
            },
            FrequencyConfig {
                sample_multiplier: 0,
                ..base.clone()
            },
            FrequencyConfig {
                trigger: -0.1,
                ..base.clone()
            },
            FrequencyConfig {
                average_unit_bytes: 0,
                ..base.clone()
            },
        ] {
            let error = build(bad.clone()).map(|_| ()).unwrap_err();
            assert!(
                matches!(
                    error,
                    ConfigError::OutOfRange {
                        policy: "frequency",
                        ..
                    }
                ),
                "{bad:?}: {error}"
            );
        }
        build(base).unwrap();
    }

    #[test]
    fn the_doorkeeper_is_cleared_when_the_sketch_ages() {
        let mut filter = frequency(64, 2, true);
        assert!(
            !miss(&mut filter, 7),
            "first access: the doorkeeper's bit only"
        );
        assert!(miss(&mut filter, 7));
        for key in 1000..1000 + 640 {
            filter.record(&Access::read(key, 1, 0), false);
        }
        assert!(
            !miss(&mut filter, 7),
            "halved to 0 and the doorkeeper cleared"
        );
    }

    #[test]
    fn below_the_trigger_every_miss_is_admitted() {
        let mut filter =
            Frequency::new(Capacity::Objects(100), &FrequencyConfig::default()).unwrap();
        let access = Access::read(9, 1, 0);
        filter.record(&access, false);
        assert!(filter.admit(
            &access,
            Occupancy {
                used: 79,
                limit: 100
            }
        ));
        assert!(!filter.admit(
            &access,
            Occupancy {
                used: 80,
                limit: 100
            }
        ));
    }
}
