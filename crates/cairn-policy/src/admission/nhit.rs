//! `nhit`: admit a unit on its n-th miss within a bounded recent window.
//!
//! Source: Open CAS Framework's `nhit` promotion policy
//! (`src/promotion/nhit/`): a table of recently missed core lines, each with
//! a counter; the first miss of a line inserts it with count 1, each further
//! miss bumps the count, and the line is promoted once its count reaches the
//! insertion threshold (then its count is cleared). While the cache is less
//! than `trigger` full, every miss is promoted and nothing is counted. OCF's
//! table is a ring buffer of 2 entries per cache line, reused oldest first.
//!
//! Here:
//!
//! - **Threshold** `threshold` = 2 by default (OCF: 3, range 2..1000). Two
//!   is "cache on second hit" (Maggs & Sitaraman, "Algorithmic nuggets in
//!   content delivery", SIGCOMM CCR 2015): it already keeps every one-hit
//!   wonder and every single pass of a scan out, which is most of what a
//!   filter saves, while each further required miss costs every hot unit one
//!   more read from the slow device before it is cached. Raise it for
//!   workloads that re-read cold data a few times.
//! - **Trigger** `trigger` = 0.8 (OCF's 80 %): below that fill every miss is
//!   admitted uncounted, so an empty cache fills at once. 0 always filters.
//! - **Table**: `tracked_per_unit` × the cache's units (OCF's 2) entries of 8
//!   bytes (a 32-bit tag of the key's hash and a 32-bit count), in sets of 8
//!   entries (one 64-byte line), the set chosen by the key's hash. Each set is
//!   kept in recency order of the misses counted in it: a counted miss moves
//!   its entry to the front, a new key enters at the front and, in a full set,
//!   the least recently missed entry is forgotten (its count restarts at the
//!   key's next miss). So a key is admitted if its n misses fall within about
//!   the last `entries` distinct missed keys (exactly: before 8 other keys of
//!   its set were missed after its last miss). At most `MAX_ENTRIES` entries
//!   (2 GiB); the table is allocated once, and nothing per access.
//! - Two keys with the same set and tag share a count (probability about
//!   8 / 2^32 per miss): one may be admitted a miss early.

use serde::{Deserialize, Serialize};

use super::{Admission, Occupancy, expected_units};
use crate::{Access, Capacity, ConfigError};

/// Entries per set: 8 entries of 8 bytes, one cache line.
const WAYS: usize = 8;

/// The table's bound, in entries (2^28 × 8 bytes = 2 GiB).
pub const MAX_ENTRIES: u64 = 1 << 28;

/// The largest threshold (OCF's bound).
pub const MAX_THRESHOLD: u32 = 1000;

/// `nhit` parameters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NhitConfig {
    /// Admit on this miss of a key (counted within the window), in
    /// `1..=1000`; 1 admits every miss. Default 2 (OCF: 3).
    pub threshold: u32,
    /// Admit every miss, uncounted, while the cache is less than this
    /// fraction full, in `[0, 1]`. Default 0.8 (OCF's 80 %).
    pub trigger: f64,
    /// Tracked keys per cache unit, in `(0, 64]`: the window's size. Default
    /// 2.0 (OCF's mapping ratio).
    pub tracked_per_unit: f64,
    /// In byte mode, the average unit size used to count the cache's units,
    /// in bytes, at least 1. Default 4096 (one block).
    pub average_unit_bytes: u64,
}

impl Default for NhitConfig {
    fn default() -> Self {
        Self {
            threshold: 2,
            trigger: 0.8,
            tracked_per_unit: 2.0,
            average_unit_bytes: 4096,
        }
    }
}

impl NhitConfig {
    /// Checks every value's range.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let error = |parameter, value: String, expected| {
            Err(ConfigError::OutOfRange {
                policy: "nhit",
                parameter,
                value,
                expected,
            })
        };
        if !(1..=MAX_THRESHOLD).contains(&self.threshold) {
            return error("threshold", self.threshold.to_string(), "in 1..=1000");
        }
        if !(0.0..=1.0).contains(&self.trigger) {
            return error("trigger", self.trigger.to_string(), "a fraction in [0, 1]");
        }
        if !(self.tracked_per_unit > 0.0 && self.tracked_per_unit <= 64.0) {
            return error(
                "tracked_per_unit",
                self.tracked_per_unit.to_string(),
                "in (0, 64]",
            );
        }
        if self.average_unit_bytes == 0 {
            return error("average_unit_bytes", "0".into(), "at least 1");
        }
        Ok(())
    }
}

/// One tracked key: a tag of its hash (0 = empty) and its counted misses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Entry {
    tag: u32,
    count: u32,
}

/// `WAYS` entries, most recently missed first, empty ones last.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C, align(64))]
struct Set {
    entries: [Entry; WAYS],
}

/// The `nhit` filter.
#[derive(Clone, Debug)]
pub struct Nhit {
    sets: Box<[Set]>,
    threshold: u32,
    trigger: f64,
}

impl Nhit {
    /// A filter for a cache of `capacity`.
    pub fn new(capacity: Capacity, config: &NhitConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        let units = expected_units(capacity, config.average_unit_bytes);
        let sets = sets_for(units, config.tracked_per_unit);
        Ok(Self {
            sets: vec![Set::default(); sets].into_boxed_slice(),
            threshold: config.threshold,
            trigger: config.trigger,
        })
    }

    /// How many keys the table can track at once (its bound).
    pub fn entries(&self) -> usize {
        self.sets.len() * WAYS
    }

    /// The table's memory, in bytes.
    pub fn table_bytes(&self) -> usize {
        std::mem::size_of_val(&*self.sets)
    }

    /// The set and the (non-zero) tag of `key`.
    fn place(&self, key: u64) -> (usize, u32) {
        let hash = mix(key);
        // Lemire's multiply-shift range reduction of the high bits; the tag
        // takes the low bits, so set and tag are independent.
        let set = ((u128::from(hash >> 32) * self.sets.len() as u128) >> 32) as usize;
        (set, (hash as u32).max(1))
    }

    /// Counts a miss of `key`; returns its count so far (1 for a key not
    /// tracked, which then enters the set's front).
    fn count(&mut self, key: u64) -> u32 {
        let (set, tag) = self.place(key);
        let entries = &mut self.sets[set].entries;
        if let Some(at) = entries.iter().position(|e| e.tag == tag) {
            entries[..=at].rotate_right(1);
            entries[0].count = entries[0].count.saturating_add(1);
        } else {
            entries.rotate_right(1);
            entries[0] = Entry { tag, count: 1 };
        }
        entries[0].count
    }

    /// Stops tracking `key` (it was admitted: its next residency starts a
    /// fresh count once it is evicted).
    fn forget(&mut self, key: u64) {
        let (set, tag) = self.place(key);
        let entries = &mut self.sets[set].entries;
        if let Some(at) = entries.iter().position(|e| e.tag == tag) {
            entries[at..].rotate_left(1);
            entries[WAYS - 1] = Entry::default();
        }
    }

    /// The counted misses of `key` in the window (0 if not tracked).
    pub fn misses(&self, key: u64) -> u32 {
        let (set, tag) = self.place(key);
        self.sets[set]
            .entries
            .iter()
            .find(|e| e.tag == tag)
            .map_or(0, |e| e.count)
    }
}

/// The sets a table of `tracked_per_unit` entries per unit of `units` needs:
/// at least one, at most `MAX_ENTRIES` entries.
fn sets_for(units: u64, tracked_per_unit: f64) -> usize {
    let entries = ((units as f64 * tracked_per_unit).ceil() as u64).clamp(WAYS as u64, MAX_ENTRIES);
    entries.div_ceil(WAYS as u64) as usize
}

/// `SplitMix64`'s finaliser: well spread, independent of the maps' hasher.
fn mix(key: u64) -> u64 {
    let mut z = key.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Admission for Nhit {
    fn name(&self) -> &'static str {
        "nhit"
    }

    fn admit(&mut self, access: &Access, occupancy: Occupancy) -> bool {
        if occupancy.below(self.trigger) {
            self.forget(access.key);
            return true;
        }
        if self.count(access.key) >= self.threshold {
            self.forget(access.key);
            return true;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FULL: Occupancy = Occupancy {
        used: 100,
        limit: 100,
    };

    fn nhit(units: u64, threshold: u32, trigger: f64) -> Nhit {
        Nhit::new(
            Capacity::Objects(units),
            &NhitConfig {
                threshold,
                trigger,
                ..NhitConfig::default()
            },
        )
        .unwrap()
    }

    fn miss(filter: &mut Nhit, key: u64) -> bool {
        filter.admit(&Access::read(key, 4096, 0), FULL)
    }

    #[test]
    fn admits_exactly_on_the_nth_miss() {
        for threshold in 1..=6 {
            let mut filter = nhit(1000, threshold, 0.8);
            for key in 0..50 {
                for n in 1..=threshold {
                    assert_eq!(
                        miss(&mut filter, key),
                        n == threshold,
                        "key {key}, miss {n}"
                    );
                }
                // Admitted: the count starts again.
                assert_eq!(filter.misses(key), 0);
                for n in 1..=threshold {
                    assert_eq!(
                        miss(&mut filter, key),
                        n == threshold,
                        "again: key {key}, miss {n}"
                    );
                }
            }
        }
    }

    #[test]
    fn below_the_trigger_every_miss_is_admitted_uncounted() {
        let mut filter = nhit(100, 3, 0.5);
        let half = |used| Occupancy { used, limit: 100 };
        assert!(filter.admit(&Access::read(1, 1, 0), half(49)));
        assert_eq!(filter.misses(1), 0);
        assert!(
            !filter.admit(&Access::read(1, 1, 0), half(50)),
            "at the mark it filters"
        );
        assert!(!filter.admit(&Access::read(1, 1, 0), half(50)));
        assert!(filter.admit(&Access::read(1, 1, 0), half(50)));
        // The default config: an empty cache admits everything.
        let mut filter = Nhit::new(Capacity::Objects(100), &NhitConfig::default()).unwrap();
        assert!(filter.admit(
            &Access::read(5, 1, 0),
            Occupancy {
                used: 0,
                limit: 100
            }
        ));
    }

    #[test]
    fn memory_is_fixed_and_the_oldest_tracked_keys_are_forgotten() {
        let mut filter = nhit(1000, 2, 0.0);
        assert_eq!(
            filter.entries(),
            2000,
            "2 entries per unit, a multiple of 8"
        );
        assert_eq!(filter.table_bytes(), 2000 * 8);
        // Tiny and huge caches are clamped.
        assert_eq!(nhit(0, 2, 0.0).entries(), WAYS);
        assert_eq!(sets_for(1 << 40, 64.0) * WAYS, MAX_ENTRIES as usize);
        assert_eq!(sets_for(10, 0.5), 1);
        assert_eq!(
            sets_for(1000, 0.5),
            63,
            "500 entries, rounded up to sets of 8"
        );
        // A key missed once, then far more distinct keys than the table holds:
        // its count is gone and its next miss is a first miss again.
        assert!(!miss(&mut filter, u64::MAX));
        for key in 0..20_000 {
            miss(&mut filter, key);
        }
        assert_eq!(filter.misses(u64::MAX), 0);
        assert!(
            !miss(&mut filter, u64::MAX),
            "forgotten: a first miss again"
        );
        let tracked = filter
            .sets
            .iter()
            .flat_map(|s| s.entries)
            .filter(|e| e.tag != 0)
            .count();
        assert!(tracked <= filter.entries(), "{tracked}");
        assert!(
            tracked > filter.entries() * 9 / 10,
            "the table is used: {tracked}"
        );
    }

    #[test]
    fn a_set_forgets_its_least_recently_missed_key() {
        // One set: every key lands in it.
        let mut filter = nhit(0, 3, 0.0);
        assert_eq!(filter.sets.len(), 1);
        for key in 0..8 {
            assert!(!miss(&mut filter, key));
        }
        assert!(
            !miss(&mut filter, 0),
            "key 0 becomes the most recent (count 2)"
        );
        assert!(
            !miss(&mut filter, 100),
            "a ninth key evicts the least recent: key 1"
        );
        assert_eq!(filter.misses(1), 0);
        assert_eq!(filter.misses(0), 2);
        assert!(miss(&mut filter, 0), "third miss of key 0");
        assert_eq!(filter.misses(2), 1, "the others are still tracked");
    }

    #[test]
    fn out_of_range_values_are_refused() {
        let build = |config: NhitConfig| Nhit::new(Capacity::Objects(10), &config).map(|_| ());
        let base = NhitConfig::default();
        for bad in [
            NhitConfig {
                threshold: 0,
                ..base.clone()
            },
            NhitConfig {
                threshold: 1001,
                ..base.clone()
            },
            NhitConfig {
                trigger: 1.5,
                ..base.clone()
            },
            NhitConfig {
                tracked_per_unit: 0.0,
                ..base.clone()
            },
            NhitConfig {
                average_unit_bytes: 0,
                ..base.clone()
            },
        ] {
            let error = build(bad.clone()).unwrap_err();
            assert!(
                matches!(error, ConfigError::OutOfRange { policy: "nhit", .. }),
                "{bad:?}: {error}"
            );
        }
        build(base).unwrap();
    }
}
