//! The layout of an NTL image: its [`Geometry`] and the lengths of its
//! regions, beneath the format files (`info`, `map`, `lanelog`) and the
//! [`Btt`](super::Btt) that uses them (model: redb's `page_store/layout.rs`).
//!
//! ```text
//! [info: INFO_LEN][map: lbas × 8] padding to block_size
//! [data: data_blocks × block_size]
//! [lane log: LOG_LEN = LANES × SLOTS × RECORD]   (image version 2)
//! ```

/// Bytes of the info block.
pub const INFO_LEN: u64 = 64;
/// Lanes of the lane log: one per stripe lock of [`super::Btt`].
pub const LANES: u64 = 256;
/// Record slots per lane, written alternately.
pub const SLOTS: u64 = 2;
/// Bytes per lane-log record (one cache line).
pub const RECORD: u64 = 64;
/// Bytes of the whole lane log.
pub const LOG_LEN: u64 = LANES * SLOTS * RECORD;

// The map follows the info block and is stored to with 8-byte atomic stores.
const _: () = assert!(
    INFO_LEN.is_multiple_of(8),
    "map entries must be 8-byte aligned"
);
// `info::encode` produces 64 bytes.
const _: () = assert!(INFO_LEN == 64, "the info block is 64 bytes");
// `lanelog::Record::encode` produces 64 bytes: one cache line, so a record
// persists with one write-back and is never split across two lines.
const _: () = assert!(RECORD == 64, "a lane-log record is one cache line");
// Two slots per lane: a record outlives its write by one more write (`lanelog`).
const _: () = assert!(SLOTS == 2, "the lane log alternates between two slots");

/// Sizes of an NTL image.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// Bytes per block.
    pub block_size: u64,
    /// Logical blocks exposed.
    pub lbas: u64,
    /// Physical data blocks (≥ `lbas` + one spare per concurrent writer).
    pub data_blocks: u64,
}

impl Geometry {
    pub(crate) fn data_base(&self) -> u64 {
        debug_assert!(self.block_size > 0, "a geometry with zero-byte blocks");
        (INFO_LEN + self.lbas * 8).div_ceil(self.block_size) * self.block_size
    }

    /// Where the lane log starts (image version 2): right after the data blocks.
    pub(crate) fn log_base(&self) -> u64 {
        self.data_base()
            .saturating_add(self.data_blocks.saturating_mul(self.block_size))
    }

    /// Region bytes the image needs, lane log included (saturating, so absurd
    /// geometry fails `validate`).
    pub fn region_len(&self) -> u64 {
        self.log_base().saturating_add(LOG_LEN)
    }

    /// Checks the geometry is usable in a region of `region_len` bytes.
    pub fn validate(&self, region_len: u64) -> Result<(), String> {
        self.validate_version(region_len, true)
    }

    /// [`Geometry::validate`] for an image with or without (version 1) a lane log.
    pub(crate) fn validate_version(&self, region_len: u64, log: bool) -> Result<(), String> {
        // The block size and counts are checked before any offset is computed
        // from them: a zero block size would divide by zero in `data_base`.
        if self.block_size < 64 || !self.block_size.is_power_of_two() {
            return Err(format!(
                "block size {} is not a power of two >= 64",
                self.block_size
            ));
        }
        if self.lbas == 0 || self.data_blocks <= self.lbas || self.data_blocks >= 1 << 48 {
            return Err(format!(
                "{} data blocks for {} logical blocks (need more data blocks than logical, < 2^48)",
                self.data_blocks, self.lbas
            ));
        }
        let needs = if log {
            self.region_len()
        } else {
            self.log_base()
        };
        let need = self
            .lbas
            .checked_mul(8)
            .and_then(|m| m.checked_add(INFO_LEN + self.block_size))
            .and_then(|m| {
                self.data_blocks
                    .checked_mul(self.block_size)?
                    .checked_add(m)
            });
        match need {
            Some(_) if needs <= region_len => {
                // The map fits between the info block and the block-aligned data.
                strict_assert!(
                    self.data_base() >= INFO_LEN + self.lbas * 8
                        && self.data_base().is_multiple_of(self.block_size),
                    "data blocks at {} overlap the map or are unaligned",
                    self.data_base()
                );
                Ok(())
            }
            _ => Err(format!(
                "image needs {needs} bytes, region has {region_len}"
            )),
        }
    }
}
