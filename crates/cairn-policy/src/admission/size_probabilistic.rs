//! `size-probabilistic`: admit a miss with probability `e^(-exponent × size)`.
//!
//! Source: libCacheSim's `cache/admission/sizeProbabilistic.c`
//! (`SizeProbabilisticAdmissioner`): a probabilistic filter that also weighs
//! size, so a large unit, which evicts many small ones for one hit, rarely
//! gets in, and a small one almost always does. It is `AdaptSize`'s rule
//! (Berger et al., NSDI 2017) with the scale fixed instead of tuned; see
//! [`super::adaptsize`] for the tuned one.
//!
//! The draw is libCacheSim's, step for step: admit when
//! `(next_rand() % 10^7) / 10^7 < exp(-exponent × size)`, from libCacheSim's
//! generator ([`crate::rng`], Lehmer64 from `0xdeadbeef` by default), so a
//! run agrees miss for miss with one in a fresh libCacheSim process. The size
//! is the request's size in bytes, in object mode too (as the `size`
//! filter's); libCacheSim's object mode counts every object as 1 byte, which
//! admits nearly everything at any sensible exponent.
//!
//! No state per key; nothing allocated.

use serde::{Deserialize, Serialize};

use super::{Admission, Occupancy, TEN_MILLION, libcachesim_rng};
use crate::rng::{Generator, Rng};
use crate::{Access, ConfigError};

/// `size-probabilistic` parameters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SizeProbabilisticConfig {
    /// Per byte, in `(0, 1]`: a unit of `s` bytes is admitted with
    /// probability `e^(-exponent × s)`. Default 1e-6 (libCacheSim's): a
    /// 4 KiB block gets in 99.6 % of the time, a 1 MiB object 35 %.
    pub exponent: f64,
    /// Which of libCacheSim's generators draws: `"lehmer64"` (0.3.5's, the
    /// default) or `"mmix"` (`aa0fc40`'s).
    pub generator: Generator,
    /// The generator's starting state; default a fresh libCacheSim thread's.
    /// A Lehmer64 seed must not be 0.
    pub seed: Option<u64>,
}

impl Default for SizeProbabilisticConfig {
    fn default() -> Self {
        Self {
            exponent: 1e-6,
            generator: Generator::Lehmer64,
            seed: None,
        }
    }
}

impl SizeProbabilisticConfig {
    /// Checks every value's range.
    pub fn validate(&self) -> Result<(), ConfigError> {
        // libCacheSim's check (it logs and aborts).
        if !(self.exponent > 0.0 && self.exponent <= 1.0) {
            return Err(ConfigError::OutOfRange {
                policy: "size-probabilistic",
                parameter: "exponent",
                value: self.exponent.to_string(),
                expected: "in (0, 1], e.g. 1e-6",
            });
        }
        libcachesim_rng("size-probabilistic", self.generator, self.seed).map(|_| ())
    }
}

/// The `size-probabilistic` filter.
#[derive(Clone, Debug)]
pub struct SizeProbabilistic {
    exponent: f64,
    rng: Rng,
}

impl SizeProbabilistic {
    /// A filter with `config`'s exponent and generator.
    pub fn new(config: &SizeProbabilisticConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        Ok(Self {
            exponent: config.exponent,
            rng: libcachesim_rng("size-probabilistic", config.generator, config.seed)?,
        })
    }
}

impl Admission for SizeProbabilistic {
    fn name(&self) -> &'static str {
        "size-probabilistic"
    }

    fn admit(&mut self, access: &Access, _occupancy: Occupancy) -> bool {
        let probability = (-self.exponent * f64::from(access.size)).exp();
        let roll = (self.rng.next_u64() % TEN_MILLION) as f64 / TEN_MILLION as f64;
        roll < probability
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filter(exponent: f64, seed: u64) -> SizeProbabilistic {
        SizeProbabilistic::new(&SizeProbabilisticConfig {
            exponent,
            seed: Some(seed),
            ..SizeProbabilisticConfig::default()
        })
        .unwrap()
    }

    #[test]
    fn admits_small_units_more_often_than_large_ones() {
        let occupancy = Occupancy { used: 0, limit: 10 };
        let share = |size: u32| {
            let mut filter = filter(1e-6, 7);
            let admitted = (0..100_000)
                .filter(|&i| filter.admit(&Access::read(i, size, i), occupancy))
                .count();
            admitted as f64 / 100_000.0
        };
        // e^(-1e-6 × s): 4 KiB 0.9959, 1 MiB 0.3505, 4 MiB 0.0151.
        assert!((share(4096) - 0.9959).abs() < 0.005, "{}", share(4096));
        assert!((share(1 << 20) - 0.3505).abs() < 0.01, "{}", share(1 << 20));
        assert!(
            (share(4 << 20) - 0.0151).abs() < 0.005,
            "{}",
            share(4 << 20)
        );
    }

    #[test]
    fn the_draws_are_libcachesims() {
        // A fresh 0.3.5 thread's first draws, % 10^7: 3189820697 % 10^7 =
        // 9820697 and 6199708794445739982 % 10^7 = 5739982, against e^(-0.5)
        // = 0.6065 at exponent 0.5 and size 1: refuse, then admit.
        let mut filter = SizeProbabilistic::new(&SizeProbabilisticConfig {
            exponent: 0.5,
            ..SizeProbabilisticConfig::default()
        })
        .unwrap();
        let occupancy = Occupancy { used: 0, limit: 10 };
        assert!(!filter.admit(&Access::read(1, 1, 0), occupancy));
        assert!(filter.admit(&Access::read(1, 1, 1), occupancy));
        for bad in [0.0, -1.0, 1.5, f64::NAN] {
            assert!(
                SizeProbabilistic::new(&SizeProbabilisticConfig {
                    exponent: bad,
                    ..SizeProbabilisticConfig::default()
                })
                .is_err()
            );
        }
        assert!(
            SizeProbabilistic::new(&SizeProbabilisticConfig {
                seed: Some(0),
                ..SizeProbabilisticConfig::default()
            })
            .is_err(),
            "0 is a Lehmer64 fixed point"
        );
    }
}
