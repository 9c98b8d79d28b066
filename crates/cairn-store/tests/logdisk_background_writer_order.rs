//! The background writer's queue is part of the disk: what it holds reads
//! back before it lands (volatile segment buffers queued on the writer, blocks
//! a queued cleaner write moved); `flush` and `drain` return only once every
//! queued write is on the device; and an NV slot superseded under a queued
//! destage stays held until the writer has copied it, past a device flush
//! retired before it, so no segment is written with one block's data under
//! another's summary entry. The device and region here hold the writer at a
//! gate, and the device checks every segment write's data against its summary.

#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use cairn_store::logdisk::{CleanerPolicy, Geometry, LogDisk, Options};
use cairn_store::ntl::{Region, SimRegion};
use cairn_store::{Device, MemoryDevice};
use common::logdisk::{B, image_len, options, pattern, small, version_of};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// A memory device whose writes wait while the gate is shut, and which
/// checks every segment write it takes: each data block must match the CRC
/// its summary gives.
struct GatedDevice {
    inner: MemoryDevice,
    shut: std::sync::atomic::AtomicBool,
    /// Every write takes at least this long.
    delay_us: u64,
    bad: std::sync::Mutex<Vec<String>>,
    /// Writes done.
    writes: std::sync::atomic::AtomicU64,
}

impl GatedDevice {
    /// Open gate; every write takes at least `delay_us`.
    fn new(len: u64, delay_us: u64) -> Self {
        Self {
            inner: MemoryDevice::new(len),
            shut: std::sync::atomic::AtomicBool::new(false),
            delay_us,
            bad: std::sync::Mutex::new(Vec::new()),
            writes: std::sync::atomic::AtomicU64::new(0),
        }
    }
}

impl Device for GatedDevice {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<(), cairn_store::DeviceError> {
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> Result<(), cairn_store::DeviceError> {
        while self.shut.load(std::sync::atomic::Ordering::Acquire) {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        std::thread::sleep(std::time::Duration::from_micros(self.delay_us));
        // The superblock the format wrote says whose summaries these are.
        let mut first = vec![0u8; B];
        self.inner.read_at(&mut first, 0)?;
        if buf.len() > B
            && let Ok(sb) = cairn_store::logdisk::format::decode_superblock(&first)
            && let Ok(s) = cairn_store::logdisk::format::decode_summary(&buf[..B], &sb)
        {
            for (i, e) in s.entries.iter().enumerate() {
                let data = &buf[(i + 1) * B..(i + 2) * B];
                if cairn_store::logdisk::format::crc32c(data) != e.crc {
                    self.bad.lock().unwrap().push(format!(
                        "segment {} write at slot {}: block {i} (logical {}) does not match its summary",
                        s.segment, s.first_slot, e.logical
                    ));
                }
            }
        }
        self.inner.write_at(buf, offset)?;
        self.writes
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        Ok(())
    }
    fn flush(&self) -> Result<(), cairn_store::DeviceError> {
        self.inner.flush()
    }
    fn discard(&self, offset: u64, len: u64) -> Result<(), cairn_store::DeviceError> {
        self.inner.discard(offset, len)
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn describe(&self) -> String {
        "gated memory".into()
    }
}

/// The held-writer tests' disk: 40 segments of 8 blocks, 200 logical
/// blocks, on a gated device (gate open, no delay); NV mode with the
/// background writer on `writer_threads` threads, no background cleaning,
/// and no checkpoint before 1,000 segment writes. A 48 KiB region gives 75
/// NV slots: destaging starts above 56 dirty blocks.
fn held_writer_setup(writer_threads: u32) -> (Geometry, Arc<GatedDevice>, Options) {
    let g = Geometry {
        segments: 40,
        logical_blocks: 200,
        ..small()
    };
    let dev = Arc::new(GatedDevice::new(image_len(&g), 0));
    let opts = Options {
        background_destage: true,
        background_clean: false,
        writer_threads,
        checkpoint_interval: 1000,
        ..Options::default()
    };
    (g, dev, opts)
}

/// The background writer copies a destage's blocks out of their NV slots
/// when it reaches the write, which may be after the caller has rewritten
/// one of those blocks. The superseded slot must not be reused (and so
/// overwritten) before that copy: here the writer is held on the write
/// before, a block of the queued destage is rewritten, and the next writes
/// would take its old slot first if it were free.
#[test]
fn a_slot_superseded_under_a_queued_segment_write_is_not_reused_before_the_copy() {
    let (g, dev, opts) = held_writer_setup(1);
    // 75 slots: destaging starts above 56 dirty blocks.
    let region = Arc::new(SimRegion::new(48 * 1024));
    let disk = LogDisk::format(dev.clone(), g, Some(Box::new(region.clone())), opts).unwrap();
    assert_eq!(disk.nv_slots(), 75);
    dev.shut.store(true, std::sync::atomic::Ordering::Release);
    // Blocks 0..=56: the first destage (0..7) goes to the writer, which
    // copies it and waits at the gate; 57..64: the second (7..14) is queued
    // behind it, not yet copied.
    for l in 0..64 {
        disk.write_blocks(l, &pattern(l, 1)).unwrap();
    }
    assert_eq!(disk.metrics().user_segment_writes, 2);
    // Rewrite block 8 (in the queued destage), then two more writes: the
    // second would take block 8's old slot if it were already free.
    disk.write_blocks(8, &pattern(8, 2)).unwrap();
    disk.write_blocks(150, &pattern(150, 1)).unwrap();
    disk.write_blocks(151, &pattern(151, 1)).unwrap();
    dev.shut.store(false, std::sync::atomic::Ordering::Release);
    disk.close().unwrap();
    assert_eq!(dev.bad.lock().unwrap().as_slice(), &[] as &[String]);
    drop(disk);
    let disk = LogDisk::open(dev.clone(), Some(Box::new(region.clone())), opts).unwrap();
    let mut buf = vec![0u8; B];
    for (l, version) in (0..64)
        .map(|l| (l, 1 + u64::from(l == 8)))
        .chain([(150, 1), (151, 1)])
    {
        disk.read_block(l, &mut buf).unwrap();
        assert_eq!(version_of(l, &buf), Some(version), "block {l}");
    }
}

/// `drain` returns only once the background writer's queued segment write
/// is on the device: held at a shut gate, the write keeps `drain` waiting.
#[test]
fn drain_waits_for_the_queued_background_writes() {
    let (g, dev, opts) = held_writer_setup(1);
    let region = Box::new(SimRegion::new(48 * 1024)) as Box<dyn Region>;
    let disk = Arc::new(LogDisk::format(dev.clone(), g, Some(region), opts).unwrap());
    let before = dev.writes.load(std::sync::atomic::Ordering::Acquire);
    dev.shut.store(true, std::sync::atomic::Ordering::Release);
    // 57 dirty blocks pass the destage threshold (56 of 75 slots): one
    // segment write is queued, and held at the gate.
    for l in 0..57 {
        disk.write_blocks(l, &pattern(l, 1)).unwrap();
    }
    assert_eq!(disk.metrics().user_segment_writes, 1);
    let drained = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let waiter = {
        let (disk, drained) = (disk.clone(), drained.clone());
        std::thread::spawn(move || {
            disk.drain().unwrap();
            drained.store(true, std::sync::atomic::Ordering::Release);
        })
    };
    std::thread::sleep(std::time::Duration::from_millis(200));
    let early = drained.load(std::sync::atomic::Ordering::Acquire);
    let held = dev.writes.load(std::sync::atomic::Ordering::Acquire);
    // Open the gate before asserting: a failure must not leave the disk's
    // writer stuck behind it.
    dev.shut.store(false, std::sync::atomic::Ordering::Release);
    waiter.join().unwrap();
    assert!(!early, "drain returned while the segment write was held");
    assert_eq!(held, before);
    assert!(drained.load(std::sync::atomic::Ordering::Acquire));
    assert_eq!(
        dev.writes.load(std::sync::atomic::Ordering::Acquire),
        before + 1
    );
    assert_eq!(dev.bad.lock().unwrap().as_slice(), &[] as &[String]);
    // Nothing is left in flight: the device stays still.
    std::thread::sleep(std::time::Duration::from_millis(50));
    assert_eq!(
        dev.writes.load(std::sync::atomic::Ordering::Acquire),
        before + 1
    );
}

/// Volatile mode with the background writer: a full segment buffer is
/// queued and the caller fills a spare one. Held at a shut gate, three
/// queued buffers' blocks read back from the buffers (one of them rewritten
/// since, in the buffer being filled), a flush waits for every queued write,
/// and after it everything reads back from the device, reopened.
#[test]
fn volatile_segment_buffers_queued_on_the_writer_serve_reads_and_a_flush_waits_for_them() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let (g, dev, opts) = held_writer_setup(2);
    let disk = Arc::new(LogDisk::format(dev.clone(), g, None, opts).unwrap());
    let before = dev.writes.load(Ordering::Acquire);
    dev.shut.store(true, Ordering::Release);
    // 7 data blocks per segment write: 21 blocks fill three buffers, all
    // queued (the writer holds three); 21 and 22 stay in the fourth.
    for l in 0..23 {
        disk.write_blocks(l, &pattern(l, 1)).unwrap();
    }
    disk.write_blocks(3, &pattern(3, 2)).unwrap();
    assert_eq!(disk.metrics().user_segment_writes, 3);
    let mut buf = vec![0u8; B];
    let version = |l: u64| 1 + u64::from(l == 3);
    // Checked after the gate opens: a failure must not leave the writer
    // stuck behind it.
    let held_reads: Vec<_> = (0..23)
        .map(|l| {
            disk.read_block(l, &mut buf)
                .map(|()| version_of(l, &buf))
                .map_err(|e| e.to_string())
        })
        .collect();
    let flushed = Arc::new(AtomicBool::new(false));
    let flusher = {
        let (disk, flushed) = (disk.clone(), flushed.clone());
        std::thread::spawn(move || {
            disk.flush().unwrap();
            flushed.store(true, Ordering::Release);
        })
    };
    std::thread::sleep(std::time::Duration::from_millis(200));
    let early = flushed.load(Ordering::Acquire);
    let held = dev.writes.load(Ordering::Acquire);
    // Open the gate before asserting: a failure must not leave the writer
    // stuck behind it.
    dev.shut.store(false, Ordering::Release);
    flusher.join().unwrap();
    for (l, read) in (0..23).zip(held_reads) {
        assert_eq!(read, Ok(Some(version(l))), "block {l}, held");
    }
    assert!(!early, "flush returned while segment writes were held");
    assert_eq!(held, before);
    // The three queued writes and the flush's partial segment.
    assert_eq!(dev.writes.load(Ordering::Acquire), before + 4);
    assert_eq!(disk.metrics().partial_segments, 1);
    assert_eq!(dev.bad.lock().unwrap().as_slice(), &[] as &[String]);
    drop(disk);
    let disk = LogDisk::open(dev.clone(), None, opts).unwrap();
    for l in 0..23 {
        disk.read_block(l, &mut buf).unwrap();
        assert_eq!(version_of(l, &buf), Some(version(l)), "block {l}, reopened");
    }
}

/// An NV region where a background writer thread's read of bytes equal to
/// `hold` waits while `shut` (which opens for good after `timeout` of
/// waiting, should the caller itself wait for the writer), then reads
/// again: it holds a queued destage's copy of one block, which a
/// [`GatedDevice`] cannot (the copy comes before the device write).
struct GatedRegion {
    inner: SimRegion,
    hold: Vec<u8>,
    timeout: std::time::Duration,
    shut: std::sync::atomic::AtomicBool,
}

impl Region for GatedRegion {
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), cairn_store::DeviceError> {
        use std::sync::atomic::Ordering;
        let writer = std::thread::current()
            .name()
            .is_some_and(|n| n.starts_with("logdisk-destage"));
        self.inner.read(offset, buf)?;
        if writer && *buf == *self.hold {
            let start = std::time::Instant::now();
            while self.shut.load(Ordering::Acquire) {
                if start.elapsed() >= self.timeout {
                    // Stuck behind the writer: open for good.
                    self.shut.store(false, Ordering::Release);
                }
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        }
        self.inner.read(offset, buf)
    }
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), cairn_store::DeviceError> {
        self.inner.write(offset, data)
    }
    fn load_u64(&self, offset: u64) -> Result<u64, cairn_store::DeviceError> {
        self.inner.load_u64(offset)
    }
    fn store_u64(&self, offset: u64, value: u64) -> Result<(), cairn_store::DeviceError> {
        self.inner.store_u64(offset, value)
    }
    fn flush(&self, ranges: &[(u64, u64)]) -> Result<(), cairn_store::DeviceError> {
        self.inner.flush(ranges)
    }
    fn fence(&self) -> Result<(), cairn_store::DeviceError> {
        self.inner.fence()
    }
    fn describe(&self) -> String {
        "gated simulated region".into()
    }
}

/// A slot superseded while sitting in a destage that was queued *after* a
/// background flush must stay held when that flush is retired (the flush
/// covers the destages before it, not this one). Here the writer's copy of
/// the third destage is held at the region; its block 15 is rewritten, and
/// the flush before it is retired by the next write: with the slot freed
/// there, write 88 takes it and the third segment is written with block
/// 88's data under block 15's summary entry.
#[test]
fn a_slot_superseded_under_a_destage_queued_after_a_flush_is_held_past_that_flush() {
    let (g, dev, opts) = held_writer_setup(2);
    // The third destage's copy of block 15 waits.
    let region = Arc::new(GatedRegion {
        inner: SimRegion::new(48 * 1024),
        hold: pattern(15, 1),
        timeout: std::time::Duration::from_millis(500),
        shut: std::sync::atomic::AtomicBool::new(true),
    });
    let disk = LogDisk::format(dev.clone(), g, Some(Box::new(region.clone())), opts).unwrap();
    // 75 slots; a destage (7 blocks) above 56 dirty; a background flush once
    // 9 destaged slots are not covered by one.
    assert_eq!(disk.nv_slots(), 75);
    let flushes = disk.metrics().device_flushes;
    // Destages of 0..7 (at block 56), 7..14 (at 63, then a flush) and
    // 14..21 (at 70, copy held); then 71..=73 leave one free slot.
    for l in 0..74 {
        disk.write_blocks(l, &pattern(l, 1)).unwrap();
    }
    let m = disk.metrics();
    assert_eq!(
        (m.user_segment_writes, m.device_flushes),
        (3, flushes),
        "{m:?}"
    );
    // The last free slot; block 15's old slot is superseded under the held
    // copy. Block 74 finds no free slot and retires the flush (freeing the
    // 14 slots it covers); 88 would take block 15's old slot if that freed
    // it too.
    disk.write_blocks(15, &pattern(15, 2)).unwrap();
    for l in 74..=88 {
        disk.write_blocks(l, &pattern(l, 1)).unwrap();
    }
    assert!(disk.metrics().device_flushes > flushes);
    region
        .shut
        .store(false, std::sync::atomic::Ordering::Release);
    disk.close().unwrap();
    assert_eq!(dev.bad.lock().unwrap().as_slice(), &[] as &[String]);
    drop(disk);
    let disk = LogDisk::open(dev.clone(), Some(Box::new(region.clone())), opts).unwrap();
    let mut buf = vec![0u8; B];
    for l in 0..=88 {
        disk.read_block(l, &mut buf).unwrap();
        assert_eq!(
            version_of(l, &buf),
            Some(1 + u64::from(l == 15)),
            "block {l}"
        );
    }
}

/// A background cleaner write is queued with the map already pointing at
/// the blocks' new places: until the device has them, reads are served
/// from the write's buffer. Here every device write takes 3 ms, and all
/// blocks are read back after every write (hundreds of those reads find a
/// cleaner write still queued; with reads sent to the device instead, the
/// test fails on a checksum mismatch).
#[test]
fn blocks_moved_by_a_queued_cleaner_write_read_back_before_it_lands() {
    let g = Geometry {
        segments: 200,
        logical_blocks: 600,
        ..small()
    };
    let dev = Arc::new(GatedDevice::new(image_len(&g), 3000));
    let region = Box::new(SimRegion::new(48 * 1024)) as Box<dyn Region>;
    let opts = Options {
        background_destage: true,
        background_clean: true,
        checkpoint_interval: 1000,
        ..options(CleanerPolicy::Greedy)
    };
    let disk = LogDisk::format(dev.clone(), g, Some(region), opts).unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let mut newest = vec![0u64; g.logical_blocks as usize];
    let mut buf = vec![0u8; B];
    let mut checked = 0;
    for op in 1..=6000u64 {
        let l = rng.random_range(0..g.logical_blocks);
        disk.write_blocks(l, &pattern(l, op)).unwrap();
        newest[l as usize] = op;
        checked += 1;
        for (l, &version) in newest.iter().enumerate() {
            disk.read_block(l as u64, &mut buf)
                .unwrap_or_else(|e| panic!("op {op}: block {l}: {e}"));
            assert_eq!(
                version_of(l as u64, &buf),
                Some(version),
                "op {op}: block {l}"
            );
        }
    }
    let m = disk.metrics();
    assert!(m.cleaner_background_passes >= 10, "{checked} checks: {m:?}");
    disk.close().unwrap();
    assert_eq!(dev.bad.lock().unwrap().as_slice(), &[] as &[String]);
}
