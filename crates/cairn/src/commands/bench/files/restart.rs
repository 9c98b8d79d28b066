//! `cairn bench files --workload restart`: the cache across a restart.
//! Cairn's gateway with its SSD spill (`serve --files … --spill`) against
//! nginx's `proxy_cache` (a disk cache, which keeps its files across a
//! restart) and against Cairn without a spill (a restart starts cold), each
//! restarted before every measurement, over the streaming workload's
//! throttled origin.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use cairn_files::{Backend, SpillBackend, SpillConfig};

use super::{
    FilesBenchArgs, InProcess, Load, Measured, Pattern, Prepared, connect, dir_bytes, get, prepare,
    run_readers, serve, start_nginx,
};
use crate::output::outln;

/// Every object read once, whole, by one reader each (a cold cache filled).
fn fill(addr: SocketAddr, prefix: &str, load: &Load) -> Result<Measured> {
    let start = Instant::now();
    std::thread::scope(|scope| {
        let readers: Vec<_> = (0..load.objects)
            .map(|object| {
                scope.spawn(move || -> Result<()> {
                    let mut stream = connect(addr)?;
                    let path = format!("{prefix}/obj{object}");
                    let mut buf = vec![0u8; load.request as usize];
                    let mut head = Vec::with_capacity(16 << 10);
                    let mut offset = 0;
                    while offset < load.size {
                        if get(
                            &mut stream,
                            &path,
                            Some(object),
                            offset,
                            load.request,
                            &mut buf,
                            &mut head,
                        )? {
                            stream = connect(addr)?;
                        }
                        offset += load.request;
                    }
                    Ok(())
                })
            })
            .collect();
        readers.into_iter().try_for_each(|r| {
            r.join()
                .unwrap_or_else(|_| Err(anyhow::anyhow!("a reader panicked")))
        })
    })?;
    Ok(Measured {
        bytes: load.size * load.objects as u64,
        seconds: start.elapsed().as_secs_f64(),
        latencies: Vec::new(),
    })
}

/// Cairn's front with its spill `config` over the origin. The spill is
/// claimed for exclusive use: a front just stopped may still be letting it
/// go, so the open is retried for a few seconds.
fn spilled_front(p: &Prepared, config: &SpillConfig) -> Result<(InProcess, Arc<SpillBackend>)> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let spill = loop {
        let origin: Arc<dyn Backend> = Arc::new(p.origin_backend()?);
        match SpillBackend::open(origin, config) {
            Ok(spill) => break Arc::new(spill),
            Err(e) if Instant::now() < deadline && e.to_string().contains("in use") => {
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => return Err(e).context("the spill"),
        }
    };
    let front = serve(
        Arc::clone(&spill),
        &p.front_config(&p.policies[0], p.cache),
        "files",
    )?;
    Ok((front, spill))
}

/// Waits until nginx's cache directory stops growing (it writes each slice
/// when its response ends); returns its bytes.
fn settled(dir: &std::path::Path) -> u64 {
    let mut last = dir_bytes(dir);
    let mut same = 0;
    while same < 3 {
        std::thread::sleep(Duration::from_millis(100));
        let now = dir_bytes(dir);
        same = if now == last { same + 1 } else { 0 };
        last = now;
    }
    last
}

/// Run `cairn bench files --workload restart`.
pub fn run(args: &FilesBenchArgs) -> Result<()> {
    let p = prepare(args)?;
    let data = p.size * p.load.objects as u64;
    // Room for every object, the tier's metadata and overprovision.
    let spill_bytes = (data * 3 / 2).div_ceil(1 << 20) * (1 << 20) + (64 << 20);
    let dir = tempfile::Builder::new()
        .prefix("cairn-bench-spill")
        .tempdir()?;
    let mut config = SpillConfig::new(dir.path().join("spill.img"), p.block);
    config.size = Some(spill_bytes);
    config.direct = args.spill_direct;

    let (front, spill) = spilled_front(&p, &config)?;
    let cairn_fill = fill(front.addr, "/files", &p.load)?;
    let spilled =
        spill.tier().metrics().cached_blocks * u64::from(spill.tier().geometry().block_size);
    drop(spill);
    drop(front);
    let mut nginx = if p.nginx_found {
        let nginx = start_nginx(&args.nginx, p.origin.addr, spill_bytes, p.block)?;
        let nginx_fill = fill(nginx.addr, "/origin", &p.load)?;
        let held = settled(&nginx.dir.path().join("cache"));
        outln!(
            "filled cold: Cairn {:.1} MB/s (its SSD spill then held {} MiB), nginx {:.1} MB/s \
             (its cache directory then held {} MiB); {} objects of {} B on an origin at {}",
            cairn_fill.mb_s(),
            spilled >> 20,
            nginx_fill.mb_s(),
            held >> 20,
            p.load.objects,
            p.size,
            args.throttle
        )?;
        Some(nginx)
    } else {
        outln!(
            "filled cold: Cairn {:.1} MB/s (its SSD spill then held {} MiB)",
            cairn_fill.mb_s(),
            spilled >> 20
        )?;
        None
    };
    outln!(
        "Each front restarted, then re-read ({} s, {} B ranged GETs); DRAM cache {} B, spill {} B, \
         nginx max_size {} B",
        args.seconds,
        p.request,
        p.cache,
        spill_bytes,
        spill_bytes
    )?;
    outln!(
        "{:>7}  {:>14}  {:>14}  {:>12}  {:>13}  {:>13}  {:>15}",
        "readers",
        "no spill MB/s",
        "spill MB/s",
        "nginx MB/s",
        "spill/nginx",
        "spill/none",
        "spill hits"
    )?;
    for &readers in &args.readers {
        let plain = p.cairn_front(&p.policies[0], p.cache)?;
        let none = run_readers(plain.addr, "/files", readers, &p.load, Pattern::Sequential)?;
        drop(plain);
        let (front, spill) = spilled_front(&p, &config)?;
        let ours = run_readers(front.addr, "/files", readers, &p.load, Pattern::Sequential)?;
        let t = spill.tier().metrics();
        drop(spill);
        drop(front);
        let (theirs, ratio) = match nginx.as_mut() {
            Some(nginx) => {
                nginx.restart(&args.nginx)?;
                let m = run_readers(nginx.addr, "/origin", readers, &p.load, Pattern::Sequential)?;
                (
                    format!("{:.1}", m.mb_s()),
                    format!("{:.2}", ours.mb_s() / m.mb_s()),
                )
            }
            None => ("-".into(), "-".into()),
        };
        outln!(
            "{readers:>7}  {:>14.1}  {:>14.1}  {theirs:>12}  {ratio:>13}  {:>13.2}  {:>14.1}%",
            none.mb_s(),
            ours.mb_s(),
            ours.mb_s() / none.mb_s(),
            100.0 * t.hit_ratio()
        )?;
    }
    Ok(())
}
