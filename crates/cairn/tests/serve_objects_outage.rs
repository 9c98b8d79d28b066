//! The outage test of issue 24: `cairn serve` of an object volume (the
//! example, at test sizes, on the Ceph RGW `test.sh` starts) under a
//! write+flush load from qemu-io; radosgw is killed (SIGKILL) for 30 s and
//! restarted. The writers wait (back-pressure: a small upload queue) and
//! every request completes, none with an error (`stall_timeout` is above
//! the outage); reads of recent data go on during the outage; the server
//! says when writers started waiting and when uploads passed again. Then a
//! clean stop, and a second server on another data directory (the bucket
//! alone) reads every byte back.
//!
//! radosgw is left running on the same endpoint for the other tests, even
//! when this one fails (a guard restarts it). Skipped without qemu-io,
//! without `CAIRN_TEST_S3_ENDPOINT`, or without `CAIRN_TEST_CEPH_DIR`
//! (the cluster's directory, to restart radosgw).
#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cairn_objects::S3Store;
use common::{Server, cairn, connect, terminate, tool};

/// How long radosgw stays down.
const OUTAGE: Duration = Duration::from_secs(30);
/// Writers' region each, written in 64 KiB units.
const REGION: u64 = 64 << 20;
const UNIT: u64 = 64 << 10;
const WRITERS: u64 = 2;

/// The cluster's radosgw: killed by the test, restarted on drop if it is
/// not answering (whatever happened to the test).
struct Rgw {
    dir: PathBuf,
}

impl Rgw {
    fn script() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/ceph-cluster.sh")
    }

    /// radosgw's PID from the cluster's pid file (fresher than
    /// `CAIRN_TEST_RGW_PID` if another test restarted it), if it is
    /// radosgw.
    fn pid(&self) -> Option<u32> {
        let pid: u32 = std::fs::read_to_string(self.dir.join("pid/rgw"))
            .ok()?
            .trim()
            .parse()
            .ok()?;
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        String::from_utf8_lossy(&cmdline)
            .contains("radosgw")
            .then_some(pid)
    }

    fn kill(&self) {
        let pid = self.pid().expect("radosgw is running");
        let status = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status()
            .unwrap();
        assert!(status.success(), "kill -KILL {pid}");
    }

    fn up(&self) -> bool {
        Command::new(Self::script())
            .arg("status")
            .arg(&self.dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    fn restart(&self) {
        let output = Command::new(Self::script())
            .arg("restart-rgw")
            .arg(&self.dir)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "restart-rgw: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

impl Drop for Rgw {
    fn drop(&mut self) {
        if !self.up() {
            eprintln!("serve_objects_outage: radosgw is down: restarting it");
            let _ = Command::new(Self::script())
                .arg("restart-rgw")
                .arg(&self.dir)
                .status();
        }
    }
}

/// The example on the test cluster: 256 MiB, 1 MiB segments, an upload
/// queue of 8 MiB (the writers soon wait), a stall timeout of 90 s (above
/// the outage).
fn spec(config: &cairn_objects::S3Config, prefix: &str) -> String {
    common::objects_example(
        config,
        prefix,
        &[
            ("upload_queue = \"256MiB\"", "upload_queue = \"8MiB\""),
            ("stall_timeout = 120", "stall_timeout = 90"),
        ],
    )
}

fn serve(dir: &Path, config: &cairn_objects::S3Config) -> Server {
    let mut c = cairn();
    c.args(["serve", "--config"])
        .arg(dir.join("objects.toml"))
        .arg("--listen")
        .arg(format!("unix:{}", dir.join("cairn.sock").display()))
        .env("AWS_ACCESS_KEY_ID", &config.access_key)
        .env("AWS_SECRET_ACCESS_KEY", &config.secret_key)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("stderr.txt")).unwrap());
    let server = Server(Some(c.spawn().unwrap()));
    drop(connect(&dir.join("cairn.sock")));
    server
}

/// Runs qemu-io with `commands` on `uri`, killed after `limit`: whether
/// every command succeeded, and what it printed.
fn qemu_io(qemu: &Path, uri: &str, commands: &[String], limit: Duration) -> (bool, String) {
    let out = tempfile::NamedTempFile::new().unwrap();
    let mut command = Command::new(qemu);
    command.args(["-f", "raw"]);
    for c in commands {
        command.args(["-c", c]);
    }
    let mut child = command
        .arg(uri)
        .stdin(Stdio::null())
        .stdout(out.reopen().unwrap())
        .stderr(out.reopen().unwrap())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let text = std::fs::read_to_string(out.path()).unwrap_or_default();
    let ok = status.is_some_and(|s| s.success())
        && !text.contains("failed")
        && !text.contains("Pattern")
        && !text.contains("error");
    let text = match status {
        None => format!("killed after {limit:?}\n{text}"),
        Some(_) => text,
    };
    (ok, text)
}

/// What the load did: the pattern of every unit (0: never written), the
/// requests that failed, and the longest qemu-io run (writes + flush).
struct Load {
    units: Mutex<Vec<u8>>,
    /// The last run's first unit and pattern.
    last: Mutex<(u64, u8)>,
    errors: Mutex<Vec<String>>,
    runs: AtomicU64,
    slowest_ms: AtomicU64,
    stop: AtomicBool,
}

/// Writer `w`: its region 1 MiB (16 units) at a time, then a flush, in
/// passes with a new pattern each, until told to stop.
fn writer(w: u64, qemu: &Path, uri: &str, load: &Load) {
    let units = REGION / UNIT;
    let (mut unit, mut pass) = (0u64, 1u64);
    while !load.stop.load(Ordering::SeqCst) {
        let pattern = ((w * 100 + pass) % 250 + 1) as u8;
        let first = w * units + unit;
        let mut commands: Vec<String> = (0..16)
            .map(|k| format!("write -P {pattern:#x} {} 64k", (first + k) * UNIT))
            .collect();
        commands.push("flush".into());
        let start = Instant::now();
        let (ok, text) = qemu_io(qemu, uri, &commands, Duration::from_mins(3));
        let took = start.elapsed().as_millis() as u64;
        load.slowest_ms.fetch_max(took, Ordering::SeqCst);
        load.runs.fetch_add(1, Ordering::SeqCst);
        if !ok {
            load.errors
                .lock()
                .unwrap()
                .push(format!("writer {w} at unit {first}: {text}"));
            return;
        }
        load.units.lock().unwrap()[first as usize..first as usize + 16].fill(pattern);
        *load.last.lock().unwrap() = (first, pattern);
        unit += 16;
        if unit == units {
            unit = 0;
            pass += 1;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn an_object_volume_rides_out_an_outage_of_radosgw() {
    let Some(qemu) = tool("qemu-io") else {
        eprintln!("skipped: qemu-io is not installed (./test.sh installs qemu-utils)");
        return;
    };
    let Some(config) = cairn_objects::testing::s3_config("serve_objects_outage") else {
        return;
    };
    let Some(ceph_dir) = std::env::var_os("CAIRN_TEST_CEPH_DIR").filter(|d| !d.is_empty()) else {
        eprintln!(
            "serve_objects_outage: skipped: CAIRN_TEST_CEPH_DIR is not set (the cluster's \
             directory, to restart radosgw; ./test.sh and bench/ceph-cluster.sh's env set it)"
        );
        return;
    };
    let rgw = Rgw {
        dir: PathBuf::from(ceph_dir),
    };
    assert!(rgw.up(), "the cluster at {} is not up", rgw.dir.display());

    let prefix = cairn_objects::testing::unique_prefix("outage-test");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("objects.toml"), spec(&config, &prefix)).unwrap();
    let uri = format!(
        "nbd+unix:///vm1?socket={}",
        dir.path().join("cairn.sock").display()
    );
    let mut server = serve(dir.path(), &config);

    let load = Arc::new(Load {
        units: Mutex::new(vec![0; (WRITERS * REGION / UNIT) as usize]),
        last: Mutex::new((0, 0)),
        errors: Mutex::new(Vec::new()),
        runs: AtomicU64::new(0),
        slowest_ms: AtomicU64::new(0),
        stop: AtomicBool::new(false),
    });
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let (qemu, uri, load) = (qemu.clone(), uri.clone(), Arc::clone(&load));
            std::thread::spawn(move || writer(w, &qemu, &uri, &load))
        })
        .collect();

    std::thread::sleep(Duration::from_secs(4));
    let before = load.runs.load(Ordering::SeqCst);
    assert!(before > 0, "no load before the outage");
    let down = Instant::now();
    rgw.kill();
    eprintln!("serve_objects_outage: radosgw killed after {before} runs of the load");

    // During the outage: a read of data just written (not yet in the
    // store: in the object volume's DRAM) is served at once.
    std::thread::sleep(Duration::from_secs(5));
    let (unit, pattern) = *load.last.lock().unwrap();
    let asked = Instant::now();
    let (ok, text) = qemu_io(
        &qemu,
        &uri,
        &[format!("read -P {pattern:#x} {} 64k", unit * UNIT)],
        Duration::from_secs(20),
    );
    assert!(ok, "a read of recent data during the outage: {text}");
    let read_ms = asked.elapsed().as_millis();

    std::thread::sleep(OUTAGE.saturating_sub(down.elapsed()));
    let during = load.runs.load(Ordering::SeqCst) - before;
    rgw.restart();
    let back = Instant::now();
    eprintln!(
        "serve_objects_outage: radosgw restarted after {:.1} s down ({during} runs of the load during it)",
        down.elapsed().as_secs_f64()
    );
    // The load goes on after the store is back, then stops.
    let runs_back = load.runs.load(Ordering::SeqCst);
    while load.runs.load(Ordering::SeqCst) < runs_back + 2 * WRITERS
        && back.elapsed() < Duration::from_mins(1)
        && load.errors.lock().unwrap().is_empty()
    {
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_secs(2));
    load.stop.store(true, Ordering::SeqCst);
    for w in writers {
        w.join().unwrap();
    }
    let errors = load.errors.lock().unwrap().clone();
    let slowest = Duration::from_millis(load.slowest_ms.load(Ordering::SeqCst));
    let runs = load.runs.load(Ordering::SeqCst);
    eprintln!(
        "serve_objects_outage: {runs} runs of 16 × 64 KiB writes and a flush, {} errors, \
         slowest {:.1} s; a read during the outage took {read_ms} ms",
        errors.len(),
        slowest.as_secs_f64()
    );
    assert!(errors.is_empty(), "requests failed: {errors:#?}");
    assert!(
        slowest > Duration::from_secs(15),
        "no writer waited for the store (slowest run {slowest:?}): the upload queue did not bind"
    );

    terminate(server.take());
    let logged = std::fs::read_to_string(dir.path().join("stderr.txt")).unwrap();
    for line in logged.lines().filter(|l| l.contains("object store")) {
        eprintln!("serve_objects_outage: server: {line}");
    }
    for (line, times) in [
        ("writes wait for the object store", 1),
        ("the object store takes uploads again", 1),
    ] {
        assert_eq!(
            logged.matches(line).count(),
            times,
            "{line:?} {times} time(s):\n{logged}"
        );
    }
    assert!(
        logged.contains("object store failing, retrying")
            && logged.contains("object store answering again")
            && !logged.contains("object store outage")
            && !logged.contains("failed:"),
        "{logged}"
    );

    // Another machine, the bucket alone: every byte.
    let other = dir.path().join("other");
    std::fs::create_dir(&other).unwrap();
    std::fs::write(other.join("objects.toml"), spec(&config, &prefix)).unwrap();
    let mut server = serve(&other, &config);
    let other_uri = format!(
        "nbd+unix:///vm1?socket={}",
        other.join("cairn.sock").display()
    );
    let reads: Vec<String> = load
        .units
        .lock()
        .unwrap()
        .iter()
        .enumerate()
        .map(|(i, p)| format!("read -P {p:#x} {} 64k", i as u64 * UNIT))
        .collect();
    let (ok, text) = qemu_io(&qemu, &other_uri, &reads, Duration::from_mins(2));
    assert!(
        ok,
        "reading back from the bucket alone: {}",
        &text[..text.len().min(4000)]
    );
    terminate(server.take());

    let store = S3Store::new(&config).unwrap();
    cairn_objects::testing::remove_all(&store, &prefix).unwrap();
    drop(rgw);
}
