//! The [`Policy`] trait: what every replacement and admission policy provides.

use crate::{Access, Capacity};

/// How far ahead a [`Policy::prefetch`] hint is, and so what it may read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ahead {
    /// Far: start loading the index slots where the key would be; read nothing.
    Far,
    /// Nearer: read the index (warmed by `Far`) and start loading the key's
    /// entry.
    Near,
    /// Next: read the entry (warmed by `Near`) and start loading what the
    /// access will change around it (list neighbours).
    Next,
}

/// What a file-aware policy ([`Policy::file_state`]) knows of its files now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FileState {
    /// The preface size, in blocks: a file's blocks with a smaller index go
    /// to the front-part cache.
    pub preface_blocks: u64,
    /// Files tracked as active.
    pub active_files: u64,
}

/// A cache replacement (and optionally admission) policy.
///
/// Policies hold keys and sizes only, never data, and do no I/O: the same
/// object runs inside the simulator and inside the engine's block cache.
///
/// # Protocol
/// For each access the caller first calls [`lookup`](Policy::lookup). On a
/// hit the policy has updated its state and the access is done. On a miss the
/// caller fetches the data and then calls [`admit`](Policy::admit) with the
/// *same* access (the engine may skip `admit`, for instance when the fetch
/// failed; the policy stays consistent). `lookup` on a miss may record the
/// access in history that holds no data (ghost lists, frequency sketches),
/// but never changes what is resident.
///
/// # Guarantees
/// - After every call, `used() <= capacity().limit()`.
/// - A key is resident after `admit` returned `true` and until it is named in
///   a `victims` vector or removed with [`remove`](Policy::remove).
/// - A unit larger than the whole capacity is never admitted.
/// - In the steady state (no growth in the number of resident keys or of
///   history), no call allocates.
pub trait Policy: Send {
    /// Short name as printed in tables (`lru`, `s3fifo`, `ons`).
    fn name(&self) -> &'static str;

    /// Looks `access.key` up. On a hit updates the policy's state and returns
    /// `true`; on a miss returns `false` and leaves the resident set unchanged.
    fn lookup(&mut self, access: &Access) -> bool;

    /// Admits a key that [`lookup`](Policy::lookup) just reported missing.
    /// Appends every key evicted to make room to `victims` (without clearing
    /// it). Returns whether the key was admitted; an admission policy, or a
    /// unit larger than the cache, may say no.
    fn admit(&mut self, access: &Access, victims: &mut Vec<u64>) -> bool;

    /// Removes a resident key (invalidation). Returns whether it was resident.
    fn remove(&mut self, key: u64) -> bool;

    /// Whether `key` is resident. Changes nothing.
    fn contains(&self, key: u64) -> bool;

    /// Number of resident keys.
    fn len(&self) -> usize;

    /// Whether nothing is resident.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Occupancy, in the unit of [`capacity`](Policy::capacity).
    fn used(&self) -> u64;

    /// The capacity the policy was built with.
    fn capacity(&self) -> Capacity;

    /// A hint that `key` will be accessed `ahead` accesses from now, so the
    /// policy may start loading what that access will touch. A replay gives
    /// each future key three hints, [`Ahead::Far`] first, so each stage can
    /// read what the one before loaded. Changes nothing observable; the
    /// default does nothing.
    #[inline]
    fn prefetch(&self, key: u64, ahead: Ahead) {
        let _ = (key, ahead);
    }

    /// Appends to `victims` the keys that earlier bare
    /// [`lookup`](Policy::lookup)s evicted and hold for the next `admit`
    /// (LIRS and SLRU, whose hits can evict), and forgets them. A caller that
    /// skips `admit` after a miss (an admission filter that refused it) calls
    /// this instead, so held victims still leave. The default holds none.
    fn take_held_victims(&mut self, victims: &mut Vec<u64>) {
        let _ = victims;
    }

    /// A file-aware policy's state, for a server's metrics (`dual`: its
    /// preface size and active files); `None` for a policy that keeps no
    /// per-file state, the default. Read when metrics are read, never per
    /// access.
    fn file_state(&self) -> Option<FileState> {
        None
    }

    /// `lookup`, then `admit` on a miss: the simulator's one call per access.
    /// Returns whether the access hit.
    fn access(&mut self, access: &Access, victims: &mut Vec<u64>) -> bool {
        if self.lookup(access) {
            true
        } else {
            self.admit(access, victims);
            false
        }
    }
}
