//! The object disk's objects: pure, checksummed encode/decode functions and
//! the keys they live under. Byte diagrams: `docs/formats.md` "Object disk".
//!
//! Every structure: an 8-byte magic, a version, a CRC32C over all its bytes
//! (the CRC field taken as zero), all integers little-endian.

use crate::codec::{self, FormatError, put_u32, put_u64, u32_at, u64_at};

const VERSION: u32 = 1;
const VOLUME_MAGIC: [u8; 8] = *b"CAIRNOBV";
const SEGMENT_MAGIC: [u8; 8] = *b"CAIRNOBS";
const CHECKPOINT_MAGIC: [u8; 8] = *b"CAIRNOBC";
const FENCE_MAGIC: [u8; 8] = *b"CAIRNOBF";

/// A segment entry whose block was trimmed while the segment was open:
/// replay skips it.
pub(crate) const VOID: u64 = u64::MAX;

/// Bytes of a volume record.
pub(crate) const VOLUME_BYTES: usize = 64;
/// Bytes of a segment header before its entries.
pub(crate) const SEGMENT_FIXED: usize = 64;
/// Bytes of one segment entry: logical block, CRC32C of its data.
pub(crate) const ENTRY_BYTES: usize = 12;
/// Bytes of one trim record: first block, number of blocks.
pub(crate) const TRIM_BYTES: usize = 16;
/// Bytes of a checkpoint before its entries.
pub(crate) const CHECKPOINT_FIXED: usize = 56;
/// Bytes of one checkpoint entry: block, segment, index, CRC32C.
pub(crate) const MAP_ENTRY_BYTES: usize = 24;
/// Bytes of a fence record.
pub(crate) const FENCE_BYTES: usize = 64;

/// What a volume is: written once, by the first opener.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VolumeRecord {
    /// Bytes a client sees.
    pub size: u64,
    /// Block size, bytes.
    pub block_size: u32,
    /// Data bytes a full segment object holds.
    pub object_size: u32,
    /// Random, so objects of another volume are never taken for ours.
    pub volume_id: u64,
}

impl VolumeRecord {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; VOLUME_BYTES];
        b[..8].copy_from_slice(&VOLUME_MAGIC);
        put_u32(&mut b, 8, VERSION);
        put_u32(&mut b, 12, self.block_size);
        put_u64(&mut b, 16, self.size);
        put_u32(&mut b, 24, self.object_size);
        put_u64(&mut b, 32, self.volume_id);
        codec::seal(&mut b, 28);
        b
    }

    pub(crate) fn decode(b: &[u8]) -> Result<Self, FormatError> {
        const WHAT: &str = "object volume record";
        codec::check(WHAT, b, VOLUME_BYTES, (VOLUME_MAGIC, VERSION), 28)?;
        let r = Self {
            block_size: u32_at(b, 12),
            size: u64_at(b, 16),
            object_size: u32_at(b, 24),
            volume_id: u64_at(b, 32),
        };
        if !codec::valid_block_size(r.block_size)
            || r.object_size < r.block_size
            || !r.object_size.is_multiple_of(r.block_size)
            || !r.size.is_multiple_of(u64::from(r.block_size))
        {
            return Err(FormatError::Invalid {
                what: WHAT,
                reason: format!(
                    "block size {}, object size {}, volume size {} do not fit together",
                    r.block_size, r.object_size, r.size
                ),
            });
        }
        Ok(r)
    }
}

/// A segment object's header: which blocks its data holds, in order, and
/// which ranges it trims.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SegmentHeader {
    pub generation: u64,
    pub sequence: u64,
    pub volume_id: u64,
    pub block_size: u32,
    /// (logical block or [`VOID`], CRC32C of its data), one per data block.
    pub entries: Vec<(u64, u32)>,
    /// (first block, blocks): applied before the entries.
    pub trims: Vec<(u64, u64)>,
}

/// Bytes of the header of a segment with `entries` blocks and `trims`
/// trims: whole blocks.
pub(crate) fn header_len(block_size: u32, entries: usize, trims: usize) -> usize {
    let raw = SEGMENT_FIXED + entries * ENTRY_BYTES + trims * TRIM_BYTES;
    raw.div_ceil(block_size as usize) * block_size as usize
}

impl SegmentHeader {
    /// The header's bytes, `header_len` long.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let len = header_len(self.block_size, self.entries.len(), self.trims.len());
        let mut b = vec![0u8; len];
        b[..8].copy_from_slice(&SEGMENT_MAGIC);
        put_u32(&mut b, 8, VERSION);
        put_u32(&mut b, 12, self.block_size);
        put_u64(&mut b, 16, self.generation);
        put_u64(&mut b, 24, self.sequence);
        put_u64(&mut b, 32, self.volume_id);
        put_u32(&mut b, 40, self.entries.len() as u32);
        put_u32(&mut b, 44, self.trims.len() as u32);
        put_u32(&mut b, 48, len as u32);
        let mut at = SEGMENT_FIXED;
        for &(block, crc) in &self.entries {
            put_u64(&mut b, at, block);
            put_u32(&mut b, at + 8, crc);
            at += ENTRY_BYTES;
        }
        for &(first, blocks) in &self.trims {
            put_u64(&mut b, at, first);
            put_u64(&mut b, at + 8, blocks);
            at += TRIM_BYTES;
        }
        codec::seal(&mut b, 52);
        b
    }

    /// The header's length from its first bytes (at least
    /// [`SEGMENT_FIXED`]), to know how much to read.
    pub(crate) fn peek_len(b: &[u8]) -> Result<usize, FormatError> {
        const WHAT: &str = "segment header";
        if b.len() < SEGMENT_FIXED || b[..8] != SEGMENT_MAGIC {
            return Err(FormatError::Invalid {
                what: WHAT,
                reason: format!("{} bytes that do not start a segment", b.len()),
            });
        }
        Ok(u32_at(b, 48) as usize)
    }

    /// A header from exactly its bytes.
    pub(crate) fn decode(b: &[u8]) -> Result<Self, FormatError> {
        const WHAT: &str = "segment header";
        let want = Self::peek_len(b)?;
        codec::check(WHAT, b, want, (SEGMENT_MAGIC, VERSION), 52)?;
        let block_size = u32_at(b, 12);
        let count = u32_at(b, 40) as usize;
        let trims = u32_at(b, 44) as usize;
        if !codec::valid_block_size(block_size) || header_len(block_size, count, trims) != want {
            return Err(FormatError::Invalid {
                what: WHAT,
                reason: format!("{count} entries and {trims} trims do not fill {want} bytes"),
            });
        }
        let mut at = SEGMENT_FIXED;
        let mut entries = Vec::with_capacity(count);
        for _ in 0..count {
            entries.push((u64_at(b, at), u32_at(b, at + 8)));
            at += ENTRY_BYTES;
        }
        let mut trim_list = Vec::with_capacity(trims);
        for _ in 0..trims {
            trim_list.push((u64_at(b, at), u64_at(b, at + 8)));
            at += TRIM_BYTES;
        }
        Ok(Self {
            generation: u64_at(b, 16),
            sequence: u64_at(b, 24),
            volume_id: u64_at(b, 32),
            block_size,
            entries,
            trims: trim_list,
        })
    }
}

/// One mapped block in a checkpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct MapEntry {
    pub block: u64,
    pub sequence: u64,
    pub index: u32,
    pub crc: u32,
}

/// A segment a checkpoint's map points into.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SegmentEntry {
    pub sequence: u64,
    pub generation: u64,
    /// Bytes before its data.
    pub header_len: u32,
    /// Data blocks it holds (live or not).
    pub blocks: u32,
}

/// Bytes of one checkpoint segment entry.
pub(crate) const SEGMENT_ENTRY_BYTES: usize = 24;

/// A checkpoint: the whole block map as of segment `sequence`, and the
/// segments it points into.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Checkpoint {
    pub generation: u64,
    pub sequence: u64,
    pub volume_id: u64,
    pub block_size: u32,
    pub entries: Vec<MapEntry>,
    pub segments: Vec<SegmentEntry>,
}

impl Checkpoint {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut b = vec![
            0u8;
            CHECKPOINT_FIXED
                + self.entries.len() * MAP_ENTRY_BYTES
                + self.segments.len() * SEGMENT_ENTRY_BYTES
        ];
        b[..8].copy_from_slice(&CHECKPOINT_MAGIC);
        put_u32(&mut b, 8, VERSION);
        put_u32(&mut b, 12, self.block_size);
        put_u64(&mut b, 16, self.generation);
        put_u64(&mut b, 24, self.sequence);
        put_u64(&mut b, 32, self.volume_id);
        put_u64(&mut b, 40, self.entries.len() as u64);
        put_u32(&mut b, 52, self.segments.len() as u32);
        let mut at = CHECKPOINT_FIXED;
        for e in &self.entries {
            put_u64(&mut b, at, e.block);
            put_u64(&mut b, at + 8, e.sequence);
            put_u32(&mut b, at + 16, e.index);
            put_u32(&mut b, at + 20, e.crc);
            at += MAP_ENTRY_BYTES;
        }
        for s in &self.segments {
            put_u64(&mut b, at, s.sequence);
            put_u64(&mut b, at + 8, s.generation);
            put_u32(&mut b, at + 16, s.header_len);
            put_u32(&mut b, at + 20, s.blocks);
            at += SEGMENT_ENTRY_BYTES;
        }
        codec::seal(&mut b, 48);
        b
    }

    pub(crate) fn decode(b: &[u8]) -> Result<Self, FormatError> {
        const WHAT: &str = "object checkpoint";
        if b.len() < CHECKPOINT_FIXED {
            return Err(FormatError::Size {
                what: WHAT,
                got: b.len(),
                want: CHECKPOINT_FIXED,
            });
        }
        let count = u64_at(b, 40);
        let segments = u32_at(b, 52) as usize;
        let want = usize::try_from(count)
            .ok()
            .and_then(|c| c.checked_mul(MAP_ENTRY_BYTES))
            .and_then(|n| n.checked_add(CHECKPOINT_FIXED + segments * SEGMENT_ENTRY_BYTES))
            .ok_or_else(|| FormatError::Invalid {
                what: WHAT,
                reason: format!("{count} entries"),
            })?;
        codec::check(WHAT, b, want, (CHECKPOINT_MAGIC, VERSION), 48)?;
        let mut entries = Vec::with_capacity(count as usize);
        let mut at = CHECKPOINT_FIXED;
        for _ in 0..count {
            entries.push(MapEntry {
                block: u64_at(b, at),
                sequence: u64_at(b, at + 8),
                index: u32_at(b, at + 16),
                crc: u32_at(b, at + 20),
            });
            at += MAP_ENTRY_BYTES;
        }
        let mut segs = Vec::with_capacity(segments);
        for _ in 0..segments {
            segs.push(SegmentEntry {
                sequence: u64_at(b, at),
                generation: u64_at(b, at + 8),
                header_len: u32_at(b, at + 16),
                blocks: u32_at(b, at + 20),
            });
            at += SEGMENT_ENTRY_BYTES;
        }
        Ok(Self {
            generation: u64_at(b, 16),
            sequence: u64_at(b, 24),
            volume_id: u64_at(b, 32),
            block_size: u32_at(b, 12),
            entries,
            segments: segs,
        })
    }
}

/// What a generation found when it began: the last segment of the
/// generations before it that it accepted. Their later segments are void.
/// A generation that begins by writing again what a local write log of
/// generation `replay_of` holds says so, and from which segment on
/// (`replay_base`): a later start that finds the same log unfinished
/// replays it from there again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Fence {
    pub generation: u64,
    pub upto: u64,
    pub volume_id: u64,
    /// 0: none.
    pub replay_of: u64,
    pub replay_base: u64,
}

impl Fence {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; FENCE_BYTES];
        b[..8].copy_from_slice(&FENCE_MAGIC);
        put_u32(&mut b, 8, VERSION);
        put_u64(&mut b, 16, self.generation);
        put_u64(&mut b, 24, self.upto);
        put_u64(&mut b, 32, self.volume_id);
        put_u64(&mut b, 40, self.replay_of);
        put_u64(&mut b, 48, self.replay_base);
        codec::seal(&mut b, 12);
        b
    }

    pub(crate) fn decode(b: &[u8]) -> Result<Self, FormatError> {
        codec::check("fence record", b, FENCE_BYTES, (FENCE_MAGIC, VERSION), 12)?;
        Ok(Self {
            generation: u64_at(b, 16),
            upto: u64_at(b, 24),
            volume_id: u64_at(b, 32),
            replay_of: u64_at(b, 40),
            replay_base: u64_at(b, 48),
        })
    }
}

/// The keys of a volume's objects under its prefix.
#[derive(Clone, Debug)]
pub(crate) struct Keys {
    pub prefix: String,
}

impl Keys {
    pub(crate) fn volume(&self) -> String {
        format!("{}volume", self.prefix)
    }
    pub(crate) fn segments(&self) -> String {
        format!("{}seg/", self.prefix)
    }
    pub(crate) fn segment(&self, sequence: u64, generation: u64) -> String {
        format!("{}seg/{sequence:016x}-{generation:016x}", self.prefix)
    }
    pub(crate) fn checkpoints(&self) -> String {
        format!("{}ckpt/", self.prefix)
    }
    pub(crate) fn checkpoint(&self, sequence: u64, generation: u64) -> String {
        format!("{}ckpt/{sequence:016x}-{generation:016x}", self.prefix)
    }
    pub(crate) fn fences(&self) -> String {
        format!("{}fence/", self.prefix)
    }
    pub(crate) fn fence(&self, generation: u64) -> String {
        format!("{}fence/{generation:016x}", self.prefix)
    }
    pub(crate) fn readers(&self) -> String {
        format!("{}readers/", self.prefix)
    }
    pub(crate) fn reader(&self, id: u64) -> String {
        format!("{}readers/{id:016x}", self.prefix)
    }
}

/// `(sequence, generation)` from a segment's or checkpoint's key below its
/// directory, or `None` for a key that is not one.
pub(crate) fn parse_numbered(name: &str) -> Option<(u64, u64)> {
    let (s, g) = name.split_once('-')?;
    if s.len() != 16 || g.len() != 16 {
        return None;
    }
    Some((
        u64::from_str_radix(s, 16).ok()?,
        u64::from_str_radix(g, 16).ok()?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    type Fails = fn(&[u8]) -> bool;

    #[test]
    fn structures_round_trip_and_every_flipped_byte_is_caught() {
        let vol = VolumeRecord {
            size: 1 << 30,
            block_size: 4096,
            object_size: 8 << 20,
            volume_id: 42,
        };
        let seg = SegmentHeader {
            generation: 3,
            sequence: 99,
            volume_id: 42,
            block_size: 4096,
            entries: vec![(7, 0xabc), (VOID, 1), (9, 2)],
            trims: vec![(100, 8)],
        };
        let ckpt = Checkpoint {
            generation: 3,
            sequence: 99,
            volume_id: 42,
            block_size: 4096,
            entries: vec![MapEntry {
                block: 7,
                sequence: 98,
                index: 5,
                crc: 0xfeed,
            }],
            segments: vec![SegmentEntry {
                sequence: 98,
                generation: 3,
                header_len: 4096,
                blocks: 6,
            }],
        };
        let fence = Fence {
            generation: 4,
            upto: 99,
            volume_id: 42,
            replay_of: 3,
            replay_base: 97,
        };
        assert_eq!(VolumeRecord::decode(&vol.encode()), Ok(vol));
        assert_eq!(SegmentHeader::decode(&seg.encode()), Ok(seg.clone()));
        assert_eq!(seg.encode().len(), 4096);
        assert_eq!(Checkpoint::decode(&ckpt.encode()), Ok(ckpt.clone()));
        assert_eq!(Fence::decode(&fence.encode()), Ok(fence));
        let all: [(Vec<u8>, Fails); 4] = [
            (vol.encode(), |b| VolumeRecord::decode(b).is_err()),
            (seg.encode(), |b| SegmentHeader::decode(b).is_err()),
            (ckpt.encode(), |b| Checkpoint::decode(b).is_err()),
            (fence.encode(), |b| Fence::decode(b).is_err()),
        ];
        for (bytes, fails) in all {
            for i in 0..bytes.len() {
                let mut b = bytes.clone();
                b[i] ^= 0x10;
                assert!(
                    fails(&b),
                    "a flip at byte {i} of {:?} went unnoticed",
                    &bytes[..8]
                );
            }
            assert!(fails(&bytes[..bytes.len() - 1]));
        }
    }

    #[test]
    fn keys_sort_by_sequence_and_parse_back() {
        let k = Keys {
            prefix: "v/".into(),
        };
        assert!(k.segment(9, 2) < k.segment(10, 1));
        let name = &k.segment(0x1234, 7)[k.segments().len()..];
        assert_eq!(parse_numbered(name), Some((0x1234, 7)));
        assert_eq!(parse_numbered("junk"), None);
    }
}
