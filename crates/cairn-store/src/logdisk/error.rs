//! Why a log disk operation failed, and how that reads as a device error.

use super::format::FormatError;
use super::nv::NvError;
use crate::device::{DeviceError, DeviceOp};

/// Why a log disk operation failed.
#[derive(Debug, thiserror::Error)]
pub enum LogDiskError {
    /// The device failed.
    #[error(transparent)]
    Device(#[from] DeviceError),
    /// An on-disk structure did not decode.
    #[error(transparent)]
    Format(#[from] FormatError),
    /// The NV cache region could not be used.
    #[error(transparent)]
    Nv(#[from] NvError),
    /// Neither checkpoint slot holds a valid checkpoint.
    #[error("no valid checkpoint: slot A: {a}; slot B: {b}")]
    NoCheckpoint {
        /// Why slot A was refused.
        a: String,
        /// Why slot B was refused.
        b: String,
    },
    /// The device is too small for the geometry.
    #[error("the geometry needs {need} bytes, the device has {have}")]
    TooSmall {
        /// Bytes needed.
        need: u64,
        /// Bytes present.
        have: u64,
    },
    /// The cleaner could not free a segment: the disk is full of live data.
    #[error("no free segment: the log is full of live data (cleaning freed nothing)")]
    NoSpace,
    /// Stored data failed its checksum.
    #[error("corrupted: {0}")]
    Corrupt(String),
    /// A bad argument.
    #[error("{0}")]
    Invalid(String),
    /// The disk was opened read-only ([`LogDisk::open_read_only`](super::LogDisk::open_read_only)).
    #[error("the log disk is open read-only")]
    ReadOnly,
    /// A background segment write failed earlier; the disk takes no more
    /// device operations (reopen it: the NV cache still holds the data).
    #[error("a background segment write failed ({0}); reopen the log disk to recover")]
    Failed(String),
}

pub(super) fn to_device_error(e: LogDiskError, op: DeviceOp, offset: u64, len: u64) -> DeviceError {
    match e {
        LogDiskError::Device(e) => e,
        LogDiskError::ReadOnly => DeviceError::ReadOnly { op },
        LogDiskError::NoSpace => DeviceError::Io {
            op,
            offset,
            len,
            device: "log disk".into(),
            source: std::io::Error::new(std::io::ErrorKind::StorageFull, e.to_string()),
        },
        other => DeviceError::Corrupt {
            op,
            offset,
            len,
            detail: other.to_string(),
        },
    }
}
