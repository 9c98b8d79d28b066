//! 3L-Cache: evict, among residents sampled from the least recently used
//! end and from the newest admissions, the one a gradient-boosted model
//! predicts will be requested farthest in the future.
//!
//! Source: W. Zhou, Z. Qin, Y. Wu, F. Zhou, Y. Xu, Y. Zhang, L. Liu, M. Li,
//! "3L-Cache: Low Overhead and Precise Learning-based Eviction Policy for
//! Caches", USENIX FAST 2025. Maps to libCacheSim 0.3.5's `ThreeLCache`
//! (`cache/eviction/3LCache/`, the authors' C++ over `LightGBM`), whose
//! structure and defaults this follows:
//! - residents are an LRU queue; every unit evicted keeps its metadata in a
//!   FIFO history as long as the residents (`hsw − 1` times, plus 2; `hsw`
//!   starts at 2); a unit leaving the history is forgotten. Metadata: the
//!   last request time, up to 3 past inter-request distances, the request
//!   count (to 65,535), the size;
//! - from the first eviction on, each request marks one random tracked
//!   unit (resident, or a history slot) with the time, unless it is marked
//!   already; when that unit is requested again the mark becomes a training
//!   row (features as they were then) labelled `ln(1 + time since the mark)`,
//!   and when it leaves the history, `ln(1 + its age + the largest such age
//!   before the last model)`. Once a model exists only one mark in four
//!   becomes a row;
//! - features (6): the age, the 3 distances (most recent first, 0 where
//!   there are fewer), the size, the request count;
//! - every `batch_size` (65,536) rows a new model is fitted on them: 16
//!   trees of 32 leaves, learning rate 0.1, features 0.8, bagging 0.8 every
//!   5 trees, squared loss ([`crate::gbdt`], `LightGBM`'s algorithm);
//! - an eviction evicts the least recently used unit until the first model
//!   exists. Then it ranks a batch of candidates and evicts the half with the
//!   longest predicted reuse (`e^prediction` plus the time since the model
//!   was trained; with `objective = "object-miss-ratio"`, `e^prediction` ×
//!   size) one by one before ranking again. Candidates: the newest
//!   admissions, while they hold more than `reserved_space` % of the
//!   occupancy (the quick demotion), then up to 1 % of the residents + 2
//!   taken by a pointer that walks the queue from the least recently used
//!   end, skipping units requested more often than a bound (`sample_boundary`,
//!   the 99th percentile of the counts of the units evicted in the last
//!   walk) beyond its first `sampling_lru` % of the queue. Each full walk
//!   re-tunes `sample_boundary`, `sampling_lru` and `reserved_space`.
//!
//! How it differs from libCacheSim's: the trees come from our own
//! implementation of `LightGBM`'s algorithm, not `LightGBM`, so once a model
//! exists the predictions, the victims and the miss ratios are close to but
//! not libCacheSim's (docs/policies.md gives the measured difference).
//! Everything else is libCacheSim's, draw for draw: the marks come from the
//! same generator (`std::minstd_rand0` seeded 1 through libstdc++'s
//! `uniform_int_distribution<size_t>`), so the first training batch is
//! libCacheSim's, and the candidates' order in the max-heap follows
//! libstdc++'s `push_heap`/`pop_heap`. Before the first model 3L-Cache is
//! LRU, exactly as libCacheSim's. Where libCacheSim's code is undefined
//! (a newest-admission key already forgotten, a ranking with no candidate)
//! this skips the key or evicts the least recently used unit.
//! [`Policy::remove`] forgets the unit's metadata (libCacheSim's
//! `ThreeLCache_remove` is unsupported).

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use crate::error::Knobs;
use crate::gbdt::{Model, Params, Trainer};
use crate::index::{KeyIndex, Keyed};
use crate::list::{Index, List, NIL, Slab};
pub use crate::lrb::Objective;
use crate::{Access, Capacity, ConfigError, Policy};

mod libstdcxx;
use libstdcxx::{MinStd, Predicted, heap_pop, heap_push};

/// Past inter-request distances kept per unit.
const DISTANCES: usize = 3;
/// Feature positions (libCacheSim's order).
const F_SIZE: usize = 1 + DISTANCES;
const F_FREQ: usize = F_SIZE + 1;
/// Features per row.
pub const FEATURES: usize = F_FREQ + 1;
/// Candidates ranked per evicted unit (libCacheSim's `eviction_rate`).
const EVICTION_RATE: u32 = 2;
/// The most candidates the walk takes per ranking.
const MAX_SAMPLE_RATE: u32 = 1024;
/// The history's size factor stops growing here.
const MAX_HSW: u8 = 6;
/// Requests between looks at the history's hit ratio.
const HSW_PERIOD: u64 = 1_000_000;

/// 3L-Cache parameters (libCacheSim's defaults).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ThreeLCacheConfig {
    /// `"byte-miss-ratio"` (default: the predicted reuse time alone) or
    /// `"object-miss-ratio"` (× the unit's size).
    pub objective: Objective,
    /// Training rows per model, 64..=2^24. Default 65,536.
    pub batch_size: u32,
    /// Trees per model (`num_iterations`), 1..=1024. Default 16.
    pub trees: u32,
    /// Leaves per tree (`num_leaves`), 2..=1024. Default 32.
    pub leaves: u32,
    /// Shrinkage, in (0, 1]. Default 0.1.
    pub learning_rate: f64,
    /// Seed of the trainer's generator (bagging, feature draws). Default 0.
    /// The marks use libCacheSim's generator and seed.
    pub seed: u64,
}

impl Default for ThreeLCacheConfig {
    fn default() -> Self {
        Self {
            objective: Objective::ByteMissRatio,
            batch_size: 65_536,
            trees: 16,
            leaves: 32,
            learning_rate: 0.1,
            seed: 0,
        }
    }
}

impl ThreeLCacheConfig {
    fn check(&self) -> Result<(), ConfigError> {
        let knobs = Knobs("3lcache");
        knobs.within("batch_size", self.batch_size, 64, 1 << 24, "64 to 2^24")?;
        knobs.within("trees", self.trees, 1, 1024, "1 to 1024")?;
        knobs.within("leaves", self.leaves, 2, 1024, "2 to 1024")?;
        knobs.rate("learning_rate", self.learning_rate)
    }
}

/// What 3L-Cache keeps per tracked unit (libCacheSim's `Meta`).
#[derive(Clone, Copy, Debug)]
struct Meta {
    key: u64,
    charge: u64,
    /// Time of the last request.
    past: u64,
    /// The mark's time; 0 = unmarked.
    mark: u64,
    /// Position in `resident` when resident, else the history slot
    /// (counted from the history's first slot ever).
    pos: u64,
    /// The last prediction, valid while `pred_epoch` is the cache's.
    pred: f32,
    pred_epoch: u32,
    freq: u16,
    /// libCacheSim's `_past_distance_idx`: 0 before a second request, then
    /// one past the newest distance, modulo 3, kept in 1..6.
    distance_idx: u8,
    resident: bool,
    distances: [u32; DISTANCES],
}

impl Keyed for Meta {
    fn key(&self) -> u64 {
        self.key
    }
}

impl Meta {
    /// A request at `now` (libCacheSim's `Meta::update`).
    fn update(&mut self, now: u64) {
        let distance = now.wrapping_sub(self.past) as u32;
        if self.distance_idx == 0 {
            self.distances[0] = distance;
            self.distance_idx = 1;
        } else {
            self.distances[self.distance_idx as usize % DISTANCES] = distance;
            self.distance_idx += 1;
            if self.distance_idx as usize >= 2 * DISTANCES {
                self.distance_idx -= DISTANCES as u8;
            }
        }
        self.past = now;
        self.freq = self.freq.saturating_add(1);
    }

    /// The features as of time `at`.
    fn features(&self, row: &mut [f32], at: u64) {
        row[0] = at.wrapping_sub(self.past) as f32;
        row[1..F_SIZE].fill(0.0);
        let stored = (self.distance_idx as usize).min(DISTANCES);
        for j in 0..stored {
            let distance = self.distances[(self.distance_idx as usize - 1 - j) % DISTANCES];
            row[j + 1] = distance as i32 as f32;
        }
        row[F_SIZE] = self.charge as f32;
        row[F_FREQ] = f32::from(self.freq);
    }
}

/// 3L-Cache.
#[derive(Debug)]
pub struct ThreeLCache {
    capacity: Capacity,
    config: ThreeLCacheConfig,
    used: u64,
    /// Requests so far minus one (libCacheSim's `current_seq`).
    now: u64,
    /// Tracked units: residents threaded on `lru` (front = newest).
    metas: Slab<Meta>,
    index: KeyIndex,
    lru: List,
    /// The residents in libCacheSim's `in_cache.metas` order.
    resident: Vec<Index>,
    /// libCacheSim's `out_cache.metas`: the evicted units, oldest first;
    /// `NIL` where the unit was admitted again.
    history: VecDeque<Index>,
    /// Slots popped off the history so far (`front_index`).
    history_front: u64,
    /// The walk's position (`samplepointer`); `NIL` only with no resident.
    pointer: Index,
    rng: MinStd,
    /// Marking has started (the first eviction happened).
    marking: bool,
    trainer: Trainer,
    model: Model,
    /// Evictions left before the next ranking; training waits for 0.
    evict_nums: i64,
    sample_rate: u32,
    sample_boundary: u16,
    sampling_lru: u8,
    reserved_space: u8,
    initial_queue_length: u64,
    scan_length: u64,
    pointer_time: u64,
    /// libCacheSim's `evcition_distribution`: evictions of units the walk
    /// had passed, candidates walked, and both as of the walk's first part.
    walk_counts: [u64; 4],
    /// Evictions by `⌊log2 request count⌋` in this walk.
    freq_evictions: [i32; 16],
    /// Units admitted since the first model, not yet offered as candidates.
    new_keys: VecDeque<u64>,
    new_charge: u64,
    /// The largest age of a unit leaving the history: before the last
    /// model, and since.
    max_boundary: [u64; 2],
    /// The time of the last model.
    trained_at: u64,
    hsw: u8,
    history_full: bool,
    window_requests: u64,
    window_hits: u64,
    window_tracked: u64,
    /// Predictions (`pred_times`); an entry counts while its unit's
    /// `pred_epoch` is `epoch` and its `pred` equal.
    heap: Vec<Predicted>,
    epoch: u32,
    /// Residents with a valid prediction (`pred_map.size()`).
    predicted: usize,
    row: [f32; FEATURES],
    candidates: Vec<Index>,
    candidate_rows: Vec<f32>,
    scores: Vec<f64>,
}

impl ThreeLCache {
    /// An empty 3L-Cache.
    pub fn new(capacity: Capacity, config: &ThreeLCacheConfig) -> Result<Self, ConfigError> {
        config.check()?;
        let params = Params {
            trees: config.trees,
            leaves: config.leaves,
            learning_rate: config.learning_rate,
            seed: config.seed,
            ..Params::default()
        };
        let mut trainer = Trainer::new(FEATURES, params);
        trainer.reserve(config.batch_size as usize + config.batch_size as usize / 8);
        Ok(Self {
            capacity,
            config: config.clone(),
            used: 0,
            now: u64::MAX,
            metas: Slab::new(),
            index: KeyIndex::default(),
            lru: List::new(),
            resident: Vec::new(),
            history: VecDeque::new(),
            history_front: 0,
            pointer: NIL,
            rng: MinStd::new(),
            marking: false,
            trainer,
            model: Model::default(),
            evict_nums: 0,
            sample_rate: MAX_SAMPLE_RATE,
            sample_boundary: match config.objective {
                Objective::ByteMissRatio => 1,
                Objective::ObjectMissRatio => u16::MAX,
            },
            sampling_lru: 1,
            reserved_space: 2,
            initial_queue_length: 0,
            scan_length: 0,
            pointer_time: 0,
            walk_counts: [0; 4],
            freq_evictions: [0; 16],
            new_keys: VecDeque::new(),
            new_charge: 0,
            max_boundary: [0; 2],
            trained_at: 0,
            hsw: 2,
            history_full: false,
            window_requests: 0,
            window_hits: 0,
            window_tracked: 0,
            heap: Vec::new(),
            epoch: 0,
            predicted: 0,
            row: [0.0; FEATURES],
            candidates: Vec::new(),
            candidate_rows: Vec::new(),
            scores: Vec::new(),
        })
    }

    /// Whether a model has been trained (before that, 3L-Cache is LRU).
    pub fn is_trained(&self) -> bool {
        self.model.is_trained()
    }

    /// Units whose metadata is kept outside the cache (live history slots).
    pub fn history_len(&self) -> usize {
        self.metas.len() - self.resident.len()
    }

    /// The resident after `index` towards the newest, wrapping to the least
    /// recently used (libCacheSim's circular `dq[..].next`).
    fn newer(&self, index: Index) -> Index {
        self.metas
            .prev(index)
            .or_else(|| self.lru.back())
            .unwrap_or(NIL)
    }

    /// Drops all predictions (`pred_map.clear()`, `pred_times.clear()`).
    fn clear_predictions(&mut self) {
        self.epoch = self.epoch.wrapping_add(1);
        self.predicted = 0;
        self.heap.clear();
    }

    /// Drops unit `index`'s prediction (`pred_map.erase`).
    fn forget_prediction(&mut self, index: Index) {
        let epoch = self.epoch;
        let meta = self.metas.get_mut(index);
        if meta.pred_epoch == epoch {
            meta.pred_epoch = epoch.wrapping_sub(1);
            self.predicted -= 1;
        }
    }

    /// Adds the row of unit `index`'s mark, labelled with `future`, and
    /// trains when the batch is full and no ranked batch is pending.
    fn label(&mut self, index: Index, future: u64) {
        let meta = self.metas.get(index);
        meta.features(&mut self.row, meta.mark);
        let label = f64::from(future as i32).ln_1p() as f32;
        self.trainer.push(&self.row, label);
        if self.trainer.len() >= self.config.batch_size as usize && self.evict_nums <= 0 {
            self.train();
        }
    }

    /// Fits a new model on the batch (libCacheSim's `train`).
    fn train(&mut self) {
        self.trainer.fit(&mut self.model);
        self.clear_predictions();
        self.max_boundary[0] = self.max_boundary[1];
        self.trained_at = self.now;
        if self.window_requests > HSW_PERIOD && self.history_full {
            let outside = self.window_tracked - self.window_hits;
            let share = outside as f64 / (self.window_hits * u64::from(self.hsw - 1)) as f64;
            if share > 0.01 {
                if u64::from(self.hsw - 1) < (self.window_requests - self.window_hits) / outside {
                    self.hsw += 1;
                    self.history_full = false;
                }
                self.hsw = self.hsw.min(MAX_HSW);
            }
            self.window_hits = 0;
            self.window_tracked = 0;
            self.window_requests = 0;
        }
    }

    /// The unit this request marks (libCacheSim's `sample`), `NIL` for a
    /// slot whose unit was admitted again; loads its metadata early.
    fn mark_target(&mut self) -> Index {
        let total = (self.resident.len() + self.history.len()) as u64;
        if total == 0 {
            return NIL;
        }
        let at = (self.rng.draw() % total) as usize;
        let index = match at.checked_sub(self.resident.len()) {
            None => self.resident[at],
            Some(slot) => self.history[slot],
        };
        if index != NIL {
            self.metas.prefetch(index);
        }
        index
    }

    /// Marks unit `index` with the time unless it is marked.
    fn mark(&mut self, index: Index) {
        if index != NIL {
            let now = self.now;
            let meta = self.metas.get_mut(index);
            if meta.mark == 0 {
                meta.mark = now;
            }
        }
    }

    /// Forgets the oldest history slot once the history is full
    /// (libCacheSim's `erase_out_cache`).
    fn trim_history(&mut self) {
        let bound = self.resident.len() * usize::from(self.hsw - 1) + 2;
        if self.history.len() < bound {
            return;
        }
        self.history_full = true;
        let Some(index) = self.history.pop_front() else {
            return;
        };
        self.history_front += 1;
        if index == NIL {
            return;
        }
        let meta = *self.metas.get(index);
        if meta.mark != 0 && (self.rng.draw().is_multiple_of(4) || !self.is_trained()) {
            let age = self.now.wrapping_sub(meta.past);
            self.max_boundary[1] = self.max_boundary[1].max(age);
            self.label(index, self.max_boundary[0].wrapping_add(age));
        }
        self.index.remove(meta.key, &self.metas);
        self.metas.remove(index);
    }

    /// Sets the ranking's sample rate from the queue length, as libCacheSim.
    fn rate_for(queue: u64) -> u32 {
        if queue > 2 {
            (queue as f64 * 0.01 + f64::from(EVICTION_RATE)) as u32
        } else {
            1
        }
    }

    /// Re-tunes the walk after a full pass over the queue.
    fn end_walk(&mut self) {
        self.initial_queue_length = self.resident.len() as u64;
        self.sample_rate = MAX_SAMPLE_RATE;
        let cap = (self.initial_queue_length as f64 * 0.01 + f64::from(EVICTION_RATE)) as i32;
        if MAX_SAMPLE_RATE as i32 >= cap {
            self.sample_rate = Self::rate_for(self.initial_queue_length);
        }
        self.pointer = self.lru.back().unwrap_or(NIL);
        self.scan_length = 0;
        self.clear_predictions();
        if self.config.objective == Objective::ObjectMissRatio {
            return;
        }
        // The 99th percentile of the evicted units' request counts, by
        // power-of-two class, interpolated within its class.
        let sum: i32 = self.freq_evictions.iter().sum();
        let mut below = 0;
        for (class, &n) in self.freq_evictions.iter().enumerate() {
            below += n;
            if f64::from(below) >= 0.99 * f64::from(sum) {
                self.sample_boundary = if class == 0 {
                    1
                } else {
                    let low = 2f64.powi(class as i32 - 1);
                    let high = 2f64.powi(class as i32);
                    let within =
                        (0.99 * f64::from(sum) + f64::from(n) - f64::from(below)) / f64::from(n);
                    (low + ((high - low) * within).ceil()) as u16
                };
                break;
            }
        }
        let w = self.walk_counts;
        if w[2].wrapping_mul(w[1]) > w[0].wrapping_mul(w[3]) {
            self.sampling_lru = self.sampling_lru.wrapping_add(1);
        } else if self.sampling_lru > 1 {
            self.sampling_lru -= 1;
        }
        if w[0].wrapping_add(w[2]) > self.new_keys.len() as u64 {
            self.reserved_space = self.reserved_space.wrapping_add(1);
        } else if self.reserved_space > 1 {
            self.reserved_space /= 2;
        }
        self.walk_counts = [0; 4];
        self.freq_evictions = [0; 16];
    }

    /// Offers the newest admissions while they hold more than
    /// `reserved_space` % of the occupancy (libCacheSim's `quick_demotion`).
    fn quick_demotion(&mut self) {
        let limit = (f64::from(self.sample_rate) * 1.5) as usize;
        let (mut i, mut taken) = (0, 0);
        while self.new_charge > self.used * u64::from(self.reserved_space) / 100
            && taken < limit
            && i < self.new_keys.len()
        {
            if let Some(index) = self.index.get(self.new_keys[i], &self.metas) {
                let meta = self.metas.get(index);
                self.new_charge = self.new_charge.wrapping_sub(meta.charge);
                if meta.resident {
                    self.candidates.push(index);
                    taken += 1;
                }
            }
            i += 1;
        }
        self.new_keys.drain(..i);
        if self.new_keys.is_empty() {
            self.new_charge = 0;
        }
    }

    /// Picks and predicts a batch of candidates (libCacheSim's `rank`);
    /// returns how many.
    fn rank(&mut self) -> usize {
        self.candidates.clear();
        if self.initial_queue_length == 0 {
            self.initial_queue_length = self.resident.len() as u64;
        }
        let queue = self.initial_queue_length;
        if f64::from(self.sample_rate) >= queue as f64 * 0.01 + f64::from(EVICTION_RATE) {
            self.sample_rate = Self::rate_for(queue);
        }
        self.quick_demotion();
        if self.new_charge < self.used * u64::from(self.reserved_space) / 10 {
            let mut taken = 0;
            while taken < self.sample_rate
                && (self.candidates.len() as u64) < self.initial_queue_length
            {
                let at = self.pointer;
                let lru_part = self.initial_queue_length * u64::from(self.sampling_lru) / 100;
                if self.walk_counts[3] == 0 && self.scan_length > lru_part {
                    self.walk_counts[2] = self.walk_counts[0];
                    self.walk_counts[3] = self.walk_counts[1];
                    self.walk_counts[0] = 0;
                    self.walk_counts[1] = 0;
                }
                let freq = self.metas.get(at).freq - 1;
                if freq < self.sample_boundary
                    || self.scan_length <= lru_part + u64::from(EVICTION_RATE)
                {
                    self.candidates.push(at);
                    taken += 1;
                }
                self.scan_length += 1;
                if self.scan_length >= self.initial_queue_length {
                    self.end_walk();
                    taken = 0;
                    continue;
                }
                self.pointer = self.newer(at);
            }
            if let Some(&last) = self.candidates.last() {
                self.pointer_time = self.metas.get(last).past;
            }
            self.walk_counts[1] += u64::from(self.sample_rate);
        }
        self.predict();
        self.candidates.len()
    }

    /// Predicts every candidate and pushes it on the heap (libCacheSim's
    /// `prediction`).
    fn predict(&mut self) {
        let n = self.candidates.len();
        if n == 0 {
            return;
        }
        if self.candidate_rows.len() < n * FEATURES {
            self.candidate_rows.resize(n * FEATURES, 0.0);
            self.scores.resize(n, 0.0);
        }
        for (i, &index) in self.candidates.iter().enumerate() {
            self.metas.get(index).features(
                &mut self.candidate_rows[i * FEATURES..][..FEATURES],
                self.now,
            );
        }
        for (score, row) in self.scores[..n]
            .iter_mut()
            .zip(self.candidate_rows.chunks_exact(FEATURES))
        {
            *score = self.model.predict(row);
        }
        let since = self.now.wrapping_sub(self.trained_at) as f64;
        for i in 0..n {
            let index = self.candidates[i];
            let meta = self.metas.get_mut(index);
            let reuse = match self.config.objective {
                Objective::ByteMissRatio => (self.scores[i].exp() + since) as f32,
                Objective::ObjectMissRatio => (meta.charge as f64 * self.scores[i].exp()) as f32,
            };
            if meta.pred_epoch != self.epoch {
                meta.pred_epoch = self.epoch;
                self.predicted += 1;
            }
            meta.pred = reuse;
            heap_push(
                &mut self.heap,
                Predicted {
                    reuse,
                    key: meta.key,
                },
            );
        }
    }

    /// The unit to evict (libCacheSim's `evict_predobj`).
    fn victim(&mut self) -> Index {
        let oldest = self.lru.back().expect("evicting from a non-empty cache");
        if !self.is_trained() {
            return oldest;
        }
        if self.evict_nums <= 0 || self.predicted == 0 {
            self.evict_nums = (self.rank() / EVICTION_RATE as usize) as i64;
        }
        while let Some(Predicted { reuse, key }) = heap_pop(&mut self.heap) {
            let Some(index) = self.index.get(key, &self.metas) else {
                continue;
            };
            let meta = self.metas.get(index);
            // libCacheSim's `pred_map[key] == reuse_time`: the heap entry is
            // the unit's latest prediction, bit for bit.
            if meta.resident
                && meta.pred_epoch == self.epoch
                && meta.pred.to_bits() == reuse.to_bits()
            {
                self.freq_evictions[meta.freq.ilog2() as usize] += 1;
                if meta.past <= self.pointer_time {
                    self.walk_counts[0] += 1;
                }
                return index;
            }
        }
        oldest
    }

    /// Takes resident `index` out of the queue, the walk and the dense
    /// array; returns its metadata.
    fn unqueue(&mut self, index: Index) -> Meta {
        self.forget_prediction(index);
        if self.pointer == index {
            self.pointer = self.newer(index);
            if self.pointer == index {
                self.pointer = NIL;
            }
        }
        self.metas.unlink(&mut self.lru, index);
        let meta = *self.metas.get(index);
        self.used -= meta.charge;
        let pos = meta.pos as usize;
        self.resident.swap_remove(pos);
        if let Some(&moved) = self.resident.get(pos) {
            self.metas.get_mut(moved).pos = pos as u64;
        }
        meta
    }

    /// Evicts resident `index` into the history (libCacheSim's
    /// `evict_with_candidate`).
    fn evict(&mut self, index: Index, victims: &mut Vec<u64>) {
        self.marking = true;
        self.evict_nums -= 1;
        let meta = self.unqueue(index);
        victims.push(meta.key);
        let slot = self.history_front + self.history.len() as u64;
        let meta = self.metas.get_mut(index);
        meta.resident = false;
        meta.pos = slot;
        self.history.push_back(index);
    }
}

impl Policy for ThreeLCache {
    fn name(&self) -> &'static str {
        "3lcache"
    }

    fn prefetch(&self, key: u64, ahead: crate::Ahead) {
        self.index.prefetch_stage(key, &self.metas, ahead, true);
    }

    fn lookup(&mut self, access: &Access) -> bool {
        self.now = self.now.wrapping_add(1);
        if self.history_full {
            self.window_requests += 1;
        }
        let found = self.index.get(access.key, &self.metas);
        // libCacheSim's draws, in its order: the label's, then the mark's.
        let labelled = found.and_then(|index| {
            (self.metas.get(index).mark != 0).then(|| self.rng.draw().is_multiple_of(4))
        });
        let target = if self.marking {
            self.mark_target()
        } else {
            NIL
        };
        let hit = match found {
            Some(index) => {
                let meta = *self.metas.get(index);
                if self.history_full {
                    self.window_hits += u64::from(meta.resident);
                    self.window_tracked += 1;
                }
                if let Some(sampled) = labelled {
                    if sampled || !self.is_trained() {
                        self.label(index, self.now.wrapping_sub(meta.mark));
                    }
                    self.metas.get_mut(index).mark = 0;
                }
                self.metas.get_mut(index).update(self.now);
                if meta.resident {
                    if self.pointer == index {
                        self.pointer = self.newer(index);
                    }
                    self.forget_prediction(index);
                    self.metas.move_to_front(&mut self.lru, index);
                }
                meta.resident
            }
            None => false,
        };
        self.mark(target);
        self.trim_history();
        hit
    }

    fn admit(&mut self, access: &Access, victims: &mut Vec<u64>) -> bool {
        let charge = self.capacity.charge(access.size);
        if charge > self.capacity.limit() {
            return false;
        }
        while self.used + charge > self.capacity.limit() {
            let victim = self.victim();
            self.evict(victim, victims);
        }
        let index = if let Some(index) = self.index.get(access.key, &self.metas) {
            let meta = *self.metas.get(index);
            debug_assert!(!meta.resident, "admit of a resident key");
            self.history[(meta.pos - self.history_front) as usize] = NIL;
            self.metas.get_mut(index).charge = charge;
            index
        } else {
            let index = self.metas.insert(Meta {
                key: access.key,
                charge,
                past: self.now,
                mark: 0,
                pos: 0,
                pred: 0.0,
                pred_epoch: self.epoch.wrapping_sub(1),
                freq: 1,
                distance_idx: 0,
                resident: true,
                distances: [0; DISTANCES],
            });
            self.index.insert(access.key, index, &self.metas);
            index
        };
        let meta = self.metas.get_mut(index);
        meta.resident = true;
        meta.pos = self.resident.len() as u64;
        self.resident.push(index);
        if self.pointer == NIL {
            self.pointer = index;
        }
        self.metas.push_front(&mut self.lru, index);
        self.used += charge;
        if self.is_trained() {
            self.new_charge += charge;
            self.new_keys.push_back(access.key);
        }
        true
    }

    fn remove(&mut self, key: u64) -> bool {
        let Some(index) = self.index.get(key, &self.metas) else {
            return false;
        };
        if !self.metas.get(index).resident {
            return false;
        }
        self.unqueue(index);
        self.index.remove(key, &self.metas);
        self.metas.remove(index);
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
    use crate::testing;
    use proptest::prelude::*;

    use crate::testing::{read, run_keys as run};

    fn small_batches() -> ThreeLCacheConfig {
        ThreeLCacheConfig {
            batch_size: 64,
            ..ThreeLCacheConfig::default()
        }
    }

    /// Skewed keys over `0..keys` (the smaller of two uniform draws).
    fn skewed(n: usize, keys: u64, seed: u64) -> Vec<u64> {
        let mut state = seed;
        (0..n)
            .map(|_| {
                state = crate::mix64(state.wrapping_add(1));
                (state % keys).min((state >> 32) % keys)
            })
            .collect()
    }

    #[test]
    fn features_are_libcachesims_on_a_hand_trace() {
        let mut cache =
            ThreeLCache::new(Capacity::Objects(100), &ThreeLCacheConfig::default()).unwrap();
        // Key 1 at times 0, 4, 7, 12 and 20; key 2 at 1; key 3 at 2 and 5.
        let keys = [
            1, 2, 3, 9, 1, 3, 9, 1, 9, 9, 9, 9, 1, 9, 9, 9, 9, 9, 9, 9, 1,
        ];
        run(&mut cache, keys);
        let features = |key| {
            let meta = *cache.metas.get(cache.index.get(key, &cache.metas).unwrap());
            let mut row = [f32::NAN; FEATURES];
            meta.features(&mut row, 30);
            row
        };
        // Distances 4, 3, 5, 8: the newest three, newest first.
        assert_eq!(features(1), [10.0, 8.0, 5.0, 3.0, 1.0, 5.0]);
        assert_eq!(features(2), [29.0, 0.0, 0.0, 0.0, 1.0, 1.0]);
        assert_eq!(features(3), [25.0, 3.0, 0.0, 0.0, 1.0, 2.0]);
    }

    #[test]
    fn untrained_3lcache_evicts_exactly_as_lru() {
        let keys = skewed(30_000, 500, 7);
        for capacity in [Capacity::Objects(50), Capacity::Objects(200)] {
            let mut cache = ThreeLCache::new(capacity, &ThreeLCacheConfig::default()).unwrap();
            let mut lru = Lru::new(capacity, &LruConfig::default()).unwrap();
            assert_eq!(run(&mut cache, keys.clone()), run(&mut lru, keys.clone()));
            assert!(!cache.is_trained(), "30,000 requests fill no batch");
            // The history is as long as the residents plus 2 (`hsw` = 2),
            // trimmed by one slot at each request before a miss evicts.
            let slots = cache.history.len();
            assert!(
                (cache.len() + 1..=cache.len() + 2).contains(&slots),
                "{slots}"
            );
            assert!(cache.history_len() <= cache.history.len());
        }
    }

    /// 80 hot keys requested round-robin, each followed by a key never seen
    /// again: LRU (100 slots < the 160 distinct keys between two requests of
    /// a hot key) hits nothing; a model that learns "a key requested once is
    /// not coming back" keeps the hot keys.
    #[test]
    fn learns_to_keep_the_hot_keys_over_a_scan() {
        let keys = |from: u64, n: u64| (from..from + n).flat_map(|i| [i % 80, 1_000 + i]);
        let config = ThreeLCacheConfig {
            batch_size: 4096,
            ..ThreeLCacheConfig::default()
        };
        let mut cache = ThreeLCache::new(Capacity::Objects(100), &config).unwrap();
        let mut lru = Lru::new(Capacity::Objects(100), &LruConfig::default()).unwrap();
        run(&mut cache, keys(0, 20_000));
        run(&mut lru, keys(0, 20_000));
        assert!(cache.is_trained());
        let (hits, victims) = run(&mut cache, keys(20_000, 10_000));
        let (lru_hits, _) = run(&mut lru, keys(20_000, 10_000));
        assert_eq!(lru_hits, 0);
        assert!(hits > 9_000, "{hits} hits of 10,000 hot requests");
        let hot_victims = victims.iter().filter(|&&k| k < 80).count();
        assert!(
            hot_victims < victims.len() / 10,
            "{hot_victims} of {}",
            victims.len()
        );
    }

    #[test]
    fn trained_bookkeeping_stays_consistent_in_both_modes() {
        let keys = skewed(40_000, 3_000, 11);
        for capacity in [Capacity::Objects(300), Capacity::Bytes(300 * 3)] {
            let mut cache = ThreeLCache::new(capacity, &small_batches()).unwrap();
            let accesses: Vec<Access> = keys
                .iter()
                .map(|&k| Access::read(k, (k % 5) as u32 + 1, 0))
                .collect();
            testing::replay_checked(&mut cache, &accesses);
            assert!(cache.is_trained());
            assert!(cache.new_keys.len() <= cache.resident.len() + cache.history.len());
            // Every resident is on the queue once, at its dense position.
            assert_eq!(cache.lru.len(), cache.len());
            for (pos, &index) in cache.resident.iter().enumerate() {
                let meta = cache.metas.get(index);
                assert!(meta.resident && meta.pos == pos as u64);
            }
            assert!(
                cache.metas.get(cache.pointer).resident,
                "the walk is on a resident"
            );
            let used: u64 = cache
                .resident
                .iter()
                .map(|&i| cache.metas.get(i).charge)
                .sum();
            assert_eq!(used, cache.used());
            // The history: live slots point back at their unit.
            for (slot, &index) in cache.history.iter().enumerate() {
                if index != NIL {
                    let meta = cache.metas.get(index);
                    assert!(!meta.resident);
                    assert_eq!(meta.pos, cache.history_front + slot as u64);
                }
            }
            // One slot leaves per request, so in bytes, where one admission
            // can evict many, the history may run over for a while.
            if let Capacity::Objects(_) = capacity {
                let bound = cache.len() * usize::from(cache.hsw - 1) + 2;
                assert!(
                    cache.history.len() <= bound,
                    "{} > {bound}",
                    cache.history.len()
                );
            }
        }
    }

    #[test]
    fn bad_knobs_are_named() {
        let bad = [
            ThreeLCacheConfig {
                batch_size: 10,
                ..ThreeLCacheConfig::default()
            },
            ThreeLCacheConfig {
                trees: 0,
                ..ThreeLCacheConfig::default()
            },
            ThreeLCacheConfig {
                leaves: 1,
                ..ThreeLCacheConfig::default()
            },
            ThreeLCacheConfig {
                learning_rate: 0.0,
                ..ThreeLCacheConfig::default()
            },
            ThreeLCacheConfig {
                learning_rate: f64::NAN,
                ..ThreeLCacheConfig::default()
            },
        ];
        let names = [
            "batch_size",
            "trees",
            "leaves",
            "learning_rate",
            "learning_rate",
        ];
        for (config, name) in bad.iter().zip(names) {
            match ThreeLCache::new(Capacity::Objects(10), config) {
                Err(ConfigError::OutOfRange {
                    policy, parameter, ..
                }) => assert_eq!((policy, parameter), ("3lcache", name)),
                other => panic!("{name}: {other:?}"),
            }
        }
        let parsed: Result<crate::PolicyConfig, _> =
            toml::from_str("policy = \"3lcache\"\nobjective = \"object-miss-ratio\"\n");
        assert_eq!(
            parsed.unwrap(),
            crate::PolicyConfig::ThreeLCache(ThreeLCacheConfig {
                objective: Objective::ObjectMissRatio,
                ..ThreeLCacheConfig::default()
            })
        );
        let unknown: Result<crate::PolicyConfig, _> =
            toml::from_str("policy = \"3lcache\"\nsample_rate = 4\n");
        assert!(unknown.is_err());
    }

    #[test]
    fn remove_and_bookkeeping_stay_consistent() {
        let mut cache = ThreeLCache::new(Capacity::Objects(20), &small_batches()).unwrap();
        let mut victims = vec![];
        for key in skewed(5_000, 60, 3) {
            cache.access(&read(key), &mut victims);
            assert!(cache.used() <= 20);
            assert_eq!(cache.len() as u64, cache.used());
        }
        assert!(cache.is_trained());
        let resident = (0..60).find(|&k| cache.contains(k)).unwrap();
        assert!(cache.remove(resident));
        assert!(!cache.contains(resident));
        assert!(!cache.remove(resident));
        let outside = (0..60).find(|&k| !cache.contains(k)).unwrap();
        assert!(!cache.remove(outside), "history is not resident");
        assert_eq!((cache.len(), cache.used()), (19, 19));
        for key in 0..60 {
            cache.remove(key);
        }
        assert_eq!((cache.len(), cache.used()), (0, 0));
        assert_eq!(cache.pointer, NIL);
        // Refills and evicts again after being emptied.
        run(&mut cache, skewed(2_000, 60, 4));
        assert_eq!(cache.len(), 20);
    }

    proptest! {
        /// Capacity never exceeded, hits only for resident keys, victims
        /// gone, in both modes, with models trained every 64 rows.
        #[test]
        fn invariants_hold(trace in testing::trace_strategy(60, 1500, 8), cap in 1u64..40, bytes: bool) {
            let capacity = if bytes { Capacity::Bytes(cap * 4) } else { Capacity::Objects(cap) };
            let mut cache = ThreeLCache::new(capacity, &small_batches()).unwrap();
            testing::replay_checked(&mut cache, &trace);
            let mut omr = ThreeLCache::new(capacity, &ThreeLCacheConfig {
                objective: Objective::ObjectMissRatio,
                ..small_batches()
            }).unwrap();
            testing::replay_checked(&mut omr, &trace);
        }
    }
}
