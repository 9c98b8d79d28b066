//! What `stats` returns: the server, and per export its requests (counted
//! by the front end) and its layers (walked by the volume).

use cairn_store::stats::LayerStats;
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
