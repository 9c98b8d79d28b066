//! The hot-spot mix of the log-structured disk paper (papers/003): regions of
//! blocks, each taking its own share of the requests, uniform within.

use rand::Rng;
use serde::{Deserialize, Serialize};

use super::pace::{Clock, Layout, Pace, invalid};
use crate::{Request, Result};

/// One region of a hot-spot mix.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Region {
    /// Items (blocks) in the region.
    pub items: u64,
    /// Relative share of the requests (weights need not sum to 1).
    pub weight: f64,
}

/// Requests over `items` items split into consecutive regions from item 0:
/// each of `regions` in order, then "the rest" (every item not in a region)
/// with `rest_weight`. Within a region the item is uniform.
///
/// The defaults are the paper's: regions of 512, 512 and 1024 blocks taking
/// 50 %, 30 % and 10 % of the requests, the rest 10 %, all writes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HotSpotConfig {
    /// All items, regions and rest together. Default 65,536 (256 MiB of 4 KiB blocks).
    pub items: u64,
    /// The regions, from item 0 on. Default (512, 0.5), (512, 0.3), (1024, 0.1).
    pub regions: Vec<Region>,
    /// The share of the items after the regions. Default 0.1.
    pub rest_weight: f64,
    /// Objects or blocks. Default blocks.
    pub layout: Layout,
    /// Count, size, writes, time and seed (a nested table). Default writes only.
    pub pace: Pace,
}

impl Default for HotSpotConfig {
    fn default() -> Self {
        Self {
            items: 65_536,
            regions: vec![
                Region {
                    items: 512,
                    weight: 0.5,
                },
                Region {
                    items: 512,
                    weight: 0.3,
                },
                Region {
                    items: 1024,
                    weight: 0.1,
                },
            ],
            rest_weight: 0.1,
            layout: Layout::Blocks,
            pace: Pace {
                write_fraction: 1.0,
                ..Pace::default()
            },
        }
    }
}

impl HotSpotConfig {
    /// Checks the config and starts the stream.
    pub fn generator(&self) -> Result<HotSpot> {
        let mut first = 0u64;
        let mut spans = Vec::with_capacity(self.regions.len() + 1);
        for (index, region) in self.regions.iter().enumerate() {
            if region.items == 0 || !(region.weight.is_finite() && region.weight >= 0.0) {
                return Err(invalid(format!(
                    "regions[{index}]: items must be ≥ 1 and weight finite and ≥ 0"
                )));
            }
            spans.push((first, region.items, region.weight));
            first = first.saturating_add(region.items);
        }
        if first > self.items {
            return Err(invalid(format!(
                "regions hold {first} items, more than items = {}",
                self.items
            )));
        }
        if !(self.rest_weight.is_finite() && self.rest_weight >= 0.0) {
            return Err(invalid("rest_weight must be finite and ≥ 0"));
        }
        if first < self.items {
            spans.push((first, self.items - first, self.rest_weight));
        }
        let total: f64 = spans.iter().map(|s| s.2).sum();
        if total <= 0.0 {
            return Err(invalid("the weights sum to 0"));
        }
        let mut cumulative = 0.0;
        let regions = spans
            .into_iter()
            .map(|(first, items, weight)| {
                cumulative += weight / total;
                (cumulative, first, items)
            })
            .collect();
        Ok(HotSpot {
            regions,
            layout: self.layout,
            clock: Clock::new(self.pace)?,
        })
    }
}

/// The stream of a [`HotSpotConfig`].
#[derive(Clone, Debug)]
pub struct HotSpot {
    /// (cumulative share, first item, items) per region.
    regions: Vec<(f64, u64, u64)>,
    layout: Layout,
    clock: Clock,
}

impl Iterator for HotSpot {
    type Item = Request;

    fn next(&mut self) -> Option<Request> {
        if self.clock.done() {
            return None;
        }
        let u: f64 = self.clock.rng.random();
        let index = self
            .regions
            .iter()
            .position(|r| u < r.0)
            .unwrap_or(self.regions.len() - 1);
        let (_, first, items) = self.regions[index];
        let item = first + self.clock.rng.random_range(0..items);
        Some(self.clock.request(item, self.layout))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_follow_the_weights() {
        let config = HotSpotConfig {
            pace: Pace {
                requests: 100_000,
                ..HotSpotConfig::default().pace
            },
            ..HotSpotConfig::default()
        };
        let mut counts = [0u64; 4];
        for request in config.generator().unwrap() {
            let block = request.offset / 4096;
            let region = match block {
                0..512 => 0,
                512..1024 => 1,
                1024..2048 => 2,
                _ => 3,
            };
            counts[region] += 1;
            assert_eq!(request.op, crate::Op::Write);
        }
        for (count, want) in counts.iter().zip([0.5, 0.3, 0.1, 0.1]) {
            let got = *count as f64 / 100_000.0;
            assert!((got - want).abs() < 0.01, "{got} vs {want}");
        }
    }

    #[test]
    fn regions_larger_than_the_items_are_refused() {
        let config = HotSpotConfig {
            items: 100,
            ..HotSpotConfig::default()
        };
        assert!(config.generator().is_err());
    }
}
