//! The DRAM block cache: the engine's read cache (DESIGN techniques 1 and 5).
//!
//! [`BlockCache`] sits over any [`Device`] and is a `Device` itself, so it
//! stacks in a volume and serves over NBD. What it does:
//!
//! - **Blocks** of 4 KiB – 2 MiB ([`CacheConfig::block_size_bytes`]); capacity
//!   in bytes; buffers are 4 KiB-aligned frames from a per-shard pool
//!   allocated up front (`pool.rs`).
//! - **Zero-copy hits**: [`BlockCache::get`] returns a [`BlockRef`], a
//!   reference-counted handle to the cached frame; it stays valid, and its
//!   bytes unchanged, after the block is evicted or overwritten (a write
//!   replaces the frame, never changes it in place). `read_at` copies, as the
//!   `Device` contract requires; [`BlockCache::read_refs`] does not.
//! - **Any policy** of `cairn-policy`, the same objects the simulator runs,
//!   chosen by [`CacheConfig::policy`].
//! - **Sharded**: a block belongs to one of a power-of-two number of shards
//!   by a hash of its index; a shard is one mutex over its slot map, its
//!   policy instance (on its share of the capacity), its pool and its
//!   counters. A hit locks only its shard; there is no global lock.
//! - **Single-flight misses** (`flight.rs`): the first reader to miss a block
//!   leads its load; concurrent readers wait for it and get the same buffer,
//!   so a block leaves the device once per residency.
//! - **Runs and readahead**: a leader claims the following absent blocks up
//!   to the end of the caller's request and, when the request continues a
//!   stream a second time or more (`streams.rs`),
//!   [`CacheConfig::readahead_bytes`] further, and
//!   reads the run with one `read_vectored_at` into the run's frames.
//! - **Prefetchers** ([`CacheConfig::prefetch`]): in place of readahead,
//!   any prefetcher of `cairn-policy` (`obl`, `pg`, `mithril`), the objects `cairn sim
//!   --prefetch` runs. After a request's blocks are served the prefetcher
//!   sees each of them (hit or not) and names blocks to load; those absent
//!   are loaded before the request returns (one device read each, counted as
//!   prefetched, admitted as misses are). The prefetcher is one mutex taken
//!   once per run of blocks, only when one is configured.
//! - **Writes** ([`WriteMode`]): the device is written first, then the cached
//!   copy is replaced (update; allocate also caches whole blocks written
//!   that were not cached) or dropped (invalidate). A load in flight when
//!   a write lands is *detached*: its slot is removed, so later readers load
//!   the new data, and its leader does not install what it read. In update
//!   mode writes to a block are serialised by one of 64 striped write locks
//!   (held across the device write and the cache update), so two racing
//!   writes cannot leave the cache holding the one the device did not keep.
//! - **Cost groups** (papers/004, `groups.rs`): every access is put in group
//!   `device × 2 + random`; each device read is timed, each group's service
//!   time per block smoothed, and the costs (fastest group = 1) published to
//!   the `CostTable` the `cost` policy of every shard reads.
//!
//! Limits: at most [`RUN_BLOCKS_MAX`] blocks per device read, [`SHARDS_MAX`]
//! shards; memory is the capacity plus 1/16 (loads in flight), plus frames
//! callers still hold after their blocks left the cache.

mod config;
mod flight;
mod groups;
mod pool;
mod shard;
mod streams;
mod sync;

/// The buffer handles a hit returns; they are the device layer's
/// ([`crate::device::BlockRef`]), re-exported here for the cache's users.
pub use crate::device::{BlockRef, BlockSlice};
pub use config::{
    BLOCK_SIZE_MAX, BLOCK_SIZE_MIN, CacheConfig, CacheError, RUN_BLOCKS_MAX, SHARDS_MAX, WriteMode,
};
pub use groups::{Placement, SingleDevice, group_of};

use std::sync::Arc;
use std::time::Instant;

use cairn_policy::Prefetcher;
use cairn_policy::cost::CostTable;

use crate::device::{Device, DeviceError, DeviceOp, check_range};
use groups::GroupTracker;
use shard::{Claim, Shard};
use streams::StreamTable;
use sync::{Mutex, MutexGuard, Padded, lock};

use crate::limits::WRITE_LOCKS;

/// Fibonacci hashing constant: spreads consecutive block indexes over shards.
const SPREAD: u64 = 0x9E37_79B9_7F4A_7C15;

/// A block cache over `D`. See the module docs.
pub struct BlockCache<D> {
    device: D,
    block_shift: u32,
    len: u64,
    blocks: u64,
    shards: Box<[Padded<Mutex<Shard>>]>,
    shard_mask: u64,
    shard_bits: u32,
    write_locks: Box<[Mutex<()>]>,
    streams: StreamTable,
    groups: GroupTracker,
    readahead_blocks: u64,
    prefetch: Option<Mutex<Prefetching>>,
    write_mode: WriteMode,
    policy_name: &'static str,
    capacity_bytes: u64,
}

/// A configured prefetcher and the blocks it last named.
struct Prefetching {
    prefetcher: Box<dyn Prefetcher>,
    wanted: Vec<u64>,
}

/// What the stream table knows of a request, looked up lazily: a hit on a
/// random request never touches the table's shared state.
#[derive(Clone, Copy, Debug)]
enum Stream {
    /// Not looked up: the first miss observes `first..end`.
    Unseen { first: u64, end: u64 },
    /// Looked up, continues no stream; the first miss records it as a
    /// possible stream start, ending before `end`.
    Unregistered { end: u64 },
    /// Recorded: how many requests in a row continued its stream (0 =
    /// random).
    Run(u32),
}

impl Stream {
    /// The request's run, recording the request if it is not yet.
    #[inline]
    fn resolve(&mut self, streams: &StreamTable) -> u32 {
        let run = match *self {
            Stream::Unseen { first, end } => streams.observe(first, end),
            Stream::Unregistered { end } => {
                streams.start(end);
                0
            }
            Stream::Run(run) => run,
        };
        *self = Stream::Run(run);
        run
    }
}

/// Counters of one cost group, summed over shards.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GroupMetrics {
    /// The group's index (`device × 2 + random`).
    pub group: u16,
    /// The device its blocks live on.
    pub device: u16,
    /// Whether its accesses were sequential.
    pub sequential: bool,
    /// Accesses served from the cache.
    pub hits: u64,
    /// Bytes of those (whole blocks).
    pub hit_bytes: u64,
    /// Accesses that led a device read.
    pub misses: u64,
    /// Bytes of those (whole blocks).
    pub miss_bytes: u64,
    /// Blocks read ahead of a request.
    pub prefetched: u64,
    /// Accesses that waited for another reader's device read.
    pub coalesced: u64,
    /// Device reads issued (one per run of blocks).
    pub device_reads: u64,
    /// Bytes those read.
    pub device_read_bytes: u64,
    /// Total time of those reads, ns (the miss service time).
    pub miss_service_ns_total: u64,
    /// Smoothed service time per block read, ns (0 = not measured).
    pub miss_service_ns_per_block: f64,
    /// The group's current eviction cost (fastest measured group = 1).
    pub cost: f64,
}

/// A snapshot of a cache's counters.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CacheMetrics {
    /// One entry per cost group.
    pub groups: Vec<GroupMetrics>,
    /// Blocks resident now.
    pub resident_blocks: u64,
    /// Frames the pools hold or have handed out.
    pub frames: u64,
    /// Frames allocated after construction (a pool ran dry).
    pub frames_grown: u64,
    /// Loads whose data a concurrent write made stale (not installed).
    pub detached_loads: u64,
}

impl CacheMetrics {
    /// Hits over all groups.
    pub fn hits(&self) -> u64 {
        self.groups.iter().map(|g| g.hits).sum()
    }
    /// Misses (led device reads) over all groups.
    pub fn misses(&self) -> u64 {
        self.groups.iter().map(|g| g.misses).sum()
    }
    /// Accesses that waited for another reader's load, over all groups.
    pub fn coalesced(&self) -> u64 {
        self.groups.iter().map(|g| g.coalesced).sum()
    }
    /// Hits (and coalesced waits) over all accesses; 0 with no access.
    pub fn hit_ratio(&self) -> f64 {
        let served = self.hits() + self.coalesced();
        let all = served + self.misses();
        if all == 0 {
            0.0
        } else {
            served as f64 / all as f64
        }
    }
}

impl<D: Device> BlockCache<D> {
    /// A cache over `device`.
    pub fn new(device: D, config: &CacheConfig) -> Result<Self, CacheError> {
        let shards = config.validate()?;
        let len = device.len();
        if len == 0 {
            return Err(CacheError::EmptyDevice);
        }
        let block = config.block_size_bytes;
        let per_shard_blocks = config.capacity_bytes / block / shards as u64;
        let per_shard = cairn_policy::Capacity::Bytes(per_shard_blocks * block);
        let groups_count = usize::from(config.placement.devices()) * 2;
        let table = Arc::new(config.policy.cost_table(groups_count)?);
        let mut built = Vec::with_capacity(shards);
        let mut policy_name = "";
        for _ in 0..shards {
            let policy = config.policy.build_with_costs(per_shard, &table)?;
            policy_name = policy.name();
            built.push(Padded(Mutex::new(Shard::new(
                policy,
                per_shard_blocks as usize,
                block as u32,
                groups_count,
            ))));
        }
        let capacity_bytes = per_shard_blocks * block * shards as u64;
        let prefetch = match &config.prefetch {
            Some(prefetch) => Some(Mutex::new(Prefetching {
                prefetcher: prefetch
                    .build(cairn_policy::Capacity::Bytes(capacity_bytes))
                    .map_err(CacheError::Prefetch)?,
                wanted: Vec::new(),
            })),
            None => None,
        };
        let readahead_blocks = if prefetch.is_some() {
            0
        } else {
            config.readahead_bytes.div_ceil(block)
        };
        Ok(Self {
            device,
            block_shift: block.trailing_zeros(),
            len,
            blocks: len.div_ceil(block),
            shards: built.into_boxed_slice(),
            shard_mask: shards as u64 - 1,
            shard_bits: shards.trailing_zeros(),
            write_locks: (0..WRITE_LOCKS).map(|_| Mutex::new(())).collect(),
            streams: StreamTable::new(readahead_blocks.max(2)),
            groups: GroupTracker::new(
                Arc::clone(&config.placement),
                table,
                config.cost_smoothing,
                block,
            ),
            readahead_blocks,
            prefetch,
            write_mode: config.write_mode,
            policy_name,
            capacity_bytes,
        })
    }

    /// The device under the cache.
    pub fn device(&self) -> &D {
        &self.device
    }

    /// Block size in bytes.
    pub fn block_size(&self) -> u64 {
        1 << self.block_shift
    }

    /// Capacity in bytes (whole blocks per shard).
    pub fn capacity_bytes(&self) -> u64 {
        self.capacity_bytes
    }

    /// Number of shards.
    pub fn shards(&self) -> usize {
        self.shards.len()
    }

    /// The policy's short name.
    pub fn policy_name(&self) -> &'static str {
        self.policy_name
    }

    /// The prefetcher's short name, if one replaces readahead.
    pub fn prefetcher_name(&self) -> Option<&'static str> {
        self.prefetch
            .as_ref()
            .map(|prefetch| lock(prefetch).prefetcher.name())
    }

    /// The cost table the `cost` policy reads (live estimates).
    pub fn cost_table(&self) -> &Arc<CostTable> {
        self.groups.table()
    }

    /// The current eviction cost of every group.
    pub fn costs(&self) -> Vec<f64> {
        (0..self.groups.groups())
            .map(|g| self.groups.table().get(g as u16))
            .collect()
    }

    #[inline]
    fn shard_of(&self, block: u64) -> &Mutex<Shard> {
        // The top bits of a Fibonacci hash: consecutive blocks go round the
        // shards evenly.
        let hash = block.wrapping_mul(SPREAD).rotate_left(self.shard_bits);
        &self.shards[(hash & self.shard_mask) as usize]
    }

    /// Length in bytes of block `block` (the last one may be short).
    #[inline]
    fn block_len(&self, block: u64) -> usize {
        let start = block << self.block_shift;
        (self.len - start).min(1 << self.block_shift) as usize
    }

    /// Block `block` (its index: byte offset / block size), from the cache or
    /// the device. The handle shares the cached buffer.
    pub fn get(&self, block: u64) -> Result<BlockRef, DeviceError> {
        if block >= self.blocks {
            return Err(DeviceError::OutOfRange {
                op: DeviceOp::Read,
                offset: block.saturating_mul(self.block_size()),
                len: self.block_size(),
                size: self.len,
            });
        }
        let mut got = None;
        let mut stream = Stream::Unseen {
            first: block,
            end: block + 1,
        };
        let (_, hit) = self.fetch(block, block + 1, &mut stream, &mut |handle| {
            got = Some(handle);
        })?;
        let got = got.expect("fetch delivers the block asked for");
        self.prefetch_after(block, 1, hit);
        Ok(got)
    }

    /// Handles to the bytes `offset..offset + len`, block by block, appended
    /// to `out`: a read with no copy.
    pub fn read_refs(
        &self,
        offset: u64,
        len: u64,
        out: &mut Vec<BlockSlice>,
    ) -> Result<(), DeviceError> {
        self.for_each_block(offset, len, |block, range| {
            out.push(block.into_slice(range));
        })
    }

    /// Calls `f(block, range within it)` for every block of the range, in
    /// order.
    fn for_each_block(
        &self,
        offset: u64,
        len: u64,
        mut f: impl FnMut(BlockRef, std::ops::Range<usize>),
    ) -> Result<(), DeviceError> {
        check_range(DeviceOp::Read, offset, len, self.len)?;
        if len == 0 {
            return Ok(());
        }
        let first = offset >> self.block_shift;
        let last = (offset + len - 1) >> self.block_shift;
        // A request that continues a stream is recorded now (its hits move the
        // stream on); a random one only at its first miss, so a random hit
        // writes nothing shared.
        let mut stream = match self.streams.continue_stream(first, last + 1) {
            Some(run) => Stream::Run(run),
            None => Stream::Unregistered { end: last + 1 },
        };
        let mut at = offset;
        let end = offset + len;
        let mut block = first;
        while block <= last {
            let (delivered, hit) = self.fetch(block, last + 1, &mut stream, &mut |handle| {
                let start = (at - (at >> self.block_shift << self.block_shift)) as usize;
                let n = (handle.len() - start).min((end - at) as usize);
                f(handle, start..start + n);
                at += n as u64;
            })?;
            self.prefetch_after(block, delivered, hit);
            block += delivered;
        }
        debug_assert_eq!(at, end);
        Ok(())
    }

    /// Shows the prefetcher (if any) `count` demand accesses from block
    /// `first` (`hit`: served without a device read of this caller's), then
    /// loads the blocks it names that are absent. A failed load is dropped:
    /// a prefetch is a guess, and a reader of that block will see the error.
    fn prefetch_after(&self, first: u64, count: u64, hit: bool) {
        let Some(prefetch) = &self.prefetch else {
            return;
        };
        let mut wanted = {
            let mut prefetch = lock(prefetch);
            let Prefetching { prefetcher, wanted } = &mut *prefetch;
            wanted.clear();
            for block in first..first + count {
                prefetcher.access(block, hit, wanted);
            }
            if wanted.is_empty() {
                return;
            }
            // Loaded without the lock; another request meanwhile gets a
            // fresh list.
            std::mem::take(wanted)
        };
        for &block in &wanted {
            if block >= self.blocks {
                continue;
            }
            let mut shard = lock(self.shard_of(block));
            if shard.map.contains_key(&block) {
                continue;
            }
            let group = self.groups.group(block << self.block_shift, false);
            let claim = shard.claim(block, group, true);
            drop(shard);
            let _ = self.load(claim, block, false, false, &mut |_| {});
        }
        wanted.clear();
        let mut prefetch = lock(prefetch);
        if prefetch.wanted.capacity() < wanted.capacity() {
            prefetch.wanted = wanted;
        }
    }

    /// The hit path, or waiting for a load, or leading one. `request_end`:
    /// the block after the caller's request (a leader reads up to it);
    /// `stream`: the request's place in the stream table, resolved at the
    /// first miss.
    /// Hands `deliver` the block and, when this call led a run, the run's
    /// following blocks up to `request_end`, in order; returns how many it
    /// delivered (each is one access: the policy sees it once) and whether
    /// they were served without a device read of this call's (a hit, or a
    /// wait for another reader's load).
    fn fetch(
        &self,
        block: u64,
        request_end: u64,
        stream: &mut Stream,
        deliver: &mut dyn FnMut(BlockRef),
    ) -> Result<(u64, bool), DeviceError> {
        loop {
            let mut shard = lock(self.shard_of(block));
            match shard.map.get(&block) {
                Some(shard::Slot::Ready { frame, group }) => {
                    let (frame, group) = (Arc::clone(frame), *group);
                    shard.hit(block, group);
                    drop(shard);
                    deliver(BlockRef::new(frame, self.block_len(block) as u32));
                    return Ok((1, true));
                }
                Some(shard::Slot::Loading { flight, group }) => {
                    let (flight, group) = (Arc::clone(flight), *group);
                    drop(shard);
                    let Some(frame) = flight.wait() else {
                        continue; // The leader failed: try again (and lead).
                    };
                    lock(self.shard_of(block)).coalesced(block, group, &frame);
                    deliver(BlockRef::new(frame, self.block_len(block) as u32));
                    return Ok((1, true));
                }
                None => {
                    let run = stream.resolve(&self.streams);
                    let group = self.groups.group(block << self.block_shift, run > 0);
                    let claim = shard.claim(block, group, false);
                    drop(shard);
                    // Read ahead from a stream's second continuation on.
                    return self
                        .load(claim, request_end, run >= 2, run > 0, deliver)
                        .map(|delivered| (delivered, false));
                }
            }
        }
    }

    /// Leads the load of `first` and the absent blocks after it (to the end
    /// of the request, plus readahead when `read_ahead`) in one device read.
    /// Each block goes in its own device's group (`sequential` or not), and
    /// each device's part of the read is charged to that group.
    fn load(
        &self,
        first: Claim,
        request_end: u64,
        read_ahead: bool,
        sequential: bool,
        deliver: &mut dyn FnMut(BlockRef),
    ) -> Result<u64, DeviceError> {
        let start = first.block;
        let mut end = request_end.max(start + 1);
        if read_ahead {
            end += self.readahead_blocks;
        }
        let end = end.min(self.blocks).min(start + RUN_BLOCKS_MAX);
        let mut run = vec![first];
        for block in start + 1..end {
            let mut shard = lock(self.shard_of(block));
            if shard.map.contains_key(&block) {
                break;
            }
            let group = self.groups.group(block << self.block_shift, sequential);
            run.push(shard.claim(block, group, block >= request_end));
        }
        let mut shares = Vec::with_capacity(2);
        for claim in &run {
            self.groups.share(
                &mut shares,
                claim.group / 2,
                self.block_len(claim.block) as u64,
            );
        }
        let started = Instant::now();
        let result = {
            let mut buffers: Vec<&mut [u8]> = run
                .iter_mut()
                .map(|claim| {
                    let len = self.block_len(claim.block);
                    &mut Arc::get_mut(&mut claim.frame)
                        .expect("a claimed frame is unique until its load ends")
                        .bytes_mut()[..len]
                })
                .collect();
            self.device
                .read_vectored_at(&mut buffers, start << self.block_shift)
        };
        let elapsed = started.elapsed();
        match result {
            Ok(()) => {
                self.groups.record_read(&shares, sequential, elapsed);
                for claim in &run {
                    lock(self.shard_of(claim.block)).install(claim);
                    claim.flight.complete(Some(Arc::clone(&claim.frame)));
                }
                // Waiters are released first; then the caller's blocks.
                let mut delivered = 0;
                for claim in run.into_iter().take_while(|c| c.block < request_end) {
                    deliver(BlockRef::new(
                        claim.frame,
                        self.block_len(claim.block) as u32,
                    ));
                    delivered += 1;
                }
                Ok(delivered)
            }
            Err(error) => {
                let several = run.len() > 1;
                for claim in run {
                    lock(self.shard_of(claim.block)).abandon(&claim);
                    claim.flight.complete(None);
                }
                if several {
                    // Perhaps only a block read ahead is unreadable: retry
                    // the one block asked for on its own.
                    return self
                        .fetch(start, start + 1, &mut Stream::Run(0), deliver)
                        .map(|(delivered, _)| delivered);
                }
                Err(error)
            }
        }
    }

    /// Locks the write stripes of blocks `first..=last`, in stripe order.
    fn lock_writes(&self, first: u64, last: u64) -> [Option<MutexGuard<'_, ()>>; WRITE_LOCKS] {
        let mut mask = 0u64;
        if last - first >= WRITE_LOCKS as u64 {
            mask = u64::MAX;
        } else {
            for block in first..=last {
                mask |= 1 << (block.wrapping_mul(SPREAD) >> 58);
            }
        }
        std::array::from_fn(|stripe| {
            (mask & (1 << stripe) != 0).then(|| lock(&self.write_locks[stripe]))
        })
    }

    /// Runs `change` on the device (a discard or a fast zero of
    /// `offset..offset + len`) under the range's write locks, then drops the
    /// range's cached blocks unless it answered `Ok(false)` (nothing
    /// changed).
    fn dropping_cached(
        &self,
        offset: u64,
        len: u64,
        change: impl FnOnce(&D) -> Result<bool, DeviceError>,
    ) -> Result<bool, DeviceError> {
        if len == 0 {
            return change(&self.device);
        }
        let first = offset >> self.block_shift;
        let last = (offset + len - 1) >> self.block_shift;
        let guards =
            (self.write_mode != WriteMode::Invalidate).then(|| self.lock_writes(first, last));
        let result = change(&self.device);
        if !matches!(result, Ok(false)) {
            self.invalidate_range(first, last);
        }
        drop(guards);
        result
    }

    /// Drops every cached copy of blocks `first..=last`.
    fn invalidate_range(&self, first: u64, last: u64) {
        let resident_max = self.capacity_bytes >> self.block_shift;
        if last - first < resident_max {
            for block in first..=last {
                lock(self.shard_of(block)).invalidate(block);
            }
            return;
        }
        // A range larger than the cache: walk the resident blocks instead.
        let mut blocks = Vec::new();
        for shard in &*self.shards {
            let mut shard = lock(shard);
            blocks.clear();
            shard.resident_in(first, last + 1, &mut blocks);
            for &block in &blocks {
                shard.invalidate(block);
            }
        }
    }

    /// Drops every cached block (`cairn ctl EXPORT drop-clean`): the cache
    /// holds clean copies only (writes go through it), so nothing is lost;
    /// later reads miss and load again. Loads in flight finish as usual.
    /// Returns how many blocks were dropped.
    pub fn drop_clean(&self) -> u64 {
        let mut blocks = Vec::new();
        self.shards
            .iter()
            .map(|shard| lock(shard).drop_resident(&mut blocks))
            .sum()
    }

    /// A snapshot of the counters and the live cost estimates.
    pub fn metrics(&self) -> CacheMetrics {
        let groups = self.groups.groups();
        let mut metrics = CacheMetrics {
            groups: (0..groups)
                .map(|g| {
                    let (device_reads, device_read_bytes, total_ns, per_block_ns) =
                        self.groups.snapshot(g);
                    GroupMetrics {
                        group: g as u16,
                        device: (g / 2) as u16,
                        sequential: g % 2 == 0,
                        device_reads,
                        device_read_bytes,
                        miss_service_ns_total: total_ns,
                        miss_service_ns_per_block: per_block_ns,
                        cost: self.groups.table().get(g as u16),
                        ..GroupMetrics::default()
                    }
                })
                .collect(),
            ..CacheMetrics::default()
        };
        for shard in &*self.shards {
            let shard = lock(shard);
            for (g, counts) in shard.counts.iter().enumerate() {
                let m = &mut metrics.groups[g];
                m.hits += counts.hits;
                m.hit_bytes += counts.hit_bytes;
                m.misses += counts.misses;
                m.miss_bytes += counts.miss_bytes;
                m.prefetched += counts.prefetched;
                m.coalesced += counts.coalesced;
            }
            metrics.resident_blocks += shard.policy.len() as u64;
            metrics.frames += shard.pool.frames() as u64;
            metrics.frames_grown += shard.pool.grown;
            metrics.detached_loads += shard.detached;
        }
        metrics
    }
}

impl<D: Device> Device for BlockCache<D> {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<(), DeviceError> {
        let mut done = 0;
        self.for_each_block(offset, buf.len() as u64, |block, range| {
            let n = range.len();
            buf[done..done + n].copy_from_slice(&block[range]);
            done += n;
        })
    }

    fn read_lent(
        &self,
        offset: u64,
        len: u64,
        out: &mut Vec<BlockSlice>,
    ) -> Result<bool, DeviceError> {
        self.read_refs(offset, len, out)?;
        Ok(true)
    }

    /// Loads the blocks of the range that are missing (at most half the
    /// cache's capacity from `offset`: a larger hint would evict its own
    /// start), as a read would, without copying them anywhere.
    fn prefetch(&self, offset: u64, len: u64) -> Result<(), DeviceError> {
        check_range(DeviceOp::Read, offset, len, self.len)?;
        let len = len.min(self.capacity_bytes() / 2);
        self.for_each_block(offset, len, |_, _| {})
    }

    /// The device below knows: every write reaches it before it is acknowledged.
    fn allocation(
        &self,
        offset: u64,
        len: u64,
        out: &mut Vec<crate::device::Extent>,
    ) -> Result<bool, DeviceError> {
        self.device.allocation(offset, len, out)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> Result<(), DeviceError> {
        check_range(DeviceOp::Write, offset, buf.len() as u64, self.len)?;
        if buf.is_empty() {
            return Ok(());
        }
        let first = offset >> self.block_shift;
        let last = (offset + buf.len() as u64 - 1) >> self.block_shift;
        let update = self.write_mode != WriteMode::Invalidate;
        let allocate = (self.write_mode == WriteMode::Allocate).then(|| {
            let sequential = self.streams.observe(first, last + 1) > 0;
            self.groups.group(offset, sequential)
        });
        let guards = if update {
            Some(self.lock_writes(first, last))
        } else {
            None
        };
        let result = self.device.write_at(buf, offset);
        if update && result.is_ok() {
            let mut at = offset;
            let end = offset + buf.len() as u64;
            for block in first..=last {
                let within = (at - (block << self.block_shift)) as usize;
                let block_len = self.block_len(block);
                let n = (block_len - within).min((end - at) as usize);
                let from = (at - offset) as usize;
                lock(self.shard_of(block)).update(
                    block,
                    within,
                    &buf[from..from + n],
                    block_len,
                    allocate,
                );
                at += n as u64;
            }
        } else {
            // Invalidate mode, or a failed write (the device may hold part of
            // it): no cached copy of these blocks survives.
            self.invalidate_range(first, last);
        }
        drop(guards);
        result
    }

    fn flush(&self) -> Result<(), DeviceError> {
        self.device.flush()
    }

    fn discard(&self, offset: u64, len: u64) -> Result<(), DeviceError> {
        check_range(DeviceOp::Discard, offset, len, self.len)?;
        self.dropping_cached(offset, len, |device| {
            device.discard(offset, len).map(|()| true)
        })
        .map(|_| ())
    }

    /// The device's fast zero, with the range's cached blocks dropped as a
    /// discard drops them (under the same write locks) when it zeroed.
    fn zero_fast(&self, offset: u64, len: u64) -> Result<bool, DeviceError> {
        check_range(DeviceOp::Write, offset, len, self.len)?;
        self.dropping_cached(offset, len, |device| device.zero_fast(offset, len))
    }

    fn len(&self) -> u64 {
        self.len
    }

    fn alignment(&self) -> u64 {
        self.device.alignment()
    }

    fn busy_ns(&self) -> Option<u64> {
        self.device.busy_ns()
    }

    fn describe(&self) -> String {
        let prefetch = self
            .prefetcher_name()
            .map_or(String::new(), |name| format!(", prefetch {name}"));
        format!(
            "block cache ({}, {} B, {} B blocks, {} shards{prefetch}) over {}",
            self.policy_name,
            self.capacity_bytes,
            self.block_size(),
            self.shards.len(),
            self.device.describe()
        )
    }
}

#[cfg(all(test, not(feature = "shuttle")))]
mod tests;
