//! Guards miss-for-miss parity with libCacheSim for CLOCK, LFU, SIEVE, S4LRU,
//! 2Q and ARC on the `cloudPhysicsIO` sample trace.
//!
//! The bug this prevents: a "small" semantic drift (where a hit promotes to,
//! how segment sizes round, whether a ghost hit counts, the order of the
//! evict-before-insert loop) changes miss ratios by a few hundredths of a
//! percent, too little to notice by eye and enough to make every comparison
//! with published libCacheSim numbers wrong.
//!
//! The expected miss counts are libCacheSim's (`cachesim TRACE oracleGeneral
//! POLICY SIZES`, commit aa0fc40 of 1a1a11a/libCacheSim; `slru` is its S4LRU
//! default), object-count mode with `--ignore-obj-size 1` at 1 %, 5 %, 10 %
//! and 20 % of the 48,974 distinct objects, byte mode at the same fractions of
//! the 2,029,769,728-byte working set. The test reads the trace from
//! `shared/traces/` in an ancestor directory of the crate and is skipped
//! (with a message) if it is not there.

use std::path::PathBuf;

use cairn_policy::{Access, Capacity, PolicyConfig};

const TRACE: &str = "shared/traces/cloudPhysicsIO.oracleGeneral.bin";
const OBJECTS: [u64; 4] = [489, 2448, 4897, 9794];
const BYTES: [u64; 4] = [20_297_697, 101_488_486, 202_976_972, 405_953_945];

/// (policy, misses in object mode, misses in byte mode), 113,872 requests.
const EXPECTED: [(&str, [u64; 4], [u64; 4]); 6] = [
    (
        "clock",
        [95332, 93829, 91599, 85213],
        [94828, 93652, 92082, 83212],
    ),
    (
        "lfu",
        [96765, 93052, 90040, 81557],
        [93724, 92328, 89993, 78313],
    ),
    (
        "sieve",
        [94419, 93052, 90040, 81557],
        [93724, 92328, 89993, 78313],
    ),
    (
        "s4lru",
        [94590, 93530, 90011, 82560],
        [93529, 91826, 88640, 83364],
    ),
    (
        "twoq",
        [94573, 92813, 88160, 79192],
        [94245, 92901, 87627, 82218],
    ),
    (
        "arc",
        [94229, 92392, 88002, 80004],
        [93625, 91348, 87541, 78069],
    ),
];

fn find_trace() -> Option<PathBuf> {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .map(|dir| dir.join(TRACE))
        .find(|path| path.is_file())
}

/// libCacheSim's oracleGeneral: 24-byte little-endian records, u32 time,
/// u64 object id, u32 size, i64 next access.
fn read_trace(path: &PathBuf) -> Vec<Access> {
    let bytes = std::fs::read(path).expect("read the trace");
    assert_eq!(bytes.len() % 24, 0, "oracleGeneral records are 24 bytes");
    bytes
        .chunks_exact(24)
        .enumerate()
        .map(|(time, record)| {
            let key = u64::from_le_bytes(record[4..12].try_into().expect("8 bytes"));
            let size = u32::from_le_bytes(record[12..16].try_into().expect("4 bytes"));
            Access::read(key, size, time as u64)
        })
        .collect()
}

fn misses(name: &str, capacity: Capacity, trace: &[Access]) -> u64 {
    let mut policy = PolicyConfig::default_for(name)
        .expect("a registered policy")
        .build(capacity)
        .expect("builds");
    let mut victims = Vec::new();
    let mut misses = 0;
    for access in trace {
        victims.clear();
        if !policy.access(access, &mut victims) {
            misses += 1;
        }
    }
    misses
}

#[test]
fn miss_counts_equal_libcachesim() {
    let Some(path) = find_trace() else {
        eprintln!(
            "skipped: {TRACE} not found above {}",
            env!("CARGO_MANIFEST_DIR")
        );
        return;
    };
    let trace = read_trace(&path);
    assert_eq!(trace.len(), 113_872);
    // Unoptimised builds take about a minute for the whole matrix: they
    // check the smallest sizes only; `test.sh` runs the tests in release.
    let sizes = if cfg!(debug_assertions) {
        1
    } else {
        OBJECTS.len()
    };
    for (name, objects, bytes) in EXPECTED {
        for (size, expected) in OBJECTS.into_iter().zip(objects).take(sizes) {
            let got = misses(name, Capacity::Objects(size), &trace);
            assert_eq!(got, expected, "{name}, {size} objects");
        }
        for (size, expected) in BYTES.into_iter().zip(bytes).take(sizes) {
            let got = misses(name, Capacity::Bytes(size), &trace);
            assert_eq!(got, expected, "{name}, {size} bytes");
        }
    }
}
