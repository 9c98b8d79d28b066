//! Opening an NTL image file: what the file holds decides whether it is
//! opened, formatted, or refused. The caller (a volume) only says what it
//! wants and turns the typed [`OpenError`] into its own words.
//!
//! | the file holds                         | read-write                  | read-only                          |
//! |----------------------------------------|-----------------------------|------------------------------------|
//! | the NTL magic ([`Image::Ours`])        | open, geometry checked      | open `PROT_READ`, geometry checked |
//! | nothing: missing, sparse, zeroes       | format ([`Opened::Formatted`]) | refused ([`OpenError::Region`]) |
//! | anything else ([`Image::Foreign`])     | refused, nothing written    | refused (the info block is not ours) |
//! | writes a crash left in the lane log    | replayed by the open        | refused ([`OpenError::Interrupted`]) |
//! | another geometry than asked            | [`OpenError::GeometryMismatch`] | the same                       |

use std::path::Path;
use std::time::{Duration, Instant};

use crate::device::{Claim, DeviceError, probe};
use crate::ntl::{Btt, Geometry, MAGIC, MapError, MmapRegion, PageSize, PersistenceRequest};

/// What an image file holds before it is opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Image {
    /// Starts with the NTL magic.
    Ours,
    /// Missing, sparse, or only zeroes: safe to format.
    Blank,
    /// Someone else's data: the first non-zero byte is at `offset`.
    Foreign {
        /// Where the first non-zero byte is.
        offset: u64,
    },
}

/// What `path` holds (reads the first bytes, then looks for data only if
/// they are not ours).
pub fn probe(path: &Path) -> std::io::Result<Image> {
    if probe::head::<8>(path)? == Some(MAGIC) {
        return Ok(Image::Ours);
    }
    Ok(match probe::first_nonzero(path)? {
        Some(offset) => Image::Foreign { offset },
        None => Image::Blank,
    })
}

/// What the caller asks of the image.
#[derive(Clone, Copy, Debug)]
pub struct Want {
    /// The geometry a new image gets, and an existing one must have
    /// (`block_size` and `lbas`; the spare blocks are the image's own).
    pub geometry: Geometry,
    /// How the mapping is made durable.
    pub persistence: PersistenceRequest,
    /// Back the mapping with huge pages when it can.
    pub huge_pages: bool,
    /// Map `PROT_READ` with a shared claim; write nothing, format nothing.
    pub read_only: bool,
}

/// What opening did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Opened {
    /// An existing image, opened (its lane log replayed, unless read-only);
    /// `huge_pages` says what collapsing the mapping gave, and how long it
    /// took, when it gave anything.
    Opened {
        /// The page size the mapping ended with, and the time spent.
        huge_pages: Option<(PageSize, Duration)>,
    },
    /// A blank file, formatted now.
    Formatted,
}

/// Why an image could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// Reading the file to probe it failed.
    #[error("{0}")]
    Probe(std::io::Error),
    /// Mapping the file failed (missing, claimed by another process, …).
    #[error(transparent)]
    Region(DeviceError),
    /// The image did not open.
    #[error("opening the NTL image: {0}")]
    Open(MapError),
    /// Formatting failed.
    #[error("formatting the NTL image: {0}")]
    Format(MapError),
    /// The image has another geometry than asked: an image keeps its own.
    #[error(
        "the NTL image holds {} blocks of {} bytes; asked for {} of {}",
        have.lbas, have.block_size, want.lbas, want.block_size
    )]
    GeometryMismatch {
        /// The image's.
        have: Geometry,
        /// The one asked for.
        want: Geometry,
    },
    /// The file holds data that is not an NTL image; nothing was written.
    #[error("not an NTL image (non-zero byte at offset {offset}); refusing to format over it")]
    Foreign {
        /// Where the first non-zero byte is.
        offset: u64,
    },
    /// Read-only: the lane log holds writes a crash interrupted, and
    /// replaying them writes.
    #[error("the NTL image holds writes a crash interrupted (in its lane log)")]
    Interrupted,
}

/// Opens the image at `path` if it is ours, formats it if it is blank, and
/// refuses anything else (see the table in the module doc).
pub fn open_or_format(path: &Path, want: &Want) -> Result<(Btt<MmapRegion>, Opened), OpenError> {
    if want.read_only {
        return open_read_only(path, want);
    }
    let geo = want.geometry;
    match probe(path).map_err(OpenError::Probe)? {
        Image::Ours => {
            let is_dax = std::fs::metadata(path)
                .is_ok_and(|m| std::os::unix::fs::FileTypeExt::is_char_device(&m.file_type()));
            let len = if is_dax { geo.region_len() } else { 0 };
            let mut region =
                MmapRegion::open_claimed(path, len, false, want.persistence, Claim::Exclusive)
                    .map_err(OpenError::Region)?;
            let huge_pages = want.huge_pages.then(|| {
                let started = Instant::now();
                (region.collapse_huge_pages(), started.elapsed())
            });
            let btt = Btt::open(region).map_err(OpenError::Open)?;
            check_geometry(&btt, want)?;
            let huge_pages = huge_pages.filter(|(pages, _)| *pages != PageSize::Default);
            Ok((btt, Opened::Opened { huge_pages }))
        }
        Image::Foreign { offset } => Err(OpenError::Foreign { offset }),
        Image::Blank => {
            let region = MmapRegion::open_claimed(
                path,
                geo.region_len(),
                true,
                want.persistence,
                Claim::Exclusive,
            )
            .map_err(OpenError::Region)?;
            let btt = Btt::format(region, geo).map_err(OpenError::Format)?;
            Ok((btt, Opened::Formatted))
        }
    }
}

fn open_read_only(path: &Path, want: &Want) -> Result<(Btt<MmapRegion>, Opened), OpenError> {
    let region = MmapRegion::open_read_only(path).map_err(OpenError::Region)?;
    let btt = Btt::open_read_only(region).map_err(|e| match e {
        MapError::Region(DeviceError::ReadOnly { .. }) => OpenError::Interrupted,
        e => OpenError::Open(e),
    })?;
    check_geometry(&btt, want)?;
    Ok((btt, Opened::Opened { huge_pages: None }))
}

fn check_geometry(btt: &Btt<MmapRegion>, want: &Want) -> Result<(), OpenError> {
    let have = btt.geometry();
    if have.block_size != want.geometry.block_size || have.lbas != want.geometry.lbas {
        return Err(OpenError::GeometryMismatch {
            have,
            want: want.geometry,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::os::unix::fs::FileExt;

    const BLOCK: u64 = 4096;

    fn want(lbas: u64, read_only: bool) -> Want {
        Want {
            geometry: Geometry {
                block_size: BLOCK,
                lbas,
                data_blocks: lbas + 4,
            },
            persistence: PersistenceRequest::None,
            huge_pages: false,
            read_only,
        }
    }

    /// Formats an image at `path` with one block written, and closes it.
    fn formatted(path: &Path) {
        let (btt, opened) = open_or_format(path, &want(64, false)).unwrap();
        assert_eq!(opened, Opened::Formatted);
        btt.write_block(3, &[7u8; BLOCK as usize]).unwrap();
    }

    #[test]
    fn a_missing_or_blank_file_is_formatted() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("n.ntl");
        assert_eq!(probe(&path).unwrap(), Image::Blank);
        formatted(&path);
        assert_eq!(probe(&path).unwrap(), Image::Ours);
        let sparse = dir.path().join("sparse.ntl");
        std::fs::File::create(&sparse)
            .unwrap()
            .set_len(1 << 20)
            .unwrap();
        let (_, opened) = open_or_format(&sparse, &want(64, false)).unwrap();
        assert_eq!(opened, Opened::Formatted);
    }

    #[test]
    fn an_image_of_ours_is_opened_with_its_blocks() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("n.ntl");
        formatted(&path);
        let (btt, opened) = open_or_format(&path, &want(64, false)).unwrap();
        assert_eq!(opened, Opened::Opened { huge_pages: None });
        let mut block = vec![0u8; BLOCK as usize];
        btt.read_block(3, &mut block).unwrap();
        assert_eq!(block, vec![7u8; BLOCK as usize]);
    }

    #[test]
    fn foreign_data_is_refused_and_left_as_it_was() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("n.ntl");
        let file = std::fs::File::create(&path).unwrap();
        file.set_len(1 << 20).unwrap();
        file.write_all_at(b"not ours", 5000).unwrap();
        let before = std::fs::read(&path).unwrap();
        for read_only in [false, true] {
            let error = open_or_format(&path, &want(64, read_only)).err().unwrap();
            if read_only {
                assert!(matches!(error, OpenError::Open(_)), "{error:?}");
            } else {
                assert!(
                    matches!(error, OpenError::Foreign { offset: 5000 }),
                    "{error:?}"
                );
            }
        }
        assert_eq!(std::fs::read(&path).unwrap(), before);
    }

    #[test]
    fn another_geometry_is_a_typed_error_read_write_or_read_only() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("n.ntl");
        formatted(&path);
        for read_only in [false, true] {
            match open_or_format(&path, &want(32, read_only)) {
                Err(OpenError::GeometryMismatch { have, want }) => {
                    assert_eq!((have.lbas, want.lbas), (64, 32));
                }
                other => panic!("expected a geometry mismatch, got {:?}", other.err()),
            }
        }
    }

    #[test]
    fn read_only_opens_an_image_and_never_formats() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("n.ntl");
        let error = open_or_format(&path, &want(64, true)).err().unwrap();
        assert!(matches!(error, OpenError::Region(_)), "{error:?}");
        assert!(!path.exists(), "a read-only open created the image");
        formatted(&path);
        let before = std::fs::read(&path).unwrap();
        let (btt, opened) = open_or_format(&path, &want(64, true)).unwrap();
        assert_eq!(opened, Opened::Opened { huge_pages: None });
        let mut block = vec![0u8; BLOCK as usize];
        btt.read_block(3, &mut block).unwrap();
        assert_eq!(block, vec![7u8; BLOCK as usize]);
        drop(btt);
        assert_eq!(std::fs::read(&path).unwrap(), before);
    }
}
