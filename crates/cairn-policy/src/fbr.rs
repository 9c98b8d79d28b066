//! FBR: frequency-based replacement (J. T. Robinson and M. V. Devarakonda,
//! "Data cache management using frequency-based replacement", SIGMETRICS
//! 1990; cited as \[4\] by papers/000 and papers/001, which summarise it).
//!
//! Blocks sit in one LRU stack cut into three sections by position: the
//! *new* section (the most recent `f_new` of the capacity), the *old* section
//! (the least recent `f_old`) and the *middle* between them. Every block has a
//! reference count, 1 when it enters. A hit in the new section does not count
//! (it is taken as correlated with the reference that brought the block in,
//! papers/000 §2.2); a hit in the middle or old section adds one. Every hit
//! moves the block to the top of the stack. The victim is the block with the
//! least count in the old section, the least recent among equals. When the
//! average count exceeds `a_max`, every count `c` becomes `⌈c / 2⌉`, and no
//! count grows past `c_max`.
//!
//! # Readings and limits
//! - **Defaults.** The paper is not among papers/; `f_new = 0.25` and
//!   `f_old = 0.5` follow the project brief, and `a_max = 100`, `c_max = 1000`
//!   are our choices. All four should be checked against the paper's
//!   recommendations before a reproduction quotes them.
//! - **Sections by capacity, not occupancy.** Boundaries are positions in a
//!   full cache: the new section is the longest run of most-recent blocks
//!   whose total charge fits in `⌊f_new × capacity⌋`, the new and middle
//!   sections together the longest run that fits in
//!   `capacity − ⌊f_old × capacity⌋`; the rest is old. In byte mode a block
//!   straddling a boundary belongs to the lower section, and so do the blocks
//!   below it until it moves (each "run" stops at the first block that does
//!   not fit). While the cache
//!   fills, or when the old section is empty because the capacity is tiny or
//!   a large unit must fit, the victim is the bottom of the stack (LRU).
//! - **Aging** is a pass over every block, O(resident + `c_max`/64). Right
//!   after it the average is at most `(a_max + 1) / 2`, and only hits raise
//!   the sum of counts (an admission adds a count of 1, never above the
//!   average), so at least `(a_max − 1) / 2 × resident` hits pass between two
//!   passes: O(1) amortised per hit for `a_max >= 2`, which is enforced.
//!
//! # Cost
//! Three lists hold the stack sections. Old-section blocks are also threaded
//! into one list per count (most recent first) with a bitmap of non-empty
//! counts, so finding the victim scans `c_max / 64` words. Moving blocks
//! across boundaries after a hit touches O(1) blocks in object mode
//! (amortised O(1) in byte mode). Nodes live in slabs: no allocation in the
//! steady state.

use serde::{Deserialize, Serialize};

use crate::list::{Index, List, NIL, Slab};
use crate::{Access, Capacity, ConfigError, KeyMap, Policy};

/// Configuration of [`Fbr`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FbrConfig {
    /// Share of the capacity in the new section, where hits do not count.
    /// Default 0.25 (to be checked against the paper, see the module docs).
    pub f_new: f64,
    /// Share of the capacity in the old section, where victims are chosen.
    /// Default 0.5 (to be checked against the paper). `f_new + f_old <= 1`;
    /// equal to 1 gives the paper's "simple FBR" without a middle section.
    pub f_old: f64,
    /// Largest average count before all counts are halved. Default 100
    /// (ours). At least 2.
    pub a_max: u64,
    /// Largest count a block can reach. Default 1000 (ours). 1..=65535.
    pub c_max: u32,
}

impl Default for FbrConfig {
    fn default() -> Self {
        Self {
            f_new: 0.25,
            f_old: 0.5,
            a_max: 100,
            c_max: 1000,
        }
    }
}

/// The section of the LRU stack a resident block is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FbrSection {
    /// The most recent blocks; hits here do not count.
    New,
    /// Between new and old.
    Middle,
    /// The least recent blocks, where victims are chosen.
    Old,
}

const NEW: usize = 0;
const MIDDLE: usize = 1;
const OLD: usize = 2;

#[derive(Clone, Copy, Debug)]
struct Entry {
    key: u64,
    charge: u64,
    count: u32,
    section: usize,
    /// Node in `by_count` while in the old section, else [`NIL`].
    by_count_node: Index,
}

/// Frequency-based replacement.
#[derive(Debug)]
pub struct Fbr {
    capacity: Capacity,
    new_limit: u64,
    middle_end: u64,
    a_max: u64,
    c_max: u32,
    map: KeyMap<Index>,
    entries: Slab<Entry>,
    sections: [List; 3],
    section_used: [u64; 3],
    /// Nodes holding entry indices, threaded into `counts[c]`.
    by_count: Slab<Index>,
    counts: Vec<List>,
    nonempty: Vec<u64>,
    count_sum: u64,
}

impl Fbr {
    /// An empty FBR cache.
    pub fn new(capacity: Capacity, config: &FbrConfig) -> Result<Self, ConfigError> {
        let out_of_range = |parameter, value: String, expected| ConfigError::OutOfRange {
            policy: "fbr",
            parameter,
            value,
            expected,
        };
        let shares = "0 <= f_new, 0 <= f_old, f_new + f_old <= 1";
        if !(config.f_new >= 0.0 && config.f_new <= 1.0) {
            return Err(out_of_range("f_new", config.f_new.to_string(), shares));
        }
        if !(config.f_old >= 0.0 && config.f_new + config.f_old <= 1.0) {
            return Err(out_of_range("f_old", config.f_old.to_string(), shares));
        }
        if config.a_max < 2 {
            return Err(out_of_range(
                "a_max",
                config.a_max.to_string(),
                "at least 2",
            ));
        }
        if !(1..=65535).contains(&config.c_max) {
            return Err(out_of_range("c_max", config.c_max.to_string(), "1..=65535"));
        }
        let limit = capacity.limit();
        let buckets = config.c_max as usize + 1;
        Ok(Self {
            capacity,
            new_limit: capacity.fraction(config.f_new).limit(),
            middle_end: limit - capacity.fraction(config.f_old).limit(),
            a_max: config.a_max,
            c_max: config.c_max,
            map: KeyMap::default(),
            entries: Slab::new(),
            sections: [List::new(); 3],
            section_used: [0; 3],
            by_count: Slab::new(),
            counts: vec![List::new(); buckets],
            nonempty: vec![0; buckets.div_ceil(64)],
            count_sum: 0,
        })
    }

    /// The section `key` is in, if resident.
    pub fn section(&self, key: u64) -> Option<FbrSection> {
        let &index = self.map.get(&key)?;
        Some(match self.entries.get(index).section {
            NEW => FbrSection::New,
            MIDDLE => FbrSection::Middle,
            _ => FbrSection::Old,
        })
    }

    /// The reference count of a resident `key`.
    pub fn count(&self, key: u64) -> Option<u32> {
        self.map.get(&key).map(|&i| self.entries.get(i).count)
    }

    fn link_count(&mut self, index: Index) {
        let count = self.entries.get(index).count as usize;
        let node = self.by_count.insert(index);
        self.by_count.push_front(&mut self.counts[count], node);
        self.nonempty[count / 64] |= 1 << (count % 64);
        self.entries.get_mut(index).by_count_node = node;
    }

    fn unlink_count(&mut self, index: Index) {
        let Entry {
            count,
            by_count_node: node,
            ..
        } = *self.entries.get(index);
        let count = count as usize;
        self.by_count.unlink(&mut self.counts[count], node);
        self.by_count.remove(node);
        if self.counts[count].is_empty() {
            self.nonempty[count / 64] &= !(1 << (count % 64));
        }
        self.entries.get_mut(index).by_count_node = NIL;
    }

    /// Unlinks an entry from its section (and count list).
    fn unlink(&mut self, index: Index) {
        let Entry {
            section, charge, ..
        } = *self.entries.get(index);
        if section == OLD {
            self.unlink_count(index);
        }
        self.entries.unlink(&mut self.sections[section], index);
        self.section_used[section] -= charge;
    }

    /// Links an unlinked entry at the front or back of `section`.
    fn link(&mut self, section: usize, index: Index, front: bool) {
        let entry = self.entries.get_mut(index);
        entry.section = section;
        self.section_used[section] += entry.charge;
        if front {
            self.entries.push_front(&mut self.sections[section], index);
        } else {
            self.entries.push_back(&mut self.sections[section], index);
        }
        if section == OLD {
            debug_assert!(front, "blocks enter the old section at its top");
            self.link_count(index);
        }
    }

    fn charge_of(&self, index: Option<Index>) -> Option<(Index, u64)> {
        index.map(|i| (i, self.entries.get(i).charge))
    }

    /// Restores the section boundaries after the stack changed.
    fn rebalance(&mut self) {
        while self.section_used[NEW] > self.new_limit {
            let Some(index) = self.entries.pop_back(&mut self.sections[NEW]) else {
                break;
            };
            self.section_used[NEW] -= self.entries.get(index).charge;
            self.link(MIDDLE, index, true);
        }
        // Pull up the block below the new section while it fits.
        while let Some((index, charge)) = self.charge_of(
            self.sections[MIDDLE]
                .front()
                .or_else(|| self.sections[OLD].front()),
        ) {
            if self.section_used[NEW] + charge > self.new_limit {
                break;
            }
            self.unlink(index);
            self.link(NEW, index, false);
        }
        while self.section_used[NEW] + self.section_used[MIDDLE] > self.middle_end {
            let Some(index) = self.entries.pop_back(&mut self.sections[MIDDLE]) else {
                break;
            };
            self.section_used[MIDDLE] -= self.entries.get(index).charge;
            self.link(OLD, index, true);
        }
        while let Some((index, charge)) = self.charge_of(self.sections[OLD].front()) {
            if self.section_used[NEW] + self.section_used[MIDDLE] + charge > self.middle_end {
                break;
            }
            self.unlink(index);
            self.link(MIDDLE, index, false);
        }
    }

    /// The victim: least count in the old section, least recent among
    /// equals; the bottom of the stack when the old section is empty.
    fn victim(&self) -> Option<Index> {
        for (word_at, &word) in self.nonempty.iter().enumerate() {
            if word != 0 {
                let count = word_at * 64 + word.trailing_zeros() as usize;
                let node = self.counts[count].back()?;
                return Some(*self.by_count.get(node));
            }
        }
        self.sections[MIDDLE]
            .back()
            .or_else(|| self.sections[NEW].back())
    }

    /// Halves every count (rounding up) once the average exceeds `a_max`.
    fn maybe_age(&mut self) {
        if self.count_sum <= self.a_max.saturating_mul(self.map.len() as u64) {
            return;
        }
        self.count_sum = 0;
        for section in [NEW, MIDDLE, OLD] {
            let mut at = self.sections[section].front();
            while let Some(index) = at {
                let entry = self.entries.get_mut(index);
                entry.count = entry.count.div_ceil(2);
                self.count_sum += u64::from(entry.count);
                at = self.entries.next(index);
            }
        }
        // Rebuild the count lists: walking the old section from its bottom
        // and pushing to the front keeps each list most recent first.
        for (word_at, word) in self.nonempty.iter_mut().enumerate() {
            while *word != 0 {
                let bit = word.trailing_zeros() as usize;
                self.counts[word_at * 64 + bit] = List::new();
                *word &= *word - 1;
            }
        }
        let mut at = self.sections[OLD].back();
        while let Some(index) = at {
            let Entry {
                count,
                by_count_node: node,
                ..
            } = *self.entries.get(index);
            let count = count as usize;
            self.by_count.push_front(&mut self.counts[count], node);
            self.nonempty[count / 64] |= 1 << (count % 64);
            at = self.entries.prev(index);
        }
    }
}

impl Policy for Fbr {
    fn name(&self) -> &'static str {
        "fbr"
    }

    fn lookup(&mut self, access: &Access) -> bool {
        let Some(&index) = self.map.get(&access.key) else {
            return false;
        };
        if self.entries.get(index).section == NEW {
            self.entries.move_to_front(&mut self.sections[NEW], index);
            // The sum is unchanged, but a `remove` may have raised the
            // average since the last check.
            self.maybe_age();
            return true;
        }
        self.unlink(index);
        let entry = self.entries.get_mut(index);
        if entry.count < self.c_max {
            entry.count += 1;
            self.count_sum += 1;
        }
        self.link(NEW, index, true);
        self.rebalance();
        self.maybe_age();
        true
    }

    fn admit(&mut self, access: &Access, victims: &mut Vec<u64>) -> bool {
        let charge = self.capacity.charge(access.size);
        if charge > self.capacity.limit() {
            return false;
        }
        while self.used() + charge > self.capacity.limit() {
            let Some(index) = self.victim() else { break };
            self.unlink(index);
            let victim = *self.entries.remove(index);
            self.map.remove(&victim.key);
            self.count_sum -= u64::from(victim.count);
            victims.push(victim.key);
            // In byte mode a block that did not fit above the old section
            // may fit once the victim, at the old section's top, is gone.
            self.rebalance();
        }
        let index = self.entries.insert(Entry {
            key: access.key,
            charge,
            count: 1,
            section: NEW,
            by_count_node: NIL,
        });
        self.link(NEW, index, true);
        self.map.insert(access.key, index);
        self.count_sum += 1;
        self.rebalance();
        self.maybe_age();
        true
    }

    fn remove(&mut self, key: u64) -> bool {
        let Some(index) = self.map.remove(&key) else {
            return false;
        };
        self.unlink(index);
        self.count_sum -= u64::from(self.entries.remove(index).count);
        self.rebalance();
        true
    }

    fn contains(&self, key: u64) -> bool {
        self.map.contains_key(&key)
    }

    fn len(&self) -> usize {
        self.map.len()
    }

    fn used(&self) -> u64 {
        self.section_used.iter().sum()
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

    /// Naive FBR: one vector, most recent first; sections recomputed from
    /// cumulative charges on every access.
    struct NaiveFbr {
        capacity: Capacity,
        new_limit: u64,
        middle_end: u64,
        a_max: u64,
        c_max: u32,
        /// (key, charge, count), most recent first.
        stack: Vec<(u64, u64, u32)>,
    }

    impl NaiveFbr {
        fn new(capacity: Capacity, config: &FbrConfig) -> Self {
            Self {
                capacity,
                new_limit: capacity.fraction(config.f_new).limit(),
                middle_end: capacity.limit() - capacity.fraction(config.f_old).limit(),
                a_max: config.a_max,
                c_max: config.c_max,
                stack: vec![],
            }
        }

        /// Section of every stack position.
        fn sections(&self) -> Vec<usize> {
            let mut sum = 0;
            let mut section = NEW;
            self.stack
                .iter()
                .map(|&(_, charge, _)| {
                    sum += charge;
                    if section == NEW && sum > self.new_limit {
                        section = MIDDLE;
                    }
                    if section == MIDDLE && sum > self.middle_end {
                        section = OLD;
                    }
                    section
                })
                .collect()
        }

        fn age(&mut self) {
            let sum: u64 = self.stack.iter().map(|i| u64::from(i.2)).sum();
            if sum > self.a_max.saturating_mul(self.stack.len() as u64) {
                for item in &mut self.stack {
                    item.2 = item.2.div_ceil(2);
                }
            }
        }
    }

    impl Reference for NaiveFbr {
        fn access(&mut self, access: &Access) -> (bool, Vec<u64>) {
            if let Some(at) = self.stack.iter().position(|i| i.0 == access.key) {
                let section = self.sections()[at];
                let mut item = self.stack.remove(at);
                if section != NEW {
                    item.2 = (item.2 + 1).min(self.c_max);
                }
                self.stack.insert(0, item);
                self.age();
                return (true, vec![]);
            }
            let charge = self.capacity.charge(access.size);
            let mut victims = vec![];
            if charge <= self.capacity.limit() {
                while self.stack.iter().map(|i| i.1).sum::<u64>() + charge > self.capacity.limit() {
                    let sections = self.sections();
                    // Least count in the old section, the lowest in the
                    // stack among equals; else the bottom of the stack.
                    let at = (0..self.stack.len())
                        .rev()
                        .filter(|&i| sections[i] == OLD)
                        .min_by_key(|&i| self.stack[i].2)
                        .unwrap_or(self.stack.len() - 1);
                    victims.push(self.stack.remove(at).0);
                }
                self.stack.insert(0, (access.key, charge, 1));
                self.age();
            }
            (false, victims)
        }
    }

    fn fbr(capacity: u64, f_new: f64, f_old: f64) -> Fbr {
        let config = FbrConfig {
            f_new,
            f_old,
            ..FbrConfig::default()
        };
        Fbr::new(Capacity::Objects(capacity), &config).unwrap()
    }

    fn run(policy: &mut Fbr, keys: &[u64]) -> Vec<u64> {
        let mut victims = vec![];
        for access in testing::keys(keys) {
            policy.access(&access, &mut victims);
        }
        victims
    }

    #[test]
    fn hits_in_the_new_section_do_not_count() {
        // 8 blocks: new = top 2, old = bottom 4.
        let mut fbr = fbr(8, 0.25, 0.5);
        run(&mut fbr, &[1, 1, 1, 2, 3]);
        assert_eq!(fbr.count(1), Some(1), "1 stayed in the new section");
        assert_eq!(fbr.section(1), Some(FbrSection::Middle));
        run(&mut fbr, &[1]);
        assert_eq!(fbr.count(1), Some(2), "a middle-section hit counts");
        assert_eq!(fbr.section(1), Some(FbrSection::New));
    }

    #[test]
    fn victim_is_least_count_in_old_section_then_least_recent() {
        let mut fbr = fbr(8, 0.25, 0.5);
        // 1..=8 in; 1 and 2 are hit from the old section (count 2), which
        // moves them to the top.
        assert!(run(&mut fbr, &[1, 2, 3, 4, 5, 6, 7, 8, 1, 2]).is_empty());
        // Stack top→bottom: 2 1 8 7 | 6 5 4 3 (old: 6 5 4 3, all count 1).
        assert_eq!(fbr.section(6), Some(FbrSection::Old));
        assert_eq!(run(&mut fbr, &[9]), [3], "count 1, least recent");
        // Push 1 and 2 down into the old section: they keep count 2 and
        // outlive the count-1 blocks below them, unlike LRU.
        assert_eq!(run(&mut fbr, &[10, 11]), [4, 5]);
        assert_eq!(fbr.section(1), Some(FbrSection::Old));
        assert_eq!(run(&mut fbr, &[12, 13]), [6, 7]);
        assert!(fbr.contains(1) && fbr.contains(2));
    }

    #[test]
    fn counts_halve_when_the_average_exceeds_a_max() {
        let config = FbrConfig {
            f_new: 0.0,
            f_old: 1.0,
            a_max: 2,
            c_max: 1000,
        };
        let mut fbr = Fbr::new(Capacity::Objects(2), &config).unwrap();
        run(&mut fbr, &[1, 2, 1, 1, 1]);
        // Counts 1:4, 2:1 → average 2.5 > 2 → ⌈4/2⌉ = 2, ⌈1/2⌉ = 1.
        assert_eq!((fbr.count(1), fbr.count(2)), (Some(2), Some(1)));
    }

    #[test]
    fn rejects_bad_config() {
        let bad = [
            FbrConfig {
                f_new: -0.1,
                ..FbrConfig::default()
            },
            FbrConfig {
                f_new: 0.6,
                f_old: 0.5,
                ..FbrConfig::default()
            },
            FbrConfig {
                f_old: f64::NAN,
                ..FbrConfig::default()
            },
            FbrConfig {
                a_max: 1,
                ..FbrConfig::default()
            },
            FbrConfig {
                c_max: 0,
                ..FbrConfig::default()
            },
        ];
        for config in bad {
            assert!(
                Fbr::new(Capacity::Objects(8), &config).is_err(),
                "{config:?}"
            );
        }
    }

    proptest! {
        #[test]
        fn matches_naive_model(
            trace in testing::trace_strategy(40, 400, 5),
            cap in 1u64..20,
            bytes: bool,
            shares in prop::sample::select(vec![(0.25, 0.5), (0.0, 1.0), (0.3, 0.3), (0.5, 0.0)]),
            a_max in 2u64..6,
            c_max in prop::sample::select(vec![3u32, 70, 1000]),
        ) {
            let capacity = if bytes { Capacity::Bytes(cap) } else { Capacity::Objects(cap) };
            let config = FbrConfig { f_new: shares.0, f_old: shares.1, a_max, c_max };
            let mut policy = Fbr::new(capacity, &config).unwrap();
            let mut naive = NaiveFbr::new(capacity, &config);
            testing::assert_matches_reference(&mut policy, &mut naive, &trace);
            // Removing keys must keep the sections consistent too.
            for key in 0..10 {
                policy.remove(key);
                naive.stack.retain(|i| i.0 != key);
            }
            testing::assert_matches_reference(&mut policy, &mut naive, &trace);
            testing::replay_checked(&mut Fbr::new(capacity, &config).unwrap(), &trace);
        }
    }
}
