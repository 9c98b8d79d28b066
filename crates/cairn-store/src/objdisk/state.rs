//! The object disk's state in DRAM: the block map, the open segment, the
//! segments sealed and not yet uploaded, and what every segment holds.
//!
//! # Invariants
//!
//! [`State::verify`] checks them in this order; its messages carry these
//! numbers. They hold whenever the state's lock is released.
//!
//! 1. Every mapped block points at an entry of a known segment that names
//!    it: the open segment's entry, or a sealed or uploaded segment's.
//! 2. `segments[s].live` is the number of mapped blocks in segment `s`.
//! 3. The open segment's `at` indexes exactly its non-void entries.
//! 4. `durable <= sealed`, and every sequence in `uploaded` is above
//!    `durable + 1` (the first gap is not uploaded yet).
//! 5. `shadow` holds exactly the blocks last changed (written, moved or
//!    trimmed) in a segment after `durable`, each with where it was as of
//!    `durable` — a durable segment the state still knows, or unmapped.
//!
//! # Checkpoints while writes go on
//!
//! A checkpoint describes the volume as of `durable`: the map, except that
//! a block changed since is taken from `shadow`. So one is written whenever
//! one is due, not only when nothing is open or in flight (which a steady
//! writer never leaves, and until which no dead segment could be deleted).
//! A segment a shadow entry points into is not dead: a moved or overwritten
//! block's old copy stays until a checkpoint after its new one.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Instant;

use super::format::{Checkpoint, MapEntry, SegmentEntry, SegmentHeader, VOID, header_len};
use super::segbuf::{BufPool, ObjectBuf, SegBuf};

/// Pending changes past which the list is pruned first.
const PENDING_PRUNE: usize = 1 << 16;

/// Where a block's current data is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Loc {
    pub sequence: u64,
    pub index: u32,
    pub crc: u32,
}

/// What a segment holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SegInfo {
    pub generation: u64,
    /// Bytes before its data (0 while open).
    pub header_len: u32,
    /// Data blocks (void ones included).
    pub blocks: u32,
    /// Mapped blocks pointing into it.
    pub live: u32,
    /// Built by the cleaner (of staged blocks): its live share counts
    /// against its own blocks, a client's against a whole segment's.
    pub cleaned: bool,
}

/// A sealed segment on its way to the store: its whole object, and what
/// its header lists (for `shadow` when it becomes durable).
#[derive(Debug)]
pub(crate) struct Sealed {
    pub sequence: u64,
    pub key: String,
    pub header_len: usize,
    pub bytes: ObjectBuf,
    pub entries: Vec<(u64, u32)>,
    pub trims: Vec<(u64, u64)>,
}

/// Blocks the cleaner read out of the segments it cleans, waiting to be
/// written together as a segment of their own (`clean.rs`): cleaned data
/// never shares a segment with clients' writes, and never goes into one a
/// client's FLUSH seals early, so what the cleaner writes is whole
/// segments (a partial segment cleaned is not remade partial).
#[derive(Debug, Default)]
pub(crate) struct Staged {
    /// Each block and where it was read from: it moves only if the map
    /// still points there when the segment is built.
    pub blocks: Vec<(u64, Loc)>,
    /// Their data, in order, in a segment buffer: the segment is built
    /// around it, not copied (from the state's pool).
    pub data: Option<SegBuf>,
    /// The segments they came from (not picked again while staged).
    pub from: BTreeSet<u64>,
}

impl Staged {
    /// Bytes of data staged.
    pub fn bytes(&self) -> u64 {
        self.data.as_ref().map_or(0, SegBuf::len) as u64
    }
}

/// What a seal sealed: the open segment (clients' writes) and, when the
/// cleaner's staged blocks were ready, the segment built of them.
#[must_use]
#[derive(Debug, Default)]
pub(crate) struct Seals {
    pub open: Option<Arc<Sealed>>,
    pub cleaned: Vec<Arc<Sealed>>,
    /// Blocks moved into `cleaned`.
    pub moved: usize,
}

/// A block last changed in a segment not durable yet (invariant 5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Shadow {
    /// The segment of its last change.
    pub latest: u64,
    /// Where it was as of `durable` (`None`: unmapped).
    pub durable: Option<Loc>,
}

/// The segment being filled.
#[derive(Debug)]
pub(crate) struct Open {
    pub sequence: u64,
    pub data: SegBuf,
    pub entries: Vec<(u64, u32)>,
    pub trims: Vec<(u64, u64)>,
    /// Block → its entry.
    pub at: hashbrown::HashMap<u64, u32>,
}

impl Open {
    fn new(sequence: u64, pool: &Arc<BufPool>) -> Self {
        Self {
            sequence,
            data: SegBuf::new(pool),
            entries: Vec::new(),
            trims: Vec::new(),
            at: hashbrown::HashMap::new(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty() && self.trims.is_empty()
    }
}

/// A change since the last batch of the local write log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pending {
    /// A block written (its data and segment: wherever the map says at the
    /// next flush).
    Write(u64),
    /// A trim, recorded in segment `.2`.
    Trim(u64, u64, u64),
}

/// Everything behind the object disk's lock.
#[derive(Debug)]
pub(crate) struct State {
    pub block_size: usize,
    pub blocks_per_segment: usize,
    pub generation: u64,
    pub volume_id: u64,
    pub map: hashbrown::HashMap<u64, Loc>,
    pub open: Open,
    /// Sealed, not uploaded: served from here.
    pub inflight: hashbrown::HashMap<u64, Arc<Sealed>>,
    /// Every segment with an object in the store (or on its way), and the
    /// open one.
    pub segments: BTreeMap<u64, SegInfo>,
    /// The last sealed sequence.
    pub sealed: u64,
    /// Every segment up to here is in the store.
    pub durable: u64,
    /// Uploaded above the first gap.
    pub uploaded: BTreeSet<u64>,
    /// The sequence of the newest checkpoint in the store.
    pub checkpointed: u64,
    /// Why the disk stopped taking writes (an upload the store refused for
    /// good, a lost lease).
    pub failed: Option<String>,
    /// With a local write log: what changed since its last batch.
    pub pending: Vec<Pending>,
    /// `pending` is pruned when it grows past this (twice what the last
    /// pruning kept, at least [`PENDING_PRUNE`]).
    pub pending_limit: usize,
    pub journaled: bool,
    /// The store's outage, if one is on (`outage.rs`).
    pub outage: Outage,
    /// The segment buffers ([`SegBuf`]) to reuse.
    pub pool: Arc<BufPool>,
    /// Blocks changed since `durable`, as they were then (invariant 5).
    pub shadow: hashbrown::HashMap<u64, Shadow>,
    /// The cleaner's segments' worth of blocks, each waiting to be built
    /// into a segment of its own at the next seal.
    pub staged: std::collections::VecDeque<Staged>,
    /// They are built while the sealed segments waiting for upload take
    /// at most this many bytes (the upload queue's bound).
    pub staged_limit: u64,
    /// The last sealed segment holding clients' writes (a remote FLUSH
    /// waits for it, not for a cleaned segment sealed after it).
    pub client_sealed: u64,
}

/// Segment buffers kept for reuse: the open segment's and eight uploads'
/// (the default uploaders), and one more.
const POOLED: usize = 10;

impl State {
    /// A state whose last segment (sealed and durable) is `last`.
    pub fn new(
        block_size: usize,
        blocks_per_segment: usize,
        generation: u64,
        volume_id: u64,
        last: u64,
    ) -> Self {
        // Room for a full segment's header (no trims); a few buffers kept,
        // as many as the uploaders and the open segment use at once.
        let room = header_len(block_size as u32, blocks_per_segment, 0);
        let pool = BufPool::new(room, block_size * blocks_per_segment, POOLED);
        let mut segments = BTreeMap::new();
        segments.insert(
            last + 1,
            SegInfo {
                generation,
                header_len: 0,
                blocks: 0,
                live: 0,
                cleaned: false,
            },
        );
        Self {
            block_size,
            blocks_per_segment,
            generation,
            volume_id,
            map: hashbrown::HashMap::new(),
            open: Open::new(last + 1, &pool),
            pool,
            shadow: hashbrown::HashMap::new(),
            staged: std::collections::VecDeque::new(),
            staged_limit: u64::MAX,
            client_sealed: last,
            inflight: hashbrown::HashMap::new(),
            segments,
            sealed: last,
            durable: last,
            uploaded: BTreeSet::new(),
            checkpointed: 0,
            failed: None,
            pending: Vec::new(),
            pending_limit: PENDING_PRUNE,
            journaled: false,
            outage: Outage::default(),
        }
    }

    fn unlive(&mut self, sequence: u64) {
        if let Some(s) = self.segments.get_mut(&sequence) {
            s.live -= 1;
        }
    }

    /// Maps `block` to `loc` (recovery and writes), keeping live counts.
    pub fn place(&mut self, block: u64, loc: Loc) {
        if let Some(old) = self.map.insert(block, loc) {
            self.unlive(old.sequence);
        }
        if let Some(s) = self.segments.get_mut(&loc.sequence) {
            s.live += 1;
        }
    }

    /// Unmaps `block` (a trim, a zero write), keeping live counts.
    pub fn unmap(&mut self, block: u64) {
        if let Some(old) = self.map.remove(&block) {
            self.unlive(old.sequence);
        }
    }

    /// Whether the open segment has no room for another block.
    pub fn open_full(&self) -> bool {
        self.open.entries.len() >= self.blocks_per_segment
    }

    /// Writes one block into the open segment (the caller sealed it if it
    /// was full).
    pub fn write_block(&mut self, block: u64, data: &[u8], crc: u32) {
        if self.journaled {
            self.push_pending(Pending::Write(block));
        }
        self.note_change(block);
        let seq = self.open.sequence;
        if let Some(&i) = self.open.at.get(&block) {
            let at = i as usize * self.block_size;
            self.open.data.data_mut()[at..at + self.block_size].copy_from_slice(data);
            self.open.entries[i as usize].1 = crc;
            if let Some(loc) = self.map.get_mut(&block) {
                loc.crc = crc;
            }
            return;
        }
        let index = self.open.entries.len() as u32;
        self.open.entries.push((block, crc));
        self.open.data.push(data);
        self.open.at.insert(block, index);
        if let Some(s) = self.segments.get_mut(&seq) {
            s.blocks += 1;
        }
        self.place(
            block,
            Loc {
                sequence: seq,
                index,
                crc,
            },
        );
    }

    /// Records that `block` changes in the open segment: where it was as
    /// of `durable`, if this is its first change since (invariant 5).
    fn note_change(&mut self, block: u64) {
        let latest = self.open.sequence;
        match self.shadow.entry(block) {
            hashbrown::hash_map::Entry::Occupied(mut e) => e.get_mut().latest = latest,
            hashbrown::hash_map::Entry::Vacant(v) => {
                v.insert(Shadow {
                    latest,
                    durable: self.map.get(&block).copied(),
                });
            }
        }
    }

    /// Segment `sequence` became durable: its blocks' shadows move up to
    /// it, and those it changed last leave (trims first: an entry left in
    /// a segment came after any trim of its block there).
    fn settle(&mut self, sealed: &Sealed) {
        if self.shadow.is_empty() {
            return;
        }
        let x = sealed.sequence;
        let apply = |shadow: &mut hashbrown::HashMap<u64, Shadow>, b: u64, to: Option<Loc>| {
            if let Some(s) = shadow.get_mut(&b) {
                if s.latest <= x {
                    shadow.remove(&b);
                } else {
                    s.durable = to;
                }
            }
        };
        for &(first, n) in &sealed.trims {
            if n > self.shadow.len() as u64 {
                let hit: Vec<u64> = self
                    .shadow
                    .keys()
                    .copied()
                    .filter(|b| (first..first + n).contains(b))
                    .collect();
                for b in hit {
                    apply(&mut self.shadow, b, None);
                }
            } else {
                for b in first..first + n {
                    apply(&mut self.shadow, b, None);
                }
            }
        }
        for (i, &(b, crc)) in sealed.entries.iter().enumerate() {
            if b != VOID {
                let loc = Loc {
                    sequence: x,
                    index: i as u32,
                    crc,
                };
                apply(&mut self.shadow, b, Some(loc));
            }
        }
    }

    /// Trims `first .. first + blocks`: unmapped, voided in the open
    /// segment, and recorded there for replay.
    pub fn trim(&mut self, first: u64, blocks: u64) {
        if self.journaled {
            self.push_pending(Pending::Trim(first, blocks, self.open.sequence));
        }
        for b in first..first + blocks {
            if let Some(i) = self.open.at.remove(&b) {
                self.open.entries[i as usize].0 = VOID;
            }
            // A block unmapped and unchanged since `durable` stays as it
            // was then: no shadow (a trim of a whole thin volume adds none).
            if self.map.contains_key(&b) || self.shadow.contains_key(&b) {
                self.note_change(b);
            }
            self.unmap(b);
        }
        match self.open.trims.last_mut() {
            Some((f, n)) if *f + *n == first => *n += blocks,
            _ => self.open.trims.push((first, blocks)),
        }
    }

    /// Seals the open segment into an object (if it holds anything) and
    /// opens the next; then builds each staged segment of the cleaner's
    /// into it and seals that too, while the upload queue has room.
    /// Returns the sealed ones for upload.
    pub fn seal(&mut self, key: impl Fn(u64) -> String) -> Seals {
        let open = self.seal_open(&key);
        if open.is_some() {
            self.client_sealed = self.sealed;
        }
        let mut seals = Seals {
            open,
            ..Seals::default()
        };
        let mut queued = self.queued_bytes();
        while let Some(size) = self.staged.front().map(Staged::bytes) {
            if queued > 0 && queued + size > self.staged_limit {
                break;
            }
            seals.moved += self.build_staged();
            if let Some(c) = self.seal_open(&key) {
                if let Some(info) = self.segments.get_mut(&c.sequence) {
                    info.cleaned = true;
                }
                queued += c.bytes.len() as u64;
                seals.cleaned.push(c);
            }
        }
        seals
    }

    /// Seals the open segment only if it is empty (nothing of a client's
    /// is cut short) and staged blocks wait: the cleaner's way to have its
    /// segments built without waiting for the next seal.
    pub fn seal_if_idle(&mut self, key: impl Fn(u64) -> String) -> Seals {
        if self.open.is_empty() && !self.staged.is_empty() {
            self.seal(key)
        } else {
            Seals::default()
        }
    }

    /// Bytes of the sealed segments waiting for upload (the upload queue).
    pub fn queued_bytes(&self) -> u64 {
        self.inflight.values().map(|s| s.bytes.len() as u64).sum()
    }

    /// Bytes of the staged segments waiting to be built.
    pub fn staged_bytes(&self) -> u64 {
        self.staged.iter().map(Staged::bytes).sum()
    }

    /// Makes the first staged segment's blocks the (empty) open segment:
    /// their buffer becomes its data (not copied), each block still where
    /// it was read from is mapped there, and those written or trimmed
    /// since are dropped (the live ones after them moved down in place).
    /// Returns how many moved. Not for the local write log: each old copy
    /// stays in the store until a checkpoint as of the new one
    /// (`clean.rs`).
    fn build_staged(&mut self) -> usize {
        let Some(staged) = self.staged.pop_front() else {
            return 0;
        };
        let Some(mut data) = staged.data else {
            return 0;
        };
        debug_assert!(self.open.is_empty() && self.open.data.len() == 0);
        let bs = self.block_size;
        let sequence = self.open.sequence;
        let mut kept = 0usize;
        for (i, &(block, was)) in staged.blocks.iter().enumerate() {
            if self.map.get(&block) != Some(&was) {
                continue;
            }
            if kept != i {
                data.data_mut().copy_within(i * bs..(i + 1) * bs, kept * bs);
            }
            self.note_change(block);
            let index = kept as u32;
            self.open.entries.push((block, was.crc));
            self.open.at.insert(block, index);
            self.place(
                block,
                Loc {
                    sequence,
                    index,
                    crc: was.crc,
                },
            );
            kept += 1;
        }
        data.truncate(kept * bs);
        self.open.data = data;
        if let Some(s) = self.segments.get_mut(&sequence) {
            s.blocks += kept as u32;
        }
        kept
    }

    /// [`State::seal`] of the open segment alone.
    fn seal_open(&mut self, key: &dyn Fn(u64) -> String) -> Option<Arc<Sealed>> {
        if self.open.is_empty() {
            return None;
        }
        let next = self.open.sequence + 1;
        let open = std::mem::replace(&mut self.open, Open::new(next, &self.pool));
        let header = SegmentHeader {
            generation: self.generation,
            sequence: open.sequence,
            volume_id: self.volume_id,
            block_size: self.block_size as u32,
            entries: open.entries,
            trims: open.trims,
        };
        let head = header.encode();
        let header_len = head.len();
        debug_assert_eq!(header_len, header_len_of(&header));
        let bytes = open.data.seal(&head);
        let SegmentHeader { entries, trims, .. } = header;
        if let Some(s) = self.segments.get_mut(&open.sequence) {
            s.header_len = header_len as u32;
        }
        self.segments.insert(
            next,
            SegInfo {
                generation: self.generation,
                header_len: 0,
                blocks: 0,
                live: 0,
                cleaned: false,
            },
        );
        let sealed = Arc::new(Sealed {
            sequence: open.sequence,
            key: key(open.sequence),
            header_len,
            bytes,
            entries,
            trims,
        });
        self.inflight.insert(open.sequence, Arc::clone(&sealed));
        self.sealed = open.sequence;
        Some(sealed)
    }

    /// Records an upload done; advances `durable` over the uploaded prefix.
    /// A segment stays in `inflight` until it is durable, not only
    /// uploaded: beyond a gap it is not yet part of the volume in the store
    /// (a crash now would void it), so the local write log still needs its
    /// blocks, and reads still find them here.
    pub fn uploaded(&mut self, sequence: u64) {
        self.uploaded.insert(sequence);
        while self.uploaded.remove(&(self.durable + 1)) {
            self.durable += 1;
            if let Some(sealed) = self.inflight.remove(&self.durable) {
                self.settle(&sealed);
            }
        }
    }

    /// The checkpoint of the volume as of `durable` (module docs).
    pub fn checkpoint(&self) -> Checkpoint {
        let entry = |block: u64, l: &Loc| MapEntry {
            block,
            sequence: l.sequence,
            index: l.index,
            crc: l.crc,
        };
        let mut entries: Vec<MapEntry> = self
            .map
            .iter()
            .filter(|(b, _)| !self.shadow.contains_key(*b))
            .map(|(&b, l)| entry(b, l))
            .chain(
                self.shadow
                    .iter()
                    .filter_map(|(&b, s)| s.durable.as_ref().map(|l| entry(b, l))),
            )
            .collect();
        entries.sort_unstable_by_key(|e| e.block);
        let pinned = self.pinned();
        let segments = self
            .segments
            .iter()
            .filter(|&(&seq, s)| seq <= self.durable && (s.live > 0 || pinned.contains(&seq)))
            .map(|(&sequence, s)| SegmentEntry {
                sequence,
                generation: s.generation,
                header_len: s.header_len,
                blocks: s.blocks,
            })
            .collect();
        Checkpoint {
            generation: self.generation,
            sequence: self.durable,
            volume_id: self.volume_id,
            block_size: self.block_size as u32,
            entries,
            segments,
        }
    }

    /// Segments in the store no block points into, at or below `upto`
    /// (a durable checkpoint's sequence): forgotten here, returned to be
    /// deleted.
    pub fn take_dead(&mut self, upto: u64) -> Vec<(u64, u64)> {
        let pinned = self.pinned();
        let dead: Vec<(u64, u64)> = self
            .segments
            .range(..=upto)
            .filter(|&(seq, s)| {
                s.live == 0 && !self.inflight.contains_key(seq) && !pinned.contains(seq)
            })
            .map(|(&seq, s)| (seq, s.generation))
            .collect();
        for (seq, _) in &dead {
            self.segments.remove(seq);
        }
        dead
    }

    /// The segments a shadow entry points into: live as of `durable`.
    fn pinned(&self) -> hashbrown::HashSet<u64> {
        self.shadow
            .values()
            .filter_map(|s| s.durable.map(|l| l.sequence))
            .collect()
    }

    fn push_pending(&mut self, p: Pending) {
        self.pending.push(p);
        if self.pending.len() > self.pending_limit {
            self.prune_pending();
            self.pending_limit = (2 * self.pending.len()).max(PENDING_PRUNE);
        }
    }

    /// Drops the pending changes the store already holds (their segment is
    /// durable) and those a later one repeats (a block written again, the
    /// same trim again: the next flush logs only the last), so a client
    /// that never flushes does not grow the list without bound: it holds
    /// at most one write per block not yet durable, and the trims.
    pub fn prune_pending(&mut self) {
        let durable = self.durable;
        let map = &self.map;
        let mut writes = hashbrown::HashSet::new();
        let mut trims = hashbrown::HashSet::new();
        let mut kept: Vec<Pending> = Vec::with_capacity(self.pending.len() / 2);
        for p in self.pending.drain(..).rev() {
            let keep = match p {
                Pending::Write(b) => {
                    map.get(&b).is_some_and(|l| l.sequence > durable) && writes.insert(b)
                }
                Pending::Trim(first, n, seq) => seq > durable && trims.insert((first, n, seq)),
            };
            if keep {
                kept.push(p);
            }
        }
        kept.reverse();
        self.pending = kept;
    }

    /// Checks the invariants (module docs), in order.
    pub fn verify(&self) -> Result<(), String> {
        let mut live: BTreeMap<u64, u32> = BTreeMap::new();
        for (&block, loc) in &self.map {
            let named = if loc.sequence == self.open.sequence {
                self.open.entries.get(loc.index as usize).map(|e| e.0)
            } else if !self.segments.contains_key(&loc.sequence) {
                return Err(format!(
                    "invariant 1: block {block} points into segment {}, which is not known",
                    loc.sequence
                ));
            } else {
                Some(block)
            };
            if named != Some(block) {
                return Err(format!(
                    "invariant 1: block {block} points at entry {} of the open segment, which names {named:?}",
                    loc.index
                ));
            }
            *live.entry(loc.sequence).or_default() += 1;
        }
        for (&seq, s) in &self.segments {
            let want = live.get(&seq).copied().unwrap_or(0);
            if s.live != want {
                return Err(format!(
                    "invariant 2: segment {seq} counts {} live blocks, the map {want}",
                    s.live
                ));
            }
        }
        let indexed = self.open.entries.iter().filter(|e| e.0 != VOID).count();
        if indexed != self.open.at.len()
            || self
                .open
                .at
                .iter()
                .any(|(&b, &i)| self.open.entries.get(i as usize).map(|e| e.0) != Some(b))
        {
            return Err("invariant 3: the open segment's index disagrees with its entries".into());
        }
        if self.durable > self.sealed || self.uploaded.iter().any(|&s| s <= self.durable + 1) {
            return Err(format!(
                "invariant 4: durable {}, sealed {}, uploaded beyond {:?}",
                self.durable, self.sealed, self.uploaded
            ));
        }
        self.verify_shadow()
    }

    fn verify_shadow(&self) -> Result<(), String> {
        for (&block, loc) in &self.map {
            if loc.sequence > self.durable && !self.shadow.contains_key(&block) {
                return Err(format!(
                    "invariant 5: block {block} changed in segment {} after durable {} has no shadow",
                    loc.sequence, self.durable
                ));
            }
        }
        for (&block, s) in &self.shadow {
            let known = s.durable.is_none_or(|l| {
                l.sequence <= self.durable && self.segments.contains_key(&l.sequence)
            });
            if s.latest <= self.durable || !known {
                return Err(format!(
                    "invariant 5: block {block}'s shadow {s:?} (durable {})",
                    self.durable
                ));
            }
        }
        Ok(())
    }
}

fn header_len_of(h: &SegmentHeader) -> usize {
    header_len(h.block_size, h.entries.len(), h.trims.len())
}

/// The outage being lived through, if any (under the state's lock; what
/// it does: `outage.rs`).
#[derive(Debug, Default)]
pub(crate) struct Outage {
    /// Since when uploads fail (this outage's first failed one), and the
    /// last error.
    pub(crate) failing: Option<(Instant, String)>,
    /// Since when a writer or flush waits with no segment becoming durable.
    pub(crate) stalled: Option<Instant>,
    /// The waiting was reported.
    pub(crate) stall_reported: bool,
    /// Waiters gave up (reported).
    pub(crate) timed_out: bool,
    /// When the reported outage began, for the line at its end.
    pub(crate) reported: Option<Instant>,
}

impl Outage {
    /// Whether uploads fail now (an upload or a checkpoint failed and none
    /// completed since).
    pub(crate) fn failing(&self) -> bool {
        self.failing.is_some()
    }
}
