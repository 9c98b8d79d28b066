//! Cache capacity: in bytes, or in objects (libCacheSim's `ignore_obj_size`).

use serde::{Deserialize, Serialize};

/// How big a cache is, and in which unit its occupancy is counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Capacity {
    /// Occupancy is the sum of the resident units' sizes, in bytes.
    Bytes(u64),
    /// Occupancy is the number of resident units, whatever their sizes.
    Objects(u64),
}

impl Capacity {
    /// The capacity as a number in its own unit.
    pub fn limit(self) -> u64 {
        match self {
            Capacity::Bytes(n) | Capacity::Objects(n) => n,
        }
    }

    /// What one unit of `size` bytes occupies, in this capacity's unit.
    #[inline]
    pub fn charge(self, size: u32) -> u64 {
        match self {
            Capacity::Bytes(_) => u64::from(size),
            Capacity::Objects(_) => 1,
        }
    }

    /// The same kind of capacity with a different limit.
    #[must_use]
    pub fn with_limit(self, limit: u64) -> Self {
        match self {
            Capacity::Bytes(_) => Capacity::Bytes(limit),
            Capacity::Objects(_) => Capacity::Objects(limit),
        }
    }

    /// Splits off `fraction` (0..=1) of the limit, rounded down, as a capacity of
    /// the same kind. Used by multi-segment policies (S3-FIFO's small queue,
    /// ONS's OLD region, ...).
    #[must_use]
    pub fn fraction(self, fraction: f64) -> Self {
        self.with_limit((self.limit() as f64 * fraction) as u64)
    }
}
