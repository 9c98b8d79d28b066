//! The byte-level codec every on-disk structure shares: little-endian
//! integers at explicit offsets, CRC32C, and the checks each decoder runs
//! first (size, magic, version, checksum), with the error they report.
//!
//! Nothing here knows a layout; the log disk (`logdisk/format.rs`) and the
//! flash tier (`tier/format.rs`) lay their structures out with it.

use std::ops::Range;

use thiserror::Error;

/// Why a structure did not decode.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum FormatError {
    /// The buffer is not the structure's size.
    #[error("{what}: {got} bytes, expected {want}")]
    Size {
        /// Which structure.
        what: &'static str,
        /// Bytes given.
        got: usize,
        /// Bytes expected.
        want: usize,
    },
    /// Wrong magic: not this structure at all (or never written).
    #[error("{what}: bad magic {found:02x?}")]
    Magic {
        /// Which structure.
        what: &'static str,
        /// The first 8 bytes found.
        found: [u8; 8],
    },
    /// A version this code does not read.
    #[error("{what}: version {found}, this build reads version {supported}")]
    Version {
        /// Which structure.
        what: &'static str,
        /// The version found.
        found: u32,
        /// The version this build reads.
        supported: u32,
    },
    /// Checksum mismatch: torn or corrupted.
    #[error(
        "{what}: checksum {stored:#010x} stored, {computed:#010x} computed (torn or corrupted)"
    )]
    Checksum {
        /// Which structure.
        what: &'static str,
        /// CRC32C stored in the structure.
        stored: u32,
        /// CRC32C of the bytes read.
        computed: u32,
    },
    /// Fields that decode but make no sense together.
    #[error("{what}: {reason}")]
    Invalid {
        /// Which structure.
        what: &'static str,
        /// What is wrong.
        reason: String,
    },
}

/// Whether `size` is a block size a superblock may name: a power of two
/// from 512 bytes to 64 KiB.
pub(crate) const fn valid_block_size(size: u32) -> bool {
    size.is_power_of_two() && 512 <= size && size <= 65_536
}

/// The end of an fsck report, the same for every image kind: "clean: no
/// problem found", or the count and one indented line per problem.
pub(crate) fn fmt_problems(
    f: &mut std::fmt::Formatter<'_>,
    problems: &[String],
) -> std::fmt::Result {
    if problems.is_empty() {
        return f.write_str("clean: no problem found");
    }
    writeln!(f, "{} problems:", problems.len())?;
    for p in problems {
        writeln!(f, "  {p}")?;
    }
    Ok(())
}

pub(crate) fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut x = [0u8; 4];
    x.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(x)
}

pub(crate) fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(x)
}

pub(crate) fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

pub(crate) fn put_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

/// Checks size, magic, version and the CRC32C stored at `crc_at` over every
/// other byte (the CRC field counts as zero).
pub(crate) fn check(
    what: &'static str,
    b: &[u8],
    want: usize,
    (magic, supported): ([u8; 8], u32),
    crc_at: usize,
) -> Result<(), FormatError> {
    // Shorter than magic, version and the CRC field: nothing to check.
    if b.len() < 16 || b.len() < crc_at + 4 {
        return Err(FormatError::Size {
            what,
            got: b.len(),
            want: want.max(16).max(crc_at + 4),
        });
    }
    if b.len() != want {
        return Err(FormatError::Size {
            what,
            got: b.len(),
            want,
        });
    }
    let mut found = [0u8; 8];
    found.copy_from_slice(&b[..8]);
    if found != magic {
        return Err(FormatError::Magic { what, found });
    }
    let version = u32_at(b, 8);
    if version != supported {
        return Err(FormatError::Version {
            what,
            found: version,
            supported,
        });
    }
    let stored = u32_at(b, crc_at);
    let computed = crc_skipping(b, crc_at);
    if stored != computed {
        return Err(FormatError::Checksum {
            what,
            stored,
            computed,
        });
    }
    Ok(())
}

/// CRC32C of `data`, the checksum of every block and structure here
/// (crc-fast: carry-less-multiply folding, 52 ns per 4 KiB block on this
/// machine against 180 ns for the `crc32` instruction loop; the same
/// values as the `crc32c` crate).
pub fn crc32c(data: &[u8]) -> u32 {
    crc_fast::checksum(crc_fast::CrcAlgorithm::Crc32Iscsi, data) as u32
}

/// CRC32C of `b` with the 4 bytes at `crc_at` taken as zero.
pub(crate) fn crc_skipping(b: &[u8], crc_at: usize) -> u32 {
    let mut d = crc_fast::Digest::new(crc_fast::CrcAlgorithm::Crc32Iscsi);
    d.update(&b[..crc_at]);
    d.update(&[0; 4]);
    d.update(&b[crc_at + 4..]);
    d.finalize() as u32
}

/// Whether the encoders' paired checks run: when `strict_assert!` evaluates
/// its condition (debug builds, or the `strict-assertions` feature). Read
/// only where a check needs a copy it would be wasteful to make otherwise.
pub(crate) const CHECKED: bool = cfg!(any(debug_assertions, feature = "strict-assertions"));

/// Whether every byte of `b` in `ranges` is zero: the reserved bytes of a
/// structure, which this version must leave zero so a later one can use them.
pub(crate) fn reserved_zero(b: &[u8], ranges: impl IntoIterator<Item = Range<usize>>) -> bool {
    ranges.into_iter().all(|r| b[r].iter().all(|&x| x == 0))
}

pub(crate) fn seal(b: &mut [u8], crc_at: usize) {
    put_u32(b, crc_at, 0);
    let crc = crc_skipping(b, crc_at);
    put_u32(b, crc_at, crc);
}

/// A new identity for a structure (nonzero): the log disk's volume id, the
/// flash tier's cache id.
pub(crate) fn new_id() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.finish() | 1
}
