//! The cleaner's reads: planned runs of live blocks ([`Batch`]), read in
//! one batch or on threads ([`read_runs`]), the background pass's reader
//! threads ([`Readers`]), and the collection of what is still live
//! ([`collect`]), each block checked against its CRC32C.

use std::sync::{Arc, PoisonError};

use crate::device::{Device, DeviceError, IoBuf};
use crate::logdisk::error::LogDiskError;
use crate::logdisk::format::{self, Geometry, SummaryEntry};
use crate::logdisk::metrics::Metrics;
use crate::logdisk::options::Options;
use crate::logdisk::table::{Table, block_of};
use crate::logdisk::writer::WriteQueue;

/// One device read the cleaner plans: blocks `slot..slot + len` of segment
/// `segment`, into the staging buffer from block `staged`.
#[derive(Clone, Copy, Debug)]
pub(in crate::logdisk) struct Run {
    pub segment: u32,
    pub slot: u32,
    pub len: u32,
    pub staged: u32,
}

/// A background read: run index, buffer, bytes to read, device offset.
pub(in crate::logdisk) type ReadJob = (usize, IoBuf, usize, u64);

/// A finished one: run index, the buffer back, and how the read went.
pub(in crate::logdisk) type ReadDone = (usize, IoBuf, Result<(), DeviceError>);

/// What a reader thread takes: one read, or a pass's reads as one batch.
enum ReadWork {
    One(ReadJob),
    Batch(Vec<ReadJob>),
}

/// The background cleaner's readers. On a device that batches reads
/// ([`Device::read_batch`]: a file, through `io_uring`), one thread issues
/// each pass's reads as one batch, all in flight at once; otherwise
/// [`Options::cleaner_read_threads`] threads each take the next read from a
/// shared queue.
pub(in crate::logdisk) struct Readers {
    jobs: Option<std::sync::mpsc::Sender<ReadWork>>,
    pub done: std::sync::Mutex<std::sync::mpsc::Receiver<ReadDone>>,
    handles: Vec<std::thread::JoinHandle<()>>,
    /// One thread, a batch per pass.
    batched: bool,
}

impl Readers {
    pub fn start<D: Device + 'static>(
        dev: &Arc<D>,
        threads: u32,
        batch: bool,
    ) -> Result<Self, LogDiskError> {
        let batched = batch && dev.read_batch(&mut []).unwrap_or(false);
        let (jobs, job_rx) = std::sync::mpsc::channel::<ReadWork>();
        let job_rx = Arc::new(std::sync::Mutex::new(job_rx));
        let (done_tx, done) = std::sync::mpsc::channel::<ReadDone>();
        let mut handles = Vec::new();
        for i in 0..if batched { 1 } else { threads.max(1) } {
            let dev = Arc::clone(dev);
            let job_rx = Arc::clone(&job_rx);
            let done_tx = done_tx.clone();
            let handle = std::thread::Builder::new()
                .name(format!("logdisk-clean-{i}"))
                .spawn(move || {
                    loop {
                        let work = job_rx.lock().unwrap_or_else(PoisonError::into_inner).recv();
                        let sent = match work {
                            Err(_) => return,
                            Ok(ReadWork::One(job)) => Self::read_one(&*dev, job, &done_tx),
                            Ok(ReadWork::Batch(jobs)) => Self::read(&*dev, jobs, &done_tx),
                        };
                        if sent.is_err() {
                            return;
                        }
                    }
                })
                .map_err(|e| LogDiskError::Failed(format!("starting a cleaner reader: {e}")))?;
            handles.push(handle);
        }
        Ok(Self {
            jobs: Some(jobs),
            done: std::sync::Mutex::new(done),
            handles,
            batched,
        })
    }

    /// Does `jobs` as one batch (each in turn should the device refuse the
    /// batch after all) and reports each; `Err` when nobody takes reports
    /// any more.
    fn read<D: Device + ?Sized>(
        dev: &D,
        mut jobs: Vec<ReadJob>,
        done: &std::sync::mpsc::Sender<ReadDone>,
    ) -> Result<(), ()> {
        strict_assert!(
            jobs.iter().all(|(_, buf, len, _)| *len <= buf.len()),
            "a read past its buffer"
        );
        let mut reads: Vec<(u64, &mut [u8])> = jobs
            .iter_mut()
            .map(|(_, buf, len, offset)| (*offset, &mut buf[..*len]))
            .collect();
        let batch = dev.read_batch(&mut reads);
        drop(reads);
        if let Ok(false) = batch {
            for job in jobs {
                Self::read_one(dev, job, done)?;
            }
            return Ok(());
        }
        // The pass fails on its first error; which read failed is in the
        // error, and no buffer of a failed pass is used: the error goes with
        // the first report.
        let mut error = batch.err();
        for (run, buf, _, _) in jobs {
            let result = error.take().map_or(Ok(()), Err);
            done.send((run, buf, result)).map_err(|_| ())?;
        }
        Ok(())
    }

    /// Does one read and reports it; `Err` when nobody takes reports any
    /// more.
    fn read_one<D: Device + ?Sized>(
        dev: &D,
        (run, mut buf, len, offset): ReadJob,
        done: &std::sync::mpsc::Sender<ReadDone>,
    ) -> Result<(), ()> {
        let result = dev.read_at(&mut buf[..len], offset);
        done.send((run, buf, result)).map_err(|_| ())
    }

    /// Sends a pass's reads: one batch, or one job per read for the threads
    /// to share. Returns how many were sent.
    pub fn send(&self, jobs: Vec<ReadJob>) -> usize {
        let Some(tx) = self.jobs.as_ref() else {
            return 0;
        };
        if self.batched {
            let n = jobs.len();
            return if tx.send(ReadWork::Batch(jobs)).is_ok() {
                n
            } else {
                0
            };
        }
        let mut sent = 0;
        for job in jobs {
            if tx.send(ReadWork::One(job)).is_err() {
                break;
            }
            sent += 1;
        }
        sent
    }

    /// A reader thread is gone (it panicked): the disk has failed.
    pub fn stopped(queue: &mut WriteQueue) -> LogDiskError {
        let why = "a cleaner reader stopped".to_string();
        queue.failed = Some(why.clone());
        LogDiskError::Failed(why)
    }

    /// Lets the readers finish what they hold and waits for them.
    pub fn stop(mut self) {
        drop(self.jobs.take());
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
    }
}

/// Victims planned and not yet collected, with their reads.
#[derive(Default)]
pub(in crate::logdisk) struct Batch {
    /// (victim, its runs `first..end` in `runs`).
    pub victims: Vec<(u32, usize, usize)>,
    pub runs: Vec<Run>,
    /// Blocks staged so far.
    pub staged: u32,
}

impl Batch {
    pub fn push_run(&mut self, segment: u32, start: u32, end: u32) {
        assert!(start < end, "an empty read of segment {segment}");
        self.runs.push(Run {
            segment,
            slot: start,
            len: end - start,
            staged: self.staged,
        });
        self.staged += end - start;
    }

    pub fn clear(&mut self) {
        self.victims.clear();
        self.runs.clear();
        self.staged = 0;
    }
}

/// Reads every run into `staging` (run `r` at block `r.staged`): as one
/// batch where the device batches reads ([`Options::batch_reads`]), else
/// on up to [`Options::cleaner_read_threads`] threads.
pub(in crate::logdisk) fn read_runs<D: Device + ?Sized>(
    dev: &D,
    geo: &Geometry,
    options: &Options,
    runs: &[Run],
    staging: &mut [u8],
) -> Result<(), LogDiskError> {
    let b = geo.block_size as usize;
    // The runs are staged back to back and fill the staging area.
    strict_assert_eq!(
        runs.iter().map(|r| r.len as usize * b).sum::<usize>(),
        staging.len(),
        "the staging area and the runs disagree"
    );
    let mut jobs = Vec::with_capacity(runs.len());
    let mut rest = staging;
    for r in runs {
        let (head, tail) = rest.split_at_mut(r.len as usize * b);
        jobs.push((block_of(geo, r.segment, r.slot) * b as u64, head));
        rest = tail;
    }
    if options.batch_reads && dev.read_batch(&mut jobs)? {
        return Ok(());
    }
    let threads = (options.cleaner_read_threads.max(1) as usize).min(jobs.len());
    if threads <= 1 {
        for (offset, buf) in jobs {
            dev.read_at(buf, offset)?;
        }
        return Ok(());
    }
    let queue = std::sync::Mutex::new(jobs.into_iter());
    let work = || -> Result<(), DeviceError> {
        loop {
            let job = queue.lock().unwrap_or_else(PoisonError::into_inner).next();
            let Some((offset, buf)) = job else {
                return Ok(());
            };
            dev.read_at(buf, offset)?;
        }
    };
    std::thread::scope(|s| {
        let helpers: Vec<_> = (1..threads).map(|_| s.spawn(work)).collect();
        let mine = work();
        let mut result = mine;
        for h in helpers {
            let theirs = h
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            if result.is_ok() {
                result = theirs;
            }
        }
        result
    })?;
    Ok(())
}

/// What a pass collects: entries and data (at `(i + 1)·B` of `out`) of the
/// victims' live blocks, and their write sequences (for age sort).
pub(in crate::logdisk) struct Collected<'a> {
    pub out: &'a mut [u8],
    pub entries: &'a mut Vec<SummaryEntry>,
    pub ages: &'a mut Vec<u64>,
}

/// Appends the batch's victims' live blocks, in victim and slot order, to
/// `into`; `data(i, run, k)` is block `k` of run `i` as read. Only blocks
/// live now are taken (a block that died since its read was planned is
/// not copied), each checked against the CRC32C in the table; every live
/// block of a victim must be found.
pub(in crate::logdisk) fn collect<'d>(
    table: &Table,
    metrics: &mut Metrics,
    geo: &Geometry,
    batch: &Batch,
    data: impl Fn(usize, &Run, u32) -> &'d [u8],
    into: &mut Collected<'_>,
) -> Result<(), LogDiskError> {
    let b = geo.block_size as usize;
    for &(v, first, end) in &batch.victims {
        metrics.cleaner_segment_reads += 1;
        metrics.lifetime_blocks += (metrics.user_blocks_written + metrics.cleaner_blocks_written)
            .saturating_sub(table.opened_at[v as usize]);
        let before = into.entries.len();
        for (i, run) in batch.runs.iter().enumerate().take(end).skip(first) {
            strict_assert_eq!(run.segment, v, "a victim's runs are its own");
            for k in 0..run.len {
                let slot = run.slot + k;
                if !table.is_live(v, slot) {
                    continue;
                }
                let physical = block_of(geo, v, slot);
                let logical = table.logical_at(physical);
                let m = table.map[logical as usize];
                let data = data(i, run, k);
                if format::crc32c(data) != m.crc {
                    return Err(LogDiskError::Corrupt(format!(
                        "cleaning segment {v}: logical block {logical} at physical block {physical} fails its checksum"
                    )));
                }
                let to = into.entries.len() + 1;
                assert!(
                    (to + 1) * b <= into.out.len(),
                    "a pass collects more than its buffer holds"
                );
                into.out[to * b..(to + 1) * b].copy_from_slice(data);
                into.entries.push(SummaryEntry {
                    logical,
                    crc: m.crc,
                });
                into.ages.push(m.sequence);
            }
        }
        let moved = into.entries.len() - before;
        if moved != table.live[v as usize] as usize {
            return Err(LogDiskError::Corrupt(format!(
                "segment {v}: {} live blocks in the table, {moved} found",
                table.live[v as usize]
            )));
        }
    }
    Ok(())
}
