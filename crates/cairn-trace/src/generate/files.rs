//! File workloads of the dual-cache paper (papers/001, Table I): sessions
//! over a set of files, each session reading a whole file, a prefix of it
//! sequentially, or random pieces. Requests carry object = file id and the
//! offset within the file, so the front-part cache sees prefaces.
//!
//! A session is whole-file with probability `whole_file_percent`,
//! sequential-prefix with probability `sequential_percent −
//! whole_file_percent` (both start at offset 0: the paper's files are read
//! from the start), and random otherwise; so `sequential_percent` of the
//! sessions are sequential, as Table I counts them. `sessions` files are open
//! at once; each request comes from one of them at random. File sizes are
//! uniform in [½, 1½] × the mean. Table I's "mean request rate" (KB/s) sets
//! the time between requests of the whole stream: `request_size / rate`.

use rand::Rng;
use serde::{Deserialize, Serialize};

use super::pace::{Clock, Pace, invalid};
use crate::{Request, Result};

/// The four workloads of Table I.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum TableOneWorkload {
    /// 20 files of 10 MB, 70 % sequential, 60 % whole, 500 KB/s.
    A,
    /// 40 files of 5 MB, 70 % sequential, 60 % whole, 200 KB/s.
    B,
    /// 20 files of 10 MB, 50 % sequential, 40 % whole, 200 KB/s.
    C,
    /// 40 files of 5 MB, 50 % sequential, 40 % whole, 50 KB/s.
    D,
}

/// A file workload with the knobs of Table I. Defaults are workload A.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FileWorkloadConfig {
    /// Number of (active) files. Default 20.
    pub files: u32,
    /// Mean file size in bytes. Default 10 MiB.
    pub file_size_mean_bytes: u64,
    /// Percentage of sessions that read sequentially from the start. Default 70.
    pub sequential_percent: f64,
    /// Percentage of sessions that read a whole file (a subset of the
    /// sequential ones). Default 60.
    pub whole_file_percent: f64,
    /// Mean request rate of the whole stream in KiB/s. Default 500.
    pub rate_kib_per_s: f64,
    /// Bytes per request; offsets are multiples of it. Default 64 KiB.
    pub request_size_bytes: u32,
    /// Files open at once. Default 4.
    pub sessions: u32,
    /// Mean number of requests of a random session. Default 16.
    pub random_requests_mean: u32,
    /// Requests to generate. Default 1,000,000.
    pub requests: u64,
    /// Seed of the `ChaCha8` stream. Default 0.
    pub seed: u64,
}

impl Default for FileWorkloadConfig {
    fn default() -> Self {
        Self::table_one(TableOneWorkload::A)
    }
}

impl FileWorkloadConfig {
    /// A workload of Table I; the other knobs take their defaults.
    pub fn table_one(workload: TableOneWorkload) -> Self {
        let (files, size_mib, sequential, whole, rate) = match workload {
            TableOneWorkload::A => (20, 10, 70.0, 60.0, 500.0),
            TableOneWorkload::B => (40, 5, 70.0, 60.0, 200.0),
            TableOneWorkload::C => (20, 10, 50.0, 40.0, 200.0),
            TableOneWorkload::D => (40, 5, 50.0, 40.0, 50.0),
        };
        Self {
            files,
            file_size_mean_bytes: size_mib << 20,
            sequential_percent: sequential,
            whole_file_percent: whole,
            rate_kib_per_s: rate,
            request_size_bytes: 64 * 1024,
            sessions: 4,
            random_requests_mean: 16,
            requests: 1_000_000,
            seed: 0,
        }
    }

    /// Checks the config and starts the stream.
    pub fn generator(&self) -> Result<FileWorkload> {
        let percent = |p: f64| (0.0..=100.0).contains(&p);
        if !percent(self.sequential_percent)
            || !percent(self.whole_file_percent)
            || self.whole_file_percent > self.sequential_percent
        {
            return Err(invalid(
                "need 0 ≤ whole_file_percent ≤ sequential_percent ≤ 100",
            ));
        }
        if self.files == 0
            || self.file_size_mean_bytes == 0
            || self.request_size_bytes == 0
            || self.sessions == 0
            || self.random_requests_mean == 0
        {
            return Err(invalid(
                "files, file_size_mean_bytes, request_size_bytes, sessions and \
                 random_requests_mean must be at least 1",
            ));
        }
        if !(self.rate_kib_per_s.is_finite() && self.rate_kib_per_s > 0.0) {
            return Err(invalid("rate_kib_per_s must be positive"));
        }
        let interval_us =
            (f64::from(self.request_size_bytes) / (self.rate_kib_per_s * 1024.0) * 1e6) as u64;
        let pace = Pace {
            requests: self.requests,
            size_bytes: self.request_size_bytes,
            write_fraction: 0.0,
            interval_us: interval_us.max(1),
            seed: self.seed,
        };
        let mut clock = Clock::new(pace)?;
        let mean = self.file_size_mean_bytes;
        let sizes = (0..self.files)
            .map(|_| clock.rng.random_range(mean / 2..=mean + mean / 2).max(1))
            .collect();
        let mut workload = FileWorkload {
            config: self.clone(),
            sizes,
            sessions: Vec::with_capacity(self.sessions as usize),
            clock,
        };
        for _ in 0..self.sessions {
            let session = workload.new_session();
            workload.sessions.push(session);
        }
        Ok(workload)
    }
}

/// One open file.
#[derive(Clone, Copy, Debug)]
struct Session {
    file: u32,
    /// Next request index within the file (sequential), unused when random.
    position: u64,
    /// Requests left.
    remaining: u64,
    random: bool,
}

/// The stream of a [`FileWorkloadConfig`].
#[derive(Clone, Debug)]
pub struct FileWorkload {
    config: FileWorkloadConfig,
    sizes: Vec<u64>,
    sessions: Vec<Session>,
    clock: Clock,
}

impl FileWorkload {
    /// The size of each file in bytes, by file id.
    pub fn file_sizes(&self) -> &[u64] {
        &self.sizes
    }

    fn pieces(&self, file: u32) -> u64 {
        self.sizes[file as usize].div_ceil(u64::from(self.config.request_size_bytes))
    }

    fn new_session(&mut self) -> Session {
        let file = self.clock.rng.random_range(0..self.config.files);
        let pieces = self.pieces(file);
        let u = self.clock.rng.random::<f64>() * 100.0;
        let (remaining, random) = if u < self.config.whole_file_percent {
            (pieces, false)
        } else if u < self.config.sequential_percent {
            (self.clock.rng.random_range(1..=pieces), false)
        } else {
            let mean = u64::from(self.config.random_requests_mean);
            (self.clock.rng.random_range(1..=2 * mean - 1), true)
        };
        Session {
            file,
            position: 0,
            remaining,
            random,
        }
    }
}

impl Iterator for FileWorkload {
    type Item = Request;

    fn next(&mut self) -> Option<Request> {
        if self.clock.done() {
            return None;
        }
        let slot = self.clock.rng.random_range(0..self.sessions.len());
        let session = self.sessions[slot];
        let piece = if session.random {
            self.clock.rng.random_range(0..self.pieces(session.file))
        } else {
            session.position
        };
        let request_size = u64::from(self.config.request_size_bytes);
        let offset = piece * request_size;
        let size = request_size.min(self.sizes[session.file as usize] - offset) as u32;
        if session.remaining <= 1 {
            self.sessions[slot] = self.new_session();
        } else {
            self.sessions[slot].position += 1;
            self.sessions[slot].remaining -= 1;
        }
        Some(self.clock.request_at(u64::from(session.file), offset, size))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_stay_inside_their_files() {
        for workload in [
            TableOneWorkload::A,
            TableOneWorkload::B,
            TableOneWorkload::C,
            TableOneWorkload::D,
        ] {
            let config = FileWorkloadConfig {
                requests: 20_000,
                ..FileWorkloadConfig::table_one(workload)
            };
            let generator = config.generator().unwrap();
            let sizes = generator.file_sizes().to_vec();
            let mut front = 0;
            for request in generator {
                assert!(request.object < u64::from(config.files));
                let end = request.offset + u64::from(request.size);
                assert!(request.size > 0 && end <= sizes[request.object as usize]);
                front += u64::from(request.offset == 0);
            }
            assert!(front > 0, "{workload:?}: some sessions start at the front");
        }
    }

    #[test]
    fn whole_above_sequential_is_refused() {
        let config = FileWorkloadConfig {
            whole_file_percent: 80.0,
            ..FileWorkloadConfig::default()
        };
        assert!(config.generator().is_err());
    }
}
