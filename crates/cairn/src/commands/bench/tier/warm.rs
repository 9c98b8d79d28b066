//! `cairn bench tier --part warm`: is the tier warm after a restart? A
//! stationary trace is replayed through a volume whose export is a tier,
//! the volume is stopped (cleanly, or by SIGKILL of the child process that
//! ran the replay) and reopened, and the trace replayed again: the hit ratio
//! over the first tenth of the second replay against the first replay's
//! steady state.

use std::io::{BufRead, BufReader, Read as _, Write as _};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use anyhow::{Context, Result, bail};
use cairn_store::tier::{Metrics, Tier};
use cairn_store::{Device, Volume};
use cairn_trace::Op;
use cairn_trace::generate::{Layout, Pace, Zipf, ZipfConfig};

use super::args::TierBenchArgs;
use super::common::{cache_device_bytes, hit_ratio, open, scratch, size_text, the_tier, toml_path};
use crate::output::outln;

/// The trace's skew, share of writes and seed.
const ALPHA: f64 = 1.0;
const WRITES: f64 = 0.1;
const SEED: u64 = 42;
/// The bar: the first tenth after a restart over the steady state.
const BAR: f64 = 0.95;

/// The trace: 4 KiB requests, Zipf over 4x the cache's blocks, `replay`
/// requests per cached block.
fn trace(cache: u64, replay: u32) -> Result<Zipf> {
    let blocks = cache / 4096;
    ZipfConfig {
        items: 4 * blocks,
        alpha: ALPHA,
        layout: Layout::Blocks,
        pace: Pace {
            requests: blocks * u64::from(replay),
            size_bytes: 4096,
            write_fraction: WRITES,
            interval_us: 1,
            seed: SEED,
        },
    }
    .generator()
    .context("the warm part's trace")
}

/// The volume: the tier (write-back, s3fifo, default cutoff) over a plain
/// file of 4x the cache, its cache device a file, both in `dir`.
fn spec(dir: &Path, cache: u64) -> String {
    format!(
        "data_dir = {data}\n\n[[export]]\nname = \"cairn\"\ndevice = \"tier\"\n\n\
         [device.tier]\nkind = \"tier\"\nover = \"backing\"\ncache = \"ssd\"\n\
         mode = \"write-back\"\npolicy = \"s3fifo\"\n\n\
         [device.ssd]\nkind = \"file\"\npath = {ssd}\nsize = {device}\n\n\
         [device.backing]\nkind = \"file\"\npath = {backing}\nsize = {region}\n",
        data = toml_path(&dir.join("data")),
        ssd = toml_path(&dir.join("ssd.img")),
        device = cache_device_bytes(cache),
        backing = toml_path(&dir.join("backing.img")),
        region = 4 * cache,
    )
}

/// Replays `requests` through `device`, a snapshot of `tier`'s counters
/// before request `marks[i]` of each mark (a mark at the end: after it).
fn replay(
    device: &dyn Device,
    tier: &Tier,
    requests: impl Iterator<Item = cairn_trace::Request>,
    marks: &[u64],
) -> Result<Vec<Metrics>> {
    let mut snapshots = Vec::with_capacity(marks.len());
    let mut buf = vec![0u8; 4096];
    for (index, request) in (0u64..).zip(requests) {
        while snapshots.len() < marks.len() && marks[snapshots.len()] == index {
            snapshots.push(tier.metrics());
        }
        let len = request.size as usize;
        if buf.len() < len {
            buf.resize(len, 0);
        }
        let part = &mut buf[..len];
        if request.op == Op::Write {
            part.fill(index as u8);
            device.write_at(part, request.offset)?;
        } else {
            device.read_at(part, request.offset)?;
        }
    }
    while snapshots.len() < marks.len() {
        snapshots.push(tier.metrics());
    }
    Ok(snapshots)
}

/// The first replay's marks: start, a tenth, half, the end.
fn marks(requests: u64) -> [u64; 4] {
    [0, requests / 10, requests / 2, requests]
}

/// What a first replay measured: the cold start's first tenth and the
/// steady state (read hit ratios), and what was cached at its end.
#[derive(Clone, Copy, Debug, Default)]
struct First {
    cold: f64,
    steady: f64,
    cached: u64,
    dirty: u64,
}

impl First {
    fn of(s: &[Metrics]) -> Self {
        Self {
            cold: hit_ratio(&s[0], &s[1]),
            steady: hit_ratio(&s[2], &s[3]),
            cached: s[3].cached_blocks,
            dirty: s[3].dirty_blocks,
        }
    }
}

/// The first tenth of a second replay, on the reopened volume.
fn first_tenth(volume: &Volume, cache: u64, replay_len: u32) -> Result<f64> {
    let tier = the_tier(volume)?;
    let requests = cache / 4096 * u64::from(replay_len);
    let s = replay(
        &*volume.exports()[0].device,
        tier,
        trace(cache, replay_len)?.take((requests / 10) as usize),
        &[0, requests / 10],
    )?;
    Ok(hit_ratio(&s[0], &s[1]))
}

/// What a reopen said, one line.
fn said(volume: &Volume) -> String {
    volume
        .notes()
        .iter()
        .chain(volume.warnings())
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join("; ")
}

pub(super) fn run(args: &TierBenchArgs, cache: u64) -> Result<()> {
    let blocks = cache / 4096;
    let requests = blocks * u64::from(args.replay);
    let device = cache_device_bytes(cache);
    let dir = scratch(&args.dir, 2 * (device + 4 * cache))?;
    outln!(
        "warm restart: a write-back s3fifo tier caching {} (a {} cache device file) over a plain \
         file of {}, no DRAM cache above it; files in {}",
        size_text(cache),
        size_text(device),
        size_text(4 * cache),
        dir.path().display()
    )?;
    outln!(
        "trace: 4 KiB requests, Zipf({ALPHA:.1}) over {} blocks (4x the cache's), {:.0} % writes, \
         seed {SEED}, {requests} requests a replay ({} per cached block)",
        4 * blocks,
        WRITES * 100.0,
        args.replay
    )?;
    outln!(
        "reproduce: cairn bench tier --part warm --cache-size {} --replay {}",
        args.cache_size,
        args.replay
    )?;

    // Clean stop: replay, close, reopen, replay.
    let clean_dir = dir.path().join("clean");
    let clean_spec = spec(&clean_dir, cache);
    let clean_first = {
        let volume = open(&clean_spec, "bench tier warm (clean stop)")?;
        let tier = the_tier(&volume)?;
        let s = replay(
            &*volume.exports()[0].device,
            tier,
            trace(cache, args.replay)?,
            &marks(requests),
        )?;
        volume.close().context("closing the volume")?;
        First::of(&s)
    };
    let (clean_said, clean_after) = {
        let volume = open(&clean_spec, "bench tier warm (reopened after a clean stop)")?;
        let after = first_tenth(&volume, cache, args.replay)?;
        volume.close().context("closing the volume")?;
        (said(&volume), after)
    };
    outln!(
        "clean stop: {} blocks cached, {} dirty at the stop; the reopen said: {clean_said}",
        clean_first.cached,
        clean_first.dirty
    )?;

    // kill -9: the first replay in a child, killed; reopened here.
    let kill_dir = dir.path().join("kill");
    std::fs::create_dir_all(&kill_dir)?;
    let kill_spec_path = kill_dir.join("volume.toml");
    std::fs::write(&kill_spec_path, spec(&kill_dir, cache))?;
    let (kill_first, signal) = replay_and_kill(args, &kill_spec_path)?;
    let kill_spec = std::fs::read_to_string(&kill_spec_path)?;
    let (kill_said, kill_after) = {
        let volume = open(&kill_spec, "bench tier warm (reopened after kill -9)")?;
        let after = first_tenth(&volume, cache, args.replay)?;
        volume.close().context("closing the volume")?;
        (said(&volume), after)
    };
    outln!(
        "kill -9: {} blocks cached, {} dirty when the child was killed ({signal}); the reopen \
         said: {kill_said}",
        kill_first.cached,
        kill_first.dirty
    )?;

    outln!()?;
    let header: Vec<String> = [
        "warm restart",
        "cold first 10%",
        "steady state",
        "first 10% after",
        "ratio",
        ">= 0.95",
    ]
    .map(String::from)
    .into();
    let mut rows = Vec::new();
    let mut passed = 0;
    for (name, first, after) in [
        ("clean stop", clean_first, clean_after),
        ("kill -9", kill_first, kill_after),
    ] {
        let ratio = if first.steady > 0.0 {
            after / first.steady
        } else {
            0.0
        };
        let ok = ratio >= BAR;
        passed += usize::from(ok);
        rows.push(vec![
            name.to_owned(),
            format!("{:.4}", first.cold),
            format!("{:.4}", first.steady),
            format!("{after:.4}"),
            format!("{ratio:.3}"),
            if ok { "yes" } else { "no" }.to_owned(),
        ]);
    }
    crate::output::table(&mut crate::output::stdout(), &header, &rows)?;
    outln!("warm restart: {passed} of 2 restarts >= 0.95")?;
    Ok(())
}

/// Kills the child when dropped (an error on the way).
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs the first replay in a child process on the volume of `spec_path`,
/// and sends it SIGKILL once it says it replayed. What it measured, and how
/// it ended.
fn replay_and_kill(args: &TierBenchArgs, spec_path: &Path) -> Result<(First, String)> {
    let child = Command::new(super::common::this_binary()?)
        .args(["--quiet", "bench", "tier", "--part", "warm-child"])
        .args(["--cache-size", &args.cache_size])
        .args(["--replay", &args.replay.to_string()])
        .arg("--child")
        .arg(spec_path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .context("starting the warm part's child process")?;
    let mut child = Killed(child);
    let stdout = child.0.stdout.take().context("the child's stdout")?;
    let mut first = First::default();
    let mut replayed = false;
    for line in BufReader::new(stdout).lines() {
        let line = line.context("reading the child's output")?;
        let mut words = line.split_whitespace();
        let key = words.next().unwrap_or_default();
        let values: Vec<f64> = words.filter_map(|w| w.parse().ok()).collect();
        match (key, values.as_slice()) {
            ("cold", [v]) => first.cold = *v,
            ("steady", [v]) => first.steady = *v,
            ("cached", [c, d]) => (first.cached, first.dirty) = (*c as u64, *d as u64),
            ("replayed", []) => {
                replayed = true;
                break;
            }
            _ => bail!("the warm part's child said {line:?}"),
        }
    }
    if !replayed {
        let status = child.0.wait()?;
        bail!("the warm part's child ended before it replayed the trace ({status})");
    }
    child.0.kill().context("killing the child")?;
    let status = child.0.wait()?;
    let how = {
        use std::os::unix::process::ExitStatusExt as _;
        match status.signal() {
            Some(9) => "SIGKILL".to_owned(),
            _ => bail!("the warm part's child was not killed by SIGKILL: {status}"),
        }
    };
    Ok((first, how))
}

/// The child of the kill -9 case: opens the volume of `--child`, replays,
/// says what it measured and "replayed", and waits to be killed (or for its
/// stdin to close: the parent died; it then exits without closing).
pub(super) fn child(args: &TierBenchArgs, cache: u64) -> Result<()> {
    let path = args
        .child
        .as_deref()
        .context("--part warm-child needs --child SPEC")?;
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {path}"))?;
    let volume = open(&text, path)?;
    let tier = the_tier(&volume)?;
    let requests = cache / 4096 * u64::from(args.replay);
    let s = replay(
        &*volume.exports()[0].device,
        tier,
        trace(cache, args.replay)?,
        &marks(requests),
    )?;
    let first = First::of(&s);
    let mut out = std::io::stdout().lock();
    writeln!(out, "cold {}", first.cold)?;
    writeln!(out, "steady {}", first.steady)?;
    writeln!(out, "cached {} {}", first.cached, first.dirty)?;
    writeln!(out, "replayed")?;
    out.flush()?;
    drop(out);
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
    // Not killed: the parent went away. End as a crash would, unclosed.
    std::process::exit(3);
}
