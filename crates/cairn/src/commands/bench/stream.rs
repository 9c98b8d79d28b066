//! `cairn bench stream`: papers/000's streaming experiment on real I/O. N
//! threads read one file in 1 MiB requests through the block cache (or
//! straight from the device) on a throttled device that behaves like a disk.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use cairn_store::cache::CacheMetrics;
use cairn_store::{BlockCache, CacheConfig, Device, MemoryDevice, Pace, Throttle, ThrottledDevice};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::output::{out, outln};
use crate::policy_spec;

pub const STREAM_LONG_ABOUT: &str = "\
papers/000's streaming experiment (IOzone's throughput mode over EXT3NS with
PMEMCACHE) on real I/O: N threads read one file in --request-sized requests
from a throttled device that behaves like a disk (one head: every operation
waits for the previous one; --seek-us when it does not continue the previous
one, plus its length at --bandwidth-mb-s), either directly (no cache) or through
Cairn's block cache with each --policies entry (default LRU, LFU and ONS with
the paper's threshold 5), for each N in --threads.

Thread r starts --stagger-blocks × r blocks into the file (wrapping), as the
simulator's `streams` workload starts reader r 64·r rounds late, so the
threads are spread over the file as clients of a streaming server are. For
each N and policy a fresh cache (--cache bytes, default half the file) runs
three phases of --seconds each, as IOzone does: read (sequential from each
thread's start, cold cache), re-read (the same again, the cache now warm) and
random read (requests at random aligned offsets). The tables give aggregate
throughput in MB/s (10^6 bytes/s, summed over threads) for each phase, one
row per policy and one column per N, then each cached run's hit ratio.

The default run takes about a minute and a half (a 128 MiB file, 1 s per
phase); `--size 1GiB --seconds 5` is the paper's scale. The device is in
memory, so only the throttle is slow: the numbers are the emulated disk's,
not this machine's.";

/// `cairn bench stream` flags.
#[derive(clap::Args, Debug)]
pub struct StreamBenchArgs {
    /// File size, e.g. 1GiB (the paper's).
    #[arg(long, value_name = "SIZE", default_value = "128MiB")]
    size: String,

    /// Cache capacity; default half the file.
    #[arg(long, value_name = "SIZE")]
    cache: Option<String>,

    /// Cache block size (papers/000: 256 KiB – 2 MiB).
    #[arg(long, value_name = "SIZE", default_value = "1MiB")]
    block: String,

    /// Request size of every read.
    #[arg(long, value_name = "SIZE", default_value = "1MiB")]
    request: String,

    /// Thread counts, comma-separated.
    #[arg(
        long,
        value_name = "N,N,..",
        default_value = "10,20,30,40,50",
        value_delimiter = ','
    )]
    threads: Vec<usize>,

    /// Cached policies (specs as in `cairn sim`, e.g. `ons:threshold=6`),
    /// separated by `;`; no cache is always measured first.
    #[arg(
        long,
        value_name = "SPEC;..",
        default_value = "lru;lfu;ons",
        value_delimiter = ';'
    )]
    policies: Vec<String>,

    /// Seconds per phase (read, re-read, random read) and configuration.
    #[arg(long, value_name = "S", default_value_t = 1.0)]
    seconds: f64,

    /// The emulated disk's seek and rotation time, microseconds.
    #[arg(long, value_name = "US", default_value_t = 8000.0)]
    seek_us: f64,

    /// The emulated disk's transfer rate, MB/s.
    #[arg(long, value_name = "MB/S", default_value_t = 150.0)]
    bandwidth_mb_s: f64,

    /// Readahead past a sequential request (0 = off, as in the paper).
    #[arg(long, value_name = "SIZE", default_value = "0")]
    readahead: String,

    /// Blocks between consecutive threads' starting points; default
    /// file blocks / 16 (64 for a 1 GiB file of 1 MiB blocks).
    #[arg(long, value_name = "N")]
    stagger_blocks: Option<u64>,

    /// Seed of the random-read offsets.
    #[arg(long, value_name = "N", default_value_t = 1)]
    seed: u64,
}

const PHASES: [&str; 3] = ["read", "re-read", "random read"];

struct Setup {
    size: u64,
    request: u64,
    stagger: u64,
    seconds: Duration,
    seed: u64,
}

pub fn run(args: &StreamBenchArgs) -> Result<()> {
    let bytes = |flag: &str, text: &str| {
        cairn_sim::parse_bytes(text).with_context(|| format!("--{flag} {text:?}"))
    };
    let size = bytes("size", &args.size)?;
    let block = bytes("block", &args.block)?;
    let request = bytes("request", &args.request)?;
    let cache = match &args.cache {
        Some(text) => bytes("cache", text)?,
        None => size / 2,
    };
    let readahead = bytes("readahead", &args.readahead)?;
    if request == 0 || size < 4 * request || size % request != 0 {
        bail!("--size must be a multiple of --request and at least 4 requests");
    }
    if args.threads.is_empty() || args.threads.iter().any(|&n| n == 0 || n > 1024) {
        bail!("--threads must list counts between 1 and 1024");
    }
    if !(args.seconds > 0.0 && args.seconds <= 3600.0) {
        bail!("--seconds must be in (0, 3600]");
    }
    if !(args.bandwidth_mb_s > 0.0 && args.seek_us >= 0.0) {
        bail!("--bandwidth-mb-s must be positive and --seek-us not negative");
    }
    let mut policies = Vec::new();
    for spec in &args.policies {
        let spec = spec.trim();
        if !spec.is_empty() {
            policies.push((spec.to_owned(), policy_spec::parse(spec)?));
        }
    }
    let requests = size / request;
    let setup = Setup {
        size,
        request,
        stagger: args.stagger_blocks.unwrap_or((size / block / 16).max(1)) * block,
        seconds: Duration::from_secs_f64(args.seconds),
        seed: args.seed,
    };
    let throttle = Throttle {
        op_us: 0.0,
        seek_us: args.seek_us,
        bandwidth_mb_s: args.bandwidth_mb_s,
    };
    eprintln!(
        "stream: {size} B file ({requests} requests of {request} B), cache {cache} B of {block} B blocks, disk {} µs seek + {} MB/s",
        args.seek_us, args.bandwidth_mb_s
    );
    let device = Arc::new(ThrottledDevice::new(filled(size)?, throttle, Pace::Sleep));
    // throughput[policy][phase][n], hit ratio[policy][phase][n]
    let mut names = vec!["no cache".to_owned()];
    let mut throughput = Vec::new();
    let mut hit_ratios = Vec::new();
    throughput.push(measure_uncached(&device, &setup, &args.threads));
    hit_ratios.push(vec![vec![None; args.threads.len()]; PHASES.len()]);
    for (name, policy) in &policies {
        let config = CacheConfig {
            block_size_bytes: block,
            capacity_bytes: cache,
            policy: policy.clone(),
            readahead_bytes: readahead,
            ..CacheConfig::default()
        };
        let (mbs, hits) = measure_cached(&device, &config, &setup, &args.threads, name)?;
        names.push(name.clone());
        throughput.push(mbs);
        hit_ratios.push(hits);
    }
    for (phase, title) in PHASES.iter().enumerate() {
        outln!("\n{title}: aggregate MB/s")?;
        print_table(&names, &args.threads, |p, n| {
            throughput[p][phase][n].map(|v| format!("{v:.1}"))
        })?;
    }
    for (phase, title) in PHASES.iter().enumerate() {
        outln!("\n{title}: hit ratio %")?;
        print_table(&names[1..], &args.threads, |p, n| {
            hit_ratios[p + 1][phase][n].map(|v| format!("{:.1}", v * 100.0))
        })?;
    }
    Ok(())
}

/// A memory device of `size` bytes, every byte written (so reads copy data).
fn filled(size: u64) -> Result<MemoryDevice> {
    let device = MemoryDevice::new(size);
    let chunk: Vec<u8> = (0..1u32 << 20).map(|i| (i * 31 + 7) as u8).collect();
    let mut at = 0;
    while at < size {
        let n = chunk.len().min((size - at) as usize);
        device
            .write_at(&chunk[..n], at)
            .context("filling the file")?;
        at += n as u64;
    }
    Ok(device)
}

type Table = Vec<Vec<Option<f64>>>;

fn measure_uncached(
    device: &Arc<ThrottledDevice<MemoryDevice>>,
    setup: &Setup,
    threads: &[usize],
) -> Table {
    let mut table = vec![vec![None; threads.len()]; PHASES.len()];
    for (column, &n) in threads.iter().enumerate() {
        for phase in 0..PHASES.len() {
            let mbs = run_phase(device.as_ref(), setup, n, phase);
            eprintln!("no cache, {n} threads, {}: {mbs:.1} MB/s", PHASES[phase]);
            table[phase][column] = Some(mbs);
        }
    }
    table
}

fn measure_cached(
    device: &Arc<ThrottledDevice<MemoryDevice>>,
    config: &CacheConfig,
    setup: &Setup,
    threads: &[usize],
    name: &str,
) -> Result<(Table, Table)> {
    let mut throughput = vec![vec![None; threads.len()]; PHASES.len()];
    let mut hits = vec![vec![None; threads.len()]; PHASES.len()];
    for (column, &n) in threads.iter().enumerate() {
        let cache = BlockCache::new(Arc::clone(device), config)
            .with_context(|| format!("building the {name} cache"))?;
        let mut before = cache.metrics();
        for phase in 0..PHASES.len() {
            let mbs = run_phase(&cache, setup, n, phase);
            let after = cache.metrics();
            let ratio = hit_ratio_between(&before, &after);
            eprintln!(
                "{name}, {n} threads, {}: {mbs:.1} MB/s, hit ratio {:.1} %",
                PHASES[phase],
                ratio * 100.0
            );
            throughput[phase][column] = Some(mbs);
            hits[phase][column] = Some(ratio);
            before = after;
        }
    }
    Ok((throughput, hits))
}

fn hit_ratio_between(before: &CacheMetrics, after: &CacheMetrics) -> f64 {
    let served = (after.hits() + after.coalesced()) - (before.hits() + before.coalesced());
    let misses = after.misses() - before.misses();
    if served + misses == 0 {
        0.0
    } else {
        served as f64 / (served + misses) as f64
    }
}

/// Runs one phase with `n` threads for `setup.seconds`; aggregate MB/s.
fn run_phase(device: &dyn Device, setup: &Setup, n: usize, phase: usize) -> f64 {
    let moved = AtomicU64::new(0);
    let started = Instant::now();
    let deadline = started + setup.seconds;
    std::thread::scope(|scope| {
        for thread in 0..n {
            let moved = &moved;
            scope.spawn(move || {
                let mut buf = vec![0u8; setup.request as usize];
                let mut rng =
                    ChaCha8Rng::seed_from_u64(setup.seed ^ (thread as u64) << 8 ^ phase as u64);
                let requests = setup.size / setup.request;
                let start = (thread as u64 * setup.stagger) % setup.size / setup.request;
                let mut index = 0u64;
                while Instant::now() < deadline {
                    let request = if phase == 2 {
                        rng.random_range(0..requests)
                    } else {
                        (start + index) % requests
                    };
                    index += 1;
                    // The device is in memory behind a throttle: a failed
                    // read is a bug, not an environment problem.
                    if let Err(e) = device.read_at(&mut buf, request * setup.request) {
                        eprintln!("read failed: {e}");
                        return;
                    }
                    moved.fetch_add(setup.request, Ordering::Relaxed);
                }
            });
        }
    });
    let seconds = started.elapsed().as_secs_f64();
    moved.load(Ordering::Relaxed) as f64 / seconds / 1e6
}

fn print_table(
    names: &[String],
    threads: &[usize],
    cell: impl Fn(usize, usize) -> Option<String>,
) -> std::io::Result<()> {
    out!("{:<12}", "policy")?;
    for n in threads {
        out!(" {:>9}", format!("N={n}"))?;
    }
    outln!(" {:>9}", "mean")?;
    for (p, name) in names.iter().enumerate() {
        out!("{name:<12}")?;
        let mut sum = 0.0;
        let mut count = 0;
        for column in 0..threads.len() {
            let text = cell(p, column);
            if let Some(v) = text.as_deref().and_then(|t| t.parse::<f64>().ok()) {
                sum += v;
                count += 1;
            }
            out!(" {:>9}", text.unwrap_or_else(|| "-".into()))?;
        }
        if count > 0 {
            outln!(" {:>9.1}", sum / f64::from(count))?;
        } else {
            outln!(" {:>9}", "-")?;
        }
    }
    Ok(())
}
