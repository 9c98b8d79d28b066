//! Where accesses come from: the trace arguments shared by `sim` and `mrc`,
//! validated into a [`TraceInput`] that can open the trace as often as a
//! command needs (a first pass for the working set, then the replay).

use std::io::Cursor;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use cairn_sim::{AccessStream, GroupMap, OpFilter, StreamOptions};
use cairn_trace::Unit;
use cairn_trace::read::{self, CsvConfig, Reader, oracle_general};

/// The sample trace (`CloudPhysics` VM block trace in libCacheSim's oracleGeneral
/// format, 113,872 requests), zstd-compressed, so `cairn sim` works anywhere.
static SAMPLE_TRACE_ZST: &[u8] = include_bytes!("../data/cloudPhysicsIO.oracleGeneral.bin.zst");

/// What `--trace` names when it is not given.
pub const SAMPLE_TRACE_NAME: &str = "cloudPhysicsIO (embedded sample)";

/// Which operations to keep.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum OpArg {
    /// Reads only.
    Read,
    /// Writes only.
    Write,
    /// Reads and writes.
    All,
}

/// The trace flags, as typed: one trace file and how to read it.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct TraceArgs {
    /// Trace file to read. Without it, the sample trace embedded in the binary
    /// (a VM block trace from Cloud Physics, 113,872 requests) is used.
    #[arg(long, value_name = "PATH")]
    pub trace: Option<PathBuf>,

    #[command(flatten)]
    pub options: TraceOptions,
}

/// How a trace is read, whichever file it is (`cairn sim` takes several
/// `--trace`s and reads each with these).
#[derive(clap::Args, Debug, Clone)]
pub struct TraceOptions {
    /// Format of the trace file: `auto` (from the file name, then its first
    /// bytes), `oracle` (libCacheSim oracleGeneral), `msr` (MSR Cambridge
    /// CSV), `vscsi` (VSCSI v1 binary), `cloudphysics` (`CloudPhysics` CSV),
    /// `text` (one object id per line) or `csv` (any delimited text, with
    /// --csv-map). A `.zst` file is decompressed on the fly.
    #[arg(long, value_name = "FORMAT", default_value = "auto")]
    pub format: String,

    /// With `--format csv`: a TOML file mapping columns to fields (`delimiter`,
    /// `has_header`, `time_column`, `object_column`, `offset_column`,
    /// `size_column`, `op_column`, `read_values`, `write_values`, `time_unit`,
    /// `offset_unit`; see docs/traces.md).
    #[arg(long, value_name = "FILE.toml")]
    pub csv_map: Option<PathBuf>,

    /// What a cached unit is. `auto` (the default): `start-sector` for block
    /// traces (vscsi, cloudphysics, msr), `object` for the others (oracle,
    /// text, csv). `object`: each request is one access to its whole object
    /// (libCacheSim's object mode; a block trace is then one object per disk).
    /// `start-sector`: each request is one access keyed by its disk and first
    /// 512-byte sector, sized as the request (how libCacheSim reads VSCSI:
    /// `obj_id = lbn`). `block:SIZE`: each request touches every block of SIZE
    /// bytes it overlaps (e.g. `block:4KiB`).
    #[arg(long, value_name = "UNIT", default_value = "auto", value_parser = parse_unit)]
    pub unit: UnitArg,

    /// Which requests to replay: `read`, `write` or `all`. Filtering happens
    /// before splitting into accesses.
    #[arg(long, value_enum, value_name = "OP", default_value = "all")]
    pub op: OpArg,

    /// Read only the first N requests of the trace (before --op filters
    /// them), as libCacheSim's --num-req. Default: all of them.
    #[arg(long, value_name = "N")]
    pub requests: Option<u64>,
}

impl Default for TraceOptions {
    /// The flags' defaults: format auto, unit auto, all operations, every
    /// request.
    fn default() -> Self {
        Self {
            format: "auto".into(),
            csv_map: None,
            unit: UnitArg::Auto,
            op: OpArg::All,
            requests: None,
        }
    }
}

/// `--unit` as typed: `auto`, or a unit named outright.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnitArg {
    /// `start-sector` for block trace formats, `object` for the others.
    Auto,
    /// The unit given.
    Fixed(Unit),
}

impl UnitArg {
    /// The unit a trace in `format` is read with.
    pub fn resolve(self, format: &read::Format) -> Unit {
        match self {
            UnitArg::Fixed(unit) => unit,
            UnitArg::Auto if format.is_block() => Unit::StartSector,
            UnitArg::Auto => Unit::Object,
        }
    }
}

/// The name `--unit` takes for `unit`.
pub fn unit_name(unit: Unit) -> String {
    match unit {
        Unit::Object => "object".to_owned(),
        Unit::StartSector => "start-sector".to_owned(),
        Unit::Block { block_size } => format!("block:{block_size}"),
    }
}

/// Parses `auto`, `object`, `start-sector` or `block:SIZE`.
pub fn parse_unit(text: &str) -> Result<UnitArg, String> {
    match text {
        "auto" => return Ok(UnitArg::Auto),
        "object" => return Ok(UnitArg::Fixed(Unit::Object)),
        "start-sector" => return Ok(UnitArg::Fixed(Unit::StartSector)),
        _ => {}
    }
    let Some(size) = text.strip_prefix("block:") else {
        return Err(format!(
            "`{text}`: expected `auto`, `object`, `start-sector` or `block:SIZE` (e.g. block:4KiB)"
        ));
    };
    let bytes = cairn_sim::parse_bytes(size).map_err(|e| e.to_string())?;
    match u32::try_from(bytes) {
        Ok(block_size) if block_size > 0 => Ok(UnitArg::Fixed(Unit::Block { block_size })),
        _ => Err(format!("`{text}`: the block size must be 1 B to 4 GiB - 1")),
    }
}

/// Where the bytes are.
#[derive(Clone, Debug)]
enum Source {
    Embedded(Arc<[u8]>),
    File(PathBuf),
}

/// A validated trace input.
#[derive(Clone, Debug)]
pub struct TraceInput {
    source: Source,
    format: read::Format,
    /// At most this many requests are read (`--requests`).
    max_requests: Option<u64>,
    /// How requests become accesses.
    pub stream: StreamOptions,
}

impl TraceInput {
    /// Validates the flags; decompresses the sample trace when no file is named.
    pub fn from_args(args: &TraceArgs, groups: GroupMap) -> Result<Self> {
        Self::open(args.trace.as_deref(), &args.options, groups)
    }

    /// The trace at `path` (the embedded sample when `None`), read as
    /// `args` say.
    pub fn open(path: Option<&Path>, args: &TraceOptions, groups: GroupMap) -> Result<Self> {
        let source = match path {
            Some(path) => {
                let meta = std::fs::metadata(path)
                    .with_context(|| format!("cannot read trace {}", path.display()))?;
                if !meta.is_file() {
                    bail!("trace {} is not a file", path.display());
                }
                Source::File(path.to_path_buf())
            }
            None => Source::Embedded(
                zstd::decode_all(SAMPLE_TRACE_ZST)
                    .context("decompressing the embedded sample trace")?
                    .into(),
            ),
        };
        let format = resolve_format(path, args)?;
        let unit = args.unit.resolve(&format);
        if args.unit == UnitArg::Auto {
            tracing::info!(
                format = %format,
                unit = %unit_name(unit),
                "--unit auto: {}",
                if format.is_block() {
                    "a block trace, keyed by disk and start sector"
                } else {
                    "an object trace, keyed by object"
                }
            );
        }
        let ops = match args.op {
            OpArg::Read => OpFilter::Read,
            OpArg::Write => OpFilter::Write,
            OpArg::All => OpFilter::All,
        };
        if args.requests == Some(0) {
            bail!(
                "--requests 0 reads nothing: give at least 1, or leave it out to read the whole trace"
            );
        }
        Ok(Self {
            source,
            format,
            max_requests: args.requests,
            stream: StreamOptions {
                unit,
                ops,
                groups,
                ttl: None,
            },
        })
    }

    /// The trace's name for reports.
    pub fn name(&self) -> String {
        match &self.source {
            Source::Embedded(_) => SAMPLE_TRACE_NAME.to_owned(),
            Source::File(path) => path.display().to_string(),
        }
    }

    /// Whether the trace's requests can carry TTLs (its format has a field
    /// for them).
    pub fn carries_ttl(&self) -> bool {
        self.format.carries_ttl()
    }

    /// The trace format's name (`oracle`, `vscsi`, …).
    pub fn format_name(&self) -> &'static str {
        self.format.name()
    }

    /// Size of the trace's bytes, when known.
    pub fn byte_len(&self) -> Option<u64> {
        match &self.source {
            Source::Embedded(bytes) => Some(bytes.len() as u64),
            Source::File(path) => std::fs::metadata(path).ok().map(|m| m.len()),
        }
    }

    /// The number of accesses, when it is known without reading the trace
    /// (fixed-size records in object mode, no filter).
    pub fn accesses_hint(&self) -> Option<u64> {
        let all = self.stream.ops == OpFilter::All
            && matches!(self.stream.unit, Unit::Object | Unit::StartSector);
        let plain = match &self.source {
            Source::Embedded(_) => true,
            Source::File(path) => path.extension().is_none_or(|e| e != "zst"),
        };
        (all && plain && self.format == read::Format::OracleGeneral)
            .then(|| {
                self.byte_len()
                    .map(|n| n / oracle_general::RECORD_BYTES as u64)
            })
            .flatten()
            .map(|n| self.max_requests.map_or(n, |max| n.min(max)))
    }

    /// libCacheSim's working-set sampling factor for this trace file's size
    /// (`cal_working_set_size`: 11 above 1 GiB, 101 above 5 GiB), in object
    /// and start-sector mode only (it samples by `obj_id`, which is the start
    /// sector of a block trace).
    pub fn working_set_scaling(&self) -> u64 {
        const GIB: u64 = 1 << 30;
        if matches!(self.stream.unit, Unit::Block { .. }) {
            return 1;
        }
        match self.byte_len().unwrap_or(0) {
            n if n > 5 * GIB => 101,
            n if n > GIB => 11,
            _ => 1,
        }
    }

    /// Opens the trace as a stream of requests.
    pub fn requests(&self) -> Result<Reader> {
        let reader: Reader = match &self.source {
            Source::Embedded(bytes) => Box::new(oracle_general::OracleGeneralReader::new(
                Cursor::new(Arc::clone(bytes)),
                Path::new(SAMPLE_TRACE_NAME),
            )),
            Source::File(path) => read::open(path, &self.format)?,
        };
        Ok(match self.max_requests {
            Some(max) => Box::new(read::Capped::new(reader, max)),
            None => reader,
        })
    }

    /// A hint for a working set too small to hold a cache, when the unit
    /// explains it: a block trace read as objects is one object per disk.
    pub fn unit_hint(&self) -> &'static str {
        if self.stream.unit == Unit::Object && self.format.is_block() {
            " (--unit object reads this block trace as one object per disk: leave --unit \
             at auto to key it by start sector, or use --unit block:4KiB)"
        } else {
            ""
        }
    }

    /// The error for a run with no access to replay: an empty trace, or a
    /// filter that keeps none of its requests (read once more to say which).
    pub fn nothing_to_replay(&self) -> anyhow::Error {
        let mut requests = 0u64;
        let mut reads = 0u64;
        if let Ok(reader) = self.requests() {
            for request in reader.map_while(std::result::Result::ok) {
                requests += 1;
                reads += u64::from(request.op == cairn_trace::Op::Read);
            }
        }
        let name = self.name();
        if requests == 0 {
            return anyhow::anyhow!(
                "trace {name} holds no requests: nothing to simulate; check that it is the \
                 file you meant (and --format, if given)"
            );
        }
        let (kept, other) = match self.stream.ops {
            OpFilter::Read => ("read", "write"),
            OpFilter::Write => ("write", "read"),
            OpFilter::All => ("all", "all"),
        };
        let writes = requests - reads;
        anyhow::anyhow!(
            "--op {kept} keeps none of the {requests} requests of trace {name} ({reads} {}, \
             {writes} {}): nothing to simulate; use --op {other} or --op all",
            plural(reads, "read", "reads"),
            plural(writes, "write", "writes"),
        )
    }

    /// Opens the trace as a stream of accesses.
    pub fn accesses(&self) -> Result<AccessStream> {
        Ok(AccessStream::new(self.requests()?, &self.stream))
    }
}

/// `one` for 1, `many` otherwise.
pub fn plural<'a>(count: u64, one: &'a str, many: &'a str) -> &'a str {
    if count == 1 { one } else { many }
}

/// `--format` and `--csv-map` → a reader format (the sample trace is oracleGeneral).
fn resolve_format(path: Option<&Path>, args: &TraceOptions) -> Result<read::Format> {
    let Some(path) = path else {
        return Ok(read::Format::OracleGeneral);
    };
    let format = match args.format.as_str() {
        "auto" => read::Format::detect(path)?,
        name => name
            .parse::<read::Format>()
            .map_err(|e| anyhow::anyhow!("--format: {e}"))?,
    };
    Ok(match (format, &args.csv_map) {
        (read::Format::Csv(_), Some(map)) => {
            let text = std::fs::read_to_string(map)
                .with_context(|| format!("reading --csv-map {}", map.display()))?;
            let config: CsvConfig =
                toml::from_str(&text).with_context(|| format!("--csv-map {}", map.display()))?;
            read::Format::Csv(config)
        }
        (_, Some(_)) => bail!("--csv-map goes with --format csv"),
        (format, None) => format,
    })
}
