//! Admission (promotion) filters: which missed units may enter a cache at all.
//!
//! A replacement policy decides what leaves; a filter decides, on a miss,
//! whether the unit comes in. For a cache tier in front of a slower device
//! (an SSD over a disk, as bcache or Open CAS do it), a refused miss is served
//! from the backing device and costs the cache no write and no eviction, so a
//! filter that keeps one-hit wonders and scans out saves both the cache
//! device's endurance and its hot contents.
//!
//! Filters, one file each:
//!
//! - [`always`]: admit everything (the default; a cache with no filter).
//! - [`nhit`]: admit on the n-th miss of a key within a bounded recent window
//!   (Open CAS's `nhit` promotion policy).
//! - [`frequency`]: admit when the key's estimated recent frequency reaches a
//!   threshold (`TinyLFU`'s count-min sketch with aging).
//! - [`bloom`]: admit on a key's second miss, remembered in a Bloom filter
//!   (Akamai's "cache on second hit"; libCacheSim's `bloomfilter`).
//! - [`size`]: admit units below a size (libCacheSim's `size`).
//! - [`probabilistic`]: admit a miss with a fixed probability (libCacheSim's
//!   `prob`).
//! - [`size_probabilistic`]: admit with probability `e^(-exponent × size)`
//!   (libCacheSim's `SizeProbabilistic`).
//! - [`adaptsize`]: admit with probability `e^(-size / c)`, `c` tuned to the
//!   workload by a model of the cache (`AdaptSize`, Berger, Sitaraman &
//!   Harchol-Balter, NSDI 2017; libCacheSim's `AdaptSize`).
//!
//! # Who calls what
//! A filter sees every access: after each [`Policy::lookup`] the cache calls
//! [`Admission::record`] with whether it hit, and on a miss, before it admits
//! the unit into its policy, [`Admission::admit`]; `false` means the cache
//! serves the access without keeping the unit (no `Policy::admit`, nothing
//! evicted). [`Filtered`] does exactly this around any [`Policy`], so a
//! filtered policy is itself a `Policy` (the simulator and the block cache
//! use it unchanged); a cache that drives a filter itself (a tier that caches
//! on promotion) calls the two methods in the same order.
//!
//! Filters are pure (no I/O, keys and sizes only), not thread-safe (like
//! policies, the engine shards and locks them), allocate their tables once
//! when built and nothing per access.
//!
//! [`Policy`]: crate::Policy
//! [`Policy::lookup`]: crate::Policy::lookup

pub mod adaptsize;
pub mod always;
pub mod bloom;
mod config;
mod filtered;
pub mod frequency;
pub mod nhit;
pub mod probabilistic;
pub mod size;
pub mod size_probabilistic;

pub use config::AdmissionConfig;
pub use filtered::Filtered;

use crate::rng::{Generator, Rng};
use crate::{Access, Capacity, ConfigError};

/// libCacheSim's probabilistic admissioners draw `next_rand() % 10^7`
/// (their `MAX_MODULE`).
const TEN_MILLION: u64 = 10_000_000;

/// libCacheSim's generator for a filter's `generator` and `seed` knobs
/// (unset: a fresh libCacheSim thread's state); a Lehmer64 seed of 0 (a
/// fixed point) is refused.
fn libcachesim_rng(
    filter: &'static str,
    generator: Generator,
    seed: Option<u64>,
) -> Result<Rng, ConfigError> {
    let seed = seed.unwrap_or(generator.default_seed());
    if seed == 0 && generator == Generator::Lehmer64 {
        return Err(ConfigError::OutOfRange {
            policy: filter,
            parameter: "seed",
            value: "0".into(),
            expected: "non-zero with the lehmer64 generator",
        });
    }
    Ok(Rng::new(generator, seed))
}

/// How full the cache is when a filter is asked, in its capacity's unit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Occupancy {
    /// Occupied: the policy's [`used`](crate::Policy::used).
    pub used: u64,
    /// The capacity's [`limit`](Capacity::limit).
    pub limit: u64,
}

impl Occupancy {
    /// Whether less than `fraction` (0..=1) of the cache is occupied, counting
    /// `ceil(fraction × limit)` units as the mark (as Open CAS computes its
    /// trigger). `fraction` 0 is never below; 1 is below until full.
    pub fn below(self, fraction: f64) -> bool {
        let mark = (fraction * self.limit as f64).ceil() as u64;
        self.used < mark
    }
}

/// An admission filter: on a miss, may the unit enter the cache?
pub trait Admission: Send {
    /// Short name (`always`, `nhit`, `frequency`).
    fn name(&self) -> &'static str;

    /// Sees one access, after the cache looked it up (`hit` says how that
    /// went). Frequency filters count here; the default does nothing.
    #[inline]
    fn record(&mut self, access: &Access, hit: bool) {
        let _ = (access, hit);
    }

    /// Called on a miss of `access` (after [`record`](Admission::record)),
    /// before the cache admits it; `occupancy` is the cache's fill now.
    /// Returns whether the unit may enter. A filter may count the miss, so a
    /// cache calls this once per miss it would admit, and not for a miss it
    /// will not admit anyway (a failed fetch).
    fn admit(&mut self, access: &Access, occupancy: Occupancy) -> bool;
}

/// The number of units a cache of `capacity` holds, for sizing a filter's
/// table: the capacity in objects, or its bytes over `average_unit_bytes`.
fn expected_units(capacity: Capacity, average_unit_bytes: u64) -> u64 {
    match capacity {
        Capacity::Objects(n) => n,
        Capacity::Bytes(n) => n / average_unit_bytes.max(1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn occupancy_marks_round_up_as_open_cas_does() {
        let at = |used| Occupancy { used, limit: 10 };
        assert!(at(7).below(0.75), "mark ceil(7.5) = 8");
        assert!(!at(8).below(0.75));
        assert!(!at(0).below(0.0), "0: the filter always decides");
        assert!(at(9).below(1.0) && !at(10).below(1.0));
    }
}
