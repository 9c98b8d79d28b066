//! `cairn bench stream` and `cairn bench hetero` run end to end at a tiny
//! scale and print their tables (the full runs are minutes; these are smoke
//! tests of the wiring, the flags and the output shape).
#![allow(clippy::unwrap_used)]

use std::process::Command;

fn cairn(args: &[&str]) -> String {
    // Temporary files in TMPDIR, where nginx's workers can reach its cache
    // (a target directory under a private checkout they cannot); a spill
    // there opened `--spill-direct` needs a file system that takes
    // `O_DIRECT` (tmpfs does from Linux 6.6).
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

/// The row `name` of the table titled `title`, as numbers.
fn table_row(out: &str, title: &str, name: &str) -> Vec<f64> {
    let table = &out[out
        .find(title)
        .unwrap_or_else(|| panic!("{title} missing:\n{out}"))..];
    let line = table
        .lines()
        .find(|l| l.split_whitespace().next() == Some(name))
        .unwrap_or_else(|| panic!("no {name} row under {title}:\n{out}"));
    line.split_whitespace()
        .skip(1)
        .map(|v| v.parse().unwrap())
        .collect()
}

/// papers/004's shape on real I/O at reduced scale (the first 40,000
/// requests of the sample, virtual pace): the online costs come out at the
/// devices' true 1:3, and cost groups beat LRU over the devices' busy time at
/// the mixed splits and never lose to it.
#[test]
fn bench_hetero_cost_groups_beat_lru_at_mixed_splits() {
    let out = cairn(&[
        "bench",
        "hetero",
        "--requests",
        "40000",
        "--writes",
        "--cache",
        "10%",
        "--shares",
        "0,60,80",
    ]);
    let title = "throughput over the devices' modelled busy time";
    let lru = table_row(&out, title, "lru");
    let cost = table_row(&out, title, "cost");
    assert_eq!((lru.len(), cost.len()), (3, 3), "{out}");
    for (share, (c, l)) in ["0:100", "60:40", "80:20"]
        .iter()
        .zip(cost.iter().zip(&lru))
    {
        assert!(c >= &(l * 0.999), "cost {c} < lru {l} at {share}:\n{out}");
    }
    assert!(cost[1] > lru[1] * 1.01, "no gain at 60:40:\n{out}");
    assert!(cost[2] > lru[2] * 1.02, "no gain at 80:20:\n{out}");
    // The costs the cache learnt online, at 80:20: SSD 1, HDD 3.
    let costs = &out[out.find("costs at the end").unwrap()..];
    let row = costs
        .lines()
        .find(|l| l.starts_with("cost "))
        .unwrap_or_else(|| panic!("{out}"));
    let last: Vec<f64> = row
        .split_whitespace()
        .last()
        .unwrap()
        .split('/')
        .map(|v| v.parse().unwrap())
        .collect();
    assert_eq!(last.len(), 4, "{row}");
    for (got, want) in last.iter().zip([1.0, 1.0, 3.0, 3.0]) {
        assert!((got - want).abs() < 0.05, "costs {last:?}, want 1/1/3/3");
    }
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

/// Whether nginx is on the PATH; its absence fails the test where
/// `CAIRN_REQUIRE_SYSTEM_TOOLS` is set (test.sh installs it).
fn nginx_found() -> bool {
    let nginx = std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join("nginx").is_file()));
    assert!(
        nginx || std::env::var_os("CAIRN_REQUIRE_SYSTEM_TOOLS").is_none(),
        "nginx is missing and CAIRN_REQUIRE_SYSTEM_TOOLS is set (test.sh installs nginx-light)"
    );
    nginx
}

/// `cairn bench files` at a tiny scale: 2 objects of 4 MiB, 256 KiB blocks
/// and requests, 0.2 s phases, a fast origin; then `more`.
fn tiny_bench_files(readers: &str, more: &[&str]) -> String {
    let mut args = vec![
        "bench",
        "files",
        "--objects",
        "2",
        "--size",
        "4MiB",
        "--block",
        "256KiB",
        "--request",
        "256KiB",
        "--readers",
        readers,
        "--seconds",
        "0.2",
        "--throttle",
        "200us,2GiB/s",
    ];
    args.extend(more);
    cairn(&args)
}

/// `cairn bench files` at a tiny scale: both fronts' rows with numbers (the
/// nginx columns need nginx; without it they are `-`), the policy table,
/// and bad flags refused.
#[test]
fn bench_files_prints_cairn_against_nginx_and_every_policy() {
    let nginx = nginx_found();
    let out = tiny_bench_files("2,3", &["--policies", "ons,lru", "--rounds", "2"]);
    let rows: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split_whitespace().collect())
        .filter(|w: &Vec<&str>| {
            w.len() >= 6
                && w[0].parse::<usize>().is_ok()
                && ["read", "re-read", "random"].contains(&w[1])
        })
        .collect();
    assert_eq!(rows.len(), 6, "{out}");
    for (i, row) in rows.iter().enumerate() {
        assert_eq!(row[1], ["read", "re-read", "random"][i % 3], "{out}");
        let ours: f64 = row[2].parse().unwrap();
        assert!(ours > 0.0, "{out}");
        if nginx {
            let theirs: f64 = row[3].parse().unwrap();
            let ratio: f64 = row[4].parse().unwrap();
            assert!(
                theirs > 0.0 && (ratio - ours / theirs).abs() < 0.02 * ratio + 0.01,
                "{out}"
            );
            // What nginx's cache held: something, and at most all 8 MiB
            // (4 MiB per object) plus its temporary files.
            let held: u64 = row[7].parse().unwrap();
            assert!(held <= 16, "{out}");
            if row[1] == "re-read" {
                assert!(held > 0, "{out}");
            }
            // Cairn again at what nginx held, when that was more than --cache.
            if row[8] != "-" {
                let matched: f64 = row[8].parse().unwrap();
                let ratio: f64 = row[9].parse().unwrap();
                assert!(
                    matched > 0.0 && (ratio - matched / theirs).abs() < 0.02 * ratio + 0.01,
                    "{out}"
                );
            }
        } else {
            assert_eq!(row[3], "-", "{out}");
        }
    }
    for policy in ["ons", "lru"] {
        let row: Vec<&str> = out
            .lines()
            .find(|l| l.starts_with(policy) && l.contains('%'))
            .unwrap_or_else(|| panic!("no {policy} row: {out}"))
            .split_whitespace()
            .collect();
        assert_eq!(row.len(), 5, "{out}");
        let random: f64 = row[4].parse().unwrap();
        assert!(random > 0.0, "{out}");
    }
    // --rounds 2: medians, and ONS against LRU round by round.
    assert!(out.contains("medians of 2 rounds"), "{out}");
    let against = out
        .lines()
        .find(|l| l.starts_with("re-read, ons against lru: at or ahead in "))
        .unwrap_or_else(|| panic!("no comparison line: {out}"));
    let ahead: usize = against
        .split_whitespace()
        .nth(8)
        .and_then(|w| w.parse().ok())
        .unwrap_or_else(|| panic!("{against}"));
    assert!(ahead <= 2 && against.contains("of 2 rounds"), "{against}");
    for (flag, value, expected) in [
        ("--rounds", "0", "--rounds"),
        ("--throttle", "2ms", "OP,BANDWIDTH"),
        ("--readers", "0", "--readers"),
        ("--objects", "0", "--objects must be between"),
        ("--policies", "opt", "needs knowledge"),
    ] {
        let output = Command::new(env!("CARGO_BIN_EXE_cairn"))
            .args([
                "bench",
                "files",
                "--size",
                "4MiB",
                "--block",
                "256KiB",
                "--request",
                "256KiB",
                flag,
                value,
            ])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{flag} {value}");
        assert!(stderr.contains(expected), "{flag} {value}: {stderr}");
    }
}

/// `cairn bench files --spill`: Cairn's fronts over an exclusive (or
/// inclusive) spill, said so in the header, rows with numbers and no @held
/// columns; refused with another workload.
#[test]
fn bench_files_puts_a_spill_under_cairns_front() {
    for (extra, kind) in [
        (&[][..], "exclusive spill of 4194304 B)"),
        (&["--spill-inclusive"][..], "inclusive spill of 4194304 B)"),
        (
            &["--spill-no-promote", "--spill-direct"][..],
            "exclusive, in-place spill of 4194304 B, O_DIRECT)",
        ),
    ] {
        let mut args = vec!["--policies", "ons", "--cache", "2MiB", "--spill", "4MiB"];
        args.extend(extra);
        let out = tiny_bench_files("2", &args);
        assert!(out.contains(&format!("over an {kind}")), "{out}");
        let rows: Vec<Vec<&str>> = out
            .lines()
            .map(|l| l.split_whitespace().collect())
            .filter(|w: &Vec<&str>| {
                w.len() >= 10 && w[0] == "2" && ["read", "re-read", "random"].contains(&w[1])
            })
            .collect();
        assert_eq!(rows.len(), 3, "{out}");
        for row in rows {
            assert!(row[2].parse::<f64>().unwrap() > 0.0, "{out}");
            assert_eq!(row[8], "-", "{out}");
        }
    }
    let output = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(["bench", "files", "--workload", "restart", "--spill", "4MiB"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("--spill is for --workload stream"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// `cairn bench files --workload table1` at a tiny scale: papers/001's bar,
/// every workload's hit ratio on HTTP within 1 pp of the simulator's
/// prediction for the same requests and readahead; bad flags refused.
#[test]
fn bench_files_table1_measures_what_the_simulator_predicts() {
    let out = cairn(&[
        "bench",
        "files",
        "--workload",
        "table1",
        "--requests",
        "150",
        "--alphas",
        "1,20",
        "--throttle",
        "200us,2GiB/s",
        // 64 blocks: evictions, so the policy's order matters.
        "--cache",
        "16MiB",
    ]);
    let rows: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split_whitespace().collect())
        .filter(|w: &Vec<&str>| w.len() >= 6 && ["A", "B", "C", "D"].contains(&w[0]))
        .collect();
    assert_eq!(
        rows.len(),
        12,
        "4 workloads × (lru, dual α=1, dual α=20): {out}"
    );
    for row in &rows {
        let cells: Vec<f64> = row[row.len() - 5..row.len() - 1]
            .iter()
            .map(|c| c.parse().unwrap())
            .collect();
        let (measured, predicted, delta, mean_ms) = (cells[0], cells[1], cells[2], cells[3]);
        assert!(measured > 30.0 && mean_ms > 0.0, "{out}");
        assert!(
            (delta - (measured - predicted)).abs() < 0.02,
            "Δ is measured − predicted: {out}"
        );
        assert!(delta.abs() <= 1.0, "papers/001's bar, within 1 pp: {out}");
        let counts: Vec<u64> = row[row.len() - 1]
            .split('/')
            .map(|c| c.parse().unwrap())
            .collect();
        assert!(counts[0] > 0, "the readahead read ahead: {out}");
        if counts[3] == 0 {
            // Nothing dropped: the policy saw the simulator's sequence.
            assert!(delta.abs() < 0.005, "exactly the prediction: {out}");
        }
    }
    assert!(out.contains("(the bar: within 1 pp): met"), "{out}");
    for (flag, value, expected) in [
        ("--requests", "0", "--requests"),
        ("--alphas", "0", "--alphas"),
        ("--prefetch-stripes", "100", "--prefetch-stripes"),
        ("--throttle", "2ms", "OP,BANDWIDTH"),
    ] {
        let output = Command::new(env!("CARGO_BIN_EXE_cairn"))
            .args(["bench", "files", "--workload", "table1", flag, value])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{flag} {value}");
        assert!(stderr.contains(expected), "{flag} {value}: {stderr}");
    }
}

/// `cairn bench files --workload restart` at a tiny scale: a row per reader
/// count; after the restart the spill serves every block it was asked for
/// (100 % hits) and beats the cold restart; nginx's columns are numbers when
/// it is installed.
#[test]
fn bench_files_restart_reads_the_spill_back_after_each_restart() {
    let nginx = nginx_found();
    let out = cairn(&[
        "bench",
        "files",
        "--workload",
        "restart",
        "--objects",
        "2",
        "--size",
        "8MiB",
        "--block",
        "256KiB",
        "--request",
        "256KiB",
        "--readers",
        "2,4",
        "--seconds",
        "0.5",
        "--throttle",
        "2ms,50MiB/s",
    ]);
    assert!(out.contains("its SSD spill then held 16 MiB"), "{out}");
    let rows: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split_whitespace().collect())
        .filter(|w: &Vec<&str>| w.len() == 7 && w[0].parse::<usize>().is_ok())
        .collect();
    assert_eq!(rows.len(), 2, "{out}");
    for row in &rows {
        let none: f64 = row[1].parse().unwrap();
        let spill: f64 = row[2].parse().unwrap();
        assert!(
            spill > 2.0 * none,
            "the spill is no faster than a cold start: {out}"
        );
        assert_eq!(row[6], "100.0%", "{out}");
        if nginx {
            let theirs: f64 = row[3].parse().unwrap();
            let ratio: f64 = row[4].parse().unwrap();
            assert!(
                (ratio - spill / theirs).abs() < 0.01 + 0.01 * ratio,
                "{out}"
            );
        } else {
            assert_eq!(row[3], "-", "{out}");
        }
    }
}
