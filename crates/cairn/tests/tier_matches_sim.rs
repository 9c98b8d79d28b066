//! The simulator predicts what the engine does: the sample trace (a
//! `CloudPhysics` VM block trace, reads and writes) replayed through a
//! write-back tier with one shard gives the hit ratio `cairn sim --unit
//! block:4KiB` prints for the same policy and capacity, within half a
//! percentage point (the bar; it is exact when nothing races).

#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use cairn_policy::PolicyConfig;
use cairn_store::device::{FileDevice, FileOptions, SharedDevice};
use cairn_store::tier::open::{Want, open_or_format};
use cairn_store::tier::{Layout, Mode, Options};
use cairn_store::{Device, MemoryDevice};

const TRACE: &str = "../../../shared/traces/cloudPhysicsIO.vscsi";

/// The hit ratio `cairn sim` predicts for `policy` at `blocks` blocks.
fn simulated(policy: &str, blocks: u64, trace: &Path) -> f64 {
    let out = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(["sim", "--unit", "block:4KiB", "--json", "-", "-p", policy])
        .args(["-s", &blocks.to_string(), "--trace"])
        .arg(trace)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let report = &run["reports"][0];
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
