//! I/O traces for Cairn: readers for the formats the field uses, writers,
//! seeded generators, and the splitting of requests into cache accesses.
//!
//! Readers stream: memory does not grow with the trace. Every malformed
//! record is an error naming the file, the line or record, and the field.

pub mod error;
pub mod generate;
pub mod read;
mod request;
pub mod split;
pub mod write;

pub use error::{Result, TraceError};
pub use request::{NEVER, Op, Request};
pub use split::{Splitter, Unit};
