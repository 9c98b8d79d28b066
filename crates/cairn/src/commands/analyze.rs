//! `cairn trace analyze`: what a trace looks like to a cache — reuse and stack
//! distances, popularity, one-hit wonders, sizes, and rates over time — as a
//! summary, JSON, CSV tables and plots.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use cairn_sim::GroupMap;
use cairn_sim::analyze::{Analysis, Analyzer, Log2Histogram, default_window_us, time_span};
use serde::Serialize;

use crate::commands::sim::counted;
use crate::input::{OpArg, TraceInput, TraceOptions, UnitArg, parse_unit, unit_name};
use crate::output::{Destination, outln};
use crate::plot::{self, BarSeries, Series, YAxis};
use crate::progress::Bar;

pub const ABOUT: &str = "\
Analyze a trace as a cache sees it, in one pass: reuse and stack distances,
popularity with a Zipf fit, one-hit wonders, object and request sizes, and the
request rate, bytes, mean size, read/write mix and one-hit share per time
window.

Keys are what `cairn sim` caches with the same --unit (auto: start sectors for
block traces, objects otherwise). The reuse distance of an access is the number
of accesses since its key's previous access (a loop over N keys: N); its stack
distance the number of distinct other keys accessed since (N − 1), exact, so an
LRU cache of C objects hits exactly the accesses with a stack distance below C.
Both are histograms in powers of two. Popularity is the keys' access counts by
rank; the Zipf α is the least-squares slope of ln(count) on ln(rank) over every
rank, as libCacheSim's analyzer fits it, with its R². A one-hit key is accessed
exactly once (in the trace, or in a window).

Windows are --window seconds long from the first request. Without it a first,
quick pass reads the trace's span and clock tick and picks a round length giving
at most about 100 windows, no shorter than a tick (1 s for oracleGeneral, whose
times are whole seconds). Shares per window are over windows with requests.
--csv DIR writes the tables, --plot DIR the figures (both created if missing
and checked before the pass). An empty trace is an error.";

pub const EXAMPLES: &str = "\
Examples:
  cairn trace analyze zipf.oracleGeneral.bin
      The summary of the trace `cairn trace gen --help` writes first.
  cairn trace analyze uniform.vscsi.zst --window 0.01 --json
      A block trace keyed by start sector, in windows of 10 ms, as JSON.
  cairn trace analyze zipf.oracleGeneral.bin --csv analysis --plot plots
      The summary, its tables as CSV files in analysis/ and its figures as
      SVG files in plots/.
  cairn trace analyze scan.csv --unit block:4KiB --plot plots --plot-format png
      Keyed by 4 KiB block, figures as PNG.";

/// `cairn trace analyze` flags.
#[derive(clap::Args, Debug)]
pub struct AnalyzeArgs {
    /// The trace file.
    pub trace: PathBuf,
    /// Its format (auto, oracle, msr, vscsi, cloudphysics, text, csv).
    #[arg(long, default_value = "auto")]
    pub format: String,
    /// What a key is, as `cairn sim --unit`: `auto` (start sectors for vscsi,
    /// cloudphysics and msr traces, objects otherwise), `object`,
    /// `start-sector` or `block:SIZE`.
    #[arg(long, value_name = "UNIT", default_value = "auto", value_parser = parse_unit)]
    pub unit: UnitArg,
    /// Window length in seconds (e.g. 60, 0.5). Default: a round length
    /// giving at most about 100 windows over the trace's span.
    #[arg(long, value_name = "SECONDS")]
    pub window: Option<f64>,
    /// Print JSON instead of the summary.
    #[arg(long, conflicts_with = "csv")]
    pub json: bool,
    /// Also write the tables as CSV files in DIR (created if missing), one
    /// each for the reuse and stack distances, popularity, sizes and windows.
    #[arg(long, value_name = "DIR")]
    pub csv: Option<PathBuf>,
    /// Also draw the figures in DIR (created if missing): the two distance
    /// histograms, the rank-frequency curve with its fit, object sizes, and
    /// requests/s, mean size, read share and one-hit share per window.
    #[arg(long, value_name = "DIR")]
    pub plot: Option<PathBuf>,
    /// The figures' file format.
    #[arg(long, value_name = "FORMAT", default_value = "svg", value_parser = ["svg", "png"])]
    pub plot_format: String,
}

/// The analysis with what was analyzed, as `--json` prints it.
#[derive(Serialize)]
struct Report<'a> {
    trace: String,
    format: String,
    unit: String,
    #[serde(flatten)]
    analysis: &'a Analysis,
}

/// Creates `dir` if missing and checks a file can be written in it.
fn prepare_dir(dir: &Path, flag: &str) -> Result<()> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("{flag} {}: cannot create the directory", dir.display()))?;
    let probe = dir.join(".cairn-write-check");
    std::fs::File::create(&probe)
        .with_context(|| format!("{flag} {}: cannot write in the directory", dir.display()))?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

/// Runs `cairn trace analyze`.
pub fn run(args: &AnalyzeArgs, quiet: bool) -> Result<()> {
    let window_us = match args.window {
        None => None,
        Some(s) if s.is_finite() && s > 0.0 && (s * 1e6).round() >= 1.0 => {
            Some((s * 1e6).round() as u64)
        }
        Some(s) => bail!("--window {s}: a length in seconds, at least 0.000001 (1 µs)"),
    };
    if let Some(dir) = &args.csv {
        prepare_dir(dir, "--csv")?;
    }
    if let Some(dir) = &args.plot {
        prepare_dir(dir, "--plot")?;
    }
    let options = TraceOptions {
        format: args.format.clone(),
        csv_map: None,
        unit: args.unit,
        op: OpArg::All,
        requests: None,
    };
    let input = TraceInput::open(Some(&args.trace), &options, GroupMap::default())?;
    let window_us = if let Some(w) = window_us {
        w
    } else {
        let bar = Bar::new(input.accesses_hint(), "span", quiet);
        let span = time_span(counted(input.requests()?, &bar))?;
        bar.finish();
        default_window_us(span)
    };
    let mut analyzer = Analyzer::new(input.stream.unit, window_us)?;
    let bar = Bar::new(input.accesses_hint(), "analyzing", quiet);
    for request in counted(input.requests()?, &bar) {
        analyzer.add(&request?)?;
    }
    bar.finish();
    if analyzer.requests() == 0 {
        bail!(
            "trace {} holds no requests: nothing to analyze; check that it is the file you \
             meant (and --format, if given)",
            input.name()
        );
    }
    let analysis = analyzer.finish()?;
    let report = Report {
        trace: input.name(),
        format: input.format_name().to_owned(),
        unit: unit_name(input.stream.unit),
        analysis: &analysis,
    };
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&report)?)?;
    } else {
        Destination::Stdout.write("summary", |out| summary(out, &report))?;
    }
    if let Some(dir) = &args.csv {
        write_csv(dir, &analysis)?;
    }
    if let Some(dir) = &args.plot {
        draw(dir, &args.plot_format, &report)?;
    }
    Ok(())
}

/// `lo–hi` for a distance bucket.
fn bucket_label(b: usize) -> String {
    match Log2Histogram::bounds(b) {
        (lo, hi) if lo == hi => lo.to_string(),
        (lo, hi) => format!("{lo}-{hi}"),
    }
}

/// Min, mean and max of `values` (zeros when empty).
fn spread(values: impl Iterator<Item = f64>) -> (f64, f64, f64) {
    let (mut n, mut sum, mut min, mut max) = (0usize, 0.0, f64::INFINITY, f64::NEG_INFINITY);
    for v in values {
        n += 1;
        sum += v;
        min = min.min(v);
        max = max.max(v);
    }
    if n == 0 {
        (0.0, 0.0, 0.0)
    } else {
        (min, sum / n as f64, max)
    }
}

fn summary(out: &mut dyn Write, report: &Report<'_>) -> std::io::Result<()> {
    let a = report.analysis;
    let window_s = a.window_us as f64 / 1e6;
    let top: Vec<String> = a
        .frequencies
        .iter()
        .flat_map(|f| std::iter::repeat_n(f.accesses, usize::try_from(f.keys).unwrap_or(0)))
        .take(5)
        .map(|c| c.to_string())
        .collect();
    let zipf = match a.zipf {
        Some(z) => format!(
            "alpha {:.4}, R² {:.4} (least squares over ranks 1..{}); top counts {}",
            z.alpha,
            z.r2,
            z.ranks,
            top.join(" ")
        ),
        None => "one key: no fit".to_owned(),
    };
    let distance = |h: &Log2Histogram| {
        format!(
            "{} reuses, mean {:.1}, max {}",
            h.total,
            h.mean,
            if h.total == 0 { 0 } else { h.max }
        )
    };
    let rates = spread(a.windows.iter().map(|w| w.requests_per_s));
    let busy = || a.windows.iter().filter(|w| w.requests > 0);
    let one_hit = spread(busy().map(|w| w.one_hit_fraction));
    let reads = spread(busy().map(|w| w.read_fraction));
    let rows: Vec<(&str, String)> = vec![
        (
            "trace",
            format!(
                "{} ({}), keyed by {}",
                report.trace, report.format, report.unit
            ),
        ),
        (
            "requests",
            format!(
                "{} ({} reads, {} writes); {} accesses",
                a.requests, a.reads, a.writes, a.accesses
            ),
        ),
        (
            "bytes",
            format!(
                "{} read, {} written; mean request {:.0}",
                a.bytes_read,
                a.bytes_written,
                a.mean_request_bytes()
            ),
        ),
        (
            "distinct keys",
            format!(
                "{}; mean size at first access {:.0} bytes",
                a.keys,
                a.mean_object_bytes()
            ),
        ),
        (
            "one-hit keys",
            format!("{} ({:.4} of the keys)", a.one_hit_keys, a.one_hit_fraction),
        ),
        ("popularity (Zipf)", zipf),
        ("reuse distance", distance(&a.reuse_distance)),
        ("stack distance", distance(&a.stack_distance)),
        (
            "time span",
            format!(
                "{:.3} s in {} windows of {window_s} s",
                a.span_us() as f64 / 1e6,
                a.windows.len()
            ),
        ),
        (
            "requests/s per window",
            format!(
                "min {:.1} / mean {:.1} / max {:.1}",
                rates.0, rates.1, rates.2
            ),
        ),
        (
            "read share per busy window",
            format!(
                "min {:.4} / mean {:.4} / max {:.4}",
                reads.0, reads.1, reads.2
            ),
        ),
        (
            "one-hit share per busy window",
            format!(
                "min {:.4} / mean {:.4} / max {:.4}",
                one_hit.0, one_hit.1, one_hit.2
            ),
        ),
    ];
    for (name, value) in rows {
        writeln!(out, "{name:<30} {value}")?;
    }
    writeln!(
        out,
        "distances (log2 buckets: accesses since / distinct other keys since)"
    )?;
    writeln!(out, "  {:<24} {:>12} {:>12}", "range", "reuse", "stack")?;
    let buckets = a
        .reuse_distance
        .counts
        .len()
        .max(a.stack_distance.counts.len());
    for b in 0..buckets {
        let reuse = a.reuse_distance.counts.get(b).copied().unwrap_or(0);
        let stack = a.stack_distance.counts.get(b).copied().unwrap_or(0);
        if reuse + stack > 0 {
            writeln!(out, "  {:<24} {reuse:>12} {stack:>12}", bucket_label(b))?;
        }
    }
    writeln!(out, "sizes (log2 buckets, bytes ≤ bound: requests, keys)")?;
    for (i, (requests, keys)) in sizes(a).into_iter().enumerate() {
        if requests + keys > 0 {
            writeln!(out, "  ≤ {:>12}  {requests:>12} {keys:>12}", 1u64 << i)?;
        }
    }
    Ok(())
}

/// `(requests, keys)` per size bucket.
fn sizes(a: &Analysis) -> Vec<(u64, u64)> {
    let n = a.request_sizes.len().max(a.object_sizes.len());
    (0..n)
        .map(|i| {
            (
                a.request_sizes.get(i).copied().unwrap_or(0),
                a.object_sizes.get(i).copied().unwrap_or(0),
            )
        })
        .collect()
}

fn write_csv(dir: &Path, a: &Analysis) -> Result<()> {
    for (name, histogram) in [
        ("reuse_distance", &a.reuse_distance),
        ("stack_distance", &a.stack_distance),
    ] {
        Destination::File(dir.join(format!("{name}.csv"))).write("CSV", |out| {
            writeln!(out, "min,max,accesses")?;
            for (b, count) in histogram.counts.iter().enumerate() {
                let (lo, hi) = Log2Histogram::bounds(b);
                writeln!(out, "{lo},{hi},{count}")?;
            }
            Ok(())
        })?;
    }
    Destination::File(dir.join("popularity.csv")).write("CSV", |out| {
        writeln!(out, "accesses,keys,rank_first,rank_last")?;
        let mut rank = 1;
        for f in &a.frequencies {
            writeln!(
                out,
                "{},{},{rank},{}",
                f.accesses,
                f.keys,
                rank + f.keys - 1
            )?;
            rank += f.keys;
        }
        Ok(())
    })?;
    Destination::File(dir.join("sizes.csv")).write("CSV", |out| {
        writeln!(out, "size_max_bytes,requests,keys")?;
        for (i, (requests, keys)) in sizes(a).into_iter().enumerate() {
            writeln!(out, "{},{requests},{keys}", 1u64 << i)?;
        }
        Ok(())
    })?;
    Destination::File(dir.join("windows.csv")).write("CSV", |out| {
        writeln!(
            out,
            "start_s,requests,reads,writes,bytes_read,bytes_written,keys,new_keys,\
             one_hit_keys,requests_per_s,mean_size_bytes,read_fraction,one_hit_fraction"
        )?;
        for w in &a.windows {
            writeln!(
                out,
                "{},{},{},{},{},{},{},{},{},{:.3},{:.1},{:.6},{:.6}",
                w.start_us as f64 / 1e6,
                w.requests,
                w.reads,
                w.writes,
                w.bytes_read,
                w.bytes_written,
                w.keys,
                w.new_keys,
                w.one_hit_keys,
                w.requests_per_s,
                w.mean_size_bytes,
                w.read_fraction,
                w.one_hit_fraction
            )?;
        }
        Ok(())
    })?;
    Ok(())
}

fn draw(dir: &Path, extension: &str, report: &Report<'_>) -> Result<()> {
    let a = report.analysis;
    let file = |name: &str| dir.join(format!("{name}.{extension}"));
    let name = Path::new(&report.trace).file_name().map_or_else(
        || report.trace.clone(),
        |n| n.to_string_lossy().into_owned(),
    );
    for (stem, what, histogram) in [
        (
            "reuse_distance",
            "reuse distance (accesses since)",
            &a.reuse_distance,
        ),
        (
            "stack_distance",
            "stack distance (distinct keys since)",
            &a.stack_distance,
        ),
    ] {
        let categories: Vec<String> = (0..histogram.counts.len())
            .map(|b| plot::human(Log2Histogram::bounds(b).0 as f64))
            .collect();
        plot::bars(
            &file(stem),
            &format!("{what}, log2 buckets — {name}"),
            &categories,
            "accesses",
            &[BarSeries {
                name: "accesses".into(),
                values: histogram.counts.iter().map(|&c| c as f64).collect(),
            }],
        )?;
    }
    let mut curve = Vec::new();
    let mut rank = 1u64;
    for f in &a.frequencies {
        curve.push((rank as f64, f.accesses as f64));
        curve.push(((rank + f.keys - 1) as f64, f.accesses as f64));
        rank += f.keys;
    }
    let mut series = vec![Series {
        name: "accesses per key".into(),
        points: curve,
    }];
    if let Some(z) = a.zipf {
        let at = |r: f64| (r, (z.intercept - z.alpha * r.ln()).exp());
        series.push(Series {
            name: format!("fit: alpha {:.3}, R² {:.3}", z.alpha, z.r2),
            points: vec![at(1.0), at(z.ranks as f64)],
        });
    }
    plot::log_log(
        &file("popularity"),
        &format!("rank-frequency — {name}"),
        "rank",
        "accesses",
        &series,
    )?;
    let size_categories: Vec<String> = (0..a.object_sizes.len())
        .map(|i| format!("≤{}", plot::human((1u64 << i) as f64)))
        .collect();
    plot::bars(
        &file("object_sizes"),
        &format!("key sizes at first access, log2 buckets — {name}"),
        &size_categories,
        "keys",
        &[BarSeries {
            name: "keys".into(),
            values: a.object_sizes.iter().map(|&c| c as f64).collect(),
        }],
    )?;
    let over_time = |stem: &str, what: &str, ratio: bool, value: &dyn Fn(usize) -> f64| {
        let points = a
            .windows
            .iter()
            .enumerate()
            .map(|(i, w)| (w.start_us as f64 / 1e6, value(i)))
            .collect();
        plot::lines(
            &file(stem),
            &format!("{what} per {} s window — {name}", a.window_us as f64 / 1e6),
            "time since the first request (s)",
            YAxis { label: what, ratio },
            &[Series {
                name: what.to_owned(),
                points,
            }],
        )
    };
    let w = &a.windows;
    over_time("requests_per_s", "requests/s", false, &|i| {
        w[i].requests_per_s
    })?;
    over_time("mean_size", "mean request bytes", false, &|i| {
        w[i].mean_size_bytes
    })?;
    over_time("read_fraction", "read share", true, &|i| w[i].read_fraction)?;
    over_time("one_hit_fraction", "one-hit share of keys", true, &|i| {
        w[i].one_hit_fraction
    })?;
    Ok(())
}
