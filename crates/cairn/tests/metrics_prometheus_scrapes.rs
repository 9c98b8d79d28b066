//! A real Prometheus (Debian's `prometheus`) scrapes `cairn serve
//! --metrics` every second while fio drives I/O over NBD: its target is
//! healthy, `increase` and `rate` of `cairn_requests_total` through its
//! HTTP API are positive, the last scrape's counter is exactly what the
//! control socket counted, and `histogram_quantile` over
//! `cairn_request_duration_seconds` gives a latency. The same for `cairn
//! serve --files --metrics` under HTTP GETs: `cairn_files_*` scraped, rates
//! positive, the last scrape's hits and misses exactly the control
//! socket's. Guards what unit tests of the format cannot: that a scraper
//! accepts every line and that the numbers mean in `PromQL` what they say.
// Counts compared as f64 are whole numbers, exact below 2^53.
#![allow(clippy::unwrap_used, clippy::float_cmp)]

mod common;

use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::metrics::{exchange, required_tool, serve, serve_files};
use common::{cairn, terminate};
use serde_json::Value;

/// A Prometheus child, killed and reaped when dropped.
struct Prometheus(Child);

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A port free now on loopback (Prometheus's listener; it binds it a
/// moment later).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `text` percent-encoded for a query string.
fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// `GET path` from Prometheus (HTTP/1.0: a plain body, then close), as
/// JSON.
fn api(prometheus: SocketAddr, path: &str) -> Value {
    let request = format!("GET {path} HTTP/1.0\r\nHost: {prometheus}\r\n\r\n");
    let answer = exchange(prometheus, request.as_bytes());
    assert_eq!(answer.status, 200, "{path}: {}", answer.text());
    serde_json::from_slice(&answer.body).unwrap()
}

/// The value of the `PromQL` `query` now: the first series' value, or `None`
/// when the result is empty.
fn query(prometheus: SocketAddr, query: &str) -> Option<f64> {
    let answer = api(
        prometheus,
        &format!("/api/v1/query?query={}", encode(query)),
    );
    assert_eq!(answer["status"], "success", "{query}: {answer}");
    let value = answer["data"]["result"].get(0)?["value"][1].as_str()?;
    Some(value.parse().unwrap())
}

/// Polls `query` until `good` holds for its value (30 s at most).
fn until(prometheus: SocketAddr, text: &str, good: impl Fn(f64) -> bool) -> f64 {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let value = query(prometheus, text);
        if let Some(value) = value.filter(|v| good(*v)) {
            return value;
        }
        assert!(Instant::now() < deadline, "{text}: still {value:?}");
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn start_prometheus(binary: &Path, dir: &Path, target: SocketAddr) -> (Prometheus, SocketAddr) {
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
             scrape_configs:\n  - job_name: cairn\n    scrape_interval: 1s\n    \
             scrape_timeout: 1s\n    static_configs:\n      - targets: [\"{target}\"]\n"
        ),
    )
    .unwrap();
    let address: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
    let child = Command::new(binary)
        .arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg(format!("--web.listen-address={address}"))
        .arg("--log.level=warn")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    let prometheus = Prometheus(child);
    let deadline = Instant::now() + Duration::from_mins(1);
    loop {
        let ready = std::net::TcpStream::connect(address).is_ok()
            && exchange(address, b"GET /-/ready HTTP/1.0\r\n\r\n").status == 200;
        if ready {
            return (prometheus, address);
        }
        assert!(
            Instant::now() < deadline,
            "prometheus never got ready: {}",
            std::fs::read_to_string(dir.join("prometheus.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn prometheus_scrapes_the_server_and_its_rates_are_positive() {
    let (Some(prometheus_binary), Some(fio)) = (
        required_tool("prometheus", "prometheus"),
        required_tool("fio", "fio"),
    ) else {
        return;
    };
    let mut served = serve(&["--memory", "64MiB"], None);
    let scratch = tempfile::tempdir().unwrap();
    let (prometheus, address) =
        start_prometheus(&prometheus_binary, scratch.path(), served.address);

    // Six seconds of random 4 KiB reads and writes: six scrapes or so.
    let out = Command::new(fio)
        .current_dir(served.dir.path())
        .args([
            "--name=load",
            "--ioengine=nbd",
            "--uri=nbd+unix:///?socket=cairn-data/cairn.sock",
            "--rw=randrw",
            "--bs=4k",
            "--size=32M",
            "--iodepth=4",
            "--time_based",
            "--runtime=6",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "fio: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    let (up, target) = target_up(address);
    assert_eq!(
        target["scrapeUrl"],
        format!("http://{}/metrics", served.address)
    );

    let increase = until(
        address,
        "increase(cairn_requests_total{job=\"cairn\",export=\"cairn\",op=\"read\"}[1m])",
        |v| v > 0.0,
    );
    let rate = until(
        address,
        "sum(rate(cairn_requests_total{job=\"cairn\",export=\"cairn\"}[1m]))",
        |v| v > 0.0,
    );
    let p99 = until(
        address,
        "histogram_quantile(0.99, sum by (le) \
         (rate(cairn_request_duration_seconds_bucket{job=\"cairn\",op=\"read\"}[1m])))",
        |v| v.is_finite() && v > 0.0,
    );
    assert!(p99 < 10.0, "a 4 KiB read from memory in under 10 s: {p99}");
    // Idle now: a later scrape holds exactly the control socket's count.
    let stats = cairn()
        .current_dir(served.dir.path())
        .args(["stats", "--json"])
        .output()
        .unwrap();
    let stats: Value = serde_json::from_slice(&stats.stdout).unwrap();
    let reads = stats["exports"][0]["io"]["reads"].as_f64().unwrap();
    until(
        address,
        "cairn_requests_total{job=\"cairn\",export=\"cairn\",op=\"read\"}",
        |v| v == reads,
    );
    eprintln!(
        "prometheus: up {up}, increase(reads[1m]) {increase:.0}, rate(requests[1m]) \
         {rate:.1}/s, read p99 {:.1} µs, reads {reads}",
        p99 * 1e6
    );
    drop(prometheus);
    terminate(served.server.take());
}

/// The value of the metric `name` of the file export in `cairn stats
/// --json --socket control`'s snapshot.
fn file_metric(control: &Path, name: &str) -> f64 {
    let out = cairn()
        .args(["stats", "--json", "--socket"])
        .arg(control)
        .output()
        .unwrap();
    assert!(out.status.success());
    let stats: Value = serde_json::from_slice(&out.stdout).unwrap();
    stats["files"][0]["cache"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == name)
        .unwrap_or_else(|| panic!("no {name}: {stats}"))["value"]
        .as_f64()
        .unwrap()
}

#[test]
fn prometheus_scrapes_a_file_gateway_and_its_rates_are_positive() {
    let Some(prometheus_binary) = required_tool("prometheus", "prometheus") else {
        return;
    };
    // Eight files of 600 KiB (three blocks each) in a 2 MiB cache of 256
    // KiB blocks.
    let mut served = serve_files(
        &[
            "--block-size",
            "256KiB",
            "--cache-size",
            "2MiB",
            "--policy",
            "dual",
        ],
        |dir| {
            for i in 0..8u8 {
                std::fs::write(dir.join(format!("f{i}")), vec![i; 600 << 10]).unwrap();
            }
        },
    );
    let scratch = tempfile::tempdir().unwrap();
    let (prometheus, address) =
        start_prometheus(&prometheus_binary, scratch.path(), served.address);

    // Six seconds of GETs: six scrapes or so.
    let started = Instant::now();
    let mut gets = 0u64;
    while started.elapsed() < Duration::from_secs(6) {
        // Every other GET is of f0 (it stays cached), the rest go round
        // the other seven (they do not fit).
        let file = if gets.is_multiple_of(2) {
            0
        } else {
            1 + gets / 2 % 7
        };
        let path = format!("/media/f{file}");
        let request = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        let answer = exchange(served.gateway, request.as_bytes());
        assert_eq!(answer.status, 200);
        assert_eq!(answer.body.len(), 600 << 10);
        gets += 1;
    }

    let (up, _) = target_up(address);
    let increase = until(
        address,
        "increase(cairn_files_requests_total{job=\"cairn\",export=\"media\",\
         method=\"get\",status=\"2xx\"}[1m])",
        |v| v > 0.0,
    );
    let bytes = until(
        address,
        "sum(rate(cairn_files_cache_bytes_total{job=\"cairn\"}[1m])) \
         + sum(rate(cairn_files_backend_read_bytes_total{job=\"cairn\"}[1m]))",
        |v| v > 0.0,
    );
    let ratio = until(
        address,
        "sum(rate(cairn_files_hits_total{job=\"cairn\"}[1m])) / \
         (sum(rate(cairn_files_hits_total{job=\"cairn\"}[1m])) \
         + sum(rate(cairn_files_misses_total{job=\"cairn\"}[1m])))",
        |v| v > 0.0 && v < 1.0,
    );
    until(
        address,
        "cairn_files_resident_bytes{job=\"cairn\",export=\"media\"}",
        |v| v > 0.0 && v <= 2.0 * 1024.0 * 1024.0,
    );
    until(
        address,
        "cairn_files_dual_active_files{job=\"cairn\",export=\"media\"}",
        |v| v >= 1.0,
    );
    // Idle now: a later scrape holds exactly the control socket's counts.
    let hits = file_metric(&served.control, "hits");
    let misses = file_metric(&served.control, "misses");
    assert_eq!(hits + misses, gets as f64 * 3.0, "three blocks a GET");
    until(
        address,
        "cairn_files_hits_total{job=\"cairn\",export=\"media\"}",
        |v| v == hits,
    );
    until(
        address,
        "cairn_files_misses_total{job=\"cairn\",export=\"media\"}",
        |v| v == misses,
    );
    until(
        address,
        "sum(cairn_files_requests_total{job=\"cairn\",export=\"media\"})",
        |v| v == gets as f64,
    );
    eprintln!(
        "prometheus: up {up}, increase(GET 2xx[1m]) {increase:.0}, bytes {bytes:.0}/s, \
         hit ratio {ratio:.2}, hits {hits}, misses {misses}, GETs {gets}"
    );
    drop(prometheus);
    terminate(served.server.take());
}

/// Prometheus at `address` scrapes its one target, Cairn, healthily
/// (`up` 1, no error); `up` and the target as its API describes it.
fn target_up(address: SocketAddr) -> (f64, Value) {
    let up = until(address, "up{job=\"cairn\"}", |v| v == 1.0);
    assert_eq!(up, 1.0);
    let targets = api(address, "/api/v1/targets");
    let target = targets["data"]["activeTargets"][0].clone();
    assert_eq!(target["health"], "up", "{target}");
    assert_eq!(target["lastError"], "", "{target}");
    (up, target)
}
