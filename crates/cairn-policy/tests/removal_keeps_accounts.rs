//! Guards `remove` in every policy of `PolicyConfig::NAMES`: removals
//! interleaved with accesses must report residency truthfully, keep `len`
//! and `used` right (a SIEVE hand or an LFU bucket left pointing at a removed
//! unit, or a ghost counted as resident, would break them), and removing
//! every key must leave the cache empty.

use cairn_policy::{Access, Capacity, Policy, PolicyConfig};
use proptest::prelude::*;

/// Keys skewed towards 0 so that hits, ghosts and promotions happen; a key
/// keeps one size.
fn trace_strategy() -> impl Strategy<Value = Vec<Access>> {
    prop::collection::vec((0u64..40, 0u64..40), 1..400).prop_map(|pairs| {
        pairs
            .into_iter()
            .enumerate()
            .map(|(time, (a, b))| {
                let key = a.min(b);
                Access::read(key, (key % 5) as u32 + 1, time as u64)
            })
            .collect()
    })
}

fn check_accounts(policy: &dyn Policy, keys: u64) {
    let resident = (0..keys).filter(|&k| policy.contains(k)).count();
    assert_eq!(resident, policy.len(), "{}: len", policy.name());
    assert!(
        policy.used() <= policy.capacity().limit(),
        "{}: used",
        policy.name()
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

fn assert_remove_consistent(policy: &mut dyn Policy, trace: &[Access]) {
    let mut victims = vec![];
    for (step, access) in trace.iter().enumerate() {
        policy.access(access, &mut victims);
        if step % 5 == 3 {
            let key = trace[step / 2].key;
            let resident = policy.contains(key);
            assert_eq!(
                policy.remove(key),
                resident,
                "{}: step {step}: remove({key})",
                policy.name()
            );
            assert!(!policy.contains(key));
        }
        check_accounts(policy, 40);
    }
    for access in trace {
        policy.remove(access.key);
    }
    assert_eq!(
        (policy.len(), policy.used()),
        (0, 0),
        "{}: emptied by removal",
        policy.name()
    );
}

proptest! {
    #[test]
    fn removals_keep_the_accounts(trace in trace_strategy(), cap in 4u64..40, bytes: bool) {
        let capacity = if bytes { Capacity::Bytes(cap) } else { Capacity::Objects(cap) };
        let mut built = 0;
        for name in PolicyConfig::NAMES {
            let config = PolicyConfig::default_for(name).expect("registered");
            // Some policies refuse tiny capacities (a segment would be empty).
            if let Ok(mut policy) = config.build(capacity) {
                assert_remove_consistent(policy.as_mut(), &trace);
                built += 1;
            }
        }
        prop_assert!(built >= PolicyConfig::NAMES.len() / 2, "only {} policies built at {:?}", built, capacity);
    }
}
