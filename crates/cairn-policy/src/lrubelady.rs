//! LRU-Belady: LRU whose eviction passes over units due back soon.
//!
//! libCacheSim's own oracle experiment (`cache/eviction/belady/LRU_Belady.c`
//! in commit aa0fc40, no paper): how much of Belady's gain (Belady, IBM
//! Systems Journal 5(2), 1966) an LRU keeps if, at eviction time, it knows
//! which units come back soon. It reads the trace's next-access times
//! ([`Access::next`]), so like [`opt`](crate::opt) it is a simulator bound.
//!
//! - Every request counts; a miss counts as a miss once the request is
//!   done. A hit moves the unit to the head and records its next access;
//!   a miss inserts at the head.
//! - To make room, look at the tail. If the unit is *due back*, move it to
//!   the head and look again; otherwise evict it. Due back means its next
//!   access is at most `capacity / miss ratio` requests away (`Horizon`:
//!   the requests a unit takes to cross the cache at the current miss
//!   ratio), with the miss ratio taken before the current miss.
//! - When every resident is due back, libCacheSim turns the queue forever
//!   (its `cachesim` never returns in byte mode on the sample trace, where
//!   the horizon exceeds the trace). After one full turn without an
//!   eviction we evict the tail, LRU's own victim, and keep evicting from
//!   the tail until the unit fits.
//!
//! Units whose next access is unknown ([`NEVER`]) are never due: without
//! next-access times this is plain LRU. `fifo-belady`
//! ([`fifobelady`](crate::fifobelady)) is this body without the move on a
//! hit.
//!
//! No knobs.

use serde::{Deserialize, Serialize};

use crate::index::{KeyIndex, Keyed};
use crate::list::{List, Slab};
use crate::{Access, Ahead, Capacity, ConfigError, NEVER, Policy};

/// LRU-Belady has no knobs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LruBeladyConfig {}

/// libCacheSim's `should_insert` in `cache/eviction/belady/`: the requests
/// and misses seen, and from them how far ahead a unit's next access may be
/// for it to count as due back.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Horizon {
    /// Requests seen, the current one included (libCacheSim's `n_req`).
    requests: u64,
    /// Misses, the current one included once `lookup` missed.
    misses: u64,
}

impl Horizon {
    /// Counts a request, and a miss if it missed.
    #[inline]
    pub(crate) fn count(&mut self, hit: bool) {
        self.requests += 1;
        self.misses += u64::from(!hit);
    }

    /// The horizon during the current miss's admission, in requests:
    /// `limit / (misses before this one / requests)`, truncated to an
    /// integer as C's `(int64_t)` does on x86-64, where an infinite or NaN
    /// quotient (no miss before this one) becomes `i64::MIN`: nothing is due.
    #[inline]
    pub(crate) fn threshold(&self, limit: u64) -> i64 {
        let misses_before = self.misses.saturating_sub(1);
        let miss_ratio = misses_before as f64 / self.requests as f64;
        c_f64_to_i64(limit as f64 / miss_ratio)
    }

    /// Whether a unit whose next access is at `next` is due back within
    /// `threshold` requests of `now`.
    #[inline]
    pub(crate) fn due(next: u64, now: u64, threshold: i64) -> bool {
        next != NEVER && (next as i64).wrapping_sub(now as i64) <= threshold
    }
}

/// C's `(int64_t)` of a double on x86-64 (`cvttsd2si`): truncation, and
/// `i64::MIN` for NaN and for values out of range (undefined in C; this is
/// what the instruction gives). Rust's `as` saturates instead.
#[inline]
pub(crate) fn c_f64_to_i64(x: f64) -> i64 {
    const TWO_63: f64 = 9_223_372_036_854_775_808.0;
    if (-TWO_63..TWO_63).contains(&x) {
        x as i64
    } else {
        i64::MIN
    }
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    key: u64,
    charge: u64,
    /// Logical time of the unit's next access, as of its last access.
    next: u64,
}

impl Keyed for Entry {
    fn key(&self) -> u64 {
        self.key
    }
}

/// LRU (or FIFO) that keeps units due back soon.
#[derive(Debug)]
pub struct LruBelady {
    name: &'static str,
    /// False turns it into `fifo-belady`: a hit leaves the unit in place.
    promote_on_hit: bool,
    capacity: Capacity,
    used: u64,
    map: KeyIndex,
    slab: Slab<Entry>,
    /// Front = newest (or most recently used), back = next to look at.
    queue: List,
    horizon: Horizon,
}

impl LruBelady {
    /// An empty LRU-Belady cache.
    pub fn new(capacity: Capacity, _config: &LruBeladyConfig) -> Result<Self, ConfigError> {
        Ok(Self::with_promotion("lru-belady", capacity, true))
    }

    /// The shared body of `lru-belady` and `fifo-belady`.
    pub(crate) fn with_promotion(
        name: &'static str,
        capacity: Capacity,
        promote_on_hit: bool,
    ) -> Self {
        Self {
            name,
            promote_on_hit,
            capacity,
            used: 0,
            map: KeyIndex::default(),
            slab: Slab::new(),
            queue: List::new(),
            horizon: Horizon::default(),
        }
    }
}

impl Policy for LruBelady {
    fn name(&self) -> &'static str {
        self.name
    }

    fn prefetch(&self, key: u64, ahead: Ahead) {
        self.map
            .prefetch_stage(key, &self.slab, ahead, self.promote_on_hit);
    }

    fn lookup(&mut self, access: &Access) -> bool {
        let found = self.map.get(access.key, &self.slab);
        self.horizon.count(found.is_some());
        let Some(index) = found else {
            return false;
        };
        self.slab.get_mut(index).next = access.next;
        if self.promote_on_hit {
            self.slab.move_to_front(&mut self.queue, index);
        }
        true
    }

    fn admit(&mut self, access: &Access, victims: &mut Vec<u64>) -> bool {
        let charge = self.capacity.charge(access.size);
        if charge > self.capacity.limit() {
            return false;
        }
        let threshold = self.horizon.threshold(self.capacity.limit());
        // Units moved to the head since the last eviction; at a full turn
        // every resident is due back and libCacheSim would turn forever.
        let mut turned = 0;
        let mut all_due = false;
        while self.used + charge > self.capacity.limit() {
            let Some(back) = self.queue.back() else {
                break;
            };
            let entry = *self.slab.get(back);
            if !all_due && Horizon::due(entry.next, access.time, threshold) {
                if turned < self.queue.len() {
                    self.slab.move_to_front(&mut self.queue, back);
                    turned += 1;
                    continue;
                }
                all_due = true;
            }
            self.slab.unlink(&mut self.queue, back);
            self.map.remove(entry.key, &self.slab);
            self.slab.remove(back);
            self.used -= entry.charge;
            victims.push(entry.key);
            turned = 0;
        }
        let index = self.slab.insert(Entry {
            key: access.key,
            charge,
            next: access.next,
        });
        self.slab.push_front(&mut self.queue, index);
        self.map.insert(access.key, index, &self.slab);
        self.used += charge;
        true
    }

    fn remove(&mut self, key: u64) -> bool {
        let Some(index) = self.map.remove(key, &self.slab) else {
            return false;
        };
        self.slab.unlink(&mut self.queue, index);
        self.used -= self.slab.remove(index).charge;
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
pub(crate) mod tests {
    use super::*;
    use crate::testing::{self, Reference};
    use proptest::prelude::*;

    /// Naive LRU-/FIFO-Belady: `(key, charge, next)` oldest first, and
    /// libCacheSim's loop written out: rotate while due, with the turn
    /// counted to stop where libCacheSim never would.
    pub(crate) struct NaiveLruBelady {
        pub(crate) capacity: Capacity,
        pub(crate) promote_on_hit: bool,
        pub(crate) items: Vec<(u64, u64, u64)>,
        pub(crate) requests: u64,
        pub(crate) misses: u64,
    }

    impl NaiveLruBelady {
        pub(crate) fn new(capacity: Capacity, promote_on_hit: bool) -> Self {
            Self {
                capacity,
                promote_on_hit,
                items: vec![],
                requests: 0,
                misses: 0,
            }
        }
    }

    impl Reference for NaiveLruBelady {
        fn access(&mut self, access: &Access) -> (bool, Vec<u64>) {
            self.requests += 1;
            if let Some(at) = self.items.iter().position(|i| i.0 == access.key) {
                self.items[at].2 = access.next;
                if self.promote_on_hit {
                    let item = self.items.remove(at);
                    self.items.push(item);
                }
                return (true, vec![]);
            }
            let limit = self.capacity.limit();
            let charge = self.capacity.charge(access.size);
            let mut victims = vec![];
            if charge <= limit {
                let ratio = self.misses as f64 / self.requests as f64;
                let threshold = (limit as f64 / ratio) as i64;
                let threshold = if self.misses == 0 {
                    i64::MIN
                } else {
                    threshold
                };
                let due =
                    |next: u64| next != NEVER && next as i64 - access.time as i64 <= threshold;
                let mut turned = 0;
                while self.items.iter().map(|i| i.1).sum::<u64>() + charge > limit {
                    if due(self.items[0].2) && turned < self.items.len() {
                        let item = self.items.remove(0);
                        self.items.push(item);
                        turned += 1;
                    } else if due(self.items[0].2) {
                        // A full turn: everything is due; the oldest goes,
                        // and so on until the unit fits.
                        while self.items.iter().map(|i| i.1).sum::<u64>() + charge > limit {
                            victims.push(self.items.remove(0).0);
                        }
                    } else {
                        victims.push(self.items.remove(0).0);
                        turned = 0;
                    }
                }
                self.items.push((access.key, charge, access.next));
            }
            self.misses += 1;
            (false, victims)
        }
    }

    fn lru_belady(capacity: Capacity) -> LruBelady {
        LruBelady::new(capacity, &LruBeladyConfig::default()).unwrap()
    }

    #[test]
    fn the_horizon_is_capacity_over_the_miss_ratio_before_this_miss() {
        let mut horizon = Horizon::default();
        horizon.count(false);
        // The first miss: no miss before it, an infinite horizon, which C
        // truncates to i64::MIN on x86-64.
        assert_eq!(horizon.threshold(10), i64::MIN);
        horizon.count(true);
        horizon.count(false);
        horizon.count(false);
        // Four requests, two misses before this one: 10 / 0.5.
        assert_eq!(horizon.threshold(10), 20);
        assert!(Horizon::due(30, 10, 20) && !Horizon::due(31, 10, 20));
        assert!(!Horizon::due(NEVER, 0, i64::MAX - 1));
        assert_eq!(c_f64_to_i64(f64::NAN), i64::MIN);
        assert_eq!(c_f64_to_i64(9.3e18), i64::MIN);
        assert_eq!(c_f64_to_i64(-2.9), -2);
    }

    #[test]
    fn a_unit_due_back_is_passed_over() {
        // Capacity 2; keys 1, 2, 3, 1 at times 0 to 3. When 3 misses (time
        // 2) two of three requests missed before it: a horizon of 2 / (2/3)
        // = 3 requests. 1, the LRU tail, comes back at time 3, one request
        // away: it moves to the head, and 2 (never again) goes instead.
        let mut cache = lru_belady(Capacity::Objects(2));
        let mut victims = vec![];
        let hits: Vec<bool> = testing::keys(&[1, 2, 3, 1])
            .iter()
            .map(|a| cache.access(a, &mut victims))
            .collect();
        assert_eq!(hits, [false, false, false, true]);
        assert_eq!(victims, [2]);
    }

    #[test]
    fn when_every_resident_is_due_the_tail_goes_after_one_turn() {
        // 1 and 2 both come back (at times 3 and 4), within the horizon, when
        // 3 misses: libCacheSim would turn the queue forever; one full turn
        // later the LRU tail, 1, goes. 3 (never again) then goes for 1.
        let mut cache = lru_belady(Capacity::Objects(2));
        let mut victims = vec![];
        let hits: Vec<bool> = testing::keys(&[1, 2, 3, 1, 2])
            .iter()
            .map(|a| cache.access(a, &mut victims))
            .collect();
        assert_eq!(hits, [false, false, false, false, true]);
        assert_eq!(victims, [1, 3]);
        assert!(cache.contains(1) && cache.contains(2));
    }

    #[test]
    fn without_next_access_times_it_is_lru() {
        let keys = [1, 2, 3, 1, 4, 2, 5, 1, 3, 3, 6, 2];
        let mut lru =
            crate::lru::Lru::new(Capacity::Objects(3), &crate::lru::LruConfig::default()).unwrap();
        let mut belady = lru_belady(Capacity::Objects(3));
        let (mut a, mut b) = (vec![], vec![]);
        for access in &mut testing::keys(&keys) {
            access.next = NEVER;
            assert_eq!(lru.access(access, &mut a), belady.access(access, &mut b));
        }
        assert_eq!(a, b);
    }

    proptest! {
        #[test]
        fn matches_naive_model(trace in testing::trace_strategy(40, 400, 5), cap in 1u64..20, bytes: bool) {
            let capacity = if bytes { Capacity::Bytes(cap) } else { Capacity::Objects(cap) };
            let mut naive = NaiveLruBelady::new(capacity, true);
            testing::assert_matches_reference(&mut lru_belady(capacity), &mut naive, &trace);
            testing::replay_checked(&mut lru_belady(capacity), &trace);
        }
    }
}
