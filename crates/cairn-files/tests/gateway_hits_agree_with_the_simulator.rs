//! The simulator's prediction is what the gateway does: a scripted sequence
//! of HTTP range requests over a few files, served by the gateway, gives the
//! same block hits and misses as the same requests replayed through
//! `cairn-sim` (block mode at the gateway's block size, one policy over the
//! same capacity). Guards the wiring of `dual` (object and block index in
//! every access, one shard, whole-preface eviction through the cache's
//! eviction path) and of every other policy compared here.
//!
//! With readahead (papers/001: a window of stripes × servers blocks, the
//! files striped over 4 servers) the gateway's hits are those of the same
//! policy driven with `cairn_policy::prefetch::Readahead` as `cairn reproduce
//! dual` drives it, when each request's read ahead is done before the next.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::SystemTime;

use cairn_files::{Backend, FileCache, FileCacheConfig, MemoryBackend, StripedBackend};
use cairn_policy::dual::DualConfig;
use cairn_policy::prefetch::Readahead;
use cairn_policy::{AdmissionConfig, Capacity, PolicyConfig};
use cairn_sim::{AccessStream, Configuration, NoProgress, ReplayOptions, StreamOptions, replay};
use cairn_trace::{Request, Splitter, Unit};

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

/// Servers the files are striped over with readahead.
const SERVERS: usize = 4;

/// Serves the script over HTTP; returns the gateway's (hits, misses).
fn gateway(policy: &PolicyConfig, script: &[(usize, u64, u64)]) -> (u64, u64) {
    let backend = MemoryBackend::new();
    let contents = contents();
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
    let (hits, misses, coalesced) = serve_script(
        FileCache::new(Arc::new(backend), &config).expect("cache"),
        script,
        &contents,
    );
    assert_eq!(coalesced, 0, "one reader at a time");
    (hits, misses)
}

fn contents() -> Vec<Vec<u8>> {
    FILES
        .iter()
        .enumerate()
        .map(|(file, &size)| common::pattern(size as usize, file as u8))
        .collect()
}

/// Serves the script over HTTP from the files striped over [`SERVERS`]
/// memory backends, with a readahead of `stripes` × [`SERVERS`] blocks,
/// each request's read ahead done before the next; returns the gateway's
/// (hits and waits for blocks read ahead, misses).
fn gateway_reading_ahead(
    policy: &PolicyConfig,
    stripes: u64,
    script: &[(usize, u64, u64)],
) -> (u64, u64) {
    let contents = contents();
    let servers: Vec<MemoryBackend> = (0..SERVERS).map(|_| MemoryBackend::new()).collect();
    for (file, bytes) in contents.iter().enumerate() {
        for (server, backend) in servers.iter().enumerate() {
            let part: Vec<u8> = bytes
                .chunks(BLOCK as usize)
                .enumerate()
                .filter(|(stripe, _)| stripe % SERVERS == server)
                .flat_map(|(_, chunk)| chunk.iter().copied())
                .collect();
            backend.put(&key(file), part, SystemTime::UNIX_EPOCH);
        }
    }
    let config = FileCacheConfig {
        block_size_bytes: BLOCK,
        capacity_bytes: CAPACITY,
        policy: policy.clone(),
        shards: 1,
        prefetch_window_blocks: stripes * SERVERS as u64,
        ..FileCacheConfig::default()
    };
    let backend = StripedBackend::new(servers, BLOCK).expect("striped");
    let (hits, misses, coalesced) = serve_script(
        FileCache::new(backend, &config).expect("cache"),
        script,
        &contents,
    );
    (hits + coalesced, misses)
}

/// Serves `script`; returns the cache's (hits, misses, coalesced).
fn serve_script<B: Backend + 'static>(
    cache: FileCache<B>,
    script: &[(usize, u64, u64)],
    contents: &[Vec<u8>],
) -> (u64, u64, u64) {
    let running = common::start_cache(cache, |_| {});
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
        running.cache.wait_for_prefetches();
    }
    drop((stream, reader));
    let stats = running.cache.stats();
    assert_eq!(
        stats.prefetch_dropped, 0,
        "one reader never fills the queue"
    );
    assert!(stats.prefetch_used + stats.prefetch_wasted <= stats.prefetch_issued);
    (stats.hits, stats.misses, stats.coalesced)
}

/// The script through `policy` with [`Readahead`] as `cairn reproduce dual`
/// drives it (windows clipped to each file's end, as the gateway's are);
/// returns (hits, misses).
fn simulator_reading_ahead(
    policy: &PolicyConfig,
    stripes: u64,
    script: &[(usize, u64, u64)],
) -> (u64, u64) {
    let mut cache = policy.build(Capacity::Bytes(CAPACITY)).expect("policy");
    let unit = Unit::Block {
        block_size: BLOCK as u32,
    };
    let (mut splitter, mut ahead_splitter) = (Splitter::new(unit), Splitter::new(unit));
    let mut readahead = Readahead::new(stripes * SERVERS as u64);
    let (mut blocks, mut named, mut ahead, mut victims) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut hits, mut misses) = (0, 0);
    for &(file, offset, length) in script {
        let request = Request {
            object: file as u64,
            offset,
            size: u32::try_from(length).expect("a short range"),
            ..Request::default()
        };
        blocks.clear();
        splitter.split(&request, &mut blocks);
        for access in &blocks {
            victims.clear();
            if cache.access(access, &mut victims) {
                hits += 1;
            } else {
                misses += 1;
            }
            named.clear();
            let length = FILES[file].div_ceil(BLOCK);
            readahead.access(access.object, access.block, Some(length), &mut named);
            for &index in &named {
                ahead.clear();
                let next = Request {
                    offset: index * BLOCK,
                    size: BLOCK as u32,
                    ..request
                };
                ahead_splitter.split(&next, &mut ahead);
                for block in &ahead {
                    if !cache.contains(block.key) {
                        victims.clear();
                        cache.admit(block, &mut victims);
                    }
                }
            }
        }
    }
    (hits, misses)
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

#[test]
fn block_hits_with_readahead_match_the_simulators() {
    let script = script();
    let policies = [
        ("dual", PolicyConfig::default_for("dual").expect("dual")),
        (
            "dual:alpha=1,preface_max_blocks=8",
            PolicyConfig::Dual(DualConfig {
                alpha: 1.0,
                preface_max_blocks: 8,
                ..DualConfig::default()
            }),
        ),
        ("lru", PolicyConfig::default_for("lru").expect("lru")),
        ("ons", PolicyConfig::default_for("ons").expect("ons")),
    ];
    for (label, policy) in &policies {
        let without = simulator(policy, &script);
        for stripes in [1, 2] {
            let served = gateway_reading_ahead(policy, stripes, &script);
            let predicted = simulator_reading_ahead(policy, stripes, &script);
            println!(
                "{label}, {stripes} stripe(s) × {SERVERS} servers: gateway {} hits / {} misses, \
                 simulator {} / {}; without readahead {} / {}",
                served.0, served.1, predicted.0, predicted.1, without.0, without.1
            );
            assert_eq!(served, predicted, "{label}, {stripes} stripes");
            assert!(
                served.0 > without.0,
                "{label}: readahead turns misses into hits"
            );
        }
    }
}
