//! `size`: admit only units smaller than a bound.
//!
//! Source: libCacheSim's `cache/admission/size.c` (a unit is admitted when
//! `obj_size < size_threshold`, strictly); the idea is older — a large object
//! evicts many small ones for one hit, so web caches refuse objects above a
//! size (Squid's `maximum_object_size`), and block caches let large
//! sequential I/O bypass them (bcache's `sequential_cutoff`). In object mode
//! every unit still has its request's size, so the bound applies there too.
//!
//! Stateless: nothing is counted, nothing allocated.

use serde::{Deserialize, Serialize};

use super::{Admission, Occupancy};
use crate::{Access, ConfigError};

/// `size` parameters.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SizeConfig {
    /// Admit a unit only if its size in bytes is below this, at least 1.
    /// Default 1,048,576 (1 MiB: no 4 KiB block is refused; a whole-object
    /// trace's large objects are). libCacheSim's default admits everything.
    pub below_bytes: u64,
}

impl Default for SizeConfig {
    fn default() -> Self {
        Self {
            below_bytes: 1 << 20,
        }
    }
}

impl SizeConfig {
    /// Checks every value's range.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.below_bytes == 0 {
            return Err(ConfigError::OutOfRange {
                policy: "size",
                parameter: "below_bytes",
                value: "0".into(),
                expected: "at least 1",
            });
        }
        Ok(())
    }
}

/// The `size` filter.
#[derive(Clone, Copy, Debug)]
pub struct Size {
    below_bytes: u64,
}

impl Size {
    /// A filter with `config`'s bound.
    pub fn new(config: &SizeConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        Ok(Self {
            below_bytes: config.below_bytes,
        })
    }
}

impl Admission for Size {
    fn name(&self) -> &'static str {
        "size"
    }

    fn admit(&mut self, access: &Access, _occupancy: Occupancy) -> bool {
        u64::from(access.size) < self.below_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admits_strictly_below_the_bound() {
        let mut filter = Size::new(&SizeConfig { below_bytes: 4096 }).unwrap();
        let occupancy = Occupancy { used: 0, limit: 10 };
        let at = |size| Access::read(1, size, 0);
        assert!(filter.admit(&at(4095), occupancy));
        assert!(
            !filter.admit(&at(4096), occupancy),
            "libCacheSim: obj_size < threshold"
        );
        assert!(Size::new(&SizeConfig { below_bytes: 0 }).is_err());
    }
}
