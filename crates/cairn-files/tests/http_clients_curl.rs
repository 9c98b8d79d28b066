//! curl against the gateway: whole bodies, ranges (206, 416), conditional
//! requests (304, 412), HEAD, and keep-alive (two URLs, one connection),
//! every byte compared with the file.

mod common;

use std::path::Path;
use std::process::Command;
use std::sync::atomic::Ordering;

use cairn_files::DirBackend;
use common::{objects, required_tool, start};

/// Runs curl with `args`; (status code, stdout bytes, stderr).
fn curl(args: &[&str]) -> (u16, Vec<u8>, String) {
    let output = Command::new("curl")
        .args(["-s", "-S", "-w", "\n%{http_code}"])
        .args(args)
        .output()
        .expect("run curl");
    let mut stdout = output.stdout;
    let at = stdout
        .iter()
        .rposition(|&b| b == b'\n')
        .expect("the status line");
    let code = String::from_utf8_lossy(&stdout[at + 1..])
        .trim()
        .parse()
        .expect("a status");
    stdout.truncate(at);
    (
        code,
        stdout,
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|line| {
        let (n, v) = line.split_once(':')?;
        n.eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

#[test]
fn curl_reads_whole_objects_ranges_and_conditionals() {
    if required_tool("curl", "apt-get install curl").is_none() {
        return;
    }
    let (dir, root) = objects();
    let server = start(DirBackend::open(&root).expect("open"), |_| {});
    let url = |key: &str| format!("http://{}/media/{key}", server.addr);
    let big = std::fs::read(root.join("big.bin")).expect("read");
    let head_file = dir.path().join("head.txt");
    let head_path = head_file.to_str().expect("utf-8");

    let (code, body, _) = curl(&["-D", head_path, &url("big.bin")]);
    assert_eq!(code, 200);
    assert!(body == big, "whole body differs ({} bytes)", body.len());
    let head = std::fs::read_to_string(&head_file).expect("head");
    let etag = header(&head, "etag").expect("ETag").to_owned();
    let modified = header(&head, "last-modified")
        .expect("Last-Modified")
        .to_owned();
    assert_eq!(header(&head, "accept-ranges"), Some("bytes"));

    for (range, start, end) in [
        ("1000-299999", 1000, 300_000),
        ("262143-524288", 262_143, 524_289),
        ("3145000-", 3_145_000, big.len()),
        ("-500", big.len() - 500, big.len()),
        ("0-0", 0, 1),
    ] {
        let (code, body, _) = curl(&["-D", head_path, "-r", range, &url("big.bin")]);
        assert_eq!(code, 206, "{range}");
        assert!(body == big[start..end], "{range}: bytes differ");
        let head = std::fs::read_to_string(&head_file).expect("head");
        let expected = format!("bytes {start}-{}/{}", end - 1, big.len());
        assert_eq!(
            header(&head, "content-range"),
            Some(expected.as_str()),
            "{range}"
        );
    }
    let (code, body, _) = curl(&["-D", head_path, "-r", "5000000-", &url("big.bin")]);
    assert_eq!(code, 416);
    assert!(String::from_utf8_lossy(&body).contains("<Code>InvalidRange</Code>"));
    let head = std::fs::read_to_string(&head_file).expect("head");
    let expected = format!("bytes */{}", big.len());
    assert_eq!(header(&head, "content-range"), Some(expected.as_str()));

    let (code, body, _) = curl(&["-H", &format!("If-None-Match: {etag}"), &url("big.bin")]);
    assert_eq!((code, body.len()), (304, 0));
    let (code, _, _) = curl(&[
        "-H",
        &format!("If-Modified-Since: {modified}"),
        &url("big.bin"),
    ]);
    assert_eq!(code, 304);
    let (code, _, _) = curl(&["-H", "If-Match: \"other\"", &url("big.bin")]);
    assert_eq!(code, 412);
    let (code, body, _) = curl(&["-H", "If-Range: \"other\"", "-r", "0-9", &url("big.bin")]);
    assert_eq!(code, 200, "a stale If-Range gets the whole object");
    assert_eq!(body.len(), big.len());
    let (code, body, _) = curl(&[
        "-H",
        &format!("If-Range: {etag}"),
        "-r",
        "0-9",
        &url("big.bin"),
    ]);
    assert_eq!((code, &body[..]), (206, &big[..10]));

    let (code, body, _) = curl(&["-I", &url("big.bin")]);
    assert_eq!(code, 200);
    let head = String::from_utf8_lossy(&body);
    let length = big.len().to_string();
    assert_eq!(header(&head, "content-length"), Some(length.as_str()));
    let (code, body, _) = curl(&[&url("empty")]);
    assert_eq!((code, body.len()), (200, 0));
    let (code, body, _) = curl(&[&url("dir/a%20b.bin")]);
    assert_eq!(code, 200);
    assert!(body == std::fs::read(root.join("dir/a b.bin")).expect("read"));
    let (code, _, _) = curl(&["--path-as-is", &url("../secret")]);
    assert!(code == 403 || code == 404, "{code}");
    assert_blocks_served_from_cache(&server.cache.stats(), &big);
    drop(dir);
}

fn assert_blocks_served_from_cache(stats: &cairn_files::FileCacheStats, big: &[u8]) {
    // big.bin is 13 blocks of 256 KiB; every later read of it is a hit.
    assert!(stats.misses <= 13 + 2, "{stats:?}");
    assert!(stats.hits > 13, "{stats:?}");
    assert!(stats.bytes_from_cache > big.len() as u64, "{stats:?}");
}

#[test]
fn curl_keeps_the_connection_alive_between_requests() {
    if required_tool("curl", "apt-get install curl").is_none() {
        return;
    }
    let (dir, root) = objects();
    let server = start(DirBackend::open(&root).expect("open"), |_| {});
    let a = format!("http://{}/media/small.txt", server.addr);
    let b = format!("http://{}/media/dir/%C3%A9.txt", server.addr);
    let out = dir.path().join("out");
    let (first, second) = (out.with_extension("1"), out.with_extension("2"));
    let output = Command::new("curl")
        .args(["-sS", "-v", &a, "-o", path(&first), &b, "-o", path(&second)])
        .output()
        .expect("run curl");
    assert!(output.status.success());
    let log = String::from_utf8_lossy(&output.stderr);
    assert!(
        log.contains("Re-using existing connection") || log.contains("Reusing existing connection"),
        "{log}"
    );
    assert_eq!(log.matches("Connected to").count(), 1, "{log}");
    assert_eq!(std::fs::read(&first).expect("read"), b"small object\n");
    assert_eq!(
        std::fs::read_to_string(&second).expect("read"),
        "accented\n"
    );
    let connections = server.counters.connections.load(Ordering::Relaxed);
    assert_eq!(connections, 1, "one connection for both requests");
}

fn path(p: &Path) -> &str {
    p.to_str().expect("utf-8")
}
