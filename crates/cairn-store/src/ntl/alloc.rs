//! The NVM block allocator (the paper's `nm_alloc`/`nm_free`).
//!
//! There is no persistent free list: at open the NTL walks its persistent map (and
//! lane logs) and calls [`BlockAllocator::from_used`] with every block they
//! reference, so free space can never disagree with the map. In DRAM the free set is
//! a bitmap of `AtomicU64` words (bit set = free); allocation is a lock-free
//! compare-and-swap starting at a caller-supplied hint (one per lane spreads threads
//! apart), and allocates nothing on the heap. There is deliberately no shared free
//! counter: two writers updating one counter on every allocation and free bounced
//! its cache line between cores on every write; [`BlockAllocator::free_blocks`]
//! counts the bitmap instead (for reports, not the I/O path).

use std::sync::atomic::{AtomicU64, Ordering};

/// Why the used-block set handed to [`BlockAllocator::from_used`] is inconsistent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllocError {
    /// A block number is not below the number of data blocks.
    #[error("block {block} is out of range ({blocks} data blocks)")]
    OutOfRange {
        /// The offending block.
        block: u64,
        /// Number of data blocks.
        blocks: u64,
    },
    /// A block is referenced twice.
    #[error("block {block} is referenced more than once")]
    Duplicate {
        /// The offending block.
        block: u64,
    },
}

/// Free/used state of `blocks` NVM data blocks.
pub struct BlockAllocator {
    blocks: u64,
    words: Box<[AtomicU64]>,
}

impl BlockAllocator {
    /// All `blocks` free except those in `used`; each used block must be in range and
    /// appear once.
    pub fn from_used(blocks: u64, used: impl IntoIterator<Item = u64>) -> Result<Self, AllocError> {
        let nwords = blocks.div_ceil(64) as usize;
        let mut bits: Vec<u64> = vec![u64::MAX; nwords];
        if let Some(last) = bits.last_mut() {
            let tail = blocks % 64;
            if tail != 0 {
                *last = (1u64 << tail) - 1;
            }
        }
        for block in used {
            if block >= blocks {
                return Err(AllocError::OutOfRange { block, blocks });
            }
            let (w, b) = ((block / 64) as usize, block % 64);
            if bits[w] & (1 << b) == 0 {
                return Err(AllocError::Duplicate { block });
            }
            bits[w] &= !(1 << b);
        }
        strict_assert!(
            blocks.is_multiple_of(64) || bits.last().is_none_or(|&w| w >> (blocks % 64) == 0),
            "bits past the last block are set: alloc could return one"
        );
        Ok(Self {
            blocks,
            words: bits.into_iter().map(AtomicU64::new).collect(),
        })
    }

    /// Number of data blocks managed.
    pub fn blocks(&self) -> u64 {
        self.blocks
    }

    /// Number of free blocks now (a count over the bitmap: O(blocks / 64)).
    pub fn free_blocks(&self) -> u64 {
        self.words
            .iter()
            .map(|w| u64::from(w.load(Ordering::Relaxed).count_ones()))
            .sum()
    }

    /// `nm_alloc`: takes a free block, searching from `hint`; `None` when full.
    pub fn alloc(&self, hint: u64) -> Option<u64> {
        let n = self.words.len();
        if n == 0 {
            return None;
        }
        let start = (hint / 64) as usize % n;
        for i in 0..n {
            let w = (start + i) % n;
            let word = &self.words[w];
            let mut cur = word.load(Ordering::Relaxed);
            while cur != 0 {
                let b = cur.trailing_zeros();
                match word.compare_exchange_weak(
                    cur,
                    cur & !(1u64 << b),
                    Ordering::AcqRel,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        let block = w as u64 * 64 + u64::from(b);
                        strict_assert!(
                            block < self.blocks,
                            "allocated block {block} of {}",
                            self.blocks
                        );
                        return Some(block);
                    }
                    Err(now) => cur = now,
                }
            }
        }
        None
    }

    /// `nm_free`: returns `block`. Returns `false` (and changes nothing) if it is out
    /// of range or already free — a caller bug the NTL reports instead of corrupting
    /// the free set.
    pub fn free(&self, block: u64) -> bool {
        if block >= self.blocks {
            return false;
        }
        let bit = 1u64 << (block % 64);
        let prev = self.words[(block / 64) as usize].fetch_or(bit, Ordering::AcqRel);
        prev & bit == 0
    }

    /// Whether `block` is currently free (false when out of range).
    pub fn is_free(&self, block: u64) -> bool {
        block < self.blocks
            && self.words[(block / 64) as usize].load(Ordering::Acquire) & (1 << (block % 64)) != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn rebuild_from_used_and_exhaust() {
        let a = BlockAllocator::from_used(130, [0, 5, 129]).expect("valid");
        assert_eq!(a.free_blocks(), 127);
        assert!(!a.is_free(5) && a.is_free(6) && !a.is_free(130));
        let mut got = HashSet::new();
        while let Some(b) = a.alloc(70) {
            assert!(b < 130 && ![0, 5, 129].contains(&b), "bad block {b}");
            assert!(got.insert(b), "block {b} handed out twice");
        }
        assert_eq!(got.len(), 127);
        assert_eq!(a.free_blocks(), 0);
        assert!(a.free(6));
        assert!(!a.free(6), "double free is refused");
        assert!(!a.free(130), "out of range free is refused");
        assert_eq!(a.alloc(0), Some(6));
    }

    #[test]
    fn inconsistent_used_sets_are_errors() {
        assert_eq!(
            BlockAllocator::from_used(10, [3, 3]).err(),
            Some(AllocError::Duplicate { block: 3 })
        );
        assert_eq!(
            BlockAllocator::from_used(10, [10]).err(),
            Some(AllocError::OutOfRange {
                block: 10,
                blocks: 10
            })
        );
        assert_eq!(
            BlockAllocator::from_used(0, []).expect("empty").alloc(0),
            None
        );
    }

    #[test]
    fn concurrent_allocs_are_unique() {
        let a = BlockAllocator::from_used(4096, []).expect("valid");
        let all: Vec<Vec<u64>> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..4u64)
                .map(|t| {
                    let a = &a;
                    s.spawn(move || {
                        let mut v = Vec::new();
                        while let Some(b) = a.alloc(t * 1024) {
                            v.push(b);
                        }
                        v
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().expect("thread")).collect()
        });
        let mut seen = HashSet::new();
        for b in all.into_iter().flatten() {
            assert!(seen.insert(b), "block {b} allocated twice");
        }
        assert_eq!(seen.len(), 4096);
    }
}
