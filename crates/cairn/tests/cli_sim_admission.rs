//! `cairn sim --admission SPEC` puts every simulated policy behind an
//! admission filter. Guards that the `--help` example runs as printed, that
//! `always` is the unfiltered run number for number, that a filter changes
//! the result, and that a bad spec is a clear error.

mod common;

use std::process::{Command, Output};

fn cairn(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(args)
        .current_dir(std::env::temp_dir())
        .output()
        .expect("cairn runs")
}

/// The table's rows: label, then the miss ratios.
fn rows(output: &Output) -> Vec<(String, Vec<f64>)> {
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "stderr: {stderr}");
    stdout
        .lines()
        .skip(1)
        .map(|line| {
            let mut cells = line.split_whitespace();
            let label = cells.next().expect("a label").to_owned();
            let ratios = cells.map(|c| c.parse().expect("a ratio")).collect();
            (label, ratios)
        })
        .collect()
}

/// `cli_sim_right_by_default.rs` runs every `cairn sim --help` example and
/// checks its exit; this checks what the admission example prints.
#[test]
fn the_help_example_runs_as_printed() {
    let example = common::examples::examples(&["sim", "--help"])
        .into_iter()
        .find(|line| line.starts_with("cairn sim") && line.contains("--admission"))
        .expect("an --admission example in `cairn sim --help`");
    let args: Vec<&str> = example.split_whitespace().skip(1).collect();
    let rows = rows(&cairn(&args));
    let labels: Vec<&str> = rows.iter().map(|(label, _)| label.as_str()).collect();
    assert_eq!(
        labels,
        ["lru+nhit:threshold=3", "s3fifo+nhit:threshold=3"],
        "{example}"
    );
    for (label, ratios) in &rows {
        assert_eq!(ratios.len(), 4, "{label}");
        assert!(
            ratios.iter().all(|r| (0.0..=1.0).contains(r)),
            "{label}: {ratios:?}"
        );
    }
}

#[test]
fn always_is_the_unfiltered_run_and_a_filter_changes_it() {
    let plain = rows(&cairn(&["sim", "--quiet", "--policy", "lru"]));
    let always = rows(&cairn(&[
        "sim",
        "--quiet",
        "--policy",
        "lru",
        "--admission",
        "always",
    ]));
    let nhit = rows(&cairn(&[
        "sim",
        "--quiet",
        "--policy",
        "lru",
        "--admission",
        "nhit",
    ]));
    assert_eq!(always[0].0, "lru+always");
    assert_eq!(always[0].1, plain[0].1, "always filters nothing");
    assert_eq!(nhit[0].0, "lru+nhit");
    assert_ne!(nhit[0].1, plain[0].1, "nhit refuses some misses");
}

#[test]
fn a_bad_spec_names_the_filters_or_the_parameter() {
    for (spec, expected) in [
        (
            "lru",
            "unknown filter `lru` (known: always, nhit, frequency, bloom, size, probabilistic, size-probabilistic, adaptsize)",
        ),
        ("nhit:threshold=0", "`threshold` = 0 is out of range"),
        ("frequency:bogus=1", "bogus"),
    ] {
        let output = cairn(&["sim", "--quiet", "--admission", spec]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{spec}");
        assert!(stderr.contains(expected), "{spec}: {stderr}");
    }
}
