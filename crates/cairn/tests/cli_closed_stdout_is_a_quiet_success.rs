//! Every command whose reader goes away (`cairn sim | head -1`) exits 0 with
//! nothing on stderr, as ripgrep does. Rust ignores SIGPIPE, so a write to a
//! closed pipe fails with EPIPE, and `println!` turns that into a "failed
//! printing to stdout" panic (status 101): the bug this guards against.
//!
//! Each command runs with stdout a pipe whose read end is closed at once, or
//! after one line (then the command may or may not have finished writing:
//! either way it must exit 0 quietly).
#![allow(clippy::unwrap_used)]

mod common;

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::Stdio;

use common::cairn;

/// Runs `cairn args`, closes its stdout after reading `lines` lines, and
/// asserts exit status 0 and an empty stderr.
fn quiet_on_closed_stdout(args: &[&str], lines: usize) {
    let mut child = cairn()
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    for _ in 0..lines {
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        assert!(!line.is_empty(), "{args:?}: fewer than {lines} lines");
    }
    drop(stdout);
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    let status = child.wait().unwrap();
    assert!(
        !stderr.contains("panicked"),
        "{args:?} (after {lines} lines) panicked: {stderr}"
    );
    assert!(
        status.success(),
        "{args:?} (after {lines} lines) exited with {status}: {stderr}"
    );
    assert!(
        stderr.is_empty(),
        "{args:?} (after {lines} lines) wrote to stderr: {stderr}"
    );
}

fn both_ways(args: &[&str]) {
    quiet_on_closed_stdout(args, 0);
    quiet_on_closed_stdout(args, 1);
}

#[test]
fn the_simulator_commands_exit_quietly() {
    both_ways(&["sim", "--quiet"]);
    both_ways(&[
        "sim", "--quiet", "--policy", "lru", "--size", "10%", "--json", "-",
    ]);
    both_ways(&["mrc", "--quiet"]);
}

#[test]
fn the_trace_commands_exit_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("z.oracleGeneral.bin");
    let trace = trace.to_str().unwrap();
    let generate = [
        "trace",
        "gen",
        "--quiet",
        "zipf",
        "items=1000",
        "alpha=1.0",
        "requests=20000",
        "-o",
        trace,
    ];
    quiet_on_closed_stdout(&generate, 0);
    assert!(Path::new(trace).exists());
    both_ways(&["trace", "stats", trace]);
    both_ways(&["trace", "stats", "--json", trace]);
    both_ways(&["trace", "analyze", "--quiet", trace]);
    both_ways(&["trace", "analyze", "--quiet", "--json", trace]);
    let csv = dir.path().join("z.csv");
    quiet_on_closed_stdout(
        &["trace", "convert", "--quiet", trace, csv.to_str().unwrap()],
        0,
    );
}

#[test]
fn reproduce_exits_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().to_str().unwrap();
    both_ways(&[
        "reproduce",
        "ons",
        "--quiet",
        "--scale",
        "0.05",
        "--out",
        out,
    ]);
    both_ways(&[
        "reproduce",
        "cost",
        "--quiet",
        "--scale",
        "0.05",
        "--out",
        out,
    ]);
}

#[test]
fn fsck_and_inspect_exit_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let image = dir.path().join("ld.img");
    common::log_disk_image(&image);
    let image = image.to_str().unwrap();
    both_ways(&["fsck", image]);
    both_ways(&["inspect", image]);
}

#[test]
fn help_version_and_the_default_spec_exit_quietly() {
    both_ways(&["--help"]);
    both_ways(&["sim", "--help"]);
    both_ways(&["serve", "--help"]);
    both_ways(&["help", "fsck"]);
    both_ways(&["--version"]);
    both_ways(&["serve", "--print-default-config"]);
}
