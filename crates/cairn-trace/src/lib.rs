//! I/O traces for Cairn: readers for the formats the field uses, writers,
//! seeded generators, statistics, and the splitting of requests into cache
//! accesses.
//!
//! - [`read::open`] / [`read::Format`]: MSR Cambridge, libCacheSim
//!   oracleGeneral (plain or zstd), VSCSI v1, `CloudPhysics` CSV, text ids, and
//!   any CSV through a column map. Readers stream: memory does not grow with
//!   the trace. Every malformed record is an error naming the file, the line
//!   or record, and the field; no input makes a reader panic.
//! - [`write::create`] / [`write::convert`]: oracleGeneral (with next-access
//!   indices), the canonical CSV, text ids, VSCSI v1; zstd-compressed for a
//!   `.zst` name; [`write::format_of_name`] picks the format a name says.
//! - [`generate`]: Zipf, uniform, scan, hot-spot mix, staggered streams and
//!   file workloads, each a serde config and an iterator, seeded.
//! - [`TraceStats`]: counts, footprints, span and sizes in one pass.
//! - [`Splitter`]: requests to the [`cairn_policy::Access`]es a policy sees,
//!   by object, by start sector (libCacheSim's reading of block traces) or
//!   by fixed blocks.
//!
//! Limits: a text line holds at most [`read::LINE_BYTES_MAX`] (64 KiB); a
//! request at most 4 GiB − 1 bytes; block keys hold 2^20 objects of 2^44
//! blocks ([`split::BLOCK_INDEX_BITS`]); the oracleGeneral writer keeps 16
//! bytes per request until it finishes; [`TraceStats`] keeps the distinct
//! objects and blocks. Everything else streams in constant memory.
//!
//! Not here: timing models, replay and metrics (`cairn-sim`).

pub mod error;
pub mod generate;
pub mod read;
mod request;
pub mod split;
pub mod stats;
pub mod write;

pub use error::{Result, TraceError};
pub use request::{NEVER, Op, Request};
pub use split::{Splitter, Unit};
pub use stats::{StatsBuilder, TraceStats};
