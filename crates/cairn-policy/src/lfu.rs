//! LFU: evict the least frequently used unit; among equals, the one whose
//! last access is the oldest.
//!
//! A baseline of papers/000 (and a textbook policy). The O(1) structure is
//! K. Shah, A. Mitra, D. Matani, "An O(1) algorithm for implementing the LFU
//! cache eviction scheme" (2010): a list of frequency buckets in increasing
//! order, each holding the units of that frequency.
//!
//! Maps to libCacheSim's `LFU` (`cache/eviction/LFU.c`):
//! - a new unit enters with frequency 1 (frequencies are not remembered after
//!   eviction: "in-cache" LFU);
//! - a hit increments the frequency and appends the unit to the *tail* of its
//!   new bucket; eviction takes the *head* of the lowest non-empty bucket.
//!   Within a bucket the order is therefore the order in which units reached
//!   that frequency, i.e. the order of their last accesses: ties are broken
//!   by least recent use (libCacheSim's comment calls it "FIFO within the
//!   same frequency", which is the same thing).
//!
//! In object-count mode this reproduces libCacheSim's miss ratios exactly.

use serde::{Deserialize, Serialize};

use crate::list::{Index, List, Slab};
use crate::{Access, Capacity, ConfigError, KeyMap, Policy};

/// LFU has no knobs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LfuConfig {}

#[derive(Clone, Copy, Debug)]
struct Entry {
    key: u64,
    charge: u64,
    /// The bucket (in `Lfu::buckets`) this unit is in.
    bucket: Index,
}

#[derive(Clone, Copy, Debug)]
struct Bucket {
    frequency: u64,
    /// Units of this frequency; back = most recently accessed.
    units: List,
}

/// Least-frequently-used replacement with O(1) frequency buckets.
#[derive(Debug)]
pub struct Lfu {
    capacity: Capacity,
    used: u64,
    map: KeyMap<Index>,
    entries: Slab<Entry>,
    buckets: Slab<Bucket>,
    /// Bucket nodes not in use. Buckets are recycled here rather than freed
    /// to the slab, and `grow_buckets` keeps one node per resident unit (plus
    /// one) in existence: the number of buckets can then never outgrow the
    /// nodes, so a hit never allocates, even when the frequencies spread out.
    spare_buckets: Vec<Index>,
    /// Bucket nodes ever created (in use + spare).
    bucket_nodes: usize,
    /// Non-empty buckets in increasing frequency: front = lowest.
    bucket_list: List,
}

impl Lfu {
    /// An empty LFU cache.
    pub fn new(capacity: Capacity, _config: &LfuConfig) -> Result<Self, ConfigError> {
        Ok(Self {
            capacity,
            used: 0,
            map: KeyMap::default(),
            entries: Slab::new(),
            buckets: Slab::new(),
            spare_buckets: Vec::new(),
            bucket_nodes: 0,
            bucket_list: List::new(),
        })
    }

    /// Appends entry `index` to the back of `bucket`.
    fn push_to_bucket(&mut self, bucket: Index, index: Index) {
        let mut units = self.buckets.get(bucket).units;
        self.entries.push_back(&mut units, index);
        self.buckets.get_mut(bucket).units = units;
        self.entries.get_mut(index).bucket = bucket;
    }

    /// Unlinks entry `index` from its bucket, freeing the bucket if emptied.
    fn unlink_from_bucket(&mut self, index: Index) {
        let bucket = self.entries.get(index).bucket;
        let mut units = self.buckets.get(bucket).units;
        self.entries.unlink(&mut units, index);
        if units.is_empty() {
            self.buckets.unlink(&mut self.bucket_list, bucket);
            self.spare_buckets.push(bucket);
        } else {
            self.buckets.get_mut(bucket).units = units;
        }
    }

    /// A bucket of `frequency` right after `after` in the bucket list (or at
    /// the front when `after` is `None`), reusing the existing one if present.
    fn bucket_after(&mut self, after: Option<Index>, frequency: u64) -> Index {
        let next = match after {
            Some(at) => self.buckets.next(at),
            None => self.bucket_list.front(),
        };
        if let Some(next) = next
            && self.buckets.get(next).frequency == frequency
        {
            return next;
        }
        let fresh = Bucket {
            frequency,
            units: List::new(),
        };
        let bucket = if let Some(spare) = self.spare_buckets.pop() {
            *self.buckets.get_mut(spare) = fresh;
            spare
        } else {
            self.bucket_nodes += 1;
            self.buckets.insert(fresh)
        };
        match after {
            Some(at) => self.buckets.insert_after(&mut self.bucket_list, at, bucket),
            None => self.buckets.push_front(&mut self.bucket_list, bucket),
        }
        bucket
    }

    /// Makes sure there are at least as many bucket nodes as resident units
    /// plus one (a hit briefly holds one extra bucket), so that buckets only
    /// allocate when the resident set grows.
    fn grow_buckets(&mut self) {
        while self.bucket_nodes < self.map.len() + 1 {
            let spare = self.buckets.insert(Bucket {
                frequency: 0,
                units: List::new(),
            });
            self.spare_buckets.push(spare);
            self.bucket_nodes += 1;
        }
        self.spare_buckets
            .reserve(self.bucket_nodes - self.spare_buckets.len());
    }

    fn evict_one(&mut self) -> Option<Entry> {
        let bucket = self.bucket_list.front()?;
        let index = self.buckets.get(bucket).units.front()?;
        self.unlink_from_bucket(index);
        let victim = *self.entries.remove(index);
        self.map.remove(&victim.key);
        self.used -= victim.charge;
        Some(victim)
    }
}

impl Policy for Lfu {
    fn name(&self) -> &'static str {
        "lfu"
    }

    fn lookup(&mut self, access: &Access) -> bool {
        let Some(&index) = self.map.get(&access.key) else {
            return false;
        };
        let old = self.entries.get(index).bucket;
        let bucket = *self.buckets.get(old);
        let frequency = bucket.frequency + 1;
        // Alone in its bucket and no bucket of the next frequency: renumber
        // the bucket in place (the common case for hot units under skew).
        if bucket.units.len() == 1
            && self
                .buckets
                .next(old)
                .is_none_or(|next| self.buckets.get(next).frequency != frequency)
        {
            self.buckets.get_mut(old).frequency = frequency;
            return true;
        }
        // Find or make the target bucket before `old` may be freed.
        let new = self.bucket_after(Some(old), frequency);
        self.unlink_from_bucket(index);
        self.push_to_bucket(new, index);
        true
    }

    fn admit(&mut self, access: &Access, victims: &mut Vec<u64>) -> bool {
        let charge = self.capacity.charge(access.size);
        if charge > self.capacity.limit() {
            return false;
        }
        while self.used + charge > self.capacity.limit() {
            let Some(victim) = self.evict_one() else {
                break;
            };
            victims.push(victim.key);
        }
        let index = self.entries.insert(Entry {
            key: access.key,
            charge,
            bucket: crate::list::NIL,
        });
        let bucket = self.bucket_after(None, 1);
        self.push_to_bucket(bucket, index);
        self.map.insert(access.key, index);
        self.used += charge;
        self.grow_buckets();
        true
    }

    fn remove(&mut self, key: u64) -> bool {
        let Some(index) = self.map.remove(&key) else {
            return false;
        };
        self.unlink_from_bucket(index);
        self.used -= self.entries.remove(index).charge;
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

    /// Naive LFU: (key, charge, frequency, last access time); evicts the
    /// minimum of (frequency, last access) by scanning.
    struct NaiveLfu {
        capacity: Capacity,
        items: Vec<(u64, u64, u64, u64)>,
    }

    impl Reference for NaiveLfu {
        fn access(&mut self, access: &Access) -> (bool, Vec<u64>) {
            if let Some(item) = self.items.iter_mut().find(|i| i.0 == access.key) {
                item.2 += 1;
                item.3 = access.time;
                return (true, vec![]);
            }
            let charge = self.capacity.charge(access.size);
            let mut victims = vec![];
            if charge > self.capacity.limit() {
                return (false, victims);
            }
            while self.items.iter().map(|i| i.1).sum::<u64>() + charge > self.capacity.limit() {
                let (at, _) = self
                    .items
                    .iter()
                    .enumerate()
                    .min_by_key(|(_, i)| (i.2, i.3))
                    .unwrap();
                victims.push(self.items.remove(at).0);
            }
            self.items.push((access.key, charge, 1, access.time));
            (false, victims)
        }
    }

    #[test]
    fn evicts_least_frequent_then_least_recent() {
        let mut lfu = Lfu::new(Capacity::Objects(3), &LfuConfig::default()).unwrap();
        let mut victims = vec![];
        for access in testing::keys(&[1, 1, 2, 3, 2, 4, 5]) {
            lfu.access(&access, &mut victims);
        }
        // Frequencies before 4: 1→2, 2→2, 3→1: 3 goes. Before 5: 1→2 (last
        // touched at 1), 2→2 (at 4), 4→1: 4 goes, the only unit at frequency 1.
        assert_eq!(victims, [3, 4]);
        for access in testing::keys(&[6]) {
            lfu.access(&access, &mut victims);
        }
        assert_eq!(victims, [3, 4, 5]);
        assert!(lfu.contains(1) && lfu.contains(2) && lfu.contains(6));
    }

    #[test]
    fn ties_go_to_the_least_recently_used() {
        let mut lfu = Lfu::new(Capacity::Objects(3), &LfuConfig::default()).unwrap();
        let mut victims = vec![];
        for access in testing::keys(&[1, 2, 3, 2, 1, 3, 4]) {
            lfu.access(&access, &mut victims);
        }
        // All at frequency 2; 2 was accessed longest ago.
        assert_eq!(victims, [2]);
    }

    proptest! {
        #[test]
        fn matches_naive_model(trace in testing::trace_strategy(40, 400, 5), cap in 1u64..20, bytes: bool) {
            let capacity = if bytes { Capacity::Bytes(cap) } else { Capacity::Objects(cap) };
            let mut lfu = Lfu::new(capacity, &LfuConfig::default()).unwrap();
            let mut naive = NaiveLfu { capacity, items: vec![] };
            testing::assert_matches_reference(&mut lfu, &mut naive, &trace);
            testing::replay_checked(&mut Lfu::new(capacity, &LfuConfig::default()).unwrap(), &trace);
        }
    }
}
