//! Fencing under load: a forced takeover while the holder's threads write
//! and flush.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cairn_objects::MemStore;

use super::{BLOCKS, BS, assert_no_leak, block, image, options};
use crate::device::Device;
use crate::objdisk::ObjectDisk;

const THREADS: u64 = 4;
/// Blocks each thread owns.
const REGION: u64 = BLOCKS / THREADS;

/// The tag of thread `t`'s `n`-th write: the thread in the high bits,
/// increasing per thread.
fn tag(t: u64, n: u64) -> u64 {
    ((t + 1) << 40) | n
}

/// What a writer thread ends with: per block of its region the last tag
/// written and the last acknowledged; flushes acknowledged; fenced.
type Outcome = (Vec<(u64, u64)>, u64, bool);

/// One writer thread of the holder: writes its region's blocks in turn
/// (tags increasing), a flush every few writes. Returns, per block of its
/// region, the last tag written and the last one a flush acknowledged;
/// and how many flushes succeeded, and whether it was fenced (its last
/// write or flush failed naming the takeover).
fn writer(disk: &ObjectDisk, t: u64, stop: &AtomicBool) -> Outcome {
    let mut tags = vec![(0u64, 0u64); REGION as usize];
    let mut flushed = 0;
    let mut n = 0u64;
    let fenced = |e: &dyn std::fmt::Display| {
        assert!(
            e.to_string().contains("another server took it over"),
            "thread {t}: an error other than the fence: {e}"
        );
        true
    };
    while !stop.load(Ordering::Relaxed) {
        for _ in 0..3 {
            n += 1;
            let i = n % REGION;
            let b = t * REGION + i;
            if let Err(e) = disk.write_at(&block(tag(t, n)), b * BS as u64) {
                return (tags, flushed, fenced(&e));
            }
            tags[i as usize].0 = tag(t, n);
        }
        // What this thread wrote before the flush began is acknowledged
        // when it returns Ok.
        let written: Vec<u64> = tags.iter().map(|&(w, _)| w).collect();
        match disk.flush() {
            Ok(()) => {
                flushed += 1;
                for (slot, w) in tags.iter_mut().zip(written) {
                    slot.1 = w;
                }
            }
            Err(e) => return (tags, flushed, fenced(&e)),
        }
    }
    (tags, flushed, false)
}

/// Four threads write and flush (no local write log: a FLUSH waits for
/// the store) while another server takes the volume over by force. Every
/// flush the holder acknowledged, even one racing the takeover, is in
/// what the new holder sees (a flush checks the lease after its uploads:
/// acknowledged means it read the lease before the taker wrote it, so the
/// taker's listing finds those objects); each block holds one of its
/// owner's writes, no older than the last acknowledged one; every thread
/// of the old holder is fenced; nothing it does after the takeover shows,
/// across the new holder's close and another open; and no object is left
/// that the last checkpoint does not need. Mutation: with the lease check
/// in `flush_remote` gone, the holder's threads are never fenced and its
/// flushes after the takeover are acknowledged, lost to the new holder.
#[test]
fn a_takeover_under_load_fences_every_writer_and_keeps_every_acknowledged_write() {
    let store: Arc<MemStore> = Arc::new(MemStore::new());
    let mut o = options("server-a", false);
    o.uploaders = 4;
    // No checkpoint (a checkpoint finds the takeover too): the flush's own
    // look at the lease is what fences.
    o.checkpoint_every = u64::MAX / 2;
    let a = ObjectDisk::open(store.clone(), &o).expect("create");
    let stop = AtomicBool::new(false);
    let flushes_before = AtomicU64::new(0);
    let taken: Mutex<Option<(ObjectDisk, Vec<u64>)>> = Mutex::new(None);
    let results: Vec<Outcome> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let (a, stop) = (&a, &stop);
                s.spawn(move || writer(a, t, stop))
            })
            .collect();
        // Under load: the holder has flushed some, and goes on.
        std::thread::sleep(Duration::from_millis(150));
        flushes_before.store(a.counts().0.puts, Ordering::Relaxed);
        let b = ObjectDisk::open(store.clone(), &options("server-b", true)).expect("takeover");
        let seen = image(&b);
        *taken.lock().expect("lock") = Some((b, seen));
        // The old holder's threads run on until each is fenced (or 5 s).
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while handles.iter().any(|h| !h.is_finished()) && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        stop.store(true, Ordering::Relaxed);
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    });
    assert!(
        flushes_before.load(Ordering::Relaxed) > 8,
        "the holder was under load before the takeover ({} PUTs)",
        flushes_before.load(Ordering::Relaxed)
    );
    eprintln!(
        "{} PUTs before the takeover; flushes acknowledged per thread: {:?}",
        flushes_before.load(Ordering::Relaxed),
        results.iter().map(|r| r.1).collect::<Vec<_>>()
    );
    let (b, seen) = taken.into_inner().expect("lock").expect("taken over");
    for (t, (tags, flushed, _)) in results.iter().enumerate() {
        assert!(*flushed > 0, "thread {t} never flushed");
        for (i, &(written, acked)) in tags.iter().enumerate() {
            let b = t * REGION as usize + i;
            let got = seen[b];
            assert!(
                got >= acked && got <= written && (got == 0 || got >> 40 == t as u64 + 1),
                "block {b}: the new holder sees tag {got:#x}; its owner acknowledged \
                 {acked:#x} and wrote {written:#x} last"
            );
        }
    }
    for (t, (_, _, fenced)) in results.iter().enumerate() {
        assert!(*fenced, "thread {t} was never fenced");
    }
    // Nothing the old holder did after the takeover shows: the new
    // holder's view is unchanged, and so is the next open's (plus the new
    // holder's own write).
    assert_eq!(image(&b), seen, "the new holder's view changed");
    b.write_at(&block(7 << 50), 0)
        .expect("the new holder writes");
    b.close().expect("close");
    drop(b);
    drop(a);
    let c = ObjectDisk::open(store.clone(), &options("server-c", false)).expect("reopen");
    let mut want = seen;
    want[0] = 7 << 50;
    assert_eq!(image(&c), want);
    c.close().expect("close");
    assert_no_leak(store.as_ref());
}
