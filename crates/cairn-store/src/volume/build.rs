//! Assembling one export's stack from the spec, bottom up: one short
//! function per device kind. A layer with an on-disk format opens itself
//! (`logdisk::open`, `ntl::open`: probe, check geometry, recover or format);
//! this file only says what the spec asks of it and turns its typed errors
//! into [`VolumeError`]s naming the spec field.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use cairn_policy::Bytes;

use super::marker;
use super::orphans::owner_file;
use super::spec::{
    CacheSpec, ConcatSpec, DeviceSpec, FileSpec, LogSpec, NtlSpec, NvCacheSpec, StripedSpec,
    ThrottledSpec, TierMode, TierSpec, VolumeSpec,
};
mod objects;

use super::types::{OpenLayer, OpenLog, OpenOptions, OpenTier, StackLayer, VolumeError};
use super::validate::{cache_config, cache_error, throttle_of};
use crate::cache::{BlockCache, Placement, SingleDevice};
use crate::device::probe::{self, on_ram};
use crate::device::{
    AligningDevice, Claim, ConcatDevice, Device, FileDevice, FileOptions, MemoryDevice, Pace,
    SharedDevice, StripedDevice, ThrottledDevice,
};
use crate::logdisk::open::{self as log_open, Foreign, NvFile, Opened, Request, Want};
use crate::logdisk::{self, LogDisk};
use crate::ntl::{self, NtlDevice, open as ntl_open};
use crate::stats::{Layer, LayerTimes, Timed};
use crate::tier::open::{self as tier_open, Probe};
use crate::tier::{self, Tier, TierError};

/// A device being assembled, and what lies under it.
pub(super) struct Built {
    pub(super) device: SharedDevice,
    /// The storage at the bottom, to judge whether formatting would destroy
    /// anything.
    leaves: Vec<Leaf>,
    /// Which part holds each byte, when the device is parts laid out by
    /// offset (striped, concatenated, or a throttle over those): the cost
    /// groups of a cache over it.
    placement: Option<Arc<dyn Placement>>,
}

enum Leaf {
    /// A file or block device: blank if sparse or all zeroes. The length it
    /// had before this open grew it, if it did (to undo the growth when the
    /// file turns out not to be ours).
    File(PathBuf, Option<u64>),
    /// Storage that starts empty (memory) or was formatted just now (NTL).
    Fresh,
    /// A layer holding data already (an NTL image opened with its contents).
    Used(String),
}

pub(super) struct Builder<'a> {
    pub(super) spec: &'a VolumeSpec,
    pub(super) data_dir: &'a Path,
    pub(super) options: &'a OpenOptions,
    /// Log disks and tiers, as built (bottom of each stack first).
    pub(super) layers: Vec<OpenLayer>,
    pub(super) notes: Vec<String>,
    pub(super) warnings: Vec<String>,
    /// The layers with statistics of the stacks built so far, bottom of
    /// each first (`Volume::open` takes each export's share).
    pub(super) stack: Vec<StackLayer>,
    /// The stack being built serves a read-only export: every file is opened
    /// `O_RDONLY` with a shared claim, and nothing is formatted or written.
    pub(super) read_only: bool,
    /// The volume's switch of its layers' timing ([`Timed`]).
    pub(super) timing: Arc<AtomicBool>,
}

impl Builder<'_> {
    /// The layer `layer`, named `name` in the spec, on its export's stack
    /// (for statistics and runtime commands), and `device` — the same
    /// layer — behind a [`Timed`] that times its requests: what the layer
    /// above it, or the export, calls.
    fn stacked<D: Device + 'static>(
        &mut self,
        name: &str,
        layer: Arc<dyn Layer>,
        device: D,
    ) -> SharedDevice {
        let times = Arc::new(LayerTimes::default());
        self.stack.push(StackLayer {
            name: name.to_owned(),
            layer,
            times: Arc::clone(&times),
        });
        Arc::new(Timed::new(device, times, Arc::clone(&self.timing)))
    }

    fn path(&self, path: &Path) -> PathBuf {
        self.data_dir.join(path)
    }

    /// The stack under device `name`, bottom up.
    pub(super) fn build(&mut self, name: &str) -> Result<Built, VolumeError> {
        let spec = self.spec;
        let field = format!("device.{name}");
        match &spec.devices[name] {
            DeviceSpec::File(f) => self.file(name, &field, f),
            DeviceSpec::Memory(m) => Ok(Built {
                device: Arc::new(MemoryDevice::new(m.size.get())),
                leaves: vec![Leaf::Fresh],
                placement: None,
            }),
            DeviceSpec::Throttled(t) => self.throttled(t),
            DeviceSpec::Striped(s) => self.striped(&field, s),
            DeviceSpec::Concat(c) => self.concat(&field, c),
            DeviceSpec::Ntl(n) => self.ntl(name, &field, n),
            DeviceSpec::Log(l) => self.log(name, &field, l),
            DeviceSpec::Cache(c) => self.cache(name, &field, c),
            DeviceSpec::Tier(t) => self.tier(name, &field, t),
            DeviceSpec::Objects(o) => self.objects(name, &field, o),
        }
    }

    /// A file of an object volume's under `data_dir`: `path`, or `default`.
    fn local_file(
        &mut self,
        field: &str,
        path: Option<&PathBuf>,
        default: String,
        size: Bytes,
    ) -> Result<FileDevice, VolumeError> {
        let spec = FileSpec {
            path: path.cloned().unwrap_or_else(|| PathBuf::from(default)),
            size: Some(size),
            direct: false,
        };
        Ok(self.file_device(field, &spec)?.0)
    }

    fn throttled(&mut self, t: &ThrottledSpec) -> Result<Built, VolumeError> {
        let inner = self.build(&t.over)?;
        let throttle = throttle_of(t);
        Ok(Built {
            device: Arc::new(ThrottledDevice::new(inner.device, throttle, Pace::Sleep)),
            leaves: inner.leaves,
            placement: inner.placement,
        })
    }

    fn striped(&mut self, field: &str, s: &StripedSpec) -> Result<Built, VolumeError> {
        let (parts, leaves) = self.parts(&s.parts)?;
        let device =
            StripedDevice::new(parts, s.stripe.get()).map_err(|e| VolumeError::new(field, e))?;
        if device.is_empty() {
            return Err(VolumeError::new(
                format!("{field}.stripe"),
                format!("no part holds one whole {} stripe", s.stripe),
            ));
        }
        let device = Arc::new(device);
        Ok(Built {
            device: device.clone(),
            leaves,
            placement: Some(device),
        })
    }

    fn concat(&mut self, field: &str, c: &ConcatSpec) -> Result<Built, VolumeError> {
        let (parts, leaves) = self.parts(&c.parts)?;
        let device = ConcatDevice::new(parts).map_err(|e| VolumeError::new(field, e))?;
        let device = Arc::new(device);
        Ok(Built {
            device: device.clone(),
            leaves,
            placement: Some(device),
        })
    }

    fn cache(&mut self, name: &str, field: &str, c: &CacheSpec) -> Result<Built, VolumeError> {
        let inner = self.build(&c.over)?;
        let placement = inner
            .placement
            .clone()
            .unwrap_or_else(|| Arc::new(SingleDevice));
        let cache = BlockCache::new(inner.device, &cache_config(c, placement))
            .map_err(|e| cache_error(name, &e))?;
        self.notes.push(format!(
            "{field}: {} of {} cost group(s)",
            cache.describe(),
            cache.costs().len()
        ));
        let cache = Arc::new(cache);
        let device = self.stacked(name, Arc::clone(&cache) as _, cache);
        Ok(Built {
            device,
            leaves: inner.leaves,
            placement: None,
        })
    }

    fn parts(&mut self, names: &[String]) -> Result<(Vec<SharedDevice>, Vec<Leaf>), VolumeError> {
        let mut parts = Vec::with_capacity(names.len());
        let mut leaves = Vec::new();
        for part in names {
            let built = self.build(part)?;
            parts.push(built.device);
            leaves.extend(built.leaves);
        }
        Ok((parts, leaves))
    }

    /// A file; one opened `O_DIRECT` with no log disk or tier above it to
    /// align its requests under an [`AligningDevice`], which does.
    fn file(&mut self, name: &str, field: &str, f: &FileSpec) -> Result<Built, VolumeError> {
        let (device, leaf) = self.file_device(field, f)?;
        let device: SharedDevice = if self.spec.unaligned_direct_files().contains(name) {
            let need = device.direct_alignment();
            let aligning = AligningDevice::new(device, need)
                .map_err(|e| VolumeError::new(format!("{field}.direct"), e))?;
            self.notes.push(format!(
                "{field}: O_DIRECT with no log disk or tier above it: a request that is not in \
                 whole aligned {}-byte blocks is bounced, and a write of part of a block is a \
                 read-modify-write (a buffer not aligned to {} bytes is copied)",
                need.offset, need.memory
            ));
            Arc::new(aligning)
        } else {
            Arc::new(device)
        };
        Ok(Built {
            device,
            leaves: vec![leaf],
            placement: None,
        })
    }

    /// The file `f` opened (created or grown to its size), and its leaf.
    fn file_device(
        &mut self,
        field: &str,
        f: &FileSpec,
    ) -> Result<(FileDevice, Leaf), VolumeError> {
        let path = self.path(&f.path);
        let before = std::fs::metadata(&path)
            .ok()
            .filter(|m| m.is_file() && m.len() > 0)
            .map(|m| m.len())
            .filter(|&len| f.size.is_some_and(|size| size.get() > len));
        let options = FileOptions {
            create_len: if self.read_only {
                None
            } else {
                f.size.map(Bytes::get)
            },
            direct: f.direct,
            read_only: self.read_only,
            claim: if self.read_only {
                Claim::Shared
            } else {
                Claim::Exclusive
            },
        };
        let device = FileDevice::open(&path, &options)
            .map_err(|e| VolumeError::new(format!("{field}.path"), e.to_string()))?;
        if device.is_empty() {
            return Err(VolumeError::new(
                format!("{field}.size"),
                format!(
                    "{} is empty: give a size to create or grow it",
                    path.display()
                ),
            ));
        }
        if let Some(size) = f.size
            && device.len() > size.get()
        {
            self.notes.push(format!(
                "{field}: {} is {} bytes, larger than its size {size}; the whole file is used",
                path.display(),
                device.len()
            ));
        }
        Ok((device, Leaf::File(path, before)))
    }

    /// An NTL image: opened, formatted if blank, or refused (`ntl::open`).
    fn ntl(&mut self, name: &str, field: &str, n: &NtlSpec) -> Result<Built, VolumeError> {
        let path = self.ntl_path(name, n);
        let block = n.block_size.get();
        let want = ntl_open::Want {
            geometry: ntl::Geometry {
                block_size: block,
                lbas: n.size.get() / block,
                data_blocks: n.size.get() / block + n.spare_blocks,
            },
            persistence: n.persistence.into(),
            huge_pages: n.huge_pages,
            read_only: self.read_only,
        };
        let (btt, opened) = ntl_open::open_or_format(&path, &want)
            .map_err(|e| ntl_error(field, &path, self.read_only, e))?;
        let shown = path.display();
        let leaf = match opened {
            ntl_open::Opened::Formatted => {
                self.notes.push(format!(
                    "{field}: formatted the NTL image {shown} ({} blocks of {block} bytes)",
                    want.geometry.lbas
                ));
                Leaf::Fresh
            }
            ntl_open::Opened::Opened { huge_pages } => {
                if let Some((pages, took)) = huge_pages {
                    self.notes
                        .push(format!("{field}: {pages}, in {:.2} s", took.as_secs_f64()));
                }
                let how = if self.read_only { " read-only" } else { "" };
                self.notes
                    .push(format!("{field}: opened the NTL image {shown}{how}"));
                Leaf::Used(format!("the NTL image {shown}"))
            }
        };
        self.ntl_warning(field, &path);
        Ok(Built {
            device: Arc::new(NtlDevice::new(btt)),
            leaves: vec![leaf],
            placement: None,
        })
    }

    /// A log disk over its device: recovered, formatted if the storage
    /// under it is blank, or refused (`logdisk::open`). Read-only, it is
    /// recovered in memory and nothing is written — not a checkpoint, not
    /// the marker, not the NV region.
    fn log(&mut self, name: &str, field: &str, l: &LogSpec) -> Result<Built, VolumeError> {
        let inner = self.build(&l.over)?;
        let device = inner.device;
        let nv = match &l.nv_cache {
            Some(nv) => Some((self.nv_path(field, name, nv)?, nv)),
            None => None,
        };
        let marker = marker::path(self.data_dir, name);
        let request = Request {
            want: Want {
                block_size: l.block_size.get(),
                segment_size: l.segment_size.get(),
                size: l.size.map(Bytes::get),
            },
            nv: nv.as_ref().map(|(path, nv)| NvFile {
                path,
                size: nv.size.get(),
                persistence: nv.persistence.into(),
            }),
            options: log_options(l),
            closed_cleanly: marker::read(&marker),
            accept_lost_nv_cache: self.options.accept_lost_nv_cache,
            read_only: self.read_only,
            may_hold_data: past_the_head_unseen(&inner.leaves),
        };
        let (disk, opened) =
            log_open::open_or_format(&device, &request, || foreign_under(&inner.leaves))
                .map_err(|e| log_error(field, l, &device, &request, e))?;
        self.log_notes(field, &disk, opened, nv.as_ref());
        let mut volatile_region = None;
        if !self.read_only {
            if let Some((path, nv)) = &nv {
                self.nv_notes(field, path, nv);
                if nv.volatile && nv.path.is_none() && on_ram(path) {
                    // Who owns this RAM, for `orphaned_regions` to judge later.
                    let owner = std::fs::canonicalize(self.data_dir)
                        .unwrap_or_else(|_| self.data_dir.to_path_buf());
                    let _ = std::fs::write(owner_file(path), format!("{}\n", owner.display()));
                }
                if nv.volatile && on_ram(path) {
                    volatile_region = Some(path.clone());
                }
            }
            // From here on the disk may take writes: a clean-close marker
            // from an earlier run no longer describes it.
            marker::remove(&marker)
                .map_err(|e| VolumeError::new(field, format!("{}: {e}", marker.display())))?;
        }
        let disk = Arc::new(disk);
        let timed = self.stacked(name, Arc::clone(&disk) as _, Arc::clone(&disk));
        self.layers.push(OpenLayer::Log(OpenLog {
            name: name.to_owned(),
            disk,
            marker,
            volatile_region,
            read_only: self.read_only,
        }));
        Ok(Built {
            device: timed,
            leaves: vec![Leaf::Used(format!("the log disk device.{name}"))],
            placement: None,
        })
    }

    /// A tier: its cache device's stack (`cache`) built and judged (a
    /// tier's superblock; else blank, by the tier's probe of its first MiB
    /// and by every file under it, or refused with nothing written), then
    /// its backing stack (`over`), then the tier opened, recovered or
    /// formatted (`tier::open`), its worker running. Never read-only: even
    /// a read writes the tier's journal (promotions, the policy's
    /// evictions).
    fn tier(&mut self, name: &str, field: &str, t: &TierSpec) -> Result<Built, VolumeError> {
        if self.read_only {
            return Err(VolumeError::new(
                field,
                "a tier cannot be served read-only (read_only = true or --read-only): \
                 it writes its cache device even to serve reads (promotions, evictions, its \
                 journal). Serve the export read-write, or export the backing device alone \
                 once the tier is detached (mode = \"pass-through\", one start and clean stop)",
            ));
        }
        // The cache device first: refused, it leaves the backing device as
        // it was (not even grown to its `size`).
        let cache = self.build(&t.cache)?;
        let marker = self.data_dir.join(format!("{name}.tier-failed"));
        let (ours, failed_before) = self.judge_cache(field, &cache, &marker)?;
        if !ours && !metadata_fits(cache.device.len(), t) {
            return Err(VolumeError::new(
                format!("{field}.cache"),
                format!(
                    "the cache device {} ({} bytes) is too small for the tier's metadata and \
                     two {} buckets",
                    cache.device.describe(),
                    cache.device.len(),
                    t.bucket_size
                ),
            ));
        }
        let backing = self.build(&t.over)?;
        let len = backing.device.len();
        if !ours && (len == 0 || !len.is_multiple_of(t.block_size.get())) {
            return Err(VolumeError::new(
                format!("{field}.over"),
                format!(
                    "{} holds {len} bytes, not a whole number of {} blocks",
                    backing.device.describe(),
                    t.block_size
                ),
            ));
        }
        let want = tier_open::Want {
            layout: tier::Layout {
                block_size: t.block_size.get() as u32,
                bucket_size: t.bucket_size.get() as u32,
                journal_blocks: 0,
            },
            options: tier::Options {
                mode: t.mode.into(),
                policy: t.policy.0.clone(),
                admission: t.admission.0.clone(),
                sequential_cutoff_bytes: t.sequential_cutoff.get(),
                writeback_percent: t.writeback_percent,
                overprovision: t.overprovision,
                shards: t.shards,
                background: true,
                ..tier::Options::default()
            },
            marker: Some(marker),
        };
        let opened = tier_open::open_or_format(cache.device, Arc::clone(&backing.device), &want)
            .map_err(|e| {
                if matches!(e, TierError::BackingMismatch { .. }) {
                    // Nothing was written; a backing file grown by this open
                    // (its spec's size changed) goes back to its length.
                    shrink_grown(&backing.leaves);
                }
                tier_error(field, t, e)
            })?;
        self.tier_notes(field, t, &opened, failed_before);
        let mut leaves = backing.leaves;
        if opened.recovered().dirty > 0 {
            // Blocks only the cache device holds: the tier is not blank even
            // where the backing device is.
            leaves.push(Leaf::Used(format!(
                "the tier device.{name} ({} dirty blocks on its cache device)",
                opened.recovered().dirty
            )));
        }
        let opened = Arc::new(opened);
        let device = self.stacked(name, Arc::clone(&opened) as _, Arc::clone(&opened));
        self.layers.push(OpenLayer::Tier(OpenTier {
            name: name.to_owned(),
            tier: opened,
            detach_at_close: t.mode == TierMode::PassThrough,
        }));
        Ok(Built {
            device,
            leaves,
            placement: None,
        })
    }

    /// Whether the tier may open its cache device: a tier's superblock is
    /// the tier's to judge; anything else must be blank, both to the tier's
    /// probe (its first MiB) and in every file under it (the whole file),
    /// or the open is refused, naming the file, with nothing written (a file
    /// grown by `size` is shrunk back). A failure marker that names another
    /// cache device is removed. Returns whether the device holds a tier, and
    /// the marker's text when it names this one (the open then formats the
    /// cache afresh).
    fn judge_cache(
        &mut self,
        field: &str,
        cache: &Built,
        marker: &Path,
    ) -> Result<(bool, Option<String>), VolumeError> {
        let cache_field = format!("{field}.cache");
        let found = tier_open::probe(&*cache.device).map_err(|e| {
            VolumeError::new(
                &cache_field,
                format!("reading {}: {e}", cache.device.describe()),
            )
        })?;
        let text = std::fs::read_to_string(marker).ok();
        if let Probe::Ours(sb) = &found {
            let id = format!("{:016x}", sb.cache_id);
            return Ok(match text {
                Some(text) if text.contains(&id) => (true, Some(text.trim().to_owned())),
                Some(_) => {
                    self.remove_stale_marker(field, marker);
                    (true, None)
                }
                None => (true, None),
            });
        }
        if let Probe::Interrupted = found {
            // A format of ours that stopped before its superblock: formatted
            // again by the tier.
            if text.is_some() {
                self.remove_stale_marker(field, marker);
            }
            return Ok((false, None));
        }
        let under = foreign_under(&cache.leaves).map_err(|e| match e {
            log_open::OpenError::Under { what, error } => {
                VolumeError::new(&cache_field, format!("{what}: {error}"))
            }
            e => VolumeError::new(&cache_field, e.to_string()),
        })?;
        match (under, found) {
            (Some(foreign), _) => Err(VolumeError::new(
                cache_field,
                foreign_message(foreign, "tier"),
            )),
            (None, Probe::Foreign(found)) => Err(VolumeError::new(
                cache_field,
                format!(
                    "{} is not empty and is not a Cairn tier ({found}); refusing to format over it",
                    cache.device.describe()
                ),
            )),
            (None, _) => {
                if text.is_some() {
                    self.remove_stale_marker(field, marker);
                }
                Ok((false, None))
            }
        }
    }

    /// Removes a failure marker naming a cache device that is no longer
    /// there (replaced by a blank one, or formatted afresh since).
    fn remove_stale_marker(&mut self, field: &str, marker: &Path) {
        if std::fs::remove_file(marker).is_ok() {
            self.notes.push(format!(
                "{field}: removed {}, which named another cache device",
                marker.display()
            ));
        }
    }

    /// Says what opening the tier did: formatted (afresh after a detach or a
    /// failure), opened after a clean stop, or (a warning) recovered after
    /// an unclean one; and a mode change.
    fn tier_notes(&mut self, field: &str, t: &TierSpec, tier: &Tier, failed: Option<String>) {
        let r = tier.recovered();
        let described = tier.describe();
        if r.dropped_stale {
            match failed {
                Some(text) => self.warnings.push(format!(
                    "{field}: the cache device failed in an earlier run ({text}): every block it \
                     could give back was written to the backing device then; formatted it \
                     afresh: {described}"
                )),
                None => self.notes.push(format!(
                    "{field}: the cache device had been detached (its contents are stale): \
                     formatted afresh: {described}"
                )),
            }
        } else if r.formatted {
            self.notes.push(format!("{field}: formatted {described}"));
        } else if r.clean {
            self.notes.push(format!(
                "{field}: opened after a clean stop: {} blocks warm, {} dirty: {described}",
                r.cached, r.dirty
            ));
        } else {
            self.warnings.push(format!(
                "{field}: recovered after an unclean stop: {} journal records replayed from {} \
                 journal blocks, {} torn records dropped; {} blocks warm, {} dirty: {described}",
                r.records, r.journal_blocks, r.torn, r.cached, r.dirty
            ));
        }
        if r.not_restored > 0 {
            self.notes.push(format!(
                "{field}: {} cached blocks were not taken back by the policy (dropped; dirty ones \
                 written back first)",
                r.not_restored
            ));
        }
        let mode: tier::Mode = t.mode.into();
        if let Some(last) = r.last_mode
            && last != mode
            && !r.formatted
        {
            let cleaned = if mode == tier::Mode::WriteBack {
                ""
            } else {
                " (dirty blocks written back first)"
            };
            self.notes.push(format!(
                "{field}: mode changed from {last} to {mode}{cleaned}"
            ));
        }
        if mode == tier::Mode::PassThrough {
            self.notes.push(format!(
                "{field}: pass-through: no dirty blocks; the cache is detached at the next clean \
                 stop, after which the backing device may be served without the tier"
            ));
        }
        let g = tier.geometry();
        let spec_bucket = t.bucket_size.get();
        let bucket = u64::from(g.bucket_blocks) * u64::from(g.block_size);
        if u64::from(g.block_size) != t.block_size.get() || bucket != spec_bucket {
            self.warnings.push(format!(
                "{field}: the cache device was formatted with block_size {} and bucket_size \
                 {bucket}; the spec's {} and {} apply only to a blank cache device (the layout \
                 is kept)",
                g.block_size, t.block_size, t.bucket_size
            ));
        }
    }

    /// Says what opening the log disk did: formatted, recovered after a
    /// clean stop, or (a warning) after an unclean one.
    fn log_notes(
        &mut self,
        field: &str,
        disk: &LogDisk<SharedDevice>,
        opened: Opened,
        nv: Option<&(PathBuf, &NvCacheSpec)>,
    ) {
        let recovered = disk.recovered();
        let clean = match opened {
            Opened::Formatted => {
                self.notes
                    .push(format!("{field}: formatted {}", disk.describe()));
                return;
            }
            Opened::Recovered { clean } if self.read_only => {
                if clean {
                    self.notes.push(format!(
                        "{field}: opened read-only after a clean stop: {}",
                        disk.describe()
                    ));
                } else {
                    self.warnings.push(format!(
                        "{field}: opened read-only after an unclean stop: {} segment writes rolled \
                         forward and {} blocks taken from the NV write cache, in memory only (nothing \
                         is written back until it is opened read-write)",
                        recovered.segment_writes, recovered.nv_blocks
                    ));
                }
                return;
            }
            Opened::Recovered { clean } => {
                self.notes
                    .push(format!("{field}: recovered {}", disk.describe()));
                clean
            }
            Opened::NvReformatted { clean } => {
                self.notes.push(format!(
                    "{field}: the NV write cache {} was missing; {}, so a new one was formatted; recovered {}",
                    nv.map_or_else(String::new, |(path, _)| path.display().to_string()),
                    if clean {
                        "the disk was stopped cleanly (nothing was lost)"
                    } else {
                        "its lost writes were accepted as lost"
                    },
                    disk.describe()
                ));
                clean
            }
        };
        let segments = disk.geometry().segments;
        if clean {
            self.notes.push(format!(
                "{field}: opened after a clean stop (recovery read {} of {segments} segments)",
                recovered.segments_read
            ));
        } else {
            self.warnings.push(format!(
                "{field}: recovered after an unclean stop: {} of {segments} segments read, {} segment \
                 writes rolled forward, {} blocks replayed from the NV write cache",
                recovered.segments_read, recovered.segment_writes, recovered.nv_blocks
            ));
        }
    }

    /// Where the NV region of log disk `name` lives, checked against what
    /// the spec says it may be: a region on RAM only when `volatile` says so.
    fn nv_path(&self, field: &str, name: &str, nv: &NvCacheSpec) -> Result<PathBuf, VolumeError> {
        let shm = Path::new("/dev/shm");
        let path = match &nv.path {
            Some(path) => self.path(path),
            None if nv.volatile && shm.is_dir() => {
                let absolute = std::fs::canonicalize(self.data_dir).map_err(|e| {
                    VolumeError::new("data_dir", format!("{}: {e}", self.data_dir.display()))
                })?;
                let id = crc32c::crc32c(absolute.as_os_str().as_encoded_bytes());
                shm.join(format!("cairn-{id:08x}-{name}.nv"))
            }
            None => self.data_dir.join(format!("{name}.nv")),
        };
        if !nv.volatile && on_ram(&path) {
            return Err(VolumeError::new(
                format!("{field}.nv_cache.path"),
                format!(
                    "{} is on RAM (tmpfs): writes acknowledged there survive a crash of the \
                     server but not a power loss or a reboot. Put the region on a disk or on \
                     persistent memory (the default is <data_dir>/{name}.nv), or accept that \
                     with volatile = true in the nv_cache table",
                    path.display()
                ),
            ));
        }
        Ok(path)
    }

    /// The NTL image of device `name`: its `path`, or `<data_dir>/<name>.ntl`.
    fn ntl_path(&self, name: &str, n: &NtlSpec) -> PathBuf {
        match &n.path {
            Some(path) => self.path(path),
            None => self.data_dir.join(format!("{name}.ntl")),
        }
    }

    /// An NTL image on RAM is persistent memory only in name: say so.
    fn ntl_warning(&mut self, field: &str, path: &Path) {
        if on_ram(path) {
            self.warnings.push(format!(
                "{field}: VOLATILE — the NTL image {} is on RAM (tmpfs): its writes survive a \
                 crash of this server, not a power loss or a reboot",
                path.display()
            ));
        }
    }

    /// Says at every start what the NV write cache survives.
    fn nv_notes(&mut self, field: &str, path: &Path, nv: &NvCacheSpec) {
        if nv.volatile {
            self.warnings.push(format!(
                "{field}.nv_cache: VOLATILE — {} is {}: an acknowledged write survives a crash \
                 of this server, not a power loss or a reboot (volatile = true in the spec)",
                path.display(),
                if on_ram(path) {
                    "RAM"
                } else {
                    "declared volatile"
                }
            ));
        } else {
            self.notes.push(format!(
                "{field}.nv_cache: {} on disk: an acknowledged write survives a crash of this \
                 server, and every flush (NBD FLUSH, FUA) syncs it, so a flushed write survives \
                 a power loss",
                path.display()
            ));
        }
    }
}

/// The log disk's options from its spec.
fn log_options(l: &LogSpec) -> logdisk::Options {
    logdisk::Options {
        cleaner: l.cleaner.into(),
        clean_low: l.clean_low_segments,
        clean_high: l.clean_high_segments,
        destage_threshold: l.destage_threshold,
        partial: l.partial_segments.into(),
        checkpoint_interval: l.checkpoint_interval_segments,
        live_read_below: l.live_read_below,
        live_read_gap: l.live_read_gap,
        cleaner_read_threads: l.cleaner_read_threads,
        batch_reads: l.batch_reads,
        background_destage: l.background_destage,
        writer_threads: l.writer_threads,
        background_clean: l.background_clean,
        chain: l.recovery_chain,
    }
}

/// Whether the storage at the bottom of a stack holds data that formatting
/// a log disk over it would destroy: the first a leaf holds, if any. A file
/// found to hold data is given back the length it had before this open grew
/// it.
fn foreign_under(leaves: &[Leaf]) -> Result<Option<Foreign>, log_open::OpenError> {
    for leaf in leaves {
        match leaf {
            Leaf::Fresh => {}
            Leaf::Used(what) => {
                return Ok(Some(Foreign {
                    what: what.clone(),
                    at: None,
                }));
            }
            Leaf::File(path, _) => {
                let what = path.display().to_string();
                let Some(at) =
                    probe::first_nonzero(path).map_err(|error| log_open::OpenError::Under {
                        what: what.clone(),
                        error,
                    })?
                else {
                    continue;
                };
                // Leave the file as it was found.
                shrink_grown(std::slice::from_ref(leaf));
                let mut sample = [0u8; 8];
                let _ = std::fs::File::open(path)
                    .and_then(|f| std::os::unix::fs::FileExt::read_at(&f, &mut sample, at));
                return Ok(Some(Foreign {
                    what,
                    at: Some((at, sample)),
                }));
            }
        }
    }
    Ok(None)
}

/// Whether some storage under a device may hold data [`foreign_under`]
/// did not see: a block device, of which it reads the first MiB (a file it
/// reads whole, skipping holes).
fn past_the_head_unseen(leaves: &[Leaf]) -> bool {
    leaves.iter().any(|leaf| match leaf {
        Leaf::File(path, _) => std::fs::metadata(path).is_ok_and(|m| {
            use std::os::unix::fs::FileTypeExt;
            m.file_type().is_block_device() || m.file_type().is_char_device()
        }),
        Leaf::Fresh | Leaf::Used(_) => false,
    })
}

/// Whether a tier formatted on a blank cache device of `len` bytes, with the
/// layout the spec asks for, has room for its metadata and two buckets.
fn metadata_fits(len: u64, t: &TierSpec) -> bool {
    let b = t.block_size.get();
    tier::Geometry::fit(len, b as u32, (t.bucket_size.get() / b) as u32, 0, 1).is_some()
}

/// Gives every file under a stack that this open grew its length back.
fn shrink_grown(leaves: &[Leaf]) {
    for leaf in leaves {
        if let Leaf::File(path, Some(len)) = leaf {
            let _ = std::fs::OpenOptions::new()
                .write(true)
                .open(path)
                .and_then(|f| f.set_len(*len));
        }
    }
}

/// A log disk that did not open, as the spec field at fault.
fn log_error(
    field: &str,
    l: &LogSpec,
    device: &SharedDevice,
    request: &Request<'_>,
    e: log_open::OpenError,
) -> VolumeError {
    use log_open::OpenError as E;
    let on = device.describe();
    let (at, message) = match e {
        E::Head(e) => (String::new(), format!("reading the superblock: {e}")),
        E::Superblock(e) => (String::new(), format!("{on}: {e}")),
        E::GeometryMismatch { what, have, want } => (
            format!(".{what}"),
            format!(
                "the log disk on {on} was formatted with {what} {have}; the spec says {want} \
                 (a log disk keeps its geometry: restore the spec, or move the file away to start over)"
            ),
        ),
        E::NoRoom {
            error,
            device_len,
            segments,
        } => (
            ".size".into(),
            format!(
                "{error}: the device under it holds {device_len} bytes ({segments} segments of {}); \
                 make the device larger or the log disk smaller",
                l.segment_size
            ),
        ),
        E::Foreign(foreign) => (".over".into(), foreign_message(foreign, "log disk")),
        E::Under { what, error } => (".over".into(), format!("{what}: {error}")),
        E::NotFormatted => (
            String::new(),
            format!("{on} holds no log disk, and a read-only export formats nothing"),
        ),
        E::Recover {
            nv: Some(path),
            error,
        } => (
            String::new(),
            format!(
                "recovering with the NV write cache {}: {error}",
                path.display()
            ),
        ),
        E::Recover { nv: None, error } if request.read_only => {
            (String::new(), format!("recovering (read-only): {error}"))
        }
        E::Recover { nv: None, error } => (String::new(), format!("recovering: {error}")),
        E::Format(e) => (String::new(), format!("formatting on {on}: {e}")),
        e => return nv_error(field, &on, request.read_only, e),
    };
    VolumeError::new(format!("{field}{at}"), message)
}

/// Why a `kind` (log disk, tier) is not formatted over data found under it.
fn foreign_message(Foreign { what, at }: Foreign, kind: &str) -> String {
    match at {
        None => {
            format!("{what} holds data but no {kind} superblock; refusing to format over it")
        }
        Some((at, sample)) => format!(
            "{what} is not empty and is not a Cairn {kind} (no superblock; \
             bytes {} at offset {at}); refusing to format over it. Point the \
             spec at a new file, or delete this one if its data is not needed.",
            probe::sample(&sample)
        ),
    }
}

/// A log disk's NV write cache that did not open, as the spec field at
/// fault.
fn nv_error(field: &str, on: &str, read_only: bool, e: log_open::OpenError) -> VolumeError {
    use log_open::OpenError as E;
    let path_field = format!("{field}.nv_cache.path");
    match e {
        E::NvForeign(path) => VolumeError::new(
            path_field,
            format!(
                "{} holds data that is not a Cairn NV cache; refusing to format over it",
                path.display()
            ),
        ),
        E::NvIo { path, error } => {
            VolumeError::new(path_field, format!("{}: {error}", path.display()))
        }
        E::NvRegion(e) => VolumeError::new(path_field, e.to_string()),
        E::NvLost(path) if read_only => VolumeError::new(
            format!("{field}.nv_cache"),
            format!(
                "the NV write cache {} is missing and the log disk on {on} was not stopped \
                 cleanly: writes acknowledged only to the cache are lost. To open the disk \
                 without them, pass --accept-lost-nv-cache.",
                path.display(),
            ),
        ),
        E::NvLost(path) => VolumeError::new(
            format!("{field}.nv_cache"),
            format!(
                "the NV write cache {} is missing or empty (on /dev/shm it is lost at \
                 every reboot), and the log disk on {on} was not stopped cleanly: writes \
                 acknowledged only to the cache since then are lost. To open the disk \
                 without them, pass --accept-lost-nv-cache (OpenOptions::accept_lost_nv_cache).",
                path.display(),
            ),
        ),
        e => VolumeError::new(field, e.to_string()),
    }
}

/// An NTL image that did not open, as the spec field at fault.
fn ntl_error(field: &str, path: &Path, read_only: bool, e: ntl_open::OpenError) -> VolumeError {
    use ntl_open::OpenError as E;
    let shown = path.display();
    let path_field = format!("{field}.path");
    match e {
        E::Probe(e) => VolumeError::new(path_field, format!("{shown}: {e}")),
        E::Region(e) => VolumeError::new(path_field, e.to_string()),
        E::Open(e) if read_only => VolumeError::new(
            field,
            format!("opening the NTL image {shown} read-only: {e}"),
        ),
        E::Open(e) => VolumeError::new(field, format!("opening the NTL image {shown}: {e}")),
        E::Format(e) => VolumeError::new(field, format!("formatting the NTL image {shown}: {e}")),
        E::GeometryMismatch { have, want } => VolumeError::new(
            format!("{field}.size"),
            format!(
                "the NTL image {shown} holds {} blocks of {} bytes; the spec asks for {} of {} \
                 (an image keeps its geometry: restore the spec, or move the file away to start over)",
                have.lbas, have.block_size, want.lbas, want.block_size
            ),
        ),
        E::Foreign { offset } => VolumeError::new(
            path_field,
            format!(
                "{shown} holds data that is not an NTL image (non-zero byte at offset {offset}); \
                 refusing to format over it"
            ),
        ),
        E::Interrupted => VolumeError::new(
            field,
            format!(
                "the NTL image {shown} holds writes a crash interrupted (in its lane log); \
                 replaying them writes, so serve it read-write once first"
            ),
        ),
    }
}

/// A tier that did not open, as the spec field at fault.
fn tier_error(field: &str, t: &TierSpec, e: TierError) -> VolumeError {
    let at = |f: &str| format!("{field}.{f}");
    match e {
        TierError::Foreign { .. } | TierError::BackingMismatch { .. } => {
            VolumeError::new(at("cache"), e.to_string())
        }
        TierError::Format { .. } => VolumeError::new(
            at("cache"),
            format!(
                "{e} (the tier's metadata cannot be read: move the file away, or zero it, to \
                 start over with an empty cache; dirty blocks on it are then lost)"
            ),
        ),
        TierError::Policy(_) if t.admission.0.validate().is_err() => {
            VolumeError::new(at("admission"), e.to_string())
        }
        TierError::Policy(_) => VolumeError::new(at("policy"), e.to_string()),
        TierError::Setting { setting, message } => {
            let f = match setting {
                tier::Setting::Cache => at("cache"),
                tier::Setting::Backing => at("over"),
                tier::Setting::BlockSize => at("block_size"),
                tier::Setting::BucketSize => at("bucket_size"),
                tier::Setting::Shards => at("shards"),
                tier::Setting::Overprovision => at("overprovision"),
            };
            VolumeError::new(f, message)
        }
        e => VolumeError::new(field, format!("opening the tier: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A block or character device is read only at its start before a
    /// format (the rest may hold old data: the log disk's format clears its
    /// segments' first blocks); a file is read whole, holes skipped.
    #[test]
    fn only_a_device_node_may_hold_data_past_what_was_looked_at() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("log.img");
        std::fs::write(&file, [0u8; 4096]).unwrap();
        assert!(!past_the_head_unseen(&[
            Leaf::File(file, None),
            Leaf::Fresh
        ]));
        assert!(past_the_head_unseen(&[
            Leaf::Fresh,
            Leaf::File("/dev/null".into(), None)
        ]));
    }
}
