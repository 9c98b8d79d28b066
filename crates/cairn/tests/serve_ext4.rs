//! ext4 on the default volume stack, through real kernel and FUSE clients:
//! `cairn serve` (read cache over log disk + NV write cache over a file, the embedded default
//! at test sizes) → nbdfuse exposes the export as a file → `mkfs.ext4` → loop
//! mount → a file workload (many small files, some large, fsync'd, read back)
//! → unmount → `e2fsck -fn` clean → server restarted → `e2fsck -fn` clean
//! again and every file intact.
//!
//! And the crash case: ext4 mounted, fsync'd files plus a write workload
//! still running, `kill -9` of the server; the dead FUSE and loop mounts are
//! lazily unmounted, a new server starts on the same data, one read-write
//! mount replays the ext4 journal (`e2fsck -n` cannot replay it), and then
//! `e2fsck -fn` is clean and every fsync'd file is intact.
//!
//! Needs root, /dev/fuse, loop devices, nbdfuse (`test.sh` installs
//! libnbd-bin and fuse3), mkfs.ext4 and e2fsck; skips, saying which is
//! missing, only where the machine lacks one.
#![allow(clippy::unwrap_used)]

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{cairn, nv_dir, small_default_spec, terminate, tool};

/// Why this machine cannot run the test, if it cannot.
fn missing_facility() -> Option<String> {
    let uid = Command::new("id").arg("-u").output().ok()?;
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        return Some("not root (loop mounts need root)".into());
    }
    for device in ["/dev/fuse", "/dev/loop-control"] {
        if !Path::new(device).exists() {
            return Some(format!("{device} is missing"));
        }
    }
    for name in [
        "nbdfuse",
        "nbdinfo",
        "fstrim",
        "mkfs.ext4",
        "e2fsck",
        "dumpe2fs",
        "mount",
        "umount",
    ] {
        if tool(name).is_none() && !Path::new("/usr/sbin").join(name).exists() {
            return Some(format!("{name} is not installed (test.sh installs it)"));
        }
    }
    None
}

/// A test's scratch space: a temporary directory, an NV directory (on
/// /dev/shm where there is one) and the path of its volume spec, or `None`
/// after printing why this machine cannot run the test.
fn scratch() -> Option<(tempfile::TempDir, tempfile::TempDir, PathBuf)> {
    if let Some(reason) = missing_facility() {
        eprintln!("SKIPPED: {reason}");
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("volume.toml");
    Some((dir, nv_dir(), config))
}

fn run(program: &str, args: &[&str]) {
    let output = Command::new(program).args(args).output().unwrap();
    assert!(
        output.status.success(),
        "{program} {args:?}: {}\n{}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Processes and mounts to undo even when an assertion fails.
struct Stack {
    server: Option<Child>,
    fuse: Option<Child>,
    mounts: Vec<PathBuf>,
}

impl Stack {
    /// Loop-mounts `image` on `path`; unmounted on drop if the test fails.
    fn mount_loop(&mut self, image: &Path, path: &Path) {
        run(
            "mount",
            &[
                "-o",
                "loop",
                image.to_str().unwrap(),
                path.to_str().unwrap(),
            ],
        );
        self.mounts.push(path.to_path_buf());
    }

    fn unmount(&mut self, path: &Path) {
        run("umount", &[path.to_str().unwrap()]);
        self.mounts.retain(|m| m != path);
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        for mount in self.mounts.iter().rev() {
            let _ = Command::new("umount").arg("-l").arg(mount).status();
        }
        for child in [self.fuse.as_mut(), self.server.as_mut()]
            .into_iter()
            .flatten()
        {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A fresh ext4 on a server started in `dir` with `config`: the server,
/// nbdfuse exposing its export at `mnt/disk` (`image`), `mkfs.ext4` on it and
/// the file system loop-mounted on `fs`.
struct Ext4 {
    stack: Stack,
    socket: PathBuf,
    mnt: PathBuf,
    fs: PathBuf,
    image: PathBuf,
}

impl Ext4 {
    fn start(dir: &Path, config: &Path) -> Self {
        let socket = dir.join("cairn.sock");
        let (mnt, fs) = (dir.join("mnt"), dir.join("fs"));
        for path in [&mnt, &fs] {
            std::fs::create_dir_all(path).unwrap();
        }
        let mut stack = Stack {
            server: Some(start_server(dir, config, &socket)),
            fuse: None,
            mounts: Vec::new(),
        };
        let image = start_fuse(&mut stack, &mnt, &socket);
        run("mkfs.ext4", &["-q", "-F", image.to_str().unwrap()]);
        stack.mount_loop(&image, &fs);
        Self {
            stack,
            socket,
            mnt,
            fs,
            image,
        }
    }
}

fn start_server(dir: &Path, config: &Path, socket: &Path) -> Child {
    let child = cairn()
        .args(["serve", "--quiet", "--config"])
        .arg(config)
        .arg("--listen")
        .arg(format!("unix:{}", socket.display()))
        .current_dir(dir)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !socket.exists() {
        assert!(Instant::now() < deadline, "the server never listened");
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

/// Runs nbdfuse in the background, exposing the export as `mnt/disk`.
fn start_fuse(stack: &mut Stack, mnt: &Path, socket: &Path) -> PathBuf {
    let uri = format!("nbd+unix:///cairn?socket={}", socket.display());
    let file = mnt.join("disk");
    stack.fuse = Some(
        Command::new("nbdfuse")
            .arg(&file)
            .arg(&uri)
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    stack.mounts.push(mnt.to_path_buf());
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::fs::metadata(&file).map_or(true, |m| m.len() == 0) {
        assert!(
            Instant::now() < deadline,
            "nbdfuse never exposed {}",
            file.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    file
}

fn stop_fuse(stack: &mut Stack, mnt: &Path) {
    stack.unmount(mnt);
    let mut fuse = stack.fuse.take().unwrap();
    let status = fuse.wait().unwrap();
    assert!(status.success(), "nbdfuse exited with {status}");
}

fn fsck(image: &Path) {
    run("e2fsck", &["-fn", image.to_str().unwrap()]);
}

/// File `i`'s contents: sizes from a few bytes to 8 MiB, every eighth large.
fn contents(i: u32) -> Vec<u8> {
    let len = if i % 8 == 7 {
        (2 << 20) + (i as usize * 65_537) % (6 << 20)
    } else {
        1 + (i as usize * 7919) % 60_000
    };
    let mut state = u64::from(i).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect()
}

const FILES: u32 = 240;

/// Bytes the export reports as data (`nbdinfo --map --totals`).
fn data_bytes(socket: &Path) -> u64 {
    let uri = format!("nbd+unix:///cairn?socket={}", socket.display());
    let output = Command::new("nbdinfo")
        .args(["--map", "--totals", &uri])
        .output()
        .unwrap();
    assert!(output.status.success(), "nbdinfo: {output:?}");
    let text = String::from_utf8_lossy(&output.stdout);
    text.lines()
        .filter(|l| l.trim_end().ends_with(" data"))
        .filter_map(|l| l.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

/// Writes a 48 MiB file on the mounted `fs`, deletes it and runs `fstrim`:
/// the export must then report at least 40 MiB less data (`nbdinfo --map
/// --totals`).
fn fstrim_frees_a_deleted_file(fs: &Path, socket: &Path, what: &str) {
    let big = fs.join("big");
    std::fs::write(&big, contents(7).repeat((48 << 20) / contents(7).len() + 1)).unwrap();
    run("sync", &[]);
    let before = data_bytes(socket);
    std::fs::remove_file(&big).unwrap();
    run("sync", &[]);
    run("fstrim", &[fs.to_str().unwrap()]);
    let after = data_bytes(socket);
    eprintln!(
        "fstrim on {what}: {} MiB of data before, {} MiB after",
        before >> 20,
        after >> 20
    );
    assert!(
        before >= after + (40 << 20),
        "{what}: fstrim freed too little: {before} bytes of data before, {after} after"
    );
}

fn file_path(root: &Path, i: u32) -> PathBuf {
    root.join(format!("d{}", i % 12)).join(format!("f{i}"))
}

fn verify(root: &Path) {
    for i in 0..FILES {
        let path = file_path(root, i);
        let back = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(back == contents(i), "{} differs", path.display());
    }
}

#[test]
fn ext4_on_the_default_stack_survives_fsck_and_a_restart() {
    let Some((dir, nv, config)) = scratch() else {
        return;
    };
    std::fs::write(&config, small_default_spec("256MiB", "320MiB", nv.path())).unwrap();
    let Ext4 {
        mut stack,
        socket,
        mnt,
        fs,
        image,
    } = Ext4::start(dir.path(), &config);
    assert_eq!(std::fs::metadata(&image).unwrap().len(), 256 << 20);
    for d in 0..12 {
        std::fs::create_dir_all(fs.join(format!("d{d}"))).unwrap();
    }
    let mut total = 0;
    for i in 0..FILES {
        let data = contents(i);
        total += data.len();
        let mut file = std::fs::File::create(file_path(&fs, i)).unwrap();
        file.write_all(&data).unwrap();
        if i % 4 == 0 {
            file.sync_all().unwrap();
        }
    }
    // Rewrite some in place, and delete and recreate others.
    for i in (0..FILES).step_by(9) {
        std::fs::remove_file(file_path(&fs, i)).unwrap();
        std::fs::write(file_path(&fs, i), contents(i)).unwrap();
    }
    run("sync", &[]);
    verify(&fs);
    eprintln!("wrote {FILES} files, {} MiB", total >> 20);
    // fstrim reaches the log disk (loop → FUSE → nbdfuse → NBD TRIM): a
    // deleted 48 MiB file's blocks stop being data in BLOCK_STATUS, and
    // every other file is untouched.
    fstrim_frees_a_deleted_file(&fs, &socket, "default stack");
    verify(&fs);
    stack.unmount(&fs);
    fsck(&image);
    stop_fuse(&mut stack, &mnt);
    terminate(stack.server.take().unwrap());

    // A new server on the same data: the file system and files are intact.
    stack.server = Some(start_server(dir.path(), &config, &socket));
    let image = start_fuse(&mut stack, &mnt, &socket);
    fsck(&image);
    stack.mount_loop(&image, &fs);
    verify(&fs);
    stack.unmount(&fs);
    stop_fuse(&mut stack, &mnt);
    terminate(stack.server.take().unwrap());
}

/// ext4 on an NTL volume: fstrim unmaps the NTL blocks of a deleted file (they
/// leave `BLOCK_STATUS`'s data), the other files are intact, `e2fsck -fn` is
/// clean, and a restarted server serves the same file system.
#[test]
fn fstrim_on_an_ntl_volume_unmaps_its_blocks() {
    let Some((dir, nv, config)) = scratch() else {
        return;
    };
    let region = nv.path().join("fstrim.ntl");
    std::fs::write(
        &config,
        format!(
            "data_dir = \"data\"\n[[export]]\nname = \"cairn\"\ndevice = \"pm\"\n\n\
             [device.pm]\nkind = \"ntl\"\nsize = \"128MiB\"\npath = {:?}\n",
            region.display().to_string()
        ),
    )
    .unwrap();
    let Ext4 {
        mut stack,
        socket,
        mnt,
        fs,
        image,
    } = Ext4::start(dir.path(), &config);
    let small: Vec<u8> = contents(3);
    std::fs::write(fs.join("small"), &small).unwrap();
    fstrim_frees_a_deleted_file(&fs, &socket, "NTL");
    assert_eq!(std::fs::read(fs.join("small")).unwrap(), small);
    stack.unmount(&fs);
    fsck(&image);
    // The unmount writes a few metadata blocks of its own.
    let settled = data_bytes(&socket);
    stop_fuse(&mut stack, &mnt);
    terminate(stack.server.take().unwrap());

    stack.server = Some(start_server(dir.path(), &config, &socket));
    let image = start_fuse(&mut stack, &mnt, &socket);
    fsck(&image);
    assert_eq!(
        data_bytes(&socket),
        settled,
        "the unmapped blocks stay unmapped"
    );
    stack.mount_loop(&image, &fs);
    assert_eq!(std::fs::read(fs.join("small")).unwrap(), small);
    stack.unmount(&fs);
    stop_fuse(&mut stack, &mnt);
    terminate(stack.server.take().unwrap());
}

/// kill -9 of the server while ext4 is mounted on it, with fsync'd files and
/// a write workload in flight. With the NV write cache every acknowledged
/// write survives, and ext4's journal needs only the writes acknowledged
/// before each flush: after the journal is replayed the file system must be
/// clean and every fsync'd file whole.
/// Files written and fsync'd before the crash.
const SYNCED: u32 = 48;

#[test]
fn ext4_mounted_survives_kill_9_of_the_server() {
    let Some((dir, nv, config)) = scratch() else {
        return;
    };
    let started = Instant::now();
    std::fs::write(&config, small_default_spec("128MiB", "160MiB", nv.path())).unwrap();
    let Ext4 {
        mut stack,
        socket,
        mnt,
        fs,
        image: _,
    } = Ext4::start(dir.path(), &config);
    // SYNCED files (≈ 30 MiB), each fsync'd, their directories too, then sync.
    for d in 0..12 {
        std::fs::create_dir_all(fs.join(format!("d{d}"))).unwrap();
    }
    for i in 0..SYNCED {
        let mut file = std::fs::File::create(file_path(&fs, i)).unwrap();
        file.write_all(&contents(i)).unwrap();
        file.sync_all().unwrap();
    }
    for d in 0..12 {
        std::fs::File::open(fs.join(format!("d{d}")))
            .unwrap()
            .sync_all()
            .unwrap();
    }
    run("sync", &[]);
    // A workload that keeps writing (some fsync'd) while the server dies.
    let busy = fs.join("busy");
    std::fs::create_dir_all(&busy).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let written = Arc::new(AtomicUsize::new(0));
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let workload = {
        let (stop, written) = (stop.clone(), written.clone());
        std::thread::spawn(move || {
            let block = vec![0x5au8; 256 << 10];
            let mut n = 0u32;
            while !stop.load(Ordering::Relaxed) {
                // Errors are expected once the server is gone.
                if let Ok(mut file) = std::fs::File::create(busy.join(format!("b{}", n % 64))) {
                    let ok = file.write_all(&block).is_ok()
                        && (!n.is_multiple_of(4) || file.sync_all().is_ok());
                    if ok {
                        written.fetch_add(1, Ordering::Relaxed);
                    }
                }
                n += 1;
            }
            let _ = done_tx.send(());
        })
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    while written.load(Ordering::Relaxed) < 8 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut server = stack.server.take().unwrap();
    server.kill().unwrap(); // SIGKILL
    server.wait().unwrap();
    stop.store(true, Ordering::Relaxed);
    let workload_files = written.load(Ordering::Relaxed);
    assert!(
        done_rx.recv_timeout(Duration::from_secs(10)).is_ok(),
        "the write workload hung after the server died"
    );
    workload.join().unwrap();
    eprintln!("killed the server with ext4 mounted, {workload_files} workload writes done");

    // The old stack is dead: detach it lazily (its ext4 can no longer write).
    run("umount", &["-l", fs.to_str().unwrap()]);
    stack.mounts.retain(|m| m != &fs);
    let mut fuse = stack.fuse.take().unwrap();
    let _ = fuse.kill();
    let _ = fuse.wait();
    run("umount", &["-l", mnt.to_str().unwrap()]);
    stack.mounts.retain(|m| m != &mnt);

    // A new server recovers the log disk from its NV cache and log. (The
    // dead one left its socket; the new one replaces it, but `start_server`
    // waits for the path to appear.)
    std::fs::remove_file(&socket).unwrap();
    let (mnt, fs) = (dir.path().join("mnt2"), dir.path().join("fs2"));
    for path in [&mnt, &fs] {
        std::fs::create_dir_all(path).unwrap();
    }
    stack.server = Some(start_server(dir.path(), &config, &socket));
    let image = start_fuse(&mut stack, &mnt, &socket);
    // The file system was never unmounted: its journal needs replaying.
    let header = Command::new("dumpe2fs")
        .args(["-h", image.to_str().unwrap()])
        .output()
        .unwrap();
    let header = String::from_utf8_lossy(&header.stdout);
    assert!(
        header.contains("needs_recovery"),
        "ext4 looks cleanly unmounted after kill -9:\n{header}"
    );
    // e2fsck -n cannot replay the journal; one read-write mount does.
    stack.mount_loop(&image, &fs);
    for i in 0..SYNCED {
        let path = file_path(&fs, i);
        let back = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(
            back == contents(i),
            "fsync'd {} differs after kill -9",
            path.display()
        );
    }
    stack.unmount(&fs);
    fsck(&image);
    stop_fuse(&mut stack, &mnt);
    terminate(stack.server.take().unwrap());
    eprintln!(
        "kill -9 with ext4 mounted: journal replayed, e2fsck -fn clean, {SYNCED} fsync'd files intact ({:?})",
        started.elapsed()
    );
}
