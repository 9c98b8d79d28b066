//! Sequential cutoff (bcache's `sequential_cutoff`): streams of sequential
//! I/O longer than a size bypass the cache, so a backup or a scan does not
//! wash the hot set out of it.
//!
//! A small table of atomics remembers where recent streams continue and
//! where each began. A request starting where a stream stopped continues it;
//! its length so far is the stream's. Anything else starts a stream in the
//! oldest entry (round robin). Lock-free: a request reads every entry and
//! writes one or two; two threads racing on one entry may misjudge a stream's
//! start, never its safety (a bypass is always correct).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Streams tracked at once.
pub(super) const STREAMS: usize = 32;
const EMPTY: u64 = u64::MAX;

pub(super) struct Cutoff {
    /// The block each stream continues at.
    next: [AtomicU64; STREAMS],
    /// The block each stream began at.
    start: [AtomicU64; STREAMS],
    cursor: AtomicUsize,
    /// Blocks at which a stream bypasses; 0 = never.
    blocks: u64,
}

impl Cutoff {
    pub(super) fn new(blocks: u64) -> Self {
        Self {
            next: std::array::from_fn(|_| AtomicU64::new(EMPTY)),
            start: std::array::from_fn(|_| AtomicU64::new(0)),
            cursor: AtomicUsize::new(0),
            blocks,
        }
    }

    /// Records a request for blocks `first..end`; whether it bypasses (its
    /// stream, this request included, is at least the cutoff long).
    pub(super) fn bypass(&self, first: u64, end: u64) -> bool {
        if self.blocks == 0 {
            return false;
        }
        for i in 0..STREAMS {
            if self.next[i].load(Ordering::Relaxed) == first {
                self.next[i].store(end, Ordering::Relaxed);
                let start = self.start[i].load(Ordering::Relaxed);
                return end.saturating_sub(start) >= self.blocks;
            }
        }
        let i = self.cursor.fetch_add(1, Ordering::Relaxed) % STREAMS;
        self.start[i].store(first, Ordering::Relaxed);
        self.next[i].store(end, Ordering::Relaxed);
        end - first >= self.blocks
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_bypasses_once_past_the_cutoff() {
        let c = Cutoff::new(8);
        assert!(!c.bypass(100, 104));
        assert!(!c.bypass(5000, 5001), "another stream");
        assert!(c.bypass(104, 108), "8 blocks since 100");
        assert!(c.bypass(108, 109));
        assert!(!c.bypass(7, 8), "random");
        assert!(c.bypass(20, 30), "one request at least the cutoff long");
    }

    #[test]
    fn off_never_bypasses() {
        let c = Cutoff::new(0);
        for b in 0..100 {
            assert!(!c.bypass(b, b + 1000));
        }
    }

    #[test]
    fn interleaved_streams_are_told_apart() {
        let c = Cutoff::new(16);
        let mut bypassed = 0;
        for i in 0..20u64 {
            bypassed += u32::from(c.bypass(i * 2, i * 2 + 2));
            bypassed += u32::from(c.bypass(1000 + i * 2, 1000 + i * 2 + 2));
        }
        // Each stream reaches 16 blocks at its 8th request: 13 of 20 bypass.
        assert_eq!(bypassed, 26);
    }
}
