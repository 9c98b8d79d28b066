//! Two-level hierarchies (`cairn sim --l2`) count what a naive two-level
//! model counts: every access an L1 hit, an L2 hit or a miss, in both
//! modes, with the same units resident in each level afterwards. Guards the
//! order of the steps (L2 looked up before L1 admits; write-through to L2 in
//! inclusive mode; demotion of L1's victims in exclusive mode), which a
//! one-level replay never exercises. One small trace is worked by hand.

#![allow(clippy::unwrap_used)]

use cairn_policy::{Access, Capacity, Op, Policy, PolicyConfig};
use cairn_sim::{
    Configuration, CostModel, FromIter, Hierarchy, Level2, Metrics, NoProgress, ReplayOptions,
    SecondLevel, Served, replay,
};
use proptest::prelude::*;

/// A naive cache: `order[0]` leaves first. LRU moves a hit to the back;
/// FIFO does not.
#[derive(Clone, Debug)]
struct Naive {
    capacity: usize,
    lru: bool,
    order: Vec<u64>,
}

impl Naive {
    fn new(capacity: usize, lru: bool) -> Self {
        Self {
            capacity,
            lru,
            order: Vec::new(),
        }
    }

    /// Whether `key` is resident; a hit is touched.
    fn lookup(&mut self, key: u64) -> bool {
        let Some(at) = self.order.iter().position(|&k| k == key) else {
            return false;
        };
        if self.lru {
            self.order.remove(at);
            self.order.push(key);
        }
        true
    }

    /// Inserts a missing key; returns the victim.
    fn insert(&mut self, key: u64) -> Option<u64> {
        let victim = (self.order.len() == self.capacity).then(|| self.order.remove(0));
        self.order.push(key);
        victim
    }

    fn access(&mut self, key: u64) -> bool {
        self.lookup(key) || {
            self.insert(key);
            false
        }
    }

    fn remove(&mut self, key: u64) -> bool {
        let at = self.order.iter().position(|&k| k == key);
        at.map(|at| self.order.remove(at)).is_some()
    }
}

/// The naive hierarchy, one access: where it was served.
fn naive_step(l1: &mut Naive, l2: &mut Naive, hierarchy: Hierarchy, access: &Access) -> Served {
    let key = access.key;
    match hierarchy {
        Hierarchy::Inclusive => {
            if l1.lookup(key) {
                if access.op == Op::Write {
                    l2.access(key);
                }
                return Served::L1;
            }
            let hit = l2.access(key);
            l1.insert(key);
            if hit { Served::L2 } else { Served::Miss }
        }
        Hierarchy::Exclusive => {
            if l1.lookup(key) {
                return Served::L1;
            }
            let served = if l2.remove(key) {
                Served::L2
            } else {
                Served::Miss
            };
            if let Some(victim) = l1.insert(key) {
                // Exclusive: the victim is not in L2.
                assert!(!l2.lookup(victim));
                l2.insert(victim);
            }
            served
        }
    }
}

fn policy(name: &str, capacity: u64) -> Box<dyn Policy> {
    PolicyConfig::default_for(name)
        .unwrap()
        .build(Capacity::Objects(capacity))
        .unwrap()
}

/// Runs `trace` through L1 `l1` over L2 `l2`; returns where each access was
/// served, the counters, and the two policies.
fn simulate(
    (l1, l1_capacity): (&str, u64),
    (l2, l2_capacity): (&str, u64),
    hierarchy: Hierarchy,
    trace: &[Access],
) -> (Vec<Served>, Metrics, Box<dyn Policy>, SecondLevel) {
    let mut upper = policy(l1, l1_capacity);
    let mut lower = SecondLevel::new(policy(l2, l2_capacity), hierarchy);
    let mut metrics = Metrics::default();
    let mut victims = Vec::new();
    let served = trace
        .iter()
        .map(|a| lower.access(&mut *upper, a, &mut victims, &mut metrics))
        .collect();
    (served, metrics, upper, lower)
}

fn accesses(keys: &[(u64, bool)]) -> Vec<Access> {
    keys.iter()
        .enumerate()
        .map(|(time, &(key, write))| {
            let mut access = Access::read(key, 4096, time as u64);
            if write {
                access.op = Op::Write;
            }
            access
        })
        .collect()
}

/// L1 LRU of 2 over L2 LRU of 3, on A B A(write) C D B C.
///
/// Inclusive (L2 orders oldest first):
/// A, B miss both (L2 [A B], L1 [A B]); A(write) hits L1 and, written
/// through, makes A L2's newest (L2 [B A]); C misses (L2 [B A C], L1 drops
/// B); D misses (L2 drops B: [A C D]; L1 drops A); B misses both (L2 drops
/// A; L1 drops C) — without the write-through L2 would have dropped A at D
/// and B would hit L2; C hits L2 (L1 drops D).
///
/// Exclusive: A, B miss; A hits L1; C misses, L1's victim B goes down
/// (L2 [B]); D misses, A goes down (L2 [B A]); B hits L2 and moves up, L1's
/// victim C goes down (L2 [A C]); C hits L2, D goes down (L2 [A D]).
#[test]
fn a_small_trace_counts_as_worked_by_hand() {
    use Served::{L1, L2, Miss};
    let (a, b, c, d) = (1, 2, 3, 4);
    let trace = accesses(&[
        (a, false),
        (b, false),
        (a, true),
        (c, false),
        (d, false),
        (b, false),
        (c, false),
    ]);
    for (hierarchy, want, l1_hits, l2_hits, l1_resident, l2_resident, l2_evictions) in [
        (
            Hierarchy::Inclusive,
            [Miss, Miss, L1, Miss, Miss, Miss, L2],
            1,
            1,
            [b, c].as_slice(),
            [b, c, d].as_slice(),
            2,
        ),
        (
            Hierarchy::Exclusive,
            [Miss, Miss, L1, Miss, Miss, L2, L2],
            1,
            2,
            [b, c].as_slice(),
            [a, d].as_slice(),
            0,
        ),
    ] {
        let (served, metrics, upper, lower) = simulate(("lru", 2), ("lru", 3), hierarchy, &trace);
        assert_eq!(served, want, "{hierarchy:?}");
        assert_eq!(metrics.requests, 7);
        assert_eq!(metrics.hits - metrics.l2_hits, l1_hits, "{hierarchy:?}");
        assert_eq!(metrics.l2_hits, l2_hits, "{hierarchy:?}");
        assert_eq!(metrics.misses, 7 - l1_hits - l2_hits, "{hierarchy:?}");
        assert_eq!(
            metrics.evictions, 4,
            "{hierarchy:?}: L1 evicts C's, D's, B's and C's way"
        );
        assert_eq!(metrics.l2_evictions, l2_evictions, "{hierarchy:?}");
        for key in [a, b, c, d] {
            assert_eq!(
                upper.contains(key),
                l1_resident.contains(&key),
                "{hierarchy:?} L1 {key}"
            );
            assert_eq!(
                lower.policy().contains(key),
                l2_resident.contains(&key),
                "{hierarchy:?} L2 {key}"
            );
        }
        // The cost model: L1 hits at DRAM cost, L2 hits at flash cost,
        // misses at HDD cost (4,096 bytes each).
        let model = CostModel::default();
        let group = model.group(0).unwrap();
        let want_seconds = group.hit.seconds(l1_hits, l1_hits * 4096)
            + group.l2_hit.seconds(l2_hits, l2_hits * 4096)
            + group.miss.seconds(metrics.misses, metrics.misses * 4096);
        let seconds = metrics.modelled_seconds(&model);
        assert!(
            (seconds - want_seconds).abs() < 1e-12,
            "{seconds} {want_seconds}"
        );
        assert!(group.hit.seconds(1, 4096) < group.l2_hit.seconds(1, 4096));
        assert!(group.l2_hit.seconds(1, 4096) < group.miss.seconds(1, 4096));
    }
}

/// The replay runs a two-level configuration as the direct loop above does,
/// on any thread count, and labels its report with the second level.
#[test]
fn replay_runs_two_levels_as_the_direct_loop_does() {
    let trace: Vec<Access> = (0..20_000u64)
        .map(|t| {
            let key = (t * 7919 + t / 3) % 600 % (1 + t % 400);
            let mut access = Access::read(key, 4096, t);
            if t % 5 == 0 {
                access.op = Op::Write;
            }
            access
        })
        .collect();
    for hierarchy in [Hierarchy::Inclusive, Hierarchy::Exclusive] {
        let configuration = Configuration {
            label: "lru".into(),
            policy: PolicyConfig::default_for("lru").unwrap(),
            admission: cairn_policy::AdmissionConfig::default(),
            prefetch: None,
            size: "50".into(),
            capacity: Capacity::Objects(50),
            l2: Some(Level2 {
                label: "s3fifo".into(),
                policy: PolicyConfig::default_for("s3fifo").unwrap(),
                size: "200".into(),
                capacity: Capacity::Objects(200),
                hierarchy,
            }),
        };
        let (_, want, _, _) = simulate(("lru", 50), ("s3fifo", 200), hierarchy, &trace);
        assert!(want.l2_hits > 0 && want.hits > want.l2_hits && want.misses > 0);
        for threads in [1, 3] {
            let options = ReplayOptions {
                threads,
                chunk_accesses: 777,
                ..ReplayOptions::default()
            };
            let reports = replay(
                std::slice::from_ref(&configuration),
                FromIter(trace.iter().copied().map(Ok)),
                &options,
                &NoProgress,
            )
            .unwrap();
            assert_eq!(reports[0].metrics, want, "{hierarchy:?}, {threads} threads");
            let l2 = reports[0].l2.as_ref().unwrap();
            assert_eq!((l2.policy.as_str(), l2.capacity), ("s3fifo", 200));
            assert_eq!(l2.hierarchy, hierarchy);
        }
    }
}

fn trace_strategy() -> impl Strategy<Value = Vec<(u64, bool)>> {
    prop::collection::vec((0u64..24, prop::bool::weighted(0.2)), 1..400)
}

proptest! {
    #[test]
    fn two_levels_count_what_the_naive_model_counts(
        keys in trace_strategy(),
        l1_capacity in 1u64..8,
        l2_capacity in 1u64..16,
        l1_lru: bool,
        l2_lru: bool,
        exclusive: bool,
    ) {
        let hierarchy = if exclusive { Hierarchy::Exclusive } else { Hierarchy::Inclusive };
        let name = |lru: bool| if lru { "lru" } else { "fifo" };
        let trace = accesses(&keys);
        let (served, metrics, upper, lower) = simulate(
            (name(l1_lru), l1_capacity),
            (name(l2_lru), l2_capacity),
            hierarchy,
            &trace,
        );
        let mut l1 = Naive::new(l1_capacity as usize, l1_lru);
        let mut l2 = Naive::new(l2_capacity as usize, l2_lru);
        let want: Vec<Served> = trace
            .iter()
            .map(|a| naive_step(&mut l1, &mut l2, hierarchy, a))
            .collect();
        prop_assert_eq!(&served, &want);
        let count = |s: Served| want.iter().filter(|&&w| w == s).count() as u64;
        prop_assert_eq!(metrics.hits - metrics.l2_hits, count(Served::L1));
        prop_assert_eq!(metrics.l2_hits, count(Served::L2));
        prop_assert_eq!(metrics.misses, count(Served::Miss));
        for key in 0..24 {
            prop_assert_eq!(upper.contains(key), l1.order.contains(&key), "L1 {}", key);
            prop_assert_eq!(lower.policy().contains(key), l2.order.contains(&key), "L2 {}", key);
        }
        if exclusive {
            prop_assert!(l1.order.iter().all(|k| !l2.order.contains(k)));
        }
    }
}
