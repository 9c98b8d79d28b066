//! One shard of the tier: the blocks whose hash falls in it, their slots,
//! their policy instance, and the bookkeeping the crash rules need.
//!
//! The map holds every cached block of the shard: its slot, with
//! [`EVICTING`] set while the policy has let it go but its dirty data is
//! still being written back (it is still read from the cache then), or
//! [`LOADING`] while a read miss the policy admitted fetches it (the policy
//! decides at the lookup, block by block in request order, exactly as `cairn
//! sim` does; the data is installed after). Every block the policy holds is
//! in the map without `EVICTING`, and the other way round (invariant 1 of
//! [`Shard::verify`]).

use cairn_policy::{Access, Admission, NEVER, Occupancy, Op, Policy};

use crate::device::DeviceError;

use super::Inner;
use super::format::{Record, WORD_DIRTY, WORD_VALID};
use super::journal::JournalGuard;
use super::metrics::Counters;
use super::slots::{WORD_WRITTEN, word_block};

/// A map value's flag: evicted by the policy, dirty, being written back.
pub(super) const EVICTING: u32 = 1 << 31;
/// A map value: admitted on a read miss, its data on the way. A write or a
/// drop that replaces it makes the reader's install give up. (No slot has
/// this number: the geometry keeps slots below 2^31 − 1.)
pub(super) const LOADING: u32 = EVICTING - 1;

/// The slot a map value names, if it names one.
#[inline]
pub(super) fn slot_of(v: u32) -> Option<u32> {
    (v != LOADING).then_some(v & !EVICTING)
}

/// A shard's state, behind its mutex.
pub(super) struct Shard {
    /// Cached block → slot (| [`EVICTING`]).
    pub map: hashbrown::HashMap<u64, u32>,
    pub policy: Box<dyn Policy>,
    /// The promotion filter (none: promote every miss).
    pub admission: Option<Box<dyn Admission>>,
    /// Dirty blocks whose data the backing device holds, not yet flushed:
    /// (block, slot, backing epoch of the write). Clean once that epoch is
    /// durable.
    pub written: Vec<(u64, u32, u64)>,
    /// Dirty copies a write to the backing device superseded: (block, slot,
    /// backing epoch of that write). Out of the map at once (reads go to
    /// the backing device); the `Drop` record waits until that write is
    /// durable, or a crash could leave neither copy (the drop durable, the
    /// backing write lost).
    pub dropping: Vec<(u64, u32, u64)>,
    /// Blocks whose clean copy was dropped by a record not yet durable: a
    /// backing write of one waits until the journal is durable through the
    /// sequence given (else a crash could bring the stale copy back).
    pub hazards: hashbrown::HashMap<u64, u64>,
    /// Blocks written to the backing device and not yet flushed there (the
    /// backing epoch of the write; `u64::MAX` while in flight): a promotion
    /// of one is recorded dirty, so a crash cannot leave a clean copy of
    /// data the backing device lost.
    pub pending: hashbrown::HashMap<u64, u64>,
    /// Bumped before and after every client write that goes to the backing
    /// device: a promotion whose lookup saw another value gives up (its
    /// backing read may have raced the write).
    pub backing_writes: u64,
    /// Scratch for the policy's victims.
    pub victims: Vec<u64>,
    /// Logical time: accesses so far.
    pub time: u64,
}

/// A dirty block the policy evicted: written back before its slot is freed.
pub(super) type Evicted = (u64, u32);

impl Shard {
    pub(super) fn new(policy: Box<dyn Policy>, admission: Option<Box<dyn Admission>>) -> Self {
        Self {
            map: hashbrown::HashMap::new(),
            policy,
            admission,
            written: Vec::new(),
            dropping: Vec::new(),
            hazards: hashbrown::HashMap::new(),
            pending: hashbrown::HashMap::new(),
            backing_writes: 0,
            victims: Vec::new(),
            time: 0,
        }
    }

    /// The policy's access for `block`.
    pub(super) fn access(&mut self, block: u64, size: u32, op: Op) -> Access {
        let time = self.time;
        self.time += 1;
        Access {
            key: block,
            size,
            op,
            object: 0,
            block,
            group: 0,
            time,
            next: NEVER,
        }
    }

    /// Shows the filter an access the policy looked up.
    pub(super) fn record(&mut self, access: &Access, hit: bool) {
        if let Some(filter) = self.admission.as_mut() {
            filter.record(access, hit);
        }
    }

    /// Whether a read miss may be promoted (the filter's say, counting it).
    pub(super) fn promote(&mut self, access: &Access) -> bool {
        let occupancy = Occupancy {
            used: self.policy.used(),
            limit: self.policy.capacity().limit(),
        };
        self.admission
            .as_mut()
            .is_none_or(|filter| filter.admit(access, occupancy))
    }

    /// Checks invariant 1: the policy holds exactly the map's blocks that
    /// are not evicting.
    pub(super) fn verify(&self) -> Result<(), String> {
        let held = self.map.values().filter(|&&v| v & EVICTING == 0).count();
        if held != self.policy.len() {
            return Err(format!(
                "invariant 1: the map holds {held} blocks, the policy {}",
                self.policy.len()
            ));
        }
        for (&block, &v) in &self.map {
            if (v & EVICTING == 0) != self.policy.contains(block) {
                return Err(format!(
                    "invariant 1: block {block} (slot {}, evicting {}) disagrees with the policy",
                    v & !EVICTING,
                    v & EVICTING != 0
                ));
            }
        }
        Ok(())
    }
}

impl Inner {
    /// Records that `slot` now holds `block` (its data already written):
    /// the journal record, the table, the map. Whatever slot held `block`
    /// before is released. Returns the record's journal sequence and whether
    /// the block was cached clean before (a backing write of it must then
    /// wait for that sequence to be durable).
    pub(super) fn install(
        &self,
        sh: &mut Shard,
        j: &mut JournalGuard<'_>,
        (block, slot, crc): (u64, u32, u32),
        dirty: bool,
    ) -> Result<(u64, bool), DeviceError> {
        let seq = j.append(
            &Record::Map {
                slot,
                block,
                crc,
                dirty,
            },
            &self.table,
        )?;
        let old = sh.map.insert(block, slot);
        let stamp = self.stamp();
        self.table.set(slot, block, dirty, crc, stamp);
        Counters::add(&self.counters.cached, 1);
        if dirty {
            Counters::add(&self.counters.dirty, 1);
        }
        let mut was_clean = false;
        if let Some(old_slot) = old.and_then(slot_of) {
            let word = self.table.word(old_slot);
            strict_assert!(word & WORD_VALID != 0 && word_block(word) == block);
            was_clean = word & WORD_DIRTY == 0;
            if was_clean {
                // Until this record is durable, a crash brings the clean
                // copy back: a backing write of the block waits for it.
                let hazard = sh.hazards.entry(block).or_insert(0);
                *hazard = (*hazard).max(seq);
            }
            self.forget(old_slot, word, seq);
        }
        // A superseded dirty copy waiting for its drop: this record
        // supersedes it too (and the table never names a block twice).
        if let Some(at) = sh.dropping.iter().position(|d| d.0 == block) {
            let (_, old_slot, _) = sh.dropping.swap_remove(at);
            let word = self.table.word(old_slot);
            if word & WORD_VALID != 0 && word_block(word) == block {
                self.forget(old_slot, word, seq);
            }
        }
        Ok((seq, was_clean))
    }

    /// Empties a slot the journal no longer names (superseded or dropped by
    /// the record at `seq`) and gives it back.
    fn forget(&self, slot: u32, word: u64, seq: u64) {
        self.table.clear(slot);
        Counters::sub(&self.counters.cached, 1);
        if word & WORD_DIRTY != 0 {
            Counters::sub(&self.counters.dirty, 1);
        }
        self.buckets.release(slot, seq);
    }

    /// Drops the copy of `block` in `slot`, if the table still names it
    /// there (its map entry is gone already).
    pub(super) fn drop_slot(
        &self,
        j: &mut JournalGuard<'_>,
        block: u64,
        slot: u32,
    ) -> Result<(), DeviceError> {
        let word = self.table.word(slot);
        if word & WORD_VALID == 0 || word_block(word) != block {
            return Ok(());
        }
        let seq = j.append(&Record::Drop { slot, block }, &self.table)?;
        self.forget(slot, word, seq);
        Ok(())
    }

    /// Drops `block` from the cache (not from the policy: the caller does
    /// that when it still holds it). Returns (slot, word before, sequence of
    /// the record), or `None` when it was not cached.
    pub(super) fn drop_block(
        &self,
        sh: &mut Shard,
        j: &mut JournalGuard<'_>,
        block: u64,
    ) -> Result<Option<(u32, u64, u64)>, DeviceError> {
        let Some(&v) = sh.map.get(&block) else {
            return Ok(None);
        };
        let Some(slot) = slot_of(v) else {
            // Loading: nothing cached yet; the reader will not install it.
            sh.map.remove(&block);
            return Ok(None);
        };
        let seq = j.append(&Record::Drop { slot, block }, &self.table)?;
        sh.map.remove(&block);
        let word = self.table.word(slot);
        self.forget(slot, word, seq);
        Ok(Some((slot, word, seq)))
    }

    /// Marks a dirty block clean (the backing device durably holds it).
    pub(super) fn mark_clean(
        &self,
        j: &mut JournalGuard<'_>,
        block: u64,
        slot: u32,
    ) -> Result<(), DeviceError> {
        j.append(&Record::Clean { slot, block }, &self.table)?;
        self.table.set_state(slot, false, false);
        Counters::sub(&self.counters.dirty, 1);
        Ok(())
    }

    /// Deals with the policy's victims after an admit: a clean one is
    /// dropped at once (a hazard until the drop is durable); a dirty one is
    /// marked evicting and returned in `evicted`, to be written back (by the
    /// caller, once it holds no lock) before its slot is freed.
    pub(super) fn evict_victims(
        &self,
        sh: &mut Shard,
        j: &mut JournalGuard<'_>,
        evicted: &mut Vec<Evicted>,
    ) -> Result<(), DeviceError> {
        let mut victims = std::mem::take(&mut sh.victims);
        let mut result = Ok(());
        for &victim in &victims {
            let Some(&v) = sh.map.get(&victim) else {
                strict_assert!(
                    false,
                    "the policy evicted block {victim}, which is not cached"
                );
                continue;
            };
            let Some(slot) = slot_of(v) else {
                // Evicted while loading: the reader will not install it.
                sh.map.remove(&victim);
                continue;
            };
            let word = self.table.word(slot);
            if word & WORD_DIRTY != 0 {
                sh.map.insert(victim, slot | EVICTING);
                evicted.push((victim, slot));
                Counters::add(&self.counters.dirty_evictions, 1);
            } else {
                match self.drop_block(sh, j, victim) {
                    Ok(Some((_, _, seq))) => {
                        sh.hazards.insert(victim, seq);
                    }
                    Ok(None) => {}
                    Err(e) => {
                        result = Err(e);
                        break;
                    }
                }
            }
        }
        victims.clear();
        sh.victims = victims;
        result
    }

    /// The journal sequence a backing write of `block` must wait for:
    /// its clean copy's drop, if that is not yet durable.
    pub(super) fn hazard(&self, sh: &Shard, block: u64) -> u64 {
        match sh.hazards.get(&block) {
            Some(&seq) if seq > self.journal.durable() => seq,
            _ => 0,
        }
    }

    /// Whether `word` is a dirty block whose data is not yet on the backing
    /// device at all.
    pub(super) fn needs_writeback(word: u64) -> bool {
        word & (WORD_VALID | WORD_DIRTY | WORD_WRITTEN) == WORD_VALID | WORD_DIRTY
    }
}
