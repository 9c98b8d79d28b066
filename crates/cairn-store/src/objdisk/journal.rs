//! The local write log: a FLUSH is durable once the writes before it are
//! here (`flush = "local"`), long before their segment is in the store.
//!
//! A ring of *batches* on a local device, one batch per flush (or several,
//! for a large one): header blocks listing each write (block, the segment
//! its data went into, its CRC32C) or trim, then the written blocks. A
//! batch pins its space until every segment it names is durable in the
//! store; a full ring makes the flush seal the open segment and wait for
//! uploads (back-pressure).
//!
//! Block 0 is the superblock: the volume, the generation that wrote the log,
//! and the *tail* — where the oldest batch still needed starts, with its
//! number. Recovery walks the batches from the tail, each the next number,
//! at the end of the one before or (wrapped) at block 1, until a header or a
//! data block fails its check: a torn batch is a flush that was never
//! acknowledged. The superblock is made durable before space behind the old
//! tail is written again, so the walk never meets an overwritten batch
//! before the newest one.
//!
//! ```text
//! superblock (block 0)
//!  0       8       12      16              24              32              40              48
//!  | magic | vers. | crc   | volume id     | generation    | tail (bytes)  | tail batch no.|
//!  "CAIRNOBJ" u32=1  u32
//! batch header (whole blocks; entries continue over them)
//!  0       8       12      16              24              32              40      44      48
//!  | magic | vers. | crc   | volume id     | generation    | batch no.     | count | hdr b.| max segment   | entries…
//!  "CAIRNOBB"                                                                u32     u32     u64 (at 48)
//! entry (24 bytes): block u64 | segment u64 | crc u32 (write) or 0 | blocks u32 (0: a write; n: a trim of n)
//! ```

use std::collections::VecDeque;
use std::sync::Arc;

use crate::codec::{self, crc32c, put_u32, put_u64, u32_at, u64_at};
use crate::device::{Device, DeviceError, IoBuf};

const VERSION: u32 = 1;
const SUPER_MAGIC: [u8; 8] = *b"CAIRNOBJ";
const BATCH_MAGIC: [u8; 8] = *b"CAIRNOBB";
const BATCH_FIXED: usize = 56;
const ENTRY: usize = 24;

/// One thing a batch records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Record {
    /// A block's data, written into segment `segment`.
    Write { block: u64, segment: u64, crc: u32 },
    /// A trim of `blocks` blocks from `block`, recorded in segment
    /// `segment`.
    Trim {
        block: u64,
        blocks: u32,
        segment: u64,
    },
}

impl Record {
    fn segment(&self) -> u64 {
        match *self {
            Self::Write { segment, .. } | Self::Trim { segment, .. } => segment,
        }
    }
}

/// A batch in the ring, still needed.
#[derive(Clone, Copy, Debug)]
struct Live {
    offset: u64,
    len: u64,
    number: u64,
    /// The newest segment it names: it is needed until that is durable.
    max_segment: u64,
}

/// Records in order, each write with its data.
pub(crate) type Records = Vec<(Record, Option<Vec<u8>>)>;

/// What [`Journal::open`] found to replay.
#[derive(Debug, Default)]
pub(crate) struct Replay {
    /// The generation that wrote it (0: a fresh log).
    pub generation: u64,
    /// Records in order, with the data of each write.
    pub records: Records,
    /// Batches read.
    pub batches: u64,
}

/// The write log on its device.
pub(crate) struct Journal {
    device: Arc<dyn Device>,
    bs: u64,
    volume_id: u64,
    generation: u64,
    /// Next write offset.
    head: u64,
    next_number: u64,
    live: VecDeque<Live>,
    /// Released batches still between the durable superblock's tail and
    /// the live ones: a walk passes them, so they are not written over
    /// until the superblock moves past them.
    behind: VecDeque<Live>,
    /// The tail the durable superblock names.
    durable_tail: (u64, u64),
    /// The last batch's buffer, reused (page-aligned: with 4 KiB blocks a
    /// batch can be written with `O_DIRECT` as it is).
    scratch: IoBuf,
}

impl std::fmt::Debug for Journal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Journal")
            .field("device", &self.device.describe())
            .field("head", &self.head)
            .field("live", &self.live.len())
            .finish_non_exhaustive()
    }
}

fn format_error(device: &dyn Device, detail: impl std::fmt::Display) -> DeviceError {
    DeviceError::Corrupt {
        op: crate::device::DeviceOp::Read,
        offset: 0,
        len: 0,
        detail: format!("{}: {detail}", device.describe()),
    }
}

impl Journal {
    /// Opens the log on `device` for volume `volume_id`: what it holds to
    /// replay (nothing when it is blank or was reset), and a log ready for
    /// generation `generation` once [`reset`](Journal::reset).
    pub(crate) fn open(
        device: Arc<dyn Device>,
        block_size: u32,
        volume_id: u64,
        generation: u64,
    ) -> Result<(Self, Replay), DeviceError> {
        let bs = u64::from(block_size);
        if device.len() < 8 * bs {
            return Err(format_error(
                device.as_ref(),
                format!(
                    "{} bytes is too small for a write log (at least 8 blocks)",
                    device.len()
                ),
            ));
        }
        let mut sb = vec![0u8; bs as usize];
        device.read_at(&mut sb, 0)?;
        let mut replay = Replay::default();
        let mut next_number = 1;
        let blank = sb.iter().all(|&b| b == 0);
        if !blank {
            codec::check(
                "write log superblock",
                &sb[..48],
                48,
                (SUPER_MAGIC, VERSION),
                12,
            )
            .map_err(|e| format_error(device.as_ref(), e))?;
            if u64_at(&sb, 16) != volume_id {
                return Err(format_error(
                    device.as_ref(),
                    format!(
                        "the write log belongs to volume {:#x}, not this one ({volume_id:#x})",
                        u64_at(&sb, 16)
                    ),
                ));
            }
            replay.generation = u64_at(&sb, 24);
            let (mut at, mut number) = (u64_at(&sb, 32), u64_at(&sb, 40));
            // Walk the chain.
            while let Some((len, records)) = read_batch(device.as_ref(), bs, at, volume_id, number)
                .or_else(|| {
                    read_batch(device.as_ref(), bs, bs, volume_id, number).inspect(|_| at = bs)
                })
            {
                replay.records.extend(records);
                replay.batches += 1;
                at += len;
                number += 1;
            }
            // Numbers go on from past the end of the chain (a torn batch
            // may hold `number`), so no old batch is ever taken for a new.
            next_number = number + 1;
        }
        let journal = Self {
            device,
            bs,
            volume_id,
            generation,
            head: bs,
            next_number,
            live: VecDeque::new(),
            behind: VecDeque::new(),
            durable_tail: (bs, 1),
            scratch: IoBuf::default(),
        };
        Ok((journal, replay))
    }

    /// Empties the log (after its records were replayed and their segments
    /// made durable, or at a clean stop): a superblock naming an empty
    /// tail, flushed.
    pub(crate) fn reset(&mut self) -> Result<(), DeviceError> {
        self.head = self.bs;
        self.live.clear();
        self.behind.clear();
        self.next_number += 1;
        self.write_super((self.bs, self.next_number))
    }

    fn write_super(&mut self, tail: (u64, u64)) -> Result<(), DeviceError> {
        let mut sb = vec![0u8; self.bs as usize];
        sb[..8].copy_from_slice(&SUPER_MAGIC);
        put_u32(&mut sb, 8, VERSION);
        put_u64(&mut sb, 16, self.volume_id);
        put_u64(&mut sb, 24, self.generation);
        put_u64(&mut sb, 32, tail.0);
        put_u64(&mut sb, 40, tail.1);
        codec::seal(&mut sb[..48], 12);
        self.device.write_at(&sb, 0)?;
        self.device.flush()?;
        self.durable_tail = tail;
        self.behind.clear();
        Ok(())
    }

    /// Forgets the batches whose segments are all durable (`durable`: the
    /// store holds every segment up to it).
    pub(crate) fn release(&mut self, durable: u64) {
        while let Some(b) = self
            .live
            .front()
            .filter(|b| b.max_segment <= durable)
            .copied()
        {
            self.live.pop_front();
            self.behind.push_back(b);
        }
    }

    /// Bytes a batch of `records` with `blocks` data blocks takes.
    fn batch_len(&self, records: usize, blocks: usize) -> u64 {
        let header = (BATCH_FIXED + records * ENTRY).div_ceil(self.bs as usize) as u64;
        (header + blocks as u64) * self.bs
    }

    /// The most records a batch may hold, so it fits a quarter of the ring.
    pub(crate) fn max_batch_blocks(&self) -> usize {
        let ring = self.device.len() / self.bs - 1;
        (ring / 4).max(2) as usize / 2
    }

    /// Where a batch of `len` bytes goes, if the ring has room: at the head,
    /// or wrapped to block 1. Whether the live batches wrap is read from
    /// the newest one's place, not from `head` against the tail: a ring
    /// filled exactly to its tail has the head *at* the tail, and is full.
    fn place(&self, len: u64) -> Option<u64> {
        let end = self.device.len() / self.bs * self.bs;
        let (Some(front), Some(back)) = (self.live.front(), self.live.back()) else {
            // Empty: anywhere; start over at block 1 if it does not fit.
            return Some(if self.head + len <= end {
                self.head
            } else {
                self.bs
            });
        };
        let tail = front.offset;
        if back.offset >= tail {
            // Not wrapped: live from the tail to the head; free from the
            // head to the end, then from block 1 to the tail.
            if self.head + len <= end {
                Some(self.head)
            } else if self.bs + len <= tail {
                Some(self.bs)
            } else {
                None
            }
        } else if self.head + len <= tail {
            // Wrapped: free only from the head to the tail.
            Some(self.head)
        } else {
            None
        }
    }

    /// Whether bytes `at .. at + len` overlap a batch a walk from the
    /// durable superblock's tail passes: a released one still behind it, or
    /// a live one.
    fn cuts_chain(&self, at: u64, len: u64) -> bool {
        self.behind
            .iter()
            .chain(&self.live)
            .any(|b| at < b.offset + b.len && b.offset < at + len)
    }

    /// Appends one batch and makes it durable. `None` when the ring has no
    /// room until more segments are durable (release, then try again).
    pub(crate) fn append(
        &mut self,
        records: &[Record],
        data: &[u8],
    ) -> Result<Option<()>, DeviceError> {
        let blocks = data.len() / self.bs as usize;
        let len = self.batch_len(records.len(), blocks);
        let Some(at) = self.place(len) else {
            return Ok(None);
        };
        // A walk from the durable superblock's tail passes every batch from
        // there to the head (released ones too: their records are in the
        // store, and replay skips them). Only a batch written over that
        // chain would cut the walk short: then the superblock first names
        // the oldest live batch. Batches written at the head leave it alone
        // (one superblock write a lap of the ring, not one a flush).
        if self.cuts_chain(at, len) {
            let tail = self
                .live
                .front()
                .map_or((at, self.next_number), |b| (b.offset, b.number));
            self.write_super(tail)?;
        }
        let header_len = (len as usize) - data.len();
        let mut buf = std::mem::take(&mut self.scratch);
        if buf.len() < len as usize {
            buf = IoBuf::zeroed((len as usize).next_multiple_of(1 << 20));
        }
        buf[..header_len].fill(0);
        buf[..8].copy_from_slice(&BATCH_MAGIC);
        put_u32(&mut buf, 8, VERSION);
        put_u64(&mut buf, 16, self.volume_id);
        put_u64(&mut buf, 24, self.generation);
        put_u64(&mut buf, 32, self.next_number);
        put_u32(&mut buf, 40, records.len() as u32);
        put_u32(&mut buf, 44, (header_len / self.bs as usize) as u32);
        let max_segment = records.iter().map(Record::segment).max().unwrap_or(0);
        put_u64(&mut buf, 48, max_segment);
        let mut e = BATCH_FIXED;
        for r in records {
            match *r {
                Record::Write {
                    block,
                    segment,
                    crc,
                } => {
                    put_u64(&mut buf, e, block);
                    put_u64(&mut buf, e + 8, segment);
                    put_u32(&mut buf, e + 16, crc);
                }
                Record::Trim {
                    block,
                    blocks,
                    segment,
                } => {
                    put_u64(&mut buf, e, block);
                    put_u64(&mut buf, e + 8, segment);
                    put_u32(&mut buf, e + 20, blocks);
                }
            }
            e += ENTRY;
        }
        codec::seal(&mut buf[..header_len], 12);
        buf[header_len..len as usize].copy_from_slice(data);
        let written = self.device.write_at(&buf[..len as usize], at);
        self.scratch = buf;
        written?;
        self.device.flush()?;
        self.live.push_back(Live {
            offset: at,
            len,
            number: self.next_number,
            max_segment,
        });
        self.head = at + len;
        self.next_number += 1;
        Ok(Some(()))
    }
}

/// The batch number `number` at `at`, if one is there whole: its length
/// and records.
fn read_batch(
    device: &dyn Device,
    bs: u64,
    at: u64,
    volume_id: u64,
    number: u64,
) -> Option<(u64, Records)> {
    if at + bs > device.len() {
        return None;
    }
    let mut first = vec![0u8; bs as usize];
    device.read_at(&mut first, at).ok()?;
    if first[..8] != BATCH_MAGIC || u64_at(&first, 32) != number || u64_at(&first, 16) != volume_id
    {
        return None;
    }
    let count = u32_at(&first, 40) as usize;
    let header_blocks = u64::from(u32_at(&first, 44));
    let header_len = (header_blocks * bs) as usize;
    if header_len < BATCH_FIXED + count * ENTRY || at + header_blocks * bs > device.len() {
        return None;
    }
    let mut header = vec![0u8; header_len];
    device.read_at(&mut header, at).ok()?;
    codec::check(
        "write log batch",
        &header,
        header_len,
        (BATCH_MAGIC, VERSION),
        12,
    )
    .ok()?;
    let mut records = Vec::with_capacity(count);
    let mut data_at = at + header_blocks * bs;
    for i in 0..count {
        let e = BATCH_FIXED + i * ENTRY;
        let (block, segment) = (u64_at(&header, e), u64_at(&header, e + 8));
        let trim = u32_at(&header, e + 20);
        if trim > 0 {
            records.push((
                Record::Trim {
                    block,
                    blocks: trim,
                    segment,
                },
                None,
            ));
            continue;
        }
        let crc = u32_at(&header, e + 16);
        if data_at + bs > device.len() {
            return None;
        }
        let mut data = vec![0u8; bs as usize];
        device.read_at(&mut data, data_at).ok()?;
        if crc32c(&data) != crc {
            // Torn: this flush was never acknowledged.
            return None;
        }
        data_at += bs;
        records.push((
            Record::Write {
                block,
                segment,
                crc,
            },
            Some(data),
        ));
    }
    Some((data_at - at, records))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::MemoryDevice;

    const BS: usize = 4096;

    fn write(block: u64, segment: u64) -> (Vec<Record>, Vec<u8>) {
        let data = vec![block as u8 + 1; BS];
        let crc = crc32c(&data);
        (
            vec![Record::Write {
                block,
                segment,
                crc,
            }],
            data,
        )
    }

    /// A ring filled exactly to its tail is full: the next batch waits, it
    /// does not overwrite the oldest live one; the walk after a reopen
    /// finds every live batch, in order, across the wrap.
    #[test]
    fn a_ring_full_to_its_tail_takes_nothing_more_and_replays_in_order() {
        // Superblock + 8 blocks of ring: four batches of one write (header +
        // data) fill it.
        let device: Arc<dyn Device> = Arc::new(MemoryDevice::new(9 * BS as u64));
        let (mut j, replay) = Journal::open(Arc::clone(&device), BS as u32, 7, 1).expect("open");
        assert!(replay.records.is_empty());
        j.reset().expect("reset");
        for segment in 1..=4 {
            let (r, d) = write(segment, segment);
            assert!(
                j.append(&r, &d).expect("append").is_some(),
                "batch {segment}"
            );
        }
        let (r, d) = write(5, 5);
        assert!(
            j.append(&r, &d).expect("append").is_none(),
            "the ring is full"
        );
        // Segment 1 is in the store: its batch's space is free again.
        j.release(1);
        assert!(
            j.append(&r, &d).expect("append").is_some(),
            "wrapped into block 1"
        );
        // The head is now at the oldest live batch (segment 2): full again.
        let (r6, d6) = write(6, 6);
        assert!(
            j.append(&r6, &d6).expect("append").is_none(),
            "full at the tail"
        );
        let (_, replay) = Journal::open(device, BS as u32, 7, 2).expect("reopen");
        let blocks: Vec<u64> = replay
            .records
            .iter()
            .map(|(r, _)| match r {
                Record::Write { block, .. } | Record::Trim { block, .. } => *block,
            })
            .collect();
        assert_eq!(blocks, [2, 3, 4, 5], "the live batches, oldest first");
        assert_eq!(replay.generation, 1);
    }

    #[test]
    fn a_log_of_another_volume_is_refused() {
        let device: Arc<dyn Device> = Arc::new(MemoryDevice::new(16 * BS as u64));
        let (mut j, _) = Journal::open(Arc::clone(&device), BS as u32, 7, 1).expect("open");
        j.reset().expect("reset");
        let err = Journal::open(device, BS as u32, 8, 1).expect_err("another volume");
        assert!(err.to_string().contains("belongs to volume"), "{err}");
    }
}
