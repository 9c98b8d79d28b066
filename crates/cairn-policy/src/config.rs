//! [`PolicyConfig`]: every policy by name, with its configuration.

use serde::{Deserialize, Serialize};

use crate::{Capacity, Policy};

/// A policy configuration that cannot be built.
#[derive(Debug, thiserror::Error, PartialEq)]
#[non_exhaustive]
pub enum ConfigError {
    /// A parameter is outside the range the policy accepts.
    #[error("{policy}: `{parameter}` = {value} is out of range: {expected}")]
    OutOfRange {
        /// The policy's name.
        policy: &'static str,
        /// The parameter's name, as in the config file.
        parameter: &'static str,
        /// The value given, as text.
        value: String,
        /// What would be accepted.
        expected: &'static str,
    },
    /// The capacity is too small for the policy's structure (e.g. a segment
    /// would be empty).
    #[error("{policy}: capacity {capacity} is too small: {reason}")]
    CapacityTooSmall {
        /// The policy's name.
        policy: &'static str,
        /// The capacity given.
        capacity: u64,
        /// Why it does not suffice.
        reason: &'static str,
    },
}

/// Any policy, with its configuration; `policy = "name"` selects it in TOML.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "policy", rename_all = "lowercase", deny_unknown_fields)]
#[non_exhaustive]
pub enum PolicyConfig {
    /// First in, first out.
    Fifo(crate::fifo::FifoConfig),
    /// Least recently used.
    Lru(crate::lru::LruConfig),
    /// CLOCK / second chance (n-bit counter).
    Clock(crate::clock::ClockConfig),
    /// Least frequently used, least recently used among equals.
    Lfu(crate::lfu::LfuConfig),
    /// SIEVE.
    Sieve(crate::sieve::SieveConfig),
    /// Segmented LRU (n segments; `s4lru` is a preset with four).
    Slru(crate::slru::SlruConfig),
    /// 2Q (A1in FIFO, A1out ghosts, Am LRU).
    Twoq(crate::twoq::TwoQConfig),
    /// Adaptive Replacement Cache.
    Arc(crate::arc::ArcConfig),
}

impl PolicyConfig {
    /// Every policy name, in the order tables list them.
    pub const NAMES: &'static [&'static str] = &[
        "fifo", "lru", "clock", "lfu", "sieve", "slru", "s4lru", "twoq", "arc",
    ];

    /// The default configuration of the policy called `name`.
    pub fn default_for(name: &str) -> Option<Self> {
        Some(match name {
            "fifo" => Self::Fifo(crate::fifo::FifoConfig::default()),
            "lru" => Self::Lru(crate::lru::LruConfig::default()),
            "clock" => Self::Clock(crate::clock::ClockConfig::default()),
            "lfu" => Self::Lfu(crate::lfu::LfuConfig::default()),
            "sieve" => Self::Sieve(crate::sieve::SieveConfig::default()),
            "slru" => Self::Slru(crate::slru::SlruConfig::default()),
            "s4lru" => Self::Slru(crate::slru::SlruConfig::s4lru()),
            "twoq" => Self::Twoq(crate::twoq::TwoQConfig::default()),
            "arc" => Self::Arc(crate::arc::ArcConfig::default()),
            _ => return None,
        })
    }

    /// Builds the policy with the given capacity.
    pub fn build(&self, capacity: Capacity) -> Result<Box<dyn Policy>, ConfigError> {
        Ok(match self {
            Self::Fifo(c) => Box::new(crate::fifo::new(capacity, c)?),
            Self::Lru(c) => Box::new(crate::lru::Lru::new(capacity, c)?),
            Self::Clock(c) => Box::new(crate::clock::Clock::new(capacity, c)?),
            Self::Lfu(c) => Box::new(crate::lfu::Lfu::new(capacity, c)?),
            Self::Sieve(c) => Box::new(crate::sieve::Sieve::new(capacity, c)?),
            Self::Slru(c) => Box::new(crate::slru::Slru::new(capacity, c)?),
            Self::Twoq(c) => Box::new(crate::twoq::TwoQ::new(capacity, c)?),
            Self::Arc(c) => Box::new(crate::arc::Arc::new(capacity, c)?),
        })
    }
}
