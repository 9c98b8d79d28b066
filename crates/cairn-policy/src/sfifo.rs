//! SFIFO: segmented FIFO, S4LRU with FIFO segments (a hit in the top
//! segment does not move).
//!
//! Source: libCacheSim's `cache/eviction/fifo/SFIFO.c` (commit aa0fc40,
//! `cachesim ... sfifo`), one of the FIFO-based policies of Juncheng Yang et
//! al., "FIFO can be Better than LRU: the Power of Lazy Promotion and Quick
//! Demotion", HotOS 2023; the segment structure is S4LRU's (Q. Huang et al.,
//! "An Analysis of Facebook Photo Caching", SOSP 2013). Segment 0 is the
//! lowest, `segments - 1` the top:
//!
//! - **sizes**: each segment gets `capacity / segments` (integer division);
//!   only the total capacity is hard, so segment 0 may hold the remainder.
//! - **admission**: a unit larger than one segment is refused.
//! - **miss**: evict until the unit fits in the total capacity, each time the
//!   tail of the lowest non-empty segment; then insert at the head of the
//!   lowest segment with room for it, or of segment 0 if none has.
//! - **hit**: in the top segment nothing moves; otherwise the unit moves to
//!   the head of the next segment up and, while that segment is over its
//!   size, its tail moves to the head of the segment below, cascading down;
//!   a cascade that overfills segment 0 *evicts* its tail.
//!
//! So a hit can evict, as in [`slru`](crate::slru): [`Policy::access`]
//! reports those victims at once, a bare [`Policy::lookup`] holds them
//! (already not resident) for the next [`Policy::admit`] or
//! [`Policy::take_held_victims`].
//!
//! Difference: [`Policy::remove`] takes the unit out of its segment's
//! occupancy; libCacheSim's `SFIFO_remove` leaves `fifo_n_bytes` unchanged.
//! Trace replay never removes.

use serde::{Deserialize, Serialize};

use crate::index::{KeyIndex, Keyed};
use crate::list::{Index, List, Slab};
use crate::{Access, Ahead, Capacity, ConfigError, Policy};

/// The most segments (as [`slru`](crate::slru)).
pub const SEGMENTS_MAX: u32 = 16;

/// SFIFO's configuration.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SfifoConfig {
    /// Number of equal FIFO segments, 1 to 16. Default 4 (libCacheSim
    /// `n-seg`).
    pub segments: u32,
}

impl Default for SfifoConfig {
    fn default() -> Self {
        Self { segments: 4 }
    }
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    key: u64,
    charge: u32,
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
}

/// Segmented FIFO.
#[derive(Debug)]
pub struct Sfifo {
    capacity: Capacity,
    segment_limit: u64,
    used: u64,
    map: KeyIndex,
    slab: Slab<Entry>,
    segments: Vec<Segment>,
    /// Victims of hits seen through `lookup`, reported by the next `admit`.
    deferred: Vec<u64>,
}

impl Sfifo {
    /// An empty SFIFO cache. Fails if the segment count is out of range or a
    /// segment would get no capacity.
    pub fn new(capacity: Capacity, config: &SfifoConfig) -> Result<Self, ConfigError> {
        if !(1..=SEGMENTS_MAX).contains(&config.segments) {
            return Err(ConfigError::OutOfRange {
                policy: "sfifo",
                parameter: "segments",
                value: config.segments.to_string(),
                expected: "1 to 16",
            });
        }
        let segment_limit = capacity.limit() / u64::from(config.segments);
        if segment_limit == 0 {
            return Err(ConfigError::CapacityTooSmall {
                policy: "sfifo",
                capacity: capacity.limit(),
                reason: "every segment needs a share of at least 1",
            });
        }
        Ok(Self {
            capacity,
            segment_limit,
            used: 0,
            map: KeyIndex::default(),
            slab: Slab::new(),
            segments: vec![Segment::default(); config.segments as usize],
            deferred: Vec::new(),
        })
    }

    /// Evicts the tail of the lowest non-empty segment (`SFIFO_evict`).
    fn evict_one(&mut self, victims: &mut Vec<u64>) -> bool {
        let Some(segment) = self.segments.iter_mut().find(|s| !s.queue.is_empty()) else {
            return false;
        };
        let Some(index) = self.slab.pop_back(&mut segment.queue) else {
            return false;
        };
        let victim = *self.slab.get(index);
        segment.used -= u64::from(victim.charge);
        self.used -= u64::from(victim.charge);
        self.map.remove(victim.key, &self.slab);
        self.slab.remove(index);
        victims.push(victim.key);
        true
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

    /// While segment `id` is over its size, move its tail one segment down
    /// (`SFIFO_cool`), cascading; segment 0 evicts.
    fn cool(&mut self, id: usize, victims: &mut Vec<u64>) {
        while self.segments[id].used > self.segment_limit {
            if id == 0 {
                if !self.evict_one(victims) {
                    break;
                }
                continue;
            }
            let Some(index) = self.segments[id].queue.back() else {
                break;
            };
            self.move_to_segment(index, id - 1);
            self.cool(id - 1, victims);
        }
    }

    /// The hit path; victims of a cascade go to `victims`.
    fn hit(&mut self, key: u64, victims: &mut Vec<u64>) -> bool {
        let Some(index) = self.map.get(key, &self.slab) else {
            return false;
        };
        let segment = self.slab.get(index).segment as usize;
        if segment + 1 < self.segments.len() {
            self.move_to_segment(index, segment + 1);
            self.cool(segment + 1, victims);
        }
        true
    }
}

impl Policy for Sfifo {
    fn name(&self) -> &'static str {
        "sfifo"
    }

    fn prefetch(&self, key: u64, ahead: Ahead) {
        self.map.prefetch_stage(key, &self.slab, ahead, true);
    }

    fn lookup(&mut self, access: &Access) -> bool {
        let mut deferred = std::mem::take(&mut self.deferred);
        let hit = self.hit(access.key, &mut deferred);
        self.deferred = deferred;
        hit
    }

    fn access(&mut self, access: &Access, victims: &mut Vec<u64>) -> bool {
        if self.hit(access.key, victims) {
            true
        } else {
            self.admit(access, victims);
            false
        }
    }

    fn take_held_victims(&mut self, victims: &mut Vec<u64>) {
        victims.append(&mut self.deferred);
    }

    fn admit(&mut self, access: &Access, victims: &mut Vec<u64>) -> bool {
        // Hit-time victims held back by `lookup`; one admitted again is
        // simply resident again.
        victims.extend(self.deferred.drain(..).filter(|&k| k != access.key));
        let charge = self.capacity.charge(access.size);
        if charge > self.segment_limit {
            return false; // SFIFO_can_insert
        }
        while self.used + charge > self.capacity.limit() {
            if !self.evict_one(victims) {
                break;
            }
        }
        let limit = self.segment_limit;
        let to = self
            .segments
            .iter()
            .position(|s| s.used + charge <= limit)
            .unwrap_or(0);
        let index = self.slab.insert(Entry {
            key: access.key,
            charge: charge as u32, // ≤ the segment size, from a u32 size
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

    /// Naive SFIFO: one vector per segment, newest first, transcribing
    /// `SFIFO.c` step by step.
    struct NaiveSfifo {
        capacity: Capacity,
        limit: u64,
        /// (key, charge), newest first.
        segments: Vec<Vec<(u64, u64)>>,
    }

    impl NaiveSfifo {
        fn seg_used(&self, id: usize) -> u64 {
            self.segments[id].iter().map(|i| i.1).sum()
        }

        fn total(&self) -> u64 {
            (0..self.segments.len()).map(|i| self.seg_used(i)).sum()
        }

        fn evict(&mut self, victims: &mut Vec<u64>) {
            let seg = self.segments.iter_mut().find(|s| !s.is_empty()).unwrap();
            victims.push(seg.pop().unwrap().0);
        }

        fn cool(&mut self, id: usize, victims: &mut Vec<u64>) {
            if id == 0 {
                self.evict(victims);
                return;
            }
            let item = self.segments[id].pop().unwrap();
            self.segments[id - 1].insert(0, item);
            while self.seg_used(id - 1) > self.limit {
                self.cool(id - 1, victims);
            }
        }
    }

    impl Reference for NaiveSfifo {
        fn access(&mut self, access: &Access) -> (bool, Vec<u64>) {
            let mut victims = vec![];
            let top = self.segments.len() - 1;
            for id in 0..=top {
                if let Some(at) = self.segments[id].iter().position(|i| i.0 == access.key) {
                    if id < top {
                        let item = self.segments[id].remove(at);
                        self.segments[id + 1].insert(0, item);
                        while self.seg_used(id + 1) > self.limit {
                            self.cool(id + 1, &mut victims);
                        }
                    }
                    return (true, victims);
                }
            }
            let charge = self.capacity.charge(access.size);
            if charge > self.limit {
                return (false, victims);
            }
            while self.total() + charge > self.capacity.limit() {
                self.evict(&mut victims);
            }
            let to = (0..=top)
                .find(|&i| self.seg_used(i) + charge <= self.limit)
                .unwrap_or(0);
            self.segments[to].insert(0, (access.key, charge));
            (false, victims)
        }
    }

    fn sfifo(capacity: Capacity, segments: u32) -> Sfifo {
        Sfifo::new(capacity, &SfifoConfig { segments }).unwrap()
    }

    fn segment_of(s: &Sfifo, key: u64) -> u8 {
        s.slab.get(s.map.get(key, &s.slab).unwrap()).segment
    }

    #[test]
    fn a_hit_in_the_top_segment_does_not_move_the_unit() {
        // Two segments of 2: 1, 2 fill segment 0, 3, 4 segment 1.
        let mut s = sfifo(Capacity::Objects(4), 2);
        let mut victims = vec![];
        for access in testing::keys(&[1, 2, 3, 4, 3]) {
            s.access(&access, &mut victims);
        }
        assert_eq!([1, 2, 3, 4].map(|k| segment_of(&s, k)), [0, 0, 1, 1]);
        // A hit on 1 promotes it to segment 1, whose tail is still 3 (its hit
        // did not move it; under SLRU it would be 4): 3 moves down.
        s.access(&testing::keys(&[1])[0], &mut victims);
        assert_eq!([1, 2, 3, 4].map(|k| segment_of(&s, k)), [1, 0, 0, 1]);
        // A miss evicts segment 0's tail: 2.
        s.access(&testing::keys(&[5])[0], &mut victims);
        assert_eq!(victims, [2]);
    }

    #[test]
    fn a_hit_can_evict_when_segment_0_holds_the_remainder() {
        // Capacity 5, two segments of 2: segment 0 may hold 3.
        let mut s = sfifo(Capacity::Objects(5), 2);
        let mut victims = vec![];
        for access in testing::keys(&[1, 2, 3, 4, 5]) {
            s.access(&access, &mut victims);
        }
        assert!(victims.is_empty());
        assert!(s.lookup(&testing::keys(&[1])[0]));
        assert!(!s.contains(2), "evicted by the hit's cascade");
        s.admit(&testing::keys(&[6])[0], &mut victims);
        assert_eq!(victims, [2], "reported by the next admit");
    }

    #[test]
    fn rejects_bad_segment_counts_and_tiny_caches() {
        for segments in [0, 17] {
            assert!(matches!(
                Sfifo::new(Capacity::Objects(100), &SfifoConfig { segments }).unwrap_err(),
                ConfigError::OutOfRange {
                    policy: "sfifo",
                    ..
                }
            ));
        }
        assert!(matches!(
            Sfifo::new(Capacity::Objects(3), &SfifoConfig::default()).unwrap_err(),
            ConfigError::CapacityTooSmall { .. }
        ));
    }

    proptest! {
        #[test]
        fn matches_naive_model(
            trace in testing::trace_strategy(40, 400, 5),
            cap in 4u64..40,
            bytes: bool,
            segments in 1u32..6,
        ) {
            let capacity = if bytes { Capacity::Bytes(cap) } else { Capacity::Objects(cap) };
            let Ok(mut s) = Sfifo::new(capacity, &SfifoConfig { segments }) else {
                return Ok(());
            };
            let mut naive = NaiveSfifo {
                capacity,
                limit: cap / u64::from(segments),
                segments: vec![vec![]; segments as usize],
            };
            testing::assert_matches_reference(&mut s, &mut naive, &trace);
            testing::replay_checked(&mut sfifo(capacity, segments), &trace);
        }
    }
}
