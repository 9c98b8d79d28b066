//! [`Layer`] for each layer with counters: the block cache, the tier, the log
//! disk and the object volume. Each reads the snapshot its layer already
//! keeps (the same numbers `cairn inspect`, the benchmarks and the stop's
//! report use) and names them.

use super::{Layer, LayerCommand, LayerCommandError, LayerStats, MetricSink, not_supported};
use crate::cache::BlockCache;
use crate::device::Device;
use crate::logdisk::LogDisk;
use crate::objdisk::ObjectDisk;
use crate::tier::{Mode, Tier};

/// Modes and detaching belong to the tier (`kind = "tier"`).
const TIER_ONLY: &str = "only a tier (kind = \"tier\") has cache modes and can be detached";

impl<D: Device> Layer for BlockCache<D> {
    fn kind(&self) -> &'static str {
        "cache"
    }

    fn stats(&self, out: &mut LayerStats) {
        let m = self.metrics();
        let block = self.block_size();
        let mut s = MetricSink(&mut out.metrics);
        s.counter("hits", m.hits(), "block reads served from the cache");
        s.counter("misses", m.misses(), "block reads that led a device read");
        s.counter(
            "coalesced",
            m.coalesced(),
            "block reads that waited for another reader's device read",
        );
        s.real(
            "hit_ratio",
            (m.hits() + m.misses() + m.coalesced() > 0).then(|| m.hit_ratio()),
            "hits and coalesced reads over all block reads",
        );
        let sum = |f: fn(&crate::cache::GroupMetrics) -> u64| m.groups.iter().map(f).sum::<u64>();
        s.counter("hit_bytes", sum(|g| g.hit_bytes), "bytes of the hits");
        s.counter("miss_bytes", sum(|g| g.miss_bytes), "bytes of the misses");
        s.counter(
            "prefetched_blocks",
            sum(|g| g.prefetched),
            "blocks read ahead",
        );
        s.counter(
            "device_reads",
            sum(|g| g.device_reads),
            "reads issued to the device below",
        );
        s.counter(
            "device_read_bytes",
            sum(|g| g.device_read_bytes),
            "bytes read from the device below",
        );
        s.gauge("resident_blocks", m.resident_blocks, "blocks cached now");
        s.gauge(
            "resident_bytes",
            m.resident_blocks * block,
            "bytes cached now",
        );
        s.gauge("capacity_bytes", self.capacity_bytes(), "the cache's size");
        s.counter(
            "frames_grown",
            m.frames_grown,
            "frames allocated after start (a pool ran dry)",
        );
        s.counter(
            "detached_loads",
            m.detached_loads,
            "loads a concurrent write made stale",
        );
        for g in &m.groups {
            let pattern = if g.sequential { "sequential" } else { "random" };
            let mut metrics = Vec::new();
            let mut s = MetricSink(&mut metrics);
            s.counter("hits", g.hits, "block reads served from the cache");
            s.counter("misses", g.misses, "block reads that led a device read");
            s.counter("device_reads", g.device_reads, "reads issued below");
            s.counter(
                "miss_service_ns",
                g.miss_service_ns_total,
                "time spent in those reads",
            );
            s.real(
                "miss_service_ns_per_block",
                (g.miss_service_ns_per_block > 0.0).then_some(g.miss_service_ns_per_block),
                "smoothed service time of a block read",
            );
            s.real(
                "cost",
                Some(g.cost),
                "learned eviction cost (fastest group = 1)",
            );
            out.groups.push(super::GroupStats {
                name: format!("device{}-{pattern}", g.device),
                metrics,
            });
        }
    }

    fn control(&self, command: &LayerCommand) -> Result<String, LayerCommandError> {
        match command {
            LayerCommand::DropClean => {
                let dropped = self.drop_clean();
                Ok(format!(
                    "dropped {dropped} cached blocks ({} bytes)",
                    dropped * self.block_size()
                ))
            }
            LayerCommand::Flush => Err(not_supported(
                self.kind(),
                command,
                "the DRAM cache holds no dirty data (writes go through it)",
            )),
            LayerCommand::Mode { .. } | LayerCommand::Detach => {
                Err(not_supported(self.kind(), command, TIER_ONLY))
            }
        }
    }
}

impl Layer for Tier {
    fn kind(&self) -> &'static str {
        "tier"
    }

    fn stats(&self, out: &mut LayerStats) {
        let m = self.metrics();
        let block = u64::from(self.geometry().block_size);
        let mut s = MetricSink(&mut out.metrics);
        s.counter("hits", m.hits, "block reads served from the cache device");
        s.counter(
            "misses",
            m.misses,
            "block reads served from the backing device",
        );
        s.real(
            "hit_ratio",
            (m.hits + m.misses > 0).then(|| m.hit_ratio()),
            "hits over block reads",
        );
        s.counter("write_blocks", m.writes, "blocks written by clients");
        s.counter(
            "write_hits",
            m.write_hits,
            "client block writes the cache held",
        );
        s.counter(
            "write_misses",
            m.write_misses,
            "client block writes it did not",
        );
        s.counter("promotions", m.promotions, "blocks promoted on a read miss");
        s.counter(
            "promotions_refused",
            m.promotions_refused,
            "read misses the admission filter kept out",
        );
        s.counter(
            "bypassed_bytes",
            m.bypassed_bytes,
            "bytes that bypassed the cache",
        );
        s.gauge(
            "dirty_blocks",
            m.dirty_blocks,
            "blocks not yet written back",
        );
        s.gauge(
            "dirty_bytes",
            m.dirty_blocks * block,
            "bytes not yet written back",
        );
        s.gauge("cached_blocks", m.cached_blocks, "valid blocks cached now");
        s.gauge(
            "capacity_blocks",
            self.capacity_blocks(),
            "the cache's size",
        );
        s.counter("cleaned_blocks", m.cleaned_blocks, "blocks written back");
        s.counter("dirty_evictions", m.dirty_evictions, "dirty blocks evicted");
        s.counter(
            "relocated_blocks",
            m.relocated_blocks,
            "blocks moved by reclaim",
        );
        s.counter(
            "reclaimed_buckets",
            m.reclaimed_buckets,
            "buckets reclaimed",
        );
        s.counter(
            "cache_block_writes",
            m.cache_block_writes,
            "blocks written to the cache device",
        );
        s.counter("journal_writes", m.journal_writes, "journal block writes");
        s.counter("checkpoints", m.checkpoints, "checkpoints written");
        s.counter("errors", m.errors, "cache-device errors");
        s.gauge(
            "failed",
            u64::from(m.failed),
            "1: fell back to pass-through",
        );
        s.gauge("dram_bytes", m.dram_bytes, "DRAM of the tier's metadata");
        let mode = self.mode();
        for candidate in Mode::ALL {
            s.gauge(
                &format!("mode_{}", candidate.name().replace('-', "_")),
                u64::from(candidate == mode),
                "1 for the cache mode now",
            );
        }
    }

    fn control(&self, command: &LayerCommand) -> Result<String, LayerCommandError> {
        let failed = |e: crate::DeviceError| LayerCommandError::Failed(e.to_string());
        match command {
            LayerCommand::Flush => {
                let dirty = self.metrics().dirty_blocks;
                self.clean_all().map_err(failed)?;
                Ok(format!(
                    "wrote back every dirty block ({dirty} were dirty) and flushed the backing device"
                ))
            }
            LayerCommand::DropClean => Err(not_supported(
                self.kind(),
                command,
                "the tier drops clean blocks only as its policy evicts them",
            )),
            LayerCommand::Mode { mode } => {
                let Some(new) = Mode::ALL.into_iter().find(|m| m.name() == mode) else {
                    let names: Vec<&str> = Mode::ALL.iter().map(|m| m.name()).collect();
                    return Err(LayerCommandError::Invalid(format!(
                        "unknown mode {mode:?}: one of {}",
                        names.join(", ")
                    )));
                };
                let was = self.mode();
                self.set_mode(new).map_err(failed)?;
                Ok(format!("mode {} (was {})", new.name(), was.name()))
            }
            LayerCommand::Detach => {
                self.detach().map_err(failed)?;
                Ok("wrote back every dirty block and detached the cache: \
                    everything passes through until the next start"
                    .into())
            }
        }
    }
}

impl<D: Device + 'static> Layer for LogDisk<D> {
    fn kind(&self) -> &'static str {
        "log"
    }

    fn stats(&self, out: &mut LayerStats) {
        let m = self.metrics();
        let block = u64::from(self.geometry().block_size);
        let mut s = MetricSink(&mut out.metrics);
        s.counter(
            "client_blocks",
            m.client_blocks,
            "blocks written by clients (since format)",
        );
        s.counter(
            "nv_writes",
            m.nv_writes,
            "client writes to the NV cache (since format)",
        );
        s.counter(
            "nv_write_hits",
            m.nv_write_hits,
            "NV cache writes whose block was already dirty there (since format)",
        );
        s.real(
            "nv_hit_ratio",
            m.nv_hit_ratio(),
            "NV write hits over NV writes",
        );
        nv_stats(&mut s, self.nv_fill(), block);
        s.counter(
            "user_segment_writes",
            m.user_segment_writes,
            "segment writes of client data",
        );
        s.counter("user_bytes", m.user_bytes, "bytes those wrote");
        s.counter(
            "cleaner_segment_reads",
            m.cleaner_segment_reads,
            "segments cleaned",
        );
        s.counter(
            "cleaner_segment_writes",
            m.cleaner_segment_writes,
            "segment writes by the cleaner",
        );
        s.counter(
            "cleaner_blocks",
            m.cleaner_blocks_written,
            "live blocks the cleaner copied",
        );
        s.counter("cleaner_bytes", m.cleaner_bytes, "bytes the cleaner wrote");
        s.counter(
            "cleaner_read_bytes",
            m.cleaner_read_bytes,
            "bytes the cleaner read (since start)",
        );
        s.real(
            "write_amplification",
            m.write_amplification(),
            "(client + cleaner blocks written) / client blocks written",
        );
        s.counter(
            "partial_segments",
            m.partial_segments,
            "segment writes closed early by a flush",
        );
        s.counter(
            "checkpoints",
            m.checkpoints,
            "checkpoints written (since format)",
        );
        s.counter(
            "device_flushes",
            m.device_flushes,
            "device flushes (since format)",
        );
        s.gauge(
            "free_segments",
            u64::from(self.free_segments()),
            "free segments now",
        );
        s.gauge(
            "segments",
            u64::from(self.geometry().segments),
            "segments in all",
        );
    }

    fn control(&self, command: &LayerCommand) -> Result<String, LayerCommandError> {
        match command {
            LayerCommand::Flush => {
                self.flush()
                    .map_err(|e| LayerCommandError::Failed(e.to_string()))?;
                Ok(
                    "made every completed write durable (dirty blocks stay in the NV cache, \
                    which is durable; they are destaged as it fills)"
                        .into(),
                )
            }
            LayerCommand::DropClean => Err(not_supported(
                self.kind(),
                command,
                "the log disk caches no clean blocks",
            )),
            LayerCommand::Mode { .. } | LayerCommand::Detach => {
                Err(not_supported(self.kind(), command, TIER_ONLY))
            }
        }
    }
}

/// The log disk's NV write cache: its dirty data and fill.
fn nv_stats(s: &mut MetricSink<'_>, nv: crate::logdisk::NvFill, block: u64) {
    s.gauge(
        "nv_dirty_blocks",
        u64::from(nv.dirty_slots),
        "blocks not yet destaged",
    );
    s.gauge(
        "nv_dirty_bytes",
        u64::from(nv.dirty_slots) * block,
        "bytes not yet destaged (the dirty data)",
    );
    s.gauge(
        "nv_used_slots",
        u64::from(nv.used_slots),
        "NV slots not free",
    );
    s.gauge("nv_slots", u64::from(nv.slots), "NV slots in all");
    s.real(
        "nv_fill_ratio",
        (nv.slots > 0).then(|| f64::from(nv.used_slots) / f64::from(nv.slots)),
        "NV slots in use over all slots",
    );
}

impl Layer for ObjectDisk {
    fn kind(&self) -> &'static str {
        "objects"
    }

    fn stats(&self, out: &mut LayerStats) {
        let (c, written) = self.counts();
        let mut s = MetricSink(&mut out.metrics);
        s.counter(
            "written_bytes",
            written,
            "bytes clients wrote (since start)",
        );
        s.counter("puts", c.puts, "PUTs to the store");
        s.counter("put_bytes", c.put_bytes, "bytes in PUT bodies");
        s.counter("gets", c.gets, "GETs from the store");
        s.counter("get_bytes", c.get_bytes, "bytes GETs returned");
        s.counter("deletes", c.deletes, "DELETEs");
        s.counter("lists", c.lists, "LIST calls");
        s.real(
            "write_amplification",
            (written > 0).then(|| c.put_bytes as f64 / written as f64),
            "PUT bytes over bytes clients wrote",
        );
        s.counter(
            "cleaner_blocks",
            self.cleaned_blocks(),
            "blocks the cleaner moved",
        );
        if let Some(l) = self.segcache_counts() {
            s.counter(
                "segcache_hits",
                l.hits,
                "blocks read from the local segment cache",
            );
            s.counter("segcache_misses", l.misses, "blocks that needed the store");
            s.counter(
                "segcache_installs",
                l.installs,
                "segments installed locally",
            );
            s.gauge(
                "segcache_held_slots",
                l.held,
                "local slots holding a segment",
            );
            s.gauge("segcache_slots", l.slots, "local slots in all");
        }
    }

    fn control(&self, command: &LayerCommand) -> Result<String, LayerCommandError> {
        match command {
            LayerCommand::Flush => {
                self.flush()
                    .map_err(|e| LayerCommandError::Failed(e.to_string()))?;
                Ok("flushed (durable as the volume's `flush` setting says)".into())
            }
            LayerCommand::DropClean => Err(not_supported(
                self.kind(),
                command,
                "the local segment cache is managed by the volume",
            )),
            LayerCommand::Mode { .. } | LayerCommand::Detach => {
                Err(not_supported(self.kind(), command, TIER_ONLY))
            }
        }
    }
}
