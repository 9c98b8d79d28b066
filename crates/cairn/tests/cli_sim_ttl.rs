//! `cairn sim --ttl` and a trace's own TTLs (libCacheSim's oracleSysTwrNS):
//! the `expired` column counts what the TTL rules give on a trace worked by
//! hand (expiry set at insertion, not refreshed by hits, strictly after),
//! `--ignore-trace-ttl` drops the trace's TTLs, and bad input is a clear
//! error.

#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::{Command, Output};

use cairn_trace::read::oracle_sys_twr_ns;
use cairn_trace::{NEVER, Op, Request};

fn cairn(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("cairn runs")
}

/// (hits, misses, expired) from `--csv -`, found by the header's names.
fn counts(output: &Output) -> (u64, u64, u64) {
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let mut lines = stdout.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let row: Vec<&str> = lines.next().unwrap().split(',').collect();
    let column = |name: &str| -> u64 {
        let at = header.iter().position(|h| *h == name).unwrap();
        row[at].parse().unwrap()
    };
    (column("hits"), column("misses"), column("expired"))
}

#[test]
fn expiry_follows_the_trace_ttls_and_the_default() {
    let dir = tempfile::tempdir().unwrap();
    // (seconds, object, ttl): object 1 lives 10 s, object 3 lives 2 s.
    let steps = [
        (0, 1, 10),
        (5, 1, 0),
        (10, 1, 0),
        (11, 1, 0),
        (11, 2, 0),
        (14, 2, 0),
        (15, 2, 0),
        (15, 1, 0),
        (20, 3, 2),
        (22, 3, 0),
        (23, 3, 0),
    ];
    let mut bytes = Vec::new();
    for (time_s, object, ttl) in steps {
        bytes.extend_from_slice(&oracle_sys_twr_ns::encode(&Request {
            time_us: time_s * 1_000_000,
            object,
            offset: 0,
            size: 100,
            op: Op::Read,
            ttl,
            next: NEVER,
        }));
    }
    std::fs::write(dir.path().join("t.oracleSysTwrNS"), bytes).unwrap();
    let sim = |extra: &[&str]| {
        let mut args = vec![
            "sim",
            "--trace",
            "t.oracleSysTwrNS",
            "-p",
            "lru",
            "-s",
            "4",
            "--csv",
            "-",
        ];
        args.extend_from_slice(extra);
        counts(&cairn(dir.path(), &args))
    };
    // The trace's TTLs alone: object 1 expires at 11 s (and comes back with
    // none), object 3 at 23 s.
    assert_eq!(sim(&[]), (6, 5, 2));
    // A 3 s default for the requests without one (as the naive-model test's
    // worked trace): 4 expirations.
    assert_eq!(sim(&["--ttl", "3s"]), (4, 7, 4));
    assert_eq!(sim(&["--ttl", "3"]), (4, 7, 4));
    // Trace TTLs ignored and no default: nothing expires.
    assert_eq!(sim(&["--ignore-trace-ttl"]), (8, 3, 0));
    // Threads do not change it.
    assert_eq!(sim(&["--ttl", "3000ms", "--threads", "2"]), (4, 7, 4));
}

#[test]
fn bad_ttl_input_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let output = cairn(dir.path(), &["sim", "-p", "lru", "-s", "1%", "--ttl", "5x"]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("unknown unit `x`"), "{stderr}");
    let output = cairn(
        dir.path(),
        &[
            "sim", "-p", "lru", "-s", "1%", "--ttl", "1m", "--l2", "lru@5%",
        ],
    );
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--ttl with --l2"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}
