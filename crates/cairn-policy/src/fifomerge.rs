//! FIFO-Merge: a FIFO that, instead of evicting its oldest units one by one,
//! examines a batch, keeps the most valuable part and evicts the rest.
//!
//! Origin: J. Yang, Y. Yue, K. V. Rashmi, "Segcache: a memory-efficient and
//! scalable in-memory key-value cache for small objects", NSDI 2021
//! (merge-based eviction), as libCacheSim's object-level `FIFO_Merge` models
//! it.
//!
//! Units enter at the head of one FIFO queue; a hit counts (`freq += 1`) and
//! does not move the unit. To make room, an examination pointer walks
//! `n_exam` units from where it last stopped (at first the tail) towards the
//! head, wrapping back to the tail, and scores each (`retain`):
//! - `"frequency"` (default): `10^6 · (freq + r) / charge`, `r` a random
//!   `(next % 1000) / 10000` to break ties among equal counts;
//! - `"recency"`: `10^12 / (requests now − request of its last access) /
//!   charge`.
//!
//! The batch is sorted by score (stably); the lowest `n_exam − n_keep − 1`
//! are evicted, one per eviction the cache needs, and the rest stay where
//! they are in the queue (the pointer has moved past them, so the next batch
//! starts with younger units, as Segcache merges consecutive segments). A
//! cache of at most `n_exam` units evicts its tail instead (pure FIFO).
//!
//! Maps to libCacheSim `aa0fc40`'s `FIFO_Merge.c` (`cachesim ... fifomerge`,
//! defaults `n-exam=100`, `n-keep=50`, `retain-policy=freq`) step for step,
//! including what departs from the paper:
//! - a batch evicts `n_exam − n_keep − 1` units, not `n_exam − n_keep` (the
//!   position is incremented before it is compared); the unit at position
//!   `n_exam − n_keep − 1` is taken from the batch without being evicted, and
//!   a new batch is examined;
//! - frequencies are not reset when a unit is kept, and kept units are not
//!   moved;
//! - the random numbers are libCacheSim's ([`crate::rng`]), one per examined
//!   unit in examination order; `cachesim` resets its generator to 0 before
//!   each run, so the defaults (`generator = "mmix"`, `seed = 0`) replay
//!   `aa0fc40` exactly. The sort is glibc's `qsort`, a stable merge sort in
//!   glibc 2.36 (the one `cachesim` was linked with): ties keep examination
//!   order, as here.
//!
//! libCacheSim's `retain-policy=belady` (needs next-access times) and `none`
//! (which aborts) are not offered. `remove` of a unit waiting in the current
//! batch drops it from the batch (libCacheSim leaves a dangling pointer).

use serde::{Deserialize, Serialize};

use crate::index::{KeyIndex, Keyed};
use crate::list::{Index, List, NIL, Slab};
use crate::rng::{Generator, Rng};
use crate::{Access, Ahead, Capacity, ConfigError, Policy};

/// How a batch scores the units it examines.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Retain {
    /// Hits (plus a random fraction under 0.1) per byte: the most used stay.
    #[default]
    Frequency,
    /// Inverse time since the last access, per byte: the most recent stay.
    Recency,
}

/// FIFO-Merge's knobs, with libCacheSim's defaults.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FifoMergeConfig {
    /// Units examined per batch, ≥ 1 (libCacheSim's `n-exam`, 100).
    pub n_exam: u32,
    /// Units of a batch kept, ≤ `n_exam` (`n-keep`, 50).
    pub n_keep: u32,
    /// The score (`retain-policy`, frequency).
    pub retain: Retain,
    /// Which of libCacheSim's generators draws the tie-breaking fractions:
    /// `"mmix"` (`aa0fc40`'s, default: FIFO-Merge is only in `aa0fc40`) or
    /// `"lehmer64"`.
    pub generator: Generator,
    /// The generator's starting state (default 0, where `cachesim` resets it
    /// before each run). A Lehmer64 seed must not be 0.
    pub seed: Option<u64>,
}

impl Default for FifoMergeConfig {
    fn default() -> Self {
        Self {
            n_exam: 100,
            n_keep: 50,
            retain: Retain::Frequency,
            generator: Generator::Mmix,
            seed: None,
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    key: u64,
    charge: u64,
    freq: u64,
    /// The request count at its insertion or last hit.
    last_access: u64,
}

impl Keyed for Entry {
    fn key(&self) -> u64 {
        self.key
    }
}

/// FIFO-Merge replacement.
#[derive(Debug)]
pub struct FifoMerge {
    capacity: Capacity,
    used: u64,
    map: KeyIndex,
    slab: Slab<Entry>,
    /// Front = head = newest.
    queue: List,
    /// Where the next batch starts; [`NIL`] = at the tail.
    next_to_exam: Index,
    /// The current batch, sorted: (score, examination position, unit).
    batch: Vec<(f64, u32, Index)>,
    /// The next position of `batch` to take; ≥ `n_exam` = none.
    pos: usize,
    n_exam: usize,
    n_keep: usize,
    retain: Retain,
    /// Requests seen (libCacheSim's `n_req`).
    requests: u64,
    rng: Rng,
}

impl FifoMerge {
    /// An empty FIFO-Merge cache.
    pub fn new(capacity: Capacity, config: &FifoMergeConfig) -> Result<Self, ConfigError> {
        let out_of_range = |parameter, value: String, expected| ConfigError::OutOfRange {
            policy: "fifo-merge",
            parameter,
            value,
            expected,
        };
        if config.n_exam == 0 {
            return Err(out_of_range("n_exam", "0".into(), "at least 1"));
        }
        if config.n_keep > config.n_exam {
            return Err(out_of_range(
                "n_keep",
                config.n_keep.to_string(),
                "at most n_exam",
            ));
        }
        let seed = config.seed.unwrap_or(0);
        if seed == 0 && config.generator == Generator::Lehmer64 {
            return Err(out_of_range(
                "seed",
                "0".into(),
                "set and not 0 for Lehmer64 (0 is its fixed point)",
            ));
        }
        let n_exam = config.n_exam as usize;
        Ok(Self {
            capacity,
            used: 0,
            map: KeyIndex::default(),
            slab: Slab::new(),
            queue: List::new(),
            next_to_exam: NIL,
            batch: Vec::with_capacity(n_exam),
            pos: usize::MAX,
            n_exam,
            n_keep: config.n_keep as usize,
            retain: config.retain,
            requests: 0,
            rng: Rng::new(config.generator, seed),
        })
    }

    fn score(&mut self, index: Index) -> f64 {
        let entry = self.slab.get(index);
        let charge = entry.charge as f64;
        match self.retain {
            Retain::Frequency => {
                let (freq, r) = (entry.freq, self.rng.next_u64() % 1000);
                1.0e6 * (freq as f64 + r as f64 / 10000.0) / charge
            }
            Retain::Recency => 1.0e12 / (self.requests - entry.last_access) as f64 / charge,
        }
    }

    /// Takes unit `index` out of the cache; returns its key.
    fn evict_unit(&mut self, index: Index) -> u64 {
        self.slab.unlink(&mut self.queue, index);
        let entry = *self.slab.get(index);
        self.map.remove(entry.key, &self.slab);
        self.slab.remove(index);
        self.used -= entry.charge;
        entry.key
    }

    /// libCacheSim's `FIFO_Merge_evict`: one unit out.
    fn evict(&mut self) -> Option<u64> {
        // The rest of the current batch first.
        while self.pos < self.n_exam {
            let index = self.batch[self.pos].2;
            self.pos += 1;
            if self.pos >= self.n_exam - self.n_keep {
                break;
            }
            if index != NIL {
                return Some(self.evict_unit(index));
            }
        }
        if self.map.len() <= self.n_exam {
            let tail = self.queue.back()?;
            self.next_to_exam = NIL;
            return Some(self.evict_unit(tail));
        }
        self.batch.clear();
        let mut at = self.next_to_exam;
        for position in 0..self.n_exam as u32 {
            if at == NIL {
                at = self.queue.back()?;
            }
            let score = self.score(at);
            self.batch.push((score, position, at));
            at = self.slab.prev(at).unwrap_or(NIL);
        }
        self.next_to_exam = at;
        // Stable by score (glibc 2.36's merge sort): the position breaks ties.
        self.batch
            .sort_unstable_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        self.pos = 1;
        let first = self.batch[0].2;
        Some(self.evict_unit(first))
    }
}

impl Policy for FifoMerge {
    fn name(&self) -> &'static str {
        "fifo-merge"
    }

    fn prefetch(&self, key: u64, ahead: Ahead) {
        self.map.prefetch_stage(key, &self.slab, ahead, false);
    }

    fn lookup(&mut self, access: &Access) -> bool {
        self.requests += 1;
        match self.map.get(access.key, &self.slab) {
            Some(index) => {
                let requests = self.requests;
                let entry = self.slab.get_mut(index);
                entry.freq += 1;
                entry.last_access = requests;
                true
            }
            None => false,
        }
    }

    fn admit(&mut self, access: &Access, victims: &mut Vec<u64>) -> bool {
        let charge = self.capacity.charge(access.size);
        if charge > self.capacity.limit() {
            return false;
        }
        if self.map.get(access.key, &self.slab).is_some() {
            return true; // `admit` without its `lookup`, of a resident key
        }
        while self.used + charge > self.capacity.limit() {
            let Some(victim) = self.evict() else {
                break;
            };
            victims.push(victim);
        }
        let index = self.slab.insert(Entry {
            key: access.key,
            charge,
            freq: 0,
            last_access: self.requests,
        });
        self.slab.push_front(&mut self.queue, index);
        self.map.insert(access.key, index, &self.slab);
        self.used += charge;
        true
    }

    fn remove(&mut self, key: u64) -> bool {
        let Some(index) = self.map.get(key, &self.slab) else {
            return false;
        };
        if self.next_to_exam == index {
            self.next_to_exam = self.slab.prev(index).unwrap_or(NIL);
        }
        if self.pos < self.n_exam {
            for item in &mut self.batch[self.pos..] {
                if item.2 == index {
                    item.2 = NIL;
                }
            }
        }
        self.evict_unit(index);
        true
    }

    fn contains(&self, key: u64) -> bool {
        self.map.get(key, &self.slab).is_some()
    }

    fn len(&self) -> usize {
        self.map.len()
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

    /// Naive FIFO-Merge: a vector front = newest of (key, charge, freq, last
    /// access), transcribing `FIFO_Merge.c` with positions instead of
    /// pointers.
    struct NaiveFifoMerge {
        capacity: Capacity,
        queue: Vec<(u64, u64, u64, u64)>,
        /// Key of the unit the next batch starts at (None = the tail).
        next: Option<u64>,
        /// Keys of the current batch, sorted.
        batch: Vec<u64>,
        pos: usize,
        n_exam: usize,
        n_keep: usize,
        retain: Retain,
        requests: u64,
        rng: Rng,
    }

    impl NaiveFifoMerge {
        fn new(capacity: Capacity, config: &FifoMergeConfig) -> Self {
            Self {
                capacity,
                queue: vec![],
                next: None,
                batch: vec![],
                pos: usize::MAX,
                n_exam: config.n_exam as usize,
                n_keep: config.n_keep as usize,
                retain: config.retain,
                requests: 0,
                rng: Rng::new(config.generator, config.seed.unwrap_or(0)),
            }
        }

        fn take(&mut self, key: u64) -> u64 {
            let at = self.queue.iter().position(|u| u.0 == key).unwrap();
            self.queue.remove(at);
            key
        }

        fn evict(&mut self) -> u64 {
            if self.pos < self.n_exam {
                let key = self.batch[self.pos];
                self.pos += 1;
                if self.pos < self.n_exam - self.n_keep {
                    return self.take(key);
                }
            }
            if self.queue.len() <= self.n_exam {
                self.next = None;
                let key = self.queue.last().unwrap().0;
                return self.take(key);
            }
            // Positions from the tail (len - 1) towards the head (0).
            let mut at = match self.next {
                Some(key) => self.queue.iter().position(|u| u.0 == key).unwrap(),
                None => self.queue.len() - 1,
            } as isize;
            let mut scored = vec![];
            for _ in 0..self.n_exam {
                if at < 0 {
                    at = self.queue.len() as isize - 1;
                }
                let u = self.queue[at as usize];
                let score = match self.retain {
                    Retain::Frequency => {
                        let r = (self.rng.next_u64() % 1000) as f64 / 10000.0;
                        1.0e6 * (u.2 as f64 + r) / u.1 as f64
                    }
                    Retain::Recency => 1.0e12 / (self.requests - u.3) as f64 / u.1 as f64,
                };
                scored.push((score, u.0));
                at -= 1;
            }
            self.next = (at >= 0).then(|| self.queue[at as usize].0);
            scored.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap()); // stable
            self.batch = scored.iter().map(|s| s.1).collect();
            self.pos = 1;
            let key = self.batch[0];
            self.take(key)
        }
    }

    impl Reference for NaiveFifoMerge {
        fn access(&mut self, access: &Access) -> (bool, Vec<u64>) {
            self.requests += 1;
            if let Some(u) = self.queue.iter_mut().find(|u| u.0 == access.key) {
                u.2 += 1;
                u.3 = self.requests;
                return (true, vec![]);
            }
            let charge = self.capacity.charge(access.size);
            let limit = self.capacity.limit();
            let mut victims = vec![];
            if charge > limit {
                return (false, victims);
            }
            while self.queue.iter().map(|u| u.1).sum::<u64>() + charge > limit {
                victims.push(self.evict());
            }
            self.queue.insert(0, (access.key, charge, 0, self.requests));
            (false, victims)
        }
    }

    fn config(n_exam: u32, n_keep: u32, retain: Retain) -> FifoMergeConfig {
        FifoMergeConfig {
            n_exam,
            n_keep,
            retain,
            ..FifoMergeConfig::default()
        }
    }

    #[test]
    fn a_batch_keeps_the_frequent_and_evicts_the_rest() {
        // 8 units, batches of 4 keeping 2: 0 and 2 are hit, so of the first
        // batch (0..=3, the oldest) 1 and 3 go, in that order of score ties
        // broken by the random fraction, and 0 and 2 stay.
        let c = config(4, 2, Retain::Frequency);
        let mut p = FifoMerge::new(Capacity::Objects(8), &c).unwrap();
        let mut victims = vec![];
        for access in testing::keys(&[0, 1, 2, 3, 4, 5, 6, 7, 0, 2, 8]) {
            p.access(&access, &mut victims);
        }
        assert_eq!(victims.len(), 1);
        assert!(victims[0] == 1 || victims[0] == 3, "{victims:?}");
        assert!(p.contains(0) && p.contains(2));
        // n_exam - n_keep - 1 = 1 unit a batch: the next eviction examines
        // 4..=7 (the pointer moved past the first batch).
        p.access(&testing::keys(&[9])[0], &mut victims);
        assert!((4..=7).contains(&victims[1]), "{victims:?}");
    }

    #[test]
    fn a_small_cache_is_a_fifo() {
        let mut p = FifoMerge::new(Capacity::Objects(50), &FifoMergeConfig::default()).unwrap();
        let keys: Vec<u64> = (0..200).collect();
        let mut victims = vec![];
        for access in testing::keys(&keys) {
            p.access(&access, &mut victims);
        }
        assert_eq!(victims, (0..150).collect::<Vec<_>>());
    }

    #[test]
    fn bad_configs_are_errors() {
        for c in [
            config(0, 0, Retain::Frequency),
            config(4, 5, Retain::Frequency),
            FifoMergeConfig {
                generator: Generator::Lehmer64,
                ..FifoMergeConfig::default()
            },
        ] {
            assert!(matches!(
                FifoMerge::new(Capacity::Objects(10), &c),
                Err(ConfigError::OutOfRange {
                    policy: "fifo-merge",
                    ..
                })
            ));
        }
    }

    #[test]
    fn remove_drops_a_unit_from_the_pending_batch() {
        let c = config(8, 2, Retain::Frequency);
        let mut p = FifoMerge::new(Capacity::Objects(10), &c).unwrap();
        let keys: Vec<u64> = (0..11).collect();
        testing::replay_checked(&mut p, &testing::keys(&keys));
        let pending: Vec<u64> = p.batch[p.pos..5]
            .iter()
            .map(|b| p.slab.get(b.2).key)
            .collect();
        assert!(p.remove(pending[0]));
        // The next eviction skips the removed unit for the one after it.
        let mut victims = vec![];
        p.access(&Access::read(100, 1, 11), &mut victims);
        p.access(&Access::read(101, 1, 12), &mut victims);
        assert_eq!(victims, [pending[1]]);
        let more: Vec<u64> = (200..220).collect();
        testing::replay_checked(&mut p, &testing::keys(&more));
    }

    proptest! {
        #[test]
        fn matches_naive_model(
            trace in testing::trace_strategy(40, 400, 5),
            cap in 1u64..24,
            bytes: bool,
            n_exam in 1u32..8,
            keep in 0u32..8,
            recency: bool,
        ) {
            let capacity = if bytes { Capacity::Bytes(cap) } else { Capacity::Objects(cap) };
            let retain = if recency { Retain::Recency } else { Retain::Frequency };
            let c = config(n_exam, keep.min(n_exam), retain);
            let mut naive = NaiveFifoMerge::new(capacity, &c);
            testing::assert_matches_reference(&mut FifoMerge::new(capacity, &c).unwrap(), &mut naive, &trace);
            testing::replay_checked(&mut FifoMerge::new(capacity, &c).unwrap(), &trace);
        }
    }
}
