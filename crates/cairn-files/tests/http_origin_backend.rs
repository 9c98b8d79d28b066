//! A gateway whose backend is another gateway over HTTP ([`HttpBackend`]):
//! every byte of whole objects and ranges matches the origin's, stat and
//! list agree, and the origin's 404, 5xx, slowness and closed keep-alive
//! connections come back as `NotFound`, `Retryable`, `Timeout` and a transparent
//! retry; the pool never opens more connections than its bound. nginx as a
//! plain web server origin, over http and over https (TLS, a test CA).

#[path = "../../cairn-nbd/tests/common/certificates.rs"]
mod certificates;
mod common;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};

use cairn_files::{
    Backend, BackendErrorKind, DirBackend, HttpBackend, HttpBackendConfig, MemoryBackend,
};
use common::{BUCKET, exchange, pattern, start, status};

fn origin_url(addr: std::net::SocketAddr) -> String {
    format!("http://{addr}/{BUCKET}")
}

#[test]
fn a_gateway_over_a_gateway_serves_the_same_bytes() {
    let (_dir, root) = common::objects();
    let origin = start(DirBackend::open(&root).expect("open"), |_| {});
    let backend =
        HttpBackend::new(&origin_url(origin.addr), HttpBackendConfig::default()).expect("url");
    // stat agrees with the directory (Last-Modified has whole seconds).
    let info = backend.stat("big.bin").expect("stat");
    assert_eq!(info.size, (3 << 20) + 123);
    let on_disk = std::fs::metadata(root.join("big.bin"))
        .expect("meta")
        .modified()
        .expect("mtime");
    let whole = |t: SystemTime| {
        t.duration_since(SystemTime::UNIX_EPOCH)
            .expect("epoch")
            .as_secs()
    };
    assert_eq!(whole(info.modified), whole(on_disk));
    assert_eq!(backend.stat("dir/a b.bin").expect("stat").size, 300_001);
    assert_eq!(backend.stat("dir/é.txt").expect("stat").size, 9);
    assert_eq!(
        backend.stat("nope").expect_err("absent").kind,
        BackendErrorKind::NotFound
    );
    assert_eq!(
        backend.stat("escape").expect_err("outside").kind,
        BackendErrorKind::Forbidden
    );
    // Ranged reads, including one that crosses the origin's blocks.
    let expected = pattern((3 << 20) + 123, 7);
    let mut buf = vec![0u8; 700_000];
    backend.read_at("big.bin", 200_000, &mut buf).expect("read");
    assert!(buf == expected[200_000..900_000]);
    let mut tail = vec![0u8; 123];
    backend
        .read_at("big.bin", 3 << 20, &mut tail)
        .expect("read");
    assert!(tail == expected[3 << 20..]);
    let mut past = vec![0u8; 124];
    assert_eq!(
        backend
            .read_at("big.bin", 3 << 20, &mut past)
            .expect_err("past the end")
            .kind,
        BackendErrorKind::Other
    );
    // ListObjectsV2, paged by the backend under a small max.
    let mut listed = Vec::new();
    assert!(!backend.list("", None, 100, &mut listed).expect("list"));
    let keys: Vec<_> = listed.iter().map(|e| e.key.as_str()).collect();
    assert_eq!(
        keys,
        ["big.bin", "dir/a b.bin", "dir/é.txt", "empty", "small.txt"]
    );
    assert_eq!(listed[1].info, backend.stat("dir/a b.bin").expect("stat"));
    listed.clear();
    assert!(backend.list("dir/", None, 1, &mut listed).expect("list"));
    assert_eq!(listed.len(), 1);
    listed.clear();
    assert!(
        !backend
            .list("dir/", Some("dir/a b.bin"), 5, &mut listed)
            .expect("list")
    );
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].key, "dir/é.txt");

    // A second gateway over the first: whole objects and ranges over HTTP.
    let front = start(backend, |_| {});
    let answer = exchange(
        front.addr,
        format!("GET /{BUCKET}/big.bin HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .as_bytes(),
    );
    assert_eq!(status(&answer), 200);
    assert!(answer.ends_with(&expected), "the whole object, every byte");
    let answer = exchange(
        front.addr,
        format!("GET /{BUCKET}/dir/a%20b.bin HTTP/1.1\r\nHost: x\r\nRange: bytes=262000-262199\r\nConnection: close\r\n\r\n").as_bytes(),
    );
    assert_eq!(status(&answer), 206);
    assert!(answer.ends_with(&pattern(300_001, 2)[262_000..262_200]));
    // Re-read: served from the front's cache, no block read from the origin.
    let misses = front.cache.stats().misses;
    let again = exchange(
        front.addr,
        format!("GET /{BUCKET}/big.bin HTTP/1.1\r\nHost: x\r\nRange: bytes=0-99\r\nConnection: close\r\n\r\n").as_bytes(),
    );
    assert_eq!(status(&again), 206);
    assert!(again.ends_with(&expected[..100]));
    assert_eq!(front.cache.stats().misses, misses);
}

#[test]
fn origin_failures_map_to_error_kinds() {
    let memory = Arc::new(MemoryBackend::new());
    memory.put("obj", pattern(1 << 20, 3), SystemTime::now());
    let origin = start(Arc::clone(&memory), |_| {});
    let backend = HttpBackend::new(
        &origin_url(origin.addr),
        HttpBackendConfig {
            io_timeout: Duration::from_millis(300),
            ..HttpBackendConfig::default()
        },
    )
    .expect("url");
    let mut buf = vec![0u8; 4096];
    // The origin's backend fails: it answers 502, which is retryable.
    memory.fail_next_read(BackendErrorKind::Other);
    let error = backend.read_at("obj", 0, &mut buf).expect_err("502");
    assert_eq!(error.kind, BackendErrorKind::Retryable, "{error}");
    assert!(error.message.contains("502"), "{error}");
    // Its backend times out: 504 is a timeout.
    memory.fail_next_read(BackendErrorKind::Timeout);
    let error = backend.read_at("obj", 0, &mut buf).expect_err("504");
    assert_eq!(error.kind, BackendErrorKind::Timeout, "{error}");
    // It is slower than our I/O timeout: a timeout too.
    memory.set_delay(Duration::from_millis(1500));
    let error = backend.read_at("obj", 8192, &mut buf).expect_err("slow");
    assert_eq!(error.kind, BackendErrorKind::Timeout, "{error}");
    memory.set_delay(Duration::ZERO);
    // The origin caches nothing of a failure: now the bytes come.
    backend.read_at("obj", 600_000, &mut buf).expect("read");
    assert!(buf == pattern(1 << 20, 3)[600_000..604_096]);
    assert_eq!(
        backend.read_at("gone", 0, &mut buf).expect_err("404").kind,
        BackendErrorKind::NotFound
    );
    // Nothing is left busy: every failed connection was closed or pooled.
    assert!(backend.connections_open() <= HttpBackendConfig::default().connections_max);
}

#[test]
fn many_readers_share_a_bounded_pool_of_kept_alive_connections() {
    let memory = Arc::new(MemoryBackend::new());
    let bytes = pattern(8 << 20, 5);
    memory.put("obj", bytes.clone(), SystemTime::now());
    // Slow enough that the 12 readers overlap and would open 12 connections.
    memory.set_delay(Duration::from_millis(15));
    let origin = start(Arc::clone(&memory), |_| {});
    let backend = Arc::new(
        HttpBackend::new(
            &origin_url(origin.addr),
            HttpBackendConfig {
                connections_max: 3,
                ..HttpBackendConfig::default()
            },
        )
        .expect("url"),
    );
    let threads: Vec<_> = (0..12)
        .map(|t| {
            let backend = Arc::clone(&backend);
            let bytes = bytes.clone();
            std::thread::spawn(move || {
                let mut buf = vec![0u8; 100_000];
                for i in 0..10u64 {
                    let offset = (t * 10 + i) * 60_000;
                    backend.read_at("obj", offset, &mut buf).expect("read");
                    let at = offset as usize;
                    assert!(buf == bytes[at..at + 100_000], "bytes at {offset}");
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().expect("reader");
    }
    // The origin counts a request after answering it: wait for the last.
    for _ in 0..100 {
        if origin.counters.requests() == 120 {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(origin.counters.requests(), 120);
    let connections = origin.counters.connections.load(Ordering::Relaxed);
    assert!(
        (1..=3).contains(&connections),
        "120 reads over {connections} connections, the bound is 3"
    );
    assert!(backend.connections_open() <= 3);
}

/// An origin that closes every connection after one answer without saying
/// so: the backend's second request on the pooled connection finds it
/// closed and is retried once on a new one, unseen by the caller.
#[test]
fn a_connection_the_origin_closed_while_idle_is_retried_on_a_new_one() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let server = std::thread::spawn(move || {
        for _ in 0..3 {
            let (mut stream, _) = listener.accept().expect("accept");
            let mut head = [0u8; 4096];
            let mut filled = 0;
            while !head[..filled].windows(4).any(|w| w == b"\r\n\r\n") {
                filled += stream.read(&mut head[filled..]).expect("read");
            }
            stream
                .write_all(
                    b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nLast-Modified: Sun, 06 Nov 1994 08:49:37 GMT\r\nETag: \"v1\"\r\n\r\n",
                )
                .expect("write");
            // Closed on drop, with keep-alive implied.
        }
    });
    let backend =
        HttpBackend::new(&format!("http://{addr}/b"), HttpBackendConfig::default()).expect("url");
    for _ in 0..3 {
        let info = backend
            .stat("k")
            .expect("stat, retried if the pooled connection was closed");
        assert_eq!(info.size, 5);
        assert_eq!(
            info.modified
                .duration_since(SystemTime::UNIX_EPOCH)
                .expect("epoch")
                .as_secs(),
            784_111_777
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    server.join().expect("server");
}

#[test]
fn an_origin_that_cannot_list_is_a_clear_error() {
    // A plain web server: HEAD and ranged GET work, a listing is HTML.
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let server = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().expect("accept");
        let mut head = [0u8; 4096];
        let mut filled = 0;
        while !head[..filled].windows(4).any(|w| w == b"\r\n\r\n") {
            filled += stream.read(&mut head[filled..]).expect("read");
        }
        stream
            .write_all(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nTransfer-Encoding: chunked\r\n\r\n6\r\n<html>\r\n0\r\n\r\n")
            .expect("write");
    });
    let backend =
        HttpBackend::new(&format!("http://{addr}/"), HttpBackendConfig::default()).expect("url");
    let error = backend
        .list("", None, 10, &mut Vec::new())
        .expect_err("not S3");
    assert_eq!(error.kind, BackendErrorKind::Other);
    assert!(error.message.contains("ListObjectsV2"), "{error}");
    server.join().expect("server");
}

/// Through `front` (over an origin serving [`common::objects`]): all of
/// `big.bin` and a range of `dir/a b.bin`, every byte right, each of their
/// 13 + 2 blocks of 256 KiB one ranged GET to the origin.
fn reads_whole_and_range_right(front: &common::Running<HttpBackend>) {
    let answer = exchange(
        front.addr,
        format!("GET /{BUCKET}/big.bin HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .as_bytes(),
    );
    assert_eq!(status(&answer), 200);
    assert!(
        answer.ends_with(&pattern((3 << 20) + 123, 7)),
        "the whole object, every byte"
    );
    let answer = exchange(
        front.addr,
        format!(
            "GET /{BUCKET}/dir/a%20b.bin HTTP/1.1\r\nHost: x\r\nRange: bytes=5-300000\r\nConnection: close\r\n\r\n"
        )
        .as_bytes(),
    );
    assert_eq!(status(&answer), 206);
    assert!(answer.ends_with(&pattern(300_001, 2)[5..300_001]));
    assert_eq!(front.cache.stats().misses, 13 + 2);
}

/// nginx serving a directory, with its config written into a temp dir;
/// stopped on drop.
struct Nginx {
    child: std::process::Child,
    addr: std::net::SocketAddr,
    dir: tempfile::TempDir,
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// With `tls`, a directory of [`certificates::certificates`]: https with its
/// server certificate.
fn nginx_serving(
    nginx: &std::path::Path,
    root: &std::path::Path,
    tls: Option<&std::path::Path>,
) -> Nginx {
    let dir = tempfile::tempdir().expect("tempdir");
    let port = TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port();
    let d = dir.path().display();
    let config = format!(
        "daemon off; master_process off; worker_processes 1; pid {d}/nginx.pid;\n\
         error_log {d}/error.log;\n\
         events {{ worker_connections 64; }}\n\
         http {{ access_log off; client_body_temp_path {d}/body; proxy_temp_path {d}/proxy;\n\
           fastcgi_temp_path {d}/fcgi; uwsgi_temp_path {d}/uwsgi; scgi_temp_path {d}/scgi;\n\
           server {{ listen 127.0.0.1:{port}{}; root {}; {} }} }}\n",
        if tls.is_some() { " ssl" } else { "" },
        root.display(),
        tls.map(|pki| format!(
            "ssl_certificate {0}/server-cert.pem; ssl_certificate_key {0}/server-key.pem;",
            pki.display()
        ))
        .unwrap_or_default()
    );
    std::fs::write(dir.path().join("nginx.conf"), config).expect("config");
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().expect("addr");
    let server = Nginx {
        child: std::process::Command::new(nginx)
            .arg("-p")
            .arg(dir.path())
            .arg("-e")
            .arg(dir.path().join("error.log"))
            .arg("-c")
            .arg(dir.path().join("nginx.conf"))
            .spawn()
            .expect("nginx starts"),
        addr,
        dir,
    };
    for _ in 0..200 {
        if std::net::TcpStream::connect(addr).is_ok() {
            return server;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!(
        "nginx did not listen: {}",
        std::fs::read_to_string(server.dir.path().join("error.log")).unwrap_or_default()
    );
}

#[test]
fn nginx_serving_a_directory_is_an_origin_that_cannot_list() {
    let Some(nginx) = common::required_tool("nginx", "apt-get install nginx-light") else {
        return;
    };
    let (_dir, root) = common::objects();
    let server = nginx_serving(&nginx, &root, None);
    let backend = HttpBackend::new(
        &format!("http://{}/", server.addr),
        HttpBackendConfig::default(),
    )
    .expect("url");
    let info = backend.stat("big.bin").expect("stat");
    assert_eq!(info.size, (3 << 20) + 123);
    assert_eq!(
        backend.stat("missing").expect_err("404").kind,
        BackendErrorKind::NotFound
    );
    let front = start(backend, |_| {});
    reads_whole_and_range_right(&front);
    let error = front
        .cache
        .backend()
        .list("", None, 10, &mut Vec::new())
        .expect_err("nginx does not list");
    assert!(error.message.contains("ListObjectsV2"), "{error}");
}

#[test]
fn an_https_origin_is_read_over_tls_and_an_unknown_ca_is_refused() {
    let Some(nginx) = common::required_tool("nginx", "apt-get install nginx-light") else {
        return;
    };
    let pki_dir = tempfile::tempdir().expect("tempdir");
    let Some(pki) = certificates::certificates(&pki_dir.path().join("ours")) else {
        return;
    };
    let (_dir, root) = common::objects();
    let server = nginx_serving(&nginx, &root, Some(&pki));
    let port = server.addr.port();
    let trusting = |ca: std::path::PathBuf| HttpBackendConfig {
        ca_file: Some(ca),
        ..HttpBackendConfig::default()
    };
    // By name and by address: the certificate names both.
    for host in ["localhost", "127.0.0.1"] {
        let backend = HttpBackend::new(
            &format!("https://{host}:{port}/"),
            trusting(pki.join("ca-cert.pem")),
        )
        .expect("url");
        assert_eq!(backend.stat("big.bin").expect("stat").size, (3 << 20) + 123);
        assert_eq!(
            backend.stat("missing").expect_err("404").kind,
            BackendErrorKind::NotFound
        );
    }
    let backend = HttpBackend::new(
        &format!("https://localhost:{port}/"),
        trusting(pki.join("ca-cert.pem")),
    )
    .expect("url");
    let front = start(backend, |_| {});
    reads_whole_and_range_right(&front);
    // The blocks' ranged GETs shared kept-alive connections (a TLS
    // handshake is per connection, not per request).
    assert!(front.cache.backend().connections_open() <= 2);

    // Another CA: the origin cannot prove itself, and nothing is read.
    let Some(other) = certificates::certificates(&pki_dir.path().join("other")) else {
        return;
    };
    let stranger = HttpBackend::new(
        &format!("https://localhost:{port}/"),
        trusting(other.join("ca-cert.pem")),
    )
    .expect("url");
    let error = stranger.stat("big.bin").expect_err("unknown CA");
    assert_eq!(error.kind, BackendErrorKind::Other, "{error}");
    assert!(error.message.contains("certificate"), "{error}");
    // Plain http to the TLS port is not mistaken for an answer.
    let plain = HttpBackend::new(
        &format!("http://localhost:{port}/"),
        HttpBackendConfig::default(),
    )
    .expect("url");
    assert!(plain.stat("big.bin").is_err());
}
