//! The plumbing around a replay: a block-mode stream stamped with next-access
//! times from the first pass must carry, for every access, the logical time of
//! the next access to the same block (what OPT reads); progress callbacks must
//! add up to the whole trace; and the cost model must turn counters into time.

// Helpers outside #[test] functions panic on failure too; that is the report.
#![allow(clippy::unwrap_used)]

use std::sync::Mutex;

use cairn_policy::{Capacity, NEVER, PolicyConfig};
use cairn_sim::{
    AccessStream, Configuration, OpFilter, Progress, ReplayOptions, StreamOptions, prepass, replay,
};
use cairn_trace::{Op, Request, Unit};

fn requests() -> Vec<Request> {
    // Object 1: blocks 0-1, then 1-2, then 0; object 2 block 0 (a write).
    [
        (1, 0, 8192, Op::Read),
        (1, 4096, 8192, Op::Read),
        (2, 0, 4096, Op::Write),
        (1, 0, 4096, Op::Read),
    ]
    .into_iter()
    .map(|(object, offset, size, op)| Request {
        object,
        offset,
        size,
        op,
        ..Request::default()
    })
    .collect()
}

fn stream(options: &StreamOptions) -> AccessStream {
    AccessStream::new(
        cairn_trace::read::boxed(requests().into_iter().map(Ok)),
        options,
    )
}

#[test]
fn block_mode_next_access_times_point_at_the_next_touch_of_the_block() {
    let options = StreamOptions {
        unit: Unit::Block { block_size: 4096 },
        ..StreamOptions::default()
    };
    let pass = prepass(stream(&options), true, 1, &cairn_sim::NoProgress).unwrap();
    assert!(
        !pass.carries_next,
        "block mode has no next times of its own"
    );
    assert_eq!((pass.accesses, pass.working_set.objects), (6, 4));
    let stamped: Vec<(u64, u64, u64)> = stream(&options)
        .with_next_times(pass.next_times.unwrap())
        .map(|a| {
            let a = a.unwrap();
            (a.block, a.time, a.next)
        })
        .collect();
    // times: 0 (1,b0) 1 (1,b1) 2 (1,b1) 3 (1,b2) 4 (2,b0) 5 (1,b0)
    assert_eq!(
        stamped,
        [
            (0, 0, 5),
            (1, 1, 2),
            (1, 2, NEVER),
            (2, 3, NEVER),
            (0, 4, NEVER),
            (0, 5, NEVER)
        ]
    );
}

#[test]
fn op_filtering_renumbers_time_over_the_kept_requests() {
    let options = StreamOptions {
        ops: OpFilter::Write,
        ..StreamOptions::default()
    };
    let kept: Vec<_> = stream(&options).map(Result::unwrap).collect();
    assert_eq!(kept.len(), 1);
    assert_eq!((kept[0].object, kept[0].time), (2, 0));
}

#[derive(Default)]
struct Counted(Mutex<(u64, u64)>);

impl Progress for Counted {
    fn advance(&self, accesses: u64, bytes: u64) {
        let mut total = self.0.lock().unwrap();
        total.0 += accesses;
        total.1 += bytes;
    }
}

#[test]
fn progress_adds_up_and_the_cost_model_charges_every_access() {
    let configurations = vec![Configuration {
        label: "lru".into(),
        policy: PolicyConfig::default_for("lru").unwrap(),
        admission: cairn_policy::AdmissionConfig::default(),
        prefetch: None,
        size: "2".into(),
        capacity: Capacity::Objects(2),
        l2: None,
    }];
    let options = ReplayOptions {
        chunk_accesses: 4,
        ..ReplayOptions::default()
    };
    let progress = Counted::default();
    let block = StreamOptions {
        unit: Unit::Block { block_size: 4096 },
        ..StreamOptions::default()
    };
    let reports = replay(&configurations, stream(&block), &options, &progress).unwrap();
    assert_eq!(*progress.0.lock().unwrap(), (6, 6 * 4096));
    let r = &reports[0];
    assert_eq!(
        (r.metrics.hits, r.metrics.misses, r.metrics.writes),
        (1, 5, 1)
    );
    // Default model: misses 5 ms + 4096 B / 150 MB/s, hits 1 µs + 4096 B / 10 GB/s.
    let want = 5.0 * (0.005 + 4096.0 / 150e6) + (1e-6 + 4096.0 / 10e9);
    assert!(
        (r.modelled_seconds - want).abs() < 1e-12,
        "{}",
        r.modelled_seconds
    );
    assert!((r.modelled_throughput_mb_s - 6.0 * 4096.0 / want / 1e6).abs() < 1e-9);
}
