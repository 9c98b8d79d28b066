//! The hand-down (see the module docs of [`crate::cache`]): over a backend
//! that takes demotions (an exclusive spill), every block the cache drops is
//! handed to [`Backend::demote`] by a thread of its own, and stays in its
//! shard's `in_transit` table until the level below agrees with it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, MutexGuard};

use cairn_store::BlockRef;

use super::{
    BLOCK_INDEX_BITS, Demoter, Dropped, FileCache, HandDown, Shard, Slot, Transit, cell_of, lock,
};
use crate::backend::Backend;
use crate::limits::DEMOTE_QUEUE;

impl<B: Backend + 'static> Demoter<B> {
    /// Starts the hand-down's thread.
    pub(super) fn start(hand: Arc<HandDown<B>>) -> Self {
        let (queue, batches) = std::sync::mpsc::sync_channel::<Dropped>(DEMOTE_QUEUE);
        let queued = Arc::new(AtomicU64::new(0));
        let thread = {
            let (hand, queued) = (Arc::clone(&hand), Arc::clone(&queued));
            std::thread::Builder::new()
                .name("cairn-demote".into())
                .spawn(move || {
                    while let Ok(batch) = batches.recv() {
                        let n = batch.len() as u64;
                        hand.hand_down(batch, true);
                        queued.fetch_sub(n, Ordering::AcqRel);
                    }
                })
                .ok()
        };
        Demoter {
            hand,
            queue: thread.is_some().then_some(queue),
            queued,
            thread,
        }
    }
}

impl<B: Backend> HandDown<B> {
    /// Hands blocks a shard dropped to the backend ([`Backend::demote`]),
    /// each named by its object's key and version; a block of a version no
    /// longer numbered is not handed down.
    ///
    /// With `in_transit`, each block's entry there is this call's until the
    /// level below agrees with it: the block is handed down, or, if a reader
    /// took it back meanwhile, retracted ([`Backend::retract`]); the entry
    /// goes only when what was last done still matches it (a block taken
    /// back and dropped again while this ran is handed down again). So a
    /// block is never in neither level, and never in both for long.
    fn hand_down(&self, demoted: Dropped, in_transit: bool) {
        if demoted.is_empty() {
            return;
        }
        let index_mask = (1u64 << BLOCK_INDEX_BITS) - 1;
        for (cache_key, block) in demoted {
            let number = cache_key >> BLOCK_INDEX_BITS;
            let offset = (cache_key & index_mask) << self.block_shift;
            let name = lock(&self.objects)
                .names
                .as_ref()
                .and_then(|names| names.get(&number).cloned());
            if !in_transit {
                if let Some((key, info)) = &name {
                    self.backend.demote(key, *info, offset, &block);
                }
                continue;
            }
            let cell = &self.shards[cell_of(cache_key, number, self.by_object, self.shard_mask)];
            loop {
                let state = lock(&cell.shard)
                    .in_transit
                    .get(&cache_key)
                    .map(|t| (t.block.clone(), t.taken_back));
                let Some((bytes, taken_back)) = state else {
                    break;
                };
                if let Some((key, info)) = &name {
                    if taken_back {
                        self.backend.retract(key, *info, offset, bytes.len() as u64);
                    } else {
                        self.backend.demote(key, *info, offset, &bytes);
                    }
                }
                let mut shard = lock(&cell.shard);
                if shard
                    .in_transit
                    .get(&cache_key)
                    .is_none_or(|t| t.taken_back == taken_back)
                {
                    shard.in_transit.remove(&cache_key);
                    break;
                }
            }
        }
    }
}

impl<B: Backend> FileCache<B> {
    /// Waits until the hand-down's thread has handed down every block
    /// queued for it (for a clean stop, tests and benchmarks).
    pub fn wait_for_demotions(&self) {
        if let Some(demoter) = &self.demoter {
            while demoter.queued.load(Ordering::Acquire) > 0 {
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
        }
    }

    /// Unlocks `shard`, then hands down what its admits dropped (nothing
    /// without a backend that takes demotions).
    pub(super) fn release(&self, mut shard: MutexGuard<'_, Shard>) {
        let dropped = shard.take_demoted();
        drop(shard);
        self.hand_down(dropped);
    }

    /// Hands blocks a shard dropped to the level below: queued for the
    /// hand-down's thread, or, with its queue full, here.
    fn hand_down(&self, dropped: Dropped) {
        if dropped.is_empty() {
            return;
        }
        let Some(demoter) = &self.demoter else {
            return;
        };
        let n = dropped.len() as u64;
        demoter.queued.fetch_add(n, Ordering::AcqRel);
        let refused = match &demoter.queue {
            Some(queue) => queue.try_send(dropped).err().map(|e| match e {
                std::sync::mpsc::TrySendError::Full(d)
                | std::sync::mpsc::TrySendError::Disconnected(d) => d,
            }),
            None => Some(dropped),
        };
        if let Some(dropped) = refused {
            demoter.hand.hand_down(dropped, true);
            demoter.queued.fetch_sub(n, Ordering::AcqRel);
        }
    }

    /// Hands every block the cache holds to the backend, if it takes them
    /// (an exclusive spill, at a clean stop, so that a restart finds them
    /// there); the cache keeps them. Returns how many were handed down.
    pub fn demote_all(&self) -> u64 {
        let Some(demoter) = &self.demoter else {
            return 0;
        };
        self.wait_for_demotions();
        let mut count = 0;
        for cell in self.shards.iter() {
            let held: Vec<(u64, BlockRef)> = lock(&cell.shard)
                .map
                .iter()
                .filter_map(|(&key, slot)| match slot {
                    Slot::Ready(block) | Slot::Prefetched(block) => Some((key, block.clone())),
                    Slot::Loading(_) => None,
                })
                .collect();
            count += held.len() as u64;
            demoter.hand.hand_down(held, false);
        }
        count
    }
}

impl Shard {
    /// The blocks the admits so far dropped, for [`FileCache::release`]
    /// once the lock is released (none without a backend that takes them).
    fn take_demoted(&mut self) -> Vec<(u64, BlockRef)> {
        self.demoted
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// With a backend that takes demotions: `block` (of `key`) leaves the
    /// cache. Queued to be handed down, unless a hand-down of it is still
    /// running, which then hands it down again.
    pub(super) fn going_down(&mut self, key: u64, block: &BlockRef) {
        let Some(demoted) = &mut self.demoted else {
            return;
        };
        if let Some(transit) = self.in_transit.get_mut(&key) {
            transit.taken_back = false;
            transit.block = block.clone();
        } else {
            self.in_transit.insert(
                key,
                Transit {
                    block: block.clone(),
                    taken_back: false,
                },
            );
            demoted.push((key, block.clone()));
        }
    }
}
