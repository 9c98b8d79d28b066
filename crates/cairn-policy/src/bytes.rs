//! Byte counts as people write them: `4096`, `4KiB`, `64MiB`, `1GB`.
//!
//! One parser for every crate that takes sizes from users (cache capacities
//! in the simulator, device and volume sizes in the engine's volume specs, CLI
//! flags), and [`Bytes`], a serde value that accepts either a bare integer or
//! such a string in a config file.

/// Binary (`KiB` = 1024) and decimal (`KB` = 1000) suffixes, longest first.
const SUFFIXES: &[(&str, u64)] = &[
    ("kib", 1 << 10),
    ("mib", 1 << 20),
    ("gib", 1 << 30),
    ("tib", 1 << 40),
    ("kb", 1_000),
    ("mb", 1_000_000),
    ("gb", 1_000_000_000),
    ("tb", 1_000_000_000_000),
    ("k", 1 << 10),
    ("m", 1 << 20),
    ("g", 1 << 30),
    ("t", 1 << 40),
    ("b", 1),
];

/// Why a byte count did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("size {text:?}: {reason}")]
pub struct ParseBytesError {
    /// What was given.
    pub text: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

/// Parses a byte count with an optional unit: `4096`, `4KiB`, `64MiB`, `1GB`
/// (`KiB`/`K` = 1024, `KB` = 1000; case-insensitive; spaces allowed before
/// the unit).
pub fn parse_bytes(text: &str) -> Result<u64, ParseBytesError> {
    let error = |reason| ParseBytesError {
        text: text.to_owned(),
        reason,
    };
    let lower = text.trim().to_ascii_lowercase();
    let (number, multiplier) = SUFFIXES
        .iter()
        .find_map(|&(suffix, m)| lower.strip_suffix(suffix).map(|n| (n.trim(), m)))
        .unwrap_or((lower.as_str(), 1));
    let value: u64 = number
        .parse()
        .map_err(|_| error("expected a whole number with an optional unit (4096, 64MiB, 1GB)"))?;
    value
        .checked_mul(multiplier)
        .ok_or_else(|| error("too large for 64 bits"))
}

/// Formats `bytes` in the largest binary unit that divides it (`1GiB`,
/// `1280MiB`, `4097`), so that [`parse_bytes`] reads it back exactly.
pub fn format_bytes(bytes: u64) -> String {
    for (unit, size) in [
        ("TiB", 1u64 << 40),
        ("GiB", 1 << 30),
        ("MiB", 1 << 20),
        ("KiB", 1 << 10),
    ] {
        if bytes >= size && bytes.is_multiple_of(size) {
            return format!("{}{unit}", bytes / size);
        }
    }
    bytes.to_string()
}

/// A byte count in a config file: an integer (`4096`) or a string with a unit
/// (`"64MiB"`). Serialises as the string [`format_bytes`] gives.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Bytes(pub u64);

impl Bytes {
    /// The count.
    pub fn get(self) -> u64 {
        self.0
    }
}

impl std::fmt::Display for Bytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&format_bytes(self.0))
    }
}

impl std::str::FromStr for Bytes {
    type Err = ParseBytesError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        parse_bytes(text).map(Bytes)
    }
}

impl serde::Serialize for Bytes {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&format_bytes(self.0))
    }
}

impl<'de> serde::Deserialize<'de> for Bytes {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = Bytes;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a byte count: an integer, or a string such as \"64MiB\" or \"1GB\"")
            }

            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Bytes, E> {
                Ok(Bytes(v))
            }

            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Bytes, E> {
                u64::try_from(v)
                    .map(Bytes)
                    .map_err(|_| E::custom(format!("a byte count cannot be negative ({v})")))
            }

            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Bytes, E> {
                parse_bytes(v).map(Bytes).map_err(E::custom)
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units_and_refuses_the_rest() {
        for (text, want) in [
            ("4096", 4096),
            ("4KiB", 4096),
            ("4k", 4096),
            ("64 MiB", 64 << 20),
            ("1GB", 1_000_000_000),
            ("1gib", 1 << 30),
            ("7b", 7),
        ] {
            assert_eq!(parse_bytes(text), Ok(want), "{text}");
        }
        for bad in ["", "abc", "-1", "1.5GiB", "12XB", "99999999999TiB"] {
            assert!(parse_bytes(bad).is_err(), "{bad:?} must be refused");
        }
    }

    #[test]
    fn format_round_trips() {
        for n in [0, 1, 4095, 4096, 1280 << 20, 1 << 30, 3 << 40, u64::MAX] {
            assert_eq!(parse_bytes(&format_bytes(n)), Ok(n), "{n}");
        }
        assert_eq!(format_bytes(1280 << 20), "1280MiB");
        assert_eq!(format_bytes(1 << 30), "1GiB");
    }
}
