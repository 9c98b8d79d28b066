//! [`CacheConfig`]: what a [`BlockCache`](super::BlockCache) is built from.

use std::sync::Arc;

use cairn_policy::{ConfigError, PolicyConfig, PrefetchConfig};

use super::groups::{Placement, SingleDevice};

pub use crate::limits::{BLOCK_SIZE_MAX, BLOCK_SIZE_MIN, RUN_BLOCKS_MAX, SHARDS_MAX};

/// What a write does to a cached copy of the blocks it touches. Either way
/// the device is written first, and no later read returns the old data.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WriteMode {
    /// Write through, then replace the cached copy with the new bytes (a
    /// resident block stays resident; a block not resident is not loaded).
    #[default]
    Update,
    /// Write through, then drop the cached copy.
    Invalidate,
    /// As `Update`, and a write covering a whole block that is not cached
    /// caches it (write-allocate: the data is at hand, no device read).
    Allocate,
}

/// A block cache's configuration. `Default` gives 64 KiB blocks, 64 MiB,
/// LRU, automatic sharding, write-through-update, 1 MiB readahead, online
/// costs with smoothing 0.1, one device.
#[derive(Clone)]
pub struct CacheConfig {
    /// Block size in bytes: a power of two in [`BLOCK_SIZE_MIN`],
    /// [`BLOCK_SIZE_MAX`]. Default 64 KiB.
    pub block_size_bytes: u64,
    /// Capacity in bytes, at least one block per shard. Default 64 MiB.
    pub capacity_bytes: u64,
    /// The replacement policy, any of `cairn-policy`'s. Default LRU.
    pub policy: PolicyConfig,
    /// Number of shards (a power of two, at most [`SHARDS_MAX`]); 0 chooses:
    /// 4 per core, at least 16, halved while a shard would hold fewer than
    /// 256 blocks. Each shard runs its own policy instance on its share of
    /// the capacity; 1 shard makes the cache replace exactly as the
    /// simulator does. Default 0.
    pub shards: usize,
    /// What writes do to cached copies. Default [`WriteMode::Update`].
    pub write_mode: WriteMode,
    /// How far past a sequential request to read, bytes (rounded up to whole
    /// blocks; 0 turns readahead off). Default 1 MiB. Ignored (readahead is
    /// off) when [`prefetch`](Self::prefetch) names a prefetcher.
    pub readahead_bytes: u64,
    /// A prefetcher of `cairn-policy` in place of readahead (`None`: the
    /// stream readahead above). Default `None`.
    pub prefetch: Option<PrefetchConfig>,
    /// Weight of each new service-time sample in a cost group's moving
    /// average, in (0, 1]; 0 turns online cost estimation off (the `cost`
    /// policy then keeps the costs it was configured with). Default 0.1.
    pub cost_smoothing: f64,
    /// Which device each byte lives on, for the cost groups. Default one
    /// device.
    pub placement: Arc<dyn Placement>,
}

impl Default for CacheConfig {
    fn default() -> Self {
        Self {
            block_size_bytes: 64 << 10,
            capacity_bytes: 64 << 20,
            policy: PolicyConfig::Lru(cairn_policy::lru::LruConfig::default()),
            shards: 0,
            write_mode: WriteMode::Update,
            readahead_bytes: 1 << 20,
            prefetch: None,
            cost_smoothing: 0.1,
            placement: Arc::new(SingleDevice),
        }
    }
}

impl std::fmt::Debug for CacheConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CacheConfig")
            .field("block_size_bytes", &self.block_size_bytes)
            .field("capacity_bytes", &self.capacity_bytes)
            .field("policy", &self.policy)
            .field("shards", &self.shards)
            .field("write_mode", &self.write_mode)
            .field("readahead_bytes", &self.readahead_bytes)
            .field("prefetch", &self.prefetch)
            .field("cost_smoothing", &self.cost_smoothing)
            .field("devices", &self.placement.devices())
            .finish()
    }
}

/// A cache configuration that cannot be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CacheError {
    /// The block size is not a power of two in range.
    #[error(
        "block size {0} bytes is not a power of two between {BLOCK_SIZE_MIN} and {BLOCK_SIZE_MAX}"
    )]
    BlockSize(u64),
    /// The shard count is not a power of two in range.
    #[error("shard count {0} is not a power of two between 1 and {SHARDS_MAX}")]
    Shards(usize),
    /// The capacity holds less than one block per shard.
    #[error(
        "capacity {capacity} bytes holds less than one {block_size}-byte block in each of {shards} shards"
    )]
    Capacity {
        /// The capacity given.
        capacity: u64,
        /// The block size.
        block_size: u64,
        /// The shard count.
        shards: usize,
    },
    /// The cost smoothing is outside [0, 1].
    #[error("cost smoothing {0} is not in [0, 1]")]
    Smoothing(f64),
    /// The device under the cache has no bytes.
    #[error("the device under the cache is empty")]
    EmptyDevice,
    /// The placement names no device.
    #[error("the placement has no devices")]
    Placement,
    /// The policy cannot be built with a shard's capacity.
    #[error("policy: {0}")]
    Policy(#[from] ConfigError),
    /// The prefetcher's parameters are out of range.
    #[error("prefetch: {0}")]
    Prefetch(ConfigError),
}

impl CacheConfig {
    /// Checks everything that does not depend on the device, and returns the
    /// shard count to use.
    pub fn validate(&self) -> Result<usize, CacheError> {
        let block = self.block_size_bytes;
        if !block.is_power_of_two() || !(BLOCK_SIZE_MIN..=BLOCK_SIZE_MAX).contains(&block) {
            return Err(CacheError::BlockSize(block));
        }
        if !(0.0..=1.0).contains(&self.cost_smoothing) {
            return Err(CacheError::Smoothing(self.cost_smoothing));
        }
        if self.placement.devices() == 0 {
            return Err(CacheError::Placement);
        }
        if let Some(prefetch) = &self.prefetch {
            prefetch.validate().map_err(CacheError::Prefetch)?;
        }
        let blocks = self.capacity_bytes / block;
        let shards = if self.shards == 0 {
            let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
            let mut shards = (cores * 4).max(16).next_power_of_two().min(SHARDS_MAX);
            while shards > 1 && blocks / (shards as u64) < 256 {
                shards /= 2;
            }
            shards
        } else {
            self.shards
        };
        if !shards.is_power_of_two() || shards > SHARDS_MAX {
            return Err(CacheError::Shards(shards));
        }
        if blocks < shards as u64 {
            return Err(CacheError::Capacity {
                capacity: self.capacity_bytes,
                block_size: block,
                shards,
            });
        }
        Ok(shards)
    }
}
