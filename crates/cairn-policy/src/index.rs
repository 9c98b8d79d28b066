//! [`KeyIndex`]: key → slab index, an open-addressing table built for
//! prefetching.
//!
//! The keys already live in the slab nodes, so a slot holds only the node's
//! 4-byte index and 32 bits of the key's hash (8 bytes a slot, eight slots a
//! cache line). A lookup reads one line of slots, compares the hash tags there,
//! and touches a slab node only on a tag match (false matches: about 1 in
//! 2^(32 − log2 slots), i.e. under 1 in 8,000 for a million-slot table).
//!
//! Why not `hashbrown`: its probe has to load the control bytes and then the
//! slot before the node's address is known, and it exposes no address to
//! prefetch. Here the slot line of a future key is a pure function of its hash,
//! so a replay can ask for it far ahead ([`KeyIndex::prefetch_slots`]), then,
//! nearer, read it and ask for the node ([`KeyIndex::prefetch`]): three
//! dependent memory accesses overlapped with the work of the accesses in
//! between. `hashbrown` stays the map of every other table in Cairn.
//!
//! Layout: linear probing, at most 3/4 full, deletion by backward shift (no
//! tombstones, so probe lengths do not decay under churn). The home slot of a
//! key is its tag modulo the table size, so a slot's home is known without
//! touching its node. Growth doubles the table (the only allocation); the
//! steady state allocates nothing.

use hashbrown::DefaultHashBuilder;
use std::hash::BuildHasher;

use crate::list::{Index, NIL, Slab};

/// A slab value that knows its key.
pub trait Keyed {
    /// The key this node is indexed under.
    fn key(&self) -> u64;
}

/// An empty slot: index [`NIL`], which no node has.
const EMPTY: u64 = NIL as u64;

/// Slots in the first table.
const INITIAL_SLOTS: usize = 16;

/// Maps keys to slab indices; the keys themselves are read from the slab.
pub struct KeyIndex {
    /// `tag << 32 | index`, or [`EMPTY`].
    slots: Box<[u64]>,
    /// `slots.len() - 1` (the length is a power of two).
    mask: usize,
    len: usize,
    hasher: DefaultHashBuilder,
}

impl Default for KeyIndex {
    fn default() -> Self {
        Self {
            slots: vec![EMPTY; INITIAL_SLOTS].into_boxed_slice(),
            mask: INITIAL_SLOTS - 1,
            len: 0,
            hasher: DefaultHashBuilder::default(),
        }
    }
}

impl std::fmt::Debug for KeyIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyIndex")
            .field("len", &self.len)
            .field("slots", &self.slots.len())
            .finish_non_exhaustive()
    }
}

#[inline]
fn tag_of(slot: u64) -> u32 {
    (slot >> 32) as u32
}

#[inline]
fn index_of(slot: u64) -> Index {
    slot as Index
}

impl KeyIndex {
    /// The key's 32-bit tag (the high half of its hash).
    #[inline]
    fn tag(&self, key: u64) -> u32 {
        (self.hasher.hash_one(key) >> 32) as u32
    }

    #[inline]
    fn home(&self, tag: u32) -> usize {
        tag as usize & self.mask
    }

    /// The slot holding `key`, if any.
    #[inline]
    fn find<T: Keyed>(&self, key: u64, slab: &Slab<T>) -> Option<usize> {
        let tag = self.tag(key);
        let mut at = self.home(tag);
        loop {
            let slot = self.slots[at];
            if slot == EMPTY {
                return None;
            }
            if tag_of(slot) == tag && slab.get(index_of(slot)).key() == key {
                return Some(at);
            }
            at = (at + 1) & self.mask;
        }
    }

    /// The node holding `key`.
    #[inline]
    pub fn get<T: Keyed>(&self, key: u64, slab: &Slab<T>) -> Option<Index> {
        self.find(key, slab).map(|at| index_of(self.slots[at]))
    }

    /// Far-ahead hint: starts loading the line of slots where `key` would be.
    /// Reads nothing.
    #[inline]
    pub fn prefetch_slots(&self, key: u64) {
        let at = self.home(self.tag(key));
        crate::hint::prefetch(&self.slots[at]);
    }

    /// Near hint: reads `key`'s slots (ideally already loaded by
    /// [`prefetch_slots`](Self::prefetch_slots)) and starts loading the slab
    /// node of every tag match, without reading the nodes.
    #[inline]
    pub fn prefetch<T: Keyed>(&self, key: u64, slab: &Slab<T>) {
        let tag = self.tag(key);
        let mut at = self.home(tag);
        loop {
            let slot = self.slots[at];
            if slot == EMPTY {
                return;
            }
            if tag_of(slot) == tag {
                slab.prefetch(index_of(slot));
            }
            at = (at + 1) & self.mask;
        }
    }

    /// Indexes node `index`, whose value must already hold `key`, which must
    /// not be indexed yet.
    #[inline]
    pub fn insert<T: Keyed>(&mut self, key: u64, index: Index, slab: &Slab<T>) {
        debug_assert_eq!(slab.get(index).key(), key);
        debug_assert!(self.find(key, slab).is_none(), "key {key} indexed twice");
        if (self.len + 1) * 4 > self.slots.len() * 3 {
            self.grow();
        }
        let tag = self.tag(key);
        self.place(u64::from(tag) << 32 | u64::from(index));
        self.len += 1;
    }

    /// Puts `slot` at the first empty position from its home.
    #[inline]
    fn place(&mut self, slot: u64) {
        let mut at = self.home(tag_of(slot));
        while self.slots[at] != EMPTY {
            at = (at + 1) & self.mask;
        }
        self.slots[at] = slot;
    }

    /// Doubles the table and re-places every slot (homes come from the tags,
    /// so no node is read).
    #[cold]
    fn grow(&mut self) {
        let size = self.slots.len() * 2;
        let old = std::mem::replace(&mut self.slots, vec![EMPTY; size].into_boxed_slice());
        // Homes use the tag's low bits, so at most 2^32 slots are addressable;
        // past that (over 3 billion keys) the table only gets fuller.
        self.mask = (size - 1) & (u32::MAX as usize);
        for slot in old.iter().copied().filter(|&s| s != EMPTY) {
            self.place(slot);
        }
    }

    /// The standard three-stage hint for a policy whose hits relink the
    /// key's node: `Far` loads the slots, `Near` the node, `Next` (when
    /// `links`) the node's list neighbours.
    #[inline]
    pub fn prefetch_stage<T: Keyed>(
        &self,
        key: u64,
        slab: &Slab<T>,
        ahead: crate::Ahead,
        links: bool,
    ) {
        match ahead {
            crate::Ahead::Far => self.prefetch_slots(key),
            crate::Ahead::Near => self.prefetch(key, slab),
            crate::Ahead::Next => {
                if links && let Some(index) = self.get(key, slab) {
                    slab.prefetch_links(index);
                }
            }
        }
    }

    /// Forgets `key`; returns the node it pointed to. Call before the node is
    /// reused.
    #[inline]
    pub fn remove<T: Keyed>(&mut self, key: u64, slab: &Slab<T>) -> Option<Index> {
        let mut hole = self.find(key, slab)?;
        let index = index_of(self.slots[hole]);
        // Backward shift: pull later slots of the run into the hole when their
        // home does not lie (cyclically) after the hole.
        let mut at = hole;
        loop {
            at = (at + 1) & self.mask;
            let slot = self.slots[at];
            if slot == EMPTY {
                break;
            }
            let home = self.home(tag_of(slot));
            if (at.wrapping_sub(home) & self.mask) >= (at.wrapping_sub(hole) & self.mask) {
                self.slots[hole] = slot;
                hole = at;
            }
        }
        self.slots[hole] = EMPTY;
        self.len -= 1;
        Some(index)
    }

    /// Number of keys indexed.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no key is indexed.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    #[derive(Clone, Copy, Debug)]
    struct Node(u64);

    impl Keyed for Node {
        fn key(&self) -> u64 {
            self.0
        }
    }

    /// Every indexed key is found at a slot reachable from its home without
    /// crossing an empty slot, and the count matches.
    fn check_invariants(index: &KeyIndex, slab: &Slab<Node>) {
        let mut live = 0;
        for (at, &slot) in index.slots.iter().enumerate() {
            if slot == EMPTY {
                continue;
            }
            live += 1;
            let mut probe = index.home(tag_of(slot));
            while probe != at {
                assert_ne!(index.slots[probe], EMPTY, "gap between home and slot {at}");
                probe = (probe + 1) & index.mask;
            }
            let key = slab.get(index_of(slot)).key();
            assert_eq!(index.tag(key), tag_of(slot));
        }
        assert_eq!(live, index.len());
    }

    proptest! {
        /// Against a `HashMap` model: random inserts and removes over a small
        /// key space (so runs collide and backward shifts happen).
        #[test]
        fn behaves_like_a_map(ops in proptest::collection::vec((any::<bool>(), 0u64..300), 1..2000)) {
            let mut slab = Slab::new();
            let mut index = KeyIndex::default();
            let mut model: HashMap<u64, Index> = HashMap::new();
            for (insert, key) in ops {
                if insert {
                    if let std::collections::hash_map::Entry::Vacant(e) = model.entry(key) {
                        let node = slab.insert(Node(key));
                        index.insert(key, node, &slab);
                        e.insert(node);
                    }
                } else {
                    let got = index.remove(key, &slab);
                    let want = model.remove(&key);
                    prop_assert_eq!(got, want);
                    if let Some(node) = got {
                        slab.remove(node);
                    }
                }
                prop_assert_eq!(index.len(), model.len());
            }
            check_invariants(&index, &slab);
            for key in 0..300 {
                prop_assert_eq!(index.get(key, &slab), model.get(&key).copied());
                index.prefetch_slots(key);
                index.prefetch(key, &slab);
            }
        }
    }

    #[test]
    fn grows_and_keeps_every_key() {
        let mut slab = Slab::new();
        let mut index = KeyIndex::default();
        for key in 0..100_000u64 {
            let node = slab.insert(Node(key * 7919));
            index.insert(key * 7919, node, &slab);
        }
        assert_eq!(index.len(), 100_000);
        assert!(index.slots.len() * 3 >= index.len() * 4, "at most 3/4 full");
        check_invariants(&index, &slab);
        for key in (0..100_000u64).step_by(3) {
            assert!(index.remove(key * 7919, &slab).is_some());
        }
        check_invariants(&index, &slab);
        assert_eq!(index.get(7919, &slab), Some(1));
        assert_eq!(index.get(0, &slab), None);
    }
}
