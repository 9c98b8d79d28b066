use std::time::{Duration, SystemTime};

use super::*;
use crate::backend::MemoryBackend;
use crate::{FileCache, FileCacheConfig};

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
const BLOCK: u64 = 256 * KIB;

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(29).wrapping_add(seed) ^ (i >> 13) as u8)
        .collect()
}

fn at(secs: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
}

/// A spill of `size` bytes at `dir/spill` in front of `origin`, under a
/// DRAM cache of 1 MiB (4 blocks): most reads reach the spill.
fn gateway(
    dir: &Path,
    origin: &Arc<MemoryBackend>,
) -> (FileCache<Arc<SpillBackend>>, Arc<SpillBackend>) {
    let mut config = SpillConfig::new(dir.join("spill"), BLOCK);
    config.size = Some(64 * MIB);
    config.block_size = 64 * KIB as u32;
    let inner: Arc<dyn Backend> = Arc::clone(origin) as Arc<dyn Backend>;
    dram_over(SpillBackend::open(inner, &config).expect("spill"))
}

/// A DRAM cache of 1 MiB (4 blocks, LRU) over `spill`.
fn dram_over(spill: SpillBackend) -> (FileCache<Arc<SpillBackend>>, Arc<SpillBackend>) {
    dram_of(spill, MIB)
}

/// A DRAM cache of `dram` bytes (LRU, one shard) over `spill`.
fn dram_of(spill: SpillBackend, dram: u64) -> (FileCache<Arc<SpillBackend>>, Arc<SpillBackend>) {
    let spill = Arc::new(spill);
    let cache = FileCache::new(
        Arc::clone(&spill),
        &FileCacheConfig {
            block_size_bytes: BLOCK,
            capacity_bytes: dram,
            shards: 1,
            policy: PolicyConfig::default_for("lru").expect("lru"),
            ..FileCacheConfig::default()
        },
    )
    .expect("cache");
    (cache, spill)
}

/// Every byte of `key` through `cache`.
fn read_all(cache: &FileCache<Arc<SpillBackend>>, key: &str) -> Vec<u8> {
    let object = cache.open(key).expect("open");
    let mut out = Vec::new();
    for index in 0..object.info.size.div_ceil(BLOCK) {
        out.extend_from_slice(&cache.block(key, &object, index).expect("block"));
    }
    out
}

#[test]
fn a_reopened_spill_serves_every_block_without_the_origin() {
    let dir = tempfile::tempdir().unwrap();
    let origin = Arc::new(MemoryBackend::new());
    let files = [
        ("a.mp4", pattern((3 * MIB + 100) as usize, 1)),
        ("dir/b.bin", pattern((5 * MIB) as usize, 2)),
        ("empty", Vec::new()),
        ("tiny", pattern(10, 3)),
    ];
    for (key, bytes) in &files {
        origin.put(key, bytes.clone(), at(1_700_000_000));
    }
    {
        let (cache, spill) = gateway(dir.path(), &origin);
        assert_eq!(
            spill.opened().formatted.as_deref(),
            Some("it was blank"),
            "{:?}",
            spill.opened()
        );
        for (key, bytes) in &files {
            assert_eq!(&read_all(&cache, key), bytes, "{key} cold");
        }
        let cold = origin.reads();
        // The DRAM cache holds 4 blocks; the rest come back from the SSD.
        for (key, bytes) in &files {
            assert_eq!(&read_all(&cache, key), bytes, "{key} from the spill");
        }
        assert_eq!(origin.reads(), cold, "a second pass reads only the SSD");
        let t = spill.tier().metrics();
        assert!(t.hits >= 100, "{t:?}");
        let mut metrics = Vec::new();
        cache.backend_metrics(&mut metrics);
        let names: Vec<&str> = metrics.iter().map(|m| m.name.as_str()).collect();
        assert!(
            names.contains(&"spill_hits") && names.contains(&"spill_objects"),
            "{names:?}"
        );
        spill.close().expect("close");
    }
    let before = origin.reads();
    let (cache, spill) = gateway(dir.path(), &origin);
    let opened = spill.opened().clone();
    assert!(opened.formatted.is_none() && opened.clean, "{opened:?}");
    assert_eq!(opened.objects, 4, "{opened:?}");
    assert!(opened.cached_blocks >= 8 * MIB / (64 * KIB), "{opened:?}");
    for (key, bytes) in &files {
        assert_eq!(&read_all(&cache, key), bytes, "{key} after the restart");
    }
    assert_eq!(origin.reads(), before, "warm: the origin is not read");
}

#[test]
fn a_changed_object_is_read_anew_and_its_old_blocks_never_served() {
    let dir = tempfile::tempdir().unwrap();
    let origin = Arc::new(MemoryBackend::new());
    let old = pattern((2 * MIB) as usize, 7);
    origin.put("v", old.clone(), at(100));
    {
        let (cache, spill) = gateway(dir.path(), &origin);
        assert_eq!(read_all(&cache, "v"), old);
        spill.close().expect("close");
    }
    // Same size, another time; then another size.
    let new = pattern((2 * MIB) as usize, 8);
    origin.put("v", new.clone(), at(101));
    {
        let (cache, _spill) = gateway(dir.path(), &origin);
        let before = origin.reads();
        assert_eq!(read_all(&cache, "v"), new, "not the spilled version");
        assert!(origin.reads() > before);
    }
    let shorter = pattern((MIB + 5) as usize, 9);
    origin.put("v", shorter.clone(), at(101));
    let (cache, spill) = gateway(dir.path(), &origin);
    assert_eq!(
        spill.opened().objects,
        1,
        "one record per key after the open"
    );
    assert_eq!(read_all(&cache, "v"), shorter);
}

#[test]
fn a_missing_or_foreign_map_formats_the_tier_afresh() {
    let dir = tempfile::tempdir().unwrap();
    let origin = Arc::new(MemoryBackend::new());
    let bytes = pattern((2 * MIB) as usize, 5);
    origin.put("x", bytes.clone(), at(5));
    let map = dir.path().join("spill.map");
    {
        let (cache, _spill) = gateway(dir.path(), &origin);
        read_all(&cache, "x");
    }
    std::fs::remove_file(&map).unwrap();
    {
        let (cache, spill) = gateway(dir.path(), &origin);
        let why = spill.opened().formatted.clone().unwrap_or_default();
        assert!(why.contains("no map"), "{why}");
        assert_eq!(spill.opened().cached_blocks, 0);
        let before = origin.reads();
        assert_eq!(read_all(&cache, "x"), bytes);
        assert!(origin.reads() > before, "nothing was left to hit");
    }
    // Another tier's map (its identity changed).
    let mut other = std::fs::read(&map).unwrap();
    other[16] ^= 0xff;
    let crc = crc32c::crc32c(&other[..60]);
    other[60..64].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(&map, other).unwrap();
    let (cache, spill) = gateway(dir.path(), &origin);
    let why = spill.opened().formatted.clone().unwrap_or_default();
    assert!(why.contains("another cache device"), "{why}");
    // A damaged one.
    drop(cache);
    drop(spill);
    std::fs::write(&map, b"garbage").unwrap();
    let (_cache, spill) = gateway(dir.path(), &origin);
    let why = spill.opened().formatted.clone().unwrap_or_default();
    assert!(why.contains("damaged"), "{why}");
}

#[test]
fn origin_errors_pass_through_with_their_kind_and_are_not_cached() {
    let dir = tempfile::tempdir().unwrap();
    let origin = Arc::new(MemoryBackend::new());
    let bytes = pattern((MIB) as usize, 4);
    origin.put("e", bytes.clone(), at(9));
    let (cache, _spill) = gateway(dir.path(), &origin);
    let object = cache.open("e").expect("open");
    origin.fail_next_read(BackendErrorKind::Timeout);
    let error = cache.block("e", &object, 0).expect_err("timeout");
    assert_eq!(error.kind, BackendErrorKind::Timeout, "{error}");
    assert_eq!(read_all(&cache, "e"), bytes, "the next read tries again");
    let missing = cache.open("nope").expect_err("404");
    assert_eq!(missing.kind, BackendErrorKind::NotFound);
}

/// A spill on `device` (the cache device, shared so that the test can crash
/// and reboot it) at `dir`, under a DRAM cache of 1 MiB.
fn gateway_on(
    dir: &Path,
    origin: &Arc<MemoryBackend>,
    device: &Arc<cairn_store::device::FaultyDevice>,
    exclusive: bool,
) -> Result<(FileCache<Arc<SpillBackend>>, Arc<SpillBackend>), SpillError> {
    let mut config = SpillConfig::new(dir.join("spill"), BLOCK);
    config.block_size = 64 * KIB as u32;
    config.exclusive = exclusive;
    let inner: Arc<dyn Backend> = Arc::clone(origin) as Arc<dyn Backend>;
    let cache: SharedDevice = Arc::clone(device) as SharedDevice;
    Ok(dram_over(SpillBackend::open_on(inner, &cache, &config)?))
}

/// Every file read through `cache` (twice: the second pass reads the
/// spill), each byte checked against `origin`'s current contents.
fn check_all(cache: &FileCache<Arc<SpillBackend>>, files: &[(&str, Vec<u8>)], context: &str) {
    for _ in 0..2 {
        for (key, bytes) in files {
            assert!(
                read_all(cache, key) == *bytes,
                "{key}: wrong bytes {context}"
            );
        }
    }
}

#[test]
fn a_crash_at_any_write_of_the_ssd_never_serves_wrong_bytes() {
    crash_points(false);
}

#[test]
fn a_crash_at_any_write_of_an_exclusive_ssd_never_serves_wrong_bytes() {
    crash_points(true);
}

fn crash_points(exclusive: bool) {
    use cairn_store::device::{CrashMode, FaultyDevice};
    let device_bytes = 24 * MIB;
    let original = vec![
        ("a", pattern((3 * MIB / 2) as usize, 11)),
        ("b/c", pattern((2 * MIB + 3) as usize, 12)),
        ("d", pattern((700 * KIB) as usize, 13)),
    ];
    // How many writes a whole run makes, to spread the crash points over.
    let total = {
        let dir = tempfile::tempdir().unwrap();
        let origin = Arc::new(MemoryBackend::new());
        for (key, bytes) in &original {
            origin.put(key, bytes.clone(), at(1));
        }
        let device = Arc::new(FaultyDevice::new(device_bytes, 1));
        let (cache, spill) = gateway_on(dir.path(), &origin, &device, exclusive).expect("spill");
        let before = device.counts().writes;
        check_all(&cache, &original, "without a crash");
        cache.demote_all();
        spill.close().expect("close");
        device.counts().writes - before
    };
    assert!(total > 20, "{total} writes");
    let mut points = 0;
    for (m, mode) in [
        CrashMode::DropUnflushed,
        CrashMode::Reorder,
        CrashMode::TearLast,
    ]
    .into_iter()
    .enumerate()
    {
        for k in (1..=total).step_by((total / 25).max(1) as usize) {
            let context = format!("({mode:?}, crash at write {k} of {total})");
            let dir = tempfile::tempdir().unwrap();
            let origin = Arc::new(MemoryBackend::new());
            let mut files = original.clone();
            for (key, bytes) in &files {
                origin.put(key, bytes.clone(), at(1));
            }
            let device = Arc::new(FaultyDevice::new(device_bytes, k + 1000 * m as u64));
            {
                let (cache, spill) =
                    gateway_on(dir.path(), &origin, &device, exclusive).expect("spill");
                device.crash_after_writes(k, mode);
                // Before and after the crash: a failed SSD passes reads to
                // the origin, never serves what it cannot prove.
                check_all(&cache, &files, &format!("before the restart {context}"));
                cache.demote_all();
                drop(cache);
                drop(spill);
            }
            // The process died at the crash: no failure marker was written
            // after it.
            let _ = std::fs::remove_file(dir.path().join("spill.map.failed"));
            if !device.reboot() {
                // The run made fewer than k writes (an exclusive spill's
                // hand-downs vary with their timing): it dies here instead.
                device.crash_now(mode);
            }
            // One object changes while the server is down, every other run.
            if k % 2 == 1 {
                files[1].1 = pattern((2 * MIB) as usize, 14);
                origin.put(files[1].0, files[1].1.clone(), at(2));
            }
            let (cache, spill) = gateway_on(dir.path(), &origin, &device, exclusive)
                .unwrap_or_else(|e| panic!("reopening {context}: {e}"));
            check_all(&cache, &files, &format!("after the restart {context}"));
            cache.wait_for_demotions();
            if k % 2 == 0 {
                // Every clean block the SSD holds is what the origin holds
                // (a changed object's old blocks belong to no object, which
                // this check cannot read back).
                spill
                    .tier()
                    .verify()
                    .unwrap_or_else(|e| panic!("{e} {context}"));
            }
            points += 1;
        }
    }
    eprintln!("{points} crash points over {total} writes, 3 modes (exclusive: {exclusive})");
}

#[test]
fn a_map_that_cannot_be_appended_to_passes_reads_to_the_backend() {
    let dir = tempfile::tempdir().unwrap();
    let origin = Arc::new(MemoryBackend::new());
    let old = pattern((2 * MIB) as usize, 21);
    origin.put("k", old.clone(), at(1));
    let (cache, spill) = gateway(dir.path(), &origin);
    assert_eq!(read_all(&cache, "k"), old);
    spill
        .spans
        .map
        .lock()
        .unwrap()
        .as_mut()
        .expect("open")
        .0
        .fail_appends();
    // A new version cannot get a span: it is read from the origin, and
    // the old version's blocks on the SSD are not served for it.
    let new = pattern((2 * MIB) as usize, 22);
    origin.put("k", new.clone(), at(2));
    let before = origin.reads();
    assert_eq!(read_all(&cache, "k"), new);
    assert!(origin.reads() > before);
    // Nor can a new object: read from the origin, never a failure.
    let other = pattern((MIB + 1) as usize, 23);
    origin.put("other", other.clone(), at(1));
    assert_eq!(read_all(&cache, "other"), other);
    assert_eq!(read_all(&cache, "k"), new);
}

/// How the two levels share blocks.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Levels {
    Inclusive,
    /// Exclusive, an SSD hit moving up.
    Exclusive,
    /// Exclusive, an SSD hit served in place.
    InPlace,
}

/// A spill (LRU, 64 KiB tier blocks) that caches `ssd` bytes, sharing as
/// `levels` says, under a DRAM cache of `dram` bytes (LRU).
fn two_levels(
    dir: &Path,
    origin: &Arc<MemoryBackend>,
    levels: Levels,
    dram: u64,
    ssd: u64,
) -> (FileCache<Arc<SpillBackend>>, Arc<SpillBackend>) {
    let mut config = SpillConfig::new(dir.join("spill"), BLOCK);
    config.block_size = 64 * KIB as u32;
    config.policy = PolicyConfig::default_for("lru").expect("lru");
    config.exclusive = levels != Levels::Inclusive;
    config.promote = levels != Levels::InPlace;
    config.size = Some(config.device_bytes_for(ssd));
    let inner: Arc<dyn Backend> = Arc::clone(origin) as Arc<dyn Backend>;
    dram_of(SpillBackend::open(inner, &config).expect("spill"), dram)
}

#[test]
fn an_exclusive_spill_holds_what_dram_drops_and_the_two_hold_their_sum() {
    // 7 MiB read over and over through 4 MiB of DRAM and a 4 MiB spill:
    // exclusive, the two levels hold it all; inclusive, the spill holds
    // DRAM's blocks again and the origin is read on every pass. In place,
    // the SSD serves its blocks where they are: once the cold pass is
    // handed down, nothing moves and nothing is written.
    let files = [
        ("x", pattern((4 * MIB + 5) as usize, 31)),
        ("y", pattern((3 * MIB - 7 * KIB) as usize, 32)),
    ];
    let mut origin_reads = Vec::new();
    for levels in [Levels::Exclusive, Levels::Inclusive, Levels::InPlace] {
        let dir = tempfile::tempdir().unwrap();
        let origin = Arc::new(MemoryBackend::new());
        for (key, bytes) in &files {
            origin.put(key, bytes.clone(), at(1));
        }
        let (cache, spill) = two_levels(dir.path(), &origin, levels, 4 * MIB, 4 * MIB);
        assert_eq!(spill.takes_demotions(), levels != Levels::Inclusive);
        for (key, bytes) in &files {
            assert_eq!(&read_all(&cache, key), bytes, "{key} cold");
        }
        let cold = origin.reads();
        cache.wait_for_demotions();
        let handed = spill.tier().metrics().promotions;
        for pass in 0..3 {
            for (key, bytes) in &files {
                assert_eq!(&read_all(&cache, key), bytes, "{key} pass {pass}");
            }
        }
        origin_reads.push(origin.reads() - cold);
        cache.wait_for_demotions();
        let t = spill.tier().metrics();
        match levels {
            Levels::Exclusive => assert!(t.taken_blocks > 0 && t.promotions > handed, "{t:?}"),
            Levels::Inclusive => assert_eq!(t.taken_blocks, 0, "{t:?}"),
            Levels::InPlace => {
                // Of the 29 blocks, the 13 DRAM dropped in the cold pass
                // are read from the SSD on each pass, and none moves.
                assert_eq!(spill.kept(), 13 * 3, "{t:?}");
                assert_eq!((t.taken_blocks, t.promotions), (0, handed), "{t:?}");
            }
        }
        spill
            .tier()
            .verify()
            .expect("every clean block is the origin's");
    }
    assert_eq!(
        origin_reads[0], 0,
        "exclusive: 8 MiB of two levels hold 7 MiB"
    );
    assert!(
        origin_reads[1] >= 3 * 4,
        "inclusive: the origin is read on every pass ({origin_reads:?})"
    );
    assert_eq!(origin_reads[2], 0, "in place: the two levels hold it all");
}

#[test]
fn a_spill_that_serves_in_place_must_be_exclusive() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = SpillConfig::new(dir.path().join("spill"), BLOCK);
    config.size = Some(config.device_bytes_for(4 * MIB));
    config.promote = false;
    let origin: Arc<dyn Backend> = Arc::new(MemoryBackend::new());
    let e = SpillBackend::open(Arc::clone(&origin), &config)
        .err()
        .expect("refused");
    assert!(e.to_string().contains("must be exclusive"), "{e}");
    config.exclusive = true;
    let spill = SpillBackend::open(origin, &config).expect("exclusive, in place");
    assert!(spill.exclusive() && !spill.promotes());
}

#[test]
fn an_exclusive_spill_takes_dram_at_a_clean_stop_so_a_restart_is_warm() {
    // 2 MiB fits DRAM: nothing is dropped, so only the clean stop's hand
    // down puts it on the SSD.
    let dir = tempfile::tempdir().unwrap();
    let origin = Arc::new(MemoryBackend::new());
    let bytes = pattern((2 * MIB - 3) as usize, 41);
    origin.put("z", bytes.clone(), at(1));
    {
        let (cache, spill) = two_levels(dir.path(), &origin, Levels::Exclusive, 4 * MIB, 4 * MIB);
        assert_eq!(read_all(&cache, "z"), bytes);
        assert_eq!(spill.tier().metrics().cached_blocks, 0);
        assert_eq!(cache.demote_all(), 8);
        spill.close().expect("close");
    }
    let before = origin.reads();
    let (cache, spill) = two_levels(dir.path(), &origin, Levels::Exclusive, 4 * MIB, 4 * MIB);
    assert!(spill.opened().clean, "{:?}", spill.opened());
    assert_eq!(read_all(&cache, "z"), bytes);
    assert_eq!(origin.reads(), before, "warm: every block from the SSD");
    // Read up into DRAM, the SSD let them go.
    assert_eq!(spill.tier().metrics().cached_blocks, 0);
}

#[test]
fn under_concurrent_readers_an_exclusive_spill_holds_every_block_in_exactly_one_level() {
    // 7 MiB (28 blocks, 112 tier blocks) read by 8 threads at once through
    // 4 MiB of DRAM over a spill that caches 6 MiB: whatever the order of
    // drops, hand-downs and blocks taken back, once the hand-downs are done
    // each block is in DRAM or on the SSD, not in both and not in neither;
    // whether an SSD hit moves up or is served in place.
    for levels in [Levels::Exclusive, Levels::InPlace] {
        one_level_each(levels);
    }
}

fn one_level_each(levels: Levels) {
    let files = [
        ("x", pattern((4 * MIB) as usize, 51)),
        ("y", pattern((3 * MIB) as usize, 52)),
    ];
    let dir = tempfile::tempdir().unwrap();
    let origin = Arc::new(MemoryBackend::new());
    for (key, bytes) in &files {
        origin.put(key, bytes.clone(), at(1));
    }
    let (cache, spill) = two_levels(dir.path(), &origin, levels, 4 * MIB, 6 * MIB);
    for round in 0..5u64 {
        std::thread::scope(|scope| {
            for t in 0..8u64 {
                let (cache, files) = (&cache, &files);
                scope.spawn(move || {
                    let mut x = t * 7919 + round * 104_729 + 1;
                    for _ in 0..120 {
                        x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                        let (key, bytes) = &files[(x >> 40) as usize % 2];
                        let object = cache.open(key).expect("open");
                        let blocks = object.info.size / BLOCK;
                        let index = (x >> 20) % blocks;
                        let block = cache.block(key, &object, index).expect("block");
                        let at = (index * BLOCK) as usize;
                        assert!(
                            block[..] == bytes[at..at + BLOCK as usize],
                            "{key} block {index}"
                        );
                    }
                });
            }
        });
        cache.wait_for_demotions();
        let dram = cache.stats().resident_bytes / (64 * KIB);
        let ssd = spill.tier().metrics().cached_blocks;
        assert_eq!(
            dram + ssd,
            112,
            "{levels:?} round {round}: {dram} tier blocks' worth in DRAM, {ssd} on the SSD"
        );
        spill
            .tier()
            .verify()
            .expect("every clean block is the origin's");
    }
}
