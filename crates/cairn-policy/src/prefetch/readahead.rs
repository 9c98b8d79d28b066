//! Readahead over striped servers (papers/001): a file system client's
//! sequential prefetch of a multiple of (servers × block size).
//!
//! Units are (object, block index) pairs, not the bare keys a
//! [`Prefetcher`](super::Prefetcher) sees: the rule needs the block's file
//! and, to stop at the file's end, the file's length in blocks.
//!
//! # The rule
//! An access to block `b` of object `o` is *sequential* when `b = 0` (a file
//! read from its start) or the previous access to `o` was to block `b − 1`.
//! A sequential access names the next `window_blocks` blocks of `o`,
//! `b + 1 ..= b + window_blocks`, clipped to the object's last block when
//! its length is known; the cache loads those it does not hold, without
//! counting them as accesses. Every access, sequential or not, becomes
//! `o`'s previous access. With `window_blocks = stripes × servers`, one
//! window is `stripes` blocks on every server, read in parallel.
//!
//! The same type runs in `cairn reproduce dual`'s simulation (no lengths:
//! the trace does not carry them, so windows run past a file's end as they
//! always have there) and in the file gateway's cache (`cairn serve --files
//! --prefetch-stripes N`, lengths known), so the gateway's block hits are
//! the simulator's for the same requests.
//!
//! # Cost
//! State: one entry per object seen (its previous block), in a [`KeyMap`]
//! of at most [`Readahead::objects_max`] entries; when full, a new object
//! clears it (its objects' next accesses are then sequential only at block
//! 0), so the map never grows past its cap and, once at its high-water mark,
//! an access allocates nothing.

use crate::KeyMap;

/// Default cap on the objects remembered.
pub const OBJECTS_MAX_DEFAULT: usize = 1 << 16;

/// Sequential readahead by object. See the module docs.
#[derive(Clone, Debug)]
pub struct Readahead {
    window_blocks: u64,
    objects_max: usize,
    /// Object → its previous access's block.
    previous: KeyMap<u64>,
}

impl Readahead {
    /// A readahead of `window_blocks` blocks (0: never names any),
    /// remembering up to [`OBJECTS_MAX_DEFAULT`] objects.
    pub fn new(window_blocks: u64) -> Self {
        Self::with_objects_max(window_blocks, OBJECTS_MAX_DEFAULT)
    }

    /// A readahead remembering up to `objects_max` (at least 1) objects.
    pub fn with_objects_max(window_blocks: u64, objects_max: usize) -> Self {
        Self {
            window_blocks,
            objects_max: objects_max.max(1),
            previous: KeyMap::default(),
        }
    }

    /// The window, blocks.
    pub fn window_blocks(&self) -> u64 {
        self.window_blocks
    }

    /// The cap on objects remembered.
    pub fn objects_max(&self) -> usize {
        self.objects_max
    }

    /// Objects remembered now.
    pub fn objects(&self) -> usize {
        self.previous.len()
    }

    /// Sees a demand access to block `block` of `object` (whose length is
    /// `blocks_in_object` blocks, if known) and appends to `out`, in
    /// increasing order, the block indexes to have cached now. Never clears
    /// `out`. Returns whether the access was sequential.
    pub fn access(
        &mut self,
        object: u64,
        block: u64,
        blocks_in_object: Option<u64>,
        out: &mut Vec<u64>,
    ) -> bool {
        let previous = if let Some(previous) = self.previous.get_mut(&object) {
            Some(std::mem::replace(previous, block))
        } else {
            if self.previous.len() >= self.objects_max {
                self.previous.clear();
            }
            self.previous.insert(object, block);
            None
        };
        let sequential = block == 0 || previous.is_some_and(|p| p.wrapping_add(1) == block);
        if sequential && self.window_blocks > 0 {
            let first = block.saturating_add(1);
            let mut end = block.saturating_add(self.window_blocks);
            if let Some(blocks) = blocks_in_object {
                end = end.min(blocks.saturating_sub(1));
            }
            if first <= end {
                out.extend(first..=end);
            }
        }
        sequential
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(r: &mut Readahead, object: u64, block: u64, blocks: Option<u64>) -> Vec<u64> {
        let mut out = Vec::new();
        r.access(object, block, blocks, &mut out);
        out
    }

    #[test]
    fn block_zero_and_continuations_name_the_next_window() {
        let mut r = Readahead::new(8);
        assert_eq!(named(&mut r, 3, 0, None), (1..=8).collect::<Vec<_>>());
        assert_eq!(named(&mut r, 3, 1, None), (2..=9).collect::<Vec<_>>());
        // Another object between does not break object 3's sequence.
        assert_eq!(named(&mut r, 4, 7, None), Vec::<u64>::new());
        assert_eq!(named(&mut r, 3, 2, None), (3..=10).collect::<Vec<_>>());
        // A jump is not sequential, and becomes the previous access.
        assert_eq!(named(&mut r, 3, 20, None), Vec::<u64>::new());
        assert_eq!(named(&mut r, 3, 21, None), (22..=29).collect::<Vec<_>>());
        // A repeat is not a continuation.
        assert_eq!(named(&mut r, 3, 21, None), Vec::<u64>::new());
        // Object 4's first access was 7: 8 continues it.
        assert_eq!(named(&mut r, 4, 8, None), (9..=16).collect::<Vec<_>>());
    }

    #[test]
    fn windows_stop_at_the_objects_end_when_known() {
        let mut r = Readahead::new(8);
        assert_eq!(named(&mut r, 1, 0, Some(5)), vec![1, 2, 3, 4]);
        assert_eq!(named(&mut r, 1, 1, Some(5)), vec![2, 3, 4]);
        assert_eq!(named(&mut r, 1, 2, Some(3)), Vec::<u64>::new());
        assert_eq!(named(&mut r, 2, 0, Some(1)), Vec::<u64>::new());
        assert_eq!(named(&mut r, 2, 0, Some(0)), Vec::<u64>::new());
        let mut off = Readahead::new(0);
        assert!(off.access(1, 0, None, &mut Vec::new()), "still sequential");
        assert_eq!(named(&mut off, 1, 1, None), Vec::<u64>::new());
    }

    #[test]
    fn the_rule_is_reproduce_duals_on_random_streams() {
        // The rule as `cairn reproduce dual` wrote it inline, against the type.
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = |bound: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % bound
        };
        for window in [0, 1, 4, 8] {
            let mut r = Readahead::new(window);
            let mut last: std::collections::HashMap<u64, u64> = std::collections::HashMap::new();
            let mut out = Vec::new();
            for _ in 0..20_000 {
                let object = next(6);
                let block = if next(3) == 0 {
                    next(12)
                } else {
                    last.get(&object).map_or(0, |b| b + 1)
                };
                let previous = last.insert(object, block);
                let sequential = block == 0 || previous.is_some_and(|p| p + 1 == block);
                let want: Vec<u64> = if sequential && window > 0 {
                    (block + 1..=block + window).collect()
                } else {
                    Vec::new()
                };
                out.clear();
                assert_eq!(r.access(object, block, None, &mut out), sequential);
                assert_eq!(out, want, "object {object} block {block}");
            }
        }
    }

    #[test]
    fn the_object_map_stays_under_its_cap() {
        let mut r = Readahead::with_objects_max(4, 3);
        for object in 0..100 {
            r.access(object, 5, None, &mut Vec::new());
            assert!(r.objects() <= 3);
        }
        // Forgotten: 6 after 5 of object 0 is not known to continue it.
        assert_eq!(named(&mut r, 0, 6, None), Vec::<u64>::new());
        assert_eq!(named(&mut r, 0, 7, None), vec![8, 9, 10, 11]);
    }
}
