//! Our policies agree with libCacheSim, the field's reference simulator, in
//! two versions named here: its current release (the `libcachesim` 0.3.5
//! Python wheel from the Python Package Index, `TraceReader(..., ReaderInitParam(ignore_obj_size=
//! True))` and `process_trace`) and commit `aa0fc40` (`cachesim TRACE
//! oracleGeneral ALGO 0.01,0.05,0.1,0.2 --ignore-obj-size 1`), where most
//! published numbers before 2025 come from.
//!
//! The numbers below are libCacheSim's exact miss counts on the sample
//! `CloudPhysics` trace (in the repo, `crates/cairn/data/`), in object-count
//! mode at 1, 5, 10 and 20 % of its 48,974 distinct objects and, without
//! `ignore_obj_size`, at the same fractions of its bytes (sizes truncated as
//! libCacheSim truncates). A semantic drift of a few hundredths of a percent
//! (where a hit promotes to, how segment sizes round, whether a ghost hit
//! counts) is invisible by eye and makes every comparison with published
//! libCacheSim numbers wrong. A policy that drifts from libCacheSim's
//! semantics fails here by name, version, size and count. W-TinyLFU is absent
//! on purpose: ours follows Caffeine, not libCacheSim's variant (see
//! `docs/policies.md`).
//!
//! Between the two versions only S3-FIFO and GDSF changed on this trace, and
//! the random generator (LeCaR, Cacheus); the older behaviour of each stays
//! selectable (`s3fifo-v0`, `gdsf:new_unit_competes=false`,
//! `lecar:generator=mmix`) and is checked against `aa0fc40`. LRU-K and MQ
//! are new in 0.3.5 (`aa0fc40` has an empty `LRU_K.cpp` and no MQ).

use std::path::PathBuf;

use cairn_policy::beladysize::BeladySizeConfig;
use cairn_policy::cacheus::CacheusConfig;
use cairn_policy::clockpro::{ClockProConfig, ClockProVariant};
use cairn_policy::flashprob::FlashProbConfig;
use cairn_policy::gdsf::GdsfConfig;
use cairn_policy::hyperbolic::HyperbolicConfig;
use cairn_policy::lecar::LecarConfig;
use cairn_policy::libcachesim::Version;
use cairn_policy::opt::OptConfig;
use cairn_policy::random::RandomConfig;
use cairn_policy::randomlru::RandomLruConfig;
use cairn_policy::randomtwo::RandomTwoConfig;
use cairn_policy::residents::SamplerVersion;
use cairn_policy::rng::Generator;
use cairn_policy::{Access, Capacity, PolicyConfig};
use cairn_trace::read::{self, Format};
use cairn_trace::{Splitter, Unit};

/// Object-count sizes: 1, 5, 10, 20 % of 48,974 distinct objects, truncated.
const OBJECTS: [u64; 4] = [489, 2448, 4897, 9794];
/// Byte sizes: the same fractions of the 2,029,769,728-byte working set.
const BYTES: [u64; 4] = [20_297_697, 101_488_486, 202_976_972, 405_953_945];

/// (policy, libCacheSim's misses in object mode, in byte mode where measured),
/// of 113,872 requests.
type MissCounts = (&'static str, [u64; 4], Option<[u64; 4]>);

/// libCacheSim 0.3.5 (`pip install libcachesim==0.3.5`), every policy both share.
#[rustfmt::skip]
const LIBCACHESIM_0_3_5: &[MissCounts] = &[
    ("lru",    [95420, 93897, 91657, 82547], Some([94956, 93700, 92200, 83500])),
    ("fifo",   [96518, 94122, 91716, 81172], Some([95293, 93741, 91954, 84369])),
    ("clock",  [95332, 93829, 91599, 85213], Some([94828, 93652, 92082, 83212])),
    ("lfu",    [96765, 93052, 90040, 81557], Some([93724, 92328, 89993, 78313])),
    ("sieve",  [94419, 93052, 90040, 81557], Some([93724, 92328, 89993, 78313])),
    ("arc",    [94229, 92392, 88002, 80004], Some([93625, 91348, 87541, 78069])),
    ("s3fifo", [94569, 92574, 86006, 75875], Some([93779, 91378, 85885, 75026])),
    ("twoq",   [94573, 92813, 88160, 79192], Some([94245, 92901, 87627, 82218])),
    ("s4lru",  [94590, 93530, 90011, 82560], Some([93529, 91826, 88640, 83364])),
    ("lirs",   [94680, 92673, 85609, 74687], Some([93607, 91024, 84149, 73026])),
    ("gdsf",   [94681, 93403, 91388, 85048], Some([93474, 90175, 86333, 74762])),
    ("lfuda",  [95152, 93583, 91325, 82687], Some([93964, 93058, 91359, 81808])),
    ("lruk",   [96547, 93052, 90040, 81557], Some([93724, 92328, 89993, 78313])),
    ("clock2qplus", [94359, 92791, 85597, 75326], Some([94096, 91836, 86278, 75236])),
    ("mq",     [94654, 92319, 88333, 83251], Some([93991, 92467, 88640, 84683])),
    // libCacheSim's ClockPro never evicts (see cairn_policy::clockpro);
    // `variant = "libcachesim-0.3.5"` reproduces it, the paper's is our default.
    ("clockpro-0.3.5", [100_907, 99623, 98762, 95230], Some([99974, 98218, 97319, 94274])),
    // libCacheSim's random numbers continue from whatever ran before in the
    // thread; each of these runs is in a fresh process, which is where ours
    // start (cairn_policy::rng).
    ("lecar",  [95200, 93879, 91651, 82524], Some([94299, 93699, 92131, 79622])),
    ("cacheus", [95112, 93246, 89546, 77319], Some([93835, 91433, 85822, 78996])),
    ("size",   [97760, 96547, 93044, 85152], Some([93025, 81283, 78547, 73067])),
    ("belady", [90263, 80078, 71620, 62049], Some([91152, 82379, 74162, 65317])),
    // LRB trains its first model after 131,072 labelled samples; this trace
    // is shorter, so both evict as LRU throughout (its trained behaviour is
    // checked by `lrb_trained_stays_within_tolerance_of_libcachesim`).
    ("lrb",    [95420, 93897, 91657, 82547], Some([94956, 93700, 92200, 83500])),
    // GLCache trains its first model 86,401 s after its first eviction; this
    // trace spans 7,200 s, so both merge segments in FIFO order throughout
    // (`glcache_never_trains_on_the_sample_trace`).
    ("glcache", [95394, 93462, 90161, 82752], Some([94678, 92944, 89763, 83747])),
    // 3L-Cache trains after 65,536 labelled marks, which this trace does not
    // yield (ours draws libCacheSim's marks): LRU throughout in both (trained
    // behaviour: `threelcache_trained_stays_within_tolerance_of_libcachesim`).
    ("3lcache", [95420, 93897, 91657, 82547], Some([94956, 93700, 92200, 83500])),
];

/// libCacheSim 0.3.5's randomized policies, each size run in a fresh Python
/// process. Their sampler draws from one thread-local generator that the
/// wheel never reseeds, so a run's victims depend on every run before it in
/// the process; a fresh process starts from the state our default (unset)
/// `seed` starts from. Table size as the wheel's (`hash_power` 16).
#[rustfmt::skip]
const LIBCACHESIM_0_3_5_FRESH: &[MissCounts] = &[
    ("hyperbolic-0.3.5", [95032, 93432, 91453, 85016], Some([94590, 93262, 91763, 83272])),
    ("random-0.3.5", [97074, 93684, 90343, 83608], Some([95400, 93400, 90541, 84358])),
    // One draw per hit (lru-prob) or per unit leaving DRAM (flashprob).
    ("lru-prob",   [95697, 93929, 91609, 81170], Some([95026, 93699, 92052, 83932])),
    ("flashprob",  [97230, 92500, 89975, 81267], Some([95959, 92749, 89687, 81648])),
    ("lhd",        [95276, 93797, 91580, 82793], Some([93087, 91235, 88688, 82117])),
    // Reads the trace's next-access times; its table is the cache's own
    // (`hash_power` 24).
    ("beladysize-0.3.5", [90347, 80179, 71706, 62049], Some([88215, 77098, 68439, 60203])),
];

/// libCacheSim commit aa0fc40, where it differs from 0.3.5.
#[rustfmt::skip]
const LIBCACHESIM_AA0FC40: &[MissCounts] = &[
    ("s3fifo-v0",  [94559, 91396, 85691, 77208], Some([93706, 91452, 83764, 76916])),
    // Not in the 0.3.5 wheel.
    ("s3lru", [94326, 91392, 85065, 76520], Some([93566, 90945, 83273, 76361])),
    ("gdsf-evict-first", [94688, 93404, 91389, 85049], None),
    // aa0fc40's random generator (MMIX); `cachesim` runs each size in a
    // fresh worker thread.
    ("lecar-mmix", [95257, 93880, 91656, 82578], Some([94309, 93593, 92129, 80063])),
    // cachesim resets the generator to 0 before each run; its tables start
    // at 2^16 buckets for random and 2^12 for hyperbolic (cache_init.h and
    // Hyperbolic_init each take 8 off the hash power).
    ("random-aa0fc40", [96157, 93860, 90992, 83039], Some([95174, 93726, 91016, 84294])),
    // `cachesim ... randomTwo`, the same table (2^16 buckets) and generator
    // reset; not in the 0.3.5 wheel.
    ("random-two-aa0fc40", [95743, 93830, 91172, 83168], Some([95025, 93720, 91395, 84538])),
    // `cachesim ... RandomLRU`: 64 draws an eviction whatever its
    // `n-samples` says.
    ("random-lru-aa0fc40", [95428, 93875, 91629, 84341], Some([94958, 93692, 92143, 84093])),
    // MMIX from 0 in each of cachesim's runs. (aa0fc40's `lru-prob` reads
    // its list head uninitialised and prints nothing.)
    ("flashprob-aa0fc40", [97236, 92611, 89839, 81082], Some([95971, 92772, 89524, 81466])),
    ("hyperbolic-aa0fc40", [95072, 93364, 91245, 84355], Some([94628, 93295, 91435, 84275])),
    // The lazy-promotion / quick-demotion family (Yang et al., HotOS 2023),
    // which the 0.3.5 wheel does not have.
    ("qdlp",       [94343, 91392, 85066, 76513], Some([93566, 90945, 83273, 76350])),
    ("sfifo",      [94590, 93530, 90011, 82560], Some([93520, 91670, 88634, 83291])),
    ("lp-sfifo",   [94462, 93627, 89961, 82019], Some([93744, 91915, 89256, 83831])),
    ("lp-arc",     [94246, 92402, 88002, 80033], Some([93641, 91827, 87697, 77963])),
    ("lp-twoq",    [94573, 92813, 88160, 79192], Some([94245, 92901, 87627, 82218])),
    // `cachesim ... fifomerge` (defaults n-exam=100, n-keep=50, retain by
    // frequency; its generator reset to 0 before each run, as ours starts).
    ("fifo-merge", [94982, 92954, 89864, 82685], Some([94365, 92833, 89818, 83830])),
    // Policies `cachesim` has no name for, run through their `*_init` by
    // `bench/libcachesim-driver.c` linked against aa0fc40's libraries (the
    // same loop as cachesim's `_simulate`; it reproduces cachesim's numbers
    // for the policies both run). Cacheus's two experts on their own:
    ("sr-lru", [94459, 93242, 88375, 82561], Some([93814, 91434, 87238, 81738])),
    ("cr-lfu", [97060, 95515, 92607, 84964], Some([94703, 92980, 89916, 84760])),
    // MRU (`MRU_init`; not in the 0.3.5 wheel).
    ("mru", [109_437, 105_822, 100_821, 90916], Some([106_763, 102_059, 97864, 89374])),
    // `cachesim ... fifo-belady | lru-belady | sieve-belady`, which read the
    // trace's next-access times. Object mode only: in byte mode the horizon
    // (capacity / miss ratio, in requests) outlasts the trace, every
    // resident comes due, and aa0fc40 turns its FIFO and LRU queues forever
    // (no result in 600 s) and dereferences a null hand in SIEVE (a crash).
    ("fifo-belady", [94928, 91283, 80622, 72110], None),
    ("lru-belady", [94832, 91288, 80761, 72076], None),
    ("sieve-belady", [94258, 91729, 85041, 69251], None),
    // `cachesim ... s3fifod` (fifo-size-ratio=0.10, main-cache=Clock2,
    // move-to-main-threshold=1); not in the 0.3.5 wheel.
    ("s3fifod", [94343, 91392, 85066, 76504], Some([93566, 90945, 83273, 76350])),
];

/// The sample trace, in the repo.
fn sample_trace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../cairn/data/cloudPhysicsIO.oracleGeneral.bin.zst")
}

fn config(name: &str) -> PolicyConfig {
    match name {
        // libCacheSim's Belady always admits; our default OPT may refuse.
        "belady" => PolicyConfig::Opt(OptConfig { bypass: false }),
        "gdsf-evict-first" => PolicyConfig::Gdsf(GdsfConfig {
            new_unit_competes: false,
            ..GdsfConfig::default()
        }),
        "clockpro-0.3.5" => PolicyConfig::Clockpro(ClockProConfig {
            variant: ClockProVariant::Libcachesim035,
            ..ClockProConfig::default()
        }),
        "lecar-mmix" => PolicyConfig::Lecar(LecarConfig {
            generator: Generator::Mmix,
            ..LecarConfig::default()
        }),
        "random-0.3.5" => PolicyConfig::Random(RandomConfig {
            version: SamplerVersion::V0_3_5,
            ..RandomConfig::default()
        }),
        "hyperbolic-0.3.5" => PolicyConfig::Hyperbolic(HyperbolicConfig {
            version: SamplerVersion::V0_3_5,
            ..HyperbolicConfig::default()
        }),
        "beladysize-0.3.5" => PolicyConfig::Beladysize(BeladySizeConfig {
            version: SamplerVersion::V0_3_5,
            ..BeladySizeConfig::default()
        }),
        "random-aa0fc40" => PolicyConfig::Random(RandomConfig {
            version: SamplerVersion::Aa0fc40,
            ..RandomConfig::default()
        }),
        "random-two-aa0fc40" => PolicyConfig::RandomTwo(RandomTwoConfig {
            version: SamplerVersion::Aa0fc40,
            ..RandomTwoConfig::default()
        }),
        "random-lru-aa0fc40" => PolicyConfig::RandomLru(RandomLruConfig {
            version: SamplerVersion::Aa0fc40,
            ..RandomLruConfig::default()
        }),
        "flashprob-aa0fc40" => PolicyConfig::Flashprob(FlashProbConfig {
            version: Version::Aa0fc40,
            ..FlashProbConfig::default()
        }),
        "hyperbolic-aa0fc40" => PolicyConfig::Hyperbolic(HyperbolicConfig {
            version: SamplerVersion::Aa0fc40,
            hash_power: Some(12),
            ..HyperbolicConfig::default()
        }),
        _ => PolicyConfig::default_for(name).unwrap_or_else(|| panic!("no policy named {name}")),
    }
}

fn count_misses(name: &str, capacity: Capacity, accesses: &[Access]) -> u64 {
    let mut policy = config(name).build(capacity).expect("default configs build");
    let mut victims = Vec::new();
    accesses
        .iter()
        .filter(|access| {
            victims.clear();
            !policy.access(access, &mut victims)
        })
        .count() as u64
}

fn sample_accesses() -> Vec<Access> {
    let path = sample_trace();
    let mut splitter = Splitter::new(Unit::Object);
    let mut accesses = Vec::new();
    for request in read::open(&path, &Format::OracleGeneral).expect("the sample trace opens") {
        splitter.split(&request.expect("the sample trace reads"), &mut accesses);
    }
    assert_eq!(accesses.len(), 113_872);
    accesses
}

/// Every row of `table` at every size; returns the differences.
fn differences(version: &str, table: &[MissCounts], accesses: &[Access]) -> Vec<String> {
    let mut differences = Vec::new();
    for &(name, objects, bytes) in table {
        let modes = OBJECTS.map(Capacity::Objects).into_iter().zip(objects);
        let byte_modes = bytes.map(|b| BYTES.map(Capacity::Bytes).into_iter().zip(b));
        for (capacity, expected) in modes.chain(byte_modes.into_iter().flatten()) {
            let misses = count_misses(name, capacity, accesses);
            println!(
                "{name:16} {capacity:?}: ours {misses} ({:.4}), libCacheSim {version} {expected} ({:.4})",
                misses as f64 / 113_872.0,
                expected as f64 / 113_872.0
            );
            if misses != expected {
                differences.push(format!(
                    "{name} {capacity:?}: {misses}, libCacheSim {version} {expected}"
                ));
            }
        }
    }
    differences
}

#[test]
fn miss_counts_equal_libcachesim_0_3_5_on_the_sample_trace() {
    let differences = differences("0.3.5", LIBCACHESIM_0_3_5, &sample_accesses());
    assert!(
        differences.is_empty(),
        "differences from libCacheSim 0.3.5: {differences:#?}"
    );
}

/// The `glcache` row above compares the untrained path: on the sample trace
/// (7,200 s) no training is due, in libCacheSim as here.
#[test]
fn glcache_never_trains_on_the_sample_trace() {
    use cairn_policy::Policy;
    use cairn_policy::glcache::{GlCache, GlCacheConfig};
    let accesses = sample_accesses();
    let span = accesses.last().unwrap().clock - accesses[0].clock;
    assert_eq!(span, 7200);
    for capacity in [Capacity::Objects(OBJECTS[0]), Capacity::Bytes(BYTES[3])] {
        let mut glcache = GlCache::new(capacity, &GlCacheConfig::default()).unwrap();
        let mut victims = Vec::new();
        let misses = accesses
            .iter()
            .filter(|access| !glcache.access(access, &mut victims))
            .count();
        assert!(
            misses > 80_000 && !victims.is_empty(),
            "{capacity:?}: {misses}"
        );
        assert_eq!(glcache.trainings(), 0, "{capacity:?}");
    }
}

#[test]
fn randomized_policies_equal_libcachesim_0_3_5_from_a_fresh_generator() {
    let differences = differences("0.3.5", LIBCACHESIM_0_3_5_FRESH, &sample_accesses());
    assert!(
        differences.is_empty(),
        "differences from libCacheSim 0.3.5 (fresh process): {differences:#?}"
    );
}

/// Cairn's own sampler (`version = "cairn"`, the default) draws other
/// victims than libCacheSim's, from the same distribution for `random` and
/// near it for `hyperbolic` and `beladysize` (libCacheSim's draws are not
/// uniform over residents); over the sample trace's 113,872 requests its miss counts
/// stay within [`SAMPLER_TOLERANCE`] of 0.3.5's at every size, both modes,
/// for the default seed and four others.
#[test]
fn cairns_sampler_tracks_libcachesim_0_3_5() {
    let accesses = sample_accesses();
    let mut worst = 0.0f64;
    let mut differences = Vec::new();
    for name in ["random", "hyperbolic", "beladysize"] {
        let &(_, objects, bytes) = LIBCACHESIM_0_3_5_FRESH
            .iter()
            .find(|row| row.0 == format!("{name}-0.3.5"))
            .expect("a 0.3.5 row");
        let modes = OBJECTS.map(Capacity::Objects).into_iter().zip(objects);
        let byte_modes = BYTES.map(Capacity::Bytes).into_iter().zip(bytes.unwrap());
        for (capacity, expected) in modes.chain(byte_modes) {
            for seed in [None, Some(1), Some(2), Some(3), Some(4)] {
                let config = match name {
                    "random" => PolicyConfig::Random(RandomConfig {
                        seed,
                        ..RandomConfig::default()
                    }),
                    "hyperbolic" => PolicyConfig::Hyperbolic(HyperbolicConfig {
                        seed,
                        ..HyperbolicConfig::default()
                    }),
                    _ => PolicyConfig::Beladysize(BeladySizeConfig {
                        seed,
                        ..BeladySizeConfig::default()
                    }),
                };
                let mut policy = config.build(capacity).expect("builds");
                let mut victims = Vec::new();
                let misses = accesses
                    .iter()
                    .filter(|access| {
                        victims.clear();
                        !policy.access(access, &mut victims)
                    })
                    .count() as u64;
                let off = misses.abs_diff(expected) as f64 / accesses.len() as f64;
                worst = worst.max(off);
                println!(
                    "{name:10} {capacity:?} seed {seed:?}: ours {misses}, 0.3.5 {expected}, off {off:.4}"
                );
                if off > SAMPLER_TOLERANCE {
                    differences.push(format!(
                        "{name} {capacity:?} seed {seed:?}: {misses} vs {expected}"
                    ));
                }
            }
        }
    }
    println!("worst difference {worst:.4} of the requests");
    assert!(
        differences.is_empty(),
        "beyond {SAMPLER_TOLERANCE}: {differences:#?}"
    );
}

/// The largest miss-count difference from libCacheSim 0.3.5 allowed to
/// Cairn's sampler, as a fraction of the requests.
const SAMPLER_TOLERANCE: f64 = 0.005;

#[test]
fn the_older_versions_equal_libcachesim_aa0fc40_on_the_sample_trace() {
    let differences = differences("aa0fc40", LIBCACHESIM_AA0FC40, &sample_accesses());
    assert!(
        differences.is_empty(),
        "differences from libCacheSim aa0fc40: {differences:#?}"
    );
}

/// A zipf trace on which lazy promotion shows (on the sample trace `lp-twoq`
/// gives `twoq`'s counts, and `sfifo` `s4lru`'s in object mode), generated
/// here as by `cairn trace gen zipf items=20000 alpha=1.0 requests=200000
/// seed=7 -o zipf.oracleGeneral.bin`.
fn zipf_accesses() -> Vec<Access> {
    let config = cairn_trace::generate::ZipfConfig {
        items: 20_000,
        alpha: 1.0,
        pace: cairn_trace::generate::Pace {
            requests: 200_000,
            seed: 7,
            ..cairn_trace::generate::Pace::default()
        },
        ..cairn_trace::generate::ZipfConfig::default()
    };
    let mut splitter = Splitter::new(Unit::Object);
    let mut accesses = Vec::new();
    for request in config.generator().expect("the zipf config is valid") {
        splitter.split(&request, &mut accesses);
    }
    accesses
}

/// libCacheSim aa0fc40's misses on the zipf trace above (`cachesim
/// zipf.oracleGeneral.bin oracleGeneral ALGO 0.01,0.05,0.1,0.2
/// --ignore-obj-size 1`, miss ratio × 200,000), object mode: the lazy
/// variants and their eager counterparts, which differ here.
#[rustfmt::skip]
const LIBCACHESIM_AA0FC40_ZIPF: &[(&str, [u64; 4])] = &[
    ("qdlp",     [95728, 66418, 53974, 41823]),
    ("sfifo",    [98099, 67886, 55300, 42546]),
    ("s4lru",    [98059, 67921, 55295, 42534]),
    ("lp-sfifo", [96843, 67189, 55208, 43215]),
    ("lp-arc",   [96198, 66846, 54378, 42300]),
    ("arc",      [96796, 67474, 55066, 42858]),
    ("lp-twoq",  [99118, 69273, 56627, 44393]),
    ("twoq",     [99495, 69720, 57130, 44780]),
];

#[test]
fn the_lazy_promotion_family_equals_libcachesim_aa0fc40_on_a_zipf_trace() {
    let accesses = zipf_accesses();
    let distinct = accesses
        .iter()
        .map(|a| a.key)
        .collect::<std::collections::HashSet<_>>()
        .len() as f64;
    let mut differences = Vec::new();
    for &(name, expected) in LIBCACHESIM_AA0FC40_ZIPF {
        for (fraction, expected) in [0.01, 0.05, 0.1, 0.2].into_iter().zip(expected) {
            let capacity = Capacity::Objects((fraction * distinct) as u64);
            let misses = count_misses(name, capacity, &accesses);
            println!("{name:8} zipf {capacity:?}: ours {misses}, libCacheSim aa0fc40 {expected}");
            if misses != expected {
                differences.push(format!(
                    "{name} zipf {capacity:?}: {misses}, aa0fc40 {expected}"
                ));
            }
        }
    }
    assert!(
        differences.is_empty(),
        "differences from libCacheSim aa0fc40: {differences:#?}"
    );
    // The trace tells each lazy variant from its eager counterpart.
    let row = |name| {
        LIBCACHESIM_AA0FC40_ZIPF
            .iter()
            .find(|r| r.0 == name)
            .unwrap()
            .1
    };
    for (lazy, eager) in [("lp-twoq", "twoq"), ("sfifo", "s4lru"), ("lp-arc", "arc")] {
        assert_ne!(
            row(lazy),
            row(eager),
            "{lazy} and {eager} coincide on the zipf trace"
        );
    }
}

/// libCacheSim 0.3.5's admissioners in front of a policy: (policy, filter
/// spec as JSON, object mode?, misses at the four sizes).
#[rustfmt::skip]
const LIBCACHESIM_0_3_5_ADMISSION: &[(&str, &str, bool, [u64; 4])] = &[
    // SizeAdmissioner(size_threshold=65536), byte mode.
    ("lru", r#"{"filter":"size","below_bytes":65536}"#, false, [93421, 91976, 85790, 77818]),
    ("lru", r#"{"filter":"size","below_bytes":16384}"#, false, [93389, 83107, 83107, 83107]),
    // BloomFilterAdmissioner(): an exact table of every key missed; our
    // Bloom filter with room for all 48,974 keys (489 units × 128 at 1 %;
    // 4,955 units of 4 KiB × 16 in byte mode) and a 1e-9 false positive rate.
    ("lru", r#"{"filter":"bloom","keys_per_unit":128,"false_positive_rate":1e-9}"#, true, [96657, 95323, 92734, 87337]),
    ("s3fifo", r#"{"filter":"bloom","keys_per_unit":128,"false_positive_rate":1e-9}"#, true, [96270, 92013, 86597, 78157]),
    ("lru", r#"{"filter":"bloom","keys_per_unit":16,"false_positive_rate":1e-9}"#, false, [96603, 95428, 92713, 88401]),
    // The random ones, each size in a fresh Python process (a fresh
    // generator, where ours starts).
    // ProbAdmissioner() and ProbAdmissioner(0.2).
    ("lru", r#"{"filter":"probabilistic"}"#, true, [96986, 95191, 91618, 85162]),
    ("lru", r#"{"filter":"probabilistic"}"#, false, [96682, 95417, 91551, 84859]),
    ("lru", r#"{"filter":"probabilistic","probability":0.2}"#, true, [99407, 95585, 93193, 87219]),
    ("lru", r#"{"filter":"probabilistic","probability":0.2}"#, false, [99323, 96630, 93429, 87775]),
    // SizeProbabilisticAdmissioner() and (1e-5), byte mode (in object mode
    // libCacheSim's sizes are 1 and ours are the requests').
    ("lru", r#"{"filter":"size-probabilistic"}"#, false, [94957, 93699, 92060, 83569]),
    ("lru", r#"{"filter":"size-probabilistic","exponent":1e-5}"#, false, [94885, 93685, 89155, 81678]),
    // AdaptSizeAdmissioner() and (reconf_interval=5000).
    ("lru", r#"{"filter":"adaptsize"}"#, true, [97236, 95123, 90863, 84992]),
    ("lru", r#"{"filter":"adaptsize"}"#, false, [95932, 85819, 81174, 77829]),
    ("lru", r#"{"filter":"adaptsize","reconf_interval":5000}"#, true, [97527, 95123, 90495, 84992]),
    ("lru", r#"{"filter":"adaptsize","reconf_interval":5000}"#, false, [93410, 88354, 82761, 77749]),
    ("s3fifo", r#"{"filter":"adaptsize"}"#, true, [95870, 94123, 88449, 76016]),
    ("s3fifo", r#"{"filter":"adaptsize"}"#, false, [95231, 90202, 81360, 77829]),
];

#[test]
fn admission_filters_equal_libcachesim_0_3_5_on_the_sample_trace() {
    let accesses = sample_accesses();
    let mut differences = Vec::new();
    for &(name, filter, objects, expected) in LIBCACHESIM_0_3_5_ADMISSION {
        let filter: cairn_policy::AdmissionConfig =
            serde_json::from_str(filter).expect("a valid filter");
        let sizes = if objects {
            OBJECTS.map(Capacity::Objects)
        } else {
            BYTES.map(Capacity::Bytes)
        };
        for (capacity, expected) in sizes.into_iter().zip(expected) {
            let policy = config(name).build(capacity).expect("default configs build");
            let mut policy = filter.wrap(policy).expect("the filter builds");
            let mut victims = Vec::new();
            let misses = accesses
                .iter()
                .filter(|access| {
                    victims.clear();
                    !policy.access(access, &mut victims)
                })
                .count() as u64;
            println!(
                "{name:7} {:14} {capacity:?}: ours {misses}, libCacheSim 0.3.5 {expected}",
                filter.name()
            );
            if misses != expected {
                differences.push(format!(
                    "{name}+{} {capacity:?}: {misses}, libCacheSim 0.3.5 {expected}",
                    filter.name()
                ));
            }
        }
    }
    assert!(
        differences.is_empty(),
        "differences from libCacheSim 0.3.5: {differences:#?}"
    );
}

/// The runs trace the prefetcher rows use: `cairn trace gen runs items=65536
/// runs=256 requests=200000 size_bytes=512 seed=7` (one 512-byte sector a
/// block, so a block's start-sector key is its number and OBL's "next unit"
/// is the next block for libCacheSim too).
fn runs_accesses() -> Vec<Access> {
    let config = cairn_trace::generate::RunsConfig {
        pace: cairn_trace::generate::Pace {
            requests: 200_000,
            size_bytes: 512,
            seed: 7,
            ..cairn_trace::generate::Pace::default()
        },
        ..cairn_trace::generate::RunsConfig::default()
    };
    let mut splitter = Splitter::new(Unit::StartSector);
    let mut accesses = Vec::new();
    for request in config.generator().expect("the runs config is valid") {
        splitter.split(&request, &mut accesses);
    }
    accesses
}

/// (policy, prefetcher as JSON, libCacheSim aa0fc40's misses at 1, 5, 10,
/// 20 % of the runs trace's distinct blocks), by
/// `cairn trace convert runs.vscsi runs.oracleGeneral.bin --oracle-key
/// start-sector` and `cachesim runs.oracleGeneral.bin oracleGeneral lru
/// 0.01,0.05,0.1,0.2 --ignore-obj-size 1 --prefetch OBL --prefetch-params
/// block-size=1,sequential-confidence-k=K` (libCacheSim's OBL inserts a unit
/// of its `block-size`; 1 is one object), with the miss ratio printed to 8
/// digits (`main.c` prints 4) and multiplied by 200,000. Without a
/// prefetcher LRU misses 181203 / 130064 / 102575 / 73879. The Python wheel
/// 0.3.5 has no prefetchers.
#[rustfmt::skip]
const LIBCACHESIM_AA0FC40_PREFETCH: &[(&str, &str, [u64; 4])] = &[
    ("lru", r#"{"prefetcher":"obl","sequential_confidence_k":4}"#, [30229, 21421, 16961, 12603]),
    ("lru", r#"{"prefetcher":"obl","sequential_confidence_k":1}"#, [13725, 10191, 8399, 6627]),
    ("fifo", r#"{"prefetcher":"obl","sequential_confidence_k":4}"#, [30464, 23268, 19025, 14393]),
    ("clock", r#"{"prefetcher":"obl","sequential_confidence_k":2}"#, [19955, 15260, 12400, 9589]),
    // --prefetch PG --prefetch-params block-size=4096 (our unit_bytes), with
    // two defects of aa0fc40's PG.c mended (unmended it misses 176362 /
    // 125389 / 99838 / 71530; see docs/policies.md): its candidates come
    // from popping a heap whose raised priorities are never sifted up
    // (`pri++` before `pqueue_change_priority`, which then compares the new
    // priority with itself), so some units above the threshold are not
    // loaded; here a scan of the unit's arcs collects them, least likely
    // first, ties by id. And `current_req_lbl[0]` is read uninitialised in
    // `_PG_add_to_graph`; here it is 0.
    ("lru", r#"{"prefetcher":"pg","unit_bytes":4096}"#, [175_024, 123_869, 98741, 70844]),
    // --prefetch Mithril --prefetch-params block-size=4096,cycle-time=1:
    // libCacheSim's default cycle-time=2 re-inserts an evicted, unused
    // prefetched unit once from inside the eviction (139657 / 92854 / 31043
    // / 27757), which `Policy` has no hook for; see docs/policies.md.
    ("lru", r#"{"prefetcher":"mithril","unit_bytes":4096}"#, [139_660, 92728, 31071, 27839]),
    // ... with lookahead-range=10,pf-list-size=4 / min-support=1 /
    // max-support=12,min-support=3,confidence=2 added.
    ("lru", r#"{"prefetcher":"mithril","lookahead_range":10,"pf_list_size":4}"#, [139_714, 92775, 57060, 27855]),
    ("lru", r#"{"prefetcher":"mithril","min_support":1}"#, [99587, 83681, 33082, 13189]),
    ("fifo", r#"{"prefetcher":"mithril"}"#, [146_688, 100_052, 34255, 27695]),
    ("clock", r#"{"prefetcher":"mithril","max_support":12,"min_support":3,"confidence":2}"#, [180_311, 90581, 36707, 33546]),
];

#[test]
fn prefetchers_equal_libcachesim_aa0fc40_on_a_runs_trace() {
    let accesses = runs_accesses();
    let distinct = accesses
        .iter()
        .map(|a| a.key)
        .collect::<std::collections::HashSet<_>>()
        .len() as f64;
    let mut differences = Vec::new();
    for &(name, prefetch, expected) in LIBCACHESIM_AA0FC40_PREFETCH {
        let prefetch: cairn_policy::PrefetchConfig =
            serde_json::from_str(prefetch).expect("a valid prefetcher");
        let configurations: Vec<_> = [0.01, 0.05, 0.1, 0.2]
            .iter()
            .map(|&fraction| cairn_sim::Configuration {
                label: name.to_owned(),
                policy: config(name),
                admission: cairn_policy::AdmissionConfig::default(),
                prefetch: Some(prefetch.clone()),
                size: fraction.to_string(),
                capacity: Capacity::Objects((fraction * distinct) as u64),
                l2: None,
            })
            .collect();
        let reports = cairn_sim::replay(
            &configurations,
            cairn_sim::FromIter(accesses.iter().copied().map(Ok)),
            &cairn_sim::ReplayOptions::default(),
            &cairn_sim::NoProgress,
        )
        .expect("the replay runs");
        assert!(
            reports.iter().any(|report| report.metrics.prefetched > 0),
            "the trace makes {} prefetch",
            prefetch.name()
        );
        for (report, expected) in reports.iter().zip(expected) {
            let m = &report.metrics;
            println!(
                "{name}>{} {}: ours {} misses ({} prefetched), libCacheSim aa0fc40 {expected}",
                prefetch.name(),
                report.capacity,
                m.misses,
                m.prefetched
            );
            if m.misses != expected {
                differences.push(format!(
                    "{name}>{} {}: {}, libCacheSim aa0fc40 {expected}",
                    prefetch.name(),
                    report.capacity,
                    m.misses
                ));
            }
        }
    }
    assert!(
        differences.is_empty(),
        "differences from libCacheSim aa0fc40: {differences:#?}"
    );
}

/// libCacheSim `aa0fc40`'s Cacheus, as `cachesim ... Cacheus 489,2448,4897,9794`
/// (and the byte sizes) runs it: the four caches are created in that order in
/// the main thread, each drawing its starting learning rate from one MMIX
/// generator that starts at 0, and each then runs from MMIX state 0.
#[test]
fn cacheus_equals_libcachesim_aa0fc40_given_its_starting_learning_rates() {
    const OBJECT_MISSES: [u64; 4] = [94459, 92988, 88375, 79683];
    const BYTE_MISSES: [u64; 4] = [93837, 91445, 85914, 78925];
    let accesses = sample_accesses();
    let mut draws = cairn_policy::rng::Rng::new(Generator::Mmix, 0);
    let learning_rates: Vec<f64> = (0..4).map(|_| 0.001 + draws.permille()).collect();
    let mut differences = Vec::new();
    let runs = OBJECTS
        .map(Capacity::Objects)
        .into_iter()
        .zip(OBJECT_MISSES)
        .zip(learning_rates.iter().copied())
        .chain(
            BYTES
                .map(Capacity::Bytes)
                .into_iter()
                .zip(BYTE_MISSES)
                .zip(learning_rates.iter().copied()),
        );
    for ((capacity, expected), learning_rate) in runs {
        let config = PolicyConfig::Cacheus(CacheusConfig {
            generator: Generator::Mmix,
            seed: Some(0),
            learning_rate: Some(learning_rate),
            grow_sr: false,
        });
        let mut policy = config.build(capacity).expect("the config builds");
        let mut victims = Vec::new();
        let misses = accesses
            .iter()
            .filter(|access| {
                victims.clear();
                !policy.access(access, &mut victims)
            })
            .count() as u64;
        println!(
            "cacheus {capacity:?} lr {learning_rate}: ours {misses}, libCacheSim aa0fc40 {expected}"
        );
        if misses != expected {
            differences.push(format!(
                "cacheus {capacity:?}: {misses}, aa0fc40 {expected}"
            ));
        }
    }
    assert!(
        differences.is_empty(),
        "differences from libCacheSim aa0fc40: {differences:#?}"
    );
}

/// The trace LRB trains on (the sample trace is too short to fill a batch):
/// `cairn trace gen zipf items=100000 alpha=0.9 requests=1000000 seed=26`,
/// 91,248 distinct objects.
fn lrb_zipf_accesses() -> Vec<Access> {
    let config = cairn_trace::generate::ZipfConfig {
        items: 100_000,
        alpha: 0.9,
        pace: cairn_trace::generate::Pace {
            requests: 1_000_000,
            seed: 26,
            ..cairn_trace::generate::Pace::default()
        },
        ..cairn_trace::generate::ZipfConfig::default()
    };
    let mut splitter = Splitter::new(Unit::Object);
    let mut accesses = Vec::new();
    for request in config.generator().expect("the zipf config is valid") {
        splitter.split(&request, &mut accesses);
    }
    accesses
}

/// libCacheSim 0.3.5's `LRB(cache_size=N).process_trace` on that trace in
/// object mode, N = 1, 5, 10, 20 % of 91,248 objects: (N, misses of
/// 1,000,000).
const LRB_0_3_5_ZIPF: [(u64, u64); 4] = [
    (912, 574_172),
    (4562, 421_517),
    (9124, 350_097),
    (18249, 276_138),
];
/// The largest |ours − libCacheSim's| miss ratio accepted. Our trees and
/// random draws are not `LightGBM`'s and the C++ library's (docs/policies.md,
/// lrb); measured: at most 0.000805. LRU is 0.035 to 0.09 away.
const LRB_TOLERANCE: f64 = 0.002;

#[test]
fn lrb_trained_stays_within_tolerance_of_libcachesim() {
    let accesses = lrb_zipf_accesses();
    let n = accesses.len() as f64;
    let mut failures = Vec::new();
    for (objects, theirs) in LRB_0_3_5_ZIPF {
        let ours = count_misses("lrb", Capacity::Objects(objects), &accesses);
        let lru = count_misses("lru", Capacity::Objects(objects), &accesses);
        let (ours, theirs, lru) = (ours as f64 / n, theirs as f64 / n, lru as f64 / n);
        println!(
            "lrb {objects:6} objects: ours {ours:.6}, libCacheSim 0.3.5 {theirs:.6}, \
             difference {:+.6}; lru {lru:.6}",
            ours - theirs
        );
        if (ours - theirs).abs() > LRB_TOLERANCE {
            failures.push(format!(
                "{objects} objects: ours {ours:.6}, libCacheSim {theirs:.6}"
            ));
        }
        // The models matter: untrained (LRU) would fail the tolerance.
        assert!(
            (lru - theirs).abs() > 10.0 * LRB_TOLERANCE,
            "{objects} objects: lru {lru:.6} is as close as lrb"
        );
    }
    assert!(
        failures.is_empty(),
        "lrb beyond {LRB_TOLERANCE}: {failures:?}"
    );
}

/// libCacheSim 0.3.5's `ThreeLCache(cache_size=N).process_trace`, object
/// mode, on the LRB zipf trace above: (N, misses of 1,000,000).
const THREELCACHE_0_3_5_ZIPF: [(u64, u64); 4] = [
    (912, 576_333),
    (4562, 419_132),
    (9124, 348_216),
    (18249, 272_404),
];

/// The same on the sample trace played 8 times over (910,976 requests; the
/// oracleGeneral file concatenated 8 times), object mode then byte mode, at
/// the sample trace's sizes.
const THREELCACHE_0_3_5_SAMPLE_X8: ([u64; 4], [u64; 4]) = (
    [757_036, 746_672, 709_265, 613_251],
    [754_123, 737_302, 703_301, 610_781],
);

/// The largest |ours − libCacheSim's| miss ratio accepted for 3L-Cache on
/// each trace. Our trees are not `LightGBM`'s (docs/policies.md, 3lcache),
/// and on the looped sample trace 3L-Cache amplifies a small change of model:
/// our own trainer seeds 0 to 3 spread by up to 0.02 there. Measured: at most
/// 0.0021 on zipf, 0.0078 on the looped sample trace.
const THREELCACHE_TOLERANCE_ZIPF: f64 = 0.003;
const THREELCACHE_TOLERANCE_SAMPLE_X8: f64 = 0.01;

#[test]
fn threelcache_trained_stays_within_tolerance_of_libcachesim() {
    let zipf = lrb_zipf_accesses();
    let sample = sample_accesses();
    let looped: Vec<Access> = (0..8).flat_map(|_| sample.iter().copied()).collect();
    let (objects, bytes) = THREELCACHE_0_3_5_SAMPLE_X8;
    // (trace, capacity, libCacheSim's misses, accesses, tolerance, whether
    // LRU is far enough that an untrained 3L-Cache must fail the tolerance:
    // on the looped trace only at 10 and 20 %).
    let zipf_rows = THREELCACHE_0_3_5_ZIPF.map(|(n, misses)| {
        let capacity = Capacity::Objects(n);
        (
            "zipf",
            capacity,
            misses,
            &zipf,
            THREELCACHE_TOLERANCE_ZIPF,
            true,
        )
    });
    let looped_rows = OBJECTS
        .map(Capacity::Objects)
        .into_iter()
        .zip(objects)
        .chain(BYTES.map(Capacity::Bytes).into_iter().zip(bytes))
        .enumerate()
        .map(|(i, (capacity, misses))| {
            let tolerance = THREELCACHE_TOLERANCE_SAMPLE_X8;
            (
                "sample x8",
                capacity,
                misses,
                &looped,
                tolerance,
                i % 4 >= 2,
            )
        });
    let mut failures = Vec::new();
    let mut worst = [0.0f64; 2];
    for (trace, capacity, theirs, accesses, tolerance, models_matter) in
        zipf_rows.into_iter().chain(looped_rows)
    {
        let n = accesses.len() as f64;
        let ours = count_misses("3lcache", capacity, accesses);
        let lru = count_misses("lru", capacity, accesses);
        let (ours, theirs, lru) = (ours as f64 / n, theirs as f64 / n, lru as f64 / n);
        let off = ours - theirs;
        let at = usize::from(trace != "zipf");
        worst[at] = worst[at].max(off.abs());
        println!(
            "3lcache {trace:9} {capacity:?}: ours {ours:.6}, libCacheSim 0.3.5 {theirs:.6}, \
             difference {off:+.6}; lru {lru:.6}"
        );
        if off.abs() > tolerance {
            failures.push(format!(
                "{trace} {capacity:?}: ours {ours:.6}, libCacheSim {theirs:.6}"
            ));
        }
        if models_matter {
            assert!(
                (lru - theirs).abs() > 2.0 * tolerance,
                "{trace} {capacity:?}: lru {lru:.6} is within twice the tolerance"
            );
        }
    }
    println!(
        "worst difference: zipf {:.6}, sample x8 {:.6}",
        worst[0], worst[1]
    );
    assert!(
        failures.is_empty(),
        "3lcache beyond tolerance: {failures:?}"
    );
}

/// A trace on which GL-Cache trains: `cairn trace gen zipf items=100000
/// alpha=0.9 requests=1000000 interval_us=500000 seed=26` (91,248 objects,
/// 499,999 s: five trainings at every size below), each object's size
/// `1024 × (1 + (object × 0x9E3779B97F4A7C15 mod 2^64) >> 59)`, 1 to 32 KiB
/// (1,541,626,880 bytes in all). libCacheSim read it as oracleGeneral: the
/// generator's CSV with that size column, then `cairn trace convert`.
fn glcache_zipf_accesses() -> Vec<Access> {
    let config = cairn_trace::generate::ZipfConfig {
        items: 100_000,
        alpha: 0.9,
        pace: cairn_trace::generate::Pace {
            requests: 1_000_000,
            interval_us: 500_000,
            seed: 26,
            ..cairn_trace::generate::Pace::default()
        },
        ..cairn_trace::generate::ZipfConfig::default()
    };
    let mut splitter = Splitter::new(Unit::Object);
    let mut accesses = Vec::new();
    for mut request in config.generator().expect("the zipf config is valid") {
        let class = request.object.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 59;
        request.size = 1024 * (1 + class as u32);
        splitter.split(&request, &mut accesses);
    }
    accesses
}

/// libCacheSim 0.3.5's `GLCache(cache_size=N, retrain_intvl=R)
/// .process_trace(reader)` on that trace, object mode (`ignore_obj_size`)
/// then byte mode, N = 1, 5, 10, 20 % of 91,248 objects or 1,541,626,880
/// bytes: (N, misses of 1,000,000 trained (R = 86,400, the default),
/// misses untrained (R = 10^9, never due)). Trained and untrained differ:
/// the wheel trains.
const GLCACHE_0_3_5_ZIPF: [(Capacity, u64, u64); 8] = [
    (Capacity::Objects(912), 700_751, 654_084),
    (Capacity::Objects(4562), 487_969, 486_772),
    (Capacity::Objects(9124), 394_775, 400_023),
    (Capacity::Objects(18249), 296_753, 304_913),
    (Capacity::Bytes(15_416_268), 631_994, 637_539),
    (Capacity::Bytes(77_081_344), 449_346, 455_903),
    (Capacity::Bytes(154_162_688), 349_177, 368_203),
    (Capacity::Bytes(308_325_376), 259_059, 274_631),
];

/// The largest |ours − libCacheSim's| miss ratio accepted for a trained
/// GL-Cache: our trees are not `XGBoost`'s (docs/policies.md, glcache), and
/// its labels hang on a few segments hit right after a snapshot. At 912
/// objects the cache holds 9 segments and a model learns from 7 rows, so
/// one different ranking moves the ratio most. Measured: 0.0066 at 912
/// objects, at most 0.0035 elsewhere.
const GLCACHE_TOLERANCE_SMALL: f64 = 0.012;
const GLCACHE_TOLERANCE: f64 = 0.005;

#[test]
fn glcache_trained_stays_within_tolerance_of_libcachesim() {
    use cairn_policy::Policy;
    use cairn_policy::glcache::{GlCache, GlCacheConfig};
    let accesses = glcache_zipf_accesses();
    let n = accesses.len() as f64;
    assert_eq!(accesses.last().unwrap().clock - accesses[0].clock, 499_999);
    let run = |capacity, retrain_interval| {
        let config = GlCacheConfig {
            retrain_interval,
            ..GlCacheConfig::default()
        };
        let mut glcache = GlCache::new(capacity, &config).expect("builds");
        let mut victims = Vec::new();
        let misses = accesses
            .iter()
            .filter(|access| {
                victims.clear();
                !glcache.access(access, &mut victims)
            })
            .count() as u64;
        (misses, glcache.trainings())
    };
    let mut failures = Vec::new();
    let mut worst = 0.0f64;
    let (mut lru_far, mut untrained_far) = (Vec::new(), Vec::new());
    for (i, (capacity, theirs, theirs_untrained)) in GLCACHE_0_3_5_ZIPF.into_iter().enumerate() {
        // Untrained, both take the same victims: the trace is read alike.
        let (untrained, none) = run(capacity, 1_000_000_000);
        assert_eq!(none, 0);
        assert_eq!(untrained, theirs_untrained, "{capacity:?} untrained");
        let (ours, trainings) = run(capacity, 86_400);
        assert!(trainings >= 4, "{capacity:?}: {trainings} trainings");
        let lru = count_misses("lru", capacity, &accesses);
        let (ours, theirs, lru, untrained) = (
            ours as f64 / n,
            theirs as f64 / n,
            lru as f64 / n,
            untrained as f64 / n,
        );
        let tolerance = if i == 0 {
            GLCACHE_TOLERANCE_SMALL
        } else {
            GLCACHE_TOLERANCE
        };
        let off = ours - theirs;
        worst = worst.max(off.abs() / tolerance);
        println!(
            "glcache {capacity:?}: ours {ours:.6}, libCacheSim 0.3.5 {theirs:.6}, \
             difference {off:+.6} ({trainings} trainings); untrained {untrained:.6}, \
             lru {lru:.6}"
        );
        if off.abs() > tolerance {
            failures.push(format!(
                "{capacity:?}: ours {ours:.6}, libCacheSim {theirs:.6}"
            ));
        }
        // Where another policy would fail the tolerance twice over.
        if (lru - theirs).abs() > 2.0 * tolerance {
            lru_far.push(i);
        }
        if (untrained - theirs).abs() > 2.0 * tolerance {
            untrained_far.push(i);
        }
    }
    println!("worst difference: {worst:.2} of the tolerance");
    // LRU is that far everywhere but at 4,562 objects (0.009 away); the
    // untrained path (FIFO merging) at 912 objects and the two largest byte
    // sizes, where the models matter most.
    assert_eq!(lru_far, [0, 2, 3, 4, 5, 6, 7]);
    assert_eq!(untrained_far, [0, 6, 7]);
    assert!(
        failures.is_empty(),
        "glcache beyond tolerance: {failures:?}"
    );
}
