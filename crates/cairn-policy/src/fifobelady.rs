//! FIFO-Belady: FIFO whose eviction passes over units due back soon.
//!
//! libCacheSim's own oracle experiment (`cache/eviction/belady/FIFO_Belady.c`
//! in commit aa0fc40, no paper; Belady, IBM Systems Journal 5(2), 1966, for
//! the oracle): [`lru-belady`](crate::lrubelady) without the move on a hit.
//! A hit only records the unit's next access ([`Access::next`](crate::Access::next));
//! eviction looks at the oldest unit, moves it to the head if it is due back
//! within `capacity / miss ratio` requests, and evicts it otherwise. Where
//! every resident is due back (libCacheSim turns forever) the oldest goes
//! after one full turn. Without next-access times it is plain FIFO. No knobs.

use serde::{Deserialize, Serialize};

use crate::lrubelady::LruBelady;
use crate::{Capacity, ConfigError};

/// FIFO-Belady has no knobs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FifoBeladyConfig {}

/// FIFO that keeps units due back soon.
pub type FifoBelady = LruBelady;

/// An empty FIFO-Belady cache.
pub fn new(capacity: Capacity, _config: &FifoBeladyConfig) -> Result<FifoBelady, ConfigError> {
    Ok(LruBelady::with_promotion("fifo-belady", capacity, false))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lrubelady::tests::NaiveLruBelady;
    use crate::testing;
    use crate::{NEVER, Policy};
    use proptest::prelude::*;

    fn fifo_belady(capacity: Capacity) -> FifoBelady {
        new(capacity, &FifoBeladyConfig::default()).unwrap()
    }

    #[test]
    fn a_hit_does_not_move_the_unit() {
        // Capacity 2; keys 1, 2, 1, 3, 2 at times 0 to 4. When 3 misses (time
        // 3), 1 is the oldest despite its hit, and it never comes back: it
        // goes. 2 comes back at 4 (one request away, within 2 / (2/4) = 4).
        let mut cache = fifo_belady(Capacity::Objects(2));
        let mut victims = vec![];
        let hits: Vec<bool> = testing::keys(&[1, 2, 1, 3, 2])
            .iter()
            .map(|a| cache.access(a, &mut victims))
            .collect();
        assert_eq!(hits, [false, false, true, false, true]);
        assert_eq!(victims, [1]);
        assert_eq!(cache.name(), "fifo-belady");
    }

    #[test]
    fn without_next_access_times_it_is_fifo() {
        let keys = [1, 2, 3, 1, 4, 2, 5, 1, 3, 3, 6, 2];
        let mut fifo =
            crate::fifo::new(Capacity::Objects(3), &crate::fifo::FifoConfig::default()).unwrap();
        let mut belady = fifo_belady(Capacity::Objects(3));
        let (mut a, mut b) = (vec![], vec![]);
        for access in &mut testing::keys(&keys) {
            access.next = NEVER;
            assert_eq!(fifo.access(access, &mut a), belady.access(access, &mut b));
        }
        assert_eq!(a, b);
    }

    proptest! {
        #[test]
        fn matches_naive_model(trace in testing::trace_strategy(40, 400, 5), cap in 1u64..20, bytes: bool) {
            let capacity = if bytes { Capacity::Bytes(cap) } else { Capacity::Objects(cap) };
            let mut naive = NaiveLruBelady::new(capacity, false);
            testing::assert_matches_reference(&mut fifo_belady(capacity), &mut naive, &trace);
            testing::replay_checked(&mut fifo_belady(capacity), &trace);
        }
    }
}
