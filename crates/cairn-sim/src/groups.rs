//! Cost groups: which device an access goes to, and whether it is sequential.
//!
//! papers/004 puts every block in an eviction-cost group (device × access
//! pattern). [`GroupMap`] assigns `Access::group` as
//! `device × 2 + (random ? 1 : 0)` when patterns are split, or `device` when
//! they are not. A block access is *sequential* when it follows the previous
//! block of the same object (`block == last block + 1`), *random* otherwise.

use cairn_policy::{Access, KeyMap};
use serde::{Deserialize, Serialize};

use crate::{Result, SimError};

pub use cairn_policy::mix64;

/// How objects map onto devices.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum DeviceMap {
    /// Everything lives on device 0.
    #[default]
    Single,
    /// Device = object id modulo `devices` (e.g. MSR disk numbers onto 2 devices).
    Modulo {
        /// Number of devices, at least 1.
        devices: u32,
    },
    /// Device = `table[object id]`; objects past the end of the table go to
    /// the last device in it.
    Table {
        /// Device index per object id, at least one entry.
        devices: Vec<u32>,
    },
    /// The SSD:HDD experiment of papers/004: a key goes to device 0 (SSD) when
    /// `mix64(key) < ratio × 2^64`, else to device 1 (HDD). `ratio = 0.2`
    /// means 20 % of the keys (so about 20 % of accesses) are on the SSD.
    Split {
        /// Share of keys on device 0, in [0, 1].
        ratio: f64,
    },
}

impl DeviceMap {
    /// How many devices this map can produce.
    pub fn devices(&self) -> usize {
        match self {
            DeviceMap::Single => 1,
            DeviceMap::Modulo { devices } => *devices as usize,
            DeviceMap::Table { devices } => devices.iter().max().map_or(1, |&d| d as usize + 1),
            DeviceMap::Split { .. } => 2,
        }
    }

    #[inline]
    fn device(&self, access: &Access) -> u32 {
        match self {
            DeviceMap::Single => 0,
            DeviceMap::Modulo { devices } => (access.object % u64::from(*devices)) as u32,
            DeviceMap::Table { devices } => {
                let at = usize::try_from(access.object).unwrap_or(usize::MAX);
                devices.get(at).or(devices.last()).copied().unwrap_or(0)
            }
            DeviceMap::Split { ratio } => {
                // 2^64 × ratio, computed in f64; ratio 1.0 saturates to u64::MAX.
                let threshold = (ratio * 18_446_744_073_709_551_616.0) as u64;
                u32::from(mix64(access.key) >= threshold || *ratio <= 0.0)
            }
        }
    }
}

/// How accesses are put into cost groups.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupMap {
    /// Which device each access goes to. Default: a single device.
    #[serde(default)]
    pub devices: DeviceMap,
    /// Whether to split each device's group into sequential (even) and random
    /// (odd) accesses. Default: false (group = device index).
    #[serde(default)]
    pub split_sequential: bool,
}

impl GroupMap {
    /// Number of cost groups this map produces.
    pub fn groups(&self) -> usize {
        self.devices.devices() * if self.split_sequential { 2 } else { 1 }
    }

    /// Checks the parameters.
    pub fn validate(&self) -> Result<()> {
        match &self.devices {
            DeviceMap::Modulo { devices: 0 } => Err(SimError::CostParameter {
                parameter: "devices",
                value: "0".into(),
                expected: "at least 1 device",
            }),
            DeviceMap::Table { devices } if devices.is_empty() => Err(SimError::CostParameter {
                parameter: "devices",
                value: "[]".into(),
                expected: "a table with at least one device index",
            }),
            DeviceMap::Split { ratio } if !(0.0..=1.0).contains(ratio) => {
                Err(SimError::CostParameter {
                    parameter: "ratio",
                    value: ratio.to_string(),
                    expected: "a share in [0, 1]",
                })
            }
            _ => Ok(()),
        }
    }
}

/// Assigns groups to a stream of accesses; remembers the last block of each
/// object to tell sequential from random (one map entry per object, kept only
/// when patterns are split).
#[derive(Debug)]
pub struct GroupAssigner {
    map: GroupMap,
    last_block: KeyMap<u64>,
}

impl GroupAssigner {
    /// An assigner that has seen nothing yet.
    pub fn new(map: GroupMap) -> Self {
        Self {
            map,
            last_block: KeyMap::default(),
        }
    }

    /// Whether every access lands in group 0 (one device, no sequential
    /// split), so [`assign`](Self::assign) has nothing to do.
    #[inline]
    pub fn is_trivial(&self) -> bool {
        matches!(self.map.devices, DeviceMap::Single) && !self.map.split_sequential
    }

    /// Sets `access.group`.
    #[inline]
    pub fn assign(&mut self, access: &mut Access) {
        let device = self.map.devices.device(access);
        if !self.map.split_sequential {
            access.group = device as u16;
            return;
        }
        let previous = self.last_block.insert(access.object, access.block);
        let sequential = previous.is_some_and(|b| b.wrapping_add(1) == access.block);
        access.group = (device * 2 + u32::from(!sequential)) as u16;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(object: u64, block: u64) -> Access {
        Access {
            key: object << 44 | block,
            object,
            block,
            ..Access::default()
        }
    }

    #[test]
    fn a_block_following_its_predecessor_is_sequential() {
        let mut groups = GroupAssigner::new(GroupMap {
            devices: DeviceMap::Modulo { devices: 2 },
            split_sequential: true,
        });
        let got: Vec<u16> = [
            block(0, 5),
            block(0, 6),
            block(1, 7),
            block(0, 9),
            block(1, 8),
        ]
        .into_iter()
        .map(|mut a| {
            groups.assign(&mut a);
            a.group
        })
        .collect();
        assert_eq!(got, [1, 0, 3, 1, 2]);
    }

    #[test]
    fn split_ratio_sends_about_that_share_to_device_zero() {
        let mut groups = GroupAssigner::new(GroupMap {
            devices: DeviceMap::Split { ratio: 0.2 },
            split_sequential: false,
        });
        let on_ssd = (0..10_000u64)
            .filter(|&k| {
                let mut a = Access::read(k, 1, k);
                groups.assign(&mut a);
                a.group == 0
            })
            .count();
        assert!((1_800..2_200).contains(&on_ssd), "{on_ssd}");
        for (ratio, want) in [(0.0, 0), (1.0, 10_000)] {
            let mut groups = GroupAssigner::new(GroupMap {
                devices: DeviceMap::Split { ratio },
                split_sequential: false,
            });
            let n = (0..10_000u64)
                .filter(|&k| {
                    let mut a = Access::read(k, 1, k);
                    groups.assign(&mut a);
                    a.group == 0
                })
                .count();
            assert_eq!(n, want, "ratio {ratio}");
        }
    }
}
