//! Items drawn uniformly at random (the "uniform random" workload of the
//! log-structured disk paper, papers/003).

use rand::Rng;
use serde::{Deserialize, Serialize};

use super::pace::{Clock, Layout, Pace, invalid};
use crate::{Request, Result};

/// Requests to items drawn uniformly from `0..items`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct UniformConfig {
    /// Number of distinct items. Default 65,536.
    pub items: u64,
    /// Objects or blocks. Default blocks.
    pub layout: Layout,
    /// Count, size, writes, time and seed (a nested table).
    pub pace: Pace,
}

impl Default for UniformConfig {
    fn default() -> Self {
        Self {
            items: 65_536,
            layout: Layout::Blocks,
            pace: Pace::default(),
        }
    }
}

impl UniformConfig {
    /// Checks the config and starts the stream.
    pub fn generator(&self) -> Result<Uniform> {
        if self.items == 0 {
            return Err(invalid("items must be at least 1"));
        }
        Ok(Uniform {
            items: self.items,
            layout: self.layout,
            clock: Clock::new(self.pace)?,
        })
    }
}

/// The stream of a [`UniformConfig`].
#[derive(Clone, Debug)]
pub struct Uniform {
    items: u64,
    layout: Layout,
    clock: Clock,
}

impl Iterator for Uniform {
    type Item = Request;

    fn next(&mut self) -> Option<Request> {
        if self.clock.done() {
            return None;
        }
        let item = self.clock.rng.random_range(0..self.items);
        Some(self.clock.request(item, self.layout))
    }
}
