//! The log disk's counters.

use super::format::COUNTERS;

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
    pub(super) fn to_counters(self) -> [u64; COUNTERS] {
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

    /// Counts a segment write of `blocks` data blocks and `bytes` bytes
    /// (summary and padding included): a user's, or the cleaner's.
    #[allow(
        clippy::fn_params_excessive_bools,
        reason = "two counters' choices, named at the call"
    )]
    pub(super) fn count_segment_write(
        &mut self,
        user: bool,
        blocks: u64,
        bytes: u64,
        partial: bool,
    ) {
        // A segment write carries a summary block and at least one data block.
        strict_assert!(
            blocks > 0 && bytes > blocks,
            "a segment write of {blocks} blocks in {bytes} bytes"
        );
        if user {
            self.user_segment_writes += 1;
            self.user_blocks_written += blocks;
            self.user_bytes += bytes;
        } else {
            self.cleaner_segment_writes += 1;
            self.cleaner_blocks_written += blocks;
            self.cleaner_bytes += bytes;
        }
        if partial {
            self.partial_segments += 1;
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

/// The NV write cache's fill at one moment ([`super::LogDisk::nv_fill`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NvFill {
    /// Slots holding a block not yet destaged to a segment.
    pub dirty_slots: u32,
    /// Slots not free: dirty, destaged but awaiting the flush that makes
    /// their segment durable, or superseded and awaiting a clear.
    pub used_slots: u32,
    /// Every slot (0 without an NV cache).
    pub slots: u32,
}
