//! ARC: Adaptive Replacement Cache.
//!
//! Origin: N. Megiddo, D. S. Modha, "ARC: A Self-Tuning, Low Overhead
//! Replacement Cache", FAST 2003. T1 holds units seen once recently, T2 units
//! seen at least twice; B1 and B2 are their ghosts; the target size `p` of T1
//! moves towards whichever ghost list gets hits.
//!
//! Maps to libCacheSim's `ARC` (`cache/eviction/ARC.c`), which generalises
//! the paper's counts to sizes (bytes, or units in object-count mode):
//! - **hit in T1**: move to T2's MRU end. **Hit in T2**: move to its MRU end.
//! - **hit in B1** (a miss): `p = min(p + max(|B2| / |B1|, 1), c)`, with the
//!   sizes taken *before* the ghost is dropped and the ratio in floating
//!   point; the unit is then admitted at T2's MRU end. **Hit in B2**:
//!   symmetric, `p = max(p - max(|B1| / |B2|, 1), 0)`, also into T2.
//! - **making room after a ghost hit** (the paper's REPLACE), repeated until
//!   the unit fits: evict T1's LRU unit into B1 if
//!   `|T1| > 0 and (|T1| > p or (|T1| = p and the hit was in B2))`, or if T2
//!   is empty; otherwise T2's LRU unit into B2.
//! - **making room after a complete miss** (the paper's case IV), repeated
//!   until the unit fits: if `|T1| + |B1| + size > c`, then drop B1's LRU
//!   ghost and REPLACE if B1 is not empty, else evict T1's LRU unit with no
//!   ghost; otherwise, if `|T1| + |B1| + |T2| + |B2| >= 2c`, drop B2's LRU
//!   ghost (if any), then REPLACE (with "hit in B2" false).
//! - a complete miss enters T1's MRU end.
//!
//! As in libCacheSim, making room only happens when the cache is full, so the
//! paper's `|T1| + |T2| + |B1| + |B2| >= c` precondition for case IV(b) is
//! implied. In object-count mode this reproduces libCacheSim's miss ratios
//! exactly.
//!
//! [`Policy::remove`] of a key that only has a ghost forgets the ghost and
//! returns `false` (it was not resident). libCacheSim's `ARC_remove` returns
//! `true` there, and unlinks the ghost without deleting it from its hash
//! table. Trace replay never removes, so the miss ratios are not affected.

use serde::{Deserialize, Serialize};

use crate::index::{KeyIndex, Keyed};
use crate::list::{Index, List, Slab};
use crate::{Access, Ahead, Capacity, ConfigError, Policy};

/// ARC has no knobs: it tunes itself.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArcConfig {}

/// Which of ARC's four lists a node is in.
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
}

impl Keyed for Entry {
    fn key(&self) -> u64 {
        self.key
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct Sized {
    /// Front = most recently used (or most recently evicted, for ghosts).
    list: List,
    used: u64,
}

/// Adaptive Replacement Cache.
#[derive(Debug)]
pub struct Arc {
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
    /// slab and the map, so that `admit` can move it into T2 without a
    /// hash-table remove and insert. Released if `admit` does not follow.
    ghost_hit: Option<GhostHit>,
}

impl Arc {
    /// An empty ARC cache.
    pub fn new(capacity: Capacity, _config: &ArcConfig) -> Result<Self, ConfigError> {
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

    /// Links an unlinked node at the front of `which`.
    fn link_front(&mut self, index: Index, which: Which) {
        let charge = {
            let entry = self.slab.get_mut(index);
            entry.which = which;
            u64::from(entry.charge)
        };
        let sized = self.list_mut(which);
        let mut list = sized.list;
        sized.used += charge;
        self.slab.push_front(&mut list, index);
        self.list_mut(which).list = list;
    }

    /// Unlinks and frees node `index` (the back of its list) and its key.
    fn drop_node(&mut self, index: Index) -> Entry {
        let entry = self.unlink(index);
        self.map.remove(entry.key, &self.slab);
        self.slab.remove(index);
        self.warm_back(entry.which);
        entry
    }

    /// After the back of `which` was taken: start loading what taking the next
    /// back will touch (the new back's index slots and its predecessor node;
    /// the new back itself was warmed the same way one eviction earlier).
    fn warm_back(&self, which: Which) {
        let list = match which {
            Which::T1 => &self.t1.list,
            Which::T2 => &self.t2.list,
            Which::B1 => &self.b1.list,
            Which::B2 => &self.b2.list,
        };
        if let Some(back) = list.back() {
            self.map.prefetch_slots(self.slab.get(back).key);
            if let Some(prev) = self.slab.prev(back) {
                self.slab.prefetch(prev);
            }
        }
    }

    /// Frees the node of a ghost hit that no `admit` claimed.
    fn release_ghost_hit(&mut self) {
        if let Some(ghost) = self.ghost_hit.take() {
            self.map.remove(ghost.key, &self.slab);
            self.slab.remove(ghost.index);
        }
    }

    /// Moves the LRU unit of `from` (T1 or T2) to the front of its ghost list.
    fn demote(&mut self, from: Which, to: Which, victims: &mut Vec<u64>) -> bool {
        let Some(index) = self.list_mut(from).list.back() else {
            return false;
        };
        let entry = self.unlink(index);
        self.link_front(index, to);
        self.warm_back(from);
        victims.push(entry.key);
        true
    }

    /// The paper's REPLACE.
    fn replace(&mut self, hit_in_b2: bool, victims: &mut Vec<u64>) -> bool {
        let t1 = self.t1.used as f64;
        // Exact equality on purpose: libCacheSim compares an integer size to
        // the double `p`, and `p` only takes integral steps in object mode.
        #[allow(clippy::float_cmp)]
        let from_t1 =
            (self.t1.used > 0 && (t1 > self.p || (t1 == self.p && hit_in_b2))) || self.t2.used == 0;
        if from_t1 {
            self.demote(Which::T1, Which::B1, victims)
        } else {
            self.demote(Which::T2, Which::B2, victims)
        }
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
            if self.t1.used + self.b1.used + self.t2.used + self.b2.used >= 2 * c
                && let Some(ghost) = self.b2.list.back()
            {
                self.drop_node(ghost);
            }
            self.replace(false, victims)
        }
    }
}

impl Policy for Arc {
    fn name(&self) -> &'static str {
        "arc"
    }

    fn prefetch(&self, key: u64, ahead: Ahead) {
        self.map.prefetch_stage(key, &self.slab, ahead, true);
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
                self.slab.move_to_front(&mut self.t2.list, index);
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
            self.slab.get_mut(ghost.index).charge = charge as u32; // ≤ u32::MAX: a size or 1
            self.link_front(ghost.index, Which::T2);
        } else {
            let index = self.slab.insert(Entry {
                key: access.key,
                charge: charge as u32,
                which: Which::T1,
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

    /// Naive ARC: four vectors, MRU first, transcribing libCacheSim's `ARC.c`.
    struct NaiveArc {
        c: u64,
        capacity: Capacity,
        p: f64,
        /// T1, T2, B1, B2: (key, charge), most recent first.
        lists: [Vec<(u64, u64)>; 4],
    }

    const T1: usize = 0;
    const T2: usize = 1;
    const B1: usize = 2;
    const B2: usize = 3;

    impl NaiveArc {
        fn size(&self, list: usize) -> u64 {
            self.lists[list].iter().map(|i| i.1).sum()
        }

        fn replace(&mut self, hit_in_b2: bool, victims: &mut Vec<u64>) {
            let t1 = self.size(T1);
            #[allow(clippy::float_cmp)]
            let from_t1 = (t1 > 0 && (t1 as f64 > self.p || (t1 as f64 == self.p && hit_in_b2)))
                || self.size(T2) == 0;
            let (from, to) = if from_t1 { (T1, B1) } else { (T2, B2) };
            let item = self.lists[from].pop().unwrap();
            victims.push(item.0);
            self.lists[to].insert(0, item);
        }
    }

    impl Reference for NaiveArc {
        fn access(&mut self, access: &Access) -> (bool, Vec<u64>) {
            let found = (0..4).find_map(|l| {
                self.lists[l]
                    .iter()
                    .position(|i| i.0 == access.key)
                    .map(|at| (l, at))
            });
            let mut ghost = None;
            match found {
                Some((from @ (T1 | T2), at)) => {
                    let item = self.lists[from].remove(at);
                    self.lists[T2].insert(0, item);
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
                    if self.size(T1) + self.size(B1) + self.size(T2) + self.size(B2) >= 2 * self.c {
                        self.lists[B2].pop();
                    }
                    self.replace(false, &mut victims);
                }
            }
            let to = if ghost.is_some() { T2 } else { T1 };
            self.lists[to].insert(0, (access.key, charge));
            (false, victims)
        }
    }

    fn arc(capacity: Capacity) -> Arc {
        Arc::new(capacity, &ArcConfig::default()).unwrap()
    }

    #[test]
    fn a_b1_ghost_hit_grows_t1_target_and_enters_t2() {
        let mut a = arc(Capacity::Objects(2));
        let mut victims = vec![];
        // 1, 2 fill T1; 3 (case IV, |T1| + |B1| + 1 > 2, B1 empty) evicts 1
        // with no ghost; 4 then finds |T1| + |B1| = 2 again and B1 empty: 2
        // goes, no ghost. A hit moves 3 to T2; 5 (case IV(b)) REPLACEs: |T1| =
        // 1 > p = 0, so 4 goes to B1. 4 again: a B1 hit, p = 1; REPLACE:
        // |T1| = 1 = p but the hit was in B1, so T2's LRU (3) goes to B2.
        for access in testing::keys(&[1, 2, 3, 4, 3, 5, 4]) {
            a.access(&access, &mut victims);
        }
        assert_eq!(victims, [1, 2, 4, 3]);
        assert!((a.p - 1.0).abs() < f64::EPSILON);
        assert_eq!(a.slab.get(a.map.get(4, &a.slab).unwrap()).which, Which::T2);
        assert_eq!(a.slab.get(a.map.get(3, &a.slab).unwrap()).which, Which::B2);
        assert!(!a.contains(3) && a.contains(4) && a.contains(5));
    }

    #[test]
    fn a_ghost_hit_without_admit_is_forgotten_cleanly() {
        let mut a = arc(Capacity::Objects(2));
        let mut victims = vec![];
        for access in testing::keys(&[1, 2, 3, 4, 3, 5]) {
            a.access(&access, &mut victims);
        }
        assert_eq!(
            a.slab.get(a.map.get(4, &a.slab).unwrap()).which,
            Which::B1,
            "4 is a ghost"
        );
        let four = testing::keys(&[4])[0];
        assert!(!a.lookup(&four), "a ghost hit is a miss");
        assert!(!a.contains(4), "a ghost hit awaiting admit is not resident");
        // The engine gives up on 4 (no admit) and removes it: still not resident.
        assert!(!a.remove(4));
        assert!(a.map.get(4, &a.slab).is_none() && a.ghost_hit.is_none());
        // A ghost hit followed by the lookup of another key frees the node too.
        for access in testing::keys(&[6, 7, 3]) {
            a.access(&access, &mut victims);
        }
        let three = testing::keys(&[3])[0];
        if !a.lookup(&three) {
            let other = testing::keys(&[8])[0];
            assert!(!a.lookup(&other));
            assert!(a.ghost_hit.is_none());
        }
        assert_eq!(a.slab.len(), a.map.len(), "every node has exactly one key");
        testing::check_invariants(&a);
    }

    proptest! {
        #[test]
        fn matches_naive_model(trace in testing::trace_strategy(40, 400, 5), cap in 1u64..20, bytes: bool) {
            let capacity = if bytes { Capacity::Bytes(cap) } else { Capacity::Objects(cap) };
            let mut naive = NaiveArc { c: cap, capacity, p: 0.0, lists: Default::default() };
            testing::assert_matches_reference(&mut arc(capacity), &mut naive, &trace);
            testing::replay_checked(&mut arc(capacity), &trace);
        }
    }
}
