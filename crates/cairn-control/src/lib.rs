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
//!   ([`cairn_store::stats`]); per file export (`cairn serve --files`) its
//!   HTTP requests, connections and cache.
//! - [`protocol`]: the control socket's frames (length-prefixed JSON).
//! - [`server`]: the control socket (owner-only, peer credentials checked).
//! - [`client`]: its client.
//! - [`prometheus`]: the snapshot in Prometheus's text format.
//! - [`http`]: the metrics listener (`cairn serve --metrics`): `/metrics`,
//!   `/stats.json` and the dashboard page (`dashboard/`, built in), on a
//!   minimal HTTP/1.1 responder, loopback unless told otherwise.
//!
//! What it is not: a metrics store or a web server. It answers with the
//! counters of now; Prometheus keeps the history, the page keeps the last
//! five minutes it saw.

pub mod client;
pub use cairn_store::stats::histogram;
pub mod http;
pub mod io;
pub mod limits;
pub mod prometheus;
pub mod protocol;
pub mod server;
pub mod snapshot;

pub use client::{Client, ClientError};
pub use http::{MetricsError, MetricsListener};
pub use io::{Connected, ExportCounters, ExportIo, IoCounters, IoCounts, Op};
pub use protocol::{Reply, Request};
pub use server::{ControlError, ControlSocket, Handler};
pub use snapshot::{BackendErrors, ExportSnapshot, FileExportSnapshot, HttpRequests, Snapshot};
