//! A cache hit allocates nothing: once a block is resident, reading it again
//! is a hash lookup, a policy update and a
//! reference-count increment, counted with relaxed atomics. A counting global
//! allocator checks it for ONS (the default) and LRU.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

use cairn_files::{FileCache, FileCacheConfig, MemoryBackend};
use cairn_policy::PolicyConfig;

struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards to the system allocator unchanged; only counts calls.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract is the system allocator's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `alloc` above, i.e. from `System`.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn hits_allocate_nothing() {
    for policy in ["ons", "lru"] {
        let cache = FileCache::new(
            MemoryBackend::new(),
            &FileCacheConfig {
                block_size_bytes: 256 << 10,
                capacity_bytes: 8 << 20,
                policy: PolicyConfig::default_for(policy).expect(policy),
                shards: 4,
                prefetch_window_blocks: 0,
            },
        )
        .expect("cache");
        cache
            .backend()
            .put("f", vec![5; 2 << 20], SystemTime::UNIX_EPOCH);
        let object = cache.open("f").expect("open");
        // Warm: every block loaded, and hit often enough for the policy's
        // own structures (ONS moves blocks from NEW to OLD) to reach size.
        for round in 0..1000 {
            cache.block("f", &object, round % 8).expect("warm");
        }
        let before = ALLOCATIONS.load(Ordering::Relaxed);
        let mut sum = 0u64;
        for round in 0..10_000u64 {
            let block = cache.block("f", &object, round % 8).expect("hit");
            sum += u64::from(block[(round % 1000) as usize]);
        }
        let allocated = ALLOCATIONS.load(Ordering::Relaxed) - before;
        assert_eq!(
            allocated, 0,
            "{policy}: {allocated} allocations in 10,000 hits"
        );
        assert_eq!(sum, 50_000);
        let stats = cache.stats();
        assert_eq!((stats.hits, stats.misses), (10_992, 8), "{policy}");
    }
}
