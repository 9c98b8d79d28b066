//! Clock2Q+: S3-FIFO's small / main / ghost structure with a 1-bit CLOCK as
//! main and a correlation window on the small FIFO, so that hits soon after
//! a unit arrives (correlated references) do not promote it.
//!
//! Source: libCacheSim's own policy (`cache/eviction/Clock2QPlus.c`, Juncheng
//! Yang; in the `libcachesim` 0.3.5 Python release as `Clock2QPlus`, absent
//! from commit aa0fc40). It has no paper of its own: it is S3-FIFO (Yang et
//! al., "FIFO queues are all you need for cache eviction", SOSP 2023) with
//! the *correlated reference period* of 2Q (Johnson & Shasha, VLDB 1994,
//! §2.1, itself from LRU-K) applied to the small FIFO. This module matches
//! libCacheSim's file step for step, so that miss ratios agree exactly:
//!
//! - Sizes: small = ⌊capacity × `small_size_ratio`⌋ (0.10), main = capacity −
//!   small, ghost = ⌊capacity × `ghost_size_ratio`⌋ (0.90), keys only,
//!   charged like resident units. The correlation window is small ×
//!   `correlation_window_ratio` (0.5), counted in admissions to the small
//!   FIFO.
//! - A hit in small counts (frequency + 1) only if at least a window's worth
//!   of units entered small after it; a hit in main always counts. Nothing
//!   moves on a hit.
//! - A miss whose key is in the ghost removes it from the ghost (in
//!   [`lookup`](Policy::lookup), even if the unit is then not admitted) and
//!   admits the unit to main's head. Any other miss enters small's head,
//!   except that until the cache first evicts, a miss that finds small full
//!   enters main (as libCacheSim's current S3-FIFO).
//! - While the new unit does not fit: if main holds more than its share, or
//!   small is empty, evict from main, else from small.
//!   - Small: take the tail; with frequency ≥ `move_to_main_threshold` (1)
//!     move it to main's head with frequency 0 and look again; otherwise
//!     evict it and record its key in the ghost.
//!   - Main: take the tail; with frequency ≥ 1 reinsert it at the head with
//!     frequency 0 (a 1-bit CLOCK) and look again; otherwise evict it.
//!
//! Checked on `cloudPhysicsIO` by `crates/cairn-sim/tests/libcachesim_agreement.rs`:
//! the same miss counts as libCacheSim 0.3.5 at 1, 5, 10 and 20 % of the
//! distinct objects (94359, 92791, 85597, 75326) and of the bytes.
//!
//! libCacheSim quirks kept on purpose, as in [`crate::s3fifo`]: a unit larger
//! than the small FIFO is refused before any eviction, and one exactly as
//! large (not a ghost hit) after the evictions made for it; so in object
//! mode a capacity whose small FIFO holds fewer than 2 objects is refused
//! with [`ConfigError::CapacityTooSmall`] (libCacheSim builds it and admits
//! nothing).
//!
//! [`remove`](Policy::remove) drops a resident unit without recording it in
//! the ghost and leaves ghost keys alone (libCacheSim's `Clock2QPlus_remove`
//! also drops a ghost key and calls that a removal; we report residency).

use crate::error::Knobs;
use serde::{Deserialize, Serialize};

use crate::queues::{Entry, Queue, Queues};
use crate::{Access, Ahead, Capacity, ConfigError, Policy};

/// `Clock2QPlus` parameters; the defaults are libCacheSim's.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Clock2QPlusConfig {
    /// Share of the capacity given to the small (probationary) FIFO, in
    /// `(0, 1)`. Default 0.10 (libCacheSim `fifo-size-ratio`).
    pub small_size_ratio: f64,
    /// Ghost FIFO size as a share of the capacity, in `[0, 1]`; 0 disables
    /// the ghost. Default 0.90 (libCacheSim `ghost-size-ratio`).
    pub ghost_size_ratio: f64,
    /// Counted hits a unit needs while in the small FIFO to move to main
    /// instead of being evicted, 1 to 65,535. Default 1 (libCacheSim
    /// `move-to-main-threshold`).
    pub move_to_main_threshold: u32,
    /// The correlation window as a share of the small FIFO's size, in
    /// `[0, 1]`: a hit in small counts only once that many units (small ×
    /// ratio) have entered small after it. 0 counts every hit. Default 0.5
    /// (libCacheSim `corr-window-ratio`).
    pub correlation_window_ratio: f64,
}

impl Default for Clock2QPlusConfig {
    fn default() -> Self {
        Self {
            small_size_ratio: 0.10,
            ghost_size_ratio: 0.90,
            move_to_main_threshold: 1,
            correlation_window_ratio: 0.5,
        }
    }
}

impl Clock2QPlusConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        let knobs = Knobs("clock2qplus");
        knobs.s3fifo_front(
            self.small_size_ratio,
            self.ghost_size_ratio,
            self.move_to_main_threshold,
        )?;
        knobs.fraction("correlation_window_ratio", self.correlation_window_ratio)
    }
}

/// `Clock2QPlus` replacement.
#[derive(Debug)]
pub struct Clock2QPlus {
    capacity: Capacity,
    /// The queues, their budgets, the index and the nodes.
    q: Queues<u64>,
    move_to_main_threshold: u16,
    /// The smallest number of admissions to small after a unit's own that
    /// makes a hit on it count: ⌈small × `correlation_window_ratio`⌉.
    window: u64,
    /// Admissions to small so far (`n_obj_admit_to_fifo`).
    admitted_to_small: u64,
    /// The key whose last `lookup` missed but found (and removed) it in the ghost.
    ghost_hit: Option<u64>,
    /// Whether the cache has had to evict yet (`has_evicted` in libCacheSim).
    has_evicted: bool,
}

impl Clock2QPlus {
    /// An empty `Clock2QPlus` cache.
    pub fn new(capacity: Capacity, config: &Clock2QPlusConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        // Clock2QPlus_init's arithmetic: truncating casts of size × ratio; the
        // window stays a double there, compared with whole admission counts.
        let small_limit = (capacity.limit() as f64 * config.small_size_ratio) as u64;
        let ghost_limit = (capacity.limit() as f64 * config.ghost_size_ratio) as u64;
        let window = (small_limit as f64 * config.correlation_window_ratio).ceil() as u64;
        if matches!(capacity, Capacity::Objects(_)) && small_limit < 2 {
            return Err(ConfigError::CapacityTooSmall {
                policy: "clock2qplus",
                capacity: capacity.limit(),
                reason: "the small FIFO would hold fewer than 2 objects and admit nothing \
                         (raise the capacity or small_size_ratio)",
            });
        }
        Ok(Self {
            capacity,
            q: Queues::new(capacity, small_limit, ghost_limit),
            move_to_main_threshold: config.move_to_main_threshold as u16, // validated
            window,
            admitted_to_small: 0,
            ghost_hit: None,
            has_evicted: false,
        })
    }

    /// Evicts one unit from the small FIFO, moving units hit often enough
    /// (outside the window) to main.
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

    /// Evicts one unit from main, a 1-bit CLOCK: hit units go round again.
    fn evict_main(&mut self, victims: &mut Vec<u64>) {
        while let Some(index) = self.q.slab.pop_back(&mut self.q.main) {
            let entry = self.q.slab.get_mut(index);
            if entry.freq >= 1 {
                entry.freq = 0;
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

impl Policy for Clock2QPlus {
    fn name(&self) -> &'static str {
        "clock2qplus"
    }

    fn prefetch(&self, key: u64, ahead: Ahead) {
        self.q.map.prefetch_stage(key, &self.q.slab, ahead, false);
    }

    fn lookup(&mut self, access: &Access) -> bool {
        self.ghost_hit = None;
        let Some(index) = self.q.map.get(access.key, &self.q.slab) else {
            return false;
        };
        let admitted_to_small = self.admitted_to_small;
        let window = self.window;
        let entry = self.q.slab.get_mut(index);
        match entry.queue {
            Queue::Ghost => {
                self.q.remove_ghost(index);
                self.ghost_hit = Some(access.key);
                return false;
            }
            Queue::Small => {
                if admitted_to_small - entry.stamp >= window {
                    entry.freq = entry.freq.saturating_add(1);
                }
            }
            Queue::Main => entry.freq = entry.freq.saturating_add(1),
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
            return false; // Clock2QPlus_can_insert
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
        // Before the first eviction, a full small FIFO overflows into main.
        let to_main = to_main || (!self.has_evicted && self.q.small_used >= self.q.small_limit);
        let mut entry = Entry {
            key: access.key,
            charge: charge as u32, // a size or 1
            freq: 0,
            queue: Queue::Main,
            // Admissions to small when the unit entered it (its own included).
            stamp: 0,
        };
        if !to_main {
            self.admitted_to_small += 1;
            entry.stamp = self.admitted_to_small;
            entry.queue = Queue::Small;
        }
        let index = self.q.slab.insert(entry);
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

    /// A unit in the naive model: key, charge, counted hits, and the number
    /// of admissions to small when it entered small.
    #[derive(Clone, Copy)]
    struct Unit {
        key: u64,
        charge: u64,
        hits: u32,
        inserted: u64,
    }

    /// Naive Clock2Q+: three deques, newest at the front, sums recomputed.
    struct NaiveClock2QPlus {
        limit: u64,
        small_limit: u64,
        main_limit: u64,
        ghost_limit: u64,
        window: f64,
        admitted: u64,
        small: VecDeque<Unit>,
        main: VecDeque<Unit>,
        ghost: VecDeque<(u64, u64)>,
        capacity: Capacity,
        evicted: bool,
    }

    impl NaiveClock2QPlus {
        fn new(capacity: Capacity, window_ratio: f64) -> Self {
            let limit = capacity.limit();
            let small_limit = (limit as f64 * 0.1) as u64;
            Self {
                limit,
                small_limit,
                main_limit: limit - small_limit,
                ghost_limit: (limit as f64 * 0.9) as u64,
                // A double, compared as libCacheSim compares it.
                window: small_limit as f64 * window_ratio,
                admitted: 0,
                small: VecDeque::new(),
                main: VecDeque::new(),
                ghost: VecDeque::new(),
                capacity,
                evicted: false,
            }
        }
        fn sum(q: &VecDeque<Unit>) -> u64 {
            q.iter().map(|u| u.charge).sum()
        }
    }

    impl Reference for NaiveClock2QPlus {
        fn access(&mut self, access: &Access) -> (bool, Vec<u64>) {
            let key = access.key;
            if let Some(u) = self.small.iter_mut().find(|u| u.key == key) {
                if (self.admitted - u.inserted) as f64 >= self.window {
                    u.hits += 1;
                }
                return (true, vec![]);
            }
            if let Some(u) = self.main.iter_mut().find(|u| u.key == key) {
                u.hits += 1;
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
            while Self::sum(&self.small) + Self::sum(&self.main) + charge > self.limit {
                self.evicted = true;
                if Self::sum(&self.main) > self.main_limit || self.small.is_empty() {
                    while let Some(mut u) = self.main.pop_back() {
                        if u.hits >= 1 {
                            u.hits = 0;
                            self.main.push_front(u);
                        } else {
                            victims.push(u.key);
                            break;
                        }
                    }
                } else {
                    while let Some(mut u) = self.small.pop_back() {
                        if u.hits >= 1 {
                            u.hits = 0;
                            self.main.push_front(u);
                        } else {
                            victims.push(u.key);
                            if u.charge <= self.ghost_limit {
                                while self.ghost.iter().map(|g| g.1).sum::<u64>() + u.charge
                                    > self.ghost_limit
                                {
                                    self.ghost.pop_back();
                                }
                                self.ghost.push_front((u.key, u.charge));
                            }
                            break;
                        }
                    }
                }
            }
            let unit = Unit {
                key,
                charge,
                hits: 0,
                inserted: 0,
            };
            if ghost_hit.is_some() {
                self.main.push_front(unit);
            } else if charge >= self.small_limit {
                // refused
            } else if !self.evicted && Self::sum(&self.small) >= self.small_limit {
                self.main.push_front(unit);
            } else {
                self.admitted += 1;
                self.small.push_front(Unit {
                    inserted: self.admitted,
                    ..unit
                });
            }
            (false, victims)
        }
    }

    fn clock2qplus(capacity: Capacity) -> Clock2QPlus {
        Clock2QPlus::new(capacity, &Clock2QPlusConfig::default()).unwrap()
    }

    fn queue_of(cache: &Clock2QPlus, key: u64) -> Queue {
        cache
            .q
            .slab
            .get(cache.q.map.get(key, &cache.q.slab).unwrap())
            .queue
    }

    /// A cache of 40 objects (small 4, window 2) whose first eviction has
    /// happened, with 1..=40 admitted: 1..=4 filled small, 5..=40
    /// overflowed into main, then 41 evicted small's oldest (1).
    fn warmed() -> (Clock2QPlus, Vec<u64>) {
        let mut cache = clock2qplus(Capacity::Objects(40));
        let mut victims = vec![];
        for access in &testing::keys(&(1..=41).collect::<Vec<_>>()) {
            cache.access(access, &mut victims);
        }
        assert_eq!(victims, [1]);
        assert_eq!((cache.q.small.len(), cache.q.main.len()), (4, 36));
        assert_eq!(queue_of(&cache, 41), Queue::Small);
        (cache, victims)
    }

    #[test]
    fn a_hit_inside_the_correlation_window_does_not_promote() {
        let (mut cache, mut victims) = warmed();
        // 41 was the last admission to small: a hit now is correlated.
        assert!(cache.access(&testing::keys(&[41])[0], &mut victims));
        // 42 and 43 push 41 to small's tail, the window (2 admissions) now
        // passed; small's tail (2, 3) go to the ghost meanwhile.
        victims.clear();
        for access in &testing::keys(&[42, 43, 44, 45]) {
            cache.access(access, &mut victims);
        }
        assert_eq!(victims, [2, 3, 4, 41], "41's early hit did not count");
        assert!(!cache.contains(41));
    }

    #[test]
    fn a_hit_after_the_correlation_window_promotes_to_main() {
        let (mut cache, mut victims) = warmed();
        victims.clear();
        for access in &testing::keys(&[42, 43]) {
            cache.access(access, &mut victims);
        }
        assert_eq!(victims, [2, 3]);
        // Two units entered small after 41: the window is over.
        assert!(cache.access(&testing::keys(&[41])[0], &mut victims));
        victims.clear();
        for access in &testing::keys(&[44, 45]) {
            cache.access(access, &mut victims);
        }
        assert_eq!(victims, [4, 42], "41 moved to main instead of leaving");
        assert_eq!(queue_of(&cache, 41), Queue::Main);
        assert_eq!(
            cache
                .q
                .slab
                .get(cache.q.map.get(41, &cache.q.slab).unwrap())
                .freq,
            0
        );
    }

    #[test]
    fn main_is_a_one_bit_clock_and_ghost_hits_enter_main() {
        let mut cache = clock2qplus(Capacity::Objects(40));
        let mut victims = vec![];
        for access in &testing::keys(&(1..=40).collect::<Vec<_>>()) {
            cache.access(access, &mut victims);
        }
        // 5 (main's oldest) is hit three times: one bit, so one more round.
        for access in &testing::keys(&[5, 5, 5]) {
            assert!(cache.access(access, &mut victims));
        }
        // Fill main past its 36 by ghost hits: 41 evicts 1 from small into
        // the ghost, then 1 comes back into main.
        cache.access(&testing::keys(&[41])[0], &mut victims);
        assert_eq!(victims, [1]);
        victims.clear();
        assert!(!cache.access(&testing::keys(&[1])[0], &mut victims));
        assert_eq!(queue_of(&cache, 1), Queue::Main);
        // Main held 36 of its 36 and small had room, so small's tail left.
        assert_eq!(victims, [2]);
        victims.clear();
        // 2 is a ghost hit into main, now at 37 > 36: main evicts. Its tail
        // 5 has its bit: round again with the bit cleared (a 2-bit counter
        // would keep 2), and 6 leaves.
        assert!(!cache.access(&testing::keys(&[2])[0], &mut victims));
        assert_eq!(victims, [6]);
        assert_eq!(queue_of(&cache, 2), Queue::Main);
        assert!(cache.contains(5));
        assert_eq!(
            cache
                .q
                .slab
                .get(cache.q.map.get(5, &cache.q.slab).unwrap())
                .freq,
            0
        );
    }

    #[test]
    fn bad_knobs_and_tiny_caches_are_refused() {
        for config in [
            Clock2QPlusConfig {
                small_size_ratio: 0.0,
                ..Clock2QPlusConfig::default()
            },
            Clock2QPlusConfig {
                ghost_size_ratio: 1.5,
                ..Clock2QPlusConfig::default()
            },
            Clock2QPlusConfig {
                move_to_main_threshold: 0,
                ..Clock2QPlusConfig::default()
            },
            Clock2QPlusConfig {
                correlation_window_ratio: f64::NAN,
                ..Clock2QPlusConfig::default()
            },
        ] {
            let error = Clock2QPlus::new(Capacity::Objects(100), &config).unwrap_err();
            assert!(
                matches!(error, ConfigError::OutOfRange { .. }),
                "{config:?}: {error}"
            );
        }
        assert!(matches!(
            Clock2QPlus::new(Capacity::Objects(19), &Clock2QPlusConfig::default()),
            Err(ConfigError::CapacityTooSmall { capacity: 19, .. })
        ));
        assert!(Clock2QPlus::new(Capacity::Objects(20), &Clock2QPlusConfig::default()).is_ok());
    }

    proptest! {
        #[test]
        fn matches_naive_model(
            trace in testing::trace_strategy(80, 500, 5),
            cap in 1u64..80,
            bytes: bool,
            window_ratio in prop::sample::select(vec![0.0, 0.3, 0.5, 1.0]),
        ) {
            let capacity = if bytes { Capacity::Bytes(cap) } else { Capacity::Objects(cap + 20) };
            let config = Clock2QPlusConfig {
                correlation_window_ratio: window_ratio,
                ..Clock2QPlusConfig::default()
            };
            let mut naive = NaiveClock2QPlus::new(capacity, window_ratio);
            let mut cache = Clock2QPlus::new(capacity, &config).unwrap();
            testing::assert_matches_reference(&mut cache, &mut naive, &trace);
            testing::replay_checked(&mut Clock2QPlus::new(capacity, &config).unwrap(), &trace);
        }
    }
}
