//! Opening a log disk: what the device (and its NV write cache) holds
//! decides whether the disk is recovered, formatted, or refused. The caller
//! (a volume) says what it wants ([`Request`]) and turns the typed
//! [`OpenError`] into its own words; it reads no magic of ours.
//!
//! | the device holds                          | read-write                          | read-only               |
//! |-------------------------------------------|-------------------------------------|-------------------------|
//! | a superblock ([`Image::Ours`])            | geometry checked, recovered         | recovered in memory     |
//! | a checkpoint, no superblock ([`Image::Interrupted`]) | formatted again (the superblock is written last, so the format never finished) | [`OpenError::NotFormatted`] |
//! | nothing the caller sees ([`Image::Blank`]) | formatted ([`Opened::Formatted`])  | [`OpenError::NotFormatted`] |
//! | data ([`Image::Foreign`])                 | refused, nothing written            | [`OpenError::NotFormatted`] |
//!
//! | the NV write cache region                  | read-write                               | read-only            |
//! |-------------------------------------------|------------------------------------------|----------------------|
//! | ours                                      | replayed                                 | replayed in memory   |
//! | missing or empty, clean stop              | a new one formatted ([`Opened::NvReformatted`] `{ clean: true }`) | opened without it |
//! | missing or empty, unclean stop            | [`OpenError::NvLost`] (or, accepted, a new one: `{ clean: false }`) | [`OpenError::NvLost`] (or, accepted, opened without it) |
//! | foreign data, when formatting             | [`OpenError::NvForeign`]                 | —                    |
//!
//! "Clean stop" is the caller's knowledge (a marker it wrote at the last
//! close naming the disk's id): [`Request::closed_cleanly`].

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::device::{Claim, Device, DeviceError, IoBuf, SharedDevice, probe};
use crate::logdisk::format::{CHECKPOINT_MAGIC, FormatError, SUPERBLOCK_MAGIC};
use crate::logdisk::nv::NV_MAGIC;
use crate::logdisk::{Geometry, LogDisk, LogDiskError, NvError, Options, Superblock};
use crate::ntl::{MmapRegion, PersistenceRequest, Region};

/// What a device holds, as far as a log disk is concerned.
#[derive(Debug)]
pub enum Image {
    /// A log disk: its superblock.
    Ours(Superblock),
    /// A format that stopped before its last step (the superblock): a
    /// checkpoint where the first one goes, and no superblock. Ours, safe to
    /// format again.
    Interrupted,
    /// Never written, or only zeroes: safe to format.
    Blank,
    /// Someone else's data, which formatting would destroy.
    Foreign(Foreign),
}

/// Data found where a log disk would go: what holds it, and, when it is
/// bytes in a file, where the first one is and what it looks like.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Foreign {
    /// The storage holding it (a file's path, a layer's name).
    pub what: String,
    /// The first non-zero byte's offset and the 8 bytes from there, when
    /// known.
    pub at: Option<(u64, [u8; 8])>,
}

/// What the caller asks of the log disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Want {
    /// Bytes per block.
    pub block_size: u64,
    /// Bytes per segment.
    pub segment_size: u64,
    /// Bytes exported; `None` for 80 % of the data slots that fit.
    pub size: Option<u64>,
}

/// The NV write cache's region file.
#[derive(Clone, Copy, Debug)]
pub struct NvFile<'a> {
    /// Where it is.
    pub path: &'a Path,
    /// Its size when it is created.
    pub size: u64,
    /// How its writes are made durable.
    pub persistence: PersistenceRequest,
}

/// Everything [`open_or_format`] needs.
#[derive(Clone, Debug)]
pub struct Request<'a> {
    /// The geometry asked for.
    pub want: Want,
    /// The NV write cache, if the disk has one.
    pub nv: Option<NvFile<'a>>,
    /// The disk's options.
    pub options: Options,
    /// The id of the disk last closed cleanly on this device, if the caller
    /// recorded one: a matching disk lost nothing with its NV cache.
    pub closed_cleanly: Option<u64>,
    /// Open a disk whose NV cache is lost after an unclean stop anyway,
    /// giving up the writes acknowledged only to it.
    pub accept_lost_nv_cache: bool,
    /// Recover in memory and write nothing; never format.
    pub read_only: bool,
    /// The storage may hold old data past what the caller's look beneath
    /// the device read (a block device: only its first MiB), so a format
    /// also clears every segment's first block ([`LogDisk::format_clearing`]).
    pub may_hold_data: bool,
}

/// What [`open_or_format`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Opened {
    /// A new disk was written (on a blank device, or over an interrupted
    /// format).
    Formatted,
    /// An existing disk was recovered; `clean` if it was closed cleanly.
    Recovered {
        /// Closed cleanly last time.
        clean: bool,
    },
    /// An existing disk was recovered with a new NV cache, its old one being
    /// missing: nothing lost when `clean`, the lost writes accepted as lost
    /// otherwise.
    NvReformatted {
        /// Closed cleanly last time.
        clean: bool,
    },
}

/// Why a log disk could not be opened or formatted.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// Reading the first bytes of the device failed.
    #[error("reading the superblock: {0}")]
    Head(DeviceError),
    /// The superblock did not read back.
    #[error("{0}")]
    Superblock(LogDiskError),
    /// The disk was formatted with another `what` (`block_size`,
    /// `segment_size` or `size`, in bytes) than asked: a disk keeps its
    /// geometry.
    #[error("formatted with {what} {have}; asked for {want}")]
    GeometryMismatch {
        /// Which part of the geometry.
        what: &'static str,
        /// The disk's.
        have: u64,
        /// Asked for.
        want: u64,
    },
    /// The asked-for geometry does not fit the device.
    #[error("{error}: the device holds {device_len} bytes ({segments} segments)")]
    NoRoom {
        /// Why the geometry is invalid.
        error: FormatError,
        /// The device's length.
        device_len: u64,
        /// The segments that fit.
        segments: u32,
    },
    /// The device holds someone else's data; nothing was written.
    #[error("{} holds data but no log disk superblock; refusing to format over it", .0.what)]
    Foreign(Foreign),
    /// Looking at the storage under the device failed.
    #[error("{what}: {error}")]
    Under {
        /// The storage looked at.
        what: String,
        /// What failed.
        error: std::io::Error,
    },
    /// Read-only, and no log disk there: a read-only open formats nothing.
    #[error("no log disk, and a read-only open formats nothing")]
    NotFormatted,
    /// The NV region file holds someone else's data.
    #[error("{} holds data that is not a Cairn NV cache; refusing to format over it", .0.display())]
    NvForeign(PathBuf),
    /// Reading, creating or allocating the NV region file failed.
    #[error("{}: {error}", path.display())]
    NvIo {
        /// The region file.
        path: PathBuf,
        /// What failed.
        error: std::io::Error,
    },
    /// Mapping the NV region failed.
    #[error(transparent)]
    NvRegion(DeviceError),
    /// The NV cache is missing or empty after an unclean stop: writes
    /// acknowledged only to it are lost (see
    /// [`Request::accept_lost_nv_cache`]).
    #[error("the NV write cache {} is missing and the disk was not stopped cleanly", .0.display())]
    NvLost(PathBuf),
    /// Recovery failed (with the NV cache at `nv`, when it was there).
    #[error("recovering: {error}")]
    Recover {
        /// The NV cache recovery read, if any.
        nv: Option<PathBuf>,
        /// What failed.
        error: LogDiskError,
    },
    /// Formatting failed.
    #[error("formatting: {0}")]
    Format(LogDiskError),
}

/// What `dev` holds. A device with neither a superblock nor an interrupted
/// format is judged by `under`, the caller's look at the storage beneath
/// (which knows, say, that a sparse file is blank without reading it):
/// `Ok(None)` for blank. [`scan`] reads the device itself.
pub fn probe<D: Device + ?Sized>(
    dev: &D,
    block_size: u64,
    under: impl FnOnce() -> Result<Option<Foreign>, OpenError>,
) -> Result<Image, OpenError> {
    if let Some(sb) = superblock(dev)? {
        return Ok(Image::Ours(sb));
    }
    // An interrupted format left a checkpoint but no superblock (the
    // superblock is written last): ours, safe to format again.
    if dev.len() >= 2 * block_size
        && magic_at(dev, block_size).is_ok_and(|magic| magic == CHECKPOINT_MAGIC)
    {
        return Ok(Image::Interrupted);
    }
    Ok(match under()? {
        Some(foreign) => Image::Foreign(foreign),
        None => Image::Blank,
    })
}

/// The superblock, if `dev` starts with its magic.
fn superblock<D: Device + ?Sized>(dev: &D) -> Result<Option<Superblock>, OpenError> {
    if magic_at(dev, 0).map_err(OpenError::Head)? != SUPERBLOCK_MAGIC {
        return Ok(None);
    }
    crate::logdisk::read_superblock(dev)
        .map(Some)
        .map_err(OpenError::Superblock)
}

/// The 8 bytes at `at`, read as one aligned block: a device opened for
/// direct I/O (`direct = true`) takes nothing smaller, nor a buffer that is
/// not page-aligned.
fn magic_at<D: Device + ?Sized>(dev: &D, at: u64) -> Result<[u8; 8], DeviceError> {
    let len = dev.alignment().min(dev.len().saturating_sub(at)).max(8);
    let mut buf = IoBuf::zeroed(len as usize);
    dev.read_at(&mut buf, at)?;
    let mut magic = [0u8; 8];
    magic.copy_from_slice(&buf[..8]);
    Ok(magic)
}

/// Reads all of `dev` for its first non-zero byte: an `under` for
/// [`probe`] when nothing cheaper is known.
pub fn scan<D: Device + ?Sized>(dev: &D) -> Result<Option<Foreign>, OpenError> {
    const CHUNK: u64 = 1 << 20;
    // Page-aligned, for a device opened for direct I/O.
    let mut buf = IoBuf::zeroed(CHUNK as usize);
    let mut at = 0;
    while at < dev.len() {
        let n = (dev.len() - at).min(CHUNK) as usize;
        dev.read_at(&mut buf[..n], at)
            .map_err(|e| OpenError::Under {
                what: dev.describe(),
                error: std::io::Error::other(e),
            })?;
        if let Some(i) = buf[..n].iter().position(|&b| b != 0) {
            let mut sample = [0u8; 8];
            let m = (n - i).min(8);
            sample[..m].copy_from_slice(&buf[i..i + m]);
            return Ok(Some(Foreign {
                what: dev.describe(),
                at: Some((at + i as u64, sample)),
            }));
        }
        at += n as u64;
    }
    Ok(None)
}

impl Want {
    /// Whether a disk of geometry `g` is the one asked for.
    pub fn check(&self, g: &Geometry) -> Result<(), OpenError> {
        let block = u64::from(g.block_size);
        let mismatch = |what, have, want| Err(OpenError::GeometryMismatch { what, have, want });
        if block != self.block_size {
            return mismatch("block_size", block, self.block_size);
        }
        let segment = u64::from(g.segment_blocks) * block;
        if segment != self.segment_size {
            return mismatch("segment_size", segment, self.segment_size);
        }
        let logical = g.logical_blocks * block;
        match self.size {
            Some(size) if size != logical => mismatch("size", logical, size),
            _ => Ok(()),
        }
    }

    /// The geometry a new disk gets on a device of `device_len` bytes: as
    /// many segments as fit beside the two checkpoint slots the logical size
    /// needs, and (without a size) 80 % of their data slots exported.
    pub fn geometry(&self, device_len: u64) -> Result<Geometry, OpenError> {
        let block = self.block_size;
        let segment_blocks = (self.segment_size / block) as u32;
        let total = device_len / block;
        let mut segments = u32::try_from(
            (total.saturating_sub(1) / u64::from(segment_blocks)).min(u64::from(u32::MAX)),
        )
        .unwrap_or(u32::MAX);
        let logical_for = |segments: u32| match self.size {
            Some(size) => size / block,
            None => u64::from(segments) * u64::from(segment_blocks - 1) * 4 / 5,
        };
        loop {
            let geo = Geometry {
                block_size: block as u32,
                segment_blocks,
                segments,
                logical_blocks: logical_for(segments),
            };
            strict_assert!(
                segment_blocks >= 2 && block.is_power_of_two(),
                "checked by Want::check"
            );
            if geo.image_blocks() <= total || segments < 4 {
                return geo
                    .validate()
                    .map(|()| geo)
                    .map_err(|error| OpenError::NoRoom {
                        error,
                        device_len,
                        segments,
                    });
            }
            segments -= 1;
        }
    }
}

/// Recovers the log disk on `dev`, formats one if `dev` is blank (or holds an
/// interrupted format), and refuses anything else; see the module doc for
/// every case. `under` judges a device without a superblock (see [`probe`]).
pub fn open_or_format(
    dev: &SharedDevice,
    request: &Request<'_>,
    under: impl FnOnce() -> Result<Option<Foreign>, OpenError>,
) -> Result<(LogDisk<SharedDevice>, Opened), OpenError> {
    if request.read_only {
        let Some(sb) = superblock(dev.as_ref())? else {
            return Err(OpenError::NotFormatted);
        };
        return open_read_only(dev, request, &sb);
    }
    match probe(dev.as_ref(), request.want.block_size, under)? {
        Image::Ours(sb) => recover(dev, request, &sb),
        Image::Foreign(foreign) => Err(OpenError::Foreign(foreign)),
        Image::Interrupted | Image::Blank => format(dev, request),
    }
}

fn format(
    dev: &SharedDevice,
    request: &Request<'_>,
) -> Result<(LogDisk<SharedDevice>, Opened), OpenError> {
    let geo = request.want.geometry(dev.len())?;
    let region = match &request.nv {
        Some(nv) => {
            let head = probe::head::<8>(nv.path).map_err(|error| OpenError::NvIo {
                path: nv.path.to_path_buf(),
                error,
            })?;
            if head.is_some_and(|h| h != NV_MAGIC && h != [0; 8]) {
                return Err(OpenError::NvForeign(nv.path.to_path_buf()));
            }
            Some(nv_region(nv, true)?)
        }
        None => None,
    };
    // The superblock and a checkpoint: no segment is written (every summary
    // names its volume, so what an earlier use left there is not read as
    // ours) unless the storage may hold old data; then each segment's first
    // block, on a slow device (an HDD) a seek each.
    let disk = if request.may_hold_data {
        tracing::info!(
            "formatting a log disk of {} segments on {}, which may hold old data: one write at the start of each",
            geo.segments,
            dev.describe()
        );
        LogDisk::format_clearing(Arc::clone(dev), geo, region, request.options)
    } else {
        tracing::info!(
            "formatting a log disk of {} segments on {}",
            geo.segments,
            dev.describe()
        );
        LogDisk::format(Arc::clone(dev), geo, region, request.options)
    }
    .map_err(OpenError::Format)?;
    // What was asked is what was formatted, and it opens as ours.
    strict_assert_eq!(disk.geometry(), geo);
    strict_assert_eq!(
        disk.recovered(),
        super::Recovered {
            segments_read: 1,
            ..super::Recovered::default()
        },
        "a new disk replays nothing and reads only its head segment"
    );
    Ok((disk, Opened::Formatted))
}

fn recover(
    dev: &SharedDevice,
    request: &Request<'_>,
    sb: &Superblock,
) -> Result<(LogDisk<SharedDevice>, Opened), OpenError> {
    request.want.check(&sb.geometry)?;
    strict_assert!(
        !request.read_only,
        "a read-only open recovers in open_read_only"
    );
    let clean = request.closed_cleanly == Some(sb.id);
    let Some(nv) = &request.nv else {
        let disk = LogDisk::open(Arc::clone(dev), None, request.options)
            .map_err(|error| OpenError::Recover { nv: None, error })?;
        return Ok((disk, Opened::Recovered { clean }));
    };
    let region = nv_region(nv, false)?;
    match LogDisk::open(Arc::clone(dev), Some(region), request.options) {
        Ok(disk) => {
            // The disk opened is the one probed.
            strict_assert_eq!(disk.id(), sb.id);
            Ok((disk, Opened::Recovered { clean }))
        }
        Err(LogDiskError::Nv(NvError::Missing)) => {
            if !clean && !request.accept_lost_nv_cache {
                return Err(OpenError::NvLost(nv.path.to_path_buf()));
            }
            let region = nv_region(nv, true)?;
            let disk = LogDisk::open_with_new_nv_cache(Arc::clone(dev), region, request.options)
                .map_err(|error| OpenError::Recover { nv: None, error })?;
            // A fresh cache has nothing to take over.
            strict_assert_eq!(disk.recovered().nv_blocks, 0);
            Ok((disk, Opened::NvReformatted { clean }))
        }
        Err(error) => Err(OpenError::Recover {
            nv: Some(nv.path.to_path_buf()),
            error,
        }),
    }
}

/// Recovered in memory, nothing written: not a checkpoint, not the NV
/// region (mapped read-only when it is there).
fn open_read_only(
    dev: &SharedDevice,
    request: &Request<'_>,
    sb: &Superblock,
) -> Result<(LogDisk<SharedDevice>, Opened), OpenError> {
    let clean = request.closed_cleanly == Some(sb.id);
    let region = match &request.nv {
        Some(nv) if nv.path.exists() => Some(Box::new(
            MmapRegion::open_read_only(nv.path).map_err(OpenError::NvRegion)?,
        ) as Box<dyn Region>),
        Some(nv) if !clean && !request.accept_lost_nv_cache => {
            return Err(OpenError::NvLost(nv.path.to_path_buf()));
        }
        _ => None,
    };
    let disk = LogDisk::open_read_only(Arc::clone(dev), region, request.options)
        .map_err(|error| OpenError::Recover { nv: None, error })?;
    strict_assert_eq!(disk.id(), sb.id);
    Ok((disk, Opened::Recovered { clean }))
}

/// Maps the NV cache region file; `fresh` creates it at its size (an
/// existing file is otherwise mapped whole).
fn nv_region(nv: &NvFile<'_>, fresh: bool) -> Result<Box<dyn Region>, OpenError> {
    let exists = std::fs::metadata(nv.path).is_ok_and(|m| m.len() > 0);
    let len = if exists && !fresh { 0 } else { nv.size };
    let region = MmapRegion::open_claimed(nv.path, len, true, nv.persistence, Claim::Exclusive)
        .map_err(OpenError::NvRegion)?;
    if fresh && !probe::on_ram(nv.path) {
        // Written through once now, so that no acknowledged write waits
        // for the file system to allocate its page, or to convert an
        // unwritten extent (either is a journal commit per write).
        allocate_written(nv.path, region.len()).map_err(|error| OpenError::NvIo {
            path: nv.path.to_path_buf(),
            error,
        })?;
    }
    Ok(Box::new(region))
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::unnecessary_wraps)]
    use super::*;
    use crate::device::MemoryDevice;

    const BLOCK: u64 = 4096;
    const DEVICE: u64 = 4 << 20;

    fn want() -> Want {
        Want {
            block_size: BLOCK,
            segment_size: 16 * BLOCK,
            size: None,
        }
    }

    fn request(nv: Option<&Path>) -> Request<'_> {
        Request {
            want: want(),
            nv: nv.map(|path| NvFile {
                path,
                size: 1 << 20,
                persistence: PersistenceRequest::None,
            }),
            options: Options::default(),
            closed_cleanly: None,
            accept_lost_nv_cache: false,
            read_only: false,
            may_hold_data: false,
        }
    }

    fn blank() -> Result<Option<Foreign>, OpenError> {
        Ok(None)
    }

    fn never() -> Result<Option<Foreign>, OpenError> {
        panic!("a device of ours was judged as someone else's")
    }

    /// A formatted disk holding one written block, closed (cleanly) or only
    /// dropped; its id.
    fn formatted(dev: &SharedDevice, nv: Option<&Path>, close: bool) -> u64 {
        let (disk, opened) = open_or_format(dev, &request(nv), blank).unwrap();
        assert_eq!(opened, Opened::Formatted);
        disk.write_at(&[7u8; BLOCK as usize], 3 * BLOCK).unwrap();
        disk.flush().unwrap();
        if close {
            disk.close().unwrap();
        }
        disk.id()
    }

    fn device() -> SharedDevice {
        Arc::new(MemoryDevice::new(DEVICE))
    }

    fn block_3(disk: &LogDisk<SharedDevice>) -> Vec<u8> {
        let mut block = vec![0u8; BLOCK as usize];
        disk.read_at(&mut block, 3 * BLOCK).unwrap();
        block
    }

    fn bytes(dev: &SharedDevice) -> Vec<u8> {
        let mut all = vec![0u8; DEVICE as usize];
        dev.read_at(&mut all, 0).unwrap();
        all
    }

    #[test]
    fn blank_is_formatted() {
        let dev = device();
        assert!(matches!(
            probe(dev.as_ref(), BLOCK, || scan(dev.as_ref())).unwrap(),
            Image::Blank
        ));
        formatted(&dev, None, true);
        assert!(matches!(
            probe(dev.as_ref(), BLOCK, never).unwrap(),
            Image::Ours(_)
        ));
    }

    #[test]
    fn ours_is_recovered_clean_or_not() {
        let dev = device();
        let id = formatted(&dev, None, true);
        let (disk, opened) = open_or_format(&dev, &request(None), never).unwrap();
        assert_eq!(opened, Opened::Recovered { clean: false });
        assert_eq!(block_3(&disk), vec![7u8; BLOCK as usize]);
        drop(disk);
        let clean = Request {
            closed_cleanly: Some(id),
            ..request(None)
        };
        let (_, opened) = open_or_format(&dev, &clean, never).unwrap();
        assert_eq!(opened, Opened::Recovered { clean: true });
    }

    #[test]
    fn an_interrupted_format_is_formatted_again() {
        let dev = device();
        formatted(&dev, None, true);
        // The superblock is written last: a format stopped just before it.
        dev.write_at(&vec![0u8; BLOCK as usize], 0).unwrap();
        assert!(matches!(
            probe(dev.as_ref(), BLOCK, never).unwrap(),
            Image::Interrupted
        ));
        let (disk, opened) = open_or_format(&dev, &request(None), never).unwrap();
        assert_eq!(opened, Opened::Formatted);
        assert_eq!(block_3(&disk), vec![0u8; BLOCK as usize]);
    }

    #[test]
    fn foreign_data_is_refused_and_left_as_it_was() {
        let dev = device();
        dev.write_at(b"someone else's", 5 * BLOCK + 3).unwrap();
        let before = bytes(&dev);
        match open_or_format(&dev, &request(None), || scan(dev.as_ref())) {
            Err(OpenError::Foreign(Foreign {
                at: Some((at, sample)),
                ..
            })) => {
                assert_eq!(at, 5 * BLOCK + 3);
                assert_eq!(&sample, b"someone ");
            }
            other => panic!("expected Foreign, got {:?}", other.map(|(_, o)| o)),
        }
        assert!(bytes(&dev) == before, "a refused format wrote");
    }

    #[test]
    fn another_geometry_is_a_typed_error() {
        let dev = device();
        formatted(&dev, None, true);
        let cases = [
            (
                "block_size",
                Want {
                    block_size: 512,
                    ..want()
                },
                4096,
                512,
            ),
            (
                "segment_size",
                Want {
                    segment_size: 32 * BLOCK,
                    ..want()
                },
                16 * BLOCK,
                32 * BLOCK,
            ),
        ];
        for (what, asked, have, want) in cases {
            let request = Request {
                want: asked,
                ..request(None)
            };
            match open_or_format(&dev, &request, never) {
                Err(OpenError::GeometryMismatch {
                    what: w,
                    have: h,
                    want: x,
                }) => {
                    assert_eq!((w, h, x), (what, have, want));
                }
                other => panic!("{what}: got {:?}", other.map(|(_, o)| o)),
            }
        }
        let sized = Request {
            want: Want {
                size: Some(BLOCK),
                ..want()
            },
            ..request(None)
        };
        let error = open_or_format(&dev, &sized, never).err().unwrap();
        assert!(
            matches!(
                error,
                OpenError::GeometryMismatch {
                    what: "size",
                    want: BLOCK,
                    ..
                }
            ),
            "{error:?}"
        );
    }

    #[test]
    fn a_device_too_small_is_no_room() {
        let dev: SharedDevice = Arc::new(MemoryDevice::new(8 * BLOCK));
        let error = open_or_format(&dev, &request(None), blank).err().unwrap();
        assert!(matches!(error, OpenError::NoRoom { .. }), "{error:?}");
    }

    #[test]
    fn a_lost_nv_cache_after_a_clean_stop_is_formatted_again() {
        let dir = tempfile::tempdir().unwrap();
        let nv = dir.path().join("log.nv");
        let dev = device();
        let id = formatted(&dev, Some(&nv), true);
        std::fs::remove_file(&nv).unwrap();
        let clean = Request {
            closed_cleanly: Some(id),
            ..request(Some(&nv))
        };
        let (disk, opened) = open_or_format(&dev, &clean, never).unwrap();
        assert_eq!(opened, Opened::NvReformatted { clean: true });
        assert_eq!(block_3(&disk), vec![7u8; BLOCK as usize]);
    }

    #[test]
    fn a_lost_nv_cache_after_an_unclean_stop_is_refused_unless_accepted() {
        let dir = tempfile::tempdir().unwrap();
        let nv = dir.path().join("log.nv");
        let dev = device();
        formatted(&dev, Some(&nv), false);
        std::fs::remove_file(&nv).unwrap();
        let error = open_or_format(&dev, &request(Some(&nv)), never)
            .err()
            .unwrap();
        assert!(
            matches!(&error, OpenError::NvLost(path) if *path == nv),
            "{error:?}"
        );
        let accepted = Request {
            accept_lost_nv_cache: true,
            ..request(Some(&nv))
        };
        let (_, opened) = open_or_format(&dev, &accepted, never).unwrap();
        assert_eq!(opened, Opened::NvReformatted { clean: false });
    }

    #[test]
    fn a_foreign_nv_region_is_refused_when_formatting() {
        let dir = tempfile::tempdir().unwrap();
        let nv = dir.path().join("log.nv");
        std::fs::write(&nv, b"not an NV cache").unwrap();
        let dev = device();
        let error = open_or_format(&dev, &request(Some(&nv)), blank)
            .err()
            .unwrap();
        assert!(matches!(error, OpenError::NvForeign(_)), "{error:?}");
        assert_eq!(std::fs::read(&nv).unwrap(), b"not an NV cache");
        assert!(
            bytes(&dev).iter().all(|&b| b == 0),
            "a refused format wrote"
        );
    }

    #[test]
    fn read_only_recovers_and_writes_nothing() {
        let dev = device();
        let id = formatted(&dev, None, false);
        let before = bytes(&dev);
        let read_only = Request {
            read_only: true,
            ..request(None)
        };
        let (disk, opened) = open_or_format(&dev, &read_only, never).unwrap();
        assert_eq!(opened, Opened::Recovered { clean: false });
        assert_eq!(block_3(&disk), vec![7u8; BLOCK as usize]);
        drop(disk);
        let clean = Request {
            closed_cleanly: Some(id),
            ..read_only
        };
        let (_, opened) = open_or_format(&dev, &clean, never).unwrap();
        assert_eq!(opened, Opened::Recovered { clean: true });
        assert!(bytes(&dev) == before, "a read-only open wrote");
    }

    #[test]
    fn read_only_never_formats() {
        let dev = device();
        let read_only = Request {
            read_only: true,
            ..request(None)
        };
        let error = open_or_format(&dev, &read_only, blank).err().unwrap();
        assert!(matches!(error, OpenError::NotFormatted), "{error:?}");
        assert!(bytes(&dev).iter().all(|&b| b == 0));
    }

    #[test]
    fn read_only_without_its_nv_cache_needs_a_clean_stop_or_consent() {
        let dir = tempfile::tempdir().unwrap();
        let nv = dir.path().join("log.nv");
        let dev = device();
        let id = formatted(&dev, Some(&nv), true);
        std::fs::remove_file(&nv).unwrap();
        let read_only = Request {
            read_only: true,
            ..request(Some(&nv))
        };
        let error = open_or_format(&dev, &read_only, never).err().unwrap();
        assert!(matches!(error, OpenError::NvLost(_)), "{error:?}");
        for request in [
            Request {
                closed_cleanly: Some(id),
                ..read_only.clone()
            },
            Request {
                accept_lost_nv_cache: true,
                ..read_only.clone()
            },
        ] {
            let (disk, opened) = open_or_format(&dev, &request, never).unwrap();
            assert!(matches!(opened, Opened::Recovered { .. }));
            assert_eq!(block_3(&disk), vec![7u8; BLOCK as usize]);
        }
        assert!(!nv.exists(), "a read-only open created the NV region");
    }
}
