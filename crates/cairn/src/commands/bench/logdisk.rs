//! `cairn bench logdisk`: 4 KiB random writes through the log disk against the
//! same file device's 512 KiB sequential and 4 KiB random write bandwidth, and
//! write amplification of each cleaner under the hot-spot mix.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::output::outln;
use anyhow::{Context, Result, bail};
use cairn_store::Device;
use cairn_store::device::{DeviceError, FileDevice, FileOptions, IoBuf, MemoryDevice};
use cairn_store::logdisk::{CleanerPolicy, Geometry, LogDisk, Metrics, Options};
use cairn_store::ntl::{MmapRegion, PersistenceRequest, Region};
use indicatif::{ProgressBar, ProgressStyle};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

pub const LOGDISK_LONG_ABOUT: &str = "\
Measure the log-structured disk (papers/003) on a real file device, against the
same device in the same run.

A file of --size bytes is created in a temporary directory under --dir and
opened with O_DIRECT (unless --buffered), so the device's own speed is measured,
not the page cache's. Rows, in order:

  device, sequential 512 KiB writes   passes over a reference file of a quarter
                                      of --size (at least 64 MiB) beside the log
                                      disk's, each ending with fdatasync (so its
                                      bytes are durable, as the log disk's are),
                                      taken between stretches of each log-disk
                                      row's steady state (below): the device is
                                      measured when the log disk is, and a drift
                                      in its speed moves both. The file is
                                      written once first, untimed, so no pass
                                      pays for allocating its blocks. The row
                                      gives all passes together; each log-disk
                                      row is divided by the passes taken during
                                      its own run ('÷ seq').
  device, random 4 KiB writes         pwrite at uniformly random 4 KiB offsets
                                      for --seconds: what the log disk replaces
  log disk, NV cache / volatile       the log disk formatted on the same file at
                                      utilisation 0.4 (logical blocks = 0.4 of
                                      the segment space), filled once, then 4 KiB
                                      writes at uniformly random logical blocks,
                                      --turnover times the device's capacity.
                                      'before cleaning' is the stretch before the
                                      cleaner first runs; 'steady state' is the
                                      second half of the run, cleaner included,
                                      in four stretches: each ends when the log
                                      disk's queued device writes are done, and
                                      a sequential pass runs before each and
                                      after the last, with the log disk idle.
                                      NV mode stages each write in an NV cache
                                      of --nv-size on /dev/shm (cache-line
                                      flush + fence per write, as on persistent
                                      memory) and acknowledges it durable;
                                      volatile mode buffers a segment in DRAM
                                      and flushes only at the end.
                                      A steady-state row's notes give, per user
                                      segment written: victims cleaned, the
                                      cleaner's read bytes as a fraction of the
                                      user bytes, and the wall time the cleaner
                                      waited for its reads (--live-read-below,
                                      --live-read-gap and --cleaner-read-threads
                                      choose how it reads). --background-destage
                                      false writes NV destages and full segment
                                      buffers in the writing thread;
                                      --background-clean false cleans only
                                      synchronously, at the low watermark.
  log disk NV, reads free             (--free-reads; run after the NV rows,
                                      before the volatile ones) the NV rows
                                      again, every read of the log disk served
                                      from a DRAM copy of the device (writes
                                      and flushes still reach it): the log
                                      disk without the cost of the cleaner's
                                      reads. Where this row passes the bar and
                                      the NV row does not, the device's random
                                      reads are what bounds it.

Then write amplification, (user + cleaner segment blocks) / user blocks, for
each cleaner (greedy, cost-benefit, age-sort) under the paper's hot-spot mix
(50 % of writes to 0.8 % of the blocks, 30 % to the next 0.8 %, 10 % to the next
1.6 %, 10 % to the rest — papers/003's 512/512/1024 of 64,000 blocks, scaled) at
utilisation 0.8, against the 1/(1-u) = 5.0 of cleaning segments that are as full
as the disk. Measured over 2 x the logical blocks of writes after a fill, on a
--wa-size file.

The bar (issue 3): log-disk 4 KiB random writes at utilisation 0.4 sustain at
least 70 % of the device's 512 KiB sequential bandwidth.";

/// `cairn bench logdisk` flags.
#[derive(clap::Args, Debug)]
#[allow(clippy::struct_excessive_bools)] // one per on/off flag of the command line
pub struct LogdiskBenchArgs {
    /// Directory for the test files (a temporary directory is made inside and
    /// removed at the end). Put it on the device you want measured.
    #[arg(long, value_name = "DIR", default_value = "./cairn-data")]
    dir: PathBuf,

    /// Size of the device file for the bandwidth rows.
    #[arg(long, value_name = "SIZE", default_value = "1GiB")]
    size: String,

    /// Size of the device file for the write-amplification rows.
    #[arg(long, value_name = "SIZE", default_value = "512MiB")]
    wa_size: String,

    /// Log-disk writes per bandwidth row, as a multiple of the device's capacity.
    #[arg(long, value_name = "F", default_value_t = 2.0)]
    turnover: f64,

    /// Size of the NV cache of the NV rows (a file on /dev/shm, persisted
    /// cache line by cache line as on persistent memory).
    #[arg(long, value_name = "SIZE", default_value = "16MiB")]
    nv_size: String,

    /// Seconds of device random 4 KiB writes.
    #[arg(long, value_name = "N", default_value_t = 3)]
    seconds: u64,

    /// Use the page cache instead of `O_DIRECT` (for file systems without it, such
    /// as tmpfs; the numbers then measure memory, not the device).
    #[arg(long)]
    buffered: bool,

    /// Seed of the random offsets.
    #[arg(long, value_name = "N", default_value_t = 42)]
    seed: u64,

    /// The cleaner reads only the live blocks of a victim whose live fraction
    /// is below this (0: every victim whole, 1: every victim live-only).
    #[arg(long, value_name = "F", default_value_t = Options::default().live_read_below)]
    live_read_below: f64,

    /// Dead blocks a live-only cleaner read may bridge.
    #[arg(long, value_name = "N", default_value_t = Options::default().live_read_gap)]
    live_read_gap: u32,

    /// Threads the cleaner reads victims with (where its reads are not
    /// batched).
    #[arg(long, value_name = "N", default_value_t = Options::default().cleaner_read_threads)]
    cleaner_read_threads: u32,

    /// Issue each cleaner pass's reads as one batch, all in flight at once
    /// (false: on --cleaner-read-threads threads, one read each).
    #[arg(long, value_name = "BOOL", default_value_t = Options::default().batch_reads,
          action = clap::ArgAction::Set)]
    batch_reads: bool,

    /// Write destaged segments (NV mode), full segment buffers (volatile
    /// mode), cleaner passes and checkpoints on background writer threads
    /// (false: in the writing thread).
    #[arg(long, value_name = "BOOL", default_value_t = Options::default().background_destage,
          action = clap::ArgAction::Set)]
    background_destage: bool,

    /// Threads of the background writer: with 2, two segment writes are on
    /// the device at once (1: one at a time, in the order queued).
    #[arg(long, value_name = "N", default_value_t = Options::default().writer_threads)]
    writer_threads: u32,

    /// Also run the NV rows with every read of the log disk (the cleaner's)
    /// served from a DRAM copy of the device: what the log disk sustains
    /// when its reads cost nothing. The gap to the plain NV row is the
    /// device's read cost; the gap from there to the sequential row is
    /// the log disk's own (its writes, flushes, checkpoints, CPU).
    #[arg(long)]
    free_reads: bool,

    /// Clean in the background, the cleaner's reads overlapping user writes
    /// (false: synchronously, at the low watermark).
    #[arg(long, value_name = "BOOL", default_value_t = Options::default().background_clean,
          action = clap::ArgAction::Set)]
    background_clean: bool,

    /// Each segment names the next, so recovery after a crash reads only the
    /// segments written since the last checkpoint (false: every segment's
    /// first block; no segment held for a checkpoint).
    #[arg(long, value_name = "BOOL", default_value_t = Options::default().chain,
          action = clap::ArgAction::Set)]
    recovery_chain: bool,
}

impl LogdiskBenchArgs {
    fn options(&self) -> Options {
        Options {
            live_read_below: self.live_read_below,
            live_read_gap: self.live_read_gap,
            cleaner_read_threads: self.cleaner_read_threads,
            batch_reads: self.batch_reads,
            background_destage: self.background_destage,
            writer_threads: self.writer_threads,
            background_clean: self.background_clean,
            chain: self.recovery_chain,
            ..Options::default()
        }
    }
}

const B: usize = 4096;
const SEGMENT_BLOCKS: u32 = 128;

/// Run `cairn bench logdisk`.
pub fn run(args: &LogdiskBenchArgs) -> Result<()> {
    let size =
        cairn_sim::parse_bytes(&args.size).with_context(|| format!("--size {:?}", args.size))?;
    let wa_size = cairn_sim::parse_bytes(&args.wa_size)
        .with_context(|| format!("--wa-size {:?}", args.wa_size))?;
    for (flag, s) in [("--size", size), ("--wa-size", wa_size)] {
        if s < 64 << 20 {
            bail!(
                "{flag} must be at least 64MiB (the log disk needs room for segments and cleaning)"
            );
        }
    }
    let nv_size = cairn_sim::parse_bytes(&args.nv_size)
        .with_context(|| format!("--nv-size {:?}", args.nv_size))?;
    if nv_size < 1 << 20 || nv_size > size / 2 {
        bail!(
            "--nv-size must be from 1MiB to half of --size ({} MiB)",
            size >> 21
        );
    }
    if !(args.turnover > 0.0 && args.turnover <= 100.0) {
        bail!("--turnover must be above 0 and at most 100");
    }
    if !(0.0..=1.0).contains(&args.live_read_below) {
        bail!("--live-read-below must be a fraction from 0 to 1");
    }
    if !(1..=64).contains(&args.cleaner_read_threads) {
        bail!("--cleaner-read-threads must be from 1 to 64");
    }
    if !(1..=16).contains(&args.writer_threads) {
        bail!("--writer-threads must be from 1 to 16");
    }
    std::fs::create_dir_all(&args.dir)
        .with_context(|| format!("creating {}", args.dir.display()))?;
    let tmp = tempfile::tempdir_in(&args.dir)
        .with_context(|| format!("temporary directory in {}", args.dir.display()))?;
    let image = tmp.path().join("logdisk.img");
    let shm = Path::new("/dev/shm");
    let nv_tmp = if shm.is_dir() {
        tempfile::tempdir_in(shm).ok()
    } else {
        None
    };
    let nv_path = nv_tmp
        .as_ref()
        .map_or_else(|| tmp.path().join("nv"), |d| d.path().join("nv"));

    let direct = !args.buffered;
    let dev = open_device(&image, size, direct)?;
    outln!(
        "device: {} ({}), {} MiB; NV cache: {} MiB at {}",
        image.display(),
        if direct { "O_DIRECT" } else { "page cache" },
        size >> 20,
        nv_size >> 20,
        nv_path.display()
    )?;

    let rand = random_device(&dev, args.seconds, args.seed)?;
    drop(dev);
    // The reference file: written once first, untimed, so that no timed pass
    // also allocates its blocks in the file system under it (slower).
    let reference_len = (size / 4).max(64 << 20) / (512 << 10) * (512 << 10);
    let reference = open_device(&tmp.path().join("reference.img"), reference_len, direct)?;
    sequential(&reference, Some("device: writing the reference file"))?;
    let mut rows: Vec<(String, f64, f64, String)> = Vec::new();
    let mut all_passes = Passes::default();
    let mut nv_ratio = None;
    let modes: &[Mode] = if args.free_reads {
        &[Mode::Nv, Mode::NvReadsFree, Mode::Volatile]
    } else {
        &[Mode::Nv, Mode::Volatile]
    };
    for &mode in modes {
        let _ = std::fs::remove_file(&image);
        let _ = std::fs::remove_file(&nv_path);
        let dev = open_device(&image, size, direct)?;
        let nv_spec = (mode != Mode::Volatile).then_some((nv_path.as_path(), nv_size));
        let r = if mode == Mode::NvReadsFree {
            let copy = MemoryDevice::new(dev.len());
            logdisk_random(FreeReads { file: dev, copy }, nv_spec, &reference, args)?
        } else {
            logdisk_random(dev, nv_spec, &reference, args)?
        };
        let seq = r.passes.mib_s();
        all_passes.add(&r.passes);
        let mode_name = match mode {
            Mode::Nv => "NV cache",
            Mode::NvReadsFree => "NV, reads free",
            Mode::Volatile => "volatile",
        };
        rows.push((
            format!("log disk {mode_name}, U 0.4, before cleaning"),
            r.before,
            seq,
            format!("{} writes", r.before_writes),
        ));
        rows.push((
            format!("log disk {mode_name}, U 0.4, steady state"),
            r.steady,
            seq,
            format!(
                "WA {:.2}; per user segment: {:.2} victims, cleaner read {:.2} of its bytes in {:.0} µs; \
                 sequential {seq:.1} ({} passes, {:.1}-{:.1})",
                r.steady_metrics.write_amplification().unwrap_or(1.0),
                per(
                    r.steady_metrics.cleaner_segment_reads,
                    r.steady_metrics.user_segment_writes
                ),
                per(
                    r.steady_metrics.cleaner_read_bytes,
                    r.steady_metrics.user_bytes
                ),
                per(
                    r.steady_metrics.cleaner_read_ns,
                    r.steady_metrics.user_segment_writes
                ) / 1e3,
                r.passes.each.len(),
                r.passes.slowest(),
                r.passes.fastest(),
            ),
        ));
        if mode == Mode::Nv {
            nv_ratio = Some(r.steady / seq);
        }
    }
    drop(reference);
    let seq = all_passes.mib_s();
    rows.insert(
        0,
        (
            "device, sequential 512 KiB writes".into(),
            seq,
            seq,
            format!(
                "{} passes of {} MiB during the log-disk rows, {:.1}-{:.1}",
                all_passes.each.len(),
                reference_len >> 20,
                all_passes.slowest(),
                all_passes.fastest()
            ),
        ),
    );
    rows.insert(
        1,
        (
            "device, random 4 KiB writes".into(),
            rand,
            seq,
            String::new(),
        ),
    );
    outln!()?;
    outln!("{:<46} {:>9} {:>8}  notes", "row", "MiB/s", "÷ seq")?;
    for (name, mib, seq, note) in &rows {
        outln!("{name:<46} {mib:>9.1} {:>8.3}  {note}", mib / seq)?;
    }
    if let Some(ratio) = nv_ratio {
        outln!(
            "bar: log-disk 4 KiB random writes (NV cache, steady state) >= 0.70 x sequential: {ratio:.3} {}",
            if ratio >= 0.70 { "PASS" } else { "FAIL" }
        )?;
    }

    outln!()?;
    outln!(
        "write amplification, hot-spot mix, U 0.8, {} MiB device:",
        wa_size >> 20
    )?;
    outln!(
        "{:<13} {:>6} {:>9} {:>8} {:>22} {:>9}",
        "cleaner",
        "WA",
        "1/(1-u)",
        "÷ base",
        "cleaner reads/user seg",
        "MiB/s"
    )?;
    for cleaner in [
        CleanerPolicy::Greedy,
        CleanerPolicy::CostBenefit,
        CleanerPolicy::AgeSort,
    ] {
        let _ = std::fs::remove_file(&image);
        let dev = open_device(&image, wa_size, direct)?;
        let (m, mib) = hot_spot(dev, cleaner, args)?;
        let wa = m.write_amplification().unwrap_or(1.0);
        outln!(
            "{:<13} {wa:>6.2} {:>9.2} {:>8.3} {:>22.2} {mib:>9.1}",
            cleaner.name(),
            5.0,
            wa / 5.0,
            per(m.cleaner_segment_reads, m.user_segment_writes),
        )?;
    }
    Ok(())
}

/// Which log disk a bandwidth row measures.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// With the NV cache (the bar's row).
    Nv,
    /// With the NV cache, its reads served from DRAM (`--free-reads`).
    NvReadsFree,
    /// Without an NV cache.
    Volatile,
}

/// The file device with a DRAM copy that serves every read (`--free-reads`):
/// writes and flushes reach the file as always, so the log disk pays for
/// everything but its reads.
struct FreeReads {
    file: FileDevice,
    copy: MemoryDevice,
}

impl Device for FreeReads {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<(), DeviceError> {
        self.copy.read_at(buf, offset)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> Result<(), DeviceError> {
        self.copy.write_at(buf, offset)?;
        self.file.write_at(buf, offset)
    }

    fn flush(&self) -> Result<(), DeviceError> {
        self.file.flush()
    }

    fn discard(&self, offset: u64, len: u64) -> Result<(), DeviceError> {
        self.copy.discard(offset, len)?;
        self.file.discard(offset, len)
    }

    fn len(&self) -> u64 {
        self.file.len()
    }

    fn alignment(&self) -> u64 {
        self.file.alignment()
    }

    fn describe(&self) -> String {
        format!("{}, reads from a DRAM copy", self.file.describe())
    }
}

fn per(a: u64, b: u64) -> f64 {
    if b == 0 { 0.0 } else { a as f64 / b as f64 }
}

fn open_device(path: &Path, size: u64, direct: bool) -> Result<FileDevice> {
    FileDevice::open(
        path,
        &FileOptions {
            create_len: Some(size),
            direct,
            read_only: false,
            ..FileOptions::default()
        },
    )
    .with_context(|| {
        format!(
            "opening {}{}",
            path.display(),
            if direct {
                " with O_DIRECT (use --buffered on file systems without it)"
            } else {
                ""
            }
        )
    })
}

fn progress(len: u64, what: &str) -> ProgressBar {
    let bar = ProgressBar::new(len);
    bar.set_style(
        ProgressStyle::with_template("{msg:<40} [{bar:30}] {percent:>3}% {elapsed}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    bar.set_message(what.to_string());
    bar
}

fn mib_s(bytes: u64, elapsed: Duration) -> f64 {
    bytes as f64 / f64::from(1u32 << 20) / elapsed.as_secs_f64().max(1e-9)
}

/// Sequential passes over the reference file: bytes and time of each.
#[derive(Default)]
struct Passes {
    each: Vec<(u64, Duration)>,
}

impl Passes {
    fn add(&mut self, other: &Passes) {
        self.each.extend_from_slice(&other.each);
    }

    /// All passes together: their bytes over their time.
    fn mib_s(&self) -> f64 {
        let bytes = self.each.iter().map(|p| p.0).sum();
        mib_s(bytes, self.each.iter().map(|p| p.1).sum())
    }

    fn rates(&self) -> impl Iterator<Item = f64> + '_ {
        self.each.iter().map(|&(bytes, time)| mib_s(bytes, time))
    }

    fn slowest(&self) -> f64 {
        self.rates().fold(f64::INFINITY, f64::min)
    }

    fn fastest(&self) -> f64 {
        self.rates().fold(0.0, f64::max)
    }

    /// One timed pass over `dev`.
    fn pass(&mut self, dev: &FileDevice) -> Result<()> {
        let start = Instant::now();
        sequential(dev, None)?;
        let elapsed = start.elapsed();
        self.each
            .push((dev.len() / (512 << 10) * (512 << 10), elapsed));
        Ok(())
    }
}

/// One pass of 512 KiB writes over the device, then a flush; with `what`,
/// a progress bar.
fn sequential(dev: &FileDevice, what: Option<&str>) -> Result<f64> {
    let chunk = 512 << 10;
    let mut buf = IoBuf::zeroed(chunk);
    buf.fill(0x5a);
    let n = dev.len() / chunk as u64;
    let bar = what.map_or_else(ProgressBar::hidden, |what| progress(n, what));
    let start = Instant::now();
    for i in 0..n {
        buf[..8].copy_from_slice(&i.to_le_bytes());
        dev.write_at(&buf, i * chunk as u64)?;
        bar.inc(1);
    }
    dev.flush()?;
    let elapsed = start.elapsed();
    bar.finish_and_clear();
    Ok(mib_s(n * chunk as u64, elapsed))
}

/// Random 4 KiB writes for `seconds`, then a flush.
fn random_device(dev: &FileDevice, seconds: u64, seed: u64) -> Result<f64> {
    let mut buf = IoBuf::zeroed(B);
    buf.fill(0xa5);
    let blocks = dev.len() / B as u64;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let bar = progress(seconds, "device: random 4 KiB writes");
    let limit = Duration::from_secs(seconds);
    let start = Instant::now();
    let mut writes = 0u64;
    while start.elapsed() < limit {
        for _ in 0..64 {
            let at = rng.random_range(0..blocks) * B as u64;
            dev.write_at(&buf, at)?;
        }
        writes += 64;
        bar.set_position(start.elapsed().as_secs());
    }
    dev.flush()?;
    let elapsed = start.elapsed();
    bar.finish_and_clear();
    Ok(mib_s(writes * B as u64, elapsed))
}

fn geometry(size: u64, utilisation: f64) -> Result<Geometry> {
    // Superblock, two checkpoints and the segments must fit: start from the
    // whole file and shrink until the image does.
    let mut segments = (size / (u64::from(SEGMENT_BLOCKS) * B as u64)) as u32;
    loop {
        let data_blocks = u64::from(segments) * u64::from(SEGMENT_BLOCKS - 1);
        let geo = Geometry {
            block_size: B as u32,
            segment_blocks: SEGMENT_BLOCKS,
            segments,
            logical_blocks: (data_blocks as f64 * utilisation) as u64,
        };
        if geo.image_blocks() * B as u64 <= size {
            geo.validate().context("log disk geometry")?;
            return Ok(geo);
        }
        segments -= 1;
    }
}

fn nv_region((path, len): (&Path, u64)) -> Result<Box<dyn Region>> {
    let region = MmapRegion::open(path, len, true, PersistenceRequest::CacheLine)
        .with_context(|| format!("NV cache region {}", path.display()))?;
    Ok(Box::new(region))
}

struct RandomRun {
    before: f64,
    before_writes: u64,
    steady: f64,
    steady_metrics: Metrics,
    /// The reference passes taken between the steady state's stretches.
    passes: Passes,
}

/// Stretches the steady state is measured in, a reference pass before each
/// and after the last.
const STRETCHES: u64 = 4;

/// Fill at utilisation 0.4, then uniformly random 4 KiB writes.
fn logdisk_random<D: Device + 'static>(
    dev: D,
    nv: Option<(&Path, u64)>,
    reference: &FileDevice,
    args: &LogdiskBenchArgs,
) -> Result<RandomRun> {
    let size = dev.len();
    let geo = geometry(size, 0.4)?;
    let region = nv.map(nv_region).transpose()?;
    let disk = LogDisk::format(dev, geo, region, args.options())?;
    let label = if nv.is_some() { "NV cache" } else { "volatile" };
    fill(
        &disk,
        geo.logical_blocks,
        &format!("log disk {label}: fill"),
    )?;
    let total = ((size / B as u64) as f64 * args.turnover) as u64;
    let half = total / 2;
    let mut rng = ChaCha8Rng::seed_from_u64(args.seed);
    let mut buf = IoBuf::zeroed(B);
    buf.fill(0x3c);
    let bar = progress(total, &format!("log disk {label}: random 4 KiB writes"));
    let start = Instant::now();
    let start_metrics = disk.metrics();
    let mut before: Option<(u64, Duration)> = None;
    let mut mid_metrics: Option<Metrics> = None;
    let mut passes = Passes::default();
    // The steady state's stretches: when each started, and their total time.
    let stretch = (total - half).div_ceil(STRETCHES).max(1);
    let mut stretch_start = Instant::now();
    let mut steady_time = Duration::ZERO;
    for i in 0..total {
        if i >= half && (i - half).is_multiple_of(stretch) {
            if i == half {
                mid_metrics = Some(disk.metrics());
                before.get_or_insert((half, start.elapsed()));
            } else {
                disk.drain()?;
                steady_time += stretch_start.elapsed();
            }
            // The log disk is idle: the device alone.
            passes.pass(reference)?;
            stretch_start = Instant::now();
        }
        let l = rng.random_range(0..geo.logical_blocks);
        buf[..8].copy_from_slice(&i.to_le_bytes());
        disk.write_blocks(l, &buf)?;
        if i % 1024 == 1023 {
            bar.set_position(i + 1);
            if before.is_none()
                && disk.metrics().cleaner_segment_reads > start_metrics.cleaner_segment_reads
            {
                before = Some((i + 1, start.elapsed()));
            }
        }
    }
    disk.flush()?;
    disk.drain()?;
    steady_time += stretch_start.elapsed();
    passes.pass(reference)?;
    bar.finish_and_clear();
    let mid_metrics = mid_metrics.context("--turnover too small for two halves")?;
    let (before_writes, before_time) = before.context("--turnover too small for two halves")?;
    let steady_metrics = disk.metrics().since(&mid_metrics);
    disk.close()?;
    Ok(RandomRun {
        before: mib_s(before_writes * B as u64, before_time),
        before_writes,
        steady: mib_s((total - half) * B as u64, steady_time),
        steady_metrics,
        passes,
    })
}

fn fill<D: Device + 'static>(disk: &LogDisk<D>, blocks: u64, what: &str) -> Result<()> {
    let per = u64::from(SEGMENT_BLOCKS - 1);
    let mut buf = IoBuf::zeroed(per as usize * B);
    let bar = progress(blocks, what);
    let mut l = 0;
    while l < blocks {
        let n = per.min(blocks - l);
        buf[..8].copy_from_slice(&l.to_le_bytes());
        disk.write_blocks(l, &buf[..n as usize * B])?;
        l += n;
        bar.set_position(l);
    }
    disk.flush()?;
    bar.finish_and_clear();
    Ok(())
}

/// Hot-spot writes at utilisation 0.8 with `cleaner`; metrics over the
/// measured writes, and their bandwidth.
fn hot_spot<D: Device + 'static>(
    dev: D,
    cleaner: CleanerPolicy,
    args: &LogdiskBenchArgs,
) -> Result<(Metrics, f64)> {
    let seed = args.seed;
    let geo = geometry(dev.len(), 0.8)?;
    let options = Options {
        cleaner,
        ..args.options()
    };
    let disk = LogDisk::format(dev, geo, None, options)?;
    fill(
        &disk,
        geo.logical_blocks,
        &format!("{}: fill", cleaner.name()),
    )?;
    // papers/003's regions: 512, 512 and 1,024 blocks of 64,000, scaled.
    let n = geo.logical_blocks;
    let scale = |blocks: u64| (blocks * n / 64_000).max(1);
    let regions = [(scale(512), 0.5), (scale(512), 0.3), (scale(1024), 0.1)];
    let hot: u64 = regions.iter().map(|r| r.0).sum();
    let total = 2 * n;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut buf = IoBuf::zeroed(B);
    let bar = progress(total, &format!("{}: hot-spot writes", cleaner.name()));
    let start_metrics = disk.metrics();
    let start = Instant::now();
    for i in 0..total {
        let mut x: f64 = rng.random();
        let mut base = 0;
        let mut pick = None;
        for &(blocks, share) in &regions {
            if x < share {
                pick = Some(base + rng.random_range(0..blocks));
                break;
            }
            x -= share;
            base += blocks;
        }
        let l = pick.unwrap_or_else(|| rng.random_range(hot..n));
        buf[..8].copy_from_slice(&i.to_le_bytes());
        disk.write_blocks(l, &buf)?;
        if i % 1024 == 1023 {
            bar.set_position(i + 1);
        }
    }
    disk.flush()?;
    let elapsed = start.elapsed();
    bar.finish_and_clear();
    let m = disk.metrics().since(&start_metrics);
    disk.close()?;
    Ok((m, mib_s(total * B as u64, elapsed)))
}
