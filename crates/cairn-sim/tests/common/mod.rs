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
                next: cairn_policy::NEVER,
            }
        })
        .collect()
}
