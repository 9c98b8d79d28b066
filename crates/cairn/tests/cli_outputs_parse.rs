//! What `cairn sim` and `cairn mrc` write for other programs must parse: CSV
//! with one row per configuration and numeric fields, JSON with every report,
//! and a plot file that is an image. Guards the machine-readable outputs
//! against drifting from their headers.

use std::process::Command;

fn cairn(args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(args)
        .output()
        .expect("cairn runs");
    assert!(
        output.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("utf-8 output")
}

#[test]
fn sim_csv_and_json_files_parse_and_agree() {
    let dir = tempfile::tempdir().expect("temp dir");
    let csv = dir.path().join("run.csv");
    let json = dir.path().join("run.json");
    let plot = dir.path().join("run.svg");
    let table = cairn(&[
        "sim",
        "-q",
        "--policy",
        "lru",
        "--policy",
        "fifo",
        "--size",
        "1%,10%",
        "--csv",
        csv.to_str().expect("path"),
        "--json",
        json.to_str().expect("path"),
        "--plot",
        plot.to_str().expect("path"),
    ]);
    assert_eq!(
        table.lines().count(),
        3,
        "the table still goes to stdout: {table}"
    );

    let csv = std::fs::read_to_string(&csv).expect("csv written");
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().expect("header").split(',').collect();
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len(), 4, "{csv}");
    let column = |name: &str| header.iter().position(|h| *h == name).expect(name);
    for row in &rows {
        assert_eq!(row.len(), header.len());
        let requests: u64 = row[column("requests")].parse().expect("requests");
        let hits: u64 = row[column("hits")].parse().expect("hits");
        let misses: u64 = row[column("misses")].parse().expect("misses");
        assert_eq!(hits + misses, requests);
        let ratio: f64 = row[column("miss_ratio")].parse().expect("ratio");
        assert!((ratio - misses as f64 / requests as f64).abs() < 1e-6);
        let _: f64 = row[column("modelled_throughput_mb_s")]
            .parse()
            .expect("throughput");
    }

    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("json written"))
            .expect("json parses");
    let reports = json["reports"].as_array().expect("reports");
    assert_eq!(reports.len(), 4);
    assert_eq!(reports[0]["policy"], "lru");
    assert_eq!(reports[0]["size"], "1%");
    assert!(
        json["working_set"]["objects"]
            .as_u64()
            .expect("working set")
            > 0
    );
    for (report, row) in reports.iter().zip(&rows) {
        assert_eq!(
            report["metrics"]["misses"]
                .as_u64()
                .expect("misses")
                .to_string(),
            row[column("misses")]
        );
    }

    let svg = std::fs::read_to_string(&plot).expect("plot written");
    assert!(
        svg.starts_with("<svg") && svg.contains("lru"),
        "an SVG with a legend"
    );
}

#[test]
fn csv_on_stdout_replaces_the_table() {
    let csv = cairn(&["sim", "-q", "--policy", "lru", "--size", "5%", "--csv", "-"]);
    let lines: Vec<&str> = csv.lines().collect();
    assert!(lines[0].starts_with("trace,label,policy,size,"), "{csv}");
    assert_eq!(lines.len(), 2);
}

#[test]
fn mrc_csv_parses_and_lru_exact_never_rises() {
    let csv = cairn(&[
        "mrc", "-q", "--points", "8", "--shards", "0.1", "--csv", "-",
    ]);
    let mut lines = csv.lines();
    assert_eq!(lines.next(), Some("size_objects,lru-exact,shards@0.1"));
    let exact: Vec<f64> = lines
        .map(|l| l.split(',').nth(1).expect("exact").parse().expect("number"))
        .collect();
    assert_eq!(exact.len(), 8);
    assert!(exact.windows(2).all(|w| w[1] <= w[0]), "{exact:?}");
}
