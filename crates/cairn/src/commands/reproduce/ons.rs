//! papers/000: ONS for N concurrent readers of one file, simulated.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use cairn_policy::Capacity;
use cairn_sim::{
    AccessStream, Configuration, CostModel, NoProgress, ReplayOptions, StreamOptions, replay,
};
use cairn_trace::Unit;
use cairn_trace::generate::{GeneratorConfig, StreamMode, StreamsConfig};
use clap::Args;
use serde::Deserialize;

use super::{Claim, Common, prepare_out, print_claims, read_spec, save, write_claims_csv};
use crate::output::{csv_field, table};
use crate::plot::{self, Series, YAxis};
use crate::policy_spec;
use crate::progress::Bar;

/// The embedded default spec (`reproduce/ons.toml`).
const DEFAULT_SPEC: &str = include_str!("../../../../../reproduce/ons.toml");

pub const LONG_ABOUT: &str = "\
Reproduces papers/000 (Sohn & Jung, ONS buffer cache replacement for EXT3NS)
by simulation: N IOzone-like readers (10-50) read one 1 GiB file in 1 MiB
requests (read, re-read, random read) through a 512-block cache under FIFO,
LRU, LFU and ONS, and ONS's promotion threshold is swept from 1 to 13.

Prints, shaped like the paper: Table 1 (LFU cache against no cache), Fig. 5
(aggregate throughput per policy and reader count), Figs. 6/8 (ONS hit ratio
per threshold and reader count), then each of the paper's claims with the
paper's number and ours, confirmed or not. Writes ons.csv, ons-claims.csv,
ons-throughput.svg and ons-threshold.svg under --out.

Throughput is modelled (bytes over the modelled service time of hits and
misses, from the spec's [cost] table), not measured; `cairn bench stream`
(the block cache issue) is the real-I/O version. The spec is
reproduce/ons.toml, embedded in the binary; --spec runs an edited copy.";

pub const EXAMPLES: &str = "\
Examples:
  cairn reproduce ons                       the paper's scale (a few seconds)
  cairn reproduce ons --scale 0.125         a quick look at 1/8 of the sizes
  cairn reproduce ons --spec my-ons.toml --out /tmp/ons";

/// `cairn reproduce ons`
#[derive(Args, Debug)]
pub struct OnsArgs {
    /// The experiment spec (TOML). Default: the embedded reproduce/ons.toml.
    #[arg(long, value_name = "FILE")]
    spec: Option<PathBuf>,

    #[command(flatten)]
    common: Common,
}

impl OnsArgs {
    /// The default spec with these shared flags (for `reproduce all`).
    pub fn with(common: Common) -> Self {
        Self { spec: None, common }
    }
}

/// The experiment, as `reproduce/ons.toml` spells it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Spec {
    readers: Vec<u32>,
    file_size_bytes: u64,
    block_size_bytes: u32,
    cache_blocks: u64,
    stagger_rounds: u64,
    passes: u32,
    seed: u64,
    policies: Vec<String>,
    thresholds: Vec<u64>,
    sweep_mode: StreamMode,
    #[serde(default)]
    cost: CostModel,
}

const MODES: [StreamMode; 3] = [StreamMode::Read, StreamMode::ReRead, StreamMode::RandomRead];

fn mode_name(mode: StreamMode) -> &'static str {
    match mode {
        StreamMode::Read => "read",
        StreamMode::ReRead => "re-read",
        StreamMode::RandomRead => "random-read",
    }
}

/// One (mode, readers, configuration) result.
#[derive(Clone, Debug)]
struct Row {
    mode: StreamMode,
    readers: u32,
    /// `fifo`, `lru`, …, `none`, or `ons` for the threshold sweep.
    policy: String,
    /// Set for the ONS threshold sweep.
    threshold: Option<u64>,
    hit_ratio: f64,
    throughput_mb_s: f64,
}

fn load_spec(path: Option<&PathBuf>) -> Result<Spec> {
    let (spec, name): (Spec, String) = read_spec(path, DEFAULT_SPEC, "ons.toml")?;
    if spec.readers.is_empty() || spec.readers.contains(&0) {
        bail!("spec {name}: readers must be a non-empty list of counts ≥ 1");
    }
    if spec.block_size_bytes == 0 || spec.file_size_bytes < u64::from(spec.block_size_bytes) {
        bail!("spec {name}: the file must hold at least one block");
    }
    if spec.cache_blocks == 0 {
        bail!("spec {name}: cache_blocks must be at least 1");
    }
    spec.cost
        .validate(1)
        .with_context(|| format!("spec {name}: [cost]"))?;
    Ok(spec)
}

/// Runs the experiment and returns its judged claims.
pub fn run(args: &OnsArgs, quiet: bool) -> Result<Vec<Claim>> {
    prepare_out(&args.common)?;
    let spec = load_spec(args.spec.as_ref())?;
    let scale = args.common.scale;
    let block = u64::from(spec.block_size_bytes);
    let file_blocks = ((spec.file_size_bytes / block) as f64 * scale)
        .round()
        .max(2.0) as u64;
    let cache_blocks = ((spec.cache_blocks as f64 * scale).round() as u64).max(2);
    let stagger = ((spec.stagger_rounds as f64 * scale).round() as u64).max(1);

    let mut policies = Vec::new();
    for label in &spec.policies {
        policies.push((label.clone(), policy_spec::parse(label)?, None));
    }
    let mut sweep = Vec::new();
    for &t in &spec.thresholds {
        let label = format!("ons:threshold={t}");
        sweep.push((label.clone(), policy_spec::parse(&label)?, Some(t)));
    }

    let runs = MODES.len() * spec.readers.len();
    let bar = Bar::new(Some(runs as u64), "reproduce ons", quiet);
    let mut rows = Vec::new();
    for mode in MODES {
        for &readers in &spec.readers {
            let workload = GeneratorConfig::Streams(StreamsConfig {
                readers,
                block_size_bytes: spec.block_size_bytes,
                file_size_bytes: file_blocks * block,
                stagger_rounds: stagger,
                mode,
                passes: spec.passes,
                seed: spec.seed,
                ..StreamsConfig::default()
            });
            let mut chosen: Vec<_> = policies.clone();
            if mode == spec.sweep_mode {
                chosen.extend(sweep.iter().cloned());
            }
            let configurations: Vec<Configuration> = chosen
                .iter()
                .map(|(label, policy, _)| Configuration {
                    label: label.clone(),
                    policy: policy.clone(),
                    admission: cairn_policy::AdmissionConfig::default(),
                    prefetch: None,
                    size: cache_blocks.to_string(),
                    capacity: Capacity::Objects(cache_blocks),
                    l2: None,
                })
                .collect();
            let stream = AccessStream::new(
                workload.reader()?,
                &StreamOptions {
                    unit: Unit::Block {
                        block_size: spec.block_size_bytes,
                    },
                    ..StreamOptions::default()
                },
            );
            let options = ReplayOptions {
                cost: spec.cost.clone(),
                ..ReplayOptions::default()
            };
            let reports = replay(&configurations, stream, &options, &NoProgress)?;
            let Some(first) = reports.first() else {
                bail!("no results for {readers} readers");
            };
            // No cache: every access is a miss.
            let miss = spec.cost.groups[0].miss;
            let none_seconds = miss.seconds(first.metrics.requests, first.metrics.bytes);
            rows.push(Row {
                mode,
                readers,
                policy: "none".into(),
                threshold: None,
                hit_ratio: 0.0,
                throughput_mb_s: first.metrics.bytes as f64 / none_seconds / 1e6,
            });
            for ((_, _, threshold), report) in chosen.iter().zip(&reports) {
                rows.push(Row {
                    mode,
                    readers,
                    policy: report.policy.clone(),
                    threshold: *threshold,
                    hit_ratio: 1.0 - report.miss_ratio,
                    throughput_mb_s: report.modelled_throughput_mb_s,
                });
            }
            bar.inc(1);
        }
    }
    bar.finish();

    let claims = judge(&spec, &rows);
    let mut out = crate::output::stdout();
    writeln!(
        out,
        "papers/000 (ONS), simulated: one {} MiB file in {} KiB blocks, a {}-block cache, \
         readers {:?}{}",
        (file_blocks * block) >> 20,
        block >> 10,
        cache_blocks,
        spec.readers,
        if (scale - 1.0).abs() > f64::EPSILON {
            format!(", scale {scale}")
        } else {
            String::new()
        }
    )?;
    print_tables(&mut out, &spec, &rows)?;
    writeln!(out)?;
    print_claims(&mut out, &claims)?;
    write_outputs(&args.common.out, &spec, &rows, &claims)?;
    writeln!(
        out,
        "Wrote {0}/ons.csv, {0}/ons-claims.csv, {0}/ons-throughput.svg, {0}/ons-threshold.svg",
        args.common.out.display()
    )?;
    Ok(claims)
}

fn find<'a>(rows: &'a [Row], mode: StreamMode, readers: u32, policy: &str) -> Option<&'a Row> {
    rows.iter().find(|r| {
        r.mode == mode && r.readers == readers && r.policy == policy && r.threshold.is_none()
    })
}

fn mean(values: impl Iterator<Item = f64>) -> f64 {
    let (sum, n) = values.fold((0.0, 0u32), |(s, n), v| (s + v, n + 1));
    if n == 0 { 0.0 } else { sum / f64::from(n) }
}

/// Mean over reader counts of `a − b` throughput in `mode`.
fn mean_gain(spec: &Spec, rows: &[Row], mode: StreamMode, a: &str, b: &str) -> f64 {
    mean(spec.readers.iter().filter_map(|&n| {
        Some(find(rows, mode, n, a)?.throughput_mb_s - find(rows, mode, n, b)?.throughput_mb_s)
    }))
}

/// Mean ONS hit ratio per threshold over reader counts, in the sweep mode.
fn threshold_means(spec: &Spec, rows: &[Row]) -> BTreeMap<u64, f64> {
    spec.thresholds
        .iter()
        .map(|&t| {
            let m = mean(
                rows.iter()
                    .filter(|r| r.mode == spec.sweep_mode && r.threshold == Some(t))
                    .map(|r| r.hit_ratio),
            );
            (t, m)
        })
        .collect()
}

fn judge(spec: &Spec, rows: &[Row]) -> Vec<Claim> {
    let mut claims = Vec::new();
    let has = |p: &str| spec.policies.iter().any(|q| q == p);
    if has("lfu") {
        let gain = mean_gain(spec, rows, StreamMode::ReRead, "lfu", "none");
        claims.push(Claim {
            source: "papers/000 Table 1".into(),
            text: "a buffer cache (LFU) raises re-read throughput over no cache".into(),
            paper: "+33.6 MB/s mean over 10-50 threads".into(),
            ours: format!("{gain:+.1} MB/s mean"),
            confirmed: gain > 0.0,
        });
        let gain = mean_gain(spec, rows, StreamMode::RandomRead, "lfu", "none");
        claims.push(Claim {
            source: "papers/000 Table 1".into(),
            text: "a buffer cache (LFU) raises random-read throughput over no cache".into(),
            paper: "+2.5 MB/s mean (-9.2 at 10 threads)".into(),
            ours: format!("{gain:+.1} MB/s mean"),
            confirmed: gain > 0.0,
        });
    }
    if has("ons") && has("lru") {
        let gain = mean_gain(spec, rows, StreamMode::ReRead, "ons", "lru");
        claims.push(Claim {
            source: "papers/000 Fig. 5".into(),
            text: "re-read: ONS beats LRU".into(),
            paper: "about +0.6 MB/s".into(),
            ours: format!("{gain:+.2} MB/s mean over reader counts"),
            confirmed: gain > 0.0,
        });
    }
    if has("ons") && has("lfu") {
        let gain = mean_gain(spec, rows, StreamMode::ReRead, "ons", "lfu");
        claims.push(Claim {
            source: "papers/000 abstract".into(),
            text: "re-read: ONS beats LFU".into(),
            paper: "about +0.6 MB/s".into(),
            ours: format!("{gain:+.2} MB/s mean over reader counts"),
            confirmed: gain > 0.0,
        });
    }
    let at = if spec.readers.contains(&40) {
        40
    } else {
        spec.readers.iter().copied().max().unwrap_or(0)
    };
    if let Some(ons) = find(rows, StreamMode::Read, at, "ons") {
        let best_other = spec
            .policies
            .iter()
            .filter(|p| p.as_str() != "ons")
            .filter_map(|p| find(rows, StreamMode::Read, at, p))
            .max_by(|a, b| a.throughput_mb_s.total_cmp(&b.throughput_mb_s));
        if let Some(other) = best_other {
            let gain = ons.throughput_mb_s - other.throughput_mb_s;
            claims.push(Claim {
                source: "papers/000 Fig. 5".into(),
                text: format!("read with {at} threads: ONS beats every other policy"),
                paper: "about +2 MB/s at 40 threads".into(),
                ours: format!("{gain:+.2} MB/s against {} ", other.policy)
                    .trim()
                    .to_owned(),
                confirmed: gain > 0.0,
            });
        }
    }
    let means = threshold_means(spec, rows);
    if let Some((&best, &best_hit)) = means.iter().max_by(|a, b| a.1.total_cmp(b.1))
        && let Some(&five) = means.get(&5)
    {
        claims.push(Claim {
            source: "papers/000 Figs. 6, 8".into(),
            text: "threshold 5 gives the highest hit ratio across thread counts".into(),
            paper: "5 best (tried 1-13)".into(),
            ours: format!(
                "best {best} ({:.2} %), threshold 5 {:.2} %",
                best_hit * 100.0,
                five * 100.0
            ),
            confirmed: five >= best_hit - 1e-9,
        });
    }
    claims
}

fn print_tables(out: &mut dyn Write, spec: &Spec, rows: &[Row]) -> std::io::Result<()> {
    let mut header = vec!["policy".to_owned()];
    header.extend(spec.readers.iter().map(|n| format!("N={n}")));
    header.push("mean".into());
    let mut names = vec!["none".to_owned()];
    names.extend(spec.policies.iter().cloned());
    for (what, ratio) in [
        ("modelled throughput, MB/s (Fig. 5)", false),
        ("hit ratio, %", true),
    ] {
        for mode in MODES {
            writeln!(out, "\n{} — {what}", mode_name(mode))?;
            let table_rows: Vec<Vec<String>> = names
                .iter()
                .map(|name| {
                    let values: Vec<f64> = spec
                        .readers
                        .iter()
                        .map(|&n| {
                            find(rows, mode, n, name).map_or(f64::NAN, |r| {
                                if ratio {
                                    r.hit_ratio * 100.0
                                } else {
                                    r.throughput_mb_s
                                }
                            })
                        })
                        .collect();
                    let mut cells = vec![name.clone()];
                    cells.extend(values.iter().map(|v| format!("{v:.2}")));
                    cells.push(format!("{:.2}", mean(values.iter().copied())));
                    cells
                })
                .collect();
            table(out, &header, &table_rows)?;
        }
    }
    writeln!(
        out,
        "\n{} — ONS hit ratio % by threshold (Figs. 6, 8)",
        mode_name(spec.sweep_mode)
    )?;
    header[0] = "threshold".into();
    let means = threshold_means(spec, rows);
    let table_rows: Vec<Vec<String>> = spec
        .thresholds
        .iter()
        .map(|&t| {
            let mut cells = vec![t.to_string()];
            for &n in &spec.readers {
                let hit = rows
                    .iter()
                    .find(|r| r.mode == spec.sweep_mode && r.readers == n && r.threshold == Some(t))
                    .map_or(f64::NAN, |r| r.hit_ratio * 100.0);
                cells.push(format!("{hit:.2}"));
            }
            cells.push(format!(
                "{:.2}",
                means.get(&t).copied().unwrap_or(f64::NAN) * 100.0
            ));
            cells
        })
        .collect();
    table(out, &header, &table_rows)
}

fn write_outputs(dir: &std::path::Path, spec: &Spec, rows: &[Row], claims: &[Claim]) -> Result<()> {
    let mut csv = String::from("mode,readers,policy,threshold,hit_ratio,throughput_mb_s\n");
    for r in rows {
        let _ = writeln!(
            csv,
            "{},{},{},{},{:.6},{:.4}",
            mode_name(r.mode),
            r.readers,
            csv_field(&r.policy),
            r.threshold.map(|t| t.to_string()).unwrap_or_default(),
            r.hit_ratio,
            r.throughput_mb_s
        );
    }
    save(&dir.join("ons.csv"), &csv)?;
    write_claims_csv(&dir.join("ons-claims.csv"), claims)?;

    let mut names = vec!["none".to_owned()];
    names.extend(spec.policies.iter().cloned());
    let series: Vec<Series> = names
        .iter()
        .map(|name| Series {
            name: name.clone(),
            points: spec
                .readers
                .iter()
                .filter_map(|&n| {
                    find(rows, StreamMode::ReRead, n, name)
                        .map(|r| (f64::from(n), r.throughput_mb_s))
                })
                .collect(),
        })
        .collect();
    plot::lines(
        &dir.join("ons-throughput.svg"),
        "papers/000 Fig. 5, re-read: modelled throughput",
        "concurrent readers",
        YAxis {
            label: "MB/s",
            ratio: false,
        },
        &series,
    )?;
    let series: Vec<Series> = spec
        .readers
        .iter()
        .map(|&n| Series {
            name: format!("{n} readers"),
            points: rows
                .iter()
                .filter(|r| r.mode == spec.sweep_mode && r.readers == n)
                .filter_map(|r| r.threshold.map(|t| (t as f64, r.hit_ratio)))
                .collect(),
        })
        .collect();
    plot::lines(
        &dir.join("ons-threshold.svg"),
        "papers/000 Figs. 6/8: ONS hit ratio by threshold",
        "threshold",
        YAxis {
            label: "hit ratio",
            ratio: true,
        },
        &series,
    )
}
