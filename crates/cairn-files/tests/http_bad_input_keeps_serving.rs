//! Raw-TCP tests of the gateway's limits and error answers: bad input gets a
//! clear status, nothing outside the root is read, slow or surplus clients
//! are cut off, backend failures are answered and never cached — and the
//! server keeps serving everyone else throughout.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime};

use cairn_files::{BackendErrorKind, DirBackend, MemoryBackend};
use common::{BUCKET, exchange, pattern, start, status};

fn get(path: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").into_bytes()
}

/// The body of a single response.
fn body(answer: &[u8]) -> &[u8] {
    let at = answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a head");
    &answer[at + 4..]
}

fn directory() -> (tempfile::TempDir, DirBackend) {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("root");
    std::fs::create_dir_all(root.join("sub")).expect("mkdir");
    std::fs::write(root.join("a.bin"), pattern(700_000, 1)).expect("write");
    std::fs::write(root.join("sub/b.txt"), b"hello").expect("write");
    std::fs::write(dir.path().join("secret"), b"TOP-SECRET").expect("write");
    std::os::unix::fs::symlink("../secret", root.join("escape")).expect("symlink");
    let backend = DirBackend::open(&root).expect("open");
    (dir, backend)
}

#[test]
fn a_malformed_request_is_400_and_the_others_are_served() {
    let (_dir, backend) = directory();
    let server = start(backend, |_| {});
    let mut other = TcpStream::connect(server.addr).expect("connect");
    for garbage in [
        &b"GARBAGE\r\n\r\n"[..],
        b"GET /media/a.bin HTTP/9.9\r\n\r\n",
        b"GET /media/a.bin HTTP/1.1\r\nBad Header\r\n\r\n",
        b"\x00\x01\x02\x03\r\n\r\n",
        b"GET /media/a.bin HTTP/1.1\r\nHost: x\r\nContent-Length: nope\r\n\r\n",
        b"GET /media/a.bin HTTP/1.1\r\n\r\n", // HTTP/1.1 without Host
        b"GET /media/%zz HTTP/1.1\r\nHost: x\r\n\r\n",
    ] {
        let answer = exchange(server.addr, garbage);
        assert_eq!(
            status(&answer),
            400,
            "{:?}",
            String::from_utf8_lossy(garbage)
        );
    }
    other.write_all(&get("/media/a.bin")).expect("send");
    let mut answer = Vec::new();
    other.read_to_end(&mut answer).expect("read");
    assert_eq!(status(&answer), 200);
    assert_eq!(body(&answer), pattern(700_000, 1));
}

#[test]
fn oversized_heads_are_431_or_414() {
    let (_dir, backend) = directory();
    let server = start(backend, |_| {});
    let big = format!(
        "GET /media/a.bin HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
        "y".repeat(20_000)
    );
    assert_eq!(status(&exchange(server.addr, big.as_bytes())), 431);
    let many = "X-H: v\r\n".repeat(100);
    let many = format!("GET /media/a.bin HTTP/1.1\r\nHost: x\r\n{many}\r\n");
    assert_eq!(status(&exchange(server.addr, many.as_bytes())), 431);
    let long = format!(
        "GET /media/{} HTTP/1.1\r\nHost: x\r\n\r\n",
        "a".repeat(9000)
    );
    assert_eq!(status(&exchange(server.addr, long.as_bytes())), 414);
    assert_eq!(
        status(&exchange(server.addr, &get("/media/sub/b.txt"))),
        200
    );
}

#[test]
fn paths_out_of_the_root_are_refused_without_reading_there() {
    let (_dir, backend) = directory();
    let server = start(backend, |_| {});
    for path in [
        "/media/../secret",
        "/media/%2e%2e/secret",
        "/media/sub/../../secret",
        "/media/escape",
        "/media//etc/passwd",
        "/media/%2Fetc%2Fpasswd",
        "/media/sub",
        "/media/nope",
    ] {
        let answer = exchange(server.addr, &get(path));
        let code = status(&answer);
        assert!(code == 403 || code == 404, "{path}: {code}");
        let text = String::from_utf8_lossy(&answer);
        assert!(
            !text.contains("TOP-SECRET") && !text.contains("root:"),
            "{path}: {text}"
        );
        assert!(
            text.contains("<Code>AccessDenied</Code>") || text.contains("<Code>NoSuchKey</Code>"),
            "{text}"
        );
    }
    assert_eq!(
        server.cache.stats().bytes_from_backend,
        0,
        "no read reached the backend"
    );
    let wrong = exchange(server.addr, &get("/other/a.bin"));
    assert_eq!(status(&wrong), 404);
    assert!(String::from_utf8_lossy(&wrong).contains("<Code>NoSuchBucket</Code>"));
}

#[test]
fn a_slowloris_client_is_closed_after_the_header_timeout() {
    let (_dir, backend) = directory();
    let server = start(backend, |c| c.header_timeout = Duration::from_millis(600));
    let mut slow = TcpStream::connect(server.addr).expect("connect");
    slow.set_read_timeout(Some(Duration::from_millis(50)))
        .expect("timeout");
    let began = Instant::now();
    let mut answer = Vec::new();
    let request =
        b"GET /media/a.bin HTTP/1.1\r\nHost: x\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    let mut closed_after = None;
    for &byte in request.iter().cycle().take(200) {
        // One byte every 50 ms: each read sees progress, the head never ends.
        if slow.write_all(&[byte]).is_err() {
            closed_after = Some(began.elapsed());
            break;
        }
        let mut chunk = [0u8; 512];
        match slow.read(&mut chunk) {
            Ok(0) => {
                closed_after = Some(began.elapsed());
                break;
            }
            Ok(n) => answer.extend_from_slice(&chunk[..n]),
            Err(_) => {}
        }
        if began.elapsed() < Duration::from_millis(300) {
            // Meanwhile another client is served.
            assert_eq!(
                status(&exchange(server.addr, &get("/media/sub/b.txt"))),
                200
            );
        }
    }
    let closed_after = closed_after.expect("the server closed the slow connection");
    assert!(
        closed_after >= Duration::from_millis(550) && closed_after < Duration::from_secs(3),
        "closed after {closed_after:?}"
    );
    assert_eq!(status(&answer), 408);
    // An idle connection (nothing sent) is closed quietly at the same time.
    let mut idle = TcpStream::connect(server.addr).expect("connect");
    idle.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let began = Instant::now();
    let mut rest = Vec::new();
    assert_eq!(idle.read_to_end(&mut rest).expect("closed"), 0);
    assert!(
        began.elapsed() >= Duration::from_millis(550),
        "{:?}",
        began.elapsed()
    );
}

#[test]
fn connections_beyond_the_limit_get_503() {
    let (_dir, backend) = directory();
    let server = start(backend, |c| {
        c.connections_max = 2;
        c.header_timeout = Duration::from_millis(1500);
    });
    let held: Vec<_> = (0..2)
        .map(|_| TcpStream::connect(server.addr).expect("connect"))
        .collect();
    std::thread::sleep(Duration::from_millis(200)); // accepted
    let answer = exchange(server.addr, &get("/media/sub/b.txt"));
    assert_eq!(status(&answer), 503);
    assert!(String::from_utf8_lossy(&answer).contains("<Code>SlowDown</Code>"));
    let counters = &server.counters;
    assert_eq!(counters.open.load(Ordering::Relaxed), 2, "both held");
    assert_eq!(counters.refused.load(Ordering::Relaxed), 1);
    assert_eq!(counters.connections.load(Ordering::Relaxed), 2);
    drop(held);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let answer = exchange(server.addr, &get("/media/sub/b.txt"));
        if status(&answer) == 200 {
            assert_eq!(body(&answer), b"hello");
            break;
        }
        assert!(Instant::now() < deadline, "the slots never freed");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn other_methods_are_405_with_allow() {
    let (dir, backend) = directory();
    let server = start(backend, |_| {});
    for method in ["PUT", "DELETE", "POST", "OPTIONS", "PATCH"] {
        let request =
            format!("{method} /media/a.bin HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc");
        let answer = exchange(server.addr, request.as_bytes());
        assert_eq!(status(&answer), 405, "{method}");
        let text = String::from_utf8_lossy(&answer);
        assert!(text.contains("Allow: GET, HEAD\r\n"), "{text}");
        assert!(
            text.contains("Connection: close\r\n"),
            "a body we do not read ends the connection: {text}"
        );
    }
    let text = std::fs::read_to_string(dir.path().join("root/sub/b.txt")).expect("read");
    assert_eq!(text, "hello", "nothing written");
}

#[test]
fn backend_failures_are_502_and_504_and_never_cached() {
    let backend = MemoryBackend::new();
    backend.put("v.bin", pattern(300_000, 4), SystemTime::UNIX_EPOCH);
    let server = start(backend, |_| {});
    server
        .cache
        .backend()
        .fail_next_read(BackendErrorKind::Timeout);
    let answer = exchange(server.addr, &get("/media/v.bin"));
    assert_eq!(status(&answer), 504);
    assert!(String::from_utf8_lossy(&answer).contains("<Code>GatewayTimeout</Code>"));
    server
        .cache
        .backend()
        .fail_next_read(BackendErrorKind::Other);
    assert_eq!(status(&exchange(server.addr, &get("/media/v.bin"))), 502);
    server
        .cache
        .backend()
        .fail_next_read(BackendErrorKind::Retryable);
    assert_eq!(status(&exchange(server.addr, &get("/media/v.bin"))), 502);
    let answer = exchange(server.addr, &get("/media/v.bin"));
    assert_eq!(status(&answer), 200, "the failures were not cached");
    assert_eq!(body(&answer), pattern(300_000, 4));
    let stats = server.cache.stats();
    let kinds = stats.backend_errors;
    assert_eq!((kinds.not_found, kinds.timeout, kinds.other), (0, 1, 2));
    let missing = exchange(server.addr, &get("/media/none"));
    assert_eq!(status(&missing), 404);
    assert!(String::from_utf8_lossy(&missing).contains("<Code>NoSuchKey</Code>"));
    // The lookup that found nothing is a backend error too, by its kind.
    let kinds = server.cache.stats().backend_errors;
    assert_eq!((kinds.not_found, kinds.timeout, kinds.other), (1, 1, 2));
    // Every answer by method and status class (counted after it is sent:
    // wait for the last).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while server.counters.requests() < 5 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let requests = server.counters.requests_by();
    assert_eq!(requests.get("get", "5xx"), 3, "{requests:?}");
    assert_eq!(requests.get("get", "2xx"), 1, "{requests:?}");
    assert_eq!(requests.get("get", "4xx"), 1, "{requests:?}");
    assert_eq!(requests.total(), 5, "{requests:?}");
}

#[test]
fn pipelined_requests_on_one_connection_are_answered_in_order() {
    let (_dir, backend) = directory();
    let server = start(backend, |_| {});
    let requests = format!(
        "GET /{BUCKET}/sub/b.txt HTTP/1.1\r\nHost: x\r\nRange: bytes=1-3\r\n\r\n\
         HEAD /{BUCKET}/a.bin HTTP/1.1\r\nHost: x\r\n\r\n\
         GET /{BUCKET}/sub/b.txt HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    );
    let answer = exchange(server.addr, requests.as_bytes());
    let text = String::from_utf8_lossy(&answer);
    let parts: Vec<_> = text.split("HTTP/1.1 ").skip(1).collect();
    assert_eq!(parts.len(), 3, "{text}");
    assert!(
        parts[0].starts_with("206") && parts[0].ends_with("\r\n\r\nell"),
        "{}",
        parts[0]
    );
    assert!(parts[0].contains("Content-Range: bytes 1-3/5\r\n"));
    assert!(parts[1].starts_with("200") && parts[1].contains("Content-Length: 700000\r\n"));
    assert!(parts[1].ends_with("\r\n\r\n"), "HEAD has no body");
    assert!(parts[2].starts_with("200") && parts[2].ends_with("hello"));
    assert!(parts[2].contains("Connection: close\r\n"));
}
