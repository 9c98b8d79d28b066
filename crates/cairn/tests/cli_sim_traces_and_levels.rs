//! `cairn sim` with several `--trace`s reports for each trace exactly what a
//! run of that trace alone reports (sizes taken of its own working set),
//! labelled by trace in every output, and names the trace in an error; with
//! `--l2`, every access is an L1 hit, an L2 hit or a miss, L1 behaves as the
//! same policy alone, and an exclusive LRU over LRU is one LRU of both sizes
//! (the classic identity: demotion keeps a single recency stack).
#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::process::Output;

use common::cairn;
use common::examples::text;

/// `cairn ARGS` in `dir`.
fn run(dir: &Path, args: &[&str]) -> Output {
    cairn().args(args).current_dir(dir).output().unwrap()
}

/// Asserts success and returns stdout.
fn ok(dir: &Path, args: &[&str]) -> String {
    let output = run(dir, args);
    assert!(
        output.status.success(),
        "{args:?}: {}",
        text(&output.stderr)
    );
    text(&output.stdout)
}

/// Asserts a clean failure (exit 1, no panic) and returns stderr.
fn refused(dir: &Path, args: &[&str]) -> String {
    let output = run(dir, args);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{args:?}: {stderr}");
    assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    stderr
}

/// CSV rows as maps from column name to cell (no cell here holds a comma).
fn csv(text: &str) -> Vec<std::collections::HashMap<String, String>> {
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    lines
        .map(|line| {
            let cells: Vec<&str> = line.split(',').collect();
            assert_eq!(cells.len(), header.len(), "{line}");
            header
                .iter()
                .zip(cells)
                .map(|(h, c)| ((*h).to_owned(), c.to_owned()))
                .collect()
        })
        .collect()
}

/// Two traces of different working sets, written by `trace gen`.
fn two_traces(dir: &Path) {
    ok(
        dir,
        &[
            "trace",
            "gen",
            "zipf",
            "items=20000",
            "alpha=0.9",
            "requests=60000",
            "seed=3",
            "-o",
            "a.oracleGeneral.bin",
        ],
    );
    ok(
        dir,
        &[
            "trace",
            "gen",
            "uniform",
            "items=3000",
            "requests=30000",
            "write_fraction=0.3",
            "-o",
            "b.vscsi",
        ],
    );
}

/// `sim` and `v`, as arguments.
fn args(v: &[String]) -> Vec<&str> {
    std::iter::once("sim")
        .chain(v.iter().map(String::as_str))
        .collect()
}

#[test]
fn several_traces_report_what_each_reports_alone() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    two_traces(dir);
    let flags = ["-q", "-p", "lru", "-p", "s3fifo", "-s", "1%,10%"];
    let with = |extra: &[&str]| -> Vec<String> {
        flags
            .iter()
            .copied()
            .chain(extra.iter().copied())
            .map(str::to_owned)
            .collect()
    };
    let alone: Vec<_> = ["a.oracleGeneral.bin", "b.vscsi"]
        .iter()
        .flat_map(|t| csv(&ok(dir, &args(&with(&["--trace", t, "--csv", "-"])))))
        .collect();
    assert_eq!(alone.len(), 8);
    // Each trace's 1% is of its own working set.
    assert_ne!(alone[0]["capacity"], alone[4]["capacity"]);
    for threads in ["0", "1", "2", "3"] {
        let both = csv(&ok(
            dir,
            &args(&with(&[
                "--trace",
                "a.oracleGeneral.bin",
                "--trace",
                "b.vscsi",
                "--csv",
                "-",
                "--threads",
                threads,
            ])),
        ));
        assert_eq!(both, alone, "--threads {threads}");
    }
    assert_eq!(alone[0]["trace"], "a.oracleGeneral.bin");
    assert_eq!(alone[7]["trace"], "b.vscsi");

    // The table: one block per trace, under its name.
    let table = ok(
        dir,
        &args(&with(&[
            "--trace",
            "a.oracleGeneral.bin",
            "--trace",
            "b.vscsi",
        ])),
    );
    let blocks: Vec<&str> = table.split("\n\n").collect();
    assert_eq!(blocks.len(), 2, "{table}");
    for (block, trace, rows) in [
        (blocks[0], "a.oracleGeneral.bin", &alone[..4]),
        (blocks[1], "b.vscsi", &alone[4..]),
    ] {
        let lines: Vec<&str> = block.lines().collect();
        assert_eq!(lines[0], format!("trace {trace}"), "{table}");
        assert_eq!(
            lines[1].split_whitespace().collect::<Vec<_>>(),
            ["policy", "1%", "10%"]
        );
        let lru: Vec<&str> = lines[2].split_whitespace().collect();
        let want = |r: &std::collections::HashMap<String, String>| {
            format!("{:.4}", r["miss_ratio"].parse::<f64>().unwrap())
        };
        assert_eq!(lru, ["lru", &want(&rows[0]), &want(&rows[1])], "{table}");
    }

    // JSON: a list of runs, each as a one-trace run; plots: one per trace.
    ok(
        dir,
        &args(&with(&[
            "--trace",
            "a.oracleGeneral.bin",
            "--trace",
            "b.vscsi",
            "--json",
            "runs.json",
            "--plot",
            "mrc.svg",
        ])),
    );
    let runs: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("runs.json")).unwrap()).unwrap();
    let runs = runs.as_array().expect("a list of runs");
    assert_eq!(runs.len(), 2);
    assert_eq!(runs[1]["trace"], "b.vscsi");
    assert_eq!(runs[1]["unit"], "start-sector");
    assert_eq!(
        runs[1]["reports"][3]["metrics"]["misses"].to_string(),
        alone[7]["misses"]
    );
    for (plot, trace) in [
        ("mrc-a.oracleGeneral.bin.svg", "a.oracleGeneral.bin"),
        ("mrc-b.vscsi.svg", "b.vscsi"),
    ] {
        let svg = std::fs::read_to_string(dir.join(plot)).unwrap();
        assert!(svg.contains(trace) && svg.contains("s3fifo"), "{plot}");
    }
    assert!(!dir.join("mrc.svg").exists());
}

#[test]
fn an_error_names_its_trace() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    two_traces(dir);
    // 0.02% of a.oracleGeneral.bin's working set holds a few objects; of
    // b.vscsi's (3,000 start sectors) it rounds down to 0.
    let stderr = refused(
        dir,
        &[
            "sim",
            "-q",
            "-p",
            "lru",
            "-s",
            "0.02%",
            "--trace",
            "a.oracleGeneral.bin",
            "--trace",
            "b.vscsi",
        ],
    );
    assert!(stderr.contains("trace b.vscsi: --size 0.02%"), "{stderr}");
    assert!(stderr.contains("rounds down to 0"), "{stderr}");
    let stderr = refused(
        dir,
        &[
            "sim",
            "-q",
            "--trace",
            "a.oracleGeneral.bin",
            "--trace",
            "missing.bin",
        ],
    );
    assert!(stderr.contains("missing.bin"), "{stderr}");
    let stderr = refused(
        dir,
        &["sim", "-q", "--trace", "b.vscsi", "--trace", "b.vscsi"],
    );
    assert!(stderr.contains("given twice"), "{stderr}");
}

#[test]
fn two_levels_count_every_access_once() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let single = csv(&ok(
        dir,
        &[
            "sim", "-q", "-p", "lru", "-p", "s3fifo", "-s", "500,2000", "--csv", "-",
        ],
    ));
    for mode in ["inclusive", "exclusive"] {
        let rows = csv(&ok(
            dir,
            &[
                "sim",
                "-q",
                "-p",
                "lru",
                "-p",
                "s3fifo",
                "-s",
                "500,2000",
                "--l2",
                "arc@5000",
                "--l2-mode",
                mode,
                "--csv",
                "-",
            ],
        ));
        assert_eq!(rows.len(), 4);
        for (row, alone) in rows.iter().zip(&single) {
            let n = |k: &str| row[k].parse::<u64>().unwrap();
            assert_eq!(
                n("l1_hits") + n("l2_hits") + n("misses"),
                n("requests"),
                "{mode}"
            );
            assert_eq!(n("l1_hits") + n("l2_hits"), n("hits"), "{mode}");
            assert!(n("l2_hits") > 0, "{mode}: {row:?}");
            // L1 admits every miss whatever L2 does: it is the policy alone.
            assert_eq!(row["l1_hits"], alone["hits"], "{mode}: {row:?}");
            assert_eq!(row["l2_policy"], "arc");
            assert_eq!(row["l2_capacity"], "5000");
            assert_eq!(row["l2_mode"], mode);
            // L2 hits are cheaper than misses.
            let seconds = |r: &std::collections::HashMap<String, String>| {
                r["modelled_seconds"].parse::<f64>().unwrap()
            };
            assert!(seconds(row) < seconds(alone), "{mode}");
        }
        assert_eq!(single[0]["l2_policy"], "");
        assert_eq!(single[0]["l2_hits"], "0");
    }

    // Exclusive LRU over LRU is one LRU of both sizes.
    let exclusive = csv(&ok(
        dir,
        &[
            "sim",
            "-q",
            "-p",
            "lru",
            "-s",
            "1000",
            "--l2",
            "lru@4000",
            "--l2-mode",
            "exclusive",
            "--csv",
            "-",
        ],
    ));
    let lru = csv(&ok(
        dir,
        &["sim", "-q", "-p", "lru", "-s", "5000", "--csv", "-"],
    ));
    assert_eq!(exclusive[0]["misses"], lru[0]["misses"]);

    // The table lists where accesses were served; JSON carries the level.
    let table = ok(
        dir,
        &["sim", "-q", "-p", "lru", "-s", "500", "--l2", "arc@5000"],
    );
    let lines: Vec<Vec<&str>> = table
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        lines[0],
        [
            "policy",
            "size",
            "l2",
            "l2-size",
            "mode",
            "l1-hits",
            "l2-hits",
            "misses",
            "miss-ratio"
        ]
    );
    assert_eq!(lines[1][..5], ["lru", "500", "arc", "5000", "inclusive"]);
    let json: serde_json::Value = serde_json::from_str(&ok(
        dir,
        &[
            "sim", "-q", "-p", "lru", "-s", "500", "--l2", "arc@5000", "--json", "-",
        ],
    ))
    .unwrap();
    let report = &json["reports"][0];
    assert_eq!(report["l2"]["policy"], "arc");
    assert_eq!(report["l2"]["hierarchy"], "inclusive");
    assert_eq!(report["metrics"]["l2_hits"].to_string(), lines[1][6]);
}
