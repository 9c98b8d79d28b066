//! The file-aware block cache (DESIGN technique 1, papers/000): objects cut
//! into large blocks, kept in DRAM, handed out without a copy.
//!
//! - **Keys** are (object, block index). An object is numbered by its key,
//!   size and modification time ([`FileCache::open`]), so a file that
//!   changes gets a new number and its old blocks are never served again
//!   (they age out). The policy key is `number << 28 | index`
//!   ([`BLOCK_INDEX_BITS`]); the policy also sees the object and index
//!   (`Access::object`, `Access::block`), what prefaces and streams need.
//! - **Large blocks**: a power of two in [`BLOCK_SIZE_MIN`]–[`BLOCK_SIZE_MAX`]
//!   (default 1 MiB); an object's last block holds only its remaining bytes.
//! - **Any policy** of `cairn-policy` by name (default `ons`), one instance
//!   per shard on its share of the capacity; the policies that need future
//!   requests (`opt` and kin) are refused.
//! - **Dual** (papers/001): `dual` sees each block's object number and index,
//!   which is all it needs (the simulator feeds it the same from a trace): it
//!   counts active files, estimates their sizes from the blocks read, sizes
//!   the preface and evicts whole prefaces, which leave through the same
//!   eviction path as any victim. Its file-level state must see every block
//!   of a file, so with `dual` the shards are chosen by object, not by block,
//!   and the automatic shard count is 1 (the preface formula's `N_f` and
//!   `S_lf` are then the whole cache's, as in `cairn sim -p dual`).
//! - **Sharded** by a hash of the key (of the object, with `dual`); a shard
//!   is one mutex over its slot map and its policy. A hit locks only its
//!   shard and allocates nothing.
//! - **Single-flight**: the first reader to miss a block reads the backend;
//!   readers of the same block meanwhile — from any connection — wait for
//!   that read and get the same buffer, or the same error; a wait that got
//!   the resident copy counts for the policy as a hit. A failed read
//!   leaves nothing behind: the next reader tries the backend again.
//! - **Zero-copy handles**: a block is a [`BlockRef`] (the store's handle
//!   type); a hit clones it (one atomic increment) and the bytes stay valid
//!   for as long as the caller holds it, eviction or not.
//! - **Counters** ([`FileCacheStats`]) are relaxed atomics beside each shard:
//!   no lock and no allocation to count. What is a level rather than a count
//!   (resident blocks and bytes, `dual`'s preface and active files) is read
//!   from the shards when [`FileCache::stats`] is called, never per access.
//!   [`FileCacheStats::metrics`] names them for `cairn stats` and
//!   Prometheus (`cairn_files_<name>`): a new counter is a field of
//!   `Counters`, of [`FileCacheStats`] and a line there.
//! - **Readahead** (papers/001, off unless
//!   [`FileCacheConfig::prefetch_window_blocks`] > 0): after each demand
//!   access, [`Readahead`] (the rule `cairn reproduce dual` simulates) names
//!   the next window of the object's blocks when the access is sequential;
//!   each one not held is admitted into the policy at once (as the
//!   simulator admits it: it can evict, it is not an access) under a
//!   single-flight slot, and read by a pool of `window` prefetch threads,
//!   blocks on different servers of a striped backend in parallel. A demand
//!   reader of a block being read ahead waits for that read (a policy hit,
//!   counted `coalesced`). At most 4 × window reads (at least
//!   [`PREFETCH_IN_FLIGHT_MIN`](crate::limits::PREFETCH_IN_FLIGHT_MIN)) are queued or running; more are dropped
//!   (counted). Since the policy sees the same admissions in
//!   the same order as the simulator, one reader's block hits are the
//!   simulator's whatever the reads' timing.
//! - **Hand-down** (only over a backend that takes demotions: an exclusive
//!   spill, [`Backend::takes_demotions`]): every block the cache drops — a
//!   policy victim, a block it would not admit, a read-ahead block never
//!   used — enters its shard's `in_transit` table and a queue for the
//!   `cairn-demote` thread, which hands it to [`Backend::demote`]; with the
//!   queue full ([`DEMOTE_QUEUE`](crate::limits::DEMOTE_QUEUE)) the dropping thread does it. A demand
//!   miss of a block in transit takes it back from there (a policy miss, no
//!   backend read), and the hand-down then retracts it
//!   ([`Backend::retract`]); the entry goes only once the level below agrees
//!   with it, so a block is in exactly one level once the hand-downs are
//!   done. [`FileCache::demote_all`] hands every held block down at a
//!   clean stop. A demand miss reads by [`Backend::read_kept`]: a level
//!   below that serves the block whole and keeps it (an exclusive spill
//!   that does not promote) is not followed by an admission here.
//! - **Cost groups** (papers/004): a block's group is the backend that holds
//!   its object ([`Backend::locate`]: a [`UnionBackend`](crate::backend::UnionBackend)'s
//!   member; 0 for any other backend), with no sequential/random split (a
//!   block is one large read either way). Every backend read, demand or
//!   ahead, is timed — by the backend's busy clock if it keeps one
//!   ([`Backend::busy_ns`], a throttled backend's modelled time), else by the
//!   wall clock — and fed to a [`CostEstimator`] (the block cache's), which
//!   keeps each group's cost (its ns per byte over the fastest's) in the
//!   table the `cost` policy reads: with `--policy cost` the slow backend's
//!   blocks stay longer. Other policies ignore groups.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use cairn_policy::cost::CostEstimator;
use cairn_policy::prefetch::Readahead;
use cairn_policy::{Access, Capacity, NEVER, Op, Policy, PolicyConfig};
use cairn_store::BlockRef;
use cairn_store::device::BufferPool;
use cairn_store::stats::{GroupStats, Metric, MetricSink};
use hashbrown::HashMap;

use crate::backend::{Backend, BackendError, BackendErrorKind, ObjectInfo};
use crate::limits::{
    BLOCK_INDEX_BITS, BLOCK_SIZE_DEFAULT, BLOCK_SIZE_MAX, BLOCK_SIZE_MIN, IDLE_BUFFERS,
    OBJECTS_MAX, PREFETCH_WINDOW_MAX, SHARDS_MAX,
};

/// Fibonacci hashing constant: spreads keys over shards.
const SPREAD: u64 = 0x9E37_79B9_7F4A_7C15;

/// What a [`FileCache`] is built from. `Default`: 1 MiB blocks, 256 MiB,
/// ONS, automatic sharding.
#[derive(Clone, Debug)]
pub struct FileCacheConfig {
    /// Block size in bytes: a power of two in [`BLOCK_SIZE_MIN`],
    /// [`BLOCK_SIZE_MAX`]. Default 1 MiB.
    pub block_size_bytes: u64,
    /// Capacity in bytes, at least one block per shard. Default 256 MiB.
    pub capacity_bytes: u64,
    /// The replacement policy. Default ONS (papers/000).
    pub policy: PolicyConfig,
    /// Shards, a power of two up to [`SHARDS_MAX`]; 0 chooses: 4 per core,
    /// halved while a shard would hold fewer than 64 blocks. Default 0.
    pub shards: usize,
    /// How long an object's size and modification time, once read from the
    /// backend, are trusted: a request within it opens the object without
    /// asking the backend (a `HEAD` for an HTTP origin), so a change is seen
    /// up to this late. Zero (the default): every request asks.
    pub revalidate: Duration,
    /// Readahead window in blocks (papers/001: stripes × servers); 0, the
    /// default, reads nothing ahead. At most [`PREFETCH_WINDOW_MAX`].
    pub prefetch_window_blocks: u64,
    /// Weight of a new backend read time in each backend's cost estimate
    /// (an exponentially weighted moving average), in 0–1; 0 keeps the
    /// configured costs. Default 0.1 (as the block cache's).
    pub cost_smoothing: f64,
}

impl Default for FileCacheConfig {
    fn default() -> Self {
        Self {
            block_size_bytes: BLOCK_SIZE_DEFAULT,
            capacity_bytes: 256 << 20,
            policy: PolicyConfig::default_for("ons").expect("cairn-policy has ons"),
            shards: 0,
            revalidate: Duration::ZERO,
            prefetch_window_blocks: 0,
            cost_smoothing: 0.1,
        }
    }
}

/// A cache configuration that cannot be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FileCacheError {
    /// The block size is not a power of two in range.
    #[error(
        "block size {0} bytes is not a power of two between {BLOCK_SIZE_MIN} and {BLOCK_SIZE_MAX}"
    )]
    BlockSize(u64),
    /// The shard count is not a power of two in range.
    #[error("shard count {0} is not a power of two between 1 and {SHARDS_MAX}")]
    Shards(usize),
    /// The capacity holds less than one block per shard.
    #[error(
        "capacity {capacity} bytes holds less than one {block_size}-byte block in each of {shards} shards"
    )]
    Capacity {
        /// The capacity given.
        capacity: u64,
        /// The block size.
        block_size: u64,
        /// The shard count.
        shards: usize,
    },
    /// The policy cannot run in a server.
    #[error(
        "policy {0}: it needs knowledge a server does not have (future requests); choose another, e.g. ons or lru"
    )]
    Unservable(&'static str),
    /// The readahead window is too large.
    #[error("readahead window {0} blocks is more than {PREFETCH_WINDOW_MAX}")]
    PrefetchWindow(u64),
    /// The cost smoothing is not in 0–1.
    #[error("cost smoothing {0} is not between 0 and 1")]
    Smoothing(f64),
    /// The policy's parameters are out of range.
    #[error("policy: {0}")]
    Policy(#[from] cairn_policy::ConfigError),
}

impl FileCacheConfig {
    /// Whether blocks are sharded by their object (`dual`, whose prefaces
    /// and active files are per file) rather than by block.
    pub fn shards_by_object(&self) -> bool {
        matches!(self.policy, PolicyConfig::Dual(_))
    }

    /// Checks the configuration; returns the shard count to use.
    pub fn validate(&self) -> Result<usize, FileCacheError> {
        let block = self.block_size_bytes;
        if !block.is_power_of_two() || !(BLOCK_SIZE_MIN..=BLOCK_SIZE_MAX).contains(&block) {
            return Err(FileCacheError::BlockSize(block));
        }
        if self.policy.needs_next_access() {
            return Err(FileCacheError::Unservable("opt and its kin"));
        }
        if !(0.0..=1.0).contains(&self.cost_smoothing) {
            return Err(FileCacheError::Smoothing(self.cost_smoothing));
        }
        if self.prefetch_window_blocks > PREFETCH_WINDOW_MAX {
            return Err(FileCacheError::PrefetchWindow(self.prefetch_window_blocks));
        }
        let blocks = self.capacity_bytes / block;
        let shards = if self.shards == 0 && self.shards_by_object() {
            1
        } else if self.shards == 0 {
            let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
            let mut shards = (cores * 4).next_power_of_two().min(SHARDS_MAX);
            while shards > 1 && blocks / (shards as u64) < 64 {
                shards /= 2;
            }
            shards
        } else {
            self.shards
        };
        if !shards.is_power_of_two() || shards > SHARDS_MAX {
            return Err(FileCacheError::Shards(shards));
        }
        if blocks < shards as u64 {
            return Err(FileCacheError::Capacity {
                capacity: self.capacity_bytes,
                block_size: block,
                shards,
            });
        }
        Ok(shards)
    }
}

/// An object as the cache numbers it: what [`FileCache::open`] returns and
/// [`FileCache::block`] reads from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Object {
    number: u64,
    /// Which part of the backend holds it ([`Backend::locate`]).
    part: u16,
    /// Its size and modification time when opened.
    pub info: ObjectInfo,
}

impl Object {
    /// Which of the backend's parts holds it: a [`UnionBackend`](crate::backend::UnionBackend)'s
    /// member, 0 for any other backend. Its blocks' cost group.
    pub fn backend(&self) -> u16 {
        self.part
    }
}

enum Slot {
    Ready(BlockRef),
    /// Read ahead; no demand access has found it yet.
    Prefetched(BlockRef),
    Loading(Arc<Flight>),
}

/// One block's backend read in progress; waiters get its result.
struct Flight {
    result: Mutex<Option<Result<BlockRef, BackendError>>>,
    done: Condvar,
    /// A readahead's read (already admitted into the policy).
    prefetch: bool,
    /// A demand access found it (set and read under the shard lock).
    used: AtomicBool,
}

impl Flight {
    fn new(prefetch: bool) -> Arc<Self> {
        Arc::new(Self {
            result: Mutex::new(None),
            done: Condvar::new(),
            prefetch,
            used: AtomicBool::new(false),
        })
    }

    fn complete(&self, result: Result<BlockRef, BackendError>) {
        *lock(&self.result) = Some(result);
        self.done.notify_all();
    }

    fn wait(&self) -> Result<BlockRef, BackendError> {
        let mut result = lock(&self.result);
        loop {
            if let Some(result) = &*result {
                return result.clone();
            }
            result = self
                .done
                .wait(result)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
    }
}

struct Shard {
    map: HashMap<u64, Slot>,
    policy: Box<dyn Policy>,
    victims: Vec<u64>,
    /// With a backend that takes demotions: the blocks the last admits
    /// dropped, handed down once the lock is released.
    demoted: Option<Vec<(u64, BlockRef)>>,
    /// Dropped blocks being handed down (by `FileCache::release`; each
    /// entry is its hand-down's until the level below agrees with it): a
    /// reader that misses one takes it back from here.
    in_transit: HashMap<u64, Transit>,
    clock: u64,
    /// Read-ahead blocks evicted before any demand access.
    prefetch_wasted: u64,
}

/// A shard's lock and counters, alone on their cache lines.
#[repr(align(128))]
struct ShardCell {
    shard: Mutex<Shard>,
    counters: Counters,
}

/// The object numbering: key → (number, version).
struct Objects {
    numbers: HashMap<Box<str>, Known>,
    /// With a backend that takes demotions: each live number's key and
    /// version, to name a dropped block to it.
    names: Option<HashMap<u64, (Arc<str>, ObjectInfo)>>,
    next: u64,
}

/// A numbered object version and when the backend last confirmed it.
struct Known {
    object: Object,
    checked: Instant,
}

/// One block to read ahead, for a prefetch thread.
struct Job {
    key: Box<str>,
    part: u16,
    cache_key: u64,
    offset: u64,
    len: usize,
    cell: usize,
    flight: Arc<Flight>,
}

/// One readahead and the buffer it names blocks into.
type ReadaheadState = (Readahead, Vec<u64>);

/// The readahead: its state (sharded by object) and its threads' queue.
struct Prefetch {
    /// Readahead state and its output buffer, by object.
    readaheads: Box<[Mutex<ReadaheadState>]>,
    queue: Option<std::sync::mpsc::SyncSender<Job>>,
    /// Reads queued or running.
    in_flight: Arc<AtomicU64>,
    in_flight_max: u64,
    dropped: AtomicU64,
    threads: Vec<std::thread::JoinHandle<()>>,
}

/// A large-block cache over a [`Backend`]. See the module docs.
pub struct FileCache<B> {
    backend: Arc<B>,
    shards: Arc<[ShardCell]>,
    shard_mask: u64,
    /// Shards chosen by object number (`dual`), not by cache key.
    by_object: bool,
    block_shift: u32,
    block_size: u32,
    objects: Arc<Mutex<Objects>>,
    revalidate: Duration,
    /// Failed lookups ([`FileCache::open`]); failed block reads count in
    /// their shard.
    open_errors: ErrorCounters,
    policy_name: &'static str,
    capacity_bytes: u64,
    prefetch: Option<Prefetch>,
    /// Each backend part's read times and the costs learned from them.
    costs: Arc<CostEstimator>,
    /// Whole-block buffers, reused as blocks are let go.
    buffers: Arc<BufferPool>,
    /// With a backend that takes demotions: the hand-down's thread.
    demoter: Option<Demoter<B>>,
}

impl<B> Drop for FileCache<B> {
    fn drop(&mut self) {
        if let Some(prefetch) = &mut self.prefetch {
            // Closing the queue ends each thread after its current read.
            prefetch.queue = None;
            for thread in prefetch.threads.drain(..) {
                let _ = thread.join();
            }
        }
        if let Some(demoter) = &mut self.demoter {
            // Its thread hands down what is queued, then ends.
            demoter.queue = None;
            if let Some(thread) = demoter.thread.take() {
                let _ = thread.join();
            }
        }
    }
}

/// A block on its way down to the backend's level.
struct Transit {
    block: BlockRef,
    /// A reader took it back into the cache since: the level below should
    /// not keep it (until the cache drops it again).
    taken_back: bool,
}

/// Blocks a shard dropped, each with its cache key.
type Dropped = Vec<(u64, BlockRef)>;

/// What handing blocks down needs: a thread of its own runs it, so that a
/// reader does not wait for the level below's write.
struct HandDown<B> {
    backend: Arc<B>,
    shards: Arc<[ShardCell]>,
    objects: Arc<Mutex<Objects>>,
    shard_mask: u64,
    by_object: bool,
    block_shift: u32,
}

/// The hand-down's thread and its queue.
struct Demoter<B> {
    hand: Arc<HandDown<B>>,
    /// Batches for the thread; when it is full, the caller hands its batch
    /// down itself (so what is in transit stays bounded).
    queue: Option<std::sync::mpsc::SyncSender<Dropped>>,
    /// Blocks queued or being handed down by the thread.
    queued: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// The shard cell of a cache key (of `object`'s number when `by_object`).
fn cell_of(cache_key: u64, object: u64, by_object: bool, mask: u64) -> usize {
    let spread = if by_object { object } else { cache_key };
    (spread.wrapping_mul(SPREAD) >> 32 & mask) as usize
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl<B: Backend + 'static> FileCache<B> {
    /// A cache over `backend` (with readahead, its threads start here).
    pub fn new(backend: B, config: &FileCacheConfig) -> Result<Self, FileCacheError> {
        let shards = config.validate()?;
        let block = config.block_size_bytes;
        let per_shard_blocks = config.capacity_bytes / block / shards as u64;
        let mut cells = Vec::with_capacity(shards);
        let mut policy_name = "";
        let groups = usize::from(backend.parts().max(1));
        let demotes = backend.takes_demotions();
        let table = Arc::new(config.policy.cost_table(groups)?);
        let costs = Arc::new(CostEstimator::new(
            groups,
            Arc::clone(&table),
            config.cost_smoothing,
        ));
        for _ in 0..shards {
            let policy = config
                .policy
                .build_with_costs(Capacity::Bytes(per_shard_blocks * block), &table)?;
            policy_name = policy.name();
            cells.push(ShardCell {
                shard: Mutex::new(Shard {
                    map: HashMap::with_capacity(per_shard_blocks as usize + 16),
                    policy,
                    victims: Vec::with_capacity(16),
                    demoted: demotes.then(Vec::new),
                    in_transit: HashMap::new(),
                    clock: 0,
                    prefetch_wasted: 0,
                }),
                counters: Counters::default(),
            });
        }
        let backend = Arc::new(backend);
        let cells: Arc<[ShardCell]> = cells.into();
        let objects = Arc::new(Mutex::new(Objects {
            numbers: HashMap::new(),
            names: demotes.then(HashMap::new),
            next: 0,
        }));
        let demoter = demotes.then(|| {
            Demoter::start(Arc::new(HandDown {
                backend: Arc::clone(&backend),
                shards: Arc::clone(&cells),
                objects: Arc::clone(&objects),
                shard_mask: shards as u64 - 1,
                by_object: config.shards_by_object(),
                block_shift: block.trailing_zeros(),
            }))
        });
        let buffers = BufferPool::new(block as usize, IDLE_BUFFERS);
        let prefetch = (config.prefetch_window_blocks > 0).then(|| {
            Prefetch::start(
                &backend,
                &cells,
                &costs,
                &buffers,
                config.prefetch_window_blocks,
                shards,
            )
        });
        Ok(Self {
            backend,
            shards: cells,
            shard_mask: shards as u64 - 1,
            by_object: config.shards_by_object(),
            block_shift: block.trailing_zeros(),
            block_size: block as u32,
            objects,
            revalidate: config.revalidate,
            open_errors: ErrorCounters::default(),
            policy_name,
            capacity_bytes: per_shard_blocks * block * shards as u64,
            prefetch,
            costs,
            buffers,
            demoter,
        })
    }
}

/// What a block read needs: the backend, the cost groups its reads are
/// timed for, and the buffers it reads into.
struct BlockReader<'a, B> {
    backend: &'a B,
    costs: &'a CostEstimator,
    buffers: &'a Arc<BufferPool>,
}

impl<B: Backend> BlockReader<'_, B> {
    /// A block's `len` bytes of `key` at `offset`, read from `part` into a
    /// buffer of its own (a reused one if it is a whole block: a backend's
    /// read fills all of its buffer or fails, so a reused buffer's old
    /// bytes are never served); a successful read's time is recorded for
    /// `part`'s cost group: the part's busy clock's advance if it keeps
    /// one, else the wall time. With `may_keep` (a demand read, not yet
    /// admitted) the backend may keep the block in a level of its own
    /// ([`Backend::read_kept`]); the `bool` says it did.
    fn read(
        &self,
        part: u16,
        key: &str,
        offset: u64,
        len: usize,
        may_keep: bool,
    ) -> Result<(BlockRef, bool), BackendError> {
        let (backend, buffers) = (self.backend, self.buffers);
        let whole = len == buffers.buffer_len();
        let mut buf = if whole {
            buffers.take()
        } else {
            vec![0u8; len]
        };
        let clock = backend.busy_ns(part);
        let start = Instant::now();
        let read = if may_keep {
            backend.read_kept(part, key, offset, &mut buf)
        } else {
            backend
                .read_part(part, key, offset, &mut buf)
                .map(|()| false)
        };
        let kept = match read {
            Ok(kept) => kept,
            Err(e) => {
                if whole {
                    buffers.give_back(buf);
                }
                return Err(e);
            }
        };
        let ns = match clock {
            Some(before) => backend
                .busy_ns(part)
                .unwrap_or(before)
                .saturating_sub(before),
            None => start.elapsed().as_nanos().min(u128::from(u64::MAX)) as u64,
        };
        self.costs.record(part, len as u64, ns, true);
        let block = if whole {
            BlockRef::pooled(buf, buffers)
        } else {
            BlockRef::shared(Arc::new(buf))
        };
        Ok((block, kept))
    }
}

impl<B: Backend> FileCache<B> {
    /// Each backend part's learned cost (its reads' smoothed ns per byte
    /// over the fastest part's; 1 until measured, and for one backend),
    /// first part first.
    pub fn backend_costs(&self) -> impl Iterator<Item = f64> + '_ {
        (0..self.costs.groups()).map(|g| self.costs.table().get(g as u16))
    }

    /// The backend's own metrics ([`Backend::metrics`]: a spill's
    /// `spill_…`).
    pub fn backend_metrics(&self, out: &mut Vec<Metric>) {
        self.backend.metrics(out);
    }

    /// With several backend parts (a union), each one's reads, bytes, read
    /// time and learned cost, a group named by its index (`cairn stats`;
    /// Prometheus `cairn_files_union_…{member="N"}`); none for one
    /// backend.
    pub fn backend_groups(&self) -> Vec<GroupStats> {
        if self.costs.groups() < 2 {
            return Vec::new();
        }
        (0..self.costs.groups())
            .map(|group| {
                let reads = self.costs.snapshot(group);
                let mut metrics = Vec::with_capacity(4);
                let mut m = MetricSink(&mut metrics);
                m.counter(
                    "reads",
                    reads.reads,
                    "block reads from this backend of the union (demand and ahead)",
                );
                m.counter(
                    "read_bytes",
                    reads.bytes,
                    "bytes read from this backend of the union",
                );
                m.counter(
                    "read_ns",
                    reads.ns,
                    "time of those reads, ns (the backend's busy clock if throttled, else wall time)",
                );
                m.real(
                    "cost",
                    Some(self.costs.table().get(group as u16)),
                    "this backend's eviction cost: its smoothed read time per byte over the fastest backend's (policy cost)",
                );
                GroupStats {
                    name: group.to_string(),
                    metrics,
                }
            })
            .collect()
    }

    /// The backend under the cache.
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// Block size in bytes.
    pub fn block_size(&self) -> u64 {
        u64::from(self.block_size)
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

    /// Looks `key` up in the backend and numbers this version of it — or,
    /// within [`FileCacheConfig::revalidate`] of the backend's last answer
    /// for it, returns that version without asking.
    pub fn open(&self, key: &str) -> Result<Object, BackendError> {
        if !self.revalidate.is_zero()
            && let Some(known) = lock(&self.objects).numbers.get(key)
            && known.checked.elapsed() < self.revalidate
        {
            return Ok(known.object);
        }
        let checked = Instant::now();
        let (info, part) = self.backend.locate(key).inspect_err(|e| {
            self.open_errors.count(e.kind);
        })?;
        if info.size.div_ceil(self.block_size()) > 1 << BLOCK_INDEX_BITS {
            return Err(BackendError::new(
                BackendErrorKind::Other,
                format!(
                    "{key}: {} bytes is more than {} blocks",
                    info.size,
                    1u64 << BLOCK_INDEX_BITS
                ),
            ));
        }
        let mut objects = lock(&self.objects);
        if let Some(known) = objects.numbers.get_mut(key)
            && known.object.info == info
            && known.object.part == part
        {
            known.checked = known.checked.max(checked);
            return Ok(known.object);
        }
        if objects.numbers.len() >= OBJECTS_MAX {
            // Forget the numbering; numbers are never reused, so no block
            // cached under an old number is ever served for a new one.
            // (Nor handed down: without a name it is dropped.)
            objects.numbers.clear();
            if let Some(names) = &mut objects.names {
                names.clear();
            }
        }
        let object = Object {
            number: objects.next,
            part,
            info,
        };
        objects.next += 1;
        let old = objects
            .numbers
            .insert(key.into(), Known { object, checked });
        if let Some(names) = &mut objects.names {
            if let Some(old) = old {
                // The old version's blocks are not handed down.
                names.remove(&old.object.number);
            }
            names.insert(object.number, (key.into(), info));
        }
        Ok(object)
    }

    /// Block `index` of `object` (opened as `key`): its bytes, from the
    /// cache or read from the backend once however many readers want it;
    /// then, with readahead on, the blocks it names start being read.
    pub fn block(&self, key: &str, object: &Object, index: u64) -> Result<BlockRef, BackendError> {
        let block = self.demand(key, object, index)?;
        if let Some(prefetch) = &self.prefetch {
            self.read_ahead(prefetch, key, object, index);
        }
        Ok(block)
    }

    /// Waits until no read ahead is queued or running (for tests and
    /// benchmarks that want the simulator's order: each request's readahead
    /// done before the next request).
    pub fn wait_for_prefetches(&self) {
        if let Some(prefetch) = &self.prefetch {
            while prefetch.in_flight.load(Ordering::Acquire) > 0 {
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
        }
    }

    /// The shard cell of a cache key (of `object`'s number with `dual`).
    fn cell_index(&self, cache_key: u64, object: u64) -> usize {
        cell_of(cache_key, object, self.by_object, self.shard_mask)
    }

    /// After a demand access to `index`: the blocks the readahead names,
    /// each not held admitted and queued for a prefetch thread.
    fn read_ahead(&self, prefetch: &Prefetch, key: &str, object: &Object, index: u64) {
        let readaheads = &prefetch.readaheads;
        let which = (object.number.wrapping_mul(SPREAD) >> 32) as usize % readaheads.len();
        let mut state = lock(&readaheads[which]);
        let (readahead, named) = &mut *state;
        named.clear();
        let blocks = object.info.size.div_ceil(self.block_size());
        readahead.access(object.number, index, Some(blocks), named);
        for &ahead in named.iter() {
            self.issue(prefetch, key, object, ahead);
        }
    }

    /// Reads block `index` ahead unless it is held or being read.
    fn issue(&self, prefetch: &Prefetch, key: &str, object: &Object, index: u64) {
        let offset = index << self.block_shift;
        let len = (object.info.size - offset).min(self.block_size()) as usize;
        let cache_key = (object.number << BLOCK_INDEX_BITS) | index;
        let cell_index = self.cell_index(cache_key, object.number);
        let cell = &self.shards[cell_index];
        let mut shard = lock(&cell.shard);
        if shard.map.contains_key(&cache_key) || shard.in_transit.contains_key(&cache_key) {
            // Held, or on its way down (a demand read takes it back).
            return;
        }
        if prefetch.in_flight.load(Ordering::Acquire) >= prefetch.in_flight_max {
            drop(shard);
            prefetch.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let access = shard.access(cache_key, object, index, self.block_size);
        let flight = Flight::new(true);
        if !shard.admit(cache_key, &access, Slot::Loading(Arc::clone(&flight))) {
            self.release(shard);
            return;
        }
        prefetch.in_flight.fetch_add(1, Ordering::AcqRel);
        let job = Job {
            key: key.into(),
            part: object.part,
            cache_key,
            offset,
            len,
            cell: cell_index,
            flight,
        };
        let sent = prefetch
            .queue
            .as_ref()
            .is_some_and(|queue| queue.try_send(job).is_ok());
        if sent {
            self.release(shard);
            cell.counters
                .prefetch_issued
                .fetch_add(1, Ordering::Relaxed);
        } else {
            // Not expected (the queue holds in_flight_max): undo.
            shard.map.remove(&cache_key);
            shard.policy.remove(cache_key);
            self.release(shard);
            prefetch.in_flight.fetch_sub(1, Ordering::AcqRel);
            prefetch.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The demand part of [`block`](Self::block).
    fn demand(&self, key: &str, object: &Object, index: u64) -> Result<BlockRef, BackendError> {
        let offset = index << self.block_shift;
        if offset >= object.info.size {
            return Err(BackendError::new(
                BackendErrorKind::Other,
                format!(
                    "{key}: block {index} is past the end ({} bytes)",
                    object.info.size
                ),
            ));
        }
        let len = (object.info.size - offset).min(self.block_size()) as usize;
        let cache_key = (object.number << BLOCK_INDEX_BITS) | index;
        let cell = &self.shards[self.cell_index(cache_key, object.number)];
        let mut shard = lock(&cell.shard);
        let access = shard.access(cache_key, object, index, self.block_size);
        match shard.map.get_mut(&cache_key) {
            Some(slot @ (Slot::Ready(_) | Slot::Prefetched(_))) => {
                // A read-ahead block's first demand access makes it an
                // ordinary resident one.
                let first_use = matches!(slot, Slot::Prefetched(_));
                let (Slot::Ready(block) | Slot::Prefetched(block)) = slot else {
                    unreachable!("matched above")
                };
                let block = block.clone();
                if first_use {
                    *slot = Slot::Ready(block.clone());
                }
                let resident = shard.policy.lookup(&access);
                debug_assert!(resident, "a ready or read-ahead block is in the policy");
                drop(shard);
                cell.counters.hit(len);
                if first_use {
                    cell.counters.prefetch_used.fetch_add(1, Ordering::Relaxed);
                }
                return Ok(block);
            }
            Some(Slot::Loading(flight)) if flight.prefetch => {
                // Admitted when read ahead: a hit for the policy now, as in
                // the simulator; the bytes are the read ahead's.
                let flight = Arc::clone(flight);
                let resident = shard.policy.lookup(&access);
                debug_assert!(resident, "a block being read ahead is in the policy");
                let first = !flight.used.swap(true, Ordering::Relaxed);
                drop(shard);
                if first {
                    cell.counters.prefetch_used.fetch_add(1, Ordering::Relaxed);
                }
                let result = flight.wait();
                if result.is_ok() {
                    cell.counters.coalesced(len);
                }
                return result;
            }
            Some(Slot::Loading(flight)) => {
                let flight = Arc::clone(flight);
                drop(shard);
                let result = flight.wait();
                if let Ok(block) = &result {
                    // The wait was an access too: if the block it got is
                    // still the resident copy, the policy counts it as a hit
                    // (ONS's hit counts see every reader of a popular block).
                    let mut shard = lock(&cell.shard);
                    if let Some(Slot::Ready(resident)) = shard.map.get(&cache_key)
                        && resident.same_buffer(block)
                    {
                        let access = shard.access(cache_key, object, index, self.block_size);
                        shard.policy.lookup(&access);
                    }
                    drop(shard);
                    cell.counters.coalesced(len);
                }
                return result;
            }
            None => {}
        }
        // The leader: claim the slot, read outside the lock.
        let resident = shard.policy.lookup(&access);
        debug_assert!(!resident, "a block without a slot is not in the policy");
        if let Some(transit) = shard.in_transit.get_mut(&cache_key)
            && !transit.taken_back
        {
            // Dropped a moment ago and still on its way down: a policy miss
            // whose bytes are still here. Its hand-down sees it taken back.
            transit.taken_back = true;
            let block = transit.block.clone();
            shard.install(cache_key, &access, &block);
            self.release(shard);
            cell.counters.hit(len);
            return Ok(block);
        }
        let flight = Flight::new(false);
        shard
            .map
            .insert(cache_key, Slot::Loading(Arc::clone(&flight)));
        drop(shard);
        let reader = BlockReader {
            backend: &*self.backend,
            costs: &self.costs,
            buffers: &self.buffers,
        };
        let result = reader.read(object.part, key, offset, len, true);
        let mut shard = lock(&cell.shard);
        let result = match result {
            Ok((block, kept)) => {
                if kept {
                    // The level below served it and keeps it: not held twice.
                    shard.map.remove(&cache_key);
                    drop(shard);
                } else {
                    shard.install(cache_key, &access, &block);
                    self.release(shard);
                }
                cell.counters.miss(len);
                Ok(block)
            }
            Err(e) => {
                // Nothing cached: the next reader tries the backend again.
                shard.map.remove(&cache_key);
                drop(shard);
                cell.counters.errors.count(e.kind);
                Err(e)
            }
        };
        flight.complete(result.clone());
        result
    }

    /// The counters, summed over shards, and the levels now: each shard is
    /// locked in turn to count its resident blocks (a walk of its map: this
    /// is for a scrape or a summary, not for every request).
    pub fn stats(&self) -> FileCacheStats {
        let mut stats = FileCacheStats {
            capacity_bytes: self.capacity_bytes,
            ..FileCacheStats::default()
        };
        self.open_errors.add_to(&mut stats.backend_errors);
        for cell in self.shards.iter() {
            let c = &cell.counters;
            stats.hits += c.hits.load(Ordering::Relaxed);
            stats.misses += c.misses.load(Ordering::Relaxed);
            stats.coalesced += c.coalesced.load(Ordering::Relaxed);
            c.errors.add_to(&mut stats.backend_errors);
            stats.bytes_from_cache += c.bytes_from_cache.load(Ordering::Relaxed);
            stats.bytes_from_backend += c.bytes_from_backend.load(Ordering::Relaxed);
            stats.prefetch_issued += c.prefetch_issued.load(Ordering::Relaxed);
            stats.prefetch_used += c.prefetch_used.load(Ordering::Relaxed);
            let shard = lock(&cell.shard);
            for slot in shard.map.values() {
                if let Slot::Ready(block) | Slot::Prefetched(block) = slot {
                    stats.resident_blocks += 1;
                    stats.resident_bytes += block.len() as u64;
                }
            }
            stats.prefetch_wasted += shard.prefetch_wasted;
            if let Some(state) = shard.policy.file_state() {
                let files = stats.files.get_or_insert_default();
                files.preface_blocks = files.preface_blocks.max(state.preface_blocks);
                files.active_files += state.active_files;
            }
        }
        if let Some(prefetch) = &self.prefetch {
            stats.prefetch_dropped = prefetch.dropped.load(Ordering::Relaxed);
        }
        stats
    }
}

impl Shard {
    #[inline]
    fn access(&mut self, key: u64, object: &Object, block: u64, size: u32) -> Access {
        self.clock += 1;
        Access {
            key,
            size,
            op: Op::Read,
            object: object.number,
            block,
            group: object.part,
            time: self.clock,
            clock: 0,
            next: NEVER,
        }
    }

    /// A leader's read succeeded: admit the block if the policy will,
    /// evicting what it names.
    fn install(&mut self, key: u64, access: &Access, block: &BlockRef) {
        if !self.admit(key, access, Slot::Ready(block.clone())) {
            self.map.remove(&key);
            // Refused: dropped as a victim is (an exclusive spill gave its
            // copy up when this read took it).
            self.going_down(key, block);
        }
    }

    /// Admits `key` into the policy with `slot`, if the policy will, and
    /// drops the slots of the victims it names. Returns whether admitted.
    fn admit(&mut self, key: u64, access: &Access, slot: Slot) -> bool {
        let mut victims = std::mem::take(&mut self.victims);
        victims.clear();
        let admitted = self.policy.admit(access, &mut victims);
        if admitted {
            self.map.insert(key, slot);
        }
        for victim in &victims {
            match self.map.remove(victim) {
                Some(Slot::Ready(block)) => self.going_down(*victim, &block),
                Some(Slot::Prefetched(block)) => {
                    self.prefetch_wasted += 1;
                    self.going_down(*victim, &block);
                }
                // Evicted while read ahead: its thread finds the slot gone.
                Some(Slot::Loading(flight)) if flight.prefetch => {
                    if !flight.used.load(Ordering::Relaxed) {
                        self.prefetch_wasted += 1;
                    }
                }
                _ => debug_assert!(
                    false,
                    "the policy evicted {victim:#x}, which is not resident"
                ),
            }
        }
        self.victims = victims;
        admitted
    }
}

mod hand_down;
mod prefetch;
mod stats;

pub use stats::{BackendErrorCounts, FileCacheStats};
use stats::{Counters, ErrorCounters};
#[cfg(test)]
mod tests;
