//! Volumes: block devices assembled from a [`VolumeSpec`], one stack per
//! export (see `docs/volumes.md` for the spec format).
//!
//! ```text
//! export ──► read cache (kind = "cache": DRAM, any policy, cost groups per part)
//!               └─► write path: log disk (kind = "log") ── NV write cache (an mmap'd region)
//!                     └─► devices: file · memory · throttled · striped · concat · ntl
//! ```
//!
//! [`Volume::open`] validates the spec (names, references, each device used
//! once, sizes), then builds each export's stack bottom up. A layer with an
//! on-disk format (log disk, NTL) looks for its magic: found, the layer is
//! opened and recovered; absent on storage that is blank (new, sparse, or all
//! zeroes), it is formatted; absent on storage that holds anything else, the
//! open fails and nothing is written. [`Volume::close`] destages and
//! checkpoints every log disk and flushes every export, so the next open
//! replays nothing.

pub mod spec;

use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use spec::{
    CacheSpec, Cleaner, ConcatSpec, DeviceSpec, ExportSpec, FileSpec, LogSpec, MemorySpec, NtlSpec,
    NvCacheSpec, Partial, Persistence, StripedSpec, ThrottleProfile, ThrottledSpec, TlsModeSpec,
    TlsSpec, VolumeSpec,
};

use crate::cache::{BlockCache, CacheConfig, CacheError, Placement, SingleDevice};
use crate::device::probe;
use crate::device::{
    Claim, ConcatDevice, Device, DeviceError, DirClaim, FileDevice, FileOptions, MemoryDevice,
    Pace, SECTOR, SharedDevice, StripedDevice, Throttle, ThrottledDevice,
};
use crate::logdisk::format::{CHECKPOINT_MAGIC, SUPERBLOCK_MAGIC};
use crate::logdisk::nv::NV_MAGIC;
use crate::logdisk::{self, LogDisk, LogDiskError, NvError};
use crate::ntl::{self, Btt, MmapRegion, NtlDevice, PageSize, Region};

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
    fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
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

/// A log disk in a volume, kept to be closed.
struct OpenLog {
    name: String,
    disk: Arc<LogDisk<SharedDevice>>,
    /// Written after a clean close; read (and removed) at the next open to
    /// tell a clean stop from a crash.
    marker: PathBuf,
    /// A volatile NV region (on RAM), removed after a clean close: nothing
    /// in it is needed then, and a stopped server leaves no RAM behind.
    volatile_region: Option<PathBuf>,
    /// Opened read-only: nothing is written at close.
    read_only: bool,
}

/// Every export of a spec, assembled. Dropping a volume without
/// [`Volume::close`] is a crash as far as the disks can tell (they recover at
/// the next open).
pub struct Volume {
    exports: Vec<VolumeExport>,
    logs: Vec<OpenLog>,
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
        let all_read_only = options.read_only || spec.exports.iter().all(|e| e.read_only);
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
            std::fs::create_dir_all(&data_dir).map_err(|e| {
                VolumeError::new("data_dir", format!("creating {}: {e}", data_dir.display()))
            })?;
        }
        // First of all, before any file is probed or changed: one server per
        // data directory (each file is claimed again as it is opened, for
        // specs whose files live elsewhere).
        let claim = if spec.devices.values().any(DeviceSpec::is_persistent) {
            let how = if all_read_only {
                Claim::Shared
            } else {
                Claim::Exclusive
            };
            let claim = DirClaim::take(&data_dir, how)
                .map_err(|e| VolumeError::new("data_dir", format!("the data directory {e}")))?;
            Some(claim)
        } else {
            None
        };
        let mut builder = Builder {
            spec,
            data_dir: &data_dir,
            options,
            logs: Vec::new(),
            notes: Vec::new(),
            warnings: Vec::new(),
            read_only: false,
        };
        let mut exports = Vec::with_capacity(spec.exports.len());
        for export in &spec.exports {
            builder.read_only = options.read_only || export.read_only;
            let built = builder.build(&export.device)?;
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
        let Builder {
            logs,
            notes,
            warnings,
            ..
        } = builder;
        Ok(Self {
            exports,
            logs,
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

    /// Flushes every export, then destages and checkpoints every log disk
    /// (top of each stack first), and records that each closed cleanly.
    /// Call when no client is connected any more.
    pub fn close(&self) -> Result<(), VolumeError> {
        for export in &self.exports {
            export.device.flush().map_err(|e| {
                VolumeError::new(format!("export {:?}", export.name), format!("flush: {e}"))
            })?;
        }
        for log in self.logs.iter().rev().filter(|log| !log.read_only) {
            let field = format!("device.{}", log.name);
            log.disk
                .close()
                .map_err(|e| VolumeError::new(&field, format!("closing the log disk: {e}")))?;
            write_marker(&log.marker, log.disk.id())
                .map_err(|e| VolumeError::new(&field, format!("{}: {e}", log.marker.display())))?;
            if let Some(region) = &log.volatile_region {
                // Still mapped by the disk until it is dropped; unlinking
                // only frees the memory then. The next open finds it
                // missing after a clean stop, and formats a new one.
                let _ = std::fs::remove_file(owner_file(region));
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
        }
        Ok(())
    }
}

/// A device being assembled, and what lies under it.
struct Built {
    device: SharedDevice,
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

struct Builder<'a> {
    spec: &'a VolumeSpec,
    data_dir: &'a Path,
    options: &'a OpenOptions,
    logs: Vec<OpenLog>,
    notes: Vec<String>,
    warnings: Vec<String>,
    /// The stack being built serves a read-only export: every file is opened
    /// `O_RDONLY` with a shared claim, and nothing is formatted or written.
    read_only: bool,
}

impl Builder<'_> {
    fn path(&self, path: &Path) -> PathBuf {
        self.data_dir.join(path)
    }

    fn build(&mut self, name: &str) -> Result<Built, VolumeError> {
        let spec = self.spec;
        let device = &spec.devices[name];
        let field = format!("device.{name}");
        match device {
            DeviceSpec::File(f) => self.file(&field, f),
            DeviceSpec::Memory(m) => Ok(Built {
                device: Arc::new(MemoryDevice::new(m.size.get())),
                leaves: vec![Leaf::Fresh],
                placement: None,
            }),
            DeviceSpec::Throttled(t) => {
                let inner = self.build(&t.over)?;
                let throttle = throttle_of(t);
                Ok(Built {
                    device: Arc::new(ThrottledDevice::new(inner.device, throttle, Pace::Sleep)),
                    leaves: inner.leaves,
                    placement: inner.placement,
                })
            }
            DeviceSpec::Striped(s) => {
                let (parts, leaves) = self.parts(&s.parts)?;
                let device = StripedDevice::new(parts, s.stripe.get())
                    .map_err(|e| VolumeError::new(&field, e))?;
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
            DeviceSpec::Concat(c) => {
                let (parts, leaves) = self.parts(&c.parts)?;
                let device = ConcatDevice::new(parts).map_err(|e| VolumeError::new(&field, e))?;
                let device = Arc::new(device);
                Ok(Built {
                    device: device.clone(),
                    leaves,
                    placement: Some(device),
                })
            }
            DeviceSpec::Ntl(n) => self.ntl(name, &field, n),
            DeviceSpec::Log(l) => self.log(name, &field, l),
            DeviceSpec::Cache(c) => {
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
                Ok(Built {
                    device: Arc::new(cache),
                    leaves: inner.leaves,
                    placement: None,
                })
            }
        }
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

    fn file(&mut self, field: &str, f: &FileSpec) -> Result<Built, VolumeError> {
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
        Ok(Built {
            device: Arc::new(device),
            leaves: vec![Leaf::File(path, before)],
            placement: None,
        })
    }

    fn ntl(&mut self, name: &str, field: &str, n: &NtlSpec) -> Result<Built, VolumeError> {
        if self.read_only {
            return self.ntl_read_only(name, field, n);
        }
        let path = self.ntl_path(name, n);
        let block = n.block_size.get();
        let geo = ntl::Geometry {
            block_size: block,
            lbas: n.size.get() / block,
            data_blocks: n.size.get() / block + n.spare_blocks,
        };
        let shown = path.display();
        let io =
            |e: std::io::Error| VolumeError::new(format!("{field}.path"), format!("{shown}: {e}"));
        let head = probe::head::<8>(&path).map_err(io)?;
        let request = n.persistence.into();
        if head == Some(ntl::MAGIC) {
            let is_dax = std::fs::metadata(&path)
                .is_ok_and(|m| std::os::unix::fs::FileTypeExt::is_char_device(&m.file_type()));
            let mut region = MmapRegion::open_claimed(
                &path,
                if is_dax { geo.region_len() } else { 0 },
                false,
                request,
                Claim::Exclusive,
            )
            .map_err(|e| VolumeError::new(format!("{field}.path"), e.to_string()))?;
            if n.huge_pages {
                let started = std::time::Instant::now();
                let pages = region.collapse_huge_pages();
                if pages != PageSize::Default {
                    self.notes.push(format!(
                        "{field}: {pages}, in {:.2} s",
                        started.elapsed().as_secs_f64()
                    ));
                }
            }
            let btt = Btt::open(region).map_err(|e| {
                VolumeError::new(field, format!("opening the NTL image {shown}: {e}"))
            })?;
            let have = btt.geometry();
            if have.block_size != geo.block_size || have.lbas != geo.lbas {
                return Err(VolumeError::new(
                    format!("{field}.size"),
                    format!(
                        "the NTL image {shown} holds {} blocks of {} bytes; the spec asks for {} of {} \
                         (an image keeps its geometry: restore the spec, or move the file away to start over)",
                        have.lbas, have.block_size, geo.lbas, geo.block_size
                    ),
                ));
            }
            self.notes
                .push(format!("{field}: opened the NTL image {shown}"));
            self.ntl_warning(field, &path);
            return Ok(Built {
                device: Arc::new(NtlDevice::new(btt)),
                leaves: vec![Leaf::Used(format!("the NTL image {shown}"))],
                placement: None,
            });
        }
        if let Some(at) = probe::first_nonzero(&path).map_err(io)? {
            return Err(VolumeError::new(
                format!("{field}.path"),
                format!(
                    "{shown} holds data that is not an NTL image (non-zero byte at offset {at}); \
                     refusing to format over it"
                ),
            ));
        }
        let region =
            MmapRegion::open_claimed(&path, geo.region_len(), true, request, Claim::Exclusive)
                .map_err(|e| VolumeError::new(format!("{field}.path"), e.to_string()))?;
        let btt = Btt::format(region, geo).map_err(|e| {
            VolumeError::new(field, format!("formatting the NTL image {shown}: {e}"))
        })?;
        self.notes.push(format!(
            "{field}: formatted the NTL image {shown} ({} blocks of {block} bytes)",
            geo.lbas
        ));
        self.ntl_warning(field, &path);
        Ok(Built {
            device: Arc::new(NtlDevice::new(btt)),
            leaves: vec![Leaf::Fresh],
            placement: None,
        })
    }

    fn log(&mut self, name: &str, field: &str, l: &LogSpec) -> Result<Built, VolumeError> {
        let inner = self.build(&l.over)?;
        let device = inner.device;
        let options = logdisk::Options {
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
        };
        let block = l.block_size.get();
        let mut head = [0u8; 8];
        device
            .read_at(&mut head, 0)
            .map_err(|e| VolumeError::new(field, format!("reading the superblock: {e}")))?;
        let nv = match &l.nv_cache {
            Some(nv) => Some((self.nv_path(field, name, nv)?, nv)),
            None => None,
        };
        let marker = self.data_dir.join(format!("{name}.clean"));
        let existed = head == SUPERBLOCK_MAGIC;
        if self.read_only {
            return self.log_read_only(
                name,
                field,
                &device,
                nv.as_ref(),
                &marker,
                existed,
                options,
            );
        }
        let disk = if existed {
            self.open_log(field, l, &device, nv.as_ref(), &marker, options)?
        } else {
            self.format_log(field, l, &device, &inner.leaves, nv.as_ref(), options)?
        };
        if existed {
            let recovered = disk.recovered();
            if read_marker(&marker) == Some(disk.id()) {
                self.notes
                    .push(format!("{field}: opened after a clean stop"));
            } else {
                self.warnings.push(format!(
                    "{field}: recovered after an unclean stop: {} segment writes rolled forward, \
                     {} blocks replayed from the NV write cache",
                    recovered.segment_writes, recovered.nv_blocks
                ));
            }
        }
        if let Some((path, nv)) = &nv {
            self.nv_notes(field, path, nv);
            if nv.volatile && nv.path.is_none() && on_ram(path) {
                // Who owns this RAM, for `orphaned_regions` to judge later.
                let owner = std::fs::canonicalize(self.data_dir)
                    .unwrap_or_else(|_| self.data_dir.to_path_buf());
                let _ = std::fs::write(owner_file(path), format!("{}\n", owner.display()));
            }
        }
        // From here on the disk may take writes: a clean-close marker from an
        // earlier run no longer describes it.
        remove_marker(&marker)
            .map_err(|e| VolumeError::new(field, format!("{}: {e}", marker.display())))?;
        debug_assert_eq!(u64::from(disk.geometry().block_size), block);
        let disk = Arc::new(disk);
        self.logs.push(OpenLog {
            name: name.to_owned(),
            disk: Arc::clone(&disk),
            marker,
            volatile_region: nv
                .as_ref()
                .filter(|(path, nv)| nv.volatile && on_ram(path))
                .map(|(path, _)| path.clone()),
            read_only: false,
        });
        Ok(Built {
            device: disk,
            leaves: vec![Leaf::Used(format!("the log disk device.{name}"))],
            placement: None,
        })
    }

    /// A log disk opened read-only: recovered in memory, nothing written —
    /// not a checkpoint, not the marker, not the NV region.
    #[allow(clippy::too_many_arguments)]
    fn log_read_only(
        &mut self,
        name: &str,
        field: &str,
        device: &SharedDevice,
        nv: Option<&(PathBuf, &NvCacheSpec)>,
        marker: &Path,
        existed: bool,
        options: logdisk::Options,
    ) -> Result<Built, VolumeError> {
        if !existed {
            return Err(VolumeError::new(
                field,
                format!(
                    "{} holds no log disk, and a read-only export formats nothing",
                    device.describe()
                ),
            ));
        }
        let sb = logdisk::read_superblock(device.as_ref())
            .map_err(|e| VolumeError::new(field, format!("{}: {e}", device.describe())))?;
        let clean = read_marker(marker) == Some(sb.id);
        let region = match nv {
            Some((path, _)) if path.exists() => {
                Some(Box::new(MmapRegion::open_read_only(path).map_err(|e| {
                    VolumeError::new(format!("{field}.nv_cache.path"), e.to_string())
                })?) as Box<dyn Region>)
            }
            Some((path, _)) if !clean && !self.options.accept_lost_nv_cache => {
                return Err(VolumeError::new(
                    format!("{field}.nv_cache"),
                    format!(
                        "the NV write cache {} is missing and the log disk on {} was not stopped \
                         cleanly: writes acknowledged only to the cache are lost. To open the disk \
                         without them, pass --accept-lost-nv-cache.",
                        path.display(),
                        device.describe()
                    ),
                ));
            }
            _ => None,
        };
        let disk = LogDisk::open_read_only(Arc::clone(device), region, options)
            .map_err(|e| VolumeError::new(field, format!("recovering (read-only): {e}")))?;
        let recovered = disk.recovered();
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
        let disk = Arc::new(disk);
        self.logs.push(OpenLog {
            name: name.to_owned(),
            disk: Arc::clone(&disk),
            marker: marker.to_path_buf(),
            volatile_region: None,
            read_only: true,
        });
        Ok(Built {
            device: disk,
            leaves: vec![Leaf::Used(format!("the log disk device.{name}"))],
            placement: None,
        })
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

    /// An NTL image opened read-only: mapped `PROT_READ` with a shared claim,
    /// its map loaded, nothing written (an image with writes a crash left in
    /// its lane log is refused: replaying them writes).
    fn ntl_read_only(
        &mut self,
        name: &str,
        field: &str,
        n: &NtlSpec,
    ) -> Result<Built, VolumeError> {
        let path = self.ntl_path(name, n);
        let shown = path.display();
        let region = MmapRegion::open_read_only(&path)
            .map_err(|e| VolumeError::new(format!("{field}.path"), e.to_string()))?;
        let btt = Btt::open_read_only(region).map_err(|e| match e {
            ntl::MapError::Region(DeviceError::ReadOnly { .. }) => VolumeError::new(
                field,
                format!(
                    "the NTL image {shown} holds writes a crash interrupted (in its lane log); \
                     replaying them writes, so serve it read-write once first"
                ),
            ),
            e => VolumeError::new(
                field,
                format!("opening the NTL image {shown} read-only: {e}"),
            ),
        })?;
        let have = btt.geometry();
        if have.block_size != n.block_size.get() || have.lbas != n.size.get() / n.block_size.get() {
            return Err(VolumeError::new(
                format!("{field}.size"),
                format!(
                    "the NTL image {shown} holds {} blocks of {} bytes; the spec asks for {} of {}",
                    have.lbas,
                    have.block_size,
                    n.size.get() / n.block_size.get(),
                    n.block_size
                ),
            ));
        }
        self.notes
            .push(format!("{field}: opened the NTL image {shown} read-only"));
        self.ntl_warning(field, &path);
        Ok(Built {
            device: Arc::new(NtlDevice::new(btt)),
            leaves: vec![Leaf::Used(format!("the NTL image {shown}"))],
            placement: None,
        })
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

    fn open_log(
        &mut self,
        field: &str,
        l: &LogSpec,
        device: &SharedDevice,
        nv: Option<&(PathBuf, &NvCacheSpec)>,
        marker: &Path,
        options: logdisk::Options,
    ) -> Result<LogDisk<SharedDevice>, VolumeError> {
        let sb = logdisk::read_superblock(device.as_ref())
            .map_err(|e| VolumeError::new(field, format!("{}: {e}", device.describe())))?;
        let g = sb.geometry;
        let have_block = u64::from(g.block_size);
        let mismatch = |what: &str, have: String, want: String| {
            VolumeError::new(
                format!("{field}.{what}"),
                format!(
                    "the log disk on {} was formatted with {what} {have}; the spec says {want} \
                     (a log disk keeps its geometry: restore the spec, or move the file away to start over)",
                    device.describe()
                ),
            )
        };
        if have_block != l.block_size.get() {
            return Err(mismatch(
                "block_size",
                have_block.to_string(),
                l.block_size.get().to_string(),
            ));
        }
        let segment = u64::from(g.segment_blocks) * have_block;
        if segment != l.segment_size.get() {
            return Err(mismatch(
                "segment_size",
                segment.to_string(),
                l.segment_size.get().to_string(),
            ));
        }
        let logical = g.logical_blocks * have_block;
        if let Some(size) = l.size
            && size.get() != logical
        {
            return Err(mismatch(
                "size",
                logical.to_string(),
                size.get().to_string(),
            ));
        }
        let Some((path, nv)) = nv else {
            let disk = LogDisk::open(Arc::clone(device), None, options)
                .map_err(|e| VolumeError::new(field, format!("recovering: {e}")))?;
            self.notes
                .push(format!("{field}: recovered {}", disk.describe()));
            return Ok(disk);
        };
        let nv_field = format!("{field}.nv_cache");
        let region = Self::nv_region(&nv_field, path, nv, false)?;
        match LogDisk::open(Arc::clone(device), Some(region), options) {
            Ok(disk) => {
                self.notes
                    .push(format!("{field}: recovered {}", disk.describe()));
                Ok(disk)
            }
            Err(LogDiskError::Nv(NvError::Missing)) => {
                let clean = read_marker(marker) == Some(sb.id);
                if !clean && !self.options.accept_lost_nv_cache {
                    return Err(VolumeError::new(
                        nv_field,
                        format!(
                            "the NV write cache {} is missing or empty (on /dev/shm it is lost at \
                             every reboot), and the log disk on {} was not stopped cleanly: writes \
                             acknowledged only to the cache since then are lost. To open the disk \
                             without them, pass --accept-lost-nv-cache (OpenOptions::accept_lost_nv_cache).",
                            path.display(),
                            device.describe()
                        ),
                    ));
                }
                let region = Self::nv_region(&nv_field, path, nv, true)?;
                let disk = LogDisk::open_with_new_nv_cache(Arc::clone(device), region, options)
                    .map_err(|e| VolumeError::new(field, format!("recovering: {e}")))?;
                self.notes.push(format!(
                    "{field}: the NV write cache {} was missing; {}, so a new one was formatted; recovered {}",
                    path.display(),
                    if clean {
                        "the disk was stopped cleanly (nothing was lost)"
                    } else {
                        "its lost writes were accepted as lost"
                    },
                    disk.describe()
                ));
                Ok(disk)
            }
            Err(e) => Err(VolumeError::new(
                field,
                format!("recovering with the NV write cache {}: {e}", path.display()),
            )),
        }
    }

    /// Maps the NV cache region file; `fresh` creates it at the spec's size.
    /// An existing file is mapped whole.
    fn nv_region(
        field: &str,
        path: &Path,
        nv: &NvCacheSpec,
        fresh: bool,
    ) -> Result<Box<dyn Region>, VolumeError> {
        let exists = std::fs::metadata(path).is_ok_and(|m| m.len() > 0);
        let len = if exists && !fresh { 0 } else { nv.size.get() };
        let region =
            MmapRegion::open_claimed(path, len, true, nv.persistence.into(), Claim::Exclusive)
                .map_err(|e| VolumeError::new(format!("{field}.path"), e.to_string()))?;
        if fresh && !on_ram(path) {
            // Written through once now, so that no acknowledged write waits
            // for the file system to allocate its page, or to convert an
            // unwritten extent (either is a journal commit per write).
            allocate_written(path, region.len()).map_err(|e| {
                VolumeError::new(format!("{field}.path"), format!("{}: {e}", path.display()))
            })?;
        }
        Ok(Box::new(region))
    }

    fn format_log(
        &mut self,
        field: &str,
        l: &LogSpec,
        device: &SharedDevice,
        leaves: &[Leaf],
        nv: Option<&(PathBuf, &NvCacheSpec)>,
        options: logdisk::Options,
    ) -> Result<LogDisk<SharedDevice>, VolumeError> {
        // An interrupted format left a checkpoint but no superblock (the
        // superblock is written last): ours, safe to format again.
        let mut at_checkpoint = [0u8; 8];
        let interrupted = device.len() >= 2 * l.block_size.get()
            && device
                .read_at(&mut at_checkpoint, l.block_size.get())
                .is_ok()
            && at_checkpoint == CHECKPOINT_MAGIC;
        if !interrupted {
            for leaf in leaves {
                match leaf {
                    Leaf::Fresh => {}
                    Leaf::Used(what) => {
                        return Err(VolumeError::new(
                            format!("{field}.over"),
                            format!(
                                "{what} holds data but no log disk superblock; refusing to format over it"
                            ),
                        ));
                    }
                    Leaf::File(path, grown_from) => {
                        let nonzero = probe::first_nonzero(path).map_err(|e| {
                            VolumeError::new(
                                format!("{field}.over"),
                                format!("{}: {e}", path.display()),
                            )
                        })?;
                        if let Some(at) = nonzero {
                            // Leave the file as it was found.
                            if let Some(len) = grown_from {
                                let _ = std::fs::OpenOptions::new()
                                    .write(true)
                                    .open(path)
                                    .and_then(|f| f.set_len(*len));
                            }
                            let mut sample = [0u8; 8];
                            let _ = std::fs::File::open(path).and_then(|f| {
                                std::os::unix::fs::FileExt::read_at(&f, &mut sample, at)
                            });
                            return Err(VolumeError::new(
                                format!("{field}.over"),
                                format!(
                                    "{} is not empty and is not a Cairn log disk (no superblock; \
                                     bytes {} at offset {at}); refusing to format over it. Point the \
                                     spec at a new file, or delete this one if its data is not needed.",
                                    path.display(),
                                    probe::sample(&sample)
                                ),
                            ));
                        }
                    }
                }
            }
        }
        let geo = log_geometry(field, l, device.len())?;
        let region = match nv {
            Some((path, nv)) => {
                let nv_field = format!("{field}.nv_cache");
                let head = probe::head::<8>(path).map_err(|e| {
                    VolumeError::new(
                        format!("{nv_field}.path"),
                        format!("{}: {e}", path.display()),
                    )
                })?;
                if head.is_some_and(|h| h != NV_MAGIC && h != [0; 8]) {
                    return Err(VolumeError::new(
                        format!("{nv_field}.path"),
                        format!(
                            "{} holds data that is not a Cairn NV cache; refusing to format over it",
                            path.display()
                        ),
                    ));
                }
                Some(Self::nv_region(&nv_field, path, nv, true)?)
            }
            None => None,
        };
        let disk = LogDisk::format(Arc::clone(device), geo, region, options).map_err(|e| {
            VolumeError::new(field, format!("formatting on {}: {e}", device.describe()))
        })?;
        self.notes
            .push(format!("{field}: formatted {}", disk.describe()));
        Ok(disk)
    }
}

use cairn_policy::Bytes;

fn throttle_of(t: &ThrottledSpec) -> Throttle {
    let base = match t.profile {
        Some(ThrottleProfile::Hdd) => Throttle::hdd(),
        Some(ThrottleProfile::Ssd) => Throttle::ssd(),
        None => Throttle {
            op_us: 0.0,
            seek_us: 0.0,
            bandwidth_mb_s: 0.0,
        },
    };
    Throttle {
        op_us: t.latency_us.unwrap_or(base.op_us),
        seek_us: t.seek_us.unwrap_or(base.seek_us),
        bandwidth_mb_s: t.bandwidth_mb_s.unwrap_or(base.bandwidth_mb_s),
    }
}

/// The geometry a new log disk gets on a device of `device_len` bytes: as
/// many segments as fit beside the two checkpoint slots the logical size
/// needs, and (by default) 80 % of their data slots exported.
fn log_geometry(
    field: &str,
    l: &LogSpec,
    device_len: u64,
) -> Result<logdisk::Geometry, VolumeError> {
    let block = l.block_size.get();
    let segment_blocks = (l.segment_size.get() / block) as u32;
    let total = device_len / block;
    let mut segments = u32::try_from(
        (total.saturating_sub(1) / u64::from(segment_blocks)).min(u64::from(u32::MAX)),
    )
    .unwrap_or(u32::MAX);
    let logical_for = |segments: u32| match l.size {
        Some(size) => size.get() / block,
        None => u64::from(segments) * u64::from(segment_blocks - 1) * 4 / 5,
    };
    loop {
        let geo = logdisk::Geometry {
            block_size: block as u32,
            segment_blocks,
            segments,
            logical_blocks: logical_for(segments),
        };
        if geo.image_blocks() <= total || segments < 4 {
            return geo.validate().map(|()| geo).map_err(|e| {
                VolumeError::new(
                    format!("{field}.size"),
                    format!(
                        "{e}: the device under it holds {device_len} bytes ({segments} segments of {}); \
                         make the device larger or the log disk smaller",
                        l.segment_size
                    ),
                )
            });
        }
        segments -= 1;
    }
}

/// The file beside a volatile region on `/dev/shm` naming the data
/// directory it belongs to.
fn owner_file(region: &Path) -> PathBuf {
    let mut name = region.as_os_str().to_owned();
    name.push(".owner");
    PathBuf::from(name)
}

/// A volatile NV region on `/dev/shm` that Cairn made for a data directory
/// that no longer exists (deleted with its volume): RAM nobody will use again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OrphanedRegion {
    /// The region file.
    pub path: PathBuf,
    /// Its size in bytes.
    pub bytes: u64,
    /// The data directory it was made for.
    pub owner: PathBuf,
}

impl OrphanedRegion {
    /// Removes the region and its owner note.
    pub fn remove(&self) -> std::io::Result<()> {
        let _ = std::fs::remove_file(owner_file(&self.path));
        std::fs::remove_file(&self.path)
    }
}

/// The volatile regions Cairn left on `/dev/shm` (`cairn-*.nv`) whose data
/// directory is gone and which no process holds. A region whose data
/// directory still exists is never listed: after a crash it holds that
/// volume's acknowledged writes until the next start recovers them.
pub fn orphaned_regions() -> Vec<OrphanedRegion> {
    orphaned_regions_in(Path::new("/dev/shm"))
}

fn orphaned_regions_in(dir: &Path) -> Vec<OrphanedRegion> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut found: Vec<OrphanedRegion> = entries
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| {
            path.extension().is_some_and(|e| e == "nv")
                && path
                    .file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("cairn-"))
        })
        .filter_map(|path| {
            let owner = std::fs::read_to_string(owner_file(&path)).ok()?;
            let owner = PathBuf::from(owner.trim_end());
            if owner.exists() || crate::device::holder(&path).is_some() {
                return None;
            }
            let bytes = std::fs::metadata(&path).ok()?.len();
            Some(OrphanedRegion { path, bytes, owner })
        })
        .collect();
    found.sort_by(|a, b| a.path.cmp(&b.path));
    found
}

/// Fills the holes of the first `len` bytes of `path` with written zeroes
/// (data already there is kept), and syncs.
fn allocate_written(path: &Path, len: u64) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    const CHUNK: u64 = 1 << 20;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)?;
    let zero = vec![0u8; CHUNK as usize];
    let mut chunk = vec![0u8; CHUNK as usize];
    let mut at = 0;
    while at < len {
        let n = (len - at).min(CHUNK) as usize;
        file.read_exact_at(&mut chunk[..n], at)?;
        if chunk[..n] == zero[..n] {
            file.write_all_at(&zero[..n], at)?;
        }
        at += n as u64;
    }
    file.sync_all()
}

/// Whether `path` (or, for a file not there yet, its directory) is on a file
/// system whose contents are RAM: tmpfs or ramfs.
fn on_ram(path: &Path) -> bool {
    const TMPFS_MAGIC: i64 = 0x0102_1994;
    const RAMFS_MAGIC: i64 = 0x8584_58f6;
    let probe = if path.exists() {
        path
    } else {
        match path.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir,
            _ => Path::new("."),
        }
    };
    rustix::fs::statfs(probe).is_ok_and(|s| {
        #[allow(clippy::useless_conversion, clippy::unnecessary_cast)]
        let kind = s.f_type as i64;
        kind == TMPFS_MAGIC || kind == RAMFS_MAGIC
    })
}

/// The clean-close marker: the disk's identity, in text.
fn write_marker(path: &Path, id: u64) -> std::io::Result<()> {
    use std::io::Write;
    let mut file = std::fs::File::create(path)?;
    writeln!(file, "cairn log disk {id:016x} closed cleanly")?;
    file.sync_all()?;
    sync_parent(path)
}

fn read_marker(path: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    let id = text.strip_prefix("cairn log disk ")?.split(' ').next()?;
    u64::from_str_radix(id, 16).ok()
}

fn remove_marker(path: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(path) {
        Ok(()) => sync_parent(path),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

fn sync_parent(path: &Path) -> std::io::Result<()> {
    match path.parent() {
        Some(dir) => std::fs::File::open(dir)?.sync_all(),
        None => Ok(()),
    }
}

impl VolumeSpec {
    /// Checks names, references and sizes without touching any file; the
    /// error names the field.
    pub fn validate(&self) -> Result<(), VolumeError> {
        if self.exports.is_empty() {
            return Err(VolumeError::new(
                "export",
                "at least one [[export]] is needed",
            ));
        }
        if self.exports.len() > spec::EXPORTS_MAX {
            return Err(VolumeError::new(
                "export",
                format!(
                    "{} exports; at most {}",
                    self.exports.len(),
                    spec::EXPORTS_MAX
                ),
            ));
        }
        if self.devices.len() > spec::DEVICES_MAX {
            return Err(VolumeError::new(
                "device",
                format!(
                    "{} devices; at most {}",
                    self.devices.len(),
                    spec::DEVICES_MAX
                ),
            ));
        }
        for (name, device) in &self.devices {
            check_name(&format!("device.{name}"), name)?;
            check_device(name, device)?;
        }
        // Every reference resolves, and every device is used exactly once.
        let mut used: std::collections::BTreeMap<String, String> =
            std::collections::BTreeMap::new();
        let mut refer = |by: String, to: &str| -> Result<(), VolumeError> {
            if !self.devices.contains_key(to) {
                return Err(VolumeError::new(
                    by,
                    format!("no device named {to:?} (define it as [device.{to}])"),
                ));
            }
            if let Some(first) = used.insert(to.to_owned(), by.clone()) {
                return Err(VolumeError::new(
                    by,
                    format!(
                        "device {to:?} is already used by {first}; a device belongs to one stack"
                    ),
                ));
            }
            Ok(())
        };
        for (index, export) in self.exports.iter().enumerate() {
            let field = format!("export[{index}]");
            if export.name.is_empty() || export.name.len() > 4096 || export.name.contains('\0') {
                return Err(VolumeError::new(
                    format!("{field}.name"),
                    "an export name is 1 to 4096 bytes without NUL",
                ));
            }
            if self.exports[..index].iter().any(|e| e.name == export.name) {
                return Err(VolumeError::new(
                    format!("{field}.name"),
                    format!("export name {:?} appears twice", export.name),
                ));
            }
            refer(format!("{field}.device"), &export.device)?;
        }
        for (name, device) in &self.devices {
            let key = match device {
                DeviceSpec::Striped(_) | DeviceSpec::Concat(_) => "parts",
                _ => "over",
            };
            for child in device.children() {
                refer(format!("device.{name}.{key}"), child)?;
            }
        }
        // A device nothing uses is a typo or a leftover: say so. (A cycle is
        // unreachable from the exports, so it shows up here too.)
        let reachable = self.reachable();
        if let Some(name) = self
            .devices
            .keys()
            .find(|n| !reachable.contains(n.as_str()))
        {
            return Err(VolumeError::new(
                format!("device.{name}"),
                "no export uses this device (directly or under a layer)",
            ));
        }
        Ok(())
    }

    fn reachable(&self) -> std::collections::BTreeSet<&str> {
        let mut seen = std::collections::BTreeSet::new();
        let mut stack: Vec<&str> = self.exports.iter().map(|e| e.device.as_str()).collect();
        while let Some(name) = stack.pop() {
            if seen.insert(name)
                && let Some(device) = self.devices.get(name)
            {
                stack.extend(device.children());
            }
        }
        seen
    }
}

fn check_name(field: &str, name: &str) -> Result<(), VolumeError> {
    if name.is_empty()
        || name.len() > 64
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        return Err(VolumeError::new(
            field,
            format!("device name {name:?}: use 1 to 64 letters, digits, '-' or '_'"),
        ));
    }
    Ok(())
}

fn check_device(name: &str, device: &DeviceSpec) -> Result<(), VolumeError> {
    let field = |f: &str| format!("device.{name}.{f}");
    let positive = |f: &str, b: Bytes| {
        if b.get() == 0 {
            Err(VolumeError::new(field(f), "must be more than 0 bytes"))
        } else {
            Ok(())
        }
    };
    match device {
        DeviceSpec::File(f) => {
            if let Some(size) = f.size {
                positive("size", size)?;
            }
        }
        DeviceSpec::Memory(m) => positive("size", m.size)?,
        DeviceSpec::Throttled(t) => {
            let th = throttle_of(t);
            if !(th.bandwidth_mb_s.is_finite() && th.bandwidth_mb_s > 0.0) {
                return Err(VolumeError::new(
                    field("bandwidth_mb_s"),
                    "a positive transfer rate in MB/s is needed (or a profile: \"hdd\", \"ssd\")",
                ));
            }
            for (f, v) in [("latency_us", th.op_us), ("seek_us", th.seek_us)] {
                if !(v.is_finite() && v >= 0.0) {
                    return Err(VolumeError::new(
                        field(f),
                        format!("{v} is not a time of 0 or more microseconds"),
                    ));
                }
            }
        }
        DeviceSpec::Striped(s) => {
            if s.parts.is_empty() {
                return Err(VolumeError::new(
                    field("parts"),
                    "at least one part is needed",
                ));
            }
            positive("stripe", s.stripe)?;
        }
        DeviceSpec::Concat(c) => {
            if c.parts.is_empty() {
                return Err(VolumeError::new(
                    field("parts"),
                    "at least one part is needed",
                ));
            }
        }
        DeviceSpec::Ntl(n) => {
            let b = n.block_size.get();
            if !b.is_power_of_two() || !(SECTOR..=1 << 20).contains(&b) {
                return Err(VolumeError::new(
                    field("block_size"),
                    format!("{b} is not a power of two from 512 to 1MiB"),
                ));
            }
            if n.size.get() == 0 || !n.size.get().is_multiple_of(b) {
                return Err(VolumeError::new(
                    field("size"),
                    format!(
                        "{} is not a positive multiple of the block size {}",
                        n.size, n.block_size
                    ),
                ));
            }
            if n.spare_blocks == 0 {
                return Err(VolumeError::new(
                    field("spare_blocks"),
                    "at least 1 spare block is needed (one per concurrent writer)",
                ));
            }
        }
        DeviceSpec::Log(l) => {
            let b = l.block_size.get();
            if !b.is_power_of_two() || !(512..=65_536).contains(&b) {
                return Err(VolumeError::new(
                    field("block_size"),
                    format!("{b} is not a power of two from 512 to 64KiB"),
                ));
            }
            let s = l.segment_size.get();
            if !s.is_multiple_of(b)
                || s / b < 2
                || s / b > u64::from(logdisk::Geometry::max_entries(b as u32)) + 1
            {
                return Err(VolumeError::new(
                    field("segment_size"),
                    format!(
                        "{} is not 2 to {} blocks of {}",
                        l.segment_size,
                        logdisk::Geometry::max_entries(b as u32) + 1,
                        l.block_size
                    ),
                ));
            }
            if let Some(size) = l.size
                && (size.get() == 0 || !size.get().is_multiple_of(b))
            {
                return Err(VolumeError::new(
                    field("size"),
                    format!(
                        "{size} is not a positive multiple of the block size {}",
                        l.block_size
                    ),
                ));
            }
            if l.clean_low_segments < 2 {
                return Err(VolumeError::new(
                    field("clean_low_segments"),
                    "at least 2 (the cleaner needs a segment to write into)",
                ));
            }
            if !(0.0..=1.0).contains(&l.destage_threshold) {
                return Err(VolumeError::new(
                    field("destage_threshold"),
                    format!("{} is not a fraction from 0 to 1", l.destage_threshold),
                ));
            }
            if !(0.0..=1.0).contains(&l.live_read_below) {
                return Err(VolumeError::new(
                    field("live_read_below"),
                    format!("{} is not a fraction from 0 to 1", l.live_read_below),
                ));
            }
            if !(1..=64).contains(&l.cleaner_read_threads) {
                return Err(VolumeError::new(
                    field("cleaner_read_threads"),
                    format!("{} is not from 1 to 64", l.cleaner_read_threads),
                ));
            }
            if !(1..=16).contains(&l.writer_threads) {
                return Err(VolumeError::new(
                    field("writer_threads"),
                    format!("{} is not from 1 to 16", l.writer_threads),
                ));
            }
            if let Some(nv) = &l.nv_cache
                && nv.size.get() < (1 << 20)
            {
                return Err(VolumeError::new(
                    field("nv_cache.size"),
                    format!("{} is too small; at least 1MiB", nv.size),
                ));
            }
        }
        DeviceSpec::Cache(c) => {
            cache_config(c, Arc::new(SingleDevice))
                .validate()
                .map_err(|e| cache_error(name, &e))?;
        }
    }
    Ok(())
}

/// The block cache configuration of a `kind = "cache"` spec.
fn cache_config(c: &CacheSpec, placement: Arc<dyn Placement>) -> CacheConfig {
    CacheConfig {
        block_size_bytes: c.block_size.get(),
        capacity_bytes: c.size.get(),
        policy: c.policy.0.clone(),
        shards: c.shards,
        write_mode: c.write_mode.into(),
        readahead_bytes: c.readahead.get(),
        cost_smoothing: c.cost_smoothing,
        placement,
    }
}

/// A cache that cannot be built, as the spec field at fault.
fn cache_error(name: &str, e: &CacheError) -> VolumeError {
    let field = match e {
        CacheError::BlockSize(_) => "block_size",
        CacheError::Shards(_) => "shards",
        CacheError::Capacity { .. } => "size",
        CacheError::Smoothing(_) => "cost_smoothing",
        CacheError::Policy(_) => "policy",
        _ => "over",
    };
    VolumeError::new(format!("device.{name}.{field}"), e.to_string())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn only_unheld_regions_of_vanished_data_directories_are_orphans() {
        let shm = tempfile::tempdir().unwrap();
        let live = tempfile::tempdir().unwrap();
        let region = |name: &str, owner: Option<&Path>| {
            let path = shm.path().join(name);
            std::fs::write(&path, vec![0u8; 4096]).unwrap();
            if let Some(owner) = owner {
                std::fs::write(owner_file(&path), format!("{}\n", owner.display())).unwrap();
            }
            path
        };
        let gone = region(
            "cairn-00000001-log.nv",
            Some(Path::new("/nonexistent/cairn-data")),
        );
        region("cairn-00000002-log.nv", Some(live.path()));
        region("cairn-00000003-log.nv", None);
        let held = region(
            "cairn-00000004-log.nv",
            Some(Path::new("/nonexistent/other")),
        );
        let holder = std::fs::File::open(&held).unwrap();
        crate::device::claim(&holder, &held, Claim::Exclusive).unwrap();
        region("other-file.nv", Some(Path::new("/nonexistent/x")));

        let found = orphaned_regions_in(shm.path());
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].path, gone);
        assert_eq!(found[0].bytes, 4096);
        assert_eq!(found[0].owner, Path::new("/nonexistent/cairn-data"));
        found[0].remove().unwrap();
        assert!(!gone.exists() && !owner_file(&gone).exists());
        assert!(orphaned_regions_in(shm.path()).is_empty());
    }
}
