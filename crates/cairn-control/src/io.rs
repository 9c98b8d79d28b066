//! Per-export request counters and latency histograms, kept per connection.
//!
//! Each connection counts into its own [`IoCounters`] (relaxed atomics and
//! three [`Histogram`]s: no lock, no allocation per request; only that
//! connection's threads touch its cache lines). The export's
//! [`ExportCounters`] lists the live connections and keeps the sums of the
//! closed ones; its mutex is taken when a connection opens or closes and
//! when a snapshot is read, never per request. A snapshot sums the closed
//! connections and the live ones under that mutex, so a request is counted
//! once whether its connection is open or has closed.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use cairn_store::stats::histogram::{Counts, Histogram, Latency};

/// What a request was, for its counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// NBD `READ`.
    Read,
    /// NBD `WRITE`.
    Write,
    /// NBD `FLUSH`.
    Flush,
    /// NBD `TRIM`.
    Trim,
    /// NBD `WRITE_ZEROES`.
    WriteZeroes,
    /// NBD `CACHE` (a prefetch hint).
    Cache,
    /// NBD `BLOCK_STATUS`.
    BlockStatus,
}

/// The counters, by index.
const REQUESTS: [usize; 7] = [0, 2, 4, 5, 7, 9, 10];
const READ_BYTES: usize = 1;
const WRITE_BYTES: usize = 3;
const TRIM_BYTES: usize = 6;
const ZERO_BYTES: usize = 8;
const ERRORS: usize = 11;
const REJECTED: usize = 12;
const FIELDS: usize = 13;

impl Op {
    fn index(self) -> usize {
        self as usize
    }

    /// The counter of its bytes, if it moves any.
    fn bytes_field(self) -> Option<usize> {
        match self {
            Op::Read => Some(READ_BYTES),
            Op::Write => Some(WRITE_BYTES),
            Op::Trim => Some(TRIM_BYTES),
            Op::WriteZeroes => Some(ZERO_BYTES),
            Op::Flush | Op::Cache | Op::BlockStatus => None,
        }
    }

    /// Which latency histogram: reads, writes (and zeroes, trims), the rest.
    fn latency(self) -> usize {
        match self {
            Op::Read => 0,
            Op::Write | Op::WriteZeroes | Op::Trim => 1,
            Op::Flush | Op::Cache | Op::BlockStatus => 2,
        }
    }
}

/// One connection's counters, bumped on the I/O path.
#[derive(Default)]
pub struct IoCounters {
    fields: [AtomicU64; FIELDS],
    latency: [Histogram; 3],
}

impl IoCounters {
    /// Counts a finished request: its kind, the bytes it moved (counted
    /// only when it succeeded), its service time, and whether it succeeded.
    #[inline]
    pub fn record(&self, op: Op, bytes: u64, ns: u64, ok: bool) {
        self.fields[REQUESTS[op.index()]].fetch_add(1, Ordering::Relaxed);
        if ok {
            if let Some(field) = op.bytes_field() {
                self.fields[field].fetch_add(bytes, Ordering::Relaxed);
            }
        } else {
            self.fields[ERRORS].fetch_add(1, Ordering::Relaxed);
        }
        self.latency[op.latency()].record(ns);
    }

    /// Counts a request refused before it ran (bad range, read-only
    /// export…): it got an error reply.
    #[inline]
    pub fn record_rejected(&self) {
        self.fields[REJECTED].fetch_add(1, Ordering::Relaxed);
    }

    fn counts(&self) -> IoCounts {
        let f: [u64; FIELDS] = std::array::from_fn(|i| self.fields[i].load(Ordering::Relaxed));
        IoCounts::from_fields(&f)
    }

    fn add_latency(&self, into: &mut [Counts; 3]) {
        for (h, c) in self.latency.iter().zip(into.iter_mut()) {
            h.add_to(c);
        }
    }
}

/// Requests and bytes, as a snapshot sends them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IoCounts {
    /// READ requests.
    pub reads: u64,
    /// Bytes READs returned.
    pub read_bytes: u64,
    /// WRITE requests.
    pub writes: u64,
    /// Bytes WRITEs stored.
    pub write_bytes: u64,
    /// FLUSH requests.
    pub flushes: u64,
    /// TRIM requests.
    pub trims: u64,
    /// Bytes trimmed.
    pub trim_bytes: u64,
    /// `WRITE_ZEROES` requests.
    pub write_zeroes: u64,
    /// Bytes zeroed.
    pub write_zeroes_bytes: u64,
    /// CACHE (prefetch) requests.
    pub caches: u64,
    /// `BLOCK_STATUS` requests.
    pub block_statuses: u64,
    /// Requests that ran and failed (an error reply).
    pub errors: u64,
    /// Requests refused before running (an error reply).
    pub rejected: u64,
}

impl IoCounts {
    fn from_fields(f: &[u64; FIELDS]) -> Self {
        Self {
            reads: f[0],
            read_bytes: f[1],
            writes: f[2],
            write_bytes: f[3],
            flushes: f[4],
            trims: f[5],
            trim_bytes: f[6],
            write_zeroes: f[7],
            write_zeroes_bytes: f[8],
            caches: f[9],
            block_statuses: f[10],
            errors: f[11],
            rejected: f[12],
        }
    }

    fn fields(&self) -> [u64; FIELDS] {
        [
            self.reads,
            self.read_bytes,
            self.writes,
            self.write_bytes,
            self.flushes,
            self.trims,
            self.trim_bytes,
            self.write_zeroes,
            self.write_zeroes_bytes,
            self.caches,
            self.block_statuses,
            self.errors,
            self.rejected,
        ]
    }

    /// Adds `other` in.
    pub fn add(&mut self, other: &IoCounts) {
        let mut f = self.fields();
        for (a, b) in f.iter_mut().zip(other.fields()) {
            *a += b;
        }
        *self = Self::from_fields(&f);
    }

    /// Every request counted (run or refused).
    pub fn requests(&self) -> u64 {
        self.reads
            + self.writes
            + self.flushes
            + self.trims
            + self.write_zeroes
            + self.caches
            + self.block_statuses
            + self.rejected
    }
}

/// Service-time distributions of an export's requests: from the start of
/// a request's execution to its reply handed to the socket (sent, or queued
/// behind another thread's send).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Latencies {
    /// READs.
    pub read: Latency,
    /// WRITEs, `WRITE_ZEROES` and TRIMs.
    pub write: Latency,
    /// FLUSH, CACHE, `BLOCK_STATUS`.
    pub other: Latency,
}

/// One open connection in a snapshot.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnectionIo {
    /// Numbered from 1 per export, in order of connection.
    pub id: u64,
    /// The client (`unix`, an address, `stdio`).
    pub peer: String,
    /// Seconds since it connected.
    pub seconds: u64,
    /// Its requests.
    pub io: IoCounts,
}

/// An export's requests, as a snapshot sends them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExportIo {
    /// Every request since the server started, over all connections.
    pub io: IoCounts,
    /// Their service times.
    pub latency: Latencies,
    /// Connections open now.
    pub connections_open: u64,
    /// Connections since the server started.
    pub connections_total: u64,
    /// The open connections.
    pub connections: Vec<ConnectionIo>,
}

/// One connection's counters and who it is.
pub struct ConnectionCounters {
    id: u64,
    peer: String,
    since: Instant,
    io: IoCounters,
}

#[derive(Default)]
struct Registry {
    live: Vec<Arc<ConnectionCounters>>,
    closed: IoCounts,
    closed_latency: [Counts; 3],
    total: u64,
}

/// An export's counters: its live connections' and the sums of its closed
/// ones.
#[derive(Default)]
pub struct ExportCounters {
    registry: Mutex<Registry>,
}

impl ExportCounters {
    fn registry(&self) -> std::sync::MutexGuard<'_, Registry> {
        self.registry.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers a connection from `peer`; it counts into the returned
    /// handle until the handle is dropped (its counts then join the closed
    /// connections' sums).
    pub fn connect(self: &Arc<Self>, peer: &str) -> Connected {
        let mut registry = self.registry();
        registry.total += 1;
        let counters = Arc::new(ConnectionCounters {
            id: registry.total,
            peer: peer.to_owned(),
            since: Instant::now(),
            io: IoCounters::default(),
        });
        registry.live.push(Arc::clone(&counters));
        Connected {
            export: Arc::clone(self),
            counters,
        }
    }

    /// Every request so far, open and closed connections alike.
    pub fn snapshot(&self) -> ExportIo {
        let registry = self.registry();
        let mut io = registry.closed;
        let mut latency = registry.closed_latency.clone();
        let mut connections = Vec::with_capacity(registry.live.len());
        for c in &registry.live {
            let counts = c.io.counts();
            io.add(&counts);
            c.io.add_latency(&mut latency);
            connections.push(ConnectionIo {
                id: c.id,
                peer: c.peer.clone(),
                seconds: c.since.elapsed().as_secs(),
                io: counts,
            });
        }
        let [read, write, other] = latency;
        ExportIo {
            io,
            latency: Latencies {
                read: read.summary(),
                write: write.summary(),
                other: other.summary(),
            },
            connections_open: registry.live.len() as u64,
            connections_total: registry.total,
            connections,
        }
    }
}

/// A live connection's counters; dropping it closes the connection's entry.
pub struct Connected {
    export: Arc<ExportCounters>,
    counters: Arc<ConnectionCounters>,
}

impl Connected {
    /// Where the connection counts.
    pub fn io(&self) -> &IoCounters {
        &self.counters.io
    }
}

impl Drop for Connected {
    fn drop(&mut self) {
        let mut registry = self.export.registry();
        let Registry {
            live,
            closed,
            closed_latency,
            ..
        } = &mut *registry;
        closed.add(&self.counters.io.counts());
        self.counters.io.add_latency(closed_latency);
        live.retain(|c| !Arc::ptr_eq(c, &self.counters));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn closed_connections_keep_counting_once() {
        let export = Arc::new(ExportCounters::default());
        let one = export.connect("a");
        let two = export.connect("b");
        one.io().record(Op::Read, 4096, 1000, true);
        one.io().record(Op::Write, 512, 2000, true);
        two.io().record(Op::Read, 8192, 3000, true);
        two.io().record(Op::Read, 8192, 3000, false);
        two.io().record_rejected();
        let before = export.snapshot();
        assert_eq!(before.connections_open, 2);
        drop(one);
        let after = export.snapshot();
        assert_eq!(
            after.io, before.io,
            "a closed connection's counts stay, once"
        );
        assert_eq!(after.latency, before.latency);
        assert_eq!(after.connections_open, 1);
        assert_eq!(after.connections_total, 2);
        assert_eq!(after.connections[0].peer, "b");
        let io = after.io;
        assert_eq!((io.reads, io.read_bytes), (3, 4096 + 8192));
        assert_eq!((io.writes, io.write_bytes), (1, 512));
        assert_eq!((io.errors, io.rejected), (1, 1));
        assert_eq!(io.requests(), 5);
        assert_eq!(after.latency.read.count, 3);
        assert_eq!(after.latency.write.count, 1);
        drop(two);
        assert_eq!(export.snapshot().io, io);
    }
}
