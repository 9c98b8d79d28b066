//! The background segment writer: its threads, jobs and reports
//! ([`Writer`]), and the queue of what it was given ([`WriteQueue`]), which
//! takes its reports back in the order sent and hands each up as a
//! [`Completed`] value for the log disk to apply.

use std::collections::VecDeque;
use std::sync::{Arc, PoisonError};

use super::error::LogDiskError;
use super::nv::NvCache;
use crate::device::{Device, DeviceError, IoBuf};
use crate::limits::WRITE_DEPTH;

/// What the background writer was given and has not reported yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Queued {
    /// A destage's segment write into this segment.
    Segment(u32),
    /// A write into this segment whose blocks are read from
    /// [`WriteQueue::moving`] until it is done: a background cleaner pass's,
    /// or a volatile-mode segment buffer's.
    Shared(u32),
    /// A checkpoint write (its buffer comes back to
    /// [`WriteQueue::checkpoint_buf`]).
    Checkpoint,
    /// A device flush: it retires the first `pending` pending segments and
    /// `awaiting` destaged NV slots.
    Flush { pending: usize, awaiting: usize },
}

/// A shared background write not yet done (a cleaner pass's, or a
/// volatile-mode segment buffer's): its `count` blocks, the first at
/// absolute block `first`, are at byte `at` of `buf`, and reads of them are
/// served from there (the map already points at their new place).
pub(super) struct Moving {
    pub first: u64,
    pub count: u64,
    pub at: usize,
    pub buf: Arc<IoBuf>,
}

/// A job the writer reported done, for the log disk to apply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Completed {
    /// A destage's segment write; `writes_done` such writes are done now
    /// (NV slots held for them may be freed).
    Segment { writes_done: u64 },
    /// A shared write: its blocks are read from the device again.
    Shared,
    /// A checkpoint write.
    Checkpoint,
    /// A device flush that made the first `pending` pending segments and
    /// `awaiting` destaged NV slots durable (only when it succeeded).
    Flush { pending: usize, awaiting: usize },
}

/// A completed job and how it went.
pub(super) type Report = (Completed, Result<(), DeviceError>);

/// The writer and what it was given, in order, until it reports it done: at
/// most [`WRITE_DEPTH`] segment writes, and at most one flush that retires
/// anything. A segment being written is never a victim.
#[derive(Default)]
pub(super) struct WriteQueue {
    /// Started at its first job.
    writer: Option<Writer>,
    pub queued: VecDeque<Queued>,
    /// Segment writes queued since open, and those done (in order).
    pub writes_queued: u64,
    pub writes_done: u64,
    /// Segment write buffers not lent to the writer.
    pub bufs: Vec<IoBuf>,
    /// Background shared writes queued, oldest first.
    pub moving: VecDeque<Moving>,
    /// Spare fill lists (the NV slots a destage's write copies).
    pub fills: Vec<Vec<(u32, u32)>>,
    /// Why a background write failed: every later device operation fails.
    pub failed: Option<String>,
    /// The checkpoint encoding buffer (a slot's size, reused; lent to the
    /// writer with a background checkpoint).
    pub checkpoint_buf: IoBuf,
}

impl WriteQueue {
    /// Whether the writer is running.
    pub fn started(&self) -> bool {
        self.writer.is_some()
    }

    /// Sends `job` (starting the writer at its first one, with `threads`
    /// threads over `dev`, copying fills out of `nv`) and records it as
    /// `queued`.
    pub fn send<D: Device + 'static>(
        &mut self,
        job: Job,
        queued: Queued,
        start: (&Arc<D>, Option<&Arc<NvCache>>, usize, u32),
    ) -> Result<(), LogDiskError> {
        if self.writer.is_none() {
            let (dev, nv, block_size, threads) = start;
            self.writer = Some(Writer::start(dev, nv, block_size, threads)?);
        }
        let sent = self
            .writer
            .as_ref()
            .is_some_and(|w| w.jobs.send(job).is_ok());
        if !sent {
            return Err(self.stopped());
        }
        if matches!(queued, Queued::Segment(_)) {
            self.writes_queued += 1;
        }
        if let Queued::Flush { pending, awaiting } = queued
            && (pending > 0 || awaiting > 0)
        {
            // A flush's counts index the lists only the flush before it
            // shrinks: one retiring flush in the queue at a time.
            assert!(!self.flush_queued(), "a second retiring flush queued");
        }
        self.queued.push_back(queued);
        strict_assert!(
            self.segment_writes_queued() <= WRITE_DEPTH,
            "deeper than WRITE_DEPTH"
        );
        Ok(())
    }

    /// Segment writes (destages and shared) queued.
    pub fn segment_writes_queued(&self) -> usize {
        self.queued
            .iter()
            .filter(|q| matches!(q, Queued::Segment(_) | Queued::Shared(_)))
            .count()
    }

    /// Whether a flush is queued.
    pub fn flush_queued(&self) -> bool {
        self.queued
            .iter()
            .any(|q| matches!(q, Queued::Flush { .. }))
    }

    /// Destaged NV slots the queued flush already covers.
    pub fn awaiting_covered(&self) -> usize {
        self.queued
            .iter()
            .find_map(|q| match *q {
                Queued::Flush { awaiting, .. } => Some(awaiting),
                _ => None,
            })
            .unwrap_or(0)
    }

    /// The segments of queued writes (at most [`WRITE_DEPTH`] of them;
    /// `u32::MAX` pads): never victims, their blocks are not all on the
    /// device yet.
    pub fn busy_segments(&self) -> [u32; WRITE_DEPTH] {
        let mut busy = [u32::MAX; WRITE_DEPTH];
        let segments = self.queued.iter().filter_map(|q| match *q {
            Queued::Segment(s) | Queued::Shared(s) => Some(s),
            _ => None,
        });
        for (slot, s) in busy.iter_mut().zip(segments) {
            *slot = s;
        }
        busy
    }

    /// `Err` if a background write failed before.
    pub fn check(&self) -> Result<(), LogDiskError> {
        match &self.failed {
            Some(why) => Err(LogDiskError::Failed(why.clone())),
            None => Ok(()),
        }
    }

    /// Waits for the oldest job queued and takes in what it did: a segment
    /// write's buffers back, a checkpoint's buffer back. `None` if nothing
    /// is queued. A failed job fails the disk: its error is returned with
    /// the completion, and every later operation fails.
    pub fn reap_one(&mut self) -> Result<Option<Report>, LogDiskError> {
        let Some(queued) = self.queued.pop_front() else {
            return Ok(None);
        };
        let next = self.writer.as_ref().and_then(Writer::next);
        let done = match (queued, next) {
            (
                Queued::Segment(_),
                Some(Done::Write {
                    buf,
                    mut fill,
                    result,
                }),
            ) => {
                self.bufs.push(buf);
                fill.clear();
                self.fills.push(fill);
                self.writes_done += 1;
                strict_assert!(self.writes_done <= self.writes_queued);
                (
                    Completed::Segment {
                        writes_done: self.writes_done,
                    },
                    result,
                )
            }
            (Queued::Shared(_), Some(Done::Shared(buf, result))) => {
                // Reads of its blocks go to the device again.
                self.moving.pop_front();
                if let Ok(buf) = Arc::try_unwrap(buf) {
                    self.bufs.push(buf);
                }
                (Completed::Shared, result)
            }
            (Queued::Checkpoint, Some(Done::Write { buf, result, fill })) => {
                strict_assert!(
                    fill.is_empty(),
                    "a checkpoint copies nothing from the NV cache"
                );
                self.checkpoint_buf = buf;
                (Completed::Checkpoint, result)
            }
            (Queued::Flush { pending, awaiting }, Some(Done::Flush(result))) => {
                // One retiring flush in the queue at a time (a checkpoint's
                // own flush, which retires nothing, may follow it).
                strict_assert!(
                    pending + awaiting == 0
                        || !self.queued.iter().any(|q| matches!(
                            *q,
                            Queued::Flush { pending, awaiting } if pending + awaiting > 0
                        )),
                    "two retiring flushes queued"
                );
                (Completed::Flush { pending, awaiting }, result)
            }
            _ => return Err(self.stopped()),
        };
        if let Err(e) = &done.1 {
            self.failed = Some(e.to_string());
        }
        Ok(Some(done))
    }

    /// The writer thread is gone (it panicked): the disk has failed.
    pub fn stopped(&mut self) -> LogDiskError {
        let why = "the background writer stopped".to_string();
        self.failed = Some(why.clone());
        LogDiskError::Failed(why)
    }

    /// Stops the writer after the jobs it holds, so nothing touches the
    /// device after the disk is gone.
    pub fn stop(&mut self) {
        if let Some(writer) = self.writer.take() {
            writer.stop();
        }
    }
}

/// A job of the background writer: a write of `buf[from..to]` at device
/// offset `offset`, after copying NV slot `slot` into block `i` of `buf` for
/// each `(i, slot)` of `fill`; or a device flush.
pub(super) enum Job {
    Write {
        buf: IoBuf,
        from: usize,
        to: usize,
        offset: u64,
        fill: Vec<(u32, u32)>,
        /// Start only when every job before it is done (a checkpoint: after
        /// the flush that makes what it describes durable).
        after_earlier: bool,
    },
    /// A write of `buf[from..to]` that readers share until it is done.
    WriteShared {
        buf: Arc<IoBuf>,
        from: usize,
        to: usize,
        offset: u64,
    },
    Flush,
}

/// A finished one: a write's buffers back and how it went, or how a flush
/// went.
pub(super) enum Done {
    Write {
        buf: IoBuf,
        fill: Vec<(u32, u32)>,
        result: Result<(), DeviceError>,
    },
    Shared(Arc<IoBuf>, Result<(), DeviceError>),
    Flush(Result<(), DeviceError>),
}

/// The background segment writer: `threads` threads taking jobs in the
/// order queued. Writes run side by side (a disk takes two segment writes
/// at once faster than one after the other, and one thread's copy out of
/// the NV cache overlaps the other's write). A flush starts when every job
/// before it is done, so it covers them (issued by the thread that finished
/// the last of them: no thread sits idle on it); a checkpoint write starts when
/// every job before it is done (the flush queued before it included), so
/// it is never durable before what it describes. Jobs are numbered as sent;
/// [`WriteQueue::reap_one`] takes their reports in that order, whatever order
/// they finish in.
pub(super) struct Writer {
    pub(super) jobs: std::sync::mpsc::Sender<Job>,
    pub(super) done: std::sync::Mutex<WriterReports>,
    pub(super) handles: Vec<std::thread::JoinHandle<()>>,
}

/// Reports from the writer threads, and those that arrived before their turn.
pub(super) struct WriterReports {
    pub(super) rx: std::sync::mpsc::Receiver<(u64, Done)>,
    early: Vec<(u64, Done)>,
    /// The number of the next job to report.
    next: u64,
}

/// Which jobs are done: every job below `prefix`, and those in `beyond`;
/// and the flushes taken before every job ahead of them was done.
#[derive(Default)]
struct Finished {
    prefix: u64,
    beyond: Vec<u64>,
    /// A flush waiting for the jobs before it. The thread that finishes
    /// the last of them issues it, so no thread sits idle on it.
    deferred: Vec<u64>,
}

impl Finished {
    /// Records job `id` done; returns a deferred flush it made ready (every
    /// job before that flush is now done).
    fn finish(&mut self, id: u64) -> Option<u64> {
        if id == self.prefix {
            self.prefix += 1;
            while let Some(i) = self.beyond.iter().position(|&x| x == self.prefix) {
                self.beyond.swap_remove(i);
                self.prefix += 1;
            }
        } else {
            strict_assert!(id > self.prefix, "job {id} finished twice");
            self.beyond.push(id);
        }
        strict_assert!(
            self.beyond.iter().all(|&x| x > self.prefix),
            "a finished job below the prefix"
        );
        let ready = self.deferred.iter().position(|&x| x == self.prefix)?;
        Some(self.deferred.swap_remove(ready))
    }
}

impl Writer {
    pub(super) fn start<D: Device + 'static>(
        dev: &Arc<D>,
        nv: Option<&Arc<NvCache>>,
        block_size: usize,
        threads: u32,
    ) -> Result<Self, LogDiskError> {
        let (jobs, job_rx) = std::sync::mpsc::channel::<Job>();
        let (done_tx, rx) = std::sync::mpsc::channel::<(u64, Done)>();
        // The receiver and the next job's number, taken together.
        let intake = Arc::new(std::sync::Mutex::new((job_rx, 0u64)));
        let finished = Arc::new((
            std::sync::Mutex::new(Finished::default()),
            std::sync::Condvar::new(),
        ));
        let mut handles = Vec::new();
        for t in 0..threads.max(1) {
            let (dev, nv, intake, finished, done_tx) = (
                Arc::clone(dev),
                nv.cloned(),
                Arc::clone(&intake),
                Arc::clone(&finished),
                done_tx.clone(),
            );
            let handle = std::thread::Builder::new()
                .name(format!("logdisk-destage-{t}"))
                .spawn(move || {
                    writer_thread(
                        &*dev,
                        nv.as_deref(),
                        block_size,
                        &intake,
                        &finished,
                        &done_tx,
                    );
                })
                .map_err(|e| {
                    LogDiskError::Failed(format!("starting the background writer: {e}"))
                })?;
            handles.push(handle);
        }
        Ok(Self {
            jobs,
            done: std::sync::Mutex::new(WriterReports {
                rx,
                early: Vec::new(),
                next: 0,
            }),
            handles,
        })
    }

    /// The next job's report, in the order sent (waiting for it); `None` if
    /// the writer is gone.
    fn next(&self) -> Option<Done> {
        let mut r = self.done.lock().unwrap_or_else(PoisonError::into_inner);
        let want = r.next;
        let done = match r.early.iter().position(|&(id, _)| id == want) {
            Some(i) => r.early.swap_remove(i).1,
            None => loop {
                let (id, done) = r.rx.recv().ok()?;
                if id == want {
                    break done;
                }
                r.early.push((id, done));
            },
        };
        r.next += 1;
        strict_assert!(
            r.early.iter().all(|&(id, _)| id >= r.next),
            "a report older than the next"
        );
        Some(done)
    }

    /// Lets the threads finish their jobs and waits for them.
    fn stop(self) {
        // The writer threads finish their jobs, find no more, and stop.
        drop(self.jobs);
        for handle in self.handles {
            let _ = handle.join();
        }
    }
}

/// One writer thread: takes the next job, does it, reports it. A flush
/// covers every job before it: if one of those is still running, the flush
/// is left to the thread that finishes the last of them, and this thread
/// takes the next job. A write marked `after_earlier` (a checkpoint) waits
/// until every job before it is done, flushes included; nothing waits for
/// a flush otherwise.
fn writer_thread<D: Device + ?Sized>(
    dev: &D,
    nv: Option<&NvCache>,
    b: usize,
    intake: &std::sync::Mutex<(std::sync::mpsc::Receiver<Job>, u64)>,
    finished: &(std::sync::Mutex<Finished>, std::sync::Condvar),
    done_tx: &std::sync::mpsc::Sender<(u64, Done)>,
) -> Option<()> {
    let lock = || finished.0.lock().unwrap_or_else(PoisonError::into_inner);
    // Records job `id` done; returns a deferred flush it made ready (every
    // job before that flush is now done).
    let finish = |id: u64| -> Option<u64> {
        let ready = lock().finish(id);
        finished.1.notify_all();
        ready
    };
    // Issues flush `id` (every job before it is done) and any flush that
    // made ready in turn.
    let flush = |mut id: u64| -> Option<()> {
        loop {
            let result = dev.flush();
            let next = finish(id);
            done_tx.send((id, Done::Flush(result))).ok()?;
            match next {
                Some(next) => id = next,
                None => return Some(()),
            }
        }
    };
    loop {
        let mut guard = intake.lock().unwrap_or_else(PoisonError::into_inner);
        let Ok(job) = guard.0.recv() else {
            return Some(());
        };
        let id = guard.1;
        guard.1 += 1;
        drop(guard);
        let done = match job {
            Job::Write {
                mut buf,
                from,
                to,
                offset,
                fill,
                after_earlier,
            } => {
                if after_earlier {
                    let mut f = lock();
                    while f.prefix < id {
                        f = finished.1.wait(f).unwrap_or_else(PoisonError::into_inner);
                    }
                }
                assert!(
                    from < to && to <= buf.len(),
                    "write {from}..{to} of a {}-byte buffer",
                    buf.len()
                );
                strict_assert!(
                    fill.iter().all(|&(i, _)| (i as usize + 1) * b <= to),
                    "a fill past the write"
                );
                let copied = match nv {
                    Some(nv) => fill.iter().try_for_each(|&(i, slot)| {
                        let i = i as usize;
                        nv.read(slot, &mut buf[i * b..(i + 1) * b])
                    }),
                    // Fills come from the NV cache only.
                    None => Ok(()),
                };
                let result = copied.and_then(|()| dev.write_at(&buf[from..to], offset));
                Done::Write { buf, fill, result }
            }
            Job::WriteShared {
                buf,
                from,
                to,
                offset,
            } => {
                assert!(
                    from < to && to <= buf.len(),
                    "write {from}..{to} of a {}-byte buffer",
                    buf.len()
                );
                let result = dev.write_at(&buf[from..to], offset);
                Done::Shared(buf, result)
            }
            Job::Flush => {
                let mut f = lock();
                strict_assert!(!f.deferred.contains(&id), "flush {id} deferred twice");
                if f.prefix < id {
                    // Left to the thread that finishes the last job before it.
                    f.deferred.push(id);
                    continue;
                }
                drop(f);
                flush(id)?;
                continue;
            }
        };
        let ready = finish(id);
        done_tx.send((id, done)).ok()?;
        if let Some(flush_id) = ready {
            flush(flush_id)?;
        }
    }
}
