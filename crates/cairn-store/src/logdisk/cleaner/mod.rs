//! The cleaner: it chooses victims ([`plan`]: pure functions of the
//! tables), reads their live blocks ([`reads`]) and hands them to the same
//! [`Log::append`] the user's writes go through, tagged
//! [`Kind::Cleaner`]. It calls the log, the flush and the checkpoint below
//! it, never the write path above it; when to clean is the caller's choice.
//!
//! Two ways to run. The *foreground* cleaner ([`Cleaner::clean_passes`])
//! cleans until the high watermark, each pass's reads batched, its writes
//! made here. The *background* pass ([`Cleaner::start_pass`], then
//! [`Cleaner::write_pass`] and [`Cleaner::end_pass`]
//! [`CLEANER_BACKGROUND_LAG`] user segment writes later) issues its reads on
//! reader threads and collects only what is still live when it is written.

pub mod plan;
pub mod reads;

use std::sync::{Arc, PoisonError};

use self::reads::{Batch, Collected, Readers};
use super::checkpoint;
use super::error::LogDiskError;
use super::flush::Core;
use super::format::{Geometry, SummaryEntry};
use super::log::{Append, Kind, Log, Target};
use super::options::{CleanerPolicy, Options};
use super::table::{Seg, block_of};
use crate::device::{Device, IoBuf};
use crate::limits::{CLEANER_BACKGROUND_LAG, CLEANER_BATCH_SEGMENTS, CLEANER_SMALL_READ_BLOCKS};

/// A background cleaner pass (see [`Options::background_clean`]).
#[derive(Default)]
pub(super) struct Pass {
    /// Reads issued and not yet collected.
    pub active: bool,
    /// Victims and their reads.
    pub batch: Batch,
    /// The read buffers, by run, as the readers return them.
    pub bufs: Vec<IoBuf>,
    /// Reads not yet returned.
    pub outstanding: usize,
    /// User segment writes since the reads were issued.
    pub steps: u32,
}

/// The cleaner's state: the background pass, its readers and buffers.
#[derive(Default)]
pub(super) struct Cleaner {
    /// The background pass whose reads are outstanding.
    pub pass: Pass,
    /// The background pass's reader threads, started at its first pass.
    readers: Option<Readers>,
    /// Read buffers of background passes, for reuse: up to
    /// [`CLEANER_SMALL_READ_BLOCKS`] blocks, and a whole segment.
    pub small_reads: Vec<IoBuf>,
    pub large_reads: Vec<IoBuf>,
    /// The assembly buffer of a pass's write (data at `(i + 1)·B`).
    out: IoBuf,
    entries: Vec<SummaryEntry>,
    /// Write sequences of the blocks a pass collects (age sort).
    ages: Vec<u64>,
    /// The foreground cleaner's reads land here.
    staging: IoBuf,
    /// Candidate victims of a background pass, best first (reused).
    ranked: Vec<(f64, u32)>,
}

impl Cleaner {
    /// Cleans in the foreground until `clean_high` free segments (or
    /// nothing more can be gained): passes of victims whose live blocks fit
    /// what can be written before any victim is freed, read in batches and
    /// written through the log here. The victims of a pass become pending.
    pub fn clean_passes<D: Device + 'static>(
        &mut self,
        core: &mut Core,
        log: &mut Log,
        to: &Target<'_, D>,
        options: &Options,
        clean_high: u32,
        checkpoint_number: &mut u64,
    ) -> Result<(), LogDiskError> {
        let mut work = Foreground {
            out: std::mem::take(&mut self.out),
            entries: std::mem::take(&mut self.entries),
            ages: Vec::new(),
            staging: std::mem::take(&mut self.staging),
            batch: Batch::default(),
            victims: Vec::new(),
        };
        let mut passes = 0u32;
        let result = loop {
            if core.table.empty_segments() >= clean_high || passes >= 2 * to.geo.segments {
                break Ok(());
            }
            passes += 1;
            match foreground_pass(core, log, to, options, &mut work, checkpoint_number) {
                Ok(true) => {}
                Ok(false) => break Ok(()),
                Err(e) => break Err(e),
            }
        };
        if result.is_err() {
            // Victims taken but not written out go back to the candidates.
            for &v in &work.victims {
                if core.table.seg[v as usize] == Seg::Open && log.head.is_none_or(|(h, _)| h != v) {
                    core.table.seg[v as usize] = Seg::Closed;
                }
            }
        }
        self.out = work.out;
        self.entries = work.entries;
        self.staging = work.staging;
        result
    }

    /// Takes victims whose live blocks fit one segment write (and the room
    /// left before any victim is freed) and issues their reads on the reader
    /// threads.
    pub fn start_pass<D: Device + 'static>(
        &mut self,
        core: &mut Core,
        log: &Log,
        dev: &Arc<D>,
        geo: &Geometry,
        options: &Options,
    ) -> Result<(), LogDiskError> {
        assert!(!self.pass.active, "one background pass at a time");
        let b = geo.block_size as usize;
        let n = geo.segment_blocks as usize;
        let per_write = n - 1;
        let limit = per_write.min(room_before_freeing(core, log, n));
        let mut pass = std::mem::take(&mut self.pass);
        pass.batch.clear();
        let mut taken = 0usize;
        // Every closed segment holds a live block: no pass takes more
        // victims than a segment write has blocks.
        let busy = core.queue.busy_segments();
        let mut ranked = std::mem::take(&mut self.ranked);
        plan::rank_victims(
            options.cleaner,
            &core.table,
            geo,
            log.sequence,
            &busy,
            per_write + 1,
            &mut ranked,
        );
        for &(_, v) in &ranked {
            let live = core.table.live[v as usize] as usize;
            if taken + live > limit {
                break;
            }
            strict_assert!(live > 0, "a closed victim holds a live block");
            core.table.seg[v as usize] = Seg::Victim;
            taken += live;
            plan::plan_reads(options, &core.table, geo, v, &mut pass.batch);
        }
        self.ranked = ranked;
        strict_assert!(taken <= limit, "a pass takes more than one segment write");
        if pass.batch.victims.is_empty() {
            self.pass = pass;
            return Ok(());
        }
        if self.readers.is_none() {
            self.readers = Some(Readers::start(
                dev,
                options.cleaner_read_threads,
                options.batch_reads,
            )?);
        }
        let small = CLEANER_SMALL_READ_BLOCKS.min(geo.segment_blocks) as usize;
        pass.bufs.clear();
        pass.steps = 0;
        pass.active = true;
        let mut jobs = Vec::with_capacity(pass.batch.runs.len());
        for (i, run) in pass.batch.runs.iter().enumerate() {
            let len = run.len as usize * b;
            let buf = if run.len as usize <= small {
                self.small_reads
                    .pop()
                    .unwrap_or_else(|| IoBuf::zeroed(small * b))
            } else {
                self.large_reads
                    .pop()
                    .unwrap_or_else(|| IoBuf::zeroed(n * b))
            };
            pass.bufs.push(IoBuf::default());
            let offset = block_of(geo, run.segment, run.slot) * b as u64;
            jobs.push((i, buf, len, offset));
        }
        strict_assert_eq!(pass.bufs.len(), pass.batch.runs.len(), "a buffer per read");
        let readers = self.readers.as_ref().expect("started above");
        pass.outstanding = readers.send(jobs);
        let sent = pass.outstanding == pass.batch.runs.len();
        self.pass = pass;
        if !sent {
            return Err(Readers::stopped(&mut core.queue));
        }
        Ok(())
    }

    /// Counts a user segment write against the background pass; whether
    /// the pass is due ([`CLEANER_BACKGROUND_LAG`] writes since its reads).
    pub fn step(&mut self) -> bool {
        if !self.pass.active {
            return false;
        }
        self.pass.steps += 1;
        self.pass.steps >= CLEANER_BACKGROUND_LAG
    }

    /// Waits for the background pass's reads, then writes its victims'
    /// blocks that are still live through the log (a checkpoint on the way
    /// only if trimmed segments must be reused). The pass stays active
    /// until [`Cleaner::end_pass`].
    pub fn write_pass<D: Device + 'static>(
        &mut self,
        core: &mut Core,
        log: &mut Log,
        to: &Target<'_, D>,
        options: &Options,
        checkpoint_number: &mut u64,
    ) -> Result<(), LogDiskError> {
        assert!(self.pass.active, "writing a pass never started");
        let geo = to.geo;
        let start = std::time::Instant::now();
        let mut result = Ok(());
        if let Some(readers) = self.readers.as_ref() {
            let done = readers.done.lock().unwrap_or_else(PoisonError::into_inner);
            while self.pass.outstanding > 0 {
                let Ok((i, buf, read)) = done.recv() else {
                    break;
                };
                self.pass.bufs[i] = buf;
                self.pass.outstanding -= 1;
                if let (Ok(()), Err(e)) = (&result, read) {
                    result = Err(LogDiskError::from(e));
                }
            }
        }
        core.metrics.cleaner_read_ns +=
            u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
        if result.is_ok() && self.pass.outstanding > 0 {
            result = Err(Readers::stopped(&mut core.queue));
        }
        result?;
        strict_assert!(
            self.pass.bufs.iter().all(|buf| !buf.is_empty()),
            "a read never returned"
        );
        let b = geo.block_size as usize;
        let n = geo.segment_blocks as usize;
        core.metrics.cleaner_read_ios += self.pass.batch.runs.len() as u64;
        core.metrics.cleaner_read_bytes += u64::from(self.pass.batch.staged) * b as u64;
        core.metrics.cleaner_background_passes += 1;
        let mut out = std::mem::take(&mut self.out);
        let mut entries = std::mem::take(&mut self.entries);
        let mut ages = std::mem::take(&mut self.ages);
        entries.clear();
        ages.clear();
        out.grow(2 * n * b);
        let bufs = &self.pass.bufs;
        let mut into = Collected {
            out: &mut out,
            entries: &mut entries,
            ages: &mut ages,
        };
        let mut result = reads::collect(
            &core.table,
            &mut core.metrics,
            geo,
            &self.pass.batch,
            |i, _, k| &bufs[i][k as usize * b..(k as usize + 1) * b],
            &mut into,
        );
        if result.is_ok() {
            age_sort(options.cleaner, geo, &mut entries, &mut out, &ages);
            let background = options.background_destage;
            result = relocate(
                core,
                log,
                to,
                &entries,
                &mut out,
                background,
                checkpoint_number,
            );
        }
        self.out = out;
        self.entries = entries;
        self.ages = ages;
        result
    }

    /// Ends the background pass (after [`Cleaner::write_pass`] or in its
    /// place, with its `result`): emptied victims become pending (free
    /// after the flush that makes the copies, or the writes that killed
    /// them, durable); on an error the victims go back to the candidates.
    /// The read buffers go back to their pools.
    pub fn end_pass(&mut self, core: &mut Core, geo: &Geometry, result: &Result<(), LogDiskError>) {
        let mut pass = std::mem::take(&mut self.pass);
        pass.active = false;
        for &(v, _, _) in &pass.batch.victims {
            if core.table.seg[v as usize] != Seg::Victim {
                continue;
            }
            if core.table.live[v as usize] == 0 {
                core.table.emptied(v);
            } else {
                assert!(
                    result.is_err(),
                    "segment {v} kept live blocks after its pass"
                );
                core.table.seg[v as usize] = Seg::Closed;
            }
        }
        // Back to the pool of their size (with segments of at most
        // CLEANER_SMALL_READ_BLOCKS blocks, every buffer is a small one).
        let b = geo.block_size as usize;
        let small = CLEANER_SMALL_READ_BLOCKS.min(geo.segment_blocks) as usize * b;
        let large = geo.segment_blocks as usize * b;
        for buf in pass.bufs.drain(..) {
            if buf.len() == small {
                self.small_reads.push(buf);
            } else if buf.len() == large {
                self.large_reads.push(buf);
            }
        }
        pass.batch.clear();
        pass.outstanding = 0;
        self.pass = pass;
    }

    /// Stops the reader threads.
    pub fn stop(&mut self) {
        if let Some(readers) = self.readers.take() {
            readers.stop();
        }
    }
}

/// The foreground cleaner's buffers and the victims of its current pass.
struct Foreground {
    out: IoBuf,
    entries: Vec<SummaryEntry>,
    ages: Vec<u64>,
    staging: IoBuf,
    batch: Batch,
    victims: Vec<u32>,
}

/// One foreground pass: victims whose live blocks fit what can be written
/// before any victim is freed (several victims, written as full segments,
/// so a pass frees more segments than it fills), read in batches, written
/// through the log; the emptied victims become pending. `false` when there
/// was no victim to take.
fn foreground_pass<D: Device + 'static>(
    core: &mut Core,
    log: &mut Log,
    to: &Target<'_, D>,
    options: &Options,
    w: &mut Foreground,
    checkpoint_number: &mut u64,
) -> Result<bool, LogDiskError> {
    let geo = to.geo;
    let b = geo.block_size as usize;
    let n = geo.segment_blocks as usize;
    w.entries.clear();
    w.ages.clear();
    w.victims.clear();
    let limit = room_before_freeing(core, log, n);
    w.out.grow((limit + n + 1) * b);
    // Live blocks of the victims taken so far (their reads are batched, so
    // `entries` lags behind).
    let mut taken = 0usize;
    let busy = core.queue.busy_segments();
    while let Some(v) = plan::pick_victim(options.cleaner, &core.table, geo, log.sequence, &busy) {
        let live = core.table.live[v as usize] as usize;
        if taken + live > limit {
            if w.victims.is_empty() {
                return Err(LogDiskError::NoSpace);
            }
            break;
        }
        strict_assert!(!w.victims.contains(&v), "victim {v} taken twice in a pass");
        core.table.seg[v as usize] = Seg::Open; // not a candidate again this pass
        w.victims.push(v);
        taken += live;
        plan::plan_reads(options, &core.table, geo, v, &mut w.batch);
        if w.batch.staged >= CLEANER_BATCH_SEGMENTS * geo.segment_blocks {
            let into = Collected {
                out: &mut w.out,
                entries: &mut w.entries,
                ages: &mut w.ages,
            };
            read_and_collect(core, to, options, &mut w.batch, &mut w.staging, into)?;
        }
    }
    let into = Collected {
        out: &mut w.out,
        entries: &mut w.entries,
        ages: &mut w.ages,
    };
    read_and_collect(core, to, options, &mut w.batch, &mut w.staging, into)?;
    if w.victims.is_empty() {
        return Ok(false);
    }
    // Every live block of every victim was collected.
    assert_eq!(
        w.entries.len(),
        taken,
        "a pass collected other than its victims' live blocks"
    );
    age_sort(options.cleaner, geo, &mut w.entries, &mut w.out, &w.ages);
    for &v in &w.victims {
        core.table.seg[v as usize] = Seg::Closed;
    }
    relocate(
        core,
        log,
        to,
        &w.entries,
        &mut w.out,
        false,
        checkpoint_number,
    )?;
    for &v in &w.victims {
        // Every live block moved (checked in `collect`), so the victim
        // emptied; it may even be the head again already.
        if core.table.seg[v as usize] == Seg::Closed && core.table.live[v as usize] == 0 {
            core.table.emptied(v);
        }
    }
    Ok(true)
}

/// Blocks the log can take before any victim is freed: what is left in the
/// open segment and every free or pending segment's data slots.
fn room_before_freeing(core: &Core, log: &Log, segment_blocks: usize) -> usize {
    log.head
        .map_or(0, |(_, slot)| segment_blocks - slot as usize - 1)
        + core.table.empty_segments() as usize * (segment_blocks - 1)
}

/// Writes the relocated `entries` (data at `(i + 1)·B` of `out`) through the
/// log, as one segment write per segment they reach. Before opening a
/// segment it makes one free (a queued flush reaped, or a device flush),
/// and a checkpoint (numbered after `checkpoint_number`) if only trimmed or
/// held segments remain.
fn relocate<D: Device + 'static>(
    core: &mut Core,
    log: &mut Log,
    to: &Target<'_, D>,
    entries: &[SummaryEntry],
    out: &mut IoBuf,
    background: bool,
    checkpoint_number: &mut u64,
) -> Result<(), LogDiskError> {
    let n = to.geo.segment_blocks;
    let mut done = 0usize;
    while done < entries.len() {
        if log.head.is_none() {
            core.free_a_segment(&**to.dev, log.pin)?;
            if core.table.free.is_empty() && (core.table.any_tainted || !core.table.held.is_empty())
            {
                checkpoint::write(to.dev, to.geo, core, log, checkpoint_number, false, false)?;
            }
        }
        let k = (log.room(n) as usize).min(entries.len() - done);
        log.append(
            core,
            to,
            Append {
                entries: &entries[done..done + k],
                from: done,
                buf: out,
                kind: Kind::Cleaner,
                partial: false,
                background,
                last: done + k == entries.len(),
                fill: None,
            },
        )?;
        done += k;
    }
    Ok(())
}

/// Reads the batch's runs into `staging` and collects its victims' live
/// blocks; empties the batch.
fn read_and_collect<D: Device + 'static>(
    core: &mut Core,
    to: &Target<'_, D>,
    options: &Options,
    batch: &mut Batch,
    staging: &mut IoBuf,
    mut into: Collected<'_>,
) -> Result<(), LogDiskError> {
    if batch.victims.is_empty() {
        return Ok(());
    }
    let b = to.geo.block_size as usize;
    let staged = batch.staged as usize * b;
    staging.grow(staged);
    let start = std::time::Instant::now();
    reads::read_runs(
        &**to.dev,
        to.geo,
        options,
        &batch.runs,
        &mut staging[..staged],
    )?;
    let m = &mut core.metrics;
    m.cleaner_read_ns += u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
    m.cleaner_read_ios += batch.runs.len() as u64;
    m.cleaner_read_bytes += staged as u64;
    let staging: &[u8] = staging;
    reads::collect(
        &core.table,
        &mut core.metrics,
        to.geo,
        batch,
        |_, run, k| {
            let from = (run.staged + k) as usize * b;
            &staging[from..from + b]
        },
        &mut into,
    )?;
    batch.clear();
    Ok(())
}

/// Age sort: the survivors of a pass written oldest first.
fn age_sort(
    policy: CleanerPolicy,
    geo: &Geometry,
    entries: &mut [SummaryEntry],
    out: &mut [u8],
    ages: &[u64],
) {
    if policy != CleanerPolicy::AgeSort || entries.len() <= 1 {
        return;
    }
    strict_assert_eq!(entries.len(), ages.len(), "an age per entry");
    let b = geo.block_size as usize;
    assert!(
        out.len() >= (entries.len() + 1) * b,
        "age sort past the pass's buffer"
    );
    let mut order: Vec<usize> = (0..entries.len()).collect();
    order.sort_by_key(|&i| ages[i]);
    let sorted_entries: Vec<_> = order.iter().map(|&i| entries[i]).collect();
    let mut sorted = vec![0u8; (entries.len() + 1) * b];
    for (to, &from) in order.iter().enumerate() {
        sorted[(to + 1) * b..(to + 2) * b].copy_from_slice(&out[(from + 1) * b..(from + 2) * b]);
    }
    out[b..(entries.len() + 1) * b].copy_from_slice(&sorted[b..]);
    entries.copy_from_slice(&sorted_entries);
}
