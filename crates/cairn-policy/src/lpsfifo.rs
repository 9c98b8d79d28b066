//! LP-SFIFO: segmented FIFO with lazy promotion: a hit only counts, and a
//! unit is promoted when it reaches the tail of segment 0, to the segment its
//! hit count names.
//!
//! Source: Juncheng Yang, Ziyue Qiu, Yazhuo Zhang, Yao Yue, K. V. Rashmi,
//! "FIFO can be Better than LRU: the Power of Lazy Promotion and Quick
//! Demotion", HotOS 2023 (lazy promotion applied to segmented FIFO). This
//! module matches libCacheSim commit aa0fc40's
//! `cache/eviction/fifo/LP_SFIFO.c` (`cachesim ... lp-sfifo`) step for step.
//! Segment 0 is the lowest:
//!
//! - **sizes**: segment i gets ⌊wᵢ / Σw × capacity⌋ (floating point, as
//!   libCacheSim's `seg-size`, default `1:1:1:1`); only the total capacity
//!   is hard, so segment 0 may run over its share.
//! - **admission**: a unit larger than segment 0 is refused.
//! - **hit**: nothing moves. In segment 0 the unit's count becomes at least
//!   1; in a higher segment it is incremented.
//! - **miss**: while the unit does not fit in the total capacity, look at
//!   segment 0's tail: with count 0 it is evicted; otherwise it moves to the
//!   head of segment min(count, n − 1) with count 0, and while that segment
//!   is over its size its tails move, counts kept, to the head of the segment
//!   below, cascading down to segment 0 (which may run over). Then the unit
//!   enters the head of the lowest segment with room for it, or segment 0,
//!   with count 0.
//!
//! A unit demoted into segment 0 keeps its count, so it may later be promoted
//! more than one segment up. With one segment this is FIFO-reinsertion
//! (1-bit CLOCK).
//!
//! Difference (unreachable with integral weights, where the higher segments
//! cannot hold enough to leave the new unit no room): should segment 0 be
//! empty while room is needed, libCacheSim asserts; here the lowest non-empty
//! segment's tail is evicted.

use serde::{Deserialize, Serialize};

use crate::index::{KeyIndex, Keyed};
use crate::list::{Index, List, Slab};
use crate::{Access, Ahead, Capacity, ConfigError, Policy};

/// The most segments (libCacheSim's `LP_SFIFO_MAX_N_SEG` is larger; 16 as
/// [`slru`](crate::slru)).
pub const SEGMENTS_MAX: usize = 16;

/// LP-SFIFO's configuration.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LpSfifoConfig {
    /// Relative sizes of the segments, lowest first; 1 to 16 positive
    /// weights. Default `[1, 1, 1, 1]` (libCacheSim `seg-size=1:1:1:1`).
    pub segment_weights: Vec<u32>,
}

impl Default for LpSfifoConfig {
    fn default() -> Self {
        Self {
            segment_weights: vec![1; 4],
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    key: u64,
    charge: u32,
    /// Hits while resident (at least 1 after a hit in segment 0), saturating.
    freq: u16,
    segment: u8,
}

impl Keyed for Entry {
    fn key(&self) -> u64 {
        self.key
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct Segment {
    /// Front = newest.
    queue: List,
    used: u64,
    limit: u64,
}

/// Segmented FIFO with lazy promotion.
#[derive(Debug)]
pub struct LpSfifo {
    capacity: Capacity,
    used: u64,
    map: KeyIndex,
    slab: Slab<Entry>,
    segments: Vec<Segment>,
}

impl LpSfifo {
    /// An empty LP-SFIFO cache. Fails if a weight is zero, there are too many
    /// or no segments, or a segment would get no capacity.
    pub fn new(capacity: Capacity, config: &LpSfifoConfig) -> Result<Self, ConfigError> {
        let weights = &config.segment_weights;
        if weights.is_empty() || weights.len() > SEGMENTS_MAX || weights.contains(&0) {
            return Err(ConfigError::OutOfRange {
                policy: "lp-sfifo",
                parameter: "segment_weights",
                value: format!("{weights:?}"),
                expected: "1 to 16 positive weights",
            });
        }
        let sum: u64 = weights.iter().map(|&w| u64::from(w)).sum();
        let segments: Vec<Segment> = weights
            .iter()
            .map(|&w| Segment {
                // As LP_SFIFO_parse_params: (double) w / sum * size, truncated.
                limit: (f64::from(w) / sum as f64 * capacity.limit() as f64) as u64,
                ..Segment::default()
            })
            .collect();
        if segments.iter().any(|s| s.limit == 0) {
            return Err(ConfigError::CapacityTooSmall {
                policy: "lp-sfifo",
                capacity: capacity.limit(),
                reason: "every segment needs a share of at least 1",
            });
        }
        Ok(Self {
            capacity,
            used: 0,
            map: KeyIndex::default(),
            slab: Slab::new(),
            segments,
        })
    }

    /// Moves a linked node from its segment to the head of `to`.
    fn move_to_segment(&mut self, index: Index, to: usize) {
        let entry = *self.slab.get(index);
        let charge = u64::from(entry.charge);
        let from = &mut self.segments[entry.segment as usize];
        self.slab.unlink(&mut from.queue, index);
        from.used -= charge;
        let to_segment = &mut self.segments[to];
        self.slab.push_front(&mut to_segment.queue, index);
        to_segment.used += charge;
        self.slab.get_mut(index).segment = to as u8;
    }

    /// `LP_SFIFO_demote`: while segment `id` (> 0) is over its size, its tail
    /// moves to the head of the segment below, count kept; cascades down.
    fn demote(&mut self, mut id: usize) {
        while id > 0 && self.segments[id].used > self.segments[id].limit {
            while self.segments[id].used > self.segments[id].limit {
                let Some(index) = self.segments[id].queue.back() else {
                    break;
                };
                self.move_to_segment(index, id - 1);
            }
            id -= 1;
        }
    }

    /// One step of `LP_SFIFO_evict`: segment 0's tail is promoted or evicted.
    fn evict(&mut self, victims: &mut Vec<u64>) -> bool {
        let top = self.segments.len() - 1;
        let Some(index) = self.segments[0].queue.back() else {
            // Unreachable with integral weights (see the module docs).
            return self.evict_lowest(victims);
        };
        let freq = self.slab.get(index).freq;
        if freq > 0 {
            let to = usize::from(freq).min(top);
            self.move_to_segment(index, to);
            self.slab.get_mut(index).freq = 0;
            self.demote(to);
        } else {
            self.evict_at(index, 0, victims);
        }
        true
    }

    fn evict_lowest(&mut self, victims: &mut Vec<u64>) -> bool {
        let Some(id) = self.segments.iter().position(|s| !s.queue.is_empty()) else {
            return false;
        };
        let index = self.segments[id].queue.back().expect("non-empty");
        self.evict_at(index, id, victims);
        true
    }

    fn evict_at(&mut self, index: Index, id: usize, victims: &mut Vec<u64>) {
        let entry = *self.slab.get(index);
        let segment = &mut self.segments[id];
        self.slab.unlink(&mut segment.queue, index);
        segment.used -= u64::from(entry.charge);
        self.used -= u64::from(entry.charge);
        self.map.remove(entry.key, &self.slab);
        self.slab.remove(index);
        victims.push(entry.key);
    }
}

impl Policy for LpSfifo {
    fn name(&self) -> &'static str {
        "lp-sfifo"
    }

    fn prefetch(&self, key: u64, ahead: Ahead) {
        self.map.prefetch_stage(key, &self.slab, ahead, false);
    }

    fn lookup(&mut self, access: &Access) -> bool {
        let Some(index) = self.map.get(access.key, &self.slab) else {
            return false;
        };
        let entry = self.slab.get_mut(index);
        entry.freq = if entry.segment == 0 {
            entry.freq.max(1)
        } else {
            entry.freq.saturating_add(1)
        };
        true
    }

    fn admit(&mut self, access: &Access, victims: &mut Vec<u64>) -> bool {
        let charge = self.capacity.charge(access.size);
        if charge > self.capacity.limit() || charge > self.segments[0].limit {
            return false; // LP_SFIFO_can_insert
        }
        while self.used + charge > self.capacity.limit() {
            if !self.evict(victims) {
                break;
            }
        }
        let to = self
            .segments
            .iter()
            .position(|s| s.used + charge <= s.limit)
            .unwrap_or(0);
        let index = self.slab.insert(Entry {
            key: access.key,
            charge: charge as u32, // ≤ segment 0's size, from a u32 size
            freq: 0,
            segment: to as u8,
        });
        let segment = &mut self.segments[to];
        self.slab.push_front(&mut segment.queue, index);
        segment.used += charge;
        self.map.insert(access.key, index, &self.slab);
        self.used += charge;
        true
    }

    fn remove(&mut self, key: u64) -> bool {
        let Some(index) = self.map.get(key, &self.slab) else {
            return false;
        };
        let entry = *self.slab.get(index);
        let segment = &mut self.segments[entry.segment as usize];
        self.slab.unlink(&mut segment.queue, index);
        segment.used -= u64::from(entry.charge);
        self.used -= u64::from(entry.charge);
        self.map.remove(key, &self.slab);
        self.slab.remove(index);
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
    use crate::testing::{self, Reference};
    use proptest::prelude::*;

    /// Naive LP-SFIFO: one vector of `(key, charge, count)` per segment,
    /// newest first, transcribing `LP_SFIFO.c`.
    struct NaiveLpSfifo {
        capacity: Capacity,
        limits: Vec<u64>,
        segments: Vec<Vec<(u64, u64, u32)>>,
    }

    impl NaiveLpSfifo {
        fn seg_used(&self, id: usize) -> u64 {
            self.segments[id].iter().map(|i| i.1).sum()
        }

        fn demote(&mut self, id: usize) {
            if id == 0 {
                return;
            }
            while self.seg_used(id) > self.limits[id] {
                let item = self.segments[id].pop().unwrap();
                self.segments[id - 1].insert(0, item);
            }
            if self.seg_used(id - 1) > self.limits[id - 1] {
                self.demote(id - 1);
            }
        }
    }

    impl Reference for NaiveLpSfifo {
        fn access(&mut self, access: &Access) -> (bool, Vec<u64>) {
            let mut victims = vec![];
            let n = self.segments.len();
            for id in 0..n {
                if let Some(item) = self.segments[id].iter_mut().find(|i| i.0 == access.key) {
                    item.2 = if id == 0 { item.2.max(1) } else { item.2 + 1 };
                    return (true, victims);
                }
            }
            let charge = self.capacity.charge(access.size);
            if charge > self.limits[0] {
                return (false, victims);
            }
            while (0..n).map(|i| self.seg_used(i)).sum::<u64>() + charge > self.capacity.limit() {
                let (key, size, freq) = self.segments[0].pop().unwrap();
                if freq > 0 {
                    let to = (freq as usize).min(n - 1);
                    self.segments[to].insert(0, (key, size, 0));
                    if self.seg_used(to) > self.limits[to] {
                        self.demote(to);
                    }
                } else {
                    victims.push(key);
                }
            }
            let to = (0..n)
                .find(|&i| self.seg_used(i) + charge <= self.limits[i])
                .unwrap_or(0);
            self.segments[to].insert(0, (access.key, charge, 0));
            (false, victims)
        }
    }

    fn lpsfifo(capacity: Capacity, weights: &[u32]) -> LpSfifo {
        LpSfifo::new(
            capacity,
            &LpSfifoConfig {
                segment_weights: weights.to_vec(),
            },
        )
        .unwrap()
    }

    fn segment_of(s: &LpSfifo, key: u64) -> u8 {
        s.slab.get(s.map.get(key, &s.slab).unwrap()).segment
    }

    #[test]
    fn hits_only_count_and_promotion_happens_at_segment_0s_tail() {
        // Three segments of 2.
        let mut s = lpsfifo(Capacity::Objects(6), &[1, 1, 1]);
        let mut victims = vec![];
        for access in testing::keys(&[1, 2, 1, 1, 3, 4, 5, 6]) {
            s.access(&access, &mut victims);
        }
        // Filled upwards; the hits on 1 moved nothing.
        assert_eq!(
            [1, 2, 3, 4, 5, 6].map(|k| segment_of(&s, k)),
            [0, 0, 1, 1, 2, 2]
        );
        // 7 needs room: 1 (two hits in segment 0, so count 1) is at segment
        // 0's tail and moves to segment 1, whose tail 3 comes down to 0;
        // then 2 (never hit) is evicted.
        s.access(&testing::keys(&[7])[0], &mut victims);
        assert_eq!(victims, [2]);
        assert_eq!([1, 3, 7].map(|k| segment_of(&s, k)), [1, 0, 0]);
    }

    #[test]
    fn a_count_gathered_higher_up_promotes_further() {
        let mut s = lpsfifo(Capacity::Objects(6), &[1, 1, 1]);
        let mut victims = vec![];
        // 3 is hit twice in segment 1, then demoted to 0 with count 2 kept.
        for access in testing::keys(&[1, 2, 3, 4, 5, 6, 3, 3, 1, 7]) {
            s.access(&access, &mut victims);
        }
        assert_eq!(segment_of(&s, 3), 0);
        // Room for 8: segment 0's tail is 3 (demoted before 7 entered), with
        // count 2: it goes straight to segment 2.
        s.access(&testing::keys(&[8])[0], &mut victims);
        assert_eq!(segment_of(&s, 3), 2);
    }

    #[test]
    fn rejects_bad_weights_and_tiny_caches() {
        for weights in [vec![], vec![1, 0], vec![1; 17]] {
            assert!(matches!(
                LpSfifo::new(
                    Capacity::Objects(100),
                    &LpSfifoConfig {
                        segment_weights: weights
                    }
                )
                .unwrap_err(),
                ConfigError::OutOfRange {
                    policy: "lp-sfifo",
                    ..
                }
            ));
        }
        assert!(matches!(
            LpSfifo::new(Capacity::Objects(3), &LpSfifoConfig::default()).unwrap_err(),
            ConfigError::CapacityTooSmall { .. }
        ));
    }

    proptest! {
        #[test]
        fn matches_naive_model(
            trace in testing::trace_strategy(40, 400, 5),
            cap in 4u64..40,
            bytes: bool,
            weights in prop::collection::vec(1u32..4, 1..5),
        ) {
            let capacity = if bytes { Capacity::Bytes(cap) } else { Capacity::Objects(cap) };
            let sum: u32 = weights.iter().sum();
            let limits = weights.iter().map(|&w| (f64::from(w) / f64::from(sum) * cap as f64) as u64).collect();
            let config = LpSfifoConfig { segment_weights: weights };
            let Ok(mut s) = LpSfifo::new(capacity, &config) else {
                return Ok(());
            };
            let mut naive = NaiveLpSfifo {
                capacity,
                limits,
                segments: vec![vec![]; s.segments.len()],
            };
            testing::assert_matches_reference(&mut s, &mut naive, &trace);
            testing::replay_checked(&mut LpSfifo::new(capacity, &config).unwrap(), &trace);
        }
    }
}
