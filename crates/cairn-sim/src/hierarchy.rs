//! How the two levels of a two-level run share units ([`crate::levels`]).
//! Its own module because both the levels and their reports
//! ([`crate::metrics::Level2Report`]) name it.

use serde::{Deserialize, Serialize};

/// How the two levels share units.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Hierarchy {
    /// The engine's stack: a miss fills both levels, L2 sees every write, L1
    /// evictions are dropped.
    #[default]
    Inclusive,
    /// A unit lives in one level: L2 hits move up, L1 evictions move down.
    Exclusive,
}

impl Hierarchy {
    /// The mode's name.
    pub fn name(self) -> &'static str {
        match self {
            Hierarchy::Inclusive => "inclusive",
            Hierarchy::Exclusive => "exclusive",
        }
    }
}
