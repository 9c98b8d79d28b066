//! S3-FIFO: a small FIFO that filters one-hit wonders, a main FIFO with
//! reinsertion (a 2-bit CLOCK), and a ghost FIFO of recently filtered keys.
//!
//! Source: Juncheng Yang et al., "FIFO queues are all you need for cache
//! eviction", SOSP 2023. This module matches libCacheSim's
//! `cache/eviction/S3FIFO.c` step for step, so that miss ratios agree
//! exactly, in both of its versions:
//!
//! - `s3fifo` (the default): the current one, in the `libcachesim` 0.3.5
//!   Python release (libCacheSim commit 687f14c). Until the cache first has
//!   to evict, a unit that finds the small FIFO full goes to main instead
//!   (`overflow_to_main_while_filling`): units that arrive while the cache
//!   fills are kept a little longer, and those after it is full leave the
//!   small FIFO sooner.
//! - `s3fifo-v0`: the paper's and libCacheSim commit aa0fc40's, where every
//!   unit not in the ghost goes to the small FIFO (libCacheSim now keeps it
//!   as `S3FIFOv0.c`). Kept because the published results before December
//!   2024 were made with it.
//!
//! Both versions:
//!
//! - Sizes: small = ⌊capacity × `small_size_ratio`⌋ (0.10), main = capacity −
//!   small, ghost = ⌊capacity × `ghost_size_ratio`⌋ (0.90). The ghost holds
//!   keys only, charged like resident units (1 per key in object mode).
//! - A hit increments the unit's frequency (in either queue); it never moves.
//! - A miss whose key is in the ghost removes it from the ghost (this happens
//!   in [`lookup`](Policy::lookup), even if the unit is then not admitted)
//!   and admits the unit to the head of main; any other miss admits to the
//!   head of small, with frequency 0.
//! - While the new unit does not fit: if main holds more than its share, or
//!   small is empty, evict from main, else from small.
//!   - Small: take the tail; with frequency ≥ `move_to_main_threshold` (2,
//!     libCacheSim's default; the paper uses 1) move it to main's head with
//!     frequency 0 and look again; otherwise evict it and record its key in
//!     the ghost (evicting the ghost's oldest keys to make room).
//!   - Main: take the tail; with frequency ≥ 1 reinsert it at the head with
//!     frequency min(frequency, `frequency_cap`) − 1 (`frequency_cap` = 3:
//!     a 2-bit counter) and look again; otherwise evict it.
//!
//! Checked on `cloudPhysicsIO` by `crates/cairn-sim/tests/libcachesim_agreement.rs`:
//! the same miss counts as libCacheSim at 1, 5, 10 and 20 % of the distinct
//! objects and of the bytes, `s3fifo` against 0.3.5 (object mode 94569,
//! 92574, 86006, 75875) and `s3fifo-v0` against aa0fc40 (94559, 91396, 85691,
//! 77208).
//!
//! libCacheSim quirks kept on purpose (they change results only for units
//! as large as the small queue, or caches under 20 objects):
//! - a unit larger than the small queue is refused before any eviction;
//! - a unit *exactly* as large as the small queue (and not a ghost hit) is
//!   refused *after* the evictions made for it (`obj_size >=
//!   fifo->cache_size` in `S3FIFO_insert`). In object mode this means a cache
//!   of fewer than 20 objects (small queue of 0 or 1) would admit nothing, so
//!   in object mode such a capacity is refused with
//!   [`ConfigError::CapacityTooSmall`] (libCacheSim builds it silently).
//!
//! [`remove`](Policy::remove) drops a resident unit without recording it in
//! the ghost, and leaves a ghost key alone (libCacheSim's `S3FIFO_remove`
//! would also drop a ghost key and call that a removal; we report residency).

use crate::error::Knobs;
use serde::{Deserialize, Serialize};

use crate::queues::{Entry, Queue, Queues};
use crate::{Access, Ahead, Capacity, ConfigError, Policy};

/// S3-FIFO parameters; the defaults are libCacheSim's.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct S3FifoConfig {
    /// Share of the capacity given to the small (probationary) FIFO, in
    /// `(0, 1)`. Default 0.10 (libCacheSim `fifo-size-ratio`, the paper's 10%).
    pub small_size_ratio: f64,
    /// Ghost FIFO size as a share of the capacity, in `[0, 1]`; 0 disables
    /// the ghost. Default 0.90 (libCacheSim `ghost-size-ratio`).
    pub ghost_size_ratio: f64,
    /// Hits a unit needs while in the small FIFO to move to main instead of
    /// being evicted, 1 to 65,535. Default 2 (libCacheSim
    /// `move-to-main-threshold`).
    pub move_to_main_threshold: u32,
    /// Cap of the main FIFO's frequency counter at reinsertion, 1 to 65,535.
    /// Default 3 (a 2-bit CLOCK counter, as in libCacheSim).
    pub frequency_cap: u32,
    /// Until the cache first evicts, admit a unit that finds the small FIFO
    /// full to main. Default true (libCacheSim's current `S3FIFO`); false is
    /// the paper's S3-FIFO (`s3fifo-v0`, libCacheSim's `S3FIFOv0`).
    pub overflow_to_main_while_filling: bool,
}

impl Default for S3FifoConfig {
    fn default() -> Self {
        Self {
            small_size_ratio: 0.10,
            ghost_size_ratio: 0.90,
            move_to_main_threshold: 2,
            frequency_cap: 3,
            overflow_to_main_while_filling: true,
        }
    }
}

impl S3FifoConfig {
    /// The paper's S3-FIFO as libCacheSim had it until December 2024
    /// (commit aa0fc40; `S3FIFOv0.c` since): every new unit enters the small FIFO.
    pub fn v0() -> Self {
        Self {
            overflow_to_main_while_filling: false,
            ..Self::default()
        }
    }
}

impl S3FifoConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        let knobs = Knobs("s3fifo");
        knobs.s3fifo_front(
            self.small_size_ratio,
            self.ghost_size_ratio,
            self.move_to_main_threshold,
        )?;
        knobs.one_to(
            "frequency_cap",
            self.frequency_cap,
            u32::from(u16::MAX),
            "1 to 65535",
        )
    }
}

/// S3-FIFO replacement.
#[derive(Debug)]
pub struct S3Fifo {
    capacity: Capacity,
    /// The queues, their budgets, the index and the nodes.
    q: Queues<()>,
    move_to_main_threshold: u16,
    frequency_cap: u16,
    /// The key whose last `lookup` missed but found (and removed) it in the ghost.
    ghost_hit: Option<u64>,
    /// See [`S3FifoConfig::overflow_to_main_while_filling`].
    overflow_to_main_while_filling: bool,
    /// Whether the cache has had to evict yet (`has_evicted` in libCacheSim).
    has_evicted: bool,
    /// "s3fifo" or "s3fifo-v0".
    name: &'static str,
}

impl S3Fifo {
    /// An empty S3-FIFO cache.
    pub fn new(capacity: Capacity, config: &S3FifoConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        // Same arithmetic as S3FIFO_init: truncating casts of size × ratio.
        let small_limit = (capacity.limit() as f64 * config.small_size_ratio) as u64;
        let ghost_limit = (capacity.limit() as f64 * config.ghost_size_ratio) as u64;
        if matches!(capacity, Capacity::Objects(_)) && small_limit < 2 {
            // libCacheSim builds such a cache and it silently admits nothing.
            return Err(ConfigError::CapacityTooSmall {
                policy: "s3fifo",
                capacity: capacity.limit(),
                reason: "the small FIFO would hold fewer than 2 objects and admit nothing \
                         (raise the capacity or small_size_ratio)",
            });
        }
        Ok(Self {
            capacity,
            q: Queues::new(capacity, small_limit, ghost_limit),
            move_to_main_threshold: config.move_to_main_threshold as u16, // validated
            frequency_cap: config.frequency_cap as u16,
            ghost_hit: None,
            overflow_to_main_while_filling: config.overflow_to_main_while_filling,
            has_evicted: false,
            name: if config.overflow_to_main_while_filling {
                "s3fifo"
            } else {
                "s3fifo-v0"
            },
        })
    }

    /// Evicts one unit from the small FIFO, moving frequently hit units to main.
    fn evict_small(&mut self, victims: &mut Vec<u64>) {
        while let Some(index) = self.q.slab.pop_back(&mut self.q.small) {
            let entry = self.q.slab.get_mut(index);
            let charge = u64::from(entry.charge);
            self.q.small_used -= charge;
            if entry.freq >= self.move_to_main_threshold {
                entry.freq = 0;
                entry.queue = Queue::Main;
                self.q.main_used += charge;
                self.q.slab.push_front(&mut self.q.main, index);
            } else {
                victims.push(entry.key);
                self.q.insert_ghost(index);
                return;
            }
        }
    }

    /// Evicts one unit from the main FIFO, reinserting recently hit units.
    fn evict_main(&mut self, victims: &mut Vec<u64>) {
        while let Some(index) = self.q.slab.pop_back(&mut self.q.main) {
            let entry = self.q.slab.get_mut(index);
            if entry.freq >= 1 {
                entry.freq = entry.freq.min(self.frequency_cap) - 1;
                self.q.slab.push_front(&mut self.q.main, index);
            } else {
                self.q.main_used -= u64::from(entry.charge);
                let key = entry.key;
                self.q.map.remove(key, &self.q.slab);
                self.q.slab.remove(index);
                victims.push(key);
                return;
            }
        }
    }
}

impl Policy for S3Fifo {
    fn name(&self) -> &'static str {
        self.name
    }

    fn prefetch(&self, key: u64, ahead: Ahead) {
        self.q.map.prefetch_stage(key, &self.q.slab, ahead, false);
    }

    fn lookup(&mut self, access: &Access) -> bool {
        self.ghost_hit = None;
        let Some(index) = self.q.map.get(access.key, &self.q.slab) else {
            return false;
        };
        let entry = self.q.slab.get_mut(index);
        if entry.queue == Queue::Ghost {
            self.q.remove_ghost(index);
            self.ghost_hit = Some(access.key);
            return false;
        }
        entry.freq = entry.freq.saturating_add(1);
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
            return false; // S3FIFO_can_insert
        }
        while self.q.small_used + self.q.main_used + charge > self.capacity.limit() {
            self.has_evicted = true;
            if self.q.main_used > self.q.main_limit || self.q.small.is_empty() {
                self.evict_main(victims);
            } else {
                self.evict_small(victims);
            }
        }
        if !to_main && charge >= self.q.small_limit {
            return false; // libCacheSim quirk, see the module docs
        }
        // S3FIFO_insert: before the first eviction, a full small FIFO
        // overflows into main.
        let to_main = to_main
            || (self.overflow_to_main_while_filling
                && !self.has_evicted
                && self.q.small_used >= self.q.small_limit);
        let queue = if to_main { Queue::Main } else { Queue::Small };
        let index = self.q.slab.insert(Entry {
            key: access.key,
            charge: charge as u32, // a size or 1
            freq: 0,
            queue,
            stamp: (),
        });
        if to_main {
            self.q.main_used += charge;
            self.q.slab.push_front(&mut self.q.main, index);
        } else {
            self.q.small_used += charge;
            self.q.slab.push_front(&mut self.q.small, index);
        }
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

    /// Naive S3-FIFO: three deques of `(key, charge, freq)`, newest at the front.
    struct NaiveS3Fifo {
        limit: u64,
        small_limit: u64,
        main_limit: u64,
        ghost_limit: u64,
        small: VecDeque<(u64, u64, u32)>,
        main: VecDeque<(u64, u64, u32)>,
        ghost: VecDeque<(u64, u64)>,
        capacity: Capacity,
        /// libCacheSim's current `S3FIFO` (true) or `S3FIFOv0` (false).
        overflow: bool,
        evicted: bool,
    }

    impl NaiveS3Fifo {
        fn new(capacity: Capacity, overflow: bool) -> Self {
            let limit = capacity.limit();
            let small_limit = (limit as f64 * 0.1) as u64;
            Self {
                limit,
                small_limit,
                main_limit: limit - small_limit,
                ghost_limit: (limit as f64 * 0.9) as u64,
                small: VecDeque::new(),
                main: VecDeque::new(),
                ghost: VecDeque::new(),
                capacity,
                overflow,
                evicted: false,
            }
        }
        fn sum(q: &VecDeque<(u64, u64, u32)>) -> u64 {
            q.iter().map(|e| e.1).sum()
        }
    }

    impl Reference for NaiveS3Fifo {
        fn access(&mut self, access: &Access) -> (bool, Vec<u64>) {
            let key = access.key;
            for queue in [&mut self.small, &mut self.main] {
                if let Some(e) = queue.iter_mut().find(|e| e.0 == key) {
                    e.2 += 1;
                    return (true, vec![]);
                }
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
            while Self::sum(&self.small) + Self::sum(&self.main) + charge > self.limit {
                self.evicted = true;
                if Self::sum(&self.main) > self.main_limit || self.small.is_empty() {
                    while let Some(mut e) = self.main.pop_back() {
                        if e.2 >= 1 {
                            e.2 = e.2.min(3) - 1;
                            self.main.push_front(e);
                        } else {
                            victims.push(e.0);
                            break;
                        }
                    }
                } else {
                    while let Some(e) = self.small.pop_back() {
                        if e.2 >= 2 {
                            self.main.push_front((e.0, e.1, 0));
                        } else {
                            victims.push(e.0);
                            if e.1 <= self.ghost_limit {
                                while self.ghost.iter().map(|g| g.1).sum::<u64>() + e.1
                                    > self.ghost_limit
                                {
                                    self.ghost.pop_back();
                                }
                                self.ghost.push_front((e.0, e.1));
                            }
                            break;
                        }
                    }
                }
            }
            let small_full = Self::sum(&self.small) >= self.small_limit;
            if ghost_hit.is_some() {
                self.main.push_front((key, charge, 0));
            } else if charge >= self.small_limit {
                // refused
            } else if self.overflow && !self.evicted && small_full {
                self.main.push_front((key, charge, 0));
            } else {
                self.small.push_front((key, charge, 0));
            }
            (false, victims)
        }
    }

    fn s3fifo(capacity: Capacity) -> S3Fifo {
        S3Fifo::new(capacity, &S3FifoConfig::v0()).unwrap()
    }

    fn s3fifo_current(capacity: Capacity) -> S3Fifo {
        S3Fifo::new(capacity, &S3FifoConfig::default()).unwrap()
    }

    #[test]
    fn while_filling_a_full_small_fifo_overflows_into_main_until_the_first_eviction() {
        // 20 objects: small 2, main 18.
        let mut cache = s3fifo_current(Capacity::Objects(20));
        let mut victims = vec![];
        for access in &testing::keys(&(1..=20).collect::<Vec<_>>()) {
            cache.access(access, &mut victims);
        }
        assert!(victims.is_empty());
        assert_eq!(cache.q.small.len(), 2, "1 and 2 filled the small FIFO");
        assert_eq!(cache.q.main.len(), 18, "3..=20 overflowed into main");
        // 21 needs room: the small FIFO's oldest (1, never hit) goes, and from
        // then on new units enter the small FIFO even though it is full.
        cache.access(&testing::keys(&[21])[0], &mut victims);
        assert_eq!(victims, [1]);
        assert_eq!(cache.q.small.len(), 2);
        assert_eq!(
            cache
                .q
                .slab
                .get(cache.q.map.get(21, &cache.q.slab).unwrap())
                .queue,
            Queue::Small
        );
        // v0 puts every new unit in the small FIFO, evicting from it.
        let mut v0 = s3fifo(Capacity::Objects(20));
        victims.clear();
        for access in &testing::keys(&(1..=20).collect::<Vec<_>>()) {
            v0.access(access, &mut victims);
        }
        assert_eq!((v0.q.small.len(), v0.q.main.len()), (20, 0));
        assert_eq!(v0.name(), "s3fifo-v0");
        assert_eq!(cache.name(), "s3fifo");
    }

    #[test]
    fn one_hit_wonders_leave_through_the_small_queue_into_the_ghost() {
        // 20 objects: small 2, main 18, ghost 18.
        let mut cache = s3fifo(Capacity::Objects(20));
        let mut victims = vec![];
        // 1 is hit twice while in small; 2..=20 fill the cache (all in small).
        let mut keys = vec![1, 1, 1];
        keys.extend(2..=21);
        keys.push(2);
        let trace = testing::keys(&keys);
        for access in &trace[..trace.len() - 1] {
            cache.access(access, &mut victims);
        }
        assert_eq!(victims, [2], "21 needs room: 1 moves to main, then 2 goes");
        assert_eq!(cache.q.main.len(), 1);
        assert!(cache.contains(1) && !cache.contains(2));
        // 2 comes back: a ghost hit goes straight to main.
        victims.clear();
        assert!(!cache.access(&trace[trace.len() - 1], &mut victims));
        assert_eq!(victims, [3], "the small queue's oldest, 3, makes room");
        assert_eq!(cache.q.main.len(), 2);
        assert_eq!(
            cache
                .q
                .slab
                .get(cache.q.map.get(2, &cache.q.slab).unwrap())
                .queue,
            Queue::Main
        );
    }

    #[test]
    fn main_reinserts_hit_units_with_a_capped_counter() {
        let mut cache = s3fifo(Capacity::Objects(20));
        for (i, key) in [10, 11].into_iter().enumerate() {
            let index = cache.q.slab.insert(Entry {
                key,
                charge: 1,
                freq: [5, 0][i],
                queue: Queue::Main,
                stamp: (),
            });
            cache.q.slab.push_front(&mut cache.q.main, index);
            cache.q.map.insert(key, index, &cache.q.slab);
            cache.q.main_used += 1;
        }
        let mut victims = vec![];
        cache.evict_main(&mut victims);
        assert_eq!(victims, [11], "10 (older) was hit, so it is reinserted");
        assert_eq!(
            cache
                .q
                .slab
                .get(cache.q.map.get(10, &cache.q.slab).unwrap())
                .freq,
            2,
            "min(5, 3) - 1"
        );
    }

    #[test]
    fn tiny_caches_are_refused_rather_than_caching_nothing() {
        // libCacheSim builds a 19-object S3-FIFO whose 1-object small queue
        // admits nothing; we say so at build time instead.
        let error = S3Fifo::new(Capacity::Objects(19), &S3FifoConfig::default()).unwrap_err();
        assert!(matches!(
            error,
            ConfigError::CapacityTooSmall { capacity: 19, .. }
        ));
        assert!(S3Fifo::new(Capacity::Objects(20), &S3FifoConfig::default()).is_ok());
    }

    #[test]
    fn rejects_bad_ratios() {
        let config = S3FifoConfig {
            small_size_ratio: 1.0,
            ..S3FifoConfig::default()
        };
        assert!(S3Fifo::new(Capacity::Objects(100), &config).is_err());
    }

    proptest! {
        #[test]
        fn matches_naive_model(trace in testing::trace_strategy(60, 500, 5), cap in 1u64..60, bytes: bool) {
            let capacity = if bytes { Capacity::Bytes(cap) } else { Capacity::Objects(cap + 20) };
            let mut naive = NaiveS3Fifo::new(capacity, false);
            testing::assert_matches_reference(&mut s3fifo(capacity), &mut naive, &trace);
            testing::replay_checked(&mut s3fifo(capacity), &trace);
            let mut naive = NaiveS3Fifo::new(capacity, true);
            testing::assert_matches_reference(&mut s3fifo_current(capacity), &mut naive, &trace);
            testing::replay_checked(&mut s3fifo_current(capacity), &trace);
        }
    }
}
