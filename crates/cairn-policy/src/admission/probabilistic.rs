//! `probabilistic`: admit each miss with a fixed probability.
//!
//! Source: libCacheSim's `cache/admission/prob.c` (`ProbAdmissioner`); the
//! rule is the simplest of the probabilistic admission family (`AdaptSize`,
//! Berger et al., NSDI 2017, tunes a size-dependent probability). A unit
//! missed `k` times is admitted after `1 / probability` misses on average, so
//! hot units get in and most one-hit wonders do not, with no state per key.
//!
//! The draw is libCacheSim's, step for step: `next_rand() % 10^7 <
//! (int)(probability × 10^7)`, from libCacheSim's generator ([`crate::rng`],
//! Lehmer64 from `0xdeadbeef` by default, a fresh 0.3.5 thread's). A run in
//! a fresh libCacheSim process therefore draws what ours draws, and the two
//! agree miss for miss.

use serde::{Deserialize, Serialize};

use super::{Admission, Occupancy, TEN_MILLION, libcachesim_rng};
use crate::rng::{Generator, Rng};
use crate::{Access, ConfigError};

/// `probabilistic` parameters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProbabilisticConfig {
    /// Probability of admitting a miss, in `(0, 1]`. Default 0.5
    /// (libCacheSim's).
    pub probability: f64,
    /// Which of libCacheSim's generators draws: `"lehmer64"` (0.3.5's, the
    /// default) or `"mmix"` (`aa0fc40`'s).
    pub generator: Generator,
    /// The generator's starting state; default a fresh libCacheSim thread's
    /// (`0xdeadbeef` for Lehmer64, 0 for MMIX). A Lehmer64 seed must not be 0.
    pub seed: Option<u64>,
}

impl Default for ProbabilisticConfig {
    fn default() -> Self {
        Self {
            probability: 0.5,
            generator: Generator::Lehmer64,
            seed: None,
        }
    }
}

impl ProbabilisticConfig {
    /// Checks every value's range.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(self.probability > 0.0 && self.probability <= 1.0) {
            return Err(ConfigError::OutOfRange {
                policy: "probabilistic",
                parameter: "probability",
                value: self.probability.to_string(),
                expected: "a probability in (0, 1]",
            });
        }
        libcachesim_rng("probabilistic", self.generator, self.seed).map(|_| ())
    }
}

/// The `probabilistic` filter.
#[derive(Clone, Debug)]
pub struct Probabilistic {
    /// Admit when a draw modulo 10^7 is below this: libCacheSim's
    /// `admission_probability_int`, `probability × 10^7` truncated.
    below: u64,
    rng: Rng,
}

impl Probabilistic {
    /// A filter with `config`'s probability and generator.
    pub fn new(config: &ProbabilisticConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        Ok(Self {
            below: (config.probability * TEN_MILLION as f64) as u64,
            rng: libcachesim_rng("probabilistic", config.generator, config.seed)?,
        })
    }
}

impl Admission for Probabilistic {
    fn name(&self) -> &'static str {
        "probabilistic"
    }

    fn admit(&mut self, _access: &Access, _occupancy: Occupancy) -> bool {
        self.rng.next_u64() % TEN_MILLION < self.below
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admits_about_the_asked_share_reproducibly() {
        let occupancy = Occupancy { used: 0, limit: 10 };
        let run = |probability, seed| {
            let mut filter = Probabilistic::new(&ProbabilisticConfig {
                probability,
                seed: Some(seed),
                ..ProbabilisticConfig::default()
            })
            .unwrap();
            (0..100_000)
                .map(|i| filter.admit(&Access::read(i, 1, i), occupancy))
                .collect::<Vec<_>>()
        };
        let share = |v: &[bool]| v.iter().filter(|&&a| a).count() as f64 / v.len() as f64;
        assert!((share(&run(0.3, 7)) - 0.3).abs() < 0.01);
        assert!(run(1.0, 7).iter().all(|&a| a));
        assert_eq!(run(0.3, 7), run(0.3, 7), "the same seed, the same draws");
        assert_ne!(run(0.3, 7), run(0.3, 8));
        for bad in [0.0, -1.0, 1.5, f64::NAN] {
            assert!(
                Probabilistic::new(&ProbabilisticConfig {
                    probability: bad,
                    ..ProbabilisticConfig::default()
                })
                .is_err()
            );
        }
    }
}
