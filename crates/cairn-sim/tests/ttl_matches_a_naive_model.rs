//! TTL (`cairn sim --ttl`, a trace's own TTLs) counts what a naive model
//! counts: a map of key → expiry beside a plain LRU list, as libCacheSim
//! defines it — the expiry is set when a unit is inserted (the request's TTL
//! if it has one and trace TTLs count, else the default, else never), a hit
//! does not refresh it, an access at a time strictly above it removes the
//! unit and misses. Guards the order of those steps through the real replay
//! (inline and threaded, chunks cut mid-trace), and that every policy's
//! `remove` and the lookup-then-admit path agree with the plain replay when
//! nothing expires. One small trace is worked by hand.

#![allow(clippy::unwrap_used)]

use std::collections::HashMap;

use cairn_policy::{AdmissionConfig, Capacity, PolicyConfig};
use cairn_sim::{
    AccessStream, Configuration, Metrics, NoProgress, ReplayOptions, StreamOptions, Ttl, replay,
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
