//! `cairn stats` over a running `cairn serve`: its request counters are
//! exactly what the client did (fio's nbd engine: requests and bytes, per
//! kind), its latency histograms counted every request, the `--help`
//! examples of `cairn stats` and `cairn ctl` run as printed, and the
//! control socket refuses another user (the file mode first; the peer
//! credentials where the mode lets one through) while the server keeps
//! serving. Guards the numbers an operator steers by: a counter that counts
//! twice, or misses a connection that closed, is caught here.
#![allow(clippy::unwrap_used)]

mod common;

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Server, cairn, terminate, tool};
use serde_json::Value;

/// Starts `cairn serve --memory 64MiB` in `dir` (default sockets:
/// `cairn-data/cairn.sock` and `cairn-data/cairn.ctl`), with `extra` flags;
/// returns once both sockets answer.
fn serve(dir: &Path, extra: &[&str]) -> Server {
    let child = cairn()
        .current_dir(dir)
        .args(["-q", "serve", "--memory", "64MiB"])
        .args(extra)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let server = Server(Some(child));
    common::wait_for_sockets(dir);
    server
}

/// `cairn stats --json` in `dir`, parsed.
fn stats(dir: &Path) -> Value {
    let out = cairn()
        .current_dir(dir)
        .args(["stats", "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Runs fio's nbd engine on the server in `dir` with `args` (jobs); its
/// JSON report.
fn fio(dir: &Path, args: &[&str]) -> Value {
    let out = Command::new("fio")
        .current_dir(dir)
        .args([
            "--ioengine=nbd",
            "--uri=nbd+unix:///?socket=cairn-data/cairn.sock",
        ])
        .arg("--output-format=json")
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "fio: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    // fio may print a line ("fio: connected to NBD server") before its JSON.
    let json = &text[text.find('{').expect("fio's JSON report")..];
    serde_json::from_str(json).unwrap()
}

/// The sum over fio's jobs of `direction.field` (read or write;
/// `total_ios` or `io_bytes`).
fn fio_sum(report: &Value, direction: &str, field: &str) -> u64 {
    report["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|job| job[direction][field].as_u64().unwrap())
        .sum()
}

fn has_fio_nbd() -> bool {
    tool("fio").is_some()
        && Command::new("fio")
            .arg("--enghelp=nbd")
            .output()
            .is_ok_and(|o| o.status.success())
}

#[test]
fn counters_equal_what_fio_did_exactly() {
    if !has_fio_nbd() {
        eprintln!("SKIPPED: fio with the nbd engine is not installed (test.sh installs fio)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut server = serve(dir.path(), &[]);
    // Three jobs, three connections: random 4 KiB reads and writes (a
    // known count), sequential 64 KiB writes (a known size), and 128 KiB
    // reads of 1 MiB; every request of a job is one NBD request.
    let report = fio(
        dir.path(),
        &[
            "--name=mixed",
            "--rw=randrw",
            "--rwmixread=60",
            "--bs=4k",
            "--size=8M",
            "--number_ios=700",
            "--iodepth=4",
            "--name=stream",
            "--rw=write",
            "--bs=64k",
            "--offset=16M",
            "--size=4M",
            "--name=big",
            "--rw=read",
            "--bs=128k",
            "--offset=32M",
            "--size=1M",
        ],
    );
    let reads = fio_sum(&report, "read", "total_ios");
    let writes = fio_sum(&report, "write", "total_ios");
    assert_eq!(reads + writes, 700 + 64 + 8, "fio did what was asked");
    // A connection ends on the server a moment after fio exits.
    let deadline = Instant::now() + Duration::from_secs(10);
    let snapshot = loop {
        let snapshot = stats(dir.path());
        if snapshot["exports"][0]["connections_open"] == 0 {
            break snapshot;
        }
        assert!(
            Instant::now() < deadline,
            "connections never closed: {snapshot}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let export = &snapshot["exports"][0];
    let io = &export["io"];
    assert_eq!(export["name"], "cairn");
    assert_eq!(io["reads"], reads, "{io}");
    assert_eq!(
        io["read_bytes"],
        fio_sum(&report, "read", "io_bytes"),
        "{io}"
    );
    assert_eq!(io["writes"], writes, "{io}");
    assert_eq!(
        io["write_bytes"],
        fio_sum(&report, "write", "io_bytes"),
        "{io}"
    );
    assert_eq!(io["write_bytes"], 4096 * (writes - 64) + (4 << 20), "{io}");
    for zero in ["errors", "rejected", "trims", "write_zeroes", "caches"] {
        assert_eq!(io[zero], 0, "{zero}: {io}");
    }
    // Every request timed once, in its histogram.
    let latency = &export["latency"];
    assert_eq!(latency["read"]["count"], reads);
    assert_eq!(latency["write"]["count"], writes);
    let buckets: u64 = latency["read"]["buckets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["count"].as_u64().unwrap())
        .sum();
    assert_eq!(buckets, reads);
    let p50 = latency["read"]["p50_ns"].as_u64().unwrap();
    let p99 = latency["read"]["p99_ns"].as_u64().unwrap();
    let max = latency["read"]["max_ns"].as_u64().unwrap();
    assert!(0 < p50 && p50 <= p99 && p99 <= max, "{latency}");
    assert!(export["connections_total"].as_u64().unwrap() >= 3);
    assert_eq!(
        export["layers"],
        serde_json::json!([]),
        "a memory volume has no layers"
    );

    // The table says the same.
    let out = cairn()
        .current_dir(dir.path())
        .arg("stats")
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains(&format!("{reads} reads")) && table.contains(&format!("{writes} writes")),
        "{table}"
    );
    terminate(server.take());
}

/// The lines of `cairn SUBCOMMAND --help` that are examples of it.
fn examples(subcommand: &str) -> Vec<String> {
    let help = cairn().args([subcommand, "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout).into_owned();
    let start = format!("cairn {subcommand}");
    help.lines()
        .map(str::trim)
        .filter(|line| line.starts_with(&start))
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_help_examples_run_as_printed() {
    let dir = tempfile::tempdir().unwrap();
    // The examples speak of the default volume (a DRAM cache over a log
    // disk in ./cairn-data), export "cairn".
    let child = cairn()
        .current_dir(dir.path())
        .args(["-q", "serve"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut server = Server(Some(child));
    let deadline = Instant::now() + Duration::from_secs(30);
    while UnixStream::connect(dir.path().join("cairn-data/cairn.ctl")).is_err() {
        assert!(
            Instant::now() < deadline,
            "the control socket never answered"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let stats = examples("stats");
    let ctl = examples("ctl");
    assert!(stats.len() >= 3 && ctl.len() >= 2, "{stats:?} {ctl:?}");
    for example in stats.iter().chain(&ctl) {
        let args: Vec<&str> = example.split_whitespace().skip(1).collect();
        let mut child = cairn()
            .current_dir(dir.path())
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        if example.contains("--watch") {
            // Runs until stopped: let it draw twice.
            std::thread::sleep(Duration::from_secs(3));
            child.kill().unwrap();
        }
        let out = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        if !example.contains("--watch") {
            assert!(out.status.success(), "{example}: {stderr}");
        }
        if example.starts_with("cairn stats") {
            assert!(stdout.contains("cairn"), "{example}: {stdout}");
            if example.contains("--json") {
                let v: Value = serde_json::from_str(&stdout).unwrap();
                assert_eq!(v["exports"][0]["layers"][0]["name"], "cache");
                assert_eq!(v["exports"][0]["layers"][1]["kind"], "log");
            } else {
                assert!(
                    stdout.contains("layer cache (cache)"),
                    "{example}: {stdout}"
                );
                assert!(stdout.contains("layer log (log)"), "{example}: {stdout}");
            }
        } else {
            assert!(!stdout.trim().is_empty(), "{example} says what it did");
        }
    }
    terminate(server.take());
}

/// Sends one frame and reads one reply frame on a raw connection.
fn frame(stream: &mut UnixStream, body: &[u8]) -> Value {
    let mut request = u32::try_from(body.len()).unwrap().to_le_bytes().to_vec();
    request.extend_from_slice(body);
    stream.write_all(&request).unwrap();
    read_reply(stream)
}

fn read_reply(stream: &mut UnixStream) -> Value {
    let mut length = [0u8; 4];
    stream.read_exact(&mut length).unwrap();
    let mut reply = vec![0u8; u32::from_le_bytes(length) as usize];
    stream.read_exact(&mut reply).unwrap();
    serde_json::from_slice(&reply).unwrap()
}

#[test]
fn bad_control_requests_get_clear_errors_and_the_server_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = serve(dir.path(), &[]);
    let socket = dir.path().join("cairn-data/cairn.ctl");
    let mode = std::fs::metadata(&socket).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "owner-only: {mode:o}");
    let mut stream = UnixStream::connect(&socket).unwrap();
    let reply = frame(&mut stream, b"GET / HTTP/1.1");
    assert_eq!(reply["reply"], "error");
    assert!(
        reply["message"].as_str().unwrap().contains("not JSON"),
        "{reply}"
    );
    let reply = frame(&mut stream, br#"{"request":"format-everything"}"#);
    assert!(
        reply["message"]
            .as_str()
            .unwrap()
            .contains("unknown request \"format-everything\""),
        "{reply}"
    );
    let reply = frame(
        &mut stream,
        br#"{"request":"ctl","export":"cairn","command":"mode","mode":"write-back"}"#,
    );
    assert!(
        reply["message"]
            .as_str()
            .unwrap()
            .contains("mode write-back is not supported"),
        "{reply}"
    );
    let reply = frame(&mut stream, br#"{"request":"stats"}"#);
    assert_eq!(reply["reply"], "stats", "the connection still serves");
    // Oversized: refused unread, that connection closed.
    stream.write_all(&(1u32 << 30).to_le_bytes()).unwrap();
    let reply = read_reply(&mut stream);
    assert!(
        reply["message"]
            .as_str()
            .unwrap()
            .contains("1073741824 bytes is over the limit"),
        "{reply}"
    );
    let mut rest = Vec::new();
    assert_eq!(stream.read_to_end(&mut rest).unwrap(), 0, "closed");
    // `cairn ctl` says the same errors, exit status 1.
    let out = cairn()
        .current_dir(dir.path())
        .args(["ctl", "nope", "flush"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("no export \"nope\" (exports: cairn)"),
        "{stderr}"
    );
    // Still serving: NBD and the control socket.
    let mut nbd = common::connect(&dir.path().join("cairn-data/cairn.sock"));
    assert_eq!(nbd.handshake(), 64 << 20);
    assert_eq!(stats(dir.path())["exports"][0]["name"], "cairn");

    another_user_is_refused(dir.path(), &socket);
    assert_eq!(
        stats(dir.path())["exports"][0]["name"],
        "cairn",
        "still serving"
    );
    drop(nbd);
    terminate(server.take());
}

/// As root: a `cairn stats` of uid 65534 is refused by the socket's mode;
/// with the mode opened up (0666, as a careless chmod would), by the peer
/// credentials check, with a message naming both uids.
fn another_user_is_refused(dir: &Path, socket: &Path) {
    if !rustix::process::geteuid().is_root() || tool("setpriv").is_none() {
        eprintln!(
            "another user not tried: needs root and setpriv (the unit tests cover the check)"
        );
        return;
    }
    let as_nobody = || {
        let out = Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(env!("CARGO_BIN_EXE_cairn"))
            .args(["stats", "--socket"])
            .arg(socket)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1));
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    // Let uid 65534 reach the socket's directory.
    for d in [dir, &dir.join("cairn-data")] {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let stderr = as_nobody();
    assert!(stderr.contains("Permission denied"), "{stderr}");
    std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o666)).unwrap();
    let stderr = as_nobody();
    assert!(
        stderr.contains("the client runs as uid 65534, but only the server's owner (uid 0)"),
        "{stderr}"
    );
}
