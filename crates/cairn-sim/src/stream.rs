//! From requests to the accesses a policy sees: split, filter, group, and
//! (for OPT) stamp next-access times.
//!
//! Any reader plugs in: [`AccessStream::new`] takes a
//! `Box<dyn Iterator<Item = Result<Request>> + Send>` (`cairn_trace::read::Reader`).

use std::sync::Arc;

use cairn_policy::{Access, NEVER, Op};
use cairn_trace::read::Reader;
use cairn_trace::{Request, Splitter, TraceError, Unit};
use serde::{Deserialize, Serialize};

use crate::groups::{GroupAssigner, GroupMap};
use crate::ttl::{Stamp, Ttl};

/// Which requests to keep.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OpFilter {
    /// Reads and writes.
    #[default]
    All,
    /// Reads only.
    Read,
    /// Writes only.
    Write,
}

impl OpFilter {
    /// Whether a request with `op` passes.
    #[inline]
    pub fn keeps(self, op: Op) -> bool {
        match self {
            OpFilter::All => true,
            OpFilter::Read => op == Op::Read,
            OpFilter::Write => op == Op::Write,
        }
    }
}

/// How a trace's requests become accesses. Filtering happens before splitting,
/// so logical time counts only the accesses kept.
#[derive(Clone, Debug, PartialEq)]
pub struct StreamOptions {
    /// Objects or blocks.
    pub unit: Unit,
    /// Which operations to keep.
    pub ops: OpFilter,
    /// How accesses are put into cost groups.
    pub groups: GroupMap,
    /// Time to live: `None` (the default) replays without expiry, at no cost.
    pub ttl: Option<Ttl>,
}

impl Default for StreamOptions {
    fn default() -> Self {
        Self {
            unit: Unit::Object,
            ops: OpFilter::All,
            groups: GroupMap::default(),
            ttl: None,
        }
    }
}

/// The accesses of a trace, in order, as an iterator.
pub struct AccessStream {
    requests: Reader,
    ops: OpFilter,
    splitter: Splitter,
    groups: GroupAssigner,
    ttl: Option<Ttl>,
    next_times: Option<Arc<[u64]>>,
    buffer: Vec<Access>,
    at: usize,
    /// Requests read from the source in one batch, and how many are used.
    requests_batch: Vec<Request>,
    requests_at: usize,
    /// An error the source met after the batch's requests.
    source_error: Option<TraceError>,
    requests_read: u64,
    /// An error met while filling a batch, reported after the batch.
    pending: Option<TraceError>,
}

/// Accesses gathered per refill: enough to amortise the per-request
/// plumbing, few enough to stay in L1.
const BATCH_ACCESSES: usize = 256;

/// Requests taken from the source per [`RequestSource::fill`](cairn_trace::read::RequestSource::fill) call.
const REQUEST_BATCH: usize = 256;

impl AccessStream {
    /// Streams the accesses of `requests`.
    pub fn new(requests: Reader, options: &StreamOptions) -> Self {
        Self {
            requests,
            ops: options.ops,
            splitter: Splitter::new(options.unit),
            groups: GroupAssigner::new(options.groups.clone()),
            ttl: options.ttl,
            next_times: None,
            buffer: Vec::new(),
            at: 0,
            requests_batch: Vec::with_capacity(REQUEST_BATCH),
            requests_at: 0,
            source_error: None,
            requests_read: 0,
            pending: None,
        }
    }

    /// Stamps each access's `next` from `next_times[access.time]` (computed by
    /// [`crate::prepass`] over the same trace with the same options).
    #[must_use]
    pub fn with_next_times(mut self, next_times: Arc<[u64]>) -> Self {
        self.next_times = Some(next_times);
        self
    }

    /// Requests read from the trace so far (including those filtered out).
    pub fn requests_read(&self) -> u64 {
        self.requests_read
    }

    /// Appends the next accesses to `out`, stopping after the request that
    /// brings it to at least `max` (a request split into blocks is never cut).
    /// Returns how many were appended; 0 means the trace has ended. An error
    /// met after some accesses were appended is returned by the next call, so
    /// nothing before it is lost.
    pub fn fill(&mut self, out: &mut Vec<Access>, max: usize) -> Result<usize, TraceError> {
        self.fill_inner(out, None, max)
    }

    /// [`fill`](Self::fill), and a [`Stamp`] per access appended to `stamps`
    /// (which must be as long as `out`), from the options' [`Ttl`]
    /// ([`Stamp::NONE`] without one).
    pub fn fill_stamped(
        &mut self,
        out: &mut Vec<Access>,
        stamps: &mut Vec<Stamp>,
        max: usize,
    ) -> Result<usize, TraceError> {
        debug_assert_eq!(out.len(), stamps.len());
        self.fill_inner(out, Some(stamps), max)
    }

    fn fill_inner(
        &mut self,
        out: &mut Vec<Access>,
        mut stamps: Option<&mut Vec<Stamp>>,
        max: usize,
    ) -> Result<usize, TraceError> {
        if let Some(error) = self.pending.take() {
            return Err(error);
        }
        let first = out.len();
        let want = first + max.max(1);
        while out.len() < want {
            if self.requests_at == self.requests_batch.len() && !self.refill_requests() {
                match self.source_error.take() {
                    Some(e) if out.len() == first => return Err(e),
                    Some(e) => self.pending = Some(e),
                    None => {}
                }
                break;
            }
            // The batch's requests in one tight loop: no per-request
            // `Option<Result<Request>>` moved through the stack.
            let batch = &self.requests_batch[self.requests_at..];
            let used = if self.ops == OpFilter::All && stamps.is_none() {
                self.splitter.split_until(batch, out, want)
            } else {
                let mut used = 0;
                for request in batch {
                    used += 1;
                    if self.ops.keeps(request.op) {
                        self.splitter.split(request, out);
                        if let Some(stamps) = stamps.as_deref_mut() {
                            let stamp = self.ttl.map_or(Stamp::NONE, |ttl| ttl.stamp(request));
                            stamps.resize(out.len(), stamp);
                        }
                        if out.len() >= want {
                            break;
                        }
                    }
                }
                used
            };
            self.requests_at += used;
            self.requests_read += used as u64;
        }
        if !self.groups.is_trivial() {
            for access in &mut out[first..] {
                self.groups.assign(access);
            }
        }
        if let Some(next) = &self.next_times {
            for access in &mut out[first..] {
                access.next = usize::try_from(access.time)
                    .ok()
                    .and_then(|t| next.get(t))
                    .copied()
                    .unwrap_or(NEVER);
            }
        }
        Ok(out.len() - first)
    }

    /// Reads the source's next batch of requests (one dynamic call). False
    /// when it brought none: the trace has ended, or `source_error` says why
    /// not. An error met after some requests waits in `source_error` until
    /// they are used.
    fn refill_requests(&mut self) -> bool {
        if self.source_error.is_some() {
            return false;
        }
        self.requests_batch.clear();
        self.requests_at = 0;
        self.source_error = self.requests.fill(&mut self.requests_batch, REQUEST_BATCH);
        !self.requests_batch.is_empty()
    }

    fn refill(&mut self) -> Option<Result<(), TraceError>> {
        let mut buffer = std::mem::take(&mut self.buffer);
        buffer.clear();
        self.at = 0;
        let filled = self.fill(&mut buffer, BATCH_ACCESSES);
        self.buffer = buffer;
        match filled {
            Ok(0) => None,
            Ok(_) => Some(Ok(())),
            Err(e) => Some(Err(e)),
        }
    }
}

/// Where a replay gets its accesses: in batches, written straight into the
/// replay's own buffer (no per-access `Option<Result<…>>` plumbing).
pub trait AccessSource {
    /// Appends about `max` accesses to `out` (see [`AccessStream::fill`]);
    /// `Ok(0)` at the end of the trace.
    fn fill(&mut self, out: &mut Vec<Access>, max: usize) -> Result<usize, TraceError>;

    /// Whether accesses carry [`Stamp`]s (TTL is in play): the replay then
    /// calls [`fill_stamped`](Self::fill_stamped). The default says no.
    fn stamped(&self) -> bool {
        false
    }

    /// The TTL rules the stamps follow (`None` without TTL). The replay reads
    /// the default TTL from it for the units a prefetcher loads.
    fn ttl(&self) -> Option<Ttl> {
        None
    }

    /// [`fill`](Self::fill), and one [`Stamp`] per access appended to
    /// `stamps`. The default stamps [`Stamp::NONE`] (nothing expires).
    fn fill_stamped(
        &mut self,
        out: &mut Vec<Access>,
        stamps: &mut Vec<Stamp>,
        max: usize,
    ) -> Result<usize, TraceError> {
        let appended = self.fill(out, max)?;
        stamps.resize(out.len(), Stamp::NONE);
        Ok(appended)
    }
}

impl AccessSource for AccessStream {
    fn fill(&mut self, out: &mut Vec<Access>, max: usize) -> Result<usize, TraceError> {
        AccessStream::fill(self, out, max)
    }

    fn stamped(&self) -> bool {
        self.ttl.is_some()
    }

    fn ttl(&self) -> Option<Ttl> {
        self.ttl
    }

    fn fill_stamped(
        &mut self,
        out: &mut Vec<Access>,
        stamps: &mut Vec<Stamp>,
        max: usize,
    ) -> Result<usize, TraceError> {
        AccessStream::fill_stamped(self, out, stamps, max)
    }
}

/// Any iterator of accesses as an [`AccessSource`] (for tests and in-memory
/// traces).
#[derive(Debug)]
pub struct FromIter<I>(pub I);

impl<I: Iterator<Item = Result<Access, TraceError>>> AccessSource for FromIter<I> {
    fn fill(&mut self, out: &mut Vec<Access>, max: usize) -> Result<usize, TraceError> {
        let first = out.len();
        for access in self.0.by_ref().take(max.max(1)) {
            out.push(access?);
        }
        Ok(out.len() - first)
    }
}

impl Iterator for AccessStream {
    type Item = Result<Access, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.at == self.buffer.len()
            && let Err(e) = self.refill()?
        {
            return Some(Err(e));
        }
        let access = self.buffer[self.at];
        self.at += 1;
        Some(Ok(access))
    }
}
