//! `cairn sim`: replay a trace against policies × cache sizes.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use anyhow::{Context, Result, bail};
use cairn_policy::{AdmissionConfig, PolicyConfig, PrefetchConfig};
use cairn_sim::{
    CacheSize, CapacityUnit, Configuration, CostModel, GroupMap, Hierarchy, Level2, Progress,
    ReplayOptions, Ttl, prepass, replay,
};
use serde::{Deserialize, Serialize};

use crate::input::{self, TraceInput, TraceOptions};
use crate::output::{self, Destination};
use crate::plot;
use crate::policy_spec;
use crate::progress::Bar;

mod report;

pub use report::Metric;
use report::{Outputs, TraceRun, write_outputs};

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

Several --trace flags run each trace in turn against every configuration, each
with its own working set (so 1% is 1% of each trace), and label the results by
trace: one table per trace on stdout, a `trace` column in --csv, a list of runs
in --json, one --plot file per trace (mrc.svg gives mrc-TRACE.svg). When a
trace has fewer configurations than there are cores, traces run side by side.

--l2 POLICY@SIZE puts a second level under every policy, as the engine stacks
its flash tier under its DRAM cache: by default inclusive as the engine is (a
miss fills both levels, L2 sees every write, what L1 evicts is dropped), or
with --l2-mode exclusive (L2 hits move up, L1 evictions move down). The table
then lists each configuration's L1 hits, L2 hits and misses.

Besides miss ratios, every run models service time: each cost group has a hit
cost and a miss cost (latency + size / bandwidth). By default there is one group,
an HDD (5 ms + 150 MB/s per miss) behind a DRAM cache (1 µs + 10,000 MB/s per
hit), an L2 hit costing flash's 100 µs + 1,000 MB/s. --cost FILE.toml sets
groups, device mapping and costs; --metric chooses what the table shows; --csv
and --json carry every counter.";

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
  cairn sim --trace zipf.oracleGeneral.bin --trace uniform.vscsi.zst -p lru -s 1%,10%
      Both traces, each at 1% and 10% of its own working set: a table per
      trace (--csv: a `trace` column; --json: a list of runs).
  cairn sim --size 64MiB --size 1GiB --policy lru
      Absolute sizes: a byte unit counts capacity in bytes.
  cairn sim --unit block:4KiB --op read --csv -
      Block mode (4 KiB blocks), reads only, CSV on stdout.
  cairn sim --policy lru --size 1%,2%,5%,10%,20%,50% --plot mrc.svg
      Miss ratio against size, plotted.
  cairn sim -p lru -p s3fifo --size auto
      libCacheSim's automatic sizes: 0.1% to 80% of the working set, less
      those too small to mean anything.
  cairn sim -p lru -s 1%,5% --l2 s3fifo@20% --l2 lru@20% --l2-mode exclusive
      LRU as a DRAM cache over an S3-FIFO or an LRU flash tier of 20% of the
      working set, a unit in one level at a time: L1 hits, L2 hits, misses.
  cairn sim --cost ssd-hdd.toml --metric throughput --json run.json
      Modelled throughput under a custom cost model (ssd-hdd.toml as in
      docs/simulator.md).
  cairn sim --policy lru --policy s3fifo --admission nhit:threshold=3
      Both policies behind Open CAS's nhit filter: a block enters on its
      third miss (rows are labelled lru+nhit:threshold=3, ...).
  cairn sim --trace zipf.oracleGeneral.bin -p lru -p s3fifo -s 1%,10% --ttl 30s --csv -
      Objects expire 30 s (trace time) after they enter the cache; the
      `expired` column counts the accesses that found theirs expired.
  cairn sim -p lru -s 1% --l2 s3fifo@20% --ttl 60s
      The two levels above with objects living 60 s of the sample trace's
      clock: an expired object leaves both levels, and `expired` (--csv,
      --json) counts each once.
  cairn sim --requests 100000 --warmup 20000 -p lru -p s3fifo
      The first 100,000 requests of the sample trace, counting from the
      20,001st (the first 20,000 only warm the caches).
  cairn sim --trace runs.vscsi --unit block:4KiB -p lru --prefetch obl -s 1%,10%
      LRU with one-block lookahead on the runs trace of `trace gen --help`:
      after four sequential blocks the next is loaded (rows: lru>obl).";

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

/// How the levels of `--l2` share units.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum HierarchyArg {
    /// A miss fills both levels; L2 sees every write; L1 evictions are dropped.
    Inclusive,
    /// A unit lives in one level: L2 hits move up, L1 evictions move down.
    Exclusive,
}

impl From<HierarchyArg> for Hierarchy {
    fn from(value: HierarchyArg) -> Self {
        match value {
            HierarchyArg::Inclusive => Hierarchy::Inclusive,
            HierarchyArg::Exclusive => Hierarchy::Exclusive,
        }
    }
}

/// `cairn sim` flags, as typed.
#[derive(clap::Args, Debug)]
#[command(long_about = LONG_ABOUT, after_long_help = EXAMPLES)]
pub struct SimArgs {
    /// A trace file to read; repeat for several: each is replayed against
    /// every configuration, with sizes that are fractions taken of its own
    /// working set, and reported under its name. Without it, the sample
    /// trace embedded in the binary (a VM block trace from Cloud Physics,
    /// 113,872 requests) is used.
    #[arg(long = "trace", value_name = "PATH")]
    traces: Vec<PathBuf>,

    #[command(flatten)]
    trace: TraceOptions,

    /// A policy to simulate: `name`, or `name:key=value,key=value` to set its
    /// parameters (e.g. `s3fifo:small_size_ratio=0.2`). Repeat for several
    /// policies, or list them as cachesim takes them: `-p lru,arc,s3fifo` (in
    /// `-p lru,s3fifo:small_size_ratio=0.2` the parameters are the last
    /// name's). Default: lru fifo clock lfu arc s3fifo sieve opt (those
    /// available).
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

    /// A second cache level under every policy, as the engine stacks its
    /// flash tier under its DRAM cache: `POLICY@SIZE` (`s3fifo@10%`,
    /// `'s3fifo:small_size_ratio=0.2@64MiB'`), SIZE as for --size. Repeat for
    /// several; each runs under every policy at every --size, and the table
    /// lists L1 hits, L2 hits and misses. Not with --prefetch. Default: none.
    #[arg(long = "l2", value_name = "POLICY@SIZE")]
    l2: Vec<String>,

    /// How the two levels of --l2 share units: `inclusive` (the engine's
    /// stack: a miss fills both levels, L2 sees every write, L1 evictions are
    /// dropped) or `exclusive` (a unit lives in one level: L2 hits move up,
    /// L1 evictions move down).
    #[arg(
        long = "l2-mode",
        value_enum,
        value_name = "MODE",
        default_value = "inclusive"
    )]
    l2_mode: HierarchyArg,

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
    /// which then replaces the table), the trace's name in the first column.
    #[arg(long, value_name = "FILE|-")]
    csv: Option<PathBuf>,

    /// Write the run (trace, working set, cost model, every report with
    /// per-group counters) as JSON to FILE (`-` for stdout, replacing the
    /// table); with several traces, a list of such runs.
    #[arg(long, value_name = "FILE|-")]
    json: Option<PathBuf>,

    /// Plot miss ratio against cache size, one line per policy (per policy
    /// and L2 with --l2), to FILE.svg or FILE.png; with several traces, one
    /// file per trace, FILE-TRACE.svg.
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

    /// A time to live for objects whose request carries none: `30s`, `10m`,
    /// `2h`, `1d`, `500ms`, or plain seconds (`3600`). An object expires that
    /// long after it is inserted; a hit does not refresh it; an access after
    /// the expiry finds it expired, removes it and misses (libCacheSim's TTL).
    /// Times are the trace's. A trace whose requests carry TTLs
    /// (oraclesystwrns, a CSV with a `ttl_column`) expires objects by those
    /// even without --ttl. With --l2 an expired object leaves both levels
    /// (one `expired`); with --prefetch a prefetched object takes --ttl.
    /// Default: none.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration_us)]
    ttl: Option<u64>,

    /// Ignore the TTLs the trace's requests carry: every object takes --ttl
    /// (or never expires without it).
    #[arg(long)]
    ignore_trace_ttl: bool,

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

/// Parses a duration (`30s`, `10m`, `2h`, `1d`, `500ms`, `250us`, or plain
/// seconds, fractions allowed) into µs.
pub fn parse_duration_us(text: &str) -> Result<u64, String> {
    let trimmed = text.trim();
    let split = trimmed
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(split);
    let us_per_unit: f64 = match unit.trim() {
        "" | "s" | "sec" | "secs" => 1e6,
        "us" | "µs" => 1.0,
        "ms" => 1e3,
        "m" | "min" | "mins" => 60e6,
        "h" => 3600e6,
        "d" => 86_400e6,
        other => {
            return Err(format!(
                "`{text}`: unknown unit `{other}`; give e.g. 30s, 10m, 2h, 1d, 500ms, or seconds"
            ));
        }
    };
    let value: f64 = number
        .parse()
        .map_err(|_| format!("`{text}`: expected a duration such as 30s, 10m or 3600"))?;
    let us = value * us_per_unit;
    if !(0.0..1.8e19).contains(&us) {
        return Err(format!("`{text}`: out of range"));
    }
    Ok(us.round() as u64)
}

/// One `--l2 POLICY@SIZE`, validated.
#[derive(Clone, Debug)]
struct SecondLevelSpec {
    /// The policy as typed.
    label: String,
    policy: PolicyConfig,
    /// The size as typed.
    size_text: String,
    size: CacheSize,
}

impl SecondLevelSpec {
    /// Parses `POLICY@SIZE` (split at the last `@`).
    fn parse(text: &str) -> Result<Self> {
        let Some((policy, size)) = text.rsplit_once('@') else {
            bail!(
                "--l2 {text}: give the second level's size too, as POLICY@SIZE \
                 (e.g. --l2 {text}@10%)"
            );
        };
        let (policy, size) = (policy.trim(), size.trim());
        if size.eq_ignore_ascii_case("auto") {
            bail!("--l2 {text}: auto sizes are for --size; give the L2 size (e.g. {policy}@10%)");
        }
        Ok(Self {
            label: policy.to_owned(),
            policy: policy_spec::parse(policy).with_context(|| format!("--l2 {text}"))?,
            size_text: size.to_owned(),
            size: size
                .parse::<CacheSize>()
                .with_context(|| format!("--l2 {text}"))?,
        })
    }
}

/// The validated run.
struct SimConfig {
    inputs: Vec<TraceInput>,
    policies: Vec<(String, PolicyConfig)>,
    admission: AdmissionConfig,
    prefetch: Option<PrefetchConfig>,
    sizes: Vec<(String, CacheSize)>,
    /// `--l2`: second levels, each under every policy at every size.
    l2: Vec<SecondLevelSpec>,
    l2_mode: Hierarchy,
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
                .iter()
                .flat_map(|arg| policy_spec::split_list(arg))
                .collect()
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
        let l2 = args
            .l2
            .iter()
            .map(|text| SecondLevelSpec::parse(text))
            .collect::<Result<Vec<_>>>()?;
        if !l2.is_empty() && args.prefetch.is_some() {
            bail!(
                "--prefetch with --l2: a prefetcher beside a two-level hierarchy is not \
                 modelled; drop one of them"
            );
        }
        // L1 and L2 count capacity alike: a byte unit in either means bytes.
        let texts: Vec<&str> = sizes
            .iter()
            .map(|(t, _)| t.as_str())
            .chain(l2.iter().map(|l| l.size_text.as_str()))
            .collect();
        let flag = if l2.is_empty() {
            "--size"
        } else {
            "--size/--l2"
        };
        let unit = capacity_unit(args.capacity, &texts, flag)?;
        let outputs_to_stdout = [&args.csv, &args.json]
            .iter()
            .filter(|d| d.as_deref().is_some_and(|p| p.as_os_str() == "-"))
            .count();
        if outputs_to_stdout > 1 {
            bail!("only one of --csv and --json can write to stdout (`-`)");
        }
        for (at, path) in args.traces.iter().enumerate() {
            if args.traces[..at].contains(path) {
                bail!(
                    "--trace {} is given twice: each trace runs once, so name it once",
                    path.display()
                );
            }
        }
        let mut inputs = if args.traces.is_empty() {
            vec![TraceInput::open(None, &args.trace, cost_file.group_map)?]
        } else {
            args.traces
                .iter()
                .map(|path| TraceInput::open(Some(path), &args.trace, cost_file.group_map.clone()))
                .collect::<Result<Vec<_>>>()?
        };
        for input in &mut inputs {
            let from_trace = !args.ignore_trace_ttl && input.carries_ttl();
            if args.ttl.is_some() || from_trace {
                input.stream.ttl = Some(Ttl {
                    default_us: args.ttl,
                    from_trace,
                });
            }
        }
        Ok(Self {
            inputs,
            policies,
            admission,
            prefetch,
            sizes,
            l2,
            l2_mode: args.l2_mode.into(),
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

    /// The configurations each trace runs.
    fn configurations_per_trace(&self) -> usize {
        self.policies.len() * self.sizes.len() * self.l2.len().max(1)
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

/// How the traces share the cores: `lanes` traces run at once, each with
/// `threads` (the `--threads` meaning: 0 every core, 1 inline).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Lanes {
    lanes: usize,
    threads: usize,
}

/// One trace at a time, on every core, when a trace has configurations
/// enough to use them all; otherwise as many traces at once as fill the
/// cores (each inline when that leaves it one core). `--threads 1` runs
/// one trace after another on the calling thread alone.
fn lanes(threads: usize, traces: usize, configurations: usize) -> Lanes {
    if threads == 1 || traces <= 1 {
        return Lanes { lanes: 1, threads };
    }
    let cores = if threads == 0 {
        std::thread::available_parallelism().map_or(1, std::num::NonZero::get)
    } else {
        threads
    };
    let per_trace = configurations.clamp(1, cores);
    let lanes = (cores / per_trace).clamp(1, traces);
    if lanes == 1 {
        Lanes { lanes, threads }
    } else {
        Lanes {
            lanes,
            threads: (cores / lanes).max(1),
        }
    }
}

/// Runs `cairn sim`.
pub fn run(args: SimArgs, quiet: bool) -> Result<()> {
    let config = SimConfig::from_args(args)?;
    let traces = config.inputs.len();
    let plan = lanes(config.threads, traces, config.configurations_per_trace());
    tracing::info!(
        traces,
        lanes = plan.lanes,
        threads_per_trace = plan.threads,
        "traces"
    );
    let runs = if plan.lanes == 1 {
        let mut runs = Vec::with_capacity(traces);
        for (at, input) in config.inputs.iter().enumerate() {
            let bars = Bars {
                quiet,
                shared: None,
                of: (traces > 1).then_some((at + 1, traces)),
            };
            runs.push(
                simulate(&config, input, plan.threads, &bars)
                    .map_err(|e| named(e, input, traces))?,
            );
        }
        runs
    } else {
        run_lanes(&config, plan, quiet)?
    };
    write_outputs(
        &Outputs {
            metric: config.metric,
            csv: config.csv.as_ref(),
            json: config.json.as_ref(),
            plot: config.plot.as_deref(),
            unit: config.unit,
            cost: &config.cost,
            levels: !config.l2.is_empty(),
        },
        &runs,
    )
}

/// Runs the traces `plan.lanes` at a time, each lane taking the next trace
/// not yet started; the first error (in trace order) ends the run.
fn run_lanes(config: &SimConfig, plan: Lanes, quiet: bool) -> Result<Vec<TraceRun>> {
    let traces = config.inputs.len();
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let shared = Bar::new(None, "replay", quiet);
    let mut done: Vec<(usize, Result<TraceRun>)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..plan.lanes)
            .map(|_| {
                scope.spawn(|| {
                    let mut mine = Vec::new();
                    while !failed.load(Ordering::Relaxed) {
                        let at = next.fetch_add(1, Ordering::Relaxed);
                        let Some(input) = config.inputs.get(at) else {
                            break;
                        };
                        let bars = Bars {
                            quiet: true,
                            shared: Some(&shared),
                            of: None,
                        };
                        let run = simulate(config, input, plan.threads, &bars)
                            .map_err(|e| named(e, input, traces));
                        failed.fetch_or(run.is_err(), Ordering::Relaxed);
                        mine.push((at, run));
                    }
                    mine
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_default())
            .collect()
    });
    shared.finish();
    done.sort_by_key(|(at, _)| *at);
    let runs = done
        .into_iter()
        .map(|(_, run)| run)
        .collect::<Result<Vec<_>>>()?;
    if runs.len() < traces {
        bail!("a simulation thread stopped before its trace was done");
    }
    Ok(runs)
}

/// `error`, naming the trace when there are several and it does not yet.
fn named(error: anyhow::Error, input: &TraceInput, traces: usize) -> anyhow::Error {
    let name = input.name();
    if traces > 1 && !format!("{error:#}").contains(&name) {
        error.context(format!("trace {name}"))
    } else {
        error
    }
}

/// The progress bars of one trace's passes.
struct Bars<'a> {
    quiet: bool,
    /// A bar every lane counts into (its own bars are hidden then).
    shared: Option<&'a Bar>,
    /// (this trace, of how many), for the bar's message.
    of: Option<(usize, usize)>,
}

impl Bars<'_> {
    fn bar(&self, total: Option<u64>, what: &str) -> Bar {
        let message = match self.of {
            Some((at, traces)) => format!("{what} {at}/{traces}"),
            None => what.to_owned(),
        };
        Bar::new(total, &message, self.quiet || self.shared.is_some())
    }
}

/// A trace's own bar, and the shared one if any.
struct Both<'a>(&'a Bar, Option<&'a Bar>);

impl Progress for Both<'_> {
    fn advance(&self, accesses: u64, bytes: u64) {
        self.0.advance(accesses, bytes);
        if let Some(shared) = self.1 {
            shared.advance(accesses, bytes);
        }
    }
}

/// One trace: the first pass (when sizes are fractions or OPT runs), then
/// the replay of every configuration with `threads`.
fn simulate(
    config: &SimConfig,
    input: &TraceInput,
    threads: usize,
    bars: &Bars,
) -> Result<TraceRun> {
    let has_opt = config
        .policies
        .iter()
        .map(|(_, p)| p)
        .chain(config.l2.iter().map(|l| &l.policy))
        .any(PolicyConfig::needs_next_access);
    let needs_working_set = config
        .sizes
        .iter()
        .map(|(_, s)| s)
        .chain(config.l2.iter().map(|l| &l.size))
        .any(|s| s.needs_working_set());
    let mut sizes = config.sizes.clone();

    let mut working_set = None;
    let mut accesses_total = input.accesses_hint();
    let mut next_times = None;
    if needs_working_set || has_opt {
        let bar = bars.bar(accesses_total, "first pass");
        let pass = prepass(
            input.accesses()?,
            has_opt,
            input.working_set_scaling(),
            &Both(&bar, bars.shared),
        )?;
        bar.finish();
        tracing::info!(
            trace = %input.name(),
            accesses = pass.accesses,
            working_set_objects = pass.working_set.objects,
            working_set_bytes = pass.working_set.bytes,
            "first pass"
        );
        if has_opt && pass.carries_next {
            tracing::info!("offline policies use the trace's own next-access times");
        } else {
            next_times = pass.next_times;
        }
        if pass.accesses == 0 {
            return Err(input.nothing_to_replay());
        }
        working_set = Some(pass.working_set);
        accesses_total = Some(pass.accesses);
    }
    if config.auto_sizes {
        let objects = working_set.unwrap_or_default().objects;
        keep_auto_sizes(&mut sizes, config.unit, objects);
        if sizes.is_empty() {
            bail!(
                "--size auto: the working set ({objects} {}) is too small for any of \
                 libCacheSim's automatic sizes; give sizes with --size{}",
                input::plural(objects, "object", "objects"),
                input.unit_hint()
            );
        }
    }

    let l2_sizes = config
        .l2
        .iter()
        .map(|l| (format!("{}@{}", l.label, l.size_text), l.size));
    for (text, size) in sizes.iter().cloned().chain(l2_sizes) {
        let flag = if text.contains('@') { "--l2" } else { "--size" };
        let text = text.as_str();
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
            let size = text.rsplit('@').next().unwrap_or(text);
            bail!(
                "{flag} {text}: {size} of the working set ({count} {unit}) rounds down to 0, \
                 a cache that holds nothing; give a larger fraction or an absolute size{}",
                input.unit_hint()
            );
        }
    }
    let resolve = |size: &CacheSize| size.resolve(config.unit, working_set.unwrap_or_default());
    let levels: Vec<Option<Level2>> = if config.l2.is_empty() {
        vec![None]
    } else {
        config
            .l2
            .iter()
            .map(|l| {
                Some(Level2 {
                    label: l.label.clone(),
                    policy: l.policy.clone(),
                    size: l.size_text.clone(),
                    capacity: resolve(&l.size),
                    hierarchy: config.l2_mode,
                })
            })
            .collect()
    };
    let mut configurations = Vec::new();
    for (label, policy) in &config.policies {
        for l2 in &levels {
            for (text, size) in &sizes {
                configurations.push(Configuration {
                    label: label.clone(),
                    policy: policy.clone(),
                    admission: config.admission.clone(),
                    prefetch: config.prefetch.clone(),
                    size: text.clone(),
                    capacity: resolve(size),
                    l2: l2.clone(),
                });
            }
        }
    }

    let options = ReplayOptions {
        threads,
        cost: config.cost.clone(),
        warmup_accesses: config.warmup,
        ..ReplayOptions::default()
    };
    tracing::info!(
        trace = %input.name(),
        configurations = configurations.len(),
        workers = options.workers(configurations.len()),
        "replaying"
    );
    let mut stream = input.accesses()?;
    if let Some(next) = next_times {
        stream = stream.with_next_times(next);
    }
    let bar = bars.bar(accesses_total, "replay");
    let started = std::time::Instant::now();
    let reports = replay(&configurations, stream, &options, &Both(&bar, bars.shared))?;
    bar.finish();
    if reports.first().is_some_and(|r| r.metrics.requests == 0) {
        if config.warmup > 0 {
            bail!(
                "--warmup {}: the trace has no more accesses than that, so nothing was \
                 counted; give a smaller --warmup",
                config.warmup
            );
        }
        return Err(input.nothing_to_replay());
    }
    tracing::info!(
        trace = %input.name(),
        seconds = started.elapsed().as_secs_f64(),
        "replay done"
    );
    Ok(TraceRun {
        name: input.name(),
        unit: input::unit_name(input.stream.unit),
        accesses: accesses_total,
        working_set,
        sizes: sizes.into_iter().map(|(text, _)| text).collect(),
        reports,
    })
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

#[cfg(test)]
mod tests {
    use super::report::plot_paths;
    use super::*;
    use std::path::Path;

    #[test]
    fn small_runs_share_the_cores_and_large_ones_take_them_all() {
        // --threads 1: one trace after another, inline.
        assert_eq!(
            lanes(1, 8, 1),
            Lanes {
                lanes: 1,
                threads: 1
            }
        );
        // One trace: as before.
        assert_eq!(
            lanes(0, 1, 1),
            Lanes {
                lanes: 1,
                threads: 0
            }
        );
        // 4 cores, 1 configuration a trace: 4 traces at once, inline.
        assert_eq!(
            lanes(4, 8, 1),
            Lanes {
                lanes: 4,
                threads: 1
            }
        );
        // 4 cores, 2 configurations: 2 traces at once, 2 threads each.
        assert_eq!(
            lanes(4, 8, 2),
            Lanes {
                lanes: 2,
                threads: 2
            }
        );
        // Configurations enough for every core: one trace at a time.
        assert_eq!(
            lanes(4, 8, 16),
            Lanes {
                lanes: 1,
                threads: 4
            }
        );
        // Never more lanes than traces.
        assert_eq!(
            lanes(8, 3, 1),
            Lanes {
                lanes: 3,
                threads: 2
            }
        );
    }

    #[test]
    fn plots_of_several_traces_are_named_after_them() {
        let run = |name: &str| TraceRun {
            name: name.to_owned(),
            unit: "object".into(),
            accesses: None,
            working_set: None,
            sizes: Vec::new(),
            reports: Vec::new(),
        };
        let one = plot_paths(Path::new("out/mrc.svg"), &[run("a/x.bin")]);
        assert_eq!(one, [PathBuf::from("out/mrc.svg")]);
        let several = plot_paths(
            Path::new("out/mrc.svg"),
            &[run("a/x.bin"), run("b/x.bin"), run("y.vscsi")],
        );
        assert_eq!(
            several,
            [
                PathBuf::from("out/mrc-x.bin.svg"),
                PathBuf::from("out/mrc-x.bin-2.svg"),
                PathBuf::from("out/mrc-y.vscsi.svg"),
            ]
        );
    }
}
