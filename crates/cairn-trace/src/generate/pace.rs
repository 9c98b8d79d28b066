//! What every random generator shares, beneath the generators and the
//! dispatch in `generate`: its [`Pace`] (how many requests, their size, the
//! share of writes, time between them, the seed), the [`Layout`] of items as
//! requests, and the `Clock` that turns both into requests.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::error::TraceError;
use crate::{NEVER, Op, Request, Result};

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
    pub(super) fn validate(&self) -> Result<()> {
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

    pub(super) fn rng(&self) -> ChaCha8Rng {
        ChaCha8Rng::seed_from_u64(self.seed)
    }
}

/// The state every random generator carries: its pace, its stream of random
/// numbers, and how many requests it has made.
#[derive(Clone, Debug)]
pub(super) struct Clock {
    pub(super) pace: Pace,
    pub(super) rng: ChaCha8Rng,
    pub(super) issued: u64,
}

impl Clock {
    pub(super) fn new(pace: Pace) -> Result<Self> {
        pace.validate()?;
        Ok(Self {
            rng: pace.rng(),
            pace,
            issued: 0,
        })
    }

    /// Whether the budget of requests is spent.
    pub(super) fn done(&self) -> bool {
        self.issued >= self.pace.requests
    }

    /// The next request for `item`, laid out by `layout`.
    pub(super) fn request(&mut self, item: u64, layout: Layout) -> Request {
        let (object, offset) = match layout {
            Layout::Objects => (item, 0),
            Layout::Blocks => (0, item.saturating_mul(u64::from(self.pace.size_bytes))),
        };
        self.request_at(object, offset, self.pace.size_bytes)
    }

    /// The next request for a byte range; draws the operation.
    pub(super) fn request_at(&mut self, object: u64, offset: u64, size: u32) -> Request {
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
            ttl: 0,
            next: NEVER,
        }
    }
}

pub(super) fn invalid(reason: impl Into<String>) -> TraceError {
    TraceError::Config {
        reason: reason.into(),
    }
}
