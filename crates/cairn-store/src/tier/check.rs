//! `fsck` and `inspect` for flash-tier cache devices: read-only, over any
//! [`Device`]; [`fsck`] and [`inspect`] open an image file read-only and take
//! no lock on it (`cairn fsck` says when someone holds one).
//!
//! [`examine`] decodes the superblock and both checkpoint slots, reads the
//! whole journal ring, and runs recovery itself (`recover::recover`) for
//! the slot table the next open would start from. Around that it checks what
//! recovery takes on trust or stops at without a word:
//!
//! - a checkpoint slot that does not decode while the other does (recovery
//!   falls back to the older one), slots holding the wrong parity of number,
//!   a newer checkpoint replaying from before an older one;
//! - a journal block with a good checksum and this cache's id that fails its
//!   field checks (recovery takes it for the end of the journal and drops
//!   its records and everything after it), a block away from its ring
//!   position, and a chain that ends at a block which a later block of the
//!   same run says was durable (records lost, not torn);
//! - after replay: every cached block's data against its CRC32C (a dirty one
//!   that fails is data lost), no backing block in two slots.
//!
//! Each problem is reported with where it is; nothing is repaired.

use std::fmt;
use std::path::Path;

use super::error::TierError;
use super::format::{
    self, FLAG_CLEAN, FLAG_DETACHED, Mode, Record, SlotEntry, Superblock, WORD_BLOCK, WORD_DIRTY,
    WORD_VALID,
};
use super::recover;
use crate::codec::{FormatError, crc32c, u64_at};
use crate::device::{Device, FileDevice, FileOptions, IoBuf};

/// A checkpoint slot's header, as decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CheckpointInfo {
    /// Its number (higher is newer).
    pub number: u64,
    /// The first journal sequence not in it: replay starts there.
    pub replay_from: u64,
    /// The mode the tier ran in.
    pub mode: Mode,
    /// [`FLAG_CLEAN`], [`FLAG_DETACHED`].
    pub flags: u8,
}

impl fmt::Display for CheckpointInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "#{} replaying from {}, {}",
            self.number, self.replay_from, self.mode
        )?;
        if self.flags & FLAG_CLEAN != 0 {
            write!(f, ", clean stop")?;
        }
        if self.flags & FLAG_DETACHED != 0 {
            write!(f, ", detached")?;
        }
        Ok(())
    }
}

/// The journal after the checkpoint in use, as recovery replays it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JournalInfo {
    /// Blocks that chain on from the checkpoint's replay point.
    pub blocks: u64,
    /// Records in them by kind: `Map`, `Clean`, `Drop`.
    pub records: [u64; 3],
    /// `Map` records recovery skips: written after the journal was last
    /// durable, and the data they name fails their CRC (never acknowledged
    /// as durable; a crash's normal outcome).
    pub torn: u64,
    /// The first sequence not in the chain.
    pub end: u64,
    /// What the ring holds where that sequence belongs.
    pub end_reason: String,
    /// Blocks of this cache after the end with sequences of the same run
    /// (written after the last journal flush; not replayed).
    pub beyond: u64,
}

/// What [`examine`] found.
#[derive(Debug, Clone)]
pub struct Report {
    /// The superblock.
    pub superblock: Superblock,
    /// Bytes of the device (or image file) examined.
    pub device_bytes: u64,
    /// Checkpoint slots A and B: decoded, or why not.
    pub slots: [Result<CheckpointInfo, String>; 2],
    /// The slot in use (0 = A, 1 = B): the valid one with the larger number.
    pub in_use: usize,
    /// The checkpoint in use.
    pub checkpoint: CheckpointInfo,
    /// The journal replayed after it.
    pub journal: JournalInfo,
    /// Blocks cached after recovery.
    pub cached: u64,
    /// Dirty blocks among them (only the cache device holds their data).
    pub dirty: u64,
    /// Live (cached) blocks per bucket, after recovery.
    pub live: Vec<u32>,
    /// Every inconsistency, one line each; empty when the image is clean.
    pub problems: Vec<String>,
}

impl Report {
    /// Whether no problem was found.
    pub fn is_clean(&self) -> bool {
        self.problems.is_empty()
    }
}

const SLOT_NAMES: [&str; 2] = ["A", "B"];

impl Report {
    /// The journal's lines of the description.
    fn fmt_journal(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let journal = &self.journal;
        let indent = "                ";
        writeln!(
            f,
            "  journal        {} blocks in the ring; {} chain on from sequence {} \
             ({} map, {} clean, {} drop records; {} torn, skipped)",
            self.superblock.geometry.journal_blocks,
            journal.blocks,
            self.checkpoint.replay_from,
            journal.records[0],
            journal.records[1],
            journal.records[2],
            journal.torn
        )?;
        writeln!(
            f,
            "{indent} ends at sequence {}: {}",
            journal.end, journal.end_reason
        )?;
        if journal.beyond > 0 {
            writeln!(
                f,
                "{indent} {} later blocks of the same run after the end (written after the last \
                 journal flush; not replayed)",
                journal.beyond
            )?;
        }
        if self.checkpoint.flags & FLAG_CLEAN != 0 && journal.blocks > 0 {
            writeln!(
                f,
                "{indent} the checkpoint is flagged clean, yet journal blocks follow it (the stop \
                 was not clean)"
            )?;
        }
        Ok(())
    }

    /// The cached blocks' and the buckets' lines.
    fn fmt_table(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let geometry = &self.superblock.geometry;
        writeln!(
            f,
            "  cached         {} blocks ({:.3} of the slots), {} dirty",
            self.cached,
            self.cached as f64 / geometry.slots() as f64,
            self.dirty
        )?;
        let per_bucket = geometry.bucket_blocks;
        let empty = self.live.iter().filter(|&&l| l == 0).count();
        let full = self.live.iter().filter(|&&l| l == per_bucket).count();
        let mut bins = [0usize; 10];
        for &l in self.live.iter().filter(|&&l| l > 0 && l < per_bucket) {
            bins[((u64::from(l) * 10 / u64::from(per_bucket)) as usize).min(9)] += 1;
        }
        write!(
            f,
            "  buckets        {empty} empty, {full} full; partly live "
        )?;
        for (i, count) in bins.iter().enumerate() {
            write!(f, "{}-{}%:{count} ", i * 10, i * 10 + 10)?;
        }
        writeln!(f)
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let g = &self.superblock.geometry;
        let bytes = u64::from(g.block_size);
        writeln!(
            f,
            "flash tier cache device v{}  cache id {:016x}",
            format::VERSION,
            self.superblock.cache_id
        )?;
        writeln!(
            f,
            "  blocks         {} bytes; backing device {} blocks ({} MiB)",
            g.block_size,
            g.backing_blocks,
            (g.backing_blocks * bytes) >> 20
        )?;
        writeln!(
            f,
            "  slots          {} buckets of {} blocks ({} KiB): {} slots ({} MiB) from block {}",
            g.buckets,
            g.bucket_blocks,
            (u64::from(g.bucket_blocks) * bytes) >> 10,
            g.slots(),
            (g.slots() * bytes) >> 20,
            g.data_start()
        )?;
        writeln!(
            f,
            "  image          {} blocks ({} MiB); the device holds {} bytes",
            g.image_blocks(),
            (g.image_blocks() * bytes) >> 20,
            self.device_bytes
        )?;
        let slot = |r: &Result<CheckpointInfo, String>| {
            r.as_ref()
                .map_or_else(|e| format!("invalid ({e})"), ToString::to_string)
        };
        writeln!(
            f,
            "  checkpoints    {} blocks each; A: {}; B: {}",
            g.checkpoint_blocks(),
            slot(&self.slots[0]),
            slot(&self.slots[1])
        )?;
        writeln!(
            f,
            "  in use         slot {}: {}",
            SLOT_NAMES[self.in_use], self.checkpoint
        )?;
        if self.checkpoint.flags & FLAG_DETACHED != 0 {
            writeln!(
                f,
                "                 detached: the contents are stale, and the next open formats the \
                 cache afresh"
            )?;
        }
        self.fmt_journal(f)?;
        self.fmt_table(f)?;
        crate::codec::fmt_problems(f, &self.problems)
    }
}

/// Checks a cache device image: the superblock, both checkpoint slots, the
/// journal, recovery's slot table and every cached block's data. Opens the
/// file read-only and takes no lock; changes nothing.
pub fn fsck(path: &Path) -> Result<Report, TierError> {
    let dev = FileDevice::open(
        path,
        &FileOptions {
            read_only: true,
            ..FileOptions::default()
        },
    )
    .map_err(|e| TierError::Invalid(format!("opening {}: {e}", path.display())))?;
    examine(&dev)
}

/// Describes a cache device image (the same reading as [`fsck`]; the
/// report's `Display` is the description).
pub fn inspect(path: &Path) -> Result<Report, TierError> {
    fsck(path)
}

/// What one ring block holds.
enum RingBlock {
    /// A valid block of this cache.
    Ours {
        seq: u64,
        flushed_through: u64,
        kinds: [u64; 3],
    },
    /// Never written, torn, another format's or another cache's, or
    /// damaged: why it is not ours.
    Other(String),
}

/// Reads and classifies every block of the journal ring; a block with a good
/// checksum and this cache's id that fails its field checks, or one away
/// from its ring position, is a problem.
fn read_ring(
    dev: &dyn Device,
    sb: &Superblock,
    problems: &mut Vec<String>,
) -> Result<Vec<RingBlock>, TierError> {
    let g = &sb.geometry;
    let b = u64::from(g.block_size);
    let mut buf = IoBuf::zeroed(g.block_size as usize);
    let mut records = Vec::new();
    let mut ring = Vec::with_capacity(g.journal_blocks as usize);
    for pos in 0..u64::from(g.journal_blocks) {
        let at = g.journal_start() + pos;
        dev.read_at(&mut buf, at * b)?;
        let block = match format::decode_journal_block(
            &buf,
            sb.cache_id,
            g.slots(),
            g.backing_blocks,
            &mut records,
        ) {
            Ok(h) => {
                if h.seq % u64::from(g.journal_blocks) != pos {
                    problems.push(format!(
                        "journal block {at} (ring position {pos}) holds sequence {}, which belongs \
                         at ring position {}",
                        h.seq,
                        h.seq % u64::from(g.journal_blocks)
                    ));
                }
                let mut kinds = [0u64; 3];
                for r in &records {
                    kinds[match r {
                        Record::Map { .. } => 0,
                        Record::Clean { .. } => 1,
                        Record::Drop { .. } => 2,
                    }] += 1;
                }
                RingBlock::Ours {
                    seq: h.seq,
                    flushed_through: h.flushed_through,
                    kinds,
                }
            }
            Err(FormatError::Magic { found, .. }) if found == [0; 8] => {
                RingBlock::Other("never written (zeros)".into())
            }
            Err(FormatError::Magic { .. }) => {
                RingBlock::Other("not a journal block (another magic)".into())
            }
            Err(e @ (FormatError::Checksum { .. } | FormatError::Size { .. })) => {
                RingBlock::Other(format!("torn or damaged ({e})"))
            }
            Err(e @ FormatError::Version { .. }) => RingBlock::Other(e.to_string()),
            Err(FormatError::Invalid { .. }) if u64_at(&buf, 32) != sb.cache_id => {
                RingBlock::Other(format!(
                    "a block of cache {:016x} (an earlier format)",
                    u64_at(&buf, 32)
                ))
            }
            Err(e) => {
                problems.push(format!(
                    "journal block {at} (ring position {pos}, sequence {}) has a good checksum \
                     but does not decode ({e}): recovery takes it for the journal's end",
                    u64_at(&buf, 16)
                ));
                RingBlock::Other(format!("does not decode ({e})"))
            }
        };
        ring.push(block);
    }
    Ok(ring)
}

/// Follows the chain from `from` as recovery does, and checks that it does
/// not end at a block a later one of the same run says was durable.
fn walk_journal(
    ring: &[RingBlock],
    from: u64,
    j: u64,
    journal_start: u64,
    problems: &mut Vec<String>,
) -> JournalInfo {
    let mut info = JournalInfo::default();
    let mut seq = from;
    while info.blocks < j {
        match &ring[(seq % j) as usize] {
            RingBlock::Ours {
                seq: s, kinds: k, ..
            } if *s == seq => {
                info.blocks += 1;
                for (total, n) in info.records.iter_mut().zip(k) {
                    *total += n;
                }
                seq += 1;
            }
            _ => break,
        }
    }
    info.end = seq;
    info.end_reason = if info.blocks == j {
        "the whole ring chains on".into()
    } else {
        match &ring[(seq % j) as usize] {
            RingBlock::Ours { seq: s, .. } if *s < seq => {
                format!("an older block (sequence {s}): the journal's normal end")
            }
            RingBlock::Ours { seq: s, .. } => {
                format!("a block of a later run (sequence {s})")
            }
            RingBlock::Other(why) => why.clone(),
        }
    };
    // Blocks of the same run after the end: any that says the end block was
    // durable when it was written means that block was lost, not torn.
    let mut durable_by: Option<(u64, u64)> = None;
    for block in ring {
        if let RingBlock::Ours {
            seq: s,
            flushed_through,
            ..
        } = *block
            && s > seq
            && s < seq + j
        {
            info.beyond += 1;
            if flushed_through >= seq && durable_by.is_none_or(|(_, f)| flushed_through > f) {
                durable_by = Some((s, flushed_through));
            }
        }
    }
    if let Some((s, f)) = durable_by {
        problems.push(format!(
            "journal sequence {seq} (block {}) was durable (block {s} says the journal was \
             flushed through {f}), but it does not chain on ({}): recovery stops there and drops \
             the records of sequences {seq}..={f}",
            journal_start + seq % j,
            info.end_reason
        ));
    }
    info
}

/// Examines a cache device image. Structural failures (no superblock, one
/// that does not decode, an image larger than the device, no valid
/// checkpoint, device errors) are errors; everything else is a problem in
/// the report.
pub fn examine(dev: &dyn Device) -> Result<Report, TierError> {
    let Some(sb) = recover::read_superblock(dev)? else {
        let mut first = [0u8; 8];
        if dev.len() >= 8 {
            dev.read_at(&mut first, 0)?;
        }
        return Err(TierError::Foreign {
            device: dev.describe(),
            found: format!("first bytes {first:02x?}, not {:?}", "CAIRNTS1"),
        });
    };
    let g = sb.geometry;
    let image_bytes = g.image_blocks() * u64::from(g.block_size);
    if image_bytes > dev.len() {
        return Err(TierError::Invalid(format!(
            "{} is {} bytes; its superblock describes {image_bytes} bytes (truncated?)",
            dev.describe(),
            dev.len(),
        )));
    }
    let mut problems = Vec::new();
    let [slot_a, slot_b] = read_checkpoints(dev, &sb)?;
    let slots = [info(&slot_a), info(&slot_b)];
    let (in_use, cp) = match (slot_a, slot_b) {
        (Ok(a), Ok(b)) if b.number > a.number => (1, b),
        (Ok(a), _) => (0, a),
        (Err(_), Ok(b)) => (1, b),
        (Err(ea), Err(eb)) => {
            return Err(TierError::Format {
                device: dev.describe(),
                error: FormatError::Invalid {
                    what: "tier checkpoint",
                    reason: format!("no valid checkpoint (A: {ea}; B: {eb})"),
                },
            });
        }
    };
    let checkpoint = CheckpointInfo {
        number: cp.number,
        replay_from: cp.replay_from,
        mode: cp.mode,
        flags: cp.flags,
    };
    checkpoint_problems(dev, &g, &slots, in_use, &mut problems)?;

    let ring = read_ring(dev, &sb, &mut problems)?;
    let (journal, table) = if cp.replay_from == 0 {
        // Recovery would compute `replay_from - 1`: an overflow.
        problems.push(format!(
            "checkpoint #{} in slot {} replays from sequence 0 (sequences start at 1): recovery \
             cannot replay it; the table shown is the checkpoint's alone",
            cp.number, SLOT_NAMES[in_use]
        ));
        let journal = JournalInfo {
            end_reason: "not replayed".into(),
            ..JournalInfo::default()
        };
        (journal, cp.slots)
    } else {
        let j = u64::from(g.journal_blocks);
        let mut journal = walk_journal(&ring, cp.replay_from, j, g.journal_start(), &mut problems);
        let image = recover::recover(dev, sb)?;
        let r = &image.recovered;
        if image.checkpoint_number != cp.number || r.journal_blocks != journal.blocks {
            problems.push(format!(
                "recovery used checkpoint #{} and {} journal blocks, this check #{} and {}",
                image.checkpoint_number, r.journal_blocks, cp.number, journal.blocks
            ));
        }
        journal.torn = r.torn;
        (journal, image.slots)
    };

    let (cached, dirty, live) = check_table(dev, &sb, &table, &mut problems)?;
    Ok(Report {
        superblock: sb,
        device_bytes: dev.len(),
        checkpoint,
        slots,
        in_use,
        journal,
        cached,
        dirty,
        live,
        problems,
    })
}

/// Both checkpoint slots, decoded or why not.
fn read_checkpoints(
    dev: &dyn Device,
    sb: &Superblock,
) -> Result<[Result<format::Checkpoint, String>; 2], TierError> {
    let g = &sb.geometry;
    let b = u64::from(g.block_size);
    let mut buf = IoBuf::zeroed((g.checkpoint_blocks() * b) as usize);
    let mut slots = [Err(String::new()), Err(String::new())];
    for (which, slot) in slots.iter_mut().enumerate() {
        dev.read_at(&mut buf, g.checkpoint_start(which as u64) * b)?;
        *slot = format::decode_checkpoint(&buf, g.slots(), sb.cache_id, g.backing_blocks)
            .map_err(|e| e.to_string());
    }
    Ok(slots)
}

/// A decoded checkpoint's header.
fn info(c: &Result<format::Checkpoint, String>) -> Result<CheckpointInfo, String> {
    c.as_ref()
        .map(|c| CheckpointInfo {
            number: c.number,
            replay_from: c.replay_from,
            mode: c.mode,
            flags: c.flags,
        })
        .map_err(Clone::clone)
}

/// What the two slots say about each other: an invalid one (bar slot B
/// after a format, which leaves it zero), numbers in the wrong slot, equal
/// numbers, a newer checkpoint replaying from before an older one, both
/// flags at once.
fn checkpoint_problems(
    dev: &dyn Device,
    g: &format::Geometry,
    slots: &[Result<CheckpointInfo, String>; 2],
    in_use: usize,
    problems: &mut Vec<String>,
) -> Result<(), TierError> {
    let b = u64::from(g.block_size);
    let used = slots[in_use]
        .as_ref()
        .map_err(|e| TierError::Invalid(e.clone()))?;
    for (which, slot) in slots.iter().enumerate() {
        match slot {
            Ok(c) => {
                if c.number % 2 != which as u64 {
                    problems.push(format!(
                        "checkpoint #{} is in slot {}; numbers alternate, so it belongs in slot {}",
                        c.number,
                        SLOT_NAMES[which],
                        SLOT_NAMES[(c.number % 2) as usize]
                    ));
                }
                if c.flags & FLAG_CLEAN != 0 && c.flags & FLAG_DETACHED != 0 {
                    problems.push(format!(
                        "checkpoint #{} in slot {} is flagged both clean and detached",
                        c.number, SLOT_NAMES[which]
                    ));
                }
            }
            Err(e) => {
                let mut head = [0u8; 24];
                dev.read_at(&mut head, g.checkpoint_start(which as u64) * b)?;
                let after_format = which == 1 && used.number == 2 && head == [0; 24];
                if !after_format {
                    let claimed = if head[..8] == format::CHECKPOINT_MAGIC {
                        let n = u64_at(&head, 16);
                        if n > used.number {
                            format!(
                                "; it claims #{n}, newer than #{}: recovery fell back to an older \
                                 checkpoint, and what was journalled only after it may be lost",
                                used.number
                            )
                        } else {
                            format!("; it claims #{n}")
                        }
                    } else {
                        String::new()
                    };
                    problems.push(format!(
                        "checkpoint slot {} does not decode: {e} (slot {} is in use){claimed}",
                        SLOT_NAMES[which], SLOT_NAMES[in_use]
                    ));
                }
            }
        }
    }
    if let (Ok(a), Ok(bb)) = (&slots[0], &slots[1]) {
        if a.number == bb.number {
            problems.push(format!(
                "both checkpoint slots hold #{} (A is used)",
                a.number
            ));
        }
        let (newer, older) = if bb.number > a.number {
            (bb, a)
        } else {
            (a, bb)
        };
        if newer.number != older.number && newer.replay_from < older.replay_from {
            problems.push(format!(
                "checkpoint #{} replays from sequence {}, before the older #{}'s {}",
                newer.number, newer.replay_from, older.number, older.replay_from
            ));
        }
    }
    Ok(())
}

/// The recovered table: cached and dirty counts, live blocks per bucket, no
/// backing block in two slots, every cached block's data against its CRC.
fn check_table(
    dev: &dyn Device,
    sb: &Superblock,
    table: &[SlotEntry],
    problems: &mut Vec<String>,
) -> Result<(u64, u64, Vec<u32>), TierError> {
    let g = &sb.geometry;
    let b = u64::from(g.block_size);
    let n = g.bucket_blocks as usize;
    let mut owner: hashbrown::HashMap<u64, usize> = hashbrown::HashMap::new();
    let mut live = vec![0u32; g.buckets as usize];
    let (mut cached, mut dirty) = (0u64, 0u64);
    let mut bucket = IoBuf::zeroed(n * b as usize);
    for (k, entries) in table.chunks(n).enumerate() {
        if entries.iter().all(|e| e.word & WORD_VALID == 0) {
            continue;
        }
        dev.read_at(&mut bucket, g.slot_block((k * n) as u32) * b)?;
        for (i, e) in entries.iter().enumerate() {
            if e.word & WORD_VALID == 0 {
                continue;
            }
            let slot = k * n + i;
            let block = e.word & WORD_BLOCK;
            let is_dirty = e.word & WORD_DIRTY != 0;
            cached += 1;
            dirty += u64::from(is_dirty);
            live[k] += 1;
            if let Some(other) = owner.insert(block, slot) {
                problems.push(format!(
                    "backing block {block} is held by slots {other} and {slot}"
                ));
            }
            let data = &bucket[i * b as usize..(i + 1) * b as usize];
            let crc = crc32c(data);
            if crc != e.crc {
                problems.push(format!(
                    "slot {slot} (bucket {k}, block {}) holds backing block {block}{}: data \
                     checksum {crc:#010x}, expected {:#010x}{}",
                    g.slot_block(slot as u32),
                    if is_dirty { ", dirty" } else { "" },
                    e.crc,
                    if is_dirty {
                        ": its only up-to-date copy is damaged (reads of it fail)"
                    } else {
                        " (a read drops it and reads the backing device)"
                    }
                ));
            }
        }
    }
    Ok((cached, dirty, live))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::path::PathBuf;
    use std::sync::Arc;

    use cairn_policy::PolicyConfig;

    use super::*;
    use crate::codec::{put_u32, put_u64, seal};
    use crate::device::SharedDevice;
    use crate::tier::format::{CHECKPOINT_HEADER, JOURNAL_HEADER, SLOT_ENTRY};
    use crate::tier::open::{Want, open_or_format};
    use crate::tier::{Layout, Options, Tier};

    const B: usize = 512;

    fn want() -> Want {
        Want {
            layout: Layout {
                block_size: B as u32,
                bucket_size: 4 * B as u32,
                journal_blocks: 8,
            },
            options: Options {
                mode: Mode::WriteBack,
                policy: PolicyConfig::default_for("lru").unwrap(),
                sequential_cutoff_bytes: 0,
                overprovision: 0.1,
                shards: 1,
                background: false,
                ..Options::default()
            },
            marker: None,
        }
    }

    /// A cache image file and a backing file in `dir`, the tier open on them.
    fn open(dir: &Path) -> (PathBuf, Tier) {
        let path = dir.join("cache.img");
        let file = |name: &str, len: u64| -> SharedDevice {
            Arc::new(
                FileDevice::open(
                    dir.join(name),
                    &FileOptions {
                        create_len: Some(len),
                        ..FileOptions::default()
                    },
                )
                .unwrap(),
            )
        };
        let tier = open_or_format(
            file("cache.img", 64 << 10),
            file("back.img", 256 << 10),
            &want(),
        )
        .unwrap();
        (path, tier)
    }

    fn write(tier: &Tier, blocks: std::ops::Range<u64>, version: u8) {
        for b in blocks {
            tier.write_at(&[version ^ b as u8; B], b * B as u64)
                .unwrap();
        }
    }

    /// A used, cleanly closed image: blocks written (some dirty), read, and
    /// rewritten across a few checkpoints.
    fn used(dir: &Path) -> PathBuf {
        let (path, tier) = open(dir);
        for round in 0..3 {
            write(&tier, 0..30, round);
            tier.flush().unwrap();
            tier.step(10).unwrap();
        }
        let mut buf = [0u8; B];
        for b in 100..110 {
            tier.read_at(&mut buf, b * B as u64).unwrap();
        }
        tier.close().unwrap();
        path
    }

    fn geometry(path: &Path) -> format::Geometry {
        fsck(path).unwrap().superblock.geometry
    }

    fn flip(path: &Path, at: u64) {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .unwrap();
        let mut x = [0u8];
        f.read_exact_at(&mut x, at).unwrap();
        f.write_all_at(&[x[0] ^ 0x10], at).unwrap();
    }

    fn read(path: &Path, at: u64, len: usize) -> Vec<u8> {
        use std::os::unix::fs::FileExt;
        let mut v = vec![0u8; len];
        std::fs::File::open(path)
            .unwrap()
            .read_exact_at(&mut v, at)
            .unwrap();
        v
    }

    fn overwrite(path: &Path, at: u64, bytes: &[u8]) {
        use std::os::unix::fs::FileExt;
        std::fs::OpenOptions::new()
            .write(true)
            .open(path)
            .unwrap()
            .write_all_at(bytes, at)
            .unwrap();
    }

    #[test]
    fn a_used_image_is_clean_described_and_what_the_next_open_recovers() {
        let dir = tempfile::tempdir().unwrap();
        let path = used(dir.path());
        let before = read(&path, 0, 64 << 10);
        let r = fsck(&path).unwrap();
        assert!(r.is_clean(), "{r}");
        assert_eq!(read(&path, 0, 64 << 10), before, "fsck wrote nothing");
        assert!(r.checkpoint.flags & FLAG_CLEAN != 0, "{r}");
        assert_eq!(r.checkpoint.mode, Mode::WriteBack);
        assert_eq!(r.journal.blocks, 0, "a clean stop leaves nothing to replay");
        assert!(r.slots[0].is_ok() && r.slots[1].is_ok(), "{r}");
        assert_eq!(r.checkpoint.number % 2, r.in_use as u64);
        assert_eq!(r.live.iter().map(|&l| u64::from(l)).sum::<u64>(), r.cached);
        assert!(r.cached >= 30 && r.dirty > 0, "{r}");
        let text = inspect(&path).unwrap().to_string();
        for want in [
            "flash tier cache device v1",
            "4 blocks (2 KiB)",
            "clean stop",
            "journal        8 blocks in the ring; 0 chain on",
            "buckets",
            "clean: no problem found",
        ] {
            assert!(text.contains(want), "{want}: {text}");
        }
        // What fsck says is cached is what the next open finds.
        let (_, tier) = open(dir.path());
        assert_eq!(
            (tier.recovered().cached, tier.recovered().dirty),
            (r.cached, r.dirty)
        );
    }

    #[test]
    fn a_crashed_image_replays_its_journal_and_is_clean() {
        let dir = tempfile::tempdir().unwrap();
        let (path, tier) = open(dir.path());
        write(&tier, 0..12, 1);
        tier.flush().unwrap();
        write(&tier, 5..9, 2);
        let mut buf = [0u8; B];
        tier.read_at(&mut buf, 50 * B as u64).unwrap();
        drop(tier); // no close: a killed process
        let r = fsck(&path).unwrap();
        assert!(r.is_clean(), "{r}");
        assert!(r.journal.blocks >= 2, "{r}");
        // 12 + 4 writes and a promoted read are maps; rewrites drop nothing
        // here (the old copy is superseded by the map).
        assert_eq!(r.journal.records[0], 17, "{r}");
        assert_eq!((r.cached, r.dirty), (13, 12), "{r}");
        let (_, tier) = open(dir.path());
        assert_eq!(tier.recovered().journal_blocks, r.journal.blocks);
        assert_eq!(tier.recovered().cached, r.cached);
    }

    #[test]
    fn a_damaged_newest_checkpoint_falls_back_to_the_older_and_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let path = used(dir.path());
        let g = geometry(&path);
        let good = fsck(&path).unwrap();
        let n = good.checkpoint.number;
        flip(&path, g.checkpoint_start(n % 2) * B as u64 + 70);
        let r = fsck(&path).unwrap();
        assert_eq!(r.checkpoint.number, n - 1, "{r}");
        assert!(
            r.problems.iter().any(
                |p| p.contains("does not decode") && p.contains(&format!("claims #{n}, newer"))
            ),
            "{r}"
        );
        // And the other one too: nothing to recover from.
        flip(&path, g.checkpoint_start((n - 1) % 2) * B as u64 + 70);
        let e = fsck(&path).unwrap_err();
        assert!(e.to_string().contains("no valid checkpoint"), "{e}");
    }

    #[test]
    fn a_checkpoint_naming_a_block_in_two_slots_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let path = used(dir.path());
        let g = geometry(&path);
        let n = fsck(&path).unwrap().checkpoint.number;
        let at = g.checkpoint_start(n % 2) * B as u64;
        let mut c = read(&path, at, (g.checkpoint_blocks() * B as u64) as usize);
        // The first valid slot's word into the first empty slot, resealed.
        let word_of = |c: &[u8], s: usize| u64_at(c, CHECKPOINT_HEADER + s * SLOT_ENTRY);
        let slots = 0..g.slots() as usize;
        let full = slots.clone().find(|&s| word_of(&c, s) != 0).unwrap();
        let empty = slots.clone().find(|&s| word_of(&c, s) == 0).unwrap();
        let word = word_of(&c, full);
        put_u64(&mut c, CHECKPOINT_HEADER + empty * SLOT_ENTRY, word);
        seal(&mut c, 12);
        overwrite(&path, at, &c);
        let r = fsck(&path).unwrap();
        assert_eq!(r.checkpoint.number, n - 1, "{r}");
        assert!(
            r.problems
                .iter()
                .any(|p| p.contains("held by two slots") && p.contains("is in use")),
            "{r}"
        );
    }

    #[test]
    fn a_damaged_superblock_is_unreadable() {
        let dir = tempfile::tempdir().unwrap();
        let path = used(dir.path());
        flip(&path, 20);
        let e = fsck(&path).unwrap_err();
        assert!(matches!(e, TierError::Format { .. }), "{e}");
        assert!(e.to_string().contains("tier superblock"), "{e}");
        overwrite(&path, 0, b"NOTATIER");
        assert!(matches!(fsck(&path), Err(TierError::Foreign { .. })));
    }

    #[test]
    fn a_damaged_cached_block_is_reported_dirty_or_clean() {
        let dir = tempfile::tempdir().unwrap();
        let path = used(dir.path());
        let g = geometry(&path);
        let cache = FileDevice::open(
            &path,
            &FileOptions {
                read_only: true,
                ..FileOptions::default()
            },
        )
        .unwrap();
        let sb = recover::read_superblock(&cache).unwrap().unwrap();
        let image = recover::recover(&cache, sb).unwrap();
        let dirty = image
            .slots
            .iter()
            .position(|e| e.word & WORD_DIRTY != 0)
            .unwrap();
        let clean = image
            .slots
            .iter()
            .position(|e| e.word & WORD_VALID != 0 && e.word & WORD_DIRTY == 0)
            .unwrap();
        flip(&path, g.slot_block(dirty as u32) * B as u64 + 3);
        flip(&path, g.slot_block(clean as u32) * B as u64 + 3);
        let r = fsck(&path).unwrap();
        assert_eq!(r.problems.len(), 2, "{r}");
        assert!(
            r.problems
                .iter()
                .any(|p| p.starts_with(&format!("slot {dirty} "))
                    && p.contains("dirty")
                    && p.contains("only up-to-date copy")),
            "{r}"
        );
        assert!(
            r.problems
                .iter()
                .any(|p| p.starts_with(&format!("slot {clean} "))
                    && p.contains("reads the backing device")),
            "{r}"
        );
    }

    /// A crashed image with two flushed journal blocks: the ring block of
    /// the first one and its offset.
    fn crashed_with_two_durable_blocks(dir: &Path) -> (PathBuf, u64) {
        let (path, tier) = open(dir);
        write(&tier, 0..4, 1);
        tier.flush().unwrap();
        write(&tier, 10..14, 1);
        tier.flush().unwrap();
        drop(tier);
        let r = fsck(&path).unwrap();
        assert!(r.is_clean(), "{r}");
        assert_eq!(r.journal.blocks, 2, "{r}");
        let g = r.superblock.geometry;
        (path, g.journal_block(r.checkpoint.replay_from) * B as u64)
    }

    #[test]
    fn a_durable_journal_block_that_is_lost_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let (path, at) = crashed_with_two_durable_blocks(dir.path());
        flip(&path, at + 100);
        let r = fsck(&path).unwrap();
        assert_eq!((r.journal.blocks, r.journal.beyond), (0, 1), "{r}");
        assert!(r.problems.iter().any(|p| p.contains("was durable")), "{r}");
        assert!(r.journal.end_reason.contains("torn or damaged"), "{r}");
    }

    #[test]
    fn a_journal_record_that_fails_behind_a_good_checksum_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let (path, at) = crashed_with_two_durable_blocks(dir.path());
        let mut block = read(&path, at, B);
        // Record 0's slot past the slot count, the CRC made good again.
        put_u32(&mut block, JOURNAL_HEADER + 4, 9999);
        seal(&mut block, 12);
        overwrite(&path, at, &block);
        let r = fsck(&path).unwrap();
        assert_eq!(r.journal.blocks, 0, "recovery stops there: {r}");
        assert!(
            r.problems
                .iter()
                .any(|p| p.contains("good checksum") && p.contains("record 0: slot 9999")),
            "{r}"
        );
    }

    #[test]
    fn a_checkpoint_replaying_from_sequence_0_is_refused_and_the_older_one_used() {
        let dir = tempfile::tempdir().unwrap();
        let path = used(dir.path());
        let g = geometry(&path);
        let n = fsck(&path).unwrap().checkpoint.number;
        let at = g.checkpoint_start(n % 2) * B as u64;
        let mut c = read(&path, at, (g.checkpoint_blocks() * B as u64) as usize);
        put_u64(&mut c, 24, 0);
        seal(&mut c, 12);
        overwrite(&path, at, &c);
        let r = fsck(&path).unwrap();
        // Invariant 3 refuses it: recovery falls back to the other slot.
        assert_eq!(r.checkpoint.number, n - 1, "{r}");
        assert!(
            r.problems
                .iter()
                .any(|p| p.contains("sequence 0 (sequences start at 1)")),
            "{r}"
        );
    }
}
