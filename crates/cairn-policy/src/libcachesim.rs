//! libCacheSim's own data structures, replicated so that policies whose
//! choices depend on them (ties in a heap, random samples of a hash table)
//! make the same choices as libCacheSim, victim for victim.
//!
//! - [`LcsRng`]: libCacheSim's generator ([`crate::rng`]), in two versions ([`Version`]). At
//!   commit aa0fc40, `next_rand()` of `utils/include/mymath.h`: Knuth's MMIX
//!   linear congruential generator, one thread-local 64-bit state, 0 in a
//!   new thread (`cachesim` sets it to 0 before each run). In the 0.3.5
//!   wheel (read from its machine code; its source is not published with
//!   it): Lemire's `lehmer64`, a thread-local 128-bit state starting at
//!   `0xdeadbeef`, multiplied by `0xda942042e4dd58b5`, the high 64 bits
//!   returned. The wheel never reseeds it, so its first run in a process
//!   starts from `0xdeadbeef` and later runs continue where earlier ones
//!   left it.
//! - [`xxh3_u64`]: `get_hash_value_int_64`, XXH3-64 of the 8-byte key
//!   (libCacheSim's default `HASH_TYPE`, both versions).
//! - [`ChainedTable`]: `chainedHashTableV2.c`, the per-cache hash table: a
//!   power-of-two array of chains, new keys at a chain's head, rebuilt by
//!   re-inserting each old chain head first (so its order reverses). Its
//!   random sample (`hashtable_rand_obj`) is what the sampling policies
//!   evict from. aa0fc40: the table doubles when it holds more keys than
//!   buckets before an insert; a sample draws buckets until one is not
//!   empty and takes that chain's head. 0.3.5: it doubles at more than
//!   twice as many keys as buckets; a sample halves the table after each
//!   draw past the 32nd that finds an empty bucket, and once a bucket is
//!   found draws once more and takes the chain's entry at that number
//!   modulo the chain's length.
//! - [`PQueue`]: `dataStructure/pqueue.c`, a 1-based binary max-heap with
//!   strict comparisons, so equal priorities stay where they are.
//!
//! Nothing here allocates once the structures have grown to the cache's
//! size (a 0.3.5 table that halves while sampling allocates its smaller
//! bucket array then, as libCacheSim does).

use serde::{Deserialize, Serialize};

use crate::rng::{Generator, Rng};

/// Which libCacheSim the sampling structures follow.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Version {
    /// The `libcachesim` 0.3.5 Python wheel (the current release).
    #[default]
    #[serde(rename = "0.3.5")]
    V0_3_5,
    /// Commit aa0fc40 (`cachesim`).
    #[serde(rename = "aa0fc40")]
    Aa0fc40,
}

impl Version {
    /// The random generator this version draws from.
    pub const fn generator(self) -> Generator {
        match self {
            Version::V0_3_5 => Generator::Lehmer64,
            Version::Aa0fc40 => Generator::Mmix,
        }
    }
}

/// libCacheSim's random generator as `version` has it ([`crate::rng`]).
pub type LcsRng = Rng;

/// The generator of `version`, starting from `seed`, or from the state a
/// fresh libCacheSim thread has (0 for aa0fc40, `0xdeadbeef` for 0.3.5). A
/// 0.3.5 seed must not be 0 (`lehmer64` would stay at 0; `check_seed`).
pub fn lcs_rng(version: Version, seed: Option<u64>) -> LcsRng {
    let generator = version.generator();
    Rng::new(generator, seed.unwrap_or(generator.default_seed()))
}

/// Checks the `seed` knob of a sampling policy for `version`.
pub(crate) fn check_seed(
    policy: &'static str,
    version: Version,
    seed: Option<u64>,
) -> Result<(), crate::ConfigError> {
    if version == Version::V0_3_5 && seed == Some(0) {
        return Err(crate::ConfigError::OutOfRange {
            policy,
            parameter: "seed",
            value: "0".into(),
            expected: "non-zero with version 0.3.5 (lehmer64)",
        });
    }
    Ok(())
}

/// XXH3-64 (seed 0, default secret) of `key`'s 8 little-endian bytes: the
/// 4-to-8-byte path of `XXH3_64bits`.
#[inline]
pub fn xxh3_u64(key: u64) -> u64 {
    // Bytes 8..16 and 16..24 of XXH3's default secret, little-endian.
    const SECRET_8: u64 = 0x1cad_21f7_2c81_017c;
    const SECRET_16: u64 = 0xdb97_9083_e96d_d4de;
    const PRIME_MX2: u64 = 0x9fb2_1c65_1e98_df25;
    let low = key & 0xffff_ffff; // the first 4 bytes
    let high = key >> 32; // the last 4
    let input = high.wrapping_add(low << 32);
    let mut h = input ^ (SECRET_8 ^ SECRET_16);
    // rrmxmx
    h ^= h.rotate_left(49) ^ h.rotate_left(24);
    h = h.wrapping_mul(PRIME_MX2);
    h ^= (h >> 35).wrapping_add(8);
    h = h.wrapping_mul(PRIME_MX2);
    h ^ (h >> 28)
}

/// No entry.
const NIL: u32 = u32::MAX;

#[derive(Clone, Copy, Debug)]
struct TableEntry<V> {
    key: u64,
    hash: u64,
    next: u32,
    value: V,
}

/// libCacheSim's chained hash table, holding a `V` per key, with its random
/// sample and its generator. Entries are addressed by a stable slot number.
#[derive(Clone, Debug)]
pub struct ChainedTable<V> {
    version: Version,
    rng: LcsRng,
    mask: u64,
    heads: Vec<u32>,
    /// Entries per bucket (0.3.5's sample picks by chain length).
    lengths: Vec<u32>,
    /// One bit per bucket: whether its chain is non-empty. Sampling draws
    /// buckets until it hits one, and a 64-times smaller bitmap stays in the
    /// nearest cache where the chain heads would not.
    occupied: Vec<u64>,
    entries: Vec<TableEntry<V>>,
    free: Vec<u32>,
    len: usize,
}

impl<V: Copy> ChainedTable<V> {
    /// An empty table of `2^power` buckets (`power` in 1..=31) sampling
    /// with `rng`.
    pub fn new(power: u32, version: Version, rng: LcsRng) -> Self {
        assert!((1..=31).contains(&power), "table power {power}");
        let buckets = 1usize << power;
        Self {
            version,
            rng,
            mask: buckets as u64 - 1,
            heads: vec![NIL; buckets],
            lengths: vec![0; buckets],
            occupied: vec![0; buckets.div_ceil(64)],
            entries: Vec::new(),
            free: Vec::new(),
            len: 0,
        }
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Number of buckets.
    pub fn buckets(&self) -> usize {
        self.heads.len()
    }

    /// The slot holding `key`.
    #[inline]
    pub fn get(&self, key: u64) -> Option<u32> {
        let mut at = self.heads[(xxh3_u64(key) & self.mask) as usize];
        while at != NIL {
            let entry = &self.entries[at as usize];
            if entry.key == key {
                return Some(at);
            }
            at = entry.next;
        }
        None
    }

    /// Inserts `key` (not present) at its chain's head; returns its slot.
    pub fn insert(&mut self, key: u64, value: V) -> u32 {
        debug_assert!(self.get(key).is_none(), "insert of a present key");
        let per_bucket = match self.version {
            Version::Aa0fc40 => 1,
            Version::V0_3_5 => 2,
        };
        if self.len > self.heads.len() * per_bucket {
            self.rebuild(self.heads.len() * 2);
        }
        let entry = TableEntry {
            key,
            hash: xxh3_u64(key),
            next: NIL,
            value,
        };
        let slot = if let Some(slot) = self.free.pop() {
            self.entries[slot as usize] = entry;
            slot
        } else {
            assert!(self.entries.len() < NIL as usize, "table full");
            self.entries.push(entry);
            (self.entries.len() - 1) as u32
        };
        self.link(slot);
        self.len += 1;
        slot
    }

    /// Removes the entry in `slot`; returns its key and value.
    pub fn remove(&mut self, slot: u32) -> (u64, V) {
        let TableEntry {
            key,
            hash,
            next,
            value,
        } = self.entries[slot as usize];
        let bucket = (hash & self.mask) as usize;
        self.lengths[bucket] -= 1;
        if self.heads[bucket] == slot {
            self.heads[bucket] = next;
            if next == NIL {
                self.occupied[bucket / 64] &= !(1 << (bucket % 64));
            }
        } else {
            let mut at = self.heads[bucket];
            while self.entries[at as usize].next != slot {
                at = self.entries[at as usize].next;
                assert_ne!(at, NIL, "slot {slot} is not in its chain");
            }
            self.entries[at as usize].next = next;
        }
        self.free.push(slot);
        self.len -= 1;
        (key, value)
    }

    /// The key in `slot`.
    #[inline]
    pub fn key(&self, slot: u32) -> u64 {
        self.entries[slot as usize].key
    }

    /// The value in `slot`.
    #[inline]
    pub fn value(&self, slot: u32) -> &V {
        &self.entries[slot as usize].value
    }

    /// The value in `slot`, mutably.
    #[inline]
    pub fn value_mut(&mut self, slot: u32) -> &mut V {
        &mut self.entries[slot as usize].value
    }

    /// `hashtable_rand_obj` of the table's [`Version`] (see the module
    /// doc). `None`, drawing nothing, when the table is empty.
    #[inline]
    pub fn sample(&mut self) -> Option<u32> {
        if self.len == 0 {
            return None;
        }
        let mut bucket = self.draw_bucket();
        if self.version == Version::Aa0fc40 {
            while !self.is_occupied(bucket) {
                bucket = self.draw_bucket();
            }
            return Some(self.heads[bucket]);
        }
        let mut misses = 0;
        while !self.is_occupied(bucket) {
            misses += 1;
            if misses > 32 {
                self.rebuild(self.heads.len() / 2);
            }
            bucket = self.draw_bucket();
        }
        let pick = self.rng.next_u64();
        let mut at = self.heads[bucket];
        for _ in 0..pick % u64::from(self.lengths[bucket]) {
            at = self.entries[at as usize].next;
        }
        Some(at)
    }

    /// Iterates the slots in bucket order, each chain from its head
    /// (`hashtable_foreach`).
    pub fn slots(&self) -> impl Iterator<Item = u32> + '_ {
        self.heads.iter().flat_map(move |&head| {
            std::iter::successors((head != NIL).then_some(head), move |&at| {
                let next = self.entries[at as usize].next;
                (next != NIL).then_some(next)
            })
        })
    }

    #[inline]
    fn draw_bucket(&mut self) -> usize {
        (self.rng.next_u64() & self.mask) as usize
    }

    #[inline]
    fn is_occupied(&self, bucket: usize) -> bool {
        self.occupied[bucket / 64] & (1 << (bucket % 64)) != 0
    }

    fn link(&mut self, slot: u32) {
        let bucket = (self.entries[slot as usize].hash & self.mask) as usize;
        self.entries[slot as usize].next = self.heads[bucket];
        self.heads[bucket] = slot;
        self.lengths[bucket] += 1;
        self.occupied[bucket / 64] |= 1 << (bucket % 64);
    }

    /// Moves to `buckets` buckets (a power of two, at least 1), re-linking
    /// every chain of the old table in bucket order, head first (as
    /// libCacheSim's expansion and, in 0.3.5, its shrinking).
    fn rebuild(&mut self, buckets: usize) {
        assert!(
            (1..=1 << 31).contains(&buckets),
            "table of {buckets} buckets"
        );
        let old = std::mem::replace(&mut self.heads, vec![NIL; buckets]);
        self.lengths = vec![0; buckets];
        self.occupied = vec![0; buckets.div_ceil(64)];
        self.mask = buckets as u64 - 1;
        for head in old {
            let mut at = head;
            while at != NIL {
                let next = self.entries[at as usize].next;
                self.link(at);
                at = next;
            }
        }
    }
}

/// A handle to a [`PQueue`] entry, stable until the entry leaves.
pub type PqHandle = u32;

#[derive(Clone, Copy, Debug)]
struct PqSlot<P, T> {
    priority: P,
    value: T,
    position: u32,
}

/// `pqueue.c`: a binary max-heap, 1-based, compared with a strict `<`, so
/// that among equal priorities nothing moves. Insertion appends and bubbles
/// up; `pop` moves the last entry to the top and percolates it down.
#[derive(Clone, Debug)]
pub struct PQueue<P, T> {
    /// `order[0]` is unused, as in `pqueue.c`.
    order: Vec<PqHandle>,
    slots: Vec<PqSlot<P, T>>,
    free: Vec<PqHandle>,
}

impl<P: PartialOrd + Copy, T: Copy> Default for PQueue<P, T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<P: PartialOrd + Copy, T: Copy> PQueue<P, T> {
    /// An empty queue.
    pub fn new() -> Self {
        Self {
            order: vec![NIL],
            slots: Vec::new(),
            free: Vec::new(),
        }
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.order.len() - 1
    }

    /// Whether the queue is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `pqueue_insert`.
    pub fn push(&mut self, priority: P, value: T) -> PqHandle {
        let position = self.order.len() as u32;
        let slot = PqSlot {
            priority,
            value,
            position,
        };
        let handle = if let Some(handle) = self.free.pop() {
            self.slots[handle as usize] = slot;
            handle
        } else {
            assert!(self.slots.len() < NIL as usize, "queue full");
            self.slots.push(slot);
            (self.slots.len() - 1) as PqHandle
        };
        self.order.push(handle);
        self.bubble_up(position as usize);
        handle
    }

    /// `pqueue_peek`: the top entry.
    pub fn peek(&self) -> Option<(PqHandle, P, T)> {
        let &handle = self.order.get(1)?;
        let slot = &self.slots[handle as usize];
        Some((handle, slot.priority, slot.value))
    }

    /// `pqueue_pop`.
    pub fn pop(&mut self) -> Option<(P, T)> {
        let &handle = self.order.get(1)?;
        Some(self.remove(handle))
    }

    /// `pqueue_remove`: the last entry takes the removed one's place and
    /// moves up if it is larger than the removed one, else down.
    pub fn remove(&mut self, handle: PqHandle) -> (P, T) {
        let position = self.position(handle);
        let last = self.order.pop().expect("a present handle");
        let removed = self.slots[handle as usize];
        if position < self.order.len() {
            self.order[position] = last;
            self.slots[last as usize].position = position as u32;
            if removed.priority < self.slots[last as usize].priority {
                self.bubble_up(position);
            } else {
                self.percolate_down(position);
            }
        }
        self.slots[handle as usize].position = NIL;
        self.free.push(handle);
        (removed.priority, removed.value)
    }

    /// `pqueue_change_priority`: up if the priority grew, else down.
    pub fn set_priority(&mut self, handle: PqHandle, priority: P) {
        let position = self.position(handle);
        let old = std::mem::replace(&mut self.slots[handle as usize].priority, priority);
        if old < priority {
            self.bubble_up(position);
        } else {
            self.percolate_down(position);
        }
    }

    /// An entry's priority.
    pub fn priority(&self, handle: PqHandle) -> P {
        self.slots[self.checked(handle)].priority
    }

    /// An entry's value.
    pub fn value(&self, handle: PqHandle) -> T {
        self.slots[self.checked(handle)].value
    }

    /// An entry's value, mutably (it does not affect the order).
    pub fn value_mut(&mut self, handle: PqHandle) -> &mut T {
        let at = self.checked(handle);
        &mut self.slots[at].value
    }

    /// Iterates the entries in heap order (top first, then level by level).
    pub fn iter(&self) -> impl Iterator<Item = (PqHandle, P, T)> + '_ {
        self.order[1..].iter().map(|&h| {
            let slot = &self.slots[h as usize];
            (h, slot.priority, slot.value)
        })
    }

    fn checked(&self, handle: PqHandle) -> usize {
        assert_ne!(
            self.slots[handle as usize].position, NIL,
            "stale queue handle {handle}"
        );
        handle as usize
    }

    fn position(&self, handle: PqHandle) -> usize {
        self.slots[self.checked(handle)].position as usize
    }

    #[inline]
    fn key(&self, position: usize) -> P {
        self.slots[self.order[position] as usize].priority
    }

    fn place(&mut self, position: usize, handle: PqHandle) {
        self.order[position] = handle;
        self.slots[handle as usize].position = position as u32;
    }

    fn bubble_up(&mut self, mut position: usize) {
        let moving = self.order[position];
        let priority = self.slots[moving as usize].priority;
        while position > 1 && self.key(position / 2) < priority {
            self.place(position, self.order[position / 2]);
            position /= 2;
        }
        self.place(position, moving);
    }

    /// The larger child of `position` (the left one among equals), if any.
    fn max_child(&self, position: usize) -> Option<usize> {
        let left = position * 2;
        if left >= self.order.len() {
            return None;
        }
        if left + 1 < self.order.len() && self.key(left) < self.key(left + 1) {
            Some(left + 1)
        } else {
            Some(left)
        }
    }

    fn percolate_down(&mut self, mut position: usize) {
        let moving = self.order[position];
        let priority = self.slots[moving as usize].priority;
        // `pqueue.c` moves down only while strictly smaller than the child.
        while let Some(child) = self.max_child(position) {
            if priority.partial_cmp(&self.key(child)) != Some(std::cmp::Ordering::Less) {
                break;
            }
            self.place(position, self.order[child]);
            position = child;
        }
        self.place(position, moving);
    }
}

/// A naive model of [`ChainedTable`] for the policies' reference models: a
/// vector of chains, each newest first, and the same sampling, written
/// from the C source (aa0fc40) and the wheel's machine code (0.3.5).
#[cfg(test)]
#[derive(Clone, Debug)]
pub(crate) struct NaiveChains<V> {
    /// `(key, value)`, newest first, per bucket.
    pub chains: Vec<Vec<(u64, V)>>,
    version: Version,
    rng: LcsRng,
}

#[cfg(test)]
impl<V: Clone> NaiveChains<V> {
    pub fn new(power: u32, version: Version, rng: LcsRng) -> Self {
        Self {
            chains: vec![Vec::new(); 1 << power],
            version,
            rng,
        }
    }

    fn bucket(&self, key: u64) -> usize {
        (xxh3_u64(key) & (self.chains.len() as u64 - 1)) as usize
    }

    pub fn len(&self) -> usize {
        self.chains.iter().map(Vec::len).sum()
    }

    pub fn find(&mut self, key: u64) -> Option<&mut V> {
        let b = self.bucket(key);
        self.chains[b]
            .iter_mut()
            .find(|e| e.0 == key)
            .map(|e| &mut e.1)
    }

    fn rebuild(&mut self, buckets: usize) {
        let old = std::mem::replace(&mut self.chains, vec![Vec::new(); buckets]);
        for entry in old.into_iter().flatten() {
            let b = self.bucket(entry.0);
            self.chains[b].insert(0, entry);
        }
    }

    pub fn insert(&mut self, key: u64, value: V) {
        let limit = match self.version {
            Version::Aa0fc40 => self.chains.len(),
            Version::V0_3_5 => 2 * self.chains.len(),
        };
        if self.len() > limit {
            self.rebuild(self.chains.len() * 2);
        }
        let b = self.bucket(key);
        self.chains[b].insert(0, (key, value));
    }

    pub fn remove(&mut self, key: u64) -> V {
        let b = self.bucket(key);
        let at = self.chains[b].iter().position(|e| e.0 == key).unwrap();
        self.chains[b].remove(at).1
    }

    /// `hashtable_rand_obj` of either version.
    pub fn sample(&mut self) -> (u64, V) {
        let mut empty_draws = 0;
        loop {
            let b = (self.rng.next_u64() & (self.chains.len() as u64 - 1)) as usize;
            if self.chains[b].is_empty() {
                empty_draws += 1;
                if self.version == Version::V0_3_5 && empty_draws > 32 {
                    self.rebuild(self.chains.len() / 2);
                }
                continue;
            }
            return match self.version {
                Version::Aa0fc40 => self.chains[b][0].clone(),
                Version::V0_3_5 => {
                    let pick = self.rng.next_u64() % self.chains[b].len() as u64;
                    self.chains[b][pick as usize].clone()
                }
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn xxh3_matches_the_c_library() {
        // XXH3_64bits(&id, 8) from libCacheSim's bundled xxhash.h.
        for (key, hash) in [
            (0, 0xc77b_3abb_6f87_acd9),
            (1, 0x2fbc_5935_64db_792e),
            (2, 0x2086_c65c_91ee_e243),
            (12345, 0x9be8_6739_2a73_b1c1),
            (0xdead_beef_cafe_babe, 0xc211_df6b_be7d_a0ad),
        ] {
            assert_eq!(xxh3_u64(key), hash, "key {key}");
        }
    }

    #[test]
    fn the_generators_are_mmix_and_lehmer64() {
        let mut lcg = lcs_rng(Version::Aa0fc40, None);
        assert_eq!(lcg.next_u64(), 1_442_695_040_888_963_407);
        assert_eq!(
            lcg.next_u64(),
            1_442_695_040_888_963_407u64
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407)
        );
        let mut lehmer = lcs_rng(Version::V0_3_5, None);
        let state = 0xdead_beef_u128 * 0xda94_2042_e4dd_58b5;
        assert_eq!(lehmer.next_u64(), (state >> 64) as u64);
        let state = state.wrapping_mul(0xda94_2042_e4dd_58b5);
        assert_eq!(lehmer.next_u64(), (state >> 64) as u64);
        assert!(check_seed("x", Version::V0_3_5, Some(0)).is_err());
        assert!(check_seed("x", Version::Aa0fc40, Some(0)).is_ok());
    }

    #[test]
    fn equal_priorities_stay_put_and_pop_takes_the_last_to_the_top() {
        let mut queue = PQueue::new();
        for value in 1..=5u32 {
            queue.push(1u32, value);
        }
        // Top is the first pushed; a pop moves the last one to the top.
        assert_eq!(queue.pop(), Some((1, 1)));
        queue.push(1, 6);
        assert_eq!(queue.pop(), Some((1, 5)));
        assert_eq!(queue.pop(), Some((1, 6)), "the newcomer was last");
        queue.push(9, 7);
        assert_eq!(queue.pop(), Some((9, 7)), "a larger priority rises");
    }

    #[test]
    fn the_table_samples_chain_heads_and_reverses_chains_when_it_grows() {
        let mut table = ChainedTable::new(1, Version::Aa0fc40, lcs_rng(Version::Aa0fc40, Some(7)));
        let slots: Vec<u32> = (0..3u64).map(|k| table.insert(k, k * 10)).collect();
        assert_eq!(
            table.buckets(),
            2,
            "3 keys > 2 buckets only grows on the next insert"
        );
        table.insert(3, 30);
        assert_eq!(table.buckets(), 4);
        for k in 0..4 {
            let slot = table.get(k).unwrap();
            assert_eq!((table.key(slot), *table.value(slot)), (k, k * 10));
        }
        table.remove(slots[1]);
        assert_eq!(table.get(1), None);
        for _ in 0..50 {
            let slot = table.sample().unwrap();
            assert_ne!(table.key(slot), 1);
            let bucket = xxh3_u64(table.key(slot)) & 3;
            let head = table
                .slots()
                .find(|&s| xxh3_u64(table.key(s)) & 3 == bucket);
            assert_eq!(Some(slot), head, "a sample is the head of its chain");
        }
    }

    #[test]
    fn a_sparse_0_3_5_table_halves_while_sampling_and_samples_whole_chains() {
        let mut table = ChainedTable::new(16, Version::V0_3_5, lcs_rng(Version::V0_3_5, None));
        for k in 0..8u64 {
            table.insert(k, ());
        }
        assert_eq!(table.buckets(), 1 << 16, "8 keys do not grow it");
        let mut seen = [false; 8];
        for _ in 0..400 {
            let slot = table.sample().unwrap();
            seen[table.key(slot) as usize] = true;
        }
        assert!(
            table.buckets() <= 64,
            "8 keys in 2^16 buckets: {} left",
            table.buckets()
        );
        assert!(
            seen.iter().all(|&s| s),
            "every key is sampled, heads or not: {seen:?}"
        );
        let mut naive: NaiveChains<()> =
            NaiveChains::new(16, Version::V0_3_5, lcs_rng(Version::V0_3_5, None));
        let mut again = ChainedTable::new(16, Version::V0_3_5, lcs_rng(Version::V0_3_5, None));
        for k in 0..8u64 {
            naive.insert(k, ());
            again.insert(k, ());
        }
        for _ in 0..400 {
            let slot = again.sample().unwrap();
            assert_eq!(again.key(slot), naive.sample().0);
        }
    }

    proptest! {
        /// Against a model: a vector of chains, each newest first.
        #[test]
        fn the_table_matches_a_vector_of_chains(ops in prop::collection::vec((0u64..40, any::<bool>()), 1..300)) {
            let mut table = ChainedTable::new(2, Version::Aa0fc40, lcs_rng(Version::Aa0fc40, None));
            let mut chains: Vec<Vec<u64>> = vec![vec![]; 4];
            for (key, insert) in ops {
                let present = table.get(key);
                if insert && present.is_none() {
                    if table.len() > chains.len() {
                        let old = std::mem::take(&mut chains);
                        chains = vec![vec![]; old.len() * 2];
                        for chain in old {
                            for k in chain {
                                let b = (xxh3_u64(k) & (chains.len() as u64 - 1)) as usize;
                                chains[b].insert(0, k);
                            }
                        }
                    }
                    table.insert(key, key);
                    let b = (xxh3_u64(key) & (chains.len() as u64 - 1)) as usize;
                    chains[b].insert(0, key);
                } else if let Some(slot) = present {
                    prop_assert_eq!(table.remove(slot), (key, key));
                    for chain in &mut chains {
                        chain.retain(|&k| k != key);
                    }
                }
                let flat: Vec<u64> = chains.iter().flatten().copied().collect();
                let ours: Vec<u64> = table.slots().map(|s| table.key(s)).collect();
                prop_assert_eq!(ours, flat);
                prop_assert_eq!(table.len(), chains.iter().map(Vec::len).sum::<usize>());
            }
        }

        /// Against `pqueue.c`'s order: pops come out largest first, and among
        /// equals a model of the heap array decides.
        #[test]
        fn the_queue_pops_largest_first(ops in prop::collection::vec((0u8..4, any::<bool>()), 1..200)) {
            let mut queue = PQueue::new();
            let mut present: Vec<(u8, PqHandle)> = vec![];
            for (priority, push) in ops {
                if push || present.is_empty() {
                    let handle = queue.push(priority, present.len() as u32);
                    present.push((priority, handle));
                } else {
                    let (p, _) = queue.pop().unwrap();
                    let max = present.iter().map(|e| e.0).max().unwrap();
                    prop_assert_eq!(p, max);
                    let at = present.iter().position(|e| e.0 == p && queue.slots[e.1 as usize].position == NIL).unwrap();
                    present.remove(at);
                }
                prop_assert_eq!(queue.len(), present.len());
            }
        }
    }
}
