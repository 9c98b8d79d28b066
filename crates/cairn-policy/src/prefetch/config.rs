//! [`PrefetchConfig`]: every prefetcher by name, with its parameters.

use serde::{Deserialize, Serialize};

use super::Prefetcher;
use super::mithril::{Mithril, MithrilConfig};
use super::obl::{Obl, OblConfig};
use super::pg::{Pg, PgConfig};
use crate::{Capacity, ConfigError};

/// Any prefetcher, with its configuration; `prefetcher = "name"` selects it
/// in TOML. Out-of-range values are [`ConfigError::OutOfRange`] naming the
/// prefetcher and the parameter.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "prefetcher", rename_all = "lowercase", deny_unknown_fields)]
#[non_exhaustive]
pub enum PrefetchConfig {
    /// One-block lookahead after `k` sequential accesses.
    Obl(OblConfig),
    /// The probability graph.
    Pg(PgConfig),
    /// Mined associations between units missed together.
    Mithril(MithrilConfig),
}

impl PrefetchConfig {
    /// Every prefetcher name.
    pub const NAMES: &'static [&'static str] = &["obl", "pg", "mithril"];

    /// The default configuration of the prefetcher called `name`.
    pub fn default_for(name: &str) -> Option<Self> {
        Some(match name {
            "obl" => Self::Obl(OblConfig::default()),
            "pg" => Self::Pg(PgConfig::default()),
            "mithril" => Self::Mithril(MithrilConfig::default()),
            _ => return None,
        })
    }

    /// The prefetcher's name.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Obl(_) => "obl",
            Self::Pg(_) => "pg",
            Self::Mithril(_) => "mithril",
        }
    }

    /// Checks every value's range (what [`build`](Self::build) checks first).
    pub fn validate(&self) -> Result<(), ConfigError> {
        match self {
            Self::Obl(c) => c.validate(),
            Self::Pg(c) => c.validate(),
            Self::Mithril(c) => c.validate(),
        }
    }

    /// Builds the prefetcher for a cache of `capacity` (which bounds PG's
    /// graph and Mithril's tables).
    pub fn build(&self, capacity: Capacity) -> Result<Box<dyn Prefetcher>, ConfigError> {
        Ok(match self {
            Self::Obl(c) => Box::new(Obl::new(c)?),
            Self::Pg(c) => Box::new(Pg::new(capacity, c)?),
            Self::Mithril(c) => Box::new(Mithril::new(capacity, c)?),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_has_defaults_and_builds() {
        for name in PrefetchConfig::NAMES {
            let config = PrefetchConfig::default_for(name).unwrap();
            assert_eq!(config.name(), *name);
            assert_eq!(config.build(Capacity::Objects(100)).unwrap().name(), *name);
        }
        assert_eq!(PrefetchConfig::default_for("readahead"), None);
    }

    #[test]
    fn toml_selects_by_prefetcher_and_fills_defaults() {
        let parse = |text: &str| toml::from_str::<PrefetchConfig>(text);
        assert_eq!(
            parse("prefetcher = \"obl\"\nsequential_confidence_k = 2").unwrap(),
            PrefetchConfig::Obl(OblConfig {
                sequential_confidence_k: 2
            })
        );
        assert_eq!(
            parse("prefetcher = \"pg\"").unwrap(),
            PrefetchConfig::Pg(PgConfig::default())
        );
        for bad in [
            "prefetcher = \"obl\"\nbogus = 1",
            "prefetcher = \"nosuch\"",
            "sequential_confidence_k = 2",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
