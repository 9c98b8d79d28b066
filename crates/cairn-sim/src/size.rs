//! Cache sizes: absolute, or a fraction of the trace's working set.
//!
//! Fractions resolve the way libCacheSim's `cachesim` does it
//! (`bin/cachesim/cli_parser.c`, `conv_cache_sizes`): the working set size is
//! the number of distinct objects in object-count mode, or the sum of their
//! sizes (each counted once, at its first size) in byte mode, and the cache
//! size is `(uint64_t)(wss * fraction)`: a product in `double`, truncated.

use std::str::FromStr;

use cairn_policy::Capacity;
use serde::{Deserialize, Serialize};

use crate::{Result, SimError};

/// The unit a cache's occupancy is counted in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CapacityUnit {
    /// Count resident units whatever their size (libCacheSim's `ignore_obj_size`).
    #[default]
    Objects,
    /// Sum the resident units' sizes in bytes.
    Bytes,
}

/// A cache size as the user gives it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CacheSize {
    /// An absolute size, in the capacity unit (objects or bytes).
    Absolute(u64),
    /// A fraction (0, 1] of the working set.
    Fraction(f64),
}

/// The distinct units a trace touches: what fractions are fractions of.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkingSet {
    /// Distinct keys.
    pub objects: u64,
    /// Sum of the distinct keys' sizes, each at the size of its first access.
    pub bytes: u64,
}

impl WorkingSet {
    /// The working set in `unit`.
    pub fn in_unit(self, unit: CapacityUnit) -> u64 {
        match unit {
            CapacityUnit::Objects => self.objects,
            CapacityUnit::Bytes => self.bytes,
        }
    }
}

impl CacheSize {
    /// Whether resolving this size needs the working set.
    pub fn needs_working_set(self) -> bool {
        matches!(self, CacheSize::Fraction(_))
    }

    /// The capacity this size means for a trace with `working_set` (ignored
    /// for absolute sizes), exactly as libCacheSim computes it.
    pub fn resolve(self, unit: CapacityUnit, working_set: WorkingSet) -> Capacity {
        let limit = match self {
            CacheSize::Absolute(n) => n,
            CacheSize::Fraction(f) => (working_set.in_unit(unit) as f64 * f) as u64,
        };
        match unit {
            CapacityUnit::Objects => Capacity::Objects(limit),
            CapacityUnit::Bytes => Capacity::Bytes(limit),
        }
    }
}

impl std::fmt::Display for CacheSize {
    /// Fractions as percentages (`10%`), absolute sizes as numbers.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CacheSize::Absolute(n) => write!(f, "{n}"),
            CacheSize::Fraction(x) => write!(f, "{}%", x * 100.0),
        }
    }
}

/// Parses a byte count with an optional suffix: `4096`, `4KiB`, `64MiB`, `1GB`
/// (the one parser, [`cairn_policy::parse_bytes`], with the simulator's error).
pub fn parse_bytes(text: &str) -> Result<u64> {
    cairn_policy::parse_bytes(text).map_err(|e| SimError::Size {
        text: e.text,
        reason: e.reason.to_owned(),
    })
}

impl FromStr for CacheSize {
    type Err = SimError;

    /// `10%` and `0.1` are fractions of the working set (a `.` makes a
    /// fraction, as in libCacheSim); `4096` and `64MiB` are absolute.
    fn from_str(text: &str) -> Result<Self> {
        let error = |reason: &str| SimError::Size {
            text: text.to_owned(),
            reason: reason.to_owned(),
        };
        let trimmed = text.trim();
        let fraction = if let Some(percent) = trimmed.strip_suffix('%') {
            let p: f64 = percent
                .trim()
                .parse()
                .map_err(|_| error("expected a percentage such as 10%"))?;
            Some(p / 100.0)
        } else if trimmed.contains('.') {
            Some(
                trimmed
                    .parse::<f64>()
                    .map_err(|_| error("expected a fraction such as 0.1"))?,
            )
        } else {
            None
        };
        match fraction {
            Some(f) if f > 0.0 && f <= 1.0 => Ok(CacheSize::Fraction(f)),
            Some(_) => Err(error(
                "a fraction of the working set must be in (0, 1] (0%..100%]",
            )),
            None => match parse_bytes(trimmed)? {
                0 => Err(error("a cache size must be positive")),
                n => Ok(CacheSize::Absolute(n)),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_accepted_form() {
        let parse = |s: &str| s.parse::<CacheSize>().unwrap();
        assert_eq!(parse("10%"), CacheSize::Fraction(0.1));
        assert_eq!(parse("0.25"), CacheSize::Fraction(0.25));
        assert_eq!(parse("4096"), CacheSize::Absolute(4096));
        assert_eq!(parse("64MiB"), CacheSize::Absolute(64 << 20));
        assert_eq!(parse("1GB"), CacheSize::Absolute(1_000_000_000));
        for bad in ["", "0", "abc", "150%", "-1", "1.5", "12XB", "0%"] {
            assert!(
                bad.parse::<CacheSize>().is_err(),
                "{bad:?} must be rejected"
            );
        }
    }

    #[test]
    fn fractions_truncate_like_libcachesim() {
        let ws = WorkingSet {
            objects: 48_974,
            bytes: 999,
        };
        let cap = CacheSize::Fraction(0.01).resolve(CapacityUnit::Objects, ws);
        assert_eq!(cap, Capacity::Objects((48_974_f64 * 0.01) as u64));
        assert_eq!(cap, Capacity::Objects(489));
        let cap = CacheSize::Fraction(0.5).resolve(CapacityUnit::Bytes, ws);
        assert_eq!(cap, Capacity::Bytes(499));
    }
}
