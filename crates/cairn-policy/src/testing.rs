//! Test support shared by every policy's tests: invariant checks, comparison
//! against a naive reference model, and proptest strategies for traces.

use crate::{Access, Capacity, Policy};
use proptest::prelude::*;

/// A naive, obviously-correct model of a policy (O(n) per access is fine).
pub trait Reference {
    /// Processes one access; returns whether it hit and the keys evicted.
    fn access(&mut self, access: &Access) -> (bool, Vec<u64>);
}

/// Checks the invariants every policy guarantees.
pub fn check_invariants(policy: &dyn Policy) {
    let capacity = policy.capacity().limit();
    assert!(
        policy.used() <= capacity,
        "{}: used {} exceeds capacity {}",
        policy.name(),
        policy.used(),
        capacity
    );
    if let Capacity::Objects(_) = policy.capacity() {
        assert_eq!(
            policy.used(),
            policy.len() as u64,
            "{}: object count",
            policy.name()
        );
    }
}

/// Replays `trace` through `policy` and `reference` side by side; panics at the
/// first access where hits or victims differ, naming the step.
pub fn assert_matches_reference(
    policy: &mut dyn Policy,
    reference: &mut dyn Reference,
    trace: &[Access],
) {
    let mut victims = Vec::new();
    for (step, access) in trace.iter().enumerate() {
        victims.clear();
        let hit = policy.access(access, &mut victims);
        let (expected_hit, mut expected_victims) = reference.access(access);
        victims.sort_unstable();
        expected_victims.sort_unstable();
        assert_eq!(
            (hit, &victims),
            (expected_hit, &expected_victims),
            "{}: step {step}, access {access:?}: (hit, victims) differ from the reference",
            policy.name()
        );
        check_invariants(policy);
        for victim in &victims {
            assert!(
                !policy.contains(*victim),
                "{}: victim {victim} still resident",
                policy.name()
            );
        }
    }
}

/// Replays `trace`, checking invariants and that every admitted key is resident
/// and every victim is not; returns the number of hits.
pub fn replay_checked(policy: &mut dyn Policy, trace: &[Access]) -> usize {
    let mut victims = Vec::new();
    let mut hits = 0;
    for access in trace {
        victims.clear();
        if policy.lookup(access) {
            hits += 1;
            assert!(
                policy.contains(access.key),
                "{}: hit key not resident",
                policy.name()
            );
        } else {
            assert!(
                !policy.contains(access.key),
                "{}: missed key resident",
                policy.name()
            );
            let admitted = policy.admit(access, &mut victims);
            assert_eq!(
                admitted,
                policy.contains(access.key),
                "{}: admit result",
                policy.name()
            );
            assert!(
                !victims.contains(&access.key),
                "{}: evicted the key it admitted",
                policy.name()
            );
        }
        for victim in &victims {
            assert!(
                !policy.contains(*victim),
                "{}: victim {victim} still resident",
                policy.name()
            );
        }
        check_invariants(policy);
    }
    hits
}

/// A read of `key`, size 1, at logical time 0 (for policies that number
/// time themselves).
pub fn read(key: u64) -> Access {
    Access::read(key, 1, 0)
}

/// Runs [`read`]s of `keys` through `policy`; returns the hits and every
/// victim in order.
pub fn run_keys(policy: &mut dyn Policy, keys: impl IntoIterator<Item = u64>) -> (u64, Vec<u64>) {
    let (mut hits, mut victims) = (0, Vec::new());
    for key in keys {
        hits += u64::from(policy.access(&read(key), &mut victims));
    }
    (hits, victims)
}

/// Builds accesses from `(key, size)` pairs, with logical times 0, 1, 2, ...
/// and `next` filled in (so OPT can use the same traces).
pub fn accesses(items: &[(u64, u32)]) -> Vec<Access> {
    let mut trace: Vec<Access> = items
        .iter()
        .enumerate()
        .map(|(time, &(key, size))| Access::read(key, size, time as u64))
        .collect();
    let mut next_seen = hashbrown::HashMap::new();
    for access in trace.iter_mut().rev() {
        access.next = next_seen
            .insert(access.key, access.time)
            .unwrap_or(crate::NEVER);
    }
    trace
}

/// Accesses of unit size to the given keys.
pub fn keys(keys: &[u64]) -> Vec<Access> {
    accesses(&keys.iter().map(|&k| (k, 1)).collect::<Vec<_>>())
}

/// A random trace over `0..key_space` of up to `max_len` accesses, skewed so
/// that low keys recur (hits happen), with sizes 1 when `max_size` is 1 and
/// `1..=max_size` otherwise (a key keeps one size).
pub fn trace_strategy(
    key_space: u64,
    max_len: usize,
    max_size: u32,
) -> impl Strategy<Value = Vec<Access>> {
    prop::collection::vec((0..key_space, 0..key_space), 1..max_len).prop_map(move |pairs| {
        let items: Vec<(u64, u32)> = pairs
            .into_iter()
            .map(|(a, b)| {
                let key = a.min(b); // skew towards low keys
                let size = (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40) as u32 % max_size + 1;
                (key, size)
            })
            .collect();
        accesses(&items)
    })
}
