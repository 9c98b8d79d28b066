//! `cairn serve --config examples/volumes/objects.toml` (at test sizes, on
//! the Ceph RGW `test.sh` starts) through a real client: qemu-io writes and
//! flushes (into the local write log: the open segment is not in the store);
//! a second server, with a data directory of its own, is refused naming the
//! holder; the first is killed with SIGKILL, and the restart takes the
//! volume over by itself (the holder's PID is gone), writes the log's
//! records again and reads every flushed write back; after a SIGTERM the
//! next start is clean. Skipped without qemu-io or without
//! `CAIRN_TEST_S3_ENDPOINT`.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::process::{Command, Stdio};

use cairn_objects::S3Store;
use common::{Server, cairn, connect, terminate, tool};

/// The example on the test cluster, 256 MiB, 1 MiB segments, a prefix of
/// its own.
fn spec(config: &cairn_objects::S3Config, prefix: &str) -> String {
    common::objects_example(config, prefix, &[])
}

fn command(dir: &Path, socket: &Path, log: &Path, config: &cairn_objects::S3Config) -> Command {
    let mut c = cairn();
    c.args(["serve", "--config"])
        .arg(dir.join("objects.toml"))
        .arg("--listen")
        .arg(format!("unix:{}", socket.display()))
        .env("AWS_ACCESS_KEY_ID", &config.access_key)
        .env("AWS_SECRET_ACCESS_KEY", &config.secret_key)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap());
    c
}

fn start(dir: &Path, socket: &Path, log: &Path, config: &cairn_objects::S3Config) -> Server {
    let server = Server(Some(command(dir, socket, log, config).spawn().unwrap()));
    drop(connect(socket));
    server
}

#[test]
fn an_object_volume_survives_kill_9_and_refuses_a_second_server() {
    let Some(qemu_io) = tool("qemu-io") else {
        eprintln!("skipped: qemu-io is not installed (./test.sh installs qemu-utils)");
        return;
    };
    let Some(config) = cairn_objects::testing::s3_config("serve_objects_kill_9") else {
        return;
    };
    let prefix = cairn_objects::testing::unique_prefix("serve-test");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("objects.toml"), spec(&config, &prefix)).unwrap();
    let socket = dir.path().join("cairn.sock");
    let log = dir.path().join("stderr.txt");
    let uri = format!("nbd+unix:///vm1?socket={}", socket.display());
    let io = |commands: &[String]| common::qemu_io(&qemu_io, &uri, commands, "");
    let places: Vec<(u64, u8)> = (0..40u64)
        .map(|i| ((i * 37 % 200) << 20 | (i % 7) << 16, 0x10 + i as u8))
        .collect();
    let mut writes: Vec<String> = places
        .iter()
        .map(|(at, p)| format!("write -P {p:#x} {at} 64k"))
        .collect();
    writes.push("flush".into());
    let reads: Vec<String> = places
        .iter()
        .map(|(at, p)| format!("read -P {p:#x} {at} 64k"))
        .collect();

    let mut server = start(dir.path(), &socket, &log, &config);
    io(&writes);

    // A second server on the same volume (another machine: a data
    // directory of its own) is refused by the lease, naming the holder.
    let machine = dir.path().join("other");
    std::fs::create_dir(&machine).unwrap();
    std::fs::write(machine.join("objects.toml"), spec(&config, &prefix)).unwrap();
    let other_log = dir.path().join("other.txt");
    let status = command(&machine, &machine.join("other.sock"), &other_log, &config)
        .status()
        .unwrap();
    let other = std::fs::read_to_string(&other_log).unwrap();
    let pid = server.0.as_ref().unwrap().id();
    assert!(
        !status.success() && other.contains("held by ") && other.contains(&format!("pid {pid}")),
        "{other}"
    );

    let mut child = server.take();
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    std::fs::remove_file(&socket).ok();

    let mut server = start(dir.path(), &socket, &log, &config);
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(
        logged.contains("is no longer running on this host: taking the volume over")
            && logged.contains("local log records written again")
            && !logged.contains(" 0 local log records written again")
            && logged.contains("the last writer did not stop cleanly"),
        "the restart after kill -9 did not take over and recover:\n{logged}"
    );
    io(&reads);
    terminate(server.take());

    let mut server = start(dir.path(), &socket, &log, &config);
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(
        logged.contains("(0 rolled forward")
            && logged.contains(" 0 local log records written again")
            && logged.contains("a FLUSH is durable in the local write log")
            && !logged.contains("WARN"),
        "{logged}"
    );
    io(&reads);
    terminate(server.take());
    // The stop reports what the volume asked of the store.
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(
        logged.contains("device.objects: object volume: ")
            && logged.contains("(write amplification "),
        "{logged}"
    );

    let store = S3Store::new(&config).unwrap();
    cairn_objects::testing::remove_all(&store, &prefix).unwrap();
}
