//! `cairn bench tier --part dram`: the DRAM a cached block costs. A child
//! process per policy fills a tier completely and reports its resident set
//! before the tier existed and once it is full.

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use cairn_policy::PolicyConfig;
use cairn_store::Device;
use cairn_store::tier::Options;
use cairn_store::tier::open::{Want, open_or_format};

use super::args::TierBenchArgs;
use super::common::{cache_device_bytes, file, scratch, size_text};
use crate::output::outln;

const POLICIES: [&str; 2] = ["s3fifo", "lru"];
/// Open CAS's metadata: about 1.3 % of the cache, bytes per 4 KiB block.
const OCF_BYTES: f64 = 53.0;

/// The resident set of this process, bytes (`VmRSS`).
fn rss() -> Result<u64> {
    let status =
        std::fs::read_to_string("/proc/self/status").context("reading /proc/self/status")?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
        .context("no VmRSS in /proc/self/status")
}

/// What a child reports.
#[derive(Debug, Default)]
struct Filled {
    before: u64,
    after: u64,
    cached: u64,
    capacity: u64,
    dram_bytes: u64,
}

pub(super) fn run(args: &TierBenchArgs, size: u64) -> Result<()> {
    let device = cache_device_bytes(size);
    outln!(
        "dram: a tier caching {} (a {} cache device file, 4 KiB blocks, 1 MiB buckets), filled \
         by 1 MiB reads of {} (sequential cutoff 0) in a child process per policy; its VmRSS \
         before the tier existed and once full",
        size_text(size),
        size_text(device),
        size_text(2 * size)
    )?;
    outln!(
        "reproduce: cairn bench tier --part dram --dram-size {}",
        args.dram_size
    )?;
    outln!()?;
    let header: Vec<String> = [
        "dram",
        "cached blocks",
        "RSS before",
        "RSS full",
        "bytes/block",
        "% of cache",
        "tier's own/block",
    ]
    .map(String::from)
    .into();
    let mut rows = Vec::new();
    for policy in POLICIES {
        let output = Command::new(super::common::this_binary()?)
            .args(["--quiet", "bench", "tier", "--part", "dram-child"])
            // glibc keeps freed heap memory resident and, after a large free,
            // serves later large allocations from the heap too: the tier's
            // tables grow by doubling and would leave their old copies in the
            // RSS. A fixed mmap threshold and immediate trimming make the
            // RSS the memory in use.
            .env("MALLOC_MMAP_THRESHOLD_", "65536")
            .env("MALLOC_TRIM_THRESHOLD_", "0")
            .args(["--dram-size", &args.dram_size, "--child", policy, "--dir"])
            .arg(&args.dir)
            .output()
            .context("running the dram part's child process")?;
        let text = String::from_utf8_lossy(&output.stdout);
        if !output.status.success() {
            bail!(
                "the dram part's child ({policy}) failed: {}{}",
                text,
                String::from_utf8_lossy(&output.stderr)
            );
        }
        let filled = parse(&text).with_context(|| format!("the dram child said {text:?}"))?;
        let grown = filled.after.saturating_sub(filled.before) as f64;
        let per_block = grown / filled.cached.max(1) as f64;
        rows.push(vec![
            policy.to_owned(),
            format!("{}/{}", filled.cached, filled.capacity),
            format!("{:.1} MiB", filled.before as f64 / f64::from(1 << 20)).replace(' ', ""),
            format!("{:.1} MiB", filled.after as f64 / f64::from(1 << 20)).replace(' ', ""),
            format!("{per_block:.1}"),
            format!("{:.2}", per_block / 4096.0 * 100.0),
            format!(
                "{:.1}",
                filled.dram_bytes as f64 / filled.cached.max(1) as f64
            ),
        ]);
    }
    crate::output::table(&mut crate::output::stdout(), &header, &rows)?;
    outln!(
        "dram: Open CAS needs about {OCF_BYTES:.0} bytes a 4 KiB block ({:.2} %; open-cas-linux #410, quoted, not run here)",
        OCF_BYTES / 4096.0 * 100.0
    )?;
    Ok(())
}

fn parse(text: &str) -> Option<Filled> {
    let mut filled = Filled::default();
    for line in text.lines() {
        let (key, value) = line.split_once(' ')?;
        let value: u64 = value.trim().parse().ok()?;
        match key {
            "before" => filled.before = value,
            "after" => filled.after = value,
            "cached" => filled.cached = value,
            "capacity" => filled.capacity = value,
            "dram_bytes" => filled.dram_bytes = value,
            _ => return None,
        }
    }
    (filled.after > 0 && filled.cached > 0).then_some(filled)
}

/// A child: one policy's tier, filled; prints `key value` lines.
pub(super) fn child(args: &TierBenchArgs, size: u64) -> Result<()> {
    let policy = args
        .child
        .as_deref()
        .context("--part dram-child needs --child POLICY")?;
    let config =
        PolicyConfig::default_for(policy).with_context(|| format!("no policy {policy}"))?;
    let device = cache_device_bytes(size);
    let dir = scratch(&args.dir, device + 2 * size)?;
    let ssd = file(&dir.path().join("ssd.img"), device)?;
    let backing = file(&dir.path().join("backing.img"), 2 * size)?;
    let mut buf = vec![0u8; 1 << 20];
    buf.fill(1);
    let before = rss()?;
    let want = Want {
        options: Options {
            policy: config,
            sequential_cutoff_bytes: 0,
            ..Options::default()
        },
        ..Want::default()
    };
    let tier = open_or_format(ssd, Arc::clone(&backing), &want)?;
    for offset in (0..backing.len()).step_by(buf.len()) {
        tier.read_at(&mut buf, offset)?;
    }
    // Let the worker settle: buckets reclaimed ahead of need, and the
    // journal made durable (each second), which ends the fill's hazards.
    std::thread::sleep(Duration::from_millis(1500));
    let after = rss()?;
    let m = tier.metrics();
    let text = format!(
        "before {before}\nafter {after}\ncached {}\ncapacity {}\ndram_bytes {}\n",
        m.cached_blocks,
        tier.capacity_blocks(),
        m.dram_bytes
    );
    crate::output::out!("{text}")?;
    tier.close()?;
    Ok(())
}
