//! Opening a tier: what the cache device holds decides whether it is
//! recovered, formatted, or refused; then the tier is assembled from the
//! image and the policy is given back every block it held (oldest first).
//!
//! | the cache device holds                 | outcome                                        |
//! |----------------------------------------|------------------------------------------------|
//! | a tier for this backing device         | recovered (warm: every block still cached)     |
//! | a tier flagged detached / failed, or named by the failure marker | formatted afresh (its contents are stale) |
//! | a tier for a backing device of another size | [`TierError::BackingMismatch`], nothing written |
//! | zeroes (its first MiB)                 | formatted                                      |
//! | a first checkpoint but no superblock (a format interrupted) | formatted again            |
//! | anything else                          | [`TierError::Foreign`], nothing written        |

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

use cairn_policy::{Capacity, Op};

use super::cutoff::Cutoff;
use super::error::{Setting, TierError};
use super::format::{
    Checkpoint, FLAG_DETACHED, Geometry, Mode, SlotEntry, WORD_BLOCK, WORD_DIRTY, WORD_VALID,
    encode_checkpoint_into, encode_superblock,
};
use super::journal::Journal;
use super::metrics::Counters;
use super::options::{Layout, Options};
use super::recover::{self, Image};
use super::shard::Shard;
use super::slots::{Buckets, SlotTable};
use super::{
    BackingFlush, HEALTHY, Inner, OVERPROVISION_MIN_BUCKETS, Padded, STRIPES, Signal, Tier,
};
use crate::device::{Device, IoBuf, SharedDevice};

/// What the caller asks of the tier.
#[derive(Clone, Debug, Default)]
pub struct Want {
    /// The layout a blank cache device is formatted with (an existing one
    /// keeps its own).
    pub layout: Layout,
    /// How the tier runs.
    pub options: Options,
    /// A file written when the tier falls back to pass-through after
    /// cache-device errors; found at the next open (naming this cache), it
    /// makes the open format the cache afresh.
    pub marker: Option<PathBuf>,
}

/// What a cache device holds, as far as a tier is concerned.
#[derive(Debug)]
pub enum Probe {
    /// A tier's superblock.
    Ours(super::format::Superblock),
    /// A format that stopped before its last step (the superblock): the
    /// first checkpoint where it goes, no superblock. Ours: formatted again.
    Interrupted,
    /// Zeroes (the first MiB): safe to format.
    Blank,
    /// Someone else's data: what was found.
    Foreign(String),
}

/// Looks at the cache device without changing it.
pub fn probe(cache: &dyn Device) -> Result<Probe, TierError> {
    if let Some(sb) = recover::read_superblock(cache)? {
        return Ok(Probe::Ours(sb));
    }
    // One read of the first MiB (whole units of the device's alignment, so
    // an `O_DIRECT` cache device takes it): the first checkpoint a format
    // writes is at block 1, whatever the block size (512 B – 64 KiB).
    let align = cache.alignment().max(1);
    let len = (cache.len().min(1 << 20) / align * align) as usize;
    let mut head = IoBuf::zeroed(len);
    cache.read_at(&mut head, 0)?;
    for shift in 9..=16u32 {
        let at = 1usize << shift;
        if head.get(at..at + 8) == Some(&super::format::CHECKPOINT_MAGIC[..]) {
            return Ok(Probe::Interrupted);
        }
    }
    match head.iter().position(|&b| b != 0) {
        None => Ok(Probe::Blank),
        Some(at) => Ok(Probe::Foreign(format!(
            "bytes {} at offset {at}",
            crate::device::probe::sample(&head[at..(at + 8).min(len)])
        ))),
    }
}

/// Opens the tier on `cache` over `backing`: recovers it, formats a blank
/// (or stale) cache device, or refuses.
pub fn open_or_format(
    cache: SharedDevice,
    backing: SharedDevice,
    want: &Want,
) -> Result<Tier, TierError> {
    let sb = match probe(&*cache)? {
        Probe::Ours(sb) => sb,
        Probe::Blank | Probe::Interrupted => return format(cache, backing, want, false),
        Probe::Foreign(found) => {
            return Err(TierError::Foreign {
                device: cache.describe(),
                found,
            });
        }
    };
    let g = sb.geometry;
    let b = u64::from(g.block_size);
    unaligned_blocks(&*cache, &*backing, g.block_size, "it was formatted with")?;
    if backing.len() / b != g.backing_blocks {
        return Err(TierError::BackingMismatch {
            device: cache.describe(),
            backing: backing.describe(),
            expected: g.backing_blocks,
            found: backing.len() / b,
            block_size: g.block_size,
        });
    }
    if marker_names(want.marker.as_ref(), sb.cache_id) {
        let layout = Layout {
            block_size: g.block_size,
            bucket_size: g.bucket_blocks * g.block_size,
            journal_blocks: g.journal_blocks,
        };
        let tier = format(
            cache,
            backing,
            &Want {
                layout,
                ..want.clone()
            },
            true,
        )?;
        if let Some(marker) = &want.marker {
            let _ = std::fs::remove_file(marker);
        }
        return Ok(tier);
    }
    let image = recover::recover(&*cache, sb)?;
    if image.flags & FLAG_DETACHED != 0 {
        let layout = Layout {
            block_size: g.block_size,
            bucket_size: g.bucket_blocks * g.block_size,
            journal_blocks: g.journal_blocks,
        };
        return format(
            cache,
            backing,
            &Want {
                layout,
                ..want.clone()
            },
            true,
        );
    }
    build(cache, backing, &image, want, true)
}

/// Refuses a block size the cache or the backing device cannot take: every
/// block is read and written whole, and an `O_DIRECT` device takes only
/// whole units of its alignment.
fn unaligned_blocks(
    cache: &dyn Device,
    backing: &dyn Device,
    block_size: u32,
    whose: &str,
) -> Result<(), TierError> {
    for (role, device) in [("cache", cache), ("backing", backing)] {
        let unit = device.alignment();
        if u64::from(block_size) < unit {
            return Err(TierError::Setting {
                setting: Setting::BlockSize,
                message: format!(
                    "the {role} device {} takes I/O in units of {unit} bytes, and the tier's \
                     block size ({whose}) is {block_size} bytes: use a block size of at least \
                     {unit} bytes, or open the {role} device without direct I/O",
                    device.describe()
                ),
            });
        }
    }
    Ok(())
}

/// Whether the failure marker exists and names `cache_id`.
fn marker_names(marker: Option<&PathBuf>, cache_id: u64) -> bool {
    marker
        .and_then(|m| std::fs::read_to_string(m).ok())
        .is_some_and(|text| text.contains(&format!("{cache_id:016x}")))
}

/// Formats the cache device: the largest geometry the layout allows, an
/// empty checkpoint, then (last) the superblock.
pub fn format(
    cache: SharedDevice,
    backing: SharedDevice,
    want: &Want,
    stale: bool,
) -> Result<Tier, TierError> {
    let layout = want.layout;
    let b = layout.block_size;
    if !crate::codec::valid_block_size(b) {
        return Err(TierError::Setting {
            setting: Setting::BlockSize,
            message: format!("block_size {b} is not a power of two from 512 to 65536"),
        });
    }
    unaligned_blocks(&*cache, &*backing, b, "asked for")?;
    if layout.bucket_size < 2 * b || !layout.bucket_size.is_multiple_of(b) {
        return Err(TierError::Setting {
            setting: Setting::BucketSize,
            message: format!(
                "bucket_size {} is not a multiple of the block size {b}, at least two blocks",
                layout.bucket_size
            ),
        });
    }
    if !backing.len().is_multiple_of(u64::from(b)) || backing.is_empty() {
        return Err(TierError::Setting {
            setting: Setting::Backing,
            message: format!(
                "the backing device {} is {} bytes, not a whole number of {b}-byte blocks",
                backing.describe(),
                backing.len()
            ),
        });
    }
    let backing_blocks = backing.len() / u64::from(b);
    let g = Geometry::fit(
        cache.len(),
        b,
        layout.bucket_size / b,
        layout.journal_blocks,
        backing_blocks,
    )
    .ok_or_else(|| TierError::Setting {
        setting: Setting::Cache,
        message: format!(
            "the cache device {} ({} bytes) is too small for two {}-byte buckets and the metadata",
            cache.describe(),
            cache.len(),
            layout.bucket_size
        ),
    })?;
    g.validate().map_err(|error| TierError::Format {
        device: cache.describe(),
        error,
    })?;
    let cache_id = crate::codec::new_id();
    let mut image = recover::fresh(g, cache_id, want.options.mode);
    image.recovered.dropped_stale = stale;
    // An old superblock goes first: a format interrupted from here on
    // leaves no superblock, only (at most) the new first checkpoint, which
    // `probe` recognises as an interrupted format.
    let zero = IoBuf::zeroed(b as usize);
    cache.write_at(&zero, 0)?;
    cache.flush()?;
    // The first checkpoint is number 2, in slot A (block 1, where `probe`
    // looks); the other slot must not hold an older cache's.
    let first = Checkpoint {
        number: image.checkpoint_number,
        replay_from: 1,
        cache_id,
        mode: want.options.mode,
        flags: 0,
        slots: image.slots.clone(),
    };
    let mut buf = IoBuf::zeroed((g.checkpoint_blocks() * u64::from(b)) as usize);
    encode_checkpoint_into(&mut buf, &first);
    cache.write_at(&buf, g.checkpoint_start(first.number % 2) * u64::from(b))?;
    buf.fill(0);
    cache.write_at(
        &buf,
        g.checkpoint_start((first.number + 1) % 2) * u64::from(b),
    )?;
    cache.flush()?;
    let sb = encode_superblock(&image.sb);
    let mut block = IoBuf::zeroed(sb.len());
    block.copy_from_slice(&sb);
    cache.write_at(&block, 0)?;
    cache.flush()?;
    build(cache, backing, &image, want, false)
}

/// Assembles a tier from an image and gives the policy its blocks back.
fn build(
    cache: SharedDevice,
    backing: SharedDevice,
    image: &Image,
    want: &Want,
    recovered: bool,
) -> Result<Tier, TierError> {
    let options = &want.options;
    let inner = Arc::new(assemble(cache, backing, image, want, recovered)?);
    let max_stamp = image.slots.iter().map(|e| e.stamp).max().unwrap_or(0);
    let mut recovered_info = image.recovered.clone();
    let restored = restore(&inner, &image.slots, max_stamp).and_then(|not_restored| {
        recovered_info.not_restored = not_restored;
        if recovered {
            // The recovered state, checkpointed: replay starts after it.
            inner
                .journal
                .checkpoint_now(&inner.table)
                .map_err(super::Fault::Cache)?;
        }
        Ok(())
    });
    restored.map_err(|f| TierError::Device(f.into()))?;
    if options.mode != Mode::WriteBack && Counters::get(&inner.counters.dirty) > 0 {
        // The spec left write-back: clean first.
        inner.clean_all().map_err(|f| TierError::Device(f.into()))?;
    }
    recovered_info.cached = Counters::get(&inner.counters.cached);
    recovered_info.dirty = Counters::get(&inner.counters.dirty);
    let worker =
        if options.background {
            Some(super::worker::spawn(Arc::clone(&inner)).map_err(|e| {
                TierError::Invalid(format!("starting the tier's worker thread: {e}"))
            })?)
        } else {
            None
        };
    Ok(Tier {
        inner,
        worker: Mutex::new(worker),
        recovered: recovered_info,
    })
}

/// The tier's state for an image: shards with their policies, the slot
/// table, the buckets, the journal (after a recovery, a whole ring of
/// sequences past the last block found, so no block of the crashed run's
/// torn tail can ever match a sequence replay expects).
fn assemble(
    cache: SharedDevice,
    backing: SharedDevice,
    image: &Image,
    want: &Want,
    recovered: bool,
) -> Result<Inner, TierError> {
    let options = &want.options;
    let g = image.sb.geometry;
    let block = u64::from(g.block_size);
    let (shards, per_shard) = shard_capacity(&g, options)?;
    let mut built = Vec::with_capacity(shards);
    for _ in 0..shards {
        // In blocks (every unit is one): policies that adapt by whole units
        // (ARC's target, S3-FIFO's ratios) then behave as `cairn sim --unit
        // block:SIZE` runs them.
        let policy = options.policy.build(Capacity::Objects(per_shard))?;
        let admission = match options.admission {
            cairn_policy::AdmissionConfig::Always(_) => None,
            ref filter => Some(filter.build(Capacity::Objects(per_shard))?),
        };
        built.push(Padded(Mutex::new(Shard::new(policy, admission))));
    }
    let table = SlotTable::new(g.slots() as usize);
    for (s, e) in image.slots.iter().enumerate() {
        table.load(s as u32, e);
    }
    let n = g.bucket_blocks;
    let buckets = Buckets::new(g.buckets, n, |bucket| {
        (bucket * n..(bucket + 1) * n)
            .filter(|&s| image.slots[s as usize].word & WORD_VALID != 0)
            .count() as u32
    });
    let next_seq = if recovered {
        image.next_seq + u64::from(g.journal_blocks)
    } else {
        image.next_seq
    };
    let journal = Journal::new(
        Arc::clone(&cache),
        g,
        image.sb.cache_id,
        (next_seq, image.next_seq, image.checkpoint_number),
        options.mode,
    );
    let max_stamp = image.slots.iter().map(|e| e.stamp).max().unwrap_or(0);
    Ok(Inner {
        cache,
        backing,
        g,
        cache_id: image.sb.cache_id,
        block,
        shard_shift: if shards == 1 {
            64
        } else {
            64 - shards.trailing_zeros()
        },
        shards: built.into_boxed_slice(),
        table,
        buckets,
        journal,
        stripes: (0..STRIPES).map(|_| Mutex::new(())).collect(),
        cutoff: Cutoff::new(options.sequential_cutoff_bytes.div_ceil(block)),
        mode: AtomicU8::new(options.mode.code()),
        health: AtomicU8::new(HEALTHY),
        fallback: Mutex::new(()),
        lost: Mutex::new(hashbrown::HashSet::new()),
        failure: Mutex::new(None),
        counters: Counters::default(),
        clock: AtomicU32::new(max_stamp.wrapping_add(1)),
        backing_flush: BackingFlush {
            started: AtomicU64::new(0),
            durable: AtomicU64::new(0),
            lock: Mutex::new(()),
        },
        capacity_blocks: per_shard * shards as u64,
        keep_buckets: 2,
        options: options.clone(),
        signal: Signal {
            stop: Mutex::new(false),
            wake: Condvar::new(),
            drain: AtomicBool::new(false),
            last_io_ns: AtomicU64::new(0),
        },
        marker: want.marker.clone(),
        started: Instant::now(),
    })
}

/// The blocks a tier formatted with `layout` on a cache device of
/// `device_bytes` caches (its policy's capacity, before rounding to
/// shards), or `None` when the device holds no tier.
pub fn capacity_blocks(device_bytes: u64, layout: &Layout, overprovision: f64) -> Option<u64> {
    let b = layout.block_size;
    let g = Geometry::fit(
        device_bytes,
        b,
        layout.bucket_size / b.max(1),
        layout.journal_blocks,
        1,
    )?;
    let reserve = ((g.slots() as f64 * overprovision).ceil() as u64)
        .max(OVERPROVISION_MIN_BUCKETS * u64::from(g.bucket_blocks));
    g.slots().checked_sub(reserve).filter(|&c| c > 0)
}

/// The smallest cache device (a whole number of buckets) on which a tier
/// formatted with `layout` caches at least `blocks` blocks.
pub fn device_bytes_for(blocks: u64, layout: &Layout, overprovision: f64) -> u64 {
    let bucket = u64::from(layout.bucket_size.max(1));
    let mut bytes = (blocks * u64::from(layout.block_size)).div_ceil(bucket) * bucket;
    while capacity_blocks(bytes, layout, overprovision).is_none_or(|c| c < blocks) {
        bytes += bucket;
    }
    bytes
}

/// The shard count and each shard's capacity in blocks: the slots less the
/// over-provisioned room, split evenly.
fn shard_capacity(g: &Geometry, options: &Options) -> Result<(usize, u64), TierError> {
    let slots = g.slots();
    let n = u64::from(g.bucket_blocks);
    if !(0.0..1.0).contains(&options.overprovision) {
        return Err(TierError::Setting {
            setting: Setting::Overprovision,
            message: format!("overprovision {} is outside 0..1", options.overprovision),
        });
    }
    let reserve =
        ((slots as f64 * options.overprovision).ceil() as u64).max(OVERPROVISION_MIN_BUCKETS * n);
    if reserve >= slots {
        return Err(TierError::Setting {
            setting: Setting::Cache,
            message: format!(
                "the cache device holds {} buckets of {n} blocks; at least {} more than the {} kept \
             free for reclaiming are needed",
                g.buckets,
                1,
                reserve / n
            ),
        });
    }
    let blocks = slots - reserve;
    let shards = if options.shards == 0 {
        let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
        let mut shards = (cores * 4).max(16).next_power_of_two();
        while shards > 1 && blocks / (shards as u64) < 256 {
            shards /= 2;
        }
        shards
    } else {
        options.shards
    };
    if !shards.is_power_of_two() || shards > crate::limits::SHARDS_MAX {
        return Err(TierError::Setting {
            setting: Setting::Shards,
            message: format!(
                "shards {shards} is not a power of two up to {}",
                crate::limits::SHARDS_MAX
            ),
        });
    }
    if blocks < shards as u64 {
        return Err(TierError::Setting {
            setting: Setting::Shards,
            message: format!("{blocks} blocks of capacity cannot be split into {shards} shards"),
        });
    }
    Ok((shards, blocks / shards as u64))
}

/// Gives every cached block back to its shard's map and policy, least
/// recently used first, each as a miss, an admission and a hit (so a policy
/// that promotes on a second use keeps it). A block the policy will not
/// take leaves the cache. Returns how many left.
fn restore(inner: &Inner, slots: &[SlotEntry], now: u32) -> Result<u64, super::Fault> {
    let mut order: Vec<(u32, u32)> = slots
        .iter()
        .enumerate()
        .filter(|(_, e)| e.word & WORD_VALID != 0)
        .map(|(s, e)| (now.wrapping_sub(e.stamp), s as u32))
        .collect();
    // Oldest (largest age) first.
    order.sort_unstable_by(|a, b| b.cmp(a));
    let size = inner.block as u32;
    let mut evicted = Vec::new();
    let mut left = 0;
    for &(_, slot) in &order {
        let e = &slots[slot as usize];
        let b = e.word & WORD_BLOCK;
        Counters::add(&inner.counters.cached, 1);
        if e.word & WORD_DIRTY != 0 {
            Counters::add(&inner.counters.dirty, 1);
        }
        let mut sh = inner.shard(b);
        sh.map.insert(b, slot);
        let access = sh.access(b, size, Op::Read);
        let shard = &mut *sh;
        let taken = shard.policy.lookup(&access) || shard.policy.admit(&access, &mut shard.victims);
        if taken {
            let again = shard.access(b, size, Op::Read);
            shard.policy.lookup(&again);
        } else {
            shard.victims.push(b);
            left += 1;
        }
        let mut j = inner.journal.lock();
        let before = shard.victims.len();
        inner
            .evict_victims(shard, &mut j, &mut evicted)
            .map_err(super::Fault::Cache)?;
        if taken {
            left += before as u64;
        }
    }
    inner.write_back_evicted(&evicted)?;
    Ok(left)
}
