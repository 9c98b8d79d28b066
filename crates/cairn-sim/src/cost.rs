//! The device cost model: what hits and misses cost in time.
//!
//! Each cost group (see [`crate::groups`]) has a hit cost and a miss cost
//! (and, for two-level runs, an L2 hit cost between the two), each a fixed
//! latency plus a transfer at a bandwidth:
//! `time = latency + size / bandwidth`. The modelled total time of a run is
//! the sum over every access; modelled throughput is the bytes requested over
//! that time. This is the measure papers/004 argues for: with heterogeneous
//! devices the miss *ratio* is the wrong goal, the miss *time* is the right one.
//! Accesses are served one at a time (no queueing, no overlap): the model
//! ranks policies, it does not predict a device's absolute numbers.

use serde::{Deserialize, Serialize};

use crate::{Result, SimError};

/// Bytes in one MB, as bandwidths are given (decimal, as device data sheets use).
pub const BYTES_PER_MB: f64 = 1_000_000.0;

/// Service cost of one access on one device: `latency_us + size / bandwidth_mb_s`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServiceCost {
    /// Fixed latency per access, in microseconds.
    pub latency_us: f64,
    /// Transfer bandwidth, in MB/s (10^6 bytes per second); must be positive.
    pub bandwidth_mb_s: f64,
}

impl ServiceCost {
    /// Seconds to serve `count` accesses moving `bytes` bytes in total.
    pub fn seconds(self, count: u64, bytes: u64) -> f64 {
        count as f64 * self.latency_us * 1e-6 + bytes as f64 / (self.bandwidth_mb_s * BYTES_PER_MB)
    }
}

/// The costs of one group.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupCost {
    /// Name shown in reports (`hdd`, `ssd-random`).
    pub name: String,
    /// Serving a hit from the cache. Default: DRAM-like, 1 µs + 10,000 MB/s.
    #[serde(default = "GroupCost::dram")]
    pub hit: ServiceCost,
    /// Serving a miss from the device. Default: HDD-like, 5 ms + 150 MB/s.
    #[serde(default = "GroupCost::hdd")]
    pub miss: ServiceCost,
    /// Serving a hit from the second level of a two-level run (`--l2`).
    /// Default: flash-like, 100 µs + 1,000 MB/s.
    #[serde(default = "GroupCost::flash")]
    pub l2_hit: ServiceCost,
}

impl GroupCost {
    /// DRAM-like: 1 µs and 10,000 MB/s.
    pub fn dram() -> ServiceCost {
        ServiceCost {
            latency_us: 1.0,
            bandwidth_mb_s: 10_000.0,
        }
    }

    /// Flash-like: 100 µs and 1,000 MB/s.
    pub fn flash() -> ServiceCost {
        ServiceCost {
            latency_us: 100.0,
            bandwidth_mb_s: 1_000.0,
        }
    }

    /// HDD-like: 5 ms and 150 MB/s.
    pub fn hdd() -> ServiceCost {
        ServiceCost {
            latency_us: 5_000.0,
            bandwidth_mb_s: 150.0,
        }
    }
}

/// Costs per group, indexed by `Access::group`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CostModel {
    /// One entry per cost group. Default: a single HDD group with DRAM hits.
    pub groups: Vec<GroupCost>,
}

impl Default for CostModel {
    fn default() -> Self {
        Self {
            groups: vec![GroupCost {
                name: "hdd".into(),
                hit: GroupCost::dram(),
                miss: GroupCost::hdd(),
                l2_hit: GroupCost::flash(),
            }],
        }
    }
}

impl CostModel {
    /// Checks that the model covers `groups` groups with positive bandwidths
    /// and non-negative latencies.
    pub fn validate(&self, groups: usize) -> Result<()> {
        if self.groups.len() < groups.max(1) {
            return Err(SimError::CostGroups {
                needed: groups.max(1),
                have: self.groups.len(),
            });
        }
        for group in &self.groups {
            for cost in [group.hit, group.miss, group.l2_hit] {
                if !(cost.bandwidth_mb_s > 0.0 && cost.bandwidth_mb_s.is_finite()) {
                    return Err(SimError::CostParameter {
                        parameter: "bandwidth_mb_s",
                        value: cost.bandwidth_mb_s.to_string(),
                        expected: "a positive, finite bandwidth in MB/s",
                    });
                }
                if !(cost.latency_us >= 0.0 && cost.latency_us.is_finite()) {
                    return Err(SimError::CostParameter {
                        parameter: "latency_us",
                        value: cost.latency_us.to_string(),
                        expected: "a non-negative, finite latency in microseconds",
                    });
                }
            }
        }
        Ok(())
    }

    /// The cost of group `group`; groups past the end use the last one
    /// (`validate` rules that out for configured group maps).
    pub fn group(&self, group: usize) -> Option<&GroupCost> {
        self.groups.get(group).or(self.groups.last())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_miss_of_one_mb_on_the_default_hdd_costs_latency_plus_transfer() {
        let model = CostModel::default();
        let hdd = model.group(0).unwrap();
        let seconds = hdd.miss.seconds(1, 1_500_000);
        assert!((seconds - (0.005 + 0.01)).abs() < 1e-12, "{seconds}");
        assert!(model.validate(1).is_ok());
        assert!(matches!(
            model.validate(2),
            Err(SimError::CostGroups { needed: 2, have: 1 })
        ));
    }
}
