//! LeCaR: learning cache replacement with an LRU and an LFU expert.
//!
//! Origin: G. Vietri, L. V. Rodriguez, W. A. Martinez, S. Lyons, J. Liu,
//! R. Rangaswami, M. Zhao, G. Narasimhan, "Driving Cache Replacement with
//! ML-based LeCaR", HotStorage 2018.
//!
//! Every resident unit is in an LRU list and in LFU frequency buckets. To
//! make room, the LRU expert proposes its least recently used unit, the LFU
//! expert its least frequently used one (ties: the one that reached that
//! frequency first). If they agree, that unit goes and is forgotten.
//! Otherwise a random draw picks the LRU expert's unit with probability
//! `w_lru`, the LFU expert's with `w_lfu = 1 - w_lru`, and the unit goes into
//! that expert's history (a ghost list of at most half the capacity, oldest
//! ghosts dropped). A miss that finds a ghost is the expert's regret: its
//! weight is multiplied by `exp(-learning_rate · d^t)`, where `t` is the
//! number of requests since the eviction and `d = discount^(1/capacity)`,
//! and both weights are renormalised. The unit then enters afresh
//! (frequency 1).
//!
//! Knobs ([`LecarConfig`], libCacheSim's defaults): `learning_rate` 0.45,
//! `discount` 0.005, `lru_weight` 0.5 (the starting weight),
//! `update_weights` true, `generator` "lehmer64" and `seed` 0xdeadbeef
//! (a fresh libCacheSim 0.3.5 thread's; `generator = "mmix"`, seed 0, is
//! `aa0fc40`'s).
//!
//! Maps to libCacheSim's `LeCaR` (`cache/eviction/LeCaR.c`, the same code
//! in `aa0fc40` and 0.3.5) step for step, including its floating point (the
//! `1e-10` terms that keep a weight from reaching 0), its random draws
//! ([`crate::rng`]; `r = (next % 100) / 100`, LRU's pick if `r < w_lru`, no
//! draw when the experts agree) and its history limits (each at most
//! `capacity / 2`, integer division, in the capacity's unit). libCacheSim's
//! generator is one per thread and never reseeded, so its numbers depend on
//! what ran before in the thread; ours is one per policy. We equal a run in
//! a fresh libCacheSim thread exactly (see `docs/policies.md`).
//!
//! Departures: libCacheSim's `lru-weight` sets only `w_lru` and leaves
//! `w_lfu` at 0.5; ours starts `w_lfu` at `1 - lru_weight` (the same at the
//! default). libCacheSim keeps a unit both experts chose in its hash table
//! as an inert ghost until its next request; ours forgets it at once (the
//! same misses).

use serde::{Deserialize, Serialize};

use crate::freq::FreqBuckets;
use crate::index::{KeyIndex, Keyed};
use crate::list::{Index, List, Slab};
use crate::rng::{Generator, Rng};
use crate::{Access, Ahead, Capacity, ConfigError, Policy};

/// LeCaR's knobs; the defaults are libCacheSim's.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LecarConfig {
    /// How hard a regret lowers an expert's weight (> 0). Default 0.45.
    pub learning_rate: f64,
    /// What a regret is worth after `capacity` requests, relative to an
    /// immediate one (in `(0, 1]`): the discount per request is
    /// `discount^(1/capacity)`. Default 0.005.
    pub discount: f64,
    /// The LRU expert's starting weight, in `[0, 1]`. Default 0.5.
    pub lru_weight: f64,
    /// Whether regrets move the weights; `false` keeps `lru_weight` fixed.
    /// Default true.
    pub update_weights: bool,
    /// Which libCacheSim random generator to replay: `"lehmer64"` (0.3.5's,
    /// the default) or `"mmix"` (`aa0fc40`'s). See [`crate::rng`].
    pub generator: Generator,
    /// The generator's starting state; default: a fresh libCacheSim
    /// thread's (`0xdeadbeef` for Lehmer64, 0 for MMIX). A Lehmer64 seed
    /// must not be 0.
    pub seed: Option<u64>,
}

impl Default for LecarConfig {
    fn default() -> Self {
        Self {
            learning_rate: 0.45,
            discount: 0.005,
            lru_weight: 0.5,
            update_weights: true,
            generator: Generator::Lehmer64,
            seed: None,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Resident,
    /// Evicted by the LRU expert alone.
    LruGhost,
    /// Evicted by the LFU expert alone.
    LfuGhost,
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    key: u64,
    charge: u64,
    state: State,
    /// Resident: the node in the frequency buckets. Ghost: unused.
    freq_node: Index,
    /// Ghost: the request count when it was evicted.
    evicted_at: u64,
}

impl Keyed for Entry {
    fn key(&self) -> u64 {
        self.key
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct Ghosts {
    /// Front = most recently evicted.
    list: List,
    used: u64,
}

/// LeCaR replacement.
#[derive(Debug)]
pub struct Lecar {
    capacity: Capacity,
    used: u64,
    /// Resident units and ghosts.
    map: KeyIndex,
    slab: Slab<Entry>,
    /// Resident units, front = most recently used.
    queue: List,
    freq: FreqBuckets,
    lru_ghosts: Ghosts,
    lfu_ghosts: Ghosts,
    /// Each history's limit: `capacity / 2`.
    ghost_limit: u64,
    w_lru: f64,
    w_lfu: f64,
    learning_rate: f64,
    /// `discount^(1/capacity)`.
    discount: f64,
    update_weights: bool,
    rng: Rng,
    /// Requests seen (libCacheSim's `n_req`).
    requests: u64,
}

impl Lecar {
    /// An empty LeCaR cache.
    pub fn new(capacity: Capacity, config: &LecarConfig) -> Result<Self, ConfigError> {
        let out_of_range = |parameter, value: f64, expected| ConfigError::OutOfRange {
            policy: "lecar",
            parameter,
            value: value.to_string(),
            expected,
        };
        if !(config.learning_rate.is_finite() && config.learning_rate > 0.0) {
            return Err(out_of_range(
                "learning_rate",
                config.learning_rate,
                "a finite number > 0",
            ));
        }
        if !(config.discount > 0.0 && config.discount <= 1.0) {
            return Err(out_of_range("discount", config.discount, "in (0, 1]"));
        }
        if !(0.0..=1.0).contains(&config.lru_weight) {
            return Err(out_of_range("lru_weight", config.lru_weight, "in [0, 1]"));
        }
        let seed = config.seed.unwrap_or(config.generator.default_seed());
        if seed == 0 && config.generator == Generator::Lehmer64 {
            return Err(ConfigError::OutOfRange {
                policy: "lecar",
                parameter: "seed",
                value: "0".into(),
                expected: "not 0 for Lehmer64 (0 is its fixed point)",
            });
        }
        Ok(Self {
            capacity,
            used: 0,
            map: KeyIndex::default(),
            slab: Slab::new(),
            queue: List::new(),
            freq: FreqBuckets::default(),
            lru_ghosts: Ghosts::default(),
            lfu_ghosts: Ghosts::default(),
            ghost_limit: capacity.limit() / 2,
            w_lru: config.lru_weight,
            w_lfu: 1.0 - config.lru_weight,
            learning_rate: config.learning_rate,
            discount: config.discount.powf(1.0 / capacity.limit() as f64),
            update_weights: config.update_weights,
            rng: Rng::new(config.generator, seed),
            requests: 0,
        })
    }

    /// The LRU expert's current weight.
    pub fn lru_weight(&self) -> f64 {
        self.w_lru
    }

    /// libCacheSim's `update_weight`: lowers the weight of the expert that
    /// evicted a unit `t` requests ago.
    fn regret(&mut self, lru: bool, t: u64) {
        if !self.update_weights {
            return;
        }
        let (w_update, w_other) = if lru {
            (self.w_lru, self.w_lfu)
        } else {
            (self.w_lfu, self.w_lru)
        };
        let r = self.discount.powf(t as f64);
        let w_update = w_update * (-self.learning_rate * r).exp() + 1e-10;
        let s = w_update + w_other + 2e-10;
        let (w_update, w_other) = (w_update / s, (w_other + 1e-10) / s);
        if lru {
            (self.w_lru, self.w_lfu) = (w_update, w_other);
        } else {
            (self.w_lfu, self.w_lru) = (w_update, w_other);
        }
    }

    fn ghosts_mut(&mut self, state: State) -> &mut Ghosts {
        match state {
            State::LruGhost => &mut self.lru_ghosts,
            State::LfuGhost => &mut self.lfu_ghosts,
            State::Resident => unreachable!("a resident unit has no history"),
        }
    }

    /// Unlinks ghost `index` from its history and forgets it.
    fn drop_ghost(&mut self, index: Index) {
        let entry = *self.slab.get(index);
        let ghosts = self.ghosts_mut(entry.state);
        let mut list = ghosts.list;
        ghosts.used -= entry.charge;
        self.slab.unlink(&mut list, index);
        self.ghosts_mut(entry.state).list = list;
        self.map.remove(entry.key, &self.slab);
        self.slab.remove(index);
    }

    /// Evicts one resident unit (there must be one) and returns its key.
    fn evict(&mut self) -> u64 {
        let lru = self.queue.back().expect("a unit to evict");
        let lfu = self.freq.oldest_of_least().expect("a unit to evict");
        let (victim, state) = if lru == lfu {
            (lru, None)
        } else if self.rng.percent() < self.w_lru {
            (lru, Some(State::LruGhost))
        } else {
            (lfu, Some(State::LfuGhost))
        };
        self.slab.unlink(&mut self.queue, victim);
        let entry = *self.slab.get(victim);
        self.freq.remove(entry.freq_node);
        self.used -= entry.charge;
        let Some(state) = state else {
            self.map.remove(entry.key, &self.slab);
            self.slab.remove(victim);
            return entry.key;
        };
        {
            let e = self.slab.get_mut(victim);
            e.state = state;
            e.evicted_at = self.requests;
        }
        let limit = self.ghost_limit;
        let ghosts = self.ghosts_mut(state);
        let mut list = ghosts.list;
        ghosts.used += entry.charge;
        self.slab.push_front(&mut list, victim);
        self.ghosts_mut(state).list = list;
        while self.ghosts_mut(state).used > limit {
            let Some(oldest) = self.ghosts_mut(state).list.back() else {
                break;
            };
            self.drop_ghost(oldest);
        }
        entry.key
    }
}

impl Policy for Lecar {
    fn name(&self) -> &'static str {
        "lecar"
    }

    fn prefetch(&self, key: u64, ahead: Ahead) {
        self.map.prefetch_stage(key, &self.slab, ahead, true);
    }

    fn lookup(&mut self, access: &Access) -> bool {
        self.requests += 1;
        let Some(index) = self.map.get(access.key, &self.slab) else {
            return false;
        };
        let entry = *self.slab.get(index);
        match entry.state {
            State::Resident => {
                self.slab.move_to_front(&mut self.queue, index);
                self.freq.bump(entry.freq_node);
                true
            }
            ghost => {
                self.regret(ghost == State::LruGhost, self.requests - entry.evicted_at);
                self.drop_ghost(index);
                false
            }
        }
    }

    fn admit(&mut self, access: &Access, victims: &mut Vec<u64>) -> bool {
        let charge = self.capacity.charge(access.size);
        if charge > self.capacity.limit() {
            return false;
        }
        if let Some(index) = self.map.get(access.key, &self.slab) {
            // `admit` without its `lookup`: settle the ghost as lookup would.
            if self.slab.get(index).state == State::Resident {
                return true;
            }
            self.drop_ghost(index);
        }
        while self.used + charge > self.capacity.limit() && !self.queue.is_empty() {
            victims.push(self.evict());
        }
        let index = self.slab.insert(Entry {
            key: access.key,
            charge,
            state: State::Resident,
            freq_node: crate::list::NIL,
            evicted_at: 0,
        });
        self.slab.push_front(&mut self.queue, index);
        self.slab.get_mut(index).freq_node = self.freq.insert(index, 1);
        self.map.insert(access.key, index, &self.slab);
        self.used += charge;
        true
    }

    fn remove(&mut self, key: u64) -> bool {
        let Some(index) = self.map.get(key, &self.slab) else {
            return false;
        };
        let entry = *self.slab.get(index);
        if entry.state != State::Resident {
            return false;
        }
        self.slab.unlink(&mut self.queue, index);
        self.freq.remove(entry.freq_node);
        self.map.remove(key, &self.slab);
        self.slab.remove(index);
        self.used -= entry.charge;
        true
    }

    fn contains(&self, key: u64) -> bool {
        self.map
            .get(key, &self.slab)
            .is_some_and(|index| self.slab.get(index).state == State::Resident)
    }

    fn len(&self) -> usize {
        self.queue.len()
    }

    fn used(&self) -> u64 {
        self.used
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

    /// Naive LeCaR: vectors scanned per access, transcribing `LeCaR.c`.
    struct NaiveLecar {
        capacity: Capacity,
        /// (key, charge, frequency, last access, time it reached its
        /// frequency), in no order.
        resident: Vec<(u64, u64, u64, u64, u64)>,
        /// (key, charge, eviction time), most recent first.
        lru_ghosts: Vec<(u64, u64, u64)>,
        lfu_ghosts: Vec<(u64, u64, u64)>,
        w_lru: f64,
        w_lfu: f64,
        rng: Rng,
        n: u64,
        /// Ticks every access and every insert, to order ties.
        clock: u64,
    }

    impl NaiveLecar {
        fn new(capacity: Capacity) -> Self {
            Self {
                capacity,
                resident: vec![],
                lru_ghosts: vec![],
                lfu_ghosts: vec![],
                w_lru: 0.5,
                w_lfu: 0.5,
                rng: Rng::new(Generator::Lehmer64, 0xdead_beef),
                n: 0,
                clock: 0,
            }
        }

        fn regret(&mut self, lru: bool, since: u64) {
            let discount = 0.005f64.powf(1.0 / self.capacity.limit() as f64);
            let (mut wrong, mut other) = if lru {
                (self.w_lru, self.w_lfu)
            } else {
                (self.w_lfu, self.w_lru)
            };
            wrong = wrong * (-0.45 * discount.powf(since as f64)).exp() + 1e-10;
            let sum = wrong + other + 2e-10;
            wrong /= sum;
            other = (other + 1e-10) / sum;
            if lru {
                (self.w_lru, self.w_lfu) = (wrong, other);
            } else {
                (self.w_lfu, self.w_lru) = (wrong, other);
            }
        }
    }

    impl Reference for NaiveLecar {
        fn access(&mut self, access: &Access) -> (bool, Vec<u64>) {
            self.n += 1;
            self.clock += 1;
            if let Some(item) = self.resident.iter_mut().find(|i| i.0 == access.key) {
                item.2 += 1;
                item.3 = self.clock;
                item.4 = self.clock;
                return (true, vec![]);
            }
            for lru in [true, false] {
                let ghosts = if lru {
                    &mut self.lru_ghosts
                } else {
                    &mut self.lfu_ghosts
                };
                if let Some(at) = ghosts.iter().position(|g| g.0 == access.key) {
                    let t = self.n - ghosts.remove(at).2;
                    self.regret(lru, t);
                }
            }
            let charge = self.capacity.charge(access.size);
            let mut victims = vec![];
            if charge > self.capacity.limit() {
                return (false, victims);
            }
            let half = self.capacity.limit() / 2;
            while self.resident.iter().map(|i| i.1).sum::<u64>() + charge > self.capacity.limit() {
                let lru = (0..self.resident.len())
                    .min_by_key(|&i| self.resident[i].3)
                    .unwrap();
                let lfu = (0..self.resident.len())
                    .min_by_key(|&i| (self.resident[i].2, self.resident[i].4))
                    .unwrap();
                let (at, ghost) = if lru == lfu {
                    (lru, None)
                } else if self.rng.percent() < self.w_lru {
                    (lru, Some(true))
                } else {
                    (lfu, Some(false))
                };
                let item = self.resident.remove(at);
                victims.push(item.0);
                if let Some(lru) = ghost {
                    let ghosts = if lru {
                        &mut self.lru_ghosts
                    } else {
                        &mut self.lfu_ghosts
                    };
                    ghosts.insert(0, (item.0, item.1, self.n));
                    while ghosts.iter().map(|g| g.1).sum::<u64>() > half {
                        ghosts.pop();
                    }
                }
            }
            self.resident
                .push((access.key, charge, 1, self.clock, self.clock));
            (false, victims)
        }
    }

    fn lecar(capacity: Capacity) -> Lecar {
        Lecar::new(capacity, &LecarConfig::default()).unwrap()
    }

    #[test]
    fn agreeing_experts_evict_without_a_draw_or_a_ghost() {
        let mut l = lecar(Capacity::Objects(2));
        let mut victims = vec![];
        // 1 is both the LRU and (tied at frequency 1, first there) the LFU unit.
        for access in testing::keys(&[1, 2, 3]) {
            l.access(&access, &mut victims);
        }
        assert_eq!(victims, [1]);
        let mut rng = l.rng;
        assert_eq!(rng.next_u64(), 3_189_820_697, "no number drawn yet");
        assert!(l.lru_ghosts.list.is_empty() && l.lfu_ghosts.list.is_empty());
        assert!(l.map.get(1, &l.slab).is_none(), "forgotten");
    }

    #[test]
    fn a_regret_lowers_the_expert_that_evicted() {
        // After 1, 1, 2 the LRU expert picks 1 and the LFU expert 2.
        let d = 0.005f64.powf(0.5);
        let lowered = 0.5 * (-0.45 * d).exp() + 1e-10; // t = 1 request
        let lowered = lowered / (lowered + 0.5 + 2e-10);
        for (generator, victim, ghost) in [
            // Lehmer64's first draw from 0xdeadbeef: 3189820697 % 100 = 97,
            // 0.97 >= 0.5: the LFU expert's pick.
            (Generator::Lehmer64, 2, State::LfuGhost),
            // MMIX's from 0: 1442695040888963407 % 100 = 7: LRU's.
            (Generator::Mmix, 1, State::LruGhost),
        ] {
            let config = LecarConfig {
                generator,
                ..LecarConfig::default()
            };
            let mut l = Lecar::new(Capacity::Objects(2), &config).unwrap();
            let mut victims = vec![];
            for access in testing::keys(&[1, 1, 2, 3]) {
                l.access(&access, &mut victims);
            }
            assert_eq!(victims, [victim]);
            let index = l.map.get(victim, &l.slab).unwrap();
            assert_eq!(l.slab.get(index).state, ghost);
            assert!(!l.contains(victim));
            l.access(&testing::keys(&[victim])[0], &mut victims);
            let regretful = if ghost == State::LruGhost {
                l.w_lru
            } else {
                l.w_lfu
            };
            assert!(
                (regretful - lowered).abs() < 1e-15,
                "{generator:?}: {regretful}"
            );
            assert!((l.w_lru + l.w_lfu - 1.0).abs() < 1e-9);
        }
    }

    #[test]
    fn bad_knobs_are_errors() {
        for config in [
            LecarConfig {
                learning_rate: 0.0,
                ..LecarConfig::default()
            },
            LecarConfig {
                discount: 1.5,
                ..LecarConfig::default()
            },
            LecarConfig {
                lru_weight: f64::NAN,
                ..LecarConfig::default()
            },
            LecarConfig {
                seed: Some(0),
                ..LecarConfig::default()
            },
        ] {
            assert!(matches!(
                Lecar::new(Capacity::Objects(4), &config),
                Err(ConfigError::OutOfRange {
                    policy: "lecar",
                    ..
                })
            ));
        }
    }

    proptest! {
        #[test]
        fn matches_naive_model(trace in testing::trace_strategy(40, 400, 5), cap in 1u64..20, bytes: bool) {
            let capacity = if bytes { Capacity::Bytes(cap) } else { Capacity::Objects(cap) };
            let mut naive = NaiveLecar::new(capacity);
            testing::assert_matches_reference(&mut lecar(capacity), &mut naive, &trace);
            testing::replay_checked(&mut lecar(capacity), &trace);
        }
    }
}
