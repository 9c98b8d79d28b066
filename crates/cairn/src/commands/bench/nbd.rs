//! `cairn bench nbd`: fio's nbd engine against Cairn, nbdkit's memory plugin
//! and qemu-nbd (a raw file on /dev/shm), same run, same machine.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::output::{out, outln};
use anyhow::{Context, Result, bail};
use cairn_nbd::{Export, ListenAddress, Listener, Server};
use cairn_policy::Bytes;
use cairn_store::volume::{DeviceSpec, OpenOptions};
use cairn_store::{MemoryDevice, Volume};

pub const NBD_LONG_ABOUT: &str = "\
Measure NBD throughput through fio's nbd engine (ioengine=nbd, libnbd) against
three servers started here, all at once, each on a Unix socket in a
temporary directory: Cairn serving a memory volume (in this process), nbdkit's
memory plugin, and qemu-nbd serving a raw file on /dev/shm. Each export is
pre-filled with a sequential 1 MiB write, then every row runs for --seconds on
each server in turn (so load from elsewhere hits all three alike): sequential
1 MiB read and write at iodepth 1 and 32, random 4 KiB read and write at
iodepth 1 and 32; --rounds N repeats all rows N times and reports medians.
Sequential rows report MiB/s, random rows kIOPS, and the last column is Cairn
divided by the better peer (above 1.00 means Cairn is faster). Needs fio built with the nbd engine, nbdkit and qemu-nbd (test.sh
installs them); a missing peer is reported and its column left empty.

--default-stack measures Cairn's embedded default volume instead of memory (the
read cache over the log disk with its NV write cache, a file synced to disk
at every FLUSH and FUA, over a sparse file, resized to --size, in a
temporary directory), and beside it the same stack with its NV write cache in
RAM (volatile = true, on /dev/shm: what the default was before it was made
durable), in two more columns: its figures and cairn/volatile, the cost of the
durable default. --config FILE measures the first export of a
volume spec (at its own size, which the peers then get too). The peers are the
same either way: the ratio says what the stack costs against a plain RAM disk.

--stats-overhead measures what counting costs instead of the peers: two
Cairn servers over the same volume (memory, or --default-stack, or --config),
one counting and timing every request as `cairn serve` does, one not (as
`cairn serve --no-stats`), every row on each in turn, the first of the two
alternating by round. With a stack (--default-stack, --config) the layers'
latency histograms are on for the counting server's runs and off for the
other's (the layers are shared: the switch flips between runs), so the rows
cover them too; a memory volume has no layers; on/off is the ratio of the two medians (1.000 = free;
0.980 = 2 % slower), paired the median over rounds of each round's ratio of
its two back-to-back runs (steadier under load from elsewhere), and a last
line their geometric means. Use --rounds 3 or more: two
runs of one server differ by more than 2 % on a busy machine.";

/// `cairn bench nbd` flags.
#[derive(clap::Args, Debug)]
pub struct NbdBenchArgs {
    /// Seconds per row and server.
    #[arg(long, value_name = "N", default_value_t = 5)]
    seconds: u32,

    /// Rounds over every row and server (interleaved); each cell is the
    /// median of its rounds.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    rounds: u32,

    /// Export size (each server's), e.g. 512MiB.
    #[arg(long, value_name = "SIZE", default_value = "256MiB")]
    size: String,

    /// Serve Cairn's embedded default volume (`cairn serve` with no
    /// arguments: read cache over log disk + NV write cache over a file),
    /// resized to --size, instead of a memory volume.
    #[arg(long, conflicts_with = "config")]
    default_stack: bool,

    /// Serve the first export of this volume spec instead of a memory volume;
    /// every server gets its size.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,

    /// Measure what the per-request counters and latency histograms (the
    /// export's, and with a stack its layers') cost instead of the peers:
    /// two Cairn servers over the same volume, one counting (as `cairn
    /// serve` does) and one not (`--no-stats`), every row on each in turn
    /// (which goes first alternates by round).
    #[arg(long)]
    stats_overhead: bool,
}

struct Row {
    name: &'static str,
    rw: &'static str,
    block: &'static str,
    depth: u32,
    sequential: bool,
}

const ROWS: [Row; 8] = [
    Row {
        name: "seq read 1M qd1",
        rw: "read",
        block: "1M",
        depth: 1,
        sequential: true,
    },
    Row {
        name: "seq read 1M qd32",
        rw: "read",
        block: "1M",
        depth: 32,
        sequential: true,
    },
    Row {
        name: "seq write 1M qd1",
        rw: "write",
        block: "1M",
        depth: 1,
        sequential: true,
    },
    Row {
        name: "seq write 1M qd32",
        rw: "write",
        block: "1M",
        depth: 32,
        sequential: true,
    },
    Row {
        name: "rand read 4k qd1",
        rw: "randread",
        block: "4k",
        depth: 1,
        sequential: false,
    },
    Row {
        name: "rand read 4k qd32",
        rw: "randread",
        block: "4k",
        depth: 32,
        sequential: false,
    },
    Row {
        name: "rand write 4k qd1",
        rw: "randwrite",
        block: "4k",
        depth: 1,
        sequential: false,
    },
    Row {
        name: "rand write 4k qd32",
        rw: "randwrite",
        block: "4k",
        depth: 32,
        sequential: false,
    },
];

/// The servers, in table order; the last is measured only with
/// --default-stack: the same stack with its NV write cache in RAM
/// (`volatile = true`, on /dev/shm), the default before it was made durable.
const SERVERS: [&str; 4] = ["cairn", "nbdkit", "qemu-nbd", "cairn-volatile"];
const VOLATILE: usize = 3;

pub fn run(args: &NbdBenchArgs) -> Result<()> {
    let size =
        cairn_sim::parse_bytes(&args.size).with_context(|| format!("--size {:?}", args.size))?;
    if size < 4 << 20 {
        bail!("--size must be at least 4MiB");
    }
    if !fio_has_nbd() {
        bail!("fio with the nbd engine is needed (apt-get install fio)");
    }
    let dir = tempfile::tempdir().context("temporary directory")?;
    let nv_dir = if Path::new("/dev/shm").is_dir() {
        tempfile::tempdir_in("/dev/shm")
    } else {
        tempfile::tempdir()
    }
    .context("temporary directory for the NV cache")?;
    let volume = cairn_volume(args, size, dir.path(), nv_dir.path(), false)?;
    let volatile = if args.default_stack {
        cairn_volume(args, size, dir.path(), nv_dir.path(), true)?
    } else {
        None
    };
    let size = volume
        .as_ref()
        .map_or(size, |v| v.exports()[0].device.len());
    if args.stats_overhead {
        let device: Arc<dyn cairn_store::Device> = match &volume {
            Some(volume) => volume.exports()[0].device.clone(),
            None => Arc::new(MemoryDevice::new(size)),
        };
        stats_overhead(args, &device, volume.as_ref(), size, dir.path())?;
        if let Some(volume) = &volume {
            volume.close().context("closing the volume")?;
        }
        return Ok(());
    }
    for (name, volume) in [("cairn", &volume), ("cairn-volatile", &volatile)] {
        if let Some(volume) = volume {
            eprintln!("{name}: {}", volume.exports()[0].description);
            for line in volume.notes().iter().chain(volume.warnings()) {
                eprintln!("{name}: {line}");
            }
        }
    }
    // Every server runs for the whole bench and the rows interleave them, so
    // a burst of load from elsewhere on the machine hits each one alike.
    let mut running = Vec::new();
    for (index, server) in SERVERS.iter().enumerate() {
        let chosen = if index == VOLATILE {
            let Some(volatile) = volatile.as_ref() else {
                continue;
            };
            Some(volatile)
        } else {
            volume.as_ref()
        };
        let socket = dir.path().join(format!("{server}.sock"));
        let started = start(server, &socket, size, dir.path(), chosen)
            .and_then(|started| wait_for(&socket).map(|()| started));
        let started = match started {
            Ok(started) => started,
            Err(e) => {
                eprintln!("{server}: not measured: {e:#}");
                continue;
            }
        };
        let uri = format!("nbd+unix:///?socket={}", socket.display());
        eprintln!("{server}: pre-filling {size} bytes");
        fio(&uri, "write", "1M", 8, size, None)?;
        running.push((index, started, uri));
    }
    // samples[server][row] = one value per round (MiB/s or kIOPS)
    let mut samples: Vec<Vec<Vec<f64>>> = vec![vec![Vec::new(); ROWS.len()]; SERVERS.len()];
    for round in 1..=args.rounds {
        for (row_index, row) in ROWS.iter().enumerate() {
            for (index, _, uri) in &running {
                let (bytes_per_second, iops) =
                    fio(uri, row.rw, row.block, row.depth, size, Some(args.seconds))?;
                let value = if row.sequential {
                    bytes_per_second / f64::from(1 << 20)
                } else {
                    iops / 1000.0
                };
                eprintln!(
                    "round {round}: {}: {} {value:.1}",
                    SERVERS[*index], row.name
                );
                samples[*index][row_index].push(value);
            }
        }
    }
    for (_, started, _) in running {
        started.stop();
    }
    // results[server][row] = the median over the rounds
    let results: Vec<Vec<Option<f64>>> = samples
        .into_iter()
        .map(|rows| rows.into_iter().map(median).collect())
        .collect();
    for volume in [&volume, &volatile].into_iter().flatten() {
        volume.close().context("closing the volume")?;
    }
    print_table(&results)?;
    Ok(())
}

/// The volume Cairn serves when it is not plain memory.
fn cairn_volume(
    args: &NbdBenchArgs,
    size: u64,
    dir: &Path,
    nv_dir: &Path,
    volatile: bool,
) -> Result<Option<Volume>> {
    let loaded = if let Some(path) = &args.config {
        crate::volume_spec::load(path)?
    } else if args.default_stack {
        let mut loaded = crate::volume_spec::default_spec()?;
        loaded.spec.data_dir = dir.join(if volatile {
            "cairn-data-volatile"
        } else {
            "cairn-data"
        });
        for device in loaded.spec.devices.values_mut() {
            match device {
                DeviceSpec::Log(log) => {
                    log.size = Some(Bytes(size));
                    if let Some(nv) = &mut log.nv_cache
                        && volatile
                    {
                        nv.path = Some(nv_dir.join("log.nv"));
                        nv.volatile = true;
                    }
                }
                DeviceSpec::File(file) => file.size = Some(Bytes(size / 4 * 5)),
                _ => {}
            }
        }
        loaded
    } else {
        return Ok(None);
    };
    let volume = Volume::open(&loaded.spec, &loaded.base, &OpenOptions::default())
        .with_context(|| format!("volume spec {}", loaded.origin))?;
    Ok(Some(volume))
}

/// A server started for a bench: in this process, or a child process.
/// Dropping it stops it (a child is killed and reaped).
pub(crate) enum Running {
    InProcess(cairn_nbd::Shutdown, Option<std::thread::JoinHandle<()>>),
    Child(Child),
}

impl Running {
    pub(crate) fn stop(self) {
        drop(self);
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        match self {
            Self::InProcess(shutdown, thread) => {
                shutdown.trigger();
                if let Some(thread) = thread.take() {
                    let _ = thread.join();
                }
            }
            Self::Child(child) => {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

/// Serves `device` as the only export (named "cairn", also the default) on
/// the Unix socket `socket`, from a thread of this process.
pub(crate) fn serve_in_process(
    device: Arc<dyn cairn_store::Device>,
    socket: &Path,
) -> Result<Running> {
    serve_counting(device, socket, true)
}

/// [`serve_in_process`], counting and timing requests or not.
fn serve_counting(
    device: Arc<dyn cairn_store::Device>,
    socket: &Path,
    counting: bool,
) -> Result<Running> {
    let export = Export {
        name: "cairn".into(),
        description: String::new(),
        device,
        read_only: false,
    };
    let server = Server::new(vec![export])?;
    server.set_counting(counting);
    let listener = Listener::bind(&ListenAddress::Unix(socket.to_path_buf()))?;
    let shutdown = server.shutdown_handle();
    let thread = std::thread::spawn(move || {
        if let Err(e) = server.serve(&listener) {
            eprintln!("cairn server: {e}");
        }
    });
    Ok(Running::InProcess(shutdown, Some(thread)))
}

fn start(
    server: &str,
    socket: &Path,
    size: u64,
    dir: &Path,
    volume: Option<&Volume>,
) -> Result<Running> {
    let spawn = |command: &mut Command| -> Result<Running> {
        command.stdout(Stdio::null()).stderr(Stdio::null());
        let child = command
            .spawn()
            .with_context(|| format!("starting {command:?}"))?;
        Ok(Running::Child(child))
    };
    match server {
        "cairn" | "cairn-volatile" => {
            let device: Arc<dyn cairn_store::Device> = match volume {
                Some(volume) => volume.exports()[0].device.clone(),
                None => Arc::new(MemoryDevice::new(size)),
            };
            serve_in_process(device, socket)
        }
        "nbdkit" => spawn(
            Command::new("nbdkit")
                .args(["--foreground", "--unix"])
                .arg(socket)
                .args(["memory", &format!("size={size}")]),
        ),
        _ => {
            let shm = Path::new("/dev/shm");
            let image: PathBuf = if shm.is_dir() {
                shm.join(format!("cairn-bench-{}.raw", std::process::id()))
            } else {
                dir.join("qemu.raw")
            };
            std::fs::File::create(&image)
                .and_then(|file| file.set_len(size))
                .with_context(|| format!("creating {}", image.display()))?;
            let running = spawn(
                Command::new("qemu-nbd")
                    .args(["--format=raw", "--persistent", "--shared=8", "--socket"])
                    .arg(socket)
                    .arg(&image),
            );
            // The open descriptor keeps the data alive until qemu-nbd exits.
            let removed = image.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_secs(5));
                let _ = std::fs::remove_file(removed);
            });
            running
        }
    }
}

/// Waits (up to 20 s) until `socket` accepts connections.
pub(crate) fn wait_for(socket: &Path) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::os::unix::net::UnixStream::connect(socket).is_err() {
        if Instant::now() > deadline {
            bail!("{} never accepted connections", socket.display());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

/// Whether `fio` is installed with its nbd engine.
pub(crate) fn fio_has_nbd() -> bool {
    Command::new("fio")
        .arg("--enghelp=nbd")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("uri"))
}

/// Runs one fio job through the nbd engine against `uri`, with `args` added
/// to `--name=bench --ioengine=nbd --uri=URI --output-format=json`; returns
/// the job's JSON object (`jobs[0]`).
pub(crate) fn fio_job(uri: &str, args: &[String]) -> Result<serde_json::Value> {
    let output = Command::new("fio")
        .args([
            "--name=bench",
            "--ioengine=nbd",
            &format!("--uri={uri}"),
            "--output-format=json",
        ])
        .args(args)
        .output()
        .context("running fio")?;
    if !output.status.success() {
        bail!("fio failed: {}", String::from_utf8_lossy(&output.stderr));
    }
    let text = String::from_utf8_lossy(&output.stdout);
    // fio may print notes before the JSON document ("fio: connected to NBD server").
    let json = text.find('{').map_or("", |start| &text[start..]);
    let mut value: serde_json::Value = serde_json::from_str(json).context("parsing fio's JSON")?;
    Ok(value["jobs"][0].take())
}

/// Run one fio job; returns (bytes/s, IOPS).
fn fio(
    uri: &str,
    rw: &str,
    block: &str,
    depth: u32,
    size: u64,
    seconds: Option<u32>,
) -> Result<(f64, f64)> {
    let mut args = vec![
        format!("--rw={rw}"),
        format!("--bs={block}"),
        format!("--iodepth={depth}"),
        format!("--size={size}"),
    ];
    if let Some(seconds) = seconds {
        args.extend(["--time_based".into(), format!("--runtime={seconds}")]);
    }
    let job = fio_job(uri, &args)?;
    let side = if rw.contains("read") { "read" } else { "write" };
    let bandwidth = job[side]["bw_bytes"].as_f64().unwrap_or(0.0);
    let iops = job[side]["iops"].as_f64().unwrap_or(0.0);
    Ok((bandwidth, iops))
}

/// The median of `values` (the mean of the middle two for an even count).
pub(crate) fn median(mut values: Vec<f64>) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let middle = values.len() / 2;
    Some(if values.len().is_multiple_of(2) {
        f64::midpoint(values[middle - 1], values[middle])
    } else {
        values[middle]
    })
}

/// `--stats-overhead`: every row on a server that counts and one that does
/// not, over the same device, alternating which goes first by round; a
/// table of the medians and their ratio.
fn stats_overhead(
    args: &NbdBenchArgs,
    device: &Arc<dyn cairn_store::Device>,
    volume: Option<&Volume>,
    size: u64,
    dir: &Path,
) -> Result<()> {
    const NAMES: [&str; 2] = ["stats on", "stats off"];
    // The layers' timing follows the server being measured: on for the
    // counting one, off for the other.
    let layers_timed = |on: bool| {
        if let Some(volume) = volume {
            volume.set_layer_timing(on);
        }
    };
    match volume {
        Some(volume) => {
            let layers: Vec<String> = volume
                .stats(0)
                .iter()
                .map(|l| format!("{} ({})", l.name, l.kind))
                .collect();
            eprintln!(
                "timed layers with stats on: {}",
                if layers.is_empty() {
                    "none".to_owned()
                } else {
                    layers.join(", ")
                }
            );
        }
        None => eprintln!("a memory volume: no layers; the export's counters only"),
    }
    let mut uris = Vec::new();
    let mut running = Vec::new();
    for (counting, name) in [(true, "on"), (false, "off")] {
        let socket = dir.join(format!("cairn-stats-{name}.sock"));
        running.push(serve_counting(Arc::clone(device), &socket, counting)?);
        wait_for(&socket)?;
        uris.push(format!("nbd+unix:///?socket={}", socket.display()));
    }
    eprintln!("pre-filling {size} bytes");
    fio(&uris[0], "write", "1M", 8, size, None)?;
    // samples[server][row], one value per round
    let mut samples = vec![vec![Vec::new(); ROWS.len()]; 2];
    for round in 1..=args.rounds {
        for (row_index, row) in ROWS.iter().enumerate() {
            let order = if round % 2 == 1 { [0, 1] } else { [1, 0] };
            for server in order {
                layers_timed(server == 0);
                let (bytes_per_second, iops) = fio(
                    &uris[server],
                    row.rw,
                    row.block,
                    row.depth,
                    size,
                    Some(args.seconds),
                )?;
                let value = if row.sequential {
                    bytes_per_second / f64::from(1 << 20)
                } else {
                    iops / 1000.0
                };
                eprintln!("round {round}: {}: {} {value:.1}", NAMES[server], row.name);
                samples[server][row_index].push(value);
            }
        }
    }
    drop(running);
    layers_timed(true);
    print_overhead(&samples)
}

/// The `--stats-overhead` table: per row the medians of each server, the
/// ratio of the medians, and the median of each round's paired ratio.
fn print_overhead(samples: &[Vec<Vec<f64>>]) -> Result<()> {
    outln!(
        "{:<20} {:>7} {:>10} {:>10} {:>8} {:>8}",
        "row",
        "unit",
        "stats on",
        "stats off",
        "on/off",
        "paired"
    )?;
    let mut ratios = Vec::new();
    let mut paired_ratios = Vec::new();
    for (index, row) in ROWS.iter().enumerate() {
        let unit = if row.sequential { "MiB/s" } else { "kIOPS" };
        let on = median(samples[0][index].clone()).unwrap_or(0.0);
        let off = median(samples[1][index].clone()).unwrap_or(0.0);
        let ratio = if off > 0.0 { on / off } else { f64::NAN };
        // Each round's two runs are back to back: their ratio sees the
        // same load from elsewhere, which the medians of each do not.
        let paired = median(
            samples[0][index]
                .iter()
                .zip(&samples[1][index])
                .filter(|&(_, &off)| off > 0.0)
                .map(|(on, off)| on / off)
                .collect(),
        )
        .unwrap_or(f64::NAN);
        ratios.push(ratio);
        paired_ratios.push(paired);
        outln!(
            "{:<20} {unit:>7} {on:>10.1} {off:>10.1} {ratio:>8.3} {paired:>8.3}",
            row.name
        )?;
    }
    let geometric = |r: &[f64]| (r.iter().map(|r| r.ln()).sum::<f64>() / r.len() as f64).exp();
    outln!(
        "{:<20} {:>7} {:>10} {:>10} {:>8.3} {:>8.3}",
        "geometric mean",
        "",
        "",
        "",
        geometric(&ratios),
        geometric(&paired_ratios)
    )?;
    Ok(())
}

fn print_table(results: &[Vec<Option<f64>>]) -> std::io::Result<()> {
    let volatile = results[VOLATILE].iter().any(Option::is_some);
    out!(
        "{:<20} {:>7} {:>10} {:>10} {:>10} {:>12}",
        "row",
        "unit",
        "cairn",
        "nbdkit",
        "qemu-nbd",
        "cairn/best"
    )?;
    if volatile {
        out!(" {:>10} {:>17}", "volatile", "cairn/volatile")?;
    }
    outln!()?;
    let cell = |value: Option<f64>| value.map_or_else(|| "-".to_owned(), |v| format!("{v:.1}"));
    for (index, row) in ROWS.iter().enumerate() {
        let unit = if row.sequential { "MiB/s" } else { "kIOPS" };
        let best_peer = results[1..VOLATILE]
            .iter()
            .filter_map(|r| r[index])
            .fold(None, |best: Option<f64>, v| {
                Some(best.map_or(v, |b| b.max(v)))
            });
        let ratio = match (results[0][index], best_peer) {
            (Some(ours), Some(peer)) if peer > 0.0 => format!("{:.2}x", ours / peer),
            _ => "-".to_owned(),
        };
        out!(
            "{:<20} {:>7} {:>10} {:>10} {:>10} {:>12}",
            row.name,
            unit,
            cell(results[0][index]),
            cell(results[1][index]),
            cell(results[2][index]),
            ratio
        )?;
        if volatile {
            let cost = match (results[0][index], results[VOLATILE][index]) {
                (Some(ours), Some(v)) if v > 0.0 => format!("{:.2}x", ours / v),
                _ => "-".to_owned(),
            };
            out!(" {:>10} {cost:>17}", cell(results[VOLATILE][index]))?;
        }
        outln!()?;
    }
    Ok(())
}
