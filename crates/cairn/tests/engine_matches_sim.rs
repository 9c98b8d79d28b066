//! The simulator predicts what the engine does:
//!
//! - the sample trace (a `CloudPhysics` VM block trace, reads and writes)
//!   replayed through a write-back tier with one shard gives the hit ratio
//!   `cairn sim --unit block:4KiB` prints for the same policy and capacity,
//!   within half a percentage point (the bar; it is exact when
//!   nothing races);
//! - the DRAM block cache with a prefetcher chosen as a volume spec chooses
//!   it (`prefetch = "obl"`, `"pg"`, `"mithril"`) hits, misses and prefetches exactly the
//!   blocks `cairn sim --prefetch` counts on the same trace;
//! - so does `cairn serve` with such a volume, read by `qemu-io` over NBD
//!   (OBL and Mithril), as `cairn stats` reports it.

#![allow(clippy::unwrap_used)]

mod common;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;

use cairn_policy::PolicyConfig;
use cairn_store::device::{FileDevice, FileOptions, SharedDevice};
use cairn_store::tier::open::{Want, open_or_format};
use cairn_store::tier::{Layout, Mode, Options};
use cairn_store::volume::spec::CachePrefetch;
use cairn_store::{BlockCache, CacheConfig};
use cairn_store::{Device, MemoryDevice};
use cairn_trace::{Op, Request};

const TRACE: &str = "../../../shared/traces/cloudPhysicsIO.vscsi";

/// `cairn sim`'s report for `policy` at `size` (`--size`), with `extra`
/// arguments.
fn simulate(policy: &str, size: &str, trace: &Path, extra: &[&str]) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(["sim", "--unit", "block:4KiB", "--json", "-", "-p", policy])
        .args(["-s", size])
        .args(extra)
        .arg("--trace")
        .arg(trace)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut run: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    run["reports"][0].take()
}

/// The hit ratio `cairn sim` predicts for `policy` at `blocks` blocks.
fn simulated(policy: &str, blocks: u64, trace: &Path) -> f64 {
    let report = simulate(policy, &blocks.to_string(), trace, &[]);
    let miss = report["miss_ratio"]
        .as_f64()
        .or_else(|| report["metrics"]["miss_ratio"].as_f64())
        .unwrap_or_else(|| panic!("no miss ratio in {report}"));
    1.0 - miss
}

#[test]
fn the_tier_hits_what_the_simulator_predicts() {
    let trace = Path::new(env!("CARGO_MANIFEST_DIR")).join(TRACE);
    if !trace.exists() {
        eprintln!("skipped: {} is not here", trace.display());
        return;
    }
    let requests: Vec<_> = cairn_trace::read::open(&trace, &cairn_trace::read::Format::Vscsi)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let end = requests
        .iter()
        .map(|r| r.offset + u64::from(r.size))
        .max()
        .unwrap();
    let shm = Path::new("/dev/shm");
    let dir = if shm.is_dir() {
        tempfile::tempdir_in(shm)
    } else {
        tempfile::tempdir()
    }
    .unwrap();
    for policy in ["lru", "s3fifo", "arc"] {
        // A sparse file on tmpfs where there is one: only what the trace
        // touches takes memory, and a flush costs nothing, so the run is
        // CPU-bound.
        let backing: SharedDevice = Arc::new(
            FileDevice::open(
                dir.path().join(format!("{policy}.img")),
                &FileOptions {
                    create_len: Some(end.next_multiple_of(4096)),
                    ..FileOptions::default()
                },
            )
            .unwrap(),
        );
        let cache: SharedDevice = Arc::new(MemoryDevice::new(128 << 20));
        let want = Want {
            layout: Layout::default(),
            options: Options {
                mode: Mode::WriteBack,
                policy: PolicyConfig::default_for(policy).unwrap(),
                sequential_cutoff_bytes: 0,
                shards: 1,
                background: false,
                ..Options::default()
            },
            marker: None,
        };
        let tier = open_or_format(cache, backing, &want).unwrap();
        let mut buf = vec![0u8; 1 << 20];
        for r in &requests {
            let data = &mut buf[..r.size as usize];
            match r.op {
                cairn_policy::Op::Read => tier.read_at(data, r.offset).unwrap(),
                cairn_policy::Op::Write => tier.write_at(data, r.offset).unwrap(),
            }
        }
        let m = tier.metrics();
        let engine = m.access_hit_ratio();
        let predicted = simulated(policy, tier.capacity_blocks(), &trace);
        eprintln!(
            "{policy}: {} blocks; tier {engine:.4} ({} read hits, {} misses, {} write hits, {} misses; \
             {} relocated, {} reclaimed, {} bytes around, {} refused, {} raced), cairn sim {predicted:.4}",
            tier.capacity_blocks(),
            m.hits,
            m.misses,
            m.write_hits,
            m.write_misses,
            m.relocated_blocks,
            m.reclaimed_buckets,
            m.bypassed_bytes,
            m.promotions_refused,
            m.promotions_raced
        );
        assert!(
            (engine - predicted).abs() <= 0.005,
            "{policy}: the tier hit {engine:.4}, the simulator predicted {predicted:.4}"
        );
        tier.verify().unwrap();
    }
}

/// A block trace of one-block reads with something for both prefetchers
/// (`cairn trace gen runs`): 64 extents of 8 to 40 blocks read front to
/// back, Zipf-popular (so PG learns what follows what, and OBL sees runs),
/// between random single blocks, on a 16 MiB disk.
fn prefetch_trace(requests: u64) -> Vec<u64> {
    cairn_trace::generate::RunsConfig {
        items: 4096,
        runs: 64,
        min_blocks: 8,
        max_blocks: 40,
        pace: cairn_trace::generate::Pace {
            requests,
            seed: 7,
            ..cairn_trace::generate::Pace::default()
        },
        ..cairn_trace::generate::RunsConfig::default()
    }
    .generator()
    .unwrap()
    .map(|r| r.offset / 4096)
    .collect()
}

/// The block cache's capacity in the prefetch test, in 4 KiB blocks.
const CAPACITY: u64 = 512;

#[test]
fn the_block_cache_prefetches_what_the_simulator_says() {
    let dir = tempfile::tempdir().unwrap();
    let blocks = prefetch_trace(30_000);
    let trace = dir.path().join("prefetch.vscsi");
    let mut writer = cairn_trace::write::create(&trace, &cairn_trace::read::Format::Vscsi).unwrap();
    for (at, &block) in blocks.iter().enumerate() {
        writer
            .write(&Request {
                time_us: at as u64,
                object: 0,
                offset: block * 4096,
                size: 4096,
                op: Op::Read,
                ttl: 0,
                next: cairn_trace::NEVER,
            })
            .unwrap();
    }
    writer.finish().unwrap();
    let mut prefetched_somewhere = 0;
    for (policy, prefetch) in [
        ("lru", "obl"),
        ("lru", "pg"),
        ("s3fifo", "obl"),
        ("arc", "pg"),
        ("lru", "obl:sequential_confidence_k=1"),
        ("lru", "mithril:mining_threshold=256"),
        ("s3fifo", "mithril:min_support=1"),
    ] {
        // In bytes, as the cache counts its capacity (S3-FIFO's 10 % small
        // queue of 512 objects is 51 objects, of 2 MiB 51.2 blocks).
        let size = format!("{}B", CAPACITY * 4096);
        let report = simulate(policy, &size, &trace, &["--prefetch", prefetch]);
        let m = &report["metrics"];
        let count = |field: &str| {
            m[field]
                .as_u64()
                .unwrap_or_else(|| panic!("{field} in {m}"))
        };
        // The engine's side, configured as a volume spec configures it.
        let (name, pairs) = prefetch.split_once(':').unwrap_or((prefetch, ""));
        let value = match pairs.split_once('=') {
            None => format!("\"{name}\""),
            Some((key, value)) => format!("{{ prefetcher = \"{name}\", {key} = {value} }}"),
        };
        let spec: CachePrefetch = toml::from_str::<toml::Table>(&format!("prefetch = {value}"))
            .unwrap()
            .remove("prefetch")
            .unwrap()
            .try_into()
            .unwrap();
        let cache = BlockCache::new(
            MemoryDevice::new(4096 * 4096),
            &CacheConfig {
                block_size_bytes: 4096,
                capacity_bytes: CAPACITY * 4096,
                policy: PolicyConfig::default_for(policy).unwrap(),
                shards: 1,
                prefetch: spec.0,
                ..CacheConfig::default()
            },
        )
        .unwrap();
        let mut buf = vec![0u8; 4096];
        for &block in &blocks {
            cache.read_at(&mut buf, block * 4096).unwrap();
        }
        let engine = cache.metrics();
        let prefetched: u64 = engine.groups.iter().map(|g| g.prefetched).sum();
        let label = format!("{policy} --prefetch {prefetch}");
        eprintln!(
            "{label}: engine hits {} misses {} prefetched {prefetched}; sim hits {} misses {} \
             prefetched {} (prefetch hits {})",
            engine.hits(),
            engine.misses(),
            count("hits"),
            count("misses"),
            count("prefetched"),
            count("prefetch_hits"),
        );
        assert_eq!(engine.hits(), count("hits"), "{label}: hits");
        assert_eq!(engine.misses(), count("misses"), "{label}: misses");
        assert_eq!(prefetched, count("prefetched"), "{label}: prefetched");
        assert_eq!(cache.prefetcher_name(), Some(name));
        assert!(
            cache
                .describe()
                .contains(&format!("1 shards, prefetch {name})")),
            "{}",
            cache.describe()
        );
        prefetched_somewhere += prefetched;
        assert!(
            prefetched > 100,
            "{label}: the trace gives it work ({prefetched})"
        );
    }
    assert!(prefetched_somewhere > 0);
}

/// A counter of the cache layer in `cairn stats --json`.
fn cache_counter(stats: &serde_json::Value, name: &str) -> u64 {
    stats["exports"][0]["layers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|layer| layer["kind"] == "cache")
        .and_then(|layer| {
            layer["metrics"]
                .as_array()?
                .iter()
                .find(|metric| metric["name"] == name)?["value"]
                .as_u64()
        })
        .unwrap_or_else(|| panic!("no cache counter {name} in {stats}"))
}

#[test]
fn the_server_prefetches_what_the_simulator_says() {
    let qemu_io = common::tool("qemu-io").expect("qemu-io (qemu-utils; ./test.sh installs it)");
    let dir = tempfile::tempdir().unwrap();
    let blocks = prefetch_trace(6000);
    let trace = dir.path().join("prefetch.vscsi");
    let mut writer = cairn_trace::write::create(&trace, &cairn_trace::read::Format::Vscsi).unwrap();
    let mut commands = Vec::new();
    for (at, &block) in blocks.iter().enumerate() {
        writer
            .write(&Request {
                time_us: at as u64,
                object: 0,
                offset: block * 4096,
                size: 4096,
                op: Op::Read,
                ttl: 0,
                next: cairn_trace::NEVER,
            })
            .unwrap();
        writeln!(commands, "read {} 4096", block * 4096).unwrap();
    }
    writer.finish().unwrap();
    for (prefetch, table) in [
        (
            "obl:sequential_confidence_k=2",
            "{ prefetcher = \"obl\", sequential_confidence_k = 2 }",
        ),
        (
            "mithril:mining_threshold=64",
            "{ prefetcher = \"mithril\", mining_threshold = 64 }",
        ),
    ] {
        let run = dir.path().join(prefetch.replace([':', '='], "-"));
        std::fs::create_dir(&run).unwrap();
        std::fs::write(
            run.join("spec.toml"),
            format!(
                "[[export]]\nname = \"pf\"\ndevice = \"dram\"\n\n\
                 [device.dram]\nkind = \"cache\"\nover = \"ram\"\nsize = \"{}KiB\"\n\
                 block_size = \"4KiB\"\npolicy = \"lru\"\nshards = 1\nprefetch = {table}\n\n\
                 [device.ram]\nkind = \"memory\"\nsize = \"16MiB\"\n",
                CAPACITY * 4
            ),
        )
        .unwrap();
        let mut server = common::Server(Some(
            common::cairn()
                .current_dir(&run)
                .args(["-q", "serve", "--config", "spec.toml"])
                .stdout(Stdio::null())
                .spawn()
                .unwrap(),
        ));
        common::wait_for_sockets(&run);
        // One qemu-io, one read at a time, in the trace's order.
        let mut client = Command::new(&qemu_io)
            .current_dir(&run)
            .args(["-f", "raw", "nbd+unix:///pf?socket=cairn-data/cairn.sock"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        client.stdin.take().unwrap().write_all(&commands).unwrap();
        assert!(client.wait().unwrap().success(), "qemu-io failed");
        let out = common::cairn()
            .current_dir(&run)
            .args(["stats", "--json"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let stats: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        common::terminate(server.take());
        assert_eq!(stats["exports"][0]["io"]["reads"], blocks.len() as u64);

        let size = format!("{}B", CAPACITY * 4096);
        let report = simulate("lru", &size, &trace, &["--prefetch", prefetch]);
        let sim = |field: &str| report["metrics"][field].as_u64().unwrap();
        let served = |name: &str| cache_counter(&stats, name);
        eprintln!(
            "cairn serve, lru, prefetch {prefetch}: hits {} misses {} prefetched {}; \
             cairn sim: hits {} misses {} prefetched {}",
            served("hits"),
            served("misses"),
            served("prefetched_blocks"),
            sim("hits"),
            sim("misses"),
            sim("prefetched"),
        );
        assert_eq!(served("hits"), sim("hits"), "{prefetch}: hits");
        assert_eq!(served("misses"), sim("misses"), "{prefetch}: misses");
        assert_eq!(
            served("prefetched_blocks"),
            sim("prefetched"),
            "{prefetch}: prefetched"
        );
        assert!(
            sim("prefetched") > 100,
            "{prefetch}: the trace gives it work"
        );
    }
}
