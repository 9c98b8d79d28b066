//! `probabilistic`: admit each miss with a fixed probability.
//!
//! Source: libCacheSim's `cache/admission/prob.c`; the rule is the simplest
//! of the probabilistic admission family (`AdaptSize`, Berger et al., NSDI
//! 2017, tunes a size-dependent probability). A unit missed `k` times is
//! admitted after `1 / probability` misses on average, so hot units get in and
//! most one-hit wonders do not, with no state per key.
//!
//! The draws come from a xorshift64* generator seeded by `seed`, so a run is
//! reproducible; libCacheSim draws from its own global generator, so the two
//! agree in distribution, not miss for miss.

use serde::{Deserialize, Serialize};

use super::{Admission, Occupancy};
use crate::{Access, ConfigError};

/// `probabilistic` parameters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProbabilisticConfig {
    /// Probability of admitting a miss, in `(0, 1]`. Default 0.5
    /// (libCacheSim's).
    pub probability: f64,
    /// Seed of the draws. Default 1.
    pub seed: u64,
}

impl Default for ProbabilisticConfig {
    fn default() -> Self {
        Self {
            probability: 0.5,
            seed: 1,
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
        Ok(())
    }
}

/// The `probabilistic` filter.
#[derive(Clone, Debug)]
pub struct Probabilistic {
    /// Admit when a draw's top 53 bits, as a fraction, is below this.
    probability: f64,
    state: u64,
}

impl Probabilistic {
    /// A filter with `config`'s probability and seed.
    pub fn new(config: &ProbabilisticConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        Ok(Self {
            probability: config.probability,
            // xorshift's state must not be 0.
            state: config.seed ^ 0x9e37_79b9_7f4a_7c15 | 1,
        })
    }

    /// The next draw in [0, 1) (xorshift64*).
    fn draw(&mut self) -> f64 {
        self.state ^= self.state >> 12;
        self.state ^= self.state << 25;
        self.state ^= self.state >> 27;
        let bits = self.state.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11;
        bits as f64 / (1u64 << 53) as f64
    }
}

impl Admission for Probabilistic {
    fn name(&self) -> &'static str {
        "probabilistic"
    }

    fn admit(&mut self, _access: &Access, _occupancy: Occupancy) -> bool {
        self.draw() < self.probability
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admits_about_the_asked_share_reproducibly() {
        let occupancy = Occupancy { used: 0, limit: 10 };
        let run = |probability, seed| {
            let mut filter =
                Probabilistic::new(&ProbabilisticConfig { probability, seed }).unwrap();
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
                    seed: 1
                })
                .is_err()
            );
        }
    }
}
