//! The first pass over a trace: working-set size, and next-access times for
//! OPT when the trace does not carry them.
//!
//! Memory: the working-set count keeps one map entry per distinct key
//! (≈ 16–24 bytes each). Next-access times keep **8 bytes per access** (the key
//! sequence, overwritten in place by the next-access times in a backward scan)
//! plus a map of distinct keys: 100 M accesses need about 800 MB. Only OPT needs
//! them, and only when the trace lacks them (block traces, or object traces
//! whose requests were filtered by operation).

use std::sync::Arc;

use cairn_policy::hint::prefetch;
use cairn_policy::{Access, KeyMap, NEVER};
use cairn_trace::TraceError;
use hashbrown::DefaultHashBuilder;
use std::hash::BuildHasher;

use crate::replay::Progress;
use crate::size::WorkingSet;
use crate::stream::AccessSource;

/// What the first pass found.
#[derive(Clone, Debug, Default)]
pub struct Prepass {
    /// Distinct keys and their bytes.
    pub working_set: WorkingSet,
    /// Accesses in the stream.
    pub accesses: u64,
    /// Bytes of all accesses.
    pub bytes: u64,
    /// Whether any access carries a next-access time from the trace.
    pub carries_next: bool,
    /// Next-access time per access (indexed by logical time), when asked for
    /// and the trace carries none of its own (`carries_next` false).
    pub next_times: Option<Arc<[u64]>>,
}

/// Reads `accesses` once. With `want_next_times`, also computes every access's
/// next-access time (see the module docs for the memory this costs), unless
/// the trace carries its own.
///
/// `scaling_factor` reproduces libCacheSim's sampling of very large traces in
/// `cal_working_set_size`: with a factor `s > 1` only objects whose id is a
/// multiple of `s` are counted and the counts multiplied by `s`
/// (libCacheSim uses 11 above 1 GiB of trace file and 101 above 5 GiB); pass 1
/// to count exactly.
pub fn prepass(
    mut accesses: impl AccessSource,
    want_next_times: bool,
    scaling_factor: u64,
    progress: &dyn Progress,
) -> Result<Prepass, TraceError> {
    let scaling_factor = scaling_factor.max(1);
    let mut seen = KeySet::default();
    let mut keys: Vec<u64> = Vec::new();
    let mut out = Prepass::default();
    let mut batch: Vec<Access> = Vec::with_capacity(BATCH + 256);
    loop {
        batch.clear();
        if accesses.fill(&mut batch, BATCH)? == 0 {
            break;
        }
        let mut bytes = 0;
        for (at, access) in batch.iter().enumerate() {
            if let Some(ahead) = batch.get(at + PREFETCH_AHEAD) {
                seen.prefetch(ahead.key);
            }
            bytes += u64::from(access.size);
            out.carries_next |= access.next != NEVER;
            if want_next_times && !out.carries_next {
                keys.push(access.key);
            }
            if access.object % scaling_factor == 0 && seen.insert(access.key) {
                out.working_set.objects += 1;
                out.working_set.bytes += u64::from(access.size);
            }
        }
        out.accesses += batch.len() as u64;
        out.bytes += bytes;
        progress.advance(batch.len() as u64, bytes);
    }
    out.working_set.objects *= scaling_factor;
    out.working_set.bytes *= scaling_factor;
    // A trace with next-access times of its own (oracleGeneral) is replayed
    // with those: the keys gathered before the first one are dropped
    // unused, and the second pass over them is skipped.
    if want_next_times && !out.carries_next {
        out.next_times = Some(next_access_times(keys).into());
    }
    Ok(out)
}

/// Accesses per batch of the first pass.
const BATCH: usize = 4096;

/// How far ahead the first pass prefetches the key set's slot. The set of a
/// large trace is far bigger than the core's caches and spans thousands of
/// 4 KiB pages, so a slot is a page walk and a memory read away: 16 ahead
/// left half the pass stalled on that load (zipf10m, 763,661 keys in a
/// 16 MiB set); 64 ahead made whole `-s 1%` runs 4–9 % faster.
const PREFETCH_AHEAD: usize = 64;

/// The set of distinct keys: linear probing over the keys themselves, at most
/// half full, so a future key's slot can be prefetched (one cache line) while
/// the keys before it are counted. Key 0 marks an empty slot and is tracked
/// apart. Only grows; the first pass never removes.
struct KeySet {
    slots: Vec<u64>,
    mask: usize,
    len: usize,
    has_zero: bool,
    hasher: DefaultHashBuilder,
}

impl Default for KeySet {
    fn default() -> Self {
        Self {
            slots: vec![0; 1024],
            mask: 1023,
            len: 0,
            has_zero: false,
            hasher: DefaultHashBuilder::default(),
        }
    }
}

impl KeySet {
    #[inline]
    fn home(&self, key: u64) -> usize {
        (self.hasher.hash_one(key) >> 32) as usize & self.mask
    }

    #[inline]
    fn prefetch(&self, key: u64) {
        prefetch(&self.slots[self.home(key)]);
    }

    /// Adds `key`; returns whether it was new.
    #[inline]
    fn insert(&mut self, key: u64) -> bool {
        if key == 0 {
            return !std::mem::replace(&mut self.has_zero, true);
        }
        let mut at = self.home(key);
        loop {
            match self.slots[at] {
                0 => break,
                k if k == key => return false,
                _ => at = (at + 1) & self.mask,
            }
        }
        self.slots[at] = key;
        self.len += 1;
        if self.len * 2 > self.slots.len() {
            self.grow();
        }
        true
    }

    #[cold]
    fn grow(&mut self) {
        let size = self.slots.len() * 2;
        let old = std::mem::replace(&mut self.slots, vec![0; size]);
        self.mask = self.slots.len() - 1;
        for key in old.into_iter().filter(|&k| k != 0) {
            let mut at = self.home(key);
            while self.slots[at] != 0 {
                at = (at + 1) & self.mask;
            }
            self.slots[at] = key;
        }
    }
}

/// Turns a key sequence into next-access times, in place: element `t` becomes
/// the index of the next occurrence of `keys[t]`, or [`NEVER`].
pub fn next_access_times(mut keys: Vec<u64>) -> Vec<u64> {
    let mut last: KeyMap<u64> = KeyMap::default();
    for t in (0..keys.len()).rev() {
        let key = keys[t];
        keys[t] = last.insert(key, t as u64).unwrap_or(NEVER);
    }
    keys
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        #[test]
        fn key_set_counts_distinct_keys(keys in proptest::collection::vec(0u64..5000, 0..20_000)) {
            let mut set = KeySet::default();
            let mut model = std::collections::HashSet::new();
            for key in keys {
                set.prefetch(key);
                proptest::prop_assert_eq!(set.insert(key), model.insert(key));
            }
        }
    }

    #[test]
    fn next_access_times_point_at_the_next_occurrence() {
        assert_eq!(
            next_access_times(vec![1, 2, 1, 3, 2, 1]),
            [2, 4, 5, NEVER, NEVER, NEVER]
        );
    }

    #[test]
    fn working_set_counts_each_key_once_at_its_first_size() {
        let accesses = [(1, 10), (2, 20), (1, 99), (3, 30)]
            .into_iter()
            .enumerate()
            .map(|(t, (k, s))| Ok(Access::read(k, s, t as u64)));
        let p = prepass(
            crate::FromIter(accesses),
            true,
            1,
            &crate::replay::NoProgress,
        )
        .unwrap();
        assert_eq!(
            p.working_set,
            WorkingSet {
                objects: 3,
                bytes: 60
            }
        );
        assert_eq!((p.accesses, p.bytes, p.carries_next), (4, 159, false));
        assert_eq!(&p.next_times.unwrap()[..], &[2, NEVER, NEVER, NEVER]);
    }

    #[test]
    fn a_trace_with_its_own_next_times_is_not_given_computed_ones() {
        // The first access is a one-hit wonder (NEVER), as in oracleGeneral.
        let accesses = [(1, NEVER), (2, 3), (3, NEVER), (2, NEVER)]
            .into_iter()
            .enumerate()
            .map(|(t, (k, next))| {
                Ok(Access {
                    next,
                    ..Access::read(k, 1, t as u64)
                })
            });
        let p = prepass(
            crate::FromIter(accesses),
            true,
            1,
            &crate::replay::NoProgress,
        )
        .unwrap();
        assert!(p.carries_next);
        assert!(p.next_times.is_none());
        assert_eq!((p.accesses, p.working_set.objects), (4, 3));
    }
}
