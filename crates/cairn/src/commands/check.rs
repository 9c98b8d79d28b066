//! `cairn fsck` and `cairn inspect`: check or describe an image, whatever layer
//! wrote it (the first block's magic says which).

use std::io::Read;
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use cairn_store::FileDevice;
use cairn_store::device::FileOptions;
use cairn_store::logdisk::check::{Report, examine};
use cairn_store::logdisk::format::SUPERBLOCK_MAGIC;
use cairn_store::ntl;
use clap::Args;

const FSCK_ABOUT: &str = "\
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

Exit status: 0 when the image is clean; 1 when a problem is found (each is
printed on its own line) or the image cannot be read at all.";

const INSPECT_ABOUT: &str = "\
Describe an image: its layout (block and segment sizes, checkpoint slots, the
checkpoint in use and how much log follows it), how full its segments are (a
histogram of segment utilisation), and the metrics saved with the last
checkpoint: user and cleaner segment writes, segments read for cleaning,
partial segments, write amplification, the mean segment lifetime (papers/003's
formula 1 and as measured), the NV cache's write hit ratio, checkpoints and
flushes. Problems found on the way are listed as by `cairn fsck`. Read-only.";

/// `cairn fsck`.
#[derive(Args, Debug)]
#[command(long_about = FSCK_ABOUT)]
pub struct FsckArgs {
    /// The image: a file or block device holding a log disk or an NTL image.
    pub image: PathBuf,
}

/// `cairn inspect`.
#[derive(Args, Debug)]
#[command(long_about = INSPECT_ABOUT)]
pub struct InspectArgs {
    /// The image: a file or block device holding a log disk or an NTL image.
    pub image: PathBuf,
}

enum Kind {
    LogDisk,
    Ntl,
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
    } else {
        bail!(
            "{}: not a Cairn image (first bytes {:02x?}; expected {:?} or {:?})",
            image.display(),
            magic,
            String::from_utf8_lossy(&SUPERBLOCK_MAGIC),
            String::from_utf8_lossy(&ntl::MAGIC)
        )
    }
}

fn log_disk(image: &PathBuf) -> Result<Report> {
    let dev = FileDevice::open(
        image,
        &FileOptions {
            read_only: true,
            ..FileOptions::default()
        },
    )
    .with_context(|| format!("opening {}", image.display()))?;
    examine(&dev).with_context(|| format!("{}: not a usable log disk", image.display()))
}

/// Runs `cairn fsck`.
pub fn run_fsck(args: &FsckArgs) -> Result<()> {
    match kind(&args.image)? {
        Kind::LogDisk => {
            let report = log_disk(&args.image)?;
            if report.is_clean() {
                println!(
                    "{}: clean log disk ({} of {} logical blocks mapped, checkpoint #{}, {} segment writes to roll forward)",
                    args.image.display(),
                    report.mapped,
                    report.geometry.logical_blocks,
                    report.checkpoint.0,
                    report.replayed
                );
                Ok(())
            } else {
                for p in &report.problems {
                    println!("{}: {p}", args.image.display());
                }
                bail!(
                    "{}: {} problems found",
                    args.image.display(),
                    report.problems.len()
                )
            }
        }
        Kind::Ntl => {
            let report = ntl::fsck(&args.image)
                .with_context(|| format!("{}: NTL image is damaged", args.image.display()))?;
            println!("{}: clean NTL image", args.image.display());
            println!("{report}");
            Ok(())
        }
    }
}

/// Runs `cairn inspect`.
pub fn run_inspect(args: &InspectArgs) -> Result<()> {
    match kind(&args.image)? {
        Kind::LogDisk => println!("{}", log_disk(&args.image)?),
        Kind::Ntl => println!(
            "{}",
            ntl::inspect(&args.image)
                .with_context(|| format!("{}: NTL image is damaged", args.image.display()))?
        ),
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
