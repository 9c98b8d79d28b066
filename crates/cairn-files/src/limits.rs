//! Every bound the gateway enforces, named in one place; their relations are
//! asserted at compile time below.

/// Smallest cache block, bytes (papers/000 uses 256 KiB – 2 MiB blocks).
pub const BLOCK_SIZE_MIN: u64 = 256 << 10;
/// Largest cache block, bytes.
pub const BLOCK_SIZE_MAX: u64 = 4 << 20;
/// Default cache block, bytes.
pub const BLOCK_SIZE_DEFAULT: u64 = 1 << 20;
/// Most shards a cache may have.
pub const SHARDS_MAX: usize = 256;
/// Bits of a cache key that hold the block index; the rest hold the object's
/// number. An object may have at most 2^28 blocks (64 TiB at 256 KiB).
pub const BLOCK_INDEX_BITS: u32 = 28;
/// Objects (name, size, modification time) the cache numbers before it
/// forgets the numbering and starts over (their blocks age out).
pub const OBJECTS_MAX: usize = 1 << 20;
/// Longest object key, bytes (S3's limit).
pub const KEY_MAX_BYTES: usize = 1024;
/// Longest request head (request line and headers), bytes; the
/// per-connection read buffer has this size.
pub const REQUEST_HEAD_MAX_BYTES: usize = 16 << 10;
/// Longest request line, bytes; longer is `414 URI Too Long`.
pub const REQUEST_LINE_MAX_BYTES: usize = 8 << 10;
/// Most header fields in a request; more is `431`.
pub const HEADERS_MAX: usize = 64;
/// Default time a client has to send a whole request head (and an idle
/// keep-alive connection to start one), milliseconds: slowloris defence.
pub const HEADER_TIMEOUT_MS_DEFAULT: u64 = 10_000;
/// Time a blocked response write may take before the connection is
/// dropped, milliseconds.
pub const WRITE_TIMEOUT_MS: u64 = 60_000;
/// Default number of connections served at once; more get `503`.
pub const CONNECTIONS_MAX_DEFAULT: usize = 256;
/// Largest number of connections a configuration may allow.
pub const CONNECTIONS_MAX: usize = 16_384;
/// Cache blocks a response holds at once (and writes with one `writev`):
/// the in-flight bytes of one connection are at most this many blocks.
pub const BLOCKS_PER_WRITE: usize = 16;
/// How often the accept loop looks at the stop flag, milliseconds.
pub const ACCEPT_POLL_MS: u64 = 50;
/// Most keys one `ListObjectsV2` answer carries (S3's own limit).
pub const LIST_KEYS_MAX: usize = 1000;
/// Most directory entries one listing walks before it gives up (`502`).
pub const LIST_SCAN_MAX: usize = 1 << 20;
/// Longest bucket (export) name, bytes (S3's limit).
pub const BUCKET_NAME_MAX_BYTES: usize = 63;

/// The largest readahead window, blocks (also the most prefetch threads).
pub const PREFETCH_WINDOW_MAX: u64 = 256;
/// Reads ahead queued or running at once: 4 windows, at least this many (a
/// window of a reader's range of 16 blocks, each naming a few more).
pub const PREFETCH_IN_FLIGHT_MIN: u64 = 64;

/// Batches of dropped blocks queued for an exclusive spill's hand-down
/// thread; with more, the thread that dropped them hands them down itself,
/// which bounds the blocks held in transit beside the cache's capacity.
pub const DEMOTE_QUEUE: usize = 16;

/// Whole-block buffers the cache keeps idle for its next reads, rather than
/// zeroing new ones (at most this many blocks of memory beside its
/// capacity).
pub const IDLE_BUFFERS: usize = 8;

/// Most servers (directories) an object may be striped over.
pub const SERVERS_MAX: usize = 64;
/// Most members of a union of backends (`--files A --files B`), each its
/// own cost group.
pub const UNION_MAX: usize = 16;

const _: () = {
    assert!(BLOCK_SIZE_MIN.is_power_of_two() && BLOCK_SIZE_MAX.is_power_of_two());
    assert!(BLOCK_SIZE_MIN <= BLOCK_SIZE_DEFAULT && BLOCK_SIZE_DEFAULT <= BLOCK_SIZE_MAX);
    // A block's bytes fit a `BlockRef` (u32 length).
    assert!(BLOCK_SIZE_MAX <= u32::MAX as u64);
    assert!(SHARDS_MAX.is_power_of_two());
    assert!(BLOCK_INDEX_BITS < 64 && (OBJECTS_MAX as u64) < 1 << (64 - BLOCK_INDEX_BITS));
    assert!(REQUEST_LINE_MAX_BYTES < REQUEST_HEAD_MAX_BYTES);
    // The longest key, percent-encoded, fits a request line.
    assert!(KEY_MAX_BYTES * 3 + BUCKET_NAME_MAX_BYTES + 64 < REQUEST_LINE_MAX_BYTES);
    assert!(CONNECTIONS_MAX_DEFAULT <= CONNECTIONS_MAX);
    assert!(BLOCKS_PER_WRITE >= 1 && BLOCKS_PER_WRITE < 1024);
    assert!(LIST_KEYS_MAX <= LIST_SCAN_MAX);
    assert!(PREFETCH_WINDOW_MAX >= 1 && PREFETCH_IN_FLIGHT_MIN >= 1);
    assert!(DEMOTE_QUEUE >= 1 && IDLE_BUFFERS >= 1);
    // A union member's index is its cost group, a u16.
    assert!(SERVERS_MAX >= 1 && UNION_MAX >= 1 && UNION_MAX <= u16::MAX as usize);
};
