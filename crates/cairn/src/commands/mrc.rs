//! `cairn mrc`: the exact LRU miss-ratio curve, and SHARDS approximations.

use std::path::PathBuf;

use anyhow::{Result, bail};
use cairn_sim::mrc::{MrcTracker, even_sizes, mean_absolute_error};
use cairn_sim::{CapacityUnit, GroupMap};

use crate::commands::sim::{CapacityArg, capacity_unit, counted, parse_duration_us};
use crate::input::{TraceArgs, TraceInput};
use crate::output::{self, Destination, table};
use crate::plot;
use crate::progress::Bar;

const LONG_ABOUT: &str = "\
Compute the miss-ratio curve of LRU at every cache size in one pass over the
trace, from stack (reuse) distances kept in a Fenwick tree over time
(O(n log n), memory proportional to the distinct keys). The curve is exact: at
each size it equals what simulating LRU at that size gives.

With --shards RATE the curve is also estimated by SHARDS (Waldspurger et al.,
FAST '15) at a fixed sampling rate: only keys whose hash falls under
RATE × 2^24 are tracked and their distances scaled by 1/RATE. With
--shards-max KEYS the fixed-size variant tracks at most KEYS keys and lowers its
rate as needed. Each estimate is reported with its mean absolute error against
the exact curve over the printed sizes.

Byte mode (--capacity bytes, or a --max with a byte unit) weights distances by
unit size; it equals byte-LRU while every unit fits in the cache (see
docs/simulator.md). Keys follow the trace as in `cairn sim` (--unit auto). An
empty trace, or one with a single distinct key, is an error: it has no curve.

No TTL: a one-pass curve needs LRU to be a stack algorithm (what a cache holds,
a larger one holds too), and with TTL it is not: a larger cache keeps an older
copy of an object, which expires first, so it can miss where a smaller cache,
which evicted and fetched the object again, hits. --ttl, and a trace whose
requests carry TTLs (oraclesystwrns, a CSV with a ttl column) without
--ignore-trace-ttl, are errors; `cairn sim -p lru --ttl ... -s ...` simulates
LRU with TTL at the sizes you name.";

const EXAMPLES: &str = "\
Examples:
  cairn mrc
      The sample trace's exact LRU curve at 20 sizes.
  cairn mrc --shards 0.01 --points 50
      Exact and SHARDS at 1 %, with the error between them.
  cairn mrc --trace zipf.oracleGeneral.bin --shards-max 8192 --csv mrc.csv --plot mrc.png
      Fixed-size SHARDS over the trace `cairn trace gen --help` writes first;
      curve as CSV and as a picture.
  cairn mrc --trace uniform.vscsi.zst --max 64MiB
      A block trace keyed by start sector (--unit auto), in bytes up to 64 MiB.";

/// `cairn mrc` flags, as typed.
#[derive(clap::Args, Debug)]
#[command(long_about = LONG_ABOUT, after_long_help = EXAMPLES)]
pub struct MrcArgs {
    #[command(flatten)]
    trace: TraceArgs,

    /// Also estimate the curve with fixed-rate SHARDS at RATE, in (0, 1].
    #[arg(long, value_name = "RATE")]
    shards: Option<f64>,

    /// Also estimate the curve with fixed-size SHARDS tracking at most KEYS keys.
    #[arg(long, value_name = "KEYS")]
    shards_max: Option<usize>,

    /// Number of cache sizes, evenly spaced up to the largest reuse distance
    /// (or --max).
    #[arg(long, value_name = "N", default_value_t = 20)]
    points: usize,

    /// Largest cache size to report: a count of objects (`4096`), or bytes
    /// with a byte unit (`64MiB`, which counts capacity in bytes). Default: the
    /// largest reuse distance, beyond which only cold misses remain.
    #[arg(long, value_name = "SIZE")]
    max: Option<String>,

    /// How cache capacity is counted: `objects` or `bytes`. Default: bytes
    /// when --max carries a byte unit (64MiB), objects otherwise.
    #[arg(long, value_enum, value_name = "UNIT")]
    capacity: Option<CapacityArg>,

    /// Write the curve as CSV to FILE (`-` for stdout, replacing the table).
    #[arg(long, value_name = "FILE|-")]
    csv: Option<PathBuf>,

    /// Plot the curve(s) to FILE.svg or FILE.png.
    #[arg(long, value_name = "FILE")]
    plot: Option<PathBuf>,

    /// Refused, with the reason: with TTL, LRU is not a stack algorithm, so
    /// it has no one-pass curve (see above); `cairn sim --ttl` simulates it
    /// at given sizes.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration_us)]
    ttl: Option<u64>,

    /// Compute the curve of a trace whose requests carry TTLs as if they
    /// carried none (without it such a trace is refused).
    #[arg(long)]
    ignore_trace_ttl: bool,
}

/// Why `cairn mrc` has no TTL, for its errors.
const NO_TTL: &str = "the curve comes from LRU's stack distances in one pass (Mattson; SHARDS \
     samples them), which needs LRU to be a stack algorithm, and with TTL it is not: a larger \
     cache keeps an older copy of an object, which expires first, so it can miss where a \
     smaller one hits";

/// Runs `cairn mrc`.
pub fn run(args: &MrcArgs, quiet: bool) -> Result<()> {
    if args.ttl.is_some() {
        bail!(
            "--ttl: {NO_TTL}; simulate LRU with TTL at the sizes you need instead \
             (cairn sim -p lru --ttl DURATION -s 1%,5%,10%,20%)"
        );
    }
    if let Some(rate) = args.shards
        && !(rate > 0.0 && rate <= 1.0)
    {
        bail!("--shards {rate}: the sampling rate must be in (0, 1]");
    }
    if args.shards_max == Some(0) {
        bail!("--shards-max 0: track at least one key");
    }
    if args.points == 0 {
        bail!("--points 0: ask for at least one size");
    }
    let unit = capacity_unit(args.capacity, args.max.as_deref().as_slice(), "--max")?;
    let max = match args.max.as_deref() {
        Some(text) => match cairn_sim::parse_bytes(text)? {
            0 => bail!("--max 0: give a positive size"),
            n => Some(n),
        },
        None => None,
    };
    if let Some(path) = &args.csv {
        output::check_writable(path, "--csv")?;
    }
    if let Some(path) = &args.plot {
        plot::check_path(path)?;
        output::check_writable(path, "--plot")?;
    }
    let input = TraceInput::from_args(&args.trace, GroupMap::default())?;
    if input.carries_ttl() && !args.ignore_trace_ttl {
        bail!(
            "trace {} carries TTLs ({}): {NO_TTL}; give --ignore-trace-ttl for the curve \
             without expiry, or simulate LRU with the TTLs at the sizes you need \
             (cairn sim --trace {} -p lru -s 1%,5%,10%,20%)",
            input.name(),
            input.format_name(),
            input.name()
        );
    }

    let mut exact = MrcTracker::exact(unit);
    let mut estimates: Vec<(String, MrcTracker)> = Vec::new();
    if let Some(rate) = args.shards {
        estimates.push((format!("shards@{rate}"), MrcTracker::shards(unit, rate)));
    }
    if let Some(keys) = args.shards_max {
        estimates.push((
            format!("shards-max@{keys}"),
            MrcTracker::shards_fixed_size(unit, keys),
        ));
    }
    let bar = Bar::new(input.accesses_hint(), "mrc", quiet);
    for access in counted(input.accesses()?, &bar) {
        let access = access?;
        exact.observe(&access);
        for (_, tracker) in &mut estimates {
            tracker.observe(&access);
        }
    }
    bar.finish();

    if exact.observed() == 0 {
        return Err(input.nothing_to_replay());
    }
    let histogram = exact.finish();
    if histogram.cold <= 1.0 {
        bail!(
            "trace {} has one distinct key: every access after the first hits in a cache of \
             one, so there is no curve to draw{}",
            input.name(),
            input.unit_hint()
        );
    }
    if max.is_none() && histogram.max_distance() == 0 {
        bail!(
            "trace {}: no key is accessed twice, so every access misses at every size; \
             there is no curve to draw (give --max to print the flat line anyway)",
            input.name()
        );
    }
    let sizes = even_sizes(max.unwrap_or(histogram.max_distance()), args.points);
    let exact_curve = histogram.miss_ratios(&sizes);
    let mut columns = vec![("lru-exact".to_owned(), exact_curve.clone())];
    let mut errors = Vec::new();
    for (name, tracker) in estimates {
        let rate = tracker.rate();
        let curve = tracker.finish().miss_ratios(&sizes);
        let error = mean_absolute_error(&exact_curve, &curve);
        errors.push(format!(
            "{name}: final rate {rate:.6}, mean absolute error vs exact {error:.6} over {} sizes",
            sizes.len()
        ));
        columns.push((name, curve));
    }

    let unit_name = match unit {
        CapacityUnit::Objects => "objects",
        CapacityUnit::Bytes => "bytes",
    };
    let csv = args.csv.as_deref().map(Destination::parse);
    if csv == Some(Destination::Stdout) {
        for line in &errors {
            tracing::info!("{line}");
        }
    } else {
        Destination::Stdout.write("table", |out| {
            let mut header = vec![format!("size ({unit_name})")];
            header.extend(columns.iter().map(|(n, _)| n.clone()));
            let rows: Vec<Vec<String>> = sizes
                .iter()
                .enumerate()
                .map(|(i, size)| {
                    let mut row = vec![size.to_string()];
                    row.extend(columns.iter().map(|(_, c)| format!("{:.4}", c[i])));
                    row
                })
                .collect();
            table(out, &header, &rows)?;
            for line in &errors {
                writeln!(out, "{line}")?;
            }
            Ok(())
        })?;
    }
    if let Some(destination) = &csv {
        destination.write("CSV", |out| {
            let names: Vec<&str> = columns.iter().map(|(n, _)| n.as_str()).collect();
            writeln!(out, "size_{unit_name},{}", names.join(","))?;
            for (i, size) in sizes.iter().enumerate() {
                let cells: Vec<String> = columns
                    .iter()
                    .map(|(_, c)| format!("{:.6}", c[i]))
                    .collect();
                writeln!(out, "{size},{}", cells.join(","))?;
            }
            Ok(())
        })?;
    }
    if let Some(path) = &args.plot {
        let series: Vec<plot::Series> = columns
            .iter()
            .map(|(name, curve)| plot::Series {
                name: name.clone(),
                points: sizes
                    .iter()
                    .map(|&s| s as f64)
                    .zip(curve.iter().copied())
                    .collect(),
            })
            .collect();
        let title = format!("LRU miss-ratio curve — {}", input.name());
        plot::miss_ratio_curves(path, &title, &format!("cache size ({unit_name})"), &series)?;
    }
    Ok(())
}
