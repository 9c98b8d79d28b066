//! Cacheus: LeCaR's successor, with scan- and churn-resistant experts.
//!
//! Origin: L. V. Rodriguez, F. Yusuf, S. Lyons, E. Paz, R. Rangaswami,
//! J. Liu, M. Zhao, G. Narasimhan, "Learning Cache Replacement with
//! CACHEUS", FAST 2021.
//!
//! Two experts hold the same resident units:
//! - **SR-LRU** (scan resistant): an LRU list `SR` for units seen once, an
//!   LRU list `R` for units hit while resident or back from history, and a
//!   history `H` of evicted units. A hit in `R` moves to `R`'s front; a hit
//!   in `SR` moves to `R`'s front, `R`'s oldest units moving back to `SR`'s
//!   front while `R` is over its size. A miss found in `H` enters `R` (its
//!   oldest units demoted to `SR` to make room), any other miss enters
//!   `SR`; then while `SR` is over its size its oldest unit leaves the cache
//!   for `H`. `H` keeps under `capacity` of history.
//! - **CR-LFU** (churn resistant): least frequently used, and among those
//!   the one that reached that frequency *last*; a unit back from `H` gets
//!   its old frequency plus one.
//!
//! To make room, each expert proposes a victim (SR-LRU: `SR`'s oldest, or
//! `R`'s if `SR` is empty) and a random draw picks SR-LRU's with
//! probability `w_lru`. If the proposals differ, the victim's key enters the
//! chosen expert's ghost list (LRU lists of `capacity / 2`). A miss found in
//! an expert's ghost list multiplies that expert's weight by
//! `exp(-learning_rate)`; the weights are renormalised on every miss. Every
//! `capacity` requests the learning rate moves with the hit rate (the
//! paper's gradient step), restarting at a random value after ten
//! unproductive periods.
//!
//! Knobs ([`CacheusConfig`]): none of the algorithm's (libCacheSim has none
//! either); the random generator, its seed, the starting learning rate
//! (default: drawn from the generator) and `grow_sr` (true), which picks
//! between libCacheSim's two versions of SR-LRU. libCacheSim's `cachesim` creates
//! every cache in its main thread (each draws its learning rate there, in
//! creation order) and then runs each from seed 0 in a worker thread; a
//! Python process draws both from one thread's generator, as we do.
//!
//! Maps to libCacheSim's `Cacheus` (`Cacheus.c`, `SR_LRU.c`, `CR_LFU.c`)
//! step for step, with its random draws ([`crate::rng`]: the starting
//! learning rate `0.001 + (next % 1000) / 1000`, one draw
//! `(next % 100) / 100 < w_lru` per weighted eviction, even when the
//! experts agree). Where libCacheSim departs from the paper, so do we:
//! - `SR` and `R` start at `capacity / 2` each (integer division; with an
//!   odd capacity `SR + R` is one short of it, so in object mode the
//!   weighted eviction never runs and Cacheus is SR-LRU alone). `SR` grows
//!   when a unit that left it unhit returns from `H`:
//!   `SR += max(1, ⌊demoted / new⌋ + 0.5)` (counts of units demoted from
//!   `R` and of new units sent to `H`, which libCacheSim never decrements
//!   on some paths and we follow), at most the occupancy minus one,
//!   truncated, `R` taking the rest. 0.3.5 does this; `aa0fc40` lost the
//!   flag on the way from `H` and never grew `SR` (`grow_sr = false`). The
//!   paper's shrinking of `SR` on a hit of a demoted unit never happens in
//!   either (libCacheSim tests the flag on the fresh `R` entry).
//! - Units `SR`'s overflow pushes out leave the cache without a draw and
//!   without entering either ghost list.
//! - The hit rate of a learning-rate period is `hits / capacity` in integer
//!   division, so 0 unless every request hit: the learning rate only shrinks
//!   (`lr -= lr · |Δlr|`) until `Δlr` underflows, and the random restart
//!   needs a period of only hits. In byte mode a period is `capacity` bytes'
//!   worth of requests, so it rarely ends.
//!
//! With the defaults this equals libCacheSim 0.3.5 run in a fresh Python
//! process exactly, and with `generator = "mmix"`, `grow_sr = false` and
//! `cachesim`'s learning rates, `aa0fc40` (see `docs/policies.md`).

use serde::{Deserialize, Serialize};

use crate::freq::FreqBuckets;
use crate::index::{KeyIndex, Keyed};
use crate::list::{Index, List, NIL, Slab};
use crate::rng::{Generator, Rng};
use crate::{Access, Ahead, Capacity, ConfigError, Policy};

/// Cacheus's knobs: none of the algorithm's (libCacheSim has none), only
/// which of libCacheSim's random generators to replay.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CacheusConfig {
    /// `"lehmer64"` (libCacheSim 0.3.5's, the default) or `"mmix"`
    /// (`aa0fc40`'s). See [`crate::rng`].
    pub generator: Generator,
    /// The generator's starting state; default: a fresh libCacheSim
    /// thread's. A Lehmer64 seed must not be 0.
    pub seed: Option<u64>,
    /// The starting learning rate, > 0; default: drawn from the generator
    /// as libCacheSim draws it, `0.001 + (next % 1000) / 1000`.
    pub learning_rate: Option<f64>,
    /// Whether a unit that left `SR` unhit and comes back from `H` grows
    /// `SR` (the paper's adaptation, as libCacheSim 0.3.5 does it). Default
    /// true; false is `aa0fc40`, where `SR` and `R` stay at half each.
    pub grow_sr: bool,
}

impl Default for CacheusConfig {
    fn default() -> Self {
        Self {
            generator: Generator::default(),
            seed: None,
            learning_rate: None,
            grow_sr: true,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Place {
    /// SR-LRU's scan-resistant list.
    Sr,
    /// SR-LRU's churn-resistant list.
    R,
    /// SR-LRU's history (not resident).
    H,
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    key: u64,
    charge: u64,
    place: Place,
    /// Resident: the node in CR-LFU's buckets.
    freq_node: Index,
    /// In `H`: the CR-LFU frequency the unit left with.
    frequency: u64,
    new_obj: bool,
    demoted: bool,
}

impl Keyed for Entry {
    fn key(&self) -> u64 {
        self.key
    }
}

#[derive(Clone, Copy, Debug)]
struct Ghost {
    key: u64,
    charge: u64,
    /// Evicted by SR-LRU (else by CR-LFU).
    lru: bool,
}

impl Keyed for Ghost {
    fn key(&self) -> u64 {
        self.key
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct Part {
    /// Front = most recent.
    list: List,
    used: u64,
}

/// Cacheus replacement.
#[derive(Debug)]
pub struct Cacheus {
    capacity: Capacity,
    /// Units in `SR`, `R` and `H`.
    map: KeyIndex,
    slab: Slab<Entry>,
    sr: Part,
    r: Part,
    h: Part,
    sr_limit: u64,
    r_limit: u64,
    /// CR-LFU over the resident units.
    freq: FreqBuckets,
    /// The experts' ghost lists.
    ghost_map: KeyIndex,
    ghosts: Slab<Ghost>,
    lru_ghosts: Part,
    lfu_ghosts: Part,
    ghost_limit: u64,
    w_lru: f64,
    w_lfu: f64,
    lr: f64,
    lr_previous: f64,
    hit_rate_previous: f64,
    unlearn_count: u32,
    /// Hits in the current learning-rate period.
    period_hits: u64,
    requests: u64,
    rng: Rng,
    /// Units that left `SR` as new (never hit) for `H` (libCacheSim's
    /// `C_new`; never decremented).
    new_in_history: u64,
    /// Units demoted from `R` to `SR` and still flagged (`C_demoted`).
    demoted: u64,
    /// Whether a new unit back from `H` grows `SR` (libCacheSim 0.3.5).
    grow_sr: bool,
}

impl Cacheus {
    /// An empty Cacheus cache. The capacity must be at least 2 (`SR` and
    /// `R` get half each).
    pub fn new(capacity: Capacity, config: &CacheusConfig) -> Result<Self, ConfigError> {
        let seed = config.seed.unwrap_or(config.generator.default_seed());
        if seed == 0 && config.generator == Generator::Lehmer64 {
            return Err(ConfigError::OutOfRange {
                policy: "cacheus",
                parameter: "seed",
                value: "0".into(),
                expected: "not 0 for Lehmer64 (0 is its fixed point)",
            });
        }
        let limit = capacity.limit();
        if limit < 2 {
            return Err(ConfigError::CapacityTooSmall {
                policy: "cacheus",
                capacity: limit,
                reason: "SR and R get half of it each, so it must be at least 2",
            });
        }
        if let Some(lr) = config.learning_rate
            && !(lr.is_finite() && lr > 0.0)
        {
            return Err(ConfigError::OutOfRange {
                policy: "cacheus",
                parameter: "learning_rate",
                value: lr.to_string(),
                expected: "a finite number > 0",
            });
        }
        let mut rng = Rng::new(config.generator, seed);
        let lr = config
            .learning_rate
            .unwrap_or_else(|| 0.001 + rng.permille());
        Ok(Self {
            capacity,
            map: KeyIndex::default(),
            slab: Slab::new(),
            sr: Part::default(),
            r: Part::default(),
            h: Part::default(),
            sr_limit: limit / 2,
            r_limit: limit / 2,
            freq: FreqBuckets::default(),
            ghost_map: KeyIndex::default(),
            ghosts: Slab::new(),
            lru_ghosts: Part::default(),
            lfu_ghosts: Part::default(),
            // libCacheSim: (uint64_t)((double)cache_size / 2 * 1).
            ghost_limit: (limit as f64 / 2.0) as u64,
            w_lru: 0.5,
            w_lfu: 0.5,
            lr,
            lr_previous: 0.0,
            hit_rate_previous: 0.0,
            unlearn_count: 0,
            period_hits: 0,
            requests: 0,
            rng,
            new_in_history: 0,
            demoted: 0,
            grow_sr: config.grow_sr,
        })
    }

    fn part_mut(&mut self, place: Place) -> &mut Part {
        match place {
            Place::Sr => &mut self.sr,
            Place::R => &mut self.r,
            Place::H => &mut self.h,
        }
    }

    fn unlink(&mut self, index: Index) {
        let entry = *self.slab.get(index);
        let part = self.part_mut(entry.place);
        let mut list = part.list;
        part.used -= entry.charge;
        self.slab.unlink(&mut list, index);
        self.part_mut(entry.place).list = list;
    }

    fn push_front(&mut self, index: Index, place: Place) {
        let charge = self.slab.get(index).charge;
        self.slab.get_mut(index).place = place;
        let part = self.part_mut(place);
        let mut list = part.list;
        part.used += charge;
        self.slab.push_front(&mut list, index);
        self.part_mut(place).list = list;
    }

    /// Moves `R`'s oldest units to `SR`'s front while `R` holds more than
    /// `limit`.
    fn demote_while_r_over(&mut self, limit: u64) {
        while self.r.used > limit {
            let Some(oldest) = self.r.list.back() else {
                break;
            };
            self.unlink(oldest);
            self.push_front(oldest, Place::Sr);
            let entry = self.slab.get_mut(oldest);
            entry.new_obj = false;
            entry.demoted = true;
            self.demoted += 1;
        }
    }

    /// Resident unit `index` leaves the cache for `H`, carrying its CR-LFU
    /// frequency; `H` is then trimmed.
    fn send_to_history(&mut self, index: Index) -> u64 {
        self.unlink(index);
        let node = self.slab.get(index).freq_node;
        let frequency = self.freq.remove(node);
        {
            let entry = self.slab.get_mut(index);
            entry.frequency = frequency;
            entry.freq_node = NIL;
            if entry.new_obj {
                self.new_in_history += 1;
            }
            if entry.demoted {
                self.demoted -= 1;
            }
        }
        self.push_front(index, Place::H);
        let key = self.slab.get(index).key;
        // libCacheSim trims while H's occupancy is >= its size.
        while self.h.used >= self.capacity.limit() {
            let Some(oldest) = self.h.list.back() else {
                break;
            };
            self.unlink(oldest);
            let gone = self.slab.get(oldest).key;
            self.map.remove(gone, &self.slab);
            self.slab.remove(oldest);
        }
        key
    }

    fn remove_ghost(&mut self, index: Index) {
        let ghost = *self.ghosts.get(index);
        let part = if ghost.lru {
            &mut self.lru_ghosts
        } else {
            &mut self.lfu_ghosts
        };
        part.used -= ghost.charge;
        self.ghosts.unlink(&mut part.list, index);
        self.ghost_map.remove(ghost.key, &self.ghosts);
        self.ghosts.remove(index);
    }

    /// libCacheSim's `lru_g->get` / `lfu_g->get` of an evicted unit.
    fn add_ghost(&mut self, key: u64, charge: u64, lru: bool) {
        if let Some(index) = self.ghost_map.get(key, &self.ghosts) {
            self.remove_ghost(index);
        }
        if charge > self.ghost_limit {
            return;
        }
        loop {
            let part = if lru {
                self.lru_ghosts
            } else {
                self.lfu_ghosts
            };
            if part.used + charge <= self.ghost_limit {
                break;
            }
            let Some(oldest) = part.list.back() else {
                break;
            };
            self.remove_ghost(oldest);
        }
        let index = self.ghosts.insert(Ghost { key, charge, lru });
        let part = if lru {
            &mut self.lru_ghosts
        } else {
            &mut self.lfu_ghosts
        };
        part.used += charge;
        self.ghosts.push_front(&mut part.list, index);
        self.ghost_map.insert(key, index, &self.ghosts);
    }

    /// libCacheSim's `Cacheus_evict`: one weighted eviction.
    fn evict(&mut self) -> u64 {
        let lru = if self.sr.used != 0 {
            self.sr.list.back()
        } else {
            self.r.list.back()
        }
        .expect("a unit to evict");
        let lfu = self.freq.newest_of_least().expect("a unit to evict");
        let lru_chosen = self.rng.percent() < self.w_lru;
        let victim = if lru_chosen { lru } else { lfu };
        let charge = self.slab.get(victim).charge;
        let key = self.send_to_history(victim);
        if lru != lfu {
            self.add_ghost(key, charge, lru_chosen);
        }
        key
    }

    /// SR-LRU's adaptation when a unit that left `SR` unhit comes back from
    /// `H`: `SR` was too small. `SR += max(1, ⌊demoted / new⌋ + 0.5)`, at most
    /// the occupancy minus one, truncated to an integer, and `R` gets the
    /// rest of the capacity (libCacheSim's arithmetic, `SR_LRU.c`).
    fn grow_sr_limit(&mut self) {
        let ratio = (self.demoted / self.new_in_history.max(1)) as i32;
        let delta = (f64::from(ratio) + 0.5).max(1.0);
        let ceiling = (self.sr.used + self.r.used) as f64 - 1.0;
        self.sr_limit = if self.sr_limit as f64 + delta > ceiling {
            ceiling as u64
        } else {
            (self.sr_limit as f64 + delta) as u64
        };
        self.r_limit = self.capacity.limit() - self.sr_limit;
    }

    /// libCacheSim's `update_lr`, at the end of every `capacity`-th request.
    fn update_learning_rate(&mut self) {
        let interval = self.capacity.limit();
        let hit_rate = (self.period_hits / interval) as f64;
        let delta_hit_rate = hit_rate - self.hit_rate_previous;
        let delta_lr = self.lr - self.lr_previous;
        self.lr_previous = self.lr;
        self.hit_rate_previous = hit_rate;
        if delta_lr != 0.0 {
            let sign = if delta_hit_rate / delta_lr > 0.0 {
                1.0
            } else {
                -1.0
            };
            let step = sign * (self.lr * delta_lr).abs();
            self.lr = if self.lr + step > 0.001 {
                self.lr + step
            } else {
                0.0001
            };
            self.unlearn_count = 0;
        } else if hit_rate == 0.0 || delta_hit_rate <= 0.0 {
            self.unlearn_count += 1;
        } else if self.unlearn_count >= 10 {
            self.unlearn_count = 0;
            self.lr = 0.001 + self.rng.permille();
        }
        self.period_hits = 0;
    }

    /// A miss: regret for the expert whose ghost it is; weights renormalised.
    fn learn_from_miss(&mut self, key: u64) {
        if let Some(index) = self.ghost_map.get(key, &self.ghosts) {
            if self.ghosts.get(index).lru {
                self.w_lru *= (-self.lr).exp();
            } else {
                self.w_lfu *= (-self.lr).exp();
            }
            self.remove_ghost(index);
        }
        self.w_lru /= self.w_lru + self.w_lfu;
        self.w_lfu = 1.0 - self.w_lru;
    }
}

impl Policy for Cacheus {
    fn name(&self) -> &'static str {
        "cacheus"
    }

    fn prefetch(&self, key: u64, ahead: Ahead) {
        self.map.prefetch_stage(key, &self.slab, ahead, true);
    }

    fn lookup(&mut self, access: &Access) -> bool {
        // The previous request's end: libCacheSim updates the learning rate
        // after a request whose number is a multiple of the capacity.
        if self.requests != 0 && self.requests.is_multiple_of(self.capacity.limit()) {
            self.update_learning_rate();
        }
        self.requests += 1;
        let found = self.map.get(access.key, &self.slab);
        let Some(index) = found.filter(|&i| self.slab.get(i).place != Place::H) else {
            self.learn_from_miss(access.key);
            return false;
        };
        if self.slab.get(index).place == Place::R {
            self.slab.move_to_front(&mut self.r.list, index);
        } else {
            self.unlink(index);
            self.push_front(index, Place::R);
            // libCacheSim makes a fresh R entry here: both flags clear, and
            // the demoted count not decremented.
            let entry = self.slab.get_mut(index);
            entry.new_obj = false;
            entry.demoted = false;
            self.demote_while_r_over(self.r_limit);
        }
        self.freq.bump(self.slab.get(index).freq_node);
        self.period_hits += 1;
        true
    }

    fn admit(&mut self, access: &Access, victims: &mut Vec<u64>) -> bool {
        let charge = self.capacity.charge(access.size);
        let limit = self.capacity.limit();
        if charge > limit {
            return false;
        }
        let found = self.map.get(access.key, &self.slab);
        if found.is_some_and(|i| self.slab.get(i).place != Place::H) {
            return true; // `admit` without its `lookup`, of a resident key
        }
        while self.sr.used + self.r.used + charge > limit {
            victims.push(self.evict());
        }
        // The entry may have been trimmed from H by the evictions.
        let history = self.map.get(access.key, &self.slab);
        if charge
            > if history.is_some() {
                self.r_limit
            } else {
                self.sr_limit
            }
        {
            return false; // SR_LRU_can_insert, after the evictions
        }
        let index = if let Some(index) = history {
            let frequency = self.slab.get(index).frequency + 1;
            self.slab.get_mut(index).freq_node = self.freq.insert(index, frequency);
            self.unlink(index);
            self.slab.get_mut(index).charge = charge;
            self.demote_while_r_over(self.r_limit.saturating_sub(charge));
            self.push_front(index, Place::R);
            if self.grow_sr && self.slab.get(index).new_obj {
                self.grow_sr_limit();
            }
            let entry = self.slab.get_mut(index);
            entry.new_obj = false;
            entry.demoted = false;
            index
        } else {
            let index = self.slab.insert(Entry {
                key: access.key,
                charge,
                place: Place::Sr,
                freq_node: NIL,
                frequency: 0,
                new_obj: true,
                demoted: false,
            });
            self.slab.get_mut(index).freq_node = self.freq.insert(index, 1);
            self.push_front(index, Place::Sr);
            self.map.insert(access.key, index, &self.slab);
            index
        };
        debug_assert!(self.slab.get(index).place != Place::H);
        while self.sr.used > self.sr_limit {
            let Some(oldest) = self.sr.list.back() else {
                break;
            };
            victims.push(self.send_to_history(oldest));
        }
        true
    }

    fn remove(&mut self, key: u64) -> bool {
        match self.map.get(key, &self.slab) {
            Some(index) if self.slab.get(index).place != Place::H => {
                self.send_to_history(index);
                true
            }
            _ => false,
        }
    }

    fn contains(&self, key: u64) -> bool {
        self.map
            .get(key, &self.slab)
            .is_some_and(|index| self.slab.get(index).place != Place::H)
    }

    fn len(&self) -> usize {
        self.sr.list.len() + self.r.list.len()
    }

    fn used(&self) -> u64 {
        self.sr.used + self.r.used
    }

    fn capacity(&self) -> Capacity {
        self.capacity
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::{Generator, Rng};
    use crate::testing::{self, Reference};
    use proptest::prelude::*;

    /// Naive Cacheus: vectors scanned per access, front = most recent,
    /// transcribing libCacheSim's `Cacheus.c`, `SR_LRU.c` and `CR_LFU.c`.
    struct NaiveCacheus {
        c: u64,
        capacity: Capacity,
        /// (key, charge, new, demoted).
        sr: Vec<(u64, u64, bool, bool)>,
        /// (key, charge).
        r: Vec<(u64, u64)>,
        /// (key, charge, frequency, new).
        h: Vec<(u64, u64, u64, bool)>,
        /// Residents' (key, frequency, when it got there).
        freqs: Vec<(u64, u64, u64)>,
        /// (key, charge); SR-LRU's ghosts and CR-LFU's.
        ghosts: [Vec<(u64, u64)>; 2],
        sr_limit: u64,
        r_limit: u64,
        new_in_history: u64,
        demoted: u64,
        w_lru: f64,
        w_lfu: f64,
        lr: f64,
        lr_previous: f64,
        hit_rate_previous: f64,
        unlearn: u32,
        hits: u64,
        n: u64,
        tick: u64,
        rng: Rng,
    }

    fn sum<T>(items: &[T], charge: impl Fn(&T) -> u64) -> u64 {
        items.iter().map(charge).sum()
    }

    impl NaiveCacheus {
        fn new(capacity: Capacity) -> Self {
            let mut rng = Rng::new(Generator::Lehmer64, 0xdead_beef);
            let lr = 0.001 + rng.permille();
            let c = capacity.limit();
            Self {
                c,
                capacity,
                sr: vec![],
                r: vec![],
                h: vec![],
                freqs: vec![],
                ghosts: [vec![], vec![]],
                sr_limit: c / 2,
                r_limit: c / 2,
                new_in_history: 0,
                demoted: 0,
                w_lru: 0.5,
                w_lfu: 0.5,
                lr,
                lr_previous: 0.0,
                hit_rate_previous: 0.0,
                unlearn: 0,
                hits: 0,
                n: 0,
                tick: 0,
                rng,
            }
        }

        fn used(&self) -> u64 {
            sum(&self.sr, |i| i.1) + sum(&self.r, |i| i.1)
        }

        fn demote_while(&mut self, over: impl Fn(u64) -> bool) {
            while over(sum(&self.r, |i| i.1)) {
                let (key, charge) = self.r.pop().unwrap();
                self.sr.insert(0, (key, charge, false, true));
                self.demoted += 1;
            }
        }

        /// A resident unit leaves for H with its frequency.
        fn send_to_history(&mut self, key: u64) {
            let (charge, new, demoted) = if let Some(at) = self.sr.iter().position(|i| i.0 == key) {
                let item = self.sr.remove(at);
                (item.1, item.2, item.3)
            } else {
                let at = self.r.iter().position(|i| i.0 == key).unwrap();
                (self.r.remove(at).1, false, false)
            };
            let at = self.freqs.iter().position(|f| f.0 == key).unwrap();
            let frequency = self.freqs.remove(at).1;
            self.new_in_history += u64::from(new);
            self.demoted -= u64::from(demoted);
            self.h.insert(0, (key, charge, frequency, new));
            while sum(&self.h, |i| i.1) >= self.c {
                self.h.pop();
            }
        }

        fn ghost(&mut self, which: usize, key: u64, charge: u64) {
            let limit = (self.c as f64 / 2.0) as u64;
            if charge > limit {
                return;
            }
            while sum(&self.ghosts[which], |g| g.1) + charge > limit {
                self.ghosts[which].pop();
            }
            self.ghosts[which].insert(0, (key, charge));
        }

        fn tick(&mut self) -> u64 {
            self.tick += 1;
            self.tick
        }
    }

    impl Reference for NaiveCacheus {
        #[allow(clippy::float_cmp)]
        fn access(&mut self, access: &Access) -> (bool, Vec<u64>) {
            if self.n != 0 && self.n.is_multiple_of(self.c) {
                let hit_rate = (self.hits / self.c) as f64;
                let delta_hit_rate = hit_rate - self.hit_rate_previous;
                let delta_lr = self.lr - self.lr_previous;
                self.lr_previous = self.lr;
                self.hit_rate_previous = hit_rate;
                if delta_lr != 0.0 {
                    let sign = if delta_hit_rate / delta_lr > 0.0 {
                        1.0
                    } else {
                        -1.0
                    };
                    let next = self.lr + sign * (self.lr * delta_lr).abs();
                    self.lr = if next > 0.001 { next } else { 0.0001 };
                    self.unlearn = 0;
                } else if hit_rate == 0.0 || delta_hit_rate <= 0.0 {
                    self.unlearn += 1;
                } else if self.unlearn >= 10 {
                    self.unlearn = 0;
                    self.lr = 0.001 + self.rng.permille();
                }
                self.hits = 0;
            }
            self.n += 1;
            let key = access.key;
            let tick = self.tick();
            if let Some(f) = self.freqs.iter_mut().find(|f| f.0 == key) {
                f.1 += 1;
                f.2 = tick;
                if let Some(at) = self.r.iter().position(|i| i.0 == key) {
                    let item = self.r.remove(at);
                    self.r.insert(0, item);
                } else {
                    let at = self.sr.iter().position(|i| i.0 == key).unwrap();
                    let item = self.sr.remove(at);
                    self.r.insert(0, (item.0, item.1));
                    let limit = self.r_limit;
                    self.demote_while(|used| used > limit);
                }
                self.hits += 1;
                return (true, vec![]);
            }
            for which in 0..2 {
                if let Some(at) = self.ghosts[which].iter().position(|g| g.0 == key) {
                    if which == 0 {
                        self.w_lru *= (-self.lr).exp();
                    } else {
                        self.w_lfu *= (-self.lr).exp();
                    }
                    self.ghosts[which].remove(at);
                }
            }
            self.w_lru /= self.w_lru + self.w_lfu;
            self.w_lfu = 1.0 - self.w_lru;
            let charge = self.capacity.charge(access.size);
            let mut victims = vec![];
            if charge > self.c {
                return (false, victims);
            }
            while self.used() + charge > self.c {
                let lru = if sum(&self.sr, |i| i.1) != 0 {
                    self.sr.last().unwrap().0
                } else {
                    self.r.last().unwrap().0
                };
                let lfu = self
                    .freqs
                    .iter()
                    .min_by_key(|f| (f.1, std::cmp::Reverse(f.2)))
                    .unwrap()
                    .0;
                let lru_chosen = self.rng.percent() < self.w_lru;
                let victim = if lru_chosen { lru } else { lfu };
                let victim_charge = self.freqs.iter().find(|f| f.0 == victim).map(|_| {
                    self.sr
                        .iter()
                        .map(|i| (i.0, i.1))
                        .chain(self.r.iter().copied())
                        .find(|i| i.0 == victim)
                        .unwrap()
                        .1
                });
                self.send_to_history(victim);
                if lru != lfu {
                    self.ghost(usize::from(!lru_chosen), victim, victim_charge.unwrap());
                }
                victims.push(victim);
            }
            let history = self.h.iter().position(|i| i.0 == key);
            let limit = if history.is_some() {
                self.r_limit
            } else {
                self.sr_limit
            };
            if charge > limit {
                return (false, victims);
            }
            let tick = self.tick();
            if let Some(at) = history {
                let (_, _, frequency, new) = self.h.remove(at);
                self.freqs.push((key, frequency + 1, tick));
                let limit = self.r_limit;
                self.demote_while(|used| used + charge > limit);
                self.r.insert(0, (key, charge));
                if new {
                    let ratio = (self.demoted / self.new_in_history) as i32;
                    let delta = (f64::from(ratio) + 0.5).max(1.0);
                    let ceiling = self.used() as f64 - 1.0;
                    self.sr_limit = if self.sr_limit as f64 + delta > ceiling {
                        ceiling as u64
                    } else {
                        (self.sr_limit as f64 + delta) as u64
                    };
                    self.r_limit = self.c - self.sr_limit;
                }
            } else {
                self.freqs.push((key, 1, tick));
                self.sr.insert(0, (key, charge, true, false));
            }
            while sum(&self.sr, |i| i.1) > self.sr_limit {
                let oldest = self.sr.last().unwrap().0;
                self.send_to_history(oldest);
                victims.push(oldest);
            }
            (false, victims)
        }
    }

    fn cacheus(capacity: Capacity) -> Cacheus {
        Cacheus::new(capacity, &CacheusConfig::default()).unwrap()
    }

    #[test]
    fn a_scan_passes_through_sr_and_leaves_r_alone() {
        let mut c = cacheus(Capacity::Objects(8));
        let mut victims = vec![];
        // 1..=4 enter SR; hits move them to R (limit 4).
        for access in testing::keys(&[1, 2, 3, 4, 1, 2, 3, 4]) {
            c.access(&access, &mut victims);
        }
        assert!(victims.is_empty());
        assert_eq!(c.r.list.len(), 4);
        // A scan of 100 new keys goes through SR only.
        let scan: Vec<u64> = (100..200).collect();
        for access in testing::keys(&scan) {
            c.access(&access, &mut victims);
        }
        for key in 1..=4 {
            assert!(c.contains(key), "{key} survived the scan in R");
        }
        assert_eq!(victims.len(), 96, "the scan evicted only itself");
    }

    #[test]
    fn a_new_unit_back_from_history_grows_sr() {
        // SR and R get 5 of 10 each. 1..=3 are hit into R; 4..=8 fill SR;
        // 9 pushes 4 (new, never hit) out to H (no weighted eviction: 9 of
        // 10 used). 4 again enters R from H and, being new, tells SR-LRU
        // that SR was too small: SR += max(1, 0 demoted / 1 new + 0.5).
        let trace = testing::keys(&[1, 2, 3, 1, 2, 3, 4, 5, 6, 7, 8, 9, 4]);
        for (grow_sr, limits) in [(true, (6, 4)), (false, (5, 5))] {
            let config = CacheusConfig {
                grow_sr,
                ..CacheusConfig::default()
            };
            let mut c = Cacheus::new(Capacity::Objects(10), &config).unwrap();
            let mut victims = vec![];
            for access in &trace {
                c.access(access, &mut victims);
            }
            assert_eq!(victims, [4]);
            assert!(c.contains(4));
            assert_eq!((c.sr_limit, c.r_limit), limits, "grow_sr = {grow_sr}");
        }
    }

    #[test]
    fn a_unit_back_from_history_keeps_its_frequency() {
        // SR and R get 3 of 7 each (so the weighted eviction never runs).
        // 1 is hit twice (frequency 3, in R); 2, 3 and 4 are hit into R,
        // demoting 1 to SR; 5, 6 and 7 then overflow SR and 1, its oldest,
        // leaves for H with its frequency.
        let mut c = cacheus(Capacity::Objects(7));
        let mut victims = vec![];
        for access in testing::keys(&[1, 1, 1, 2, 2, 3, 3, 4, 4, 5, 6, 7]) {
            c.access(&access, &mut victims);
        }
        assert_eq!(victims, [1]);
        let index = c.map.get(1, &c.slab).unwrap();
        assert_eq!(
            (c.slab.get(index).place, c.slab.get(index).frequency),
            (Place::H, 3)
        );
        c.access(&testing::keys(&[1])[0], &mut victims);
        let node = c.slab.get(c.map.get(1, &c.slab).unwrap()).freq_node;
        assert_eq!(c.freq.frequency(node), 4, "old frequency + 1");
    }

    #[test]
    fn bad_configs_are_errors() {
        assert!(matches!(
            Cacheus::new(Capacity::Objects(1), &CacheusConfig::default()),
            Err(ConfigError::CapacityTooSmall { .. })
        ));
        for config in [
            CacheusConfig {
                seed: Some(0),
                ..CacheusConfig::default()
            },
            CacheusConfig {
                learning_rate: Some(-1.0),
                ..CacheusConfig::default()
            },
        ] {
            assert!(matches!(
                Cacheus::new(Capacity::Objects(4), &config),
                Err(ConfigError::OutOfRange {
                    policy: "cacheus",
                    ..
                })
            ));
        }
    }

    proptest! {
        #[test]
        fn matches_naive_model(trace in testing::trace_strategy(40, 400, 5), cap in 2u64..20, bytes: bool) {
            let capacity = if bytes { Capacity::Bytes(cap) } else { Capacity::Objects(cap) };
            let mut naive = NaiveCacheus::new(capacity);
            testing::assert_matches_reference(&mut cacheus(capacity), &mut naive, &trace);
            testing::replay_checked(&mut cacheus(capacity), &trace);
        }
    }
}
