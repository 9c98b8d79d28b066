//! [`FreqBuckets`]: the O(1) frequency structure of LFU experts.
//!
//! A list of buckets in increasing frequency, each a list of members in the
//! order they reached that frequency (K. Shah, A. Mitra, D. Matani, "An O(1)
//! algorithm for implementing the LFU cache eviction scheme", 2010), as in
//! [`crate::lfu`], but as a component: a member names its *owner* (an index
//! in the policy's own slab), so a policy can keep its units in an LRU list
//! and here at the same time (LeCaR's and Cacheus's two experts).
//!
//! The least frequent members are at the front bucket: [`oldest_of_least`]
//! is the one that reached that frequency first (LFU with LRU tie-break),
//! [`newest_of_least`] the one that reached it last (Cacheus's CR-LFU).
//!
//! Buckets are recycled, and [`FreqBuckets::insert`] keeps one bucket node
//! per member plus one in existence, so a bump never allocates.
//!
//! [`oldest_of_least`]: FreqBuckets::oldest_of_least
//! [`newest_of_least`]: FreqBuckets::newest_of_least

use crate::list::{Index, List, NIL, Slab};

#[derive(Clone, Copy, Debug)]
struct Member {
    owner: Index,
    bucket: Index,
}

#[derive(Clone, Copy, Debug)]
struct Bucket {
    frequency: u64,
    /// Back = reached this frequency last.
    members: List,
}

/// Members grouped by frequency; see the module doc.
#[derive(Debug, Default)]
pub struct FreqBuckets {
    members: Slab<Member>,
    buckets: Slab<Bucket>,
    /// Non-empty buckets, front = lowest frequency.
    order: List,
    /// Bucket nodes not in use.
    spare: Vec<Index>,
    /// Bucket nodes ever created (in use + spare).
    bucket_nodes: usize,
}

impl FreqBuckets {
    /// Number of members.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether there is no member.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// The owner of member `node`.
    #[inline]
    pub fn owner(&self, node: Index) -> Index {
        self.members.get(node).owner
    }

    /// The frequency of member `node`.
    #[inline]
    pub fn frequency(&self, node: Index) -> u64 {
        self.buckets.get(self.members.get(node).bucket).frequency
    }

    /// The owner that reached the lowest frequency first.
    #[inline]
    pub fn oldest_of_least(&self) -> Option<Index> {
        let bucket = self.order.front()?;
        let node = self.buckets.get(bucket).members.front()?;
        Some(self.owner(node))
    }

    /// The owner that reached the lowest frequency last.
    #[inline]
    pub fn newest_of_least(&self) -> Option<Index> {
        let bucket = self.order.front()?;
        let node = self.buckets.get(bucket).members.back()?;
        Some(self.owner(node))
    }

    /// Adds `owner` at `frequency` (at least 1), after every member already
    /// there; returns its member node. Finding the bucket walks the buckets
    /// below `frequency`, so it is O(1) for frequency 1.
    pub fn insert(&mut self, owner: Index, frequency: u64) -> Index {
        debug_assert!(frequency >= 1);
        let node = self.members.insert(Member { owner, bucket: NIL });
        let mut after = None;
        let mut at = self.order.front();
        while let Some(bucket) = at {
            if self.buckets.get(bucket).frequency >= frequency {
                break;
            }
            after = Some(bucket);
            at = self.buckets.next(bucket);
        }
        let bucket = self.bucket_after(after, frequency);
        self.push(bucket, node);
        self.grow();
        node
    }

    /// Raises member `node`'s frequency by one (to the back of its new
    /// bucket); returns the new frequency.
    #[inline]
    pub fn bump(&mut self, node: Index) -> u64 {
        let old = self.members.get(node).bucket;
        let bucket = *self.buckets.get(old);
        let frequency = bucket.frequency + 1;
        // Alone, and no bucket of the next frequency: renumber in place.
        if bucket.members.len() == 1
            && self
                .buckets
                .next(old)
                .is_none_or(|next| self.buckets.get(next).frequency != frequency)
        {
            self.buckets.get_mut(old).frequency = frequency;
            return frequency;
        }
        let new = self.bucket_after(Some(old), frequency);
        self.unlink(node);
        self.push(new, node);
        frequency
    }

    /// Removes member `node`; returns its frequency.
    #[inline]
    pub fn remove(&mut self, node: Index) -> u64 {
        let frequency = self.frequency(node);
        self.unlink(node);
        self.members.remove(node);
        frequency
    }

    fn push(&mut self, bucket: Index, node: Index) {
        let mut members = self.buckets.get(bucket).members;
        self.members.push_back(&mut members, node);
        self.buckets.get_mut(bucket).members = members;
        self.members.get_mut(node).bucket = bucket;
    }

    /// Unlinks `node` from its bucket, recycling the bucket if emptied.
    fn unlink(&mut self, node: Index) {
        let bucket = self.members.get(node).bucket;
        let mut members = self.buckets.get(bucket).members;
        self.members.unlink(&mut members, node);
        if members.is_empty() {
            self.buckets.unlink(&mut self.order, bucket);
            self.spare.push(bucket);
        } else {
            self.buckets.get_mut(bucket).members = members;
        }
    }

    /// The bucket of `frequency` right after `after` (or first), made if
    /// missing.
    fn bucket_after(&mut self, after: Option<Index>, frequency: u64) -> Index {
        let next = match after {
            Some(at) => self.buckets.next(at),
            None => self.order.front(),
        };
        if let Some(next) = next
            && self.buckets.get(next).frequency == frequency
        {
            return next;
        }
        let fresh = Bucket {
            frequency,
            members: List::new(),
        };
        let bucket = if let Some(spare) = self.spare.pop() {
            *self.buckets.get_mut(spare) = fresh;
            spare
        } else {
            self.bucket_nodes += 1;
            self.buckets.insert(fresh)
        };
        match after {
            Some(at) => self.buckets.insert_after(&mut self.order, at, bucket),
            None => self.buckets.push_front(&mut self.order, bucket),
        }
        bucket
    }

    /// Keeps a bucket node per member plus one, so bumps never allocate.
    fn grow(&mut self) {
        while self.bucket_nodes < self.members.len() + 1 {
            let spare = self.buckets.insert(Bucket {
                frequency: 0,
                members: List::new(),
            });
            self.spare.push(spare);
            self.bucket_nodes += 1;
        }
        self.spare.reserve(self.bucket_nodes - self.spare.len());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn least_frequent_first_ties_by_arrival_order() {
        let mut buckets = FreqBuckets::default();
        let na = buckets.insert(10, 1);
        let nb = buckets.insert(11, 1);
        let nc = buckets.insert(12, 1);
        assert_eq!(
            (buckets.oldest_of_least(), buckets.newest_of_least()),
            (Some(10), Some(12))
        );
        buckets.bump(na);
        assert_eq!(
            (buckets.oldest_of_least(), buckets.newest_of_least()),
            (Some(11), Some(12))
        );
        buckets.bump(nb);
        buckets.bump(nc);
        // All at 2, in the order they got there: a, b, c.
        assert_eq!(
            (buckets.oldest_of_least(), buckets.newest_of_least()),
            (Some(10), Some(12))
        );
        assert_eq!(buckets.bump(nb), 3);
        assert_eq!(buckets.remove(na), 2);
        assert_eq!(
            (buckets.oldest_of_least(), buckets.newest_of_least()),
            (Some(12), Some(12))
        );
        // Inserting at a frequency above 1 lands between the buckets.
        let nd = buckets.insert(13, 3);
        let ne = buckets.insert(14, 2);
        assert_eq!(buckets.frequency(nd), 3);
        assert_eq!(buckets.newest_of_least(), Some(14));
        buckets.remove(nc);
        buckets.remove(ne);
        assert_eq!(
            (buckets.oldest_of_least(), buckets.newest_of_least()),
            (Some(11), Some(13))
        );
        buckets.remove(nb);
        buckets.remove(nd);
        assert!(buckets.is_empty() && buckets.oldest_of_least().is_none());
    }
}
