//! The cache is invisible: any sequence of reads, writes and discards through
//! it returns what the same sequence returns on a plain byte array, whatever
//! the policy, write mode, block size and readahead or prefetcher, with a
//! cache small enough to evict all the time.
#![allow(clippy::unwrap_used)]

use cairn_policy::prefetch::obl::OblConfig;
use cairn_policy::{PolicyConfig, PrefetchConfig};
use cairn_store::{BlockCache, CacheConfig, Device, MemoryDevice, WriteMode};
use proptest::prelude::*;

/// 17 blocks of 4 KiB and a short one: the last block is partial.
const LEN: u64 = 17 * 4096 + 1000;

#[derive(Clone, Debug)]
enum Op {
    Read { offset: u64, len: u64 },
    Write { offset: u64, len: u64, byte: u8 },
    Discard { offset: u64, len: u64 },
    Get { block: u64 },
}

fn range() -> impl Strategy<Value = (u64, u64)> {
    (0..LEN).prop_flat_map(|offset| (Just(offset), 0..=(LEN - offset).min(40_000)))
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => range().prop_map(|(offset, len)| Op::Read { offset, len }),
        3 => (range(), any::<u8>()).prop_map(|((offset, len), byte)| Op::Write { offset, len, byte }),
        1 => range().prop_map(|(offset, len)| Op::Discard { offset, len }),
        2 => (0..18u64).prop_map(|block| Op::Get { block }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]
    #[test]
    fn reads_through_the_cache_equal_the_model(
        ops in prop::collection::vec(op(), 1..60),
        policy in prop::sample::select(vec!["lru", "lfu", "ons", "cost", "s3fifo", "arc", "tinylfu"]),
        mode in prop::sample::select(vec![WriteMode::Update, WriteMode::Invalidate, WriteMode::Allocate]),
        readahead in any::<bool>(),
        prefetch in prop::sample::select(vec!["", "obl", "pg", "mithril"]),
        block_shift in 12u32..=13,
    ) {
        let block = 1u64 << block_shift;
        let cache = BlockCache::new(
            MemoryDevice::new(LEN),
            &CacheConfig {
                block_size_bytes: block,
                capacity_bytes: 4 * block,
                policy: PolicyConfig::default_for(policy).unwrap(),
                shards: 1,
                write_mode: mode,
                readahead_bytes: if readahead { 2 * block } else { 0 },
                prefetch: PrefetchConfig::default_for(prefetch).map(|config| match config {
                    // Fire at once on a short run, so a 60-op test prefetches.
                    PrefetchConfig::Obl(_) => PrefetchConfig::Obl(OblConfig {
                        sequential_confidence_k: 1,
                    }),
                    other => other,
                }),
                ..CacheConfig::default()
            },
        )
        .unwrap();
        let mut model = vec![0u8; LEN as usize];
        for op in ops {
            match op {
                Op::Read { offset, len } => {
                    let mut got = vec![0xEE; len as usize];
                    cache.read_at(&mut got, offset).unwrap();
                    prop_assert_eq!(&got[..], &model[offset as usize..(offset + len) as usize]);
                }
                Op::Write { offset, len, byte } => {
                    let data = vec![byte; len as usize];
                    cache.write_at(&data, offset).unwrap();
                    model[offset as usize..(offset + len) as usize].copy_from_slice(&data);
                }
                Op::Discard { offset, len } => {
                    cache.discard(offset, len).unwrap();
                    // The memory device zeroes a discarded range.
                    model[offset as usize..(offset + len) as usize].fill(0);
                }
                Op::Get { block: index } => {
                    if index * block < LEN {
                        let got = cache.get(index).unwrap();
                        let start = (index * block) as usize;
                        let end = (start + block as usize).min(LEN as usize);
                        prop_assert_eq!(&got[..], &model[start..end]);
                    } else {
                        prop_assert!(cache.get(index).is_err());
                    }
                }
            }
        }
        let m = cache.metrics();
        prop_assert!(m.resident_blocks <= 4);
        prop_assert_eq!(m.detached_loads, 0, "no write raced a load");
    }
}
