//! [`ObjectDiskError`]: why an object disk did not open.

use cairn_objects::{LeaseError, ObjectError};

use crate::codec::FormatError;

/// Why an object disk did not open or stopped.
#[derive(Debug, thiserror::Error)]
pub enum ObjectDiskError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] ObjectError),
    /// The lease was refused.
    #[error(transparent)]
    Lease(#[from] LeaseError),
    /// An object does not decode.
    #[error("{key}: {source}")]
    Format {
        /// The object's key.
        key: String,
        /// What is wrong.
        source: FormatError,
    },
    /// Objects that contradict each other.
    #[error("{0}")]
    Inconsistent(String),
    /// No volume under the prefix, and none to create.
    #[error("{store}: no object volume at {key} (give a size to create one)")]
    NoVolume {
        /// The store.
        store: String,
        /// The volume record's key.
        key: String,
    },
    /// No volume under the prefix, and a read-only open creates none.
    #[error("{store}: no object volume at {key} (a read-only open creates nothing)")]
    NoVolumeToRead {
        /// The store.
        store: String,
        /// The volume record's key.
        key: String,
    },
    /// The local write log failed or does not belong to the volume.
    #[error("the local write log: {0}")]
    Log(crate::device::DeviceError),
    /// The local segment cache failed or does not belong to the volume.
    #[error("the local segment cache: {0}")]
    Cache(super::SegCacheError),
    /// The volume exists with another geometry than asked for.
    #[error("{key}: the volume is {found}; asked for {asked}")]
    Mismatch {
        /// The volume record's key.
        key: String,
        /// What the store holds.
        found: String,
        /// What the options say.
        asked: String,
    },
}

impl ObjectDiskError {
    pub(crate) fn format(key: &str, source: FormatError) -> Self {
        Self::Format {
            key: key.to_owned(),
            source,
        }
    }
}
