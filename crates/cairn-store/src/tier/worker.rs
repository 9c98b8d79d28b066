//! The background worker: write-back paced toward the dirty-data target,
//! buckets reclaimed ahead of need, checkpoints when half the journal ring
//! is used, and the journal made durable at least every second.
//!
//! Pacing (bcache's writeback controller, simplified): above the target
//! (`writeback_percent` of the capacity) the cleaner writes back
//! `excess / P` blocks a second plus an integral of the excess over time
//! (`/ I`), so a steady inflow is matched without overshoot; at or below
//! the target it rests. When no client request came for a second, or a
//! drain was asked for (mode switch, detach, stop), it cleans at full speed.

use std::sync::Arc;
use std::sync::PoisonError;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::metrics::Counters;
use super::{CHUNK_BLOCKS, Fault, Inner};

/// How often the worker wakes.
pub(super) const TICK: Duration = Duration::from_millis(20);
/// Seconds the proportional term takes to clean the excess.
const P_SECONDS: f64 = 10.0;
/// Seconds of excess the integral term accumulates per block a second.
const I_SECONDS: f64 = 30.0;
/// Slowest cleaning above the target, blocks a second.
const MIN_RATE: f64 = 64.0;
/// No client request for this long: clean at full speed.
const IDLE: Duration = Duration::from_secs(1);
/// Buckets the worker reclaims at most per tick.
const RECLAIMS_PER_TICK: usize = 8;
/// The journal is made durable at least this often.
const FLUSH_EVERY: Duration = Duration::from_secs(1);

/// The controller's state between ticks.
pub(super) struct Pacer {
    cursor: u64,
    integral: f64,
    budget: f64,
    last: Instant,
    last_flush: Instant,
}

impl Pacer {
    pub(super) fn new() -> Self {
        Self {
            cursor: 0,
            integral: 0.0,
            budget: 0.0,
            last: Instant::now(),
            last_flush: Instant::now(),
        }
    }
}

pub(super) fn spawn(inner: Arc<Inner>) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("cairn-tier".into())
        .spawn(move || run(&inner))
}

fn run(inner: &Inner) {
    let mut pacer = Pacer::new();
    loop {
        {
            let stop = inner
                .signal
                .stop
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if *stop {
                return;
            }
            let (stop, _) = inner
                .signal
                .wake
                .wait_timeout(stop, TICK)
                .unwrap_or_else(PoisonError::into_inner);
            if *stop {
                return;
            }
        }
        if !inner.healthy() {
            continue;
        }
        if let Err(fault) = inner.background_step(&mut pacer) {
            let e = inner.handle(fault);
            tracing::warn!("tier worker: {e}");
            std::thread::sleep(TICK * 10);
        }
    }
}

impl Inner {
    /// One tick of the worker's work.
    pub(super) fn background_step(&self, pacer: &mut Pacer) -> Result<(), Fault> {
        let now = Instant::now();
        let dt = now.duration_since(pacer.last).as_secs_f64();
        pacer.last = now;
        let dirty = Counters::get(&self.counters.dirty) as f64;
        let target =
            self.capacity_blocks as f64 * f64::from(self.options.writeback_percent) / 100.0;
        let since_io = self.started.elapsed().as_nanos() as u64
            - self
                .signal
                .last_io_ns
                .load(Ordering::Relaxed)
                .min(self.started.elapsed().as_nanos() as u64);
        let idle = Duration::from_nanos(since_io) > IDLE;
        if self.signal.drain.load(Ordering::Acquire) || (idle && dirty > 0.0) {
            pacer.budget = f64::INFINITY;
        } else if dirty > target {
            let excess = dirty - target;
            pacer.integral += excess * dt / I_SECONDS;
            let rate = (excess / P_SECONDS + pacer.integral).max(MIN_RATE);
            pacer.budget = (pacer.budget + rate * dt).min(4.0 * CHUNK_BLOCKS as f64);
        } else {
            pacer.integral = 0.0;
            pacer.budget = 0.0;
        }
        let deadline = now + TICK;
        while pacer.budget >= 1.0 && Instant::now() < deadline {
            let max = pacer.budget.min(CHUNK_BLOCKS as f64) as usize;
            let done = self.clean_batch(&mut pacer.cursor, max)?;
            if done == 0 {
                pacer.budget = 0.0;
                break;
            }
            pacer.budget -= done as f64;
        }
        if pacer.budget.is_infinite() {
            pacer.budget = 0.0;
        }
        self.maintain()?;
        if now.duration_since(pacer.last_flush) >= FLUSH_EVERY {
            pacer.last_flush = now;
            self.journal.make_all_durable().map_err(Fault::Cache)?;
            self.settle_written()?;
        }
        Ok(())
    }

    /// Reclaims buckets while few are free (a few at a time: a reclaim's
    /// moves may take the bucket it freed when live blocks fill the others);
    /// checkpoints when half the ring is used.
    pub(super) fn maintain(&self) -> Result<(), Fault> {
        for _ in 0..RECLAIMS_PER_TICK {
            if self.buckets.free_count() >= self.keep_buckets + 2 || !self.reclaim_one()? {
                break;
            }
        }
        if self.journal.wants_checkpoint() {
            self.journal.checkpoint(&self.table).map_err(Fault::Cache)?;
        }
        Ok(())
    }

    /// A test's step: clean at most `blocks`, then maintain.
    pub(super) fn step(&self, blocks: usize) -> Result<usize, Fault> {
        let mut cursor = 0;
        let done = if blocks > 0 {
            self.clean_batch(&mut cursor, blocks)?
        } else {
            0
        };
        self.maintain()?;
        Ok(done)
    }
}
