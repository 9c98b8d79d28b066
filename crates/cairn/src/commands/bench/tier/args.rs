//! `cairn bench tier`'s help and flags.

use std::path::PathBuf;

pub const TIER_LONG_ABOUT: &str = "\
Measure Cairn's cache tier (kind = \"tier\", docs/volumes.md) in five parts,
chosen with --part (comma-separated; default all, in this order):

  fio    against nbdkit's cache filter through fio (needs fio and nbdkit)
  warm   the hit ratio right after a restart, clean stop and kill -9
  scan   a hot set's hit ratio across a sequential read of 4x the cache
  clean  foreground write latency while the cleaner drains (needs fio)
  dram   the DRAM a cached 4 KiB block costs, s3fifo and lru

Each part prints the parameters it ran with and a table that judges a bar.
Scratch files go to /dev/shm when it has room (else to --dir), except the
cache devices of fio and clean, which go to --dir: put it on the disk a cache
would use.

fio. Cairn's tier and nbdkit's cache filter, each in front of the same
emulated slow device, through fio's nbd engine (ioengine=nbd). Needs fio with
the nbd engine and nbdkit with its file plugin and cache, rate, delay and
noparallel filters (test.sh installs them). The slow device. Cairn: a
throttled device (docs/volumes.md) over a file, latency_us = 1080,
bandwidth_mb_s = 200: each operation sleeps its whole cost, one operation at
a time, like a disk head. nbdkit: the file plugin under its delay filter
(rdelay=1ms wdelay=1ms), its rate filter (rate=1200000000 bits/s,
burstiness=0.01) and, for the calibration, its noparallel filter
(serialize=all-requests). The two models differ: nbdkit's delays run in
parallel, one per worker thread, so without noparallel 8 requests in flight
take the time of one (7.6x Cairn's random reads at iodepth 8), and its rate
filter is a token bucket that refills during the delay, so latency and
transfer overlap (a 1 MiB read costs max(1 ms, 1 MiB / rate), where Cairn's
throttle adds them); hence the different nominal numbers, measured to agree.
The backing files are on /dev/shm when it has room (else in --dir), so that
the emulation alone sets the device's speed.

The calibration table runs the three rows against the two slow devices alone
and says whether they agree within 10 % (the larger over the smaller at most
1.10). The result table runs them against the caches, after a warm-up:

  rand read 4k zipf   4 KiB random reads, fio random_distribution=zipf:1.1:0
                      over 4x --cache-size, IOPS (warm-up: the same reads
                      with another seed, --warmup times the cache's blocks,
                      before each round)
  rand write 4k fsync 4 KiB uniform random writes over the same range, an
                      fsync (NBD FLUSH) after every 32, IOPS
  seq read 1M         1 MiB sequential reads from the start of the range, MiB/s

with the median fio completion latency (p50) and the 99th percentile (p99) in
microseconds, nbdkit's over Cairn's. The peer is nbdkit's cache filter over the
same delay and rate filters: cache=writeback cache-on-read=true
cache-max-size=--cache-size cache-min-block-size=4096 (its default is 64 KiB:
a 4 KiB write would read 64 KiB first) cache-high-threshold=100
cache-low-threshold=95 (reclaim at the full size, down to 95 %, so it keeps
about the whole budget), its cache file in --dir (TMPDIR). Its own lock
serializes every block operation, so it needs no noparallel filter. Cairn's
column is a volume with a tier: its cache device a file in --dir sized to
cache --cache-size of data (a tenth more, for the room the tier keeps free to
reclaim buckets, and its metadata), write-back, s3fifo, 4 KiB blocks in 1 MiB
buckets, sequential cutoff 4 MiB. Each row runs for --seconds on one server,
then on the other; --rounds N repeats every row N times and reports medians.
Bar: Cairn at least 1.5x nbdkit.

warm. A volume whose export is a tier (write-back, s3fifo, cache --cache-size)
over a plain file, no DRAM cache above it, so the tier's counters are the hit
ratio. The trace: 4 KiB requests, Zipf(1.0) over 4x the cache's blocks, 10 %
writes, seed 42, --replay times the cache's blocks long (the embedded
CloudPhysics sample has a 1.9 GB working set and shifts over time, so the end
of one replay does not predict the start of the next; a stationary trace
does). Each case replays it, restarts, and replays it again. Steady state:
the read hit ratio over the last half of the first replay; the bar: the hit
ratio over the first 10 % of the second replay is at least 0.95 of it. Clean
stop: Volume::close, then a reopen. kill -9: the first replay runs in a child
process (this binary, --part warm-child), which is sent SIGKILL once it says
it is done; this process then reopens the volume. The reopen's notes
(recovered N records ...) are printed, and the cold start's first 10 % for
comparison.

scan. A tier opened in this process (cache --cache-size, file devices) is
warmed with 4 KiB Zipf(1.0) reads over 4x the cache's blocks (4x the cache's
blocks of them); the hot set's hit ratio is that of half the cache's blocks
more such reads (another seed), before and after a sequential read of 4x the
cache in 1 MiB requests (elsewhere on the backing device). Bar, with the
sequential cutoff on (4 MiB): after at least 0.90 of before. Also run with
the cutoff off (0), and with lru, whose hot set only the cutoff protects.

clean. A write-back tier (cache --cache-size in --dir, s3fifo, sequential
cutoff 0) over the fio part's throttled slow device, served over NBD in this
process. The load: fio 4 KiB random writes over half the cache
(--rate_iops=--clean-iops, --iodepth, --clean-seconds), every block of it
cached first with 1 MiB writes. Phase \"nothing to clean\": the region
cached clean (written back before the load), writeback_percent = 100, so the
dirty data never reaches the cleaner's target. Phase \"draining\": the
region written again (dirty: half the cache), the volume stopped cleanly and
reopened with writeback_percent = 10, and the load started at once, so the
cleaner drains the excess (40 % of the cache) under it. In both phases a
thread reads one block every 100 ms, so the tier never sees the idle second
that makes it clean at full speed. Bar: fio's p99 completion latency while
draining at most 2x that with nothing to clean; the blocks cleaned during
each phase are printed.

dram. For each policy, a child process (--part dram-child) opens a tier on a
cache device file of --dram-size, fills it completely with 1 MiB reads of 2x
its capacity (sequential cutoff 0; the second half of the read fills
s3fifo's ghost queue) and reports its resident set (VmRSS) before the tier
existed and once it is full, 1.5 s later (the worker has made the journal
durable, which ends the fill's bookkeeping). The child runs with glibc's
MALLOC_MMAP_THRESHOLD_=65536 and MALLOC_TRIM_THRESHOLD_=0, so that memory
freed as tables double is not counted. Reported: bytes of RSS per cached 4 KiB block,
as a share of the block (Open CAS needs about 53 bytes, 1.3 %), and the
tier's own count of its metadata (Metrics::dram_bytes: the slot table and
the block maps; the rest is the policy's).

Examples:
  cairn bench tier                     # every part at full size: about 8 minutes
  cairn bench tier --part warm,scan,dram
  cairn bench tier --part warm --cache-size 64MiB --replay 4
  cairn bench tier --part clean --cache-size 64MiB --clean-seconds 10
  cairn bench tier --part dram --dram-size 256MiB
  cairn bench tier --part fio --cache-size 64MiB --seconds 5 --rounds 3
  cairn bench tier --part fio --cache-size 16MiB --seconds 2 --warmup 4 --dir /var/tmp";

/// `cairn bench tier` flags.
#[derive(clap::Args, Debug)]
pub struct TierBenchArgs {
    /// Parts to run, comma-separated: fio, warm, scan, clean, dram, or all.
    #[arg(
        long,
        value_name = "PART,..",
        value_enum,
        value_delimiter = ',',
        default_value = "all"
    )]
    pub(super) part: Vec<Part>,

    /// fio: seconds per row and server.
    #[arg(long, value_name = "N", default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..))]
    pub(super) seconds: u32,

    /// fio: rounds over every row and server; each cell is the median of its rounds.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub(super) rounds: u32,

    /// The tier's cache (fio: also nbdkit's cache-max-size), a multiple of
    /// 1 MiB: the data it caches (its cache device is a tenth larger, and
    /// the metadata). fio's rows and warm's trace run over 4 times this.
    #[arg(long, value_name = "SIZE", default_value = "256MiB")]
    pub(super) cache_size: String,

    /// Where the cache files live (a temporary directory is made inside and
    /// removed at the end): put it on the disk the caches should use.
    #[arg(long, value_name = "DIR", default_value = "/var/tmp")]
    pub(super) dir: PathBuf,

    /// fio iodepth of every fio row, the warm-up and clean's load.
    #[arg(long, value_name = "N", default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub(super) iodepth: u32,

    /// fio: warm-up before each round, zipf reads of this many times the
    /// cache's 4 KiB blocks (stopping after 20 x --seconds, at least 30 s);
    /// 0 = none. nbdkit's cache needs about 16 to reach its steady state.
    #[arg(long, value_name = "N", default_value_t = 16)]
    pub(super) warmup: u32,

    /// warm: each replay's length, in requests per cached 4 KiB block.
    #[arg(long, value_name = "N", default_value_t = 8, value_parser = clap::value_parser!(u32).range(2..))]
    pub(super) replay: u32,

    /// clean: seconds of each phase's load.
    #[arg(long, value_name = "N", default_value_t = 30, value_parser = clap::value_parser!(u32).range(1..))]
    pub(super) clean_seconds: u32,

    /// clean: the load's rate, 4 KiB writes a second (fio `--rate_iops`).
    #[arg(long, value_name = "N", default_value_t = 2000, value_parser = clap::value_parser!(u32).range(1..))]
    pub(super) clean_iops: u32,

    /// dram: the tier filled, a multiple of 1 MiB (its data; the cache
    /// device is a tenth larger).
    #[arg(long, value_name = "SIZE", default_value = "1GiB")]
    pub(super) dram_size: String,

    /// For the child processes of warm and dram: the volume spec (warm) or
    /// the policy (dram).
    #[arg(long, value_name = "ARG", hide = true)]
    pub(super) child: Option<String>,
}

/// A part of the benchmark.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(super) enum Part {
    /// Against nbdkit's cache filter, through fio.
    Fio,
    /// The hit ratio after a clean stop and after kill -9.
    Warm,
    /// A hot set across a sequential read of 4x the cache.
    Scan,
    /// Foreground write latency while the cleaner drains.
    Clean,
    /// DRAM per cached block.
    Dram,
    /// Every part.
    All,
    /// warm's first replay, to be killed (internal).
    #[value(hide = true)]
    WarmChild,
    /// dram's tier of one policy (internal).
    #[value(hide = true)]
    DramChild,
}

/// The parts in the order they run.
pub(super) const PARTS: [Part; 5] = [Part::Fio, Part::Warm, Part::Scan, Part::Clean, Part::Dram];
