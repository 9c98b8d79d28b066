//! [`AligningDevice`]: any request over a device that takes only aligned ones.
//!
//! A file opened `O_DIRECT` takes only buffers, offsets and lengths that are
//! multiples of what its file system requires
//! ([`FileDevice::direct_alignment`](super::FileDevice::direct_alignment):
//! 512 bytes for offsets on ext4 over a disk of 512-byte sectors, 4 KiB
//! where the kernel cannot tell). A log disk or a tier above it makes
//! every request so; an export, a DRAM cache (it passes writes through as
//! they come), a throttle, stripes and a concatenation pass a client's
//! offsets and lengths on. This layer sits on such a file where nothing above
//! it aligns, and turns every request into aligned ones:
//!
//! - an aligned request from aligned memory goes through as it is;
//! - a read of any other shape reads the aligned blocks around it into a
//!   bounce buffer and copies out;
//! - a write of aligned blocks from unaligned memory goes through a copy;
//! - a write that covers part of a block is a read-modify-write: the partial
//!   end blocks are read, the data copied in, and the whole aligned run
//!   written at once.
//!
//! A read-modify-write must not interleave with another write to the same
//! block, or it puts back bytes the other wrote: a client's writes to
//! different sectors of one block would lose one of them. So writes (and
//! fast zeroes) take locks on the regions they touch, from a table of
//! [`STRIPES`] read-write locks, region `r` of [`REGION`] bytes on lock
//! `r mod STRIPES`: an aligned write takes its regions' locks shared (aligned
//! writes never wait for each other), a read-modify-write takes them
//! exclusive. Locks are taken in ascending order, so two requests never
//! deadlock. Reads take none: a read racing a write may see either, as on
//! any device. A discard is advice (old contents or zeroes) and takes none.

use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use super::{Device, DeviceError, DeviceOp, DirectAlignment, Extent, IoBuf, check_range};

/// The largest bounce buffer a thread keeps for its next request; a larger
/// one is allocated for its request and dropped.
const BOUNCE_KEPT: usize = 1 << 20;

thread_local! {
    /// This thread's bounce buffer, taken out while in use (so a nested use
    /// allocates its own instead of failing).
    static BOUNCE: std::cell::Cell<IoBuf> = std::cell::Cell::new(IoBuf::default());
}

/// Runs `io` on `len` bytes of aligned memory, of unspecified contents: the
/// thread's kept bounce buffer, grown if it is shorter (no allocation on a
/// request of a size the thread has seen).
fn with_bounce<R>(len: usize, io: impl FnOnce(&mut [u8]) -> R) -> R {
    let mut bounce = BOUNCE.take();
    bounce.grow(len);
    let result = io(&mut bounce[..len]);
    if bounce.len() <= BOUNCE_KEPT {
        BOUNCE.set(bounce);
    }
    result
}

/// Bytes per lock region.
pub const REGION: u64 = 64 << 10;

/// Locks in the table (one bit each of a `u64` mask).
pub const STRIPES: u32 = 64;

/// A device that takes requests of any offset, length and buffer address
/// over one that needs them aligned (see the module docs).
pub struct AligningDevice<D> {
    inner: D,
    /// What `inner` needs; `need.offset` is the block a partial write
    /// reads and rewrites.
    need: DirectAlignment,
    locks: [RwLock<()>; STRIPES as usize],
}

impl<D: Device> AligningDevice<D> {
    /// Puts the layer over `inner`, which takes requests aligned as `need`
    /// says (a direct file's [`FileDevice::direct_alignment`]). Refused when
    /// `inner`'s length is not a whole number of `need.offset`: the last
    /// partial block could not be read or written.
    ///
    /// [`FileDevice::direct_alignment`]: super::FileDevice::direct_alignment
    pub fn new(inner: D, need: DirectAlignment) -> Result<Self, String> {
        let align = need.offset;
        if !inner.len().is_multiple_of(align) {
            return Err(format!(
                "{} is not a whole number of {align}-byte blocks, which direct I/O needs",
                inner.describe()
            ));
        }
        Ok(Self {
            inner,
            need,
            locks: [const { RwLock::new(()) }; STRIPES as usize],
        })
    }

    /// The device underneath.
    pub fn inner(&self) -> &D {
        &self.inner
    }

    fn aligned(&self, offset: u64, len: u64) -> bool {
        (offset | len).is_multiple_of(self.need.offset)
    }

    /// Whether `inner` takes `buf` at `offset` as it is.
    fn fits(&self, buf: &[u8], offset: u64) -> bool {
        self.need
            .fits(buf.as_ptr() as usize, offset, buf.len() as u64)
    }

    /// `offset..offset + len` widened to whole blocks.
    fn widen(&self, offset: u64, len: u64) -> (u64, u64) {
        let block = self.need.offset;
        let start = offset / block * block;
        let end = (offset + len).div_ceil(block) * block;
        (start, end)
    }

    /// The locks of the regions `offset..offset + len` touches, as a mask.
    fn stripes(offset: u64, len: u64) -> u64 {
        if len == 0 {
            return 0;
        }
        let first = offset / REGION;
        let last = (offset + len - 1) / REGION;
        if last - first + 1 >= u64::from(STRIPES) {
            return u64::MAX;
        }
        // `last - first + 1` consecutive bits from `first mod STRIPES`,
        // wrapping past the top.
        let run = (1u64 << (last - first + 1)) - 1;
        run.rotate_left((first % u64::from(STRIPES)) as u32)
    }

    /// Runs `io` holding the locks of `mask` shared, lowest first.
    fn shared<R>(&self, mask: u64, io: impl FnOnce() -> R) -> R {
        if mask == 0 {
            return io();
        }
        let _guard: RwLockReadGuard<'_, ()> = self.locks[mask.trailing_zeros() as usize]
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        self.shared(mask & (mask - 1), io)
    }

    /// Runs `io` holding the locks of `mask` exclusive, lowest first.
    fn exclusive<R>(&self, mask: u64, io: impl FnOnce() -> R) -> R {
        if mask == 0 {
            return io();
        }
        let _guard: RwLockWriteGuard<'_, ()> = self.locks[mask.trailing_zeros() as usize]
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        self.exclusive(mask & (mask - 1), io)
    }

    /// Writes part of at least one block: reads the partial end blocks of the
    /// widened range, copies `buf` in and writes the range whole, with the
    /// range's locks held exclusive.
    fn read_modify_write(&self, buf: &[u8], offset: u64) -> Result<(), DeviceError> {
        let (start, end) = self.widen(offset, buf.len() as u64);
        let block = self.need.offset as usize;
        with_bounce((end - start) as usize, |bounce| {
            self.exclusive(Self::stripes(start, end - start), || {
                // The partial end blocks are read, the rest is `buf`: every
                // byte of the bounce buffer is set before it is written.
                let head = (offset - start) as usize;
                let tail = (end - offset) as usize - buf.len();
                if head > 0 {
                    self.inner.read_at(&mut bounce[..block], start)?;
                }
                let last = bounce.len() - block;
                if tail > 0 && (head == 0 || last > 0) {
                    self.inner
                        .read_at(&mut bounce[last..], end - self.need.offset)?;
                }
                bounce[head..head + buf.len()].copy_from_slice(buf);
                self.inner.write_at(bounce, start)
            })
        })
    }
}

impl<D: Device> Device for AligningDevice<D> {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<(), DeviceError> {
        let len = buf.len() as u64;
        check_range(DeviceOp::Read, offset, len, self.len())?;
        if self.fits(buf, offset) {
            return self.inner.read_at(buf, offset);
        }
        let (start, end) = self.widen(offset, len);
        with_bounce((end - start) as usize, |bounce| {
            self.inner.read_at(bounce, start)?;
            let head = (offset - start) as usize;
            buf.copy_from_slice(&bounce[head..head + buf.len()]);
            Ok(())
        })
    }

    /// One vectored read when the range and every buffer are aligned; else
    /// each buffer in turn.
    fn read_vectored_at(&self, bufs: &mut [&mut [u8]], offset: u64) -> Result<(), DeviceError> {
        let whole = bufs.iter().all(|b| self.fits(b, 0));
        if whole && self.aligned(offset, 0) {
            return self.inner.read_vectored_at(bufs, offset);
        }
        super::read_each(self, bufs, offset)
    }

    /// The inner device's batch, with each read that is not aligned read
    /// into a bounce buffer of its widened range and copied out.
    fn read_batch(&self, reads: &mut [(u64, &mut [u8])]) -> Result<bool, DeviceError> {
        let fits = |offset: u64, buf: &[u8]| self.fits(buf, offset);
        if reads.iter().all(|(offset, buf)| fits(*offset, buf)) {
            return self.inner.read_batch(reads);
        }
        for (offset, buf) in reads.iter() {
            check_range(DeviceOp::Read, *offset, buf.len() as u64, self.len())?;
        }
        let mut bounces: Vec<(u64, IoBuf)> = reads
            .iter()
            .filter(|(offset, buf)| !fits(*offset, buf))
            .map(|(offset, buf)| {
                let (start, end) = self.widen(*offset, buf.len() as u64);
                (start, IoBuf::zeroed((end - start) as usize))
            })
            .collect();
        {
            let mut bounced = bounces.iter_mut();
            let mut batch: Vec<(u64, &mut [u8])> = Vec::with_capacity(reads.len());
            for (offset, buf) in reads.iter_mut() {
                if fits(*offset, buf) {
                    batch.push((*offset, &mut buf[..]));
                } else if let Some((start, bounce)) = bounced.next() {
                    batch.push((*start, &mut bounce[..]));
                }
            }
            if !self.inner.read_batch(&mut batch)? {
                return Ok(false);
            }
        }
        let mut bounced = bounces.iter();
        for (offset, buf) in reads.iter_mut() {
            if !fits(*offset, buf)
                && let Some((start, bounce)) = bounced.next()
            {
                let head = (*offset - start) as usize;
                buf.copy_from_slice(&bounce[head..head + buf.len()]);
            }
        }
        Ok(true)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> Result<(), DeviceError> {
        let len = buf.len() as u64;
        check_range(DeviceOp::Write, offset, len, self.len())?;
        if !self.aligned(offset, len) {
            return self.read_modify_write(buf, offset);
        }
        let mask = Self::stripes(offset, len);
        if self.fits(buf, offset) {
            return self.shared(mask, || self.inner.write_at(buf, offset));
        }
        with_bounce(buf.len(), |bounce| {
            bounce.copy_from_slice(buf);
            self.shared(mask, || self.inner.write_at(bounce, offset))
        })
    }

    fn flush(&self) -> Result<(), DeviceError> {
        self.inner.flush()
    }

    fn discard(&self, offset: u64, len: u64) -> Result<(), DeviceError> {
        self.inner.discard(offset, len)
    }

    /// The inner device's, with the range's locks held exclusive where it
    /// zeroes part of a block (a read-modify-write in flight there would put
    /// the old bytes back) and shared where it does not.
    fn zero_fast(&self, offset: u64, len: u64) -> Result<bool, DeviceError> {
        check_range(DeviceOp::Write, offset, len, self.len())?;
        let mask = Self::stripes(offset, len);
        if self.aligned(offset, len) {
            self.shared(mask, || self.inner.zero_fast(offset, len))
        } else {
            self.exclusive(mask, || self.inner.zero_fast(offset, len))
        }
    }

    fn allocation(
        &self,
        offset: u64,
        len: u64,
        out: &mut Vec<Extent>,
    ) -> Result<bool, DeviceError> {
        self.inner.allocation(offset, len, out)
    }

    fn prefetch(&self, offset: u64, len: u64) -> Result<(), DeviceError> {
        self.inner.prefetch(offset, len)
    }

    fn len(&self) -> u64 {
        self.inner.len()
    }

    /// The inner device's: what it prefers, though this layer takes any.
    fn alignment(&self) -> u64 {
        self.inner.alignment()
    }

    fn busy_ns(&self) -> Option<u64> {
        self.inner.busy_ns()
    }

    fn describe(&self) -> String {
        format!("aligning (read-modify-write) {}", self.inner.describe())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::{FileDevice, FileOptions, MemoryDevice};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    /// A memory device that takes only what a file opened `O_DIRECT` takes
    /// (buffers, offsets and lengths in whole 4 KiB) and counts its reads
    /// and writes. With `yielding`, a write yields the thread before it
    /// lands, so that a read-modify-write left unlocked loses to another.
    struct Strict {
        inner: MemoryDevice,
        yielding: bool,
        reads: AtomicU64,
        writes: AtomicU64,
    }

    impl Strict {
        fn new(len: u64, yielding: bool) -> Self {
            Self {
                inner: MemoryDevice::new(len),
                yielding,
                reads: AtomicU64::new(0),
                writes: AtomicU64::new(0),
            }
        }

        fn check(op: DeviceOp, buf: &[u8], offset: u64) -> Result<(), DeviceError> {
            let len = buf.len() as u64;
            if !(buf.as_ptr() as u64 | offset | len).is_multiple_of(4096) {
                return Err(DeviceError::Unaligned {
                    op,
                    offset,
                    len,
                    align: 4096,
                });
            }
            Ok(())
        }
    }

    impl Device for Strict {
        fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<(), DeviceError> {
            Self::check(DeviceOp::Read, buf, offset)?;
            self.reads.fetch_add(1, Ordering::Relaxed);
            self.inner.read_at(buf, offset)
        }
        fn write_at(&self, buf: &[u8], offset: u64) -> Result<(), DeviceError> {
            Self::check(DeviceOp::Write, buf, offset)?;
            self.writes.fetch_add(1, Ordering::Relaxed);
            if self.yielding {
                std::thread::yield_now();
            }
            self.inner.write_at(buf, offset)
        }
        fn flush(&self) -> Result<(), DeviceError> {
            self.inner.flush()
        }
        fn discard(&self, offset: u64, len: u64) -> Result<(), DeviceError> {
            self.inner.discard(offset, len)
        }
        fn len(&self) -> u64 {
            self.inner.len()
        }
        fn alignment(&self) -> u64 {
            4096
        }
        fn describe(&self) -> String {
            "strict memory".into()
        }
    }

    #[test]
    fn conforms_over_a_device_that_takes_only_aligned_requests() {
        super::super::conformance::check(
            &AligningDevice::new(Strict::new(1 << 20, false), DirectAlignment::PAGE).unwrap(),
        );
    }

    #[test]
    fn a_length_of_a_partial_block_is_refused() {
        let error = AligningDevice::new(Strict::new(8192 + 512, false), DirectAlignment::PAGE)
            .err()
            .unwrap();
        assert!(
            error.contains("not a whole number of 4096-byte blocks"),
            "{error}"
        );
    }

    #[test]
    fn an_aligned_request_goes_through_as_it_is() {
        let dev = AligningDevice::new(Strict::new(1 << 20, false), DirectAlignment::PAGE).unwrap();
        let data = IoBuf::copy_padded(&[7; 8192], 8192);
        dev.write_at(&data, 4096).unwrap();
        let mut back = IoBuf::zeroed(8192);
        dev.read_at(&mut back, 4096).unwrap();
        assert_eq!(back[..], data[..]);
        // One write, one read: no read-modify-write.
        assert_eq!(dev.inner().writes.load(Ordering::Relaxed), 1);
        assert_eq!(dev.inner().reads.load(Ordering::Relaxed), 1);
        // A partial block costs a read of it first.
        dev.write_at(&[1; 100], 4096 + 10).unwrap();
        assert_eq!(dev.inner().reads.load(Ordering::Relaxed), 2);
        // Two partial ends in two blocks: two reads, one write of both.
        dev.write_at(&[2; 4096], 4096 + 2048).unwrap();
        assert_eq!(dev.inner().reads.load(Ordering::Relaxed), 4);
        assert_eq!(dev.inner().writes.load(Ordering::Relaxed), 3);
    }

    /// Random reads, writes, batches and fast zeroes of any offset, length
    /// and buffer address against a byte array, over a device that refuses
    /// anything unaligned.
    #[test]
    fn any_request_reads_back_as_a_byte_array_would() {
        use rand::{Rng, SeedableRng};
        const LEN: u64 = 1 << 18;
        let dev = AligningDevice::new(Strict::new(LEN, false), DirectAlignment::PAGE).unwrap();
        let mut model = vec![0u8; LEN as usize];
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(26);
        // Buffers at every address offset from a page.
        let mut backing = IoBuf::zeroed(64 << 10);
        for step in 0..4000u32 {
            let len = match rng.random_range(0..4) {
                0 => rng.random_range(1..64),
                1 => rng.random_range(1..4) * 4096,
                _ => rng.random_range(1..20_000),
            };
            let offset = match rng.random_range(0..3) {
                0 => rng.random_range(0..(LEN - len) / 4096) * 4096,
                _ => rng.random_range(0..=LEN - len),
            };
            let shift = if rng.random_bool(0.5) {
                0
            } else {
                rng.random_range(1..4096)
            };
            let buf = &mut backing[shift..shift + len as usize];
            let (o, n) = (offset as usize, len as usize);
            match rng.random_range(0..10) {
                0..4 => {
                    rng.fill(&mut buf[..]);
                    dev.write_at(buf, offset).unwrap();
                    model[o..o + n].copy_from_slice(buf);
                }
                4 => {
                    // A memory device has no fast zero: nothing changes.
                    assert!(!dev.zero_fast(offset, len).unwrap());
                }
                5 => {
                    let mut other = vec![0u8; 300];
                    let at = rng.random_range(0..LEN - 300);
                    let mut reads = [(offset, &mut buf[..]), (at, &mut other[..])];
                    if dev.read_batch(&mut reads).unwrap() {
                        assert_eq!(&buf[..], &model[o..o + n], "step {step}: batch");
                        assert_eq!(other[..], model[at as usize..at as usize + 300]);
                    }
                }
                _ => {
                    dev.read_at(buf, offset).unwrap();
                    assert_eq!(&buf[..], &model[o..o + n], "step {step}: {len} at {offset}");
                }
            }
        }
        let mut all = IoBuf::zeroed(LEN as usize);
        dev.read_at(&mut all, 0).unwrap();
        assert!(all[..] == model[..]);
    }

    /// Eight threads each own one sector of every block and write it over
    /// and over, and a ninth writes whole blocks of the second half, each
    /// sector of them but one that a tenth writes alone. At the end every
    /// sector holds its last writer's last value: no read-modify-write put
    /// back bytes another write had changed.
    #[test]
    fn concurrent_writes_to_one_block_lose_nothing() {
        const BLOCKS: u64 = 8;
        const ROUNDS: u32 = 2000;
        let dev = Arc::new(
            AligningDevice::new(Strict::new(BLOCKS * 4096, true), DirectAlignment::PAGE).unwrap(),
        );
        let mut threads = Vec::new();
        for sector in 0..8u64 {
            let dev = Arc::clone(&dev);
            threads.push(std::thread::spawn(move || {
                for round in 1..=ROUNDS {
                    let value = [(sector as u8) << 5 | (round % 31) as u8; 512];
                    for block in 0..BLOCKS / 2 {
                        dev.write_at(&value, block * 4096 + sector * 512).unwrap();
                    }
                }
            }));
        }
        // Whole blocks of the second half, from aligned memory, beside
        // sector 0 of each written alone.
        {
            let whole_writer = Arc::clone(&dev);
            threads.push(std::thread::spawn(move || {
                let dev = whole_writer;
                let mut back = IoBuf::zeroed(4096);
                for round in 1..=ROUNDS {
                    let value = 0xE0 | (round % 31) as u8;
                    let whole = IoBuf::copy_padded(&[value; 4096], 4096);
                    for block in BLOCKS / 2..BLOCKS {
                        dev.write_at(&whole, block * 4096).unwrap();
                        // Only this thread writes past the first sector:
                        // what it wrote is there until it writes again.
                        std::thread::yield_now();
                        dev.read_at(&mut back, block * 4096).unwrap();
                        let undone = back[512..].iter().find(|&&b| b != value);
                        assert!(
                            undone.is_none(),
                            "round {round}, block {block}: a whole-block write was undone \
                             ({:#x} where {value:#x} was written)",
                            undone.unwrap()
                        );
                    }
                }
            }));
            let dev = Arc::clone(&dev);
            threads.push(std::thread::spawn(move || {
                for round in 1..=ROUNDS {
                    let value = [0xC0 | (round % 31) as u8; 512];
                    for block in BLOCKS / 2..BLOCKS {
                        dev.write_at(&value, block * 4096).unwrap();
                    }
                }
            }));
        }
        for thread in threads {
            thread.join().unwrap();
        }
        let mut all = vec![0u8; (BLOCKS * 4096) as usize];
        dev.read_at(&mut all, 0).unwrap();
        let last = (ROUNDS % 31) as u8;
        for block in 0..BLOCKS / 2 {
            for sector in 0..8u64 {
                let at = (block * 4096 + sector * 512) as usize;
                assert!(
                    all[at..at + 512]
                        .iter()
                        .all(|&b| b == (sector as u8) << 5 | last),
                    "block {block} sector {sector} holds {:#x}, not its writer's last",
                    all[at]
                );
            }
        }
        for block in BLOCKS / 2..BLOCKS {
            let at = (block * 4096) as usize;
            let first = all[at];
            assert!(
                first == 0xE0 | last || first == 0xC0 | last,
                "block {block}: {first:#x}"
            );
            assert!(
                all[at + 512..at + 4096].iter().all(|&b| b == 0xE0 | last),
                "block {block}: a whole-block write was undone ({:#x})",
                all[at + 512..at + 4096]
                    .iter()
                    .find(|&&b| b != 0xE0 | last)
                    .unwrap()
            );
        }
    }

    #[test]
    fn stripes_cover_the_regions_of_a_range() {
        type A = AligningDevice<MemoryDevice>;
        assert_eq!(A::stripes(0, 0), 0);
        assert_eq!(A::stripes(0, 1), 1);
        assert_eq!(A::stripes(REGION - 1, 2), 0b11);
        assert_eq!(A::stripes(63 * REGION, REGION + 1), 1 << 63 | 1);
        assert_eq!(A::stripes(5 * REGION, 64 * REGION), u64::MAX);
        assert_eq!(A::stripes(64 * REGION + 4096, 4096), 1);
    }

    /// Over a real file opened `O_DIRECT` (where the file system takes it),
    /// unaligned writes and reads work and read back.
    #[test]
    fn over_a_file_opened_direct() {
        let dir = tempfile::tempdir().unwrap();
        let options = FileOptions {
            create_len: Some(1 << 20),
            direct: true,
            ..FileOptions::default()
        };
        let file = match FileDevice::open(dir.path().join("direct.img"), &options) {
            Ok(file) => file,
            Err(e) => {
                eprintln!("skipped: this file system refuses O_DIRECT ({e})");
                return;
            }
        };
        let mut odd = [0u8; 3];
        assert!(matches!(
            file.read_at(&mut odd, 1),
            Err(DeviceError::Unaligned { .. })
        ));
        let need = file.direct_alignment();
        let dev = AligningDevice::new(file, need).unwrap();
        super::super::conformance::check(&dev);
        dev.write_at(b"hello", 4093).unwrap();
        dev.read_at(&mut odd, 4095).unwrap();
        assert_eq!(&odd, b"llo");
        assert!(dev.describe().contains("O_DIRECT"));
    }
}
