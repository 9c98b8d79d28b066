//! Concurrent readers of one large file (the streaming server of papers/000):
//! N readers walk the same file block by block, reader r starting
//! `r × stagger_rounds` rounds after reader 0, their requests interleaved
//! round-robin. Modes follow the paper's `IOzone` runs: read, re-read and
//! random read.

use rand::Rng;
use serde::{Deserialize, Serialize};

use super::pace::{Clock, Pace, invalid};
use crate::{Request, Result};

/// What each reader does.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StreamMode {
    /// Read the file once, front to back. The default.
    #[default]
    Read,
    /// Read the file `passes` times, front to back each time.
    ReRead,
    /// Read as many blocks as the file has, each at a random block.
    RandomRead,
}

/// N readers of one file with staggered starts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StreamsConfig {
    /// Concurrent readers. Default 10 (the paper runs 10 to 50).
    pub readers: u32,
    /// Bytes per request (the cache block). Default 256 KiB.
    pub block_size_bytes: u32,
    /// Size of the file. Default 256 MiB.
    pub file_size_bytes: u64,
    /// Rounds between the starts of consecutive readers (a round is one
    /// request from every running reader). Default 64.
    pub stagger_rounds: u64,
    /// Read, re-read or random read. Default read.
    pub mode: StreamMode,
    /// Passes over the file per reader in re-read mode. Default 2.
    pub passes: u32,
    /// The object id of the file. Default 0.
    pub object: u64,
    /// Microseconds between consecutive requests. Default 1.
    pub interval_us: u64,
    /// Seed of the `ChaCha8` stream (random read). Default 0.
    pub seed: u64,
}

impl Default for StreamsConfig {
    fn default() -> Self {
        Self {
            readers: 10,
            block_size_bytes: 256 * 1024,
            file_size_bytes: 256 * 1024 * 1024,
            stagger_rounds: 64,
            mode: StreamMode::Read,
            passes: 2,
            object: 0,
            interval_us: 1,
            seed: 0,
        }
    }
}

impl StreamsConfig {
    /// Checks the config and starts the stream.
    pub fn generator(&self) -> Result<Streams> {
        if self.readers == 0 || self.block_size_bytes == 0 || self.file_size_bytes == 0 {
            return Err(invalid(
                "readers, block_size_bytes and file_size_bytes must be at least 1",
            ));
        }
        if self.mode == StreamMode::ReRead && self.passes == 0 {
            return Err(invalid("passes must be at least 1"));
        }
        let file_blocks = self
            .file_size_bytes
            .div_ceil(u64::from(self.block_size_bytes));
        let per_reader = match self.mode {
            StreamMode::ReRead => file_blocks.saturating_mul(u64::from(self.passes)),
            StreamMode::Read | StreamMode::RandomRead => file_blocks,
        };
        let pace = Pace {
            requests: u64::MAX,
            size_bytes: self.block_size_bytes,
            write_fraction: 0.0,
            interval_us: self.interval_us,
            seed: self.seed,
        };
        Ok(Streams {
            config: self.clone(),
            file_blocks,
            per_reader,
            progress: vec![0; self.readers as usize],
            finished: 0,
            round: 0,
            reader: 0,
            clock: Clock::new(pace)?,
        })
    }
}

/// The stream of a [`StreamsConfig`].
#[derive(Clone, Debug)]
pub struct Streams {
    config: StreamsConfig,
    file_blocks: u64,
    per_reader: u64,
    progress: Vec<u64>,
    finished: usize,
    round: u64,
    reader: usize,
    clock: Clock,
}

impl Streams {
    fn start(&self, reader: usize) -> u64 {
        (reader as u64).saturating_mul(self.config.stagger_rounds)
    }

    fn block(&mut self, step: u64) -> u64 {
        match self.config.mode {
            StreamMode::Read | StreamMode::ReRead => step % self.file_blocks,
            StreamMode::RandomRead => self.clock.rng.random_range(0..self.file_blocks),
        }
    }
}

impl Iterator for Streams {
    type Item = Request;

    fn next(&mut self) -> Option<Request> {
        while self.finished < self.progress.len() {
            while self.reader < self.progress.len() {
                let reader = self.reader;
                self.reader += 1;
                let step = self.progress[reader];
                if self.round >= self.start(reader) && step < self.per_reader {
                    self.progress[reader] += 1;
                    if step + 1 == self.per_reader {
                        self.finished += 1;
                    }
                    let block = self.block(step);
                    let block_size = u64::from(self.config.block_size_bytes);
                    let offset = block * block_size;
                    let size = block_size.min(self.config.file_size_bytes - offset) as u32;
                    return Some(self.clock.request_at(self.config.object, offset, size));
                }
            }
            self.reader = 0;
            self.round += 1;
            // Skip rounds in which no reader runs: jump to the next start.
            let running = (0..self.progress.len())
                .any(|r| self.start(r) <= self.round && self.progress[r] < self.per_reader);
            if !running {
                let next_start = (0..self.progress.len())
                    .filter(|&r| self.progress[r] == 0)
                    .map(|r| self.start(r))
                    .min();
                match next_start {
                    Some(start) => self.round = start.max(self.round),
                    None => return None,
                }
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn staggered_readers_each_read_the_whole_file() {
        let config = StreamsConfig {
            readers: 3,
            block_size_bytes: 10,
            file_size_bytes: 45,
            stagger_rounds: 2,
            ..StreamsConfig::default()
        };
        let requests: Vec<Request> = config.generator().unwrap().collect();
        assert_eq!(requests.len(), 15);
        let blocks: Vec<u64> = requests.iter().map(|r| r.offset / 10).collect();
        // Rounds 0,1: reader 0 alone; 2,3: readers 0,1; 4: all three.
        assert_eq!(&blocks[..7], &[0, 1, 2, 0, 3, 1, 4]);
        assert_eq!(requests.iter().filter(|r| r.size == 5).count(), 3);
    }

    #[test]
    fn re_read_and_random_read_sizes() {
        for (mode, want) in [
            (StreamMode::ReRead, 2 * 3 * 4),
            (StreamMode::RandomRead, 3 * 4),
        ] {
            let config = StreamsConfig {
                readers: 3,
                block_size_bytes: 10,
                file_size_bytes: 40,
                stagger_rounds: 100,
                mode,
                ..StreamsConfig::default()
            };
            assert_eq!(config.generator().unwrap().count(), want);
        }
    }
}
