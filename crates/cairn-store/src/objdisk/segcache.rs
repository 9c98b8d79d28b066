//! The local segment cache: whole segment objects kept on a local device (a
//! file on an SSD), so reads of what this server wrote or read lately do
//! not go to the store. LSVD's local read cache, shaped by the log: a
//! segment object is immutable, so a slot holds one whole object, installed
//! once — by the uploader right after its PUT, off the clients' write path
//! (the bytes are in memory then), or by a read that fetched it whole — and
//! never updated. Its blocks stay valid while the map points at them; each
//! read checks a block's CRC32C against the map's, so a torn or stale slot
//! costs a GET, never wrong data. The victim of an install is the slot whose
//! segment has the fewest live blocks (dead segments first): what the
//! cleaner and overwrites emptied is worth least.
//!
//! The device: a superblock, then fixed slots, each a header and room for
//! one object (`docs/formats.md` "Object disk", local segment cache). An
//! install makes the slot's header void and durable, writes the object,
//! makes it durable, then writes the header: after a crash a valid header
//! names an object that is there whole. The slots survive restarts: the
//! open keeps those whose segment the recovered volume still has.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError, RwLock};

use cairn_objects::ObjectStore;

use crate::codec::{self, FormatError, put_u32, put_u64, u64_at};
use crate::device::{Device, DeviceError, IoBuf, is_aligned};

const SUPER_MAGIC: [u8; 8] = *b"CAIRNOSC";
const SLOT_MAGIC: [u8; 8] = *b"CAIRNOSS";
const VERSION: u32 = 1;
/// Bytes of the superblock, and of each slot's header (only the first
/// [`RECORD`] bytes are used; the rest keeps objects aligned).
pub(crate) const HEAD: u64 = 4096;
/// Bytes of the superblock's and a slot header's record.
const RECORD: usize = 64;

/// Where one block of a segment is, and what it must be.
pub(crate) struct Block {
    /// Byte offset of the block in the segment object.
    pub at: u64,
    /// Its CRC32C (the map's).
    pub crc: u32,
}

/// What a slot holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Held {
    sequence: u64,
    generation: u64,
    len: u64,
}

/// The superblock: which volume the cache belongs to and its slot size.
///
/// ```text
/// 0  magic "CAIRNOSC"   8  version u32   12 crc32c u32
/// 16 volume_id u64      24 slot_bytes u64   32 slots u64   40..64 zero
/// ```
fn encode_super(volume_id: u64, slot_bytes: u64, slots: u64) -> [u8; RECORD] {
    let mut b = [0u8; RECORD];
    b[..8].copy_from_slice(&SUPER_MAGIC);
    put_u32(&mut b, 8, VERSION);
    put_u64(&mut b, 16, volume_id);
    put_u64(&mut b, 24, slot_bytes);
    put_u64(&mut b, 32, slots);
    codec::seal(&mut b, 12);
    b
}

fn decode_super(b: &[u8]) -> Result<(u64, u64, u64), FormatError> {
    codec::check(
        "segment cache superblock",
        b,
        RECORD,
        (SUPER_MAGIC, VERSION),
        12,
    )?;
    Ok((u64_at(b, 16), u64_at(b, 24), u64_at(b, 32)))
}

/// A slot's header: the object it holds.
///
/// ```text
/// 0  magic "CAIRNOSS"   8  version u32   12 crc32c u32
/// 16 volume_id u64      24 sequence u64  32 generation u64
/// 40 len u64 (object bytes)              48..64 zero
/// ```
fn encode_slot(volume_id: u64, held: Held) -> [u8; RECORD] {
    let mut b = [0u8; RECORD];
    b[..8].copy_from_slice(&SLOT_MAGIC);
    put_u32(&mut b, 8, VERSION);
    put_u64(&mut b, 16, volume_id);
    put_u64(&mut b, 24, held.sequence);
    put_u64(&mut b, 32, held.generation);
    put_u64(&mut b, 40, held.len);
    codec::seal(&mut b, 12);
    b
}

fn decode_slot(b: &[u8]) -> Option<(u64, Held)> {
    codec::check("segment cache slot", b, RECORD, (SLOT_MAGIC, VERSION), 12).ok()?;
    Some((
        u64_at(b, 16),
        Held {
            sequence: u64_at(b, 24),
            generation: u64_at(b, 32),
            len: u64_at(b, 40),
        },
    ))
}

/// Why the cache did not open.
#[derive(Debug, thiserror::Error)]
pub enum SegCacheError {
    /// Reading or writing the device failed.
    #[error(transparent)]
    Device(#[from] DeviceError),
    /// The device holds something else, or another volume's cache.
    #[error("{device}: {why}")]
    Refused {
        /// The device.
        device: String,
        /// Why.
        why: String,
    },
}

/// Reads and installs since the open, for the stop's report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SegCacheCounts {
    /// Blocks read from the cache.
    pub hits: u64,
    /// Blocks that needed the store.
    pub misses: u64,
    /// Objects installed (uploaded, or fetched whole).
    pub installs: u64,
    /// Objects fetched whole on a read that missed.
    pub fetches: u64,
    /// Slots holding an object now.
    pub held: u64,
    /// Slots.
    pub slots: u64,
}

pub(crate) struct SegCache {
    device: Arc<dyn Device>,
    volume_id: u64,
    slot_bytes: u64,
    /// Per slot, what it holds; written only by an install, which holds
    /// the write lock while the slot is void.
    slots: Vec<RwLock<Option<Held>>>,
    /// Segment → slot, and the slots being filled.
    index: Mutex<Index>,
    hits: AtomicU64,
    misses: AtomicU64,
    installs: AtomicU64,
    /// Set after the first failed install or read, to log it once.
    warned: AtomicBool,
    /// Segments being fetched whole, so concurrent misses GET each once.
    fetching: Mutex<hashbrown::HashSet<u64>>,
    fetched: Condvar,
    /// Objects fetched whole on a miss.
    fetches: AtomicU64,
}

impl std::fmt::Debug for SegCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SegCache")
            .field("device", &self.device.describe())
            .field("slots", &self.slots.len())
            .finish_non_exhaustive()
    }
}

#[derive(Default)]
struct Index {
    by_segment: hashbrown::HashMap<u64, u32>,
    /// Per slot: the segment it holds, for picking victims (`None`: free,
    /// or being filled when `busy`).
    owner: Vec<Option<u64>>,
    busy: Vec<bool>,
}

impl SegCache {
    /// Opens the cache on `device` for the volume `volume_id` whose
    /// objects are at most `max_object` bytes: formats a blank device,
    /// refuses one holding anything else or another volume's cache, and
    /// keeps the slots whose segment `has(sequence, generation)` says the
    /// volume still has.
    pub(crate) fn open(
        device: Arc<dyn Device>,
        volume_id: u64,
        max_object: u64,
        has: impl Fn(u64, u64) -> bool,
    ) -> Result<Self, SegCacheError> {
        let slot_bytes = HEAD + max_object.next_multiple_of(HEAD);
        let slots = device.len().saturating_sub(HEAD) / slot_bytes;
        let refuse = |why: String| SegCacheError::Refused {
            device: device.describe(),
            why,
        };
        if slots < 2 {
            return Err(refuse(format!(
                "{} bytes hold fewer than two {slot_bytes}-byte slots: give the local cache \
                 at least {} bytes",
                device.len(),
                HEAD + 2 * slot_bytes
            )));
        }
        let mut head = IoBuf::zeroed(HEAD as usize);
        device.read_at(&mut head, 0)?;
        let fresh = head.iter().all(|&b| b == 0);
        if fresh {
            let mut b = IoBuf::zeroed(HEAD as usize);
            b[..RECORD].copy_from_slice(&encode_super(volume_id, slot_bytes, slots));
            device.write_at(&b, 0)?;
            device.flush()?;
        } else {
            let (id, bytes, _) = decode_super(&head[..RECORD]).map_err(|e| {
                refuse(format!(
                    "holds something else than a segment cache ({e}); refusing to overwrite it"
                ))
            })?;
            if id != volume_id {
                return Err(refuse(format!(
                    "is the segment cache of volume {id:#018x}, not of this one \
                     ({volume_id:#018x}): give each volume its own (or remove it)"
                )));
            }
            if bytes != slot_bytes {
                return Err(refuse(format!(
                    "has {bytes}-byte slots; this volume needs {slot_bytes}: remove it"
                )));
            }
        }
        let mut index = Index {
            by_segment: hashbrown::HashMap::new(),
            owner: vec![None; slots as usize],
            busy: vec![false; slots as usize],
        };
        let mut held = Vec::with_capacity(slots as usize);
        for slot in 0..slots {
            let mut h = None;
            if !fresh {
                device.read_at(&mut head, HEAD + slot * slot_bytes)?;
                if let Some((id, x)) = decode_slot(&head[..RECORD])
                    && id == volume_id
                    && x.len <= slot_bytes - HEAD
                    && has(x.sequence, x.generation)
                {
                    index.by_segment.insert(x.sequence, slot as u32);
                    index.owner[slot as usize] = Some(x.sequence);
                    h = Some(x);
                }
            }
            held.push(RwLock::new(h));
        }
        Ok(Self {
            device,
            volume_id,
            slot_bytes,
            slots: held,
            index: Mutex::new(index),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            installs: AtomicU64::new(0),
            warned: AtomicBool::new(false),
            fetching: Mutex::new(hashbrown::HashSet::new()),
            fetched: Condvar::new(),
            fetches: AtomicU64::new(0),
        })
    }

    fn index(&self) -> std::sync::MutexGuard<'_, Index> {
        self.index.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn warn_once(&self, what: &str, e: &DeviceError) {
        if !self.warned.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                "segment cache {}: {what}: {e} (reads go to the store; logged once)",
                self.device.describe()
            );
        }
    }

    pub(crate) fn counts(&self) -> SegCacheCounts {
        let index = self.index();
        SegCacheCounts {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            installs: self.installs.load(Ordering::Relaxed),
            fetches: self.fetches.load(Ordering::Relaxed),
            held: index.by_segment.len() as u64,
            slots: self.slots.len() as u64,
        }
    }

    /// Bytes of objects the slots hold.
    pub(crate) fn capacity(&self) -> u64 {
        self.slots.len() as u64 * (self.slot_bytes - HEAD)
    }

    /// Fetches segment `sequence` of `generation` whole (`key`) and
    /// installs it, unless the cache holds it; when another read is
    /// fetching it, waits for that one instead. A failed GET is dropped:
    /// the read then fetches what it needs itself.
    pub(crate) fn fetch(
        &self,
        store: &dyn ObjectStore,
        key: &str,
        sequence: u64,
        generation: u64,
        live: impl Fn(u64) -> Option<u32>,
    ) {
        {
            let mut fetching = self.fetching.lock().unwrap_or_else(PoisonError::into_inner);
            if fetching.contains(&sequence) {
                while fetching.contains(&sequence) {
                    fetching = self
                        .fetched
                        .wait(fetching)
                        .unwrap_or_else(PoisonError::into_inner);
                }
                return;
            }
            if self.index().by_segment.contains_key(&sequence) {
                return;
            }
            fetching.insert(sequence);
        }
        if let Ok(object) = store.get(key) {
            self.fetches.fetch_add(1, Ordering::Relaxed);
            self.install(sequence, generation, &object, live);
        }
        self.fetching
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&sequence);
        self.fetched.notify_all();
    }

    /// The whole object of segment `sequence` of `generation`, if the
    /// cache holds it (its blocks are checked by the caller).
    pub(crate) fn object(&self, sequence: u64, generation: u64) -> Option<Vec<u8>> {
        let slot = self.index().by_segment.get(&sequence).copied()?;
        let guard = self.slots[slot as usize]
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        let held = (*guard).filter(|h| h.sequence == sequence && h.generation == generation)?;
        let mut buf = vec![0u8; held.len as usize];
        let at = HEAD + u64::from(slot) * self.slot_bytes + HEAD;
        match self.device.read_at(&mut buf, at) {
            Ok(()) => Some(buf),
            Err(e) => {
                self.warn_once("reading", &e);
                None
            }
        }
    }

    /// Whether the cache holds segment `sequence`.
    #[cfg(test)]
    pub(crate) fn holds(&self, sequence: u64) -> bool {
        self.index().by_segment.contains_key(&sequence)
    }

    /// Installs segment `sequence` of `generation`, whose whole object is
    /// `object`, unless it is there already or too big for a slot. The
    /// victim is a free slot, else the one whose segment has the fewest
    /// live blocks (`live(sequence)`, `None` for a segment gone). A device
    /// error is logged once and leaves the slot void.
    pub(crate) fn install(
        &self,
        sequence: u64,
        generation: u64,
        object: &[u8],
        live: impl Fn(u64) -> Option<u32>,
    ) {
        if object.len() as u64 > self.slot_bytes - HEAD {
            return;
        }
        let slot = {
            let mut index = self.index();
            if index.by_segment.contains_key(&sequence) {
                return;
            }
            let mut best: Option<(usize, u32)> = None;
            for (s, owner) in index.owner.iter().enumerate() {
                if index.busy[s] {
                    continue;
                }
                let score = match owner {
                    None => 0,
                    Some(seq) => live(*seq).map_or(0, |l| l.saturating_add(1)),
                };
                if best.is_none_or(|(_, b)| score < b) {
                    best = Some((s, score));
                    if score == 0 {
                        break;
                    }
                }
            }
            // Every slot is being filled: skip this one.
            let Some((slot, _)) = best else { return };
            if let Some(old) = index.owner[slot].take() {
                index.by_segment.remove(&old);
            }
            index.busy[slot] = true;
            slot
        };
        let held = Held {
            sequence,
            generation,
            len: object.len() as u64,
        };
        let done = {
            let mut guard = self.slots[slot]
                .write()
                .unwrap_or_else(PoisonError::into_inner);
            *guard = None;
            let r = self.fill(slot as u64, held, object);
            if r.is_ok() {
                *guard = Some(held);
            }
            r
        };
        let mut index = self.index();
        index.busy[slot] = false;
        match done {
            Ok(()) => {
                index.by_segment.insert(sequence, slot as u32);
                index.owner[slot] = Some(sequence);
                self.installs.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                drop(index);
                self.warn_once("installing a segment", &e);
            }
        }
    }

    /// Writes the slot: void header, object, header, each durable before
    /// the next.
    fn fill(&self, slot: u64, held: Held, object: &[u8]) -> Result<(), DeviceError> {
        let base = HEAD + slot * self.slot_bytes;
        let mut head = IoBuf::zeroed(HEAD as usize);
        self.device.write_at(&head, base)?;
        self.device.flush()?;
        // A sealed object is page-aligned and whole pages (4 KiB blocks;
        // `segbuf.rs`): written as it is (with O_DIRECT where the device
        // has it); anything else through a padded copy.
        if is_aligned(object, HEAD) && (object.len() as u64).is_multiple_of(HEAD) {
            self.device.write_at(object, base + HEAD)?;
        } else {
            let mut body = IoBuf::zeroed(object.len().next_multiple_of(HEAD as usize));
            body[..object.len()].copy_from_slice(object);
            self.device.write_at(&body, base + HEAD)?;
        }
        self.device.flush()?;
        head[..RECORD].copy_from_slice(&encode_slot(self.volume_id, held));
        self.device.write_at(&head, base)?;
        self.device.flush()
    }

    /// Reads the blocks `blocks` of segment `sequence` of `generation`
    /// into `out` (one `bs`-byte block each, in order) when the cache
    /// holds it and every block's CRC32C matches; false otherwise (nothing
    /// usable: read them from the store).
    pub(crate) fn read(
        &self,
        sequence: u64,
        generation: u64,
        blocks: &[Block],
        out: &mut [&mut [u8]],
    ) -> bool {
        let Some(slot) = self.index().by_segment.get(&sequence).copied() else {
            self.misses
                .fetch_add(blocks.len() as u64, Ordering::Relaxed);
            return false;
        };
        let guard = self.slots[slot as usize]
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        let ok = match *guard {
            Some(h) if h.sequence == sequence && h.generation == generation => {
                self.read_slot(slot, h, blocks, out)
            }
            _ => false,
        };
        drop(guard);
        if ok {
            self.hits.fetch_add(blocks.len() as u64, Ordering::Relaxed);
        } else {
            self.misses
                .fetch_add(blocks.len() as u64, Ordering::Relaxed);
        }
        ok
    }

    fn read_slot(&self, slot: u32, held: Held, blocks: &[Block], out: &mut [&mut [u8]]) -> bool {
        let base = HEAD + u64::from(slot) * self.slot_bytes + HEAD;
        let mut i = 0;
        while i < blocks.len() {
            // A run of blocks that follow each other in the object.
            let bs = out[i].len() as u64;
            let mut j = i + 1;
            while j < blocks.len() && blocks[j].at == blocks[j - 1].at + bs {
                j += 1;
            }
            if blocks[j - 1].at + bs > held.len {
                return false;
            }
            let r = self
                .device
                .read_vectored_at(&mut out[i..j], base + blocks[i].at);
            if let Err(e) = r {
                self.warn_once("reading", &e);
                return false;
            }
            i = j;
        }
        blocks
            .iter()
            .zip(out.iter())
            .all(|(b, o)| codec::crc32c(o) == b.crc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::MemoryDevice;

    fn object(seed: u8, len: usize) -> Vec<u8> {
        (0..len)
            .map(|i| seed.wrapping_add((i / 4096) as u8))
            .collect()
    }

    fn blocks_of(obj: &[u8], ats: &[u64]) -> Vec<Block> {
        ats.iter()
            .map(|&at| Block {
                at,
                crc: codec::crc32c(&obj[at as usize..at as usize + 4096]),
            })
            .collect()
    }

    fn read(c: &SegCache, seq: u64, obj: &[u8], ats: &[u64]) -> Option<Vec<u8>> {
        let blocks = blocks_of(obj, ats);
        let mut buf = vec![0u8; 4096 * ats.len()];
        let mut out: Vec<&mut [u8]> = buf.chunks_mut(4096).collect();
        c.read(seq, 1, &blocks, &mut out).then_some(buf)
    }

    #[test]
    fn installs_reads_evicts_the_least_live_and_survives_a_reopen() {
        let dev: Arc<dyn Device> = Arc::new(MemoryDevice::new(HEAD + 3 * (HEAD + (64 << 10))));
        let c = SegCache::open(Arc::clone(&dev), 7, 64 << 10, |_, _| true).unwrap();
        assert_eq!(c.counts().slots, 3);
        let objs: Vec<Vec<u8>> = (0..4).map(|s| object(s * 16, 40 << 10)).collect();
        for s in 0..3 {
            c.install(s, 1, &objs[s as usize], |_| Some(5));
        }
        // Segment 1 has the fewest live blocks: the fourth takes its slot.
        c.install(3, 1, &objs[3], |seq| Some(if seq == 1 { 2 } else { 9 }));
        assert!(!c.holds(1));
        for s in [0u64, 2, 3] {
            let got = read(&c, s, &objs[s as usize], &[8192, 12288, 32768]).unwrap();
            assert_eq!(got[..8192], objs[s as usize][8192..16384]);
            assert_eq!(got[8192..], objs[s as usize][32768..36864]);
        }
        assert!(read(&c, 1, &objs[1], &[0]).is_none());
        // A block the map says is other data: refused, never served.
        let mut wrong = blocks_of(&objs[0], &[4096]);
        wrong[0].crc ^= 1;
        let mut b = vec![0u8; 4096];
        assert!(!c.read(0, 1, &wrong, &mut [&mut b[..]]));
        // Another generation of the same sequence is not this object.
        assert!(!c.read(0, 2, &blocks_of(&objs[0], &[0]), &mut [&mut b[..]]));
        let counts = c.counts();
        assert_eq!((counts.installs, counts.held), (4, 3));
        drop(c);
        // Reopened: the slots of segments the volume still has are kept.
        let c = SegCache::open(Arc::clone(&dev), 7, 64 << 10, |seq, _| seq != 2).unwrap();
        assert!(c.holds(0) && c.holds(3) && !c.holds(2));
        assert!(read(&c, 3, &objs[3], &[0]).is_some());
        drop(c);
        // Another volume's cache, or something else: refused.
        let e = SegCache::open(Arc::clone(&dev), 8, 64 << 10, |_, _| true).unwrap_err();
        assert!(e.to_string().contains("not of this one"), "{e}");
        dev.write_at(&[1u8; 4096], 0).unwrap();
        let e = SegCache::open(dev, 7, 64 << 10, |_, _| true).unwrap_err();
        assert!(e.to_string().contains("something else"), "{e}");
    }

    #[test]
    fn a_torn_install_leaves_the_slot_void() {
        let dev: Arc<dyn Device> = Arc::new(MemoryDevice::new(HEAD + 2 * (HEAD + (64 << 10))));
        let c = SegCache::open(Arc::clone(&dev), 7, 64 << 10, |_, _| true).unwrap();
        let obj = object(3, 64 << 10);
        c.install(5, 1, &obj, |_| Some(1));
        drop(c);
        // The crash between the void header and the new one: only the
        // void header made it.
        dev.write_at(&[0u8; 4096], HEAD).unwrap();
        let c = SegCache::open(dev, 7, 64 << 10, |_, _| true).unwrap();
        assert!(!c.holds(5));
        assert!(read(&c, 5, &obj, &[0]).is_none());
    }
}
