//! Sequential-stream detection, lock-free.
//!
//! A small table remembers where recent streams are expected to continue (the
//! block after each one's last request) and how many requests in a row have
//! continued each. A request that starts within `gap` blocks of an expected
//! position (either side: threads reading one file in lockstep overtake each
//! other) continues that stream and is *sequential*; any other request is
//! *random* and replaces the oldest entry (round robin). Readahead waits for
//! a stream's second continuation, so that a random request that happens to
//! land near another one's end (with 64 streams and a gap of 8 blocks, about
//! 1.6 % of uniform random requests over 256 MiB of 4 KiB blocks) does not
//! read a whole readahead window that nobody asked for. The table is a fixed
//! array of atomics: a request reads at most [`STREAMS`] of them and writes
//! one.

use super::sync::{AtomicU64, AtomicUsize, Ordering};

/// How many streams are tracked at once.
pub(crate) const STREAMS: usize = 64;

/// Most blocks between a stream's expected position and a request that
/// continues it.
pub(crate) const GAP_MAX: u64 = 8;

const EMPTY: u64 = u64::MAX;
/// An entry is the expected block in the low 56 bits and the number of
/// requests that continued the stream (saturating) in the high 8.
const BLOCK_BITS: u32 = 56;
const BLOCK_MASK: u64 = (1 << BLOCK_BITS) - 1;
const RUN_MAX: u64 = 255;

#[inline]
fn pack(block: u64, run: u64) -> u64 {
    (run.min(RUN_MAX) << BLOCK_BITS) | (block & BLOCK_MASK)
}

pub(crate) struct StreamTable {
    expected: [AtomicU64; STREAMS],
    cursor: AtomicUsize,
    gap: u64,
}

impl StreamTable {
    /// A table matching requests within `gap` blocks (clamped to 1 ..=
    /// [`GAP_MAX`]) of a stream's expected block.
    pub(crate) fn new(gap: u64) -> Self {
        Self {
            expected: std::array::from_fn(|_| AtomicU64::new(EMPTY)),
            cursor: AtomicUsize::new(0),
            gap: gap.clamp(1, GAP_MAX),
        }
    }

    /// Records a request for blocks `first..end`; returns how many requests
    /// in a row, this one included, have continued its stream: 0 for a
    /// random request, 1 for the first continuation, and so on (saturating
    /// at 255).
    pub(crate) fn observe(&self, first: u64, end: u64) -> u32 {
        self.continue_stream(first, end).unwrap_or_else(|| {
            self.start(end);
            0
        })
    }

    /// If a request for `first..end` continues a known stream, records it
    /// and returns the stream's run (as [`observe`](Self::observe)); `None`
    /// for a random request, which is not recorded (see [`start`](Self::start)).
    /// Writes nothing shared unless the request continues a stream.
    #[inline]
    pub(crate) fn continue_stream(&self, first: u64, end: u64) -> Option<u32> {
        // `first` is within `gap` of `expected` iff `expected - first + gap`
        // (wrapping, in 64 bits) is at most `2 × gap`: one compare per entry.
        // An empty entry's block bits are all ones (2^56 - 1), further than
        // `gap` from any block a device has (fewer than 2^52).
        let window = 2 * self.gap;
        let near = |entry: u64| {
            (entry & BLOCK_MASK)
                .wrapping_sub(first)
                .wrapping_add(self.gap)
                <= window
        };
        for slot in &self.expected {
            let mut entry = slot.load(Ordering::Relaxed);
            while near(entry) {
                let run = (entry >> BLOCK_BITS) + 1;
                let next = pack(end.max(entry & BLOCK_MASK), run);
                match slot.compare_exchange_weak(entry, next, Ordering::Relaxed, Ordering::Relaxed)
                {
                    Ok(_) => return Some(run.min(RUN_MAX) as u32),
                    Err(now) => entry = now,
                }
            }
        }
        None
    }

    /// Records a random request ending before block `end` as a possible
    /// stream start, replacing the oldest entry.
    pub(crate) fn start(&self, end: u64) {
        let victim = self.cursor.fetch_add(1, Ordering::Relaxed) % STREAMS;
        self.expected[victim].store(pack(end, 0), Ordering::Relaxed);
    }
}

#[cfg(all(test, not(feature = "shuttle")))]
mod tests {
    use super::*;

    #[test]
    fn a_request_following_the_last_one_is_sequential() {
        let streams = StreamTable::new(1);
        assert_eq!(streams.observe(100, 104), 0);
        assert_eq!(streams.observe(104, 108), 1);
        assert_eq!(streams.observe(108, 109), 2);
        assert_eq!(streams.observe(500, 501), 0);
        assert_eq!(
            streams.observe(109, 110),
            3,
            "the first stream is still known"
        );
        assert_eq!(streams.observe(120, 121), 0, "too far ahead");
    }

    #[test]
    fn a_random_request_is_recorded_only_when_started() {
        let streams = StreamTable::new(1);
        assert_eq!(streams.continue_stream(100, 101), None);
        assert_eq!(
            streams.observe(101, 102),
            0,
            "an unrecorded request starts no stream"
        );
        assert_eq!(streams.continue_stream(102, 103), Some(1));
        streams.start(501);
        assert_eq!(streams.continue_stream(501, 502), Some(1));
        assert_eq!(
            streams.continue_stream(0, 1),
            None,
            "empty entries match nothing"
        );
    }

    #[test]
    fn interleaved_streams_are_each_sequential() {
        let streams = StreamTable::new(2);
        let mut seq = 0;
        for i in 0..100u64 {
            for base in [0u64, 1 << 20, 2 << 20] {
                seq += u64::from(streams.observe(base + i, base + i + 1) > 0);
            }
        }
        assert_eq!(seq, 300 - 3);
    }

    #[test]
    fn the_gap_is_at_most_eight_blocks_and_runs_saturate() {
        let streams = StreamTable::new(256);
        assert_eq!(streams.observe(0, 1), 0);
        assert_eq!(streams.observe(1 + GAP_MAX + 1, 20), 0, "beyond the gap");
        assert_eq!(streams.observe(1 + GAP_MAX, 12), 1, "within it");
        let mut run = 0;
        for i in 0..300 {
            run = streams.observe(20 + i, 21 + i);
        }
        assert_eq!(run, 255);
    }
}
