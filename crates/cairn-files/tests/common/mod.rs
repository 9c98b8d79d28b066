//! A gateway on a loopback port for the integration tests, stopped on drop.

#![allow(dead_code)] // each test binary uses a part

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use cairn_files::http::GatewayCounters;
use cairn_files::{Backend, FileCache, FileCacheConfig, Gateway, GatewayConfig};

pub const BUCKET: &str = "media";

pub struct Running<B: Backend + 'static> {
    pub addr: SocketAddr,
    pub cache: Arc<FileCache<B>>,
    pub counters: Arc<GatewayCounters>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl<B: Backend + 'static> Drop for Running<B> {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            thread.join().expect("the accept loop ends");
        }
    }
}

/// Serves `backend` with 256 KiB blocks, 8 MiB, ONS, and `config`'s limits.
pub fn start<B: Backend + 'static>(
    backend: B,
    adjust: impl FnOnce(&mut GatewayConfig),
) -> Running<B> {
    let cache = FileCache::new(
        backend,
        &FileCacheConfig {
            block_size_bytes: 256 << 10,
            capacity_bytes: 8 << 20,
            ..FileCacheConfig::default()
        },
    )
    .expect("cache");
    start_cache(cache, adjust)
}

/// Serves `cache` with `config`'s limits.
pub fn start_cache<B: Backend + 'static>(
    cache: FileCache<B>,
    adjust: impl FnOnce(&mut GatewayConfig),
) -> Running<B> {
    let cache = Arc::new(cache);
    let mut config = GatewayConfig::new(BUCKET);
    adjust(&mut config);
    let gateway = Gateway::bind("127.0.0.1:0", Arc::clone(&cache), config).expect("bind");
    let addr = gateway.local_addr().expect("addr");
    let stop = gateway.stop_flag();
    let counters = gateway.counters();
    let thread = std::thread::spawn(move || gateway.serve().expect("serve"));
    Running {
        addr,
        cache,
        counters,
        stop,
        thread: Some(thread),
    }
}

/// Bytes whose every 256 KiB block differs.
pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 13) as u8)
        .collect()
}

/// Sends `request` on a new connection and reads until the server closes
/// it (or 5 s pass).
pub fn exchange(addr: SocketAddr, request: &[u8]) -> Vec<u8> {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    stream.write_all(request).expect("send");
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    answer
}

/// The status code of the first response in `answer`.
pub fn status(answer: &[u8]) -> u16 {
    std::str::from_utf8(&answer[..answer.len().min(12)])
        .ok()
        .and_then(|line| line.get(9..12))
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {:?}", String::from_utf8_lossy(answer)))
}

/// `name` on PATH; if it is missing, `None` after printing why the test
/// skips — unless `CAIRN_REQUIRE_SYSTEM_TOOLS` is set (test.sh sets it),
/// when a missing tool fails the test.
pub fn required_tool(name: &str, install: &str) -> Option<std::path::PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(name))
            .find(|path| path.is_file())
    });
    if found.is_none() {
        assert!(
            std::env::var_os("CAIRN_REQUIRE_SYSTEM_TOOLS").is_none(),
            "{name} is not installed and CAIRN_REQUIRE_SYSTEM_TOOLS is set: {install} (test.sh does)"
        );
        eprintln!("SKIPPED: {name} is not installed ({install}; test.sh does)");
    }
    found
}

/// A directory of objects to serve: `big.bin` (3 MiB + 123 bytes), `small.txt`,
/// `dir/a b.bin`, `dir/é.txt`, `empty`; a `secret` beside the root and an
/// `escape` symlink to it inside.
pub fn objects() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("root");
    std::fs::create_dir_all(root.join("dir")).expect("mkdir");
    std::fs::write(root.join("big.bin"), pattern((3 << 20) + 123, 7)).expect("write");
    std::fs::write(root.join("small.txt"), b"small object\n").expect("write");
    std::fs::write(root.join("dir/a b.bin"), pattern(300_001, 2)).expect("write");
    std::fs::write(root.join("dir/é.txt"), "accented\n").expect("write");
    std::fs::write(root.join("empty"), b"").expect("write");
    std::fs::write(dir.path().join("secret"), b"TOP-SECRET").expect("write");
    std::os::unix::fs::symlink("../secret", root.join("escape")).expect("symlink");
    (dir, root)
}
