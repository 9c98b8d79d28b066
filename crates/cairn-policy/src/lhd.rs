//! LHD, Least Hit Density: evict the sampled unit expected to earn the
//! fewest hits per byte per unit of time it would still occupy.
//!
//! Source: N. Beckmann, H. Chen, A. Cidon, "LHD: Improving Cache Hit Rate
//! by Maximizing Hit Density", USENIX NSDI 2018. A unit's hit density at
//! age `a` is (hits expected from now) / (size × time expected to stay):
//! counted per class of units as histograms of the ages at which units were
//! hit and were evicted, decayed and turned into densities every 2^20
//! references. Units are classed by the sum of their last two hit ages
//! (16 log-spaced classes). An eviction ranks a few random residents plus
//! the last few admitted units that looked like victims, and evicts the
//! lowest density.
//!
//! Maps to libCacheSim's `LHD` (`cache/eviction/LHD/`, the authors' C++
//! simulator code wrapped by libCacheSim; the same in 0.3.5, read from its
//! machine code, and `aa0fc40`), step for step and in the same `f32`
//! arithmetic:
//! - time counts references (hits and insertions), ages are
//!   `(now − last reference) >> shift` capped at 20,000 buckets, the shift
//!   starting at 10 and set from the number of residents at the 5th and 25th
//!   reconfiguration (stretching or compressing the histograms);
//! - until the first reconfiguration every class ranks as libCacheSim's
//!   initial "GDSF-like" table `(class + 1) / (age + 1)`;
//! - an eviction ranks 8 random residents (`associativity`, 32, once more
//!   than 50 reconfigurations have run) drawn with libCacheSim's generator
//!   ([`crate::rng`]) as `next % residents` over its array of residents
//!   (kept in the same order: appended, the last moved into a removed
//!   one's place), then the `admissions` (8) units most recently admitted
//!   with a density below the running average of victims'; the first lowest
//!   goes;
//! - each reference draws once more: with probability 1/32, while the
//!   explorer budget (1 % of the capacity) lasts and before the 50th
//!   reconfiguration, the unit becomes an "explorer", its density raised by
//!   1 so that it is hardly ever evicted;
//! - a unit of age 19,999 or more ranks lowest of all.
//!
//! Differences, none of which occurs in trace replay: a hit keeps the
//! unit's size (libCacheSim takes the request's, and lets its occupancy
//! grow past the capacity); if no candidate ranks below `f32::MAX` (only
//! units of size 0 can do that) the first sampled goes, where libCacheSim
//! fails an assertion. [`Policy::remove`] records nothing, as libCacheSim's
//! `LHD_remove`.
//!
//! Knobs: `associativity` (32), `admissions` (8), and `generator`
//! ("lehmer64", 0.3.5's; "mmix" for `aa0fc40`) and `seed` (unset: a fresh
//! libCacheSim thread's) as for [`lecar`](crate::lecar).

use serde::{Deserialize, Serialize};

use crate::rng::{Generator, Rng};
use crate::{Access, Capacity, ConfigError, KeyMap, Policy};

/// Ages are counted in this many coarsened buckets.
const MAX_AGE: usize = 20_000;
/// Classes by the sum of the last two hit ages.
const CLASSES: usize = 16;
/// References between reconfigurations.
const RECONFIGURE_EVERY: u64 = 1 << 20;
/// Histogram decay per reconfiguration.
const EWMA_DECAY: f32 = 0.9;
/// Candidates ranked per eviction until the policy has warmed up.
const EARLY_CANDIDATES: u32 = 8;
/// Reconfigurations after which `associativity` candidates are ranked.
const WARM_RECONFIGURATIONS: u32 = 50;
/// One reference in this many may become an explorer.
const EXPLORE_INVERSE_PROBABILITY: u64 = 32;
/// Share of the capacity explorers may hold.
const EXPLORER_BUDGET_FRACTION: f32 = 0.01;
/// Allowed error of the age coarsening, relative to `MAX_AGE`.
const AGE_COARSENING_ERROR_TOLERANCE: f32 = 0.01;

/// LHD parameters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LhdConfig {
    /// Random residents ranked per eviction once warmed up (8 before the
    /// 51st reconfiguration), 1..=1024. Default 32 (libCacheSim).
    pub associativity: u32,
    /// Recently admitted low-density units also ranked, 1..=64. Default 8
    /// (libCacheSim).
    pub admissions: u32,
    /// Which libCacheSim random generator to replay: `"lehmer64"` (0.3.5's,
    /// the default) or `"mmix"` (`aa0fc40`'s). See [`crate::rng`].
    pub generator: Generator,
    /// The generator's starting state; default: a fresh libCacheSim
    /// thread's. A Lehmer64 seed must not be 0.
    pub seed: Option<u64>,
}

impl Default for LhdConfig {
    fn default() -> Self {
        Self {
            associativity: 32,
            admissions: 8,
            generator: Generator::Lehmer64,
            seed: None,
        }
    }
}

/// What LHD tracks per resident (libCacheSim's `Tag`).
#[derive(Clone, Copy, Debug)]
struct Tag {
    key: u64,
    charge: u64,
    /// The charge as libCacheSim's `float` size.
    size: f32,
    /// Time of the last reference.
    timestamp: u64,
    last_hit_age: u64,
    last_last_hit_age: u64,
    explorer: bool,
}

/// Per-class age histograms and the densities modelled from them, each
/// `CLASSES × MAX_AGE`, class-major.
#[derive(Debug)]
struct Model {
    hits: Vec<f32>,
    evictions: Vec<f32>,
    densities: Vec<f32>,
}

/// `hitAgeClass`: the doublings that take `age` to `MAX_AGE` or past it,
/// at most 15 (15 for age 0). libCacheSim doubles in a loop; this counts
/// them from the leading zeros (the loop is up to 15 steps of every sampled
/// candidate's rank).
#[inline]
fn hit_age_class(age: u64) -> usize {
    const MAX: u64 = MAX_AGE as u64;
    if age >= MAX {
        return 0;
    }
    if age == 0 {
        return CLASSES - 1;
    }
    // Shifted to MAX_AGE's bit length, `age` is at most one doubling short.
    let shift = age.leading_zeros() - MAX.leading_zeros();
    let doublings = shift as usize + usize::from(age << shift < MAX);
    doublings.min(CLASSES - 1)
}

impl Tag {
    /// The offset of this unit's class in the model's arrays.
    fn class(&self) -> usize {
        hit_age_class(self.last_hit_age + self.last_last_hit_age) * MAX_AGE
    }
}

/// Least Hit Density.
#[derive(Debug)]
pub struct Lhd {
    capacity: Capacity,
    associativity: u32,
    used: u64,
    /// Residents, in libCacheSim's order (sampled by position).
    tags: Vec<Tag>,
    /// Key → position in `tags`.
    index: KeyMap<u32>,
    model: Model,
    rng: Rng,
    /// References so far.
    timestamp: u64,
    next_reconfiguration: u64,
    reconfigurations: u32,
    age_shift: u32,
    ewma_residents: f32,
    ewma_residents_mass: f32,
    /// Recently admitted units that ranked below the victims' average.
    recently_admitted: Vec<Option<u64>>,
    recently_admitted_head: u32,
    ewma_victim_density: f32,
    explorer_budget: i64,
}

impl Lhd {
    /// An empty LHD cache.
    pub fn new(capacity: Capacity, config: &LhdConfig) -> Result<Self, ConfigError> {
        let out_of_range = |parameter, value: u32, expected| ConfigError::OutOfRange {
            policy: "lhd",
            parameter,
            value: value.to_string(),
            expected,
        };
        if !(1..=1024).contains(&config.associativity) {
            return Err(out_of_range(
                "associativity",
                config.associativity,
                "1 to 1024",
            ));
        }
        if !(1..=64).contains(&config.admissions) {
            return Err(out_of_range("admissions", config.admissions, "1 to 64"));
        }
        if config.generator == Generator::Lehmer64 && config.seed == Some(0) {
            return Err(ConfigError::OutOfRange {
                policy: "lhd",
                parameter: "seed",
                value: "0".into(),
                expected: "non-zero with the lehmer64 generator",
            });
        }
        // libCacheSim starts every class at (class + 1) / (age + 1), in
        // `double`, stored as `float`; its class of our class 0 is 16.
        let mut densities = vec![0.0f32; CLASSES * MAX_AGE];
        for (class, row) in densities.chunks_exact_mut(MAX_AGE).enumerate() {
            for (age, density) in row.iter_mut().enumerate() {
                *density = ((CLASSES + class + 1) as f64 / (age + 1) as f64) as f32;
            }
        }
        Ok(Self {
            capacity,
            associativity: config.associativity,
            used: 0,
            tags: Vec::new(),
            index: KeyMap::default(),
            model: Model {
                hits: vec![0.0; CLASSES * MAX_AGE],
                evictions: vec![0.0; CLASSES * MAX_AGE],
                densities,
            },
            rng: Rng::new(
                config.generator,
                config.seed.unwrap_or(config.generator.default_seed()),
            ),
            timestamp: 0,
            next_reconfiguration: RECONFIGURE_EVERY,
            reconfigurations: 0,
            age_shift: 10,
            ewma_residents: 0.0,
            ewma_residents_mass: 0.0,
            recently_admitted: vec![None; config.admissions as usize],
            recently_admitted_head: 0,
            ewma_victim_density: 0.0,
            explorer_budget: (capacity.limit() as f32 * EXPLORER_BUDGET_FRACTION) as i64,
        })
    }

    /// `getAge`: coarsened time since the last reference, capped.
    #[inline]
    fn age(&self, tag: &Tag) -> usize {
        let age = (self.timestamp - tag.timestamp) >> self.age_shift;
        (age as usize).min(MAX_AGE - 1)
    }

    /// `getHitDensity`.
    #[inline]
    fn density(&self, tag: &Tag) -> f32 {
        let age = self.age(tag);
        if age == MAX_AGE - 1 {
            return f32::MIN;
        }
        let density = self.model.densities[tag.class() + age] / tag.size;
        if tag.explorer { density + 1.0 } else { density }
    }

    /// `rank`: the position of the unit to evict.
    fn victim(&mut self) -> usize {
        let candidates = if self.reconfigurations > WARM_RECONFIGURATIONS {
            self.associativity
        } else {
            EARLY_CANDIDATES
        };
        let mut victim = None;
        let mut first = None;
        let mut victim_rank = f32::MAX;
        let residents = self.tags.len() as u64;
        for _ in 0..candidates {
            let at = (self.rng.next_u64() % residents) as usize;
            first = first.or(Some(at));
            let rank = self.density(&self.tags[at]);
            if rank < victim_rank {
                victim = Some(at);
                victim_rank = rank;
            }
        }
        for key in self.recently_admitted.iter().flatten() {
            let Some(&at) = self.index.get(key) else {
                continue;
            };
            let rank = self.density(&self.tags[at as usize]);
            if rank < victim_rank {
                victim = Some(at as usize);
                victim_rank = rank;
            }
        }
        self.ewma_victim_density =
            EWMA_DECAY * self.ewma_victim_density + (1.0 - EWMA_DECAY) * victim_rank;
        victim.or(first).expect("at least one candidate")
    }

    /// `update`: a reference to the unit at `at` (a hit), or to a new unit
    /// of `charge` (`at` is `None`).
    fn update(&mut self, key: u64, at: Option<usize>, charge: u64) {
        let insert = at.is_none();
        let at = if let Some(at) = at {
            let tag = self.tags[at];
            let age = self.age(&tag);
            self.model.hits[tag.class() + age] += 1.0;
            if tag.explorer {
                self.explorer_budget = (self.explorer_budget as f32 + tag.size) as i64;
            }
            let tag = &mut self.tags[at];
            tag.last_last_hit_age = tag.last_hit_age;
            tag.last_hit_age = age as u64;
            at
        } else {
            self.index.insert(key, self.tags.len() as u32);
            self.tags.push(Tag {
                key,
                charge,
                size: charge as f32,
                timestamp: 0,
                last_hit_age: 0,
                last_last_hit_age: MAX_AGE as u64,
                explorer: false,
            });
            self.tags.len() - 1
        };
        self.tags[at].timestamp = self.timestamp;
        let explore = self
            .rng
            .next_u64()
            .is_multiple_of(EXPLORE_INVERSE_PROBABILITY);
        let tag = &mut self.tags[at];
        if explore && self.explorer_budget > 0 && self.reconfigurations < WARM_RECONFIGURATIONS {
            tag.explorer = true;
            self.explorer_budget = (self.explorer_budget as f32 - tag.size) as i64;
        } else {
            tag.explorer = false;
        }
        let tag = *tag;
        if insert && !explore && self.density(&tag) < self.ewma_victim_density {
            let slot = self.recently_admitted_head as usize % self.recently_admitted.len();
            self.recently_admitted[slot] = Some(key);
            self.recently_admitted_head = self.recently_admitted_head.wrapping_add(1);
        }
        self.timestamp += 1;
        self.next_reconfiguration -= 1;
        if self.next_reconfiguration == 0 {
            self.reconfigure();
            self.next_reconfiguration = RECONFIGURE_EVERY;
            self.reconfigurations += 1;
        }
    }

    /// Removes the unit at `at`, the last moving into its place; returns it.
    fn take(&mut self, at: usize) -> Tag {
        let tag = self.tags.swap_remove(at);
        self.index.remove(&tag.key);
        if let Some(moved) = self.tags.get(at) {
            self.index.insert(moved.key, at as u32);
        }
        self.used -= tag.charge;
        tag
    }

    /// `reconfigure`: decay the histograms, adapt the age coarsening, model
    /// the densities again.
    fn reconfigure(&mut self) {
        for count in self
            .model
            .hits
            .iter_mut()
            .chain(self.model.evictions.iter_mut())
        {
            *count *= EWMA_DECAY;
        }
        self.adapt_age_coarsening();
        self.model_hit_density();
    }

    /// `adaptAgeCoarsening`: at the 5th and 25th reconfiguration, set the
    /// shift so that the residents' ages span about 1 % of `MAX_AGE`
    /// buckets, and stretch or compress the histograms to it.
    fn adapt_age_coarsening(&mut self) {
        self.ewma_residents = self.ewma_residents * EWMA_DECAY + self.tags.len() as f32;
        self.ewma_residents_mass = self.ewma_residents_mass * EWMA_DECAY + 1.0;
        if self.reconfigurations != 5 && self.reconfigurations != 25 {
            return;
        }
        let residents = self.ewma_residents / self.ewma_residents_mass;
        let optimal = residents / (AGE_COARSENING_ERROR_TOLERANCE * MAX_AGE as f32);
        let mut log2 = 1u32;
        while log2 < 31 && ((1i32 << log2) as f32) < optimal {
            log2 += 1;
        }
        let delta = i64::from(log2) - i64::from(self.age_shift);
        self.age_shift = log2;
        self.ewma_residents *= 8.0;
        self.ewma_residents_mass *= 8.0;
        for histogram in [&mut self.model.hits, &mut self.model.evictions] {
            for row in histogram.chunks_exact_mut(MAX_AGE) {
                if delta < 0 {
                    let by = (-delta) as u32;
                    for age in (MAX_AGE >> by)..MAX_AGE - 1 {
                        row[MAX_AGE - 1] += row[age];
                    }
                    for age in (0..MAX_AGE - 1).rev() {
                        row[age] = row[age >> by] / (1u32 << by) as f32;
                    }
                } else if delta > 0 {
                    let by = delta as u32;
                    for age in 0..MAX_AGE >> by {
                        row[age] = row[age << by];
                        for i in 1..1usize << by {
                            row[age] += row[(age << by) + i];
                        }
                    }
                    for count in &mut row[MAX_AGE >> by..MAX_AGE - 1] {
                        *count = 0.0;
                    }
                }
            }
        }
    }

    /// `modelHitDensity`: for each age, hits still to come over the
    /// expected remaining lifetime, accumulated from the oldest age down.
    fn model_hit_density(&mut self) {
        let model = &mut self.model;
        for class in 0..CLASSES {
            let row = class * MAX_AGE;
            let hits = &model.hits[row..row + MAX_AGE];
            let evictions = &model.evictions[row..row + MAX_AGE];
            let densities = &mut model.densities[row..row + MAX_AGE];
            let mut total_events = hits[MAX_AGE - 1] + evictions[MAX_AGE - 1];
            let mut total_hits = hits[MAX_AGE - 1];
            let mut lifetime = total_events;
            for age in (0..MAX_AGE - 1).rev() {
                total_hits += hits[age];
                total_events += hits[age] + evictions[age];
                lifetime += total_events;
                densities[age] = if f64::from(total_events) > 1e-5 {
                    total_hits / lifetime
                } else {
                    0.0
                };
            }
        }
    }
}

impl Policy for Lhd {
    fn name(&self) -> &'static str {
        "lhd"
    }

    fn lookup(&mut self, access: &Access) -> bool {
        let Some(&at) = self.index.get(&access.key) else {
            return false;
        };
        let charge = self.tags[at as usize].charge;
        self.update(access.key, Some(at as usize), charge);
        true
    }

    fn admit(&mut self, access: &Access, victims: &mut Vec<u64>) -> bool {
        let charge = self.capacity.charge(access.size);
        if charge > self.capacity.limit() {
            return false;
        }
        debug_assert!(
            !self.index.contains_key(&access.key),
            "admit of a resident key"
        );
        while self.used + charge > self.capacity.limit() {
            let at = self.victim();
            let tag = self.take(at);
            // `replaced`: the eviction counts in the unit's class.
            let age = self.age(&tag);
            self.model.evictions[tag.class() + age] += 1.0;
            if tag.explorer {
                self.explorer_budget = (self.explorer_budget as f32 + tag.size) as i64;
            }
            victims.push(tag.key);
        }
        self.update(access.key, None, charge);
        self.used += charge;
        true
    }

    fn remove(&mut self, key: u64) -> bool {
        let Some(&at) = self.index.get(&key) else {
            return false;
        };
        self.take(at as usize);
        true
    }

    fn contains(&self, key: u64) -> bool {
        self.index.contains_key(&key)
    }

    fn len(&self) -> usize {
        self.tags.len()
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
    use crate::rng::Rng;
    use crate::testing::{self, Reference};
    use proptest::prelude::*;

    /// A resident of the naive model.
    #[derive(Clone, Copy)]
    struct Unit {
        key: u64,
        charge: u64,
        referenced: u64,
        hit_ages: (u64, u64),
        explorer: bool,
    }

    /// Naive LHD for traces shorter than a reconfiguration: densities from
    /// libCacheSim's initial table, written out per rank.
    struct NaiveLhd {
        capacity: Capacity,
        admissions: usize,
        rng: Rng,
        units: Vec<Unit>,
        now: u64,
        recent: Vec<Option<u64>>,
        head: usize,
        ewma: f32,
        budget: i64,
    }

    impl NaiveLhd {
        fn density(&self, unit: &Unit) -> f32 {
            let age = ((self.now - unit.referenced) >> 10).min(19_999);
            if age == 19_999 {
                return f32::MIN;
            }
            let sum = unit.hit_ages.0 + unit.hit_ages.1;
            let class = if sum == 0 {
                15
            } else {
                (0..15).find(|&k| sum << k >= 20_000).unwrap_or(15)
            };
            let initial = (f64::from(16 + class + 1) / (age + 1) as f64) as f32;
            initial / unit.charge as f32 + if unit.explorer { 1.0 } else { 0.0 }
        }

        fn reference(&mut self, at: usize, insert: bool) {
            let age = (self.now - self.units[at].referenced) >> 10;
            if !insert {
                let unit = self.units[at];
                if unit.explorer {
                    self.budget = (self.budget as f32 + unit.charge as f32) as i64;
                }
                self.units[at].hit_ages = (age.min(19_999), unit.hit_ages.0);
            }
            self.units[at].referenced = self.now;
            let explore = self.rng.next_u64().is_multiple_of(32);
            self.units[at].explorer = explore && self.budget > 0;
            if self.units[at].explorer {
                self.budget = (self.budget as f32 - self.units[at].charge as f32) as i64;
            }
            if insert && !explore && self.density(&self.units[at]) < self.ewma {
                self.recent[self.head % self.admissions] = Some(self.units[at].key);
                self.head += 1;
            }
            self.now += 1;
        }
    }

    impl Reference for NaiveLhd {
        fn access(&mut self, access: &Access) -> (bool, Vec<u64>) {
            if let Some(at) = self.units.iter().position(|u| u.key == access.key) {
                self.reference(at, false);
                return (true, vec![]);
            }
            let charge = self.capacity.charge(access.size);
            let mut victims = vec![];
            if charge > self.capacity.limit() {
                return (false, victims);
            }
            while self.units.iter().map(|u| u.charge).sum::<u64>() + charge > self.capacity.limit()
            {
                let mut candidates: Vec<usize> = (0..8)
                    .map(|_| (self.rng.next_u64() % self.units.len() as u64) as usize)
                    .collect();
                for key in self.recent.iter().flatten() {
                    candidates.extend(self.units.iter().position(|u| u.key == *key));
                }
                let mut best = (f32::MAX, None);
                for at in candidates {
                    let rank = self.density(&self.units[at]);
                    if rank < best.0 {
                        best = (rank, Some(at));
                    }
                }
                self.ewma = 0.9 * self.ewma + (1.0 - 0.9f32) * best.0;
                let at = best.1.unwrap();
                let unit = self.units.swap_remove(at);
                if unit.explorer {
                    self.budget = (self.budget as f32 + unit.charge as f32) as i64;
                }
                victims.push(unit.key);
            }
            self.units.push(Unit {
                key: access.key,
                charge,
                referenced: self.now,
                hit_ages: (0, 20_000),
                explorer: false,
            });
            let at = self.units.len() - 1;
            self.reference(at, true);
            (false, victims)
        }
    }

    fn lhd(capacity: Capacity, admissions: u32, generator: Generator, seed: u64) -> Lhd {
        let config = LhdConfig {
            admissions,
            generator,
            seed: Some(seed),
            ..LhdConfig::default()
        };
        Lhd::new(capacity, &config).unwrap()
    }

    #[test]
    fn a_unit_hit_before_outranks_a_newer_one() {
        // 1 is hit, so it joins the class of short hit ages (density 32 at
        // age 0, against 17 for a unit never hit): 2 goes where LRU would
        // evict 1.
        let mut cache = Lhd::new(Capacity::Objects(2), &LhdConfig::default()).unwrap();
        let mut victims = vec![];
        for access in testing::keys(&[1, 1, 2, 3]) {
            cache.access(&access, &mut victims);
        }
        assert_eq!(victims, [2]);
        // In bytes the density is per byte: the larger of two new units goes.
        let mut cache = Lhd::new(Capacity::Bytes(10), &LhdConfig::default()).unwrap();
        victims.clear();
        for access in testing::accesses(&[(1, 6), (2, 3), (3, 3)]) {
            cache.access(&access, &mut victims);
        }
        assert_eq!(victims, [1]);
    }

    #[test]
    fn hit_age_classes_are_log_spaced() {
        // libCacheSim's loop, for every age up to past 2 × MAX_AGE.
        let doubling = |mut age: u64| {
            if age == 0 {
                return CLASSES - 1;
            }
            let mut log = 0;
            while age < MAX_AGE as u64 && log < CLASSES - 1 {
                age <<= 1;
                log += 1;
            }
            log
        };
        for age in (0..=3 * MAX_AGE as u64).chain([u64::MAX / 2, u64::MAX]) {
            assert_eq!(hit_age_class(age), doubling(age), "age {age}");
        }
        assert_eq!(hit_age_class(0), 15);
        assert_eq!(hit_age_class(20_000), 0);
        assert_eq!(hit_age_class(10_000), 1);
        assert_eq!(hit_age_class(9_999), 2);
        assert_eq!(hit_age_class(1), 15);
    }

    #[test]
    fn densities_are_hits_to_come_over_expected_lifetime() {
        // Class 0: one hit at age 2, one eviction at age 5.
        let mut cache = Lhd::new(Capacity::Objects(1), &LhdConfig::default()).unwrap();
        cache.model.hits[2] = 1.0;
        cache.model.evictions[5] = 1.0;
        cache.model_hit_density();
        let densities = &cache.model.densities;
        assert_eq!(
            densities[..7],
            [1.0 / 9.0, 1.0 / 7.0, 0.2, 0.0, 0.0, 0.0, 0.0]
        );
        // Other classes had no events: density 0 at every age but the last.
        assert!(
            densities[MAX_AGE..2 * MAX_AGE - 1]
                .iter()
                .all(|&d| d == 0.0)
        );
    }

    #[test]
    fn coarsening_follows_the_resident_count() {
        // At the 5th reconfiguration, 100,000 residents want ages in
        // buckets of 2^9 references (100,000 / 200 = 500): from the shift
        // of 10 the histograms are stretched by 2.
        let mut cache = Lhd::new(Capacity::Objects(100_000), &LhdConfig::default()).unwrap();
        for key in 0..100_000 {
            cache.tags.push(Tag {
                key,
                charge: 1,
                size: 1.0,
                timestamp: 0,
                last_hit_age: 0,
                last_last_hit_age: 0,
                explorer: false,
            });
        }
        cache.model.hits[3] = 4.0;
        cache.reconfigurations = 5;
        cache.adapt_age_coarsening();
        assert_eq!(cache.age_shift, 9);
        assert_eq!(cache.model.hits[6..8], [2.0, 2.0], "age 3 became 6 and 7");
        assert_eq!(cache.model.hits[3].to_bits(), 0);
    }

    #[test]
    fn knobs_are_checked() {
        let bad = |associativity, admissions, seed| {
            let config = LhdConfig {
                associativity,
                admissions,
                seed,
                ..LhdConfig::default()
            };
            Lhd::new(Capacity::Objects(1), &config).is_err()
        };
        assert!(bad(0, 8, None) && bad(1025, 8, None) && bad(32, 0, None) && bad(32, 65, None));
        assert!(bad(32, 8, Some(0)) && !bad(1, 1, Some(1)));
        let mmix = LhdConfig {
            generator: Generator::Mmix,
            seed: Some(0),
            ..LhdConfig::default()
        };
        assert!(Lhd::new(Capacity::Objects(1), &mmix).is_ok());
    }

    proptest! {
        #[test]
        fn matches_naive_model(trace in testing::trace_strategy(40, 400, 5), cap in prop_oneof![1u64..20, 100u64..150], bytes: bool, seed in 1u64.., admissions in 1u32..10, mmix: bool) {
            let capacity = if bytes { Capacity::Bytes(cap) } else { Capacity::Objects(cap) };
            let generator = if mmix { Generator::Mmix } else { Generator::Lehmer64 };
            let mut naive = NaiveLhd {
                capacity,
                admissions: admissions as usize,
                rng: Rng::new(generator, seed),
                units: vec![],
                now: 0,
                recent: vec![None; admissions as usize],
                head: 0,
                ewma: 0.0,
                // 1 % of the capacity: explorers need 100 or more.
                budget: (cap as f32 * 0.01) as i64,
            };
            testing::assert_matches_reference(&mut lhd(capacity, admissions, generator, seed), &mut naive, &trace);
            testing::replay_checked(&mut lhd(capacity, admissions, generator, seed), &trace);
        }
    }
}
