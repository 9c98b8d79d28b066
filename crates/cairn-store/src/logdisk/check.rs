//! `fsck` and `inspect` for log-disk images: read-only, over any [`Device`].
//!
//! [`examine`] does what recovery does — superblock, both checkpoint slots,
//! roll-forward through every segment write after the current checkpoint — and
//! then checks what recovery trusts: every mapped block's data against its
//! CRC32C, no physical block named by two logical blocks, every mapped block
//! in a data slot its segment's summaries name for that logical block, and the
//! checkpoint's segment usage table against the map. Each problem is reported
//! with where it is; nothing is repaired.

use std::fmt;

use super::error::LogDiskError;
use super::format::{self, Geometry, Superblock, UNMAPPED};
use super::metrics::Metrics;
use super::recover::{Segments, read_checkpoint, read_superblock, roll_forward};
use super::table::{block_of, segment_of};
use crate::device::Device;

/// What [`examine`] found.
#[derive(Debug, Clone)]
pub struct Report {
    /// The geometry.
    pub geometry: Geometry,
    /// Volume identity.
    pub id: u64,
    /// Disk format version (the layout of its segment summaries).
    pub version: u32,
    /// State of checkpoint slots A and B (`Ok(number)` or why not).
    pub slots: [Result<u64, String>; 2],
    /// The checkpoint in use: number and sequence.
    pub checkpoint: (u64, u64),
    /// Whether a clean close wrote it (recovery then reads no segment).
    pub closed: bool,
    /// Segments an open would read to recover (none after a clean close).
    pub recovery_reads: u32,
    /// Whether it would find them along the chain the checkpoint names
    /// (else it reads every segment's first block).
    pub chained: bool,
    /// Segment writes after the checkpoint that recovery replays.
    pub replayed: usize,
    /// Logical blocks mapped.
    pub mapped: u64,
    /// Live blocks per segment (after replay).
    pub live: Vec<u32>,
    /// Segments whose first block is a whole summary another volume wrote
    /// (an earlier format of the device left it; never read as this disk's).
    pub earlier_format: u32,
    /// Metrics as of the checkpoint.
    pub metrics: Metrics,
    /// Every inconsistency, one line each; empty when the image is clean.
    pub problems: Vec<String>,
}

impl Report {
    /// Whether no problem was found.
    pub fn is_clean(&self) -> bool {
        self.problems.is_empty()
    }
}

fn opt(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v:.3}"))
}

impl Report {
    /// The checkpoint slots, the one in use, and what recovering from it
    /// would read.
    fn write_checkpoints(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let g = &self.geometry;
        writeln!(
            f,
            "  checkpoints    {} blocks each; A: {}; B: {}",
            g.checkpoint_blocks(),
            self.slots[0]
                .as_ref()
                .map_or_else(|e| format!("invalid ({e})"), |n| format!("#{n}")),
            self.slots[1]
                .as_ref()
                .map_or_else(|e| format!("invalid ({e})"), |n| format!("#{n}")),
        )?;
        writeln!(
            f,
            "  in use         #{} at sequence {}{}; {} segment writes after it to roll forward",
            self.checkpoint.0,
            self.checkpoint.1,
            if self.closed {
                ", written by a clean close"
            } else {
                ""
            },
            self.replayed
        )?;
        writeln!(
            f,
            "  recovery       would read {} of {} segments{}",
            self.recovery_reads,
            g.segments,
            if self.closed {
                ""
            } else if self.chained {
                " (those opened since the checkpoint, along the chain it names)"
            } else {
                " (every first block: the checkpoint names no chain, or a link is missing)"
            }
        )?;
        Ok(())
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let g = &self.geometry;
        let b = u64::from(g.block_size);
        writeln!(f, "log disk v{}  id {:016x}", self.version, self.id)?;
        writeln!(
            f,
            "  blocks         {} bytes; {} logical ({} MiB exported), {} mapped",
            g.block_size,
            g.logical_blocks,
            (g.logical_blocks * b) >> 20,
            self.mapped
        )?;
        writeln!(
            f,
            "  segments       {} of {} blocks ({} KiB); image {} blocks",
            g.segments,
            g.segment_blocks,
            (u64::from(g.segment_blocks) * b) >> 10,
            g.image_blocks()
        )?;
        if self.earlier_format > 0 {
            writeln!(
                f,
                "  earlier format {} segments start with another volume's summary (left by an earlier format of the device; never read as this disk's)",
                self.earlier_format
            )?;
        }
        self.write_checkpoints(f)?;
        let usable = f64::from(g.segment_blocks - 1);
        let free = self.live.iter().filter(|&&l| l == 0).count();
        let mut buckets = [0usize; 10];
        for &l in self.live.iter().filter(|&&l| l > 0) {
            let u = f64::from(l) / usable;
            buckets[((u * 10.0) as usize).min(9)] += 1;
        }
        let total_live: u64 = self.live.iter().map(|&l| u64::from(l)).sum();
        writeln!(
            f,
            "  utilisation    {:.3} of data slots; {free} segments free",
            total_live as f64 / (f64::from(g.segments) * usable)
        )?;
        write!(f, "  segment use    ")?;
        for (i, n) in buckets.iter().enumerate() {
            write!(f, "{}-{}%:{n} ", i * 10, i * 10 + 10)?;
        }
        writeln!(f)?;
        let m = &self.metrics;
        writeln!(f, "metrics (as of the checkpoint)")?;
        writeln!(
            f,
            "  client blocks written {}; user segment writes {} ({} blocks, {} partial)",
            m.client_blocks, m.user_segment_writes, m.user_blocks_written, m.partial_segments
        )?;
        writeln!(
            f,
            "  cleaner: {} segment reads, {} segment writes ({} blocks)",
            m.cleaner_segment_reads, m.cleaner_segment_writes, m.cleaner_blocks_written
        )?;
        writeln!(
            f,
            "  write amplification {}; mean segment lifetime {} blocks (paper's formula), {} measured",
            opt(m.write_amplification()),
            opt(m.mean_lifetime()),
            opt(m.measured_lifetime())
        )?;
        writeln!(
            f,
            "  NV cache: {} writes, hit ratio {}",
            m.nv_writes,
            opt(m.nv_hit_ratio())
        )?;
        writeln!(
            f,
            "  checkpoints {} ({} KiB), device flushes {}, opens {}",
            m.checkpoints,
            m.checkpoint_bytes >> 10,
            m.device_flushes,
            m.recoveries
        )?;
        crate::codec::fmt_problems(f, &self.problems)
    }
}

/// The checkpoint's usage table against its own map.
fn usage_problems(cp: &format::Checkpoint, g: &Geometry, problems: &mut Vec<String>) {
    let mut live_at_cp = vec![0u32; g.segments as usize];
    for e in cp.map.iter().filter(|e| e.physical != UNMAPPED) {
        live_at_cp[segment_of(g, e.physical) as usize] += 1;
    }
    for (s, (u, &l)) in cp.usage.iter().zip(&live_at_cp).enumerate() {
        if u.live != l {
            problems.push(format!(
                "segment {s}: the checkpoint's usage table says {} live blocks, its map has {l}",
                u.live
            ));
        }
    }
}

/// Which logical block each data slot holds, per the valid summaries of
/// each segment's chain (index: segment block from the first segment), and
/// how many segments start with another volume's summary.
fn summary_names<D: Device + ?Sized>(
    dev: &D,
    sb: &Superblock,
    seg_buf: &mut [u8],
) -> Result<(Vec<Option<u64>>, u32), LogDiskError> {
    let g = &sb.geometry;
    let mut earlier = 0;
    let b = u64::from(g.block_size);
    let mut named =
        vec![None::<u64>; (u64::from(g.segments) * u64::from(g.segment_blocks)) as usize];
    for s in 0..g.segments {
        dev.read_at(seg_buf, block_of(g, s, 0) * b)?;
        let first = &seg_buf[..b as usize];
        if format::read_summary(first, sb) == format::SummaryBlock::Unwritten
            && first.iter().any(|&x| x != 0)
        {
            earlier += 1;
        }
        let mut slot = 0u32;
        let mut prev = 0u64;
        while slot + 1 < g.segment_blocks {
            let at = slot as usize * g.block_size as usize;
            let Ok(sum) = format::decode_summary(&seg_buf[at..at + b as usize], sb) else {
                break;
            };
            if sum.segment != s || sum.first_slot != slot || sum.sequence <= prev {
                break;
            }
            prev = sum.sequence;
            strict_assert!(
                sum.entries.len() <= Geometry::max_entries_in(g.block_size, sb.version) as usize
            );
            for (i, e) in sum.entries.iter().enumerate() {
                let at = (s * g.segment_blocks + slot + 1 + i as u32) as usize;
                if let Some(n) = named.get_mut(at) {
                    *n = Some(e.logical);
                }
            }
            slot += 1 + sum.entries.len() as u32;
        }
    }
    Ok((named, earlier))
}

/// A checkpoint marked closed with segment writes newer than it: recovery
/// trusts the mark and would not read them.
fn closed_but_written(cp: &format::Checkpoint, newer: usize) -> Option<String> {
    (cp.closed && newer > 0).then(|| {
        format!(
            "checkpoint #{} was written by a clean close, yet {newer} segment writes are newer: recovery would not read them",
            cp.number
        )
    })
}

/// What an open would read to recover from checkpoint `cp` (segments,
/// and whether along its chain), and a problem if that finds fewer of the
/// `newer` writes after the checkpoint than reading every segment does.
fn recovery_plan<D: Device + ?Sized>(
    dev: &D,
    sb: &Superblock,
    cp: &format::Checkpoint,
    seg_buf: &mut [u8],
    newer: usize,
) -> Result<(u32, bool, Option<String>), LogDiskError> {
    if cp.closed {
        return Ok((0, false, None));
    }
    let plan = roll_forward(dev, sb, cp, &mut cp.map.clone(), seg_buf, Segments::Scan)?;
    let found = plan.applied;
    let short = (plan.chained && found < newer).then(|| {
        format!(
            "the chain of segments from checkpoint #{} reaches {found} of the {newer} segment writes after it: recovery would not replay the newest {} (written after a link the crash tore, never flushed, if the disk only crashed)",
            cp.number,
            newer - found
        )
    });
    Ok((plan.segments_read, plan.chained, short))
}

/// Examines a log-disk image; structural failures (no superblock, no valid
/// checkpoint, device errors) are errors, everything else is a problem in the
/// report.
pub fn examine<D: Device + ?Sized>(dev: &D) -> Result<Report, LogDiskError> {
    let sb = read_superblock(dev)?;
    let g = sb.geometry;
    let bs = g.block_size;
    let b = u64::from(g.block_size);
    if dev.len() < g.image_blocks() * b {
        return Err(LogDiskError::TooSmall {
            need: g.image_blocks() * b,
            have: dev.len(),
        });
    }
    let mut slots = [Err(String::new()), Err(String::new())];
    let mut buf = vec![0u8; (g.checkpoint_blocks() * b) as usize];
    for (i, slot) in slots.iter_mut().enumerate() {
        dev.read_at(&mut buf, b * (1 + i as u64 * g.checkpoint_blocks()))?;
        *slot = format::decode_checkpoint(&buf, &g)
            .map(|c| c.number)
            .map_err(|e| e.to_string());
    }
    let cp = read_checkpoint(dev, &g)?;
    let mut problems = Vec::new();
    let mut map = cp.map.clone();
    let mut seg_buf = vec![0u8; (u64::from(g.segment_blocks) * b) as usize];
    let replay = roll_forward(dev, &sb, &cp, &mut map, &mut seg_buf, Segments::Every)?;
    strict_assert_eq!(map.len() as u64, g.logical_blocks, "one entry per block");
    problems.extend(closed_but_written(&cp, replay.applied));
    let (recovery_reads, chained, short) =
        recovery_plan(dev, &sb, &cp, &mut seg_buf, replay.applied)?;
    problems.extend(short);
    usage_problems(&cp, &g, &mut problems);
    let (named, earlier_format) = summary_names(dev, &sb, &mut seg_buf)?;
    strict_assert_eq!(
        named.len() as u64,
        u64::from(g.segments) * u64::from(g.segment_blocks)
    );
    let mut owner = hashbrown::HashMap::new();
    let mut live = vec![0u32; g.segments as usize];
    let mut data = vec![0u8; bs as usize];
    let mut mapped = 0u64;
    let first_data = g.segment_start(0);
    for (logical, e) in map.iter().enumerate() {
        if e.physical == UNMAPPED {
            continue;
        }
        mapped += 1;
        let s = segment_of(&g, e.physical);
        live[s as usize] += 1;
        if let Some(other) = owner.insert(e.physical, logical) {
            problems.push(format!(
                "physical block {} is mapped by logical blocks {other} and {logical}",
                e.physical
            ));
        }
        let index = (e.physical - first_data) as usize;
        if named.get(index).copied().flatten() != Some(logical as u64) {
            problems.push(format!(
                "logical block {logical} maps to physical block {} (segment {s}), which no valid summary names for it",
                e.physical
            ));
        }
        dev.read_at(&mut data, e.physical * b)?;
        let crc = format::crc32c(&data);
        if crc != e.crc {
            problems.push(format!(
                "logical block {logical} at physical block {} (segment {s}): data checksum {crc:#010x}, expected {:#010x}",
                e.physical, e.crc
            ));
        }
    }
    // Every mapped block was counted once, in its segment.
    strict_assert_eq!(live.iter().map(|&l| u64::from(l)).sum::<u64>(), mapped);
    strict_assert!(
        owner.len() as u64 <= mapped,
        "a physical block owned without a mapping"
    );
    for (i, slot) in slots.iter().enumerate() {
        if let Err(e) = slot
            && !(cp.number == 1 && i == 1)
        {
            problems.push(format!(
                "checkpoint slot {}: {e} (the other slot is in use)",
                ["A", "B"][i]
            ));
        }
    }
    Ok(Report {
        geometry: g,
        id: sb.id,
        version: sb.version,
        slots,
        checkpoint: (cp.number, cp.sequence),
        closed: cp.closed,
        recovery_reads,
        chained,
        replayed: replay.applied,
        mapped,
        live,
        earlier_format,
        metrics: Metrics::from_counters(&cp.counters),
        problems,
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::device::MemoryDevice;
    use crate::logdisk::{LogDisk, Options};

    fn image() -> (Arc<MemoryDevice>, Geometry) {
        let g = Geometry {
            block_size: 512,
            segment_blocks: 8,
            segments: 12,
            logical_blocks: 40,
        };
        let dev = Arc::new(MemoryDevice::new(g.image_blocks() * 512));
        let disk = LogDisk::format(dev.clone(), g, None, Options::default()).expect("format");
        for round in 0..5u8 {
            for l in 0..40 {
                disk.write_blocks(l, &[round ^ l as u8; 512])
                    .expect("write");
            }
            disk.flush().expect("flush");
        }
        disk.close().expect("close");
        (dev, g)
    }

    #[test]
    fn a_clean_image_is_clean_and_described() {
        let (dev, _) = image();
        let r = examine(&*dev).expect("examine");
        assert!(r.is_clean(), "{r}");
        assert_eq!(r.mapped, 40);
        let text = r.to_string();
        assert!(text.contains("clean: no problem found"), "{text}");
        assert!(text.contains("write amplification"), "{text}");
        assert!(text.contains("would read 0 of 12 segments\n"), "{text}");
    }

    /// After a crash, the report says what recovery would read: the chain
    /// of segments opened since the checkpoint, not all of them.
    #[test]
    fn a_crashed_image_names_what_recovery_would_read() {
        let (dev, _) = image();
        let disk = LogDisk::open(dev.clone(), None, Options::default()).expect("open");
        for l in 0..20 {
            disk.write_blocks(l, &[7; 512]).expect("write");
        }
        disk.flush().expect("flush");
        drop(disk);
        let r = examine(&*dev).expect("examine");
        assert!(r.is_clean(), "{r}");
        assert!(r.chained && r.replayed > 0, "{r}");
        assert!(r.recovery_reads < 12, "{r}");
        let text = r.to_string();
        let line = format!(
            "would read {} of 12 segments (those opened since the checkpoint, along the chain it names)",
            r.recovery_reads
        );
        assert!(text.contains(&line), "{text}");
    }

    /// A checkpoint marked closed with writes after it (here: the close's
    /// checkpoint copied over the one a later write wrote) is reported:
    /// recovery would trust the mark and not read them.
    #[test]
    fn a_closed_checkpoint_with_newer_writes_is_reported() {
        let (dev, g) = image();
        let r = examine(&*dev).expect("examine");
        assert!(r.closed && r.replayed == 0, "{r}");
        assert!(r.to_string().contains("written by a clean close"), "{r}");
        let slot = |number: u64| 512 * (1 + (1 - number % 2) * g.checkpoint_blocks());
        let closing = r.checkpoint.0;
        let disk = LogDisk::open(dev.clone(), None, Options::default()).expect("open");
        disk.write_blocks(1, &[9; 512]).expect("write");
        disk.flush().expect("flush");
        drop(disk);
        let mut bytes = vec![0u8; (g.checkpoint_blocks() * 512) as usize];
        dev.read_at(&mut bytes, slot(closing)).expect("read");
        dev.write_at(&bytes, slot(closing + 1)).expect("write");
        let r = examine(&*dev).expect("examine");
        assert!(
            r.problems
                .iter()
                .any(|p| p.contains("written by a clean close, yet 1 segment writes are newer")),
            "{r}"
        );
    }

    fn flip(dev: &MemoryDevice, at: u64) {
        let mut x = [0u8];
        dev.read_at(&mut x, at).expect("read");
        dev.write_at(&[x[0] ^ 0x40], at).expect("write");
    }

    #[test]
    fn a_flipped_data_byte_is_reported_and_never_served() {
        let (dev, g) = image();
        let disk = LogDisk::open(dev.clone(), None, Options::default()).expect("open");
        let mut m = [0u8; 512];
        disk.read_block(7, &mut m).expect("read");
        // Find block 7's physical location from fsck's view, flip a byte there.
        let cp = read_checkpoint(&*dev, &g).expect("checkpoint");
        let physical = cp.map[7].physical;
        drop(disk);
        flip(&dev, physical * 512 + 100);
        let r = examine(&*dev).expect("examine");
        assert!(
            r.problems
                .iter()
                .any(|p| p.contains("logical block 7") && p.contains("checksum")),
            "{r}"
        );
        let disk = LogDisk::open(dev, None, Options::default()).expect("open");
        let err = disk
            .read_block(7, &mut m)
            .expect_err("corrupt data is not served");
        assert!(err.to_string().contains("logical block 7"), "{err}");
    }

    #[test]
    fn a_flipped_summary_byte_is_reported() {
        let (dev, g) = image();
        let cp = read_checkpoint(&*dev, &g).expect("checkpoint");
        let s = segment_of(&g, cp.map[3].physical);
        flip(&dev, block_of(&g, s, 0) * 512 + 50);
        let r = examine(&*dev).expect("examine");
        assert!(
            r.problems
                .iter()
                .any(|p| p.contains("no valid summary names")),
            "{r}"
        );
    }

    #[test]
    fn a_flipped_checkpoint_byte_falls_back_or_is_refused() {
        let (dev, g) = image();
        let cp = read_checkpoint(&*dev, &g).expect("checkpoint");
        let current = if cp.number % 2 == 1 {
            1
        } else {
            1 + g.checkpoint_blocks()
        };
        // Damage the checkpoint in use: the other slot is used and the damage reported.
        flip(&dev, current * 512 + 70);
        let r = examine(&*dev).expect("examine");
        assert!(r.checkpoint.0 < cp.number, "{r}");
        assert!(
            r.problems.iter().any(|p| p.contains("checkpoint slot")),
            "{r}"
        );
        // Damage the other one too: refused with both reasons.
        let other = if current == 1 {
            1 + g.checkpoint_blocks()
        } else {
            1
        };
        flip(&dev, other * 512 + 70);
        let err = examine(&*dev).expect_err("no checkpoint");
        assert!(err.to_string().contains("no valid checkpoint"), "{err}");
        assert!(LogDisk::open(dev, None, Options::default()).is_err());
    }
}
