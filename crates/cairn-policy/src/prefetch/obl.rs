//! OBL, one-block lookahead: after `k` sequential accesses, load the next
//! unit.
//!
//! Reference: A. J. Smith, "Sequentiality and Prefetching in Database
//! Systems", ACM TODS 3(3), 1978 (one-block lookahead); the sequential
//! confidence `k` is libCacheSim's (`cache/prefetch/OBL.c`, Zhelong 2024).
//!
//! An access to unit `u` that follows accesses to `u - k, …, u - 1`, in that
//! order and nothing between, asks for `u + 1`. Units are block addresses
//! (`cairn sim --unit block`, or the block cache's blocks): on object traces
//! consecutive ids mean nothing and OBL rarely fires.
//!
//! State: the last unit and the length of the run of consecutive units
//! ending at it, which says the same as libCacheSim's ring of the last `k`
//! units (the previous `k` accesses were `u - k … u - 1` exactly when the
//! last was `u - 1` and ended a run of at least `k`) in two compares and no
//! division. Nothing is allocated.

use serde::{Deserialize, Serialize};

use super::Prefetcher;
use crate::ConfigError;

/// OBL's parameters.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OblConfig {
    /// How many immediately preceding accesses must be the units just below
    /// this one (`u - k … u - 1`) before `u + 1` is loaded. 1 ..= 64; default
    /// 4 (libCacheSim's `sequential-confidence-k`).
    pub sequential_confidence_k: u32,
}

impl Default for OblConfig {
    fn default() -> Self {
        Self {
            sequential_confidence_k: 4,
        }
    }
}

impl OblConfig {
    /// Checks the value's range.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(1..=64).contains(&self.sequential_confidence_k) {
            return Err(ConfigError::OutOfRange {
                policy: "obl",
                parameter: "sequential_confidence_k",
                value: self.sequential_confidence_k.to_string(),
                expected: "in 1..=64",
            });
        }
        Ok(())
    }
}

/// The OBL prefetcher. See the module docs.
#[derive(Debug)]
pub struct Obl {
    k: u64,
    /// The last unit accessed; before the first, `u64::MAX` (libCacheSim's
    /// empty entries, which a run ending at `u64::MAX` matches, as there).
    last: u64,
    /// How many accesses in a row, `last` included, were each one unit
    /// above the one before (1: `last` continues nothing).
    run: u64,
}

impl Obl {
    /// An OBL prefetcher with `config`.
    pub fn new(config: &OblConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        Ok(Self {
            k: u64::from(config.sequential_confidence_k),
            last: u64::MAX,
            run: 1,
        })
    }
}

impl Prefetcher for Obl {
    fn name(&self) -> &'static str {
        "obl"
    }

    #[inline]
    fn access(&mut self, key: u64, _hit: bool, out: &mut Vec<u64>) {
        // Units wrap, as libCacheSim's unsigned ids do.
        let continues = key == self.last.wrapping_add(1);
        if continues && self.run >= self.k {
            out.push(key.wrapping_add(1));
        }
        self.run = if continues {
            self.run.saturating_add(1)
        } else {
            1
        };
        self.last = key;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The definition, on the whole history: before the first access the
    /// history is `k` entries of `u64::MAX` (libCacheSim's empty entries, which
    /// a run ending at `u64::MAX` matches, as there).
    fn naive(history: &[u64], k: usize) -> Vec<Option<u64>> {
        let padded: Vec<u64> = std::iter::repeat_n(u64::MAX, k)
            .chain(history.iter().copied())
            .collect();
        (k..padded.len())
            .map(|at| {
                let key = padded[at];
                let sequential =
                    (1..=k).all(|back| padded[at - back] == key.wrapping_sub(back as u64));
                sequential.then(|| key.wrapping_add(1))
            })
            .collect()
    }

    #[test]
    fn the_fifth_of_a_run_asks_for_the_sixth() {
        let mut obl = Obl::new(&OblConfig::default()).unwrap();
        let mut out = Vec::new();
        for key in 10..14 {
            obl.access(key, false, &mut out);
        }
        assert!(
            out.is_empty(),
            "four accesses are not yet a run of four before one"
        );
        obl.access(14, false, &mut out);
        assert_eq!(out, [15]);
        obl.access(99, true, &mut out);
        obl.access(15, true, &mut out);
        assert_eq!(out, [15], "a gap breaks the run");
    }

    #[test]
    fn k_out_of_range_is_an_error() {
        for k in [0, 65] {
            let error = Obl::new(&OblConfig {
                sequential_confidence_k: k,
            })
            .unwrap_err();
            assert_eq!(
                error.to_string(),
                format!("obl: `sequential_confidence_k` = {k} is out of range: in 1..=64")
            );
        }
    }

    proptest! {
        #[test]
        fn asks_for_what_the_definition_says(
            k in 1usize..6,
            history in proptest::collection::vec(
                prop_oneof![0u64..12, Just(u64::MAX), Just(u64::MAX - 1), Just(0)], 0..300),
        ) {
            let mut obl = Obl::new(&OblConfig { sequential_confidence_k: k as u32 }).unwrap();
            let expected = naive(&history, k);
            for (at, &key) in history.iter().enumerate() {
                let mut out = Vec::new();
                obl.access(key, false, &mut out);
                prop_assert_eq!(out.first().copied(), expected[at], "access {} of {:?}", at, history);
                prop_assert!(out.len() <= 1);
            }
        }
    }
}
