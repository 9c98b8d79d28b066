//! Cairn's storage engine.
//!
//! Layers, bottom up (see `docs/architecture.md`):
//!
//! - [`device`]: the [`Device`] trait every layer speaks, and the concrete devices
//!   (file, memory, throttled, faulty). Every storage layer above is itself a `Device`, so layers
//!   stack: a cache over a log disk over a file.
//! - [`cache`]: the DRAM block cache: sharded, single-flight, zero-copy hits,
//!   any policy of `cairn-policy`, cost groups with online costs.
//! - [`ntl`]: the NVM translation layer (persistent memory as a block device).
//! - [`logdisk`]: the log-structured disk with its NV write cache.
//! - [`tier`]: the flash tier: a persistent cache on a fast device in front
//!   of a slower one (write-through, write-back, write-around,
//!   pass-through), warm across restarts and crashes.
//! - [`stats`]: the [`stats::Layer`] trait: each layer's live counters
//!   and runtime commands, walked per export by [`Volume::stats`]; the
//!   lock-free latency histograms every layer (and the NBD front end)
//!   records into.
//! - [`volume`]: stacks of the above assembled from a [`volume::VolumeSpec`],
//!   one per export, formatted on first use and recovered after.
//!
//! What this crate is not: a network server (`cairn-nbd`) or a simulator
//! (`cairn-sim`). Nothing here panics on input; errors are values.

// Functions stay under 100 lines (clippy.toml), or say in their doc why
// they are one piece (issue 22; the workspace allows long functions elsewhere).
#![warn(clippy::too_many_lines)]

#[macro_use]
mod assert;
pub mod cache;
mod codec;
pub mod device;
pub mod limits;
pub mod logdisk;
pub mod ntl;
pub mod objdisk;
pub mod stats;
pub mod tier;
pub mod volume;

pub use cache::{BlockCache, BlockRef, CacheConfig, CacheError, WriteMode};
pub use device::{
    CrashMode, Device, DeviceError, DeviceOp, Extent, FaultyDevice, FileDevice, MemoryDevice, Pace,
    Power, Throttle, ThrottledDevice,
};
pub use volume::{Volume, VolumeError, VolumeExport, VolumeSpec};
