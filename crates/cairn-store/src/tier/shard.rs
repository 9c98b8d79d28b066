//! One shard of the tier: the blocks whose hash falls in it, their slots,
//! their policy instance, and the bookkeeping the crash rules need.
//!
//! The map holds every cached block of the shard: its slot, with
//! [`EVICTING`] set while the policy has let it go but its dirty data is
//! still being written back (it is still read from the cache then), or
//! [`LOADING`] while a read miss the policy admitted fetches it (the policy
//! decides at the lookup, block by block in request order, exactly as `cairn
//! sim` does; the data is installed after). Every block the policy holds is
//! in the map without `EVICTING`, and the other way round (invariant 1 of
//! [`Shard::verify`]).

use cairn_policy::{Access, Admission, NEVER, Occupancy, Op, Policy};

/// A map value's flag: evicted by the policy, dirty, being written back.
pub(super) const EVICTING: u32 = 1 << 31;
/// A map value: admitted on a read miss, its data on the way. A write or a
/// drop that replaces it makes the reader's install give up. (No slot has
/// this number: the geometry keeps slots below 2^31 − 1.)
pub(super) const LOADING: u32 = EVICTING - 1;

/// The slot a map value names, if it names one.
#[inline]
pub(super) fn slot_of(v: u32) -> Option<u32> {
    (v != LOADING).then_some(v & !EVICTING)
}

/// A shard's state, behind its mutex.
pub(super) struct Shard {
    /// Cached block → slot (| [`EVICTING`]).
    pub map: hashbrown::HashMap<u64, u32>,
    pub policy: Box<dyn Policy>,
    /// The promotion filter (none: promote every miss).
    pub admission: Option<Box<dyn Admission>>,
    /// Dirty blocks whose data the backing device holds, not yet flushed:
    /// (block, slot, backing epoch of the write). Clean once that epoch is
    /// durable.
    pub written: Vec<(u64, u32, u64)>,
    /// Dirty copies a write to the backing device superseded: (block, slot,
    /// backing epoch of that write). Out of the map at once (reads go to
    /// the backing device); the `Drop` record waits until that write is
    /// durable, or a crash could leave neither copy (the drop durable, the
    /// backing write lost).
    pub dropping: Vec<(u64, u32, u64)>,
    /// Blocks whose clean copy was dropped by a record not yet durable: a
    /// backing write of one waits until the journal is durable through the
    /// sequence given (else a crash could bring the stale copy back).
    pub hazards: hashbrown::HashMap<u64, u64>,
    /// Blocks written to the backing device and not yet flushed there (the
    /// backing epoch of the write; `u64::MAX` while in flight): a promotion
    /// of one is recorded dirty, so a crash cannot leave a clean copy of
    /// data the backing device lost.
    pub pending: hashbrown::HashMap<u64, u64>,
    /// Bumped before and after every client write that goes to the backing
    /// device: a promotion whose lookup saw another value gives up (its
    /// backing read may have raced the write).
    pub backing_writes: u64,
    /// Scratch for the policy's victims.
    pub victims: Vec<u64>,
    /// Logical time: accesses so far.
    pub time: u64,
}

/// A dirty block the policy evicted: written back before its slot is freed.
pub(super) type Evicted = (u64, u32);

impl Shard {
    pub(super) fn new(policy: Box<dyn Policy>, admission: Option<Box<dyn Admission>>) -> Self {
        Self {
            map: hashbrown::HashMap::new(),
            policy,
            admission,
            written: Vec::new(),
            dropping: Vec::new(),
            hazards: hashbrown::HashMap::new(),
            pending: hashbrown::HashMap::new(),
            backing_writes: 0,
            victims: Vec::new(),
            time: 0,
        }
    }

    /// The policy's access for `block`.
    pub(super) fn access(&mut self, block: u64, size: u32, op: Op) -> Access {
        let time = self.time;
        self.time += 1;
        Access {
            key: block,
            size,
            op,
            object: 0,
            block,
            group: 0,
            time,
            clock: 0,
            next: NEVER,
        }
    }

    /// Shows the filter an access the policy looked up.
    pub(super) fn record(&mut self, access: &Access, hit: bool) {
        if let Some(filter) = self.admission.as_mut() {
            filter.record(access, hit);
        }
    }

    /// Whether a read miss may be promoted (the filter's say, counting it).
    pub(super) fn promote(&mut self, access: &Access) -> bool {
        let occupancy = Occupancy {
            used: self.policy.used(),
            limit: self.policy.capacity().limit(),
        };
        self.admission
            .as_mut()
            .is_none_or(|filter| filter.admit(access, occupancy))
    }

    /// Checks invariant 1: the policy holds exactly the map's blocks that
    /// are not evicting.
    pub(super) fn verify(&self) -> Result<(), String> {
        let held = self.map.values().filter(|&&v| v & EVICTING == 0).count();
        if held != self.policy.len() {
            return Err(format!(
                "invariant 1: the map holds {held} blocks, the policy {}",
                self.policy.len()
            ));
        }
        for (&block, &v) in &self.map {
            if (v & EVICTING == 0) != self.policy.contains(block) {
                return Err(format!(
                    "invariant 1: block {block} (slot {}, evicting {}) disagrees with the policy",
                    v & !EVICTING,
                    v & EVICTING != 0
                ));
            }
        }
        Ok(())
    }
}
