//! `cairn serve` over a file opened `O_DIRECT` with nothing above it that
//! aligns a client's requests (exported as it is, and under a DRAM cache):
//! qemu-io sends sector-sized and odd-sized writes, many in flight at once
//! (`aio_write`), to the sectors of the same 4 KiB blocks; every byte reads
//! back through the server, is in the file itself after a flush, and is
//! there again after a restart. Made in the target directory (tmpfs may
//! refuse `O_DIRECT`). Skipped where qemu-io is missing.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::process::Stdio;

use common::{Server, cairn, connect, terminate, tool};

fn spec(socket: &Path, cached: bool) -> String {
    let top = if cached {
        "device = \"c\"\n[device.c]\nkind = \"cache\"\nover = \"f\"\nsize = \"4MiB\"\n\
         block_size = \"4KiB\"\n"
    } else {
        "device = \"f\"\n"
    };
    format!(
        "data_dir = \"data\"\nlisten = \"unix:{}\"\n[[export]]\nname = \"e\"\n{top}\
         [device.f]\nkind = \"file\"\npath = \"disk.img\"\nsize = \"16MiB\"\ndirect = true\n",
        socket.display()
    )
}

fn start(dir: &Path, socket: &Path) -> (Server, String) {
    let log = dir.join("stderr.txt");
    let child = cairn()
        .args(["serve", "--no-control", "--config"])
        .arg(dir.join("spec.toml"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let server = Server(Some(child));
    drop(connect(socket));
    (server, std::fs::read_to_string(log).unwrap())
}

/// What the test writes: (offset, length, pattern byte), no two
/// overlapping. Every sector of blocks 0..4 on its own, then odd ranges
/// across block edges.
fn writes() -> Vec<(u64, u64, u8)> {
    let mut writes: Vec<(u64, u64, u8)> =
        (0..32u64).map(|s| (s * 512, 512, 0x20 + s as u8)).collect();
    writes.extend([
        (4 * 4096 + 100, 300, 0x61),
        (6 * 4096 - 7, 14, 0x62),
        (7 * 4096 + 4095, 4098, 0x63),
        (10 * 4096 + 1, 4094, 0x64),
        (1 << 20, 1, 0x65),
    ]);
    writes
}

#[test]
fn a_direct_file_takes_sector_and_odd_writes_in_flight_together() {
    let Some(qemu_io) = tool("qemu-io") else {
        eprintln!("skipped: qemu-io is not installed (./test.sh installs qemu-utils)");
        return;
    };
    for cached in [false, true] {
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let socket = dir.path().join("nbd.sock");
        std::fs::write(dir.path().join("spec.toml"), spec(&socket, cached)).unwrap();
        let uri = format!("nbd+unix:///e?socket={}", socket.display());
        let io = |commands: &[String]| {
            common::qemu_io(&qemu_io, &uri, commands, &format!("cached {cached}: "));
        };
        let reads: Vec<String> = writes()
            .iter()
            .map(|(at, len, p)| format!("read -P {p:#x} {at} {len}"))
            .collect();

        let (mut server, logged) = start(dir.path(), &socket);
        assert!(
            logged.contains("device.f: O_DIRECT with no log disk or tier above it"),
            "{logged}"
        );
        // Rounds of the 32 sector writes all in flight together, each round
        // waited for and read back. (The server runs a connection's
        // requests on a few threads, and two read-modify-writes of one block
        // seldom overlap here: the unit test
        // `concurrent_writes_to_one_block_lose_nothing` is the one that
        // catches a missing lock.)
        let mut commands = Vec::new();
        for round in 0..8u8 {
            for s in 0..32u64 {
                let p = round << 5 | s as u8;
                commands.push(format!("aio_write -P {p:#x} {} 512", s * 512));
            }
            commands.push("aio_flush".into());
            for s in 0..32u64 {
                let p = round << 5 | s as u8;
                commands.push(format!("read -P {p:#x} {} 512", s * 512));
            }
        }
        // Then everything of `writes()` in flight together, and a flush.
        commands.extend(
            writes()
                .iter()
                .map(|(at, len, p)| format!("aio_write -P {p:#x} {at} {len}")),
        );
        commands.push("aio_flush".into());
        commands.push("flush".into());
        io(&commands);
        io(&reads);
        // The file itself holds every byte.
        let image = std::fs::read(dir.path().join("data/disk.img")).unwrap();
        for (at, len, p) in writes() {
            let bytes = &image[at as usize..(at + len) as usize];
            assert!(
                bytes.iter().all(|&b| b == p),
                "cached {cached}: {len} bytes at {at} are not {p:#x} in the file"
            );
        }
        assert!(image[11 * 4096..1 << 20].iter().all(|&b| b == 0));
        terminate(server.take());

        let (_server, _) = start(dir.path(), &socket);
        io(&reads);
    }
}
