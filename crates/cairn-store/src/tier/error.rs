//! Why a tier could not be formatted or opened.

use crate::codec::FormatError;
use crate::device::DeviceError;

/// Why a tier could not be formatted, opened or used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TierError {
    /// A device operation failed.
    #[error(transparent)]
    Device(#[from] DeviceError),
    /// A structure on the cache device is torn or corrupted.
    #[error("the cache device {device}: {error}")]
    Format {
        /// The cache device.
        device: String,
        /// What failed to decode.
        #[source]
        error: FormatError,
    },
    /// The cache device holds something that is not a Cairn tier, and is
    /// not blank: nothing was written.
    #[error(
        "the cache device {device} is not empty and is not a Cairn tier ({found}); refusing to \
         format over it"
    )]
    Foreign {
        /// The cache device.
        device: String,
        /// What was found where the superblock belongs.
        found: String,
    },
    /// The cache device was formatted for another backing device.
    #[error(
        "the cache device {device} caches a backing device of {expected} blocks of {block_size} \
         bytes; {backing} has {found}: it belongs to another volume (or the backing device \
         changed size); give this tier a blank cache device"
    )]
    BackingMismatch {
        /// The cache device.
        device: String,
        /// The backing device.
        backing: String,
        /// Blocks the superblock names.
        expected: u64,
        /// Blocks the backing device has.
        found: u64,
        /// Block size.
        block_size: u32,
    },
    /// A setting, or a device for it, makes no tier: `setting` says which
    /// (so a caller can name its own field for it).
    #[error("{message}")]
    Setting {
        /// Which setting or device.
        setting: Setting,
        /// What is wrong, with the values.
        message: String,
    },
    /// Something else went wrong opening or checking a tier.
    #[error("{0}")]
    Invalid(String),
    /// The policy cannot be built.
    #[error("policy: {0}")]
    Policy(#[from] cairn_policy::ConfigError),
}

/// What a [`TierError::Setting`] is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Setting {
    /// The cache device (too small for the layout).
    Cache,
    /// The backing device (not whole blocks).
    Backing,
    /// `Layout::block_size`.
    BlockSize,
    /// `Layout::bucket_size`.
    BucketSize,
    /// `Options::shards`.
    Shards,
    /// `Options::overprovision`.
    Overprovision,
}
