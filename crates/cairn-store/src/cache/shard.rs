//! One shard of the cache: its slots, its policy instance, its frame pool and
//! its counters, all behind the shard's one mutex.

use std::sync::Arc;

use cairn_policy::{Access, KeyMap, NEVER, Op, Policy};

use super::flight::Flight;
use super::pool::FramePool;
use crate::device::Frame;

/// Finished flights kept for reuse, per shard.
const SPARE_FLIGHTS: usize = 32;

/// What the cache knows about one block.
pub(crate) enum Slot {
    /// Resident: the policy holds the key and this is its buffer.
    Ready { frame: Arc<Frame>, group: u16 },
    /// Being read by a leader; readers wait on the flight.
    Loading { flight: Arc<Flight>, group: u16 },
}

/// Per-shard, per-group counters (summed over shards by `metrics`).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Counts {
    pub(crate) hits: u64,
    pub(crate) hit_bytes: u64,
    pub(crate) misses: u64,
    pub(crate) miss_bytes: u64,
    pub(crate) prefetched: u64,
    pub(crate) coalesced: u64,
}

/// A block a leader has claimed: its slot holds `flight`, and `frame` is a
/// unique buffer to read it into.
pub(crate) struct Claim {
    pub(crate) block: u64,
    /// The block's cost group.
    pub(crate) group: u16,
    pub(crate) flight: Arc<Flight>,
    pub(crate) frame: Arc<Frame>,
}

pub(crate) struct Shard {
    pub(crate) map: KeyMap<Slot>,
    pub(crate) policy: Box<dyn Policy>,
    pub(crate) pool: FramePool,
    spare_flights: Vec<Arc<Flight>>,
    victims: Vec<u64>,
    clock: u64,
    block_size: u32,
    pub(crate) counts: Box<[Counts]>,
    /// Loads a write detached (their data was not installed).
    pub(crate) detached: u64,
}

impl Shard {
    pub(crate) fn new(
        policy: Box<dyn Policy>,
        blocks: usize,
        block_size: u32,
        groups: usize,
    ) -> Self {
        let slack = blocks / 16 + 4;
        Self {
            map: KeyMap::with_capacity(blocks + slack),
            policy,
            pool: FramePool::new(blocks + slack, block_size as usize),
            spare_flights: Vec::with_capacity(SPARE_FLIGHTS),
            victims: Vec::with_capacity(16),
            clock: 0,
            block_size,
            counts: vec![Counts::default(); groups].into_boxed_slice(),
            detached: 0,
        }
    }

    /// The policy's view of an access to `block` now.
    #[inline]
    fn access(&mut self, block: u64, group: u16) -> Access {
        self.clock += 1;
        Access {
            key: block,
            size: self.block_size,
            op: Op::Read,
            object: 0,
            block,
            group,
            time: self.clock,
            clock: 0,
            next: NEVER,
        }
    }

    /// A hit on resident `block`: tells the policy and counts it.
    #[inline]
    pub(crate) fn hit(&mut self, block: u64, group: u16) {
        let access = self.access(block, group);
        let resident = self.policy.lookup(&access);
        debug_assert!(resident, "block {block} is Ready but not in the policy");
        let counts = &mut self.counts[usize::from(group)];
        counts.hits += 1;
        counts.hit_bytes += u64::from(self.block_size);
    }

    /// A reader that waited on `block`'s flight got `frame`: if that is still
    /// the resident copy the access counts for the policy as a hit.
    pub(crate) fn coalesced(&mut self, block: u64, group: u16, frame: &Arc<Frame>) {
        if let Some(Slot::Ready {
            frame: resident,
            group,
        }) = self.map.get(&block)
            && Arc::ptr_eq(resident, frame)
        {
            let group = *group;
            let access = self.access(block, group);
            self.policy.lookup(&access);
        }
        self.counts[usize::from(group)].coalesced += 1;
    }

    /// Makes this caller the leader of `block`'s load (the slot must be
    /// empty). `prefetch`: read ahead of the request, not asked for.
    pub(crate) fn claim(&mut self, block: u64, group: u16, prefetch: bool) -> Claim {
        debug_assert!(!self.map.contains_key(&block));
        let access = self.access(block, group);
        let resident = self.policy.lookup(&access);
        debug_assert!(!resident, "block {block} has no slot but is in the policy");
        let flight = self.flight();
        self.map.insert(
            block,
            Slot::Loading {
                flight: Arc::clone(&flight),
                group,
            },
        );
        let counts = &mut self.counts[usize::from(group)];
        if prefetch {
            counts.prefetched += 1;
        } else {
            counts.misses += 1;
            counts.miss_bytes += u64::from(self.block_size);
        }
        Claim {
            block,
            group,
            flight,
            frame: self.pool.take(),
        }
    }

    /// Whether `flight` is still the load in `block`'s slot (no write
    /// detached it).
    fn owns(&self, block: u64, flight: &Arc<Flight>) -> bool {
        matches!(self.map.get(&block), Some(Slot::Loading { flight: f, .. }) if Arc::ptr_eq(f, flight))
    }

    /// The leader's read of `claim` succeeded: make it resident (if the slot
    /// is still ours and the policy admits it), evicting what the policy
    /// names. The caller completes the flight after releasing the lock.
    pub(crate) fn install(&mut self, claim: &Claim) {
        let Claim {
            block,
            group,
            flight,
            frame,
        } = claim;
        let group = *group;
        let mut installed = false;
        if self.owns(*block, flight) {
            let access = self.access(*block, group);
            let mut victims = std::mem::take(&mut self.victims);
            victims.clear();
            if self.policy.admit(&access, &mut victims) {
                self.map.insert(
                    *block,
                    Slot::Ready {
                        frame: Arc::clone(frame),
                        group,
                    },
                );
                installed = true;
            } else {
                self.map.remove(block);
            }
            for &victim in &victims {
                self.evicted(victim);
            }
            self.victims = victims;
        } else {
            self.detached += 1;
        }
        if !installed {
            // Waiters may still hold it; the pool reuses it once they drop it.
            self.pool.give(Arc::clone(frame));
        }
        self.spare(Arc::clone(flight));
    }

    /// The leader's read of `claim` failed: free the slot.
    pub(crate) fn abandon(&mut self, claim: &Claim) {
        if self.owns(claim.block, &claim.flight) {
            self.map.remove(&claim.block);
        }
        self.pool.give(Arc::clone(&claim.frame));
        self.spare(Arc::clone(&claim.flight));
    }

    /// The policy evicted `block`: drop its slot and recycle its frame.
    fn evicted(&mut self, block: u64) {
        match self.map.remove(&block) {
            Some(Slot::Ready { frame, .. }) => self.pool.give(frame),
            Some(loading @ Slot::Loading { .. }) => {
                debug_assert!(false, "the policy evicted block {block}, which is loading");
                self.map.insert(block, loading);
            }
            None => debug_assert!(false, "the policy evicted block {block}, which has no slot"),
        }
    }

    /// Drops `block`'s cached copy, if any; detaches a load in flight.
    pub(crate) fn invalidate(&mut self, block: u64) {
        match self.map.remove(&block) {
            Some(Slot::Ready { frame, .. }) => {
                let resident = self.policy.remove(block);
                debug_assert!(resident, "block {block} was Ready but not in the policy");
                self.pool.give(frame);
            }
            Some(Slot::Loading { .. }) | None => {}
        }
    }

    /// Drops every resident block's copy (loads in flight finish as
    /// usual); how many were dropped. `blocks` is scratch space.
    pub(crate) fn drop_resident(&mut self, blocks: &mut Vec<u64>) -> u64 {
        blocks.clear();
        blocks.extend(
            self.map
                .iter()
                .filter(|(_, slot)| matches!(slot, Slot::Ready { .. }))
                .map(|(&block, _)| block),
        );
        for &block in blocks.iter() {
            self.invalidate(block);
        }
        blocks.len() as u64
    }

    /// Writes `bytes` at `at` into `block`'s cached copy (copy on write: the
    /// old frame may be held by readers), or detaches a load in flight.
    /// `block_len` is the block's length in bytes. `allocate`: the group to
    /// cache a whole uncached block in (write-allocate), if any.
    pub(crate) fn update(
        &mut self,
        block: u64,
        at: usize,
        bytes: &[u8],
        block_len: usize,
        allocate: Option<u16>,
    ) {
        let Self { map, pool, .. } = self;
        match map.get_mut(&block) {
            Some(Slot::Ready { frame, .. }) => {
                let mut fresh = pool.take();
                let target = Arc::get_mut(&mut fresh)
                    .expect("the pool hands out unique frames")
                    .bytes_mut();
                if bytes.len() < block_len {
                    target[..block_len].copy_from_slice(&frame.bytes()[..block_len]);
                }
                target[at..at + bytes.len()].copy_from_slice(bytes);
                let old = std::mem::replace(frame, fresh);
                pool.give(old);
            }
            Some(Slot::Loading { .. }) => {
                map.remove(&block);
            }
            None => {
                if let Some(group) = allocate
                    && bytes.len() == block_len
                {
                    self.allocate(block, group, bytes);
                }
            }
        }
    }

    /// Caches a whole block just written (write-allocate).
    fn allocate(&mut self, block: u64, group: u16, bytes: &[u8]) {
        let access = self.access(block, group);
        let resident = self.policy.lookup(&access);
        debug_assert!(!resident, "block {block} has no slot but is in the policy");
        let mut frame = self.pool.take();
        Arc::get_mut(&mut frame)
            .expect("the pool hands out unique frames")
            .bytes_mut()[..bytes.len()]
            .copy_from_slice(bytes);
        let mut victims = std::mem::take(&mut self.victims);
        victims.clear();
        if self.policy.admit(&access, &mut victims) {
            self.map.insert(block, Slot::Ready { frame, group });
        } else {
            self.pool.give(frame);
        }
        for &victim in &victims {
            self.evicted(victim);
        }
        self.victims = victims;
    }

    /// The resident blocks in `first..end`.
    pub(crate) fn resident_in(&self, first: u64, end: u64, out: &mut Vec<u64>) {
        out.extend(
            self.map
                .keys()
                .copied()
                .filter(|b| (first..end).contains(b)),
        );
    }

    /// A pending flight nobody else holds.
    fn flight(&mut self) -> Arc<Flight> {
        if let Some(at) = self
            .spare_flights
            .iter()
            .position(|f| Arc::strong_count(f) == 1)
        {
            let flight = self.spare_flights.swap_remove(at);
            flight.reset();
            return flight;
        }
        Arc::new(Flight::new())
    }

    fn spare(&mut self, flight: Arc<Flight>) {
        if self.spare_flights.len() < SPARE_FLIGHTS {
            self.spare_flights.push(flight);
        }
    }
}
