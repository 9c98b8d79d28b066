//! TTL (`cairn sim --ttl`, a trace's own TTLs) counts what a naive model
//! counts: a map of key → expiry beside a plain LRU list, as libCacheSim
//! defines it — the expiry is set when a unit is inserted (the request's TTL
//! if it has one and trace TTLs count, else the default, else never), a hit
//! does not refresh it, an access at a time strictly above it removes the
//! unit and misses. Guards the order of those steps through the real replay
//! (inline and threaded, chunks cut mid-trace), and that every policy's
//! `remove` and the lookup-then-admit path agree with the plain replay when
//! nothing expires. One small trace is worked by hand.
//!
//! Two levels (`--l2`) and a prefetcher (`--prefetch`) are checked against
//! naive models that keep each unit's expiry in the cache entries
//! themselves (so it travels between levels with the unit), where the
//! replay keeps one map beside the policies and must forget an expiry
//! exactly when no level holds the unit any more.

#![allow(clippy::unwrap_used)]

use std::collections::HashMap;

use cairn_policy::{AdmissionConfig, Capacity, PolicyConfig, PrefetchConfig};
use cairn_sim::{
    AccessStream, Configuration, Hierarchy, Level2, Metrics, NoProgress, ReplayOptions,
    StreamOptions, Ttl, replay,
};
use cairn_trace::{NEVER, Op, Request};
use proptest::prelude::*;

fn request(time_s: u64, object: u64, ttl: u32) -> Request {
    Request {
        time_us: time_s * 1_000_000,
        object,
        offset: 0,
        size: 100,
        op: Op::Read,
        ttl,
        next: NEVER,
    }
}

/// `requests` with each one's next access to the same object filled in
/// (what offline policies, OPT and `BeladySize`, read).
fn with_next(mut requests: Vec<Request>) -> Vec<Request> {
    let mut seen: HashMap<u64, usize> = HashMap::new();
    for at in (0..requests.len()).rev() {
        requests[at].next = seen.get(&requests[at].object).map_or(NEVER, |&n| n as u64);
        seen.insert(requests[at].object, at);
    }
    requests
}

/// Replays `requests` against `policy` holding `objects` objects.
fn run(
    requests: &[Request],
    policy: &str,
    objects: u64,
    ttl: Option<Ttl>,
    threads: usize,
) -> Metrics {
    let configuration = Configuration {
        label: policy.to_owned(),
        policy: PolicyConfig::default_for(policy).unwrap(),
        admission: AdmissionConfig::default(),
        prefetch: None,
        size: objects.to_string(),
        capacity: Capacity::Objects(objects),
        l2: None,
    };
    run_configuration(requests, configuration, ttl, threads)
}

/// Replays `requests` against `configuration` (and a twin of it, which must
/// count the same).
fn run_configuration(
    requests: &[Request],
    configuration: Configuration,
    ttl: Option<Ttl>,
    threads: usize,
) -> Metrics {
    let options = StreamOptions {
        ttl,
        ..StreamOptions::default()
    };
    let owned: Vec<Request> = requests.to_vec();
    let reader: cairn_trace::read::Reader = cairn_trace::read::boxed(owned.into_iter().map(Ok));
    let stream = AccessStream::new(reader, &options);
    let replay_options = ReplayOptions {
        threads,
        chunk_accesses: 7,
        ..ReplayOptions::default()
    };
    let mut reports = replay(
        &[configuration.clone(), configuration],
        stream,
        &replay_options,
        &NoProgress,
    )
    .unwrap();
    let first = reports.remove(0).metrics;
    assert_eq!(
        first,
        reports.remove(0).metrics,
        "twin configurations differ"
    );
    first
}

/// The naive model: (hits, misses, expired, evictions).
fn naive(requests: &[Request], objects: usize, ttl: Ttl) -> (u64, u64, u64, u64) {
    let mut lru: Vec<u64> = Vec::new(); // front leaves first
    let mut expiry: HashMap<u64, u64> = HashMap::new();
    let (mut hits, mut misses, mut expired, mut evictions) = (0, 0, 0, 0);
    for r in requests {
        let key = r.object;
        let now = r.time_us;
        if let Some(&expires) = expiry.get(&key)
            && expires < now
        {
            expiry.remove(&key);
            lru.retain(|&k| k != key);
            expired += 1;
        }
        if let Some(at) = lru.iter().position(|&k| k == key) {
            lru.remove(at);
            lru.push(key);
            hits += 1;
            continue;
        }
        misses += 1;
        if lru.len() == objects {
            let victim = lru.remove(0);
            expiry.remove(&victim);
            evictions += 1;
        }
        lru.push(key);
        let ttl_us = if ttl.from_trace && r.ttl > 0 {
            Some(u64::from(r.ttl) * 1_000_000)
        } else {
            ttl.default_us
        };
        if let Some(ttl_us) = ttl_us {
            expiry.insert(key, now + ttl_us);
        }
    }
    (hits, misses, expired, evictions)
}

#[test]
fn a_worked_trace_expires_strictly_after_its_ttl_and_hits_do_not_refresh() {
    // Object 1 with a 10 s TTL from the trace; object 2 takes the default 3 s.
    let requests = [
        request(0, 1, 10), // miss: inserted, expires at 10 s
        request(5, 1, 0),  // hit (a hit does not move the expiry to 15 s)
        request(10, 1, 0), // hit: 10 s is not above 10 s
        request(11, 1, 0), // expired: removed, a miss, inserted to expire at 14 s (default)
        request(11, 2, 0), // miss: expires at 14 s
        request(14, 2, 0), // hit
        request(15, 2, 0), // expired
        request(15, 1, 0), // expired (14 s < 15 s)
        request(20, 3, 2), // miss: expires at 22 s
        request(22, 3, 0), // hit: 22 s is not above 22 s
        request(23, 3, 0), // expired
    ];
    let ttl = Ttl {
        default_us: Some(3_000_000),
        from_trace: true,
    };
    let m = run(&requests, "lru", 4, Some(ttl), 1);
    assert_eq!((m.hits, m.misses, m.expired), (4, 7, 4));
    // Trace TTLs ignored, every insertion takes 3 s: object 1 expires at 3 s,
    // 8 s and 13 s, so only 11 s (object 1), 14 s (object 2), 22 s and 23 s
    // (object 3, expiring at 23 s) hit.
    let ignored = Ttl {
        from_trace: false,
        ..ttl
    };
    let m = run(&requests, "lru", 4, Some(ignored), 1);
    assert_eq!((m.hits, m.misses, m.expired), (4, 7, 4));
    // No TTL at all: only the first touch of each object misses.
    let m = run(&requests, "lru", 4, None, 1);
    assert_eq!((m.hits, m.misses, m.expired), (8, 3, 0));
}

/// Every policy: a TTL no access outlives gives the plain replay's counts
/// (so `lookup` then `admit` is `access`), and a short one expires units,
/// each expiration a miss.
#[test]
fn every_policy_supports_expiry() {
    // A skewed key stream (the smaller of two pseudo-random keys), 4 a second.
    let requests: Vec<Request> = with_next(
        (0..4000u64)
            .map(|i| {
                let (a, b) = ((i * 7919) % 97, (i * 104_729 + 13) % 89);
                request(i / 4, a.min(b), 0)
            })
            .collect(),
    );
    let long = Ttl {
        default_us: Some(1 << 40),
        from_trace: true,
    };
    let short = Ttl {
        default_us: Some(2_000_000),
        from_trace: true,
    };
    for name in PolicyConfig::NAMES {
        let plain = run(&requests, name, 32, None, 1);
        let mut timed = run(&requests, name, 32, Some(long), 1);
        assert_eq!(timed.expired, 0, "{name}");
        timed.expired = 0;
        assert_eq!(
            timed, plain,
            "{name}: a TTL that never fires changed the counts"
        );
        let expiring = run(&requests, name, 32, Some(short), 1);
        // Dual's front cache holds whole files' first blocks; in object mode
        // every object is its own file's block 0, so units leave it within a
        // second (3,907 evictions for 3,910 misses) and none lives to expire.
        assert!(
            expiring.expired > 0 || *name == "dual",
            "{name}: nothing expired: {plain:?} {expiring:?}"
        );
        assert_eq!(expiring.hits + expiring.misses, 4000, "{name}");
        assert!(
            expiring.misses >= plain.misses.min(expiring.expired),
            "{name}: expirations must be misses"
        );
    }
}

fn requests_strategy() -> impl Strategy<Value = Vec<Request>> {
    prop::collection::vec(
        (0u64..3, 0u64..12, prop_oneof![Just(0u32), 1u32..6]),
        1..300,
    )
    .prop_map(|steps| {
        let mut time = 0;
        steps
            .into_iter()
            .map(|(step, object, ttl)| {
                time += step;
                request(time, object, ttl)
            })
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// LRU with TTL counts what the naive model counts, inline and threaded.
    #[test]
    fn lru_with_ttl_matches_the_naive_model(
        requests in requests_strategy(),
        objects in 1usize..8,
        default_s in prop::option::of(0u64..6),
        from_trace in any::<bool>(),
    ) {
        let ttl = Ttl { default_us: default_s.map(|s| s * 1_000_000), from_trace };
        let (hits, misses, expired, evictions) = naive(&requests, objects, ttl);
        for threads in [1, 2] {
            let m = run(&requests, "lru", objects as u64, Some(ttl), threads);
            prop_assert_eq!(
                (m.hits, m.misses, m.expired, m.evictions),
                (hits, misses, expired, evictions),
                "threads {}", threads
            );
        }
    }
}

/// A naive cache entry: the unit and when it expires (`NEVER`: never).
#[derive(Clone, Copy, Debug, PartialEq)]
struct Entry {
    key: u64,
    expires: u64,
}

/// A naive LRU level: `entries[0]` leaves first.
#[derive(Debug, Default)]
struct NaiveLru {
    capacity: usize,
    entries: Vec<Entry>,
}

impl NaiveLru {
    fn new(capacity: usize) -> Self {
        Self {
            capacity,
            entries: Vec::new(),
        }
    }

    fn get(&self, key: u64) -> Option<Entry> {
        self.entries.iter().copied().find(|e| e.key == key)
    }

    /// Moves a resident `key` to the back; whether it was resident.
    fn touch(&mut self, key: u64) -> bool {
        let Some(at) = self.entries.iter().position(|e| e.key == key) else {
            return false;
        };
        let entry = self.entries.remove(at);
        self.entries.push(entry);
        true
    }

    /// Inserts a missing entry; returns the victim.
    fn insert(&mut self, entry: Entry) -> Option<Entry> {
        let victim = (self.entries.len() == self.capacity).then(|| self.entries.remove(0));
        self.entries.push(entry);
        victim
    }

    fn remove(&mut self, key: u64) -> Option<Entry> {
        let at = self.entries.iter().position(|e| e.key == key)?;
        Some(self.entries.remove(at))
    }
}

/// The expiry a request sets when it inserts its unit.
fn expiry_of(r: &Request, ttl: Ttl) -> u64 {
    let ttl_us = if ttl.from_trace && r.ttl > 0 {
        Some(u64::from(r.ttl) * 1_000_000)
    } else {
        ttl.default_us
    };
    ttl_us.map_or(NEVER, |t| r.time_us + t)
}

/// The naive two-level model, LRU over LRU: (L1 hits, L2 hits, misses,
/// expired). Each entry carries its unit's expiry; a unit moving between
/// levels carries it along; an expired unit leaves both levels.
fn naive_levels(
    requests: &[Request],
    (l1_objects, l2_objects): (usize, usize),
    hierarchy: Hierarchy,
    ttl: Ttl,
) -> (u64, u64, u64, u64) {
    let (mut l1, mut l2) = (NaiveLru::new(l1_objects), NaiveLru::new(l2_objects));
    let (mut l1_hits, mut l2_hits, mut misses, mut expired) = (0, 0, 0, 0);
    for r in requests {
        let key = r.object;
        let (in_l1, in_l2) = (l1.get(key), l2.get(key));
        if let (Some(a), Some(b)) = (in_l1, in_l2) {
            assert_eq!(a.expires, b.expires, "one unit, two expiries");
        }
        if in_l1.or(in_l2).is_some_and(|e| e.expires < r.time_us) {
            l1.remove(key);
            l2.remove(key);
            expired += 1;
        }
        let fresh = Entry {
            key,
            expires: expiry_of(r, ttl),
        };
        match hierarchy {
            Hierarchy::Inclusive => {
                if let Some(entry) = l1.get(key) {
                    l1.touch(key);
                    if r.op == Op::Write && !l2.touch(key) {
                        // Written through: the tier caches the unit as L1
                        // holds it.
                        l2.insert(entry);
                    }
                    l1_hits += 1;
                    continue;
                }
                let entry = if let Some(entry) = l2.get(key) {
                    l2.touch(key);
                    l2_hits += 1;
                    entry
                } else {
                    l2.insert(fresh);
                    misses += 1;
                    fresh
                };
                l1.insert(entry);
            }
            Hierarchy::Exclusive => {
                if l1.touch(key) {
                    l1_hits += 1;
                    continue;
                }
                let entry = if let Some(entry) = l2.remove(key) {
                    l2_hits += 1;
                    entry
                } else {
                    misses += 1;
                    fresh
                };
                if let Some(victim) = l1.insert(entry) {
                    l2.insert(victim);
                }
            }
        }
    }
    (l1_hits, l2_hits, misses, expired)
}

/// LRU of `l1` objects over LRU of `l2`, replayed.
fn run_levels(
    requests: &[Request],
    (l1, l2): (u64, u64),
    hierarchy: Hierarchy,
    ttl: Option<Ttl>,
    threads: usize,
) -> Metrics {
    let configuration = Configuration {
        label: "lru".to_owned(),
        policy: PolicyConfig::default_for("lru").unwrap(),
        admission: AdmissionConfig::default(),
        prefetch: None,
        size: l1.to_string(),
        capacity: Capacity::Objects(l1),
        l2: Some(Level2 {
            label: "lru".to_owned(),
            policy: PolicyConfig::default_for("lru").unwrap(),
            size: l2.to_string(),
            capacity: Capacity::Objects(l2),
            hierarchy,
        }),
    };
    run_configuration(requests, configuration, ttl, threads)
}

/// The naive model of LRU beside OBL with `k` = 1 (a unit one above the
/// last asks for the next): (hits, misses, expired, prefetched,
/// prefetch hits). A prefetched unit expires `default` after the access
/// that loaded it (never without a default).
fn naive_prefetch(requests: &[Request], objects: usize, ttl: Ttl) -> (u64, u64, u64, u64, u64) {
    let mut lru = NaiveLru::new(objects);
    // Prefetched units no demand access has touched yet.
    let mut unused: Vec<u64> = Vec::new();
    let mut last = u64::MAX;
    let (mut hits, mut misses, mut expired, mut prefetched, mut prefetch_hits) = (0, 0, 0, 0, 0);
    for r in requests {
        let key = r.object;
        if lru.get(key).is_some_and(|e| e.expires < r.time_us) {
            lru.remove(key);
            unused.retain(|&k| k != key);
            expired += 1;
        }
        if lru.touch(key) {
            hits += 1;
            if let Some(at) = unused.iter().position(|&k| k == key) {
                unused.remove(at);
                prefetch_hits += 1;
            }
        } else {
            misses += 1;
            let fresh = Entry {
                key,
                expires: expiry_of(r, ttl),
            };
            if let Some(victim) = lru.insert(fresh) {
                unused.retain(|&k| k != victim.key);
            }
        }
        let continues = key == last.wrapping_add(1);
        last = key;
        let wanted = key.wrapping_add(1);
        if continues && lru.get(wanted).is_none() {
            let entry = Entry {
                key: wanted,
                expires: ttl.default_us.map_or(NEVER, |t| r.time_us + t),
            };
            if let Some(victim) = lru.insert(entry) {
                unused.retain(|&k| k != victim.key);
            }
            unused.push(wanted);
            prefetched += 1;
        }
    }
    (hits, misses, expired, prefetched, prefetch_hits)
}

/// LRU of `objects` objects beside OBL with `k` = 1, replayed.
fn run_prefetch(requests: &[Request], objects: u64, ttl: Option<Ttl>, threads: usize) -> Metrics {
    let configuration = Configuration {
        label: "lru>obl".to_owned(),
        policy: PolicyConfig::default_for("lru").unwrap(),
        admission: AdmissionConfig::default(),
        prefetch: Some(
            serde_json::from_str::<PrefetchConfig>(
                r#"{"prefetcher": "obl", "sequential_confidence_k": 1}"#,
            )
            .unwrap(),
        ),
        size: objects.to_string(),
        capacity: Capacity::Objects(objects),
        l2: None,
    };
    run_configuration(requests, configuration, ttl, threads)
}

/// Reads and writes, each with a TTL of its own or none.
fn mixed_requests_strategy() -> impl Strategy<Value = Vec<Request>> {
    prop::collection::vec(
        (
            0u64..3,
            0u64..12,
            prop_oneof![Just(0u32), 1u32..6],
            any::<bool>(),
        ),
        1..300,
    )
    .prop_map(|steps| {
        let mut time = 0;
        steps
            .into_iter()
            .map(|(step, object, ttl, write)| {
                time += step;
                let mut r = request(time, object, ttl);
                if write {
                    r.op = Op::Write;
                }
                r
            })
            .collect()
    })
}

/// Runs of consecutive objects (so OBL fires), each request with a TTL of
/// its own or none.
fn runs_strategy() -> impl Strategy<Value = Vec<Request>> {
    prop::collection::vec(
        (0u64..3, 0u64..12, 1u64..5, prop_oneof![Just(0u32), 1u32..6]),
        1..100,
    )
    .prop_map(|runs| {
        let mut time = 0;
        let mut requests = Vec::new();
        for (step, first, len, ttl) in runs {
            time += step;
            requests.extend((first..first + len).map(|object| request(time, object, ttl)));
        }
        requests
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Two levels with TTL count what the naive two-level model counts, in
    /// both modes, inline and threaded.
    #[test]
    fn two_levels_with_ttl_match_the_naive_model(
        requests in mixed_requests_strategy(),
        l1 in 1usize..5,
        l2 in 1usize..8,
        exclusive in any::<bool>(),
        default_s in prop::option::of(0u64..6),
        from_trace in any::<bool>(),
    ) {
        let hierarchy = if exclusive { Hierarchy::Exclusive } else { Hierarchy::Inclusive };
        let ttl = Ttl { default_us: default_s.map(|s| s * 1_000_000), from_trace };
        let want = naive_levels(&requests, (l1, l2), hierarchy, ttl);
        for threads in [1, 2] {
            let m = run_levels(&requests, (l1 as u64, l2 as u64), hierarchy, Some(ttl), threads);
            prop_assert_eq!(
                (m.hits - m.l2_hits, m.l2_hits, m.misses, m.expired),
                want,
                "{:?}, threads {}", hierarchy, threads
            );
        }
    }

    /// A prefetcher with TTL counts what the naive model counts, inline and
    /// threaded.
    #[test]
    fn prefetch_with_ttl_matches_the_naive_model(
        requests in runs_strategy(),
        objects in 1usize..8,
        default_s in prop::option::of(0u64..6),
        from_trace in any::<bool>(),
    ) {
        let ttl = Ttl { default_us: default_s.map(|s| s * 1_000_000), from_trace };
        let want = naive_prefetch(&requests, objects, ttl);
        for threads in [1, 2] {
            let m = run_prefetch(&requests, objects as u64, Some(ttl), threads);
            prop_assert_eq!(
                (m.hits, m.misses, m.expired, m.prefetched, m.prefetch_hits),
                want,
                "threads {}", threads
            );
        }
    }
}

/// The naive models agree with the replay without TTL too (so the TTL
/// cases above test expiry, not the models' other steps), and TTL changes
/// the counts on the same trace.
#[test]
fn the_two_level_and_prefetch_models_fit_the_replay_without_ttl() {
    let requests: Vec<Request> = (0..600u64)
        .map(|i| {
            let (a, b) = ((i * 7919) % 11, (i * 104_729 + 13) % 9);
            let mut r = request(i / 8, a.min(b), 0);
            if i % 5 == 0 {
                r.op = Op::Write;
            }
            r
        })
        .collect();
    let never = Ttl::default();
    let short = Ttl {
        default_us: Some(3_000_000),
        from_trace: true,
    };
    for hierarchy in [Hierarchy::Inclusive, Hierarchy::Exclusive] {
        let m = run_levels(&requests, (3, 5), hierarchy, None, 1);
        let plain = (m.hits - m.l2_hits, m.l2_hits, m.misses, m.expired);
        assert_eq!(
            plain,
            naive_levels(&requests, (3, 5), hierarchy, never),
            "{hierarchy:?}"
        );
        assert!(plain.1 > 0, "{hierarchy:?}: L2 never hit: {plain:?}");
        let timed = naive_levels(&requests, (3, 5), hierarchy, short);
        println!("{hierarchy:?}: {plain:?} without TTL, {timed:?} with 3 s");
        assert!(timed.3 > 0 && timed.2 > plain.2, "{hierarchy:?}: {timed:?}");
    }
    // Runs of four consecutive objects, each run's first from the skewed
    // stream above.
    let requests: Vec<Request> = requests
        .iter()
        .step_by(4)
        .enumerate()
        .flat_map(|(run, first)| (0..4).map(move |at| request(run as u64, first.object + at, 0)))
        .collect();
    let m = run_prefetch(&requests, 6, None, 1);
    let plain = (m.hits, m.misses, m.expired, m.prefetched, m.prefetch_hits);
    assert_eq!(plain, naive_prefetch(&requests, 6, never));
    assert!(plain.3 > 0 && plain.4 > 0, "OBL never fired: {plain:?}");
    // Prefetched units and demand ones live half a second: what the next
    // run (a second later) wants has expired.
    let half = Ttl {
        default_us: Some(500_000),
        from_trace: true,
    };
    let timed = naive_prefetch(&requests, 6, half);
    println!("prefetch: {plain:?} without TTL, {timed:?} with 0.5 s");
    assert!(timed.2 > 0 && timed.1 > plain.1, "{timed:?}");
}
