//! LIRS: Low Inter-reference Recency Set replacement.
//!
//! Source: Song Jiang and Xiaodong Zhang, "LIRS: an efficient low
//! inter-reference recency set replacement policy to improve buffer cache
//! performance", SIGMETRICS 2002. This module reproduces libCacheSim's
//! `cache/eviction/LIRS.c` (commit aa0fc40) operation for operation, so that
//! miss ratios agree exactly; it therefore keeps that implementation's
//! structure and its departures from the paper.
//!
//! Checked on `cloudPhysicsIO` in object mode: the same miss counts as
//! libCacheSim at 1, 5, 10 and 20% of the distinct objects (94680, 92673,
//! 85609, 74687).
//!
//! Structure (as in libCacheSim):
//! - stack **S**: an LRU list of LIR blocks, resident HIR blocks and
//!   non-resident HIR blocks (history); its bottom is always an LIR block
//!   ("stack pruning" removes HIR blocks from the bottom);
//! - list **Q**: an LRU list of the resident HIR blocks, `hir_limit` =
//!   max(1, ⌊capacity × `hir_ratio`⌋) with `hir_ratio` = 0.01; the LIR blocks
//!   get the rest, `lir_limit` = capacity − `hir_limit`;
//! - list **NH**: the non-resident HIR blocks in S, in the order they left the
//!   cache. When S holds more than twice the capacity (counted like the
//!   cache: blocks or bytes), the oldest of them are dropped from S.
//!
//! Operations (names from `LIRS.c`):
//! - any lookup first moves the key to the top of S and of Q, where present;
//! - hit on an LIR block: prune S;
//! - hit on a resident HIR block in S (`hit_RD_HIRinS`): it leaves Q and
//!   becomes LIR; while the LIR set overflows, the bottom LIR block of S is
//!   demoted (`evictLIR`: to the top of Q, evicting Q's LRU end as needed,
//!   then prune);
//! - hit on a resident HIR block only in Q (`hit_RD_HIRinQ`): demote LIR
//!   blocks while `lir + size > lir_limit` (a libCacheSim quirk: the block
//!   stays HIR, so in a full cache this *hit* demotes an LIR block and evicts
//!   Q's LRU block), then push the block on S as resident HIR;
//! - miss on a non-resident HIR block in S: demote LIR blocks until it fits
//!   in the LIR set, and it becomes LIR;
//! - miss on a new block: LIR while the LIR set has room, otherwise resident
//!   HIR (in S and Q), evicting from Q's LRU end to make room.
//!
//! A hit can evict (the `hit_RD_HIRinQ` quirk above), which the
//! [`Policy`] protocol has no victims vector for: [`Policy::access`]
//! reports such a victim at once, while a bare [`lookup`](Policy::lookup)
//! keeps it and the next [`admit`](Policy::admit) reports it (minus the key
//! being admitted, if it is that one).
//!
//! Differences from libCacheSim's results, none of which occurs in object
//! mode with more than 199 blocks (so not in the reference runs, which
//! match libCacheSim's miss ratios exactly):
//! - In `hit_RD_HIRinQ` libCacheSim can evict the very block being hit from
//!   Q (when Q holds one block), leaving a "resident" HIR block that no
//!   counter accounts for. We never evict the block being hit; Q may then
//!   hold one block more than `hir_limit` until the next eviction.
//! - Where libCacheSim would loop forever or read an empty list (byte mode,
//!   units larger than a segment), we stop and refuse the admission instead.
//! - [`remove`](Policy::remove) of a non-resident key keeps its history and
//!   returns `false`; libCacheSim drops the history and returns true.

use serde::{Deserialize, Serialize};

use crate::list::{Index, List, NIL, Slab};
use crate::{Access, Capacity, ConfigError, KeyMap, Policy};

/// LIRS parameters; the default is libCacheSim's.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LirsConfig {
    /// Share of the capacity for resident HIR blocks (list Q), in `(0, 1)`;
    /// Q gets at least one unit. Default 0.01 (libCacheSim's `hirs_ratio`;
    /// the paper suggests 1%).
    pub hir_ratio: f64,
    /// Stack S is limited to this multiple of the capacity (non-resident HIR
    /// blocks beyond it are forgotten, oldest first), at least 1. Default 2,
    /// as in libCacheSim's `limitStack`.
    pub stack_limit_multiple: u64,
}

impl Default for LirsConfig {
    fn default() -> Self {
        Self {
            hir_ratio: 0.01,
            stack_limit_multiple: 2,
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct StackEntry {
    key: u64,
    charge: u64,
    is_lir: bool,
    in_cache: bool,
}

#[derive(Clone, Copy, Debug)]
struct QueueEntry {
    key: u64,
    charge: u64,
}

/// Where a key sits: its node in S, Q and NH, or [`NIL`].
#[derive(Clone, Copy, Debug)]
struct Slots {
    s: Index,
    q: Index,
    nh: Index,
}

const NOWHERE: Slots = Slots {
    s: NIL,
    q: NIL,
    nh: NIL,
};

/// LIRS replacement.
#[derive(Debug)]
pub struct Lirs {
    capacity: Capacity,
    lir_limit: u64,
    hir_limit: u64,
    stack_limit: u64,
    /// Charge of the LIR blocks, of the resident HIR blocks, and of S.
    lir_used: u64,
    hir_used: u64,
    stack_used: u64,
    lir_len: usize,
    map: KeyMap<Slots>,
    stack_nodes: Slab<StackEntry>,
    stack: List,
    queue_nodes: Slab<QueueEntry>,
    queue: List,
    nonresident_nodes: Slab<u64>,
    nonresident: List,
    /// The Q node being hit in `hit_rd_hir_in_q`, which must not be evicted.
    protected: Index,
    /// Victims of evictions made by a bare `lookup`, reported by `admit`.
    pending_victims: Vec<u64>,
}

impl Lirs {
    /// An empty LIRS cache.
    pub fn new(capacity: Capacity, config: &LirsConfig) -> Result<Self, ConfigError> {
        if !(config.hir_ratio > 0.0 && config.hir_ratio < 1.0) {
            return Err(ConfigError::OutOfRange {
                policy: "lirs",
                parameter: "hir_ratio",
                value: config.hir_ratio.to_string(),
                expected: "a fraction in (0, 1)",
            });
        }
        if config.stack_limit_multiple == 0 {
            return Err(ConfigError::OutOfRange {
                policy: "lirs",
                parameter: "stack_limit_multiple",
                value: "0".into(),
                expected: "at least 1",
            });
        }
        let limit = capacity.limit();
        // As LIRS_init: MAX(1, (uint64_t)(hirs_ratio * cache_size)).
        let hir_limit = ((config.hir_ratio * limit as f64) as u64).max(1);
        Ok(Self {
            capacity,
            lir_limit: limit.saturating_sub(hir_limit),
            hir_limit,
            stack_limit: limit.saturating_mul(config.stack_limit_multiple),
            lir_used: 0,
            hir_used: 0,
            stack_used: 0,
            lir_len: 0,
            map: KeyMap::default(),
            stack_nodes: Slab::new(),
            stack: List::new(),
            queue_nodes: Slab::new(),
            queue: List::new(),
            nonresident_nodes: Slab::new(),
            nonresident: List::new(),
            protected: NIL,
            pending_victims: Vec::new(),
        })
    }

    fn slots(&self, key: u64) -> Slots {
        self.map.get(&key).copied().unwrap_or(NOWHERE)
    }

    /// Stores `slots` for `key`, forgetting the key when it is nowhere.
    fn set_slots(&mut self, key: u64, slots: Slots) {
        if slots.s == NIL && slots.q == NIL && slots.nh == NIL {
            self.map.remove(&key);
        } else {
            self.map.insert(key, slots);
        }
    }

    fn push_stack(&mut self, key: u64, charge: u64, is_lir: bool) -> Index {
        let index = self.stack_nodes.insert(StackEntry {
            key,
            charge,
            is_lir,
            in_cache: true,
        });
        self.stack_nodes.push_front(&mut self.stack, index);
        self.stack_used += charge;
        index
    }

    fn push_queue(&mut self, key: u64, charge: u64) -> Index {
        let index = self.queue_nodes.insert(QueueEntry { key, charge });
        self.queue_nodes.push_front(&mut self.queue, index);
        self.hir_used += charge;
        index
    }

    fn drop_stack_node(&mut self, index: Index) {
        self.stack_nodes.unlink(&mut self.stack, index);
        self.stack_used -= self.stack_nodes.remove(index).charge;
    }

    fn drop_nonresident_node(&mut self, index: Index) {
        self.nonresident_nodes.unlink(&mut self.nonresident, index);
        self.nonresident_nodes.remove(index);
    }

    /// Stack pruning: drops HIR blocks from the bottom of S until an LIR
    /// block (or the top) is there (`LIRS_prune`).
    fn prune(&mut self) {
        while let Some(tail) = self.stack.back() {
            let entry = *self.stack_nodes.get(tail);
            if Some(tail) == self.stack.front() || entry.is_lir {
                break;
            }
            let mut slots = self.slots(entry.key);
            if !entry.in_cache && slots.nh != NIL {
                self.drop_nonresident_node(slots.nh);
                slots.nh = NIL;
            }
            self.drop_stack_node(tail);
            slots.s = NIL;
            self.set_slots(entry.key, slots);
        }
    }

    /// Evicts the LRU resident HIR block (`evictHIR`); its S entry, if any,
    /// becomes non-resident history. Returns false if there is none to evict.
    fn evict_hir(&mut self, victims: &mut Vec<u64>) -> bool {
        let Some(tail) = self.queue.back() else {
            return false;
        };
        if tail == self.protected {
            return false;
        }
        self.queue_nodes.unlink(&mut self.queue, tail);
        let entry = *self.queue_nodes.remove(tail);
        self.hir_used -= entry.charge;
        let mut slots = self.slots(entry.key);
        slots.q = NIL;
        if slots.s != NIL {
            self.stack_nodes.get_mut(slots.s).in_cache = false;
            let index = self.nonresident_nodes.insert(entry.key);
            self.nonresident_nodes
                .push_front(&mut self.nonresident, index);
            slots.nh = index;
        }
        self.set_slots(entry.key, slots);
        victims.push(entry.key);
        true
    }

    /// Demotes the bottom LIR block of S to the top of Q, then prunes
    /// (`evictLIR`). Returns false if S's bottom is not an LIR block.
    fn evict_lir(&mut self, victims: &mut Vec<u64>) -> bool {
        let Some(tail) = self.stack.back() else {
            return false;
        };
        let entry = *self.stack_nodes.get(tail);
        if !entry.is_lir {
            return false;
        }
        self.drop_stack_node(tail);
        self.lir_used -= entry.charge;
        self.lir_len -= 1;
        let mut slots = self.slots(entry.key);
        slots.s = NIL;
        if entry.charge <= self.hir_limit {
            while self.hir_used + entry.charge > self.hir_limit {
                if !self.evict_hir(victims) {
                    break;
                }
            }
            slots.q = self.push_queue(entry.key, entry.charge);
        } else {
            victims.push(entry.key);
        }
        self.set_slots(entry.key, slots);
        self.prune();
        true
    }

    /// Demotes LIR blocks until `charge` more fits in the LIR set.
    fn make_lir_room(&mut self, charge: u64, victims: &mut Vec<u64>) {
        while self.lir_used + charge > self.lir_limit {
            if !self.evict_lir(victims) {
                break;
            }
        }
    }

    /// Forgets the oldest non-resident blocks while S is too big (`limitStack`).
    fn limit_stack(&mut self) {
        while self.stack_used > self.stack_limit {
            let Some(tail) = self.nonresident.back() else {
                break;
            };
            let key = *self.nonresident_nodes.get(tail);
            self.drop_nonresident_node(tail);
            let mut slots = self.slots(key);
            if slots.s != NIL {
                self.drop_stack_node(slots.s);
            }
            slots.s = NIL;
            slots.nh = NIL;
            self.set_slots(key, slots);
        }
    }

    /// `LIRS_find` with `update_cache`: moves the key to the top of S and Q
    /// and handles a hit. Evictions (only in `hit_RD_HIRinQ`) go to `victims`.
    fn find(&mut self, key: u64, victims: &mut Vec<u64>) -> bool {
        let Some(&slots) = self.map.get(&key) else {
            return false;
        };
        if slots.s != NIL {
            self.stack_nodes.move_to_front(&mut self.stack, slots.s);
        }
        if slots.q != NIL {
            self.queue_nodes.move_to_front(&mut self.queue, slots.q);
        }
        let hit = if slots.s == NIL {
            debug_assert!(slots.q != NIL, "a key in the map is in S or Q");
            self.hit_resident_hir_in_queue(key, slots.q, victims);
            true
        } else {
            let entry = *self.stack_nodes.get(slots.s);
            if entry.is_lir {
                self.prune();
                true
            } else if entry.in_cache {
                self.hit_resident_hir_in_stack(key, slots, victims);
                true
            } else {
                false
            }
        };
        self.limit_stack();
        hit
    }

    /// `hit_RD_HIRinS`: the block leaves Q and becomes LIR.
    fn hit_resident_hir_in_stack(&mut self, key: u64, mut slots: Slots, victims: &mut Vec<u64>) {
        let charge = self.stack_nodes.get(slots.s).charge;
        if slots.q != NIL {
            self.queue_nodes.unlink(&mut self.queue, slots.q);
            self.hir_used -= self.queue_nodes.remove(slots.q).charge;
            slots.q = NIL;
            self.set_slots(key, slots);
        }
        self.make_lir_room(charge, victims);
        self.stack_nodes.get_mut(slots.s).is_lir = true;
        self.lir_used += charge;
        self.lir_len += 1;
    }

    /// `hit_RD_HIRinQ`: the block stays HIR in Q and is pushed on S.
    fn hit_resident_hir_in_queue(&mut self, key: u64, q: Index, victims: &mut Vec<u64>) {
        let charge = self.queue_nodes.get(q).charge;
        self.protected = q;
        self.make_lir_room(charge, victims);
        self.protected = NIL;
        let s = self.push_stack(key, charge, false);
        let mut slots = self.slots(key);
        slots.s = s;
        self.set_slots(key, slots);
    }

    /// `LIRS_can_insert` + the `LIRS_evict` loop + `LIRS_insert` for a
    /// non-resident HIR block in S. Returns whether it was admitted.
    fn admit_nonresident(&mut self, key: u64, mut slots: Slots, victims: &mut Vec<u64>) -> bool {
        let charge = self.stack_nodes.get(slots.s).charge;
        self.make_lir_room(charge, victims);
        slots = self.slots(key);
        if slots.nh != NIL {
            self.drop_nonresident_node(slots.nh);
            slots.nh = NIL;
            self.set_slots(key, slots);
        }
        while self.used() + charge > self.capacity.limit() {
            while self.hir_used >= self.hir_limit {
                if !self.evict_hir(victims) {
                    break;
                }
            }
            if !self.evict_lir(victims) {
                break;
            }
        }
        let slots = self.slots(key);
        if self.used() + charge > self.capacity.limit() || slots.s == NIL {
            if slots.s != NIL {
                // Keep it as history that limit_stack can still forget.
                let index = self.nonresident_nodes.insert(key);
                self.nonresident_nodes
                    .push_front(&mut self.nonresident, index);
                self.set_slots(key, Slots { nh: index, ..slots });
            }
            return false;
        }
        let entry = self.stack_nodes.get_mut(slots.s);
        entry.is_lir = true;
        entry.in_cache = true;
        entry.charge = charge;
        self.lir_used += charge;
        self.lir_len += 1;
        true
    }

    /// The same for a block neither in S nor in Q.
    fn admit_new(&mut self, key: u64, charge: u64, victims: &mut Vec<u64>) -> bool {
        if charge > self.lir_limit || charge > self.hir_limit {
            return false;
        }
        let both_full = |this: &Self| {
            this.lir_used + charge > this.lir_limit && this.hir_used + charge > this.hir_limit
        };
        if both_full(self) {
            while self.hir_used + charge > self.hir_limit {
                if !self.evict_hir(victims) {
                    break;
                }
            }
        }
        while self.used() + charge > self.capacity.limit() && both_full(self) {
            if !self.evict_hir(victims) {
                break;
            }
        }
        if self.used() + charge > self.capacity.limit() {
            return false;
        }
        if self.lir_used + charge <= self.lir_limit {
            let s = self.push_stack(key, charge, true);
            self.lir_used += charge;
            self.lir_len += 1;
            self.set_slots(key, Slots { s, ..NOWHERE });
        } else {
            let s = self.push_stack(key, charge, false);
            let q = self.push_queue(key, charge);
            self.set_slots(key, Slots { s, q, nh: NIL });
        }
        true
    }

    fn drain_pending(&mut self, admitted: u64, victims: &mut Vec<u64>) {
        victims.extend(
            self.pending_victims
                .drain(..)
                .filter(|&key| key != admitted),
        );
    }
}

impl Policy for Lirs {
    fn name(&self) -> &'static str {
        "lirs"
    }

    fn lookup(&mut self, access: &Access) -> bool {
        let mut pending = std::mem::take(&mut self.pending_victims);
        let hit = self.find(access.key, &mut pending);
        self.pending_victims = pending;
        hit
    }

    fn admit(&mut self, access: &Access, victims: &mut Vec<u64>) -> bool {
        self.drain_pending(access.key, victims);
        let charge = self.capacity.charge(access.size);
        if charge > self.capacity.limit() {
            return false;
        }
        let slots = self.slots(access.key);
        let admitted = if slots.s != NIL {
            let entry = *self.stack_nodes.get(slots.s);
            if entry.in_cache {
                debug_assert!(false, "admit of a resident key");
                return true;
            }
            self.admit_nonresident(access.key, slots, victims)
        } else if slots.q != NIL {
            debug_assert!(false, "admit of a resident key");
            return true;
        } else {
            self.admit_new(access.key, charge, victims)
        };
        self.limit_stack();
        admitted
    }

    fn access(&mut self, access: &Access, victims: &mut Vec<u64>) -> bool {
        self.drain_pending(access.key, victims);
        if self.find(access.key, victims) {
            true
        } else {
            self.admit(access, victims);
            false
        }
    }

    fn take_held_victims(&mut self, victims: &mut Vec<u64>) {
        victims.append(&mut self.pending_victims);
    }

    fn remove(&mut self, key: u64) -> bool {
        self.pending_victims.retain(|&k| k != key);
        let mut slots = self.slots(key);
        let mut resident = false;
        if slots.s != NIL {
            let entry = *self.stack_nodes.get(slots.s);
            if !entry.in_cache {
                return false;
            }
            resident = true;
            self.drop_stack_node(slots.s);
            slots.s = NIL;
            if entry.is_lir {
                self.lir_used -= entry.charge;
                self.lir_len -= 1;
                self.set_slots(key, slots);
                self.prune();
                slots = self.slots(key);
            }
        }
        if slots.q != NIL {
            resident = true;
            self.queue_nodes.unlink(&mut self.queue, slots.q);
            self.hir_used -= self.queue_nodes.remove(slots.q).charge;
            slots.q = NIL;
        }
        self.set_slots(key, slots);
        resident
    }

    fn contains(&self, key: u64) -> bool {
        self.map
            .get(&key)
            .is_some_and(|s| s.q != NIL || (s.s != NIL && self.stack_nodes.get(s.s).in_cache))
    }

    fn len(&self) -> usize {
        self.lir_len + self.queue.len()
    }

    fn used(&self) -> u64 {
        self.lir_used + self.hir_used
    }

    fn capacity(&self) -> Capacity {
        self.capacity
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{self, Reference};
    use proptest::prelude::*;

    /// Naive LIRS, transliterated from `LIRS.c` with vectors (index 0 is the
    /// bottom / LRU end) and linear searches.
    struct NaiveLirs {
        limit: u64,
        lir_limit: u64,
        hir_limit: u64,
        capacity: Capacity,
        /// `(key, charge, is_lir, in_cache)`
        s: Vec<(u64, u64, bool, bool)>,
        q: Vec<(u64, u64)>,
        nh: Vec<u64>,
        protected: Option<u64>,
        victims: Vec<u64>,
    }

    impl NaiveLirs {
        fn new(capacity: Capacity) -> Self {
            let limit = capacity.limit();
            let hir_limit = ((0.01 * limit as f64) as u64).max(1);
            Self {
                limit,
                lir_limit: limit.saturating_sub(hir_limit),
                hir_limit,
                capacity,
                s: vec![],
                q: vec![],
                nh: vec![],
                protected: None,
                victims: vec![],
            }
        }
        fn lir_used(&self) -> u64 {
            self.s.iter().filter(|e| e.2).map(|e| e.1).sum()
        }
        fn hir_used(&self) -> u64 {
            self.q.iter().map(|e| e.1).sum()
        }
        fn s_at(&self, key: u64) -> Option<usize> {
            self.s.iter().position(|e| e.0 == key)
        }
        fn prune(&mut self) {
            while self.s.len() > 1 && !self.s[0].2 {
                let e = self.s.remove(0);
                self.nh.retain(|&k| k != e.0);
            }
        }
        fn evict_hir(&mut self) -> bool {
            if self.q.is_empty() || Some(self.q[0].0) == self.protected {
                return false;
            }
            let (key, _) = self.q.remove(0);
            if let Some(at) = self.s_at(key) {
                self.s[at].3 = false;
                self.nh.push(key);
            }
            self.victims.push(key);
            true
        }
        fn evict_lir(&mut self) -> bool {
            if self.s.is_empty() || !self.s[0].2 {
                return false;
            }
            let (key, charge, ..) = self.s.remove(0);
            if charge <= self.hir_limit {
                while self.hir_used() + charge > self.hir_limit && self.evict_hir() {}
                self.q.push((key, charge));
            } else {
                self.victims.push(key);
            }
            self.prune();
            true
        }
        fn make_lir_room(&mut self, charge: u64) {
            while self.lir_used() + charge > self.lir_limit && self.evict_lir() {}
        }
        fn limit_stack(&mut self) {
            while self.s.iter().map(|e| e.1).sum::<u64>() > 2 * self.limit && !self.nh.is_empty() {
                let key = self.nh.remove(0);
                self.s.retain(|e| e.0 != key);
            }
        }
        fn find(&mut self, key: u64) -> bool {
            let s = self.s_at(key).map(|at| {
                let e = self.s.remove(at);
                self.s.push(e);
                e
            });
            let q = self.q.iter().position(|e| e.0 == key).map(|at| {
                let e = self.q.remove(at);
                self.q.push(e);
                e
            });
            match (s, q) {
                (Some(e), _) if e.2 => {
                    self.prune();
                    true
                }
                (Some(e), q) if e.3 => {
                    if q.is_some() {
                        self.q.pop();
                    }
                    self.make_lir_room(e.1);
                    let at = self.s_at(key).unwrap();
                    self.s[at].2 = true;
                    true
                }
                (Some(_), _) | (None, None) => false,
                (None, Some(e)) => {
                    self.protected = Some(key);
                    self.make_lir_room(e.1);
                    self.protected = None;
                    self.s.push((key, e.1, false, true));
                    true
                }
            }
        }
        fn admit(&mut self, key: u64, charge: u64) {
            if charge > self.limit {
                return;
            }
            if let Some(at) = self.s_at(key) {
                let charge = self.s[at].1;
                self.make_lir_room(charge);
                self.nh.retain(|&k| k != key);
                while self.lir_used() + self.hir_used() + charge > self.limit {
                    while self.hir_used() >= self.hir_limit && self.evict_hir() {}
                    if !self.evict_lir() {
                        break;
                    }
                }
                match self.s_at(key) {
                    Some(at) if self.lir_used() + self.hir_used() + charge <= self.limit => {
                        self.s[at].2 = true;
                        self.s[at].3 = true;
                    }
                    Some(_) => self.nh.push(key),
                    None => {}
                }
                return;
            }
            if charge > self.lir_limit || charge > self.hir_limit {
                return;
            }
            let both_full = |n: &Self| {
                n.lir_used() + charge > n.lir_limit && n.hir_used() + charge > n.hir_limit
            };
            if both_full(self) {
                while self.hir_used() + charge > self.hir_limit && self.evict_hir() {}
            }
            while self.lir_used() + self.hir_used() + charge > self.limit
                && both_full(self)
                && self.evict_hir()
            {}
            if self.lir_used() + self.hir_used() + charge > self.limit {
                return;
            }
            if self.lir_used() + charge <= self.lir_limit {
                self.s.push((key, charge, true, true));
            } else {
                self.s.push((key, charge, false, true));
                self.q.push((key, charge));
            }
        }
    }

    impl Reference for NaiveLirs {
        fn access(&mut self, access: &Access) -> (bool, Vec<u64>) {
            self.victims.clear();
            let hit = self.find(access.key);
            if !hit {
                self.admit(access.key, self.capacity.charge(access.size));
            }
            self.limit_stack();
            (hit, std::mem::take(&mut self.victims))
        }
    }

    fn lirs(capacity: Capacity) -> Lirs {
        Lirs::new(capacity, &LirsConfig::default()).unwrap()
    }

    #[test]
    fn worked_example_with_three_blocks() {
        // 3 blocks: Q holds 1 (max(1, 0.03)), the LIR set 2.
        let mut cache = lirs(Capacity::Objects(3));
        let trace = testing::keys(&[1, 2, 3, 4, 3, 1]);
        let mut victims = vec![];
        let mut hits = vec![];
        for access in &trace[..5] {
            hits.push(cache.access(access, &mut victims));
        }
        // 1, 2 become LIR; 3 is resident HIR; 4 evicts 3 from Q (3 stays in S
        // as history); 3 returns with a small reuse distance: it becomes LIR,
        // demoting 1 (the bottom of S) to Q, which evicts 4.
        assert_eq!(hits, [false; 5]);
        assert_eq!(victims, [3, 4]);
        assert!(cache.contains(1) && cache.contains(2) && cache.contains(3));
        assert_eq!(
            (cache.map[&1].s, cache.queue.len()),
            (NIL, 1),
            "1 is only in Q"
        );
        // 1 is hit in Q: LIR 2 is demoted (lir + 1 > 2, libCacheSim's quirk);
        // Q would evict its LRU block, 1 itself, which we never do.
        victims.clear();
        assert!(cache.access(&trace[5], &mut victims));
        assert!(victims.is_empty());
        assert_eq!((cache.len(), cache.used(), cache.queue.len()), (3, 3, 2));
        assert!(
            cache.map[&2].s == NIL && cache.map[&2].q != NIL,
            "2 was demoted"
        );
        assert_eq!(
            cache.stack.len(),
            2,
            "S = [1 (HIR), 3 (LIR)]; 4's history was pruned"
        );
    }

    #[test]
    fn a_hit_that_evicts_reports_its_victim_through_the_next_admit() {
        // 200 blocks: Q holds 2, the LIR set 198. 0..198 become LIR, 198 and
        // 199 resident HIR. The hit on 198 makes it LIR and demotes 0 to Q.
        let mut cache = lirs(Capacity::Objects(200));
        let mut keys: Vec<u64> = (0..200).collect();
        keys.extend([198, 0, 500]);
        let trace = testing::keys(&keys);
        let mut victims = vec![];
        for access in &trace[..202] {
            assert_eq!(cache.lookup(access), access.time >= 200, "{access:?}");
            if !cache.contains(access.key) {
                assert!(cache.admit(access, &mut victims));
            }
        }
        // The hit on 0 (only in Q) demoted LIR 1 into a full Q: 199 left.
        assert!(victims.is_empty() && !cache.contains(199));
        assert_eq!(cache.len(), 199);
        assert!(!cache.lookup(&trace[202]));
        assert!(cache.admit(&trace[202], &mut victims));
        assert_eq!(
            victims,
            [199],
            "500 itself needed no eviction: the LIR set had room"
        );
        assert_eq!(cache.len(), 200);
    }

    proptest! {
        #[test]
        fn matches_naive_model(trace in testing::trace_strategy(60, 500, 5), cap in 1u64..40, bytes: bool) {
            let capacity = if bytes { Capacity::Bytes(cap) } else { Capacity::Objects(cap) };
            let mut naive = NaiveLirs::new(capacity);
            testing::assert_matches_reference(&mut lirs(capacity), &mut naive, &trace);
            testing::replay_checked(&mut lirs(capacity), &trace);
        }

        #[test]
        fn large_caches_match_the_naive_model(trace in testing::trace_strategy(400, 1500, 1), cap in 100u64..300) {
            let capacity = Capacity::Objects(cap);
            testing::assert_matches_reference(&mut lirs(capacity), &mut NaiveLirs::new(capacity), &trace);
        }
    }
}
