//! S3-LRU: S3-FIFO's small FIFO and ghost in front of an LRU main cache; a
//! unit hit in the small FIFO moves to main at once.
//!
//! Source: libCacheSim's own (`cache/eviction/other/S3LRU.c`, `s3lru` in
//! `cachesim` at commit aa0fc40; not in the `libcachesim` 0.3.5 Python
//! release): the S3-FIFO structure (Yang et al., "FIFO queues are all you
//! need for cache eviction", SOSP 2023) with an LRU where S3-FIFO has its
//! FIFO main, libCacheSim's probe of how much the main queue's policy
//! matters. No paper of its own. This module matches libCacheSim's file
//! step for step, so that miss counts agree exactly:
//!
//! - Sizes: small = ⌊capacity × `small_size_ratio`⌋ (0.10), main = capacity −
//!   small, ghost = ⌊capacity × `ghost_size_ratio`⌋ (0.90), keys only,
//!   charged like resident units.
//! - A hit in small counts; with `promote_on_hit` (the default) a unit whose
//!   count reaches `move_to_main_threshold` (1) moves to main's head right
//!   away. A hit in main moves the unit to main's head.
//! - A miss whose key is in the ghost removes it from the ghost (in
//!   [`lookup`](Policy::lookup), even if the unit is then not admitted) and
//!   admits the unit to main's head; any other miss enters small's head. A
//!   unit larger than small is refused.
//! - While the new unit does not fit: if main holds more than its share, or
//!   small is empty, main's least recent unit is evicted; otherwise small's
//!   tail is (into the ghost), unless `promote_on_hit` is off and it was hit
//!   `move_to_main_threshold` times, when it moves to main's head and the
//!   next tail is looked at.
//!
//! libCacheSim can also make main a CLOCK (`main-cache-type`); only its
//! default, LRU, is here.
//!
//! [`remove`](Policy::remove) drops a resident unit without recording it in
//! the ghost and leaves ghost keys alone (libCacheSim's `S3LRU_remove` also
//! drops a ghost key and calls that a removal; we report residency).

use crate::error::Knobs;
use serde::{Deserialize, Serialize};

use crate::list::Index;
use crate::queues::{Entry, Queue, Queues};
use crate::{Access, Ahead, Capacity, ConfigError, Policy};

/// S3-LRU parameters; the defaults are libCacheSim's.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct S3LruConfig {
    /// Share of the capacity given to the small FIFO, in `(0, 1)`. Default
    /// 0.10 (libCacheSim `LRU-size-ratio`).
    pub small_size_ratio: f64,
    /// Ghost size as a share of the capacity, in `[0, 1]`; 0 disables the
    /// ghost. Default 0.90 (libCacheSim `ghost-size-ratio`).
    pub ghost_size_ratio: f64,
    /// Hits a unit needs in the small FIFO to move to main, 1 to 65,535.
    /// Default 1 (libCacheSim `move-to-main-threshold`).
    pub move_to_main_threshold: u32,
    /// Move a unit to main on the hit that reaches the threshold (true), or
    /// only when it reaches small's tail (false, as S3-FIFO). Default true
    /// (libCacheSim `promote-on-hit`).
    pub promote_on_hit: bool,
}

impl Default for S3LruConfig {
    fn default() -> Self {
        Self {
            small_size_ratio: 0.10,
            ghost_size_ratio: 0.90,
            move_to_main_threshold: 1,
            promote_on_hit: true,
        }
    }
}

impl S3LruConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        Knobs("s3lru").s3fifo_front(
            self.small_size_ratio,
            self.ghost_size_ratio,
            self.move_to_main_threshold,
        )
    }
}

/// S3-LRU replacement.
#[derive(Debug)]
pub struct S3Lru {
    capacity: Capacity,
    /// The queues, their budgets, the index and the nodes.
    q: Queues<()>,
    move_to_main_threshold: u16,
    promote_on_hit: bool,
    /// The key whose last `lookup` missed but found (and removed) it in the ghost.
    ghost_hit: Option<u64>,
}

impl S3Lru {
    /// An empty S3-LRU cache.
    pub fn new(capacity: Capacity, config: &S3LruConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        // S3LRU_init's arithmetic: truncating casts of size × ratio.
        let small_limit = (capacity.limit() as f64 * config.small_size_ratio) as u64;
        let ghost_limit = (capacity.limit() as f64 * config.ghost_size_ratio) as u64;
        if small_limit == 0 {
            return Err(ConfigError::CapacityTooSmall {
                policy: "s3lru",
                capacity: capacity.limit(),
                reason: "the small FIFO would be empty and admit nothing \
                         (raise the capacity or small_size_ratio)",
            });
        }
        Ok(Self {
            capacity,
            q: Queues::new(capacity, small_limit, ghost_limit),
            move_to_main_threshold: config.move_to_main_threshold as u16, // validated
            promote_on_hit: config.promote_on_hit,
            ghost_hit: None,
        })
    }

    /// Moves the (already unlinked) small node `index` to main's head.
    fn move_to_main(&mut self, index: Index) {
        let entry = self.q.slab.get_mut(index);
        let charge = u64::from(entry.charge);
        entry.queue = Queue::Main;
        entry.freq = 0;
        self.q.small_used -= charge;
        self.q.main_used += charge;
        self.q.slab.push_front(&mut self.q.main, index);
    }

    /// Evicts small's tail into the ghost (moving hit units to main when
    /// they are not promoted on the hit).
    fn evict_small(&mut self, victims: &mut Vec<u64>) {
        while let Some(index) = self.q.slab.pop_back(&mut self.q.small) {
            let entry = *self.q.slab.get(index);
            if !self.promote_on_hit && entry.freq >= self.move_to_main_threshold {
                self.move_to_main(index);
            } else {
                self.q.small_used -= u64::from(entry.charge);
                victims.push(entry.key);
                self.q.insert_ghost(index);
                return;
            }
        }
    }

    /// Evicts main's least recently used unit.
    fn evict_main(&mut self, victims: &mut Vec<u64>) {
        if let Some(index) = self.q.slab.pop_back(&mut self.q.main) {
            let entry = *self.q.slab.get(index);
            self.q.main_used -= u64::from(entry.charge);
            self.q.map.remove(entry.key, &self.q.slab);
            self.q.slab.remove(index);
            victims.push(entry.key);
        }
    }
}

impl Policy for S3Lru {
    fn name(&self) -> &'static str {
        "s3lru"
    }

    fn prefetch(&self, key: u64, ahead: Ahead) {
        self.q.map.prefetch_stage(key, &self.q.slab, ahead, true);
    }

    fn lookup(&mut self, access: &Access) -> bool {
        self.ghost_hit = None;
        let Some(index) = self.q.map.get(access.key, &self.q.slab) else {
            return false;
        };
        let entry = self.q.slab.get_mut(index);
        match entry.queue {
            Queue::Ghost => {
                self.q.remove_ghost(index);
                self.ghost_hit = Some(access.key);
                return false;
            }
            Queue::Small => {
                entry.freq = entry.freq.saturating_add(1);
                if self.promote_on_hit && entry.freq >= self.move_to_main_threshold {
                    self.q.slab.unlink(&mut self.q.small, index);
                    self.move_to_main(index);
                }
            }
            Queue::Main => self.q.slab.move_to_front(&mut self.q.main, index),
        }
        true
    }

    fn admit(&mut self, access: &Access, victims: &mut Vec<u64>) -> bool {
        let charge = self.capacity.charge(access.size);
        let mut to_main = self.ghost_hit.take() == Some(access.key);
        if let Some(index) = self.q.map.get(access.key, &self.q.slab) {
            // `admit` without a `lookup` first: still honour the ghost.
            debug_assert_eq!(
                self.q.slab.get(index).queue,
                Queue::Ghost,
                "admit of a resident key"
            );
            if self.q.slab.get(index).queue != Queue::Ghost {
                return true;
            }
            self.q.remove_ghost(index);
            to_main = true;
        }
        if charge > self.q.small_limit {
            return false; // S3LRU_can_insert
        }
        while self.q.small_used + self.q.main_used + charge > self.capacity.limit() {
            if self.q.main_used > self.q.main_limit || self.q.small.is_empty() {
                self.evict_main(victims);
            } else {
                self.evict_small(victims);
            }
        }
        let (queue, list) = if to_main {
            self.q.main_used += charge;
            (Queue::Main, &mut self.q.main)
        } else {
            self.q.small_used += charge;
            (Queue::Small, &mut self.q.small)
        };
        let index = self.q.slab.insert(Entry {
            key: access.key,
            charge: charge as u32, // a size or 1
            freq: 0,
            queue,
            stamp: (),
        });
        self.q.slab.push_front(list, index);
        self.q.map.insert(access.key, index, &self.q.slab);
        true
    }

    fn remove(&mut self, key: u64) -> bool {
        self.q.remove(key)
    }

    fn contains(&self, key: u64) -> bool {
        self.q.contains(key)
    }

    fn len(&self) -> usize {
        self.q.len()
    }

    fn used(&self) -> u64 {
        self.q.used()
    }

    fn capacity(&self) -> Capacity {
        self.capacity
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{self, Reference};
    use proptest::prelude::*;
    use std::collections::VecDeque;

    /// Naive S3-LRU: deques of `(key, charge, hits)`, newest at the front.
    struct NaiveS3Lru {
        limit: u64,
        small_limit: u64,
        main_limit: u64,
        ghost_limit: u64,
        promote_on_hit: bool,
        small: VecDeque<(u64, u64, u32)>,
        main: VecDeque<(u64, u64)>,
        ghost: VecDeque<(u64, u64)>,
        capacity: Capacity,
    }

    impl NaiveS3Lru {
        fn new(capacity: Capacity, promote_on_hit: bool) -> Self {
            let limit = capacity.limit();
            let small_limit = (limit as f64 * 0.1) as u64;
            Self {
                limit,
                small_limit,
                main_limit: limit - small_limit,
                ghost_limit: (limit as f64 * 0.9) as u64,
                promote_on_hit,
                small: VecDeque::new(),
                main: VecDeque::new(),
                ghost: VecDeque::new(),
                capacity,
            }
        }
    }

    impl Reference for NaiveS3Lru {
        fn access(&mut self, access: &Access) -> (bool, Vec<u64>) {
            let key = access.key;
            if let Some(at) = self.small.iter().position(|e| e.0 == key) {
                self.small[at].2 += 1;
                if self.promote_on_hit {
                    let e = self.small.remove(at).unwrap();
                    self.main.push_front((e.0, e.1));
                }
                return (true, vec![]);
            }
            if let Some(at) = self.main.iter().position(|e| e.0 == key) {
                let e = self.main.remove(at).unwrap();
                self.main.push_front(e);
                return (true, vec![]);
            }
            let ghost_hit = self.ghost.iter().position(|g| g.0 == key);
            if let Some(at) = ghost_hit {
                self.ghost.remove(at);
            }
            let charge = self.capacity.charge(access.size);
            let mut victims = vec![];
            if charge > self.small_limit {
                return (false, victims);
            }
            let sum = |q: &VecDeque<(u64, u64)>| q.iter().map(|e| e.1).sum::<u64>();
            loop {
                let small: u64 = self.small.iter().map(|e| e.1).sum();
                if small + sum(&self.main) + charge <= self.limit {
                    break;
                }
                if sum(&self.main) > self.main_limit || self.small.is_empty() {
                    victims.push(self.main.pop_back().unwrap().0);
                    continue;
                }
                while let Some(e) = self.small.pop_back() {
                    if !self.promote_on_hit && e.2 >= 1 {
                        self.main.push_front((e.0, e.1));
                    } else {
                        victims.push(e.0);
                        if e.1 <= self.ghost_limit {
                            while sum(&self.ghost) + e.1 > self.ghost_limit {
                                self.ghost.pop_back();
                            }
                            self.ghost.push_front((e.0, e.1));
                        }
                        break;
                    }
                }
            }
            if ghost_hit.is_some() {
                self.main.push_front((key, charge));
            } else {
                self.small.push_front((key, charge, 0));
            }
            (false, victims)
        }
    }

    fn s3lru(capacity: Capacity) -> S3Lru {
        S3Lru::new(capacity, &S3LruConfig::default()).unwrap()
    }

    fn queue_of(cache: &S3Lru, key: u64) -> Queue {
        cache
            .q
            .slab
            .get(cache.q.map.get(key, &cache.q.slab).unwrap())
            .queue
    }

    #[test]
    fn a_hit_in_small_moves_to_main_at_once_and_main_is_lru() {
        // 10 objects: small 1, main 9, ghost 9. Until the cache is full,
        // small holds everything.
        let mut cache = s3lru(Capacity::Objects(10));
        let mut victims = vec![];
        for access in &testing::keys(&(1..=10).collect::<Vec<_>>()) {
            cache.access(access, &mut victims);
        }
        assert_eq!((cache.q.small.len(), cache.q.main.len()), (10, 0));
        // A hit in small moves the unit to main's head at once.
        for access in &testing::keys(&(1..=9).collect::<Vec<_>>()) {
            assert!(cache.access(access, &mut victims));
        }
        assert_eq!((cache.q.small.len(), cache.q.main.len()), (1, 9));
        // A hit in main moves 1 to main's head: 2 is now least recent.
        assert!(cache.access(&testing::keys(&[1])[0], &mut victims));
        // 11: main holds exactly its share, so small's tail goes (to the ghost).
        cache.access(&testing::keys(&[11])[0], &mut victims);
        assert_eq!(victims, [10]);
        // 10 is a ghost hit: to main (now 10 > 9), small's tail 11 makes room.
        victims.clear();
        assert!(!cache.access(&testing::keys(&[10])[0], &mut victims));
        assert_eq!(victims, [11]);
        assert_eq!(queue_of(&cache, 10), Queue::Main);
        // 12: main is over its share, so main's least recent goes: 2, not
        // 1 (a FIFO main would evict 1).
        victims.clear();
        cache.access(&testing::keys(&[12])[0], &mut victims);
        assert_eq!(victims, [2]);
        assert!(cache.contains(1));
    }

    #[test]
    fn bad_knobs_and_tiny_caches_are_refused() {
        for config in [
            S3LruConfig {
                small_size_ratio: 1.0,
                ..S3LruConfig::default()
            },
            S3LruConfig {
                ghost_size_ratio: -0.1,
                ..S3LruConfig::default()
            },
            S3LruConfig {
                move_to_main_threshold: 0,
                ..S3LruConfig::default()
            },
        ] {
            assert!(
                matches!(
                    S3Lru::new(Capacity::Objects(100), &config),
                    Err(ConfigError::OutOfRange { .. })
                ),
                "{config:?}"
            );
        }
        assert!(matches!(
            S3Lru::new(Capacity::Objects(9), &S3LruConfig::default()),
            Err(ConfigError::CapacityTooSmall { capacity: 9, .. })
        ));
        assert!(S3Lru::new(Capacity::Objects(10), &S3LruConfig::default()).is_ok());
    }

    proptest! {
        #[test]
        fn matches_naive_model(
            trace in testing::trace_strategy(60, 500, 5),
            cap in 10u64..60,
            bytes: bool,
            promote_on_hit: bool,
        ) {
            let capacity = if bytes { Capacity::Bytes(cap) } else { Capacity::Objects(cap) };
            let config = S3LruConfig { promote_on_hit, ..S3LruConfig::default() };
            let mut naive = NaiveS3Lru::new(capacity, promote_on_hit);
            let mut cache = S3Lru::new(capacity, &config).unwrap();
            testing::assert_matches_reference(&mut cache, &mut naive, &trace);
            testing::replay_checked(&mut S3Lru::new(capacity, &config).unwrap(), &trace);
        }
    }
}
