//! The readahead's threads (see the module docs of [`crate::cache`]): each
//! reads queued blocks and puts them where their single-flight slot waits.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use cairn_policy::cost::CostEstimator;
use cairn_policy::prefetch::{Readahead, readahead};
use cairn_store::device::BufferPool;

use super::{BlockReader, Job, Prefetch, ShardCell, Slot, lock};
use crate::backend::Backend;
use crate::limits::PREFETCH_IN_FLIGHT_MIN;

impl Prefetch {
    /// Starts `window` prefetch threads reading `backend` into `shards`.
    pub(super) fn start<B: Backend + 'static>(
        backend: &Arc<B>,
        shards: &Arc<[ShardCell]>,
        costs: &Arc<CostEstimator>,
        buffers: &Arc<BufferPool>,
        window: u64,
        readaheads: usize,
    ) -> Prefetch {
        let in_flight_max = (4 * window).max(PREFETCH_IN_FLIGHT_MIN);
        let (queue, jobs) = std::sync::mpsc::sync_channel::<Job>(in_flight_max as usize);
        let jobs = Arc::new(Mutex::new(jobs));
        let in_flight = Arc::new(AtomicU64::new(0));
        let threads = (0..window)
            .filter_map(|i| {
                let (backend, shards) = (Arc::clone(backend), Arc::clone(shards));
                let (jobs, in_flight) = (Arc::clone(&jobs), Arc::clone(&in_flight));
                let (costs, buffers) = (Arc::clone(costs), Arc::clone(buffers));
                std::thread::Builder::new()
                    .name(format!("cairn-prefetch-{i}"))
                    .spawn(move || {
                        let reader = BlockReader {
                            backend: &*backend,
                            costs: &costs,
                            buffers: &buffers,
                        };
                        prefetch_thread(&reader, &shards, &jobs, &in_flight);
                    })
                    .ok()
            })
            .collect();
        let per = (readahead::OBJECTS_MAX_DEFAULT / readaheads).max(1);
        Prefetch {
            readaheads: (0..readaheads)
                .map(|_| {
                    Mutex::new((
                        Readahead::with_objects_max(window, per),
                        Vec::with_capacity(window as usize),
                    ))
                })
                .collect(),
            queue: Some(queue),
            in_flight,
            in_flight_max,
            dropped: AtomicU64::new(0),
            threads,
        }
    }
}

/// A prefetch thread: reads queued blocks until the queue closes.
fn prefetch_thread<B: Backend>(
    reader: &BlockReader<'_, B>,
    shards: &[ShardCell],
    jobs: &Mutex<std::sync::mpsc::Receiver<Job>>,
    in_flight: &AtomicU64,
) {
    loop {
        let job = lock(jobs).recv();
        let Ok(job) = job else { return };
        // Admitted at issue: the block moves up whatever a level below
        // would rather keep.
        let result = reader
            .read(job.part, &job.key, job.offset, job.len, false)
            .map(|(block, _)| block);
        let cell = &shards[job.cell];
        let mut shard = lock(&cell.shard);
        let ours = matches!(shard.map.get(&job.cache_key),
            Some(Slot::Loading(flight)) if Arc::ptr_eq(flight, &job.flight));
        if let Ok(block) = &result {
            if ours {
                let slot = if job.flight.used.load(Ordering::Relaxed) {
                    Slot::Ready(block.clone())
                } else {
                    Slot::Prefetched(block.clone())
                };
                shard.map.insert(job.cache_key, slot);
            }
            drop(shard);
            cell.counters
                .bytes_from_backend
                .fetch_add(job.len as u64, Ordering::Relaxed);
        } else {
            if ours {
                // Admitted at issue: out of the policy again.
                shard.map.remove(&job.cache_key);
                shard.policy.remove(job.cache_key);
            }
            drop(shard);
            if let Err(e) = &result {
                cell.counters.errors.count(e.kind);
            }
        }
        in_flight.fetch_sub(1, Ordering::Release);
        job.flight.complete(result);
    }
}
