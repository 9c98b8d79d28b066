//! LP-ARC: ARC with lazy promotion: T1 and T2 are CLOCKs instead of LRU
//! lists, so a hit in T2 sets a reference bit instead of moving the unit.
//!
//! Source: Juncheng Yang, Ziyue Qiu, Yazhuo Zhang, Yao Yue, K. V. Rashmi,
//! "FIFO can be Better than LRU: the Power of Lazy Promotion and Quick
//! Demotion", HotOS 2023 (lazy promotion applied to ARC; Megiddo & Modha,
//! FAST 2003, for ARC itself). This module matches libCacheSim commit
//! aa0fc40's `cache/eviction/fifo/LP_ARC.c` (`cachesim ... lp-arc`, named
//! `LP-ARC-Clock`) step for step. As [`arc`](crate::arc), except:
//!
//! - **hit in T2**: set the unit's reference bit (1-bit CLOCK); nothing
//!   moves. A hit in T1 still moves the unit to T2's head, bit clear.
//! - **evicting from T2** (REPLACE): CLOCK: T2's tail with the bit set is
//!   cleared and moved to the head, the first with the bit clear goes into
//!   B2. (T1's bits are never set, so T1 stays a FIFO.)
//! - **B1 and B2** are each capped at the capacity on their own (libCacheSim
//!   builds them as LRU caches of the full size): recording a ghost first
//!   forgets that ghost list's oldest entries while it would exceed the
//!   capacity.
//! - **case IV** drops B2's oldest ghosts *while*
//!   `|T1| + |B1| + |T2| + |B2| >= 2c` (ARC drops one).
//!
//! Otherwise ARC's: `p` adapts on ghost hits with the sizes before the ghost
//! is dropped, a ghost hit enters T2, a complete miss T1; REPLACE evicts T1's
//! tail into B1 if `|T1| > 0 and (|T1| > p or (|T1| = p and the hit was in
//! B2))` or T2 is empty.
//!
//! Differences: a unit larger than the whole cache is refused (libCacheSim's
//! `LP_ARC` has no admission check and would evict everything and then fail).
//! [`Policy::remove`] of a key that only has a ghost forgets the ghost and
//! returns `false`. A unit that moves from T1 to T2 keeps the size it was
//! admitted with (libCacheSim re-inserts it with the request's size; on the
//! sample trace sizes do not change).

use serde::{Deserialize, Serialize};

use crate::index::{KeyIndex, Keyed};
use crate::list::{Index, List, Slab};
use crate::{Access, Ahead, Capacity, ConfigError, Policy};

/// LP-ARC has no knobs: it tunes itself, as ARC.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LpArcConfig {}

/// Which of the four lists a node is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Which {
    T1,
    T2,
    B1,
    B2,
}

/// A ghost hit awaiting its `admit`.
#[derive(Clone, Copy, Debug)]
struct GhostHit {
    key: u64,
    index: Index,
    in_b2: bool,
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    key: u64,
    charge: u32,
    which: Which,
    /// T2's reference bit.
    referenced: bool,
}

impl Keyed for Entry {
    fn key(&self) -> u64 {
        self.key
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct Sized {
    /// Front = newest (inserted, passed by the hand, or evicted).
    list: List,
    used: u64,
}

/// ARC with CLOCK lists.
#[derive(Debug)]
pub struct LpArc {
    capacity: Capacity,
    /// Every key in any of the four lists.
    map: KeyIndex,
    slab: Slab<Entry>,
    t1: Sized,
    t2: Sized,
    b1: Sized,
    b2: Sized,
    /// Target size of T1, in the capacity's unit.
    p: f64,
    /// The ghost the last `lookup` hit: unlinked from B1/B2 but kept in the
    /// slab and the map for `admit`. Released if `admit` does not follow.
    ghost_hit: Option<GhostHit>,
}

impl LpArc {
    /// An empty LP-ARC cache.
    pub fn new(capacity: Capacity, _config: &LpArcConfig) -> Result<Self, ConfigError> {
        Ok(Self {
            capacity,
            map: KeyIndex::default(),
            slab: Slab::new(),
            t1: Sized::default(),
            t2: Sized::default(),
            b1: Sized::default(),
            b2: Sized::default(),
            p: 0.0,
            ghost_hit: None,
        })
    }

    fn list_mut(&mut self, which: Which) -> &mut Sized {
        match which {
            Which::T1 => &mut self.t1,
            Which::T2 => &mut self.t2,
            Which::B1 => &mut self.b1,
            Which::B2 => &mut self.b2,
        }
    }

    /// Unlinks node `index` from its list, keeping the node.
    fn unlink(&mut self, index: Index) -> Entry {
        let entry = *self.slab.get(index);
        let sized = self.list_mut(entry.which);
        let mut list = sized.list;
        sized.used -= u64::from(entry.charge);
        self.slab.unlink(&mut list, index);
        self.list_mut(entry.which).list = list;
        entry
    }

    /// Links an unlinked node at the front of `which`, bit clear.
    fn link_front(&mut self, index: Index, which: Which) {
        let charge = {
            let entry = self.slab.get_mut(index);
            entry.which = which;
            entry.referenced = false;
            u64::from(entry.charge)
        };
        let sized = self.list_mut(which);
        let mut list = sized.list;
        sized.used += charge;
        self.slab.push_front(&mut list, index);
        self.list_mut(which).list = list;
    }

    /// Unlinks and frees node `index` and its key.
    fn drop_node(&mut self, index: Index) -> Entry {
        let entry = self.unlink(index);
        self.map.remove(entry.key, &self.slab);
        self.slab.remove(index);
        entry
    }

    /// Frees the node of a ghost hit that no `admit` claimed.
    fn release_ghost_hit(&mut self) {
        if let Some(ghost) = self.ghost_hit.take() {
            self.map.remove(ghost.key, &self.slab);
            self.slab.remove(ghost.index);
        }
    }

    /// Records the unlinked node `index` in ghost list `ghost` (an LRU cache
    /// of the full capacity in libCacheSim), or frees it if it cannot fit.
    fn record_ghost(&mut self, index: Index, ghost: Which) {
        let charge = u64::from(self.slab.get(index).charge);
        let c = self.capacity.limit();
        if charge > c {
            let key = self.slab.get(index).key;
            self.map.remove(key, &self.slab);
            self.slab.remove(index);
            return;
        }
        while self.list_mut(ghost).used + charge > c {
            let Some(oldest) = self.list_mut(ghost).list.back() else {
                break;
            };
            self.drop_node(oldest);
        }
        self.link_front(index, ghost);
    }

    /// The paper's REPLACE, T1 a FIFO and T2 a CLOCK.
    fn replace(&mut self, hit_in_b2: bool, victims: &mut Vec<u64>) -> bool {
        let t1 = self.t1.used as f64;
        // Exact equality on purpose: libCacheSim compares an integer size to
        // the double `p`.
        #[allow(clippy::float_cmp)]
        let from_t1 =
            (self.t1.used > 0 && (t1 > self.p || (t1 == self.p && hit_in_b2))) || self.t2.used == 0;
        let (index, ghost) = if from_t1 {
            let Some(index) = self.t1.list.back() else {
                return false;
            };
            (index, Which::B1)
        } else {
            // The hand: referenced units get a second chance.
            loop {
                let Some(index) = self.t2.list.back() else {
                    return false;
                };
                let entry = self.slab.get_mut(index);
                if !entry.referenced {
                    break (index, Which::B2);
                }
                entry.referenced = false;
                self.slab.move_to_front(&mut self.t2.list, index);
            }
        };
        let entry = self.unlink(index);
        victims.push(entry.key);
        self.record_ghost(index, ghost);
        true
    }

    /// The paper's case IV: room for a unit seen in no list.
    fn evict_on_complete_miss(&mut self, charge: u64, victims: &mut Vec<u64>) -> bool {
        let c = self.capacity.limit();
        if self.t1.used + self.b1.used + charge > c {
            if let Some(ghost) = self.b1.list.back() {
                self.drop_node(ghost);
                self.replace(false, victims)
            } else {
                let Some(index) = self.t1.list.back() else {
                    return false;
                };
                victims.push(self.drop_node(index).key);
                true
            }
        } else {
            while self.t1.used + self.b1.used + self.t2.used + self.b2.used >= 2 * c {
                let Some(ghost) = self.b2.list.back() else {
                    break;
                };
                self.drop_node(ghost);
            }
            self.replace(false, victims)
        }
    }
}

impl Policy for LpArc {
    fn name(&self) -> &'static str {
        "lp-arc"
    }

    fn prefetch(&self, key: u64, ahead: Ahead) {
        self.map.prefetch_stage(key, &self.slab, ahead, false);
    }

    fn lookup(&mut self, access: &Access) -> bool {
        self.release_ghost_hit();
        let Some(index) = self.map.get(access.key, &self.slab) else {
            return false;
        };
        match self.slab.get(index).which {
            Which::T1 => {
                self.unlink(index);
                self.link_front(index, Which::T2);
                true
            }
            Which::T2 => {
                self.slab.get_mut(index).referenced = true;
                true
            }
            Which::B1 => {
                let delta = (self.b2.used as f64 / self.b1.used as f64).max(1.0);
                self.p = (self.p + delta).min(self.capacity.limit() as f64);
                self.unlink(index);
                self.ghost_hit = Some(GhostHit {
                    key: access.key,
                    index,
                    in_b2: false,
                });
                false
            }
            Which::B2 => {
                let delta = (self.b1.used as f64 / self.b2.used as f64).max(1.0);
                self.p = (self.p - delta).max(0.0);
                self.unlink(index);
                self.ghost_hit = Some(GhostHit {
                    key: access.key,
                    index,
                    in_b2: true,
                });
                false
            }
        }
    }

    fn admit(&mut self, access: &Access, victims: &mut Vec<u64>) -> bool {
        if self.ghost_hit.is_some_and(|g| g.key != access.key) {
            self.release_ghost_hit();
        }
        let charge = self.capacity.charge(access.size);
        if charge > self.capacity.limit() {
            self.release_ghost_hit();
            return false;
        }
        let ghost_hit = self.ghost_hit.take();
        while self.t1.used + self.t2.used + charge > self.capacity.limit() {
            let made_room = match ghost_hit {
                Some(ghost) => self.replace(ghost.in_b2, victims),
                None => self.evict_on_complete_miss(charge, victims),
            };
            if !made_room {
                break;
            }
        }
        if let Some(ghost) = ghost_hit {
            // The ghost's node and map entry become the resident unit's.
            self.slab.get_mut(ghost.index).charge = charge as u32; // a size or 1
            self.link_front(ghost.index, Which::T2);
        } else {
            let index = self.slab.insert(Entry {
                key: access.key,
                charge: charge as u32,
                which: Which::T1,
                referenced: false,
            });
            self.link_front(index, Which::T1);
            self.map.insert(access.key, index, &self.slab);
        }
        true
    }

    /// Removes a resident key; a ghost of `key` is forgotten too (returning
    /// `false`, as it was not resident).
    fn remove(&mut self, key: u64) -> bool {
        if self.ghost_hit.is_some_and(|g| g.key == key) {
            self.release_ghost_hit();
            return false;
        }
        let Some(index) = self.map.get(key, &self.slab) else {
            return false;
        };
        matches!(self.drop_node(index).which, Which::T1 | Which::T2)
    }

    fn contains(&self, key: u64) -> bool {
        self.map
            .get(key, &self.slab)
            .is_some_and(|index| matches!(self.slab.get(index).which, Which::T1 | Which::T2))
    }

    fn len(&self) -> usize {
        self.t1.list.len() + self.t2.list.len()
    }

    fn used(&self) -> u64 {
        self.t1.used + self.t2.used
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

    /// Naive LP-ARC: four vectors of `(key, charge, referenced)`, newest
    /// first, transcribing `LP_ARC.c` with `Clock.c` and `LRU.c`.
    struct NaiveLpArc {
        c: u64,
        capacity: Capacity,
        p: f64,
        lists: [Vec<(u64, u64, bool)>; 4],
    }

    const T1: usize = 0;
    const T2: usize = 1;
    const B1: usize = 2;
    const B2: usize = 3;

    impl NaiveLpArc {
        fn size(&self, list: usize) -> u64 {
            self.lists[list].iter().map(|i| i.1).sum()
        }

        fn ghost_get(&mut self, ghost: usize, item: (u64, u64, bool)) {
            if item.1 > self.c {
                return;
            }
            while self.size(ghost) + item.1 > self.c {
                self.lists[ghost].pop();
            }
            self.lists[ghost].insert(0, (item.0, item.1, false));
        }

        fn replace(&mut self, hit_in_b2: bool, victims: &mut Vec<u64>) {
            let t1 = self.size(T1);
            #[allow(clippy::float_cmp)]
            let from_t1 = (t1 > 0 && (t1 as f64 > self.p || (t1 as f64 == self.p && hit_in_b2)))
                || self.size(T2) == 0;
            if from_t1 {
                let item = self.lists[T1].pop().unwrap();
                victims.push(item.0);
                self.ghost_get(B1, item);
            } else {
                loop {
                    let item = self.lists[T2].pop().unwrap();
                    if item.2 {
                        self.lists[T2].insert(0, (item.0, item.1, false));
                    } else {
                        victims.push(item.0);
                        self.ghost_get(B2, item);
                        break;
                    }
                }
            }
        }
    }

    impl Reference for NaiveLpArc {
        fn access(&mut self, access: &Access) -> (bool, Vec<u64>) {
            let found = (0..4).find_map(|l| {
                self.lists[l]
                    .iter()
                    .position(|i| i.0 == access.key)
                    .map(|at| (l, at))
            });
            let mut ghost = None;
            match found {
                Some((T1, at)) => {
                    let item = self.lists[T1].remove(at);
                    self.lists[T2].insert(0, (item.0, item.1, false));
                    return (true, vec![]);
                }
                Some((T2, at)) => {
                    self.lists[T2][at].2 = true;
                    return (true, vec![]);
                }
                Some((B1, at)) => {
                    let delta = (self.size(B2) as f64 / self.size(B1) as f64).max(1.0);
                    self.p = (self.p + delta).min(self.c as f64);
                    self.lists[B1].remove(at);
                    ghost = Some(false);
                }
                Some((_, at)) => {
                    let delta = (self.size(B1) as f64 / self.size(B2) as f64).max(1.0);
                    self.p = (self.p - delta).max(0.0);
                    self.lists[B2].remove(at);
                    ghost = Some(true);
                }
                None => {}
            }
            let charge = self.capacity.charge(access.size);
            let mut victims = vec![];
            if charge > self.c {
                return (false, victims);
            }
            while self.size(T1) + self.size(T2) + charge > self.c {
                if let Some(hit_in_b2) = ghost {
                    self.replace(hit_in_b2, &mut victims);
                } else if self.size(T1) + self.size(B1) + charge > self.c {
                    if self.lists[B1].pop().is_some() {
                        self.replace(false, &mut victims);
                    } else {
                        victims.push(self.lists[T1].pop().unwrap().0);
                    }
                } else {
                    while self.size(T1) + self.size(B1) + self.size(T2) + self.size(B2)
                        >= 2 * self.c
                    {
                        self.lists[B2].pop();
                    }
                    self.replace(false, &mut victims);
                }
            }
            let to = if ghost.is_some() { T2 } else { T1 };
            self.lists[to].insert(0, (access.key, charge, false));
            (false, victims)
        }
    }

    fn lparc(capacity: Capacity) -> LpArc {
        LpArc::new(capacity, &LpArcConfig::default()).unwrap()
    }

    #[test]
    fn a_hit_in_t2_sets_a_bit_and_the_hand_gives_a_second_chance() {
        let mut cache = lparc(Capacity::Objects(4));
        let mut victims = vec![];
        // 1, 2, 3 are hit once each: all in T2, oldest 1. 4 fills T1.
        for access in testing::keys(&[1, 2, 3, 1, 2, 3, 4, 1]) {
            cache.access(&access, &mut victims);
        }
        assert!(victims.is_empty());
        // 1 was hit in T2: its bit is set, it stays T2's tail.
        let which = |c: &LpArc, k| c.slab.get(c.map.get(k, &c.slab).unwrap()).which;
        assert_eq!(which(&cache, 1), Which::T2);
        assert_eq!(cache.slab.get(cache.t2.list.back().unwrap()).key, 1);
        // p = 0 and |T1| = 1 > p: the first miss takes T1's 4 into B1.
        cache.access(&testing::keys(&[5])[0], &mut victims);
        assert_eq!(victims, [4]);
        // 4 again: a B1 hit, p = 1; |T1| = 1 (5) is not > 1, so T2 gives up
        // a unit: the hand passes 1 (bit set) and takes 2.
        victims.clear();
        cache.access(&testing::keys(&[4])[0], &mut victims);
        assert_eq!(victims, [2]);
        assert!(cache.contains(1));
        assert_eq!(which(&cache, 2), Which::B2);
    }

    proptest! {
        #[test]
        fn matches_naive_model(trace in testing::trace_strategy(40, 400, 5), cap in 1u64..20, bytes: bool) {
            let capacity = if bytes { Capacity::Bytes(cap) } else { Capacity::Objects(cap) };
            let mut naive = NaiveLpArc { c: capacity.limit(), capacity, p: 0.0, lists: Default::default() };
            testing::assert_matches_reference(&mut lparc(capacity), &mut naive, &trace);
            testing::replay_checked(&mut lparc(capacity), &trace);
        }
    }
}
