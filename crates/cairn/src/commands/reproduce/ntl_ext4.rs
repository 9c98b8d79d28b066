//! papers/002 Figs. 5 and 6 on this machine: ext4 over the NTL, served by
//! Cairn over NBD, against ext4 over a plain file volume served the same way
//! and against ext4 on a kernel loop device over a file in `/dev/shm` (the
//! paper's Ramdisk), each running the fio mixes of `reproduce/ntl/`
//! (file-server, mail-server and web-server after Filebench's personalities).
//!
//! The stack for a Cairn target: an in-process NBD server with the export →
//! `nbdfuse` (in the background) exposing it as a file → `mkfs.ext4` → loop
//! mount → fio in a directory of the mount. Needs root, `/dev/fuse`, loop
//! devices, nbdfuse, mkfs.ext4 and fio; [`missing_facility`] says which is
//! missing, and the reproduction then says it skipped this part and why.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use cairn_nbd::{Export, ListenAddress, Listener, Server};
use cairn_store::volume::{OpenOptions, Volume, VolumeSpec};

/// The fio jobs, embedded (`reproduce/ntl/*.fio`).
pub const JOBS: [(&str, &str); 3] = [
    (
        "fileserver",
        include_str!("../../../../../reproduce/ntl/fileserver.fio"),
    ),
    (
        "mailserver",
        include_str!("../../../../../reproduce/ntl/mailserver.fio"),
    ),
    (
        "webserver",
        include_str!("../../../../../reproduce/ntl/webserver.fio"),
    ),
];

/// Where ext4 sits.
pub const TARGETS: [&str; 3] = ["ntl", "file", "loop"];

/// What each target is, for the table's legend.
pub const TARGET_NOTES: [&str; 3] = [
    "ext4 on Cairn's NTL volume (mapped file in /dev/shm, persistence none) over NBD + nbdfuse + loop",
    "ext4 on a Cairn file volume (pread/pwrite on a file in /dev/shm) over NBD + nbdfuse + loop",
    "ext4 on a kernel loop device over a file in /dev/shm (the paper's Ramdisk)",
];

/// How big and how long.
#[derive(Clone, Debug)]
pub struct Ext4Config {
    /// Seconds each job runs (after its ramp).
    pub seconds: f64,
    /// Multiplies each job's file count (at least 1 file per thread).
    pub files: f64,
    /// Bytes of each volume.
    pub size: u64,
}

/// One job on one target.
#[derive(Clone, Debug)]
pub struct Ext4Row {
    /// The job's name.
    pub job: &'static str,
    /// The target's name (one of [`TARGETS`]).
    pub target: &'static str,
    /// Read and write bytes per second, MiB/s.
    pub mib_s: f64,
    /// Read and write operations per second.
    pub iops: f64,
}

fn tool_exists(name: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(name).is_file()))
        || Path::new("/usr/sbin").join(name).is_file()
        || Path::new("/sbin").join(name).is_file()
}

/// Why this machine cannot mount ext4 over the NBD server, if it cannot.
pub fn missing_facility() -> Option<String> {
    // /proc/self belongs to the process's effective user.
    let root =
        std::fs::metadata("/proc/self").is_ok_and(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0);
    if !root {
        return Some("not root (loop mounts need root)".into());
    }
    for device in ["/dev/fuse", "/dev/loop-control"] {
        if !Path::new(device).exists() {
            return Some(format!("{device} is missing"));
        }
    }
    for name in ["nbdfuse", "mkfs.ext4", "mount", "umount", "fio"] {
        if !tool_exists(name) {
            return Some(format!(
                "{name} is not installed (test.sh installs fuse3, libnbd-bin, e2fsprogs, fio)"
            ));
        }
    }
    None
}

/// A job file scaled: `nrfiles` multiplied by `files` (but not below 10, or
/// the job's own count when smaller: a thread's few small files must still
/// hold one block of I/O) and the ramp cut to the run time when that is
/// shorter.
pub fn scaled_job(text: &str, files: f64, seconds: u64) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        if let Some(n) = line
            .strip_prefix("nrfiles=")
            .and_then(|n| n.trim().parse::<f64>().ok())
        {
            let floor = n.min(10.0) as u64;
            let _ = writeln!(out, "nrfiles={}", ((n * files).round() as u64).max(floor));
        } else if let Some(n) = line
            .strip_prefix("ramp_time=")
            .and_then(|n| n.trim().parse::<u64>().ok())
        {
            let _ = writeln!(out, "ramp_time={}", n.min(seconds));
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

fn run_quietly(program: &str, args: &[&str]) -> Result<()> {
    let output = Command::new(program)
        .args(args)
        .output()
        .with_context(|| format!("running {program}"))?;
    if !output.status.success() {
        bail!(
            "{program} {}: {}: {}",
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(())
}

/// Mounts, processes and files to undo, even on an error.
#[derive(Default)]
struct Cleanup {
    mounts: Vec<PathBuf>,
    children: Vec<Child>,
    files: Vec<PathBuf>,
}

impl Cleanup {
    fn unmount_all(&mut self) {
        while let Some(mount) = self.mounts.pop() {
            if run_quietly("umount", &[&mount.to_string_lossy()]).is_err() {
                let _ = Command::new("umount").arg("-l").arg(&mount).status();
            }
        }
        for mut child in self.children.drain(..) {
            let deadline = Instant::now() + Duration::from_secs(5);
            while child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        self.unmount_all();
        for file in &self.files {
            let _ = std::fs::remove_file(file);
        }
    }
}

/// Runs every job on every target; `progress` is told each step.
pub fn run(config: &Ext4Config, progress: &mut dyn FnMut(&str)) -> Result<Vec<Ext4Row>> {
    let dir = tempfile::tempdir().context("creating a temporary directory")?;
    let shm = if Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        dir.path().to_path_buf()
    };
    let pid = std::process::id();
    let mut cleanup = Cleanup::default();
    let ntl_path = shm.join(format!("cairn-ext4-{pid}.ntl"));
    let file_path = shm.join(format!("cairn-ext4-{pid}.file"));
    let loop_path = shm.join(format!("cairn-ext4-{pid}.loop"));
    cleanup
        .files
        .extend([ntl_path.clone(), file_path.clone(), loop_path.clone()]);

    // The Cairn volumes, served in this process.
    let spec_text = format!(
        "data_dir = {dir:?}\n\
         [[export]]\nname = \"ntl\"\ndevice = \"ntl\"\n\
         [[export]]\nname = \"file\"\ndevice = \"file\"\n\
         [device.ntl]\nkind = \"ntl\"\npath = {ntl:?}\nsize = {size}\npersistence = \"none\"\n\
         [device.file]\nkind = \"file\"\npath = {file:?}\nsize = {size}\n",
        dir = dir.path().display().to_string(),
        ntl = ntl_path.display().to_string(),
        file = file_path.display().to_string(),
        size = config.size,
    );
    let spec: VolumeSpec = toml::from_str(&spec_text).context("the ext4 volume spec")?;
    let volume = Volume::open(&spec, dir.path(), &OpenOptions::default())
        .context("opening the NTL and file volumes")?;
    let exports: Vec<Export> = volume
        .exports()
        .iter()
        .map(|e| Export {
            name: e.name.clone(),
            description: e.description.clone(),
            device: Arc::clone(&e.device),
            read_only: false,
        })
        .collect();
    let socket = dir.path().join("nbd.sock");
    let server = Server::new(exports)?;
    let listener = Listener::bind(&ListenAddress::Unix(socket.clone()))?;
    let shutdown = server.shutdown_handle();
    let serving = std::thread::spawn(move || server.serve(&listener));

    let result = (|| -> Result<Vec<Ext4Row>> {
        let mut rows = Vec::new();
        for target in TARGETS {
            let fuse_dir = dir.path().join(format!("fuse-{target}"));
            let mnt = dir.path().join(format!("mnt-{target}"));
            std::fs::create_dir_all(&fuse_dir)?;
            std::fs::create_dir_all(&mnt)?;
            let image = if target == "loop" {
                std::fs::File::create(&loop_path)
                    .and_then(|f| f.set_len(config.size))
                    .with_context(|| format!("creating {}", loop_path.display()))?;
                loop_path.clone()
            } else {
                progress(&format!("{target}: nbdfuse"));
                let uri = format!("nbd+unix:///{target}?socket={}", socket.display());
                let file = fuse_dir.join("disk");
                let child = Command::new("nbdfuse")
                    .arg(&file)
                    .arg(&uri)
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .context("starting nbdfuse")?;
                cleanup.children.push(child);
                cleanup.mounts.push(fuse_dir.clone());
                let deadline = Instant::now() + Duration::from_secs(20);
                while std::fs::metadata(&file).map_or(true, |m| m.len() == 0) {
                    if Instant::now() > deadline {
                        bail!("nbdfuse never exposed {}", file.display());
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                file
            };
            let image_str = image.to_string_lossy().into_owned();
            progress(&format!("{target}: mkfs.ext4"));
            run_quietly(
                "mkfs.ext4",
                &[
                    "-q",
                    "-F",
                    "-E",
                    "nodiscard,lazy_itable_init=0,lazy_journal_init=0",
                    &image_str,
                ],
            )?;
            run_quietly("mount", &["-o", "loop", &image_str, &mnt.to_string_lossy()])?;
            cleanup.mounts.push(mnt.clone());
            let seconds = config.seconds.max(1.0).round() as u64;
            for (job, text) in JOBS {
                progress(&format!("{target}: {job}"));
                let work = mnt.join(job);
                std::fs::create_dir_all(&work)?;
                let job_file = dir.path().join(format!("{job}.fio"));
                std::fs::write(&job_file, scaled_job(text, config.files, seconds))?;
                let (mib_s, iops) = fio(&job_file, &work, seconds)
                    .with_context(|| format!("fio {job} on {target}"))?;
                rows.push(Ext4Row {
                    job,
                    target,
                    mib_s,
                    iops,
                });
            }
            // Unmount ext4, then nbdfuse (which then exits).
            cleanup.unmount_all();
        }
        Ok(rows)
    })();
    cleanup.unmount_all();
    shutdown.trigger();
    let _ = serving.join();
    drop(volume);
    result
}

/// Runs one job file; returns (MiB/s, IOPS), reads and writes together.
fn fio(job: &Path, dir: &Path, seconds: u64) -> Result<(f64, f64)> {
    let output = Command::new("fio")
        .arg("--output-format=json")
        .arg(job)
        .env("NTL_FIO_DIR", dir)
        .env("NTL_FIO_SECONDS", seconds.to_string())
        .output()
        .context("running fio")?;
    if !output.status.success() {
        bail!(
            "fio failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    let text = String::from_utf8_lossy(&output.stdout);
    let json = text.find('{').map_or("", |start| &text[start..]);
    let value: serde_json::Value = serde_json::from_str(json).context("parsing fio's JSON")?;
    let job = &value["jobs"][0];
    let mut bytes = 0.0;
    let mut iops = 0.0;
    for side in ["read", "write"] {
        bytes += job[side]["bw_bytes"].as_f64().unwrap_or(0.0);
        iops += job[side]["iops"].as_f64().unwrap_or(0.0);
    }
    Ok((bytes / f64::from(1 << 20), iops))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jobs_scale_their_file_counts_and_ramps() {
        for (name, text) in JOBS {
            let scaled = scaled_job(text, 0.1, 2);
            assert!(scaled.contains("ramp_time=2\n"), "{name}: {scaled}");
            assert!(scaled.contains("directory=${NTL_FIO_DIR}"), "{name}");
        }
        let (_, fileserver) = JOBS[0];
        assert!(scaled_job(fileserver, 0.1, 10).contains("nrfiles=20\n"));
        assert!(scaled_job(fileserver, 0.0001, 10).contains("nrfiles=10\n"));
        let (_, webserver) = JOBS[2];
        assert!(scaled_job(webserver, 0.1, 10).contains("nrfiles=10\n"));
        assert!(scaled_job(fileserver, 1.0, 10).contains("ramp_time=5\n"));
    }
}
