//! `cairn bench tier --part scan`: does a long sequential read push the hot
//! set out? A tier opened in this process is warmed with Zipf reads; the hot
//! set's hit ratio is measured before and after a sequential read of 4x the
//! cache, with the sequential cutoff on and off, for s3fifo and lru.

use std::path::Path;

use anyhow::{Context, Result};
use cairn_policy::PolicyConfig;
use cairn_store::Device;
use cairn_store::tier::open::{Want, open_or_format};
use cairn_store::tier::{Metrics, Options, Tier};
use cairn_trace::generate::{Layout, Pace, ZipfConfig};

use super::args::TierBenchArgs;
use super::common::{cache_device_bytes, file, hit_ratio, scratch, size_text};
use crate::output::outln;

const ALPHA: f64 = 1.0;
/// The bar: the hot set's hit ratio after the scan over before, cutoff on.
const BAR: f64 = 0.90;
/// The tier's default sequential cutoff.
const CUTOFF: u64 = 4 << 20;

/// Zipf reads over 4x the cache's blocks (at the start of the backing
/// device): `requests` of them, from `seed`.
fn hot_reads(tier: &Tier, cache: u64, requests: u64, seed: u64) -> Result<()> {
    let blocks = cache / 4096;
    let zipf = ZipfConfig {
        items: 4 * blocks,
        alpha: ALPHA,
        layout: Layout::Blocks,
        pace: Pace {
            requests,
            size_bytes: 4096,
            write_fraction: 0.0,
            interval_us: 1,
            seed,
        },
    }
    .generator()?;
    let mut buf = vec![0u8; 4096];
    for request in zipf {
        tier.read_at(&mut buf, request.offset)?;
    }
    Ok(())
}

/// One row: before, after, and the blocks the scan promoted.
struct Row {
    before: f64,
    after: f64,
    promoted: u64,
}

fn measure(dir: &Path, cache: u64, policy: &str, cutoff: u64) -> Result<Row> {
    let blocks = cache / 4096;
    let ssd = dir.join(format!("{policy}-{cutoff}-ssd.img"));
    let backing = dir.join(format!("{policy}-{cutoff}-backing.img"));
    let options = Options {
        policy: PolicyConfig::default_for(policy).context("no such policy")?,
        sequential_cutoff_bytes: cutoff,
        ..Options::default()
    };
    let want = Want {
        options,
        ..Want::default()
    };
    let tier = open_or_format(
        file(&ssd, cache_device_bytes(cache))?,
        file(&backing, 8 * cache)?,
        &want,
    )?;
    hot_reads(&tier, cache, 4 * blocks, 1)?;
    let measure_hot = |seed| -> Result<(Metrics, Metrics)> {
        let from = tier.metrics();
        hot_reads(&tier, cache, blocks / 2, seed)?;
        Ok((from, tier.metrics()))
    };
    let (a, b) = measure_hot(2)?;
    let mut buf = vec![0u8; 1 << 20];
    let scan_from = tier.metrics();
    for offset in (4 * cache..8 * cache).step_by(1 << 20) {
        tier.read_at(&mut buf, offset)?;
    }
    let promoted = tier.metrics().promotions - scan_from.promotions;
    let (c, d) = measure_hot(3)?;
    tier.close()?;
    drop(tier);
    let _ = std::fs::remove_file(&ssd);
    let _ = std::fs::remove_file(&backing);
    Ok(Row {
        before: hit_ratio(&a, &b),
        after: hit_ratio(&c, &d),
        promoted,
    })
}

pub(super) fn run(args: &TierBenchArgs, cache: u64) -> Result<()> {
    let blocks = cache / 4096;
    let dir = scratch(&args.dir, cache_device_bytes(cache) + 8 * cache)?;
    outln!(
        "scan resistance: write-back tiers caching {} (a {} cache device file) over a sparse file \
         of {}, opened in this process; files in {}",
        size_text(cache),
        size_text(cache_device_bytes(cache)),
        size_text(8 * cache),
        dir.path().display()
    )?;
    outln!(
        "hot set: 4 KiB reads, Zipf({ALPHA:.1}) over the first {} blocks (4x the cache's); \
         warm-up {} reads (seed 1); hit ratio over {} reads before (seed 2) and after (seed 3) \
         the scan: 1 MiB sequential reads of {} after them",
        4 * blocks,
        4 * blocks,
        blocks / 2,
        size_text(4 * cache)
    )?;
    outln!(
        "reproduce: cairn bench tier --part scan --cache-size {}",
        args.cache_size
    )?;
    outln!()?;
    let header: Vec<String> = [
        "scan",
        "cutoff",
        "before",
        "after",
        "after/before",
        ">= 0.90",
        "scan promoted",
    ]
    .map(String::from)
    .into();
    let mut rows = Vec::new();
    let (mut bar_rows, mut passed) = (0, 0);
    for policy in ["s3fifo", "lru"] {
        for cutoff in [CUTOFF, 0] {
            let row = measure(dir.path(), cache, policy, cutoff)?;
            let ratio = if row.before > 0.0 {
                row.after / row.before
            } else {
                0.0
            };
            let ok = ratio >= BAR;
            if cutoff > 0 {
                bar_rows += 1;
                passed += usize::from(ok);
            }
            rows.push(vec![
                policy.to_owned(),
                if cutoff > 0 {
                    size_text(cutoff)
                } else {
                    "off".to_owned()
                }
                .replace(' ', ""),
                format!("{:.4}", row.before),
                format!("{:.4}", row.after),
                format!("{ratio:.3}"),
                if ok { "yes" } else { "no" }.to_owned(),
                format!("{} MiB", (row.promoted * 4096) >> 20).replace(' ', ""),
            ]);
        }
    }
    crate::output::table(&mut crate::output::stdout(), &header, &rows)?;
    outln!("scan resistance: {passed} of {bar_rows} rows with the cutoff on >= 0.90")?;
    Ok(())
}
