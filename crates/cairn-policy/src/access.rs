//! What a policy sees: one block (or object) touch.

use serde::{Deserialize, Serialize};

/// The logical time of "never again", for [`Access::next`].
pub const NEVER: u64 = u64::MAX;

/// Whether an access reads or writes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    /// A read of the block.
    #[default]
    Read,
    /// A write of the block.
    Write,
}

/// One touch of one cached unit (a block of a volume, or a whole object).
///
/// Requests from traces and from clients, `(offset, length)`, are split into
/// accesses at the configured block size by `cairn-trace`; in object mode (as
/// libCacheSim does it) one request is one access of the whole object.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Access {
    /// The cache key: unique per cached unit.
    pub key: u64,
    /// Size of the unit in bytes.
    pub size: u32,
    /// Read or write.
    pub op: Op,
    /// The object (file, volume, disk) the unit belongs to.
    pub object: u64,
    /// Index of the unit within its object (0 = the object's first block).
    pub block: u64,
    /// Cost group (device × access pattern), an index into a cost table.
    pub group: u16,
    /// Logical time: the index of this access in the access stream.
    pub time: u64,
    /// Wall-clock time of the request in whole seconds, as the trace records
    /// it (libCacheSim's `clock_time`); 0 where unknown. Only `GLCache` reads
    /// it (its retraining interval and features are in seconds).
    pub clock: u64,
    /// Logical time of the next access to the same key, or [`NEVER`]. Only the
    /// offline bound (OPT) reads it; traces that do not carry it leave [`NEVER`].
    pub next: u64,
}

impl Access {
    /// A read access of `key` with the given size at logical time `time`;
    /// the other fields take neutral values (object 0, block = key, group 0).
    pub fn read(key: u64, size: u32, time: u64) -> Self {
        Self {
            key,
            size,
            op: Op::Read,
            object: 0,
            block: key,
            group: 0,
            time,
            clock: 0,
            next: NEVER,
        }
    }
}
