//! [`Request`]: one I/O of a trace, before it is split into cache accesses.

pub use cairn_policy::{NEVER, Op};

/// One request of a trace: a byte range of an object (a disk, a volume, a
/// file), or a whole object in object traces such as libCacheSim's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Request {
    /// Time of issue in microseconds, as the trace records it (not rebased).
    pub time_us: u64,
    /// The object: disk number for block traces, object id for object traces.
    pub object: u64,
    /// Byte offset within the object (0 for object traces).
    pub offset: u64,
    /// Length in bytes (the object's size for object traces).
    pub size: u32,
    /// Read or write.
    pub op: Op,
    /// Time to live in seconds, when the trace carries one (libCacheSim's
    /// `req->ttl`: Twitter's traces do); 0 for none. A simulator run with TTL
    /// expires the object this long after it enters the cache.
    pub ttl: u32,
    /// Index (0-based) of the next request to the same object, or [`NEVER`],
    /// when the trace carries it (libCacheSim's oracleGeneral does).
    pub next: u64,
}
