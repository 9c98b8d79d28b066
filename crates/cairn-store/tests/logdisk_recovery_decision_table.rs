//! The log disk's recovery decision table (`logdisk/recover.rs`), one test
//! per row that is not already proven elsewhere: which checkpoint recovery
//! starts from, what it replays, and when it refuses. The crash-point tests
//! prove rows 4, 5 and 7 at every crash point; these pin each decision on
//! its own, with the outcome a user sees (`recovered()`, the data, the
//! error).

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use cairn_store::logdisk::{Geometry, LogDisk, LogDiskError, Options, Recovered};
use cairn_store::{CrashMode, Device, FaultyDevice, MemoryDevice};

const B: usize = 512;

fn geo() -> Geometry {
    Geometry {
        block_size: B as u32,
        segment_blocks: 8,
        segments: 12,
        logical_blocks: 40,
    }
}

fn volatile() -> Options {
    Options {
        background_destage: false,
        background_clean: false,
        ..Options::default()
    }
}

fn block(logical: u64, version: u8) -> Vec<u8> {
    let mut v = vec![version; B];
    v[..8].copy_from_slice(&logical.to_le_bytes());
    v
}

fn formatted() -> Arc<MemoryDevice> {
    let g = geo();
    let dev = Arc::new(MemoryDevice::new(g.image_blocks() * B as u64));
    LogDisk::format(Arc::clone(&dev), g, None, volatile())
        .unwrap()
        .close()
        .unwrap();
    dev
}

/// Byte offset of checkpoint slot A (`false`) or B (`true`).
fn slot(b_slot: bool) -> u64 {
    slot_of(&geo(), b_slot)
}

/// [`slot`] in geometry `g`.
fn slot_of(g: &Geometry, b_slot: bool) -> u64 {
    B as u64 * if b_slot { 1 + g.checkpoint_blocks() } else { 1 }
}

/// Inverts the byte at `at` (a checkpoint slot's decay).
fn flip(dev: &dyn Device, at: u64) {
    let mut byte = [0u8; 1];
    dev.read_at(&mut byte, at).unwrap();
    dev.write_at(&[byte[0] ^ 0xff], at).unwrap();
}

/// Row 2: with neither checkpoint slot valid, the open fails and names both
/// reasons; nothing is guessed.
#[test]
fn no_valid_checkpoint_is_an_error() {
    let dev = formatted();
    let zero = vec![0u8; (geo().checkpoint_blocks() as usize) * B];
    dev.write_at(&zero, slot(false)).unwrap();
    dev.write_at(&zero, slot(true)).unwrap();
    match LogDisk::open(Arc::clone(&dev), None, volatile()) {
        Err(LogDiskError::NoCheckpoint { a, b }) => {
            assert!(
                !a.is_empty() && !b.is_empty(),
                "both reasons: {a:?} / {b:?}"
            );
        }
        other => panic!("expected NoCheckpoint, got {:?}", other.map(|_| ())),
    }
}

/// Row 3: the newer valid checkpoint wins; a torn (corrupt) newer one is
/// skipped for the older, and the segment writes between the two are
/// rolled forward from the older, so nothing written is lost.
#[test]
fn the_newer_checkpoint_wins_and_a_torn_one_is_skipped() {
    let dev = formatted();
    let disk = LogDisk::open(Arc::clone(&dev), None, volatile()).unwrap();
    disk.write_blocks(3, &block(3, 1)).unwrap();
    disk.close().unwrap();
    drop(disk);
    // Each open and each close writes a checkpoint, alternating slots: find
    // the newer by opening once more and closing after a write.
    let disk = LogDisk::open(Arc::clone(&dev), None, volatile()).unwrap();
    assert_eq!(
        disk.recovered(),
        Recovered::default(),
        "a clean close replays nothing"
    );
    disk.write_blocks(4, &block(4, 2)).unwrap();
    disk.flush().unwrap();
    disk.close().unwrap();
    drop(disk);
    let newer = {
        // The slot the newest checkpoint is in: corrupting it changes what
        // the open finds, corrupting the older does not.
        let probe = |b_slot: bool| {
            let copy = Arc::new(MemoryDevice::new(dev.len()));
            let mut all = vec![0u8; dev.len() as usize];
            dev.read_at(&mut all, 0).unwrap();
            copy.write_at(&all, 0).unwrap();
            flip(&*copy, slot(b_slot) + 100);
            let disk = LogDisk::open(Arc::clone(&copy), None, volatile()).unwrap();
            let mut buf = vec![0u8; B];
            disk.read_block(4, &mut buf).unwrap();
            assert_eq!(buf, block(4, 2), "block 4 survives a torn checkpoint slot");
            disk.read_block(3, &mut buf).unwrap();
            assert_eq!(buf, block(3, 1), "block 3 survives a torn checkpoint slot");
            disk.recovered().segment_writes
        };
        let (a, b) = (probe(false), probe(true));
        // Exactly one of the two opens fell back to the older checkpoint and
        // rolled forward the segment write of block 4 after it.
        assert!(
            (a == 0) != (b == 0),
            "rolled forward: slot A torn {a}, slot B torn {b}"
        );
        a.max(b)
    };
    assert!(
        newer >= 1,
        "the write after the older checkpoint is rolled forward"
    );
}

/// Row 6: summaries not newer than the checkpoint are skipped: after a
/// clean close nothing is replayed, and the data is the checkpoint's.
#[test]
fn a_clean_close_replays_nothing() {
    let dev = formatted();
    let disk = LogDisk::open(Arc::clone(&dev), None, volatile()).unwrap();
    for l in 0..20 {
        disk.write_blocks(l, &block(l, 7)).unwrap();
    }
    disk.close().unwrap();
    drop(disk);
    let disk = LogDisk::open(Arc::clone(&dev), None, volatile()).unwrap();
    assert_eq!(disk.recovered(), Recovered::default());
    let mut buf = vec![0u8; B];
    for l in 0..20 {
        disk.read_block(l, &mut buf).unwrap();
        assert_eq!(buf, block(l, 7), "block {l}");
    }
    disk.verify().unwrap();
}

/// Row 6, closed: a clean close marks its checkpoint, and the next open
/// reads no segment; a crash's open reads the head segment and the chain
/// from the checkpoint (row 7). A write after the close
/// is still taken, and a checkpoint without the mark goes before it, so a
/// crash after it rolls it forward (a recovery that trusted the closing
/// checkpoint would lose it).
#[test]
fn a_closing_checkpoint_spares_every_segment_read_and_a_later_write_still_survives() {
    let g = geo();
    let dev = Arc::new(FaultyDevice::new(g.image_blocks() * B as u64, 7));
    let disk = LogDisk::format(Arc::clone(&dev), g, None, volatile()).unwrap();
    assert_eq!(disk.recovered().segments_read, 1, "a format walks its head");
    disk.write_blocks(2, &block(2, 1)).unwrap();
    disk.close().unwrap();
    // Taken after the close, flushed, then the power goes.
    disk.write_blocks(3, &block(3, 2)).unwrap();
    disk.flush().unwrap();
    drop(disk);
    dev.crash_now(CrashMode::DropUnflushed);
    let check = |disk: &LogDisk<Arc<FaultyDevice>>| {
        let mut buf = vec![0u8; B];
        for (l, version) in [(2, 1), (3, 2)] {
            disk.read_block(l, &mut buf).unwrap();
            assert_eq!(buf, block(l, version), "block {l}");
        }
        disk.verify().unwrap();
    };
    let disk = LogDisk::open(Arc::clone(&dev), None, volatile()).unwrap();
    check(&disk);
    let crashed = disk.recovered();
    // The write after the close continued the head segment; the chain
    // ends at the segment named next, never opened.
    assert_eq!(
        crashed.segments_read, 2,
        "a crash's open reads the head segment and the chain's end"
    );
    assert!(crashed.segment_writes >= 1, "{crashed:?}");
    disk.close().unwrap();
    drop(disk);
    dev.crash_now(CrashMode::DropUnflushed);
    let disk = LogDisk::open(Arc::clone(&dev), None, volatile()).unwrap();
    assert_eq!(
        disk.recovered(),
        Recovered::default(),
        "nothing read, nothing replayed"
    );
    check(&disk);
    let report = cairn_store::logdisk::check::examine(&*dev).unwrap();
    assert!(!report.closed, "the open checkpointed without the mark");
    drop(disk);
    let report = cairn_store::logdisk::check::examine(&*dev).unwrap();
    assert!(report.is_clean(), "{:?}", report.problems);
}

/// Row 3 with a closing checkpoint: when the newer slot is unreadable, the
/// older one may be a close's, with writes after it: its mark is not
/// trusted and every segment is read, so the writes come back.
#[test]
fn a_closed_mark_is_not_trusted_when_the_other_slot_is_unreadable() {
    let dev = formatted();
    let disk = LogDisk::open(Arc::clone(&dev), None, volatile()).unwrap();
    disk.write_blocks(2, &block(2, 1)).unwrap();
    disk.close().unwrap();
    disk.write_blocks(3, &block(3, 2)).unwrap();
    disk.flush().unwrap();
    drop(disk);
    // The newest checkpoint is the one the write after the close wrote
    // (unmarked); the close's is in the other slot. Decay the newest.
    let newest = {
        let number = |b_slot: bool| {
            let mut buf = [0u8; 8];
            dev.read_at(&mut buf, slot(b_slot) + 16).unwrap();
            u64::from_le_bytes(buf)
        };
        number(true) > number(false)
    };
    flip(&*dev, slot(newest) + 100);
    let disk = LogDisk::open(Arc::clone(&dev), None, volatile()).unwrap();
    let mut buf = vec![0u8; B];
    disk.read_block(3, &mut buf).unwrap();
    assert_eq!(buf, block(3, 2), "the write after the close");
    disk.read_block(2, &mut buf).unwrap();
    assert_eq!(buf, block(2, 1));
    assert_eq!(disk.recovered().segments_read, geo().segments);
}

/// A log of 300 segments, 400 blocks written and flushed after a
/// checkpoint, then a crash (dropped without a close).
fn many_segments_crashed(options: Options) -> (Arc<MemoryDevice>, Geometry) {
    let g = Geometry {
        block_size: B as u32,
        segment_blocks: 8,
        segments: 300,
        logical_blocks: 1000,
    };
    let dev = Arc::new(MemoryDevice::new(g.image_blocks() * B as u64));
    let disk = LogDisk::format(Arc::clone(&dev), g, None, options).unwrap();
    for l in 0..400 {
        disk.write_blocks(l, &block(l, 5)).unwrap();
    }
    disk.flush().unwrap();
    drop(disk);
    (dev, g)
}

/// Every block `many_segments_crashed` wrote reads back.
fn many_segments_read_back(disk: &LogDisk<Arc<MemoryDevice>>) {
    let mut buf = vec![0u8; B];
    for l in 0..400 {
        disk.read_block(l, &mut buf).unwrap();
        assert_eq!(buf, block(l, 5), "block {l}");
    }
    disk.verify().unwrap();
}

/// Row 7 on a log of many segments without the chain, whose first blocks
/// recovery reads with several threads in flight: every segment is read,
/// and the writes in each are found.
#[test]
fn a_log_of_many_segments_is_scanned_whole_after_a_crash() {
    let unchained = Options {
        chain: false,
        ..volatile()
    };
    let (dev, g) = many_segments_crashed(unchained);
    let disk = LogDisk::open(Arc::clone(&dev), None, unchained).unwrap();
    many_segments_read_back(&disk);
    let recovered = disk.recovered();
    assert_eq!(recovered.segments_read, g.segments);
    assert!(recovered.segment_writes >= 57, "{recovered:?}");
}

/// Row 7 with the chain: recovery reads the head segment, the segments
/// opened since the checkpoint (each named by the one before) and the one
/// the chain ends at, not all 300, and finds the same writes.
#[test]
fn a_crash_reads_only_the_chain_of_segments_opened_since_the_checkpoint() {
    let (dev, g) = many_segments_crashed(volatile());
    let disk = LogDisk::open(Arc::clone(&dev), None, volatile()).unwrap();
    many_segments_read_back(&disk);
    let recovered = disk.recovered();
    assert!(recovered.segment_writes >= 57, "{recovered:?}");
    // The checkpoint's head segment, the 58 segments 400 blocks fill at 7
    // a segment, and the one named after the last, never opened.
    assert_eq!(
        recovered.segments_read,
        1 + 58 + 1,
        "{recovered:?} of {}",
        g.segments
    );
    drop(disk);
    let report = cairn_store::logdisk::check::examine(&*dev).unwrap();
    assert!(report.is_clean(), "{:?}", report.problems);
}

/// Row 7 with a link that does not decode (a summary decayed after its
/// write was flushed): the writes in the segments after it were flushed
/// too, so recovery reads every segment instead and finds them.
#[test]
fn a_decayed_link_makes_recovery_read_every_segment() {
    let (dev, g) = many_segments_crashed(volatile());
    // The chain from the format's open: the checkpoint names its start,
    // and each first summary the next. Decay the tenth link.
    let cp = {
        let examined = cairn_store::logdisk::check::examine(&*dev).unwrap();
        examined.checkpoint.0
    };
    let start = {
        let mut buf = [0u8; 4];
        dev.read_at(&mut buf, slot_of(&g, cp % 2 == 0) + 56)
            .unwrap();
        u32::from_le_bytes(buf) - 1
    };
    let first_block = |s: u32| g.segment_start(s) * B as u64;
    let mut segment = start;
    for _ in 0..10 {
        let mut buf = [0u8; 4];
        dev.read_at(&mut buf, first_block(segment) + 36).unwrap();
        segment = u32::from_le_bytes(buf) - 1;
    }
    flip(&*dev, first_block(segment) + 20);
    let disk = LogDisk::open(Arc::clone(&dev), None, volatile()).unwrap();
    let recovered = disk.recovered();
    assert_eq!(recovered.segments_read, g.segments, "{recovered:?}");
    // The decayed segment's own writes are lost (its summary names them);
    // every other block, in the segments after it too, comes back.
    let mut buf = vec![0u8; B];
    let mut lost = 0;
    for l in 0..400 {
        disk.read_block(l, &mut buf).unwrap();
        if buf != block(l, 5) {
            lost += 1;
        }
    }
    assert!(lost <= 7, "{lost} blocks lost, one segment holds 7");
}

/// Row 7: segment writes after the checkpoint (flushed, then a crash: the
/// disk dropped without a close) are found and applied in order; the newest
/// write of a block wins.
#[test]
fn writes_after_the_checkpoint_are_rolled_forward() {
    let dev = formatted();
    let disk = LogDisk::open(Arc::clone(&dev), None, volatile()).unwrap();
    for version in 1..=3u8 {
        for l in 0..10 {
            disk.write_blocks(l, &block(l, version)).unwrap();
        }
        disk.flush().unwrap();
    }
    drop(disk);
    let disk = LogDisk::open(Arc::clone(&dev), None, volatile()).unwrap();
    assert!(
        disk.recovered().segment_writes >= 3,
        "three flushed segment writes rolled forward: {:?}",
        disk.recovered()
    );
    let mut buf = vec![0u8; B];
    for l in 0..10 {
        disk.read_block(l, &mut buf).unwrap();
        assert_eq!(buf, block(l, 3), "block {l}: the newest write wins");
    }
    disk.verify().unwrap();
}

/// Writes blocks `blocks` at `version` on `disk`, each its own flushed
/// (partial) segment write, then crashes (drops it without a close).
fn flushed_one_by_one(disk: LogDisk<Arc<MemoryDevice>>, blocks: std::ops::Range<u64>, version: u8) {
    for l in blocks {
        disk.write_blocks(l, &block(l, version)).unwrap();
        disk.flush().unwrap();
    }
    drop(disk);
}

/// Row 4a: a device formatted again still holds the earlier volume's
/// segment writes, whole and checksummed, in slots the new one has not
/// reached, with larger sequences than the new volume's (each format's
/// sequence starts over; each recovery of the earlier one moved its on by
/// 2³²). After a crash none of them is taken for the new
/// volume's (every summary names its volume): what the new volume never
/// wrote reads as zeroes, with the chain and reading every segment. The
/// format wrote no segment block.
#[test]
fn a_device_formatted_again_never_returns_the_earlier_volumes_writes() {
    for chain in [true, false] {
        let options = Options {
            chain,
            ..volatile()
        };
        let dev = Arc::new(MemoryDevice::new(geo().image_blocks() * B as u64));
        let disk = LogDisk::format(Arc::clone(&dev), geo(), None, options).unwrap();
        let earlier = disk.id();
        flushed_one_by_one(disk, 0..10, 1);
        for from in [10, 20] {
            let disk = LogDisk::open(Arc::clone(&dev), None, options).unwrap();
            flushed_one_by_one(disk, from..from + 10, 1);
        }
        let image = || {
            let mut all = vec![0u8; dev.len() as usize];
            dev.read_at(&mut all, 0).unwrap();
            all
        };
        let before = image();
        let disk = LogDisk::format(Arc::clone(&dev), geo(), None, options).unwrap();
        let after = image();
        let first = geo().segment_start(0) as usize * B;
        assert_eq!(
            before[first..],
            after[first..],
            "the format (and the open in it) wrote in the segments"
        );
        flushed_one_by_one(disk, 0..2, 2);
        let disk = LogDisk::open(Arc::clone(&dev), None, options).unwrap();
        assert_ne!(disk.id(), earlier);
        let mut buf = vec![0u8; B];
        for l in 0..30 {
            disk.read_block(l, &mut buf).unwrap();
            if l < 2 {
                assert_eq!(buf, block(l, 2), "chain {chain}: block {l}, written");
            } else {
                assert!(
                    buf.iter().all(|&b| b == 0),
                    "chain {chain}: block {l} holds the earlier volume's write (version {})",
                    buf[8]
                );
            }
        }
        disk.verify().unwrap();
        if chain {
            // Found along the chain, which ends at a segment holding the
            // earlier volume's summary: not every segment is read.
            let r = disk.recovered();
            assert!(r.segments_read < geo().segments, "{r:?}");
        }
        drop(disk);
        // fsck says what it saw, and finds nothing wrong with it.
        let report = cairn_store::logdisk::check::examine(&*dev).unwrap();
        assert!(report.is_clean(), "{:?}", report.problems);
        assert!(report.earlier_format > 0, "{report}");
        assert!(
            report.to_string().contains(&format!(
                "earlier format {} segments start with another volume's summary",
                report.earlier_format
            )),
            "{report}"
        );
    }
}

/// A format over a device full of bytes that are no log disk's: recovery
/// after a crash reads them as damage, never as writes, and every block the
/// volume wrote comes back. Left as they were (`format`), the chain ends at
/// such a block, which may be a decayed summary, so every segment is read;
/// cleared (`format_clearing`, for a block device the volume could not look
/// at whole), it ends at a zeroed block and only the chain is read.
#[test]
fn a_format_over_garbage_recovers_only_its_own_writes() {
    for clearing in [false, true] {
        let dev = Arc::new(MemoryDevice::new(geo().image_blocks() * B as u64));
        dev.write_at(&vec![0xee; dev.len() as usize], 0).unwrap();
        let disk = if clearing {
            LogDisk::format_clearing(Arc::clone(&dev), geo(), None, volatile()).unwrap()
        } else {
            LogDisk::format(Arc::clone(&dev), geo(), None, volatile()).unwrap()
        };
        flushed_one_by_one(disk, 0..6, 3);
        let disk = LogDisk::open(Arc::clone(&dev), None, volatile()).unwrap();
        let mut buf = vec![0u8; B];
        for l in 0..geo().logical_blocks {
            disk.read_block(l, &mut buf).unwrap();
            if l < 6 {
                assert_eq!(buf, block(l, 3), "block {l}");
            } else {
                assert!(buf.iter().all(|&b| b == 0), "block {l}");
            }
        }
        disk.verify().unwrap();
        let read = disk.recovered().segments_read;
        if clearing {
            assert!(read < geo().segments, "cleared: {read} segments read");
        } else {
            assert_eq!(read, geo().segments, "left as they were");
        }
    }
}
