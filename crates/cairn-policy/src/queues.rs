//! The three queues the S3-FIFO family shares — a small probationary queue,
//! a main queue and a ghost of keys recently evicted from small — over one
//! slab and one index ([`Queues`]). S3-FIFO, QD-LP, S3LRU and `clock2qplus` differ
//! only in how they admit, hit and evict; the bookkeeping they have in common
//! (the ghost's FIFO, removal, residency) is here once.

use crate::Capacity;
use crate::index::{KeyIndex, Keyed};
use crate::list::{Index, List, Slab};

/// Which queue a node is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Queue {
    /// The small (probationary) queue.
    Small,
    /// The main queue.
    Main,
    /// The ghost: the key only, no data.
    Ghost,
}

/// A node: a unit, or a ghost key.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Entry<X> {
    pub key: u64,
    /// Capacity charged.
    pub charge: u32,
    /// Hits counted since the unit entered its queue (each policy caps it).
    pub freq: u16,
    pub queue: Queue,
    /// What a policy keeps beside (Clock2Q+: when the unit entered small).
    pub stamp: X,
}

impl<X> Keyed for Entry<X> {
    fn key(&self) -> u64 {
        self.key
    }
}

/// The queues, their budgets and the shared bookkeeping.
#[derive(Debug)]
pub(crate) struct Queues<X> {
    pub small_limit: u64,
    pub main_limit: u64,
    pub ghost_limit: u64,
    pub small_used: u64,
    pub main_used: u64,
    pub ghost_used: u64,
    pub map: KeyIndex,
    pub slab: Slab<Entry<X>>,
    pub small: List,
    pub main: List,
    pub ghost: List,
}

impl<X: Copy> Queues<X> {
    /// Empty queues: small holds `small_limit`, main the rest of `capacity`,
    /// the ghost `ghost_limit`.
    pub fn new(capacity: Capacity, small_limit: u64, ghost_limit: u64) -> Self {
        Self {
            small_limit,
            main_limit: capacity.limit() - small_limit,
            ghost_limit,
            small_used: 0,
            main_used: 0,
            ghost_used: 0,
            map: KeyIndex::default(),
            slab: Slab::new(),
            small: List::new(),
            main: List::new(),
            ghost: List::new(),
        }
    }

    /// Frees the (already unlinked) node `index` and its key.
    pub fn free(&mut self, index: Index) {
        let key = self.slab.get(index).key;
        self.map.remove(key, &self.slab);
        self.slab.remove(index);
    }

    /// Drops the ghost entry in node `index`.
    pub fn remove_ghost(&mut self, index: Index) {
        self.slab.unlink(&mut self.ghost, index);
        let charge = self.slab.get(index).charge;
        self.free(index);
        self.ghost_used -= u64::from(charge);
    }

    /// Turns the (already unlinked) node `index` into a ghost entry at the
    /// ghost's head, dropping the oldest ghosts to make room, or frees it
    /// when the ghost cannot hold it (libCacheSim's ghost FIFO `get`).
    pub fn insert_ghost(&mut self, index: Index) {
        let charge = u64::from(self.slab.get(index).charge);
        if charge > self.ghost_limit {
            self.free(index);
            return;
        }
        while self.ghost_used + charge > self.ghost_limit {
            let Some(oldest) = self.ghost.back() else {
                break;
            };
            self.remove_ghost(oldest);
        }
        let entry = self.slab.get_mut(index);
        entry.queue = Queue::Ghost;
        entry.freq = 0;
        self.ghost_used += charge;
        self.slab.push_front(&mut self.ghost, index);
    }

    /// Removes a resident `key` (a ghost stays); whether it was resident.
    pub fn remove(&mut self, key: u64) -> bool {
        let Some(index) = self.map.get(key, &self.slab) else {
            return false;
        };
        let entry = *self.slab.get(index);
        let charge = u64::from(entry.charge);
        match entry.queue {
            Queue::Ghost => return false,
            Queue::Small => {
                self.slab.unlink(&mut self.small, index);
                self.small_used -= charge;
            }
            Queue::Main => {
                self.slab.unlink(&mut self.main, index);
                self.main_used -= charge;
            }
        }
        self.free(index);
        true
    }

    /// Whether `key` is resident (not a ghost).
    pub fn contains(&self, key: u64) -> bool {
        self.map
            .get(key, &self.slab)
            .is_some_and(|index| self.slab.get(index).queue != Queue::Ghost)
    }

    /// Resident units.
    pub fn len(&self) -> usize {
        self.small.len() + self.main.len()
    }

    /// Capacity the residents use.
    pub fn used(&self) -> u64 {
        self.small_used + self.main_used
    }
}
