//! The log disk's non-volatile write cache: block slots in a persistent-memory
//! [`Region`] (papers/003's NV cache).
//!
//! A write is durable once its data and its slot entry are flushed and fenced;
//! the log disk acknowledges it then, before any disk I/O. Layout of the region
//! (byte diagram in `docs/formats.md`):
//!
//! ```text
//! 0 .. 64            header: magic "CAIRNNV1", version, block size, slots, volume id, CRC32C
//! 4096 .. T          slot table: 32 bytes per slot
//! T .. T + slots·B   slot data, T = 4096 + slots·32 rounded up to 4096
//! ```
//!
//! A slot entry is `{sequence (0 = empty), logical block, data CRC32C, entry
//! CRC32C}`. It is valid only when its own CRC and its data's CRC match, so a
//! slot written partly (a crash between the data and the entry stores, in any
//! order the memory system chose) is recognised and ignored — it was never
//! acknowledged. A rewrite of a cached block goes to a *new* slot (copy on
//! write); the superseded slot is cleared only after the new one is fenced, and
//! at recovery the valid slot with the higher sequence wins. A slot is freed
//! (its entry cleared and fenced) only after the segment write that destaged it
//! is durable on the device, so a valid slot is never older than the block's
//! copy on disk.

use crate::device::DeviceError;
use crate::ntl::Region;

/// `CAIRNNV1`: the NV cache header.
pub const NV_MAGIC: [u8; 8] = *b"CAIRNNV1";
const NV_VERSION: u32 = 1;
const HEADER: u64 = 64;
const TABLE_AT: u64 = 4096;
const ENTRY: u64 = 32;

/// Why an NV cache region could not be used.
#[derive(Debug, thiserror::Error)]
pub enum NvError {
    /// The region is too small for even one slot.
    #[error("NV cache region of {len} bytes holds no {block_size}-byte slot")]
    TooSmall {
        /// Region bytes.
        len: u64,
        /// Block size.
        block_size: u32,
    },
    /// No NV cache header: never formatted, or the region was lost (a tmpfs
    /// file after a reboot); writes acknowledged only to it are gone.
    #[error(
        "NV cache region has no cache header (never formatted, or lost: writes acknowledged only to it are gone)"
    )]
    Missing,
    /// The header is damaged or belongs to another volume or geometry.
    #[error("NV cache header: {0}")]
    Header(String),
    /// Region I/O failed.
    #[error(transparent)]
    Device(#[from] DeviceError),
}

/// One valid slot found at recovery.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Recovered {
    /// Slot index.
    pub slot: u32,
    /// Logical block it holds.
    pub logical: u64,
    /// Sequence of the write.
    pub sequence: u64,
    /// CRC32C of its data.
    pub crc: u32,
}

/// The slot layer over a region: encoding, persistence order, recovery scan.
/// Which slots are free, and which logical block each holds, is kept by the
/// log disk in DRAM (rebuilt from [`NvCache::scan`] at open).
pub struct NvCache {
    region: Box<dyn Region>,
    block_size: u32,
    slots: u32,
    data_at: u64,
}

fn layout(len: u64, block_size: u32) -> Option<(u32, u64)> {
    let b = u64::from(block_size);
    // slots·(B + 32) + TABLE_AT + padding ≤ len
    let room = len.checked_sub(TABLE_AT + 4096)?;
    let slots = (room / (b + ENTRY)).min(u64::from(u32::MAX - 1)) as u32;
    if slots == 0 {
        return None;
    }
    let data_at = (TABLE_AT + u64::from(slots) * ENTRY).div_ceil(4096) * 4096;
    (data_at + u64::from(slots) * b <= len).then_some((slots, data_at))
}

fn header(block_size: u32, slots: u32, volume: u64) -> [u8; HEADER as usize] {
    let mut h = [0u8; HEADER as usize];
    h[..8].copy_from_slice(&NV_MAGIC);
    h[8..12].copy_from_slice(&NV_VERSION.to_le_bytes());
    h[12..16].copy_from_slice(&block_size.to_le_bytes());
    h[16..20].copy_from_slice(&slots.to_le_bytes());
    h[24..32].copy_from_slice(&volume.to_le_bytes());
    let crc = crc32c::crc32c(&h[..60]);
    h[60..64].copy_from_slice(&crc.to_le_bytes());
    h
}

/// Bytes of the region header.
pub const HEADER_BYTES: usize = HEADER as usize;

/// The region header's fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegionHeader {
    /// Bytes per slot: the log disk's block size.
    pub block_size: u32,
    /// Slots in the region.
    pub slots: u32,
    /// The volume's identity (the log disk superblock's `id`).
    pub volume: u64,
}

/// Encodes the region header.
pub fn encode_header(fields: &RegionHeader) -> [u8; HEADER_BYTES] {
    let h = header(fields.block_size, fields.slots, fields.volume);
    // Paired with the decoder: the bytes leave only if they read back as `fields`.
    strict_assert!(
        h[20..24].iter().chain(&h[32..60]).all(|&b| b == 0),
        "NV header: reserved bytes written"
    );
    strict_assert_eq!(
        decode_header(&h, fields.block_size, fields.volume).ok(),
        Some(*fields),
        "NV header does not decode back"
    );
    h
}

/// Decodes the region header `h` of a cache for `block_size`-byte blocks of
/// volume `volume`, or says why it is not such a cache's header (whether its
/// slots fit the region is the caller's check).
pub fn decode_header(
    h: &[u8; HEADER_BYTES],
    block_size: u32,
    volume: u64,
) -> Result<RegionHeader, NvError> {
    if h[..8] != NV_MAGIC {
        return Err(NvError::Missing);
    }
    let want = header(
        block_size,
        u32::from_le_bytes([h[16], h[17], h[18], h[19]]),
        volume,
    );
    if *h != want {
        let stored_crc = u32::from_le_bytes([h[60], h[61], h[62], h[63]]);
        let reason = if crc32c::crc32c(&h[..60]) != stored_crc {
            "checksum mismatch (corrupted)".to_string()
        } else if h[12..16] != want[12..16] {
            format!(
                "block size {} recorded, the volume uses {block_size}",
                u32::from_le_bytes([h[12], h[13], h[14], h[15]])
            )
        } else if h[24..32] != want[24..32] {
            "it belongs to another volume (volume id differs)".to_string()
        } else {
            "unknown version or fields".to_string()
        };
        return Err(NvError::Header(reason));
    }
    Ok(RegionHeader {
        block_size,
        slots: u32::from_le_bytes([h[16], h[17], h[18], h[19]]),
        volume,
    })
}

/// Bytes of a slot entry (a slot's header in the slot table, which gives each
/// slot 32 bytes; the last 8 are unused).
pub const SLOT_ENTRY_BYTES: usize = 24;

/// A slot entry: which write the slot's data is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotEntry {
    /// Sequence of the write; never 0, which marks an empty slot.
    pub sequence: u64,
    /// Logical block the slot holds.
    pub logical: u64,
    /// CRC32C of the slot's data.
    pub crc: u32,
}

/// Encodes a slot entry: sequence, logical block, data CRC32C, and the
/// entry's own CRC32C.
pub fn encode_slot_entry(entry: &SlotEntry) -> [u8; SLOT_ENTRY_BYTES] {
    let e = entry_bytes(entry.sequence, entry.logical, entry.crc);
    // Paired with the decoder (once per staged block, so strict builds only);
    // a sequence of 0 would read back as an empty slot, the write lost.
    strict_assert_eq!(
        decode_slot_entry(&e),
        Some(*entry),
        "NV slot entry does not decode back"
    );
    e
}

/// Decodes a slot entry: `None` for an empty slot (sequence 0) or one whose
/// entry CRC does not match (written partly, so never acknowledged). Whether
/// the slot's data matches the entry's data CRC is the caller's check.
pub fn decode_slot_entry(e: &[u8; SLOT_ENTRY_BYTES]) -> Option<SlotEntry> {
    let sequence = u64::from_le_bytes(e[..8].try_into().unwrap_or_default());
    if sequence == 0 {
        return None;
    }
    let logical = u64::from_le_bytes(e[8..16].try_into().unwrap_or_default());
    let crc = u32::from_le_bytes(e[16..20].try_into().unwrap_or_default());
    let ecrc = u32::from_le_bytes(e[20..24].try_into().unwrap_or_default());
    if crc32c::crc32c(&e[..20]) != ecrc {
        return None;
    }
    Some(SlotEntry {
        sequence,
        logical,
        crc,
    })
}

fn entry_bytes(sequence: u64, logical: u64, crc: u32) -> [u8; 24] {
    let mut e = [0u8; 24];
    e[..8].copy_from_slice(&sequence.to_le_bytes());
    e[8..16].copy_from_slice(&logical.to_le_bytes());
    e[16..20].copy_from_slice(&crc.to_le_bytes());
    let ecrc = crc32c::crc32c(&e[..20]);
    e[20..24].copy_from_slice(&ecrc.to_le_bytes());
    e
}

impl NvCache {
    /// Formats `region` as an empty cache for `block_size`-byte blocks of
    /// volume `volume`.
    pub fn format(region: Box<dyn Region>, block_size: u32, volume: u64) -> Result<Self, NvError> {
        let (slots, data_at) = layout(region.len(), block_size).ok_or(NvError::TooSmall {
            len: region.len(),
            block_size,
        })?;
        // Clear every entry first, then publish the header.
        let zero = [0u8; 4096];
        let table_end = TABLE_AT + u64::from(slots) * ENTRY;
        let mut at = TABLE_AT;
        while at < table_end {
            let n = (table_end - at).min(4096);
            region.write(at, &zero[..n as usize])?;
            at += n;
        }
        region.flush(&[(TABLE_AT, table_end - TABLE_AT)])?;
        region.fence()?;
        region.write(
            0,
            &encode_header(&RegionHeader {
                block_size,
                slots,
                volume,
            }),
        )?;
        region.flush(&[(0, HEADER)])?;
        region.fence()?;
        Ok(Self {
            region,
            block_size,
            slots,
            data_at,
        })
    }

    /// Opens a formatted cache of volume `volume`.
    pub fn open(region: Box<dyn Region>, block_size: u32, volume: u64) -> Result<Self, NvError> {
        let mut h = [0u8; HEADER as usize];
        if region.len() < HEADER {
            return Err(NvError::TooSmall {
                len: region.len(),
                block_size,
            });
        }
        region.read(0, &mut h)?;
        let slots = decode_header(&h, block_size, volume)?.slots;
        match layout(region.len(), block_size) {
            Some((fit, data_at)) if fit == slots => Ok(Self {
                region,
                block_size,
                slots,
                data_at,
            }),
            _ => Err(NvError::Header(format!(
                "{slots} slots recorded do not fit a region of {} bytes",
                region.len()
            ))),
        }
    }

    /// Number of block slots.
    pub fn slots(&self) -> u32 {
        self.slots
    }

    /// The region's description.
    pub fn describe(&self) -> String {
        self.region.describe()
    }

    fn entry_at(slot: u32) -> u64 {
        TABLE_AT + u64::from(slot) * ENTRY
    }

    fn data_range(&self, slot: u32) -> (u64, u64) {
        let b = u64::from(self.block_size);
        (self.data_at + u64::from(slot) * b, b)
    }

    /// Stores `data` and its entry in `slot`, durable after the next
    /// [`NvCache::persist`]: the data already flushed (on a mapping with
    /// cache-line persistence, non-temporal stores: one pass, nothing left to
    /// write back) or, where a flush is a system call that waits for a disk
    /// (`msync`), its range appended to `ranges` with the entry's, so that
    /// the whole batch persists in one call.
    pub fn stage(
        &self,
        slot: u32,
        logical: u64,
        sequence: u64,
        crc: u32,
        data: &[u8],
        ranges: &mut Vec<(u64, u64)>,
    ) -> Result<(), DeviceError> {
        assert!(slot < self.slots(), "slot {slot} of {}", self.slots());
        strict_assert!(sequence > 0, "a staged slot has a sequence (0 means free)");
        let (at, len) = self.data_range(slot);
        debug_assert_eq!(data.len() as u64, len);
        if self.region.flush_is_sync() {
            // Persisted with the entries, in the same system call.
            self.region.write(at, data)?;
            ranges.push((at, len));
        } else {
            self.region.write_flushed(at, data)?;
        }
        let e = Self::entry_at(slot);
        self.region.write(
            e,
            &encode_slot_entry(&SlotEntry {
                sequence,
                logical,
                crc,
            }),
        )?;
        ranges.push((e, 24));
        Ok(())
    }

    /// Clears `slot`'s entry (not yet durable); its range is appended to `ranges`.
    pub fn stage_clear(&self, slot: u32, ranges: &mut Vec<(u64, u64)>) -> Result<(), DeviceError> {
        assert!(slot < self.slots(), "slot {slot} of {}", self.slots());
        let e = Self::entry_at(slot);
        self.region.store_u64(e, 0)?;
        ranges.push((e, 8));
        Ok(())
    }

    /// Whether writes are made durable by [`NvCache::sync`] rather than by
    /// [`NvCache::persist`] one at a time: a region whose flush is a system
    /// call waiting for a disk (`msync` of a file). Then a write is durable
    /// at the next sync — the log disk's flush (NBD's FLUSH, and FUA), or
    /// before any slot is cleared — and a stream of writes costs one disk
    /// flush per FLUSH, not one per write.
    pub fn defers(&self) -> bool {
        self.region.flush_is_sync()
    }

    /// Makes every store so far durable: the whole region flushed (for a
    /// page-cache mapping, one `msync` that writes only its dirty pages).
    pub fn sync(&self) -> Result<(), DeviceError> {
        self.region.flush(&[(0, self.region.len())])?;
        self.region.fence()
    }

    /// Makes everything staged durable: flush the ranges, fence once (the
    /// fence also completes the data flushes [`NvCache::stage`] issued).
    pub fn persist(&self, ranges: &[(u64, u64)]) -> Result<(), DeviceError> {
        if ranges.is_empty() {
            return Ok(());
        }
        strict_assert!(
            ranges
                .iter()
                .all(|&(at, len)| len > 0 && at + len <= self.region.len())
        );
        self.region.flush(ranges)?;
        self.region.fence()
    }

    /// Reads `slot`'s data.
    pub fn read(&self, slot: u32, buf: &mut [u8]) -> Result<(), DeviceError> {
        assert!(slot < self.slots(), "slot {slot} of {}", self.slots());
        let (at, len) = self.data_range(slot);
        debug_assert_eq!(buf.len() as u64, len);
        self.region.read(at, buf)
    }

    /// Every valid slot (entry CRC and data CRC match), in slot order.
    pub fn scan(&self) -> Result<Vec<Recovered>, DeviceError> {
        let mut found = Vec::new();
        let mut data = vec![0u8; self.block_size as usize];
        let mut e = [0u8; 24];
        for slot in 0..self.slots {
            self.region.read(Self::entry_at(slot), &mut e)?;
            let Some(SlotEntry {
                sequence,
                logical,
                crc,
            }) = decode_slot_entry(&e)
            else {
                continue;
            };
            self.read(slot, &mut data)?;
            if super::format::crc32c(&data) != crc {
                continue;
            }
            found.push(Recovered {
                slot,
                logical,
                sequence,
                crc,
            });
        }
        Ok(found)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ntl::SimRegion;

    #[test]
    fn slots_round_trip_and_survive_reopen() {
        let region = std::sync::Arc::new(SimRegion::new(64 * 1024));
        let nv = NvCache::format(Box::new(region.clone()), 4096, 7).unwrap();
        assert!(nv.slots() >= 10, "{}", nv.slots());
        let data = vec![0x5au8; 4096];
        let mut ranges = Vec::new();
        nv.stage(3, 42, 9, crc32c::crc32c(&data), &data, &mut ranges)
            .unwrap();
        nv.persist(&ranges).unwrap();
        let nv = NvCache::open(Box::new(region.clone()), 4096, 7).unwrap();
        let found = nv.scan().unwrap();
        assert_eq!(found.len(), 1);
        assert_eq!(
            (found[0].slot, found[0].logical, found[0].sequence),
            (3, 42, 9)
        );
        assert!(matches!(
            NvCache::open(Box::new(region.clone()), 4096, 8),
            Err(NvError::Header(r)) if r.contains("another volume")
        ));
        assert!(matches!(
            NvCache::open(Box::new(SimRegion::new(64 * 1024)), 4096, 7),
            Err(NvError::Missing)
        ));
    }

    /// A slot entry and a region header decode back to what was encoded,
    /// and with any one byte flipped decode as nothing (an empty slot, a
    /// refused header), never as another value.
    #[test]
    fn slot_entries_and_headers_round_trip_and_no_flip_decodes_as_another_value() {
        let entry = SlotEntry {
            sequence: 9,
            logical: 42,
            crc: 0xdead_beef,
        };
        let e = encode_slot_entry(&entry);
        assert_eq!(decode_slot_entry(&e), Some(entry));
        for at in 0..e.len() {
            let mut flipped = e;
            flipped[at] ^= 0x5a;
            assert_eq!(decode_slot_entry(&flipped), None, "flip at byte {at}");
        }
        let header = RegionHeader {
            block_size: 4096,
            slots: 75,
            volume: 7,
        };
        let h = encode_header(&header);
        assert_eq!(decode_header(&h, 4096, 7).ok(), Some(header));
        for at in 0..h.len() {
            let mut flipped = h;
            flipped[at] ^= 0x5a;
            assert!(
                decode_header(&flipped, 4096, 7).is_err(),
                "flip at byte {at}"
            );
        }
    }

    #[test]
    fn a_slot_whose_data_was_not_persisted_is_ignored() {
        let region = std::sync::Arc::new(SimRegion::new(64 * 1024));
        let nv = NvCache::format(Box::new(region.clone()), 4096, 1).unwrap();
        let data = vec![1u8; 4096];
        let mut ranges = Vec::new();
        nv.stage(0, 5, 3, crc32c::crc32c(&data), &data, &mut ranges)
            .unwrap();
        // Persist only the entry, then lose everything unfenced.
        nv.persist(&ranges[1..]).unwrap();
        region.crash(1);
        let nv = NvCache::open(Box::new(region), 4096, 1).unwrap();
        assert!(nv.scan().unwrap().is_empty());
    }
}
