//! The object disk's scenario on a real store, shared by the S3 and RADOS
//! tests: writes across many segment objects read back, after a clean stop
//! and after the writer vanished without one; the store holds no more than
//! the checkpoint needs.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn_objects::ObjectStore;
use cairn_store::Device;
use cairn_store::objdisk::{ObjectDisk, ObjectDiskOptions};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const BS: usize = 4096;

fn options(prefix: &str, holder: &str, force: bool) -> ObjectDiskOptions {
    ObjectDiskOptions {
        prefix: prefix.into(),
        size: 64 << 20,
        block_size: BS as u32,
        object_size: 1 << 20,
        uploaders: 4,
        checkpoint_every: 8,
        holder: holder.into(),
        force_takeover: force,
        read_cache: 4 << 20,
        heartbeat: Duration::from_secs(30),
        takeover_grace: Duration::ZERO,
        ..ObjectDiskOptions::default()
    }
}

/// The scenario on `store` (the test `name` in messages), under a prefix of
/// its own, removed at the end.
pub fn survives_a_clean_stop_and_a_vanished_writer(store: &Arc<dyn ObjectStore>, name: &str) {
    let store = Arc::clone(store);
    let prefix = cairn_objects::testing::unique_prefix("objdisk-test");

    // 16 MiB of random 64 KiB writes over a 64 MiB volume, a flush every 32.
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let mut model = vec![0u8; 64 << 20];
    let disk =
        ObjectDisk::open(Arc::clone(&store), &options(&prefix, "writer-1", false)).expect("create");
    let start = Instant::now();
    for i in 0..256 {
        let at = rng.random_range(0..(64 << 20) / 65536) * 65536;
        let mut data = vec![0u8; 65536];
        rng.fill(&mut data[..]);
        disk.write_at(&data, at as u64).expect("write");
        model[at..at + 65536].copy_from_slice(&data);
        if i % 32 == 31 {
            disk.flush().expect("flush");
        }
    }
    disk.flush().expect("flush");
    let wrote = start.elapsed();
    let mut back = vec![0u8; 64 << 20];
    let start = Instant::now();
    disk.read_at(&mut back, 0).expect("read");
    eprintln!(
        "{name}: 16 MiB written and flushed in {wrote:?}, 64 MiB read in {:?}",
        start.elapsed()
    );
    assert!(back == model, "reads before the stop");
    disk.close().expect("close");
    drop(disk);

    // Reopen after the clean stop; write more and vanish without a close.
    let disk =
        ObjectDisk::open(Arc::clone(&store), &options(&prefix, "writer-2", false)).expect("reopen");
    assert_eq!(disk.report().rolled, 0);
    disk.read_at(&mut back, 0).expect("read");
    assert!(back == model, "reads after a clean stop");
    let data = vec![0x5a; 3 * BS];
    disk.write_at(&data, 40 * BS as u64).expect("write");
    model[40 * BS..43 * BS].copy_from_slice(&data);
    disk.flush().expect("flush");
    drop(disk);

    // The next writer must force, and finds everything flushed.
    let err = ObjectDisk::open(Arc::clone(&store), &options(&prefix, "writer-3", false))
        .expect_err("held by writer-2");
    assert!(err.to_string().contains("held by writer-2"), "{err}");
    let disk = ObjectDisk::open(Arc::clone(&store), &options(&prefix, "writer-3", true))
        .expect("takeover");
    assert!(disk.report().rolled >= 1);
    disk.read_at(&mut back, 0).expect("read");
    assert!(back == model, "reads after a vanished writer");
    disk.close().expect("close");
    drop(disk);

    // Nothing beyond one checkpoint's worth of segments stays in the bucket.
    let segs = store.list(&format!("{prefix}seg/")).expect("list").len();
    let ckpts = store.list(&format!("{prefix}ckpt/")).expect("list").len();
    assert_eq!(ckpts, 1);
    assert!(
        segs <= 64,
        "{segs} segment objects for 64 MiB of 1 MiB segments"
    );
    cairn_objects::testing::remove_all(store.as_ref(), &prefix).expect("cleanup");
}
