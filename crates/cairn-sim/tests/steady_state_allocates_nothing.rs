//! Guards the design rule "no allocation per access on hot paths": once a
//! policy's resident set and history have reached their bounds, replaying more
//! accesses must not allocate at all. A counting global allocator sees every
//! allocation in this test binary, so the test runs one policy at a time on one
//! thread.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use cairn_policy::{Access, AdmissionConfig, Capacity, Policy, PolicyConfig};

struct Counting;

static COUNTING: AtomicBool = AtomicBool::new(false);
static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
/// Held by each test for its whole run: the counter is global, and the test
/// harness runs tests on several threads.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

// SAFETY: forwards every call unchanged to the system allocator; only counts.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// A skewed, deterministic key stream over `keys` keys (xorshift; no allocation).
fn trace(len: usize, keys: u64, seed: u64) -> Vec<Access> {
    let mut state = seed | 1;
    (0..len as u64)
        .map(|time| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let a = state % keys;
            let b = (state >> 32) % keys;
            let key = a.min(b);
            let mut access = Access::read(key, 4096, time);
            access.object = key / 64;
            access.block = key % 64;
            access.group = (key % 3) as u16;
            access
        })
        .collect()
}

/// `trace` with each access's `next` set to its key's next access within it.
fn with_next(trace: &[Access]) -> Vec<Access> {
    let mut trace = trace.to_vec();
    let mut seen = std::collections::HashMap::new();
    for access in trace.iter_mut().rev() {
        access.next = seen
            .insert(access.key, access.time)
            .unwrap_or(cairn_policy::NEVER);
    }
    trace
}

/// Rounds of `measured` a policy gets to reach a round that allocates nothing.
///
/// Cairn's maps are `hashbrown` tables with a per-process random hash seed, and
/// a table with deleted entries decides to grow (one allocation, doubling it)
/// or to rehash in place by where its tombstones fell. So a table whose
/// population hovers near half its size grows once at a moment that changes
/// from run to run (CI saw LIRS's map grow once in 200,000 accesses after a
/// warm-up of 2,000,000). A doubling happens once; an allocation per access
/// happens in every round. The test asks for one clean round out of three.
const ROUNDS: usize = 3;

/// Warms `policy` up on `warm`, then counts the allocations of each replay of
/// `measured`, stopping at the first round that allocates nothing.
fn allocations(policy: &mut dyn Policy, warm: &[Access], measured: &[Access]) -> Vec<u64> {
    let mut victims = Vec::with_capacity(1024);
    for access in warm {
        victims.clear();
        policy.access(access, &mut victims);
    }
    let mut rounds = Vec::with_capacity(ROUNDS);
    for _ in 0..ROUNDS {
        ALLOCATIONS.store(0, Ordering::Relaxed);
        COUNTING.store(true, Ordering::Relaxed);
        for access in measured {
            victims.clear();
            policy.access(access, &mut victims);
        }
        COUNTING.store(false, Ordering::Relaxed);
        let round = ALLOCATIONS.load(Ordering::Relaxed);
        rounds.push(round);
        if round == 0 {
            break;
        }
    }
    rounds
}

/// True when no round came out clean.
fn allocates(rounds: &[u64]) -> bool {
    rounds.last().is_none_or(|&last| last > 0)
}

#[test]
fn no_policy_allocates_in_the_steady_state() {
    let _serial = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let warm = trace(400_000, 20_000, 7);
    let measured = trace(200_000, 20_000, 11);
    // Offline policies see next-access times, as in a replay (without them
    // `sieve-belady` admits nothing and the others run as their base).
    let (warm_next, measured_next) = (with_next(&warm), with_next(&measured));
    let mut failures = Vec::new();
    for name in PolicyConfig::NAMES {
        for capacity in [Capacity::Objects(2_000), Capacity::Bytes(2_000 * 4096)] {
            let config = PolicyConfig::default_for(name).expect("every listed name builds");
            let mut policy = config.build(capacity).expect("default config builds");
            let (warm, measured) = if config.needs_next_access() {
                (&warm_next, &measured_next)
            } else {
                (&warm, &measured)
            };
            let allocations = allocations(&mut *policy, warm, measured);
            println!(
                "{name:10} {capacity:?}: {allocations:?} allocations per round of {} accesses",
                measured.len()
            );
            if allocates(&allocations) {
                failures.push(format!("{name} {capacity:?}: {allocations:?}"));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "policies allocating in the steady state: {failures:?}"
    );
}

/// Every admission filter, in front of LRU and of the two policies whose hits
/// can hold victims (LIRS, S4LRU).
#[test]
fn no_admission_filter_allocates_in_the_steady_state() {
    let _serial = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    // Longer than the policies' warm-up: behind a filter fewer misses are
    // admitted, so LIRS's history takes longer to reach its bound (after
    // 400,000 accesses it still grew once in the next 200,000).
    let mut warm = trace(400_000, 20_000, 7);
    warm.extend(trace(1_600_000, 20_000, 9));
    let measured = trace(200_000, 20_000, 11);
    let mut failures = Vec::new();
    for filter in AdmissionConfig::NAMES {
        for name in ["lru", "lirs", "s4lru"] {
            for capacity in [Capacity::Objects(2_000), Capacity::Bytes(2_000 * 4096)] {
                let policy = PolicyConfig::default_for(name)
                    .expect("a listed name")
                    .build(capacity)
                    .expect("default config builds");
                let mut policy = AdmissionConfig::default_for(filter)
                    .expect("every listed filter")
                    .wrap(policy)
                    .expect("default filter builds");
                let allocations = allocations(&mut *policy, &warm, &measured);
                println!("{filter:10} {name:6} {capacity:?}: {allocations:?} allocations");
                if allocates(&allocations) {
                    failures.push(format!("{filter} {name} {capacity:?}: {allocations:?}"));
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "filters allocating in the steady state: {failures:?}"
    );
}

/// Two-level hierarchies (`--l2`), both modes: the second level and, when
/// exclusive, its map of L1's units must not allocate once both levels are
/// full. L1 policies include LIRS, whose hits hold victims.
#[test]
fn two_levels_allocate_nothing_in_the_steady_state() {
    use cairn_sim::{Hierarchy, Metrics, SecondLevel};
    let _serial = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut warm = trace(400_000, 20_000, 7);
    warm.extend(trace(1_600_000, 20_000, 9));
    let measured = trace(200_000, 20_000, 11);
    let mut failures = Vec::new();
    for hierarchy in [Hierarchy::Inclusive, Hierarchy::Exclusive] {
        for (l1, l2) in [("lru", "s3fifo"), ("lirs", "lru"), ("s3fifo", "arc")] {
            let build = |name: &str, objects: u64| {
                PolicyConfig::default_for(name)
                    .expect("a listed name")
                    .build(Capacity::Objects(objects))
                    .expect("default config builds")
            };
            let mut upper = build(l1, 1_000);
            let mut lower = SecondLevel::new(build(l2, 4_000), hierarchy);
            let mut metrics = Metrics::default();
            let mut victims = Vec::with_capacity(1024);
            for access in &warm {
                lower.access(&mut *upper, access, &mut victims, &mut metrics);
            }
            let mut rounds = Vec::with_capacity(ROUNDS);
            for _ in 0..ROUNDS {
                ALLOCATIONS.store(0, Ordering::Relaxed);
                COUNTING.store(true, Ordering::Relaxed);
                for access in &measured {
                    lower.access(&mut *upper, access, &mut victims, &mut metrics);
                }
                COUNTING.store(false, Ordering::Relaxed);
                let round = ALLOCATIONS.load(Ordering::Relaxed);
                rounds.push(round);
                if round == 0 {
                    break;
                }
            }
            println!("{hierarchy:?} {l1} over {l2}: {rounds:?} allocations per round");
            assert!(metrics.l2_hits > 0, "{hierarchy:?} {l1}/{l2}: L2 never hit");
            if allocates(&rounds) {
                failures.push(format!("{hierarchy:?} {l1}/{l2}: {rounds:?}"));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "two-level hierarchies allocating in the steady state: {failures:?}"
    );
}

/// TTL (`cairn sim --ttl`): the map of resident units' expiries must not
/// allocate once the policy is full, while units expire and come back. The
/// clock advances one second per 1,000 accesses and units live 2 s, so a
/// good share of hits find their unit expired. Policies include LIRS, whose
/// hits hold victims.
#[test]
fn ttl_allocates_nothing_in_the_steady_state() {
    use cairn_sim::{Expiring, Metrics, Stamp};
    let _serial = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut warm = trace(400_000, 20_000, 7);
    warm.extend(trace(1_600_000, 20_000, 9));
    let measured = trace(200_000, 20_000, 11);
    let stamp = |at: usize| {
        let now_us = at as u64 / 1_000 * 1_000_000;
        Stamp {
            now_us,
            expires_us: now_us + 2_000_000,
        }
    };
    let mut failures = Vec::new();
    for name in ["lru", "s3fifo", "lirs", "arc"] {
        let mut policy = PolicyConfig::default_for(name)
            .expect("a listed name")
            .build(Capacity::Objects(2_000))
            .expect("default config builds");
        let mut expiring = Expiring::new();
        let mut metrics = Metrics::default();
        let mut victims = Vec::with_capacity(1024);
        for (at, access) in warm.iter().enumerate() {
            expiring.access(&mut *policy, access, stamp(at), &mut victims, &mut metrics);
        }
        let mut rounds = Vec::with_capacity(ROUNDS);
        let mut at = warm.len();
        for _ in 0..ROUNDS {
            ALLOCATIONS.store(0, Ordering::Relaxed);
            COUNTING.store(true, Ordering::Relaxed);
            for access in &measured {
                expiring.access(&mut *policy, access, stamp(at), &mut victims, &mut metrics);
                at += 1;
            }
            COUNTING.store(false, Ordering::Relaxed);
            let round = ALLOCATIONS.load(Ordering::Relaxed);
            rounds.push(round);
            if round == 0 {
                break;
            }
        }
        println!(
            "{name} with TTL: {rounds:?} allocations per round, {} expired",
            metrics.expired
        );
        assert!(metrics.expired > 0, "{name}: nothing expired");
        if allocates(&rounds) {
            failures.push(format!("{name}: {rounds:?}"));
        }
    }
    assert!(
        failures.is_empty(),
        "TTL allocating in the steady state: {failures:?}"
    );
}

/// TTL in a two-level hierarchy (`--ttl` with `--l2`), both modes: the one
/// map of expiries beside both levels must not allocate once both are full,
/// while units expire from either level and come back.
#[test]
fn ttl_in_two_levels_allocates_nothing_in_the_steady_state() {
    use cairn_sim::{Expiring, Hierarchy, Metrics, SecondLevel, Stamp};
    let _serial = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut warm = trace(400_000, 20_000, 7);
    warm.extend(trace(1_600_000, 20_000, 9));
    let measured = trace(200_000, 20_000, 11);
    let stamp = |at: usize| {
        let now_us = at as u64 / 1_000 * 1_000_000;
        Stamp {
            now_us,
            expires_us: now_us + 4_000_000,
        }
    };
    let mut failures = Vec::new();
    for hierarchy in [Hierarchy::Inclusive, Hierarchy::Exclusive] {
        for (l1, l2) in [("lru", "s3fifo"), ("lirs", "lru")] {
            let build = |name: &str, objects: u64| {
                PolicyConfig::default_for(name)
                    .expect("a listed name")
                    .build(Capacity::Objects(objects))
                    .expect("default config builds")
            };
            let mut upper = build(l1, 1_000);
            let mut lower = SecondLevel::new(build(l2, 4_000), hierarchy);
            let mut expiring = Expiring::new();
            let mut metrics = Metrics::default();
            let mut victims = Vec::with_capacity(1024);
            for (at, access) in warm.iter().enumerate() {
                expiring.access_levels(
                    &mut *upper,
                    &mut lower,
                    access,
                    stamp(at),
                    &mut victims,
                    &mut metrics,
                );
            }
            let mut rounds = Vec::with_capacity(ROUNDS);
            let mut at = warm.len();
            for _ in 0..ROUNDS {
                ALLOCATIONS.store(0, Ordering::Relaxed);
                COUNTING.store(true, Ordering::Relaxed);
                for access in &measured {
                    expiring.access_levels(
                        &mut *upper,
                        &mut lower,
                        access,
                        stamp(at),
                        &mut victims,
                        &mut metrics,
                    );
                    at += 1;
                }
                COUNTING.store(false, Ordering::Relaxed);
                let round = ALLOCATIONS.load(Ordering::Relaxed);
                rounds.push(round);
                if round == 0 {
                    break;
                }
            }
            println!(
                "{hierarchy:?} {l1} over {l2} with TTL: {rounds:?} allocations per round, \
                 {} expired, {} L2 hits, {} expiries held",
                metrics.expired,
                metrics.l2_hits,
                expiring.len()
            );
            assert!(
                metrics.expired > 0,
                "{hierarchy:?} {l1}/{l2}: nothing expired"
            );
            assert!(metrics.l2_hits > 0, "{hierarchy:?} {l1}/{l2}: L2 never hit");
            // Expiries of units neither level holds are forgotten.
            assert!(
                expiring.len() <= 5_000,
                "{hierarchy:?} {l1}/{l2}: {} expiries for at most 5,000 units",
                expiring.len()
            );
            if allocates(&rounds) {
                failures.push(format!("{hierarchy:?} {l1}/{l2}: {rounds:?}"));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "TTL in two levels allocating in the steady state: {failures:?}"
    );
}
