//! Zipf-distributed item ranks by rejection-inversion (W. Hörmann and
//! G. Derflinger, "Rejection-inversion to generate variates from monotone
//! discrete distributions", ACM TOMACS 6(3), 1996), as in Apache Commons RNG:
//! O(1) memory and time per sample for any α ≥ 0, α = 1 included, with no
//! table over the n items.

use serde::{Deserialize, Serialize};

use super::pace::{Clock, Layout, Pace, invalid};
use crate::{Request, Result};

/// Requests whose items follow Zipf(α): item `k` (0-based rank) is drawn
/// with probability ∝ 1 / (k + 1)^α.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ZipfConfig {
    /// Number of distinct items. Default 1,000,000.
    pub items: u64,
    /// Skew α ≥ 0 (0 is uniform). Default 1.0.
    pub alpha: f64,
    /// Objects or blocks. Default objects.
    pub layout: Layout,
    /// Count, size, writes, time and seed (a nested table).
    pub pace: Pace,
}

impl Default for ZipfConfig {
    fn default() -> Self {
        Self {
            items: 1_000_000,
            alpha: 1.0,
            layout: Layout::Objects,
            pace: Pace::default(),
        }
    }
}

impl ZipfConfig {
    /// Checks the config and starts the stream.
    pub fn generator(&self) -> Result<Zipf> {
        Ok(Zipf {
            sampler: ZipfSampler::new(self.items, self.alpha)?,
            layout: self.layout,
            clock: Clock::new(self.pace)?,
        })
    }
}

/// The stream of a [`ZipfConfig`].
#[derive(Clone, Debug)]
pub struct Zipf {
    sampler: ZipfSampler,
    layout: Layout,
    clock: Clock,
}

impl Iterator for Zipf {
    type Item = Request;

    fn next(&mut self) -> Option<Request> {
        if self.clock.done() {
            return None;
        }
        let item = self.sampler.sample(&mut self.clock.rng);
        Some(self.clock.request(item, self.layout))
    }
}

/// A Zipf(α) sampler over ranks 0..n.
#[derive(Clone, Copy, Debug)]
pub struct ZipfSampler {
    items: u64,
    exponent: f64,
    h_integral_x1: f64,
    h_integral_n: f64,
    s: f64,
}

impl ZipfSampler {
    /// A sampler over `items` ranks with exponent `alpha`.
    pub fn new(items: u64, alpha: f64) -> Result<Self> {
        if items == 0 {
            return Err(invalid("items must be at least 1"));
        }
        if !(alpha.is_finite() && alpha >= 0.0) {
            return Err(invalid(format!("alpha = {alpha}: must be finite and ≥ 0")));
        }
        let mut sampler = Self {
            items,
            exponent: alpha,
            h_integral_x1: 0.0,
            h_integral_n: 0.0,
            s: 0.0,
        };
        sampler.h_integral_x1 = sampler.h_integral(1.5) - 1.0;
        sampler.h_integral_n = sampler.h_integral(items as f64 + 0.5);
        sampler.s = 2.0 - sampler.h_integral_inverse(sampler.h_integral(2.5) - sampler.h(2.0));
        Ok(sampler)
    }

    /// Draws a 0-based rank.
    pub fn sample(&self, rng: &mut impl rand::Rng) -> u64 {
        loop {
            let u: f64 = rng.random::<f64>();
            let u = self.h_integral_n + u * (self.h_integral_x1 - self.h_integral_n);
            let x = self.h_integral_inverse(u);
            let k = ((x + 0.5) as u64).clamp(1, self.items);
            let kf = k as f64;
            if kf - x <= self.s || u >= self.h_integral(kf + 0.5) - self.h(kf) {
                return k - 1;
            }
        }
    }

    /// H(x) = ∫ h, with h(x) = x^-α.
    fn h_integral(&self, x: f64) -> f64 {
        let log_x = x.ln();
        helper2((1.0 - self.exponent) * log_x) * log_x
    }

    fn h(&self, x: f64) -> f64 {
        (-self.exponent * x.ln()).exp()
    }

    fn h_integral_inverse(&self, x: f64) -> f64 {
        let t = (x * (1.0 - self.exponent)).max(-1.0);
        (helper1(t) * x).exp()
    }
}

/// ln(1 + x) / x, accurate near 0.
fn helper1(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.ln_1p() / x
    } else {
        1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x))
    }
}

/// (e^x − 1) / x, accurate near 0.
fn helper2(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.exp_m1() / x
    } else {
        1.0 + x * 0.5 * (1.0 + x / 3.0 * (1.0 + 0.25 * x))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    /// Chi-square-free check: the empirical frequencies of the first ranks
    /// are within 3 % (relative) of 1 / (k+1)^α / H(n, α).
    fn frequencies_match(items: u64, alpha: f64) {
        let sampler = ZipfSampler::new(items, alpha).unwrap();
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        let draws = 400_000;
        let mut counts = [0u64; 4];
        for _ in 0..draws {
            let k = sampler.sample(&mut rng);
            assert!(k < items);
            if let Some(c) = counts.get_mut(k as usize) {
                *c += 1;
            }
        }
        let norm: f64 = (1..=items).map(|k| (k as f64).powf(-alpha)).sum();
        for (k, &count) in counts.iter().enumerate().take(items as usize) {
            let want = ((k + 1) as f64).powf(-alpha) / norm;
            let got = count as f64 / f64::from(draws);
            assert!(
                (got - want).abs() / want < 0.03,
                "α={alpha} k={k}: {got} vs {want}"
            );
        }
    }

    #[test]
    fn frequencies_follow_the_law() {
        frequencies_match(1000, 1.0);
        frequencies_match(1000, 0.8);
        frequencies_match(100, 1.2);
        frequencies_match(10, 0.0);
        frequencies_match(1, 1.0);
    }

    #[test]
    fn rejects_bad_parameters() {
        assert!(ZipfSampler::new(0, 1.0).is_err());
        assert!(ZipfSampler::new(10, -1.0).is_err());
        assert!(ZipfSampler::new(10, f64::NAN).is_err());
    }

    #[test]
    fn same_seed_same_stream() {
        let config = ZipfConfig {
            pace: Pace {
                requests: 1000,
                ..Pace::default()
            },
            ..ZipfConfig::default()
        };
        let a: Vec<Request> = config.generator().unwrap().collect();
        let b: Vec<Request> = config.generator().unwrap().collect();
        assert_eq!(a.len(), 1000);
        assert_eq!(a, b);
    }
}
