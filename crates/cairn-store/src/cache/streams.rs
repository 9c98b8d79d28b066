//! Sequential-stream detection, lock-free.
//!
//! A small table remembers where recent streams are expected to continue (the
//! block after each one's last request). A request that starts within `gap`
//! blocks of an expected position (either side: threads reading one file in
//! lockstep overtake each other) continues that stream and is *sequential*;
//! any other request is *random* and replaces the oldest entry (round robin).
//! The table is a fixed array of atomics: a request reads at most
//! [`STREAMS`] of them and writes one.

use super::sync::{AtomicU64, AtomicUsize, Ordering};

/// How many streams are tracked at once.
pub(crate) const STREAMS: usize = 64;

const EMPTY: u64 = u64::MAX;

pub(crate) struct StreamTable {
    expected: [AtomicU64; STREAMS],
    cursor: AtomicUsize,
    gap: u64,
}

impl StreamTable {
    /// A table matching requests within `gap` blocks (at least 1) of a
    /// stream's expected block.
    pub(crate) fn new(gap: u64) -> Self {
        Self {
            expected: std::array::from_fn(|_| AtomicU64::new(EMPTY)),
            cursor: AtomicUsize::new(0),
            gap: gap.max(1),
        }
    }

    /// Records a request for blocks `first..end`; returns whether it continues
    /// a stream.
    pub(crate) fn observe(&self, first: u64, end: u64) -> bool {
        for slot in &self.expected {
            let at = slot.load(Ordering::Relaxed);
            if at != EMPTY && first.abs_diff(at) <= self.gap {
                slot.fetch_max(end, Ordering::Relaxed);
                return true;
            }
        }
        let victim = self.cursor.fetch_add(1, Ordering::Relaxed) % STREAMS;
        self.expected[victim].store(end, Ordering::Relaxed);
        false
    }
}

#[cfg(all(test, not(feature = "shuttle")))]
mod tests {
    use super::*;

    #[test]
    fn a_request_following_the_last_one_is_sequential() {
        let streams = StreamTable::new(1);
        assert!(!streams.observe(100, 104));
        assert!(streams.observe(104, 108));
        assert!(streams.observe(108, 109));
        assert!(!streams.observe(500, 501));
        assert!(streams.observe(109, 110), "the first stream is still known");
        assert!(!streams.observe(120, 121), "too far ahead");
    }

    #[test]
    fn interleaved_streams_are_each_sequential() {
        let streams = StreamTable::new(2);
        let mut seq = 0;
        for i in 0..100u64 {
            for base in [0u64, 1 << 20, 2 << 20] {
                seq += u64::from(streams.observe(base + i, base + i + 1));
            }
        }
        assert_eq!(seq, 300 - 3);
    }
}
