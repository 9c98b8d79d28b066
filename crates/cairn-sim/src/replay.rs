//! Replay: one trace against many (policy × size) configurations, reading the
//! trace once, on every core.
//!
//! ```text
//!             ┌──────── Arc'd chunk of accesses ───┐
//! reader ─────┼─► bounded queue ─► worker 0: configs 0, W, 2W, …
//! (caller's   ├─► bounded queue ─► worker 1: configs 1, W+1, …
//!  thread)    └─► bounded queue ─► worker W-1
//! ```
//!
//! The calling thread pulls accesses from the stream, packs them into chunks of
//! [`ReplayOptions::chunk_accesses`], and hands every worker a reference to the
//! same chunk. Each worker owns a fixed subset of the policy instances and runs
//! each of them over the whole chunk before the next (the policy's state stays
//! in cache). Queues hold at most [`ReplayOptions::queue_chunks`] chunks, so
//! memory is bounded by `W × queue_chunks × chunk_accesses × 48 bytes` (64 with
//! TTL, whose [`Stamp`]s ride beside the accesses) however
//! long the trace. Every configuration sees every access in trace order, so
//! results do not depend on the number of threads.
//!
//! With [`ReplayOptions::threads`] = 1 nothing is spawned: the calling thread
//! decodes each access and runs it through every configuration in turn. That is
//! the strictly single-threaded mode (one core in all, for comparisons with
//! single-threaded simulators); with any other setting the decoder runs on its
//! own thread, which is faster in wall time whenever a second core exists.

use std::sync::Arc;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::time::Instant;

use cairn_policy::{
    Access, AdmissionConfig, Ahead, Capacity, KeyMap, Op, Policy, PolicyConfig, PrefetchConfig,
    Prefetcher,
};
use cairn_trace::TraceError;

use crate::cost::CostModel;
use crate::hints::HintTuner;
use crate::levels::{Level2, SecondLevel};
use crate::metrics::{Level2Report, Metrics, Report};
use crate::stream::AccessSource;
use crate::ttl::{Expiring, Stamp};
use crate::{Result, SimError};

/// One configuration to simulate.
#[derive(Clone, Debug, PartialEq)]
pub struct Configuration {
    /// The name shown in reports, usually the policy spec as given.
    pub label: String,
    /// The policy and its knobs.
    pub policy: PolicyConfig,
    /// The admission filter in front of the policy (`always`: none).
    pub admission: AdmissionConfig,
    /// The prefetcher beside the policy (`None`: none). Units it names are
    /// loaded after each access (see [`cairn_policy::prefetch`]).
    pub prefetch: Option<PrefetchConfig>,
    /// The cache size as given (`10%`), for reports.
    pub size: String,
    /// The resolved capacity.
    pub capacity: Capacity,
    /// A second cache level under the policy (`None`: one level). Not with
    /// a prefetcher.
    pub l2: Option<Level2>,
}

/// Receives progress from the reader thread, once per chunk.
pub trait Progress: Sync {
    /// `accesses` more accesses totalling `bytes` bytes were handed to the workers.
    fn advance(&self, accesses: u64, bytes: u64);
}

/// Progress that goes nowhere.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoProgress;

impl Progress for NoProgress {
    fn advance(&self, _accesses: u64, _bytes: u64) {}
}

/// How to run a replay.
#[derive(Clone, Debug)]
pub struct ReplayOptions {
    /// Worker threads; 0 means `std::thread::available_parallelism()`. Never
    /// more than the number of configurations. Exactly 1 means no thread at
    /// all besides the caller's: decoding and every configuration run inline.
    pub threads: usize,
    /// Accesses per chunk. Default 65,536 (3 MiB a chunk).
    pub chunk_accesses: usize,
    /// Chunks each worker's queue holds before the reader waits. Default 4.
    pub queue_chunks: usize,
    /// The device cost model applied to the counters.
    pub cost: CostModel,
    /// Accesses that warm the caches before counting starts: every
    /// configuration replays them, and its counters are zeroed after the
    /// last. Default 0.
    pub warmup_accesses: u64,
}

impl Default for ReplayOptions {
    fn default() -> Self {
        Self {
            threads: 0,
            chunk_accesses: 1 << 16,
            queue_chunks: 4,
            cost: CostModel::default(),
            warmup_accesses: 0,
        }
    }
}

impl ReplayOptions {
    /// The number of workers for `configurations` configurations.
    pub fn workers(&self, configurations: usize) -> usize {
        let threads = if self.threads == 0 {
            std::thread::available_parallelism().map_or(1, std::num::NonZero::get)
        } else {
            self.threads
        };
        threads.clamp(1, configurations.max(1))
    }
}

/// Accesses decoded per turn in the single-threaded replay: 48 KiB of
/// accesses, so the batch stays in L1/L2 beside the policy's state.
const INLINE_BATCH: usize = 1024;

/// Room for the blocks of the request that ends a batch (a batch never cuts a
/// request), so the buffer rarely grows.
const BLOCKS_PER_REQUEST_SLACK: usize = 256;

/// The spacing of the three [`Policy::prefetch`] hints (`Next` this many
/// accesses ahead, `Near` twice, `Far` three times): far enough to hide a
/// memory access (~100 ns) behind the work of the accesses in between.
const PREFETCH_AHEAD: usize = 6;

/// One policy instance and its counters, owned by one worker.
struct Slot {
    index: usize,
    policy: Box<dyn Policy>,
    prefetch: Option<Prefetching>,
    /// The second level, in a two-level configuration.
    lower: Option<SecondLevel>,
    metrics: Metrics,
    /// Accesses replayed so far, and how many of them warm up.
    seen: u64,
    warmup: u64,
    /// With TTL: the expiries of the resident units. Empty, and never
    /// touched, without TTL.
    expiring: Expiring,
    /// With TTL: how long a unit a prefetcher loads lives (the default TTL),
    /// µs; `None`: forever.
    prefetch_ttl_us: Option<u64>,
    /// Whether its batches run with [`Policy::prefetch`] hints.
    hints: HintTuner,
}

/// A prefetcher beside a policy, and what it loaded.
struct Prefetching {
    prefetcher: Box<dyn Prefetcher>,
    /// The units it named after the current access (reused).
    wanted: Vec<u64>,
    /// Units it loaded that no demand access has touched yet.
    unused: KeyMap<()>,
}

impl Prefetching {
    /// After `access` was served (`hit`; the policy evicted `victims` for
    /// it): tells the prefetcher, then loads what it names that is not
    /// resident, as units of the access's size (libCacheSim's order). With
    /// TTL, `expiring` keeps the policy's expiries and each loaded unit
    /// expires at the `u64` beside it ([`crate::ttl`]).
    fn after(
        &mut self,
        policy: &mut dyn Policy,
        access: &Access,
        hit: bool,
        victims: &mut Vec<u64>,
        metrics: &mut Metrics,
        mut expiring: Option<(&mut Expiring, u64)>,
    ) {
        // Only a hit can touch a prefetched unit: `unused` holds resident
        // units only, so a miss needs no lookup.
        if hit && self.unused.remove(&access.key).is_some() {
            metrics.prefetch_hits += 1;
        }
        self.evicted(victims);
        self.wanted.clear();
        self.prefetcher.access(access.key, hit, &mut self.wanted);
        for at in 0..self.wanted.len() {
            let key = self.wanted[at];
            if policy.contains(key) {
                continue;
            }
            let unit = Access {
                key,
                op: Op::Read,
                object: key,
                block: key,
                next: cairn_policy::NEVER,
                ..*access
            };
            victims.clear();
            // A miss, as the engine's block cache sees a prefetched block:
            // looked up (policies with history record it), then admitted.
            let resident = policy.lookup(&unit);
            debug_assert!(!resident);
            let admitted = policy.admit(&unit, victims);
            if let Some((expiring, expires_us)) = expiring.as_mut() {
                expiring.forget(victims);
                if admitted {
                    expiring.admitted(key, *expires_us);
                }
            }
            if admitted {
                metrics.prefetched += 1;
                self.unused.insert(key, ());
            }
            metrics.evictions += victims.len() as u64;
            self.evicted(victims);
        }
    }

    fn evicted(&mut self, victims: &[u64]) {
        for &victim in victims {
            self.unused.remove(&victim);
        }
    }
}

impl Slot {
    /// Runs `chunk`; `stamps` is empty without TTL, else one per access.
    fn run(&mut self, chunk: &[Access], stamps: &[Stamp], victims: &mut Vec<u64>) {
        if !stamps.is_empty() {
            self.run_ttl(chunk, stamps, victims);
            return;
        }
        if self.lower.is_some() {
            self.run_levels(chunk, victims);
            return;
        }
        let timed = self.hints.choose(self.policy.len());
        let hints = timed == Some(true);
        let started = timed.map(|_| Instant::now());
        for (at, access) in chunk.iter().enumerate() {
            if hints {
                if let Some(far) = chunk.get(at + 3 * PREFETCH_AHEAD) {
                    self.policy.prefetch(far.key, Ahead::Far);
                }
                if let Some(near) = chunk.get(at + 2 * PREFETCH_AHEAD) {
                    self.policy.prefetch(near.key, Ahead::Near);
                }
                if let Some(next) = chunk.get(at + PREFETCH_AHEAD) {
                    self.policy.prefetch(next.key, Ahead::Next);
                }
            }
            if self.seen == self.warmup {
                // Warmed up: count from here.
                self.metrics = Metrics::default();
            }
            self.seen += 1;
            victims.clear();
            let hit = self.policy.access(access, victims);
            self.metrics.record(access, hit, victims.len());
            if let Some(prefetch) = &mut self.prefetch {
                prefetch.after(
                    &mut *self.policy,
                    access,
                    hit,
                    victims,
                    &mut self.metrics,
                    None,
                );
            }
        }
        if let Some(started) = started {
            let nanos = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
            self.hints.record(nanos, chunk.len());
        }
    }
}

impl Slot {
    /// [`Slot::run`] with TTL (no hints), as libCacheSim's
    /// `cache_find_base` does it: a resident unit whose expiry is below the
    /// access's time is removed, and the access is a miss (and inserts it
    /// again, as any miss); a hit leaves the expiry as it was. Two levels
    /// and prefetchers follow [`crate::ttl`]'s rules.
    fn run_ttl(&mut self, chunk: &[Access], stamps: &[Stamp], victims: &mut Vec<u64>) {
        for (access, &stamp) in chunk.iter().zip(stamps) {
            if self.seen == self.warmup {
                self.metrics = Metrics::default();
            }
            self.seen += 1;
            if let Some(lower) = self.lower.as_mut() {
                self.expiring.access_levels(
                    &mut *self.policy,
                    lower,
                    access,
                    stamp,
                    victims,
                    &mut self.metrics,
                );
                continue;
            }
            let hit =
                self.expiring
                    .access(&mut *self.policy, access, stamp, victims, &mut self.metrics);
            if let Some(prefetch) = &mut self.prefetch {
                if !hit {
                    // Had it been a prefetched unit, it expired: the demand
                    // miss loaded it again.
                    prefetch.unused.remove(&access.key);
                }
                let expires_us = self
                    .prefetch_ttl_us
                    .map_or(cairn_policy::NEVER, |ttl| stamp.now_us.saturating_add(ttl));
                prefetch.after(
                    &mut *self.policy,
                    access,
                    hit,
                    victims,
                    &mut self.metrics,
                    Some((&mut self.expiring, expires_us)),
                );
            }
        }
    }

    /// [`Slot::run`] for a two-level configuration (no prefetcher, no hints:
    /// one branch per chunk keeps the one-level loop as it was).
    fn run_levels(&mut self, chunk: &[Access], victims: &mut Vec<u64>) {
        let Some(lower) = self.lower.as_mut() else {
            return;
        };
        for access in chunk {
            if self.seen == self.warmup {
                self.metrics = Metrics::default();
            }
            self.seen += 1;
            lower.access(&mut *self.policy, access, victims, &mut self.metrics);
        }
    }
}

/// Replays `accesses` against every configuration. Reports come back in the
/// order of `configurations`.
pub fn replay(
    configurations: &[Configuration],
    accesses: impl AccessSource,
    options: &ReplayOptions,
    progress: &dyn Progress,
) -> Result<Vec<Report>> {
    if configurations.is_empty() {
        return Err(SimError::NoConfigurations);
    }
    let workers = if options.threads == 1 {
        1
    } else {
        options.workers(configurations.len())
    };
    let mut owned: Vec<Vec<Slot>> = (0..workers).map(|_| Vec::new()).collect();
    for (index, configuration) in configurations.iter().enumerate() {
        let policy = configuration
            .policy
            .build(configuration.capacity)
            .and_then(|policy| configuration.admission.wrap(policy))
            .map_err(|source| SimError::Policy {
                label: configuration.label.clone(),
                source,
            })?;
        let prefetch = configuration
            .prefetch
            .as_ref()
            .map(|config| config.build(configuration.capacity))
            .transpose()
            .map_err(|source| SimError::Policy {
                label: configuration.label.clone(),
                source,
            })?
            .map(|prefetcher| Prefetching {
                prefetcher,
                wanted: Vec::new(),
                unused: KeyMap::default(),
            });
        let lower = match &configuration.l2 {
            None => None,
            Some(_) if prefetch.is_some() => {
                return Err(SimError::Unsupported {
                    label: configuration.label.clone(),
                    what: "a prefetcher beside a two-level hierarchy",
                });
            }
            Some(l2) => Some(SecondLevel::new(
                l2.policy
                    .build(l2.capacity)
                    .map_err(|source| SimError::Policy {
                        label: format!("{} (L2 {})", configuration.label, l2.label),
                        source,
                    })?,
                l2.hierarchy,
            )),
        };
        owned[index % workers].push(Slot {
            index,
            policy,
            prefetch,
            lower,
            metrics: Metrics::default(),
            seen: 0,
            warmup: options.warmup_accesses,
            expiring: Expiring::new(),
            prefetch_ttl_us: accesses.ttl().and_then(|ttl| ttl.default_us),
            hints: HintTuner::default(),
        });
    }
    let chunk_accesses = options.chunk_accesses.max(1);
    let slots = if options.threads == 1 {
        let mut slots = owned.pop().unwrap_or_default();
        run_inline(&mut slots, accesses, chunk_accesses, progress)?;
        slots
    } else {
        replay_threaded(
            owned,
            configurations,
            accesses,
            chunk_accesses,
            options,
            progress,
        )?
    };
    let mut reports: Vec<Option<Report>> = vec![None; configurations.len()];
    for mut slot in slots {
        if slot.seen <= slot.warmup {
            // The trace ended within the warm-up: nothing counted.
            slot.metrics = Metrics::default();
        }
        let configuration = &configurations[slot.index];
        let mut report = report(
            configuration,
            slot.policy.name(),
            slot.metrics,
            &options.cost,
        );
        if let (Some(l2), Some(lower)) = (&configuration.l2, &slot.lower) {
            report.l2 = Some(Level2Report {
                label: l2.label.clone(),
                policy: lower.policy().name().to_owned(),
                size: l2.size.clone(),
                capacity: l2.capacity.limit(),
                hierarchy: l2.hierarchy,
            });
        }
        reports[slot.index] = Some(report);
    }
    Ok(reports.into_iter().flatten().collect())
}

/// The strictly single-threaded replay: decode an access, run it through every
/// configuration, repeat. Progress is reported every `chunk_accesses` accesses.
fn run_inline(
    slots: &mut [Slot],
    mut accesses: impl AccessSource,
    chunk_accesses: usize,
    progress: &dyn Progress,
) -> Result<(), TraceError> {
    let mut victims = Vec::new();
    let mut batch: Vec<Access> = Vec::with_capacity(INLINE_BATCH + BLOCKS_PER_REQUEST_SLACK);
    let stamped = accesses.stamped();
    let mut stamps: Vec<Stamp> = Vec::new();
    let (mut count, mut bytes) = (0usize, 0u64);
    loop {
        batch.clear();
        stamps.clear();
        let filled = if stamped {
            accesses.fill_stamped(&mut batch, &mut stamps, INLINE_BATCH)?
        } else {
            accesses.fill(&mut batch, INLINE_BATCH)?
        };
        if filled == 0 {
            break;
        }
        for slot in slots.iter_mut() {
            slot.run(&batch, &stamps, &mut victims);
        }
        count += batch.len();
        bytes += batch.iter().map(|a| u64::from(a.size)).sum::<u64>();
        if count >= chunk_accesses {
            progress.advance(count as u64, bytes);
            (count, bytes) = (0, 0);
        }
    }
    progress.advance(count as u64, bytes);
    Ok(())
}

/// The threaded replay: the caller decodes and broadcasts chunks; each worker
/// runs its configurations.
fn replay_threaded(
    owned: Vec<Vec<Slot>>,
    configurations: &[Configuration],
    accesses: impl AccessSource,
    chunk_accesses: usize,
    options: &ReplayOptions,
    progress: &dyn Progress,
) -> Result<Vec<Slot>> {
    let workers = owned.len();
    std::thread::scope(|scope| -> Result<Vec<Slot>> {
        let mut senders = Vec::with_capacity(workers);
        let mut handles = Vec::with_capacity(workers);
        for slots in owned {
            let (sender, receiver) = sync_channel::<Chunk>(options.queue_chunks.max(1));
            senders.push(sender);
            let first = slots.first().map(|s| configurations[s.index].label.clone());
            handles.push((first, scope.spawn(move || work(slots, &receiver))));
        }
        let read = read_chunks(accesses, chunk_accesses, &senders, progress);
        drop(senders);
        let mut done = Vec::with_capacity(configurations.len());
        for (label, handle) in handles {
            match handle.join() {
                Ok(slots) => done.extend(slots),
                Err(_) => {
                    return Err(SimError::WorkerPanicked {
                        label: label.unwrap_or_default(),
                    });
                }
            }
        }
        read?;
        Ok(done)
    })
}

/// What the reader hands every worker: the accesses, and their stamps when
/// TTL is in play (else none).
type Chunk = Arc<(Box<[Access]>, Box<[Stamp]>)>;

/// The reader: chunks the stream and broadcasts each chunk to every worker.
fn read_chunks(
    mut accesses: impl AccessSource,
    chunk_accesses: usize,
    senders: &[SyncSender<Chunk>],
    progress: &dyn Progress,
) -> Result<(), TraceError> {
    let mut chunk: Vec<Access> = Vec::with_capacity(chunk_accesses + BLOCKS_PER_REQUEST_SLACK);
    let stamped = accesses.stamped();
    let mut stamps: Vec<Stamp> = Vec::new();
    loop {
        chunk.clear();
        stamps.clear();
        let filled = if stamped {
            accesses.fill_stamped(&mut chunk, &mut stamps, chunk_accesses)?
        } else {
            accesses.fill(&mut chunk, chunk_accesses)?
        };
        if filled == 0 {
            return Ok(());
        }
        let bytes = chunk.iter().map(|a| u64::from(a.size)).sum();
        let shared: Chunk = Arc::new((chunk.as_slice().into(), stamps.as_slice().into()));
        progress.advance(chunk.len() as u64, bytes);
        for sender in senders {
            // A closed queue means its worker panicked; `replay` reports that.
            if sender.send(Arc::clone(&shared)).is_err() {
                return Ok(());
            }
        }
    }
}

/// A worker: every chunk through every owned policy.
fn work(mut slots: Vec<Slot>, chunks: &Receiver<Chunk>) -> Vec<Slot> {
    let mut victims = Vec::new();
    while let Ok(chunk) = chunks.recv() {
        let (accesses, stamps) = &*chunk;
        for slot in &mut slots {
            slot.run(accesses, stamps, &mut victims);
        }
    }
    slots
}

fn report(
    configuration: &Configuration,
    policy: &str,
    metrics: Metrics,
    cost: &CostModel,
) -> Report {
    let seconds = metrics.modelled_seconds(cost);
    let throughput = if seconds > 0.0 {
        metrics.bytes as f64 / seconds / crate::cost::BYTES_PER_MB
    } else {
        0.0
    };
    let (capacity, unit) = match configuration.capacity {
        Capacity::Objects(n) => (n, "objects"),
        Capacity::Bytes(n) => (n, "bytes"),
    };
    Report {
        label: configuration.label.clone(),
        policy: policy.to_owned(),
        size: configuration.size.clone(),
        capacity,
        capacity_unit: unit.to_owned(),
        miss_ratio: metrics.miss_ratio(),
        byte_miss_ratio: metrics.byte_miss_ratio(),
        modelled_seconds: seconds,
        modelled_throughput_mb_s: throughput,
        metrics,
        l2: None,
    }
}

/// The name a policy configuration is listed under (its `policy = "…"` tag),
/// without building it.
pub fn policy_name(config: &PolicyConfig) -> String {
    serde_json::to_value(config)
        .ok()
        .and_then(|v| v.get("policy").and_then(|p| p.as_str().map(str::to_owned)))
        .unwrap_or_default()
}
