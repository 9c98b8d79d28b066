//! A sequential scan over a range of blocks, repeated: the loop pattern that
//! defeats LRU when the loop is larger than the cache.

use serde::{Deserialize, Serialize};

use super::pace::{Clock, Layout, Pace, invalid};
use crate::{Request, Result};

/// Requests to items `first, first+1, …, first+items-1`, then again from
/// `first`, until `pace.requests` have been made.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ScanConfig {
    /// Items in one pass. Default 1024.
    pub items: u64,
    /// The first item. Default 0.
    pub first: u64,
    /// Objects or blocks. Default blocks.
    pub layout: Layout,
    /// Count, size, writes, time and seed (a nested table). Set
    /// `pace.requests` to `items × passes` for whole passes.
    pub pace: Pace,
}

impl Default for ScanConfig {
    fn default() -> Self {
        Self {
            items: 1024,
            first: 0,
            layout: Layout::Blocks,
            pace: Pace::default(),
        }
    }
}

impl ScanConfig {
    /// Checks the config and starts the stream.
    pub fn generator(&self) -> Result<Scan> {
        if self.items == 0 {
            return Err(invalid("items must be at least 1"));
        }
        Ok(Scan {
            config: self.clone(),
            position: 0,
            clock: Clock::new(self.pace)?,
        })
    }
}

/// The stream of a [`ScanConfig`].
#[derive(Clone, Debug)]
pub struct Scan {
    config: ScanConfig,
    position: u64,
    clock: Clock,
}

impl Iterator for Scan {
    type Item = Request;

    fn next(&mut self) -> Option<Request> {
        if self.clock.done() {
            return None;
        }
        let item = self.config.first.saturating_add(self.position);
        self.position = (self.position + 1) % self.config.items;
        Some(self.clock.request(item, self.config.layout))
    }
}
