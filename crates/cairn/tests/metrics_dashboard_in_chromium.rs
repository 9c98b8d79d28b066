//! The dashboard page in a real browser: headless Chromium (Debian's
//! `chromium`) loads `/` from `cairn serve --metrics` while a client reads
//! and writes, and every chart — hit ratio, throughput, latency, dirty
//! data, cleaner work, cost-group costs — has drawn points (each chart's
//! `<figure>` says how many in `data-points`), the ones under load with
//! values above zero; the layer table lists the stack. A screenshot is
//! taken too (`CAIRN_DASHBOARD_SCREENSHOT=docs/dashboard.png` keeps it
//! there). Guards the page end to end: a script error, a field renamed in
//! the snapshot, or a chart that never draws fails here. A file export
//! (`cairn serve --files`) gets its own charts — block hit ratio, bytes from
//! the cache and the backend, requests, readahead, resident bytes, dual's
//! preface; with `--spill`, the SSD spill's hit ratio beside the DRAM
//! cache's and its fill in the summary — and none of the volumes'.
// Counts compared as f64 are whole numbers, exact below 2^53.
#![allow(clippy::unwrap_used, clippy::float_cmp)]

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::metrics::{Load, cached_log_spec, exchange, required_tool, serve, serve_files};
use common::terminate;

/// Runs Chromium headless on `url` with `extra` flags (a fresh profile in
/// `profile`, nothing fetched but the page: no first-run, sync, component
/// updates or background requests), virtual time advanced 10 s so the page
/// polls about ten times; its stdout. Killed after 120 s.
fn chromium(binary: &Path, profile: &Path, url: &str, extra: &[String]) -> String {
    let mut child = Command::new(binary)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--virtual-time-budget=10000",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(extra)
        .arg(url)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut { stdout }, &mut text).unwrap();
        text
    });
    let deadline = Instant::now() + Duration::from_mins(2);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium did not finish in 120 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    reader.join().unwrap()
}

/// Per chart shown (its element id; hidden ones are left out):
/// `data-points`, `data-series`, `data-max`.
fn charts(dom: &str) -> HashMap<String, (u64, u64, f64)> {
    let mut charts = HashMap::new();
    for tag in dom.split("<figure").skip(1) {
        let tag = &tag[..tag.find('>').unwrap()];
        if tag.contains(" hidden") {
            continue;
        }
        let attribute = |name: &str| {
            let start = tag.find(&format!("{name}=\""))? + name.len() + 2;
            Some(tag[start..].split('"').next()?.to_owned())
        };
        let id = attribute("id").unwrap();
        let points = attribute("data-points").unwrap().parse().unwrap();
        let series = attribute("data-series").map_or(0, |s| s.parse().unwrap());
        let max = attribute("data-max").map_or(0.0, |s| s.parse().unwrap());
        charts.insert(id, (points, series, max));
    }
    charts
}

#[test]
fn every_chart_has_data_in_headless_chromium_under_load() {
    let Some(binary) = required_tool("chromium", "chromium") else {
        return;
    };
    let nv = common::nv_dir();
    let mut served = serve(&[], Some(&cached_log_spec(nv.path())));
    let load = Load::start(&served.socket);
    // The first snapshot the page reads already has the load's counts.
    std::thread::sleep(Duration::from_secs(1));
    let url = format!("http://{}/", served.address);
    let profile = tempfile::tempdir().unwrap();
    let dom = chromium(&binary, profile.path(), &url, &["--dump-dom".into()]);
    let charts = charts(&dom);
    eprintln!("charts (points, series, max): {charts:?}");
    assert_eq!(charts.len(), 6, "{dom}");
    for (id, (points, series, _)) in &charts {
        assert!(*points > 0 && *series > 0, "{id} drew nothing:\n{dom}");
    }
    // Under load: bytes moved, requests took time, the log holds writes.
    for id in ["chart-throughput", "chart-latency", "chart-dirty"] {
        assert!(charts[id].2 > 0.0, "{id}: {:?}", charts[id]);
    }
    // The cache's two cost groups (device0 sequential and random), each a
    // line; a cost is at least 1 (the fastest group's).
    assert_eq!(charts["chart-costs"].1, 2);
    assert!(charts["chart-costs"].2 >= 1.0);
    assert!(
        dom.contains("<td>cache</td>") && dom.contains("<td>log</td>"),
        "the layer table"
    );
    assert!(
        !dom.contains("cannot read /stats.json"),
        "the page lost the server"
    );

    let screenshot: PathBuf = std::env::var_os("CAIRN_DASHBOARD_SCREENSHOT")
        .map_or_else(|| profile.path().join("dashboard.png"), PathBuf::from);
    chromium(
        &binary,
        tempfile::tempdir().unwrap().path(),
        &url,
        &[
            format!("--screenshot={}", screenshot.display()),
            "--window-size=1280,900".into(),
            "--hide-scrollbars".into(),
        ],
    );
    let png = std::fs::read(&screenshot).unwrap();
    assert!(
        png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 20_000,
        "{} bytes",
        png.len()
    );
    let requests = load.stop();
    assert!(requests > 0);
    terminate(served.server.take());
}

#[test]
fn a_file_export_has_its_own_charts_in_headless_chromium() {
    let Some(binary) = required_tool("chromium", "chromium") else {
        return;
    };
    let served = serve_files(
        &[
            "--block-size",
            "256KiB",
            "--cache-size",
            "4MiB",
            "--policy",
            "dual",
            "--prefetch-stripes",
            "2",
            "--spill",
            "spill.img",
            "--spill-size",
            "64MiB",
        ],
        |dir| {
            for name in ["a.mp4", "b.mp4", "c.mp4"] {
                std::fs::write(dir.join(name), vec![5u8; 3 << 20]).unwrap();
            }
        },
    );
    // Readers of the three files (more than the cache holds) until the
    // page has polled: hits, misses, readahead and evictions all move.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let gateway = served.gateway;
    let reader = {
        let stop = std::sync::Arc::clone(&stop);
        std::thread::spawn(move || {
            // One request per connection: the answer ends where it closes.
            let get = |path: &str| {
                let request =
                    format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
                exchange(gateway, request.as_bytes())
            };
            let mut gets = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                for name in ["a.mp4", "b.mp4", "c.mp4", "a.mp4"] {
                    assert_eq!(get(&format!("/media/{name}")).status, 200);
                    gets += 1;
                }
                assert_eq!(get("/media/missing.mp4").status, 404);
            }
            gets
        })
    };
    std::thread::sleep(Duration::from_secs(1));
    let url = format!("http://{}/", served.address);
    let profile = tempfile::tempdir().unwrap();
    let dom = chromium(&binary, profile.path(), &url, &["--dump-dom".into()]);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(reader.join().unwrap() > 0);
    let charts = charts(&dom);
    eprintln!("charts (points, series, max): {charts:?}");
    let mut shown: Vec<&str> = charts.keys().map(String::as_str).collect();
    shown.sort_unstable();
    assert_eq!(
        shown,
        [
            "chart-hit-ratio",
            "chart-preface",
            "chart-readahead",
            "chart-requests",
            "chart-resident",
            "chart-throughput"
        ],
        "the file export's charts, not the volumes': {dom}"
    );
    for (id, (points, series, max)) in &charts {
        assert!(
            *points > 0 && *series > 0 && *max > 0.0,
            "{id} drew nothing:\n{dom}"
        );
    }
    // Both sources of bytes; GET 2xx and 4xx; resident and capacity.
    assert_eq!(charts["chart-throughput"].1, 2, "{dom}");
    assert!(charts["chart-requests"].1 >= 2, "{dom}");
    assert_eq!(charts["chart-resident"].1, 2, "{dom}");
    assert!(charts["chart-hit-ratio"].2 <= 1.0);
    // The DRAM cache's blocks and the SSD spill's (9 MiB of files over 4
    // MiB of DRAM: after the first pass the spill answers).
    assert_eq!(charts["chart-hit-ratio"].1, 2, "{dom}");
    assert!(
        dom.contains("SSD spill"),
        "the spill's series and summary: {dom}"
    );
    assert!(
        dom.contains("<option value=\"files:media\">media (files)</option>"),
        "the export list: {dom}"
    );
    assert!(
        dom.contains("<b>dual</b>"),
        "the summary names the policy: {dom}"
    );
    assert!(
        !dom.contains("cannot read /stats.json"),
        "the page lost the server"
    );
}
