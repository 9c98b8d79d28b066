//! The simulator's prediction is what the gateway does: a scripted sequence
//! of HTTP range requests over a few files, served by the gateway, gives the
//! same block hits and misses as the same requests replayed through
//! `cairn-sim` (block mode at the gateway's block size, one policy over the
//! same capacity). Guards the wiring of `dual` (object and block index in
//! every access, one shard, whole-preface eviction through the cache's
//! eviction path) and of every other policy compared here.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::SystemTime;

use cairn_files::{FileCache, FileCacheConfig, MemoryBackend};
use cairn_policy::dual::DualConfig;
use cairn_policy::{AdmissionConfig, Capacity, PolicyConfig};
use cairn_sim::{AccessStream, Configuration, NoProgress, ReplayOptions, StreamOptions, replay};
use cairn_trace::{Request, Unit};

const BLOCK: u64 = 256 << 10;
const CAPACITY: u64 = 10 << 20;

/// Sizes of the files: whole and partial last blocks, 1–14 MiB.
const FILES: [u64; 8] = [
    14 << 20,
    (9 << 20) + 1,
    6 << 20,
    (4 << 20) + 100_000,
    3 << 20,
    (2 << 20) - 7,
    (12 << 20) + 5,
    1 << 20,
];

/// (file, offset, length): sequential sessions from the start of a file in
/// 384 KiB reads (some stop early), and random ranges, from a fixed seed.
fn script() -> Vec<(usize, u64, u64)> {
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = |bound: u64| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % bound
    };
    let mut requests = Vec::new();
    while requests.len() < 1500 {
        // Skewed towards the first files.
        let file = (next(8) * next(8) / 7) as usize;
        let size = FILES[file];
        if next(10) < 7 {
            let stop = if next(10) < 6 { size } else { next(size) + 1 };
            let mut offset = 0;
            while offset < stop {
                let length = (384 << 10).min(stop - offset);
                requests.push((file, offset, length));
                offset += length;
            }
        } else {
            let offset = next(size);
            let length = (next(1536 << 10) + 1).min(size - offset);
            requests.push((file, offset, length));
        }
    }
    requests
}

fn key(file: usize) -> String {
    format!("f{file}.bin")
}

/// Serves the script over HTTP; returns the gateway's (hits, misses).
fn gateway(policy: &PolicyConfig, script: &[(usize, u64, u64)]) -> (u64, u64) {
    let backend = MemoryBackend::new();
    let contents: Vec<Vec<u8>> = FILES
        .iter()
        .enumerate()
        .map(|(file, &size)| common::pattern(size as usize, file as u8))
        .collect();
    for (file, bytes) in contents.iter().enumerate() {
        backend.put(&key(file), bytes.clone(), SystemTime::UNIX_EPOCH);
    }
    let config = FileCacheConfig {
        block_size_bytes: BLOCK,
        capacity_bytes: CAPACITY,
        policy: policy.clone(),
        shards: 1,
        ..FileCacheConfig::default()
    };
    let running = common::start_cache(
        FileCache::new(Arc::new(backend), &config).expect("cache"),
        |_| {},
    );
    // One keep-alive connection (a new one waits for the accept loop's poll).
    let mut stream = TcpStream::connect(running.addr).expect("connect");
    stream.set_nodelay(true).expect("nodelay");
    let mut reader = BufReader::new(stream.try_clone().expect("clone"));
    for &(file, offset, length) in script {
        let request = format!(
            "GET /{}/{} HTTP/1.1\r\nHost: x\r\nRange: bytes={offset}-{}\r\n\r\n",
            common::BUCKET,
            key(file),
            offset + length - 1
        );
        stream.write_all(request.as_bytes()).expect("send");
        let mut line = String::new();
        reader.read_line(&mut line).expect("status line");
        assert!(line.starts_with("HTTP/1.1 206"), "{line} {file} {offset}");
        let mut content_length = None;
        loop {
            line.clear();
            reader.read_line(&mut line).expect("header");
            if line == "\r\n" {
                break;
            }
            if let Some(value) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                content_length = value.trim().parse::<u64>().ok();
            }
        }
        assert_eq!(content_length, Some(length), "{file} {offset}");
        let mut body = vec![0u8; length as usize];
        reader.read_exact(&mut body).expect("body");
        assert_eq!(
            body,
            contents[file][offset as usize..(offset + length) as usize],
            "{file} {offset} {length}"
        );
    }
    drop((stream, reader));
    let stats = running.cache.stats();
    assert_eq!(stats.coalesced, 0, "one reader at a time");
    (stats.hits, stats.misses)
}

/// Replays the script through the simulator; returns its (hits, misses).
fn simulator(policy: &PolicyConfig, script: &[(usize, u64, u64)]) -> (u64, u64) {
    let requests: Vec<cairn_trace::Result<Request>> = script
        .iter()
        .map(|&(file, offset, length)| {
            Ok(Request {
                object: file as u64,
                offset,
                size: u32::try_from(length).expect("a short range"),
                ..Request::default()
            })
        })
        .collect();
    let stream = AccessStream::new(
        cairn_trace::read::boxed(requests.into_iter()),
        &StreamOptions {
            unit: Unit::Block {
                block_size: BLOCK as u32,
            },
            ..StreamOptions::default()
        },
    );
    let configuration = Configuration {
        label: cairn_sim::policy_name(policy),
        policy: policy.clone(),
        admission: AdmissionConfig::default(),
        prefetch: None,
        size: CAPACITY.to_string(),
        capacity: Capacity::Bytes(CAPACITY),
        l2: None,
    };
    let options = ReplayOptions {
        threads: 1,
        ..ReplayOptions::default()
    };
    let reports = replay(&[configuration], stream, &options, &NoProgress).expect("replay");
    (reports[0].metrics.hits, reports[0].metrics.misses)
}

#[test]
fn block_hits_and_misses_match_the_simulators() {
    let script = script();
    let dual = |alpha: f64, max: u64| {
        PolicyConfig::Dual(DualConfig {
            alpha,
            preface_max_blocks: max,
            ..DualConfig::default()
        })
    };
    let policies = [
        ("dual", PolicyConfig::default_for("dual").expect("dual")),
        ("dual:alpha=1,preface_max_blocks=8", dual(1.0, 8)),
        ("lru", PolicyConfig::default_for("lru").expect("lru")),
        ("ons", PolicyConfig::default_for("ons").expect("ons")),
    ];
    let mut counts = Vec::new();
    for (label, policy) in &policies {
        let served = gateway(policy, &script);
        let predicted = simulator(policy, &script);
        println!(
            "{label}: gateway {} hits / {} misses, simulator {} / {}",
            served.0, served.1, predicted.0, predicted.1
        );
        assert_eq!(served, predicted, "{label}");
        counts.push(served);
    }
    assert!(
        counts[1] != counts[2],
        "dual with a preface of up to 8 blocks is not lru: {counts:?}"
    );
}
