//! Spec values written as a name (a preset with its defaults) or as a table
//! of parameters: a cache's policy and its prefetcher. Used by the device
//! tables (`spec.rs`) and the file exports (`files_spec.rs`).

use serde::{Deserialize, Serialize};

/// A cache's policy: written as a name (the policy with its defaults) or a
/// table of its parameters; written back as the name when it has its
/// defaults.
#[derive(Clone, Debug, PartialEq)]
pub struct CachePolicy(pub cairn_policy::PolicyConfig);

impl Serialize for CachePolicy {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let preset = cairn_policy::PolicyConfig::NAMES
            .iter()
            .find(|name| cairn_policy::PolicyConfig::default_for(name).as_ref() == Some(&self.0));
        match preset {
            Some(name) => serializer.serialize_str(name),
            None => self.0.serialize(serializer),
        }
    }
}

impl<'de> Deserialize<'de> for CachePolicy {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        name_or_table(
            deserializer,
            "a policy name or a table with `policy = \"name\"` and its parameters",
            |name| {
                cairn_policy::PolicyConfig::default_for(name)
                    .map(CachePolicy)
                    .ok_or_else(|| {
                        format!(
                            "unknown policy `{name}` (known: {})",
                            cairn_policy::PolicyConfig::NAMES.join(", ")
                        )
                    })
            },
            CachePolicy,
        )
    }
}

/// Deserializes a config written as a name (`named` gives its value, or the
/// error) or as a table of type `U` (`table` wraps it).
pub(super) fn name_or_table<'de, D, U, T>(
    deserializer: D,
    expecting: &'static str,
    named: fn(&str) -> Result<T, String>,
    table: fn(U) -> T,
) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    U: Deserialize<'de>,
{
    struct Visitor<U, T> {
        expecting: &'static str,
        named: fn(&str) -> Result<T, String>,
        table: fn(U) -> T,
    }
    impl<'de, U: Deserialize<'de>, T> serde::de::Visitor<'de> for Visitor<U, T> {
        type Value = T;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str(self.expecting)
        }
        fn visit_str<E: serde::de::Error>(self, name: &str) -> Result<T, E> {
            (self.named)(name).map_err(E::custom)
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
            U::deserialize(serde::de::value::MapAccessDeserializer::new(map)).map(self.table)
        }
    }
    deserializer.deserialize_any(Visitor {
        expecting,
        named,
        table,
    })
}

/// A cache's prefetching: `"readahead"` (`None`: the stream readahead sized
/// by `readahead`), a prefetcher's name (`"obl"`, `"pg"`, `"mithril"`, with its
/// defaults)
/// or a table of its parameters (`{ prefetcher = "obl",
/// sequential_confidence_k = 2 }`); written back as a name when it has its
/// defaults.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CachePrefetch(pub Option<cairn_policy::PrefetchConfig>);

impl Serialize for CachePrefetch {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match &self.0 {
            None => serializer.serialize_str("readahead"),
            Some(config)
                if cairn_policy::PrefetchConfig::default_for(config.name()).as_ref()
                    == Some(config) =>
            {
                serializer.serialize_str(config.name())
            }
            Some(config) => config.serialize(serializer),
        }
    }
}

impl<'de> Deserialize<'de> for CachePrefetch {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        name_or_table(
            deserializer,
            "`readahead`, a prefetcher name or a table with `prefetcher = \"name\"` and its \
             parameters",
            |name| {
                if name == "readahead" {
                    return Ok(CachePrefetch(None));
                }
                cairn_policy::PrefetchConfig::default_for(name)
                    .map(|config| CachePrefetch(Some(config)))
                    .ok_or_else(|| {
                        format!(
                            "unknown prefetcher `{name}` (known: readahead, {})",
                            cairn_policy::PrefetchConfig::NAMES.join(", ")
                        )
                    })
            },
            |config| CachePrefetch(Some(config)),
        )
    }
}
