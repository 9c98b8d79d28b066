//! `cairn sim`: replay a trace against policies × cache sizes.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use cairn_policy::{AdmissionConfig, PolicyConfig, PrefetchConfig};
use cairn_sim::{
    CacheSize, CapacityUnit, Configuration, CostModel, GroupMap, ReplayOptions, Report, WorkingSet,
    policy_name, prepass, replay,
};
use serde::{Deserialize, Serialize};

use crate::input::{self, TraceArgs, TraceInput};
use crate::output::{self, Destination, csv_field, table};
use crate::plot;
use crate::policy_spec;
use crate::progress::Bar;

/// The default policy set; names not (yet) in the policy crate are skipped.
const DEFAULT_POLICIES: &[&str] = &[
    "lru", "fifo", "clock", "lfu", "arc", "s3fifo", "sieve", "opt",
];
/// The default sizes: fractions of the working set.
const DEFAULT_SIZES: &[&str] = &["1%", "5%", "10%", "20%"];
/// `--size auto`: libCacheSim's automatic sizes (`cachesim … auto`,
/// `set_cache_size`), fractions of the working set, each kept when it holds
/// more than 4 objects (at least 100 with --capacity bytes).
const AUTO_SIZES: &[&str] = &["0.1%", "0.3%", "1%", "3%", "10%", "20%", "40%", "80%"];

const LONG_ABOUT: &str = "\
Replay a trace against every combination of policy and cache size, and print
the miss ratio of each as a table (rows: policies, columns: sizes).

The trace is read once: a reader thread splits requests into accesses and hands
chunks of them to one worker per core, each owning some of the simulated caches.
Sizes given as fractions of the working set (10%, 0.1) need a first pass over
the trace to count distinct keys (or their bytes, with --capacity bytes); the
size is then (uint64)(working_set × fraction), exactly as libCacheSim computes
it. A size with a byte unit (64MiB) counts capacity in bytes.

What a key is follows the trace (--unit auto): a block trace (vscsi,
cloudphysics, msr) is keyed by disk and start sector, as libCacheSim reads
VSCSI; an object trace (oracle, text, csv) by object. An empty trace, a filter
that keeps nothing, or a size that rounds down to 0 is an error; output
arguments (--csv, --json, --plot) are checked before the run.

With no arguments, replays the CloudPhysics sample trace embedded in the binary
against the default policies (lru fifo clock lfu arc s3fifo sieve opt, those
built into this binary) at 1%, 5%, 10% and 20% of the working set, counting
capacity in objects.

Besides miss ratios, every run models service time: each cost group has a hit
cost and a miss cost (latency + size / bandwidth). By default there is one group,
an HDD (5 ms + 150 MB/s per miss) behind a DRAM cache (1 µs + 10,000 MB/s per
hit). --cost FILE.toml sets groups, device mapping and costs; --metric chooses
what the table shows; --csv and --json carry every counter.";

const EXAMPLES: &str = "\
Examples:
  cairn sim
      The sample trace, default policies, 1% 5% 10% 20% of the working set.
  cairn sim --trace zipf.oracleGeneral.bin --policy lru --policy fifo --size 0.01,0.1
      Two policies at 1% and 10% of the trace's distinct objects (the trace
      `cairn trace gen --help` writes first).
  cairn sim --trace uniform.vscsi.zst -p lru -p s3fifo -s 1%,10%
      A block trace, keyed by start sector (--unit auto), as libCacheSim reads
      VSCSI; 1% and 10% of its distinct start sectors.
  cairn sim --size 64MiB --size 1GiB --policy lru
      Absolute sizes: a byte unit counts capacity in bytes.
  cairn sim --unit block:4KiB --op read --csv -
      Block mode (4 KiB blocks), reads only, CSV on stdout.
  cairn sim --policy lru --size 1%,2%,5%,10%,20%,50% --plot mrc.svg
      Miss ratio against size, plotted.
  cairn sim -p lru -p s3fifo --size auto
      libCacheSim's automatic sizes: 0.1% to 80% of the working set, less
      those too small to mean anything.
  cairn sim --cost ssd-hdd.toml --metric throughput --json run.json
      Modelled throughput under a custom cost model (ssd-hdd.toml as in
      docs/simulator.md).
  cairn sim --policy lru --policy s3fifo --admission nhit:threshold=3
      Both policies behind Open CAS's nhit filter: a block enters on its
      third miss (rows are labelled lru+nhit:threshold=3, ...).
  cairn sim --requests 100000 --warmup 20000 -p lru -p s3fifo
      The first 100,000 requests of the sample trace, counting from the
      20,001st (the first 20,000 only warm the caches).
  cairn sim --trace runs.vscsi --unit block:4KiB -p lru --prefetch obl -s 1%,10%
      LRU with one-block lookahead on the runs trace of `trace gen --help`:
      after four sequential blocks the next is loaded (rows: lru>obl).";

/// Which number the stdout table shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Metric {
    /// Misses over requests.
    MissRatio,
    /// Missed bytes over requested bytes.
    ByteMissRatio,
    /// Modelled throughput in MB/s under the cost model.
    Throughput,
}

/// How capacity is counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum CapacityArg {
    /// The number of resident units, whatever their sizes (libCacheSim's
    /// `ignore_obj_size`).
    Objects,
    /// The sum of the resident units' sizes.
    Bytes,
}

impl From<CapacityArg> for CapacityUnit {
    fn from(value: CapacityArg) -> Self {
        match value {
            CapacityArg::Objects => CapacityUnit::Objects,
            CapacityArg::Bytes => CapacityUnit::Bytes,
        }
    }
}

/// `cairn sim` flags, as typed.
#[derive(clap::Args, Debug)]
#[command(long_about = LONG_ABOUT, after_long_help = EXAMPLES)]
pub struct SimArgs {
    #[command(flatten)]
    trace: TraceArgs,

    /// A policy to simulate: `name`, or `name:key=value,key=value` to set its
    /// parameters (e.g. `s3fifo:small_size_ratio=0.2`). Repeat for several policies.
    /// Default: lru fifo clock lfu arc s3fifo sieve opt (those available).
    #[arg(long = "policy", short = 'p', value_name = "SPEC")]
    policies: Vec<String>,

    /// An admission filter in front of every policy: `name` or
    /// `name:key=value,...` (`nhit`, `nhit:threshold=3`, `frequency`,
    /// `bloom`, `size:below_bytes=65536`, `probabilistic`,
    /// `size-probabilistic:exponent=1e-5`, `adaptsize`,
    /// `adaptsize:reconf_interval=5000`; see docs/policies.md). Rows are
    /// labelled `POLICY+SPEC`. Default: none (`always`).
    #[arg(long, value_name = "SPEC")]
    admission: Option<String>,

    /// A prefetcher beside every policy: `name` or `name:key=value,...`
    /// (`obl`, `obl:sequential_confidence_k=2`, `pg`, `pg:lookahead_range=10`,
    /// `mithril`, `mithril:min_support=1`; see docs/policies.md). After each access it names units to load; those
    /// not resident are admitted as misses would be. Rows are labelled
    /// `POLICY>SPEC`; the prefetched and prefetch-hit counts go to --csv and
    /// --json. Default: none.
    #[arg(long, value_name = "SPEC")]
    prefetch: Option<String>,

    /// A cache size: `10%` or `0.1` (a fraction of the working set), `4096`
    /// (a count of objects, or bytes with --capacity bytes) or a size in bytes
    /// with its unit (`64MiB`, `1GB`, `4096B`), which counts capacity in bytes;
    /// or `auto`: libCacheSim's eight sizes, 0.1% 0.3% 1% 3% 10% 20% 40% 80%,
    /// less those that hold 4 objects or fewer (fewer than 100 distinct
    /// objects' worth with --capacity bytes). Repeat, or separate with commas.
    /// Default: 1%,5%,10%,20%.
    #[arg(long = "size", short = 's', value_name = "SIZE", value_delimiter = ',')]
    sizes: Vec<String>,

    /// How cache capacity is counted: `objects` (resident units, whatever
    /// their size) or `bytes` (the sum of their sizes). Default: bytes when a
    /// --size carries a byte unit (64MiB), objects otherwise.
    #[arg(long, value_enum, value_name = "UNIT")]
    capacity: Option<CapacityArg>,

    /// What the table on stdout shows.
    #[arg(long, value_enum, value_name = "METRIC", default_value = "miss-ratio")]
    metric: Metric,

    /// Write every configuration's counters as CSV to FILE (`-` for stdout,
    /// which then replaces the table).
    #[arg(long, value_name = "FILE|-")]
    csv: Option<PathBuf>,

    /// Write the run (trace, working set, cost model, every report with
    /// per-group counters) as JSON to FILE (`-` for stdout, replacing the table).
    #[arg(long, value_name = "FILE|-")]
    json: Option<PathBuf>,

    /// Plot miss ratio against cache size, one line per policy, to FILE.svg or
    /// FILE.png.
    #[arg(long, value_name = "FILE")]
    plot: Option<PathBuf>,

    /// A TOML file with the cost model and the cost-group map (see
    /// docs/simulator.md). Default: one HDD group behind DRAM.
    #[arg(long, value_name = "FILE")]
    cost: Option<PathBuf>,

    /// Simulation threads. 0 uses every core (one worker per core, never more
    /// than the configurations, and the trace decoded on a thread of its own).
    /// 1 runs everything on one thread, decoding included: the strictly
    /// single-threaded mode, for comparisons with single-threaded simulators.
    #[arg(long, value_name = "N", default_value_t = 0)]
    threads: usize,

    /// Accesses that only warm the caches: every configuration replays them,
    /// and counting starts after the last (libCacheSim's warm-up, counted in
    /// accesses: requests in object and start-sector mode, blocks in block
    /// mode). Default 0.
    #[arg(long, value_name = "N", default_value_t = 0)]
    warmup: u64,
}

/// The cost file's shape.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct CostFile {
    /// How accesses map to cost groups.
    #[serde(default)]
    group_map: GroupMap,
    /// What each group costs.
    #[serde(default)]
    cost: CostModel,
}

/// Whether a size as typed carries a byte unit (`64MiB`, `1GB`, `4096B`):
/// not a fraction, not a bare count.
pub fn has_byte_unit(text: &str) -> bool {
    let text = text.trim();
    !text.ends_with('%') && !text.contains('.') && text.ends_with(|c: char| c.is_ascii_alphabetic())
}

/// How capacity is counted, from `--capacity` and the sizes as typed
/// (`flag` names them in errors): a byte unit means bytes; under
/// `--capacity objects` it is refused, and beside a bare count it is
/// ambiguous, so refused too.
pub fn capacity_unit(
    given: Option<CapacityArg>,
    sizes: &[&str],
    flag: &str,
) -> Result<CapacityUnit> {
    let in_bytes: Vec<&str> = sizes.iter().copied().filter(|t| has_byte_unit(t)).collect();
    let Some(&first) = in_bytes.first() else {
        return Ok(given.unwrap_or(CapacityArg::Objects).into());
    };
    match given {
        Some(CapacityArg::Bytes) => Ok(CapacityUnit::Bytes),
        Some(CapacityArg::Objects) => bail!(
            "{flag} {first}: a size in bytes, but --capacity objects counts objects; \
             give a count (e.g. {flag} 16384) or a fraction (e.g. {flag} 10%), \
             or drop --capacity objects to count bytes"
        ),
        None => {
            let counts: Vec<&str> = sizes
                .iter()
                .copied()
                .filter(|t| !has_byte_unit(t) && !t.contains('%') && !t.contains('.'))
                .collect();
            if let Some(count) = counts.first() {
                bail!(
                    "{flag} {count} beside {flag} {first}: {first} counts capacity in bytes, \
                     so {count} is ambiguous; write {count}B for bytes, or give --capacity \
                     objects and no byte units"
                );
            }
            Ok(CapacityUnit::Bytes)
        }
    }
}

/// The validated run.
struct SimConfig {
    input: TraceInput,
    policies: Vec<(String, PolicyConfig)>,
    admission: AdmissionConfig,
    prefetch: Option<PrefetchConfig>,
    sizes: Vec<(String, CacheSize)>,
    /// `--size auto`: drop the sizes too small for the working set.
    auto_sizes: bool,
    unit: CapacityUnit,
    metric: Metric,
    csv: Option<Destination>,
    json: Option<Destination>,
    plot: Option<PathBuf>,
    cost: CostModel,
    threads: usize,
    warmup: u64,
}

impl SimConfig {
    fn from_args(args: SimArgs) -> Result<Self> {
        let cost_file = match &args.cost {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("reading cost file {}", path.display()))?;
                toml::from_str::<CostFile>(&text)
                    .with_context(|| format!("cost file {}", path.display()))?
            }
            None => CostFile::default(),
        };
        cost_file.group_map.validate()?;
        cost_file.cost.validate(cost_file.group_map.groups())?;
        let specs: Vec<String> = if args.policies.is_empty() {
            DEFAULT_POLICIES
                .iter()
                .filter(|n| PolicyConfig::NAMES.contains(n))
                .map(|n| (*n).to_owned())
                .collect()
        } else {
            args.policies
        };
        let admission = match &args.admission {
            Some(spec) => policy_spec::parse_admission(spec)?,
            None => AdmissionConfig::default(),
        };
        let prefetch = args
            .prefetch
            .as_deref()
            .map(policy_spec::parse_prefetch)
            .transpose()?;
        let label = |spec: String| {
            let mut label = match &args.admission {
                Some(filter) => format!("{spec}+{filter}"),
                None => spec,
            };
            if let Some(prefetcher) = &args.prefetch {
                label = format!("{label}>{prefetcher}");
            }
            label
        };
        let policies = specs
            .into_iter()
            .map(|spec| Ok((label(spec.clone()), policy_spec::parse(&spec)?)))
            .collect::<Result<Vec<_>>>()?;
        let auto_sizes = args
            .sizes
            .iter()
            .any(|s| s.trim().eq_ignore_ascii_case("auto"));
        if auto_sizes && args.sizes.len() > 1 {
            bail!("--size auto: give it alone; it chooses every size");
        }
        let sizes: Vec<String> = if args.sizes.is_empty() {
            DEFAULT_SIZES.iter().map(|s| (*s).to_owned()).collect()
        } else if auto_sizes {
            AUTO_SIZES.iter().map(|s| (*s).to_owned()).collect()
        } else {
            args.sizes
        };
        let sizes = sizes
            .into_iter()
            .map(|text| {
                let size = text.parse::<CacheSize>()?;
                Ok((text, size))
            })
            .collect::<Result<Vec<_>>>()?;
        for (flag, path) in [("--csv", &args.csv), ("--json", &args.json)] {
            if let Some(path) = path {
                output::check_writable(path, flag)?;
            }
        }
        if let Some(path) = &args.plot {
            plot::check_path(path)?;
            output::check_writable(path, "--plot")?;
        }
        let unit = capacity_unit(
            args.capacity,
            &sizes.iter().map(|(t, _)| t.as_str()).collect::<Vec<_>>(),
            "--size",
        )?;
        let outputs_to_stdout = [&args.csv, &args.json]
            .iter()
            .filter(|d| d.as_deref().is_some_and(|p| p.as_os_str() == "-"))
            .count();
        if outputs_to_stdout > 1 {
            bail!("only one of --csv and --json can write to stdout (`-`)");
        }
        Ok(Self {
            input: TraceInput::from_args(&args.trace, cost_file.group_map)?,
            policies,
            admission,
            prefetch,
            sizes,
            auto_sizes,
            unit,
            metric: args.metric,
            csv: args.csv.as_deref().map(Destination::parse),
            json: args.json.as_deref().map(Destination::parse),
            plot: args.plot,
            cost: cost_file.cost,
            threads: args.threads,
            warmup: args.warmup,
        })
    }
}

/// Keeps the `--size auto` sizes libCacheSim keeps for a working set of
/// `objects` distinct objects: `(long)(objects × fraction)` above 4 when
/// counting objects, at least 100 when counting bytes.
fn keep_auto_sizes(sizes: &mut Vec<(String, CacheSize)>, unit: CapacityUnit, objects: u64) {
    sizes.retain(|(_, size)| {
        let CacheSize::Fraction(fraction) = *size else {
            return true;
        };
        let held = (objects as f64 * fraction) as i64;
        match unit {
            CapacityUnit::Objects => held > 4,
            CapacityUnit::Bytes => held >= 100,
        }
    });
}

/// What the JSON output holds.
#[derive(Serialize)]
struct JsonRun<'a> {
    trace: String,
    unit: String,
    accesses: Option<u64>,
    working_set: Option<WorkingSet>,
    capacity_unit: CapacityUnit,
    cost_model: &'a CostModel,
    reports: &'a [Report],
}

/// Runs `cairn sim`.
pub fn run(args: SimArgs, quiet: bool) -> Result<()> {
    let mut config = SimConfig::from_args(args)?;
    let has_opt = config.policies.iter().any(|(_, p)| policy_name(p) == "opt");
    let needs_working_set = config.sizes.iter().any(|(_, s)| s.needs_working_set());

    let mut working_set = None;
    let mut accesses_total = config.input.accesses_hint();
    let mut next_times = None;
    if needs_working_set || has_opt {
        let bar = Bar::new(accesses_total, "first pass", quiet);
        let pass = prepass(
            config.input.accesses()?,
            has_opt,
            config.input.working_set_scaling(),
            &bar,
        )?;
        bar.finish();
        tracing::info!(
            trace = %config.input.name(),
            accesses = pass.accesses,
            working_set_objects = pass.working_set.objects,
            working_set_bytes = pass.working_set.bytes,
            "first pass"
        );
        if has_opt && pass.carries_next {
            tracing::info!("opt uses the trace's own next-access times");
        } else {
            next_times = pass.next_times;
        }
        if pass.accesses == 0 {
            return Err(config.input.nothing_to_replay());
        }
        working_set = Some(pass.working_set);
        accesses_total = Some(pass.accesses);
    }
    if config.auto_sizes {
        let objects = working_set.unwrap_or_default().objects;
        keep_auto_sizes(&mut config.sizes, config.unit, objects);
        if config.sizes.is_empty() {
            bail!(
                "--size auto: the working set ({objects} {}) is too small for any of \
                 libCacheSim's automatic sizes; give sizes with --size{}",
                input::plural(objects, "object", "objects"),
                config.input.unit_hint()
            );
        }
    }

    for (text, size) in &config.sizes {
        let working_set = working_set.unwrap_or_default();
        if size.resolve(config.unit, working_set).limit() == 0 {
            let (count, unit) = match config.unit {
                CapacityUnit::Objects => (
                    working_set.objects,
                    input::plural(working_set.objects, "object", "objects"),
                ),
                CapacityUnit::Bytes => (
                    working_set.bytes,
                    input::plural(working_set.bytes, "byte", "bytes"),
                ),
            };
            bail!(
                "--size {text}: {text} of the working set ({count} {unit}) rounds down to 0, \
                 a cache that holds nothing; give a larger fraction or an absolute size{}",
                config.input.unit_hint()
            );
        }
    }
    let mut configurations = Vec::new();
    for (label, policy) in &config.policies {
        for (text, size) in &config.sizes {
            let capacity = size.resolve(config.unit, working_set.unwrap_or_default());
            configurations.push(Configuration {
                label: label.clone(),
                policy: policy.clone(),
                admission: config.admission.clone(),
                prefetch: config.prefetch.clone(),
                size: text.clone(),
                capacity,
            });
        }
    }

    let options = ReplayOptions {
        threads: config.threads,
        cost: config.cost.clone(),
        warmup_accesses: config.warmup,
        ..ReplayOptions::default()
    };
    tracing::info!(
        configurations = configurations.len(),
        workers = options.workers(configurations.len()),
        "replaying"
    );
    let mut stream = config.input.accesses()?;
    if let Some(next) = next_times {
        stream = stream.with_next_times(next);
    }
    let bar = Bar::new(accesses_total, "replay", quiet);
    let started = std::time::Instant::now();
    let reports = replay(&configurations, stream, &options, &bar)?;
    bar.finish();
    if reports.first().is_some_and(|r| r.metrics.requests == 0) {
        if config.warmup > 0 {
            bail!(
                "--warmup {}: the trace has no more accesses than that, so nothing was \
                 counted; give a smaller --warmup",
                config.warmup
            );
        }
        return Err(config.input.nothing_to_replay());
    }
    tracing::info!(seconds = started.elapsed().as_secs_f64(), "replay done");

    write_outputs(&config, &reports, working_set, accesses_total)
}

/// Counts accesses on `bar` in steps of 64 Ki (the bar is cheap, not free).
pub fn counted<'a, T>(
    iter: impl Iterator<Item = T> + 'a,
    bar: &'a Bar,
) -> impl Iterator<Item = T> + 'a {
    const STEP: u64 = 1 << 16;
    let mut n = 0u64;
    iter.inspect(move |_| {
        n += 1;
        if n.is_multiple_of(STEP) {
            bar.inc(STEP);
        }
    })
}

fn write_outputs(
    config: &SimConfig,
    reports: &[Report],
    working_set: Option<WorkingSet>,
    accesses: Option<u64>,
) -> Result<()> {
    let stdout_taken = [&config.csv, &config.json]
        .iter()
        .any(|d| matches!(d, Some(Destination::Stdout)));
    if !stdout_taken {
        Destination::Stdout.write("table", |out| print_table(out, config, reports))?;
    }
    if let Some(destination) = &config.csv {
        destination.write("CSV", |out| write_csv(out, reports))?;
    }
    if let Some(destination) = &config.json {
        let run = JsonRun {
            trace: config.input.name(),
            unit: input::unit_name(config.input.stream.unit),
            accesses,
            working_set,
            capacity_unit: config.unit,
            cost_model: &config.cost,
            reports,
        };
        destination.write("JSON", |out| {
            serde_json::to_writer_pretty(&mut *out, &run)?;
            writeln!(out)
        })?;
    }
    if let Some(path) = &config.plot {
        let series: Vec<plot::Series> = config
            .policies
            .iter()
            .map(|(label, _)| {
                let mut points: Vec<(f64, f64)> = reports
                    .iter()
                    .filter(|r| &r.label == label)
                    .map(|r| (r.capacity as f64, r.miss_ratio))
                    .collect();
                points.sort_by(|a, b| a.0.total_cmp(&b.0));
                plot::Series {
                    name: label.clone(),
                    points,
                }
            })
            .collect();
        let unit = match config.unit {
            CapacityUnit::Objects => "cache size (objects)",
            CapacityUnit::Bytes => "cache size (bytes)",
        };
        let title = format!("Miss ratio — {}", config.input.name());
        plot::miss_ratio_curves(path, &title, unit, &series)?;
        tracing::info!(path = %path.display(), "plot written");
    }
    Ok(())
}

fn print_table(out: &mut dyn Write, config: &SimConfig, reports: &[Report]) -> std::io::Result<()> {
    let mut header = vec!["policy".to_owned()];
    header.extend(config.sizes.iter().map(|(text, _)| text.clone()));
    let columns = config.sizes.len();
    let rows: Vec<Vec<String>> = reports
        .chunks(columns.max(1))
        .map(|row| {
            let mut cells = vec![row.first().map(|r| r.label.clone()).unwrap_or_default()];
            cells.extend(row.iter().map(|r| match config.metric {
                Metric::MissRatio => format!("{:.4}", r.miss_ratio),
                Metric::ByteMissRatio => format!("{:.4}", r.byte_miss_ratio),
                Metric::Throughput => format!("{:.2}", r.modelled_throughput_mb_s),
            }));
            cells
        })
        .collect();
    table(out, &header, &rows)
}

fn write_csv(out: &mut dyn Write, reports: &[Report]) -> std::io::Result<()> {
    writeln!(
        out,
        "label,policy,size,capacity,capacity_unit,requests,hits,misses,miss_ratio,bytes,miss_bytes,\
         byte_miss_ratio,reads,writes,read_hits,write_hits,evictions,modelled_seconds,modelled_throughput_mb_s,\
         prefetched,prefetch_hits"
    )?;
    for r in reports {
        let m = &r.metrics;
        writeln!(
            out,
            "{},{},{},{},{},{},{},{},{:.6},{},{},{:.6},{},{},{},{},{},{:.6},{:.3},{},{}",
            csv_field(&r.label),
            csv_field(&r.policy),
            csv_field(&r.size),
            r.capacity,
            r.capacity_unit,
            m.requests,
            m.hits,
            m.misses,
            r.miss_ratio,
            m.bytes,
            m.miss_bytes,
            r.byte_miss_ratio,
            m.reads,
            m.writes,
            m.read_hits,
            m.write_hits,
            m.evictions,
            r.modelled_seconds,
            r.modelled_throughput_mb_s,
            m.prefetched,
            m.prefetch_hits,
        )?;
    }
    Ok(())
}
