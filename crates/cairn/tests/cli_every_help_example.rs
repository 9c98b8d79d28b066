//! Every example of every `--help` runs as printed somewhere. The census walks
//! every subcommand's `--help` and gives each example one place: another test
//! that runs it (named, and the function there that does), this file, or
//! `bench/help-examples.sh` (the ones that take minutes, verbatim in its
//! list). An example with no place fails the census, so a new one cannot
//! ship unrun. This file runs the rest: the top-level, `reproduce` and `fsck`
//! examples, and `serve`'s NBD examples with real clients (qemu-io, nbdinfo).
#![allow(clippy::unwrap_used)]

mod common;

use std::fmt::Write as _;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::examples::text;
use common::{cairn, wait_for_sockets};

/// Where an example is run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Place {
    /// By another test: its file under `tests/` and the function in it.
    Test(&'static str, &'static str),
    /// By `the_quick_examples_run_as_printed`, here.
    Quick,
    /// By `the_serve_and_fsck_examples_run_as_printed`, here.
    Serve,
    /// By `bench/help-examples.sh`: minutes each, or it signals every
    /// `cairn serve` on the machine.
    Long,
}

const SIM: Place = Place::Test(
    "cli_sim_right_by_default.rs",
    "fn every_sim_mrc_and_trace_help_example_runs_as_printed",
);
const STATS: Place = Place::Test(
    "serve_stats_count_what_fio_did.rs",
    "fn the_help_examples_run_as_printed",
);

/// The place of `example` from `cairn PATH --help`, if it has one.
fn place(path: &str, example: &str, long: &[String]) -> Option<Place> {
    if long.iter().any(|l| l == example) {
        return Some(Place::Long);
    }
    let place = match path {
        "sim" | "mrc" | "trace gen" | "trace stats" | "trace convert" | "trace analyze" => SIM,
        "stats" | "ctl" => STATS,
        "completions" => Place::Test(
            "cli_completions_and_man_pages.rs",
            "fn the_completions_help_examples_run_as_printed",
        ),
        "man" => Place::Test(
            "cli_completions_and_man_pages.rs",
            "fn the_man_help_examples_run_as_printed_and_examples_read_as_typed",
        ),
        "" if example.starts_with("cairn --log-format json") => {
            Place::Test("serve_logs.rs", "fn the_help_example_logs_json_lines")
        }
        "reproduce logdisk" if example == "cairn reproduce logdisk --scale 0.1" => Place::Test(
            "cli_reproduce.rs",
            "fn logdisk_at_a_tenth_scale_upholds_the_nv_cache_claims",
        ),
        "reproduce ntl" if example == "cairn reproduce ntl --scale 0.1" => Place::Test(
            "cli_reproduce.rs",
            "fn ntl_at_a_tenth_scale_measures_every_cell_and_judges_every_claim",
        ),
        "" | "reproduce ons" | "reproduce cost" | "reproduce dual" => Place::Quick,
        "fsck" => Place::Serve,
        "serve" => serve_place(example),
        _ => return None,
    };
    Some(place)
}

/// `cairn serve --help`'s examples: the file gateway's and the metrics'
/// have tests of their own.
fn serve_place(example: &str) -> Place {
    let files = "cli_serve_files.rs";
    if example.contains(":9100") {
        Place::Test(
            "metrics_exposition_format.rs",
            "fn the_help_example_runs_as_printed",
        )
    } else if example.contains(":9101") {
        Place::Test(files, "fn the_files_metrics_help_example_runs_as_printed")
    } else if example.contains(":9102") {
        Place::Test(
            files,
            "fn the_union_help_example_runs_as_printed_and_learns_the_slow_backends_cost",
        )
    } else if example.contains(":9103") {
        Place::Test(
            "serve_files_spill.rs",
            "fn the_spill_help_example_runs_as_printed_and_is_warm_after_a_restart",
        )
    } else if example == "cairn stats --watch 2" {
        STATS
    } else {
        Place::Serve
    }
}

/// `cairn ARGS --help`'s text.
fn help(args: &[String]) -> String {
    let output = cairn().args(args).arg("--help").output().unwrap();
    assert!(output.status.success(), "cairn {args:?} --help");
    text(&output.stdout)
}

/// Every subcommand path, the top level (empty) first, as each `--help`
/// lists its commands (`help` aside).
fn commands() -> Vec<Vec<String>> {
    let mut found = vec![vec![]];
    let mut at = 0;
    while at < found.len() {
        let path = found[at].clone();
        let help = help(&path);
        if let Some((_, listed)) = help.split_once("\nCommands:\n") {
            for line in listed.lines().take_while(|l| l.starts_with(' ')) {
                let Some(name) = line.strip_prefix("  ").filter(|l| !l.starts_with(' ')) else {
                    continue; // a description's second line
                };
                let name = name.split_whitespace().next().unwrap();
                if name != "help" {
                    found.push(path.iter().cloned().chain([name.to_owned()]).collect());
                }
            }
        }
        at += 1;
    }
    found
}

/// The examples of `cairn PATH --help`: the lines after `Examples:` indented
/// two spaces, to the next unindented line; a line ending in `\` joined with
/// the next, and a description on the same line (after three spaces) cut.
fn examples(help: &str) -> Vec<String> {
    let Some((_, rest)) = help.split_once("\nExamples:\n") else {
        return vec![];
    };
    let mut out = vec![];
    let mut lines = rest
        .lines()
        .take_while(|l| l.is_empty() || l.starts_with(' '));
    while let Some(line) = lines.next() {
        let Some(mut command) = line.strip_prefix("  ").filter(|l| !l.starts_with(' ')) else {
            continue;
        };
        let mut joined = String::new();
        while let Some(head) = command.strip_suffix('\\') {
            joined.push_str(head);
            command = lines.next().unwrap().trim();
        }
        joined.push_str(command);
        let command = joined.split("   ").next().unwrap().trim().to_owned();
        out.push(command);
    }
    out
}

/// Every example: its subcommand path (words joined by a space) and the
/// command as a user pastes it.
fn census() -> Vec<(String, String)> {
    let mut all = vec![];
    for path in commands() {
        for example in examples(&help(&path)) {
            all.push((path.join(" "), example));
        }
    }
    all
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The examples `bench/help-examples.sh` runs: the lines of its `LONG` list,
/// unquoted.
fn long_examples() -> Vec<String> {
    let script = std::fs::read_to_string(repo().join("bench/help-examples.sh")).unwrap();
    let (_, list) = script.split_once("\nLONG=(\n").unwrap();
    let (list, _) = list.split_once("\n)\n").unwrap();
    list.lines()
        .map(|l| {
            let l = l.trim();
            if let Some(single) = l.strip_prefix('\'') {
                single.strip_suffix('\'').unwrap().to_owned()
            } else {
                let double = l.strip_prefix('"').unwrap().strip_suffix('"').unwrap();
                double.replace("\\$", "$")
            }
        })
        .collect()
}

/// The examples of `place`.
fn placed(place: Place) -> Vec<String> {
    let long = long_examples();
    census()
        .into_iter()
        .filter(|(path, example)| self::place(path, example, &long) == Some(place))
        .map(|(_, example)| example)
        .collect()
}

#[test]
fn every_help_example_has_a_place_where_it_runs() {
    let all = census();
    let long = long_examples();
    let paths: Vec<&str> = all.iter().map(|(p, _)| p.as_str()).collect();
    for wanted in [
        "",
        "serve",
        "sim",
        "trace gen",
        "reproduce ntl",
        "bench files",
        "fsck",
    ] {
        assert!(
            paths.contains(&wanted),
            "no examples of {wanted:?}: {paths:?}"
        );
    }
    assert!(all.len() >= 100, "{} examples", all.len());
    let mut unplaced = vec![];
    for (path, example) in &all {
        match place(path, example, &long) {
            None => unplaced.push(format!("cairn {path}: {example}")),
            Some(Place::Test(file, function)) => {
                let source = std::fs::read_to_string(
                    Path::new(env!("CARGO_MANIFEST_DIR"))
                        .join("tests")
                        .join(file),
                )
                .unwrap_or_else(|e| panic!("{file}: {e}"));
                assert!(
                    source.contains(&format!("{function}(")),
                    "{example:?} is said to be run by {function} in {file}, which has no such test"
                );
            }
            Some(_) => {}
        }
    }
    assert!(
        unplaced.is_empty(),
        "examples no test runs (run them in a test, here, or in \
         bench/help-examples.sh):\n{}",
        unplaced.join("\n")
    );
    // And the long list names only examples that are printed.
    for example in &long {
        assert!(
            all.iter().any(|(_, e)| e == example),
            "bench/help-examples.sh runs {example:?}, which no --help prints"
        );
    }
    // The joining of continued lines and the cutting of descriptions.
    assert!(all.iter().any(|(_, e)| e
        == "qemu-io -f raw -c 'write -P 0xab 0 1M' -c 'read -P 0xab 0 1M' \
            'nbd+unix:///cairn?socket=cairn-data/cairn.sock'"));
    assert!(
        all.iter()
            .any(|(_, e)| e == "cairn reproduce ons --scale 0.125")
    );
}

/// A small MSR Cambridge trace (the format of the paper's `usr_0.csv`): 20,000
/// requests, mostly to a few hot 4 KiB blocks of one disk.
fn msr_trace() -> String {
    use rand::{Rng, SeedableRng};
    let mut random = rand_chacha::ChaCha8Rng::seed_from_u64(1);
    let mut out = String::new();
    for i in 0..20_000u64 {
        let r: f64 = random.random();
        let block = (1.0 / (r + 0.001)) as u64 % 4096;
        let op = if i % 3 == 0 { "Write" } else { "Read" };
        let size = 4096 << (i % 3);
        writeln!(
            out,
            "{},usr,0,{op},{},{size},1000",
            128_166_372_003_061_629 + i * 1000,
            block * 4096
        )
        .unwrap();
    }
    out
}

/// `cairn --help`'s examples (the long and the logging ones aside) and
/// every `reproduce` one that takes seconds, as printed, by bash in one
/// scratch directory. The files they name are put there first: each
/// `--spec` an unedited copy of the reproduction's own spec, `usr_0.csv` a
/// small trace in MSR's format.
#[test]
fn the_quick_examples_run_as_printed() {
    let dir = tempfile::tempdir().unwrap();
    for (from, to) in [
        ("ons.toml", "my-ons.toml"),
        ("cost.toml", "my-cost.toml"),
        ("dual.toml", "my-dual.toml"),
    ] {
        std::fs::copy(repo().join("reproduce").join(from), dir.path().join(to)).unwrap();
    }
    std::fs::write(dir.path().join("usr_0.csv"), msr_trace()).unwrap();
    let quick = placed(Place::Quick);
    assert!(quick.len() >= 12, "{quick:?}");
    for example in &quick {
        let output = common::examples::bash(example, dir.path());
        let (stdout, stderr) = (text(&output.stdout), text(&output.stderr));
        assert!(output.status.success(), "{example}: {stderr}");
        assert!(!stderr.contains("WARN"), "{example}: {stderr}");
        // A trace is opened, and its unit told, once a run.
        assert!(
            stderr.matches("--unit auto").count() <= 1,
            "{example}: {stderr}"
        );
        // What each kind prints when it did its work.
        let wanted = if example.starts_with("cairn reproduce") {
            "confirmed"
        } else if example.starts_with("cairn help") {
            "Examples:"
        } else if example.contains("--json") {
            "\"miss_ratio\""
        } else {
            "0."
        };
        assert!(stdout.contains(wanted), "{example}: {stdout}");
        if let Some(out) = example.split("--out ").nth(1) {
            let name = example.split_whitespace().nth(2).unwrap();
            let csv = Path::new(out).join(format!("{name}.csv"));
            assert!(csv.metadata().unwrap().len() > 0, "{example}: {csv:?}");
        }
        if example.contains("usr_0.csv") {
            assert!(
                stdout.contains("simulated on usr_0.csv"),
                "{example}: {stdout}"
            );
        }
    }
}

/// A `serve` example started as printed by bash, in a process group of its
/// own (a line with `&&` is a shell, not the server), stopped by SIGTERM to
/// its servers.
struct Example(Option<Child>);

impl Example {
    fn start(line: &str, dir: &Path) -> Self {
        let child = common::examples::shell(line, dir)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
            .unwrap();
        Self(Some(child))
    }

    /// SIGTERM to the servers of the group (not to a shell running them,
    /// which would die of it); the example must exit 0.
    fn stop(mut self) {
        let child = self.0.take().unwrap();
        assert!(
            Command::new("pkill")
                .args(["-TERM", "-x", "-g", &child.id().to_string(), "cairn"])
                .status()
                .unwrap()
                .success()
        );
        let output = child.wait_with_output().unwrap();
        assert!(output.status.success(), "{}", text(&output.stderr));
    }
}

impl Drop for Example {
    fn drop(&mut self) {
        if let Some(child) = &mut self.0 {
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", child.id())])
                .status();
            let _ = child.wait();
        }
    }
}

/// The example of `examples` that contains `text`.
fn find<'a>(examples: &'a [String], text: &str) -> &'a str {
    examples
        .iter()
        .find(|e| e.contains(text))
        .unwrap_or_else(|| panic!("no example with {text:?} in {examples:?}"))
}

/// `bash -c line` in `dir`; its status and stdout, stderr appended.
fn run(line: &str, dir: &Path) -> (bool, String) {
    let output = common::examples::bash(line, dir);
    let all = text(&output.stdout) + &text(&output.stderr);
    (output.status.success(), all)
}

/// `serve --help`'s NBD examples and `fsck --help`'s, as printed, each
/// server in a directory of its own: the default volume written and read
/// back by qemu-io, then checked clean by fsck (and a damaged image's exit
/// status printed); the default spec printed and served; a DRAM disk, a
/// sparse file, a server started by nbdinfo itself, and TLS with and
/// without client certificates, each answering nbdinfo.
#[test]
fn the_serve_and_fsck_examples_run_as_printed() {
    let required = std::env::var_os("CAIRN_REQUIRE_SYSTEM_TOOLS").is_some();
    for tool in ["qemu-io", "nbdinfo", "openssl"] {
        if common::tool(tool).is_none() {
            assert!(!required, "{tool} is required (CAIRN_REQUIRE_SYSTEM_TOOLS)");
            eprintln!("SKIPPED: {tool} is not installed");
            return;
        }
    }
    let all = placed(Place::Serve);
    let mut serve = all.clone();
    let mut ran = |example: &str| {
        let at = serve.iter().position(|e| e == example).unwrap();
        serve.remove(at);
    };

    // The default volume, a pattern written and read back, then fsck.
    let dir = tempfile::tempdir().unwrap();
    let default = find(&all, "cairn serve");
    assert_eq!(default, "cairn serve");
    let server = Example::start(default, dir.path());
    wait_for_sockets(dir.path());
    let qemu = find(&all, "qemu-io");
    let (ok, out) = run(qemu, dir.path());
    assert!(
        ok && out.contains("read 1048576/1048576 bytes at offset 0"),
        "{qemu}: {out}"
    );
    server.stop();
    let fsck = find(&all, "cairn fsck cairn-data/disk.img");
    let (ok, out) = run(fsck, dir.path());
    assert!(
        ok && out.contains("clean log disk (256 of 262144"),
        "{fsck}: {out}"
    );
    // A damaged image's verdict is exit status 4, which the example prints.
    let block = common::log_disk_image(&dir.path().join("disk.img"));
    common::damage(&dir.path().join("disk.img"), block * 4096, &[0xff; 16]);
    let damaged = find(&all, "fsck disk.img ||");
    let (ok, out) = run(damaged, dir.path());
    assert!(ok && out.contains("fsck exit status 4"), "{damaged}: {out}");
    for example in [default, qemu, fsck, damaged] {
        ran(example);
    }

    // The default spec printed, then served from the file.
    let dir = tempfile::tempdir().unwrap();
    let printed = find(&all, "--print-default-config");
    let server = Example::start(printed, dir.path());
    wait_for_sockets(dir.path());
    let spec = std::fs::read_to_string(dir.path().join("my.toml")).unwrap();
    assert!(spec.contains("[[export]]"), "{spec}");
    server.stop();
    ran(printed);

    // A DRAM disk and a sparse file: nbdinfo sees each one's size.
    for (text, size) in [
        ("--memory 4GiB", "export-size: 4294967296"),
        ("--file disk.img --size 10GiB", "export-size: 10737418240"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let example = find(&all, text);
        let server = Example::start(example, dir.path());
        wait_for_sockets(dir.path());
        let (ok, out) = run(
            "nbdinfo 'nbd+unix:///cairn?socket=cairn-data/cairn.sock'",
            dir.path(),
        );
        assert!(ok && out.contains(size), "{example}: {out}");
        server.stop();
        ran(example);
    }
    let file = tempfile::tempdir().unwrap();

    // A server nbdinfo starts itself (systemd socket activation).
    let activated = find(&all, "nbdinfo -- [");
    let (ok, out) = run(activated, file.path());
    assert!(
        ok && out.contains("export-size: 67108864"),
        "{activated}: {out}"
    );
    ran(activated);
    // With --stdio too, the server would speak NBD on nbdinfo's terminal.
    let (ok, out) = run(
        &activated.replace("cairn serve", "cairn serve --stdio"),
        file.path(),
    );
    assert!(
        !ok && out.contains("leave out --stdio to serve on that socket"),
        "{out}"
    );

    // TLS: pki/ holds a CA, the server's certificate and a client's.
    let dir = tempfile::tempdir().unwrap();
    common::certificates(&dir.path().join("pki")).unwrap();
    let client = find(&all, "nbdinfo 'nbds+unix");
    for text in ["--tls-certificates pki/", "--tls-verify-peer"] {
        let example = all
            .iter()
            .find(|e| {
                e.starts_with("cairn serve")
                    && e.contains(text)
                    && (text != "--tls-certificates pki/" || !e.contains("--tls-verify-peer"))
            })
            .unwrap();
        let server = Example::start(example, dir.path());
        wait_for_sockets(dir.path());
        let (ok, out) = run(client, dir.path());
        assert!(
            ok && out.contains("export-size: 1073741824") && out.contains("with TLS"),
            "{example} then {client}: {out}"
        );
        // Plaintext is refused; without a client certificate, so is the
        // client of a server that verifies peers.
        let (ok, _) = run(
            "nbdinfo 'nbd+unix:///cairn?socket=cairn-data/cairn.sock'",
            dir.path(),
        );
        assert!(!ok, "{example} served a plaintext client");
        if text == "--tls-verify-peer" {
            let anonymous = dir.path().join("anonymous");
            std::fs::create_dir_all(&anonymous).unwrap();
            std::fs::copy(
                dir.path().join("pki/ca-cert.pem"),
                anonymous.join("ca-cert.pem"),
            )
            .unwrap();
            let (ok, out) = run(&client.replace("=pki/", "=anonymous/"), dir.path());
            assert!(!ok, "{example} served a client with no certificate: {out}");
        }
        server.stop();
        ran(example);
    }
    ran(client);

    // The gateway's first example: a file's first KiB by curl.
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("videos")).unwrap();
    let movie: Vec<u8> = (0..5000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(dir.path().join("videos/movie.mp4"), &movie).unwrap();
    let gateway = find(&all, "--listen tcp:127.0.0.1:8080");
    let curl = find(&all, "curl -r 0-1023");
    if std::net::TcpListener::bind("127.0.0.1:8080").is_ok() {
        let server = Example::start(gateway, dir.path());
        common::examples::wait_for_port("8080", Instant::now() + Duration::from_mins(1), gateway);
        let (ok, out) = run(curl, dir.path());
        assert!(ok, "{curl}: {out}");
        assert_eq!(
            std::fs::read(dir.path().join("head.bin")).unwrap(),
            &movie[..1024]
        );
        server.stop();
    } else {
        eprintln!("SKIPPED: port 8080 of the example is in use here");
    }
    ran(gateway);
    ran(curl);
    assert!(
        serve.is_empty(),
        "serve examples this test does not run: {serve:?}"
    );
}
