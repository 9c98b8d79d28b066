//! The NTL info block: the first 64 bytes of the region.
//!
//! ```text
//! 0   8  magic  "CAIRNNTL"
//! 8   4  version (u32 LE: 2, or 1 for an image without a lane log)
//! 12  4  flags (u32 LE; bit 0 = FLAG_IN_PLACE, the rest zero)
//! 16  8  block_size (u64 LE)
//! 24  8  lbas (u64 LE)
//! 32  8  data_blocks (u64 LE)
//! 40 20  reserved, zero
//! 60  4  CRC32C of bytes 0..60 (u32 LE)
//! ```
//!
//! # Invariants
//!
//! Checked by [`verify`], in this order, with these numbers in its messages
//! ([`decode`] checks 1 to 5 with typed errors):
//!
//! 1. Bytes 0..8 are [`MAGIC`].
//! 2. Bytes 60..64 are the CRC32C of bytes 0..60.
//! 3. The version is [`VERSION`] or [`VERSION_NO_LOG`].
//! 4. The flags hold only known bits ([`FLAG_IN_PLACE`]).
//! 5. The geometry is usable in the region (`Geometry::validate_version`: a
//!    block size that is a power of two ≥ 64, `0 < lbas < data_blocks < 2^48`,
//!    and the image, with its lane log in version 2, fits).
//! 6. The reserved bytes 40..60 are zero.
//!
//! [`encode`] checks its own output against them before the bytes leave
//! (`strict_assert!`): reserved bytes zero, fields and CRC decoding back, and
//! `decode(encode(x)) == x` for a valid `x`.

use super::layout::Geometry;

/// Magic at offset 0 of an NTL image.
pub const MAGIC: [u8; 8] = *b"CAIRNNTL";
/// Format version written: 2 has the lane log after the data blocks (see
/// `lanelog`). Version 1 (no lane log, two fences per write) is still opened
/// and written in its own way.
pub const VERSION: u32 = 2;
/// The version without a lane log.
pub const VERSION_NO_LOG: u32 = 1;
/// Flag: the image has been opened for in-place (non-atomic) writes since it was
/// formatted, so a crash during one of them may have left a torn block. Sticky
/// until the image is formatted again.
pub const FLAG_IN_PLACE: u32 = 1;
const KNOWN_FLAGS: u32 = FLAG_IN_PLACE;

/// Why an info block was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InfoError {
    /// Not an NTL image.
    #[error("bad magic {0:02x?} (not an NTL image)")]
    Magic([u8; 8]),
    /// Unknown version.
    #[error("unsupported NTL version {0}")]
    Version(u32),
    /// Flag bits this build does not know.
    #[error("unknown NTL flags {0:#x}")]
    Flags(u32),
    /// Checksum mismatch.
    #[error("info block checksum mismatch (stored {stored:#010x}, computed {computed:#010x})")]
    Checksum {
        /// Stored CRC.
        stored: u32,
        /// Computed CRC.
        computed: u32,
    },
    /// Geometry is impossible.
    #[error("invalid geometry: {0}")]
    Geometry(String),
}

/// Encodes `geo` and `flags` as an info block of `version`.
///
/// Invalid values (unknown flags or version: tests build such blocks to see
/// them refused) are encoded as given; only a valid block is checked to decode
/// back to the same [`Info`].
pub fn encode(geo: &Geometry, flags: u32, version: u32) -> [u8; 64] {
    let mut b = [0u8; 64];
    b[0..8].copy_from_slice(&MAGIC);
    b[8..12].copy_from_slice(&version.to_le_bytes());
    b[12..16].copy_from_slice(&flags.to_le_bytes());
    b[16..24].copy_from_slice(&geo.block_size.to_le_bytes());
    b[24..32].copy_from_slice(&geo.lbas.to_le_bytes());
    b[32..40].copy_from_slice(&geo.data_blocks.to_le_bytes());
    let crc = crc32c::crc32c(&b[..60]);
    b[60..64].copy_from_slice(&crc.to_le_bytes());
    strict_assert!(
        b[RESERVED].iter().all(|&x| x == 0),
        "info encode: reserved bytes not zero"
    );
    strict_assert_eq!(
        fields(&b),
        (version, flags, *geo),
        "info encode: the fields do not decode back"
    );
    strict_assert_eq!(u32_at(&b, 60), crc32c::crc32c(&b[..60]));
    let known = version == VERSION || version == VERSION_NO_LOG;
    // Only a valid geometry has offsets to compute (a zero block size has none).
    if known
        && flags & !KNOWN_FLAGS == 0
        && geo.validate_version(u64::MAX, version == VERSION).is_ok()
    {
        let needs = if version == VERSION {
            geo.region_len()
        } else {
            geo.log_base()
        };
        strict_assert_eq!(
            decode(&b, needs),
            Ok(Info {
                geometry: *geo,
                flags,
                version
            }),
            "info encode: decode(encode(x)) != x"
        );
    }
    b
}

/// The reserved bytes of an info block.
const RESERVED: std::ops::Range<usize> = 40..60;

/// The version, flags and geometry fields as stored (unchecked).
fn fields(b: &[u8; 64]) -> (u32, u32, Geometry) {
    let geo = Geometry {
        block_size: u64_at(b, 16),
        lbas: u64_at(b, 24),
        data_blocks: u64_at(b, 32),
    };
    (u32_at(b, 8), u32_at(b, 12), geo)
}

fn u64_at(b: &[u8; 64], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}

fn u32_at(b: &[u8; 64], at: usize) -> u32 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(w)
}

/// A decoded info block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Info {
    /// Sizes.
    pub geometry: Geometry,
    /// Flag bits.
    pub flags: u32,
    /// [`VERSION`] or [`VERSION_NO_LOG`].
    pub version: u32,
}

impl Info {
    /// Whether the image has a lane log.
    pub fn has_log(&self) -> bool {
        self.version >= VERSION
    }
}

/// Decodes and validates an info block (magic, version, CRC, flags, then geometry
/// against `region_len`).
pub fn decode(b: &[u8; 64], region_len: u64) -> Result<Info, InfoError> {
    let mut magic = [0u8; 8];
    magic.copy_from_slice(&b[0..8]);
    if magic != MAGIC {
        return Err(InfoError::Magic(magic));
    }
    let stored = u32_at(b, 60);
    let computed = crc32c::crc32c(&b[..60]);
    if stored != computed {
        return Err(InfoError::Checksum { stored, computed });
    }
    let (version, flags, geo) = fields(b);
    if version != VERSION && version != VERSION_NO_LOG {
        return Err(InfoError::Version(version));
    }
    if flags & !KNOWN_FLAGS != 0 {
        return Err(InfoError::Flags(flags));
    }
    geo.validate_version(region_len, version >= VERSION)
        .map_err(InfoError::Geometry)?;
    Ok(Info {
        geometry: geo,
        flags,
        version,
    })
}

/// Checks the info block `b` of a region of `region_len` bytes against the
/// invariants at the head of this file, in their order: the first broken one
/// is named by its number.
pub fn verify(b: &[u8; 64], region_len: u64) -> Result<Info, String> {
    let number = |e: &InfoError| match e {
        InfoError::Magic(_) => 1,
        InfoError::Checksum { .. } => 2,
        InfoError::Version(_) => 3,
        InfoError::Flags(_) => 4,
        InfoError::Geometry(_) => 5,
    };
    let info = decode(b, region_len)
        .map_err(|e| format!("NTL info invariant {} broken: {e}", number(&e)))?;
    if b[RESERVED].iter().any(|&x| x != 0) {
        return Err("NTL info invariant 6 broken: reserved bytes 40..60 are not zero".into());
    }
    Ok(info)
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: Geometry = Geometry {
        block_size: 4096,
        lbas: 10,
        data_blocks: 12,
    };

    #[test]
    fn round_trip_and_every_byte_flip_is_detected() {
        let b = encode(&G, 0, VERSION);
        let info = |flags, version| Info {
            geometry: G,
            flags,
            version,
        };
        assert_eq!(decode(&b, G.region_len()), Ok(info(0, VERSION)));
        assert_eq!(
            decode(&encode(&G, FLAG_IN_PLACE, VERSION), G.region_len()),
            Ok(info(FLAG_IN_PLACE, VERSION))
        );
        assert_eq!(
            decode(&encode(&G, 2, VERSION), G.region_len()),
            Err(InfoError::Flags(2)),
            "unknown flags are refused even with a valid CRC"
        );
        assert_eq!(
            decode(&encode(&G, 0, 3), G.region_len()),
            Err(InfoError::Version(3))
        );
        // A version 1 image has no lane log, so it fits a shorter region.
        let short = G.region_len() - crate::ntl::layout::LOG_LEN;
        assert_eq!(
            decode(&encode(&G, 0, VERSION_NO_LOG), short),
            Ok(info(0, VERSION_NO_LOG))
        );
        assert!(matches!(decode(&b, short), Err(InfoError::Geometry(_))));
        for i in 0..64 {
            for bit in 0..8 {
                let mut c = b;
                c[i] ^= 1 << bit;
                assert!(
                    decode(&c, G.region_len()).is_err(),
                    "flip byte {i} bit {bit}"
                );
            }
        }
        assert!(matches!(
            decode(&b, G.region_len() - 1),
            Err(InfoError::Geometry(_))
        ));
    }

    #[test]
    fn verify_names_the_broken_invariant() {
        let b = encode(&G, 0, VERSION);
        assert!(verify(&b, G.region_len()).is_ok());
        let broken = |b: &[u8; 64], region_len| verify(b, region_len).expect_err("broken");
        let mut magic = b;
        magic[0] ^= 1;
        assert!(broken(&magic, G.region_len()).contains("invariant 1 "));
        let mut crc = b;
        crc[61] ^= 1;
        assert!(broken(&crc, G.region_len()).contains("invariant 2 "));
        assert!(broken(&encode(&G, 0, 3), G.region_len()).contains("invariant 3 "));
        assert!(broken(&encode(&G, 2, VERSION), G.region_len()).contains("invariant 4 "));
        assert!(broken(&b, G.region_len() - 1).contains("invariant 5 "));
        // A reserved byte set under a valid CRC: decode accepts it, verify does not.
        let mut reserved = b;
        reserved[50] = 1;
        let crc = crc32c::crc32c(&reserved[..60]);
        reserved[60..64].copy_from_slice(&crc.to_le_bytes());
        assert!(decode(&reserved, G.region_len()).is_ok());
        assert!(broken(&reserved, G.region_len()).contains("invariant 6 "));
    }

    #[test]
    fn a_zero_block_size_under_a_valid_crc_is_an_error_not_a_panic() {
        // Found by reading the decoder for the `ntl_info` fuzz target: the
        // region length was computed from the geometry before the block size
        // was checked, and a zero block size divided by zero.
        for block_size in [0, 1, 63, 96] {
            let geo = Geometry { block_size, ..G };
            let b = encode(&geo, 0, VERSION);
            assert!(
                matches!(decode(&b, u64::MAX), Err(InfoError::Geometry(_))),
                "block size {block_size}"
            );
        }
    }
}
