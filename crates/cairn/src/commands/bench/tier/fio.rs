//! `cairn bench tier --part fio`: Cairn's cache tier against nbdkit's cache
//! filter, each in front of an emulated slow device, through fio's nbd engine;
//! first the two slow devices alone (the calibration), then the two caches.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};
use cairn_store::Volume;
use cairn_store::volume::OpenOptions;

use super::args::TierBenchArgs;
use super::common::{room, size_text};
use crate::commands::bench::nbd::{
    Running, fio_has_nbd, fio_job, median, serve_in_process, wait_for,
};
use crate::output::outln;

/// The tier of the result rows; `{ssd}` and `{cache}` are filled in (the
/// cache device's size is what caches `--cache-size` of data, as nbdkit's
/// cache-max-size does: the tier keeps a tenth of its slots free for
/// reclaiming, and its metadata).
const TIER_DEVICES: &str = r#"
[device.tier]
kind = "tier"
over = "slow"
cache = "ssd"
mode = "write-back"
policy = "s3fifo"
sequential_cutoff = "4MiB"
block_size = "4KiB"
bucket_size = "1MiB"
writeback_percent = 10

[device.ssd]
kind = "file"
path = {ssd}
size = {cache}
"#;

/// Cairn's slow device (calibrated against nbdkit's, below).
pub(super) const LATENCY_US: u32 = 1080;
pub(super) const BANDWIDTH_MB_S: u32 = 200;
/// nbdkit's slow device. Its delay filter takes whole milliseconds.
const DELAY: &str = "1ms";
/// Bits per second (150 MB/s).
const RATE: u64 = 1_200_000_000;
/// The rate filter's bucket, seconds of RATE: it must hold a 1 MiB request,
/// or each request is paid in rounds that each sleep the whole remainder
/// (half a request's worth ran 1 MiB reads at 64 % of the rate).
const BURSTINESS: &str = "0.01";

#[derive(Clone, Copy)]
enum Row {
    RandRead,
    RandWrite,
    SeqRead,
}

const ROWS: [Row; 3] = [Row::RandRead, Row::RandWrite, Row::SeqRead];

impl Row {
    fn name(self) -> &'static str {
        match self {
            Self::RandRead => "rand read 4k zipf",
            Self::RandWrite => "rand write 4k fsync",
            Self::SeqRead => "seq read 1M",
        }
    }

    fn unit(self) -> &'static str {
        match self {
            Self::SeqRead => "MiB/s",
            _ => "IOPS",
        }
    }

    /// fio's arguments for the row over `region` bytes.
    fn args(self, seed: u32, depth: u32, region: u64) -> Vec<String> {
        let mut args: Vec<String> = match self {
            Self::RandRead => vec!["--rw=randread".into(), "--bs=4k".into(), ZIPF.into()],
            Self::RandWrite => vec![
                "--rw=randwrite".into(),
                "--bs=4k".into(),
                "--fsync=32".into(),
            ],
            Self::SeqRead => vec!["--rw=read".into(), "--bs=1M".into()],
        };
        args.extend([
            format!("--randseed={seed}"),
            format!("--iodepth={depth}"),
            format!("--size={region}"),
        ]);
        args
    }
}

/// Zipf 1.1 with its hot spot fixed at the start of the hash space, so that
/// the warm-up (another seed) warms the blocks the measured rounds read:
/// without the `:0` fio places it by the seed.
const ZIPF: &str = "--random_distribution=zipf:1.1:0";

/// One fio run: the row's value (IOPS or MiB/s) and its completion latency
/// percentiles, µs.
#[derive(Clone, Copy, Default)]
struct Sample {
    value: f64,
    p50: f64,
    p99: f64,
}

/// The servers of each table, in this order: their URIs are `[String; 2]`.
const SERVERS: [&str; 2] = ["nbdkit", "cairn"];

pub(super) fn run(args: &TierBenchArgs, cache: u64) -> Result<()> {
    let region = cache * 4;
    if !fio_has_nbd() {
        bail!("fio with the nbd engine is needed (apt-get install fio)");
    }
    if Command::new("nbdkit").arg("--version").output().is_err() {
        bail!("nbdkit is needed (apt-get install nbdkit)");
    }
    std::fs::create_dir_all(&args.dir)
        .with_context(|| format!("creating {}", args.dir.display()))?;
    let tmp = tempfile::tempdir_in(&args.dir)
        .with_context(|| format!("temporary directory in {}", args.dir.display()))?;
    if cairn_store::device::probe::on_ram(tmp.path()) {
        eprintln!(
            "note: {} is on RAM (tmpfs): the caches are RAM",
            args.dir.display()
        );
    }
    let shm = Path::new("/dev/shm");
    let backing_tmp = if shm.is_dir() && room(shm) > 2 * region + (256 << 20) {
        tempfile::tempdir_in(shm).ok()
    } else {
        None
    };
    let backing_dir = backing_tmp.as_ref().map_or(tmp.path(), |t| t.path());
    let nbdkit_backing = backing_dir.join("nbdkit.img");
    let cairn_backing = backing_dir.join("cairn.img");
    for path in [&nbdkit_backing, &cairn_backing] {
        fill(path, region)?;
    }
    let nbdkit_cache_dir = tmp.path().join("nbdkit-cache");
    std::fs::create_dir(&nbdkit_cache_dir)?;
    let seconds = args.seconds;

    // The calibration: the slow devices alone.
    let uncached = nbdkit_args(&nbdkit_backing, None);
    let spec = cairn_spec(&tmp.path().join("cairn-uncached"), &cairn_backing, None);
    outln!(
        "cairn bench tier: {} caches over {}, iodepth {}, {seconds} s per row and server, median of {} round(s)",
        size_text(cache),
        size_text(region),
        args.iodepth,
        args.rounds
    )?;
    outln!("uncached nbdkit: nbdkit {}", uncached.join(" "))?;
    outln!(
        "uncached cairn: throttled latency_us = {LATENCY_US}, bandwidth_mb_s = {BANDWIDTH_MB_S}, over {}",
        cairn_backing.display()
    )?;
    let samples = {
        let (volume, servers, uris) = start_pair(&uncached, None, &spec, tmp.path(), "uncached")?;
        let samples = measure(&uris, args, region, cache, false, None)?;
        drop(servers);
        volume.close().context("closing the volume")?;
        samples
    };
    outln!()?;
    print_table(
        "calibration",
        ["nbdkit", "cairn"],
        "within 10%",
        &samples,
        |r| r.max(1.0 / r) <= 1.10,
    )?;

    // The caches.
    let peer = nbdkit_args(&nbdkit_backing, Some(cache));
    let ssd = tmp.path().join("ssd.img");
    let device = super::common::cache_device_bytes(cache);
    let tier = Some((ssd.as_path(), device));
    let spec = cairn_spec(&tmp.path().join("cairn-tier"), &cairn_backing, tier);
    outln!()?;
    outln!(
        "peer: TMPDIR={} nbdkit {}",
        nbdkit_cache_dir.display(),
        peer.join(" ")
    )?;
    outln!(
        "cairn: the tier: {} of cache (a {} cache device at {}: a tenth of it kept free for \
         reclaiming, and the metadata), write-back, s3fifo, sequential cutoff 4 MiB",
        size_text(cache),
        size_text(device),
        ssd.display()
    )?;
    let samples = {
        let (volume, servers, uris) =
            start_pair(&peer, Some(&nbdkit_cache_dir), &spec, tmp.path(), "tier")?;
        let samples = measure(
            &uris,
            args,
            region,
            cache,
            true,
            super::common::the_tier(&volume).ok(),
        )?;
        drop(servers);
        volume.close().context("closing the volume")?;
        samples
    };
    outln!()?;
    print_table("result", ["peer", "cairn"], ">= 1.5x", &samples, |r| {
        r >= 1.5
    })?;
    Ok(())
}

/// Creates `path` with `len` bytes of pseudo-random data (not sparse: a hole
/// reads faster than data).
fn fill(path: &Path, len: u64) -> Result<()> {
    let mut file =
        std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut state = 0x9e37_79b9_7f4a_7c15_u64 ^ len;
    let mut chunk = vec![0u8; 1 << 20];
    for _ in 0..len >> 20 {
        for word in chunk.chunks_exact_mut(8) {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            word.copy_from_slice(&state.to_le_bytes());
        }
        file.write_all(&chunk)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// nbdkit's arguments after the program name: the slow device, under the
/// cache filter when `cache` is given, else serialized (the calibration).
fn nbdkit_args(backing: &Path, cache: Option<u64>) -> Vec<String> {
    let top = if cache.is_some() {
        "cache"
    } else {
        "noparallel"
    };
    let mut args: Vec<String> = [top, "rate", "delay"]
        .map(|filter| format!("--filter={filter}"))
        .into();
    args.extend(["file".into(), format!("file={}", backing.display())]);
    match cache {
        Some(size) => args.extend(
            [
                "cache=writeback",
                "cache-on-read=true",
                &format!("cache-max-size={size}"),
                "cache-min-block-size=4096",
                "cache-high-threshold=100",
                "cache-low-threshold=95",
            ]
            .map(String::from),
        ),
        None => args.push("serialize=all-requests".into()),
    }
    args.extend([
        format!("rate={RATE}"),
        format!("burstiness={BURSTINESS}"),
        format!("rdelay={DELAY}"),
        format!("wdelay={DELAY}"),
    ]);
    args
}

/// The volume spec of Cairn's side: the throttled device, under the tier
/// when `tier` gives its cache file and size.
fn cairn_spec(data_dir: &Path, backing: &Path, tier: Option<(&Path, u64)>) -> String {
    let quote = |path: &Path| toml::Value::String(path.display().to_string()).to_string();
    let top = if tier.is_some() { "tier" } else { "slow" };
    let mut text = format!(
        "data_dir = {}\n\n[[export]]\nname = \"cairn\"\ndevice = \"{top}\"\n",
        quote(data_dir)
    );
    if let Some((ssd, cache)) = tier {
        text += &TIER_DEVICES
            .replace("{ssd}", &quote(ssd))
            .replace("{cache}", &cache.to_string());
    }
    let _ = write!(
        text,
        "\n[device.slow]\nkind = \"throttled\"\nover = \"backing\"\nlatency_us = {LATENCY_US}\n\
         bandwidth_mb_s = {BANDWIDTH_MB_S}\n\n[device.backing]\nkind = \"file\"\npath = {}\n",
        quote(backing)
    );
    text
}

/// Starts nbdkit with `nbdkit` (its cache file in `cache_dir`) and Cairn
/// serving `spec`, each on a Unix socket in `dir`.
fn start_pair(
    nbdkit: &[String],
    cache_dir: Option<&Path>,
    spec: &str,
    dir: &Path,
    name: &str,
) -> Result<(Volume, [Running; 2], [String; 2])> {
    let spec = crate::volume_spec::parse(spec, &format!("bench tier ({name})"))?;
    let volume = Volume::open(&spec, Path::new(""), &OpenOptions::default())
        .with_context(|| format!("bench tier ({name}): opening Cairn's volume"))?;
    for line in volume.notes().iter().chain(volume.warnings()) {
        eprintln!("cairn: {line}");
    }
    let cairn_socket = dir.join(format!("cairn-{name}.sock"));
    let cairn = serve_in_process(volume.exports()[0].device.clone(), &cairn_socket)?;
    let nbdkit_socket = dir.join(format!("nbdkit-{name}.sock"));
    let log = dir.join(format!("nbdkit-{name}.log"));
    let mut command = Command::new("nbdkit");
    command
        .args(["--foreground", "--exit-with-parent", "--unix"])
        .arg(&nbdkit_socket)
        .args(nbdkit)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log)?);
    if let Some(cache_dir) = cache_dir {
        command.env("TMPDIR", cache_dir);
    }
    let child = command.spawn().context("starting nbdkit")?;
    let nbdkit_server = Running::Child(child);
    for socket in [&nbdkit_socket, &cairn_socket] {
        if let Err(e) = wait_for(socket) {
            let said = std::fs::read_to_string(&log).unwrap_or_default();
            bail!("{e:#}; nbdkit said: {}", said.trim());
        }
    }
    let uris =
        [&nbdkit_socket, &cairn_socket].map(|s| format!("nbd+unix:///?socket={}", s.display()));
    Ok((volume, [nbdkit_server, cairn], uris))
}

/// Every row on both servers, `--rounds` times, a warm-up before each round
/// when `warm`; returns samples[server][row], one per round. With `tier`
/// (Cairn's), each of Cairn's rows also says the tier's read hit ratio and
/// the misses a second it sent to the slow device.
fn measure(
    uris: &[String; 2],
    args: &TierBenchArgs,
    region: u64,
    cache: u64,
    warm: bool,
    tier: Option<&cairn_store::tier::Tier>,
) -> Result<Vec<Vec<Vec<Sample>>>> {
    let mut samples = vec![vec![Vec::new(); ROWS.len()]; 2];
    for round in 1..=args.rounds {
        if warm && args.warmup > 0 {
            for (server, uri) in uris.iter().enumerate() {
                let mut warm_up = Row::RandRead.args(1000 + round, args.iodepth, region);
                warm_up.extend([
                    format!("--io_size={}", cache * u64::from(args.warmup)),
                    format!("--runtime={}", (args.seconds * 20).max(30)),
                ]);
                let started = std::time::Instant::now();
                let job = fio_job(uri, &warm_up)?;
                eprintln!(
                    "round {round}: {}: warm-up {} reads in {:.1} s",
                    SERVERS[server],
                    job["read"]["total_ios"],
                    started.elapsed().as_secs_f64()
                );
            }
        }
        for (index, row) in ROWS.iter().enumerate() {
            for (server, uri) in uris.iter().enumerate() {
                let mut fio_args = row.args(round, args.iodepth, region);
                fio_args.extend(["--time_based".into(), format!("--runtime={}", args.seconds)]);
                let from = tier.map(cairn_store::tier::Tier::metrics);
                let started = std::time::Instant::now();
                let sample = sample(*row, &fio_job(uri, &fio_args)?);
                let seconds = started.elapsed().as_secs_f64();
                let counters = match (tier, from) {
                    (Some(tier), Some(from)) if server == 1 => {
                        let to = tier.metrics();
                        format!(
                            "; the tier: read hit ratio {:.4}, {:.0} read misses a second",
                            super::common::hit_ratio(&from, &to),
                            (to.misses - from.misses) as f64 / seconds
                        )
                    }
                    _ => String::new(),
                };
                eprintln!(
                    "round {round}: {}: {} {:.1} {} (p50 {:.0} µs, p99 {:.0} µs){counters}",
                    SERVERS[server],
                    row.name(),
                    sample.value,
                    row.unit(),
                    sample.p50,
                    sample.p99
                );
                samples[server][index].push(sample);
            }
        }
    }
    Ok(samples)
}

/// A row's value and latencies from fio's job object.
fn sample(row: Row, job: &serde_json::Value) -> Sample {
    let side = &job[if matches!(row, Row::RandWrite) {
        "write"
    } else {
        "read"
    }];
    let value = match row {
        Row::SeqRead => side["bw_bytes"].as_f64().unwrap_or(0.0) / f64::from(1 << 20),
        _ => side["iops"].as_f64().unwrap_or(0.0),
    };
    let percentile = |p: &str| side["clat_ns"]["percentile"][p].as_f64().unwrap_or(0.0) / 1000.0;
    Sample {
        value,
        p50: percentile("50.000000"),
        p99: percentile("99.000000"),
    }
}

/// One table: a row per fio job, the medians of both servers, cairn over
/// the other, and `verdict` of that ratio.
fn print_table(
    title: &str,
    names: [&str; 2],
    verdict_name: &str,
    samples: &[Vec<Vec<Sample>>],
    verdict: impl Fn(f64) -> bool,
) -> Result<()> {
    let header: Vec<String> = [
        title.to_owned(),
        "unit".into(),
        names[0].into(),
        names[1].into(),
        format!("{}/{}", names[1], names[0]),
        verdict_name.into(),
        format!("p50 µs {}/{}", names[0], names[1]),
        format!("p99 µs {}/{}", names[0], names[1]),
    ]
    .into();
    let mut rows = Vec::new();
    let mut passed = 0;
    for (index, row) in ROWS.iter().enumerate() {
        let pick = |server: usize, f: fn(&Sample) -> f64| {
            median(samples[server][index].iter().map(f).collect()).unwrap_or(0.0)
        };
        let [peer, ours] = [0, 1].map(|s| pick(s, |x| x.value));
        let ratio = if peer > 0.0 { ours / peer } else { 0.0 };
        let ok = ratio > 0.0 && verdict(ratio);
        passed += usize::from(ok);
        rows.push(vec![
            row.name().to_owned(),
            row.unit().to_owned(),
            format!("{peer:.1}"),
            format!("{ours:.1}"),
            format!("{ratio:.2}x"),
            if ok { "yes" } else { "no" }.to_owned(),
            format!("{:.0}/{:.0}", pick(0, |x| x.p50), pick(1, |x| x.p50)),
            format!("{:.0}/{:.0}", pick(0, |x| x.p99), pick(1, |x| x.p99)),
        ]);
    }
    crate::output::table(&mut crate::output::stdout(), &header, &rows)?;
    outln!("{title}: {passed} of {} rows {verdict_name}", ROWS.len())?;
    Ok(())
}
