//! The log disk's tunables: [`Options`] and what each chooses, checked
//! ([`Options::check`]) and resolved for a geometry ([`Options::resolve`]).

use super::error::LogDiskError;
use super::format::Geometry;
use crate::limits::{CLEAN_LOW_DEFAULT, CLEAN_LOW_MIN, WRITER_THREADS_DEFAULT};

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
#[allow(clippy::struct_excessive_bools)] // independent switches, each a field of the volume spec
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
    /// [`CLEANER_BACKGROUND_LAG`](crate::limits::CLEANER_BACKGROUND_LAG) user segment writes earlier (their live blocks
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
    /// Each segment opened names the next one (chosen when it opens, held
    /// free until then) and each checkpoint names the first, so recovery
    /// after a crash reads only the segments opened since the checkpoint
    /// instead of the first block of every segment: on a disk that seeks,
    /// tens of milliseconds instead of tens of seconds. The price: a
    /// segment emptied before the next checkpoint is durable is not reused
    /// until it is ([`Table::chain`](super::table::Table::chain)); short
    /// of free segments, a checkpoint comes early. `false`: recovery reads
    /// every segment.
    pub chain: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            cleaner: CleanerPolicy::Greedy,
            clean_low: CLEAN_LOW_DEFAULT,
            clean_high: 0,
            destage_threshold: 0.75,
            partial: PartialSegments::Append,
            checkpoint_interval: 0,
            live_read_below: 0.25,
            live_read_gap: 2,
            cleaner_read_threads: 16,
            batch_reads: true,
            background_destage: true,
            writer_threads: WRITER_THREADS_DEFAULT,
            background_clean: true,
            chain: true,
        }
    }
}

impl Options {
    /// `Err` for a choice no geometry can take: a low watermark below
    /// [`CLEAN_LOW_MIN`], a destage threshold that is not a fraction.
    pub fn check(&self) -> Result<(), LogDiskError> {
        if self.clean_low < CLEAN_LOW_MIN {
            return Err(LogDiskError::Invalid(format!(
                "clean_low {} is below {CLEAN_LOW_MIN} (the cleaner needs a segment to write into)",
                self.clean_low
            )));
        }
        if !(0.0..=1.0).contains(&self.destage_threshold) {
            return Err(LogDiskError::Invalid(format!(
                "destage threshold {} is not a fraction from 0 to 1",
                self.destage_threshold
            )));
        }
        Ok(())
    }

    /// The options with automatic values chosen for `geo`: the high
    /// watermark (`max(low + 2, segments / 32)`, above the low one and below
    /// the segment count) and the checkpoint interval (checkpoints about a
    /// fortieth of the log writes, at least 64 segment writes apart).
    #[must_use]
    pub fn resolve(&self, geo: &Geometry) -> Self {
        let clean_high = if self.clean_high == 0 {
            (self.clean_low + 2).max(geo.segments / 32)
        } else {
            self.clean_high.max(self.clean_low + 1)
        }
        .min(geo.segments - 1);
        let checkpoint_interval = if self.checkpoint_interval == 0 {
            (40 * geo.checkpoint_blocks() / u64::from(geo.segment_blocks)).max(64)
        } else {
            self.checkpoint_interval
        };
        assert!(
            checkpoint_interval > 0,
            "a checkpoint interval of 0 segment writes"
        );
        // A geometry has at least two segments: the high watermark leaves
        // one to write into.
        strict_assert!(clean_high < geo.segments || geo.segments < 2);
        Self {
            clean_high,
            checkpoint_interval,
            ..*self
        }
    }
}
