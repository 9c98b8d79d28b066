//! `cairn sim --ttl` and a trace's own TTLs (libCacheSim's oracleSysTwrNS):
//! the `expired` column counts what the TTL rules give on a trace worked by
//! hand (expiry set at insertion, not refreshed by hits, strictly after),
//! `--ignore-trace-ttl` drops the trace's TTLs, and bad input is a clear
//! error. With `--l2` an expired unit leaves both levels and an L2 hit does
//! not refresh its expiry; with `--prefetch` a prefetched unit takes the
//! default TTL.

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

/// The named columns of the first row of `--csv -`.
fn columns<const N: usize>(output: &Output, names: [&str; N]) -> [u64; N] {
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let mut lines = stdout.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let row: Vec<&str> = lines.next().unwrap().split(',').collect();
    names.map(|name| {
        let at = header.iter().position(|h| *h == name).unwrap();
        row[at].parse().unwrap()
    })
}

/// (hits, misses, expired) from `--csv -`.
fn counts(output: &Output) -> (u64, u64, u64) {
    let [hits, misses, expired] = columns(output, ["hits", "misses", "expired"]);
    (hits, misses, expired)
}

/// Writes `steps` (seconds, object, ttl) as an oracleSysTwrNS trace.
fn write_trace(path: &Path, steps: &[(u64, u64, u32)]) {
    let mut bytes = Vec::new();
    for &(time_s, object, ttl) in steps {
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
    std::fs::write(path, bytes).unwrap();
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
    let output = cairn(dir.path(), &["sim", "-p", "lru", "--ttl", "999999999999d"]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("out of range"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// L1 LRU of 1 object over L2 LRU of 2, objects living 10 s (`--ttl 10s`):
///
/// - 0 s, object 1: a miss of both levels, fetched to expire at 10 s.
/// - 1 s, object 2: a miss, expires at 11 s; L1 drops 1 (inclusive: L2
///   keeps it; exclusive: it moves down).
/// - 2 s, object 1: an L2 hit, moved up to L1 *with its expiry, 10 s*.
/// - 11 s, object 1: expired (10 s < 11 s): removed from both levels, a
///   miss; fetched again to expire at 21 s. Had the L2 hit refreshed it,
///   this would be an L1 hit.
/// - 12 s, object 2: expired (11 s), held by L2 alone: a miss.
/// - 13 s, object 1: an L2 hit.
///
/// Without TTL: 11 s hits L1, 12 s and 13 s hit L2.
#[test]
fn an_expired_unit_leaves_both_levels() {
    let dir = tempfile::tempdir().unwrap();
    let steps = [
        (0, 1, 0),
        (1, 2, 0),
        (2, 1, 0),
        (11, 1, 0),
        (12, 2, 0),
        (13, 1, 0),
    ];
    write_trace(&dir.path().join("t.oracleSysTwrNS"), &steps);
    let names = ["l1_hits", "l2_hits", "misses", "expired"];
    for mode in ["inclusive", "exclusive"] {
        let sim = |extra: &[&str]| {
            let mut args = vec![
                "sim",
                "--trace",
                "t.oracleSysTwrNS",
                "-p",
                "lru",
                "-s",
                "1",
                "--l2",
                "lru@2",
                "--l2-mode",
                mode,
                "--csv",
                "-",
            ];
            args.extend_from_slice(extra);
            columns(&cairn(dir.path(), &args), names)
        };
        assert_eq!(sim(&["--ttl", "10s"]), [0, 2, 4, 2], "{mode}");
        assert_eq!(sim(&[]), [1, 3, 2, 0], "{mode}");
    }
}

/// LRU of 10 objects beside OBL with k = 1 (an access to object n + 1 right
/// after n loads n + 2). Object 2's request carries a 4 s TTL of its own.
///
/// With `--ttl 3s`: 0 s, 1: miss (expires 3 s); 0 s, 2: miss (its own TTL:
/// 4 s), loads 3 (the default: 3 s); 5 s, 3: expired, a miss, loads 4
/// (8 s); 6 s, 4: a prefetch hit, loads 5 (9 s); 6 s, 2: expired (4 s), a
/// miss; 7 s, 3: a hit, but not a prefetch hit (the demand miss at 5 s
/// loaded it); 20 s, 5 and 1: expired. 2 hits, 6 misses, 4 expired, 3
/// prefetched, 1 prefetch hit.
///
/// Trace TTLs alone: prefetched units never expire (they have no request of
/// their own), so 3, 4 and 5 are prefetch hits; only 2 expires.
#[test]
fn prefetched_units_take_the_default_ttl() {
    let dir = tempfile::tempdir().unwrap();
    let steps = [
        (0, 1, 0),
        (0, 2, 4),
        (5, 3, 0),
        (6, 4, 0),
        (6, 2, 0),
        (7, 3, 0),
        (20, 5, 0),
        (20, 1, 0),
    ];
    write_trace(&dir.path().join("t.oracleSysTwrNS"), &steps);
    let names = ["hits", "misses", "expired", "prefetched", "prefetch_hits"];
    let sim = |extra: &[&str]| {
        let mut args = vec![
            "sim",
            "--trace",
            "t.oracleSysTwrNS",
            "-p",
            "lru",
            "-s",
            "10",
            "--prefetch",
            "obl:sequential_confidence_k=1",
            "--csv",
            "-",
        ];
        args.extend_from_slice(extra);
        columns(&cairn(dir.path(), &args), names)
    };
    assert_eq!(sim(&["--ttl", "3s"]), [2, 6, 4, 3, 1]);
    assert_eq!(sim(&[]), [5, 3, 1, 3, 3]);
    assert_eq!(sim(&["--ignore-trace-ttl"]), [6, 2, 0, 3, 3]);
}

/// `cairn trace convert` carries TTLs to oracleSysTwrNS and to the CSV (a
/// `ttl` column), so the converted trace expires objects as the original
/// does; to oracleGeneral it drops them and warns, naming how many.
#[test]
fn convert_carries_ttls_or_says_it_drops_them() {
    let dir = tempfile::tempdir().unwrap();
    // Objects 1 and 3 carry TTLs (10 s, 2 s), as in the first test.
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
    write_trace(&dir.path().join("t.oracleSysTwrNS"), &steps);
    let convert = |from: &str, to: &str| {
        let output = cairn(dir.path(), &["trace", "convert", from, to]);
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stderr).into_owned()
    };
    let sim = |trace: &str| {
        counts(&cairn(
            dir.path(),
            &[
                "sim", "--trace", trace, "-p", "lru", "-s", "4", "--csv", "-",
            ],
        ))
    };
    assert_eq!(sim("t.oracleSysTwrNS"), (6, 5, 2));
    for (from, to) in [
        ("t.oracleSysTwrNS", "t.csv"),
        ("t.csv", "u.oracleSysTwrNS.zst"),
        ("u.oracleSysTwrNS.zst", "u.csv"),
    ] {
        let stderr = convert(from, to);
        assert!(!stderr.contains("WARN"), "{from} -> {to}: {stderr}");
        assert_eq!(sim(to), (6, 5, 2), "{from} -> {to}");
    }
    let csv = std::fs::read_to_string(dir.path().join("u.csv")).unwrap();
    let mut lines = csv.lines();
    assert_eq!(lines.next(), Some("time_us,object,offset,size,op,ttl"));
    assert_eq!(lines.next(), Some("0,1,0,100,r,10"));
    // oracleGeneral has no TTL field: the two requests' TTLs are dropped,
    // said on stderr, and nothing expires in what was written.
    let stderr = convert("t.csv", "t.oracleGeneral.bin");
    assert!(
        stderr.contains("WARN")
            && stderr.contains("oracle has no TTL field: the TTLs of 2 requests were dropped")
            && stderr.contains("NAME.oracleSysTwrNS"),
        "{stderr}"
    );
    assert_eq!(sim("t.oracleGeneral.bin"), (8, 3, 0));
    // --ttl gives the expiry back, as a default for every request.
    let output = cairn(
        dir.path(),
        &[
            "sim",
            "--trace",
            "t.oracleGeneral.bin",
            "-p",
            "lru",
            "-s",
            "4",
            "--ttl",
            "3s",
            "--csv",
            "-",
        ],
    );
    assert_eq!(counts(&output), (4, 7, 4));
    // A trace without TTLs converts without a word about them.
    let stderr = convert("t.oracleGeneral.bin", "v.txt");
    assert!(!stderr.contains("TTL"), "{stderr}");
}

/// `cairn mrc` has no TTL, and says why: with TTL, LRU is not a stack
/// algorithm. The reason, shown by `cairn sim`: with objects living 10 s,
/// A B C A(5 s) A(12 s) ends with a hit in an LRU of 1 (which evicted A and
/// fetched it again at 5 s, to expire at 15 s) and a miss in an LRU of 3
/// (whose copy from 0 s expired at 10 s): the larger cache misses where
/// the smaller hits, so no single stack distance describes the access.
#[test]
fn mrc_refuses_ttl_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let first = [(0, 1, 0), (1, 2, 0), (2, 3, 0), (5, 1, 0)];
    let mut all = first.to_vec();
    all.push((12, 1, 0));
    write_trace(&dir.path().join("first.oracleSysTwrNS"), &first);
    write_trace(&dir.path().join("all.oracleSysTwrNS"), &all);
    let hits = |trace: &str, size: &str| {
        let output = cairn(
            dir.path(),
            &[
                "sim", "--trace", trace, "-p", "lru", "-s", size, "--ttl", "10s", "--csv", "-",
            ],
        );
        counts(&output).0
    };
    // The last access hits at size 1 and misses at size 3.
    assert_eq!(
        hits("all.oracleSysTwrNS", "1") - hits("first.oracleSysTwrNS", "1"),
        1
    );
    assert_eq!(
        hits("all.oracleSysTwrNS", "3") - hits("first.oracleSysTwrNS", "3"),
        0
    );

    let refused = |args: &[&str]| {
        let output = cairn(dir.path(), args);
        assert!(!output.status.success(), "{args:?}");
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        assert!(!stderr.contains("panicked"), "{stderr}");
        assert!(
            stderr.contains("not a stack algorithm") || stderr.contains("with TTL it is not"),
            "{stderr}"
        );
        stderr
    };
    let stderr = refused(&["mrc", "--ttl", "30s"]);
    assert!(
        stderr.contains("--ttl:") && stderr.contains("cairn sim -p lru --ttl"),
        "{stderr}"
    );
    let stderr = refused(&["mrc", "--trace", "all.oracleSysTwrNS"]);
    assert!(
        stderr.contains("carries TTLs (oraclesystwrns)") && stderr.contains("--ignore-trace-ttl"),
        "{stderr}"
    );
    // Without the TTLs it is LRU's curve as ever.
    let output = cairn(
        dir.path(),
        &[
            "mrc",
            "--trace",
            "all.oracleSysTwrNS",
            "--ignore-trace-ttl",
            "--csv",
            "-",
        ],
    );
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}
