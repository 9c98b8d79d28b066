//! QD-LP: quick demotion (a small probationary FIFO with a ghost) in front of
//! a lazily promoting main cache (CLOCK with an n-bit counter).
//!
//! Source: Juncheng Yang, Ziyue Qiu, Yazhuo Zhang, Yao Yue, K. V. Rashmi,
//! "FIFO can be Better than LRU: the Power of Lazy Promotion and Quick
//! Demotion", HotOS 2023 (§4, "QD-LP-FIFO"). This module matches libCacheSim
//! commit aa0fc40's `cache/eviction/QDLP.c` (`cachesim ... qdlp`) with its
//! default `main-cache=Clock2` step for step:
//!
//! - Sizes: FIFO = ⌊capacity × `small_size_ratio`⌋ (0.10), main = capacity −
//!   FIFO, ghost = ⌊capacity × `ghost_size_ratio`⌋ (0.90), keys only, charged
//!   like resident units.
//! - A hit in the FIFO increments the unit's hit count; a hit in main
//!   increments its CLOCK counter, saturating at 2^`main_counter_bits` − 1 (3).
//!   Nothing moves on a hit.
//! - A miss whose key is in the ghost drops the ghost entry (in
//!   [`lookup`](Policy::lookup)) and admits the unit to main; any other miss
//!   to the FIFO's head with count 0.
//! - While the unit does not fit in the whole capacity: if the FIFO is empty,
//!   main evicts (CLOCK: its tail with a non-zero counter is decremented and
//!   moved to the head, the first with counter 0 goes). Otherwise the FIFO's
//!   tail leaves it: with ≥ `move_to_main_threshold` hits (1) it is inserted
//!   at main's head with counter 0 (main evicting first while it alone would
//!   exceed its share), else it is evicted and its key enters the ghost
//!   (whose oldest keys go to make room).
//! - Admission to main (ghost hit or promotion) evicts from main until the
//!   unit fits in main's share.
//!
//! libCacheSim quirks kept, as in [`s3fifo`](crate::s3fifo) (they matter only
//! for units as large as the FIFO): a unit larger than the FIFO is refused
//! before any eviction, one exactly as large (and not a ghost hit) after the
//! evictions made for it. In object mode a FIFO under 2 objects would admit
//! nothing, so such a capacity is refused with
//! [`ConfigError::CapacityTooSmall`].
//!
//! libCacheSim's QDLP can put other caches behind the FIFO (`main-cache=ARC`,
//! `LRU`, ...); here main is always CLOCK, with `main_counter_bits = 1` for
//! its `main-cache=Clock` and 3 for `Clock3`.
//!
//! Checked on `cloudPhysicsIO` by `crates/cairn-sim/tests/libcachesim_agreement.rs`
//! against aa0fc40's `cachesim` in object and byte mode.
//!
//! [`remove`](Policy::remove) drops a resident unit without a ghost entry and
//! leaves ghost keys alone (libCacheSim's `QDLP_remove` would also drop a
//! ghost key and call that a removal; we report residency).

use crate::error::Knobs;
use serde::{Deserialize, Serialize};

use crate::list::Index;
use crate::queues::{Entry, Queue, Queues};
use crate::{Access, Ahead, Capacity, ConfigError, Policy};

/// QD-LP parameters; the defaults are libCacheSim's.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct QdlpConfig {
    /// Share of the capacity given to the probationary FIFO, in `(0, 1)`.
    /// Default 0.10 (libCacheSim `fifo-size-ratio`).
    pub small_size_ratio: f64,
    /// Ghost size as a share of the capacity, in `[0, 1]`; 0 disables the
    /// ghost. Default 0.90 (libCacheSim `ghost-size-ratio`).
    pub ghost_size_ratio: f64,
    /// Hits a unit needs while in the FIFO to be promoted to main instead of
    /// evicted, 1 to 65,535. Default 1 (libCacheSim `move-to-main-threshold`).
    pub move_to_main_threshold: u32,
    /// Width of main's CLOCK counter in bits, 1 to 15. Default 2 (libCacheSim
    /// `main-cache=Clock2`).
    pub main_counter_bits: u32,
}

impl Default for QdlpConfig {
    fn default() -> Self {
        Self {
            small_size_ratio: 0.10,
            ghost_size_ratio: 0.90,
            move_to_main_threshold: 1,
            main_counter_bits: 2,
        }
    }
}

impl QdlpConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        let knobs = Knobs("qdlp");
        knobs.s3fifo_front(
            self.small_size_ratio,
            self.ghost_size_ratio,
            self.move_to_main_threshold,
        )?;
        knobs.one_to("main_counter_bits", self.main_counter_bits, 15, "1 to 15")
    }
}

/// QD-LP replacement.
#[derive(Debug)]
pub struct Qdlp {
    capacity: Capacity,
    /// The queues, their budgets, the index and the nodes.
    q: Queues<()>,
    move_to_main_threshold: u16,
    counter_max: u16,
    /// The key whose last `lookup` missed but found (and removed) it in the ghost.
    ghost_hit: Option<u64>,
}

impl Qdlp {
    /// An empty QD-LP cache.
    pub fn new(capacity: Capacity, config: &QdlpConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        // Same arithmetic as QDLP_init: truncating casts of size × ratio.
        let fifo_limit = (capacity.limit() as f64 * config.small_size_ratio) as u64;
        let ghost_limit = (capacity.limit() as f64 * config.ghost_size_ratio) as u64;
        if matches!(capacity, Capacity::Objects(_)) && fifo_limit < 2 {
            return Err(ConfigError::CapacityTooSmall {
                policy: "qdlp",
                capacity: capacity.limit(),
                reason: "the FIFO would hold fewer than 2 objects and admit nothing \
                         (raise the capacity or small_size_ratio)",
            });
        }
        Ok(Self {
            capacity,
            q: Queues::new(capacity, fifo_limit, ghost_limit),
            move_to_main_threshold: config.move_to_main_threshold as u16, // validated
            counter_max: ((1u32 << config.main_counter_bits) - 1) as u16,
            ghost_hit: None,
        })
    }

    /// CLOCK eviction from main. Returns whether a unit was evicted.
    fn evict_main(&mut self, victims: &mut Vec<u64>) -> bool {
        while let Some(index) = self.q.slab.pop_back(&mut self.q.main) {
            let entry = self.q.slab.get_mut(index);
            if entry.freq >= 1 {
                entry.freq -= 1;
                self.q.slab.push_front(&mut self.q.main, index);
            } else {
                self.q.main_used -= u64::from(entry.charge);
                victims.push(entry.key);
                self.q.free(index);
                return true;
            }
        }
        false
    }

    /// Links the (unlinked) node `index` at main's head with counter 0, as
    /// libCacheSim's `main_cache->get`: a unit larger than main is dropped,
    /// otherwise main evicts until it fits. Returns whether it was linked.
    fn insert_main(&mut self, index: Index, victims: &mut Vec<u64>) -> bool {
        let charge = u64::from(self.q.slab.get(index).charge);
        if charge > self.q.main_limit {
            return false;
        }
        while self.q.main_used + charge > self.q.main_limit {
            if !self.evict_main(victims) {
                break;
            }
        }
        let entry = self.q.slab.get_mut(index);
        entry.queue = Queue::Main;
        entry.freq = 0;
        self.q.main_used += charge;
        self.q.slab.push_front(&mut self.q.main, index);
        true
    }

    /// One step of `QDLP_evict`: the FIFO's tail is promoted or evicted into
    /// the ghost; with an empty FIFO, main evicts.
    fn evict(&mut self, victims: &mut Vec<u64>) -> bool {
        let Some(index) = self.q.slab.pop_back(&mut self.q.small) else {
            return self.evict_main(victims);
        };
        let entry = *self.q.slab.get(index);
        self.q.small_used -= u64::from(entry.charge);
        if entry.freq >= self.move_to_main_threshold {
            if !self.insert_main(index, victims) {
                victims.push(entry.key);
                self.q.free(index);
            }
        } else {
            victims.push(entry.key);
            self.q.insert_ghost(index);
        }
        true
    }
}

impl Policy for Qdlp {
    fn name(&self) -> &'static str {
        "qdlp"
    }

    fn prefetch(&self, key: u64, ahead: Ahead) {
        self.q.map.prefetch_stage(key, &self.q.slab, ahead, false);
    }

    fn lookup(&mut self, access: &Access) -> bool {
        self.ghost_hit = None;
        let Some(index) = self.q.map.get(access.key, &self.q.slab) else {
            return false;
        };
        let counter_max = self.counter_max;
        let entry = self.q.slab.get_mut(index);
        match entry.queue {
            Queue::Small => entry.freq = entry.freq.saturating_add(1),
            Queue::Main => entry.freq = (entry.freq + 1).min(counter_max),
            Queue::Ghost => {
                self.q.remove_ghost(index);
                self.ghost_hit = Some(access.key);
                return false;
            }
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
            return false; // QDLP_can_insert
        }
        while self.q.small_used + self.q.main_used + charge > self.capacity.limit() {
            if !self.evict(victims) {
                break;
            }
        }
        if !to_main && charge >= self.q.small_limit {
            return false; // QDLP_insert; see the module docs
        }
        let index = self.q.slab.insert(Entry {
            key: access.key,
            charge: charge as u32, // a size or 1
            freq: 0,
            queue: Queue::Small,
            stamp: (),
        });
        if to_main {
            if !self.insert_main(index, victims) {
                self.q.slab.remove(index);
                return false;
            }
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

    /// Naive QD-LP: deques of `(key, charge, count)`, newest at the front,
    /// transcribing `QDLP.c`, `FIFO.c` and `Clock.c`.
    struct NaiveQdlp {
        capacity: Capacity,
        fifo_limit: u64,
        main_limit: u64,
        ghost_limit: u64,
        threshold: u32,
        counter_max: u32,
        fifo: VecDeque<(u64, u64, u32)>,
        main: VecDeque<(u64, u64, u32)>,
        ghost: VecDeque<(u64, u64)>,
    }

    impl NaiveQdlp {
        fn new(capacity: Capacity, config: &QdlpConfig) -> Self {
            let limit = capacity.limit();
            let fifo_limit = (limit as f64 * config.small_size_ratio) as u64;
            Self {
                capacity,
                fifo_limit,
                main_limit: limit - fifo_limit,
                ghost_limit: (limit as f64 * config.ghost_size_ratio) as u64,
                threshold: config.move_to_main_threshold,
                counter_max: (1 << config.main_counter_bits) - 1,
                fifo: VecDeque::new(),
                main: VecDeque::new(),
                ghost: VecDeque::new(),
            }
        }

        fn sum(q: &VecDeque<(u64, u64, u32)>) -> u64 {
            q.iter().map(|e| e.1).sum()
        }

        fn main_evict(&mut self, victims: &mut Vec<u64>) {
            while let Some(mut e) = self.main.pop_back() {
                if e.2 >= 1 {
                    e.2 -= 1;
                    self.main.push_front(e);
                } else {
                    victims.push(e.0);
                    return;
                }
            }
        }

        fn main_get(&mut self, key: u64, charge: u64, victims: &mut Vec<u64>) -> bool {
            if charge > self.main_limit {
                return false;
            }
            while Self::sum(&self.main) + charge > self.main_limit {
                self.main_evict(victims);
            }
            self.main.push_front((key, charge, 0));
            true
        }
    }

    impl Reference for NaiveQdlp {
        fn access(&mut self, access: &Access) -> (bool, Vec<u64>) {
            let key = access.key;
            if let Some(e) = self.fifo.iter_mut().find(|e| e.0 == key) {
                e.2 += 1;
                return (true, vec![]);
            }
            let ghost_hit = self.ghost.iter().position(|g| g.0 == key);
            if let Some(at) = ghost_hit {
                self.ghost.remove(at);
            }
            if let Some(e) = self.main.iter_mut().find(|e| e.0 == key) {
                e.2 = (e.2 + 1).min(self.counter_max);
                return (true, vec![]);
            }
            let charge = self.capacity.charge(access.size);
            let mut victims = vec![];
            if charge > self.fifo_limit {
                return (false, victims);
            }
            while Self::sum(&self.fifo) + Self::sum(&self.main) + charge > self.capacity.limit() {
                let Some(e) = self.fifo.pop_back() else {
                    self.main_evict(&mut victims);
                    continue;
                };
                if e.2 >= self.threshold {
                    if !self.main_get(e.0, e.1, &mut victims) {
                        victims.push(e.0);
                    }
                } else {
                    victims.push(e.0);
                    if e.1 <= self.ghost_limit {
                        while self.ghost.iter().map(|g| g.1).sum::<u64>() + e.1 > self.ghost_limit {
                            self.ghost.pop_back();
                        }
                        self.ghost.push_front((e.0, e.1));
                    }
                }
            }
            if ghost_hit.is_some() {
                self.main_get(key, charge, &mut victims);
            } else if charge < self.fifo_limit {
                self.fifo.push_front((key, charge, 0));
            }
            (false, victims)
        }
    }

    fn qdlp(capacity: Capacity) -> Qdlp {
        Qdlp::new(capacity, &QdlpConfig::default()).unwrap()
    }

    fn queue_of(cache: &Qdlp, key: u64) -> Queue {
        cache
            .q
            .slab
            .get(cache.q.map.get(key, &cache.q.slab).unwrap())
            .queue
    }

    #[test]
    fn a_unit_hit_once_in_the_fifo_is_promoted_and_one_hit_wonders_leave_into_the_ghost() {
        // 20 objects: FIFO 2, main 18, ghost 18.
        let mut cache = qdlp(Capacity::Objects(20));
        let mut victims = vec![];
        let trace = testing::keys(&[1, 1, 2, 3]);
        for access in &trace {
            cache.access(access, &mut victims);
        }
        // Until the cache is full, every new unit enters the FIFO, beyond its
        // share: only the total is bounded.
        assert!(victims.is_empty());
        assert_eq!((cache.q.small.len(), cache.q.main.len()), (3, 0));
        // Fill to 20, then 21 needs room: the FIFO's tail, 1 (hit once),
        // moves to main; then 2 (never hit) is evicted into the ghost.
        for access in &testing::keys(&(4..=21).collect::<Vec<_>>()) {
            cache.access(access, &mut victims);
        }
        assert_eq!(victims, [2]);
        assert_eq!(queue_of(&cache, 1), Queue::Main);
        assert_eq!(queue_of(&cache, 2), Queue::Ghost);
        assert!(!cache.contains(2));
        // 2 returns: a ghost hit, admitted straight to main.
        victims.clear();
        assert!(!cache.access(&testing::keys(&[2])[0], &mut victims));
        assert_eq!(victims, [3], "the FIFO's oldest made room");
        assert_eq!(queue_of(&cache, 2), Queue::Main);
    }

    #[test]
    fn main_is_a_clock_with_a_two_bit_counter() {
        let mut cache = qdlp(Capacity::Objects(20));
        for (key, freq) in [(10, 0), (11, 0)] {
            let index = cache.q.slab.insert(Entry {
                key,
                charge: 1,
                freq,
                queue: Queue::Main,
                stamp: (),
            });
            cache.q.slab.push_front(&mut cache.q.main, index);
            cache.q.map.insert(key, index, &cache.q.slab);
            cache.q.main_used += 1;
        }
        // Five hits on 10 saturate its counter at 3.
        for access in testing::keys(&[10; 5]) {
            assert!(cache.lookup(&access));
        }
        let freq = |c: &Qdlp, k| c.q.slab.get(c.q.map.get(k, &c.q.slab).unwrap()).freq;
        assert_eq!(freq(&cache, 10), 3);
        let mut victims = vec![];
        cache.evict_main(&mut victims);
        assert_eq!(victims, [11], "10 (older) is passed over, 11 goes");
        assert_eq!(freq(&cache, 10), 2, "the hand decremented it once");
    }

    #[test]
    fn rejects_bad_knobs_and_tiny_caches() {
        for config in [
            QdlpConfig {
                small_size_ratio: 1.0,
                ..QdlpConfig::default()
            },
            QdlpConfig {
                ghost_size_ratio: -0.1,
                ..QdlpConfig::default()
            },
            QdlpConfig {
                move_to_main_threshold: 0,
                ..QdlpConfig::default()
            },
            QdlpConfig {
                main_counter_bits: 16,
                ..QdlpConfig::default()
            },
        ] {
            let error = Qdlp::new(Capacity::Objects(100), &config).unwrap_err();
            assert!(matches!(
                error,
                ConfigError::OutOfRange { policy: "qdlp", .. }
            ));
        }
        assert!(matches!(
            Qdlp::new(Capacity::Objects(19), &QdlpConfig::default()).unwrap_err(),
            ConfigError::CapacityTooSmall { capacity: 19, .. }
        ));
        assert!(Qdlp::new(Capacity::Objects(20), &QdlpConfig::default()).is_ok());
    }

    proptest! {
        #[test]
        fn matches_naive_model(
            trace in testing::trace_strategy(60, 500, 5),
            cap in 1u64..60,
            bytes: bool,
            threshold in 1u32..3,
            bits in 1u32..4,
            ghost in 0.0f64..1.0,
            small in 0.05f64..0.6,
        ) {
            let capacity = if bytes { Capacity::Bytes(cap) } else { Capacity::Objects(cap + 10) };
            let config = QdlpConfig {
                small_size_ratio: small,
                ghost_size_ratio: ghost,
                move_to_main_threshold: threshold,
                main_counter_bits: bits,
            };
            let Ok(mut cache) = Qdlp::new(capacity, &config) else {
                return Ok(());
            };
            let mut naive = NaiveQdlp::new(capacity, &config);
            testing::assert_matches_reference(&mut cache, &mut naive, &trace);
            testing::replay_checked(&mut Qdlp::new(capacity, &config).unwrap(), &trace);
        }
    }
}
