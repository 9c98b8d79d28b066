//! A server owns what it opens. Before this, a second `cairn serve` in the
//! same directory started without complaint, recovered the log disk that the
//! first was writing, and at its stop wrote a checkpoint over the first's:
//! writes the first had acknowledged and flushed read back as holes after its
//! restart (issue 21). Now every persistent object a volume opens — its data
//! directory, disk images, NTL images, NV regions, block devices — is claimed
//! for the server's life, and a second opener is refused with a message naming
//! the holder's PID and the path, before it changes anything. `cairn fsck` and
//! `cairn inspect` still read an image in use, and say so.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use cairn_nbd::proto::{CMD_DISC, CMD_FLUSH, CMD_READ, CMD_WRITE};
use common::{cairn, connect, small_default_spec, terminate, tool};

/// A server on `spec` (a file in `dir`), listening on `socket`.
fn start(dir: &Path, spec: &Path, socket: &Path) -> Child {
    let child = cairn()
        .args(["-q", "serve", "--config"])
        .arg(spec)
        .arg("--listen")
        .arg(format!("unix:{}", socket.display()))
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut client = connect(socket);
    client.handshake();
    client.request(CMD_DISC, 0, 0, &[]);
    child
}

/// `cairn serve --config SPEC` in `dir`, listening on `dir/NAME`: a second
/// server, to be [`refused`].
fn second(spec: &Path, dir: &Path, name: &str) -> Command {
    let mut command = cairn();
    command
        .args(["serve", "--config"])
        .arg(spec)
        .arg("--listen")
        .arg(format!("unix:{}", dir.join(name).display()))
        .current_dir(dir);
    command
}

/// A second server that must be refused: it exits non-zero, soon, having
/// printed why; the message is returned.
fn refused(command: &mut Command) -> String {
    let output = run_with_deadline(command, Duration::from_secs(30));
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        !output.status.success(),
        "the second server was not refused:\n{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    stderr
}

fn run_with_deadline(command: &mut Command, limit: Duration) -> Output {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + limit;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let output = child.wait_with_output().unwrap();
            panic!(
                "still running after {limit:?} (it should have been refused):\n{}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// A copy of the default spec at test sizes whose NV region is `nv` and whose
/// disk file is `disk` (both may be absolute, naming files outside `dir`).
fn spec_in(dir: &Path, disk: &str, nv: &Path) -> PathBuf {
    let text = small_default_spec("32MiB", "48MiB", nv.parent().unwrap())
        .replace("log.nv", nv.file_name().unwrap().to_str().unwrap())
        .replace("path = \"disk.img\"", &format!("path = \"{disk}\""));
    let path = dir.join("volume.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn holder_named(message: &str, pid: u32, path: &str) {
    assert!(
        message.contains(&format!("PID {pid}")),
        "the holder's PID {pid} is not named:\n{message}"
    );
    assert!(
        message.contains(path),
        "the path {path} is not named:\n{message}"
    );
}

/// The reproduction from issue 21, with qemu-io as the client: write and flush
/// on server A; a second server in the same directory is refused (it used to
/// start, recover A's disk, and checkpoint over it at its stop); more writes
/// on A, flushed; A stopped and restarted; every flushed byte reads back.
#[test]
fn a_second_server_in_the_same_directory_is_refused_and_the_first_loses_nothing() {
    let Some(qemu_io) = tool("qemu-io") else {
        eprintln!("skipped: qemu-io is not installed (./test.sh installs qemu-utils)");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let nv = tempfile::tempdir().unwrap();
    let spec = spec_in(dir.path(), "disk.img", &nv.path().join("log.nv"));
    let socket = dir.path().join("a.sock");
    let uri = format!("nbd+unix:///cairn?socket={}", socket.display());
    let io = |commands: &[&str]| common::qemu_io(&qemu_io, &uri, commands, "");

    let a = start(dir.path(), &spec, &socket);
    io(&["write -P 0xab 0 4M", "flush"]);
    let message = refused(&mut second(&spec, dir.path(), "b.sock"));
    holder_named(&message, a.id(), "data directory");
    io(&["write -P 0x11 16M 8M", "flush"]);
    terminate(a);

    let a = start(dir.path(), &spec, &socket);
    io(&["read -P 0xab 0 4M", "read -P 0x11 16M 8M"]);
    terminate(a);
}

/// Two specs in two data directories naming one disk image: the second is
/// refused, and the image is left as the first server has it.
#[test]
fn two_specs_naming_one_image_cannot_both_serve_it() {
    let shared = tempfile::tempdir().unwrap();
    let image = shared.path().join("disk.img");
    let (one, two) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let nv = tempfile::tempdir().unwrap();
    let spec_a = spec_in(one.path(), image.to_str().unwrap(), &nv.path().join("a.nv"));
    let spec_b = spec_in(two.path(), image.to_str().unwrap(), &nv.path().join("b.nv"));
    let socket = one.path().join("a.sock");
    let a = start(one.path(), &spec_a, &socket);
    let before = std::fs::read(&image).unwrap();
    let message = refused(&mut second(&spec_b, two.path(), "b.sock"));
    holder_named(&message, a.id(), image.to_str().unwrap());
    assert!(message.contains("device.disk.path"), "{message}");
    assert_eq!(
        std::fs::read(&image).unwrap(),
        before,
        "the refused server changed the image"
    );
    assert!(
        !nv.path().join("b.nv").exists()
            || std::fs::read(nv.path().join("b.nv"))
                .unwrap()
                .iter()
                .all(|&b| b == 0),
        "the refused server formatted its NV region"
    );
    terminate(a);
}

/// One NV region named by two data directories (an explicit `nv_cache.path`):
/// the second server is refused before it formats or recovers the region.
#[test]
fn an_nv_region_shared_by_two_data_directories_is_refused() {
    let nv = tempfile::tempdir().unwrap();
    let region = nv.path().join("shared.nv");
    let (one, two) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let spec_a = spec_in(one.path(), "disk.img", &region);
    let spec_b = spec_in(two.path(), "disk.img", &region);
    let socket = one.path().join("a.sock");
    let a = start(one.path(), &spec_a, &socket);
    let message = refused(&mut second(&spec_b, two.path(), "b.sock"));
    holder_named(&message, a.id(), region.to_str().unwrap());
    assert!(message.contains("nv_cache"), "{message}");
    // The first server's data is intact: write, flush, stop, reopen, read.
    let mut client = connect(&socket);
    client.handshake();
    let data = vec![0x5a; 65_536];
    client.request(CMD_WRITE, 1 << 20, data.len() as u32, &data);
    client.request(CMD_FLUSH, 0, 0, &[]);
    client.request(CMD_DISC, 0, 0, &[]);
    terminate(a);
    let a = start(one.path(), &spec_a, &socket);
    let mut client = connect(&socket);
    client.handshake();
    assert_eq!(
        client.request(CMD_READ, 1 << 20, data.len() as u32, &[]),
        data
    );
    client.request(CMD_DISC, 0, 0, &[]);
    terminate(a);
}

/// A file served with `--file` while another server holds it; and an NTL image
/// (a region of its own kind) likewise.
#[test]
fn file_and_ntl_images_in_use_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let image = dir.path().join("raw.img");
    let socket = dir.path().join("a.sock");
    let a = cairn()
        .args(["-q", "serve", "--file"])
        .arg(&image)
        .args(["--size", "16MiB", "--listen"])
        .arg(format!("unix:{}", socket.display()))
        .current_dir(dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    connect(&socket).handshake();
    let other = tempfile::tempdir().unwrap();
    let message = refused(
        cairn()
            .args(["serve", "--file"])
            .arg(&image)
            .arg("--listen")
            .arg(format!("unix:{}", other.path().join("b.sock").display()))
            .current_dir(other.path()),
    );
    holder_named(&message, a.id(), image.to_str().unwrap());
    terminate(a);

    let ntl_spec = |dir: &Path| {
        let text = format!(
            "data_dir = \".\"\n[[export]]\nname = \"n\"\ndevice = \"n\"\n\
             [device.n]\nkind = \"ntl\"\npath = \"{}\"\nsize = \"4MiB\"\npersistence = \"none\"\n",
            image.with_extension("ntl").display()
        );
        let path = dir.join("ntl.toml");
        std::fs::write(&path, text).unwrap();
        path
    };
    let spec_a = ntl_spec(dir.path());
    let a = start(dir.path(), &spec_a, &socket);
    let spec_b = ntl_spec(other.path());
    let message = refused(&mut second(&spec_b, other.path(), "b.sock"));
    holder_named(&message, a.id(), "raw.ntl");
    terminate(a);
}

/// One spec naming the same file for two devices: refused at open, naming the
/// file, instead of two layers writing over each other.
#[test]
fn a_spec_naming_one_file_twice_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("twice.toml");
    std::fs::write(
        &spec,
        "data_dir = \".\"\n\
         [[export]]\nname = \"a\"\ndevice = \"a\"\n\
         [[export]]\nname = \"b\"\ndevice = \"b\"\n\
         [device.a]\nkind = \"file\"\npath = \"same.img\"\nsize = \"1MiB\"\n\
         [device.b]\nkind = \"file\"\npath = \"same.img\"\nsize = \"1MiB\"\n",
    )
    .unwrap();
    let message = refused(&mut second(&spec, dir.path(), "s.sock"));
    assert!(message.contains("same.img"), "{message}");
    assert!(message.contains("opened twice by this volume"), "{message}");
}

/// Detaches a loop device when dropped.
struct Detach(PathBuf, String);

impl Drop for Detach {
    fn drop(&mut self) {
        let _ = Command::new(&self.0).args(["-d", &self.1]).status();
    }
}

/// A block device (a loop device over a file) served by one server is refused
/// to a second (`O_EXCL` and the lock on the node). Needs root and losetup;
/// skipped without them.
#[test]
fn a_block_device_in_use_is_refused() {
    let Some(losetup) = tool("losetup").or_else(|| {
        Path::new("/usr/sbin/losetup")
            .exists()
            .then(|| "/usr/sbin/losetup".into())
    }) else {
        eprintln!("skipped: no losetup");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let backing = dir.path().join("backing.img");
    std::fs::File::create(&backing)
        .unwrap()
        .set_len(16 << 20)
        .unwrap();
    let attached = Command::new(&losetup)
        .args(["-f", "--show"])
        .arg(&backing)
        .output()
        .unwrap();
    if !attached.status.success() {
        eprintln!(
            "skipped: losetup failed (not root, or no loop devices): {}",
            String::from_utf8_lossy(&attached.stderr)
        );
        return;
    }
    let device = String::from_utf8(attached.stdout)
        .unwrap()
        .trim()
        .to_owned();
    let _detach = Detach(losetup, device.clone());
    let socket = dir.path().join("a.sock");
    let a = cairn()
        .args(["-q", "serve", "--file", &device, "--listen"])
        .arg(format!("unix:{}", socket.display()))
        .current_dir(dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert_eq!(connect(&socket).handshake(), 16 << 20);
    let other = tempfile::tempdir().unwrap();
    let message = refused(
        cairn()
            .args(["serve", "--file", &device, "--listen"])
            .arg(format!("unix:{}", other.path().join("b.sock").display()))
            .current_dir(other.path()),
    );
    assert!(message.contains(&device), "{message}");
    assert!(
        message.contains(&format!("PID {}", a.id())) || message.contains("busy"),
        "{message}"
    );
    terminate(a);
}

/// `cairn fsck` and `cairn inspect` on an image a server holds: they read it
/// (read-only inspection stays allowed) and say it is in use, by whom.
#[test]
fn fsck_and_inspect_say_an_image_is_in_use() {
    let dir = tempfile::tempdir().unwrap();
    let nv = tempfile::tempdir().unwrap();
    let spec = spec_in(dir.path(), "disk.img", &nv.path().join("log.nv"));
    let socket = dir.path().join("a.sock");
    let a = start(dir.path(), &spec, &socket);
    let image = dir.path().join("cairn-data/disk.img");
    for command in ["fsck", "inspect"] {
        let output = cairn().arg(command).arg(&image).output().unwrap();
        let text = String::from_utf8_lossy(&output.stdout).into_owned()
            + &String::from_utf8_lossy(&output.stderr);
        assert!(
            text.contains("in use") && text.contains(&format!("PID {}", a.id())),
            "cairn {command} on an image in use:\n{text}"
        );
        assert!(
            text.contains("log disk"),
            "cairn {command} still reads it:\n{text}"
        );
    }
    terminate(a);
    let output = cairn().arg("fsck").arg(&image).output().unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{text}");
    assert!(!text.contains("in use"), "{text}");
}
