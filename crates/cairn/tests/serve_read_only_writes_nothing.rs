//! Read-only means read-only: `cairn serve --read-only` (or an export with
//! `read_only = true`) opens every file `O_RDONLY` with a shared lock, recovers
//! a log disk that was stopped by kill -9 in memory only, serves its data,
//! refuses writes, and leaves every file byte for byte and time for time as
//! it found it — no checkpoint, no clean-stop marker, no NV slot cleared, no
//! NTL map entry touched. It
//! runs as an unprivileged user on files owned by root (when the test runs as
//! root, through `setpriv`), other read-only servers may share the files, and
//! a writer is refused while it serves.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use cairn_nbd::proto::{CMD_DISC, CMD_FLUSH, CMD_READ, CMD_WRITE};
use common::{cairn, connect, small_default_spec, terminate, tool};

/// Every file in `dir`: its bytes and its modification time.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, (Vec<u8>, i64, i64)> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.is_file())
        .map(|path| {
            let meta = std::fs::metadata(&path).unwrap();
            let bytes = std::fs::read(&path).unwrap();
            (path, (bytes, meta.mtime(), meta.mtime_nsec()))
        })
        .collect()
}

/// `cairn serve` as the unprivileged user `nobody` when this test runs as
/// root and `setpriv` is there; as this user otherwise.
fn unprivileged() -> (Command, bool) {
    // Root if what this process creates belongs to uid 0.
    let probe = tempfile::NamedTempFile::new().unwrap();
    let root = probe.as_file().metadata().unwrap().uid() == 0;
    match tool("setpriv") {
        Some(setpriv) if root => {
            let mut command = Command::new(setpriv);
            command
                .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
                .arg(env!("CARGO_BIN_EXE_cairn"));
            (command, true)
        }
        _ => (cairn(), false),
    }
}

fn serve_read_only(spec: &Path, socket: &Path, dir: &Path, flag: bool) -> Child {
    let (mut command, _) = unprivileged();
    command.arg("serve").arg("--config").arg(spec);
    if flag {
        command.arg("--read-only");
    }
    command
        .arg("--listen")
        .arg(format!("unix:{}", socket.display()))
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn a_read_only_server_recovers_in_memory_serves_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let nv = tempfile::tempdir().unwrap();
    // The default stack at test sizes, its NV write cache in the data
    // directory as shipped.
    let spec_text: String = small_default_spec("32MiB", "48MiB", nv.path())
        .lines()
        .map(|line| {
            if line.starts_with("nv_cache") {
                "nv_cache = { size = \"4MiB\" }"
            } else {
                line
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    let spec = dir.path().join("volume.toml");
    std::fs::write(&spec, &spec_text).unwrap();
    // The same stack as a read-only export, for the second reader.
    let spec_ro = dir.path().join("read-only.toml");
    std::fs::write(
        &spec_ro,
        spec_text.replace("device = \"cache\"", "device = \"cache\"\nread_only = true"),
    )
    .unwrap();
    assert_ne!(
        std::fs::read(&spec).unwrap(),
        std::fs::read(&spec_ro).unwrap()
    );

    // A writer writes, flushes, writes more (durable in the NV cache), and
    // is killed: the next open has a log to roll forward and an NV cache
    // to take over.
    let socket = dir.path().join("w.sock");
    let mut writer = cairn()
        .args(["-q", "serve", "--config"])
        .arg(&spec)
        .arg("--listen")
        .arg(format!("unix:{}", socket.display()))
        .current_dir(dir.path())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut client = connect(&socket);
    client.handshake();
    let first: Vec<u8> = (0..2 << 20).map(|i: u32| (i % 249) as u8).collect();
    let second = vec![0xc3u8; 256 << 10];
    client.request(CMD_WRITE, 0, first.len() as u32, &first);
    client.request(CMD_FLUSH, 0, 0, &[]);
    client.request(CMD_WRITE, 8 << 20, second.len() as u32, &second);
    writer.kill().unwrap();
    writer.wait().unwrap();
    std::fs::remove_file(&socket).unwrap();
    let data_dir = dir.path().join("cairn-data");
    let before = snapshot(&data_dir);
    assert!(
        before.keys().any(|p| p.ends_with("log.nv")),
        "{:?}",
        before.keys()
    );

    let sockets = dir.path().join("sockets");
    std::fs::create_dir(&sockets).unwrap();
    let (_, as_nobody) = unprivileged();
    if as_nobody {
        std::os::unix::fs::chown(&sockets, Some(65534), Some(65534)).unwrap();
    } else {
        eprintln!("not root or no setpriv: the read-only server runs as this user");
    }
    let socket = sockets.join("ro.sock");
    let mut reader = serve_read_only(&spec, &socket, dir.path(), true);
    let mut client = connect(&socket);
    client.handshake();
    assert_eq!(client.request(CMD_READ, 0, first.len() as u32, &[]), first);
    assert_eq!(
        client.request(CMD_READ, 8 << 20, second.len() as u32, &[]),
        second,
        "the NV cache's blocks, recovered in memory"
    );
    assert!(
        client.try_request(CMD_WRITE, 0, 4096, &[1; 4096]).is_err(),
        "a write to a read-only export succeeded"
    );
    client.request(CMD_DISC, 0, 0, &[]);

    // A second reader shares the files (a read-only export in its spec).
    let socket_two = sockets.join("ro2.sock");
    let reader_two = serve_read_only(&spec_ro, &socket_two, dir.path(), false);
    let mut client = connect(&socket_two);
    client.handshake();
    assert_eq!(
        client.request(CMD_READ, 8 << 20, second.len() as u32, &[]),
        second
    );
    client.request(CMD_DISC, 0, 0, &[]);
    terminate(reader_two);

    // A writer is refused while a reader serves, naming it.
    let refused = cairn()
        .args(["serve", "--config"])
        .arg(&spec)
        .arg("--listen")
        .arg(format!("unix:{}", dir.path().join("w2.sock").display()))
        .current_dir(dir.path())
        .output()
        .unwrap();
    let message = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "{message}");
    assert!(
        message.contains(&format!("PID {}", reader.id())),
        "{message}"
    );

    let killed = Command::new("kill")
        .args(["-TERM", &reader.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let mut stderr = String::new();
    std::io::Read::read_to_string(reader.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    let status = reader.wait().unwrap();
    assert!(status.success(), "{status}: {stderr}");
    assert!(
        stderr.contains("opened read-only after an unclean stop"),
        "{stderr}"
    );
    std::thread::sleep(Duration::from_millis(10));
    let after = snapshot(&data_dir);
    assert_eq!(
        before.keys().collect::<Vec<_>>(),
        after.keys().collect::<Vec<_>>(),
        "the read-only servers created or removed files"
    );
    for (path, was) in &before {
        let now = &after[path];
        assert!(was.0 == now.0, "{} changed", path.display());
        assert_eq!(
            (was.1, was.2),
            (now.1, now.2),
            "{} was written",
            path.display()
        );
    }

    // Read-write again: the same data, now recovered for real.
    let socket = dir.path().join("w3.sock");
    let writer = cairn()
        .args(["-q", "serve", "--config"])
        .arg(&spec)
        .arg("--listen")
        .arg(format!("unix:{}", socket.display()))
        .current_dir(dir.path())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut client = connect(&socket);
    client.handshake();
    assert_eq!(
        client.request(CMD_READ, 8 << 20, second.len() as u32, &[]),
        second
    );
    client.request(CMD_DISC, 0, 0, &[]);
    terminate(writer);
}

/// A read-only server on a data directory that does not exist, or on an
/// image with no log disk in it, creates nothing and says why.
#[test]
fn a_read_only_server_creates_and_formats_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let output = cairn()
        .args(["serve", "--read-only", "--listen"])
        .arg(format!("unix:{}", dir.path().join("s.sock").display()))
        .current_dir(dir.path())
        .output()
        .unwrap();
    let message = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{message}");
    assert!(
        message.contains("read-only volume creates nothing"),
        "{message}"
    );
    assert!(!dir.path().join("cairn-data").exists());

    std::fs::create_dir(dir.path().join("cairn-data")).unwrap();
    std::fs::File::create(dir.path().join("cairn-data/disk.img"))
        .unwrap()
        .set_len(64 << 20)
        .unwrap();
    let output = cairn()
        .args(["serve", "--read-only", "--listen"])
        .arg(format!("unix:{}", dir.path().join("s.sock").display()))
        .current_dir(dir.path())
        .output()
        .unwrap();
    let message = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{message}");
    assert!(message.contains("formats nothing"), "{message}");
    let image = std::fs::read(dir.path().join("cairn-data/disk.img")).unwrap();
    assert!(image.iter().all(|&b| b == 0), "the image was written");
    assert!(!dir.path().join("cairn-data/log.nv").exists());
}

/// An NTL image served read-only: its map loads from the image, its data
/// reads back, writes are refused, and the image is byte for byte as it was.
#[test]
fn a_read_only_ntl_image_serves_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let spec = |read_only: bool| {
        let path = dir.path().join(format!("ntl-{read_only}.toml"));
        std::fs::write(
            &path,
            format!(
                "data_dir = \"data\"\n[[export]]\nname = \"n\"\ndevice = \"n\"\nread_only = {read_only}\n\
                 [device.n]\nkind = \"ntl\"\nsize = \"4MiB\"\n"
            ),
        )
        .unwrap();
        path
    };
    let start = |spec: &Path, socket: &Path| {
        cairn()
            .args(["-q", "serve", "--config"])
            .arg(spec)
            .arg("--listen")
            .arg(format!("unix:{}", socket.display()))
            .current_dir(dir.path())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    let data: Vec<u8> = (0..256 << 10).map(|i: u32| (i % 241) as u8).collect();
    let socket = dir.path().join("w.sock");
    let writer = start(&spec(false), &socket);
    let mut client = connect(&socket);
    client.handshake();
    client.request(CMD_WRITE, 64 << 10, data.len() as u32, &data);
    client.request(CMD_FLUSH, 0, 0, &[]);
    client.request(CMD_DISC, 0, 0, &[]);
    terminate(writer);
    let before = snapshot(&dir.path().join("data"));

    let socket = dir.path().join("r.sock");
    let reader = start(&spec(true), &socket);
    let mut client = connect(&socket);
    client.handshake();
    assert_eq!(
        client.request(CMD_READ, 64 << 10, data.len() as u32, &[]),
        data
    );
    assert!(client.try_request(CMD_WRITE, 0, 4096, &[7; 4096]).is_err());
    client.request(CMD_DISC, 0, 0, &[]);
    terminate(reader);
    assert!(
        before == snapshot(&dir.path().join("data")),
        "the read-only server changed the NTL image"
    );
}
