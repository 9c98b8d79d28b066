//! `cairn bench ntl`: the NVM translation layer against pread/pwrite on the same
//! kind of file, `O_DIRECT` where the file system allows it, and memcpy between DRAM
//! buffers (the physical limit), same run, same machine.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use cairn_store::Device;
use cairn_store::ntl::{
    Btt, Geometry, MmapRegion, NtlDevice, PersistenceRequest, Region, WriteMode, collapse_buffer,
};
use indicatif::{ProgressBar, ProgressStyle};

use crate::output::table;

pub const NTL_LONG_ABOUT: &str = "\
Measure the NVM translation layer (NTL) against its peers on this machine, one
after another, each for --seconds per row:

  ntl            the NTL (atomic block writes) over a file in /dev/shm mapped
                 with MmapRegion, cache-line persistence (non-temporal stores
                 for whole lines, CLWB/CLFLUSHOPT/CLFLUSH for partial ones, then
                 SFENCE): what a DAX deployment on real persistent memory pays,
                 so this is the column the bars judge
  in-place       the same with WriteMode::InPlace: writes overwrite the mapped
                 block (not torn-write safe); the price-of-atomicity baseline
  ntl/none       atomic, no persistence work (an eADR platform)
  in-place/none  in-place, no persistence work
  pread          pread/pwrite on a file in /dev/shm (the page-cache path: a
                 system call and a copy through the kernel per I/O)
  O_DIRECT       pread/pwrite with O_DIRECT on /dev/shm. tmpfs accepts the flag
                 since Linux 6.6 (it has no block device: the copy still goes to
                 its page cache pages, minus the readahead and the page-cache
                 bookkeeping); older kernels refuse it (EINVAL) and the cell says
                 why. --direct-dir DIR adds O_DIRECT on a file in DIR (a
                 disk-backed file system: another medium, for reference, never
                 judged)
  memcpy         copies between DRAM buffers of the same size: the limit

Rows: 4 KiB random reads and writes (kIOPS) and 1 MiB sequential reads and
writes (MiB/s), with 1 and 2 threads, each cell run --rounds times
interleaved with the others, keeping its best round. Every target is pre-filled first, so
reads return data and in-place writes really go in place; random offsets are
block-aligned and uniform over the whole volume (xorshift, fixed seeds).

/dev/shm is DRAM: no flush makes it survive power loss, so no persistence level
is true durability there. MmapRegion's default on a page-cache file is msync,
which on tmpfs is a system call that writes nothing back; the cache-line flush
columns charge the NTL what real persistent memory costs, and the none columns
show the upper bound.

Bars (PASS/FAIL, on the ntl column, every thread count): 4 KiB random read and
write at least 2x pread/pwrite; 1 MiB sequential read and write at least 70 %
of memcpy; atomic 4 KiB random writes cost at most 25 % against in-place (same
persistence).";

/// `cairn bench ntl` flags.
#[derive(clap::Args, Debug)]
pub struct NtlBenchArgs {
    /// Seconds per row and target (fractions allowed).
    #[arg(long, value_name = "S", default_value_t = 2.0)]
    seconds: f64,

    /// Volume size (each target's), e.g. 1GiB; at least 16MiB.
    #[arg(long, value_name = "SIZE", default_value = "1GiB")]
    size: String,

    /// Rounds over every cell (row x target), interleaved; each cell reports its
    /// best round (the machine may be shared and noisy).
    #[arg(long, value_name = "N", default_value_t = 3)]
    rounds: usize,

    /// Measure only these columns (repeatable): ntl, in-place, ntl-none,
    /// in-place-none, pread, direct, direct-disk, memcpy. Bars whose columns
    /// are missing fail.
    #[arg(long = "target", value_name = "NAME", value_parser = parse_target)]
    targets: Vec<Target>,

    /// Also measure `O_DIRECT` pread/pwrite on a scratch file in DIR (a disk-backed
    /// file system; the file is removed afterwards).
    #[arg(long, value_name = "DIR")]
    direct_dir: Option<PathBuf>,
}

fn parse_target(name: &str) -> Result<Target, String> {
    Ok(match name {
        "ntl" => Target::Ntl,
        "in-place" => Target::InPlace,
        "ntl-none" => Target::NtlNone,
        "in-place-none" => Target::InPlaceNone,
        "pread" => Target::Pread,
        "direct" => Target::DirectShm,
        "direct-disk" => Target::DirectDisk,
        "memcpy" => Target::Memcpy,
        _ => {
            return Err(format!(
                "unknown target {name:?} (ntl, in-place, ntl-none, in-place-none, pread, direct, direct-disk, memcpy)"
            ));
        }
    })
}

/// What to measure.
#[derive(Clone, Debug)]
pub struct Config {
    /// Bytes per target.
    pub size: u64,
    /// Seconds per cell.
    pub seconds: f64,
    /// Where to measure `O_DIRECT` on a disk-backed file, if anywhere.
    pub direct_dir: Option<PathBuf>,
    /// Rounds over every cell; each cell keeps its best round.
    pub rounds: usize,
    /// Columns to measure (empty: all).
    pub targets: Vec<Target>,
    /// No progress bar.
    pub quiet: bool,
}

/// Read or write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Read.
    Read,
    /// Write.
    Write,
}

/// One row of the table.
#[derive(Clone, Copy, Debug)]
pub struct Workload {
    /// Row label.
    pub name: &'static str,
    /// Read or write.
    pub op: Op,
    /// Bytes per I/O.
    pub block: u64,
    /// Uniform random offsets (else sequential, one stream per thread).
    pub random: bool,
    /// Threads issuing I/O.
    pub threads: usize,
}

impl Workload {
    /// Reported in kIOPS (4 KiB random) rather than MiB/s.
    pub fn iops(&self) -> bool {
        self.random
    }
}

const KIB4: u64 = 4096;
const MIB: u64 = 1 << 20;

/// The rows.
pub const WORKLOADS: [Workload; 8] = [
    Workload {
        name: "rand read 4k, 1 thread",
        op: Op::Read,
        block: KIB4,
        random: true,
        threads: 1,
    },
    Workload {
        name: "rand read 4k, 2 threads",
        op: Op::Read,
        block: KIB4,
        random: true,
        threads: 2,
    },
    Workload {
        name: "rand write 4k, 1 thread",
        op: Op::Write,
        block: KIB4,
        random: true,
        threads: 1,
    },
    Workload {
        name: "rand write 4k, 2 threads",
        op: Op::Write,
        block: KIB4,
        random: true,
        threads: 2,
    },
    Workload {
        name: "seq read 1M, 1 thread",
        op: Op::Read,
        block: MIB,
        random: false,
        threads: 1,
    },
    Workload {
        name: "seq read 1M, 2 threads",
        op: Op::Read,
        block: MIB,
        random: false,
        threads: 2,
    },
    Workload {
        name: "seq write 1M, 1 thread",
        op: Op::Write,
        block: MIB,
        random: false,
        threads: 1,
    },
    Workload {
        name: "seq write 1M, 2 threads",
        op: Op::Write,
        block: MIB,
        random: false,
        threads: 2,
    },
];

/// The columns, in table order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// NTL, atomic, cache-line flush.
    Ntl,
    /// NTL, in place, cache-line flush.
    InPlace,
    /// NTL, atomic, no persistence.
    NtlNone,
    /// NTL, in place, no persistence.
    InPlaceNone,
    /// pread/pwrite on /dev/shm.
    Pread,
    /// `O_DIRECT` on /dev/shm.
    DirectShm,
    /// `O_DIRECT` on a file in `--direct-dir`.
    DirectDisk,
    /// memcpy between DRAM buffers.
    Memcpy,
}

impl Target {
    /// Column label.
    pub fn label(self) -> &'static str {
        match self {
            Self::Ntl => "ntl",
            Self::InPlace => "in-place",
            Self::NtlNone => "ntl/none",
            Self::InPlaceNone => "in-place/none",
            Self::Pread => "pread",
            Self::DirectShm => "O_DIRECT",
            Self::DirectDisk => "O_DIRECT disk",
            Self::Memcpy => "memcpy",
        }
    }

    fn ntl(self) -> Option<(WriteMode, PersistenceRequest)> {
        match self {
            Self::Ntl => Some((WriteMode::Atomic, PersistenceRequest::CacheLine)),
            Self::InPlace => Some((WriteMode::InPlace, PersistenceRequest::CacheLine)),
            Self::NtlNone => Some((WriteMode::Atomic, PersistenceRequest::None)),
            Self::InPlaceNone => Some((WriteMode::InPlace, PersistenceRequest::None)),
            _ => None,
        }
    }
}

/// Everything one run measured.
#[derive(Debug)]
pub struct Measured {
    /// Bytes per target.
    pub size: u64,
    /// Seconds per cell and round.
    pub seconds: f64,
    /// Rounds per cell.
    pub rounds: usize,
    /// The columns measured.
    pub targets: Vec<Target>,
    /// `values[workload][target]`: MiB/s, or why the cell is empty.
    pub values: Vec<Vec<Result<f64, String>>>,
    /// The NTL region's description with cache-line persistence.
    pub ntl_region: String,
    /// The `O_DIRECT` disk file's directory, when measured.
    pub direct_dir: Option<PathBuf>,
}

impl Measured {
    /// MiB/s of `target` on workload number `row`.
    pub fn mib_s(&self, row: usize, target: Target) -> Option<f64> {
        let column = self.targets.iter().position(|&t| t == target)?;
        self.values.get(row)?.get(column)?.as_ref().ok().copied()
    }

    /// `a / b` on workload `row`.
    pub fn ratio(&self, row: usize, a: Target, b: Target) -> Option<f64> {
        match (self.mib_s(row, a), self.mib_s(row, b)) {
            (Some(x), Some(y)) if y > 0.0 => Some(x / y),
            _ => None,
        }
    }

    /// Rows of workloads matching `op`, `random`.
    pub fn rows(op: Op, random: bool) -> impl Iterator<Item = usize> {
        WORKLOADS
            .iter()
            .enumerate()
            .filter(move |(_, w)| w.op == op && w.random == random)
            .map(|(i, _)| i)
    }

    /// The bars.
    pub fn bars(&self) -> Vec<BarResult> {
        let mut bars = Vec::new();
        let mut worst = |name: &str, op, random, a, b, need: f64, cost: bool| {
            let ratios: Vec<(usize, Option<f64>)> = Self::rows(op, random)
                .map(|row| (WORKLOADS[row].threads, self.ratio(row, a, b)))
                .collect();
            let min =
                ratios
                    .iter()
                    .map(|(_, r)| r.unwrap_or(f64::NAN))
                    .fold(f64::INFINITY, |m, r| {
                        if r.is_nan() || m.is_nan() {
                            f64::NAN
                        } else {
                            m.min(r)
                        }
                    });
            let shown = ratios
                .iter()
                .map(|(t, r)| {
                    let v = r.map_or("-".to_owned(), |r| {
                        if cost {
                            format!("{:.0} %", (1.0 - r) * 100.0)
                        } else {
                            format!("{r:.2}x")
                        }
                    });
                    format!("{t} thr {v}")
                })
                .collect::<Vec<_>>()
                .join(", ");
            bars.push(BarResult {
                name: name.to_owned(),
                measured: shown,
                pass: min.is_finite() && min >= need,
            });
        };
        worst(
            "NTL 4 KiB random read >= 2x pread",
            Op::Read,
            true,
            Target::Ntl,
            Target::Pread,
            2.0,
            false,
        );
        worst(
            "NTL 4 KiB random write >= 2x pwrite",
            Op::Write,
            true,
            Target::Ntl,
            Target::Pread,
            2.0,
            false,
        );
        worst(
            "NTL 1 MiB sequential read >= 70 % of memcpy",
            Op::Read,
            false,
            Target::Ntl,
            Target::Memcpy,
            0.7,
            false,
        );
        worst(
            "NTL 1 MiB sequential write >= 70 % of memcpy",
            Op::Write,
            false,
            Target::Ntl,
            Target::Memcpy,
            0.7,
            false,
        );
        worst(
            "atomic 4 KiB random write costs <= 25 % vs in-place (cache-line flush)",
            Op::Write,
            true,
            Target::Ntl,
            Target::InPlace,
            0.75,
            true,
        );
        worst(
            "atomic 4 KiB random write costs <= 25 % vs in-place (no persistence)",
            Op::Write,
            true,
            Target::NtlNone,
            Target::InPlaceNone,
            0.75,
            true,
        );
        bars
    }
}

/// One bar's verdict.
#[derive(Clone, Debug)]
pub struct BarResult {
    /// What is required.
    pub name: String,
    /// The measured ratios, per thread count.
    pub measured: String,
    /// Whether every thread count meets it.
    pub pass: bool,
}

pub fn run(args: &NtlBenchArgs, quiet: bool) -> Result<()> {
    let size =
        cairn_sim::parse_bytes(&args.size).with_context(|| format!("--size {:?}", args.size))?;
    let config = Config {
        size,
        seconds: args.seconds,
        direct_dir: args.direct_dir.clone(),
        rounds: args.rounds,
        targets: args.targets.clone(),
        quiet,
    };
    let measured = measure(&config)?;
    let mut out = crate::output::stdout();
    print_report(&mut out, &measured)?;
    Ok(())
}

/// Prints the table, the ratios and the bars.
pub fn print_report(out: &mut dyn std::io::Write, m: &Measured) -> std::io::Result<()> {
    writeln!(
        out,
        "NTL bench: {} MiB per target, best of {} x {:.2} s per cell; 4k rows in kIOPS, 1M rows in MiB/s",
        m.size >> 20,
        m.rounds,
        m.seconds
    )?;
    writeln!(out, "ntl region: {}", m.ntl_region)?;
    let mut header = vec!["row".to_owned()];
    header.extend(m.targets.iter().map(|t| t.label().to_owned()));
    let mut notes: Vec<String> = Vec::new();
    let rows: Vec<Vec<String>> = WORKLOADS
        .iter()
        .zip(&m.values)
        .map(|(w, values)| {
            let mut row = vec![w.name.to_owned()];
            for (target, v) in m.targets.iter().zip(values) {
                row.push(match v {
                    Ok(mib_s) if w.iops() => {
                        format!("{:.1}", mib_s * MIB as f64 / w.block as f64 / 1000.0)
                    }
                    Ok(mib_s) => format!("{mib_s:.0}"),
                    Err(why) => {
                        let note = format!("{}: {why}", target.label());
                        if !notes.contains(&note) {
                            notes.push(note);
                        }
                        "unsupported".to_owned()
                    }
                });
            }
            row
        })
        .collect();
    table(out, &header, &rows)?;
    for note in &notes {
        writeln!(out, "  {note}")?;
    }
    if let Some(dir) = &m.direct_dir {
        writeln!(
            out,
            "  O_DIRECT disk: a file in {} (another medium; for reference, not judged)",
            dir.display()
        )?;
    }
    writeln!(out)?;
    let fmt = |r: Option<f64>| r.map_or("-".to_owned(), |r| format!("{r:.2}x"));
    let cost = |r: Option<f64>| r.map_or("-".to_owned(), |r| format!("{:.0} %", (1.0 - r) * 100.0));
    let ratio_rows: Vec<Vec<String>> = WORKLOADS
        .iter()
        .enumerate()
        .map(|(i, w)| {
            let mut row = vec![
                w.name.to_owned(),
                fmt(m.ratio(i, Target::Ntl, Target::Pread)),
                fmt(m.ratio(i, Target::NtlNone, Target::Pread)),
                fmt(m.ratio(i, Target::Ntl, Target::Memcpy)),
                fmt(m.ratio(i, Target::NtlNone, Target::Memcpy)),
            ];
            if w.op == Op::Write {
                row.push(cost(m.ratio(i, Target::Ntl, Target::InPlace)));
                row.push(cost(m.ratio(i, Target::NtlNone, Target::InPlaceNone)));
            } else {
                row.extend(["-".to_owned(), "-".to_owned()]);
            }
            row
        })
        .collect();
    let header: Vec<String> = [
        "ratios",
        "ntl/pread",
        "ntl-none/pread",
        "ntl/memcpy",
        "ntl-none/memcpy",
        "atomic cost",
        "atomic cost/none",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    table(out, &header, &ratio_rows)?;
    writeln!(out)?;
    for bar in m.bars() {
        writeln!(
            out,
            "[{}] {}: {}",
            if bar.pass { "PASS" } else { "FAIL" },
            bar.name,
            bar.measured
        )?;
    }
    Ok(())
}

/// A block-aligned buffer of `len` bytes (`O_DIRECT` needs the alignment; every
/// target gets the same kind of buffer).
struct Aligned {
    raw: Vec<u8>,
    start: usize,
    len: usize,
}

impl Aligned {
    fn new(len: usize, fill: u8) -> Self {
        let raw = vec![fill; len + 4096];
        let start = (4096 - raw.as_ptr() as usize % 4096) % 4096;
        Self { raw, start, len }
    }

    fn get(&mut self) -> &mut [u8] {
        &mut self.raw[self.start..self.start + self.len]
    }
}

/// xorshift64*.
fn next(state: &mut u64) -> u64 {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    state.wrapping_mul(0x2545_f491_4f6c_dd1d)
}

/// One I/O of a cell: per-thread state, read or write, buffer, byte offset.
type CellIo<'a, S> = dyn Fn(&mut S, Op, &mut [u8], u64) -> Result<()> + Sync + 'a;

/// Runs `w` for `seconds` against `io`; each thread gets its own state from
/// `states` and works over `span` bytes (the whole target, or its own buffer).
/// Returns MiB/s over all threads.
fn run_cell<S: Send>(
    w: &Workload,
    span: u64,
    shared: bool,
    seconds: f64,
    states: Vec<S>,
    io: &CellIo<'_, S>,
) -> Result<f64> {
    let barrier = Barrier::new(states.len());
    let duration = Duration::from_secs_f64(seconds);
    let results: Vec<Result<(u64, Duration)>> = std::thread::scope(|scope| {
        let handles: Vec<_> = states
            .into_iter()
            .enumerate()
            .map(|(t, mut state)| {
                let barrier = &barrier;
                scope.spawn(move || -> Result<(u64, Duration)> {
                    let mut buffer = Aligned::new(w.block as usize, 0x5a ^ t as u8);
                    let blocks = span / w.block;
                    // Sequential: each thread streams its own part of a shared
                    // target (or its whole private buffer).
                    let (first, count) = if shared && !w.random {
                        let per = blocks / w.threads as u64;
                        (t as u64 * per, per.max(1))
                    } else {
                        (0, blocks)
                    };
                    let mut rng = 0x9e37_79b9_7f4a_7c15u64 ^ ((t as u64 + 1) << 32);
                    let mut cursor = 0u64;
                    let check_every = if w.block >= MIB { 1 } else { 16 };
                    let mut ops = 0u64;
                    barrier.wait();
                    let start = Instant::now();
                    loop {
                        let block = if w.random {
                            next(&mut rng) % blocks
                        } else {
                            cursor = (cursor + 1) % count;
                            first + cursor
                        };
                        io(&mut state, w.op, buffer.get(), block * w.block)?;
                        ops += 1;
                        if ops.is_multiple_of(check_every) && start.elapsed() >= duration {
                            break;
                        }
                    }
                    std::hint::black_box(buffer.get());
                    Ok((ops, start.elapsed()))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| bail!("a bench thread panicked"))
            })
            .collect()
    });
    let mut ops = 0;
    let mut longest = Duration::ZERO;
    for r in results {
        let (n, d) = r?;
        ops += n;
        longest = longest.max(d);
    }
    Ok((ops * w.block) as f64 / MIB as f64 / longest.as_secs_f64())
}

/// Scratch directory on /dev/shm (or the system temporary directory).
fn shm_dir() -> Result<tempfile::TempDir> {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        tempfile::Builder::new()
            .prefix("cairn-bench-ntl")
            .tempdir_in(shm)
            .context("scratch directory in /dev/shm")
    } else {
        tempfile::tempdir().context("scratch directory")
    }
}

/// Writes `size` bytes sequentially through `write`, 1 MiB at a time.
fn prefill(size: u64, mut write: impl FnMut(&[u8], u64) -> Result<()>) -> Result<()> {
    let mut buf = vec![0u8; MIB as usize];
    let mut at = 0;
    while at < size {
        let n = (size - at).min(MIB) as usize;
        buf[..8].copy_from_slice(&at.to_le_bytes());
        buf[8..16].fill(0xa5);
        write(&buf[..n], at)?;
        at += n as u64;
    }
    Ok(())
}

fn open_file(path: &Path, direct: bool) -> std::io::Result<File> {
    let mut options = OpenOptions::new();
    options.read(true).write(true).create(true).truncate(false);
    if direct {
        options.custom_flags(rustix::fs::OFlags::DIRECT.bits() as i32);
    }
    options.open(path)
}

fn file_io(file: &File, op: Op, buf: &mut [u8], offset: u64) -> Result<()> {
    match op {
        Op::Read => file.read_exact_at(buf, offset)?,
        Op::Write => file.write_all_at(buf, offset)?,
    }
    Ok(())
}

/// A pre-filled file for pread/pwrite (`direct`: opened with `O_DIRECT`), or why
/// there is none.
fn prepared_file(path: &Path, size: u64, direct: bool) -> Result<Result<File, String>> {
    let file = match open_file(path, direct) {
        Ok(file) => file,
        Err(e) if direct && e.raw_os_error() == Some(rustix::io::Errno::INVAL.raw_os_error()) => {
            return Ok(Err(format!(
                "{} refuses O_DIRECT (open: EINVAL): tmpfs has no block device \
                 underneath and its pages are the page cache",
                path.parent().unwrap_or(path).display()
            )));
        }
        Err(e) => return Err(e).with_context(|| format!("opening {}", path.display())),
    };
    file.set_len(size)
        .with_context(|| format!("sizing {}", path.display()))?;
    let mut buf = Aligned::new(MIB as usize, 0);
    prefill(size, |data, at| {
        let b = &mut buf.get()[..data.len()];
        b.copy_from_slice(data);
        file.write_all_at(b, at)
            .with_context(|| format!("pre-filling {}", path.display()))
    })?;
    if direct {
        file.sync_all()?;
    }
    Ok(Ok(file))
}

/// Maps the NTL image at `path` with `persistence` and touches every page once,
/// so no cell pays first-touch page faults.
fn warm_region(path: &Path, persistence: PersistenceRequest) -> Result<Arc<MmapRegion>> {
    let mut region = MmapRegion::open(path, 0, false, persistence)
        .with_context(|| format!("mapping {}", path.display()))?;
    // 2 MiB pages, as DAX on real persistent memory maps them. The memcpy
    // buffers get them too, so the limit column pays the same TLB cost.
    region.collapse_huge_pages();
    let region = Arc::new(region);
    let mut buf = vec![0u8; MIB as usize];
    let mut at = 0;
    while at < region.len() {
        let n = (region.len() - at).min(MIB) as usize;
        region.read(at, &mut buf[..n])?;
        at += n as u64;
    }
    Ok(region)
}

/// Measures every workload against every target.
pub fn measure(config: &Config) -> Result<Measured> {
    if !(config.seconds > 0.0 && config.seconds <= 3600.0) {
        bail!(
            "--seconds {}: expected a number in (0, 3600]",
            config.seconds
        );
    }
    if config.rounds == 0 || config.rounds > 100 {
        bail!("--rounds {}: expected 1 to 100", config.rounds);
    }
    if config.size < 16 * MIB {
        bail!("--size must be at least 16MiB");
    }
    let size = config.size / MIB * MIB;
    let dir = shm_dir()?;
    let progress = progress(config.quiet);

    progress.set_message("formatting and pre-filling the NTL image");
    let lbas = size / KIB4;
    // One spare data block per 64 (one per allocator bitmap word on average), so an
    // allocation finds a free block within a word or two of its hint.
    let geo = Geometry {
        block_size: KIB4,
        lbas,
        data_blocks: lbas + (lbas / 64).max(1024),
    };
    let image = dir.path().join("ntl.img");
    {
        let region = MmapRegion::open(&image, geo.region_len(), true, PersistenceRequest::None)
            .with_context(|| format!("creating {}", image.display()))?;
        let dev = NtlDevice::new(Btt::format(region, geo)?);
        prefill(size, |data, at| Ok(dev.write_at(data, at)?))?;
    }
    let clflush = warm_region(&image, PersistenceRequest::CacheLine)?;
    let plain = warm_region(&image, PersistenceRequest::None)?;
    let ntl_region = clflush.describe();

    progress.set_message("pre-filling the pread/pwrite files");
    let pread =
        prepared_file(&dir.path().join("pread.raw"), size, false)?.map_err(anyhow::Error::msg)?;
    let direct_shm = prepared_file(&dir.path().join("direct.raw"), size, true)?;
    let disk_dir = match &config.direct_dir {
        Some(d) => Some(
            tempfile::Builder::new()
                .prefix("cairn-bench-ntl")
                .tempdir_in(d)
                .with_context(|| format!("scratch directory in {}", d.display()))?,
        ),
        None => None,
    };
    let direct_disk = match &disk_dir {
        Some(d) => Some(prepared_file(&d.path().join("direct.raw"), size, true)?),
        None => None,
    };

    progress.set_message("filling the memcpy buffers");
    // Per thread count, one private buffer per thread, together `size` bytes.
    let mut memcpy_buffers: Vec<Vec<Vec<u8>>> = [1usize, 2]
        .iter()
        .map(|&threads| {
            (0..threads)
                .map(|t| {
                    let mut buffer = vec![0x33 ^ t as u8; (size / threads as u64) as usize];
                    // Refused only by a kernel before 6.1 (or no free 2 MiB
                    // pages); the NTL region is then refused too, alike.
                    let _ = collapse_buffer(&mut buffer);
                    buffer
                })
                .collect()
        })
        .collect();

    let mut targets = vec![
        Target::Ntl,
        Target::InPlace,
        Target::NtlNone,
        Target::InPlaceNone,
        Target::Pread,
        Target::DirectShm,
    ];
    if direct_disk.is_some() {
        targets.push(Target::DirectDisk);
    }
    targets.push(Target::Memcpy);

    if !config.targets.is_empty() {
        targets.retain(|t| config.targets.contains(t));
    }
    progress.set_length((config.rounds * WORKLOADS.len() * targets.len()) as u64);
    progress.set_position(0);
    // values[workload][target]; each round visits every cell once, so a burst of
    // load on the shared machine hits one round of a cell, not all of them.
    let mut values: Vec<Vec<Result<f64, String>>> =
        vec![vec![Err("not measured".to_owned()); targets.len()]; WORKLOADS.len()];
    for _ in 0..config.rounds {
        for (row, w) in WORKLOADS.iter().enumerate() {
            for (column, &target) in targets.iter().enumerate() {
                progress.set_message(format!("{} / {}", w.name, target.label()));
                let seconds = config.seconds;
                let threads = w.threads;
                let value = if let Some((mode, persistence)) = target.ntl() {
                    let region = if persistence == PersistenceRequest::CacheLine {
                        Arc::clone(&clflush)
                    } else {
                        Arc::clone(&plain)
                    };
                    let dev = NtlDevice::new(Btt::open_with(region, mode)?);
                    let dev = &dev;
                    Ok(run_cell(
                        w,
                        size,
                        true,
                        seconds,
                        vec![(); threads],
                        &|(), op, buf, at| {
                            match op {
                                Op::Read => dev.read_at(buf, at)?,
                                Op::Write => dev.write_at(buf, at)?,
                            }
                            Ok(())
                        },
                    )?)
                } else {
                    let file = match target {
                        Target::Pread => Some(Ok(&pread)),
                        Target::DirectShm => Some(direct_shm.as_ref().map_err(Clone::clone)),
                        Target::DirectDisk => direct_disk
                            .as_ref()
                            .map(|f| f.as_ref().map_err(Clone::clone)),
                        _ => None,
                    };
                    match file {
                        Some(Ok(file)) => Ok(run_cell(
                            w,
                            size,
                            true,
                            seconds,
                            vec![file; threads],
                            &|f, op, buf, at| file_io(f, op, buf, at),
                        )?),
                        Some(Err(why)) => Err(why),
                        None => {
                            let buffers = &mut memcpy_buffers[threads - 1];
                            let states: Vec<&mut Vec<u8>> = buffers.iter_mut().collect();
                            Ok(run_cell(
                                w,
                                size / threads as u64,
                                false,
                                seconds,
                                states,
                                &|big, op, buf, at| {
                                    let at = at as usize;
                                    match op {
                                        Op::Read => buf.copy_from_slice(&big[at..at + buf.len()]),
                                        Op::Write => big[at..at + buf.len()].copy_from_slice(buf),
                                    }
                                    std::hint::black_box(&big);
                                    Ok(())
                                },
                            )?)
                        }
                    }
                };
                let cell = &mut values[row][column];
                *cell = match (cell.as_ref(), value) {
                    (Ok(best), Ok(v)) => Ok(best.max(v)),
                    (_, v) => v,
                };
                progress.inc(1);
            }
        }
    }
    progress.finish_and_clear();
    Ok(Measured {
        size,
        seconds: config.seconds,
        rounds: config.rounds,
        targets,
        values,
        ntl_region,
        direct_dir: config.direct_dir.clone(),
    })
}

fn progress(quiet: bool) -> ProgressBar {
    use std::io::IsTerminal;
    if quiet || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(0);
    if let Ok(style) =
        ProgressStyle::with_template("ntl bench [{elapsed_precise}] {wide_bar} {pos}/{len} {msg}")
    {
        bar.set_style(style);
    }
    bar
}
