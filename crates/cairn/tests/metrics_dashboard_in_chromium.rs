//! The dashboard page in a real browser: headless Chromium (Debian's
//! `chromium`) loads `/` from `cairn serve --metrics` while a client reads
//! and writes, and every chart — hit ratio, throughput, latency, dirty
//! data, cleaner work, cost-group costs — has drawn points (each chart's
//! `<figure>` says how many in `data-points`), the ones under load with
//! values above zero; the layer table lists the stack. A screenshot is
//! taken too (`CAIRN_DASHBOARD_SCREENSHOT=docs/dashboard.png` keeps it
//! there). Guards the page end to end: a script error, a field renamed in
//! the snapshot, or a chart that never draws fails here.
// Counts compared as f64 are whole numbers, exact below 2^53.
#![allow(clippy::unwrap_used, clippy::float_cmp)]

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::metrics::{Load, cached_log_spec, required_tool, serve};
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

/// Per chart (its element id): `data-points`, `data-series`, `data-max`.
fn charts(dom: &str) -> HashMap<String, (u64, u64, f64)> {
    let mut charts = HashMap::new();
    for tag in dom.split("<figure").skip(1) {
        let tag = &tag[..tag.find('>').unwrap()];
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
