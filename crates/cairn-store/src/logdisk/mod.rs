//! The log-structured logical disk of papers/003 (issue 3): a persistent
//! log-structured block store over any [`crate::Device`], with an optional
//! non-volatile write cache in a persistent-memory region.
//!
//! - [`format`](mod@format): the on-disk structures (superblock, checkpoint slots with the
//!   block address and segment usage tables, segment summaries) as pure,
//!   checksummed encode/decode functions.
//! - [`nv`]: the NV write cache's slots in a [`crate::ntl::Region`].
//! - [`disk`]: [`LogDisk`] — write path (NV cache, destaging, segment
//!   building, partial segments), read path, cleaner, checkpoints,
//!   roll-forward recovery.
//! - [`check`]: `fsck` and `inspect` over an image.

pub mod check;
pub mod disk;
pub mod format;
pub mod nv;
pub mod open;

pub use disk::{
    CleanerPolicy, LogDisk, LogDiskError, Metrics, Options, PartialSegments, Recovered,
    read_superblock,
};
pub use format::{Geometry, Superblock};
pub use nv::{NvCache, NvError};
