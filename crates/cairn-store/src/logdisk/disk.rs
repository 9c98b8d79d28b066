//! [`LogDisk`]: the orchestrator. It holds the log disk's state, split by
//! owner ([`State`]), behind one lock, and decides *when*: when to destage,
//! when to make room before a write (reap, flush, checkpoint, clean in the
//! foreground), when the background cleaner takes its step and when a
//! checkpoint is due after a write. The rooms below decide *how*, and never
//! call back up (see the module docs of [`super`]).

use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use super::checkpoint;
use super::cleaner::Cleaner;
use super::error::LogDiskError;
use super::flush::Core;
use super::format::{self, COUNTERS, Checkpoint, Geometry, MapEntry, Superblock, Usage};
use super::log::{Append, Kind, Log, Target};
use super::metrics::{Metrics, NvFill};
use super::nv::NvCache;
use super::options::{Options, PartialSegments};
use super::recover::{self, Image, NvSource, Recovered, Segments};
use super::stage::SegmentBuffer;
use super::table::block_of;
use super::writer::WriteQueue;
use crate::device::{Device, IoBuf};
use crate::ntl::Region;

/// Everything behind the log disk's lock, by owner.
pub(super) struct State {
    /// The tables, the writer's queue, the NV index, the counters.
    pub core: Core,
    /// The log head and the write sequence.
    pub log: Log,
    /// Volatile mode: blocks buffered for the next segment write.
    pub buffer: SegmentBuffer,
    /// NV mode: the destage being assembled (reused).
    pub destage: Destage,
    pub cleaner: Cleaner,
    /// The last checkpoint's number.
    pub checkpoint_number: u64,
}

/// A destage's assembly: its buffer (data at `(i + 1)·B`), entries, the NV
/// slots the writer copies into it (`(block index + 1, slot)`) and the slots.
#[derive(Default)]
pub(super) struct Destage {
    pub out: IoBuf,
    pub entries: Vec<format::SummaryEntry>,
    pub fill: Vec<(u32, u32)>,
    pub slots: Vec<u32>,
}

/// The log-structured disk. See the module docs.
pub struct LogDisk<D: Device> {
    pub(super) dev: Arc<D>,
    pub(super) geo: Geometry,
    /// Its identity and format version: what every segment summary carries.
    superblock: Superblock,
    /// Resolved: automatic values chosen.
    pub(super) options: Options,
    recovered: Recovered,
    /// Opened by [`LogDisk::open_read_only`]: recovered in memory only;
    /// writes, trims and checkpoints are refused, flush and close do nothing.
    pub(super) read_only: bool,
    state: RwLock<State>,
}

impl<D: Device + 'static> LogDisk<D> {
    /// Writes a new, empty log disk of geometry `geo` onto `dev` (and formats
    /// `nv` as its write cache, when given): a superblock and a checkpoint.
    /// The segments are left as they are; what an earlier use of the device
    /// left there is never taken for this volume's.
    pub fn format(
        dev: D,
        geo: Geometry,
        nv: Option<Box<dyn Region>>,
        options: Options,
    ) -> Result<Self, LogDiskError> {
        Self::format_with(dev, geo, nv, options, false)
    }

    /// [`LogDisk::format`] on storage that may hold old data (a block device
    /// the caller read only the start of): also writes zeroes to every
    /// segment's first block, one write a segment (on an HDD a seek each).
    /// Then the chain a crash is recovered along ends where the log stopped,
    /// at a zeroed block, and not at old data recovery must take for a
    /// decayed summary of its own (and read every segment's first block
    /// instead), until the log has used every segment once.
    pub fn format_clearing(
        dev: D,
        geo: Geometry,
        nv: Option<Box<dyn Region>>,
        options: Options,
    ) -> Result<Self, LogDiskError> {
        Self::format_with(dev, geo, nv, options, true)
    }

    fn format_with(
        dev: D,
        geo: Geometry,
        nv: Option<Box<dyn Region>>,
        options: Options,
        clear: bool,
    ) -> Result<Self, LogDiskError> {
        geo.validate()?;
        let need = geo.image_blocks() * u64::from(geo.block_size);
        if dev.len() < need {
            return Err(LogDiskError::TooSmall {
                need,
                have: dev.len(),
            });
        }
        let id = recover::volume_id();
        let nv = nv
            .map(|r| NvCache::format(r, geo.block_size, id))
            .transpose()?;
        let b = u64::from(geo.block_size);
        // An empty checkpoint in slot A, the other slot zeroed, then the
        // superblock last: a torn format leaves no valid superblock.
        let cp = Checkpoint {
            number: 1,
            sequence: 0,
            head_segment: 0,
            head_slot: geo.segment_blocks - 1,
            closed: false,
            // The open that follows reads only the head segment (the format
            // zeroed the others' first blocks) and checkpoints a chain.
            chain: None,
            map: vec![MapEntry::UNMAPPED; geo.logical_blocks as usize],
            usage: vec![Usage::default(); geo.segments as usize],
            counters: [0; COUNTERS],
        };
        let bytes = format::encode_checkpoint(&cp, &geo)?;
        // Page-aligned copies, so a direct-I/O device takes them as they are.
        let bytes = IoBuf::copy_padded(&bytes, bytes.len().next_multiple_of(b as usize));
        dev.write_at(&bytes, b)?;
        let zero = IoBuf::zeroed(bytes.len());
        dev.write_at(&zero, b * (1 + geo.checkpoint_blocks()))?;
        // Every summary carries the volume's id, so one an earlier use of
        // the device left is not taken for this volume's (and no segment is
        // read until the open after this one has written a checkpoint naming
        // where it went). Cleared, old data is not taken for damage either.
        if clear {
            let zero_block = IoBuf::zeroed(geo.block_size as usize);
            for s in 0..geo.segments {
                dev.write_at(&zero_block, block_of(&geo, s, 0) * b)?;
            }
        }
        dev.flush()?;
        strict_assert!(id & 1 == 1, "a volume id is nonzero");
        let superblock = format::encode_superblock(&Superblock {
            geometry: geo,
            id,
            version: format::VERSION,
        });
        dev.write_at(&IoBuf::copy_padded(&superblock, superblock.len()), 0)?;
        dev.flush()?;
        Self::open_with(
            dev,
            nv.map(NvSource::Fresh),
            options,
            false,
            Segments::Blank,
        )
    }

    /// Opens an existing log disk, recovering from its last checkpoint; `nv`
    /// must be the NV cache region it was formatted with (or `None` if it had
    /// none).
    pub fn open(
        dev: D,
        nv: Option<Box<dyn Region>>,
        options: Options,
    ) -> Result<Self, LogDiskError> {
        Self::open_with(
            dev,
            nv.map(NvSource::Region),
            options,
            false,
            Segments::Scan,
        )
    }

    /// Opens an existing log disk for reading only: recovery (roll-forward,
    /// the NV cache's dirty blocks) happens in memory and nothing is written
    /// to the device or the region, ever — no checkpoint at open or close,
    /// no superseded slot cleared — so a disk on read-only media, owned by
    /// another user, or being inspected opens as it is. Writes and trims
    /// fail with [`LogDiskError::ReadOnly`].
    pub fn open_read_only(
        dev: D,
        nv: Option<Box<dyn Region>>,
        options: Options,
    ) -> Result<Self, LogDiskError> {
        Self::open_with(dev, nv.map(NvSource::Region), options, true, Segments::Scan)
    }

    /// Opens an existing log disk whose NV cache region was lost (a tmpfs
    /// file after a reboot) or never existed, formatting `nv` as a fresh,
    /// empty cache for it. Safe only when the old cache held nothing dirty —
    /// the disk was last stopped by [`LogDisk::close`], or never had a cache:
    /// writes acknowledged only to a lost cache are gone.
    pub fn open_with_new_nv_cache(
        dev: D,
        nv: Box<dyn Region>,
        options: Options,
    ) -> Result<Self, LogDiskError> {
        let sb = recover::read_superblock(&dev)?;
        let cache = NvCache::format(nv, sb.geometry.block_size, sb.id)?;
        Self::open_with(
            dev,
            Some(NvSource::Fresh(cache)),
            options,
            false,
            Segments::Scan,
        )
    }

    /// Resolves the options, recovers, assembles; then (unless read-only)
    /// writes a checkpoint, so later recoveries never look at what this one
    /// discarded, and clears the NV slots recovery found superseded.
    fn open_with(
        dev: D,
        nv: Option<NvSource>,
        options: Options,
        read_only: bool,
        segments: Segments,
    ) -> Result<Self, LogDiskError> {
        options.check()?;
        let Image {
            superblock,
            mut table,
            log,
            nv,
            metrics,
            checkpoint_number,
            recovered,
        } = recover::recover(&dev, nv, segments)?;
        let geo = superblock.geometry;
        strict_assert!(
            geo.validate_in(superblock.version).is_ok(),
            "a decoded superblock holds a valid geometry"
        );
        let n = geo.segment_blocks as usize;
        let b = geo.block_size as usize;
        table.chain = options.chain;
        table.checkpoint_queued = checkpoint_number;
        table.checkpoint_durable = checkpoint_number;
        let st = State {
            core: Core {
                table,
                queue: WriteQueue::default(),
                nv,
                metrics,
                checkpoint_in_flight: None,
            },
            log,
            buffer: SegmentBuffer::new(n, b),
            destage: Destage {
                out: IoBuf::zeroed(2 * n * b),
                entries: Vec::with_capacity(n),
                fill: Vec::with_capacity(n),
                slots: Vec::with_capacity(n),
            },
            cleaner: Cleaner::default(),
            checkpoint_number,
        };
        let disk = Self {
            dev: Arc::new(dev),
            geo,
            superblock,
            options: options.resolve(&geo),
            recovered,
            read_only,
            state: RwLock::new(st),
        };
        if read_only {
            return Ok(disk);
        }
        {
            let mut st = disk.write_state();
            disk.checkpoint(&mut st, false)?;
            if let Some(nv) = st.core.nv.as_mut() {
                // Clear the slots recovery found superseded.
                nv.clear_superseded(0)?;
            }
        }
        Ok(disk)
    }

    pub(super) fn read_state(&self) -> RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn write_state(&self) -> RwLockWriteGuard<'_, State> {
        self.state.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// The state, to change what the disk holds. A disk closed by
    /// [`LogDisk::close`] takes writes again: a checkpoint without the
    /// closed mark goes first, so a crash after them rolls them forward.
    fn write_state_unsealed(&self) -> Result<RwLockWriteGuard<'_, State>, LogDiskError> {
        let mut st = self.write_state();
        if st.log.sealed {
            self.checkpoint(&mut st, false)?;
        }
        Ok(st)
    }

    /// What a segment write needs of the disk.
    fn target(&self) -> Target<'_, D> {
        Target {
            dev: &self.dev,
            geo: &self.geo,
            superblock: &self.superblock,
            partial: self.options.partial,
            writer_threads: self.options.writer_threads,
        }
    }

    /// The geometry.
    pub fn geometry(&self) -> Geometry {
        self.geo
    }

    /// The volume's identity (recorded in its NV cache).
    pub fn id(&self) -> u64 {
        self.superblock.id
    }

    /// What the open replayed beyond the last checkpoint (nothing for a disk
    /// just formatted, or closed cleanly).
    pub fn recovered(&self) -> Recovered {
        self.recovered
    }

    /// The options in force (with automatic values resolved).
    pub fn options(&self) -> Options {
        self.options
    }

    /// The device underneath.
    pub fn device(&self) -> &D {
        &self.dev
    }

    /// A snapshot of the counters.
    pub fn metrics(&self) -> Metrics {
        self.read_state().core.metrics
    }

    /// Free segments (including those awaiting the next flush).
    pub fn free_segments(&self) -> u32 {
        self.read_state().core.table.empty_segments()
    }

    /// Live blocks per segment (for utilisation histograms).
    pub fn segment_live(&self) -> Vec<u32> {
        self.read_state().core.table.live.clone()
    }

    /// Number of NV slots (0 without an NV cache).
    pub fn nv_slots(&self) -> u32 {
        self.read_state()
            .core
            .nv
            .as_ref()
            .map_or(0, |nv| nv.cache.slots())
    }

    /// The NV write cache's fill now: dirty slots (not yet destaged), slots
    /// in use (dirty, destaged awaiting a flush, or awaiting a clear) and
    /// all slots; zeroes without an NV cache.
    pub fn nv_fill(&self) -> NvFill {
        self.read_state()
            .core
            .nv
            .as_ref()
            .map_or(NvFill::default(), |nv| {
                let slots = nv.cache.slots();
                NvFill {
                    dirty_slots: nv.dirty,
                    used_slots: slots - nv.free.len() as u32,
                    slots,
                }
            })
    }

    /// Checks the tables' invariants ([`super::table`]'s list) now; the
    /// first broken one, by number.
    pub fn verify(&self) -> Result<(), String> {
        let st = self.read_state();
        st.core.table.verify(st.log.head)
    }

    /// Writes whole blocks starting at `first`: `data` is a multiple of the
    /// block size. With an NV cache the write is durable when this returns.
    pub fn write_blocks(&self, first: u64, data: &[u8]) -> Result<(), LogDiskError> {
        if self.read_only {
            return Err(LogDiskError::ReadOnly);
        }
        let b = self.geo.block_size as usize;
        if !data.len().is_multiple_of(b) {
            return Err(LogDiskError::Invalid(format!(
                "{} bytes is not a whole number of {b}-byte blocks",
                data.len()
            )));
        }
        let count = (data.len() / b) as u64;
        self.check_blocks(first, count)?;
        let mut st = self.write_state_unsealed()?;
        if st.core.nv.is_some() {
            self.write_nv(&mut st, first, data)
        } else {
            for (i, block) in data.chunks_exact(b).enumerate() {
                self.write_buffered(&mut st, first + i as u64, block)?;
            }
            Ok(())
        }
    }

    /// Read-modify-write of part of one block, under the write lock so a
    /// concurrent write to another part of the block is not lost.
    pub(super) fn write_partial(
        &self,
        logical: u64,
        within: usize,
        data: &[u8],
    ) -> Result<(), LogDiskError> {
        if self.read_only {
            return Err(LogDiskError::ReadOnly);
        }
        let mut block = IoBuf::zeroed(self.geo.block_size as usize);
        let mut st = self.write_state_unsealed()?;
        self.read_locked(&st, logical, &mut block)?;
        block[within..within + data.len()].copy_from_slice(data);
        if st.core.nv.is_some() {
            self.write_nv(&mut st, logical, &block)
        } else {
            self.write_buffered(&mut st, logical, &block)
        }
    }

    /// Volatile mode: buffers one block; a full buffer is written out.
    fn write_buffered(
        &self,
        st: &mut State,
        logical: u64,
        block: &[u8],
    ) -> Result<(), LogDiskError> {
        strict_assert!(st.core.nv.is_none(), "buffered writes are volatile mode's");
        st.core.metrics.client_blocks += 1;
        if st.buffer.put(logical, block) + 1 >= self.geo.segment_blocks as usize {
            self.write_out_buffer(st, false)?;
        }
        Ok(())
    }

    /// Volatile mode: writes the buffered blocks as a user segment write
    /// (`partial`: a flush's, short of a segment).
    fn write_out_buffer(&self, st: &mut State, partial: bool) -> Result<(), LogDiskError> {
        if st.buffer.entries.is_empty() {
            return Ok(());
        }
        if self.options.background_clean {
            self.clean_step(st)?;
        }
        let entries = std::mem::take(&mut st.buffer.entries);
        let mut buffer = std::mem::take(&mut st.buffer.buffer);
        // A buffer holds at most one segment write's blocks.
        strict_assert!(entries.len() < self.geo.segment_blocks as usize);
        let result = self.append_user(st, &entries, &mut buffer, partial, None);
        st.buffer.buffer = buffer;
        st.buffer.entries = entries;
        result?;
        st.buffer.clear();
        Ok(())
    }

    /// NV mode: stages `data` into NV slots, making room first (slots a
    /// queued write holds, a flush of destaged ones, a forced destage) and
    /// destaging when the dirty slots pass the threshold.
    fn write_nv(&self, st: &mut State, first: u64, data: &[u8]) -> Result<(), LogDiskError> {
        strict_assert!(!data.is_empty() && data.len().is_multiple_of(self.geo.block_size as usize));
        let b = self.geo.block_size as usize;
        let per_write = self.geo.segment_blocks - 1;
        let mut blocks = data.chunks_exact(b).enumerate().peekable();
        while blocks.peek().is_some() {
            // Room for at least one block: first free what earlier destages
            // made durable, then destage more if that was not enough.
            let no_free = |st: &State| st.core.nv.as_ref().is_some_and(|nv| nv.free.is_empty());
            while !st.core.queue.queued.is_empty() && no_free(st) {
                // Queued writes free held slots, a queued flush destaged ones.
                st.core.reap_one()?;
            }
            if no_free(st)
                && st
                    .core
                    .nv
                    .as_ref()
                    .is_some_and(|nv| !nv.awaiting.is_empty())
            {
                st.core.device_flush(&*self.dev)?;
            }
            if no_free(st) {
                self.destage(st, true)?;
            }
            // A forced destage's flush retires what it destaged: a slot is free.
            assert!(!no_free(st), "no NV slot free after a forced destage");
            let Core {
                nv: Some(nv),
                metrics,
                queue,
                ..
            } = &mut st.core
            else {
                unreachable!("write_nv runs with an NV cache");
            };
            nv.stage(
                first,
                &mut blocks,
                &mut st.log.sequence,
                metrics,
                queue.writes_done,
            )?;
            if nv.over_threshold(self.options.destage_threshold, per_write) {
                self.destage(st, false)?;
            }
        }
        Ok(())
    }

    /// Destages the oldest dirty NV blocks: full segment writes until the dirty
    /// count is under the threshold, or (`forced`) at least one write.
    fn destage(&self, st: &mut State, forced: bool) -> Result<(), LogDiskError> {
        let per_write = self.geo.segment_blocks - 1;
        loop {
            let Some(nv) = st.core.nv.as_mut() else {
                return Ok(());
            };
            let threshold = (f64::from(nv.cache.slots()) * self.options.destage_threshold) as u32;
            let go = if forced {
                nv.dirty > 0 || !nv.superseded.is_empty()
            } else {
                nv.dirty > threshold && nv.dirty >= per_write
            };
            if !go {
                return Ok(());
            }
            if nv.dirty == 0 {
                // Nothing dirty: only superseded slots wait; clear them.
                return nv.clear_superseded(st.core.queue.writes_done);
            }
            // The background cleaner's step first: its write may take part
            // of the open segment.
            if self.options.background_clean {
                self.clean_step(st)?;
            }
            // As many of the oldest dirty blocks as the open segment takes
            // (a whole segment's worth if none is open): one segment write.
            let take = st.log.room(self.geo.segment_blocks).min(per_write);
            let mut d = std::mem::take(&mut st.destage);
            d.entries.clear();
            d.fill.clear();
            d.slots.clear();
            let nv = st.core.nv.as_mut().expect("checked above");
            nv.take_oldest(take, &mut d.entries, &mut d.fill, &mut d.slots);
            // Dirty blocks exist, and the order lists every one of them.
            assert!(!d.entries.is_empty() && d.entries.len() <= take as usize);
            let result = self.append_user(st, &d.entries, &mut d.out, false, Some(&mut d.fill));
            let nv = st.core.nv.as_mut().expect("checked above");
            if let Err(e) = result {
                // Put the blocks back at the front: they are still dirty.
                nv.put_back(&d.slots);
                st.destage = d;
                return Err(e);
            }
            // The slots stay valid (and keep serving reads) until a device
            // flush makes the segment durable. The write just queued copies
            // these slots (a write made in this thread is done, and its
            // number is at most `writes_done`).
            nv.destaged(&d.slots, st.core.queue.writes_queued);
            st.destage = d;
            // Flushes are batched, one per eighth of the slots destaged (or
            // sooner: any device flush, a full cache, a forced destage),
            // instead of one per segment written. Slots a queued flush
            // already covers are not counted again.
            let batch = (nv.cache.slots() / 8).max(per_write) as usize;
            let uncovered =
                nv.awaiting.len() - st.core.queue.awaiting_covered().min(nv.awaiting.len());
            if forced {
                st.core.device_flush(&*self.dev)?;
                return Ok(());
            } else if uncovered >= batch {
                if self.options.background_destage {
                    st.core.flush_in_background(&self.dev)?;
                } else {
                    st.core.device_flush(&*self.dev)?;
                }
            }
        }
    }

    /// Writes a user segment buffer's `entries` (data at `(i + 1)·B` of
    /// `buf`; with `fill`, still in NV slots) at the log head: one segment
    /// write per segment reached, room made before each segment is opened;
    /// the last one goes to the background writer. Then the tables are
    /// checked and a checkpoint is written if one is due.
    fn append_user(
        &self,
        st: &mut State,
        entries: &[format::SummaryEntry],
        buf: &mut IoBuf,
        partial: bool,
        mut fill: Option<&mut Vec<(u32, u32)>>,
    ) -> Result<(), LogDiskError> {
        let n = self.geo.segment_blocks;
        if self.options.partial == PartialSegments::Close
            && st.log.head.is_some_and(|(_, slot)| slot > 0)
        {
            // The paper's rule: a user write never shares a segment with an
            // earlier write (here, the tail of the cleaner's last output).
            st.log.close_head(&mut st.core);
        }
        let to = self.target();
        let mut done = 0usize;
        while done < entries.len() {
            if st.log.head.is_none() {
                self.make_room(st)?;
            }
            let k = (st.log.room(n) as usize).min(entries.len() - done);
            let last = done + k == entries.len();
            st.log.append(
                &mut st.core,
                &to,
                Append {
                    entries: &entries[done..done + k],
                    from: done,
                    buf,
                    kind: Kind::User,
                    partial: partial && last,
                    background: self.options.background_destage && last,
                    last,
                    fill: fill.as_deref_mut(),
                },
            )?;
            done += k;
        }
        strict_assert_eq!(done, entries.len());
        Self::check_tables(st);
        self.checkpoint_if_due(st)
    }

    /// Before a user segment write opens a segment: cleans in the foreground
    /// at the low watermark (the cleaner's last write may leave a head open
    /// to continue in), else frees a segment (reaping a queued flush, or a
    /// device flush), else — only trimmed or held segments left — a
    /// checkpoint makes them reusable.
    fn make_room(&self, st: &mut State) -> Result<(), LogDiskError> {
        if st.core.table.reserve() <= self.options.clean_low {
            self.clean(st)?;
            if st.log.head.is_some() {
                return Ok(());
            }
        }
        st.core.free_a_segment(&*self.dev, st.log.pin)?;
        let table = &st.core.table;
        if table.free.is_empty() && (table.any_tainted || !table.held.is_empty()) {
            self.checkpoint(st, false)?;
        }
        Ok(())
    }

    /// A checkpoint after [`Options::checkpoint_interval`] segment writes,
    /// queued behind them with a background writer.
    fn checkpoint_if_due(&self, st: &mut State) -> Result<(), LogDiskError> {
        if st.log.since_checkpoint >= self.options.checkpoint_interval {
            self.write_checkpoint(st, self.options.background_destage, false)?;
        }
        Ok(())
    }

    /// The tables' invariants, after every write in debug and strict builds
    /// (`strict-assertions`, which `./test.sh` turns on).
    fn check_tables(st: &State) {
        if cfg!(any(debug_assertions, feature = "strict-assertions"))
            && let Err(broken) = st.core.table.verify(st.log.head)
        {
            panic!("log disk tables: {broken}");
        }
    }

    /// The background cleaner's step at a user segment write (see
    /// [`Options::background_clean`]): writes the pass issued
    /// `CLEANER_BACKGROUND_LAG` user segment writes ago, then, below the high
    /// watermark, issues the next. Deterministic: which writes collect and
    /// issue depends only on the sequence of operations, never on timing.
    fn clean_step(&self, st: &mut State) -> Result<(), LogDiskError> {
        if st.cleaner.pass.active {
            if !st.cleaner.step() {
                return Ok(());
            }
            self.finish_pass(st)?;
        }
        if st.core.table.reserve() < self.options.clean_high {
            let State {
                core, log, cleaner, ..
            } = st;
            strict_assert!(!cleaner.pass.active, "a pass started over an active one");
            cleaner.start_pass(core, log, &self.dev, &self.geo, &self.options)?;
        }
        Ok(())
    }

    /// Writes the background pass (if one is active) and ends it, with a
    /// checkpoint between if one is due after its write.
    pub(super) fn finish_pass(&self, st: &mut State) -> Result<(), LogDiskError> {
        if !st.cleaner.pass.active {
            return Ok(());
        }
        let to = self.target();
        let State {
            core,
            log,
            cleaner,
            checkpoint_number,
            ..
        } = st;
        let result = cleaner.write_pass(core, log, &to, &self.options, checkpoint_number);
        let result = result.and_then(|()| self.checkpoint_if_due(st));
        st.cleaner.end_pass(&mut st.core, &self.geo, &result);
        Self::check_tables(st);
        result
    }

    /// Cleans in the foreground until the high watermark (or nothing more
    /// can be gained), then flushes so the victims become free.
    fn clean(&self, st: &mut State) -> Result<(), LogDiskError> {
        // A background pass first: its victims' reads are already under way.
        self.finish_pass(st)?;
        // The victims are read from the device: nothing else outstanding.
        st.core.settle()?;
        if st.core.table.any_tainted || !st.core.table.held.is_empty() {
            // Trimmed segments, and those the chain holds, become reusable
            // only once a checkpoint is durable; take one now rather than
            // clean around them.
            self.checkpoint(st, false)?;
            if st.core.table.empty_segments() >= self.options.clean_high {
                return Ok(());
            }
        }
        let to = self.target();
        let State {
            core,
            log,
            cleaner,
            checkpoint_number,
            ..
        } = st;
        cleaner.clean_passes(
            core,
            log,
            &to,
            &self.options,
            self.options.clean_high,
            checkpoint_number,
        )?;
        st.core.device_flush(&*self.dev)?;
        // The flush made the victims' copies durable: they are free.
        strict_assert!(
            st.core
                .table
                .pending
                .iter()
                .all(|&s| st.core.table.tainted[s as usize])
        );
        Ok(())
    }

    /// Unmaps the whole blocks `first..first + count` (TRIM): they read as
    /// zeroes and stop costing the cleaner. Advisory, as NBD's TRIM is: a
    /// crash before the next checkpoint may bring back an earlier write of a
    /// trimmed block (never another block's data, never bytes never written).
    pub fn trim_blocks(&self, first: u64, count: u64) -> Result<(), LogDiskError> {
        if self.read_only {
            return Err(LogDiskError::ReadOnly);
        }
        self.check_blocks(first, count)?;
        let mut st = self.write_state_unsealed()?;
        strict_assert!(first + count <= self.geo.logical_blocks);
        for logical in first..first + count {
            st.buffer.remove(logical);
            if let Some(nv) = st.core.nv.as_mut() {
                nv.trim(logical);
            }
            st.core.table.unmap(logical);
        }
        Self::check_tables(&st);
        Ok(())
    }

    /// Makes every completed write durable: in volatile mode a partial
    /// segment write of the buffer, then a device flush.
    pub fn flush(&self) -> Result<(), LogDiskError> {
        if self.read_only {
            return Ok(());
        }
        let mut st = self.write_state();
        if let Some(nv) = st.core.nv.as_mut() {
            nv.sync()?;
        } else {
            strict_assert!(st.buffer.entries.len() < self.geo.segment_blocks as usize);
            self.write_out_buffer(&mut st, true)?;
            st.core.device_flush(&*self.dev)?;
        }
        Ok(())
    }

    /// Waits until every device operation queued on the background writer
    /// so far (segment and cleaner writes, flushes, checkpoints) is done,
    /// and retires what its flushes made durable; the first error any of
    /// them met is returned. Dirty blocks stay in the NV cache (they are
    /// durable there): nothing new is destaged. Afterwards the device is
    /// idle until the next write, which is what a benchmark needs to measure
    /// the device alone between stretches of log-disk writes.
    pub fn drain(&self) -> Result<(), LogDiskError> {
        self.write_state().core.settle()
    }

    /// Destages everything, writes a checkpoint marked closed and flushes:
    /// the image then opens reading no segment (no roll-forward) and with an
    /// empty NV cache. Writes after it are taken (a checkpoint without the
    /// mark goes first).
    pub fn close(&self) -> Result<(), LogDiskError> {
        if self.read_only {
            return Ok(());
        }
        let mut st = self.write_state();
        self.finish_pass(&mut st)?;
        self.write_out_buffer(&mut st, true)?;
        while st
            .core
            .nv
            .as_ref()
            .is_some_and(|nv| nv.dirty > 0 || !nv.superseded.is_empty())
        {
            self.destage(&mut st, true)?;
        }
        // A destage may have started a background cleaner pass: written
        // now, or it would be a segment write after the closing checkpoint.
        self.finish_pass(&mut st)?;
        strict_assert!(!st.cleaner.pass.active, "a cleaner pass outlives the close");
        self.checkpoint(&mut st, true)?;
        // Closed: nothing buffered, nothing dirty, nothing queued; the next
        // open replays nothing.
        strict_assert!(st.buffer.entries.is_empty() && st.core.queue.queued.is_empty());
        strict_assert!(
            st.core
                .nv
                .as_ref()
                .is_none_or(|nv| nv.dirty == 0 && nv.superseded.is_empty())
        );
        Ok(())
    }

    /// Writes a checkpoint now (after a device flush).
    pub fn sync_checkpoint(&self) -> Result<(), LogDiskError> {
        if self.read_only {
            return Err(LogDiskError::ReadOnly);
        }
        let mut st = self.write_state();
        self.checkpoint(&mut st, false)
    }

    /// Writes a checkpoint (marked `closed` by [`LogDisk::close`]) and waits
    /// for it to be durable.
    fn checkpoint(&self, st: &mut State, closed: bool) -> Result<(), LogDiskError> {
        self.write_checkpoint(st, false, closed)
    }

    /// [`checkpoint::write`] of the state's tables and log.
    fn write_checkpoint(
        &self,
        st: &mut State,
        background: bool,
        closed: bool,
    ) -> Result<(), LogDiskError> {
        let State {
            core,
            log,
            checkpoint_number,
            ..
        } = st;
        checkpoint::write(
            &self.dev,
            &self.geo,
            core,
            log,
            checkpoint_number,
            background,
            closed,
        )
    }
}

/// Waits for background segment writes and reads, so nothing touches the
/// device after the disk is gone.
impl<D: Device> Drop for LogDisk<D> {
    fn drop(&mut self) {
        let st = self.state.get_mut().unwrap_or_else(PoisonError::into_inner);
        st.core.queue.stop();
        st.cleaner.stop();
    }
}
