//! Seeded synthetic workloads. Each generator is a serde config struct with
//! documented defaults and a `generator()` that checks it and returns an
//! `Iterator<Item = Request>`: deterministic for a seed (`ChaCha8`), streaming,
//! and memory independent of the number of requests.
//!
//! | generator | paper | shape |
//! |---|---|---|
//! | [`ZipfConfig`] | — | item ranks drawn from Zipf(α) over n items |
//! | [`UniformConfig`] | 003 | items drawn uniformly |
//! | [`ScanConfig`] | — | blocks 0..n in order, repeated |
//! | [`HotSpotConfig`] | 003 | regions of blocks with their own access shares |
//! | [`StreamsConfig`] | 000 | readers of one file with staggered starts |
//! | [`FileWorkloadConfig`] | 001 | sessions over files: whole, sequential-prefix or random |
//!
//! Time advances by [`Pace::interval_us`] a request unless a generator says
//! otherwise.

mod files;
mod hotspot;
mod scan;
mod streams;
mod uniform;
mod zipf;

pub use files::{FileWorkload, FileWorkloadConfig, TableOneWorkload};
pub use hotspot::{HotSpot, HotSpotConfig, Region};
pub use scan::{Scan, ScanConfig};
pub use streams::{StreamMode, Streams, StreamsConfig};
pub use uniform::{Uniform, UniformConfig};
pub use zipf::{Zipf, ZipfConfig, ZipfSampler};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::error::TraceError;
use crate::{NEVER, Op, Request, Result};

/// Any generator's config, for a CLI or an experiment file to choose one by
/// name (`zipf`, `uniform`, `scan`, `hotspot`, `streams`, `files`), e.g. in
/// TOML `[workload.zipf]` then the generator's own knobs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", deny_unknown_fields)]
pub enum GeneratorConfig {
    /// [`ZipfConfig`].
    Zipf(ZipfConfig),
    /// [`UniformConfig`].
    Uniform(UniformConfig),
    /// [`ScanConfig`].
    Scan(ScanConfig),
    /// [`HotSpotConfig`].
    HotSpot(HotSpotConfig),
    /// [`StreamsConfig`].
    Streams(StreamsConfig),
    /// [`FileWorkloadConfig`].
    Files(FileWorkloadConfig),
}

/// A boxed stream of generated requests.
pub type Generator = Box<dyn Iterator<Item = Request> + Send>;

impl GeneratorConfig {
    /// Checks the config and starts its stream.
    pub fn generator(&self) -> Result<Generator> {
        Ok(match self {
            GeneratorConfig::Zipf(c) => Box::new(c.generator()?),
            GeneratorConfig::Uniform(c) => Box::new(c.generator()?),
            GeneratorConfig::Scan(c) => Box::new(c.generator()?),
            GeneratorConfig::HotSpot(c) => Box::new(c.generator()?),
            GeneratorConfig::Streams(c) => Box::new(c.generator()?),
            GeneratorConfig::Files(c) => Box::new(c.generator()?),
        })
    }

    /// The same stream as a trace [`crate::read::Reader`] (every item `Ok`),
    /// so generated workloads go wherever a trace goes.
    pub fn reader(&self) -> Result<crate::read::Reader> {
        Ok(Box::new(self.generator()?.map(Ok)))
    }
}

/// How an item number becomes a request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Layout {
    /// Item `i` is object `i` at offset 0 (object traces). The default.
    #[default]
    Objects,
    /// Item `i` is the block at offset `i × size` of object 0 (block traces).
    Blocks,
}

/// The fields every random generator shares: how many requests, their size,
/// the share of writes, time between requests, and the seed.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Pace {
    /// Requests to generate. Default 1,000,000.
    pub requests: u64,
    /// Bytes per request (and per block in [`Layout::Blocks`]). Default 4096.
    pub size_bytes: u32,
    /// Share of writes, 0 to 1. Default 0.
    pub write_fraction: f64,
    /// Microseconds between consecutive requests. Default 1.
    pub interval_us: u64,
    /// Seed of the `ChaCha8` stream. Default 0.
    pub seed: u64,
}

impl Default for Pace {
    fn default() -> Self {
        Self {
            requests: 1_000_000,
            size_bytes: 4096,
            write_fraction: 0.0,
            interval_us: 1,
            seed: 0,
        }
    }
}

impl Pace {
    fn validate(&self) -> Result<()> {
        if self.size_bytes == 0 {
            return Err(invalid("size_bytes must be at least 1"));
        }
        if !(0.0..=1.0).contains(&self.write_fraction) {
            return Err(invalid(format!(
                "write_fraction = {}: must be within 0 to 1",
                self.write_fraction
            )));
        }
        Ok(())
    }

    fn rng(&self) -> ChaCha8Rng {
        ChaCha8Rng::seed_from_u64(self.seed)
    }
}

/// The state every random generator carries: its pace, its stream of random
/// numbers, and how many requests it has made.
#[derive(Clone, Debug)]
struct Clock {
    pace: Pace,
    rng: ChaCha8Rng,
    issued: u64,
}

impl Clock {
    fn new(pace: Pace) -> Result<Self> {
        pace.validate()?;
        Ok(Self {
            rng: pace.rng(),
            pace,
            issued: 0,
        })
    }

    /// Whether the budget of requests is spent.
    fn done(&self) -> bool {
        self.issued >= self.pace.requests
    }

    /// The next request for `item`, laid out by `layout`.
    fn request(&mut self, item: u64, layout: Layout) -> Request {
        let (object, offset) = match layout {
            Layout::Objects => (item, 0),
            Layout::Blocks => (0, item.saturating_mul(u64::from(self.pace.size_bytes))),
        };
        self.request_at(object, offset, self.pace.size_bytes)
    }

    /// The next request for a byte range; draws the operation.
    fn request_at(&mut self, object: u64, offset: u64, size: u32) -> Request {
        let op = if self.pace.write_fraction > 0.0
            && self.rng.random::<f64>() < self.pace.write_fraction
        {
            Op::Write
        } else {
            Op::Read
        };
        let time_us = self.issued.saturating_mul(self.pace.interval_us);
        self.issued += 1;
        Request {
            time_us,
            object,
            offset,
            size,
            op,
            next: NEVER,
        }
    }
}

fn invalid(reason: impl Into<String>) -> TraceError {
    TraceError::Config {
        reason: reason.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_generator_reads_like_a_trace() {
        let config = GeneratorConfig::Scan(ScanConfig {
            items: 3,
            pace: Pace {
                requests: 7,
                ..Pace::default()
            },
            ..ScanConfig::default()
        });
        let blocks: Vec<u64> = config
            .reader()
            .unwrap()
            .map(|r| r.unwrap().offset / 4096)
            .collect();
        assert_eq!(blocks, [0, 1, 2, 0, 1, 2, 0]);
        let bad = GeneratorConfig::Zipf(ZipfConfig {
            items: 0,
            ..ZipfConfig::default()
        });
        assert!(bad.generator().is_err());
    }
}
