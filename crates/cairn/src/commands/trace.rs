//! `cairn trace gen|stats|convert|analyze`: generate, inspect, convert and analyze traces.

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::{Context, Result, anyhow, bail};
use cairn_policy::mix64;
use cairn_sim::mrc::SHARDS_MODULUS;
use cairn_trace::generate::GeneratorConfig;
use cairn_trace::read::{self, Format};
use cairn_trace::stats::TraceStats;
use cairn_trace::write::{self, ObjectKey};
use serde::Deserialize;

use crate::commands::analyze;
use crate::output::outln;
use crate::policy_spec;
use crate::progress::Bar;

/// Generators `cairn trace gen` knows.
const KINDS: &[&str] = &[
    "zipf", "uniform", "scan", "hotspot", "streams", "files", "runs",
];
/// Knobs every generator shares, kept in its nested `pace` table.
const PACE_KEYS: &[&str] = &[
    "requests",
    "size_bytes",
    "write_fraction",
    "interval_us",
    "seed",
];

/// `cairn trace` subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum TraceCommand {
    /// Generate a synthetic trace (seeded, deterministic).
    #[command(long_about = GEN_ABOUT, after_long_help = GEN_EXAMPLES)]
    Gen(GenArgs),
    /// Print a trace's statistics: requests, read/write mix, working set, sizes, time span.
    #[command(long_about = STATS_ABOUT, after_long_help = STATS_EXAMPLES)]
    Stats(StatsArgs),
    /// Convert a trace from any readable format to oracleGeneral, oracleSysTwrNS, CSV, text or VSCSI.
    #[command(long_about = CONVERT_ABOUT, after_long_help = CONVERT_EXAMPLES)]
    Convert(ConvertArgs),
    /// Analyze a trace: reuse and stack distances, popularity (Zipf fit), one-hit wonders, sizes, rates over time.
    #[command(long_about = analyze::ABOUT, after_long_help = analyze::EXAMPLES)]
    Analyze(analyze::AnalyzeArgs),
}

const GEN_ABOUT: &str = "\
Generate a synthetic trace (seeded, deterministic) and write it to a file.

KIND is one of zipf, uniform, scan, hotspot, streams, files (papers/001's file
workloads), runs (extents read front to back between random blocks, for
prefetchers). Parameters are KEY=VALUE pairs naming the generator's config fields
(docs/traces.md lists them with defaults); values are TOML (numbers, true,
[lists], \"strings\"). The shared pace knobs requests, size_bytes,
write_fraction, interval_us and seed may be given flat. --config FILE.toml
gives the same fields as a file; pairs override it.

The output's name says its format, as the readers detect it: NAME.oracleGeneral.bin
or NAME.oracle (oracleGeneral), NAME.csv (canonical CSV), NAME.txt (text ids),
NAME.vscsi (VSCSI v1: one disk, so layout=\"blocks\"), each optionally followed by
.zst for zstd compression. Any other name is refused.";

const GEN_EXAMPLES: &str = "\
Examples:
  cairn trace gen zipf items=100000 alpha=1.0 requests=1000000 seed=42 -o zipf.oracleGeneral.bin
      A million Zipf requests over 100,000 objects, in libCacheSim's format.
  cairn trace gen scan items=4096 requests=100000 -o scan.csv
      A loop over 4096 blocks, as CSV.
  cairn trace gen uniform items=65536 requests=100000 write_fraction=0.3 -o uniform.vscsi.zst
      Uniform random 4 KiB block requests, 30 % writes, as zstd-compressed VSCSI.
  cairn trace gen hotspot --config hotspot.toml -o hot.oracleGeneral.bin
      The hot-spot mix with the fields in hotspot.toml (e.g. `items = 65536`).
  cairn trace gen runs items=65536 runs=256 requests=100000 seed=7 -o runs.vscsi
      256 extents of 8 to 64 blocks read front to back, Zipf-popular, between
      random blocks: a workload for `cairn sim --prefetch`.";

const STATS_ABOUT: &str = "\
Print a trace's statistics: requests, the read/write mix and bytes, the working
set, the time span and the request sizes (with a log2 histogram).

The working set is counted in the unit `cairn sim` keys the trace by by default
(--unit auto): distinct start sectors for block traces (vscsi, cloudphysics,
msr), whose object is the disk; distinct objects for object traces. Distinct
blocks of --block-size are counted too.";

const STATS_EXAMPLES: &str = "\
Examples:
  cairn trace stats zipf.oracleGeneral.bin
      Counts of the trace `cairn trace gen` wrote above.
  cairn trace stats uniform.vscsi.zst --block-size 64KiB --json
      A compressed block trace, blocks of 64 KiB, as JSON.";

const CONVERT_ABOUT: &str = "\
Convert a trace from any readable format to oracleGeneral, oracleSysTwrNS, CSV,
text or VSCSI. The output's name says the format to write, as for `trace gen`
(NAME.oracleGeneral.bin or NAME.oracle, NAME.oracleSysTwrNS, NAME.csv,
NAME.txt, NAME.vscsi, each optionally followed by .zst); --to may name it for
another name, and must agree with a name that says one.

Requests' TTLs (an oracleSysTwrNS trace, a CSV with a ttl column) are carried
to oracleSysTwrNS and to the CSV (a sixth column, `ttl`, in seconds, which
`cairn sim` reads back); oracleGeneral, text and VSCSI have no field for them,
so converting to those drops them, and a warning says how many requests' TTLs
were dropped.";

const CONVERT_EXAMPLES: &str = "\
Examples:
  cairn trace convert zipf.oracleGeneral.bin zipf.csv
      libCacheSim's binary to the canonical CSV.
  cairn trace convert uniform.vscsi.zst uniform.oracleGeneral.bin.zst --oracle-key start-sector
      A block trace to zstd-compressed oracleGeneral keyed by start sector, as
      libCacheSim converts block traces.
  cairn trace convert zipf.oracleGeneral.bin zipf-sample.oracleGeneral.bin --sample 0.01
      The requests of 1 % of the objects (spatial sampling, as SHARDS): a
      trace a hundred times smaller whose miss ratios at 1/100 the cache size
      approximate the whole one's.";

/// `cairn trace gen` flags.
#[derive(clap::Args, Debug)]
pub struct GenArgs {
    /// Generator: zipf, uniform, scan, hotspot, streams, files, runs.
    pub kind: String,
    /// Generator parameters, KEY=VALUE.
    pub params: Vec<String>,
    /// A TOML file with the generator's fields.
    #[arg(long, value_name = "FILE.toml")]
    pub config: Option<PathBuf>,
    /// Output file; its name says the format (see above).
    #[arg(short, long, value_name = "PATH")]
    pub output: PathBuf,
    /// Output format: oracle, oraclesystwrns, csv, text or vscsi. Default: from the output's
    /// name; must agree with a name that says one.
    #[arg(long, value_name = "FORMAT")]
    pub format: Option<String>,
}

/// `cairn trace stats` flags.
#[derive(clap::Args, Debug)]
pub struct StatsArgs {
    /// The trace file.
    pub trace: PathBuf,
    /// Its format (auto, oracle, msr, vscsi, cloudphysics, text, csv).
    #[arg(long, default_value = "auto")]
    pub format: String,
    /// Block size for the distinct-block count, e.g. 4KiB.
    #[arg(long, default_value = "4KiB", value_name = "SIZE")]
    pub block_size: String,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// `cairn trace convert` flags.
#[derive(clap::Args, Debug)]
pub struct ConvertArgs {
    /// The trace to read.
    pub input: PathBuf,
    /// The file to write.
    pub output: PathBuf,
    /// Input format (auto, oracle, msr, vscsi, cloudphysics, text, csv).
    #[arg(long, default_value = "auto")]
    pub from: String,
    /// Output format (oracle, oraclesystwrns, csv, text, vscsi). Default:
    /// from the output's name; must agree with a name that says one.
    #[arg(long)]
    pub to: Option<String>,
    /// oracleGeneral object ids: `object` (the request's object) or
    /// `start-sector` (the first 512-byte sector, as libCacheSim keys block traces).
    #[arg(long, default_value = "object", value_name = "KEY")]
    pub oracle_key: String,
    /// Keep only the requests of a RATE share of the keys (0 < RATE ≤ 1), by
    /// spatial sampling as SHARDS and `cairn mrc --shards` do: a request
    /// stays when its key's hash falls under RATE, so a key keeps all its
    /// requests or none and reuse survives. Keys as `cairn sim --unit auto`
    /// makes them: start sectors for block traces (vscsi, cloudphysics,
    /// msr), objects otherwise.
    #[arg(long, value_name = "RATE")]
    pub sample: Option<f64>,
    /// Keep only `read` or `write` requests (default: `all`).
    #[arg(long, value_name = "OP", default_value = "all")]
    pub op: String,
}

/// Runs `cairn trace …`.
pub fn run(command: &TraceCommand, quiet: bool) -> Result<()> {
    match command {
        TraceCommand::Gen(args) => generate(args, quiet),
        TraceCommand::Stats(args) => stats(args),
        TraceCommand::Convert(args) => convert(args, quiet),
        TraceCommand::Analyze(args) => analyze::run(args, quiet),
    }
}

fn input_format(text: &str, path: &Path) -> Result<Format> {
    if text == "auto" {
        return Ok(Format::detect(path)?);
    }
    text.parse::<Format>().map_err(|e| anyhow!("{e}"))
}

/// The format to write at `path`: the one its name says, or `--format`/`--to`
/// (`flag`) when the name says none; a name and a flag that disagree are
/// refused, since the readers go by the name.
fn output_format(given: Option<&str>, path: &Path, flag: &str) -> Result<Format> {
    let by_name = write::format_of_name(path);
    let Some(text) = given else {
        return by_name.ok_or_else(|| {
            anyhow!(
                "{}: cannot tell the format to write from the name; name it {}",
                path.display(),
                write::OUTPUT_NAMES
            )
        });
    };
    let format = match text.parse::<Format>().map_err(|e| anyhow!("{e}"))? {
        Format::Csv(_) => Format::Csv(read::CsvConfig::canonical()),
        format
        @ (Format::OracleGeneral | Format::OracleSysTwrNs | Format::Text | Format::Vscsi) => format,
        other => {
            bail!(
                "{flag} {other}: cannot write {other} traces; choose oracle, oraclesystwrns, \
                 csv, text or vscsi"
            )
        }
    };
    if let Some(named) = by_name
        && named.name() != format.name()
    {
        bail!(
            "{flag} {format}, but the name {} says {named}, which is how it would be read \
             back; rename it or drop {flag}",
            path.display()
        );
    }
    Ok(format)
}

fn generate(args: &GenArgs, quiet: bool) -> Result<()> {
    if !KINDS.contains(&args.kind.as_str()) {
        bail!(
            "unknown generator `{}` (known: {})",
            args.kind,
            KINDS.join(", ")
        );
    }
    let mut fields = match &args.config {
        Some(path) => std::fs::read_to_string(path)
            .with_context(|| format!("reading {}", path.display()))?
            .parse::<toml::Table>()
            .with_context(|| format!("{}", path.display()))?,
        None => toml::Table::new(),
    };
    let context = format!("cairn trace gen {}", args.kind);
    let (pace, own): (Vec<&String>, Vec<&String>) = args
        .params
        .iter()
        .partition(|p| PACE_KEYS.contains(&p.split('=').next().unwrap_or("").trim()));
    let join = |pairs: Vec<&String>| {
        pairs
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join(",")
    };
    policy_spec::overlay(&mut fields, &join(own), &context, &["pace"])?;
    if !pace.is_empty() {
        let entry = fields
            .entry("pace")
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        let toml::Value::Table(pace_table) = entry else {
            bail!("{context}: `pace` must be a table");
        };
        policy_spec::overlay(pace_table, &join(pace), &context, &[])?;
    }
    let mut wrapper = toml::Table::new();
    wrapper.insert(args.kind.clone(), toml::Value::Table(fields));
    let config = GeneratorConfig::deserialize(toml::Value::Table(wrapper))
        .with_context(|| format!("{context}: invalid parameters"))?;
    let total = toml::Value::try_from(&config)
        .ok()
        .and_then(|v| {
            v.get(&args.kind)?
                .get("pace")?
                .get("requests")?
                .as_integer()
        })
        .map(|n| n as u64);
    let format = output_format(args.format.as_deref(), &args.output, "--format")?;
    let mut writer = write::create(&args.output, &format)?;
    let bar = Bar::new(total, "generating", quiet);
    let mut count = 0u64;
    for request in config.generator()? {
        writer.write(&request)?;
        count += 1;
        if count.is_multiple_of(65_536) {
            bar.inc(65_536);
        }
    }
    writer.finish()?;
    bar.finish();
    outln!(
        "wrote {count} {} to {} ({format})",
        crate::input::plural(count, "request", "requests"),
        args.output.display()
    )?;
    Ok(())
}

fn stats(args: &StatsArgs) -> Result<()> {
    let format = input_format(&args.format, &args.trace)?;
    let block_size = u32::try_from(cairn_sim::parse_bytes(&args.block_size)?)
        .map_err(|_| anyhow!("--block-size {} is over 4 GiB", args.block_size))?;
    let stats = TraceStats::of(read::open(&args.trace, &format)?, block_size)?;
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&stats)?)?;
        return Ok(());
    }
    let mut out = BufWriter::new(crate::output::stdout());
    let mut rows: Vec<(&str, String)> = vec![
        ("trace", format!("{} ({format})", args.trace.display())),
        ("requests", stats.requests.to_string()),
        (
            "reads",
            format!("{} ({} bytes)", stats.reads, stats.bytes_read),
        ),
        (
            "writes",
            format!("{} ({} bytes)", stats.writes, stats.bytes_written),
        ),
    ];
    if format.is_block() {
        // What `cairn sim --unit auto` keys a block trace by; its objects are disks.
        rows.push(("distinct disks", stats.objects.to_string()));
        rows.push(("distinct start sectors", stats.start_sectors.to_string()));
        rows.push((
            "start-sector working set",
            format!("{} bytes", stats.start_sector_bytes),
        ));
    } else {
        rows.push(("distinct objects", stats.objects.to_string()));
        rows.push((
            "object working set",
            format!("{} bytes", stats.object_bytes),
        ));
    }
    rows.extend([
        (
            "distinct blocks",
            format!("{} of {} bytes", stats.blocks, stats.block_size_bytes),
        ),
        ("block working set", format!("{} bytes", stats.block_bytes)),
        (
            "time span",
            format!("{:.3} s", stats.span_us() as f64 / 1e6),
        ),
        (
            "request size",
            format!(
                "min {} / mean {:.0} / max {} bytes",
                stats.size_min_bytes,
                stats.size_mean_bytes(),
                stats.size_max_bytes
            ),
        ),
    ]);
    for (name, value) in rows {
        writeln!(out, "{name:<24} {value}")?;
    }
    writeln!(out, "sizes (log2 buckets, bytes ≤ bound: requests)")?;
    for (i, count) in stats
        .size_histogram
        .iter()
        .enumerate()
        .filter(|(_, c)| **c > 0)
    {
        writeln!(out, "  ≤ {:>12}  {count}", 1u64 << i)?;
    }
    Ok(())
}

fn convert(args: &ConvertArgs, quiet: bool) -> Result<()> {
    let from = input_format(&args.from, &args.input)?;
    let to = match output_format(args.to.as_deref(), &args.output, "--to")? {
        // The CSV keeps the TTLs of a trace that has them, in a sixth column.
        Format::Csv(_) if from.carries_ttl() => Format::Csv(read::CsvConfig::canonical_with_ttl()),
        to => to,
    };
    let key = match args.oracle_key.as_str() {
        "object" => ObjectKey::Object,
        "start-sector" => ObjectKey::StartSector,
        other => bail!("--oracle-key `{other}`: expected object or start-sector"),
    };
    if key == ObjectKey::StartSector && to != Format::OracleGeneral {
        bail!("--oracle-key start-sector goes with oracleGeneral output");
    }
    if let (Ok(input), Ok(output)) = (args.input.canonicalize(), args.output.canonicalize())
        && input == output
    {
        bail!(
            "{}: the input and the output are one file; name another output",
            args.output.display()
        );
    }
    let keep_op = match args.op.as_str() {
        "all" => None,
        "read" => Some(cairn_trace::Op::Read),
        "write" => Some(cairn_trace::Op::Write),
        other => bail!("--op `{other}`: expected read, write or all"),
    };
    let threshold = match args.sample {
        None => None,
        Some(rate) if rate > 0.0 && rate <= 1.0 => {
            Some(((rate * SHARDS_MODULUS as f64) as u64).max(1))
        }
        Some(rate) => bail!("--sample {rate}: a share of the keys, more than 0 and at most 1"),
    };
    let block = from.is_block();
    let kept = move |request: &cairn_trace::Request| {
        keep_op.is_none_or(|op| request.op == op)
            && threshold.is_none_or(|threshold| {
                let key = if block {
                    cairn_trace::split::start_sector_key(request)
                } else {
                    request.object
                };
                mix64(key) % SHARDS_MODULUS < threshold
            })
    };
    let read_count = Arc::new(AtomicU64::new(0));
    let counter = Arc::clone(&read_count);
    // Requests written with a TTL the output cannot hold.
    let dropped_ttls = Arc::new(AtomicU64::new(0));
    let dropped = Arc::clone(&dropped_ttls);
    let drops_ttls = !to.carries_ttl();
    let reader: read::Reader = read::boxed(read::open(&args.input, &from)?.filter(move |r| {
        counter.fetch_add(1, Ordering::Relaxed);
        let keep = r.as_ref().map_or(true, &kept);
        if keep && drops_ttls && r.as_ref().is_ok_and(|r| r.ttl > 0) {
            dropped.fetch_add(1, Ordering::Relaxed);
        }
        keep
    }));
    let mut writer = write::create_keyed(&args.output, &to, key)?;
    let bar = Bar::new(None, "converting", quiet);
    let count = write::convert(reader, writer.as_mut())?;
    bar.finish();
    let of = if args.sample.is_some() || keep_op.is_some() {
        format!(" of {}", read_count.load(Ordering::Relaxed))
    } else {
        String::new()
    };
    outln!(
        "converted {count}{of} {}: {} ({from}) -> {} ({to})",
        crate::input::plural(count, "request", "requests"),
        args.input.display(),
        args.output.display()
    )?;
    let dropped = dropped_ttls.load(Ordering::Relaxed);
    if dropped > 0 {
        tracing::warn!(
            "{to} has no TTL field: the TTLs of {dropped} {} were dropped; write \
             NAME.oracleSysTwrNS or NAME.csv to keep them",
            crate::input::plural(dropped, "request", "requests")
        );
    }
    Ok(())
}
