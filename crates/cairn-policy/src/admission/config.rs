//! [`AdmissionConfig`]: every admission filter by name, with its parameters.

use serde::{Deserialize, Serialize};

use super::adaptsize::{AdaptSize, AdaptSizeConfig};
use super::always::{Always, AlwaysConfig};
use super::bloom::{Bloom, BloomConfig};
use super::frequency::{Frequency, FrequencyConfig};
use super::nhit::{Nhit, NhitConfig};
use super::probabilistic::{Probabilistic, ProbabilisticConfig};
use super::size::{Size, SizeConfig};
use super::size_probabilistic::{SizeProbabilistic, SizeProbabilisticConfig};
use super::{Admission, Filtered};
use crate::{Capacity, ConfigError, Policy};

/// Any admission filter, with its configuration; `filter = "name"` selects it
/// in TOML. Out-of-range values are [`ConfigError::OutOfRange`] naming the
/// filter (in the error's `policy` field) and the parameter.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "filter", rename_all = "lowercase", deny_unknown_fields)]
#[non_exhaustive]
pub enum AdmissionConfig {
    /// Admit every miss (the default).
    Always(AlwaysConfig),
    /// Admit on the n-th miss within a bounded window (Open CAS's `nhit`).
    Nhit(NhitConfig),
    /// Admit at an estimated recent frequency (`TinyLFU`'s sketch).
    Frequency(FrequencyConfig),
    /// Admit on the second miss, remembered in a Bloom filter.
    Bloom(BloomConfig),
    /// Admit units below a size.
    Size(SizeConfig),
    /// Admit a miss with a fixed probability.
    Probabilistic(ProbabilisticConfig),
    /// Admit with probability `e^(-exponent × size)`.
    #[serde(rename = "size-probabilistic")]
    SizeProbabilistic(SizeProbabilisticConfig),
    /// Admit with probability `e^(-size / c)`, `c` tuned by a model (`AdaptSize`).
    #[serde(rename = "adaptsize")]
    AdaptSize(AdaptSizeConfig),
}

impl Default for AdmissionConfig {
    fn default() -> Self {
        Self::Always(AlwaysConfig::default())
    }
}

impl AdmissionConfig {
    /// Every filter name.
    pub const NAMES: &'static [&'static str] = &[
        "always",
        "nhit",
        "frequency",
        "bloom",
        "size",
        "probabilistic",
        "size-probabilistic",
        "adaptsize",
    ];

    /// The default configuration of the filter called `name`.
    pub fn default_for(name: &str) -> Option<Self> {
        Some(match name {
            "always" => Self::Always(AlwaysConfig::default()),
            "nhit" => Self::Nhit(NhitConfig::default()),
            "frequency" => Self::Frequency(FrequencyConfig::default()),
            "bloom" => Self::Bloom(BloomConfig::default()),
            "size" => Self::Size(SizeConfig::default()),
            "probabilistic" => Self::Probabilistic(ProbabilisticConfig::default()),
            "size-probabilistic" => Self::SizeProbabilistic(SizeProbabilisticConfig::default()),
            "adaptsize" => Self::AdaptSize(AdaptSizeConfig::default()),
            _ => return None,
        })
    }

    /// The filter's name.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Always(_) => "always",
            Self::Nhit(_) => "nhit",
            Self::Frequency(_) => "frequency",
            Self::Bloom(_) => "bloom",
            Self::Size(_) => "size",
            Self::Probabilistic(_) => "probabilistic",
            Self::SizeProbabilistic(_) => "size-probabilistic",
            Self::AdaptSize(_) => "adaptsize",
        }
    }

    /// Checks every value's range (what [`build`](Self::build) checks first),
    /// with no cache to size a table for.
    pub fn validate(&self) -> Result<(), ConfigError> {
        match self {
            Self::Always(_) => Ok(()),
            Self::Nhit(c) => c.validate(),
            Self::Frequency(c) => c.validate(),
            Self::Bloom(c) => c.validate(),
            Self::Size(c) => c.validate(),
            Self::Probabilistic(c) => c.validate(),
            Self::SizeProbabilistic(c) => c.validate(),
            Self::AdaptSize(c) => c.validate(),
        }
    }

    /// Builds the filter for a cache of `capacity` (which sizes its table).
    pub fn build(&self, capacity: Capacity) -> Result<Box<dyn Admission>, ConfigError> {
        Ok(match self {
            Self::Always(_) => Box::new(Always),
            Self::Nhit(c) => Box::new(Nhit::new(capacity, c)?),
            Self::Frequency(c) => Box::new(Frequency::new(capacity, c)?),
            Self::Bloom(c) => Box::new(Bloom::new(capacity, c)?),
            Self::Size(c) => Box::new(Size::new(c)?),
            Self::Probabilistic(c) => Box::new(Probabilistic::new(c)?),
            Self::SizeProbabilistic(c) => Box::new(SizeProbabilistic::new(c)?),
            Self::AdaptSize(c) => Box::new(AdaptSize::new(capacity, c)?),
        })
    }

    /// Puts `inner` behind this filter, sized for its capacity. `always`
    /// returns `inner` itself, so an unfiltered run is unchanged.
    pub fn wrap(&self, inner: Box<dyn Policy>) -> Result<Box<dyn Policy>, ConfigError> {
        if let Self::Always(_) = self {
            return Ok(inner);
        }
        let filter = self.build(inner.capacity())?;
        Ok(Box::new(Filtered::new(inner, filter)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_has_defaults_and_builds() {
        for name in AdmissionConfig::NAMES {
            let config = AdmissionConfig::default_for(name).unwrap();
            assert_eq!(config.name(), *name);
            assert_eq!(config.build(Capacity::Objects(100)).unwrap().name(), *name);
        }
        assert_eq!(AdmissionConfig::default_for("nosuch"), None);
        assert_eq!(
            AdmissionConfig::default(),
            AdmissionConfig::default_for("always").unwrap()
        );
    }

    #[test]
    fn toml_selects_by_filter_and_fills_defaults() {
        let parse = |text: &str| toml::from_str::<AdmissionConfig>(text);
        assert_eq!(
            parse("filter = \"nhit\"\nthreshold = 3").unwrap(),
            AdmissionConfig::Nhit(NhitConfig {
                threshold: 3,
                ..NhitConfig::default()
            })
        );
        assert_eq!(
            parse("filter = \"frequency\"").unwrap(),
            AdmissionConfig::Frequency(FrequencyConfig::default())
        );
        assert_eq!(
            parse("filter = \"always\"").unwrap(),
            AdmissionConfig::default()
        );
        for bad in [
            "filter = \"nhit\"\nbogus = 1",
            "filter = \"always\"\nthreshold = 2",
            "filter = \"nosuch\"",
            "threshold = 2",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
        // Round trip.
        let config = AdmissionConfig::default_for("frequency").unwrap();
        let text = toml::to_string(&config).unwrap();
        assert_eq!(parse(&text).unwrap(), config, "{text}");
    }

    #[test]
    fn bad_values_fail_at_build() {
        let config = AdmissionConfig::Nhit(NhitConfig {
            threshold: 0,
            ..NhitConfig::default()
        });
        let error = config.build(Capacity::Objects(10)).map(|_| ()).unwrap_err();
        assert_eq!(
            config.validate().map_err(|e| e.to_string()),
            Err(error.to_string())
        );
        assert_eq!(
            error.to_string(),
            "nhit: `threshold` = 0 is out of range: in 1..=1000"
        );
        let lru = crate::PolicyConfig::default_for("lru")
            .unwrap()
            .build(Capacity::Objects(10))
            .unwrap();
        assert!(config.wrap(lru).is_err());
    }
}
