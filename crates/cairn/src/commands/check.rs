//! `cairn fsck` and `cairn inspect`: check or describe an image, whatever layer
//! wrote it (the first block's magic says which).

use std::io::Read;
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use cairn_store::FileDevice;
use cairn_store::device::FileOptions;
use cairn_store::logdisk::LogDiskError;
use cairn_store::logdisk::check::{Report, examine};
use cairn_store::logdisk::format::SUPERBLOCK_MAGIC;
use cairn_store::ntl::{self, MapError};
use cairn_store::tier::TierError;
use cairn_store::tier::check as tier_check;
use cairn_store::tier::format::SUPERBLOCK_MAGIC as TIER_MAGIC;
use clap::Args;

use crate::output::{outln, stdout_closed};

/// `cairn fsck --help`'s description.
pub const FSCK_ABOUT: &str = "\
Check an image and say exactly what is wrong with it. Read-only: nothing is
repaired or written.

The first block's magic picks the checker:

  CAIRNLD1  log disk: the superblock; both checkpoint slots (the one not in use
            is reported if damaged); roll-forward through every segment write
            after the checkpoint, exactly as recovery does it; then every
            mapped block's data against its CRC32C, no physical block named by
            two logical blocks, every mapped block named for it by a valid
            segment summary, and the checkpoint's segment usage table against
            its map.
  CAIRNNTL  NVM translation layer: the info block's magic, version, geometry
            and CRC32C, every map entry well formed and in range, and every
            data block mapped at most once (the rest free).
  CAIRNTS1  flash tier cache device: the superblock; both checkpoint slots
            (one that does not decode while the other does is reported:
            recovery falls back to the older); every block of the journal
            ring (one with a good checksum that fails its field checks, or a
            chain that ends at a block a later one says was durable, means
            records lost); recovery run as an open runs it, then its slot
            table: no backing block in two slots, and every cached block's
            data against its CRC32C (a dirty one that fails is data lost).

Exit status, as e2fsck's (fsck never repairs, so never 1 or 2):
  0   the image is clean
  4   problems found and left uncorrected: each is printed on its own line
      (a damaged superblock, no valid checkpoint, bad checksums, ...)
  8   operational error: the image cannot be opened or read, or is not a
      Cairn image at all (no log-disk, NTL or flash-tier magic)
  16  usage error: the command line could not be parsed
A reader that stops early (`cairn fsck IMAGE | head -1`) stops the printing,
not the verdict.

Examples:
  cairn fsck cairn-data/disk.img
  cairn fsck disk.img || echo \"fsck exit status $?\"";

/// `cairn inspect --help`'s description.
pub const INSPECT_ABOUT: &str = "\
Describe an image: its layout (block and segment sizes, checkpoint slots, the
checkpoint in use and how much log follows it), how full its segments are (a
histogram of segment utilisation), and the metrics saved with the last
checkpoint: user and cleaner segment writes, segments read for cleaning,
partial segments, write amplification, the mean segment lifetime (papers/003's
formula 1 and as measured), the NV cache's write hit ratio, checkpoints and
flushes. Problems found on the way are listed as by `cairn fsck`. Read-only.

A flash tier's cache device: its geometry (block size, buckets, journal ring,
the backing device's size), both checkpoint slots (number, replay point, mode,
clean-stop and detached flags), the journal that follows the checkpoint in use
(blocks that chain on, records by kind, torn records recovery skips, where and
why it ends), the blocks cached and dirty after recovery, and how full the
buckets are.";

/// `cairn fsck`.
#[derive(Args, Debug)]
pub struct FsckArgs {
    /// The image: a file or block device holding a log disk, an NTL image or a
    /// flash tier's cache device.
    pub image: PathBuf,
}

/// `cairn inspect`.
#[derive(Args, Debug)]
pub struct InspectArgs {
    /// The image: a file or block device holding a log disk, an NTL image or a
    /// flash tier's cache device.
    pub image: PathBuf,
}

enum Kind {
    LogDisk,
    Ntl,
    Tier,
}

fn kind(image: &PathBuf) -> Result<Kind> {
    note_in_use(image);
    let mut magic = [0u8; 8];
    std::fs::File::open(image)
        .and_then(|mut f| f.read_exact(&mut magic))
        .with_context(|| format!("reading {}", image.display()))?;
    if magic == SUPERBLOCK_MAGIC {
        Ok(Kind::LogDisk)
    } else if magic == ntl::MAGIC {
        Ok(Kind::Ntl)
    } else if magic == TIER_MAGIC {
        Ok(Kind::Tier)
    } else {
        bail!(
            "{}: not a Cairn image (first bytes {:02x?}; expected {:?}, {:?} or {:?})",
            image.display(),
            magic,
            String::from_utf8_lossy(&SUPERBLOCK_MAGIC),
            String::from_utf8_lossy(&ntl::MAGIC),
            String::from_utf8_lossy(&TIER_MAGIC)
        )
    }
}

fn log_disk(image: &PathBuf) -> Result<Report> {
    examine_log_disk(image)?.with_context(|| format!("{}: not a usable log disk", image.display()))
}

/// What `cairn fsck` found; [`Verdict::exit_status`] is e2fsck's number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// No problem.
    Clean,
    /// Problems found in the image and left as they are (fsck never repairs).
    Uncorrected,
}

impl Verdict {
    /// 0 clean, 4 errors left uncorrected (e2fsck's numbers).
    pub fn exit_status(self) -> u8 {
        match self {
            Self::Clean => 0,
            Self::Uncorrected => 4,
        }
    }
}

/// e2fsck's exit status for an operational error: the image cannot be
/// opened or read, or is not a Cairn image.
pub const FSCK_OPERATIONAL_ERROR: u8 = 8;

/// e2fsck's exit status for a usage error.
pub const FSCK_USAGE_ERROR: u8 = 16;

/// Runs `cairn fsck`: `Ok` with the verdict when the image could be examined
/// (damaged or not), `Err` when it could not (exit status 8). Problems are
/// printed as they stand; a closed stdout stops the printing, not the verdict.
pub fn run_fsck(args: &FsckArgs) -> Result<Verdict> {
    let image = args.image.display();
    let (verdict, lines) = match kind(&args.image)? {
        Kind::LogDisk => match examine_log_disk(&args.image)? {
            Err(damage) => (
                Verdict::Uncorrected,
                vec![format!("{image}: not a usable log disk: {damage}")],
            ),
            Ok(report) if report.is_clean() => (
                Verdict::Clean,
                vec![format!(
                    "{image}: clean log disk ({} of {} logical blocks mapped, checkpoint #{}{}, {} segment writes to roll forward)",
                    report.mapped,
                    report.geometry.logical_blocks,
                    report.checkpoint.0,
                    if report.closed {
                        " from a clean close"
                    } else {
                        ""
                    },
                    report.replayed
                )],
            ),
            Ok(report) => problem_lines(&args.image, &report.problems),
        },
        Kind::Ntl => match ntl::fsck(&args.image) {
            Ok(report) => (
                Verdict::Clean,
                vec![format!("{image}: clean NTL image"), report.to_string()],
            ),
            Err(MapError::Region(e)) => {
                return Err(e).with_context(|| format!("reading {image}"));
            }
            Err(damage) => (
                Verdict::Uncorrected,
                vec![format!("{image}: NTL image is damaged: {damage}")],
            ),
        },
        Kind::Tier => match examine_tier(&args.image)? {
            Err(damage) => (
                Verdict::Uncorrected,
                vec![format!("{image}: not a usable tier cache device: {damage}")],
            ),
            Ok(report) if report.is_clean() => (
                Verdict::Clean,
                vec![format!(
                    "{image}: clean flash tier cache device ({} of {} slots cached, {} dirty; \
                     checkpoint #{}, {} journal blocks to replay)",
                    report.cached,
                    report.superblock.geometry.slots(),
                    report.dirty,
                    report.checkpoint.number,
                    report.journal.blocks
                )],
            ),
            Ok(report) => problem_lines(&args.image, &report.problems),
        },
    };
    for line in lines {
        match outln!("{line}") {
            Ok(()) => {}
            Err(_) if stdout_closed() => break,
            Err(e) => return Err(e).context("writing to stdout"),
        }
    }
    Ok(verdict)
}

/// Each problem on its own line, then their count.
fn problem_lines(image: &std::path::Path, problems: &[String]) -> (Verdict, Vec<String>) {
    let image = image.display();
    let mut lines: Vec<String> = problems.iter().map(|p| format!("{image}: {p}")).collect();
    lines.push(format!("{image}: {} problems found", problems.len()));
    (Verdict::Uncorrected, lines)
}

/// A tier cache device's report, `Ok(Err(..))` when the image is damaged
/// beyond a report (bad superblock, no valid checkpoint, truncated), `Err`
/// when it cannot be read.
fn examine_tier(image: &PathBuf) -> Result<Result<tier_check::Report, TierError>> {
    let dev = FileDevice::open(
        image,
        &FileOptions {
            read_only: true,
            ..FileOptions::default()
        },
    )
    .with_context(|| format!("opening {}", image.display()))?;
    match tier_check::examine(&dev) {
        Err(TierError::Device(e)) => Err(e).with_context(|| format!("reading {}", image.display())),
        other => Ok(other),
    }
}

/// A log disk's report, `Ok(Err(..))` when the image is damaged beyond a
/// report (bad superblock, no valid checkpoint, truncated), `Err` when it
/// cannot be read.
fn examine_log_disk(image: &PathBuf) -> Result<Result<Report, LogDiskError>> {
    let dev = FileDevice::open(
        image,
        &FileOptions {
            read_only: true,
            ..FileOptions::default()
        },
    )
    .with_context(|| format!("opening {}", image.display()))?;
    match examine(&dev) {
        Err(LogDiskError::Device(e)) => {
            Err(e).with_context(|| format!("reading {}", image.display()))
        }
        other => Ok(other),
    }
}

/// Runs `cairn inspect`.
pub fn run_inspect(args: &InspectArgs) -> Result<()> {
    match kind(&args.image)? {
        Kind::LogDisk => outln!("{}", log_disk(&args.image)?)?,
        Kind::Ntl => outln!(
            "{}",
            ntl::inspect(&args.image)
                .with_context(|| format!("{}: NTL image is damaged", args.image.display()))?
        )?,
        Kind::Tier => outln!(
            "{}",
            examine_tier(&args.image)?.with_context(|| format!(
                "{}: not a usable tier cache device",
                args.image.display()
            ))?
        )?,
    }
    Ok(())
}

/// Says on stderr when a server holds the image: the check reads it all the
/// same (read-only inspection stays allowed), but what it sees on disk may be
/// behind what that server holds in memory and in its NV cache.
fn note_in_use(image: &std::path::Path) {
    if let Some(holder) = cairn_store::device::holder(image) {
        eprintln!(
            "note: {} is in use by {holder}{}: read as it is on disk now; the server's \
             latest writes may be only in its memory or NV cache until it stops",
            image.display(),
            if holder.exclusive { "" } else { " (read-only)" }
        );
    }
}
