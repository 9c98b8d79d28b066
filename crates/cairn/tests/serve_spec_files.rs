//! `cairn serve --config examples/volumes/files.toml` (at test sizes): one
//! server with a block export over NBD and a `[[files]]` export over HTTP
//! beside it. The file export answers at the address printed, its spill is
//! created under the data directory, `cairn stats` and the metrics show both
//! kinds of export, SIGTERM stops both (exit 0, the spill checkpointed), and
//! the next start finds the spill warm. A spec whose `[[files]]` reuse a
//! name is refused before anything listens.
#![allow(clippy::unwrap_used)]

mod common;

use std::net::SocketAddr;
use std::path::Path;

use common::metrics::{exchange, gateway_and_metrics, gateways_and_metrics, get};
use common::{Server, cairn, connect, terminate};

/// The example at test sizes, listening on ports the system picks.
fn spec() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/volumes/files.toml");
    let text = std::fs::read_to_string(path).unwrap();
    let small = text
        .replace("size = \"1GiB\"", "size = \"16MiB\"")
        .replace("size = \"4GiB\"", "size = \"64MiB\"")
        .replace("tcp:127.0.0.1:8080", "tcp:127.0.0.1:0");
    for wanted in ["[[files]]", "[files.spill]", "16MiB", "64MiB", ":0\""] {
        assert!(small.contains(wanted), "the example changed shape:\n{text}");
    }
    small
}

/// A server on `dir/files.toml`: its gateway's and metrics' addresses.
fn start(dir: &Path) -> (Server, SocketAddr, SocketAddr, std::process::ChildStderr) {
    let mut command = cairn();
    command
        .current_dir(dir)
        .args(["serve", "--config", "files.toml"]);
    let (server, gateway, metrics, stderr) = gateway_and_metrics(command, true);
    (server, gateway, metrics, stderr.unwrap())
}

/// GET `path` (`/BUCKET/KEY`) from `gateway`: its body, the status 200.
fn read(gateway: SocketAddr, path: &str) -> Vec<u8> {
    let request = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    let answer = exchange(gateway, request.as_bytes());
    assert_eq!(answer.status, 200, "{path}");
    answer.body
}

/// What `cairn stats` prints of the server whose data directory is
/// `dir/cairn-data`.
fn stats_table(dir: &Path) -> String {
    let stats = cairn()
        .current_dir(dir)
        .args(["stats", "--socket", "cairn-data/cairn.ctl"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&stats.stdout).into_owned()
}

#[test]
fn a_spec_serves_a_file_export_beside_its_block_export() {
    // In the target directory: the second run opens the spill `O_DIRECT`,
    // which tmpfs before Linux 6.6 refuses.
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    std::fs::write(dir.path().join("files.toml"), spec()).unwrap();
    let videos = dir.path().join("cairn-data/videos");
    std::fs::create_dir_all(&videos).unwrap();
    let movie: Vec<u8> = (0..3_000_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    std::fs::write(videos.join("movie.mp4"), &movie).unwrap();

    let mut spill_hits = Vec::new();
    for run in 0..4 {
        if run >= 1 {
            // `direct = true` opens the same spill `O_DIRECT`, warm; then
            // `exclusive = true` too: the blocks read leave the SSD and the
            // stop hands DRAM's down again; then `promote = false`: the
            // blocks are read where they are.
            let extra = [
                "",
                "\ndirect = true",
                "\ndirect = true\nexclusive = true",
                "\ndirect = true\nexclusive = true\npromote = false",
            ][run];
            let changed = spec().replace(
                "path = \"media.spill\"",
                &format!("path = \"media.spill\"{extra}"),
            );
            assert_ne!(changed, spec());
            std::fs::write(dir.path().join("files.toml"), changed).unwrap();
        }
        let (server, gateway, metrics, stderr) = start(dir.path());
        // The block export answers too.
        connect(&dir.path().join("cairn-data/cairn.sock")).handshake();
        assert!(
            read(gateway, "/media/movie.mp4") == movie,
            "run {run}: the bytes differ"
        );
        let text = get(metrics, "/metrics").text();
        assert!(
            text.contains("cairn_files_misses_total{export=\"media\"}"),
            "{text}"
        );
        assert!(
            text.contains("export=\"scratch\""),
            "the block export's metrics: {text}"
        );
        let hits: u64 = text
            .lines()
            .find_map(|l| l.strip_prefix("cairn_files_spill_hits_total{export=\"media\"} "))
            .unwrap()
            .parse()
            .unwrap();
        spill_hits.push(hits);
        let table = stats_table(dir.path());
        assert!(
            table.contains("file export \"media\"") && table.contains("export \"scratch\""),
            "{table}"
        );
        let mut server = server;
        terminate(server.take());
        let mut log = String::new();
        std::io::Read::read_to_string(&mut { stderr }, &mut log).unwrap();
        assert!(
            log.contains("checkpointed (the next start is warm at once)"),
            "{log}"
        );
        assert!(log.contains("stopped; every export flushed"), "{log}");
        if run >= 1 {
            assert!(log.contains("warm after a clean stop"), "{log}");
        }
        assert_eq!(log.contains("(O_DIRECT)"), run >= 1, "{log}");
        assert_eq!(
            log.contains("exclusive: it holds what the DRAM cache drops")
                && log.contains(
                    "(exclusive: 46 taken back up; 3 DRAM blocks handed down at the stop)"
                ),
            run == 2,
            "{log}"
        );
        assert_eq!(
            log.contains("serves its hits in place")
                && log.contains("(exclusive: 3 reads served in place; 0 DRAM blocks handed down"),
            run == 3,
            "{log}"
        );
    }
    assert!(dir.path().join("cairn-data/media.spill.map").is_file());
    // 3,000,000 bytes: 46 blocks of 64 KiB, from the SSD on the later runs.
    assert_eq!(spill_hits, [0, 46, 46, 46]);
}

#[test]
fn a_spec_whose_file_exports_reuse_a_name_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    for sub in ["videos", "other"] {
        std::fs::create_dir_all(dir.path().join("cairn-data").join(sub)).unwrap();
    }
    for (extra, expected) in [
        (
            "\n[[files]]\nname = \"media\"\nsource = [\"other\"]\nlisten = \"tcp:127.0.0.1:0\"\n",
            "files[1].name: \"media\" is the name of an earlier [[files]]",
        ),
        (
            "\n[[files]]\nname = \"scratch\"\nsource = [\"other\"]\nlisten = \"tcp:127.0.0.1:0\"\n",
            "is also an [[export]]'s name",
        ),
        (
            "\n[[files]]\nname = \"other\"\nsource = [\"other\"]\nlisten = \"unix:x.sock\"\n",
            "TCP only (listen tcp:HOST:PORT)",
        ),
        // Errors name the table's fields, not `cairn serve --files`' flags.
        (
            "\n[[files]]\nname = \"other\"\nsource = [\"other\"]\nlisten = \"tcp:127.0.0.1:0\"\nthrottle = [\"2ms\"]\n",
            "files[1] (\"other\"): throttle: throttle \"2ms\"",
        ),
        (
            "\n[[files]]\nname = \"other\"\nsource = [\"other\"]\nlisten = \"tcp:127.0.0.1:0\"\n[files.spill]\npath = \"x.spill\"\n",
            "x.spill: no such file; give spill.size SIZE to create it",
        ),
        (
            "\n[[files]]\nname = \"other\"\nsource = [\"other\"]\nlisten = \"tcp:127.0.0.1:0\"\n[files.spill]\npath = \"x.spill\"\nsize = \"16MiB\"\npromote = false\n",
            "spill.promote = false needs spill.exclusive = true",
        ),
        (
            "\n[[files]]\nname = \"other\"\nsource = [\"missing\"]\nlisten = \"tcp:127.0.0.1:0\"\n",
            "files[1] (\"other\"): source ",
        ),
    ] {
        std::fs::write(dir.path().join("files.toml"), spec() + extra).unwrap();
        let output = cairn()
            .current_dir(dir.path())
            .args(["serve", "--config", "files.toml"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{extra} started");
        assert!(stderr.contains(expected), "{extra}: {stderr}");
        assert!(!stderr.contains(" --"), "a flag named for a spec: {stderr}");
    }
}

/// A spec of `[[files]]` only: no NBD server, both file exports answer, one
/// `cairn stats` and one metrics listener show both, SIGHUP re-reads the
/// spec and keeps serving (its default would kill the process before the
/// spill's checkpoint), SIGTERM stops both (exit 0, the spill checkpointed). A spec
/// with neither kind of export, and `--stdio` with files only, are refused.
#[test]
fn a_spec_of_file_exports_only_serves_them_without_an_nbd_server() {
    let dir = tempfile::tempdir().unwrap();
    for sub in ["videos", "docs"] {
        std::fs::create_dir_all(dir.path().join("cairn-data").join(sub)).unwrap();
    }
    let movie: Vec<u8> = (0..1_000_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(dir.path().join("cairn-data/videos/movie.mp4"), &movie).unwrap();
    std::fs::write(
        dir.path().join("cairn-data/docs/readme.txt"),
        b"files only\n",
    )
    .unwrap();
    let spec = "[[files]]\nname = \"media\"\nsource = [\"videos\"]\nlisten = \"tcp:127.0.0.1:0\"\n\
                [files.spill]\npath = \"media.spill\"\nsize = \"16MiB\"\n\n\
                [[files]]\nname = \"docs\"\nsource = [\"docs\"]\nlisten = \"tcp:127.0.0.1:0\"\n";
    std::fs::write(dir.path().join("files.toml"), spec).unwrap();

    let mut command = cairn();
    command
        .current_dir(dir.path())
        .args(["serve", "--config", "files.toml"]);
    let (mut server, gateways, metrics, stderr) = gateways_and_metrics(command, true);
    assert_eq!(gateways.len(), 2, "{gateways:?}");
    assert!(read(gateways[0], "/media/movie.mp4") == movie);
    assert_eq!(read(gateways[1], "/docs/readme.txt"), b"files only\n");
    assert!(
        !dir.path().join("cairn-data/cairn.sock").exists(),
        "no NBD socket for a spec without [[export]]"
    );
    let text = get(metrics, "/metrics").text();
    for export in ["media", "docs"] {
        assert!(
            text.contains(&format!("cairn_files_misses_total{{export=\"{export}\"}}")),
            "{text}"
        );
    }
    let table = stats_table(dir.path());
    assert!(
        table.contains("file export \"media\"") && table.contains("file export \"docs\""),
        "{table}"
    );
    let child = server.take();
    let pid = child.id().to_string();
    assert!(
        std::process::Command::new("kill")
            .args(["-HUP", &pid])
            .status()
            .unwrap()
            .success()
    );
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(read(gateways[1], "/docs/readme.txt"), b"files only\n");
    terminate(child);
    let mut log = String::new();
    std::io::Read::read_to_string(&mut { stderr.unwrap() }, &mut log).unwrap();
    for wanted in [
        "SIGHUP: nothing else to reload",
        "SIGTERM: finishing in-flight requests",
        "file export \"media\" stopped",
        "file export \"docs\" stopped",
        "checkpointed (the next start is warm at once)",
        "stopped; the spec has file exports only",
    ] {
        assert!(log.contains(wanted), "{wanted:?} not in:\n{log}");
    }

    // A data directory that does not exist yet is created (a spec of files
    // only is not a read-only volume: its spill writes there).
    let fresh = tempfile::tempdir().unwrap();
    std::fs::create_dir(fresh.path().join("videos")).unwrap();
    std::fs::write(fresh.path().join("videos/a"), b"new\n").unwrap();
    std::fs::write(
        fresh.path().join("files.toml"),
        "data_dir = \"state\"\n[[files]]\nname = \"media\"\nsource = [\"../videos\"]\n\
         listen = \"tcp:127.0.0.1:0\"\n[files.spill]\npath = \"media.spill\"\nsize = \"16MiB\"\n",
    )
    .unwrap();
    let mut command = cairn();
    command
        .current_dir(fresh.path())
        .args(["serve", "--config", "files.toml"]);
    let (mut server, gateway, _metrics, _) = gateway_and_metrics(command, false);
    assert_eq!(read(gateway, "/media/a"), b"new\n");
    assert!(fresh.path().join("state/media.spill").is_file());
    terminate(server.take());

    // Refused: --stdio with files only; a spec with no export of either kind.
    let output = cairn()
        .current_dir(dir.path())
        .args(["serve", "--config", "files.toml", "--stdio"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success() && stderr.contains("has [[files]] only"),
        "{stderr}"
    );
    // TLS is NBD's: with no [[export]], [tls] or --tls is a mistake.
    let with_tls = format!("{spec}\n[tls]\nmode = \"require\"\ncertificates = \"pki\"\n");
    std::fs::write(dir.path().join("tls.toml"), with_tls).unwrap();
    for args in [
        &["serve", "--config", "tls.toml"][..],
        &["serve", "--config", "files.toml", "--tls", "require"],
    ] {
        let output = cairn().current_dir(dir.path()).args(args).output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            !output.status.success() && stderr.contains("over plain HTTP"),
            "{args:?}: {stderr}"
        );
    }
    std::fs::write(dir.path().join("empty.toml"), "").unwrap();
    let output = cairn()
        .current_dir(dir.path())
        .args(["serve", "--config", "empty.toml"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success()
            && stderr.contains("at least one [[export]] or [[files]] is needed"),
        "{stderr}"
    );
}
