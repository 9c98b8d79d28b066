//! `BeladySize`: an offline, size-aware Belady. Each eviction samples resident
//! units and evicts the one with the largest `size × time to next access`.
//!
//! Source: Belady's MIN (L. A. Belady, IBM Systems Journal 5(2), 1966)
//! weighted by size, as libCacheSim's `BeladySize` (`cache/eviction/
//! BeladySize.c`) does it; the score is the "size × reuse distance" rank
//! used as the offline reference by size-aware work since (e.g. Berger et
//! al.'s LRB, NSDI 2020, compares against it). Like [`opt`](crate::opt) it
//! reads [`Access::next`], so it is a simulator bound, not an online policy:
//! without next-access times (every `next` [`NEVER`]) it admits nothing.
//!
//! Maps to libCacheSim 0.3.5's `BeladySize` (the Python wheel; read from its
//! machine code, whose source differs from both `aa0fc40` and later
//! commits), with `version = "0.3.5"`:
//! - a unit whose next access is [`NEVER`] is not inserted, but the units
//!   its miss needed room for are evicted first; a unit hit for the last
//!   time leaves (the hit still counts; see below);
//! - an eviction draws `n_sample` (128) units with libCacheSim's sampler
//!   ([`ChainedTable::sample`](crate::libcachesim::ChainedTable::sample), as
//!   for [`random`](crate::random)), repeats allowed, and evicts the first
//!   with the largest score `ln(size) + ln(next − now)` (libm's `log`, in
//!   `f64`), starting from a bar of −1; units of size 0 or with a next
//!   access not after now score −∞ or NaN and are never picked. If no sample clears the bar
//!   libCacheSim samples again; so does this, up to 64 rounds, then evicts
//!   the last unit drawn (libCacheSim would loop for ever);
//! - the sampled table starts as the cache's own, `2^24` buckets (the
//!   wheel's `hashpower`), and halves while samples find it empty.
//!
//! The score is compared as the product `size × (next − now)` in integers
//! and only when two products are within 10⁻⁹ of each other (equal products
//! of different factors, whose logarithm sums can differ in the last bit)
//! are the two logarithm sums computed: the same order, for a fraction of
//! the work.
//!
//! A hit on a unit never accessed again leaves it resident until the next
//! [`Policy::admit`], which removes it and reports it among the victims
//! before making room: libCacheSim removes it at the hit, but nothing in
//! between can touch it (only hits and refused admissions happen between
//! two admissions, and it is not accessed again), so every eviction sees
//! the same residents.
//!
//! Knobs: `n_sample` (128, libCacheSim's `n-sample`), `version` ("cairn"),
//! `seed` (unset) and `hash_power` (unset: 24 for libCacheSim's tables,
//! refused with "cairn") as for [`random`](crate::random). The default
//! `version = "cairn"` draws the samples uniformly from Cairn's
//! [`Residents`](crate::residents::Residents) (all `n_sample` slots loading
//! before any is scored), so its victims are not libCacheSim's but its
//! rule and score are; `version = "0.3.5"` replicates the wheel victim for
//! victim. `version = "aa0fc40"` selects that version's table and
//! generator only: its integer score `size × distance` is not replicated
//! (nor compared).

use serde::{Deserialize, Serialize};

use crate::residents::{SampledTable, SamplerVersion};
use crate::{Access, Ahead, Capacity, ConfigError, NEVER, Policy};

/// Sampling rounds before an eviction gives up on the score (see the module
/// doc).
const MAX_ROUNDS: u32 = 64;

/// `BeladySize` parameters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BeladySizeConfig {
    /// Residents sampled per eviction, 1..=1024. Default 128 (libCacheSim).
    pub n_sample: u32,
    /// Whose table and generator: "cairn" (default), "0.3.5" or "aa0fc40".
    pub version: SamplerVersion,
    /// The generator's starting state (non-zero for "cairn" and "0.3.5").
    /// Default unset: `0xdeadbeef`, or a fresh libCacheSim thread's.
    pub seed: Option<u64>,
    /// libCacheSim's sampled table starts with `2^hash_power` buckets,
    /// 1..=31. Default unset: 24 (the wheel's `hashpower`, which
    /// `BeladySize` uses whole); refused with version "cairn".
    pub hash_power: Option<u32>,
}

/// libCacheSim's `BeladySize` samples the cache's own table: the wheel's
/// `hashpower`.
const LIBCACHESIM_HASH_POWER: u32 = 24;

impl Default for BeladySizeConfig {
    fn default() -> Self {
        Self {
            n_sample: 128,
            version: SamplerVersion::default(),
            seed: None,
            hash_power: None,
        }
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct Entry {
    charge: u64,
    /// Logical time of the unit's next access.
    next: u64,
}

/// libCacheSim's score, `ln(size) + ln(next − now)`.
fn log_score(charge: u64, distance: i64) -> f64 {
    (charge as f64).ln() + (distance as f64).ln()
}

/// Whether a unit `(charge, distance)` scores above the best so far, as
/// libCacheSim's `log_score(..) > best` decides it. `best` is the best's
/// product and its log score if computed.
#[inline]
fn beats(charge: u64, distance: i64, best: &mut (u128, Option<f64>, u64, i64)) -> bool {
    if charge == 0 || distance <= 0 {
        return false; // −∞ or NaN: never above the bar
    }
    let product = u128::from(charge) * distance as u128;
    let (best_product, best_log, best_charge, best_distance) = *best;
    if best_product == 0 {
        // Only the bar of −1 so far; every positive product clears it.
        return true;
    }
    // Products differing by more than 1e-9 relative order as their logs do.
    let gap = product.abs_diff(best_product);
    if gap > best_product / 1_000_000_000 {
        return product > best_product;
    }
    let best_log = best_log.unwrap_or_else(|| log_score(best_charge, best_distance));
    best.1 = Some(best_log);
    log_score(charge, distance) > best_log
}

/// `BeladySize`.
#[derive(Debug)]
pub struct BeladySize {
    capacity: Capacity,
    used: u64,
    table: SampledTable<Entry>,
    /// One eviction round's draws (`n_sample` slots).
    samples: Vec<u32>,
    /// Units hit for the last time, to leave before the next eviction.
    held: Vec<u64>,
}

impl BeladySize {
    /// An empty `BeladySize` cache.
    pub fn new(capacity: Capacity, config: &BeladySizeConfig) -> Result<Self, ConfigError> {
        if !(1..=1024).contains(&config.n_sample) {
            return Err(ConfigError::OutOfRange {
                policy: "beladysize",
                parameter: "n_sample",
                value: config.n_sample.to_string(),
                expected: "1 to 1024",
            });
        }
        // Unset, libCacheSim's table is the cache's own (Cairn's has none to
        // size, and refuses the knob).
        let hash_power = match config.version.libcachesim() {
            Some(_) => Some(config.hash_power.unwrap_or(LIBCACHESIM_HASH_POWER)),
            None => config.hash_power,
        };
        Ok(Self {
            capacity,
            used: 0,
            table: SampledTable::new("beladysize", config.version, config.seed, hash_power)?,
            samples: vec![0; config.n_sample as usize],
            held: Vec::new(),
        })
    }

    /// The slot to evict at logical time `now`.
    fn victim(&mut self, now: u64) -> u32 {
        assert!(!self.table.is_empty(), "used > 0 means residents");
        for _ in 0..MAX_ROUNDS {
            // Drawn in order (libCacheSim's slots are stable while it
            // samples); Cairn's are loading before the first is scored.
            self.table.sample_into(&mut self.samples);
            let mut best = None;
            let mut score = (0u128, None, 0, 0);
            for &slot in &self.samples {
                let entry = self.table.value(slot);
                let distance = (entry.next as i64).wrapping_sub(now as i64);
                if beats(entry.charge, distance, &mut score) {
                    best = Some(slot);
                    score = (
                        u128::from(entry.charge) * distance as u128,
                        None,
                        entry.charge,
                        distance,
                    );
                }
            }
            if let Some(slot) = best {
                return slot;
            }
        }
        *self.samples.last().expect("n_sample >= 1")
    }

    /// Removes `slot`; returns its key.
    fn evict(&mut self, slot: u32) -> u64 {
        let (key, entry) = self.table.remove(slot);
        self.used -= entry.charge;
        key
    }

    /// Removes the units whose last access has passed, reporting them.
    fn drop_held(&mut self, victims: &mut Vec<u64>) {
        for at in 0..self.held.len() {
            let key = self.held[at];
            // Still resident and still not accessed again (a caller may
            // have removed it, or given it a next access after all).
            if let Some(slot) = self.table.get(key)
                && self.table.value(slot).next == NEVER
            {
                self.evict(slot);
                victims.push(key);
            }
        }
        self.held.clear();
    }
}

impl Policy for BeladySize {
    fn name(&self) -> &'static str {
        "beladysize"
    }

    fn prefetch(&self, key: u64, ahead: Ahead) {
        self.table.prefetch(key, ahead);
    }

    fn lookup(&mut self, access: &Access) -> bool {
        let Some(slot) = self.table.get(access.key) else {
            return false;
        };
        let next = std::mem::replace(&mut self.table.value_mut(slot).next, access.next);
        if access.next == NEVER && next != NEVER {
            self.held.push(access.key); // once: `held` stays within the residents
        }
        true
    }

    fn admit(&mut self, access: &Access, victims: &mut Vec<u64>) -> bool {
        self.drop_held(victims);
        let charge = self.capacity.charge(access.size);
        if charge > self.capacity.limit() {
            return false;
        }
        debug_assert!(
            self.table.get(access.key).is_none(),
            "admit of a resident key"
        );
        while self.used + charge > self.capacity.limit() {
            let slot = self.victim(access.time);
            victims.push(self.evict(slot));
        }
        if access.next == NEVER {
            return false; // libCacheSim makes the room, then declines
        }
        self.table.insert(
            access.key,
            Entry {
                charge,
                next: access.next,
            },
        );
        self.used += charge;
        true
    }

    fn remove(&mut self, key: u64) -> bool {
        let Some(slot) = self.table.get(key) else {
            return false;
        };
        self.evict(slot);
        true
    }

    fn contains(&self, key: u64) -> bool {
        self.table.get(key).is_some()
    }

    fn len(&self) -> usize {
        self.table.len()
    }

    fn used(&self) -> u64 {
        self.used
    }

    fn capacity(&self) -> Capacity {
        self.capacity
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::libcachesim::{NaiveChains, Version, lcs_rng};
    use crate::rng::{Generator, Rng};
    use crate::testing::{self, Reference};
    use proptest::prelude::*;

    /// The residents of the naive model, drawn from as each sampler draws.
    enum NaiveTable {
        /// libCacheSim's chains.
        Chains(NaiveChains<(u64, u64)>),
        /// Cairn's sampler as plainly as it can be said: the residents in a
        /// vector (a removal moves the last into the hole, an insert
        /// appends), a draw the high half of `r × len` of the next Lehmer64
        /// number.
        Members(Vec<(u64, (u64, u64))>, Rng),
    }

    impl NaiveTable {
        fn find(&mut self, key: u64) -> Option<&mut (u64, u64)> {
            match self {
                NaiveTable::Chains(table) => table.find(key),
                NaiveTable::Members(members, _) => {
                    members.iter_mut().find(|m| m.0 == key).map(|m| &mut m.1)
                }
            }
        }

        fn sample(&mut self) -> (u64, (u64, u64)) {
            match self {
                NaiveTable::Chains(table) => table.sample(),
                NaiveTable::Members(members, rng) => {
                    let at = (u128::from(rng.next_u64()) * members.len() as u128) >> 64;
                    members[at as usize]
                }
            }
        }

        fn remove(&mut self, key: u64) {
            match self {
                NaiveTable::Chains(table) => {
                    table.remove(key);
                }
                NaiveTable::Members(members, _) => {
                    let at = members.iter().position(|m| m.0 == key).unwrap();
                    members.swap_remove(at);
                }
            }
        }

        fn insert(&mut self, key: u64, value: (u64, u64)) {
            match self {
                NaiveTable::Chains(table) => table.insert(key, value),
                NaiveTable::Members(members, _) => members.push((key, value)),
            }
        }

        fn used(&self) -> u64 {
            match self {
                NaiveTable::Chains(table) => table.chains.iter().flatten().map(|e| e.1.0).sum(),
                NaiveTable::Members(members, _) => members.iter().map(|m| m.1.0).sum(),
            }
        }
    }

    /// Naive `BeladySize` over either sampler's residents of `(charge,
    /// next)`, scoring with the logarithms directly.
    struct NaiveBeladySize {
        capacity: Capacity,
        n_sample: u32,
        table: NaiveTable,
        /// Hit for the last time: they leave at the next miss.
        last_hit: Vec<u64>,
    }

    impl Reference for NaiveBeladySize {
        fn access(&mut self, access: &Access) -> (bool, Vec<u64>) {
            if let Some(entry) = self.table.find(access.key) {
                entry.1 = access.next;
                if access.next == NEVER {
                    self.last_hit.push(access.key);
                }
                return (true, vec![]);
            }
            let mut victims = vec![];
            for key in std::mem::take(&mut self.last_hit) {
                self.table.remove(key);
                victims.push(key);
            }
            let charge = self.capacity.charge(access.size);
            if charge > self.capacity.limit() {
                return (false, victims);
            }
            while self.table.used() + charge > self.capacity.limit() {
                let mut chosen = None;
                let mut last = 0;
                for _ in 0..MAX_ROUNDS {
                    let mut best: (f64, Option<u64>) = (-1.0, None);
                    for _ in 0..self.n_sample {
                        let (key, (charge, next)) = self.table.sample();
                        last = key;
                        let score =
                            (charge as f64).ln() + ((next as i64 - access.time as i64) as f64).ln();
                        if score > best.0 {
                            best = (score, Some(key));
                        }
                    }
                    chosen = best.1;
                    if chosen.is_some() {
                        break;
                    }
                }
                let key = chosen.unwrap_or(last);
                self.table.remove(key);
                victims.push(key);
            }
            if access.next != NEVER {
                self.table.insert(access.key, (charge, access.next));
            }
            (false, victims)
        }
    }

    fn beladysize(
        capacity: Capacity,
        n_sample: u32,
        version: SamplerVersion,
        seed: u64,
        power: u32,
    ) -> BeladySize {
        let config = BeladySizeConfig {
            n_sample,
            version,
            seed: Some(seed),
            hash_power: version.libcachesim().map(|_| power),
        };
        BeladySize::new(capacity, &config).unwrap()
    }

    /// An access of `key` (size `size`) at `time` whose key comes back at `next`.
    fn at(key: u64, size: u32, time: u64, next: u64) -> Access {
        Access {
            next,
            ..Access::read(key, size, time)
        }
    }

    #[test]
    fn the_largest_size_times_distance_goes() {
        // 10 bytes: 1 (4 bytes, back in 10), 2 (2 bytes, back in 30: 60),
        // 3 (4 bytes, back in 12: 48). 4 needs 4 bytes: 2 goes, though 1
        // is as large and 3 comes back later per byte.
        let mut cache = beladysize(Capacity::Bytes(10), 64, SamplerVersion::V0_3_5, 1, 2);
        let mut victims = vec![];
        for access in [at(1, 4, 0, 10), at(2, 2, 1, 31), at(3, 4, 2, 14)] {
            assert!(!cache.access(&access, &mut victims));
        }
        assert!(victims.is_empty());
        assert!(!cache.access(&at(4, 2, 3, 5), &mut victims));
        assert_eq!(victims, [2]);
        // Next 4 bytes: 3 (4 × 10 = 40) over 1 (4 × 6 = 24) and 4 (2 × 1).
        victims.clear();
        assert!(!cache.access(&at(5, 4, 4, 20), &mut victims));
        assert_eq!(victims, [3]);
    }

    #[test]
    fn units_never_accessed_again_do_not_stay() {
        let mut cache = beladysize(Capacity::Objects(2), 8, SamplerVersion::V0_3_5, 1, 2);
        let mut victims = vec![];
        cache.access(&at(1, 1, 0, 3), &mut victims);
        cache.access(&at(2, 1, 1, 4), &mut victims);
        // 3 is never seen again: room is made for it (2, farther, goes),
        // then it is not kept.
        assert!(!cache.admit(&at(3, 1, 2, NEVER), &mut victims));
        assert_eq!(victims, [2]);
        assert!(!cache.contains(3) && cache.len() == 1);
        // The last hit on 1 lets it go at the next admission, before any
        // eviction: 5 and 6 both fit.
        victims.clear();
        assert!(cache.access(&at(1, 1, 3, NEVER), &mut victims));
        assert!(victims.is_empty() && cache.contains(1));
        assert!(cache.admit(&at(5, 1, 4, 9), &mut victims));
        assert_eq!(victims, [1]);
        assert!(cache.admit(&at(6, 1, 5, 8), &mut victims));
        assert_eq!(victims, [1], "5 and 6 fit");
        // A refused admission changes nothing: 6 stays until an admission.
        victims.clear();
        assert!(cache.lookup(&at(6, 1, 8, NEVER)));
        cache.take_held_victims(&mut victims);
        assert!(victims.is_empty() && cache.contains(6));
        assert!(cache.admit(&at(7, 1, 10, 11), &mut victims));
        assert_eq!(victims, [6]);
        assert!(!cache.contains(6) && cache.used() == 2);
    }

    #[test]
    fn equal_products_order_as_their_logarithm_sums() {
        // size × distance equal, factors different: libCacheSim's
        // ln(size) + ln(distance) decides by rounding, and so must we.
        let mut rounding_decided = 0;
        for (a, b, c, d) in [
            (4096u64, 6i64, 8192u64, 3i64),
            (512, 90, 1536, 30),
            (3, 7, 7, 3),
            (65536, 10, 2560, 256),
            (6144, 1000, 1024, 6000),
            (5, 1, 1, 5),
        ] {
            assert_eq!(u128::from(a) * b as u128, u128::from(c) * d as u128);
            let mut best = (u128::from(a) * b as u128, None, a, b);
            let expected = log_score(c, d) > log_score(a, b);
            rounding_decided += usize::from(expected);
            assert_eq!(beats(c, d, &mut best), expected, "{a}×{b} then {c}×{d}");
        }
        assert!(
            rounding_decided > 0,
            "some pair is ordered by rounding alone"
        );
        // Far apart, the product decides; non-positive distances never win.
        let mut best = (100, None, 10, 10);
        assert!(beats(1, 101, &mut best) && !beats(1, 99, &mut best));
        assert!(!beats(5, 0, &mut best) && !beats(5, -3, &mut best) && !beats(0, 500, &mut best));
    }

    #[test]
    fn knobs_are_checked() {
        let bad = |n_sample, version, hash_power, seed| {
            let config = BeladySizeConfig {
                n_sample,
                version,
                seed,
                hash_power,
            };
            BeladySize::new(Capacity::Objects(1), &config).is_err()
        };
        let (cairn, lcs) = (SamplerVersion::Cairn, SamplerVersion::V0_3_5);
        for version in [cairn, lcs] {
            assert!(bad(0, version, None, None) && bad(1025, version, None, None));
            assert!(bad(128, version, None, Some(0)) && !bad(1, version, None, Some(1)));
        }
        assert!(bad(128, lcs, Some(0), None) && bad(128, lcs, Some(32), None));
        assert!(!bad(128, lcs, Some(1), None) && !bad(128, lcs, None, None));
        assert!(
            bad(128, cairn, Some(24), None),
            "hash_power sizes libCacheSim's table only"
        );
    }

    proptest! {
        #[test]
        fn matches_naive_model(trace in testing::trace_strategy(40, 400, 5), cap in 1u64..20, bytes: bool, seed in 1u64.., power in 1u32..8, n_sample in 1u32..8, old: bool) {
            let capacity = if bytes { Capacity::Bytes(cap) } else { Capacity::Objects(cap) };
            let (version, lcs) = if old {
                (SamplerVersion::Aa0fc40, Version::Aa0fc40)
            } else {
                (SamplerVersion::V0_3_5, Version::V0_3_5)
            };
            let table = NaiveTable::Chains(NaiveChains::new(power, lcs, lcs_rng(lcs, Some(seed))));
            let mut naive = NaiveBeladySize { capacity, n_sample, table, last_hit: vec![] };
            testing::assert_matches_reference(&mut beladysize(capacity, n_sample, version, seed, power), &mut naive, &trace);
            testing::replay_checked(&mut beladysize(capacity, n_sample, version, seed, power), &trace);
            let cairn = SamplerVersion::Cairn;
            let table = NaiveTable::Members(vec![], Rng::new(Generator::Lehmer64, seed));
            let mut naive = NaiveBeladySize { capacity, n_sample, table, last_hit: vec![] };
            testing::assert_matches_reference(&mut beladysize(capacity, n_sample, cairn, seed, power), &mut naive, &trace);
            testing::replay_checked(&mut beladysize(capacity, n_sample, cairn, seed, power), &trace);
        }
    }
}
