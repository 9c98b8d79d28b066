//! The journal: every change to the slot table, as records in a ring of
//! blocks on the cache device, and the checkpoints that let the ring wrap.
//!
//! Records are appended to the *open* block in DRAM; the open block is
//! written (rewritten in place as it grows) before the request that appended
//! to it is acknowledged, so a killed process loses nothing the kernel was
//! given. [`Journal::make_durable`] makes every record appended so far
//! durable: it writes the open block, *closes* it (later records go to the
//! next block, so a durable block is never rewritten and a torn rewrite can
//! only lose records that were never flushed) and flushes the cache device,
//! one flush for every caller waiting meanwhile (group commit). Each block
//! says up to which sequence the journal was durable when it was written
//! (`flushed through`): recovery trusts the data named by records in blocks
//! up to there, and checks the CRC of the data named by later ones.
//!
//! A checkpoint writes the whole slot table as of a journal sequence to the
//! other checkpoint slot and flushes; replay then starts there, and the ring
//! positions before it may be overwritten. One is taken in the background
//! when half the ring is used, and in the foreground (holding the lock) if
//! the ring fills first.

use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};

use super::format::{
    Checkpoint, FLAG_CLEAN, Geometry, JOURNAL_HEADER, JournalHeader, Mode, RECORD, Record,
    encode_checkpoint_into, encode_record, seal_journal_block,
};
use super::slots::SlotTable;
use crate::device::{DeviceError, IoBuf, SharedDevice};

/// The journal's state behind its lock.
pub(super) struct JournalState {
    /// The open block's image.
    /// Aligned, so an `O_DIRECT` cache device takes it as it is.
    block: IoBuf,
    records: usize,
    /// The open block's sequence.
    seq: u64,
    /// The open block's image on the device is current.
    written: bool,
    /// The durable checkpoint's replay start.
    replay_from: u64,
    checkpoint_number: u64,
    flushing: bool,
    checkpointing: bool,
    /// Journal blocks written (each rewrite counts).
    pub(super) block_writes: u64,
    /// Records appended.
    pub(super) appended: u64,
    /// Checkpoints written.
    pub(super) checkpoints: u64,
}

/// The journal of one tier.
pub(super) struct Journal {
    cache: SharedDevice,
    g: Geometry,
    cache_id: u64,
    state: Mutex<JournalState>,
    done: Condvar,
    /// Every journal block up to this sequence is durable.
    durable: AtomicU64,
    /// The mode checkpoints record.
    mode: AtomicU8,
}

impl Journal {
    /// A journal whose next block is `next_seq`, after a durable checkpoint
    /// numbered `checkpoint_number` replaying from `replay_from`.
    pub(super) fn new(
        cache: SharedDevice,
        g: Geometry,
        cache_id: u64,
        (next_seq, replay_from, checkpoint_number): (u64, u64, u64),
        mode: Mode,
    ) -> Self {
        strict_assert!(next_seq >= replay_from && replay_from >= 1);
        Self {
            cache,
            g,
            cache_id,
            state: Mutex::new(JournalState {
                block: IoBuf::zeroed(g.block_size as usize),
                records: 0,
                seq: next_seq,
                written: true,
                replay_from,
                checkpoint_number,
                flushing: false,
                checkpointing: false,
                block_writes: 0,
                appended: 0,
                checkpoints: 0,
            }),
            done: Condvar::new(),
            durable: AtomicU64::new(next_seq - 1),
            mode: AtomicU8::new(mode.code()),
        }
    }

    fn guard(&self) -> MutexGuard<'_, JournalState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes the journal's lock, to append records and change the slot
    /// table together.
    pub(super) fn lock(&self) -> JournalGuard<'_> {
        JournalGuard {
            journal: self,
            guard: Some(self.guard()),
        }
    }

    /// Every journal block up to this sequence is durable.
    pub(super) fn durable(&self) -> u64 {
        self.durable.load(Ordering::Acquire)
    }

    pub(super) fn set_mode(&self, mode: Mode) {
        self.mode.store(mode.code(), Ordering::Release);
    }

    fn mode(&self) -> Mode {
        Mode::from_code(self.mode.load(Ordering::Acquire)).unwrap_or(Mode::WriteThrough)
    }

    /// Opens the next block (the open one is written or empty).
    fn advance(st: &mut JournalState) {
        st.seq += 1;
        st.records = 0;
        st.written = true;
        st.block.fill(0);
    }

    /// Writes the open block's image where its sequence belongs in the ring.
    fn write_block(&self, st: &mut JournalState) -> Result<(), DeviceError> {
        let header = JournalHeader {
            seq: st.seq,
            flushed_through: self.durable(),
            cache_id: self.cache_id,
            records: st.records as u16,
        };
        seal_journal_block(&mut st.block, &header);
        let at = self.g.journal_block(st.seq) * u64::from(self.g.block_size);
        self.cache.write_at(&st.block, at)?;
        st.written = true;
        st.block_writes += 1;
        Ok(())
    }

    /// Writes the open block if it changed: everything appended is then with
    /// the kernel (survives a killed process), not yet durable.
    pub(super) fn write_open(&self) -> Result<(), DeviceError> {
        let mut st = self.guard();
        if !st.written && st.records > 0 {
            self.write_block(&mut st)?;
        }
        Ok(())
    }

    /// Makes every record in blocks up to `seq` durable (the open block
    /// included, if `seq` is its sequence): write, close, one device flush
    /// shared by every caller waiting meanwhile.
    pub(super) fn make_durable(&self, seq: u64) -> Result<(), DeviceError> {
        let mut st = self.guard();
        loop {
            if self.durable() >= seq {
                return Ok(());
            }
            if st.flushing {
                st = self.done.wait(st).unwrap_or_else(PoisonError::into_inner);
                continue;
            }
            let covering = if st.records > 0 {
                if !st.written {
                    self.write_block(&mut st)?;
                }
                let covering = st.seq;
                Self::advance(&mut st);
                covering
            } else {
                st.seq - 1
            };
            st.flushing = true;
            drop(st);
            let flushed = self.cache.flush();
            st = self.guard();
            st.flushing = false;
            if flushed.is_ok() {
                self.durable.fetch_max(covering, Ordering::AcqRel);
            }
            self.done.notify_all();
            flushed?;
            if covering < seq {
                // Nothing appended reaches `seq`: the caller asked for a
                // block that holds no record yet.
                return Ok(());
            }
        }
    }

    /// Makes everything appended so far durable (nothing to do when no
    /// record was appended since the last time).
    pub(super) fn make_all_durable(&self) -> Result<(), DeviceError> {
        let last = {
            let st = self.guard();
            if st.records > 0 { st.seq } else { st.seq - 1 }
        };
        self.make_durable(last)
    }

    /// Whether half the ring is used (time for a background checkpoint).
    pub(super) fn wants_checkpoint(&self) -> bool {
        let st = self.guard();
        !st.checkpointing && st.seq - st.replay_from >= u64::from(self.g.journal_blocks) / 2
    }

    /// A checkpoint holding the lock throughout (the ring is full, or a
    /// stop): close the open block, snapshot, write, flush.
    fn checkpoint_locked(
        &self,
        st: &mut JournalState,
        table: &SlotTable,
        flags: u8,
    ) -> Result<(), DeviceError> {
        strict_assert!(
            !st.checkpointing,
            "the guard waits for a background checkpoint first"
        );
        let (checkpoint, from) = self.snapshot(st, table, flags)?;
        self.write_checkpoint(&checkpoint)?;
        self.finish_checkpoint(st, checkpoint.number, from);
        Ok(())
    }

    /// Background checkpoint: the snapshot under the lock, the write and
    /// the flush outside it.
    pub(super) fn checkpoint(&self, table: &SlotTable) -> Result<(), DeviceError> {
        let (checkpoint, from) = {
            let mut st = self.guard();
            if st.checkpointing {
                return Ok(());
            }
            let taken = self.snapshot(&mut st, table, 0)?;
            st.checkpointing = true;
            taken
        };
        let written = self.write_checkpoint(&checkpoint);
        let mut st = self.guard();
        st.checkpointing = false;
        if written.is_ok() {
            self.finish_checkpoint(&mut st, checkpoint.number, from);
        }
        self.done.notify_all();
        written
    }

    fn snapshot(
        &self,
        st: &mut JournalState,
        table: &SlotTable,
        flags: u8,
    ) -> Result<(Checkpoint, u64), DeviceError> {
        if st.records > 0 {
            if !st.written {
                self.write_block(st)?;
            }
            Self::advance(st);
        }
        let from = st.seq;
        let slots = (0..table.len() as u32).map(|s| table.entry(s)).collect();
        Ok((
            Checkpoint {
                number: st.checkpoint_number + 1,
                replay_from: from,
                cache_id: self.cache_id,
                mode: self.mode(),
                flags,
                slots,
            },
            from,
        ))
    }

    /// Flush, write, flush: the data and journal blocks the checkpoint
    /// names are durable before it can be (a device may persist the
    /// checkpoint's write before earlier unflushed ones), and it is durable
    /// before replay starts from it.
    fn write_checkpoint(&self, c: &Checkpoint) -> Result<(), DeviceError> {
        let blocks = self.g.checkpoint_blocks();
        let mut b = IoBuf::zeroed((blocks * u64::from(self.g.block_size)) as usize);
        encode_checkpoint_into(&mut b, c);
        let at = self.g.checkpoint_start(c.number % 2) * u64::from(self.g.block_size);
        self.cache.flush()?;
        self.cache.write_at(&b, at)?;
        self.cache.flush()
    }

    fn finish_checkpoint(&self, st: &mut JournalState, number: u64, from: u64) {
        st.checkpoint_number = number;
        st.replay_from = from;
        st.checkpoints += 1;
        self.durable.fetch_max(from - 1, Ordering::AcqRel);
    }

    /// A clean stop's checkpoint: everything appended is in it, flagged
    /// clean (or detached).
    pub(super) fn close(&self, table: &SlotTable, detached: bool) -> Result<(), DeviceError> {
        let flags = if detached {
            super::format::FLAG_DETACHED
        } else {
            FLAG_CLEAN
        };
        let mut guard = self.lock();
        guard.wait_checkpoint();
        self.checkpoint_locked(guard.st(), table, flags)
    }

    /// A checkpoint now, in the foreground (after a recovery).
    pub(super) fn checkpoint_now(&self, table: &SlotTable) -> Result<(), DeviceError> {
        let mut guard = self.lock();
        guard.wait_checkpoint();
        self.checkpoint_locked(guard.st(), table, 0)
    }

    /// Counters: (block writes, records, checkpoints).
    pub(super) fn counts(&self) -> (u64, u64, u64) {
        let st = self.guard();
        (st.block_writes, st.appended, st.checkpoints)
    }
}

/// The journal's lock, held to append records and change the slot table
/// together.
pub(super) struct JournalGuard<'a> {
    journal: &'a Journal,
    /// Always `Some` except inside [`JournalGuard::wait_checkpoint`].
    guard: Option<MutexGuard<'a, JournalState>>,
}

impl JournalGuard<'_> {
    fn st(&mut self) -> &mut JournalState {
        self.guard
            .as_mut()
            .expect("the guard is held outside waits")
    }

    /// Waits (releasing the lock) while a background checkpoint is writing.
    fn wait_checkpoint(&mut self) {
        while self.st().checkpointing {
            let guard = self.guard.take().expect("held");
            self.guard = Some(
                self.journal
                    .done
                    .wait(guard)
                    .unwrap_or_else(PoisonError::into_inner),
            );
        }
    }

    /// Appends `record` (the caller changes the slot table under the same
    /// lock); returns the sequence of the block it went into. A full block is
    /// written and the next one opened; a full ring forces a checkpoint
    /// (after any background one in flight).
    pub(super) fn append(
        &mut self,
        record: &Record,
        table: &SlotTable,
    ) -> Result<u64, DeviceError> {
        let journal = self.journal;
        let g = journal.g;
        if self.st().records == g.records_per_block() {
            let st = self.st();
            if !st.written {
                journal.write_block(st)?;
            }
            Journal::advance(st);
        }
        loop {
            let st = self.st();
            if st.records > 0 || st.seq - st.replay_from < u64::from(g.journal_blocks) {
                break;
            }
            // The ring is full: the open block would overwrite the oldest
            // one replay still needs.
            if st.checkpointing {
                self.wait_checkpoint();
                continue;
            }
            journal.checkpoint_locked(st, table, 0)?;
        }
        let st = self.st();
        let at = JOURNAL_HEADER + st.records * RECORD;
        encode_record(record, &mut st.block[at..at + RECORD]);
        st.records += 1;
        st.written = false;
        st.appended += 1;
        Ok(st.seq)
    }
}
