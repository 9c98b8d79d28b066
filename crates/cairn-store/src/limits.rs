//! Every bound the store enforces, named once, with units last where they
//! have one, and the relations between them checked when the crate
//! compiles (a change to one that breaks another fails the build, not a
//! crash test).
//!
//! The NVM translation layer's lane and batch bounds live with its layout
//! (`ntl`), which its on-disk format fixes.

// ---- The block cache ----

/// Smallest cache block size, bytes.
pub const BLOCK_SIZE_MIN: u64 = 4 << 10;
/// Largest cache block size, bytes (papers/000 uses 256 KiB – 2 MiB).
pub const BLOCK_SIZE_MAX: u64 = 2 << 20;
/// Most blocks one device read of the cache fills (a request's run plus
/// readahead).
pub const RUN_BLOCKS_MAX: u64 = 256;
/// Most shards of one cache.
pub const SHARDS_MAX: usize = 1024;
/// Striped write locks of one cache (update mode): writes to blocks in
/// different stripes never wait for each other.
pub const WRITE_LOCKS: usize = 64;

// ---- Volumes ----

/// Most exports one spec may declare.
pub const EXPORTS_MAX: usize = 64;
/// Most devices one spec may declare.
pub const DEVICES_MAX: usize = 256;

// ---- The log disk ----

/// Segment writes the log disk's background writer holds at most: two on
/// the device (with the default two writer threads) and one ready behind
/// them, so the device does not wait for the caller to build the next.
pub const WRITE_DEPTH: usize = 3;
/// Writer threads by default (`logdisk::Options::writer_threads`).
pub const WRITER_THREADS_DEFAULT: u32 = 2;
/// Fewest free segments at which the cleaner starts (`clean_low`): it needs
/// one to write into while the head segment is full.
pub const CLEAN_LOW_MIN: u32 = 2;
/// The cleaner's default low watermark (the paper's).
pub const CLEAN_LOW_DEFAULT: u32 = 2;
/// The synchronous cleaner's reads are batched up to this many segments'
/// worth of blocks, so a pass of many victims reads them in parallel with
/// bounded memory.
pub const CLEANER_BATCH_SEGMENTS: u32 = 8;
/// User segment writes between a background cleaner pass's reads and their
/// collection: the reads run while the writer stages and writes that much
/// user data (a pass reads about a segment's worth of live blocks, ~10
/// sparse victims at utilisation 0.4, ~2 ms of small reads on a virtio disk;
/// in `cairn bench logdisk` the cleaner's step — waiting for the reads and
/// writing the pass — took the writer 104–158 µs per user segment at 4 and
/// 61–93 at 8).
pub const CLEANER_BACKGROUND_LAG: u32 = 8;
/// A background cleaner read of at most this many blocks goes into a small
/// buffer; a longer one into a whole segment's. With at most a segment's
/// worth of live blocks per pass, a pass holds at most
/// `segment_blocks / CLEANER_SMALL_READ_BLOCKS` large buffers' worth.
pub const CLEANER_SMALL_READ_BLOCKS: u32 = 16;

const _: () = {
    assert!(BLOCK_SIZE_MIN.is_power_of_two() && BLOCK_SIZE_MAX.is_power_of_two());
    assert!(BLOCK_SIZE_MIN <= BLOCK_SIZE_MAX);
    // A run fills at most RUN_BLOCKS_MAX frames of the largest block: 512 MiB.
    assert!(RUN_BLOCKS_MAX * BLOCK_SIZE_MAX <= 1 << 29);
    assert!(WRITE_LOCKS.is_power_of_two() && WRITE_LOCKS <= SHARDS_MAX);
    assert!(EXPORTS_MAX <= DEVICES_MAX);
    // The writer queue is deeper than the writer threads, so one write is
    // always ready behind those on the device.
    assert!(WRITE_DEPTH > WRITER_THREADS_DEFAULT as usize);
    assert!(CLEAN_LOW_MIN >= 2 && CLEAN_LOW_DEFAULT >= CLEAN_LOW_MIN);
    // A background pass is collected before the batch of a foreground pass
    // could need its buffers again.
    assert!(CLEANER_BACKGROUND_LAG >= 1 && CLEANER_BATCH_SEGMENTS >= 1);
    assert!(CLEANER_SMALL_READ_BLOCKS >= 1);
};
