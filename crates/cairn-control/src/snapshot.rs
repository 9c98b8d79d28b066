//! What `stats` returns: the server, and per export its requests (counted
//! by the front end) and its layers (walked by the volume); for `cairn serve
//! --files`, per file export its HTTP requests and its cache.

use cairn_store::stats::{GroupStats, LayerStats, Metric};
use serde::{Deserialize, Serialize};

use crate::io::ExportIo;

/// Every export's and layer's counters at one moment.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    /// The server's process.
    pub pid: u32,
    /// Seconds since the server started.
    pub uptime_seconds: f64,
    /// Whether requests are counted and timed (`cairn serve --no-stats`
    /// turns it off; `io` is then all zeroes).
    pub counting: bool,
    /// The exports, in spec order.
    pub exports: Vec<ExportSnapshot>,
    /// The file exports (`cairn serve --files`; none otherwise).
    #[serde(default)]
    pub files: Vec<FileExportSnapshot>,
}

/// One export.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ExportSnapshot {
    /// Its name.
    pub name: String,
    /// Its size in bytes.
    pub size_bytes: u64,
    /// Whether writes are refused.
    pub read_only: bool,
    /// Its requests, connections and latencies.
    #[serde(flatten)]
    pub io: ExportIo,
    /// The layers of its stack with counters, top first.
    pub layers: Vec<LayerStats>,
}

/// One file export (`cairn serve --files`): the gateway's requests and
/// connections, and its cache.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FileExportSnapshot {
    /// Its name: the bucket of `/BUCKET/KEY`.
    pub name: String,
    /// The cache's replacement policy (`ons`, `dual`, …).
    pub policy: String,
    /// The cache's block size, bytes.
    pub block_size_bytes: u64,
    /// Connections being served now.
    pub connections_open: u64,
    /// Connections served since the start.
    pub connections_total: u64,
    /// Connections refused (`503`: over `--connections-max`).
    pub connections_refused: u64,
    /// Requests answered, by method and status class: every pair, zero or
    /// not.
    pub requests: Vec<HttpRequests>,
    /// Failed backend calls (lookups and block reads), by kind.
    pub backend_errors: BackendErrors,
    /// The cache's counters and levels, named (hits, misses, bytes, resident
    /// blocks, …: `cairn_files::FileCacheStats::metrics`), and its
    /// backend's own (a spill's `spill_…`).
    pub cache: Vec<Metric>,
    /// With several backends (a union), each one's reads, bytes, read time
    /// and learned cost, labelled by its index in `--files` order.
    #[serde(default)]
    pub backends: Vec<GroupStats>,
}

/// Requests of one method answered with one status class.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HttpRequests {
    /// `get`, `head` or `other`.
    pub method: String,
    /// `2xx`, `3xx`, `4xx` or `5xx`.
    pub status: String,
    /// How many.
    pub count: u64,
}

/// Failed backend calls by what the client was told.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackendErrors {
    /// No such object (`404`).
    pub not_found: u64,
    /// The backend did not answer in time (`504`).
    pub timeout: u64,
    /// Anything else (`403`, `502`).
    pub other: u64,
}
