//! What counting a request costs on the I/O path, alone: the two clock
//! reads and `IoCounters::record` (bucket, sum, max and two counters), from
//! one thread and from the four threads of one NBD connection at once (the
//! worst sharing: every thread bumps the same counters; the figure is wall
//! time per request, so on 2 cores about half the cost of one). Compare with a
//! request's service time (`cairn stats`: ~15 µs for a 4 KiB read from a
//! memory volume over a Unix socket).
//!
//! A layer's timing (`cairn_store::stats::Timed`): the clock reads and one
//! record into a `StripedHistogram`, which every connection's threads share,
//! against one plain `Histogram` shared the same way (what the stripes
//! avoid: four threads on two cores bouncing the bucket, sum and max lines).

use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use cairn_control::{IoCounters, Op};
use cairn_store::stats::histogram::{Histogram, StripedHistogram};
use criterion::{Criterion, criterion_group, criterion_main};

fn count_one(counters: &IoCounters) {
    let started = Instant::now();
    black_box(&counters);
    let ns = started.elapsed().as_nanos() as u64;
    counters.record(Op::Read, 4096, ns, true);
}

fn record(c: &mut Criterion) {
    let counters = IoCounters::default();
    c.bench_function("time and count one request (1 thread)", |b| {
        b.iter(|| count_one(&counters));
    });
    c.bench_function("clock reads alone (1 thread)", |b| {
        b.iter(|| {
            let started = Instant::now();
            black_box(started.elapsed().as_nanos())
        });
    });
    let shared = Arc::new(IoCounters::default());
    c.bench_function(
        "time and count one request (4 threads, one connection)",
        |b| {
            b.iter_custom(|iterations| {
                let per_thread = iterations.div_ceil(4);
                let started = Instant::now();
                std::thread::scope(|scope| {
                    for _ in 0..4 {
                        let shared = Arc::clone(&shared);
                        scope.spawn(move || {
                            for _ in 0..per_thread {
                                count_one(&shared);
                            }
                        });
                    }
                });
                // Wall time per request over the four threads.
                started.elapsed() * 4 / 4
            });
        },
    );
}

/// Wall time per call of `call` run by four threads at once, `iterations`
/// calls in all.
fn four_threads(iterations: u64, call: &(dyn Fn() + Sync)) -> std::time::Duration {
    let per_thread = iterations.div_ceil(4);
    let started = Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..4 {
            scope.spawn(|| {
                for _ in 0..per_thread {
                    call();
                }
            });
        }
    });
    started.elapsed()
}

fn layer(c: &mut Criterion) {
    let striped = StripedHistogram::default();
    c.bench_function("time one layer call (1 thread, striped)", |b| {
        b.iter(|| {
            let started = Instant::now();
            black_box(&striped);
            striped.record(started.elapsed().as_nanos() as u64);
        });
    });
    c.bench_function("time one layer call (4 threads, striped)", |b| {
        b.iter_custom(|iterations| {
            four_threads(iterations, &|| {
                let started = Instant::now();
                black_box(&striped);
                striped.record(started.elapsed().as_nanos() as u64);
            })
        });
    });
    let shared = Histogram::default();
    c.bench_function(
        "time one layer call (4 threads, one shared histogram)",
        |b| {
            b.iter_custom(|iterations| {
                four_threads(iterations, &|| {
                    let started = Instant::now();
                    black_box(&shared);
                    shared.record(started.elapsed().as_nanos() as u64);
                })
            });
        },
    );
}

criterion_group!(benches, record, layer);
criterion_main!(benches);
