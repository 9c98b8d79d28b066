//! Cairn's control plane: what a running server counts and how an operator
//! asks for it.
//!
//! - [`histogram`]: lock-free, allocation-free latency histograms
//!   (log-linear buckets of relaxed atomics; p50/p99/p999): the store's
//!   ([`cairn_store::stats::histogram`]), which its layers record into too.
//! - [`io`]: per-export request counters, kept per connection, summed on
//!   demand.
//! - [`snapshot`]: what `cairn stats` receives: per export its requests,
//!   latencies, connections and the layers of its stack
//!   ([`cairn_store::stats`]).
//! - [`protocol`]: the control socket's frames (length-prefixed JSON).
//! - [`server`]: the control socket (owner-only, peer credentials checked).
//! - [`client`]: its client.
//!
//! What it is not: an exporter. The snapshot is shaped so that one can be
//! added (Prometheus: counters and gauges are marked, names carry their
//! units, histograms send their buckets), but none is here yet.

pub mod client;
pub use cairn_store::stats::histogram;
pub mod io;
pub mod limits;
pub mod protocol;
pub mod server;
pub mod snapshot;

pub use client::{Client, ClientError};
pub use io::{Connected, ExportCounters, ExportIo, IoCounters, IoCounts, Op};
pub use protocol::{Reply, Request};
pub use server::{ControlError, ControlSocket, Handler};
pub use snapshot::{ExportSnapshot, Snapshot};
