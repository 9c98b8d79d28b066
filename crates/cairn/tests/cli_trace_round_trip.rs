//! A trace survives `cairn trace convert` between formats unchanged, and the
//! simulator reads every format to the same result. Guards the writers, the
//! readers and format detection against drifting apart, and `cairn trace`'s
//! errors against turning into panics.

use std::path::{Path, PathBuf};
use std::process::Command;

fn cairn(args: &[&str]) -> (bool, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(args)
        .output()
        .expect("cairn runs");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn ok(args: &[&str]) -> String {
    let (success, stdout, stderr) = cairn(args);
    assert!(success, "cairn {args:?} failed: {stderr}");
    stdout
}

fn path(dir: &Path, name: &str) -> String {
    dir.join(name).to_str().expect("utf-8 temp path").to_owned()
}

#[test]
fn generated_trace_round_trips_through_csv_byte_for_byte() {
    let dir = tempfile::tempdir().expect("temp dir");
    let original = path(dir.path(), "z.oracleGeneral.bin");
    let csv = path(dir.path(), "z.csv");
    let back = path(dir.path(), "back.oracleGeneral.bin");
    let params = ["items=5000", "alpha=0.9", "requests=50000", "seed=3"];
    let mut gen_args = vec!["-q", "trace", "gen", "zipf"];
    gen_args.extend(params);
    gen_args.extend(["-o", &original]);
    assert!(ok(&gen_args).contains("wrote 50000 requests"));
    ok(&["-q", "trace", "convert", &original, &csv]);
    ok(&["-q", "trace", "convert", &csv, &back]);
    assert_eq!(
        std::fs::read(&original).unwrap(),
        std::fs::read(&back).unwrap()
    );

    let stats = ok(&["trace", "stats", &original, "--json"]);
    let stats: serde_json::Value = serde_json::from_str(&stats).expect("stats JSON");
    assert_eq!(stats["requests"], 50_000);
    let sim = |trace: &str| {
        ok(&[
            "sim", "-q", "--trace", trace, "-p", "lru", "-p", "arc", "-s", "10%",
        ])
    };
    assert_eq!(
        sim(&original),
        sim(&csv),
        "the simulator sees the same trace in both formats"
    );
}

fn sample(name: &str) -> Option<PathBuf> {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .map(|dir| dir.join("shared/traces").join(name))
        .find(|path| path.is_file())
}

#[test]
fn vscsi_and_cloudphysics_csv_samples_simulate_alike() {
    let (Some(vscsi), Some(csv)) = (sample("cloudPhysicsIO.vscsi"), sample("cloudPhysicsIO.csv"))
    else {
        eprintln!("skipped: shared/traces/ is not beside the repository");
        return;
    };
    let run = |trace: &Path| {
        ok(&[
            "sim",
            "-q",
            "--trace",
            trace.to_str().unwrap(),
            "--unit",
            "block:4KiB",
            "-p",
            "lru",
            "-p",
            "s3fifo",
            "-s",
            "10%",
        ])
    };
    let from_vscsi = run(&vscsi);
    assert_eq!(from_vscsi, run(&csv), "the same trace in two formats");
    assert!(from_vscsi.contains("lru"), "{from_vscsi}");
}

#[test]
fn bad_generator_format_or_key_is_named() {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = path(dir.path(), "x.oracleGeneral.bin");
    ok(&["-q", "trace", "gen", "zipf", "requests=10", "-o", &out]);
    for (args, want) in [
        (
            vec!["trace", "gen", "nosuch", "-o", &out],
            "unknown generator `nosuch`",
        ),
        (vec!["trace", "gen", "zipf", "bogus=1", "-o", &out], "bogus"),
        (
            vec!["trace", "gen", "zipf", "-o", &out, "--format", "msr"],
            "cannot write msr traces",
        ),
        (vec!["trace", "stats", &out, "--format", "nosuch"], "nosuch"),
        (vec!["sim", "--trace", &out, "--format", "nosuch"], "nosuch"),
    ] {
        let (success, _, stderr) = cairn(&args);
        assert!(!success, "{args:?} should fail");
        assert!(stderr.contains(want), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}

/// `trace convert --sample` keeps whole keys (every request of a kept key,
/// none of the others), about the rate asked, the same ones every time;
/// `--op` keeps one operation; bad values are errors.
#[test]
fn convert_samples_whole_keys_and_filters_by_operation() {
    let dir = tempfile::tempdir().expect("temp dir");
    let original = path(dir.path(), "u.csv");
    ok(&[
        "-q",
        "trace",
        "gen",
        "zipf",
        "items=20000",
        "alpha=0.8",
        "requests=200000",
        "write_fraction=0.25",
        "seed=5",
        "-o",
        &original,
    ]);
    let read = |file: &str| -> Vec<(u64, bool)> {
        std::fs::read_to_string(file)
            .expect("a CSV")
            .lines()
            .skip(1)
            .map(|line| {
                let cells: Vec<&str> = line.split(',').collect();
                (cells[1].parse().expect("an object"), cells[4] == "w")
            })
            .collect()
    };
    let all = read(&original);
    let sampled = path(dir.path(), "s.csv");
    let out = ok(&["trace", "convert", &original, &sampled, "--sample", "0.1"]);
    let kept = read(&sampled);
    assert!(
        out.contains(&format!("converted {} of 200000 requests", kept.len())),
        "{out}"
    );
    let keys: std::collections::HashSet<u64> = kept.iter().map(|&(k, _)| k).collect();
    let whole: Vec<_> = all
        .iter()
        .filter(|(k, _)| keys.contains(k))
        .copied()
        .collect();
    assert_eq!(
        whole, kept,
        "every request of a kept key, in order, and no other"
    );
    let distinct = all
        .iter()
        .map(|&(k, _)| k)
        .collect::<std::collections::HashSet<_>>()
        .len();
    let share = keys.len() as f64 / distinct as f64;
    assert!(
        (0.08..0.12).contains(&share),
        "{} of {distinct} keys",
        keys.len()
    );
    let again = path(dir.path(), "s2.csv");
    ok(&[
        "-q", "trace", "convert", &original, &again, "--sample", "0.1",
    ]);
    assert_eq!(read(&again), kept, "the same keys every time");
    let writes = path(dir.path(), "w.csv");
    ok(&[
        "-q", "trace", "convert", &original, &writes, "--op", "write",
    ]);
    let expected: Vec<_> = all.iter().filter(|&&(_, w)| w).copied().collect();
    assert!(!expected.is_empty());
    assert_eq!(read(&writes), expected);
    for bad in [
        &["--sample", "0"][..],
        &["--sample", "1.5"],
        &["--op", "trim"],
    ] {
        let mut args = vec!["trace", "convert", &original, &again];
        args.extend_from_slice(bad);
        let (success, _, stderr) = cairn(&args);
        assert!(
            !success && stderr.contains(bad[0]) && !stderr.contains("panicked"),
            "{bad:?}: {stderr}"
        );
    }
}
