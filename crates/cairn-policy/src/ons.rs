//! ONS (Old/New Section): frequency-promoted two-region replacement for
//! streaming servers (papers/000, Sohn & Jung, §3.3).
//!
//! The cache is split into a NEW region, where every missed block enters, and
//! a smaller OLD region. A hit in NEW bumps the block's hit count; once the
//! count reaches the promotion threshold the block moves to OLD, otherwise it
//! moves to NEW's most-recent end. A hit in OLD bumps the count and moves the
//! block to OLD's most-recent end. When a region must give up a block it picks
//! the lowest hit count, and among equal counts the least recently placed one
//! (LFU with an LRU tie-break).
//!
//! # How the paper's gaps are read
//! - **Promotion test.** §3.3 says "more hits than the threshold" in one place
//!   and §4.3 says "at or above the threshold" (경계값 이상). We promote when
//!   the count *reaches* the threshold: with the default 5 the fifth hit
//!   promotes.
//! - **Region sizes.** The paper only says NEW is larger than OLD
//!   (§3.3) and states no split; `old_fraction` defaults to 0.25, our choice.
//!   OLD is a quota, not a reservation: its PMEMCACHE replaces only when the
//!   *whole* list is full (§3.2: a block is added while the list holds fewer
//!   than its maximum), so NEW may use whatever OLD does not hold. A miss
//!   therefore evicts from NEW only when the whole cache is full, never while
//!   free space remains; if NEW is empty (byte mode, a unit bigger than the
//!   space OLD leaves) OLD gives up blocks too.
//! - **Promotion into a full OLD.** The paper says the region that cannot take
//!   a block deletes its LFU/LRU loser. A promotion happens on a hit, and a hit
//!   ([`Policy::lookup`]) cannot report evictions, so OLD's loser is *demoted*
//!   to NEW instead: the resident set never changes on a hit. The demoted
//!   block restarts as if just admitted (count 0, NEW's most-recent end of the
//!   count-0 group), so it must earn promotion again and NEW evicts it before
//!   any block that has been hit.
//! - **Counts.** A missed block starts at 0 hits. Counts are *not* reset on
//!   promotion (OLD's LFU ranks by total hits; every arrival in OLD has exactly
//!   `threshold` hits, the least any OLD block has) and keep counting in OLD.
//!   Demotion resets the count to 0 (above).
//! - **Units larger than OLD** (byte mode) are never promoted; they stay in
//!   NEW and keep counting there.
//!
//! # Cost
//! Each region keeps its blocks in buckets of equal hit count (the O(1) LFU
//! layout): a sorted list of buckets, each a list of blocks, most recent
//! first. Counts only ever grow by one, restart at 0, or arrive in OLD at
//! `threshold` (below or equal to every OLD count), so every operation is
//! O(1) (a promotion is O(1) per demoted block). Buckets and blocks live in
//! slabs: the steady state allocates nothing.

use serde::{Deserialize, Serialize};

use crate::list::{Index, List, Slab};
use crate::{Access, Capacity, ConfigError, KeyMap, Policy};

/// Configuration of [`Ons`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OnsConfig {
    /// Hits in NEW after which a block moves to OLD. Default 5: papers/000
    /// §4.3 and Fig. 8 tried 4..=13 and found 5 best. At least 1.
    pub threshold: u64,
    /// Share of the capacity OLD may hold, in `0.0..1.0`. Default 0.25: the
    /// paper only says NEW is larger than OLD, so 0.25 is our choice. 0 turns
    /// ONS into LFU with an LRU tie-break.
    pub old_fraction: f64,
}

impl Default for OnsConfig {
    fn default() -> Self {
        Self {
            threshold: 5,
            old_fraction: 0.25,
        }
    }
}

/// Which ONS region a resident block is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnsRegion {
    /// Where missed blocks enter.
    New,
    /// Where blocks hit `threshold` times go.
    Old,
}

const NEW: usize = 0;
const OLD: usize = 1;

#[derive(Clone, Copy, Debug)]
struct Entry {
    key: u64,
    charge: u64,
    count: u64,
    bucket: Index,
    region: usize,
}

#[derive(Clone, Copy, Debug)]
struct Bucket {
    count: u64,
    /// Blocks with this count, most recently placed first.
    members: List,
}

#[derive(Clone, Copy, Debug, Default)]
struct Region {
    /// Buckets threaded through the bucket slab, lowest count at the front.
    buckets: List,
    used: u64,
}

/// ONS replacement: a NEW and an OLD region, each LFU with an LRU tie-break.
#[derive(Debug)]
pub struct Ons {
    capacity: Capacity,
    old_limit: u64,
    threshold: u64,
    map: KeyMap<Index>,
    entries: Slab<Entry>,
    buckets: Slab<Bucket>,
    regions: [Region; 2],
}

impl Ons {
    /// An empty ONS cache.
    pub fn new(capacity: Capacity, config: &OnsConfig) -> Result<Self, ConfigError> {
        if config.threshold == 0 {
            return Err(ConfigError::OutOfRange {
                policy: "ons",
                parameter: "threshold",
                value: config.threshold.to_string(),
                expected: "at least 1",
            });
        }
        if !(0.0..1.0).contains(&config.old_fraction) {
            return Err(ConfigError::OutOfRange {
                policy: "ons",
                parameter: "old_fraction",
                value: config.old_fraction.to_string(),
                expected: "0.0 <= old_fraction < 1.0",
            });
        }
        Ok(Self {
            capacity,
            old_limit: capacity.fraction(config.old_fraction).limit(),
            threshold: config.threshold,
            map: KeyMap::default(),
            entries: Slab::new(),
            buckets: Slab::new(),
            regions: [Region::default(); 2],
        })
    }

    /// The region `key` is resident in, if it is.
    pub fn region(&self, key: u64) -> Option<OnsRegion> {
        let &index = self.map.get(&key)?;
        Some(if self.entries.get(index).region == OLD {
            OnsRegion::Old
        } else {
            OnsRegion::New
        })
    }

    /// The hit count of a resident `key`.
    pub fn hits(&self, key: u64) -> Option<u64> {
        self.map.get(&key).map(|&i| self.entries.get(i).count)
    }

    /// Occupancy of OLD, in the capacity's unit.
    pub fn old_used(&self) -> u64 {
        self.regions[OLD].used
    }

    /// Links an unlinked entry at the most-recent end of `region`, with the
    /// count it already carries, which must not exceed the region's lowest.
    fn attach_lowest(&mut self, region: usize, index: Index) {
        let count = self.entries.get(index).count;
        let front = self.regions[region].buckets.front();
        let bucket = match front {
            Some(b) if self.buckets.get(b).count == count => b,
            _ => {
                debug_assert!(front.is_none_or(|b| self.buckets.get(b).count > count));
                let b = self.buckets.insert(Bucket {
                    count,
                    members: List::new(),
                });
                self.buckets
                    .push_front(&mut self.regions[region].buckets, b);
                b
            }
        };
        self.entries
            .push_front(&mut self.buckets.get_mut(bucket).members, index);
        let entry = self.entries.get_mut(index);
        entry.bucket = bucket;
        entry.region = region;
        self.regions[region].used += entry.charge;
    }

    /// Unlinks an entry from its bucket and region (freeing an emptied bucket).
    fn detach(&mut self, index: Index) {
        let Entry {
            bucket,
            region,
            charge,
            ..
        } = *self.entries.get(index);
        self.entries
            .unlink(&mut self.buckets.get_mut(bucket).members, index);
        if self.buckets.get(bucket).members.is_empty() {
            self.buckets
                .unlink(&mut self.regions[region].buckets, bucket);
            self.buckets.remove(bucket);
        }
        self.regions[region].used -= charge;
    }

    /// Adds one hit to an entry and moves it to the most-recent end of the
    /// bucket for its new count, in the same region.
    fn bump(&mut self, index: Index) {
        let Entry { bucket, region, .. } = *self.entries.get(index);
        let count = self.entries.get(index).count + 1;
        let target = match self.buckets.next(bucket) {
            Some(next) if self.buckets.get(next).count == count => next,
            _ => {
                let b = self.buckets.insert(Bucket {
                    count,
                    members: List::new(),
                });
                self.buckets
                    .insert_after(&mut self.regions[region].buckets, bucket, b);
                b
            }
        };
        self.detach(index);
        self.entries
            .push_front(&mut self.buckets.get_mut(target).members, index);
        let entry = self.entries.get_mut(index);
        entry.count = count;
        entry.bucket = target;
        self.regions[region].used += entry.charge;
    }

    /// The block `region` gives up first: lowest count, least recent.
    fn loser(&self, region: usize) -> Option<Index> {
        let bucket = self.regions[region].buckets.front()?;
        self.buckets.get(bucket).members.back()
    }

    /// Moves a NEW entry that just reached the threshold into OLD, demoting
    /// OLD's losers to NEW until it fits.
    fn promote(&mut self, index: Index) {
        self.detach(index);
        let charge = self.entries.get(index).charge;
        while self.regions[OLD].used + charge > self.old_limit {
            let Some(loser) = self.loser(OLD) else { break };
            self.detach(loser);
            self.entries.get_mut(loser).count = 0;
            self.attach_lowest(NEW, loser);
        }
        let entry = self.entries.get_mut(index);
        entry.count += 1;
        debug_assert_eq!(
            entry.count, self.threshold,
            "arrivals in OLD carry the threshold"
        );
        self.attach_lowest(OLD, index);
    }

    fn evict(&mut self, index: Index, victims: &mut Vec<u64>) {
        self.detach(index);
        let key = self.entries.remove(index).key;
        self.map.remove(&key);
        victims.push(key);
    }
}

impl Policy for Ons {
    fn name(&self) -> &'static str {
        "ons"
    }

    fn lookup(&mut self, access: &Access) -> bool {
        let Some(&index) = self.map.get(&access.key) else {
            return false;
        };
        let entry = *self.entries.get(index);
        if entry.region == NEW
            && entry.count + 1 >= self.threshold
            && entry.charge <= self.old_limit
        {
            self.promote(index);
        } else {
            self.bump(index);
        }
        true
    }

    fn admit(&mut self, access: &Access, victims: &mut Vec<u64>) -> bool {
        let charge = self.capacity.charge(access.size);
        if charge > self.capacity.limit() {
            return false;
        }
        while self.used() + charge > self.capacity.limit() {
            let Some(loser) = self.loser(NEW).or_else(|| self.loser(OLD)) else {
                break;
            };
            self.evict(loser, victims);
        }
        let index = self.entries.insert(Entry {
            key: access.key,
            charge,
            count: 0,
            bucket: crate::list::NIL,
            region: NEW,
        });
        self.attach_lowest(NEW, index);
        self.map.insert(access.key, index);
        true
    }

    fn remove(&mut self, key: u64) -> bool {
        let Some(index) = self.map.remove(&key) else {
            return false;
        };
        self.detach(index);
        self.entries.remove(index);
        true
    }

    fn contains(&self, key: u64) -> bool {
        self.map.contains_key(&key)
    }

    fn len(&self) -> usize {
        self.map.len()
    }

    fn used(&self) -> u64 {
        self.regions[NEW].used + self.regions[OLD].used
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

    #[derive(Clone, Copy)]
    struct Item {
        key: u64,
        charge: u64,
        count: u64,
        old: bool,
        /// When the item was last placed (admitted, hit, promoted, demoted).
        placed: u64,
    }

    /// Naive ONS: one vector, losers found by scanning for the least
    /// `(count, placed)` in a region.
    struct NaiveOns {
        capacity: Capacity,
        old_limit: u64,
        threshold: u64,
        items: Vec<Item>,
        clock: u64,
    }

    impl NaiveOns {
        fn new(capacity: Capacity, config: &OnsConfig) -> Self {
            Self {
                capacity,
                old_limit: capacity.fraction(config.old_fraction).limit(),
                threshold: config.threshold,
                items: vec![],
                clock: 0,
            }
        }

        fn tick(&mut self) -> u64 {
            self.clock += 1;
            self.clock
        }

        fn loser(&self, old: bool) -> Option<usize> {
            (0..self.items.len())
                .filter(|&i| self.items[i].old == old)
                .min_by_key(|&i| (self.items[i].count, self.items[i].placed))
        }

        fn used(&self, old: Option<bool>) -> u64 {
            self.items
                .iter()
                .filter(|i| old.is_none_or(|o| i.old == o))
                .map(|i| i.charge)
                .sum()
        }
    }

    impl Reference for NaiveOns {
        fn access(&mut self, access: &Access) -> (bool, Vec<u64>) {
            if let Some(at) = self.items.iter().position(|i| i.key == access.key) {
                self.items[at].count += 1;
                let item = self.items[at];
                if !item.old && item.count >= self.threshold && item.charge <= self.old_limit {
                    self.items[at].old = true;
                    self.items[at].placed = u64::MAX; // not a loser candidate yet
                    let mut old_used = self.used(Some(true)) - item.charge;
                    while old_used + item.charge > self.old_limit {
                        let l = self
                            .items
                            .iter()
                            .enumerate()
                            .filter(|(i, x)| x.old && *i != at)
                            .min_by_key(|(_, x)| (x.count, x.placed))
                            .map(|(i, _)| i)
                            .unwrap();
                        old_used -= self.items[l].charge;
                        let placed = self.tick();
                        self.items[l] = Item {
                            count: 0,
                            old: false,
                            placed,
                            ..self.items[l]
                        };
                    }
                }
                self.items[at].placed = self.tick();
                return (true, vec![]);
            }
            let charge = self.capacity.charge(access.size);
            let mut victims = vec![];
            if charge <= self.capacity.limit() {
                while self.used(None) + charge > self.capacity.limit() {
                    let l = self.loser(false).or_else(|| self.loser(true)).unwrap();
                    victims.push(self.items.remove(l).key);
                }
                let placed = self.tick();
                self.items.push(Item {
                    key: access.key,
                    charge,
                    count: 0,
                    old: false,
                    placed,
                });
            }
            (false, victims)
        }
    }

    fn ons(capacity: Capacity, threshold: u64, old_fraction: f64) -> Ons {
        Ons::new(
            capacity,
            &OnsConfig {
                threshold,
                old_fraction,
            },
        )
        .unwrap()
    }

    fn run(policy: &mut Ons, keys: &[u64]) -> Vec<u64> {
        let mut victims = vec![];
        for access in testing::keys(keys) {
            policy.access(&access, &mut victims);
        }
        victims
    }

    #[test]
    fn a_block_hit_threshold_times_moves_to_old() {
        let mut ons = ons(Capacity::Objects(8), 5, 0.25);
        run(&mut ons, &[1, 1, 1, 1, 1]);
        assert_eq!(ons.region(1), Some(OnsRegion::New), "4 hits stay in NEW");
        assert_eq!(ons.hits(1), Some(4));
        run(&mut ons, &[1]);
        assert_eq!(
            ons.region(1),
            Some(OnsRegion::Old),
            "the fifth hit promotes"
        );
        assert_eq!(ons.old_used(), 1);
        run(&mut ons, &[1]);
        assert_eq!(ons.hits(1), Some(6), "hits in OLD keep counting");
    }

    #[test]
    fn new_eviction_takes_lowest_count_then_oldest() {
        // OLD holds 1 of 4 but nothing is promoted: NEW uses all 4.
        let mut ons = ons(Capacity::Objects(4), 5, 0.25);
        assert!(run(&mut ons, &[1, 2, 3, 4, 3, 1]).is_empty());
        assert_eq!(ons.len(), 4, "NEW borrows the space OLD does not use");
        // Counts: 1→1, 2→0, 3→1, 4→0. Lowest count 0: 2 is older than 4.
        assert_eq!(run(&mut ons, &[5]), [2]);
        assert_eq!(run(&mut ons, &[6]), [4]);
        assert_eq!(run(&mut ons, &[7]), [5], "count 0 again: 5 before 6");
        // Now only count-1 blocks 3 and 1 and count-0 blocks 6, 7.
        assert_eq!(run(&mut ons, &[6, 7, 8]), [3], "count 1: 3 hit before 1");
    }

    #[test]
    fn promotion_into_full_old_demotes_its_loser_to_new() {
        let mut ons = ons(Capacity::Objects(4), 1, 0.25); // OLD holds 1
        run(&mut ons, &[1, 1, 1]);
        assert_eq!(
            (ons.region(1), ons.hits(1)),
            (Some(OnsRegion::Old), Some(2))
        );
        let victims = run(&mut ons, &[2, 2]);
        assert!(victims.is_empty(), "a hit never evicts");
        assert_eq!(ons.region(2), Some(OnsRegion::Old));
        assert_eq!(
            (ons.region(1), ons.hits(1)),
            (Some(OnsRegion::New), Some(0)),
            "OLD's loser restarts in NEW with count 0"
        );
        assert_eq!(ons.len(), 2);
    }

    #[test]
    fn old_loser_is_lowest_count_then_least_recent() {
        let mut ons = ons(Capacity::Objects(8), 1, 0.25); // OLD holds 2
        run(&mut ons, &[1, 1, 2, 2, 1]); // OLD: 1 (2 hits), 2 (1 hit)
        run(&mut ons, &[3, 3]); // 3 arrives: 2 has fewer hits than 1
        assert_eq!(ons.region(2), Some(OnsRegion::New));
        assert_eq!(ons.region(1), Some(OnsRegion::Old));
        run(&mut ons, &[4, 4]); // 3 (1 hit) loses to 1 (2 hits)
        assert_eq!(ons.region(3), Some(OnsRegion::New));
        run(&mut ons, &[4, 5, 5]); // 1 and 4 both at 2 hits; 1 is less recent
        assert_eq!(ons.region(1), Some(OnsRegion::New));
        assert_eq!(ons.region(4), Some(OnsRegion::Old));
    }

    #[test]
    fn rejects_bad_config() {
        for (threshold, old_fraction) in [(0, 0.25), (5, 1.0), (5, -0.1), (5, f64::NAN)] {
            let config = OnsConfig {
                threshold,
                old_fraction,
            };
            assert!(Ons::new(Capacity::Objects(4), &config).is_err());
        }
    }

    proptest! {
        #[test]
        fn matches_naive_model(
            trace in testing::trace_strategy(40, 400, 5),
            cap in 1u64..20,
            bytes: bool,
            threshold in 1u64..5,
            old_fraction in prop::sample::select(vec![0.0, 0.25, 0.5]),
        ) {
            let capacity = if bytes { Capacity::Bytes(cap) } else { Capacity::Objects(cap) };
            let config = OnsConfig { threshold, old_fraction };
            let mut policy = Ons::new(capacity, &config).unwrap();
            let mut naive = NaiveOns::new(capacity, &config);
            testing::assert_matches_reference(&mut policy, &mut naive, &trace);
            testing::replay_checked(&mut Ons::new(capacity, &config).unwrap(), &trace);
        }
    }
}
