//! `cairn bench tier` at a tiny scale. `--part fio`: the calibration table
//! (nbdkit's slow device against Cairn's, uncached) is printed with a row per
//! fio job whose figures parse and whose ratio and verdict agree with them;
//! the result table follows (skipped, saying why, where nbdkit or fio's nbd
//! engine is missing). `--part warm,scan,dram`: the tier is warm after a
//! clean stop and after kill -9, a scan leaves the hot set with the cutoff
//! on, and a cached block's DRAM is counted.

#![allow(clippy::unwrap_used)]

use std::process::Command;

fn missing_tool() -> Option<&'static str> {
    if Command::new("nbdkit").arg("--version").output().is_err() {
        return Some("nbdkit is not installed");
    }
    match Command::new("fio").arg("--enghelp=nbd").output() {
        Err(_) => Some("fio is not installed"),
        Ok(o) if !String::from_utf8_lossy(&o.stdout).contains("uri") => {
            Some("fio has no nbd engine")
        }
        Ok(_) => None,
    }
}

/// The rows of the table whose header starts with `title`: (name, unit,
/// nbdkit-side value, cairn value, ratio, verdict).
fn table(out: &str, title: &str) -> Vec<(String, String, f64, f64, f64, bool)> {
    let mut lines = out.lines().skip_while(|l| !l.starts_with(title));
    assert!(lines.next().is_some(), "no {title} table in\n{out}");
    let mut rows = Vec::new();
    for name in ["rand read 4k zipf", "rand write 4k fsync", "seq read 1M"] {
        let line = lines.next().unwrap_or_else(|| panic!("{title}: no {name}"));
        assert!(line.starts_with(name), "{title}: {line:?} is not {name}");
        let cells: Vec<&str> = line[name.len()..].split_whitespace().collect();
        let ratio = cells[3].strip_suffix('x').unwrap().parse().unwrap();
        let verdict = match cells[4] {
            "yes" => true,
            "no" => false,
            other => panic!("verdict {other:?} in {line:?}"),
        };
        rows.push((
            name.to_owned(),
            cells[0].to_owned(),
            cells[1].parse().unwrap(),
            cells[2].parse().unwrap(),
            ratio,
            verdict,
        ));
    }
    rows
}

#[test]
fn bench_tier_prints_a_calibration_row_per_job_then_the_results() {
    if let Some(why) = missing_tool() {
        eprintln!("skipped: {why}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(["bench", "tier", "--part", "fio", "--cache-size", "4MiB"])
        .args(["--seconds", "1"])
        .args(["--warmup", "1", "--dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&output.stdout);
    let err = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{out}\n{err}");
    assert!(out.contains("uncached nbdkit: nbdkit --filter=noparallel"));
    let calibration = table(&out, "calibration ");
    for (name, unit, nbdkit, cairn, ratio, within) in &calibration {
        let expected = if name.starts_with("seq") {
            "MiB/s"
        } else {
            "IOPS"
        };
        assert_eq!(unit, expected);
        assert!(*nbdkit > 0.0 && *cairn > 0.0, "{name}: {nbdkit} {cairn}");
        assert!((ratio - cairn / nbdkit).abs() < 0.01, "{name}: {ratio}");
        assert_eq!(*within, ratio.max(1.0 / ratio) <= 1.10, "{name}: {ratio}");
    }
    let within = calibration.iter().filter(|r| r.5).count();
    assert!(
        out.contains(&format!("calibration: {within} of 3 rows within 10%")),
        "{out}"
    );
    for (name, _, peer, cairn, ..) in table(&out, "result ") {
        assert!(peer > 0.0 && cairn > 0.0, "{name}: {peer} {cairn}");
    }
    // The temporary directory inside --dir is removed.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

/// The cells after `name` on the last line of `out` that starts with it.
fn row<'a>(out: &'a str, name: &str) -> Vec<&'a str> {
    let line = out
        .lines()
        .rfind(|l| l.starts_with(name))
        .unwrap_or_else(|| panic!("no row {name:?} in\n{out}"));
    line[name.len()..].split_whitespace().collect()
}

#[test]
fn bench_tier_warm_scan_and_dram_judge_their_bars() {
    let dir = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(["bench", "tier", "--part", "warm,scan,dram"])
        .args([
            "--cache-size",
            "8MiB",
            "--replay",
            "8",
            "--dram-size",
            "16MiB",
        ])
        .arg("--dir")
        .arg(dir.path())
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&output.stdout);
    let err = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{out}\n{err}");
    // Warm after both restarts: the first tenth hits as the steady state did.
    for case in ["clean stop", "kill -9"] {
        let cells = row(&out, case);
        let steady: f64 = cells[1].parse().unwrap();
        let after: f64 = cells[2].parse().unwrap();
        let ratio: f64 = cells[3].parse().unwrap();
        assert!(steady > 0.5, "{case}: steady state {steady}\n{out}");
        assert!((ratio - after / steady).abs() < 0.01, "{case}: {ratio}");
        assert!(ratio >= 0.95 && cells[4] == "yes", "{case}: {ratio}\n{out}");
    }
    assert!(
        out.contains("warm restart: 2 of 2 restarts >= 0.95"),
        "{out}"
    );
    assert!(out.contains("recovered after an unclean stop"), "{out}");
    // The cutoff keeps the scan out; without it, the scan is promoted.
    let on = row(&out, "s3fifo    4MiB");
    let ratio: f64 = on[2].parse().unwrap();
    assert!(ratio >= 0.90 && on[3] == "yes", "{on:?}\n{out}");
    // Without it, under LRU (no scan resistance of its own), most of the
    // 32 MiB scan is promoted, many times what the cutoff lets in. (S3-FIFO
    // keeps most of the scan out by itself: its small FIFO evicts a 1 MiB
    // request's blocks before a second access, and how many get installed
    // first depends on timing, so its "off" row proves nothing here.)
    let mib = |cell: &str| -> u64 { cell.trim_end_matches("MiB").parse().unwrap() };
    let lru_on = row(&out, "lru       4MiB");
    let lru_off = row(&out, "lru        off");
    assert!(
        mib(lru_off[4]) >= 16 && mib(lru_off[4]) >= 4 * mib(lru_on[4]).max(1),
        "the scan is promoted without the cutoff:\n{out}"
    );
    // DRAM: every block cached, a positive cost within reason.
    for policy in ["s3fifo", "lru"] {
        let cells = row(&out, &format!("{policy}  "));
        let (cached, capacity) = cells[0].split_once('/').unwrap();
        assert_eq!(cached, capacity, "{policy}: not full\n{out}");
        let own: f64 = cells[5].parse().unwrap();
        assert!(own > 12.0 && own < 200.0, "{policy}: {own} B/block\n{out}");
    }
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}
