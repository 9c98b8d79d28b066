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
mod pace;
mod runs;
mod scan;
mod streams;
mod uniform;
mod zipf;

pub use files::{FileWorkload, FileWorkloadConfig, TableOneWorkload};
pub use hotspot::{HotSpot, HotSpotConfig, Region};
pub use pace::{Layout, Pace};
pub use runs::{Runs, RunsConfig};
pub use scan::{Scan, ScanConfig};
pub use streams::{StreamMode, Streams, StreamsConfig};
pub use uniform::{Uniform, UniformConfig};
pub use zipf::{Zipf, ZipfConfig, ZipfSampler};

use serde::{Deserialize, Serialize};

use crate::{Request, Result};

/// Any generator's config, for a CLI or an experiment file to choose one by
/// name (`zipf`, `uniform`, `scan`, `hotspot`, `streams`, `files`, `runs`), e.g. in
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
    /// [`RunsConfig`].
    Runs(RunsConfig),
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
            GeneratorConfig::Runs(c) => Box::new(c.generator()?),
        })
    }

    /// The same stream as a trace [`crate::read::Reader`] (every item `Ok`),
    /// so generated workloads go wherever a trace goes.
    pub fn reader(&self) -> Result<crate::read::Reader> {
        Ok(crate::read::boxed(self.generator()?.map(Ok)))
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
