//! [`LogDisk`]: the log-structured logical disk with an optional non-volatile
//! write cache (papers/003), over any [`Device`].
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

use std::collections::VecDeque;
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use hashbrown::HashMap;

use super::format::{
    self, COUNTERS, Checkpoint, CheckpointHead, FormatError, Geometry, MapEntry, Summary,
    SummaryEntry, Superblock, UNMAPPED, Usage,
};
use super::nv::{NvCache, NvError};
use crate::device::{
    Device, DeviceError, DeviceOp, Extent, IoBuf, SECTOR, check_range, is_aligned,
    push_block_extents, whole_blocks,
};
use crate::ntl::Region;

/// How the cleaner chooses victims and orders what it copies.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CleanerPolicy {
    /// Fewest live blocks first (the paper's choice, Sprite LFS's simplest).
    #[default]
    Greedy,
    /// Highest `(1 − u) · age / (1 + u)` first (Rosenblum & Ousterhout 1992).
    CostBenefit,
    /// Cost-benefit selection, and the survivors of each pass written oldest
    /// first, so cold blocks are packed into segments of their own, apart from
    /// the hot ones still being rewritten (Sprite LFS's age sort: the
    /// hot/cold separating cleaner).
    AgeSort,
}

impl CleanerPolicy {
    /// Every policy, for tables.
    pub const ALL: [Self; 3] = [Self::Greedy, Self::CostBenefit, Self::AgeSort];

    /// Short name (`greedy`, `cost-benefit`, `age-sort`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Greedy => "greedy",
            Self::CostBenefit => "cost-benefit",
            Self::AgeSort => "age-sort",
        }
    }

    /// Parses a [`CleanerPolicy::name`].
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.name() == s)
    }
}

/// What a partial segment write does to the rest of its segment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PartialSegments {
    /// The next write continues in the same segment after it (Sprite LFS,
    /// BSD-LFS). The default.
    #[default]
    Append,
    /// Any write shorter than the room left closes its segment, and the whole
    /// segment is written (the paper's LLD: "at most one partial segment per
    /// segment; a new segment is always allocated").
    Close,
}

/// Tunables; [`Options::default`] is what `cairn` uses.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// Victim choice.
    pub cleaner: CleanerPolicy,
    /// Cleaning starts when only this many free segments remain (≥ 2; the
    /// paper's 2).
    pub clean_low: u32,
    /// Cleaning stops at this many free segments; 0 chooses
    /// `max(low + 2, segments / 32)`.
    pub clean_high: u32,
    /// Destaging starts when this fraction of NV slots is dirty.
    pub destage_threshold: f64,
    /// Partial segment handling.
    pub partial: PartialSegments,
    /// Segment writes between checkpoints; 0 chooses enough that checkpoints
    /// cost about a fortieth of the log writes (at least 64). Recovery reads
    /// and checks every segment written since the last checkpoint, so the
    /// interval bounds its work: at the default, about 40 checkpoints' worth
    /// of segments (a 1 GiB volume's 2.5 MiB checkpoint: ~100 MiB).
    pub checkpoint_interval: u64,
    /// A victim whose live fraction is below this is *sparse*: the cleaner
    /// reads only its live blocks (runs of them, see
    /// [`Options::live_read_gap`]) instead of the whole segment in one I/O.
    /// 0 reads every victim whole; 1 reads every victim live blocks only.
    pub live_read_below: f64,
    /// Dead blocks a live-only read may bridge: two runs of live blocks this
    /// close or closer are read as one I/O (the dead blocks between are read
    /// and dropped).
    pub live_read_gap: u32,
    /// Threads the cleaner reads victims with (the calling thread is one);
    /// 1 reads them one after another. Not used where reads are batched
    /// ([`Options::batch_reads`]).
    pub cleaner_read_threads: u32,
    /// Where the device takes reads in batches ([`Device::read_batch`]: a
    /// file, through `io_uring`), the cleaner issues each pass's reads as
    /// one batch from one thread, all in flight at once, instead of handing
    /// them to [`Options::cleaner_read_threads`] threads one by one (same
    /// reads, a fraction of the CPU: no thread hand-over per read). `false`
    /// always uses the threads.
    pub batch_reads: bool,
    /// NV mode: destages' segment writes, the batched device flushes after
    /// them, the background cleaner's writes and the periodic checkpoints
    /// go to a queue of background writer threads while the caller returns
    /// (and stages the next writes into the NV cache, which already holds
    /// every destaged block durably); the caller waits only when three
    /// segment writes are queued, or for free slots or segments. `false`
    /// writes and flushes in the caller's thread. What a background flush
    /// made durable (NV slots, emptied segments) is retired when its report
    /// is taken. A failed background write or flush fails every later
    /// device operation; reopen to recover from the NV cache. Volatile
    /// mode: a full segment buffer is queued the same way and the caller
    /// goes on filling a spare one (reads of the queued blocks come from
    /// the queued buffer); a [`LogDisk::flush`] waits for every queued
    /// write, and reports a failed one.
    pub background_destage: bool,
    /// Threads of the background writer ([`Options::background_destage`]):
    /// with 2 (the default), two segment writes are on the device at once
    /// and one thread's copy out of the NV cache overlaps the other's write.
    /// A flush starts only when every job queued before it is done, and a
    /// checkpoint write only when the flush before it is, so what each flush
    /// makes durable is as with 1; the order in which the device sees the
    /// writes varies from run to run. 1 writes one at a time, in the order
    /// queued.
    pub writer_threads: u32,
    /// The cleaner works in the background: below the high watermark, each
    /// user segment write first collects the victims whose reads it issued
    /// [`BACKGROUND_LAG`] user segment writes earlier (their live blocks
    /// written through the log as one cleaner write) and issues the reads of
    /// the next victims on the reader threads, which then run while the
    /// writer stages and writes user data. A block that died while its read
    /// was outstanding is not copied; a victim is never the segment of a
    /// write in flight and is not reused before its live blocks are written.
    /// Writes and flushes keep their one-at-a-time order, so the device sees
    /// the same write sequence in every run. The synchronous cleaner (at the
    /// low watermark) remains the fallback. `false`: clean only
    /// synchronously, at the low watermark (the paper's cleaner).
    pub background_clean: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            cleaner: CleanerPolicy::Greedy,
            clean_low: 2,
            clean_high: 0,
            destage_threshold: 0.75,
            partial: PartialSegments::Append,
            checkpoint_interval: 0,
            live_read_below: 0.25,
            live_read_gap: 2,
            cleaner_read_threads: 16,
            batch_reads: true,
            background_destage: true,
            writer_threads: 2,
            background_clean: true,
        }
    }
}

/// Why a log disk operation failed.
#[derive(Debug, thiserror::Error)]
pub enum LogDiskError {
    /// The device failed.
    #[error(transparent)]
    Device(#[from] DeviceError),
    /// An on-disk structure did not decode.
    #[error(transparent)]
    Format(#[from] FormatError),
    /// The NV cache region could not be used.
    #[error(transparent)]
    Nv(#[from] NvError),
    /// Neither checkpoint slot holds a valid checkpoint.
    #[error("no valid checkpoint: slot A: {a}; slot B: {b}")]
    NoCheckpoint {
        /// Why slot A was refused.
        a: String,
        /// Why slot B was refused.
        b: String,
    },
    /// The device is too small for the geometry.
    #[error("the geometry needs {need} bytes, the device has {have}")]
    TooSmall {
        /// Bytes needed.
        need: u64,
        /// Bytes present.
        have: u64,
    },
    /// The cleaner could not free a segment: the disk is full of live data.
    #[error("no free segment: the log is full of live data (cleaning freed nothing)")]
    NoSpace,
    /// Stored data failed its checksum.
    #[error("corrupted: {0}")]
    Corrupt(String),
    /// A bad argument.
    #[error("{0}")]
    Invalid(String),
    /// The disk was opened read-only ([`LogDisk::open_read_only`]).
    #[error("the log disk is open read-only")]
    ReadOnly,
    /// A background segment write failed earlier; the disk takes no more
    /// device operations (reopen it: the NV cache still holds the data).
    #[error("a background segment write failed ({0}); reopen the log disk to recover")]
    Failed(String),
}

/// Counters of a log disk; all in blocks or segment writes unless named bytes.
/// Saved with every checkpoint (in this order, up to `recoveries`), so `cairn
/// inspect` shows them; the cleaner's read I/O counters after them are not
/// saved (they count since this open).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Metrics {
    /// Block writes the client issued.
    pub client_blocks: u64,
    /// Segment writes carrying client data (destages or buffer writes).
    pub user_segment_writes: u64,
    /// Data blocks written by those.
    pub user_blocks_written: u64,
    /// Bytes written by those (summary, data, padding).
    pub user_bytes: u64,
    /// Segment writes by the cleaner.
    pub cleaner_segment_writes: u64,
    /// Live blocks the cleaner copied.
    pub cleaner_blocks_written: u64,
    /// Bytes the cleaner wrote.
    pub cleaner_bytes: u64,
    /// Victim segments the cleaner cleaned: read whole in one I/O, or (a
    /// sparse victim) only its live blocks. The paper's "segments read for
    /// cleaning".
    pub cleaner_segment_reads: u64,
    /// Segment writes closed early by a flush.
    pub partial_segments: u64,
    /// Client writes to a block already dirty in the NV cache.
    pub nv_write_hits: u64,
    /// Client writes that went to the NV cache.
    pub nv_writes: u64,
    /// Sum over cleaned segments of blocks written to the log between the
    /// segment's writing and its cleaning (direct lifetime measurement).
    pub lifetime_blocks: u64,
    /// Checkpoints written.
    pub checkpoints: u64,
    /// Bytes of checkpoints written.
    pub checkpoint_bytes: u64,
    /// Device flushes issued.
    pub device_flushes: u64,
    /// Recoveries (opens) this image went through.
    pub recoveries: u64,
    /// Device reads the cleaner issued (since this open; not saved).
    pub cleaner_read_ios: u64,
    /// Bytes the cleaner read (since this open; not saved).
    pub cleaner_read_bytes: u64,
    /// Wall-clock nanoseconds the cleaner spent waiting for its reads (since
    /// this open; not saved). Background reads count only the time the
    /// writer waited for them when it collected them.
    pub cleaner_read_ns: u64,
    /// Cleaner passes whose reads ran in the background (since this open;
    /// not saved).
    pub cleaner_background_passes: u64,
}

impl Metrics {
    fn to_counters(self) -> [u64; COUNTERS] {
        [
            self.client_blocks,
            self.user_segment_writes,
            self.user_blocks_written,
            self.user_bytes,
            self.cleaner_segment_writes,
            self.cleaner_blocks_written,
            self.cleaner_bytes,
            self.cleaner_segment_reads,
            self.partial_segments,
            self.nv_write_hits,
            self.nv_writes,
            self.lifetime_blocks,
            self.checkpoints,
            self.checkpoint_bytes,
            self.device_flushes,
            self.recoveries,
        ]
    }

    /// What happened between `earlier` and `self` (two snapshots of one
    /// disk's metrics): every counter's difference.
    #[must_use]
    pub fn since(&self, earlier: &Metrics) -> Metrics {
        let mut c = self.to_counters();
        for (x, y) in c.iter_mut().zip(earlier.to_counters()) {
            *x = x.saturating_sub(y);
        }
        Metrics {
            cleaner_read_ios: self
                .cleaner_read_ios
                .saturating_sub(earlier.cleaner_read_ios),
            cleaner_read_bytes: self
                .cleaner_read_bytes
                .saturating_sub(earlier.cleaner_read_bytes),
            cleaner_read_ns: self.cleaner_read_ns.saturating_sub(earlier.cleaner_read_ns),
            cleaner_background_passes: self
                .cleaner_background_passes
                .saturating_sub(earlier.cleaner_background_passes),
            ..Metrics::from_counters(&c)
        }
    }

    /// Metrics saved in a checkpoint.
    pub fn from_counters(c: &[u64; COUNTERS]) -> Self {
        Self {
            client_blocks: c[0],
            user_segment_writes: c[1],
            user_blocks_written: c[2],
            user_bytes: c[3],
            cleaner_segment_writes: c[4],
            cleaner_blocks_written: c[5],
            cleaner_bytes: c[6],
            cleaner_segment_reads: c[7],
            partial_segments: c[8],
            nv_write_hits: c[9],
            nv_writes: c[10],
            lifetime_blocks: c[11],
            checkpoints: c[12],
            checkpoint_bytes: c[13],
            device_flushes: c[14],
            recoveries: c[15],
            cleaner_read_ios: 0,
            cleaner_read_bytes: 0,
            cleaner_read_ns: 0,
            cleaner_background_passes: 0,
        }
    }

    /// Segment writes of both kinds.
    pub fn segment_writes(&self) -> u64 {
        self.user_segment_writes + self.cleaner_segment_writes
    }

    /// The paper's mean segment lifetime (its formula 1): segment writes ×
    /// mean blocks per segment write ÷ segments read for cleaning, i.e. blocks
    /// written by the workload per segment cleaned. `None` before any cleaning.
    pub fn mean_lifetime(&self) -> Option<f64> {
        (self.cleaner_segment_reads > 0)
            .then(|| self.user_blocks_written as f64 / self.cleaner_segment_reads as f64)
    }

    /// Measured mean lifetime: blocks written to the log between a segment's
    /// writing and its cleaning, averaged over cleaned segments.
    pub fn measured_lifetime(&self) -> Option<f64> {
        (self.cleaner_segment_reads > 0)
            .then(|| self.lifetime_blocks as f64 / self.cleaner_segment_reads as f64)
    }

    /// Log write amplification: (user + cleaner data blocks written) ÷ user data
    /// blocks written. 1.0 means the cleaner copied nothing.
    pub fn write_amplification(&self) -> Option<f64> {
        (self.user_blocks_written > 0).then(|| {
            (self.user_blocks_written + self.cleaner_blocks_written) as f64
                / self.user_blocks_written as f64
        })
    }

    /// Fraction of NV cache writes that found their block already dirty there.
    pub fn nv_hit_ratio(&self) -> Option<f64> {
        (self.nv_writes > 0).then(|| self.nv_write_hits as f64 / self.nv_writes as f64)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Seg {
    Free,
    Open,
    Closed,
    /// Empty, reusable after the next device flush.
    Pending,
    /// Taken by a background cleaner pass: its reads are outstanding, and
    /// it is neither a candidate again nor reused until the pass is written.
    Victim,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    User,
    Cleaner,
}

/// Per NV slot: the block it holds (sequence 0 = free or awaiting clear).
#[derive(Clone, Copy, Default)]
struct SlotMeta {
    logical: u64,
    sequence: u64,
    crc: u32,
    /// Destaged: its segment is written but not yet flushed, so the slot is
    /// still the durable copy (and still serves reads) until the next flush.
    awaiting: bool,
    /// The number of the queued segment write that copies this slot's data
    /// (0: none): the slot is not reused before that write is done, even if
    /// superseded meanwhile (see [`Nv::release`]).
    write: u64,
}

struct Nv {
    /// Shared with the background writer, which copies destaged slots into
    /// their segment write.
    cache: Arc<NvCache>,
    meta: Vec<SlotMeta>,
    of: HashMap<u64, u32>,
    free: Vec<u32>,
    /// (sequence, slot), oldest first; entries whose slot moved on are skipped.
    order: VecDeque<(u64, u32)>,
    dirty: u32,
    /// Superseded slots, to clear in the next persist (after the fence that
    /// made their successors durable).
    superseded: Vec<u32>,
    /// (sequence, slot) destaged since the last device flush; cleared and
    /// freed by the next one (entries whose slot moved on are skipped).
    awaiting: Vec<(u64, u32)>,
    ranges: Vec<(u64, u64)>,
    /// Superseded slots (entries cleared) that a queued segment write still
    /// has to copy: (write number, slot), freed when that write is done.
    held: Vec<(u64, u32)>,
    /// A deferring cache ([`NvCache::defers`]) holds writes staged since the
    /// last [`Nv::sync`].
    unsynced: bool,
}

impl Nv {
    /// Makes every staged write durable, where the cache defers that to a
    /// sync (one `msync` of the region: the writes since the last one, in one
    /// disk flush); nothing to do otherwise.
    fn sync(&mut self) -> Result<(), LogDiskError> {
        if self.unsynced {
            self.cache.sync()?;
            self.unsynced = false;
        }
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

    /// [`Nv::release`] of every superseded slot (their clears already
    /// fenced), emptying the list.
    fn release_superseded(&mut self, writes_done: u64) {
        let mut superseded = std::mem::take(&mut self.superseded);
        self.release(&superseded, writes_done);
        superseded.clear();
        self.superseded = superseded;
    }

    /// Segment writes up to `writes_done` are done: free the slots held for them.
    fn unhold(&mut self, writes_done: u64) {
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

/// What the background writer was given and has not reported yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Queued {
    /// A destage's segment write into this segment.
    Segment(u32),
    /// A write into this segment whose blocks are read from
    /// [`State::moving`] until it is done: a background cleaner pass's, or
    /// a volatile-mode segment buffer's.
    Shared(u32),
    /// A checkpoint write (its buffer comes back to
    /// [`State::checkpoint_buf`]).
    Checkpoint,
    /// A device flush: it retires the first `pending` pending segments and
    /// `awaiting` destaged NV slots (see [`LogDisk::retire`]).
    Flush { pending: usize, awaiting: usize },
}

/// A shared background write not yet done (a cleaner pass's, or a
/// volatile-mode segment buffer's): its `count` blocks, the first at
/// absolute block `first`, are at byte `at` of `buf`, and reads of them are
/// served from there (the map already points at their new place).
struct Moving {
    first: u64,
    count: u64,
    at: usize,
    buf: Arc<IoBuf>,
}

/// Segment writes the background writer holds at most: two on the device
/// (with two writer threads) and one ready behind them, so the device does
/// not wait for the caller to build the next.
const WRITE_DEPTH: usize = 3;

struct State {
    map: Vec<MapEntry>,
    /// Physical → logical: the logical block last written at each segment
    /// block (index `segment · N + slot`), [`NO_BLOCK`] if none since open.
    /// In DRAM only, rebuilt from the map at open. A block is live exactly
    /// when `map[rev[p]]` points back at `p`, so stale entries (the block
    /// was overwritten or trimmed since) need no upkeep; the cleaner finds a
    /// victim's live blocks with it without reading the victim's summaries.
    rev: Vec<u64>,
    live: Vec<u32>,
    last_seq: Vec<u64>,
    /// Log blocks written (user + cleaner) when each segment was opened.
    opened_at: Vec<u64>,
    seg: Vec<Seg>,
    free: Vec<u32>,
    pending: Vec<u32>,
    /// Segments holding a block trimmed since the last checkpoint. Nothing in
    /// the log records a trim, so such a segment is not reused until a
    /// checkpoint has saved the unmapped entries: otherwise a crash would
    /// bring back the checkpoint's entry pointing into the segment's new data.
    tainted: Vec<bool>,
    any_tainted: bool,
    head: Option<(u32, u32)>,
    /// The segment opened last: the next is the free one after it.
    last_opened: u32,
    sequence: u64,
    checkpoint_number: u64,
    since_checkpoint: u64,
    in_cleaner: bool,
    /// Volatile mode: blocks buffered, data at `(i + 1)·B` of `buffer`.
    buffered: Vec<SummaryEntry>,
    buffer: IoBuf,
    buffer_of: HashMap<u64, u32>,
    /// Assembly buffer for destages (same layout).
    out: IoBuf,
    out_entries: Vec<SummaryEntry>,
    /// A whole segment (recovery's scan buffer).
    victim: IoBuf,
    /// The cleaner's: victim reads land here, then its assembly buffer.
    staging: IoBuf,
    clean_out: IoBuf,
    clean_entries: Vec<SummaryEntry>,
    nv: Option<Nv>,
    metrics: Metrics,
    /// The background segment writer (see [`Options::background_destage`]),
    /// started at its first write.
    writer: Option<Writer>,
    /// What the writer was given, in order, until it reports it done. At
    /// most [`WRITE_DEPTH`] segment writes, and at most one flush that
    /// retires anything. A segment being written is never a victim.
    queued: VecDeque<Queued>,
    /// Segment writes queued since open, and those done (in order).
    writes_queued: u64,
    writes_done: u64,
    /// Destage buffers not lent to the writer.
    bufs: Vec<IoBuf>,
    /// Background cleaner writes queued, oldest first.
    moving: VecDeque<Moving>,
    /// Candidate victims of a background pass, best first (reused).
    ranked: Vec<(f64, u32)>,
    /// The NV slots the writer copies into a destage's segment write:
    /// (block index in the buffer, slot); and spare lists for reuse.
    out_fill: Vec<(u32, u32)>,
    /// The slots of the destage being written (reused).
    out_slots: Vec<u32>,
    fills: Vec<Vec<(u32, u32)>>,
    /// Why a background write failed: every later device operation fails.
    failed: Option<String>,
    /// The background cleaner's pass whose reads are outstanding.
    pass: Pass,
    /// The background cleaner's reader threads, started at its first pass.
    readers: Option<Readers>,
    /// Read buffers of background passes, for reuse: up to
    /// [`SMALL_READ_BLOCKS`] blocks, and a whole segment.
    small_reads: Vec<IoBuf>,
    large_reads: Vec<IoBuf>,
    /// Write sequences of the blocks a pass collects (age sort).
    clean_ages: Vec<u64>,
    /// The checkpoint encoding buffer (a slot's size, reused).
    checkpoint_buf: IoBuf,
}

/// The log-structured disk. See the module docs.
pub struct LogDisk<D: Device> {
    dev: Arc<D>,
    geo: Geometry,
    id: u64,
    options: Options,
    clean_high: u32,
    checkpoint_interval: u64,
    recovered: Recovered,
    /// Opened by [`LogDisk::open_read_only`]: recovered in memory only;
    /// writes, trims and checkpoints are refused, flush and close do nothing.
    read_only: bool,
    state: RwLock<State>,
}

/// What opening a log disk found to replay beyond its last checkpoint: none
/// of it after a clean [`LogDisk::close`] (which checkpoints everything), the
/// writes of the last run's tail after a crash.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Recovered {
    /// Segment writes after the checkpoint, rolled forward from their
    /// summaries.
    pub segment_writes: usize,
    /// Blocks found dirty in the NV write cache (acknowledged, not yet in a
    /// segment), taken over as dirty.
    pub nv_blocks: u32,
}

/// Segment slot → absolute block.
pub(crate) fn block_of(geo: &Geometry, segment: u32, slot: u32) -> u64 {
    geo.segment_start(segment) + u64::from(slot)
}

pub(crate) fn segment_of(geo: &Geometry, physical: u64) -> u32 {
    ((physical - geo.segment_start(0)) / u64::from(geo.segment_blocks)) as u32
}

/// No logical block: a [`State::rev`] entry never written since open.
const NO_BLOCK: u64 = u64::MAX;

/// Absolute segment block → its [`State::rev`] index.
fn rev_index(geo: &Geometry, physical: u64) -> usize {
    (physical - geo.segment_start(0)) as usize
}

impl<D: Device + 'static> LogDisk<D> {
    /// Writes a new, empty log disk of geometry `geo` onto `dev` (and formats
    /// `nv` as its write cache, when given).
    pub fn format(
        dev: D,
        geo: Geometry,
        nv: Option<Box<dyn Region>>,
        options: Options,
    ) -> Result<Self, LogDiskError> {
        geo.validate()?;
        let need = geo.image_blocks() * u64::from(geo.block_size);
        if dev.len() < need {
            return Err(LogDiskError::TooSmall {
                need,
                have: dev.len(),
            });
        }
        let id = volume_id();
        let nv = nv
            .map(|r| NvCache::format(r, geo.block_size, id))
            .transpose()?;
        let b = u64::from(geo.block_size);
        // An empty checkpoint in slot A, the other slot zeroed, then the
        // superblock last: a torn format leaves no valid superblock.
        let cp = Checkpoint {
            number: 1,
            sequence: 0,
            head_segment: 0,
            head_slot: geo.segment_blocks - 1,
            map: vec![MapEntry::UNMAPPED; geo.logical_blocks as usize],
            usage: vec![Usage::default(); geo.segments as usize],
            counters: [0; COUNTERS],
        };
        let bytes = format::encode_checkpoint(&cp, &geo)?;
        // Page-aligned copies, so a direct-I/O device takes them as they are.
        let bytes = IoBuf::copy_padded(&bytes, bytes.len().next_multiple_of(b as usize));
        dev.write_at(&bytes, b)?;
        let zero = IoBuf::zeroed(bytes.len());
        dev.write_at(&zero, b * (1 + geo.checkpoint_blocks()))?;
        // Zero every segment's first slot so no stale summary from an earlier
        // use of the device is taken for a write of this volume.
        let zero_block = IoBuf::zeroed(geo.block_size as usize);
        for s in 0..geo.segments {
            dev.write_at(&zero_block, block_of(&geo, s, 0) * b)?;
        }
        dev.flush()?;
        let superblock = format::encode_superblock(&Superblock { geometry: geo, id });
        dev.write_at(&IoBuf::copy_padded(&superblock, superblock.len()), 0)?;
        dev.flush()?;
        Self::open_with(dev, nv.map(Recovery::Fresh), options, false)
    }

    /// Opens an existing log disk, recovering from its last checkpoint; `nv`
    /// must be the NV cache region it was formatted with (or `None` if it had
    /// none).
    pub fn open(
        dev: D,
        nv: Option<Box<dyn Region>>,
        options: Options,
    ) -> Result<Self, LogDiskError> {
        Self::open_with(dev, nv.map(Recovery::Region), options, false)
    }

    /// Opens an existing log disk for reading only: recovery (roll-forward,
    /// the NV cache's dirty blocks) happens in memory and nothing is written
    /// to the device or the region, ever — no checkpoint at open or close,
    /// no superseded slot cleared — so a disk on read-only media, owned by
    /// another user, or being inspected opens as it is. Writes and trims
    /// fail with [`LogDiskError::ReadOnly`].
    pub fn open_read_only(
        dev: D,
        nv: Option<Box<dyn Region>>,
        options: Options,
    ) -> Result<Self, LogDiskError> {
        Self::open_with(dev, nv.map(Recovery::Region), options, true)
    }

    /// Opens an existing log disk whose NV cache region was lost (a tmpfs
    /// file after a reboot) or never existed, formatting `nv` as a fresh,
    /// empty cache for it. Safe only when the old cache held nothing dirty —
    /// the disk was last stopped by [`LogDisk::close`], or never had a cache:
    /// writes acknowledged only to a lost cache are gone.
    pub fn open_with_new_nv_cache(
        dev: D,
        nv: Box<dyn Region>,
        options: Options,
    ) -> Result<Self, LogDiskError> {
        let sb = read_superblock(&dev)?;
        let cache = NvCache::format(nv, sb.geometry.block_size, sb.id)?;
        Self::open_with(dev, Some(Recovery::Fresh(cache)), options, false)
    }

    fn open_with(
        dev: D,
        nv: Option<Recovery>,
        options: Options,
        read_only: bool,
    ) -> Result<Self, LogDiskError> {
        if options.clean_low < 2 {
            return Err(LogDiskError::Invalid(format!(
                "clean_low {} is below 2 (the cleaner needs a segment to write into)",
                options.clean_low
            )));
        }
        if !(0.0..=1.0).contains(&options.destage_threshold) {
            return Err(LogDiskError::Invalid(format!(
                "destage threshold {} is not a fraction from 0 to 1",
                options.destage_threshold
            )));
        }
        let sb = read_superblock(&dev)?;
        let geo = sb.geometry;
        let need = geo.image_blocks() * u64::from(geo.block_size);
        if dev.len() < need {
            return Err(LogDiskError::TooSmall {
                need,
                have: dev.len(),
            });
        }
        let cp = read_checkpoint(&dev, &geo)?;
        let n = geo.segment_blocks as usize;
        let b = geo.block_size as usize;
        let clean_high = if options.clean_high == 0 {
            (options.clean_low + 2).max(geo.segments / 32)
        } else {
            options.clean_high.max(options.clean_low + 1)
        }
        .min(geo.segments - 1);
        let checkpoint_interval = if options.checkpoint_interval == 0 {
            (40 * geo.checkpoint_blocks() / u64::from(geo.segment_blocks)).max(64)
        } else {
            options.checkpoint_interval
        };
        let nv = match nv {
            None => None,
            Some(Recovery::Fresh(cache)) => Some(cache),
            Some(Recovery::Region(r)) => Some(NvCache::open(r, geo.block_size, sb.id)?),
        };
        let mut st = State {
            map: cp.map.clone(),
            rev: vec![NO_BLOCK; geo.segments as usize * n],
            live: vec![0; geo.segments as usize],
            last_seq: vec![0; geo.segments as usize],
            opened_at: vec![0; geo.segments as usize],
            seg: vec![Seg::Free; geo.segments as usize],
            free: Vec::new(),
            pending: Vec::new(),
            tainted: vec![false; geo.segments as usize],
            any_tainted: false,
            head: None,
            last_opened: u32::MAX,
            sequence: cp.sequence,
            checkpoint_number: cp.number,
            since_checkpoint: 0,
            in_cleaner: false,
            buffered: Vec::with_capacity(n),
            buffer: IoBuf::zeroed(2 * n * b),
            buffer_of: HashMap::new(),
            out: IoBuf::zeroed(2 * n * b),
            out_entries: Vec::with_capacity(n),
            victim: IoBuf::zeroed(n * b),
            staging: IoBuf::default(),
            clean_out: IoBuf::zeroed(2 * n * b),
            clean_entries: Vec::with_capacity(n),
            nv: None,
            metrics: Metrics::from_counters(&cp.counters),
            writer: None,
            queued: VecDeque::new(),
            writes_queued: 0,
            writes_done: 0,
            bufs: Vec::new(),
            moving: VecDeque::new(),
            ranked: Vec::new(),
            out_fill: Vec::with_capacity(n),
            out_slots: Vec::with_capacity(n),
            fills: Vec::new(),
            failed: None,
            pass: Pass::default(),
            readers: None,
            small_reads: Vec::new(),
            large_reads: Vec::new(),
            clean_ages: Vec::new(),
            checkpoint_buf: IoBuf::default(),
        };
        let mut seg_buf = std::mem::take(&mut st.victim);
        let replay = roll_forward(&dev, &geo, &cp, &mut st.map, &mut seg_buf)?;
        let mut recovered = Recovered {
            segment_writes: replay.applied,
            nv_blocks: 0,
        };
        st.victim = seg_buf;
        st.head = replay.head;
        if let Some((segment, _)) = st.head {
            st.last_opened = segment;
        }
        st.sequence = st.sequence.max(replay.max_seen);
        if let Some(cache) = nv {
            let found = cache.scan()?;
            let slots = cache.slots() as usize;
            let mut nv = Nv {
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
            let mut newest: HashMap<u64, super::nv::Recovered> = HashMap::new();
            for r in found {
                if r.logical >= geo.logical_blocks {
                    continue;
                }
                st.sequence = st.sequence.max(r.sequence);
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
            recovered.nv_blocks = live.len() as u32;
            live.sort_unstable_by_key(|r| r.sequence);
            for r in &live {
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
            st.nv = Some(nv);
        }
        // A new epoch: writes the crash left beyond the end of a chain (never
        // acknowledged, never replayed) carry sequences below this, so a walk
        // never mistakes one for a write made after recovery.
        st.sequence += 1 << 32;
        // Usage from the map: it cannot disagree with the table it came from.
        for (logical, e) in st.map.iter().enumerate() {
            if e.physical != UNMAPPED {
                let s = segment_of(&geo, e.physical) as usize;
                st.live[s] += 1;
                st.last_seq[s] = st.last_seq[s].max(e.sequence);
                st.rev[rev_index(&geo, e.physical)] = logical as u64;
            }
        }
        for s in 0..geo.segments {
            if st.head.is_some_and(|(h, _)| h == s) {
                st.seg[s as usize] = Seg::Open;
            } else if st.live[s as usize] > 0 {
                st.seg[s as usize] = Seg::Closed;
            } else {
                st.free.push(s);
            }
        }
        st.free.reverse();
        st.metrics.recoveries += 1;
        let disk = Self {
            dev: Arc::new(dev),
            geo,
            id: sb.id,
            options,
            clean_high,
            checkpoint_interval,
            recovered,
            read_only,
            state: RwLock::new(st),
        };
        if read_only {
            return Ok(disk);
        }
        {
            let mut st = disk.write_state();
            disk.checkpoint(&mut st)?;
            if let Some(nv) = st.nv.as_mut() {
                // Clear the slots recovery found superseded.
                let mut ranges = std::mem::take(&mut nv.ranges);
                ranges.clear();
                for &slot in &nv.superseded {
                    nv.cache.stage_clear(slot, &mut ranges)?;
                }
                nv.cache.persist(&ranges)?;
                nv.free.append(&mut nv.superseded);
                nv.ranges = ranges;
            }
        }
        Ok(disk)
    }

    fn read_state(&self) -> RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write_state(&self) -> RwLockWriteGuard<'_, State> {
        self.state.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// The geometry.
    pub fn geometry(&self) -> Geometry {
        self.geo
    }

    /// The volume's identity (recorded in its NV cache).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// What the open replayed beyond the last checkpoint (nothing for a disk
    /// just formatted, or closed cleanly).
    pub fn recovered(&self) -> Recovered {
        self.recovered
    }

    /// The options in force (with automatic values resolved).
    pub fn options(&self) -> Options {
        Options {
            clean_high: self.clean_high,
            checkpoint_interval: self.checkpoint_interval,
            ..self.options
        }
    }

    /// The device underneath.
    pub fn device(&self) -> &D {
        &self.dev
    }

    /// A snapshot of the counters.
    pub fn metrics(&self) -> Metrics {
        self.read_state().metrics
    }

    /// Free segments (including those awaiting the next flush).
    pub fn free_segments(&self) -> u32 {
        let st = self.read_state();
        (st.free.len() + st.pending.len()) as u32
    }

    /// Live blocks per segment (for utilisation histograms).
    pub fn segment_live(&self) -> Vec<u32> {
        self.read_state().live.clone()
    }

    /// Number of NV slots (0 without an NV cache).
    pub fn nv_slots(&self) -> u32 {
        self.read_state()
            .nv
            .as_ref()
            .map_or(0, |nv| nv.cache.slots())
    }

    /// Reads logical block `logical` into `buf` (one block).
    pub fn read_block(&self, logical: u64, buf: &mut [u8]) -> Result<(), LogDiskError> {
        self.check_block(logical, buf.len())?;
        let st = self.read_state();
        self.read_locked(&st, logical, buf)
    }

    fn read_locked(&self, st: &State, logical: u64, buf: &mut [u8]) -> Result<(), LogDiskError> {
        let b = self.geo.block_size as usize;
        if let Some(&i) = st.buffer_of.get(&logical) {
            let at = (i as usize + 1) * b;
            buf.copy_from_slice(&st.buffer[at..at + b]);
            return Ok(());
        }
        if let Some(nv) = &st.nv
            && let Some(&slot) = nv.of.get(&logical)
        {
            nv.cache.read(slot, buf)?;
            return Ok(());
        }
        let e = st.map[logical as usize];
        if e.physical == UNMAPPED {
            buf.fill(0);
            return Ok(());
        }
        if let Some(m) = st
            .moving
            .iter()
            .find(|m| (m.first..m.first + m.count).contains(&e.physical))
        {
            // Moved by a cleaner write still queued: from its buffer.
            let at = m.at + (e.physical - m.first) as usize * b;
            buf.copy_from_slice(&m.buf[at..at + b]);
            return Ok(());
        }
        if is_aligned(buf, self.dev.alignment()) {
            self.dev.read_at(buf, e.physical * b as u64)?;
        } else {
            // A direct-I/O device and a caller's unaligned buffer: bounce.
            let mut bounce = IoBuf::zeroed(buf.len());
            self.dev.read_at(&mut bounce, e.physical * b as u64)?;
            buf.copy_from_slice(&bounce);
        }
        let crc = format::crc32c(buf);
        if crc != e.crc {
            return Err(LogDiskError::Corrupt(format!(
                "logical block {logical} at physical block {}: data checksum {crc:#010x}, expected {:#010x}",
                e.physical, e.crc
            )));
        }
        Ok(())
    }

    fn check_blocks(&self, first: u64, count: u64) -> Result<(), LogDiskError> {
        if first
            .checked_add(count)
            .is_none_or(|end| end > self.geo.logical_blocks)
        {
            return Err(LogDiskError::Invalid(format!(
                "blocks {first}..+{count} are past the end ({} blocks)",
                self.geo.logical_blocks
            )));
        }
        Ok(())
    }

    fn check_block(&self, logical: u64, len: usize) -> Result<(), LogDiskError> {
        if logical >= self.geo.logical_blocks {
            return Err(LogDiskError::Invalid(format!(
                "logical block {logical} is past the end ({} blocks)",
                self.geo.logical_blocks
            )));
        }
        if len != self.geo.block_size as usize {
            return Err(LogDiskError::Invalid(format!(
                "a block buffer is {} bytes, not {len}",
                self.geo.block_size
            )));
        }
        Ok(())
    }

    /// Writes whole blocks starting at `first`: `data` is a multiple of the
    /// block size. With an NV cache the write is durable when this returns.
    pub fn write_blocks(&self, first: u64, data: &[u8]) -> Result<(), LogDiskError> {
        if self.read_only {
            return Err(LogDiskError::ReadOnly);
        }
        let b = self.geo.block_size as usize;
        if !data.len().is_multiple_of(b) {
            return Err(LogDiskError::Invalid(format!(
                "{} bytes is not a whole number of {b}-byte blocks",
                data.len()
            )));
        }
        let count = (data.len() / b) as u64;
        self.check_blocks(first, count)?;
        let mut st = self.write_state();
        if st.nv.is_some() {
            self.write_nv(&mut st, first, data)
        } else {
            for (i, block) in data.chunks_exact(b).enumerate() {
                self.write_buffered(&mut st, first + i as u64, block)?;
            }
            Ok(())
        }
    }

    /// Read-modify-write of part of one block, under the write lock so a
    /// concurrent write to another part of the block is not lost.
    fn write_partial(&self, logical: u64, within: usize, data: &[u8]) -> Result<(), LogDiskError> {
        if self.read_only {
            return Err(LogDiskError::ReadOnly);
        }
        let mut block = IoBuf::zeroed(self.geo.block_size as usize);
        let mut st = self.write_state();
        self.read_locked(&st, logical, &mut block)?;
        block[within..within + data.len()].copy_from_slice(data);
        if st.nv.is_some() {
            self.write_nv(&mut st, logical, &block)
        } else {
            self.write_buffered(&mut st, logical, &block)
        }
    }

    fn write_buffered(
        &self,
        st: &mut State,
        logical: u64,
        block: &[u8],
    ) -> Result<(), LogDiskError> {
        let b = self.geo.block_size as usize;
        let crc = format::crc32c(block);
        st.metrics.client_blocks += 1;
        let i = if let Some(&i) = st.buffer_of.get(&logical) {
            st.buffered[i as usize].crc = crc;
            i as usize
        } else {
            let i = st.buffered.len();
            st.buffered.push(SummaryEntry { logical, crc });
            st.buffer_of.insert(logical, i as u32);
            i
        };
        st.buffer[(i + 1) * b..(i + 2) * b].copy_from_slice(block);
        if st.buffered.len() + 1 >= self.geo.segment_blocks as usize {
            self.write_out_buffer(st, false)?;
        }
        Ok(())
    }

    fn write_out_buffer(&self, st: &mut State, partial: bool) -> Result<(), LogDiskError> {
        if st.buffered.is_empty() {
            return Ok(());
        }
        let entries = std::mem::take(&mut st.buffered);
        let mut buffer = std::mem::take(&mut st.buffer);
        let result = self.append(st, &entries, &mut buffer, Kind::User, partial, None);
        st.buffer = buffer;
        st.buffered = entries;
        result?;
        st.buffered.clear();
        st.buffer_of.clear();
        Ok(())
    }

    fn write_nv(&self, st: &mut State, first: u64, data: &[u8]) -> Result<(), LogDiskError> {
        let b = self.geo.block_size as usize;
        let mut blocks = data.chunks_exact(b).enumerate().peekable();
        while blocks.peek().is_some() {
            // Room for at least one block: first free what earlier destages
            // made durable, then destage more if that was not enough.
            while !st.queued.is_empty() && st.nv.as_ref().is_some_and(|nv| nv.free.is_empty()) {
                // Queued writes free held slots, a queued flush destaged ones.
                Self::reap_one(st)?;
            }
            if st
                .nv
                .as_ref()
                .is_some_and(|nv| nv.free.is_empty() && !nv.awaiting.is_empty())
            {
                self.device_flush(st)?;
            }
            if st.nv.as_ref().is_some_and(|nv| nv.free.is_empty()) {
                self.destage(st, true)?;
            }
            let sequence_base = st.sequence;
            let State {
                nv: Some(nv),
                metrics,
                sequence,
                writes_done,
                ..
            } = st
            else {
                unreachable!("write_nv runs with an NV cache");
            };
            let mut ranges = std::mem::take(&mut nv.ranges);
            ranges.clear();
            // Clears of slots superseded by earlier, already fenced writes
            // (a deferring cache clears them only after a sync made their
            // successors durable: `Nv::sync_then_clear`).
            let deferred = nv.cache.defers();
            let clearing = if deferred {
                Vec::new()
            } else {
                std::mem::take(&mut nv.superseded)
            };
            for &slot in &clearing {
                nv.cache.stage_clear(slot, &mut ranges)?;
            }
            let mut now_superseded = Vec::new();
            while let Some(&(i, block)) = blocks.peek() {
                let Some(slot) = nv.free.pop() else { break };
                blocks.next();
                let logical = first + i as u64;
                *sequence += 1;
                let crc = format::crc32c(block);
                nv.cache
                    .stage(slot, logical, *sequence, crc, block, &mut ranges)?;
                nv.meta[slot as usize] = SlotMeta {
                    logical,
                    sequence: *sequence,
                    crc,
                    awaiting: false,
                    write: 0,
                };
                nv.order.push_back((*sequence, slot));
                metrics.client_blocks += 1;
                metrics.nv_writes += 1;
                match nv.of.insert(logical, slot) {
                    Some(old) => {
                        let was = &mut nv.meta[old as usize];
                        if was.awaiting {
                            // Already destaged: not absorbed, a new dirty block.
                            nv.dirty += 1;
                        } else {
                            metrics.nv_write_hits += 1;
                        }
                        was.sequence = 0;
                        now_superseded.push(old);
                    }
                    None => nv.dirty += 1,
                }
            }
            debug_assert!(*sequence > sequence_base);
            if deferred {
                // Durable at the next sync (a flush, or before any clear).
                nv.unsynced = true;
                nv.superseded.append(&mut now_superseded);
            } else {
                nv.cache.persist(&ranges)?;
                nv.release(&clearing, *writes_done);
                nv.superseded = now_superseded;
            }
            nv.ranges = ranges;
            if nv.order.len() > 4 * nv.meta.len() + 64 {
                let meta = &nv.meta;
                nv.order
                    .retain(|&(seq, slot)| meta[slot as usize].sequence == seq);
            }
            let threshold = (f64::from(nv.cache.slots()) * self.options.destage_threshold) as u32;
            let want = threshold.max(self.geo.segment_blocks - 1);
            if nv.dirty > want.min(nv.cache.slots() - 1) {
                self.destage(st, false)?;
            }
        }
        Ok(())
    }

    /// Destages the oldest dirty NV blocks: full segment writes until the dirty
    /// count is under the threshold, or (`forced`) at least one write.
    fn destage(&self, st: &mut State, forced: bool) -> Result<(), LogDiskError> {
        let per_write = self.geo.segment_blocks - 1;
        loop {
            let Some(nv) = st.nv.as_mut() else {
                return Ok(());
            };
            let threshold = (f64::from(nv.cache.slots()) * self.options.destage_threshold) as u32;
            let go = if forced {
                nv.dirty > 0 || !nv.superseded.is_empty()
            } else {
                nv.dirty > threshold && nv.dirty >= per_write
            };
            if !go {
                return Ok(());
            }
            if nv.dirty == 0 {
                // Nothing dirty: only superseded slots wait; clear them.
                nv.sync()?;
                let mut ranges = std::mem::take(&mut nv.ranges);
                ranges.clear();
                for &slot in &nv.superseded {
                    nv.cache.stage_clear(slot, &mut ranges)?;
                }
                nv.cache.persist(&ranges)?;
                nv.ranges = ranges;
                nv.release_superseded(st.writes_done);
                return Ok(());
            }
            // The background cleaner's step first: its write may take part
            // of the open segment.
            if !st.in_cleaner && self.options.background_clean {
                self.clean_step(st)?;
            }
            // As many of the oldest dirty blocks as the open segment takes
            // (a whole segment's worth if none is open): one segment write.
            let take = st
                .head
                .map_or(per_write, |(_, slot)| self.geo.segment_blocks - slot - 1)
                .min(per_write);
            let mut entries = std::mem::take(&mut st.out_entries);
            let mut out = std::mem::take(&mut st.out);
            let mut fill = std::mem::take(&mut st.out_fill);
            let mut slots = std::mem::take(&mut st.out_slots);
            entries.clear();
            fill.clear();
            slots.clear();
            {
                let nv = st.nv.as_mut().expect("checked above");
                while (entries.len() as u32) < take {
                    let Some((seq, slot)) = nv.order.pop_front() else {
                        break;
                    };
                    let m = nv.meta[slot as usize];
                    if m.sequence != seq {
                        continue;
                    }
                    // The data is copied into the segment write later: by
                    // the background writer, or by `append` before a write
                    // in this thread.
                    fill.push((entries.len() as u32 + 1, slot));
                    slots.push(slot);
                    entries.push(SummaryEntry {
                        logical: m.logical,
                        crc: m.crc,
                    });
                }
            }
            let result = self.append(st, &entries, &mut out, Kind::User, false, Some(&mut fill));
            st.out = out;
            st.out_entries = entries;
            st.out_fill = fill;
            if let Err(e) = result {
                // Put the blocks back at the front: they are still dirty.
                let nv = st.nv.as_mut().expect("checked above");
                for &slot in slots.iter().rev() {
                    nv.order.push_front((nv.meta[slot as usize].sequence, slot));
                }
                st.out_slots = slots;
                return Err(e);
            }
            // The slots stay valid (and keep serving reads) until a device
            // flush makes the segment durable. Flushes are batched, one per
            // eighth of the slots destaged (or sooner: any device flush, a full
            // cache, a forced destage), instead of one per segment written.
            // The write just queued copies these slots (a write made in
            // this thread is done, and its number is at most `writes_done`).
            let write = st.writes_queued;
            let nv = st.nv.as_mut().expect("checked above");
            for &slot in &slots {
                let m = &mut nv.meta[slot as usize];
                m.awaiting = true;
                m.write = write;
                nv.awaiting.push((m.sequence, slot));
            }
            nv.dirty -= slots.len() as u32;
            st.out_slots = slots;
            let nv = st.nv.as_mut().expect("checked above");
            let batch = (nv.cache.slots() / 8).max(per_write) as usize;
            // Slots a queued flush already covers are not counted again.
            let covered = st
                .queued
                .iter()
                .find_map(|q| match *q {
                    Queued::Flush { awaiting, .. } => Some(awaiting),
                    _ => None,
                })
                .unwrap_or(0);
            if forced {
                self.device_flush(st)?;
            } else if nv.awaiting.len() - covered.min(nv.awaiting.len()) >= batch {
                if self.options.background_destage {
                    self.flush_in_background(st)?;
                } else {
                    self.device_flush(st)?;
                }
            }
            if forced {
                return Ok(());
            }
        }
    }

    /// Writes `entries` (data at `(i + 1)·B` of `buf`) at the log head, as
    /// one segment write per segment touched, and updates the tables. With
    /// `fill`, the data of block `i` is still in NV slot `slot` for each
    /// `(i + 1, slot)` (a destage): copied into `buf` before a write made
    /// here, or by the writer thread for a background write.
    fn append(
        &self,
        st: &mut State,
        entries: &[SummaryEntry],
        buf: &mut IoBuf,
        kind: Kind,
        partial: bool,
        mut fill: Option<&mut Vec<(u32, u32)>>,
    ) -> Result<(), LogDiskError> {
        let b = self.geo.block_size as usize;
        let n = self.geo.segment_blocks;
        let mut done = 0usize;
        // (A destage takes its step before choosing its blocks.)
        if kind == Kind::User && fill.is_none() && !st.in_cleaner && self.options.background_clean {
            self.clean_step(st)?;
        }
        if self.options.partial == PartialSegments::Close
            && kind == Kind::User
            && let Some((segment, slot)) = st.head
            && slot > 0
        {
            // The paper's rule: a user write never shares a segment with an
            // earlier write (here, the tail of the cleaner's last output).
            self.close_head(st, segment);
        }
        while done < entries.len() {
            let (segment, slot) = self.ensure_head(st, kind)?;
            let room = (n - slot - 1) as usize;
            let k = room.min(entries.len() - done);
            let chunk = &entries[done..done + k];
            let is_partial = partial && done + k == entries.len() && k < room;
            // The paper's rule: a segment holds at most one write short of a
            // full segment, which closes it (cleaner writes included).
            let close =
                self.options.partial == PartialSegments::Close && kind == Kind::User && k < room;
            st.sequence += 1;
            let sequence = st.sequence;
            let summary = format::encode_summary(
                &Summary {
                    sequence,
                    segment,
                    first_slot: slot,
                    partial: is_partial,
                    entries: chunk.to_vec(),
                },
                self.geo.block_size,
            )?;
            // The summary goes in the block before this chunk's data (the
            // previous chunk's last block, already written).
            buf[done * b..(done + 1) * b].copy_from_slice(&summary);
            let mut end = (done + k + 1) * b;
            if close {
                // The paper's LLD writes the whole segment buffer.
                let full = (done + room + 1) * b;
                buf[end..full].fill(0);
                end = full;
            }
            let offset = block_of(&self.geo, segment, slot) * b as u64;
            let io_len = (end - done * b) as u64;
            // A destage's or a volatile segment buffer's last (usually
            // only) write, or a background cleaner pass's writes, go to the
            // background writer.
            let last = done + k == entries.len();
            let background = self.options.background_destage
                && match kind {
                    Kind::User => last,
                    Kind::Cleaner => !st.in_cleaner,
                };
            if background {
                // Behind at most WRITE_DEPTH − 1 other segment writes. The
                // caller gets a spare buffer. A destage's blocks stay valid
                // in the NV cache, which serves their reads until a device
                // flush (queued behind this write) retires them; a cleaner
                // write's or a volatile segment buffer's blocks are served
                // from its buffer until it is done.
                while st
                    .queued
                    .iter()
                    .filter(|q| matches!(q, Queued::Segment(_) | Queued::Shared(_)))
                    .count()
                    >= WRITE_DEPTH
                {
                    Self::reap_one(st)?;
                }
                if let Some(why) = &st.failed {
                    return Err(LogDiskError::Failed(why.clone()));
                }
                let mut spare = st.bufs.pop().unwrap_or_default();
                if spare.len() < buf.len() {
                    spare = IoBuf::zeroed(buf.len());
                }
                let owned = if last {
                    std::mem::replace(buf, spare)
                } else {
                    // A cleaner write split over two segments: this first
                    // part goes from a copy, because the next part's summary
                    // takes the place of its last block in `buf`.
                    spare[done * b..end].copy_from_slice(&buf[done * b..end]);
                    spare
                };
                let fill = match fill.as_deref_mut() {
                    Some(f) => std::mem::replace(f, st.fills.pop().unwrap_or_default()),
                    None => Vec::new(),
                };
                let destage = kind == Kind::User && st.nv.is_some();
                let job = if destage {
                    Job::Write {
                        buf: owned,
                        from: done * b,
                        to: end,
                        offset,
                        fill,
                        after_earlier: false,
                    }
                } else {
                    let shared = Arc::new(owned);
                    st.moving.push_back(Moving {
                        first: block_of(&self.geo, segment, slot + 1),
                        count: k as u64,
                        at: (done + 1) * b,
                        buf: Arc::clone(&shared),
                    });
                    Job::WriteShared {
                        buf: shared,
                        from: done * b,
                        to: end,
                        offset,
                    }
                };
                if self.writer(st)?.jobs.send(job).is_err() {
                    return Err(Writer::stopped(st));
                }
                if destage {
                    st.queued.push_back(Queued::Segment(segment));
                    st.writes_queued += 1;
                } else {
                    st.queued.push_back(Queued::Shared(segment));
                }
            } else {
                // One device operation outstanding at most.
                Self::settle(st)?;
                if let Some(f) = fill.as_deref_mut() {
                    // This chunk's blocks, still in their NV slots (a prefix
                    // of the list: it is in block order).
                    let upto = f.partition_point(|&(i, _)| i as usize <= done + k);
                    if let Some(nv) = st.nv.as_ref() {
                        for &(i, slot) in &f[..upto] {
                            let i = i as usize;
                            nv.cache.read(slot, &mut buf[i * b..(i + 1) * b])?;
                        }
                    }
                    f.drain(..upto);
                }
                self.dev.write_at(&buf[done * b..end], offset)?;
            }
            let m = &mut st.metrics;
            match kind {
                Kind::User => {
                    m.user_segment_writes += 1;
                    m.user_blocks_written += k as u64;
                    m.user_bytes += io_len;
                }
                Kind::Cleaner => {
                    m.cleaner_segment_writes += 1;
                    m.cleaner_blocks_written += k as u64;
                    m.cleaner_bytes += io_len;
                }
            }
            if is_partial {
                m.partial_segments += 1;
            }
            for (i, e) in chunk.iter().enumerate() {
                let physical = block_of(&self.geo, segment, slot + 1 + i as u32);
                st.rev[rev_index(&self.geo, physical)] = e.logical;
                let old = std::mem::replace(
                    &mut st.map[e.logical as usize],
                    MapEntry {
                        physical,
                        sequence,
                        crc: e.crc,
                    },
                );
                if old.physical != UNMAPPED {
                    Self::kill(st, segment_of(&self.geo, old.physical));
                }
            }
            st.live[segment as usize] += k as u32;
            st.last_seq[segment as usize] = sequence;
            let next = if close { n } else { slot + 1 + k as u32 };
            if next + 1 >= n {
                self.close_head(st, segment);
            } else {
                st.head = Some((segment, next));
            }
            done += k;
            st.since_checkpoint += 1;
        }
        self.invariant(st);
        if !st.in_cleaner && st.since_checkpoint >= self.checkpoint_interval {
            self.write_checkpoint(st, self.options.background_destage)?;
        }
        Ok(())
    }

    /// Waits for everything queued on the background writer (retiring what
    /// its flushes made durable); fails if any of it failed, or if a
    /// background write failed before.
    fn settle(st: &mut State) -> Result<(), LogDiskError> {
        while !st.queued.is_empty() {
            Self::reap_one(st)?;
        }
        match &st.failed {
            Some(why) => Err(LogDiskError::Failed(why.clone())),
            None => Ok(()),
        }
    }

    /// Waits for the oldest job queued on the background writer and takes
    /// in what it did: a segment write's buffer back (and the NV slots held
    /// for it freed), a checkpoint's buffer back, or a flush's segments and
    /// NV slots retired.
    fn reap_one(st: &mut State) -> Result<(), LogDiskError> {
        let Some(queued) = st.queued.pop_front() else {
            return Ok(());
        };
        let result = match (queued, Writer::next(st)) {
            (
                Queued::Segment(_),
                Some(Done::Write {
                    buf,
                    mut fill,
                    result,
                }),
            ) => {
                st.bufs.push(buf);
                fill.clear();
                st.fills.push(fill);
                st.writes_done += 1;
                let done = st.writes_done;
                if let Some(nv) = st.nv.as_mut() {
                    nv.unhold(done);
                }
                result
            }
            (Queued::Shared(_), Some(Done::Shared(buf, result))) => {
                // Reads of its blocks go to the device again.
                st.moving.pop_front();
                if let Ok(buf) = Arc::try_unwrap(buf) {
                    st.bufs.push(buf);
                }
                result
            }
            (Queued::Checkpoint, Some(Done::Write { buf, result, .. })) => {
                st.checkpoint_buf = buf;
                result
            }
            (Queued::Flush { pending, awaiting }, Some(Done::Flush(result))) => {
                if result.is_ok() {
                    st.metrics.device_flushes += 1;
                    Self::retire(st, pending, awaiting)?;
                }
                result
            }
            _ => return Err(Writer::stopped(st)),
        };
        if let Err(e) = result {
            st.failed = Some(e.to_string());
            return Err(e.into());
        }
        Ok(())
    }

    /// The background writer, started at its first job.
    fn writer<'s>(&self, st: &'s mut State) -> Result<&'s Writer, LogDiskError> {
        if st.writer.is_none() {
            let nv = st.nv.as_ref().map(|nv| &nv.cache);
            st.writer = Some(Writer::start(
                &self.dev,
                nv,
                self.geo.block_size as usize,
                self.options.writer_threads,
            )?);
        }
        Ok(st.writer.as_ref().expect("started above"))
    }

    /// The head segment takes no more writes.
    fn close_head(&self, st: &mut State, segment: u32) {
        let _ = self;
        if st.live[segment as usize] == 0 {
            st.seg[segment as usize] = Seg::Pending;
            st.pending.push(segment);
        } else {
            st.seg[segment as usize] = Seg::Closed;
        }
        st.head = None;
    }

    /// Debug builds check that no closed segment is empty (it would be lost
    /// to reuse forever).
    fn invariant(&self, st: &State) {
        debug_assert!(
            st.in_cleaner
                || (0..self.geo.segments as usize)
                    .all(|s| st.seg[s] != Seg::Closed || st.live[s] > 0),
            "a closed segment is empty: {:?} / {:?}",
            st.seg,
            st.live
        );
    }

    /// One block of `segment` died.
    fn kill(st: &mut State, segment: u32) {
        let s = segment as usize;
        st.live[s] -= 1;
        if st.live[s] == 0 && st.seg[s] == Seg::Closed {
            st.seg[s] = Seg::Pending;
            st.pending.push(segment);
        }
    }

    /// Segments the cleaner can count on: free ones, and pending ones that a
    /// device flush will free. Not those a trim emptied (tainted): until a
    /// checkpoint holds the trim, a crash brings their blocks back, and a
    /// reserve counted on them could vanish and leave the cleaner no segment
    /// to copy into (the proptest found a crash that left every segment
    /// holding live blocks and every write failing with `NoSpace`).
    fn reserve(st: &State) -> u32 {
        let usable = if st.any_tainted {
            st.pending
                .iter()
                .filter(|&&s| !st.tainted[s as usize])
                .count()
        } else {
            st.pending.len()
        };
        (st.free.len() + usable) as u32
    }

    /// The log head, opening a segment (and cleaning first) if needed.
    fn ensure_head(&self, st: &mut State, kind: Kind) -> Result<(u32, u32), LogDiskError> {
        if let Some(head) = st.head {
            return Ok(head);
        }
        if kind == Kind::User && !st.in_cleaner && Self::reserve(st) <= self.options.clean_low {
            self.clean(st)?;
            // The cleaner's last write may have left the head open: continue there.
            if let Some(head) = st.head {
                return Ok(head);
            }
        }
        while st.free.is_empty() && !st.queued.is_empty() {
            // A flush queued behind the last destages frees segments.
            Self::reap_one(st)?;
        }
        if st.free.is_empty() && !st.pending.is_empty() {
            self.device_flush(st)?;
        }
        if st.free.is_empty() && st.any_tainted && !st.in_cleaner {
            self.checkpoint(st)?;
        }
        // The free segment next after the last one opened (wrapping): the
        // log's writes move up the disk in address order, which a disk
        // takes faster than jumps back and forth.
        let after = st.last_opened;
        let (i, &segment) = st
            .free
            .iter()
            .enumerate()
            .min_by_key(|&(_, &s)| s.wrapping_sub(after.wrapping_add(1)))
            .ok_or(LogDiskError::NoSpace)?;
        st.free.swap_remove(i);
        st.last_opened = segment;
        st.seg[segment as usize] = Seg::Open;
        st.opened_at[segment as usize] =
            st.metrics.user_blocks_written + st.metrics.cleaner_blocks_written;
        st.head = Some((segment, 0));
        Ok((segment, 0))
    }

    /// Flushes the device; segments that died before it become free, and NV
    /// slots destaged before it are cleared and freed.
    fn device_flush(&self, st: &mut State) -> Result<(), LogDiskError> {
        Self::settle(st)?;
        self.dev.flush()?;
        st.metrics.device_flushes += 1;
        let awaiting = st.nv.as_ref().map_or(0, |nv| nv.awaiting.len());
        Self::retire(st, st.pending.len(), awaiting)
    }

    /// NV mode with [`Options::background_destage`]: queues a device flush
    /// behind the segment write in flight and returns; the writer thread
    /// issues it after that write, so the device sees the order a
    /// synchronous flush gives. What it makes durable — the segments pending
    /// and the NV slots destaged when it was queued — is retired when it is
    /// settled (the next device operation, or a wait for free NV slots or
    /// segments).
    fn flush_in_background(&self, st: &mut State) -> Result<(), LogDiskError> {
        // One flush in the queue at a time: a flush's counts index the
        // pending and awaiting lists, which only the flush before it shrinks.
        while st.queued.iter().any(|q| matches!(q, Queued::Flush { .. })) {
            Self::reap_one(st)?;
        }
        if let Some(why) = &st.failed {
            return Err(LogDiskError::Failed(why.clone()));
        }
        if st.writer.is_none() {
            return self.device_flush(st);
        }
        let awaiting = st.nv.as_ref().map_or(0, |nv| nv.awaiting.len());
        let pending = st.pending.len();
        self.queue_flush(st, pending, awaiting)
    }

    /// Queues a device flush on the background writer; when done it retires
    /// the first `pending` pending segments and `awaiting` destaged slots.
    fn queue_flush(
        &self,
        st: &mut State,
        pending: usize,
        awaiting: usize,
    ) -> Result<(), LogDiskError> {
        if self.writer(st)?.jobs.send(Job::Flush).is_err() {
            return Err(Writer::stopped(st));
        }
        st.queued.push_back(Queued::Flush { pending, awaiting });
        Ok(())
    }

    /// After a device flush that covered the first `pending_upto` pending
    /// segments and the first `awaiting_upto` destaged NV slots (both lists
    /// only grow between flushes): those segments become free, and those
    /// slots are cleared and freed.
    fn retire(
        st: &mut State,
        pending_upto: usize,
        awaiting_upto: usize,
    ) -> Result<(), LogDiskError> {
        Self::release_pending_upto(st, pending_upto);
        let writes_done = st.writes_done;
        let Some(nv) = st.nv.as_mut() else {
            return Ok(());
        };
        if awaiting_upto == 0 {
            return Ok(());
        }
        // Writes staged but not yet synced are made durable before any slot
        // is cleared: a superseded slot's successor must be durable first.
        nv.sync()?;
        let mut ranges = std::mem::take(&mut nv.ranges);
        // Superseded slots are cleared (fenced) before the destaged ones: an
        // older slot of a block must never outlive its newest one.
        ranges.clear();
        for &slot in &nv.superseded {
            nv.cache.stage_clear(slot, &mut ranges)?;
        }
        nv.cache.persist(&ranges)?;
        // A slot superseded under a segment write queued after this flush
        // is held until that write has copied it.
        nv.release_superseded(writes_done);
        ranges.clear();
        let mut awaiting = std::mem::take(&mut nv.awaiting);
        let upto = awaiting_upto.min(awaiting.len());
        // Slots superseded (or freed and reused) since they were destaged
        // are skipped: their entry no longer holds that write.
        let meta = &nv.meta;
        let current = |&&(sequence, slot): &&(u64, u32)| meta[slot as usize].sequence == sequence;
        for &(_, slot) in awaiting[..upto].iter().filter(current) {
            nv.cache.stage_clear(slot, &mut ranges)?;
        }
        nv.cache.persist(&ranges)?;
        nv.ranges = ranges;
        for &(sequence, slot) in &awaiting[..upto] {
            let m = &mut nv.meta[slot as usize];
            if m.sequence != sequence {
                continue;
            }
            if nv.of.get(&m.logical) == Some(&slot) {
                nv.of.remove(&m.logical);
            }
            *m = SlotMeta::default();
            nv.free.push(slot);
        }
        awaiting.drain(..upto);
        nv.awaiting = awaiting;
        Ok(())
    }

    /// Pending segments become free (after a device flush), except those a
    /// trim tainted: they wait for the next checkpoint.
    fn release_pending(st: &mut State) {
        Self::release_pending_upto(st, usize::MAX);
    }

    /// [`LogDisk::release_pending`] of the first `upto` pending segments.
    fn release_pending_upto(st: &mut State, upto: usize) {
        let State {
            pending,
            seg,
            free,
            tainted,
            ..
        } = st;
        let mut index = 0usize;
        pending.retain(|&s| {
            index += 1;
            if index > upto || tainted[s as usize] {
                return true;
            }
            seg[s as usize] = Seg::Free;
            free.push(s);
            false
        });
    }

    /// Unmaps the whole blocks `first..first + count` (TRIM): they read as
    /// zeroes and stop costing the cleaner. Advisory, as NBD's TRIM is: a
    /// crash before the next checkpoint may bring back an earlier write of a
    /// trimmed block (never another block's data, never bytes never written).
    pub fn trim_blocks(&self, first: u64, count: u64) -> Result<(), LogDiskError> {
        if self.read_only {
            return Err(LogDiskError::ReadOnly);
        }
        self.check_blocks(first, count)?;
        let b = self.geo.block_size as usize;
        let mut st = self.write_state();
        for logical in first..first + count {
            if let Some(i) = st.buffer_of.remove(&logical) {
                // Volatile mode: drop it from the segment buffer (the last
                // buffered block takes its place).
                let i = i as usize;
                let last = st.buffered.len() - 1;
                if i != last {
                    st.buffered[i] = st.buffered[last];
                    st.buffer
                        .copy_within((last + 1) * b..(last + 2) * b, (i + 1) * b);
                    let moved = st.buffered[i].logical;
                    st.buffer_of.insert(moved, i as u32);
                }
                st.buffered.pop();
            }
            if let Some(nv) = st.nv.as_mut()
                && let Some(slot) = nv.of.remove(&logical)
            {
                // As an overwrite supersedes a slot, with no successor: the
                // slot is cleared by the next persist or device flush.
                let m = &mut nv.meta[slot as usize];
                if !m.awaiting {
                    nv.dirty -= 1;
                }
                m.sequence = 0;
                nv.superseded.push(slot);
            }
            let old = std::mem::replace(
                &mut st.map[logical as usize],
                MapEntry {
                    physical: UNMAPPED,
                    sequence: 0,
                    crc: 0,
                },
            );
            if old.physical != UNMAPPED {
                let segment = segment_of(&self.geo, old.physical);
                st.tainted[segment as usize] = true;
                st.any_tainted = true;
                Self::kill(&mut st, segment);
            }
        }
        self.invariant(&st);
        Ok(())
    }

    fn pick_victim(&self, st: &State) -> Option<u32> {
        let busy = Self::busy_segments(st);
        (0..self.geo.segments)
            .filter(|&s| st.seg[s as usize] == Seg::Closed && !busy.contains(&s))
            .map(|s| (s, self.victim_score(st, s)))
            .max_by(|a, b| a.1.total_cmp(&b.1).then(b.0.cmp(&a.0)))
            .map(|(s, _)| s)
    }

    /// The segments of queued writes (at most [`WRITE_DEPTH`] of them;
    /// `u32::MAX` pads): never victims, their blocks are not all on the
    /// device yet.
    fn busy_segments(st: &State) -> [u32; WRITE_DEPTH] {
        let mut busy = [u32::MAX; WRITE_DEPTH];
        let segments = st.queued.iter().filter_map(|q| match *q {
            Queued::Segment(s) | Queued::Shared(s) => Some(s),
            _ => None,
        });
        for (slot, s) in busy.iter_mut().zip(segments) {
            *slot = s;
        }
        busy
    }

    /// How much the policy wants segment `s` cleaned: the highest goes
    /// first, the lowest segment number among equals. Greedy: fewest live
    /// blocks; cost-benefit and age sort: `(1 − u)·age / (1 + u)`.
    fn victim_score(&self, st: &State, s: u32) -> f64 {
        let live = st.live[s as usize];
        match self.options.cleaner {
            CleanerPolicy::Greedy => -f64::from(live),
            CleanerPolicy::CostBenefit | CleanerPolicy::AgeSort => {
                let u = f64::from(live) / f64::from(self.geo.segment_blocks - 1);
                let now = st.sequence;
                let age = (now - st.last_seq[s as usize].min(now)) as f64 + 1.0;
                (1.0 - u) * age / (1.0 + u)
            }
        }
    }

    /// The best `max` candidate victims, best first, into
    /// [`State::ranked`]: one scan of the segments and a partial sort per
    /// background pass, instead of a scan per victim taken. The same order
    /// as taking [`LogDisk::pick_victim`] again and again.
    fn rank_victims(&self, st: &mut State, max: usize) {
        let busy = Self::busy_segments(st);
        let mut ranked = std::mem::take(&mut st.ranked);
        ranked.clear();
        ranked.extend(
            (0..self.geo.segments)
                .filter(|&s| st.seg[s as usize] == Seg::Closed && !busy.contains(&s))
                .map(|s| (self.victim_score(st, s), s)),
        );
        let best_first = |a: &(f64, u32), b: &(f64, u32)| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1));
        if ranked.len() > max && max > 0 {
            ranked.select_nth_unstable_by(max - 1, best_first);
            ranked.truncate(max);
        }
        ranked.sort_unstable_by(best_first);
        st.ranked = ranked;
    }

    /// Cleans until the high watermark (or nothing more can be gained).
    fn clean(&self, st: &mut State) -> Result<(), LogDiskError> {
        // A background pass first: its victims' reads are already under way.
        self.finish_pass(st)?;
        // The victims are read from the device: nothing else outstanding.
        Self::settle(st)?;
        if st.any_tainted {
            // Trimmed segments become reusable only once a checkpoint holds
            // the trims; take one now rather than clean around them.
            self.checkpoint(st)?;
            if ((st.free.len() + st.pending.len()) as u32) >= self.clean_high {
                return Ok(());
            }
        }
        st.in_cleaner = true;
        let result = self.clean_passes(st);
        st.in_cleaner = false;
        result?;
        self.device_flush(st)
    }

    fn clean_passes(&self, st: &mut State) -> Result<(), LogDiskError> {
        let b = self.geo.block_size as usize;
        let n = self.geo.segment_blocks as usize;
        let per_write = n - 1;
        let mut out = std::mem::take(&mut st.clean_out);
        let mut entries = std::mem::take(&mut st.clean_entries);
        let mut ages: Vec<u64> = Vec::new();
        let mut staging = std::mem::take(&mut st.staging);
        let mut batch = Batch::default();
        let mut victims = Vec::new();
        let mut passes = 0u32;
        let result = (|| {
            while ((st.free.len() + st.pending.len()) as u32) < self.clean_high {
                passes += 1;
                if passes > 2 * self.geo.segments {
                    break;
                }
                // One pass: victims whose live blocks fit one segment write.
                entries.clear();
                ages.clear();
                victims.clear();
                // What can be written before any victim is freed.
                let room = st.head.map_or(0, |(_, slot)| n - slot as usize - 1)
                    + (st.free.len() + st.pending.len()) * per_write;
                // Several victims per pass, written as full segments, so a
                // pass frees more segments than it fills.
                let limit = room;
                let need = (limit + n + 1) * b;
                out.grow(need);
                // Live blocks of the victims taken so far (their reads are
                // batched, so `entries` lags behind).
                let mut taken = 0usize;
                while let Some(v) = self.pick_victim(st) {
                    if taken + st.live[v as usize] as usize > limit {
                        if victims.is_empty() {
                            return Err(LogDiskError::NoSpace);
                        }
                        break;
                    }
                    st.seg[v as usize] = Seg::Open; // not a candidate again this pass
                    victims.push(v);
                    taken += st.live[v as usize] as usize;
                    self.plan_reads(st, v, &mut batch);
                    if batch.staged >= BATCH_SEGMENTS * self.geo.segment_blocks {
                        self.read_and_collect(
                            st,
                            &mut batch,
                            &mut staging,
                            &mut out,
                            &mut entries,
                            &mut ages,
                        )?;
                    }
                }
                self.read_and_collect(
                    st,
                    &mut batch,
                    &mut staging,
                    &mut out,
                    &mut entries,
                    &mut ages,
                )?;
                if victims.is_empty() {
                    break;
                }
                self.age_sort(&mut entries, &mut out, &ages);
                for &v in &victims {
                    st.seg[v as usize] = Seg::Closed;
                }
                self.append(st, &entries, &mut out, Kind::Cleaner, false, None)?;
                for &v in &victims {
                    // Every live block moved (checked in `read_and_collect`),
                    // so the victim emptied; it may even be the head again
                    // already.
                    if st.seg[v as usize] == Seg::Closed && st.live[v as usize] == 0 {
                        st.seg[v as usize] = Seg::Pending;
                        st.pending.push(v);
                    }
                }
            }
            Ok(())
        })();
        if result.is_err() {
            // Victims taken but not written out go back to the candidates.
            for &v in &victims {
                if st.seg[v as usize] == Seg::Open && st.head.is_none_or(|(h, _)| h != v) {
                    st.seg[v as usize] = Seg::Closed;
                }
            }
        }
        st.clean_out = out;
        st.clean_entries = entries;
        st.staging = staging;
        result
    }

    /// Age sort: the survivors of a pass written oldest first.
    fn age_sort(&self, entries: &mut [SummaryEntry], out: &mut [u8], ages: &[u64]) {
        if self.options.cleaner != CleanerPolicy::AgeSort || entries.len() <= 1 {
            return;
        }
        let b = self.geo.block_size as usize;
        let mut order: Vec<usize> = (0..entries.len()).collect();
        order.sort_by_key(|&i| ages[i]);
        let sorted_entries: Vec<_> = order.iter().map(|&i| entries[i]).collect();
        let mut sorted = vec![0u8; (entries.len() + 1) * b];
        for (to, &from) in order.iter().enumerate() {
            sorted[(to + 1) * b..(to + 2) * b]
                .copy_from_slice(&out[(from + 1) * b..(from + 2) * b]);
        }
        out[b..(entries.len() + 1) * b].copy_from_slice(&sorted[b..]);
        entries.copy_from_slice(&sorted_entries);
    }

    /// The background cleaner's step at a user segment write (see
    /// [`Options::background_clean`]): collects and writes the pass issued
    /// [`BACKGROUND_LAG`] user segment writes ago, then, below the high
    /// watermark, issues the next. Deterministic: which writes collect and
    /// issue depends only on the sequence of operations, never on timing.
    fn clean_step(&self, st: &mut State) -> Result<(), LogDiskError> {
        if st.pass.active {
            st.pass.steps += 1;
            if st.pass.steps < BACKGROUND_LAG {
                return Ok(());
            }
            self.finish_pass(st)?;
        }
        if Self::reserve(st) < self.clean_high {
            self.start_pass(st)?;
        }
        Ok(())
    }

    /// Takes victims whose live blocks fit one segment write (and the room
    /// left before any victim is freed) and issues their reads on the reader
    /// threads.
    fn start_pass(&self, st: &mut State) -> Result<(), LogDiskError> {
        debug_assert!(!st.pass.active);
        let b = self.geo.block_size as usize;
        let n = self.geo.segment_blocks as usize;
        let per_write = n - 1;
        let room = st.head.map_or(0, |(_, slot)| n - slot as usize - 1)
            + (st.free.len() + st.pending.len()) * per_write;
        let limit = per_write.min(room);
        let mut pass = std::mem::take(&mut st.pass);
        pass.batch.clear();
        let mut taken = 0usize;
        // Every closed segment holds a live block: no pass takes more
        // victims than a segment write has blocks.
        self.rank_victims(st, per_write + 1);
        let ranked = std::mem::take(&mut st.ranked);
        for &(_, v) in &ranked {
            let live = st.live[v as usize] as usize;
            if taken + live > limit {
                break;
            }
            st.seg[v as usize] = Seg::Victim;
            taken += live;
            self.plan_reads(st, v, &mut pass.batch);
        }
        st.ranked = ranked;
        if pass.batch.victims.is_empty() {
            st.pass = pass;
            return Ok(());
        }
        if st.readers.is_none() {
            st.readers = Some(Readers::start(
                &self.dev,
                self.options.cleaner_read_threads,
                self.options.batch_reads,
            )?);
        }
        let small = SMALL_READ_BLOCKS.min(self.geo.segment_blocks) as usize;
        pass.bufs.clear();
        pass.steps = 0;
        pass.active = true;
        let mut jobs = Vec::with_capacity(pass.batch.runs.len());
        for (i, run) in pass.batch.runs.iter().enumerate() {
            let len = run.len as usize * b;
            let buf = if run.len as usize <= small {
                st.small_reads
                    .pop()
                    .unwrap_or_else(|| IoBuf::zeroed(small * b))
            } else {
                st.large_reads.pop().unwrap_or_else(|| IoBuf::zeroed(n * b))
            };
            pass.bufs.push(IoBuf::default());
            let offset = block_of(&self.geo, run.segment, run.slot) * b as u64;
            jobs.push((i, buf, len, offset));
        }
        let readers = st.readers.as_ref().expect("started above");
        pass.outstanding = readers.send(jobs);
        let sent = pass.outstanding == pass.batch.runs.len();
        st.pass = pass;
        if !sent {
            return Err(Readers::stopped(st));
        }
        Ok(())
    }

    /// Waits for the background pass's reads, then writes its victims'
    /// blocks that are still live through the log; the victims, emptied,
    /// become pending (free after the next device flush). On an error the
    /// victims go back to the candidates.
    fn finish_pass(&self, st: &mut State) -> Result<(), LogDiskError> {
        if !st.pass.active {
            return Ok(());
        }
        let mut pass = std::mem::take(&mut st.pass);
        pass.active = false;
        let start = std::time::Instant::now();
        let mut result = Ok(());
        if let Some(readers) = st.readers.as_ref() {
            let done = readers.done.lock().unwrap_or_else(PoisonError::into_inner);
            while pass.outstanding > 0 {
                let Ok((i, buf, read)) = done.recv() else {
                    break;
                };
                pass.bufs[i] = buf;
                pass.outstanding -= 1;
                if let (Ok(()), Err(e)) = (&result, read) {
                    result = Err(LogDiskError::from(e));
                }
            }
        }
        st.metrics.cleaner_read_ns += u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
        if result.is_ok() && pass.outstanding > 0 {
            result = Err(Readers::stopped(st));
        }
        if result.is_ok() {
            let b = u64::from(self.geo.block_size);
            st.metrics.cleaner_read_ios += pass.batch.runs.len() as u64;
            st.metrics.cleaner_read_bytes += u64::from(pass.batch.staged) * b;
            st.metrics.cleaner_background_passes += 1;
        }
        let result = result.and_then(|()| self.write_pass(st, &pass));
        for &(v, _, _) in &pass.batch.victims {
            if st.seg[v as usize] != Seg::Victim {
                continue;
            }
            if st.live[v as usize] == 0 {
                // Every block moved (or died): reusable after the flush that
                // makes the copies (or the writes that killed them) durable.
                st.seg[v as usize] = Seg::Pending;
                st.pending.push(v);
            } else {
                debug_assert!(result.is_err(), "segment {v} kept live blocks");
                st.seg[v as usize] = Seg::Closed;
            }
        }
        // Back to the pool of their size (with segments of at most
        // SMALL_READ_BLOCKS blocks, every buffer is a small one).
        let b = self.geo.block_size as usize;
        let small = SMALL_READ_BLOCKS.min(self.geo.segment_blocks) as usize * b;
        let large = self.geo.segment_blocks as usize * b;
        for buf in pass.bufs.drain(..) {
            if buf.len() == small {
                st.small_reads.push(buf);
            } else if buf.len() == large {
                st.large_reads.push(buf);
            }
        }
        pass.batch.clear();
        pass.outstanding = 0;
        st.pass = pass;
        self.invariant(st);
        result
    }

    /// Collects a background pass's live blocks and writes them at the log
    /// head as one cleaner write.
    fn write_pass(&self, st: &mut State, pass: &Pass) -> Result<(), LogDiskError> {
        let b = self.geo.block_size as usize;
        let n = self.geo.segment_blocks as usize;
        let mut out = std::mem::take(&mut st.clean_out);
        let mut entries = std::mem::take(&mut st.clean_entries);
        let mut ages = std::mem::take(&mut st.clean_ages);
        entries.clear();
        ages.clear();
        out.grow(2 * n * b);
        let bufs = &pass.bufs;
        let mut result = self.collect(
            st,
            &pass.batch,
            |i, _, k| &bufs[i][k as usize * b..(k as usize + 1) * b],
            &mut out,
            &mut entries,
            &mut ages,
        );
        if result.is_ok() {
            self.age_sort(&mut entries, &mut out, &ages);
            result = self.append(st, &entries, &mut out, Kind::Cleaner, false, None);
        }
        st.clean_out = out;
        st.clean_entries = entries;
        st.clean_ages = ages;
        result
    }

    /// Whether block `slot` of segment `segment` holds a live block.
    fn is_live(&self, st: &State, segment: u32, slot: u32) -> bool {
        let physical = block_of(&self.geo, segment, slot);
        let logical = st.rev[rev_index(&self.geo, physical)];
        logical != NO_BLOCK
            && st
                .map
                .get(logical as usize)
                .is_some_and(|m| m.physical == physical)
    }

    /// Plans the reads of victim `v`: a dense victim is read in one I/O (its
    /// first live block to its last); a sparse one (live fraction below
    /// [`Options::live_read_below`]) only its live blocks, runs of them that
    /// are at most [`Options::live_read_gap`] dead blocks apart read as one.
    fn plan_reads(&self, st: &State, v: u32, batch: &mut Batch) {
        let n = self.geo.segment_blocks;
        let sparse =
            f64::from(st.live[v as usize]) < self.options.live_read_below * f64::from(n - 1);
        let gap = if sparse {
            self.options.live_read_gap
        } else {
            n
        };
        let first = batch.runs.len();
        let mut run: Option<(u32, u32)> = None;
        for slot in 0..n {
            if !self.is_live(st, v, slot) {
                continue;
            }
            run = match run {
                Some((start, end)) if slot - end <= gap => Some((start, slot + 1)),
                Some((start, end)) => {
                    batch.push_run(v, start, end);
                    Some((slot, slot + 1))
                }
                None => Some((slot, slot + 1)),
            };
        }
        if let Some((start, end)) = run {
            batch.push_run(v, start, end);
        }
        batch.victims.push((v, first, batch.runs.len()));
    }

    /// Reads the batch's runs and appends its victims' live blocks, in
    /// victim and slot order, to `entries` and `out` (data at `(i + 1)·B`),
    /// their write sequences to `ages`; every block is checked against the
    /// CRC32C in the table. Empties the batch.
    fn read_and_collect(
        &self,
        st: &mut State,
        batch: &mut Batch,
        staging: &mut IoBuf,
        out: &mut [u8],
        entries: &mut Vec<SummaryEntry>,
        ages: &mut Vec<u64>,
    ) -> Result<(), LogDiskError> {
        if batch.victims.is_empty() {
            return Ok(());
        }
        let b = self.geo.block_size as usize;
        let staged = batch.staged as usize * b;
        staging.grow(staged);
        let start = std::time::Instant::now();
        self.read_runs(&batch.runs, &mut staging[..staged])?;
        st.metrics.cleaner_read_ns += u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
        st.metrics.cleaner_read_ios += batch.runs.len() as u64;
        st.metrics.cleaner_read_bytes += staged as u64;
        let staging: &[u8] = staging;
        self.collect(
            st,
            batch,
            |_, run, k| {
                let from = (run.staged + k) as usize * b;
                &staging[from..from + b]
            },
            out,
            entries,
            ages,
        )?;
        batch.clear();
        Ok(())
    }

    /// Appends the batch's victims' live blocks, in victim and slot order, to
    /// `entries` and `out` (data at `(i + 1)·B`), their write sequences to
    /// `ages`; `data(i, run, k)` is block `k` of run `i` as read. Only blocks
    /// live now are taken (a block that died since its read was planned is
    /// not copied), each checked against the CRC32C in the table.
    fn collect<'d>(
        &self,
        st: &mut State,
        batch: &Batch,
        data: impl Fn(usize, &Run, u32) -> &'d [u8],
        out: &mut [u8],
        entries: &mut Vec<SummaryEntry>,
        ages: &mut Vec<u64>,
    ) -> Result<(), LogDiskError> {
        let b = self.geo.block_size as usize;
        for &(v, first, end) in &batch.victims {
            st.metrics.cleaner_segment_reads += 1;
            st.metrics.lifetime_blocks += (st.metrics.user_blocks_written
                + st.metrics.cleaner_blocks_written)
                .saturating_sub(st.opened_at[v as usize]);
            let before = entries.len();
            for (i, run) in batch.runs.iter().enumerate().take(end).skip(first) {
                for k in 0..run.len {
                    let slot = run.slot + k;
                    if !self.is_live(st, v, slot) {
                        continue;
                    }
                    let physical = block_of(&self.geo, v, slot);
                    let logical = st.rev[rev_index(&self.geo, physical)];
                    let m = st.map[logical as usize];
                    let data = data(i, run, k);
                    if format::crc32c(data) != m.crc {
                        return Err(LogDiskError::Corrupt(format!(
                            "cleaning segment {v}: logical block {logical} at physical block {physical} fails its checksum"
                        )));
                    }
                    let to = entries.len() + 1;
                    out[to * b..(to + 1) * b].copy_from_slice(data);
                    entries.push(SummaryEntry {
                        logical,
                        crc: m.crc,
                    });
                    ages.push(m.sequence);
                }
            }
            let moved = entries.len() - before;
            if moved != st.live[v as usize] as usize {
                return Err(LogDiskError::Corrupt(format!(
                    "segment {v}: {} live blocks in the table, {moved} found",
                    st.live[v as usize]
                )));
            }
        }
        Ok(())
    }

    /// Reads every run into `staging` (run `r` at block `r.staged`): as one
    /// batch where the device batches reads ([`Options::batch_reads`]), else
    /// on up to [`Options::cleaner_read_threads`] threads.
    fn read_runs(&self, runs: &[Run], staging: &mut [u8]) -> Result<(), LogDiskError> {
        let b = self.geo.block_size as usize;
        let mut jobs = Vec::with_capacity(runs.len());
        let mut rest = staging;
        for r in runs {
            let (head, tail) = rest.split_at_mut(r.len as usize * b);
            jobs.push((block_of(&self.geo, r.segment, r.slot) * b as u64, head));
            rest = tail;
        }
        if self.options.batch_reads && self.dev.read_batch(&mut jobs)? {
            return Ok(());
        }
        let threads = (self.options.cleaner_read_threads.max(1) as usize).min(jobs.len());
        if threads <= 1 {
            for (offset, buf) in jobs {
                self.dev.read_at(buf, offset)?;
            }
            return Ok(());
        }
        let queue = std::sync::Mutex::new(jobs.into_iter());
        let work = || -> Result<(), DeviceError> {
            loop {
                let job = queue.lock().unwrap_or_else(PoisonError::into_inner).next();
                let Some((offset, buf)) = job else {
                    return Ok(());
                };
                self.dev.read_at(buf, offset)?;
            }
        };
        std::thread::scope(|s| {
            let helpers: Vec<_> = (1..threads).map(|_| s.spawn(work)).collect();
            let mine = work();
            let mut result = mine;
            for h in helpers {
                let theirs = h
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
                if result.is_ok() {
                    result = theirs;
                }
            }
            result
        })?;
        Ok(())
    }

    /// Makes every completed write durable: in volatile mode a partial
    /// segment write of the buffer, then a device flush.
    pub fn flush(&self) -> Result<(), LogDiskError> {
        if self.read_only {
            return Ok(());
        }
        let mut st = self.write_state();
        if let Some(nv) = st.nv.as_mut() {
            nv.sync()?;
        }
        if st.nv.is_none() {
            self.write_out_buffer(&mut st, true)?;
            self.device_flush(&mut st)?;
        }
        Ok(())
    }

    /// Waits until every device operation queued on the background writer
    /// so far (segment and cleaner writes, flushes, checkpoints) is done,
    /// and retires what its flushes made durable; the first error any of
    /// them met is returned. Dirty blocks stay in the NV cache (they are
    /// durable there): nothing new is destaged. Afterwards the device is
    /// idle until the next write, which is what a benchmark needs to measure
    /// the device alone between stretches of log-disk writes.
    pub fn drain(&self) -> Result<(), LogDiskError> {
        let mut st = self.write_state();
        Self::settle(&mut st)
    }

    /// Destages everything, writes a checkpoint and flushes: the image then
    /// opens with no roll-forward and an empty NV cache.
    pub fn close(&self) -> Result<(), LogDiskError> {
        if self.read_only {
            return Ok(());
        }
        let mut st = self.write_state();
        self.finish_pass(&mut st)?;
        self.write_out_buffer(&mut st, true)?;
        while st
            .nv
            .as_ref()
            .is_some_and(|nv| nv.dirty > 0 || !nv.superseded.is_empty())
        {
            self.destage(&mut st, true)?;
        }
        self.checkpoint(&mut st)
    }

    /// Writes a checkpoint now (after a device flush).
    pub fn sync_checkpoint(&self) -> Result<(), LogDiskError> {
        if self.read_only {
            return Err(LogDiskError::ReadOnly);
        }
        let mut st = self.write_state();
        self.checkpoint(&mut st)
    }

    /// Writes a checkpoint and waits for it to be durable.
    fn checkpoint(&self, st: &mut State) -> Result<(), LogDiskError> {
        self.write_checkpoint(st, false)
    }

    /// Writes a checkpoint: a device flush (everything the checkpoint
    /// describes is durable before it), the checkpoint write, a flush. With
    /// `background` and a running background writer, the three are queued
    /// on it (in that order, behind the segment writes before them) and the
    /// caller goes on; otherwise they are done here. A checkpoint that holds
    /// trims is always written here: it lets tainted segments be reused,
    /// which must wait until it is durable.
    fn write_checkpoint(&self, st: &mut State, background: bool) -> Result<(), LogDiskError> {
        let background = background && st.writer.is_some() && !st.any_tainted;
        if background {
            self.flush_in_background(st)?;
        } else {
            self.device_flush(st)?;
        }
        let number = st.checkpoint_number + 1;
        let (head_segment, head_slot) = st.head.unwrap_or((0, self.geo.segment_blocks - 1));
        st.metrics.checkpoints += 1;
        st.metrics.checkpoint_bytes +=
            self.geo.checkpoint_blocks() * u64::from(self.geo.block_size);
        let head = CheckpointHead {
            number,
            sequence: st.sequence,
            head_segment,
            head_slot,
            counters: st.metrics.to_counters(),
        };
        // Encoded straight from the tables into a buffer kept for it: no
        // copy of the map, no allocation (the slot is megabytes on a large
        // volume, and fresh pages cost a fault each).
        let b = u64::from(self.geo.block_size);
        let mut bytes = std::mem::take(&mut st.checkpoint_buf);
        bytes.grow((self.geo.checkpoint_blocks() * b) as usize);
        let usage = st
            .live
            .iter()
            .zip(&st.last_seq)
            .map(|(&live, &last_sequence)| Usage {
                live,
                last_sequence,
            });
        let encoded = format::encode_checkpoint_into(&mut bytes, &head, &st.map, usage, &self.geo);
        if let Err(e) = encoded {
            st.checkpoint_buf = bytes;
            return Err(e.into());
        }
        let at = if number % 2 == 1 {
            b
        } else {
            b * (1 + self.geo.checkpoint_blocks())
        };
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
            if self.writer(st)?.jobs.send(job).is_err() {
                return Err(Writer::stopped(st));
            }
            st.queued.push_back(Queued::Checkpoint);
            self.queue_flush(st, 0, 0)?;
        } else {
            let written = self.dev.write_at(&bytes, at);
            st.checkpoint_buf = bytes;
            written?;
            self.dev.flush()?;
            st.metrics.device_flushes += 1;
        }
        st.checkpoint_number = number;
        st.since_checkpoint = 0;
        if st.any_tainted {
            // The checkpoint holds every trim: tainted segments may be reused.
            st.tainted.fill(false);
            st.any_tainted = false;
            Self::release_pending(st);
        }
        Ok(())
    }
}

/// Cleaner reads are batched up to this many segments' worth of blocks, so a
/// pass of many victims reads them in parallel with bounded memory.
const BATCH_SEGMENTS: u32 = 8;

/// One device read the cleaner plans: blocks `slot..slot + len` of segment
/// `segment`, into the staging buffer from block `staged`.
#[derive(Clone, Copy, Debug)]
struct Run {
    segment: u32,
    slot: u32,
    len: u32,
    staged: u32,
}

/// User segment writes between a background cleaner pass's reads and their
/// collection: the reads run while the writer stages and writes that much
/// user data (a pass reads about a segment's worth of live blocks, ~10
/// sparse victims at utilisation 0.4, ~2 ms of small reads on a virtio disk;
/// in `cairn bench logdisk` the cleaner's step — waiting for the reads and
/// writing the pass — took the writer 104–158 µs per user segment at 4 and
/// 61–93 at 8).
pub const BACKGROUND_LAG: u32 = 8;

/// A background read of at most this many blocks goes into a small buffer;
/// a longer one into a whole segment's.
const SMALL_READ_BLOCKS: u32 = 16;

/// A background cleaner pass (see [`Options::background_clean`]).
#[derive(Default)]
struct Pass {
    /// Reads issued and not yet collected.
    active: bool,
    /// Victims and their reads.
    batch: Batch,
    /// The read buffers, by run, as the readers return them.
    bufs: Vec<IoBuf>,
    /// Reads not yet returned.
    outstanding: usize,
    /// User segment writes since the reads were issued.
    steps: u32,
}

/// A background read: run index, buffer, bytes to read, device offset.
type ReadJob = (usize, IoBuf, usize, u64);

/// A finished one: run index, the buffer back, and how the read went.
type ReadDone = (usize, IoBuf, Result<(), DeviceError>);

/// What a reader thread takes: one read, or a pass's reads as one batch.
enum ReadWork {
    One(ReadJob),
    Batch(Vec<ReadJob>),
}

/// The background cleaner's readers. On a device that batches reads
/// ([`Device::read_batch`]: a file, through `io_uring`), one thread issues
/// each pass's reads as one batch, all in flight at once; otherwise
/// [`Options::cleaner_read_threads`] threads each take the next read from a
/// shared queue.
struct Readers {
    jobs: Option<std::sync::mpsc::Sender<ReadWork>>,
    done: std::sync::Mutex<std::sync::mpsc::Receiver<ReadDone>>,
    handles: Vec<std::thread::JoinHandle<()>>,
    /// One thread, a batch per pass.
    batched: bool,
}

impl Readers {
    fn start<D: Device + 'static>(
        dev: &Arc<D>,
        threads: u32,
        batch: bool,
    ) -> Result<Self, LogDiskError> {
        let batched = batch && dev.read_batch(&mut []).unwrap_or(false);
        let (jobs, job_rx) = std::sync::mpsc::channel::<ReadWork>();
        let job_rx = Arc::new(std::sync::Mutex::new(job_rx));
        let (done_tx, done) = std::sync::mpsc::channel::<ReadDone>();
        let mut handles = Vec::new();
        for i in 0..if batched { 1 } else { threads.max(1) } {
            let dev = Arc::clone(dev);
            let job_rx = Arc::clone(&job_rx);
            let done_tx = done_tx.clone();
            let handle = std::thread::Builder::new()
                .name(format!("logdisk-clean-{i}"))
                .spawn(move || {
                    loop {
                        let work = job_rx.lock().unwrap_or_else(PoisonError::into_inner).recv();
                        let sent = match work {
                            Err(_) => return,
                            Ok(ReadWork::One(job)) => Self::read_one(&*dev, job, &done_tx),
                            Ok(ReadWork::Batch(jobs)) => Self::read(&*dev, jobs, &done_tx),
                        };
                        if sent.is_err() {
                            return;
                        }
                    }
                })
                .map_err(|e| LogDiskError::Failed(format!("starting a cleaner reader: {e}")))?;
            handles.push(handle);
        }
        Ok(Self {
            jobs: Some(jobs),
            done: std::sync::Mutex::new(done),
            handles,
            batched,
        })
    }

    /// Does `jobs` as one batch (each in turn should the device refuse the
    /// batch after all) and reports each; `Err` when nobody takes reports
    /// any more.
    fn read<D: Device + ?Sized>(
        dev: &D,
        mut jobs: Vec<ReadJob>,
        done: &std::sync::mpsc::Sender<ReadDone>,
    ) -> Result<(), ()> {
        let mut reads: Vec<(u64, &mut [u8])> = jobs
            .iter_mut()
            .map(|(_, buf, len, offset)| (*offset, &mut buf[..*len]))
            .collect();
        let batch = dev.read_batch(&mut reads);
        drop(reads);
        if let Ok(false) = batch {
            for job in jobs {
                Self::read_one(dev, job, done)?;
            }
            return Ok(());
        }
        // The pass fails on its first error; which read failed is in the
        // error, and no buffer of a failed pass is used: the error goes with
        // the first report.
        let mut error = batch.err();
        for (run, buf, _, _) in jobs {
            let result = error.take().map_or(Ok(()), Err);
            done.send((run, buf, result)).map_err(|_| ())?;
        }
        Ok(())
    }

    /// Does one read and reports it; `Err` when nobody takes reports any
    /// more.
    fn read_one<D: Device + ?Sized>(
        dev: &D,
        (run, mut buf, len, offset): ReadJob,
        done: &std::sync::mpsc::Sender<ReadDone>,
    ) -> Result<(), ()> {
        let result = dev.read_at(&mut buf[..len], offset);
        done.send((run, buf, result)).map_err(|_| ())
    }

    /// Sends a pass's reads: one batch, or one job per read for the threads
    /// to share. Returns how many were sent.
    fn send(&self, jobs: Vec<ReadJob>) -> usize {
        let Some(tx) = self.jobs.as_ref() else {
            return 0;
        };
        if self.batched {
            let n = jobs.len();
            return if tx.send(ReadWork::Batch(jobs)).is_ok() {
                n
            } else {
                0
            };
        }
        let mut sent = 0;
        for job in jobs {
            if tx.send(ReadWork::One(job)).is_err() {
                break;
            }
            sent += 1;
        }
        sent
    }

    /// A reader thread is gone (it panicked): the disk has failed.
    fn stopped(st: &mut State) -> LogDiskError {
        let why = "a cleaner reader stopped".to_string();
        st.failed = Some(why.clone());
        LogDiskError::Failed(why)
    }

    /// Lets the readers finish what they hold and waits for them.
    fn stop(mut self) {
        drop(self.jobs.take());
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
    }
}

/// Victims planned and not yet collected, with their reads.
#[derive(Default)]
struct Batch {
    /// (victim, its runs `first..end` in `runs`).
    victims: Vec<(u32, usize, usize)>,
    runs: Vec<Run>,
    /// Blocks staged so far.
    staged: u32,
}

impl Batch {
    fn push_run(&mut self, segment: u32, start: u32, end: u32) {
        self.runs.push(Run {
            segment,
            slot: start,
            len: end - start,
            staged: self.staged,
        });
        self.staged += end - start;
    }

    fn clear(&mut self) {
        self.victims.clear();
        self.runs.clear();
        self.staged = 0;
    }
}

/// Waits for a background segment write, so nothing touches the device
/// after the disk is gone.
impl<D: Device> Drop for LogDisk<D> {
    fn drop(&mut self) {
        let st = self.state.get_mut().unwrap_or_else(PoisonError::into_inner);
        if let Some(writer) = st.writer.take() {
            // The writer threads finish their jobs, find no more, and stop.
            drop(writer.jobs);
            for handle in writer.handles {
                let _ = handle.join();
            }
        }
        if let Some(readers) = st.readers.take() {
            readers.stop();
        }
    }
}

/// A job of the background writer: a write of `buf[from..to]` at device
/// offset `offset`, after copying NV slot `slot` into block `i` of `buf` for
/// each `(i, slot)` of `fill`; or a device flush.
enum Job {
    Write {
        buf: IoBuf,
        from: usize,
        to: usize,
        offset: u64,
        fill: Vec<(u32, u32)>,
        /// Start only when every job before it is done (a checkpoint: after
        /// the flush that makes what it describes durable).
        after_earlier: bool,
    },
    /// A write of `buf[from..to]` that readers share until it is done.
    WriteShared {
        buf: Arc<IoBuf>,
        from: usize,
        to: usize,
        offset: u64,
    },
    Flush,
}

/// A finished one: a write's buffers back and how it went, or how a flush
/// went.
enum Done {
    Write {
        buf: IoBuf,
        fill: Vec<(u32, u32)>,
        result: Result<(), DeviceError>,
    },
    Shared(Arc<IoBuf>, Result<(), DeviceError>),
    Flush(Result<(), DeviceError>),
}

/// The background segment writer: `threads` threads taking jobs in the
/// order queued. Writes run side by side (a disk takes two segment writes
/// at once faster than one after the other, and one thread's copy out of
/// the NV cache overlaps the other's write). A flush starts when every job
/// before it is done, so it covers them (issued by the thread that finished
/// the last of them: no thread sits idle on it); a checkpoint write starts when
/// every job before it is done (the flush queued before it included), so
/// it is never durable before what it describes. Jobs are numbered as sent;
/// [`LogDisk::reap_one`] takes their reports in that order, whatever order
/// they finish in.
struct Writer {
    jobs: std::sync::mpsc::Sender<Job>,
    done: std::sync::Mutex<WriterReports>,
    handles: Vec<std::thread::JoinHandle<()>>,
}

/// Reports from the writer threads, and those that arrived before their turn.
struct WriterReports {
    rx: std::sync::mpsc::Receiver<(u64, Done)>,
    early: Vec<(u64, Done)>,
    /// The number of the next job to report.
    next: u64,
}

/// Which jobs are done: every job below `prefix`, and those in `beyond`;
/// and the flushes taken before every job ahead of them was done.
#[derive(Default)]
struct Finished {
    prefix: u64,
    beyond: Vec<u64>,
    /// A flush waiting for the jobs before it. The thread that finishes
    /// the last of them issues it, so no thread sits idle on it.
    deferred: Vec<u64>,
}

impl Writer {
    fn start<D: Device + 'static>(
        dev: &Arc<D>,
        nv: Option<&Arc<NvCache>>,
        block_size: usize,
        threads: u32,
    ) -> Result<Self, LogDiskError> {
        let (jobs, job_rx) = std::sync::mpsc::channel::<Job>();
        let (done_tx, rx) = std::sync::mpsc::channel::<(u64, Done)>();
        // The receiver and the next job's number, taken together.
        let intake = Arc::new(std::sync::Mutex::new((job_rx, 0u64)));
        let finished = Arc::new((
            std::sync::Mutex::new(Finished::default()),
            std::sync::Condvar::new(),
        ));
        let mut handles = Vec::new();
        for t in 0..threads.max(1) {
            let (dev, nv, intake, finished, done_tx) = (
                Arc::clone(dev),
                nv.cloned(),
                Arc::clone(&intake),
                Arc::clone(&finished),
                done_tx.clone(),
            );
            let handle = std::thread::Builder::new()
                .name(format!("logdisk-destage-{t}"))
                .spawn(move || {
                    writer_thread(
                        &*dev,
                        nv.as_deref(),
                        block_size,
                        &intake,
                        &finished,
                        &done_tx,
                    );
                })
                .map_err(|e| {
                    LogDiskError::Failed(format!("starting the background writer: {e}"))
                })?;
            handles.push(handle);
        }
        Ok(Self {
            jobs,
            done: std::sync::Mutex::new(WriterReports {
                rx,
                early: Vec::new(),
                next: 0,
            }),
            handles,
        })
    }

    /// The next job's report, in the order sent (waiting for it); `None` if
    /// the writer is gone.
    fn next(st: &State) -> Option<Done> {
        let w = st.writer.as_ref()?;
        let mut r = w.done.lock().unwrap_or_else(PoisonError::into_inner);
        let want = r.next;
        let done = match r.early.iter().position(|&(id, _)| id == want) {
            Some(i) => r.early.swap_remove(i).1,
            None => loop {
                let (id, done) = r.rx.recv().ok()?;
                if id == want {
                    break done;
                }
                r.early.push((id, done));
            },
        };
        r.next += 1;
        Some(done)
    }

    /// The writer thread is gone (it panicked): the disk has failed.
    fn stopped(st: &mut State) -> LogDiskError {
        let why = "the background writer stopped".to_string();
        st.failed = Some(why.clone());
        LogDiskError::Failed(why)
    }
}

/// One writer thread: takes the next job, does it, reports it. A flush
/// covers every job before it: if one of those is still running, the flush
/// is left to the thread that finishes the last of them, and this thread
/// takes the next job. A write marked `after_earlier` (a checkpoint) waits
/// until every job before it is done, flushes included; nothing waits for
/// a flush otherwise.
fn writer_thread<D: Device + ?Sized>(
    dev: &D,
    nv: Option<&NvCache>,
    b: usize,
    intake: &std::sync::Mutex<(std::sync::mpsc::Receiver<Job>, u64)>,
    finished: &(std::sync::Mutex<Finished>, std::sync::Condvar),
    done_tx: &std::sync::mpsc::Sender<(u64, Done)>,
) -> Option<()> {
    let lock = || finished.0.lock().unwrap_or_else(PoisonError::into_inner);
    // Records job `id` done; returns a deferred flush it made ready (every
    // job before that flush is now done).
    let finish = |id: u64| -> Option<u64> {
        let mut f = lock();
        if id == f.prefix {
            f.prefix += 1;
            loop {
                let p = f.prefix;
                match f.beyond.iter().position(|&x| x == p) {
                    Some(i) => {
                        f.beyond.swap_remove(i);
                        f.prefix += 1;
                    }
                    None => break,
                }
            }
        } else {
            f.beyond.push(id);
        }
        finished.1.notify_all();
        let p = f.prefix;
        let ready = f.deferred.iter().position(|&x| x == p)?;
        Some(f.deferred.swap_remove(ready))
    };
    // Issues flush `id` (every job before it is done) and any flush that
    // made ready in turn.
    let flush = |mut id: u64| -> Option<()> {
        loop {
            let result = dev.flush();
            let next = finish(id);
            done_tx.send((id, Done::Flush(result))).ok()?;
            match next {
                Some(next) => id = next,
                None => return Some(()),
            }
        }
    };
    loop {
        let mut guard = intake.lock().unwrap_or_else(PoisonError::into_inner);
        let Ok(job) = guard.0.recv() else {
            return Some(());
        };
        let id = guard.1;
        guard.1 += 1;
        drop(guard);
        let done = match job {
            Job::Write {
                mut buf,
                from,
                to,
                offset,
                fill,
                after_earlier,
            } => {
                if after_earlier {
                    let mut f = lock();
                    while f.prefix < id {
                        f = finished.1.wait(f).unwrap_or_else(PoisonError::into_inner);
                    }
                }
                let copied = match nv {
                    Some(nv) => fill.iter().try_for_each(|&(i, slot)| {
                        let i = i as usize;
                        nv.read(slot, &mut buf[i * b..(i + 1) * b])
                    }),
                    // Fills come from the NV cache only.
                    None => Ok(()),
                };
                let result = copied.and_then(|()| dev.write_at(&buf[from..to], offset));
                Done::Write { buf, fill, result }
            }
            Job::WriteShared {
                buf,
                from,
                to,
                offset,
            } => {
                let result = dev.write_at(&buf[from..to], offset);
                Done::Shared(buf, result)
            }
            Job::Flush => {
                let mut f = lock();
                if f.prefix < id {
                    // Left to the thread that finishes the last job before it.
                    f.deferred.push(id);
                    continue;
                }
                drop(f);
                flush(id)?;
                continue;
            }
        };
        let ready = finish(id);
        done_tx.send((id, done)).ok()?;
        if let Some(flush_id) = ready {
            flush(flush_id)?;
        }
    }
}

enum Recovery {
    Fresh(NvCache),
    Region(Box<dyn Region>),
}

fn volume_id() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.finish() | 1
}

/// Reads and decodes the superblock at the start of `dev`.
pub fn read_superblock<D: Device + ?Sized>(dev: &D) -> Result<Superblock, LogDiskError> {
    // Page-aligned buffers, so an O_DIRECT device takes them as they are.
    let first_len = dev.alignment().max(SECTOR).min(dev.len());
    let mut first = IoBuf::zeroed(first_len as usize);
    dev.read_at(&mut first, 0)?;
    let bs = format::superblock_block_size(&first);
    let mut first = IoBuf::zeroed((bs as usize).min(dev.len() as usize));
    dev.read_at(&mut first, 0)?;
    Ok(format::decode_superblock(&first)?)
}

/// Reads both checkpoint slots; the valid one with the larger number wins.
pub(crate) fn read_checkpoint<D: Device + ?Sized>(
    dev: &D,
    geo: &Geometry,
) -> Result<Checkpoint, LogDiskError> {
    let b = u64::from(geo.block_size);
    let len = (geo.checkpoint_blocks() * b) as usize;
    let mut buf = IoBuf::zeroed(len);
    dev.read_at(&mut buf, b)?;
    let a = format::decode_checkpoint(&buf, geo);
    dev.read_at(&mut buf, b * (1 + geo.checkpoint_blocks()))?;
    let bb = format::decode_checkpoint(&buf, geo);
    match (a, bb) {
        (Ok(a), Ok(bb)) => Ok(if a.number >= bb.number { a } else { bb }),
        (Ok(a), Err(_)) => Ok(a),
        (Err(_), Ok(bb)) => Ok(bb),
        (Err(a), Err(bb)) => Err(LogDiskError::NoCheckpoint {
            a: a.to_string(),
            b: bb.to_string(),
        }),
    }
}

/// A segment write found after the checkpoint.
struct Found {
    sequence: u64,
    segment: u32,
    slot: u32,
    entries: Vec<SummaryEntry>,
}

/// Walks segment `segment` from `slot`, accepting summaries newer than
/// `after` whose data all match their CRCs. Returns the accepted writes and
/// the largest valid summary sequence seen.
fn walk_segment(
    seg_buf: &[u8],
    geo: &Geometry,
    segment: u32,
    mut slot: u32,
    after: u64,
    found: &mut Vec<Found>,
) -> u64 {
    let b = geo.block_size as usize;
    let n = geo.segment_blocks;
    let mut prev = after;
    let mut max_seen = 0;
    while slot + 1 < n {
        let at = slot as usize * b;
        let Ok(s) = format::decode_summary(&seg_buf[at..at + b], geo.block_size) else {
            break;
        };
        max_seen = max_seen.max(s.sequence);
        let k = s.entries.len() as u32;
        if s.segment != segment
            || s.first_slot != slot
            || s.sequence <= prev
            || k == 0
            || slot + 1 + k > n
            || s.entries.iter().any(|e| e.logical >= geo.logical_blocks)
        {
            break;
        }
        let torn = s.entries.iter().enumerate().any(|(i, e)| {
            let from = (slot as usize + 1 + i) * b;
            format::crc32c(&seg_buf[from..from + b]) != e.crc
        });
        if torn {
            break;
        }
        prev = s.sequence;
        found.push(Found {
            sequence: s.sequence,
            segment,
            slot,
            entries: s.entries,
        });
        slot += 1 + k;
    }
    max_seen
}

/// What a roll-forward found.
pub(crate) struct Replay {
    /// Largest summary sequence seen anywhere.
    pub max_seen: u64,
    /// Segment writes applied.
    pub applied: usize,
    /// Where the log continues.
    pub head: Option<(u32, u32)>,
}

/// Finds every segment write after checkpoint `cp` (sequence, head) and
/// applies it to `map` in sequence order. `seg_buf` holds one segment.
pub(crate) fn roll_forward<D: Device + ?Sized>(
    dev: &D,
    geo: &Geometry,
    cp: &Checkpoint,
    map: &mut [MapEntry],
    seg_buf: &mut [u8],
) -> Result<Replay, LogDiskError> {
    let b = geo.block_size as usize;
    let after = cp.sequence;
    let mut found = Vec::new();
    let mut max_seen = after;
    let mut first = IoBuf::zeroed(b);
    for s in 0..geo.segments {
        let start = block_of(geo, s, 0) * b as u64;
        let walk_from = if s == cp.head_segment {
            Some(cp.head_slot)
        } else {
            dev.read_at(&mut first, start)?;
            match format::decode_summary(&first, geo.block_size) {
                Ok(sum) => {
                    max_seen = max_seen.max(sum.sequence);
                    (sum.sequence > after).then_some(0)
                }
                Err(_) => None,
            }
        };
        if let Some(slot) = walk_from {
            dev.read_at(seg_buf, start)?;
            max_seen = max_seen.max(walk_segment(seg_buf, geo, s, slot, after, &mut found));
            if s == cp.head_segment && slot > 0 {
                // The head segment may also have been reused from slot 0.
                max_seen = max_seen.max(walk_segment(seg_buf, geo, s, 0, after, &mut found));
            }
        }
    }
    found.sort_unstable_by_key(|f| f.sequence);
    found.dedup_by_key(|f| f.sequence);
    for f in &found {
        for (i, e) in f.entries.iter().enumerate() {
            map[e.logical as usize] = MapEntry {
                physical: block_of(geo, f.segment, f.slot + 1 + i as u32),
                sequence: f.sequence,
                crc: e.crc,
            };
        }
    }
    // The log continues after the newest write found (or at the checkpoint's
    // head): a crash does not cost a segment.
    let head = match found.last() {
        Some(f) => (f.segment, f.slot + 1 + f.entries.len() as u32),
        None => (cp.head_segment, cp.head_slot),
    };
    Ok(Replay {
        max_seen,
        applied: found.len(),
        head: (head.1 + 1 < geo.segment_blocks).then_some(head),
    })
}

fn to_device_error(e: LogDiskError, op: DeviceOp, offset: u64, len: u64) -> DeviceError {
    match e {
        LogDiskError::Device(e) => e,
        LogDiskError::ReadOnly => DeviceError::ReadOnly { op },
        LogDiskError::NoSpace => DeviceError::Io {
            op,
            offset,
            len,
            device: "log disk".into(),
            source: std::io::Error::new(std::io::ErrorKind::StorageFull, e.to_string()),
        },
        other => DeviceError::Corrupt {
            op,
            offset,
            len,
            detail: other.to_string(),
        },
    }
}

/// The log disk is a `Device`: byte ranges are split into blocks, and a
/// partial block is read, patched and written whole. `discard` is accepted and
/// does nothing (ranges read back their old contents).
impl<D: Device + 'static> Device for LogDisk<D> {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<(), DeviceError> {
        check_range(DeviceOp::Read, offset, buf.len() as u64, self.len())?;
        let b = u64::from(self.geo.block_size);
        let st = self.read_state();
        // A scratch block only when a partial block is read.
        let mut block = IoBuf::default();
        let mut done = 0usize;
        while done < buf.len() {
            let at = offset + done as u64;
            let logical = at / b;
            let within = (at % b) as usize;
            let n = (b as usize - within).min(buf.len() - done);
            if within == 0 && n == b as usize {
                self.read_locked(&st, logical, &mut buf[done..done + n])
            } else {
                if block.is_empty() {
                    block = IoBuf::zeroed(b as usize);
                }
                self.read_locked(&st, logical, &mut block).map(|()| {
                    buf[done..done + n].copy_from_slice(&block[within..within + n]);
                })
            }
            .map_err(|e| to_device_error(e, DeviceOp::Read, at, n as u64))?;
            done += n;
        }
        Ok(())
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> Result<(), DeviceError> {
        check_range(DeviceOp::Write, offset, buf.len() as u64, self.len())?;
        let b = u64::from(self.geo.block_size);
        let bs = b as usize;
        let map = |e| to_device_error(e, DeviceOp::Write, offset, buf.len() as u64);
        let mut done = 0usize;
        while done < buf.len() {
            let at = offset + done as u64;
            let within = (at % b) as usize;
            if within == 0 && buf.len() - done >= bs {
                let whole = (buf.len() - done) / bs * bs;
                self.write_blocks(at / b, &buf[done..done + whole])
                    .map_err(map)?;
                done += whole;
            } else {
                let n = (bs - within).min(buf.len() - done);
                self.write_partial(at / b, within, &buf[done..done + n])
                    .map_err(map)?;
                done += n;
            }
        }
        Ok(())
    }

    fn flush(&self) -> Result<(), DeviceError> {
        LogDisk::flush(self).map_err(|e| to_device_error(e, DeviceOp::Flush, 0, 0))
    }

    fn discard(&self, offset: u64, len: u64) -> Result<(), DeviceError> {
        check_range(DeviceOp::Discard, offset, len, self.len())?;
        // Whole blocks only: a partial block at either end keeps its bytes.
        let blocks = whole_blocks(offset, len, u64::from(self.geo.block_size));
        if !blocks.is_empty() {
            self.trim_blocks(blocks.start, blocks.end - blocks.start)
                .map_err(|e| to_device_error(e, DeviceOp::Discard, offset, len))?;
        }
        Ok(())
    }

    fn allocation(
        &self,
        offset: u64,
        len: u64,
        out: &mut Vec<Extent>,
    ) -> Result<bool, DeviceError> {
        check_range(DeviceOp::Read, offset, len, self.len())?;
        let st = self.read_state();
        push_block_extents(
            out,
            offset,
            len,
            u64::from(self.geo.block_size),
            |logical| {
                let data = st.buffer_of.contains_key(&logical)
                    || st
                        .nv
                        .as_ref()
                        .is_some_and(|nv| nv.of.contains_key(&logical))
                    || st.map[logical as usize].physical != UNMAPPED;
                !data
            },
        );
        Ok(true)
    }

    fn len(&self) -> u64 {
        self.geo.logical_blocks * u64::from(self.geo.block_size)
    }

    fn alignment(&self) -> u64 {
        u64::from(self.geo.block_size)
    }

    fn describe(&self) -> String {
        format!(
            "log disk ({} segments of {} × {} B{}) on {}",
            self.geo.segments,
            self.geo.segment_blocks,
            self.geo.block_size,
            self.read_state()
                .nv
                .as_ref()
                .map(|nv| format!(", NV cache {}", nv.cache.describe()))
                .unwrap_or_default(),
            self.dev.describe()
        )
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    use super::*;
    use crate::device::MemoryDevice;

    const B: usize = 512;

    /// A memory device that logs writes and flushes in the order they
    /// complete, and holds writes at offset 0 while `hold` is set.
    struct Recorder {
        inner: MemoryDevice,
        hold: std::sync::atomic::AtomicBool,
        log: std::sync::Mutex<Vec<String>>,
    }

    impl Device for Recorder {
        fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<(), DeviceError> {
            self.inner.read_at(buf, offset)
        }
        fn write_at(&self, buf: &[u8], offset: u64) -> Result<(), DeviceError> {
            while offset == 0 && self.hold.load(std::sync::atomic::Ordering::Acquire) {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            self.inner.write_at(buf, offset)?;
            self.log.lock().unwrap().push(format!("write {offset}"));
            Ok(())
        }
        fn flush(&self) -> Result<(), DeviceError> {
            self.log.lock().unwrap().push("flush".into());
            self.inner.flush()
        }
        fn discard(&self, offset: u64, len: u64) -> Result<(), DeviceError> {
            self.inner.discard(offset, len)
        }
        fn len(&self) -> u64 {
            self.inner.len()
        }
        fn describe(&self) -> String {
            "recorder".into()
        }
    }

    /// A flush queued behind a write still running does not take a writer
    /// thread out of service: the write after it runs meanwhile, and the
    /// flush is issued once the write before it is done, by the thread
    /// that did it. Reports still come back in the order queued.
    #[test]
    fn a_flush_behind_a_running_write_is_issued_when_it_is_done_without_holding_a_thread() {
        let dev = Arc::new(Recorder {
            inner: MemoryDevice::new(4 * B as u64),
            hold: std::sync::atomic::AtomicBool::new(true),
            log: std::sync::Mutex::new(Vec::new()),
        });
        let writer = Writer::start(&dev, None, B, 2).unwrap();
        let write = |offset: u64| Job::Write {
            buf: IoBuf::zeroed(B),
            from: 0,
            to: B,
            offset,
            fill: Vec::new(),
            after_earlier: false,
        };
        for job in [write(0), Job::Flush, write(B as u64)] {
            writer.jobs.send(job).unwrap();
        }
        // The third job completes while the first is held (with the flush
        // holding a thread, neither thread would be free to take it).
        let start = std::time::Instant::now();
        while dev.log.lock().unwrap().is_empty() {
            assert!(
                start.elapsed().as_secs() < 10,
                "the write after the flush never ran"
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(*dev.log.lock().unwrap(), ["write 512"]);
        dev.hold.store(false, std::sync::atomic::Ordering::Release);
        let reports = writer.done.lock().unwrap();
        let mut order: Vec<u64> = (0..3).map(|_| reports.rx.recv().unwrap().0).collect();
        drop(reports);
        order.sort_unstable();
        assert_eq!(order, [0, 1, 2]);
        assert_eq!(*dev.log.lock().unwrap(), ["write 512", "write 0", "flush"]);
        drop(writer.jobs);
        for handle in writer.handles {
            handle.join().unwrap();
        }
    }

    fn geo() -> Geometry {
        Geometry {
            block_size: B as u32,
            segment_blocks: 8,
            segments: 12,
            logical_blocks: 40,
        }
    }

    fn disk(options: Options) -> (Arc<MemoryDevice>, LogDisk<Arc<MemoryDevice>>) {
        let g = geo();
        let dev = Arc::new(MemoryDevice::new(g.image_blocks() * B as u64));
        let disk = LogDisk::format(dev.clone(), g, None, options).expect("format");
        (dev, disk)
    }

    /// Runs `(slot, len)` the cleaner plans for `v`.
    fn plan(disk: &LogDisk<Arc<MemoryDevice>>, v: u32) -> Vec<(u32, u32)> {
        let mut batch = Batch::default();
        disk.plan_reads(&disk.read_state(), v, &mut batch);
        assert_eq!(batch.victims, vec![(v, 0, batch.runs.len())]);
        batch.runs.iter().map(|r| (r.slot, r.len)).collect()
    }

    #[test]
    fn live_only_reads_cover_the_live_blocks_bridging_at_most_the_gap() {
        let (_, mut disk) = disk(Options::default());
        // One full segment write: summary at slot 0, logical 0..7 at slots 1..7.
        disk.write_blocks(0, &[7u8; 7 * B]).expect("write");
        let v = segment_of(&disk.geo, disk.read_state().map[0].physical);
        // Overwrite logical 1, 2 and 4: slots 2, 3 and 5 die; 1, 4, 6, 7 live.
        for l in [1, 2, 4] {
            disk.write_blocks(l, &[9u8; B]).expect("write");
        }
        disk.flush().expect("flush");
        assert_eq!(disk.read_state().live[v as usize], 4);
        let mut with = |below: f64, gap: u32| {
            disk.options.live_read_below = below;
            disk.options.live_read_gap = gap;
            plan(&disk, v)
        };
        assert_eq!(with(1.0, 0), vec![(1, 1), (4, 1), (6, 2)]);
        assert_eq!(with(1.0, 1), vec![(1, 1), (4, 4)]);
        assert_eq!(with(1.0, 2), vec![(1, 7)]);
        // Dense (4 of 7 live is not below half): one read, first live to last.
        assert_eq!(with(0.5, 0), vec![(1, 7)]);
        assert_eq!(with(0.0, 0), vec![(1, 7)]);
    }

    /// The background cleaner collects a pass some user writes after it
    /// issued the pass's reads: a block overwritten in between must not be
    /// copied (its copy would replace the newer write in the table), and
    /// every other block of the victims moves intact.
    #[test]
    fn a_block_overwritten_while_its_background_read_is_outstanding_keeps_the_new_data() {
        let (_, disk) = disk(Options {
            live_read_below: 1.0,
            live_read_gap: 0,
            background_clean: true,
            ..Options::default()
        });
        let version = |l: u64, v: u8| [v ^ l as u8; B];
        for l in 0..40u64 {
            disk.write_blocks(l, &version(l, 1)).expect("write");
        }
        // Overwrite every other block: the first segments become sparse.
        for l in (0..40u64).step_by(2) {
            disk.write_blocks(l, &version(l, 2)).expect("write");
        }
        disk.flush().expect("flush");
        let (victims, target) = {
            let mut st = disk.write_state();
            disk.finish_pass(&mut st).expect("an earlier pass");
            disk.start_pass(&mut st).expect("start a pass");
            assert!(st.pass.active, "no victims: {:?}", st.live);
            let victims: Vec<u32> = st.pass.batch.victims.iter().map(|v| v.0).collect();
            let target = (0..40u64)
                .find(|&l| victims.contains(&segment_of(&disk.geo, st.map[l as usize].physical)))
                .expect("a live block in a victim");
            (victims, target)
        };
        // The overwrite reaches the table (a segment write) while the pass's
        // reads are outstanding and before the pass is collected.
        disk.write_blocks(target, &version(target, 3))
            .expect("write");
        disk.flush().expect("flush");
        {
            let mut st = disk.write_state();
            assert!(st.pass.active && st.pass.steps < BACKGROUND_LAG);
            disk.finish_pass(&mut st).expect("finish the pass");
            for &v in &victims {
                assert_eq!(st.live[v as usize], 0, "victim {v} emptied");
                assert_eq!(st.seg[v as usize], Seg::Pending, "victim {v}");
            }
        }
        let mut buf = [0u8; B];
        for l in 0..40u64 {
            disk.read_block(l, &mut buf).expect("read");
            let want = if l == target {
                3
            } else if l % 2 == 0 {
                2
            } else {
                1
            };
            assert_eq!(buf, version(l, want), "block {l} (overwritten: {target})");
        }
        assert_eq!(disk.metrics().cleaner_background_passes, 1);
    }

    /// The background passes' read buffers are reused: however many passes
    /// run, the pools hold no more buffers than one pass reads with (at most
    /// one run per live block of a segment write), so a workload allocates
    /// no read buffers once they are warm.
    #[test]
    fn background_read_buffers_are_reused_not_piled_up() {
        let (_, disk) = disk(Options {
            live_read_below: 1.0,
            live_read_gap: 0,
            ..Options::default()
        });
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        for i in 0..4000u32 {
            let l = rng.random_range(0..40u64);
            disk.write_blocks(l, &[i as u8; B]).expect("write");
        }
        let st = disk.read_state();
        assert!(
            st.metrics.cleaner_background_passes > 100,
            "{:?}",
            st.metrics
        );
        let per_write = disk.geo.segment_blocks as usize - 1;
        assert!(
            st.small_reads.len() + st.large_reads.len() <= per_write,
            "{} small and {} large read buffers after {} passes",
            st.small_reads.len(),
            st.large_reads.len(),
            st.metrics.cleaner_background_passes
        );
    }

    /// A flipped byte in a live block of a sparse victim: the cleaner's
    /// live-only read finds it against the table's CRC and refuses to copy
    /// it; the block is never served.
    #[test]
    fn a_corrupt_block_in_a_sparse_victim_is_reported_not_copied() {
        let (dev, disk) = disk(Options {
            live_read_below: 1.0,
            live_read_gap: 0,
            ..Options::default()
        });
        for l in 0..40u64 {
            disk.write_blocks(l, &[l as u8 + 1; B]).expect("write");
        }
        disk.flush().expect("flush");
        let physical = disk.read_state().map[5].physical;
        let mut x = [0u8];
        dev.read_at(&mut x, physical * B as u64 + 100)
            .expect("read");
        dev.write_at(&[x[0] ^ 0x40], physical * B as u64 + 100)
            .expect("write");
        // Rewrite the other blocks at random until the cleaner takes block
        // 5's segment (soon the sparsest).
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let mut failed = None;
        for i in 0..5000u32 {
            let l = rng.random_range(0..39u64);
            let l = if l >= 5 { l + 1 } else { l };
            if let Err(e) = disk.write_blocks(l, &[i as u8; B]) {
                failed = Some(e);
                break;
            }
        }
        let e = failed.unwrap_or_else(|| {
            panic!(
                "the cleaner never took the corrupt block's segment: {:?} {:?}",
                disk.metrics(),
                disk.read_state().live
            )
        });
        let text = e.to_string();
        assert!(
            matches!(e, LogDiskError::Corrupt(_))
                && text.contains("logical block 5")
                && text.contains("checksum"),
            "{text}"
        );
        assert!(disk.metrics().cleaner_read_ios > 0);
        let mut buf = [0u8; B];
        assert!(disk.read_block(5, &mut buf).is_err(), "corrupt data served");
    }
}
