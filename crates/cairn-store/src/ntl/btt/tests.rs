//! Crash-at-every-store and concurrency tests of the [`Btt`](super::Btt).

use super::*;
use crate::ntl::SimRegion;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const GEO: Geometry = Geometry {
    block_size: 64,
    lbas: 8,
    data_blocks: 12,
};

/// Block contents: every byte is the write's tag, so a torn block is visible.
fn run(r: &Btt<SimRegion>, ops: &[(u64, u8)], done: &mut [u8], inflight: &mut Option<(u64, u8)>) {
    for &(lba, tag) in ops {
        *inflight = Some((lba, tag));
        if r.write_block(lba, &[tag; 64]).is_err() {
            return;
        }
        done[lba as usize] = tag;
        *inflight = None;
    }
}

#[test]
fn crash_at_every_store_leaves_blocks_old_or_new() {
    // Version 2 (lane log, one fence per write) and version 1 (two).
    for (seed, version) in (0..8u64).flat_map(|s| [(s, info::VERSION), (s, info::VERSION_NO_LOG)]) {
        let format = || {
            let b = Btt::format(SimRegion::new(GEO.region_len()), GEO).expect("format");
            if version == info::VERSION_NO_LOG {
                let region = b.into_region();
                region
                    .write(0, &info::encode(&GEO, 0, version))
                    .expect("info");
                region.flush(&[(0, INFO_LEN)]).expect("flush");
                region.fence().expect("fence");
                let b = Btt::open(region).expect("open v1");
                assert!(b.log.is_none(), "a version 1 image has no lane log");
                b
            } else {
                assert!(b.log.is_some());
                b
            }
        };
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let ops: Vec<(u64, u8)> = (1..=24u8)
            .map(|t| (rng.random_range(0..GEO.lbas), t))
            .collect();
        let lbas: Vec<u64> = (0..GEO.lbas).collect();
        at_every_crash_point(
            &|| (format(), vec![0; 8]),
            &ops,
            seed,
            &mut |b, done, inflight, point| {
                assert_old_or_new(
                    b,
                    &lbas,
                    done,
                    inflight,
                    &format!("v{version} seed {seed} point {point}"),
                );
            },
        );
    }
}

/// What a crash-point test checks after recovery: the reopened layer, the
/// tags of the completed writes, the write in flight, the crash point.
type CrashCheck<'a> = dyn FnMut(&Btt<SimRegion>, &[u8], Option<(u64, u8)>, u64) + 'a;

/// Runs `ops` on `fresh()` once to count its stores and fences, then once
/// per crash point: crash after that many, lose a seeded part of what was
/// not fenced, reopen, and hand the reopened layer to `check` with the
/// tags of the writes that completed (`done`, from `fresh`'s) and of the
/// one in flight.
fn at_every_crash_point(
    fresh: &dyn Fn() -> (Btt<SimRegion>, Vec<u8>),
    ops: &[(u64, u8)],
    seed: u64,
    check: &mut CrashCheck<'_>,
) {
    let (probe, mut scratch) = fresh();
    let start = probe.region().events();
    run(&probe, ops, &mut scratch, &mut None);
    let total = probe.region().events() - start;
    for point in 0..=total {
        let (b, mut done) = fresh();
        b.region().crash_after(start + point);
        let mut inflight = None;
        run(&b, ops, &mut done, &mut inflight);
        let region = b.into_region();
        region.crash(seed ^ (point << 16));
        let b =
            Btt::open(region).unwrap_or_else(|e| panic!("seed {seed} point {point}: reopen: {e}"));
        check(&b, &done, inflight, point);
    }
}

/// Every block of `lbas` reads wholly one tag: the last completed write's,
/// or the one in flight at the crash.
fn assert_old_or_new(
    b: &Btt<SimRegion>,
    lbas: &[u64],
    done: &[u8],
    inflight: Option<(u64, u8)>,
    what: &str,
) {
    for &lba in lbas {
        let mut buf = [0u8; 64];
        b.read_block(lba, &mut buf).expect("read");
        let tag = buf[0];
        assert!(buf.iter().all(|&x| x == tag), "{what}: torn lba {lba}");
        assert!(
            tag == done[lba as usize] || inflight == Some((lba, tag)),
            "{what}: lba {lba} has {tag}, want {} or {inflight:?}",
            done[lba as usize]
        );
    }
}

/// Blocks handed out: the bitmap's free blocks plus the stripes' spares are
/// exactly the blocks the map does not reference.
fn assert_free_space_adds_up(b: &Btt<SimRegion>, what: &str) {
    let spares = b
        .stripes
        .iter()
        .filter(|s| s.lock.lock().expect("lock").spare.is_some())
        .count() as u64;
    let mapped = b.map.used().count() as u64;
    assert_eq!(
        b.alloc.free_blocks() + spares,
        b.geo.data_blocks - mapped,
        "{what}: free blocks and spares do not add up"
    );
}

#[test]
fn crash_at_every_store_with_stripe_spares_leaves_blocks_old_or_new() {
    // Pairs of blocks share a stripe, so a block one overwrite replaces is
    // the target of the next write to the other: reuse must wait until
    // the map entry that left it is durable.
    let geo = Geometry {
        block_size: 64,
        lbas: 260,
        data_blocks: 260 + STRIPES as u64,
    };
    let used = [0u64, 256, 1, 257, 2, 258];
    for seed in 0..6u64 {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let ops: Vec<(u64, u8)> = (1..=20u8)
            .map(|t| (used[rng.random_range(0..used.len())], t))
            .collect();
        let format = || Btt::format(SimRegion::new(geo.region_len()), geo).expect("format");
        let probe = format();
        assert!(probe.keep_spares);
        run(&probe, &ops, &mut [0; 260], &mut None);
        assert_free_space_adds_up(&probe, "after the workload");
        at_every_crash_point(
            &|| (format(), vec![0; 260]),
            &ops,
            seed,
            &mut |b, done, inflight, point| {
                assert_old_or_new(
                    b,
                    &used,
                    done,
                    inflight,
                    &format!("seed {seed} point {point}"),
                );
            },
        );
    }
}

#[test]
fn stripe_spares_never_strand_the_last_free_blocks() {
    // Exactly STRIPES blocks beyond the logical ones (spares on), and one
    // fewer and BATCH (spares off; a batch takes all its blocks before it
    // flips any, so it needs BATCH free): overwriting every block in
    // random order, single and batched, never runs out, and free space
    // adds up.
    for extra in [STRIPES as u64, STRIPES as u64 - 1, BATCH as u64] {
        let geo = Geometry {
            block_size: 64,
            lbas: 600,
            data_blocks: 600 + extra,
        };
        let b = Btt::format(SimRegion::new(geo.region_len()), geo).expect("format");
        assert_eq!(b.keep_spares, extra >= STRIPES as u64);
        b.write_blocks(0, &vec![1u8; 600 * 64]).expect("fill");
        let mut rng = ChaCha8Rng::seed_from_u64(extra);
        for t in 0..3000u32 {
            let lba = rng.random_range(0..geo.lbas);
            b.write_block(lba, &[t as u8; 64])
                .unwrap_or_else(|e| panic!("extra {extra}: write {t} of lba {lba}: {e}"));
        }
        assert_free_space_adds_up(&b, &format!("extra {extra}, single writes"));
        b.write_blocks(7, &vec![2u8; 300 * 64])
            .unwrap_or_else(|e| panic!("extra {extra}: batched rewrite: {e}"));
        assert_free_space_adds_up(&b, &format!("extra {extra}, batched writes"));
        assert_eq!(b.trim_blocks(0, 600).expect("trim"), 600);
        assert_free_space_adds_up(&b, &format!("extra {extra}, trimmed"));
    }
}

/// Crashes at every store and fence of a seeded overwrite workload in `mode`;
/// returns how many (crash point, block) pairs came back torn. Checks in both
/// modes that every block holds only tags it was ever written with, and every
/// write completed before the crash (each ends with a fence) is present or
/// overwritten by the in-flight one.
fn torn_blocks(mode: WriteMode, seed: u64) -> usize {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let ops: Vec<(u64, u8)> = (1..=16u8)
        .map(|t| (rng.random_range(0..GEO.lbas), t))
        .collect();
    // Every block mapped first, so in-place writes really go in place.
    let fill: Vec<(u64, u8)> = (0..GEO.lbas).map(|l| (l, 100 + l as u8)).collect();
    let fresh = || {
        let b = Btt::format_with(SimRegion::new(GEO.region_len()), GEO, mode).expect("format");
        let mut done = vec![0u8; 8];
        run(&b, &fill, &mut done, &mut None);
        (b, done)
    };
    let mut torn = 0;
    at_every_crash_point(&fresh, &ops, seed, &mut |b, done, inflight, point| {
        assert_eq!(b.in_place_written(), mode == WriteMode::InPlace);
        for lba in 0..GEO.lbas {
            let mut buf = [0u8; 64];
            b.read_block(lba, &mut buf).expect("read");
            let want = done[lba as usize];
            let new = inflight.filter(|&(l, _)| l == lba).map(|(_, t)| t);
            for &x in &buf {
                assert!(
                    x == want || Some(x) == new,
                    "{mode} seed {seed} point {point}: lba {lba} byte {x}, want {want} or {new:?}"
                );
            }
            if buf.iter().any(|&x| x != buf[0]) {
                torn += 1;
            }
        }
    });
    torn
}

#[test]
fn in_place_mode_can_tear_where_atomic_mode_cannot() {
    let (mut atomic, mut in_place) = (0, 0);
    for seed in 0..4 {
        atomic += torn_blocks(WriteMode::Atomic, seed);
        in_place += torn_blocks(WriteMode::InPlace, seed);
    }
    assert_eq!(atomic, 0, "an atomic write tore a block");
    assert!(
        in_place > 0,
        "the crash model never tore an in-place write: the comparison proves nothing"
    );
}

#[test]
fn in_place_writes_round_trip_and_flag_the_image() {
    let b = Btt::format_with(SimRegion::new(GEO.region_len()), GEO, WriteMode::InPlace)
        .expect("format");
    assert_eq!(b.mode(), WriteMode::InPlace);
    assert!(b.in_place_written());
    b.write_block(2, &[5; 64])
        .expect("first write maps the block");
    let mapped = b.map.get(2);
    b.write_bytes(2, 10, &[9; 20]).expect("in-place byte write");
    b.write_block(3, &[7; 64]).expect("write");
    assert_eq!(b.map.get(2), mapped, "an in-place write keeps the mapping");
    let free = b.alloc.free_blocks();
    b.write_block(3, &[8; 64]).expect("overwrite");
    assert_eq!(b.alloc.free_blocks(), free, "no allocation in place");
    let region = b.into_region();
    region.crash(0);
    let b = Btt::open(region).expect("reopen atomic");
    assert!(b.in_place_written(), "the flag is sticky");
    let mut buf = [0u8; 64];
    b.read_block(2, &mut buf).expect("read");
    let mut want = [5u8; 64];
    want[10..30].fill(9);
    assert_eq!(buf, want);
    b.read_block(3, &mut buf).expect("read");
    assert_eq!(buf, [8; 64]);
    let b = Btt::format(b.into_region(), GEO).expect("reformat");
    assert!(!b.in_place_written(), "format clears the flag");
}

#[test]
fn batched_writes_span_batches_wrap_stripes_and_do_not_deadlock() {
    let geo = Geometry {
        block_size: 64,
        lbas: 600,
        data_blocks: 700,
    };
    for mode in [WriteMode::Atomic, WriteMode::InPlace] {
        let b = Btt::format_with(SimRegion::new(geo.region_len()), geo, mode).expect("format");
        // 150 blocks from 200: three batches, crossing stripe 0 (lba 256).
        let data: Vec<u8> = (0..150 * 64u32).map(|i| (i / 64) as u8).collect();
        b.write_blocks(200, &data).expect("write");
        assert!(b.write_blocks(599, &[0; 128]).is_err(), "past the end");
        assert!(b.write_blocks(0, &[0; 65]).is_err(), "not whole blocks");
        std::thread::scope(|s| {
            for t in 0..2u8 {
                let b = &b;
                s.spawn(move || {
                    for round in 0..50u64 {
                        let first = (round * 37 + u64::from(t) * 101) % 400;
                        b.write_blocks(first, &[t; 64 * 130])
                            .expect("concurrent write");
                    }
                });
            }
        });
        b.write_blocks(200, &data).expect("rewrite");
        let mut buf = [0u8; 64];
        for i in 0..150 {
            b.read_block(200 + i, &mut buf).expect("read");
            assert_eq!(buf, [i as u8; 64], "{mode} block {i}");
        }
        let region = b.into_region();
        region.crash(1);
        let b = Btt::open(region).expect("reopen");
        b.read_block(349, &mut buf).expect("read");
        assert_eq!(buf, [149; 64], "{mode}");
        assert_eq!(b.alloc.free_blocks(), 700 - b.map.used().count() as u64);
    }
}

/// A write of `tag` to one block, or a trim of `count` blocks.
#[derive(Clone, Copy, Debug)]
enum Op {
    Write(u64, u8),
    Trim(u64, u64),
}

#[test]
fn crash_at_every_store_of_writes_and_trims_leaves_blocks_old_or_new() {
    // Few spare blocks, so blocks freed by a trim are soon reused by a write
    // to another block: freeing before the unmap is durable would let a
    // crash show that write's data under the trimmed block.
    let geo = Geometry {
        block_size: 64,
        lbas: 8,
        data_blocks: 10,
    };
    for seed in 0..12u64 {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let ops: Vec<Op> = (1..=24u8)
            .map(|t| {
                if rng.random_range(0..3) == 0 {
                    let first = rng.random_range(0..geo.lbas);
                    Op::Trim(first, rng.random_range(1..=geo.lbas - first))
                } else {
                    Op::Write(rng.random_range(0..geo.lbas), t)
                }
            })
            .collect();
        let run = |b: &Btt<SimRegion>, done: &mut [u8; 8], next: &mut [u8; 8]| {
            for &op in &ops {
                next.clone_from(done);
                let result = match op {
                    Op::Write(lba, tag) => {
                        next[lba as usize] = tag;
                        b.write_block(lba, &[tag; 64])
                    }
                    Op::Trim(first, count) => {
                        next[first as usize..(first + count) as usize].fill(0);
                        b.trim_blocks(first, count).map(|_| ())
                    }
                };
                if result.is_err() {
                    return;
                }
                done.clone_from(next);
            }
        };
        let probe = Btt::format(SimRegion::new(geo.region_len()), geo).expect("format");
        let start = probe.region().events();
        run(&probe, &mut [0; 8], &mut [0; 8]);
        let total = probe.region().events() - start;
        let mut trimmed = 0;
        for point in 0..=total {
            let b = Btt::format(SimRegion::new(geo.region_len()), geo).expect("format");
            b.region().crash_after(start + point);
            let (mut done, mut next) = ([0u8; 8], [0u8; 8]);
            run(&b, &mut done, &mut next);
            let region = b.into_region();
            region.crash(seed ^ (point << 16));
            let b = Btt::open(region)
                .unwrap_or_else(|e| panic!("seed {seed} point {point}: reopen: {e}"));
            for lba in 0..geo.lbas {
                let mut buf = [0u8; 64];
                b.read_block(lba, &mut buf).expect("read");
                let tag = buf[0];
                assert!(
                    buf.iter().all(|&x| x == tag),
                    "seed {seed} point {point}: torn lba {lba}: {buf:?}"
                );
                let (old, new) = (done[lba as usize], next[lba as usize]);
                assert!(
                    tag == old || tag == new,
                    "seed {seed} point {point}: lba {lba} holds {tag}, want {old} or {new}"
                );
                trimmed += usize::from(tag == 0 && !b.is_mapped(lba));
            }
            assert_eq!(
                b.alloc.free_blocks(),
                geo.data_blocks - b.map.used().count() as u64,
                "seed {seed} point {point}: free space rebuilt from the map"
            );
        }
        assert!(trimmed > 0, "seed {seed}: no crash point saw a trim");
    }
}

#[test]
fn trim_unmaps_frees_and_reads_zero() {
    let b = Btt::format(SimRegion::new(GEO.region_len()), GEO).expect("format");
    for lba in 0..GEO.lbas {
        b.write_block(lba, &[lba as u8 + 1; 64]).expect("write");
    }
    let free = b.alloc.free_blocks();
    assert_eq!(b.trim_blocks(2, 3).expect("trim"), 3);
    assert_eq!(
        b.trim_blocks(2, 3).expect("trim again"),
        0,
        "nothing left to free"
    );
    assert_eq!(b.alloc.free_blocks(), free + 3);
    assert!(b.trim_blocks(7, 2).is_err(), "past the end");
    assert!(b.trim_blocks(u64::MAX, 2).is_err(), "overflow");
    let mut buf = [9u8; 64];
    b.read_block(3, &mut buf).expect("read");
    assert_eq!(buf, [0; 64]);
    let region = b.into_region();
    region.crash(3);
    let b = Btt::open(region).expect("reopen");
    for lba in 0..GEO.lbas {
        b.read_block(lba, &mut buf).expect("read");
        let want = if (2..5).contains(&lba) {
            0
        } else {
            lba as u8 + 1
        };
        assert_eq!(buf, [want; 64], "lba {lba} after reopen");
        assert_eq!(b.is_mapped(lba), want != 0);
    }
    assert_eq!(b.alloc.free_blocks(), free + 3);
}

/// Lock-free reads never return a torn or foreign block: two writers keep
/// rewriting 8 blocks (each block all one tag) with 2 spare data blocks, so a
/// freed block is reused almost at once, while two readers check every block
/// they read is one tag that was written to that block.
#[test]
fn lock_free_reads_never_see_a_reused_block() {
    // Without stripe spares (blocks freed to the bitmap and taken by any
    // stripe), and with them (a block replaced by an overwrite is reused
    // by the next write of its stripe: blocks 0..4 share stripes with
    // 256..260).
    let small = Geometry {
        block_size: 4096,
        lbas: 8,
        data_blocks: 10,
    };
    let spares = Geometry {
        block_size: 4096,
        lbas: 264,
        data_blocks: 264 + STRIPES as u64,
    };
    for (geo, lbas) in [
        (small, (0..8).collect::<Vec<u64>>()),
        (spares, vec![0, 1, 2, 3, 256, 257, 258, 259]),
    ] {
        reads_race_writes(geo, &lbas);
    }
}

fn reads_race_writes(geo: Geometry, lbas: &[u64]) {
    let dir = tempfile::tempdir().expect("tempdir");
    for persistence in [
        crate::ntl::PersistenceRequest::None,
        crate::ntl::PersistenceRequest::CacheLine,
    ] {
        let region = crate::ntl::MmapRegion::open(
            &dir.path().join(format!("{persistence:?}")),
            geo.region_len(),
            true,
            persistence,
        )
        .expect("map");
        let b = Btt::format(region, geo).expect("format");
        assert_eq!(b.keep_spares, geo.data_blocks - geo.lbas >= STRIPES as u64);
        // Block `lbas[i]` only ever holds tags `i * 16 + 1 ..= i * 16 + 15`.
        for (i, &lba) in lbas.iter().enumerate() {
            b.write_block(lba, &[i as u8 * 16 + 1; 4096]).expect("fill");
        }
        let stop = std::sync::atomic::AtomicBool::new(false);
        let reads = std::sync::atomic::AtomicU64::new(0);
        std::thread::scope(|s| {
            for w in 0..2u64 {
                let (b, stop, reads) = (&b, &stop, &reads);
                s.spawn(move || {
                    // Stops the readers however this writer ends (a failed
                    // write panics: the readers must not spin forever).
                    struct Stop<'a>(&'a std::sync::atomic::AtomicBool);
                    impl Drop for Stop<'_> {
                        fn drop(&mut self) {
                            self.0.store(true, Ordering::Relaxed);
                        }
                    }
                    let _stop = Stop(stop);
                    let mut rng = ChaCha8Rng::seed_from_u64(w);
                    // At least 40,000 writes each, and on until the readers
                    // have raced them enough (a loaded machine can starve
                    // the readers while the writers finish), within 20 s.
                    let started = std::time::Instant::now();
                    let mut writes = 0u32;
                    while writes < 40_000
                        || (reads.load(Ordering::Relaxed) < 2000
                            && started.elapsed().as_secs() < 20)
                    {
                        let i = rng.random_range(0..lbas.len());
                        let tag = i as u8 * 16 + rng.random_range(1..16u8);
                        b.write_block(lbas[i], &[tag; 4096]).expect("write");
                        writes += 1;
                    }
                });
            }
            for r in 0..2u64 {
                let (b, stop, reads) = (&b, &stop, &reads);
                s.spawn(move || {
                    let mut rng = ChaCha8Rng::seed_from_u64(100 + r);
                    let mut buf = vec![0u8; 4096];
                    while !stop.load(Ordering::Relaxed) {
                        let i = rng.random_range(0..lbas.len());
                        let lba = lbas[i];
                        b.read_block(lba, &mut buf).expect("read");
                        let tag = buf[0];
                        assert_eq!(tag / 16, i as u8, "lba {lba} read another block's data");
                        assert!(
                            buf.iter().all(|&x| x == tag),
                            "lba {lba}: torn read ({tag} and others)"
                        );
                        reads.fetch_add(1, Ordering::Relaxed);
                    }
                });
            }
        });
        assert!(
            reads.load(Ordering::Relaxed) > 1000,
            "the readers hardly ran"
        );
    }
}

#[test]
fn bad_sizes_and_full_device_are_errors() {
    let b = Btt::format(SimRegion::new(GEO.region_len()), GEO).expect("format");
    assert!(b.write_block(8, &[0; 64]).is_err());
    assert!(b.write_block(0, &[0; 63]).is_err());
    let mut buf = [1u8; 64];
    b.read_block(3, &mut buf).expect("read");
    assert_eq!(buf, [0; 64], "unwritten blocks read as zeros");
    assert!(Btt::open(SimRegion::new(64)).is_err());
    // A flipped info byte or an out-of-range map entry refuses the image.
    let Btt { region, .. } = b;
    region.write(20, &[0xff]).expect("corrupt");
    assert!(matches!(
        Btt::open(region),
        Err(MapError::Info(InfoError::Checksum { .. }))
    ));
    let region = SimRegion::new(GEO.region_len());
    let region = Btt::format(region, GEO).expect("format").into_region();
    region
        .store_u64(INFO_LEN + 8, crate::ntl::map::encode(GEO.data_blocks))
        .expect("store");
    assert!(matches!(
        Btt::open(region),
        Err(MapError::BadEntry { lba: 1, .. })
    ));
}

#[test]
fn verify_catches_a_mutation_of_each_btt_invariant() {
    let geo = Geometry {
        block_size: 64,
        lbas: 8,
        data_blocks: 8 + STRIPES as u64 + 4,
    };
    let b = Btt::format(SimRegion::new(geo.region_len()), geo).expect("format");
    for lba in 0..4 {
        b.write_block(lba, &[lba as u8 + 1; 64]).expect("write");
    }
    // An overwrite leaves the block it replaced as its stripe's spare.
    b.write_block(0, &[9; 64]).expect("overwrite");
    assert_eq!(b.verify(), Ok(()));
    let mapped = b.map.get(1).expect("mapped");

    // 1: the info block no longer states the layer's flags.
    b.region
        .write(0, &info::encode(&geo, info::FLAG_IN_PLACE, info::VERSION))
        .expect("info");
    assert!(b.verify().expect_err("1").contains("BTT invariant 1 "));
    b.region
        .write(0, &info::encode(&geo, 0, info::VERSION))
        .expect("info");
    assert_eq!(b.verify(), Ok(()));

    // 2: the media's entry and DRAM's disagree (map invariant 4).
    let at = b.map.entry_offset(1);
    let entry = b.region.load_u64(at).expect("load");
    b.region.store_u64(at, 0).expect("store");
    let got = b.verify().expect_err("2");
    assert!(
        got.contains("BTT invariant 2 ") && got.contains("map invariant 4 "),
        "{got}"
    );
    b.region.store_u64(at, entry).expect("store");

    // 4: a lane's newest record is not the one it wrote last.
    let lane = b.stripes[0].lock.lock().expect("lock").seq;
    assert!(lane > 0, "lba 0's lane logged its writes");
    b.stripes[0].lock.lock().expect("lock").seq = lane + 2;
    assert!(b.verify().expect_err("4").contains("BTT invariant 4 "));
    b.stripes[0].lock.lock().expect("lock").seq = lane;

    // 5: a mapped block is free in the allocator.
    assert!(b.alloc.free(mapped));
    assert!(b.verify().expect_err("5").contains("BTT invariant 5 "));
    assert_eq!(b.alloc.alloc(mapped), Some(mapped));
    assert_eq!(b.verify(), Ok(()));

    // 6: a stripe's spare is a mapped block.
    b.stripes[5].lock.lock().expect("lock").spare = Some(mapped);
    assert!(b.verify().expect_err("6").contains("BTT invariant 6 "));
    b.stripes[5].lock.lock().expect("lock").spare = None;

    // 7: a data block lost: neither mapped, nor spare, nor free.
    let lost = b.alloc.alloc(0).expect("a free block");
    assert!(b.verify().expect_err("7").contains("BTT invariant 7 "));
    assert!(b.alloc.free(lost));
    assert_eq!(b.verify(), Ok(()));
}
