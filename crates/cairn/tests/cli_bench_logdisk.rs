//! `cairn bench logdisk` at a small scale: every row is printed with a
//! positive bandwidth (the `--free-reads` row too), the sequential reference is taken between the
//! steady-state stretches, the bar line is judged, and each cleaner reports a
//! write amplification above 1 and below the 1/(1-u) baseline.

#![allow(clippy::unwrap_used)]

use std::process::Command;

#[test]
fn bench_logdisk_small_scale() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(["bench", "logdisk", "--size", "64MiB", "--wa-size", "64MiB"])
        .args([
            "--turnover",
            "1.5",
            "--seconds",
            "1",
            "--free-reads",
            "--dir",
        ])
        .arg(dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() && stderr.contains("O_DIRECT") {
        eprintln!("skipped: the temporary directory's file system refuses O_DIRECT: {stderr}");
        return;
    }
    assert!(out.status.success(), "{stdout}\n{stderr}");
    for row in [
        "device, sequential 512 KiB writes",
        "device, random 4 KiB writes",
        "log disk NV cache, U 0.4, steady state",
        "log disk volatile, U 0.4, steady state",
        "log disk NV, reads free, U 0.4, steady state",
    ] {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(row))
            .unwrap_or_else(|| panic!("no row {row:?} in\n{stdout}"));
        let mib: f64 = line[row.len()..]
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert!(mib > 0.0, "{line}");
    }
    // The reference: a pass before each of the four steady-state stretches
    // and after the last, in each mode (NV, NV with reads free, volatile).
    assert!(stdout.contains("15 passes of 64 MiB"), "{stdout}");
    assert_eq!(stdout.matches("(5 passes, ").count(), 3, "{stdout}");
    assert!(
        stdout.contains("bar: log-disk 4 KiB random writes"),
        "{stdout}"
    );
    for cleaner in ["greedy", "cost-benefit", "age-sort"] {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(cleaner))
            .unwrap_or_else(|| panic!("no {cleaner} row in\n{stdout}"));
        let wa: f64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
        assert!(wa > 1.0 && wa < 5.0, "{line}");
    }
    // The temporary directory inside --dir is removed.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}
