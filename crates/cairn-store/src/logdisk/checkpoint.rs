//! Checkpoints: the block address and segment usage tables written to the
//! slot not holding the newest checkpoint, after a flush of everything they
//! describe, and flushed themselves. Recovery starts from the newest valid
//! one, so the interval between them bounds its work.

use std::sync::Arc;

use super::error::LogDiskError;
use super::flush::Core;
use super::format::{self, CheckpointHead, Geometry, Usage};
use super::log::Log;
use super::writer::{Job, Queued};
use crate::device::Device;

/// Writes a checkpoint: a device flush (everything the checkpoint describes
/// is durable before it), the checkpoint write, a flush. With `background`
/// and a running background writer, the three are queued on it (in that
/// order, behind the segment writes before them) and the caller goes on;
/// otherwise they are done here. A checkpoint that holds trims is always
/// written here: it lets tainted segments be reused, which must wait until
/// it is durable. `number` is the last checkpoint's, advanced.
///
/// `closed` (a clean close, never in the background) marks the checkpoint
/// as one after which no segment is written: recovery then reads no segment.
/// The log is sealed until the next checkpoint, which clears the mark; a
/// segment write before it is refused ([`Log::append`]).
pub(super) fn write<D: Device + 'static>(
    dev: &Arc<D>,
    geo: &Geometry,
    core: &mut Core,
    log: &mut Log,
    number: &mut u64,
    background: bool,
    closed: bool,
) -> Result<(), LogDiskError> {
    assert!(
        !(closed && background),
        "a closing checkpoint is waited for"
    );
    let background = background && core.queue.started() && !core.table.any_tainted;
    // A checkpoint holding trims is waited for: tainted segments are
    // reused only once it is durable.
    strict_assert!(!background || !core.table.any_tainted);
    if background {
        core.flush_in_background(dev)?;
    } else {
        core.device_flush(&**dev)?;
    }
    let next = *number + 1;
    if log.pin.is_none() {
        // Where the log goes next, for recovery to start reading there.
        log.pin = core.table.pick_next(log.last_opened);
    }
    let (head_segment, head_slot) = log.head.unwrap_or((0, geo.segment_blocks - 1));
    assert!(head_segment < geo.segments && head_slot < geo.segment_blocks);
    core.metrics.checkpoints += 1;
    core.metrics.checkpoint_bytes += geo.checkpoint_blocks() * u64::from(geo.block_size);
    let head = CheckpointHead {
        number: next,
        sequence: log.sequence,
        head_segment,
        head_slot,
        closed,
        chain: log.pin,
        counters: core.metrics.to_counters(),
    };
    // Encoded straight from the tables into a buffer kept for it: no copy
    // of the map, no allocation (the slot is megabytes on a large volume,
    // and fresh pages cost a fault each).
    let b = u64::from(geo.block_size);
    let mut bytes = std::mem::take(&mut core.queue.checkpoint_buf);
    bytes.grow((geo.checkpoint_blocks() * b) as usize);
    let table = &core.table;
    let usage = table
        .live
        .iter()
        .zip(&table.last_seq)
        .map(|(&live, &last_sequence)| Usage {
            live,
            last_sequence,
        });
    let encoded = format::encode_checkpoint_into(&mut bytes, &head, &table.map, usage, geo);
    if let Err(e) = encoded {
        core.queue.checkpoint_buf = bytes;
        return Err(e.into());
    }
    // Odd numbers in slot A, even in slot B: the newest valid one survives
    // a torn write of the other.
    let at = if next % 2 == 1 {
        b
    } else {
        b * (1 + geo.checkpoint_blocks())
    };
    // The slot lies between the superblock and the first segment, and the
    // encoding fills exactly one slot.
    assert!(at >= b && at + geo.checkpoint_blocks() * b <= geo.segment_start(0) * b);
    assert_eq!(
        bytes.len() as u64,
        geo.checkpoint_blocks() * b,
        "a checkpoint fills its slot"
    );
    if background {
        let to = bytes.len();
        let job = Job::Write {
            buf: bytes,
            from: 0,
            to,
            offset: at,
            fill: Vec::new(),
            after_earlier: true,
        };
        core.queue
            .send(job, Queued::Checkpoint, (dev, None, 0, 0))?;
        core.queue_flush(dev, 0, 0)?;
        // Durable when that flush is reaped.
        assert!(
            core.checkpoint_in_flight.replace((next, false)).is_none(),
            "two background checkpoints in flight"
        );
    } else {
        let written = dev.write_at(&bytes, at);
        core.queue.checkpoint_buf = bytes;
        written?;
        dev.flush()?;
        core.metrics.device_flushes += 1;
    }
    core.table.checkpoint_queued = next;
    if !background {
        core.table.checkpoint_durable(next);
    }
    assert!(next > *number, "checkpoint numbers only grow");
    *number = next;
    log.since_checkpoint = 0;
    log.sealed = closed;
    // The checkpoint holds every trim: tainted segments may be reused.
    core.table.untaint();
    strict_assert!(
        !core.table.any_tainted,
        "a durable checkpoint holds every trim"
    );
    Ok(())
}
