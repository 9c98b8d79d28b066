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

use cairn_policy::{Access, KeyMap, NEVER};
use cairn_trace::TraceError;

use crate::size::WorkingSet;

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
    /// Next-access time per access (indexed by logical time), when asked for.
    pub next_times: Option<Arc<[u64]>>,
}

/// Reads `accesses` once. With `want_next_times`, also computes every access's
/// next-access time (see the module docs for the memory this costs).
///
/// `scaling_factor` reproduces libCacheSim's sampling of very large traces in
/// `cal_working_set_size`: with a factor `s > 1` only objects whose id is a
/// multiple of `s` are counted and the counts multiplied by `s`
/// (libCacheSim uses 11 above 1 GiB of trace file and 101 above 5 GiB); pass 1
/// to count exactly.
pub fn prepass(
    accesses: impl Iterator<Item = Result<Access, TraceError>>,
    want_next_times: bool,
    scaling_factor: u64,
) -> Result<Prepass, TraceError> {
    let scaling_factor = scaling_factor.max(1);
    let mut seen: KeyMap<()> = KeyMap::default();
    let mut keys: Vec<u64> = Vec::new();
    let mut out = Prepass::default();
    for access in accesses {
        let access = access?;
        out.accesses += 1;
        out.bytes += u64::from(access.size);
        out.carries_next |= access.next != NEVER;
        if want_next_times {
            keys.push(access.key);
        }
        if access.object % scaling_factor == 0 && seen.insert(access.key, ()).is_none() {
            out.working_set.objects += 1;
            out.working_set.bytes += u64::from(access.size);
        }
    }
    out.working_set.objects *= scaling_factor;
    out.working_set.bytes *= scaling_factor;
    if want_next_times {
        out.next_times = Some(next_access_times(keys).into());
    }
    Ok(out)
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
        let p = prepass(accesses, true, 1).unwrap();
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
}
