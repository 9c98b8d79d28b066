//! `cairn serve --config examples/volumes/tier.toml` (at test sizes) through
//! a real client: qemu-io writes, the server is killed with SIGKILL, and the
//! restart says the tier recovered after an unclean stop, reads every
//! acknowledged write back (no flush was sent: a write-back tier journals
//! each write before acknowledging it), and its stop logs the tier's
//! metrics with those reads as hits; the next start after that SIGTERM is
//! warm, with nothing to replay. Skipped where qemu-io is missing.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::process::Stdio;

use common::{Server, cairn, connect, terminate, tool};

/// The example at test sizes: a 32 MiB cache device over a 256 MiB HDD.
fn spec() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/volumes/tier.toml");
    let text = std::fs::read_to_string(path).unwrap();
    let small = text
        .replace("size = \"256MiB\"", "size = \"32MiB\"")
        .replace("size = \"2GiB\"", "size = \"256MiB\"")
        .replace(
            "size = \"32MiB\"\nblock_size",
            "size = \"4MiB\"\nblock_size",
        );
    for wanted in [
        "kind = \"tier\"",
        "size = \"32MiB\"",
        "size = \"256MiB\"",
        "size = \"4MiB\"",
    ] {
        assert!(small.contains(wanted), "the example changed shape:\n{text}");
    }
    small
}

/// A server on the spec in `dir`, logging (at the default level: the
/// tier's notes and its metrics line are `info`) to `log`.
fn start(dir: &Path, socket: &Path, log: &Path) -> Server {
    let child = cairn()
        .args(["serve", "--config"])
        .arg(dir.join("tier.toml"))
        .arg("--listen")
        .arg(format!("unix:{}", socket.display()))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap();
    let server = Server(Some(child));
    // Listening means the volume is open (and its notes logged).
    drop(connect(socket));
    server
}

/// The numbers before `word` in the metrics line (`544 hits`).
fn count(line: &str, word: &str) -> u64 {
    let before = &line[..line.find(&format!(" {word}")).unwrap()];
    before
        .rsplit([' ', '('])
        .next()
        .unwrap()
        .parse()
        .unwrap_or_else(|e| panic!("{word} in {line:?}: {e}"))
}

#[test]
fn a_tier_survives_kill_9_and_serves_its_blocks_as_hits_after_the_restart() {
    let Some(qemu_io) = tool("qemu-io") else {
        eprintln!("skipped: qemu-io is not installed (./test.sh installs qemu-utils)");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("tier.toml"), spec()).unwrap();
    let socket = dir.path().join("cairn.sock");
    let log = dir.path().join("stderr.txt");
    let uri = format!("nbd+unix:///tier?socket={}", socket.display());
    let io = |commands: &[String]| common::qemu_io(&qemu_io, &uri, commands, "");
    // 64 KiB at 40 places (spread out, so no sequential cutoff), each its
    // own pattern; no flush.
    let places: Vec<(u64, u8)> = (0..40u64)
        .map(|i| ((i * 37 % 200) << 20 | (i % 7) << 16, 0x10 + i as u8))
        .collect();
    let writes: Vec<String> = places
        .iter()
        .map(|(at, p)| format!("write -P {p:#x} {at} 64k"))
        .collect();
    let reads: Vec<String> = places
        .iter()
        .map(|(at, p)| format!("read -P {p:#x} {at} 64k"))
        .collect();

    let mut server = start(dir.path(), &socket, &log);
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(
        logged.contains("device.tier: formatted tier (write-back"),
        "{logged}"
    );
    io(&writes);
    let mut child = server.take();
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    std::fs::remove_file(&socket).ok();

    let mut server = start(dir.path(), &socket, &log);
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(
        logged.contains("device.tier: recovered after an unclean stop:")
            && logged.contains("journal records replayed"),
        "the restart after kill -9 was not reported as a crash recovery:\n{logged}"
    );
    io(&reads);
    terminate(server.take());
    let logged = std::fs::read_to_string(&log).unwrap();
    let line = logged
        .lines()
        .find(|l| l.contains("device.tier: tier: "))
        .unwrap_or_else(|| panic!("no metrics line at the stop:\n{logged}"));
    // Each 64 KiB read is 16 blocks of the tier, all cached: the DRAM cache
    // above it is cold after the restart, so each reaches the tier as a hit.
    let hits = count(line, "hits");
    assert!(hits >= 40 * 16, "{line}");
    assert_eq!(count(line, "errors"), 0, "{line}");
    assert!(
        logged.contains("every log disk and every tier checkpointed"),
        "{logged}"
    );

    // After that SIGTERM: warm, nothing replayed, the data still there.
    let mut server = start(dir.path(), &socket, &log);
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(
        logged.contains("device.tier: opened after a clean stop: ") && !logged.contains("WARN"),
        "{logged}"
    );
    io(&reads);
    terminate(server.take());
}
