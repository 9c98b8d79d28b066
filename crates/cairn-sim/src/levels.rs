//! Two-level cache hierarchies: a configuration's policy (L1, the DRAM
//! cache) over a second policy (L2, the flash tier), as the engine stacks
//! its DRAM block cache (`cairn_store::cache`) over its flash tier
//! (`cairn_store::tier`).
//!
//! - [`Hierarchy::Inclusive`], the engine's stack: L1 looks the access up;
//!   on a miss L2 does (and admits it on its own miss), then L1 admits it,
//!   so a unit fetched from the backing store enters both levels. Writes
//!   reach L2 even when they hit L1 (the DRAM cache writes through to the
//!   tier, which caches writes). A unit L1 evicts is dropped (L2 may hold
//!   it); a unit L2 evicts stays in L1 (the engine does not back-invalidate),
//!   so strictly the levels are *non-inclusive*: L1 may hold units L2 no
//!   longer does.
//! - [`Hierarchy::Exclusive`]: a unit lives in one level. An L2 hit moves the
//!   unit up (L2 removes it, L1 admits it); every unit L1 evicts moves down
//!   (L2 looks it up, as a miss, and admits it); a unit L1 refuses (an
//!   admission filter, a unit larger than L1) goes to L2 instead. What leaves
//!   L2 leaves the hierarchy. Reads and writes are served alike.
//!
//! Every access is counted once: an L1 hit, an L2 hit, or a miss of both
//! ([`Metrics::l2_hits`] counts the second kind; [`Metrics::hits`] both).

use cairn_policy::{Access, Capacity, KeyMap, Op, Policy, PolicyConfig};

pub use crate::hierarchy::Hierarchy;
use crate::metrics::{Metrics, Served};

/// The second level under a configuration's policy.
#[derive(Clone, Debug, PartialEq)]
pub struct Level2 {
    /// The L2 policy as given (`s3fifo`, `s3fifo:small_size_ratio=0.2`).
    pub label: String,
    /// The L2 policy and its knobs.
    pub policy: PolicyConfig,
    /// The L2 size as given (`10%`), for reports.
    pub size: String,
    /// The resolved L2 capacity (in the same unit as L1's).
    pub capacity: Capacity,
    /// How the levels share units.
    pub hierarchy: Hierarchy,
}

/// L2 as a replay runs it, beside the L1 policy it sits under (which its
/// caller owns: a one-level replay keeps running that policy alone).
pub struct SecondLevel {
    policy: Box<dyn Policy>,
    hierarchy: Hierarchy,
    /// Exclusive only: the last access to each unit resident in L1, so that
    /// a unit L1 evicts goes down with its size, object, block, cost group
    /// and next-access time.
    upper: KeyMap<Access>,
    /// L2's victims for the current access (reused).
    victims: Vec<u64>,
}

impl SecondLevel {
    /// L2 running `policy`.
    pub fn new(policy: Box<dyn Policy>, hierarchy: Hierarchy) -> Self {
        Self {
            policy,
            hierarchy,
            upper: KeyMap::default(),
            victims: Vec::new(),
        }
    }

    /// The L2 policy.
    pub fn policy(&self) -> &dyn Policy {
        &*self.policy
    }

    /// How the levels share units.
    pub fn hierarchy(&self) -> Hierarchy {
        self.hierarchy
    }

    /// The units L2 evicted for the last access.
    pub fn l2_victims(&self) -> &[u64] {
        &self.victims
    }

    /// Whether either level holds `key` (`upper` is L1).
    pub fn holds(&self, upper: &dyn Policy, key: u64) -> bool {
        upper.contains(key) || self.policy.contains(key)
    }

    /// Removes `key` from both levels (an expired unit, [`crate::ttl`]);
    /// returns whether either held it.
    pub fn remove(&mut self, upper: &mut dyn Policy, key: u64) -> bool {
        self.upper.remove(&key);
        let in_upper = upper.remove(key);
        let in_lower = self.policy.remove(key);
        in_upper || in_lower
    }

    /// Serves `access` from `upper` (L1) and this level, records it in
    /// `metrics`, and says where it was served. `victims` is scratch space;
    /// it is left holding the units L1 evicted for this access.
    #[inline]
    pub fn access(
        &mut self,
        upper: &mut dyn Policy,
        access: &Access,
        victims: &mut Vec<u64>,
        metrics: &mut Metrics,
    ) -> Served {
        victims.clear();
        self.victims.clear();
        let served = match self.hierarchy {
            Hierarchy::Inclusive => self.inclusive(upper, access, victims),
            Hierarchy::Exclusive => self.exclusive(upper, access, victims),
        };
        metrics.record_levels(access, served, victims.len(), self.victims.len());
        served
    }

    fn inclusive(
        &mut self,
        upper: &mut dyn Policy,
        access: &Access,
        victims: &mut Vec<u64>,
    ) -> Served {
        if upper.lookup(access) {
            if access.op == Op::Write {
                // The DRAM cache writes through; the tier caches the write.
                self.policy.access(access, &mut self.victims);
            }
            return Served::L1;
        }
        let hit = self.policy.access(access, &mut self.victims);
        upper.admit(access, victims);
        if hit { Served::L2 } else { Served::Miss }
    }

    fn exclusive(
        &mut self,
        upper: &mut dyn Policy,
        access: &Access,
        victims: &mut Vec<u64>,
    ) -> Served {
        if upper.lookup(access) {
            if let Some(last) = self.upper.get_mut(&access.key) {
                *last = *access;
            }
            return Served::L1;
        }
        let served = if self.policy.remove(access.key) {
            Served::L2
        } else {
            Served::Miss
        };
        if upper.admit(access, victims) {
            self.upper.insert(access.key, *access);
        } else {
            self.demote(access, access.time);
        }
        for victim in victims.iter() {
            if let Some(last) = self.upper.remove(victim) {
                self.demote(&last, access.time);
            }
        }
        served
    }

    /// Puts a unit leaving L1 into L2, at logical time `now`.
    fn demote(&mut self, last: &Access, now: u64) {
        let unit = Access {
            op: Op::Read,
            time: now,
            ..*last
        };
        // Exclusive: L2 never holds what L1 held, so this is a miss (which
        // policies with history record) before the admission.
        let resident = self.policy.lookup(&unit);
        debug_assert!(!resident, "exclusive levels share unit {}", unit.key);
        if !resident {
            self.policy.admit(&unit, &mut self.victims);
        }
    }
}
