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
        checkpoint_every: 3,
        holder: holder.into(),
        force_takeover: force,
        takeover_grace: Duration::ZERO,
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
    Write { block: u64, blocks: u64, tag: u64 },
    Trim { block: u64, blocks: u64 },
    Flush,
}

fn workload(seed: u64, steps: usize) -> Vec<Step> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut next_tag = 1;
    (0..steps)
        .map(|_| match rng.random_range(0..20) {
            0..=2 => Step::Flush,
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
        Step::Flush => {}
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
        };
        if done.is_err() {
            break;
        }
        // A write of several blocks may survive a crash in part (a
        // segment can end between its blocks), as on any disk: an image
        // after each block.
        let (first, blocks) = match step {
            Step::Write { block, blocks, .. } | Step::Trim { block, blocks } => (block, blocks),
            Step::Flush => (0, 0),
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
