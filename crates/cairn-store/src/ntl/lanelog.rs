//! The lane log (image version 2): one persistence round trip per atomic write.
//!
//! Version 1 made a write durable in two round trips: the data, fence, then the
//! map entry, fence. On this machine the second one (write-back of the entry's
//! line after the data had drained) was the whole price of atomicity: 31 % of a
//! 4 KiB random write, where skipping it cost nothing measurable. Version 2
//! persists the data and a 64-byte record naming it in the same fence epoch:
//!
//! 1. copy the data to a free block (non-temporal stores), computing its CRC32C;
//! 2. write the record `{seq, lba, old entry, new block, data CRC}` to the lane's
//!    next slot (one 64-byte line), and write back the map entry line of the
//!    lane's previous write (see 4);
//! 3. fence: data, record and that earlier entry are durable together;
//! 4. store the new map entry (not written back yet: the lane's next write, or
//!    [`super::Btt::flush`], writes it back).
//!
//! A crash before 3 completes may leave the record durable and the data not
//! (nothing orders them within an epoch), which is what the data CRC is for:
//! at open, [`replay`] applies each lane's records oldest first, setting `lba`'s
//! entry to `new` when it still holds `old` and the block at `new` matches the
//! CRC. A record stays in its slot until the lane's write after next, and the
//! entry it names is durable before then (step 2 of the next write), so no
//! entry is lost when its record is overwritten. The block an overwrite
//! replaced may be reused as soon as the new entry is stored: if the entry is
//! not durable at a crash, the record still redirects it.
//!
//! Layout: `STRIPES` lanes × 2 slots × 64 bytes, after the data blocks. A slot:
//!
//! ```text
//! 0   8  seq (u64 LE; the lane's write count, from 1; 0 = empty slot)
//! 8   8  lba (u64 LE)
//! 16  8  old map entry (u64 LE, the raw entry: 0 = unmapped)
//! 24  8  new data block (u64 LE; u64::MAX = unmapped: a trim record)
//! 32  4  CRC32C of the new block's data (u32 LE; 0 in a trim record)
//! 36 24  reserved, zero
//! 60  4  CRC32C of bytes 0..60 (u32 LE)
//! ```
//!
//! # Invariants
//!
//! Of each record, checked by [`verify`] in this order, with these numbers in
//! its messages (an image at rest: after an open, or between writes). A
//! record is a slot that [`Record::decode`] accepts (`seq ≥ 1`, its CRC32C
//! matching, its reserved bytes zero); any other slot is empty or torn by a
//! crash, and replay ignores it.
//!
//! 1. A record's `lba` is a logical block (`< lbas`).
//! 2. It lies in its own lane's slot: lane `lba % LANES`, slot `seq % SLOTS`.
//! 3. Its `new` is a data block (`< data_blocks`), or [`TRIMMED`] with a zero
//!    data CRC.
//! 4. Its `old` is a valid map entry (unmapped, or a data block).
//! 5. A lane's two records, when both are present, are consecutive writes
//!    (their `seq` differ by one).
//!
//! [`Record::encode`] checks its own output before the bytes leave
//! (`strict_assert!`): reserved bytes zero and `decode(encode(x)) == x`.

use crc_fast::{CrcAlgorithm, Digest};

use super::layout::{Geometry, INFO_LEN, LANES, LOG_LEN, RECORD, SLOTS};
use super::map;
use super::region::Region;
use crate::device::DeviceError;

/// `new` of a trim record: the block became unmapped. Without it, replay could
/// redo an older record that mapped the block from unmapped over the trim.
pub const TRIMMED: u64 = u64::MAX;

/// One lane log record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record {
    /// The lane's write count (from 1).
    pub seq: u64,
    /// Logical block written.
    pub lba: u64,
    /// Its map entry before the write (raw; 0 = unmapped).
    pub old: u64,
    /// The data block it now maps to.
    pub new: u64,
    /// CRC32C of the data in `new`.
    pub data_crc: u32,
}

impl Record {
    /// The record as stored.
    pub fn encode(&self) -> [u8; 64] {
        let mut b = [0u8; 64];
        b[0..8].copy_from_slice(&self.seq.to_le_bytes());
        b[8..16].copy_from_slice(&self.lba.to_le_bytes());
        b[16..24].copy_from_slice(&self.old.to_le_bytes());
        b[24..32].copy_from_slice(&self.new.to_le_bytes());
        b[32..36].copy_from_slice(&self.data_crc.to_le_bytes());
        let crc = crc32c::crc32c(&b[..60]);
        b[60..64].copy_from_slice(&crc.to_le_bytes());
        strict_assert!(
            b[36..60].iter().all(|&x| x == 0),
            "lane record encode: reserved bytes not zero"
        );
        strict_assert_eq!(
            Self::decode(&b),
            (self.seq != 0).then_some(*self),
            "lane record encode: decode(encode(x)) != x"
        );
        b
    }

    /// A stored record, or `None` for an empty slot or one whose CRC fails (a
    /// torn record: its write never completed, so nothing depends on it).
    ///
    /// Public for the fuzz target `ntl_lanelog`: it never panics, whatever
    /// the bytes.
    pub fn decode(b: &[u8; 64]) -> Option<Self> {
        let word = |at: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[at..at + 8]);
            u64::from_le_bytes(w)
        };
        let half = |at: usize| {
            let mut w = [0u8; 4];
            w.copy_from_slice(&b[at..at + 4]);
            u32::from_le_bytes(w)
        };
        let seq = word(0);
        if seq == 0 || half(60) != crc32c::crc32c(&b[..60]) || b[36..60].iter().any(|&x| x != 0) {
            return None;
        }
        Some(Self {
            seq,
            lba: word(8),
            old: word(16),
            new: word(24),
            data_crc: half(32),
        })
    }
}

/// CRC32C of a block's data, accumulated piece by piece (crc-fast: folding
/// with carry-less multiplies, 52 ns per 4 KiB here against 180 ns for the
/// `crc32` instruction).
pub struct DataCrc(Digest);

impl DataCrc {
    /// An empty checksum.
    pub fn new() -> Self {
        Self(Digest::new(CrcAlgorithm::Crc32Iscsi))
    }

    /// Adds `data`.
    pub fn update(&mut self, data: &[u8]) {
        self.0.update(data);
    }

    /// The CRC32C of everything added.
    pub fn finish(&self) -> u32 {
        self.0.finalize() as u32
    }
}

impl Default for DataCrc {
    fn default() -> Self {
        Self::new()
    }
}

/// Offset of lane `lane`'s slot for its write number `seq`.
pub fn slot_offset(log_base: u64, lane: u64, seq: u64) -> u64 {
    assert!(lane < LANES, "lane {lane} of {LANES}");
    log_base + (lane * SLOTS + seq % SLOTS) * RECORD
}

/// Checks every slot of the lane log against the invariants at the head of
/// this file, in their order: the first broken one is named by its number.
/// Returns the newest record's `seq` of each lane (0 for a lane with none).
pub fn verify<R: Region + ?Sized>(region: &R, geo: &Geometry) -> Result<Vec<u64>, String> {
    let broken = |n: u32, lane: u64, slot: u64, what: String| {
        Err(format!(
            "NTL lane log invariant {n} broken: lane {lane} slot {slot}: {what}"
        ))
    };
    let mut newest = vec![0u64; LANES as usize];
    for lane in 0..LANES {
        let mut seqs = Vec::with_capacity(SLOTS as usize);
        for slot in 0..SLOTS {
            let mut raw = [0u8; RECORD as usize];
            region
                .read(geo.log_base() + (lane * SLOTS + slot) * RECORD, &mut raw)
                .map_err(|e| e.to_string())?;
            let Some(r) = Record::decode(&raw) else {
                continue;
            };
            if r.lba >= geo.lbas {
                return broken(1, lane, slot, format!("lba {} of {}", r.lba, geo.lbas));
            }
            if r.lba % LANES != lane || r.seq % SLOTS != slot {
                return broken(2, lane, slot, format!("record {r:?} belongs elsewhere"));
            }
            if !(r.new < geo.data_blocks || (r.new == TRIMMED && r.data_crc == 0)) {
                return broken(3, lane, slot, format!("new block {:#x}", r.new));
            }
            if map::decode(r.old, geo.data_blocks).is_err() {
                return broken(4, lane, slot, format!("old entry {:#x}", r.old));
            }
            seqs.push(r.seq);
        }
        if let [a, b] = seqs[..]
            && a.abs_diff(b) != 1
        {
            return broken(5, lane, 0, format!("records of writes {a} and {b}"));
        }
        newest[lane as usize] = seqs.iter().copied().max().unwrap_or(0);
    }
    Ok(newest)
}

/// Empties every slot (zeros, written back, fenced): at format, and at open
/// after [`replay`].
pub fn clear<R: Region + ?Sized>(region: &R, geo: &Geometry) -> Result<(), DeviceError> {
    strict_assert!(
        geo.log_base() + LOG_LEN <= region.len(),
        "lane log past the region's end"
    );
    let zero = [0u8; RECORD as usize];
    for slot in 0..LOG_LEN / RECORD {
        region.write(geo.log_base() + slot * RECORD, &zero)?;
    }
    region.flush(&[(geo.log_base(), LOG_LEN)])?;
    region.fence()
}

/// What [`replay`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Replay {
    /// Valid records found (applied or not).
    pub records: usize,
    /// Entries the records redirect: `(lba, new raw entry)`, in the order
    /// applied.
    pub redo: Vec<(u64, u64)>,
}

/// Reads every lane's records and applies them oldest first, each when its
/// block still holds `old` and the data at `new` matches its CRC (see the
/// module comment). With `apply` the entries are stored, written back and
/// fenced; without (fsck) the region is only read and the result says what
/// would change.
pub fn replay<R: Region + ?Sized>(
    region: &R,
    geo: &Geometry,
    apply: bool,
) -> Result<Replay, DeviceError> {
    let (log_base, map_base, data_base) = (geo.log_base(), INFO_LEN, geo.data_base());
    let (lbas, block_size, data_blocks) = (geo.lbas, geo.block_size, geo.data_blocks);
    let mut out = Replay::default();
    let mut pending: Vec<(u64, u64)> = Vec::new();
    let mut block = vec![0u8; block_size as usize];
    for lane in 0..LANES {
        let mut records: Vec<Record> = Vec::with_capacity(SLOTS as usize);
        for slot in 0..SLOTS {
            let mut raw = [0u8; 64];
            region.read(log_base + (lane * SLOTS + slot) * RECORD, &mut raw)?;
            if let Some(r) = Record::decode(&raw) {
                out.records += 1;
                // A record of another lane's block, or out of range, was not
                // written by this layer: ignore it.
                if r.lba < lbas
                    && r.lba % LANES == lane
                    && (r.new < data_blocks || r.new == TRIMMED)
                {
                    records.push(r);
                }
            }
        }
        records.sort_by_key(|r| r.seq);
        for r in records {
            let at = map_base + r.lba * 8;
            let current = match pending.iter().rev().find(|&&(l, _)| l == r.lba) {
                Some(&(_, e)) => e,
                None => region.load_u64(at)?,
            };
            if current != r.old {
                continue;
            }
            let entry = if r.new == TRIMMED {
                0
            } else {
                region.read(data_base + r.new * block_size, &mut block)?;
                let mut crc = DataCrc::new();
                crc.update(&block);
                if crc.finish() != r.data_crc {
                    continue;
                }
                map::encode(r.new)
            };
            pending.push((r.lba, entry));
            out.redo.push((r.lba, entry));
        }
    }
    if apply && !pending.is_empty() {
        for &(lba, entry) in &pending {
            strict_assert!(
                lba < lbas && map::decode(entry, data_blocks).is_ok(),
                "replay would store {entry:#x} for lba {lba}"
            );
            region.store_u64_flushed(map_base + lba * 8, entry)?;
        }
        region.fence()?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_every_flip_is_refused() {
        let r = Record {
            seq: 7,
            lba: 300,
            old: map::encode(12),
            new: 99,
            data_crc: 0xdead_beef,
        };
        let b = r.encode();
        assert_eq!(Record::decode(&b), Some(r));
        assert_eq!(Record::decode(&[0u8; 64]), None, "an empty slot");
        for i in 0..64 {
            for bit in 0..8 {
                let mut c = b;
                c[i] ^= 1 << bit;
                assert_eq!(Record::decode(&c), None, "flip byte {i} bit {bit}");
            }
        }
    }

    #[test]
    fn data_crc_is_crc32c_in_pieces() {
        let data: Vec<u8> = (0..4096u32).map(|i| (i * 13) as u8).collect();
        let mut crc = DataCrc::new();
        crc.update(&data[..100]);
        crc.update(&data[100..]);
        assert_eq!(crc.finish(), crc32c::crc32c(&data));
    }

    #[test]
    fn verify_names_the_broken_invariant() {
        use crate::ntl::SimRegion;
        let geo = Geometry {
            block_size: 64,
            lbas: 600,
            data_blocks: 700,
        };
        let region = SimRegion::new(geo.region_len());
        let put = |lane: u64, r: Record| {
            region
                .write(slot_offset(geo.log_base(), lane, r.seq), &r.encode())
                .expect("write");
        };
        let good = Record {
            seq: 3,
            lba: 258,
            old: map::encode(12),
            new: 99,
            data_crc: 7,
        };
        put(2, good);
        put(2, Record { seq: 4, ..good });
        assert_eq!(verify(&region, &geo).expect("valid")[2], 4);
        let broken = |lane: u64, r: Record| {
            clear(&region, &geo).expect("clear");
            put(lane, r);
            verify(&region, &geo).expect_err("broken")
        };
        assert!(
            broken(
                2,
                Record {
                    lba: 600 + 2,
                    ..good
                }
            )
            .contains("invariant 1 ")
        );
        assert!(
            broken(3, good).contains("invariant 2 "),
            "another lane's slot"
        );
        assert!(broken(2, Record { new: 700, ..good }).contains("invariant 3 "));
        assert!(
            broken(
                2,
                Record {
                    new: TRIMMED,
                    ..good
                }
            )
            .contains("invariant 3 "),
            "a trim record with a data CRC"
        );
        assert!(broken(2, Record { old: 5, ..good }).contains("invariant 4 "));
        clear(&region, &geo).expect("clear");
        put(2, good);
        put(2, Record { seq: 6, ..good });
        assert!(
            verify(&region, &geo)
                .expect_err("broken")
                .contains("invariant 5 ")
        );
    }
}
