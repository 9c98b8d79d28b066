//! Recovery: a function from the device (and the NV cache's region) to the
//! in-memory state the log disk assembles itself from ([`recover`] →
//! [`Image`]): the superblock, the newest valid checkpoint, the segment
//! writes after it rolled forward, the NV cache's dirty blocks on top.
//!
//! # What recovery does with what it finds
//!
//! | # | found | outcome | test |
//! |---|---|---|---|
//! | 1 | superblock does not decode | open fails (`Format`): not a log disk | `format::tests`, `volume` tests of foreign images |
//! | 2 | neither checkpoint slot decodes | open fails (`NoCheckpoint`), naming both reasons | `recovery_decision_table::no_valid_checkpoint_is_an_error` |
//! | 3 | both slots decode | the larger number wins (a torn newer write leaves the older) | `recovery_decision_table::the_newer_checkpoint_wins_and_a_torn_one_is_skipped` |
//! | 4 | a summary whose CRC fails, or that names another segment or slot, or is not newer than the write before it | its segment's chain stops there | `logdisk_crash_points` (every crash point) |
//! | 4a | a whole summary another volume wrote (another id, or version 1's layout on a version-2 disk: an earlier format of the device) | not this volume's: read as never written, as zeroes are | `recovery_decision_table::a_device_formatted_again_never_returns_the_earlier_volumes_writes`, `format::tests` |
//! | 5 | a summary whose data blocks fail their CRC (a torn segment write) | the write is dropped and its chain stops: it was never acknowledged | `logdisk_crash_points` |
//! | 6 | a summary not newer than the checkpoint | skipped: the checkpoint holds it | `recovery_decision_table::a_clean_close_replays_nothing` |
//! | 7 | segment writes after the checkpoint | applied in sequence order; the head continues after the newest | `logdisk_crash_points`, `recovery_decision_table::writes_after_the_checkpoint_are_rolled_forward` |
//! | 7a | a checkpoint naming the next segment, both slots valid | the segments are found along the chain from it (each first summary names the next) up to one not opened since, not by reading every segment | `recovery_decision_table::a_crash_reads_only_the_chain_of_segments_opened_since_the_checkpoint`, every crash point (strict builds compare with reading every segment) |
//! | 7b | a link naming nothing, or a first block on the chain that is damaged (does not decode, is not zero, is no other volume's summary) | every segment's first block is read | `recovery_decision_table::a_decayed_link_makes_recovery_read_every_segment` |
//! | 7c | a chain, the other slot invalid | every segment's first block is read: segments opened since the older checkpoint may have been reused | `recovery_decision_table::a_closed_mark_is_not_trusted_when_the_other_slot_is_unreadable` |
//! | 8 | a valid NV slot | overrides the map (a valid slot is never older than the disk copy); the newest slot of a block wins, older ones are cleared | `logdisk_nv_cache` tests |
//! | 9 | an NV region of another volume | open fails (`NvError::Header`) | `nv::tests` |
//! | 10 | a slot naming a block past the end | ignored | `nv::tests` |
//!
//! After recovery the sequence jumps to a new epoch (`+ 2³²`): writes a
//! crash left beyond the end of a chain (never acknowledged, never
//! replayed) carry sequences below it, so a later walk never mistakes one
//! for a write made after this recovery.

use super::error::LogDiskError;
use super::format::{self, Checkpoint, Geometry, MapEntry, SummaryBlock, SummaryEntry, Superblock};
use super::log::Log;
use super::metrics::Metrics;
use super::nv::NvCache;
use super::nv_index::NvIndex;
use super::table::{Table, block_of};
use crate::device::{Device, IoBuf, SECTOR};
use crate::ntl::Region;

/// Where the NV cache comes from at open.
pub(super) enum NvSource {
    /// Formatted just now: empty.
    Fresh(NvCache),
    /// The region it was formatted in: scanned.
    Region(Box<dyn Region>),
}

/// What opening a log disk found to replay beyond its last checkpoint: none
/// of it after a clean [`LogDisk::close`](super::LogDisk::close) (which
/// checkpoints everything), the writes of the last run's tail after a crash.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Recovered {
    /// Segment writes after the checkpoint, rolled forward from their
    /// summaries.
    pub segment_writes: usize,
    /// Blocks found dirty in the NV write cache (acknowledged, not yet in a
    /// segment), taken over as dirty.
    pub nv_blocks: u32,
    /// Segments recovery read (a first block, or the whole segment to walk
    /// its writes): every one after a crash, none after a clean close.
    pub segments_read: u32,
}

/// The in-memory state recovered from a device.
pub(super) struct Image {
    pub superblock: Superblock,
    pub table: Table,
    pub log: Log,
    pub nv: Option<NvIndex>,
    pub metrics: Metrics,
    pub checkpoint_number: u64,
    pub recovered: Recovered,
}

/// What recovery may assume of the segments' first slots.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Segments {
    /// Anything: roll-forward follows the chain of segments opened since
    /// the checkpoint if it names one ([`Checkpoint::chain`]), else reads
    /// each one's first block.
    Scan,
    /// Just formatted: no segment holds a summary of this volume (the
    /// head's is still walked), so roll-forward would read one block a
    /// segment to find nothing, which on a device that seeks (an HDD, a
    /// throttled file) is tens of seconds.
    Blank,
    /// The checkpoint is marked closed ([`Checkpoint::closed`]): no segment
    /// holds a newer write, so none is read (strict builds scan them all
    /// and assert that nothing would be rolled forward).
    Closed,
    /// Every segment's first block, whatever the checkpoint names (`cairn
    /// fsck`, and the strict builds' checks).
    Every,
}

/// Recovers the log disk on `dev` (and its NV cache, if any): the rows of
/// the table above, in order. Reads only; the caller writes the checkpoint
/// that makes the result the new starting point.
pub(super) fn recover<D: Device + ?Sized>(
    dev: &D,
    nv: Option<NvSource>,
    segments: Segments,
) -> Result<Image, LogDiskError> {
    let sb = read_superblock(dev)?;
    let geo = sb.geometry;
    let need = geo.image_blocks() * u64::from(geo.block_size);
    if dev.len() < need {
        return Err(LogDiskError::TooSmall {
            need,
            have: dev.len(),
        });
    }
    let cp = read_checkpoint(dev, &geo)?;
    let nv = match nv {
        None => None,
        Some(NvSource::Fresh(cache)) => Some(cache),
        Some(NvSource::Region(r)) => Some(NvCache::open(r, geo.block_size, sb.id)?),
    };
    let mut map = cp.map.clone();
    let mut seg_buf = IoBuf::zeroed(geo.segment_blocks as usize * geo.block_size as usize);
    let segments = if cp.closed {
        Segments::Closed
    } else {
        segments
    };
    let replay = roll_forward(dev, &sb, &cp, &mut map, &mut seg_buf, segments)?;
    let mut recovered = Recovered {
        segment_writes: replay.applied,
        nv_blocks: 0,
        segments_read: replay.segments_read,
    };
    let mut sequence = cp.sequence.max(replay.max_seen);
    let nv = match nv {
        None => None,
        Some(cache) => {
            let (index, dirty, newest) = NvIndex::recover(cache, geo.logical_blocks)?;
            recovered.nv_blocks = dirty;
            sequence = sequence.max(newest);
            Some(index)
        }
    };
    // A new epoch (see the module doc).
    sequence += 1 << 32;
    // Past every sequence any slot or summary carries: the next write is
    // newer than everything recovery saw.
    assert!(sequence > cp.sequence.max(replay.max_seen));
    // The log continues inside a segment, with room for a write.
    strict_assert!(
        replay
            .head
            .is_none_or(|(s, slot)| s < geo.segments && slot + 1 < geo.segment_blocks)
    );
    let table = Table::from_map(geo, map, replay.head);
    if let Err(broken) = table.verify(replay.head) {
        return Err(LogDiskError::Corrupt(format!(
            "the recovered tables: {broken}"
        )));
    }
    let mut metrics = Metrics::from_counters(&cp.counters);
    metrics.recoveries += 1;
    Ok(Image {
        superblock: sb,
        table,
        log: Log {
            head: replay.head,
            last_opened: replay.head.map_or(u32::MAX, |(segment, _)| segment),
            // Chosen by the checkpoint the open writes.
            pin: None,
            sequence,
            since_checkpoint: 0,
            sealed: false,
        },
        nv,
        metrics,
        checkpoint_number: cp.number,
        recovered,
    })
}

/// A new volume's identity (nonzero).
pub(super) fn volume_id() -> u64 {
    crate::codec::new_id()
}

/// Reads and decodes the superblock at the start of `dev`.
pub fn read_superblock<D: Device + ?Sized>(dev: &D) -> Result<Superblock, LogDiskError> {
    // Page-aligned buffers, so an O_DIRECT device takes them as they are.
    let first_len = dev.alignment().max(SECTOR).min(dev.len());
    let mut first = IoBuf::zeroed(first_len as usize);
    dev.read_at(&mut first, 0)?;
    let bs = format::superblock_block_size(&first);
    let mut first = IoBuf::zeroed((bs as usize).min(dev.len() as usize));
    dev.read_at(&mut first, 0)?;
    Ok(format::decode_superblock(&first)?)
}

/// Reads both checkpoint slots; the valid one with the larger number wins,
/// its closed mark and chain kept only when the other slot is valid too.
pub(crate) fn read_checkpoint<D: Device + ?Sized>(
    dev: &D,
    geo: &Geometry,
) -> Result<Checkpoint, LogDiskError> {
    let b = u64::from(geo.block_size);
    let len = (geo.checkpoint_blocks() * b) as usize;
    let mut buf = IoBuf::zeroed(len);
    dev.read_at(&mut buf, b)?;
    let a = format::decode_checkpoint(&buf, geo);
    dev.read_at(&mut buf, b * (1 + geo.checkpoint_blocks()))?;
    let bb = format::decode_checkpoint(&buf, geo);
    // With one slot unreadable, the valid one may not be the newest (a
    // torn or decayed write of a newer one): its closed mark is not
    // trusted, and recovery reads the segments.
    // Nor its chain: the segments opened since it may have been reused
    // once the newer one was durable.
    let unmarked = |mut cp: Checkpoint| {
        cp.closed = false;
        cp.chain = None;
        cp
    };
    match (a, bb) {
        (Ok(a), Ok(bb)) => Ok(if a.number >= bb.number { a } else { bb }),
        (Ok(a), Err(_)) => Ok(unmarked(a)),
        (Err(_), Ok(bb)) => Ok(unmarked(bb)),
        (Err(a), Err(bb)) => Err(LogDiskError::NoCheckpoint {
            a: a.to_string(),
            b: bb.to_string(),
        }),
    }
}

/// A segment write found after the checkpoint.
struct Found {
    sequence: u64,
    segment: u32,
    slot: u32,
    entries: Vec<SummaryEntry>,
}

/// Walks segment `segment` from `slot`, accepting summaries newer than
/// `after` whose data all match their CRCs. Returns the accepted writes and
/// the largest valid summary sequence seen.
fn walk_segment(
    seg_buf: &[u8],
    sb: &Superblock,
    segment: u32,
    mut slot: u32,
    after: u64,
    found: &mut Vec<Found>,
) -> u64 {
    let geo = &sb.geometry;
    let b = geo.block_size as usize;
    let n = geo.segment_blocks;
    let mut prev = after;
    let mut max_seen = 0;
    while slot + 1 < n {
        let at = slot as usize * b;
        let Ok(s) = format::decode_summary(&seg_buf[at..at + b], sb) else {
            break;
        };
        max_seen = max_seen.max(s.sequence);
        let k = s.entries.len() as u32;
        if s.segment != segment
            || s.first_slot != slot
            || s.sequence <= prev
            || k == 0
            || slot + 1 + k > n
            || s.entries.iter().any(|e| e.logical >= geo.logical_blocks)
        {
            break;
        }
        let torn = s.entries.iter().enumerate().any(|(i, e)| {
            let from = (slot as usize + 1 + i) * b;
            format::crc32c(&seg_buf[from..from + b]) != e.crc
        });
        if torn {
            break;
        }
        // Row 4's checks passed: the write lies inside its segment and is
        // newer than the one before it.
        strict_assert!(slot + 1 + k <= n && s.sequence > prev);
        prev = s.sequence;
        found.push(Found {
            sequence: s.sequence,
            segment,
            slot,
            entries: s.entries,
        });
        slot += 1 + k;
    }
    max_seen
}

/// Threads reading segments' first blocks at a roll-forward: an SSD serves
/// that many at once in about the time of one; a device with one head (an
/// HDD, a throttled file) serves them in turn, as before.
const SCAN_THREADS: usize = 16;

/// The sequence of the summary in every segment's first block (`None`: no
/// valid summary there), `skip`'s left unread; read by up to
/// [`SCAN_THREADS`] threads, each a stride of the segments.
fn first_summaries<D: Device + ?Sized>(
    dev: &D,
    sb: &Superblock,
    skip: u32,
) -> Result<Vec<Option<u64>>, LogDiskError> {
    let geo = &sb.geometry;
    let n = geo.segments as usize;
    let threads = SCAN_THREADS.min(n / 64).max(1);
    let read = |from: usize| -> Result<Vec<(usize, Option<u64>)>, LogDiskError> {
        let b = geo.block_size as usize;
        let mut first = IoBuf::zeroed(b);
        let mut out = Vec::with_capacity(n / threads + 1);
        for s in (from..n).step_by(threads) {
            if s == skip as usize {
                continue;
            }
            dev.read_at(&mut first, block_of(geo, s as u32, 0) * b as u64)?;
            let sequence = format::decode_summary(&first, sb)
                .ok()
                .map(|sum| sum.sequence);
            out.push((s, sequence));
        }
        Ok(out)
    };
    let parts: Vec<_> = if threads == 1 {
        vec![read(0)]
    } else {
        std::thread::scope(|scope| {
            let workers: Vec<_> = (0..threads)
                .map(|from| scope.spawn(move || read(from)))
                .collect();
            workers
                .into_iter()
                .map(|w| {
                    w.join()
                        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
                })
                .collect()
        })
    };
    let mut firsts = vec![None; n];
    let mut seen = 0;
    for part in parts {
        for (s, sequence) in part? {
            firsts[s] = sequence;
            seen += 1;
        }
    }
    // Every segment but the head's was read, once.
    strict_assert_eq!(seen, n - usize::from((skip as usize) < n));
    Ok(firsts)
}

/// What a roll-forward found.
pub(crate) struct Replay {
    /// Largest summary sequence seen anywhere.
    pub max_seen: u64,
    /// Segment writes applied.
    pub applied: usize,
    /// Segments read (see [`Recovered::segments_read`]).
    pub segments_read: u32,
    /// The segments after the head were found by following the chain.
    pub chained: bool,
    /// Where the log continues.
    pub head: Option<(u32, u32)>,
}

/// Finds every segment write after checkpoint `cp` (sequence, head) and
/// applies it to `map` in sequence order. `seg_buf` holds one segment.
///
/// The checkpoint's head segment is walked from its head slot (and from
/// slot 0: it may have been reused since). The rest: with
/// [`Segments::Scan`] and a checkpoint that names where the log went next
/// ([`Checkpoint::chain`]), the segments opened since, each naming the next,
/// until one holds nothing newer than the checkpoint; if a link is missing,
/// every segment's first block ([`first_summaries`]) as without one.
pub(crate) fn roll_forward<D: Device + ?Sized>(
    dev: &D,
    sb: &Superblock,
    cp: &Checkpoint,
    map: &mut [MapEntry],
    seg_buf: &mut [u8],
    segments: Segments,
) -> Result<Replay, LogDiskError> {
    let geo = &sb.geometry;
    let after = cp.sequence;
    if segments == Segments::Closed {
        strict_assert!(
            roll_forward(dev, sb, cp, &mut map.to_vec(), seg_buf, Segments::Every)?.applied == 0,
            "a write newer than a closing checkpoint"
        );
        return Ok(Replay {
            max_seen: after,
            applied: 0,
            segments_read: 0,
            chained: false,
            head: (cp.head_slot + 1 < geo.segment_blocks)
                .then_some((cp.head_segment, cp.head_slot)),
        });
    }
    let mut found = Vec::new();
    let head = cp.head_segment;
    let mut max_seen = walk_head(dev, sb, cp, seg_buf, &mut found)?;
    let mut segments_read = 1;
    let chain = match (segments, cp.chain) {
        (Segments::Scan, Some(start)) => {
            let before = found.len();
            let walked = follow_chain(dev, sb, after, start, seg_buf, &mut found)?;
            if walked.is_none() {
                found.truncate(before);
            }
            walked
        }
        _ => None,
    };
    let chained = chain.is_some();
    if let Some((seen, read)) = chain {
        max_seen = max_seen.max(seen);
        segments_read += read;
        strict_assert!(
            chain_agrees_with_scan(dev, sb, cp, seg_buf, &found, seen)?,
            "the chain from checkpoint #{} missed a write",
            cp.number
        );
    } else {
        let (seen, read) = scan_all(dev, sb, after, head, seg_buf, segments, &mut found)?;
        max_seen = max_seen.max(seen);
        segments_read += read;
    }
    found.sort_unstable_by_key(|f| f.sequence);
    found.dedup_by_key(|f| f.sequence);
    // Applied oldest first, each newer than the checkpoint: the newest
    // write of a block wins.
    strict_assert!(found.windows(2).all(|w| w[0].sequence < w[1].sequence));
    assert!(
        found.first().is_none_or(|f| f.sequence > after),
        "replaying a write the checkpoint holds"
    );
    for f in &found {
        for (i, e) in f.entries.iter().enumerate() {
            map[e.logical as usize] = MapEntry {
                physical: block_of(geo, f.segment, f.slot + 1 + i as u32),
                sequence: f.sequence,
                crc: e.crc,
            };
        }
    }
    // The log continues after the newest write found (or at the checkpoint's
    // head): a crash does not cost a segment.
    assert!(
        found
            .iter()
            .all(|f| f.entries.iter().all(|e| e.logical < geo.logical_blocks)),
        "a replayed write names a block past the end"
    );
    let head = match found.last() {
        Some(f) => (f.segment, f.slot + 1 + f.entries.len() as u32),
        None => (cp.head_segment, cp.head_slot),
    };
    Ok(Replay {
        max_seen,
        applied: found.len(),
        segments_read,
        chained,
        head: (head.1 + 1 < geo.segment_blocks).then_some(head),
    })
}

/// Reads checkpoint `cp`'s head segment whole and walks it from the head
/// slot, and from slot 0 (it may have been reused since); returns the
/// largest sequence seen (at least the checkpoint's).
fn walk_head<D: Device + ?Sized>(
    dev: &D,
    sb: &Superblock,
    cp: &Checkpoint,
    seg_buf: &mut [u8],
    found: &mut Vec<Found>,
) -> Result<u64, LogDiskError> {
    let geo = &sb.geometry;
    let (head, after) = (cp.head_segment, cp.sequence);
    dev.read_at(seg_buf, block_of(geo, head, 0) * u64::from(geo.block_size))?;
    let mut max_seen = after.max(walk_segment(seg_buf, sb, head, cp.head_slot, after, found));
    if cp.head_slot > 0 {
        max_seen = max_seen.max(walk_segment(seg_buf, sb, head, 0, after, found));
    }
    Ok(max_seen)
}

/// Whether what the chain from `cp` found (with the head segment's writes)
/// is what reading every segment finds, up to where the chain ends: a
/// write it missed must be newer than `seen`, every write along it (one
/// the crash left beyond a link it tore or dropped, never acknowledged).
fn chain_agrees_with_scan<D: Device + ?Sized>(
    dev: &D,
    sb: &Superblock,
    cp: &Checkpoint,
    seg_buf: &mut [u8],
    found: &[Found],
    seen: u64,
) -> Result<bool, LogDiskError> {
    let (head, after) = (cp.head_segment, cp.sequence);
    let mut all = Vec::new();
    walk_head(dev, sb, cp, seg_buf, &mut all)?;
    scan_all(dev, sb, after, head, seg_buf, Segments::Every, &mut all)?;
    let chained: std::collections::BTreeSet<u64> = found.iter().map(|f| f.sequence).collect();
    let all: std::collections::BTreeSet<u64> = all.iter().map(|f| f.sequence).collect();
    Ok(chained.is_subset(&all) && all.difference(&chained).all(|&s| s > seen))
}

/// Walks the chain of segments opened since a checkpoint of `after`, from
/// `start` (the checkpoint's [`Checkpoint::chain`]): each segment whose
/// first summary is newer than the checkpoint is walked, and names the
/// next. The chain ends at a segment not opened since: its first summary
/// older than the checkpoint, or its first block not written since the
/// format (zeroes, or an earlier format's summary).
/// Returns the largest sequence seen and the segments read; `None` if a
/// link is missing, leads nowhere, or is a damaged first block (a torn
/// write or a decayed summary, after which flushed writes may follow):
/// the caller reads every segment instead.
fn follow_chain<D: Device + ?Sized>(
    dev: &D,
    sb: &Superblock,
    after: u64,
    start: u32,
    seg_buf: &mut [u8],
    found: &mut Vec<Found>,
) -> Result<Option<(u64, u32)>, LogDiskError> {
    let geo = &sb.geometry;
    let b = geo.block_size as usize;
    let mut max_seen = after;
    let mut segment = start;
    let mut read = 0u32;
    loop {
        // Links that loop (a segment is never opened twice between
        // checkpoints, so a chain is shorter than the disk): corrupt.
        if segment >= geo.segments || read > geo.segments {
            return Ok(None);
        }
        dev.read_at(seg_buf, block_of(geo, segment, 0) * b as u64)?;
        read += 1;
        let first = match format::read_summary(&seg_buf[..b], sb) {
            SummaryBlock::Ours(first) => first,
            // Not written since the format: zeroes, or what an earlier use
            // of the device left.
            SummaryBlock::Unwritten => return Ok(Some((max_seen, read))),
            // A torn write, or a summary that decayed: the writes after it
            // may have been flushed, so look for them everywhere.
            SummaryBlock::Damaged(_) => return Ok(None),
        };
        if first.sequence <= after {
            // Older than the checkpoint: not opened since.
            return Ok(Some((max_seen, read)));
        }
        if first.segment != segment || first.first_slot != 0 {
            return Ok(None);
        }
        max_seen = max_seen.max(walk_segment(seg_buf, sb, segment, 0, after, found));
        match first.next {
            Some(next) => segment = next,
            None => return Ok(None),
        }
    }
}

/// Reads the first block of every segment but `head` (already walked) —
/// none with [`Segments::Blank`], just formatted — and
/// walks each whose summary is newer than `after`. Returns the largest
/// sequence seen and the segments read.
fn scan_all<D: Device + ?Sized>(
    dev: &D,
    sb: &Superblock,
    after: u64,
    head: u32,
    seg_buf: &mut [u8],
    segments: Segments,
    found: &mut Vec<Found>,
) -> Result<(u64, u32), LogDiskError> {
    let geo = &sb.geometry;
    let b = geo.block_size as usize;
    let mut max_seen = after;
    if segments == Segments::Blank {
        // No first slot holds a summary of this volume.
        strict_assert!({
            let mut first = IoBuf::zeroed(b);
            let mut blank = true;
            for s in (0..geo.segments).filter(|&s| s != head) {
                dev.read_at(&mut first, block_of(geo, s, 0) * b as u64)?;
                blank &= !matches!(format::read_summary(&first, sb), SummaryBlock::Ours(_));
            }
            blank
        });
        return Ok((max_seen, 0));
    }
    // Every first block but the head's, read with several in flight.
    let firsts = first_summaries(dev, sb, head)?;
    let mut read = 0;
    for s in (0..geo.segments).filter(|&s| s != head) {
        read += 1;
        let Some(sequence) = firsts[s as usize] else {
            continue;
        };
        max_seen = max_seen.max(sequence);
        if sequence > after {
            dev.read_at(seg_buf, block_of(geo, s, 0) * b as u64)?;
            max_seen = max_seen.max(walk_segment(seg_buf, sb, s, 0, after, found));
        }
    }
    Ok((max_seen, read))
}
