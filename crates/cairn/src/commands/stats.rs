//! `cairn stats` and `cairn ctl`: a running server's counters, and runtime
//! commands for its cache layers, over its control socket.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use cairn_control::{
    Client, ExportSnapshot, FileExportSnapshot, IoCounts, Reply, Request, Snapshot,
};
use cairn_store::stats::histogram::Latency;
use cairn_store::stats::{LayerCommand, LayerStats, Metric};

use super::control;
use crate::output::{out, outln};
use crate::volume_spec;

/// `cairn stats --help`'s description.
pub const STATS_ABOUT: &str = "\
Print a running server's live counters, read over its control socket: per
export its requests (reads, writes, flushes, trims, zeroes, errors, and the
bytes each moved), the service time of its reads, writes and other requests
(p50, p99, p99.9, max: from the start of a request's execution to its reply
handed to the socket), and its connections; then per layer of the export's
stack, top first, the service time of its reads, writes and flushes (p50,
p99, p99.9, max: as the layer above it sees it, the layers below included)
and the layer's own counters — the DRAM cache's hits, misses,
hit ratio, resident bytes and its cost groups with their learned costs; a
tier's hits, misses, dirty blocks and mode; a log disk's dirty data and fill
of its NV write cache, the cleaner's segment reads and writes and the write
amplification; an object volume's PUTs, GETs and write amplification.

A file gateway (`cairn serve --files … --control PATH`) shows its file
export instead: its connections, its HTTP requests by method and status
class, its backend's errors (not found, timed out, other) and its cache's
counters (hits, misses, coalesced waits, bytes from the cache and from the
backend, resident blocks and bytes, capacity; with dual, the preface size
and the active files).

Request counts are exact: every request that ran is counted once, whichever
connection it came on, open or closed. The layers count in their own units
(blocks of their block size); counters marked \"since format\" are kept in
the image across restarts.

The socket is <data_dir>/cairn.ctl of the server (./cairn-data/cairn.ctl for
`cairn serve` with no spec, or with --memory/--file), or what `cairn serve
--control PATH` said; --config FILE finds it in that spec's data_dir. Only the
user the server runs as may use it. --json prints the snapshot as JSON (the
fields of the table, plus each latency histogram's non-empty buckets);
--watch SECONDS redraws the table every SECONDS with per-second rates (with
--json: one JSON object per line).";

const STATS_EXAMPLES: &str = "\
Examples:
  cairn stats
      The server started in this directory (./cairn-data/cairn.ctl).
  cairn stats --json
      The same as JSON, for scripts.
  cairn stats --watch 2
      Redraw every 2 seconds, with rates; Ctrl-C to stop.
  cairn stats --socket cairn-data/cairn.ctl --json
      A server's socket named outright.";

/// `cairn stats` flags.
#[derive(clap::Args, Debug)]
#[command(after_long_help = STATS_EXAMPLES)]
pub struct StatsArgs {
    #[command(flatten)]
    socket: SocketArgs,

    /// Print JSON instead of the table.
    #[arg(long)]
    json: bool,

    /// Redraw every SECONDS (fractions allowed), until interrupted.
    #[arg(long, value_name = "SECONDS")]
    watch: Option<f64>,
}

/// Where the control socket is.
#[derive(clap::Args, Debug)]
struct SocketArgs {
    /// The server's control socket. Default ./cairn-data/cairn.ctl.
    #[arg(long, value_name = "PATH", conflicts_with = "config")]
    socket: Option<PathBuf>,

    /// The volume spec the server runs: the socket is in its `data_dir`.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
}

impl SocketArgs {
    fn path(&self) -> Result<PathBuf> {
        if let Some(path) = &self.socket {
            return Ok(path.clone());
        }
        if let Some(config) = &self.config {
            let loaded = volume_spec::load(config)?;
            return Ok(control::default_path(
                &loaded.base.join(&loaded.spec.data_dir),
            ));
        }
        Ok(control::default_path(std::path::Path::new("cairn-data")))
    }
}

/// `cairn ctl --help`'s description.
pub const CTL_ABOUT: &str = "\
Steer a running server's cache layers over its control socket (see `cairn
stats` for where it is). EXPORT names the export; the command goes to every
layer of its stack that has it, top first, or with --layer NAME to that layer
only (its name in the volume spec). Each layer that acted says what it did.

  flush         write every dirty block back: a tier writes back its dirty
                blocks and flushes its backing device, a log disk makes every
                completed write durable (its NV cache is durable: dirty blocks
                stay there until it fills); then the export is flushed.
  drop-clean    drop every clean cached block: the DRAM cache (kind =
                \"cache\") empties (it holds clean copies only); later reads
                load again.
  mode MODE     a tier's cache mode: write-through, write-back, write-around,
                pass-through (leaving write-back writes every dirty block back).
  detach        a tier writes every dirty block back and detaches its cache:
                everything passes through until the next start.

A command no layer has is an error that names each layer and why (\"mode
write-back is not supported by this layer (cache): ...\"); nothing changes.";

const CTL_EXAMPLES: &str = "\
Examples:
  cairn ctl cairn flush
      Write back and flush export \"cairn\" of the server in ./cairn-data.
  cairn ctl cairn drop-clean
      Empty its DRAM read cache.
  cairn ctl --layer log cairn flush
      Only the layer named log in the spec (the log disk).
  cairn ctl --socket cairn-data/cairn.ctl cairn drop-clean
      A server's socket named outright (a tier's mode: cairn ctl EXPORT mode write-around).";

/// `cairn ctl` flags.
#[derive(clap::Args, Debug)]
#[command(after_long_help = CTL_EXAMPLES)]
pub struct CtlArgs {
    #[command(flatten)]
    socket: SocketArgs,

    /// Only this layer (its name in the volume spec).
    #[arg(long, value_name = "NAME")]
    layer: Option<String>,

    /// The export.
    export: String,

    #[command(subcommand)]
    command: CtlCommand,
}

/// What `cairn ctl` asks.
#[derive(clap::Subcommand, Debug)]
enum CtlCommand {
    /// Write every dirty block back, and flush the export.
    Flush,
    /// Drop every clean cached block.
    DropClean,
    /// Switch a tier's cache mode.
    Mode {
        /// write-through, write-back, write-around or pass-through.
        mode: String,
    },
    /// Write a tier's dirty blocks back and detach its cache.
    Detach,
}

/// Run `cairn ctl`.
pub fn run_ctl(args: &CtlArgs) -> Result<()> {
    let path = args.socket.path()?;
    let command = match &args.command {
        CtlCommand::Flush => LayerCommand::Flush,
        CtlCommand::DropClean => LayerCommand::DropClean,
        CtlCommand::Mode { mode } => LayerCommand::Mode { mode: mode.clone() },
        CtlCommand::Detach => LayerCommand::Detach,
    };
    let request = Request::Ctl {
        export: args.export.clone(),
        layer: args.layer.clone(),
        command,
    };
    match Client::connect(&path)?.request(&request)? {
        Reply::Done { lines } => {
            for line in lines {
                outln!("{line}")?;
            }
            Ok(())
        }
        Reply::Error { message } => bail!("{message}"),
        Reply::Stats(_) => bail!(
            "control socket {}: a stats reply to a ctl request",
            path.display()
        ),
    }
}

/// Run `cairn stats`.
pub fn run_stats(args: &StatsArgs) -> Result<()> {
    let path = args.socket.path()?;
    let Some(every) = args.watch else {
        let snapshot = fetch(&path)?;
        if args.json {
            outln!("{}", serde_json::to_string_pretty(&snapshot)?)?;
        } else {
            out!("{}", table(&snapshot, None))?;
        }
        return Ok(());
    };
    if !(every.is_finite() && every > 0.0) {
        bail!("--watch {every}: give a number of seconds above 0");
    }
    let mut client = Client::connect(&path)?;
    let mut last: Option<(Instant, Snapshot)> = None;
    loop {
        let snapshot = match client.request(&Request::Stats)? {
            Reply::Stats(s) => *s,
            Reply::Error { message } => bail!("{message}"),
            Reply::Done { .. } => bail!("control socket {}: not a stats reply", path.display()),
        };
        let now = Instant::now();
        if args.json {
            outln!("{}", serde_json::to_string(&snapshot)?)?;
        } else {
            let rates = last
                .as_ref()
                .map(|(at, before)| (now.duration_since(*at).as_secs_f64(), before));
            // Home, clear, redraw: the table refreshes in place.
            out!("\x1b[H\x1b[2J{}", table(&snapshot, rates))?;
        }
        last = Some((now, snapshot));
        std::thread::sleep(Duration::from_secs_f64(every));
    }
}

fn fetch(path: &std::path::Path) -> Result<Snapshot> {
    match Client::connect(path)?.request(&Request::Stats)? {
        Reply::Stats(snapshot) => Ok(*snapshot),
        Reply::Error { message } => bail!("{message}"),
        Reply::Done { .. } => bail!("control socket {}: not a stats reply", path.display()),
    }
}

/// The snapshot as text; with `rates` (seconds since, the snapshot then),
/// per-second rates of requests and bytes.
fn table(snapshot: &Snapshot, rates: Option<(f64, &Snapshot)>) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "cairn serve (pid {}), up {:.0} s{}",
        snapshot.pid,
        snapshot.uptime_seconds,
        if snapshot.counting {
            ""
        } else {
            "; requests not counted (--no-stats)"
        }
    );
    for export in &snapshot.exports {
        let before = rates.and_then(|(seconds, s)| {
            s.exports
                .iter()
                .find(|e| e.name == export.name)
                .map(|e| (seconds, e))
        });
        export_table(&mut t, export, before);
    }
    for export in &snapshot.files {
        file_export_table(&mut t, export);
    }
    t
}

/// A file export (`cairn serve --files`): its connections, its requests by
/// method and status class (those there were), its backend's errors and its
/// cache's counters.
fn file_export_table(t: &mut String, export: &FileExportSnapshot) {
    let _ = writeln!(
        t,
        "\nfile export {:?}: policy {}, {} blocks, {} connections open ({} since start, {} refused)",
        export.name,
        export.policy,
        bytes(export.block_size_bytes),
        export.connections_open,
        export.connections_total,
        export.connections_refused
    );
    let answered: Vec<String> = export
        .requests
        .iter()
        .filter(|r| r.count > 0)
        .map(|r| format!("{} {} {}", r.count, r.method.to_uppercase(), r.status))
        .collect();
    let answered = if answered.is_empty() {
        "none".to_owned()
    } else {
        answered.join(", ")
    };
    let _ = writeln!(t, "  requests    {answered}");
    let e = &export.backend_errors;
    let _ = writeln!(
        t,
        "  backend errors  {} not found, {} timed out, {} other",
        e.not_found, e.timeout, e.other
    );
    let _ = writeln!(t, "  cache");
    metric_rows(t, "    ", &export.cache);
    for backend in &export.backends {
        let _ = writeln!(t, "  union member {} (--files order)", backend.name);
        metric_rows(t, "    ", &backend.metrics);
    }
}

fn export_table(t: &mut String, export: &ExportSnapshot, before: Option<(f64, &ExportSnapshot)>) {
    let io = &export.io;
    let _ = writeln!(
        t,
        "\nexport {:?}: {} bytes{}, {} connections open ({} since start)",
        export.name,
        export.size_bytes,
        if export.read_only { ", read-only" } else { "" },
        io.connections_open,
        io.connections_total
    );
    requests(t, &io.io);
    if let Some((seconds, then)) = before.filter(|(s, _)| *s > 0.0) {
        let rate = |now: u64, was: u64| now.saturating_sub(was) as f64 / seconds;
        let (a, b) = (&io.io, &then.io.io);
        let _ = writeln!(
            t,
            "  per second  {:.0} reads ({}/s), {:.0} writes ({}/s)",
            rate(a.reads, b.reads),
            bytes(rate(a.read_bytes, b.read_bytes) as u64),
            rate(a.writes, b.writes),
            bytes(rate(a.write_bytes, b.write_bytes) as u64),
        );
    }
    let l = &io.latency;
    for (name, latency) in [("read", &l.read), ("write", &l.write), ("other", &l.other)] {
        if latency.count > 0 {
            latency_line(t, "  ", name, latency);
        }
    }
    for c in &io.connections {
        let _ = writeln!(
            t,
            "  connection {} ({}, {} s): {} reads, {} writes, {} flushes, {} errors",
            c.id, c.peer, c.seconds, c.io.reads, c.io.writes, c.io.flushes, c.io.errors
        );
    }
    for layer in &export.layers {
        layer_table(t, layer);
    }
}

fn requests(t: &mut String, io: &IoCounts) {
    let _ = writeln!(
        t,
        "  requests    {} reads ({}), {} writes ({}), {} flushes, {} trims ({}), \
         {} zeroes ({}), {} cache, {} block status, {} errors, {} refused",
        io.reads,
        bytes(io.read_bytes),
        io.writes,
        bytes(io.write_bytes),
        io.flushes,
        io.trims,
        bytes(io.trim_bytes),
        io.write_zeroes,
        bytes(io.write_zeroes_bytes),
        io.caches,
        io.block_statuses,
        io.errors,
        io.rejected
    );
}

fn latency_line(t: &mut String, indent: &str, name: &str, l: &Latency) {
    let _ = writeln!(
        t,
        "{indent}{name:<6} latency  p50 {}  p99 {}  p99.9 {}  max {}  mean {}  ({} requests)",
        duration(l.p50_ns),
        duration(l.p99_ns),
        duration(l.p999_ns),
        duration(l.max_ns),
        duration(l.mean_ns),
        l.count
    );
}

fn layer_table(t: &mut String, layer: &LayerStats) {
    let _ = writeln!(t, "  layer {} ({})", layer.name, layer.kind);
    let l = &layer.latency;
    for (name, latency) in [("read", &l.read), ("write", &l.write), ("flush", &l.flush)] {
        if latency.count > 0 {
            latency_line(t, "    ", name, latency);
        }
    }
    metric_rows(t, "    ", &layer.metrics);
    for group in &layer.groups {
        let _ = writeln!(t, "    cost group {}", group.name);
        metric_rows(t, "      ", &group.metrics);
    }
}

/// Metrics three to a line, `name value`, in aligned columns.
fn metric_rows(t: &mut String, indent: &str, metrics: &[Metric]) {
    for row in metrics.chunks(3) {
        let _ = write!(t, "{indent}");
        for m in row {
            let cell = format!("{} {}", m.name, m.value);
            let _ = write!(t, "{cell:<38}");
        }
        let _ = writeln!(t);
    }
}

fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

fn duration(ns: u64) -> String {
    match ns {
        0..1_000 => format!("{ns}ns"),
        1_000..1_000_000 => format!("{:.1}µs", ns as f64 / 1e3),
        1_000_000..1_000_000_000 => format!("{:.2}ms", ns as f64 / 1e6),
        _ => format!("{:.2}s", ns as f64 / 1e9),
    }
}

#[cfg(test)]
mod tests {
    use super::{bytes, duration};

    #[test]
    fn units_read_naturally() {
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(4 << 20), "4.0 MiB");
        assert_eq!(duration(999), "999ns");
        assert_eq!(duration(12_345), "12.3µs");
        assert_eq!(duration(2_500_000), "2.50ms");
    }
}
