//! Installing, dropping and evicting cached blocks: each one changes the
//! journal, the slot table and a shard's map together, in that order (the
//! record first, so the table never runs ahead of what the journal says).

use crate::device::DeviceError;

use super::Inner;
use super::format::{Record, WORD_DIRTY, WORD_VALID};
use super::journal::JournalGuard;
use super::metrics::Counters;
use super::shard::{EVICTING, Evicted, Shard, slot_of};
use super::slots::{WORD_WRITTEN, word_block};

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
                        Counters::add(&self.counters.clean_evictions, 1);
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
