//! The flash tier's on-disk structures, as pure encode/decode functions.
//!
//! Layout of a cache device (block size `B`, `K` buckets of `N` blocks, `J`
//! journal blocks, `C` blocks per checkpoint slot); byte diagrams in
//! `docs/formats.md` ("Flash tier"):
//!
//! ```text
//! block 0                superblock
//! blocks 1 .. 1+C        checkpoint slot A
//! blocks 1+C .. 1+2C     checkpoint slot B
//! blocks 1+2C .. +J      journal ring
//! data_start ..          K buckets of N slots (data_start a multiple of N)
//! ```
//!
//! Invariants of these structures, checked by the decoders in this order
//! (numbers appear in the messages):
//!
//! 1. Size, magic, version, CRC32C (the CRC over every byte, its field as zero).
//! 2. The superblock's geometry holds: block size a power of two in
//!    512..=65536, at least 2 blocks a bucket, at least 2 buckets, at least 4
//!    journal blocks, the regions in order and inside the device.
//! 3. A checkpoint names the same cache id and slot count as the superblock,
//!    and a replay start of at least 1;
//!    each slot entry is empty (all zero) or valid with a backing block below
//!    the backing device's end, reserved bits zero; no backing block is named
//!    by two slots.
//! 4. A journal block names the cache id; its record count fits; `flushed
//!    through` is below its own sequence; every record's kind is known, its
//!    slot below the slot count, its block below the backing end, reserved
//!    bytes zero.
//!
//! Everything is little-endian and decoded by explicit offsets; decoding never
//! panics on any input (tested by flipping every byte, and fuzzed).

use crate::codec::{
    CHECKED, FormatError, check, put_u32, put_u64, reserved_zero, seal, u32_at, u64_at,
    valid_block_size,
};

/// Format version written by this code.
pub const VERSION: u32 = 1;

/// `CAIRNTS1`: the superblock.
pub const SUPERBLOCK_MAGIC: [u8; 8] = *b"CAIRNTS1";
/// `CAIRNTC1`: a checkpoint slot.
pub const CHECKPOINT_MAGIC: [u8; 8] = *b"CAIRNTC1";
/// `CAIRNTJ1`: a journal block.
pub const JOURNAL_MAGIC: [u8; 8] = *b"CAIRNTJ1";

/// Bytes of a checkpoint's header; slot entries follow.
pub const CHECKPOINT_HEADER: usize = 64;
/// Bytes per checkpoint slot entry: word (8), data CRC32C (4), stamp (4).
pub const SLOT_ENTRY: usize = 16;
/// Bytes of a journal block's header; records follow.
pub const JOURNAL_HEADER: usize = 48;
/// Bytes per journal record.
pub const RECORD: usize = 32;

/// A slot entry's word: valid.
pub const WORD_VALID: u64 = 1 << 63;
/// A slot entry's word: dirty (the backing device may not hold this data).
pub const WORD_DIRTY: u64 = 1 << 62;
/// A slot entry's word: the backing block, in the low 62 bits.
pub const WORD_BLOCK: u64 = WORD_DIRTY - 1;

/// The cache device's geometry, fixed at format time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// Bytes per block (cached unit, journal block, checkpoint block): a power
    /// of two, 512 to 65,536. Default 4,096.
    pub block_size: u32,
    /// Blocks per bucket (the unit filled in order and reclaimed whole).
    pub bucket_blocks: u32,
    /// Buckets on the device.
    pub buckets: u32,
    /// Blocks of the journal ring.
    pub journal_blocks: u32,
    /// Blocks of the backing device (the keys are `0..backing_blocks`).
    pub backing_blocks: u64,
}

impl Geometry {
    /// Data slots: one cached block each.
    pub fn slots(&self) -> u64 {
        u64::from(self.buckets) * u64::from(self.bucket_blocks)
    }

    /// Bytes of one checkpoint: header and a slot entry per slot.
    pub fn checkpoint_bytes(&self) -> u64 {
        CHECKPOINT_HEADER as u64 + self.slots() * SLOT_ENTRY as u64
    }

    /// Blocks of one checkpoint slot.
    pub fn checkpoint_blocks(&self) -> u64 {
        self.checkpoint_bytes().div_ceil(u64::from(self.block_size))
    }

    /// First block of checkpoint slot `which` (0 = A, 1 = B).
    pub fn checkpoint_start(&self, which: u64) -> u64 {
        1 + which * self.checkpoint_blocks()
    }

    /// First block of the journal ring.
    pub fn journal_start(&self) -> u64 {
        1 + 2 * self.checkpoint_blocks()
    }

    /// The block holding journal sequence `seq` (the ring position).
    pub fn journal_block(&self, seq: u64) -> u64 {
        self.journal_start() + seq % u64::from(self.journal_blocks)
    }

    /// First data block: after the journal, rounded up to a whole bucket so
    /// buckets line up with the device's erase blocks.
    pub fn data_start(&self) -> u64 {
        let n = u64::from(self.bucket_blocks);
        (self.journal_start() + u64::from(self.journal_blocks)).div_ceil(n) * n
    }

    /// The device block holding slot `slot`.
    pub fn slot_block(&self, slot: u32) -> u64 {
        self.data_start() + u64::from(slot)
    }

    /// Blocks the whole image needs.
    pub fn image_blocks(&self) -> u64 {
        self.data_start() + self.slots()
    }

    /// Records one journal block holds.
    pub fn records_per_block(&self) -> usize {
        (self.block_size as usize - JOURNAL_HEADER) / RECORD
    }

    /// The largest geometry with these block, bucket and journal sizes that
    /// fits in `device_bytes` (fewer buckets as the checkpoint grows), or
    /// `None` when not even two buckets fit. `journal_blocks == 0` picks
    /// one: a 64th of the slots, 64 to 16,384 blocks.
    pub fn fit(
        device_bytes: u64,
        block_size: u32,
        bucket_blocks: u32,
        journal_blocks: u32,
        backing_blocks: u64,
    ) -> Option<Self> {
        let b = u64::from(block_size);
        let n = u64::from(bucket_blocks.max(1));
        let device_blocks = device_bytes / b;
        let mut buckets = (device_blocks / n).min(u64::from(u32::MAX / bucket_blocks.max(1)));
        while buckets >= 2 {
            let journal = if journal_blocks == 0 {
                (buckets * n / 64).clamp(64, 16_384) as u32
            } else {
                journal_blocks
            };
            let g = Self {
                block_size,
                bucket_blocks,
                buckets: buckets as u32,
                journal_blocks: journal,
                backing_blocks,
            };
            if g.image_blocks() <= device_blocks {
                return Some(g);
            }
            // Shrink by what the overflow costs, at least one bucket.
            let over = g.image_blocks() - device_blocks;
            buckets = buckets.saturating_sub(over.div_ceil(n).max(1));
        }
        None
    }

    /// Checks the geometry's invariants (invariant 2); the reason names the
    /// field.
    pub fn validate(&self) -> Result<(), FormatError> {
        let invalid = |reason: String| FormatError::Invalid {
            what: "tier geometry (invariant 2)",
            reason,
        };
        if !valid_block_size(self.block_size) {
            return Err(invalid(format!(
                "block_size {} is not a power of two from 512 to 65536",
                self.block_size
            )));
        }
        if self.bucket_blocks < 2 {
            return Err(invalid(format!(
                "bucket_blocks {} is below 2",
                self.bucket_blocks
            )));
        }
        if self.buckets < 2 {
            return Err(invalid(format!("buckets {} is below 2", self.buckets)));
        }
        if self.journal_blocks < 4 {
            return Err(invalid(format!(
                "journal_blocks {} is below 4",
                self.journal_blocks
            )));
        }
        if self.slots() >= 1 << 31 {
            return Err(invalid(format!(
                "{} slots: at most 2^31 - 1 (8 TiB of 4 KiB blocks)",
                self.slots()
            )));
        }
        if self.backing_blocks == 0 || self.backing_blocks > WORD_BLOCK {
            return Err(invalid(format!(
                "backing_blocks {} is outside 1..=2^62-1",
                self.backing_blocks
            )));
        }
        Ok(())
    }
}

/// The superblock: the geometry and the cache's identity. Written once, at
/// format, last (so an interrupted format has none).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Superblock {
    /// The geometry.
    pub geometry: Geometry,
    /// Random at format; every checkpoint and journal block names it.
    pub cache_id: u64,
}

/// Encodes the superblock into one block.
pub fn encode_superblock(sb: &Superblock) -> Vec<u8> {
    let g = &sb.geometry;
    let size = g.block_size as usize;
    let mut b = vec![0u8; size];
    b[..8].copy_from_slice(&SUPERBLOCK_MAGIC);
    put_u32(&mut b, 8, VERSION);
    put_u32(&mut b, 12, g.block_size);
    put_u32(&mut b, 16, g.bucket_blocks);
    put_u32(&mut b, 20, g.buckets);
    put_u32(&mut b, 24, g.journal_blocks);
    put_u64(&mut b, 32, g.backing_blocks);
    put_u64(&mut b, 40, sb.cache_id);
    put_u64(&mut b, 48, g.data_start());
    seal(&mut b, size - 4);
    strict_assert!(reserved_zero(&b, [28..32, 56..size - 4]));
    strict_assert_eq!(decode_superblock(&b).as_ref(), Ok(sb));
    b
}

/// Decodes a superblock block (invariants 1 and 2).
pub fn decode_superblock(b: &[u8]) -> Result<Superblock, FormatError> {
    const WHAT: &str = "tier superblock";
    if b.len() < 512 {
        return Err(FormatError::Size {
            what: WHAT,
            got: b.len(),
            want: 512,
        });
    }
    let block_size = u32_at(b, 12);
    let size = if valid_block_size(block_size) {
        block_size as usize
    } else {
        b.len()
    };
    check(WHAT, b, size, (SUPERBLOCK_MAGIC, VERSION), size - 4)?;
    let geometry = Geometry {
        block_size,
        bucket_blocks: u32_at(b, 16),
        buckets: u32_at(b, 20),
        journal_blocks: u32_at(b, 24),
        backing_blocks: u64_at(b, 32),
    };
    geometry.validate()?;
    if u64_at(b, 40) == 0 {
        return Err(FormatError::Invalid {
            what: WHAT,
            reason: "cache id 0 (a format writes a nonzero one)".into(),
        });
    }
    if u64_at(b, 48) != geometry.data_start() {
        return Err(FormatError::Invalid {
            what: WHAT,
            reason: format!(
                "data start {} does not follow from the geometry ({})",
                u64_at(b, 48),
                geometry.data_start()
            ),
        });
    }
    if !reserved_zero(b, [28..32, 56..size - 4]) {
        return Err(FormatError::Invalid {
            what: WHAT,
            reason: "reserved bytes are not zero".into(),
        });
    }
    Ok(Superblock {
        geometry,
        cache_id: u64_at(b, 40),
    })
}

/// The cache mode a checkpoint last recorded (what the tier ran in).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Writes go to the cache and the backing device; done when both are.
    WriteThrough,
    /// Writes go to the cache only; a cleaner writes them back later.
    WriteBack,
    /// Writes go to the backing device only, dropping cached copies; reads
    /// are cached.
    WriteAround,
    /// Nothing is cached; cached copies of written blocks are dropped, and
    /// dirty blocks are still read from the cache until cleaned.
    PassThrough,
}

impl Mode {
    /// Every mode, in `code` order.
    pub const ALL: [Mode; 4] = [
        Mode::WriteThrough,
        Mode::WriteBack,
        Mode::WriteAround,
        Mode::PassThrough,
    ];

    /// The byte a checkpoint stores.
    pub fn code(self) -> u8 {
        match self {
            Mode::WriteThrough => 0,
            Mode::WriteBack => 1,
            Mode::WriteAround => 2,
            Mode::PassThrough => 3,
        }
    }

    /// The mode of a stored byte.
    pub fn from_code(code: u8) -> Option<Self> {
        Self::ALL.get(usize::from(code)).copied()
    }

    /// The spec's name (`write-back`).
    pub fn name(self) -> &'static str {
        match self {
            Mode::WriteThrough => "write-through",
            Mode::WriteBack => "write-back",
            Mode::WriteAround => "write-around",
            Mode::PassThrough => "pass-through",
        }
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A checkpoint's flags: the tier stopped cleanly (nothing in the journal
/// after it).
pub const FLAG_CLEAN: u8 = 1;
/// A checkpoint's flags: the cache was detached (or failed over to
/// pass-through): its contents are not to be trusted, and the next open
/// formats it afresh.
pub const FLAG_DETACHED: u8 = 2;

/// One slot's entry in a checkpoint (and in the tier's slot table).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SlotEntry {
    /// [`WORD_VALID`] | [`WORD_DIRTY`] | backing block; 0 = empty.
    pub word: u64,
    /// CRC32C of the cached data.
    pub crc: u32,
    /// When the block was last used (a coarse clock), for warm restarts.
    pub stamp: u32,
}

/// A checkpoint: every slot's entry as of journal sequence `replay_from`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Checkpoint {
    /// Higher is newer; the two slots alternate.
    pub number: u64,
    /// The first journal sequence not in this checkpoint: replay starts here.
    pub replay_from: u64,
    /// The cache's identity (the superblock's).
    pub cache_id: u64,
    /// The mode the tier was in.
    pub mode: Mode,
    /// [`FLAG_CLEAN`], [`FLAG_DETACHED`].
    pub flags: u8,
    /// One entry per slot.
    pub slots: Vec<SlotEntry>,
}

/// Encodes a checkpoint into `b` (exactly [`Geometry::checkpoint_blocks`]
/// blocks long), from a header and slot entries given in order.
pub fn encode_checkpoint_into(b: &mut [u8], c: &Checkpoint) {
    b.fill(0);
    b[..8].copy_from_slice(&CHECKPOINT_MAGIC);
    put_u32(b, 8, VERSION);
    put_u64(b, 16, c.number);
    put_u64(b, 24, c.replay_from);
    put_u64(b, 32, c.cache_id);
    put_u32(b, 40, c.slots.len() as u32);
    b[44] = c.mode.code();
    b[45] = c.flags;
    for (i, e) in c.slots.iter().enumerate() {
        let at = CHECKPOINT_HEADER + i * SLOT_ENTRY;
        put_u64(b, at, e.word);
        put_u32(b, at + 8, e.crc);
        put_u32(b, at + 12, e.stamp);
    }
    seal(b, 12);
    strict_assert!(reserved_zero(b, std::iter::once(46..64)));
    if CHECKED {
        let back = decode_checkpoint(b, c.slots.len() as u64, c.cache_id, u64::MAX);
        strict_assert_eq!(back.as_ref(), Ok(c));
    }
}

/// Decodes a checkpoint slot (invariants 1 and 3) of a device with `slots`
/// slots, cache `cache_id`, and `backing_blocks` keys.
pub fn decode_checkpoint(
    b: &[u8],
    slots: u64,
    cache_id: u64,
    backing_blocks: u64,
) -> Result<Checkpoint, FormatError> {
    const WHAT: &str = "tier checkpoint";
    let invalid = |reason: String| FormatError::Invalid {
        what: WHAT,
        reason: format!("invariant 3: {reason}"),
    };
    let want = CHECKPOINT_HEADER as u64 + slots * SLOT_ENTRY as u64;
    if (b.len() as u64) < want {
        return Err(FormatError::Size {
            what: WHAT,
            got: b.len(),
            want: want as usize,
        });
    }
    check(WHAT, b, b.len(), (CHECKPOINT_MAGIC, VERSION), 12)?;
    if u64_at(b, 32) != cache_id {
        return Err(invalid(format!(
            "names cache {:016x}, the superblock {cache_id:016x}",
            u64_at(b, 32)
        )));
    }
    if u64::from(u32_at(b, 40)) != slots {
        return Err(invalid(format!(
            "{} slots, the superblock says {slots}",
            u32_at(b, 40)
        )));
    }
    let mode = Mode::from_code(b[44]).ok_or_else(|| invalid(format!("mode {}", b[44])))?;
    if u64_at(b, 24) == 0 {
        return Err(invalid(
            "replay starts at journal sequence 0 (sequences start at 1)".into(),
        ));
    }
    if b[45] & !(FLAG_CLEAN | FLAG_DETACHED) != 0 || !reserved_zero(b, std::iter::once(46..64)) {
        return Err(invalid("reserved bits are not zero".into()));
    }
    let mut entries = Vec::with_capacity(slots as usize);
    let mut seen = hashbrown::HashSet::with_capacity(slots as usize / 4);
    for i in 0..slots as usize {
        let at = CHECKPOINT_HEADER + i * SLOT_ENTRY;
        let e = SlotEntry {
            word: u64_at(b, at),
            crc: u32_at(b, at + 8),
            stamp: u32_at(b, at + 12),
        };
        if e.word & WORD_VALID == 0 {
            if e != SlotEntry::default() {
                return Err(invalid(format!("empty slot {i} has bytes set")));
            }
        } else {
            let block = e.word & WORD_BLOCK;
            if block >= backing_blocks {
                return Err(invalid(format!(
                    "slot {i} holds block {block}, past the backing device's {backing_blocks}"
                )));
            }
            if !seen.insert(block) {
                return Err(invalid(format!(
                    "block {block} is held by two slots (the second is {i})"
                )));
            }
        }
        entries.push(e);
    }
    if !reserved_zero(b, std::iter::once(want as usize..b.len())) {
        return Err(invalid(
            "bytes past the last slot entry are not zero".into(),
        ));
    }
    Ok(Checkpoint {
        number: u64_at(b, 16),
        replay_from: u64_at(b, 24),
        cache_id,
        mode,
        flags: b[45],
        slots: entries,
    })
}

/// What a journal record says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Record {
    /// `slot` now holds backing block `block` (whatever it held before, and
    /// wherever `block` was before, is superseded); its data has CRC32C
    /// `crc`; `dirty` when the backing device may not hold it.
    Map {
        /// The slot.
        slot: u32,
        /// The backing block.
        block: u64,
        /// The data's CRC32C.
        crc: u32,
        /// Not (durably) on the backing device.
        dirty: bool,
    },
    /// The backing device now durably holds what `slot` holds for `block`.
    Clean {
        /// The slot.
        slot: u32,
        /// The backing block.
        block: u64,
    },
    /// `slot` no longer holds `block` (evicted or invalidated).
    Drop {
        /// The slot.
        slot: u32,
        /// The backing block.
        block: u64,
    },
}

impl Record {
    /// The slot the record is about.
    pub fn slot(&self) -> u32 {
        match *self {
            Record::Map { slot, .. } | Record::Clean { slot, .. } | Record::Drop { slot, .. } => {
                slot
            }
        }
    }

    /// The backing block the record is about.
    pub fn block(&self) -> u64 {
        match *self {
            Record::Map { block, .. }
            | Record::Clean { block, .. }
            | Record::Drop { block, .. } => block,
        }
    }
}

/// Encodes one record into 32 bytes.
pub fn encode_record(r: &Record, b: &mut [u8]) {
    b[..RECORD].fill(0);
    let (kind, flags) = match *r {
        Record::Map { dirty, .. } => (1u8, u8::from(dirty)),
        Record::Clean { .. } => (2, 0),
        Record::Drop { .. } => (3, 0),
    };
    b[0] = kind;
    b[1] = flags;
    put_u32(b, 4, r.slot());
    put_u64(b, 8, r.block());
    if let Record::Map { crc, .. } = *r {
        put_u32(b, 16, crc);
    }
}

/// Decodes one record (invariant 4), checking its slot and block against
/// the geometry.
pub fn decode_record(b: &[u8], slots: u64, backing_blocks: u64) -> Result<Record, String> {
    if b.len() < RECORD {
        return Err(format!("{} bytes, expected {RECORD}", b.len()));
    }
    let slot = u32_at(b, 4);
    let block = u64_at(b, 8);
    if u64::from(slot) >= slots {
        return Err(format!("slot {slot} is past the {slots} slots"));
    }
    if block >= backing_blocks {
        return Err(format!(
            "block {block} is past the backing device's {backing_blocks}"
        ));
    }
    let map_reserved = [2..4, 20..RECORD];
    let other_reserved = [1..4, 16..RECORD];
    match b[0] {
        1 if b[1] <= 1 && reserved_zero(b, map_reserved) => Ok(Record::Map {
            slot,
            block,
            crc: u32_at(b, 16),
            dirty: b[1] == 1,
        }),
        2 if reserved_zero(b, other_reserved.clone()) => Ok(Record::Clean { slot, block }),
        3 if reserved_zero(b, other_reserved) => Ok(Record::Drop { slot, block }),
        1..=3 => Err("reserved bits are not zero".into()),
        kind => Err(format!("unknown record kind {kind}")),
    }
}

/// A journal block's header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JournalHeader {
    /// This block's sequence (its ring position is `seq % J`).
    pub seq: u64,
    /// Every journal block up to this sequence was durable when this block
    /// was written: the data its records name is durable too.
    pub flushed_through: u64,
    /// The cache's identity.
    pub cache_id: u64,
    /// Records in the block.
    pub records: u16,
}

/// Writes a journal block's header into `b` (one block, records already in
/// place after the header) and seals it.
pub fn seal_journal_block(b: &mut [u8], h: &JournalHeader) {
    b[..8].copy_from_slice(&JOURNAL_MAGIC);
    put_u32(b, 8, VERSION);
    put_u64(b, 16, h.seq);
    put_u64(b, 24, h.flushed_through);
    put_u64(b, 32, h.cache_id);
    b[40..42].copy_from_slice(&h.records.to_le_bytes());
    b[42..48].fill(0);
    seal(b, 12);
}

/// Decodes a journal block (invariants 1 and 4): its header and records.
pub fn decode_journal_block(
    b: &[u8],
    cache_id: u64,
    slots: u64,
    backing_blocks: u64,
    records: &mut Vec<Record>,
) -> Result<JournalHeader, FormatError> {
    const WHAT: &str = "tier journal block";
    let invalid = |reason: String| FormatError::Invalid {
        what: WHAT,
        reason: format!("invariant 4: {reason}"),
    };
    if b.len() < JOURNAL_HEADER {
        return Err(FormatError::Size {
            what: WHAT,
            got: b.len(),
            want: JOURNAL_HEADER,
        });
    }
    check(WHAT, b, b.len(), (JOURNAL_MAGIC, VERSION), 12)?;
    let h = JournalHeader {
        seq: u64_at(b, 16),
        flushed_through: u64_at(b, 24),
        cache_id: u64_at(b, 32),
        records: u16::from_le_bytes([b[40], b[41]]),
    };
    if h.cache_id != cache_id {
        return Err(invalid(format!(
            "names cache {:016x}, not {cache_id:016x}",
            h.cache_id
        )));
    }
    let capacity = b.len().saturating_sub(JOURNAL_HEADER) / RECORD;
    if usize::from(h.records) > capacity {
        return Err(invalid(format!(
            "{} records, a block holds {capacity}",
            h.records
        )));
    }
    if h.flushed_through >= h.seq {
        return Err(invalid(format!(
            "flushed through {} is not below its sequence {}",
            h.flushed_through, h.seq
        )));
    }
    let end = JOURNAL_HEADER + usize::from(h.records) * RECORD;
    if !reserved_zero(b, [42..48, end..b.len()]) {
        return Err(invalid("reserved bytes are not zero".into()));
    }
    records.clear();
    for (i, r) in b[JOURNAL_HEADER..end].chunks_exact(RECORD).enumerate() {
        records.push(
            decode_record(r, slots, backing_blocks)
                .map_err(|e| invalid(format!("record {i}: {e}")))?,
        );
    }
    Ok(h)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn geometry() -> Geometry {
        Geometry {
            block_size: 512,
            bucket_blocks: 4,
            buckets: 6,
            journal_blocks: 8,
            backing_blocks: 100,
        }
    }

    /// Every single-byte change of `b` fails `decode`.
    fn every_flip_fails(b: &[u8], decode: impl Fn(&[u8]) -> bool) {
        for i in 0..b.len() {
            for bit in [0x01u8, 0x80] {
                let mut c = b.to_vec();
                c[i] ^= bit;
                assert!(
                    !decode(&c),
                    "flipping bit {bit:#x} of byte {i} still decodes"
                );
            }
        }
    }

    #[test]
    fn superblock_round_trips_and_every_flip_is_caught() {
        let sb = Superblock {
            geometry: geometry(),
            cache_id: 0xfeed_beef,
        };
        let b = encode_superblock(&sb);
        assert_eq!(decode_superblock(&b).unwrap(), sb);
        every_flip_fails(&b, |c| decode_superblock(c).is_ok());
    }

    #[test]
    fn layout_is_in_order_and_buckets_are_aligned() {
        let g = geometry();
        assert_eq!(g.checkpoint_blocks(), (64u64 + 24 * 16).div_ceil(512));
        assert_eq!(g.journal_start(), 1 + 2 * g.checkpoint_blocks());
        assert!(g.data_start() >= g.journal_start() + 8);
        assert_eq!(g.data_start() % 4, 0);
        assert_eq!(g.image_blocks(), g.data_start() + 24);
        assert_eq!(g.journal_block(8), g.journal_start());
        assert_eq!(g.records_per_block(), (512 - 48) / 32);
    }

    #[test]
    fn fit_takes_the_largest_geometry_the_device_holds() {
        let g = Geometry::fit(64 << 20, 4096, 256, 0, 1 << 20).unwrap();
        assert!(g.image_blocks() * 4096 <= 64 << 20);
        let bigger = Geometry {
            buckets: g.buckets + 1,
            ..g
        };
        assert!(
            bigger.image_blocks() * 4096 > 64 << 20,
            "{g:?} is not the largest"
        );
        assert!(Geometry::fit(4096 * 10, 4096, 256, 0, 100).is_none());
        g.validate().unwrap();
    }

    #[test]
    fn checkpoint_round_trips_and_every_flip_is_caught() {
        let g = geometry();
        let mut slots = vec![SlotEntry::default(); g.slots() as usize];
        slots[3] = SlotEntry {
            word: WORD_VALID + 42,
            crc: 7,
            stamp: 9,
        };
        slots[5] = SlotEntry {
            word: WORD_VALID + WORD_DIRTY + 99,
            crc: 0xdead,
            stamp: 1,
        };
        let c = Checkpoint {
            number: 3,
            replay_from: 17,
            cache_id: 0xabc,
            mode: Mode::WriteBack,
            flags: FLAG_CLEAN,
            slots,
        };
        let mut b = vec![0u8; (g.checkpoint_blocks() * 512) as usize];
        encode_checkpoint_into(&mut b, &c);
        assert_eq!(decode_checkpoint(&b, g.slots(), 0xabc, 100).unwrap(), c);
        every_flip_fails(&b, |x| decode_checkpoint(x, g.slots(), 0xabc, 100).is_ok());
        assert!(decode_checkpoint(&b, g.slots(), 0xabd, 100).is_err());
        assert!(
            decode_checkpoint(&b, g.slots(), 0xabc, 99).is_err(),
            "a block past the backing end is refused"
        );
    }

    #[test]
    fn a_checkpoint_naming_a_block_twice_is_refused() {
        let g = geometry();
        let mut slots = vec![SlotEntry::default(); g.slots() as usize];
        slots[1].word = WORD_VALID + 5;
        slots[2].word = WORD_VALID + 5;
        let c = Checkpoint {
            number: 1,
            replay_from: 1,
            cache_id: 1,
            mode: Mode::WriteThrough,
            flags: 0,
            slots,
        };
        let mut b = vec![0u8; (g.checkpoint_blocks() * 512) as usize];
        // The encoder's paired check would refuse it: build it unchecked.
        b[..8].copy_from_slice(&CHECKPOINT_MAGIC);
        put_u32(&mut b, 8, VERSION);
        put_u64(&mut b, 16, c.number);
        put_u64(&mut b, 24, c.replay_from);
        put_u64(&mut b, 32, c.cache_id);
        put_u32(&mut b, 40, c.slots.len() as u32);
        for (i, e) in c.slots.iter().enumerate() {
            put_u64(&mut b, CHECKPOINT_HEADER + i * SLOT_ENTRY, e.word);
        }
        seal(&mut b, 12);
        let e = decode_checkpoint(&b, g.slots(), 1, 100).unwrap_err();
        assert!(e.to_string().contains("two slots"), "{e}");
    }

    #[test]
    fn journal_block_round_trips_and_every_flip_is_caught() {
        let g = geometry();
        let records = [
            Record::Map {
                slot: 3,
                block: 42,
                crc: 0x1234,
                dirty: true,
            },
            Record::Clean { slot: 3, block: 42 },
            Record::Drop { slot: 0, block: 99 },
        ];
        let mut b = vec![0u8; 512];
        for (i, r) in records.iter().enumerate() {
            encode_record(r, &mut b[JOURNAL_HEADER + i * RECORD..]);
        }
        let h = JournalHeader {
            seq: 12,
            flushed_through: 10,
            cache_id: 0x77,
            records: 3,
        };
        seal_journal_block(&mut b, &h);
        let mut out = Vec::new();
        assert_eq!(
            decode_journal_block(&b, 0x77, g.slots(), 100, &mut out).unwrap(),
            h
        );
        assert_eq!(out, records);
        every_flip_fails(&b, |x| {
            decode_journal_block(x, 0x77, g.slots(), 100, &mut Vec::new()).is_ok()
        });
    }

    #[test]
    fn records_out_of_range_are_refused() {
        let mut b = [0u8; RECORD];
        encode_record(&Record::Drop { slot: 24, block: 1 }, &mut b);
        assert!(decode_record(&b, 24, 100).is_err());
        encode_record(
            &Record::Drop {
                slot: 1,
                block: 100,
            },
            &mut b,
        );
        assert!(decode_record(&b, 24, 100).is_err());
        b[0] = 9;
        assert!(decode_record(&b, 24, 1000).is_err());
    }

    #[test]
    fn modes_round_trip_through_their_codes() {
        for m in Mode::ALL {
            assert_eq!(Mode::from_code(m.code()), Some(m));
        }
        assert_eq!(Mode::from_code(4), None);
    }
}
