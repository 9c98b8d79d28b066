//! The DRAM index of the NV write cache's slots ([`NvIndex`]): which slot
//! holds which block, oldest first, which are dirty, destaged (awaiting the
//! flush that makes their segment durable), superseded (awaiting a clear) or
//! held (a queued segment write still copies them).
//!
//! # Invariants
//!
//! 1. A slot is in exactly one of: free, dirty or destaged (`meta.sequence`
//!    ≠ 0, indexed by `of`), superseded or held (cleared or to be cleared).
//! 2. `of[l] == slot` implies `meta[slot].logical == l` and a nonzero
//!    sequence: the newest copy of `l` in the cache.
//! 3. `dirty` counts the indexed slots not yet destaged.
//! 4. A superseded slot is cleared only after its successor is durable
//!    (after the fence of the write that superseded it, or after a sync on a
//!    deferring region), and before any destaged slot is cleared.

use std::collections::VecDeque;
use std::sync::Arc;

use hashbrown::HashMap;

use super::error::LogDiskError;
use super::format::{self, SummaryEntry};
use super::metrics::Metrics;
use super::nv::{self, NvCache};

/// Per NV slot: the block it holds (sequence 0 = free or awaiting clear).
#[derive(Clone, Copy, Default)]
pub(super) struct SlotMeta {
    pub logical: u64,
    pub sequence: u64,
    pub crc: u32,
    /// Destaged: its segment is written but not yet flushed, so the slot is
    /// still the durable copy (and still serves reads) until the next flush.
    pub awaiting: bool,
    /// The number of the queued segment write that copies this slot's data
    /// (0: none): the slot is not reused before that write is done, even if
    /// superseded meanwhile (see [`NvIndex::release`]).
    pub write: u64,
}

/// The NV cache and its DRAM index.
pub(super) struct NvIndex {
    /// Shared with the background writer, which copies destaged slots into
    /// their segment write.
    pub cache: Arc<NvCache>,
    pub meta: Vec<SlotMeta>,
    pub of: HashMap<u64, u32>,
    pub free: Vec<u32>,
    /// (sequence, slot), oldest first; entries whose slot moved on are skipped.
    pub order: VecDeque<(u64, u32)>,
    pub dirty: u32,
    /// Superseded slots, to clear in the next persist (after the fence that
    /// made their successors durable).
    pub superseded: Vec<u32>,
    /// (sequence, slot) destaged since the last device flush; cleared and
    /// freed by the next one (entries whose slot moved on are skipped).
    pub awaiting: Vec<(u64, u32)>,
    ranges: Vec<(u64, u64)>,
    /// Superseded slots (entries cleared) that a queued segment write still
    /// has to copy: (write number, slot), freed when that write is done.
    held: Vec<(u64, u32)>,
    /// A deferring cache ([`NvCache::defers`]) holds writes staged since the
    /// last [`NvIndex::sync`].
    unsynced: bool,
}

impl NvIndex {
    /// The index of `cache` after a crash or a clean stop: the newest valid
    /// slot of each block below `logical_blocks` is dirty, older ones are
    /// superseded. Returns the index, the dirty blocks found and the largest
    /// sequence seen.
    pub fn recover(cache: NvCache, logical_blocks: u64) -> Result<(Self, u32, u64), LogDiskError> {
        let found = cache.scan()?;
        let slots = cache.slots() as usize;
        let mut nv = Self {
            cache: Arc::new(cache),
            meta: vec![SlotMeta::default(); slots],
            of: HashMap::with_capacity(slots),
            free: Vec::with_capacity(slots),
            order: VecDeque::with_capacity(2 * slots),
            dirty: 0,
            superseded: Vec::new(),
            awaiting: Vec::new(),
            ranges: Vec::with_capacity(64),
            held: Vec::new(),
            unsynced: false,
        };
        let mut max_sequence = 0;
        let mut newest: HashMap<u64, nv::Recovered> = HashMap::new();
        for r in found {
            if r.logical >= logical_blocks {
                continue;
            }
            max_sequence = max_sequence.max(r.sequence);
            match newest.get(&r.logical) {
                Some(have) if have.sequence >= r.sequence => nv.superseded.push(r.slot),
                _ => {
                    if let Some(old) = newest.insert(r.logical, r) {
                        nv.superseded.push(old.slot);
                    }
                }
            }
        }
        let mut live: Vec<_> = newest.into_values().collect();
        live.sort_unstable_by_key(|r| r.sequence);
        for r in &live {
            assert!(r.sequence > 0, "a valid slot has a sequence");
            nv.meta[r.slot as usize] = SlotMeta {
                logical: r.logical,
                sequence: r.sequence,
                crc: r.crc,
                awaiting: false,
                write: 0,
            };
            nv.of.insert(r.logical, r.slot);
            nv.order.push_back((r.sequence, r.slot));
        }
        nv.dirty = live.len() as u32;
        for slot in (0..slots as u32).rev() {
            if nv.meta[slot as usize].sequence == 0 && !nv.superseded.contains(&slot) {
                nv.free.push(slot);
            }
        }
        strict_assert_eq!(
            nv.free.len() + nv.superseded.len() + live.len(),
            slots,
            "invariant 1"
        );
        Ok((nv, live.len() as u32, max_sequence))
    }

    /// Makes every staged write durable, where the cache defers that to a
    /// sync (one `msync` of the region: the writes since the last one, in one
    /// disk flush); nothing to do otherwise.
    pub fn sync(&mut self) -> Result<(), LogDiskError> {
        if self.unsynced {
            self.cache.sync()?;
            self.unsynced = false;
        }
        Ok(())
    }

    /// Stages blocks of `data` (whole blocks, the first `first`) into free
    /// slots until either runs out, taking them from `blocks`; each gets the
    /// next `sequence`. Persisted with one fence, after the clears of the
    /// slots earlier writes superseded — or, on a deferring cache, left for
    /// the next sync. Returns whether it staged anything.
    pub fn stage<'d>(
        &mut self,
        first: u64,
        blocks: &mut std::iter::Peekable<impl Iterator<Item = (usize, &'d [u8])>>,
        sequence: &mut u64,
        metrics: &mut Metrics,
        writes_done: u64,
    ) -> Result<(), LogDiskError> {
        let sequence_base = *sequence;
        let mut ranges = std::mem::take(&mut self.ranges);
        ranges.clear();
        // Clears of slots superseded by earlier, already fenced writes
        // (a deferring cache clears them only after a sync made their
        // successors durable).
        let deferred = self.cache.defers();
        let clearing = if deferred {
            Vec::new()
        } else {
            std::mem::take(&mut self.superseded)
        };
        for &slot in &clearing {
            self.cache.stage_clear(slot, &mut ranges)?;
        }
        let mut now_superseded = Vec::new();
        while let Some(&(i, block)) = blocks.peek() {
            let Some(slot) = self.free.pop() else { break };
            strict_assert_eq!(
                self.meta[slot as usize].sequence,
                0,
                "invariant 1: slot {slot} free"
            );
            blocks.next();
            let logical = first + i as u64;
            *sequence += 1;
            let crc = format::crc32c(block);
            self.cache
                .stage(slot, logical, *sequence, crc, block, &mut ranges)?;
            self.meta[slot as usize] = SlotMeta {
                logical,
                sequence: *sequence,
                crc,
                awaiting: false,
                write: 0,
            };
            self.order.push_back((*sequence, slot));
            metrics.client_blocks += 1;
            metrics.nv_writes += 1;
            match self.of.insert(logical, slot) {
                Some(old) => {
                    let was = &mut self.meta[old as usize];
                    strict_assert_eq!(was.logical, logical, "invariant 2");
                    if was.awaiting {
                        // Already destaged: not absorbed, a new dirty block.
                        self.dirty += 1;
                    } else {
                        metrics.nv_write_hits += 1;
                    }
                    was.sequence = 0;
                    now_superseded.push(old);
                }
                None => self.dirty += 1,
            }
        }
        assert!(
            *sequence > sequence_base,
            "staging took no block: no free slot"
        );
        if deferred {
            // Durable at the next sync (a flush, or before any clear).
            self.unsynced = true;
            self.superseded.append(&mut now_superseded);
        } else {
            self.cache.persist(&ranges)?;
            self.release(&clearing, writes_done);
            self.superseded = now_superseded;
        }
        self.ranges = ranges;
        if self.order.len() > 4 * self.meta.len() + 64 {
            let meta = &self.meta;
            self.order
                .retain(|&(seq, slot)| meta[slot as usize].sequence == seq);
        }
        Ok(())
    }

    /// Whether the dirty slots pass the destage threshold: a `threshold`
    /// fraction of the slots, and at least one segment write's worth
    /// (`per_write`), short of a full cache.
    pub fn over_threshold(&self, threshold: f64, per_write: u32) -> bool {
        let slots = self.cache.slots();
        let want = ((f64::from(slots) * threshold) as u32).max(per_write);
        self.dirty > want.min(slots - 1)
    }

    /// Clears every superseded slot now (after a sync, so their successors
    /// are durable first) and frees it, or holds it for the queued write
    /// that still copies it.
    pub fn clear_superseded(&mut self, writes_done: u64) -> Result<(), LogDiskError> {
        self.sync()?;
        let mut ranges = std::mem::take(&mut self.ranges);
        ranges.clear();
        for &slot in &self.superseded {
            self.cache.stage_clear(slot, &mut ranges)?;
        }
        self.cache.persist(&ranges)?;
        self.ranges = ranges;
        self.release_superseded(writes_done);
        Ok(())
    }

    /// Takes up to `take` of the oldest dirty blocks for a segment write:
    /// their entries into `entries`, `(block index in the write + 1, slot)`
    /// into `fill`, their slots into `slots`.
    pub fn take_oldest(
        &mut self,
        take: u32,
        entries: &mut Vec<SummaryEntry>,
        fill: &mut Vec<(u32, u32)>,
        slots: &mut Vec<u32>,
    ) {
        while (entries.len() as u32) < take {
            let Some((seq, slot)) = self.order.pop_front() else {
                break;
            };
            let m = self.meta[slot as usize];
            if m.sequence != seq {
                continue;
            }
            strict_assert!(!m.awaiting, "a destaged slot is not taken again");
            // The data is copied into the segment write later: by the
            // background writer, or by the log before a write in this
            // thread.
            fill.push((entries.len() as u32 + 1, slot));
            slots.push(slot);
            entries.push(SummaryEntry {
                logical: m.logical,
                crc: m.crc,
            });
        }
        strict_assert_eq!(fill.len(), slots.len(), "a fill per slot taken");
    }

    /// A segment write of `slots` failed to be queued: they are still dirty,
    /// and the oldest again.
    pub fn put_back(&mut self, slots: &[u32]) {
        strict_assert!(
            slots.iter().all(|&s| !self.meta[s as usize].awaiting),
            "a destaged slot put back"
        );
        for &slot in slots.iter().rev() {
            self.order
                .push_front((self.meta[slot as usize].sequence, slot));
        }
    }

    /// `slots` are in queued segment write number `write`: they stay valid
    /// (and keep serving reads) until a device flush makes it durable.
    pub fn destaged(&mut self, slots: &[u32], write: u64) {
        for &slot in slots {
            let m = &mut self.meta[slot as usize];
            strict_assert!(
                m.sequence != 0 && !m.awaiting,
                "invariant 3: slot {slot} dirty"
            );
            m.awaiting = true;
            m.write = write;
            self.awaiting.push((m.sequence, slot));
        }
        assert!(
            self.dirty >= slots.len() as u32,
            "invariant 3: destaged more than dirty"
        );
        self.dirty -= slots.len() as u32;
    }

    /// A trim of `logical`: its slot, if any, is superseded with no
    /// successor (cleared by the next persist or device flush).
    pub fn trim(&mut self, logical: u64) {
        if let Some(slot) = self.of.remove(&logical) {
            let m = &mut self.meta[slot as usize];
            if !m.awaiting {
                self.dirty -= 1;
            }
            m.sequence = 0;
            self.superseded.push(slot);
        }
    }

    /// After a device flush that covered the first `awaiting_upto` destaged
    /// slots: superseded slots are cleared first (an older slot of a block
    /// must never outlive its newest one), then those destaged slots, and
    /// both freed. `writes_done`: segment writes done, for held slots.
    pub fn retire(&mut self, awaiting_upto: usize, writes_done: u64) -> Result<(), LogDiskError> {
        if awaiting_upto == 0 {
            return Ok(());
        }
        // Writes staged but not yet synced are made durable before any slot
        // is cleared (a superseded slot's successor must be durable first),
        // and superseded slots are cleared before destaged ones. A slot
        // superseded under a segment write queued after this flush is held
        // until that write has copied it.
        self.clear_superseded(writes_done)?;
        let mut ranges = std::mem::take(&mut self.ranges);
        ranges.clear();
        let mut awaiting = std::mem::take(&mut self.awaiting);
        let upto = awaiting_upto.min(awaiting.len());
        // Slots superseded (or freed and reused) since they were destaged
        // are skipped: their entry no longer holds that write.
        let meta = &self.meta;
        let current = |&&(sequence, slot): &&(u64, u32)| meta[slot as usize].sequence == sequence;
        for &(_, slot) in awaiting[..upto].iter().filter(current) {
            self.cache.stage_clear(slot, &mut ranges)?;
        }
        self.cache.persist(&ranges)?;
        self.ranges = ranges;
        for &(sequence, slot) in &awaiting[..upto] {
            let m = &mut self.meta[slot as usize];
            if m.sequence != sequence {
                continue;
            }
            strict_assert!(m.awaiting, "invariant 1: retired slot {slot} was destaged");
            if self.of.get(&m.logical) == Some(&slot) {
                self.of.remove(&m.logical);
            }
            *m = SlotMeta::default();
            self.free.push(slot);
        }
        awaiting.drain(..upto);
        self.awaiting = awaiting;
        Ok(())
    }

    /// Frees superseded `slots`, whose entries are cleared and fenced: at
    /// once, or, for a slot that a queued segment write has not copied yet
    /// (write number above `writes_done`), when that write is done — a new
    /// block staged into it would otherwise be copied into the segment in
    /// place of the one its summary names.
    fn release(&mut self, slots: &[u32], writes_done: u64) {
        for &slot in slots {
            let write = self.meta[slot as usize].write;
            if write > writes_done {
                self.held.push((write, slot));
            } else {
                self.free.push(slot);
            }
        }
    }

    /// [`NvIndex::release`] of every superseded slot (their clears already
    /// fenced), emptying the list.
    fn release_superseded(&mut self, writes_done: u64) {
        let mut superseded = std::mem::take(&mut self.superseded);
        self.release(&superseded, writes_done);
        superseded.clear();
        self.superseded = superseded;
    }

    /// Segment writes up to `writes_done` are done: free the slots held for them.
    pub fn unhold(&mut self, writes_done: u64) {
        let free = &mut self.free;
        self.held.retain(|&(write, slot)| {
            if write <= writes_done {
                free.push(slot);
                false
            } else {
                true
            }
        });
    }
}
