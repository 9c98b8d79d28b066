//! [`TraceStats`]: the numbers one wants before simulating a trace, computed
//! in one streaming pass.
//!
//! Memory grows with the distinct objects, start sectors and blocks (three
//! hash tables: about 16 bytes per distinct object or start sector and 8 per
//! distinct block, plus table slack), not with the number of requests.

use hashbrown::{HashMap, HashSet};
use serde::{Deserialize, Serialize};

use crate::split::{BLOCK_INDEX_BITS, start_sector_key};
use crate::{Op, Request, Result};

/// Size buckets: bucket `i` counts sizes in `(2^(i-1), 2^i]` (bucket 0: 0 and 1).
pub const SIZE_BUCKETS: usize = 33;

/// The [`SIZE_BUCKETS`] bucket of a size: `i` for sizes in `(2^(i-1), 2^i]`
/// (0 for 0 and 1).
#[inline]
pub fn size_bucket(size: u32) -> usize {
    (u32::BITS - size.saturating_sub(1).leading_zeros()) as usize
}

/// What a trace holds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TraceStats {
    /// Requests.
    pub requests: u64,
    /// Read requests.
    pub reads: u64,
    /// Write requests.
    pub writes: u64,
    /// Bytes read.
    pub bytes_read: u64,
    /// Bytes written.
    pub bytes_written: u64,
    /// Distinct objects (disks, files, object ids).
    pub objects: u64,
    /// Working set in object mode: the sum over distinct objects of the
    /// largest request size seen for each (libCacheSim's footprint).
    pub object_bytes: u64,
    /// Distinct start sectors: the keys of [`crate::Unit::StartSector`] (disk
    /// and first 512-byte sector), which `cairn sim` uses for block traces by
    /// default and libCacheSim uses for VSCSI (`obj_id = lbn`).
    #[serde(default)]
    pub start_sectors: u64,
    /// Working set in start-sector mode: the sum over distinct start sectors
    /// of the size of the first request there (libCacheSim's byte working set).
    #[serde(default)]
    pub start_sector_bytes: u64,
    /// The block size the block counts use, in bytes.
    pub block_size_bytes: u32,
    /// Distinct blocks touched (block mode, keyed as [`crate::Splitter`] keys them).
    pub blocks: u64,
    /// Working set in block mode: `blocks × block_size_bytes`.
    pub block_bytes: u64,
    /// Time of the first request, in µs.
    pub time_first_us: u64,
    /// Time of the last request, in µs.
    pub time_last_us: u64,
    /// Smallest request size in bytes (0 for an empty trace).
    pub size_min_bytes: u32,
    /// Largest request size in bytes.
    pub size_max_bytes: u32,
    /// Request counts by size: `size_histogram[i]` counts sizes in `(2^(i-1), 2^i]`.
    pub size_histogram: Vec<u64>,
}

impl TraceStats {
    /// The time the trace spans, last minus first, in µs.
    pub fn span_us(&self) -> u64 {
        self.time_last_us.saturating_sub(self.time_first_us)
    }

    /// Mean request size in bytes.
    pub fn size_mean_bytes(&self) -> f64 {
        if self.requests == 0 {
            0.0
        } else {
            (self.bytes_read + self.bytes_written) as f64 / self.requests as f64
        }
    }

    /// Reads every request of `requests` (stopping at the first error).
    pub fn of(
        requests: impl IntoIterator<Item = Result<Request>>,
        block_size_bytes: u32,
    ) -> Result<TraceStats> {
        let mut builder = StatsBuilder::new(block_size_bytes);
        for request in requests {
            builder.add(&request?);
        }
        Ok(builder.finish())
    }
}

/// Accumulates [`TraceStats`] one request at a time.
#[derive(Clone, Debug)]
pub struct StatsBuilder {
    stats: TraceStats,
    objects: HashMap<u64, u32>,
    start_sectors: HashMap<u64, u32>,
    blocks: HashSet<u64>,
}

impl StatsBuilder {
    /// A builder counting blocks of `block_size_bytes` (at least 1).
    pub fn new(block_size_bytes: u32) -> Self {
        Self {
            stats: TraceStats {
                block_size_bytes: block_size_bytes.max(1),
                size_histogram: vec![0; SIZE_BUCKETS],
                ..TraceStats::default()
            },
            objects: HashMap::new(),
            start_sectors: HashMap::new(),
            blocks: HashSet::new(),
        }
    }

    /// Counts one request.
    pub fn add(&mut self, request: &Request) {
        let stats = &mut self.stats;
        if stats.requests == 0 {
            stats.time_first_us = request.time_us;
            stats.size_min_bytes = request.size;
        }
        stats.requests += 1;
        stats.time_last_us = request.time_us;
        stats.size_min_bytes = stats.size_min_bytes.min(request.size);
        stats.size_max_bytes = stats.size_max_bytes.max(request.size);
        stats.size_histogram[size_bucket(request.size)] += 1;
        let bytes = u64::from(request.size);
        match request.op {
            Op::Read => {
                stats.reads += 1;
                stats.bytes_read += bytes;
            }
            Op::Write => {
                stats.writes += 1;
                stats.bytes_written += bytes;
            }
        }
        let largest = self.objects.entry(request.object).or_insert(0);
        *largest = (*largest).max(request.size);
        self.start_sectors
            .entry(start_sector_key(request))
            .or_insert(request.size);
        let block_size = u64::from(stats.block_size_bytes);
        let first = request.offset / block_size;
        let last = request
            .offset
            .saturating_add(bytes.max(1) - 1)
            .checked_div(block_size)
            .unwrap_or(first);
        let object_bits =
            (request.object & ((1 << (64 - BLOCK_INDEX_BITS)) - 1)) << BLOCK_INDEX_BITS;
        for block in first..=last {
            self.blocks
                .insert(object_bits | (block & ((1 << BLOCK_INDEX_BITS) - 1)));
        }
    }

    /// The statistics of the requests added so far.
    pub fn finish(&self) -> TraceStats {
        let mut stats = self.stats.clone();
        stats.objects = self.objects.len() as u64;
        stats.object_bytes = self.objects.values().map(|&s| u64::from(s)).sum();
        stats.start_sectors = self.start_sectors.len() as u64;
        stats.start_sector_bytes = self.start_sectors.values().map(|&s| u64::from(s)).sum();
        stats.blocks = self.blocks.len() as u64;
        stats.block_bytes = stats.blocks * u64::from(stats.block_size_bytes);
        stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_objects_blocks_and_sizes() {
        let requests = [
            (0, 0, 4096, Op::Read),
            (10, 4000, 200, Op::Write),
            (20, 0, 1, Op::Read),
        ]
        .map(|(time_us, offset, size, op)| {
            Ok(Request {
                time_us,
                object: 1,
                offset,
                size,
                op,
                ttl: 0,
                next: crate::NEVER,
            })
        });
        let stats = TraceStats::of(requests, 4096).unwrap();
        assert_eq!((stats.requests, stats.reads, stats.writes), (3, 2, 1));
        assert_eq!((stats.objects, stats.object_bytes), (1, 4096));
        assert_eq!((stats.blocks, stats.block_bytes), (2, 8192));
        // Offsets 0 and 4000 start in sectors 0 and 7; sector 0 counts the
        // size of its first request.
        assert_eq!(
            (stats.start_sectors, stats.start_sector_bytes),
            (2, 4096 + 200)
        );
        assert_eq!(stats.span_us(), 20);
        assert_eq!((stats.size_min_bytes, stats.size_max_bytes), (1, 4096));
        assert_eq!(stats.size_histogram[12], 1);
        assert_eq!(stats.size_histogram[8], 1);
        assert_eq!(stats.size_histogram[0], 1);
    }
}
