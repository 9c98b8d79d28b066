//! `adaptsize`: admit a miss with probability `e^(-size / c)`, `c` tuned to
//! the workload by a model of the cache.
//!
//! Source: Berger, Sitaraman & Harchol-Balter, "`AdaptSize`: Orchestrating the
//! Hot Object Memory Cache in a Content Delivery Network", NSDI 2017, as
//! libCacheSim 0.3.5 implements it (`cache/admission/adaptsize/adaptsize.cpp`,
//! `AdaptSizeAdmissioner`), step for step:
//!
//! - Every access (hit or miss) counts its key in the current interval
//!   (count and latest size) and keeps `stat_size`, the summed size of the
//!   keys known to either table.
//! - Every `reconf_interval` accesses, if `stat_size` is over three times the
//!   cache (else it looks again 1,000 accesses later), the long-term counts
//!   decay by 0.3 and take 0.7 of the interval's (a new key its whole count),
//!   keys whose count fell below 0.1 are forgotten, and `c` is chosen to
//!   maximise the hit ratio a model predicts: a characteristic-time (Che)
//!   approximation of an LRU cache admitting with `e^(-size / c)`, solved by
//!   20 fixed-point steps, its hit probabilities by the paper's rational
//!   approximation (`oP1 / oP2`). The search: `log2 c` at 2, 6, 10, ... below
//!   `log2` of the cache size, then at most `max_iteration` golden-section
//!   steps around the best.
//! - A miss is admitted when `(next_rand() % 10^7) / 10^7 < e^(-size / c)`
//!   (`c` starts at 2^15), drawn from libCacheSim's generator
//!   ([`crate::rng`], Lehmer64 from `0xdeadbeef` by default).
//!
//! Sizes are in the capacity's unit, as libCacheSim's are: bytes, or 1 per
//! unit in object mode (where `c` then scales a count, and the filter refuses
//! few). Tables are kept in arrival order, so a run is reproducible;
//! libCacheSim keeps them in `std::unordered_map`s and sums the model in that
//! map's order, so a sum can differ from ours in its last bits (agreement is
//! exact on the sample trace; `libcachesim_agreement.rs`).
//!
//! Memory: about 48 bytes per key requested in the last two or three
//! intervals, and per key the decayed counts keep (hot keys); the tables
//! grow to that once and are reused. Time: a reconfiguration evaluates the
//! model about 25 times, 20 passes each, over the distinct (count, size)
//! pairs of the long-term table, each weighted by its keys (libCacheSim
//! passes over every key: the same terms, summed in another order).

use serde::{Deserialize, Serialize};

use super::{Admission, Occupancy, TEN_MILLION, libcachesim_rng};
use crate::rng::{Generator, Rng};
use crate::{Access, Capacity, ConfigError, KeyMap};

/// libCacheSim's (and the paper's code's) constants.
const EWMA_DECAY: f64 = 0.3;
const GSS_R: f64 = 0.618_033_99;
const TOLERANCE: f64 = 3.0e-8;
/// Counts below this are forgotten at a reconfiguration.
const FORGET_BELOW: f64 = 0.1;
/// Accesses until the next look when the tables know too little.
const LOOK_AGAIN: u64 = 1000;

/// The most golden-section steps a reconfiguration may take.
const MAX_ITERATION_LIMIT: u64 = 1000;

/// `adaptsize` parameters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AdaptSizeConfig {
    /// Golden-section steps per reconfiguration, at most 1,000. Default 15
    /// (libCacheSim's `max-iteration`).
    pub max_iteration: u64,
    /// Accesses between reconfigurations, at least 1. Default 30,000
    /// (libCacheSim's `reconf-interval`).
    pub reconf_interval: u64,
    /// Which of libCacheSim's generators draws: `"lehmer64"` (0.3.5's, the
    /// default) or `"mmix"` (`aa0fc40`'s).
    pub generator: Generator,
    /// The generator's starting state; default a fresh libCacheSim thread's.
    /// A Lehmer64 seed must not be 0.
    pub seed: Option<u64>,
}

impl Default for AdaptSizeConfig {
    fn default() -> Self {
        Self {
            max_iteration: 15,
            reconf_interval: 30_000,
            generator: Generator::Lehmer64,
            seed: None,
        }
    }
}

impl AdaptSizeConfig {
    /// Checks every value's range.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.max_iteration > MAX_ITERATION_LIMIT {
            return Err(ConfigError::OutOfRange {
                policy: "adaptsize",
                parameter: "max_iteration",
                value: self.max_iteration.to_string(),
                expected: "at most 1000",
            });
        }
        if self.reconf_interval == 0 {
            return Err(ConfigError::OutOfRange {
                policy: "adaptsize",
                parameter: "reconf_interval",
                value: "0".into(),
                expected: "at least 1",
            });
        }
        libcachesim_rng("adaptsize", self.generator, self.seed).map(|_| ())
    }
}

/// A key's count and latest size (libCacheSim's `obj_info`).
#[derive(Clone, Copy, Debug)]
struct Seen {
    key: u64,
    times: f64,
    size: u64,
}

/// Long-term keys with one count and size: the model weighs one of them by
/// `keys` (libCacheSim evaluates each key; the same terms, summed in another
/// order).
#[derive(Clone, Copy, Debug)]
struct Group {
    times: f64,
    size: f64,
    keys: f64,
}

/// Keys with their counts, in arrival order, and an index by key.
#[derive(Debug, Default)]
struct Table {
    rows: Vec<Seen>,
    index: KeyMap<usize>,
}

impl Table {
    fn with_capacity(n: usize) -> Self {
        Self {
            rows: Vec::with_capacity(n),
            index: KeyMap::with_capacity(n),
        }
    }

    fn get(&self, key: u64) -> Option<&Seen> {
        self.index.get(&key).map(|&i| &self.rows[i])
    }

    /// The row of `key`, added with count 0 and size 0 if absent (C++'s
    /// `map[key]`).
    fn row(&mut self, key: u64) -> &mut Seen {
        let rows = &mut self.rows;
        let i = *self.index.entry(key).or_insert_with(|| {
            rows.push(Seen {
                key,
                times: 0.0,
                size: 0,
            });
            rows.len() - 1
        });
        &mut self.rows[i]
    }

    fn clear(&mut self) {
        self.rows.clear();
        self.index.clear();
    }
}

/// The `adaptsize` filter.
#[derive(Debug)]
pub struct AdaptSize {
    capacity: Capacity,
    /// The cache size in its unit, as the model sees it.
    cache_size: u64,
    max_iteration: u64,
    reconf_interval: u64,
    next_reconf: u64,
    /// Summed sizes of the keys in either table (libCacheSim's `uint64_t`
    /// arithmetic, wrapping as it wraps).
    stat_size: u64,
    /// The scale: admit with `e^(-size / c)`.
    c: f64,
    interval: Table,
    longterm: Table,
    /// The long-term rows with equal count and size as one, in order of
    /// first appearance: the model's input (many keys share a count).
    groups: Vec<Group>,
    /// Scratch: the group of each (count bits, size).
    group_of: hashbrown::HashMap<(u64, u64), usize>,
    /// `e^(-size / 2^log2c)` per group, for the model evaluated.
    probabilities: Vec<f64>,
    rng: Rng,
}

impl AdaptSize {
    /// A filter for a cache of `capacity`.
    pub fn new(capacity: Capacity, config: &AdaptSizeConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        let rows = usize::try_from(config.reconf_interval)
            .unwrap_or(usize::MAX)
            .min(1 << 20);
        Ok(Self {
            capacity,
            cache_size: capacity.limit(),
            max_iteration: config.max_iteration,
            reconf_interval: config.reconf_interval,
            next_reconf: config.reconf_interval,
            stat_size: 0,
            c: f64::from(1u32 << 15),
            interval: Table::with_capacity(rows),
            longterm: Table::with_capacity(2 * rows),
            groups: Vec::with_capacity(rows),
            group_of: hashbrown::HashMap::with_capacity(rows),
            probabilities: Vec::with_capacity(rows),
            rng: libcachesim_rng("adaptsize", config.generator, config.seed)?,
        })
    }

    /// The current scale `c`.
    pub fn c(&self) -> f64 {
        self.c
    }

    /// libCacheSim's `reconfigure`, called before each access is counted.
    fn reconfigure(&mut self) {
        self.next_reconf = self.next_reconf.wrapping_sub(1);
        if self.next_reconf > 0 {
            return;
        }
        if self.stat_size <= self.cache_size.wrapping_mul(3) {
            self.next_reconf += LOOK_AGAIN;
            return;
        }
        self.next_reconf = self.reconf_interval;
        for row in &mut self.longterm.rows {
            row.times *= EWMA_DECAY;
        }
        for seen in &self.interval.rows {
            match self.longterm.index.get(&seen.key) {
                None => {
                    self.longterm
                        .index
                        .insert(seen.key, self.longterm.rows.len());
                    self.longterm.rows.push(*seen);
                }
                Some(&i) => {
                    let row = &mut self.longterm.rows[i];
                    row.times += (1.0 - EWMA_DECAY) * seen.times;
                    row.size = seen.size;
                }
            }
        }
        self.interval.clear();
        // Forget the rare keys, keeping the others in order.
        let mut kept = 0;
        for i in 0..self.longterm.rows.len() {
            let row = self.longterm.rows[i];
            if row.times < FORGET_BELOW {
                self.stat_size = self.stat_size.wrapping_sub(row.size);
                self.longterm.index.remove(&row.key);
            } else {
                self.longterm.rows[kept] = row;
                self.longterm.index.insert(row.key, kept);
                kept += 1;
            }
        }
        self.longterm.rows.truncate(kept);
        self.groups.clear();
        self.group_of.clear();
        for row in &self.longterm.rows {
            let groups = &mut self.groups;
            let i = *self
                .group_of
                .entry((row.times.to_bits(), row.size))
                .or_insert_with(|| {
                    groups.push(Group {
                        times: row.times,
                        size: row.size as f64,
                        keys: 0.0,
                    });
                    groups.len() - 1
                });
            self.groups[i].keys += 1.0;
        }
        self.search();
    }

    /// Chooses `c` (libCacheSim's search, step for step).
    fn search(&mut self) {
        let gss_v = 1.0 - GSS_R;
        let mut x0 = 0.0;
        let mut x1 = (self.cache_size as f64).log2();
        let mut x2;
        let mut x3 = x1;
        let mut best = 0.0;
        let mut i = 2i32;
        while f64::from(i) < x3 {
            let hit_ratio = self.model_hit_ratio(f64::from(i));
            if hit_ratio > best {
                best = hit_ratio;
                x1 = f64::from(i);
            }
            i += 4;
        }
        let mut h1 = best;
        let mut h2;
        if x3 - x1 > x1 - x0 {
            x2 = x1 + gss_v * (x3 - x1);
            h2 = self.model_hit_ratio(x2);
        } else {
            x2 = x1;
            h2 = h1;
            x1 = x0 + gss_v * (x1 - x0);
            h1 = self.model_hit_ratio(x1);
        }
        let mut iteration = 0;
        while iteration < self.max_iteration && (x3 - x0).abs() > TOLERANCE * (x1.abs() + x2.abs())
        {
            iteration += 1;
            if h1.is_nan() || h2.is_nan() {
                break;
            }
            if h2 > h1 {
                x0 = x1;
                x1 = x2;
                x2 = GSS_R * x1 + gss_v * x3;
                h1 = h2;
                h2 = self.model_hit_ratio(x2);
            } else {
                x3 = x2;
                x2 = x1;
                x1 = GSS_R * x2 + gss_v * x0;
                h2 = h1;
                h1 = self.model_hit_ratio(x1);
            }
        }
        if h1.is_nan() || h2.is_nan() {
            // libCacheSim warns and keeps the old `c`.
        } else if h1 > h2 {
            self.c = 2f64.powf(x1);
        } else {
            self.c = 2f64.powf(x2);
        }
    }

    /// The model's weighted hit count with `c = 2^log2c` (libCacheSim's
    /// `modelHitRate`, its floating point operation for operation).
    fn model_hit_ratio(&mut self, log2c: f64) -> f64 {
        let groups = &self.groups;
        let scale = 2f64.powf(log2c);
        self.probabilities.clear();
        self.probabilities
            .extend(groups.iter().map(|group| (-group.size / scale).exp()));
        let mut sum = 0.0;
        for (group, &p) in groups.iter().zip(&self.probabilities) {
            sum += group.keys * (group.times * p * group.size);
        }
        if sum <= 0.0 {
            return 0.0;
        }
        let cache_size = self.cache_size as f64;
        let mut t = cache_size / sum;
        for _ in 0..20 {
            if t > 1e70 {
                break;
            }
            let mut filled = 0.0;
            for (group, &p) in groups.iter().zip(&self.probabilities) {
                let rate_t = group.times * t;
                if rate_t > 150.0 {
                    filled += group.keys * group.size;
                } else {
                    let e = rate_t.exp() - 1.0;
                    let admitted = p * e;
                    filled += group.keys * (group.size * (admitted / (1.0 + admitted)));
                }
            }
            t = cache_size * t / filled;
        }
        let mut weighted = 0.0;
        for (group, &p) in groups.iter().zip(&self.probabilities) {
            let (numerator, denominator) = (op1(t, group.times, p), op2(t, group.times, p));
            let hit = if numerator != 0.0 && denominator == 0.0 {
                0.0
            } else {
                numerator / denominator
            };
            // As libCacheSim's two comparisons: a NaN stays NaN.
            weighted += group.keys * (group.times * hit.clamp(0.0, 1.0));
        }
        weighted
    }
}

/// The paper's rational approximation of an object's hit probability
/// (numerator), at characteristic time `t`, rate `l`, admission `p`.
#[inline]
fn op1(t: f64, l: f64, p: f64) -> f64 {
    l * p * t * (840.0 + 60.0 * l * t + 20.0 * l * l * t * t + l * l * l * t * t * t)
}

/// The denominator of [`op1`].
#[inline]
fn op2(t: f64, l: f64, p: f64) -> f64 {
    840.0
        + 120.0 * l * (-3.0 + 7.0 * p) * t
        + 60.0 * l * l * (1.0 + p) * t * t
        + 4.0 * l * l * l * (-1.0 + 5.0 * p) * t * t * t
        + l * l * l * l * p * t * t * t * t
}

impl Admission for AdaptSize {
    fn name(&self) -> &'static str {
        "adaptsize"
    }

    /// libCacheSim's `updateStats`: every access, hit or miss.
    fn record(&mut self, access: &Access, _hit: bool) {
        self.reconfigure();
        let size = self.capacity.charge(access.size);
        let in_interval = self.interval.get(access.key).map(|row| row.size);
        let in_longterm = self.longterm.get(access.key).map(|row| row.size);
        if in_interval.is_none() && in_longterm.is_none() {
            self.stat_size = self.stat_size.wrapping_add(size);
        } else {
            for old in [in_interval, in_longterm].into_iter().flatten() {
                if old != size {
                    self.stat_size = self.stat_size.wrapping_sub(old).wrapping_add(size);
                }
            }
        }
        let row = self.interval.row(access.key);
        row.times += 1.0;
        row.size = size;
    }

    fn admit(&mut self, access: &Access, _occupancy: Occupancy) -> bool {
        let size = self.capacity.charge(access.size) as f64;
        let probability = (-size / self.c).exp();
        let roll = (self.rng.next_u64() % TEN_MILLION) as f64 / TEN_MILLION as f64;
        roll < probability
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filter(capacity: Capacity, reconf_interval: u64) -> AdaptSize {
        AdaptSize::new(
            capacity,
            &AdaptSizeConfig {
                reconf_interval,
                ..AdaptSizeConfig::default()
            },
        )
        .unwrap()
    }

    /// A few hot small keys and many cold large ones.
    fn feed(filter: &mut AdaptSize, n: u64) {
        for t in 0..n {
            let access = if t % 2 == 0 {
                Access::read(t % 20, 1_000, t)
            } else {
                Access::read(1_000 + t, 500_000, t)
            };
            filter.record(&access, false);
        }
    }

    #[test]
    fn tunes_c_to_keep_the_large_cold_keys_out() {
        let mut adaptsize = filter(Capacity::Bytes(1 << 20), 1_000);
        assert_eq!(
            adaptsize.c().to_bits(),
            32_768f64.to_bits(),
            "libCacheSim's starting c"
        );
        feed(&mut adaptsize, 999);
        assert_eq!(
            adaptsize.c().to_bits(),
            32_768f64.to_bits(),
            "no reconfiguration before the interval"
        );
        feed(&mut adaptsize, 5_000);
        let c = adaptsize.c();
        // The model admits the hot 1,000-byte keys and not the 500 KB ones.
        assert!((-1_000.0 / c).exp() > 0.9, "c = {c}");
        assert!((-500_000.0 / c).exp() < 0.01, "c = {c}");
        let occupancy = Occupancy { used: 0, limit: 1 };
        let admitted = |adaptsize: &mut AdaptSize, size| {
            (0..10_000)
                .filter(|&i| adaptsize.admit(&Access::read(i, size, i), occupancy))
                .count()
        };
        assert!(admitted(&mut adaptsize, 1_000) > 9_000);
        assert!(admitted(&mut adaptsize, 500_000) < 100);
    }

    #[test]
    fn waits_while_the_tables_know_less_than_three_caches() {
        // 20 keys of 1,000 bytes never exceed three times a 1 MiB cache.
        let mut adaptsize = filter(Capacity::Bytes(1 << 20), 100);
        for t in 0..10_000 {
            adaptsize.record(&Access::read(t % 20, 1_000, t), false);
        }
        assert_eq!(adaptsize.c().to_bits(), 32_768f64.to_bits());
        assert_eq!(adaptsize.stat_size, 20_000);
    }

    #[test]
    fn bad_values_are_refused() {
        for config in [
            AdaptSizeConfig {
                reconf_interval: 0,
                ..AdaptSizeConfig::default()
            },
            AdaptSizeConfig {
                max_iteration: 1001,
                ..AdaptSizeConfig::default()
            },
            AdaptSizeConfig {
                seed: Some(0),
                ..AdaptSizeConfig::default()
            },
        ] {
            assert!(AdaptSize::new(Capacity::Objects(10), &config).is_err());
        }
    }
}
