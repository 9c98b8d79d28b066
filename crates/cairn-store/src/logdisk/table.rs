//! The block address table and the segment usage table, in DRAM: where
//! every logical block lives, and what each segment holds.
//!
//! The map comes from the checkpoint and the roll-forward; everything else
//! here is rebuilt from the map at open ([`Table::from_map`]) and kept in
//! step by the log's appends ([`Table::place`]), trims ([`Table::unmap`]),
//! segment opens and closes, and device flushes ([`Table::release_pending`]).
//!
//! # Invariants
//!
//! [`Table::verify`] checks them in this order, and its messages carry these
//! numbers. They hold whenever the log disk's lock is released; inside the
//! foreground cleaner's pass the victims are briefly closed and empty.
//!
//! 1. A mapped entry points at a data block of a segment: inside the
//!    segment area, never at a segment's first block (always a summary).
//! 2. The reverse map points back: for every mapped logical block `l`,
//!    `rev[map[l].physical] == l`. So no physical block is the target of two
//!    entries.
//! 3. `live[s]` is the number of mapped entries in segment `s`.
//! 4. `last_seq[s]` is at least the sequence of every entry in segment `s`.
//! 5. A free, pending or held segment holds nothing live; a closed one holds a
//!    live block (an empty closed segment would be lost to reuse forever).
//! 6. `free`, `pending` and `held` list exactly the free, pending and
//!    held segments, each once.
//! 7. The log head's segment, and no other, is open.
//! 8. `any_tainted` is whether any segment is tainted; a free segment
//!    never is.
//! 9. With [`Table::chain`], no segment opened since the newest durable
//!    checkpoint is free: it is on the chain recovery walks from that
//!    checkpoint (see [`Table::release_pending`]).

use super::error::LogDiskError;
use super::format::{Geometry, MapEntry, SummaryEntry, UNMAPPED};

/// A segment's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Seg {
    Free,
    Open,
    Closed,
    /// Empty, reusable after the next device flush.
    Pending,
    /// Taken by a background cleaner pass: its reads are outstanding, and
    /// it is neither a candidate again nor reused until the pass is written.
    Victim,
    /// Empty and flushed, but opened since the newest durable checkpoint:
    /// reusable once a newer one is durable ([`Table::checkpoint_durable`]).
    Held,
}

/// No logical block: a [`Table::rev`] entry never written since open.
pub(super) const NO_BLOCK: u64 = u64::MAX;

/// Segment slot → absolute block.
pub(crate) fn block_of(geo: &Geometry, segment: u32, slot: u32) -> u64 {
    strict_assert!(segment < geo.segments && slot < geo.segment_blocks);
    geo.segment_start(segment) + u64::from(slot)
}

/// Absolute segment block → its segment.
pub(crate) fn segment_of(geo: &Geometry, physical: u64) -> u32 {
    strict_assert!(physical >= geo.segment_start(0));
    ((physical - geo.segment_start(0)) / u64::from(geo.segment_blocks)) as u32
}

/// The block address table, the segment usage table and the segment states.
pub(super) struct Table {
    geo: Geometry,
    /// Logical → where its newest copy lives.
    pub map: Vec<MapEntry>,
    /// Physical → logical: the logical block last written at each segment
    /// block (index `segment · N + slot`), [`NO_BLOCK`] if none since open.
    /// In DRAM only, rebuilt from the map at open. A block is live exactly
    /// when `map[rev[p]]` points back at `p`, so stale entries (the block
    /// was overwritten or trimmed since) need no upkeep; the cleaner finds a
    /// victim's live blocks with it without reading the victim's summaries.
    pub rev: Vec<u64>,
    /// Live blocks per segment.
    pub live: Vec<u32>,
    /// The newest write sequence per segment (the cleaner's age).
    pub last_seq: Vec<u64>,
    /// Log blocks written (user + cleaner) when each segment was opened.
    pub opened_at: Vec<u64>,
    pub seg: Vec<Seg>,
    pub free: Vec<u32>,
    pub pending: Vec<u32>,
    /// Segments holding a block trimmed since the last checkpoint. Nothing in
    /// the log records a trim, so such a segment is not reused until a
    /// checkpoint has saved the unmapped entries: otherwise a crash would
    /// bring back the checkpoint's entry pointing into the segment's new data.
    pub tainted: Vec<bool>,
    pub any_tainted: bool,
    /// Segments opened list their successor ([`Table::pick_next`]), and
    /// one opened since the newest durable checkpoint is held, not reused,
    /// until a newer one is durable: recovery walks the chain of segments
    /// opened since the checkpoint, and a reuse would overwrite a link.
    pub chain: bool,
    /// Empty, flushed segments waiting for a checkpoint ([`Seg::Held`]).
    pub held: Vec<u32>,
    /// The newest checkpoint written or queued when each segment was
    /// last opened.
    pub opened_after: Vec<u64>,
    /// The newest checkpoint written or queued.
    pub checkpoint_queued: u64,
    /// The newest checkpoint known durable (written and flushed).
    pub checkpoint_durable: u64,
}

impl Table {
    /// The tables of `map` (as recovered), with `head`'s segment open and
    /// every segment without a live block free.
    pub fn from_map(geo: Geometry, map: Vec<MapEntry>, head: Option<(u32, u32)>) -> Self {
        let segments = geo.segments as usize;
        assert_eq!(map.len() as u64, geo.logical_blocks, "one entry per block");
        let mut t = Self {
            geo,
            map,
            rev: vec![NO_BLOCK; segments * geo.segment_blocks as usize],
            live: vec![0; segments],
            last_seq: vec![0; segments],
            opened_at: vec![0; segments],
            seg: vec![Seg::Free; segments],
            free: Vec::new(),
            pending: Vec::new(),
            tainted: vec![false; segments],
            any_tainted: false,
            chain: false,
            held: Vec::new(),
            opened_after: vec![0; segments],
            checkpoint_queued: 0,
            checkpoint_durable: 0,
        };
        // Usage from the map: it cannot disagree with the table it came from.
        for (logical, e) in t.map.iter().enumerate() {
            if e.physical != UNMAPPED {
                let s = segment_of(&geo, e.physical) as usize;
                t.live[s] += 1;
                t.last_seq[s] = t.last_seq[s].max(e.sequence);
                t.rev[rev_index(&geo, e.physical)] = logical as u64;
            }
        }
        for s in 0..geo.segments {
            if head.is_some_and(|(h, _)| h == s) {
                t.seg[s as usize] = Seg::Open;
            } else if t.live[s as usize] > 0 {
                t.seg[s as usize] = Seg::Closed;
            } else {
                t.free.push(s);
            }
        }
        t.free.reverse();
        t
    }

    /// Whether block `slot` of `segment` holds a live block.
    pub fn is_live(&self, segment: u32, slot: u32) -> bool {
        let physical = block_of(&self.geo, segment, slot);
        let logical = self.rev[rev_index(&self.geo, physical)];
        logical != NO_BLOCK
            && self
                .map
                .get(logical as usize)
                .is_some_and(|m| m.physical == physical)
    }

    /// The logical block at absolute segment block `physical` (live or not).
    pub fn logical_at(&self, physical: u64) -> u64 {
        self.rev[rev_index(&self.geo, physical)]
    }

    /// Free, pending and held segments: empty, reusable after a device
    /// flush or a checkpoint.
    pub fn empty_segments(&self) -> u32 {
        (self.free.len() + self.pending.len() + self.held.len()) as u32
    }

    /// Segments the cleaner can count on: free ones, and pending ones that a
    /// device flush will free. Not those a trim emptied (tainted): until a
    /// checkpoint holds the trim, a crash brings their blocks back, and a
    /// reserve counted on them could vanish and leave the cleaner no segment
    /// to copy into (the proptest found a crash that left every segment
    /// holding live blocks and every write failing with `NoSpace`).
    ///
    /// Nor those a flush would hold ([`Seg::Held`]).
    pub fn reserve(&self) -> u32 {
        let usable = if self.any_tainted || self.chain {
            self.pending
                .iter()
                .filter(|&&s| !self.tainted[s as usize] && !self.holds(s))
                .count()
        } else {
            self.pending.len()
        };
        (self.free.len() + usable) as u32
    }

    /// Whether empty segment `s`, once flushed, waits for a checkpoint
    /// (invariant 9).
    fn holds(&self, s: u32) -> bool {
        holds(
            self.chain,
            self.opened_after[s as usize],
            self.checkpoint_durable,
        )
    }

    /// Opens the free segment next after `after` (wrapping): the log's
    /// writes move up the disk in address order, which a disk takes faster
    /// than jumps back and forth. `written` is the log's blocks written so
    /// far (the segment's birth, for its measured lifetime).
    ///
    /// `pinned` (a segment listed as the successor of the last one opened,
    /// [`Table::pick_next`]) is opened instead if given; it is free.
    pub fn open_segment(
        &mut self,
        after: u32,
        written: u64,
        pinned: Option<u32>,
    ) -> Result<u32, LogDiskError> {
        let i = match pinned {
            Some(p) => self.free.iter().position(|&s| s == p).unwrap_or_else(|| {
                panic!(
                    "the segment named next, {p}, is {:?}, not free",
                    self.seg[p as usize]
                )
            }),
            None => self.next_free(after).ok_or(LogDiskError::NoSpace)?,
        };
        let segment = self.free.swap_remove(i);
        let s = segment as usize;
        assert_eq!(
            self.seg[s],
            Seg::Free,
            "invariant 6: segment {segment} listed free"
        );
        assert_eq!(
            self.live[s], 0,
            "invariant 5: free segment {segment} holds live blocks"
        );
        strict_assert!(
            !self.tainted[s],
            "invariant 8: free segment {segment} is tainted"
        );
        self.seg[s] = Seg::Open;
        self.opened_at[s] = written;
        self.opened_after[s] = self.checkpoint_queued;
        Ok(segment)
    }

    /// Where in `free` the free segment next after `after` (wrapping) is.
    fn next_free(&self, after: u32) -> Option<usize> {
        self.free
            .iter()
            .enumerate()
            .min_by_key(|&(_, &s)| s.wrapping_sub(after.wrapping_add(1)))
            .map(|(i, _)| i)
    }

    /// The segment to open after `after` (the one just opened), listed in
    /// its summaries so recovery can follow the log there: the free one
    /// [`Table::open_segment`] would take next. It stays free until opened
    /// (nothing else takes a free segment). With none free, a pending one
    /// that the next device flush frees (not tainted, not to be held): the
    /// caller flushes before opening it ([`Core::free_a_segment`]).
    /// `None` without [`Table::chain`] or with neither.
    ///
    /// [`Core::free_a_segment`]: super::flush::Core::free_a_segment
    pub fn pick_next(&self, after: u32) -> Option<u32> {
        if !self.chain {
            return None;
        }
        self.next_free(after).map(|i| self.free[i]).or_else(|| {
            self.pending
                .iter()
                .copied()
                .filter(|&s| !self.tainted[s as usize] && !self.holds(s))
                .min_by_key(|&s| s.wrapping_sub(after.wrapping_add(1)))
        })
    }

    /// The head segment takes no more writes: pending if nothing in it is
    /// live, else closed.
    pub fn close(&mut self, segment: u32) {
        let s = segment as usize;
        assert_eq!(
            self.seg[s],
            Seg::Open,
            "closing segment {segment}, not open"
        );
        if self.live[s] == 0 {
            self.seg[s] = Seg::Pending;
            self.pending.push(segment);
        } else {
            self.seg[s] = Seg::Closed;
        }
    }

    /// Records the segment write of `chunk` at `first_slot` of `segment`
    /// (its data in the slots after the summary) with `sequence`: the map
    /// points at the new copies, the old ones die.
    pub fn place(&mut self, segment: u32, first_slot: u32, chunk: &[SummaryEntry], sequence: u64) {
        assert!(
            first_slot as usize + chunk.len() < self.geo.segment_blocks as usize,
            "a segment write of {} blocks at slot {first_slot} overruns its segment",
            chunk.len()
        );
        assert!(
            sequence > self.last_seq[segment as usize],
            "sequences only grow in a segment"
        );
        for (i, e) in chunk.iter().enumerate() {
            let physical = block_of(&self.geo, segment, first_slot + 1 + i as u32);
            self.rev[rev_index(&self.geo, physical)] = e.logical;
            let old = std::mem::replace(
                &mut self.map[e.logical as usize],
                MapEntry {
                    physical,
                    sequence,
                    crc: e.crc,
                },
            );
            if old.physical != UNMAPPED {
                strict_assert!(
                    old.sequence < sequence,
                    "an older write replaced a newer one"
                );
                self.kill(segment_of(&self.geo, old.physical));
            }
        }
        self.live[segment as usize] += chunk.len() as u32;
        self.last_seq[segment as usize] = sequence;
    }

    /// Unmaps `logical` (a trim): its segment is tainted until a checkpoint
    /// holds the trim.
    pub fn unmap(&mut self, logical: u64) {
        let old = std::mem::replace(&mut self.map[logical as usize], MapEntry::UNMAPPED);
        if old.physical != UNMAPPED {
            let segment = segment_of(&self.geo, old.physical);
            self.tainted[segment as usize] = true;
            self.any_tainted = true;
            self.kill(segment);
        }
    }

    /// One block of `segment` died.
    pub fn kill(&mut self, segment: u32) {
        let s = segment as usize;
        assert!(
            self.live[s] > 0,
            "invariant 3: a block died in empty segment {segment}"
        );
        self.live[s] -= 1;
        if self.live[s] == 0 && self.seg[s] == Seg::Closed {
            self.seg[s] = Seg::Pending;
            self.pending.push(segment);
        }
    }

    /// A victim every live block of which moved: pending (reusable after the
    /// next device flush).
    pub fn emptied(&mut self, segment: u32) {
        let s = segment as usize;
        assert_eq!(
            self.live[s], 0,
            "invariant 5: emptied segment {segment} holds live blocks"
        );
        self.seg[s] = Seg::Pending;
        self.pending.push(segment);
    }

    /// Pending segments become free (after a device flush), except those a
    /// trim tainted: they wait for the next checkpoint; and, with
    /// [`Table::chain`], those opened since the newest durable checkpoint:
    /// they are held until a newer one is durable.
    pub fn release_pending(&mut self) {
        self.release_pending_upto(usize::MAX);
    }

    /// [`Table::release_pending`] of the first `upto` pending segments.
    pub fn release_pending_upto(&mut self, upto: usize) {
        let (chain, durable) = (self.chain, self.checkpoint_durable);
        let Self {
            pending,
            seg,
            free,
            tainted,
            live,
            held,
            opened_after,
            ..
        } = self;
        let mut index = 0usize;
        pending.retain(|&s| {
            index += 1;
            if index > upto || tainted[s as usize] {
                return true;
            }
            strict_assert_eq!(
                live[s as usize],
                0,
                "invariant 5: pending segment {s} is live"
            );
            if holds(chain, opened_after[s as usize], durable) {
                seg[s as usize] = Seg::Held;
                held.push(s);
            } else {
                seg[s as usize] = Seg::Free;
                free.push(s);
            }
            false
        });
    }

    /// Checkpoint `number` is durable: segments held for an older one are
    /// free.
    pub fn checkpoint_durable(&mut self, number: u64) {
        strict_assert!(number <= self.checkpoint_queued);
        self.checkpoint_durable = self.checkpoint_durable.max(number);
        let durable = self.checkpoint_durable;
        let Self {
            held,
            seg,
            free,
            opened_after,
            ..
        } = self;
        held.retain(|&s| {
            if opened_after[s as usize] >= durable {
                return true;
            }
            seg[s as usize] = Seg::Free;
            free.push(s);
            false
        });
    }

    /// A checkpoint holding every trim is durable: tainted segments may be
    /// reused.
    pub fn untaint(&mut self) {
        if self.any_tainted {
            self.tainted.fill(false);
            self.any_tainted = false;
            self.release_pending();
        }
    }

    /// Checks the invariants listed at the head of this file, in order;
    /// `head` is the log head. The first broken one is named by its number.
    pub fn verify(&self, head: Option<(u32, u32)>) -> Result<(), String> {
        let geo = &self.geo;
        let segments = geo.segments as usize;
        let n = u64::from(geo.segment_blocks);
        let start = geo.segment_start(0);
        let end = geo.segment_start(0) + u64::from(geo.segments) * n;
        let mut live = vec![0u32; segments];
        for (logical, e) in self.map.iter().enumerate() {
            if e.physical == UNMAPPED {
                continue;
            }
            if !(start..end).contains(&e.physical) || (e.physical - start).is_multiple_of(n) {
                return Err(format!(
                    "invariant 1: block {logical} maps to physical block {}, not a segment's data block",
                    e.physical
                ));
            }
            if self.rev[rev_index(geo, e.physical)] != logical as u64 {
                return Err(format!(
                    "invariant 2: block {logical} maps to physical block {}, which the reverse map gives to {}",
                    e.physical,
                    self.rev[rev_index(geo, e.physical)]
                ));
            }
            let s = segment_of(geo, e.physical) as usize;
            live[s] += 1;
            if e.sequence > self.last_seq[s] {
                return Err(format!(
                    "invariant 4: block {logical} in segment {s} has sequence {}, the segment's newest is {}",
                    e.sequence, self.last_seq[s]
                ));
            }
        }
        if let Some(s) = (0..segments).find(|&s| live[s] != self.live[s]) {
            return Err(format!(
                "invariant 3: segment {s} counts {} live blocks, the map has {}",
                self.live[s], live[s]
            ));
        }
        for (s, (&state, &live)) in self.seg.iter().zip(&live).enumerate() {
            let empty_required = matches!(state, Seg::Free | Seg::Pending | Seg::Held);
            if (empty_required && live > 0) || (state == Seg::Closed && live == 0) {
                return Err(format!(
                    "invariant 5: segment {s} is {state:?} with {live} live blocks"
                ));
            }
        }
        for (list, state) in [
            (&self.free, Seg::Free),
            (&self.pending, Seg::Pending),
            (&self.held, Seg::Held),
        ] {
            let mut listed = vec![false; segments];
            for &s in list {
                if self.seg[s as usize] != state || std::mem::replace(&mut listed[s as usize], true)
                {
                    return Err(format!(
                        "invariant 6: segment {s} is listed {state:?} and is {:?}",
                        self.seg[s as usize]
                    ));
                }
            }
            if let Some(s) = (0..segments).find(|&s| self.seg[s] == state && !listed[s]) {
                return Err(format!(
                    "invariant 6: segment {s} is {state:?} and not listed"
                ));
            }
        }
        let open: Vec<usize> = (0..segments)
            .filter(|&s| self.seg[s] == Seg::Open)
            .collect();
        if open
            != head
                .map(|(h, _)| h as usize)
                .into_iter()
                .collect::<Vec<_>>()
        {
            return Err(format!(
                "invariant 7: segments {open:?} are open, the head is {head:?}"
            ));
        }
        let tainted = self.tainted.iter().any(|&t| t);
        if tainted != self.any_tainted {
            return Err(format!(
                "invariant 8: any_tainted is {}, a segment is tainted: {tainted}",
                self.any_tainted
            ));
        }
        if let Some(s) = (0..segments).find(|&s| self.tainted[s] && self.seg[s] == Seg::Free) {
            return Err(format!(
                "invariant 8: segment {s} is tainted and {:?}",
                self.seg[s]
            ));
        }
        if let Some(s) = (0..segments).find(|&s| self.seg[s] == Seg::Free && self.holds(s as u32)) {
            return Err(format!(
                "invariant 9: segment {s} is free, opened after checkpoint #{}, the newest durable is #{}",
                self.opened_after[s], self.checkpoint_durable
            ));
        }
        Ok(())
    }
}

/// Whether an empty segment opened after checkpoint `opened_after` waits,
/// once flushed, for a checkpoint newer than the `durable` one (with the
/// chain on; invariant 9).
fn holds(chain: bool, opened_after: u64, durable: u64) -> bool {
    chain && opened_after >= durable
}

/// Absolute segment block → its [`Table::rev`] index.
fn rev_index(geo: &Geometry, physical: u64) -> usize {
    (physical - geo.segment_start(0)) as usize
}
