//! `cairn bench hetero`: papers/004's experiment on real I/O. A trace is
//! replayed through the block cache over two throttled devices, an SSD and an
//! HDD at 3:1 throughput, with the accesses split between them.

use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use cairn_policy::KeyMap;
use cairn_sim::GroupMap;
use cairn_store::cache::Placement;
use cairn_store::{
    BlockCache, CacheConfig, Device, DeviceError, MemoryDevice, Pace, Throttle, ThrottledDevice,
};
use cairn_trace::Op;

use crate::input::{TraceArgs, TraceInput};
use crate::output::{out, outln};
use crate::policy_spec;

pub const HETERO_LONG_ABOUT: &str = "\
papers/004's experiment on real I/O: a trace is replayed, request by request,
through Cairn's block cache (4 KiB blocks, write-through) over a volume of two
throttled devices, an SSD (--ssd-mb-s, default 150 MB/s) and an HDD
(--hdd-mb-s, default 50 MB/s) — 3:1 as in the paper, with no per-operation
latency since the paper models devices by throughput. Each block of the trace
lives on the SSD when a hash of it falls below the SSD share, for shares 0,
20, ..., 100 %. Policies: LRU, and the paper's cost groups (`cost`: a queue per
group, victim = smallest timestamp × cost) with groups device × sequential/
random whose costs the cache measures online from the service times it
observes (smoothed, fastest group = 1). `cost:costs=[1,1,3,3]` with
--smoothing 0 gives the paper's fixed costs.

The devices keep their time on a modelled clock (--pace virtual, the
default): each operation costs its length over the device's throughput, and
nothing sleeps, so the full embedded sample replays in under a minute.
Throughput is requested bytes over the two devices' modelled busy time; the
cache charges each device's part of every read to that device's cost group by
the device's clock and its bytes, so its cost estimates come out at the
devices' true ratio. --pace sleep also waits each operation out in real time
(scaled ×--speedup) and adds wall-clock throughput.

Prints throughput and hit ratio per share and policy, the gain of each cost
policy over LRU, and the cost estimates the cache ended with. Trace blocks
are renumbered densely in order of first touch (the volume is the working
set, not the trace's address range). The embedded CloudPhysics sample
replays in object mode (an object is an extent of its size); --trace takes
any block trace (MSR Cambridge CSV, CloudPhysics CSV or VSCSI keep their
offsets).";

/// `cairn bench hetero` flags.
#[derive(clap::Args, Debug)]
pub struct HeteroBenchArgs {
    #[command(flatten)]
    trace: TraceArgs,

    /// Cache capacity as a fraction of the working set (`5%`) or in bytes.
    #[arg(long, value_name = "SIZE", default_value = "5%")]
    cache: String,

    /// SSD shares of the blocks, in percent, comma-separated.
    #[arg(
        long,
        value_name = "P,P,..",
        default_value = "0,20,40,60,80,100",
        value_delimiter = ','
    )]
    shares: Vec<f64>,

    /// Policies (specs as in `cairn sim`), separated by `;`.
    #[arg(
        long,
        value_name = "SPEC;..",
        default_value = "lru;cost",
        value_delimiter = ';'
    )]
    policies: Vec<String>,

    /// The SSD's throughput, MB/s (before --speedup).
    #[arg(long, value_name = "MB/S", default_value_t = 150.0)]
    ssd_mb_s: f64,

    /// The HDD's throughput, MB/s (before --speedup).
    #[arg(long, value_name = "MB/S", default_value_t = 50.0)]
    hdd_mb_s: f64,

    /// Both devices run this many times faster (keeps their ratio). Matters
    /// only with `--pace sleep`, where much faster and the cache's own
    /// microseconds per block blur the devices' times.
    #[arg(long, value_name = "X", default_value_t = 2.0)]
    speedup: f64,

    /// How the throttled devices spend their time: `virtual` (default)
    /// counts each operation's modelled time on the device's clock and
    /// sleeps none, so the replay runs at memory speed and throughput is
    /// reported over the modelled busy time; `sleep` also waits it out in
    /// real time (the full sample then takes tens of minutes).
    #[arg(long, value_name = "MODE", default_value = "virtual", value_parser = ["virtual", "sleep"])]
    pace: String,

    /// What the cache times each device's part of a read by: `device`
    /// (default), the throttled device's own busy clock; `wall`, the wall
    /// time of the whole read (as for a device that keeps no clock; a read
    /// spanning both devices then updates no estimate). `wall` only makes
    /// sense with `--pace sleep`.
    #[arg(long, value_name = "CLOCK", default_value = "device", value_parser = ["device", "wall"])]
    cost_clock: String,

    /// Weight of a new sample in each group's service-time average; 0 keeps
    /// a `cost` policy's configured costs.
    #[arg(long, value_name = "W", default_value_t = 0.05)]
    smoothing: f64,

    /// Replay only the first N requests.
    #[arg(long, value_name = "N")]
    requests: Option<usize>,

    /// Replay the trace's writes too (write-through, caching the blocks
    /// written; every write costs the same device time whatever the policy,
    /// so it dilutes the comparison; by default only reads are replayed).
    #[arg(long)]
    writes: bool,
}

/// Block size of the replay.
const BLOCK: u64 = 4096;

/// One I/O of the replay, on the dense volume.
struct Io {
    write: bool,
    offset: u64,
    len: u64,
}

/// A volume whose blocks live on one of two devices by a hash of the block.
struct SplitVolume {
    devices: [ThrottledDevice<MemoryDevice>; 2],
    /// A block is on device 0 when `mix64(block) < threshold`.
    threshold: u64,
    all_ssd: bool,
    len: u64,
    /// Whether the placement gives the cache the devices' clocks.
    clocks: bool,
}

impl SplitVolume {
    #[inline]
    fn device_of_block(&self, block: u64) -> usize {
        usize::from(!(self.all_ssd || cairn_sim::groups::mix64(block) < self.threshold))
    }

    /// Calls `f(device, range)` for each run of consecutive blocks on one
    /// device within `offset..offset + len`.
    fn runs(
        &self,
        offset: u64,
        len: u64,
        mut f: impl FnMut(
            &ThrottledDevice<MemoryDevice>,
            std::ops::Range<u64>,
        ) -> Result<(), DeviceError>,
    ) -> Result<(), DeviceError> {
        cairn_store::device::check_range(cairn_store::DeviceOp::Read, offset, len, self.len)?;
        let end = offset + len;
        let mut at = offset;
        while at < end {
            let device = self.device_of_block(at / BLOCK);
            let mut stop = ((at / BLOCK) + 1) * BLOCK;
            while stop < end && self.device_of_block(stop / BLOCK) == device {
                stop += BLOCK;
            }
            let stop = stop.min(end);
            f(&self.devices[device], at..stop)?;
            at = stop;
        }
        Ok(())
    }
}

impl Placement for SplitVolume {
    fn devices(&self) -> u16 {
        2
    }
    fn device_of(&self, offset: u64) -> u16 {
        self.device_of_block(offset / BLOCK) as u16
    }
    /// Each throttled device's modelled busy time: the cache charges each
    /// device's part of a read to that device's group by it.
    fn busy_ns(&self, device: u16) -> Option<u64> {
        self.devices
            .get(usize::from(device))
            .filter(|_| self.clocks)
            .and_then(Device::busy_ns)
    }
}

impl Device for SplitVolume {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<(), DeviceError> {
        self.runs(offset, buf.len() as u64, |device, range| {
            let from = (range.start - offset) as usize;
            let to = (range.end - offset) as usize;
            device.read_at(&mut buf[from..to], range.start)
        })
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> Result<(), DeviceError> {
        self.runs(offset, buf.len() as u64, |device, range| {
            let from = (range.start - offset) as usize;
            let to = (range.end - offset) as usize;
            device.write_at(&buf[from..to], range.start)
        })
    }
    fn flush(&self) -> Result<(), DeviceError> {
        Ok(())
    }
    fn discard(&self, _offset: u64, _len: u64) -> Result<(), DeviceError> {
        Ok(())
    }
    fn len(&self) -> u64 {
        self.len
    }
    fn describe(&self) -> String {
        format!(
            "split [{}, {}]",
            self.devices[0].describe(),
            self.devices[1].describe()
        )
    }
}

/// The trace as I/Os on a dense volume, and the volume's size in bytes.
fn load(args: &HeteroBenchArgs) -> Result<(Vec<Io>, u64)> {
    let input = TraceInput::from_args(&args.trace, GroupMap::default())?;
    let mut dense: KeyMap<u64> = KeyMap::default();
    let mut next = 0u64;
    let mut ios = Vec::new();
    for (index, request) in input.requests()?.enumerate() {
        if args.requests.is_some_and(|limit| index >= limit) {
            break;
        }
        let request = request.with_context(|| format!("reading {}", input.name()))?;
        if request.size == 0 || (request.op == Op::Write && !args.writes) {
            continue;
        }
        let first = request.offset / BLOCK;
        let last = (request.offset + u64::from(request.size) - 1) / BLOCK;
        // Renumber each (object, block) densely; a request's blocks seen for
        // the first time together stay consecutive.
        let mut run: Option<(u64, u64)> = None;
        for block in first..=last {
            let key = request.object.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ block;
            let index = *dense.entry(key).or_insert_with(|| {
                next += 1;
                next - 1
            });
            run = match run {
                Some((start, len)) if start + len == index => Some((start, len + 1)),
                Some((start, len)) => {
                    ios.push(Io {
                        write: request.op == Op::Write,
                        offset: start * BLOCK,
                        len: len * BLOCK,
                    });
                    Some((index, 1))
                }
                None => Some((index, 1)),
            };
        }
        if let Some((start, len)) = run {
            ios.push(Io {
                write: request.op == Op::Write,
                offset: start * BLOCK,
                len: len * BLOCK,
            });
        }
    }
    if ios.is_empty() {
        bail!("the trace has no requests");
    }
    Ok((ios, next * BLOCK))
}

struct Outcome {
    mb_s: f64,
    /// Requested bytes over the two devices' modelled busy time.
    device_mb_s: f64,
    hit_ratio: f64,
    costs: Vec<f64>,
    /// Each group's smoothed service time per block, µs (0 = not measured).
    per_block_us: Vec<f64>,
}

fn replay(device: &dyn Device, ios: &[Io], buf: &mut [u8]) -> Result<f64> {
    let started = Instant::now();
    let mut moved = 0u64;
    for io in ios {
        let part = &mut buf[..io.len as usize];
        if io.write {
            device.write_at(part, io.offset)?;
        } else {
            device.read_at(part, io.offset)?;
        }
        moved += io.len;
    }
    Ok(moved as f64 / started.elapsed().as_secs_f64() / 1e6)
}

pub fn run(args: &HeteroBenchArgs) -> Result<()> {
    if !(args.speedup > 0.0 && args.ssd_mb_s > 0.0 && args.hdd_mb_s > 0.0) {
        bail!("--speedup, --ssd-mb-s and --hdd-mb-s must be positive");
    }
    if args.shares.iter().any(|s| !(0.0..=100.0).contains(s)) {
        bail!("--shares are percentages in [0, 100]");
    }
    if !(0.0..=1.0).contains(&args.smoothing) {
        bail!("--smoothing must be in [0, 1]");
    }
    let mut policies = Vec::new();
    for spec in &args.policies {
        let spec = spec.trim();
        if !spec.is_empty() {
            policies.push((spec.to_owned(), policy_spec::parse(spec)?));
        }
    }
    let (ios, volume) = load(args)?;
    let capacity = match args.cache.strip_suffix('%') {
        Some(percent) => {
            let percent: f64 = percent
                .trim()
                .parse()
                .with_context(|| format!("--cache {:?}", args.cache))?;
            (volume as f64 * percent / 100.0) as u64
        }
        None => cairn_sim::parse_bytes(&args.cache)
            .with_context(|| format!("--cache {:?}", args.cache))?,
    };
    let bytes: u64 = ios.iter().map(|io| io.len).sum();
    eprintln!(
        "hetero: {} I/Os, {:.2} GB moved, working set {:.2} GB, cache {:.1} MB; SSD {} MB/s, HDD {} MB/s (×{})",
        ios.len(),
        bytes as f64 / 1e9,
        volume as f64 / 1e9,
        capacity as f64 / 1e6,
        args.ssd_mb_s,
        args.hdd_mb_s,
        args.speedup
    );
    let largest = ios.iter().map(|io| io.len).max().unwrap_or(BLOCK);
    let mut buf = vec![0u8; largest as usize];
    // results[policy][share]
    let mut results: Vec<Vec<Outcome>> = Vec::new();
    for (name, policy) in &policies {
        let mut row = Vec::new();
        for &share in &args.shares {
            let volume_device = Arc::new(split_volume(args, share, volume));
            let config = CacheConfig {
                block_size_bytes: BLOCK,
                capacity_bytes: capacity,
                policy: policy.clone(),
                cost_smoothing: args.smoothing,
                // The paper's cache does not prefetch.
                readahead_bytes: 0,
                // Written blocks are cached, as the simulator counts a write
                // as an access that brings its block in.
                write_mode: cairn_store::WriteMode::Allocate,
                placement: Arc::clone(&volume_device) as Arc<dyn Placement>,
                ..CacheConfig::default()
            };
            let cache = BlockCache::new(Arc::clone(&volume_device), &config)
                .with_context(|| format!("building the {name} cache"))?;
            let mb_s = replay(&cache, &ios, &mut buf)?;
            let metrics = cache.metrics();
            let busy = volume_device.devices[0].elapsed() + volume_device.devices[1].elapsed();
            let outcome = Outcome {
                mb_s,
                device_mb_s: bytes as f64 / busy.as_secs_f64().max(1e-9) / 1e6,
                hit_ratio: metrics.hit_ratio(),
                costs: cache.costs(),
                per_block_us: metrics
                    .groups
                    .iter()
                    .map(|g| g.miss_service_ns_per_block / 1e3)
                    .collect(),
            };
            eprintln!(
                "{name}, SSD {share}%: {mb_s:.1} MB/s wall, {:.1} MB/s device time, hit ratio {:.1} %, costs {:?}",
                outcome.device_mb_s,
                outcome.hit_ratio * 100.0,
                outcome
                    .costs
                    .iter()
                    .map(|c| (c * 100.0).round() / 100.0)
                    .collect::<Vec<_>>()
            );
            row.push(outcome);
        }
        results.push(row);
    }
    print_results(args, &policies, &results)?;
    Ok(())
}

fn split_volume(args: &HeteroBenchArgs, share: f64, len: u64) -> SplitVolume {
    let pace = if args.pace == "sleep" {
        Pace::Sleep
    } else {
        Pace::Virtual
    };
    let throttle = |mb_s: f64| Throttle {
        op_us: 0.0,
        seek_us: 0.0,
        bandwidth_mb_s: mb_s * args.speedup,
    };
    SplitVolume {
        devices: [
            ThrottledDevice::new(MemoryDevice::new(len), throttle(args.ssd_mb_s), pace),
            ThrottledDevice::new(MemoryDevice::new(len), throttle(args.hdd_mb_s), pace),
        ],
        threshold: (share / 100.0 * 18_446_744_073_709_551_616.0) as u64,
        all_ssd: share >= 100.0,
        len,
        clocks: args.cost_clock == "device",
    }
}

fn print_results(
    args: &HeteroBenchArgs,
    policies: &[(String, cairn_policy::PolicyConfig)],
    results: &[Vec<Outcome>],
) -> std::io::Result<()> {
    let header_width = |title: &str, width: usize| -> std::io::Result<()> {
        out!("{title:<14}")?;
        for share in &args.shares {
            out!(" {:>width$}", format!("{share}:{}", 100.0 - share))?;
        }
        outln!()
    };
    let header = |title: &str| header_width(title, 9);
    if args.pace == "sleep" {
        outln!("\nthroughput, MB/s (SSD:HDD share of blocks)")?;
    } else {
        outln!(
            "\nwall-clock throughput, MB/s (SSD:HDD share of blocks; --pace virtual: the cache's own speed, not the devices')"
        )?;
    }
    header("policy")?;
    for ((name, _), row) in policies.iter().zip(results) {
        out!("{name:<14}")?;
        for outcome in row {
            out!(" {:>9.1}", outcome.mb_s)?;
        }
        outln!()?;
    }
    outln!("\nthroughput over the devices' modelled busy time, MB/s (noise-free)")?;
    header("policy")?;
    for ((name, _), row) in policies.iter().zip(results) {
        out!("{name:<14}")?;
        for outcome in row {
            out!(" {:>9.1}", outcome.device_mb_s)?;
        }
        outln!()?;
    }
    outln!("\nhit ratio, %")?;
    header("policy")?;
    for ((name, _), row) in policies.iter().zip(results) {
        out!("{name:<14}")?;
        for outcome in row {
            out!(" {:>9.1}", outcome.hit_ratio * 100.0)?;
        }
        outln!()?;
    }
    if let Some(base) = results.first()
        && args.pace == "sleep"
    {
        outln!("\nthroughput gain over {}, %", policies[0].0)?;
        header("policy")?;
        for ((name, _), row) in policies.iter().zip(results).skip(1) {
            out!("{name:<14}")?;
            for (outcome, lru) in row.iter().zip(base) {
                out!(" {:>9.1}", (outcome.mb_s / lru.mb_s - 1.0) * 100.0)?;
            }
            outln!()?;
        }
    }
    if let Some(base) = results.first() {
        outln!("\ndevice-time throughput gain over {}, %", policies[0].0)?;
        header("policy")?;
        for ((name, _), row) in policies.iter().zip(results).skip(1) {
            out!("{name:<14}")?;
            for (outcome, lru) in row.iter().zip(base) {
                out!(
                    " {:>9.1}",
                    (outcome.device_mb_s / lru.device_mb_s - 1.0) * 100.0
                )?;
            }
            outln!()?;
        }
    }
    outln!("\ncosts at the end (groups ssd-seq, ssd-rand, hdd-seq, hdd-rand)")?;
    header_width("policy", 19)?;
    for ((name, _), row) in policies.iter().zip(results) {
        out!("{name:<14}")?;
        for outcome in row {
            let text: Vec<String> = outcome.costs.iter().map(|c| format!("{c:.2}")).collect();
            out!(" {:>19}", text.join("/"))?;
        }
        outln!()?;
    }
    let true_us = |mb_s: f64| BLOCK as f64 / (mb_s * args.speedup);
    outln!(
        "\nmeasured device time per {BLOCK}-byte block, µs (same groups; the devices' true time: SSD {:.2}, HDD {:.2})",
        true_us(args.ssd_mb_s),
        true_us(args.hdd_mb_s)
    )?;
    header_width("policy", 23)?;
    for ((name, _), row) in policies.iter().zip(results) {
        out!("{name:<14}")?;
        for outcome in row {
            let text: Vec<String> = outcome
                .per_block_us
                .iter()
                .map(|us| format!("{us:.1}"))
                .collect();
            out!(" {:>23}", text.join("/"))?;
        }
        outln!()?;
    }
    Ok(())
}
