//! `GLCache`: group-level learning. Units are written FIFO into segments of
//! `segment_size`; an eviction merges `n_merge` segments into one, keeping
//! the units that score best and evicting the rest; a learned model chooses
//! which segments to merge.
//!
//! Source: J. Yang, Z. Mao, Y. Yue, K. V. Rashmi, "GL-Cache: Group-level
//! learning for efficient and high-performance caching", USENIX FAST 2023.
//! Maps to libCacheSim's `GLCache` (`cache/eviction/GLCache/`, type
//! `learned`, the default), step for step:
//! - a miss appends the unit to the last segment, opening a new one when it
//!   is full; a hit counts (`freq`, the segment's hits and active units) and
//!   moves nothing;
//! - to make room, `n_merge` segments (never the one being filled) are
//!   merged into a new segment placed where the first was: of their units
//!   the `segment_size` with the highest `10^8 / charge / (requests since
//!   the last access)` stay (ties: the first in segment order), the others
//!   are evicted; a unit kept has its `freq` halved (`(freq + 1) / 2`);
//! - until a model exists, the segments merged are the next `n_merge` after
//!   the previous merge (a pointer sweeping the segment chain, back to its
//!   start when fewer than `n_merge` segments are left before the last);
//! - at the first eviction, and after each training, up to 8,192 segments
//!   are sampled (snapshotted): their features are recorded, and their
//!   utility is accumulated from then on, `10^6 / (requests since the
//!   snapshot + 1) / charge` per request of one of their units after the
//!   first `segment_size / n_merge` (a sampled segment evicted keeps its
//!   units as ghosts until the next training, to keep counting);
//! - `retrain_interval` seconds (of the trace's clock, [`Access::clock`])
//!   after the previous training (or the first eviction) a model is fitted
//!   on the snapshot (six features: age in seconds, mean unit size, hits,
//!   active units, request rate and miss ratio when written; utility
//!   normalised to [0, 1]; every tenth row for validation);
//! - with a model, all segments are ranked by predicted utility per byte,
//!   and the lowest are merged (with their next in rank, or with their
//!   next in the chain when `merge_consecutive`) until `rank_interval` of
//!   the ranked segments have been taken; then all are ranked again.
//!
//! Differences: libCacheSim fits the model with `XGBoost`
//! (`reg:squarederror`, its defaults, at most 20 rounds, stopping when the
//! validation error changes less than 1 % three rounds running); ours are
//! [`crate::gbdt`]'s trees with `XGBoost`'s defaults (learning rate 0.3,
//! depth 6, L2 term 1, a split gaining more than 1e-6, one row a leaf at
//! least, the mean label as first score, as `XGBoost` 2 estimates it), 20
//! rounds and the same early stopping; its bins and tie-breaking are not
//! `XGBoost`'s. So once a model exists the victims are close to, not
//! exactly, libCacheSim's (within 0.007 of its miss ratio on a 5.8-day zipf
//! trace, `glcache_trained_stays_within_tolerance_of_libcachesim`); before
//! (on traces
//! shorter than `retrain_interval` after the first eviction, or whose clock
//! is 0, as in the engine) they are exactly libCacheSim 0.3.5's.
//! Where libCacheSim would read past its ranking or dereference a missing
//! segment (a ranking with fewer than two usable segments), ours ranks
//! again or merges the first segments. [`Policy::remove`] leaves a hole
//! that the next merge of its segment drops (libCacheSim's aborts). The
//! oracle types (`logOracle`, `itemOracle`, `twoOracle`) and oracle
//! training labels are not offered.

use serde::{Deserialize, Serialize};

use crate::error::Knobs;
use crate::gbdt::{Model, Params, Trainer};
use crate::index::{KeyIndex, Keyed};
use crate::list::{Index, Slab};
use crate::{Access, Ahead, Capacity, ConfigError, Policy};

mod learn;

/// No segment.
const NIL: u32 = u32::MAX;
/// No location.
const NONE: u64 = u64::MAX;
/// Features per segment (libCacheSim's `N_FEATURE_NORMAL`).
const FEATURES: usize = 6;
/// Segments snapshotted at most (`N_MAX_TRAINING_DATA`).
const MAX_TRAIN_ROWS: usize = 8192;
/// Validation rows at most (a tenth of the training rows, as libCacheSim).
const MAX_VALID_ROWS: usize = MAX_TRAIN_ROWS / 10;
/// Boosting rounds at most (`N_TRAIN_ITER`).
const TRAIN_ROUNDS: u32 = 20;
/// The cache state (request rate, miss ratio) is refreshed once both this
/// many seconds and requests have passed.
const STATE_SECONDS: i64 = 10;
const STATE_REQUESTS: i64 = 10_000;
/// What a segment ranked while its bucket is too small to merge gets added.
const UNMERGEABLE: f64 = (i32::MAX / 2) as f64;
/// The ranked position that forces a new ranking (`INT32_MAX`).
const RERANK: usize = i32::MAX as usize;

/// `GLCache`'s knobs, with libCacheSim 0.3.5's defaults.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GlCacheConfig {
    /// Units a segment holds, 2..=100,000,000, and more than twice
    /// `n_merge` (libCacheSim's `segment-size`, 100).
    pub segment_size: u32,
    /// Segments merged per eviction, 2..=100 (`n-merge`, 2).
    pub n_merge: u32,
    /// Share of the ranked segments taken before ranking again, in (0, 1)
    /// (`rank-intvl`, 0.02).
    pub rank_interval: f64,
    /// Whether a merge takes the lowest-ranked segment's next in the chain
    /// (true) or in rank (false; `merge-consecutive-segs`: 0.3.5 runs with
    /// false, `aa0fc40`'s default is true).
    pub merge_consecutive: bool,
    /// Seconds between trainings, at least 1 (`retrain-intvl`, 86,400).
    pub retrain_interval: u32,
}

impl Default for GlCacheConfig {
    fn default() -> Self {
        Self {
            segment_size: 100,
            n_merge: 2,
            rank_interval: 0.02,
            merge_consecutive: false,
            retrain_interval: 86_400,
        }
    }
}

impl GlCacheConfig {
    /// Checks every knob.
    pub fn check(&self) -> Result<(), ConfigError> {
        let knobs = Knobs("glcache");
        knobs.one_to("n_merge", self.n_merge, 100, "2 to 100")?;
        if self.n_merge < 2 {
            return Err(ConfigError::OutOfRange {
                policy: "glcache",
                parameter: "n_merge",
                value: self.n_merge.to_string(),
                expected: "2 to 100",
            });
        }
        knobs.one_to(
            "segment_size",
            self.segment_size,
            100_000_000,
            "2 to 100,000,000, and segment_size / n_merge at least 2",
        )?;
        if self.segment_size / self.n_merge < 2 {
            return Err(ConfigError::OutOfRange {
                policy: "glcache",
                parameter: "segment_size",
                value: self.segment_size.to_string(),
                expected: "2 to 100,000,000, and segment_size / n_merge at least 2",
            });
        }
        knobs.open_fraction("rank_interval", self.rank_interval)?;
        knobs.one_to(
            "retrain_interval",
            self.retrain_interval,
            u32::MAX,
            "at least 1 second",
        )
    }
}

/// A unit in a segment.
#[derive(Clone, Copy, Debug)]
struct Unit {
    key: u64,
    /// The key's [`Location`] in the slab.
    entry: Index,
    charge: u32,
    freq: u32,
    /// The request count at its insertion or last hit.
    last_access: i64,
    /// Counted in its segment's active units since it was written.
    active: bool,
    /// Resident (false: a ghost of a sampled segment, or a removed hole).
    resident: bool,
    /// Requested since its segment was sampled (no ghost needed).
    seen: bool,
}

/// A segment: a bucket-chain node, or (evicted but sampled) a training
/// segment holding ghosts.
#[derive(Clone, Debug)]
struct Segment {
    units: Vec<Unit>,
    prev: u32,
    next: u32,
    next_ranked: u32,
    rank: usize,
    pred_utility: f64,
    train_utility: f64,
    /// Requests counted toward `train_utility`, the first
    /// `segment_size / n_merge` skipped (never reset, as libCacheSim's).
    util_skipped: u32,
    bytes: i64,
    hits: i32,
    active: i32,
    merges: i32,
    create_clock: i32,
    req_rate: f64,
    write_rate: f64,
    miss_ratio: f64,
    sampled: bool,
    sampled_at: i64,
    row: usize,
}

impl Segment {
    fn empty(capacity: usize) -> Self {
        Self {
            units: Vec::with_capacity(capacity),
            prev: NIL,
            next: NIL,
            next_ranked: NIL,
            rank: usize::MAX,
            pred_utility: i64::MAX as f64,
            train_utility: 0.0,
            util_skipped: 0,
            bytes: 0,
            hits: 0,
            active: 0,
            merges: 0,
            create_clock: 0,
            req_rate: 0.0,
            write_rate: 0.0,
            miss_ratio: 0.0,
            sampled: false,
            sampled_at: 0,
            row: 0,
        }
    }
}

/// Where a key's resident unit and its ghost are (`segment << 32 | slot`).
#[derive(Clone, Copy, Debug)]
struct Location {
    key: u64,
    live: u64,
    ghost: u64,
}

impl Keyed for Location {
    fn key(&self) -> u64 {
        self.key
    }
}

fn pack(segment: u32, slot: usize) -> u64 {
    u64::from(segment) << 32 | slot as u64
}

fn unpack(at: u64) -> (u32, usize) {
    ((at >> 32) as u32, (at & 0xffff_ffff) as usize)
}

/// The cache state segments record when written (`cacheState.h`).
#[derive(Clone, Copy, Debug)]
struct CacheState {
    write_rate: f64,
    req_rate: f64,
    miss_ratio: f64,
    last_clock: i64,
    last_requests: i64,
    misses: i64,
}

/// `GLCache` replacement.
#[derive(Debug)]
pub struct GlCache {
    capacity: Capacity,
    used: u64,
    len: usize,
    /// Key → its [`Location`] in `locations` (a unit keeps its location's
    /// index, so moving it needs no key lookup).
    map: KeyIndex,
    locations: Slab<Location>,
    segments: Vec<Segment>,
    free: Vec<u32>,
    /// The bucket chain (libCacheSim uses one bucket).
    first: u32,
    last: u32,
    in_use: usize,
    /// Where the untrained FIFO selection continues.
    next_to_evict: u32,
    /// Sampled segments evicted since the last training.
    training: Vec<u32>,
    segment_size: usize,
    n_merge: usize,
    retain_per_segment: u32,
    rank_interval: f64,
    merge_consecutive: bool,
    retrain_interval: i64,
    /// Requests finished (libCacheSim's `curr_vtime`).
    requests: i64,
    /// The previous request's clock (`curr_rtime`).
    clock: i64,
    /// The current request's hit and clock, applied when it is finished.
    pending: Option<(bool, i64)>,
    /// The key the last lookup missed, while nothing changed since (so
    /// `admit` need not look it up again).
    missed: Option<u64>,
    state: CacheState,
    /// -1 before the first eviction, then trainings done.
    trainings: i32,
    last_train_clock: i64,
    train_rows: usize,
    train_x: Vec<f32>,
    train_y: Vec<f32>,
    valid_x: Vec<f32>,
    valid_y: Vec<f32>,
    trainer: Trainer,
    model: Model,
    /// Scratch: validation predictions during early stopping.
    valid_pred: Vec<f64>,
    inference_x: Vec<f32>,
    predictions: Vec<f64>,
    /// Segments by predicted utility; [`NIL`] once taken.
    ranked: Vec<u32>,
    ranked_len: usize,
    /// libCacheSim's allocated ranking size: a larger chain ranks again.
    ranked_size: usize,
    ranked_pos: usize,
    /// Scratch: scores of the units being merged (in segment order, and
    /// partly sorted), and the segments.
    scores: Vec<f64>,
    sorted: Vec<f64>,
    picked: Vec<u32>,
}

impl GlCache {
    /// An empty `GLCache`.
    pub fn new(capacity: Capacity, config: &GlCacheConfig) -> Result<Self, ConfigError> {
        config.check()?;
        let segment_size = config.segment_size as usize;
        let n_merge = config.n_merge as usize;
        Ok(Self {
            capacity,
            used: 0,
            len: 0,
            map: KeyIndex::default(),
            locations: Slab::new(),
            segments: Vec::new(),
            free: Vec::new(),
            first: NIL,
            last: NIL,
            in_use: 0,
            next_to_evict: NIL,
            training: Vec::new(),
            segment_size,
            n_merge,
            retain_per_segment: config.segment_size / config.n_merge,
            rank_interval: config.rank_interval,
            merge_consecutive: config.merge_consecutive,
            retrain_interval: i64::from(config.retrain_interval),
            requests: 0,
            clock: 0,
            pending: None,
            missed: None,
            state: CacheState {
                write_rate: 1.0,
                req_rate: 1.0,
                miss_ratio: 0.5,
                last_clock: 0,
                last_requests: 0,
                misses: 0,
            },
            trainings: -1,
            last_train_clock: 0,
            train_rows: 0,
            train_x: Vec::new(),
            train_y: Vec::new(),
            valid_x: Vec::new(),
            valid_y: Vec::new(),
            trainer: Trainer::new(
                FEATURES,
                Params {
                    trees: TRAIN_ROUNDS,
                    leaves: 64,
                    learning_rate: 0.3,
                    feature_fraction: 1.0,
                    bagging_fraction: 1.0,
                    bagging_freq: 0,
                    min_data_in_leaf: 1,
                    max_bin: 256,
                    seed: 0,
                    lambda_l2: 1.0,
                    max_depth: 6,
                    min_gain_to_split: 1e-6,
                },
            ),
            model: Model::default(),
            valid_pred: Vec::new(),
            inference_x: Vec::new(),
            predictions: Vec::new(),
            ranked: Vec::new(),
            ranked_len: 0,
            ranked_size: 0,
            ranked_pos: 0,
            scores: Vec::with_capacity(n_merge * segment_size),
            sorted: Vec::with_capacity(n_merge * segment_size),
            picked: Vec::with_capacity(n_merge),
        })
    }

    /// Trainings done so far.
    pub fn trainings(&self) -> u32 {
        self.trainings.max(0) as u32
    }

    /// The end of a request (libCacheSim's `GLCache_get` after
    /// `cache_get_base`): train when due, then update the cache state.
    fn finish_request(&mut self) {
        let Some((hit, clock)) = self.pending.take() else {
            return;
        };
        if self.last_train_clock > 0 && self.clock - self.last_train_clock > self.retrain_interval {
            self.train();
            self.snapshot();
        }
        self.clock = clock;
        self.requests += 1;
        let state = &mut self.state;
        if !hit {
            state.misses += 1;
        }
        let seconds = self.clock - state.last_clock;
        let requests = self.requests - state.last_requests;
        if seconds > STATE_SECONDS && requests > STATE_REQUESTS {
            state.write_rate = state.misses as f64 / seconds as f64;
            state.req_rate = requests as f64 / seconds as f64;
            state.miss_ratio = state.misses as f64 / requests as f64;
            state.misses = 0;
            state.last_clock = self.clock;
            state.last_requests = self.requests;
        }
    }

    fn allocate(&mut self) -> u32 {
        let clock = self.clock as i32;
        let index = if let Some(index) = self.free.pop() {
            index
        } else {
            self.segments.push(Segment::empty(self.segment_size));
            (self.segments.len() - 1) as u32
        };
        let segment = &mut self.segments[index as usize];
        let mut units = std::mem::take(&mut segment.units);
        units.clear();
        *segment = Segment {
            units,
            create_clock: clock,
            ..Segment::empty(0)
        };
        index
    }

    fn release(&mut self, index: u32) {
        self.segments[index as usize].units.clear();
        self.free.push(index);
    }

    fn append(&mut self, index: u32) {
        if self.last == NIL {
            self.first = index;
            self.next_to_evict = index;
        } else {
            self.segments[self.last as usize].next = index;
        }
        let segment = &mut self.segments[index as usize];
        segment.prev = self.last;
        segment.next = NIL;
        self.last = index;
        self.in_use += 1;
    }

    fn unlink(&mut self, index: u32) {
        let (prev, next) = {
            let s = &self.segments[index as usize];
            (s.prev, s.next)
        };
        if self.first == index {
            self.first = next;
        }
        if self.last == index {
            self.last = prev;
        }
        if prev != NIL {
            self.segments[prev as usize].next = next;
        }
        if next != NIL {
            self.segments[next as usize].prev = prev;
        }
        self.in_use -= 1;
    }

    /// Links `new` into the chain just before `old`.
    fn link_before(&mut self, old: u32, new: u32) {
        let prev = self.segments[old as usize].prev;
        if prev == NIL {
            self.first = new;
        } else {
            self.segments[prev as usize].next = new;
        }
        let n = &mut self.segments[new as usize];
        n.prev = prev;
        n.next = old;
        self.segments[old as usize].prev = new;
        self.in_use += 1;
    }

    /// Whether `n` segments, none the last of the chain, follow from
    /// `index` (in the chain, or in rank).
    fn evictable(&self, mut index: u32, n: usize, consecutive: bool) -> bool {
        let mut found = 0;
        while index != NIL && self.segments[index as usize].next != NIL {
            found += 1;
            if found >= n {
                return true;
            }
            let s = &self.segments[index as usize];
            index = if consecutive { s.next } else { s.next_ranked };
        }
        found >= n
    }

    fn score(&self, unit: &Unit) -> f64 {
        1.0e8 / f64::from(unit.charge) / (self.requests - unit.last_access) as f64
    }

    /// Adds a request of a unit of sampled segment `index` to its utility.
    fn count_utility(
        segments: &mut [Segment],
        train_y: &mut [f32],
        retain_per_segment: u32,
        requests: i64,
        index: u32,
        charge: u32,
    ) {
        let segment = &mut segments[index as usize];
        let skipped = segment.util_skipped;
        segment.util_skipped = skipped.wrapping_add(1);
        if skipped >= retain_per_segment {
            let age = (requests - segment.sampled_at) as f64 + 1.0;
            segment.train_utility += 1.0e6 / age / f64::from(charge);
            if let Some(y) = train_y.get_mut(segment.row) {
                *y = segment.train_utility as f32;
            }
        }
    }

    /// A unit leaves its place: its key's resident location (slab node
    /// `entry`) becomes `live` (its new place, or [`NONE`] when evicted), and
    /// it leaves a ghost at `ghost` unless that is [`NONE`].
    fn relocate(&mut self, entry: Index, live: u64, ghost: u64) {
        let location = self.locations.get_mut(entry);
        location.live = live;
        if ghost != NONE {
            debug_assert_eq!(location.ghost, NONE, "one ghost a key");
            location.ghost = ghost;
        }
        if location.live == NONE && location.ghost == NONE {
            self.forget(entry);
        }
    }

    /// Drops a key's location, which holds neither a unit nor a ghost.
    fn forget(&mut self, entry: Index) {
        let key = self.locations.get(entry).key;
        self.map.remove(key, &self.locations);
        self.locations.remove(entry);
    }

    /// A segment whose units have left: to the training segments if sampled,
    /// else freed.
    fn retire(&mut self, index: u32) {
        self.unlink(index);
        let requests = self.requests;
        let segment = &mut self.segments[index as usize];
        if segment.sampled {
            segment.sampled_at = requests;
            segment.train_utility = 0.0;
            self.training.push(index);
        } else {
            self.release(index);
        }
    }

    fn evict(&mut self, victims: &mut Vec<u64>) {
        if self.trainings == -1 {
            self.snapshot();
            self.last_train_clock = self.clock;
            self.trainings = 0;
        }
        let merge = if self.trainings <= 0 {
            self.select_fifo()
        } else {
            self.select_learned()
        };
        if merge {
            self.merge(victims);
        } else {
            let index = self.picked[0];
            self.evict_segment(index, victims);
        }
    }

    /// The untrained selection (`select_segs_fifo`): the next `n_merge`
    /// segments; false (evict `picked[0]` whole) when none can merge.
    fn select_fifo(&mut self) -> bool {
        self.picked.clear();
        let mut at = self.next_to_evict;
        if !self.evictable(at, self.n_merge, true) {
            at = self.first;
            self.next_to_evict = self.first;
            if !self.evictable(at, self.n_merge, true) {
                self.picked.push(self.first);
                self.next_to_evict = NIL;
                return false;
            }
        }
        for _ in 0..self.n_merge {
            self.picked.push(at);
            at = self.segments[at as usize].next;
        }
        self.next_to_evict = if self.in_use > self.n_merge + 1 {
            at
        } else {
            NIL
        };
        true
    }

    fn ranked_at(&self, pos: usize) -> u32 {
        if pos < self.ranked_len {
            self.ranked[pos]
        } else {
            NIL
        }
    }

    fn take_ranked(&mut self, pos: usize) {
        if pos < self.ranked_len {
            self.ranked[pos] = NIL;
        }
    }

    /// Merges the picked segments into a new one (`GLCache_merge_segs`).
    fn merge(&mut self, victims: &mut Vec<u64>) {
        let new = self.allocate();
        let (mut req_rate, mut write_rate, mut miss_ratio, mut merges) = (0.0, 0.0, 0.0, 0);
        for &p in &self.picked {
            let s = &self.segments[p as usize];
            req_rate += s.req_rate;
            write_rate += s.write_rate;
            miss_ratio += s.miss_ratio;
            merges = merges.max(s.merges);
        }
        let n = self.n_merge as f64;
        {
            let s = &mut self.segments[new as usize];
            s.req_rate = req_rate / n;
            s.write_rate = write_rate / n;
            s.miss_ratio = miss_ratio / n;
            s.merges = merges + 1;
        }
        self.link_before(self.picked[0], new);
        // The cut-off score (`find_cutoff`): the `segment_size`-th highest.
        self.scores.clear();
        for &p in &self.picked {
            for unit in &self.segments[p as usize].units {
                if unit.resident {
                    let score = self.score(unit);
                    self.scores.push(score);
                }
            }
        }
        self.sorted.clear();
        self.sorted.extend_from_slice(&self.scores);
        let cutoff = if self.sorted.len() >= self.segment_size {
            let at = self.sorted.len() - self.segment_size;
            *self.sorted.select_nth_unstable_by(at, f64::total_cmp).1
        } else {
            f64::NEG_INFINITY
        };
        let mut scored = 0;
        for p in 0..self.n_merge {
            let old = self.picked[p];
            let sampled = self.segments[old as usize].sampled;
            for slot in 0..self.segments[old as usize].units.len() {
                let unit = self.segments[old as usize].units[slot];
                if !unit.resident {
                    continue;
                }
                let score = self.scores[scored];
                scored += 1;
                let target = &mut self.segments[new as usize];
                let live = if target.units.len() < self.segment_size && score >= cutoff {
                    let new_slot = target.units.len();
                    target.units.push(Unit {
                        freq: unit.freq.div_ceil(2),
                        active: false,
                        resident: true,
                        seen: false,
                        ..unit
                    });
                    target.bytes += i64::from(unit.charge);
                    pack(new, new_slot)
                } else {
                    self.used -= u64::from(unit.charge);
                    self.len -= 1;
                    victims.push(unit.key);
                    NONE
                };
                self.segments[old as usize].units[slot].resident = false;
                let ghost = if sampled && !unit.seen {
                    pack(old, slot)
                } else {
                    NONE
                };
                self.relocate(unit.entry, live, ghost);
            }
            self.retire(old);
        }
    }

    /// Evicts a whole segment (`evict_one_seg`).
    fn evict_segment(&mut self, index: u32, victims: &mut Vec<u64>) {
        if index == NIL {
            return;
        }
        if self.next_to_evict == index {
            self.next_to_evict = NIL;
        }
        for slot in 0..self.segments[index as usize].units.len() {
            let unit = self.segments[index as usize].units[slot];
            if !unit.resident {
                continue;
            }
            self.used -= u64::from(unit.charge);
            self.len -= 1;
            victims.push(unit.key);
            self.segments[index as usize].units[slot].resident = false;
            let ghost = if self.segments[index as usize].sampled && !unit.seen {
                pack(index, slot)
            } else {
                NONE
            };
            self.relocate(unit.entry, NONE, ghost);
        }
        self.retire(index);
    }
}

impl Policy for GlCache {
    fn name(&self) -> &'static str {
        "glcache"
    }

    fn prefetch(&self, key: u64, ahead: Ahead) {
        match ahead {
            Ahead::Far => self.map.prefetch_slots(key),
            Ahead::Near => self.map.prefetch(key, &self.locations),
            Ahead::Next => {
                // The unit a hit updates (its segment's header is small
                // and stays cached).
                if let Some(entry) = self.map.get(key, &self.locations) {
                    let live = self.locations.get(entry).live;
                    if live != NONE {
                        let (index, slot) = unpack(live);
                        if let Some(unit) = self
                            .segments
                            .get(index as usize)
                            .and_then(|s| s.units.get(slot))
                        {
                            crate::hint::prefetch(unit);
                        }
                    }
                }
            }
        }
    }

    fn lookup(&mut self, access: &Access) -> bool {
        self.finish_request();
        let requests = self.requests;
        let retain = self.retain_per_segment;
        let (segments, train_y) = (&mut self.segments, &mut self.train_y);
        let mut hit = false;
        let mut forget = None;
        if let Some(entry) = self.map.get(access.key, &self.locations) {
            let location = self.locations.get_mut(entry);
            if location.ghost != NONE {
                let (index, slot) = unpack(location.ghost);
                let unit = &mut segments[index as usize].units[slot];
                unit.seen = true;
                let charge = unit.charge;
                Self::count_utility(segments, train_y, retain, requests, index, charge);
                location.ghost = NONE;
            }
            if location.live == NONE {
                forget = Some(entry);
            } else {
                hit = true;
                let (index, slot) = unpack(location.live);
                let segment = &mut segments[index as usize];
                segment.hits += 1;
                let unit = &mut segment.units[slot];
                if !unit.active {
                    unit.active = true;
                    segment.active += 1;
                }
                let unit = &mut segment.units[slot];
                unit.last_access = requests;
                unit.freq += 1;
                let charge = unit.charge;
                if segment.sampled {
                    segment.units[slot].seen = true;
                    Self::count_utility(segments, train_y, retain, requests, index, charge);
                }
            }
        }
        if let Some(entry) = forget {
            self.forget(entry);
        }
        self.missed = (!hit).then_some(access.key);
        self.pending = Some((hit, access.clock as i64));
        hit
    }

    fn admit(&mut self, access: &Access, victims: &mut Vec<u64>) -> bool {
        let charge = self.capacity.charge(access.size);
        if charge > self.capacity.limit() {
            return false;
        }
        if self.missed.take() != Some(access.key) && self.contains(access.key) {
            return true; // `admit` without its `lookup`, of a resident key
        }
        while self.used + charge > self.capacity.limit() && self.len > 0 {
            self.evict(victims);
        }
        let last = self.last;
        if last == NIL || self.segments[last as usize].units.len() == self.segment_size {
            if last != NIL {
                let state = self.state;
                let s = &mut self.segments[last as usize];
                s.req_rate = state.req_rate;
                s.write_rate = state.write_rate;
                s.miss_ratio = state.miss_ratio;
            }
            let index = self.allocate();
            self.append(index);
        }
        let index = self.last;
        let requests = self.requests;
        let slot = self.segments[index as usize].units.len();
        let live = pack(index, slot);
        let entry = if let Some(entry) = self.map.get(access.key, &self.locations) {
            self.locations.get_mut(entry).live = live;
            entry
        } else {
            let entry = self.locations.insert(Location {
                key: access.key,
                live,
                ghost: NONE,
            });
            self.map.insert(access.key, entry, &self.locations);
            entry
        };
        let segment = &mut self.segments[index as usize];
        segment.units.push(Unit {
            key: access.key,
            entry,
            charge: charge as u32,
            freq: 0,
            last_access: requests,
            active: false,
            resident: true,
            seen: false,
        });
        segment.bytes += charge as i64;
        self.used += charge;
        self.len += 1;
        true
    }

    fn remove(&mut self, key: u64) -> bool {
        self.missed = None;
        let Some(entry) = self.map.get(key, &self.locations) else {
            return false;
        };
        let location = self.locations.get_mut(entry);
        if location.live == NONE {
            return false;
        }
        let (index, slot) = unpack(location.live);
        location.live = NONE;
        if location.ghost == NONE {
            self.forget(entry);
        }
        let segment = &mut self.segments[index as usize];
        let unit = &mut segment.units[slot];
        unit.resident = false;
        unit.seen = true; // no ghost of a removed unit
        segment.bytes -= i64::from(unit.charge);
        self.used -= u64::from(unit.charge);
        self.len -= 1;
        true
    }

    fn contains(&self, key: u64) -> bool {
        self.map
            .get(key, &self.locations)
            .is_some_and(|entry| self.locations.get(entry).live != NONE)
    }

    fn len(&self) -> usize {
        self.len
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
    use crate::testing;
    use proptest::prelude::*;
    use std::collections::HashMap;

    fn config(segment_size: u32, n_merge: u32) -> GlCacheConfig {
        GlCacheConfig {
            segment_size,
            n_merge,
            ..GlCacheConfig::default()
        }
    }

    /// `keys` as accesses of size 1 whose clock advances one second every
    /// `per_second` accesses, from 1.
    fn clocked(keys: &[u64], per_second: u64) -> Vec<Access> {
        let mut trace = testing::keys(keys);
        for access in &mut trace {
            access.clock = 1 + access.time / per_second;
        }
        trace
    }

    fn run(policy: &mut GlCache, trace: &[Access]) -> Vec<u64> {
        let mut victims = vec![];
        for access in trace {
            policy.access(access, &mut victims);
        }
        victims
    }

    #[test]
    fn a_merge_keeps_the_most_recently_used_half() {
        // Segments of 4: [0 1 2 3] [4 5 6 7] [8 9 10 11]; 1 and 5 are hit.
        // Key 12 merges the first two: the four most recent (5, 1, 7, 6)
        // stay, 0, 2, 3 and 4 go.
        let mut p = GlCache::new(Capacity::Objects(12), &config(4, 2)).unwrap();
        let mut keys: Vec<u64> = (0..12).collect();
        keys.extend([1, 5, 12]);
        let mut victims = run(&mut p, &testing::keys(&keys));
        victims.sort_unstable();
        assert_eq!(victims, [0, 2, 3, 4]);
        assert!([1, 5, 6, 7, 12].iter().all(|&k| p.contains(k)));
        assert_eq!((p.len(), p.used()), (9, 9));
        // The merged segment took the first's place; the sweep goes on with
        // the third, which cannot merge (the fourth is being filled), so it
        // starts over: the merged segment and the third.
        let victims = run(&mut p, &testing::keys(&[13, 14, 15, 16]));
        assert_eq!(victims.len(), 4, "{victims:?}");
        assert!(p.contains(5) && p.contains(1), "{victims:?}");
    }

    #[test]
    fn byte_scores_favour_small_units() {
        // Sizes 10 (even keys) and 1 (odd). Of the first two segments
        // [0 1 2 3] [4 5 6 7], the 1-byte units score best per byte and
        // stay, though 6 is more recent than 1, 3 and 5.
        // Key 10 finds [8 9] being filled and merges the first two.
        let mut p = GlCache::new(Capacity::Bytes(60), &config(4, 2)).unwrap();
        let trace: Vec<Access> = (0..11)
            .map(|k| Access::read(k, if k % 2 == 0 { 10 } else { 1 }, k))
            .collect();
        let victims = run(&mut p, &trace);
        assert_eq!(victims, [0, 2, 4, 6]);
        assert_eq!(p.used(), 25);
    }

    #[test]
    fn a_cache_too_small_to_merge_evicts_a_whole_segment() {
        let mut p = GlCache::new(Capacity::Objects(5), &config(4, 2)).unwrap();
        let victims = run(&mut p, &testing::keys(&[0, 1, 2, 3, 4, 5]));
        assert_eq!(victims, [0, 1, 2, 3]);
        assert!(p.contains(4) && p.contains(5));
    }

    #[test]
    fn bad_configs_are_errors() {
        for (c, knob) in [
            (config(100, 1), "n_merge"),
            (config(100, 101), "n_merge"),
            (config(1, 2), "segment_size"),
            (config(5, 3), "segment_size"),
            (config(100_000_001, 2), "segment_size"),
            (
                GlCacheConfig {
                    rank_interval: 1.0,
                    ..GlCacheConfig::default()
                },
                "rank_interval",
            ),
            (
                GlCacheConfig {
                    retrain_interval: 0,
                    ..GlCacheConfig::default()
                },
                "retrain_interval",
            ),
        ] {
            match GlCache::new(Capacity::Objects(10), &c) {
                Err(ConfigError::OutOfRange {
                    policy: "glcache",
                    parameter,
                    ..
                }) => assert_eq!(parameter, knob),
                other => panic!("{c:?}: {other:?}"),
            }
        }
        assert!(GlCache::new(Capacity::Objects(10), &config(4, 2)).is_ok());
    }

    #[test]
    fn ghosts_count_until_the_training_forgets_them() {
        // A 1-second retraining interval; 10 accesses a second.
        let c = GlCacheConfig {
            retrain_interval: 1,
            ..config(4, 2)
        };
        let mut p = GlCache::new(Capacity::Objects(12), &c).unwrap();
        // 13 keys: the first eviction samples the first two segments and
        // merges them; the evicted units of the sampled segments are ghosts.
        let keys: Vec<u64> = (0..13).collect();
        let victims = run(&mut p, &clocked(&keys, 100));
        assert_eq!(victims.len(), 4);
        assert_eq!(p.training.len(), 2);
        // The locations of every key this test uses (all below 200).
        let locations = |p: &GlCache| -> Vec<Location> {
            (0..200)
                .filter_map(|k| p.map.get(k, &p.locations))
                .map(|entry| *p.locations.get(entry))
                .collect()
        };
        let ghosts = |p: &GlCache| locations(p).iter().filter(|l| l.ghost != NONE).count();
        // All eight units of the two sampled segments, kept or not, were
        // unseen since the snapshot.
        assert_eq!(ghosts(&p), 8);
        // A request of an evicted unit finds its ghost (and counts it).
        let before = ghosts(&p);
        let mut again = clocked(&[victims[0]], 100);
        again[0].time = 13;
        again[0].clock = 1;
        run(&mut p, &again);
        assert_eq!(ghosts(&p), before - 1);
        assert!(p.segments.iter().all(|s| s.util_skipped <= 1));
        // Two seconds later a training is due: the ghosts go.
        let later: Vec<Access> = (100..140)
            .map(|k| Access {
                clock: 3 + (k - 100) / 10,
                ..Access::read(k, 1, k)
            })
            .collect();
        run(&mut p, &later);
        assert!(p.trainings() >= 1);
        assert!(p.model.is_trained());
        // Ghosts left are only those of segments sampled after the training.
        assert!(
            locations(&p)
                .iter()
                .filter(|l| l.ghost != NONE)
                .all(|l| p.segments[unpack(l.ghost).0 as usize].sampled)
        );
    }

    #[test]
    fn a_trained_cache_ranks_segments_by_predicted_utility() {
        // A skewed trace over many seconds: training happens, and the
        // learned selection ranks and merges.
        let c = GlCacheConfig {
            retrain_interval: 5,
            ..config(8, 2)
        };
        let mut p = GlCache::new(Capacity::Objects(64), &c).unwrap();
        let mut x = 1u64;
        let keys: Vec<u64> = (0..20_000)
            .map(|_| {
                x = crate::mix64(x);
                (x % 400).min(crate::mix64(x) % 400)
            })
            .collect();
        let trace = clocked(&keys, 100);
        let hits = testing::replay_checked(&mut p, &trace);
        assert!(p.trainings() >= 10, "{}", p.trainings());
        assert!(p.ranked_len > 0);
        assert!(hits > 1000, "{hits}");
    }

    #[test]
    fn remove_leaves_a_hole_the_next_merge_drops() {
        let mut p = GlCache::new(Capacity::Objects(12), &config(4, 2)).unwrap();
        let keys: Vec<u64> = (0..12).collect();
        run(&mut p, &testing::keys(&keys));
        assert!(p.remove(1) && !p.remove(1) && !p.contains(1));
        assert_eq!((p.len(), p.used()), (11, 11));
        // Room for one more without evicting.
        assert!(run(&mut p, &testing::keys(&[12])).is_empty());
        let victims = run(&mut p, &testing::keys(&[13, 14, 15]));
        assert!(!victims.contains(&1));
        testing::check_invariants(&p);
    }

    proptest! {
        /// Capacity is never exceeded, a hit is exactly a resident key, a
        /// victim was resident and is gone, an admitted key is resident: a
        /// set of the resident keys kept from the victims agrees with the
        /// cache at every step, through trainings and removals.
        #[test]
        fn residency_matches_the_victims(
            trace in testing::trace_strategy(60, 600, 6),
            cap in 1u64..60,
            bytes: bool,
            segment_size in 4u32..10,
            n_merge in 2u32..3,
            consecutive: bool,
            per_second in 1u64..20,
            removals in prop::collection::vec(0u64..60, 0..10),
        ) {
            let capacity = if bytes { Capacity::Bytes(cap) } else { Capacity::Objects(cap) };
            let c = GlCacheConfig {
                segment_size,
                n_merge,
                merge_consecutive: consecutive,
                retrain_interval: 2,
                ..GlCacheConfig::default()
            };
            let mut p = GlCache::new(capacity, &c).unwrap();
            let mut resident: HashMap<u64, u64> = HashMap::new();
            let mut victims = vec![];
            for access in &trace {
                let access = Access { clock: 1 + access.time / per_second, ..*access };
                if removals.contains(&access.time) {
                    let key = access.key;
                    prop_assert_eq!(p.remove(key), resident.remove(&key).is_some());
                }
                victims.clear();
                let hit = p.access(&access, &mut victims);
                prop_assert_eq!(hit, resident.contains_key(&access.key));
                for v in &victims {
                    prop_assert!(resident.remove(v).is_some(), "victim {} was not resident", v);
                    prop_assert!(!p.contains(*v));
                }
                if !hit && p.contains(access.key) {
                    resident.insert(access.key, capacity.charge(access.size));
                }
                prop_assert_eq!(p.used(), resident.values().sum::<u64>());
                prop_assert_eq!(p.len(), resident.len());
                prop_assert!(p.used() <= capacity.limit());
                prop_assert!(resident.keys().all(|&k| p.contains(k)));
            }
        }
    }
}
