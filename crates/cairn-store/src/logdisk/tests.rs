//! Unit tests of the log disk's rooms that need its internals.

use std::sync::Arc;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::cleaner::reads::Batch;
use super::format::Geometry;
use super::table::{Seg, segment_of};
use super::writer::{Job, Writer};
use super::*;
use crate::device::MemoryDevice;
use crate::device::{Device, DeviceError, IoBuf};
use crate::limits::CLEANER_BACKGROUND_LAG as BACKGROUND_LAG;

const B: usize = 512;

/// A memory device that logs writes and flushes in the order they
/// complete, and holds writes at offset 0 while `hold` is set.
struct Recorder {
    inner: MemoryDevice,
    hold: std::sync::atomic::AtomicBool,
    log: std::sync::Mutex<Vec<String>>,
}

impl Device for Recorder {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<(), DeviceError> {
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> Result<(), DeviceError> {
        while offset == 0 && self.hold.load(std::sync::atomic::Ordering::Acquire) {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        self.inner.write_at(buf, offset)?;
        self.log.lock().unwrap().push(format!("write {offset}"));
        Ok(())
    }
    fn flush(&self) -> Result<(), DeviceError> {
        self.log.lock().unwrap().push("flush".into());
        self.inner.flush()
    }
    fn discard(&self, offset: u64, len: u64) -> Result<(), DeviceError> {
        self.inner.discard(offset, len)
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn describe(&self) -> String {
        "recorder".into()
    }
}

/// A flush queued behind a write still running does not take a writer
/// thread out of service: the write after it runs meanwhile, and the
/// flush is issued once the write before it is done, by the thread
/// that did it. Reports still come back in the order queued.
#[test]
fn a_flush_behind_a_running_write_is_issued_when_it_is_done_without_holding_a_thread() {
    let dev = Arc::new(Recorder {
        inner: MemoryDevice::new(4 * B as u64),
        hold: std::sync::atomic::AtomicBool::new(true),
        log: std::sync::Mutex::new(Vec::new()),
    });
    let writer = Writer::start(&dev, None, B, 2).unwrap();
    let write = |offset: u64| Job::Write {
        buf: IoBuf::zeroed(B),
        from: 0,
        to: B,
        offset,
        fill: Vec::new(),
        after_earlier: false,
    };
    for job in [write(0), Job::Flush, write(B as u64)] {
        writer.jobs.send(job).unwrap();
    }
    // The third job completes while the first is held (with the flush
    // holding a thread, neither thread would be free to take it).
    let start = std::time::Instant::now();
    while dev.log.lock().unwrap().is_empty() {
        assert!(
            start.elapsed().as_secs() < 10,
            "the write after the flush never ran"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    assert_eq!(*dev.log.lock().unwrap(), ["write 512"]);
    dev.hold.store(false, std::sync::atomic::Ordering::Release);
    let reports = writer.done.lock().unwrap();
    let mut order: Vec<u64> = (0..3).map(|_| reports.rx.recv().unwrap().0).collect();
    drop(reports);
    order.sort_unstable();
    assert_eq!(order, [0, 1, 2]);
    assert_eq!(*dev.log.lock().unwrap(), ["write 512", "write 0", "flush"]);
    drop(writer.jobs);
    for handle in writer.handles {
        handle.join().unwrap();
    }
}

fn geo() -> Geometry {
    Geometry {
        block_size: B as u32,
        segment_blocks: 8,
        segments: 12,
        logical_blocks: 40,
    }
}

fn disk(options: Options) -> (Arc<MemoryDevice>, LogDisk<Arc<MemoryDevice>>) {
    let g = geo();
    let dev = Arc::new(MemoryDevice::new(g.image_blocks() * B as u64));
    let disk = LogDisk::format(dev.clone(), g, None, options).expect("format");
    (dev, disk)
}

/// Runs `(slot, len)` the cleaner plans for `v`.
fn plan(disk: &LogDisk<Arc<MemoryDevice>>, v: u32) -> Vec<(u32, u32)> {
    let mut batch = Batch::default();
    super::cleaner::plan::plan_reads(
        &disk.options,
        &disk.read_state().core.table,
        &disk.geo,
        v,
        &mut batch,
    );
    assert_eq!(batch.victims, vec![(v, 0, batch.runs.len())]);
    batch.runs.iter().map(|r| (r.slot, r.len)).collect()
}

#[test]
fn live_only_reads_cover_the_live_blocks_bridging_at_most_the_gap() {
    let (_, mut disk) = disk(Options::default());
    // One full segment write: summary at slot 0, logical 0..7 at slots 1..7.
    disk.write_blocks(0, &[7u8; 7 * B]).expect("write");
    let v = segment_of(&disk.geo, disk.read_state().core.table.map[0].physical);
    // Overwrite logical 1, 2 and 4: slots 2, 3 and 5 die; 1, 4, 6, 7 live.
    for l in [1, 2, 4] {
        disk.write_blocks(l, &[9u8; B]).expect("write");
    }
    disk.flush().expect("flush");
    assert_eq!(disk.read_state().core.table.live[v as usize], 4);
    let mut with = |below: f64, gap: u32| {
        disk.options.live_read_below = below;
        disk.options.live_read_gap = gap;
        plan(&disk, v)
    };
    assert_eq!(with(1.0, 0), vec![(1, 1), (4, 1), (6, 2)]);
    assert_eq!(with(1.0, 1), vec![(1, 1), (4, 4)]);
    assert_eq!(with(1.0, 2), vec![(1, 7)]);
    // Dense (4 of 7 live is not below half): one read, first live to last.
    assert_eq!(with(0.5, 0), vec![(1, 7)]);
    assert_eq!(with(0.0, 0), vec![(1, 7)]);
}

/// The background cleaner collects a pass some user writes after it
/// issued the pass's reads: a block overwritten in between must not be
/// copied (its copy would replace the newer write in the table), and
/// every other block of the victims moves intact.
#[test]
fn a_block_overwritten_while_its_background_read_is_outstanding_keeps_the_new_data() {
    let (_, disk) = disk(Options {
        live_read_below: 1.0,
        live_read_gap: 0,
        background_clean: true,
        ..Options::default()
    });
    let version = |l: u64, v: u8| [v ^ l as u8; B];
    for l in 0..40u64 {
        disk.write_blocks(l, &version(l, 1)).expect("write");
    }
    // Overwrite every other block: the first segments become sparse.
    for l in (0..40u64).step_by(2) {
        disk.write_blocks(l, &version(l, 2)).expect("write");
    }
    disk.flush().expect("flush");
    let (victims, target) = {
        let mut st = disk.write_state();
        disk.finish_pass(&mut st).expect("an earlier pass");
        {
            let super::disk::State {
                core, log, cleaner, ..
            } = &mut *st;
            cleaner.start_pass(core, log, &disk.dev, &disk.geo, &disk.options)
        }
        .expect("start a pass");
        assert!(
            st.cleaner.pass.active,
            "no victims: {:?}",
            st.core.table.live
        );
        let victims: Vec<u32> = st.cleaner.pass.batch.victims.iter().map(|v| v.0).collect();
        let target = (0..40u64)
            .find(|&l| {
                victims.contains(&segment_of(
                    &disk.geo,
                    st.core.table.map[l as usize].physical,
                ))
            })
            .expect("a live block in a victim");
        (victims, target)
    };
    // The overwrite reaches the table (a segment write) while the pass's
    // reads are outstanding and before the pass is collected.
    disk.write_blocks(target, &version(target, 3))
        .expect("write");
    disk.flush().expect("flush");
    {
        let mut st = disk.write_state();
        assert!(st.cleaner.pass.active && st.cleaner.pass.steps < BACKGROUND_LAG);
        disk.finish_pass(&mut st).expect("finish the pass");
        for &v in &victims {
            assert_eq!(st.core.table.live[v as usize], 0, "victim {v} emptied");
            assert_eq!(st.core.table.seg[v as usize], Seg::Pending, "victim {v}");
        }
    }
    let mut buf = [0u8; B];
    for l in 0..40u64 {
        disk.read_block(l, &mut buf).expect("read");
        let want = if l == target {
            3
        } else if l % 2 == 0 {
            2
        } else {
            1
        };
        assert_eq!(buf, version(l, want), "block {l} (overwritten: {target})");
    }
    assert_eq!(disk.metrics().cleaner_background_passes, 1);
}

/// The background passes' read buffers are reused: however many passes
/// run, the pools hold no more buffers than one pass reads with (at most
/// one run per live block of a segment write), so a workload allocates
/// no read buffers once they are warm.
#[test]
fn background_read_buffers_are_reused_not_piled_up() {
    let (_, disk) = disk(Options {
        live_read_below: 1.0,
        live_read_gap: 0,
        ..Options::default()
    });
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    for i in 0..4000u32 {
        let l = rng.random_range(0..40u64);
        disk.write_blocks(l, &[i as u8; B]).expect("write");
    }
    let st = disk.read_state();
    assert!(
        st.core.metrics.cleaner_background_passes > 100,
        "{:?}",
        st.core.metrics
    );
    let per_write = disk.geo.segment_blocks as usize - 1;
    assert!(
        st.cleaner.small_reads.len() + st.cleaner.large_reads.len() <= per_write,
        "{} small and {} large read buffers after {} passes",
        st.cleaner.small_reads.len(),
        st.cleaner.large_reads.len(),
        st.core.metrics.cleaner_background_passes
    );
}

/// A flipped byte in a live block of a sparse victim: the cleaner's
/// live-only read finds it against the table's CRC and refuses to copy
/// it; the block is never served.
#[test]
fn a_corrupt_block_in_a_sparse_victim_is_reported_not_copied() {
    let (dev, disk) = disk(Options {
        live_read_below: 1.0,
        live_read_gap: 0,
        ..Options::default()
    });
    for l in 0..40u64 {
        disk.write_blocks(l, &[l as u8 + 1; B]).expect("write");
    }
    disk.flush().expect("flush");
    let physical = disk.read_state().core.table.map[5].physical;
    let mut x = [0u8];
    dev.read_at(&mut x, physical * B as u64 + 100)
        .expect("read");
    dev.write_at(&[x[0] ^ 0x40], physical * B as u64 + 100)
        .expect("write");
    // Rewrite the other blocks at random until the cleaner takes block
    // 5's segment (soon the sparsest).
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let mut failed = None;
    for i in 0..5000u32 {
        let l = rng.random_range(0..39u64);
        let l = if l >= 5 { l + 1 } else { l };
        if let Err(e) = disk.write_blocks(l, &[i as u8; B]) {
            failed = Some(e);
            break;
        }
    }
    let e = failed.unwrap_or_else(|| {
        panic!(
            "the cleaner never took the corrupt block's segment: {:?} {:?}",
            disk.metrics(),
            disk.read_state().core.table.live
        )
    });
    let text = e.to_string();
    assert!(
        matches!(e, LogDiskError::Corrupt(_))
            && text.contains("logical block 5")
            && text.contains("checksum"),
        "{text}"
    );
    assert!(disk.metrics().cleaner_read_ios > 0);
    let mut buf = [0u8; B];
    assert!(disk.read_block(5, &mut buf).is_err(), "corrupt data served");
}

/// Block `l`'s content at version `v`.
fn version(l: u64, v: u8) -> [u8; B] {
    [v ^ l as u8; B]
}

/// A change to a table, made on purpose.
type Mutation<'a> = &'a dyn Fn(&mut super::table::Table);

/// Each of the table's numbered invariants (`table.rs`), broken on purpose
/// in a live disk's tables, is caught by `Table::verify` under its own
/// number; restored, the tables verify again.
#[test]
fn table_verify_names_each_broken_invariant() {
    let (_, disk) = disk(Options {
        background_destage: false,
        ..Options::default()
    });
    for l in 0..30u64 {
        disk.write_blocks(l, &version(l, 1)).expect("write");
    }
    disk.flush().expect("flush");
    disk.trim_blocks(0, 1).expect("trim");
    disk.verify().expect("a healthy disk verifies");
    let mut st = disk.write_state();
    let head = st.log.head;
    let t = &mut st.core.table;
    let start = disk.geo.segment_start(0);
    let e = t.map[5];
    let s = segment_of(&disk.geo, e.physical) as usize;
    let closed = (0..t.seg.len())
        .find(|&c| t.seg[c] == Seg::Closed)
        .expect("a closed segment");
    let mutations: [(u32, Mutation); 9] = [
        (1, &|t| t.map[5].physical = start),
        (2, &|t| t.rev[(e.physical - start) as usize] = 6),
        (3, &|t| t.live[s] += 1),
        (4, &|t| t.last_seq[s] = 0),
        (5, &|t| t.seg[closed] = Seg::Pending),
        (6, &|t| t.free.push(t.free[0])),
        (7, &|t| t.seg[closed] = Seg::Open),
        (8, &|t| t.any_tainted = !t.any_tainted),
        (9, &|t| {
            t.opened_after[t.free[0] as usize] = t.checkpoint_durable;
        }),
    ];
    for (number, mutate) in mutations {
        let (map, rev, live, last_seq, seg, free, tainted, opened_after) = (
            t.map.clone(),
            t.rev.clone(),
            t.live.clone(),
            t.last_seq.clone(),
            t.seg.clone(),
            t.free.clone(),
            t.any_tainted,
            t.opened_after.clone(),
        );
        mutate(t);
        let broken = t.verify(head).expect_err("a broken table");
        assert!(
            broken.starts_with(&format!("invariant {number}:")),
            "breaking invariant {number} was reported as: {broken}"
        );
        (
            t.map,
            t.rev,
            t.live,
            t.last_seq,
            t.seg,
            t.free,
            t.any_tainted,
            t.opened_after,
        ) = (map, rev, live, last_seq, seg, free, tainted, opened_after);
        t.verify(head).expect("restored");
    }
}

/// The tables keep every invariant through random overwrites, trims,
/// flushes, cleaning (foreground and background) and reopens, in both
/// modes: `verify` after every operation.
#[test]
fn the_tables_hold_their_invariants_through_writes_trims_cleaning_and_reopen() {
    for nv in [false, true] {
        let mut rng = ChaCha8Rng::seed_from_u64(u64::from(nv) + 11);
        let g = geo();
        let dev = Arc::new(MemoryDevice::new(g.image_blocks() * B as u64));
        let region =
            || -> Box<dyn crate::ntl::Region> { Box::new(crate::ntl::SimRegion::new(64 * 1024)) };
        let options = Options::default();
        let mut disk =
            LogDisk::format(Arc::clone(&dev), g, nv.then(region), options).expect("format");
        for round in 0..6 {
            for _ in 0..300 {
                let l = rng.random_range(0..g.logical_blocks);
                match rng.random_range(0..20) {
                    0 => disk.trim_blocks(l, rng.random_range(1..4).min(g.logical_blocks - l)),
                    1 => disk.flush(),
                    _ => disk.write_blocks(l, &version(l, round as u8)),
                }
                .expect("operation");
                if let Err(broken) = disk.verify() {
                    panic!("nv {nv}, round {round}: {broken}");
                }
            }
            disk.close().expect("close");
            drop(disk);
            disk = if nv {
                // A closed disk's NV cache holds nothing: a fresh region.
                LogDisk::open_with_new_nv_cache(Arc::clone(&dev), region(), options)
            } else {
                LogDisk::open(Arc::clone(&dev), None, options)
            }
            .expect("reopen");
            disk.verify().expect("after reopen");
        }
        assert!(disk.metrics().cleaner_segment_writes > 0, "the cleaner ran");
    }
}
