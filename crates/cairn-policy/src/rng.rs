//! libCacheSim's random numbers, so randomised policies (LeCaR, Cacheus)
//! draw what libCacheSim draws and agree with it exactly.
//!
//! libCacheSim has one generator per thread (`next_rand` in
//! `utils/include/mymath.h`), never reseeded by a simulation:
//! - commit `aa0fc40`: Knuth's MMIX linear congruential generator,
//!   `s = 6364136223846793005 · s + 1442695040888963407` (mod 2^64),
//!   returning `s`, starting at 0;
//! - the 0.3.5 release: Lemire's Lehmer64, a 128-bit multiplicative
//!   generator, `s = 0xda942042e4dd58b5 · s` (mod 2^128), returning
//!   `s >> 64`, starting at `0xdeadbeef`.
//!
//! Because libCacheSim's state is per thread, a run's draws depend on what
//! ran before it in the same thread; ours is per policy instance. A fresh
//! libCacheSim thread (a `cachesim` worker, a new Python process) starts
//! where ours does by default.

use serde::{Deserialize, Serialize};

/// Which of libCacheSim's generators to replay.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Generator {
    /// Lehmer64, libCacheSim 0.3.5's (default seed `0xdeadbeef`).
    #[default]
    Lehmer64,
    /// MMIX, libCacheSim `aa0fc40`'s (default seed 0).
    Mmix,
}

impl Generator {
    /// The state a fresh libCacheSim thread starts from.
    pub const fn default_seed(self) -> u64 {
        match self {
            Generator::Lehmer64 => 0xdead_beef,
            Generator::Mmix => 0,
        }
    }
}

/// One of libCacheSim's generators with its state.
#[derive(Clone, Copy, Debug)]
pub struct Rng {
    generator: Generator,
    state: u128,
}

impl Rng {
    /// A generator starting at `seed` (libCacheSim's `set_rand_seed`). A
    /// Lehmer64 seeded with 0 returns 0 for ever; callers refuse it.
    pub fn new(generator: Generator, seed: u64) -> Self {
        Self {
            generator,
            state: u128::from(seed),
        }
    }

    /// The next number (libCacheSim's `next_rand`).
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        match self.generator {
            Generator::Lehmer64 => {
                self.state = self.state.wrapping_mul(0xda94_2042_e4dd_58b5);
                (self.state >> 64) as u64
            }
            Generator::Mmix => {
                let s = (self.state as u64)
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                self.state = u128::from(s);
                s
            }
        }
    }

    /// `(next % 100) / 100`: libCacheSim's draw against an expert's weight.
    #[inline]
    pub fn percent(&mut self) -> f64 {
        (self.next_u64() % 100) as f64 / 100.0
    }

    /// `(next % 1000) / 1000`.
    #[inline]
    pub fn permille(&mut self) -> f64 {
        (self.next_u64() % 1000) as f64 / 1000.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_generators_are_libcachesims() {
        // next_rand() from a fresh thread, as libCacheSim computes it.
        let mut mmix = Rng::new(Generator::Mmix, 0);
        assert_eq!(mmix.next_u64(), 1_442_695_040_888_963_407);
        assert_eq!(mmix.next_u64(), 1_876_011_003_808_476_466);
        let mut lehmer = Rng::new(Generator::Lehmer64, Generator::Lehmer64.default_seed());
        assert_eq!(lehmer.next_u64(), 3_189_820_697);
        assert_eq!(lehmer.next_u64(), 6_199_708_794_445_739_982);
        assert_eq!(
            Rng::new(Generator::Lehmer64, 0).next_u64(),
            0,
            "0 is a fixed point"
        );
    }
}
