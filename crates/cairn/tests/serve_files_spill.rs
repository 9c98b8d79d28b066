//! `cairn serve --files DIR --spill FILE`: the SSD level of the gateway's
//! cache survives `kill -9` and a clean stop. After either, a restart serves
//! every unchanged object from the SSD (the tier's misses count only the
//! changed object's blocks), every byte is the file's, a file changed while
//! the server was down is read anew, and the log says what the open found.
#![allow(clippy::unwrap_used)]

mod common;

use std::io::Read;
use std::net::SocketAddr;
use std::time::{Duration, SystemTime};

use common::metrics::{exchange, get, serve_files_in};
use common::{Server, cairn, terminate};

fn pattern(len: usize, seed: u32) -> Vec<u8> {
    (0..len as u32)
        .map(|i| (i.wrapping_add(seed).wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect()
}

/// A counter's value in the gateway's Prometheus text.
fn metric(address: SocketAddr, name: &str) -> u64 {
    let text = get(address, "/metrics").text();
    let line = text
        .lines()
        .find(|l| l.starts_with(&format!("cairn_files_{name}{{")))
        .unwrap_or_else(|| panic!("no {name} in {text}"));
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

const FLAGS: &[&str] = &[
    "--block-size",
    "256KiB",
    "--cache-size",
    "1MiB",
    "--policy",
    "lru",
    "--spill",
    "ssd.img",
];

fn start(dir: &std::path::Path, extra: &[&str]) -> (Server, SocketAddr, SocketAddr, String) {
    let mut args = FLAGS.to_vec();
    args.extend(extra);
    let (server, gateway, metrics, stderr) = serve_files_in(dir, &args, true);
    // The open's line is logged before the addresses are printed.
    let mut stderr = stderr.unwrap();
    let mut log = Vec::new();
    let mut byte = [0u8; 1];
    while !String::from_utf8_lossy(&log).contains("spill: ") || log.last() != Some(&b'\n') {
        if stderr.read(&mut byte).unwrap() == 0 {
            break;
        }
        log.push(byte[0]);
    }
    std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
    (
        server,
        gateway,
        metrics,
        String::from_utf8_lossy(&log).into_owned(),
    )
}

fn read_all(gateway: SocketAddr, files: &[(&str, Vec<u8>)]) {
    for (name, bytes) in files {
        let request = format!("GET /media/{name} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        let answer = exchange(gateway, request.as_bytes());
        assert_eq!(answer.status, 200, "{name}");
        assert!(answer.body == *bytes, "{name}: the bytes differ");
    }
}

#[test]
fn the_spill_survives_kill_9_and_a_clean_stop() {
    survives_kill_9_and_a_clean_stop(&tempfile::tempdir().unwrap(), &[]);
}

/// The same with `--spill-direct`, in the target directory (tmpfs before
/// Linux 6.6 refuses `O_DIRECT`): every read and write the tier makes of the
/// SSD file is aligned, and the log names the file as opened `O_DIRECT`.
#[test]
fn a_direct_spill_survives_kill_9_and_a_clean_stop() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    survives_kill_9_and_a_clean_stop(&dir, &["--spill-direct"]);
}

fn survives_kill_9_and_a_clean_stop(dir: &tempfile::TempDir, direct: &[&str]) {
    let start = |dir: &std::path::Path, extra: &[&str]| {
        let (server, gateway, metrics, log) = start(dir, &[extra, direct].concat());
        assert_eq!(
            log.contains("(O_DIRECT)"),
            !direct.is_empty(),
            "the log names the spill's file as opened O_DIRECT or not: {log}"
        );
        (server, gateway, metrics, log)
    };
    let files_dir = dir.path().join("files");
    std::fs::create_dir(&files_dir).unwrap();
    let mut files = vec![
        ("a.mp4", pattern(3_000_000, 1)),
        ("b.bin", pattern(5_000_000, 2)),
    ];
    for (name, bytes) in &files {
        std::fs::write(files_dir.join(name), bytes).unwrap();
    }
    let (server, gateway, metrics, log) = start(dir.path(), &["--spill-size", "64MiB"]);
    assert!(
        log.contains("spill: formatted") && log.contains("it was blank"),
        "{log}"
    );
    read_all(gateway, &files);
    read_all(gateway, &files);
    // The DRAM cache holds 4 of the 32 blocks: the second pass was the SSD's.
    let (hits, misses) = (
        metric(metrics, "spill_hits_total"),
        metric(metrics, "spill_misses_total"),
    );
    assert_eq!(misses, 46 + 77, "64 KiB blocks of each file, once");
    assert!(hits >= 100, "{hits}");
    assert_eq!(metric(metrics, "spill_objects"), 2);
    // The tier's journal is written every second; then the crash.
    std::thread::sleep(Duration::from_millis(1500));
    let mut server = server;
    let mut child = server.take();
    child.kill().unwrap();
    child.wait().unwrap();

    // b changes while the server is down (another size and time).
    files[1].1 = pattern(4_500_000, 3);
    std::fs::write(files_dir.join("b.bin"), &files[1].1).unwrap();
    let later = SystemTime::now() + Duration::from_secs(5);
    std::fs::File::options()
        .write(true)
        .open(files_dir.join("b.bin"))
        .unwrap()
        .set_modified(later)
        .unwrap();
    let (server, gateway, metrics, log) = start(dir.path(), &[]);
    assert!(log.contains("recovered after a crash"), "{log}");
    assert!(log.contains("of 2 objects"), "{log}");
    read_all(gateway, &files);
    assert_eq!(
        metric(metrics, "spill_misses_total"),
        69,
        "only the changed b's 64 KiB blocks came from the directory"
    );
    let mut server = server;
    terminate(server.take());

    let (server, gateway, metrics, log) = start(dir.path(), &[]);
    assert!(log.contains("warm after a clean stop"), "{log}");
    read_all(gateway, &files);
    assert_eq!(metric(metrics, "spill_misses_total"), 0);
    let mut server = server;
    terminate(server.take());
}

/// `--spill-exclusive`: the SSD takes what the 1 MiB DRAM cache drops and
/// lets go of what it reads back, so the second pass reads nothing from the
/// directory; a clean stop hands DRAM's last blocks down too, so after the
/// restart not one block comes from the directory. Restarted again with
/// `--spill-no-promote`, the SSD serves every block where it is: nothing
/// moves up, nothing is let go.
#[test]
fn an_exclusive_spill_holds_what_dram_drops_and_is_warm_with_both_after_a_stop() {
    let dir = tempfile::tempdir().unwrap();
    let files_dir = dir.path().join("files");
    std::fs::create_dir(&files_dir).unwrap();
    let files = vec![
        ("a.mp4", pattern(3_000_000, 4)),
        ("b.bin", pattern(5_000_000, 5)),
    ];
    for (name, bytes) in &files {
        std::fs::write(files_dir.join(name), bytes).unwrap();
    }
    let (server, gateway, metrics, log) =
        start(dir.path(), &["--spill-size", "64MiB", "--spill-exclusive"]);
    assert!(
        log.contains("exclusive: it holds what the DRAM cache drops"),
        "{log}"
    );
    read_all(gateway, &files);
    read_all(gateway, &files);
    assert_eq!(
        metric(metrics, "spill_misses_total"),
        46 + 77,
        "each 64 KiB block from the directory once: the second pass was DRAM's and the SSD's"
    );
    let taken = metric(metrics, "spill_taken_total");
    assert!(
        taken >= 100,
        "the SSD let go of what DRAM read back: {taken}"
    );
    let mut server = server;
    terminate(server.take());

    let (server, gateway, metrics, log) = start(dir.path(), &["--spill-exclusive"]);
    assert!(log.contains("warm after a clean stop"), "{log}");
    read_all(gateway, &files);
    assert_eq!(
        metric(metrics, "spill_misses_total"),
        0,
        "DRAM's blocks were handed down at the stop"
    );
    let mut server = server;
    terminate(server.take());

    let (server, gateway, metrics, log) =
        start(dir.path(), &["--spill-exclusive", "--spill-no-promote"]);
    assert!(log.contains("serves its hits in place"), "{log}");
    read_all(gateway, &files);
    read_all(gateway, &files);
    assert_eq!(
        [
            metric(metrics, "spill_kept_total"),
            metric(metrics, "spill_taken_total"),
            metric(metrics, "spill_misses_total"),
        ],
        [2 * (12 + 20), 0, 0],
        "each pass reads all 32 blocks from the SSD and leaves them there"
    );
    let mut server = server;
    terminate(server.take());
}

#[test]
fn spill_flags_are_checked_before_listening() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("files")).unwrap();
    for (args, expected) in [
        (
            vec!["--spill", "none.img"],
            "no such file; give --spill-size",
        ),
        (
            vec!["--spill", "files"],
            "not a regular file; give --spill-map",
        ),
        (
            vec![
                "--spill",
                "s.img",
                "--spill-size",
                "64MiB",
                "--spill-policy",
                "opt:x=1",
            ],
            "--spill-policy",
        ),
        (vec!["--spill-size", "1GiB"], "--spill"),
        (
            vec![
                "--spill",
                "s.img",
                "--spill-size",
                "64MiB",
                "--spill-no-promote",
            ],
            "--spill-exclusive",
        ),
    ] {
        let output = cairn()
            .current_dir(dir.path())
            .args(["serve", "--files", "files", "--listen", "tcp:127.0.0.1:0"])
            .args(&args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{args:?} started");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
}

#[test]
fn the_spill_help_example_runs_as_printed_and_is_warm_after_a_restart() {
    let (serve_line, curl_line) = common::examples::continued_example(&["serve", "--help"], |l| {
        l.starts_with("cairn serve --files") && l.contains("--spill")
    });
    let curl_line = curl_line.as_str();
    assert!(curl_line.starts_with("curl "), "{curl_line}");
    let metrics_port = serve_line.rsplit(':').next().unwrap();
    let gateway_port = serve_line
        .split("--listen tcp:127.0.0.1:")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("videos")).unwrap();
    let movie = pattern(3_000_000, 4);
    std::fs::write(dir.path().join("videos/movie.mp4"), &movie).unwrap();
    let gateway: SocketAddr = format!("127.0.0.1:{gateway_port}").parse().unwrap();
    let files = [("movie.mp4", movie)];
    let mut misses = Vec::new();
    for start in 0..2 {
        let Some(mut server) =
            common::examples::serve_example(&serve_line, dir.path(), &[gateway_port, metrics_port])
        else {
            return;
        };
        read_all(gateway, &files);
        let out = common::examples::bash(curl_line, dir.path());
        let text = common::examples::text(&out.stdout);
        assert!(out.status.success(), "{curl_line}: {text}");
        assert!(
            text.contains("cairn_files_spill_objects{export=\"media\"} 1\n"),
            "start {start}: {text}"
        );
        let value = |name: &str| -> u64 {
            text.lines()
                .find(|l| l.starts_with(&format!("cairn_files_{name}{{")))
                .and_then(|l| l.rsplit(' ').next())
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("no {name}: {text}"))
        };
        misses.push((value("spill_misses_total"), value("spill_hits_total")));
        terminate(server.take());
    }
    assert!(dir.path().join("spill.img.map").is_file());
    // 3,000,000 bytes are 46 blocks of 64 KiB: all from the directory,
    // then all from the SSD.
    assert_eq!(misses, [(46, 0), (0, 46)]);
}
