//! Outages of the object store: bounded memory, back-pressure with a
//! timeout, uploads retried until the store answers, and one log line for
//! each turn of an outage.
//!
//! **The bound.** Sealed segments stay in DRAM until they are durable in
//! the store; at most `upload_queue` bytes of them (headers included): a
//! writer that must seal a full open segment when it does not fit waits
//! for uploads to make room, and so does a flush that seals. With the open
//! segment (`object_size`), that is all the DRAM writes take. With a local
//! write log, a flush also waits when the log's ring is full of batches
//! whose segments are not durable (`journal.rs`); the spec sizes the log
//! so that the upload queue fills first: `local_log_size` at least
//! `2 × (upload_queue + object_size)` and its superblock, as a flush of one
//! block takes two blocks of the ring (a header and the data).
//!
//! **The timeout.** A writer or flush waits at most `stall_timeout` for
//! room or for its segments, then fails (EIO through NBD) with an error
//! naming the outage. Once one has waited that long with no segment
//! becoming durable, the next ones that must wait give up after
//! [`LATE_WAIT`], until an upload completes: during a long outage requests
//! fail fast instead of each hanging for the whole timeout (and flushes
//! queued behind one another on the local write log do not add up their
//! timeouts). `None` waits without limit.
//!
//! **Uploads are not given up.** A retryable failure (or `Retrying`'s
//! deadline, `retry_for`) does not fail the disk: the uploader pauses
//! (doubling to [`BACKOFF_MAX`]) and tries again, until the store answers
//! or the disk stops. Nothing is lost by waiting: with a local write log,
//! every flushed write is in it, and without one a flush returns only once
//! its segments are in the store; what waits in DRAM is bounded. Failing
//! the disk instead would turn a store that is down for a few minutes into
//! a volume that takes no writes until a restart. Only a failure the store
//! says is final (bad credentials, no such bucket, a lost lease) fails the
//! disk, as before.
//!
//! **What the server says**, once each per outage: when an upload fails
//! (after `Retrying` gave up on it; `Retrying` itself says when the store
//! starts failing and when it answers again), when writers have waited
//! [`REPORT_AFTER`] with no upload completing, when they start failing after
//! `stall_timeout`, and when uploads complete again.

use std::sync::{MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use cairn_objects::ObjectError;

use super::format::header_len;
use super::state::{Sealed, State};
use super::{ObjectDisk, Shared, Wait, device_error};
use crate::device::{Device, DeviceError};

/// Writers waiting this long with no segment becoming durable are reported
/// (shorter waits are ordinary back-pressure, or the moment after an outage
/// when the uploaders' pauses end one by one: `Retrying` sleeps up to 5 s).
const REPORT_AFTER: Duration = Duration::from_secs(10);

/// Waiters look at the clock at least this often.
const WAKE: Duration = Duration::from_secs(1);

/// An uploader's first pause after a failed upload; it doubles to
/// [`BACKOFF_MAX`]. (`Retrying` backs off inside one attempt too.)
const BACKOFF_FIRST: Duration = Duration::from_millis(50);

/// The longest pause between two attempts of one upload.
const BACKOFF_MAX: Duration = Duration::from_secs(2);

/// A waiter that comes after others gave up (the store has taken no upload
/// for `stall_timeout`) still waits this long, or `stall_timeout` if it is
/// shorter: enough for a pausing uploader to try again once the store is
/// back.
const LATE_WAIT: Duration = Duration::from_secs(3);

/// `2 s`, `0.3 s`.
fn secs(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{:.1} s", d.as_secs_f64())
    }
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / f64::from(1 << 20))
}

/// Whether `e` says the store may take the request later.
fn transient(e: &ObjectError) -> bool {
    e.is_retryable() || matches!(e, ObjectError::GaveUp { .. })
}

impl Shared {
    fn limits(&self) -> String {
        let stall = match self.stall_timeout {
            Some(t) => format!("up to stall_timeout ({})", secs(t)),
            None => "without limit (stall_timeout = 0)".into(),
        };
        format!(
            "into DRAM{} until {} of segments wait (upload_queue), then writers wait {stall}",
            if self.journal.is_some() {
                " and the local write log"
            } else {
                ""
            },
            mib(self.upload_queue),
        )
    }

    /// An upload (or a checkpoint) failed, the store may take it later.
    pub(super) fn upload_failed(&self, st: &mut State, e: &ObjectError) {
        if let Some((_, last)) = &mut st.outage.failing {
            *last = e.to_string();
            return;
        }
        let now = Instant::now();
        st.outage.failing = Some((now, e.to_string()));
        st.outage.reported.get_or_insert(now);
        tracing::warn!(
            volume = %self.keys.prefix,
            "uploads to the object store fail ({e}); they are retried until it answers, \
             and writes go on {}",
            self.limits()
        );
    }

    /// An upload completed; `progressed`: a segment became durable.
    fn upload_done(&self, st: &mut State, progressed: bool) {
        st.outage.failing = None;
        if progressed {
            st.outage.stalled = None;
            st.outage.stall_reported = false;
            st.outage.timed_out = false;
        }
        if st.outage.stalled.is_none()
            && let Some(since) = st.outage.reported.take()
        {
            tracing::warn!(
                volume = %self.keys.prefix,
                "the object store takes uploads again after {:.1} s: writes proceed ({} of \
                 segments still to upload)",
                since.elapsed().as_secs_f64(),
                mib(st.queued_bytes())
            );
        }
    }

    /// Sleeps `d` unless the disk stops first; whether it stops.
    pub(super) fn pause(&self, d: Duration) -> bool {
        self.pause_unless(d, || false)
    }

    /// Sleeps `d` unless the disk stops or `also` holds first (looked at
    /// when the stop is signalled); whether either does. The background
    /// threads' (heartbeat, pin refresh, cleaner) wait between rounds.
    pub(super) fn pause_unless(&self, d: Duration, also: impl Fn() -> bool) -> bool {
        let stop = self
            .beat_stop
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let (stop, _) = self
            .beat
            .wait_timeout_while(stop, d, |stop| !*stop && !also())
            .unwrap_or_else(PoisonError::into_inner);
        *stop || also()
    }

    fn stopping(&self) -> bool {
        *self
            .beat_stop
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// An uploader's work on one segment: PUT until it is in the store,
    /// while another thread installs it in the local segment cache (the
    /// two take about as long as each other on a fast store). The segment
    /// counts as uploaded only once both are done: it leaves memory then,
    /// and its blocks are never read from the store. An installed segment
    /// whose PUT never succeeds is harmless: nothing maps to it, and its
    /// (sequence, generation) is never used again.
    pub(super) fn upload(&self, sealed: &Sealed) {
        std::thread::scope(|scope| {
            let installing = self.segcache.as_ref().map(|_| {
                scope.spawn(|| self.install(sealed.sequence, self.generation, &sealed.bytes))
            });
            let stored = self.put_until_stored(sealed);
            if let Some(h) = installing {
                let _ = h.join();
            }
            if stored {
                let mut st = self.state();
                let before = st.durable;
                st.uploaded(sealed.sequence);
                let progressed = st.durable > before;
                self.upload_done(&mut st, progressed);
                drop(st);
                self.progress.notify_all();
            }
        });
    }

    /// PUTs `sealed` until the store has it (true). Failures the store may
    /// get over are retried (module docs); a final one fails the disk. A
    /// stopping disk tries no more once the store fails (what it held is in
    /// the local write log, or was never acknowledged by a flush).
    fn put_until_stored(&self, sealed: &Sealed) -> bool {
        let mut pause = BACKOFF_FIRST;
        loop {
            {
                let st = self.state();
                if st.failed.is_some() || (st.outage.failing() && self.stopping()) {
                    return false;
                }
            }
            match self.store.put(&sealed.key, &sealed.bytes) {
                Ok(()) => return true,
                Err(e) if transient(&e) => {
                    self.upload_failed(&mut self.state(), &e);
                    self.progress.notify_all();
                    if self.pause(pause) {
                        return false;
                    }
                    pause = (pause * 2).min(BACKOFF_MAX);
                }
                Err(e) => {
                    self.fail(format!("uploading {}: {e}", sealed.key));
                    return false;
                }
            }
        }
    }
}

impl ObjectDisk {
    /// Whether the upload queue has room for the open segment, sealed (an
    /// empty queue always has: one segment goes, whatever the bound).
    pub(super) fn room(&self, st: &State) -> bool {
        let queued = st.queued_bytes();
        let next = header_len(
            st.block_size as u32,
            st.open.entries.len(),
            st.open.trims.len(),
        ) + st.open.data.len();
        queued == 0 || queued + next as u64 <= self.shared.upload_queue
    }

    /// While `want` holds, seals the open segment and queues it for upload
    /// as soon as the queue has room, waiting for uploads (back-pressure).
    pub(super) fn seal_when_room<'a>(
        &'a self,
        mut st: MutexGuard<'a, State>,
        w: &Wait,
        want: impl Fn(&State) -> bool,
    ) -> Result<MutexGuard<'a, State>, DeviceError> {
        while want(&st) {
            if self.room(&st) {
                let sealed = st.seal(self.key_fn());
                self.send(sealed);
                break;
            }
            st = self.wait(st, w, "the upload queue is full")?;
        }
        Ok(st)
    }

    /// Waits (the state's lock released) until an upload finishes, a
    /// moment passes, or the disk fails; fails after the stall timeout
    /// (module docs). The caller checks again what it waits for.
    pub(super) fn wait<'a>(
        &'a self,
        mut st: MutexGuard<'a, State>,
        w: &Wait,
        reason: &str,
    ) -> Result<MutexGuard<'a, State>, DeviceError> {
        self.refuse(&st, w.op, w.offset, w.len)?;
        let now = Instant::now();
        let stalled = *st.outage.stalled.get_or_insert(now);
        let mut nap = WAKE;
        // (A limit too far to add to a clock is no limit.)
        if let Some(limit) = self.shared.stall_timeout
            && let Some(first) = w.start.min(stalled).checked_add(limit)
        {
            let deadline = first.max(w.start + limit.min(LATE_WAIT));
            if now >= deadline {
                let why = self.stall_error(&mut st, limit, reason);
                return Err(device_error(w.op, w.offset, w.len, &self.describe(), why));
            }
            nap = nap.min(deadline - now);
        }
        if now.duration_since(stalled) >= REPORT_AFTER && !st.outage.stall_reported {
            st.outage.stall_reported = true;
            st.outage.reported.get_or_insert(stalled);
            tracing::warn!(
                volume = %self.shared.keys.prefix,
                "writes wait for the object store ({reason}): no segment reached it for {:.1} \
                 s, {} of segments wait in DRAM; they wait {}",
                now.duration_since(stalled).as_secs_f64(),
                mib(st.queued_bytes()),
                match self.shared.stall_timeout {
                    Some(t) => format!("up to stall_timeout ({}), then fail", secs(t)),
                    None => "without limit (stall_timeout = 0)".into(),
                }
            );
        }
        let (st, _) = self
            .shared
            .progress
            .wait_timeout(st, nap)
            .unwrap_or_else(PoisonError::into_inner);
        self.refuse(&st, w.op, w.offset, w.len)?;
        Ok(st)
    }

    /// Why a waiter gives up; said once per outage in the log.
    fn stall_error(&self, st: &mut State, limit: Duration, reason: &str) -> String {
        let since = st.outage.stalled.map_or(Duration::ZERO, |s| s.elapsed());
        let mut why = format!(
            "object store outage: no segment reached the store for {:.1} s ({reason}, {} of \
             segments wait in DRAM, upload_queue {}); gave up after stall_timeout ({})",
            since.as_secs_f64(),
            mib(st.queued_bytes()),
            mib(self.shared.upload_queue),
            secs(limit)
        );
        if let Some((_, e)) = &st.outage.failing {
            why.push_str("; last upload error: ");
            why.push_str(e);
        }
        if !st.outage.timed_out {
            st.outage.timed_out = true;
            st.outage.reported.get_or_insert(Instant::now());
            tracing::error!(
                volume = %self.shared.keys.prefix,
                "{why}. Writes and flushes that must wait fail at once until an upload \
                 completes; {}",
                if self.shared.journal.is_some() {
                    "every write a flush acknowledged is in the local write log"
                } else {
                    "every write a flush acknowledged is in the store"
                }
            );
        }
        why
    }
}
