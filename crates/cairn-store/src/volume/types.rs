//! The volume's own types, beneath the builder and the validation that
//! both use them: the error every step reports, the open options, and the
//! log disks and tiers kept to be closed.

use std::path::PathBuf;
use std::sync::Arc;

use crate::device::SharedDevice;
use crate::logdisk::LogDisk;
use crate::tier::Tier;

/// Why a volume could not be opened or closed: `field` is where in the spec
/// (`device.log.nv_cache.size`, `export[0].device`), `message` what is wrong,
/// naming the file involved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct VolumeError {
    /// The spec field the problem belongs to.
    pub field: String,
    /// What is wrong, and with which file.
    pub message: String,
}

impl VolumeError {
    pub(super) fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

/// Choices made when opening, beyond the spec.
#[derive(Clone, Debug, Default)]
pub struct OpenOptions {
    /// Open a log disk whose NV write cache region is missing although the
    /// disk was not closed cleanly, formatting a new cache: the writes
    /// acknowledged only to the lost cache are given up. Off by default (the
    /// open fails and says so).
    pub accept_lost_nv_cache: bool,
    /// Open every export read-only (as if each were `read_only = true` in
    /// the spec): see [`ExportSpec::read_only`].
    pub read_only: bool,
}

/// A log disk in a volume, kept to be closed.
pub(super) struct OpenLog {
    pub name: String,
    pub disk: Arc<LogDisk<SharedDevice>>,
    /// Written after a clean close; read (and removed) at the next open to
    /// tell a clean stop from a crash.
    pub marker: PathBuf,
    /// A volatile NV region (on RAM), removed after a clean close: nothing
    /// in it is needed then, and a stopped server leaves no RAM behind.
    pub volatile_region: Option<PathBuf>,
    /// Opened read-only: nothing is written at close.
    pub read_only: bool,
}

/// A tier in a volume, kept to be closed.
pub(super) struct OpenTier {
    pub name: String,
    pub tier: Arc<Tier>,
    /// The spec says `pass-through`: the cache is detached at a clean stop
    /// (written back, flagged stale), so the backing device stands alone.
    pub detach_at_close: bool,
}

/// A layer that needs a clean stop, in the order the stacks were built
/// (bottom up): closed in reverse, so the top of each stack first.
pub(super) enum OpenLayer {
    Log(OpenLog),
    Tier(OpenTier),
    /// An object volume: closed to release its lease and checkpoint.
    Objects {
        name: String,
        disk: Arc<crate::objdisk::ObjectDisk>,
    },
}

/// A layer of an export's stack with statistics (and runtime commands):
/// its name in the spec, the layer, and its latency histograms (recorded
/// by the [`crate::stats::Timed`] in front of it).
#[derive(Clone)]
pub(super) struct StackLayer {
    pub name: String,
    pub layer: Arc<dyn crate::stats::Layer>,
    pub times: Arc<crate::stats::LayerTimes>,
}
