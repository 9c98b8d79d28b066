//! The object disk against a model: reopen after clean stops and crashes,
//! crash-point enumeration with the faulty object store, fencing, and the
//! objects left behind.

use std::sync::Arc;
use std::time::Duration;

use cairn_objects::{Fault, FaultyStore, MemStore, ObjectStore, RetryPolicy, Retrying};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::{ObjectDisk, ObjectDiskError, ObjectDiskOptions};
use crate::device::Device;

const BS: usize = 4096;
/// Blocks of the test volume.
const BLOCKS: u64 = 64;

fn options(holder: &str, force: bool) -> ObjectDiskOptions {
    ObjectDiskOptions {
        prefix: "vol/".into(),
        size: BLOCKS * BS as u64,
        block_size: BS as u32,
        // Eight blocks a segment: many segments, many seals.
        object_size: 8 * BS as u32,
        uploaders: 3,
        // Room for many segments: the outage tests set their own.
        upload_queue: 1 << 20,
        stall_timeout: Some(Duration::from_secs(30)),
        checkpoint_every: 3,
        holder: holder.into(),
        force_takeover: force,
        // Two chunks (a whole 32 KiB segment object each): reads evict.
        read_cache: 64 << 10,
        heartbeat: Duration::from_secs(30),
        takeover_grace: Duration::ZERO,
        // The workloads' Clean steps run the cleaner, where they say.
        clean_below: 0.0,
        cleaner: super::Cleaner::Off,
    }
}

/// A block whose bytes say `tag` (0: all zero).
fn block(tag: u64) -> Vec<u8> {
    let mut b = vec![0u8; BS];
    if tag != 0 {
        for (i, chunk) in b.chunks_exact_mut(8).enumerate() {
            chunk.copy_from_slice(&(tag ^ i as u64).to_le_bytes());
        }
    }
    b
}

fn tag_of(b: &[u8]) -> u64 {
    u64::from_le_bytes(b[..8].try_into().expect("8 bytes"))
}

fn image(disk: &ObjectDisk) -> Vec<u64> {
    let mut buf = vec![0u8; BLOCKS as usize * BS];
    disk.read_at(&mut buf, 0).expect("read the whole volume");
    buf.chunks_exact(BS)
        .map(|b| {
            let t = tag_of(b);
            assert_eq!(b, block(t), "a block is not one whole write");
            t
        })
        .collect()
}

/// One step of a workload.
#[derive(Clone, Copy, Debug)]
enum Step {
    Write {
        block: u64,
        blocks: u64,
        tag: u64,
    },
    Trim {
        block: u64,
        blocks: u64,
    },
    Flush,
    /// A cleaner pass (segments at most 60 % live): moves blocks, changes
    /// no content.
    Clean,
}

fn workload(seed: u64, steps: usize) -> Vec<Step> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut next_tag = 1;
    (0..steps)
        .map(|_| match rng.random_range(0..20) {
            0..=2 => Step::Flush,
            5 => Step::Clean,
            3 => Step::Trim {
                block: rng.random_range(0..BLOCKS - 4),
                blocks: rng.random_range(1..4),
            },
            4 => Step::Write {
                block: rng.random_range(0..BLOCKS - 4),
                blocks: rng.random_range(1..4),
                tag: 0,
            },
            _ => {
                next_tag += 1;
                // Skewed: the low blocks are hot.
                let hot = rng.random_range(4..BLOCKS - 4);
                Step::Write {
                    block: rng.random_range(0..hot),
                    blocks: rng.random_range(1..4),
                    tag: next_tag << 16,
                }
            }
        })
        .collect()
}

/// Applies `step` to the model image.
fn apply(model: &mut [u64], step: Step) {
    match step {
        Step::Write { block, blocks, tag } => {
            for i in 0..blocks {
                model[(block + i) as usize] = if tag == 0 { 0 } else { tag + i };
            }
        }
        Step::Trim { block, blocks } => {
            for i in 0..blocks {
                model[(block + i) as usize] = 0;
            }
        }
        Step::Flush | Step::Clean => {}
    }
}

/// Runs `steps` on `disk` until one fails. Returns the model image after
/// every block each step that completed changed (index 0: before any), and
/// the index of the image at the last successful flush.
fn run(disk: &ObjectDisk, steps: &[Step]) -> (Vec<Vec<u64>>, usize) {
    let mut model = vec![0u64; BLOCKS as usize];
    let mut images = vec![model.clone()];
    let mut flushed = 0;
    for &step in steps {
        let done = match step {
            Step::Write { block, blocks, tag } => {
                let data: Vec<u8> = (0..blocks)
                    .flat_map(|k| block_of(if tag == 0 { 0 } else { tag + k }))
                    .collect();
                disk.write_at(&data, block * BS as u64)
            }
            Step::Trim { block, blocks } => disk.discard(block * BS as u64, blocks * BS as u64),
            Step::Flush => disk.flush(),
            Step::Clean => {
                // A pass the store refuses moves nothing more.
                let _ = disk.clean_pass(0.6, 8);
                Ok(())
            }
        };
        if done.is_err() {
            break;
        }
        // A write of several blocks may survive a crash in part (a
        // segment can end between its blocks), as on any disk: an image
        // after each block.
        let (first, blocks) = match step {
            Step::Write { block, blocks, .. } | Step::Trim { block, blocks } => (block, blocks),
            Step::Flush | Step::Clean => (0, 0),
        };
        for k in 0..blocks {
            let one = match step {
                Step::Write { tag, .. } => Step::Write {
                    block: first + k,
                    blocks: 1,
                    tag: if tag == 0 { 0 } else { tag + k },
                },
                _ => Step::Trim {
                    block: first + k,
                    blocks: 1,
                },
            };
            apply(&mut model, one);
            images.push(model.clone());
        }
        if matches!(step, Step::Flush) {
            flushed = images.len() - 1;
        }
    }
    (images, flushed)
}

fn block_of(tag: u64) -> Vec<u8> {
    block(tag)
}

/// The recovered image is the model after some prefix of the steps that
/// contains every step before the last acknowledged flush.
fn assert_prefix(recovered: &[u64], images: &[Vec<u64>], flushed: usize, what: &str) {
    assert!(
        images[flushed..].iter().any(|m| m == recovered),
        "{what}: the recovered image is no prefix at or after the last flush (step {flushed} of {}):\n{recovered:?}\nat the flush: {:?}",
        images.len() - 1,
        images[flushed]
    );
}

/// Each block of the recovered image holds what the model held at the last
/// acknowledged flush or a value written to it since: every flushed write
/// is there, and nothing never written. (Writes after the last flush may be
/// there or not, block by block, as on a disk with a volatile write cache:
/// the local write log keeps the latest data of each block a flush finds,
/// in batches that a crash may cut between.)
fn assert_flushed(recovered: &[u64], images: &[Vec<u64>], flushed: usize, what: &str) {
    for (b, &v) in recovered.iter().enumerate() {
        assert!(
            images[flushed..].iter().any(|m| m[b] == v),
            "{what}: block {b} reads {v:#x}, which it never held at or after the last flush (step {flushed} of {}), where it held {:#x}",
            images.len() - 1,
            images[flushed][b]
        );
    }
}

/// Segment objects in the store, and the segments the newest checkpoint
/// lists: after a clean close they are the same set (nothing leaked).
fn assert_no_leak(store: &dyn ObjectStore) {
    let segs: Vec<String> = store
        .list("vol/seg/")
        .expect("list")
        .into_iter()
        .map(|o| o.key)
        .collect();
    let ckpts = store.list("vol/ckpt/").expect("list");
    assert_eq!(
        ckpts.len(),
        1,
        "one checkpoint after a clean close: {ckpts:?}"
    );
    let c =
        super::format::Checkpoint::decode(&store.get(&ckpts[0].key).expect("get")).expect("decode");
    let mut listed: Vec<String> = c
        .segments
        .iter()
        .map(|s| format!("vol/seg/{:016x}-{:016x}", s.sequence, s.generation))
        .collect();
    listed.sort();
    assert_eq!(
        segs, listed,
        "segment objects beyond what the checkpoint needs"
    );
}

#[test]
fn a_volume_reads_back_after_a_clean_stop() {
    let store: Arc<MemStore> = Arc::new(MemStore::new());
    let steps = workload(1, 400);
    let disk = ObjectDisk::open(store.clone(), &options("a", false)).expect("create");
    let (images, _) = run(&disk, &steps);
    let last = images.last().expect("an image").clone();
    assert_eq!(image(&disk), last, "reads before the close");
    disk.verify().expect("invariants");
    disk.close().expect("close");
    drop(disk);
    assert_no_leak(store.as_ref());

    // No force needed: the lease was released. Nothing to roll forward.
    let disk = ObjectDisk::open(store.clone(), &options("b", false)).expect("reopen");
    assert_eq!(disk.report().rolled, 0);
    assert_eq!(disk.report().generation, 2);
    assert_eq!(image(&disk), last, "reads after a clean stop");
    disk.verify().expect("invariants");
}

#[test]
fn unaligned_writes_and_reads_patch_whole_blocks() {
    let store = Arc::new(MemStore::new());
    let disk = ObjectDisk::open(store, &options("a", false)).expect("create");
    disk.write_at(&block(7 << 16), 0).expect("write");
    disk.write_at(&[0xee; 100], 4000)
        .expect("unaligned write across a block boundary");
    let mut buf = vec![0u8; 300];
    disk.read_at(&mut buf, 3900).expect("unaligned read");
    assert_eq!(&buf[..100], &block(7 << 16)[3900..4000]);
    assert!(buf[100..200].iter().all(|&x| x == 0xee));
    assert!(buf[200..].iter().all(|&x| x == 0));
    assert!(
        disk.write_at(&[1], BLOCKS * BS as u64).is_err(),
        "past the end"
    );
}

#[test]
fn a_held_volume_is_refused_and_a_takeover_fences_the_holder() {
    let store: Arc<MemStore> = Arc::new(MemStore::new());
    let a = ObjectDisk::open(store.clone(), &options("server-a", false)).expect("create");
    a.write_at(&block(1 << 16), 0).expect("write");
    a.flush().expect("flush");

    let err = ObjectDisk::open(store.clone(), &options("server-b", false)).expect_err("held");
    assert!(matches!(err, ObjectDiskError::Lease(_)), "{err}");
    assert!(err.to_string().contains("held by server-a"), "{err}");

    let b = ObjectDisk::open(store.clone(), &options("server-b", true)).expect("takeover");
    assert_eq!(image(&b)[0], 1 << 16, "b sees what a flushed");

    // a keeps writing: its flush fails, and nothing it wrote is seen.
    a.write_at(&block(2 << 16), BS as u64)
        .expect("a buffered write");
    let err = a.flush().expect_err("a was fenced");
    assert!(
        err.to_string().contains("another server took it over"),
        "{err}"
    );
    assert!(
        a.write_at(&block(3 << 16), 0).is_err(),
        "a takes no more writes"
    );
    drop(a);
    // a's segment reached the store before its flush learnt it was fenced.
    // If b crashes now, the next writer must still not roll forward over
    // it: its generation is older than b's fence.
    drop(b);
    let b = ObjectDisk::open(store.clone(), &options("server-b2", true))
        .expect("takeover after b's crash");
    assert_eq!(
        &image(&b)[..2],
        &[1 << 16, 0],
        "a's write after the takeover is void"
    );
    b.write_at(&block(4 << 16), 2 * BS as u64)
        .expect("b writes");
    b.close().expect("close");
    drop(b);
    let c = ObjectDisk::open(store.clone(), &options("server-c", false)).expect("reopen");
    let img = image(&c);
    assert_eq!((img[0], img[1], img[2]), (1 << 16, 0, 4 << 16));
    c.close().expect("close");
    assert_no_leak(store.as_ref());
}

/// Crash the writer before each mutation of the store in turn: what reopens
/// is a prefix of the workload holding everything acknowledged by a flush;
/// after the next clean stop no object is left that nothing needs.
#[test]
fn every_crash_point_recovers_a_prefix_with_every_flush() {
    let steps = workload(7, 120);
    // Count the mutations of a clean run.
    let clean = Arc::new(FaultyStore::new(MemStore::new()));
    {
        let disk = ObjectDisk::open(clean.clone(), &options("a", false)).expect("create");
        run(&disk, &steps);
        disk.close().expect("close");
    }
    let total = clean.mutations();
    assert!(total > 40, "the workload mutates the store {total} times");
    for fault in [
        Fault::Crash as fn(u64) -> Fault,
        Fault::Fail,
        Fault::LostReply,
    ] {
        for n in 0..total {
            let faulty = Arc::new(FaultyStore::new(MemStore::new()));
            faulty.arm(fault(n));
            let what = format!("{:?}", fault(n));
            let (images, flushed) = match ObjectDisk::open(faulty.clone(), &options("a", false)) {
                Ok(disk) => {
                    let r = run(&disk, &steps);
                    let _ = disk.close();
                    r
                }
                // The fault hit the open: nothing was acknowledged.
                Err(_) => (vec![vec![0; BLOCKS as usize]], 0),
            };
            let store: Arc<MemStore> = Arc::new(MemStore::new());
            // Reopen over what the store holds (the faulty store's inner
            // map), by force: the crashed writer never released.
            let survivor = copy(faulty.inner(), &store);
            let disk = match ObjectDisk::open(survivor.clone(), &options("b", true)) {
                Ok(d) => d,
                Err(ObjectDiskError::NoVolume { .. }) if flushed == 0 => continue,
                Err(e) => panic!("{what}: reopen failed: {e}"),
            };
            assert_prefix(&image(&disk), &images, flushed, &what);
            disk.verify().unwrap_or_else(|e| panic!("{what}: {e}"));
            disk.close().expect("close");
            assert_no_leak(survivor.as_ref());
        }
    }
}

/// A copy of `from`'s objects in `to`.
fn copy(from: &MemStore, to: &Arc<MemStore>) -> Arc<MemStore> {
    for o in from.list("").expect("list") {
        to.put(&o.key, &from.get(&o.key).expect("get"))
            .expect("put");
    }
    Arc::clone(to)
}

/// Retries hide transient failures entirely: nothing is lost, no error
/// reaches the client.
#[test]
fn retried_faults_are_invisible() {
    let steps = workload(3, 200);
    for n in [0, 5, 17, 40] {
        for fault in [Fault::Fail(n), Fault::LostReply(n)] {
            let faulty = Arc::new(FaultyStore::new(MemStore::new()));
            faulty.arm(fault);
            let store = Arc::new(Retrying::new(
                faulty.clone(),
                RetryPolicy {
                    first_delay: Duration::from_millis(1),
                    max_delay: Duration::from_millis(2),
                    deadline: Some(Duration::from_secs(5)),
                    seed: n,
                },
            ));
            let disk = ObjectDisk::open(store.clone(), &options("a", false)).expect("open");
            let (images, flushed) = run(&disk, &steps);
            let mut model = vec![0; BLOCKS as usize];
            for &s in &steps {
                apply(&mut model, s);
            }
            assert_eq!(
                images.last(),
                Some(&model),
                "{fault:?}: every step succeeded"
            );
            assert!(flushed > 0);
            disk.close().expect("close");
            drop(disk);
            let disk = ObjectDisk::open(store, &options("b", false)).expect("reopen");
            assert_eq!(&image(&disk), images.last().expect("image"), "{fault:?}");
        }
    }
}

/// The local write log (`flush = "local"`) on `log`.
fn open_local(
    store: Arc<dyn ObjectStore>,
    log: Arc<dyn Device>,
    holder: &str,
    force: bool,
) -> Result<ObjectDisk, ObjectDiskError> {
    ObjectDisk::open_with_log(store, &options(holder, force), Some(log))
}

/// A flush with a local write log returns before the segment is in the
/// store; after a crash the log's records beyond the store are written
/// again.
#[test]
fn a_local_flush_survives_a_crash_before_the_upload() {
    let store: Arc<MemStore> = Arc::new(MemStore::new());
    let log: Arc<dyn Device> = Arc::new(crate::device::MemoryDevice::new(256 * BS as u64));
    let disk = open_local(store.clone(), log.clone(), "a", false).expect("create");
    disk.write_at(&block(5 << 16), 3 * BS as u64)
        .expect("write");
    disk.write_at(&block(6 << 16), 9 * BS as u64)
        .expect("write");
    disk.discard(0, BS as u64).expect("trim");
    disk.flush().expect("flush");
    // Two blocks: the segment (eight blocks) is still open, so nothing of
    // it is in the store.
    assert!(store.list("vol/seg/").expect("list").is_empty());
    drop(disk);
    let disk = open_local(store.clone(), log.clone(), "b", true).expect("reopen");
    assert_eq!(
        disk.report().replayed,
        3,
        "two writes and a trim written again"
    );
    let img = image(&disk);
    assert_eq!((img[3], img[9]), (5 << 16, 6 << 16));
    disk.close().expect("close");
    drop(disk);
    // Closed cleanly: the log is empty, the store has everything.
    let disk = open_local(store.clone(), log, "c", false).expect("reopen");
    assert_eq!(disk.report().replayed, 0);
    assert_eq!(image(&disk)[9], 6 << 16);
    disk.close().expect("close");
    assert_no_leak(store.as_ref());
}

/// A log left by one server is not replayed over what another server wrote
/// since.
#[test]
fn a_stale_local_log_is_dropped() {
    let store: Arc<MemStore> = Arc::new(MemStore::new());
    let log: Arc<dyn Device> = Arc::new(crate::device::MemoryDevice::new(256 * BS as u64));
    let disk = open_local(store.clone(), log.clone(), "a", false).expect("create");
    disk.write_at(&block(1 << 16), 0).expect("write");
    disk.flush().expect("flush");
    drop(disk);
    // Another server (no log of ours) takes over and writes block 0.
    let other = ObjectDisk::open(store.clone(), &options("b", true)).expect("takeover");
    other.write_at(&block(2 << 16), 0).expect("write");
    other.close().expect("close");
    drop(other);
    // Back here: the log's block 0 is older than the volume's.
    let disk = open_local(store.clone(), log, "c", false).expect("reopen");
    assert_eq!(disk.report().replayed, 0);
    assert_eq!(image(&disk)[0], 2 << 16);
}

/// A crash of the whole machine — the log device (unflushed writes dropped,
/// torn or reordered) and the uploads in flight — after each write of the
/// log in turn: what reopens holds every write before the last flush that
/// returned, and nothing never written.
#[test]
fn every_crash_of_the_local_log_keeps_every_flushed_write() {
    use crate::device::{CrashMode, FaultyDevice};
    let steps = workload(9, 300);
    // A small ring (24 blocks of data), so it wraps and fills.
    let log_len = 32 * BS as u64;
    let clean = {
        let log = Arc::new(FaultyDevice::new(log_len, 1));
        let disk = open_local(Arc::new(MemStore::new()), log.clone(), "a", false).expect("create");
        let (images, _) = run(&disk, &steps);
        assert!(images.len() > steps.len());
        disk.close().expect("close");
        log.counts().writes
    };
    assert!(clean > 60, "the workload writes the log {clean} times");
    for mode in [
        CrashMode::DropUnflushed,
        CrashMode::TearLast,
        CrashMode::Reorder,
    ] {
        for n in 1..clean {
            let what = format!("crash after log write {n} ({mode:?})");
            let store = Arc::new(FaultyStore::new(MemStore::new()));
            let log = Arc::new(FaultyDevice::new(log_len, n));
            log.crash_after_writes(n, mode);
            let (images, flushed) = match open_local(store.clone(), log.clone(), "a", false) {
                Ok(disk) => {
                    let r = run(&disk, &steps);
                    // The machine is down: no upload after this point.
                    store.arm(Fault::Crash(0));
                    drop(disk);
                    r
                }
                // The crash hit the open: nothing was acknowledged.
                Err(_) => (vec![vec![0; BLOCKS as usize]], 0),
            };
            if !log.reboot() {
                // Uploads made this run need fewer log writes than the
                // clean one's (back-pressure waits differ): the crash point
                // was never reached; cut the power at the end instead.
                log.crash_now(mode);
            }
            let survivor = copy(store.inner(), &Arc::new(MemStore::new()));
            let disk = open_local(survivor.clone(), log.clone(), "b", true)
                .unwrap_or_else(|e| panic!("{what}: reopen: {e}"));
            assert_flushed(&image(&disk), &images, flushed, &what);
            disk.verify().unwrap_or_else(|e| panic!("{what}: {e}"));
            disk.close().expect("close");
            assert_no_leak(survivor.as_ref());
        }
    }
}

/// A store that holds the PUT of one key until told, then fails it: an
/// upload still in flight when the machine dies, behind later ones that
/// finished.
struct Holding {
    inner: MemStore,
    held: std::sync::Mutex<(Option<String>, bool)>,
    released: std::sync::Condvar,
}

impl Holding {
    fn new(key: &str) -> Self {
        Self {
            inner: MemStore::new(),
            held: std::sync::Mutex::new((Some(key.to_owned()), false)),
            released: std::sync::Condvar::new(),
        }
    }

    fn fail_held(&self) {
        self.held.lock().expect("lock").1 = true;
        self.released.notify_all();
    }
}

impl ObjectStore for Holding {
    fn put(&self, key: &str, body: &[u8]) -> Result<(), cairn_objects::ObjectError> {
        let mut held = self.held.lock().expect("lock");
        if held.0.as_deref() == Some(key) {
            while !held.1 {
                held = self.released.wait(held).expect("wait");
            }
            return Err(cairn_objects::ObjectError::failed(
                cairn_objects::Op::Put,
                key,
                "the machine died",
                false,
            ));
        }
        drop(held);
        self.inner.put(key, body)
    }
    fn create(&self, key: &str, body: &[u8]) -> Result<(), cairn_objects::ObjectError> {
        self.inner.create(key, body)
    }
    fn read_at(
        &self,
        key: &str,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<usize, cairn_objects::ObjectError> {
        self.inner.read_at(key, offset, buf)
    }
    fn get(&self, key: &str) -> Result<Vec<u8>, cairn_objects::ObjectError> {
        self.inner.get(key)
    }
    fn head(&self, key: &str) -> Result<Option<u64>, cairn_objects::ObjectError> {
        self.inner.head(key)
    }
    fn delete(&self, key: &str) -> Result<(), cairn_objects::ObjectError> {
        self.inner.delete(key)
    }
    fn list(
        &self,
        prefix: &str,
    ) -> Result<Vec<cairn_objects::ObjectInfo>, cairn_objects::ObjectError> {
        self.inner.list(prefix)
    }
    fn describe(&self) -> String {
        "holding".into()
    }
}

/// A segment uploaded behind one still in flight is not yet in the volume
/// (a crash voids it): a flush then must put its blocks in the local write
/// log, or a crash loses them although the flush returned.
#[test]
fn a_flush_logs_blocks_uploaded_beyond_a_gap() {
    // Segment 1 (the first after the empty volume) is held.
    let store = Arc::new(Holding::new("vol/seg/0000000000000001-0000000000000001"));
    let log: Arc<dyn Device> = Arc::new(crate::device::MemoryDevice::new(256 * BS as u64));
    let disk = open_local(store.clone(), log.clone(), "a", false).expect("create");
    // Segment 1: blocks 0..8 (held); segment 2: blocks 8..16 (uploaded).
    for b in 0..16u64 {
        disk.write_at(&block((b + 1) << 16), b * BS as u64)
            .expect("write");
    }
    // Wait until segment 2 is in the store, behind the held segment 1.
    let seg2 = "vol/seg/0000000000000002-0000000000000001";
    let start = std::time::Instant::now();
    while store.inner.head(seg2).expect("head").is_none() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "segment 2 never uploaded"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    disk.flush().expect("flush");
    // The machine dies: the held upload never lands.
    store.fail_held();
    drop(disk);
    let survivor = copy(&store.inner, &Arc::new(MemStore::new()));
    let disk = open_local(survivor, log, "b", true).expect("reopen");
    let img = image(&disk);
    for b in 0..16u64 {
        assert_eq!(img[b as usize], (b + 1) << 16, "block {b}, flushed, lost");
    }
}

/// With a local write log a FLUSH asks the store nothing: the heartbeat is
/// what tells a fenced writer, which then takes no more writes.
#[test]
fn the_heartbeat_stops_a_fenced_writer() {
    let store: Arc<MemStore> = Arc::new(MemStore::new());
    let log: Arc<dyn Device> = Arc::new(crate::device::MemoryDevice::new(256 * BS as u64));
    let mut o = options("server-a", false);
    o.heartbeat = Duration::from_millis(10);
    let a = ObjectDisk::open_with_log(store.clone(), &o, Some(log)).expect("create");
    a.write_at(&block(1 << 16), 0).expect("write");
    a.flush().expect("flush");
    let _b = ObjectDisk::open(store.clone(), &options("server-b", true)).expect("takeover");
    let start = std::time::Instant::now();
    loop {
        match a.write_at(&block(2 << 16), 0) {
            Err(e) => {
                assert!(e.to_string().contains("another server took it over"), "{e}");
                break;
            }
            Ok(()) => assert!(
                start.elapsed() < Duration::from_secs(5),
                "the fenced writer still takes writes"
            ),
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    // Its heartbeat was seen: a refused opener is told when.
    let err = ObjectDisk::open(store, &options("server-c", false)).expect_err("held by b");
    assert!(err.to_string().contains("held by server-b"), "{err}");
}

/// The local segment cache: what was uploaded is read from it, not the
/// store, before and after a restart; a slot whose bytes went bad is read
/// from the store instead; another volume's cache is refused.
#[test]
fn the_local_segment_cache_serves_reads_across_restarts() {
    let store: Arc<MemStore> = Arc::new(MemStore::new());
    let cache: Arc<dyn Device> = Arc::new(crate::device::MemoryDevice::new(8 << 20));
    let open = |holder: &str| {
        ObjectDisk::open_local(
            store.clone(),
            &options(holder, false),
            None,
            Some(cache.clone()),
        )
    };
    let gets = |disk: &ObjectDisk| disk.counts().0.gets;
    let disk = open("a").expect("create");
    let (images, _) = run(&disk, &workload(9, 400));
    let last = images.last().expect("an image").clone();
    disk.flush().expect("flush");
    let before = gets(&disk);
    assert_eq!(image(&disk), last);
    assert_eq!(gets(&disk), before, "every block read from the cache");
    let c = disk.segcache_counts().expect("a cache");
    assert!(c.hits > 0 && c.installs > 0, "{c:?}");
    disk.close().expect("close");
    drop(disk);

    let disk = open("b").expect("reopen");
    let before = gets(&disk);
    assert_eq!(image(&disk), last, "after a restart");
    assert_eq!(gets(&disk), before, "the slots survived the restart");
    disk.close().expect("close");
    drop(disk);

    // Every slot's object bytes scribbled over (headers intact): every
    // block fails its CRC32C and is read from the store.
    let slot =
        super::segcache::HEAD + (8 * BS as u64 + 64 + 12 * 8 + (64 << 10)).next_multiple_of(4096);
    let mut at = super::segcache::HEAD;
    while at + slot <= cache.len() {
        cache
            .write_at(
                &vec![0xa5; (slot - super::segcache::HEAD) as usize],
                at + super::segcache::HEAD,
            )
            .expect("scribble");
        at += slot;
    }
    let disk = open("c").expect("reopen");
    let before = gets(&disk);
    assert_eq!(image(&disk), last, "bad slots are never served");
    assert!(gets(&disk) > before, "read from the store");
    disk.close().expect("close");
    drop(disk);

    // A blank cache (a new host): the first reads fetch the dense
    // segments whole into it, and the next are all local.
    let blank: Arc<dyn Device> = Arc::new(crate::device::MemoryDevice::new(8 << 20));
    let disk = ObjectDisk::open_local(store.clone(), &options("e", false), None, Some(blank))
        .expect("reopen");
    let start = gets(&disk);
    assert_eq!(image(&disk), last, "cold");
    let c = disk.segcache_counts().expect("a cache");
    assert!(c.fetches > 0, "{c:?}");
    let cold = gets(&disk) - start;
    assert_eq!(image(&disk), last, "warmed");
    let warm = gets(&disk) - start - cold;
    let c2 = disk.segcache_counts().expect("a cache");
    // The dense segments are local now; only sparse ones' blocks are
    // fetched again (the test's DRAM chunk cache holds two chunks).
    assert_eq!(c2.fetches, c.fetches, "each segment fetched whole once");
    assert!(c2.hits > c.hits, "{c2:?}");
    assert!(warm + c.fetches <= cold, "cold {cold} GETs, warm {warm}");
    disk.close().expect("close");
    drop(disk);

    let other = ObjectDiskOptions {
        prefix: "other/".into(),
        ..options("d", false)
    };
    let e = ObjectDisk::open_local(store.clone(), &other, None, Some(cache.clone()))
        .expect_err("another volume's cache");
    assert!(e.to_string().contains("not of this one"), "{e}");
}

/// Options for the outage tests: segments of eight blocks (36 KiB sealed,
/// with their header), an upload queue of two of them, a short stall
/// timeout.
fn outage_options(holder: &str, stall: Option<Duration>) -> ObjectDiskOptions {
    ObjectDiskOptions {
        upload_queue: 80 << 10,
        stall_timeout: stall,
        uploaders: 2,
        ..options(holder, true)
    }
}

/// Waits up to 10 s for `done`.
fn wait_until(what: &str, done: impl Fn() -> bool) {
    let start = std::time::Instant::now();
    while !done() {
        assert!(start.elapsed() < Duration::from_secs(10), "{what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Waits for an upload to complete after the store is back (the uploaders
/// pause up to two seconds between attempts).
fn store_back(disk: &ObjectDisk) {
    wait_until("no upload completed", || {
        !disk.shared.state().outage.failing()
    });
}

fn everything_durable(disk: &ObjectDisk) -> bool {
    let st = disk.shared.state();
    st.durable == st.sealed
}

/// Bytes of sealed segments in DRAM, not yet in the store.
fn queued(disk: &ObjectDisk) -> u64 {
    let st = disk.shared.state();
    st.inflight.values().map(|s| s.bytes.len() as u64).sum()
}

/// The store goes down: writes and flushes go on (into DRAM and the local
/// write log) until the upload queue is full; then a writer waits, and
/// fails after `stall_timeout` with an error naming the outage — and the
/// next one at once — without failing the disk. Reads of what DRAM holds
/// go on; a read that needs the store fails, the disk keeps serving. When
/// the store is back, every write is read back, and after a clean stop and
/// an open from the store alone too.
#[test]
fn an_outage_fills_the_upload_queue_then_writers_wait_and_time_out() {
    let store = Arc::new(FaultyStore::new(MemStore::new()));
    let log: Arc<dyn Device> = Arc::new(crate::device::MemoryDevice::new(256 * BS as u64));
    let stall = Duration::from_millis(500);
    let disk =
        ObjectDisk::open_with_log(store.clone(), &outage_options("a", Some(stall)), Some(log))
            .expect("create");
    let mut model = vec![0u64; BLOCKS as usize];
    // One segment (blocks 0..8) in the store before the outage.
    for b in 0..8u64 {
        model[b as usize] = (b + 1) << 16;
        disk.write_at(&block(model[b as usize]), b * BS as u64)
            .expect("write");
    }
    wait_until("the first segment is never durable", || {
        everything_durable(&disk)
    });

    store.set_down(true);
    let mut accepted = 0;
    let err = loop {
        let b = 8 + accepted;
        let tag = (b + 100) << 16;
        let start = std::time::Instant::now();
        match disk.write_at(&block(tag), b * BS as u64) {
            Ok(()) => {
                model[b as usize] = tag;
                accepted += 1;
                if accepted % 4 == 0 {
                    disk.flush().expect("a flush goes to the local write log");
                }
            }
            Err(e) => {
                assert!(
                    start.elapsed() >= stall,
                    "the write failed after {:?}, before the stall timeout",
                    start.elapsed()
                );
                break e;
            }
        }
        assert!(
            b < BLOCKS - 1,
            "writes never waited: the queue is not bounded"
        );
    };
    // Two sealed segments fit the queue, and the open one: 24 blocks.
    assert_eq!(accepted, 24, "blocks written before the queue was full");
    assert!(queued(&disk) <= 80 << 10, "{} bytes queued", queued(&disk));
    let text = err.to_string();
    assert!(
        text.contains("object store outage") && text.contains("stall_timeout"),
        "{text}"
    );
    // The next writer that must wait does not wait as long (at most
    // `LATE_WAIT`, or the stall timeout if shorter — not more); a flush
    // still goes to the local write log.
    let start = std::time::Instant::now();
    assert!(disk.write_at(&block(9 << 16), 40 * BS as u64).is_err());
    assert!(
        start.elapsed() < 2 * stall,
        "failed after {:?}",
        start.elapsed()
    );
    disk.flush().expect("a flush while the queue is full");
    assert!(disk.shared.state().failed.is_none(), "the disk failed");
    // Reads of blocks in DRAM are served; one that needs the store fails
    // with the store's error, and the disk goes on serving.
    let mut buf = vec![0u8; BS];
    disk.read_at(&mut buf, 20 * BS as u64)
        .expect("a block in DRAM");
    assert_eq!(tag_of(&buf), model[20]);
    let err = disk
        .read_at(&mut buf, 0)
        .expect_err("a block only the store has");
    assert!(err.to_string().contains("503"), "{err}");
    disk.read_at(&mut buf, 31 * BS as u64)
        .expect("a block in DRAM, after a failed read");

    store.set_down(false);
    // The uploaders try again (after a pause of up to two seconds): the
    // writes go on, and every one is there.
    store_back(&disk);
    for b in 32..48u64 {
        model[b as usize] = (b + 200) << 16;
        disk.write_at(&block(model[b as usize]), b * BS as u64)
            .expect("a write after the store is back");
    }
    disk.flush().expect("flush");
    assert_eq!(image(&disk), model);
    wait_until("the queue never drained", || everything_durable(&disk));
    disk.verify().expect("invariants");
    disk.close().expect("close");
    drop(disk);
    let disk = ObjectDisk::open(store, &options("b", false)).expect("reopen");
    assert_eq!(image(&disk), model, "after a clean stop, from the store");
}

/// A crash (the process dies: no close, the uploads never land) during an
/// outage keeps every write a flush acknowledged: the local write log
/// holds them, and the next open writes them again.
#[test]
fn a_crash_during_an_outage_loses_no_flushed_write() {
    let store = Arc::new(FaultyStore::new(MemStore::new()));
    let log: Arc<dyn Device> = Arc::new(crate::device::MemoryDevice::new(256 * BS as u64));
    let disk = ObjectDisk::open_with_log(
        store.clone(),
        &outage_options("a", Some(Duration::from_millis(200))),
        Some(log.clone()),
    )
    .expect("create");
    // Every block in the store before the outage.
    let mut flushed: Vec<u64> = (0..BLOCKS).map(|b| (b + 1) << 16).collect();
    for (b, &tag) in flushed.iter().enumerate() {
        disk.write_at(&block(tag), b as u64 * BS as u64)
            .expect("write");
    }
    disk.flush().expect("flush");
    wait_until("the volume never reached the store", || {
        everything_durable(&disk)
    });

    // While the store is down: writes, a flush every third, until a write
    // waits longer than the stall timeout. `since[b]`: what block b was
    // given after the last flush that returned.
    store.set_down(true);
    let mut model = flushed.clone();
    let mut since: Vec<Vec<u64>> = vec![Vec::new(); BLOCKS as usize];
    let mut writes = 0u64;
    loop {
        let b = (writes * 7 % BLOCKS) as usize;
        let tag = (writes + 1000) << 16;
        if disk.write_at(&block(tag), b as u64 * BS as u64).is_err() {
            break;
        }
        model[b] = tag;
        since[b].push(tag);
        writes += 1;
        if writes.is_multiple_of(3) {
            disk.flush().expect("a flush goes to the local write log");
            flushed.clone_from(&model);
            since.iter_mut().for_each(Vec::clear);
        }
        assert!(writes < 1000, "writes never waited");
    }
    // Two segments of the queue and the open one (which may have been
    // full of older writes already).
    assert!(writes >= 16, "{writes} writes before the queue was full");
    drop(disk);

    store.set_down(false);
    let disk =
        ObjectDisk::open_with_log(store, &outage_options("b", None), Some(log)).expect("reopen");
    assert!(disk.report().replayed > 0);
    for (b, &v) in image(&disk).iter().enumerate() {
        assert!(
            v == flushed[b] || since[b].contains(&v),
            "block {b} reads {v:#x}; flushed {:#x}, written since {:?}",
            flushed[b],
            since[b]
        );
    }
    disk.verify().expect("invariants");
}

/// Without a local write log a FLUSH waits for the store: during an
/// outage, up to the stall timeout, then it fails (the disk does not); with
/// no timeout it waits until the store is back, and succeeds.
#[test]
fn a_remote_flush_waits_for_the_store() {
    let store = Arc::new(FaultyStore::new(MemStore::new()));
    let stall = Duration::from_millis(300);
    let disk = ObjectDisk::open(store.clone(), &outage_options("a", Some(stall))).expect("create");
    disk.write_at(&block(1 << 16), 0).expect("write");
    store.set_down(true);
    let start = std::time::Instant::now();
    let err = disk.flush().expect_err("the store is down");
    assert!(start.elapsed() >= stall);
    assert!(err.to_string().contains("object store outage"), "{err}");
    store.set_down(false);
    store_back(&disk);
    disk.flush().expect("the store is back");
    disk.close().expect("close");
    drop(disk);

    let disk = ObjectDisk::open(store.clone(), &outage_options("b", None)).expect("reopen");
    assert_eq!(image(&disk)[0], 1 << 16);
    disk.write_at(&block(2 << 16), BS as u64).expect("write");
    store.set_down(true);
    let up = {
        let store = store.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(500));
            store.set_down(false);
        })
    };
    let start = std::time::Instant::now();
    disk.flush().expect("waits until the store is back");
    assert!(start.elapsed() >= Duration::from_millis(500));
    up.join().expect("join");
    disk.close().expect("close");
}

/// The local write log's ring full of batches whose segment cannot reach
/// the store (one block written again and again, a flush after each): the
/// flush waits up to the stall timeout and fails; the disk does not, and
/// when the store is back the flushes go on.
#[test]
fn a_full_local_log_during_an_outage_makes_flushes_wait() {
    let store = Arc::new(FaultyStore::new(MemStore::new()));
    // Superblock + 31 blocks of ring: 15 flushes of one block fill it.
    let log: Arc<dyn Device> = Arc::new(crate::device::MemoryDevice::new(32 * BS as u64));
    let stall = Duration::from_millis(300);
    let disk = ObjectDisk::open_with_log(
        store.clone(),
        &outage_options("a", Some(stall)),
        Some(log.clone()),
    )
    .expect("create");
    store.set_down(true);
    let mut flushes = 0u64;
    let err = loop {
        disk.write_at(&block((flushes + 1) << 16), 0)
            .expect("one block: the queue has room");
        let start = std::time::Instant::now();
        match disk.flush() {
            Ok(()) => flushes += 1,
            Err(e) => {
                assert!(start.elapsed() >= stall);
                break e;
            }
        }
        assert!(flushes < 100, "the ring never filled");
    };
    assert!(
        err.to_string().contains("the local write log is full"),
        "{err}"
    );
    assert!(disk.shared.state().failed.is_none(), "the disk failed");
    store.set_down(false);
    store_back(&disk);
    disk.flush().expect("the store is back");
    let last = flushes + 2;
    disk.write_at(&block(last << 16), 0).expect("write");
    disk.flush().expect("flush");
    drop(disk);
    let disk =
        ObjectDisk::open_with_log(store, &outage_options("b", None), Some(log)).expect("reopen");
    assert_eq!(image(&disk)[0], last << 16);
}

/// With a local write log and a client that never flushes, writing the
/// same blocks again and again keeps the changes pending for the next
/// flush bounded (one per block), and that flush logs the last data.
#[test]
fn pending_changes_stay_bounded_without_flushes() {
    let store: Arc<MemStore> = Arc::new(MemStore::new());
    let log: Arc<dyn Device> = Arc::new(crate::device::MemoryDevice::new(256 * BS as u64));
    let disk = open_local(store.clone(), log.clone(), "a", false).expect("create");
    let mut most = 0;
    for i in 0..200_000u64 {
        // Three blocks of the open segment, and a trim of a fourth.
        disk.write_at(&block((i + 1) << 16), (i % 3) * BS as u64)
            .expect("write");
        if i % 100 == 0 {
            disk.discard(3 * BS as u64, BS as u64).expect("trim");
        }
        most = most.max(disk.shared.state().pending.len());
    }
    assert!(most <= (1 << 16) + 1, "{most} changes pending");
    disk.flush().expect("flush");
    drop(disk);
    let disk = open_local(store, log, "b", true).expect("reopen");
    // Block i % 3 last got tag i + 1, for i = 199_997 ..= 199_999.
    assert_eq!(
        &image(&disk)[..3],
        &[199_999 << 16, 200_000 << 16, 199_998 << 16]
    );
}

/// A clean stop while the store is down gives up on it after the stall
/// timeout, but first puts what clients wrote since their last flush in
/// the local write log: the next open writes it again.
#[test]
fn a_stop_during_an_outage_keeps_unflushed_writes_in_the_local_log() {
    let store = Arc::new(FaultyStore::new(MemStore::new()));
    let log: Arc<dyn Device> = Arc::new(crate::device::MemoryDevice::new(256 * BS as u64));
    let disk = ObjectDisk::open_with_log(
        store.clone(),
        &outage_options("a", Some(Duration::from_millis(200))),
        Some(log.clone()),
    )
    .expect("create");
    store.set_down(true);
    disk.write_at(&block(5 << 16), 5 * BS as u64)
        .expect("write");
    let err = disk.close().expect_err("the store is down");
    assert!(err.to_string().contains("object store outage"), "{err}");
    drop(disk);
    store.set_down(false);
    let disk =
        ObjectDisk::open_with_log(store, &outage_options("b", None), Some(log)).expect("reopen");
    assert_eq!(disk.report().replayed, 1);
    assert_eq!(image(&disk)[5], 5 << 16);
}

/// The cleaner: what it moves, and what it must not.
#[path = "tests_clean.rs"]
mod clean;

/// Crash points with completions out of order.
#[path = "tests_reorder.rs"]
mod reorder;

/// A sparse 1 TiB volume: the map's and the checkpoint's cost per block.
#[path = "tests_scale.rs"]
mod scale;

/// Checkpoints while a segment is always open.
#[path = "tests_checkpoint.rs"]
mod checkpoint;

/// Read-only opens (`readonly.rs`) and the reader pins that keep a writer
/// from deleting what they read (`pins.rs`).
#[path = "tests_readonly.rs"]
mod readonly;

/// Fencing under load: a takeover while the holder writes and flushes.
#[path = "tests_fencing.rs"]
mod fencing;
