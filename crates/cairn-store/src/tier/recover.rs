//! Recovery: the newest valid checkpoint, then the journal replayed from its
//! sequence while the blocks follow on (each one's sequence the next, its
//! CRC good). A record in a block written after the journal was last known
//! durable names data that may be torn: its CRC is checked against the slot,
//! and a record whose data does not match is skipped (it was never flushed).
//! Recovery holds no tier; it returns an [`Image`] the tier is built from.
//!
//! | found                                       | outcome                                   |
//! |---------------------------------------------|-------------------------------------------|
//! | no valid superblock                         | `TierError::Format` (the caller probed)   |
//! | neither checkpoint slot valid               | `TierError::Format`                       |
//! | a journal block with another sequence, cache id or a bad CRC | replay stops there (the ring's end) |
//! | a `Map` record past `flushed through`, data CRC wrong | skipped, counted as torn          |
//! | a `Clean`/`Drop` naming a slot not holding its block | ignored (superseded)              |

use super::error::TierError;
use super::format::{
    Checkpoint, Geometry, Mode, Record, SlotEntry, Superblock, WORD_BLOCK, WORD_DIRTY, WORD_VALID,
    decode_checkpoint, decode_journal_block, decode_superblock,
};
use crate::codec::crc32c;
use crate::device::{Device, IoBuf, SECTOR};

/// What the last open found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recovered {
    /// The cache device was formatted by this open.
    pub formatted: bool,
    /// It had been detached (or had failed over to pass-through): its
    /// contents were stale, and it was formatted afresh.
    pub dropped_stale: bool,
    /// The last stop was clean: a checkpoint flagged so, nothing after it.
    pub clean: bool,
    /// Journal blocks replayed.
    pub journal_blocks: u64,
    /// Records replayed.
    pub records: u64,
    /// Records skipped because the data they name was torn (never flushed).
    pub torn: u64,
    /// Blocks cached after the open, and how many of them dirty.
    pub cached: u64,
    /// Dirty blocks among them.
    pub dirty: u64,
    /// Blocks the policy did not take back at the open (dropped, or written
    /// back and dropped if dirty).
    pub not_restored: u64,
    /// The mode the tier last ran in, if it was recovered.
    pub last_mode: Option<Mode>,
}

/// A recovered cache device.
pub(super) struct Image {
    pub sb: Superblock,
    pub slots: Vec<SlotEntry>,
    pub mode: Mode,
    pub flags: u8,
    /// The first journal sequence after the last valid block.
    pub next_seq: u64,
    pub checkpoint_number: u64,
    pub recovered: Recovered,
}

/// Reads the superblock; `Ok(None)` when the device does not start with
/// one (not a tier at all).
pub(super) fn read_superblock(cache: &dyn Device) -> Result<Option<Superblock>, TierError> {
    let first_len = cache.alignment().max(SECTOR).min(cache.len()) as usize;
    if first_len < 512 {
        return Ok(None);
    }
    let mut first = IoBuf::zeroed(first_len.max(4096).min(cache.len() as usize));
    cache.read_at(&mut first, 0)?;
    if first[..8] != super::format::SUPERBLOCK_MAGIC {
        return Ok(None);
    }
    let bs = crate::codec::u32_at(&first, 12) as usize;
    if bs > first.len() && bs <= 65_536 && (bs as u64) <= cache.len() {
        first = IoBuf::zeroed(bs);
        cache.read_at(&mut first, 0)?;
    }
    let end = bs.min(first.len());
    decode_superblock(&first[..end])
        .map(Some)
        .map_err(|error| TierError::Format {
            device: cache.describe(),
            error,
        })
}

/// Recovers the image on `cache`, whose superblock is `sb`.
pub(super) fn recover(cache: &dyn Device, sb: Superblock) -> Result<Image, TierError> {
    let g = sb.geometry;
    let b = u64::from(g.block_size);
    if g.image_blocks() * b > cache.len() {
        return Err(TierError::Invalid(format!(
            "the cache device {} is {} bytes; its superblock describes {} bytes (was it shrunk?)",
            cache.describe(),
            cache.len(),
            g.image_blocks() * b
        )));
    }
    let cp = newest_checkpoint(cache, &sb)?;
    let mut image = Image {
        sb,
        slots: cp.slots,
        mode: cp.mode,
        flags: cp.flags,
        next_seq: cp.replay_from,
        checkpoint_number: cp.number,
        recovered: Recovered::default(),
    };
    let blocks = read_journal(cache, &sb, cp.replay_from)?;

    let flushed_through = blocks
        .iter()
        .map(|(h, _)| h.flushed_through)
        .max()
        .unwrap_or(0)
        .max(cp.replay_from - 1);
    let mut map: hashbrown::HashMap<u64, u32> = image
        .slots
        .iter()
        .enumerate()
        .filter(|(_, e)| e.word & WORD_VALID != 0)
        .map(|(s, e)| (e.word & WORD_BLOCK, s as u32))
        .collect();
    let mut stamp = image.slots.iter().map(|e| e.stamp).max().unwrap_or(0);
    let mut data = IoBuf::zeroed(g.block_size as usize);
    for (h, records) in &blocks {
        image.recovered.journal_blocks += 1;
        image.next_seq = h.seq + 1;
        for r in records {
            image.recovered.records += 1;
            if let Record::Map { slot, crc, .. } = *r
                && h.seq > flushed_through
            {
                cache.read_at(&mut data, g.slot_block(slot) * b)?;
                if crc32c(&data) != crc {
                    image.recovered.torn += 1;
                    continue;
                }
            }
            stamp = stamp.wrapping_add(1);
            apply(&mut image.slots, &mut map, r, stamp);
        }
    }
    image.recovered.last_mode = Some(image.mode);
    image.recovered.clean = cp.flags & super::format::FLAG_CLEAN != 0 && blocks.is_empty();
    Ok(image)
}

/// The valid checkpoint with the higher number.
fn newest_checkpoint(cache: &dyn Device, sb: &Superblock) -> Result<Checkpoint, TierError> {
    let g = &sb.geometry;
    let len = (g.checkpoint_blocks() * u64::from(g.block_size)) as usize;
    let mut buf = IoBuf::zeroed(len);
    let mut best: Option<Checkpoint> = None;
    let mut last_error = None;
    for which in 0..2 {
        cache.read_at(
            &mut buf,
            g.checkpoint_start(which) * u64::from(g.block_size),
        )?;
        match decode_checkpoint(&buf, g.slots(), sb.cache_id, g.backing_blocks) {
            Ok(c) if best.as_ref().is_none_or(|b| c.number > b.number) => best = Some(c),
            Ok(_) => {}
            Err(e) => last_error = Some(e),
        }
    }
    best.ok_or_else(|| TierError::Format {
        device: cache.describe(),
        error: last_error.unwrap_or(crate::codec::FormatError::Invalid {
            what: "tier checkpoint",
            reason: "no valid checkpoint".into(),
        }),
    })
}

/// The journal blocks from `from` on while each is the next.
fn read_journal(
    cache: &dyn Device,
    sb: &Superblock,
    from: u64,
) -> Result<Vec<(super::format::JournalHeader, Vec<Record>)>, TierError> {
    let g = &sb.geometry;
    let mut buf = IoBuf::zeroed(g.block_size as usize);
    let mut out = Vec::new();
    for seq in (from..).take(g.journal_blocks as usize) {
        cache.read_at(&mut buf, g.journal_block(seq) * u64::from(g.block_size))?;
        let mut records = Vec::new();
        match decode_journal_block(&buf, sb.cache_id, g.slots(), g.backing_blocks, &mut records) {
            Ok(h) if h.seq == seq => out.push((h, records)),
            _ => break,
        }
    }
    Ok(out)
}

/// Applies one record to the slot table and the block map.
fn apply(slots: &mut [SlotEntry], map: &mut hashbrown::HashMap<u64, u32>, r: &Record, stamp: u32) {
    let holds = |slots: &[SlotEntry], slot: u32, block: u64| {
        let w = slots[slot as usize].word;
        w & WORD_VALID != 0 && w & WORD_BLOCK == block
    };
    match *r {
        Record::Map {
            slot,
            block,
            crc,
            dirty,
        } => {
            if let Some(old) = map.insert(block, slot)
                && old != slot
            {
                slots[old as usize] = SlotEntry::default();
            }
            let was = slots[slot as usize].word;
            if was & WORD_VALID != 0 && was & WORD_BLOCK != block {
                map.remove(&(was & WORD_BLOCK));
            }
            slots[slot as usize] = SlotEntry {
                word: WORD_VALID | if dirty { WORD_DIRTY } else { 0 } | block,
                crc,
                stamp,
            };
        }
        Record::Clean { slot, block } => {
            if holds(slots, slot, block) {
                slots[slot as usize].word &= !WORD_DIRTY;
            }
        }
        Record::Drop { slot, block } => {
            if holds(slots, slot, block) {
                slots[slot as usize] = SlotEntry::default();
                map.remove(&block);
            }
        }
    }
}

/// A fresh image of geometry `g` (nothing cached).
pub(super) fn fresh(g: Geometry, cache_id: u64, mode: Mode) -> Image {
    Image {
        sb: Superblock {
            geometry: g,
            cache_id,
        },
        slots: vec![SlotEntry::default(); g.slots() as usize],
        mode,
        flags: 0,
        next_seq: 1,
        checkpoint_number: 2,
        recovered: Recovered {
            formatted: true,
            ..Recovered::default()
        },
    }
}
