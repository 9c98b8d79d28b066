//! Trace-driven cache simulation for Cairn.
//!
//! - [`replay()`]: one trace against many (policy × size) configurations,
//!   reading the trace once, on every core, in bounded memory.
//! - [`prepass()`]: working-set size (for sizes given as fractions, computed as
//!   libCacheSim does) and next-access times (for OPT on traces without them).
//! - [`metrics`] and [`cost`]: request and byte miss ratios, per-cost-group
//!   counters, and a device cost model (latency + size / bandwidth per group)
//!   giving modelled time and throughput, as papers/004 measures.
//! - [`groups`]: cost groups by device and sequential/random pattern.
//! - `levels`: two-level hierarchies (a DRAM cache over a flash tier),
//!   inclusive as the engine stacks them, or exclusive.
//! - [`ttl`]: time to live as libCacheSim defines it (expiry set at insert,
//!   not refreshed by hits, checked lazily on access), at no cost without it.
//! - [`mrc`]: exact LRU miss-ratio curves in one pass, and SHARDS sampling.
//! - [`analyze`]: a trace's reuse and stack distances, popularity (Zipf fit),
//!   one-hit wonders, sizes and per-window rates in one pass.
//!
//! Input is any `cairn_trace::read::Reader` (a boxed iterator of requests)
//! turned into accesses by [`AccessStream`].
//!
//! What this crate is not: a command line (see the `cairn` binary), or a model
//! of queueing or device parallelism (the cost model serves one access at a
//! time). Limits: cost groups are `u16`; the exact MRC keeps one map entry and
//! about 40 bytes per distinct key; next-access times for OPT keep 8 bytes per
//! access.

mod error;

pub mod analyze;
pub mod cost;
pub mod groups;
mod hierarchy;
mod hints;
mod levels;
pub mod metrics;
pub mod mrc;
mod prepass;
pub mod replay;
pub mod size;
mod stream;
pub mod ttl;

pub use cost::{CostModel, GroupCost, ServiceCost};
pub use error::{Result, SimError};
pub use groups::{DeviceMap, GroupMap};
pub use levels::{Hierarchy, Level2, SecondLevel};
pub use metrics::{GroupCounts, Level2Report, Metrics, Report, Served};
pub use prepass::{Prepass, next_access_times, prepass};
pub use replay::{Configuration, NoProgress, Progress, ReplayOptions, policy_name, replay};
pub use size::{CacheSize, CapacityUnit, WorkingSet, parse_bytes};
pub use stream::{AccessSource, AccessStream, FromIter, OpFilter, StreamOptions};
pub use ttl::{Expiring, Stamp, Ttl};
