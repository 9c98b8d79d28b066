//! NVM translation layer (NTL): persistent memory exposed as a block device with a
//! byte-granular API (paper 002; design technique 3).
//!
//! Built bottom up:
//!
//! - [`region`]: the [`Region`] trait — a byte-addressed persistent-memory range with
//!   aligned 8-byte atomic stores, "flush many ranges, fence once", and a reported
//!   [`Persistence`] level.
//! - [`pmem`]: [`MmapRegion`], a `Region` over a memory-mapped file (`/dev/shm`/tmpfs,
//!   fs-DAX with `MAP_SYNC`, or device-DAX), and the cache-line flush primitives.
//! - [`sim`]: [`SimRegion`], the seeded crash model for tests.
//! - [`alloc`]: [`BlockAllocator`], `nm_alloc`/`nm_free` over a DRAM bitmap.
//!
//! - [`layout`]: [`Geometry`] and the lengths of the image's regions, beneath
//!   the format files below and the `Btt` above them.
//! - [`map`]: [`BlockMap`], the flat persistent map and its DRAM mirror.
//! - [`btt`]: [`Btt`], atomic whole-block writes (copy to a free block and log
//!   it, one fence, then flip the map entry), batched for multi-block writes, and
//!   the in-place [`WriteMode`] that measures what atomicity costs.
//! - [`lanelog`]: the per-lane records that make an atomic write one
//!   persistence round trip, and their replay at open.
//!
//! - [`device`]: [`NtlDevice`], the `Device` trait at any byte offset and length.
//!
//! - [`info`]: the info block (magic [`MAGIC`], version, geometry, CRC32C).
//!
//! - [`check`]: [`fsck`] and [`inspect`] over an image file.
//!
//! Measured by `cairn bench ntl` and `benches/ntl_index.rs` (the flat DRAM index
//! against the paper's radix tree); numbers in docs/benchmarks.md.

pub mod alloc;
pub mod btt;
pub mod check;
pub mod device;
pub mod info;
pub mod lanelog;
pub mod layout;
pub mod map;
pub mod open;
pub mod pmem;
pub mod region;
pub mod sim;

pub use alloc::{AllocError, BlockAllocator};
pub use btt::{Btt, WriteMode};
pub use check::{Report, fsck, inspect};
pub use device::NtlDevice;
pub use info::{InfoError, MAGIC};
pub use layout::Geometry;
pub use map::{BlockMap, MapError};
pub use pmem::{
    FlushInstr, HUGE_PAGE, MmapRegion, PageSize, Persistence, PersistenceRequest, collapse_buffer,
};
pub use region::Region;
pub use sim::SimRegion;
