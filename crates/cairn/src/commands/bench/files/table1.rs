//! `cairn bench files --workload table1`: papers/001's Table I workloads on
//! real HTTP — the file gateway over 4 throttled striped directories with
//! readahead, one client replaying each workload in trace order — and the
//! simulator's prediction for the same requests beside each measurement.

use std::net::TcpStream;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use cairn_files::backend::striped::part_size;
use cairn_files::{Backend, DirBackend, FileCacheConfig, StripedBackend, ThrottledBackend};
use cairn_policy::PolicyConfig;
use cairn_trace::Request;

use super::{FilesBenchArgs, get, parse_throttle, serve};
use crate::commands::reproduce::dual::{self, Model, simulate, workload_name};
use crate::output::outln;
use crate::policy_spec;

/// The gateway's block: its smallest, so the spec's sizes grow the least.
const BLOCK: u64 = 256 << 10;

/// One configuration's run on one workload.
struct Run {
    label: String,
    measured: f64,
    predicted: f64,
    mean_ms: f64,
    stats: cairn_files::FileCacheStats,
}

/// Creates `sizes` (bytes, by object id) as sparse files `f{id}` striped over
/// the directories under `root`; returns the directories.
fn striped_files(root: &Path, servers: usize, sizes: &[u64]) -> Result<Vec<std::path::PathBuf>> {
    let dirs: Vec<_> = (0..servers).map(|s| root.join(format!("s{s}"))).collect();
    for (server, dir) in dirs.iter().enumerate() {
        std::fs::create_dir_all(dir)?;
        for (id, &size) in sizes.iter().enumerate() {
            let file = std::fs::File::create(dir.join(format!("f{id}")))?;
            file.set_len(part_size(size, servers, BLOCK, server))?;
        }
    }
    Ok(dirs)
}

/// The striped backend over `dirs`, each throttled by `throttle` if given.
fn backend(
    dirs: &[std::path::PathBuf],
    throttle: &str,
) -> Result<StripedBackend<Arc<dyn Backend>>> {
    let throttle = parse_throttle(throttle).context("--throttle")?;
    let servers = dirs
        .iter()
        .map(|dir| -> Result<Arc<dyn Backend>> {
            let open = DirBackend::open(dir)?;
            Ok(match throttle {
                Some(throttle) => Arc::new(ThrottledBackend::new(open, throttle)),
                None => Arc::new(open),
            })
        })
        .collect::<Result<Vec<_>>>()?;
    StripedBackend::new(servers, BLOCK).map_err(|e| anyhow::anyhow!("{e}"))
}

/// Serves `requests` through a fresh gateway with `policy`; returns the
/// cache's counters and the mean response time, ms.
fn measure(
    dirs: &[std::path::PathBuf],
    throttle: &str,
    config: &FileCacheConfig,
    requests: &[Request],
) -> Result<(cairn_files::FileCacheStats, f64)> {
    let front = serve(backend(dirs, throttle)?, config, "files")?;
    let mut stream = TcpStream::connect(front.addr)?;
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(Duration::from_mins(1)))?;
    let longest = requests.iter().map(|r| r.size).max().unwrap_or(1);
    let mut buf = vec![0u8; longest as usize];
    let mut head = Vec::with_capacity(16 << 10);
    let mut total = Duration::ZERO;
    for request in requests {
        let path = format!("/files/f{}", request.object);
        let start = Instant::now();
        let close = get(
            &mut stream,
            &path,
            None,
            request.offset,
            u64::from(request.size),
            &mut buf,
            &mut head,
        )?;
        total += start.elapsed();
        if close {
            bail!("the gateway closed the connection after {path}");
        }
    }
    drop(stream);
    let stats = (front.stats)();
    Ok((
        stats,
        total.as_secs_f64() * 1e3 / requests.len().max(1) as f64,
    ))
}

/// Run `cairn bench files --workload table1`.
pub fn run(args: &FilesBenchArgs) -> Result<()> {
    if !(1..=1_000_000).contains(&args.requests) {
        bail!("--requests must be between 1 and 1000000");
    }
    if args.alphas.iter().any(|a| !(a.is_finite() && *a > 0.0)) {
        bail!("--alphas must be positive numbers");
    }
    parse_throttle(&args.throttle).context("--throttle")?;
    let spec = dual::default_spec()?;
    let spec_block = u64::from(spec.block_size_bytes);
    if !BLOCK.is_multiple_of(spec_block) {
        bail!("reproduce/dual.toml's block ({spec_block} B) does not divide {BLOCK} B");
    }
    let scale = BLOCK / spec_block;
    let servers = spec.servers as usize;
    let cache_bytes = match &args.cache {
        Some(text) => cairn_sim::parse_bytes(text).with_context(|| format!("--cache {text:?}"))?,
        None => spec.cache_bytes * scale,
    };
    let model = Model {
        cache_bytes,
        block_size_bytes: BLOCK as u32,
        prefetch_stripes: u32::try_from(args.prefetch_stripes).context("--prefetch-stripes")?,
        ..spec.model()
    };
    let window = args.prefetch_stripes * u64::from(spec.servers);
    let mut configs: Vec<(String, PolicyConfig)> =
        vec![(spec.single.clone(), policy_spec::parse(&spec.single)?)];
    for &alpha in &args.alphas {
        configs.push((format!("dual α={alpha}"), spec.dual_policy(alpha)?));
    }
    let cache_config = |policy: &PolicyConfig| FileCacheConfig {
        block_size_bytes: BLOCK,
        capacity_bytes: model.cache_bytes,
        policy: policy.clone(),
        // One policy over the whole cache, as the simulator has.
        shards: 1,
        prefetch_window_blocks: window,
        ..FileCacheConfig::default()
    };
    cache_config(&configs[0].1)
        .validate()
        .context("--cache/--prefetch-stripes")?;
    outln!(
        "papers/001 on HTTP: Table I workloads, {} requests each (reproduce/dual.toml's generator, \
         seed {}), sizes ×{scale}: {} KiB blocks, {} KiB requests, a {} MiB cache; files striped \
         over {servers} directories at {} each; readahead {} × {servers} = {window} blocks",
        args.requests,
        spec.seed,
        BLOCK >> 10,
        (u64::from(spec.request_size_bytes) * scale) >> 10,
        model.cache_bytes >> 20,
        args.throttle,
        args.prefetch_stripes,
    )?;
    outln!(
        "{:<8}  {:<12}  {:>10}  {:>11}  {:>6}  {:>8}  {:>37}",
        "workload",
        "cache",
        "measured %",
        "predicted %",
        "Δ pp",
        "mean ms",
        "read ahead issued/used/wasted/dropped"
    )?;
    let mut worst: f64 = 0.0;
    for &workload in &spec.workloads {
        let (trace, sizes) = spec.trace(workload, args.requests)?;
        let requests: Vec<Request> = trace
            .iter()
            .map(|r| Request {
                offset: r.offset * scale,
                size: u32::try_from(u64::from(r.size) * scale).expect("1 MiB requests"),
                ..*r
            })
            .collect();
        let sizes: Vec<u64> = sizes.iter().map(|s| s * scale).collect();
        let root = tempfile::Builder::new()
            .prefix("cairn-bench-table1")
            .tempdir()?;
        let dirs = striped_files(root.path(), servers, &sizes)?;
        for (label, policy) in &configs {
            let predicted = simulate(&model, policy, &requests, Some(&sizes))?;
            let (stats, mean_ms) =
                measure(&dirs, &args.throttle, &cache_config(policy), &requests)?;
            let hits = stats.hits + stats.coalesced;
            let run = Run {
                label: label.clone(),
                measured: hits as f64 / (hits + stats.misses).max(1) as f64,
                predicted: predicted.hit_ratio(),
                mean_ms,
                stats,
            };
            let delta = (run.measured - run.predicted) * 100.0;
            worst = worst.max(delta.abs());
            outln!(
                "{:<8}  {:<12}  {:>10.2}  {:>11.2}  {:>+6.2}  {:>8.2}  {:>37}",
                workload_name(workload),
                run.label,
                run.measured * 100.0,
                run.predicted * 100.0,
                delta,
                run.mean_ms,
                format!(
                    "{}/{}/{}/{}",
                    run.stats.prefetch_issued,
                    run.stats.prefetch_used,
                    run.stats.prefetch_wasted,
                    run.stats.prefetch_dropped
                )
            )?;
        }
    }
    outln!(
        "largest |measured − predicted|: {worst:.2} pp (the bar: within 1 pp): {}",
        if worst <= 1.0 { "met" } else { "NOT met" }
    )?;
    Ok(())
}
