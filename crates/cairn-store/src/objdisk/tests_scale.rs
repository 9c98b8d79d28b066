//! Scale: a 1 TiB thin volume over a small local segment cache, written
//! sparsely across its whole address space (4 KiB random blocks and 1 MiB
//! runs), flushed, stopped, reopened and sampled. Measures the block map's
//! DRAM per mapped block, the checkpoint's bytes per mapped block, and the
//! open's time. The objects go to files (`DirStore`), not DRAM, so the
//! process's memory is the volume's own.
//!
//! `cargo test --release -p cairn-store objdisk::tests::scale -- --ignored
//! --nocapture` runs the 2 GiB one; the 16 MiB one runs with the others.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn_objects::{ObjectError, ObjectInfo, ObjectStore, Op};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::super::{ObjectDisk, ObjectDiskOptions};
use crate::device::{Device, FileDevice, FileOptions};

const BS: u64 = 4096;
const TIB: u64 = 1 << 40;
/// Blocks of a 1 MiB run.
const RUN: u64 = 256;

/// An object store in a directory, one file per object (`/` in a key is
/// `%` in its file name): objects on disk, not in the test's DRAM.
struct DirStore {
    dir: PathBuf,
}

impl DirStore {
    fn path(&self, key: &str) -> PathBuf {
        self.dir.join(key.replace('/', "%"))
    }
}

fn io(op: Op, key: &str, e: &std::io::Error) -> ObjectError {
    ObjectError::failed(op, key, e.to_string(), false)
}

impl ObjectStore for DirStore {
    fn put(&self, key: &str, body: &[u8]) -> Result<(), ObjectError> {
        // Whole or not at all: written aside, then renamed over.
        let aside = self.dir.join(format!(".{}", key.replace('/', "%")));
        std::fs::write(&aside, body).map_err(|e| io(Op::Put, key, &e))?;
        std::fs::rename(&aside, self.path(key)).map_err(|e| io(Op::Put, key, &e))
    }

    fn create(&self, key: &str, body: &[u8]) -> Result<(), ObjectError> {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(self.path(key))
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::AlreadyExists => ObjectError::Exists {
                    key: key.to_owned(),
                },
                _ => io(Op::Create, key, &e),
            })?;
        f.write_all(body).map_err(|e| io(Op::Create, key, &e))
    }

    fn read_at(&self, key: &str, offset: u64, buf: &mut [u8]) -> Result<usize, ObjectError> {
        use std::os::unix::fs::FileExt;
        let f = std::fs::File::open(self.path(key)).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => ObjectError::NotFound {
                key: key.to_owned(),
            },
            _ => io(Op::Get, key, &e),
        })?;
        let mut n = 0;
        while n < buf.len() {
            let got = f
                .read_at(&mut buf[n..], offset + n as u64)
                .map_err(|e| io(Op::Get, key, &e))?;
            if got == 0 {
                break;
            }
            n += got;
        }
        Ok(n)
    }

    fn get(&self, key: &str) -> Result<Vec<u8>, ObjectError> {
        std::fs::read(self.path(key)).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => ObjectError::NotFound {
                key: key.to_owned(),
            },
            _ => io(Op::Get, key, &e),
        })
    }

    fn head(&self, key: &str) -> Result<Option<u64>, ObjectError> {
        match std::fs::metadata(self.path(key)) {
            Ok(m) => Ok(Some(m.len())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io(Op::Head, key, &e)),
        }
    }

    fn delete(&self, key: &str) -> Result<(), ObjectError> {
        match std::fs::remove_file(self.path(key)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io(Op::Delete, key, &e)),
            _ => Ok(()),
        }
    }

    fn list(&self, prefix: &str) -> Result<Vec<ObjectInfo>, ObjectError> {
        let mut out = Vec::new();
        for entry in std::fs::read_dir(&self.dir).map_err(|e| io(Op::List, prefix, &e))? {
            let entry = entry.map_err(|e| io(Op::List, prefix, &e))?;
            let name = entry.file_name().to_string_lossy().replace('%', "/");
            if name.starts_with(prefix) && !name.starts_with('.') {
                let size = entry
                    .metadata()
                    .map_err(|e| io(Op::List, prefix, &e))?
                    .len();
                out.push(ObjectInfo { key: name, size });
            }
        }
        out.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(out)
    }

    fn describe(&self) -> String {
        format!("dir {}", self.dir.display())
    }
}

/// Block `lba`'s bytes as written by write `version`.
fn pattern(lba: u64, version: u64) -> Vec<u8> {
    let mut b = vec![0u8; BS as usize];
    for (i, w) in b.chunks_exact_mut(8).enumerate() {
        let x =
            (lba ^ version.rotate_left(40) ^ (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)) | 1;
        w.copy_from_slice(&x.to_le_bytes());
    }
    b[..8].copy_from_slice(&lba.to_le_bytes());
    b[8..16].copy_from_slice(&version.to_le_bytes());
    b
}

/// This process's resident bytes.
fn rss() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}

/// What a scale run measured.
#[derive(Debug)]
struct Measured {
    written: u64,
    mapped: u64,
    map_bytes: u64,
    segments: u64,
    segment_bytes: u64,
    checkpoint_bytes: u64,
    write_time: Duration,
    open_time: Duration,
    /// The reopened map's bytes (built by the open from the checkpoint).
    open_map_bytes: u64,
    /// The process's resident bytes after the reopen.
    open_rss: u64,
    sampled: usize,
}

fn options() -> ObjectDiskOptions {
    ObjectDiskOptions {
        prefix: "scale/".into(),
        size: TIB,
        block_size: BS as u32,
        holder: "scale".into(),
        read_cache: 64 << 20,
        clean_below: 0.0,
        heartbeat: Duration::from_mins(10),
        ..ObjectDiskOptions::default()
    }
}

fn open(store: &Arc<DirStore>, cache: &Path, cache_len: u64) -> ObjectDisk {
    let device: Arc<dyn Device> = Arc::new(
        FileDevice::open(
            cache,
            &FileOptions {
                create_len: Some(cache_len),
                ..FileOptions::default()
            },
        )
        .expect("the cache file"),
    );
    ObjectDisk::open_local(
        Arc::clone(store) as Arc<dyn ObjectStore>,
        &options(),
        None,
        Some(device),
    )
    .expect("open")
}

/// `runs` rounds of 256 random 4 KiB blocks and one 1 MiB run, each
/// anywhere in the 1 TiB volume (a flush every 64 rounds); returns the
/// version each written block holds.
fn write(disk: &ObjectDisk, runs: u64, rng: &mut ChaCha8Rng) -> HashMap<u64, u64> {
    let blocks = TIB / BS;
    let mut expected = HashMap::new();
    let mut version = 0u64;
    for r in 0..runs {
        for _ in 0..RUN {
            version += 1;
            let lba = rng.random_range(0..blocks);
            disk.write_at(&pattern(lba, version), lba * BS)
                .expect("a 4 KiB write");
            expected.insert(lba, version);
        }
        version += 1;
        let first = rng.random_range(0..blocks / RUN) * RUN;
        let data: Vec<u8> = (first..first + RUN)
            .flat_map(|lba| pattern(lba, version))
            .collect();
        disk.write_at(&data, first * BS).expect("a 1 MiB write");
        for lba in first..first + RUN {
            expected.insert(lba, version);
        }
        if r % 64 == 63 {
            disk.flush().expect("flush");
        }
    }
    disk.flush().expect("flush");
    expected
}

/// Reads `n` random written blocks and `n` random others: each holds what
/// was last written there, or zeros.
fn sample(disk: &ObjectDisk, expected: &HashMap<u64, u64>, n: usize, rng: &mut ChaCha8Rng) {
    let mut written: Vec<(u64, u64)> = expected.iter().map(|(&b, &v)| (b, v)).collect();
    written.sort_unstable();
    let mut buf = vec![0u8; BS as usize];
    for _ in 0..n {
        let (lba, version) = written[rng.random_range(0..written.len())];
        disk.read_at(&mut buf, lba * BS).expect("read");
        assert!(
            buf == pattern(lba, version),
            "block {lba}: not version {version}"
        );
        let other = rng.random_range(0..TIB / BS);
        disk.read_at(&mut buf, other * BS).expect("read");
        match expected.get(&other) {
            Some(&v) => assert!(buf == pattern(other, v), "block {other}"),
            None => assert!(buf.iter().all(|&x| x == 0), "block {other} never written"),
        }
    }
}

/// The whole run: write, stop, reopen, sample.
fn scale(runs: u64, cache_len: u64, samples: usize) -> Measured {
    let tmp = tempfile::tempdir().expect("a temporary directory");
    let objects = tmp.path().join("objects");
    std::fs::create_dir(&objects).expect("mkdir");
    let store = Arc::new(DirStore { dir: objects });
    let cache = tmp.path().join("segcache");
    let mut rng = ChaCha8Rng::seed_from_u64(24);

    let disk = open(&store, &cache, cache_len);
    let start = Instant::now();
    let expected = write(&disk, runs, &mut rng);
    let write_time = start.elapsed();
    let (mapped, map_bytes) = {
        let st = disk.shared.state();
        (st.map.len() as u64, st.map.allocation_size() as u64)
    };
    assert_eq!(
        mapped,
        expected.len() as u64,
        "every written block is mapped"
    );
    sample(&disk, &expected, samples, &mut rng);
    disk.close().expect("close");
    drop(disk);

    let listed = |dir: &str| store.list(dir).expect("list");
    let checkpoints = listed("scale/ckpt/");
    assert_eq!(checkpoints.len(), 1, "{checkpoints:?}");
    let segs = listed("scale/seg/");
    let start = Instant::now();
    let disk = open(&store, &cache, cache_len);
    let open_time = start.elapsed();
    let open_rss = rss();
    let open_map_bytes = disk.shared.state().map.allocation_size() as u64;
    assert_eq!(disk.report().mapped as u64, mapped);
    assert_eq!(
        disk.report().rolled,
        0,
        "a clean stop leaves nothing to roll"
    );
    sample(&disk, &expected, samples, &mut rng);
    disk.close().expect("close");
    Measured {
        written: runs * 2 * RUN * BS,
        mapped,
        map_bytes,
        segments: segs.len() as u64,
        segment_bytes: segs.iter().map(|o| o.size).sum(),
        checkpoint_bytes: checkpoints[0].size,
        write_time,
        open_time,
        open_map_bytes,
        open_rss,
        sampled: samples,
    }
}

fn report(m: &Measured) {
    let per = |bytes: u64| bytes as f64 / m.mapped as f64;
    let gib_per_tib = |bytes: u64| per(bytes) * (TIB / BS) as f64 / f64::from(1u32 << 30);
    eprintln!(
        "scale: 1 TiB volume, {:.0} MiB written ({} MiB/s), {} blocks mapped in {} segments \
         ({:.0} MiB); block map {:.1} MiB = {:.1} B/block = {:.1} GiB per TiB mapped; \
         checkpoint {:.1} MiB = {:.1} B/block = {:.1} GiB per TiB mapped; reopen {:.0} ms \
         (map {:.1} MiB, process RSS {:.0} MiB); {} + {} blocks sampled twice",
        m.written as f64 / f64::from(1u32 << 20),
        (m.written as f64 / f64::from(1u32 << 20) / m.write_time.as_secs_f64()).round(),
        m.mapped,
        m.segments,
        m.segment_bytes as f64 / f64::from(1u32 << 20),
        m.map_bytes as f64 / f64::from(1u32 << 20),
        per(m.map_bytes),
        gib_per_tib(m.map_bytes),
        m.checkpoint_bytes as f64 / f64::from(1u32 << 20),
        per(m.checkpoint_bytes),
        gib_per_tib(m.checkpoint_bytes),
        m.open_time.as_secs_f64() * 1000.0,
        m.open_map_bytes as f64 / f64::from(1u32 << 20),
        m.open_rss as f64 / f64::from(1u32 << 20),
        m.sampled,
        m.sampled,
    );
}

/// Checks what holds at any size: the map and the checkpoint cost what
/// their layout says per mapped block (the map at most 64 bytes: a
/// hashbrown table of 24-byte entries and a control byte, at most half
/// empty; the checkpoint 24 bytes and the segment list).
fn check(m: &Measured) {
    let per_block = m.map_bytes as f64 / m.mapped as f64;
    assert!(
        (25.0..=64.0).contains(&per_block),
        "{per_block:.1} bytes of map per mapped block"
    );
    let layout = 64 + 24 * m.mapped + 24 * m.segments;
    assert!(
        m.checkpoint_bytes <= layout + 4096 && m.checkpoint_bytes >= 24 * m.mapped,
        "checkpoint {} bytes for {} blocks in {} segments",
        m.checkpoint_bytes,
        m.mapped,
        m.segments
    );
    assert!(
        m.open_map_bytes as f64 / m.mapped as f64 <= 64.0,
        "the reopened map: {} bytes",
        m.open_map_bytes
    );
    // Data, and headers of 12 bytes a block.
    assert!(m.segment_bytes >= m.mapped * BS);
}

/// 16 MiB written across 1 TiB (8 rounds): runs with the other tests.
#[test]
fn a_sparse_1_tib_volume_reopens_and_reads_back() {
    let m = scale(8, 64 << 20, 500);
    report(&m);
    check(&m);
}

/// 2 GiB written across 1 TiB over a 1 GiB local segment cache (about a
/// minute): the numbers of docs/benchmarks.md "Scale".
#[test]
#[ignore = "writes 2 GiB to a temporary directory; run by hand"]
fn scale_2_gib_across_1_tib() {
    let m = scale(1024, 1 << 30, 5000);
    report(&m);
    check(&m);
}
