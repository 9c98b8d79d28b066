//! Seeded synthetic traces shared by the integration tests.

#![allow(dead_code)]

use cairn_policy::{Access, Op};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// `n` accesses over `keys` keys, skewed towards small keys (a key is the
/// minimum of two uniform draws), sizes in `sizes`, a third of them writes.
pub fn skewed(seed: u64, n: usize, keys: u64, sizes: std::ops::RangeInclusive<u32>) -> Vec<Access> {
    eprintln!("trace seed {seed}");
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..n)
        .map(|t| {
            let key = rng.random_range(0..keys).min(rng.random_range(0..keys));
            Access {
                key,
                // Each key keeps one size, as in the sample trace.
                size: *sizes.start() + (key as u32 % (sizes.end() - sizes.start() + 1)),
                op: if rng.random_range(0..3) == 0 {
                    Op::Write
                } else {
                    Op::Read
                },
                object: key,
                block: 0,
                group: (key % 2) as u16,
                time: t as u64,
                clock: 0,
                next: cairn_policy::NEVER,
            }
        })
        .collect()
}

/// `trace` with each access's `next` set to the time of its key's next
/// access (as the simulator's first pass sets it), so offline policies
/// (`opt`, `beladysize`) see the future.
pub fn with_next(mut trace: Vec<Access>) -> Vec<Access> {
    let mut seen = std::collections::HashMap::new();
    for access in trace.iter_mut().rev() {
        access.next = seen
            .insert(access.key, access.time)
            .unwrap_or(cairn_policy::NEVER);
    }
    trace
}
