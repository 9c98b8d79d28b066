//! `cairn bench files`: papers/000's streaming-server setting over HTTP —
//! Cairn's file gateway against nginx's `proxy_cache` with `slice`, both in
//! front of the same origin slowed like a disk, driven by the same in-repo
//! client (keep-alive connections, every response's bytes checked).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use cairn_files::{
    Backend, DirBackend, FileCache, FileCacheConfig, Gateway, GatewayConfig, HttpBackend,
    HttpBackendConfig, ThrottledBackend,
};
use cairn_store::Throttle;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::output::outln;
use crate::policy_spec;

/// How long both gateways trust what the origin said of an object: nginx's
/// `proxy_cache_valid` and Cairn's `revalidate`.
const NGINX_VALID: std::time::Duration = std::time::Duration::from_hours(1);
pub mod restart;
pub mod table1;

pub const FILES_LONG_ABOUT: &str = "\
papers/000's streaming-server experiment over HTTP (--workload stream, the
default; --workload table1 is papers/001's, below). An origin (Cairn's gateway
over a directory, slowed like a disk by --throttle: a fixed cost per read plus
its length at a bandwidth, one read at a time, and a cache of one block, so
nearly every read reaches the throttle) holds --objects files of --size. In
front of it, on loopback, (a) Cairn's gateway over the origin (`serve --files
http://…`) with a --cache of --block blocks and each policy, and (b) nginx as a
reverse proxy with proxy_cache (max_size the same --cache, on /tmp) and
`slice` of the same --block, proxy_cache_lock on and kept-alive upstream
connections; its configuration is written into a temporary directory. Both
trust an object's size and version for an hour (nginx's proxy_cache_valid,
Cairn's revalidate), so neither asks the origin again within the run.

For each reader count in --readers, reader r reads object r mod --objects in
--request-sized ranged GETs on one kept-alive connection, starting r/--objects
eighths into it (wrapping), for --seconds (read, cold), then the same again
(re-read, warm), then --request-sized ranges at offsets drawn uniformly from
its object, a seed per reader (random, as papers/000's IOzone random read).
Every response's status, length and bytes (one 8-byte word per 4 KiB, which
encodes its object and offset) are checked. The table gives aggregate MB/s
(10^6 B/s), the ratio Cairn/nginx and each side's p99 request latency, and
the most nginx's cache held on disk during the phase (sampled every 100 ms:
its cache manager enforces max_size only when it wakes, at most every 10 s
while under it, so it may hold more than --cache). When it held more, Cairn
runs the phases again with that much cache (whole blocks, rounded down), so
the last two columns compare the two at the same memory. --spill SIZE puts
an exclusive SSD spill that caches SIZE under each Cairn front's DRAM cache
(--spill-inclusive: an inclusive one; --spill-no-promote: one whose hits stay
on the SSD), a fresh file in a temporary directory
each time, read through the page cache as nginx's cache files are
(--spill-direct: O_DIRECT, so Cairn's memory is its DRAM cache alone); with
--cache C --spill C Cairn is configured with nginx's max_size on disk and C
in DRAM beside it. A second table
compares the policies at the largest reader count, with the gateway's block
hit ratio on re-read; --rounds N runs it N times, the order rotated each round,
and prints medians and in how many rounds the first policy re-read at least as
fast as each other one. nginx missing: its columns are skipped (apt-get
install nginx-light).

--workload table1: papers/001's Table I workloads A-D on real HTTP. The
generator, seed, cache, striping and readahead of reproduce/dual.toml, each
size 16x the spec's so that a block is the gateway's smallest (256 KiB
blocks, 1 MiB requests, a 160 MiB cache unless --cache says otherwise, files
of 40-240 MiB, written sparse),
--requests requests per workload. The files are striped over 4 temporary
directories, each slowed by --throttle; for the single cache (lru) and dual
at each of --alphas, a gateway with that policy and a readahead of
--prefetch-stripes x 4 blocks serves the workload's requests as ranged GETs
in trace order on one connection. Prints each one's block hit ratio (the
gateway's counters: blocks not read from a directory on demand), the
simulator's prediction for the same requests with the same readahead
(`cairn reproduce dual`'s model), their difference in percentage points (the
bar: within 1), the mean response time and the readahead's counters. The
other flags are --workload stream's.

--workload restart: the cache across a restart, over the same origin and
objects. Cairn's gateway with an SSD spill (`serve --files … --spill`: a file
of 1.5x the objects plus 64 MiB in a temporary directory, beside a DRAM cache
of --cache with the first of --policies) and nginx (max_size the spill's size)
each read every object once, cold. Then for each reader count, each front is
restarted and its readers re-read as in the stream workload's re-read phase,
for --seconds: Cairn without a spill (a restart leaves it cold), Cairn
reopening its spill (the tier recovered from its checkpoint, the map of
objects read back), and nginx stopped and started on its cache directory.
Prints the three MB/s, spill/nginx, spill/none and the spill's block hit
ratio. --spill-direct opens the spill O_DIRECT: its re-reads then come from
the disk, not from the page cache as nginx's do.";

pub const FILES_EXAMPLES: &str = "\
Examples:
  cairn bench files                         Cairn against nginx, 10-40 readers
  cairn bench files --readers 8 --seconds 1 --policies ons,lru
  cairn bench files --readers 40 --policies ons,lfu,lru --rounds 8
                                            papers/000's claim, ONS against LFU
  cairn bench files --workload table1 --throttle 2ms,100MB/s
                                            papers/001: measured against predicted
  cairn bench files --workload restart --readers 10,40
                                            a restart: the SSD spill against nginx
  cairn bench files --readers 40 --policies ons --cache 64MiB --spill 64MiB
                                            Cairn's DRAM over an exclusive spill";

/// What `cairn bench files` runs.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum FilesWorkload {
    /// papers/000: readers streaming objects, Cairn against nginx.
    Stream,
    /// papers/001: Table I's workloads A-D, measured against the simulator.
    Table1,
    /// The cache across a restart: Cairn with its SSD spill, without it,
    /// and nginx's disk cache, each restarted before it is measured.
    Restart,
}

/// `cairn bench files` flags.
#[derive(clap::Args, Debug)]
pub struct FilesBenchArgs {
    /// What to run: stream (papers/000, Cairn against nginx), table1
    /// (papers/001's workloads A-D, the gateway against the simulator) or
    /// restart (the cache across a restart: Cairn's SSD spill against
    /// nginx's disk cache).
    #[arg(long, value_enum, default_value_t = FilesWorkload::Stream)]
    pub workload: FilesWorkload,

    /// --workload table1: requests of each workload.
    #[arg(long, value_name = "N", default_value_t = 500)]
    requests: u64,

    /// --workload table1: dual's alpha values, each beside the single lru cache.
    #[arg(long, value_name = "A,A,...", value_delimiter = ',', default_values_t = [1.0, 10.0, 20.0, 50.0, 100.0])]
    alphas: Vec<f64>,

    /// --workload table1: readahead, stripes of the 4 directories (0: none).
    #[arg(long, value_name = "N", default_value_t = 2)]
    prefetch_stripes: u64,

    /// Objects (large files) on the origin.
    #[arg(long, value_name = "N", default_value_t = 4)]
    objects: usize,

    /// Size of each object.
    #[arg(long, value_name = "SIZE", default_value = "32MiB")]
    size: String,

    /// Cache capacity of each front (Cairn and nginx); default half of all
    /// objects (--workload table1: 16 × reproduce/dual.toml's, 160MiB).
    #[arg(long, value_name = "SIZE")]
    cache: Option<String>,

    /// Cache block (Cairn) and slice (nginx), a power of two from 256KiB to 4MiB.
    #[arg(long, value_name = "SIZE", default_value = "1MiB")]
    block: String,

    /// Size of each ranged GET.
    #[arg(long, value_name = "SIZE", default_value = "1MiB")]
    request: String,

    /// Reader counts (connections) to run, comma-separated.
    #[arg(long, value_name = "N,N,...", value_delimiter = ',', default_values_t = [10, 20, 40])]
    readers: Vec<usize>,

    /// Seconds per phase.
    #[arg(long, value_name = "S", default_value_t = 2.0)]
    seconds: f64,

    /// The origin's speed: `OP,BANDWIDTH` (`2ms,200MiB/s`), or `none`.
    #[arg(long, value_name = "OP,BW", default_value = "2ms,200MiB/s")]
    throttle: String,

    /// Cairn policies: the first runs at every reader count, all on re-read at the largest.
    #[arg(long, value_name = "P,P,...", value_delimiter = ',', default_values = ["ons", "lru", "lfu"])]
    policies: Vec<String>,

    /// The nginx binary.
    #[arg(long, value_name = "PATH", default_value = "nginx")]
    nginx: PathBuf,

    /// Rounds of the policy table (its order rotated each round); it prints
    /// medians and how often the first policy re-read faster than each other.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100))]
    rounds: u32,

    /// With --workload restart, or --spill: open the spill with `O_DIRECT`
    /// (`serve --spill-direct`), so that its reads come from the disk rather
    /// than the page cache (and Cairn's memory is its DRAM cache alone).
    #[arg(long)]
    spill_direct: bool,

    /// With --workload stream: give Cairn's front, beside its DRAM --cache, an
    /// exclusive SSD spill (`serve --spill-exclusive`) that caches SIZE, in a
    /// fresh file in a temporary directory for each front (read through the
    /// page cache, as nginx's cache files are). The @held columns are then
    /// not run.
    #[arg(long, value_name = "SIZE")]
    spill: Option<String>,

    /// With --spill: an inclusive spill (`serve --spill` alone) instead.
    #[arg(long, requires = "spill")]
    spill_inclusive: bool,

    /// With --spill: an exclusive spill that serves its hits in place
    /// (`serve --spill-exclusive --spill-no-promote`).
    #[arg(long, requires = "spill", conflicts_with = "spill_inclusive")]
    spill_no_promote: bool,
}

/// Parses a throttle `OP,BANDWIDTH` — `2ms,200MiB/s`, `500us,1GiB/s` — or
/// `none`. One function so every flag that takes a throttle reads it alike.
pub fn parse_throttle(text: &str) -> Result<Option<Throttle>> {
    if text == "none" {
        return Ok(None);
    }
    let (op, bandwidth) = text
        .split_once(',')
        .with_context(|| format!("throttle {text:?}: OP,BANDWIDTH as in 2ms,200MiB/s"))?;
    let op_us = if let Some(ms) = op.strip_suffix("ms") {
        ms.trim().parse::<f64>().map(|v| v * 1000.0)
    } else if let Some(us) = op.strip_suffix("us") {
        us.trim().parse::<f64>()
    } else {
        bail!("throttle {text:?}: the operation cost needs a unit, us or ms")
    }
    .with_context(|| format!("throttle {text:?}: operation cost {op:?}"))?;
    let per_second = bandwidth
        .strip_suffix("/s")
        .with_context(|| format!("throttle {text:?}: the bandwidth is SIZE/s"))?;
    let bytes = cairn_sim::parse_bytes(per_second)
        .with_context(|| format!("throttle {text:?}: bandwidth {per_second:?}"))?;
    if !(op_us.is_finite() && op_us >= 0.0) || bytes == 0 {
        bail!("throttle {text:?}: the cost must be ≥ 0 and the bandwidth > 0");
    }
    Ok(Some(Throttle {
        op_us,
        seek_us: 0.0,
        bandwidth_mb_s: bytes as f64 / 1e6,
    }))
}

/// The word at `offset` (a multiple of 8) of object `object`.
fn word(object: usize, offset: u64) -> u64 {
    ((object as u64) << 48) | (offset / 8)
}

/// Fills `buf` with object `object`'s bytes from `offset` (a multiple of 8).
fn fill_words(buf: &mut [u8], object: usize, offset: u64) {
    for (i, w) in buf.chunks_exact_mut(8).enumerate() {
        w.copy_from_slice(&word(object, offset + 8 * i as u64).to_le_bytes());
    }
}

/// A gateway on a loopback port in this process; stopped on drop.
struct InProcess {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    stats: Box<dyn Fn() -> cairn_files::FileCacheStats + Send>,
}

impl Drop for InProcess {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn serve<B: Backend + 'static>(
    backend: B,
    config: &FileCacheConfig,
    bucket: &str,
) -> Result<InProcess> {
    let cache = Arc::new(FileCache::new(backend, config).context("the file cache")?);
    let mut gateway_config = GatewayConfig::new(bucket);
    gateway_config.connections_max = 1024;
    let gateway = Gateway::bind("127.0.0.1:0", Arc::clone(&cache), gateway_config)?;
    let addr = gateway.local_addr()?;
    let stop = gateway.stop_flag();
    let thread = std::thread::spawn(move || {
        if let Err(e) = gateway.serve() {
            tracing::error!("gateway: {e}");
        }
    });
    Ok(InProcess {
        addr,
        stop,
        thread: Some(thread),
        stats: Box::new(move || cache.stats()),
    })
}

/// nginx as a caching reverse proxy; stopped on drop.
struct Nginx {
    child: std::process::Child,
    addr: SocketAddr,
    dir: tempfile::TempDir,
}

impl Nginx {
    /// SIGTERM to the master, which stops its workers too; waits for it.
    fn stop(&mut self) {
        let _ = std::process::Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let _ = self.child.wait();
    }

    /// Stops nginx and starts it again on the same directory, the same
    /// cache and port; returns once it listens.
    fn restart(&mut self, nginx: &Path) -> Result<()> {
        self.stop();
        self.child = launch_nginx(nginx, self.dir.path())?;
        self.wait_listening()
    }

    fn wait_listening(&self) -> Result<()> {
        for _ in 0..500 {
            if TcpStream::connect(self.addr).is_ok() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        bail!(
            "nginx did not listen on {}: {}",
            self.addr,
            std::fs::read_to_string(self.dir.path().join("error.log")).unwrap_or_default()
        )
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        self.stop();
    }
}

/// nginx on the configuration in `dir`.
fn launch_nginx(nginx: &Path, dir: &Path) -> Result<std::process::Child> {
    std::process::Command::new(nginx)
        .arg("-p")
        .arg(dir)
        .arg("-e")
        .arg(dir.join("error.log"))
        .arg("-c")
        .arg(dir.join("nginx.conf"))
        .stdin(std::process::Stdio::null())
        .spawn()
        .with_context(|| format!("starting {}", nginx.display()))
}

fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn start_nginx(nginx: &Path, origin: SocketAddr, cache: u64, block: u64) -> Result<Nginx> {
    let dir = tempfile::Builder::new()
        .prefix("cairn-bench-nginx")
        .tempdir()?;
    let port = free_port()?;
    let d = dir.path().display();
    let valid = NGINX_VALID.as_secs();
    let config = format!(
        "daemon off; master_process on; worker_processes 2; pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{ worker_connections 1024; }}
http {{
  access_log off;
  keepalive_requests 1000000; keepalive_timeout 300s;
  client_body_temp_path {d}/body; proxy_temp_path {d}/proxy;
  fastcgi_temp_path {d}/fcgi; uwsgi_temp_path {d}/uwsgi; scgi_temp_path {d}/scgi;
  proxy_cache_path {d}/cache levels=1:2 keys_zone=files:16m max_size={cache} inactive=1h use_temp_path=off;
  upstream origin {{ server {origin}; keepalive 64; }}
  server {{
    listen 127.0.0.1:{port} backlog=1024;
    location / {{
      slice {block};
      proxy_cache files;
      proxy_cache_key $uri$slice_range;
      proxy_set_header Range $slice_range;
      proxy_cache_valid 200 206 {valid}s;
      proxy_cache_lock on;
      proxy_cache_lock_timeout 60s;
      proxy_http_version 1.1;
      proxy_set_header Connection \"\";
      proxy_pass http://origin;
    }}
  }}
}}
"
    );
    std::fs::write(dir.path().join("nginx.conf"), config)?;
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse()?;
    let server = Nginx {
        child: launch_nginx(nginx, dir.path())?,
        addr,
        dir,
    };
    server.wait_listening()?;
    Ok(server)
}

/// Bytes in the files below `dir`.
fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir).map_or(0, |entries| {
        entries
            .filter_map(Result::ok)
            .map(|e| match e.file_type() {
                Ok(t) if t.is_dir() => dir_bytes(&e.path()),
                Ok(_) => e.metadata().map_or(0, |m| m.len()),
                Err(_) => 0,
            })
            .sum()
    })
}

/// What one run of N readers measured.
struct Measured {
    bytes: u64,
    seconds: f64,
    /// Request latencies, microseconds, sorted.
    latencies: Vec<u32>,
}

impl Measured {
    fn mb_s(&self) -> f64 {
        self.bytes as f64 / self.seconds / 1e6
    }
    fn p99_ms(&self) -> f64 {
        let n = self.latencies.len();
        if n == 0 {
            return 0.0;
        }
        f64::from(self.latencies[(n * 99 / 100).min(n - 1)]) / 1000.0
    }
}

struct Load {
    objects: usize,
    size: u64,
    request: u64,
    seconds: f64,
}

/// Where each reader's next request starts.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Pattern {
    /// On from its start, wrapping at the object's end.
    Sequential,
    /// A request-aligned offset drawn uniformly (a seed per reader).
    Random,
}

/// The phases of a front, in order, with their patterns.
const PHASES: [(&str, Pattern); 3] = [
    ("read", Pattern::Sequential),
    ("re-read", Pattern::Sequential),
    ("random", Pattern::Random),
];

/// One GET of `len` bytes at `offset` on `stream`; checks status, length and
/// (with `object`, the words of [`word`]) bytes. Returns whether the server closes the connection after it
/// (`Connection: close`, as nginx does after `keepalive_requests`).
fn get(
    stream: &mut TcpStream,
    path: &str,
    object: Option<usize>,
    offset: u64,
    len: u64,
    buf: &mut [u8],
    head: &mut Vec<u8>,
) -> Result<bool> {
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: bench\r\nRange: bytes={offset}-{}\r\n\r\n",
        offset + len - 1
    )?;
    head.clear();
    let mut chunk = [0u8; 4096];
    let (status, content_length, close, head_len) = loop {
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            bail!("{path}: the server closed the connection");
        }
        head.extend_from_slice(&chunk[..n]);
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut response = httparse::Response::new(&mut headers);
        if let httparse::Status::Complete(len) = response.parse(head)? {
            let length = response
                .headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                .and_then(|h| {
                    std::str::from_utf8(h.value)
                        .ok()?
                        .trim()
                        .parse::<u64>()
                        .ok()
                });
            let close = response.headers.iter().any(|h| {
                h.name.eq_ignore_ascii_case("connection") && h.value.eq_ignore_ascii_case(b"close")
            });
            break (response.code.unwrap_or(0), length, close, len);
        }
        if head.len() > 16 << 10 {
            bail!("{path}: an answer head over 16 KiB");
        }
    };
    if status != 206 || content_length != Some(len) {
        bail!("{path} bytes {offset}+{len}: status {status}, length {content_length:?}");
    }
    let body = &mut buf[..len as usize];
    let already = (head.len() - head_len).min(body.len());
    body[..already].copy_from_slice(&head[head_len..head_len + already]);
    stream.read_exact(&mut body[already..])?;
    let Some(object) = object else {
        return Ok(close);
    };
    let mut at = 0;
    while at + 8 <= body.len() {
        let got = u64::from_le_bytes(body[at..at + 8].try_into().expect("8 bytes"));
        let want = word(object, offset + at as u64);
        if got != want {
            bail!(
                "{path}: wrong bytes at {}: {got:#x}, expected {want:#x}",
                offset + at as u64
            );
        }
        at += 4096;
    }
    Ok(close)
}

/// A client connection to a front: no Nagle delay, a minute to answer.
fn connect(addr: SocketAddr) -> Result<TcpStream> {
    let stream = TcpStream::connect(addr)?;
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(Duration::from_mins(1)))?;
    Ok(stream)
}

/// N readers for `load.seconds` from their starts; returns what they read.
fn run_readers(
    addr: SocketAddr,
    prefix: &str,
    readers: usize,
    load: &Load,
    pattern: Pattern,
) -> Result<Measured> {
    let requests = load.size / load.request;
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(load.seconds);
    let results: Vec<Result<(u64, Vec<u32>)>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..readers)
            .map(|r| {
                scope.spawn(move || -> Result<(u64, Vec<u32>)> {
                    let object = r % load.objects;
                    let path = format!("{prefix}/obj{object}");
                    let first = (r / load.objects) as u64 * requests / 8 % requests;
                    let mut stream = connect(addr)?;
                    let mut buf = vec![0u8; load.request as usize];
                    let mut head = Vec::with_capacity(16 << 10);
                    let mut latencies = Vec::new();
                    let mut bytes = 0;
                    let mut i = 0;
                    let mut random = ChaCha8Rng::seed_from_u64(r as u64);
                    while Instant::now() < deadline {
                        let offset = match pattern {
                            Pattern::Sequential => (first + i) % requests,
                            Pattern::Random => random.random_range(0..requests),
                        } * load.request;
                        let t = Instant::now();
                        let closes = get(
                            &mut stream,
                            &path,
                            Some(object),
                            offset,
                            load.request,
                            &mut buf,
                            &mut head,
                        )?;
                        if closes {
                            // The front ends the connection after this answer
                            // (a keep-alive limit): a new one, timed with it.
                            stream = connect(addr)?;
                        }
                        latencies.push(u32::try_from(t.elapsed().as_micros()).unwrap_or(u32::MAX));
                        bytes += load.request;
                        i += 1;
                    }
                    Ok((bytes, latencies))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("a reader panicked")))
            })
            .collect()
    });
    let seconds = start.elapsed().as_secs_f64();
    let mut measured = Measured {
        bytes: 0,
        seconds,
        latencies: Vec::new(),
    };
    for result in results {
        let (bytes, latencies) = result?;
        measured.bytes += bytes;
        measured.latencies.extend(latencies);
    }
    measured.latencies.sort_unstable();
    Ok(measured)
}

/// Every phase of [`PHASES`] in turn through a fresh front at `addr`; with
/// `held`, also the most it gives during each phase, sampled every 100 ms.
fn phases(
    addr: SocketAddr,
    prefix: &str,
    readers: usize,
    load: &Load,
    held: Option<&(dyn Fn() -> u64 + Sync)>,
) -> Result<Vec<(Measured, u64)>> {
    PHASES
        .iter()
        .map(|&(_, pattern)| {
            let Some(held) = held else {
                return Ok((run_readers(addr, prefix, readers, load, pattern)?, 0));
            };
            let done = AtomicBool::new(false);
            std::thread::scope(|scope| {
                let sampler = scope.spawn(|| {
                    let mut most = held();
                    while !done.load(Ordering::Relaxed) {
                        std::thread::sleep(Duration::from_millis(100));
                        most = most.max(held());
                    }
                    most
                });
                let measured = run_readers(addr, prefix, readers, load, pattern);
                done.store(true, Ordering::Relaxed);
                let most = sampler.join().unwrap_or(0);
                Ok((measured?, most))
            })
        })
        .collect()
}

/// Cairn's phases against the front at `addr`, each with the bytes the
/// origin served in it (what the front's levels did not hold).
fn cairn_phases(p: &Prepared, addr: SocketAddr, readers: usize) -> Result<Vec<(Measured, u64)>> {
    let served = || {
        let s = (p.origin.stats)();
        s.bytes_from_cache + s.bytes_from_backend
    };
    PHASES
        .iter()
        .map(|&(_, pattern)| {
            let before = served();
            let measured = run_readers(addr, "/files", readers, &p.load, pattern)?;
            Ok((measured, served() - before))
        })
        .collect()
}

/// What the streaming and restart workloads share: the objects, the
/// throttled origin serving them, the load, and the fronts' settings.
struct Prepared {
    size: u64,
    block: u64,
    request: u64,
    cache: u64,
    policies: Vec<cairn_policy::PolicyConfig>,
    load: Load,
    /// Keeps the objects' directory.
    _data: tempfile::TempDir,
    origin: InProcess,
    url: String,
    nginx_found: bool,
    /// --spill.
    spill: Option<BenchSpill>,
}

/// --spill: the spill under each Cairn front.
struct BenchSpill {
    /// Its capacity, bytes.
    bytes: u64,
    /// Not --spill-inclusive.
    exclusive: bool,
    /// Not --spill-no-promote.
    promote: bool,
    /// --spill-direct.
    direct: bool,
    /// Where the fronts' spill files go.
    dir: tempfile::TempDir,
}

impl Prepared {
    /// A front's cache settings: `policy`, `cache` bytes.
    fn front_config(&self, policy: &cairn_policy::PolicyConfig, cache: u64) -> FileCacheConfig {
        front_config(self.block, policy, cache)
    }

    /// A client of the origin, as Cairn's front reads it.
    fn origin_backend(&self) -> Result<HttpBackend> {
        HttpBackend::new(
            &self.url,
            HttpBackendConfig {
                connections_max: 64,
                ..HttpBackendConfig::default()
            },
        )
        .map_err(anyhow::Error::msg)
    }

    /// Cairn's front over the origin with `policy` and `cache` bytes (and
    /// a fresh spill, with --spill).
    fn cairn_front(&self, policy: &cairn_policy::PolicyConfig, cache: u64) -> Result<InProcess> {
        static FRONTS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let config = self.front_config(policy, cache);
        let Some(under) = &self.spill else {
            return serve(self.origin_backend()?, &config, "files");
        };
        let n = FRONTS.fetch_add(1, Ordering::Relaxed);
        let path = under.dir.path().join(format!("spill{n}.img"));
        let mut spill = cairn_files::SpillConfig::new(&path, self.block);
        spill.size = Some(spill.device_bytes_for(under.bytes));
        spill.exclusive = under.exclusive;
        spill.promote = under.promote;
        spill.direct = under.direct;
        let origin: Arc<dyn Backend> = Arc::new(self.origin_backend()?);
        let spilled = cairn_files::SpillBackend::open(origin, &spill).context("--spill")?;
        serve(Arc::new(spilled), &config, "files")
    }
}

/// A front's cache: `block`-byte blocks, `cache` bytes, `policy`.
fn front_config(block: u64, policy: &cairn_policy::PolicyConfig, cache: u64) -> FileCacheConfig {
    FileCacheConfig {
        block_size_bytes: block,
        capacity_bytes: cache,
        policy: policy.clone(),
        shards: 0,
        // What nginx's `proxy_cache_valid` grants it: no revalidation with
        // the origin within the run.
        revalidate: NGINX_VALID,
        ..FileCacheConfig::default()
    }
}

/// Checks the flags, writes the objects and starts the origin.
fn prepare(args: &FilesBenchArgs) -> Result<Prepared> {
    let bytes = |flag: &str, text: &str| {
        cairn_sim::parse_bytes(text).with_context(|| format!("--{flag} {text:?}"))
    };
    let size = bytes("size", &args.size)?;
    let block = bytes("block", &args.block)?;
    let request = bytes("request", &args.request)?;
    if !(1..=64).contains(&args.objects) {
        bail!("--objects must be between 1 and 64");
    }
    let cache = match &args.cache {
        Some(text) => bytes("cache", text)?,
        None => size * args.objects as u64 / 2,
    };
    if request == 0 || request > 64 << 20 || size < 8 * request || size % request != 0 {
        bail!("--size must be a multiple of --request (at most 64MiB) and at least 8 requests");
    }
    if size % 8 != 0 || request % 8 != 0 {
        bail!("--size and --request must be multiples of 8 bytes");
    }
    if args.readers.is_empty() || args.readers.iter().any(|&n| n == 0 || n > 512) {
        bail!("--readers must list counts between 1 and 512");
    }
    if !(args.seconds > 0.0 && args.seconds <= 600.0) {
        bail!("--seconds must be in (0, 600]");
    }
    if args.policies.is_empty() {
        bail!("--policies must name at least one policy");
    }
    let throttle = parse_throttle(&args.throttle).context("--throttle")?;
    let spill = match &args.spill {
        Some(text) => {
            if args.workload != FilesWorkload::Stream {
                bail!("--spill is for --workload stream (restart makes its own spill)");
            }
            let dir = tempfile::Builder::new()
                .prefix("cairn-bench-spill")
                .tempdir()?;
            Some(BenchSpill {
                bytes: bytes("spill", text)?,
                exclusive: !args.spill_inclusive,
                promote: !args.spill_no_promote,
                direct: args.spill_direct,
                dir,
            })
        }
        None => None,
    };
    let policies = args
        .policies
        .iter()
        .map(|p| policy_spec::parse(p).with_context(|| format!("--policies {p}")))
        .collect::<Result<Vec<_>>>()?;
    front_config(block, &policies[0], cache)
        .validate()
        .context("--block/--cache")?;

    // The objects, each word naming its object and offset.
    let data = tempfile::Builder::new()
        .prefix("cairn-bench-files")
        .tempdir()?;
    let mut chunk = vec![0u8; 1 << 20];
    for object in 0..args.objects {
        let mut file = std::fs::File::create(data.path().join(format!("obj{object}")))?;
        let mut offset = 0u64;
        while offset < size {
            let len = (size - offset).min(chunk.len() as u64) as usize;
            fill_words(&mut chunk[..len], object, offset);
            file.write_all(&chunk[..len])?;
            offset += len as u64;
        }
    }
    // The origin: a one-block cache over the throttled directory.
    let dir = DirBackend::open(data.path())?;
    let origin_config = FileCacheConfig {
        block_size_bytes: block,
        capacity_bytes: block,
        shards: 1,
        ..FileCacheConfig::default()
    };
    let origin = match throttle {
        Some(throttle) => serve(
            ThrottledBackend::new(dir, throttle),
            &origin_config,
            "origin",
        )?,
        None => serve(dir, &origin_config, "origin")?,
    };
    let url = format!("http://{}/origin", origin.addr);
    let nginx_found = std::process::Command::new(&args.nginx)
        .arg("-v")
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !nginx_found {
        eprintln!(
            "cairn bench files: {} not found (apt-get install nginx-light): Cairn only",
            args.nginx.display()
        );
    }
    Ok(Prepared {
        size,
        block,
        request,
        cache,
        policies,
        load: Load {
            objects: args.objects,
            size,
            request,
            seconds: args.seconds,
        },
        _data: data,
        origin,
        url,
        nginx_found,
        spill,
    })
}

/// Run `cairn bench files` (the streaming workload; `bench/mod.rs` sends
/// `--workload table1` to [`table1::run`] and `--workload restart` to
/// [`restart::run`], so those modules may use this one's helpers without an
/// import circle).
pub fn run(args: &FilesBenchArgs) -> Result<()> {
    let p = prepare(args)?;
    let Prepared {
        size,
        block,
        request,
        cache,
        ref policies,
        ref load,
        nginx_found,
        ..
    } = p;
    let cairn_front =
        |policy: &cairn_policy::PolicyConfig, cache: u64| p.cairn_front(policy, cache);
    let origin = &p.origin;
    outln!(
        "{} objects of {size} B on an origin at {} (block {block} B); fronts' caches {cache} B{}; \
         {request} B ranged GETs, {} s per phase",
        args.objects,
        args.throttle,
        match &p.spill {
            Some(spill) => format!(
                " (Cairn's DRAM, over an {} spill of {} B{})",
                match (spill.exclusive, spill.promote) {
                    (true, true) => "exclusive",
                    (true, false) => "exclusive, in-place",
                    (false, _) => "inclusive",
                },
                spill.bytes,
                if spill.direct { ", O_DIRECT" } else { "" }
            ),
            None => String::new(),
        },
        args.seconds
    )?;
    outln!(
        "{:>7}  {:<7}  {:>12}  {:>12}  {:>11}  {:>13}  {:>13}  {:>15}  {:>15}  {:>12}",
        "readers",
        "phase",
        "cairn MB/s",
        "nginx MB/s",
        "cairn/nginx",
        "cairn p99 ms",
        "nginx p99 ms",
        "nginx held MiB",
        "cairn@held MB/s",
        "@held/nginx"
    )?;
    for &readers in &args.readers {
        let front = cairn_front(&policies[0], cache)?;
        let ours = cairn_phases(&p, front.addr, readers)?;
        drop(front);
        let theirs = if nginx_found {
            let nginx = start_nginx(&args.nginx, origin.addr, cache, block)?;
            let on_disk = nginx.dir.path().join("cache");
            let held = move || dir_bytes(&on_disk);
            Some(phases(nginx.addr, "/origin", readers, load, Some(&held))?)
        } else {
            None
        };
        // nginx's max_size is enforced only when its cache manager wakes, so
        // it may have held more than --cache: Cairn again with the memory
        // nginx held at most (whole blocks, rounded down).
        let held_max = theirs
            .iter()
            .flatten()
            .map(|(_, held)| *held)
            .max()
            .unwrap_or(0);
        let matched = held_max / block * block;
        let at_held = if matched > cache && p.spill.is_none() {
            let front = cairn_front(&policies[0], matched)?;
            Some(phases(front.addr, "/files", readers, load, None)?)
        } else {
            None
        };
        for (phase, (name, _)) in PHASES.iter().enumerate() {
            let ours = &ours[phase].0;
            let (their_mb, ratio, their_p99, held) = match &theirs {
                Some(t) => {
                    let (t, held) = &t[phase];
                    (
                        format!("{:.1}", t.mb_s()),
                        format!("{:.2}", ours.mb_s() / t.mb_s()),
                        format!("{:.1}", t.p99_ms()),
                        format!("{}", held >> 20),
                    )
                }
                None => ("-".into(), "-".into(), "-".into(), "-".into()),
            };
            let (matched_mb, matched_ratio) = match (&at_held, &theirs) {
                (Some(m), Some(t)) => (
                    format!("{:.1}", m[phase].0.mb_s()),
                    format!("{:.2}", m[phase].0.mb_s() / t[phase].0.mb_s()),
                ),
                _ => ("-".into(), "-".into()),
            };
            outln!(
                "{readers:>7}  {name:<7}  {:>12.1}  {their_mb:>12}  {ratio:>11}  {:>13.1}  {their_p99:>13}  {held:>15}  {matched_mb:>15}  {matched_ratio:>12}",
                ours.mb_s(),
                ours.p99_ms(),
            )?;
        }
        let origin: Vec<String> = ours
            .iter()
            .map(|(_, bytes)| format!("{:.1}", *bytes as f64 / f64::from(1 << 20)))
            .collect();
        outln!(
            "{readers:>7}  MiB the origin served Cairn's front: read {}, re-read {}, random {}",
            origin[0],
            origin[1],
            origin[2]
        )?;
    }
    let readers = *args.readers.iter().max().expect("not empty");
    policy_table(args, &p, readers)
}

/// One policy's phases at the policy table's reader count.
#[derive(Clone, Copy)]
struct PolicyRound {
    read: f64,
    reread: f64,
    /// Block hit ratio of the re-read phase, 0..=1.
    reread_hits: f64,
    random: f64,
}

/// The policy table: every policy at `readers`, `--rounds` times in an order
/// rotated each round (so that none always runs first), medians printed,
/// then how often the first policy re-read faster than each other one.
fn policy_table(args: &FilesBenchArgs, p: &Prepared, readers: usize) -> Result<()> {
    let rounds = args.rounds as usize;
    let n = p.policies.len();
    outln!(
        "\nCairn's policies at {readers} readers ({}cairn MB/s; the first row's policy above is {})",
        if rounds > 1 {
            format!("medians of {rounds} rounds; ")
        } else {
            String::new()
        },
        args.policies[0]
    )?;
    let mut results: Vec<Vec<PolicyRound>> = vec![Vec::with_capacity(rounds); n];
    for round in 0..rounds {
        for k in 0..n {
            let i = (k + round) % n;
            let front = p.cairn_front(&p.policies[i], p.cache)?;
            let load = &p.load;
            let read = run_readers(front.addr, "/files", readers, load, Pattern::Sequential)?;
            let before = (front.stats)();
            let reread = run_readers(front.addr, "/files", readers, load, Pattern::Sequential)?;
            let after = (front.stats)();
            let random = run_readers(front.addr, "/files", readers, load, Pattern::Random)?;
            let hits = (after.hits + after.coalesced) - (before.hits + before.coalesced);
            let all = hits + (after.misses - before.misses);
            results[i].push(PolicyRound {
                read: read.mb_s(),
                reread: reread.mb_s(),
                reread_hits: hits as f64 / all.max(1) as f64,
                random: random.mb_s(),
            });
        }
    }
    outln!(
        "{:<24}  {:>10}  {:>10}  {:>13}  {:>10}",
        "policy",
        "read",
        "re-read",
        "re-read hits",
        "random"
    )?;
    let med = |i: usize, f: fn(&PolicyRound) -> f64| {
        super::nbd::median(results[i].iter().map(f).collect()).unwrap_or(0.0)
    };
    for (i, name) in args.policies.iter().enumerate() {
        outln!(
            "{name:<24}  {:>10.1}  {:>10.1}  {:>12.1}%  {:>10.1}",
            med(i, |r| r.read),
            med(i, |r| r.reread),
            100.0 * med(i, |r| r.reread_hits),
            med(i, |r| r.random),
        )?;
    }
    for (i, name) in args.policies.iter().enumerate().skip(1) {
        let pairs = results[0].iter().zip(&results[i]);
        let ahead = pairs.clone().filter(|(a, b)| a.reread >= b.reread).count();
        let mb = super::nbd::median(pairs.clone().map(|(a, b)| a.reread - b.reread).collect());
        let points = super::nbd::median(
            pairs
                .map(|(a, b)| 100.0 * (a.reread_hits - b.reread_hits))
                .collect(),
        );
        outln!(
            "re-read, {} against {name}: at or ahead in {ahead} of {rounds} rounds, median difference {:+.1} MB/s and {:+.1} points of block hits",
            args.policies[0],
            mb.unwrap_or(0.0),
            points.unwrap_or(0.0)
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A front that ends every connection after its second answer
    /// (`Connection: close`, as nginx after `keepalive_requests`): the
    /// readers open a new one and go on, rather than failing on the next
    /// request. Returns how many connections it accepted.
    fn closing_front(listener: &TcpListener, stop: &AtomicBool) -> usize {
        listener.set_nonblocking(true).unwrap();
        let mut connections = 0;
        while !stop.load(Ordering::Relaxed) {
            let Ok((mut stream, _)) = listener.accept() else {
                std::thread::sleep(Duration::from_millis(1));
                continue;
            };
            stream.set_nonblocking(false).unwrap();
            connections += 1;
            let mut head = Vec::new();
            for answer in 0..2 {
                head.clear();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    if stream.read(&mut byte).unwrap_or(0) == 0 {
                        break;
                    }
                    head.push(byte[0]);
                }
                let text = String::from_utf8_lossy(&head);
                let Some(range) = text.split("bytes=").nth(1) else {
                    break;
                };
                let (from, to) = range.split_once('-').unwrap();
                let from: u64 = from.parse().unwrap();
                let to: u64 = to.split('\r').next().unwrap().parse().unwrap();
                let mut body = vec![0u8; (to - from + 1) as usize];
                fill_words(&mut body, 0, from);
                let close = if answer == 1 {
                    "Connection: close\r\n"
                } else {
                    ""
                };
                let head = format!(
                    "HTTP/1.1 206 Partial Content\r\nContent-Length: {}\r\n{close}\r\n",
                    body.len()
                );
                if stream.write_all(head.as_bytes()).is_err() || stream.write_all(&body).is_err() {
                    break;
                }
            }
        }
        connections
    }

    #[test]
    fn readers_reconnect_when_the_front_closes_after_an_answer() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = AtomicBool::new(false);
        let load = Load {
            objects: 1,
            size: 64 << 10,
            request: 8 << 10,
            seconds: 0.3,
        };
        let (measured, connections) = std::thread::scope(|scope| {
            let front = scope.spawn(|| closing_front(&listener, &stop));
            let measured = run_readers(addr, "/files", 1, &load, Pattern::Sequential);
            stop.store(true, Ordering::Relaxed);
            (measured, front.join().unwrap())
        });
        let measured = measured.expect("the reader went on over new connections");
        let answers = measured.bytes / load.request;
        assert!(answers >= 4, "{answers} answers");
        assert!(
            connections as u64 >= answers / 2,
            "{connections} connections, {answers} answers"
        );
    }

    #[test]
    fn throttles_parse_or_say_why_not() {
        let t = parse_throttle("2ms,200MiB/s")
            .expect("parses")
            .expect("some");
        assert!((t.op_us - 2000.0).abs() < 1e-9);
        assert!((t.bandwidth_mb_s - 209.715_2).abs() < 1e-6);
        let t = parse_throttle("500us,1GB/s")
            .expect("parses")
            .expect("some");
        assert!((t.op_us - 500.0).abs() < 1e-9);
        assert!(parse_throttle("none").expect("parses").is_none());
        for bad in [
            "2,200MiB/s",
            "2ms",
            "2ms,200MiB",
            "-1ms,1MiB/s",
            "2ms,0B/s",
            "xms,1MiB/s",
        ] {
            assert!(parse_throttle(bad).is_err(), "{bad}");
        }
    }
}
