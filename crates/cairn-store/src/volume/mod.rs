//! Volumes: block devices assembled from a [`VolumeSpec`], one stack per
//! export (see `docs/volumes.md` for the spec format).
//!
//! ```text
//! export ──► read cache (kind = "cache": DRAM, any policy, cost groups per part)
//!               └─► cache tier (kind = "tier": a cache device in front of `over`)
//!               └─► write path: log disk (kind = "log") ── NV write cache (an mmap'd region)
//!                     └─► devices: file · memory · throttled · striped · concat · ntl
//! ```
//!
//! [`Volume::open`] validates the spec (names, references, each device used
//! once, sizes), then builds each export's stack bottom up. A layer with an
//! on-disk format (log disk, NTL, a tier's cache device) looks for its magic:
//! found, the layer is opened and recovered; absent on storage that is blank
//! (new, sparse, or all zeroes), it is formatted; absent on storage that
//! holds anything else, the open fails and nothing is written.
//! [`Volume::close`] flushes every export, then destages and checkpoints
//! every log disk and checkpoints every tier, so the next open replays
//! nothing.

mod build;
pub mod files_spec;
mod marker;
mod named;
mod orphans;
pub mod spec;
mod types;
mod validate;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

pub use files_spec::{FilesSpec, SpillSpec};
pub use orphans::{OrphanedRegion, orphaned_regions};
pub use spec::{
    Admission, CacheSpec, Cleaner, ConcatSpec, DeviceSpec, ExportSpec, FileSpec, LogSpec,
    MemorySpec, NtlSpec, NvCacheSpec, ObjectsBackend, ObjectsCleaner, ObjectsFlush, ObjectsSpec,
    Partial, Persistence, StripedSpec, ThrottleProfile, ThrottledSpec, TierMode, TierSpec,
    TlsModeSpec, TlsSpec, VolumeSpec,
};
use types::{OpenLayer, OpenLog, OpenTier, StackLayer};
pub use types::{OpenOptions, VolumeError};

use crate::device::{Claim, Device, DirClaim, SharedDevice};
use crate::stats::{LayerCommand, LayerCommandError, LayerStats};
use crate::tier::Tier;

/// One assembled export.
#[derive(Clone)]
pub struct VolumeExport {
    /// The export's name.
    pub name: String,
    /// The spec's description, or the stack's.
    pub description: String,
    /// The top of the stack.
    pub device: SharedDevice,
    /// Refuse writes.
    pub read_only: bool,
}

impl std::fmt::Debug for VolumeExport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VolumeExport")
            .field("name", &self.name)
            .field("device", &self.device.describe())
            .field("read_only", &self.read_only)
            .finish_non_exhaustive()
    }
}

/// Every export of a spec, assembled. Dropping a volume without
/// [`Volume::close`] is a crash as far as the disks can tell (they recover at
/// the next open).
pub struct Volume {
    exports: Vec<VolumeExport>,
    /// Log disks and tiers, bottom of each stack first.
    layers: Vec<OpenLayer>,
    /// Per export (in `exports`' order), the layers with statistics, top
    /// of the stack first.
    stacks: Vec<Vec<StackLayer>>,
    /// Whether the layers time their requests (every layer's [`Timed`]
    /// reads it).
    timing: Arc<AtomicBool>,
    data_dir: PathBuf,
    notes: Vec<String>,
    warnings: Vec<String>,
    /// The data directory, claimed while the volume is open (a volume that
    /// keeps nothing on disk claims nothing).
    _claim: Option<DirClaim>,
}

impl Volume {
    /// Validates `spec` and assembles every export. A relative
    /// `spec.data_dir` is taken relative to `base` (the spec file's
    /// directory).
    pub fn open(
        spec: &VolumeSpec,
        base: &Path,
        options: &OpenOptions,
    ) -> Result<Self, VolumeError> {
        spec.validate()?;
        let data_dir = base.join(&spec.data_dir);
        // File exports write under the data directory (a spill, its map),
        // so a spec with any is never "all read-only", even with no block
        // export or only read-only ones.
        let all_read_only = spec.files.is_empty()
            && (options.read_only || spec.exports.iter().all(|e| e.read_only));
        let claim = claim_data_dir(spec, &data_dir, all_read_only)?;
        let mut builder = build::Builder {
            spec,
            data_dir: &data_dir,
            options,
            layers: Vec::new(),
            notes: Vec::new(),
            warnings: Vec::new(),
            stack: Vec::new(),
            read_only: false,
            timing: Arc::new(AtomicBool::new(true)),
        };
        let mut exports = Vec::with_capacity(spec.exports.len());
        let mut stacks = Vec::with_capacity(spec.exports.len());
        for export in &spec.exports {
            builder.read_only = options.read_only || export.read_only;
            let built = builder.build(&export.device)?;
            // Built bottom up: the top of the stack last.
            stacks.push(builder.stack.drain(..).rev().collect());
            exports.push(VolumeExport {
                name: export.name.clone(),
                description: export
                    .description
                    .clone()
                    .unwrap_or_else(|| built.device.describe()),
                device: built.device,
                read_only: builder.read_only,
            });
        }
        let build::Builder {
            layers,
            notes,
            warnings,
            timing,
            ..
        } = builder;
        Ok(Self {
            exports,
            layers,
            stacks,
            timing,
            data_dir,
            notes,
            warnings,
            _claim: claim,
        })
    }

    /// The exports, in spec order.
    pub fn exports(&self) -> &[VolumeExport] {
        &self.exports
    }

    /// A snapshot of every layer with statistics of export `index` (in
    /// [`Volume::exports`]' order), top of the stack first; empty for an
    /// index past the end.
    pub fn stats(&self, index: usize) -> Vec<LayerStats> {
        let Some(stack) = self.stacks.get(index) else {
            return Vec::new();
        };
        stack
            .iter()
            .map(|s| {
                let mut out = LayerStats::new(&s.name, s.layer.kind());
                s.layer.stats(&mut out);
                out.latency = s.times.latency();
                out
            })
            .collect()
    }

    /// Whether every layer times its reads, writes and flushes (on from
    /// the start; `cairn serve --no-stats` turns it off). Off, a layer's
    /// latency stops growing and a request pays one relaxed load per layer.
    pub fn set_layer_timing(&self, on: bool) {
        self.timing.store(on, Ordering::Relaxed);
    }

    /// Whether the layers time their requests.
    pub fn layer_timing(&self) -> bool {
        self.timing.load(Ordering::Relaxed)
    }

    /// Carries out `command` on the export `export`: on its layer `layer`
    /// when named, else on every layer of its stack that supports it (top
    /// first). A `flush` then flushes the export too. One line per layer
    /// of what was done.
    pub fn control(
        &self,
        export: &str,
        layer: Option<&str>,
        command: &LayerCommand,
    ) -> Result<Vec<String>, LayerCommandError> {
        let Some(index) = self.exports.iter().position(|e| e.name == export) else {
            let names: Vec<&str> = self.exports.iter().map(|e| e.name.as_str()).collect();
            return Err(LayerCommandError::NotFound(format!(
                "no export {export:?} (exports: {})",
                names.join(", ")
            )));
        };
        let stack = &self.stacks[index];
        let chosen: Vec<&StackLayer> = match layer {
            Some(name) => vec![stack.iter().find(|s| s.name == name).ok_or_else(|| {
                let names: Vec<&str> = stack.iter().map(|s| s.name.as_str()).collect();
                LayerCommandError::NotFound(format!(
                    "export {export:?} has no layer {name:?} with runtime commands (its layers: {})",
                    if names.is_empty() { "none".to_owned() } else { names.join(", ") }
                ))
            })?],
            None => stack.iter().collect(),
        };
        let mut done = Vec::new();
        let mut refused = Vec::new();
        for s in chosen {
            match s.layer.control(command) {
                Ok(line) => done.push(format!("{}: {line}", s.name)),
                Err(LayerCommandError::NotSupported { kind, why, .. }) if layer.is_none() => {
                    refused.push(format!("{} ({kind}): {why}", s.name));
                }
                Err(e) => return Err(e),
            }
        }
        if *command == LayerCommand::Flush {
            self.exports[index].device.flush().map_err(|e| {
                LayerCommandError::Failed(format!("flushing export {export:?}: {e}"))
            })?;
            done.push(format!("export {export:?}: flushed"));
        } else if done.is_empty() {
            return Err(LayerCommandError::NotSupportedByAny {
                command: command.name(),
                export: export.to_owned(),
                why: if refused.is_empty() {
                    "its stack has no cache or log layer".to_owned()
                } else {
                    refused.join("; ")
                },
            });
        }
        Ok(done)
    }

    /// The data directory, resolved.
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// What opening did, one line per layer that was formatted, recovered or
    /// repaired (for the log).
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// What the operator must not miss, one line each: a write cache that is
    /// volatile (RAM), a recovery after an unclean stop.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// The tiers (`kind = "tier"`), in the order they were built (bottom of
    /// each stack first), by device name.
    pub fn tiers(&self) -> impl Iterator<Item = (&str, &Tier)> {
        self.layers.iter().filter_map(|layer| match layer {
            OpenLayer::Tier(t) => Some((t.name.as_str(), &*t.tier)),
            OpenLayer::Log(_) | OpenLayer::Objects { .. } => None,
        })
    }

    /// One line per object volume of what it asked of the store, for the
    /// log at a stop: PUTs and their bytes against the bytes clients wrote
    /// (the backend write amplification), GETs, DELETEs.
    pub fn object_report(&self) -> Vec<String> {
        self.layers
            .iter()
            .filter_map(|layer| match layer {
                OpenLayer::Objects { name, disk } => Some((name, disk)),
                _ => None,
            })
            .map(|(name, disk)| {
                let (c, written) = disk.counts();
                let amplification = if written > 0 {
                    format!("{:.2}", c.put_bytes as f64 / written as f64)
                } else {
                    "-".into()
                };
                let local = disk.segcache_counts().map_or(String::new(), |l| {
                    format!(
                        "; local segment cache: {} blocks read from it, {} from the store, \
                         {} segments installed ({} fetched whole on a miss), {} of {} slots full",
                        l.hits, l.misses, l.installs, l.fetches, l.held, l.slots
                    )
                });
                format!(
                    "device.{name}: object volume: {} PUTs of {} bytes for {written} bytes written \
                     (write amplification {amplification}), {} GETs of {} bytes, {} DELETEs, \
                     {} blocks moved by the cleaner{local}",
                    c.puts,
                    c.put_bytes,
                    c.gets,
                    c.get_bytes,
                    c.deletes,
                    disk.cleaned_blocks()
                )
            })
            .collect()
    }

    /// One line per tier of what it did, for the log at a stop: hits,
    /// misses, hit ratio, dirty, cleaned, relocated, errors.
    pub fn tier_report(&self) -> Vec<String> {
        self.tiers()
            .map(|(name, tier)| {
                let m = tier.metrics();
                let line = format!(
                    "device.{name}: tier: {} hits, {} misses ({:.1} % hit ratio), {} dirty, \
                     {} cleaned, {} relocated, {} errors",
                    m.hits,
                    m.misses,
                    m.hit_ratio() * 100.0,
                    m.dirty_blocks,
                    m.cleaned_blocks,
                    m.relocated_blocks,
                    m.errors
                );
                match tier.failure() {
                    Some(why) => format!("{line}; fell back to pass-through: {why}"),
                    None => line,
                }
            })
            .collect()
    }

    /// Flushes every export, then closes every log disk (destage,
    /// checkpoint, clean-stop marker) and every tier (flush, checkpoint; a
    /// `pass-through` tier is detached), the top of each stack first.
    /// Call when no client is connected any more.
    pub fn close(&self) -> Result<(), VolumeError> {
        for export in &self.exports {
            export.device.flush().map_err(|e| {
                VolumeError::new(format!("export {:?}", export.name), format!("flush: {e}"))
            })?;
        }
        for layer in self.layers.iter().rev() {
            match layer {
                OpenLayer::Log(log) if !log.read_only => close_log(log)?,
                OpenLayer::Log(_) => {}
                OpenLayer::Tier(tier) => close_tier(tier)?,
                OpenLayer::Objects { name, disk } => disk.close().map_err(|e| {
                    VolumeError::new(
                        format!("device.{name}"),
                        format!("closing the object volume: {e}"),
                    )
                })?,
            }
        }
        Ok(())
    }
}

/// Destages and checkpoints a log disk, then records that it closed
/// cleanly (and removes a volatile NV region).
fn close_log(log: &OpenLog) -> Result<(), VolumeError> {
    let field = format!("device.{}", log.name);
    log.disk
        .close()
        .map_err(|e| VolumeError::new(&field, format!("closing the log disk: {e}")))?;
    marker::write(&log.marker, log.disk.id())
        .map_err(|e| VolumeError::new(&field, format!("{}: {e}", log.marker.display())))?;
    if let Some(region) = &log.volatile_region {
        // Still mapped by the disk until it is dropped; unlinking
        // only frees the memory then. The next open finds it
        // missing after a clean stop, and formats a new one.
        let _ = std::fs::remove_file(orphans::owner_file(region));
        match std::fs::remove_file(region) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(VolumeError::new(
                    format!("{field}.nv_cache"),
                    format!("removing the volatile region {}: {e}", region.display()),
                ));
            }
        }
    }
    Ok(())
}

/// Stops a tier cleanly: its worker stopped, both devices flushed, a
/// checkpoint written (the next open is warm and replays nothing). A
/// `pass-through` tier is detached first: every dirty block written back and
/// the cache flagged stale, so the next open formats it afresh and the
/// backing device may be served without it meanwhile.
fn close_tier(t: &OpenTier) -> Result<(), VolumeError> {
    let field = format!("device.{}", t.name);
    if t.detach_at_close && !t.tier.failed() {
        t.tier
            .detach()
            .map_err(|e| VolumeError::new(&field, format!("detaching the tier: {e}")))?;
    }
    t.tier
        .close()
        .map_err(|e| VolumeError::new(&field, format!("closing the tier: {e}")))
}

/// Makes the data directory (a read-only volume only checks that it is
/// there), then claims it: first of all, before any file is probed or
/// changed, one server per data directory (each file is claimed again as it
/// is opened, for specs whose files live elsewhere). A volume that keeps
/// nothing on disk claims nothing.
fn claim_data_dir(
    spec: &VolumeSpec,
    data_dir: &Path,
    all_read_only: bool,
) -> Result<Option<DirClaim>, VolumeError> {
    if all_read_only {
        if !data_dir.is_dir() {
            return Err(VolumeError::new(
                "data_dir",
                format!(
                    "{} does not exist: a read-only volume creates nothing",
                    data_dir.display()
                ),
            ));
        }
    } else {
        std::fs::create_dir_all(data_dir).map_err(|e| {
            VolumeError::new("data_dir", format!("creating {}: {e}", data_dir.display()))
        })?;
    }
    let claim = if spec.devices.values().any(DeviceSpec::is_persistent) {
        let how = if all_read_only {
            Claim::Shared
        } else {
            Claim::Exclusive
        };
        let claim = DirClaim::take(data_dir, how)
            .map_err(|e| VolumeError::new("data_dir", format!("the data directory {e}")))?;
        Some(claim)
    } else {
        None
    };
    Ok(claim)
}
