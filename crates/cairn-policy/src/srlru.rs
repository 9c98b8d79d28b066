//! SR-LRU: scan-resistant LRU, Cacheus's first expert on its own.
//!
//! Origin: L. V. Rodriguez, F. Yusuf, S. Lyons, E. Paz, R. Rangaswami,
//! J. Liu, M. Zhao, G. Narasimhan, "Learning Cache Replacement with
//! CACHEUS", FAST 2021 (section 4.1).
//!
//! Two LRU lists share the cache: `SR` for units seen once and `R` for
//! units hit while resident or back from the history `H` of evicted units.
//! A hit in `R` moves to `R`'s front; a hit in `SR` moves to `R`'s front,
//! `R`'s oldest units moving back to `SR`'s front while `R` is over its
//! size. A miss found in `H` enters `R` (its oldest units demoted to `SR` to
//! make room), any other miss enters `SR`; then while `SR` is over its size
//! its oldest unit leaves the cache for `H`. A scan therefore flows through
//! `SR` and never displaces `R`. `H` keeps under `capacity` of history
//! (trimmed while it holds `capacity` or more).
//!
//! Maps to libCacheSim `aa0fc40`'s `SR_LRU` (`SR_LRU.c`) run on its own (as
//! `SR_LRU_init`; its `cachesim` has no name for it), and equals it exactly
//! (see `docs/policies.md`):
//! - `SR` and `R` get `capacity / 2` each (integer division) and keep it: the
//!   paper's adaptation of the split never runs in `aa0fc40` (the flag that
//!   triggers growing `SR` is lost when a unit moves from `H` to `R`, and
//!   the one that triggers shrinking it is tested on a fresh entry). The
//!   adaptation, as libCacheSim 0.3.5 does it, is in [`crate::cacheus`],
//!   whose weighted eviction keeps the cache within its capacity; standalone
//!   SR-LRU with it can hold more than its capacity (a demotion into a full
//!   `SR` that the grown limit then does not trim), so it is not offered here.
//! - A miss is admitted only if it fits the list it would enter (`R`'s size
//!   from `H`, else `SR`'s); units `SR`'s overflow pushes out are the only
//!   evictions.
//!
//! No knobs.

use serde::{Deserialize, Serialize};

use crate::index::{KeyIndex, Keyed};
use crate::list::{Index, List, Slab};
use crate::{Access, Ahead, Capacity, ConfigError, Policy};

/// SR-LRU has no knobs (libCacheSim's has none either).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SrLruConfig {}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Place {
    /// The scan-resistant list.
    Sr,
    /// The list of reused units.
    R,
    /// The history (not resident).
    H,
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    key: u64,
    charge: u64,
    place: Place,
}

impl Keyed for Entry {
    fn key(&self) -> u64 {
        self.key
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct Part {
    /// Front = most recent.
    list: List,
    used: u64,
}

/// SR-LRU replacement.
#[derive(Debug)]
pub struct SrLru {
    capacity: Capacity,
    /// Units in `SR`, `R` and `H`.
    map: KeyIndex,
    slab: Slab<Entry>,
    sr: Part,
    r: Part,
    h: Part,
    /// `SR`'s and `R`'s size each: half the capacity.
    half: u64,
}

impl SrLru {
    /// An empty SR-LRU cache. The capacity must be at least 2 (`SR` and `R`
    /// get half of it each).
    pub fn new(capacity: Capacity, _config: &SrLruConfig) -> Result<Self, ConfigError> {
        let limit = capacity.limit();
        if limit < 2 {
            return Err(ConfigError::CapacityTooSmall {
                policy: "sr-lru",
                capacity: limit,
                reason: "SR and R get half of it each, so it must be at least 2",
            });
        }
        Ok(Self {
            capacity,
            map: KeyIndex::default(),
            slab: Slab::new(),
            sr: Part::default(),
            r: Part::default(),
            h: Part::default(),
            half: limit / 2,
        })
    }

    fn part_mut(&mut self, place: Place) -> &mut Part {
        match place {
            Place::Sr => &mut self.sr,
            Place::R => &mut self.r,
            Place::H => &mut self.h,
        }
    }

    fn unlink(&mut self, index: Index) {
        let entry = *self.slab.get(index);
        let part = self.part_mut(entry.place);
        let mut list = part.list;
        part.used -= entry.charge;
        self.slab.unlink(&mut list, index);
        self.part_mut(entry.place).list = list;
    }

    fn push_front(&mut self, index: Index, place: Place) {
        let charge = self.slab.get(index).charge;
        self.slab.get_mut(index).place = place;
        let part = self.part_mut(place);
        let mut list = part.list;
        part.used += charge;
        self.slab.push_front(&mut list, index);
        self.part_mut(place).list = list;
    }

    /// Moves `R`'s oldest units to `SR`'s front while `R` holds more than
    /// `limit`.
    fn demote_while_r_over(&mut self, limit: u64) {
        while self.r.used > limit {
            let Some(oldest) = self.r.list.back() else {
                break;
            };
            self.unlink(oldest);
            self.push_front(oldest, Place::Sr);
        }
    }

    /// Resident unit `index` leaves the cache for `H`, which is then
    /// trimmed; returns its key.
    fn send_to_history(&mut self, index: Index) -> u64 {
        self.unlink(index);
        self.push_front(index, Place::H);
        while self.h.used >= self.capacity.limit() {
            let Some(oldest) = self.h.list.back() else {
                break;
            };
            self.unlink(oldest);
            let gone = self.slab.get(oldest).key;
            self.map.remove(gone, &self.slab);
            self.slab.remove(oldest);
        }
        self.slab.get(index).key
    }
}

impl Policy for SrLru {
    fn name(&self) -> &'static str {
        "sr-lru"
    }

    fn prefetch(&self, key: u64, ahead: Ahead) {
        self.map.prefetch_stage(key, &self.slab, ahead, true);
    }

    fn lookup(&mut self, access: &Access) -> bool {
        let Some(index) = self.map.get(access.key, &self.slab) else {
            return false;
        };
        match self.slab.get(index).place {
            Place::H => false,
            Place::R => {
                self.slab.move_to_front(&mut self.r.list, index);
                true
            }
            Place::Sr => {
                self.unlink(index);
                self.push_front(index, Place::R);
                self.demote_while_r_over(self.half);
                true
            }
        }
    }

    fn admit(&mut self, access: &Access, victims: &mut Vec<u64>) -> bool {
        let charge = self.capacity.charge(access.size);
        let found = self.map.get(access.key, &self.slab);
        let history = match found {
            Some(index) if self.slab.get(index).place != Place::H => {
                return true; // `admit` without its `lookup`, of a resident key
            }
            history => history,
        };
        // SR_LRU_can_insert: it must fit the list it enters; both are half.
        if charge > self.half {
            return false;
        }
        if let Some(index) = history {
            self.unlink(index);
            self.slab.get_mut(index).charge = charge;
            self.demote_while_r_over(self.half - charge);
            self.push_front(index, Place::R);
        } else {
            let index = self.slab.insert(Entry {
                key: access.key,
                charge,
                place: Place::Sr,
            });
            self.push_front(index, Place::Sr);
            self.map.insert(access.key, index, &self.slab);
        }
        while self.sr.used > self.half {
            let Some(oldest) = self.sr.list.back() else {
                break;
            };
            victims.push(self.send_to_history(oldest));
        }
        true
    }

    fn remove(&mut self, key: u64) -> bool {
        match self.map.get(key, &self.slab) {
            Some(index) if self.slab.get(index).place != Place::H => {
                self.send_to_history(index);
                true
            }
            _ => false,
        }
    }

    fn contains(&self, key: u64) -> bool {
        self.map
            .get(key, &self.slab)
            .is_some_and(|index| self.slab.get(index).place != Place::H)
    }

    fn len(&self) -> usize {
        self.sr.list.len() + self.r.list.len()
    }

    fn used(&self) -> u64 {
        self.sr.used + self.r.used
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

    /// Naive SR-LRU: vectors of (key, charge), front = most recent,
    /// transcribing libCacheSim's `SR_LRU.c`.
    struct NaiveSrLru {
        c: u64,
        capacity: Capacity,
        sr: Vec<(u64, u64)>,
        r: Vec<(u64, u64)>,
        h: Vec<(u64, u64)>,
    }

    fn sum(items: &[(u64, u64)]) -> u64 {
        items.iter().map(|i| i.1).sum()
    }

    impl Reference for NaiveSrLru {
        fn access(&mut self, access: &Access) -> (bool, Vec<u64>) {
            let key = access.key;
            let half = self.c / 2;
            if let Some(at) = self.r.iter().position(|i| i.0 == key) {
                let item = self.r.remove(at);
                self.r.insert(0, item);
                return (true, vec![]);
            }
            if let Some(at) = self.sr.iter().position(|i| i.0 == key) {
                let item = self.sr.remove(at);
                self.r.insert(0, item);
                while sum(&self.r) > half {
                    let item = self.r.pop().unwrap();
                    self.sr.insert(0, item);
                }
                return (true, vec![]);
            }
            let charge = self.capacity.charge(access.size);
            let mut victims = vec![];
            if charge > half {
                return (false, victims);
            }
            if let Some(at) = self.h.iter().position(|i| i.0 == key) {
                self.h.remove(at);
                while sum(&self.r) + charge > half {
                    let item = self.r.pop().unwrap();
                    self.sr.insert(0, item);
                }
                self.r.insert(0, (key, charge));
            } else {
                self.sr.insert(0, (key, charge));
            }
            while sum(&self.sr) > half {
                let item = self.sr.pop().unwrap();
                victims.push(item.0);
                self.h.insert(0, item);
                while sum(&self.h) >= self.c {
                    self.h.pop();
                }
            }
            (false, victims)
        }
    }

    fn srlru(capacity: Capacity) -> SrLru {
        SrLru::new(capacity, &SrLruConfig::default()).unwrap()
    }

    #[test]
    fn a_scan_passes_through_sr_and_leaves_r_alone() {
        let mut c = srlru(Capacity::Objects(8));
        let mut victims = vec![];
        // 1..=4 enter SR; hits move them to R (size 4).
        for access in testing::keys(&[1, 2, 3, 4, 1, 2, 3, 4]) {
            c.access(&access, &mut victims);
        }
        assert!(victims.is_empty());
        assert_eq!(c.r.list.len(), 4);
        let scan: Vec<u64> = (100..200).collect();
        for access in testing::keys(&scan) {
            c.access(&access, &mut victims);
        }
        for key in 1..=4 {
            assert!(c.contains(key), "{key} survived the scan in R");
        }
        assert_eq!(victims.len(), 96, "the scan evicted only itself");
    }

    #[test]
    fn a_unit_back_from_history_enters_r_and_demotes_r_s_oldest() {
        // R (size 2) holds 2 then 1 (1 the oldest); SR holds 3, 4. 5 pushes
        // 3 out to H; 3 again comes back into R, demoting 1 to SR, where
        // SR's overflow sends 4 (SR's oldest) to H.
        let mut c = srlru(Capacity::Objects(4));
        let mut victims = vec![];
        for access in testing::keys(&[1, 2, 1, 2, 3, 4, 5]) {
            c.access(&access, &mut victims);
        }
        assert_eq!(victims, [3]);
        victims.clear();
        c.access(&testing::keys(&[3])[0], &mut victims);
        assert_eq!(victims, [4]);
        let place = |c: &SrLru, key| c.slab.get(c.map.get(key, &c.slab).unwrap()).place;
        assert_eq!(
            [1, 2, 3, 4, 5].map(|k| place(&c, k)),
            [Place::Sr, Place::R, Place::R, Place::H, Place::Sr]
        );
    }

    #[test]
    fn history_holds_under_the_capacity() {
        let mut c = srlru(Capacity::Objects(6));
        let keys: Vec<u64> = (0..50).collect();
        testing::replay_checked(&mut c, &testing::keys(&keys));
        assert_eq!(c.h.list.len(), 5, "trimmed while it holds 6 or more");
    }

    #[test]
    fn a_capacity_under_two_is_an_error() {
        for capacity in [
            Capacity::Objects(1),
            Capacity::Bytes(1),
            Capacity::Objects(0),
        ] {
            assert!(matches!(
                SrLru::new(capacity, &SrLruConfig::default()),
                Err(ConfigError::CapacityTooSmall {
                    policy: "sr-lru",
                    ..
                })
            ));
        }
    }

    proptest! {
        #[test]
        fn matches_naive_model(trace in testing::trace_strategy(40, 400, 5), cap in 2u64..20, bytes: bool) {
            let capacity = if bytes { Capacity::Bytes(cap) } else { Capacity::Objects(cap) };
            let mut naive = NaiveSrLru { c: cap, capacity, sr: vec![], r: vec![], h: vec![] };
            testing::assert_matches_reference(&mut srlru(capacity), &mut naive, &trace);
            testing::replay_checked(&mut srlru(capacity), &trace);
        }
    }
}
