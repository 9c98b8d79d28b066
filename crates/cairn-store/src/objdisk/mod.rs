//! The object disk: a log-structured block device whose segments and
//! checkpoints are immutable objects in an object store (S3, Ceph RGW), the
//! LSVD design (Hajkazemi et al., EuroSys '22) on papers/003's log.
//!
//! # Why a sibling of the log disk, not a backend of it
//!
//! The log disk (`logdisk/`) lives in a fixed device: a fixed number of
//! segment slots reused after cleaning, a flat block address table and a
//! reverse map sized by the device, checkpoints in two slots. None of that
//! fits a bucket: objects are never rewritten, only created and deleted; the
//! store has no size to divide into slots; a thin volume of 1 TiB would need
//! gigabytes of flat tables. So the object disk keeps the log's ideas
//! (sequence-numbered segments with a summary, checkpoints plus
//! roll-forward, a cleaner by utilisation) with its own map (only mapped
//! blocks), objects named by sequence and generation, and fences.
//!
//! # How it works
//!
//! **Writes** go into the open segment in DRAM (a block written twice while
//! it is open is overwritten in place); an all-zero block is a trim, never
//! uploaded. A full segment (`object_size` of data) is sealed — header
//! (summary: each data block's address and CRC32C, the trims) plus data, one
//! object — and queued to the uploader threads, which PUT in parallel.
//! A sealed segment stays in DRAM until it is durable (it and every one
//! before it in the store). **Flush**: with a local write log
//! (`journal.rs`, `flush = "local"`, `local.rs`) what
//! changed since the last flush is appended there and made durable, and the
//! segments follow when full; without one (`flush = "remote"`) the open
//! segment is sealed and the flush waits until every sealed segment up to
//! it is in the store, then checks the lease is still ours. **Reads** find
//! a block's segment in the map: the open segment and sealed ones not yet
//! durable are served from DRAM, the rest from the store through the chunk
//! cache (`chunks.rs`), each block checked against its CRC32C.
//!
//! **Checkpoints** (the whole map and the segments it points into, one
//! object; as of the last durable segment, the blocks changed since taken
//! from their shadows: `state.rs`) are written every `checkpoint_every`
//! segments — by the background thread (`clean.rs`; never inside a
//! local flush, which must not wait for the store) or at a remote flush —
//! and at a clean close; then every segment no block or shadow points into, at or before
//! it, is deleted (unless a reader pins the volume: `pins.rs`), and the
//! checkpoints before it. **Segment buffers** (`segbuf.rs`): built in
//! place, page-aligned, reused. **Recovery**, the fences
//! and the validity rule: `recover.rs`.
//!
//! **Fencing**: one writer per volume, by [`Lease`]; every object carries the
//! writer's generation, and a writer that finds a later lease (at a remote
//! flush, a checkpoint, or its heartbeat) fails and writes nothing more.
//!
//! **Outages** of the store (`outage.rs`): sealed segments wait in DRAM up
//! to `upload_queue` bytes, then writers wait (back-pressure) up to
//! `stall_timeout` and fail with an error naming the outage; uploads are
//! retried until the store answers rather than failing the disk (with a
//! local write log every flushed write is safe meanwhile; without one a
//! flush waits for the store); reads of what DRAM holds go on, a read that
//! needs the store fails after its retries without failing the disk.
//!
//! **Read-only opens** (`readonly.rs`) of a volume a writer may be using:
//! no lease, a view as of the newest checkpoint and the durable segments
//! after it, kept by a *reader pin* the writer honours before deleting
//! segment objects (`pins.rs`).
//!
//! **The cleaner** (`clean.rs`, policies in `victims.rs`) and **the local
//! segment cache** (`segcache.rs`): their module docs.
//!
//! Not yet (issue 24): an extent map and paged checkpoints for large thin
//! volumes (docs/architecture.md, "Scale").

mod chunks;
mod clean;
mod error;
mod format;
mod journal;
mod local;
mod outage;
mod pins;
mod read;
mod readonly;
mod recover;
mod segbuf;
mod segcache;
mod state;
#[cfg(test)]
mod tests;
mod victims;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use cairn_objects::{Lease, LeaseError, Metered, ObjectError, ObjectStore, StoreCounts};

use crate::codec::crc32c;
use crate::device::{Device, DeviceError, DeviceOp, check_range};
pub use error::ObjectDiskError;
pub use format::VolumeRecord as ObjectVolume;
use format::{Fence, Keys, VolumeRecord};
pub use segcache::{SegCacheCounts, SegCacheError};
use state::{Sealed, Seals, State};
pub use victims::Cleaner;

/// A request that may wait for the store (`outage.rs`): what it is, and
/// since when.
pub(super) struct Wait {
    op: DeviceOp,
    offset: u64,
    len: u64,
    start: std::time::Instant,
}

impl Wait {
    pub(super) fn new(op: DeviceOp, offset: u64, len: u64) -> Self {
        Self {
            op,
            offset,
            len,
            start: std::time::Instant::now(),
        }
    }
}

/// How to open (or create) an object disk.
#[derive(Clone, Debug)]
pub struct ObjectDiskOptions {
    /// Key prefix of the volume's objects, ending in `/` (`volumes/vm1/`).
    pub prefix: String,
    /// Bytes, to create the volume (0: open an existing one only).
    pub size: u64,
    /// Block size, to create it.
    pub block_size: u32,
    /// Data bytes of a full segment object, to create it.
    pub object_size: u32,
    /// Parallel uploads.
    pub uploaders: usize,
    /// Bytes of sealed segments kept in DRAM until they are in the store:
    /// past it, a writer that fills the open segment waits for uploads
    /// (`outage.rs`). One segment is always let through.
    pub upload_queue: u64,
    /// How long a writer or flush waits for the store (room in the upload
    /// queue or the local write log, its segments uploaded) before it
    /// fails; `None`: without limit.
    pub stall_timeout: Option<Duration>,
    /// Segments between checkpoints.
    pub checkpoint_every: u64,
    /// Who we are, in the lease.
    pub holder: String,
    /// Take the volume from a holder that did not release it.
    pub force_takeover: bool,
    /// Bytes of segment objects kept in DRAM for reads (1 MiB chunks).
    pub read_cache: u64,
    /// How often a running writer records that it is alive (shown to a
    /// refused opener) and checks that no other server took the volume; a
    /// writer that finds it was fenced stops taking writes.
    pub heartbeat: Duration,
    /// After a forced takeover, how long to wait before reading the
    /// volume: longer than a fenced writer's request can take, so nothing
    /// it deletes or writes after our lease lands after our listing.
    pub takeover_grace: Duration,
    /// The cleaner moves the live blocks of segments with at most this
    /// share of their blocks live (0: no cleaner; only wholly dead
    /// segments are deleted).
    pub clean_below: f64,
    /// Which segments the cleaner takes (`clean.rs`).
    pub cleaner: Cleaner,
}

impl Default for ObjectDiskOptions {
    fn default() -> Self {
        Self {
            prefix: String::new(),
            size: 0,
            block_size: 4096,
            object_size: 8 << 20,
            uploaders: 8,
            upload_queue: 256 << 20,
            stall_timeout: Some(Duration::from_mins(2)),
            checkpoint_every: 64,
            holder: cairn_objects::lease::this_holder(),
            force_takeover: false,
            read_cache: 256 << 20,
            heartbeat: Duration::from_secs(30),
            takeover_grace: Duration::from_mins(1),
            clean_below: 0.6,
            cleaner: Cleaner::Greedy,
        }
    }
}

/// What an open found, for the log line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpenReport {
    /// Our generation.
    pub generation: u64,
    /// The last segment recovered.
    pub sequence: u64,
    /// Segments applied after the checkpoint.
    pub rolled: u64,
    /// The checkpoint the recovery started from (0: none).
    pub checkpoint: u64,
    /// Objects deleted as void or dead.
    pub deleted: usize,
    /// Dead or void segment objects not deleted yet: a read-only open
    /// pins the volume (`pins.rs`).
    pub deferred: usize,
    /// Blocks mapped.
    pub mapped: usize,
    /// Records of the local write log written again (beyond the store).
    pub replayed: usize,
}

struct Shared {
    store: Arc<dyn ObjectStore>,
    /// The same store, counting its requests.
    metered: Arc<Metered<Arc<dyn ObjectStore>>>,
    /// Bytes clients wrote (zero blocks included).
    written: AtomicU64,
    keys: Keys,
    volume: VolumeRecord,
    generation: u64,
    checkpoint_every: u64,
    /// [`ObjectDiskOptions::upload_queue`].
    upload_queue: u64,
    /// [`ObjectDiskOptions::stall_timeout`].
    stall_timeout: Option<Duration>,
    state: Mutex<State>,
    /// Signalled when an upload finishes or fails.
    progress: Condvar,
    lease: Mutex<Option<Lease>>,
    closed: AtomicBool,
    /// The local write log (`flush = "local"`), if there is one.
    journal: Option<Mutex<journal::Journal>>,
    /// Chunks of segment objects read lately.
    chunks: chunks::Chunks,
    /// Whole segment objects on a local device, if there is one.
    segcache: Option<segcache::SegCache>,
    /// Blocks the cleaner moved.
    cleaned: AtomicU64,
    /// The cleaner's blocks read and checked, gathering until they fill a
    /// segment (then handed to the state: [`state::Staged`]); only the
    /// cleaner takes this lock, never while holding the state's.
    staging: Mutex<state::Staged>,
    /// Set to stop the cleaner (at a stop, before the last flush; the
    /// heartbeat and the uploaders' retries go on until `beat_stop`).
    clean_stop: AtomicBool,
    /// Set to stop the heartbeat thread and the uploaders' pauses.
    beat_stop: Mutex<bool>,
    beat: Condvar,
    /// Segment objects to delete once no reader pins the volume.
    deferred: pins::Deferred,
    /// A read-only open's pin (`readonly.rs`): writes are refused.
    reader: Option<pins::Reader>,
}

/// What a [`Shared`] is made of beyond what every open starts with.
struct Parts {
    store: Arc<dyn ObjectStore>,
    keys: Keys,
    volume: VolumeRecord,
    generation: u64,
    state: State,
    lease: Option<Lease>,
    journal: Option<journal::Journal>,
    segcache: Option<segcache::SegCache>,
    deferred: pins::Deferred,
    reader: Option<pins::Reader>,
}

/// A block device over an object store (module docs).
pub struct ObjectDisk {
    shared: Arc<Shared>,
    queue: Mutex<Option<mpsc::Sender<Arc<Sealed>>>>,
    workers: Mutex<Vec<JoinHandle<()>>>,
    /// The cleaner thread, stopped first (it holds a sender of the queue).
    cleaner: Mutex<Option<JoinHandle<()>>>,
    report: OpenReport,
    /// A background thread's handle: dropping it stops nothing.
    background: bool,
}

impl std::fmt::Debug for ObjectDisk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectDisk")
            .field("store", &self.shared.store.describe())
            .field("prefix", &self.shared.keys.prefix)
            .field("generation", &self.shared.generation)
            .finish_non_exhaustive()
    }
}

impl Shared {
    fn new(parts: Parts, options: &ObjectDiskOptions) -> Arc<Self> {
        let metered = Arc::new(Metered::new(parts.store));
        Arc::new(Self {
            store: Arc::clone(&metered) as Arc<dyn ObjectStore>,
            metered,
            written: AtomicU64::new(0),
            keys: parts.keys,
            volume: parts.volume,
            generation: parts.generation,
            checkpoint_every: options.checkpoint_every.max(1),
            upload_queue: options.upload_queue,
            stall_timeout: options.stall_timeout,
            state: Mutex::new(parts.state),
            progress: Condvar::new(),
            lease: Mutex::new(parts.lease),
            closed: AtomicBool::new(false),
            journal: parts.journal.map(Mutex::new),
            chunks: chunks::Chunks::new(options.read_cache),
            segcache: parts.segcache,
            cleaned: AtomicU64::new(0),
            staging: Mutex::new(state::Staged::default()),
            clean_stop: AtomicBool::new(false),
            beat_stop: Mutex::new(false),
            beat: Condvar::new(),
            deferred: parts.deferred,
            reader: parts.reader,
        })
    }

    /// Deletes the segment objects `keys` and those waiting from before,
    /// unless a reader pins the volume (`pins.rs`). Only while the volume
    /// is ours.
    fn delete_segments(
        &self,
        keys: impl IntoIterator<Item = String>,
    ) -> Result<pins::Swept, ObjectError> {
        self.deferred.delete(self.store.as_ref(), &self.keys, keys)
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn fail(&self, why: String) {
        let mut st = self.state();
        if st.failed.is_none() {
            tracing::error!(volume = %self.keys.prefix, "object disk stops taking writes: {why}");
            st.failed = Some(why);
        }
        drop(st);
        self.progress.notify_all();
    }

    /// Installs a whole segment object in the local segment cache, if
    /// there is one; its victim is the slot of the segment with the fewest
    /// live blocks.
    fn install(&self, sequence: u64, generation: u64, object: &[u8]) {
        if let Some(cache) = &self.segcache {
            cache.install(sequence, generation, object, |seq| {
                self.state().segments.get(&seq).map(|s| s.live)
            });
        }
    }
}

/// The volume under the prefix: read, or created from the options when
/// there is none, they give a size and `create` says so; refused when it
/// exists with another geometry than they give.
fn volume_for(
    store: &dyn ObjectStore,
    keys: &Keys,
    options: &ObjectDiskOptions,
    create: bool,
) -> Result<VolumeRecord, ObjectDiskError> {
    let asked = (options.size > 0).then(|| VolumeRecord {
        size: options.size,
        block_size: options.block_size,
        object_size: options.object_size,
        volume_id: crate::codec::new_id(),
    });
    if let Some(a) = &asked {
        // Check what we would create before creating it.
        VolumeRecord::decode(&a.encode())
            .map_err(|e| ObjectDiskError::format(&keys.volume(), e))?;
    }
    let volume = match recover::volume(store, keys, asked.filter(|_| create)) {
        Err(ObjectDiskError::NoVolume { store, key }) if !create => {
            return Err(ObjectDiskError::NoVolumeToRead { store, key });
        }
        other => other?,
    };
    if let Some(a) = asked.filter(|a| {
        (a.size, a.block_size, a.object_size)
            != (volume.size, volume.block_size, volume.object_size)
    }) {
        let show = |v: &VolumeRecord| {
            format!(
                "{} bytes, {}-byte blocks, {}-byte objects",
                v.size, v.block_size, v.object_size
            )
        };
        return Err(ObjectDiskError::Mismatch {
            key: keys.volume(),
            found: show(&volume),
            asked: show(&a),
        });
    }
    Ok(volume)
}

/// A new generation's first objects: its fence, then a checkpoint of the
/// recovered state (the roll-forward is not needed again, and every dead
/// segment before it can go).
fn begin_generation(
    store: &dyn ObjectStore,
    keys: &Keys,
    fence: &Fence,
    state: &mut State,
) -> Result<(), ObjectDiskError> {
    store.create(&keys.fence(fence.generation), &fence.encode())?;
    let checkpoint = state.checkpoint();
    store.put(
        &keys.checkpoint(fence.upto, fence.generation),
        &checkpoint.encode(),
    )?;
    state.checkpointed = fence.upto;
    Ok(())
}

/// Deletes what an open found it does not need: the checkpoints at once
/// (the new one is in the store), the segment objects unless a read-only
/// open pins the volume (then they wait in `deferred`).
fn delete_garbage(
    store: &dyn ObjectStore,
    keys: &Keys,
    deferred: &pins::Deferred,
    garbage: Vec<String>,
    dead: impl Iterator<Item = String>,
) -> Result<pins::Swept, ObjectDiskError> {
    let (segments, others): (Vec<String>, Vec<String>) = garbage
        .into_iter()
        .partition(|k| k.starts_with(&keys.segments()));
    for key in &others {
        store.delete(key)?;
    }
    let mut swept = deferred.delete(store, keys, segments.into_iter().chain(dead))?;
    swept.deleted += others.len();
    Ok(swept)
}

/// Takes the volume's lease: by force when the options say so, or without
/// asking when its holder was a process of this host that is gone; after a
/// forced takeover of a live holder, waits out its requests.
fn take_lease(
    store: &dyn ObjectStore,
    keys: &Keys,
    options: &ObjectDiskOptions,
) -> Result<Lease, ObjectDiskError> {
    let acquire = |force| Lease::acquire(store, &keys.prefix, &options.holder, force);
    let (lease, grace) = match acquire(options.force_takeover) {
        Err(LeaseError::Held {
            holder, generation, ..
        }) if cairn_objects::lease::holder_is_dead_here(&holder) => {
            tracing::warn!(
                volume = %keys.prefix,
                "the holder of generation {generation} ({holder}) is no longer running on \
                 this host: taking the volume over"
            );
            // Its requests died with it: nothing to wait for.
            (acquire(true)?, false)
        }
        other => (other?, true),
    };
    if grace && lease.previous().is_some_and(|(_, released)| !released) {
        tracing::warn!(
            volume = %keys.prefix,
            "took generation {} by force; waiting {:?} for the fenced writer's requests to end",
            lease.generation(),
            options.takeover_grace
        );
        std::thread::sleep(options.takeover_grace);
    }
    Ok(lease)
}

/// The local write log on `log`, if any: the log, what it holds, and from
/// which segment on its records are to be written again (`None`: nothing
/// to replay, or the log is stale — `recover::replay_base`).
fn open_log(
    log: Option<Arc<dyn Device>>,
    volume: &VolumeRecord,
    keys: &Keys,
    generation: u64,
    fences: &[Fence],
    last: u64,
) -> Result<(Option<journal::Journal>, journal::Replay, Option<u64>), ObjectDiskError> {
    Ok(match log {
        None => (None, journal::Replay::default(), None),
        Some(device) => {
            let (j, r) =
                journal::Journal::open(device, volume.block_size, volume.volume_id, generation)
                    .map_err(ObjectDiskError::Log)?;
            let base = if r.records.is_empty() {
                None
            } else {
                let base = recover::replay_base(fences, r.generation, last);
                if base.is_none() {
                    tracing::warn!(
                        volume = %keys.prefix,
                        "the local write log holds {} records of generation {}, but another \
                         server wrote the volume since: they are dropped",
                        r.records.len(),
                        r.generation
                    );
                }
                base
            };
            (Some(j), r, base)
        }
    })
}

/// The local segment cache on `cache`, if any, keeping the slots of the
/// segments `state` has.
fn open_segcache(
    cache: Option<Arc<dyn Device>>,
    volume: &VolumeRecord,
    state: &State,
) -> Result<Option<segcache::SegCache>, ObjectDiskError> {
    let Some(device) = cache else {
        return Ok(None);
    };
    let blocks = (volume.object_size / volume.block_size) as usize;
    // The header's entries, and room for a few thousand trims.
    let max_object = u64::from(volume.object_size)
        + (format::SEGMENT_FIXED + format::ENTRY_BYTES * blocks) as u64
        + (64 << 10);
    segcache::SegCache::open(device, volume.volume_id, max_object, |seq, g| {
        state.segments.get(&seq).is_some_and(|s| s.generation == g)
    })
    .map(Some)
    .map_err(ObjectDiskError::Cache)
}

/// The heartbeat thread: every `every`, the lease still ours or the disk
/// failed.
fn start_heartbeat(shared: &Arc<Shared>, every: Duration) -> JoinHandle<()> {
    let shared = Arc::clone(shared);
    std::thread::Builder::new()
        .name("cairn-lease".into())
        .spawn(move || {
            loop {
                if shared.pause(every) {
                    break;
                }
                let lease = shared.lease.lock().unwrap_or_else(PoisonError::into_inner);
                let Some(l) = lease.as_ref() else { break };
                match l.still_held(shared.store.as_ref()) {
                    Ok(true) => {
                        if let Err(e) = l.heartbeat(shared.store.as_ref()) {
                            tracing::warn!(volume = %shared.keys.prefix, "lease heartbeat: {e}");
                        }
                        drop(lease);
                        // Dead segments waiting for readers go once none
                        // pins the volume, even when no checkpoint comes.
                        if shared.deferred.waiting() > 0
                            && let Err(e) = shared.delete_segments(std::iter::empty())
                        {
                            tracing::warn!(volume = %shared.keys.prefix, "deleting dead segments: {e}");
                        }
                    }
                    Ok(false) => {
                        drop(lease);
                        shared.fail(format!(
                            "generation {} lost the volume: another server took it over",
                            shared.generation
                        ));
                        break;
                    }
                    Err(e) => tracing::warn!(volume = %shared.keys.prefix, "lease check: {e}"),
                }
            }
        })
        .expect("spawn the lease thread")
}

/// The uploader threads, taking sealed segments from one queue.
fn start_uploaders(
    shared: &Arc<Shared>,
    uploaders: usize,
) -> (mpsc::Sender<Arc<Sealed>>, Vec<JoinHandle<()>>) {
    let (tx, rx) = mpsc::channel::<Arc<Sealed>>();
    let rx = Arc::new(Mutex::new(rx));
    let workers = (0..uploaders.max(1))
        .map(|i| {
            let shared = Arc::clone(shared);
            let rx = Arc::clone(&rx);
            std::thread::Builder::new()
                .name(format!("cairn-upload-{i}"))
                .spawn(move || {
                    loop {
                        let next = rx.lock().unwrap_or_else(PoisonError::into_inner).recv();
                        let Ok(sealed) = next else { break };
                        shared.upload(&sealed);
                    }
                })
                .expect("spawn an uploader thread")
        })
        .collect();
    (tx, workers)
}

fn device_error(
    op: DeviceOp,
    offset: u64,
    len: u64,
    device: &str,
    detail: impl std::fmt::Display,
) -> DeviceError {
    DeviceError::Io {
        op,
        offset,
        len,
        device: device.to_owned(),
        source: std::io::Error::other(detail.to_string()),
    }
}

impl ObjectDisk {
    /// Opens the volume under `options.prefix` in `store` (creating it when
    /// there is none and `options.size` is not 0): takes the lease, recovers,
    /// writes the new generation's fence and a checkpoint, deletes void and
    /// dead objects, starts the uploaders.
    pub fn open(
        store: Arc<dyn ObjectStore>,
        options: &ObjectDiskOptions,
    ) -> Result<Self, ObjectDiskError> {
        Self::open_with_log(store, options, None)
    }

    /// [`open`](ObjectDisk::open) with a local write log on `log` (a file
    /// on local storage): a FLUSH is durable once in it (`flush =
    /// "local"`). What it holds beyond the store is written again at the
    /// open; a log left by another volume is refused.
    pub fn open_with_log(
        store: Arc<dyn ObjectStore>,
        options: &ObjectDiskOptions,
        log: Option<Arc<dyn Device>>,
    ) -> Result<Self, ObjectDiskError> {
        Self::open_local(store, options, log, None)
    }

    /// [`open_with_log`](ObjectDisk::open_with_log) with a local segment
    /// cache on `cache` (a file on local storage): whole segment objects,
    /// installed as they are uploaded, read instead of the store. Formatted
    /// when blank; its slots survive restarts; another volume's cache, or a
    /// device holding anything else, is refused.
    pub fn open_local(
        store: Arc<dyn ObjectStore>,
        options: &ObjectDiskOptions,
        log: Option<Arc<dyn Device>>,
        cache: Option<Arc<dyn Device>>,
    ) -> Result<Self, ObjectDiskError> {
        let keys = Keys {
            prefix: options.prefix.clone(),
        };
        let volume = volume_for(store.as_ref(), &keys, options, true)?;
        let lease = take_lease(store.as_ref(), &keys, options)?;
        let blocks_per_segment = (volume.object_size / volume.block_size) as usize;
        let recovered = recover::recover(
            store.as_ref(),
            &keys,
            &volume,
            lease.generation(),
            blocks_per_segment,
        )?;
        let mut state = recovered.state;
        let last = state.durable;
        let (journal, replay, base) = open_log(
            log,
            &volume,
            &keys,
            lease.generation(),
            &recovered.fences,
            last,
        )?;
        state.journaled = journal.is_some();
        begin_generation(
            store.as_ref(),
            &keys,
            &Fence {
                generation: lease.generation(),
                upto: last,
                volume_id: volume.volume_id,
                replay_of: if base.is_some() { replay.generation } else { 0 },
                replay_base: base.unwrap_or(0),
            },
            &mut state,
        )?;
        let deferred = pins::Deferred::default();
        let dead = state.take_dead(last);
        let swept = delete_garbage(
            store.as_ref(),
            &keys,
            &deferred,
            recovered.garbage,
            dead.into_iter().map(|(s, g)| keys.segment(s, g)),
        )?;
        let report = OpenReport {
            generation: lease.generation(),
            sequence: last,
            checkpoint: recovered.checkpoint,
            rolled: recovered.rolled,
            deleted: swept.deleted,
            deferred: swept.waiting,
            mapped: state.map.len(),
            replayed: 0,
        };
        let segcache = open_segcache(cache, &volume, &state)?;
        let shared = Shared::new(
            Parts {
                store,
                keys,
                volume,
                generation: lease.generation(),
                state,
                lease: Some(lease),
                journal,
                segcache,
                deferred,
                reader: None,
            },
            options,
        );
        let (tx, mut workers) = start_uploaders(&shared, options.uploaders);
        workers.push(start_heartbeat(&shared, options.heartbeat));
        let mut disk = Self {
            shared,
            queue: Mutex::new(Some(tx)),
            workers: Mutex::new(workers),
            cleaner: Mutex::new(None),
            report,
            background: false,
        };
        if disk.shared.journal.is_some() {
            let records = if base.is_some() {
                replay.records
            } else {
                Vec::new()
            };
            disk.report.replayed = disk
                .replay(records, base.unwrap_or(last))
                .map_err(ObjectDiskError::Log)?;
        }
        disk.start_cleaner(options.cleaner, options.clean_below);
        Ok(disk)
    }

    /// What the open found.
    pub fn report(&self) -> OpenReport {
        self.report
    }

    /// Requests and bytes that reached the store since the open (the open's
    /// own included), and the bytes clients wrote: their ratio of PUT bytes
    /// is the backend write amplification.
    pub fn counts(&self) -> (StoreCounts, u64) {
        (
            self.shared.metered.counts(),
            self.shared.written.load(Ordering::Relaxed),
        )
    }

    /// What the local segment cache did since the open, if there is one.
    pub fn segcache_counts(&self) -> Option<SegCacheCounts> {
        self.shared
            .segcache
            .as_ref()
            .map(segcache::SegCache::counts)
    }

    /// The volume's record.
    pub fn volume(&self) -> ObjectVolume {
        self.shared.volume
    }

    fn send(&self, seals: Seals) {
        if seals.moved > 0 {
            self.shared
                .cleaned
                .fetch_add(seals.moved as u64, Ordering::Relaxed);
        }
        let queue = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
        for s in seals.open.into_iter().chain(seals.cleaned) {
            if let Some(tx) = queue.as_ref() {
                // The receivers live as long as the queue's sender.
                let _ = tx.send(s);
            }
        }
    }

    fn key_fn(&self) -> impl Fn(u64) -> String + '_ {
        move |seq| self.shared.keys.segment(seq, self.shared.generation)
    }

    fn refuse(&self, st: &State, op: DeviceOp, offset: u64, len: u64) -> Result<(), DeviceError> {
        if self.shared.reader.is_some() {
            return Err(DeviceError::ReadOnly { op });
        }
        match &st.failed {
            Some(why) => Err(device_error(op, offset, len, &self.describe(), why)),
            None => Ok(()),
        }
    }

    /// Writes whole blocks from `first`.
    fn write_blocks(&self, first: u64, data: &[u8]) -> Result<(), DeviceError> {
        self.shared
            .written
            .fetch_add(data.len() as u64, Ordering::Relaxed);
        let bs = self.shared.volume.block_size as usize;
        let crcs: Vec<Option<u32>> = data
            .chunks_exact(bs)
            .map(|b| (!b.iter().all(|&x| x == 0)).then(|| crc32c(b)))
            .collect();
        let w = Wait::new(DeviceOp::Write, first * bs as u64, data.len() as u64);
        let mut st = self.shared.state();
        self.refuse(&st, DeviceOp::Write, first * bs as u64, data.len() as u64)?;
        for (i, (block, crc)) in data.chunks_exact(bs).zip(crcs).enumerate() {
            let b = first + i as u64;
            match crc {
                None => st.trim(b, 1),
                Some(crc) => {
                    // A full open segment is sealed when the upload queue
                    // has room for it; until then the writer waits.
                    st = self.seal_when_room(st, &w, State::open_full)?;
                    st.write_block(b, block, crc);
                }
            }
        }
        if st.open_full() && self.room(&st) {
            let sealed = st.seal(self.key_fn());
            self.send(sealed);
        }
        Ok(())
    }

    /// A FLUSH: into the local write log when there is one, else into the
    /// store.
    fn flush_all(&self) -> Result<(), DeviceError> {
        if self.shared.reader.is_some() {
            // Nothing to make durable.
            Ok(())
        } else if self.shared.journal.is_some() {
            self.flush_local()
        } else {
            self.flush_remote()
        }
    }

    /// Seals the open segment, waits for every sealed one to reach the
    /// store, checks the lease; then writes a checkpoint when one is due.
    fn flush_remote(&self) -> Result<(), DeviceError> {
        self.flush_remote_to(false)
    }

    /// [`Self::flush_remote`]; with `all`, waits for the cleaner's staged
    /// segments too (built at this seal), not only for clients' writes.
    fn flush_remote_to(&self, all: bool) -> Result<(), DeviceError> {
        let w = Wait::new(DeviceOp::Flush, 0, 0);
        let mut st = self.shared.state();
        self.refuse(&st, DeviceOp::Flush, 0, 0)?;
        st = self.seal_when_room(st, &w, |s| !s.open.is_empty() || !s.staged.is_empty())?;
        // Clients' writes are all at or before it (a cleaned segment sealed
        // after it holds copies of what is durable already).
        let target = if all { st.sealed } else { st.client_sealed };
        while st.durable < target {
            st = self.wait(st, &w, "a flush waits for its segments")?;
        }
        drop(st);
        self.check_lease(DeviceOp::Flush)?;
        self.maybe_checkpoint(false)
            .map_err(|e| device_error(DeviceOp::Flush, 0, 0, &self.describe(), e))
    }

    /// Fails the disk if a later generation took the volume.
    fn check_lease(&self, op: DeviceOp) -> Result<(), DeviceError> {
        let held = {
            let lease = self
                .shared
                .lease
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            match lease.as_ref() {
                Some(l) => l.still_held(self.shared.store.as_ref()),
                None => Ok(false),
            }
        };
        match held {
            Ok(true) => Ok(()),
            Ok(false) => {
                let why = format!(
                    "generation {} lost the volume: another server took it over",
                    self.shared.generation
                );
                self.shared.fail(why.clone());
                Err(device_error(op, 0, 0, &self.describe(), why))
            }
            Err(e) => Err(device_error(op, 0, 0, &self.describe(), e)),
        }
    }

    /// Writes a checkpoint, as of the last durable segment, if
    /// `checkpoint_every` segments passed since the last (or `force` and
    /// any did); then deletes the segments it left dead and the older
    /// checkpoints.
    fn maybe_checkpoint(&self, force: bool) -> Result<(), ObjectError> {
        // The segments dead in the checkpoint are taken with it, under one
        // lock: a segment that dies after the snapshot is still named by
        // the checkpoint and must stay until the next one.
        let (checkpoint, old, dead) = {
            let mut st = self.shared.state();
            let due = st.durable >= st.checkpointed + self.shared.checkpoint_every
                || (force && st.durable > st.checkpointed);
            if !due {
                return Ok(());
            }
            let c = st.checkpoint();
            strict_assert!(st.verify().is_ok(), "{:?}", st.verify());
            let dead = st.take_dead(c.sequence);
            (c, st.checkpointed, dead)
        };
        let seq = checkpoint.sequence;
        let keys = &self.shared.keys;
        if let Err(e) = self.shared.store.put(
            &keys.checkpoint(seq, self.shared.generation),
            &checkpoint.encode(),
        ) {
            // Not deleted: the next checkpoint takes them again.
            let mut st = self.shared.state();
            for &(s, g) in &dead {
                st.segments.insert(
                    s,
                    state::SegInfo {
                        generation: g,
                        header_len: 0,
                        blocks: 0,
                        live: 0,
                        cleaned: false,
                    },
                );
            }
            return Err(e);
        }
        self.shared.state().checkpointed = seq;
        // Delete only while the volume is ours: a fenced writer's deletes
        // could take objects the new writer's view needs.
        if self.check_lease(DeviceOp::Flush).is_err() {
            return Ok(());
        }
        // Not while a read-only open pins the volume: then they wait.
        self.shared
            .delete_segments(dead.into_iter().map(|(s, g)| keys.segment(s, g)))?;
        if old > 0 || seq > 0 {
            let checkpoints = recover::numbered(self.shared.store.as_ref(), &keys.checkpoints())
                .map_err(|e| {
                    ObjectError::failed(
                        cairn_objects::Op::List,
                        &keys.checkpoints(),
                        e.to_string(),
                        true,
                    )
                })?;
            for (s, g) in checkpoints {
                if s <= seq && (s, g) != (seq, self.shared.generation) {
                    self.shared.store.delete(&keys.checkpoint(s, g))?;
                }
            }
        }
        Ok(())
    }

    /// A clean stop: flush, checkpoint, release the lease, stop the
    /// uploaders. The next open needs no roll-forward and no force.
    pub fn close(&self) -> Result<(), DeviceError> {
        if self.shared.closed.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        if self.shared.reader.is_some() {
            return self.close_reader();
        }
        // No block moves once the stop began: the last checkpoint is to
        // hold everything.
        self.stop_cleaner();
        // What the cleaner staged goes into the store with the rest
        // (its victims die at the last checkpoint).
        self.hand_over_staging();
        // With a local write log, what clients wrote since their last
        // flush goes there first: a stop while the store is out keeps it
        // (the next open writes it again).
        let logged = if self.shared.journal.is_some() {
            self.flush_local()
        } else {
            Ok(())
        };
        let flushed = logged.and_then(|()| self.flush_remote_to(true));
        let checkpointed = flushed.and_then(|()| {
            self.maybe_checkpoint(true)
                .map_err(|e| device_error(DeviceOp::Flush, 0, 0, &self.describe(), e))
        });
        self.stop_workers();
        checkpointed?;
        // Dead segments left for readers go now if none pins the volume
        // any more; else the next open finds them.
        if let Err(e) = self.shared.delete_segments(std::iter::empty()) {
            tracing::warn!(volume = %self.shared.keys.prefix, "deleting dead segments: {e}");
        }
        // Everything is in the store: the local write log holds nothing
        // the next open needs.
        if let Some(j) = &self.shared.journal {
            j.lock().unwrap_or_else(PoisonError::into_inner).reset()?;
        }
        if let Some(lease) = self
            .shared
            .lease
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            lease
                .release(self.shared.store.as_ref())
                .map_err(|e| device_error(DeviceOp::Flush, 0, 0, &self.describe(), e))?;
        }
        Ok(())
    }

    fn stop_workers(&self) {
        self.stop_cleaner();
        *self
            .shared
            .beat_stop
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = true;
        self.shared.beat.notify_all();
        self.queue
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        for w in self
            .workers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .drain(..)
        {
            let _ = w.join();
        }
    }

    /// Stops the cleaner; waits for its pass to end.
    fn stop_cleaner(&self) {
        self.shared.clean_stop.store(true, Ordering::SeqCst);
        // Under the lock the cleaner waits on, so the wake is not lost.
        drop(
            self.shared
                .beat_stop
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        self.shared.beat.notify_all();
        let cleaner = self
            .cleaner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(c) = cleaner {
            let _ = c.join();
        }
    }

    /// A sender of the upload queue, for a background thread's handle.
    fn sender(&self) -> Option<mpsc::Sender<Arc<Sealed>>> {
        self.queue
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// A handle on the disk for a background thread: the same state, a
    /// sender of the queue, no workers of its own.
    fn background(shared: Arc<Shared>, queue: Option<mpsc::Sender<Arc<Sealed>>>) -> Self {
        Self {
            shared,
            queue: Mutex::new(queue),
            workers: Mutex::new(Vec::new()),
            cleaner: Mutex::new(None),
            report: OpenReport {
                generation: 0,
                sequence: 0,
                checkpoint: 0,
                rolled: 0,
                deleted: 0,
                deferred: 0,
                mapped: 0,
                replayed: 0,
            },
            background: true,
        }
    }

    /// Blocks the cleaner moved since the open.
    pub fn cleaned_blocks(&self) -> u64 {
        self.shared.cleaned.load(Ordering::Relaxed)
    }

    /// Checks the state's invariants (`objdisk/state.rs`), for tests.
    pub fn verify(&self) -> Result<(), String> {
        self.shared.state().verify()
    }
}

impl Drop for ObjectDisk {
    /// Without [`close`](ObjectDisk::close): stops the uploaders (what they
    /// hold is uploaded first), releases nothing — as a crash would, except
    /// for the uploads.
    fn drop(&mut self) {
        if !self.background {
            self.stop_workers();
        }
    }
}

impl Device for ObjectDisk {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<(), DeviceError> {
        check_range(DeviceOp::Read, offset, buf.len() as u64, self.len())?;
        let bs = u64::from(self.shared.volume.block_size);
        let first = offset / bs;
        let end = (offset + buf.len() as u64).div_ceil(bs);
        if offset.is_multiple_of(bs) && (buf.len() as u64).is_multiple_of(bs) {
            return self.read_blocks(first, buf);
        }
        let mut whole = vec![0u8; ((end - first) * bs) as usize];
        self.read_blocks(first, &mut whole)?;
        let skip = (offset - first * bs) as usize;
        buf.copy_from_slice(&whole[skip..skip + buf.len()]);
        Ok(())
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> Result<(), DeviceError> {
        check_range(DeviceOp::Write, offset, buf.len() as u64, self.len())?;
        if self.shared.reader.is_some() {
            return Err(DeviceError::ReadOnly {
                op: DeviceOp::Write,
            });
        }
        let bs = u64::from(self.shared.volume.block_size);
        if offset.is_multiple_of(bs) && (buf.len() as u64).is_multiple_of(bs) {
            return self.write_blocks(offset / bs, buf);
        }
        // A partial block: read the blocks around it, patch, write whole.
        let first = offset / bs;
        let end = (offset + buf.len() as u64).div_ceil(bs);
        let mut whole = vec![0u8; ((end - first) * bs) as usize];
        self.read_blocks(first, &mut whole)?;
        let skip = (offset - first * bs) as usize;
        whole[skip..skip + buf.len()].copy_from_slice(buf);
        self.write_blocks(first, &whole)
    }

    fn flush(&self) -> Result<(), DeviceError> {
        self.flush_all()
    }

    fn discard(&self, offset: u64, len: u64) -> Result<(), DeviceError> {
        check_range(DeviceOp::Discard, offset, len, self.len())?;
        if self.shared.reader.is_some() {
            return Err(DeviceError::ReadOnly {
                op: DeviceOp::Discard,
            });
        }
        let bs = u64::from(self.shared.volume.block_size);
        let blocks = crate::device::whole_blocks(offset, len, bs);
        if blocks.is_empty() {
            return Ok(());
        }
        let mut st = self.shared.state();
        self.refuse(&st, DeviceOp::Discard, offset, len)?;
        st.trim(blocks.start, blocks.end - blocks.start);
        Ok(())
    }

    fn len(&self) -> u64 {
        self.shared.volume.size
    }

    fn alignment(&self) -> u64 {
        u64::from(self.shared.volume.block_size)
    }

    fn describe(&self) -> String {
        format!(
            "objects {} {}",
            self.shared.store.describe(),
            self.shared.keys.prefix
        )
    }
}
