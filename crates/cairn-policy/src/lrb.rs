//! LRB, Learning Relaxed Belady: evict, among sampled residents, the one a
//! gradient-boosted model predicts will be requested farthest in the future.
//!
//! Source: Z. Song, D. S. Berger, K. Li, W. Lloyd, "Learning Relaxed Belady
//! for Content Distribution Network Caching", USENIX NSDI 2020. Maps to
//! libCacheSim's `LRB` (`cache/eviction/LRB/`, the authors' webcachesim code
//! over `LightGBM`), whose structure and defaults this follows:
//! - every unit seen within the last `memory_window` (2^26) requests keeps
//!   metadata, resident or not: its last request time, up to 31 past
//!   inter-request distances and 10 exponentially decayed counters (EDCs,
//!   decay windows 2^10..2^19 requests);
//! - from the first eviction on, each request picks one tracked unit at
//!   random (resident or not, in proportion) and records the time; when that
//!   unit is requested again, each recorded time becomes a training row
//!   (features as they were then) labelled `ln(1 + time until the request)`;
//!   a unit forgotten at the end of the window labels its rows with twice the
//!   window;
//! - features (44): the age, the 31 distances (most recent first, 0 where
//!   there are fewer), the size, how many of the distances fall within the
//!   window, the 10 EDCs decayed to now;
//! - every `batch_size` (131,072) rows a new model is fitted on those rows
//!   alone: 32 trees of 32 leaves, learning rate 0.1, features 0.8, bagging
//!   0.8 every 5 trees, squared loss ([`crate::gbdt`], `LightGBM`'s algorithm);
//! - an eviction evicts the least recently used unit until the first model
//!   exists (or when that unit is older than the window); then it predicts
//!   for `sample_rate` (64) distinct random residents and evicts the
//!   highest prediction (with `objective = "object-miss-ratio"`, the highest
//!   prediction × size). An evicted unit keeps its metadata until forgotten.
//!
//! How it differs from libCacheSim's: the trees come from our own
//! implementation of `LightGBM`'s algorithm, not `LightGBM`, and the random
//! draws (samples, candidates, bagging) from our own seeded generator, not
//! the C++ standard library's; so once a model exists the victims, and the
//! miss ratios, are close to but not libCacheSim's (docs/policies.md gives
//! the measured difference). Before the first model LRB is LRU, exactly as
//! libCacheSim's (on traces shorter than `batch_size` requests after the
//! first eviction it never trains). [`Policy::remove`] forgets the unit's
//! metadata (libCacheSim's `LRB_remove` is unsupported).

use serde::{Deserialize, Serialize};

use crate::gbdt::{Model, Params, Trainer};
use crate::index::{KeyIndex, Keyed};
use crate::list::{Index, List, NIL, Slab};
use crate::{Access, Capacity, ConfigError, KeyMap, Policy};

/// Past inter-request distances kept per unit.
const DISTANCES: usize = 31;
/// Exponentially decayed counters per unit.
const EDCS: usize = 10;
/// log2 of the first EDC's window.
const BASE_EDC_WINDOW: u32 = 10;
/// Feature positions (libCacheSim's order).
const F_SIZE: usize = 1 + DISTANCES;
const F_WITHIN: usize = F_SIZE + 1;
const F_EDC: usize = F_WITHIN + 1;
/// Features per row.
pub const FEATURES: usize = F_EDC + EDCS;
/// Candidate draws after which duplicates are accepted (libCacheSim's).
const MAX_TRIALS: u32 = 200;

/// What a prediction is scaled by before the highest is evicted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Objective {
    /// The prediction alone (libCacheSim's default).
    #[default]
    ByteMissRatio,
    /// The prediction × the unit's size.
    ObjectMissRatio,
}

/// LRB parameters (libCacheSim's defaults).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LrbConfig {
    /// Residents ranked per eviction, 1..=1024. Default 64.
    pub sample_rate: u32,
    /// Requests a non-resident unit's metadata is kept, 2^10..=2^31.
    /// Default 2^26 = 67,108,864.
    pub memory_window: u32,
    /// Training rows per model, 64..=2^24. Default 131,072.
    pub batch_size: u32,
    /// Trees per model (`num_iterations`), 1..=1024. Default 32.
    pub trees: u32,
    /// Leaves per tree (`num_leaves`), 2..=1024. Default 32.
    pub leaves: u32,
    /// Shrinkage, in (0, 1]. Default 0.1.
    pub learning_rate: f64,
    /// `"byte-miss-ratio"` (default) or `"object-miss-ratio"`.
    pub objective: Objective,
    /// Seed of the sampling generator (samples, candidates, bagging).
    /// Default 0.
    pub seed: u64,
}

impl Default for LrbConfig {
    fn default() -> Self {
        Self {
            sample_rate: 64,
            memory_window: 1 << 26,
            batch_size: 131_072,
            trees: 32,
            leaves: 32,
            learning_rate: 0.1,
            objective: Objective::ByteMissRatio,
            seed: 0,
        }
    }
}

impl LrbConfig {
    fn check(&self) -> Result<(), ConfigError> {
        let out_of_range = |parameter, value: String, expected| ConfigError::OutOfRange {
            policy: "lrb",
            parameter,
            value,
            expected,
        };
        let ranges: [(&'static str, u32, u32, u32, &'static str); 5] = [
            ("sample_rate", self.sample_rate, 1, 1024, "1 to 1024"),
            (
                "memory_window",
                self.memory_window,
                1 << BASE_EDC_WINDOW,
                1 << 31,
                "1024 to 2^31",
            ),
            ("batch_size", self.batch_size, 64, 1 << 24, "64 to 2^24"),
            ("trees", self.trees, 1, 1024, "1 to 1024"),
            ("leaves", self.leaves, 2, 1024, "2 to 1024"),
        ];
        for (parameter, value, min, max, expected) in ranges {
            if !(min..=max).contains(&value) {
                return Err(out_of_range(parameter, value.to_string(), expected));
            }
        }
        if !(self.learning_rate > 0.0 && self.learning_rate <= 1.0) {
            return Err(out_of_range(
                "learning_rate",
                self.learning_rate.to_string(),
                "above 0, at most 1",
            ));
        }
        Ok(())
    }
}

/// What LRB keeps per tracked unit (libCacheSim's `Meta` and `MetaExtra`).
#[derive(Clone, Copy, Debug)]
struct Meta {
    key: u64,
    charge: u64,
    /// Time of the last request.
    past: u32,
    /// Position in `resident` or `outside`.
    pos: u32,
    /// Head of the unit's sample times in `samples`.
    samples: u32,
    /// The eviction that last drew this unit as a candidate.
    stamp: u32,
    resident: bool,
    /// Requested more than once (libCacheSim's `_extra` exists).
    extra: bool,
    /// libCacheSim's `_past_distance_idx`: one past the newest distance,
    /// modulo 31, kept in 1..62.
    distance_idx: u8,
    distances: [u32; DISTANCES],
    edc: [f32; EDCS],
}

impl Keyed for Meta {
    fn key(&self) -> u64 {
        self.key
    }
}

/// `0.5^i`, libCacheSim's `hash_edc[i]`.
#[inline]
fn half_pow(i: u32) -> f64 {
    if i > 1074 { 0.0 } else { 0.5f64.powi(i as i32) }
}

/// A sample time in the pool, linked to the unit's next one.
#[derive(Clone, Copy, Debug)]
struct Sample {
    time: u32,
    next: u32,
}

/// Learning Relaxed Belady.
#[derive(Debug)]
pub struct Lrb {
    capacity: Capacity,
    config: LrbConfig,
    used: u64,
    /// Requests so far minus one (libCacheSim's `current_seq`).
    now: u32,
    /// `memory_window / 1024 − 1`: the last EDC decay index.
    max_edc_index: u32,
    /// Tracked units: residents threaded on `lru` (front = newest).
    metas: Slab<Meta>,
    index: KeyIndex,
    lru: List,
    resident: Vec<Index>,
    outside: Vec<Index>,
    /// `last request time % memory_window` → a non-resident unit, forgotten
    /// when the time comes round.
    forget: KeyMap<Index>,
    samples: Vec<Sample>,
    free_samples: u32,
    sampling: bool,
    trainer: Trainer,
    model: Model,
    rng: u64,
    evictions: u32,
    row: [f32; FEATURES],
    candidates: Vec<Index>,
    /// The candidates' features, end to end, and their predictions.
    candidate_rows: Vec<f32>,
    scores: Vec<f64>,
}

impl Lrb {
    /// An empty LRB cache.
    pub fn new(capacity: Capacity, config: &LrbConfig) -> Result<Self, ConfigError> {
        config.check()?;
        let params = Params {
            trees: config.trees,
            leaves: config.leaves,
            learning_rate: config.learning_rate,
            seed: config.seed,
            ..Params::default()
        };
        Ok(Self {
            capacity,
            config: config.clone(),
            used: 0,
            now: u32::MAX,
            max_edc_index: (config.memory_window >> BASE_EDC_WINDOW) - 1,
            metas: Slab::new(),
            index: KeyIndex::default(),
            lru: List::new(),
            resident: Vec::new(),
            outside: Vec::new(),
            forget: KeyMap::default(),
            samples: Vec::new(),
            free_samples: NIL,
            sampling: false,
            trainer: Trainer::new(FEATURES, params),
            model: Model::default(),
            rng: config.seed,
            evictions: 0,
            row: [0.0; FEATURES],
            candidates: Vec::with_capacity(config.sample_rate as usize),
            candidate_rows: vec![0.0; config.sample_rate as usize * FEATURES],
            scores: vec![0.0; config.sample_rate as usize],
        })
    }

    /// Whether a model has been trained (before that, LRB evicts as LRU).
    pub fn is_trained(&self) -> bool {
        self.model.is_trained()
    }

    fn next_u64(&mut self) -> u64 {
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        crate::mix64(self.rng)
    }

    /// The features of `meta` as of time `at` (libCacheSim's row layout).
    fn features(row: &mut [f32; FEATURES], meta: &Meta, at: u32, window: u32, max_edc: u32) {
        row.fill(0.0);
        let age = at.wrapping_sub(meta.past);
        row[0] = age as f32;
        let mut n_within = 0u32;
        if meta.extra {
            let stored = (meta.distance_idx as usize).min(DISTANCES);
            let mut sum = 0u32;
            for j in 0..stored {
                let at = (meta.distance_idx as usize - 1 - j) % DISTANCES;
                let distance = meta.distances[at];
                sum = sum.wrapping_add(distance);
                row[j + 1] = distance as f32;
                if sum < window {
                    n_within += 1;
                }
            }
        }
        row[F_SIZE] = meta.charge as f32;
        row[F_WITHIN] = n_within as f32;
        for k in 0..EDCS {
            let decay = half_pow((age >> (BASE_EDC_WINDOW + k as u32)).min(max_edc));
            row[F_EDC + k] = if meta.extra {
                (f64::from(meta.edc[k]) * decay) as f32
            } else {
                decay as f32
            };
        }
    }

    /// Turns every sample time of unit `index` into a training row labelled
    /// by `future(time)`, and trains when the batch is full.
    fn mature(&mut self, index: Index, future: impl Fn(u32) -> u32) {
        let meta = *self.metas.get(index);
        if meta.samples == NIL {
            return;
        }
        let mut s = meta.samples;
        while s != NIL {
            let Sample { time, next } = self.samples[s as usize];
            Self::features(
                &mut self.row,
                &meta,
                time,
                self.config.memory_window,
                self.max_edc_index,
            );
            self.trainer
                .push(&self.row, (f64::from(future(time))).ln_1p() as f32);
            self.samples[s as usize].next = self.free_samples;
            self.free_samples = s;
            s = next;
        }
        self.metas.get_mut(index).samples = NIL;
        if self.trainer.len() >= self.config.batch_size as usize {
            self.trainer.fit(&mut self.model);
        }
    }

    /// Drops unit `index`'s pending samples without labels.
    fn drop_samples(&mut self, index: Index) {
        let mut s = self.metas.get(index).samples;
        while s != NIL {
            let next = self.samples[s as usize].next;
            self.samples[s as usize].next = self.free_samples;
            self.free_samples = s;
            s = next;
        }
        self.metas.get_mut(index).samples = NIL;
    }

    /// Removes `index` from the dense array it is in.
    fn unplace(&mut self, index: Index) {
        let meta = *self.metas.get(index);
        let array = if meta.resident {
            &mut self.resident
        } else {
            &mut self.outside
        };
        array.swap_remove(meta.pos as usize);
        if let Some(&moved) = array.get(meta.pos as usize) {
            self.metas.get_mut(moved).pos = meta.pos;
        }
    }

    /// Appends `index` to the resident or the outside array.
    fn place(&mut self, index: Index, resident: bool) {
        let array = if resident {
            &mut self.resident
        } else {
            &mut self.outside
        };
        let meta = self.metas.get_mut(index);
        meta.resident = resident;
        meta.pos = array.len() as u32;
        array.push(index);
    }

    /// Forgets unit `index` entirely.
    fn discard(&mut self, index: Index) {
        self.drop_samples(index);
        self.unplace(index);
        let key = self.metas.get(index).key;
        self.index.remove(key, &self.metas);
        self.metas.remove(index);
    }

    /// The non-resident unit whose last request was a window ago leaves.
    fn forget_old(&mut self) {
        let slot = u64::from(self.now % self.config.memory_window);
        let Some(&index) = self.forget.get(&slot) else {
            return;
        };
        let window = self.config.memory_window;
        self.mature(index, |_| window.wrapping_mul(2));
        self.forget.remove(&slot);
        self.discard(index);
    }

    /// Records this request's time on one random tracked unit.
    fn sample(&mut self) {
        let draw = self.next_u64();
        let (n_in, n_out) = (self.resident.len() as u64, self.outside.len() as u64);
        if n_in + n_out == 0 {
            return;
        }
        let uniform = (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        let from_in = uniform < n_in as f64 / (n_in + n_out) as f64;
        let index = if from_in {
            self.resident[(draw % n_in) as usize]
        } else {
            self.outside[(draw % n_out) as usize]
        };
        let node = Sample {
            time: self.now,
            next: self.metas.get(index).samples,
        };
        let s = if self.free_samples == NIL {
            self.samples.push(node);
            (self.samples.len() - 1) as u32
        } else {
            let s = self.free_samples;
            self.free_samples = self.samples[s as usize].next;
            self.samples[s as usize] = node;
            s
        };
        self.metas.get_mut(index).samples = s;
    }

    /// The unit to evict (libCacheSim's `rank`).
    fn rank(&mut self) -> Index {
        let tail = self.lru.back().expect("evicting from a non-empty cache");
        let age = self.now.wrapping_sub(self.metas.get(tail).past);
        if !self.model.is_trained() || age >= self.config.memory_window {
            return tail;
        }
        self.evictions = self.evictions.wrapping_add(1);
        let stamp = self.evictions;
        self.candidates.clear();
        let n = self.resident.len() as u64;
        let mut trials = 0;
        while self.candidates.len() < self.config.sample_rate as usize {
            trials += 1;
            let draw = self.next_u64();
            let index = self.resident[(draw % n) as usize];
            let meta = self.metas.get_mut(index);
            if meta.stamp == stamp && trials < MAX_TRIALS {
                continue;
            }
            meta.stamp = stamp;
            self.candidates.push(index);
        }
        for (i, &index) in self.candidates.iter().enumerate() {
            let meta = self.metas.get(index);
            Self::features(
                &mut self.row,
                meta,
                self.now,
                self.config.memory_window,
                self.max_edc_index,
            );
            self.candidate_rows[i * FEATURES..(i + 1) * FEATURES].copy_from_slice(&self.row);
        }
        let n = self.candidates.len();
        self.model
            .predict_many(&self.candidate_rows, FEATURES, &mut self.scores[..n]);
        let mut best = (f64::NEG_INFINITY, self.candidates[0]);
        for (&index, &score) in self.candidates.iter().zip(&self.scores[..n]) {
            let score = match self.config.objective {
                Objective::ByteMissRatio => score,
                Objective::ObjectMissRatio => score * self.metas.get(index).charge as f64,
            };
            if score > best.0 {
                best = (score, index);
            }
        }
        best.1
    }

    /// Evicts unit `index` (libCacheSim's `evict_with_candidate`).
    fn evict(&mut self, index: Index, victims: &mut Vec<u64>) {
        self.sampling = true;
        let meta = *self.metas.get(index);
        let window = self.config.memory_window;
        let now = self.now;
        self.metas.unlink(&mut self.lru, index);
        self.used -= meta.charge;
        victims.push(meta.key);
        let age = now.wrapping_sub(meta.past);
        if age >= window {
            self.mature(index, |_| age.wrapping_add(window));
            self.discard(index);
        } else {
            self.forget
                .entry(u64::from(meta.past % window))
                .or_insert(index);
            self.unplace(index);
            self.place(index, false);
        }
    }
}

impl Policy for Lrb {
    fn name(&self) -> &'static str {
        "lrb"
    }

    fn lookup(&mut self, access: &Access) -> bool {
        self.now = self.now.wrapping_add(1);
        self.forget_old();
        let hit = match self.index.get(access.key, &self.metas) {
            Some(index) => {
                let now = self.now;
                self.mature(index, |time| now.wrapping_sub(time));
                let window = self.config.memory_window;
                let max_edc = self.max_edc_index;
                let meta = self.metas.get_mut(index);
                let old = meta.past;
                let distance = now.wrapping_sub(old);
                if meta.extra {
                    let at = meta.distance_idx as usize % DISTANCES;
                    meta.distances[at] = distance;
                    meta.distance_idx += 1;
                    if meta.distance_idx as usize >= 2 * DISTANCES {
                        meta.distance_idx -= DISTANCES as u8;
                    }
                    for k in 0..EDCS {
                        let decay =
                            half_pow((distance >> (BASE_EDC_WINDOW + k as u32)).min(max_edc));
                        meta.edc[k] = (f64::from(meta.edc[k]) * decay + 1.0) as f32;
                    }
                } else {
                    meta.extra = true;
                    meta.distances[0] = distance;
                    meta.distance_idx = 1;
                    for k in 0..EDCS {
                        let decay =
                            half_pow((distance >> (BASE_EDC_WINDOW + k as u32)).min(max_edc));
                        meta.edc[k] = (decay + 1.0) as f32;
                    }
                }
                meta.past = now;
                let resident = meta.resident;
                if resident {
                    self.metas.move_to_front(&mut self.lru, index);
                } else {
                    self.forget.remove(&u64::from(old % window));
                    self.forget.entry(u64::from(now % window)).or_insert(index);
                }
                resident
            }
            None => false,
        };
        if self.sampling {
            self.sample();
        }
        hit
    }

    fn admit(&mut self, access: &Access, victims: &mut Vec<u64>) -> bool {
        let charge = self.capacity.charge(access.size);
        if charge > self.capacity.limit() {
            return false;
        }
        while self.used + charge > self.capacity.limit() {
            let victim = self.rank();
            self.evict(victim, victims);
        }
        let window = self.config.memory_window;
        let index = if let Some(index) = self.index.get(access.key, &self.metas) {
            let meta = self.metas.get_mut(index);
            debug_assert!(!meta.resident, "admit of a resident key");
            meta.charge = charge;
            let slot = u64::from(meta.past % window);
            self.forget.remove(&slot);
            self.unplace(index);
            index
        } else {
            let index = self.metas.insert(Meta {
                key: access.key,
                charge,
                past: self.now,
                pos: 0,
                samples: NIL,
                stamp: 0,
                resident: true,
                extra: false,
                distance_idx: 0,
                distances: [0; DISTANCES],
                edc: [0.0; EDCS],
            });
            self.index.insert(access.key, index, &self.metas);
            index
        };
        self.place(index, true);
        self.metas.push_front(&mut self.lru, index);
        self.used += charge;
        true
    }

    fn remove(&mut self, key: u64) -> bool {
        let Some(index) = self.index.get(key, &self.metas) else {
            return false;
        };
        let meta = *self.metas.get(index);
        if !meta.resident {
            return false;
        }
        self.metas.unlink(&mut self.lru, index);
        self.used -= meta.charge;
        self.discard(index);
        true
    }

    fn contains(&self, key: u64) -> bool {
        self.index
            .get(key, &self.metas)
            .is_some_and(|index| self.metas.get(index).resident)
    }

    fn len(&self) -> usize {
        self.resident.len()
    }

    fn used(&self) -> u64 {
        self.used
    }

    fn capacity(&self) -> Capacity {
        self.capacity
    }
}

#[cfg(test)]
#[allow(clippy::float_cmp)] // features and predictions are compared exactly on purpose
mod tests {
    use super::*;
    use crate::lru::{Lru, LruConfig};

    use crate::testing::{read, run_keys as run};

    #[test]
    fn features_are_libcachesims_on_a_hand_trace() {
        let mut lrb = Lrb::new(Capacity::Objects(100), &LrbConfig::default()).unwrap();
        // Times 0..: key 1 at 0, 4 and 10; key 2 at 1; key 3 at 2 and 2050.
        let mut keys = vec![1, 2, 3, 9, 1];
        keys.extend([9; 5]);
        keys.push(1); // time 10
        keys.extend(std::iter::repeat_n(9, 2050 - 11));
        keys.push(3); // time 2050
        keys.push(9); // time 2051
        run(&mut lrb, keys);
        let features = |lrb: &Lrb, key| {
            let meta = *lrb.metas.get(lrb.index.get(key, &lrb.metas).unwrap());
            let mut row = [f32::NAN; FEATURES];
            Lrb::features(&mut row, &meta, 2052, 1 << 26, (1 << 16) - 1);
            row
        };
        let one = features(&lrb, 1);
        assert_eq!(one[0], 2042.0, "age");
        assert_eq!(&one[1..4], &[6.0, 4.0, 0.0], "distances, newest first");
        assert_eq!(one[F_SIZE], 1.0);
        assert_eq!(one[F_WITHIN], 2.0);
        // EDC k: (0.5^(4 >> (10+k)) + 1) · 0.5^(6 >> (10+k)) + 1 = 3, decayed
        // by 0.5^(2042 >> (10+k)): 0.5 for k = 0, 1 after.
        assert_eq!(one[F_EDC], 1.5);
        assert!(one[F_EDC + 1..].iter().all(|&e| e == 3.0), "{one:?}");
        let two = features(&lrb, 2);
        assert_eq!(two[0], 2051.0);
        assert!(two[1..F_SIZE].iter().all(|&d| d == 0.0), "no distances");
        assert_eq!(two[F_WITHIN], 0.0);
        // No EDC yet: the decay alone, 0.5^(2051 >> 10) = 0.25, then 0.5, 1.
        assert_eq!(&two[F_EDC..F_EDC + 3], &[0.25, 0.5, 1.0]);
        let three = features(&lrb, 3);
        assert_eq!(three[0], 2.0);
        assert_eq!(three[1], 2048.0);
        // One distance of 2048: 0.5^2 + 1, 0.5^1 + 1, then 2.
        assert_eq!(&three[F_EDC..F_EDC + 4], &[1.25, 1.5, 2.0, 2.0]);
    }

    #[test]
    fn distances_keep_the_newest_31_in_order() {
        let mut lrb = Lrb::new(Capacity::Objects(10), &LrbConfig::default()).unwrap();
        // Key 5 at times 0, 2, 5, 9, …: distances 2, 3, 4, … 41.
        let mut keys = vec![];
        for gap in 2..=41u64 {
            keys.push(5);
            keys.extend(std::iter::repeat_n(6, gap as usize - 1));
        }
        keys.push(5);
        run(&mut lrb, keys);
        let meta = *lrb.metas.get(lrb.index.get(5, &lrb.metas).unwrap());
        let mut row = [0.0; FEATURES];
        Lrb::features(&mut row, &meta, meta.past, 1 << 26, (1 << 16) - 1);
        let expected: Vec<f32> = (11..=41).rev().map(|d| d as f32).collect();
        assert_eq!(&row[1..F_SIZE], &expected[..]);
        // Prefix sums 41, 81, …: all below the window.
        assert_eq!(row[F_WITHIN], 31.0);
    }

    #[test]
    fn untrained_lrb_evicts_exactly_as_lru() {
        let mut state = 7u64;
        let keys: Vec<u64> = (0..30_000)
            .map(|_| {
                state = crate::mix64(state.wrapping_add(1));
                (state % 500).min((state >> 32) % 500)
            })
            .collect();
        for capacity in [Capacity::Objects(50), Capacity::Objects(200)] {
            let mut lrb = Lrb::new(capacity, &LrbConfig::default()).unwrap();
            let mut lru = Lru::new(capacity, &LruConfig::default()).unwrap();
            assert_eq!(run(&mut lrb, keys.clone()), run(&mut lru, keys.clone()));
            assert!(!lrb.is_trained(), "30,000 requests fill no batch");
        }
    }

    /// 80 hot keys requested round-robin, each followed by a key never seen
    /// again: LRU (100 slots < the 160 distinct keys between two requests of
    /// a hot key) hits nothing; a model that learns "a key with no past
    /// distance is not coming back" keeps the hot keys.
    #[test]
    fn learns_to_keep_the_hot_keys_over_a_scan() {
        let keys = |from: u64, n: u64| (from..from + n).flat_map(|i| [i % 80, 1_000 + i]);
        let config = LrbConfig {
            memory_window: 1024,
            batch_size: 4096,
            ..LrbConfig::default()
        };
        let mut lrb = Lrb::new(Capacity::Objects(100), &config).unwrap();
        let mut lru = Lru::new(Capacity::Objects(100), &LruConfig::default()).unwrap();
        run(&mut lrb, keys(0, 20_000));
        run(&mut lru, keys(0, 20_000));
        assert!(lrb.is_trained());
        let (lrb_hits, victims) = run(&mut lrb, keys(20_000, 10_000));
        let (lru_hits, _) = run(&mut lru, keys(20_000, 10_000));
        assert_eq!(lru_hits, 0);
        // Hot keys hit (at most 10,000 hits); scan keys are the victims.
        assert!(lrb_hits > 9_500, "{lrb_hits} hits");
        let hot_victims = victims.iter().filter(|&&k| k < 80).count();
        assert!(
            hot_victims < victims.len() / 20,
            "{hot_victims} of {}",
            victims.len()
        );
    }

    #[test]
    fn bad_knobs_are_named() {
        let bad = [
            LrbConfig {
                sample_rate: 0,
                ..LrbConfig::default()
            },
            LrbConfig {
                memory_window: 1000,
                ..LrbConfig::default()
            },
            LrbConfig {
                batch_size: 10,
                ..LrbConfig::default()
            },
            LrbConfig {
                trees: 0,
                ..LrbConfig::default()
            },
            LrbConfig {
                leaves: 1,
                ..LrbConfig::default()
            },
            LrbConfig {
                learning_rate: 0.0,
                ..LrbConfig::default()
            },
            LrbConfig {
                learning_rate: f64::NAN,
                ..LrbConfig::default()
            },
        ];
        let names = [
            "sample_rate",
            "memory_window",
            "batch_size",
            "trees",
            "leaves",
            "learning_rate",
            "learning_rate",
        ];
        for (config, name) in bad.iter().zip(names) {
            match Lrb::new(Capacity::Objects(10), config) {
                Err(ConfigError::OutOfRange { parameter, .. }) => assert_eq!(parameter, name),
                other => panic!("{name}: {other:?}"),
            }
        }
        let parsed: Result<crate::PolicyConfig, _> =
            toml::from_str("policy = \"lrb\"\nobjective = \"object-miss-ratio\"\n");
        assert_eq!(
            parsed.unwrap(),
            crate::PolicyConfig::Lrb(LrbConfig {
                objective: Objective::ObjectMissRatio,
                ..LrbConfig::default()
            })
        );
    }

    #[test]
    fn remove_and_bookkeeping_stay_consistent() {
        let mut lrb = Lrb::new(Capacity::Objects(20), &LrbConfig::default()).unwrap();
        let mut victims = vec![];
        for i in 0..100u64 {
            lrb.access(&read(i % 37), &mut victims);
            assert!(lrb.used() <= 20);
            assert_eq!(lrb.len() as u64, lrb.used());
        }
        let resident = (0..37).find(|&k| lrb.contains(k)).unwrap();
        assert!(lrb.remove(resident));
        assert!(!lrb.contains(resident));
        assert!(!lrb.remove(resident));
        let outside = (0..37).find(|&k| !lrb.contains(k)).unwrap();
        assert!(!lrb.remove(outside), "history is not resident");
        assert_eq!(lrb.len(), 19);
        assert_eq!(lrb.used(), 19);
    }
}
