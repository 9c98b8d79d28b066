//! The log head and the one way onto the log: [`Log::append`] writes one
//! segment write (a summary block and its data) at the head and records it
//! in the table. Users' writes and the cleaner's relocations both come
//! here, tagged by [`Kind`]; it never cleans, never flushes to make room and
//! never checkpoints — its callers make room before and do that after.

use std::sync::Arc;

use super::error::LogDiskError;
use super::flush::Core;
use super::format::{self, Geometry, Summary, SummaryEntry, Superblock};
use super::options::PartialSegments;
use super::table::block_of;
use super::writer::{Job, Moving, Queued};
use crate::device::{Device, IoBuf};
use crate::limits::WRITE_DEPTH;

/// Whose blocks a segment write carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    /// The client's (a destage, or a volatile segment buffer).
    User,
    /// Live blocks the cleaner relocates out of its victims.
    Cleaner,
}

/// The log head and the write sequence.
pub(super) struct Log {
    /// The open segment and its next free slot (where the next summary
    /// goes); `None` when no segment is open.
    pub head: Option<(u32, u32)>,
    /// The segment opened last: the next is the free one after it.
    pub last_opened: u32,
    /// The segment to open next, named in every summary written until then
    /// and in a checkpoint (recovery follows these links); free, or
    /// pending until the flush before it is opened. `None`: neither when it
    /// was chosen (recovery that comes to a summary without one reads every
    /// segment).
    pub pin: Option<u32>,
    /// The last sequence given to a write (an NV slot's or a segment
    /// write's).
    pub sequence: u64,
    /// Segment writes since the last checkpoint.
    pub since_checkpoint: u64,
    /// The newest checkpoint is marked closed (a clean close wrote it):
    /// recovery would read no segment, so no segment write may come before
    /// the next checkpoint.
    pub sealed: bool,
}

/// One segment write for [`Log::append`]: `entries` (data of entry `i` at
/// block `from + i + 1` of `buf`; the summary goes at block `from`).
pub(super) struct Append<'a> {
    pub entries: &'a [SummaryEntry],
    pub from: usize,
    pub buf: &'a mut IoBuf,
    pub kind: Kind,
    /// The caller's write ends here, short of its segment: counted as a
    /// partial segment write.
    pub partial: bool,
    /// Goes to the background writer (a user write's last, or a background
    /// cleaner pass's); otherwise written here, after everything queued.
    pub background: bool,
    /// The caller's last write from `buf`: a background write takes `buf`
    /// itself (the caller gets a spare) instead of a copy.
    pub last: bool,
    /// A destage: the data of block `i` is still in NV slot `slot` for each
    /// `(i, slot)`, copied into `buf` by whoever writes it.
    pub fill: Option<&'a mut Vec<(u32, u32)>>,
}

/// What a segment write needs of the disk.
pub(super) struct Target<'a, D> {
    pub dev: &'a Arc<D>,
    pub geo: &'a Geometry,
    pub superblock: &'a Superblock,
    pub partial: PartialSegments,
    pub writer_threads: u32,
}

impl Log {
    /// Blocks the next segment write can carry: the room left in the open
    /// segment, or a whole segment's (`segment_blocks − 1`) if none is open.
    pub fn room(&self, segment_blocks: u32) -> u32 {
        // An open head always has room: a segment is closed when full.
        strict_assert!(self.head.is_none_or(|(_, slot)| slot + 1 < segment_blocks));
        self.head
            .map_or(segment_blocks - 1, |(_, slot)| segment_blocks - slot - 1)
    }

    /// The head segment takes no more writes.
    pub fn close_head(&mut self, core: &mut Core) {
        if let Some((segment, _)) = self.head.take() {
            core.table.close(segment);
        }
    }

    /// Writes `a` as one segment write at the head — opening the next free
    /// segment if none is open — and records it: new sequence, map entries,
    /// live counts, counters. The entries must fit ([`Log::room`]); with no
    /// segment open, one must be free ([`LogDiskError::NoSpace`] otherwise).
    pub fn append<D: Device + 'static>(
        &mut self,
        core: &mut Core,
        to: &Target<'_, D>,
        write: Append<'_>,
    ) -> Result<(), LogDiskError> {
        // A write recovery would not look for: lost in a crash.
        assert!(
            !self.sealed,
            "a segment write after a closing checkpoint, before the next"
        );
        let geo = to.geo;
        let b = geo.block_size as usize;
        let n = geo.segment_blocks;
        let Append {
            entries,
            from: done,
            buf,
            kind,
            partial,
            background,
            last,
            fill,
        } = write;
        let (segment, slot) = if let Some(head) = self.head {
            head
        } else {
            let written = core.metrics.user_blocks_written + core.metrics.cleaner_blocks_written;
            let segment = core
                .table
                .open_segment(self.last_opened, written, self.pin)?;
            self.last_opened = segment;
            self.pin = core.table.pick_next(segment);
            self.head = Some((segment, 0));
            (segment, 0)
        };
        let room = (n - slot - 1) as usize;
        let k = entries.len();
        assert!(
            k > 0 && k <= room,
            "{k} blocks for the {room} left in segment {segment}"
        );
        assert!(
            buf.len() >= (done + k + 1) * b,
            "the write's buffer is short"
        );
        let is_partial = partial && k < room;
        // The paper's rule: a segment holds at most one write short of a
        // full segment, which closes it (cleaner writes included).
        let close = to.partial == PartialSegments::Close && kind == Kind::User && k < room;
        let before = self.sequence;
        self.sequence += 1;
        let sequence = self.sequence;
        assert!(sequence > before, "the write sequence wrapped");
        let summary = format::encode_summary(
            &Summary {
                sequence,
                segment,
                first_slot: slot,
                partial: is_partial,
                next: self.pin,
                entries: entries.to_vec(),
            },
            to.superblock,
        )?;
        // The summary goes in the block before this write's data (the
        // previous write's last block, already written).
        assert_eq!(summary.len(), b, "a summary is one block");
        buf[done * b..(done + 1) * b].copy_from_slice(&summary);
        let mut end = (done + k + 1) * b;
        if close {
            // The paper's LLD writes the whole segment buffer.
            let full = (done + room + 1) * b;
            buf[end..full].fill(0);
            end = full;
        }
        let offset = block_of(geo, segment, slot) * b as u64;
        let io_len = (end - done * b) as u64;
        // The write stays inside its segment.
        assert!(
            offset + io_len <= geo.segment_start(segment + 1) * b as u64,
            "segment write at {offset} of {io_len} bytes leaves segment {segment}"
        );
        let io = SegmentIo {
            from: done * b,
            to: end,
            offset,
            first: block_of(geo, segment, slot + 1),
            count: k,
            segment,
        };
        if background {
            Self::queue_write(core, to, buf, io, kind, last, fill)?;
        } else {
            Self::write_here(core, to, buf, io, fill)?;
        }
        core.metrics
            .count_segment_write(kind == Kind::User, k as u64, io_len, is_partial);
        core.table.place(segment, slot, entries, sequence);
        let next = if close { n } else { slot + 1 + k as u32 };
        strict_assert!(next <= n, "the head ran past its segment");
        if next + 1 >= n {
            self.head = None;
            core.table.close(segment);
        } else {
            self.head = Some((segment, next));
        }
        self.since_checkpoint += 1;
        Ok(())
    }

    /// Queues a segment write on the background writer, behind at most
    /// `WRITE_DEPTH − 1` others. The caller gets a spare buffer. A
    /// destage's blocks stay valid in the NV cache, which serves their
    /// reads until a device flush (queued behind this write) retires them;
    /// a cleaner write's or a volatile segment buffer's blocks are served
    /// from its buffer until it is done.
    fn queue_write<D: Device + 'static>(
        core: &mut Core,
        to: &Target<'_, D>,
        buf: &mut IoBuf,
        io: SegmentIo,
        kind: Kind,
        last: bool,
        fill: Option<&mut Vec<(u32, u32)>>,
    ) -> Result<(), LogDiskError> {
        let b = to.geo.block_size as usize;
        let SegmentIo {
            from,
            to: end,
            offset,
            first,
            count,
            segment,
        } = io;
        while core.queue.segment_writes_queued() >= WRITE_DEPTH {
            core.reap_one()?;
        }
        core.queue.check()?;
        let mut spare = core.queue.bufs.pop().unwrap_or_default();
        if spare.len() < buf.len() {
            spare = IoBuf::zeroed(buf.len());
        }
        let owned = if last {
            std::mem::replace(buf, spare)
        } else {
            // A cleaner write split over two segments: this first part goes
            // from a copy, because the next part's summary takes the place
            // of its last block in `buf`.
            spare[from..end].copy_from_slice(&buf[from..end]);
            spare
        };
        let fill = match fill {
            Some(f) => std::mem::replace(f, core.queue.fills.pop().unwrap_or_default()),
            None => Vec::new(),
        };
        let destage = kind == Kind::User && core.nv.is_some();
        let (job, queued) = if destage {
            let job = Job::Write {
                buf: owned,
                from,
                to: end,
                offset,
                fill,
                after_earlier: false,
            };
            (job, Queued::Segment(segment))
        } else {
            let shared = Arc::new(owned);
            core.queue.moving.push_back(Moving {
                first,
                count: count as u64,
                at: from + b,
                buf: Arc::clone(&shared),
            });
            let job = Job::WriteShared {
                buf: shared,
                from,
                to: end,
                offset,
            };
            (job, Queued::Shared(segment))
        };
        let cache = core.nv.as_ref().map(|nv| &nv.cache);
        core.queue
            .send(job, queued, (to.dev, cache, b, to.writer_threads))
    }

    /// Writes a segment write in this thread, after everything queued (one
    /// device operation outstanding at most), copying a destage's blocks
    /// out of their NV slots first.
    fn write_here<D: Device + 'static>(
        core: &mut Core,
        to: &Target<'_, D>,
        buf: &mut IoBuf,
        io: SegmentIo,
        fill: Option<&mut Vec<(u32, u32)>>,
    ) -> Result<(), LogDiskError> {
        let b = to.geo.block_size as usize;
        core.settle()?;
        if let Some(f) = fill {
            // This write's blocks, still in their NV slots (a prefix of the
            // list: it is in block order).
            let last_block = io.from / b + io.count;
            let upto = f.partition_point(|&(i, _)| i as usize <= last_block);
            if let Some(nv) = core.nv.as_ref() {
                for &(i, slot) in &f[..upto] {
                    let i = i as usize;
                    nv.cache.read(slot, &mut buf[i * b..(i + 1) * b])?;
                }
            }
            f.drain(..upto);
        }
        to.dev.write_at(&buf[io.from..io.to], io.offset)?;
        Ok(())
    }
}

/// Where a segment write goes: bytes `from..to` of its buffer at device
/// offset `offset`; its `count` data blocks are absolute blocks `first..`
/// of segment `segment`.
#[derive(Clone, Copy)]
struct SegmentIo {
    from: usize,
    to: usize,
    offset: u64,
    first: u64,
    count: usize,
    segment: u32,
}
