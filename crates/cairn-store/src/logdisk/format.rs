//! The log disk's on-disk structures, as pure encode/decode functions.
//!
//! Layout of a log-disk image (block size `B`, `S` segments of `N` blocks,
//! `C` blocks per checkpoint slot); byte diagrams in `docs/formats.md`:
//!
//! ```text
//! block 0            superblock
//! blocks 1 .. 1+C    checkpoint slot A
//! blocks 1+C .. 1+2C checkpoint slot B
//! then S segments of N blocks each
//! ```
//!
//! A segment is filled by *segment writes*: one summary block followed by the
//! `k` data blocks it names, written as one sequential I/O. The summary comes
//! first so that a segment can be walked from slot 0 (each summary says where
//! the next one is: `k + 1` slots on). A flush in the volatile-buffer mode
//! closes a partial write (`k < N − 1`) and the next write continues in the same
//! segment after it, as Sprite LFS's partial segments. Every structure carries a magic, a version and a CRC32C; a summary
//! also carries the CRC32C of each data block it names, so a write torn or
//! reordered by the device is recognised at roll-forward (some block's CRC does
//! not match) and dropped as a whole — it was never acknowledged by a flush —
//! and (version 2) the volume's id, so a summary an earlier format of the
//! device left is never taken for this volume's ([`read_summary`]).
//!
//! Everything is little-endian and decoded by explicit offsets; decoding never
//! panics on any input (tested by flipping every byte).

/// Disk format version written by this code (the superblock's): 2, whose
/// segment summaries carry the volume's id, so a summary left on the device
/// by an earlier format is never taken for this volume's. Version 1's do
/// not; its format zeroed every segment's first block instead (one seek a
/// segment) and still left deeper slots' summaries readable.
pub const VERSION: u32 = 2;
/// Oldest disk format version this code opens (and keeps writing in its
/// own layout).
pub const OLDEST_VERSION: u32 = 1;
/// Version of a checkpoint slot: the same layout in both disk versions.
pub const CHECKPOINT_VERSION: u32 = 1;

/// `CAIRNLD1`: the superblock.
pub const SUPERBLOCK_MAGIC: [u8; 8] = *b"CAIRNLD1";
/// `CAIRNCP1`: a checkpoint slot.
pub const CHECKPOINT_MAGIC: [u8; 8] = *b"CAIRNCP1";
/// `CAIRNSS1`: a segment summary.
pub const SUMMARY_MAGIC: [u8; 8] = *b"CAIRNSS1";

/// "No physical block": an unmapped logical block.
pub const UNMAPPED: u64 = u64::MAX;

/// Bytes of a summary's header in disk version `version`; entries follow:
/// version 2 adds the volume id at 40..48.
const fn summary_header(version: u32) -> usize {
    if version >= 2 { 48 } else { 40 }
}
/// Bytes per summary entry: logical block (8), data CRC32C (4), reserved (4).
const SUMMARY_ENTRY: usize = 16;
/// Bytes of a checkpoint's header (64) and its counters (16 × 8); the map and
/// the usage table follow.
const CHECKPOINT_HEADER: usize = 64 + 8 * COUNTERS;
/// Counters (the log disk's metrics) saved with each checkpoint.
pub const COUNTERS: usize = 16;
/// Bytes per map entry: physical block (8), write sequence (8), data CRC32C (4),
/// reserved (4).
const MAP_ENTRY: usize = 24;
/// Bytes per usage entry: live blocks (4), reserved (4), last write sequence (8).
const USAGE_ENTRY: usize = 16;
/// Checkpoint flag (the `u32` at offset 52): written by a clean close.
const FLAG_CLOSED: u32 = 1;

use crate::codec::{
    CHECKED, check, put_u32, put_u64, reserved_zero, seal, u32_at, u64_at, valid_block_size,
};
pub use crate::codec::{FormatError, crc32c};

/// The image's geometry, fixed at format time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// Bytes per block: a power of two, 512 to 65,536. Default 4,096.
    pub block_size: u32,
    /// Blocks per segment, summary slots included: 2 to what one summary block
    /// can name + 1. Default 128.
    pub segment_blocks: u32,
    /// Segments on the device.
    pub segments: u32,
    /// Logical blocks the log disk exports.
    pub logical_blocks: u64,
}

impl Geometry {
    /// Most data blocks one summary block can name (252 for 4 KiB blocks).
    pub fn max_entries(block_size: u32) -> u32 {
        Self::max_entries_in(block_size, VERSION)
    }

    /// [`Geometry::max_entries`] in disk version `version` (253 for 4 KiB
    /// blocks in version 1).
    pub fn max_entries_in(block_size: u32, version: u32) -> u32 {
        ((block_size as usize - summary_header(version) - 4) / SUMMARY_ENTRY) as u32
    }

    /// Bytes of one checkpoint: header, map, usage table.
    pub fn checkpoint_bytes(&self) -> u64 {
        CHECKPOINT_HEADER as u64
            + self.logical_blocks * MAP_ENTRY as u64
            + u64::from(self.segments) * USAGE_ENTRY as u64
    }

    /// Blocks of one checkpoint slot.
    pub fn checkpoint_blocks(&self) -> u64 {
        self.checkpoint_bytes().div_ceil(u64::from(self.block_size))
    }

    /// First block of segment `segment`.
    pub fn segment_start(&self, segment: u32) -> u64 {
        1 + 2 * self.checkpoint_blocks() + u64::from(segment) * u64::from(self.segment_blocks)
    }

    /// Blocks the whole image needs.
    pub fn image_blocks(&self) -> u64 {
        self.segment_start(self.segments)
    }

    /// Checks the geometry's invariants for a new disk; the reason names
    /// the field.
    pub fn validate(&self) -> Result<(), FormatError> {
        self.validate_in(VERSION)
    }

    /// [`Geometry::validate`] for a disk of version `version`.
    pub fn validate_in(&self, version: u32) -> Result<(), FormatError> {
        let invalid = |reason: String| FormatError::Invalid {
            what: "geometry",
            reason,
        };
        if !valid_block_size(self.block_size) {
            return Err(invalid(format!(
                "block_size {} is not a power of two from 512 to 65536",
                self.block_size
            )));
        }
        let max = Self::max_entries_in(self.block_size, version) + 1;
        if !(2..=max).contains(&self.segment_blocks) {
            return Err(invalid(format!(
                "segment_blocks {} is outside 2..={max} for {}-byte blocks",
                self.segment_blocks, self.block_size
            )));
        }
        if self.segments < 4 {
            return Err(invalid(format!(
                "{} segments: at least 4 are needed (one open, cleaner room)",
                self.segments
            )));
        }
        if self.logical_blocks == 0 {
            return Err(invalid("logical_blocks is 0".into()));
        }
        let physical = u64::from(self.segments) * u64::from(self.segment_blocks - 1);
        if self.logical_blocks >= physical {
            return Err(invalid(format!(
                "{} logical blocks do not fit in {physical} data slots with room to clean",
                self.logical_blocks
            )));
        }
        Ok(())
    }
}

/// The superblock: the geometry and the volume's identity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Superblock {
    /// The image's geometry.
    pub geometry: Geometry,
    /// A random identity chosen at format time; the NV cache records it, so a
    /// cache region is never replayed into another volume, and (version 2)
    /// so does every segment summary.
    pub id: u64,
    /// The disk format version, [`OLDEST_VERSION`] to [`VERSION`]: the
    /// layout of its segment summaries.
    pub version: u32,
}

/// Encodes the superblock (one block).
pub fn encode_superblock(sb: &Superblock) -> Vec<u8> {
    let g = &sb.geometry;
    let mut b = vec![0u8; g.block_size as usize];
    b[..8].copy_from_slice(&SUPERBLOCK_MAGIC);
    put_u32(&mut b, 8, sb.version);
    put_u32(&mut b, 12, g.block_size);
    put_u32(&mut b, 16, g.segment_blocks);
    put_u32(&mut b, 20, g.segments);
    put_u64(&mut b, 24, g.logical_blocks);
    put_u64(&mut b, 32, sb.id);
    let crc_at = b.len() - 4;
    seal(&mut b, crc_at);
    // Paired with the decoder: the bytes leave only if they read back as `sb`.
    strict_assert!(
        reserved_zero(&b, std::iter::once(40..crc_at)),
        "superblock: reserved bytes written"
    );
    strict_assert_eq!(
        decode_superblock(&b).as_ref(),
        Ok(sb),
        "superblock does not decode back"
    );
    b
}

/// The block size a superblock's first 512 bytes claim (512 when they are
/// not a superblock or claim something impossible), so the caller can read
/// the whole block and then decode it.
pub fn superblock_block_size(first: &[u8]) -> u32 {
    if first.len() < 16 || first[..8] != SUPERBLOCK_MAGIC {
        return 512;
    }
    let size = u32_at(first, 12);
    if valid_block_size(size) { size } else { 512 }
}

/// Decodes a superblock; `b` is the image's first block (its size is read
/// from the block itself, so pass at least 512 bytes; the rest is checked).
pub fn decode_superblock(b: &[u8]) -> Result<Superblock, FormatError> {
    const WHAT: &str = "superblock";
    if b.len() < 512 {
        return Err(FormatError::Size {
            what: WHAT,
            got: b.len(),
            want: 512,
        });
    }
    let block_size = u32_at(b, 12);
    let size = usize::try_from(block_size).unwrap_or(usize::MAX);
    if !valid_block_size(block_size) || b.len() < size {
        // Judge the magic first, so a foreign image says so.
        let mut found = [0u8; 8];
        found.copy_from_slice(&b[..8]);
        if found != SUPERBLOCK_MAGIC {
            return Err(FormatError::Magic { what: WHAT, found });
        }
        return Err(FormatError::Invalid {
            what: WHAT,
            reason: format!("block size {block_size} (buffer {} bytes)", b.len()),
        });
    }
    let b = &b[..size];
    // Every version this code opens; any other is refused naming the newest.
    let version = u32_at(b, 8);
    let known = if (OLDEST_VERSION..=VERSION).contains(&version) {
        version
    } else {
        VERSION
    };
    check(WHAT, b, size, (SUPERBLOCK_MAGIC, known), size - 4)?;
    let g = Geometry {
        block_size,
        segment_blocks: u32_at(b, 16),
        segments: u32_at(b, 20),
        logical_blocks: u64_at(b, 24),
    };
    g.validate_in(version).map_err(|e| FormatError::Invalid {
        what: WHAT,
        reason: e.to_string(),
    })?;
    Ok(Superblock {
        geometry: g,
        id: u64_at(b, 32),
        version,
    })
}

/// One entry of a segment summary: a data block of the segment write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SummaryEntry {
    /// The logical block the data block holds.
    pub logical: u64,
    /// CRC32C of the data block.
    pub crc: u32,
}

/// A segment summary: closes one segment write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Summary {
    /// Write sequence number, increasing across the whole log.
    pub sequence: u64,
    /// The segment written.
    pub segment: u32,
    /// Slot (block within the segment) of this summary; its data blocks are
    /// the `entries.len()` slots after it.
    pub first_slot: u32,
    /// Whether a flush closed this write before the segment was full.
    pub partial: bool,
    /// The segment the log opens after this one, chosen when this one was
    /// opened (or by a checkpoint while it was the head, if none was free
    /// then); `None`: none chosen. Recovery follows the first summary's
    /// from a checkpoint's [`Checkpoint::chain`] instead of reading every
    /// segment.
    pub next: Option<u32>,
    /// The data blocks, in slot order.
    pub entries: Vec<SummaryEntry>,
}

/// A segment as stored where 0 means none: `s + 1`.
fn plus_one(segment: Option<u32>) -> u32 {
    segment.map_or(0, |s| {
        assert!(s < u32::MAX, "segment {s} has no encoding");
        s + 1
    })
}

/// Encodes a summary into one block of the disk `sb` describes, in its
/// version's layout (version 2: with its id).
pub fn encode_summary(s: &Summary, sb: &Superblock) -> Result<Vec<u8>, FormatError> {
    let block_size = sb.geometry.block_size;
    let header = summary_header(sb.version);
    if s.entries.len() > Geometry::max_entries_in(block_size, sb.version) as usize {
        return Err(FormatError::Invalid {
            what: "summary",
            reason: format!("{} entries do not fit one block", s.entries.len()),
        });
    }
    let mut b = vec![0u8; block_size as usize];
    b[..8].copy_from_slice(&SUMMARY_MAGIC);
    put_u32(&mut b, 8, sb.version);
    put_u32(&mut b, 12, s.entries.len() as u32);
    put_u64(&mut b, 16, s.sequence);
    put_u32(&mut b, 24, s.segment);
    put_u32(&mut b, 28, s.first_slot);
    put_u32(&mut b, 32, u32::from(s.partial));
    put_u32(&mut b, 36, plus_one(s.next));
    if sb.version >= 2 {
        put_u64(&mut b, 40, sb.id);
    }
    for (i, e) in s.entries.iter().enumerate() {
        let at = header + i * SUMMARY_ENTRY;
        put_u64(&mut b, at, e.logical);
        put_u32(&mut b, at + 8, e.crc);
    }
    let crc_at = b.len() - 4;
    seal(&mut b, crc_at);
    // Paired with the decoder: the bytes leave only if they read back as `s`.
    strict_assert!(
        reserved_zero(
            &b,
            (0..s.entries.len())
                .map(|i| header + i * SUMMARY_ENTRY + 12..header + (i + 1) * SUMMARY_ENTRY)
                .chain(std::iter::once(
                    header + s.entries.len() * SUMMARY_ENTRY..crc_at
                ))
        ),
        "segment summary: reserved bytes written"
    );
    strict_assert_eq!(
        decode_summary(&b, sb).as_ref(),
        Ok(s),
        "segment summary does not decode back"
    );
    Ok(b)
}

/// A block where a segment summary may be, as the volume `sb` describes
/// reads it ([`read_summary`]).
#[derive(Debug, PartialEq, Eq)]
pub enum SummaryBlock {
    /// A summary this volume wrote.
    Ours(Summary),
    /// Nothing this volume wrote since its format: zeroes, or (version 2) a
    /// whole, checksummed summary that is not this volume's — another id,
    /// or version 1's layout, left by an earlier use of the device.
    Unwritten,
    /// Anything else: a torn or decayed summary, or not a summary at all.
    Damaged(FormatError),
}

/// Reads the block `b` of the volume `sb` describes as a summary slot.
pub fn read_summary(b: &[u8], sb: &Superblock) -> SummaryBlock {
    match decode_summary(b, sb) {
        Ok(s) => SummaryBlock::Ours(s),
        Err(_) if b.iter().all(|&x| x == 0) => SummaryBlock::Unwritten,
        Err(e) if sb.version >= 2 && another_volumes(b, sb) => {
            strict_assert!(!matches!(e, FormatError::Checksum { .. }));
            SummaryBlock::Unwritten
        }
        Err(e) => SummaryBlock::Damaged(e),
    }
}

/// Whether `b` is a whole summary (magic, a known version, its CRC) that
/// the volume `sb` did not write: another volume's id, or version 1's
/// layout, which has none.
fn another_volumes(b: &[u8], sb: &Superblock) -> bool {
    let size = sb.geometry.block_size as usize;
    let version = if b.len() >= 12 { u32_at(b, 8) } else { 0 };
    (OLDEST_VERSION..=VERSION).contains(&version)
        && check(
            "segment summary",
            b,
            size,
            (SUMMARY_MAGIC, version),
            size.saturating_sub(4),
        )
        .is_ok()
        && (version < 2 || u64_at(b, 40) != sb.id)
}

/// Whether `count` summary entries fit one block of `block_size` bytes.
fn entries_fit(count: u32, block_size: u32, version: u32) -> bool {
    summary_header(version) + count as usize * SUMMARY_ENTRY + 4 <= block_size as usize
}

/// Decodes a summary block of the volume `sb` describes; one in another
/// version's layout, or (version 2) naming another volume, is an error.
pub fn decode_summary(b: &[u8], sb: &Superblock) -> Result<Summary, FormatError> {
    const WHAT: &str = "segment summary";
    let block_size = sb.geometry.block_size;
    let size = block_size as usize;
    check(
        WHAT,
        b,
        size,
        (SUMMARY_MAGIC, sb.version),
        size.saturating_sub(4),
    )?;
    if sb.version >= 2 && u64_at(b, 40) != sb.id {
        return Err(FormatError::Invalid {
            what: WHAT,
            reason: format!(
                "written by volume {:016x}, not this one ({:016x}): an earlier format",
                u64_at(b, 40),
                sb.id
            ),
        });
    }
    let count = u32_at(b, 12);
    if count > Geometry::max_entries_in(block_size, sb.version) {
        return Err(FormatError::Invalid {
            what: WHAT,
            reason: format!("{count} entries do not fit one block"),
        });
    }
    let flags = u32_at(b, 32);
    if flags > 1 {
        return Err(FormatError::Invalid {
            what: WHAT,
            reason: format!("unknown flags {flags:#x}"),
        });
    }
    let header = summary_header(sb.version);
    let entries = (0..count as usize)
        .map(|i| {
            let at = header + i * SUMMARY_ENTRY;
            SummaryEntry {
                logical: u64_at(b, at),
                crc: u32_at(b, at + 8),
            }
        })
        .collect();
    strict_assert!(entries_fit(count, block_size, sb.version), "checked above");
    Ok(Summary {
        sequence: u64_at(b, 16),
        segment: u32_at(b, 24),
        first_slot: u32_at(b, 28),
        partial: flags == 1,
        next: u32_at(b, 36).checked_sub(1),
        entries,
    })
}

/// Where a logical block lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MapEntry {
    /// Physical block, or [`UNMAPPED`].
    pub physical: u64,
    /// Sequence of the write that put it there (its "write time").
    pub sequence: u64,
    /// CRC32C of the block's data, checked on every read.
    pub crc: u32,
}

impl MapEntry {
    /// An unmapped logical block (reads as zeroes).
    pub const UNMAPPED: Self = Self {
        physical: UNMAPPED,
        sequence: 0,
        crc: 0,
    };
}

/// One segment's line of the usage table.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// Data blocks of the segment still mapped.
    pub live: u32,
    /// Sequence of the segment's newest write (its age, for the cleaner).
    pub last_sequence: u64,
}

/// A checkpoint: the block address table and segment usage table as of
/// `sequence`, and where the log continues.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Checkpoint {
    /// Checkpoint number; of the two slots, the valid one with the larger
    /// number is current.
    pub number: u64,
    /// Every write with a sequence up to this is in the tables.
    pub sequence: u64,
    /// The segment the log was writing.
    pub head_segment: u32,
    /// The next free slot in it.
    pub head_slot: u32,
    /// Written by a clean close ([`LogDisk::close`](super::LogDisk::close)):
    /// no segment holds a write newer than `sequence`, so recovery reads no
    /// segment. The first checkpoint after an open clears it before any
    /// segment write.
    pub closed: bool,
    /// The segment the log opens next, where recovery's walk of the segments
    /// written since this checkpoint starts (each names the next,
    /// [`Summary::next`]); `None`: recovery reads every segment.
    pub chain: Option<u32>,
    /// Logical → physical, one entry per logical block.
    pub map: Vec<MapEntry>,
    /// One entry per segment.
    pub usage: Vec<Usage>,
    /// The log disk's metrics as of this checkpoint (meaning fixed by
    /// `logdisk::Metrics`), so `cairn inspect` can print them.
    pub counters: [u64; COUNTERS],
}

impl Checkpoint {
    /// The checkpoint's fields other than its tables.
    pub fn head(&self) -> CheckpointHead {
        CheckpointHead {
            number: self.number,
            sequence: self.sequence,
            head_segment: self.head_segment,
            head_slot: self.head_slot,
            closed: self.closed,
            chain: self.chain,
            counters: self.counters,
        }
    }
}

/// Encodes a checkpoint into whole blocks of `g`.
pub fn encode_checkpoint(c: &Checkpoint, g: &Geometry) -> Result<Vec<u8>, FormatError> {
    let mut b = vec![0u8; (g.checkpoint_blocks() * u64::from(g.block_size)) as usize];
    encode_checkpoint_into(&mut b, &c.head(), &c.map, c.usage.iter().copied(), g)?;
    Ok(b)
}

/// A checkpoint's fields other than its tables (see [`Checkpoint`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CheckpointHead {
    /// [`Checkpoint::number`].
    pub number: u64,
    /// [`Checkpoint::sequence`].
    pub sequence: u64,
    /// [`Checkpoint::head_segment`].
    pub head_segment: u32,
    /// [`Checkpoint::head_slot`].
    pub head_slot: u32,
    /// [`Checkpoint::closed`].
    pub closed: bool,
    /// [`Checkpoint::chain`].
    pub chain: Option<u32>,
    /// [`Checkpoint::counters`].
    pub counters: [u64; COUNTERS],
}

/// Encodes a checkpoint straight from the tables into `out`, whole blocks of
/// `g` that are zero wherever a checkpoint of `g` holds no field (a fresh
/// zeroed buffer, or one this function filled before: it writes the same
/// bytes every time), with no copy of the tables. The same bytes as
/// [`encode_checkpoint`].
pub fn encode_checkpoint_into(
    out: &mut [u8],
    head: &CheckpointHead,
    map: &[MapEntry],
    usage: impl ExactSizeIterator<Item = Usage>,
    g: &Geometry,
) -> Result<(), FormatError> {
    let size = (g.checkpoint_blocks() * u64::from(g.block_size)) as usize;
    if map.len() as u64 != g.logical_blocks || usage.len() != g.segments as usize {
        return Err(FormatError::Invalid {
            what: "checkpoint",
            reason: format!(
                "{} map and {} usage entries for a geometry of {} and {}",
                map.len(),
                usage.len(),
                g.logical_blocks,
                g.segments
            ),
        });
    }
    if let Some(next) = head.chain.filter(|&s| s >= g.segments) {
        return Err(FormatError::Invalid {
            what: "checkpoint",
            reason: format!("the next segment, {next}, is outside the segments"),
        });
    }
    if out.len() != size {
        return Err(FormatError::Size {
            what: "checkpoint",
            got: out.len(),
            want: size,
        });
    }
    let b = out;
    b[..CHECKPOINT_HEADER].fill(0);
    b[..8].copy_from_slice(&CHECKPOINT_MAGIC);
    put_u32(b, 8, CHECKPOINT_VERSION);
    put_u64(b, 16, head.number);
    put_u64(b, 24, head.sequence);
    put_u32(b, 32, head.head_segment);
    put_u32(b, 36, head.head_slot);
    put_u64(b, 40, g.logical_blocks);
    put_u32(b, 48, g.segments);
    put_u32(b, 52, if head.closed { FLAG_CLOSED } else { 0 });
    put_u32(b, 56, plus_one(head.chain));
    for (i, c) in head.counters.iter().enumerate() {
        put_u64(b, 64 + 8 * i, *c);
    }
    let mut at = CHECKPOINT_HEADER;
    for e in map {
        put_u64(b, at, e.physical);
        put_u64(b, at + 8, e.sequence);
        put_u32(b, at + 16, e.crc);
        at += MAP_ENTRY;
    }
    // The usage table is an iterator: kept for the paired check only when it runs.
    let mut written = Vec::new();
    for u in usage {
        put_u32(b, at, u.live);
        put_u64(b, at + 8, u.last_sequence);
        at += USAGE_ENTRY;
        if CHECKED {
            written.push(u);
        }
    }
    seal(b, 12);
    // Paired with the decoder: the bytes leave only if they read back as the
    // tables and head given, and every byte no field holds is zero (as the
    // caller promised of `out`).
    let usage_at = CHECKPOINT_HEADER + map.len() * MAP_ENTRY;
    strict_assert!(
        reserved_zero(
            b,
            (0..map.len())
                .map(|i| CHECKPOINT_HEADER + i * MAP_ENTRY + 20
                    ..CHECKPOINT_HEADER + (i + 1) * MAP_ENTRY)
                .chain(
                    (0..written.len())
                        .map(|i| usage_at + i * USAGE_ENTRY + 4..usage_at + i * USAGE_ENTRY + 8)
                )
                .chain([60..64, at..size])
        ),
        "checkpoint: reserved bytes written"
    );
    strict_assert!(
        decode_checkpoint(b, g)
            .is_ok_and(|c| c.head() == *head && c.map == map && c.usage == written),
        "checkpoint does not decode back"
    );
    Ok(())
}

/// Decodes a checkpoint slot of `g` and checks every entry against it.
pub fn decode_checkpoint(b: &[u8], g: &Geometry) -> Result<Checkpoint, FormatError> {
    const WHAT: &str = "checkpoint";
    let size = (g.checkpoint_blocks() * u64::from(g.block_size)) as usize;
    check(WHAT, b, size, (CHECKPOINT_MAGIC, CHECKPOINT_VERSION), 12)?;
    let invalid = |reason: String| FormatError::Invalid { what: WHAT, reason };
    if u64_at(b, 40) != g.logical_blocks || u32_at(b, 48) != g.segments {
        return Err(invalid("written for another geometry".into()));
    }
    let flags = u32_at(b, 52);
    if flags & !FLAG_CLOSED != 0 {
        // A later version's flag this one does not know: the other slot
        // (or an error naming both) rather than a guess.
        return Err(invalid(format!("unknown flags {flags:#x}")));
    }
    let head_segment = u32_at(b, 32);
    let head_slot = u32_at(b, 36);
    if head_segment >= g.segments || head_slot >= g.segment_blocks {
        return Err(invalid(format!(
            "log head {head_segment}:{head_slot} is outside the segments"
        )));
    }
    let chain = u32_at(b, 56).checked_sub(1);
    if chain.is_some_and(|s| s >= g.segments) {
        return Err(invalid(format!(
            "the next segment, {}, is outside the segments",
            u32_at(b, 56) - 1
        )));
    }
    let first_data = g.segment_start(0);
    let end = g.image_blocks();
    let mut at = CHECKPOINT_HEADER;
    let mut map = Vec::with_capacity(g.logical_blocks as usize);
    for logical in 0..g.logical_blocks {
        let e = MapEntry {
            physical: u64_at(b, at),
            sequence: u64_at(b, at + 8),
            crc: u32_at(b, at + 16),
        };
        if e.physical != UNMAPPED && !(first_data..end).contains(&e.physical) {
            return Err(invalid(format!(
                "logical block {logical} maps to block {}, outside the segments",
                e.physical
            )));
        }
        map.push(e);
        at += MAP_ENTRY;
    }
    let mut usage = Vec::with_capacity(g.segments as usize);
    for segment in 0..g.segments {
        let u = Usage {
            live: u32_at(b, at),
            last_sequence: u64_at(b, at + 8),
        };
        if u.live >= g.segment_blocks {
            return Err(invalid(format!(
                "segment {segment} claims {} live blocks of {}",
                u.live, g.segment_blocks
            )));
        }
        usage.push(u);
        at += USAGE_ENTRY;
    }
    // One entry per block and per segment: what the checkpoint describes
    // is this geometry's.
    strict_assert_eq!(map.len() as u64, g.logical_blocks);
    strict_assert_eq!(usage.len(), g.segments as usize);
    let mut counters = [0u64; COUNTERS];
    for (i, c) in counters.iter_mut().enumerate() {
        *c = u64_at(b, 64 + 8 * i);
    }
    Ok(Checkpoint {
        counters,
        number: u64_at(b, 16),
        sequence: u64_at(b, 24),
        head_segment,
        head_slot,
        closed: flags & FLAG_CLOSED != 0,
        chain,
        map,
        usage,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32c_matches_the_crc32c_crate_and_skipping_zeroes_the_field() {
        let data: Vec<u8> = (0..9000u32).map(|i| (i * 7 + i / 13) as u8).collect();
        for len in [0, 1, 20, 63, 64, 4095, 4096, 9000] {
            assert_eq!(crc32c(&data[..len]), crc32c::crc32c(&data[..len]), "{len}");
        }
        let mut zeroed = data.clone();
        zeroed[100..104].fill(0);
        assert_eq!(
            crate::codec::crc_skipping(&data, 100),
            crc32c::crc32c(&zeroed)
        );
    }
    use proptest::prelude::*;

    fn geometry() -> Geometry {
        Geometry {
            block_size: 4096,
            segment_blocks: 128,
            segments: 16,
            logical_blocks: 1000,
        }
    }

    fn checkpoint(g: &Geometry) -> Checkpoint {
        Checkpoint {
            number: 3,
            sequence: 77,
            head_segment: 2,
            head_slot: 5,
            closed: true,
            chain: Some(g.segments - 1),
            map: (0..g.logical_blocks)
                .map(|i| MapEntry {
                    physical: if i % 3 == 0 {
                        UNMAPPED
                    } else {
                        g.segment_start(0) + i
                    },
                    sequence: i,
                    crc: i as u32 * 3,
                })
                .collect(),
            usage: (0..g.segments)
                .map(|s| Usage {
                    live: s,
                    last_sequence: u64::from(s) * 10,
                })
                .collect(),
            counters: std::array::from_fn(|i| i as u64 * 1000),
        }
    }

    /// Every single-byte corruption is an error, never a different value.
    fn every_flip_is_detected<T: PartialEq + std::fmt::Debug>(
        bytes: &[u8],
        decode: impl Fn(&[u8]) -> Result<T, FormatError>,
    ) {
        let good = decode(bytes).unwrap();
        let mut b = bytes.to_vec();
        for at in 0..b.len() {
            b[at] ^= 0x5a;
            match decode(&b) {
                Err(_) => {}
                Ok(value) => panic!("flip at byte {at} decoded as {value:?} (was {good:?})"),
            }
            b[at] ^= 0x5a;
        }
    }

    /// The superblock of a disk of `version` with `g` blocks of `block_size`.
    fn disk(block_size: u32, version: u32, id: u64) -> Superblock {
        Superblock {
            geometry: Geometry {
                block_size,
                ..geometry()
            },
            id,
            version,
        }
    }

    #[test]
    fn superblock_round_trips_and_detects_every_flip() {
        for version in [1, 2] {
            let sb = disk(4096, version, 0x1234_5678_9abc_def1);
            let b = encode_superblock(&sb);
            assert_eq!(decode_superblock(&b).unwrap(), sb);
            every_flip_is_detected(&b, decode_superblock);
        }
        // A version this build does not know is refused, naming both.
        let mut b = encode_superblock(&disk(4096, 2, 1));
        put_u32(&mut b, 8, 3);
        seal(&mut b, 4092);
        let refused = decode_superblock(&b).unwrap_err().to_string();
        assert!(
            refused.contains("version 3, this build reads version 2"),
            "{refused}"
        );
        assert!(matches!(
            decode_superblock(&[0u8; 4096]),
            Err(FormatError::Magic { .. })
        ));
    }

    #[test]
    fn checkpoint_round_trips_and_detects_every_flip() {
        let g = Geometry {
            logical_blocks: 40,
            segments: 4,
            segment_blocks: 16,
            block_size: 512,
        };
        let c = checkpoint(&g);
        let b = encode_checkpoint(&c, &g).unwrap();
        assert_eq!(b.len() as u64, g.checkpoint_blocks() * 512);
        assert_eq!(decode_checkpoint(&b, &g).unwrap(), c);
        every_flip_is_detected(&b, |b| decode_checkpoint(b, &g));
    }

    /// A checkpoint names the next segment as `s + 1`, 0 for none; one
    /// past the segments is refused, so recovery never reads outside them.
    #[test]
    fn a_checkpoint_chain_names_a_segment_or_none() {
        let g = geometry();
        for chain in [None, Some(0), Some(g.segments - 1)] {
            let c = Checkpoint {
                chain,
                ..checkpoint(&g)
            };
            let b = encode_checkpoint(&c, &g).unwrap();
            assert_eq!(u32_at(&b, 56), chain.map_or(0, |s| s + 1));
            assert_eq!(decode_checkpoint(&b, &g).unwrap().chain, chain);
        }
        let outside = Checkpoint {
            chain: Some(g.segments),
            ..checkpoint(&g)
        };
        assert!(encode_checkpoint(&outside, &g).is_err());
        // Written so by something else, CRC and all: refused.
        let mut b = encode_checkpoint(&checkpoint(&g), &g).unwrap();
        put_u32(&mut b, 56, g.segments + 1);
        seal(&mut b, 12);
        let refused = decode_checkpoint(&b, &g).unwrap_err().to_string();
        assert!(refused.contains("outside the segments"), "{refused}");
    }

    /// The log disk encodes every checkpoint into one reused buffer: the
    /// bytes must be exactly a fresh encoding's, whatever the buffer held.
    #[test]
    fn checkpoint_encoded_into_a_reused_buffer_matches_a_fresh_encoding() {
        let g = geometry();
        let first = checkpoint(&g);
        let mut second = checkpoint(&g);
        second.number = 4;
        second.head_slot = 1;
        second.closed = false;
        for (i, e) in second.map.iter_mut().enumerate() {
            *e = if i % 2 == 0 {
                MapEntry::UNMAPPED
            } else {
                MapEntry {
                    physical: g.segment_start(1) + i as u64,
                    sequence: 1000 + i as u64,
                    crc: 0xdead_beef,
                }
            };
        }
        second.usage.iter_mut().for_each(|u| u.live += 1);
        let mut buf = vec![0u8; (g.checkpoint_blocks() * u64::from(g.block_size)) as usize];
        for c in [&first, &second, &first] {
            encode_checkpoint_into(&mut buf, &c.head(), &c.map, c.usage.iter().copied(), &g)
                .unwrap();
            assert_eq!(buf, encode_checkpoint(c, &g).unwrap());
            assert_eq!(&decode_checkpoint(&buf, &g).unwrap(), c);
        }
        let head = CheckpointHead {
            number: 1,
            sequence: 0,
            head_segment: 0,
            head_slot: 0,
            closed: false,
            chain: None,
            counters: [0; COUNTERS],
        };
        assert!(
            encode_checkpoint_into(
                &mut buf[1..],
                &head,
                &first.map,
                first.usage.iter().copied(),
                &g
            )
            .is_err()
        );
    }

    #[test]
    fn checkpoint_entries_out_of_range_are_refused_even_with_a_good_crc() {
        // The encoder refuses to write such a checkpoint (its paired check),
        // so the bad fields are patched into a good one and resealed.
        let g = geometry();
        let c = checkpoint(&g);
        let mut b = encode_checkpoint(&c, &g).unwrap();
        // Logical block 5 → block 1, a checkpoint block, not a segment block.
        put_u64(&mut b, CHECKPOINT_HEADER + 5 * MAP_ENTRY, 1);
        seal(&mut b, 12);
        let error = decode_checkpoint(&b, &g).unwrap_err();
        assert!(error.to_string().contains("logical block 5"), "{error}");
        let mut b = encode_checkpoint(&c, &g).unwrap();
        put_u32(&mut b, 32, g.segments); // head_segment
        seal(&mut b, 12);
        assert!(decode_checkpoint(&b, &g).is_err());
    }

    /// The closed mark is bit 0 of the flags at offset 52; a flag this
    /// version does not know makes the slot invalid, not ignored.
    #[test]
    fn checkpoint_flags_hold_the_closed_mark_and_unknown_flags_are_refused() {
        let g = geometry();
        let mut c = checkpoint(&g);
        let b = encode_checkpoint(&c, &g).unwrap();
        assert_eq!(u32_at(&b, 52), FLAG_CLOSED);
        c.closed = false;
        let b = encode_checkpoint(&c, &g).unwrap();
        assert_eq!(u32_at(&b, 52), 0);
        assert!(!decode_checkpoint(&b, &g).unwrap().closed);
        let mut b = encode_checkpoint(&c, &g).unwrap();
        put_u32(&mut b, 52, 2);
        seal(&mut b, 12);
        let error = decode_checkpoint(&b, &g).unwrap_err();
        assert!(error.to_string().contains("unknown flags 0x2"), "{error}");
    }

    #[test]
    fn geometry_validation_names_the_field() {
        let mut g = geometry();
        g.block_size = 3000;
        assert!(g.validate().unwrap_err().to_string().contains("block_size"));
        let mut g = geometry();
        g.segment_blocks = 1000;
        assert!(
            g.validate()
                .unwrap_err()
                .to_string()
                .contains("segment_blocks")
        );
        let mut g = geometry();
        g.logical_blocks = u64::from(g.segments) * 127;
        assert!(
            g.validate()
                .unwrap_err()
                .to_string()
                .contains("logical blocks")
        );
        assert!(geometry().validate().is_ok());
        assert_eq!(Geometry::max_entries(4096), 252);
        assert_eq!(Geometry::max_entries_in(4096, 1), 253);
        assert_eq!(Geometry::max_entries(512), 28);
        // A version-1 disk of 254-block segments still opens; a new one
        // cannot be made so.
        let g = Geometry {
            segment_blocks: 254,
            ..geometry()
        };
        assert!(g.validate_in(1).is_ok());
        assert!(g.validate().unwrap_err().to_string().contains("2..=253"));
    }

    proptest! {
        #[test]
        fn summaries_round_trip(
            sequence: u64,
            segment: u32,
            first_slot in 0u32..128,
            partial: bool,
            next in proptest::option::of(0u32..u32::MAX),
            entries in proptest::collection::vec((any::<u64>(), any::<u32>()), 0..=253),
            version in 1u32..=2,
            id: u64,
        ) {
            let sb = disk(4096, version, id);
            let entries = &entries[..entries.len().min(Geometry::max_entries_in(4096, version) as usize)];
            let s = Summary {
                sequence,
                segment,
                first_slot,
                partial,
                next,
                entries: entries
                    .iter()
                    .map(|&(logical, crc)| SummaryEntry { logical, crc })
                    .collect(),
            };
            let b = encode_summary(&s, &sb).unwrap();
            prop_assert_eq!(decode_summary(&b, &sb).unwrap(), s.clone());
            prop_assert_eq!(read_summary(&b, &sb), SummaryBlock::Ours(s));
        }

        #[test]
        fn decoders_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..5000)) {
            let g = Geometry { logical_blocks: 40, segments: 4, segment_blocks: 16, block_size: 512 };
            let _ = decode_superblock(&bytes);
            for sb in [disk(512, 1, 1), disk(512, 2, 1), disk(4096, 2, 1)] {
                let _ = decode_summary(&bytes, &sb);
                let _ = read_summary(&bytes, &sb);
            }
            let _ = decode_checkpoint(&bytes, &g);
        }
    }

    #[test]
    fn summary_detects_every_flip_and_refuses_too_many_entries() {
        let s = Summary {
            sequence: 9,
            segment: 1,
            first_slot: 0,
            partial: true,
            next: Some(2),
            entries: vec![
                SummaryEntry {
                    logical: 4,
                    crc: 0xdead_beef
                };
                3
            ],
        };
        for version in [1, 2] {
            let sb = disk(512, version, 7);
            let b = encode_summary(&s, &sb).unwrap();
            every_flip_is_detected(&b, |b| decode_summary(b, &sb));
            // And a flip is damage, never "not written".
            let mut b = b;
            for at in 0..b.len() {
                b[at] ^= 0x5a;
                assert!(
                    matches!(read_summary(&b, &sb), SummaryBlock::Damaged(_)),
                    "version {version}, flip at {at}"
                );
                b[at] ^= 0x5a;
            }
        }
        let too_many = Summary {
            entries: vec![SummaryEntry { logical: 0, crc: 0 }; 253],
            ..s.clone()
        };
        assert!(encode_summary(&too_many, &disk(4096, 2, 1)).is_err());
        assert!(encode_summary(&too_many, &disk(4096, 1, 1)).is_ok());
    }

    /// A version-2 summary carries its volume's id: one another format of
    /// the device left (another id, or version 1's layout) reads as not
    /// written, as zeroes do; on a version-1 disk only zeroes do.
    #[test]
    fn a_summary_another_volume_left_reads_as_not_written() {
        let s = Summary {
            sequence: 1 << 40,
            segment: 3,
            first_slot: 0,
            partial: false,
            next: Some(4),
            entries: vec![SummaryEntry { logical: 9, crc: 1 }],
        };
        let ours = disk(4096, 2, 0x11);
        let earlier = disk(4096, 2, 0x33);
        let b = encode_summary(&s, &earlier).unwrap();
        assert_eq!(read_summary(&b, &ours), SummaryBlock::Unwritten);
        let refused = decode_summary(&b, &ours).unwrap_err().to_string();
        assert!(
            refused.contains("written by volume 0000000000000033"),
            "{refused}"
        );
        let v1 = encode_summary(&s, &disk(4096, 1, 0x11)).unwrap();
        assert_eq!(read_summary(&v1, &ours), SummaryBlock::Unwritten);
        assert_eq!(read_summary(&[0; 4096], &ours), SummaryBlock::Unwritten);
        // A version-1 disk has no id to tell: a whole summary is its own.
        let old = disk(4096, 1, 0x11);
        assert_eq!(read_summary(&v1, &old), SummaryBlock::Ours(s.clone()));
        assert!(matches!(read_summary(&b, &old), SummaryBlock::Damaged(_)));
        assert_eq!(read_summary(&[0; 4096], &old), SummaryBlock::Unwritten);
        // Torn: damage, on either.
        let mut torn = b.clone();
        torn[100] ^= 1;
        assert!(matches!(
            read_summary(&torn, &ours),
            SummaryBlock::Damaged(_)
        ));
        assert!(matches!(
            read_summary(&[7; 4096], &ours),
            SummaryBlock::Damaged(_)
        ));
    }
}
