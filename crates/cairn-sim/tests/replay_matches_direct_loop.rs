//! The parallel replay must be an optimisation only: for every configuration it
//! reports exactly what a plain single-threaded loop over the trace reports,
//! whatever the number of threads and the chunk size. Guards against chunks
//! lost, duplicated or reordered between the reader and the workers.

// Helpers outside #[test] functions panic on failure too; that is the report.
#![allow(clippy::unwrap_used)]

mod common;

use cairn_policy::{Capacity, PolicyConfig};
use cairn_sim::{Configuration, FromIter, Metrics, NoProgress, ReplayOptions, replay};

fn configurations() -> Vec<Configuration> {
    let mut out = vec![];
    for name in PolicyConfig::NAMES {
        for capacity in [
            Capacity::Objects(25),
            Capacity::Objects(100),
            Capacity::Bytes(20_000),
        ] {
            out.push(Configuration {
                label: (*name).to_string(),
                policy: PolicyConfig::default_for(name).unwrap(),
                admission: cairn_policy::AdmissionConfig::default(),
                prefetch: None,
                size: capacity.limit().to_string(),
                capacity,
                l2: None,
            });
        }
    }
    out
}

fn direct(configuration: &Configuration, trace: &[cairn_policy::Access]) -> Metrics {
    let mut policy = configuration.policy.build(configuration.capacity).unwrap();
    let mut metrics = Metrics::default();
    let mut victims = vec![];
    for access in trace {
        victims.clear();
        let hit = policy.access(access, &mut victims);
        metrics.record(access, hit, victims.len());
    }
    metrics
}

#[test]
fn replay_reports_what_a_direct_loop_reports() {
    let trace = common::with_next(common::skewed(7, 20_000, 1_000, 100..=400));
    let configurations = configurations();
    let options = ReplayOptions {
        threads: 3,
        chunk_accesses: 777,
        queue_chunks: 2,
        ..ReplayOptions::default()
    };
    let reports = replay(
        &configurations,
        FromIter(trace.iter().copied().map(Ok)),
        &options,
        &NoProgress,
    )
    .unwrap();
    assert_eq!(reports.len(), configurations.len());
    for (configuration, report) in configurations.iter().zip(&reports) {
        let want = direct(configuration, &trace);
        assert_eq!(
            report.metrics, want,
            "{} at {:?}",
            configuration.label, configuration.capacity
        );
        assert_eq!(report.label, configuration.label);
        assert!(
            want.hits > 0 && want.misses > 0,
            "the trace exercises both outcomes: {} at {:?}: {want:?}",
            configuration.label,
            configuration.capacity
        );
        assert_eq!(want.reads + want.writes, 20_000);
    }
}

#[test]
fn replay_is_deterministic_across_threads_and_chunk_sizes() {
    let trace = common::skewed(11, 10_000, 500, 1..=1);
    let configurations = configurations();
    let run = |threads, chunk_accesses| {
        let options = ReplayOptions {
            threads,
            chunk_accesses,
            ..ReplayOptions::default()
        };
        replay(
            &configurations,
            FromIter(trace.iter().copied().map(Ok)),
            &options,
            &NoProgress,
        )
        .unwrap()
    };
    let first = run(1, 1 << 16);
    assert_eq!(first, run(4, 1));
    assert_eq!(first, run(2, 333));
    assert_eq!(first, run(0, 4096));
}

#[test]
fn a_trace_error_ends_the_replay_with_that_error() {
    let trace = common::skewed(3, 100, 10, 1..=1);
    let broken = || {
        trace.clone().into_iter().map(Ok).chain(std::iter::once(Err(
            cairn_trace::TraceError::Format {
                path: "t.bin".into(),
                reason: "boom".into(),
            },
        )))
    };
    for threads in [0, 1, 2] {
        let options = ReplayOptions {
            threads,
            ..ReplayOptions::default()
        };
        let error =
            replay(&configurations(), FromIter(broken()), &options, &NoProgress).unwrap_err();
        assert_eq!(error.to_string(), "t.bin: boom", "threads = {threads}");
    }
}

#[test]
fn no_configurations_is_an_error() {
    let configurations = Vec::<Configuration>::new();
    let error = replay(
        &configurations,
        FromIter(std::iter::empty()),
        &ReplayOptions::default(),
        &NoProgress,
    )
    .unwrap_err();
    assert!(matches!(error, cairn_sim::SimError::NoConfigurations));
}
