//! LFUDA: least frequently used with dynamic aging.
//!
//! Source: Martin Arlitt, Ludmila Cherkasova, John Dilley, Rich Friedrich,
//! Tai Jin, "Evaluating content management techniques for Web proxy
//! caches", ACM SIGMETRICS Performance Evaluation Review 27(4), 2000 (and
//! J. Dilley, M. Arlitt, "Improving proxy cache performance: analysis of
//! three replacement policies", IEEE Internet Computing, 1999). Each unit has
//! a key `K = F + L`, `F` its access count and `L` the cache's age (the key
//! of the last unit evicted); the lowest `K` is evicted. Units that were
//! popular once but stopped being accessed age out, which plain LFU never
//! does.
//!
//! Maps to libCacheSim's `LFUDA` (`cache/eviction/LFUDA.c`, the version in
//! the `libcachesim` 0.3.5 release), whose keys are kept in frequency
//! buckets and whose `L` is `min_freq`, the bucket eviction reads from. We
//! follow it exactly, quirks included, so that miss counts agree:
//! - a new unit enters with `K = min_freq + 1` at the tail of its bucket;
//!   eviction takes the head of bucket `min_freq` (FIFO within a bucket,
//!   i.e. the least recently touched of equal keys), then sets
//!   `min_freq` to that bucket's key;
//! - a hit *adds* `min_freq` to the unit's key (`K += L`, where the paper
//!   recomputes `K = F + 1 + L`), so while nothing has been evicted yet
//!   (`min_freq` = 0) hits only move a unit to the tail of its bucket;
//! - when the `min_freq` bucket empties (eviction, hit or removal),
//!   `min_freq` moves up to the lowest non-empty bucket at most `max_freq`
//!   (the largest key created so far); it never moves down. A hit on the
//!   last unit of the `min_freq` bucket looks for the next bucket before it
//!   re-files that unit, so when every other unit's key is higher than the
//!   unit's new key, `min_freq` jumps over it: the unit is *stranded* below
//!   `min_freq` and is not evicted until a later hit lifts it again.
//! - Where libCacheSim would read an empty `min_freq` bucket (after a hit
//!   or removal emptied the cache's last bucket at `min_freq`, its next
//!   eviction dereferences a null unit and crashes), we evict from the
//!   lowest bucket at or above `min_freq` instead, or from the lowest
//!   stranded bucket when there is none, raising `min_freq` to that bucket
//!   if higher.
//!
//! In object mode a unit's charge is 1 and in byte mode its size; keys do
//! not depend on size (libCacheSim's LFUDA has no size term). LFUDA as
//! published, with `K = F + L` recomputed on every hit, is GDSF with every
//! size 1 (`gdsf` in object mode with `new_unit_competes = false`).
//!
//! No knobs. Checked on `cloudPhysicsIO` by
//! `crates/cairn-sim/tests/libcachesim_agreement.rs`: the same miss counts as
//! libCacheSim 0.3.5 at 1, 5, 10 and 20 % of the distinct objects and of the
//! bytes.
//!
//! Buckets are nodes of an [`IndexedHeap`] ordered by (stranded, key), each
//! holding a list of its units; a map from key to bucket finds where a unit
//! goes. Nothing allocates per access once the structures have grown to the
//! cache's size.

use serde::{Deserialize, Serialize};

use crate::heap::{Handle, IndexedHeap};
use crate::index::{KeyIndex, Keyed};
use crate::list::{Index, List, Slab};
use crate::{Access, Ahead, Capacity, ConfigError, KeyMap, Policy};

/// LFUDA has no knobs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LfudaConfig {}

/// A bucket's place in the heap: buckets at or above `min_freq` first, by
/// key; stranded ones (below `min_freq`) after them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Rank {
    stranded: bool,
    key: u64,
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    key: u64,
    charge: u64,
    /// The unit's LFUDA key `K` (libCacheSim's `lfu.freq`).
    priority: u64,
    /// The bucket (a heap handle) this unit is in.
    bucket: Handle,
}

impl Keyed for Entry {
    fn key(&self) -> u64 {
        self.key
    }
}

/// Least-frequently-used replacement with dynamic aging, as libCacheSim.
#[derive(Debug)]
pub struct Lfuda {
    capacity: Capacity,
    used: u64,
    map: KeyIndex,
    entries: Slab<Entry>,
    /// Non-empty buckets; each value lists its units, front = oldest.
    buckets: IndexedHeap<Rank, List>,
    /// Non-empty buckets by key.
    by_key: KeyMap<Handle>,
    /// `L`: the bucket eviction reads from (0 until the first eviction).
    min_freq: u64,
    /// The largest key given to a unit so far (libCacheSim's `max_freq`).
    max_freq: u64,
}

impl Lfuda {
    /// An empty LFUDA cache.
    pub fn new(capacity: Capacity, _config: &LfudaConfig) -> Result<Self, ConfigError> {
        Ok(Self {
            capacity,
            used: 0,
            map: KeyIndex::default(),
            entries: Slab::new(),
            buckets: IndexedHeap::new(),
            by_key: KeyMap::default(),
            min_freq: 0,
            max_freq: 0,
        })
    }

    /// Appends entry `index` to the tail of the bucket of `priority`
    /// (`existing`, if there is one), creating the bucket if needed.
    fn file(&mut self, index: Index, priority: u64, existing: Option<Handle>) {
        let bucket = existing.unwrap_or_else(|| {
            let rank = Rank {
                stranded: priority < self.min_freq,
                key: priority,
            };
            let bucket = self.buckets.push(rank, List::new());
            self.by_key.insert(priority, bucket);
            bucket
        });
        self.entries
            .push_back(self.buckets.value_mut(bucket), index);
        let entry = self.entries.get_mut(index);
        entry.bucket = bucket;
        entry.priority = priority;
    }

    /// Unlinks entry `index` from its bucket; drops the bucket if that
    /// emptied it and returns its key then.
    fn unfile(&mut self, index: Index) -> Option<u64> {
        let bucket = self.entries.get(index).bucket;
        let units = self.buckets.value_mut(bucket);
        self.entries.unlink(units, index);
        if !units.is_empty() {
            return None;
        }
        let (rank, _) = self.buckets.remove(bucket);
        self.by_key.remove(&rank.key);
        Some(rank.key)
    }

    /// libCacheSim's `update_min_freq`: `min_freq` moves to the lowest
    /// non-empty bucket above it, if one is at most `max_freq`.
    fn raise_min_freq(&mut self) {
        if let Some((_, rank, _)) = self.buckets.peek()
            && !rank.stranded
            && rank.key <= self.max_freq
        {
            debug_assert!(rank.key > self.min_freq, "a bucket at min_freq is empty");
            self.min_freq = rank.key;
        }
    }

    fn evict_one(&mut self) -> Option<Entry> {
        // The lowest bucket at or above min_freq: min_freq's own bucket
        // except where libCacheSim would crash (see the module doc).
        let (_, rank, units) = self.buckets.peek()?;
        let index = units.front()?;
        debug_assert!(rank.stranded || rank.key >= self.min_freq);
        self.min_freq = self.min_freq.max(rank.key);
        let emptied = self.unfile(index).is_some();
        let victim = *self.entries.get(index);
        self.map.remove(victim.key, &self.entries);
        self.entries.remove(index);
        self.used -= victim.charge;
        if emptied {
            self.raise_min_freq();
        }
        Some(victim)
    }
}

impl Policy for Lfuda {
    fn name(&self) -> &'static str {
        "lfuda"
    }

    fn prefetch(&self, key: u64, ahead: Ahead) {
        self.map.prefetch_stage(key, &self.entries, ahead, true);
    }

    fn lookup(&mut self, access: &Access) -> bool {
        let Some(index) = self.map.get(access.key, &self.entries) else {
            return false;
        };
        let entry = *self.entries.get(index);
        let priority = entry.priority.saturating_add(self.min_freq);
        self.max_freq = self.max_freq.max(priority);
        if priority == entry.priority {
            // min_freq is 0: to the tail of the same bucket.
            let units = self.buckets.value_mut(entry.bucket);
            self.entries.unlink(units, index);
            self.entries.push_back(units, index);
            return true;
        }
        let target = self.by_key.get(&priority).copied();
        if target.is_none()
            && entry.priority != self.min_freq
            && self.buckets.value(entry.bucket).len() == 1
        {
            // Alone in a bucket that is not min_freq's, and no bucket at the
            // new key: re-key the bucket in place (what unfiling and filing
            // would do, with one heap update instead of two).
            self.by_key.remove(&entry.priority);
            self.by_key.insert(priority, entry.bucket);
            let rank = Rank {
                stranded: false,
                key: priority,
            };
            self.buckets.set_priority(entry.bucket, rank);
            self.entries.get_mut(index).priority = priority;
            return true;
        }
        if self.unfile(index) == Some(self.min_freq) {
            self.raise_min_freq();
        }
        self.file(index, priority, target);
        true
    }

    fn admit(&mut self, access: &Access, victims: &mut Vec<u64>) -> bool {
        let charge = self.capacity.charge(access.size);
        if charge > self.capacity.limit() {
            return false;
        }
        debug_assert!(!self.contains(access.key), "admit of a resident key");
        while self.used + charge > self.capacity.limit() {
            let Some(victim) = self.evict_one() else {
                break;
            };
            victims.push(victim.key);
        }
        let priority = self.min_freq + 1;
        // libCacheSim raises max_freq when it creates a bucket; its bucket 1
        // exists from the start, every other one raised max_freq when made.
        if priority != 1 {
            self.max_freq = self.max_freq.max(priority);
        }
        let index = self.entries.insert(Entry {
            key: access.key,
            charge,
            priority,
            bucket: 0,
        });
        let existing = self.by_key.get(&priority).copied();
        self.file(index, priority, existing);
        self.map.insert(access.key, index, &self.entries);
        self.used += charge;
        // At most one bucket per unit: room for them all, so that hits,
        // which may make a bucket, never allocate.
        let room = self.map.len() + 1;
        self.buckets.reserve_total(room);
        self.by_key.reserve(room.saturating_sub(self.by_key.len()));
        true
    }

    fn remove(&mut self, key: u64) -> bool {
        let Some(index) = self.map.remove(key, &self.entries) else {
            return false;
        };
        if self.unfile(index) == Some(self.min_freq) {
            self.raise_min_freq();
        }
        self.used -= self.entries.remove(index).charge;
        true
    }

    fn contains(&self, key: u64) -> bool {
        self.map.get(key, &self.entries).is_some()
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
    use std::collections::{BTreeMap, VecDeque};

    use super::*;
    use crate::testing::{self, Reference};
    use proptest::prelude::*;

    /// libCacheSim's LFUDA.c transcribed: buckets by key that are never
    /// freed, a linear scan for the next non-empty bucket; plus our rule
    /// where it would read an empty bucket.
    struct NaiveLfuda {
        capacity: Capacity,
        nodes: BTreeMap<u64, VecDeque<u64>>,
        /// key → (charge, K)
        items: Vec<(u64, u64, u64)>,
        min: u64,
        max: u64,
    }

    impl NaiveLfuda {
        fn new(capacity: Capacity) -> Self {
            Self {
                capacity,
                nodes: BTreeMap::from([(1, VecDeque::new())]),
                items: vec![],
                min: 0,
                max: 0,
            }
        }

        fn update_min(&mut self) {
            if self.min >= self.max {
                return;
            }
            if let Some((&k, _)) = self
                .nodes
                .range(self.min + 1..=self.max)
                .find(|(_, n)| !n.is_empty())
            {
                self.min = k;
            }
        }

        fn unlink(&mut self, key: u64, k: u64) {
            let node = self.nodes.get_mut(&k).unwrap();
            node.retain(|&x| x != key);
            if k == self.min && node.is_empty() {
                self.update_min();
            }
        }

        fn evict(&mut self) -> u64 {
            let at = self.min.max(1);
            let k = if self.nodes.get(&at).is_some_and(|n| !n.is_empty()) {
                at
            } else {
                let nonempty = |(&k, n): (&u64, &VecDeque<u64>)| (!n.is_empty()).then_some(k);
                self.nodes
                    .range(self.min..)
                    .find_map(nonempty)
                    .or_else(|| self.nodes.iter().find_map(nonempty))
                    .unwrap()
            };
            self.min = self.min.max(k);
            let node = self.nodes.get_mut(&k).unwrap();
            let key = node.pop_front().unwrap();
            if node.is_empty() {
                self.update_min();
            }
            self.items.retain(|i| i.0 != key);
            key
        }
    }

    impl Reference for NaiveLfuda {
        fn access(&mut self, access: &Access) -> (bool, Vec<u64>) {
            if let Some(at) = self.items.iter().position(|i| i.0 == access.key) {
                let old = self.items[at].2;
                let new = old + self.min;
                self.items[at].2 = new;
                self.max = self.max.max(new);
                self.unlink(access.key, old);
                self.nodes.entry(new).or_default().push_back(access.key);
                return (true, vec![]);
            }
            let charge = self.capacity.charge(access.size);
            let mut victims = vec![];
            if charge > self.capacity.limit() {
                return (false, victims);
            }
            while self.items.iter().map(|i| i.1).sum::<u64>() + charge > self.capacity.limit() {
                victims.push(self.evict());
            }
            let k = self.min + 1;
            if !self.nodes.contains_key(&k) {
                self.max = self.max.max(k);
            }
            self.nodes.entry(k).or_default().push_back(access.key);
            self.items.push((access.key, charge, k));
            (false, victims)
        }
    }

    fn run(capacity: u64, keys: &[u64]) -> (Lfuda, Vec<u64>) {
        let mut cache = Lfuda::new(Capacity::Objects(capacity), &LfudaConfig::default()).unwrap();
        let mut victims = vec![];
        for access in testing::keys(keys) {
            cache.access(&access, &mut victims);
        }
        (cache, victims)
    }

    #[test]
    fn hits_before_the_first_eviction_only_refresh() {
        // min_freq is 0 until something is evicted, so 1's hits add 0 to
        // its key; 1 and 2 tie at K 1 and 1 entered its bucket first.
        let (cache, victims) = run(2, &[1, 1, 1, 2, 3]);
        assert_eq!(victims, [1]);
        assert!(cache.contains(2) && cache.contains(3));
        let (_, victims) = run(2, &[1, 2, 1, 3]);
        assert_eq!(victims, [2], "1's hit moved it behind 2");
    }

    #[test]
    fn popular_units_age_out() {
        // 1, 2 fill; 3 evicts 1 (min_freq 1) and enters with K 2; three hits
        // lift it to 3, 4, 5. 4 evicts 2 (K 1); its bucket empties, so
        // min_freq jumps to 5 and 4 enters with K 6. Then 5 evicts 3, hit
        // three times, not 4, seen once: plain LFU would keep 3.
        let (cache, victims) = run(2, &[1, 2, 3, 3, 3, 3, 4, 5]);
        assert_eq!(victims, [1, 2, 3]);
        assert!(cache.contains(4) && cache.contains(5));
        assert_eq!(cache.min_freq, 6);
    }

    #[test]
    fn a_hit_on_the_last_unit_at_min_freq_can_strand_it() {
        // As above up to K(3) = 5 with 2 alone at min_freq 1. A hit on 2
        // gives it K 2, but min_freq moves first, to 5 (3's bucket): 2 is
        // below min_freq and 3 goes before it.
        let (mut cache, victims) = run(2, &[1, 2, 3, 3, 3, 3, 2]);
        assert_eq!(victims, [1]);
        assert_eq!(cache.min_freq, 5);
        let two = cache.entries.get(cache.map.get(2, &cache.entries).unwrap());
        assert_eq!(two.priority, 2);
        let mut victims = vec![];
        cache.access(&Access::read(4, 1, 7), &mut victims);
        assert_eq!(victims, [3]);
        assert!(cache.contains(2));
    }

    #[test]
    fn remove_keeps_min_freq_consistent() {
        let (mut cache, _) = run(3, &[1, 2, 3, 4, 4]);
        // 4 evicted 1; min_freq 1; 4 has K 2 + 1 = 3.
        assert!(cache.remove(2) && cache.remove(3) && !cache.remove(3));
        assert_eq!(
            cache.min_freq, 3,
            "its bucket emptied, so min_freq moved up to 4's"
        );
        assert_eq!((cache.len(), cache.used()), (1, 1));
        let mut victims = vec![];
        for access in testing::keys(&[5, 6, 7]) {
            cache.access(&access, &mut victims);
        }
        assert_eq!(victims, [4]);
        testing::check_invariants(&cache);
    }

    proptest! {
        #[test]
        fn matches_naive_model(trace in testing::trace_strategy(40, 400, 5), cap in 1u64..20, bytes: bool) {
            let capacity = if bytes { Capacity::Bytes(cap) } else { Capacity::Objects(cap) };
            let mut lfuda = Lfuda::new(capacity, &LfudaConfig::default()).unwrap();
            testing::assert_matches_reference(&mut lfuda, &mut NaiveLfuda::new(capacity), &trace);
            testing::replay_checked(&mut Lfuda::new(capacity, &LfudaConfig::default()).unwrap(), &trace);
        }
    }
}
