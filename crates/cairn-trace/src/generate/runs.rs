//! Sequential runs among random reads: the block workload prefetchers are
//! for. `runs` extents (files on a disk) sit at fixed random places on a
//! disk of `items` blocks, each `min_blocks ..= max_blocks` long. A request
//! either continues the extent being read, or (when none is) reads one
//! random block with probability `random_fraction`, or else starts reading
//! an extent chosen by Zipf(`alpha`) popularity, front to back, one block per
//! request. Popular extents recur, so what follows what is learnable (PG);
//! every extent is a run (OBL, readahead).

use serde::{Deserialize, Serialize};

use super::pace::{Clock, Layout, Pace, invalid};
use super::zipf::ZipfSampler;
use crate::{Request, Result};

/// Extents read front to back between random blocks.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RunsConfig {
    /// Blocks on the disk. Default 65,536.
    pub items: u64,
    /// Extents. Default 256.
    pub runs: u64,
    /// Shortest extent, blocks. Default 8.
    pub min_blocks: u64,
    /// Longest extent, blocks. Default 64.
    pub max_blocks: u64,
    /// Zipf exponent of the extents' popularity. Default 1.0.
    pub alpha: f64,
    /// Share of the reads between extents that go to one random block.
    /// Default 0.3.
    pub random_fraction: f64,
    /// Count, size, writes, time and seed (a nested table).
    pub pace: Pace,
}

impl Default for RunsConfig {
    fn default() -> Self {
        Self {
            items: 65_536,
            runs: 256,
            min_blocks: 8,
            max_blocks: 64,
            alpha: 1.0,
            random_fraction: 0.3,
            pace: Pace::default(),
        }
    }
}

impl RunsConfig {
    /// Checks the config and starts the stream.
    pub fn generator(&self) -> Result<Runs> {
        if self.runs == 0 {
            return Err(invalid("runs must be at least 1"));
        }
        if self.min_blocks == 0 || self.min_blocks > self.max_blocks {
            return Err(invalid(format!(
                "min_blocks = {}, max_blocks = {}: need 1 ≤ min_blocks ≤ max_blocks",
                self.min_blocks, self.max_blocks
            )));
        }
        if self.max_blocks > self.items {
            return Err(invalid(format!(
                "max_blocks = {} is more than the disk's {} blocks (items)",
                self.max_blocks, self.items
            )));
        }
        if !(0.0..=1.0).contains(&self.random_fraction) {
            return Err(invalid(format!(
                "random_fraction = {}: must be within 0 to 1",
                self.random_fraction
            )));
        }
        let sampler = ZipfSampler::new(self.runs, self.alpha)?;
        let mut clock = Clock::new(self.pace)?;
        let extents = (0..self.runs)
            .map(|_| {
                let len =
                    rand::Rng::random_range(&mut clock.rng, self.min_blocks..=self.max_blocks);
                let start = rand::Rng::random_range(&mut clock.rng, 0..=self.items - len);
                (start, len)
            })
            .collect();
        Ok(Runs {
            items: self.items,
            random_fraction: self.random_fraction,
            extents,
            sampler,
            clock,
            next: 0,
            left: 0,
        })
    }
}

/// The stream of a [`RunsConfig`].
#[derive(Clone, Debug)]
pub struct Runs {
    items: u64,
    random_fraction: f64,
    /// (first block, length) of each extent, by popularity rank.
    extents: Vec<(u64, u64)>,
    sampler: ZipfSampler,
    clock: Clock,
    /// The next block of the extent being read, and how many are left.
    next: u64,
    left: u64,
}

impl Iterator for Runs {
    type Item = Request;

    fn next(&mut self) -> Option<Request> {
        use rand::Rng;
        if self.clock.done() {
            return None;
        }
        if self.left == 0 {
            if self.clock.rng.random::<f64>() < self.random_fraction {
                let block = self.clock.rng.random_range(0..self.items);
                return Some(self.clock.request(block, Layout::Blocks));
            }
            let (start, len) = self.extents[self.sampler.sample(&mut self.clock.rng) as usize];
            (self.next, self.left) = (start, len);
        }
        let block = self.next;
        self.next += 1;
        self.left -= 1;
        Some(self.clock.request(block, Layout::Blocks))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(requests: u64) -> RunsConfig {
        RunsConfig {
            items: 1000,
            runs: 4,
            min_blocks: 5,
            max_blocks: 5,
            random_fraction: 0.0,
            pace: Pace {
                requests,
                ..Pace::default()
            },
            ..RunsConfig::default()
        }
    }

    #[test]
    fn extents_are_read_front_to_back_whole() {
        let blocks: Vec<u64> = config(100)
            .generator()
            .unwrap()
            .map(|r| r.offset / 4096)
            .collect();
        assert_eq!(blocks.len(), 100);
        for run in blocks.chunks(5) {
            assert!(run.windows(2).all(|w| w[1] == w[0] + 1), "{run:?}");
            assert!(run[4] < 1000);
        }
    }

    #[test]
    fn random_blocks_come_between_extents_only() {
        let mut c = config(10_000);
        c.random_fraction = 0.5;
        c.min_blocks = 3;
        c.max_blocks = 9;
        let g = c.generator().unwrap();
        let extents = g.extents.clone();
        let blocks: Vec<u64> = g.map(|r| r.offset / 4096).collect();
        let mut at = 0;
        let (mut runs, mut singles) = (0, 0);
        while at < blocks.len() {
            match extents.iter().find(|&&(start, _)| start == blocks[at]) {
                Some(&(start, len)) if at + len as usize <= blocks.len() => {
                    let want: Vec<u64> = (start..start + len).collect();
                    if blocks[at..at + len as usize] == want[..] {
                        at += len as usize;
                        runs += 1;
                        continue;
                    }
                    at += 1;
                    singles += 1;
                }
                _ => {
                    at += 1;
                    singles += 1;
                }
            }
        }
        assert!(
            runs > 500 && singles > 500,
            "{runs} runs, {singles} singles"
        );
    }

    #[test]
    fn bad_shapes_are_errors() {
        for (c, message) in [
            (
                RunsConfig {
                    runs: 0,
                    ..RunsConfig::default()
                },
                "runs must be at least 1",
            ),
            (
                RunsConfig {
                    min_blocks: 9,
                    max_blocks: 8,
                    ..RunsConfig::default()
                },
                "min_blocks = 9, max_blocks = 8",
            ),
            (
                RunsConfig {
                    items: 10,
                    ..RunsConfig::default()
                },
                "more than the disk's 10 blocks",
            ),
        ] {
            let error = c.generator().unwrap_err().to_string();
            assert!(error.contains(message), "{error}");
        }
    }
}
