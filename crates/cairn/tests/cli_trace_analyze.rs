//! `cairn trace analyze` (issue 26) says what a trace looks like to a cache:
//! its JSON carries the known answers of a generated loop (every key reused
//! after N accesses, past N − 1 others) and of the sample trace (libCacheSim
//! 0.3.5's Zipf fit and one-hit count); --csv and --plot write every table
//! and figure; a bad --plot or --csv directory is refused before the trace
//! is read (an empty trace then is not the error reported); an empty trace,
//! a zero window and --json with --csv are clear errors.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::process::Output;

use common::cairn;
use common::examples::text;

fn run(dir: &Path, args: &[&str]) -> Output {
    cairn().args(args).current_dir(dir).output().unwrap()
}

fn ok(output: &Output, what: &str) -> String {
    assert!(output.status.success(), "{what}: {}", text(&output.stderr));
    text(&output.stdout)
}

fn refused(output: &Output, what: &str) -> String {
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{what}: {stderr}");
    assert!(!stderr.contains("panicked"), "{what}: {stderr}");
    assert_eq!(text(&output.stdout), "", "{what}");
    stderr
}

fn sample() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("data/cloudPhysicsIO.oracleGeneral.bin.zst")
        .display()
        .to_string()
}

#[test]
fn a_generated_loop_has_the_known_distances_and_windows() {
    let dir = tempfile::tempdir().unwrap();
    ok(
        &run(
            dir.path(),
            &[
                "trace",
                "gen",
                "scan",
                "items=100",
                "layout=\"objects\"",
                "requests=1000",
                "interval_us=1000",
                "-o",
                "loop.csv",
            ],
        ),
        "gen",
    );
    let stdout = ok(
        &run(dir.path(), &["trace", "analyze", "loop.csv", "--json"]),
        "analyze",
    );
    let json: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(json["unit"], "object");
    assert_eq!(json["requests"], 1000);
    assert_eq!(json["keys"], 100);
    assert_eq!(json["reuse_distance"]["max"], 100);
    assert_eq!(json["reuse_distance"]["total"], 900);
    assert_eq!(json["stack_distance"]["max"], 99);
    assert_eq!(json["stack_distance"]["mean"], 99.0);
    assert_eq!(json["one_hit_keys"], 0);
    assert_eq!(json["frequencies"][0]["accesses"], 10);
    // 999 ms at 1 ms a request: a 10 ms default window, 100 windows of 10
    // distinct keys each seen once.
    assert_eq!(json["window_us"], 10_000);
    let windows = json["windows"].as_array().unwrap();
    assert_eq!(windows.len(), 100);
    assert_eq!(windows[3]["keys"], 10);
    assert_eq!(windows[3]["one_hit_fraction"], 1.0);
    assert_eq!(windows[3]["requests_per_s"], 1000.0);
}

#[test]
fn the_sample_trace_summary_quotes_libcachesim_s_fit_and_tables_and_figures_are_written() {
    let dir = tempfile::tempdir().unwrap();
    let stdout = ok(
        &run(
            dir.path(),
            &[
                "trace",
                "analyze",
                &sample(),
                "--window",
                "60",
                "--csv",
                "tables",
                "--plot",
                "figures/new",
            ],
        ),
        "analyze",
    );
    // libcachesim 0.3.5 TraceAnalyzer: "Zipf alpha=0.5464, R2=0.8743";
    // X-hit: 21049 (0.4298) objects accessed once.
    assert!(
        stdout.contains("alpha 0.5464, R² 0.8743 (least squares over ranks 1..48974)"),
        "{stdout}"
    );
    assert!(stdout.contains("21049 (0.4298 of the keys)"), "{stdout}");
    assert!(stdout.contains("121 windows of 60 s"), "{stdout}");
    for table in [
        "reuse_distance",
        "stack_distance",
        "popularity",
        "sizes",
        "windows",
    ] {
        let csv = std::fs::read_to_string(dir.path().join(format!("tables/{table}.csv"))).unwrap();
        assert!(csv.lines().count() > 2, "{table}: {csv}");
    }
    let windows = std::fs::read_to_string(dir.path().join("tables/windows.csv")).unwrap();
    assert_eq!(windows.lines().count(), 1 + 121);
    for figure in [
        "reuse_distance",
        "stack_distance",
        "popularity",
        "object_sizes",
        "requests_per_s",
        "mean_size",
        "read_fraction",
        "one_hit_fraction",
    ] {
        let svg =
            std::fs::read_to_string(dir.path().join(format!("figures/new/{figure}.svg"))).unwrap();
        assert!(svg.starts_with("<svg"), "{figure}");
        assert!(
            svg.contains("cloudPhysicsIO"),
            "{figure}: the title names the trace"
        );
    }
}

#[test]
fn bad_outputs_are_refused_before_the_trace_is_read_and_bad_input_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("empty.oracleGeneral.bin"), b"").unwrap();
    std::fs::write(dir.path().join("a-file"), b"x").unwrap();
    for flag in ["--plot", "--csv"] {
        let stderr = refused(
            &run(
                dir.path(),
                &[
                    "trace",
                    "analyze",
                    "empty.oracleGeneral.bin",
                    flag,
                    "a-file/figures",
                ],
            ),
            flag,
        );
        assert!(
            stderr.contains(&format!(
                "{flag} a-file/figures: cannot create the directory"
            )),
            "{stderr}"
        );
    }
    let stderr = refused(
        &run(dir.path(), &["trace", "analyze", "empty.oracleGeneral.bin"]),
        "empty",
    );
    assert!(
        stderr.contains("holds no requests: nothing to analyze"),
        "{stderr}"
    );
    let stderr = refused(
        &run(
            dir.path(),
            &["trace", "analyze", &sample(), "--window", "0"],
        ),
        "window 0",
    );
    assert!(
        stderr.contains("--window 0: a length in seconds"),
        "{stderr}"
    );
    let output = run(
        dir.path(),
        &["trace", "analyze", &sample(), "--json", "--csv", "t"],
    );
    assert_eq!(
        output.status.code(),
        Some(2),
        "--json with --csv is a usage error"
    );
    let stderr = refused(
        &run(
            dir.path(),
            &["trace", "analyze", "missing.oracleGeneral.bin"],
        ),
        "missing",
    );
    assert!(stderr.contains("missing.oracleGeneral.bin"), "{stderr}");
}
