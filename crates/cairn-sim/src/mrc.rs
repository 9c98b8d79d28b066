//! Miss-ratio curves of LRU: exact in one pass, and SHARDS sampling.
//!
//! **Exact.** LRU is a stack algorithm: an access hits in an LRU cache of size
//! `C` exactly when its *stack distance* — the units touched since the key's
//! previous access, counting the key itself — is at most `C`. One pass computes
//! every access's distance with a Fenwick tree over logical time holding a mark
//! at each key's latest access: the distance is the sum of marks from the key's
//! previous access to now. `O(log n)` per access; the tree is compacted to the
//! live keys whenever it fills, so memory is `O(distinct keys)`, not `O(n)`.
//!
//! **Byte mode** weights each mark by the unit's size: the distance is the bytes
//! of the distinct units touched since, plus the unit's own. That equals byte-LRU
//! (evict from the tail until the new unit fits) exactly while every unit fits
//! in the cache and units keep their size; a unit larger than the cache, which
//! LRU never admits, still counts here, so small byte caches are approximated.
//!
//! **SHARDS** (Waldspurger et al., FAST '15), fixed rate: only keys with
//! `mix64(key) mod P < T` are tracked (`P = 2^24`, rate `R = T / P`); a sampled
//! access's distance is scaled by `1 / R`, and miss ratios are taken over the
//! sampled accesses. Memory and time shrink by `R`. The histogram gets the
//! paper's `SHARDS_adj` correction (see [`MrcTracker::finish`]).
//!
//! **SHARDS fixed size** (`SHARDS_max`, same paper): at most `s_max` sampled keys
//! are tracked; when one more arrives the key with the largest hash is dropped
//! and `T` lowered to its hash, so the rate adapts downwards. Each sampled
//! access's distance is scaled by the rate `R` in force when it happened, and it
//! counts as `1 / R` accesses (the paper rescales the histogram instead when
//! `T` drops; weighting each access by its own rate is the same estimate
//! without the rescan).

use std::collections::{BTreeMap, BTreeSet};

use cairn_policy::{Access, KeyMap};

use crate::groups::mix64;
use crate::size::CapacityUnit;

/// SHARDS' hash modulus `P`.
pub const SHARDS_MODULUS: u64 = 1 << 24;

/// A Fenwick (binary indexed) tree of `u64` weights; subtraction wraps, which
/// keeps every prefix sum right as long as the true sums fit in 64 bits.
#[derive(Debug, Default)]
struct Fenwick {
    tree: Vec<u64>,
}

impl Fenwick {
    /// A tree built from `values` in `O(n)`.
    fn from_values(values: &[u64]) -> Self {
        let mut tree = vec![0u64; values.len() + 1];
        for (i, &v) in values.iter().enumerate() {
            let i = i + 1;
            tree[i] = tree[i].wrapping_add(v);
            let parent = i + (i & i.wrapping_neg());
            if parent < tree.len() {
                tree[parent] = tree[parent].wrapping_add(tree[i]);
            }
        }
        Self { tree }
    }

    fn add(&mut self, at: usize, delta: u64) {
        let mut i = at + 1;
        while i < self.tree.len() {
            self.tree[i] = self.tree[i].wrapping_add(delta);
            i += i & i.wrapping_neg();
        }
    }

    /// Sum of values at positions `< end`.
    fn prefix(&self, end: usize) -> u64 {
        let mut i = end;
        let mut sum = 0u64;
        while i > 0 {
            sum = sum.wrapping_add(self.tree[i]);
            i -= i & i.wrapping_neg();
        }
        sum
    }
}

/// Stack distances of a stream of keys, in objects or bytes, with a value
/// `V` kept beside each key (the trace analyzer's per-key counters; none for
/// the MRC), so a caller needing both looks a key up once.
#[derive(Debug)]
pub struct StackDistances<V = ()> {
    unit: CapacityUnit,
    /// Key → position of its latest access, and the caller's value.
    last: KeyMap<(usize, V)>,
    /// The mark (weight) at each position; 0 where no key's latest access is.
    marks: Vec<u64>,
    tree: Fenwick,
    /// Sum of all marks.
    total: u64,
    next: usize,
}

impl<V: Default> StackDistances<V> {
    /// No accesses yet.
    pub fn new(unit: CapacityUnit) -> Self {
        Self {
            unit,
            last: KeyMap::default(),
            marks: vec![0; 1024],
            tree: Fenwick::from_values(&[0; 1024]),
            total: 0,
            next: 0,
        }
    }

    /// Records an access and returns its stack distance, or `None` on a first
    /// access (a cold miss at every size). The distance counts the key itself:
    /// an LRU cache of `d` units holds it.
    pub fn access(&mut self, key: u64, size: u32) -> Option<u64> {
        self.access_with(key, size).0
    }

    /// [`Self::access`], also handing back the key's value (`V::default()`
    /// on a first access) to update in place.
    pub fn access_with(&mut self, key: u64, size: u32) -> (Option<u64>, &mut V) {
        if self.next == self.marks.len() {
            self.compact();
        }
        let weight = match self.unit {
            CapacityUnit::Objects => 1,
            CapacityUnit::Bytes => u64::from(size),
        };
        let now = self.next;
        self.next += 1;
        let (distance, value) = match self.last.entry(key) {
            hashbrown::hash_map::Entry::Occupied(entry) => {
                let slot = entry.into_mut();
                let previous = std::mem::replace(&mut slot.0, now);
                let old = self.marks[previous];
                let distance = self.total.wrapping_sub(self.tree.prefix(previous));
                self.marks[previous] = 0;
                self.tree.add(previous, old.wrapping_neg());
                self.total = self.total.wrapping_sub(old);
                (Some(distance), &mut slot.1)
            }
            hashbrown::hash_map::Entry::Vacant(entry) => {
                (None, &mut entry.insert((now, V::default())).1)
            }
        };
        self.marks[now] = weight;
        self.tree.add(now, weight);
        self.total += weight;
        (distance, value)
    }

    /// Forgets `key` (its mark no longer counts in other keys' distances).
    pub fn forget(&mut self, key: u64) {
        if let Some((at, _)) = self.last.remove(&key) {
            let old = self.marks[at];
            self.marks[at] = 0;
            self.tree.add(at, old.wrapping_neg());
            self.total = self.total.wrapping_sub(old);
        }
    }

    /// Renumbers the live marks `0..live` in time order, in a table with at
    /// least as many free slots as live ones. Linear: a position's new number
    /// is the count of live positions before it, read off a table indexed by
    /// old position (no sort, no search, one write per key).
    fn compact(&mut self) {
        const DEAD: usize = usize::MAX;
        let mut renumber = vec![DEAD; self.marks.len()];
        for &(at, _) in self.last.values() {
            renumber[at] = 0;
        }
        let mut live = 0;
        for slot in &mut renumber {
            if *slot != DEAD {
                *slot = live;
                live += 1;
            }
        }
        let capacity = (live * 2).max(1024);
        let mut marks = vec![0u64; capacity];
        for (old, &new) in renumber.iter().enumerate() {
            if new != DEAD {
                marks[new] = self.marks[old];
            }
        }
        for (at, _) in self.last.values_mut() {
            *at = renumber[*at];
        }
        self.tree = Fenwick::from_values(&marks);
        self.marks = marks;
        self.next = live;
    }

    /// Distinct keys currently tracked.
    pub fn keys(&self) -> usize {
        self.last.len()
    }

    /// Each tracked key's value, in no order.
    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.last.values().map(|(_, value)| value)
    }
}

/// How many accesses had each stack distance. Counts are estimates of the
/// whole trace's accesses: exact curves count 1 per access, SHARDS counts a
/// sampled access as `1 / R` accesses (`R` the rate when it was sampled).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ReuseHistogram {
    /// Accesses counted.
    pub accesses: f64,
    /// First accesses (misses at every size).
    pub cold: f64,
    /// Stack distance → accesses (scaled distances for SHARDS).
    pub distances: BTreeMap<u64, f64>,
}

impl ReuseHistogram {
    /// Misses at each size in `sizes` (in the histogram's unit), which must be
    /// sorted ascending: every access whose distance exceeds the size, and
    /// every cold access.
    pub fn misses(&self, sizes: &[u64]) -> Vec<f64> {
        let mut out = Vec::with_capacity(sizes.len());
        let mut hits = 0.0;
        let mut iter = self.distances.iter().peekable();
        for &size in sizes {
            while let Some((_, &count)) = iter.next_if(|&(&d, _)| d <= size) {
                hits += count;
            }
            out.push(self.accesses - hits);
        }
        out
    }

    /// Miss ratio at each size in `sizes`, sorted ascending.
    pub fn miss_ratios(&self, sizes: &[u64]) -> Vec<f64> {
        self.misses(sizes)
            .into_iter()
            .map(|m| {
                if self.accesses > 0.0 {
                    m / self.accesses
                } else {
                    0.0
                }
            })
            .collect()
    }

    /// The largest distance seen (the cache size beyond which only cold misses remain).
    pub fn max_distance(&self) -> u64 {
        self.distances.keys().next_back().copied().unwrap_or(0)
    }
}

/// What a tracker samples.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Sampling {
    All,
    /// Fixed rate: `mix64(key) mod P < threshold`.
    Rate {
        threshold: u64,
    },
    /// Fixed size: at most `max_keys` keys, threshold lowered as needed.
    Size {
        threshold: u64,
        max_keys: usize,
    },
}

/// Builds a [`ReuseHistogram`] from a stream of accesses.
#[derive(Debug)]
pub struct MrcTracker {
    sampling: Sampling,
    distances: StackDistances,
    histogram: ReuseHistogram,
    /// Sampled keys by hash (fixed size only), to find the largest.
    by_hash: BTreeSet<(u64, u64)>,
    observed: u64,
}

impl MrcTracker {
    /// Exact: every access.
    pub fn exact(unit: CapacityUnit) -> Self {
        Self::with(unit, Sampling::All)
    }

    /// SHARDS at a fixed rate in (0, 1].
    pub fn shards(unit: CapacityUnit, rate: f64) -> Self {
        let threshold = ((rate.clamp(0.0, 1.0) * SHARDS_MODULUS as f64) as u64).max(1);
        Self::with(unit, Sampling::Rate { threshold })
    }

    /// SHARDS with at most `max_keys` tracked keys, starting at rate 1.
    pub fn shards_fixed_size(unit: CapacityUnit, max_keys: usize) -> Self {
        Self::with(
            unit,
            Sampling::Size {
                threshold: SHARDS_MODULUS,
                max_keys: max_keys.max(1),
            },
        )
    }

    fn with(unit: CapacityUnit, sampling: Sampling) -> Self {
        Self {
            sampling,
            distances: StackDistances::new(unit),
            histogram: ReuseHistogram::default(),
            by_hash: BTreeSet::new(),
            observed: 0,
        }
    }

    /// The current sampling rate.
    pub fn rate(&self) -> f64 {
        match self.sampling {
            Sampling::All => 1.0,
            Sampling::Rate { threshold } | Sampling::Size { threshold, .. } => {
                threshold as f64 / SHARDS_MODULUS as f64
            }
        }
    }

    /// Accesses observed (sampled or not).
    pub fn observed(&self) -> u64 {
        self.observed
    }

    /// Feeds one access.
    pub fn observe(&mut self, access: &Access) {
        self.observed += 1;
        let hash = mix64(access.key) % SHARDS_MODULUS;
        match self.sampling {
            Sampling::All => {}
            Sampling::Rate { threshold } => {
                if hash >= threshold {
                    return;
                }
            }
            Sampling::Size {
                threshold,
                max_keys,
            } => {
                if hash >= threshold {
                    return;
                }
                if self.by_hash.insert((hash, access.key)) && self.by_hash.len() > max_keys {
                    self.evict_largest_hash(max_keys);
                    if !self.by_hash.contains(&(hash, access.key)) {
                        return;
                    }
                }
            }
        }
        let rate = self.rate();
        let weight = 1.0 / rate;
        self.histogram.accesses += weight;
        match self.distances.access(access.key, access.size) {
            None => self.histogram.cold += weight,
            Some(d) => {
                let scaled = if rate < 1.0 {
                    (d as f64 / rate).round() as u64
                } else {
                    d
                };
                *self.histogram.distances.entry(scaled).or_insert(0.0) += weight;
            }
        }
    }

    /// Drops keys with the largest hash until `max_keys` remain, lowering the
    /// threshold to the largest hash dropped (every key at that hash goes too).
    fn evict_largest_hash(&mut self, max_keys: usize) {
        while self.by_hash.len() > max_keys {
            let Some(&(hash, _)) = self.by_hash.last() else {
                return;
            };
            while let Some(&(h, key)) = self.by_hash.last() {
                if h != hash {
                    break;
                }
                self.by_hash.pop_last();
                self.distances.forget(key);
            }
            if let Sampling::Size { threshold, .. } = &mut self.sampling {
                *threshold = hash;
            }
        }
    }

    /// The histogram. Sampled histograms get SHARDS' adjustment
    /// (`SHARDS_adj`): the difference between the accesses observed and the
    /// accesses the sample stands for is added to the smallest distance, so the
    /// curve is normalised by the true count and a sample that caught more or
    /// fewer hot keys than its share does not shift the whole curve.
    pub fn finish(mut self) -> ReuseHistogram {
        if self.sampling != Sampling::All {
            let difference = self.observed as f64 - self.histogram.accesses;
            *self.histogram.distances.entry(0).or_insert(0.0) += difference;
            self.histogram.accesses = self.observed as f64;
        }
        self.histogram
    }
}

/// `points` cache sizes evenly spaced over `(0, max]`, ascending, without repeats.
pub fn even_sizes(max: u64, points: usize) -> Vec<u64> {
    let points = points.max(1) as u64;
    let mut sizes: Vec<u64> = (1..=points)
        .map(|i| (u128::from(max) * u128::from(i) / u128::from(points)) as u64)
        .filter(|&s| s > 0)
        .collect();
    sizes.dedup();
    sizes
}

/// Mean of `|a[i] - b[i]|` over the common length (0 when empty).
pub fn mean_absolute_error(a: &[f64], b: &[f64]) -> f64 {
    let n = a.len().min(b.len());
    if n == 0 {
        return 0.0;
    }
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).sum::<f64>() / n as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distances_count_distinct_keys_since_the_last_access() {
        let mut d: StackDistances = StackDistances::new(CapacityUnit::Objects);
        let got: Vec<Option<u64>> = [1, 2, 3, 2, 1, 1, 4]
            .into_iter()
            .map(|k| d.access(k, 1))
            .collect();
        assert_eq!(got, [None, None, None, Some(2), Some(3), Some(1), None]);
    }

    #[test]
    fn compaction_keeps_distances_right() {
        let mut d: StackDistances = StackDistances::new(CapacityUnit::Bytes);
        // 3 keys cycled 10,000 times: compaction runs many times.
        for i in 0..30_000u64 {
            let got = d.access(i % 3, 10);
            if i >= 3 {
                assert_eq!(got, Some(30), "access {i}");
            }
        }
        assert_eq!(d.keys(), 3);
        assert!(d.marks.len() <= 1024);
    }

    #[test]
    fn miss_ratios_accumulate_hits_up_to_each_size() {
        let mut h = ReuseHistogram {
            accesses: 10.0,
            cold: 4.0,
            distances: BTreeMap::new(),
        };
        h.distances.insert(1, 2.0);
        h.distances.insert(3, 4.0);
        assert_eq!(h.miss_ratios(&[1, 2, 3, 100]), [0.8, 0.8, 0.4, 0.4]);
    }
}
