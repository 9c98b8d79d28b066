//! `cairn serve --read-only` of an object volume another server is writing
//! (the example at test sizes, on the Ceph RGW `test.sh` starts): the
//! writer (`flush = "remote"`, a checkpoint at every flush) writes and
//! flushes; a reader server, on "another machine" (a data directory of its
//! own), opens the volume read-only while the writer holds it; the writer
//! then overwrites everything and checkpoints again (the old segments are
//! dead, and their deletes wait for the reader's pin); the reader, which
//! read nothing before, still reads the first checkpoint's bytes from the
//! store,
//! and refuses writes. After the reader stops, its pin is gone and the
//! writer's next checkpoint deletes what waited. Skipped without
//! `CAIRN_TEST_S3_ENDPOINT`.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::process::{Command, Stdio};

use cairn_nbd::proto::{CMD_DISC, CMD_FLUSH, CMD_READ, CMD_WRITE};
use cairn_objects::{ObjectStore, S3Store};
use common::{Server, cairn, connect, terminate};

/// Where the test writes: 24 places of 64 KiB over the first 200 MiB.
fn places() -> Vec<u64> {
    (0..24u64)
        .map(|i| (i * 37 % 200) << 20 | (i % 7) << 16)
        .collect()
}

/// 64 KiB whose bytes say `round` and the place.
fn pattern(round: u8, at: u64) -> Vec<u8> {
    let mut b = vec![round; 64 << 10];
    b[..8].copy_from_slice(&at.to_le_bytes());
    b
}

fn command(spec: &Path, socket: &Path, log: &Path, config: &cairn_objects::S3Config) -> Command {
    let mut c = cairn();
    c.args(["serve", "--config"])
        .arg(spec)
        .arg("--listen")
        .arg(format!("unix:{}", socket.display()))
        .env("AWS_ACCESS_KEY_ID", &config.access_key)
        .env("AWS_SECRET_ACCESS_KEY", &config.secret_key)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap());
    c
}

/// Writes round `round` at every place, then flushes.
fn write_round(socket: &Path, round: u8) {
    let mut client = connect(socket);
    client.handshake();
    for at in places() {
        client.request(CMD_WRITE, at, 64 << 10, &pattern(round, at));
    }
    client.request(CMD_FLUSH, 0, 0, &[]);
    client.request(CMD_DISC, 0, 0, &[]);
}

/// Reads every place; each must hold round `round`.
fn read_round(socket: &Path, round: u8, who: &str) {
    let mut client = connect(socket);
    client.handshake();
    for at in places() {
        let got = client.request(CMD_READ, at, 64 << 10, &[]);
        assert!(
            got == pattern(round, at),
            "{who}: {at} does not hold round {round} (it holds round {}, place {})",
            got[100],
            u64::from_le_bytes(got[..8].try_into().unwrap())
        );
    }
    client.request(CMD_DISC, 0, 0, &[]);
}

#[test]
fn a_read_only_server_reads_a_checkpoint_while_another_writes() {
    let Some(config) = cairn_objects::testing::s3_config("serve_objects_read_only") else {
        return;
    };
    let prefix = cairn_objects::testing::unique_prefix("serve-test");
    let store = S3Store::new(&config).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let spec = |edits: &[(&str, &str)]| common::objects_example(&config, &prefix, edits);
    let writer_spec = dir.path().join("writer.toml");
    std::fs::write(
        &writer_spec,
        spec(&[
            ("flush = \"local\"", "flush = \"remote\""),
            ("checkpoint_every = 64", "checkpoint_every = 1"),
        ]),
    )
    .unwrap();
    // The reader: another machine, no chunks of segments kept; it reads
    // nothing before the writer moves on, so its first reads go to the
    // store.
    let machine = dir.path().join("other");
    std::fs::create_dir_all(machine.join("cairn-objects")).unwrap();
    let reader_spec = machine.join("reader.toml");
    std::fs::write(
        &reader_spec,
        spec(&[("read_cache = \"256MiB\"", "read_cache = \"0\"")]),
    )
    .unwrap();
    let (socket, log) = (dir.path().join("w.sock"), dir.path().join("w.txt"));
    let (rsocket, rlog) = (dir.path().join("r.sock"), dir.path().join("r.txt"));

    let mut writer = Server(Some(
        command(&writer_spec, &socket, &log, &config)
            .spawn()
            .unwrap(),
    ));
    write_round(&socket, 1);

    let mut reader = Server(Some(
        command(&reader_spec, &rsocket, &rlog, &config)
            .arg("--read-only")
            .spawn()
            .unwrap(),
    ));
    drop(connect(&rsocket));
    let logged = std::fs::read_to_string(&rlog).unwrap();
    assert!(
        logged.contains("opened read-only: as of checkpoint"),
        "{logged}"
    );
    assert_eq!(store.list(&format!("{prefix}readers/")).unwrap().len(), 1);

    // The writer moves on: every place again, a checkpoint; the first
    // round's segments are dead, and wait for the reader.
    write_round(&socket, 2);
    write_round(&socket, 3);
    read_round(&rsocket, 1, "the reader");
    read_round(&socket, 3, "the writer");
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(
        logged.contains("dead segment objects wait: 1 read-only opens pin the volume"),
        "{logged}"
    );

    // The reader refuses writes (EPERM), and its view stays.
    let mut client = connect(&rsocket);
    client.handshake();
    assert!(
        client.try_request(CMD_WRITE, 0, 4096, &[9; 4096]).is_err(),
        "a write to the read-only server succeeded"
    );
    drop(client);
    read_round(&rsocket, 1, "the reader after a refused write");

    terminate(reader.take());
    let logged = std::fs::read_to_string(&rlog).unwrap();
    assert!(
        logged.contains("nothing was written but the object volumes' reader pins"),
        "{logged}"
    );
    assert!(store.list(&format!("{prefix}readers/")).unwrap().is_empty());

    // The next checkpoint finds no pin and deletes what waited.
    write_round(&socket, 4);
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(
        logged.contains("no read-only open pins the volume any more"),
        "{logged}"
    );
    read_round(&socket, 4, "the writer");
    terminate(writer.take());
    cairn_objects::testing::remove_all(&store, &prefix).unwrap();
}
