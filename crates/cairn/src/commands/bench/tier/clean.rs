//! `cairn bench tier --part clean`: foreground write latency while the
//! cleaner drains. The same rate-limited fio write load runs through NBD
//! against a write-back tier with nothing to clean, then while it drains a
//! cache half full of dirty blocks toward its 10 % target.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, Result};
use cairn_store::tier::Metrics;
use cairn_store::{Device, Volume};

use super::args::TierBenchArgs;
use super::common::{cache_device_bytes, open, scratch, size_text, the_tier, toml_path};
use super::fio::{BANDWIDTH_MB_S, LATENCY_US};
use crate::commands::bench::nbd::{fio_job, serve_in_process, wait_for};
use crate::output::outln;

/// The bar: p99 while draining over p99 with nothing to clean.
const BAR: f64 = 2.0;

/// The volume: a write-back tier (cutoff 0) over the throttled slow device.
fn spec(ssd_dir: &Path, backing_dir: &Path, cache: u64, writeback_percent: u32) -> String {
    format!(
        "data_dir = {data}\n\n[[export]]\nname = \"cairn\"\ndevice = \"tier\"\n\n\
         [device.tier]\nkind = \"tier\"\nover = \"slow\"\ncache = \"ssd\"\n\
         mode = \"write-back\"\npolicy = \"s3fifo\"\nsequential_cutoff = 0\n\
         writeback_percent = {writeback_percent}\n\n\
         [device.ssd]\nkind = \"file\"\npath = {ssd}\nsize = {device}\n\n\
         [device.slow]\nkind = \"throttled\"\nover = \"backing\"\nlatency_us = {LATENCY_US}\n\
         bandwidth_mb_s = {BANDWIDTH_MB_S}\n\n\
         [device.backing]\nkind = \"file\"\npath = {backing}\nsize = {len}\n",
        data = toml_path(&ssd_dir.join("data")),
        ssd = toml_path(&ssd_dir.join("ssd.img")),
        device = cache_device_bytes(cache),
        backing = toml_path(&backing_dir.join("backing.img")),
        len = 4 * cache,
    )
}

/// Writes every block of the first `region` bytes, 1 MiB at a time.
fn prefill(device: &dyn Device, region: u64) -> Result<()> {
    let buf = vec![0x5au8; 1 << 20];
    for offset in (0..region).step_by(buf.len()) {
        device.write_at(&buf, offset)?;
    }
    Ok(())
}

/// One phase's load: fio's write IOPS and completion latency percentiles,
/// and the tier's counters before and after.
struct Phase {
    iops: f64,
    p50: f64,
    p99: f64,
    from: Metrics,
    to: Metrics,
}

/// The load: fio through NBD (this process serving), with a thread reading
/// one block every 100 ms so the tier never sees an idle second.
fn load(volume: &Volume, args: &TierBenchArgs, region: u64, socket: &Path) -> Result<Phase> {
    let tier = the_tier(volume)?;
    let device = volume.exports()[0].device.clone();
    let stop = Arc::new(AtomicBool::new(false));
    let keep_alive = {
        let device = device.clone();
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 4096];
            while !stop.load(Ordering::Relaxed) {
                let _ = device.read_at(&mut buf, 0);
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    let server = serve_in_process(device, socket)?;
    let from = tier.metrics();
    let job = wait_for(socket).and_then(|()| {
        fio_job(
            &format!("nbd+unix:///?socket={}", socket.display()),
            &fio_args(args, region),
        )
    });
    let to = tier.metrics();
    drop(server);
    stop.store(true, Ordering::Relaxed);
    let _ = keep_alive.join();
    let job = job?;
    let side = &job["write"];
    let percentile = |p: &str| side["clat_ns"]["percentile"][p].as_f64().unwrap_or(0.0) / 1000.0;
    Ok(Phase {
        iops: side["iops"].as_f64().unwrap_or(0.0),
        p50: percentile("50.000000"),
        p99: percentile("99.000000"),
        from,
        to,
    })
}

/// fio's arguments after `--name=bench --ioengine=nbd --uri=URI`.
fn fio_args(args: &TierBenchArgs, region: u64) -> Vec<String> {
    vec![
        "--rw=randwrite".into(),
        "--bs=4k".into(),
        format!("--size={region}"),
        format!("--iodepth={}", args.iodepth),
        format!("--rate_iops={}", args.clean_iops),
        "--randseed=7".into(),
        "--time_based".into(),
        format!("--runtime={}", args.clean_seconds),
    ]
}

pub(super) fn run(args: &TierBenchArgs, cache: u64) -> Result<()> {
    let region = cache / 2;
    let tmp = tempfile::tempdir_in(&args.dir)
        .with_context(|| format!("temporary directory in {}", args.dir.display()))?;
    let backing_dir = scratch(&args.dir, 4 * cache)?;
    let socket = tmp.path().join("cairn-clean.sock");
    let spec_at = |percent| spec(tmp.path(), backing_dir.path(), cache, percent);
    outln!(
        "cleaning under load: a write-back s3fifo tier caching {} (a {} cache device file in {}, \
         sequential cutoff 0) over a throttled device (latency_us = {LATENCY_US}, bandwidth_mb_s \
         = {BANDWIDTH_MB_S}) over a sparse file of {} in {}, served over NBD in this process",
        size_text(cache),
        size_text(cache_device_bytes(cache)),
        tmp.path().display(),
        size_text(4 * cache),
        backing_dir.path().display()
    )?;
    outln!(
        "load: fio --name=bench --ioengine=nbd --uri=nbd+unix:///?socket=SOCKET {}",
        fio_args(args, region).join(" ")
    )?;
    outln!(
        "region: the first {} (every block cached first, 1 MiB writes); nothing to clean: the \
         region clean, writeback_percent = 100; draining: the region dirty, stopped and reopened \
         with writeback_percent = 10",
        size_text(region)
    )?;
    outln!(
        "reproduce: cairn bench tier --part clean --cache-size {} --clean-seconds {} \
         --clean-iops {} --iodepth {} --dir {}",
        args.cache_size,
        args.clean_seconds,
        args.clean_iops,
        args.iodepth,
        args.dir.display()
    )?;

    // Nothing to clean: the region cached, written back, then the load.
    let quiet = {
        let volume = open(&spec_at(100), "bench tier clean (nothing to clean)")?;
        let tier = the_tier(&volume)?;
        prefill(&*volume.exports()[0].device, region)?;
        tier.clean_all()?;
        let phase = load(&volume, args, region, &socket)?;
        volume.close().context("closing the volume")?;
        phase
    };
    // Draining: the region dirty, kept across a clean stop, then reopened
    // with a target the cleaner drains toward under the load.
    {
        let volume = open(&spec_at(100), "bench tier clean (dirtying)")?;
        prefill(&*volume.exports()[0].device, region)?;
        volume.close().context("closing the volume")?;
    }
    let (draining, said) = {
        let volume = open(&spec_at(10), "bench tier clean (draining)")?;
        let said = volume.notes().join("; ");
        let phase = load(&volume, args, region, &socket)?;
        volume.close().context("closing the volume")?;
        (phase, said)
    };
    outln!("draining: the reopen said: {said}")?;
    outln!()?;
    let header: Vec<String> = [
        "clean under load",
        "IOPS",
        "p50 µs",
        "p99 µs",
        "dirty at start",
        "dirty at end",
        "cleaned",
    ]
    .map(String::from)
    .into();
    let rows: Vec<Vec<String>> = [("nothing to clean", &quiet), ("draining", &draining)]
        .iter()
        .map(|(name, p)| {
            vec![
                (*name).to_owned(),
                format!("{:.0}", p.iops),
                format!("{:.0}", p.p50),
                format!("{:.0}", p.p99),
                p.from.dirty_blocks.to_string(),
                p.to.dirty_blocks.to_string(),
                (p.to.cleaned_blocks - p.from.cleaned_blocks).to_string(),
            ]
        })
        .collect();
    crate::output::table(&mut crate::output::stdout(), &header, &rows)?;
    let ratio = if quiet.p99 > 0.0 {
        draining.p99 / quiet.p99
    } else {
        0.0
    };
    let ok = ratio > 0.0 && ratio <= BAR;
    outln!(
        "cleaning under load: p99 draining / nothing to clean {ratio:.2}x, <= 2x: {}",
        if ok { "yes" } else { "no" }
    )?;
    Ok(())
}
