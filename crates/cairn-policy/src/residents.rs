//! [`Residents`]: the resident units of a sampling policy, found by key and
//! drawn uniformly at random in O(1).
//!
//! Policies that evict from a random sample (`random`, `hyperbolic`) need two
//! things of their table: a lookup by key on every request and a uniform draw
//! over the residents on every eviction. libCacheSim draws from its chained
//! hash table (a random bucket until one is non-empty, then an entry of its
//! chain), which costs a chain of dependent memory reads per draw and is not
//! uniform over residents; [`crate::libcachesim::ChainedTable`] replicates it
//! for exact agreement. This is Cairn's own table:
//!
//! - the units live in the slots of one open-addressing table (linear
//!   probing, at most three quarters full), each slot holding the key, its
//!   hash tag and the value, so a lookup compares keys in the slot it lands
//!   on and reads nothing else;
//! - a dense array holds the slot of every resident, and each slot its
//!   position there, so a draw is one random number mapped onto the array
//!   (Lemire's multiply-shift, no division). Removal swaps the last member
//!   into the hole and closes the gap in the table by shifting later slots
//!   back (no tombstones), updating the array for every slot it moves; the
//!   victim's slot is already known, so removal hashes nothing;
//! - a sample of many draws ([`SampledTable::sample_into`]) starts loading
//!   every slot before reading any, so the cache misses overlap instead of
//!   following one another; the generator's numbers are drawn four ahead, so
//!   the next sample's slots are loading while the accesses in between are
//!   served.
//!
//! The array's order depends only on the order of inserts and removals, so a
//! draw picks the same resident whatever the table's layout or size.
//!
//! A slot number stays valid until the next insert or removal (a removal
//! may shift other slots back; growth moves them all).
//!
//! Growth of the table and the array are the only allocations; a cache in
//! its steady state allocates nothing.

use hashbrown::DefaultHashBuilder;
use serde::{Deserialize, Serialize};
use std::hash::BuildHasher;

use crate::hint::prefetch;
use crate::libcachesim::{ChainedTable, Version, lcs_rng};
use crate::rng::{Generator, Rng};
use crate::{Ahead, ConfigError};

/// A slot of the table: a resident, or empty (`pos == EMPTY`).
#[derive(Clone, Copy, Debug, Default)]
struct Slot<T> {
    key: u64,
    /// The high half of the key's hash; its low bits are the home slot.
    tag: u32,
    /// Where this slot's number sits in [`Residents::members`]; `EMPTY` for
    /// an empty slot.
    pos: u32,
    value: T,
}

/// `Slot::pos` of an empty slot.
const EMPTY: u32 = u32::MAX;

/// Slots of a new table.
const INITIAL_SLOTS: usize = 16;

/// Resident units with a value each, by key and by uniform draw.
#[derive(Debug)]
pub struct Residents<T> {
    slots: Box<[Slot<T>]>,
    mask: usize,
    /// The slot of every resident, in no order.
    members: Vec<u32>,
    hasher: DefaultHashBuilder,
}

impl<T: Copy + Default> Default for Residents<T> {
    fn default() -> Self {
        Self {
            slots: empty_slots(INITIAL_SLOTS),
            mask: INITIAL_SLOTS - 1,
            members: Vec::new(),
            hasher: DefaultHashBuilder::default(),
        }
    }
}

fn empty_slots<T: Copy + Default>(n: usize) -> Box<[Slot<T>]> {
    let empty = Slot {
        pos: EMPTY,
        ..Slot::default()
    };
    vec![empty; n].into_boxed_slice()
}

/// A uniform draw in `0..len` from one 64-bit number (Lemire's
/// multiply-shift: the high half of `r × len`). `len` must be non-zero.
#[inline]
fn below(r: u64, len: usize) -> usize {
    ((u128::from(r) * len as u128) >> 64) as usize
}

impl<T: Copy + Default> Residents<T> {
    #[inline]
    fn tag(&self, key: u64) -> u32 {
        (self.hasher.hash_one(key) >> 32) as u32
    }

    #[inline]
    fn home(&self, tag: u32) -> usize {
        tag as usize & self.mask
    }

    /// The slot holding `key`, if it is resident.
    #[inline]
    pub fn get(&self, key: u64) -> Option<u32> {
        let mut at = self.home(self.tag(key));
        loop {
            let slot = &self.slots[at];
            if slot.pos == EMPTY {
                return None;
            }
            if slot.key == key {
                return Some(at as u32);
            }
            at = (at + 1) & self.mask;
        }
    }

    /// Adds `key`, which must not be resident, with `value`; returns its
    /// slot.
    pub fn insert(&mut self, key: u64, value: T) -> u32 {
        debug_assert!(self.get(key).is_none(), "insert of a resident key");
        if (self.members.len() + 1) * 4 > self.slots.len() * 3 {
            self.grow();
        }
        let pos = u32::try_from(self.members.len())
            .ok()
            .filter(|&pos| pos != EMPTY)
            .expect("fewer than 2^32 - 1 residents");
        let tag = self.tag(key);
        let at = self.vacancy(tag);
        self.slots[at] = Slot {
            key,
            tag,
            pos,
            value,
        };
        self.members.push(at as u32);
        at as u32
    }

    /// The first empty slot from `tag`'s home on.
    #[inline]
    fn vacancy(&self, tag: u32) -> usize {
        let mut at = self.home(tag);
        while self.slots[at].pos != EMPTY {
            at = (at + 1) & self.mask;
        }
        at
    }

    /// Removes the unit in `slot`; returns its key and value.
    pub fn remove(&mut self, slot: u32) -> (u64, T) {
        let mut hole = slot as usize;
        let gone = self.slots[hole];
        debug_assert_ne!(gone.pos, EMPTY, "removal of an empty slot");
        let last = self.members.pop().expect("a resident slot");
        if last as usize != hole {
            self.members[gone.pos as usize] = last;
            self.slots[last as usize].pos = gone.pos;
        }
        // Close the gap: shift back every later slot of the run whose home
        // is not between the hole and itself.
        let mut at = hole;
        loop {
            at = (at + 1) & self.mask;
            let moved = self.slots[at];
            if moved.pos == EMPTY {
                break;
            }
            let home = self.home(moved.tag);
            if (at.wrapping_sub(home) & self.mask) >= (at.wrapping_sub(hole) & self.mask) {
                self.slots[hole] = moved;
                self.members[moved.pos as usize] = hole as u32;
                hole = at;
            }
        }
        self.slots[hole].pos = EMPTY;
        (gone.key, gone.value)
    }

    #[cold]
    fn grow(&mut self) {
        let size = self.slots.len() * 2;
        let old = std::mem::replace(&mut self.slots, empty_slots(size));
        self.mask = size - 1;
        // Members keep their positions, so draws are unchanged.
        for at in 0..self.members.len() {
            let slot = old[self.members[at] as usize];
            let new = self.vacancy(slot.tag);
            self.slots[new] = slot;
            self.members[at] = new as u32;
        }
    }

    /// The key in `slot`.
    #[inline]
    pub fn key(&self, slot: u32) -> u64 {
        self.slots[slot as usize].key
    }

    /// The value in `slot`.
    #[inline]
    pub fn value(&self, slot: u32) -> &T {
        &self.slots[slot as usize].value
    }

    /// The value in `slot`, mutably.
    #[inline]
    pub fn value_mut(&mut self, slot: u32) -> &mut T {
        &mut self.slots[slot as usize].value
    }

    /// Number of residents.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether nothing is resident.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// The resident that the draw `r` (uniform over `u64`) picks now, or
    /// `None` if there is none.
    #[inline]
    pub fn pick(&self, r: u64) -> Option<u32> {
        let len = self.members.len();
        (len > 0).then(|| self.members[below(r, len)])
    }

    /// Starts loading the slot the draw `r` picks now. The residents may
    /// change before the draw is used; a stale guess costs a wasted load,
    /// nothing else.
    #[inline]
    pub fn warm(&self, r: u64) {
        if let Some(at) = self.pick(r) {
            prefetch(&self.slots[at as usize]);
        }
    }

    /// The replay's hint for `key`: far ahead, start loading its home slot;
    /// nearer, the line after it, where a probe may run on. Nothing is
    /// relinked on a hit, so `Next` does nothing.
    #[inline]
    pub fn prefetch(&self, key: u64, ahead: Ahead) {
        let home = self.home(self.tag(key));
        match ahead {
            Ahead::Far => prefetch(&self.slots[home]),
            Ahead::Near => {
                let line = 64 / std::mem::size_of::<Slot<T>>().max(1);
                prefetch(&self.slots[(home + line.max(1)) & self.mask]);
            }
            Ahead::Next => {}
        }
    }
}

/// Whose table a sampling policy draws its victims from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum SamplerVersion {
    /// Cairn's [`Residents`]: uniform over residents, O(1) a draw, from a
    /// Lehmer64 generator (default seed `0xdeadbeef`).
    #[default]
    #[serde(rename = "cairn")]
    Cairn,
    /// libCacheSim 0.3.5's table and generator, victim for victim.
    #[serde(rename = "0.3.5")]
    V0_3_5,
    /// libCacheSim aa0fc40's (`cachesim`), victim for victim.
    #[serde(rename = "aa0fc40")]
    Aa0fc40,
}

impl SamplerVersion {
    /// The libCacheSim version replicated, if any.
    pub const fn libcachesim(self) -> Option<Version> {
        match self {
            SamplerVersion::Cairn => None,
            SamplerVersion::V0_3_5 => Some(Version::V0_3_5),
            SamplerVersion::Aa0fc40 => Some(Version::Aa0fc40),
        }
    }
}

/// libCacheSim's `Random` and `Hyperbolic` tables start with `2^16` buckets
/// (`max(12, hashpower − 8)` of the wheel's `hashpower = 24`).
pub const DEFAULT_HASH_POWER: u32 = 16;

/// Checks a `hash_power` knob (a libCacheSim table of `2^power` buckets).
pub(crate) fn check_hash_power(policy: &'static str, power: u32) -> Result<(), ConfigError> {
    if (1..=31).contains(&power) {
        Ok(())
    } else {
        Err(ConfigError::OutOfRange {
            policy,
            parameter: "hash_power",
            value: power.to_string(),
            expected: "1 to 31",
        })
    }
}

/// The residents of a sampling policy in the table `version` names.
#[derive(Debug)]
pub enum SampledTable<T> {
    /// Cairn's table and generator.
    Cairn {
        /// The residents.
        residents: Residents<T>,
        /// The generator of the draws.
        rng: Rng,
        /// The generator's next four numbers, drawn early (and used in
        /// order, so the draws are the generator's sequence) so the victims
        /// they pick can be loaded before they are needed.
        ahead: [u64; AHEAD],
    },
    /// libCacheSim's chained table with its own generator.
    Libcachesim(ChainedTable<T>),
}

/// Numbers a [`SampledTable::Cairn`] draws ahead, so the slots of the next
/// draws are loading before they are used.
const AHEAD: usize = 4;

/// Uses up the oldest number drawn ahead and draws one more behind the rest.
#[inline]
fn next_ahead(ahead: &mut [u64; AHEAD], rng: &mut Rng) {
    ahead.rotate_left(1);
    ahead[AHEAD - 1] = rng.next_u64();
}

impl<T: Copy + Default> SampledTable<T> {
    /// An empty table, after checking the knobs: a Lehmer64 `seed` must not
    /// be 0, `hash_power` (libCacheSim's tables only; unset = 16) must be 1
    /// to 31.
    pub fn new(
        policy: &'static str,
        version: SamplerVersion,
        seed: Option<u64>,
        hash_power: Option<u32>,
    ) -> Result<Self, ConfigError> {
        let lehmer = !matches!(version, SamplerVersion::Aa0fc40);
        if lehmer && seed == Some(0) {
            return Err(ConfigError::OutOfRange {
                policy,
                parameter: "seed",
                value: "0".into(),
                expected: "non-zero with version cairn or 0.3.5 (lehmer64)",
            });
        }
        let Some(lcs) = version.libcachesim() else {
            if let Some(power) = hash_power {
                return Err(ConfigError::OutOfRange {
                    policy,
                    parameter: "hash_power",
                    value: power.to_string(),
                    expected: "unset with version cairn (it sizes libCacheSim's table only)",
                });
            }
            let generator = Generator::Lehmer64;
            let mut rng = Rng::new(generator, seed.unwrap_or(generator.default_seed()));
            let ahead = std::array::from_fn(|_| rng.next_u64());
            return Ok(SampledTable::Cairn {
                residents: Residents::default(),
                rng,
                ahead,
            });
        };
        let power = hash_power.unwrap_or(DEFAULT_HASH_POWER);
        check_hash_power(policy, power)?;
        Ok(SampledTable::Libcachesim(ChainedTable::new(
            power,
            lcs,
            lcs_rng(lcs, seed),
        )))
    }

    /// The slot holding `key`, if it is resident.
    #[inline]
    pub fn get(&self, key: u64) -> Option<u32> {
        match self {
            SampledTable::Cairn { residents, .. } => residents.get(key),
            SampledTable::Libcachesim(table) => table.get(key),
        }
    }

    /// Adds `key`, which must not be resident.
    #[inline]
    pub fn insert(&mut self, key: u64, value: T) {
        match self {
            SampledTable::Cairn { residents, .. } => {
                residents.insert(key, value);
            }
            SampledTable::Libcachesim(table) => {
                table.insert(key, value);
            }
        }
    }

    /// Removes the unit in `slot`; returns its key and value.
    #[inline]
    pub fn remove(&mut self, slot: u32) -> (u64, T) {
        match self {
            SampledTable::Cairn { residents, .. } => residents.remove(slot),
            SampledTable::Libcachesim(table) => table.remove(slot),
        }
    }

    /// The value in `slot`.
    #[inline]
    pub fn value(&self, slot: u32) -> &T {
        match self {
            SampledTable::Cairn { residents, .. } => residents.value(slot),
            SampledTable::Libcachesim(table) => table.value(slot),
        }
    }

    /// The value in `slot`, mutably.
    #[inline]
    pub fn value_mut(&mut self, slot: u32) -> &mut T {
        match self {
            SampledTable::Cairn { residents, .. } => residents.value_mut(slot),
            SampledTable::Libcachesim(table) => table.value_mut(slot),
        }
    }

    /// Number of residents.
    pub fn len(&self) -> usize {
        match self {
            SampledTable::Cairn { residents, .. } => residents.len(),
            SampledTable::Libcachesim(table) => table.len(),
        }
    }

    /// Whether nothing is resident.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// One random resident, or `None` if there is none. Cairn's table
    /// starts loading the slot of the draw after next
    /// ([`Residents::warm`]).
    #[inline]
    pub fn sample(&mut self) -> Option<u32> {
        match self {
            SampledTable::Cairn {
                residents,
                rng,
                ahead,
            } => {
                let picked = residents.pick(ahead[0])?;
                next_ahead(ahead, rng);
                residents.warm(ahead[1]);
                Some(picked)
            }
            SampledTable::Libcachesim(table) => table.sample(),
        }
    }

    /// Fills `out` with random residents (repeats possible), in draw order;
    /// leaves it as it was if nothing is resident. Cairn's table starts
    /// loading every drawn slot before returning.
    #[inline]
    pub fn sample_into(&mut self, out: &mut [u32]) {
        match self {
            SampledTable::Cairn {
                residents,
                rng,
                ahead,
            } => {
                if residents.is_empty() {
                    return;
                }
                // The numbers drawn ahead first, then the generator's; then
                // as many drawn ahead again as were used.
                let used = out.len().min(AHEAD);
                for (at, slot) in out.iter_mut().enumerate() {
                    let r = if at < used { ahead[at] } else { rng.next_u64() };
                    let index = residents.pick(r).expect("residents");
                    prefetch(&residents.slots[index as usize]);
                    *slot = index;
                }
                ahead.copy_within(used.., 0);
                for r in &mut ahead[AHEAD - used..] {
                    *r = rng.next_u64();
                }
                // The next sample's first two draws.
                residents.warm(ahead[0]);
                residents.warm(ahead[1]);
            }
            SampledTable::Libcachesim(table) => {
                for slot in out {
                    match table.sample() {
                        Some(drawn) => *slot = drawn,
                        None => return,
                    }
                }
            }
        }
    }

    /// The replay's hint for `key` (Cairn's table; libCacheSim's chains
    /// are not prefetched).
    #[inline]
    pub fn prefetch(&self, key: u64, ahead: Ahead) {
        if let SampledTable::Cairn { residents, .. } = self {
            residents.prefetch(key, ahead);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;
    use proptest::prelude::*;
    use std::collections::HashMap;

    #[test]
    fn draws_are_uniform_over_residents() {
        let mut residents = Residents::default();
        for key in 0..100u64 {
            residents.insert(key * 1000, key);
        }
        // Remove every third so the array has been reshuffled by swaps.
        for key in (0..100u64).step_by(3) {
            let index = residents.get(key * 1000).unwrap();
            assert_eq!(residents.remove(index), (key * 1000, key));
        }
        let mut rng = Rng::new(Generator::Lehmer64, 7);
        let mut counts: HashMap<u64, u32> = HashMap::new();
        let draws = 200_000;
        for _ in 0..draws {
            let index = residents.pick(rng.next_u64()).unwrap();
            *counts.entry(residents.key(index)).or_default() += 1;
        }
        assert_eq!(counts.len(), residents.len(), "every resident drawn");
        let expected = f64::from(draws) / residents.len() as f64;
        for (key, &n) in &counts {
            assert!(key % 3000 != 0, "removed key {key} drawn");
            let off = (f64::from(n) - expected).abs() / expected;
            assert!(off < 0.1, "key {key}: {n} draws, expected {expected:.0}");
        }
    }

    #[test]
    fn a_sample_draws_only_residents() {
        let mut table = SampledTable::new("t", SamplerVersion::Cairn, Some(7), None).unwrap();
        let mut batch = [u32::MAX; 4];
        table.sample_into(&mut batch);
        assert_eq!(batch, [u32::MAX; 4], "an empty table draws nothing");
        for key in 0..100u64 {
            table.insert(key * 1000, key);
        }
        for key in (0..100u64).step_by(3) {
            let slot = table.get(key * 1000).unwrap();
            table.remove(slot);
        }
        let mut drawn = HashMap::new();
        for _ in 0..1000 {
            let mut batch = [0; 2];
            table.sample_into(&mut batch);
            for slot in batch {
                let key = *drawn.entry(slot).or_insert(*table.value(slot));
                assert!(key % 3 != 0, "removed key {key} drawn");
            }
        }
        assert_eq!(drawn.len(), table.len(), "every resident drawn");
    }

    #[test]
    fn numbers_drawn_ahead_are_used_in_the_generators_order() {
        let mut table = SampledTable::new("t", SamplerVersion::Cairn, Some(7), None).unwrap();
        let mut twin: Residents<u64> = Residents::default();
        for key in 0..50u64 {
            table.insert(key, key);
            twin.insert(key, key);
        }
        let mut rng = Rng::new(Generator::Lehmer64, 7);
        let mut expected = || *twin.value(twin.pick(rng.next_u64()).unwrap());
        for round in 0..20 {
            let mut batch = [0; 3];
            table.sample_into(&mut batch[..=round % 3]);
            for &slot in &batch[..=round % 3] {
                assert_eq!(*table.value(slot), expected(), "round {round}");
            }
            let one = table.sample().unwrap();
            assert_eq!(*table.value(one), expected(), "round {round}");
        }
    }

    #[test]
    fn an_empty_table_draws_nothing() {
        let residents: Residents<u8> = Residents::default();
        let mut rng = Rng::new(Generator::Lehmer64, 1);
        assert_eq!(residents.pick(rng.next_u64()), None);
    }

    proptest! {
        /// Inserts and removals keep the index, the values and the dense
        /// array consistent with a `HashMap`.
        #[test]
        fn matches_a_hash_map(ops in prop::collection::vec((0u64..50, any::<bool>()), 0..400)) {
            let mut residents = Residents::default();
            let mut model: HashMap<u64, u64> = HashMap::new();
            for (step, (key, add)) in ops.into_iter().enumerate() {
                match (residents.get(key), add) {
                    (None, true) => {
                        residents.insert(key, step as u64);
                        model.insert(key, step as u64);
                    }
                    (Some(index), false) => {
                        let (k, v) = residents.remove(index);
                        prop_assert_eq!((k, Some(v)), (key, model.remove(&key)));
                    }
                    (found, _) => prop_assert_eq!(found.is_some(), model.contains_key(&key)),
                }
                prop_assert_eq!(residents.len(), model.len());
            }
            let mut members: Vec<u64> = residents.members.iter().map(|&i| residents.key(i)).collect();
            members.sort_unstable();
            let mut keys: Vec<u64> = model.keys().copied().collect();
            keys.sort_unstable();
            prop_assert_eq!(members, keys);
            for (key, value) in model {
                let index = residents.get(key).unwrap();
                prop_assert_eq!(*residents.value(index), value);
                prop_assert_eq!(residents.members[residents.slots[index as usize].pos as usize], index);
            }
        }
    }
}
