//! Device flushes and what they make durable. [`Core`] holds the parts of
//! the log disk that a completed write or flush changes — the segment
//! table, the writer's queue, the NV index and the counters — and applies
//! the writer's [`Completed`] reports to them: a flush frees the segments
//! that died before it and clears the NV slots destaged before it.

use std::sync::Arc;

use super::error::LogDiskError;
use super::metrics::Metrics;
use super::nv_index::NvIndex;
use super::table::Table;
use super::writer::{Completed, Job, Queued, WriteQueue};
use crate::device::Device;

/// What a completed write or flush changes.
pub(super) struct Core {
    pub table: Table,
    pub queue: WriteQueue,
    pub nv: Option<NvIndex>,
    pub metrics: Metrics,
    /// A checkpoint queued on the background writer, not yet durable: its
    /// number, and whether its write is done (the flush after it then
    /// makes it durable).
    pub checkpoint_in_flight: Option<(u64, bool)>,
}

impl Core {
    /// Waits for the oldest job queued on the background writer and applies
    /// what it did: NV slots held for a segment write freed, or a flush's
    /// segments and NV slots retired. A failed job fails the disk.
    pub fn reap_one(&mut self) -> Result<(), LogDiskError> {
        let Some((completed, result)) = self.queue.reap_one()? else {
            return Ok(());
        };
        match completed {
            Completed::Segment { writes_done } => {
                if let Some(nv) = self.nv.as_mut() {
                    nv.unhold(writes_done);
                }
            }
            Completed::Flush { pending, awaiting } if result.is_ok() => {
                self.metrics.device_flushes += 1;
                if let Some((number, true)) = self.checkpoint_in_flight {
                    self.checkpoint_in_flight = None;
                    self.table.checkpoint_durable(number);
                }
                self.retire(pending, awaiting)?;
            }
            Completed::Checkpoint if result.is_ok() => {
                if let Some((_, written)) = self.checkpoint_in_flight.as_mut() {
                    *written = true;
                }
            }
            Completed::Flush { .. } | Completed::Shared | Completed::Checkpoint => {}
        }
        Ok(result?)
    }

    /// Waits for everything queued on the background writer (retiring what
    /// its flushes made durable); fails if any of it failed, or if a
    /// background write failed before.
    pub fn settle(&mut self) -> Result<(), LogDiskError> {
        while !self.queue.queued.is_empty() {
            self.reap_one()?;
        }
        self.queue.check()
    }

    /// Flushes the device (after everything queued); segments that died
    /// before it become free, and NV slots destaged before it are cleared
    /// and freed.
    pub fn device_flush<D: Device + ?Sized>(&mut self, dev: &D) -> Result<(), LogDiskError> {
        self.settle()?;
        strict_assert!(
            self.queue.queued.is_empty(),
            "a device flush behind queued jobs"
        );
        dev.flush()?;
        self.metrics.device_flushes += 1;
        let awaiting = self.nv.as_ref().map_or(0, |nv| nv.awaiting.len());
        self.retire(self.table.pending.len(), awaiting)
    }

    /// Queues a device flush behind the writes in flight and returns (a
    /// flush in this thread if the writer is not running); the writer issues
    /// it after those writes, so the device sees the order a synchronous
    /// flush gives. What it makes durable — the segments pending and the NV
    /// slots destaged when it was queued — is retired when it is reaped.
    pub fn flush_in_background<D: Device + 'static>(
        &mut self,
        dev: &Arc<D>,
    ) -> Result<(), LogDiskError> {
        // One flush in the queue at a time: a flush's counts index the
        // pending and awaiting lists, which only the flush before it shrinks.
        while self.queue.flush_queued() {
            self.reap_one()?;
        }
        self.queue.check()?;
        if !self.queue.started() {
            return self.device_flush(&**dev);
        }
        let awaiting = self.nv.as_ref().map_or(0, |nv| nv.awaiting.len());
        let pending = self.table.pending.len();
        strict_assert!(
            !self.queue.flush_queued(),
            "one flush in the queue at a time"
        );
        self.queue_flush(dev, pending, awaiting)
    }

    /// Queues a device flush on the running writer; when done it retires
    /// the first `pending` pending segments and `awaiting` destaged slots.
    pub fn queue_flush<D: Device + 'static>(
        &mut self,
        dev: &Arc<D>,
        pending: usize,
        awaiting: usize,
    ) -> Result<(), LogDiskError> {
        assert!(
            self.queue.started(),
            "a flush is queued only on a running writer"
        );
        strict_assert!(pending <= self.table.pending.len());
        self.queue.send(
            Job::Flush,
            Queued::Flush { pending, awaiting },
            (dev, None, 0, 0),
        )
    }

    /// Makes room for a segment write: a flush queued behind the last
    /// writes frees segments when reaped; otherwise a device flush frees
    /// the pending ones.
    ///
    /// `pinned` (the segment the log named next) must be free before it is
    /// opened: a pending one is freed the same way.
    pub fn free_a_segment<D: Device + ?Sized>(
        &mut self,
        dev: &D,
        pinned: Option<u32>,
    ) -> Result<(), LogDiskError> {
        use super::table::Seg;
        let wanting =
            |t: &Table| t.free.is_empty() || pinned.is_some_and(|p| t.seg[p as usize] != Seg::Free);
        while wanting(&self.table) && !self.queue.queued.is_empty() {
            self.reap_one()?;
        }
        if wanting(&self.table) && !self.table.pending.is_empty() {
            self.device_flush(dev)?;
        }
        // A pinned segment was free, or pending and not held: freed now.
        strict_assert!(pinned.is_none_or(|p| self.table.seg[p as usize] == Seg::Free));
        Ok(())
    }

    /// After a device flush that covered the first `pending_upto` pending
    /// segments and the first `awaiting_upto` destaged NV slots (both lists
    /// only grow between flushes): those segments become free, and those
    /// slots are cleared and freed.
    fn retire(&mut self, pending_upto: usize, awaiting_upto: usize) -> Result<(), LogDiskError> {
        // Both lists only grow between flushes: what a flush covered is
        // still there when it is retired.
        assert!(
            pending_upto <= self.table.pending.len(),
            "a flush retires pending segments it never saw"
        );
        strict_assert!(
            self.nv
                .as_ref()
                .is_none_or(|nv| awaiting_upto <= nv.awaiting.len())
        );
        self.table.release_pending_upto(pending_upto);
        let writes_done = self.queue.writes_done;
        match self.nv.as_mut() {
            Some(nv) => nv.retire(awaiting_upto, writes_done),
            None => Ok(()),
        }
    }
}
