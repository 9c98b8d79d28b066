//! Batched reads through `io_uring`: many independent reads of one file in
//! one submission, so the device has them all at once (one queue-depth burst
//! instead of one read per thread) and the caller pays one system call per
//! batch instead of a `pread` and a thread hand-over per read.
//! [`super::FileDevice::read_batch`] uses it.
//!
//! A small pool of rings is kept per device (a ring's set-up costs a system
//! call and two mappings; a batch borrows one and gives it back). Where the
//! kernel refuses `io_uring` (too old, or forbidden by a seccomp profile, as
//! in many containers) the first attempt says so and every later batch is
//! refused at once, and the caller reads the usual way.

#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use io_uring::{IoUring, opcode, types};

/// Submission queue entries per ring: reads in flight at once per batch.
const ENTRIES: u32 = 128;

/// Rings kept for reuse (more are made while several batches run at once,
/// and dropped on return beyond this).
const POOL: usize = 4;

/// A pool of rings for one file.
#[derive(Default)]
pub(crate) struct Rings {
    pool: Mutex<Vec<IoUring>>,
    /// The kernel refused `io_uring`: no batches on this device.
    refused: AtomicBool,
}

/// Why a batch failed: the index of the read that failed, and the error.
pub(crate) struct BatchError {
    pub index: usize,
    pub error: io::Error,
}

impl Rings {
    /// A ring to use, or `None` where the kernel refuses `io_uring`.
    fn take(&self) -> Option<IoUring> {
        if self.refused.load(Ordering::Relaxed) {
            return None;
        }
        if let Some(ring) = self
            .pool
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop()
        {
            return Some(ring);
        }
        if let Ok(ring) = IoUring::new(ENTRIES) {
            Some(ring)
        } else {
            // ENOSYS (no io_uring), EPERM (seccomp, or the
            // kernel.io_uring_disabled sysctl), ENOMEM (locked-memory
            // limit): the same every time here.
            self.refused.store(true, Ordering::Relaxed);
            None
        }
    }

    fn give(&self, ring: IoUring) {
        let mut pool = self.pool.lock().unwrap_or_else(PoisonError::into_inner);
        if pool.len() < POOL {
            pool.push(ring);
        }
    }

    /// Whether batches can run here (makes the first ring if none is kept).
    pub(crate) fn available(&self) -> bool {
        match self.take() {
            Some(ring) => {
                self.give(ring);
                true
            }
            None => false,
        }
    }

    /// Reads `buf` from `offset` for each `(offset, buf)` of `reads`, all
    /// submitted together (up to [`ENTRIES`] in flight). `Ok(false)` where
    /// the kernel refuses `io_uring` (nothing was read). A read that comes
    /// back short (the kernel may split one) is finished with `finish(offset,
    /// rest)` — the caller's positional read of the rest — after every
    /// submitted read is done. Every read the kernel accepted is complete
    /// when this returns, error or not: the buffers are never written after.
    pub(crate) fn read_batch(
        &self,
        fd: BorrowedFd<'_>,
        reads: &mut [(u64, &mut [u8])],
        mut finish: impl FnMut(u64, &mut [u8]) -> io::Result<()>,
    ) -> Result<bool, BatchError> {
        if reads.is_empty() {
            return Ok(self.available());
        }
        let Some(mut ring) = self.take() else {
            return Ok(false);
        };
        let mut failed: Option<BatchError> = None;
        // (index, bytes done) of reads that came back short.
        let mut short: Vec<(usize, usize)> = Vec::new();
        let mut next = 0usize;
        // Entries pushed and not yet taken by the kernel; taken and not yet
        // complete.
        let mut queued = 0usize;
        let mut in_flight = 0usize;
        let mut broken = false;
        while in_flight > 0 || (failed.is_none() && !broken && (next < reads.len() || queued > 0)) {
            let submitting = failed.is_none() && !broken;
            if submitting {
                let mut sq = ring.submission();
                while next < reads.len() && queued + in_flight < ENTRIES as usize {
                    let (offset, buf) = &mut reads[next];
                    let len = u32::try_from(buf.len()).unwrap_or(u32::MAX);
                    let entry = opcode::Read::new(types::Fd(fd.as_raw_fd()), buf.as_mut_ptr(), len)
                        .offset(*offset)
                        .build()
                        .user_data(next as u64);
                    // SAFETY: the entry points into `reads[next]`, which the
                    // caller lends us (exclusively) for this call. This call
                    // does not return while the kernel holds an entry: the
                    // loop runs while any taken entry is incomplete, and one
                    // pushed but never taken is dropped with its ring below,
                    // never submitted later.
                    if unsafe { sq.push(&entry) }.is_err() {
                        break;
                    }
                    next += 1;
                    queued += 1;
                }
            }
            if submitting {
                match ring.submit_and_wait(1) {
                    Ok(taken) => {
                        queued -= taken;
                        in_flight += taken;
                    }
                    Err(e)
                        if matches!(
                            e.raw_os_error(),
                            Some(libc::EINTR | libc::EAGAIN | libc::EBUSY)
                        ) => {}
                    Err(e) => {
                        broken = true;
                        if failed.is_none() {
                            failed = Some(BatchError {
                                index: next.saturating_sub(1),
                                error: e,
                            });
                        }
                    }
                }
            } else {
                // No more submissions: the reads the kernel took complete on
                // their own (their completions are posted without us
                // entering the kernel); wait for them by polling.
                std::thread::sleep(Duration::from_micros(50));
            }
            for cqe in ring.completion() {
                in_flight -= 1;
                let i = cqe.user_data() as usize;
                let res = cqe.result();
                if res < 0 {
                    if failed.is_none() {
                        failed = Some(BatchError {
                            index: i,
                            error: io::Error::from_raw_os_error(-res),
                        });
                    }
                } else if (res as usize) < reads[i].1.len() {
                    short.push((i, res as usize));
                }
            }
        }
        if broken || queued > 0 {
            // Entries pushed but never taken must not run later: this ring
            // goes (with nothing of ours in flight).
            drop(ring);
        } else {
            self.give(ring);
        }
        if let Some(e) = failed {
            return Err(e);
        }
        for (index, done) in short {
            let (offset, buf) = &mut reads[index];
            finish(*offset + done as u64, &mut buf[done..])
                .map_err(|error| BatchError { index, error })?;
        }
        Ok(true)
    }
}
