//! The slot table and the buckets: where each cached block lives, and which
//! slots are free to fill next.
//!
//! The **slot table** is one entry per slot of the cache device: a word
//! (valid, dirty, written, backing block) and a CRC32C plus a last-use stamp.
//! It is the journal's view: a word changes only together with the journal
//! record that says so, under the journal's lock (so a checkpoint's snapshot,
//! taken under that lock, is exactly what the journal has recorded). Readers
//! read it without a lock (atomics).
//!
//! **Buckets** are runs of `N` slots filled in order (the device sees
//! ascending writes, erase-block sized) and reused whole. A bucket is *open*
//! (being filled), *sealed* (full), *reclaiming* (its live slots being moved
//! out) or *free*. Each counts its live slots (allocated and not yet
//! released) and its pins (readers of one of its slots in flight). A bucket
//! whose live count falls to zero after it was sealed becomes free, but is
//! reopened only once the journal records that released its slots are
//! durable (so no crash can bring back a record naming a slot that was
//! rewritten since) and nobody has it pinned.
//!
//! There are two write points, each with its own open bucket: clients'
//! writes and promotions fill one, the reclaimer's moves the other, so the
//! blocks that survived a reclaim (long-lived) are not mixed with new ones
//! and the buckets they fill stay full (LFS's and F2FS's separation of hot
//! and cold data; bcache's moving-GC write point).
//!
//! Invariants (checked by [`Buckets::verify`] against the table):
//!
//! 1. A bucket's live count is at least the number of valid table entries in
//!    it (the rest are slots allocated and not yet installed).
//! 2. A free bucket has no valid entry and no live slot.
//! 3. At most one bucket is open per write point, and every open bucket is
//!    one's; a fill cursor is at most `N`.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use super::format::{SlotEntry, WORD_BLOCK, WORD_DIRTY, WORD_VALID};

/// A slot word's DRAM-only bit: the backing device has this dirty block's
/// data, not yet flushed (it turns clean at the next backing flush). Stored as
/// plain dirty in checkpoints.
pub(super) const WORD_WRITTEN: u64 = 1 << 61;
/// The backing block in a DRAM slot word.
pub(super) const BLOCK_BITS: u64 = WORD_WRITTEN - 1;

const _: () = assert!(BLOCK_BITS < WORD_BLOCK);

/// The slot table: one entry per slot.
pub(super) struct SlotTable {
    words: Box<[AtomicU64]>,
    /// CRC32C in the low 32 bits, stamp in the high 32.
    meta: Box<[AtomicU64]>,
}

impl SlotTable {
    pub(super) fn new(slots: usize) -> Self {
        Self {
            words: (0..slots).map(|_| AtomicU64::new(0)).collect(),
            meta: (0..slots).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    pub(super) fn len(&self) -> usize {
        self.words.len()
    }

    /// The slot's word (0 = empty).
    #[inline]
    pub(super) fn word(&self, slot: u32) -> u64 {
        self.words[slot as usize].load(Ordering::Acquire)
    }

    /// The CRC32C of the slot's data.
    #[inline]
    pub(super) fn crc(&self, slot: u32) -> u32 {
        self.meta[slot as usize].load(Ordering::Acquire) as u32
    }

    /// The slot's word and the CRC that goes with it, read without a lock:
    /// `None` when the slot is empty or was emptied while being read.
    ///
    /// Two loads are not one: [`SlotTable::clear`] stores the word, then
    /// the CRC, so a reader could see the old (valid) word and the cleared
    /// CRC, and take a live block's data for corrupt (seen: a reclaim
    /// failed the tier over about once in 100 runs of `tier_concurrent`
    /// under load). So the word is read again after the CRC: a clear in
    /// between empties it, and [`SlotTable::set`] stores the CRC before the
    /// word, so a valid word read first has its CRC already. A slot is
    /// set again only after its bucket was freed and reopened, which the
    /// callers rule out (the bucket is reclaiming or pinned), so a word
    /// that reads the same twice cannot hide a clear and a set.
    pub(super) fn snapshot(&self, slot: u32) -> Option<(u64, u32)> {
        let word = self.word(slot);
        if word & WORD_VALID == 0 {
            return None;
        }
        let crc = self.crc(slot);
        let again = self.word(slot);
        ((again ^ word) & (WORD_VALID | BLOCK_BITS) == 0).then_some((again, crc))
    }

    /// When the slot was last used.
    pub(super) fn stamp(&self, slot: u32) -> u32 {
        (self.meta[slot as usize].load(Ordering::Relaxed) >> 32) as u32
    }

    /// Records that `slot` holds `block` with CRC `crc` (call under the
    /// journal lock, with the record that says so).
    pub(super) fn set(&self, slot: u32, block: u64, dirty: bool, crc: u32, stamp: u32) {
        strict_assert!(block <= BLOCK_BITS);
        let word = WORD_VALID | if dirty { WORD_DIRTY } else { 0 } | block;
        self.meta[slot as usize]
            .store(u64::from(crc) | (u64::from(stamp) << 32), Ordering::Release);
        self.words[slot as usize].store(word, Ordering::Release);
    }

    /// Changes a valid slot's dirty and written bits.
    pub(super) fn set_state(&self, slot: u32, dirty: bool, written: bool) {
        let w = &self.words[slot as usize];
        let old = w.load(Ordering::Acquire);
        strict_assert!(old & WORD_VALID != 0);
        let mut new = old & !(WORD_DIRTY | WORD_WRITTEN);
        if dirty {
            new |= WORD_DIRTY;
        }
        if written {
            new |= WORD_WRITTEN;
        }
        w.store(new, Ordering::Release);
    }

    /// Empties a slot (under the journal lock, with its record).
    pub(super) fn clear(&self, slot: u32) {
        self.words[slot as usize].store(0, Ordering::Release);
        self.meta[slot as usize].store(0, Ordering::Release);
    }

    /// Marks the slot used now (a hit); lock-free, advisory.
    #[inline]
    pub(super) fn touch(&self, slot: u32, stamp: u32) {
        let m = &self.meta[slot as usize];
        let old = m.load(Ordering::Relaxed);
        if (old >> 32) as u32 != stamp {
            m.store(
                (old & 0xffff_ffff) | (u64::from(stamp) << 32),
                Ordering::Relaxed,
            );
        }
    }

    /// The entry as a checkpoint stores it (the written bit is DRAM-only).
    pub(super) fn entry(&self, slot: u32) -> SlotEntry {
        let word = self.word(slot);
        if word & WORD_VALID == 0 {
            return SlotEntry::default();
        }
        let meta = self.meta[slot as usize].load(Ordering::Acquire);
        SlotEntry {
            word: word & (WORD_VALID | WORD_DIRTY | BLOCK_BITS),
            crc: meta as u32,
            stamp: (meta >> 32) as u32,
        }
    }

    /// Loads an entry (at open, before anything runs).
    pub(super) fn load(&self, slot: u32, e: &SlotEntry) {
        self.words[slot as usize].store(e.word, Ordering::Relaxed);
        self.meta[slot as usize].store(
            u64::from(e.crc) | (u64::from(e.stamp) << 32),
            Ordering::Relaxed,
        );
    }

    /// Bytes of DRAM this table takes.
    pub(super) fn dram_bytes(&self) -> u64 {
        (self.words.len() * 16) as u64
    }
}

/// The backing block of a valid word.
#[inline]
pub(super) fn word_block(word: u64) -> u64 {
    word & BLOCK_BITS
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum BucketState {
    Free,
    Open,
    Sealed,
    Reclaiming,
}

struct Alloc {
    state: Vec<BucketState>,
    /// When each bucket was last opened (a counter), for the reclaimer's
    /// oldest-first tie break.
    opened: Vec<u64>,
    opens: u64,
    /// Each write point's open bucket and the next slot in it: clients' (0)
    /// and the reclaimer's (1).
    open: [Option<(u32, u32)>; 2],
    /// Free buckets and the journal sequence that must be durable before
    /// each is written again.
    free: VecDeque<(u32, u64)>,
}

/// Why no slot could be allocated.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Shortage {
    /// Too few free buckets are left: reclaim one first.
    Reclaim,
    /// The next free bucket needs the journal durable up to this sequence.
    Durable(u64),
    /// Every free bucket that is durable is pinned by a reader: retry.
    Pinned,
}

/// The buckets: live counts, pins, and the allocator.
pub(super) struct Buckets {
    n: u32,
    live: Box<[AtomicU32]>,
    pins: Box<[AtomicU32]>,
    /// The newest journal sequence whose record released a slot of the
    /// bucket: durable before the bucket is written again.
    released: Box<[AtomicU64]>,
    alloc: Mutex<Alloc>,
}

impl Buckets {
    /// All buckets free, or (with `used`) free only where no slot is valid:
    /// buckets holding anything are sealed.
    pub(super) fn new(count: u32, n: u32, used: impl Fn(u32) -> u32) -> Self {
        let mut state = Vec::with_capacity(count as usize);
        let mut free = VecDeque::new();
        let live: Box<[AtomicU32]> = (0..count)
            .map(|b| {
                let l = used(b);
                if l == 0 {
                    state.push(BucketState::Free);
                    free.push_back((b, 0));
                } else {
                    state.push(BucketState::Sealed);
                }
                AtomicU32::new(l)
            })
            .collect();
        Self {
            n,
            live,
            pins: (0..count).map(|_| AtomicU32::new(0)).collect(),
            released: (0..count).map(|_| AtomicU64::new(0)).collect(),
            alloc: Mutex::new(Alloc {
                state,
                opened: vec![0; count as usize],
                opens: 0,
                open: [None, None],
                free,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Alloc> {
        self.alloc
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(super) fn bucket_of(&self, slot: u32) -> u32 {
        slot / self.n
    }

    pub(super) fn count(&self) -> u32 {
        self.live.len() as u32
    }

    /// Free buckets now.
    pub(super) fn free_count(&self) -> usize {
        self.lock().free.len()
    }

    /// Up to `want` contiguous slots from write point `point`'s open bucket
    /// (0: clients, 1: the reclaimer), opening the next free one when it is
    /// full. Leaves `keep` free buckets untouched (the reclaimer's room);
    /// `durable` is the journal's durable sequence.
    pub(super) fn allocate(
        &self,
        point: usize,
        want: u32,
        keep: usize,
        durable: u64,
    ) -> Result<(u32, u32), Shortage> {
        let mut a = self.lock();
        loop {
            if let Some((bucket, next)) = a.open[point] {
                if next < self.n {
                    let count = want.clamp(1, self.n - next);
                    a.open[point] = Some((bucket, next + count));
                    self.live[bucket as usize].fetch_add(count, Ordering::AcqRel);
                    return Ok((bucket * self.n + next, count));
                }
                // Full: seal it; freed at once if everything in it died already.
                a.open[point] = None;
                if self.live[bucket as usize].load(Ordering::Acquire) == 0 {
                    a.state[bucket as usize] = BucketState::Free;
                    let need = self.released[bucket as usize].load(Ordering::Acquire);
                    a.free.push_back((bucket, need));
                } else {
                    a.state[bucket as usize] = BucketState::Sealed;
                }
            }
            if a.free.len() <= keep {
                return Err(Shortage::Reclaim);
            }
            // The first free bucket that is durable and unpinned.
            let pick = a.free.iter().position(|&(b, need)| {
                need <= durable && self.pins[b as usize].load(Ordering::Acquire) == 0
            });
            let Some(at) = pick else {
                return Err(if a.free.iter().any(|&(_, need)| need <= durable) {
                    Shortage::Pinned
                } else {
                    let need = a.free.iter().map(|&(_, need)| need).min().unwrap_or(0);
                    Shortage::Durable(need)
                });
            };
            let (bucket, _) = a.free.remove(at).unwrap_or((0, 0));
            a.opens += 1;
            let opens = a.opens;
            a.state[bucket as usize] = BucketState::Open;
            a.opened[bucket as usize] = opens;
            a.open[point] = Some((bucket, 0));
        }
    }

    /// Gives back a slot whose contents are dead: superseded, dropped, or
    /// allocated and never installed. `seq` is the journal sequence holding
    /// the record that made it dead (the bucket is reused only once that is
    /// durable).
    pub(super) fn release(&self, slot: u32, seq: u64) {
        let bucket = self.bucket_of(slot) as usize;
        self.released[bucket].fetch_max(seq, Ordering::AcqRel);
        let before = self.live[bucket].fetch_sub(1, Ordering::AcqRel);
        assert!(
            before > 0,
            "bucket {bucket}: released more slots than it holds"
        );
        if before == 1 {
            let mut a = self.lock();
            // A bucket being reclaimed is freed by its reclaimer
            // ([`Buckets::unreclaim`]): reopened under it, a slot it read
            // could be written again, even for the same block, before it
            // moves that block (an old copy moved over the new).
            if a.state[bucket] == BucketState::Sealed
                && self.live[bucket].load(Ordering::Acquire) == 0
            {
                a.state[bucket] = BucketState::Free;
                let need = self.released[bucket].load(Ordering::Acquire);
                a.free.push_back((bucket as u32, need));
            }
        }
    }

    /// Pins the slot's bucket: it is not reopened until unpinned.
    #[inline]
    pub(super) fn pin(&self, slot: u32) {
        self.pins[self.bucket_of(slot) as usize].fetch_add(1, Ordering::AcqRel);
    }

    #[inline]
    pub(super) fn unpin(&self, slot: u32) {
        let before = self.pins[self.bucket_of(slot) as usize].fetch_sub(1, Ordering::AcqRel);
        strict_assert!(before > 0);
    }

    /// The sealed bucket with the fewest live slots (oldest first among
    /// equals), now reclaiming; `None` when no sealed bucket has a dead slot.
    pub(super) fn pick_victim(&self, skip: &[u32]) -> Option<u32> {
        let mut a = self.lock();
        let mut best: Option<(u32, u64, u32)> = None;
        for (b, state) in a.state.iter().enumerate() {
            if *state != BucketState::Sealed || skip.contains(&(b as u32)) {
                continue;
            }
            let live = self.live[b].load(Ordering::Acquire);
            if live >= self.n {
                continue;
            }
            let key = (live, a.opened[b]);
            if best.is_none_or(|(l, o, _)| key < (l, o)) {
                best = Some((live, a.opened[b], b as u32));
            }
        }
        let (_, _, bucket) = best?;
        a.state[bucket as usize] = BucketState::Reclaiming;
        Some(bucket)
    }

    /// A reclaim is over: its bucket is free if nothing in it is live,
    /// else sealed again (to be picked another time).
    pub(super) fn unreclaim(&self, bucket: u32) {
        let mut a = self.lock();
        let b = bucket as usize;
        if a.state[b] == BucketState::Reclaiming {
            if self.live[b].load(Ordering::Acquire) == 0 {
                a.state[b] = BucketState::Free;
                let need = self.released[b].load(Ordering::Acquire);
                a.free.push_back((bucket, need));
            } else {
                a.state[b] = BucketState::Sealed;
            }
        }
    }

    /// Live slots in a bucket.
    pub(super) fn live(&self, bucket: u32) -> u32 {
        self.live[bucket as usize].load(Ordering::Acquire)
    }

    /// Blocks per bucket.
    pub(super) fn bucket_blocks(&self) -> u32 {
        self.n
    }

    /// The buckets' states and live counts, for a failing test's message.
    pub(super) fn debug(&self) -> String {
        let a = self.lock();
        let states: Vec<String> = (0..self.count())
            .map(|b| format!("{}:{:?}/{}", b, a.state[b as usize], self.live(b)))
            .collect();
        format!("open {:?} free {:?} [{}]", a.open, a.free, states.join(" "))
    }

    /// Checks the invariants at the head of this file against `table`;
    /// `quiet` says nothing is allocated-and-not-installed now.
    pub(super) fn verify(&self, table: &SlotTable, quiet: bool) -> Result<(), String> {
        let a = self.lock();
        let opens = a.state.iter().filter(|s| **s == BucketState::Open).count();
        let points = a.open.iter().flatten().count();
        if opens != points || (points == 2 && a.open[0].map(|o| o.0) == a.open[1].map(|o| o.0)) {
            return Err(format!(
                "invariant 3: {opens} buckets open, cursors {:?}",
                a.open
            ));
        }
        for b in 0..self.count() {
            let valid = (b * self.n..(b + 1) * self.n)
                .filter(|&s| table.word(s) & WORD_VALID != 0)
                .count() as u32;
            let live = self.live(b);
            if live < valid || (quiet && a.state[b as usize] != BucketState::Open && live != valid)
            {
                return Err(format!(
                    "invariant 1: bucket {b} counts {live} live slots, holds {valid} valid entries"
                ));
            }
            if a.state[b as usize] == BucketState::Free && (live != 0 || valid != 0) {
                return Err(format!(
                    "invariant 2: free bucket {b} has {live} live slots, {valid} valid entries"
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn slots_come_in_order_and_buckets_are_reused_once_durable() {
        let b = Buckets::new(3, 4, |_| 0);
        assert_eq!(b.allocate(0, 3, 0, 0), Ok((0, 3)));
        assert_eq!(b.allocate(0, 3, 0, 0), Ok((3, 1)), "the rest of bucket 0");
        assert_eq!(b.allocate(0, 1, 0, 0), Ok((4, 1)), "bucket 1 opens");
        for s in 0..4 {
            b.release(s, 7);
        }
        // Bucket 0 is free but needs journal sequence 7 durable.
        assert_eq!(b.allocate(0, 3, 0, 0), Ok((5, 3)));
        assert_eq!(
            b.allocate(0, 1, 0, 0),
            Ok((8, 1)),
            "bucket 2 before bucket 0"
        );
        assert_eq!(b.allocate(0, 4, 0, 0), Ok((9, 3)));
        assert_eq!(b.allocate(0, 1, 0, 6), Err(Shortage::Durable(7)));
        assert_eq!(b.allocate(0, 1, 0, 7), Ok((0, 1)));
    }

    #[test]
    fn the_reclaimers_room_is_kept_and_pinned_buckets_wait() {
        let b = Buckets::new(3, 2, |_| 0);
        assert_eq!(b.allocate(0, 2, 1, 0), Ok((0, 2)));
        assert_eq!(b.allocate(0, 2, 1, 0), Ok((2, 2)));
        assert_eq!(b.allocate(0, 2, 1, 0), Err(Shortage::Reclaim));
        b.pin(0);
        b.release(0, 0);
        b.release(1, 0);
        assert_eq!(
            b.allocate(0, 2, 0, 0),
            Ok((4, 2)),
            "bucket 2 while 0 is pinned"
        );
        assert_eq!(b.allocate(0, 2, 0, 0), Err(Shortage::Pinned));
        b.unpin(0);
        assert_eq!(b.allocate(0, 2, 0, 0), Ok((0, 2)));
    }

    #[test]
    fn the_victim_is_the_emptiest_sealed_bucket() {
        let b = Buckets::new(3, 4, |_| 0);
        for _ in 0..3 {
            b.allocate(0, 4, 0, 0).unwrap();
        }
        b.allocate(0, 1, 0, 0).unwrap_err();
        b.release(5, 0);
        b.release(6, 0);
        b.release(1, 0);
        assert_eq!(b.pick_victim(&[]), Some(1));
        assert_eq!(b.pick_victim(&[]), Some(0));
        assert_eq!(b.pick_victim(&[]), None, "bucket 2 is full");
        b.release(0, 0);
        b.release(2, 0);
        b.release(3, 0);
        assert_eq!(
            b.free_count(),
            0,
            "a bucket being reclaimed is not freed under its reclaimer"
        );
        b.unreclaim(0);
        assert_eq!(b.free_count(), 1, "its reclaimer frees it, emptied");
        b.unreclaim(1);
        assert_eq!(
            b.free_count(),
            1,
            "a bucket with live slots is sealed again"
        );
        assert_eq!(b.pick_victim(&[]), Some(1));
    }
}
