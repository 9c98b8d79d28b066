//! The log-structured logical disk of papers/003 (issue 3): a persistent
//! log-structured block store over any [`crate::Device`], with an optional
//! non-volatile write cache in a persistent-memory region.
//!
//! # Rooms
//!
//! Each file owns its state; calls go down this list, never up:
//!
//! - [`disk`](mod@disk): [`LogDisk`], the orchestrator: the write path's
//!   policy (destage, make room before a write, the background cleaner's
//!   step, checkpoints when due), flush, close, trim; `read` and `device`:
//!   the read path and the [`crate::Device`] impl.
//! - [`open`]: a device probed (ours, an interrupted format, blank,
//!   foreign) and opened, formatted or refused with typed errors.
//! - `recover`: a function from the device to an in-memory image (table,
//!   log head, NV index, sequence), with its decision table.
//! - `cleaner`: `plan` (pure victim choice and read plans), `reads` (the
//!   reads, the reader threads, collecting what is still live), the
//!   foreground passes and the background pass.
//! - `checkpoint`: writing the tables to a checkpoint slot.
//! - `log`: the head and [`LogDisk`]'s one append, for users' writes and
//!   the cleaner's relocations alike.
//! - `flush`: device flushes and the writer's completions applied to the
//!   table and the NV index.
//! - `writer`: the background writer's threads and its queue.
//! - `table`: the block address and segment usage tables, with their
//!   numbered invariants and `Table::verify`; `nv_index`: the NV slots'
//!   DRAM index; `stage`: the volatile segment buffer.
//! - [`nv`]: the NV write cache's slots in a [`crate::ntl::Region`];
//!   [`format`](mod@format): the on-disk structures (superblock, checkpoint
//!   slots, segment summaries) as pure, checksummed encode/decode functions;
//!   `options`, `metrics`, `error`.
//! - [`check`]: `fsck` and `inspect` over an image.
//!
//! # How it works
//!
//!
//! **Write path.** With an NV cache, a block write is streamed into a free NV
//! slot (non-temporal stores on persistent memory) and its entry persisted
//! (flush + one fence per request): it is durable then, and acknowledged. When dirty slots pass the destage threshold, the oldest
//! `N − 1` are built into one full segment write (summary block + data, one
//! sequential I/O at the log head), the device is flushed, and only then are
//! the slots cleared and reused. With [`Options::background_destage`] (the
//! default) the segment write goes to a queue of background writer threads
//! ([`Options::writer_threads`]) while the caller returns to staging NV
//! writes: up to three segment writes, with the batched device
//! flush, the background cleaner's writes and the periodic checkpoint
//! queued among them. The writer copies a destage's blocks out of their NV
//! slots; a slot superseded before that copy is not reused until the write
//! is done. A flush starts when every job before it is done; a checkpoint
//! write when every job before it (its flush included) is. The destaged
//! slots keep serving reads until a flush after their write is done and its
//! report taken; reports are taken in the order queued, at points the
//! operations fix, so the same slots and segments are reused in every run.
//! Without an NV cache (the paper's baseline), a
//! write goes to the in-memory segment buffer; a full buffer is written as a
//! segment write, and a [`LogDisk::flush`] forces a **partial** segment write of
//! whatever is buffered, then flushes the device. With
//! [`Options::background_destage`] a full buffer goes to the same background
//! writer (the caller fills a spare buffer meanwhile, and reads of the
//! queued buffer's blocks are served from it until its write is done); a
//! flush waits for every queued write before its own.
//!
//! **Read path.** Segment buffer → NV cache → block address table → device.
//! Every block read from the device is checked against the CRC32C in the
//! table; a mismatch is an error, never data.
//!
//! **Cleaner.** When free segments fall below the low watermark (default 2,
//! the paper's), victims are chosen by the [`CleanerPolicy`], their live
//! blocks written through the log, and the cleaner stops at the high
//! watermark. A victim's live blocks are found with an in-DRAM reverse map
//! (physical → logical, checked against the table), not by reading its
//! summaries. A dense victim is read in one I/O (first live block to last);
//! a sparse one (live fraction below [`Options::live_read_below`], default
//! 0.25) only its live blocks, in runs bridging at most
//! [`Options::live_read_gap`] dead blocks. A pass's reads are batched and
//! issued as one [`Device::read_batch`] where the device batches reads (a
//! file, through `io_uring`; [`Options::batch_reads`]), else on
//! [`Options::cleaner_read_threads`] threads; every block read is
//! checked against the table's CRC32C before it is copied. A segment whose
//! blocks all died becomes reusable only after the next device flush, so the
//! writes that killed them are durable first. With
//! [`Options::background_clean`] (the default) the cleaner also works below
//! the high watermark, one pass at a time: a user segment write issues a
//! pass's reads on reader threads and the eighth user segment write after
//! it collects them (only blocks still live then are copied) and writes
//! them as one cleaner write, so the reads overlap user staging and writes.
//! A pass's victims are never the segment of the write in flight and are
//! not reused before the pass is written; which write collects a pass
//! depends on the operations alone, never on timing, so the device's
//! sequence of writes and flushes is deterministic.
//!
//! **Recovery.** The newest valid checkpoint slot gives the tables; then every
//! segment write after it is found (the checkpoint's head segment from its
//! head slot, and each segment whose first summary is newer than the
//! checkpoint), checked (summary CRC, every data block's CRC, sequence
//! increasing along the segment) and applied in sequence order; a torn write
//! stops its segment's chain. Valid NV slots then override the table (a valid
//! slot is never older than the disk copy). A checkpoint is written at the end
//! of recovery, so later recoveries never look at what this one discarded.
//!
//! Concurrency: reads take a shared lock and proceed in parallel; writes take
//! the log's exclusive lock, because a log has one head and appends are
//! serial in every log-structured design. A read may go to the device while
//! background segment writes are in flight, never into their segments: a
//! destage's blocks are served by their NV slots until the flush after it
//! is done, a background cleaner write's from its buffer until it is done. The background cleaner's reads run beside both; they read only
//! closed segments that no write in flight touches and that nothing reuses
//! until their pass is written.

pub mod check;
mod checkpoint;
mod cleaner;
mod device;
pub mod disk;
mod error;
mod flush;
pub mod format;
mod log;
mod metrics;
pub mod nv;
mod nv_index;
pub mod open;
mod options;
mod read;
mod recover;
mod stage;
mod table;
mod writer;

#[cfg(test)]
mod tests;

pub use disk::LogDisk;
pub use error::LogDiskError;
pub use format::{Geometry, Superblock};
pub use metrics::{Metrics, NvFill};
pub use nv::{NvCache, NvError};
pub use options::{CleanerPolicy, Options, PartialSegments};
pub use recover::{Recovered, read_superblock};
