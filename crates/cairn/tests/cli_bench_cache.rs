//! `cairn bench stream` and `cairn bench hetero` run end to end at a tiny
//! scale and print their tables (the full runs are minutes; these are smoke
//! tests of the wiring, the flags and the output shape).
#![allow(clippy::unwrap_used)]

use std::process::Command;

fn cairn(args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "cairn {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

#[test]
fn bench_stream_prints_a_table_per_phase_with_every_policy() {
    let out = cairn(&[
        "bench",
        "stream",
        "--size",
        "8MiB",
        "--block",
        "256KiB",
        "--request",
        "256KiB",
        "--threads",
        "2,4",
        "--seconds",
        "0.05",
        "--seek-us",
        "100",
        "--bandwidth-mb-s",
        "5000",
    ]);
    for title in [
        "read: aggregate MB/s",
        "re-read: aggregate MB/s",
        "random read: aggregate MB/s",
        "re-read: hit ratio %",
    ] {
        assert!(out.contains(title), "{title} missing:\n{out}");
    }
    for row in ["no cache", "lru", "lfu", "ons"] {
        assert!(
            out.lines().any(|l| l.starts_with(row)),
            "{row} missing:\n{out}"
        );
    }
    assert!(out.contains("N=2") && out.contains("N=4"));
}

#[test]
fn bench_hetero_compares_cost_groups_with_lru_at_each_share() {
    let out = cairn(&[
        "bench",
        "hetero",
        "--requests",
        "1500",
        "--shares",
        "0,100",
        "--speedup",
        "100",
        "--writes",
    ]);
    for title in [
        "throughput, MB/s",
        "hit ratio, %",
        "throughput gain over lru, %",
        "costs at the end",
    ] {
        assert!(out.contains(title), "{title} missing:\n{out}");
    }
    assert!(out.contains("0:100") && out.contains("100:0"));
}

#[test]
fn bench_stream_refuses_bad_sizes() {
    let output = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(["bench", "stream", "--size", "1MiB", "--request", "1MiB"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("--size"));
}
