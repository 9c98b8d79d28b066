//! FIFO: evict the unit that entered first; hits change nothing.
//!
//! A baseline of papers/000. Matches libCacheSim's `FIFO`. FIFO is LRU
//! without promotion on hit, so it shares [`Lru`]'s body.

use serde::{Deserialize, Serialize};

use crate::lru::Lru;
use crate::{Capacity, ConfigError};

/// FIFO has no knobs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FifoConfig {}

/// First-in, first-out replacement.
pub type Fifo = Lru;

/// An empty FIFO cache.
pub fn new(capacity: Capacity, _config: &FifoConfig) -> Result<Fifo, ConfigError> {
    Ok(Lru::with_promotion("fifo", capacity, false))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Policy;
    use crate::testing;

    #[test]
    fn hits_do_not_protect_a_unit() {
        let mut fifo = new(Capacity::Objects(3), &FifoConfig::default()).unwrap();
        let mut victims = vec![];
        let hits: Vec<bool> = testing::keys(&[1, 2, 3, 1, 4, 1])
            .iter()
            .map(|a| fifo.access(a, &mut victims))
            .collect();
        assert_eq!(hits, [false, false, false, true, false, false]);
        assert_eq!(
            victims,
            [1, 2],
            "1 entered first and goes first despite its hit"
        );
    }
}
