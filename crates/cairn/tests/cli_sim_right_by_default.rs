//! `cairn sim`, `cairn mrc` and `cairn trace` are right by default (issue 26):
//! a block trace is keyed by start sector, as libCacheSim reads VSCSI, not
//! folded into one object per disk; a size with a byte unit counts bytes; an
//! empty trace, a filter that keeps nothing, a size that rounds down to 0 and
//! a one-key curve are errors that say what to do; output arguments are
//! checked before the run; `trace gen`/`convert` write the format the output's
//! name says (zstd for `.zst`) and refuse a name no reader could tell; and
//! every example in the `--help` of sim, mrc and trace
//! gen/stats/convert/analyze runs as printed. Each test is one failure a new user met, turned around.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;

use cairn_trace::read::vscsi;
use cairn_trace::{NEVER, Op, Request};
use common::cairn;
use common::examples::{bash, examples, text};

/// `cairn ARGS` in `dir`.
fn run(dir: &Path, args: &[&str]) -> Output {
    cairn().args(args).current_dir(dir).output().unwrap()
}

/// Asserts success and returns stdout.
fn ok(output: &Output, what: &str) -> String {
    assert!(output.status.success(), "{what}: {}", text(&output.stderr));
    text(&output.stdout)
}

/// Asserts a clean failure (exit 1, no panic) and returns stderr.
fn refused(output: &Output, what: &str) -> String {
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{what}: {stderr}");
    assert!(!stderr.contains("panicked"), "{what}: {stderr}");
    stderr
}

/// The table's rows: label, then the numbers.
fn rows(stdout: &str) -> Vec<(String, Vec<f64>)> {
    stdout
        .lines()
        .skip(1)
        .map(|line| {
            let mut cells = line.split_whitespace();
            let label = cells.next().unwrap().to_owned();
            (label, cells.map(|c| c.parse().unwrap()).collect())
        })
        .collect()
}

/// A VSCSI file of `passes` loops over `sectors` distinct start sectors 8
/// apart (4 KiB requests), one disk: LRU holding all of them misses only
/// the first pass; holding fewer, it misses everything.
fn loop_vscsi(path: &Path, sectors: u64, passes: u64, op: Op) {
    let mut bytes = Vec::new();
    for index in 0..sectors * passes {
        let request = Request {
            time_us: index,
            object: 0,
            offset: (index % sectors) * 8 * 512,
            size: 4096,
            op,
            ttl: 0,
            next: NEVER,
        };
        bytes.extend_from_slice(&vscsi::encode(&request, index as u32));
    }
    std::fs::write(path, bytes).unwrap();
}

/// The shared sample traces (`/work/shared/traces` or `$CAIRN_SAMPLE_TRACES`).
fn samples() -> Option<PathBuf> {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    std::env::var_os("CAIRN_SAMPLE_TRACES")
        .map(PathBuf::from)
        .into_iter()
        .chain(manifest.ancestors().map(|a| a.join("shared/traces")))
        .find(|d| d.join("cloudPhysicsIO.vscsi").exists())
}

#[test]
fn a_block_trace_is_keyed_by_start_sector_by_default() {
    let dir = tempfile::tempdir().unwrap();
    loop_vscsi(&dir.path().join("loop.vscsi"), 100, 10, Op::Read);
    let output = run(
        dir.path(),
        &[
            "sim",
            "--trace",
            "loop.vscsi",
            "-p",
            "lru",
            "-p",
            "s3fifo",
            "-s",
            "50%,100%",
        ],
    );
    let stdout = ok(&output, "sim");
    assert!(
        !text(&output.stderr).contains("WARN"),
        "{}",
        text(&output.stderr)
    );
    let rows = rows(&stdout);
    assert_eq!(rows[0], ("lru".to_owned(), vec![1.0, 0.1]), "{stdout}");
    assert_eq!(rows[1].0, "s3fifo");

    // Keyed by object, the same trace is one object: the error says why.
    let stderr = refused(
        &run(
            dir.path(),
            &[
                "sim",
                "--trace",
                "loop.vscsi",
                "--unit",
                "object",
                "-p",
                "lru",
                "-s",
                "50%",
            ],
        ),
        "sim --unit object",
    );
    assert!(stderr.contains("rounds down to 0"), "{stderr}");
    assert!(stderr.contains("leave --unit at auto"), "{stderr}");

    // mrc: a curve over 100 keys, not one row; by object, an error.
    let stdout = ok(&run(dir.path(), &["mrc", "--trace", "loop.vscsi"]), "mrc");
    assert_eq!(stdout.lines().count(), 1 + 20, "{stdout}");
    assert!(
        stdout.lines().last().unwrap().ends_with("0.1000"),
        "{stdout}"
    );
    let stderr = refused(
        &run(
            dir.path(),
            &["mrc", "--trace", "loop.vscsi", "--unit", "object"],
        ),
        "mrc --unit object",
    );
    assert!(stderr.contains("one distinct key"), "{stderr}");

    // trace stats counts what sim keys: start sectors, on one disk.
    let stdout = ok(&run(dir.path(), &["trace", "stats", "loop.vscsi"]), "stats");
    let line = |name: &str| {
        stdout
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("no {name} in {stdout}"))
            .split_whitespace()
            .last()
            .unwrap()
            .to_owned()
    };
    assert_eq!(line("distinct start sectors"), "100");
    assert_eq!(line("distinct disks"), "1");
}

/// The recorded numbers of docs/simulator.md: libCacheSim 0.3.5 (Python)
/// `TraceReader(.., VSCSI_TRACE)` and `LRU(size).process_trace`, at 1/5/10/20 %
/// of its working set (`get_working_set_size`), objects then bytes.
#[test]
fn the_sample_vscsi_trace_agrees_with_libcachesim() {
    let Some(samples) = samples() else {
        println!("skipped: no shared/traces/cloudPhysicsIO.vscsi");
        return;
    };
    let trace = samples.join("cloudPhysicsIO.vscsi");
    let trace = trace.to_str().unwrap();
    let want = [
        ("objects", "lru", [0.8380, 0.8246, 0.8049, 0.7249]),
        ("objects", "fifo", [0.8476, 0.8266, 0.8054, 0.7128]),
        ("objects", "clock", [0.8372, 0.8240, 0.8044, 0.7483]),
        ("objects", "arc", [0.8275, 0.8114, 0.7728, 0.7026]),
        ("objects", "sieve", [0.8292, 0.8172, 0.7907, 0.7162]),
        ("objects", "s3fifo", [0.8305, 0.8130, 0.7553, 0.6663]),
        ("bytes", "lru", [0.8332, 0.8214, 0.8038, 0.7297]),
        ("bytes", "fifo", [0.8361, 0.8218, 0.7999, 0.7404]),
        ("bytes", "clock", [0.8320, 0.8209, 0.8028, 0.7238]),
        ("bytes", "arc", [0.8215, 0.7973, 0.7440, 0.6828]),
        ("bytes", "sieve", [0.8227, 0.8088, 0.7846, 0.6800]),
        ("bytes", "s3fifo", [0.8229, 0.8005, 0.7403, 0.6491]),
    ];
    for capacity in ["objects", "bytes"] {
        let mut args = vec!["sim", "-q", "--trace", trace, "--capacity", capacity];
        let names: Vec<&str> = want
            .iter()
            .filter(|w| w.0 == capacity)
            .map(|w| w.1)
            .collect();
        // By objects one -p each; by bytes one list, as cachesim takes it.
        let list = names.join(",");
        if capacity == "objects" {
            for name in &names {
                args.extend(["-p", name]);
            }
        } else {
            args.extend(["-p", &list]);
        }
        let stdout = ok(&run(Path::new("."), &args), capacity);
        assert_eq!(rows(&stdout).len(), names.len(), "{stdout}");
        for ((_, policy, ratios), (label, got)) in
            want.iter().filter(|w| w.0 == capacity).zip(rows(&stdout))
        {
            assert_eq!(&label, policy);
            assert_eq!(got, ratios, "{policy} by {capacity}: {stdout}");
        }
    }
}

#[test]
fn a_size_with_a_byte_unit_counts_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let stdout = ok(
        &run(
            dir.path(),
            &["sim", "-q", "-p", "lru", "-s", "64MiB", "--json", "-"],
        ),
        "sim -s 64MiB",
    );
    let run_json: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(run_json["capacity_unit"], "bytes");
    assert_eq!(run_json["reports"][0]["capacity"], 64 << 20);

    let stderr = refused(
        &run(
            dir.path(),
            &["sim", "-p", "lru", "-s", "64MiB", "--capacity", "objects"],
        ),
        "--capacity objects -s 64MiB",
    );
    assert!(stderr.contains("a size in bytes"), "{stderr}");
    assert!(stderr.contains("--size 16384"), "{stderr}");
    let stderr = refused(
        &run(dir.path(), &["sim", "-p", "lru", "-s", "64MiB,4096"]),
        "-s 64MiB,4096",
    );
    assert!(stderr.contains("write 4096B"), "{stderr}");
    // A bare count is still objects.
    let stdout = ok(
        &run(
            dir.path(),
            &["sim", "-q", "-p", "lru", "-s", "4096", "--json", "-"],
        ),
        "sim -s 4096",
    );
    let run_json: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(run_json["capacity_unit"], "objects");
    let stderr = refused(
        &run(
            dir.path(),
            &["mrc", "--max", "64MiB", "--capacity", "objects"],
        ),
        "mrc --max 64MiB --capacity objects",
    );
    assert!(stderr.contains("a size in bytes"), "{stderr}");
}

/// `--size auto` chooses the sizes `cachesim TRACE oracleGeneral lru auto`
/// (libCacheSim aa0fc40) prints for the sample trace, with its miss ratios.
#[test]
fn size_auto_is_libcachesims_automatic_sizes() {
    let dir = tempfile::tempdir().unwrap();
    let sizes = |extra: &[&str]| {
        let mut args = vec!["sim", "-q", "-p", "lru", "-s", "auto", "--json", "-"];
        args.extend_from_slice(extra);
        let stdout = ok(&run(dir.path(), &args), "sim -s auto");
        let run_json: serde_json::Value = serde_json::from_str(&stdout).unwrap();
        run_json["reports"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                let ratio = r["miss_ratio"].as_f64().unwrap();
                (
                    r["capacity"].as_u64().unwrap(),
                    (ratio * 1e4).round() as u64,
                )
            })
            .collect::<Vec<_>>()
    };
    // cachesim … lru auto --ignore-obj-size 1: 48 0.9030, 146 0.8675, …
    assert_eq!(
        sizes(&[]),
        [
            (48, 9030),
            (146, 8675),
            (489, 8380),
            (1469, 8303),
            (4897, 8049),
            (9794, 7249),
            (19589, 6328),
            (39179, 4303),
        ]
    );
    // Counting bytes it drops 0.1 % (48 objects' worth, under 100): seven
    // sizes, from 5 MiB (cachesim: 5MiB, miss ratio 0.84034706 … 1548MiB,
    // 0.43028137).
    let bytes = sizes(&["--capacity", "bytes"]);
    assert_eq!(bytes.len(), 7, "{bytes:?}");
    assert_eq!((bytes[0].0 >> 20, bytes[0].1), (5, 8403));
    assert_eq!((bytes[6].0 >> 20, bytes[6].1), (1548, 4303));
    let stderr = refused(
        &run(dir.path(), &["sim", "-p", "lru", "-s", "auto,1%"]),
        "-s auto,1%",
    );
    assert!(stderr.contains("give it alone"), "{stderr}");
}

#[test]
fn nothing_to_simulate_is_an_error_that_says_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("empty.vscsi"), b"").unwrap();
    // sim without a first pass (no fraction, no opt) finds out after the
    // replay; with one, before it. Both say so.
    for args in [
        &["sim", "--trace", "empty.vscsi"][..],
        &["sim", "--trace", "empty.vscsi", "-p", "lru", "-s", "100"],
        &["mrc", "--trace", "empty.vscsi"],
    ] {
        let stderr = refused(&run(dir.path(), args), &args.join(" "));
        assert!(stderr.contains("holds no requests"), "{args:?}: {stderr}");
    }
    loop_vscsi(&dir.path().join("writes.vscsi"), 10, 2, Op::Write);
    for args in [
        &["sim", "--trace", "writes.vscsi", "--op", "read"][..],
        &[
            "sim",
            "--trace",
            "writes.vscsi",
            "--op",
            "read",
            "-p",
            "lru",
            "-s",
            "5",
        ],
        &["mrc", "--trace", "writes.vscsi", "--op", "read"],
    ] {
        let stderr = refused(&run(dir.path(), args), &args.join(" "));
        assert!(
            stderr.contains("--op read keeps none of the 20 requests")
                && stderr.contains("0 reads, 20 writes")
                && stderr.contains("use --op write"),
            "{args:?}: {stderr}"
        );
    }
    // 1% of 10 keys is 0: an error before anything is simulated.
    let stderr = refused(
        &run(
            dir.path(),
            &["sim", "--trace", "writes.vscsi", "-s", "1%,50%"],
        ),
        "sim -s 1%",
    );
    assert!(
        stderr.contains("--size 1%") && stderr.contains("(10 objects) rounds down to 0"),
        "{stderr}"
    );
    std::fs::write(dir.path().join("one.txt"), "5\n5\n5\n").unwrap();
    let stderr = refused(
        &run(dir.path(), &["mrc", "--trace", "one.txt"]),
        "mrc one key",
    );
    assert!(stderr.contains("one distinct key"), "{stderr}");
}

#[test]
fn output_arguments_are_checked_before_the_run() {
    let dir = tempfile::tempdir().unwrap();
    // A trace whose first record is malformed: had the run started, the error
    // would name the record instead.
    std::fs::write(dir.path().join("bad.vscsi"), [0u8; 32]).unwrap();
    for (args, want) in [
        (&["sim", "--plot", "x.pdf"][..], ".svg or .png"),
        (&["mrc", "--plot", "x.pdf"], ".svg or .png"),
        (&["sim", "--csv", "missing/x.csv"], "does not exist"),
        (&["sim", "--json", "missing/x.json"], "does not exist"),
        (&["mrc", "--csv", "missing/x.csv"], "does not exist"),
        (&["sim", "--plot", "missing/x.svg"], "does not exist"),
    ] {
        let mut args = args.to_vec();
        args.extend(["--trace", "bad.vscsi"]);
        let stderr = refused(&run(dir.path(), &args), &args.join(" "));
        assert!(stderr.contains(want), "{args:?}: {stderr}");
        assert!(!stderr.contains("record 0"), "{args:?}: {stderr}");
    }
}

#[test]
fn trace_writers_follow_the_output_name() {
    let dir = tempfile::tempdir().unwrap();
    loop_vscsi(&dir.path().join("x.vscsi"), 10, 3, Op::Read);
    let stdout = ok(
        &run(dir.path(), &["trace", "convert", "x.vscsi", "y.vscsi"]),
        "convert x.vscsi y.vscsi",
    );
    assert!(stdout.contains("converted 30 requests"), "{stdout}");
    assert!(stdout.contains("(vscsi)"), "{stdout}");
    let x = std::fs::read(dir.path().join("x.vscsi")).unwrap();
    let y = std::fs::read(dir.path().join("y.vscsi")).unwrap();
    // The reader drops `sn` and `nSG`; a file written as the writer writes
    // them (sn = index, nSG = 1) converts byte for byte.
    assert_eq!(x, y, "VSCSI → VSCSI is byte for byte");

    ok(
        &run(
            dir.path(),
            &["trace", "convert", "x.vscsi", "y.oracleGeneral.bin.zst"],
        ),
        "convert to .zst",
    );
    let z = std::fs::read(dir.path().join("y.oracleGeneral.bin.zst")).unwrap();
    assert_eq!(z[..4], [0x28, 0xb5, 0x2f, 0xfd], "zstd magic");
    assert_eq!(zstd::decode_all(&z[..]).unwrap().len(), 30 * 24);

    let output = run(
        dir.path(),
        &["trace", "gen", "zipf", "requests=10", "-o", "zipf.bin"],
    );
    let stderr = refused(&output, "gen -o zipf.bin");
    assert!(
        stderr.contains("NAME.oracleGeneral.bin") && stderr.contains(".zst"),
        "{stderr}"
    );
    assert!(!dir.path().join("zipf.bin").exists());
    let stderr = refused(
        &run(
            dir.path(),
            &["trace", "convert", "x.vscsi", "y.csv", "--to", "oracle"],
        ),
        "--to oracle y.csv",
    );
    assert!(stderr.contains("the name y.csv says csv"), "{stderr}");
    let stdout = ok(
        &run(
            dir.path(),
            &["trace", "gen", "scan", "requests=1", "-o", "one.csv"],
        ),
        "gen one request",
    );
    assert!(stdout.contains("wrote 1 request to"), "{stdout}");
}

/// Every example of every `--help` of sim, mrc and trace gen/stats/convert/analyze,
/// run as printed by bash in one scratch directory, in the order a reader
/// meets them: `trace gen` writes the traces the others read. The two input
/// files examples name and no command writes (hotspot.toml, ssd-hdd.toml as
/// in docs/simulator.md) are put there first.
#[test]
fn every_sim_mrc_and_trace_help_example_runs_as_printed() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("hotspot.toml"), "items = 65536\n").unwrap();
    std::fs::write(
        dir.path().join("ssd-hdd.toml"),
        "[group_map]\nsplit_sequential = false\ndevices = { kind = \"split\", ratio = 0.2 }\n\n\
         [[cost.groups]]\nname = \"ssd\"\nmiss = { latency_us = 100, bandwidth_mb_s = 150 }\n\n\
         [[cost.groups]]\nname = \"hdd\"\nmiss = { latency_us = 5000, bandwidth_mb_s = 50 }\n",
    )
    .unwrap();
    let mut ran = 0;
    for command in [
        &["trace", "gen", "--help"][..],
        &["trace", "stats", "--help"],
        &["trace", "convert", "--help"],
        &["trace", "analyze", "--help"],
        &["sim", "--help"],
        &["mrc", "--help"],
    ] {
        let printed = examples(command);
        assert!(printed.len() >= 2, "{command:?}: {printed:?}");
        for example in printed {
            let output = bash(&example, dir.path());
            assert!(
                output.status.success(),
                "{example}: {}",
                text(&output.stderr)
            );
            assert!(
                !text(&output.stderr).contains("WARN"),
                "{example}: {}",
                text(&output.stderr)
            );
            ran += 1;
        }
    }
    assert!(ran >= 23, "{ran} examples");
    // What they wrote reads back, each in the format its name says.
    for (file, format) in [
        ("zipf.oracleGeneral.bin", "(oracle)"),
        ("scan.csv", "(csv)"),
        ("uniform.vscsi.zst", "(vscsi)"),
        ("hot.oracleGeneral.bin", "(oracle)"),
        ("zipf.csv", "(csv)"),
        ("uniform.oracleGeneral.bin.zst", "(oracle)"),
    ] {
        let stdout = ok(&run(dir.path(), &["trace", "stats", file]), file);
        assert!(
            stdout.lines().next().unwrap().ends_with(format),
            "{file}: {stdout}"
        );
    }
    for file in [
        "mrc.svg",
        "mrc.png",
        "mrc.csv",
        "run.json",
        "analysis/popularity.csv",
        "plots/popularity.svg",
        "plots/stack_distance.png",
    ] {
        assert!(
            dir.path().join(file).metadata().unwrap().len() > 0,
            "{file}"
        );
    }
}

/// `--requests` caps the trace and `--warmup` replays accesses without
/// counting them: LRU at 4,897 objects over the sample trace's first 100,000
/// requests, counted from the 20,001st, hits what the same policy counts by
/// hand; a warm-up as long as the trace is an error, not a 0.0000 row.
#[test]
fn requests_cap_the_trace_and_warmup_is_not_counted() {
    use cairn_policy::{Capacity, PolicyConfig};
    let dir = tempfile::tempdir().unwrap();
    let json = |extra: &[&str]| -> serde_json::Value {
        let mut args = vec!["sim", "-p", "lru", "-s", "4897", "--json", "-"];
        args.extend_from_slice(extra);
        serde_json::from_str(&ok(&run(dir.path(), &args), "sim")).unwrap()
    };
    let capped = json(&["--requests", "1000"]);
    assert_eq!(capped["reports"][0]["metrics"]["requests"], 1000);
    let warm = json(&["--requests", "100000", "--warmup", "20000"]);
    let m = &warm["reports"][0]["metrics"];
    // By hand: the embedded trace is the in-repo sample, keyed by object.
    let sample =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("data/cloudPhysicsIO.oracleGeneral.bin.zst");
    let reader =
        cairn_trace::read::open(&sample, &cairn_trace::read::Format::OracleGeneral).unwrap();
    let mut lru = PolicyConfig::default_for("lru")
        .unwrap()
        .build(Capacity::Objects(4897))
        .unwrap();
    let (mut hits, mut victims) = (0u64, Vec::new());
    for (at, request) in reader.take(100_000).enumerate() {
        let request = request.unwrap();
        let access = cairn_policy::Access::read(request.object, request.size, at as u64);
        victims.clear();
        if lru.access(&access, &mut victims) && at >= 20_000 {
            hits += 1;
        }
    }
    assert_eq!(m["requests"], 80_000, "{m}");
    assert_eq!(m["hits"], hits, "{m}");
    assert!(hits > 1000, "{hits}");
    let stderr = refused(
        &run(dir.path(), &["sim", "-p", "lru", "--warmup", "200000"]),
        "warmup",
    );
    assert!(
        stderr.contains("--warmup 200000") && stderr.contains("smaller"),
        "{stderr}"
    );
    let stderr = refused(&run(dir.path(), &["sim", "--requests", "0"]), "requests 0");
    assert!(stderr.contains("--requests 0"), "{stderr}");
}
