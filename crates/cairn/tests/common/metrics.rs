//! Shared by the metrics tests: a `cairn serve --metrics` in a directory of
//! its own, a raw HTTP GET, a client load on a thread, and the rule for
//! system tools (Prometheus, Chromium, fio).
#![allow(dead_code, clippy::unwrap_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use cairn_nbd::proto::{CMD_READ, CMD_WRITE};

use super::{Server, cairn, connect, tool};

/// `name` on PATH; if it is missing, `None` after printing why the test
/// skips — unless `CAIRN_REQUIRE_SYSTEM_TOOLS` is set (test.sh sets it),
/// when a missing tool fails the test.
pub fn required_tool(name: &str, package: &str) -> Option<PathBuf> {
    if let Some(path) = tool(name) {
        return Some(path);
    }
    assert!(
        std::env::var_os("CAIRN_REQUIRE_SYSTEM_TOOLS").is_none(),
        "{name} is not installed and CAIRN_REQUIRE_SYSTEM_TOOLS is set: \
         apt-get install {package} (test.sh does)"
    );
    eprintln!("SKIPPED: {name} is not installed (apt-get install {package}; test.sh does)");
    None
}

/// A `cairn serve` with `--metrics` on a free loopback port.
pub struct Metrics {
    pub server: Server,
    pub dir: tempfile::TempDir,
    /// The metrics listener.
    pub address: SocketAddr,
    /// The NBD socket.
    pub socket: PathBuf,
}

/// Starts `cairn serve ARGS --metrics tcp:127.0.0.1:0` in a new directory
/// (with `spec`, if given, written to `spec.toml` there and passed as
/// `--config`); returns once the metrics listener and the NBD socket
/// answer. The port comes from the server's "Metrics:" line on stdout.
pub fn serve(args: &[&str], spec: Option<&str>) -> Metrics {
    let dir = tempfile::tempdir().unwrap();
    let mut command = cairn();
    command.current_dir(dir.path()).arg("serve").args(args);
    if let Some(spec) = spec {
        std::fs::write(dir.path().join("spec.toml"), spec).unwrap();
        command.args(["--config", "spec.toml"]);
    }
    let mut child = command
        .args(["--metrics", "tcp:127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let server = Server(Some(child));
    let address = metrics_address(stdout, |_| {});
    let socket = dir.path().join("cairn-data/cairn.sock");
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::os::unix::net::UnixStream::connect(&socket).is_err() {
        assert!(Instant::now() < deadline, "the NBD socket never answered");
        std::thread::sleep(Duration::from_millis(20));
    }
    Metrics {
        server,
        dir,
        address,
        socket,
    }
}

/// Reads a server's stdout up to its `Metrics: http://ADDRESS/…` line,
/// showing `earlier` each line before it; returns the address and keeps
/// reading the rest on a thread of its own, so the server never blocks on
/// a full pipe.
fn metrics_address(stdout: std::process::ChildStdout, mut earlier: impl FnMut(&str)) -> SocketAddr {
    let mut lines = BufReader::new(stdout).lines();
    let address = loop {
        let line = lines
            .next()
            .expect("cairn serve ended before printing its metrics address")
            .unwrap();
        if let Some(rest) = line.strip_prefix("Metrics: http://") {
            break rest.split('/').next().unwrap().parse().unwrap();
        }
        earlier(&line);
    };
    std::thread::spawn(move || lines.for_each(drop));
    address
}

/// A `cairn serve --files` with `--metrics` and `--control`.
pub struct FilesMetrics {
    pub server: Server,
    /// Holds `files/` (what is served) and `cairn.ctl`.
    pub dir: tempfile::TempDir,
    /// The metrics listener.
    pub address: SocketAddr,
    /// The gateway.
    pub gateway: SocketAddr,
    /// The control socket.
    pub control: PathBuf,
}

/// Starts `cairn serve --files DIR/files --export media ARGS --listen
/// tcp:127.0.0.1:0 --metrics tcp:127.0.0.1:0 --control DIR/cairn.ctl` in a
/// new directory, after `fill` put the files in `DIR/files`; returns once
/// it printed both addresses.
pub fn serve_files(args: &[&str], fill: impl FnOnce(&Path)) -> FilesMetrics {
    let dir = tempfile::tempdir().unwrap();
    let files = dir.path().join("files");
    std::fs::create_dir(&files).unwrap();
    fill(&files);
    let control = dir.path().join("cairn.ctl");
    let control_arg = control.to_str().unwrap();
    let mut all = args.to_vec();
    all.extend(["--control", control_arg]);
    let (server, gateway, address, _) = serve_files_in(dir.path(), &all, false);
    FilesMetrics {
        server,
        dir,
        address,
        gateway,
        control,
    }
}

/// A `cairn serve` with a file export: the server, the gateway's and the
/// metrics' addresses, and its stderr if asked for.
pub type Spawned = (
    Server,
    SocketAddr,
    SocketAddr,
    Option<std::process::ChildStderr>,
);

/// Starts `cairn serve --files files --export media ARGS --listen
/// tcp:127.0.0.1:0 --metrics tcp:127.0.0.1:0` in `dir`; returns once it
/// printed both addresses: the server, the gateway's and the metrics'
/// addresses, and its stderr if `log` (else it goes nowhere).
pub fn serve_files_in(dir: &Path, args: &[&str], log: bool) -> Spawned {
    let mut command = cairn();
    command
        .current_dir(dir)
        .args(["serve", "--files", "files", "--export", "media"])
        .args(args)
        .args(["--listen", "tcp:127.0.0.1:0"]);
    gateway_and_metrics(command, log)
}

/// Spawns `command` (a `cairn serve` with a file export) with `--metrics
/// tcp:127.0.0.1:0`; returns once it printed the gateway's address and then
/// the metrics': the server, both addresses, and its stderr if `log`.
pub fn gateway_and_metrics(command: Command, log: bool) -> Spawned {
    let (server, gateways, metrics, stderr) = gateways_and_metrics(command, log);
    (server, gateways[0], metrics, stderr)
}

/// [`gateway_and_metrics`] for a server with several file exports: every
/// gateway's address, in the order printed.
pub fn gateways_and_metrics(
    mut command: Command,
    log: bool,
) -> (
    Server,
    Vec<SocketAddr>,
    SocketAddr,
    Option<std::process::ChildStderr>,
) {
    let mut child = command
        .args(["--metrics", "tcp:127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(if log { Stdio::piped() } else { Stdio::null() })
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let stderr = child.stderr.take();
    let server = Server(Some(child));
    let mut gateways = Vec::new();
    let address = metrics_address(stdout, |line| {
        if let Some(rest) = line.split(" at http://").nth(1) {
            gateways.push(rest.split('/').next().unwrap().parse().unwrap());
        }
    });
    assert!(
        !gateways.is_empty(),
        "the gateway's address is printed before the metrics'"
    );
    (server, gateways, address, stderr)
}

/// An HTTP answer: status, head (lower-cased header lines), body.
pub struct Answer {
    pub status: u16,
    pub head: String,
    pub body: Vec<u8>,
}

impl Answer {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// Sends `request` as is and reads the answer to the end (the listener
/// closes after each).
pub fn exchange(address: SocketAddr, request: &[u8]) -> Answer {
    let mut stream = TcpStream::connect(address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    stream.write_all(request).unwrap();
    let mut all = Vec::new();
    stream.read_to_end(&mut all).unwrap();
    let end = all
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("an HTTP head")
        + 4;
    let head = String::from_utf8_lossy(&all[..end]).to_ascii_lowercase();
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("a status code");
    Answer {
        status,
        head,
        body: all[end..].to_vec(),
    }
}

/// `GET path`.
pub fn get(address: SocketAddr, path: &str) -> Answer {
    let request = format!("GET {path} HTTP/1.1\r\nHost: {address}\r\nUser-Agent: test\r\n\r\n");
    exchange(address, request.as_bytes())
}

/// A client that writes and reads 4 KiB blocks in a loop on its own
/// connection until stopped (reads of the same 256 blocks again and again,
/// so a cache has hits); counts its requests.
pub struct Load {
    stop: Arc<AtomicBool>,
    pub requests: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Load {
    pub fn start(socket: &Path) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let requests = Arc::new(AtomicU64::new(0));
        let mut client = connect(socket);
        client.handshake();
        let (flag, count) = (Arc::clone(&stop), Arc::clone(&requests));
        let thread = std::thread::spawn(move || {
            let block = vec![0x5au8; 4096];
            let mut n: u64 = 0;
            while !flag.load(Ordering::Relaxed) {
                // A different block each time, among 1024: the first pass
                // writes and misses, later ones hit.
                let offset = (n * 7919 % 1024) * 4096;
                let write = n.is_multiple_of(4);
                if write {
                    client.request(CMD_WRITE, offset + (4 << 20), 4096, &block);
                }
                client.request(CMD_READ, offset % (1 << 20), 4096, &[]);
                count.fetch_add(1 + u64::from(write), Ordering::Relaxed);
                n += 1;
            }
        });
        Self {
            stop,
            requests,
            thread: Some(thread),
        }
    }

    pub fn stop(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            thread.join().unwrap();
        }
        self.requests.load(Ordering::Relaxed)
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// A small stack with every kind of chart data: a DRAM cache (hits, cost
/// groups) over a log disk (dirty data in its NV cache, a cleaner) over a
/// 80 MiB file; its NV region in `nv_dir`.
pub fn cached_log_spec(nv_dir: &Path) -> String {
    super::small_default_spec("64MiB", "80MiB", nv_dir)
}
