//! SLRU: segmented LRU, with any number of segments (S4LRU is four).
//!
//! Origin: R. Karedla, J. S. Love, B. G. Wherry, "Caching Strategies to
//! Improve Disk System Performance", IEEE Computer 27(3), 1994 (two segments,
//! probationary and protected); the n-segment generalisation S4LRU is from
//! Q. Huang et al., "An Analysis of Facebook Photo Caching", SOSP 2013.
//!
//! Maps to libCacheSim's `SLRU` (`cache/eviction/SLRU.c`; its default,
//! `n-seg=4`, is S4LRU, which [`SlruConfig::s4lru`] reproduces). Segment 0 is
//! the lowest (probationary) one, segment n-1 the highest:
//! - **sizes**: with equal weights each segment gets `capacity / n` (integer
//!   division, as libCacheSim's default); otherwise segment i gets
//!   `floor(weight_i / sum * capacity)` (as its `seg-size=a:b:..` parameter).
//!   The rounding remainder is not lost: the *total* capacity bounds what is
//!   resident, so segment 0 may hold more than its share.
//! - **admission**: a unit larger than segment 0 is refused.
//! - **miss**: evict until the unit fits in the total capacity, each time the
//!   LRU unit of the lowest non-empty segment; then insert at the MRU end of
//!   the lowest segment that still has room for it, or of segment 0 if none
//!   has. (So while the cache fills, new units land in higher segments.)
//! - **hit**: in the top segment, move to its MRU end; otherwise move to the
//!   MRU end of the next segment up, and, while that segment is over its size,
//!   demote its LRU unit to the MRU end of the segment below, cascading down;
//!   a cascade that overfills segment 0 *evicts* from it.
//!
//! That last point means a hit can evict (only when the sizes do not divide
//! the capacity exactly, so that segment 0 holds the remainder). The
//! simulator's call, [`Policy::access`], reports those victims at once;
//! a bare [`Policy::lookup`] has no place to report them, so they are held
//! and reported by the next [`Policy::admit`] (they are already not resident:
//! `contains` is false for them). Either way the resident set evolves exactly
//! as libCacheSim's, and in object-count mode the miss ratios match it.
//!
//! Difference: [`Policy::remove`] also takes the unit out of its segment's
//! occupancy. libCacheSim's `SLRU_remove` unlinks the object but leaves
//! `lru_n_bytes`/`lru_n_objs` unchanged, so after a removal its segment looks
//! fuller than it is. Trace replay never removes, so the miss ratios are not
//! affected.

use serde::{Deserialize, Serialize};

use crate::list::{Index, List, Slab};
use crate::{Access, Capacity, ConfigError, KeyMap, Policy};

/// The most segments an SLRU may have (libCacheSim's `SLRU_MAX_N_SEG`).
pub const SEGMENTS_MAX: usize = 16;

/// SLRU's configuration.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SlruConfig {
    /// Relative sizes of the segments, lowest (probationary) first; 1 to
    /// [`SEGMENTS_MAX`] positive weights. Default `[1, 1]`: the classic
    /// two-segment SLRU with halves. `[1, 1, 1, 1]` is S4LRU, libCacheSim's
    /// `slru` default.
    pub segment_weights: Vec<u32>,
}

impl Default for SlruConfig {
    fn default() -> Self {
        Self {
            segment_weights: vec![1, 1],
        }
    }
}

impl SlruConfig {
    /// S4LRU: four equal segments, as libCacheSim's `SLRU` default.
    pub fn s4lru() -> Self {
        Self {
            segment_weights: vec![1; 4],
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    key: u64,
    charge: u64,
    segment: u8,
}

#[derive(Clone, Copy, Debug)]
struct Segment {
    /// Front = most recently used.
    queue: List,
    used: u64,
    limit: u64,
}

/// Segmented LRU.
#[derive(Debug)]
pub struct Slru {
    name: &'static str,
    capacity: Capacity,
    used: u64,
    map: KeyMap<Index>,
    slab: Slab<Entry>,
    segments: Vec<Segment>,
    /// Victims of hits seen through `lookup`, reported by the next `admit`.
    deferred: Vec<u64>,
}

impl Slru {
    /// An empty SLRU cache. Fails if a weight is zero, there are too many or
    /// no segments, or a segment would get no capacity.
    pub fn new(capacity: Capacity, config: &SlruConfig) -> Result<Self, ConfigError> {
        let weights = &config.segment_weights;
        if weights.is_empty() || weights.len() > SEGMENTS_MAX || weights.contains(&0) {
            return Err(ConfigError::OutOfRange {
                policy: "slru",
                parameter: "segment_weights",
                value: format!("{weights:?}"),
                expected: "1 to 16 positive weights",
            });
        }
        let limit = capacity.limit();
        let n = weights.len() as u64;
        let sum: u64 = weights.iter().map(|&w| u64::from(w)).sum();
        let equal = weights.iter().all(|&w| w == weights[0]);
        let segments: Vec<Segment> = weights
            .iter()
            .map(|&w| Segment {
                queue: List::new(),
                used: 0,
                // As libCacheSim: integer division for equal segments, a
                // truncated floating-point share otherwise.
                limit: if equal {
                    limit / n
                } else {
                    (f64::from(w) / sum as f64 * limit as f64) as u64
                },
            })
            .collect();
        if segments.iter().any(|s| s.limit == 0) {
            return Err(ConfigError::CapacityTooSmall {
                policy: "slru",
                capacity: limit,
                reason: "every segment needs a share of at least 1",
            });
        }
        let name = if equal && n == 4 { "s4lru" } else { "slru" };
        Ok(Self {
            name,
            capacity,
            used: 0,
            map: KeyMap::default(),
            slab: Slab::new(),
            segments,
            deferred: Vec::new(),
        })
    }

    /// Evicts the LRU unit of the lowest non-empty segment.
    fn evict_one(&mut self, victims: &mut Vec<u64>) -> bool {
        let Some(segment) = self.segments.iter_mut().find(|s| !s.queue.is_empty()) else {
            return false;
        };
        let Some(index) = self.slab.pop_back(&mut segment.queue) else {
            return false;
        };
        let victim = *self.slab.remove(index);
        segment.used -= victim.charge;
        self.map.remove(&victim.key);
        self.used -= victim.charge;
        victims.push(victim.key);
        true
    }

    /// Moves a linked node from its segment to the MRU end of `to`.
    fn move_to_segment(&mut self, index: Index, to: usize) {
        let entry = *self.slab.get(index);
        let from = &mut self.segments[entry.segment as usize];
        self.slab.unlink(&mut from.queue, index);
        from.used -= entry.charge;
        let to_segment = &mut self.segments[to];
        self.slab.push_front(&mut to_segment.queue, index);
        to_segment.used += entry.charge;
        self.slab.get_mut(index).segment = to as u8;
    }

    /// While segment `id` is over its size, demote its LRU unit one segment
    /// down (libCacheSim's `SLRU_cool`), cascading; segment 0 evicts.
    fn cool(&mut self, id: usize, victims: &mut Vec<u64>) {
        while self.segments[id].used > self.segments[id].limit {
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

    /// The hit path; victims of a demotion cascade go to `victims`.
    fn hit(&mut self, access: &Access, victims: &mut Vec<u64>) -> bool {
        let Some(&index) = self.map.get(&access.key) else {
            return false;
        };
        let segment = self.slab.get(index).segment as usize;
        let top = self.segments.len() - 1;
        if segment == top {
            self.slab
                .move_to_front(&mut self.segments[top].queue, index);
        } else {
            self.move_to_segment(index, segment + 1);
            self.cool(segment + 1, victims);
        }
        true
    }
}

impl Policy for Slru {
    fn name(&self) -> &'static str {
        self.name
    }

    fn lookup(&mut self, access: &Access) -> bool {
        let mut deferred = std::mem::take(&mut self.deferred);
        let hit = self.hit(access, &mut deferred);
        self.deferred = deferred;
        hit
    }

    fn access(&mut self, access: &Access, victims: &mut Vec<u64>) -> bool {
        if self.hit(access, victims) {
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
        // Report hit-time victims held back by `lookup`; one that is being
        // admitted again is simply resident again.
        victims.extend(self.deferred.drain(..).filter(|&k| k != access.key));
        let charge = self.capacity.charge(access.size);
        if charge > self.capacity.limit() || charge > self.segments[0].limit {
            return false;
        }
        while self.used + charge > self.capacity.limit() {
            if !self.evict_one(victims) {
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
            charge,
            segment: to as u8,
        });
        let segment = &mut self.segments[to];
        self.slab.push_front(&mut segment.queue, index);
        segment.used += charge;
        self.map.insert(access.key, index);
        self.used += charge;
        true
    }

    fn remove(&mut self, key: u64) -> bool {
        let Some(index) = self.map.remove(&key) else {
            return false;
        };
        let entry = *self.slab.get(index);
        let segment = &mut self.segments[entry.segment as usize];
        self.slab.unlink(&mut segment.queue, index);
        segment.used -= entry.charge;
        self.slab.remove(index);
        self.used -= entry.charge;
        true
    }

    fn contains(&self, key: u64) -> bool {
        self.map.contains_key(&key)
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

    /// Naive SLRU: one vector per segment, MRU first, transcribing
    /// libCacheSim's `SLRU.c` step by step.
    struct NaiveSlru {
        capacity: Capacity,
        limits: Vec<u64>,
        /// (key, charge), most recent first.
        segments: Vec<Vec<(u64, u64)>>,
    }

    impl NaiveSlru {
        fn new(capacity: Capacity, limits: Vec<u64>) -> Self {
            let segments = vec![vec![]; limits.len()];
            Self {
                capacity,
                limits,
                segments,
            }
        }

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
            while self.seg_used(id - 1) > self.limits[id - 1] {
                self.cool(id - 1, victims);
            }
        }
    }

    impl Reference for NaiveSlru {
        fn access(&mut self, access: &Access) -> (bool, Vec<u64>) {
            let mut victims = vec![];
            let top = self.segments.len() - 1;
            for id in 0..=top {
                if let Some(at) = self.segments[id].iter().position(|i| i.0 == access.key) {
                    let item = self.segments[id].remove(at);
                    let to = (id + 1).min(top);
                    self.segments[to].insert(0, item);
                    while self.seg_used(to) > self.limits[to] {
                        self.cool(to, &mut victims);
                    }
                    return (true, victims);
                }
            }
            let charge = self.capacity.charge(access.size);
            if charge > self.capacity.limit() || charge > self.limits[0] {
                return (false, victims);
            }
            while self.total() + charge > self.capacity.limit() {
                self.evict(&mut victims);
            }
            let to = (0..=top)
                .find(|&i| self.seg_used(i) + charge <= self.limits[i])
                .unwrap_or(0);
            self.segments[to].insert(0, (access.key, charge));
            (false, victims)
        }
    }

    fn slru(capacity: Capacity, weights: &[u32]) -> Slru {
        Slru::new(
            capacity,
            &SlruConfig {
                segment_weights: weights.to_vec(),
            },
        )
        .unwrap()
    }

    #[test]
    fn s4lru_sizes_segments_by_integer_division() {
        let s = Slru::new(Capacity::Objects(9), &SlruConfig::s4lru()).unwrap();
        let limits: Vec<u64> = s.segments.iter().map(|s| s.limit).collect();
        assert_eq!(limits, [2, 2, 2, 2]);
        assert_eq!(s.name(), "s4lru");
        let s = slru(Capacity::Objects(10), &[1, 2]);
        let limits: Vec<u64> = s.segments.iter().map(|s| s.limit).collect();
        assert_eq!(limits, [3, 6]);
    }

    #[test]
    fn fills_upward_then_demotes_on_promotion() {
        // Two segments of 2.
        let mut s = slru(Capacity::Objects(4), &[1, 1]);
        let mut victims = vec![];
        for access in testing::keys(&[1, 2, 3, 4]) {
            s.access(&access, &mut victims);
        }
        // 1, 2 filled segment 0; 3, 4 found it full and went to segment 1.
        let seg = |s: &Slru, k: u64| s.slab.get(s.map[&k]).segment;
        assert_eq!([1, 2, 3, 4].map(|k| seg(&s, k)), [0, 0, 1, 1]);
        // A hit on 1 promotes it; segment 1's LRU (3) is demoted to 0.
        for access in testing::keys(&[1]) {
            s.access(&access, &mut victims);
        }
        assert_eq!([1, 2, 3, 4].map(|k| seg(&s, k)), [1, 0, 0, 1]);
        // A miss evicts segment 0's LRU: 2.
        for access in testing::keys(&[5]) {
            s.access(&access, &mut victims);
        }
        assert_eq!(victims, [2]);
    }

    #[test]
    fn a_hit_can_evict_when_segment_0_holds_the_remainder() {
        // Capacity 5, two segments of 2: segment 0 may hold 3.
        let mut s = slru(Capacity::Objects(5), &[1, 1]);
        let mut victims = vec![];
        for access in testing::keys(&[1, 2, 3, 4, 5]) {
            s.access(&access, &mut victims);
        }
        assert!(victims.is_empty());
        // 5 went to segment 0, over its share (3 > 2). A hit on 1 promotes it
        // and demotes 3 from the full segment 1; segment 0 again holds 3 > 2,
        // so its LRU unit (2) is evicted.
        let hits: Vec<bool> = testing::keys(&[1]).iter().map(|a| s.lookup(a)).collect();
        assert_eq!(hits, [true]);
        assert!(!s.contains(2), "evicted by the hit");
        assert_eq!(s.len(), 4);
        // `lookup` could not report it: the next `admit` does.
        s.admit(&testing::keys(&[6])[0], &mut victims);
        assert_eq!(victims, [2]);
    }

    #[test]
    fn rejects_segments_without_capacity() {
        assert!(Slru::new(Capacity::Objects(3), &SlruConfig::s4lru()).is_err());
        assert!(
            Slru::new(
                Capacity::Objects(8),
                &SlruConfig {
                    segment_weights: vec![]
                }
            )
            .is_err()
        );
        assert!(
            Slru::new(
                Capacity::Objects(8),
                &SlruConfig {
                    segment_weights: vec![1, 0]
                }
            )
            .is_err()
        );
    }

    #[test]
    fn slru_and_s4lru_are_registered() {
        let build = |name| {
            crate::PolicyConfig::default_for(name)
                .unwrap()
                .build(Capacity::Objects(8))
                .unwrap()
        };
        assert_eq!(build("slru").name(), "slru");
        assert_eq!(build("s4lru").name(), "s4lru");
    }

    proptest! {
        /// `lookup` + `admit` (hit victims deferred) and `access` (reported at
        /// once) keep the same resident set at every step, and the split run
        /// reports no victim the other does not.
        #[test]
        fn deferred_hit_victims_change_only_the_reporting(
            trace in testing::trace_strategy(40, 400, 5),
            cap in 4u64..30,
            bytes: bool,
        ) {
            let capacity = if bytes { Capacity::Bytes(cap) } else { Capacity::Objects(cap) };
            let mut at_once = slru(capacity, &[1, 1, 1]);
            let mut split = slru(capacity, &[1, 1, 1]);
            let (mut victims_at_once, mut victims_split) = (vec![], vec![]);
            for access in &trace {
                at_once.access(access, &mut victims_at_once);
                if !split.lookup(access) {
                    split.admit(access, &mut victims_split);
                }
                for key in 0..40 {
                    prop_assert_eq!(at_once.contains(key), split.contains(key));
                }
            }
            victims_split.append(&mut split.deferred);
            // The split run may omit a deferred victim that was admitted
            // again before the next `admit` reported it; nothing else.
            for victim in victims_split {
                let at = victims_at_once.iter().position(|&v| v == victim);
                prop_assert!(at.is_some(), "{} reported but not a victim", victim);
                victims_at_once.swap_remove(at.unwrap());
            }
        }

        #[test]
        fn matches_naive_model(
            trace in testing::trace_strategy(40, 400, 5),
            cap in 4u64..30,
            bytes: bool,
            weights in prop::collection::vec(1u32..4, 1..5),
        ) {
            let capacity = if bytes { Capacity::Bytes(cap) } else { Capacity::Objects(cap) };
            let config = SlruConfig { segment_weights: weights };
            let Ok(mut s) = Slru::new(capacity, &config) else {
                return Ok(());
            };
            let limits = s.segments.iter().map(|s| s.limit).collect();
            let mut naive = NaiveSlru::new(capacity, limits);
            testing::assert_matches_reference(&mut s, &mut naive, &trace);
            testing::replay_checked(&mut Slru::new(capacity, &config).unwrap(), &trace);
        }
    }
}
